"""Writing savepoints: an unedited rewrite, a one-key UPDATE (warm: a running Spark session; cold: a
`statecat write` process starting its own), a whole-table UPDATE and a --max-parallelism rewrite,
beside `cp -r` of SRC and Flink's State Processor API writing the same state.

    .venv/bin/python bench/bench_write.py [--dir /tmp/statecat-write] [--sizes 4000000,13500000] [--spa] [--whole-table]

Spark evaluates the statements (catalog/spark/edit_spark.py). A one-key UPDATE is timed four ways:
with this process's own Spark session already started; through the home's warm server (Spark
Connect, as `statecat sql` and notebooks use it), this process the client; as a `statecat write`
command against that server (a new Python process); and cold, a command that starts a local Spark
first. The goal for a one-key edit with a warm server is SRC's copy time + 2 s. ``--whole-table``
adds an UPDATE of every key with each engine (``local``: this process writes the streams;
``spark``: Spark's tasks do), whose changes Spark finds and keeps on disk by key-group.

Each size is a GROUP BY savepoint (tests/fixtures/generate.py, ``sql_groupby_hashmap_2.3`` with
that many keys, one record each; 13.5 M keys is ~950 MiB), generated once by real Flink and cached
under ``--dir``. Each operation runs on ``--cpu`` (one core, one thread) into a fresh DST, which is
deleted afterwards; the one-key UPDATE is checked (exactly one changed row, by reading that key
back), the re-keyed DST is checked to hold every row. Figures: seconds (best of ``--repeat``, of
``--rekey-repeat`` for the re-keying rewrite), MB/s of SRC and rows/s of the state's rows
(``accState``, one per key) on that one core.

``--spa`` also runs Flink's State Processor API (bench/java-spa/run.sh: flink-state-processor-api
2.3.0 from Maven Central, Flink's jars from the PyFlink 2.3.0 venv) on ``--flink-cpu``, after
statecat, with the same state shapes (key RowData(word VARCHAR), ``accState`` RowData(BIGINT,
BIGINT), heap backend, canonical savepoint, max parallelism 128, parallelism of SRC's operator):

- ``bootstrap``: the same number of keys ``key_0 ..`` written into a new savepoint from a sequence
  (``SavepointWriter.newSavepoint``): Flink writing the same state, with nothing read;
- ``rewrite``: ``accState`` read from SRC (``SavepointReader.readKeyedState``) and written back into
  a copy of SRC (``SavepointWriter.fromExistingSavepoint``): what ``statecat write`` does;
- ``rewrite + update``: the same, with one key's count incremented on the way (the one-key UPDATE);
- ``rewrite, max parallelism 256``: the same with the operator's max parallelism set to 256.

Each State Processor API run is one fresh JVM; its figure is end to end (job built, local
MiniCluster started, state read and written, savepoint finalized), the JVM's own start reported
apart. statecat's DST and Flink's are read back by statecat (row counts, the updated key). The
ratio is statecat's rows/s over Flink's (Flink's seconds / statecat's seconds). Everything heavy
(generation, the measurements, every JVM) runs under the machine's heavy lock
(tests/fixtures/runtime.py heavy_lock).

``--profile update,rekey`` runs the one-key UPDATE and/or the re-keying rewrite once more under
cProfile and prints where their time goes.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import pstats
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from statecat.readers import SavepointReader  # noqa: E402
from tests.fixtures.edits import write_savepoint  # noqa: E402
from tests.fixtures.runtime import heavy_lock  # noqa: E402

CASE = "sql_groupby_hashmap_2.3"
FIXTURE = REPO / "tests" / "fixtures" / "cases" / CASE / "savepoint"
SPA = REPO / "bench" / "java-spa" / "run.sh"
KEY = "key_662"
UPDATE = f"UPDATE accstate SET value.f0 = value.f0 + 1 WHERE key = '{KEY}'"
WHOLE_TABLE_UPDATE = "UPDATE accstate SET value.f1 = value.f1 + 1"
NEW_MAX_PARALLELISM = 256


@dataclass
class Row:
    operation: str
    seconds: float
    spa: str | None = None  # the State Processor API run it is compared with
    spa_seconds: float | None = None
    notes: list[str] = field(default_factory=list)


def ensure_savepoint(directory: Path, keys: int) -> Path:
    target = directory / f"groupby-{keys}"
    if not (target / CASE / "savepoint" / "_metadata").exists():
        from tests.fixtures.generate import generate_case

        print(f"generating the {keys:,}-key GROUP BY savepoint with Flink ...", file=sys.stderr, flush=True)
        generate_case(CASE, target, keys=keys, max_records_per_key=1)  # takes no lock itself
    return target / CASE / "savepoint"


def size_of(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def group_aggregate(src: Path) -> tuple[str, int, int]:
    """The GROUP BY operator's id, parallelism and max parallelism."""
    for op in SavepointReader(str(src)).meta.operators:
        if any(s.name == "accState" for s in op.states):
            return op.id, op.parallelism, op.max_parallelism
    raise SystemExit(f"{src}: no operator with accState")


