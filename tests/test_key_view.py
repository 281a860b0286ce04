"""The key view (`SavepointReader.key`, `statecat key`) and a key's history (`key_history`,
`statecat history`), checked against the fixtures' expected content (derived from the jobs' input)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from statecat.readers import SavepointReader, key_history
from statecat.readers.scans.keyview import KeyNotCoercible, coerce_key
from statecat.statemeta.errors import LookupFailedError
from statecat.statemeta.model import load_state_meta
from statecat.statemeta.types import TypeDescriptor
from tests.acceptance import PYFLINK_PROCESS_PREFIX, _comparable, _json_of_pickle, canonical, find_operator
from tests.fixtures.expected import CASES, iter_states, load_expected, savepoint_dir

KEYED_KINDS = ("keyed", "timer")
GROUPBY = "sql_groupby_hashmap_2.3"


def statecat(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "statecat.catalog.cli", *args], capture_output=True, text=True, timeout=120
    )


def _key_id(key) -> str:
    return json.dumps(key, sort_keys=True)


def expected_view(case: str, key) -> dict[tuple[str, str], list[dict]]:
    """(operator id, state) -> the expected rows of ``key`` (namespace, value), for every keyed state holding it."""
    meta = load_state_meta(savepoint_dir(case))
    wanted = _key_id(key)
    view = {}
    for expected_op in load_expected(case)["operators"]:
        keyed = [s for s in expected_op["states"] if s["kind"] in KEYED_KINDS]
        if not keyed:
            continue
        op = find_operator(meta, expected_op)
        for state in keyed:
            rows = [r for r in state["rows"] if _key_id(r["key"]) == wanted]
            if rows:
                view[(op.id, state["name"])] = rows
    return view


def sample_keys(case: str, per_state: int = 3) -> list:
    """The first key(s) of every keyed state: keys held by some states and not by others."""
    keys = {}
    for _, state in iter_states(load_expected(case)):
        if state["kind"] in KEYED_KINDS and state["rows"]:
            for row in sorted(state["rows"], key=lambda r: _key_id(r["key"]))[:per_state]:
                keys[_key_id(row["key"])] = row["key"]
    return list(keys.values())


def _as_argument(key):
    # Composite keys are given as a list of their fields, as a user types them.
    return [key[f"f{i}"] for i in range(len(key))] if isinstance(key, dict) else key


def assert_view_matches(case: str, key) -> None:
    view = SavepointReader(savepoint_dir(case)).key(_as_argument(key))
    want = expected_view(case, key)
    got: dict[tuple[str, str], list[dict]] = {}
    for row in view.rows:
        got.setdefault((row.operator_id, row.state), []).append(
            {"key": canonical(row.key), "namespace": canonical(row.namespace), "value": canonical(row.value)}
        )
    assert set(got) == set(want), f"{case} key {key!r}: states {sorted(got)} != expected {sorted(want)}"
    states = {s["name"]: s for _, s in iter_states(load_expected(case))}
    for (op_id, name), rows in got.items():
        expected_rows = want[(op_id, name)]
        assert all(r["key"] == key for r in rows)
        if states[name].get("serializer") == "kryo":
            # Kryo without the job's classes (tests/test_kryo_state.py reads it with them): bytes.
            assert len(rows) == len(expected_rows), (case, name)
            assert all('"hex"' in json.dumps(r["value"]) for r in rows), (case, name)
            continue
        if name.startswith(PYFLINK_PROCESS_PREFIX):
            # PyFlink coder bytes without descriptors: the entries are there, their values are bytes.
            assert len(rows) == len(expected_rows), (case, name)
            continue
        if states[name].get("declared_type") and all(
            isinstance(r["value"], dict) and set(r["value"]) == {"hex"} for r in rows
        ):
            rows = [{**r, "value": _json_of_pickle(bytes.fromhex(r["value"]["hex"]))} for r in rows]
        columns = ["namespace", "value"]
        assert _comparable(rows, columns) == _comparable(expected_rows, columns), (case, name, key)


KEYED_CASES = [
    c for c in CASES if any(s["kind"] in KEYED_KINDS and s["rows"] for _, s in iter_states(load_expected(c)))
]


@pytest.mark.parametrize("case", KEYED_CASES)
def test_key_view_returns_every_state_holding_the_key_with_its_expected_content(case):
    keys = sample_keys(case)
    assert keys
    for key in keys:
        assert_view_matches(case, key)


def test_key_absent_from_every_state_gives_no_rows_and_no_error():
    view = SavepointReader(savepoint_dir(GROUPBY)).key("no_such_key")
    assert view.rows == [] and view.skipped == [] and view.states_read == 3


def test_key_view_reads_a_retained_heap_checkpoint():
    case = "sql_groupby_checkpoint_hashmap_2.3"
    expected = {
        (st["name"], r["key"]): r["value"] for _, st in iter_states(load_expected(case)) for r in st["rows"] or []
    }
    key = next(k for (state, k) in expected if state == "accState")
    view = SavepointReader(savepoint_dir(case)).key(key)
    acc = [row for row in view.rows if row.state == "accState"]
    assert len(acc) == 1 and {k: acc[0].value[k] for k in expected[("accState", key)]} == expected[("accState", key)]


def test_key_view_reads_one_key_group_per_keyed_location():
    reader = SavepointReader(savepoint_dir(GROUPBY))
    view = reader.key("key_662")
    # accState and the two timer queues live in one stream per subtask: K's key-group is read once.
    assert view.states_read == 3 and view.stats.key_groups == 1
    assert len(view.stats.subtasks) == 1
    state_bytes = sum(loc.stream.size for loc in reader.meta.find_state("accState")[1].locations)
    assert 0 < view.stats.bytes_read < state_bytes / 10
    assert {row.key_group for row in view.rows} == {reader.key_groups_for_keys("accState", ["key_662"]).pop()}


def test_operator_and_state_filters():
    reader = SavepointReader(savepoint_dir("datastream_thread_2.3"))
    key = sample_keys("datastream_thread_2.3")[0]
    only = reader.key(key, operators=["keyed-fn"], states=["count", "items"])
    assert {row.state for row in only.rows} == {"count", "items"}
    with pytest.raises(LookupFailedError, match="unknown operator"):
        reader.key(key, operators=["no-such-op"])
    with pytest.raises(LookupFailedError, match="unknown state 'cnt'.*'count'"):
        reader.key(key, states=["cnt"])


# ----------------------------------------------------------------------------- coercion


def _int_key(kind):
    return TypeDescriptor.of("row", [("f0", TypeDescriptor.of(kind))])


def test_coercion_to_each_key_type():
    assert coerce_key("42", _int_key("int")) == 42
    assert coerce_key(42, TypeDescriptor.of("rowdata", [("f0", TypeDescriptor.of("VARCHAR", length=5))])) == "42"
    assert coerce_key("2.5", TypeDescriptor.of("double")) == 2.5
    assert coerce_key("TRUE", TypeDescriptor.of("boolean")) is True
    composite = TypeDescriptor.of(
        "rowdata", [("f0", TypeDescriptor.of("VARCHAR")), ("f1", TypeDescriptor.of("INTEGER"))]
    )
    assert coerce_key('["ka", "3"]', composite) == {"f0": "ka", "f1": 3}
    assert coerce_key(("ka", 3), composite) == coerce_key({"f0": "ka", "f1": 3}, composite) == {"f0": "ka", "f1": 3}
    for bad, key_type in [
        ("abc", _int_key("int")),
        (2**31, _int_key("int")),
        (True, _int_key("long")),
        (["a"], _int_key("int")),
        ('["ka"]', composite),
        ("ka", composite),
        ({"f0": "ka", "x": 1}, composite),
        ("x", TypeDescriptor.raw("Foo", "unknown")),
    ]:
        with pytest.raises(KeyNotCoercible):
            coerce_key(bad, key_type)


def test_composite_key_as_list_dict_and_json_text():
    case = "sql_types_2.3"
    key = sample_keys(case)[0]
    reader = SavepointReader(savepoint_dir(case))
    as_list = reader.key([key["f0"], key["f1"]]).to_pylist()
    assert as_list == reader.key(dict(key)).to_pylist() == reader.key(json.dumps([key["f0"], key["f1"]])).to_pylist()
    assert {(r["operator_id"], r["state"]) for r in as_list} == set(expected_view(case, key))


def test_state_whose_key_type_does_not_take_the_key_is_skipped_with_the_reason():
    # types-fn is keyed by INT, long-keyed-fn by LONG: 2^31 fits only the latter.
    view = SavepointReader(savepoint_dir("datastream_types_thread_2.3")).key(2**31)
    skipped_ops = {s.operator for s in view.skipped}
    assert skipped_ops == {"types-fn"}
    assert all("out of range" in s.reason and s.coercion for s in view.skipped)
    assert view.states_read == 3 and view.rows == []  # long-keyed-fn: count and its two timer queues
    # The same number as text is the same key.
    key = sample_keys("datastream_types_thread_2.3")[0]
    reader = SavepointReader(savepoint_dir("datastream_types_thread_2.3"))
    assert reader.key(str(key)).to_pylist() == reader.key(key).to_pylist()


def test_key_that_fits_no_state_is_an_error():
    with pytest.raises(LookupFailedError, match="fits no keyed state"):
        SavepointReader(savepoint_dir("datastream_types_thread_2.3")).key("abc")
    with pytest.raises(LookupFailedError, match="fits no keyed state"):
        SavepointReader(savepoint_dir("sql_types_2.3")).key("ka")


# ----------------------------------------------------------------------------- CLI


def test_cli_key_formats():
    path = str(savepoint_dir(GROUPBY))
    expected = expected_view(GROUPBY, "key_662")
    as_json = statecat("key", path, "key_662", "--format", "json")
    assert as_json.returncode == 0, as_json.stderr
    doc = json.loads(as_json.stdout)
    assert [(r["operator_id"], r["state"]) for r in doc["rows"]] == list(expected)
    assert [r["value"] for r in doc["rows"]] == [rows[0]["value"] for rows in expected.values()]
    table = statecat("key", path, "key_662")
    assert table.returncode == 0 and "accState" in table.stdout and table.stdout.rstrip().endswith("1 row")
    as_csv = statecat("key", path, "key_662", "--format", "csv")
    assert as_csv.stdout.splitlines()[0] == "operator,state,namespace,value" and len(as_csv.stdout.splitlines()) == 2


def test_cli_composite_key_and_skip_notes():
    case = "sql_types_2.3"
    key = sample_keys(case)[0]
    result = statecat("key", str(savepoint_dir(case)), json.dumps([key["f0"], key["f1"]]), "--format", "json")
    assert result.returncode == 0, result.stderr
    assert {(r["operator_id"], r["state"]) for r in json.loads(result.stdout)["rows"]} == set(expected_view(case, key))
    skipped = statecat("key", str(savepoint_dir("datastream_types_thread_2.3")), str(2**31))
    assert skipped.returncode == 0 and "skipped 'v_int' of types-fn" in skipped.stdout


@pytest.mark.parametrize(
    "args", [("/no/such/savepoint", "x"), (str(savepoint_dir("datastream_types_thread_2.3")), "abc")]
)
def test_cli_key_errors_are_one_line_exit_2(args):
    result = statecat("key", *args)
    assert result.returncode == 2
    assert result.stderr.startswith("statecat: error: ") and len(result.stderr.strip().splitlines()) == 1


# ----------------------------------------------------------------------------- history

HISTORY_CASES = [
    "sql_groupby_hashmap_1.20",
    "sql_groupby_rocksdb_2.3",
    "sql_groupby_hashmap_2.3",
    "sql_groupby_compressed_2.3",
    "sql_window_2.3",
]


@pytest.fixture(scope="module")
def history_root(tmp_path_factory):
    """A job's savepoint directory: copies of several fixtures, plus one snapshot with a broken _metadata."""
    root = tmp_path_factory.mktemp("history")
    for i, case in enumerate(HISTORY_CASES):
        shutil.copytree(savepoint_dir(case), root / f"savepoint-{i}-{case}")
    (root / "chk-9").mkdir()
    (root / "chk-9" / "_metadata").write_bytes(b"\x00\x01garbage")
    return root


