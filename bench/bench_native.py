"""statecat's full scan of a native RocksDB snapshot beside Flink's own restore of it (issue 8).

    flock /tmp/statecat-heavy.lock .venv/bin/python bench/bench_native.py SNAPSHOT_DIR [--repeat 3] [--key KEY]
    flock /tmp/statecat-heavy.lock .venv/bin/python bench/bench_native.py --generate DIR --keys 52000000

SNAPSHOT_DIR is a retained RocksDB checkpoint (``chk-N``) or a NATIVE savepoint. In one run (one
after the other, or side by side with ``--concurrent``): statecat reads every keyed state (rows/s,
this process pinned to ``--statecat-cpu``), and bench/java-native/run.sh restores every keyed handle
with Flink's own RocksDB restore classes and iterates every column family (pinned to
``--flink-cpu``); then the ratio (statecat rows/s / Flink entries/s, both one core), a single-key
read (time, and bytes read as a fraction of the snapshot's bytes) and the peak resident memory of
the scan. Run it under the heavy-jobs lock: it starts a JVM.

``--generate DIR --keys N`` first produces, with real Flink, the retained incremental checkpoints
of case ``sql_groupby_successive_2.3`` (SQL GROUP BY on RocksDB, incremental checkpoints, every SST
a file, LZ4, partitioned index, FIFO compaction: later checkpoints reuse the earlier ones' SSTs)
fed in three phases that end with exactly N keys, and measures the last one
(DIR/sql_groupby_successive_2.3-N/checkpoints/<job>/chk-M; reused when there). Checkpoints only
(tests.fixtures.generate.generate_successive_checkpoints): no savepoints, no expected rows, the
input written with numpy and deleted after; bench-generated.json records the number of distinct
keys of the input, which the full scan's row count must equal. About 21 bytes per key: 52 M keys
give about 1.1 GB.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
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
# With the MiniCluster's default 128 MB of managed memory RocksDB flushes 4 MB files, and every
# lookup of a new key probes all of them: tens of millions of keys would take hours. 2 GB of
# managed memory and 128 MB write buffers give SSTs of tens of MB, as on a real TaskManager.
GENERATE_CONF = {"taskmanager.memory.managed.size": "2g", "state.backend.rocksdb.writebuffer.size": "128mb"}


# --------------------------------------------------------------------------- the snapshot


def write_phases(keys: int, p: dict, staging: Path, input_dir: Path):
    """The input of the three phases, written fast (numpy, a few lines per call): phase 1
    inserts keys - 2 * (keys // 20) keys in random order; phases 2 and 3 each add keys // 20 new
    keys and update as many existing ones (their SSTs are the increments of the last
    checkpoint, with older versions of the updated keys below them). Records p["keys"], the
    number of distinct keys the input holds."""
    import numpy as np

    rng = np.random.default_rng(p["seed"])
    step = keys // 20
    first = keys - 2 * step
    start = p["key_start"]
    phase_ids = [start + rng.permutation(first)]
    for ph in (2, 3):
        known = first + (ph - 2) * step
        new = start + known + np.arange(step)
        phase_ids.append(rng.permutation(np.concatenate([new, start + rng.integers(0, known, step)])))
    p["keys"] = int(np.unique(np.concatenate(phase_ids)).size)  # what the scan must count
    phases, total = [], 0
    for ph, ids in enumerate(phase_ids, 1):
        d = staging / f"phase-{ph}"
        d.mkdir(parents=True)
        amounts = rng.integers(-1000, 1001, ids.size)
        for part in range(p["parallelism"]):
            with open(d / f"part-{part}.csv", "w") as out:
                for lo in range(part, ids.size, 1_000_000 * p["parallelism"]):
                    hi = lo + 1_000_000 * p["parallelism"]
                    out.write(
                        "".join(
                            map(
                                "key_{},{}\n".format,
                                ids[lo : hi : p["parallelism"]].tolist(),
                                amounts[lo : hi : p["parallelism"]].tolist(),
                            )
                        )
                    )
        total += ids.size
        phases.append((d, total))
    p["records"] = total
    return ["--input", str(input_dir), "--records", str(total)], phases


def generate(directory: Path, keys: int) -> tuple[Path, dict]:
    """The last retained checkpoint of a GROUP BY job ending with ``keys`` keys (generated
    once), and what the generation recorded (bench-generated.json)."""
    case = directory / f"{GENERATED_CASE}-{keys}"
    info = case / GENERATED_INFO
    if not info.is_file():
        from tests.fixtures import generate as fixtures

        print(f"generating incremental RocksDB checkpoints of {keys:,} keys with Flink (once) ...", file=sys.stderr)
        started = time.monotonic()
        directory.mkdir(parents=True, exist_ok=True)
        done, p = fixtures.generate_successive_checkpoints(
            GENERATED_CASE,
            directory,
            lambda p, staging, input_dir: write_phases(keys, p, staging, input_dir),
            conf=GENERATE_CONF,
            key_start=10_000_000,
            seed=8,
        )
        done.rename(case)
        (case / GENERATED_INFO).write_text(
            json.dumps(
                {
                    "keys": p["keys"],
                    "records": p["records"],
                    "params": p,
                    "generate_s": time.monotonic() - started,
                    "checkpoint": f"checkpoints/{p['job_id']}/chk-{p['checkpoint_ids'][-1]}",
                }
            )
        )
    recorded = json.loads(info.read_text())
    # The incremental part: the last checkpoint's shared files that the earlier ones uploaded.
    job = case / "checkpoints" / recorded["params"]["job_id"]
    metadata = [(job / f"chk-{i}" / "_metadata").read_bytes() for i in recorded["params"]["checkpoint_ids"]]
    last = [f.name.encode() for f in (job / "shared").iterdir() if b"/shared/" + f.name.encode() in metadata[-1]]
    recorded["shared_files"] = len(last)
    recorded["shared_files_from_earlier"] = sum(any(b"/shared/" + name in m for m in metadata[:-1]) for name in last)
    return case / recorded["checkpoint"], recorded


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
        cmd = [
            "bash",
            str(FLINK_RESTORE),
            str(snapshot),
            "--repeat",
            str(repeat),
            "--json",
            str(self.json),
            "--work",
            str(work),
        ]
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
        reasons = [
            f"{op.name or op.id}: {'; '.join(map(str, op.unsupported))}"
            for op in reader.meta.operators
            if op.unsupported
        ]
        raise StatecatError("no keyed state to read" + (f" ({', '.join(reasons)})" if reasons else ""))
    return sum(per_state.values()), time.perf_counter() - started, per_state


def single_key(snapshot: Path, state: tuple[str, str], key: str) -> dict:
    chars = read_chars()
    started = time.perf_counter()
    reader = SavepointReader(snapshot)
    opened = time.perf_counter()
    table = reader.table(state[1], state[0], keys=[key])
    done = time.perf_counter()
    return {
        "open_s": opened - started,
        "read_s": done - opened,
        "rows": table.num_rows,
        "state_bytes_read": reader.last_stats.bytes_read,
        "key_groups": reader.last_stats.key_groups,
        "rchar": read_chars() - chars,
    }


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("snapshot", nargs="?", type=Path, help="chk-N or a NATIVE savepoint (directory with _metadata)")
    parser.add_argument(
        "--generate", type=Path, metavar="DIR", help="generate the snapshot into DIR first (with --keys)"
    )
    parser.add_argument("--keys", type=int, default=52_000_000, help="how many keys (--generate)")
    parser.add_argument("--repeat", type=int, default=3, help="measured passes of each side (best / median)")
    parser.add_argument(
        "--key",
        help="key of the single-key read (default: one the full scan read, from the "
        "middle of the biggest state's first batch)",
    )
    parser.add_argument("--statecat-cpu", type=int, default=0)
    parser.add_argument("--flink-cpu", type=int, default=1)
    parser.add_argument(
        "--concurrent",
        action="store_true",
        help="run Flink beside statecat (each on its core) instead of after it: quicker, but the two "
        "share caches and memory bandwidth (on this VM statecat measured ~1/3 slower so)",
    )
    parser.add_argument("--no-flink", action="store_true")
    parser.add_argument(
        "--work",
        type=Path,
        default=Path(tempfile.gettempdir()),
        help="where Flink's restore puts its RocksDB instances (deleted after)",
    )
    args = parser.parse_args()
    generated, status = None, 0
    if args.generate:
        # generated in a child process: the input's arrays must not count in this one's peak RSS
        child = multiprocessing.get_context("fork").Process(target=generate, args=(args.generate.resolve(), args.keys))
        child.start()
        child.join()
        if child.exitcode:
            sys.exit(f"error: generating the checkpoint failed (exit {child.exitcode})")
        snapshot, generated = generate(args.generate.resolve(), args.keys)
    elif args.snapshot:
        snapshot = args.snapshot.resolve()
    else:
        parser.error("give a snapshot directory or --generate DIR")
    if not (snapshot / "_metadata").is_file():
        parser.error(f"{snapshot} has no _metadata: give a retained checkpoint chk-N or a NATIVE savepoint")
    cpus = sorted(os.sched_getaffinity(0))
    key = args.key
    print(f"snapshot: {snapshot}")
    if generated and "shared_files" in generated:
        print(
            f"generated: {generated['keys']:,} keys from {generated['records']:,} input records in "
            f"{generated['generate_s']:.0f} s; the checkpoint's {generated['shared_files']} shared files include "
            f"{generated['shared_files_from_earlier']} uploaded by the earlier checkpoints"
        )

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
    print(
        f"snapshot bytes: {snapshot_bytes:,} ({snapshot_bytes / 1e6:.1f} MB"
        + (
            f": _metadata {ref['metadata_bytes']:,} B with {ref['inline_handle_bytes']:,} B of inline handles, "
            f"{ref['file_handles']} files of keyed handles)"
            if ref
            else ", the directory's files only)"
        )
    )
    mode = "concurrently" if args.concurrent else "one after the other"
    print(f"cores: statecat on cpu {args.statecat_cpu}, Flink on cpu {args.flink_cpu} ({mode})")

    if "error" in mine:
        print(f"statecat full scan: {mine['error']}")
    else:
        rate = mine["rows"] / mine["seconds"]
        print(
            f"statecat full scan (every keyed state, opening included): {mine['rows']:,} rows in "
            f"{mine['seconds']:.3f} s = {rate:,.0f} rows/s, {snapshot_bytes / 1e6 / mine['seconds']:.1f} MB/s of "
            f"snapshot (best of {args.repeat})"
        )
        for (op_id, state), rows in mine["per_state"].items():
            print(f"  {state} ({op_id[:8]}): {rows:,} rows")
        if generated:
            verdict = "as the input implies" if mine["rows"] == generated["keys"] else "MISMATCH: the input implies"
            print(
                f"  row count check: {mine['rows']:,} rows, {verdict} {generated['keys']:,} keys "
                f"(one row per key; the job's other states are empty)"
            )
            status = 0 if mine["rows"] == generated["keys"] else 1
        print(
            f"statecat peak resident memory: {mine['rss_scan_mb']:.0f} MB after the scans "
            f"({mine['rss_before_mb']:.0f} MB before them)"
        )
        one = mine.get("single_key")
        if one is None:
            print("single-key read: no key (the scan read no rows; give --key)")
        elif "error" in one:
            print(f"single-key read ({one['key']}): failed: {one['error']}")
        else:
            total = one["open_s"] + one["read_s"]
            print(
                f"single-key read ({one['key']} in {one['state']}): {total * 1000:.0f} ms (opening "
                f"{one['open_s'] * 1000:.0f} ms, reading {one['read_s'] * 1000:.0f} ms), {one['rows']} row(s), "
                f"{one['key_groups']} key-group(s); state bytes read {one['state_bytes_read']:,} = "
                f"{one['state_bytes_read'] / snapshot_bytes:.3%} of the snapshot; all read() calls "
                f"{one['rchar']:,} B = {one['rchar'] / snapshot_bytes:.3%}"
            )

    if ref is None:
        if not args.no_flink:
            print("Flink's restore: no figures (see above)")
        return status
    sec = ref["seconds"]
    flink_rate = ref["entries_per_s"]
    print(
        f"Flink's restore + iterate ({ref['handles']} native handles, {ref['transfer_threads']} transfer thread, "
        f"median of {args.repeat} after a warm-up): {ref['entries']:,} entries, "
        f"{ref['key_bytes'] + ref['value_bytes']:,} key+value bytes in {sec['total']:.3f} s = "
        f"{flink_rate:,.0f} entries/s (metadata {sec['metadata']:.3f} s, transfer {sec['transfer']:.3f} s, "
        f"open {sec['open']:.3f} s, iterate {sec['iterate']:.3f} s = {ref['iterate_entries_per_s']:,.0f} "
        f"entries/s); JVM peak RSS {ref['peak_rss_bytes'] / 1e6:.0f} MB"
    )
    for s in ref["states"]:
        print(f"  {s['state']} ({s['kind']}): {s['entries']:,} entries")
    for note in ref["notes"]:
        print(f"  note: {note}")
    if "error" not in mine:
        if mine["rows"] != ref["entries"]:
            print(
                f"note: statecat rows ({mine['rows']:,}) != Flink entries ({ref['entries']:,}): a LIST "
                "state's entry holds all its elements, a MAP state has one entry per user key"
            )
        print(
            f"statecat / Flink per core: {mine['rows'] / mine['seconds'] / flink_rate:.2f} "
            f"(against Flink's iteration alone: "
            f"{mine['rows'] / mine['seconds'] / ref['iterate_entries_per_s']:.2f})"
        )
    else:
        print("statecat / Flink per core: - (statecat did not read the snapshot)")
    return status


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
