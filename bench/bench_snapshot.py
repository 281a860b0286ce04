"""Benchmark: `statecat snapshot` time does not grow with state size.

    python bench/bench_snapshot.py [--keys 2000,200000,1500000] [--work DIR] [--runs 5] [--read]

Generates real Flink savepoints of the SQL GROUP BY job with tests/fixtures/generate.py
(`generate_case("sql_groupby_hashmap_2.3", keys=N, max_records_per_key=1)`; cached in --work, so
re-runs only measure), then times the snapshotter on each (median of --runs; each run writes a
fresh stateInfo into a scratch --output directory, so every run does the full work). With --read,
also times reading the state's rows in a fresh process, which does grow with the state, for
contrast, and prints that process's peak resident memory, which must not.

The snapshotter reads `_metadata` and the header of each state stream (one 64 KiB buffer at
most per file), never the key-groups; its cost follows the number of operators, subtasks and
files, not the bytes in them. Prints a table and one JSON line; exits 1 if the largest savepoint
snapshots more than --max-ratio times slower than the smallest.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CASE = "sql_groupby_hashmap_2.3"


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def ensure_savepoint(work: Path, keys: int) -> Path:
    target = work / f"keys-{keys}"
    savepoint = target / CASE / "savepoint"
    if (savepoint / "_metadata").is_file():
        return savepoint
    sys.path.insert(0, str(REPO))
    from tests.fixtures.generate import generate_case

    print(f"[bench] generating a {keys}-key savepoint (a real Flink job; once per --work dir)", file=sys.stderr)
    generate_case(CASE, target, keys=keys, max_records_per_key=1)
    shutil.rmtree(target / CASE / "input", ignore_errors=True)  # only the savepoint is needed
    return savepoint


def time_snapshot(savepoint: Path, runs: int) -> tuple[float, dict]:
    from statecat.statemeta.snapshotter.stateinfo import snapshot

    times = []
    doc = None
    for _ in range(runs):
        scratch = Path(tempfile.mkdtemp(prefix="statecat-bench-"))
        try:
            started = time.perf_counter()
            result = snapshot(str(savepoint), str(scratch))
            times.append(time.perf_counter() - started)
            assert result.written
            doc = result.doc
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return statistics.median(times), doc


READ_CHILD = """
import json, resource, sys, time
from statecat.readers import SavepointReader
from statecat.statemeta.model import load_state_meta
reader = SavepointReader(load_state_meta(sys.argv[1], use_state_info=False))
list(reader.batches("accState", keys=["key_1"]))  # warm-up on one key-group: compiled code loads
started = time.perf_counter()
rows = sum(b.num_rows for b in reader.batches("accState"))
seconds = time.perf_counter() - started
print(json.dumps({"seconds": seconds, "rows": rows, "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def time_read(savepoint: Path) -> dict:
    """A full read of the state in a fresh process: its time (second pass) and the process's peak
    resident memory, which must not grow with the state (reads stream key-groups into batches)."""
    out = subprocess.run(
        [sys.executable, "-c", READ_CHILD, str(savepoint)], check=True, capture_output=True, text=True
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", default="2000,200000,1500000", help="comma-separated key counts")
    ap.add_argument(
        "--work",
        default=str(Path.home() / ".cache" / "statecat" / "bench-snapshot"),
        help="where generated savepoints are kept between runs",
    )
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--read", action="store_true", help="also time a full read of the state, for contrast")
    ap.add_argument("--max-ratio", type=float, default=3.0)
    a = ap.parse_args(argv)
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for keys in sorted(int(k) for k in a.keys.split(",")):
        savepoint = ensure_savepoint(work, keys)
        if not rows:  # warm-up, not timed: imports and compiled code load once, on the first savepoint
            time_snapshot(savepoint, 1)
        seconds, doc = time_snapshot(savepoint, a.runs)
        row = {
            "keys": keys,
            "state_bytes": _du(savepoint) - (savepoint / "_metadata").stat().st_size,
            "metadata_bytes": (savepoint / "_metadata").stat().st_size,
            "files": sum(1 for p in savepoint.iterdir() if p.name != "_metadata"),
            "snapshot_ms": round(seconds * 1000, 2),
            "states": sum(len(op["states"]) for op in doc["operators"]),
        }
        if a.read:
            read = time_read(savepoint)
            row.update(
                read_ms=round(read["seconds"] * 1000, 1),
                rows=read["rows"],
                read_peak_rss_mb=round(read["peak_rss_kb"] / 1024),
            )
        rows.append(row)
    print(
        f"{'keys':>10} {'state MiB':>10} {'files':>6} {'snapshot ms':>12}"
        + (f" {'read ms':>10} {'read peak RSS MB':>17}" if a.read else "")
    )
    for r in rows:
        line = f"{r['keys']:>10} {r['state_bytes'] / 2**20:>10.2f} {r['files']:>6} {r['snapshot_ms']:>12.2f}"
        if a.read:
            line += f" {r['read_ms']:>10.1f} {r['read_peak_rss_mb']:>17}"
        print(line)
    ratio = rows[-1]["snapshot_ms"] / rows[0]["snapshot_ms"]
    size_ratio = rows[-1]["state_bytes"] / max(rows[0]["state_bytes"], 1)
    print(
        json.dumps(
            {"bench": "snapshot", "rows": rows, "size_ratio": round(size_ratio, 1), "time_ratio": round(ratio, 2)}
        )
    )
    if ratio > a.max_ratio:
        print(f"snapshot time grew {ratio:.1f}x for {size_ratio:.0f}x the state", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
