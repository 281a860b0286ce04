"""Writing savepoints (writers/savepoint_writer.py, writers/metadata_writer.py) without Flink:
the _metadata writer against real Flink bytes, an unedited rewrite of every fixture against the
job's input, operator operations, and the safety rules (SRC untouched, DST atomic). Restores in
real Flink are in tests/test_write_restore.py."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from statecat.statemeta.errors import StatecatError, UnsupportedError
from statecat.statemeta.files.metadata import FileStream, InlineStream, KeyGroupsHandle, read_metadata
from statecat.statemeta.model import load_state_meta, operator_id_for_uid
from statecat.writers.metadata_writer import (
    InlineData,
    KeyGroupsOut,
    OperatorOut,
    OperatorStreamOut,
    RelativeFile,
    SubtaskOut,
    savepoint_properties,
    write_metadata,
)
from statecat.writers.savepoint_writer import write_savepoint
from tests.acceptance import check_state_rows
from tests.fixtures.expected import CASES, iter_states, load_expected, savepoint_dir
from tests.round_trip import handle_streams, metadata_properties


def _metadata_bytes(directory: Path) -> bytes:
    return (Path(directory) / "_metadata").read_bytes()


def _written(stream, directory: Path, raw: bytes):
    if stream is None:
        return None
    if isinstance(stream, InlineStream):
        return InlineData(stream.name, raw[stream.offset : stream.offset + stream.length])
    assert isinstance(stream, FileStream) and stream.kind == "relative"
    return RelativeFile(os.path.relpath(stream.path, directory), stream.size)


def _as_written(directory: Path) -> tuple[int, int, list[OperatorOut]]:
    """The parsed _metadata in the writer's model: what a byte-exact writer must reproduce."""
    raw = _metadata_bytes(directory)
    md = read_metadata(str(directory))
    operators = []
    for op in md.operators:
        subtasks = []
        for s in op.subtasks:

            def keyed(h):
                if h is None:
                    return None
                assert isinstance(h, KeyGroupsHandle) and h.kind == "savepoint"
                return KeyGroupsOut(h.start_key_group, h.offsets, _written(h.stream, directory, raw))

            def operator_handle(h):
                return None if h is None else OperatorStreamOut(h.entries, _written(h.stream, directory, raw))

            subtasks.append(
                SubtaskOut(
                    s.index,
                    operator_handle(s.managed_operator),
                    operator_handle(s.raw_operator),
                    keyed(s.managed_keyed),
                    keyed(s.raw_keyed),
                )
            )
        operators.append(
            OperatorOut(
                op.id,
                op.uid,
                op.name,
                op.parallelism,
                op.max_parallelism,
                _written(op.coordinator, directory, raw),
                tuple(subtasks),
                op.finished,
                op.finished_subtasks,
            )
        )
    return md.version, md.checkpoint_id, operators


CANONICAL_SAVEPOINTS = [c for c in CASES if read_metadata(str(savepoint_dir(c))).savepoint_format == "CANONICAL"]


@pytest.mark.parametrize("case", CANONICAL_SAVEPOINTS)
def test_metadata_writer_reproduces_flinks_bytes(case):
    """Parsed and written again, every canonical fixture's _metadata is byte for byte Flink's."""
    directory = savepoint_dir(case)
    raw = _metadata_bytes(directory)
    version, checkpoint_id, operators = _as_written(directory)
    trailer = metadata_properties(raw) if version >= 4 else None
    written = write_metadata(version, checkpoint_id, operators, properties=trailer)
    assert written == raw


@pytest.mark.parametrize(
    "case,format_type",
    [
        ("sql_groupby_hashmap_1.20", "CANONICAL"),
        ("sql_groupby_hashmap_2.0", "CANONICAL"),
        ("sql_groupby_hashmap_2.3", "CANONICAL"),
        ("sql_groupby_native_rocksdb_2.3", "NATIVE"),
    ],
)
def test_checkpoint_properties_are_flinks_java_serialization(case, format_type):
    raw = _metadata_bytes(savepoint_dir(case))
    trailer = metadata_properties(raw)
    # The fixtures were taken with stop-with-savepoint.
    assert savepoint_properties(format_type, "Suspend Savepoint", "SUSPEND") == trailer


