"""``statecat serve``: one real server (Spark's Thrift server in the statecat process) for the module.

Clients are real too: Hive's beeline from pyspark's bin, PyHive threads, ``statecat sql`` and
``statecat attach`` in other processes on the same home (its shared metastore). Values are checked
against the fixtures' expected.json. The last test stops the server with SIGTERM.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.fixtures.expected import iter_states, load_expected, savepoint_dir

pytestmark = pytest.mark.spark

BIN = Path(sys.executable).parent
CASE = "sql_groupby_hashmap_2.3"
DATABASE = "sql_groupby_hashmap_2_3"
LATE_CASE = "sql_groupby_rocksdb_1.20"  # arrives while the server runs
OTHER_CASE = "sql_groupby_rocksdb_2.3"  # attached by another process
START_TIMEOUT = 600  # Spark, the metastore server and the Thrift server on a busy 2-core machine
TIMEOUT = 300
POLL_SECONDS = 1


def _env(home: Path, **extra) -> dict:
    env = dict(os.environ)
    env.update(PYSPARK_PYTHON=sys.executable, STATECAT_HOME=str(home), **extra)
    return env


def _statecat_command() -> list[str]:
    exe = BIN / "statecat"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "statecat.catalog.cli"]


def _statecat(*args, home: Path, cwd: Path, **env):
    return subprocess.run(
        _statecat_command() + list(args),
        cwd=cwd,
        env=_env(home, **env),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(port: int) -> bool:
    from statecat.catalog.servers.thrift_server import listening

    return listening(port)


def expected_accstate(case: str) -> dict[str, tuple[int, int]]:
    """key -> (f0, f1) of the GroupAggregate's accState, from expected.json."""
    rows = {}
    for _, state in iter_states(load_expected(case)):
        if state["name"] == "accState":
            rows.update({r["key"]: (r["value"]["f0"], r["value"]["f1"]) for r in state["rows"]})
    assert rows
    return rows


def _copy_savepoint(case: str, target: Path) -> Path:
    shutil.copytree(savepoint_dir(case), target)
    return target


