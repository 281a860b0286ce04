"""`statecat materialize`: savepoint history as Delta tables, exactly once, read back by two engines.

The lake is read with deltalake and, independently, with DuckDB's delta extension (the
duckdb-extension-delta wheel, loaded from its file: DuckDB's own extension repository is not
used), and compared with the savepoints' own rows (statecat.readers) and the jobs' input
(expected.json).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import deltalake
import pyarrow as pa
import pytest

from statecat.catalog.lake.materialize import Materializer, Retention, Selection
from statecat.catalog.lake.tables import delta_type, read_delta
from statecat.readers import SavepointReader, key_group_for
from statecat.statemeta.model import load_state_meta
from statecat.statemeta.naming import stable_state_names
from tests.crashing_materialize import CRASH_EXIT_CODE
from tests.fixtures.expected import CASES, iter_states, load_expected, savepoint_dir

# One SQL GROUP BY job, snapshotted by several Flink versions and backends: one job's history. The
# snapshots are checkpoint 1 of separate runs (ordered by their mtimes, a day apart), then the
# retained checkpoint 2: the lake orders by checkpoint id first.
GROUPBY_HISTORY = (
    "sql_groupby_hashmap_1.15",
    "sql_groupby_rocksdb_1.15",
    "sql_groupby_hashmap_1.20",
    "sql_groupby_rocksdb_1.20",
    "sql_groupby_hashmap_2.0",
    "sql_groupby_native_rocksdb_2.3",
    "sql_groupby_rocksdb_2.3",
    "sql_groupby_compressed_2.3",
    "sql_groupby_hashmap_2.3",
    "sql_groupby_checkpoint_hashmap_2.3",
)
# Snapshots only partly readable (status "partial"): none since native RocksDB state is read.
PARTIAL: set[str] = set()
DAY = 86_400
HISTORY_START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


# ----------------------------------------------------------------------------- helpers (also for test_lake_s3)


def duckdb_with_delta():
    """A DuckDB connection with the delta extension loaded from the installed wheel (offline)."""
    import duckdb
    import duckdb_extension_delta

    base = Path(duckdb_extension_delta.__file__).parent / "extensions"
    candidates = sorted(base.glob(f"v{duckdb.__version__}/delta.duckdb_extension")) or sorted(
        base.glob("v*/delta.duckdb_extension")
    )
    assert candidates, f"no delta extension in {base}"
    con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    con.execute(f"LOAD '{candidates[0]}'")
    return con


def register_lake_views(con, lake: Path) -> list[str]:
    """One DuckDB view per lake table (snapshots, state_meta, state_stats, each state table)."""
    names = []
    for name in ("snapshots", "state_meta", "state_stats"):
        con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM delta_scan('{lake / name}')")
        names.append(name)
    for table in sorted(p.name for p in (lake / "states").iterdir()):
        con.execute(f"CREATE OR REPLACE VIEW {table} AS SELECT * FROM delta_scan('{lake / 'states' / table}')")
        names.append(table)
    return names


def canonical(rows) -> list[str]:
    """Rows as sorted JSON text, so two engines' and the reader's rows compare regardless of order."""

    def plain(v):
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            items = [plain(x) for x in v]
            is_map = isinstance(v, list) and v and isinstance(v[0], tuple)  # Arrow maps: (key, value) pairs
            return sorted(items, key=lambda x: json.dumps(x, sort_keys=True, default=str)) if is_map else items
        return v

    return sorted(json.dumps(plain(r), sort_keys=True, default=str) for r in rows)


def reader_rows(path, op_id: str, state: str) -> list[dict]:
    return SavepointReader(str(path)).table(state, op_id).to_pylist()


def lake_partition(lake: Path, table: str, snapshot_id: str, columns: list[str]) -> list[dict]:
    from deltalake import QueryBuilder

    query = QueryBuilder().register("t", deltalake.DeltaTable(str(lake / "states" / table)))
    cols = ", ".join(f'"{c}"' for c in columns)
    data = pa.RecordBatchReader.from_stream(query.execute(f"SELECT {cols} FROM t WHERE snapshot_id = '{snapshot_id}'"))
    return data.read_all().to_pylist()


def duckdb_partition(con, lake: Path, table: str, snapshot_id: str, columns: list[str]) -> list[dict]:
    cols = ", ".join(columns)
    return (
        con.execute(f"SELECT {cols} FROM delta_scan('{lake / 'states' / table}') WHERE snapshot_id = ?", [snapshot_id])
        .arrow()
        .read_all()
        .to_pylist()
    )


def place_history(root: Path, cases=GROUPBY_HISTORY) -> dict[str, Path]:
    """Copies savepoints under root as one job's savepoints, a day apart (their _metadata mtimes)."""
    placed = {}
    for day, case in enumerate(cases):
        dest = root / f"savepoint-{day:06x}-{case.replace('.', '').replace('_', '')[-12:]:>012}"
        shutil.copytree(savepoint_dir(case), dest)
        (dest / "stateInfo").unlink(missing_ok=True)
        stamp = (HISTORY_START + dt.timedelta(days=day)).timestamp()
        os.utime(dest / "_metadata", (stamp, stamp))
        placed[case] = dest
    return placed


