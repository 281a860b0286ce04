"""Re-runs one fuzz case.

    .venv/bin/python -m tests.fuzz.replay 'sql_window_2.3/_metadata@5741:set:ff'          # in a worker: the outcome
    .venv/bin/python -m tests.fuzz.replay --here 'sql_window_2.3/_metadata@5741:set:ff'   # in this process: the traceback
    .venv/bin/python -m tests.fuzz.replay --write DIR 'sql_window_2.3/_metadata@5741:set:ff'  # the damaged savepoint, for the CLI

Run from the repository root, with statecat installed in .venv.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from tests.fixtures.expected import CASES_DIR
from tests.fuzz.mutations import SELF_TEST, Case


def write_damaged(case: Case, target: Path) -> Path:
    """A copy of the case's fixture savepoint with the mutation applied."""
    shutil.copytree(CASES_DIR / case.fixture / "savepoint", target)
    path = target / case.file
    path.write_bytes(case.apply(path.read_bytes()))
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("spec", help="FIXTURE/FILE@OFFSET:KIND[:ARG], as the fuzz test prints it")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--here", action="store_true", help="decode in this process and let any exception propagate")
    mode.add_argument("--write", metavar="DIR", help="write the damaged savepoint to DIR (must not exist) and stop")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds before a worker run counts as a hang")
    args = parser.parse_args(argv)
    case = Case.parse(args.spec)
    if case.fixture != SELF_TEST:
        case.apply((CASES_DIR / case.fixture / "savepoint" / case.file).read_bytes())  # a bad offset fails here
    if args.write:
        print(write_damaged(case, Path(args.write)))
        return 0
    if args.here:
        from tests.fuzz.decode import decode_savepoint

        with tempfile.TemporaryDirectory(prefix="statecat-replay-") as scratch:
            for state, result in decode_savepoint(str(write_damaged(case, Path(scratch) / "savepoint"))).items():
                print(f"{state}: {result}")
        return 0
    from tests.fuzz.runner import FINDINGS, run_cases

    report = run_cases([case], workers=1, timeout=args.timeout)
    result = report.results[0]
    print(result.describe())
    return 1 if result.outcome in FINDINGS else 0


if __name__ == "__main__":
    sys.exit(main())
