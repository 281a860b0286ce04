"""Every committed real-Flink fixture reads back exactly as its job's input says it must."""

from __future__ import annotations

import pytest

from tests.acceptance import check_inspect, check_key_groups, check_state_rows
from tests.fixtures.expected import CASES, case_dir, iter_states, load_expected
from tests.fixtures.matrix_kinds import READER_GAPS as MATRIX_READER_GAPS


def _gap_marks(case, state_name):
    # the Java type matrix's known reader gaps (matrix_kinds.READER_GAPS): strict xfails
    gap = MATRIX_READER_GAPS.get(state_name) if case.startswith("java_type_matrix_") else None
    return [pytest.mark.xfail(strict=True, reason=gap)] if gap else []


STATE_CASES = [
    pytest.param(case, op, state, id=f"{case}:{state['name']}", marks=_gap_marks(case, state["name"]))
    for case in CASES
    for op, state in iter_states(load_expected(case))
]


def test_corpus_is_present():
    assert len(CASES) >= 6


@pytest.mark.parametrize("case", CASES)
def test_inspect_lists_expected_operators_and_states(case):
    check_inspect(case_dir(case), load_expected(case))


@pytest.mark.parametrize("case,operator,state", STATE_CASES)
def test_state_decodes_to_expected_rows(case, operator, state):
    check_state_rows(case_dir(case), operator, state)


@pytest.mark.parametrize("case", CASES)
def test_every_key_is_in_the_key_group_flink_assigns(case):
    expected = load_expected(case)
    has_keyed_rows = any(s["kind"] in ("keyed", "timer") and s["rows"] for _, s in iter_states(expected))
    checked = check_key_groups(case_dir(case))
    assert checked > 0 or not has_keyed_rows
