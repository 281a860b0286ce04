"""One real Flink job, input added in phases, and after each phase a retained incremental RocksDB
checkpoint and a canonical savepoint (tests/fixtures/README.md, "Successive cases"). Expected
content per phase comes from the input alone.

- every phase's checkpoint (native SST files, later ones reusing earlier shared files, lists whose
  merge operands span several files) and savepoint decodes to that phase's expected content;
- the checkpoint and the savepoint of one moment diff to nothing;
- two successive snapshots diff to exactly the changes the input implies (issue 11);
- a job directory copied elsewhere reads from the copy.
"""

from __future__ import annotations

import json
import shutil

import pytest

from statecat.readers import SavepointReader, diff_savepoints
from statecat.readers.scans.diff import ADDED, CHANGED, COMPARED, REMOVED
from statecat.statemeta.files.metadata import FileStream, NativeRocksDBHandle, read_metadata
from statecat.statemeta.files.storage import open_storage
from tests.acceptance import canonical, check_state_rows
from tests.fixtures.expected import CASES, is_successive, iter_states, phases
from tests.test_diff import KEYED_KINDS, expected_changes_between, got_changes

SUCCESSIVE = [case for case in CASES if is_successive(case)]

PHASE_STATES = [
    pytest.param(case, index, op, state, id=f"{case}:{phase['phase']}:{state['name']}")
    for case in SUCCESSIVE
    for index, phase in enumerate(phases(case))
    for op, state in iter_states(phase["expected"])
]
PHASES = [
    pytest.param(case, index, id=f"{case}:{phase['phase']}")
    for case in SUCCESSIVE
    for index, phase in enumerate(phases(case))
]
STEPS = [
    pytest.param(case, index, id=f"{case}:{phases(case)[index - 1]['phase']}->{phases(case)[index]['phase']}")
    for case in SUCCESSIVE
    for index in range(1, len(phases(case)))
]


def test_there_are_successive_cases_with_three_phases():
    assert SUCCESSIVE
    assert all(len(phases(case)) >= 3 for case in SUCCESSIVE)


@pytest.mark.parametrize("case,index,operator,state", PHASE_STATES)
def test_each_phase_checkpoint_decodes_to_its_expected_content(case, index, operator, state):
    check_state_rows(phases(case)[index]["checkpoint"], operator, state)


@pytest.mark.parametrize("case,index,operator,state", PHASE_STATES)
def test_each_phase_savepoint_decodes_to_its_expected_content(case, index, operator, state):
    check_state_rows(phases(case)[index]["savepoint"], operator, state)


def _shared_ssts(checkpoint) -> set[str]:
    metadata = read_metadata(open_storage(str(checkpoint)))
    return {
        f.stream.path
        for op in metadata.operators
        for s in op.subtasks
        if isinstance(s.managed_keyed, NativeRocksDBHandle)
        for f in s.managed_keyed.sst_files
        if f.shared and isinstance(f.stream, FileStream)
    }


@pytest.mark.parametrize("case", SUCCESSIVE)
def test_later_checkpoints_reuse_the_first_checkpoints_shared_files(case):
    first, *_, last = phases(case)
    assert _shared_ssts(first["checkpoint"]) & _shared_ssts(last["checkpoint"])


@pytest.mark.parametrize("case,index", PHASES)
def test_checkpoint_and_savepoint_of_one_moment_have_no_changes(case, index):
    phase = phases(case)[index]
    diff = diff_savepoints(str(phase["checkpoint"]), str(phase["savepoint"]))
    keyed = [e for e in diff.summary() if e.kind in KEYED_KINDS]
    assert keyed and all(e.status == COMPARED for e in keyed), [(e.state, e.reason) for e in keyed]
    assert [c for c in diff.changes() if c.key_group is not None] == []


@pytest.mark.parametrize("case,index", STEPS)
@pytest.mark.parametrize("kind", ["savepoint", "checkpoint"])
def test_successive_snapshots_diff_to_the_changes_the_input_implies(case, index, kind):
    before, after = phases(case)[index - 1], phases(case)[index]
    diff = diff_savepoints(str(before[kind]), str(after[kind]))
    got = got_changes(diff)
    want = expected_changes_between((before[kind], before["expected"]), (after[kind], after["expected"]))
    assert want
    for name, changes in want.items():
        assert name in got, f"{name} was not matched"
        for change in (ADDED, REMOVED, CHANGED):
            assert got[name][change] == changes[change], (name, change)
        assert got[name]["unchanged"] == len(changes["unchanged"]), name
    assert any(changes[CHANGED] for changes in want.values())


@pytest.mark.parametrize("case", SUCCESSIVE)
def test_a_copied_job_directory_is_read_from_the_copy(case, tmp_path):
    last = phases(case)[-1]
    job = last["checkpoint"].parent
    copy = tmp_path / "elsewhere" / job.name
    shutil.copytree(job, copy)
    checkpoint = copy / last["checkpoint"].name
    assert all(path.startswith(str(copy)) for path in _shared_ssts(checkpoint))
    for op, state in iter_states(last["expected"]):
        check_state_rows(checkpoint, op, state)


def _keys_of(expected: dict, limit: int) -> list:
    keys = sorted(
        {
            json.dumps(row["key"], sort_keys=True)
            for _, state in iter_states(expected)
            if state["kind"] == "keyed" and state["rows"]
            for row in state["rows"]
        }
    )
    return [json.loads(k) for k in keys[:: max(1, len(keys) // limit)][:limit]]


def _view_rows(path, key) -> list:
    rows = SavepointReader(str(path)).key(key).rows
    return sorted(
        json.dumps([r.operator_id, r.state, canonical(r.namespace), canonical(r.value)], sort_keys=True, default=str)
        for r in rows
    )


@pytest.mark.parametrize("case", SUCCESSIVE)
def test_one_keys_view_of_a_checkpoint_is_the_savepoint_of_the_same_moment(case):
    """The key view seeks to the key inside its key-group's SST blocks (by its serialized bytes)."""
    last = phases(case)[-1]
    keys = _keys_of(last["expected"], 6)
    assert keys
    for key in keys:
        from_checkpoint = _view_rows(last["checkpoint"], key)
        assert from_checkpoint and from_checkpoint == _view_rows(last["savepoint"], key), key


@pytest.mark.parametrize("case", SUCCESSIVE)
def test_serialized_keys_decode_back_to_the_key(case):
    from statecat.readers.codecs.decoders import build_key_decoder
    from statecat.readers.keygroups import serialized_key

    meta = SavepointReader(str(phases(case)[-1]["checkpoint"])).meta
    checked = 0
    for _op, state in meta.states():
        if state.kind != "keyed" or state.key.kind == "raw":
            continue
        decode = build_key_decoder(state.key)
        for key in _keys_of(phases(case)[-1]["expected"], 20):
            data = serialized_key(key, state.key)
            assert data is not None, state.key.describe()
            assert decode(data, 0) == (key, len(data))
            checked += 1
    assert checked
