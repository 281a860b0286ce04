"""stateInfo: the snapshotter's JSON document, its round trip, freshness, and readers planning from it."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from statecat.catalog.cli import main as cli_main
from statecat.readers import SavepointReader
from statecat.statemeta.errors import FormatError, StatecatError
from statecat.statemeta.files.storage import open_storage
from statecat.statemeta.model import load_state_meta
from statecat.statemeta.snapshotter import stateinfo
from statecat.statemeta.snapshotter.stateinfo import (
    STATE_INFO_FILE,
    load_fresh_state_info,
    read_state_info,
    snapshot,
    to_state_info,
    write_state_info,
)
from statecat.statemeta.types import TypeDescriptor
from tests.acceptance import find_operator
from tests.fixtures.expected import CASES, iter_states, load_expected, savepoint_dir

PROCESS_CASE = "datastream_process_2.3"


def _copy(case, tmp_path: Path) -> Path:
    """The case's savepoint copied into tmp (the committed fixtures are never written to)."""
    dest = tmp_path / case / "savepoint"
    shutil.copytree(savepoint_dir(case), dest)
    (dest / STATE_INFO_FILE).unlink(missing_ok=True)
    return dest


@pytest.mark.parametrize("case", CASES)
def test_state_info_lists_exactly_the_expected_operators_and_states(case, tmp_path):
    expected = load_expected(case)
    sp = _copy(case, tmp_path)
    result = snapshot(str(sp))
    assert result.written and (sp / STATE_INFO_FILE).is_file()
    doc = json.loads((sp / STATE_INFO_FILE).read_text())
    assert doc["format"] == "statecat.stateInfo" and doc["format_version"] == 1
    assert doc["savepoint"]["metadata_version"] == expected["metadata_version"]
    assert doc["savepoint"]["path"] == str(sp)
    meta = read_state_info(savepoint=str(sp))
    by_id = {op["id"]: op for op in doc["operators"]}
    named = set()
    for expected_op in expected["operators"]:
        op = find_operator(meta, expected_op)
        named.add(op.id)
        listed = by_id[op.id]
        assert (listed["parallelism"], listed["max_parallelism"]) == (
            expected_op["parallelism"],
            expected_op["max_parallelism"],
        )
        states = {s["name"]: s for s in listed["states"]}
        assert set(states) == {s["name"] for s in expected_op["states"]}
        for st in expected_op["states"]:
            got = states[st["name"]]
            assert (got["kind"], got["state_type"]) == (st["kind"], st["state_type"]), st["name"]
            for part in ("key", "namespace", "value", "user_key"):
                if got[part] is not None:  # each part: class, portable type, Spark SQL type
                    assert TypeDescriptor.from_json(got[part]["type"]).sql_type() == got[part]["sql_type"]
                    assert "class" in got[part]
            assert got["decode"]["status"] in ("full", "raw")
            assert got["locations"], st["name"]
    from statecat.catalog.spark.tables import state_table_names

    tables = {(op["id"], st["name"]): st["table"] for op in doc["operators"] for st in op["states"]}
    assert tables == state_table_names(meta)  # exactly the catalog's names
    # expected.json leaves out the FLIP-27 sources' own bookkeeping (SourceReaderState, split
    # offsets in bytes); every other operator with state must be one it lists.
    others = [
        (op["name"], [s["name"] for s in op["states"]])
        for op in doc["operators"]
        if op["states"] and op["id"] not in named
    ]
    assert all(names == ["SourceReaderState"] for _, names in others), others


@pytest.mark.parametrize("case", CASES)
def test_read_state_info_rebuilds_the_same_state_meta(case, tmp_path):
    sp = _copy(case, tmp_path)
    derived = load_state_meta(str(sp), use_state_info=False)
    write_state_info(derived)
    rebuilt = read_state_info(savepoint=str(sp))
    assert rebuilt == derived
    assert rebuilt.metadata == derived.metadata


@pytest.mark.parametrize("case", CASES)
def test_both_planning_paths_give_the_same_rows(case, tmp_path):
    sp = _copy(case, tmp_path)
    derived = SavepointReader(load_state_meta(str(sp), use_state_info=False))
    snapshot(str(sp))
    planned = SavepointReader(str(sp))
    assert planned.meta == derived.meta
    # the reader really planned from stateInfo: it is the document's StateMeta
    assert load_fresh_state_info(open_storage(str(sp))) == planned.meta
    for op, state in derived.meta.states():
        a, b = _table_or_error(derived, op, state), _table_or_error(planned, op, state)
        assert a.equals(b) if not isinstance(a, str) else a == b, (op.label, state.name)


def _table_or_error(reader, op, state):
    """The state's rows, or the error text for states statecat cannot read (must match too)."""
    try:
        return reader.table(state.name, op.id)
    except StatecatError as exc:
        return f"{type(exc).__name__}: {exc}"


