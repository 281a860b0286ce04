"""Regenerates every committed fixture with live Flink (PyFlink in its own virtualenv, created
on first use by tests/fixtures/generate.py) and holds the fresh savepoints to the committed
ground truth.

Hook for reader tests: the session fixture `regenerated_case(case)` returns the directory of the
fresh case (generated once per session), laid out like tests/fixtures/cases/<case>/.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from tests.fixtures import generate, verify
from tests.fixtures.expected import CASES, is_successive, load_expected, phases, savepoint_dir
from tests.fixtures.savepoint_probe import MAGIC

pytestmark = pytest.mark.live_flink


@pytest.fixture(scope="session")
def regenerated_case():
    # Not tmp_path: pytest keeps those after the run; fresh savepoints are scratch.
    out = Path(tempfile.mkdtemp(prefix="statecat-regenerated-"))
    done = {}

    def get(case):
        # One Flink job at a time: cases are generated lazily, one after the other.
        if case not in done:
            done[case] = generate.generate_case(case, out)
        return done[case]

    yield get
    shutil.rmtree(out, ignore_errors=True)


@pytest.mark.parametrize("case", CASES)
def test_regenerated_case_matches_committed(case, regenerated_case):
    fresh = regenerated_case(case)
    # (a) the ground truth is deterministic: same input, same expected.json (Flink 1.15 checkpoints
    # periodically, so which checkpoint ids a successive case keeps differs from run to run)
    assert _without_checkpoint_ids(load_expected(fresh)) == _without_checkpoint_ids(load_expected(case))
    # (b) magic and the metadata version of the Flink release
    head = (savepoint_dir(fresh) / "_metadata").read_bytes()[:8]
    assert int.from_bytes(head[:4], "big") == MAGIC
    assert int.from_bytes(head[4:], "big") == load_expected(case)["metadata_version"]
    # (c) operators (uid/name, parallelism), state names, raw strings, inline/file handles
    assert verify.check_case(fresh) == []


@pytest.mark.parametrize("case", CASES)
def test_statecat_reads_the_fresh_savepoint(case, regenerated_case):
    """The readers hold the freshly written bytes to the ground truth, state by state."""
    from tests.acceptance import check_inspect, check_key_groups, check_state_rows
    from tests.fixtures.expected import iter_states

    fresh = regenerated_case(case)
    expected = load_expected(fresh)
    check_inspect(fresh, expected)
    for operator, state in iter_states(expected):
        check_state_rows(fresh, operator, state)
    check_key_groups(fresh)
    if is_successive(fresh):
        # every phase's retained incremental checkpoint, read natively from its SST files
        for phase in phases(fresh):
            for operator, state in iter_states(phase["expected"]):
                check_state_rows(phase["checkpoint"], operator, state)


def _without_checkpoint_ids(expected: dict) -> dict:
    if expected.get("flink_version", "").startswith("1.15") and "phases" in expected:
        expected = {
            **expected,
            "params": {k: v for k, v in expected["params"].items() if k != "checkpoint_ids"},
            "phases": [{k: v for k, v in p.items() if k != "checkpoint"} for p in expected["phases"]],
        }
    return expected
