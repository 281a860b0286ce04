"""Reading all keyed states of an operator in one pass gives each state the rows of its own scan."""

from __future__ import annotations

import pyarrow as pa
import pytest

from statecat.readers import SavepointReader
from statecat.statemeta.model import HEAP_CHECKPOINT_LAYOUT, NATIVE_ROCKSDB_LAYOUT, load_state_meta
from tests.fixtures.expected import CASES, savepoint_dir


def _operators():
    for case in CASES:
        meta = load_state_meta(savepoint_dir(case))
        for op in meta.operators:
            states = [s.name for s in op.states if s.is_keyed and s.decode_status == "full"]
            if len(states) > 1:
                yield pytest.param(case, op.id, states, id=f"{case}:{op.label}")


@pytest.mark.parametrize("case,operator,states", list(_operators()))
def test_one_pass_over_an_operator_gives_each_state_its_own_rows(case, operator, states):
    reader = SavepointReader(savepoint_dir(case))
    together = reader.operator_tables(operator, states, batch_rows=7)  # small batches: many windows
    for name in states:
        alone = reader.table(name, operator)
        assert together[name].equals(alone), name


def _savepoint_layout_operators():
    for param in _operators():
        case, operator, states = param.values
        op = load_state_meta(savepoint_dir(case)).operator(operator)
        if all(
            loc.layout not in (HEAP_CHECKPOINT_LAYOUT, NATIVE_ROCKSDB_LAYOUT)
            for name in states
            for loc in op.state(name).locations
        ):
            yield param


@pytest.mark.parametrize("case,operator,states", list(_savepoint_layout_operators()))
def test_one_pass_reads_each_key_group_once(case, operator, states):
    reader = SavepointReader(savepoint_dir(case))
    alone_bytes = 0
    for name in states:
        reader.table(name, operator)
        alone_bytes += reader.last_stats.bytes_read
    meta = reader.meta
    op = meta.operator(operator)
    from statecat.readers.scans.scan import OperatorKeyedScan, scanner_for

    scanners = [scanner_for(meta, op, op.state(name)) for name in states]
    rows = sum(batch.num_rows for _, batch in OperatorKeyedScan(scanners).batches())
    assert rows == sum(reader.table(name, operator).num_rows for name in states)
    together_bytes = sum(s.stats.bytes_read for s in scanners)
    assert together_bytes * len(states) == alone_bytes


def test_key_group_subset_and_subtasks_match_the_per_state_reads():
    case = "datastream_windows_thread_2.3"
    reader = SavepointReader(savepoint_dir(case))
    op = next(
        op for op in reader.meta.operators if sum(s.is_keyed and s.decode_status == "full" for s in op.states) > 1
    )
    states = [s.name for s in op.states if s.is_keyed and s.decode_status == "full"]
    groups = set(range(0, op.max_parallelism, 3))
    together = reader.operator_tables(op.id, states, key_groups=groups, subtasks={0})
    for name in states:
        alone = reader.table(name, op.id, key_groups=groups, subtasks={0})
        assert together[name].equals(alone)
        assert isinstance(together[name], pa.Table)
