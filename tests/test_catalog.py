"""The Spark catalog: the flinkstate data source, savepoints as databases, lazy attach, pushdown, errors.

One local Spark session (Hive catalog on an embedded Derby metastore in a pytest tmp dir) serves
this module and tests/test_sql_examples.py; the fixture savepoints are attached once.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import sys
from pathlib import Path

import pytest

from statecat.statemeta.errors import LookupFailedError
from tests.fixtures.expected import CASES, CASES_DIR, is_successive, load_expected, phases, savepoint_dir

GROUPBY_CASE = "sql_groupby_hashmap_2.3"
GROUPBY_DB = "sql_groupby_hashmap_2_3"
ACC_TABLE = f"{GROUPBY_DB}.accstate"
# The cases this module relies on; more fixture cases may appear, each would cost seconds to attach.
SQL_CASES = [
    c
    for c in (
        "sql_groupby_hashmap_1.20",
        "sql_groupby_hashmap_2.3",
        "sql_groupby_rocksdb_1.20",
        "sql_groupby_rocksdb_2.3",
        "sql_join_2.3",
        "sql_window_2.3",
    )
    if c in CASES
]

_shared: dict = {}


def attached_spark(tmp_path_factory):
    """The shared session with every fixture case attached (created on first use)."""
    if "spark" not in _shared or _shared["spark"].sparkContext._jsc is None:  # none yet, or stopped by another home
        from statecat.catalog import attach
        from statecat.catalog.servers.sessions import session

        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        home = tmp_path_factory.mktemp("statecat_home")
        spark = session(
            str(home),
            conf={
                "spark.sql.session.timeZone": "UTC",
                "spark.log.level": "ERROR",
                "spark.ui.showConsoleProgress": "false",
                "spark.sql.shuffle.partitions": "4",
            },
        )
        result = attach(spark, [str(CASES_DIR / case) for case in SQL_CASES])
        assert result.failed == []
        _shared.update(spark=spark, home=home, attach_result=result)
    return _shared["spark"]


@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    return attached_spark(tmp_path_factory)


def db_name(case: str) -> str:
    return case.replace(".", "_")


def from_spark(value):
    """Spark values in one shape with Arrow's: structs as dicts, maps as sorted (key, value) pairs."""
    from pyspark.sql import Row

    if isinstance(value, Row):
        return {k: from_spark(v) for k, v in value.asDict().items()}
    if isinstance(value, dict):
        return sorted(((from_spark(k), from_spark(v)) for k, v in value.items()), key=repr)
    if isinstance(value, list):
        return [from_spark(v) for v in value]
    return value


def from_arrow(value):
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        # PySpark hands TIMESTAMP (LTZ) values back naive, in the session time zone (UTC here).
        return value.astimezone(dt.UTC).replace(tzinfo=None)
    if isinstance(value, dict):
        return {k: from_arrow(v) for k, v in value.items()}
    if isinstance(value, list):
        if value and all(isinstance(x, tuple) and len(x) == 2 for x in value):  # a map
            return sorted(((from_arrow(k), from_arrow(v)) for k, v in value), key=repr)
        return [from_arrow(v) for v in value]
    return value


def _freeze(value):
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


def rows_of(spark_rows, columns):
    return sorted((tuple(_freeze(from_spark(r[c])) for c in columns) for r in spark_rows), key=repr)


def reader_rows(table, columns, entries=()):
    """The reader's rows as rows_of gives Spark's; ``entries`` columns are maps read as map_entries."""

    def convert(column, value):
        if column in entries and value is not None:
            return [{"key": from_arrow(k), "value": from_arrow(v)} for k, v in value]
        return from_arrow(value)

    return sorted((tuple(_freeze(convert(c, r[c])) for c in columns) for r in table.to_pylist()), key=repr)


# ----------------------------------------------------------------------------- naming (no Spark)


