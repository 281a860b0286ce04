"""statecat's full scan of a native RocksDB snapshot beside Flink's own restore of it (issue 8).

    flock /tmp/statecat-heavy.lock .venv/bin/python bench/bench_native.py SNAPSHOT_DIR [--repeat 3] [--key KEY]
    flock /tmp/statecat-heavy.lock .venv/bin/python bench/bench_native.py --generate DIR --keys 56000000

SNAPSHOT_DIR is a retained RocksDB checkpoint (``chk-N``) or a NATIVE savepoint. In one run (one
after the other, or side by side with ``--concurrent``): statecat reads every keyed state (rows/s,
this process pinned to ``--statecat-cpu``), and bench/java-native/run.sh restores every keyed handle
with Flink's own RocksDB restore classes and iterates every column family (pinned to
``--flink-cpu``); then the ratio (statecat rows/s / Flink entries/s, both one core), a single-key
read (time, and bytes read as a fraction of the snapshot's bytes) and the peak resident memory of
the scan. Run it under the heavy-jobs lock: it starts a JVM.

``--generate DIR --keys N`` first produces, with real Flink (tests/fixtures/generate.py, case
``sql_groupby_successive_2.3``: SQL GROUP BY on RocksDB, incremental checkpoints, every SST a file,
LZ4), a job fed in three phases that ends with about N keys, and measures its last retained
incremental checkpoint (DIR/sql_groupby_successive_2.3-N/checkpoints/<job>/chk-M; reused when
there). The checkpoint takes about 18.5 bytes per key: 56 M keys give about 1 GB (the case
directory, with its input and three canonical savepoints, about 15 GB; generating it took 21 min here).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from statecat.readers import SavepointReader, StatecatError  # noqa: E402

FLINK_RESTORE = REPO / "bench" / "java-native" / "run.sh"
GENERATED_CASE = "sql_groupby_successive_2.3"
GENERATED_INFO = "bench-generated.json"


# --------------------------------------------------------------------------- the snapshot

def generate(directory: Path, keys: int) -> Path:
    """The last retained checkpoint of a GROUP BY job over ``keys`` keys, generated once."""
    case = directory / f"{GENERATED_CASE}-{keys}"
    info = case / GENERATED_INFO
    if info.is_file():
        return case / json.loads(info.read_text())["checkpoint"]
    from tests.fixtures import generate as fixtures

    if GENERATED_CASE not in fixtures.CASES:
        sys.exit(f"error: tests/fixtures/generate.py has no case {GENERATED_CASE} yet; once it has, run this "
                 "again (or generate it by hand: .venv/bin/python -c \"from tests.fixtures.generate import "
                 f"generate_case; generate_case('{GENERATED_CASE}', '{directory}', keys={4 * keys}, "
                 f"first_phase_keys={4 * keys}, phase_records=[{keys}, {keys // 10}, {keys // 10}])\")")

    def write_info(case_dir, case_id, p):
        # Instead of expected-phase-K.json: the rows of millions of keys (GBs of JSON, minutes of
        # CPU) are not needed to measure; the checkpoint's path is.
        (Path(case_dir) / GENERATED_INFO).write_text(json.dumps({
            "params": p, "checkpoint": f"checkpoints/{p['job_id']}/chk-{p['checkpoint_ids'][-1]}"}))

    fixtures.write_successive_expected = write_info
    print(f"generating an incremental RocksDB checkpoint of about {keys:,} keys with Flink (once) ...",
          file=sys.stderr)
    # Phase 1 draws `keys` records from a key space 4x as large (88 % of the draws are distinct
    # keys), phases 2 and 3 a tenth as many each (mostly new keys, some updates): their SST files
    # are the increments of the last checkpoint, which ends up with about `keys` keys.
    fixtures.generate_case(GENERATED_CASE, directory, keys=4 * keys, first_phase_keys=4 * keys,
                           phase_records=[keys, keys // 10, keys // 10])
    (directory / GENERATED_CASE).rename(case)
    return case / json.loads(info.read_text())["checkpoint"]


def directory_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def read_chars() -> int:
    """Bytes this process has read through read() calls so far (page cache included)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    return 0


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# --------------------------------------------------------------------------- Flink's side

class FlinkRestore:
    """bench/java-native/run.sh in the background, pinned to one core."""

    def __init__(self, snapshot: Path, cpu: int | None, repeat: int, work: Path):
        self.json = Path(tempfile.mkstemp(prefix="flink-native-", suffix=".json")[1])
        self.log = Path(tempfile.mkstemp(prefix="flink-native-", suffix=".log")[1])
        env = dict(os.environ)
        if cpu is not None:
            env["PIN_CPU"] = str(cpu)
        cmd = ["bash", str(FLINK_RESTORE), str(snapshot), "--repeat", str(repeat), "--json", str(self.json),
               "--work", str(work)]
        self.command = " ".join(cmd)
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)

    def result(self) -> dict | None:
        self.proc.wait()
        try:
            output = self.log.read_text(errors="replace")
            if self.proc.returncode == 0 and self.json.stat().st_size:
                return json.loads(self.json.read_text())
            tail = "\n".join(output.splitlines()[-25:])
            print(f"Flink's restore failed (exit {self.proc.returncode}): {self.command}\n{tail}", file=sys.stderr)
            return None
        finally:
            self.json.unlink(missing_ok=True)
            self.log.unlink(missing_ok=True)


