"""Runs fuzz cases in a pool of worker processes and classifies each outcome.

Outcomes: ``statecat_error`` (a StatecatError where the pristine savepoint had none),
``unchanged`` (the same output as the pristine savepoint), ``value_changed`` (different rows or
values, no error), and the findings: ``crash`` (the worker died, e.g. SIGSEGV), ``hang`` (no
answer within the time limit), ``memory`` (MemoryError under the worker's address-space limit)
and ``exception`` (any other exception, including invalid Arrow output).
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from tests.fuzz.mutations import Case

REPO = Path(__file__).resolve().parents[2]
ALLOWED = ("statecat_error", "unchanged", "value_changed")
FINDINGS = ("crash", "hang", "memory", "exception")
OUTCOMES = ALLOWED + FINDINGS
DEFAULT_TIMEOUT = 10.0
DEFAULT_MEMORY = 3 << 30
# Starting a worker imports numba and decodes every pristine fixture (compiling the scan if its
# cache is cold).
STARTUP_TIMEOUT = 300.0
# How long a hung worker gets to print its stack (SIGUSR1) before it is killed.
DUMP_WAIT = 2.0
_FAULT_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')


class HarnessError(RuntimeError):
    """The fuzz harness itself could not run (a worker did not start); not a finding about statecat."""


@dataclass
class Result:
    case: Case
    outcome: str
    seconds: float
    detail: dict = field(default_factory=dict)  # type, message, frames (innermost last), signal

    @property
    def error_type(self) -> str:
        return self.detail.get("type", "")

    @property
    def source(self) -> str:
        """Where it happened in statecat's source (``readers/scans/scan.py:210``), else the innermost frame."""
        frames = self.detail.get("frames") or []
        for frame in reversed(frames):
            local = repo_path(frame)
            if local:
                return local
        # No statecat frame (e.g. the Arrow validation of the output): the harness's own line says which step.
        for frame in reversed(frames):
            if frame.startswith(f"{REPO}/tests/"):
                return frame.removeprefix(f"{REPO}/")
        return frames[-1] if frames else "?"

    @property
    def layer(self) -> str:
        top = self.source.split("/", 1)[0]
        return top if top in ("readers", "statemeta", "catalog") else "other"

    @property
    def class_key(self) -> tuple[str, str, str]:
        """Results with one key are one crash class: same outcome, exception type and raising line."""
        return self.outcome, self.error_type, self.source.split(" in ", 1)[0]

    def describe(self) -> str:
        lines = [f"[{self.outcome}{' ' + self.error_type if self.error_type else ''}] {self.case.spec}"]
        if self.detail.get("message"):
            lines.append(f"    message: {self.detail['message'][:300]}")
        frames = [repo_path(f) or f for f in (self.detail.get("frames") or [])[-6:]]
        if frames:
            lines.append("    traceback (innermost last):")
            lines.extend(f"      {f}" for f in frames)
        lines.append(f"    replay:  {replay_command(self.case)}")
        return "\n".join(lines)


def replay_command(case: Case) -> str:
    return f".venv/bin/python -m tests.fuzz.replay '{case.spec}'"


def repo_path(frame: str) -> str | None:
    """``readers/scans/scan.py:210 in _locate`` for a frame in statecat's installed or source tree."""
    match = re.search(r"/statecat/(readers|statemeta|catalog)/(.+)$", frame) or re.search(
        rf"^{re.escape(str(REPO))}/(readers|statemeta|catalog)/(.+)$", frame
    )
    return f"{match.group(1)}/{match.group(2)}" if match else None


@dataclass
class Report:
    results: list[Result]
    baseline: dict
    seconds: float
    restarts: int

    @property
    def counts(self) -> Counter:
        return Counter(r.outcome for r in self.results)

    @property
    def findings(self) -> list[Result]:
        return [r for r in self.results if r.outcome in FINDINGS]

    def classes(self) -> dict[tuple[str, str, str], list[Result]]:
        grouped: dict[tuple[str, str, str], list[Result]] = {}
        for result in self.findings:
            grouped.setdefault(result.class_key, []).append(result)
        return grouped

    def summary(self) -> str:
        counts = self.counts
        parts = ", ".join(f"{name} {counts.get(name, 0)}" for name in OUTCOMES)
        rate = len(self.results) / self.seconds if self.seconds else 0.0
        return (
            f"{len(self.results)} cases in {self.seconds:.1f} s ({rate:.0f} cases/s, {self.restarts} worker "
            f"restarts): {parts}"
        )


