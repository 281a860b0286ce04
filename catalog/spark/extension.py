"""statecat's Spark extension jar: columnar state scans (catalog/spark/java-extension/).

No Maven here or on a user's machine is assumed: the jar is compiled on first use with the JDK's
``javac`` against the installed pyspark's own jars, and cached per source and Spark version in
``$XDG_CACHE_HOME/statecat`` (default ``~/.cache/statecat``). Without a JDK, sessions go without it
and read state tables through the row-wise Python data source (same rows, slower scans), saying so once.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

EXTENSIONS_CLASS = "statecat.spark.StatecatExtensions"
# A session setting: false reads state tables through the Python data source (row by row).
COLUMNAR_ENABLED = "spark.statecat.columnar.enabled"
SOURCES = Path(__file__).resolve().parent / "java-extension"
CACHE_ENV = "XDG_CACHE_HOME"
JAVAC_TIMEOUT_S = 300
_log = logging.getLogger("statecat")
_built: dict[str, str | None] = {}
NO_JDK_SAID = "no-jdk-said"


class JarBuildError(Exception):
    """javac failed on statecat's own sources: a bug or an incompatible Spark, with javac's output."""


def _javac() -> str | None:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and os.path.isfile(os.path.join(java_home, "bin", "javac")):
        return os.path.join(java_home, "bin", "javac")
    return shutil.which("javac")


def pyspark_home() -> str:
    """The installed pyspark's directory: a Spark distribution (``bin/``, ``conf/``, ``jars/``)."""
    import pyspark

    return os.path.dirname(pyspark.__file__)


def spark_jars_dir() -> str:
    """The installed pyspark's jar directory: the metastore server's classpath and the extension's build path."""
    return os.path.join(pyspark_home(), "jars")


def cache_dir() -> Path:
    """statecat's cache: ``$XDG_CACHE_HOME/statecat``, default ``~/.cache/statecat``."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache") / "statecat"


def extension_jar() -> str | None:
    """The path of the compiled extension jar, building it when the cache has none; None without a JDK."""
    return compiled_jar("statecat-spark", SOURCES, [])


def compiled_jar(name: str, sources_root: Path, classpath: list[str]) -> str | None:
    """``name-<hash>.jar`` of the Java sources under ``sources_root`` compiled against pyspark's jars and
    ``classpath``, built when the cache has none; None without a JDK (said once)."""
    import pyspark

    sources = sorted(sources_root.rglob("*.java"))
    digest = hashlib.sha256(pyspark.__version__.encode())
    for entry in classpath:
        digest.update(b"\0" + os.path.basename(entry).encode())
    for source in sources:
        digest.update(source.relative_to(sources_root).as_posix().encode() + b"\0" + source.read_bytes())
    version = f"{name}-{digest.hexdigest()[:16]}"
    if version in _built:
        return _built[version]
    jar = cache_dir() / f"{version}.jar"
    if not jar.is_file():
        javac = _javac()
        if javac is None:
            if not _built.get(NO_JDK_SAID):
                _log.warning(
                    "statecat: no javac (JDK) found, so state tables are read row by row through "
                    "Spark's Python data source and sessions go without Delta Lake; install a JDK 17+ "
                    "(or set JAVA_HOME) for columnar scans and Delta tables"
                )
                _built[NO_JDK_SAID] = "said"
            _built[version] = None
            return None
        _build(javac, sources, jar, classpath)
    _built[version] = str(jar)
    return str(jar)


def _build(javac: str, sources: list[Path], jar: Path, classpath: list[str]) -> None:
    jar.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="statecat-javac-") as scratch:
        classes = Path(scratch, "classes")
        done = subprocess.run(
            [
                javac,
                "--release",
                "17",
                "-nowarn",
                "-encoding",
                "UTF-8",
                "-d",
                str(classes),
                "-cp",
                os.pathsep.join([os.path.join(spark_jars_dir(), "*"), *classpath]),
                *map(str, sources),
            ],
            capture_output=True,
            text=True,
            timeout=JAVAC_TIMEOUT_S,
        )
        if done.returncode != 0:
            raise JarBuildError(
                f"javac failed on statecat's Java sources ({sources[0].parent}):\n{done.stderr.strip()}"
            )
        # Written beside its final name and renamed: a session starting at the same time sees the
        # whole jar or none.
        partial = Path(tempfile.mkstemp(prefix=jar.name, suffix=".partial", dir=jar.parent)[1])
        try:
            with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
                for path in sorted(classes.rglob("*.class")):
                    archive.write(path, path.relative_to(classes).as_posix())
            os.replace(partial, jar)
        finally:
            partial.unlink(missing_ok=True)


def columnar_conf(conf: dict[str, str] | None = None) -> dict[str, str]:
    """Spark settings that load the extension, merged into ``conf``'s own jars and extensions;
    ``conf`` unchanged when there is no JDK to build it."""
    conf = dict(conf or {})
    jar = extension_jar()
    if jar is None:
        return conf
    for key, value in (("spark.jars", jar), ("spark.sql.extensions", EXTENSIONS_CLASS)):
        present = [item for item in conf.get(key, "").split(",") if item]
        if value not in present:
            conf[key] = ",".join(present + [value])
    return conf
