"""SQL edits written into savepoints (catalog/spark/edits.py), checked without Flink: the written
savepoint holds the job's input (expected.json) plus exactly the edit, `statecat diff` reports
exactly the edit, and statements that are not understood are refused before anything is written.
Restores of edited savepoints in real Flink: tests/test_write_restore.py."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

import pytest

from statecat.catalog.spark.edit_plan import EditError
from statecat.readers import diff_savepoints
from statecat.statemeta.errors import StatecatError
from tests.acceptance import check_state_rows
from tests.fixtures.edits import write_savepoint
from tests.fixtures.expected import load_expected, savepoint_dir

pytestmark = pytest.mark.spark


def _expected(case: str, state: str, uid: str | None = None) -> tuple[dict, dict]:
    for op in load_expected(case)["operators"]:
        for s in op["states"]:
            if s["name"] == state and (uid is None or op.get("uid") == uid):
                return op, copy.deepcopy(s)
    raise AssertionError(f"{case} has no state {state}")


def _row(rows: list[dict], key, namespace=None) -> dict:
    (row,) = [r for r in rows if r["key"] == key and r["namespace"] == namespace]
    return row


def _changes(src, dst) -> list[dict]:
    return [c.as_dict() for c in diff_savepoints(str(src), str(dst)).changes()]


@pytest.fixture(params=["in this process", "by Spark's tasks"])
def compared(request, monkeypatch):
    """Where the changes are found (catalog/spark/edit_changes.py): a few rows in this process, more
    by Spark's tasks, whose changes are Parquet by key-group. Both must write the same state."""
    from statecat.catalog.spark import edit_changes

    if request.param == "by Spark's tasks":
        monkeypatch.setattr(edit_changes, "HELD_ROWS", 0)
    return request.param


def test_update_one_key_of_a_sql_aggregate(tmp_path, compared):
    case = "sql_groupby_hashmap_2.3"
    op, state = _expected(case, "accState")
    before = _row(state["rows"], "key_662")["value"]
    dst = tmp_path / "out"
    result = write_savepoint(
        str(savepoint_dir(case)),
        str(dst),
        sql="UPDATE accstate SET value = named_struct('f0', value.f0 + 1, 'f1', value.f1 - 1000) WHERE key = 'key_662'",
    )
    assert [s.matched for s in result.statements] == [1]
    assert result.summary.key_groups_rebuilt == 1  # only key_662's key-group was decoded
    _row(state["rows"], "key_662")["value"] = {"f0": before["f0"] + 1, "f1": before["f1"] - 1000}
    check_state_rows(dst, op, state)
    (change,) = _changes(savepoint_dir(case), dst)
    assert (change["change"], change["key"], change["new"]) == (
        "changed",
        "key_662",
        {"f0": before["f0"] + 1, "f1": before["f1"] - 1000},
    )


def test_nested_field_assignment_and_a_value_predicate(tmp_path):
    case = "sql_groupby_rocksdb_2.3"
    op, state = _expected(case, "accState")
    dst = tmp_path / "out"
    write_savepoint(str(savepoint_dir(case)), str(dst), sql="UPDATE accstate SET value.f1 = 0 WHERE value.f0 >= 5")
    hits = 0
    for row in state["rows"]:
        if row["value"]["f0"] >= 5:
            row["value"]["f1"] = 0
            hits += 1
    assert hits > 0
    check_state_rows(dst, op, state)
    assert len(_changes(savepoint_dir(case), dst)) == hits


def test_delete_and_insert(tmp_path, compared):
    case = "sql_groupby_hashmap_2.3"
    op, state = _expected(case, "accState")
    dst = tmp_path / "out"
    result = write_savepoint(
        str(savepoint_dir(case)),
        str(dst),
        sql=[
            "DELETE FROM accstate WHERE key IN ('key_1', 'key_2', 'no_such_key')",
            "INSERT INTO accstate (key, value) VALUES ('brand_new', named_struct('f0', 1, 'f1', 99))",
        ],
    )
    assert [s.matched for s in result.statements] == [2, 1]
    state["rows"] = [r for r in state["rows"] if r["key"] not in ("key_1", "key_2")]
    state["rows"].append({"key": "brand_new", "namespace": None, "value": {"f0": 1, "f1": 99}})
    check_state_rows(dst, op, state)
    kinds = sorted((c["change"], c["key"]) for c in _changes(savepoint_dir(case), dst))
    assert kinds == [("added", "brand_new"), ("removed", "key_1"), ("removed", "key_2")]


