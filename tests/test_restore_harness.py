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