def test_database_names_are_readable_stable_and_collision_free(tmp_path):
    from statecat.catalog.spark.discovery import readable_name, unique_name

    root = str(CASES_DIR)
    path = str(savepoint_dir(GROUPBY_CASE))
    assert readable_name(path, root) == GROUPBY_DB
    assert readable_name(path, path) == GROUPBY_DB  # the root is the savepoint itself
    # Flink's random ids are cut to 8 hex digits, deep paths keep the directories nearest the savepoint.
    assert readable_name("/sp/savepoint-1a2b3c-4d5e6f7a8b9c", "/sp") == "savepoint_4d5e6f7a"
    assert readable_name("/sp/orders/savepoint-1a2b3c-4d5e6f7a8b9c", "/sp") == "orders_savepoint_4d5e6f7a"
    assert readable_name("/sp/orders/savepoint-1a2b3c-4d5e6f7a8b9c") == "orders_savepoint_4d5e6f7a"
    job = "/ck/prod/flink/orders-enrichment/0f1e2d3c4b5a69788796a5b4c3d2e1f0/chk-12"
    assert readable_name(job, "/ck") == "flink_orders_enrichment_0f1e2d3c_chk_12"
    assert (
        readable_name("s3://b/team/prod/a-rather-long-pipeline-name/savepoint-1a2b3c-4d5e6f7a8b9c", "s3://b")
        == "a_rather_long_pipeline_name_savepoint_4d5e6f7a"
    )
    assert readable_name("/x/2024/job", "/x") == "sp_2024_job"
    first = unique_name(path, GROUPBY_DB, set())
    other = unique_name("/elsewhere/savepoint", GROUPBY_DB, {first})
    assert first == GROUPBY_DB and other != first and other.startswith(GROUPBY_DB + "_")
    assert other == unique_name("/elsewhere/savepoint", GROUPBY_DB, {first})


def test_savepoints_are_found_under_local_paths_and_uris():
    from statecat.catalog.spark.discovery import discover_savepoints, readable_name

    local = discover_savepoints(str(CASES_DIR))
    assert set(SQL_CASES) <= {Path(p).parent.name for p in local}
    uri_root = "file://" + str(CASES_DIR)
    remote = discover_savepoints(uri_root)
    assert remote == ["file://" + p for p in local]
    assert readable_name(remote[0], uri_root) == readable_name(local[0], str(CASES_DIR))


def test_sqlglot_finds_the_databases_a_query_names():
    from statecat.catalog.spark.queries import referenced_databases, split_statements

    databases, tables = referenced_databases(
        "WITH x AS (SELECT 1) SELECT * FROM a.t1 JOIN x ON TRUE WHERE k IN (SELECT k FROM B.t2); "
        "SHOW TABLES IN c; USE d"
    )
    assert databases == {"a", "b", "c", "d"}
    assert tables == {("a", "t1"), ("b", "t2")}
    assert split_statements("SELECT ';' ; SELECT 2;") == ["SELECT ';'", "SELECT 2"]


# ----------------------------------------------------------------------------- pushdown planning (no Spark job)


def test_key_filter_plans_and_reads_only_the_key_group():
    from pyspark.sql.datasource import EqualTo, In

    from statecat.catalog.spark.source import FlinkStateReader, StatePartition
    from statecat.catalog.spark.tables import TableRef, spark_schema
    from statecat.readers import SavepointReader
    from statecat.readers.keygroups import key_group_for
    from statecat.statemeta.model import load_state_meta

    path = str(savepoint_dir(GROUPBY_CASE))
    meta = load_state_meta(path)
    ref = TableRef("state", path, meta.find_state("accState")[0].id, "accState")
    schema = spark_schema(ref, meta)

    full = FlinkStateReader(ref, schema)
    all_parts = full.partitions()
    op, state = meta.find_state("accState")
    assert sorted(p.partition.subtask for p in all_parts) == list(range(op.parallelism))

    filtered = FlinkStateReader(ref, schema)
    equal = EqualTo(("key",), "key_662")
    assert list(filtered.pushFilters([equal])) == [equal]  # Spark still checks the filter itself
    parts = filtered.partitions()
    group = key_group_for("key_662", state.key, op.max_parallelism)
    assert [p.partition.key_groups for p in parts] == [(group,)]

    rows = [r for b in filtered.read(parts[0]) for r in b.to_pylist()]
    assert [r["key"] for r in rows] == ["key_662"]
    reader = SavepointReader(path)
    list(reader.read_partition(parts[0].partition, keys=["key_662"]))
    one_group_bytes = reader.last_stats.bytes_read
    assert reader.last_stats.key_groups == 1
    reader.table("accState")
    assert 0 < one_group_bytes < reader.last_stats.bytes_read / 20

    both = FlinkStateReader(ref, schema)
    list(both.pushFilters([In(("key",), ("key_662", "key_1"))]))
    assert 1 <= len(both.partitions()) <= 2
    assert all(isinstance(p, StatePartition) for p in both.partitions())