@pytest.mark.parametrize(
    "case", ["datastream_thread_2.3", "datastream_checkpoint_thread_2.3", "datastream_checkpoint_rocksdb_2.3"]
)
def test_value_list_map_and_timer_states(tmp_path, case):
    """A canonical savepoint, a heap checkpoint and a RocksDB checkpoint of the same job."""
    key = _expected(case, "count", "keyed-fn")[1]["rows"][0]["key"]
    dst = tmp_path / "out"
    write_savepoint(
        str(savepoint_dir(case)),
        str(dst),
        sql=[
            f"UPDATE count SET value = value * 10 WHERE key = '{key}'",
            f"UPDATE items SET value = array('fixed', value[0]) WHERE key = '{key}'",
            f"UPDATE per_tag SET value = map('t9', 9L) WHERE key = '{key}'",
            f"UPDATE timer_state_event_user_timers SET value = value + 1 WHERE key = '{key}'",
        ],
    )
    for name, change in [
        ("count", lambda v: v * 10),
        ("items", lambda v: ["fixed", v[0]]),
        ("per_tag", lambda v: {"t9": 9}),
        ("_timer_state/event_user-timers", lambda v: v + 1),
    ]:
        op, state = _expected(case, name, "keyed-fn")
        for row in state["rows"]:
            if row["key"] == key:
                row["value"] = change(row["value"])
        check_state_rows(dst, op, state)


def test_window_namespace(tmp_path):
    case = "sql_window_2.3"
    op, state = _expected(case, "window-aggs")
    target = state["rows"][0]
    dst = tmp_path / "out"
    write_savepoint(
        str(savepoint_dir(case)),
        str(dst),
        sql=f"UPDATE window_aggs SET value.f0 = 0 WHERE key = '{target['key']}' AND namespace = {target['namespace']}",
    )
    target["value"]["f0"] = 0
    check_state_rows(dst, op, state)
    assert len(_changes(savepoint_dir(case), dst)) == 1


def test_deleting_a_key_everywhere_warns_about_its_timers(tmp_path):
    case = "datastream_thread_2.3"
    _, timers = _expected(case, "_timer_state/event_user-timers", "keyed-fn")
    key = timers["rows"][0]["key"]
    tables = ["count", "items", "per_tag", "max_v", "avg", "info"]
    result = write_savepoint(
        str(savepoint_dir(case)), str(tmp_path / "out"), sql=[f"DELETE FROM {t} WHERE key = '{key}'" for t in tables]
    )
    assert any("timer_state_event_user_timers" in w and key in w for w in result.warnings)


# ----------------------------------------------------------------------------- refused before writing


def test_a_null_key_found_by_sparks_tasks_is_refused_before_writing(tmp_path, monkeypatch):
    from statecat.catalog.spark import edit_changes

    monkeypatch.setattr(edit_changes, "HELD_ROWS", 0)
    dst = tmp_path / "out"
    with pytest.raises(EditError, match="a row of accstate has a NULL key after the edits"):
        write_savepoint(
            str(savepoint_dir("sql_groupby_hashmap_2.3")),
            str(dst),
            sql="INSERT INTO accstate (key, value) VALUES (NULL, named_struct('f0', 1, 'f1', 2))",
        )
    assert not dst.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "statement,message",
    [
        # sqlglot's checks, before Spark runs anything
        ("UPDATE accstat SET value.f0 = 1 WHERE key = 'key_662'", "unknown table 'accstat'.*Did you mean 'accstate'"),
        ("UPDATE accstate SET value.f9 = 1 WHERE key = 'key_662'", "has no field 'f9'"),
        ("UPDATE accstate SET valu = 1", "unknown column 'valu'.*Did you mean 'value'"),
        ("SELECT * FROM accstate", "SELECT statements cannot edit state"),
        ("UPDATE accstate SET value.f0 = 1 WHERE", "cannot parse.*expected an expression after WHERE"),
        ("UPDATE accstate SET value.f0 = 1 WHERE key = 'key_662' AND", "expected an expression after AND"),
        ("UPDATE otherdb.accstate SET value.f0 = 1", "otherdb.accstate names another database's table"),
        ("INSERT OVERWRITE accstate SELECT * FROM accstate", "INSERT OVERWRITE would replace the whole state"),
        ("INSERT INTO coordinator (value) VALUES (NULL)", "UPDATE it, not INSERT"),
        # Spark's verdicts
        (
            "UPDATE accstate SET value.f0 = 'abc' WHERE key = 'key_662'",
            "Cannot safely cast .value...f0. .STRING. to .BIGINT",
        ),
        ("UPDATE accstate SET value.f0 = sha3(key) WHERE key = 'key_662'", "UNRESOLVED_ROUTINE"),
        ("UPDATE accstate SET value.f0 = 1 WHERE value.f0 / 0 > 1", "DIVIDE_BY_ZERO"),
        ("UPDATE accstate SET value.f0 = nosuchcolumn", "UNRESOLVED_COLUMN"),
        ("INSERT INTO accstate (key, value) VALUES (NULL, named_struct('f0', 1, 'f1', 2))", "NULL key"),
    ],
)
def test_statements_not_understood_are_refused_before_writing(tmp_path, statement, message):
    dst = tmp_path / "out"
    with pytest.raises(EditError, match=message):
        write_savepoint(str(savepoint_dir("sql_groupby_hashmap_2.3")), str(dst), sql=statement)
    assert not dst.exists() and list(tmp_path.iterdir()) == []


