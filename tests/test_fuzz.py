"""Seeded mutation fuzzing of every fixture savepoint: damage gives a statecat error, never a crash.

Each case damages one file of a real fixture savepoint once (bit flip, byte overwrite, huge
length, truncation, insertion, deletion) and decodes all of it in a worker process, under a time
and an address-space limit. A statecat error, unchanged output and changed values are allowed;
a crash, a hang, a memory blow-up or any other exception (invalid Arrow output included) fails
the test, which prints every such case with a command that replays it.

STATECAT_FUZZ_CASES (default 2000), STATECAT_FUZZ_SEED (12), STATECAT_FUZZ_TIMEOUT (seconds per
case) and STATECAT_FUZZ_WORKERS size a longer run; bench/fuzz_mutations.py runs campaigns.
"""

from __future__ import annotations

import os
from collections import Counter

import pytest

from tests.fuzz.mutations import BASELINE, METADATA, SELF_TEST, Case, fixture_names, generate
from tests.fuzz.runner import DEFAULT_TIMEOUT, baseline_findings, replay_command, run_cases

pytestmark = pytest.mark.fuzz

CASES = int(os.environ.get("STATECAT_FUZZ_CASES", "2000"))
SEED = int(os.environ.get("STATECAT_FUZZ_SEED", "12"))
TIMEOUT = float(os.environ.get("STATECAT_FUZZ_TIMEOUT", str(DEFAULT_TIMEOUT)))
WORKERS = int(os.environ.get("STATECAT_FUZZ_WORKERS", str(os.cpu_count() or 2)))


def test_harness_tells_crash_hang_memory_and_exception_apart():
    fixture = fixture_names()[0]
    cases = [Case(SELF_TEST, "-", 0, kind) for kind in ("segv", "hang", "memory", "raise")]
    cases += [Case(fixture, METADATA, 0, BASELINE), Case(fixture, METADATA, 0, "truncate")]
    report = run_cases(cases, workers=2, timeout=3.0)
    assert [r.outcome for r in report.results] == [
        "crash",
        "hang",
        "memory",
        "exception",
        "unchanged",
        "statecat_error",
    ]
    assert report.results[0].error_type == "SIGSEGV"
    assert report.results[3].error_type == "IndexError"
    assert report.results[3].source.startswith("tests/fuzz/worker.py:")  # where it was raised, for the report


def test_generated_cases_cover_every_fixture_and_every_mutation_kind():
    cases = generate(SEED, CASES)
    assert {c.fixture for c in cases} == set(fixture_names())
    assert {c.kind for c in cases} == {"flip", "set", "len", "truncate", "insert", "delete"}
    assert any(c.file == METADATA for c in cases) and any(c.file != METADATA for c in cases)
    assert generate(SEED, 50) == cases[:50]  # a longer run extends a shorter one


def test_damaged_savepoints_give_statecat_errors_never_crashes():
    cases = generate(SEED, CASES)
    report = run_cases(cases, workers=WORKERS, timeout=TIMEOUT)
    print(report.summary())
    assert len(report.results) == len(cases)
    problems = [f"pristine fixture: {line}" for line in baseline_findings(report.baseline)]
    for (outcome, error_type, source), results in sorted(report.classes().items(), key=lambda i: -len(i[1])):
        problems.append(f"\n{len(results)} x {outcome} {error_type} at {source}; the first in full:")
        problems.append(results[0].describe())
        problems.extend(f"  {r.case.spec}" for r in results)
    if problems:
        first = report.findings[0].case if report.findings else None
        replay = f"\nReplay one: {replay_command(first)} (--here for the traceback)" if first else ""
        pytest.fail(f"{report.summary()}\n" + "\n".join(problems) + replay, pytrace=False)
    counts = Counter(r.outcome for r in report.results)
    # Not vacuous: the damage is seen (errors) and the decode runs to the end (values) in many cases.
    assert counts["statecat_error"] > len(cases) // 10
    assert counts["unchanged"] + counts["value_changed"] > len(cases) // 10


def test_coverage_guided_targets_decode_their_real_seeds(tmp_path):
    """bench/fuzz_atheris.py's targets stay wired to the current code: every seed (real fixture bytes) decodes."""
    from tests.fuzz.targets import TARGETS, Targets

    targets = Targets(tmp_path)
    assert len(targets.records_states) > 50 and targets.columns_states
    for name in TARGETS:
        function = targets.function(name)
        assert len(targets.seeds[name]) >= len(fixture_names()) or name == "columns", name
        for seed in targets.seeds[name]:
            function(seed)