REPO = Path(__file__).resolve().parents[1]


def statecat_cli(*args, env=None, check=True, crash_after_commits: int | None = None):
    """``statecat ARGS`` in a child process; with ``crash_after_commits``, a materialize that dies
    abruptly after that many lake commits (tests/crashing_materialize.py)."""
    if crash_after_commits is None:
        command = [sys.executable, "-m", "statecat.catalog.cli", *map(str, args)]
    else:
        assert args[0] == "materialize"
        command = [sys.executable, "-m", "tests.crashing_materialize", str(crash_after_commits), *map(str, args[1:])]
    proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300, cwd=REPO)
    if check and proc.returncode not in (0,):
        raise AssertionError(f"statecat {' '.join(map(str, args))} exited {proc.returncode}:\n{proc.stderr}")
    return proc


def snapshot_rows(lake: Path) -> list[dict]:
    return read_delta(deltalake.DeltaTable(str(lake / "snapshots"))).to_pylist()


def assert_lake_matches_savepoints(lake: Path, placed: dict[str, Path], con=None) -> None:
    """Each snapshot once; every state partition equal to the savepoint's rows (deltalake and DuckDB)."""
    rows = snapshot_rows(lake)
    ids = Counter(r["snapshot_id"] for r in rows)
    assert all(n == 1 for n in ids.values()), ids
    by_path = {r["path"]: r for r in rows}
    assert set(by_path) == {str(p) for p in placed.values()}
    con = con or duckdb_with_delta()
    for case, path in placed.items():
        row = by_path[str(path)]
        assert row["status"] == ("partial" if case in PARTIAL else "complete"), row
        meta = load_state_meta(str(path))
        names = stable_state_names(meta)
        written = 0
        for op, state in meta.states():
            table = names[(op.id, state.name)]
            columns = SavepointReader(meta).schema(state.name, op.id).names
            expected = canonical(reader_rows(path, op.id, state.name))
            assert canonical(lake_partition(lake, table, row["snapshot_id"], columns)) == expected, (case, table)
            assert canonical(duckdb_partition(con, lake, table, row["snapshot_id"], columns)) == expected, (case, table)
            written += len(expected)
        assert row["rows"] == written
    # No partition of a snapshot that the snapshots table does not list.
    for table in (lake / "states").iterdir():
        parts = {p["snapshot_id"] for p in deltalake.DeltaTable(str(table)).partitions()}
        assert parts <= set(ids), (table.name, parts - set(ids))


# ----------------------------------------------------------------------------- stable names