def test_state_shown_as_bytes_cannot_be_edited_but_its_rows_can_be_deleted(tmp_path):
    # PyFlink process mode without descriptors: coder bytes, in the table of the job's name for the state
    case = "datastream_process_2.3"
    with pytest.raises(EditError, match="python-state-avg.*shown only as bytes"):
        write_savepoint(
            str(savepoint_dir(case)),
            str(tmp_path / "out"),
            sql="UPDATE avg SET value = X'00' WHERE key = 'k_0'",
        )
    assert list(tmp_path.iterdir()) == []
    write_savepoint(str(savepoint_dir(case)), str(tmp_path / "out"), sql="DELETE FROM avg WHERE key = 'k_0'")
    (change,) = _changes(savepoint_dir(case), tmp_path / "out")
    assert (change["change"], change["key"]) == ("removed", "k_0")


def test_a_byte_array_state_takes_a_binary_literal(tmp_path):
    case = "datastream_thread_2.3"  # thread mode keeps pickles in byte[] states: bytes Flink knows as bytes
    op, state = _expected(case, "avg", "keyed-fn")
    write_savepoint(
        str(savepoint_dir(case)), str(tmp_path / "out"), sql="UPDATE avg SET value = X'80' WHERE key = 'k_0'"
    )
    (change,) = _changes(savepoint_dir(case), tmp_path / "out")
    assert (change["key"], change["new"]) == ("k_0", b"\x80")


def test_ansi_overflow_fails_the_write_and_leaves_nothing(tmp_path):
    with pytest.raises(StatecatError, match="ARITHMETIC_OVERFLOW"):
        write_savepoint(
            str(savepoint_dir("sql_groupby_hashmap_2.3")),
            str(tmp_path / "out"),
            sql="UPDATE accstate SET value.f0 = value.f0 + 9223372036854775807 WHERE key = 'key_662'",
        )
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------- the command


def statecat(home, *args: str) -> subprocess.CompletedProcess:
    # The command's own local Spark on a home of its own, without a shared metastore (this process's
    # Spark may hold the default home's)
    env = {**os.environ, "STATECAT_HOME": str(home), "STATECAT_METASTORE": "embedded"}
    return subprocess.run(
        [sys.executable, "-m", "statecat.catalog.cli", *args], capture_output=True, text=True, timeout=300, env=env
    )


