"""Prototype of a columnar transport for the ``flinkstate`` source, measured beside it and Parquet.

    .venv/bin/python bench/bench_columnar.py [--keys 13500000] [--dir /tmp/statecat-bench] [--repeat 3]

Spark 4.2 reads Python data sources row by row (every row becomes an UnsafeRow in the JVM). The
prototype in bench/spark-columnar/ (a Java DataSource V2, built by its build.sh against pyspark's
jars) asks a reused ``pyspark.daemon`` worker for each partition's Arrow IPC stream and hands the
vectors to Spark as ColumnarBatches, as Parquet's reader does. Planning is done here, in the
driver's Python: statecat's own FlinkStateReader makes the partitions, which go to the Java source
pickled (base64 options); an integration would plan in the JVM path instead.

In one local session (``--master local[2]``) it runs bench_spark.py's full scan

    SELECT count(*), sum(value.f1), max(length(key)) FROM <table>

on (a) the attached ``flinkstate`` table, (b) the prototype over the same partitions, sending only
the columns and struct fields the query reads, (b') the same sending every column, (b'') the same
as (b) but resending each partition's first reply without decoding (the transport and the JVM
alone: what (b) would take with a free decoder; its reply files sit in the scratch dir), and (c) the
Parquet copy bench_spark.py writes (once): a warm-up each, then the best of ``--repeat``,
alternating; every side must answer exactly as (a) and (c). Per run it prints the time, the ratio to the
best Parquet time, the tasks' JVM CPU (Spark's REST API) and the CPU of Spark's Python worker
processes (from /proc, so Linux only).
"""

from __future__ import annotations

import argparse
import base64
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PROTO = REPO / "bench" / "spark-columnar"
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_scan import ensure_savepoint  # noqa: E402
from bench_spark import SCAN, last_stage, parquet_copy, stage_split, state_table, timed  # noqa: E402

SOURCE = "statecat.columnar.ColumnarSource"
TICKS = os.sysconf("SC_CLK_TCK")


def build_jar(out: Path) -> str:
    done = subprocess.run([str(PROTO / "build.sh"), str(out)], check=True, capture_output=True, text=True,
                          env={**os.environ, "PYTHON": sys.executable})
    return done.stdout.strip().splitlines()[-1]


def columnar_view(spark, table: str, name: str, *, prune: bool = True, replay: Path | None = None) -> str:
    """The prototype source over the partitions statecat's own reader plans for ``table``;
    ``prune``: the Python worker sends only the columns and struct fields the query reads;
    ``replay``: (measuring the transport alone) it decodes each partition once and then resends
    the bytes kept in that directory."""
    from statecat.catalog.source import FlinkStateDataSource

    schema = spark.table(table).schema  # a catalog table's schema carries its TableRef
    reader = FlinkStateDataSource({}).reader(schema)
    partitions = reader.partitions()
    encoded = ",".join(base64.b64encode(pickle.dumps(p)).decode() for p in partitions)
    (spark.read.format(SOURCE)
     .option("schema", schema.json())
     .option("reader", base64.b64encode(pickle.dumps(reader)).decode())
     .option("partitions", encoded)
     .option("python", sys.executable)
     .option("pythonpath", str(PROTO))
     .option("prune", str(prune).lower())
     .option("replay", str(replay or ""))
     .load().createOrReplaceTempView(name))
    print(f"columnar prototype ({name}): {len(partitions)} partitions")
    return name