def _names(case):
    """(operator id, state name) -> stable name; operator ids agree across the fixtures of one job."""
    return stable_state_names(load_state_meta(str(savepoint_dir(case)), use_state_info=False))


def test_stable_names_are_the_same_across_flink_versions_and_backends():
    readable = [c for c in GROUPBY_HISTORY if c not in PARTIAL]
    first = _names(readable[0])
    assert set(first.values()) == {
        "accstate",
        "coordinator",
        "sourcereaderstate",
        "timer_state_event_user_timers",
        "timer_state_processing_user_timers",
    }
    for case in readable[1:]:
        assert _names(case) == first, case  # Flink 1.15 (no names in _metadata) to 2.3, heap and RocksDB
    # A partly readable snapshot names the states it has the same way.
    for case in PARTIAL:
        names = _names(case)
        assert names and all(first[k] == v for k, v in names.items())
    assert _names("datastream_thread_1.20") == _names("datastream_thread_2.3")  # no uids in 1.x _metadata


def test_stable_names_qualify_only_shared_state_names_without_plan_counters():
    names = _names("sql_types_2.3")  # operators like 'Source: a_src[11]', 'GroupAggregate[16]'
    meta = load_state_meta(str(savepoint_dir("sql_types_2.3")), use_state_info=False)
    labels = {op.id: op.name for op in meta.operators}
    assert names[next(k for k in names if k[1] == "accState")] == "accstate"
    sources = sorted(v for (op_id, state), v in names.items() if state == "SourceReaderState")
    assert sources == ["source_a_src__sourcereaderstate", "source_b_src__sourcereaderstate"]
    for (op_id, _), name in names.items():
        counter = labels[op_id].split("[")[-1].split("]")[0] if "[" in labels[op_id] else None
        assert counter is None or counter not in name, (labels[op_id], name)
    assert len(set(names.values())) == len(names)
    # uids qualify when a state name is shared (DataStream jobs with uids).
    windows = set(_names("datastream_windows_thread_2.3").values())
    assert {"tumble_agg__window_contents", "global_reduce__window_contents", "count"} <= windows


# ----------------------------------------------------------------------------- one job's history


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    base = tmp_path_factory.mktemp("history")
    placed = place_history(base / "root")
    lake = base / "lake"
    first = statecat_cli("materialize", base / "root", "--to", lake)
    versions = {
        p.name: deltalake.DeltaTable(str(p)).version() for p in [*(lake / "states").iterdir(), lake / "snapshots"]
    }
    second = statecat_cli("materialize", base / "root", "--to", lake)
    return base, placed, lake, first, second, versions


def test_materializing_twice_gives_each_snapshot_once_equal_to_the_savepoint(history):
    base, placed, lake, first, second, versions = history
    assert first.stdout.count("written ") == len(placed) - len(PARTIAL)
    assert first.stdout.count("partial ") == len(PARTIAL)
    assert second.stdout.count("skipped ") == len(placed) and "written" not in second.stdout
    # The second run committed nothing.
    after = {p.name: deltalake.DeltaTable(str(p)).version() for p in [*(lake / "states").iterdir(), lake / "snapshots"]}
    assert after == versions
    assert_lake_matches_savepoints(lake, placed)


def test_lake_rows_equal_the_jobs_input(history):
    base, placed, lake, *_ = history
    rows = {r["path"]: r for r in snapshot_rows(lake)}
    for case in ("sql_groupby_hashmap_2.3", "sql_groupby_rocksdb_1.15"):
        expected = next(st for _, st in iter_states(load_expected(case)) if st["name"] == "accState")["rows"]
        got = lake_partition(lake, "accstate", rows[str(placed[case])]["snapshot_id"], ["key", "namespace", "value"])
        assert canonical(got) == canonical(expected)


