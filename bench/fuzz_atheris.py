"""Coverage-guided fuzzing (atheris, libFuzzer) of statecat's parsers and decoders, seeded from the
fixture savepoints.

    .venv/bin/pip install '.[fuzz]'
    flock /tmp/statecat-heavy.lock .venv/bin/python bench/fuzz_atheris.py                # ≥ 1 M executions
    .venv/bin/python bench/fuzz_atheris.py --scale 0.01                                  # a short run
    .venv/bin/python bench/fuzz_atheris.py --replay records ARTIFACT                     # one input, in-process

Targets (tests/fuzz/targets.py): ``metadata`` (the _metadata parser), ``header`` (keyed and
operator stream headers), ``snapshot`` (serializer snapshots), ``records`` (the per-record
decoders) and ``columns`` (the compiled walk and the column-wise extractor). Each runs in its own
child process under libFuzzer with a per-input time limit and an address-space limit; a child that
dies (crash, timeout, out of memory) is restarted on the same growing corpus until the target's
execution budget is spent. A StatecatError is expected; any other exception, a crash, a hang or a
memory blow-up is a finding, saved as an input file under ``--artifacts``.

Prints, per target: executions, exec/s, clean decodes, statecat errors, and the count of each
kind of finding, then one line per distinct finding class with a replay command. Exits 1 when
there is any finding.
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
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# Executions per target (1.1 M in all), weighted by cost: a snapshot parse takes ~0.5 ms, a header
# parse (with unknown-serializer recovery) ~10 ms. Listed slowest first, to balance the workers.
BUDGET = {"header": 70_000, "records": 240_000, "columns": 180_000, "metadata": 130_000, "snapshot": 480_000}
FINDING_KINDS = ("crash", "hang", "memory", "exception")
ARTIFACT_KINDS = {"crash": "crash", "timeout": "hang", "oom": "memory", "slow-unit": None, "leak": "memory"}
STATUS_EVERY = 500
MAX_RESTARTS = 200


# ----------------------------------------------------------------------------- the child


def child(args) -> None:
    import atheris

    # The numba-compiled module stays uninstrumented: numba cannot compile atheris's branch hooks.
    with atheris.instrument_imports(include=["statecat"], exclude=["statecat.readers.scans.fastscan"]):
        from statecat.statemeta.errors import StatecatError
        from tests.fuzz.runner import repo_path
        from tests.fuzz.targets import Targets

    if args.memory_mb:
        limit = args.memory_mb << 20
        resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
    targets = Targets(Path(args.scratch))
    function = targets.function(args.child)
    artifacts = Path(args.artifacts)
    status = {"execs": 0, "ok": 0, "statecat_error": 0, "classes": {}}

    def write_status() -> None:
        temporary = Path(args.status + ".tmp")
        temporary.write_text(json.dumps(status))
        temporary.replace(args.status)

    def record(outcome: str, error: BaseException, data: bytes) -> None:
        frames = traceback.extract_tb(error.__traceback__)
        located = [repo_path(f"{f.filename}:{f.lineno} in {f.name}") for f in frames]
        source = next(
            (f for f in reversed(located) if f), f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"
        )
        kind = f"{type(error).__module__}.{type(error).__qualname__}".removeprefix("builtins.")
        key = f"{outcome}|{kind}|{source.split(' in ')[0]}"
        found = status["classes"].setdefault(key, {"count": 0})
        found["count"] += 1
        if "example" not in found:
            example = artifacts / f"{args.child}-{outcome}-{os.getpid()}-{len(status['classes'])}"
            example.write_bytes(data)
            found.update(
                example=str(example),
                message=str(error)[:300],
                frames=[f or f"{x.filename}:{x.lineno} in {x.name}" for f, x in zip(located, frames)][-6:],
            )
        write_status()

    def test_one_input(data: bytes) -> None:
        status["execs"] += 1
        try:
            function(data)
            status["ok"] += 1
        except StatecatError:
            status["statecat_error"] += 1
        except MemoryError as error:
            record("memory", error, data)
        except Exception as error:  # noqa: BLE001 - anything but a StatecatError is a finding
            record("exception", error, data)
        if status["execs"] % STATUS_EVERY == 0 or status["execs"] >= args.runs:
            write_status()

    write_status()
    atheris.Setup(
        [
            sys.argv[0],
            f"-runs={args.runs}",
            f"-timeout={int(args.timeout)}",
            f"-rss_limit_mb={args.memory_mb}",
            f"-malloc_limit_mb={args.memory_mb}",
            f"-max_len={args.max_len}",
            f"-artifact_prefix={artifacts}/{args.child}-",
            "-print_final_stats=1",
            args.corpus,
        ],
        test_one_input,
    )
    atheris.Fuzz()


# ----------------------------------------------------------------------------- the parent


def fuzz_target(name: str, runs: int, work: Path, args) -> dict:
    """Runs one target to ``runs`` executions, restarting its child after each crash/timeout/OOM."""
    from tests.fuzz.runner import repo_path
    from tests.fuzz.targets import Targets

    corpus = work / name / "corpus"
    corpus.mkdir(parents=True)
    artifacts = Path(args.artifacts)
    scratch = work / name / "scratch"
    seeds = Targets(scratch).seeds[name]
    for i, seed in enumerate(seeds):
        (corpus / f"seed-{i:05d}").write_bytes(seed)
    max_len = max(len(s) for s in seeds) * 2
    totals = {
        "target": name,
        "seeds": len(seeds),
        "execs": 0,
        "ok": 0,
        "statecat_error": 0,
        "classes": {},
        "restarts": 0,
        "seconds": 0.0,
    }
    started = time.monotonic()
    log = work / name / "child.log"
    while totals["execs"] < runs and totals["restarts"] <= MAX_RESTARTS:
        status_file = work / name / "status.json"
        before = set(artifacts.iterdir())
        command = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--child",
            name,
            "--runs",
            str(runs - totals["execs"]),
            "--corpus",
            str(corpus),
            "--artifacts",
            str(artifacts),
            "--status",
            str(status_file),
            "--scratch",
            str(scratch),
            "--timeout",
            str(args.timeout),
            "--memory-mb",
            str(args.memory_mb),
            "--max-len",
            str(max_len),
        ]
        with open(log, "ab") as output:
            code = subprocess.run(command, stdout=output, stderr=output, cwd=REPO).returncode
        status = json.loads(status_file.read_text()) if status_file.exists() else {"execs": 0}
        status_file.unlink(missing_ok=True)
        totals["execs"] += status.get("execs", 0)
        totals["ok"] += status.get("ok", 0)
        totals["statecat_error"] += status.get("statecat_error", 0)
        for key, found in status.get("classes", {}).items():
            merged = totals["classes"].setdefault(key, {"count": 0})
            merged["count"] += found["count"]
            for field in ("example", "message", "frames"):
                merged.setdefault(field, found.get(field))
        new = sorted(a for a in set(artifacts.iterdir()) - before if a.name.startswith(f"{name}-"))
        for artifact in new:
            prefix = artifact.name.removeprefix(f"{name}-").split("-", 1)[0]
            outcome = ARTIFACT_KINDS.get(prefix)
            if outcome is None:
                continue
            frames = _replay_frames(name, artifact) if outcome == "crash" else []
            source = next((repo_path(f) for f in reversed(frames) if repo_path(f)), "?")
            merged = totals["classes"].setdefault(f"{outcome}|{prefix}|{source.split(' in ')[0]}", {"count": 0})
            merged["count"] += 1
            merged.setdefault("example", str(artifact))
            merged.setdefault("frames", frames[-6:])
            totals["execs"] += 1  # the input that killed the child was run, and not counted by it
        if code != 0:
            totals["restarts"] += 1
            if not new and status.get("execs", 0) == 0:
                raise RuntimeError(
                    f"the {name} fuzz child failed before running anything; see {log}:\n"
                    + log.read_text(errors="replace")[-3000:]
                )
    totals["seconds"] = time.monotonic() - started
    return totals


def _replay_frames(name: str, artifact: Path) -> list[str]:
    """Where a crashing input dies: its Python stack from faulthandler, replayed in a fresh process."""
    from tests.fuzz.runner import fault_frames

    try:
        done = subprocess.run(
            [sys.executable, "-X", "faulthandler", str(Path(__file__).resolve()), "--replay", name, str(artifact)],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=REPO,
        )
    except subprocess.TimeoutExpired:
        return []
    return fault_frames(done.stderr)


def replay(name: str, path: str) -> None:
    from tests.fuzz.targets import Targets

    with tempfile.TemporaryDirectory(prefix="statecat-atheris-replay-") as scratch:
        result = Targets(Path(scratch)).function(name)(Path(path).read_bytes())
        print(f"{name}: returned {result!r:.300}")


def report(results: list[dict]) -> int:
    print(
        f"{'target':<10} {'seeds':>6} {'executions':>11} {'exec/s':>8} {'ok':>9} {'statecat':>9} "
        + " ".join(f"{k:>9}" for k in FINDING_KINDS)
        + "  restarts"
    )
    total_execs = total_findings = 0
    for r in results:
        kinds = dict.fromkeys(FINDING_KINDS, 0)
        for key, found in r["classes"].items():
            kinds[key.split("|")[0]] += found["count"]
        total_execs += r["execs"]
        total_findings += sum(kinds.values())
        rate = r["execs"] / r["seconds"] if r["seconds"] else 0
        print(
            f"{r['target']:<10} {r['seeds']:>6} {r['execs']:>11,} {rate:>8.0f} {r['ok']:>9,} {r['statecat_error']:>9,} "
            + " ".join(f"{kinds[k]:>9,}" for k in FINDING_KINDS)
            + f"  {r['restarts']:>8}"
        )
    print(f"total: {total_execs:,} executions, {total_findings} findings")
    for r in results:
        for key, found in sorted(r["classes"].items(), key=lambda item: -item[1]["count"]):
            outcome, kind, source = key.split("|")
            print(
                f"  {r['target']}: {found['count']} x {outcome} {kind} at {source}: {(found.get('message') or '')[:160]}"
            )
            for frame in found.get("frames") or []:
                print(f"      {frame}")
            print(f"      replay: .venv/bin/python bench/fuzz_atheris.py --replay {r['target']} {found.get('example')}")
    return 1 if total_findings else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--targets", default=",".join(BUDGET), help="comma-separated subset of " + ",".join(BUDGET))
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies every target's execution budget")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2, help="targets fuzzed at once")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per input before it counts as a hang")
    parser.add_argument("--memory-mb", type=int, default=3072, help="address-space limit of each child")
    parser.add_argument("--artifacts", help="where finding inputs are kept (default: a new directory under /tmp)")
    parser.add_argument("--replay", nargs=2, metavar=("TARGET", "FILE"), help="run one input in this process")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    for hidden in ("--runs", "--corpus", "--status", "--scratch", "--max-len"):
        parser.add_argument(hidden, help=argparse.SUPPRESS, type=int if hidden in ("--runs", "--max-len") else str)
    args = parser.parse_args()
    if args.child:
        child(args)
        return 0
    if args.replay:
        replay(*args.replay)
        return 0
    names = [n for n in args.targets.split(",") if n]
    unknown = set(names) - set(BUDGET)
    if unknown:
        parser.error(f"unknown targets {sorted(unknown)}; known: {', '.join(BUDGET)}")
    args.artifacts = args.artifacts or tempfile.mkdtemp(prefix="statecat-atheris-findings-")
    Path(args.artifacts).mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="statecat-atheris-") as work:
        with ThreadPoolExecutor(max_workers=max(1, args.workers)) as pool:
            futures = [
                pool.submit(fuzz_target, n, max(1, int(BUDGET[n] * args.scale)), Path(work), args) for n in names
            ]
            results = [f.result() for f in futures]
    print(
        f"atheris run: {time.monotonic() - started:.0f} s wall, {args.workers} targets at a time, "
        f"timeout {args.timeout:.0f} s, memory limit {args.memory_mb} MB; finding inputs in {args.artifacts}"
    )
    code = report(results)
    if not any(Path(args.artifacts).iterdir()):
        os.rmdir(args.artifacts)
    return code


if __name__ == "__main__":
    sys.exit(main())
