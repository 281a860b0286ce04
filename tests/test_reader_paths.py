"""The reader's two decoding paths agree, and key reads touch only the key-groups they need."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from statecat.readers import SavepointReader
from statecat.readers.keygroups import key_group_for, murmur_hash
from statecat.readers.scans.scan import KeyedStateScanner
from statecat.statemeta.model import load_state_meta
from tests.acceptance import check_state_rows, find_operator
from tests.fixtures.expected import CASES, case_dir, iter_states, load_expected, savepoint_dir

EXAMPLE = "sql_groupby_hashmap_2.3"


def _keyed_states():
    for case in CASES:
        meta = load_state_meta(savepoint_dir(case))
        for op, state in meta.states():
            if state.is_keyed and state.decode_status == "full":
                yield pytest.param(case, op.id, state.name, id=f"{case}:{state.name}")


@pytest.mark.parametrize("case,operator,state", list(_keyed_states()))
def test_column_wise_and_per_record_paths_give_the_same_rows(case, operator, state):
    meta = load_state_meta(savepoint_dir(case))
    op = meta.operator(operator)
    info = op.state(state)
    fast = KeyedStateScanner(meta, op, info)
    general = KeyedStateScanner(meta, op, info)
    general.fast = None
    fast_rows = pa.Table.from_batches(list(fast.batches()), schema=fast.schema)
    general_rows = pa.Table.from_batches(list(general.batches()), schema=general.schema)
    assert fast_rows.equals(general_rows)


def test_the_column_wise_path_serves_sql_aggregates():
    meta = load_state_meta(savepoint_dir(EXAMPLE))
    op, state = meta.find_state("accState")
    assert KeyedStateScanner(meta, op, state).fast is not None


def test_single_key_read_touches_only_its_key_group():
    reader = SavepointReader(savepoint_dir(EXAMPLE))
    op, state = reader.find("accState")
    full = reader.table("accState")
    full_bytes = reader.last_stats.bytes_read
    one = reader.table("accState", keys=["key_662"])
    stats = reader.last_stats
    assert one.to_pylist() == full.filter(pc.equal(full["key"], "key_662")).to_pylist()
    assert one.num_rows == 1
    group = key_group_for("key_662", state.key, op.max_parallelism)
    location = next(
        loc for loc in state.locations if loc.start_key_group <= group < loc.start_key_group + len(loc.offsets)
    )
    start = location.offsets[group - location.start_key_group]
    later = sorted(o for o in location.offsets if o > start)
    group_bytes = (later[0] if later else location.stream.size) - start
    assert stats.key_groups == 1
    assert stats.bytes_read == group_bytes
    assert stats.bytes_read < full_bytes / 50


def test_missing_key_reads_its_key_group_and_finds_nothing():
    reader = SavepointReader(savepoint_dir(EXAMPLE))
    assert reader.table("accState", keys=["no-such-key"]).num_rows == 0
    assert reader.last_stats.key_groups <= 1


def test_flink_worked_examples_of_the_key_group_hash():
    # The format reference's examples (Flink's MathUtils.murmurHash of Java hashCodes).
    assert murmur_hash(-816673435) == 2080150784
    assert murmur_hash(119) == 1437734273
    assert murmur_hash(39) == 50510337


def _keyed_states_with_rows():
    for case in CASES:
        for op, state in iter_states(load_expected(case)):
            if state["kind"] in ("keyed", "timer") and state["rows"] and not state.get("declared_type"):
                yield pytest.param(case, op, state["name"], id=f"{case}:{state['name']}")


@pytest.mark.parametrize("case,expected_op,state", list(_keyed_states_with_rows()))
def test_key_filtered_read_equals_filtered_full_scan(case, expected_op, state):
    reader = SavepointReader(savepoint_dir(case))
    operator = find_operator(reader.meta, expected_op).id
    full = reader.table(state, operator).to_pylist()
    assert full
    key = full[len(full) // 2]["key"]
    filtered = reader.table(state, operator, keys=[key]).to_pylist()
    assert filtered == [row for row in full if row["key"] == key]
    assert reader.last_stats.key_groups == 1


def _count_window_reads(monkeypatch) -> dict:
    from statecat.readers.scans import scan

    reads = {"buffered": 0, "alone": 0}
    original = scan.WindowBuffer.read

    def counting_read(self, stream, n):
        part = original(self, stream, n)
        reads["alone" if part is None else "buffered"] += 1
        return part

    monkeypatch.setattr(scan.WindowBuffer, "read", counting_read)
    return reads


@pytest.mark.parametrize("case,operator,state", list(_keyed_states()))
def test_windows_of_a_few_key_groups_give_the_same_rows(case, operator, state, monkeypatch):
    """Tiny windows: key-groups larger than the reused window buffer are read on their own and
    joined with the buffer's ones; the rows stay those of the per-record decoders."""
    from statecat.readers.scans import scan

    meta = load_state_meta(savepoint_dir(case))
    op = meta.operator(operator)
    info = op.state(state)
    general = KeyedStateScanner(meta, op, info)
    general.fast = None
    general_rows = pa.Table.from_batches(list(general.batches()), schema=general.schema)
    monkeypatch.setattr(scan, "FAST_GROUP_BYTES", 256)
    fast = KeyedStateScanner(meta, op, info)
    assert pa.Table.from_batches(list(fast.batches()), schema=fast.schema).equals(general_rows)
    together = scan.OperatorKeyedScan([KeyedStateScanner(meta, op, info)])
    one_pass = pa.Table.from_batches([batch for _, batch in together.batches()], schema=fast.schema)
    assert one_pass.equals(general_rows)


def test_a_window_mixes_buffered_and_separately_read_key_groups(monkeypatch):
    """The example's key-groups are 368 to 1,600 bytes: with a 1,000-byte buffer some fit, some
    are read on their own, and windows hold both; the rows are still the expected ones."""
    from statecat.readers.scans import scan

    monkeypatch.setattr(scan, "FAST_GROUP_BYTES", 500)
    reads = _count_window_reads(monkeypatch)
    op, state = next((op, state) for op, state in iter_states(load_expected(EXAMPLE)) if state["name"] == "accState")
    check_state_rows(case_dir(EXAMPLE), op, state)
    assert reads["buffered"] > 0 and reads["alone"] > 0
