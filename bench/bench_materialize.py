"""Materialize throughput, and dashboard queries on the Delta lake against the live savepoint.

    .venv/bin/python bench/bench_materialize.py [--keys 1000000] [--dir /tmp/statecat-bench] [--repeat 3]

Uses bench_scan.py's SQL ``GROUP BY word`` savepoint (generated once with real Flink, ``--keys``
keys), then prints:

- ``statecat materialize`` of that savepoint into a fresh local lake: seconds, rows/s, MB/s of
  keyed state (every state, state_stats and state_meta included);
- two dashboard queries (sql_examples/dashboards), each run by DuckDB on the Delta table
  (delta extension) and on the live savepoint (DuckDB over statecat's Arrow batches, the reader
  decoding the state on every query), best of ``--repeat``, with their ratio:
  key count (12_key_count_trend.sql, a full scan) and one key's history (13_key_history.sql; on
  the live savepoint the reader opens only the key's key-group).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import pyarrow as pa  # noqa: E402
from bench_scan import MAIN_STATE, ensure_savepoint, keyed_bytes  # noqa: E402

from statecat.catalog.lake.materialize import Materializer  # noqa: E402
from statecat.readers import SavepointReader  # noqa: E402
from tests.test_materialize import duckdb_with_delta, register_lake_views  # noqa: E402

QUERIES = REPO / "sql_examples" / "dashboards"
KEY = "key_662"


def rows_of(cursor) -> list[dict]:
    return cursor.arrow().read_all().to_pylist()


def best(repeat: int, run):
    times, result = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - started)
    return min(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "statecat-bench")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--savepoint", type=Path, help="use this GROUP BY savepoint instead of generating one")
    args = parser.parse_args()

    path = args.savepoint or ensure_savepoint(args.dir, args.keys)
    data_bytes = keyed_bytes(path)
    reader = SavepointReader(str(path))
    for _batch in reader.batches(MAIN_STATE):  # warm the page cache and numba's compiled code
        pass
    scratch = Path(tempfile.mkdtemp(prefix="statecat-bench-lake-"))
    try:
        lake = scratch / "lake"
        started = time.perf_counter()
        result = Materializer(lake).run([str(path)])
        seconds = time.perf_counter() - started
        written = result.snapshots[0]
        assert written.outcome == "written", written
        print(f"savepoint: {path} (keyed state streams {data_bytes / 1e6:.0f} MB)")
        print(
            f"materialize: {written.rows:,} rows of {written.states} states in {seconds:.2f} s = "
            f"{written.rows / seconds / 1e6:.2f} M rows/s, {data_bytes / 1e6 / seconds:.0f} MB/s (one process)"
        )
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"peak resident memory after materialize: {peak:.0f} MB")
        lake_bytes = sum(f.stat().st_size for f in lake.rglob("*") if f.is_file())
        print(f"lake size: {lake_bytes / 1e6:.0f} MB (Parquet, snappy)")

        con = duckdb_with_delta()
        register_lake_views(con, lake)
        live = duckdb_with_delta()
        snapshot_id = written.snapshot_id
        live.execute("CREATE TABLE snapshots AS SELECT * FROM delta_scan(?)", [str(lake / "snapshots")])

        def live_table(keys=None):
            batches = reader.batches(MAIN_STATE, keys=keys)
            arrow = pa.RecordBatchReader.from_batches(reader.schema(MAIN_STATE), batches)
            live.register("accstate_live", arrow)
            return f"(SELECT '{snapshot_id}' AS snapshot_id, * FROM accstate_live)"

        for name, keys in (("12_key_count_trend.sql", None), ("13_key_history.sql", [KEY])):
            sql = (QUERIES / name).read_text()
            lake_s, lake_rows = best(args.repeat, lambda sql=sql: rows_of(con.execute(sql)))

            def on_live(sql=sql, keys=keys):
                return rows_of(live.execute(sql.replace("FROM accstate a", f"FROM {live_table(keys)} a")))

            live_s, live_rows = best(args.repeat, on_live)
            assert lake_rows == live_rows, (lake_rows, live_rows)
            print(
                f"{name}: Delta (DuckDB) {lake_s * 1000:.0f} ms, live savepoint (statecat reader + DuckDB) "
                f"{live_s * 1000:.0f} ms, live/Delta {live_s / lake_s:.1f}x (best of {args.repeat})"
            )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
