"""Heap (hashmap) backend retained checkpoints: Flink's HeapSnapshotStrategy key-group layout.

Ground truth is each case's expected.json (computed from the job's input); the damage tests
change real checkpoint bytes and expect a FormatError naming the file and the offset.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import struct
from pathlib import Path

import cramjam
import pytest

from statecat.readers import SavepointReader
from statecat.readers.keygroups import key_group_for
from statecat.statemeta.errors import FormatError, UnsupportedError
from statecat.statemeta.files.headers import read_keyed_header
from statecat.statemeta.files.metadata import FileStream, InlineStream, KeyGroupsHandle, read_metadata
from statecat.statemeta.files.storage import open_storage
from statecat.statemeta.model import StateMeta, key_group_layout, load_state_meta
from statecat.statemeta.snapshotter.stateinfo import from_state_info, to_state_info
from tests.acceptance import canonical, check_state_rows, find_operator
from tests.fixtures.expected import CASES, case_dir, iter_states, load_expected, savepoint_dir

CHECKPOINT_CASES = [
    c for c in CASES if load_expected(c)["savepoint_format"] is None and load_expected(c)["backend"] == "hashmap"
]
GROUPBY_CASE = "sql_groupby_checkpoint_hashmap_2.3"


def _keyed_states(case):
    return [(op, st) for op, st in iter_states(load_expected(case)) if st["kind"] in ("keyed", "timer")]


def test_checkpoint_cases_are_committed():
    assert GROUPBY_CASE in CHECKPOINT_CASES
    assert any(load_expected(c)["job"] == "datastream_keyed" for c in CHECKPOINT_CASES), CHECKPOINT_CASES


@pytest.mark.parametrize("case", CHECKPOINT_CASES)
def test_checkpoint_keyed_state_is_read_not_refused(case):
    meta = load_state_meta(savepoint_dir(case), use_state_info=False)
    assert meta.metadata.checkpoint_type == "Checkpoint"
    keyed = [(op, st) for op, st in meta.states() if st.is_keyed]
    assert keyed
    for op, st in keyed:
        assert not op.unsupported, op.unsupported
        assert {loc.layout for loc in st.locations} == {"heap_checkpoint"}, st.name
    # every keyed state expected.json names is there, with rows (timers of the DataStream job too)
    expected = _keyed_states(case)
    assert expected and all(st["rows"] is not None for _, st in expected)


@pytest.mark.parametrize(
    "case,operator,state",
    [
        pytest.param(case, op, st, id=f"{case}:{st['name']}")
        for case in CHECKPOINT_CASES
        for op, st in _keyed_states(case)
    ],
)
def test_every_keyed_state_decodes_to_expected(case, operator, state):
    check_state_rows(case_dir(case), operator, state)


@pytest.mark.parametrize("case", CHECKPOINT_CASES)
def test_state_info_keeps_the_layout(case):
    """A stateInfo written for a checkpoint records the layout and reads back the same rows."""
    storage = open_storage(str(savepoint_dir(case)))
    meta = load_state_meta(storage, use_state_info=False)
    doc = to_state_info(meta)
    layouts = {
        loc.get("layout")
        for op in doc["operators"]
        for st in op["states"]
        for loc in st["locations"]
        if loc.get("handle") == "managed_keyed"
    }
    assert layouts == {"heap_checkpoint"}
    again = from_state_info(doc, storage)
    for op, st in meta.states():
        if st.is_keyed:
            op2, st2 = again.find_state(st.name, op.id)
            assert st2.locations == st.locations
            rows = SavepointReader(again).table(st.name, op.id).to_pylist()
            assert rows == SavepointReader(meta).table(st.name, op.id).to_pylist()


def test_savepoint_documents_carry_no_layout_field():
    """Savepoints keep the canonical layout, and their stateInfo documents stay as before."""
    case = "sql_groupby_hashmap_2.3"
    meta = load_state_meta(savepoint_dir(case), use_state_info=False)
    assert {loc.layout for _, st in meta.states() if st.is_keyed for loc in st.locations} == {"canonical"}
    doc = to_state_info(meta)
    assert not any("layout" in loc for op in doc["operators"] for st in op["states"] for loc in st["locations"])


def test_tag_12_handles_in_the_savepoint_layout_stay_canonical():
    """Flink 1.15 wrote full RocksDB checkpoints as tag-12 handles in the savepoint layout."""
    storage = open_storage(str(savepoint_dir("sql_groupby_rocksdb_2.3")))
    for op in read_metadata(storage).operators:
        for subtask in op.subtasks:
            if isinstance(subtask.managed_keyed, KeyGroupsHandle):
                as_checkpoint = dataclasses.replace(subtask.managed_keyed, kind="checkpoint")
                assert key_group_layout(storage, as_checkpoint) == "canonical"


# --------------------------------------------------------------------------- key pruning


def _expected_rows(case, state_name):
    return next(st["rows"] for _, st in iter_states(load_expected(case)) if st["name"] == state_name)


@pytest.mark.parametrize(
    "case,state_name,key",
    [
        (GROUPBY_CASE, "accState", "key_662"),
        ("datastream_checkpoint_thread_2.3", "per_tag", None),
        ("datastream_checkpoint_thread_2.3", "_timer_state/event_user-timers", None),
    ],
)
def test_key_reads_one_key_group(case, state_name, key):
    expected = _expected_rows(case, state_name)
    key = key if key is not None else expected[len(expected) // 2]["key"]
    reader = SavepointReader(savepoint_dir(case))
    op, info = reader.find(state_name)
    rows = [
        {name: canonical(v) for name, v in row.items()}
        for row in reader.table(state_name, op.id, keys=[key]).to_pylist()
    ]
    want = [r for r in expected if r["key"] == key]
    assert want and [r["key"] for r in rows] == [key] * len(want)
    assert sorted(json.dumps(r["value"], sort_keys=True) for r in rows) == sorted(
        json.dumps(r["value"], sort_keys=True) for r in want
    )
    stats = reader.last_stats
    assert stats.key_groups == 1
    total = sum(loc.stream.size for loc in info.locations)
    assert stats.bytes_read < total / 20
    # only the subtask whose range holds the key-group Flink assigns the key to was read
    key_group = key_group_for(key, info.key, op.max_parallelism)
    owners = {
        loc.subtask
        for loc in info.locations
        if loc.start_key_group <= key_group < loc.start_key_group + len(loc.offsets)
    }
    assert len(owners) == 1 and stats.subtasks == owners


def test_key_view_finds_every_state_of_a_key():
    case = "datastream_checkpoint_thread_2.3"
    expected = load_expected(case)
    key = _expected_rows(case, "count")[0]["key"]
    view = SavepointReader(savepoint_dir(case)).key(key)
    got = {row.state for row in view.rows}
    want = {
        st["name"]
        for _, st in iter_states(expected)
        if st["kind"] in ("keyed", "timer") and any(r["key"] == key for r in st["rows"])
    }
    assert want <= got and {"count", "items", "per_tag"} <= got


# --------------------------------------------------------------------------- damage


def _copy_case(case, tmp_path) -> Path:
    target = tmp_path / case
    shutil.copytree(case_dir(case), target)
    return target / "savepoint"


def _keyed_handles(storage):
    return [
        (op, sub.managed_keyed)
        for op in read_metadata(storage).operators
        for sub in op.subtasks
        if isinstance(sub.managed_keyed, KeyGroupsHandle)
    ]


def _with_stream(meta: StateMeta, old, new, **changes) -> StateMeta:
    """The StateMeta with every keyed location on stream ``old`` moved to ``new``."""

    def location(loc):
        return dataclasses.replace(loc, stream=new, **changes) if loc.stream == old else loc

    ops = tuple(
        dataclasses.replace(
            op,
            states=tuple(
                dataclasses.replace(st, locations=tuple(location(loc) for loc in st.locations)) for st in op.states
            ),
        )
        for op in meta.operators
    )
    return dataclasses.replace(meta, operators=ops)


def _stream_bytes(storage, handle) -> bytes:
    assert isinstance(handle.stream, InlineStream)
    data = Path(storage.metadata_path).read_bytes()
    return data[handle.stream.offset : handle.stream.offset + handle.stream.length]


def test_wrong_entry_count_names_metadata_file_and_offset(tmp_path):
    """The GROUP BY checkpoint's streams are inline: damage inside _metadata is reported there."""
    sp = _copy_case(GROUPBY_CASE, tmp_path)
    storage = open_storage(str(sp))
    _, handle = _keyed_handles(storage)[0]
    stream = _stream_bytes(storage, handle)
    # the first key-group with an accState entry: i32 id, u16 state id, i32 count
    header = read_keyed_header(storage, handle.stream, list(handle.offsets))
    acc_id = [s.name for s in header.states].index("accState")
    for _i, offset in enumerate(handle.offsets):
        state_id, count = struct.unpack_from(">Hi", stream, offset + 4)
        if state_id == acc_id and count > 0:
            break
    count_at = handle.stream.offset + offset + 6  # in _metadata
    raw = bytearray(Path(storage.metadata_path).read_bytes())
    raw[count_at : count_at + 4] = struct.pack(">i", 1_000_000)
    Path(storage.metadata_path).write_bytes(bytes(raw))
    reader = SavepointReader(load_state_meta(sp, use_state_info=False))
    with pytest.raises(FormatError) as err:
        reader.table("accState")
    assert "_metadata" in err.value.file and err.value.offset == count_at
    assert "entry count" in err.value.message


