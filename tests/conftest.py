"""Session-wide test settings: statecat homes stay under pytest's temp dir, and every shared
metastore server (catalog/servers/metastore.py) and home server (catalog/servers/home_server.py)
a test started is stopped when the session ends."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

# The JVMs the suite starts in other processes (statecat commands and servers, the metastore,
# spark-sql, beeline, Flink jobs) are short-lived and compile far more than they run: with the C1
# compiler only, a Spark session's start and first queries take 40 % less CPU (48 -> 29 s measured on
# 2026-11-29), and the suite is CPU-bound on two cores. The Spark session each pytest process keeps
# runs hundreds of queries and keeps the JDK's defaults: under C1 alone the modules that use it took
# up to 60 % longer (test_write_sql, test_edit_differential, test_columnar_scan). Empty: the JDK's
# defaults everywhere.
TEST_JVM_OPTIONS = os.environ.get("STATECAT_TEST_JVM_OPTIONS", "-XX:TieredStopAtLevel=1")
_WRAPPED_JDK = "STATECAT_TEST_WRAPPED_JAVA_HOME"
_REAL_JDK = "STATECAT_TEST_REAL_JAVA_HOME"

# The modules that take longest (a minute or more each: JVM servers, real-Flink runs, Spark edits;
# measured by `--junitxml` on 2026-12-01), run first: .ci/test hands whole modules to its workers in
# this order, and a long module started last would run on alone at the end.
SLOW_FIRST = (
    "test_write_sql.py",
    "test_write_restore.py",
    "test_fixtures_live.py",
    "test_one_server.py",
    "test_materialize_spark.py",
    "test_process_boundary.py",
    "test_columnar_scan.py",
    "test_shared_metastore.py",
    "test_catalog.py",
    "test_restore_harness.py",
    "test_catalog_cli.py",
    "test_serve.py",
    "test_kryo_state.py",
    "test_detach_relocate.py",
    "test_materialize.py",
    "test_edit_differential.py",
    "test_fuzz.py",
    "test_notebook.py",
    "test_write_s3.py",
)


def pytest_configure(config):
    """JAVA_HOME becomes a copy of the JDK's directory of links whose ``bin/java`` adds
    TEST_JVM_OPTIONS: every launcher (spark-submit, Flink's, statecat's own) finds java there. The
    controller makes it; xdist's workers inherit the environment. Each process's own Spark session
    starts from the real JDK (_own_session_on_the_real_jdk)."""
    if not TEST_JVM_OPTIONS:
        return
    if not os.environ.get(_WRAPPED_JDK):
        java = (
            shutil.which("java", path=os.path.join(os.environ["JAVA_HOME"], "bin"))
            if os.environ.get("JAVA_HOME")
            else shutil.which("java")
        )
        if java is None:
            return  # the tests that need a JVM say so themselves
        real_home = Path(java).resolve().parents[1]
        wrapped = Path(tempfile.mkdtemp(prefix="statecat-test-jdk-"))
        for entry in real_home.iterdir():
            if entry.name != "bin":
                (wrapped / entry.name).symlink_to(entry)
        (wrapped / "bin").mkdir()
        for tool in (real_home / "bin").iterdir():
            if tool.name != "java":
                (wrapped / "bin" / tool.name).symlink_to(tool)
        launcher = wrapped / "bin" / "java"
        launcher.write_text(f'#!/bin/sh\nexec "{real_home / "bin" / "java"}" {TEST_JVM_OPTIONS} "$@"\n')
        launcher.chmod(0o755)
        config._statecat_wrapped_jdk = wrapped
        os.environ[_REAL_JDK] = str(real_home)
        os.environ[_WRAPPED_JDK] = os.environ["JAVA_HOME"] = str(wrapped)
        os.environ["PATH"] = f"{wrapped / 'bin'}{os.pathsep}{os.environ['PATH']}"
    _own_session_on_the_real_jdk(os.environ[_REAL_JDK])


def _own_session_on_the_real_jdk(real_home: str) -> None:
    """The JVM pyspark starts for this process's own session (spark-class runs $JAVA_HOME/bin/java)."""
    import pyspark.core.context as spark_context

    launch = spark_context.launch_gateway

    def launch_on_the_real_jdk(*args, **kwargs):
        wrapped = os.environ["JAVA_HOME"]
        os.environ["JAVA_HOME"] = real_home
        try:
            return launch(*args, **kwargs)
        finally:
            os.environ["JAVA_HOME"] = wrapped

    spark_context.launch_gateway = launch_on_the_real_jdk


def pytest_unconfigure(config):
    wrapped = getattr(config, "_statecat_wrapped_jdk", None)
    if wrapped is not None:
        shutil.rmtree(wrapped, ignore_errors=True)


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(SLOW_FIRST)))  # stable: the rest keep their order


@pytest.fixture(scope="session", autouse=True)
def _statecat_homes(tmp_path_factory):
    base = tmp_path_factory.getbasetemp()
    idle_settings = ("STATECAT_METASTORE_IDLE_SECONDS", "STATECAT_SERVER_IDLE_SECONDS")
    previous = {key: os.environ.get(key) for key in ("STATECAT_HOME", *idle_settings)}
    # A test that names no home must not use (or start a server for) the developer's ~/.statecat.
    os.environ["STATECAT_HOME"] = str(base / "default_statecat_home")
    # A server whose test was killed stops by itself soon after; a home server `statecat sql` started
    # in the background for one test's home stops a minute after that test's last query.
    os.environ.setdefault("STATECAT_METASTORE_IDLE_SECONDS", "300")
    os.environ.setdefault("STATECAT_SERVER_IDLE_SECONDS", "60")
    yield
    from statecat.catalog.servers import metastore
    from statecat.catalog.servers.home_server import stop_server
    from statecat.catalog.servers.thrift_server import SERVE_FILE

    for served in base.rglob(SERVE_FILE):  # servers `statecat sql` started in the background
        stop_server(str(served.parent))

    for state in base.rglob(metastore.STATE_FILE):
        metastore.stop(str(state.parent))
    for key, value in previous.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
