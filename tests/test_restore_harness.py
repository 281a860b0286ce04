"""The restore harness (tests/fixtures/restore.py) proven on the committed, UNEDITED fixture savepoints.

Real Flink restores each savepoint, reads a few more rows and prints its output; the output must
continue from exactly the state the fixture's expected.json gives (ground truth computed in plain
Python from the job's input), for keys on both subtasks, and a brand-new key must start from
nothing. A restore whose savepoint holds state the job cannot map must fail with Flink's reason.

One restore per case (every key checked in one run: a restore costs a JVM start, ~8-15 s);
runs one after the other. The harness bounds each run (its timeouts), as the generator does.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path

import pytest

from tests.fixtures.expected import iter_states, load_expected, savepoint_dir
from tests.fixtures.restore import RestoreError, restore_and_continue

pytestmark = pytest.mark.live_flink

TIMEOUT = 60  # seconds the job waits for its few rows; the harness adds start-up and stop time

# Keys present in every GROUP BY case below (key_500..key_799), key_662 twice, and a new key twice.
GROUPBY_EXTRA = [
    ("key_662", 5),
    ("brand_new_key", 7),
    ("key_500", -3),
    ("key_662", 1000),
    ("key_799", 0),
    ("key_700", 42),
    ("key_555", -1000),
    ("brand_new_key", -7),
]

# Keys k_0..k_59 are in both DataStream cases; k_0 twice, and a new key twice.
KEYED_EXTRA = [
    ("k_0", 5, "t1"),
    ("k_new", 7, "t2"),
    ("k_0", 1000, "t9"),
    ("k_17", 3, "t0"),
    ("k_59", 999, "t3"),
    ("k_33", 0, "t1"),
    ("k_new", 1, "t2"),
]


def _state_rows(case, name):
    """{key: value} of a state, by name or declared name (process mode: python-state-<name>)."""
    (state,) = [s for _, s in iter_states(load_expected(case)) if name in (s["name"], s.get("declared_name"))]
    return {r["key"]: r["value"] for r in state["rows"]}


def _per_key(rows, field):
    out = {}
    for r in rows:
        out.setdefault(r[field], []).append(r)
    return out


def _fingerprint(directory):
    return {
        p.relative_to(directory).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(Path(directory).rglob("*"))
        if p.is_file()
    }


def groupby_changelog(acc, extra):
    """The GROUP BY's changelog for `extra` on top of acc {word: {"f0": count, "f1": sum}}: a known
    word retracts its old row and emits the new one, a new word is inserted."""
    state = {w: (v["f0"], v["f1"]) for w, v in acc.items()}
    out = []
    for word, amount in extra:
        if word in state:
            c, t = state[word]
            out += [
                {"op": "-U", "word": word, "cnt": c, "total": t},
                {"op": "+U", "word": word, "cnt": c + 1, "total": t + amount},
            ]
        else:
            c, t = 0, 0
            out.append({"op": "+I", "word": word, "cnt": 1, "total": amount})
        state[word] = (c + 1, t + amount)
    return out


def keyed_outputs(case, extra, states=None):
    """What datastream_keyed.py's function prints per record of `extra`, its states taken from the
    case's expected.json, or from `states` ({state name: {key: value}}) where given."""
    names = ("count", "items", "per_tag", "max_v", "avg", "info")
    given = states or {}
    count, items, per_tag, max_v, avg, info = (given[n] if n in given else _state_rows(case, n) for n in names)
    state = {
        k: {
            "count": count[k],
            "items": list(items[k]),
            "per_tag": dict(per_tag[k]),
            "max_v": max_v[k],
            "acc": list(avg[k]),
            "info": info[k],
        }
        for k in count
    }
    out = []
    for key, v, tag in extra:
        new = key not in state
        s = state.setdefault(key, {"count": 0, "items": [], "per_tag": {}, "max_v": None, "acc": [0, 0], "info": None})
        s["count"] += 1
        s["items"].append(f"{tag}:{v}")
        s["per_tag"][tag] = s["per_tag"].get(tag, 0) + v
        s["max_v"] = v if s["max_v"] is None else max(s["max_v"], v)
        s["acc"] = [s["acc"][0] + v, s["acc"][1] + 1]
        i = s["info"]
        s["info"] = (
            {"first": v, "last": v, "span": [v, v]}
            if i is None
            else {"first": i["first"], "last": v, "span": [min(i["span"][0], v), max(i["span"][1], v)]}
        )
        out.append(
            {
                "key": key,
                "v": v,
                "tag": tag,
                "new": new,
                "count": s["count"],
                "items": list(s["items"]),
                "per_tag": dict(s["per_tag"]),
                "max_v": s["max_v"],
                "avg": s["acc"][0] / s["acc"][1],
                "info": dict(s["info"]),
            }
        )
    return out


