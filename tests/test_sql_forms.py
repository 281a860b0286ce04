"""The SQL forms of the key view, a key's history and the diff: ``statecat.key_view`` and ``statecat.diff``.

Ground truth: the fixtures' expected.json (written from the jobs' input): the key's rows
(tests/test_key_view.expected_view) and the changes two savepoints' contents imply
(tests/test_diff.expected_changes). The key view is also checked against the Python key view.
One Spark session for the module, on its own home; the savepoints are registered lazily (the
tables read the registry, so no database is materialised).
"""

from __future__ import annotations

import json
import os
import shutil
import sys

import pytest

from tests.fixtures.expected import CASES_DIR, load_expected, savepoint_dir
from tests.test_diff import _id, expected_changes
from tests.test_key_view import _as_argument, expected_view, sample_keys

KEY_CASES = [
    "sql_groupby_hashmap_1.20",
    "sql_groupby_hashmap_2.3",
    "sql_groupby_rocksdb_2.3",
    "sql_window_2.3",
    "datastream_thread_1.20",
    "datastream_thread_2.3",
]
DIFF_PAIRS = [
    ("sql_groupby_hashmap_1.20", "sql_groupby_rocksdb_2.3"),
    ("datastream_thread_1.20", "datastream_thread_2.3"),
]
# Their values decode as expected.json has them (no PyFlink coder bytes): compared with it directly.
EXPECTED_VALUE_CASES = [
    "sql_groupby_hashmap_1.20",
    "sql_groupby_hashmap_2.3",
    "sql_groupby_rocksdb_2.3",
    "sql_window_2.3",
]
KEY_VIEW_COLUMNS = [
    "database",
    "path",
    "checkpoint_id",
    "taken_at",
    "time_source",
    "operator",
    "operator_id",
    "state",
    "table_name",
    "kind",
    "key",
    "key_group",
    "namespace",
    "value",
]
DIFF_COLUMNS = ["a", "b", "operator", "state", "key", "namespace", "change", "old_value", "new_value", "reason"]


def db(case: str) -> str:
    return case.replace(".", "_")


def sql_key(key) -> str:
    """A key as a query gives it: text, a number's digits, a composite key's fields as a JSON list."""
    return key if isinstance(key, str) else json.dumps(_as_argument(key))


