"""`statecat materialize --engine spark`: the deltalake engine's lake, written by Spark tasks through
delta-spark (catalog/lake/spark_writer.py).

Every lake written here is compared with the same snapshots written by the deltalake engine: the
same tables, Delta schemas and partition columns, and every row equal as deltalake and, on its own,
DuckDB's delta extension read them. A lake begun by one engine and continued by the other reads
back whole; re-runs, a crash before the marker, orphan partitions and retention keep each snapshot
once. One Spark session serves the module (on $STATECAT_HOME, so the CLI's --home reuses it).
"""

from __future__ import annotations

import io
import os
import shutil
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import deltalake
import pytest

from statecat.catalog.lake import spark_writer
from statecat.catalog.lake.materialize import Materializer, Retention
from statecat.catalog.lake.tables import read_delta
from tests.test_materialize import (
    assert_lake_matches_savepoints,
    canonical,
    duckdb_with_delta,
    place_history,
    snapshot_rows,
)

pytestmark = pytest.mark.spark

# One job's history: Flink 1.15 heap-layout RocksDB, a native RocksDB savepoint (its key-groups'
# bytes are shares of the SST files) and a heap-backend checkpoint (checkpoint id 2).
HISTORY = ("sql_groupby_rocksdb_1.15", "sql_groupby_native_rocksdb_2.3", "sql_groupby_checkpoint_hashmap_2.3")
TWO = ("sql_groupby_hashmap_2.0", "sql_groupby_rocksdb_2.3")
# Decimals, zoned and naive timestamps, maps with struct keys, MapStates: a lake of its own (one job per lake).
TYPES = "sql_types_2.3"
NOT_COMPARED = {"materialized_at"}  # when each engine wrote the snapshot's row


class SimulatedCrash(BaseException):
    """Stands for the process dying: no `except Exception` on the way up catches it."""


@pytest.fixture(scope="module")
def home() -> str:
    return os.environ["STATECAT_HOME"]  # tests/conftest.py's, per test session


@pytest.fixture(scope="module")
def spark(home):
    from statecat.catalog.servers.sessions import session
    from statecat.catalog.spark.delta import delta_unavailable

    started = session(home, quiet=True)
    unavailable = delta_unavailable()
    if unavailable:
        pytest.skip(unavailable)
    return started


def materialize(*args) -> tuple[int, str, str]:
    """``statecat materialize ARGS`` in this process (on the module's session): exit code, stdout, stderr."""
    from statecat.catalog.cli import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(["materialize", *map(str, args)])
    return code, out.getvalue(), err.getvalue()


def lake_tables(lake: Path) -> list[str]:
    tables = [name for name in ("snapshots", "state_meta", "state_stats") if (lake / name).is_dir()]
    states = lake / "states"
    return tables + ([f"states/{p.name}" for p in sorted(states.iterdir())] if states.is_dir() else [])


def rows_read_by_deltalake(table: Path) -> list[str]:
    rows = read_delta(deltalake.DeltaTable(str(table))).to_pylist()
    return canonical({k: v for k, v in row.items() if k not in NOT_COMPARED} for row in rows)


def rows_read_by_duckdb(con, table: Path) -> list[str]:
    rows = con.execute(f"SELECT * FROM delta_scan('{table}')").arrow().read_all().to_pylist()
    return canonical({k: v for k, v in row.items() if k not in NOT_COMPARED} for row in rows)


def assert_same_lake(lake: Path, reference: Path) -> None:
    """The same tables, Delta schemas, partition columns and rows (read by deltalake and by DuckDB)."""
    names = lake_tables(reference)
    assert lake_tables(lake) == names
    con = duckdb_with_delta()
    for name in names:
        mine, theirs = deltalake.DeltaTable(str(lake / name)), deltalake.DeltaTable(str(reference / name))
        assert mine.schema().to_json() == theirs.schema().to_json(), name
        assert mine.metadata().partition_columns == theirs.metadata().partition_columns, name
        expected = rows_read_by_deltalake(reference / name)
        assert rows_read_by_deltalake(lake / name) == expected, name
        assert rows_read_by_duckdb(con, lake / name) == rows_read_by_duckdb(con, reference / name) == expected, name


def versions(lake: Path) -> dict[str, int]:
    return {name: deltalake.DeltaTable(str(lake / name)).version() for name in lake_tables(lake)}