def _file_backed(tmp_path, case=GROUPBY_CASE):
    """The case with subtask 0's keyed stream moved out of _metadata into its own file."""
    sp = _copy_case(case, tmp_path)
    storage = open_storage(str(sp))
    _, handle = _keyed_handles(storage)[0]
    data = _stream_bytes(storage, handle)
    path = sp / "keyed-stream-0"
    path.write_bytes(data)
    meta = load_state_meta(storage, use_state_info=False)
    new = FileStream(storage.resolve_relative("keyed-stream-0"), len(data), "relative")
    return meta, handle, new, path, data


def test_truncated_key_group_file_names_file_and_offset(tmp_path):
    meta, handle, new, path, data = _file_backed(tmp_path)
    cut = handle.offsets[len(handle.offsets) // 2] + 3  # inside a key-group's id
    path.write_bytes(data[:cut])
    moved = _with_stream(meta, handle.stream, new)
    with pytest.raises(FormatError) as err:
        SavepointReader(moved).table("accState")
    assert err.value.file.endswith("keyed-stream-0")
    assert err.value.offset == cut
    assert "truncated" in (err.value.hint or "") + err.value.message


def test_key_group_with_another_id_is_refused(tmp_path):
    meta, handle, new, path, data = _file_backed(tmp_path)
    at = handle.offsets[5]
    damaged = bytearray(data)
    damaged[at : at + 4] = struct.pack(">i", handle.start_key_group + 77)
    path.write_bytes(bytes(damaged))
    with pytest.raises(FormatError) as err:
        SavepointReader(_with_stream(meta, handle.stream, new)).table("accState")
    assert err.value.file.endswith("keyed-stream-0") and err.value.offset == at
    assert f"key-group {handle.start_key_group + 5}" in err.value.message


def test_cut_entry_inside_a_key_group_is_reported_at_the_entry(tmp_path):
    """A key-group that ends inside an accState entry (the offsets say where the next one starts)."""
    meta, handle, new, path, data = _file_backed(tmp_path)
    header = read_keyed_header(meta.storage, handle.stream, list(handle.offsets))
    acc_id = [s.name for s in header.states].index("accState")
    ends = list(handle.offsets[1:]) + [len(data)]
    # a key-group whose first section is accState with entries
    i = next(
        j
        for j, o in enumerate(handle.offsets)
        if struct.unpack_from(">Hi", data, o + 4) == (acc_id, struct.unpack_from(">i", data, o + 6)[0])
        and struct.unpack_from(">i", data, o + 6)[0] > 0
    )
    entry_at = handle.offsets[i] + 10
    kept = entry_at + 5  # the namespace byte and the key row's length, then nothing
    removed = ends[i] - kept
    damaged = data[:kept] + data[ends[i] :]
    path.write_bytes(damaged)
    offsets = tuple(o if j <= i else o - removed for j, o in enumerate(handle.offsets))
    new = dataclasses.replace(new, size=len(damaged))
    with pytest.raises(FormatError) as err:
        SavepointReader(_with_stream(meta, handle.stream, new, offsets=offsets)).table("accState")
    assert err.value.file.endswith("keyed-stream-0")
    assert err.value.offset == entry_at
    assert f"key-group {handle.start_key_group + i}" in err.value.message


# --------------------------------------------------------------------------- compression


def _sections(stream: bytes, offsets, end: int, state_count: int):
    """The GROUP BY checkpoint's key-groups split into (id bytes, [state sections]) by this test's own
    reading of Flink's layout: accState entries are (VoidNamespace: one zero byte, i32-framed key
    row, i32-framed value row); the timer queues are empty."""
    out = []
    for start, stop in zip(offsets, list(offsets[1:]) + [end]):
        pos = start + 4
        sections = []
        for _ in range(state_count):
            begin = pos
            count = struct.unpack_from(">i", stream, pos + 2)[0]
            pos += 6
            for _ in range(count):
                assert stream[pos] == 0  # VoidNamespaceSerializer writes one zero byte
                pos += 1
                for _ in range(2):  # key row, value row
                    pos += 4 + struct.unpack_from(">i", stream, pos)[0]
            sections.append(stream[begin:pos])
        assert pos == stop
        out.append((stream[start : start + 4], sections))
    return out


def test_compressed_sections_decode_like_plain_ones(tmp_path):
    """Each state's section of a key-group compressed on its own (snappy framing, as Flink's
    SnappyStreamCompressionDecorator writes per section) reads as the plain checkpoint."""
    meta, handle, new, path, data = _file_backed(tmp_path)
    storage = meta.storage
    header = read_keyed_header(storage, handle.stream, list(handle.offsets))
    header_bytes = data[: handle.offsets[0]]
    body, offsets = bytearray(header_bytes), []
    for kg_id, sections in _sections(data, handle.offsets, len(data), len(header.states)):
        offsets.append(len(body))
        body += kg_id
        for section in sections:
            body += bytes(cramjam.snappy.compress(section))
    path.write_bytes(bytes(body))
    new = dataclasses.replace(new, size=len(body))
    moved = _with_stream(meta, handle.stream, new, offsets=tuple(offsets), compressed=True)
    plain = SavepointReader(meta).table("accState", subtasks={0}).to_pylist()
    assert plain and SavepointReader(moved).table("accState", subtasks={0}).to_pylist() == plain
    # a damaged chunk header is named at its offset in the file
    damaged = bytearray(body)
    damaged[offsets[3] + 4] = 0x42  # the first section's stream identifier chunk type
    path.write_bytes(bytes(damaged))
    with pytest.raises(FormatError) as err:
        SavepointReader(moved).table("accState", subtasks={0})
    assert err.value.file.endswith("keyed-stream-0") and err.value.offset == offsets[3] + 4


def test_unframed_undecodable_state_is_unsupported_not_misread():
    """A heap entry whose value type statecat cannot decode has no length to skip it by."""
    case = GROUPBY_CASE
    meta = load_state_meta(savepoint_dir(case), use_state_info=False)
    op = find_operator(meta, load_expected(case)["operators"][0])
    from statecat.statemeta.types import TypeDescriptor

    acc = op.state("accState")
    blind = dataclasses.replace(acc, value=TypeDescriptor.raw("SomeKryoSerializer", "Kryo bytes"))
    ops = tuple(
        dataclasses.replace(o, states=tuple(blind if s is acc else s for s in o.states)) if o is op else o
        for o in meta.operators
    )
    with pytest.raises(UnsupportedError) as err:
        SavepointReader(dataclasses.replace(meta, operators=ops)).table("accState", op.id)
    assert "not length-framed" in err.value.message


def test_ttl_wrapped_values_decode_to_the_user_value(tmp_path):
    """State TTL stores each value as TtlSerializer writes it (CompositeSerializer: i64 last access
    timestamp, then the user value). The GROUP BY checkpoint's accState rewritten that way (this
    test's own rewrite of the real bytes) reads back as the plain values with their timestamps."""
    from statecat.statemeta.types import TypeDescriptor

    meta, handle, new, path, data = _file_backed(tmp_path)
    header = read_keyed_header(meta.storage, handle.stream, list(handle.offsets))
    acc_id = [s.name for s in header.states].index("accState")
    body, offsets = bytearray(data[: handle.offsets[0]]), []
    for kg_id, sections in _sections(data, handle.offsets, len(data), len(header.states)):
        offsets.append(len(body))
        body += kg_id
        for section in sections:
            state_id, count = struct.unpack_from(">Hi", section, 0)
            if state_id != acc_id:
                body += section
                continue
            body += section[:6]
            pos = 6
            for _ in range(count):
                key_end = pos + 1 + 4 + struct.unpack_from(">i", section, pos + 1)[0]
                value_end = key_end + 4 + struct.unpack_from(">i", section, key_end)[0]
                body += section[pos:key_end] + struct.pack(">q", 1_700_000_000_000) + section[key_end:value_end]
                pos = value_end
    path.write_bytes(bytes(body))
    new = dataclasses.replace(new, size=len(body))
    moved = _with_stream(meta, handle.stream, new, offsets=tuple(offsets))
    ops = []
    for op in moved.operators:
        states = tuple(
            dataclasses.replace(st, value=TypeDescriptor.of("ttl", [("value", st.value)]))
            if st.name == "accState"
            else st
            for st in op.states
        )
        ops.append(dataclasses.replace(op, states=states))
    ttl_meta = dataclasses.replace(moved, operators=tuple(ops))
    plain = SavepointReader(meta).table("accState", subtasks={0}).to_pylist()
    stamped = [{**row, "ttl_timestamp": 1_700_000_000_000} for row in plain]  # the timestamp as a column
    assert plain and SavepointReader(ttl_meta).table("accState", subtasks={0}).to_pylist() == stamped


# --------------------------------------------------------------------------- file merging (live Flink)

FILE_MERGING_CASE = "sql_groupby_checkpoint_filemerging_2.3"


@pytest.mark.live_flink
def test_file_merging_checkpoint_reads_in_place(tmp_path, monkeypatch):
    """Flink 2.x file merging: keyed and operator streams are segments of shared files under the job's
    taskowned/ (absolute handles, so the checkpoint is read where Flink wrote it, not committed)."""
    from tests.fixtures import casebook, generate
    from tests.fixtures.runtime import ensure_runtime

    spec = casebook._case(
        "sql_groupby",
        "2.3.0",
        "hashmap",
        files=False,
        inline=False,
        snapshot="checkpoint",
        params={"keys": 300, "key_start": 500, "seed": 19},
        conf={
            "execution.checkpointing.file-merging.enabled": "true",
            # small streams too become segments instead of inline bytes
            "execution.checkpointing.data-inline-threshold": "1kb",
        },
    )
    monkeypatch.setitem(casebook.CASES, FILE_MERGING_CASE, spec)
    kind = casebook.KINDS["sql_groupby"]
    p = {"parallelism": 2, "max_parallelism": 128, **kind.defaults, **spec["params"]}
    case = tmp_path / FILE_MERGING_CASE
    (case / "input").mkdir(parents=True)
    args = kind.write_input(p, case / "input")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    args += [
        "--work",
        str(scratch / "work"),
        "--result",
        str(scratch / "result.json"),
        "--backend",
        "hashmap",
        "--parallelism",
        "2",
        "--max-parallelism",
        "128",
        "--timeout",
        "300",
        "--snapshot",
        "checkpoint",
    ]
    for k, v in spec["conf"].items():
        args += ["--conf", f"{k}={v}"]
    generate._run_job(ensure_runtime(spec), "sql_groupby", args, scratch, timeout=900)
    chk = json.loads((scratch / "result.json").read_text())["savepoint"].removeprefix("file:")
    expected = generate.build_expected(FILE_MERGING_CASE, case, p)

    meta = load_state_meta(chk, use_state_info=False)
    kinds = {
        sub.managed_keyed.stream.kind
        for op in meta.metadata.operators
        for sub in op.subtasks
        if isinstance(sub.managed_keyed, KeyGroupsHandle)
    }
    assert kinds == {"segment"}
    reader = SavepointReader(meta)
    for op_expected, state in iter_states(expected):
        op = find_operator(meta, op_expected)
        assert not op.unsupported
        rows = [{n: canonical(v) for n, v in r.items()} for r in reader.table(state["name"], op.id).to_pylist()]
        if state["rows"] is None:
            blob = b"".join(
                bytes.fromhex(r["value"].get("raw", r["value"])["hex"])
                for r in rows
                if isinstance(r.get("value"), dict)
            )  # decoded enumerators keep value.raw
            assert all(text.encode() in blob for text in state["raw_contains"])
        else:
            key = lambda r: json.dumps({c: r.get(c) for c in ("key", "namespace", "value")}, sort_keys=True)  # noqa: E731
            assert sorted(map(key, rows)) == sorted(map(key, state["rows"])), state["name"]
