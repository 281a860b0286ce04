"""Decoder speed per state layout: statecat beside Flink's own decoder, one savepoint per layout.

    .venv/bin/python bench/bench_layouts.py [--dir /tmp/statecat-layouts] [--java-ref] [--layouts sql_join,...]

Each layout is a savepoint generated (once, cached under ``--dir``) by real Flink from one of the
fixture jobs (tests/fixtures/generate.py) with bigger parameters, at most ~2 M entries each.
statecat reads every keyed state of the savepoint in one pass per operator
(``SavepointReader.operator_batches``) on cpu 0, once with the per-record decoders only and once
as it reads by default (column-wise where a plan exists); ``--java-ref`` then runs Flink's decoder
(../shared/bench/java-ref/run.sh --materialize) on cpu 1, one after the other. Entries are
counted as Flink counts them (a MapState row is as many entries as it has map entries), and both
sides must count the same. One row per layout, with the ratio statecat / Flink.

``--kryo``: the same data shape twice in one savepoint of tests/flink_jobs/java/DataStreamPojo.java
(``--kryo-state``): ``summary`` through Flink's PojoSerializer, ``summary_kryo`` through Kryo's
FieldSerializer (a value class), read with the job's jar (``--classpath``); rows/s of each and
the ratio POJO / Kryo, on Flink 2.3 (Kryo 5) and 1.20 (Kryo 2.24).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import pyarrow as pa  # noqa: E402

from statecat.readers import SavepointReader  # noqa: E402
from statecat.readers.scans.scan import KeyedStateScanner  # noqa: E402

JAVA_REF = REPO.parent / "shared" / "bench" / "java-ref" / "run.sh"

# layout -> (fixture case, params, what it holds). Sizes keep each generation to a few minutes.
LAYOUTS = {
    "sql_window": (
        "sql_window_2.3",
        {"keys": 100_000, "windows": 8, "delay_s": 900},
        "SQL window TVF: RowData key, slice-end namespace (long), SQL timers",
    ),
    "sql_join": (
        "sql_join_2.3",
        {"keys": 200_000, "a_rows": 900_000, "b_rows": 900_000},
        "SQL join: MapState RowData -> count and RowData -> RowData",
    ),
    "datastream_keyed": (
        "datastream_thread_2.3",
        {"keys": 200_000, "records": 800_000},
        "DataStream: Row key; Value, List, Map states of scalars; pickles; timers",
    ),
    "datastream_windows": (
        "datastream_windows_thread_2.3",
        {"windows": 100_000, "delay_s": 10_000_000, "global_count": 1_000_000_000},
        "DataStream windows: TimeWindow namespace (two longs), window timers",
    ),
}


def ensure_savepoint(directory: Path, layout: str) -> Path:
    case, params, _ = LAYOUTS[layout]
    target = directory / layout
    if (target / "savepoint" / "_metadata").is_file():
        return target / "savepoint"
    from tests.fixtures.generate import generate_case

    print(f"generating the {layout} savepoint with Flink ({params}) ...", file=sys.stderr)
    directory.mkdir(parents=True, exist_ok=True)
    generate_case(case, directory, **params)
    (directory / case).rename(target)
    return target / "savepoint"


def statecat_pass(path: Path, general: bool) -> tuple[int, float]:
    """Entries of every keyed state (one pass per operator) and the seconds taken."""
    started = time.perf_counter()
    reader = SavepointReader(path)
    entries = 0
    if general:  # the per-record decoders only: what every layout without a column plan costs
        original = KeyedStateScanner._fast_extractor
        KeyedStateScanner._fast_extractor = lambda self, namespace: None
    try:
        for op in reader.meta.operators:
            keyed = [s.name for s in op.states if s.is_keyed and s.decode_status == "full"]
            if not keyed:
                continue
            for _name, batch in reader.operator_batches(op.id, keyed):
                entries += count_entries(batch)
    finally:
        if general:
            KeyedStateScanner._fast_extractor = original
    return entries, time.perf_counter() - started


def count_entries(batch: pa.RecordBatch) -> int:
    """Rows as Flink's decoder counts them: one per map entry of a MapState, else one per row."""
    value = batch.column(2)
    if pa.types.is_map(value.type):
        return len(value.keys)
    return batch.num_rows


def java_reference(path: Path, cache: Path, rerun: bool) -> dict:
    if cache.is_file() and not rerun:
        return json.loads(cache.read_text())
    env = {**os.environ, "PIN_CPU": "1"}
    env.setdefault("FLINK_VENV", str(Path.home() / ".cache" / "statecat" / "pyflink-2.3.0"))
    subprocess.run(
        ["bash", str(JAVA_REF), str(path), "--repeat", "3", "--materialize", "--json", str(cache)],
        check=True,
        stdout=sys.stderr,
        env=env,
    )
    return json.loads(cache.read_text())


