"""Snapshots in the order Flink took them (issue 27), whatever a copy did to their mtimes.

A job's retained checkpoints copied with ``cp -r`` all carry the copy time. Here the real job
directory of the successive GROUP BY case (tests/fixtures/README.md, "Successive cases": its
chk-1, chk-3 and chk-5 after input phases 1-3) is copied into tmp and grown to chk-1 … chk-12:
chk-2 is a copy of chk-1, chk-4 of chk-3, chk-6 … chk-12 of chk-5, each with the checkpoint id in
its ``_metadata`` set to its N (Flink's format: magic, version, then the id as a big-endian long).
So the test knows each checkpoint's id and content (the phase's expected.json, computed from the
job's input) without asking statecat, and text order (chk-1, chk-10, chk-11, chk-12, chk-2, …)
differs from checkpoint order. Every mtime is then reset to one time, or reversed (later
checkpoints older). ``history``, ``materialize`` (its processing order, the lake's ``snapshots``
table read back with deltalake, and the dashboard queries on DuckDB), ``watch`` and the catalog
views must all come out in checkpoint order. ``--rest`` is tried against a tiny local HTTP server
for its format and error paths (the real cluster: tests/test_savepoint_rest_live.py).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import deltalake
import pytest

from statecat.catalog.cli import main as cli_main
from statecat.catalog.lake.materialize import Materializer, Retention
from statecat.catalog.lake.tables import read_delta
from statecat.statemeta.snapshotter.taken_at import SOURCE_CHECKPOINT, SOURCE_FLINK_HISTORY
from statecat.statemeta.snapshotter.watcher import Watcher
from tests.fixtures.expected import iter_states, load_expected, phases
from tests.test_materialize import duckdb_with_delta, register_lake_views

CASE = "sql_groupby_successive_2.3"
JOB_ID = load_expected(CASE)["params"]["job_id"]
IDS = list(range(1, 13))
COPY_TIME = dt.datetime(2026, 5, 1, 12, 0, tzinfo=dt.UTC)
DASHBOARDS = Path(__file__).resolve().parents[1] / "sql_examples" / "dashboards"


def phase_of(checkpoint_id: int) -> int:
    """The input phase (0-2) whose state checkpoint ``chk-N`` holds: chk-1/2, chk-3/4, chk-5 and later."""
    return 0 if checkpoint_id <= 2 else 1 if checkpoint_id <= 4 else 2


def accstate(phase: int) -> dict[str, dict]:
    """key -> the GROUP BY's (count, total) after the phase, from the job's input."""
    rows = next(s for _, s in iter_states(phases(CASE)[phase]["expected"]) if s["name"] == "accState")["rows"]
    return {r["key"]: r["value"] for r in rows}


def changing_key() -> str:
    """A key whose aggregate differs after each phase, so any misordering shows in its history."""
    per_phase = [accstate(p) for p in range(3)]
    return next(k for k in sorted(per_phase[0]) if len({json.dumps(p.get(k), sort_keys=True) for p in per_phase}) == 3)


def _set_checkpoint_id(metadata: Path, checkpoint_id: int) -> None:
    data = bytearray(metadata.read_bytes())
    data[8:16] = struct.pack(">q", checkpoint_id)  # after the magic number and the version (two ints)
    metadata.write_bytes(bytes(data))


def _set_mtimes(tree: Path, moment: dt.datetime) -> None:
    for directory, _, files in os.walk(tree):
        for name in [*files, "."]:
            os.utime(Path(directory) / name, (moment.timestamp(), moment.timestamp()))


def copied_job(root: Path, mtimes: str) -> Path:
    """The case's job directory as a copy holds it, grown to chk-1 … chk-12 (see the module's docstring)."""
    source = phases(CASE)[0]["checkpoint"].parent
    job = root / "checkpoints" / JOB_ID
    shutil.copytree(source, job, copy_function=shutil.copy)  # no times kept, like cp -r
    (job / "taskowned").mkdir(exist_ok=True)  # Flink creates it; git keeps no empty directory
    real = {int(phases(CASE)[p]["checkpoint"].name[4:]): p for p in range(3)}
    assert real == {1: 0, 3: 1, 5: 2} and all(phase_of(n) == p for n, p in real.items())
    for n in IDS:
        if n not in real:
            model = job / phases(CASE)[phase_of(n)]["checkpoint"].name
            shutil.copytree(model, job / f"chk-{n}")
            _set_checkpoint_id(job / f"chk-{n}" / "_metadata", n)
    _set_mtimes(root, COPY_TIME)
    if mtimes == "reversed":  # later checkpoints older
        for n in IDS:
            _set_mtimes(job / f"chk-{n}", COPY_TIME - dt.timedelta(minutes=n))
    return job


MTIMES = ["reset", "reversed"]


def test_text_order_is_not_checkpoint_order():
    """The premise: listing order zigzags through the phases."""
    text = sorted(f"chk-{n}" for n in IDS)
    assert [phase_of(int(name[4:])) for name in text][:5] == [0, 2, 2, 2, 0]


# ----------------------------------------------------------------------------- history


def _history_json(root: Path, key: str, capsys, *more: str) -> dict:
    code = cli_main(["history", str(root), key, "--state", "accState", "--format", "json", *more])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out)


@pytest.mark.parametrize("mtimes", MTIMES)
def test_history_of_a_copied_job_directory_is_in_checkpoint_order(tmp_path, capsys, mtimes):
    job = copied_job(tmp_path / "root", mtimes)
    key = changing_key()
    snapshots = _history_json(tmp_path / "root", key, capsys)["snapshots"]
    assert [s["path"] for s in snapshots] == [str(job / f"chk-{n}") for n in IDS]
    assert [s["checkpoint_id"] for s in snapshots] == IDS
    got = [[r["value"] for r in s["rows"]] for s in snapshots]
    assert got == [[accstate(phase_of(n))[key]] for n in IDS]
    # The copy kept Flink's layout, so the mtime passes for the completion time; the order ignores it.
    assert {s["time_source"] for s in snapshots} == {SOURCE_CHECKPOINT}
    times = [dt.datetime.fromisoformat(s["taken_at"]) for s in snapshots]
    if mtimes == "reversed":
        assert times == sorted(times, reverse=True)

    code = cli_main(["history", str(tmp_path / "root"), key, "--state", "accState"])
    table = capsys.readouterr().out
    assert code == 0
    ids = [int(line.split("|")[2]) for line in table.splitlines() if line.startswith("| 2026")]
    assert ids == IDS


def test_savepoints_and_checkpoints_of_one_job_interleave_by_checkpoint_id(tmp_path, capsys):
    """Flink numbers a job's savepoints and checkpoints with one counter: the case's savepoint
    after each phase is checkpoint 2, 4, 6, between the retained checkpoints 1, 3, 5."""
    root = tmp_path / "root"
    case = phases(CASE)[0]["checkpoint"].parents[2]
    for part in ("checkpoints", "savepoints"):
        shutil.copytree(case / part, root / part, copy_function=shutil.copy)
    _set_mtimes(root, COPY_TIME)
    key = changing_key()
    snapshots = _history_json(root, key, capsys)["snapshots"]
    want = []
    for phase in phases(CASE):
        want += [root / phase["checkpoint"].relative_to(case), root / phase["savepoint"].relative_to(case)]
    assert [s["path"] for s in snapshots] == [str(p) for p in want]
    assert [s["checkpoint_id"] for s in snapshots] == [1, 2, 3, 4, 5, 6]
    assert [[r["value"] for r in s["rows"]] for s in snapshots] == [[accstate(i // 2)[key]] for i in range(6)]


def test_an_unreadable_checkpoint_keeps_its_place_among_its_jobs(tmp_path, capsys):
    job = copied_job(tmp_path / "root", "reset")
    metadata = job / "chk-7" / "_metadata"
    metadata.write_bytes(metadata.read_bytes()[:40])  # cut short: the id is still there, the rest is not
    snapshots = _history_json(tmp_path / "root", changing_key(), capsys)["snapshots"]
    assert [s["path"] for s in snapshots] == [str(job / f"chk-{n}") for n in IDS]
    assert [s["error"] is not None for s in snapshots] == [n == 7 for n in IDS]


# ----------------------------------------------------------------------------- materialize and the lake


def _snapshots_table(lake: Path) -> list[dict]:
    return read_delta(deltalake.DeltaTable(str(lake / "snapshots"))).to_pylist()


@pytest.fixture(scope="module", params=MTIMES)
def lake(request, tmp_path_factory):
    base = tmp_path_factory.mktemp(f"lake_{request.param}")
    job = copied_job(base / "root", request.param)
    order: list[str] = []
    result = Materializer(base / "lake", on_result=lambda r: order.append(r.path)).run([str(base / "root")])
    assert [s.outcome for s in result.snapshots] == ["written"] * len(IDS)
    return job, base / "lake", order


def test_materialize_processes_a_copied_job_directory_in_checkpoint_order(lake):
    job, lake_dir, order = lake
    assert order == [str(job / f"chk-{n}") for n in IDS]
    rows = sorted(_snapshots_table(lake_dir), key=lambda r: r["materialized_at"])
    assert [r["path"] for r in rows] == [str(job / f"chk-{n}") for n in IDS]
    assert [r["checkpoint_id"] for r in rows] == IDS
    assert {r["job_id"] for r in rows} == {JOB_ID}
    assert {r["taken_at_source"] for r in rows} == {SOURCE_CHECKPOINT}
    # Delta's commit history of the marker table: one commit per snapshot, in checkpoint order.
    versions = deltalake.DeltaTable(str(lake_dir / "snapshots")).history()
    committed = [
        v["statecat.snapshot_id"] for v in sorted(versions, key=lambda v: v["version"]) if "statecat.snapshot_id" in v
    ]
    assert committed == [r["snapshot_id"] for r in rows]


def _dashboard(con, name: str, key: str | None = None) -> list[dict]:
    sql = (DASHBOARDS / name).read_text()
    if key is not None:
        assert "'key_662'" in sql
        sql = sql.replace("'key_662'", f"'{key}'")
    return con.execute(sql).arrow().read_all().to_pylist()


def test_dashboard_queries_show_a_copied_job_directory_in_checkpoint_order(lake):
    _, lake_dir, _ = lake
    con = duckdb_with_delta()
    register_lake_views(con, lake_dir)
    trend = _dashboard(con, "12_key_count_trend.sql")
    assert [(t["checkpoint_id"], t["keys"]) for t in trend] == [(n, len(accstate(phase_of(n)))) for n in IDS]
    key = changing_key()
    history = _dashboard(con, "13_key_history.sql", key)
    want = [(n, accstate(phase_of(n))[key]) for n in IDS]
    assert [(h["checkpoint_id"], {"f0": h["count"], "f1": h["total"]}) for h in history] == want
    for name in ("11_state_size_over_time.sql", "14_key_group_skew.sql"):
        rows = _dashboard(con, name)
        ids = [r["checkpoint_id"] for r in rows]
        assert ids == sorted(ids) and set(ids) == set(IDS), name
        assert {r["taken_at_source"] for r in rows} == {SOURCE_CHECKPOINT}, name


def test_keep_keeps_the_highest_checkpoint_ids_whatever_the_mtimes(tmp_path):
    job = copied_job(tmp_path / "root", "reversed")  # chk-12 has the oldest mtime
    result = Materializer(tmp_path / "lake", retention=Retention(keep=3)).run([str(tmp_path / "root")])
    assert [s.path for s in result.snapshots if s.outcome == "written"] == [str(job / f"chk-{n}") for n in (10, 11, 12)]
    assert sorted(r["checkpoint_id"] for r in _snapshots_table(tmp_path / "lake")) == [10, 11, 12]


# ----------------------------------------------------------------------------- watch


@pytest.mark.parametrize("mtimes", MTIMES)
def test_watch_hands_a_copied_backlog_on_in_checkpoint_order(tmp_path, mtimes):
    job = copied_job(tmp_path / "root", mtimes)
    ready: list[str] = []
    watcher = Watcher([str(tmp_path / "root")], output=str(tmp_path / "info"), stable_polls=1, on_ready=ready.append)
    events = watcher.poll()
    assert [e.path for e in events if e.kind == "snapshot"] == [str(job / f"chk-{n}") for n in IDS]
    assert ready == [str(tmp_path / "root" / "checkpoints" / JOB_ID / f"chk-{n}") for n in IDS]
    # A restarted watcher finds them done and hands them on in the same order.
    again: list[str] = []
    events = Watcher(
        [str(tmp_path / "root")], output=str(tmp_path / "info"), stable_polls=1, on_ready=again.append
    ).poll()
    assert [e.kind for e in events] == ["done"] * len(IDS) and again == ready


# ----------------------------------------------------------------------------- Flink's checkpoint history (--rest)


@contextmanager
def fake_jobmanager(answers: dict[str, object]) -> Iterator[str]:
    """An HTTP server answering GET path -> JSON (bytes are sent as they are); 404 otherwise."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            body = answers.get(self.path)
            code = 200 if body is not None else 404
            if body is None:
                body = {"errors": [f"Not found: {self.path}"]}
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