def test_snapshots_record_identity_time_and_unsupported_parts(history):
    base, placed, lake, *_ = history
    rows = {r["path"]: r for r in snapshot_rows(lake)}
    for day, case in enumerate(GROUPBY_HISTORY):
        row = rows[str(placed[case])]
        meta_bytes = (placed[case] / "_metadata").read_bytes()
        import hashlib

        assert row["metadata_sha256"] == hashlib.sha256(meta_bytes).hexdigest()
        assert row["snapshot_id"] == row["metadata_sha256"][:16]
        assert row["taken_at"] == HISTORY_START + dt.timedelta(days=day)
        assert row["taken_at_source"] == "file_mtime: may be the copy time"  # copied fixtures: no better source
        assert row["checkpoint_id"] == load_state_meta(str(placed[case])).checkpoint_id
        if case in PARTIAL:
            assert row["unsupported"] and all("GroupAggregate" in r for r in row["unsupported"])
        else:
            assert row["unsupported"] == []
    partial_ids = {rows[str(placed[c])]["snapshot_id"] for c in PARTIAL}
    accstate = {p["snapshot_id"] for p in deltalake.DeltaTable(str(lake / "states" / "accstate")).partitions()}
    assert not partial_ids & accstate  # what could not be read is absent, not empty-and-silent
    meta = read_delta(deltalake.DeltaTable(str(lake / "state_meta"))).to_pylist()
    for row in meta:
        assert row["materialized"] is True and row["table_name"]


def test_state_stats_count_entries_per_key_group_and_bytes_from_offsets(history):
    base, placed, lake, *_ = history
    rows = {r["path"]: r for r in snapshot_rows(lake)}
    stats = read_delta(deltalake.DeltaTable(str(lake / "state_stats"))).to_pylist()
    for case in ("sql_groupby_hashmap_2.3", "sql_groupby_rocksdb_1.20", "sql_groupby_compressed_2.3"):
        path = placed[case]
        sid = rows[str(path)]["snapshot_id"]
        mine = [s for s in stats if s["snapshot_id"] == sid]
        meta = load_state_meta(str(path))
        op, state = meta.find_state("accState")
        keys = [r["key"] for r in reader_rows(path, op.id, "accState")]
        per_group = Counter(key_group_for(k, state.key, op.max_parallelism) for k in keys)
        acc = {s["key_group"]: s for s in mine if s["state_name"] == "accState"}
        assert set(acc) == set(range(op.max_parallelism))
        assert {g: s["entries"] for g, s in acc.items() if s["entries"]} == dict(per_group)
        # Bytes: each key-group's span between its offset and the next (the last one ends with the stream).
        for loc in state.locations:
            ends = list(loc.offsets[1:]) + [loc.stream.size]
            for i, (start, end) in enumerate(zip(loc.offsets, ends)):
                assert acc[loc.start_key_group + i]["bytes"] == end - start
        assert sum(s["bytes"] for s in acc.values()) == sum(loc.stream.size - loc.offsets[0] for loc in state.locations)
        source = [s for s in mine if s["state_name"] == "SourceReaderState"]
        assert {s["subtask"] for s in source} == {0, 1} and all(s["key_group"] is None for s in source)


