"""Savepoints statecat writes, restored by real Flink: the job's output continues from exactly the
edited state. Ground truth is the fixture's expected.json (computed from the job's input) with the
edit applied in plain Python, never statecat's reader; the restore harness is
tests/fixtures/restore.py (proven on unedited savepoints by tests/test_restore_harness.py)."""

from __future__ import annotations

import copy

import pytest

from statecat.catalog.spark.edits import write_savepoint
from tests.fixtures.expected import phases, savepoint_dir
from tests.fixtures.restore import restore_and_continue
from tests.test_restore_harness import (
    GROUPBY_EXTRA,
    KEYED_EXTRA,
    TIMEOUT,
    _per_key,
    _state_rows,
    groupby_changelog,
    keyed_outputs,
)

pytestmark = pytest.mark.live_flink

GROUPBY_EDITS = [
    "UPDATE accstate SET value = named_struct('f0', value.f0 + 10, 'f1', value.f1 + 1000) WHERE key = 'key_662'",
    "DELETE FROM accstate WHERE key = 'key_500'",
    "INSERT INTO accstate (key, value) VALUES ('brand_new_key', named_struct('f0', 5, 'f1', 50))",
]


def _edited_groupby(acc: dict) -> dict:
    """GROUPBY_EDITS applied to {word: {"f0": count, "f1": sum}} in plain Python."""
    acc = copy.deepcopy(acc)
    acc["key_662"] = {"f0": acc["key_662"]["f0"] + 10, "f1": acc["key_662"]["f1"] + 1000}
    acc.pop("key_500", None)
    acc["brand_new_key"] = {"f0": 5, "f1": 50}
    return acc


def _check_groupby(out, acc: dict) -> None:
    want = groupby_changelog(acc, GROUPBY_EXTRA)
    assert _per_key(out, "word") == _per_key(want, "word")
    assert len(out) == len(want)


@pytest.mark.parametrize(
    "case,backend",
    [
        ("sql_groupby_hashmap_2.3", None),
        ("sql_groupby_hashmap_2.3", "rocksdb"),  # a canonical savepoint restores into either backend
        ("sql_groupby_rocksdb_2.3", None),
        ("sql_groupby_hashmap_1.20", None),
        ("sql_groupby_rocksdb_1.20", None),
    ],
)
def test_groupby_continues_from_the_edited_state(tmp_path, case, backend):
    dst = tmp_path / "edited"
    write_savepoint(str(savepoint_dir(case)), str(dst), sql=GROUPBY_EDITS)
    out = restore_and_continue(case, dst, GROUPBY_EXTRA, backend=backend, timeout=TIMEOUT)
    acc = _edited_groupby(_state_rows(case, "accState"))
    _check_groupby(out, acc)
    first_662 = out[[r["word"] for r in out].index("key_662")]
    assert (first_662["cnt"], first_662["total"]) == (acc["key_662"]["f0"], acc["key_662"]["f1"])
    assert _per_key(out, "word")["key_500"][0]["op"] == "+I"  # deleted: it starts again


def _phase_state(phase: dict) -> dict:
    for op in phase["expected"]["operators"]:
        for state in op["states"]:
            if state["name"] == "accState":
                return {r["key"]: r["value"] for r in state["rows"]}
    raise AssertionError("no accState")


@pytest.mark.parametrize(
    "source",
    [
        "heap checkpoint",  # tag-12 handles, the heap checkpoint's own key-group layout
        "incremental RocksDB checkpoint",  # SST files in shared/ of an earlier checkpoint
    ],
)
def test_a_checkpoint_rewritten_as_a_savepoint_restores(tmp_path, source):
    if source == "heap checkpoint":
        case, snapshot = "sql_groupby_checkpoint_hashmap_2.3", savepoint_dir("sql_groupby_checkpoint_hashmap_2.3")
        acc = _state_rows(case, "accState")
    else:
        case = "sql_groupby_successive_2.3"
        phase = phases(case)[1]  # phase 2's checkpoint shares phase 1's SST files
        snapshot, acc = phase["checkpoint"], _phase_state(phase)
    dst = tmp_path / "pinned"
    write_savepoint(str(snapshot), str(dst), sql=GROUPBY_EDITS[:1] if "key_662" in acc else [])
    if "key_662" in acc:
        acc = {**acc, "key_662": {"f0": acc["key_662"]["f0"] + 10, "f1": acc["key_662"]["f1"] + 1000}}
    out = restore_and_continue(case, dst, GROUPBY_EXTRA, timeout=TIMEOUT)
    _check_groupby(out, acc)


def test_restore_after_max_parallelism_change(tmp_path):
    case = "sql_groupby_hashmap_2.3"
    dst = tmp_path / "rescaled"
    write_savepoint(str(savepoint_dir(case)), str(dst), sql=GROUPBY_EDITS, max_parallelism=256)
    out = restore_and_continue(case, dst, GROUPBY_EXTRA, max_parallelism=256, timeout=TIMEOUT)
    _check_groupby(out, _edited_groupby(_state_rows(case, "accState")))
    assert set(out.subtasks) == {1, 2}


KEYED_EDITS = [
    "UPDATE count SET value = value + 100 WHERE key = 'k_0'",
    "UPDATE items SET value = array('edited') WHERE key = 'k_0'",
    "UPDATE per_tag SET value = map('t1', 1000L) WHERE key = 'k_0'",
    "UPDATE max_v SET value = 5000 WHERE key = 'k_17'",
]


def _edited_keyed(case: str) -> dict:
    states = {n: dict(_state_rows(case, n)) for n in ("count", "items", "per_tag", "max_v")}
    states["count"]["k_0"] += 100
    states["items"]["k_0"] = ["edited"]
    states["per_tag"]["k_0"] = {"t1": 1000}
    states["max_v"]["k_17"] = 5000
    return states


@pytest.mark.parametrize("case", ["datastream_thread_2.3", "datastream_thread_1.20"])
def test_keyed_function_sees_the_edited_states(tmp_path, case):
    dst = tmp_path / "edited"
    write_savepoint(str(savepoint_dir(case)), str(dst), sql=KEYED_EDITS)
    out = restore_and_continue(case, dst, KEYED_EXTRA, timeout=TIMEOUT)
    want = keyed_outputs(case, KEYED_EXTRA, _edited_keyed(case))
    assert _per_key(out, "key") == _per_key(want, "key")
    k0 = _per_key(out, "key")["k_0"][0]
    assert (k0["count"], k0["items"], k0["per_tag"]) == (
        _state_rows(case, "count")["k_0"] + 101,
        ["edited", "t1:5"],
        {"t1": 1005},
    )


def test_restore_under_a_new_uid(tmp_path):
    """A savepoint whose keyed function got a new uid restores into the job deployed with it."""
    case = "datastream_thread_2.3"
    dst = tmp_path / "renamed"
    write_savepoint(str(savepoint_dir(case)), str(dst), set_uids={"keyed-fn": "renamed-fn"})
    out = restore_and_continue(case, dst, KEYED_EXTRA, timeout=TIMEOUT, job_args=["--keyed-uid", "renamed-fn"])
    want = keyed_outputs(case, KEYED_EXTRA)
    assert _per_key(out, "key") == _per_key(want, "key")