@pytest.mark.parametrize("case", ["sql_groupby_hashmap_2.3", "sql_groupby_rocksdb_2.3", "sql_groupby_hashmap_1.20"])
def test_groupby_continues_from_the_restored_state(case):
    acc = _state_rows(case, "accState")
    before = _fingerprint(savepoint_dir(case))

    out = restore_and_continue(case, savepoint_dir(case), GROUPBY_EXTRA, timeout=TIMEOUT)

    # key_662's first output retracts exactly the (count, sum) of the ground truth
    assert out[[r["word"] for r in out].index("key_662")] == {
        "op": "-U",
        "word": "key_662",
        "cnt": acc["key_662"]["f0"],
        "total": acc["key_662"]["f1"],
    }
    # the new key starts from zero
    assert _per_key(out, "word")["brand_new_key"] == [
        {"op": "+I", "word": "brand_new_key", "cnt": 1, "total": 7},
        {"op": "-U", "word": "brand_new_key", "cnt": 1, "total": 7},
        {"op": "+U", "word": "brand_new_key", "cnt": 2, "total": 0},
    ]
    # the whole changelog, key by key (rows of different subtasks interleave)
    assert _per_key(out, "word") == _per_key(groupby_changelog(acc, GROUPBY_EXTRA), "word")
    assert len(out) == len(groupby_changelog(acc, GROUPBY_EXTRA))
    # both subtasks' key-group ranges were restored and used
    assert set(out.subtasks) == {1, 2}
    # NO_CLAIM: the committed savepoint is read, never written
    assert _fingerprint(savepoint_dir(case)) == before


# thread mode (2.3, 1.20: hashmap) and process mode (2.3: rocksdb, byte[] states of coder bytes)
@pytest.mark.parametrize("case", ["datastream_thread_2.3", "datastream_thread_1.20", "datastream_process_2.3"])
def test_keyed_function_sees_the_restored_states(case):
    out = restore_and_continue(case, savepoint_dir(case), KEYED_EXTRA, timeout=TIMEOUT)

    want = keyed_outputs(case, KEYED_EXTRA)
    assert _per_key(out, "key") == _per_key(want, "key")
    assert len(out) == len(want)
    assert set(out.subtasks) == {1, 2}
    # a restored key: its count, list and map continue; a new key starts empty
    k0 = _per_key(out, "key")["k_0"][0]
    assert k0["count"] == _state_rows(case, "count")["k_0"] + 1
    assert k0["items"] == [*_state_rows(case, "items")["k_0"], "t1:5"]
    assert _per_key(out, "key")["k_new"][0]["new"] is True
    assert _per_key(out, "key")["k_new"][0]["items"] == ["t2:7"]


def test_state_the_job_cannot_map_fails_the_restore():
    """The DataStream savepoint's operators (uids keyed-fn, lines) are not in the GROUP BY job:
    with ignore-unclaimed-state false Flink refuses, and the error says why."""
    with pytest.raises(RestoreError) as err:
        restore_and_continue(
            "sql_groupby_hashmap_2.3", savepoint_dir("datastream_thread_2.3"), [("key_1", 1)], timeout=TIMEOUT
        )
    assert "Cannot map checkpoint/savepoint state for operator" in err.value.root_cause
    assert str(err.value).startswith("sql_groupby (Flink 2.3.0) restored from ")
    assert "Cannot map checkpoint/savepoint state" in str(err.value).splitlines()[0]


# --------------------------------------------------------------------------- SQL window, join, Java POJO

# sql_window_2.3: the watermark at the savepoint is 00:05:29.606 (max ts - 150 s); the windows ending
# at 00:06, 00:07 and 00:08 of 2024-01-01 (UTC) are open. A row at 00:10:30 advances the restored
# job's watermark to 00:08:00 (its ts - delay), which fires all three; its own window stays open.
WINDOW_ENDS = (1704067560000, 1704067620000, 1704067680000)
WINDOW_TICK = ("w_tick", 1, WINDOW_ENDS[2] + 150_000)
WINDOW_EXTRA = [
    ("w_0", 5, WINDOW_ENDS[0] - 20_000),  # a stored window gets a row
    ("w_new", 7, WINDOW_ENDS[1] - 30_000),  # a new key's window
    ("w_3", 11, WINDOW_ENDS[2] - 1_000),
    WINDOW_TICK,
]