def count_rows(path: Path) -> int:
    return sum(batch.num_rows for batch in SavepointReader(str(path)).batches("accState"))


def key_value(path: Path, key: str = KEY) -> dict[str, Any]:
    rows = SavepointReader(str(path)).table("accState", keys=[key]).to_pylist()
    assert len(rows) == 1, (path, key, rows)
    return rows[0]["value"]


def best_of(repeat: int, src: Path, dst: Path, **kwargs: Any) -> tuple[float, Any]:
    """The fastest of ``repeat`` writes (DST removed before each; the last one is left in place)."""
    best, result = float("inf"), None
    for _ in range(repeat):
        shutil.rmtree(dst, ignore_errors=True)
        started = time.perf_counter()
        result = write_savepoint(str(src), str(dst), **kwargs)
        best = min(best, time.perf_counter() - started)
    return best, result


def profile_write(src: Path, dst: Path, limit: int = 25, **kwargs: Any) -> str:
    shutil.rmtree(dst, ignore_errors=True)
    profiler = cProfile.Profile()
    profiler.enable()
    write_savepoint(str(src), str(dst), **kwargs)
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("cumulative").print_stats(limit)
    stats.sort_stats("tottime").print_stats(limit)
    return out.getvalue()


@contextlib.contextmanager
def pinned(cpu: int) -> Iterator[None]:
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def copy_seconds(src: Path, dst: Path) -> float:
    """``cp -r`` of SRC: what a one-key edit is measured against."""
    shutil.rmtree(dst, ignore_errors=True)
    started = time.perf_counter()
    subprocess.run(["cp", "-r", str(src), str(dst)], check=True)
    seconds = time.perf_counter() - started
    shutil.rmtree(dst, ignore_errors=True)
    return seconds


def cli_update(src: Path, dst: Path, home: Path, embedded: bool = False) -> float:
    """`statecat write --sql` in a new process on ``home``: through the home's server when one runs,
    else with a local Spark the command starts (``embedded``: on a Derby metastore of its own)."""
    shutil.rmtree(dst, ignore_errors=True)
    env = {**os.environ, "STATECAT_HOME": str(home)}
    if embedded:
        env["STATECAT_METASTORE"] = "embedded"
    command = [sys.executable, "-m", "statecat.catalog.cli", "write", str(src), "--out", str(dst), "--sql", UPDATE]
    started = time.perf_counter()
    subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


# A client of the home's server timing one-key UPDATEs: a process of its own, as PySpark allows no
# Spark Connect session beside this process's own Spark.
CONNECT_CLIENT = """
import json, shutil, sys, time
from statecat.catalog import session, write_savepoint
src, dst, home, sql, repeat = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
spark = session(home)
times = []
for _ in range(repeat + 1):  # the first one warms the client and the server up
    shutil.rmtree(dst, ignore_errors=True)
    started = time.perf_counter()
    result = write_savepoint(src, dst, sql=[sql], spark=spark)
    times.append(time.perf_counter() - started)
    assert [s.matched for s in result.statements] == [1], result.statements
print(json.dumps({"best_s": min(times[1:]), "first_s": times[0]}))
"""


def _free_port(taken: tuple[int, ...] = ()) -> int:
    import socket

    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in taken:
            return port