def test_written_savepoint_records_a_plain_savepoint(tmp_path):
    dst = tmp_path / "out"
    write_savepoint(str(savepoint_dir("sql_groupby_hashmap_2.3")), str(dst))
    md = read_metadata(str(dst))
    assert (md.checkpoint_type, md.savepoint_format) == ("Savepoint", "CANONICAL")


# ----------------------------------------------------------------------------- unedited rewrites

REWRITE_CASES = [
    pytest.param(case, op, state, id=f"{case}:{state['name']}")
    for case in CASES
    for op, state in iter_states(load_expected(case))
]


@pytest.fixture(scope="module")
def rewritten(tmp_path_factory):
    """Each fixture's snapshot written once, unedited, as a canonical savepoint."""
    root = tmp_path_factory.mktemp("rewritten")
    done: dict[str, Path] = {}

    def get(case: str) -> Path:
        if case not in done:
            done[case] = root / case
            write_savepoint(str(savepoint_dir(case)), str(done[case]))
        return done[case]

    return get


@pytest.mark.parametrize("case,operator,state", REWRITE_CASES)
def test_unedited_rewrite_reads_as_the_jobs_input(rewritten, case, operator, state):
    """Canonical savepoints, heap and RocksDB checkpoints alike: the written savepoint holds
    exactly the state the job's input gives (expected.json, never our reader)."""
    check_state_rows(rewritten(case), operator, state)


@pytest.mark.parametrize("case", CASES)
def test_unedited_rewrite_is_canonical_and_self_contained(rewritten, case):
    dst = rewritten(case)
    md = read_metadata(str(dst))
    assert md.savepoint_format == "CANONICAL"
    assert md.version == read_metadata(str(savepoint_dir(case))).version
    for op in md.operators:
        for s in op.subtasks:
            for handle in (s.managed_keyed, s.raw_keyed):
                if handle is not None:
                    assert isinstance(handle, KeyGroupsHandle) and handle.kind == "savepoint"
            for handle in (s.managed_keyed, s.managed_operator, s.raw_operator):
                stream = getattr(handle, "stream", None)
                if isinstance(stream, FileStream):
                    assert stream.kind == "relative" and Path(stream.path).parent == dst


def test_canonical_source_streams_are_copied_byte_for_byte(tmp_path):
    src = savepoint_dir("sql_groupby_hashmap_2.3")  # files and inline streams
    dst = tmp_path / "copy"
    summary = write_savepoint(str(src), str(dst))
    assert summary.streams_rebuilt == 0 and summary.streams_copied > 0
    assert handle_streams(dst) == handle_streams(src)


def _tree_digest(directory: Path) -> dict[str, str]:
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(Path(directory).rglob("*"))
        if p.is_file()
    }


def test_source_is_never_modified(tmp_path):
    src = savepoint_dir("sql_groupby_checkpoint_hashmap_2.3")
    before = _tree_digest(src.parent)
    write_savepoint(str(src), str(tmp_path / "out"))
    assert _tree_digest(src.parent) == before


# ----------------------------------------------------------------------------- operator operations


def test_drop_operator_leaves_its_state_out(tmp_path):
    src = str(savepoint_dir("sql_join_2.3"))
    meta = load_state_meta(src)
    join = next(op for op in meta.operators if op.name and "Join" in op.name)
    write_savepoint(src, str(tmp_path / "out"), drop_operators=[join.id])
    ids = {op.id for op in read_metadata(str(tmp_path / "out")).operators}
    assert ids == {op.id for op in meta.metadata.operators} - {join.id}


def test_set_uid_gives_flinks_operator_id_for_the_uid(tmp_path):
    src = str(savepoint_dir("sql_groupby_hashmap_2.3"))
    meta = load_state_meta(src)
    agg = next(op for op in meta.operators if op.name and "GroupAggregate" in op.name)
    write_savepoint(src, str(tmp_path / "out"), set_uids={agg.id: "word-counts"})
    out = load_state_meta(str(tmp_path / "out"))
    moved = out.operator("word-counts")
    assert moved.id == operator_id_for_uid("word-counts")
    assert moved.uid == "word-counts"
    assert agg.id not in {op.id for op in out.operators}
    assert {s.name for s in moved.states} == {s.name for s in agg.states}