ACKED = {
    3: dt.datetime(2026, 4, 1, 8, 0, 3, 123000, tzinfo=dt.UTC),
    11: dt.datetime(2026, 4, 1, 8, 0, 11, tzinfo=dt.UTC),
}


def _history_answer(job: Path) -> dict:
    """What Flink's GET /jobs/<id>/checkpoints says: checkpoint 11 (history, as Flink wrote it
    elsewhere), 3 (only as the latest completed one), a failed 12 and an in-progress 13."""

    def entry(n, status="COMPLETED"):
        acked = ACKED.get(n)
        return {
            "className": ".CompletedCheckpointStatistics",
            "id": n,
            "status": status,
            "is_savepoint": False,
            "trigger_timestamp": 0,
            "latest_ack_timestamp": int(acked.timestamp() * 1000) if acked else 0,
            "external_path": f"file:/flink/checkpoints/{JOB_ID}/chk-{n}",
        }

    return {
        "counts": {},
        "history": [entry(13, "IN_PROGRESS"), entry(12, "FAILED"), entry(11)],
        "latest": {"completed": entry(3), "savepoint": None, "failed": None, "restored": None},
    }


def test_rest_checkpoint_history_times_the_snapshots_it_lists(tmp_path, capsys):
    job = copied_job(tmp_path / "root", "reversed")
    other = "f" * 32
    answers = {
        "/jobs": {"jobs": [{"id": JOB_ID, "status": "RUNNING"}, {"id": other, "status": "FINISHED"}]},
        f"/jobs/{JOB_ID}/checkpoints": _history_answer(job),
        # f"/jobs/{other}/checkpoints" answers 404, as Flink does for a job without checkpointing
    }
    with fake_jobmanager(answers) as url:
        snapshots = _history_json(tmp_path / "root", changing_key(), capsys, "--rest", url)["snapshots"]
    assert [s["checkpoint_id"] for s in snapshots] == IDS
    sources = {s["checkpoint_id"]: s["time_source"] for s in snapshots}
    assert sources == {n: SOURCE_FLINK_HISTORY if n in ACKED else SOURCE_CHECKPOINT for n in IDS}
    for s in snapshots:
        if s["checkpoint_id"] in ACKED:
            assert dt.datetime.fromisoformat(s["taken_at"]) == ACKED[s["checkpoint_id"]]

    with fake_jobmanager(answers) as url:
        Materializer(tmp_path / "lake").run([str(job / "chk-3")])  # the API without history: the mtime
        code = cli_main(["materialize", str(job / "chk-11"), "--to", str(tmp_path / "lake"), "--rest", url])
    capsys.readouterr()
    assert code == 0
    rows = {r["checkpoint_id"]: r for r in _snapshots_table(tmp_path / "lake")}
    assert rows[3]["taken_at_source"] == SOURCE_CHECKPOINT
    assert (rows[11]["taken_at"], rows[11]["taken_at_source"]) == (ACKED[11], SOURCE_FLINK_HISTORY)


