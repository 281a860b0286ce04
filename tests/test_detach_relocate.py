"""``statecat detach`` and ``statecat relocate``, re-attaching a moved savepoint, missing savepoints,
and the registry's migration from the columns an older statecat created.

One local Spark session (Hive catalog on an embedded Derby metastore in a tmp dir) serves the
module; the CLI runs in this process (``cli_main``), so it shares that session. Savepoints are
copies of the fixture ``sql_groupby_hashmap_2.3``; answers are checked against its expected.json.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import shutil
import sys
from pathlib import Path

import pytest

from statecat.catalog.cli import main as cli_main
from tests.fixtures.expected import iter_states, load_expected, savepoint_dir

pytestmark = pytest.mark.spark

CASE = "sql_groupby_hashmap_2.3"
OLD_COLUMNS = (
    "`database` STRING, path STRING, checkpoint_id BIGINT, time TIMESTAMP, size_bytes BIGINT, "
    "flink_version STRING, metadata_version INT, checkpoint_type STRING, savepoint_format STRING, "
    "operators INT, attached_at TIMESTAMP"
)
LEGACY_TIME = dt.datetime(2025, 1, 2, 3, 4, 5)


def _copy(dest: Path) -> Path:
    shutil.copytree(savepoint_dir(CASE), dest)
    (dest / "stateInfo").unlink(missing_ok=True)
    return dest


def _tree_digest(directory: Path) -> dict[str, str]:
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def _expected_acc() -> list[tuple]:
    (state,) = [s for _, s in iter_states(load_expected(CASE)) if s["name"] == "accState"]
    return sorted((r["key"], r["value"]["f0"], r["value"]["f1"]) for r in state["rows"])


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """A session whose registry an older statecat created, holding one row (``legacy``)."""
    from statecat.catalog.servers.sessions import session

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    base = tmp_path_factory.mktemp("detach")
    home = base / "home"
    spark = session(
        str(home),
        conf={
            "spark.sql.session.timeZone": "UTC",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": "2",
        },
        quiet=True,
    )
    legacy = _copy(base / "legacy" / "savepoint")
    spark.sql("CREATE DATABASE IF NOT EXISTS statecat")
    spark.sql(f"CREATE TABLE statecat.savepoints ({OLD_COLUMNS}) USING parquet")
    spark.sql(
        f"INSERT INTO statecat.savepoints VALUES ('legacy', '{legacy}', 1, TIMESTAMP'{LEGACY_TIME}', 1, "
        "'2.x', 6, 'Savepoint', 'CANONICAL', 4, current_timestamp())"
    )
    return {"spark": spark, "home": str(home), "base": base, "legacy": legacy}


def _cli(env, *args) -> int:
    return cli_main(list(args) + ["--home", env["home"]])


def _attach(env, path: Path) -> str:
    from statecat.catalog.spark.databases import attach

    result = attach(env["spark"], [str(path)])
    assert result.failed == []
    (database,) = [r.database for r in result.registered] or result.known
    return database


def _rows(env) -> dict[str, dict]:
    return {r["database"]: r.asDict() for r in env["spark"].table("statecat.savepoints").collect()}


def _acc(env, database: str) -> list[tuple]:
    from statecat.catalog.spark.queries import sql

    frame = sql(env["spark"], f"SELECT key, value.f0, value.f1 FROM {database}.accstate")
    return sorted(tuple(r) for r in frame.collect())


def _refs(env, database: str) -> set[str]:
    from statecat.catalog.spark.tables import ref_from_schema

    spark = env["spark"]
    return {
        ref_from_schema(spark.table(f"`{database}`.`{t.name}`").schema).savepoint
        for t in spark.catalog.listTables(database)
    }


def _property(env, database: str) -> str:
    from statecat.catalog.spark.queries import _savepoint_of

    return _savepoint_of(env["spark"], database)


def test_an_older_registry_is_migrated_once_and_every_column_has_a_comment(env):
    from statecat.catalog.spark.registry import REGISTRY_SCHEMA, TIME_SOURCE_COMMENT, ensure_registry
    from statecat.statemeta.snapshotter.taken_at import SOURCE_FILE

    spark = env["spark"]
    ensure_registry(spark)
    columns = [(r["col_name"], r["comment"]) for r in spark.sql("DESCRIBE TABLE statecat.savepoints").collect()]
    assert [c for c, _ in columns] == [name for name, _, _ in REGISTRY_SCHEMA]
    assert all(comment for _, comment in columns)
    assert dict(columns)["time_source"] == TIME_SOURCE_COMMENT
    row = _rows(env)["legacy"]
    assert row["time_source"] == SOURCE_FILE  # the legacy copy is there: asked again, a copy's mtime
    assert row["metadata_sha256"] == hashlib.sha256((env["legacy"] / "_metadata").read_bytes()).hexdigest()
    location = spark.sql("DESCRIBE TABLE EXTENDED statecat.savepoints").where("col_name = 'Location'").first()[1]
    ensure_registry(spark)  # again: nothing to do, nothing rewritten
    assert (
        spark.sql("DESCRIBE TABLE EXTENDED statecat.savepoints").where("col_name = 'Location'").first()[1] == location
    )
    assert _rows(env)["legacy"] == row


def test_detach_drops_the_database_and_the_row_and_leaves_flinks_files(env, capsys):
    sp = _copy(env["base"] / "to_detach" / "savepoint")
    before = _tree_digest(sp)
    database = _attach(env, sp)
    spark = env["spark"]
    assert spark.catalog.databaseExists(database)
    others = {d: r for d, r in _rows(env).items() if d != database}
    assert _cli(env, "detach", database) == 0
    assert capsys.readouterr().out.startswith(f"{database}\t{sp}\tdetached")
    assert not spark.catalog.databaseExists(database)
    assert _rows(env) == others
    assert _tree_digest(sp) == before
    assert _cli(env, "detach", database) == 0  # idempotent
    assert "not attached; nothing to do" in capsys.readouterr().out
    assert _rows(env) == others
    # By path, too (the directory attach was given).
    database = _attach(env, sp.parent)
    assert _cli(env, "detach", str(sp.parent)) == 0
    assert not spark.catalog.databaseExists(database) and database not in _rows(env)
    assert _tree_digest(sp) == before


def test_detach_refuses_a_database_holding_other_tables(env, capsys):
    sp = _copy(env["base"] / "with_own_table" / "savepoint")
    database = _attach(env, sp)
    spark = env["spark"]
    spark.sql(f"CREATE TABLE `{database}`.mine (x INT) USING parquet")
    assert _cli(env, "detach", database) == 2
    assert "holds tables statecat did not create (mine)" in capsys.readouterr().err
    assert spark.catalog.tableExists(f"`{database}`.mine") and database in _rows(env)
    spark.sql(f"DROP TABLE `{database}`.mine")
    assert _cli(env, "detach", database) == 0


def test_relocate_after_a_move_keeps_the_database_and_the_answers(env, capsys):
    old = _copy(env["base"] / "before_move" / "savepoint")
    database = _attach(env, old)
    assert _acc(env, database) == _expected_acc()
    new = env["base"] / "after_move" / "savepoint"
    new.parent.mkdir()
    os.rename(old, new)
    assert _cli(env, "sql", f"SELECT count(*) FROM {database}.accstate") == 2
    assert f"savepoint attached from {old} is missing" in capsys.readouterr().err
    for _ in range(2):  # a second run finds everything done and leaves it so
        assert _cli(env, "relocate", str(old), str(new)) == 0
        assert capsys.readouterr().out == f"{database}\t{new}\trelocated\n"
        assert _rows(env)[database]["path"] == str(new)
        assert _property(env, database) == str(new)
        assert _refs(env, database) == {str(new)}
        assert _acc(env, database) == _expected_acc()


def test_relocate_refuses_another_savepoint(env, capsys):
    sp = _copy(env["base"] / "relocate_wrong" / "savepoint")
    database = _attach(env, sp)
    other = env["base"] / "other_case"
    shutil.copytree(savepoint_dir("sql_join_2.3"), other)
    assert _cli(env, "relocate", database, str(other)) == 2
    assert f"is not the savepoint attached from {sp} as {database}" in capsys.readouterr().err
    assert _rows(env)[database]["path"] == str(sp)


def test_attaching_a_moved_savepoint_keeps_its_database(env):
    from statecat.catalog.spark.databases import attach

    old = _copy(env["base"] / "reattach_old" / "savepoint")
    database = _attach(env, old)
    count = len(_rows(env))
    new = env["base"] / "reattach_new" / "savepoint"
    new.parent.mkdir()
    shutil.move(old, new)
    result = attach(env["spark"], [str(new)])
    assert result.failed == [] and result.registered == [] and result.known == [database]
    rows = _rows(env)
    assert len(rows) == count and rows[database]["path"] == str(new)
    assert _refs(env, database) == {str(new)} and _property(env, database) == str(new)
    assert _acc(env, database) == _expected_acc()


def test_a_query_on_a_deleted_savepoint_is_one_line_naming_relocate_and_detach(env, capsys):
    from statecat.catalog.spark.errors import spark_error_message, spark_error_types

    sp = _copy(env["base"] / "deleted" / "savepoint")
    database = _attach(env, sp)
    shutil.rmtree(sp)
    want = (
        f"savepoint attached from {sp} is missing. If it moved, run `statecat relocate {sp} NEW`; "
        f"to drop its database, `statecat detach {database}`"
    )
    assert _cli(env, "sql", f"SELECT * FROM {database}.accstate WHERE key = 'key_1'") == 2
    err = capsys.readouterr().err
    assert err == f"statecat: error: {want}\n"
    # Plain Spark (no statecat.sql in front): the data source says the same, naming the path.
    with pytest.raises(spark_error_types()) as caught:
        env["spark"].sql(f"SELECT * FROM {database}.accstate").collect()
    message = spark_error_message(caught.value)
    assert message.startswith(f"savepoint attached from {sp} is missing. If it moved, run `statecat relocate {sp} NEW`")
    with pytest.raises(spark_error_types()) as caught:
        env["spark"].sql(f"SELECT * FROM {database}.state_meta").collect()
    assert spark_error_message(caught.value).startswith(f"savepoint attached from {sp} is missing")
    assert _cli(env, "detach", database) == 0  # a deleted savepoint can still be detached
    assert database not in _rows(env)


@pytest.mark.parametrize("table, columnar", [("accstate", False), ("accstate", True), ("state_meta", False)])
def test_a_worker_side_statecat_error_is_one_frame_and_one_message(env, table, columnar):
    """What plain Spark (spark-sql, a notebook) shows: the worker's traceback is one frame plus
    statecat's line; a columnar scan (a Java source) fails as Spark's own sources do, with statecat's
    line as the Java exception's message and no Python traceback."""
    from statecat.catalog.spark.errors import spark_error_message, spark_error_types

    sp = _copy(env["base"] / f"damaged_{table}_{columnar}" / "savepoint")
    database = _attach(env, sp)
    if table == "accstate":  # garbled key-group bytes: planning works, the read fails in the worker
        for data in (p for p in sp.iterdir() if p.name != "_metadata"):
            raw = bytearray(data.read_bytes())
            raw[20000:20400] = b"\xff" * 400
            data.write_bytes(bytes(raw))
        wanted = "The state file is damaged or truncated"
    else:
        shutil.rmtree(sp)
        wanted = f"savepoint attached from {sp} is missing"
    env["spark"].conf.set("spark.statecat.columnar.enabled", str(columnar).lower())
    try:
        with pytest.raises(spark_error_types()) as caught:
            env["spark"].sql(f"SELECT count(*) FROM {database}.{table}").collect()
    finally:
        env["spark"].conf.set("spark.statecat.columnar.enabled", "true")
    text = str(caught.value)
    if columnar:
        assert f"StatecatPythonException: StatecatQueryError: cannot read savepoint {sp}" in text
        assert '  File "' not in text
        assert spark_error_message(caught.value).startswith(f"cannot read savepoint {sp}, operator GroupAggregate[3]")
        return
    assert text.count(wanted) == 1
    assert text.count('  File "') == 1 and "raise failure from None" in text
    assert "During handling of the above exception" not in text and "^^^" not in text
    assert wanted in spark_error_message(caught.value)