def _expected_order(entry):
    taken = entry.taken_at.timestamp() if entry.taken_at is not None else None
    return (taken is None, taken or 0.0, entry.checkpoint_id if entry.checkpoint_id is not None else -1, entry.path)


def test_history_of_a_key_across_snapshots(history_root):
    entries = key_history(str(history_root), "key_662")
    assert len(entries) == len(HISTORY_CASES) + 1
    assert entries == sorted(entries, key=_expected_order)
    by_case = {e.path.split("savepoint-", 1)[-1].split("-", 1)[-1]: e for e in entries if e.error is None}
    broken = [e for e in entries if e.error is not None]
    assert len(broken) == 1 and broken[0].path.endswith("chk-9") and broken[0].view is None
    for case in HISTORY_CASES:
        view = by_case[case].view
        want = expected_view(case, "key_662")
        assert {(r.operator_id, r.state) for r in view.rows} == set(want), case
        for row in view.rows:
            assert canonical(row.value) == want[(row.operator_id, row.state)][0]["value"]
    assert by_case["sql_window_2.3"].view.rows == []


def test_history_key_fitting_nothing_is_an_error(history_root):
    with pytest.raises(LookupFailedError, match="fits no keyed state"):
        key_history(str(history_root), ["a", "b", "c"])


def test_cli_history(history_root):
    result = statecat("history", str(history_root), "key_662", "--format", "json")
    assert result.returncode == 0, result.stderr
    snapshots = json.loads(result.stdout)["snapshots"]
    assert len(snapshots) == len(HISTORY_CASES) + 1
    values = [r["value"] for s in snapshots for r in s["rows"]]
    assert len(values) == len(HISTORY_CASES) - 1  # the window case does not hold key_662
    table = statecat("history", str(history_root), "key_662")
    assert table.returncode == 0 and "(key not present)" in table.stdout and "(not read:" in table.stdout
    missing = statecat("history", str(history_root / "nothing-here"), "key_662")
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1


def test_key_view_shows_as_html_and_pandas_with_the_expected_value():
    expected = next(
        r["value"]
        for _, st in iter_states(load_expected(GROUPBY))
        if st["name"] == "accState"
        for r in st["rows"]
        if r["key"] == "key_662"
    )
    view = SavepointReader(str(savepoint_dir(GROUPBY))).key("key_662")
    frame = view.to_pandas()
    acc = frame[frame["state"] == "accState"]
    assert len(acc) == 1 and acc.iloc[0]["key"] == "key_662"
    assert {k: acc.iloc[0]["value"][k] for k in expected} == expected
    page = view._repr_html_()
    assert "key_662" in page and "accState" in page and page.count("<tr>") == len(frame) + 1