# --------------------------------------------------------------------------- statecat's side

SEEN_KEYS: dict = {}  # (operator id, state) -> a key the scan read: the single-key read looks it up


def scan(snapshot: Path) -> tuple[int, float, dict]:
    """Rows of every keyed state (opening the snapshot included), seconds, rows per state."""
    started = time.perf_counter()
    reader = SavepointReader(snapshot)
    per_state = {}
    for op, state in reader.meta.states():
        if state.is_keyed:
            rows = 0
            for batch in reader.batches(state.name, op.id):
                if not rows and batch.num_rows:
                    SEEN_KEYS[(op.id, state.name)] = batch.column("key")[batch.num_rows // 2].as_py()
                rows += batch.num_rows
            per_state[(op.id, state.name)] = rows
    if not per_state:
        reasons = [f"{op.name or op.id}: {'; '.join(map(str, op.unsupported))}"
                   for op in reader.meta.operators if op.unsupported]
        raise StatecatError("no keyed state to read" + (f" ({', '.join(reasons)})" if reasons else ""))
    return sum(per_state.values()), time.perf_counter() - started, per_state


def single_key(snapshot: Path, state: tuple[str, str], key: str) -> dict:
    chars = read_chars()
    started = time.perf_counter()
    reader = SavepointReader(snapshot)
    opened = time.perf_counter()
    table = reader.table(state[1], state[0], keys=[key])
    done = time.perf_counter()
    return {"open_s": opened - started, "read_s": done - opened, "rows": table.num_rows,
            "state_bytes_read": reader.last_stats.bytes_read, "key_groups": reader.last_stats.key_groups,
            "rchar": read_chars() - chars}


def statecat_side(snapshot: Path, repeat: int, key: str | None) -> dict:
    out = {"rss_before_mb": peak_rss_mb()}
    try:
        scan(snapshot)  # warm-up: page cache, numba's compiled code
        runs = [scan(snapshot) for _ in range(repeat)]
    except StatecatError as exc:
        out["error"] = f"not read yet: {exc}"
        return out
    except Exception as exc:  # noqa: BLE001 - reported, Flink's figures still printed
        out["error"] = f"failed: {type(exc).__name__}: {exc}"
        return out
    rows, seconds, per_state = min(runs, key=lambda r: r[1])
    out.update(rows=rows, seconds=seconds, per_state=per_state, rss_scan_mb=peak_rss_mb())
    biggest = max(per_state, key=per_state.get)
    key = key if key is not None else SEEN_KEYS.get(biggest)
    if key is not None:
        try:
            out["single_key"] = {"key": key, "state": biggest[1], **single_key(snapshot, biggest, key)}
        except Exception as exc:  # noqa: BLE001
            out["single_key"] = {"key": key, "error": f"{type(exc).__name__}: {exc}"}
    return out


# --------------------------------------------------------------------------- report

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("snapshot", nargs="?", type=Path, help="chk-N or a NATIVE savepoint (directory with _metadata)")
    parser.add_argument("--generate", type=Path, metavar="DIR", help="generate the snapshot into DIR first (with --keys)")
    parser.add_argument("--keys", type=int, default=56_000_000, help="about how many keys (--generate)")
    parser.add_argument("--repeat", type=int, default=3, help="measured passes of each side (best / median)")
    parser.add_argument("--key", help="key of the single-key read (default: one the full scan read, from the "
                        "middle of the biggest state's first batch)")
    parser.add_argument("--statecat-cpu", type=int, default=0)
    parser.add_argument("--flink-cpu", type=int, default=1)
    parser.add_argument("--concurrent", action="store_true",
                        help="run Flink beside statecat (each on its core) instead of after it: quicker, but the two "
                             "share caches and memory bandwidth (on this VM statecat measured ~1/3 slower so)")
    parser.add_argument("--no-flink", action="store_true")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()),
                        help="where Flink's restore puts its RocksDB instances (deleted after)")
    args = parser.parse_args()
    if args.generate:
        snapshot = generate(args.generate.resolve(), args.keys)
    elif args.snapshot:
        snapshot = args.snapshot.resolve()
    else:
        parser.error("give a snapshot directory or --generate DIR")
    if not (snapshot / "_metadata").is_file():
        parser.error(f"{snapshot} has no _metadata: give a retained checkpoint chk-N or a NATIVE savepoint")
    cpus = sorted(os.sched_getaffinity(0))
    key = args.key
    print(f"snapshot: {snapshot}")

    flink = None
    work = Path(tempfile.mkdtemp(prefix="flink-native-work-", dir=args.work))
    try:
        if not args.no_flink and args.concurrent:
            flink = FlinkRestore(snapshot, args.flink_cpu if len(cpus) > 1 else None, args.repeat + 1, work)
        os.sched_setaffinity(0, {args.statecat_cpu})
        mine = statecat_side(snapshot, args.repeat, key)
        os.sched_setaffinity(0, cpus)
        if not args.no_flink and not args.concurrent:
            flink = FlinkRestore(snapshot, args.flink_cpu if len(cpus) > 1 else None, args.repeat + 1, work)
        ref = flink.result() if flink else None
    finally:
        if flink and flink.proc.returncode is None:
            flink.proc.kill()
        shutil.rmtree(work, ignore_errors=True)

    # the snapshot's bytes: _metadata (inline handles are inside it) and every file the keyed
    # handles name (a checkpoint's shared SSTs live outside chk-N); without Flink's figures, the directory
    snapshot_bytes = ref["metadata_bytes"] + ref["file_handle_bytes"] if ref else directory_bytes(snapshot)
    print(f"snapshot bytes: {snapshot_bytes:,} ({snapshot_bytes / 1e6:.1f} MB"
          + (f": _metadata {ref['metadata_bytes']:,} B with {ref['inline_handle_bytes']:,} B of inline handles, "
             f"{ref['file_handles']} files of keyed handles)" if ref else ", the directory's files only)"))
    mode = "concurrently" if args.concurrent else "one after the other"
    print(f"cores: statecat on cpu {args.statecat_cpu}, Flink on cpu {args.flink_cpu} ({mode})")

    if "error" in mine:
        print(f"statecat full scan: {mine['error']}")
    else:
        rate = mine["rows"] / mine["seconds"]
        print(f"statecat full scan (every keyed state, opening included): {mine['rows']:,} rows in "
              f"{mine['seconds']:.3f} s = {rate:,.0f} rows/s, {snapshot_bytes / 1e6 / mine['seconds']:.1f} MB/s of "
              f"snapshot (best of {args.repeat})")
        for (op_id, state), rows in mine["per_state"].items():
            print(f"  {state} ({op_id[:8]}): {rows:,} rows")
        print(f"statecat peak resident memory: {mine['rss_scan_mb']:.0f} MB after the scans "
              f"({mine['rss_before_mb']:.0f} MB before them)")
        one = mine.get("single_key")
        if one is None:
            print("single-key read: no key (the scan read no rows; give --key)")
        elif "error" in one:
            print(f"single-key read ({one['key']}): failed: {one['error']}")
        else:
            total = one["open_s"] + one["read_s"]
            print(f"single-key read ({one['key']} in {one['state']}): {total * 1000:.0f} ms (opening "
                  f"{one['open_s'] * 1000:.0f} ms, reading {one['read_s'] * 1000:.0f} ms), {one['rows']} row(s), "
                  f"{one['key_groups']} key-group(s); state bytes read {one['state_bytes_read']:,} = "
                  f"{one['state_bytes_read'] / snapshot_bytes:.3%} of the snapshot; all read() calls "
                  f"{one['rchar']:,} B = {one['rchar'] / snapshot_bytes:.3%}")

    if ref is None:
        if not args.no_flink:
            print("Flink's restore: no figures (see above)")
        return
    sec = ref["seconds"]
    flink_rate = ref["entries_per_s"]
    print(f"Flink's restore + iterate ({ref['handles']} native handles, {ref['transfer_threads']} transfer thread, "
          f"median of {args.repeat} after a warm-up): {ref['entries']:,} entries, "
          f"{ref['key_bytes'] + ref['value_bytes']:,} key+value bytes in {sec['total']:.3f} s = "
          f"{flink_rate:,.0f} entries/s (metadata {sec['metadata']:.3f} s, transfer {sec['transfer']:.3f} s, "
          f"open {sec['open']:.3f} s, iterate {sec['iterate']:.3f} s = {ref['iterate_entries_per_s']:,.0f} "
          f"entries/s); JVM peak RSS {ref['peak_rss_bytes'] / 1e6:.0f} MB")
    for s in ref["states"]:
        print(f"  {s['state']} ({s['kind']}): {s['entries']:,} entries")
    for note in ref["notes"]:
        print(f"  note: {note}")
    if "error" not in mine:
        if mine["rows"] != ref["entries"]:
            print(f"note: statecat rows ({mine['rows']:,}) != Flink entries ({ref['entries']:,}): a LIST "
                  "state's entry holds all its elements, a MAP state has one entry per user key")
        print(f"statecat / Flink per core: {mine['rows'] / mine['seconds'] / flink_rate:.2f} "
              f"(against Flink's iteration alone: "
              f"{mine['rows'] / mine['seconds'] / ref['iterate_entries_per_s']:.2f})")
    else:
        print("statecat / Flink per core: - (statecat did not read the snapshot)")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