def test_write_command_edits_and_records_provenance(tmp_path):
    src = savepoint_dir("sql_groupby_hashmap_2.3")
    dst = tmp_path / "out"
    statement = "UPDATE accstate SET value.f0 = 7 WHERE key = 'key_662'"
    done = statecat(tmp_path / "home", "write", str(src), "--out", str(dst), "--sql", statement, "--format", "json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["statements"] == [{"sql": statement, "rows": 1}]
    info = json.loads((dst / "stateInfo").read_text())
    import hashlib

    assert info["provenance"]["statements"] == [statement]
    assert info["provenance"]["source_metadata_sha256"] == hashlib.sha256((src / "_metadata").read_bytes()).hexdigest()
    again = statecat(tmp_path / "home", "write", str(src), "--out", str(dst), "--sql", statement)
    assert again.returncode == 2 and "exists" in again.stderr and "--overwrite" in again.stderr
    bad = statecat(
        tmp_path / "home", "write", str(src), "--out", str(tmp_path / "bad"), "--sql", "UPDATE accstate SET value = 1"
    )
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert "Cannot safely cast" in bad.stderr and '"INT" to "STRUCT' in bad.stderr
    assert not (tmp_path / "bad").exists()


# ----------------------------------------------------------------------------- operator state


def test_union_state_elements(tmp_path):
    case = "sql_window_2.3"
    op, state = _expected(case, "watermark")
    dst = tmp_path / "out"
    result = write_savepoint(
        str(savepoint_dir(case)),
        str(dst),
        sql=[
            "UPDATE watermark SET value = value - 60000 WHERE subtask = 1",
            "INSERT INTO watermark (value, subtask) VALUES (42L, 0)",
        ],
    )
    assert [s.matched for s in result.statements] == [1, 1]
    for row in state["rows"]:
        if row["subtask"] == 1:
            row["value"] -= 60000
    state["rows"].append({"value": 42, "subtask": 0})
    check_state_rows(dst, op, state)


SOURCE_POSITIONS = "tests/fixtures/source_positions/filesource_2.3/savepoint"


def test_a_file_source_split_skips_one_more_record(tmp_path):
    """The poison-record fix: the split's records_to_skip (855 in the savepoint: the counter's
    value, tests/fixtures/source_positions/README.md) moves on by one; nothing else changes."""
    from statecat.readers import SavepointReader

    dst = tmp_path / "out"
    write_savepoint(
        SOURCE_POSITIONS,
        str(dst),
        sql=[
            "UPDATE file_src__sourcereaderstate SET value.file.records_to_skip = value.file.records_to_skip + 1",
            "UPDATE number_src__sourcereaderstate SET value.number_sequence.from_value = 957",
        ],
    )

    def splits(path):
        reader = SavepointReader(str(path))
        out = {}
        for uid in ("file-src", "number-src"):
            (row,) = reader.table("SourceReaderState", uid).to_pylist()
            value = dict(row["value"])
            value.pop("raw")  # the split's bytes, re-derived from the fields
            out[uid] = value
        return out

    before, after = splits(SOURCE_POSITIONS), splits(dst)
    assert before["file-src"]["file"]["records_to_skip"] == 855
    assert after["file-src"]["file"] == {**before["file-src"]["file"], "records_to_skip": 856}
    assert after["number-src"]["number_sequence"] == {"from_value": 957, "to_value": 19999}
    assert {k: v for k, v in after["file-src"].items() if k != "file"} == {
        k: v for k, v in before["file-src"].items() if k != "file"
    }
    # the keyed counters and the enumerators are untouched
    changes = _changes(SOURCE_POSITIONS, dst)
    assert {c["state"] for c in changes} == {"SourceReaderState"}


def test_an_element_moved_to_a_subtask_the_operator_lacks_is_refused(tmp_path):
    with pytest.raises(EditError, match="on subtask 7 after the edits.*parallelism"):
        write_savepoint(
            SOURCE_POSITIONS, str(tmp_path / "out"), sql="UPDATE file_src__sourcereaderstate SET subtask = 7"
        )
    assert list(tmp_path.iterdir()) == []


def test_coordinator_checkpoint_is_editable(tmp_path):
    from statecat.readers import SavepointReader

    dst = tmp_path / "out"
    write_savepoint(
        SOURCE_POSITIONS,
        str(dst),
        sql="UPDATE file_src__coordinator SET value.file.pending_splits = array()",
    )
    before = SavepointReader(SOURCE_POSITIONS).table("_coordinator", "file-src").to_pylist()[0]["value"]
    after = SavepointReader(str(dst)).table("_coordinator", "file-src").to_pylist()[0]["value"]
    assert len(before["file"]["pending_splits"]) == 1 and after["file"]["pending_splits"] == []
    assert after["file"]["processed_paths"] == before["file"]["processed_paths"]


# ----------------------------------------------------------------------------- types


def test_scalar_types_of_a_datastream_job(tmp_path):
    """Thread-mode PyFlink state of every scalar type: the edited values read back exactly."""
    case = "datastream_types_thread_2.3"
    key = -2147483648  # an INT key at its minimum
    edits = {
        "v_boolean": ("NOT value", lambda v: not v),
        "v_long": ("value - 1", lambda v: v - 1),
        "v_double": ("value * 2", lambda v: v * 2),
        "v_char": ("'€'", lambda v: "€"),
        "v_string": ("concat(value, ' ✓ \\u0000')", lambda v: v + " ✓ \x00"),
        "v_big_dec": ("'-0.000000000000000000001'", lambda v: "-0.000000000000000000001"),
        "v_map": ("map('a', 1L, 'b', NULL)", lambda v: {"a": 1, "b": None}),
    }
    dst = tmp_path / "out"
    write_savepoint(
        str(savepoint_dir(case)),
        str(dst),
        sql=[f"UPDATE {table} SET value = {expression} WHERE key = {key}" for table, (expression, _) in edits.items()],
    )
    for table, (_, change) in edits.items():
        op, state = _expected(case, table, "types-fn")
        for row in state["rows"]:
            if row["key"] == key:
                row["value"] = change(row["value"])
        check_state_rows(dst, op, state)


def test_sql_rows_with_maps_and_a_composite_key(tmp_path):
    case = "sql_types_2.3"
    op, state = _expected(case, "right-records")
    target = state["rows"][0]
    k1, k2 = target["key"]["f0"], target["key"]["f1"]
    dst = tmp_path / "out"
    write_savepoint(
        str(savepoint_dir(case)),
        str(dst),
        sql=(
            "UPDATE right_records SET value = named_struct('f0', value.f0, 'f1', value.f1 + 1, "
            f"'f2', map('z', 26)) WHERE key = named_struct('f0', '{k1}', 'f1', {k2})"
        ),
    )
    target["value"] = {"f0": target["value"]["f0"], "f1": target["value"]["f1"] + 1, "f2": {"z": 26}}
    check_state_rows(dst, op, state)
    assert len(_changes(savepoint_dir(case), dst)) == 1


def _stored_value(directory, state_name: str, key: str) -> bytes:
    """The stored value bytes of one key's entry (canonical savepoints), read by framing alone."""
    from statecat.readers.backends.framing import parse_runs
    from statecat.readers.keygroups import key_group_for
    from statecat.statemeta.files.headers import read_stream_bytes
    from statecat.statemeta.model import load_state_meta
    from statecat.writers.entry_codec import EntryCodec

    meta = load_state_meta(str(directory))
    op, state = meta.find_state(state_name, "keyed-fn")
    group = key_group_for(key, state.key_type, op.max_parallelism)
    composite = EntryCodec(meta, op, state).composite_key(group, key, None)
    for loc in state.keyed_locations:
        if not loc.holds_key_group(group):
            continue
        i = group - loc.start_key_group
        starts = sorted(o for o in loc.offsets if o > 0)
        start = loc.offsets[i]
        end = next((o for o in starts if o > start), loc.stream.size)
        data, _, _ = read_stream_bytes(meta.storage, loc.stream, start, end - start)
        for state_id, entries in parse_runs(data):
            if state_id == loc.state_id:
                (value,) = [v for k, v in entries if k == composite]
                return value
    raise AssertionError(f"no entry of {key} in {state_name}")


def test_ttl_state_keeps_its_last_access_time_and_a_new_value_gets_now(tmp_path):
    import time

    from statecat.readers import SavepointReader

    case = "datastream_successive_2.3"  # last_tag is a TTL'd ValueState<String>
    src = savepoint_dir(case)
    keys = [r["key"] for r in SavepointReader(str(src)).table("last_tag", "keyed-fn").to_pylist()[:1]]
    dst = tmp_path / "out"
    before_write = int(time.time() * 1000)
    write_savepoint(
        str(src),
        str(dst),
        sql=[
            f"UPDATE last_tag SET value = 'edited' WHERE key = '{keys[0]}'",
            "INSERT INTO last_tag (key, value) VALUES ('k_brand_new', 'fresh')",
        ],
    )
    old, new = _stored_value(src, "last_tag", keys[0]), _stored_value(dst, "last_tag", keys[0])
    assert new[:8] == old[:8]  # the last-access timestamp is kept
    assert new[8:] != old[8:]
    inserted = int.from_bytes(_stored_value(dst, "last_tag", "k_brand_new")[:8], "big", signed=True)
    assert before_write <= inserted <= int(time.time() * 1000)


def _writable_tables(meta) -> list[str]:
    from statecat.catalog.spark.edit_plan import KEYED_KINDS, edit_tables, element_encoder
    from statecat.writers.entry_codec import EntryCodec

    names = []
    for table in edit_tables(meta).values():
        try:
            if table.state.kind in KEYED_KINDS:
                EntryCodec(meta, table.operator, table.state).writable()
            else:
                element_encoder(table.state)
        except StatecatError:
            continue  # shown only as bytes: refused, as test_state_shown_as_bytes_... checks
        names.append(table.name)
    return names


# One case per family of value types (the same job on other backends gives Spark the same types).
TYPE_FAMILIES = [
    "sql_groupby_hashmap_1.15",
    "sql_groupby_hashmap_2.3",
    "sql_types_2.3",
    "sql_window_2.3",
    "sql_join_2.3",
    "datastream_thread_2.3",
    "datastream_types_thread_2.3",
    "datastream_windows_thread_2.3",
    "datastream_successive_2.3",
    "datastream_broadcast_filesource_2.3",
    "datastream_java_pojo_2.3",
    "datastream_java_avro_2.3",
]


# A MAP whose key is a struct holding a MAP (the SQL join's records keyed by a whole row): Spark's
# store assignment cannot write such a column, so Spark refuses UPDATE and INSERT on these tables.
SPARK_CANNOT_ASSIGN = {("sql_types_2.3", "left_records")}


@pytest.mark.parametrize("case,table", sorted(SPARK_CANNOT_ASSIGN))
def test_a_column_spark_cannot_assign_is_refused_with_sparks_reason(tmp_path, case, table):
    with pytest.raises(EditError, match="INVALID_MAP_KEY_TYPE"):
        write_savepoint(str(savepoint_dir(case)), str(tmp_path / "out"), sql=f"UPDATE {table} SET value = value")
    assert list(tmp_path.iterdir()) == []
    write_savepoint(str(savepoint_dir(case)), str(tmp_path / "out"), sql=f"DELETE FROM {table} WHERE key.f1 < 0")


@pytest.mark.parametrize("case", TYPE_FAMILIES)
def test_every_value_written_back_from_its_decoded_form_is_unchanged(tmp_path, case, monkeypatch):
    """`SET value = value` on every row of every state statecat can write (keyed, timers, operator
    lists, the source coordinator): each value goes from the decoder through Spark (the flinkstate
    source, a Parquet copy, Spark's Arrow, the comparison by Spark's tasks and its Parquet changes)
    and back, and must come back equal, so nothing changes: the savepoint diffs empty and no
    key-group is rebuilt. (Compared in this process, every type is held to Spark's values by
    tests/test_edit_differential.py.)"""
    from statecat.catalog.spark import edit_changes
    from statecat.statemeta.model import load_state_meta

    monkeypatch.setattr(edit_changes, "HELD_ROWS", 0)

    src = savepoint_dir(case)
    tables = [t for t in _writable_tables(load_state_meta(str(src))) if (case, t) not in SPARK_CANNOT_ASSIGN]
    assert tables, f"{case} has no state statecat can write"
    result = write_savepoint(str(src), str(tmp_path / "out"), sql=[f"UPDATE {t} SET value = value" for t in tables])
    assert sum(s.matched for s in result.statements) > 0
    assert result.summary.key_groups_rebuilt == 0
    totals = diff_savepoints(str(src), str(tmp_path / "out")).totals()
    assert (totals["added"], totals["removed"], totals["changed"]) == (0, 0, 0), totals


def test_deleting_one_window_warns_about_its_timer(tmp_path):
    """A window's timer fires on an empty window once its state is gone (seen in real Flink:
    tests/test_write_restore.py): deleting the state of one (key, window) says so."""
    case = "sql_window_2.3"
    _, state = _expected(case, "window-aggs")
    target = state["rows"][0]
    result = write_savepoint(
        str(savepoint_dir(case)),
        str(tmp_path / "out"),
        sql=f"DELETE FROM window_aggs WHERE key = '{target['key']}' AND namespace = {target['namespace']}",
    )
    (warning,) = result.warnings
    assert "timer_state_event_window_timers" in warning and f"('{target['key']}', {target['namespace']})" in warning


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE summary SET value.count = NULL WHERE key = 'k_3'",
        "UPDATE summary SET value = named_struct('count', NULL, 'name', 'x', 'total', 1.0D) WHERE key = 'k_3'",
        "INSERT INTO summary (key, value) VALUES ('k_new', named_struct('count', 1L, 'name', 'x', 'total', NULL))",
    ],
)
def test_null_into_a_pojo_field_that_may_be_primitive_is_refused(tmp_path, statement):
    """Flink's PojoSerializer cannot set a primitive field to NULL (it failed the restore of such a
    savepoint: tests/test_write_restore.py); the snapshot does not say long from Long."""
    with pytest.raises(EditError, match="to NULL.*primitive"):
        write_savepoint(str(savepoint_dir("datastream_java_pojo_2.3")), str(tmp_path / "out"), sql=statement)
    assert list(tmp_path.iterdir()) == []


