"""The savepoint diff (`diff_savepoints`, `statecat diff`): the changes computed from the two
fixtures' expected contents (derived from the jobs' input), zero changes for the same state laid out
differently, and plain reasons for what cannot be compared."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys

import pytest

from statecat.readers import SavepointReader, diff_savepoints
from statecat.readers.scans.diff import ADDED, CHANGED, COMPARED, NOT_COMPARED, REMOVED
from statecat.readers.scans.scan import KeyedStateScanner
from statecat.statemeta.errors import LookupFailedError
from statecat.statemeta.files.metadata import InlineStream
from statecat.statemeta.model import StateMeta, load_state_meta
from tests.acceptance import canonical, find_operator
from tests.fixtures.expected import iter_states, load_expected, savepoint_dir

KEYED_KINDS = ("keyed", "timer")


def statecat(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "statecat.catalog.cli", *args], capture_output=True, text=True, timeout=120
    )


def _id(value) -> str:
    return json.dumps(_sorted_pairs(value), sort_keys=True)


def _sorted_pairs(value):
    # expected.json writes maps with non-string keys as [k, v] pairs in no particular order.
    if isinstance(value, list) and value and all(isinstance(p, list) and len(p) == 2 for p in value):
        return sorted((_sorted_pairs(p) for p in value), key=lambda p: json.dumps(p, sort_keys=True))
    if isinstance(value, dict):
        return {k: _sorted_pairs(v) for k, v in value.items()}
    return value


def expected_changes(case_a: str, case_b: str) -> dict[tuple[str, str], dict[str, set]]:
    """(operator id, state) -> {added, removed, changed, unchanged}: sets of (key, namespace) ids, from the
    expected contents alone. Timers have no value of their own: (key, namespace, time) is the identity."""
    return expected_changes_between(
        (savepoint_dir(case_a), load_expected(case_a)), (savepoint_dir(case_b), load_expected(case_b))
    )


def expected_changes_between(side_a: tuple, side_b: tuple) -> dict[tuple[str, str], dict[str, set]]:
    """``expected_changes`` for two (snapshot directory, expected dict) sides, e.g. two phases of one job."""
    out = {}
    sides = []
    for snapshot, expected in (side_a, side_b):
        meta = load_state_meta(snapshot)
        states = {}
        for expected_op in expected["operators"]:
            for state in expected_op["states"]:
                if state["kind"] in KEYED_KINDS:
                    op = find_operator(meta, expected_op)
                    rows = {}
                    for r in state["rows"]:
                        ident = (_id(r["key"]), _id(r["namespace"])) + (
                            (_id(r["value"]),) if state["kind"] == "timer" else ()
                        )
                        rows[ident] = _id(r["value"])
                    states[(op.id, state["name"])] = rows
        sides.append(states)
    old_states, new_states = sides
    for name in old_states.keys() & new_states.keys():
        old, new = old_states[name], new_states[name]
        out[name] = {
            ADDED: new.keys() - old.keys(),
            REMOVED: old.keys() - new.keys(),
            CHANGED: {k for k in old.keys() & new.keys() if old[k] != new[k]},
            "unchanged": {k for k in old.keys() & new.keys() if old[k] == new[k]},
        }
    return out


def got_changes(diff) -> dict[tuple[str, str], dict[str, set]]:
    ids = {(e.a[0].id, e.state): e for e in diff.states if e.a is not None}
    out = {name: {ADDED: set(), REMOVED: set(), CHANGED: set()} for name in ids}
    for change in diff.changes():
        entry = next(e for e in diff.states if e.state == change.state and e.operator == change.operator)
        ident = (_id(canonical(change.key)), _id(canonical(change.namespace)))
        if entry.kind == "timer":
            ident += (_id(canonical(change.new if change.change == ADDED else change.old)),)
        out[(entry.a[0].id, entry.state)][change.change].add(ident)
    for name, entry in ids.items():
        out[name]["unchanged"] = entry.unchanged
    return out


# Pairs of fixtures of one job: other seeds (so other keys and values), Flink versions, backends.
PAIRS = [
    ("sql_groupby_hashmap_2.3", "sql_groupby_compressed_2.3"),  # same 2000 keys, other values; snappy
    ("sql_groupby_rocksdb_1.15", "sql_groupby_hashmap_2.3"),  # 1200 -> 2000 keys; Flink 1.15 -> 2.3
    ("sql_groupby_hashmap_1.20", "sql_groupby_rocksdb_2.3"),  # 300 keys each; 1.20 heap -> 2.3 RocksDB
    ("sql_groupby_hashmap_2.0", "sql_groupby_hashmap_1.15"),
    ("sql_groupby_compressed_2.3", "sql_groupby_hashmap_1.20"),  # 2000 -> 300 keys: 1700 removed
    ("datastream_thread_1.20", "datastream_thread_2.3"),  # every state kind, timers, maps, lists
]


@pytest.mark.parametrize("case_a,case_b", PAIRS)
def test_diff_reports_exactly_the_changes_the_expected_contents_imply(case_a, case_b):
    diff = diff_savepoints(str(savepoint_dir(case_a)), str(savepoint_dir(case_b)))
    got = got_changes(diff)
    want = expected_changes(case_a, case_b)
    assert want, "the pair shares keyed states"
    for name, changes in want.items():
        assert name in got, f"{name} was not matched"
        for kind in (ADDED, REMOVED, CHANGED):
            assert got[name][kind] == changes[kind], (name, kind)
        assert got[name]["unchanged"] == len(changes["unchanged"]), name
    assert any(changes[CHANGED] for changes in want.values())
    for entry in diff.summary():
        if entry.kind in KEYED_KINDS:
            assert entry.status == COMPARED, (entry.state, entry.reason)


def test_changed_rows_carry_old_and_new_values():
    case_a, case_b = "sql_groupby_hashmap_1.20", "sql_groupby_rocksdb_2.3"
    old = {r["key"]: r["value"] for r in _rows(case_a, "accState")}
    new = {r["key"]: r["value"] for r in _rows(case_b, "accState")}
    changes = list(
        diff_savepoints(str(savepoint_dir(case_a)), str(savepoint_dir(case_b)), states=["accState"]).changes()
    )
    assert changes and all(c.change == CHANGED for c in changes)
    for change in changes:
        assert canonical(change.old) == old[change.key] and canonical(change.new) == new[change.key]


def _rows(case, state):
    return next(s["rows"] for op in load_expected(case)["operators"] for s in op["states"] if s["name"] == state)


def test_two_backends_fed_the_same_input_have_no_keyed_changes():
    """Real Flink 2.3 runs of one job on one input: RocksDB vs hashmap backend (other bytes, same state)."""
    a, b = "sql_groupby_rocksdb_2.3", "sql_groupby_same_input_hashmap_2.3"
    assert load_expected(a)["params"] == load_expected(b)["params"]  # the same input, by construction
    diff = diff_savepoints(str(savepoint_dir(a)), str(savepoint_dir(b)))
    keyed = [e for e in diff.summary() if e.kind in KEYED_KINDS]
    assert keyed and all(e.status == COMPARED for e in keyed)
    assert [c for c in diff.changes() if c.key_group is not None] == []
    rows = {s["name"]: len(s["rows"]) for _, s in iter_states(load_expected(a)) if s["kind"] == "keyed"}
    assert {e.state: e.unchanged for e in keyed if e.state in rows} == rows


def test_same_savepoint_in_two_places_has_no_changes(tmp_path):
    case = "datastream_windows_thread_2.3"
    copy = tmp_path / "copy"
    shutil.copytree(savepoint_dir(case), copy)
    diff = diff_savepoints(str(savepoint_dir(case)), str(copy))
    assert list(diff.changes()) == []
    summary = diff.summary()
    assert all(e.status == COMPARED for e in summary)
    # Every keyed entry and timer, and the coordinator's one blob (its rows are null: not derivable).
    assert sum(e.unchanged for e in summary) == sum(
        1 if s["rows"] is None else len(s["rows"]) for op in load_expected(case)["operators"] for s in op["states"]
    )


def test_diff_holds_one_key_group_per_side(monkeypatch):
    reads = []
    original = KeyedStateScanner._key_groups

    def counting(self, location, key_groups):
        for item in original(self, location, key_groups):
            reads.append(item[0])
            yield item

    monkeypatch.setattr(KeyedStateScanner, "_key_groups", counting)
    changes = diff_savepoints(
        str(savepoint_dir("sql_groupby_hashmap_2.3")),
        str(savepoint_dir("sql_groupby_compressed_2.3")),
        states=["accState"],
    ).changes()
    first = next(changes)
    assert len(reads) <= 4  # each side's current key-group and the next one, nothing more
    groups = [first.key_group] + [c.key_group for c in changes]
    assert len(groups) == 2000 and groups == sorted(groups) and len(reads) == 2 * len(set(groups))


# ----------------------------------------------------------------------------- rescaled jobs


def rescaled(meta: StateMeta) -> StateMeta:
    """The same state bytes laid out as a job of twice the parallelism (same max parallelism): each
    subtask's key-group range split in two, as Flink assigns key-groups after a rescale."""
    operators = []
    for op in meta.operators:
        if not any(s.is_keyed for s in op.states):
            operators.append(op)
            continue
        states = []
        for state in op.states:
            if not state.is_keyed:
                states.append(state)
                continue
            locations = []
            for loc in state.locations:
                half = len(loc.offsets) // 2
                # The head ends where the tail's first non-empty key-group starts.
                cut = next(o for o in loc.offsets[half:] if o)
                head_stream = (
                    dataclasses.replace(loc.stream, length=cut)
                    if isinstance(loc.stream, InlineStream)
                    else dataclasses.replace(loc.stream, size=cut)
                )
                locations.append(
                    dataclasses.replace(loc, subtask=2 * loc.subtask, stream=head_stream, offsets=loc.offsets[:half])
                )
                locations.append(
                    dataclasses.replace(
                        loc,
                        subtask=2 * loc.subtask + 1,
                        start_key_group=loc.start_key_group + half,
                        offsets=loc.offsets[half:],
                    )
                )
            states.append(dataclasses.replace(state, locations=tuple(locations)))
        operators.append(dataclasses.replace(op, parallelism=2 * op.parallelism, states=tuple(states)))
    return dataclasses.replace(meta, operators=tuple(operators))