# Flink release → (fixture case, params) of the Kryo-against-POJO savepoints.
KRYO_CASES = {
    "2.3": ("datastream_java_pojo_2.3", {"keys": 200_000, "records": 400_000, "kryo": 1}),
    "1.20": ("datastream_java_pojo_1.20", {"keys": 200_000, "records": 400_000, "kryo": 1}),
}


def kryo_against_pojo(directory: Path, repeat: int) -> None:
    """Rows/s of one POJO state and of the same values through Kryo (decoded from the job's jar)."""
    from tests.fixtures.generate import generate_case
    from tests.fixtures.runtime import java_job_jar

    print(f"{'Flink':<8} {'rows':>9} {'POJO':>12} {'Kryo':>12} {'POJO/Kryo':>10}")
    for release, (case, params) in KRYO_CASES.items():
        target = directory / f"kryo_{release}"
        if not (target / "savepoint" / "_metadata").is_file():
            print(f"generating the Kryo/POJO savepoint of Flink {release} ({params}) ...", file=sys.stderr)
            directory.mkdir(parents=True, exist_ok=True)
            generate_case(case, directory, **params)
            (directory / case).rename(target)
        jar = java_job_jar("datastream_java_pojo", {"2.3": "2.3.0", "1.20": "1.20.5"}[release])
        reader = SavepointReader(str(target / "savepoint"), classpath=[jar])

        def rate(state: str, reader: SavepointReader = reader) -> tuple[int, float]:
            best = float("inf")
            rows = 0
            for _ in range(repeat):
                started = time.perf_counter()
                rows = sum(b.num_rows for b in reader.batches(state))
                best = min(best, time.perf_counter() - started)
            return rows, rows / best

        rate("summary_kryo")  # warm the page cache and the compiled decoders
        rows, pojo = rate("summary")
        kryo_rows, kryo = rate("summary_kryo")
        assert rows == kryo_rows, (rows, kryo_rows)
        print(f"{release:<8} {rows:>9,} {pojo / 1e6:>8.3f} M/s {kryo / 1e6:>8.3f} M/s {pojo / kryo:>10.2f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "statecat-layouts")
    parser.add_argument("--layouts", default=",".join(LAYOUTS), help="comma-separated: " + ", ".join(LAYOUTS))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--java-ref", action="store_true")
    parser.add_argument("--rerun-java", action="store_true", help="ignore Flink figures cached under --dir")
    parser.add_argument("--generate-only", action="store_true")
    parser.add_argument("--kryo", action="store_true", help="only Kryo against POJO on the same data shape")
    args = parser.parse_args()
    if args.kryo:
        os.sched_setaffinity(0, {0})
        kryo_against_pojo(args.dir, args.repeat)
        return
    if args.java_ref and not JAVA_REF.exists():
        parser.error(f"--java-ref needs Flink's decoder at {JAVA_REF} (the team's shared directory)")
    layouts = [name for name in args.layouts.split(",") if name]
    unknown = set(layouts) - set(LAYOUTS)
    if unknown:
        parser.error(f"unknown layouts {sorted(unknown)}; known: {', '.join(LAYOUTS)}")
    paths = {name: ensure_savepoint(args.dir, name) for name in layouts}
    if args.generate_only:
        return
    flink = {}
    if args.java_ref:
        for name in layouts:
            try:
                flink[name] = java_reference(paths[name], args.dir / name / "java-ref.json", args.rerun_java)
            except subprocess.CalledProcessError as exc:  # the other layouts are still measured
                print(f"Flink's decoder failed on {name} (exit {exc.returncode})", file=sys.stderr)
    os.sched_setaffinity(0, {0})  # statecat on cpu 0, Flink's decoder on cpu 1 (run before, not beside)
    print(f"{'layout':<20} {'entries':>10} {'per-record':>12} {'statecat':>12} {'Flink':>12} {'ratio':>6}")
    for name in layouts:
        statecat_pass(paths[name], False)  # warm the page cache and numba's compiled-code cache
        entries, general_s = min((statecat_pass(paths[name], True) for _ in range(args.repeat)), key=lambda r: r[1])
        _, fast_s = min((statecat_pass(paths[name], False) for _ in range(args.repeat)), key=lambda r: r[1])
        row = f"{name:<20} {entries:>10,} {entries / general_s / 1e6:>9.2f} M/s {entries / fast_s / 1e6:>9.2f} M/s"
        if name in flink:
            ref = flink[name]
            rate = float(ref["entries_per_s"])
            row += f" {rate / 1e6:>9.2f} M/s {entries / fast_s / rate:>6.2f}"
            if int(ref["entries"]) != entries:
                row += f"  (Flink counted {int(ref['entries']):,} entries)"
        print(row, flush=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