def test_null_into_a_pojo_string_field_is_written(tmp_path):
    case = "datastream_java_pojo_2.3"
    write_savepoint(
        str(savepoint_dir(case)), str(tmp_path / "out"), sql="UPDATE summary SET value.name = NULL WHERE key = 'k_3'"
    )
    (change,) = _changes(savepoint_dir(case), tmp_path / "out")
    assert change["new"]["name"] is None


# ----------------------------------------------------------------------------- statements Spark makes possible


def test_a_key_renamed_moves_to_its_key_group(tmp_path):
    case = "sql_groupby_hashmap_2.3"
    op, state = _expected(case, "accState")
    dst = tmp_path / "out"
    write_savepoint(
        str(savepoint_dir(case)), str(dst), sql="UPDATE accstate SET key = 'key_662b' WHERE key = 'key_662'"
    )
    _row(state["rows"], "key_662")["key"] = "key_662b"
    check_state_rows(dst, op, state)
    kinds = sorted((c["change"], c["key"]) for c in _changes(savepoint_dir(case), dst))
    assert kinds == [("added", "key_662b"), ("removed", "key_662")]


def test_insert_select_copies_a_key_and_reads_other_tables(tmp_path):
    case = "sql_groupby_hashmap_2.3"
    op, state = _expected(case, "accState")
    dst = tmp_path / "out"
    result = write_savepoint(
        str(savepoint_dir(case)),
        str(dst),
        sql=[
            "INSERT INTO accstate SELECT concat(key, '_copy'), namespace, value FROM accstate WHERE key IN ('key_1', 'key_2')",
            # a subquery over the table as the first statement left it
            "DELETE FROM accstate WHERE key IN (SELECT key FROM accstate WHERE key LIKE '%_copy' AND value.f0 < 3)",
        ],
    )
    copies = [dict(_row(state["rows"], k), key=f"{k}_copy") for k in ("key_1", "key_2")]
    kept = [c for c in copies if c["value"]["f0"] >= 3]
    assert [s.matched for s in result.statements] == [2, len(copies) - len(kept)]
    state["rows"] += kept
    check_state_rows(dst, op, state)


