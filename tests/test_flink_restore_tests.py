"""Flink's own restore-test savepoints as an acceptance corpus (tests/fixtures/restore_tests.py): one
savepoint per SQL execution node and variant, from the table planner's tests jar on Maven Central.

Every state of every savepoint reads whole; every part statecat shows as bytes says why; and where a
test program's input rows make a state computable, the values are checked against them (the facts
in each check are the program's, from Flink's ``*TestPrograms`` classes of the same name).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from statecat.readers import SavepointReader
from statecat.statemeta.types import TypeDescriptor
from tests.fixtures.restore_tests import RESTORE_TEST_VERSIONS, program, savepoints

pytestmark = pytest.mark.restore_tests

# Kinds statecat shows as stored bytes: each must carry its reason.
BYTES_KINDS = ("raw", "RAW")


def _bytes_parts(desc: TypeDescriptor | None) -> list[TypeDescriptor]:
    if desc is None:
        return []
    if desc.kind in BYTES_KINDS:
        return [desc]
    return [part for _, child in desc.fields for part in _bytes_parts(child)]


def _rows(savepoint: Path, state: str, operator: str | None = None) -> list[dict]:
    return SavepointReader(str(savepoint)).table(state, operator).to_pylist()


def _keyed(savepoint: Path, state: str) -> dict:
    """{key: value} of a keyed state held by one operator of the savepoint."""
    return {row["key"]: row["value"] for row in _rows(savepoint, state)}


@pytest.mark.parametrize("version", RESTORE_TEST_VERSIONS)
def test_every_state_of_every_restore_test_savepoint_reads_whole_and_says_why_for_bytes(version):
    found = savepoints(version)
    assert len(found) > 150, f"{len(found)} savepoints in the {version} restore tests"
    failures, unexplained, states = [], [], 0
    for savepoint in found:
        reader = SavepointReader(str(savepoint))
        for operator in reader.meta.operators:
            for state in operator.states:
                states += 1
                where = f"{savepoint.relative_to(savepoint.parents[2])} :: {operator.label} :: {state.name}"
                try:
                    table = reader.table(state.name, operator.id)
                except Exception as exc:  # noqa: BLE001 - every failure is listed below
                    failures.append(f"{where}: {type(exc).__name__}: {str(exc)[:300]}")
                    continue
                assert table.schema == reader.schema(state.name, operator.id), where
                for part in (state.key, state.namespace, state.user_key, state.value):
                    for shown in _bytes_parts(part):
                        if not shown.attr("reason"):
                            unexplained.append(f"{where}: {shown.describe()}")
                assert (state.decode_status == "raw") == bool(state.raw_reasons), where
    assert failures == [], f"{len(failures)} of {states} states failed:\n" + "\n".join(failures[:40])
    assert unexplained == [], "bytes without a reason:\n" + "\n".join(unexplained[:40])


def test_group_aggregate_state_holds_what_the_program_counted():
    """GroupAggregateTestPrograms.GROUP_BY_SIMPLE: SELECT b, COUNT(*), AVG(a) FILTER (WHERE a > 1),
    MIN(c) GROUP BY b over (1, 1, 'Hi'), (2, 2, 'Hello'), (2, 2, 'Hello World') before the savepoint.
    The accumulator row: count, AVG's sum and count (of a > 1 only), MIN."""
    for version in RESTORE_TEST_VERSIONS:
        state = _keyed(program(version, "stream-exec-group-aggregate_1", "group-aggregate-simple"), "accState")
        assert state == {
            1: {"f0": 1, "f1": 0, "f2": 0, "f3": "Hi"},
            2: {"f0": 2, "f1": 4, "f2": 2, "f3": "Hello"},
        }, version


