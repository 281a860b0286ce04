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

# Hive settings that default to paths in the system temp directory (java.io.tmpdir); Hive creates
# ``<session id>_resources`` there for every session and never removes it.
HIVE_SCRATCH_SETTINGS = {
    "hive.downloaded.resources.dir": "resources",
    "hive.exec.local.scratchdir": "local",
    "hive.querylog.location": "querylog",
    "hive.exec.scratchdir": "scratch",
}

# Loggers whose output only repeats an error that reaches the caller as an exception anyway: PySpark's
# structured (JSON) query-context logs, and the JVM's per-task failure logs.
PYTHON_ERROR_ECHO_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")
QUIET_LOG4J2 = """\
status = error
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
rootLogger.level = error
rootLogger.appenderRef.console.ref = console
# PySpark counts as one of Spark's shells, whose level (else WARN, announced on stderr) comes from
# the logger of its main class.
logger.shell.name = org.apache.spark.api.python.PythonGatewayServer
logger.shell.level = error
logger.executor.name = org.apache.spark.executor.Executor
logger.executor.level = off
logger.tasks.name = org.apache.spark.scheduler.TaskSetManager
logger.tasks.level = off
"""


def session(home: str | None = None, *, master: str = "local[2]", app_name: str = "statecat",
            conf: dict | None = None, quiet: bool = False):
    """A Spark session with the Hive catalog, statecat's data source and filter pushdown on.

    ``home`` holds the embedded Derby metastore (``metastore_db``), the warehouse and ``derby.log``;
    by default Spark's own choice, the working directory, so that ``spark-sql`` started in the same
    place sees the attached savepoints. A ``hive-site.xml`` on Spark's conf path (a real Hive
    metastore) is used as is when ``home`` is not given.

    ``quiet`` (the CLI's sessions) logs errors only, and not those that reach the caller as an
    exception anyway. It takes effect when this call starts Spark; later calls reuse that session.
    """
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    # Spark's Python workers must import statecat: use this interpreter unless told otherwise.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (SparkSession.builder.master(master).appName(app_name).enableHiveSupport()
               .config("spark.sql.python.filterPushdown.enabled", "true")
               .config("spark.ui.enabled", "false"))
    java_options = []
    if home is not None:
        home = os.path.abspath(home)
        os.makedirs(home, exist_ok=True)
        builder = (builder
                   .config("spark.sql.warehouse.dir", os.path.join(home, "spark-warehouse"))
                   .config("spark.hadoop.javax.jdo.option.ConnectionURL",
                           f"jdbc:derby:;databaseName={os.path.join(home, 'metastore_db')};create=true"))
        java_options.append(f"-Dderby.system.home={home}")
    if SparkContext._active_spark_context is None:  # getOrCreate will start Spark: these settings apply
        scratch = _scratch_dir(home)
        for key, subdir in HIVE_SCRATCH_SETTINGS.items():
            builder = builder.config(f"spark.hadoop.{key}", os.path.join(scratch, subdir))
        if quiet:
            config = os.path.join(scratch, "log4j2.properties")
            with open(config, "w") as f:
                f.write(QUIET_LOG4J2)
            java_options.append(f"-Dlog4j2.configurationFile=file:{config}")
            builder = builder.config("spark.ui.showConsoleProgress", "false")
    conf = dict(conf or {})
    user_java_options = conf.pop("spark.driver.extraJavaOptions", "")
    if java_options or user_java_options:
        builder = builder.config("spark.driver.extraJavaOptions", " ".join(java_options + [user_java_options]).strip())
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if quiet:
        _silence_error_echoes()
    _register_source(spark)
    return spark


def _register_source(spark) -> None:
    # Spark finds installed ``pyspark_*`` modules by itself, but not through an editable install's
    # import hook; registering on the session works either way (the same class, so no conflict).
    from statecat.catalog.source import FlinkStateDataSource

    spark.dataSource.register(FlinkStateDataSource)


def _silence_error_echoes() -> None:
    from pyspark.logger import PySparkLogger

    for name in PYTHON_ERROR_ECHO_LOGGERS:
        # PySpark's own logger class: a plain Logger would reject the structured fields it logs.
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL + 1)


def _scratch_dir(home: str | None) -> str:
    """A private directory for one JVM's Hive scratch files: in ``home``, else the temp dir; removed at exit."""
    scratch = tempfile.mkdtemp(prefix="statecat-spark-", dir=home)
    atexit.register(shutil.rmtree, scratch, True)
    return scratch