def window_state(case):
    """({(k, window end): (cnt, total)} of window-aggs, {(k, window end)} of the event timers,
    the operator's restored watermark: the least of its subtasks' union list entries)."""
    exp = load_expected(case)
    states = {s["name"]: s["rows"] for _, s in iter_states(exp)}
    acc = {(r["key"], r["namespace"]): (r["value"]["f0"], r["value"]["f1"]) for r in states["window-aggs"]}
    timers = {(r["key"], r["namespace"]) for r in states["_timer_state/event_window-timers"]}
    return acc, timers, min(r["value"] for r in states["watermark"])


def window_output(acc, timers, extra, *, watermark, window_s=60, delay_s=150):
    """What the restored WindowAggregate prints for `extra` (rows in event-time order) on top of
    acc {(k, end): (cnt, total)} and the event timers {(k, end)}: a row whose window ended at the
    restored watermark (end - 1 <= watermark) is late and dropped; every other row adds to its
    window's accumulator (COUNT(*) and SUM; SUM of no rows is NULL) and registers its timer; once
    the watermark reaches max(ts) - delay, every window whose timer is due fires with its
    accumulator, or with an empty one (0, None) when the state is gone but the timer is not."""
    size = window_s * 1000
    acc, timers = dict(acc), set(timers)
    for k, v, ts in extra:
        end = ts - ts % size + size
        if end - 1 <= watermark:
            continue
        cnt, total = acc.get((k, end), (0, None))
        acc[(k, end)] = (cnt + 1, v if total is None else total + v)
        timers.add((k, end))
    fired_to = max(ts for _, _, ts in extra) - delay_s * 1000
    out = []
    for k, end in sorted(timers):
        if end - 1 <= fired_to:
            cnt, total = acc.get((k, end), (0, None))
            out.append({"op": "+I", "k": k, "window_start": end - size, "window_end": end, "cnt": cnt, "total": total})
    return out


def _windows(rows):
    return sorted(rows, key=lambda r: (r["k"], r["window_end"]))


def test_window_fires_the_restored_open_windows():
    case = "sql_window_2.3"
    acc, timers, watermark = window_state(case)
    out = restore_and_continue(case, savepoint_dir(case), WINDOW_EXTRA, timeout=TIMEOUT)
    want = window_output(acc, timers, WINDOW_EXTRA, watermark=watermark)
    # every stored open window fires once, with its stored accumulator plus the new rows
    assert _windows(out) == _windows(want)
    assert len(want) == len(acc) + 1  # + w_new's window; w_tick's stays open
    w0 = [r for r in out if r["k"] == "w_0" and r["window_end"] == WINDOW_ENDS[0]]
    assert [(r["cnt"], r["total"]) for r in w0] == [
        (acc["w_0", WINDOW_ENDS[0]][0] + 1, acc["w_0", WINDOW_ENDS[0]][1] + 5)
    ]
    assert set(out.subtasks) == {1, 2}


# sql_join_2.3: keys of both sides (j_0, j_1, j_100), of one side only (j_102: b only; j_10: a
# only), a new key; new ids only (b's unique key id: an existing id would replace its row).
JOIN_EXTRA = [
    ("a", "j_0", 9001, 1),
    ("b", "j_1", 5001, "vnew"),
    ("a", "j_100", 9002, 2),
    ("b", "j_100", 5002, "vx"),
    ("a", "j_102", 9003, 3),
    ("b", "j_10", 5003, "vy"),
    ("a", "j_brand_new", 9004, 4),
]


def join_state(case):
    """(left {k: Counter of (k, id, va) records}, right {k: {id: (k, id, vb)}}) of the Join."""
    states = {s["name"]: s["rows"] for _, s in iter_states(load_expected(case))}
    left = {
        r["key"]: Counter({(rec["f0"], rec["f1"], rec["f2"]): n for rec, n in r["value"]})
        for r in states["left-records"]
    }
    right = {
        r["key"]: {uk["f0"]: (rec["f0"], rec["f1"], rec["f2"]) for uk, rec in r["value"]}
        for r in states["right-records"]
    }
    return left, right


def _inner_join(left, right):
    out = Counter()
    for k, records in left.items():
        for (_, a_id, va), n in records.items():
            for _, b_id, vb in right.get(k, {}).values():
                out[(k, a_id, va, b_id, vb)] += n
    return out


