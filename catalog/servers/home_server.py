"""The home's server for every client: started in the background on first need, found after.

``statecat sql`` and ``statecat.catalog.session()`` use the ``statecat serve`` running on the home
(``serve.json``); when none runs, the first of them starts one in the background, as the shared
metastore is started, and later ones find it. Such a server stops after
``STATECAT_SERVER_IDLE_SECONDS`` (default 600) without a client, and logs to ``HOME/serve.log``.
A Spark Connect client of it answers in about a second where a session of one's own takes 15.

Only a statecat home with the shared metastore has a home server: with ``STATECAT_METASTORE=embedded``
(one process per catalog) or a ``hive-site.xml`` metastore, sessions stay in-process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

from statecat.catalog.servers.local_ports import free_ports, process_alive
from statecat.catalog.servers.thrift_server import ServerInfo, live_server
from statecat.catalog.spark.locks import exclusive_lock
from statecat.statemeta.errors import StatecatError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

IDLE_ENV = "STATECAT_SERVER_IDLE_SECONDS"
DEFAULT_IDLE_SECONDS = 600
LOG_FILE = "serve.log"
START_LOCK = "serve.start.lock"
# A cold start: Spark, the metastore and (the first time on a machine) Delta's jars from Maven.
START_TIMEOUT_SECONDS = 600


def server_home(home: str | None) -> str | None:
    """The statecat home whose server clients share, or None where sessions stay in-process: an
    embedded or hive-site.xml metastore, or a process that already runs Spark of its own (PySpark
    allows no Connect session beside it, and that session answers at once)."""
    from statecat.catalog.servers.sessions import SHARED, metastore_mode, resolve_home

    resolved = resolve_home(home)
    if resolved is None or metastore_mode() != SHARED or local_spark_running():
        return None
    return resolved


def local_spark_running() -> bool:
    context = sys.modules.get("pyspark.core.context")
    return context is not None and context.SparkContext._active_spark_context is not None


def idle_seconds() -> float:
    text = os.environ.get(IDLE_ENV, "").strip()
    try:
        seconds = float(text) if text else DEFAULT_IDLE_SECONDS
    except ValueError:
        raise StatecatError(f"{IDLE_ENV}={text!r} is not a number of seconds") from None
    if seconds <= 0:
        raise StatecatError(f"{IDLE_ENV}={text!r} must be positive")
    return seconds


def ensure_server(home: str) -> ServerInfo:
    """The running server of ``home`` (a resolved statecat home), started in the background if none runs."""
    info = live_server(home)
    if info is not None:
        return info
    os.makedirs(home, exist_ok=True)
    with exclusive_lock(os.path.join(home, START_LOCK)):  # one starter per home; the others wait and find it
        info = live_server(home)
        if info is None:
            info = _start(home)
    return info


def _start(home: str) -> ServerInfo:
    log_path = os.path.join(home, LOG_FILE)
    port, connect_port = free_ports(2)
    command = [
        sys.executable,
        "-m",
        "statecat.catalog.cli",
        "serve",
        "--home",
        home,
        "--port",
        str(port),
        "--connect-port",
        str(connect_port),
        "--idle-timeout",
        f"{idle_seconds():g}",
    ]
    with open(log_path, "ab") as log, open(os.devnull, "rb") as nothing:
        log.write(f"\n--- started by {' '.join(sys.argv[:2]) or 'python'} (pid {os.getpid()})\n".encode())
        log.flush()
        # Its own session: it outlives this process and is not stopped by the terminal's Ctrl-C.
        process = subprocess.Popen(
            command, stdin=nothing, stdout=log, stderr=log, start_new_session=True, close_fds=True
        )
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while True:
        info = live_server(home)
        if info is not None and info.pid == process.pid:
            return info
        exited = process.poll()
        if exited is not None:
            raise StatecatError(
                f"the home's server did not start (exit {exited}): {_last_line(log_path)}",
                hint=f"See {log_path}; or run the query in this process with --local",
            )
        if time.monotonic() > deadline:
            process.terminate()
            raise StatecatError(
                f"the home's server did not start within {START_TIMEOUT_SECONDS} s", hint=f"See {log_path}"
            )
        time.sleep(0.2)  # polling a child that writes serve.json when ready


def _last_line(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            lines = [line.strip() for line in f.read()[-20000:].splitlines() if line.strip()]
    except OSError:
        return "no log"
    # The last line statecat wrote ("statecat: ..."), else the log's last line.
    said = [line for line in lines if line.startswith("statecat")]
    return (said or lines or ["no log"])[-1]


def connect(info: ServerInfo) -> SparkSession:
    """A Spark Connect session on the server."""
    from pyspark.sql import SparkSession

    if info.connect_url is None:
        raise StatecatError(
            f"the home's server (pid {info.pid}, {info.url}) serves no Spark Connect",
            hint="Restart `statecat serve` without --connect-port 0, or use a local session (local=True)",
        )
    return SparkSession.builder.remote(info.connect_url).getOrCreate()


def session(home: str | None = None, *, local: bool = False, **local_options: Any) -> SparkSession:
    """A Spark session on the statecat home's catalog, with the ``flinkstate`` source, pushdown and Delta.

    A Spark Connect session on the home's server (started in the background when none runs) in
    about a second; ``local=True``, local session options (``master``, ``conf``, ...), an embedded
    metastore or a ``hive-site.xml`` metastore give an in-process session instead
    (``servers.sessions.session``), which starts Spark in about 15 s.
    """
    home_dir = None if local or local_options else server_home(home)
    if home_dir is None:
        from statecat.catalog.servers.sessions import session as local_session

        return local_session(home, **local_options)
    return connect(ensure_server(home_dir))


def edit_session(home: str | None = None) -> SparkSession:
    """Where ``statecat write`` evaluates statements: the home's server over Spark Connect when one
    runs (about a second), else this process's Spark (started now; a write does not start a server)."""
    home_dir = server_home(home)
    info = live_server(home_dir) if home_dir is not None else None
    if info is not None and info.connect_url is not None:
        return connect(info)
    from statecat.catalog.servers.sessions import session as local_session

    return local_session(home, quiet=True)


def stop_server(home: str, timeout: float = 60.0) -> bool:
    """Stops the home's server if one runs (SIGTERM, then waits); whether one was running."""
    import signal

    info = live_server(home)
    if info is None:
        return False
    os.kill(info.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while process_alive(info.pid) and time.monotonic() < deadline:
        time.sleep(0.1)  # waiting for another process's exit
    return True