def test_filters_statecat_cannot_use_are_left_to_spark():
    from pyspark.sql.datasource import EqualTo, GreaterThan

    from statecat.catalog.spark.source import FlinkStateReader
    from statecat.catalog.spark.tables import TableRef, spark_schema
    from statecat.statemeta.model import load_state_meta

    path = str(savepoint_dir(GROUPBY_CASE))
    meta = load_state_meta(path)
    ref = TableRef("state", path, meta.find_state("accState")[0].id, "accState")
    reader = FlinkStateReader(ref, spark_schema(ref, meta))
    filters = [EqualTo(("key",), [1, 2]), GreaterThan(("key",), "k"), EqualTo(("value", "f0"), 1)]
    assert list(reader.pushFilters(filters)) == filters
    assert reader.keys is None and len(reader.partitions()) == meta.find_state("accState")[0].parallelism
    nothing = FlinkStateReader(ref, spark_schema(ref, meta))
    list(nothing.pushFilters([EqualTo(("key",), None)]))  # key = NULL matches no row: nothing to read
    assert [p.value for p in nothing.partitions()] == [None]


def test_large_subtask_ranges_split_into_partitions_of_equal_bytes_at_key_group_boundaries():
    from statecat.catalog.spark.source import balanced_key_groups, key_group_bytes
    from statecat.statemeta.model import load_state_meta

    _, state = load_state_meta(str(savepoint_dir(GROUPBY_CASE))).find_state("accState")
    location = state.locations[0]
    sizes = key_group_bytes(location)
    total = sum(sizes.values())
    all_groups = tuple(range(location.start_key_group, location.start_key_group + len(location.offsets)))
    assert balanced_key_groups(location, None, total) == [all_groups]
    chunks = balanced_key_groups(location, None, total // 4)
    assert len(chunks) == 4 and tuple(g for c in chunks for g in c) == all_groups
    # Each run ends where the bytes so far first reach its equal share: short by less than one key-group.
    largest = max(sizes.values())
    assert all(abs(sum(sizes.get(g, 0) for g in c) - total / 4) < 2 * largest for c in chunks)
    assert balanced_key_groups(location, (all_groups[3],), 1) == [(all_groups[3],)]


# ----------------------------------------------------------------------------- attach


@pytest.mark.spark
def test_attach_registers_every_fixture_savepoint_as_a_database(spark):
    from statecat.catalog import attach

    databases = {r[0] for r in spark.sql("SHOW DATABASES").collect()}
    assert {db_name(c) for c in SQL_CASES} | {"statecat"} <= databases
    registry = {r["database"]: r for r in spark.table("statecat.savepoints").collect()}
    for case in SQL_CASES:
        row = registry[db_name(case)]
        expected = load_expected(case)
        assert row["path"] == str(savepoint_dir(case))
        assert row["checkpoint_id"] >= 1
        assert row["metadata_version"] == expected["metadata_version"]
        assert expected["flink_version"].rsplit(".", 1)[0] in row["flink_version"] or "–" in row["flink_version"]
        assert row["size_bytes"] > 0 and row["time"] is not None
    again = attach(spark, [str(CASES_DIR / case) for case in SQL_CASES])
    assert again.registered == [] and sorted(again.known) == sorted(db_name(c) for c in SQL_CASES)
    assert spark.table("statecat.savepoints").count() == len(registry)


@pytest.mark.spark
def test_state_meta_has_one_row_per_state_and_names_its_table(spark):
    from statecat.statemeta.model import load_state_meta

    for case in SQL_CASES:
        meta = load_state_meta(str(savepoint_dir(case)))
        rows = spark.table(f"{db_name(case)}.state_meta").collect()
        assert sorted((r["operator_id"], r["state_name"], r["kind"]) for r in rows) == sorted(
            (op.id, s.name, s.kind) for op, s in meta.states()
        )
        tables = {t.name for t in spark.catalog.listTables(db_name(case))}
        assert {r["table_name"] for r in rows} <= tables
        assert all(r["decode_status"] in ("full", "raw") for r in rows)


@pytest.mark.spark
@pytest.mark.parametrize("case", ["sql_groupby_hashmap_2.3", "sql_window_2.3", "sql_join_2.3"])
def test_every_state_table_equals_the_reader(spark, case):
    from statecat.catalog.spark.tables import state_table_names
    from statecat.readers import SavepointReader

    reader = SavepointReader(str(savepoint_dir(case)))
    for (operator_id, state_name), table in state_table_names(reader.meta).items():
        expected = reader.table(state_name, operator_id)
        got = spark.table(f"{db_name(case)}.{table}").collect()
        columns = expected.schema.names
        assert rows_of(got, columns) == reader_rows(expected, columns), table


@pytest.mark.spark
@pytest.mark.parametrize("case", CASES)
def test_every_state_of_every_fixture_reads_through_spark_as_the_reader_decodes_it(spark, case):
    """Whatever the readers decode (nested structs, lists, maps, timers, raw bytes) is queryable."""
    _spark_reads_as_the_reader(spark, str(savepoint_dir(case)))


@pytest.mark.spark
@pytest.mark.parametrize("case", [c for c in CASES if is_successive(c)])
def test_a_retained_incremental_checkpoint_reads_through_spark_as_the_reader_decodes_it(spark, case):
    """Native RocksDB state (SST files shared with earlier checkpoints) through the data source."""
    _spark_reads_as_the_reader(spark, str(phases(case)[-1]["checkpoint"]))


def _spark_reads_as_the_reader(spark, path: str) -> None:
    from pyspark.sql import functions as F
    from pyspark.sql.types import MapType

    from statecat.readers import SavepointReader
    from statecat.statemeta.errors import StatecatError

    reader = SavepointReader(path)
    for op, state in reader.meta.states():
        frame = (
            spark.read.format("flinkstate")
            .option("path", path)
            .option("operator", op.id)
            .option("state", state.name)
            .load()
        )
        try:
            expected = reader.table(state.name, op.id)
        except StatecatError:
            with pytest.raises(Exception, match=f"savepoint {path}.*state {state.name!r}"):
                frame.collect()
            continue
        columns = expected.schema.names
        assert frame.columns == columns
        # PySpark turns maps into dicts on the driver, which fails for keys holding arrays: compare
        # map columns as their entries instead (Spark SQL itself reads them either way).
        maps = [f.name for f in frame.schema.fields if isinstance(f.dataType, MapType)]
        frame = frame.select(*[F.map_entries(c).alias(c) if c in maps else c for c in columns])
        assert rows_of(frame.collect(), columns) == reader_rows(expected, columns, maps), (op.label, state.name)


@pytest.mark.spark
@pytest.mark.parametrize("case", [c for c in SQL_CASES if c.startswith("sql_groupby")])
def test_aggregates_equal_the_job_input(spark, case):
    state = next(s for op in load_expected(case)["operators"] for s in op["states"] if s["name"] == "accState")
    table = spark.sql(f"SELECT table_name FROM {db_name(case)}.state_meta WHERE state_name = 'accState'").first()[0]
    got = {
        r["key"]: (r["f0"], r["f1"])
        for r in spark.sql(f"SELECT key, value.f0 AS f0, value.f1 AS f1 FROM {db_name(case)}.{table}").collect()
    }
    assert got == {r["key"]: (r["value"]["f0"], r["value"]["f1"]) for r in state["rows"]}


@pytest.mark.spark
def test_a_state_table_has_one_name_in_every_savepoint_of_the_job(spark):
    groupby = [c for c in SQL_CASES if c.startswith("sql_groupby")]  # Flink 1.20 and 2.3, heap and RocksDB
    assert len(groupby) >= 2
    for case in groupby:
        expected = next(
            len(st["rows"])
            for op in load_expected(case)["operators"]
            for st in op["states"]
            if st["name"] == "accState"
        )
        assert spark.sql(f"SELECT count(*) FROM {db_name(case)}.accstate").first()[0] == expected, case
        tables = {r["table_name"] for r in spark.table(f"{db_name(case)}.state_meta").collect()}
        assert tables == {
            "accstate",
            "coordinator",
            "sourcereaderstate",
            "timer_state_event_user_timers",
            "timer_state_processing_user_timers",
        }, case


@pytest.mark.spark
def test_where_key_reads_one_key_group_and_equals_the_filtered_full_scan(spark):
    full = spark.table(ACC_TABLE)
    query = spark.sql(f"SELECT * FROM {ACC_TABLE} WHERE key = 'key_662'")
    assert full.rdd.getNumPartitions() == 2  # one per subtask (small state: no further split)
    assert query.rdd.getNumPartitions() == 1  # one key-group of one subtask
    assert [r.asDict(recursive=True) for r in query.collect()] == [
        r.asDict(recursive=True) for r in full.collect() if r["key"] == "key_662"
    ]
    two = spark.sql(f"SELECT key FROM {ACC_TABLE} WHERE key IN ('key_662', 'key_1', 'no_such_key')")
    assert two.rdd.getNumPartitions() <= 3
    assert sorted(r["key"] for r in two.collect()) == ["key_1", "key_662"]
    none = spark.sql(f"SELECT * FROM {ACC_TABLE} WHERE key = 'no_such_key'")
    assert none.collect() == []


@pytest.mark.spark
def test_operator_table_spans_all_states_as_json(spark):
    import json

    counts = {
        r["state_name"]: r["n"]
        for r in spark.sql(
            "SELECT state_name, count(*) AS n FROM sql_window_2_3.windowaggregate GROUP BY state_name"
        ).collect()
    }
    expected = {
        s["name"]: len(s["rows"])
        for op in load_expected("sql_window_2.3")["operators"]
        for s in op["states"]
        if s["rows"]
    }
    assert counts == expected
    row = spark.sql(
        "SELECT * FROM sql_window_2_3.windowaggregate "
        "WHERE state_name = 'window-aggs' AND key = '\"w_8\"' ORDER BY namespace LIMIT 1"
    ).collect()[0]
    assert json.loads(row["value"]) == {"f0": 3, "f1": 138} and json.loads(row["namespace"]) == 1704067560000
    pruned = spark.sql("SELECT * FROM sql_window_2_3.windowaggregate WHERE state_name = 'watermark'")
    assert pruned.rdd.getNumPartitions() == 2  # the union state's two subtasks only
    assert pruned.count() == 2
    # The keyed states are read in one pass per subtask (one task each), not once per state.
    from statecat.statemeta.model import load_state_meta

    op = load_state_meta(str(savepoint_dir("sql_window_2.3"))).find_state("window-aggs")[0]
    keyed_subtasks = {loc.subtask for s in op.states if s.is_keyed for loc in s.locations}
    other_locations = sum(len(s.locations) for s in op.states if not s.is_keyed)
    assert len([s for s in op.states if s.is_keyed]) > 1
    assert spark.table("sql_window_2_3.windowaggregate").rdd.getNumPartitions() == len(keyed_subtasks) + other_locations


@pytest.mark.spark
def test_flinkstate_source_reads_without_the_catalog(spark):
    path = str(savepoint_dir(GROUPBY_CASE))
    df = spark.read.format("flinkstate").option("path", path).option("state", "accState").load()
    assert df.schema.simpleString() == "struct<key:string,namespace:string,value:struct<f0:bigint,f1:bigint>>"
    assert df.filter("key = 'key_662'").select("value.f0", "value.f1").first() == (1, 336)
    meta = spark.read.format("flinkstate").option("path", path).load()
    from statecat.statemeta.model import load_state_meta

    assert meta.count() == len(list(load_state_meta(path).states())) and "state_name" in meta.columns


@pytest.mark.spark
def test_without_python_filter_pushdown_spark_names_the_setting(spark):
    """Spark's Python data source needs the setting; the columnar scan (its own pushdown) does not."""
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "false")
    try:
        assert spark.table(ACC_TABLE).count() == 2000  # read as columns
        spark.conf.set("spark.statecat.columnar.enabled", "false")
        with pytest.raises(Exception, match="spark.sql.python.filterPushdown.enabled"):
            spark.table(ACC_TABLE).collect()
    finally:
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
        spark.conf.set("spark.statecat.columnar.enabled", "true")
    assert spark.table(ACC_TABLE).count() == 2000