@contextlib.contextmanager
def home_server(home: Path) -> Iterator[None]:
    """`statecat serve` on a home of its own (the server `statecat sql` starts in the background),
    ready and answering; stopped afterwards, with its metastore."""
    from statecat.catalog.servers.metastore import stop as stop_metastore

    home.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    connect_port = _free_port((port,))
    env = {**os.environ, "STATECAT_HOME": str(home)}
    command = [sys.executable, "-m", "statecat.catalog.cli", "serve", "--home", str(home)]
    command += ["--port", str(port), "--connect-port", str(connect_port)]
    log = open(home / "bench-serve.log", "w")  # noqa: SIM115 - closed below
    server = subprocess.Popen(
        command, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 300
        while not (home / "serve.json").exists() or "serving on" not in (home / "bench-serve.log").read_text():
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"statecat serve did not start: {(home / 'bench-serve.log').read_text()[-2000:]}")
            time.sleep(0.5)  # polling another process's start
        yield
    finally:
        server.terminate()
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, 9)
        log.close()
        stop_metastore(str(home))


def connect_client_update(src: Path, dst: Path, home: Path, repeat: int) -> float:
    """The best of ``repeat`` one-key UPDATEs by a Spark Connect client of the home's server."""
    env = {**os.environ, "STATECAT_HOME": str(home)}
    command = [sys.executable, "-c", CONNECT_CLIENT, str(src), str(dst), str(home), UPDATE, str(repeat)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the Connect client failed: {done.stderr[-3000:]}")
    shutil.rmtree(dst, ignore_errors=True)
    return json.loads(done.stdout.splitlines()[-1])["best_s"]


def run_spa(mode: str, out: Path, uid_hash: str, parallelism: int, cpu: int, *extra: str) -> dict:
    """One State Processor API run in a fresh JVM (its start timed apart)."""
    shutil.rmtree(out, ignore_errors=True)
    report = out.with_name(out.name + ".json")
    cmd = ["bash", str(SPA), mode, "--out", str(out), "--uid-hash", uid_hash, "--parallelism", str(parallelism)]
    cmd += [*extra, "--json", str(report)]
    env = {**os.environ, "PIN_CPU": str(cpu)}
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=sys.stderr, env=env)  # run.sh execs java
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, cmd)
    result = json.loads(report.read_text())
    result["process_s"] = time.perf_counter() - started
    result["peak_rss_mb"] = usage.ru_maxrss / 1024
    report.unlink()
    return result