def test_merge_updates_matched_keys_and_inserts_the_others(tmp_path):
    case = "sql_groupby_hashmap_2.3"
    op, state = _expected(case, "accState")
    dst = tmp_path / "out"
    result = write_savepoint(
        str(savepoint_dir(case)),
        str(dst),
        sql="MERGE INTO accstate t USING (SELECT * FROM VALUES ('key_662', 5L), ('key_1', -1L), ('fresh', 7L) AS c(k, n)) s "
        "ON t.key = s.k WHEN MATCHED AND s.n < 0 THEN DELETE WHEN MATCHED THEN UPDATE SET value.f0 = s.n "
        "WHEN NOT MATCHED THEN INSERT (key, value) VALUES (s.k, named_struct('f0', s.n, 'f1', 0))",
    )
    assert [s.matched for s in result.statements] == [3]
    _row(state["rows"], "key_662")["value"]["f0"] = 5
    state["rows"] = [r for r in state["rows"] if r["key"] != "key_1"]
    state["rows"].append({"key": "fresh", "namespace": None, "value": {"f0": 7, "f1": 0}})
    check_state_rows(dst, op, state)


def test_merge_refuses_a_row_matched_twice(tmp_path):
    with pytest.raises(EditError, match="more than one source row"):
        write_savepoint(
            str(savepoint_dir("sql_groupby_hashmap_2.3")),
            str(tmp_path / "out"),
            sql="MERGE INTO accstate t USING (SELECT 'key_662' AS k UNION ALL SELECT 'key_662') s ON t.key = s.k "
            "WHEN MATCHED THEN UPDATE SET value.f0 = 0",
        )
    assert list(tmp_path.iterdir()) == []


