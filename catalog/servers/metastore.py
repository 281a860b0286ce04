"""The shared metastore of a statecat home: a Hive metastore server that every process on the home joins.

Spark's embedded Derby metastore admits one process at a time, so a second ``spark-sql``, notebook,
``statecat attach`` or ``statecat serve`` on the same home used to fail after a minute of stack traces.
Instead, the first statecat process on a home starts Hive's own metastore server (``HiveMetaStore``,
in pyspark's jars) on loopback, in front of the home's Derby database (``metastore_db``, the same
files the embedded mode uses), and every Spark session joins it through ``hive.metastore.uris``.

A small supervisor process owns the server: it records ``metastore.json`` (port and pids) in the
home, and stops the server when no client has been connected for ``STATECAT_METASTORE_IDLE_SECONDS``
(default 600) or on ``statecat metastore stop``. Starting is serialised by a lock file, so processes
racing to start share one server.

``conf/`` in the home holds a ``spark-defaults.conf`` and a ``log4j2.properties`` for Spark programs
statecat does not start itself: ``SPARK_CONF_DIR=$(statecat metastore conf) spark-sql`` (or
``statecat spark-sql``) joins the same catalog with statecat's source, pushdown and quiet logs.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from statecat.catalog.servers.local_ports import (
    LOOPBACK,
    TCP_ESTABLISHED,
    accepts,
    listening,
    process_alive,
    sockets_on,
)
from statecat.catalog.servers.sessions import (
    HIVE_NOISE,
    SESSION_SETTINGS,
    TASK_FAILURE_ECHOES,
    hive_scratch_conf,
    log4j2_properties,
)
from statecat.catalog.spark.delta import delta_conf
from statecat.catalog.spark.extension import columnar_conf, spark_jars_dir
from statecat.catalog.spark.locks import exclusive_lock
from statecat.statemeta.errors import StatecatError

if TYPE_CHECKING:
    from types import FrameType

METASTORE_MAIN = "org.apache.hadoop.hive.metastore.HiveMetaStore"
STATE_FILE = "metastore.json"
LOCK_FILE = "metastore.lock"
LOG_FILE = "metastore.log"
CONF_DIR = "conf"
DERBY_DIR = "metastore_db"
WAREHOUSE_DIR = "spark-warehouse"
SCRATCH_DIR = "scratch"
IDLE_ENV = "STATECAT_METASTORE_IDLE_SECONDS"
DEFAULT_IDLE_SECONDS = 600
START_TIMEOUT_SECONDS = 180  # a busy 2-core machine takes up to a minute to boot the JVM and Derby
POLL_SECONDS = 0.2
SERVER_HEAP = "-Xmx512m"

# DataNucleus warns about the schema version it does not verify: noise in a log read only when the
# server fails. The supervisor sends the server's stdout to the log file.
SERVER_LOG4J2 = log4j2_properties(
    "warn", {**HIVE_NOISE, "DataNucleus": "error", "org.apache.hadoop.hive.metastore.ObjectStore": "error"}, target=None
)
# Plain spark-sql / spark-submit on the home: errors once, not the executor's and scheduler's echoes of them.
CLIENT_LOG4J2 = log4j2_properties(
    "warn", {**TASK_FAILURE_ECHOES, **HIVE_NOISE, "org.apache.hadoop.hive.ql.session.SessionState": "error"}
)


class MetastoreError(StatecatError):
    """The home's metastore server could not be started or reached."""


@dataclass(frozen=True)
class MetastoreServer:
    home: str
    port: int
    supervisor_pid: int
    server_pid: int
    started_at: str

    @property
    def uri(self) -> str:
        return f"thrift://{LOOPBACK}:{self.port}"

    @property
    def warehouse(self) -> str:
        return os.path.join(self.home, WAREHOUSE_DIR)


def running(home: str) -> MetastoreServer | None:
    """The home's server if its supervisor is alive and its port accepts connections."""
    server = _read_state(home)
    if server is None or not process_alive(server.supervisor_pid) or not accepts(LOOPBACK, server.port):
        return None
    return server


