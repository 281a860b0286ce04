"""Columnar state scans: statecat's Spark extension (catalog/spark/java/) reads state tables as
Arrow columns through statecat's own Python workers, instead of Spark's row-wise Python data source.

The shared session of tests/test_catalog.py has the extension (its jar compiled by
catalog/spark/extension.py with the JDK here); every Spark test there reads state tables through it. This
module checks what is particular to it: that it is the path taken, that it answers exactly as the
row-wise source on every fixture, its pushdown and pruning, worker reuse after an abandoned read,
its errors, the worker protocol, and sessions without a JDK.
"""

from __future__ import annotations

import io
import struct

import pytest

from tests.fixtures.expected import CASES, savepoint_dir
from tests.test_catalog import ACC_TABLE, GROUPBY_CASE, _copy_attached, _spark_reads_as_the_reader, attached_spark

ENABLED = "spark.statecat.columnar.enabled"


@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    return attached_spark(tmp_path_factory)


def plan_of(frame) -> str:
    return frame._jdf.queryExecution().executedPlan().toString()


@pytest.fixture
def row_wise(spark):
    spark.conf.set(ENABLED, "false")
    try:
        yield spark
    finally:
        spark.conf.set(ENABLED, "true")


@pytest.mark.spark
def test_state_tables_are_scanned_as_columns_and_other_tables_row_wise(spark):
    assert "statecat columnar scan" in plan_of(spark.table(ACC_TABLE))
    assert "ColumnarToRow" in plan_of(spark.table(ACC_TABLE))
    for other in ("state_meta", "groupaggregate"):  # savepoint metadata, an operator's states as JSON
        plan = plan_of(spark.table(ACC_TABLE.replace("accstate", other)))
        assert "PythonScan" in plan or "BatchScan flinkstate" in plan and "columnar" not in plan, plan


@pytest.mark.spark
def test_the_setting_turns_the_columnar_scan_off_per_session(spark, row_wise):
    assert "statecat columnar scan" not in plan_of(row_wise.table(ACC_TABLE))


@pytest.mark.spark
@pytest.mark.parametrize("case", CASES)
def test_every_state_of_every_fixture_reads_row_wise_as_the_reader_decodes_it(row_wise, case):
    """The row-wise source stays exact too (tests/test_catalog.py reads them all as columns)."""
    _spark_reads_as_the_reader(row_wise, str(savepoint_dir(case)))


@pytest.mark.spark
def test_nested_columns_are_pruned_in_the_worker_and_answers_match_the_row_wise_source(spark):
    queries = [
        f"SELECT value.f1 FROM {ACC_TABLE}",
        f"SELECT count(*), sum(value.f0), max(length(key)) FROM {ACC_TABLE}",
        f"SELECT key FROM {ACC_TABLE} WHERE value.f1 > 0",
        f"SELECT count(*) FROM {ACC_TABLE}",
    ]
    columnar = {q: sorted(map(tuple, spark.sql(q).collect())) for q in queries}
    plan = plan_of(spark.sql(queries[0]))
    assert "value#" in plan and "key#" not in plan.split("BatchScan")[1].split("]")[0], plan
    spark.conf.set(ENABLED, "false")
    try:
        assert {q: sorted(map(tuple, spark.sql(q).collect())) for q in queries} == columnar
    finally:
        spark.conf.set(ENABLED, "true")
    assert columnar[queries[3]] == [(2000,)]


@pytest.mark.spark
def test_key_equality_is_pushed_down_to_one_key_group(spark):
    query = spark.sql(f"SELECT * FROM {ACC_TABLE} WHERE key = 'key_662'")
    assert '"op":"EqualTo","column":"key","values":["key_662"]' in plan_of(query)
    assert query.rdd.getNumPartitions() == 1
    several = spark.sql(f"SELECT key FROM {ACC_TABLE} WHERE key IN ('key_662', 'key_1', 'no_such_key')")
    assert '"op":"In"' in plan_of(several)
    assert sorted(r.key for r in several.collect()) == ["key_1", "key_662"]
    assert spark.sql(f"SELECT * FROM {ACC_TABLE} WHERE key = 'no_such_key'").collect() == []


@pytest.mark.spark
def test_an_abandoned_read_leaves_no_worker_that_answers_the_next_query_wrongly(spark):
    """LIMIT stops reading mid-stream: that worker is ended, not reused with bytes still in its socket."""
    for _ in range(3):
        assert len(spark.sql(f"SELECT * FROM {ACC_TABLE} LIMIT 3").collect()) == 3
        assert spark.sql(f"SELECT count(*), count(DISTINCT key) FROM {ACC_TABLE}").first() == (2000, 2000)


@pytest.mark.spark
def test_a_damaged_state_file_fails_the_columnar_scan_with_statecats_message(spark, tmp_path):
    from statecat.catalog.spark.errors import spark_error_message

    savepoint, data_files = _copy_attached(spark, tmp_path, "columnar_truncated")
    for f in data_files:
        f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    frame = spark.sql("SELECT count(*) FROM columnar_truncated.accstate")
    assert "statecat columnar scan" in plan_of(frame)
    with pytest.raises(Exception) as info:
        frame.collect()
    line = spark_error_message(info.value)
    assert line.startswith(f"cannot read savepoint {savepoint}, operator GroupAggregate[3], state 'accState': "), line
    # The session reads on: the failed worker was ended, the others are reused.
    assert spark.table(ACC_TABLE).count() == 2000