def test_a_savepoint_copy_is_matched_by_its_directory_name(tmp_path, capsys):
    case = phases(CASE)[0]["savepoint"]
    name = f"savepoint-{JOB_ID[:6]}-0123456789ab"
    shutil.copytree(case, tmp_path / "copied" / name, copy_function=shutil.copy)
    acked = dt.datetime(2026, 4, 2, 9, 30, tzinfo=dt.UTC)
    answer = {
        "history": [
            {
                "id": 2,
                "status": "COMPLETED",
                "is_savepoint": True,
                "latest_ack_timestamp": int(acked.timestamp() * 1000),
                "external_path": f"s3://bucket/savepoints/{name}",
            }
        ]
    }
    answers = {"/jobs": {"jobs": [{"id": JOB_ID}]}, f"/jobs/{JOB_ID}/checkpoints": answer}
    with fake_jobmanager(answers) as url:
        snapshots = _history_json(tmp_path / "copied", changing_key(), capsys, "--rest", url)["snapshots"]
    assert [(s["checkpoint_id"], s["time_source"]) for s in snapshots] == [(2, SOURCE_FLINK_HISTORY)]
    assert dt.datetime.fromisoformat(snapshots[0]["taken_at"]) == acked


@pytest.mark.parametrize(
    "answers,message",
    [
        ({"/jobs": b"<html>a web page</html>"}, "is not JSON"),
        ({"/jobs": {"jobs": "none"}}, "without a list of jobs"),
        (
            {"/jobs": {"jobs": [{"id": JOB_ID}]}, f"/jobs/{JOB_ID}/checkpoints": {"history": {"id": 1}}},
            "'history' that is not a list",
        ),
        (
            {"/jobs": {"jobs": [{"id": JOB_ID}]}, f"/jobs/{JOB_ID}/checkpoints": {"history": [{"id": 4}]}},
            "history[0] (checkpoint 4) without a 'latest_ack_timestamp'",
        ),
        (
            {
                "/jobs": {"jobs": [{"id": JOB_ID}]},
                f"/jobs/{JOB_ID}/checkpoints": {"history": [{"id": "4", "latest_ack_timestamp": 1}]},
            },
            "history[0] without an integer 'id'",
        ),
    ],
)
def test_a_malformed_rest_answer_is_a_clear_error(tmp_path, capsys, answers, message):
    copied_job(tmp_path / "root", "reset")
    with fake_jobmanager(answers) as url:
        for command in (
            ["history", str(tmp_path / "root"), "key_1", "--rest", url],
            ["materialize", str(tmp_path / "root"), "--to", str(tmp_path / "lake"), "--rest", url],
        ):
            code = cli_main(command)
            err = capsys.readouterr().err
            assert code == 2 and message in err and url in err and "Traceback" not in err, err
    assert not (tmp_path / "lake").exists()  # checked before anything was written


