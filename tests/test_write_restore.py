"""Savepoints statecat writes, restored by real Flink: the job's output continues from exactly the
edited state. Ground truth is the fixture's expected.json (computed from the job's input) with the
edit applied in plain Python, never statecat's reader; the restore harness is
tests/fixtures/restore.py (proven on unedited savepoints by tests/test_restore_harness.py)."""

from __future__ import annotations

import copy
from collections import Counter

import pytest

from tests.fixtures.edits import write_savepoint
from tests.fixtures.expected import load_expected, phases, savepoint_dir
from tests.fixtures.restore import restore_and_continue
from tests.test_restore_harness import (
    GROUPBY_EXTRA,
    KEYED_EXTRA,
    TIMEOUT,
    WINDOW_ENDS,
    WINDOW_TICK,
    _joined,
    _per_key,
    _state_rows,
    _windows,
    groupby_changelog,
    join_output,
    join_state,
    keyed_outputs,
    pojo_outputs,
    pojo_states,
    window_output,
    window_state,
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


def test_keys_copied_back_from_older_checkpoints(tmp_path):
    """Two keys' state put back as older retained checkpoints had it: DELETE, then INSERT ... SELECT
    from a view of the older checkpoint's table in the same Spark session. key_662 comes from
    phase 1's incremental RocksDB checkpoint, key_700 from phase 2's (which shares phase 1's SST
    files); the restored GROUP BY retracts exactly those older values."""
    from statecat.catalog.servers.sessions import session

    case = "sql_groupby_successive_2.3"
    first, second, last = phases(case)
    copied = {"key_662": (first, "older_phase_1"), "key_700": (second, "older_phase_2")}
    spark = session()
    for phase, view in copied.values():
        reader = spark.read.format("flinkstate").option("path", str(phase["checkpoint"])).option("state", "accState")
        reader.load().createOrReplaceTempView(view)
    sql = [f"DELETE FROM accstate WHERE key IN ({', '.join(repr(k) for k in copied)})"]
    sql += [f"INSERT INTO accstate SELECT * FROM {view} WHERE key = '{key}'" for key, (_, view) in copied.items()]
    dst = tmp_path / "copied"
    try:
        result = write_savepoint(str(last["savepoint"]), str(dst), sql=sql)
    finally:
        for _, view in copied.values():
            spark.catalog.dropTempView(view)
    assert [s.matched for s in result.statements] == [2, 1, 1]
    acc = _phase_state(last)
    for key, (phase, _) in copied.items():
        assert _phase_state(phase)[key] != acc[key]  # the key did change since
        acc[key] = _phase_state(phase)[key]
    out = restore_and_continue(case, dst, GROUPBY_EXTRA, timeout=TIMEOUT)
    _check_groupby(out, acc)
    for key, (phase, _) in copied.items():
        first_row = out[[r["word"] for r in out].index(key)]
        older = _phase_state(phase)[key]
        assert first_row == {"op": "-U", "word": key, "cnt": older["f0"], "total": older["f1"]}


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


EVENT_BASE = 1_700_000_000_000  # datastream_keyed.py: a key's event timer at EVENT_BASE + v0 * 1000
K17_SECOND_TIMER = EVENT_BASE + 999_000
ELEMENT_EDITS = [
    # ListState: one element removed (array_remove; filter), the others kept in order
    "UPDATE items SET value = array_remove(value, 't3:616') WHERE key = 'k_0'",
    "UPDATE items SET value = filter(value, x -> x != 't3:931') WHERE key = 'k_17'",
    # MapState: one entry changed, one removed, one added; the others kept
    "UPDATE per_tag SET value = transform_values(value, (k, v) -> IF(k = 't3', v + 1000, v)) WHERE key = 'k_0'",
    "UPDATE per_tag SET value = map_filter(value, (k, v) -> k != 't1') WHERE key = 'k_33'",
    "UPDATE per_tag SET value = map_concat(value, map('t7', 7L)) WHERE key = 'k_17'",
    # a second event-time timer for a key that has one
    f"INSERT INTO timer_state_event_user_timers VALUES ('k_17', NULL, {K17_SECOND_TIMER})",
]


def _remove_one(items: list, element: str) -> list:
    assert items.count(element) == 1, (element, items)
    return [x for x in items if x != element]


def _fired_event_timers(case: str, states: dict, extra: list) -> Counter:
    """(key, timestamp) of every event-time timer a MAX_WATERMARK fires after `extra`: the stored
    ones (expected.json), and one per key new in `extra` (the function registers it on a key's first
    record, at EVENT_BASE + v * 1000)."""
    fired = Counter(_state_rows(case, "_timer_state/event_user-timers").items())
    seen = set(states["count"])
    for key, v, _ in extra:
        if key not in seen:
            fired[key, EVENT_BASE + v * 1000] += 1
            seen.add(key)
    return fired


def test_list_and_map_elements_and_a_second_timer(tmp_path):
    """Element-wise edits of a ListState and a MapState (Spark's array_remove, filter,
    transform_values, map_filter, map_concat) and a second event-time timer for a key: the restored
    PyFlink function reads exactly the edited list and map, and a drained stop (MAX_WATERMARK)
    fires both of k_17's timers, once each, with every other stored timer."""
    case = "datastream_thread_2.3"
    dst = tmp_path / "edited"
    result = write_savepoint(str(savepoint_dir(case)), str(dst), sql=ELEMENT_EDITS)
    assert [s.matched for s in result.statements] == [1] * len(ELEMENT_EDITS)
    assert result.warnings == []
    out = restore_and_continue(case, dst, KEYED_EXTRA, timeout=TIMEOUT, job_args=["--fire-event-timers"])
    records = [r for r in out if "timer" not in r]
    timers = [r for r in out if "timer" in r]

    states = {n: dict(_state_rows(case, n)) for n in ("count", "items", "per_tag", "max_v", "avg", "info")}
    items, per_tag = states["items"], states["per_tag"]
    items["k_0"] = _remove_one(items["k_0"], "t3:616")
    items["k_17"] = _remove_one(items["k_17"], "t3:931")
    per_tag["k_0"] = {**per_tag["k_0"], "t3": per_tag["k_0"]["t3"] + 1000}
    per_tag["k_33"] = {k: v for k, v in per_tag["k_33"].items() if k != "t1"}
    per_tag["k_17"] = {**per_tag["k_17"], "t7": 7}
    want = keyed_outputs(case, KEYED_EXTRA, states)
    assert _per_key(records, "key") == _per_key(want, "key")
    assert len(records) == len(want)

    stored_items, stored_tags = _state_rows(case, "items"), _state_rows(case, "per_tag")
    k0 = _per_key(records, "key")["k_0"][0]
    assert k0["items"] == [x for x in stored_items["k_0"] if x != "t3:616"] + ["t1:5"]
    assert k0["per_tag"] == {
        **stored_tags["k_0"],
        "t3": stored_tags["k_0"]["t3"] + 1000,
        "t1": stored_tags["k_0"]["t1"] + 5,
    }
    k17 = _per_key(records, "key")["k_17"][0]
    assert k17["items"] == [x for x in stored_items["k_17"] if x != "t3:931"] + ["t0:3"]
    assert k17["per_tag"] == {**stored_tags["k_17"], "t0": stored_tags["k_17"]["t0"] + 3, "t7": 7}
    assert _per_key(records, "key")["k_33"][0]["per_tag"] == {"t0": stored_tags["k_33"]["t0"], "t1": 0}

    assert {r["domain"] for r in timers} == {"event"}  # processing timers are in 2100
    fired = Counter((r["key"], r["timer"]) for r in timers)
    want_fired = _fired_event_timers(case, states, KEYED_EXTRA)
    want_fired["k_17", K17_SECOND_TIMER] += 1
    assert fired == want_fired
    assert sorted(t for k, t in fired.elements() if k == "k_17") == sorted(
        [_state_rows(case, "_timer_state/event_user-timers")["k_17"], K17_SECOND_TIMER]
    )


def test_restore_under_a_new_uid(tmp_path):
    """A savepoint whose keyed function got a new uid restores into the job deployed with it."""
    case = "datastream_thread_2.3"
    dst = tmp_path / "renamed"
    write_savepoint(str(savepoint_dir(case)), str(dst), set_uids={"keyed-fn": "renamed-fn"})
    out = restore_and_continue(case, dst, KEYED_EXTRA, timeout=TIMEOUT, job_args=["--keyed-uid", "renamed-fn"])
    want = keyed_outputs(case, KEYED_EXTRA)
    assert _per_key(out, "key") == _per_key(want, "key")


# --------------------------------------------------------------------------- SQL window, join, Java POJO

E1, E2, E3 = WINDOW_ENDS  # the windows sql_window_2.3 left open (see test_restore_harness)

WINDOW_EDITS = [
    # an open window of w_0: its accumulator fires with the edit plus the new row
    f"UPDATE window_aggs SET value.f0 = value.f0 + 100, value.f1 = value.f1 + 1000 WHERE key = 'w_0' AND namespace = {E2}",
    # w_1's only (open) window, with its timer: nothing fires for w_1
    f"DELETE FROM window_aggs WHERE key = 'w_1' AND namespace = {E2}",
    f"DELETE FROM timer_state_event_window_timers WHERE key = 'w_1' AND namespace = {E2}",
    # a window of w_2 without its timer, then a new row in it: it starts again from nothing
    f"DELETE FROM window_aggs WHERE key = 'w_2' AND namespace = {E3}",
    # a window of w_5 without its timer and no new row: the timer still fires, on an empty
    # accumulator, and Flink prints (0, NULL) for the window (statecat warns about it, and about
    # w_2's, before writing)
    f"DELETE FROM window_aggs WHERE key = 'w_5' AND namespace = {E3}",
    # a new key's window with its timer
    f"INSERT INTO window_aggs VALUES ('w_ins', {E2}, named_struct('f0', 7L, 'f1', 70L))",
    f"INSERT INTO timer_state_event_window_timers VALUES ('w_ins', {E2}, {E2 - 1})",
]
WINDOW_EDITED_EXTRA = [("w_0", 5, E2 - 10_000), ("w_2", 9, E3 - 2_000), WINDOW_TICK]


def test_window_fires_the_edited_accumulators(tmp_path):
    case = "sql_window_2.3"
    dst = tmp_path / "edited"
    result = write_savepoint(str(savepoint_dir(case)), str(dst), sql=WINDOW_EDITS)
    assert [s.matched for s in result.statements] == [1] * len(WINDOW_EDITS)
    (warning,) = result.warnings
    assert f"('w_2', {E3})" in warning and f"('w_5', {E3})" in warning and "'w_1'" not in warning
    out = restore_and_continue(case, dst, WINDOW_EDITED_EXTRA, timeout=TIMEOUT)

    acc, timers, watermark = window_state(case)
    acc["w_0", E2] = (acc["w_0", E2][0] + 100, acc["w_0", E2][1] + 1000)
    del acc["w_1", E2], acc["w_2", E3], acc["w_5", E3]
    timers.discard(("w_1", E2))
    acc["w_ins", E2] = (7, 70)
    timers.add(("w_ins", E2))
    want = window_output(acc, timers, WINDOW_EDITED_EXTRA, watermark=watermark)
    assert _windows(out) == _windows(want)
    fired = {(r["k"], r["window_end"]): (r["cnt"], r["total"]) for r in out}
    assert fired["w_0", E2] == (window_state(case)[0]["w_0", E2][0] + 101, window_state(case)[0]["w_0", E2][1] + 1005)
    assert not [k for k in fired if k[0] == "w_1"]
    assert fired["w_2", E3] == (1, 9)
    assert fired["w_5", E3] == (0, None)
    assert fired["w_ins", E2] == (7, 70)


def test_window_watermark_edit_and_new_max_parallelism(tmp_path):
    """The operator's union list state `watermark` edited: the restored WindowAggregate takes the
    least entry as its progress, so a row of the window ending at E1 is now late and dropped
    (restored unedited, the same row is counted: test_window_fires_the_restored_open_windows).
    With a new max parallelism, every window and its timer moves to its new key-group."""
    case = "sql_window_2.3"
    dst = tmp_path / "edited"
    write_savepoint(str(savepoint_dir(case)), str(dst), sql=[f"UPDATE watermark SET value = {E1}"], max_parallelism=256)
    extra = [("w_0", 5, E1 - 20_000), ("w_0", 6, E2 - 20_000), WINDOW_TICK]
    out = restore_and_continue(case, dst, extra, max_parallelism=256, timeout=TIMEOUT)
    acc, timers, _ = window_state(case)
    assert _windows(out) == _windows(window_output(acc, timers, extra, watermark=E1))
    fired = {(r["k"], r["window_end"]): (r["cnt"], r["total"]) for r in out}
    assert fired["w_0", E1] == acc["w_0", E1]  # the late row is not in it
    assert fired["w_0", E2] == (acc["w_0", E2][0] + 1, acc["w_0", E2][1] + 6)
    assert set(out.subtasks) == {1, 2}


JOIN_EDITS = [
    # j_0's b side: one record, edited (id 1140 gone)
    "UPDATE right_records SET value = map(named_struct('f0', 1004L),"
    " named_struct('f0', 'j_0', 'f1', 1004L, 'f2', 'vEDIT')) WHERE key = 'j_0'",
    # j_1's a side gone: a new b row meets nothing, a new a row the stored b rows
    "DELETE FROM left_records WHERE key = 'j_1'",
    # j_100's a side: one record counted 3 times
    "UPDATE left_records SET value = map(named_struct('f0', 'j_100', 'f1', 77L, 'f2', 7L), 3) WHERE key = 'j_100'",
    # j_101's b side gone
    "DELETE FROM right_records WHERE key = 'j_101'",
    # j_104's a side: one stored record kept, its count + 10, the other dropped
    "UPDATE left_records SET value = map(named_struct('f0', 'j_104', 'f1', 19L, 'f2', 173L),"
    " value[named_struct('f0', 'j_104', 'f1', 19L, 'f2', 173L)] + 10) WHERE key = 'j_104'",
    # a new key's b side
    "INSERT INTO right_records (key, value) VALUES ('j_ins',"
    " map(named_struct('f0', 7000L), named_struct('f0', 'j_ins', 'f1', 7000L, 'f2', 'vins')))",
]
JOIN_EDITED_EXTRA = [
    ("a", "j_0", 9001, 1),
    ("b", "j_1", 5001, "vnew"),
    ("a", "j_1", 9005, 5),
    ("b", "j_100", 5002, "vx"),
    ("a", "j_101", 9003, 3),
    ("b", "j_104", 5004, "vz"),
    ("a", "j_ins", 9006, 6),
]


def test_join_pairs_new_rows_with_the_edited_sides(tmp_path):
    case = "sql_join_2.3"
    dst = tmp_path / "edited"
    result = write_savepoint(str(savepoint_dir(case)), str(dst), sql=JOIN_EDITS)
    assert [s.matched for s in result.statements] == [1] * len(JOIN_EDITS)
    out = restore_and_continue(case, dst, JOIN_EDITED_EXTRA, timeout=TIMEOUT)

    left, right = join_state(case)
    assert left["j_104"][("j_104", 19, 173)] == 3 and ("j_101" in left) and ("j_1" in right)
    right["j_0"] = {1004: ("j_0", 1004, "vEDIT")}
    del left["j_1"], right["j_101"]
    left["j_100"] = Counter({("j_100", 77, 7): 3})
    left["j_104"] = Counter({("j_104", 19, 173): 13})
    right["j_ins"] = {7000: ("j_ins", 7000, "vins")}
    want = join_output(left, right, JOIN_EDITED_EXTRA)
    got = _joined(out)
    assert got == want
    assert got[("j_0", 9001, 1, 1004, "vEDIT")] == 1 and sum(n for r, n in got.items() if r[0] == "j_0") == 1
    # j_1's stored a side is gone: the new b row meets the new a row only
    assert [r for r in got if r[0] == "j_1" and r[3] == 5001] == [("j_1", 9005, 5, 5001, "vnew")]
    assert got[("j_100", 77, 7, 5002, "vx")] == 3
    assert not [r for r in got if r[0] == "j_101"]
    assert got[("j_104", 19, 173, 5004, "vz")] == 13
    assert got[("j_ins", 9006, 6, 7000, "vins")] == 1


POJO_EDITS = [
    "UPDATE summary SET value.count = value.count + 100 WHERE key = 'k_1'",
    "UPDATE history SET value = array(named_struct('f0', 'edited', 'f1', 1L), named_struct('f0', 'x', 'f1', -2L))"
    " WHERE key = 'k_1'",
    "UPDATE per_name SET value = map('ann', named_struct('count', 5L, 'name', 'ann', 'total', 1.5D)) WHERE key = 'k_1'",
    "UPDATE summary SET value.name = NULL, value.total = value.total * 2 WHERE key = 'k_3'",
    "DELETE FROM summary WHERE key = 'k_50'",
    "INSERT INTO summary (key, value) VALUES ('k_ins', named_struct('count', 41L, 'name', 'ins', 'total', 0.25D))",
    "INSERT INTO history (key, value) VALUES ('k_ins', array(named_struct('f0', 'h', 'f1', 0L)))",
]
POJO_EDITED_EXTRA = [
    ("k_1", "ann", 8),
    ("k_3", "", 4),
    ("k_50", "zoë", 3),
    ("k_ins", "bob", 2),
    ("k_new", "", 1),
    ("k_1", "bob", -6),
]


def _edited_pojo(case: str) -> dict:
    states = pojo_states(case)
    summary, history, per_name = states["summary"], states["history"], states["per_name"]
    summary["k_1"] = {**summary["k_1"], "count": summary["k_1"]["count"] + 100}
    history["k_1"] = [{"f0": "edited", "f1": 1}, {"f0": "x", "f1": -2}]
    per_name["k_1"] = {"ann": {"count": 5, "name": "ann", "total": 1.5}}
    summary["k_3"] = {**summary["k_3"], "name": None, "total": summary["k_3"]["total"] * 2}
    del summary["k_50"]  # its history and per_name stay
    summary["k_ins"] = {"count": 41, "name": "ins", "total": 0.25}
    history["k_ins"] = [{"f0": "h", "f1": 0}]
    return states


@pytest.mark.parametrize(
    "case,backend",
    [
        ("datastream_java_pojo_2.3", None),  # hashmap
        ("datastream_java_pojo_2.3", "rocksdb"),
        ("datastream_java_pojo_1.20", None),  # rocksdb
        ("datastream_java_pojo_1.20", "hashmap"),
    ],
)
def test_java_pojo_function_sees_the_edited_states(tmp_path, case, backend):
    dst = tmp_path / "edited"
    result = write_savepoint(str(savepoint_dir(case)), str(dst), sql=POJO_EDITS)
    assert [s.matched for s in result.statements] == [1] * len(POJO_EDITS)
    out = restore_and_continue(case, dst, POJO_EDITED_EXTRA, backend=backend, timeout=TIMEOUT)
    want = pojo_outputs(_edited_pojo(case), POJO_EDITED_EXTRA)
    assert _per_key(out, "key") == _per_key(want, "key")
    assert len(out) == len(want)
    k1 = _per_key(out, "key")["k_1"][0]
    assert k1["summary"]["count"] == pojo_states(case)["summary"]["k_1"]["count"] + 101
    assert k1["history"] == [["edited", 1], ["x", -2], ["ann", 8]]
    assert k1["per_name"] == {"ann": {"name": "ann", "count": 6, "total": 3.5}}
    k50 = _per_key(out, "key")["k_50"][0]
    assert k50["new"] is True and k50["summary"] == {"name": "zoë", "count": 1, "total": 0.75}
    assert k50["history"][:-1] == [[h["f0"], h["f1"]] for h in pojo_states(case)["history"]["k_50"]]
    assert _per_key(out, "key")["k_ins"][0]["summary"] == {"name": "bob", "count": 42, "total": 0.75}


# --------------------------------------------------------------------------- Kryo values (Java type matrix)

KRYO_EDITS = [
    # fields of k_0's Rec: ints, a string, a null box set, the JDK list (with a null) and map
    # replaced, the Labelled child and the registered Stamp replaced
    "UPDATE kryo_value SET value.i = value.i + 1000, value.ascii = 'edited ✓', value.boxed = 77,"
    " value.list = array('x', NULL, 'zoë'), value.map = map('x', 7, 'y', NULL),"
    " value.child = named_struct('base', 'b-edit', 'weight', -1),"
    " value.stamp = named_struct('at', value.stamp.at + 1, 'by', 'edited-by') WHERE key = 'k_0'",
    # a null child (and string) set: Kryo now writes a Labelled where it wrote null
    "UPDATE kryo_value SET value.child = named_struct('base', 'new child', 'weight', 5), value.none = 'set'"
    " WHERE key = 'k_1'",
    # a child and a box cleared
    "UPDATE kryo_value SET value.child = NULL, value.boxed = NULL WHERE key = 'k_2'",
    # a new key's value: k_3's Rec, copied
    "INSERT INTO kryo_value (key, value) SELECT 'k_ins', value FROM kryo_value WHERE key = 'k_3'",
    # a Kryo ListState's element removed, a Kryo MapState's entry replaced and another removed
    "UPDATE kryo_list SET value = filter(value, (r, i) -> i != 1) WHERE key = 'k_0'",
    "UPDATE kryo_map SET value = map_filter(transform_values(value, (k, v) -> IF(k = '', value['ann'], v)),"
    " (k, v) -> k != 'zoë') WHERE key = 'k_0'",
]
KRYO_EXTRA = [  # (key, n, x, s), n past the fixture's records
    ("k_0", 1000, 123, "ann"),
    ("k_1", 1001, 10, "zoë"),
    ("k_2", 1002, 4, ""),
    ("k_3", 1003, 1, "日本"),  # unedited
    ("k_ins", 1004, 2, "b"),
    ("k_0", 1005, -7, "b"),
    ("k_new", 1006, 5, "b"),
]


def _matrix_states(case: str) -> dict:
    """{state: {key: value}} of the matrix states the output shows, from expected.json."""
    names = ("count", "names", "name_counts", "kryo_value", "kryo_list", "kryo_map")
    return {n: copy.deepcopy(_state_rows(case, n)) for n in names}


def _edited_matrix(case: str) -> dict:
    """KRYO_EDITS applied to the matrix states in plain Python."""
    st = _matrix_states(case)
    value, kryo_list, kryo_map = st["kryo_value"], st["kryo_list"], st["kryo_map"]
    k0 = value["k_0"]
    k0.update(
        i=k0["i"] + 1000,
        ascii="edited ✓",
        boxed=77,
        list=["x", None, "zoë"],
        map={"x": 7, "y": None},
        child={"base": "b-edit", "weight": -1},
        stamp={"at": k0["stamp"]["at"] + 1, "by": "edited-by"},
    )
    value["k_1"].update(child={"base": "new child", "weight": 5}, none="set")
    value["k_2"].update(child=None, boxed=None)
    value["k_ins"] = copy.deepcopy(value["k_3"])
    del kryo_list["k_0"][1]
    kryo_map["k_0"] = {
        k: copy.deepcopy(kryo_map["k_0"]["ann"] if k == "" else v) for k, v in kryo_map["k_0"].items() if k != "zoë"
    }
    return st


def matrix_outputs(states: dict, extra: list) -> list:
    """What JavaTypeMatrix.java's function prints per record of `extra` on top of `states`
    (_matrix_states' form): the record, the count and Kryo value before its update, the Kryo list
    and map after it (the new Rec as tests/fixtures/matrix_kinds.py builds it)."""
    from tests.fixtures.matrix_kinds import JavaTypeMatrix

    st = copy.deepcopy(states)
    out = []
    for key, n, x, s in extra:
        before, value_before = st["count"].get(key), st["kryo_value"].get(key)
        c = (before or 0) + 1
        names = st["names"].setdefault(key, [])
        names.append(s)
        counts = st["name_counts"].setdefault(key, {})
        counts[s] = counts.get(s, 0) + 1
        rec = JavaTypeMatrix.rec(n, x, s, c, names, counts)
        st["count"][key] = c
        st["kryo_value"][key] = rec
        st["kryo_list"].setdefault(key, []).append(rec)
        st["kryo_map"].setdefault(key, {})[s] = rec
        out.append(
            {
                "key": key,
                "n": n,
                "x": x,
                "s": s,
                "count_before": before,
                "kryo_value_before": copy.deepcopy(value_before),
                "kryo_list": copy.deepcopy(st["kryo_list"][key]),
                "kryo_map": copy.deepcopy(st["kryo_map"][key]),
            }
        )
    return out


@pytest.mark.parametrize(
    "case",
    [
        "java_type_matrix_2.3_hashmap",  # Kryo 5
        "java_type_matrix_1.20_rocksdb",  # Kryo 2.24 (other byte order), RocksDB
    ],
)
def test_java_function_reads_the_edited_kryo_values(tmp_path, case):
    """Kryo values (JavaTypeMatrix.Rec: FieldSerializer, a registered class, a subclass, JDK list
    and map, a back-reference) edited with the job's classes on the classpath: the restored Java
    function's own Kryo reads exactly the edited Recs, and every other state of the matrix (POJOs,
    tuples, rows, enums, TTL, a custom Kryo serializer's bytes) restores with them."""
    from statecat.statemeta.descriptors import DescriptorSet
    from tests.fixtures.runtime import java_job_jar

    jar = java_job_jar("java_type_matrix", load_expected(case)["flink_version"])
    dst = tmp_path / "edited"
    result = write_savepoint(
        str(savepoint_dir(case)), str(dst), sql=KRYO_EDITS, descriptors=DescriptorSet({}).with_classpath([str(jar)])
    )
    assert [s.matched for s in result.statements] == [1] * len(KRYO_EDITS)
    out = restore_and_continue(case, dst, KRYO_EXTRA, timeout=TIMEOUT)
    edited = _edited_matrix(case)
    want = matrix_outputs(edited, KRYO_EXTRA)
    assert _per_key(out, "key") == _per_key(want, "key")
    assert len(out) == len(want)
    got = _per_key(out, "key")
    k0 = got["k_0"][0]["kryo_value_before"]
    assert (k0["i"], k0["ascii"], k0["boxed"], k0["list"], k0["map"]) == (
        _matrix_states(case)["kryo_value"]["k_0"]["i"] + 1000,
        "edited ✓",
        77,
        ["x", None, "zoë"],
        {"x": 7, "y": None},
    )
    assert got["k_1"][0]["kryo_value_before"]["child"] == {"base": "new child", "weight": 5}
    assert got["k_2"][0]["kryo_value_before"]["child"] is None
    assert got["k_ins"][0]["kryo_value_before"] == _matrix_states(case)["kryo_value"]["k_3"]
    assert got["k_ins"][0]["count_before"] is None
    assert len(got["k_0"][0]["kryo_list"]) == len(_matrix_states(case)["kryo_list"]["k_0"])  # one gone, one added
    assert "zoë" not in got["k_0"][0]["kryo_map"] and got["k_0"][0]["kryo_map"][""] == edited["kryo_map"]["k_0"]["ann"]