def partitions(table: Path) -> set[str]:
    return {p["snapshot_id"] for p in deltalake.DeltaTable(str(table)).partitions()}


# ----------------------------------------------------------------------------- one job's history


@pytest.fixture(scope="module")
def history(spark, home, tmp_path_factory):
    base = tmp_path_factory.mktemp("spark_history")
    placed = place_history(base / "root", HISTORY)
    reference = materialize(base / "root", "--to", base / "reference")
    # Counting tasks of a few key-groups each (the flinkstate source plans its reads by the same
    # rule in its own worker): the splits of a subtask's key-groups must add up to the whole.
    counted: list[tuple] = []
    counter = spark_writer._stats_counter

    def recording(tasks):
        counted.extend(task.key_groups for task in tasks)
        return counter(tasks)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("statecat.catalog.spark.source.PARTITION_BYTES", 2048)
        patch.setattr(spark_writer, "_stats_counter", recording)
        written = materialize(base / "root", "--to", base / "lake", "--engine", "spark", "--home", home)
    return base, placed, reference, written, counted


def test_spark_writes_the_deltalake_engines_lake(history):
    base, placed, reference, written, counted = history
    assert written[0] == reference[0] == 0, written[2]
    # The same per-snapshot report.
    assert written[1] == reference[1] and written[1].count("written ") == len(HISTORY)
    assert any(groups is not None for groups in counted)  # key-group runs, not only whole subtasks
    assert_same_lake(base / "lake", base / "reference")
    assert_lake_matches_savepoints(base / "lake", placed)  # and equal to the savepoints' own rows


def test_a_rerun_with_spark_writes_nothing(history, home):
    base, placed, *_ = history
    before = versions(base / "lake")
    code, out, _ = materialize(base / "root", "--to", base / "lake", "--engine", "spark", "--home", home)
    assert code == 0 and out.count("skipped ") == len(HISTORY) and "written" not in out
    assert versions(base / "lake") == before
    assert len(snapshot_rows(base / "lake")) == len(HISTORY)


def test_retention_and_vacuum_remove_what_the_deltalake_engine_removes(history, spark, tmp_path):
    base, placed, *_ = history
    shutil.copytree(base / "lake", tmp_path / "spark")
    shutil.copytree(base / "reference", tmp_path / "deltalake")
    files = len(list((tmp_path / "spark" / "states" / "accstate").rglob("*.parquet")))
    rule = Retention(keep=1, vacuum_hours=0)
    removed = Materializer(tmp_path / "spark", retention=rule, spark=spark).run([]).removed
    assert removed == Materializer(tmp_path / "deltalake", retention=rule).run([]).removed and len(removed) == 2
    assert [r["path"] for r in snapshot_rows(tmp_path / "spark")] == [str(placed[HISTORY[-1]])]
    assert_same_lake(tmp_path / "spark", tmp_path / "deltalake")
    for name in lake_tables(tmp_path / "spark")[1:]:
        assert not partitions(tmp_path / "spark" / name) & set(removed), name
    assert len(list((tmp_path / "spark" / "states" / "accstate").rglob("*.parquet"))) < files  # vacuumed


# ----------------------------------------------------------------------------- types, engines mixed


def test_sql_types_and_map_states_give_the_same_lake(spark, tmp_path):
    place_history(tmp_path / "root", (TYPES,))
    result = Materializer(tmp_path / "spark", spark=spark).run([str(tmp_path / "root")])
    assert [s.outcome for s in result.snapshots] == ["written"], result.snapshots
    Materializer(tmp_path / "deltalake").run([str(tmp_path / "root")])
    assert_same_lake(tmp_path / "spark", tmp_path / "deltalake")


@pytest.mark.parametrize("first", ["deltalake", "spark"])
def test_a_lake_begun_by_one_engine_is_continued_by_the_other(spark, tmp_path, first):
    placed = place_history(tmp_path / "root", TWO)
    Materializer(tmp_path / "reference").run([str(tmp_path / "root")])
    engines = {"deltalake": None, "spark": spark}
    second = "spark" if first == "deltalake" else "deltalake"
    lake = tmp_path / "lake"
    for engine, case in ((first, TWO[0]), (second, TWO[1])):
        result = Materializer(lake, spark=engines[engine]).run([str(placed[case])])
        assert [s.outcome for s in result.snapshots] == ["written"], (engine, result.snapshots)
    assert_same_lake(lake, tmp_path / "reference")
    # Either engine now sees both snapshots as done.
    again = Materializer(lake).run([str(tmp_path / "root")])
    assert [s.outcome for s in again.snapshots] == ["skipped", "skipped"]


