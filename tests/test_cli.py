"""The `statecat inspect` and `statecat read` commands, run as a user runs them."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys

from statecat.readers import SavepointReader
from tests.fixtures.expected import iter_states, load_expected, savepoint_dir

EXAMPLE = "sql_groupby_hashmap_2.3"
JOIN = "sql_join_2.3"


def statecat(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "statecat.catalog.cli", *args], capture_output=True, text=True, timeout=120
    )


def _expected_row(case: str, state: str, key: str) -> dict:
    rows = next(s["rows"] for _, s in iter_states(load_expected(case)) if s["name"] == state)
    return next(r for r in rows if r["key"] == key)


def test_read_one_key_as_jsonl():
    result = statecat("read", str(savepoint_dir(EXAMPLE)), "--state", "accState", "--key", "key_662")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [json.loads(line) for line in lines] == [_expected_row(EXAMPLE, "accState", "key_662")]


def test_read_csv_and_table_formats_and_limit():
    as_csv = statecat("read", str(savepoint_dir(EXAMPLE)), "--state", "accState", "--limit", "5", "--format", "csv")
    rows = list(csv.reader(io.StringIO(as_csv.stdout)))
    assert rows[0] == ["key", "namespace", "value"] and len(rows) == 6
    table = statecat(
        "read", str(savepoint_dir(EXAMPLE)), "--state", "accState", "--key", "key_662", "--format", "table"
    )
    assert "key_662" in table.stdout and table.stdout.rstrip().endswith("1 row")


def test_operator_state_rows_carry_the_subtask():
    result = statecat("read", str(savepoint_dir("sql_window_2.3")), "--state", "watermark")
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert rows and all(set(r) == {"value", "subtask"} for r in rows)
    assert {r["subtask"] for r in rows} <= {0, 1}


def test_state_name_in_several_operators_lists_the_candidates():
    result = statecat("read", str(savepoint_dir(JOIN)), "--state", "SourceReaderState")
    assert result.returncode == 2
    assert "exists in several operators" in result.stderr and "--operator" in result.stderr
    meta = SavepointReader(savepoint_dir(JOIN)).meta
    for op in meta.operators:
        if any(s.name == "SourceReaderState" for s in op.states):
            assert op.id in result.stderr
    by_operator = statecat(
        "read", str(savepoint_dir(JOIN)), "--state", "SourceReaderState", "--operator", "Source: a[1]"
    )
    assert by_operator.returncode == 0, by_operator.stderr


def test_key_on_an_operator_state_is_refused():
    result = statecat("read", str(savepoint_dir("sql_window_2.3")), "--state", "watermark", "--key", "x")
    assert result.returncode == 2 and "--key applies to keyed states" in result.stderr


def test_inspect_text_shows_kinds_and_types():
    result = statecat("inspect", str(savepoint_dir("datastream_thread_2.3")))
    assert result.returncode == 0, result.stderr
    assert "operator keyed-fn" in result.stdout
    assert (
        "per_tag  (keyed MAP; table per_tag)  key ROW<f0 STRING>, namespace VOID_NAMESPACE, value MAP<STRING, LONG>"
        in result.stdout
    )


def test_inspect_json_is_machine_readable():
    result = statecat("inspect", "--json", str(savepoint_dir(EXAMPLE)))
    report = json.loads(result.stdout)
    assert report["metadata_version"] == 6 and report["savepoint_format"] == "CANONICAL"
    states = {s["name"]: s for op in report["operators"] for s in op["states"]}
    assert states["accState"]["value_type"] == "ROW<BIGINT, BIGINT>"
    assert states["accState"]["decode_status"] == "full"


def test_savepoint_given_as_file_uri():
    path = savepoint_dir(EXAMPLE)
    by_uri = SavepointReader(f"file://{path}").table("accState", keys=["key_662"])
    assert by_uri.to_pylist() == SavepointReader(str(path)).table("accState", keys=["key_662"]).to_pylist()
