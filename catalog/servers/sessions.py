"""statecat's Spark sessions: local Spark with the Hive catalog, the ``flinkstate`` source and pushdown.

Everything a session writes outside Spark's own temp directories (which Spark removes at exit)
stays in one private scratch directory, removed when the interpreter exits: Hive's session
resources, local scratch and query logs, and the log configuration of quiet sessions.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import sys
import tempfile
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

HOME_ENV = "STATECAT_HOME"
DEFAULT_HOME = "~/.statecat"
METASTORE_ENV = "STATECAT_METASTORE"
SHARED, EMBEDDED = "shared", "embedded"
METASTORE_MODES = (SHARED, EMBEDDED)
_STARTED: dict = {}  # the SparkContext this module started, and its home

# Hive's local paths, relative to a scratch directory; by default they are in the system temp
# directory (java.io.tmpdir), where Hive creates ``<session id>_resources`` for every session and never
# removes it. Resources stay one directory per session, as in Hive's default: Hive deletes a session's
# resources directory when the session closes, so a shared one vanished under the sessions still open
# and made those opening at the same moment fail "Couldn't create directory .../resources".
HIVE_SCRATCH_SETTINGS = {
    "hive.downloaded.resources.dir": "resources/${hive.session.id}",
    "hive.exec.local.scratchdir": "local",
    "hive.querylog.location": "querylog",
    "hive.exec.scratchdir": "exec",
}
# Hive creates hive.exec.scratchdir itself (mode 733) and refuses one that exists with other permissions.
HIVE_SELF_CREATED = "hive.exec.scratchdir"

# Settings of every statecat session, and of conf/ for spark-sql (metastore.write_client_conf);
# a session's own conf overrides them.
SESSION_SETTINGS = {
    # Filter pushdown in Spark's Python data sources: statecat reads only the key-groups of `key = ...`.
    "spark.sql.python.filterPushdown.enabled": "true",
}

# Loggers whose output only repeats an error that reaches the caller as an exception anyway: PySpark's
# structured (JSON) query-context logs, and the JVM's per-task failure logs.
PYTHON_ERROR_ECHO_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")
LOG_PATTERN = "%d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex"
# The JVM's per-task failure logs only repeat an error the caller gets anyway.
TASK_FAILURE_ECHOES = {
    "org.apache.spark.executor.Executor": "off",
    "org.apache.spark.scheduler.TaskSetManager": "off",
    # A failed write (an edit's INSERT that Spark refused at run time) logs the task's and the job's abort.
    "org.apache.spark.util.Utils": "off",
    "org.apache.spark.sql.execution.datasources.FileFormatWriter": "off",
}
# Hive warns about every HiveConf name Spark does not define; Hadoop about its missing native code.
HIVE_NOISE = {"org.apache.hadoop.hive.conf.HiveConf": "error", "org.apache.hadoop.util.NativeCodeLoader": "error"}


def log4j2_properties(root_level: str, levels: dict[str, str], target: str | None = "SYSTEM_ERR") -> str:
    """A log4j2 configuration: one console appender (``target``, else the JVM's stdout), the root
    logger at ``root_level`` and each logger named in ``levels`` at its own level."""
    lines = ["status = error", "appender.console.type = Console", "appender.console.name = console"]
    if target is not None:
        lines.append(f"appender.console.target = {target}")
    lines += [
        "appender.console.layout.type = PatternLayout",
        f"appender.console.layout.pattern = {LOG_PATTERN}",
        f"rootLogger.level = {root_level}",
        "rootLogger.appenderRef.console.ref = console",
    ]
    for i, (name, level) in enumerate(levels.items()):
        lines += [f"logger.l{i}.name = {name}", f"logger.l{i}.level = {level}"]
    return "\n".join(lines) + "\n"


# PySpark counts as one of Spark's shells, whose level (else WARN, announced on stderr) comes from the
# logger of its main class.
QUIET_LOG4J2 = log4j2_properties(
    "error", {"org.apache.spark.api.python.PythonGatewayServer": "error", **TASK_FAILURE_ECHOES}
)


def session(
    home: str | None = None,
    *,
    master: str = "local[2]",
    app_name: str = "statecat",
    conf: dict | None = None,
    quiet: bool = False,
) -> SparkSession:
    """A Spark session with the Hive catalog, statecat's data source and filter pushdown on.

    ``home`` (default ``$STATECAT_HOME``, else ``~/.statecat``) holds the catalog: the metastore
    database (``metastore_db``), the warehouse and ``conf/``. Every process on a home joins one
    shared metastore server that the first of them starts (see ``metastore``), so any number of
    sessions, ``spark-sql`` shells and ``statecat serve`` work on it at once.
    ``STATECAT_METASTORE=embedded`` opens the Derby database in this process instead (one process
    at a time). A ``hive-site.xml`` on Spark's conf path (a real Hive metastore) is used as is when
    neither ``home`` nor ``$STATECAT_HOME`` is given.

    ``quiet`` (the CLI's sessions) logs errors only, and not those that reach the caller as an
    exception anyway. It takes effect when this call starts Spark; later calls reuse that session,
    except that a call naming another ``home`` stops the session this function started and starts
    one on that home's catalog (without ``home``, the running session is reused).
    """
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    # Spark's Python workers must import statecat: use this interpreter unless told otherwise.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master).appName(app_name).enableHiveSupport().config("spark.ui.enabled", "false")
    )
    for key, value in SESSION_SETTINGS.items():
        builder = builder.config(key, value)
    java_options = []
    shared_metastore = None
    explicit = bool(home)
    home = resolve_home(home)
    running = SparkContext._active_spark_context
    if explicit and running is not None and running is _STARTED.get("context") and home != _STARTED.get("home"):
        # A session of this process on another home's catalog: answering from it would be silently wrong.
        SparkSession.builder.getOrCreate().stop()
    starting = SparkContext._active_spark_context is None  # getOrCreate will start Spark: settings apply
    if home is not None and starting:
        os.makedirs(home, exist_ok=True)
        if metastore_mode() == EMBEDDED:
            from statecat.catalog.servers.metastore import DERBY_DIR, WAREHOUSE_DIR, _check_derby_free

            _check_derby_free(home)
            builder = builder.config("spark.sql.warehouse.dir", os.path.join(home, WAREHOUSE_DIR)).config(
                "spark.hadoop.javax.jdo.option.ConnectionURL",
                f"jdbc:derby:;databaseName={os.path.join(home, DERBY_DIR)};create=true",
            )
            java_options.append(f"-Dderby.system.home={home}")
        else:
            from statecat.catalog.servers import metastore

            # The metastore server boots while Spark does; the session waits for it before returning.
            shared_metastore = metastore.start(home, wait=False)
            for key, value in metastore.spark_conf(shared_metastore).items():
                builder = builder.config(key, value)
    if starting:
        _make_source_discoverable()
        scratch = _scratch_dir(home)
        for key, value in hive_scratch_conf(scratch).items():
            builder = builder.config(key, value)
        if quiet:
            config = os.path.join(scratch, "log4j2.properties")
            with open(config, "w") as f:
                f.write(QUIET_LOG4J2)
            java_options.append(f"-Dlog4j2.configurationFile=file:{config}")
        # Progress bars are noise in the CLI's output and in notebook cells (IPython).
        if quiet or getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)() is not None:
            builder = builder.config("spark.ui.showConsoleProgress", "false")
    conf = dict(conf or {})
    if starting:
        from statecat.catalog.spark.delta import delta_conf
        from statecat.catalog.spark.extension import columnar_conf

        conf = columnar_conf(conf)  # state tables read as Arrow columns (catalog/spark/java-extension/)
        conf = delta_conf(conf)  # Delta tables (statecat attach --lake), catalog/spark/delta.py
    user_java_options = conf.pop("spark.driver.extraJavaOptions", "")
    if java_options or user_java_options:
        builder = builder.config("spark.driver.extraJavaOptions", " ".join(java_options + [user_java_options]).strip())
    for key, value in conf.items():
        builder = builder.config(key, value)
    if starting:
        from statecat.catalog.servers.spark_tools import filtered_stderr

        with filtered_stderr():  # the JVM Spark launches now keeps a stderr without the JDK's incubator warning
            spark = builder.getOrCreate()
    else:
        spark = builder.getOrCreate()
    if starting:
        _STARTED.update(context=spark.sparkContext, home=home)
    if shared_metastore is not None:
        from statecat.catalog.servers.metastore import wait_ready

        wait_ready(shared_metastore)
        if starting:
            # Spark connects to the metastore on its catalog's first use, and the metastore stops
            # after minutes without a connection: a session that first read state files only would
            # find it gone at its first lookup (a function name, a table). Connected now, the
            # session's client counts as the metastore's client while the session lives.
            spark.catalog.listDatabases()
    if quiet:
        silence_error_echoes()
    _register_source(spark)
    return spark


def resolve_home(home: str | None) -> str | None:
    """The statecat home a session uses; None for a real Hive metastore configured by ``hive-site.xml``.

    A home that exists must be a directory (it is created on first use otherwise)."""
    if home:
        return _checked_home(os.path.abspath(home))
    if os.environ.get(HOME_ENV):
        return _checked_home(os.path.abspath(os.environ[HOME_ENV]))
    if _hive_site_configured():
        return None
    return _checked_home(os.path.abspath(os.path.expanduser(DEFAULT_HOME)))


def _checked_home(home: str) -> str:
    if os.path.exists(home) and not os.path.isdir(home):
        from statecat.statemeta.errors import StatecatError

        raise StatecatError(
            f"the statecat home {home} is not a directory",
            hint=f"Give a directory with --home or ${HOME_ENV} (it is created if missing)",
        )
    return home


def metastore_mode() -> str:
    mode = os.environ.get(METASTORE_ENV, SHARED).strip().lower() or SHARED
    if mode not in METASTORE_MODES:
        from statecat.statemeta.errors import StatecatError

        raise StatecatError(f"{METASTORE_ENV}={mode!r} is not one of {', '.join(METASTORE_MODES)}")
    return mode


def _hive_site_configured() -> bool:
    from statecat.catalog.spark.extension import pyspark_home

    for directory in (
        os.environ.get("SPARK_CONF_DIR"),
        os.path.join(os.environ["SPARK_HOME"], "conf") if os.environ.get("SPARK_HOME") else None,
        os.path.join(pyspark_home(), "conf"),
    ):
        if directory and os.path.isfile(os.path.join(directory, "hive-site.xml")):
            return True
    return False


SOURCE_MODULE = "pyspark_statecat"


def _make_source_discoverable() -> None:
    """Puts ``pyspark_statecat`` where Spark's own lookup of ``pyspark_*`` modules finds it, for the JVM
    about to start and its Python processes: every session Spark opens (a JDBC connection's, a Spark
    Connect client's) then has the ``flinkstate`` source, not only the one registered on below.

    Spark lists modules with ``pkgutil.iter_modules``, which an editable install's import hook does not
    show; a link to the package in a private directory on ``PYTHONPATH`` does. A regular install
    needs nothing."""
    import importlib.util
    import pkgutil

    if any(module.name == SOURCE_MODULE for module in pkgutil.iter_modules()):
        return
    spec = importlib.util.find_spec(SOURCE_MODULE)
    if spec is None or not spec.submodule_search_locations:
        return
    links = tempfile.mkdtemp(prefix="statecat-pythonpath-")
    atexit.register(shutil.rmtree, links, True)
    os.symlink(list(spec.submodule_search_locations)[0], os.path.join(links, SOURCE_MODULE))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [links, os.environ.get("PYTHONPATH")]))


def _register_source(spark: SparkSession) -> None:
    # Spark finds installed ``pyspark_*`` modules by itself, but not through an editable install's
    # import hook; registering on the session works either way (the same class, so no conflict).
    from statecat.catalog.spark.source import FlinkStateDataSource

    spark.dataSource.register(FlinkStateDataSource)


def silence_error_echoes() -> None:
    from pyspark.logger import PySparkLogger

    for name in PYTHON_ERROR_ECHO_LOGGERS:
        # PySpark's own logger class: a plain Logger would reject the structured fields it logs.
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL + 1)


def hive_scratch_conf(scratch: str) -> dict[str, str]:
    """``spark.hadoop.*`` settings that keep Hive's local files under ``scratch``; creates its directories.

    Created here rather than by Hive: each Hive session checks and creates them as it opens, and
    sessions opening at once (a served endpoint's clients) raced to do so.
    """
    conf = {}
    for key, relative in HIVE_SCRATCH_SETTINGS.items():
        path = os.path.join(scratch, relative)
        if key != HIVE_SELF_CREATED:
            # Up to the first per-session part (Hive's ${...} variables): that part is the session's own.
            os.makedirs(path.split("${", 1)[0], exist_ok=True)
        conf[f"spark.hadoop.{key}"] = path
    return conf


def _scratch_dir(home: str | None) -> str:
    """A private directory for one JVM's Hive scratch files: in ``home``, else the temp dir; removed at exit."""
    scratch = tempfile.mkdtemp(prefix="statecat-spark-", dir=home)
    atexit.register(shutil.rmtree, scratch, True)
    return scratch