class WorkerProcess:
    """One ``tests.fuzz.worker`` child with its scratch directory and its stderr captured in a file."""

    def __init__(self, root: Path, memory: int):
        self.root = root
        self.memory = memory
        self.process: subprocess.Popen | None = None
        self.buffer = b""
        self.baseline: dict = {}
        self.baselines: list[dict] = []  # one per start, to check the decode is deterministic

    def start(self) -> None:
        scratch = Path(tempfile.mkdtemp(prefix="worker-", dir=self.root))
        self.stderr_path = scratch.with_suffix(".stderr")
        with open(self.stderr_path, "wb") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.fuzz.worker", str(scratch), str(self.memory)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                cwd=REPO,
            )
        self.buffer = b""
        line = self._read_line(time.monotonic() + STARTUP_TIMEOUT)
        if line is None:
            self.stop()
            raise HarnessError(f"fuzz worker did not start; its stderr ends with:\n{self._stderr_tail(0)}")
        self.baseline = json.loads(line)["baseline"]
        self.baselines.append(self.baseline)

    def run(self, case: Case, timeout: float) -> Result:
        if self.process is None:
            self.start()
        stderr_at = self.stderr_path.stat().st_size
        started = time.monotonic()
        try:
            self.process.stdin.write((case.spec + "\n").encode())
            self.process.stdin.flush()
        except BrokenPipeError:
            pass  # the worker has died; reading tells how
        line = self._read_line(started + timeout)
        seconds = time.monotonic() - started
        if line is not None:
            outcome = json.loads(line)
            if outcome["status"] == "memory":
                self.stop()  # the worker exits after a MemoryError; start the next case afresh
            return Result(case, _classify(outcome, self.baseline.get(case.fixture)), seconds, _detail(outcome))
        if not self.closed:  # still running: hung
            self.process.send_signal(signal.SIGUSR1)
            self._wait_for_dump(stderr_at)
            self.stop()
            return Result(
                case,
                "hang",
                seconds,
                {"type": f"no answer in {timeout:.0f} s", "frames": self._fault_frames(stderr_at)},
            )
        try:
            code = self.process.wait(timeout=STARTUP_TIMEOUT)  # it closed its output: it is exiting
        except subprocess.TimeoutExpired:
            self.stop()
            return Result(
                case,
                "hang",
                seconds,
                {"type": "closed its output but did not exit", "frames": self._fault_frames(stderr_at)},
            )
        self.stop()
        name = signal.Signals(-code).name if code < 0 else f"exit status {code}"
        return Result(case, "crash", seconds, {"type": name, "frames": self._fault_frames(stderr_at)})

    def stop(self) -> None:
        if self.process is not None:
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait()
            for stream in (self.process.stdin, self.process.stdout):
                try:
                    stream.close()
                except BrokenPipeError:
                    pass
            self.process = None

    def _read_line(self, deadline: float) -> bytes | None:
        """The worker's next answer, or None when the deadline passed or the worker closed its end
        (``self.closed`` tells which)."""
        fd = self.process.stdout.fileno()
        self.closed = False
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                self.closed = True
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line

    def _wait_for_dump(self, stderr_at: int) -> None:
        # Bounded wait for faulthandler's stack dump: it lands in the stderr file within milliseconds.
        deadline = time.monotonic() + DUMP_WAIT
        while time.monotonic() < deadline and not self._fault_frames(stderr_at):
            time.sleep(0.05)

    def _stderr_text(self, start: int) -> str:
        with open(self.stderr_path, "rb") as f:
            f.seek(start)
            return f.read(1 << 20).decode("utf-8", "replace")

    def _stderr_tail(self, start: int, limit: int = 2000) -> str:
        return self._stderr_text(start)[-limit:]

    def _fault_frames(self, start: int) -> list[str]:
        return fault_frames(self._stderr_text(start))


def fault_frames(text: str) -> list[str]:
    """The first thread's frames of a faulthandler dump, innermost last (like a traceback)."""
    frames: list[str] = []
    for line in text.splitlines():
        match = _FAULT_FRAME.match(line)
        if match:
            frames.append(f"{match['file']}:{match['line']} in {match['func']}")
        elif frames:
            break
    return frames[::-1]


def _classify(outcome: dict, baseline: dict | None) -> str:
    status = outcome["status"]
    if status == "statecat_error":
        return "statecat_error"
    if status in ("memory", "exception"):
        return status
    if baseline is not None and baseline.get("status") == "decoded" and outcome["states"] == baseline["states"]:
        return "unchanged"
    before = baseline.get("states", {}) if baseline else {}
    if any(v.startswith("error:") and before.get(k) != v for k, v in outcome["states"].items()):
        return "statecat_error"
    return "value_changed"


def _detail(outcome: dict) -> dict:
    return {k: v for k, v in outcome.items() if k in ("type", "message", "frames")}


def run_cases(
    cases: Iterable[Case],
    *,
    workers: int = 2,
    timeout: float = DEFAULT_TIMEOUT,
    memory: int = DEFAULT_MEMORY,
    progress: Callable[[int], None] | None = None,
) -> Report:
    """Runs every case in ``workers`` processes; the order of results follows the cases."""
    cases = list(cases)
    results: list[Result | None] = [None] * len(cases)
    next_index = iter(range(len(cases)))
    lock = threading.Lock()
    restarts = [0]
    baselines: list[dict] = []
    errors: list[BaseException] = []
    started = time.monotonic()
    done = [0]

    with tempfile.TemporaryDirectory(prefix="statecat-fuzz-") as root:

        def serve() -> None:
            worker = WorkerProcess(Path(root), memory)
            try:
                worker.start()
                while not errors:
                    with lock:
                        index = next(next_index, None)
                    if index is None:
                        return
                    results[index] = worker.run(cases[index], timeout)  # restarts a stopped worker first
                    with lock:
                        restarts[0] += worker.process is None
                        done[0] += 1
                        if progress is not None:
                            progress(done[0])
            except BaseException as error:  # noqa: BLE001 - re-raised in the caller's thread
                errors.append(error)
            finally:
                worker.stop()
                with lock:
                    baselines.extend(worker.baselines)

        threads = [threading.Thread(target=serve, daemon=True) for _ in range(max(1, workers))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    if errors:
        raise errors[0]
    if any(b != baselines[0] for b in baselines[1:]):
        raise HarnessError("workers decoded the pristine fixtures differently: the decode is not deterministic")
    return Report(
        [r for r in results if r is not None],
        baselines[0] if baselines else {},
        time.monotonic() - started,
        restarts[0],
    )


def baseline_findings(baseline: dict) -> list[str]:
    """Pristine fixtures whose decode is itself a finding (anything but a clean decode)."""
    return [
        f"{name}: {outcome['status']} {outcome.get('type', '')} {outcome.get('message', '')}"
        for name, outcome in sorted(baseline.items())
        if outcome["status"] != "decoded"
    ]