def test_list_element_removed_map_entry_changed_and_a_second_timer(tmp_path, compared):
    case = "datastream_thread_2.3"
    _, items = _expected(case, "items", "keyed-fn")
    row = next(r for r in items["rows"] if len(r["value"]) > 1)
    key, element = row["key"], row["value"][0]
    _, per_tag = _expected(case, "per_tag", "keyed-fn")
    tagged = next(r for r in per_tag["rows"] if r["key"] == key)
    tag = next(iter(tagged["value"]))  # expected.json keeps a map as an object
    _, timers = _expected(case, "_timer_state/event_user-timers", "keyed-fn")
    timer = next(r for r in timers["rows"] if r["key"] == key)
    dst = tmp_path / "out"
    result = write_savepoint(
        str(savepoint_dir(case)),
        str(dst),
        sql=[
            f"UPDATE items SET value = array_remove(value, '{element}') WHERE key = '{key}'",
            f"UPDATE per_tag SET value = map_concat(map_filter(value, (k, v) -> k != '{tag}'), map('{tag}', 1000L)) "
            f"WHERE key = '{key}'",
            f"INSERT INTO timer_state_event_user_timers VALUES ('{key}', NULL, {timer['value'] + 5000})",
        ],
    )
    assert [s.matched for s in result.statements] == [1, 1, 1]
    from statecat.readers import SavepointReader

    reader = SavepointReader(str(dst))
    (new_items,) = [r["value"] for r in reader.table("items", "keyed-fn").to_pylist() if r["key"] == key]
    assert new_items == [v for v in row["value"] if v != element]
    (new_map,) = [dict(r["value"]) for r in reader.table("per_tag", "keyed-fn").to_pylist() if r["key"] == key]
    assert new_map == {**tagged["value"], tag: 1000}
    times = sorted(
        r["value"] for r in reader.table("_timer_state/event_user-timers", "keyed-fn").to_pylist() if r["key"] == key
    )
    assert times == sorted([t["value"] for t in timers["rows"] if t["key"] == key] + [timer["value"] + 5000])


