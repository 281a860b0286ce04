"""Damaged `_metadata` and headers: bounded work, typed errors naming file and offset, nothing dropped.

Every case is a copy of a real fixture with a few bytes changed at a position found by parsing
the original, so the damage lands on the field the test is about.
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest

from statecat.statemeta.errors import FormatError, StatecatError
from statecat.statemeta.files import headers
from statecat.statemeta.files.metadata import KeyGroupsHandle, read_metadata
from statecat.statemeta.files.storage import open_storage
from statecat.statemeta.model import load_state_meta
from statecat.statemeta.snapshotter.stateinfo import STATE_INFO_FILE, read_state_info, snapshot
from tests.fixtures.expected import savepoint_dir

FILE_CASE = "sql_groupby_hashmap_2.3"  # keyed state in relative files, SourceReaderState inline


def _copy(tmp_path: Path, case: str) -> Path:
    target = tmp_path / case
    shutil.copytree(savepoint_dir(case), target)
    return target


def _patch(savepoint: Path, at: int, data: bytes) -> None:
    metadata = bytearray((savepoint / "_metadata").read_bytes())
    metadata[at : at + len(data)] = data
    (savepoint / "_metadata").write_bytes(bytes(metadata))


def _key_groups_handle(savepoint: Path) -> tuple[KeyGroupsHandle, int]:
    """The first file-backed key-groups handle and where its offsets lie in ``_metadata``."""
    metadata = read_metadata(savepoint)
    handle = next(
        s.managed_keyed
        for op in metadata.operators
        for s in op.subtasks
        if isinstance(s.managed_keyed, KeyGroupsHandle) and s.managed_keyed.stream.kind == "relative"
    )
    packed = b"".join(struct.pack(">q", o) for o in handle.offsets)
    at = (savepoint / "_metadata").read_bytes().find(packed)
    assert at > 0
    return handle, at


def _reported_repro_counting_parses(tmp_path, monkeypatch) -> tuple[Path, list]:
    """The issue's header-recovery repro, and a list that grows by one per header parse."""
    savepoint = _copy(tmp_path, "sql_types_2.3")
    _patch(savepoint, 7606, bytes.fromhex("0000000100000000"))
    parses = []
    original_init = headers._HeaderParser.__init__

    def counting_init(self, *args):
        parses.append(1)
        original_init(self, *args)

    monkeypatch.setattr(headers._HeaderParser, "__init__", counting_init)
    return savepoint, parses


def test_header_recovery_is_bounded_on_the_reported_repro(tmp_path, monkeypatch):
    # The damaged bytes lie inside accState's value serializer snapshot (GroupAggregate's inline
    # keyed header). The old search re-parsed that header 20,000 times and then failed.
    savepoint, parses = _reported_repro_counting_parses(tmp_path, monkeypatch)
    meta = load_state_meta(savepoint, use_state_info=False)
    headers_in_savepoint = 8  # operator and keyed stream headers of this savepoint, one parse each
    assert len(parses) <= headers.MAX_RECOVERY_ATTEMPTS + headers_in_savepoint
    # Recovered like an unknown serializer: that state reads as bytes with the reason, the rest decodes.
    op, acc = meta.find_state("accState")
    assert acc.decode_status == "raw"
    assert any("could not read the serializer snapshot" in reason for reason in acc.raw_reasons)
    assert all(s.decode_status == "full" for s in op.states if s.name != "accState")


def test_header_recovery_gives_up_with_an_error_within_the_budget(tmp_path, monkeypatch):
    savepoint, parses = _reported_repro_counting_parses(tmp_path, monkeypatch)
    monkeypatch.setattr(headers, "RECOVERY_WORK_BYTES", 1)  # two trial parses per header at most
    with pytest.raises(FormatError, match="within 2 trial parses") as error:
        load_state_meta(savepoint, use_state_info=False)
    assert error.value.file.endswith("_metadata") and error.value.offset is not None
    assert len(parses) <= 2 + 8


def test_operator_state_entry_without_header_meta_info_is_an_error(tmp_path):
    savepoint = _copy(tmp_path, FILE_CASE)
    metadata = (savepoint / "_metadata").read_bytes()
    stream = next(
        s.managed_operator.stream
        for op in read_metadata(savepoint).operators
        for s in op.subtasks
        if s.managed_operator is not None
    )
    # The entry's name is written before its stream; the header inside the stream repeats it.
    at = metadata.rfind(b"SourceReaderState", 0, stream.offset)
    assert at > 0
    _patch(savepoint, at, b"SourceReaderStatX")
    with pytest.raises(FormatError, match="'SourceReaderStatX'.*no meta info") as error:
        load_state_meta(savepoint, use_state_info=False)
    assert error.value.file.endswith("_metadata") and error.value.offset == stream.offset


