"""``statecat serve``: statecat's Spark as a JDBC/ODBC endpoint (Spark's Thrift server, HiveServer2)
and a Spark Connect endpoint.

One Python process builds statecat's session (the home's catalog, the ``flinkstate`` source,
pushdown, Delta), attaches the savepoints under the roots and starts Spark's ``HiveThriftServer2``
and Spark Connect (``SparkConnectPlugin``, from the pyspark wheel's own jar) in the same JVM, so
that beeline, BI tools, notebooks (``SparkSession.builder.remote("sc://…")``) and ``statecat sql``
run SQL through statecat's data source without starting Spark for each query. Each JDBC
connection and each Connect client gets its own Spark session on the shared catalog.

With ``idle_timeout`` (servers that ``statecat sql`` or ``statecat.catalog.session()`` started in
the background, see ``home_server``) it stops when no JDBC session is open, no Connect session is
active and no job runs for that long.

Every ``poll`` seconds it attaches the new savepoints under the roots, each once it is complete (its
``_metadata`` parses and every state file it names is there at full size: ``statemeta.completeness``),
the way ``statecat watch --attach`` does; and it creates the databases other processes registered
lazily. A damaged savepoint is logged and skipped until its ``_metadata`` changes.

While it serves, ``HOME/serve.json`` (pid, host, port, auth, started_at, connect_port) says where; ``statecat sql``
on the same home sends its queries there (see ``sql_client``).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import logging
import os
import shlex
import signal
import socket
import sys
import threading
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, TextIO, cast

from statecat.catalog.servers.local_ports import listening, process_alive
from statecat.statemeta.errors import StatecatError

if TYPE_CHECKING:
    from types import FrameType

    from py4j.java_gateway import JVMView
    from pyspark.sql import SparkSession

    from statecat.statemeta.files.storage import Storage

SERVE_FILE = "serve.json"
DEFAULT_BIND = "127.0.0.1"
DEFAULT_PORT = 10000
DEFAULT_CONNECT_PORT = 15002  # Spark Connect's own default
CONNECT_PLUGIN = "org.apache.spark.sql.connect.SparkConnectPlugin"
# How often an idle-timeout server looks for clients.
IDLE_CHECK_SECONDS = 1.0
# Activity is sampled this often on a thread of its own (ClientActivity.sample).
IDLE_SAMPLE_SECONDS = 0.25
DEFAULT_POLL_SECONDS = 10.0
AUTH_MODES = ("none", "nosasl", "ldap", "kerberos", "custom", "pam")
READY_TIMEOUT_SECONDS = 120
# A registered database is created by the process that registered it unless it registered lazily;
# waiting this long keeps the server from racing an `attach` still materialising.
LAZY_GRACE_SECONDS = 60.0
# Set from serve's own options; a --hiveconf naming them would contradict those.
OPTION_SETTINGS = {
    "hive.server2.thrift.bind.host": "--bind",
    "hive.server2.thrift.port": "--port",
    "hive.server2.thrift.http.port": "--port",
    "hive.server2.authentication": "--auth",
}
THRIFT_SERVER_CLASS = "org.apache.spark.sql.hive.thriftserver.HiveThriftServer2"

log = logging.getLogger("statecat.serve")


@dataclass(frozen=True)
class ServerInfo:
    """What ``serve.json`` records about a running server."""

    pid: int
    host: str
    port: int
    auth: str
    started_at: str
    connect_port: int | None = None  # None: no Spark Connect (--connect-port 0, or a server before it)

    @property
    def url(self) -> str:
        return f"jdbc:hive2://{_url_host(self.host)}:{self.port}/"

    @property
    def connect_host(self) -> str:
        """Where a client on this machine reaches it (a wildcard bind answers on loopback too)."""
        if self.host in ("", "0.0.0.0"):
            return "127.0.0.1"
        if self.host == "::":
            return "::1"
        return self.host

    @property
    def local_url(self) -> str:
        """The JDBC URL for a client on this machine."""
        return f"jdbc:hive2://{_url_host(self.connect_host)}:{self.port}/"

    @property
    def connect_url(self) -> str | None:
        """The Spark Connect URL for a client on this machine."""
        if self.connect_port is None:
            return None
        return f"sc://{_url_host(self.connect_host)}:{self.connect_port}"


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def serve_file(home: str) -> str:
    return os.path.join(home, SERVE_FILE)


def serve_home(home: str | None) -> str:
    """Where a server for ``home`` records itself: the statecat home, else (a metastore that a
    hive-site.xml names) the working directory."""
    from statecat.catalog.servers.sessions import resolve_home

    return resolve_home(home) or os.getcwd()


def statecat_command() -> str:
    """This statecat as a command any shell runs as pasted: the absolute path of the ``statecat``
    launcher next to this interpreter (a virtualenv's ``bin/``), else ``python -m``."""
    launcher = os.path.join(os.path.dirname(sys.executable), "statecat")
    if os.path.isfile(launcher) and os.access(launcher, os.X_OK):
        return shlex.quote(launcher)
    return f"{shlex.quote(sys.executable)} -m statecat.catalog.cli"


def query_hint(info: ServerInfo, home: str) -> str:
    """The commands that query the server, ready to paste into any shell."""
    statecat = statecat_command()
    home_option = f" --home {shlex.quote(home)}"
    return f'`{statecat} beeline -u {info.local_url}` or `{statecat} sql{home_option} "QUERY"`'


def read_server_info(home: str) -> ServerInfo | None:
    try:
        with open(serve_file(home)) as f:
            return ServerInfo(**json.load(f))
    except (OSError, ValueError, TypeError):
        return None


def live_server(home: str) -> ServerInfo | None:
    """The home's server if serve.json names a process that is alive and ports that listen."""
    info = read_server_info(home)
    if info is None or not process_alive(info.pid) or not listening(info.port):
        return None
    if info.connect_port is not None and not listening(info.connect_port):
        return None
    return info


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to any interface


def check_exposure(bind: str, auth: str | None, connect_port: int | None = None) -> None:
    """Only loopback is served without a deliberate choice of authentication; Spark Connect has none
    of HiveServer2's, so it is served only where JDBC is open too."""
    if auth is None and not is_loopback(bind):
        raise StatecatError(
            f"--bind {bind} exposes the savepoints beyond this machine and needs --auth",
            hint="Choose --auth none to serve without authentication, or ldap/kerberos/custom/pam with their "
            "--hiveconf settings",
        )
    if connect_port and auth is not None and auth.lower() not in ("none", "nosasl"):
        raise StatecatError(
            f"--auth {auth} protects JDBC only: Spark Connect (--connect-port {connect_port}) would be open to "
            "anyone who reaches it",
            hint="Add --connect-port 0 to serve JDBC alone",
        )


def parse_hiveconf(items: list[str]) -> dict[str, str]:
    settings = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise StatecatError(
                f"--hiveconf {item!r} is not KEY=VALUE", hint="e.g. --hiveconf hive.server2.thrift.min.worker.threads=2"
            )
        if key in OPTION_SETTINGS:
            raise StatecatError(
                f"--hiveconf {key} is set by {OPTION_SETTINGS[key]}", hint=f"Use {OPTION_SETTINGS[key]}"
            )
        settings[key] = value
    return settings


def _check_port_free(bind: str, port: int) -> None:
    family = socket.AF_INET6 if ":" in bind else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # As the server's own socket will: a port in TIME_WAIT after a restart is free.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((bind, port))
        except OSError as exc:
            raise StatecatError(
                f"cannot serve on {bind}:{port}: {exc.strerror or exc}",
                hint="Choose another --port, or stop what uses it",
            ) from None


def _write_atomically(path: str, text: str) -> None:
    temp = f"{path}.{os.getpid()}.tmp"
    with open(temp, "w") as f:
        f.write(text)
    os.replace(temp, path)


@dataclass
class _Seen:
    stamp: tuple[int, int]  # (size, mtime ns) of _metadata when last judged
    status: str  # new | waiting (state files missing or short) | failed
    needed: dict[str, int] | None = None  # state file -> least size, parsed once per stamp
    storage: Storage | None = None


class SavepointTracker:
    """Finds the savepoints under the roots that are new and complete; remembers why others wait."""

    def __init__(self, roots: list[str]):
        self.roots = roots
        self.seen: dict[str, _Seen] = {}

    def complete_new(self, known: set[str]) -> list[str]:
        from statecat.catalog.spark.discovery import discover_savepoints, normalise_path

        ready = []
        for root in self.roots:
            try:
                paths = discover_savepoints(normalise_path(root))
            except (StatecatError, OSError) as exc:  # a root that vanished: try again next poll
                log.warning("cannot list %s: %s", root, exc)
                continue
            for path in paths:
                if path not in known and self._complete(path):
                    ready.append(path)
        return ready

    def fail(self, path: str, error: str) -> None:
        entry = self.seen.get(path)
        if entry is not None and entry.status == "failed":
            return
        if entry is not None:
            stamp = entry.stamp
        else:
            try:
                stamp = self._stamp(path)
            except (StatecatError, OSError):
                stamp = (-1, -1)  # unreadable now: judged again on the next poll
        self.seen[path] = _Seen(stamp, "failed")
        log.error("skipping %s until its _metadata changes: %s", path, error)

    def _stamp(self, path: str) -> tuple[int, int]:
        from statecat.statemeta.files.storage import open_storage

        storage = open_storage(path)
        info = storage.filesystem.get_file_info(storage.metadata_path)
        return (info.size or 0, info.mtime_ns or 0)

    def _complete(self, path: str) -> bool:
        from statecat.statemeta.files.metadata import read_metadata
        from statecat.statemeta.files.storage import open_storage
        from statecat.statemeta.snapshotter.completeness import required_sizes, shortfalls

        try:
            stamp = self._stamp(path)
            entry = self.seen.get(path)
            if entry is not None and entry.stamp == stamp and entry.status == "failed":
                return False
            if entry is None or entry.stamp != stamp:
                storage = open_storage(path)
                entry = self.seen[path] = _Seen(stamp, "new", required_sizes(read_metadata(storage)), storage)
            # Every entry still judged was made with both (failed ones, made without, returned above).
            missing = shortfalls(cast("Storage", entry.storage), cast("dict[str, int]", entry.needed))
        except (StatecatError, OSError) as exc:  # damaged or vanished: skipped, the server goes on
            self.seen.pop(path, None)
            self.fail(path, str(exc))
            return False
        if missing:
            if entry.status != "waiting":  # said once; checked again every poll
                log.info("waiting for %s: %d state file(s) not there yet: %s", path, len(missing), missing[0])
                entry.status = "waiting"
            return False
        self.seen.pop(path, None)
        return True


class CatalogPoller:
    """Keeps the catalog up with the roots: attaches complete new savepoints, creates lazy databases."""

    def __init__(self, spark: SparkSession, roots: list[str]):
        self.spark = spark
        self.tracker = SavepointTracker(roots)
        self._missing_since: dict[str, float] = {}
        self._lazy_failed: set[str] = set()
        self._lakes: dict[str, str | None] = {}  # database -> the lake it was attached from, or None

    def poll(self, *, first: bool = False) -> list[str]:
        """One pass; returns the databases it created."""
        from statecat.catalog.spark.databases import attach
        from statecat.catalog.spark.registry import ensure_registry, registered

        if first:
            ensure_registry(self.spark)
        known = registered(self.spark)
        created = []
        new = self.tracker.complete_new(set(known))
        if new:
            result = attach(self.spark, new, eager=True)
            for path, error in result.failed:
                self.tracker.fail(path, error)
            for database in result.materialised:
                log.info("attached %s", database)
            created += result.materialised
            known = registered(self.spark)
        created += self._create_lazy(known, immediately=first)
        self._sync_lakes(set(known.values()))
        return created

    def _sync_lakes(self, savepoint_databases: set[str]) -> None:
        """Registers the state tables materialized since into the databases attached from lakes."""
        from statecat.catalog.spark.discovery import REGISTRY_DATABASE
        from statecat.catalog.spark.lakes import lake_of, sync_lake_database
        from statecat.catalog.spark.registry import existing_databases

        for database in sorted(existing_databases(self.spark) - savepoint_databases - {REGISTRY_DATABASE}):
            if database not in self._lakes:  # described once: a database does not become a lake's later
                self._lakes[database] = lake_of(self.spark, database)
            uri = self._lakes[database]
            if uri is None:
                continue
            for table in sync_lake_database(self.spark, database, uri):  # an unreachable lake: next poll
                log.info("registered %s.%s from the lake %s", database, table, uri)

    def _create_lazy(self, known: dict[str, str], immediately: bool) -> list[str]:
        from statecat.catalog.spark.databases import materialise
        from statecat.catalog.spark.registry import existing_databases

        existing = existing_databases(self.spark)
        now = time.monotonic()
        created = []
        for path, database in known.items():
            if database in existing or database in self._lazy_failed:
                self._missing_since.pop(database, None)
                continue
            since = self._missing_since.setdefault(database, now)
            if not immediately and now - since < LAZY_GRACE_SECONDS:
                continue
            try:
                materialise(self.spark, database, path)
            except StatecatError as exc:
                self._lazy_failed.add(database)
                log.error("skipping database %s (%s): %s", database, path, exc)
                continue
            except Exception as exc:  # noqa: BLE001 - e.g. created meanwhile by another process
                log.warning("could not create database %s now: %s", database, _first_line(exc))
                continue
            self._missing_since.pop(database, None)
            log.info("attached %s (registered lazily)", database)
            created.append(database)
        return created


def _first_line(exc: BaseException) -> str:
    from statecat.catalog.spark.errors import spark_error_message

    message = spark_error_message(exc)
    return message if message is not None else str(exc).splitlines()[0] if str(exc) else type(exc).__name__


# Hive's Hive.registerAllFunctionsOnce states (hive-exec 2.3: a static AtomicInteger).
HIVE_FUNCTIONS_REGISTERED = 2


def skip_hive_function_registry(spark: SparkSession) -> None:
    """Marks Hive's own function registry as loaded, so Hive never loads it.

    A JDBC session's close (and any thread that gets a fresh ``Hive`` object) calls
    ``Hive.reloadFunctions``, whose first touch of ``FunctionRegistry`` fails in pyspark's jars: its
    static initialiser needs hive-llap-common (``LlapSigner$Signable``), which the wheel does not ship
    (SPARK-51041). Hive catches only ``Exception``, so that ``NoClassDefFoundError`` leaves the
    registration "pending" and every later caller waits on it forever: a client hangs or its close
    fails, depending on which thread gets there first. Spark resolves functions itself and never asks
    Hive's registry, so marking it loaded loses nothing."""
    jvm = cast("JVMView", spark._jvm)  # set while the session runs
    field = jvm.java.lang.Class.forName("org.apache.hadoop.hive.ql.metadata.Hive").getDeclaredField(
        "didRegisterAllFuncs"
    )
    field.setAccessible(True)
    # py4j hands an AtomicInteger to Python as a plain int: get it and set it inside the JVM, as one
    # method handle composed of the field's getter and AtomicInteger.set.
    lookup = jvm.java.lang.invoke.MethodHandles.publicLookup()
    atomic_set = lookup.unreflect(
        jvm.java.lang.Class.forName("java.util.concurrent.atomic.AtomicInteger").getMethod(
            "set", _java_types(spark, jvm.java.lang.Integer.TYPE)
        )
    )
    set_registered = jvm.java.lang.invoke.MethodHandles.collectArguments(atomic_set, 0, lookup.unreflectGetter(field))
    arguments = jvm.java.util.ArrayList()
    arguments.add(HIVE_FUNCTIONS_REGISTERED)
    set_registered.invokeWithArguments(arguments)


def _java_types(spark: SparkSession, *types: Any) -> Any:  # a Java Class[] (Py4J)
    # The gateway and the JVM view are None only before Spark starts.
    array = spark.sparkContext._gateway.new_array(spark._jvm.java.lang.Class, len(types))  # type: ignore[union-attr]
    for i, java_type in enumerate(types):
        array[i] = java_type
    return array


def start_thrift_server(spark: SparkSession, settings: dict[str, str]) -> Any:  # the JVM's HiveThriftServer2
    """Starts HiveThriftServer2 on the session; ``settings`` (hive.server2.*) apply to it."""
    skip_hive_function_registry(spark)
    # The server takes its HiveConf from a Hive client built on the session's Hadoop configuration (which
    # takes in the session's settings), unless this thread already has a Hive SessionState (it has, once
    # the catalog was used): then that state's HiveConf, so the settings go there too.
    state = cast("JVMView", spark._jvm).org.apache.hadoop.hive.ql.session.SessionState.get()
    local_scratch = spark.sparkContext.getConf().get("spark.hadoop.hive.exec.local.scratchdir", None)
    if local_scratch:
        # Each JDBC session looks there for its pipeout files and logs an error when it is missing.
        os.makedirs(local_scratch, exist_ok=True)
    for key, value in settings.items():
        spark.conf.set(key, value)
        if state is not None:
            state.getConf().set(key, value)
    server_class: Any = spark._jvm  # then the class, through Py4J's JVM view
    for part in THRIFT_SERVER_CLASS.split("."):
        server_class = getattr(server_class, part)
    # False: a failure raises here instead of exiting the JVM.
    return server_class.startWithSparkSession(spark._jsparkSession, False)


def serve(
    *,
    home: str | None,
    roots: list[str],
    bind: str = DEFAULT_BIND,
    port: int = DEFAULT_PORT,
    poll_seconds: float = DEFAULT_POLL_SECONDS,
    auth: str | None = None,
    hiveconf: dict[str, str] | None = None,
    connect_port: int | None = DEFAULT_CONNECT_PORT,
    idle_timeout: float | None = None,
    out: TextIO | None = None,
    stop: threading.Event | None = None,
) -> int:
    """Serves until SIGTERM/SIGINT (or ``stop``, or ``idle_timeout`` seconds without a client);
    returns the exit status. ``connect_port`` None or 0 serves no Spark Connect."""
    from statecat.catalog.servers.sessions import session
    from statecat.catalog.spark.discovery import discover_savepoints, normalise_path

    out = out or sys.stdout
    connect_port = connect_port or None
    check_exposure(bind, auth, connect_port)
    auth = (auth or "none").lower()
    if auth not in AUTH_MODES:
        raise StatecatError(f"unknown --auth {auth!r}", hint=f"Choose one of {', '.join(AUTH_MODES)}")
    if poll_seconds <= 0:
        raise StatecatError(f"--poll {poll_seconds} must be positive")
    if idle_timeout is not None and idle_timeout <= 0:
        raise StatecatError(f"--idle-timeout {idle_timeout} must be positive")
    if connect_port == port:
        raise StatecatError(f"--connect-port {connect_port} is also --port", hint="Give them different ports")
    settings = {
        **(hiveconf or {}),
        "hive.server2.thrift.bind.host": bind,
        "hive.server2.thrift.port": str(port),
        "hive.server2.thrift.http.port": str(port),
        "hive.server2.authentication": auth.upper(),
    }
    home_dir = serve_home(home)
    running = live_server(home_dir)
    if running is not None:
        raise StatecatError(
            f"the home {home_dir} is already served on {running.url} (pid {running.pid})",
            hint="Query that server, or stop it first",
        )
    for root in roots:
        discover_savepoints(normalise_path(root))  # a root that does not exist is the user's error, now
    _check_port_free(bind, port)
    if connect_port is not None:
        _check_port_free(bind, connect_port)

    stop = stop or threading.Event()

    def _on_signal(signum: int, frame: FrameType | None) -> None:  # noqa: ARG001 - signal handler signature
        stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _on_signal)
        signal.signal(signal.SIGINT, _on_signal)

    conf = {}
    if connect_port is not None:
        conf = {
            "spark.plugins": CONNECT_PLUGIN,
            "spark.connect.grpc.binding.address": bind,
            "spark.connect.grpc.binding.port": str(connect_port),
        }
    spark = session(home, quiet=True, conf=conf)
    server = None
    recorded = False
    try:
        poller = CatalogPoller(spark, roots)
        poller.poll(first=True)
        if stop.is_set():
            return 0
        server = start_thrift_server(spark, settings)
        _wait_listening(port, stop, "the Thrift server")
        if connect_port is not None:
            _wait_listening(connect_port, stop, "Spark Connect")
        if stop.is_set():
            return 0
        info = ServerInfo(os.getpid(), bind, port, auth, dt.datetime.now(dt.UTC).isoformat(), connect_port)
        _write_atomically(serve_file(home_dir), json.dumps(asdict(info)))
        recorded = True
        databases = len(spark.catalog.listDatabases())
        connect = f", Spark Connect on {info.connect_url}" if info.connect_url else ""
        idle = f"; stops after {idle_timeout:g} s without clients" if idle_timeout else ""
        out.write(
            f"serving on {info.url}{connect} ({databases} databases, home {home_dir}); "
            f"{query_hint(info, home_dir)} query it; Ctrl-C stops{idle}\n"
        )
        out.flush()
        activity = ClientActivity(spark, server) if idle_timeout else None
        if activity is not None:
            activity.sample(stop, IDLE_SAMPLE_SECONDS)
        tick = min(poll_seconds, IDLE_CHECK_SECONDS) if activity is not None else poll_seconds
        next_poll = time.monotonic() + poll_seconds
        while not stop.wait(tick):
            if activity is not None and activity.idle_for() > cast("float", idle_timeout):
                log.info("no client for %g s, stopping", idle_timeout)
                break
            if time.monotonic() < next_poll:
                continue
            next_poll = time.monotonic() + poll_seconds
            try:
                poller.poll()
            except Exception as exc:  # noqa: BLE001 - a failed poll (metastore hiccup) must not stop serving
                if _jvm_gone(exc):  # nothing is served any more: say so and exit rather than idle
                    raise StatecatError(
                        f"the server's Spark JVM stopped: {exc}", hint="See the log above; start `statecat serve` again"
                    ) from None
                log.error("poll failed: %s", _first_line(exc))
    finally:
        if recorded:
            info_now = read_server_info(home_dir)
            if info_now is not None and info_now.pid == os.getpid():
                os.unlink(serve_file(home_dir))
        for what, stop_call in (
            ("the Thrift server", server.stop if server is not None else None),
            ("Spark", spark.stop),
        ):
            if stop_call is None:
                continue
            try:
                stop_call()
            except Exception as exc:  # noqa: BLE001 - stopping anyway (the JVM may be gone already)
                log.warning("stopping %s: %s", what, str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    log.info("stopped")
    return 0


class ClientActivity:
    """How long the server has had no client: no open JDBC session, no active Spark Connect session
    (Connect expires a client's session after its own timeout, an hour by default, unless the client
    stops it) and no running Spark job."""

    def __init__(self, spark: SparkSession, thrift_server: Any):
        self.spark = spark
        self.sessions = next(
            service.getSessionManager()
            for service in thrift_server.getServices().toArray()
            if service.getClass().getName().endswith("SparkSQLCLIService")
        )
        self.connect = None
        jvm = cast("JVMView", spark._jvm)
        if CONNECT_PLUGIN in (spark.conf.get("spark.plugins", "") or ""):
            # The Scala object's session manager (no static forwarder for it).
            self.connect = getattr(getattr(jvm.org.apache.spark.sql.connect.service, "SparkConnectService$"), "MODULE$")
        self.last_busy = time.monotonic()

    def busy(self) -> bool:
        if self.sessions.getOpenSessionCount() > 0:
            return True
        if self.connect is not None and self.connect.sessionManager().listActiveSessions().size() > 0:
            return True
        return bool(self.spark.sparkContext.statusTracker().getActiveJobsIds())

    def idle_for(self) -> float:
        now = time.monotonic()
        if self.busy():
            self.last_busy = now
        return now - self.last_busy

    def sample(self, stop: threading.Event, every: float) -> None:
        """Samples activity on a thread of its own: the serving loop's metastore poll can take
        seconds, and a client that came and went meanwhile must still count."""

        def run() -> None:
            while not stop.wait(every):
                try:
                    self.idle_for()
                except Exception as exc:  # noqa: BLE001 - the serving loop reports a JVM that is gone
                    log.debug("activity sample failed: %s", exc)
                    return

        threading.Thread(target=run, name="statecat-idle-sampler", daemon=True).start()


def _jvm_gone(exc: BaseException) -> bool:
    from py4j.protocol import Py4JNetworkError

    return isinstance(exc, (Py4JNetworkError, ConnectionError))


def _wait_listening(port: int, stop: threading.Event, what: str) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    while not listening(port):
        if time.monotonic() > deadline:
            raise StatecatError(f"{what} did not listen on port {port} within {READY_TIMEOUT_SECONDS} s")
        if stop.wait(0.1):
            return
