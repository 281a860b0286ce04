"""A serializer statecat does not know makes its states raw bytes with a reason; the rest still reads.

The savepoints are real; the unknown class is simulated by removing statecat's knowledge of one
snapshot class, which exercises exactly the path a custom or Kryo serializer takes.
"""

from __future__ import annotations

import pytest

from statecat.readers import SavepointReader
from statecat.statemeta.files import snapshots
from statecat.statemeta.model import load_state_meta
from tests.acceptance import check_state_rows
from tests.fixtures.expected import case_dir, iter_states, load_expected, savepoint_dir

TIMER_SNAPSHOT = "org.apache.flink.streaming.api.operators.TimerSerializerSnapshot"
DECIMAL_SNAPSHOT = "org.apache.flink.table.runtime.typeutils.DecimalDataSerializer$DecimalSerializerSnapshot"


@pytest.fixture
def forget(monkeypatch):
    def forget_class(name: str) -> None:
        registry = dict(snapshots.COMPLEX_SNAPSHOTS)
        del registry[name]
        monkeypatch.setattr(snapshots, "COMPLEX_SNAPSHOTS", registry)

    return forget_class


def test_unknown_timer_serializer_leaves_other_states_readable(forget):
    forget(TIMER_SNAPSHOT)
    case = "sql_window_2.3"
    meta = load_state_meta(savepoint_dir(case))
    timers = [s for _, s in meta.states() if s.kind == "timer"]
    assert timers
    for state in timers:
        assert state.decode_status == "raw"
        assert any(TIMER_SNAPSHOT in reason and "not known to statecat" in reason for reason in state.raw_reasons)
    expected = load_expected(case)
    for op, state in iter_states(expected):
        if state["kind"] != "timer":
            check_state_rows(case_dir(case), op, state)


def test_unknown_serializer_state_reads_as_bytes_with_reason(forget):
    forget(TIMER_SNAPSHOT)
    reader = SavepointReader(savepoint_dir("sql_window_2.3"))
    op, state = reader.find("_timer_state/event_window-timers")
    table = reader.table(state.name, op.id)
    expected = next(s for _, s in iter_states(load_expected("sql_window_2.3")) if s["name"] == state.name)
    assert table.num_rows == len(expected["rows"])
    assert str(table.schema.field("value").type) == "binary"


def test_unknown_nested_serializer_inside_known_composite_is_recovered(forget):
    # The header of a keyed stream must be parsed past the unknown class to reach later states.
    forget(TIMER_SNAPSHOT)
    meta = load_state_meta(savepoint_dir("sql_groupby_hashmap_2.3"))
    op, acc = meta.find_state("accState")
    assert acc.decode_status == "full"
    assert {s.name for s in op.states} == {
        "accState",
        "_timer_state/event_user-timers",
        "_timer_state/processing_user-timers",
    }