def test_snapshot_is_idempotent_and_keeps_the_first_write_time(tmp_path):
    sp = _copy(CASES[0], tmp_path)
    first = snapshot(str(sp))
    before = (sp / STATE_INFO_FILE).read_bytes()
    stat = (sp / STATE_INFO_FILE).stat()
    again = snapshot(str(sp))
    assert first.written and not again.written
    assert (sp / STATE_INFO_FILE).read_bytes() == before
    assert (sp / STATE_INFO_FILE).stat().st_mtime_ns == stat.st_mtime_ns
    assert sorted(p.name for p in sp.iterdir() if p.name.startswith(".")) == []


def test_write_is_atomic_a_failed_write_leaves_the_old_file(tmp_path, monkeypatch):
    sp = _copy(CASES[0], tmp_path)
    (sp / STATE_INFO_FILE).write_text("old")

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(stateinfo.os, "replace", boom)
    with pytest.raises(OSError):
        snapshot(str(sp))
    assert (sp / STATE_INFO_FILE).read_text() == "old"
    assert not [p for p in sp.iterdir() if p.name.startswith(".")], "temp file left behind"


def test_output_dir_for_read_only_savepoints(tmp_path):
    sp = _copy(CASES[0], tmp_path)
    out = tmp_path / "infos" / "one"
    os.chmod(sp, 0o555)
    try:
        code = cli_main(["snapshot", str(sp), "--output", str(out)])
    finally:
        os.chmod(sp, 0o755)
    assert code == 0
    assert (out / STATE_INFO_FILE).is_file() and not (sp / STATE_INFO_FILE).exists()
    derived = load_state_meta(str(sp), use_state_info=False)
    assert read_state_info(str(out)) == derived  # finds the savepoint by its recorded path
    assert load_state_meta(str(sp), state_info=str(out)) == derived


def test_stale_or_damaged_state_info_falls_back_to_the_savepoint(tmp_path):
    sp = _copy(CASES[0], tmp_path)
    snapshot(str(sp))
    path = sp / STATE_INFO_FILE
    doc = json.loads(path.read_text())
    # A fresh document is used as is: a renamed operator shows it was read.
    op = next(o for o in doc["operators"] if o["states"])
    doc["operators"][doc["operators"].index(op)]["name"] = "renamed-in-stateInfo"
    path.write_text(json.dumps(doc))
    assert any(o.name == "renamed-in-stateInfo" for o in load_state_meta(str(sp)).operators)
    # Different _metadata bytes: stale, derived from the savepoint instead.
    doc["savepoint"]["metadata_file"]["sha256"] = "0" * 64
    path.write_text(json.dumps(doc))
    derived = load_state_meta(str(sp), use_state_info=False)
    assert load_state_meta(str(sp)) == derived
    with pytest.raises(FormatError, match="stale"):
        read_state_info(savepoint=str(sp))
    doc["savepoint"]["metadata_file"]["size"] += 1
    path.write_text(json.dumps(doc))
    assert load_state_meta(str(sp)) == derived
    for damaged in ("{", "[]", json.dumps({"format": "statecat.stateInfo", "format_version": 99})):
        path.write_text(damaged)
        assert load_state_meta(str(sp)) == derived
    # snapshot replaces what is there
    assert snapshot(str(sp)).written
    assert read_state_info(savepoint=str(sp)) == derived


def test_snapshot_reads_no_state_data(tmp_path, monkeypatch):
    """Only _metadata and the header bytes of each state file are read, never the state data."""
    sp = _copy("sql_groupby_hashmap_2.3", tmp_path)
    files = {p.name: p.stat().st_size for p in sp.iterdir() if p.name != "_metadata"}
    assert files and max(files.values()) > 10_000
    read = {}
    real_open = stateinfo.Storage.open

    def counting_open(self, path, **kw):
        stream = real_open(self, path, **kw)
        name = os.path.basename(path)

        class Counting:
            def __init__(self, inner):
                self.inner = inner

            def read(self, n=-1):
                data = self.inner.read(n)
                read[name] = read.get(name, 0) + len(data)
                return data

            def readinto(self, b):
                n = self.inner.readinto(b)
                read[name] = read.get(name, 0) + (n or 0)
                return n

            def __getattr__(self, attr):
                return getattr(self.inner, attr)

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                self.inner.close()

        return Counting(stream)

    monkeypatch.setattr(stateinfo.Storage, "open", counting_open)
    snapshot(str(sp))
    for name, size in files.items():
        # The header is read through one 64 KiB buffer at most, whatever the file's size (the
        # benchmark shows the time staying flat on large savepoints).
        assert read.get(name, 0) <= 1 << 16, (name, read.get(name), size)


def test_snapshot_errors_are_clear(tmp_path, capsys):
    assert cli_main(["snapshot", str(tmp_path / "nope")]) == 2
    assert "no such file or directory" in capsys.readouterr().err
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "_metadata").write_bytes(b"\x00" * 64)
    assert cli_main(["snapshot", str(bad)]) == 2
    assert "magic" in capsys.readouterr().err
    assert not (bad / STATE_INFO_FILE).exists()