def quoted(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    from statecat.catalog import attach
    from statecat.catalog.servers.sessions import session

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    home = tmp_path_factory.mktemp("sql_forms_home")
    spark = session(
        str(home),
        conf={
            "spark.sql.session.timeZone": "UTC",
            "spark.log.level": "ERROR",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": "4",
        },
    )
    result = attach(spark, [str(CASES_DIR / case) for case in KEY_CASES], eager=False)
    assert result.failed == [] and sorted(r.database for r in result.registered) == sorted(map(db, KEY_CASES))
    return spark


def key_view_rows(spark, key: str, case: str) -> list:
    return spark.sql(
        f"SELECT * FROM statecat.key_view WHERE key = {quoted(key)} AND database = {quoted(db(case))}"
    ).collect()


# ----------------------------------------------------------------------------- key view


@pytest.mark.spark
def test_every_column_has_a_comment(spark):
    for table, columns in (("statecat.key_view", KEY_VIEW_COLUMNS), ("statecat.diff", DIFF_COLUMNS)):
        described = {
            r.col_name: r.comment
            for r in spark.sql(f"DESCRIBE TABLE {table}").collect()
            if r.col_name and not r.col_name.startswith("#")
        }
        assert list(described) == columns
        assert all(comment for comment in described.values()), table


@pytest.mark.spark
@pytest.mark.parametrize("case", KEY_CASES)
def test_key_view_equals_the_python_key_view(spark, case):
    from statecat.catalog.spark.sql_forms import json_text
    from statecat.readers import SavepointReader

    reader = SavepointReader(str(savepoint_dir(case)))
    for key in sample_keys(case):
        given = sql_key(key)
        got = sorted(
            (
                r.operator,
                r.operator_id,
                r.state,
                r.table_name,
                r.kind,
                r.key,
                r.key_group,
                r.namespace,
                r.value,
                r.database,
                r.path,
                r.checkpoint_id,
            )
            for r in key_view_rows(spark, given, case)
        )
        view = reader.key(given)
        want = sorted(
            (
                r.operator,
                r.operator_id,
                r.state,
                r.table,
                r.kind,
                given,
                r.key_group,
                json_text(r.namespace),
                json_text(r.value),
                db(case),
                str(savepoint_dir(case)),
                view.checkpoint_id,
            )
            for r in view.rows
        )
        assert got == want and got, (case, given)


@pytest.mark.spark
@pytest.mark.parametrize("case", EXPECTED_VALUE_CASES)
def test_key_view_answers_the_expected_content(spark, case):
    from statecat.statemeta.model import load_state_meta

    tables = {(op.id, s.name) for op, s in load_state_meta(str(savepoint_dir(case))).states()}
    for key in sample_keys(case):
        want = {
            name: sorted((_id(r["namespace"]), _id(r["value"])) for r in rows)
            for name, rows in expected_view(case, key).items()
        }
        got: dict = {}
        for r in key_view_rows(spark, sql_key(key), case):
            assert (r.operator_id, r.state) in tables and r.key == sql_key(key)
            got.setdefault((r.operator_id, r.state), []).append(
                (_id(json.loads(r.namespace) if r.namespace is not None else None), _id(json.loads(r.value)))
            )
        assert {name: sorted(rows) for name, rows in got.items()} == want, (case, key)


@pytest.mark.spark
def test_key_view_ordered_by_taken_at_is_the_key_history(spark):
    from statecat.readers import key_history

    cases = ["sql_groupby_hashmap_1.20", "sql_groupby_hashmap_2.3", "sql_groupby_rocksdb_2.3"]
    rows = spark.sql(
        "SELECT database, path, taken_at, time_source, state, value FROM statecat.key_view "
        "WHERE key = 'key_662' AND database IN ('sql_groupby_hashmap_1_20', 'sql_groupby_hashmap_2_3', "
        "'sql_groupby_rocksdb_2_3') AND state = 'accState' ORDER BY taken_at, database"
    ).collect()
    history = key_history([str(savepoint_dir(c)) for c in cases], "key_662", states=["accState"])
    assert [r.path for r in rows] == [e.path for e in history]
    assert [r.time_source for r in rows] == [e.time_source for e in history]
    expected = {
        str(savepoint_dir(c)): next(r["value"] for r in expected_view(c, "key_662").popitem()[1]) for c in cases
    }
    assert [json.loads(r.value) for r in rows] == [expected[r.path] for r in rows]


@pytest.mark.spark
def test_key_view_without_a_key_is_a_one_line_error(spark):
    from statecat.catalog.spark.errors import spark_error_message
    from statecat.catalog.spark.sql_forms import MISSING_KEY

    for query in (
        "SELECT * FROM statecat.key_view",
        "SELECT count(*) FROM statecat.key_view WHERE database = 'sql_window_2_3'",
        "SELECT * FROM statecat.key_view WHERE key LIKE 'key_6%'",
    ):
        with pytest.raises(Exception) as info:
            spark.sql(query).collect()
        assert spark_error_message(info.value) == MISSING_KEY
    assert "\n" not in MISSING_KEY and "WHERE key = " in MISSING_KEY


@pytest.mark.spark
def test_key_in_several_keys_and_a_key_absent_everywhere(spark):
    rows = spark.sql(
        "SELECT key, value FROM statecat.key_view WHERE key IN ('key_662', 'key_7') "
        "AND database = 'sql_groupby_hashmap_2_3' AND state = 'accState'"
    ).collect()
    want = _acc_values("sql_groupby_hashmap_2.3", ["key_662", "key_7"])
    assert {r.key: json.loads(r.value) for r in rows} == want and len(rows) == 2
    assert spark.sql("SELECT * FROM statecat.key_view WHERE key = 'no_such_key'").collect() == []


def _acc_values(case: str, keys: list[str]) -> dict:
    state = next(s for op in load_expected(case)["operators"] for s in op["states"] if s["name"] == "accState")
    return {r["key"]: r["value"] for r in state["rows"] if r["key"] in keys}


# ----------------------------------------------------------------------------- diff


def _parse_key(text, key_is_text: bool):
    if text is None:
        return None
    return text if key_is_text else json.loads(text)


def _spark_changes(rows, case_a: str, case_b: str) -> dict:
    """(operator id, state) -> {added, removed, changed}: the ids tests/test_diff.expected_changes uses."""
    from statecat.statemeta.model import load_state_meta

    ids = {}
    for case in (case_b, case_a):  # the label of A's operator wins (as the diff names it)
        ids.update({op.label: op.id for op in load_state_meta(str(savepoint_dir(case))).operators})
    keys_are_text = {}
    for case in (case_a, case_b):
        for op in load_expected(case)["operators"]:
            for s in op["states"]:
                if s["rows"]:
                    keys_are_text[s["name"]] = all(isinstance(r["key"], str) for r in s["rows"])
    kinds = {s["name"]: s["kind"] for op in load_expected(case_a)["operators"] for s in op["states"]}
    out: dict = {}
    for r in rows:
        if r.change == "reason":
            continue
        ident = (
            _id(_parse_key(r.key, keys_are_text.get(r.state, True))),
            _id(json.loads(r.namespace) if r.namespace is not None else None),
        )
        if kinds.get(r.state) == "timer":
            ident += (_id(json.loads(r.new_value if r.change == "added" else r.old_value)),)
        out.setdefault((ids[r.operator], r.state), {}).setdefault(r.change, set()).add(ident)
    return out


@pytest.mark.spark
@pytest.mark.parametrize("case_a,case_b", DIFF_PAIRS)
def test_diff_reports_exactly_the_changes_the_expected_contents_imply(spark, case_a, case_b):
    rows = spark.sql(f"SELECT * FROM statecat.diff WHERE a = '{db(case_a)}' AND b = '{db(case_b)}'").collect()
    assert {(r.a, r.b) for r in rows} == {(db(case_a), db(case_b))}
    got = _spark_changes(rows, case_a, case_b)
    want = expected_changes(case_a, case_b)
    assert want and any(changes["changed"] for changes in want.values())
    for name, changes in want.items():
        for kind in ("added", "removed", "changed"):
            assert got.get(name, {}).get(kind, set()) == changes[kind], (name, kind)
    keyed = {state for _, state in want}
    assert not [r for r in rows if r.change == "reason" and r.state in keyed]
    for r in rows:
        if r.change == "changed":
            assert r.old_value is not None and r.new_value is not None and r.old_value != r.new_value
        elif r.change == "reason":
            assert r.reason and r.key is None
        else:
            assert (r.old_value is None) == (r.change == "added") and r.reason is None


@pytest.mark.spark
def test_diff_values_are_the_old_and_new_contents(spark):
    case_a, case_b = DIFF_PAIRS[0]
    rows = spark.sql(
        f"SELECT key, change, old_value, new_value FROM statecat.diff WHERE a = '{db(case_a)}' "
        f"AND b = '{db(case_b)}' AND state = 'accState'"
    ).collect()
    old, new = _acc_values(case_a, [r.key for r in rows]), _acc_values(case_b, [r.key for r in rows])
    assert rows and all(r.change == "changed" for r in rows)
    for r in rows:
        assert json.loads(r.old_value) == old[r.key] and json.loads(r.new_value) == new[r.key]


@pytest.mark.spark
def test_diff_without_both_savepoints_is_a_one_line_error(spark):
    from statecat.catalog.spark.errors import spark_error_message
    from statecat.catalog.spark.sql_forms import MISSING_SIDES

    for query in ("SELECT * FROM statecat.diff", "SELECT * FROM statecat.diff WHERE a = 'sql_window_2_3'"):
        with pytest.raises(Exception) as info:
            spark.sql(query).collect()
        assert spark_error_message(info.value) == MISSING_SIDES
    with pytest.raises(Exception) as info:
        spark.sql("SELECT * FROM statecat.diff WHERE a = 'sql_window_2_3' AND b = 'sql_window_2_4'").collect()
    assert spark_error_message(info.value).startswith(
        "statecat.diff: unknown savepoint database 'sql_window_2_4'. Did you mean 'sql_window_2_3'?"
    )


@pytest.mark.spark
def test_a_state_in_one_savepoint_only_is_a_reason_row(spark):
    rows = spark.sql(
        "SELECT operator, state, change, reason FROM statecat.diff "
        "WHERE a = 'sql_window_2_3' AND b = 'sql_groupby_hashmap_2_3' AND state = 'accState'"
    ).collect()
    assert [(r.state, r.change, r.reason) for r in rows] == [("accState", "reason", "only in B: the state is not in A")]


# ----------------------------------------------------------------------------- partitions and pushdown


@pytest.mark.spark
def test_one_task_per_savepoint_and_per_state_range(spark):
    two = spark.sql(
        "SELECT * FROM statecat.key_view WHERE key = 'key_662' "
        "AND database IN ('sql_groupby_hashmap_2_3', 'sql_window_2_3')"
    )
    assert two.rdd.getNumPartitions() == 2
    case_a, case_b = DIFF_PAIRS[1]
    diff = spark.sql(f"SELECT * FROM statecat.diff WHERE a = '{db(case_a)}' AND b = '{db(case_b)}'")
    # Every keyed state holding data on either side is at least one task of its own.
    with_data = {
        s["name"]
        for case in (case_a, case_b)
        for op in load_expected(case)["operators"]
        for s in op["states"]
        if s["kind"] in ("keyed", "timer") and s["rows"]
    }
    assert diff.rdd.getNumPartitions() >= len(with_data) > 1


@pytest.mark.spark
def test_database_pushdown_reads_only_the_named_savepoints(spark, tmp_path):
    from statecat.catalog import attach
    from statecat.catalog.spark.relocation import detach

    copy = tmp_path / "gone" / "savepoint"
    shutil.copytree(savepoint_dir("sql_groupby_hashmap_2.3"), copy)
    database = attach(spark, [str(copy)], eager=False).registered[0].database
    shutil.rmtree(copy)
    try:
        with pytest.raises(Exception) as err:
            spark.sql("SELECT * FROM statecat.key_view WHERE key = 'key_662'").collect()
        message = str(err.value)
        assert "statecat.key_view: cannot read savepoint" in message and f"statecat detach {database}" in message
        # The vanished savepoint is never opened when the query names the others.
        rows = spark.sql(
            "SELECT database FROM statecat.key_view WHERE key = 'key_662' AND database IN "
            "('sql_groupby_hashmap_2_3', 'sql_groupby_rocksdb_2_3')"
        ).collect()
        assert sorted({r.database for r in rows}) == ["sql_groupby_hashmap_2_3", "sql_groupby_rocksdb_2_3"]
        with pytest.raises(Exception) as err:
            spark.sql(f"SELECT * FROM statecat.diff WHERE a = 'sql_groupby_hashmap_2_3' AND b = '{database}'").collect()
        assert "missing" in str(err.value)
    finally:
        detach(spark, database)
    # detach rewrote the registry: the tables follow it.
    assert (
        spark.sql("SELECT count(*) FROM statecat.key_view WHERE key = 'key_662'").first()[0]
        == spark.sql(
            "SELECT count(*) FROM statecat.key_view WHERE key = 'key_662' AND database LIKE 'sql_groupby%'"
        ).first()[0]
        == 3
    )


# ----------------------------------------------------------------------------- planning (no Spark)


def _registry(tmp_path, cases) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory = tmp_path / "registry"
    directory.mkdir()
    table = pa.table(
        {
            "database": [db(c) for c in cases],
            "path": [str(savepoint_dir(c)) for c in cases],
            "checkpoint_id": pa.array([1] * len(cases), pa.int64()),
        }
    )
    pq.write_table(table, directory / "part-0.parquet")
    return str(directory)


def test_large_states_split_into_key_group_ranges_that_together_give_the_whole_diff(tmp_path):
    from pyspark.sql.pandas.types import to_arrow_schema

    from statecat.catalog.spark.sql_forms import diff_batches, diff_partitions, json_text, key_text
    from statecat.catalog.spark.tables import TableRef, spark_schema
    from statecat.readers import diff_savepoints

    case_a, case_b = "sql_groupby_hashmap_2.3", "sql_groupby_compressed_2.3"
    location = _registry(tmp_path, [case_a, case_b])
    schema = to_arrow_schema(spark_schema(TableRef("diff", location)), timezone="UTC")
    whole = diff_partitions(location, {db(case_a)}, {db(case_b)}, {"accState"})
    small = diff_partitions(location, {db(case_a)}, {db(case_b)}, {"accState"}, target_bytes=4096)
    assert len(whole) == 1 and len(small) > 4
    ranges = [p.key_groups for p in small]
    assert all(first <= last < next_first for (first, last), (next_first, _) in zip(ranges, ranges[1:]))

    def rows(parts):
        return sorted(tuple(r.values()) for p in parts for batch in diff_batches(p, schema) for r in batch.to_pylist())

    want = sorted(
        (
            db(case_a),
            db(case_b),
            c.operator,
            c.state,
            key_text(c.key),
            json_text(c.namespace),
            c.change,
            json_text(c.old),
            json_text(c.new),
            None,
        )
        for c in diff_savepoints(str(savepoint_dir(case_a)), str(savepoint_dir(case_b)), states=["accState"]).changes()
    )
    assert len(want) == 2000 and rows(small) == want and rows(whole) == want


def test_planning_needs_the_key_and_both_savepoints(tmp_path):
    from statecat.catalog.spark.sql_forms import MISSING_KEY, MISSING_SIDES, diff_partitions, key_view_partitions
    from statecat.statemeta.errors import StatecatError

    location = _registry(tmp_path, ["sql_window_2.3", "sql_join_2.3"])
    with pytest.raises(StatecatError, match="WHERE key = "):
        key_view_partitions(location, None, None)
    assert (
        str(pytest.raises(StatecatError, key_view_partitions, location, None, {"sql_window_2_3"}).value) == MISSING_KEY
    )
    assert (
        str(pytest.raises(StatecatError, diff_partitions, location, {"sql_window_2_3"}, None, None).value)
        == MISSING_SIDES
    )
    assert [p.database for p in key_view_partitions(location, {"w_8"}, None)] == ["sql_join_2_3", "sql_window_2_3"]
    assert [p.database for p in key_view_partitions(location, {"w_8"}, {"sql_window_2_3"})] == ["sql_window_2_3"]
    assert key_view_partitions(location, set(), None) == []  # key = NULL