def test_the_same_timer_twice_is_refused(tmp_path):
    case = "datastream_thread_2.3"
    _, timers = _expected(case, "_timer_state/event_user-timers", "keyed-fn")
    timer = timers["rows"][0]
    with pytest.raises(EditError, match="two timers for key"):
        write_savepoint(
            str(savepoint_dir(case)),
            str(tmp_path / "out"),
            sql=f"INSERT INTO timer_state_event_user_timers VALUES ('{timer['key']}', NULL, {timer['value']})",
        )
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------- signals while Spark evaluates


def _spark_write(parent, signum: int, delay: float) -> tuple[int, str]:
    """`statecat write --sql` in a process of its own (its own local Spark), sent ``signum`` ``delay``
    seconds after its scratch directory for Spark appears."""
    import signal
    import time

    env = {**os.environ, "STATECAT_HOME": str(parent.parent / "home"), "STATECAT_METASTORE": "embedded"}
    command = [sys.executable, "-m", "statecat.catalog.cli", "write", str(savepoint_dir("sql_groupby_hashmap_2.3"))]
    statement = "UPDATE accstate SET value.f0 = value.f0 + 1 WHERE value.f1 > 500"
    process = subprocess.Popen(
        [*command, "--out", str(parent / "out"), "--sql", statement],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=lambda: (
            signal.signal(signal.SIGINT, signal.SIG_DFL),
            signal.signal(signal.SIGTERM, signal.SIG_DFL),
        ),
    )
    try:
        deadline = time.monotonic() + 300
        while not any(".statecat-edit-" in n for n in os.listdir(parent)):
            assert process.poll() is None, process.communicate()[1]
            assert time.monotonic() < deadline, "no scratch directory within 300 s"
            time.sleep(0.01)  # polling for the directory, with a deadline
        time.sleep(delay)  # the random moment, not a synchronisation
        process.send_signal(signum)
        _, err = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return process.returncode, err


def test_a_signal_while_spark_evaluates_leaves_nothing(tmp_path):
    """SIGINT and SIGTERM remove the scratch directory; what SIGKILL leaves, the next write removes."""
    import random
    import signal

    rng = random.Random(20261128)
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
        parent = tmp_path / signum.name
        parent.mkdir()
        delay = rng.uniform(0, 2)
        code, err = _spark_write(parent, signum, delay)
        what = f"{signum.name} after {delay:.2f} s: exit {code}, stderr {err!r}"
        if signum == signal.SIGKILL:
            assert code == -signal.SIGKILL, what
            # one more write into the same parent (no statements: no Spark)
            write_savepoint(str(savepoint_dir("sql_groupby_hashmap_2.3")), str(parent / "out"), overwrite=True)
            assert os.listdir(parent) == ["out"], what
            continue
        assert os.listdir(parent) == [] or (code == 0 and os.listdir(parent) == ["out"]), what
        if code != 0:
            assert code == 128 + signum, what
            assert err.strip().splitlines()[-1].startswith(f"statecat: interrupted by {signum.name}"), what