def test_dashboard_queries_answer_on_the_lake(history):
    base, placed, lake, *_ = history
    con = duckdb_with_delta()
    register_lake_views(con, lake)
    queries = Path(__file__).resolve().parents[1] / "sql_examples" / "dashboards"
    rows = {r["path"]: r for r in snapshot_rows(lake)}
    order = [rows[str(placed[c])] for c in GROUPBY_HISTORY]

    def run(name):
        return con.execute((queries / name).read_text()).arrow().read_all().to_pylist()

    # Key-count trend: one row per snapshot that holds accState, in time order, counting its keys.
    trend = run("12_key_count_trend.sql")
    readable = [r for c, r in zip(GROUPBY_HISTORY, order) if c not in PARTIAL]
    assert [t["checkpoint_id"] for t in trend] == [r["checkpoint_id"] for r in readable]
    expected_keys = [
        len(next(st for _, st in iter_states(load_expected(c)) if st["name"] == "accState")["rows"])
        for c in GROUPBY_HISTORY
        if c not in PARTIAL
    ]
    assert [t["keys"] for t in trend] == expected_keys
    assert [t["taken_at"] for t in trend] == sorted(t["taken_at"] for t in trend)

    # One key's history: key_662's count and total in each snapshot holding it, from the jobs' input.
    history_rows = run("13_key_history.sql")
    truth = []
    for case in GROUPBY_HISTORY:
        if case in PARTIAL:
            continue
        acc = next(st for _, st in iter_states(load_expected(case)) if st["name"] == "accState")["rows"]
        truth += [(r["value"]["f0"], r["value"]["f1"]) for r in acc if r["key"] == "key_662"]
    assert [(h["count"], h["total"]) for h in history_rows] == truth and truth

    # State size over time per operator: bytes add up to the model's per-operator totals.
    sizes = run("11_state_size_over_time.sql")
    for case, snap in zip(GROUPBY_HISTORY, order):
        meta = load_state_meta(str(placed[case]))
        for op in meta.operators:
            if not op.states:
                continue
            keyed = {
                (loc.subtask, loc.stream.size - loc.offsets[0])
                for s in op.states
                if s.is_keyed
                for loc in s.locations
                if loc.native is None
            }
            # A native RocksDB instance's states hold its SST files' bytes (readers/scans/state_bytes.py).
            native = {loc.native for s in op.states if s.is_keyed for loc in s.locations if loc.native is not None}
            keyed_bytes = sum(b for _, b in keyed) + sum(f.stream.size for h in native for f in h.sst_files)
            other = sum(
                loc.end - min(loc.offsets, default=loc.end) for s in op.states if not s.is_keyed for loc in s.locations
            )
            got = [s for s in sizes if s["snapshot_id"] == snap["snapshot_id"] and s["operator"] == op.label]
            assert len(got) == 1, (case, op.label)
            assert got[0]["bytes"] == keyed_bytes + other, (case, op.label)

    # Key-group skew: the busiest key-group of accState per snapshot, as state_stats counts it.
    skew = run("14_key_group_skew.sql")
    acc_skew = [s for s in skew if s["table_name"] == "accstate"]
    assert len(acc_skew) == len(readable)
    for s in acc_skew:
        path = next(placed[c] for c, r in zip(GROUPBY_HISTORY, order) if r["snapshot_id"] == s["snapshot_id"])
        op, state = load_state_meta(str(path)).find_state("accState")
        counts = Counter(
            key_group_for(r["key"], state.key, op.max_parallelism) for r in reader_rows(path, op.id, "accState")
        )
        assert s["max_entries"] == max(counts.values())
        assert s["key_groups"] == op.max_parallelism


def test_dashboard_queries_are_spark_sql_too():
    import sqlglot

    queries = sorted((Path(__file__).resolve().parents[1] / "sql_examples" / "dashboards").glob("*.sql"))
    assert len(queries) == 4
    for query in queries:
        sqlglot.parse_one(query.read_text(), read="spark")  # raises on SQL Spark's dialect lacks


# ----------------------------------------------------------------------------- every other fixture job

OTHER_JOBS = sorted(c for c in CASES if not c.startswith("sql_groupby_"))


@pytest.mark.parametrize("case", OTHER_JOBS)
def test_every_fixture_job_materializes_equal_to_its_savepoint(tmp_path, case):
    # Each job in its own lake: SQL types (decimals, zoned and naive timestamps, maps with struct keys),
    # DataStream POJOs, rows, lists, windows, timers, broadcast and PyFlink state.
    placed = place_history(tmp_path / "root", (case,))
    lake = tmp_path / "lake"
    twice = [Materializer(lake).run([str(tmp_path / "root")]) for _ in range(2)]
    assert [s.outcome for s in twice[0].snapshots] == ["written"]
    assert [s.outcome for s in twice[1].snapshots] == ["skipped"]
    assert_lake_matches_savepoints(lake, placed)


