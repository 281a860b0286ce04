"""Retained RocksDB checkpoints written by real Flink 2.3 (issue 8): incremental ones of the SQL window,
SQL join and DataStream keyed jobs, a full (non-incremental) one of the GROUP BY job, and a GROUP BY
checkpoint taken after a restart at a higher parallelism, whose restored SST files are clipped by range
deletions. Every file is inline in `_metadata` (tests/fixtures/README.md). Ground truth: each case's
expected.json, computed from the job's input; here through the Python API and `statecat read` (Spark:
tests/test_catalog.py, every case; structure: tests/fixtures/test_corpus.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from statecat.readers import SavepointReader
from statecat.readers.backends.native_rocksdb import _open_sst
from statecat.readers.backends.sst.format import RANGE_DEL_BLOCK
from statecat.statemeta.files.metadata import InlineStream, NativeRocksDBHandle, read_metadata
from statecat.statemeta.files.storage import open_storage
from statecat.statemeta.model import NATIVE_ROCKSDB_LAYOUT, load_state_meta
from tests.acceptance import _comparable, _json_of_pickle, check_state_rows, find_operator
from tests.fixtures.expected import CASES, case_dir, iter_states, load_expected, savepoint_dir

INCREMENTAL_CASES = [
    "sql_window_checkpoint_rocksdb_2.3",
    "sql_join_checkpoint_rocksdb_2.3",
    "datastream_checkpoint_rocksdb_2.3",
]
FULL_CASE = "sql_groupby_full_checkpoint_rocksdb_2.3"
RESCALED_CASE = "sql_groupby_rescaled_rocksdb_2.3"
ROCKSDB_CHECKPOINT_CASES = [*INCREMENTAL_CASES, FULL_CASE, RESCALED_CASE]
# (a case missing from the corpus fails test_the_rocksdb_checkpoint_cases_are_committed, not collection)
KEYED_STATES = [
    pytest.param(case, op, st, id=f"{case}:{st['name']}")
    for case in ROCKSDB_CHECKPOINT_CASES
    if case in CASES
    for op, st in iter_states(load_expected(case))
    if st["kind"] in ("keyed", "timer")
]


def _handles(case) -> list[tuple[int, NativeRocksDBHandle]]:
    """(subtask, handle) of every keyed RocksDB instance in the case's checkpoint."""
    metadata = read_metadata(open_storage(str(savepoint_dir(case))))
    return [
        (s.index, s.managed_keyed)
        for op in metadata.operators
        for s in op.subtasks
        if isinstance(s.managed_keyed, NativeRocksDBHandle)
    ]


def _ssts(case, handle: NativeRocksDBHandle):
    storage = open_storage(str(savepoint_dir(case)))
    for file in handle.sst_files:
        sst, source = _open_sst(storage, file, True)
        try:
            yield file, sst
        finally:
            source.close()


def test_the_rocksdb_checkpoint_cases_are_committed():
    assert set(ROCKSDB_CHECKPOINT_CASES) <= set(CASES)
    for case in ROCKSDB_CHECKPOINT_CASES:
        expected = load_expected(case)
        assert (expected["backend"], expected["savepoint_format"]) == ("rocksdb", None), case


@pytest.mark.parametrize("case", ROCKSDB_CHECKPOINT_CASES)
def test_a_rocksdb_checkpoint_is_native_rocksdb_state_kept_inline(case):
    meta = load_state_meta(savepoint_dir(case), use_state_info=False)
    assert meta.metadata.checkpoint_type == "Checkpoint"
    keyed = [(op, st) for op, st in meta.states() if st.is_keyed]
    assert keyed
    for op, st in keyed:
        assert not op.unsupported, op.unsupported
        assert {loc.layout for loc in st.locations} == {NATIVE_ROCKSDB_LAYOUT}, st.name
    handles = _handles(case)
    parallelism = load_expected(case)["operators"][0]["parallelism"]
    assert len(handles) == parallelism
    for _, handle in handles:
        assert handle.sst_files
        assert all(isinstance(f.stream, InlineStream) for f in handle.files)


@pytest.mark.parametrize("case", INCREMENTAL_CASES + [RESCALED_CASE])
def test_incremental_checkpoints_list_their_ssts_as_shared_state(case):
    for _, handle in _handles(case):
        assert all(f.shared for f in handle.sst_files)


