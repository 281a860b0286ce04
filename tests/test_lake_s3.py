"""Savepoints and the lake on S3: moto's standalone server on loopback, reached through pyarrow.fs
(savepoints, listing) and deltalake (the lake), configured only by the usual AWS_* variables."""

from __future__ import annotations

import deltalake
import pyarrow as pa
import pyarrow.fs as pafs
import pytest
from deltalake import QueryBuilder

from statecat.catalog.lake.tables import read_delta
from statecat.readers import SavepointReader
from statecat.statemeta.files.storage import open_storage
from statecat.statemeta.model import load_state_meta
from statecat.statemeta.naming import stable_state_names
from tests.fixtures.expected import savepoint_dir
from tests.fixtures.s3 import BUCKET, moto_s3
from tests.test_materialize import (
    CRASH_EXIT_CODE,
    canonical,
    duckdb_with_delta,
    statecat_cli,
)

_s3 = pytest.fixture(scope="module", name="s3")(moto_s3)
CASES = ("sql_groupby_hashmap_2.0", "sql_groupby_rocksdb_2.3", "sql_groupby_hashmap_2.3")


def _upload(filesystem, case: str, key: str) -> str:
    pafs.copy_files(
        str(savepoint_dir(case)),
        f"{BUCKET}/{key}",
        source_filesystem=pafs.LocalFileSystem(),
        destination_filesystem=filesystem,
    )
    return f"s3://{BUCKET}/{key}"


def _options(endpoint):
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ALLOW_HTTP": "true",
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
    }


def test_open_storage_reads_an_s3_savepoint_through_aws_endpoint_url(s3):
    filesystem, endpoint = s3
    uri = _upload(filesystem, "sql_groupby_hashmap_2.3", "single/savepoint-000000-aaaaaaaaaaaa")
    storage = open_storage(uri)
    assert isinstance(storage.filesystem, pafs.S3FileSystem) and storage.uri == uri
    local = SavepointReader(str(savepoint_dir("sql_groupby_hashmap_2.3"))).table("accState").to_pylist()
    assert canonical(SavepointReader(uri).table("accState").to_pylist()) == canonical(local)


def test_materialize_s3_savepoints_into_an_s3_lake_exactly_once(s3, tmp_path):
    filesystem, endpoint = s3
    uris = {
        case: _upload(filesystem, case, f"savepoints/job/savepoint-{i:06x}-{'a' * 12}") for i, case in enumerate(CASES)
    }
    lake = f"s3://{BUCKET}/lake"
    # Dies while writing the second snapshot.
    crashed = statecat_cli("materialize", f"s3://{BUCKET}/savepoints", "--to", lake, check=False, crash_after_commits=9)
    assert crashed.returncode == CRASH_EXIT_CODE, crashed.stderr
    first = statecat_cli("materialize", f"s3://{BUCKET}/savepoints", "--to", lake)
    assert first.stdout.count("written ") == 2 and first.stdout.count("skipped ") == 1, first.stdout
    second = statecat_cli("materialize", f"s3://{BUCKET}/savepoints", "--to", lake)
    assert second.stdout.count("skipped ") == 3 and "written" not in second.stdout

    options = _options(endpoint)
    snapshots = read_delta(deltalake.DeltaTable(f"{lake}/snapshots", storage_options=options)).to_pylist()
    assert sorted(r["path"] for r in snapshots) == sorted(uris.values())
    # The second engine reads a copy of the lake's objects (DuckDB's S3 support is a separate extension).
    local_lake = tmp_path / "lake"
    pafs.copy_files(
        f"{BUCKET}/lake", str(local_lake), source_filesystem=filesystem, destination_filesystem=pafs.LocalFileSystem()
    )
    con = duckdb_with_delta()
    for row in snapshots:
        meta = load_state_meta(row["path"])
        names = stable_state_names(meta)
        for op, state in meta.states():
            table = names[(op.id, state.name)]
            columns = SavepointReader(meta).schema(state.name, op.id).names
            expected = canonical(SavepointReader(meta).table(state.name, op.id).to_pylist())
            query = QueryBuilder().register(
                "t", deltalake.DeltaTable(f"{lake}/states/{table}", storage_options=options)
            )
            got = query.execute(f"SELECT * FROM t WHERE snapshot_id = '{row['snapshot_id']}'").read_all()
            got = pa.table(got).select(columns).to_pylist()
            assert canonical(got) == expected, table
            duck = (
                con.execute(
                    f"SELECT {', '.join(columns)} FROM delta_scan('{local_lake / 'states' / table}') "
                    "WHERE snapshot_id = ?",
                    [row["snapshot_id"]],
                )
                .arrow()
                .read_all()
                .to_pylist()
            )
            assert canonical(duck) == expected, table

    # Retention on S3: keep the newest, delete the rest's objects at once.
    objects_before = len(filesystem.get_file_info(pafs.FileSelector(f"{BUCKET}/lake/states/accstate", recursive=True)))
    kept = statecat_cli("materialize", f"s3://{BUCKET}/savepoints", "--to", lake, "--keep", "1", "--vacuum-hours", "0")
    assert "removed 2 old snapshot(s)" in kept.stdout
    left = read_delta(deltalake.DeltaTable(f"{lake}/snapshots", storage_options=options)).to_pylist()
    assert len(left) == 1
    parts = deltalake.DeltaTable(f"{lake}/states/accstate", storage_options=options).partitions()
    assert [p["snapshot_id"] for p in parts] == [left[0]["snapshot_id"]]
    objects_after = len(filesystem.get_file_info(pafs.FileSelector(f"{BUCKET}/lake/states/accstate", recursive=True)))
    assert objects_after < objects_before
