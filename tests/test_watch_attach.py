"""`statecat watch --attach`: each savepoint that gets its stateInfo is registered as a database, once."""

from __future__ import annotations

import shutil

import pytest

from statecat.catalog.cli.watch import catalog_registrar
from statecat.catalog.spark.registry import registered
from statecat.statemeta.snapshotter.watcher import Watcher
from tests.fixtures.expected import savepoint_dir

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    from tests.test_catalog import attached_spark

    return attached_spark(tmp_path_factory)


def _count(spark, table: str) -> int:
    return spark.sql(f"SELECT count(*) FROM {table}").collect()[0][0]


def test_watch_registers_each_new_savepoint_once(spark, tmp_path):
    root = tmp_path / "savepoints"
    root.mkdir()
    shutil.copytree(savepoint_dir("sql_groupby_rocksdb_2.3"), root / "savepoint-aaaaaa-000000000001")
    registrar = catalog_registrar(None)  # reuses the running session
    calls: list[str] = []

    def register(uri: str) -> None:
        calls.append(uri)
        registrar(uri)

    watcher = Watcher([str(root)], on_ready=register)
    watcher.poll()
    assert calls == []  # _metadata must look settled over two polls first
    watcher.poll()
    assert len(calls) == 1
    first = registered(spark)[calls[0]]
    assert _count(spark, f"{first}.accstate") == 300

    shutil.copytree(savepoint_dir("sql_window_2.3"), root / "savepoint-bbbbbb-000000000002")
    for _ in range(3):
        watcher.poll()
    assert len(calls) == 2
    second = registered(spark)[calls[1]]
    assert second != first
    tables = {t.name for t in spark.catalog.listTables(second)}
    assert "state_meta" in tables and "window_aggs" in tables

    restarted = Watcher([str(root)], on_ready=register)  # stateInfo exists: "done", registration is idempotent
    restarted.poll()
    assert {registered(spark)[uri] for uri in calls[2:]} <= {first, second}
    assert list(registered(spark).values()).count(first) == 1