@pytest.mark.parametrize("case", ["sql_groupby_hashmap_2.3", "sql_groupby_compressed_2.3", "datastream_thread_2.3"])
def test_rescaled_job_same_state_has_no_changes(case):
    meta = load_state_meta(savepoint_dir(case))
    wider = rescaled(meta)
    keyed = [(op, s) for op, s in wider.states() if s.is_keyed and s.locations]
    assert keyed and all(len(s.locations) == 2 * op.parallelism // 2 for op, s in keyed)
    # The re-laid-out savepoint reads the same rows (a check of the test's own layout).
    name = keyed[0][1].name
    assert (
        SavepointReader(wider).table(name, keyed[0][0].id).to_pylist()
        == SavepointReader(meta).table(name, keyed[0][0].id).to_pylist()
    )
    diff = diff_savepoints(meta, wider)
    assert list(diff.changes()) == []
    assert all(e.status == COMPARED for e in diff.summary())
    assert sum(e.unchanged for e in diff.summary()) > 0


def test_rescaled_job_diff_equals_the_expected_changes():
    case_a, case_b = "sql_groupby_hashmap_2.3", "sql_groupby_compressed_2.3"
    diff = diff_savepoints(rescaled(load_state_meta(savepoint_dir(case_a))), str(savepoint_dir(case_b)))
    got, want = got_changes(diff), expected_changes(case_a, case_b)
    for name, changes in want.items():
        assert {k: got[name][k] for k in (ADDED, REMOVED, CHANGED)} == {
            k: changes[k] for k in (ADDED, REMOVED, CHANGED)
        }


# ----------------------------------------------------------------------------- what cannot be compared


def test_other_max_parallelism_and_changed_kind_are_reasons_not_errors():
    # Both joins keep left-records and right-records, in other layouts and max parallelism 256 vs 128.
    diff = diff_savepoints(str(savepoint_dir("sql_join_2.3")), str(savepoint_dir("sql_types_2.3")))
    by_state = {e.state: e for e in diff.summary() if e.kind == "keyed" and e.a and e.b}
    left, right = by_state["left-records"], by_state["right-records"]
    assert left.status == NOT_COMPARED and "max parallelism changed: 256 -> 128" in left.reason
    assert right.status == NOT_COMPARED and "kind changed" in right.reason
    assert not [c for c in diff.changes() if c.state in ("left-records", "right-records")]


def test_changed_type_is_a_reason():
    diff = diff_savepoints(
        str(savepoint_dir("sql_groupby_hashmap_2.3")), str(savepoint_dir("sql_types_2.3")), states=["accState"]
    )
    [entry] = [e for e in diff.summary() if e.a and e.b]
    assert entry.status == NOT_COMPARED
    assert entry.reason.startswith("the type changed: key ROW<STRING> -> ROW<STRING, INTEGER>")


def test_state_in_one_savepoint_only():
    diff = diff_savepoints(
        str(savepoint_dir("sql_groupby_hashmap_2.3")), str(savepoint_dir("sql_types_2.3")), states=["agg0$map"]
    )
    [entry] = diff.summary()
    assert entry.status == "only in B" and entry.b is not None


def test_unknown_state_on_both_sides_is_an_error():
    with pytest.raises(LookupFailedError, match="unknown state"):
        diff_savepoints(
            str(savepoint_dir("sql_groupby_hashmap_2.3")),
            str(savepoint_dir("sql_groupby_rocksdb_2.3")),
            states=["accStat"],
        )


# ----------------------------------------------------------------------------- CLI


def test_cli_diff_jsonl_and_table():
    a, b = str(savepoint_dir("sql_groupby_hashmap_1.20")), str(savepoint_dir("sql_groupby_rocksdb_2.3"))
    result = statecat("diff", a, b, "--format", "jsonl", "--state", "accState")
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    changes = [line for line in lines if line["type"] == "change"]
    want = expected_changes("sql_groupby_hashmap_1.20", "sql_groupby_rocksdb_2.3")
    [state] = [v for (_, name), v in want.items() if name == "accState"]
    assert len(changes) == len(state[CHANGED]) and {c["change"] for c in changes} == {CHANGED}
    [summary] = [line for line in lines if line["type"] == "state"]
    assert summary["changed"] == len(state[CHANGED]) and summary["status"] == COMPARED
    table = statecat("diff", a, b)
    assert table.returncode == 0, table.stderr
    # The source's enumerator checkpoint (one blob naming the job's input files) changed as well.
    assert f"0 added, 0 removed, {len(state[CHANGED]) + 1} changed" in table.stdout
    assert len([line for line in table.stdout.splitlines() if line.startswith("changed  ")]) == len(state[CHANGED]) + 1


def test_cli_diff_reason_rows_in_csv():
    result = statecat(
        "diff",
        str(savepoint_dir("sql_join_2.3")),
        str(savepoint_dir("sql_types_2.3")),
        "--format",
        "csv",
        "--state",
        "left-records",
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "operator,state,change,key,namespace,old,new,reason"
    assert len(lines) == 2 and "not compared" in lines[1] and "max parallelism changed" in lines[1]


@pytest.mark.parametrize(
    "args",
    [
        ("/no/such/a", str(savepoint_dir("sql_join_2.3"))),
        (str(savepoint_dir("sql_join_2.3")), str(savepoint_dir("sql_join_2.3")), "--state", "nope"),
    ],
)
def test_cli_diff_errors_are_one_line_exit_2(args):
    result = statecat("diff", *args)
    assert result.returncode == 2
    assert result.stderr.startswith("statecat: error: ") and len(result.stderr.strip().splitlines()) == 1