def start(home: str, *, wait: bool = True) -> MetastoreServer:
    """The home's running server, started if there is none; ``wait=False`` returns once its port is
    known (the caller boots Spark meanwhile, then calls ``wait_ready``)."""
    home = os.path.abspath(home)
    os.makedirs(home, exist_ok=True)
    with exclusive_lock(os.path.join(home, LOCK_FILE)):
        server = running(home)
        if server is not None:
            return server
        server = _read_state(home)
        if server is None or not process_alive(server.supervisor_pid):  # else: being started by another process
            _check_derby_free(home)
            port = _free_port()
            with open(os.path.join(home, LOG_FILE), "ab") as log:
                # A session of its own: the supervisor outlives the command that started it.
                supervisor = subprocess.Popen(
                    [sys.executable, "-m", "statecat.catalog.servers.metastore", "supervise", home, str(port)],
                    cwd=home,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    start_new_session=True,
                )
            server = MetastoreServer(home, port, supervisor.pid, 0, dt.datetime.now(dt.UTC).isoformat())
            # Recorded at once, so that processes racing to start join this one.
            _write_atomically(os.path.join(home, STATE_FILE), json.dumps(server.__dict__))
    return wait_ready(server) if wait else server


def wait_ready(server: MetastoreServer) -> MetastoreServer:
    """Waits until ``server`` accepts connections; raises with its log's last lines if it fails."""
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        current = running(server.home)
        if current is not None and current.port == server.port:
            return current
        if not process_alive(server.supervisor_pid):
            break
        time.sleep(POLL_SECONDS)
    home = server.home
    raise MetastoreError(
        f"the shared metastore of {home} did not start: {_log_tail(home)}",
        hint=f"See {os.path.join(home, LOG_FILE)}; `statecat metastore stop --home {home}` "
        "and retry, or set STATECAT_METASTORE=embedded for a single process",
    )


def stop(home: str, timeout: float = 60.0) -> bool:
    """Stops the home's server; False if none was running."""
    server = _read_state(os.path.abspath(home))
    if server is None or not process_alive(server.supervisor_pid):
        return False
    os.kill(server.supervisor_pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while process_alive(server.supervisor_pid) and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)
    return True


def connected_clients(port: int) -> int:
    """Established TCP connections to ``port`` on this host (from /proc; 0 where there is no /proc)."""
    return sockets_on(port, TCP_ESTABLISHED)


def spark_conf(server: MetastoreServer) -> dict[str, str]:
    """Spark settings that join the server's catalog."""
    return {
        "spark.hadoop.hive.metastore.uris": server.uri,
        "spark.sql.warehouse.dir": server.warehouse,
        # Fail fast with statecat's message rather than retrying for a minute.
        "spark.hadoop.hive.metastore.connect.retries": "2",
    }


def write_client_conf(server: MetastoreServer, python: str = sys.executable) -> str:
    """Writes ``conf/`` for Spark programs statecat does not start; returns its path."""
    conf_dir = os.path.join(server.home, CONF_DIR)
    os.makedirs(conf_dir, exist_ok=True)
    log4j = os.path.join(conf_dir, "log4j2.properties")
    _write_atomically(log4j, CLIENT_LOG4J2)
    settings = {
        "spark.sql.catalogImplementation": "hive",
        **spark_conf(server),
        # Spark's Python workers must import statecat (its data source is found the same way).
        "spark.pyspark.python": python,
        "spark.pyspark.driver.python": python,
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{log4j}",
    }
    # As statecat's own sessions: Hive's local files in the home, pushdown, columnar state scans.
    settings = delta_conf(
        columnar_conf({**SESSION_SETTINGS, **settings, **hive_scratch_conf(os.path.join(server.home, SCRATCH_DIR))})
    )
    text = "# Written by statecat for its home's shared metastore; rewritten whenever the server starts.\n"
    text += "".join(f"{key} {value}\n" for key, value in settings.items())
    _write_atomically(os.path.join(conf_dir, "spark-defaults.conf"), text)
    return conf_dir


# -- the supervisor (python -m statecat.catalog.servers.metastore supervise HOME PORT) --


