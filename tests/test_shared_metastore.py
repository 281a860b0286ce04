"""Many processes on one statecat home: the shared metastore server (catalog/servers/metastore.py).

Two ``spark-sql`` shells (one through ``statecat spark-sql``, one plain with the home's
``SPARK_CONF_DIR``), ``statecat sql`` and ``statecat attach`` of a new savepoint run at the same
time and each answers correctly; the server's start is shared by racing processes, it stops on
request and when idle, and a Derby database held by another process is named in one line.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fixtures.expected import CASES_DIR, iter_states, load_expected

BIN = Path(sys.executable).parent
TIMEOUT = 600
GROUPBY = "sql_groupby_hashmap_2.3"
JOIN = "sql_join_2.3"


def _env(home: Path, **extra) -> dict:
    env = dict(os.environ)
    env.update(PYSPARK_PYTHON=sys.executable, STATECAT_HOME=str(home), **extra)
    return env


def _statecat_command(*args) -> list[str]:
    exe = BIN / "statecat"
    return ([str(exe)] if exe.exists() else [sys.executable, "-m", "statecat.catalog.cli"]) + list(args)


def _run(command, home: Path, cwd: Path, **env):
    return subprocess.run(
        command, cwd=cwd, env=_env(home, **env), capture_output=True, text=True, timeout=TIMEOUT, check=False
    )


def _expected_value(case: str, state: str, key: str):
    for _, st in iter_states(load_expected(case)):
        if st["name"] == state:
            rows = st["rows"]
            return len(rows), next(r["value"] for r in rows if r["key"] == key)
    raise AssertionError(f"{case} has no state {state}")


def _server_pid(home: Path) -> int:
    import json

    from statecat.catalog.servers.metastore import STATE_FILE

    return json.loads((home / STATE_FILE).read_text())["supervisor_pid"]


def _wait_gone(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    return False


@pytest.mark.spark
def test_spark_sql_shells_serve_clients_and_attach_at_the_same_time(tmp_path):
    """Issue 9's bar: two spark-sql shells, a running ``statecat serve`` queried by beeline and a
    Python client, ``statecat sql`` and ``statecat attach`` of a new savepoint, all at once on one home."""
    from tests.test_serve import Server, _free_port

    home = tmp_path / "home"
    first = _run(_statecat_command("attach", str(CASES_DIR / GROUPBY)), home, tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    conf = _run(_statecat_command("metastore", "conf"), home, tmp_path)
    assert conf.returncode == 0, conf.stderr[-3000:]
    roots = tmp_path / "served"  # serve watches an empty root: the savepoints come from attach
    roots.mkdir()
    server = Server(home, roots, _free_port(), tmp_path)
    try:
        server.wait_ready()
        _run_everything_at_once(home, tmp_path, conf.stdout.strip(), server)
    finally:
        server.kill()
    assert server.process.returncode == 0, server.log()


def _run_everything_at_once(home: Path, tmp_path: Path, conf_dir: str, server) -> None:
    import threading

    rows, value = _expected_value(GROUPBY, "accState", "key_662")
    lookup = "SELECT key, value.f0, value.f1 FROM sql_groupby_hashmap_2_3.accstate WHERE key = 'key_662'"
    query = f"{lookup}; SELECT count(*) FROM sql_groupby_hashmap_2_3.accstate"
    commands = {
        "statecat spark-sql": _statecat_command("spark-sql", "-S", "-e", query),
        "plain spark-sql": [str(BIN / "spark-sql"), "-S", "-e", query],
        # Without -u: the home's running server (serve.json).
        "beeline": _statecat_command(
            "beeline", "--silent=true", "--outputformat=tsv2", "--showHeader=false", "-e", lookup
        ),
        "statecat sql": _statecat_command("sql", "--format", "csv", lookup),
        "statecat attach": _statecat_command("attach", str(CASES_DIR / JOIN)),
    }
    env = _env(home, SPARK_CONF_DIR=conf_dir)
    python_client: dict = {}

    def python_query():
        try:
            python_client["rows"] = server.query(lookup)
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            python_client["rows"] = exc

    thread = threading.Thread(target=python_query)
    started = {
        name: subprocess.Popen(
            command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for name, command in commands.items()
    }
    thread.start()
    done = {name: process.communicate(timeout=TIMEOUT) for name, process in started.items()}
    thread.join(TIMEOUT)
    for name, process in started.items():
        assert process.returncode == 0, (name, done[name][1][-3000:])

    want = [f"key_662\t{value['f0']}\t{value['f1']}", str(rows)]
    assert done["statecat spark-sql"][0].splitlines() == want
    assert done["plain spark-sql"][0].splitlines() == want
    # beeline echoes its prompt in front of the first row
    assert [line.rsplit("> ", 1)[-1] for line in done["beeline"][0].splitlines() if "key_662" in line] == [want[0]]
    assert python_client["rows"] == [("key_662", value["f0"], value["f1"])]
    assert done["statecat sql"][0].splitlines() == ["key,f0,f1", f"key_662,{value['f0']},{value['f1']}"]
    assert any(
        line.startswith("sql_join_2_3\t") and line.endswith("\tattached")
        for line in done["statecat attach"][0].splitlines()
    )
    for name in ("statecat spark-sql", "plain spark-sql"):
        assert "XSDB6" not in done[name][1] and "Traceback" not in done[name][1], name
    for name in ("statecat spark-sql", "beeline", "statecat sql", "statecat attach"):
        assert "Using incubator modules" not in done[name][1], name  # statecat filters the JDK's warning

    # What the concurrent attach wrote is served at once, and seen by every later process.
    join_states = {st["name"] for _, st in iter_states(load_expected(JOIN)) if st["kind"] == "keyed"}
    served = {row[0] for row in server.query("SELECT state_name FROM sql_join_2_3.state_meta")}
    assert join_states <= served
    tables = _run(_statecat_command("sql", "--format", "csv", "SHOW TABLES IN sql_join_2_3"), home, tmp_path)
    assert tables.returncode == 0, tables.stderr[-3000:]
    assert "state_meta" in {line.split(",")[1] for line in tables.stdout.splitlines()[1:]}


@pytest.mark.spark
def test_racing_starts_share_one_server_which_stops_on_request_and_when_idle(tmp_path):
    home = tmp_path / "home"
    racing = [
        subprocess.Popen(
            _statecat_command("metastore", "start"),
            cwd=tmp_path,
            env=_env(home),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    outputs = [p.communicate(timeout=TIMEOUT) for p in racing]
    assert [p.returncode for p in racing] == [0, 0, 0], [err for _, err in outputs]
    uris = {out.split(": ", 1)[1].split(" ")[0] for out, _ in outputs}
    assert len(uris) == 1  # one server, the same port for all three
    supervisor = _server_pid(home)

    stopped = _run(_statecat_command("metastore", "stop"), home, tmp_path)
    assert stopped.returncode == 0 and "stopped" in stopped.stdout
    assert _wait_gone(supervisor, 60)
    assert not (home / "metastore.json").exists()
    status = _run(_statecat_command("metastore"), home, tmp_path)
    assert status.stdout.startswith("no metastore running")

    # With no client connected, a server stops by itself after the idle time.
    started = _run(_statecat_command("metastore", "start"), home, tmp_path, STATECAT_METASTORE_IDLE_SECONDS="3")
    assert started.returncode == 0, started.stderr[-3000:]
    assert _wait_gone(_server_pid(home), 120)
    assert not (home / "metastore.json").exists()


@pytest.mark.spark
def test_embedded_mode_names_the_process_holding_the_database(tmp_path):
    home = tmp_path / "home"
    started = _run(_statecat_command("attach", str(CASES_DIR / GROUPBY)), home, tmp_path)
    assert started.returncode == 0, started.stderr[-3000:]
    # The shared server holds the Derby database: a single-process (embedded) session cannot open it.
    embedded = _run(_statecat_command("sql", "SELECT 1"), home, tmp_path, STATECAT_METASTORE="embedded")
    assert embedded.returncode == 2
    errors = [line for line in embedded.stderr.splitlines() if line.startswith("statecat: error:")]
    assert len(errors) == 1 and "is open in another process" in errors[0], embedded.stderr[-3000:]
    assert "Traceback" not in embedded.stderr


def test_a_production_hive_site_is_used_as_is(tmp_path, monkeypatch):
    from statecat.catalog.servers.sessions import resolve_home

    conf = tmp_path / "spark-conf"
    conf.mkdir()
    (conf / "hive-site.xml").write_text(
        "<configuration><property><name>hive.metastore.uris</name>"
        "<value>thrift://metastore.example:9083</value></property></configuration>"
    )
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf))
    monkeypatch.delenv("STATECAT_HOME", raising=False)
    assert resolve_home(None) is None  # Spark's own conf names the metastore: statecat starts none
    assert resolve_home(str(tmp_path / "h")) == str(tmp_path / "h")  # an explicit home still wins
    monkeypatch.setenv("STATECAT_HOME", str(tmp_path / "env"))
    assert resolve_home(None) == str(tmp_path / "env")
    env = dict(os.environ, SPARK_CONF_DIR=str(conf), STATECAT_HOME="")
    done = subprocess.run(
        _statecat_command("metastore"),
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 2 and done.stderr.count("statecat: error:") == 1 and "hive-site.xml" in done.stderr