def test_an_unreachable_rest_address_is_a_clear_error(tmp_path, capsys):
    copied_job(tmp_path / "root", "reset")
    with fake_jobmanager({}) as url:
        pass  # the port is free again
    code = cli_main(["history", str(tmp_path / "root"), "key_1", "--rest", url])
    err = capsys.readouterr().err
    assert code == 2 and "cannot reach Flink's REST API" in err and url in err


# ----------------------------------------------------------------------------- the catalog views (Spark)


@pytest.mark.spark
def test_catalog_views_list_a_copied_job_directory_in_checkpoint_order(tmp_path):
    from statecat.catalog import attach
    from statecat.catalog.servers.sessions import session

    job = copied_job(tmp_path / "root", "reversed")
    spark = session(
        str(tmp_path / "home"),
        conf={"spark.sql.session.timeZone": "UTC", "spark.log.level": "ERROR", "spark.ui.showConsoleProgress": "false"},
    )
    try:
        result = attach(spark, [str(tmp_path / "root")], eager=False)
        assert result.failed == []
        # No ORDER BY: the views list the savepoints in the order they are registered by, checkpoint order.
        rows = spark.sql("SELECT path, checkpoint_id FROM statecat.states WHERE state_name = 'accState'").collect()
        assert [(r.path, r.checkpoint_id) for r in rows] == [(str(job / f"chk-{n}"), n) for n in IDS]
        key = changing_key()
        view = spark.sql(
            f"SELECT checkpoint_id, value FROM statecat.key_view WHERE key = '{key}' AND state = 'accState'"
        ).collect()
        assert [(r.checkpoint_id, json.loads(r.value)) for r in view] == [(n, accstate(phase_of(n))[key]) for n in IDS]
        example = (Path(__file__).resolve().parents[1] / "sql_examples" / "09_key_across_savepoints.sql").read_text()
        example = example.replace("'key_662'", f"'{key}'")
        example = example[: example.index("  AND database IN")] + example[example.index("ORDER BY") :]
        ordered = spark.sql(example).collect()
        assert [(r.checkpoint_id, r["count"], r.total) for r in ordered] == [
            (n, accstate(phase_of(n))[key]["f0"], accstate(phase_of(n))[key]["f1"]) for n in IDS
        ]
    finally:
        spark.stop()