# ----------------------------------------------------------------------------- lazy attach


@pytest.mark.spark
def test_lazy_attach_registers_only_and_a_query_materialises_what_it_names(spark, tmp_path):
    from statecat.catalog import attach, sql

    root = tmp_path / "lazy_root"
    for i in range(3):
        shutil.copytree(savepoint_dir(GROUPBY_CASE), root / f"job{i}" / "savepoint")
    result = attach(spark, [str(root)], eager=False)
    names = sorted(r.database for r in result.registered)
    assert names == ["job0", "job1", "job2"] and result.materialised == []
    assert not any(spark.catalog.databaseExists(n) for n in names)
    got = sql(spark, "SELECT value.f0, value.f1 FROM job1.accstate WHERE key = 'key_662'").collect()
    assert [tuple(r) for r in got] == [(1, 336)]
    assert spark.catalog.databaseExists("job1")
    assert not spark.catalog.databaseExists("job0") and not spark.catalog.databaseExists("job2")


# ----------------------------------------------------------------------------- errors


@pytest.mark.spark
def test_unknown_savepoint_and_state_are_named_with_suggestions(spark):
    from statecat.catalog import sql

    with pytest.raises(
        LookupFailedError,
        match=r"unknown savepoint database 'sql_groupby_hashmap_2_4'.*"
        r"Did you mean 'sql_groupby_hashmap_2_3'",
    ):
        sql(spark, "SELECT * FROM sql_groupby_hashmap_2_4.accstate")
    with pytest.raises(
        LookupFailedError,
        match=r"unknown state table 'accstat' in savepoint "
        r"database 'sql_groupby_hashmap_2_3' \(.*sql_groupby_hashmap_2.3/"
        r"savepoint\).*Did you mean 'accstate'",
    ):
        sql(spark, "SELECT * FROM sql_groupby_hashmap_2_3.accstat")
    with pytest.raises(Exception, match=r"unknown state 'nope' in savepoint .*sql_groupby_hashmap_2.3/savepoint"):
        spark.read.format("flinkstate").option("path", str(savepoint_dir(GROUPBY_CASE))).option(
            "state", "nope"
        ).load().collect()