def test_a_full_rocksdb_checkpoint_keeps_its_ssts_private():
    """Flink 2.3 writes a non-incremental RocksDB checkpoint as native files too (not key-group
    streams), with every file, SSTs included, in the handle's private part."""
    for _, handle in _handles(FULL_CASE):
        assert not any(f.shared for f in handle.files)


def test_the_datastream_checkpoint_is_zstd_compressed():
    for _, handle in _handles("datastream_checkpoint_rocksdb_2.3"):
        assert {sst.compression for _, sst in _ssts("datastream_checkpoint_rocksdb_2.3", handle)} == {"ZSTD"}


def test_the_join_checkpoint_has_two_byte_key_group_prefixes():
    assert load_expected("sql_join_checkpoint_rocksdb_2.3")["operators"][0]["max_parallelism"] == 256
    ranges = sorted(handle.key_group_range for _, handle in _handles("sql_join_checkpoint_rocksdb_2.3"))
    assert ranges == [(0, 127), (128, 255)]


@pytest.mark.parametrize("case,operator,state", KEYED_STATES)
def test_every_keyed_state_decodes_to_expected_through_the_api(case, operator, state):
    check_state_rows(case_dir(case), operator, state)


def _statecat_read(path, state: str, operator_id: str) -> list[dict]:
    done = subprocess.run(
        [sys.executable, "-m", "statecat.catalog.cli", "read", str(path), "--state", state, "--operator", operator_id],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


@pytest.mark.parametrize("case", ROCKSDB_CHECKPOINT_CASES)
def test_statecat_read_prints_every_keyed_state_as_expected(case):
    meta = load_state_meta(savepoint_dir(case))
    for operator, state in iter_states(load_expected(case)):
        if state["kind"] not in ("keyed", "timer"):
            continue
        rows = _statecat_read(savepoint_dir(case), state["name"], find_operator(meta, operator).id)
        if state.get("value_encoding") == "pickle":
            # thread mode's pickled values print as their bytes (no --unpickle): the objects they hold
            rows = [{**r, "value": _json_of_pickle(bytes.fromhex(r["value"]["hex"]))} for r in rows]
        columns = ["key", "namespace", "value"]
        assert _comparable(rows, columns) == _comparable(state["rows"], columns), state["name"]


# ----------------------------------------------------------------------------- rescaled: range deletions


def test_the_rescaled_checkpoint_clips_restored_files_with_range_deletions():
    """Precondition of the rescaled case: Flink restored the parallelism-1 DB in both new subtasks and
    clipped it with deleteRange, so the final checkpoint's SSTs (i) carry range deletions and (ii)
    still hold keys of the other subtask's key-groups, which only those deletions hide."""
    expected = load_expected(RESCALED_CASE)
    assert (expected["params"]["first_parallelism"], expected["params"]["parallelism"]) == (1, 2)
    handles = _handles(RESCALED_CASE)
    assert sorted(h.key_group_range for _, h in handles) == [(0, 63), (64, 127)]
    with_deletions, foreign_keys = 0, 0
    for _, handle in handles:
        low, high = handle.key_group_range
        for _file, sst in _ssts(RESCALED_CASE, handle):
            if RANGE_DEL_BLOCK in sst.metaindex and sst.range_tombstones():
                with_deletions += 1
            if sst.column_family == "accState":
                for key, *_ in sst.entries():
                    group = int.from_bytes(key[:1], "big")  # max parallelism 128: a 1-byte prefix
                    foreign_keys += not low <= group <= high
    assert with_deletions >= 1
    assert foreign_keys > 0


def test_the_rescaled_checkpoint_reads_each_key_once():
    """Both subtasks hold the restored phase-1 keys: without the range deletions every one of them would
    be read twice."""
    meta = load_state_meta(savepoint_dir(RESCALED_CASE))
    op, _ = meta.find_state("accState")
    rows = SavepointReader(meta).table("accState", op.id).to_pylist()
    expected = next(s["rows"] for _, s in iter_states(load_expected(RESCALED_CASE)) if s["name"] == "accState")
    assert len(rows) == len(expected) == len({r["key"] for r in rows})
    assert {r["key"]: r["value"] for r in rows} == {r["key"]: r["value"] for r in expected}
