"""A fuzz worker: a child process that decodes mutated savepoints in a loop.

    python -m tests.fuzz.worker SCRATCH_DIR MEMORY_BYTES

Reads one case spec per line on stdin and answers each with one JSON line on the file descriptor
that was its stdout (its own prints go to stderr). Importing numba and loading the compiled scan
costs about a second, so one process serves many cases; the parent restarts it after a crash, a
hang or a memory blow-up. The first line it writes carries the baseline (unmutated) decode of
every fixture, which also warms up the compiled code before any case is timed.

Runs under an address-space limit (RLIMIT_AS), so an allocation sized by a garbled length fails
as MemoryError instead of taking the machine's memory. faulthandler prints the Python stack on a
crash and on SIGUSR1 (sent by the parent before it kills a hung worker).
"""

from __future__ import annotations

import faulthandler
import json
import os
import resource
import shutil
import signal
import sys
import threading
import traceback
from pathlib import Path

from statecat.statemeta.errors import StatecatError
from tests.fixtures.expected import CASES_DIR
from tests.fuzz.decode import decode_savepoint
from tests.fuzz.mutations import BASELINE, METADATA, SELF_TEST, Case, fixture_names

MESSAGE_LIMIT = 600
TRACEBACK_FRAMES = 12


class Worker:
    def __init__(self, scratch: Path):
        self.scratch = scratch
        self.originals: dict[tuple[str, str], bytes] = {}

    def savepoint(self, fixture: str) -> Path:
        """The worker's own copy of a fixture's savepoint (copied once, restored after every case)."""
        target = self.scratch / fixture
        if not target.exists():
            shutil.copytree(CASES_DIR / fixture / "savepoint", target)
        return target

    def run(self, case: Case) -> dict:
        if case.fixture == SELF_TEST:
            return self._outcome(lambda: _self_test(case.kind))
        directory = self.savepoint(case.fixture)
        target = directory / case.file
        key = (case.fixture, case.file)
        if key not in self.originals:
            self.originals[key] = (CASES_DIR / case.fixture / "savepoint" / case.file).read_bytes()
        original = self.originals[key]
        mutated = case.apply(original)
        if mutated != original:
            target.write_bytes(mutated)
        try:
            return self._outcome(lambda: decode_savepoint(str(directory)))
        finally:
            if mutated != original:
                target.write_bytes(original)

    @staticmethod
    def _outcome(decode) -> dict:
        try:
            return {"status": "decoded", "states": decode()}
        except StatecatError as error:
            return {"status": "statecat_error", "type": type(error).__name__, "message": str(error)[:MESSAGE_LIMIT]}
        except MemoryError as error:
            return {"status": "memory", **_describe(error)}
        except Exception as error:  # noqa: BLE001 - anything but a StatecatError is a finding
            return {"status": "exception", **_describe(error)}


def _describe(error: BaseException) -> dict:
    frames = traceback.extract_tb(error.__traceback__)
    return {
        "type": f"{type(error).__module__}.{type(error).__qualname__}".removeprefix("builtins."),
        "message": str(error)[:MESSAGE_LIMIT],
        "frames": [f"{f.filename}:{f.lineno} in {f.name}" for f in frames[-TRACEBACK_FRAMES:]],
    }


def _self_test(kind: str):
    if kind == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    if kind == "hang":
        threading.Event().wait()
    if kind == "memory":
        return bytearray(1 << 40)
    if kind == "raise":
        raise IndexError("self-test exception")
    raise ValueError(f"unknown self-test {kind!r}")


def main(argv: list[str]) -> None:
    scratch, memory = Path(argv[0]), int(argv[1])
    results = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    faulthandler.enable()
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    if memory > 0:
        resource.setrlimit(resource.RLIMIT_AS, (memory, resource.getrlimit(resource.RLIMIT_AS)[1]))
    worker = Worker(scratch)
    baseline = {name: worker.run(Case(name, METADATA, 0, BASELINE)) for name in fixture_names()}
    results.write(json.dumps({"ready": os.getpid(), "baseline": baseline}) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        outcome = worker.run(Case.parse(line))
        results.write(json.dumps(outcome) + "\n")
        if outcome["status"] == "memory":
            break  # a process that ran out of memory may be left half-broken: start afresh


if __name__ == "__main__":
    main(sys.argv[1:])