def _copy_attached(spark, tmp_path, name):
    from statecat.catalog import attach

    root = tmp_path / name
    shutil.copytree(savepoint_dir(GROUPBY_CASE), root / "savepoint")
    attach(spark, [str(root)], eager=True)
    data_files = sorted(p for p in (root / "savepoint").iterdir() if p.name != "_metadata")
    return root / "savepoint", data_files


@pytest.mark.spark
def test_missing_state_file_at_query_time_names_savepoint_operator_and_state(spark, tmp_path):
    savepoint, data_files = _copy_attached(spark, tmp_path, "broken_missing")
    assert data_files, "the fixture keeps its keyed state in files"
    for f in data_files:
        f.unlink()
    with pytest.raises(Exception) as info:
        spark.sql("SELECT count(*) FROM broken_missing.accstate").collect()
    message = str(info.value)
    assert f"savepoint {savepoint}" in message
    assert "operator GroupAggregate[3]" in message and "state 'accState'" in message
    assert "state file referenced by _metadata is missing" in message
    from statecat.catalog.spark.errors import spark_error_message

    line = spark_error_message(info.value)  # what `statecat sql` prints
    assert line.startswith(
        f"cannot read savepoint {savepoint}, operator GroupAggregate[3], state 'accState': "
        "state file referenced by _metadata is missing"
    )


