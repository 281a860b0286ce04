"""The Spark full scan of a savepoint table on a standalone cluster: one worker, then two (one core each).

    .venv/bin/python bench/bench_cluster.py [--keys 13500000] [--dir /tmp/statecat-bench] [--repeat 5]

Starts a standalone Spark master and one worker (``spark-class ...deploy.master.Master`` /
``...deploy.worker.Worker`` from the pyspark distribution, on 127.0.0.1; each worker offers one
core and is pinned to its own CPU with ``taskset``, executor and Python workers included), attaches
bench_scan.py's generated savepoint (generated once with real Flink) in a session on that master
and times ``SELECT count(*), sum(value.f1), max(length(key))`` over its ``accState`` table; then
starts a second worker, waits for the session's second executor and times the same query again.
Each configuration is warmed up until two scans in a row agree within 5 % (at most 8 scans: a new
executor JVM is still compiling), then timed ``--repeat`` times. The driver (its JVM and Python
planner workers) runs at ``--driver-nice`` 10: here it shares the workers' two CPUs, on a real
cluster it has its own host. Prints the times and the speed-up,
best to best and median to median. Everything it starts is stopped at the end, also on error.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_scan import ensure_savepoint, keyed_bytes  # noqa: E402
from bench_spark import SCAN, state_table, timed  # noqa: E402

HOST = "127.0.0.1"
START_TIMEOUT_S = 120


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def spark_class() -> str:
    import pyspark

    return os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-class")


class Cluster:
    """A standalone master and its workers, each a spark-class process in its own process group."""

    def __init__(self, scratch: Path):
        self.scratch = scratch
        self.processes: list[subprocess.Popen] = []
        self.port, self.ui_port = free_port(), free_port()
        self.env = dict(
            os.environ,
            SPARK_LOCAL_IP=HOST,
            SPARK_LOG_DIR=str(scratch / "logs"),
            PYSPARK_PYTHON=os.environ.get("PYSPARK_PYTHON", sys.executable),
        )
        self.url = f"spark://{HOST}:{self.port}"

    def _start(self, name: str, command: list[str]) -> None:
        log = open(self.scratch / f"{name}.log", "w")
        self.processes.append(
            subprocess.Popen(command, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        )

    def start_master(self) -> None:
        self._start(
            "master",
            [
                spark_class(),
                "org.apache.spark.deploy.master.Master",
                "--host",
                HOST,
                "--port",
                str(self.port),
                "--webui-port",
                str(self.ui_port),
            ],
        )
        self._wait(lambda state: state.get("status") == "ALIVE", "the master")

    def add_worker(self) -> None:
        index = len(self.processes)
        work = self.scratch / f"worker-{index}"
        work.mkdir()
        # Pinned to one CPU: the executor and its Python workers (the worker's children) inherit it,
        # so "one core" holds for the decoding Python process as well as the JVM reading its batches.
        cpu = (index - 1) % os.cpu_count()
        self._start(
            f"worker-{index}",
            [
                "taskset",
                "-c",
                str(cpu),
                spark_class(),
                "org.apache.spark.deploy.worker.Worker",
                "--host",
                HOST,
                "--cores",
                "1",
                "--memory",
                "3g",
                "--webui-port",
                str(free_port()),
                "--work-dir",
                str(work),
                self.url,
            ],
        )
        self._wait(
            lambda state: sum(w["state"] == "ALIVE" for w in state.get("workers", ())) == index, f"worker {index}"
        )

    def _wait(self, ready, what: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            for process in self.processes:
                if process.poll() is not None:
                    raise SystemExit(f"{what} exited ({process.returncode}); see {self.scratch}/*.log")
            try:
                with urllib.request.urlopen(f"http://{HOST}:{self.ui_port}/json", timeout=5) as response:
                    if ready(json.load(response)):
                        return
            except OSError:
                pass  # not listening yet
            time.sleep(0.5)
        raise SystemExit(f"{what} did not start within {START_TIMEOUT_S} s; see {self.scratch}/*.log")

    def stop(self) -> None:
        for process in reversed(self.processes):  # workers first, then the master
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def lower_driver_priority(spark, niceness: int) -> None:
    """Runs the driver's JVM and its Python planner workers at ``niceness``.

    On this machine the driver shares the two CPUs the workers are pinned to; on a real cluster it
    runs on another host. Its JIT compiler kept taking 0.15-0.45 s of CPU per query (Spark's planner
    code, many queries in), which with two workers came out of a worker's core and with one worker
    out of the idle one. Linux keeps a priority per thread: every thread of every process of the
    driver's tree is lowered; threads and processes it starts later inherit it."""
    from tests.test_savepoint_rest_live import _descendants

    jvm = int(spark.sparkContext._jvm.ProcessHandle.current().pid())
    for pid in [jvm, *(pid for pid, _ in _descendants([jvm]))]:
        try:
            threads = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in threads:
            try:
                os.setpriority(os.PRIO_PROCESS, int(tid), niceness)
            except (ProcessLookupError, PermissionError):
                pass  # a thread that ended, or one this user may not change


