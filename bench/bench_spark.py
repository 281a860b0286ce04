"""A full scan of a savepoint table through Spark, beside the same query on a Parquet copy of its rows.

    .venv/bin/python bench/bench_spark.py [--keys 13500000] [--dir /tmp/statecat-bench] [--repeat 3]

Generates (once, with real Flink, bench_scan.py's generator) the SQL ``GROUP BY word`` savepoint on
the hashmap backend, attaches it in a local Spark session (``--master local[2]``), writes a Parquet
copy of the ``accState`` table's rows (once, next to the savepoint), then runs in that one session

    SELECT count(*), sum(value.f1), max(length(key)) FROM <table>

and a ``WHERE key = ...`` read on both (a warm-up each, then the best of ``--repeat``, alternating)
and prints times, rows/s and savepoint / Parquet ratios. The savepoint table is read as statecat's
sessions read it, as Arrow columns (catalog/spark/java/), and also ``row-wise``, through
Spark's own Python data source (``spark.statecat.columnar.enabled=false``). ``--profile`` also prints, per query, the
task time split Spark's REST API reports and the data source's own read() timing
(``STATECAT_READ_PROFILE``, see catalog/spark/source.py); ``--jvm-profile`` then samples the JVM's task
threads over more scans of each (bench/jvm_profile.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_scan import MAIN_STATE, ensure_savepoint, keyed_bytes  # noqa: E402

SCAN = "SELECT count(*), sum(value.f1), max(length(key)) FROM {table}"
POINT = "SELECT key, value.f0, value.f1 FROM {table} WHERE key = '{key}'"
POINT_KEY = "key_662"
# The same table read through Spark's row-wise Python data source (the columnar scan turned off).
ROW_WISE = "row-wise"
COLUMNAR_ENABLED = "spark.statecat.columnar.enabled"


def state_table(spark, savepoint: Path) -> str:
    """Attaches the savepoint (embedded catalog in the bench's own home) and names its accState table."""
    from statecat.catalog.spark.databases import attach

    result = attach(spark, [str(savepoint)], eager=True)
    if result.failed:
        raise SystemExit(f"attach failed: {result.failed}")
    database = (result.materialised or result.known)[0]
    names = [t.name for t in spark.catalog.listTables(database) if MAIN_STATE.lower() in t.name.lower()]
    if len(names) != 1:
        raise SystemExit(f"expected one {MAIN_STATE} table in {database}, found {names}")
    return f"`{database}`.`{names[0]}`"


def parquet_copy(spark, table: str, directory: Path) -> str:
    """A Parquet copy of the table's rows (written once), as a temporary view."""
    if not (directory / "_SUCCESS").is_file():
        print(f"writing a Parquet copy of {table} to {directory} (once) ...", file=sys.stderr)
        spark.table(table).write.mode("overwrite").parquet(str(directory))
    spark.read.parquet(str(directory)).createOrReplaceTempView("parquet_copy")
    return "parquet_copy"


def timed(spark, sql: str, side: str = "savepoint") -> tuple[float, list]:
    """Runs ``sql`` (the ``row-wise`` side with the columnar scan turned off) and times it."""
    spark.conf.set(COLUMNAR_ENABLED, str(side != ROW_WISE).lower())
    started = time.perf_counter()
    rows = spark.sql(sql).collect()
    return time.perf_counter() - started, rows


def stage_split(spark, since_stage: int) -> dict:
    """Task time of the stages after ``since_stage``, summed from the driver's REST API."""
    ui = spark.sparkContext.uiWebUrl
    app = spark.sparkContext.applicationId
    with urllib.request.urlopen(f"{ui}/api/v1/applications/{app}/stages?details=false") as response:
        stages = json.load(response)
    keys = (
        "numTasks",
        "executorRunTime",
        "executorCpuTime",
        "executorDeserializeTime",
        "jvmGcTime",
        "resultSerializationTime",
        "inputBytes",
        "inputRecords",
    )
    total = dict.fromkeys(keys, 0)
    for stage in stages:
        if stage["stageId"] > since_stage and stage["status"] == "COMPLETE":
            for k in keys:
                total[k] += stage.get(k, 0)
    total["executorCpuTime"] //= 1_000_000  # ns -> ms
    return total


def last_stage(spark) -> int:
    tracker = spark.sparkContext.statusTracker()
    ids = [
        s
        for job in tracker.getJobIdsForGroup()
        for s in (tracker.getJobInfo(job).stageIds if tracker.getJobInfo(job) else ())
    ]
    return max(ids, default=-1)


def read_profile(path: Path) -> dict | None:
    if not path.is_file():
        return None
    parts = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    path.unlink()
    if not parts:
        return None
    out = {"partitions": len(parts)}
    for k in ("rows", "batches", "bytes", "decode_s", "conform_s", "consumer_s", "total_s"):
        out[k] = round(sum(p[k] for p in parts), 3)
    out["rows_per_batch"] = out["rows"] // max(out["batches"], 1)
    out["python_workers"] = len({p["pid"] for p in parts})
    out["max_partition_s"] = round(max(p["total_s"] for p in parts), 3)
    out["min_partition_s"] = round(min(p["total_s"] for p in parts), 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=13_500_000)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "statecat-bench")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark settings")
    parser.add_argument("--profile", action="store_true", help="print the task time split of each query")
    parser.add_argument(
        "--jvm-profile",
        action="store_true",
        help="then sample the JVM's task threads over --repeat more scans of each (JFR; needs a JDK)",
    )
    args = parser.parse_args()

    savepoint = ensure_savepoint(args.dir, args.keys)
    case_dir = savepoint.parent
    data_bytes = keyed_bytes(savepoint)
    print(f"savepoint: {savepoint} (keyed state streams {data_bytes / 1e6:.0f} MB)")

    # The bench's own catalog, in-process (no metastore server), fresh each run.
    os.environ["STATECAT_METASTORE"] = "embedded"
    home = Path(tempfile.mkdtemp(prefix="spark-home-", dir=args.dir))
    profile_file = Path(tempfile.mkdtemp(prefix="read-profile-", dir=args.dir)) / "read.jsonl"
    if args.profile:
        os.environ["STATECAT_READ_PROFILE"] = str(profile_file)
    conf = {"spark.driver.memory": "4g"}
    if args.profile:
        conf.update({"spark.ui.enabled": "true", "spark.ui.port": "4077"})
    conf.update(dict(item.split("=", 1) for item in args.conf))

    from statecat.catalog.servers.sessions import session

    spark = session(str(home), master=args.master, conf=conf, quiet=True)
    try:
        started = time.perf_counter()
        table = state_table(spark, savepoint)
        print(
            f"attached in {time.perf_counter() - started:.1f} s: {table}; "
            f"{spark.table(table).rdd.getNumPartitions()} Spark partitions"
        )
        copy = parquet_copy(spark, table, case_dir / "parquet")
        parquet_bytes = sum(f.stat().st_size for f in (case_dir / "parquet").glob("*.parquet"))
        print(f"parquet copy: {parquet_bytes / 1e6:.0f} MB, {spark.table(copy).rdd.getNumPartitions()} partitions")

        results = {}
        for name, template in (("scan", SCAN), ("point", POINT)):
            queries = {
                "savepoint": template.format(table=table, key=POINT_KEY),
                ROW_WISE: template.format(table=table, key=POINT_KEY),
                "parquet": template.format(table=copy, key=POINT_KEY),
            }
            answers = {side: timed(spark, sql, side)[1] for side, sql in queries.items()}  # warm-up
            if len({repr(a) for a in answers.values()}) != 1:
                raise SystemExit(f"{name}: the savepoint and its Parquet copy disagree: {answers}")
            best = dict.fromkeys(queries, float("inf"))
            for _ in range(args.repeat):
                for side, sql in queries.items():
                    before = last_stage(spark) if args.profile else None
                    seconds, _ = timed(spark, sql, side)
                    best[side] = min(best[side], seconds)
                    if args.profile and name == "scan":
                        print(f"  {side}: {seconds:.3f} s, tasks {stage_split(spark, before)}")
                        read = read_profile(profile_file)
                        if read:
                            split = stage_split(spark, before)
                            outside = (split["executorRunTime"] / 1000 - read["total_s"]) / read["partitions"]
                            print(f"  {side}: read() {read}; per task outside read(): {outside * 1000:.0f} ms")
            results[name] = (best, answers["savepoint"])

        best, answer = results["scan"]
        rows = answer[0][0]
        print(f"\nfull scan ({SCAN.format(table='...')}), {rows:,} rows, {args.master}, best of {args.repeat}:")
        for side in best:
            print(
                f"  {side:9}: {best[side]:.2f} s = {rows / best[side] / 1e6:.2f} M rows/s, "
                f"{best[side] / best['parquet']:.2f}x parquet"
            )
        print(f"  savepoint / parquet: {best['savepoint'] / best['parquet']:.2f} (target <= 1.5)")
        best, _ = results["point"]
        print(
            f"single key (WHERE key = '{POINT_KEY}'): savepoint {best['savepoint'] * 1000:.0f} ms, "
            f"row-wise {best[ROW_WISE] * 1000:.0f} ms, parquet {best['parquet'] * 1000:.0f} ms, "
            f"ratio {best['savepoint'] / best['parquet']:.2f}"
        )
        if args.jvm_profile:
            from jvm_profile import print_profiles, profile

            print_profiles(
                {
                    side: profile(
                        spark,
                        lambda table=source, side=side: [
                            timed(spark, SCAN.format(table=table), side) for _ in range(args.repeat)
                        ],
                    )
                    for side, source in (("savepoint", table), (ROW_WISE, table), ("parquet", copy))
                }
            )
    finally:
        spark.stop()
        import shutil

        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(profile_file.parent, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