def join_output(left, right, extra):
    """The rows (Counter of (k, a_id, va, b_id, vb)) the restored inner join prints for `extra`
    on top of the stored sides: both inputs are insert-only, so each pair with a new row is
    printed once, when its later row arrives, whatever the order the two sources ran in:
    join(all rows) - join(stored rows). A left record with count n pairs n times."""
    new_left = {k: Counter(v) for k, v in left.items()}
    new_right = {k: dict(v) for k, v in right.items()}
    for side, k, i, v in extra:
        if side == "a":
            new_left.setdefault(k, Counter())[(k, i, v)] += 1
        else:
            assert i not in new_right.get(k, {}), "a new b row must have a new id"
            new_right.setdefault(k, {})[i] = (k, i, v)
    return _inner_join(new_left, new_right) - _inner_join(left, right)


def _joined(out):
    return Counter((r["k"], r["a_id"], r["va"], r["b_id"], r["vb"]) for r in out)


def test_join_pairs_new_rows_with_the_restored_sides():
    case = "sql_join_2.3"
    left, right = join_state(case)
    out = restore_and_continue(case, savepoint_dir(case), JOIN_EXTRA, timeout=TIMEOUT)
    want = join_output(left, right, JOIN_EXTRA)
    assert _joined(out) == want
    assert {r["op"] for r in out} == {"+I"}
    # j_100: the new a row meets every stored b row, the new b row every stored a record (x count)
    assert sum(n for row, n in want.items() if row[0] == "j_100") == len(right["j_100"]) + 1 + sum(
        left["j_100"].values()
    )
    assert set(out.subtasks) == {1, 2, 3}


# Java POJO job: keys k_1, k_3, k_50 are in both cases; a new key twice; an empty name (a null
# POJO name) and a non-ASCII one.
POJO_EXTRA = [
    ("k_1", "ann", 8),
    ("k_new", "", 4),
    ("k_1", "", -6),
    ("k_3", "日本", 1),
    ("k_50", "zoë", 3),
    ("k_new", "bob", 2),
]


def pojo_states(case):
    """{"summary": {k: {"name", "count", "total"}}, "history": {k: [{"f0": name, "f1": v}]},
    "per_name": {k: {name: {...}}}} of the POJO function, from the case's expected.json."""
    return {n: dict(_state_rows(case, n)) for n in ("summary", "history", "per_name")}


def pojo_outputs(states, extra):
    """What DataStreamPojo.java's function prints per record of `extra` on top of `states`
    (pojo_states' form): the record, `new` (no summary before), the states after the update."""
    summary = dict(states["summary"])
    history = {k: list(v) for k, v in states["history"].items()}
    per_name = {k: dict(v) for k, v in states["per_name"].items()}
    out = []
    for key, name, v in extra:
        old = summary.get(key)
        s = old or {"name": None, "count": 0, "total": 0.0}
        summary[key] = {"name": name or None, "count": s["count"] + 1, "total": s["total"] + v / 4}
        history.setdefault(key, []).append({"f0": name, "f1": v})
        p = per_name.setdefault(key, {}).get(name) or {"name": name, "count": 0, "total": 0.0}
        per_name[key][name] = {"name": name, "count": p["count"] + 1, "total": p["total"] + v / 4}
        out.append(
            {
                "key": key,
                "name": name,
                "v": v,
                "new": old is None,
                "summary": dict(summary[key]),
                "history": [[h["f0"], h["f1"]] for h in history[key]],
                "per_name": {n: dict(p) for n, p in per_name[key].items()},
            }
        )
    return out


@pytest.mark.parametrize("case", ["datastream_java_pojo_2.3", "datastream_java_pojo_1.20"])
def test_java_pojo_function_sees_the_restored_states(case):
    states = pojo_states(case)
    out = restore_and_continue(case, savepoint_dir(case), POJO_EXTRA, timeout=TIMEOUT)
    want = pojo_outputs(states, POJO_EXTRA)
    assert _per_key(out, "key") == _per_key(want, "key")
    assert len(out) == len(want)
    assert set(out.subtasks) == {1, 2}
    k1 = _per_key(out, "key")["k_1"][0]
    assert k1["summary"]["count"] == states["summary"]["k_1"]["count"] + 1
    assert k1["history"][:-1] == [[h["f0"], h["f1"]] for h in states["history"]["k_1"]]
    assert _per_key(out, "key")["k_new"][0]["summary"] == {"name": None, "count": 1, "total": 1.0}