def test_to_state_info_is_json_with_a_handles_index(tmp_path):
    sp = _copy("sql_groupby_hashmap_2.3", tmp_path)
    meta = load_state_meta(str(sp), use_state_info=False)
    doc = to_state_info(meta)
    json.dumps(doc)
    handles = [h for op in doc["operators"] for h in op["handles"] if h["managed_keyed"]]
    assert handles
    for h in handles:
        keyed = h["managed_keyed"]
        lo, hi = keyed["key_group_range"]
        assert hi - lo + 1 == len(keyed["offsets"])
        assert keyed["stream"]["kind"] in ("relative", "inline", "file")
        if keyed["stream"]["kind"] == "relative":
            assert not keyed["stream"]["path"].startswith("/")  # relocatable


def test_moved_savepoint_keeps_a_valid_state_info(tmp_path):
    sp = _copy("sql_groupby_hashmap_2.3", tmp_path)
    snapshot(str(sp))
    moved = tmp_path / "elsewhere"
    shutil.move(str(sp), moved)
    meta = load_state_meta(str(moved))
    assert meta == load_state_meta(str(moved), use_state_info=False)
    assert SavepointReader(meta).table("accState").num_rows == 2000


# ----------------------------------------------------------------------------- PyFlink process-mode fixture


def _descriptor_doc(expected: dict) -> dict:
    ops = {}
    for op, st in iter_states(expected):
        if st.get("declared_type") and st["name"].startswith("python-state-"):
            ref = op.get("uid") or op.get("name")
            spec = st["declared_type"]
            if st.get("declared_state"):
                spec = {"type": spec, "state": st["declared_state"]}
            ops.setdefault(ref, {})[st["declared_name"]] = spec
    return {"format": "statecat.descriptors", "version": 1, "operators": ops}


def _comparable(value, expected):
    """Reader output in expected.json's notation: one-field Row keys may be unwrapped by the reader,
    PyFlink tuples read as structs f0..fn where expected.json writes Python tuples as lists, and
    PICKLED values (read with unpickle=True) are JSON text."""
    if isinstance(expected, dict) and list(expected) == ["f0"] and not isinstance(value, dict):
        return {"f0": value}
    if isinstance(expected, list) and isinstance(value, dict) and list(value) == [f"f{i}" for i in range(len(value))]:
        return [_comparable(v, e) for v, e in zip(value.values(), expected)]
    if isinstance(expected, (dict, list)) and isinstance(value, str):
        return json.loads(value)
    return value


DECLARED_CASES = [c for c in CASES if _descriptor_doc(load_expected(c))["operators"]]


@pytest.mark.skipif(PROCESS_CASE not in CASES, reason=f"fixture {PROCESS_CASE} not generated yet")
def test_the_process_mode_fixture_has_declared_states():
    assert PROCESS_CASE in DECLARED_CASES


@pytest.mark.parametrize("case", DECLARED_CASES)
def test_pyflink_process_fixture_reads_typed_under_declared_names(case, tmp_path):
    """Snapshotted with a descriptor file (built from expected.json's declared_name/declared_type),
    every python-state-* reads back typed, under its declared name, equal to expected.json."""
    from statecat.catalog.render import json_value

    expected = load_expected(case)
    sp = _copy(case, tmp_path)
    descriptors = tmp_path / "descriptors.json"
    descriptors.write_text(json.dumps(_descriptor_doc(expected)))
    assert cli_main(["snapshot", str(sp), "--descriptors", str(descriptors)]) == 0
    reader = SavepointReader(str(sp), unpickle=True)  # plans from the stateInfo just written
    checked = 0
    for op_exp, st in iter_states(expected):
        if not (st.get("declared_type") and st["name"].startswith("python-state-")):
            continue
        op = find_operator(reader.meta, op_exp)
        state = op.state(st["declared_name"])  # the declared name, not python-state-...
        assert state.decode_status == "full", state.raw_reasons
        columns = [c for c in ("key", "namespace", "value", "subtask") if any(c in r for r in st["rows"])]
        want = sorted(json.dumps({c: r.get(c) for c in columns}, sort_keys=True) for r in st["rows"])
        like = st["rows"][0]
        got = [
            json.dumps({c: _comparable(json_value(row[c]), like.get(c)) for c in columns}, sort_keys=True)
            for row in reader.table(state.name, op.id).to_pylist()
        ]
        if state.kind == "broadcast" and "subtask" not in columns:
            got = sorted(set(got))  # every subtask holds the same broadcast state
        assert sorted(got) == want, (case, st["declared_name"])
        checked += 1
    assert checked


@pytest.mark.skipif(PROCESS_CASE not in CASES, reason=f"fixture {PROCESS_CASE} not generated yet")
def test_pyflink_process_fixture_without_descriptors_says_how_to_supply_them(tmp_path):
    sp = _copy(PROCESS_CASE, tmp_path)
    meta = load_state_meta(str(sp), use_state_info=False)
    python_states = [s for _, s in meta.states() if s.name.startswith("python-state-")]
    assert python_states
    for s in python_states:
        assert s.decode_status == "raw"
        assert any("--descriptors" in r for r in s.raw_reasons)


def test_state_errors_are_statecat_errors():
    assert issubclass(FormatError, StatecatError)