def process_cpu(pids: set[int] | None = None, root: int | None = None) -> dict[int, float]:
    """CPU seconds (user + system) of the given processes, or of every descendant of ``root``."""
    stats = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        stats[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / TICKS)  # ppid, utime+stime
    if pids is None:
        pids, frontier = set(), {root}
        while frontier:
            frontier = {pid for pid, (ppid, _) in stats.items() if ppid in frontier} - pids
            pids |= frontier
    return {pid: stats[pid][1] for pid in pids if pid in stats}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=13_500_000)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "statecat-bench")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark settings")
    args = parser.parse_args()

    savepoint = ensure_savepoint(args.dir, args.keys)
    os.environ["STATECAT_METASTORE"] = "embedded"
    scratch = Path(tempfile.mkdtemp(prefix="columnar-", dir=args.dir))
    jar = build_jar(scratch / "jar")
    conf = {"spark.driver.memory": "4g", "spark.jars": jar, "spark.ui.enabled": "true", "spark.ui.port": "4078"}
    conf.update(dict(item.split("=", 1) for item in args.conf))

    from statecat.catalog.sessions import session

    replay = scratch / "replay"
    replay.mkdir()
    spark = session(str(scratch / "home"), master=args.master, conf=conf, quiet=True)
    try:
        table = state_table(spark, savepoint)
        sides = {"flinkstate": table,
                 "columnar": columnar_view(spark, table, "columnar_proto"),
                 "col_noprune": columnar_view(spark, table, "columnar_proto_all", prune=False),
                 "col_replay": columnar_view(spark, table, "columnar_proto_replay", replay=replay),
                 "parquet": parquet_copy(spark, table, savepoint.parent / "parquet")}
        queries = {side: SCAN.format(table=name) for side, name in sides.items()}
        frame = spark.sql(queries["columnar"])
        frame.collect()  # the final adaptive plan shows the columnar transitions
        plan = frame._jdf.queryExecution().executedPlan().toString()
        print("columnar plan:\n  " + plan.strip().replace("\n", "\n  "))
        jvm_pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
        proto = spark.sparkContext._jvm.statecat.columnar.ColumnarSource

        for sql in (f"SELECT count(*) FROM {sides['columnar']}", f"SELECT * FROM {sides['columnar']} LIMIT 3"):
            print(f"{sql}: {spark.sql(sql).collect()}")  # nothing read (count only) and an early stop
        answers = {side: timed(spark, sql)[1] for side, sql in queries.items()}  # warm-up
        if len({repr(a) for a in answers.values()}) != 1:
            raise SystemExit(f"the three sides disagree: {answers}")
        print(f"answer (all three): {answers['parquet'][0]}")
        runs: dict[str, list] = {side: [] for side in sides}
        for _ in range(args.repeat):
            for side, sql in queries.items():
                before_stage = last_stage(spark)
                jvm_before = process_cpu({jvm_pid})
                python_before = process_cpu(root=jvm_pid)
                proto_before = proto.pythonCpuNs()
                seconds, rows = timed(spark, sql)
                if rows != answers[side]:
                    raise SystemExit(f"{side}: answer changed: {rows} != {answers[side]}")
                python_after = process_cpu(root=jvm_pid)
                python_cpu = sum(cpu - python_before.get(pid, 0.0) for pid, cpu in python_after.items())
                new_processes = len(set(python_after) - set(python_before))
                runs[side].append({
                    "s": seconds,
                    "jvm_process_cpu_s": process_cpu({jvm_pid})[jvm_pid] - jvm_before[jvm_pid],
                    "python_workers_cpu_s": python_cpu,
                    "new_processes": new_processes,
                    "proto_python_cpu_s": (proto.pythonCpuNs() - proto_before) / 1e9,
                    "tasks": stage_split(spark, before_stage),
                })
        parquet_best = min(r["s"] for r in runs["parquet"])
        rows = answers["parquet"][0][0]
        print(f"\nfull scan ({SCAN.format(table='...')}), {rows:,} rows, {args.master}:")
        for side, side_runs in runs.items():
            for i, r in enumerate(side_runs):
                t = r["tasks"]
                print(f"  {side:10} run {i + 1}: {r['s']:.2f} s = {r['s'] / parquet_best:.2f}x parquet's best; "
                      f"tasks {t['numTasks']}, run {t['executorRunTime'] / 1000:.2f} s, JVM task CPU "
                      f"{t['executorCpuTime'] / 1000:.2f} s; JVM process CPU {r['jvm_process_cpu_s']:.2f} s; "
                      f"Python workers CPU {r['python_workers_cpu_s']:.2f} s, {r['new_processes']} new processes"
                      + (f" (requests {r['proto_python_cpu_s']:.2f} s)" if side in ("columnar", "col_noprune") else ""))
        print("best of", args.repeat)
        for side, side_runs in runs.items():
            best = min(r["s"] for r in side_runs)
            print(f"  {side:10}: {best:.2f} s = {rows / best / 1e6:.2f} M rows/s, {best / parquet_best:.2f}x parquet")
        print("  target: columnar <= 1.5x parquet")
    finally:
        spark.stop()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