@pytest.mark.parametrize(
    "damage, message",
    [
        ("negative", "to be >= 0"),
        ("out_of_order", "increasing order"),
        ("past_end", "inside the"),
    ],
)
def test_damaged_key_group_offsets_are_errors_at_the_offsets(tmp_path, damage, message):
    savepoint = _copy(tmp_path, FILE_CASE)
    handle, at = _key_groups_handle(savepoint)
    positive = [i for i, o in enumerate(handle.offsets) if o > 0]
    i = positive[3]
    value = {"negative": -8, "out_of_order": handle.offsets[positive[1]], "past_end": handle.stream.size + 5}[damage]
    _patch(savepoint, at + 8 * i, struct.pack(">q", value))
    with pytest.raises(FormatError, match=message) as error:
        read_metadata(savepoint)
    assert error.value.file.endswith("_metadata") and error.value.offset == at + 8 * i


def test_key_group_range_beyond_max_parallelism_is_an_error(tmp_path):
    savepoint = _copy(tmp_path, FILE_CASE)
    handle, at = _key_groups_handle(savepoint)
    start_at = at - 8  # i32 start key-group, i32 count, then the offsets
    assert struct.unpack(">ii", (savepoint / "_metadata").read_bytes()[start_at:at]) == (
        handle.start_key_group,
        len(handle.offsets),
    )
    _patch(savepoint, start_at, struct.pack(">i", 100))
    with pytest.raises(FormatError, match="key-group range") as error:
        read_metadata(savepoint)
    assert error.value.offset == start_at


def test_negative_state_file_size_is_a_format_error_not_a_value_error(tmp_path):
    savepoint = _copy(tmp_path, FILE_CASE)
    handle, _ = _key_groups_handle(savepoint)
    metadata = (savepoint / "_metadata").read_bytes()
    name = handle.stream.path.rsplit("/", 1)[1].encode()
    size_at = metadata.find(name) + len(name)
    assert struct.unpack(">q", metadata[size_at : size_at + 8])[0] == handle.stream.size
    _patch(savepoint, size_at, struct.pack(">q", -3))
    with pytest.raises(FormatError, match="state file size >= 0") as error:
        load_state_meta(savepoint, use_state_info=False)
    assert error.value.offset == size_at


def test_huge_state_file_size_reads_no_more_than_the_file(tmp_path):
    savepoint = _copy(tmp_path, FILE_CASE)
    handle, at = _key_groups_handle(savepoint)
    metadata = (savepoint / "_metadata").read_bytes()
    name = handle.stream.path.rsplit("/", 1)[1].encode()
    size_at = metadata.find(name) + len(name)
    # No key-group data: the header would span the whole (claimed) 2^62-byte stream.
    _patch(savepoint, at, bytes(8 * len(handle.offsets)))
    _patch(savepoint, size_at, struct.pack(">q", 1 << 62))
    with pytest.raises(StatecatError) as error:
        load_state_meta(savepoint, use_state_info=False)
    assert isinstance(error.value, FormatError), error.value
    assert "header" in str(error.value)


def test_repeated_subtask_is_an_error(tmp_path):
    savepoint = _copy(tmp_path, FILE_CASE)
    metadata = read_metadata(savepoint)
    raw = (savepoint / "_metadata").read_bytes()
    handle, at = _key_groups_handle(savepoint)
    # The two subtasks of the keyed operator: subtask 1's index i32 precedes its (empty) operator handles.
    op = next(op for op in metadata.operators if any(s.managed_keyed is not None for s in op.subtasks))
    assert [s.index for s in op.subtasks] == [0, 1]
    second = raw.find(struct.pack(">iii", 1, 0, 0), at)  # index 1, no managed or raw operator state
    assert second > 0
    _patch(savepoint, second, struct.pack(">i", 0))
    with pytest.raises(FormatError, match="each subtask index once") as error:
        read_metadata(savepoint)
    assert error.value.offset == second


def test_state_file_streams_reject_negative_lengths_and_never_over_allocate(tmp_path):
    savepoint = _copy(tmp_path, FILE_CASE)
    storage = open_storage(str(savepoint))
    with storage.open(storage.metadata_path) as stream:
        with pytest.raises(FormatError, match="non-negative length") as error:
            stream.read(-5)
        assert error.value.file.endswith("_metadata")
        with pytest.raises(FormatError, match="position"):
            stream.seek(-1)
        stream.seek(10)
        data = stream.read(1 << 50)  # would be a MemoryError if the length were allocated
        assert len(data) == stream.file_size - 10


