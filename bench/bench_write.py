"""Writing savepoints: an unedited rewrite, a one-key UPDATE and a --max-parallelism rewrite.

    .venv/bin/python bench/bench_write.py [--dir /tmp/statecat-write] [--sizes 4000000,13500000]

Each size is a GROUP BY savepoint (tests/fixtures/generate.py, ``sql_groupby_hashmap_2.3`` with
that many keys, one record each; 13.5 M keys is ~950 MiB), generated once by real Flink and cached
under ``--dir``. Each operation runs on cpu 0 into a fresh DST, which is deleted afterwards; the
one-key UPDATE is checked (exactly one changed row, by reading that key back). Figures: seconds,
MB/s of SRC, and rows/s per core for the re-keying rewrite.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from statecat.catalog.spark.edits import write_savepoint  # noqa: E402
from statecat.readers import SavepointReader  # noqa: E402

CASE = "sql_groupby_hashmap_2.3"


def ensure_savepoint(directory: Path, keys: int) -> Path:
    target = directory / f"groupby-{keys}"
    if not (target / CASE / "savepoint" / "_metadata").exists():
        from tests.fixtures.generate import generate_case

        generate_case(CASE, target, keys=keys, max_records_per_key=1)
    return target / CASE / "savepoint"


def size_of(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def timed(src: Path, dst: Path, **kwargs) -> tuple[float, object]:
    shutil.rmtree(dst, ignore_errors=True)
    started = time.perf_counter()
    result = write_savepoint(str(src), str(dst), **kwargs)
    return time.perf_counter() - started, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/statecat-write"))
    parser.add_argument("--sizes", default="4000000", help="key counts, comma-separated")
    parser.add_argument("--skip-rekey", action="store_true", help="leave out the --max-parallelism rewrite")
    args = parser.parse_args()
    os.sched_setaffinity(0, {0})
    print(f"{'keys':>10} {'SRC MB':>8} {'operation':<28} {'seconds':>8} {'MB/s':>8} {'rows/s':>10}")
    for keys in (int(k) for k in args.sizes.split(",")):
        src = ensure_savepoint(args.dir, keys)
        megabytes = size_of(src) / 1e6
        dst = args.dir / "out"
        try:
            seconds, _ = timed(src, dst)
            print(f"{keys:>10} {megabytes:>8.1f} {'unedited rewrite':<28} {seconds:>8.2f} {megabytes / seconds:>8.0f}")
            key = "key_662"
            before = SavepointReader(str(src)).table("accState", keys=[key]).to_pylist()
            statement = f"UPDATE accstate SET value.f0 = value.f0 + 1 WHERE key = '{key}'"
            seconds, result = timed(src, dst, sql=[statement])
            after = SavepointReader(str(dst)).table("accState", keys=[key]).to_pylist()
            assert [s.matched for s in result.statements] == [1], result.statements  # type: ignore[attr-defined]
            assert after[0]["value"]["f0"] == before[0]["value"]["f0"] + 1
            print(f"{keys:>10} {megabytes:>8.1f} {'one-key UPDATE':<28} {seconds:>8.2f} {megabytes / seconds:>8.0f}")
            if not args.skip_rekey:
                seconds, _ = timed(src, dst, max_parallelism=256)
                print(
                    f"{keys:>10} {megabytes:>8.1f} {'--max-parallelism 128->256':<28} {seconds:>8.2f} "
                    f"{megabytes / seconds:>8.0f} {keys / seconds:>10.0f}"
                )
        finally:
            shutil.rmtree(dst, ignore_errors=True)


if __name__ == "__main__":
    main()