# ----------------------------------------------------------------------------- crashes, retention, errors


@pytest.mark.parametrize("crash_after", [3, 9])
def test_crash_mid_write_then_rerun_gives_each_snapshot_once(tmp_path, crash_after):
    cases = ("sql_groupby_hashmap_2.0", "sql_groupby_rocksdb_2.3", "sql_groupby_hashmap_2.3")
    placed = place_history(tmp_path / "root", cases)
    lake = tmp_path / "lake"
    crashed = statecat_cli("materialize", tmp_path / "root", "--to", lake, check=False, crash_after_commits=crash_after)
    assert crashed.returncode == CRASH_EXIT_CODE, crashed.stderr
    # Commits per snapshot: 5 state tables, state_stats, state_meta, then the snapshots row.
    finished = crash_after // 7
    listed = snapshot_rows(lake) if (lake / "snapshots").exists() else []
    assert len(listed) == finished
    # The crashed snapshot's first partitions were committed, yet it is not listed.
    assert (lake / "states" / "accstate" / "_delta_log").is_dir()
    rerun = statecat_cli("materialize", tmp_path / "root", "--to", lake)
    assert rerun.stdout.count("skipped ") == finished
    assert rerun.stdout.count("written ") == len(cases) - finished
    assert_lake_matches_savepoints(lake, placed)


def test_orphan_partitions_of_a_vanished_savepoint_are_deleted(tmp_path):
    placed = place_history(tmp_path / "root", ("sql_groupby_hashmap_2.3", "sql_groupby_rocksdb_2.3"))
    lake = tmp_path / "lake"
    # Dies in the second snapshot.
    crashed = statecat_cli("materialize", tmp_path / "root", "--to", lake, check=False, crash_after_commits=9)
    assert crashed.returncode == CRASH_EXIT_CODE
    shutil.rmtree(placed.pop("sql_groupby_rocksdb_2.3"))
    statecat_cli("materialize", tmp_path / "root", "--to", lake)
    assert_lake_matches_savepoints(lake, placed)
    meta_parts = {p["snapshot_id"] for p in deltalake.DeltaTable(str(lake / "state_meta")).partitions()}
    assert meta_parts == {r["snapshot_id"] for r in snapshot_rows(lake)}


def test_keep_removes_old_snapshots_and_vacuums(tmp_path):
    cases = (
        "sql_groupby_hashmap_1.20",
        "sql_groupby_hashmap_2.0",
        "sql_groupby_rocksdb_2.3",
        "sql_groupby_hashmap_2.3",
    )
    placed = place_history(tmp_path / "root", cases)
    lake = tmp_path / "lake"
    statecat_cli("materialize", tmp_path / "root", "--to", lake)
    before = {r["path"]: r["snapshot_id"] for r in snapshot_rows(lake)}
    files_before = len(list((lake / "states" / "accstate").rglob("*.parquet")))
    out = statecat_cli("materialize", tmp_path / "root", "--to", lake, "--keep", "2", "--vacuum-hours", "0")
    assert "removed 2 old snapshot(s)" in out.stdout
    kept = {r["path"] for r in snapshot_rows(lake)}
    assert kept == {str(placed[c]) for c in cases[2:]}  # the two taken last
    gone = {before[str(placed[c])] for c in cases[:2]}
    for table in [*(lake / "states").iterdir(), lake / "state_meta", lake / "state_stats"]:
        assert not gone & {p["snapshot_id"] for p in deltalake.DeltaTable(str(table)).partitions()}
    assert len(list((lake / "states" / "accstate").rglob("*.parquet"))) < files_before  # vacuumed
    # A later run does not bring the removed ones back.
    again = statecat_cli("materialize", tmp_path / "root", "--to", lake, "--keep", "2")
    assert again.stdout.count("retired ") == 2 and "written" not in again.stdout
    assert {r["path"] for r in snapshot_rows(lake)} == kept
    assert_lake_matches_savepoints(lake, {c: placed[c] for c in cases[2:]})