def test_keyed_locations_carry_the_header_state_count():
    meta = load_state_meta(savepoint_dir(FILE_CASE), use_state_info=False)
    keyed = [(s, loc) for _, s in meta.states() if s.is_keyed for loc in s.locations]
    assert keyed
    for state, location in keyed:
        header = headers.read_keyed_header(meta.storage, location.stream, list(location.offsets))
        assert location.state_count == len(header.states) > location.state_id
        assert header.states[location.state_id].name == state.name


def test_state_info_carries_the_state_count(tmp_path):
    savepoint = _copy(tmp_path, FILE_CASE)
    snapshot(savepoint)
    derived = load_state_meta(savepoint, use_state_info=False)
    assert read_state_info(savepoint=str(savepoint)) == derived


@pytest.mark.parametrize("edit", ["negative_offset", "unsorted_offsets", "string_size", "negative_inline"])
def test_damaged_state_info_numbers_are_rejected(tmp_path, edit):
    savepoint = _copy(tmp_path, FILE_CASE)
    snapshot(savepoint)
    doc = json.loads((savepoint / STATE_INFO_FILE).read_text())
    keyed = next(s["managed_keyed"] for op in doc["operators"] for s in op["handles"] if s["managed_keyed"])
    operator = next(s["managed_operator"] for op in doc["operators"] for s in op["handles"] if s["managed_operator"])
    positive = [i for i, o in enumerate(keyed["offsets"]) if o > 0]
    if edit == "negative_offset":
        keyed["offsets"][positive[0]] = -1
    elif edit == "unsorted_offsets":
        keyed["offsets"][positive[0]], keyed["offsets"][positive[1]] = (
            keyed["offsets"][positive[1]],
            keyed["offsets"][positive[0]],
        )
    elif edit == "string_size":
        keyed["stream"]["size"] = "63212"
    else:
        operator["stream"]["offset"] = -10
    (savepoint / STATE_INFO_FILE).write_text(json.dumps(doc))
    with pytest.raises(FormatError):
        read_state_info(savepoint=str(savepoint))
    # load_state_meta treats the damaged document as missing and derives the same StateMeta
    assert load_state_meta(savepoint) == load_state_meta(savepoint, use_state_info=False)


def test_nested_changelog_handles_are_an_error_not_a_recursion_error(tmp_path):
    savepoint = _copy(tmp_path, FILE_CASE)
    _, at = _key_groups_handle(savepoint)
    tag_at = at - 9  # the handle's tag byte, then i32 start and i32 count before the offsets
    metadata = (savepoint / "_metadata").read_bytes()
    assert metadata[tag_at] == 7
    # changelog handle (tag 8): start, count, size, then the number of materialized handles (1) ...
    nested = (b"\x08" + struct.pack(">iiqi", 0, 64, 0, 1)) * 5000
    (savepoint / "_metadata").write_bytes(metadata[:tag_at] + nested + metadata[tag_at:])
    with pytest.raises(FormatError, match="nested at most") as error:
        read_metadata(savepoint)
    assert error.value.file.endswith("_metadata")


