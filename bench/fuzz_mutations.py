"""A mutation fuzz campaign over every fixture savepoint: outcome counts and the distinct findings.

    flock /tmp/statecat-heavy.lock .venv/bin/python bench/fuzz_mutations.py [--cases 100000] [--seed 12]

The same cases, workers and classification as tests/test_fuzz.py (which runs the first few
thousand of seed 12 in CI), for as many cases as asked. Prints cases/s, the count of each outcome,
and one line per distinct finding class (outcome, exception type, raising source line) with its
number of cases and the smallest reproduction; ``--details`` prints every finding in full.
Exits 1 when there is any finding.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.fuzz.mutations import generate  # noqa: E402
from tests.fuzz.runner import (  # noqa: E402
    DEFAULT_MEMORY,
    DEFAULT_TIMEOUT,
    baseline_findings,
    replay_command,
    run_cases,
)

DEFAULT_SEED = 12  # issue 12: the seed of the CI run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--first", type=int, default=0, help="skip the cases before this index")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds per case before a hang")
    parser.add_argument("--memory-mb", type=int, default=DEFAULT_MEMORY >> 20, help="address-space limit per worker")
    parser.add_argument("--details", action="store_true", help="print every finding with its traceback")
    args = parser.parse_args()

    cases = generate(args.seed, args.first + args.cases)[args.first :]
    step = max(1, len(cases) // 20)

    def progress(done: int) -> None:
        if done % step == 0:
            print(f"  {done}/{len(cases)}", file=sys.stderr, flush=True)

    report = run_cases(
        cases, workers=args.workers, timeout=args.timeout, memory=args.memory_mb << 20, progress=progress
    )
    print(f"seed {args.seed}, cases {args.first}..{args.first + args.cases - 1}: {report.summary()}")
    for line in baseline_findings(report.baseline):
        print(f"PRISTINE FIXTURE FINDING: {line}")
    classes = sorted(report.classes().items(), key=lambda item: (item[1][0].layer, -len(item[1]), item[0]))
    print(f"{len(classes)} distinct finding classes")
    for (outcome, error_type, source), results in classes:
        smallest = min(results, key=lambda r: (r.case.kind != "flip", r.case.spec))
        print(f"  {results[0].layer:<9} {len(results):5d} x {outcome} {error_type} at {source}")
        print(f"          e.g. {smallest.case.spec}  ({(smallest.detail.get('message') or '')[:160]})")
        print(f"          {replay_command(smallest.case)}")
    if args.details:
        for result in report.findings:
            print(result.describe())
    return 1 if report.findings or baseline_findings(report.baseline) else 0


if __name__ == "__main__":
    sys.exit(main())