def test_keep_days_removes_snapshots_taken_before_the_cutoff(tmp_path):
    placed = place_history(tmp_path / "root", ("sql_groupby_hashmap_2.0", "sql_groupby_hashmap_2.3"))
    recent = (dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)).timestamp()
    os.utime(placed["sql_groupby_hashmap_2.3"] / "_metadata", (recent, recent))
    lake = tmp_path / "lake"
    out = statecat_cli("materialize", tmp_path / "root", "--to", lake, "--keep-days", "30")
    assert out.stdout.count("retired ") == 1 and out.stdout.count("written ") == 1
    assert [r["path"] for r in snapshot_rows(lake)] == [str(placed["sql_groupby_hashmap_2.3"])]


def test_a_state_whose_type_cannot_merge_fails_that_snapshot_cleanly(tmp_path):
    # Two jobs' `count` states: string keys, then long keys. Delta cannot merge string into long.
    placed = place_history(tmp_path / "root", ("datastream_thread_2.3", "datastream_types_thread_2.3"))
    lake = tmp_path / "lake"
    out = statecat_cli("materialize", tmp_path / "root", "--to", lake, check=False)
    assert out.returncode == 1
    assert "states/count cannot hold" in out.stderr and "column key was string, is now int64" in out.stderr
    assert "own lake" in out.stderr and "Traceback" not in out.stderr
    rows = snapshot_rows(lake)
    assert [r["path"] for r in rows] == [str(placed["datastream_thread_2.3"])]
    del placed["datastream_types_thread_2.3"]
    assert_lake_matches_savepoints(lake, {"datastream_thread_2.3": placed["datastream_thread_2.3"]})


def test_a_state_that_fails_to_decode_fails_its_snapshot_and_leaves_nothing(tmp_path):
    placed = place_history(tmp_path / "root", ("sql_groupby_hashmap_2.0", "sql_groupby_hashmap_2.3"))
    damaged = placed["sql_groupby_hashmap_2.3"]
    # Cut the largest state file short: the keyed state of one subtask ends early.
    victim = max((f for f in damaged.iterdir() if f.name != "_metadata"), key=lambda f: f.stat().st_size)
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    lake = tmp_path / "lake"
    out = statecat_cli("materialize", tmp_path / "root", "--to", lake, check=False)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert out.stderr.startswith("failed") and victim.name in out.stderr, out.stderr
    assert [r["path"] for r in snapshot_rows(lake)] == [str(placed["sql_groupby_hashmap_2.0"])]
    del placed["sql_groupby_hashmap_2.3"]
    assert_lake_matches_savepoints(lake, placed)  # also: no partition of the failed snapshot is left


def test_schema_rule_merges_added_fields_and_refuses_other_changes():
    from statecat.catalog.lake.materialize import _schema_change_problem

    old = pa.schema([("key", pa.string()), ("value", pa.struct([("f0", pa.int64())]))])
    added = pa.schema(
        [("key", pa.string()), ("value", pa.struct([("f0", pa.int64()), ("f1", pa.string())])), ("extra", pa.int32())]
    )
    assert _schema_change_problem(old, added) is None
    changed = pa.schema([("key", pa.string()), ("value", pa.struct([("f0", pa.string())]))])
    assert _schema_change_problem(old, changed) == "column value.f0 was int64, is now string"
    listed = pa.schema([("value", pa.list_(pa.struct([("a", pa.int32())])))])
    assert _schema_change_problem(listed, pa.schema([("value", pa.list_(pa.struct([("a", pa.int64())])))])) == (
        "column value[].a was int32, is now int64"
    )