@pytest.mark.spark
def test_truncated_state_file_at_query_time_names_savepoint_operator_and_state(spark, tmp_path):
    savepoint, data_files = _copy_attached(spark, tmp_path, "broken_truncated")
    for f in data_files:
        f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    with pytest.raises(Exception) as info:
        spark.sql("SELECT count(*) FROM broken_truncated.accstate").collect()
    message = str(info.value)
    assert f"savepoint {savepoint}" in message
    assert "operator GroupAggregate[3]" in message and "state 'accState'" in message
    assert "truncated" in message or "could not decode" in message


@pytest.mark.spark
def test_table_whose_columns_no_longer_fit_the_state_is_a_clear_error(spark):
    """An undecodable column: the catalog says one type, the savepoint's serializer another."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from statecat.catalog.spark.tables import REF_METADATA_KEY, TableRef
    from statecat.statemeta.model import load_state_meta

    path = str(savepoint_dir(GROUPBY_CASE))
    op, _ = load_state_meta(path).find_state("accState")
    ref = TableRef("state", path, op.id, "accState")
    schema = StructType(
        [
            StructField("key", StringType(), True, {REF_METADATA_KEY: ref.to_json()}),
            StructField("namespace", StringType()),
            StructField("value", LongType()),
        ]
    )
    spark.catalog.createTable(f"{GROUPBY_DB}.wrong_columns", source="flinkstate", schema=schema)
    try:
        with pytest.raises(Exception) as info:
            spark.table(f"{GROUPBY_DB}.wrong_columns").collect()
        message = str(info.value)
        assert f"savepoint {path}" in message and "operator GroupAggregate[3]" in message
        assert "state 'accState'" in message and "no longer fit the table's columns" in message
    finally:
        spark.sql(f"DROP TABLE {GROUPBY_DB}.wrong_columns")


def test_repo_has_no_metastore_left_behind():
    root = Path(__file__).resolve().parents[1]
    assert not (root / "metastore_db").exists() and not (root / "spark-warehouse").exists()