def test_a_row_of_no_fields_reads_as_the_empty_tuple():
    """ROW<> is the key of an aggregate over every row and the value of an aggregate without
    aggregates: it reads as "()" (Tuple0's text), and the key view finds states keyed by it."""
    savepoint = program("2.3.0", "stream-exec-correlate_1", "correlate-with-literal-agg")
    reader = SavepointReader(str(savepoint))
    _, accumulators = reader.find("accState", "11_group-aggregate")
    assert accumulators.value.kind == "rowdata" and accumulators.value.fields == ()
    assert reader.table("accState", "11_group-aggregate").to_pylist() == [{"key": 1, "namespace": None, "value": "()"}]

    over = program("2.3.0", "stream-exec-over-aggregate_1", "over-aggregate-lag/1.18")
    rows = _rows(over, "accState")
    assert rows and {row["key"] for row in rows} == {"()"}
    shown = subprocess.run(
        [sys.executable, "-m", "statecat.catalog.cli", "key", str(over), "()", "--format", "csv"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert "accState" in shown.stdout


def test_a_map_state_of_unknown_serializers_keeps_one_row_per_key_with_entries_as_bytes():
    """A process table function's ORDER BY buffer: a MapState keyed by the table runtime's
    SortedLongSerializer, which statecat does not know: one row per key with each entry's user key and
    value as bytes, and the reason. (CEP's shared buffer, once the example here, now decodes:
    tests/test_flink_restore_decoders.py.)"""
    savepoint = program("2.3.0", "stream-exec-process-table-function_1", "process-multi-input-order-by-restore")
    reader = SavepointReader(str(savepoint))
    _, buffer = reader.find("input-sort-buffer-data-0")
    assert buffer.user_key is not None and buffer.user_key.kind == "raw"
    assert any("SortedLongSerializerSnapshot is not known to statecat" in reason for reason in buffer.raw_reasons)
    rows = reader.table("input-sort-buffer-data-0").to_pylist()
    assert rows and all(
        isinstance(key, bytes) and isinstance(value, bytes) for row in rows for key, value in row["value"]
    )
    # SortedLongSerializer writes a long with its sign bit flipped: eight bytes per user key.
    assert {len(key) for row in rows for key, _ in row["value"]} == {8}


def test_a_lag_accumulator_snapshot_is_read_to_its_end():
    """OverAggregateTestPrograms' LAG keeps a LinkedListSerializer whose snapshot (outer version 1)
    carries a null-mask flag: read, the accumulator is a row whose structured type says why it is bytes."""
    savepoint = program("2.3.0", "stream-exec-over-aggregate_1", "over-aggregate-lag/1.18")
    _, accumulators = SavepointReader(str(savepoint)).find("accState")
    assert accumulators.value.kind == "rowdata"
    assert [reason.split(":")[0] for reason in accumulators.raw_reasons] == [
        "STRUCTURED_TYPE(org.apache.flink.table.runtime.functions.aggregate.LagAggFunction$LagAcc)"
    ]


def test_dataview_placeholders_say_where_the_entries_are():
    """An accumulator's MapView is a RAW field NullSerializer writes nothing for: its reason says the
    entries are in a state of their own (here the DISTINCT aggregate's distinctAcc_0)."""
    savepoint = program("2.3.0", "stream-exec-expand_1", "expand")
    reader = SavepointReader(str(savepoint))
    with_views = [
        state
        for operator in reader.meta.operators
        for state in operator.states
        if any("DataView placeholder" in reason for reason in state.raw_reasons)
    ]
    assert with_views
    names = {state.name for operator in reader.meta.operators for state in operator.states}
    assert "distinctAcc_0" in names


def test_an_async_operators_buffer_holds_the_record_in_flight_and_encodes_back_to_its_bytes():
    """AsyncCalcTestPrograms' async-calc-failure-exception: the function fails on 2, retrying, when
    the savepoint is taken after (1), (2): the buffer (StreamElementSerializer) holds that record."""
    from statecat.readers.codecs.encoders import build_encoder

    for version in RESTORE_TEST_VERSIONS:
        savepoint = program(version, "stream-exec-async-calc_1", "async-calc-failure-exception")
        reader = SavepointReader(str(savepoint))
        _, buffer = reader.find("_async_wait_operator_state_")
        assert buffer.value.kind == "stream_element", version
        rows = reader.table("_async_wait_operator_state_").to_pylist()
        assert [(row["value"]["element"], row["value"]["value"]) for row in rows] == [("record", {"f0": 2})], version
        # The element's bytes as Flink wrote them (inline in _metadata): encoded back exactly.
        encoded = bytearray()
        build_encoder(buffer.value)(rows[0]["value"], encoded)
        assert bytes(encoded) in (savepoint / "_metadata").read_bytes(), version


def test_a_delta_joins_buffer_reads_records_and_watermarks():
    """The delta join's async-wait ListState holds (left, right, watermark, side) tuples of stream
    elements: each decodes, and each encodes back to bytes Flink wrote."""
    from statecat.readers.codecs.encoders import build_encoder

    savepoint = program("2.3.0", "stream-exec-delta-join_2", "delta-join-with-cache")
    reader = SavepointReader(str(savepoint))
    _, buffer = reader.find("_delta_join_operator_async_wait_state_")
    element = buffer.value.child("element")
    rows = reader.table("_delta_join_operator_async_wait_state_").to_pylist()
    left = sorted(entry["f0"]["value"]["f2"] for row in rows for entry in row["value"] if entry["f3"] == 0)
    assert left == ["Bob", "Sandy", "Tim"]
    assert {entry["f2"]["element"] for row in rows for entry in row["value"]} == {"watermark"}
    stored = b"".join(path.read_bytes() for path in savepoint.iterdir() if path.is_file())
    for row in rows:
        for entry in row["value"]:
            encoded = bytearray()
            build_encoder(element)(entry, encoded)
            assert bytes(encoded) in stored