# ----------------------------------------------------------------------------- crashes and failures


def test_a_crash_before_the_marker_leaves_no_snapshot_and_a_rerun_completes_it(spark, tmp_path, monkeypatch):
    case = TWO[1]
    placed = place_history(tmp_path / "root", (case,))
    Materializer(tmp_path / "reference").run([str(tmp_path / "root")])
    lake = tmp_path / "lake"
    crashes = []
    marker = spark_writer.SparkLakeWriter.write_snapshot_row

    def crash_once(self, row):
        if not crashes:
            crashes.append(row["snapshot_id"])
            raise SimulatedCrash
        marker(self, row)

    monkeypatch.setattr(spark_writer.SparkLakeWriter, "write_snapshot_row", crash_once)
    with pytest.raises(SimulatedCrash):
        Materializer(lake, spark=spark).run([str(tmp_path / "root")])
    # Every state's partition, state_stats and state_meta were committed; the snapshot is not listed.
    assert not (lake / "snapshots").exists()
    tables = lake_tables(lake)
    assert len(tables) == 7  # five states, state_meta, state_stats
    assert all(partitions(lake / name) <= set(crashes) for name in tables)  # states without rows: no files
    filled = ["state_meta", "state_stats", "states/accstate", "states/coordinator"]
    assert all(partitions(lake / name) == set(crashes) for name in filled)
    orphaned = sum(1 for name in tables if partitions(lake / name))
    shutil.copytree(lake, tmp_path / "abandoned")

    result = Materializer(lake, spark=spark).run([str(tmp_path / "root")])
    assert [(s.outcome, s.snapshot_id) for s in result.snapshots] == [("written", crashes[0])]
    assert_same_lake(lake, tmp_path / "reference")  # the rewritten partitions replaced the first ones
    assert_lake_matches_savepoints(lake, placed)

    # Had the savepoint gone, the next run (given no paths) deletes what the crash left.
    abandoned = Materializer(tmp_path / "abandoned", spark=spark).run([])
    assert abandoned.orphans_deleted == orphaned
    assert all(not partitions(tmp_path / "abandoned" / name) for name in tables)


def test_a_state_that_fails_to_decode_fails_its_snapshot_and_leaves_nothing(spark, home, tmp_path, monkeypatch):
    placed = place_history(tmp_path / "root", ("sql_groupby_hashmap_2.3",))
    damaged = placed["sql_groupby_hashmap_2.3"]
    victim = max((f for f in damaged.iterdir() if f.name != "_metadata"), key=lambda f: f.stat().st_size)
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    lake = tmp_path / "lake"
    spark_failures = []
    failure = spark_writer._failure
    monkeypatch.setattr(spark_writer, "_failure", lambda exc, wrap: spark_failures.append(exc) or failure(exc, wrap))
    code, out, err = materialize(tmp_path / "root", "--to", lake, "--engine", "spark", "--home", home)
    assert code == 1 and "Traceback" not in err
    assert err.startswith("failed") and victim.name in err, err
    # The reader's own message, raised in a Spark task, as the deltalake engine reports it.
    assert len(spark_failures) == 1 and "StatecatQueryError" in str(spark_failures[0])
    assert err == materialize(tmp_path / "root", "--to", tmp_path / "deltalake")[2]
    assert not (lake / "snapshots").exists()
    assert all(not partitions(lake / name) for name in lake_tables(lake))  # orphans deleted at the end


def test_without_delta_the_spark_engine_says_why_and_writes_nothing(spark, home, tmp_path, monkeypatch):
    from statecat.catalog.spark import delta

    line = "Delta Lake's jars (io.delta:delta-spark_2.13:4.4.0) could not be resolved from a mirror: offline"
    monkeypatch.setitem(delta._state, "unavailable", line)
    place_history(tmp_path / "root", (TWO[0],))
    code, out, err = materialize(tmp_path / "root", "--to", tmp_path / "lake", "--engine", "spark", "--home", home)
    assert code == 2 and line in err and out == ""
    assert not (tmp_path / "lake").exists()