def measure(args: argparse.Namespace, keys: int) -> list[Row]:
    src = ensure_savepoint(args.dir, keys)
    megabytes = size_of(src) / 1e6
    uid_hash, parallelism, max_parallelism = group_aggregate(src)
    dst = args.dir / "out"
    spa_out = args.dir / "spa-out"
    rows_in_state = count_rows(src)  # also reads SRC into the page cache
    before = key_value(src)
    rows: list[Row] = []
    try:
        with pinned(args.cpu):
            seconds, _ = best_of(args.repeat, src, dst)
            rows.append(Row("unedited rewrite", seconds))
            seconds, result = best_of(args.repeat, src, dst, sql=[UPDATE])
            assert [s.matched for s in result.statements] == [1], result.statements
            after = key_value(dst)
            assert after == {**before, "f0": before["f0"] + 1}, (before, after)
            rows.append(Row(f"one-key UPDATE ({KEY})", seconds))
            copy = copy_seconds(src, dst)
            rows.append(Row("cp -r SRC (the yardstick)", copy))
            rows[-2].notes.append(
                f"one-key UPDATE, this process's Spark {seconds:.2f} s = cp -r {copy:.2f} s + {seconds - copy:.2f} s"
            )
            home = args.dir / "home"
            shutil.rmtree(home, ignore_errors=True)
            with home_server(home):
                seconds = connect_client_update(src, dst, home, args.repeat)
                rows.append(Row("one-key UPDATE, warm server", seconds))
                rows[-1].notes.append(
                    f"one-key UPDATE through the home's warm server (Spark Connect, this process the client) "
                    f"{seconds:.2f} s = cp -r {copy:.2f} s + {seconds - copy:.2f} s"
                )
                cli = min(cli_update(src, dst, home) for _ in range(args.repeat))
                rows.append(Row("one-key UPDATE, CLI + server", cli))
                rows[-1].notes.append(
                    f"`statecat write --sql` against the warm server {cli:.2f} s = cp -r {copy:.2f} s + "
                    f"{cli - copy:.2f} s (a new Python process: its imports, pyspark's Connect client among them)"
                )
            shutil.rmtree(home, ignore_errors=True)
            cold = cli_update(src, dst, home, embedded=True)
            shutil.rmtree(home, ignore_errors=True)
            rows.append(Row("one-key UPDATE, cold CLI", cold))
            if args.whole_table:
                for engine in ("local", "spark"):
                    seconds, result = best_of(1, src, dst, sql=[WHOLE_TABLE_UPDATE], engine=engine)
                    assert result.statements[0].matched == rows_in_state, result.statements
                    assert count_rows(dst) == rows_in_state
                    assert key_value(dst)["f1"] == before["f1"] + 1
                    rows.append(Row(f"whole-table UPDATE, {engine}", seconds))
                    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
                    rows[-1].notes.append(
                        f"whole-table UPDATE --engine {engine}: this process's peak RSS so far {peak:.0f} MB"
                    )
            if not args.skip_rekey:
                seconds, _ = best_of(args.rekey_repeat, src, dst, max_parallelism=NEW_MAX_PARALLELISM)
                assert count_rows(dst) == rows_in_state
                rows.append(Row(f"--max-parallelism {max_parallelism}->{NEW_MAX_PARALLELISM}", seconds))
            if "update" in args.profile:
                print(f"\ncProfile of the one-key UPDATE, {keys:,} keys:\n{profile_write(src, dst, sql=[UPDATE])}")
            if "rekey" in args.profile:
                report = profile_write(src, dst, max_parallelism=NEW_MAX_PARALLELISM)
                print(f"\ncProfile of the --max-parallelism rewrite, {keys:,} keys:\n{report}", flush=True)
        shutil.rmtree(dst, ignore_errors=True)
        if args.spa:
            spa_rows = spa_side(args, src, spa_out, uid_hash, parallelism, rows_in_state, before)
            by_operation = {row.operation.split(" ")[0]: row for row in rows}
            for name, (mode, seconds, note) in spa_rows.items():
                target = by_operation.get(name)
                if target is None:
                    continue
                target.spa, target.spa_seconds = mode, seconds
                target.notes.append(note)
            # Flink writing the same state from nothing, beside statecat's unedited rewrite
            mode, seconds, note = spa_rows["bootstrap"]
            rows.insert(1, Row("unedited rewrite", rows[0].seconds, mode, seconds, [note]))
    finally:
        shutil.rmtree(dst, ignore_errors=True)
        shutil.rmtree(spa_out, ignore_errors=True)
    print_rows(keys, rows_in_state, megabytes, rows)
    return rows


def spa_side(
    args: argparse.Namespace,
    src: Path,
    out: Path,
    uid_hash: str,
    parallelism: int,
    rows_in_state: int,
    before: dict[str, Any],
) -> dict[str, tuple[str, float, str]]:
    """statecat's operation name -> (State Processor API run, its seconds, JVM start and checks)."""
    figures: dict[str, tuple[str, float, str]] = {}

    def run(name: str, mode: str, label: str, check: Callable[[Path], None], *extra: str) -> None:
        result = run_spa(mode, out, uid_hash, parallelism, args.flink_cpu, "--repeat", str(args.spa_repeat), *extra)
        check(out)
        seconds = result["best_s"] if args.spa_repeat > 1 else result["first_s"]
        note = (
            f"JVM start {result['jvm_start_s']:.2f} s, first pass {result['first_s']:.2f} s "
            f"(job net runtime {result['passes'][0]['net_runtime_s']:.2f} s), JVM peak RSS {result['peak_rss_mb']:.0f} MB"
        )
        figures[name] = (label, seconds, note)
        print(f"[spa] {label}: {json.dumps(result)}", file=sys.stderr, flush=True)

    def same_rows(path: Path) -> None:
        assert count_rows(path) == rows_in_state, path

    def bootstrapped(path: Path) -> None:
        same_rows(path)
        # (1, amount of key_662) as the harness computes it: found in the key-group statecat computes
        assert key_value(path) == {"f0": 1, "f1": (662 * 7919) % 2001 - 1000}, key_value(path)

    def updated(path: Path) -> None:
        same_rows(path)
        assert key_value(path) == {**before, "f0": before["f0"] + 1}

    keys = str(rows_in_state)
    run("bootstrap", "bootstrap", "bootstrap (new savepoint)", bootstrapped, "--keys", keys, "--max-parallelism", "128")
    run("unedited", "rewrite", "read + write", same_rows, "--src", str(src))
    run("one-key", "rewrite", "read + update + write", updated, "--src", str(src), "--update-key", KEY)
    if not args.skip_rekey:
        mp = str(NEW_MAX_PARALLELISM)
        run(
            "--max-parallelism",
            "rewrite",
            f"read + write, max par. {mp}",
            same_rows,
            "--src",
            str(src),
            "--max-parallelism",
            mp,
        )
    return figures


