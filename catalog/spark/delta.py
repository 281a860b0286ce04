"""Delta Lake in statecat's Spark: delta-spark's jars, its SQL extension and its catalog in every session.

The jars are Delta's Maven artifact matching the installed ``delta-spark`` Python package
(``io.delta:delta-spark_<scala>:<version>``, as ``delta.configure_spark_with_delta_pip`` names it),
resolved once with Spark's own Ivy (``spark-submit --packages``) from Maven Central into
``$XDG_CACHE_HOME/statecat/delta-<version>/`` and listed there; later sessions load the listed jars
without resolving again, so they start as fast as before and work offline. ``STATECAT_MAVEN_REPOSITORY``
names a mirror instead of Maven Central. Only Maven Central (or that mirror) is asked: Spark's default
chain also asks ``~/.m2``, where a POM without its jar (left by Maven) fails the whole resolution.

Delta must be the session catalog (``spark_catalog``), and Spark then loads tables of Python data
sources as V1 tables it cannot read; ``FlinkStateDeltaCatalog`` (java-delta/, compiled on first use
against these jars) is Delta's catalog loading ``flinkstate`` tables as Spark's own catalog does.

When the jars cannot be had (offline on first use, no JDK), a session says so in one line and runs
without Delta; ``delta_unavailable()`` gives that line to what needs Delta (``statecat attach --lake``).
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from statecat.catalog.spark.extension import cache_dir, compiled_jar, pyspark_home, spark_jars_dir
from statecat.catalog.spark.locks import exclusive_lock
from statecat.statemeta.errors import StatecatError

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
SESSION_CATALOG = "spark.sql.catalog.spark_catalog"
CATALOG_CLASS = "statecat.spark.delta.FlinkStateDeltaCatalog"
CATALOG_SOURCES = Path(__file__).resolve().parent / "java-delta"
MAVEN_CENTRAL = "https://repo1.maven.org/maven2/"
REPOSITORY_ENV = "STATECAT_MAVEN_REPOSITORY"
JAR_LIST = "jars.txt"
CLASSPATH_SETTINGS = ("spark.driver.extraClassPath", "spark.executor.extraClassPath")
RESOLVE_TIMEOUT_S = 900
IVY_SETTINGS = """<ivysettings>
  <settings defaultResolver="maven"/>
  <resolvers>
    <ibiblio name="maven" m2compatible="true" root="{root}"/>
  </resolvers>
</ivysettings>
"""
_log = logging.getLogger("statecat")
_state: dict[str, str | None] = {}  # "unavailable": the one line said, per process


class DeltaUnavailableError(StatecatError):
    """Delta's jars could not be resolved or loaded: sessions run without Delta."""

    def __init__(self, message: str):
        super().__init__(
            message,
            hint=f"Reach Maven Central once (the jars are then kept in {cache_dir()}), or name a mirror "
            f"with {REPOSITORY_ENV}",
        )


def delta_version() -> str:
    """The installed delta-spark Python package's version: its Maven artifact has the same one."""
    return importlib.metadata.version("delta-spark")


def delta_package() -> str:
    """Delta's Maven coordinate for this pyspark's Scala version."""
    return f"io.delta:delta-spark_{_scala_version()}:{delta_version()}"


def _scala_version() -> str:
    for name in os.listdir(spark_jars_dir()):
        if name.startswith("spark-core_") and name.endswith(".jar"):
            return name[len("spark-core_") :].split("-", 1)[0]
    return "2.13"


def delta_jars() -> list[str]:
    """Delta's jars, resolved from Maven on first use; raises DeltaUnavailableError with the reason."""
    home = cache_dir() / f"delta-{delta_version()}"
    listed = _listed(home)
    if listed is not None:
        return listed
    home.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(home / ".lock"):  # one resolution at a time: the others wait, then read its list
        listed = _listed(home)
        if listed is None:
            listed = _resolve(home)
    return listed


def _listed(home: Path) -> list[str] | None:
    try:
        jars = (home / JAR_LIST).read_text().split()
    except OSError:
        return None
    return jars if jars and all(os.path.isfile(jar) for jar in jars) else None


