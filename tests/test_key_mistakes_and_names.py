"""Every key mistake says so, and every name of a state finds it (issue 27, parts 2 and 3).

Keys: a key that cannot be of a state's key type is exit 2 naming the type and how to write the key,
in ``read --key``, ``key`` and ``history`` alike; a well-formed key no state holds is "0 rows" (on
stderr for JSON lines and CSV, ``"rows": []`` in JSON) with exit 0, never a silent empty answer.
Names: the name ``inspect`` prints, the other spelling of a PyFlink process-mode state
(``python-state-count`` / ``count``) and the table name all find the state, with and without a
descriptor file, in ``read``, ``key``, ``history``, ``diff`` and Spark SQL.

Ground truth is the fixtures' expected.json (derived from the jobs' input), never statecat's own reads.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from statecat.catalog.cli import main as cli_main
from tests.fixtures.expected import iter_states, load_expected, savepoint_dir
from tests.test_stateinfo import _descriptor_doc

GROUPBY = "sql_groupby_hashmap_2.3"  # accState keyed by ROW<STRING> (shown as STRING), keys key_0 ...
COMPOSITE = "sql_types_2.3"  # keyed by ROW<STRING, INTEGER>
NUMBERS = "datastream_types_thread_2.3"  # types-fn keyed by INT, long-keyed-fn by LONG
PROCESS = "datastream_process_2.3"  # PyFlink process mode: python-state-<name>, coder bytes


def _rows(case: str, state: str) -> list[dict]:
    return next(s["rows"] for _, s in iter_states(load_expected(case)) if s["name"] == state)


def _keys(case: str, state: str) -> list:
    return [r["key"] for r in _rows(case, state)]


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = cli_main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def one_line_error(code: int, err: str) -> str:
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("statecat: error: "), err
    return lines[0]


# ----------------------------------------------------------------------------- keys of the wrong form


@pytest.mark.parametrize("command", ["read", "key", "history"])
@pytest.mark.parametrize(
    ("case", "state", "key", "says"),
    [
        # a list of 2 fields for a one-field key (issue 27's example)
        (GROUPBY, "accState", '["key_662", 7]', ["a list of 2 fields", "STRING", "plain text"]),
        # an object whose field is not the key's (Flink keeps no SQL field names: f0)
        (GROUPBY, "accState", '{"word": "key_662"}', ["field word", "f0", "STRING", "plain text"]),
        (COMPOSITE, "right-records", "ka", ["ROW<STRING, INTEGER>", "JSON list of its 2 fields"]),
        (COMPOSITE, "right-records", '["ka"]', ["a list of 1 field", "ROW<STRING, INTEGER>", "has 2"]),
        (COMPOSITE, "right-records", '["ka", "x"]', ["'x' is not an integer", "JSON list of its 2 fields"]),
        (NUMBERS, "v_int", "abc", ["'abc' is not an integer", "INT", "an integer"]),
    ],
)
def test_a_key_that_cannot_be_of_the_key_type_is_exit_2_naming_the_type_and_the_form(
    capsys, command, case, state, key, says
):
    path = str(savepoint_dir(case))
    args = ["read", path, "--state", state, "--key", key] if command == "read" else [command, path, key]
    line = one_line_error(*run(capsys, *args)[::2])
    for fragment in says:
        assert fragment in line, (fragment, line)


def test_key_across_states_names_every_key_type_present_when_the_key_fits_none(capsys):
    line = one_line_error(*run(capsys, "key", str(savepoint_dir(NUMBERS)), "abc")[::2])
    # types-fn's states are keyed by INT, long-keyed-fn's by LONG: both types, with their states
    keyed = sorted(
        (s["name"] for op, s in iter_states(load_expected(NUMBERS)) if op["uid"] == "types-fn" and s["kind"] == "keyed")
    )
    timers = 2  # each keyed operator's event and processing time timers
    assert f"INT keys ({', '.join(keyed[:3])} and {len(keyed) + timers - 3} more)" in line
    assert "LONG keys (count, _timer_state/" in line
    assert "Write keys of type INT or LONG as an integer" in line


def test_key_fitting_some_states_reads_those_and_lists_the_others(capsys):
    # Above INT's range: only long-keyed-fn (LONG) can hold it.
    big = next(k for k in _keys(NUMBERS, "count") if k >= 2**31)
    code, out, err = run(capsys, "key", str(savepoint_dir(NUMBERS)), str(big), "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    want = next(r["value"] for r in _rows(NUMBERS, "count") if r["key"] == big)
    assert [(r["state"], r["value"]) for r in doc["rows"] if r["kind"] == "keyed"] == [("count", want)]
    assert doc["skipped"] and all(s["operator"] == "types-fn" and "out of range" in s["reason"] for s in doc["skipped"])


# ----------------------------------------------------------------------------- well-formed keys no state holds


def _absent_note(text: str, case: str, state: str, key: str) -> None:
    """The note names the key and shows keys of its key-group that are really there."""
    assert f"'{key}'" in text
    held = set(_keys(case, state))
    assert key not in held
    shown = text.split("keys beside it in its key-group: ", 1)[1].rstrip(")\n").split(", ")
    assert shown and all(k.strip("'") in held for k in shown), shown


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "table"])
def test_read_of_a_key_no_state_holds_says_0_rows(capsys, fmt):
    # 662 is a well-formed STRING key (the text "662"), held by no state: the keys are key_0 ...
    code, out, err = run(
        capsys, "read", str(savepoint_dir(GROUPBY)), "--state", "accState", "--key", "662", "--format", fmt
    )
    assert code == 0, err
    if fmt == "jsonl":
        assert out == "" and err.startswith("0 rows: 'accState' holds no key '662'")
        _absent_note(err, GROUPBY, "accState", "662")
    elif fmt == "csv":
        assert out == "key,namespace,value\r\n" and err.startswith("0 rows: ")
        _absent_note(err, GROUPBY, "accState", "662")
    else:
        assert "\n0 rows\n'accState' holds no key '662'" in out and err == ""
        _absent_note(out, GROUPBY, "accState", "662")


@pytest.mark.parametrize("fmt", ["table", "csv", "json"])
def test_key_and_history_of_a_key_no_state_holds_say_0_rows(capsys, tmp_path, fmt):
    root = tmp_path / "job"
    shutil.copytree(savepoint_dir(GROUPBY), root / "savepoint-1")
    for command, path in (("key", str(savepoint_dir(GROUPBY))), ("history", str(root))):
        code, out, err = run(capsys, command, path, "662", "--format", fmt)
        assert code == 0, err
        if fmt == "json":
            doc = json.loads(out)
            rows = doc["rows"] if command == "key" else [r for s in doc["snapshots"] for r in s["rows"]]
            assert rows == [] and out.endswith("\n")
        elif fmt == "csv":
            assert len(out.splitlines()) == 1 and err.startswith("0 rows: no state holds key '662'")
            _absent_note(err, GROUPBY, "accState", "662")
        else:
            assert "no state holds key '662'" in out
            _absent_note(out.split("no state holds key", 1)[1].splitlines()[0], GROUPBY, "accState", "662")


def test_read_of_an_empty_state_says_0_rows(capsys):
    empty = next(s["name"] for _, s in iter_states(load_expected(NUMBERS)) if s["kind"] == "timer" and not s["rows"])
    code, out, err = run(capsys, "read", str(savepoint_dir(NUMBERS)), "--state", empty, "--operator", "types-fn")
    assert code == 0 and out == "" and "0 rows" in err, err


@pytest.mark.parametrize("key", ["key_662", '["key_662"]', '{"f0": "key_662"}'])
def test_a_one_field_key_reads_the_same_in_every_form(capsys, key):
    want = next(r for r in _rows(GROUPBY, "accState") if r["key"] == "key_662")
    code, out, err = run(capsys, "read", str(savepoint_dir(GROUPBY)), "--state", "accState", "--key", key)
    assert code == 0, err
    assert [json.loads(line) for line in out.splitlines()] == [want]


def test_read_takes_a_composite_key_as_a_json_list(capsys):
    # It used to fail computing the key-group of a list (SQL keys are rows of fields f0, f1).
    want = [r for r in _rows(COMPOSITE, "right-records") if r["key"] == {"f0": "ka", "f1": 0}]
    assert want
    code, out, err = run(
        capsys, "read", str(savepoint_dir(COMPOSITE)), "--state", "right-records", "--key", '["ka", 0]'
    )
    assert code == 0, err
    got = [json.loads(line) for line in out.splitlines()]
    assert [r["key"] for r in got] == [r["key"] for r in want]


def test_key_mistakes_through_the_installed_command_have_no_traceback():
    result = subprocess.run(
        [sys.executable, "-m", "statecat.catalog.cli", "key", str(savepoint_dir(GROUPBY)), '["key_662", 7]'],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith('statecat: error: key ["key_662", 7] fits no keyed state\'s key type')


# ----------------------------------------------------------------------------- one name per state


@pytest.fixture(scope="module")
def descriptors(tmp_path_factory):
    path = tmp_path_factory.mktemp("descriptors") / "descriptors.json"
    path.write_text(json.dumps(_descriptor_doc(load_expected(PROCESS))))
    return str(path)


def _declared() -> dict[str, tuple[str, list[dict]]]:
    """python-state-<name> -> (declared name, expected rows) of the PyFlink keyed states."""
    return {
        s["name"]: (s["declared_name"], s["rows"])
        for _, s in iter_states(load_expected(PROCESS))
        if s["name"].startswith("python-state-") and s["kind"] == "keyed"
    }


def _inspect(capsys, *extra: str) -> dict[str, str]:
    """state name -> table name, as inspect prints them."""
    code, out, err = run(capsys, "inspect", "--json", str(savepoint_dir(PROCESS)), *extra)
    assert code == 0, err
    return {s["name"]: s["table"] for op in json.loads(out)["operators"] for s in op["states"]}


def test_inspect_shows_one_table_per_state_with_and_without_descriptors(capsys, descriptors):
    plain, declared = _inspect(capsys), _inspect(capsys, "--descriptors", descriptors)
    for stored, (name, _) in _declared().items():
        assert plain[stored] == declared[name] == name.lower()  # adding the file keeps every table name


def test_every_name_of_a_pyflink_state_reads_it_with_and_without_descriptors(capsys, descriptors):
    path = str(savepoint_dir(PROCESS))
    for stored, (name, rows) in _declared().items():
        table = name.lower()
        for extra in ([], ["--descriptors", descriptors]):
            for asked in (stored, name, table):
                code, out, err = run(capsys, "read", path, "--state", asked, *extra)
                assert code == 0, (asked, extra, err)
                got = [json.loads(line) for line in out.splitlines()]
                assert sorted(r["key"] for r in got) == sorted(r["key"] for r in rows), (asked, extra)
                if extra and name == "count":  # declared LONG: the values themselves
                    assert {r["key"]: r["value"] for r in got} == {r["key"]: r["value"] for r in rows}
                if not extra:  # bytes, and stderr says to pass the descriptor file
                    assert "shown as bytes" in err and "--descriptors FILE" in err


def test_key_history_and_diff_take_either_name(capsys, descriptors, tmp_path):
    path = str(savepoint_dir(PROCESS))
    want = next(r["value"] for r in _rows(PROCESS, "python-state-count") if r["key"] == "k_0")
    for asked in ("python-state-count", "count"):
        for extra in ([], ["--descriptors", descriptors]):
            code, out, err = run(capsys, "key", path, "k_0", "--state", asked, "--format", "json", *extra)
            assert code == 0, err
            (row,) = json.loads(out)["rows"]
            assert row["state"] in ("python-state-count", "count")
            if extra:
                assert row["value"] == want
            code, out, err = run(capsys, "history", path, "k_0", "--state", asked, "--format", "json", *extra)
            assert code == 0, err
            assert [len(s["rows"]) for s in json.loads(out)["snapshots"]] == [1]
            code, out, err = run(capsys, "diff", path, path, "--state", asked, "--summary", "--format", "jsonl", *extra)
            assert code == 0, err
            (summary,) = [json.loads(line) for line in out.splitlines()]
            assert summary["status"] == "compared" and summary["unchanged"] == len(_rows(PROCESS, "python-state-count"))


def test_inspect_hint_names_the_read_side_descriptors_once_per_state(capsys):
    code, out, err = run(capsys, "inspect", str(savepoint_dir(PROCESS)))
    assert code == 0, err
    lines = [line for line in out.splitlines() if "python-state-" in line]
    assert len(lines) == len(_declared())
    for line in lines:
        assert line.count("PyFlink process-mode state") == 1, line
        assert line.index("--descriptors FILE") < line.index("statecat snapshot --descriptors FILE"), line


def test_a_table_name_finds_its_state_when_it_names_one(capsys):
    path = str(savepoint_dir(GROUPBY))
    code, out, err = run(capsys, "read", path, "--state", "accstate", "--key", "key_662")
    assert code == 0, err
    assert [json.loads(line) for line in out.splitlines()] == [
        r for r in _rows(GROUPBY, "accState") if r["key"] == "key_662"
    ]
    # one name for states of several operators: which operator, as for Flink's own name
    line = one_line_error(*run(capsys, "read", str(savepoint_dir("sql_join_2.3")), "--state", "sourcereaderstate")[::2])
    assert "exists in several operators" in line and "--operator" in line


# ----------------------------------------------------------------------------- SQL


@pytest.mark.spark
def test_the_table_inspect_prints_is_the_sql_table_with_and_without_descriptors(capsys, tmp_path, descriptors):
    from statecat.catalog import attach
    from statecat.catalog.servers.sessions import session
    from statecat.catalog.spark.databases import attach_with_descriptors

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    plain, declared = tmp_path / "plain" / "pyflink_job", tmp_path / "declared" / "pyflink_job"
    for copy in (plain, declared):
        shutil.copytree(savepoint_dir(PROCESS), copy)
    spark = session(str(tmp_path / "home"), conf={"spark.sql.session.timeZone": "UTC"}, quiet=True)
    plain_db = attach(spark, str(plain.parent), eager=True).registered[0].database
    declared_db = attach_with_descriptors(spark, str(declared.parent), descriptors).registered[0].database
    tables = _inspect(capsys)  # without the file: the names a user sees first
    for stored, (name, rows) in _declared().items():
        for db in (plain_db, declared_db):
            got = spark.sql(f"SELECT key, value FROM {db}.{tables[stored]}").collect()
            assert sorted(r["key"] for r in got) == sorted(r["key"] for r in rows), (db, stored)
            if db == declared_db and name == "count":
                assert {r["key"]: r["value"] for r in got} == {r["key"]: r["value"] for r in rows}