def print_rows(keys: int, rows_in_state: int, megabytes: float, rows: list[Row]) -> None:
    print(
        f"\n{'keys':>10} {'SRC MB':>7} {'operation':<27} {'statecat s':>10} {'MB/s':>6} {'rows/s':>8}"
        f"  {'State Processor API':<29} {'Flink s':>8} {'rows/s':>8} {'statecat/Flink':>14}"
    )
    for row in rows:
        line = (
            f"{keys:>10,} {megabytes:>7.1f} {row.operation:<27} {row.seconds:>10.2f} {megabytes / row.seconds:>6.0f} "
            f"{rows_in_state / row.seconds / 1e6:>6.2f} M"
        )
        if row.spa is not None and row.spa_seconds is not None:
            line += (
                f"  {row.spa:<29} {row.spa_seconds:>8.2f} {rows_in_state / row.spa_seconds / 1e6:>6.2f} M"
                f" {row.spa_seconds / row.seconds:>14.1f}"
            )
        print(line, flush=True)
    for row in rows:
        for note in row.notes:
            print(f"{'':>10}   {f'{row.spa}: ' if row.spa else ''}{note}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/statecat-write"))
    parser.add_argument("--sizes", default="4000000", help="key counts, comma-separated")
    parser.add_argument("--repeat", type=int, default=2, help="statecat: best of N writes per operation")
    parser.add_argument("--rekey-repeat", type=int, default=1, help="statecat: best of N re-keying writes")
    parser.add_argument("--cpu", type=int, default=0, help="the core statecat runs on")
    parser.add_argument("--skip-rekey", action="store_true", help="leave out the --max-parallelism rewrite")
    parser.add_argument("--profile", default="", help="comma-separated: update, rekey (cProfile that write once more)")
    parser.add_argument("--spa", action="store_true", help="also time Flink's State Processor API (a JVM)")
    parser.add_argument("--spa-repeat", type=int, default=1, help="passes per JVM (>1: the best is compared)")
    parser.add_argument("--flink-cpu", type=int, default=1, help="the core the State Processor API's JVM runs on")
    parser.add_argument("--generate-only", action="store_true")
    parser.add_argument("--whole-table", action="store_true", help="also an UPDATE of every key, with either engine")
    args = parser.parse_args()
    sizes = [int(k) for k in args.sizes.split(",")]
    args.dir.mkdir(parents=True, exist_ok=True)
    for keys in sizes:  # generation: one Flink job at a time, under the machine's heavy lock
        if not (args.dir / f"groupby-{keys}" / CASE / "savepoint" / "_metadata").exists():
            with heavy_lock(timeout=3600):
                ensure_savepoint(args.dir, keys)
    if args.generate_only:
        return
    with pinned(args.cpu):  # numba's compiled code loaded or compiled before anything is timed
        warm = args.dir / "warm-up"
        for kwargs in ({}, {"sql": [UPDATE]}, {"max_parallelism": NEW_MAX_PARALLELISM}):
            shutil.rmtree(warm, ignore_errors=True)
            write_savepoint(str(FIXTURE), str(warm), **kwargs)
        shutil.rmtree(warm, ignore_errors=True)
    for keys in sizes:
        with heavy_lock(timeout=3600):  # no other Flink job beside the figures
            measure(args, keys)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\nstatecat process peak resident memory: {peak:.0f} MB")


if __name__ == "__main__":
    main()