def _resolve(home: Path) -> list[str]:
    repository = os.environ.get(REPOSITORY_ENV) or MAVEN_CENTRAL
    package = delta_package()
    settings = home / "ivysettings.xml"
    settings.write_text(IVY_SETTINGS.format(root=repository))
    ivy = home / "ivy"
    with tempfile.TemporaryDirectory(prefix="statecat-delta-") as scratch:
        # spark-submit resolves --packages before it runs anything: an empty program, run by this Python.
        program = Path(scratch, "resolved.py")
        program.write_text("")
        env = dict(os.environ, SPARK_HOME=pyspark_home(), PYSPARK_PYTHON=sys.executable)
        env.pop("PYSPARK_SUBMIT_ARGS", None)
        command = [
            os.path.join(pyspark_home(), "bin", "spark-submit"),
            "--packages",
            package,
            "--conf",
            f"spark.jars.ivy={ivy}",
            "--conf",
            f"spark.jars.ivySettings={settings}",
            str(program),
        ]
        try:
            done = subprocess.run(
                command, env=env, capture_output=True, text=True, timeout=RESOLVE_TIMEOUT_S, cwd=scratch
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise DeltaUnavailableError(_unavailable(package, repository, str(exc))) from None
    if done.returncode != 0:
        raise DeltaUnavailableError(_unavailable(package, repository, _ivy_reason(done.stdout + done.stderr)))
    shipped = _artifacts(os.listdir(spark_jars_dir()))
    jars = sorted(
        str(jar)
        for jar in (ivy / "jars").glob("*.jar")
        # Ivy names them group_artifact-version.jar; what pyspark ships already (Hadoop, Parquet,
        # Jackson, logging) stays Spark's own version, which the driver would load first anyway.
        if _artifact(jar.name.split("_", 1)[-1]) not in shipped
    )
    if not any(Path(jar).name.startswith("io.delta_delta-spark") for jar in jars):
        raise DeltaUnavailableError(_unavailable(package, repository, f"no delta-spark jar in {ivy / 'jars'}"))
    listing = home / f"{JAR_LIST}.{os.getpid()}.tmp"
    listing.write_text("\n".join(jars) + "\n")
    os.replace(listing, home / JAR_LIST)  # the list appears whole, after every jar it names
    return jars


def _artifact(jar_name: str) -> str:
    """``parquet-hadoop-1.16.0.jar`` -> ``parquet-hadoop``."""
    stem = jar_name[: -len(".jar")] if jar_name.endswith(".jar") else jar_name
    parts = stem.split("-")
    for i, part in enumerate(parts):
        if i and part[:1].isdigit():
            return "-".join(parts[:i])
    return stem


def _artifacts(names: list[str]) -> set[str]:
    return {_artifact(name) for name in names if name.endswith(".jar")}


def _ivy_reason(output: str) -> str:
    """What Ivy's report says went wrong, in one line."""
    unreachable = any(word in output for word in ("Connection refused", "UnknownHostException", "timed out"))
    for marker in ("unresolved dependency", "download failed"):
        for line in output.splitlines():
            if marker in line:
                reason = line[line.index(marker) :].rstrip("]").strip()
                return reason + (" (the repository could not be reached)" if unreachable else "")
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return lines[-1] if lines else "spark-submit failed without a message"


def _unavailable(package: str, repository: str, reason: str) -> str:
    return f"Delta Lake's jars ({package}) could not be resolved from {repository}: {reason}"


def delta_conf(conf: dict[str, str] | None = None) -> dict[str, str]:
    """Spark settings that load Delta (its jars, SQL extension and statecat's Delta catalog), merged into
    ``conf``; ``conf`` unchanged, said once on stderr, when Delta cannot be had."""
    conf = dict(conf or {})
    if SESSION_CATALOG in conf:  # the caller chose its own session catalog
        return conf
    try:
        jars = delta_jars()
        catalog_jar = compiled_jar("statecat-delta", CATALOG_SOURCES, jars)
    except DeltaUnavailableError as exc:
        _say_unavailable(str(exc))
        return conf
    if catalog_jar is None:  # no JDK: said by compiled_jar
        _state["unavailable"] = "Delta Lake needs a JDK (javac) to build statecat's Delta catalog"
        return conf
    # On the JVMs' own classpath, not spark.jars: the session catalog is loaded for every session by
    # the thread that opens it, and a JDBC or Spark Connect handler thread does not see spark.jars.
    for key in CLASSPATH_SETTINGS:
        _merge(conf, key, [*jars, catalog_jar], separator=os.pathsep)
    _merge(conf, "spark.sql.extensions", [DELTA_EXTENSION])
    conf[SESSION_CATALOG] = CATALOG_CLASS
    return conf


def _say_unavailable(line: str) -> None:
    if _state.get("unavailable") != line:
        print(f"statecat: {line}; this session runs without Delta", file=sys.stderr, flush=True)
    _state["unavailable"] = line


def delta_unavailable() -> str | None:
    """Why this process's sessions run without Delta, if they do."""
    return _state.get("unavailable")


def _merge(conf: dict[str, str], key: str, values: list[str], separator: str = ",") -> None:
    present = [item for item in conf.get(key, "").split(separator) if item]
    conf[key] = separator.join(present + [value for value in values if value not in present])