def test_operator_and_state_filters_write_only_those_states(tmp_path):
    placed = place_history(tmp_path / "root", ("sql_join_2.3",))
    lake = tmp_path / "lake"
    statecat_cli(
        "materialize",
        tmp_path / "root",
        "--to",
        lake,
        "--state",
        "left-records",
        "--state",
        "source_b__sourcereaderstate",
    )
    assert sorted(p.name for p in (lake / "states").iterdir()) == ["left_records", "source_b__sourcereaderstate"]
    meta = read_delta(deltalake.DeltaTable(str(lake / "state_meta"))).to_pylist()
    assert {m["state_name"] for m in meta if m["materialized"]} == {"left-records", "SourceReaderState"}
    assert len(meta) == 6 and sum(m["materialized"] for m in meta) == 2
    lake2 = tmp_path / "lake2"
    statecat_cli("materialize", placed["sql_join_2.3"], "--to", lake2, "--operator", "Source: a[1]")
    assert sorted(p.name for p in (lake2 / "states").iterdir()) == [
        "source_a__coordinator",
        "source_a__sourcereaderstate",
    ]


def test_watch_materializes_each_new_savepoint(tmp_path):
    root = tmp_path / "root"
    placed = place_history(root / "job", ("sql_window_2.3", "sql_join_2.3"))
    lake = tmp_path / "lake"
    out = statecat_cli("watch", root, "--once", "--output", tmp_path / "info", "--materialize", lake)
    assert out.stderr.count(": written") == 2, out.stderr
    again = statecat_cli("watch", root, "--once", "--output", tmp_path / "info", "--materialize", lake)
    assert ": written" not in again.stderr and again.stderr.count(": skipped") == 2
    # Two jobs in one lake work as long as their state names do not clash in type.
    rows = snapshot_rows(lake)
    assert sorted(r["path"] for r in rows) == sorted(str(p) for p in placed.values())


def test_materializer_api_and_savepoint_copies(tmp_path):
    # The same savepoint at two paths is one snapshot.
    shutil.copytree(savepoint_dir("sql_window_2.3"), tmp_path / "a" / "savepoint-000001-aaaaaaaaaaaa")
    shutil.copytree(savepoint_dir("sql_window_2.3"), tmp_path / "b" / "savepoint-000001-aaaaaaaaaaaa")
    result = Materializer(tmp_path / "lake", selection=Selection(states=("window-aggs",)), retention=Retention()).run(
        [str(tmp_path / "a"), str(tmp_path / "b")]
    )
    assert sorted(s.outcome for s in result.snapshots) == ["skipped", "written"]
    assert len(snapshot_rows(tmp_path / "lake")) == 1


def test_not_a_savepoint_is_a_clear_error(tmp_path):
    (tmp_path / "empty").mkdir()
    out = statecat_cli("materialize", tmp_path / "empty", "--to", tmp_path / "lake", check=False)
    assert out.returncode == 2 and "not a savepoint" in out.stderr and "Traceback" not in out.stderr


def test_delta_type_rule():
    assert delta_type(pa.null()) == pa.string()
    assert delta_type(pa.large_string()) == pa.string()
    assert delta_type(pa.uint32()) == pa.int64()
    assert delta_type(pa.uint64()) == pa.decimal128(20, 0)
    assert delta_type(pa.time64("ns")) == pa.string()
    assert delta_type(pa.timestamp("ns", tz="Europe/Paris")) == pa.timestamp("us", tz="UTC")
    nested = pa.map_(pa.string(), pa.struct([("a", pa.null()), ("b", pa.large_list(pa.uint8()))]))
    assert delta_type(nested) == pa.map_(pa.string(), pa.struct([("a", pa.string()), ("b", pa.list_(pa.int16()))]))
    assert delta_type(pa.struct([])) == pa.string()
