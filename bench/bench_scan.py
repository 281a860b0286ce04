"""Full-scan and single-key-read figures of statecat on a large real savepoint, beside Flink's own decoder.

    .venv/bin/python bench/bench_scan.py [--keys 13500000] [--dir /tmp/statecat-bench] [--java-ref] [--cpu 0]

Generates (once, with real Flink via tests/fixtures/generate.py) a SQL ``GROUP BY word`` savepoint on
the hashmap backend with ``--keys`` keys, then prints: savepoint size, rows/s and MB/s (one thread,
best of ``--repeat``) of a scan of the ``accState`` table, of every keyed state one table at a time,
and of every keyed state in one pass per operator (``--states``), the time of a single-key read, and
the peak resident memory. ``--java-ref`` also runs ../shared/bench/java-ref/run.sh on the same savepoint with
``--materialize`` and prints statecat's ratio to it (both one core).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from statecat.readers import SavepointReader  # noqa: E402
from statecat.statemeta.model import load_state_meta  # noqa: E402

CASE = "sql_groupby_hashmap_2.3"
MAIN_STATE = "accState"
JAVA_REF = REPO.parent / "shared" / "bench" / "java-ref" / "run.sh"


def savepoint_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def ensure_savepoint(directory: Path, keys: int) -> Path:
    case = directory / f"{CASE}-{keys}"
    if (case / "savepoint" / "_metadata").is_file():
        return case / "savepoint"
    from tests.fixtures.generate import generate_case

    print(f"generating a {keys:,}-key savepoint with Flink (once) ...", file=sys.stderr)
    generate_case(CASE, directory, keys=keys, max_records_per_key=1)
    (directory / CASE).rename(case)
    return case / "savepoint"


def scan(path: Path, states: str) -> tuple[int, float]:
    """Rows of ``accState`` (the table a query reads), of every keyed state one table at a time
    ("each"), or of every keyed state read in one pass per operator ("all"), and the seconds taken."""
    started = time.perf_counter()
    reader = SavepointReader(path)
    rows = 0
    if states == "all":
        for op in reader.meta.operators:
            keyed = [state.name for state in op.states if state.is_keyed]
            if keyed:
                for _, batch in reader.operator_batches(op.id, keyed):
                    rows += batch.num_rows
        return rows, time.perf_counter() - started
    for op, state in reader.meta.states():
        if state.is_keyed and (states == "each" or state.name == MAIN_STATE):
            for batch in reader.batches(state.name, op.id):
                rows += batch.num_rows
    return rows, time.perf_counter() - started


def keyed_bytes(path: Path) -> int:
    meta = load_state_meta(path)
    streams = {}
    for _, state in meta.states():
        if state.is_keyed:
            for location in state.locations:
                streams[location.stream] = location.stream.size - location.header_length
    return sum(streams.values())


def single_key(path: Path, key: str) -> tuple[float, float, int]:
    started = time.perf_counter()
    reader = SavepointReader(path)
    opened = time.perf_counter()
    table = reader.table("accState", keys=[key])
    done = time.perf_counter()
    return opened - started, done - opened, table.num_rows


def java_reference(path: Path, cpu: int | None) -> dict:
    env = dict(os.environ)
    if cpu is not None:
        env["PIN_CPU"] = str(1 - cpu)  # the other core of two, run after statecat's
    env.setdefault("FLINK_VENV", str(Path.home() / ".cache" / "statecat" / "pyflink-2.3.0"))
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run(
            ["bash", str(JAVA_REF), str(path), "--repeat", "3", "--materialize", "--json", out.name],
            check=True,
            stdout=sys.stderr,
            env=env,
        )
        return json.loads(Path(out.name).read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=13_500_000)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "statecat-bench")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--java-ref", action="store_true")
    parser.add_argument(
        "--states",
        default=f"{MAIN_STATE},each,all",
        help=f"which scans, comma-separated: {MAIN_STATE} (the table a query reads), each (every "
        "keyed state, one table at a time), all (every keyed state in one pass per operator)",
    )
    parser.add_argument("--cpu", type=int, default=None, help="pin statecat to this cpu (Flink's decoder: the other)")
    args = parser.parse_args()
    if args.java_ref and not JAVA_REF.exists():
        parser.error(
            f"--java-ref needs Flink's decoder at {JAVA_REF} (the team's shared directory next to "
            "the repository, not part of a plain clone); run without --java-ref to measure statecat alone"
        )

    path = ensure_savepoint(args.dir, args.keys)
    size = savepoint_size(path)
    data_bytes = keyed_bytes(path)
    print(f"savepoint: {path} ({size / 1e6:.0f} MB, keyed state streams {data_bytes / 1e6:.0f} MB)")
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    scan(path, "all")  # warm the page cache and numba's compiled-code cache
    rates = {}
    labels = {
        MAIN_STATE: f"table scan ({MAIN_STATE})",
        "each": "every keyed state, one state at a time",
        "all": "every keyed state, one pass per operator",
    }
    for states in args.states.split(","):
        label = labels[states]
        rows, seconds = min((scan(path, states) for _ in range(args.repeat)), key=lambda r: r[1])
        rates[states] = rows / seconds
        print(
            f"{label}: {rows:,} rows in {seconds:.2f} s = {rows / seconds / 1e6:.2f} M rows/s, "
            f"{data_bytes / 1e6 / seconds:.0f} MB/s (one thread, best of {args.repeat})"
        )
    open_s, read_s, found = single_key(path, "key_662")
    print(
        f"single-key read (key_662): {(open_s + read_s) * 1000:.0f} ms "
        f"(opening the savepoint {open_s * 1000:.0f} ms, reading one key-group {read_s * 1000:.0f} ms), {found} row"
    )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak resident memory: {peak:.0f} MB")
    if args.java_ref:
        ref = java_reference(path, args.cpu)
        java_rate = float(ref["entries_per_s"])
        print(
            f"Flink's own decoder (--materialize): {ref['entries']:,} entries, {java_rate / 1e6:.2f} M entries/s, "
            f"{float(ref['mb_per_s']):.0f} MB/s"
        )
        for states, rate in rates.items():
            print(f"statecat / Flink per core, {labels[states]}: {rate / java_rate:.2f}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