def test_set_uid_refuses_an_id_another_operator_has(tmp_path):
    src = str(savepoint_dir("datastream_thread_2.3"))
    meta = load_state_meta(src)
    with_uid = [op for op in meta.operators if op.uid]
    other = next(op for op in meta.operators if op.id != with_uid[0].id)
    with pytest.raises(UnsupportedError, match="another operator"):
        write_savepoint(src, str(tmp_path / "out"), set_uids={other.id: with_uid[0].uid})
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------- safety


def test_existing_destination_is_refused_without_overwrite(tmp_path):
    src = str(savepoint_dir("sql_groupby_hashmap_2.3"))
    dst = tmp_path / "out"
    dst.mkdir()
    (dst / "keep").write_text("x")
    with pytest.raises(StatecatError, match="exists"):
        write_savepoint(src, str(dst))
    assert (dst / "keep").read_text() == "x"
    with pytest.raises(StatecatError, match="replaces only a savepoint.*'keep'"):  # tests/test_write_files.py
        write_savepoint(src, str(dst), overwrite=True)
    assert (dst / "keep").read_text() == "x"
    (dst / "keep").unlink()
    dst.rmdir()
    write_savepoint(src, str(dst))
    write_savepoint(src, str(dst), overwrite=True)
    assert (dst / "_metadata").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_destination_inside_the_source_is_refused(tmp_path):
    src = savepoint_dir("sql_groupby_hashmap_2.3")
    with pytest.raises(StatecatError, match="overlaps"):
        write_savepoint(str(src), str(src / "out"))


class _Interrupt(BaseException):
    pass


class _FailingEditor:
    """Interrupts the write in the middle of the keyed stream (as Ctrl-C would)."""

    def key_groups(self, operator_id):
        return frozenset(range(128))

    def edit(self, operator, key_group, entries):
        if key_group == 70:
            raise _Interrupt()
        return {}

    def operator_states(self, operator_id):
        return frozenset()

    def edit_elements(self, operator, state, subtask, elements):
        return elements


def test_an_interrupted_write_leaves_no_destination(tmp_path):
    with pytest.raises(_Interrupt):
        write_savepoint(str(savepoint_dir("sql_groupby_hashmap_2.3")), str(tmp_path / "out"), editor=_FailingEditor())
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------- max parallelism


@pytest.mark.parametrize(
    "case,new_max",
    [
        ("sql_groupby_hashmap_2.3", 256),  # 1-byte prefix becomes 2 bytes
        ("sql_join_checkpoint_rocksdb_2.3", 128),  # a RocksDB checkpoint at 256, prefix 2 -> 1
        ("datastream_thread_2.3", 17),  # every state kind and timers
        ("datastream_windows_thread_2.3", 4096),
    ],
)
def test_max_parallelism_moves_every_key_to_flinks_key_group(tmp_path, case, new_max):
    from statecat.writers.savepoint_writer import key_group_range
    from tests.acceptance import check_key_groups

    dst = tmp_path / "out"
    write_savepoint(str(savepoint_dir(case)), str(dst), max_parallelism=new_max)
    meta = load_state_meta(str(dst))
    assert {op.max_parallelism for op in meta.operators} == {new_max}
    for op, state in iter_states(load_expected(case)):
        check_state_rows(dst, op, state)  # the same rows, the job's input
    assert check_key_groups(dst) > 0  # each key in the key-group Flink assigns it under new_max
    for op in meta.operators:
        for state in op.states:
            for location in state.keyed_locations if state.is_keyed else ():
                first, last = key_group_range(new_max, op.parallelism, location.subtask)
                assert (location.start_key_group, location.start_key_group + len(location.offsets) - 1) == (first, last)


def test_max_parallelism_below_an_operators_parallelism_is_refused(tmp_path):
    with pytest.raises(UnsupportedError, match="parallelism 3, above the max parallelism 2"):
        write_savepoint(str(savepoint_dir("sql_join_2.3")), str(tmp_path / "out"), max_parallelism=2)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("case", CASES)
def test_unedited_rewrite_diffs_empty_against_its_source(rewritten, case):
    from statecat.readers import diff_savepoints

    diff = diff_savepoints(str(savepoint_dir(case)), str(rewritten(case)))
    totals = diff.totals()
    assert (totals["added"], totals["removed"], totals["changed"]) == (0, 0, 0)
    assert totals["unchanged"] > 0
    assert all(s.status == "compared" for s in diff.summary()), [(s.state, s.status, s.reason) for s in diff.summary()]