def test_relocate_keeps_the_descriptor_file_of_declared_tables(env):
    import json

    from statecat.catalog.spark.databases import attach, materialise
    from statecat.catalog.spark.relocation import _table_refs
    from tests.test_stateinfo import PROCESS_CASE, _descriptor_doc

    old = env["base"] / "declared_old" / "savepoint"
    shutil.copytree(savepoint_dir(PROCESS_CASE), old)
    descriptors = env["base"] / "descriptors.json"
    descriptors.write_text(json.dumps(_descriptor_doc(load_expected(PROCESS_CASE))))
    (record,) = attach(env["spark"], [str(old)], eager=False).registered
    declared = set(materialise(env["spark"], record.database, str(old), str(descriptors)))
    new = env["base"] / "declared_new" / "savepoint"
    new.parent.mkdir()
    os.rename(old, new)
    assert _cli(env, "relocate", str(old), str(new)) == 0
    refs = _refs_of(env, record.database)
    assert {r.descriptors for r in refs} == {str(descriptors)} and {r.savepoint for r in refs} == {str(new)}
    assert {t.name for t in env["spark"].catalog.listTables(record.database)} == declared
    assert _table_refs(env["spark"], record.database)


def _refs_of(env, database: str) -> list:
    from statecat.catalog.spark.tables import ref_from_schema

    spark = env["spark"]
    return [ref_from_schema(spark.table(f"`{database}`.`{t.name}`").schema) for t in spark.catalog.listTables(database)]