@pytest.mark.spark
def test_a_table_naming_an_unknown_state_fails_when_the_scan_is_planned(spark):
    """The catalog's schema is taken as it is; the Python planner, run from the JVM, finds the state missing."""
    from statecat.catalog.spark.errors import spark_error_message
    from statecat.catalog.spark.tables import REF_METADATA_KEY, TableRef, ref_from_schema

    path = str(savepoint_dir(GROUPBY_CASE))
    schema = spark.table(ACC_TABLE).schema
    ref = ref_from_schema(schema)
    gone = TableRef("state", path, ref.operator, "nope")
    schema.fields[0].metadata[REF_METADATA_KEY] = gone.to_json()
    spark.catalog.createTable("sql_groupby_hashmap_2_3.nope_state", source="flinkstate", schema=schema)
    try:
        frame = spark.table("sql_groupby_hashmap_2_3.nope_state")
        assert "statecat columnar scan" in plan_of(frame)
        with pytest.raises(Exception) as info:
            frame.collect()
        assert spark_error_message(info.value).startswith(f"cannot read savepoint {path}"), str(info.value)[:2000]
        assert "unknown state 'nope'" in spark_error_message(info.value)
    finally:
        spark.sql("DROP TABLE sql_groupby_hashmap_2_3.nope_state")


# ----------------------------------------------------------------------------- the worker protocol (no Spark)


def _request(*parts) -> io.BufferedReader:
    data = b"".join(struct.pack(">i", p) if isinstance(p, int) else struct.pack(">i", len(p)) + p for p in parts)
    return io.BufferedReader(io.BytesIO(data))


def _reply_error(request) -> str:
    from statecat.catalog.spark.columnar_worker import STATUS_ERROR, main

    out = io.BytesIO()
    with pytest.raises(SystemExit):
        main(request, out)
    status, length = struct.unpack(">ii", out.getvalue()[:8])
    assert status == STATUS_ERROR
    return out.getvalue()[8 : 8 + length].decode()


@pytest.mark.parametrize(
    "request_bytes, expected",
    [
        ((7,), "expected request 1 or 2, got 7"),
        ((2, struct.pack(">i", -5)), "expected a blob length within 0..268435456, got -5"),
        ((2, struct.pack(">i", 1 << 30)), "expected a blob length within 0..268435456, got 1073741824"),
        ((2, struct.pack(">i", 100) + b"short"), "expected 100 bytes from the JVM, got 5"),
    ],
)
def test_malformed_requests_get_an_error_reply_not_a_hang(request_bytes, expected):
    data = b"".join(struct.pack(">i", p) if isinstance(p, int) else p for p in request_bytes)
    assert expected in _reply_error(io.BufferedReader(io.BytesIO(data)))


def test_a_plan_request_for_a_missing_savepoint_replies_statecats_error(tmp_path):
    import json

    missing = str(tmp_path / "gone")
    empty = b'{"type": "struct", "fields": []}'
    message = _reply_error(_request(1, empty, json.dumps({"path": missing, "state": "s"}).encode(), b"[]", empty))
    assert message.startswith(f"StatecatQueryError: cannot read savepoint {missing}"), message
    assert "Traceback" not in message  # statecat's own errors are one line; bugs keep their traceback


def test_a_closed_socket_ends_the_worker_quietly():
    from statecat.catalog.spark.columnar_worker import main

    out = io.BytesIO()
    with pytest.raises(SystemExit):
        main(io.BufferedReader(io.BytesIO(b"")), out)
    assert out.getvalue() == b""


# ----------------------------------------------------------------------------- the jar (no Spark)


def test_without_a_jdk_sessions_go_without_the_extension(monkeypatch, tmp_path, caplog):
    from statecat.catalog.spark import extension

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no javac anywhere
    monkeypatch.setattr(extension, "_built", {})
    conf = {"spark.jars": "/x/other.jar"}
    assert extension.columnar_conf(conf) == conf
    assert "no javac (JDK) found" in caplog.text and "row by row" in caplog.text


def test_the_jar_is_built_once_per_source_and_merged_into_existing_settings(monkeypatch, tmp_path):
    from statecat.catalog.spark import extension

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(extension, "_built", {})
    conf = extension.columnar_conf({"spark.jars": "/x/other.jar", "spark.sql.extensions": "a.B"})
    jar = conf["spark.jars"].split(",")[1]
    assert conf["spark.jars"].split(",")[0] == "/x/other.jar" and jar.startswith(str(tmp_path / "cache"))
    assert conf["spark.sql.extensions"] == f"a.B,{extension.EXTENSIONS_CLASS}"
    import zipfile

    names = zipfile.ZipFile(jar).namelist()
    assert "statecat/spark/StatecatExtensions.class" in names and "statecat/spark/ColumnarStateRule.class" in names
    built = (tmp_path / "cache" / "statecat").stat().st_mtime_ns
    monkeypatch.setattr(extension, "_built", {})
    assert extension.extension_jar() == jar  # cached: not rebuilt
    assert sorted(p.name for p in (tmp_path / "cache" / "statecat").iterdir()) == [jar.rsplit("/", 1)[1]]
    assert (tmp_path / "cache" / "statecat").stat().st_mtime_ns == built