def _until(condition, timeout: float, what: str, interval: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


class Server:
    def __init__(self, home: Path, root: Path, port: int, work: Path):
        self.home, self.root, self.port = home, root, port
        self.connect_port = _free_port()
        while self.connect_port == port:  # two choices in a row may give the same port
            self.connect_port = _free_port()
        self.stdout, self.stderr = work / "serve.out", work / "serve.err"
        self.launch(
            ["serve", "--home", str(home), "--port", str(port), "--connect-port", str(self.connect_port)]
            + ["--poll", str(POLL_SECONDS), str(root)],
            work,
        )

    def launch(self, arguments: list[str], work: Path) -> None:
        """Starts ``statecat ARGUMENTS`` with its output in self.stdout and self.stderr."""
        with open(self.stdout, "w") as out, open(self.stderr, "w") as err:
            # Its own process group: teardown can kill the JVM and Python workers with it.
            self.process = subprocess.Popen(
                _statecat_command() + arguments,
                cwd=work,
                env=_env(self.home),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )

    def log(self) -> str:
        return self.stdout.read_text() + self.stderr.read_text()[-4000:]

    def wait_ready(self) -> dict:
        def ready():
            if self.process.poll() is not None:
                raise AssertionError(f"statecat serve exited with {self.process.returncode}: {self.log()}")
            serve_json = self.home / "serve.json"
            if serve_json.exists() and "serving on" in self.stdout.read_text():
                return json.loads(serve_json.read_text())
            return None

        return _until(ready, START_TIMEOUT, "statecat serve to be ready")

    def connect(self):
        from pyhive import hive

        return hive.connect(host="127.0.0.1", port=self.port, auth="NONE")

    def query(self, sql: str) -> list[tuple]:
        connection = self.connect()
        try:
            cursor = connection.cursor()
            cursor.execute(sql)
            return cursor.fetchall()
        finally:
            connection.close()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                pass
        # The JVM outlives the Python process while its shutdown hooks delete Spark's temp files
        # (/tmp/spark-*, native libraries): killed then, it leaves them behind.
        try:
            _until(lambda: not _group_members(self.process.pid), 60, "the server's JVM to exit", interval=0.2)
        except AssertionError:
            pass  # killed below
        try:
            os.killpg(self.process.pid, signal.SIGKILL)  # the JVM and workers, if anything is left
        except ProcessLookupError:
            pass
        self.process.wait()


def _group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of a process group, from /proc."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # exited while listed
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    work = tmp_path_factory.mktemp("serve")
    home, root = work / "home", work / "root"
    root.mkdir()
    _copy_savepoint(CASE, root / CASE)
    _copy_savepoint(CASE, root / "doomed")  # its state files are deleted by a test
    server = Server(home, root, _free_port(), work)
    try:
        server.info = server.wait_ready()
        yield server
    finally:
        server.kill()
        from statecat.catalog.servers import metastore

        metastore.stop(str(home))


def test_a_fresh_hive_client_never_loads_hive_s_function_registry(tmp_path):
    """What each Thrift session's close does (a fresh ``Hive`` on its thread) must not touch Hive's
    FunctionRegistry, which cannot load from pyspark's jars and, once failed, hangs every later caller."""
    from statecat.catalog.servers.sessions import session
    from statecat.catalog.servers.thrift_server import skip_hive_function_registry

    spark = session(str(tmp_path / "home"), quiet=True)
    try:
        skip_hive_function_registry(spark)
        jvm = spark._jvm
        hive = jvm.org.apache.hadoop.hive.ql.metadata.Hive
        hive.closeCurrent()
        assert hive.get(jvm.org.apache.hadoop.hive.conf.HiveConf()) is not None
    finally:
        spark.stop()
        from statecat.catalog.servers import metastore

        metastore.stop(str(tmp_path / "home"))


def test_serve_json_and_the_line_name_the_server(server):
    info = server.info
    assert (info["host"], info["port"], info["auth"], info["pid"]) == (
        "127.0.0.1",
        server.port,
        "none",
        server.process.pid,
    )
    lines = server.stdout.read_text().splitlines()
    assert info["connect_port"] == server.connect_port
    assert len(lines) == 1 and lines[0].startswith(
        f"serving on jdbc:hive2://127.0.0.1:{server.port}/, Spark Connect on sc://127.0.0.1:{server.connect_port} "
    )
    assert "Using incubator modules" not in server.stderr.read_text()  # the JDK's warning is filtered


def test_the_printed_commands_work_as_pasted_in_a_clean_shell(server):
    """The line's beeline and sql commands run from a shell with no virtualenv activated and no SPARK_HOME."""
    line = server.stdout.read_text().splitlines()[0]
    commands = re.findall(r"`([^`]+)`", line)
    assert len(commands) == 2 and " beeline -u " in commands[0] and " sql --home " in commands[1], line
    env = {"PATH": "/usr/bin:/bin", "HOME": os.environ["HOME"]}
    if os.environ.get("PYTHONPATH"):  # tests run from a source tree: the code under test, not an activation
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    lookup = f"SELECT key, value.f0, value.f1 FROM {DATABASE}.accstate WHERE key = 'key_662'"
    f0, f1 = expected_accstate(CASE)["key_662"]
    beeline = subprocess.run(
        ["bash", "-c", f'{commands[0]} --silent=true --outputformat=csv2 -e "{lookup}"'],
        cwd="/",
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert beeline.returncode == 0, beeline.stderr[-3000:]
    # beeline echoes its prompt in front of the header
    assert [row for row in beeline.stdout.splitlines() if row.startswith("key_662")] == [f"key_662,{f0},{f1}"]
    assert "Using incubator modules" not in beeline.stderr
    sql = subprocess.run(
        ["bash", "-c", commands[1].replace('"QUERY"', f'"{lookup}" --format csv')],
        cwd="/",
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert sql.returncode == 0, sql.stderr[-3000:]
    assert sql.stdout.splitlines() == ["key,f0,f1", f"key_662,{f0},{f1}"]


def test_superset_s_route_sqlalchemy_over_pyhive_reads_the_state(server):
    """Superset (and other SQLAlchemy tools) connect with PyHive's ``hive://`` dialect. (Its table
    listing reads Hive's SHOW TABLES layout, not Spark's: documented; queries are what dashboards run.)"""
    from sqlalchemy import create_engine, text

    engine = create_engine(f"hive://127.0.0.1:{server.port}/{DATABASE}")
    try:
        with engine.connect() as connection:
            rows = connection.execute(text("SELECT key, value.f0, value.f1 FROM accstate")).fetchall()
    finally:
        engine.dispose()
    assert {key: (f0, f1) for key, f0, f1 in rows} == expected_accstate(CASE)


def test_four_clients_at_once_get_the_expected_state(server):
    expected = expected_accstate(CASE)
    query = f"SELECT key, value.f0 AS f0, value.f1 AS f1 FROM {DATABASE}.accstate"
    start = threading.Barrier(4)
    answers: dict[str, object] = {}

    def python_client(name: str) -> None:
        try:
            connection = server.connect()
            start.wait(TIMEOUT)
            cursor = connection.cursor()
            cursor.execute(query)
            answers[name] = {key: (f0, f1) for key, f0, f1 in cursor.fetchall()}
            connection.close()
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            answers[name] = exc
            start.abort()  # the others stop waiting for this client at once

    def beeline_client() -> None:
        beeline = Path(__import__("pyspark").__file__).parent / "bin" / "beeline"
        try:
            start.wait(TIMEOUT)
        except threading.BrokenBarrierError as exc:
            answers["beeline"] = exc
            return
        done = subprocess.run(
            [
                str(beeline),
                "-u",
                f"jdbc:hive2://127.0.0.1:{server.port}/",
                "--silent=true",
                "--outputformat=csv2",
                "-e",
                query,
            ],
            env=_env(server.home),
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
        lines = done.stdout.splitlines()
        # csv2: the header (after beeline's prompt, echoed on the same line), then the rows; other lines
        # (a JVM warning) may follow.
        header = next((i for i, line in enumerate(lines) if line.endswith("key,f0,f1")), None)
        if done.returncode != 0 or header is None:
            answers["beeline"] = AssertionError(
                f"beeline exited {done.returncode}: {done.stdout[:500]} {done.stderr[-2000:]}"
            )
            return
        rows = [line.split(",") for line in lines[header + 1 :] if line.startswith("key_")]
        answers["beeline"] = {k: (int(a), int(b)) for k, a, b in rows}

    threads = [threading.Thread(target=beeline_client)]
    threads += [threading.Thread(target=python_client, args=(f"python-{i}",)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT)
    assert sorted(answers) == ["beeline", "python-0", "python-1", "python-2"], answers
    failed = {name: repr(answer) for name, answer in answers.items() if isinstance(answer, Exception)}
    assert not failed, f"clients failed: {failed}"
    for name, answer in answers.items():
        assert answer == expected, f"{name}: {answer if isinstance(answer, Exception) else 'wrong rows'}"


def test_a_client_leaving_keeps_the_other_sessions_resources(server):
    """Hive deletes a session's resources directory when the session closes. Each JDBC session has its
    own, so one client leaving cannot pull it from under the others (a shared one did, and a session
    opening at that moment failed "Couldn't create directory .../resources")."""

    def session_dirs() -> set[Path]:
        return set(server.home.glob("statecat-spark-*/resources/*"))

    before = session_dirs()
    staying, leaving = server.connect(), server.connect()
    try:
        opened = session_dirs() - before
        assert len(opened) == 2, f"expected a resources directory per new session, got {sorted(opened)}"
        leaving.close()
        remaining = session_dirs()
        assert len(opened & remaining) == 1 and before <= remaining, (sorted(opened), sorted(remaining))
        cursor = staying.cursor()
        cursor.execute(f"SELECT count(*) FROM {DATABASE}.accstate")
        assert cursor.fetchall() == [(len(expected_accstate(CASE)),)]
    finally:
        staying.close()


def test_a_query_on_a_deleted_savepoint_errors_and_the_next_one_is_answered(server):
    from pyhive.exc import DatabaseError

    assert server.query("SELECT count(*) FROM doomed.accstate") == [(len(expected_accstate(CASE)),)]
    state_files = [p for p in (server.root / "doomed").iterdir() if p.name != "_metadata"]
    assert state_files
    for path in state_files:
        path.unlink()
    with pytest.raises(DatabaseError) as failure:
        server.query("SELECT count(*) FROM doomed.accstate")
    from statecat.catalog.servers.sql_client import server_error_message

    message = server_error_message(failure.value)
    assert "state file referenced by _metadata is missing" in message and "doomed" in message
    assert server.query(f"SELECT value.f1 FROM {DATABASE}.accstate WHERE key = 'key_662'") == [(336,)]
    assert server.process.poll() is None


def test_a_damaged_savepoint_is_logged_and_skipped(server):
    broken = server.root / "broken"
    broken.mkdir()
    (broken / "_metadata").write_bytes(b"\x00\x01not a savepoint" * 8)
    _until(
        lambda: f"skipping {broken} until its _metadata changes" in server.stderr.read_text(),
        TIMEOUT,
        "serve to skip the damaged savepoint",
    )
    assert server.query("SHOW DATABASES LIKE 'broken'") == []
    assert server.query(f"SELECT value.f1 FROM {DATABASE}.accstate WHERE key = 'key_662'") == [(336,)]


def test_a_savepoint_is_attached_once_it_is_complete(server):
    late = server.root / "late"
    late.mkdir()
    shutil.copy(savepoint_dir(LATE_CASE) / "_metadata", late / "_metadata")
    state_files = [p for p in savepoint_dir(LATE_CASE).iterdir() if p.name != "_metadata"]
    assert state_files  # else it would be complete with _metadata alone

    def said_waiting():
        return "waiting for" in server.stderr.read_text() and str(late) in server.stderr.read_text()

    _until(said_waiting, TIMEOUT, "serve to notice the incomplete savepoint")
    assert server.query("SHOW DATABASES LIKE 'late'") == []
    for path in state_files:
        shutil.copy(path, late / path.name)
    # The database is created before its tables: wait for the table the query reads.
    _until(
        lambda: server.query("SHOW DATABASES LIKE 'late'") and server.query("SHOW TABLES IN late LIKE 'accstate'"),
        TIMEOUT,
        "serve to attach the completed savepoint",
    )
    rows = server.query("SELECT key, value.f0, value.f1 FROM late.accstate")
    assert {key: (f0, f1) for key, f0, f1 in rows} == expected_accstate(LATE_CASE)


def test_statecat_attach_in_another_process_while_it_serves(server, tmp_path):
    other = _copy_savepoint(OTHER_CASE, tmp_path / "other" / OTHER_CASE)
    done = _statecat("attach", str(other), home=server.home, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    database = OTHER_CASE.replace(".", "_")
    assert done.stdout.startswith(f"{database}\t{other}\tattached")
    rows = server.query(f"SELECT key, value.f0, value.f1 FROM {database}.accstate")
    assert {key: (f0, f1) for key, f0, f1 in rows} == expected_accstate(OTHER_CASE)


def test_statecat_sql_through_the_server_prints_what_the_local_path_prints(server, tmp_path):
    queries = [
        ("table", f"SELECT key, value.f0 AS count, value.f1 AS total FROM {DATABASE}.accstate WHERE key = 'key_662'"),
        (
            "json",
            f"SELECT s.database, s.checkpoint_id, s.time, a.key, a.value FROM statecat.savepoints s "
            f"JOIN {DATABASE}.accstate a ON a.key IN ('key_0', 'key_662') WHERE s.database = '{DATABASE}' "
            "ORDER BY a.key",
        ),
    ]
    for fmt, query in queries:
        # No Java for this process: only the server can answer.
        routed = _statecat(
            "sql", "--format", fmt, query, home=server.home, cwd=tmp_path, JAVA_HOME="/nonexistent", PATH=str(BIN)
        )
        assert routed.returncode == 0, routed.stderr[-3000:]
        local = _statecat(
            "sql", "--format", fmt, "--attach", str(server.root / CASE), query, home=server.home, cwd=tmp_path
        )
        assert local.returncode == 0, local.stderr[-3000:]
        assert routed.stdout == local.stdout
    expected = expected_accstate(CASE)
    assert routed.stdout.count("\n") == 2
    first = json.loads(routed.stdout.splitlines()[0])
    assert first["key"] == "key_0" and first["value"] == dict(zip(("f0", "f1"), expected["key_0"]))


def test_statecat_sql_reports_a_server_side_error_as_one_line(server, tmp_path):
    done = _statecat(
        "sql",
        f"SELECT 1 / 0 FROM {DATABASE}.accstate",
        home=server.home,
        cwd=tmp_path,
        JAVA_HOME="/nonexistent",
        PATH=str(BIN),
    )
    assert done.returncode == 2
    assert done.stderr.startswith("statecat: error: [DIVIDE_BY_ZERO] Division by zero.")
    assert done.stderr.count("\n") == 1


def test_nested_values_from_the_server_read_back_as_the_local_path_shows_them():
    from statecat.catalog.servers.sql_client import _value

    # As Spark's Thrift server writes structs, maps with text or other keys, and arrays.
    assert _value('{"f0":1,"f1":-336}', "STRUCT_TYPE") == {"f0": 1, "f1": -336}
    assert _value('{1:"a",2:null}', "MAP_TYPE") == [[1, "a"], [2, None]]
    assert _value('{"k":[1.5,NaN],"e":{}}', "MAP_TYPE")["k"][0] == 1.5
    assert _value('[{"x":"say "hi""}]', "ARRAY_TYPE") == [{"x": 'say "hi"'}]
    assert _value("{not hive", "STRUCT_TYPE") == "{not hive"  # shown as sent rather than guessed


def test_exposed_bind_without_auth_is_refused(tmp_path):
    done = _statecat(
        "serve",
        "--bind",
        "0.0.0.0",
        "--port",
        str(_free_port()),
        str(savepoint_dir(CASE)),
        home=tmp_path / "home",
        cwd=tmp_path,
    )
    assert done.returncode == 2
    assert done.stderr.startswith(
        "statecat: error: --bind 0.0.0.0 exposes the savepoints beyond this machine and needs --auth"
    )
    assert done.stderr.count("\n") == 1
    assert not (tmp_path / "home").exists()  # refused before anything was started


def test_sigterm_stops_it_cleanly(server):
    """Runs last: the module's server is stopped here."""
    server.process.send_signal(signal.SIGTERM)
    assert server.process.wait(TIMEOUT) == 0, server.log()
    assert not (server.home / "serve.json").exists()
    assert not _listening(server.port)
    assert "stopped" in server.stderr.read_text()
    # Its Spark JVM and Python workers exit too, by themselves.
    _until(lambda: not _group_members(server.process.pid), TIMEOUT, "the server's JVM and workers to exit")