def wait_executors(spark, count: int) -> None:
    """Waits (bounded) until the application holds ``count`` executors besides the driver."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1 >= count:
            return
        time.sleep(0.2)
    raise SystemExit(f"the application did not get {count} executors within {START_TIMEOUT_S} s")


# A fresh executor JVM compiles Spark's and Arrow's hot paths (its JIT threads share the worker's one
# pinned core) over its first queries: the second worker's executor is new when it joins, the first
# one's has run the earlier queries. Warm up until two queries in a row agree within WARM_TOLERANCE.
WARM_TOLERANCE = 0.05
MAX_WARM_UPS = 8


def steady_scans(spark, sql: str, repeat: int) -> tuple[list[float], int, int]:
    """Times of ``repeat`` scans after the warm-up, the row count, and how many warm-up scans ran."""
    previous, rows = timed(spark, sql)
    warm_ups = 1
    while warm_ups < MAX_WARM_UPS:
        current, rows = timed(spark, sql)
        warm_ups += 1
        if abs(current - previous) <= WARM_TOLERANCE * min(current, previous):
            break
        previous = current
    times = [timed(spark, sql)[0] for _ in range(repeat)]
    return times, rows[0][0], warm_ups


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=13_500_000)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "statecat-bench")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--driver-nice",
        type=int,
        default=10,
        help="niceness of the driver's JVM and its Python planner (0: as started)",
    )
    args = parser.parse_args()

    savepoint = ensure_savepoint(args.dir, args.keys)
    print(f"savepoint: {savepoint} (keyed state streams {keyed_bytes(savepoint) / 1e6:.0f} MB)")
    os.environ["STATECAT_METASTORE"] = "embedded"
    scratch = Path(tempfile.mkdtemp(prefix="cluster-", dir=args.dir))
    cluster = Cluster(scratch)
    spark = None
    try:
        cluster.start_master()
        cluster.add_worker()
        from statecat.catalog.servers.sessions import session

        spark = session(
            str(scratch / "home"),
            master=cluster.url,
            quiet=True,
            conf={
                "spark.driver.host": HOST,
                "spark.driver.bindAddress": HOST,
                "spark.executor.cores": "1",
                "spark.cores.max": "2",
                "spark.executor.memory": "2g",
            },
        )
        wait_executors(spark, 1)
        table = state_table(spark, savepoint)
        lower_driver_priority(spark, args.driver_nice)
        partitions = spark.table(table).rdd.getNumPartitions()
        sql = SCAN.format(table=table)
        one_times, rows, one_warm = steady_scans(spark, sql, args.repeat)
        cluster.add_worker()
        wait_executors(spark, 2)
        two_times, rows_two, two_warm = steady_scans(spark, sql, args.repeat)
        if rows_two != rows:
            raise SystemExit(f"two workers counted {rows_two} rows, one worker {rows}")
        one, two = min(one_times), min(two_times)
        one_median, two_median = statistics.median(one_times), statistics.median(two_times)
        print(
            f"\nfull scan ({SCAN.format(table='...')}), {rows:,} rows in {partitions} partitions, "
            f"standalone cluster on {HOST}, {args.repeat} scans after {one_warm} / {two_warm} warm-up scans:"
        )
        for label, times in (("1 worker  (1 core): ", one_times), ("2 workers (1 core each):", two_times)):
            print(
                f"  {label} best {min(times):.2f} s = {rows / min(times) / 1e6:.2f} M rows/s, "
                f"median {statistics.median(times):.2f} s (all: {', '.join(f'{t:.2f}' for t in times)})"
            )
        print(
            f"  speed-up 1 -> 2 workers: {one / two:.2f} best to best, {one_median / two_median:.2f} median to "
            f"median (target >= 1.7)"
        )
    finally:
        if spark is not None:
            spark.stop()
        cluster.stop()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