def _supervise(home: str, port: int) -> int:
    server_log4j = os.path.join(home, CONF_DIR, "metastore-log4j2.properties")
    os.makedirs(os.path.dirname(server_log4j), exist_ok=True)
    _write_atomically(server_log4j, SERVER_LOG4J2)
    derby = os.path.join(home, DERBY_DIR)
    # Hive's scratch defaults live under java.io.tmpdir (``/tmp/<user>``): keep them in the home.
    scratch = os.path.join(home, SCRATCH_DIR, "metastore")
    os.makedirs(scratch, exist_ok=True)
    command = [
        _java(),
        SERVER_HEAP,
        f"-Djava.io.tmpdir={scratch}",
        f"-Dderby.system.home={home}",
        f"-Dlog4j2.configurationFile=file:{server_log4j}",
        "-Dhive.async.log.enabled=false",
        "-cp",
        os.path.join(spark_jars_dir(), "*"),
        METASTORE_MAIN,
        "-p",
        str(port),
        "--hiveconf",
        f"javax.jdo.option.ConnectionURL=jdbc:derby:;databaseName={derby};create=true",
        "--hiveconf",
        "datanucleus.schema.autoCreateAll=true",
        # Hive's default pool (BoneCP) is not among Spark's jars; DROP DATABASE needs a pool.
        "--hiveconf",
        "datanucleus.connectionPoolingType=DBCP",
        "--hiveconf",
        "hive.metastore.schema.verification=false",
        "--hiveconf",
        f"hive.metastore.warehouse.dir={os.path.join(home, WAREHOUSE_DIR)}",
        "--hiveconf",
        "hive.async.log.enabled=false",
        "--hiveconf",
        f"hive.exec.local.scratchdir={scratch}",
        "--hiveconf",
        f"hive.querylog.location={scratch}",
        "--hiveconf",
        f"hive.downloaded.resources.dir={scratch}",
        "--hiveconf",
        f"hive.metastore.thrift.bind.host={LOOPBACK}",
    ]
    server = subprocess.Popen(command, cwd=home, stdin=subprocess.DEVNULL)
    stopping = False

    def _on_signal(signum: int, frame: FrameType | None) -> None:  # noqa: ARG001 - signal handler signature
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    state = MetastoreServer(home, port, os.getpid(), server.pid, dt.datetime.now(dt.UTC).isoformat())
    idle_limit = float(os.environ.get(IDLE_ENV, DEFAULT_IDLE_SECONDS))
    recorded = False
    idle_since = time.monotonic()
    try:
        while not stopping and server.poll() is None:
            if not recorded and listening(port):
                _write_atomically(os.path.join(home, STATE_FILE), json.dumps(state.__dict__))
                write_client_conf(state)
                recorded = True
                idle_since = time.monotonic()
            if recorded:
                if connected_clients(port) > 0:
                    idle_since = time.monotonic()
                elif time.monotonic() - idle_since > idle_limit:
                    print(f"statecat: metastore idle for {idle_limit:.0f} s, stopping", file=sys.stderr, flush=True)
                    break
            time.sleep(POLL_SECONDS if not recorded else 2.0)
    finally:
        with contextlib.suppress(FileNotFoundError):
            current = _read_state(home)
            if current is not None and current.supervisor_pid == os.getpid():
                os.unlink(os.path.join(home, STATE_FILE))
        if server.poll() is None:
            server.terminate()
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
    return 0 if recorded else 1


# -- helpers --


def _check_derby_free(home: str) -> None:
    """Refuses when another JVM has the home's Derby database open (an embedded session, an old server)."""
    lock = os.path.join(home, DERBY_DIR, "dbex.lck")
    if not os.path.exists(lock):
        return
    with open(lock, "rb") as f:
        try:
            fcntl.lockf(f, fcntl.LOCK_SH | fcntl.LOCK_NB)  # Derby holds an exclusive lock while the database is open
        except OSError:
            raise MetastoreError(
                f"the metastore database {os.path.join(home, DERBY_DIR)} is open in another process",
                hint="A Spark session with an embedded metastore (STATECAT_METASTORE=embedded, or a spark-sql "
                "started without statecat's conf) holds it; close that process, then retry",
            ) from None
        fcntl.lockf(f, fcntl.LOCK_UN)


def _read_state(home: str) -> MetastoreServer | None:
    try:
        with open(os.path.join(home, STATE_FILE)) as f:
            return MetastoreServer(**json.load(f))
    except (OSError, ValueError, TypeError):
        return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def _java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    return os.path.join(java_home, "bin", "java") if java_home else "java"


def _log_tail(home: str, lines: int = 3) -> str:
    try:
        text = Path(home, LOG_FILE).read_text(errors="replace").splitlines()
    except OSError:
        return "no log"
    interesting = [line for line in text if line.strip() and not line.startswith("\tat ")]
    return " | ".join(interesting[-lines:]) or "empty log"


def _write_atomically(path: str, text: str) -> None:
    temp = f"{path}.{os.getpid()}.tmp"
    with open(temp, "w") as f:
        f.write(text)
    os.replace(temp, path)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "supervise":
        sys.exit(_supervise(os.path.abspath(sys.argv[2]), int(sys.argv[3])))
    print("usage: python -m statecat.catalog.servers.metastore supervise HOME PORT", file=sys.stderr)
    sys.exit(2)
