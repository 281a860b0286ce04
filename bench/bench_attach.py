"""Benchmark: attaching a root of many savepoints (copies of the fixture savepoints).

    .venv/bin/python bench/bench_attach.py [--count 1000] [--eager-sample 10]

Builds COUNT savepoint directories in a temp dir (real copies, cycling through the fixture cases),
then measures on a local Spark with a fresh Derby metastore:

* discover + read ``_metadata`` of every savepoint (no Spark);
* ``attach(spark, root)``: registration of all of them (lazy: one registry write, no tables);
* the first query naming one of them through ``statecat.catalog.sql`` (creates its database and
  tables, then reads one key-group), and the same query again;
* eager materialisation of a sample, to give the cost per savepoint of creating its tables.

Prints one JSON object with the figures. Everything it creates is deleted at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CASES_DIR = REPO / "tests" / "fixtures" / "cases"
FIXTURE_CASES = [
    "sql_groupby_hashmap_2.3",
    "sql_groupby_rocksdb_2.3",
    "sql_window_2.3",
    "sql_join_2.3",
    "sql_groupby_hashmap_1.20",
    "sql_groupby_rocksdb_1.20",
]


def build_root(root: Path, count: int) -> list[str]:
    cases = [c for c in FIXTURE_CASES if (CASES_DIR / c / "savepoint" / "_metadata").is_file()]
    for i in range(count):
        case = cases[i % len(cases)]
        shutil.copytree(CASES_DIR / case / "savepoint", root / f"job{i:04d}_{case.replace('.', '_')}" / "savepoint")
    return cases


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument(
        "--eager-sample", type=int, default=10, help="savepoints to materialise eagerly for the per-savepoint cost"
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    from statecat.catalog.servers.sessions import session
    from statecat.catalog.spark.databases import attach, materialise
    from statecat.catalog.spark.discovery import discover_savepoints
    from statecat.catalog.spark.queries import sql
    from statecat.catalog.spark.registry import read_record

    scratch = Path(tempfile.mkdtemp(prefix="statecat_bench_"))
    figures: dict = {"savepoints": args.count}
    try:
        root = scratch / "root"
        started = time.perf_counter()
        build_root(root, args.count)
        figures["build_copies_s"] = round(time.perf_counter() - started, 2)

        started = time.perf_counter()
        paths = discover_savepoints(str(root))
        import datetime as dt

        now = dt.datetime.now()
        for path in paths:
            read_record(path, "x", now)
        figures["discover_and_read_metadata_s"] = round(time.perf_counter() - started, 2)
        assert len(paths) == args.count, len(paths)

        started = time.perf_counter()
        spark = session(
            str(scratch / "home"), conf={"spark.log.level": "ERROR", "spark.ui.showConsoleProgress": "false"}
        )
        spark.sql("SHOW DATABASES").collect()  # the metastore's first use creates its Derby schema
        figures["spark_session_and_metastore_start_s"] = round(time.perf_counter() - started, 2)

        result = attach(spark, [str(root)])
        figures["attach_lazy_s"] = round(result.seconds, 2)
        figures["attach_registered"] = len(result.registered)
        figures["attach_materialised"] = len(result.materialised)
        assert not result.failed, result.failed[:3]
        assert spark.table("statecat.savepoints").count() == args.count

        target = next(r.database for r in result.registered if "groupby_hashmap_2_3" in r.database)
        query = f"SELECT value.f0, value.f1 FROM {target}.accstate WHERE key = 'key_662'"
        started = time.perf_counter()
        first = [tuple(r) for r in sql(spark, query).collect()]
        figures["first_query_with_lazy_materialise_s"] = round(time.perf_counter() - started, 2)
        started = time.perf_counter()
        again = [tuple(r) for r in sql(spark, query).collect()]
        figures["same_query_again_s"] = round(time.perf_counter() - started, 2)
        assert first == again == [(1, 336)], first

        sample = [r for r in result.registered if r.database != target][: args.eager_sample]
        started = time.perf_counter()
        tables = sum(len(materialise(spark, r.database, r.path)) for r in sample)
        elapsed = time.perf_counter() - started
        figures["eager_sample"] = len(sample)
        figures["eager_tables"] = tables
        figures["eager_per_savepoint_s"] = round(elapsed / max(len(sample), 1), 3)
        figures["eager_estimate_for_all_s"] = round(elapsed / max(len(sample), 1) * args.count, 1)
        spark.stop()
    finally:
        from statecat.catalog.servers import metastore

        metastore.stop(str(scratch / "home"))  # the session's metastore server outlives it (idle timeout)
        shutil.rmtree(scratch, ignore_errors=True)
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
