"""One ``statecat serve`` for every client: JDBC (beeline, SQLAlchemy over PyHive) and Spark Connect
(a plain PySpark client, notebooks through ``statecat.catalog.session()``) on the same home's catalog,
over live savepoints and over the Delta tables of a ``statecat materialize`` lake.

One server runs for the module (test_serve's ``Server``, with a Connect port); the background start of
``statecat sql``, the idle timeout and Delta offline each need a home of their own. Values come from
the fixtures' expected.json (the jobs' input), never from statecat's reader. Like the other Spark
tests, these take no machine-wide lock (only Flink jobs and benchmarks take /tmp/statecat-heavy.lock).
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from statecat.catalog.servers.local_ports import free_port, process_alive
from tests.fixtures.expected import load_expected
from tests.test_serve import (
    TIMEOUT,
    Server,
    _copy_savepoint,
    _group_members,
    _statecat,
    _until,
    expected_accstate,
)

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[1]
DASHBOARDS = REPO / "sql_examples" / "dashboards"
CASE = "sql_groupby_hashmap_2.3"  # the bundled example
OTHER_CASE = "sql_groupby_rocksdb_2.3"  # a second snapshot in the lake (other keys, key_662 among them)
CASES = (CASE, OTHER_CASE)
DATABASE = "sql_groupby_hashmap_2_3"
LAKE_DATABASE = "history_lake"
KEY = "key_662"
LIVE_LOOKUP = (
    f"SELECT key AS live_key, value.f0 AS live_f0, value.f1 AS live_f1 FROM {DATABASE}.accstate WHERE key = '{KEY}'"
)
LAKE_LOOKUP = (
    f"SELECT s.path AS lake_path, a.value.f0 AS lake_f0, a.value.f1 AS lake_f1 FROM {LAKE_DATABASE}.accstate a "
    f"JOIN {LAKE_DATABASE}.snapshots s ON s.snapshot_id = a.snapshot_id WHERE a.key = '{KEY}' ORDER BY s.path"
)
OFFLINE_LINE = "could not be resolved"
IDLE_SECONDS = 5
IDLE_EXIT_TIMEOUT = 90
# Background servers the tests start stop by themselves this long after their last client, if a
# test is killed before its teardown.
BACKGROUND_IDLE_SECONDS = "300"

# A plain Spark Connect client, in its own process: {name: rows} of each query, as JSON.
CONNECT_CLIENT = """
import json, sys
from pyspark.sql import SparkSession
spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
answers = {name: [list(row) for row in spark.sql(query).collect()] for name, query in json.loads(sys.argv[2]).items()}
spark.stop()
print(json.dumps(answers))
"""


class OneServer(Server):
    """test_serve's server process, with a Spark Connect port and serve's further options."""

    def __init__(self, home: Path, roots: list[Path], work: Path, *options: str):
        self.home, self.root = home, roots[0] if roots else None
        self.port = free_port()
        self.connect_port = _other_port(self.port)
        self.stdout, self.stderr = work / "serve.out", work / "serve.err"
        arguments = ["serve", "--home", str(home), "--port", str(self.port)]
        self.launch(
            arguments + ["--connect-port", str(self.connect_port), "--poll", "1", *options, *map(str, roots)], work
        )

    def stop(self) -> None:
        self.kill()
        from statecat.catalog.servers import metastore

        metastore.stop(str(self.home))


def _other_port(taken: int) -> int:
    port = free_port()
    while port == taken:
        port = free_port()
    return port


def accstate_keys(case: str) -> int:
    return len(expected_accstate(case))


def _operator(case: str, name_part: str) -> dict:
    return next(op for op in load_expected(case)["operators"] if name_part in (op.get("name_contains") or ""))


def _connect_client(url: str, queries: dict[str, str]) -> dict[str, list]:
    done = subprocess.run(
        [sys.executable, "-c", CONNECT_CLIENT, url, json.dumps(queries)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def placed(tmp_path_factory):
    """Copies of the two savepoints under one root."""
    root = tmp_path_factory.mktemp("one_server_root")
    return {case: _copy_savepoint(case, root / case) for case in CASES}


@pytest.fixture(scope="module")
def lake(placed, tmp_path_factory):
    """Both savepoints materialized into one lake of Delta tables (no Spark)."""
    work = tmp_path_factory.mktemp("one_server_lake")
    target = work / "lake"
    root = placed[CASE].parent
    done = _statecat("materialize", str(root), "--to", str(target), home=work / "home", cwd=work)
    assert done.returncode == 0, done.stderr[-3000:]
    return target


@pytest.fixture(scope="module")
def server(placed, lake, tmp_path_factory):
    """The module's server on the savepoints' root; the lake attached by another process while it serves."""
    work = tmp_path_factory.mktemp("one_server")
    home = work / "home"
    server = OneServer(home, [placed[CASE].parent], work)
    try:
        server.info = server.wait_ready()
        done = _statecat("attach", "--lake", str(lake), "--database", LAKE_DATABASE, home=home, cwd=work)
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.startswith(f"{LAKE_DATABASE}\t{lake}\t"), done.stdout
        yield server
    finally:
        server.stop()


def _expected_lake_lookup(placed) -> list[list]:
    rows = [[str(placed[case]), *expected_accstate(case)[KEY]] for case in CASES]
    return sorted(rows)


def test_a_plain_connect_client_reads_live_state_and_the_lake(server, placed):
    assert server.info["connect_port"] == server.connect_port
    url = f"sc://127.0.0.1:{server.connect_port}"
    answers = _connect_client(url, {"live": LIVE_LOOKUP, "lake": LAKE_LOOKUP})
    assert answers["live"] == [[KEY, *expected_accstate(CASE)[KEY]]]
    assert answers["lake"] == _expected_lake_lookup(placed)


def test_sqlalchemy_over_pyhive_runs_a_dashboard_on_the_delta_tables(server, placed):
    from sqlalchemy import create_engine, text

    engine = create_engine(f"hive://127.0.0.1:{server.port}/default")
    try:
        with engine.connect() as connection:
            connection.execute(text(f"USE {LAKE_DATABASE}"))
            trend = connection.execute(text((DASHBOARDS / "12_key_count_trend.sql").read_text())).fetchall()
            paths = dict(connection.execute(text("SELECT snapshot_id, path FROM snapshots")).fetchall())
    finally:
        engine.dispose()
    # One row per snapshot: the keys the aggregate held, as the jobs' input has them.
    keys = {Path(paths[row[3]]).name: row[4] for row in trend}
    assert keys == {case: accstate_keys(case) for case in CASES}


def _notebook(home: Path, directory: Path):
    import nbformat
    from nbclient import NotebookClient

    cell = nbformat.v4.new_code_cell(
        "import json, sys\nimport statecat.catalog\n"
        "spark = statecat.catalog.session()\n"
        f"rows = spark.sql({LIVE_LOOKUP!r}).collect()\n"
        "print(json.dumps({'python': sys.executable, 'rows': [list(row) for row in rows]}))\n"
        "spark.stop()"
    )
    notebook = nbformat.v4.new_notebook(cells=[cell])
    NotebookClient(
        notebook, timeout=TIMEOUT, kernel_name="python3", resources={"metadata": {"path": str(directory)}}
    ).execute(env={**os.environ, "STATECAT_HOME": str(home)})
    printed = "".join(o.text for o in notebook.cells[0].outputs if o.output_type == "stream" and o.name == "stdout")
    return json.loads(printed.splitlines()[-1])


def test_two_notebooks_at_once_share_the_home_s_server(server, tmp_path):
    before = json.loads((server.home / "serve.json").read_text())["pid"]
    answers: dict[int, object] = {}

    def run(i: int) -> None:
        try:
            answers[i] = _notebook(server.home, tmp_path)
        except Exception as exc:  # noqa: BLE001 - reported by the assertions below
            answers[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT)
    failed = {i: repr(answer) for i, answer in answers.items() if isinstance(answer, Exception)}
    assert sorted(answers) == [0, 1] and not failed, failed or answers
    expected = [[KEY, *expected_accstate(CASE)[KEY]]]
    for answer in answers.values():
        assert isinstance(answer, dict)
        assert answer == {"python": sys.executable, "rows": expected}
    assert json.loads((server.home / "serve.json").read_text())["pid"] == before == server.process.pid
    assert not list(server.home.glob("serve.log"))  # no server was started in the background


def _beeline_results(output: str, headers: dict[str, str]) -> dict[str, list[list[str]]]:
    """csv2 result sets of one beeline run, by the name of their header (beeline echoes its prompt
    in front of a header; other lines end a result set)."""
    results: dict[str, list[list[str]]] = {}
    current = None
    for line in output.splitlines():
        named = next((name for name, header in headers.items() if line.endswith(header)), None)
        if named is not None:
            current = results.setdefault(named, [])
            width = len(headers[named].split(","))
            continue
        row = next(csv.reader([line]), [])
        if current is not None and len(row) == width:
            current.append(row)
        else:
            current = None
    return results


DASHBOARD_HEADERS = {
    "11_state_size_over_time": "checkpoint_id,taken_at,taken_at_source,snapshot_id,operator,entries,bytes",
    "12_key_count_trend": "checkpoint_id,taken_at,taken_at_source,snapshot_id,keys",
    "13_key_history": "checkpoint_id,taken_at,taken_at_source,snapshot_id,count,total",
    "14_key_group_skew": (
        "checkpoint_id,taken_at,taken_at_source,snapshot_id,table_name,key_groups,entries,max_entries,skew,"
        "max_key_group_bytes"
    ),
}


def test_beeline_reads_live_state_the_lake_and_the_four_dashboards(server, placed, tmp_path):
    """Runs last on the module's server: beeline is a Java JDBC client (its session opens with a database)."""
    dashboards = sorted(DASHBOARDS.glob("*.sql"))
    assert [path.stem for path in dashboards] == sorted(DASHBOARD_HEADERS)
    script = tmp_path / "dashboards.sql"
    statements = [LIVE_LOOKUP, f"USE {LAKE_DATABASE}", LAKE_LOOKUP, "SELECT snapshot_id AS sid, path FROM snapshots"]
    statements += [path.read_text().strip().rstrip(";") for path in dashboards]
    script.write_text("".join(f"{statement};\n" for statement in statements))
    done = _statecat(
        "beeline",
        "--home",
        str(server.home),
        "--silent=true",
        "--outputformat=csv2",
        "-f",
        str(script),
        home=server.home,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    headers = {
        "live": "live_key,live_f0,live_f1",
        "lake": "lake_path,lake_f0,lake_f1",
        "snapshots": "sid,path",
        **DASHBOARD_HEADERS,
    }
    results = _beeline_results(done.stdout, headers)
    assert sorted(results) == sorted(headers), done.stdout[-3000:]

    live_f0, live_f1 = expected_accstate(CASE)[KEY]
    assert results["live"] == [[KEY, str(live_f0), str(live_f1)]]
    assert results["lake"] == [[str(v) for v in row] for row in _expected_lake_lookup(placed)]
    case_of = {sid: Path(path).name for sid, path in results["snapshots"]}
    assert sorted(case_of.values()) == sorted(CASES)

    # Key-count trend: each snapshot's key count is its job's number of keys.
    assert {case_of[r[3]]: int(r[4]) for r in results["12_key_count_trend"]} == {c: accstate_keys(c) for c in CASES}
    # One key's history: key_662's count and total in each snapshot.
    assert {case_of[r[3]]: (int(r[4]), int(r[5])) for r in results["13_key_history"]} == {
        c: expected_accstate(c)[KEY] for c in CASES
    }
    # State size over time: the GROUP BY's operator holds one entry per key, in some bytes.
    sizes = [r for r in results["11_state_size_over_time"] if "GroupAggregate" in r[4]]
    assert {case_of[r[3]]: int(r[5]) for r in sizes} == {c: accstate_keys(c) for c in CASES}
    assert all(int(r[6]) > 0 for r in sizes)
    # Key-group skew of accstate: every key-group of the operator counted, the keys spread over them.
    skew = {case_of[r[3]]: r for r in results["14_key_group_skew"] if r[4] == "accstate"}
    assert sorted(skew) == sorted(CASES)
    for case, row in skew.items():
        key_groups, entries, max_entries = int(row[5]), int(row[6]), int(row[7])
        assert key_groups == _operator(case, "GroupAggregate")["max_parallelism"]
        assert entries == accstate_keys(case)
        assert entries / key_groups <= max_entries < entries
        assert float(row[8]) == pytest.approx(max_entries / (entries / key_groups), abs=0.01)


# --------------------------------------------------------------------------- servers of their own


def _wait_gone(pid: int) -> None:
    """The server's process group (JVM, Python workers) has exited; killed after a minute."""
    try:
        _until(lambda: not _group_members(pid), 60, "the server's process group to exit", interval=0.2)
    except AssertionError:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_statecat_sql_starts_one_background_server_and_reuses_it(tmp_path):
    from statecat.catalog.servers import metastore
    from statecat.catalog.servers.home_server import stop_server
    from statecat.catalog.servers.thrift_server import read_server_info

    home = tmp_path / "home"
    savepoint = _copy_savepoint(CASE, tmp_path / "root" / CASE)
    query = f"SELECT key, value.f0 AS f0, value.f1 AS f1 FROM {DATABASE}.accstate WHERE key = '{KEY}'"
    expected = ["key,f0,f1", "{},{},{}".format(KEY, *expected_accstate(CASE)[KEY])]
    idle = {"STATECAT_SERVER_IDLE_SECONDS": BACKGROUND_IDLE_SECONDS}

    def sql(*args, **env):
        return _statecat("sql", "--home", str(home), "--format", "csv", *args, query, home=home, cwd=tmp_path, **env)

    pid = None
    try:
        assert not (home / "serve.json").exists()
        first = sql("--attach", str(savepoint), **idle)
        assert first.returncode == 0, first.stderr[-3000:] + _tail(home / "serve.log")
        assert first.stdout.splitlines() == expected
        info = json.loads((home / "serve.json").read_text())
        pid = info["pid"]
        assert process_alive(pid) and info["connect_port"]
        assert (home / "serve.log").exists()

        second = sql(**idle)
        assert second.returncode == 0, second.stderr[-3000:]
        assert second.stdout.splitlines() == expected
        assert json.loads((home / "serve.json").read_text())["pid"] == pid  # the same server answered

        local = sql("--local")
        assert local.returncode == 0, local.stderr[-3000:]
        assert local.stdout.splitlines() == expected
        assert json.loads((home / "serve.json").read_text())["pid"] == pid
    finally:
        started = read_server_info(str(home))
        if started is not None:
            stop_server(str(home))
            _wait_gone(started.pid)
        metastore.stop(str(home))
    assert not process_alive(pid)
    assert not (home / "serve.json").exists()


def _tail(path: Path) -> str:
    return path.read_text()[-3000:] if path.exists() else ""


def test_a_server_with_an_idle_timeout_exits_by_itself_after_its_last_client(tmp_path):
    home = tmp_path / "home"
    server = OneServer(home, [], tmp_path, "--idle-timeout", str(IDLE_SECONDS))
    try:
        info = server.wait_ready()
        # A JDBC session held open while the Spark Connect client starts: a loaded machine may take
        # longer than the idle time to start a Python process, and the server would be gone.
        held = server.connect()
        try:
            answers = _connect_client(f"sc://127.0.0.1:{info['connect_port']}", {"one": "SELECT 1 + 1"})
            cursor = held.cursor()
            cursor.execute("SELECT 40 + 2")
            assert cursor.fetchall() == [(42,)]
        finally:
            held.close()
        assert answers == {"one": [[2]]}
        last_client = time.monotonic()
        assert server.process.poll() is None  # still serving right after its clients left
        try:
            status = server.process.wait(IDLE_EXIT_TIMEOUT)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running {IDLE_EXIT_TIMEOUT} s after its last client: {server.log()}")
        idle_for = time.monotonic() - last_client
        assert status == 0, server.log()
        assert not (home / "serve.json").exists()
        # It waited for the idle time (its clock starts at its own last check, up to a second earlier).
        assert idle_for >= IDLE_SECONDS - 1.5, idle_for
        assert f"no client for {IDLE_SECONDS:g} s" in server.stderr.read_text()
        _until(lambda: not _group_members(server.process.pid), TIMEOUT, "the server's JVM and workers to exit")
    finally:
        server.stop()


def _offline(tmp_path: Path) -> dict[str, str]:
    """Delta's jars unresolvable: an empty cache, and a repository nothing listens on."""
    cache = tmp_path / "empty-cache"
    cache.mkdir()
    return {"XDG_CACHE_HOME": str(cache), "STATECAT_MAVEN_REPOSITORY": "http://127.0.0.1:9/"}


def _said_offline(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if OFFLINE_LINE in line]


def test_without_maven_attaching_a_lake_is_refused_saying_why_once(lake, tmp_path):
    from statecat.catalog.servers import metastore

    home = tmp_path / "home"
    try:
        attached = _statecat(
            "attach", "--home", str(home), "--lake", str(lake), home=home, cwd=tmp_path, **_offline(tmp_path)
        )
    finally:
        metastore.stop(str(home))
    assert attached.returncode == 2, attached.stdout + attached.stderr[-3000:]
    assert attached.stderr.count(OFFLINE_LINE) == 1 and len(_said_offline(attached.stderr)) == 1, attached.stderr
    assert "unresolved dependency: io.delta#delta-spark" in attached.stderr, attached.stderr
    assert not home.exists()  # refused before Spark (or the home's metastore) started


def test_without_maven_a_local_session_answers_saying_once_that_delta_is_missing(tmp_path):
    from statecat.catalog.servers import metastore

    home = tmp_path / "home"
    local = ["--local", "--home", str(home), "--format", "csv", "SELECT 1 AS one"]
    try:
        answered = _statecat("sql", *local, home=home, cwd=tmp_path, **_offline(tmp_path))
    finally:
        metastore.stop(str(home))
    assert answered.returncode == 0, answered.stderr[-3000:]
    assert answered.stdout.splitlines() == ["one", "1"]
    assert answered.stderr.count(OFFLINE_LINE) == 1, answered.stderr
    said = _said_offline(answered.stderr)
    assert len(said) == 1 and said[0].startswith("statecat: Delta Lake's jars"), answered.stderr
    assert said[0].endswith("this session runs without Delta"), said
    assert not (home / "serve.json").exists()  # --local started no server