def test_fifo_state_info_is_ignored_without_blocking(tmp_path):
    import os
    import subprocess
    import sys

    savepoint = _copy(tmp_path, FILE_CASE)
    os.mkfifo(savepoint / STATE_INFO_FILE)
    code = (
        "from statecat.statemeta.model import load_state_meta; import sys; "
        "print(len(load_state_meta(sys.argv[1]).operators))"
    )
    child = subprocess.run([sys.executable, "-c", code, str(savepoint)], capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr
    assert int(child.stdout) == len(read_metadata(savepoint).operators)


def test_deeply_nested_state_info_json_is_treated_as_damaged(tmp_path):
    savepoint = _copy(tmp_path, FILE_CASE)
    (savepoint / STATE_INFO_FILE).write_text("[" * 100_000 + "]" * 100_000)
    assert load_state_meta(savepoint) == load_state_meta(savepoint, use_state_info=False)


def test_state_info_naming_a_missing_operator_entry_is_damaged(tmp_path):
    savepoint = _copy(tmp_path, FILE_CASE)
    snapshot(savepoint)
    doc = json.loads((savepoint / STATE_INFO_FILE).read_text())
    location = next(
        loc
        for op in doc["operators"]
        for s in op["states"]
        for loc in s["locations"]
        if loc["handle"] == "managed_operator"
    )
    location["entry"] = "no-such-entry"
    (savepoint / STATE_INFO_FILE).write_text(json.dumps(doc))
    with pytest.raises(FormatError, match="no operator state entry"):
        read_state_info(savepoint=str(savepoint))


def test_state_info_state_id_must_be_below_the_state_count(tmp_path):
    savepoint = _copy(tmp_path, FILE_CASE)
    snapshot(savepoint)
    doc = json.loads((savepoint / STATE_INFO_FILE).read_text())
    location = next(
        loc
        for op in doc["operators"]
        for s in op["states"]
        for loc in s["locations"]
        if loc["handle"] == "managed_keyed"
    )
    location["state_id"] = location["state_count"]
    (savepoint / STATE_INFO_FILE).write_text(json.dumps(doc))
    with pytest.raises(FormatError, match="not below"):
        read_state_info(savepoint=str(savepoint))


def test_garbled_logical_type_root_makes_that_state_raw_with_the_reason(tmp_path):
    # Fuzz finding: a bit flip in "VARCHAR" inside accState's RowData snapshot reached the Arrow schema.
    savepoint = _copy(tmp_path, "sql_groupby_rocksdb_2.3")
    metadata = (savepoint / "_metadata").read_bytes()
    at = metadata.find(b"\x00\x07VARCHAR")
    assert at > 0
    _patch(savepoint, at + 5, b"\x03")  # VARCHAR -> VAR\x03HAR
    meta = load_state_meta(savepoint, use_state_info=False)
    op, acc = meta.find_state("accState")
    assert acc.decode_status == "raw"
    assert any("expected a LogicalTypeRoot" in reason for reason in acc.raw_reasons)
    assert all(s.decode_status == "full" for s in op.states if s.name != "accState")


def test_recovery_survives_forgetting_any_known_snapshot_class_on_every_fixture(monkeypatch):
    """The bounded search still recovers every header when any one class becomes unknown.

    Each state whose serializer used the forgotten class reads as raw bytes naming it; every other
    state keeps its decode status. 48 (fixture, class) combinations make a state raw today.
    """
    from statecat.statemeta.files import snapshots
    from tests.fixtures.expected import CASES

    known = dict(snapshots.COMPLEX_SNAPSHOTS)
    baseline = {case: load_state_meta(savepoint_dir(case), use_state_info=False) for case in CASES}
    affected = 0
    for forgotten in known:
        monkeypatch.setattr(snapshots, "COMPLEX_SNAPSHOTS", {k: v for k, v in known.items() if k != forgotten})
        for case in CASES:
            meta = load_state_meta(savepoint_dir(case), use_state_info=False)
            before = {(op.id, s.name): s for op, s in baseline[case].states()}
            after = {(op.id, s.name): s for op, s in meta.states()}
            assert after.keys() == before.keys(), (case, forgotten)
            for ref, state in after.items():
                # every subtask's part of every state is still found
                assert len(state.locations) == len(before[ref].locations), (case, forgotten, ref)
                if state.decode_status != before[ref].decode_status:
                    affected += 1
                    assert state.decode_status == "raw"
                    assert any(forgotten in reason for reason in state.raw_reasons), (case, forgotten, ref)
    assert affected >= 48


@pytest.mark.parametrize(
    "snapshot_class, needed",
    [
        ("org.apache.flink.api.common.typeutils.base.MapSerializerSnapshot", 2),
        ("org.apache.flink.streaming.api.operators.TimerSerializerSnapshot", 2),
        ("org.apache.flink.api.common.typeutils.base.ListSerializerSnapshot", 1),
        ("org.apache.flink.runtime.state.ttl.TtlStateFactory$TtlSerializerSnapshot", 2),
    ],
)
def test_composite_snapshot_with_too_few_nested_serializers_is_a_format_error(snapshot_class, needed):
    # Fuzz finding (atheris, target snapshot): nested[1] of a map snapshot with no nested serializers.
    from statecat.statemeta.binary import DataInput
    from statecat.statemeta.files.snapshots import COMPOSITE_MAGIC, NESTED_DELEGATE_MAGIC, SnapshotReader

    name = snapshot_class.encode()
    count_at = 4 + 2 + len(name) + 4 + 4 + 4 + 4 + 4
    data = (
        struct.pack(">iH", 2, len(name))
        + name
        + struct.pack(">iiiii", 3, COMPOSITE_MAGIC, 1, NESTED_DELEGATE_MAGIC, 1)
        + struct.pack(">i", needed - 1)
    )
    with pytest.raises(FormatError, match=f"expected {needed} nested serializer") as error:
        SnapshotReader(DataInput.of_bytes(data, "snapshot"), data, 0).top_level()
    assert error.value.offset == count_at
