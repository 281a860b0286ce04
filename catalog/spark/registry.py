"""The catalog-wide registry table ``statecat.savepoints``: one row per attached savepoint.

A row is read from the savepoint's ``_metadata`` only (never its state) and fixes the savepoint's
database name.
"""

from __future__ import annotations

import datetime as dt
import re
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from statecat.catalog.spark.discovery import REGISTRY_DATABASE
from statecat.statemeta.errors import StatecatError

if TYPE_CHECKING:
    from py4j.java_gateway import JVMView
    from pyspark.sql import SparkSession

    from statecat.statemeta.files.metadata import CheckpointMetadata, NativeRocksDBHandle

REGISTRY_TABLE = f"{REGISTRY_DATABASE}.savepoints"
PROPERTY_SAVEPOINT = "statecat.savepoint"  # database property holding the savepoint's path
PROPERTY_LAKE = "statecat.lake"  # database property holding the lake's URI (spark/lakes.py)

TIME_SOURCE_COMMENT = (
    "where `time` comes from: rest_trigger (statecat savepoint saw it complete), "
    "stateinfo_snapshot (the snapshotter saw Flink's _metadata), checkpoint_mtime (a chk-N in "
    "Flink's layout), 'file_mtime: may be the copy time', unknown"
)
# (name, type, comment); columns added after the first release come last (ALTER TABLE ADD COLUMNS appends).
REGISTRY_SCHEMA = (
    ("database", "STRING", "the Spark database of the savepoint's tables"),
    ("path", "STRING", "the savepoint directory (holding _metadata); `statecat relocate` updates it"),
    ("checkpoint_id", "BIGINT", "Flink's checkpoint id"),
    ("time", "TIMESTAMP", "when the savepoint was taken, as well as statecat knows: see time_source"),
    ("size_bytes", "BIGINT", "_metadata plus every state file it refers to"),
    ("flink_version", "STRING", "Flink releases that write this _metadata version"),
    ("metadata_version", "INT", "_metadata format version"),
    ("checkpoint_type", "STRING", "Savepoint, Suspend Savepoint, Checkpoint, ..."),
    ("savepoint_format", "STRING", "CANONICAL or NATIVE (null for checkpoints)"),
    ("operators", "INT", "operators in _metadata"),
    ("attached_at", "TIMESTAMP", "when statecat attached the savepoint"),
    ("time_source", "STRING", TIME_SOURCE_COMMENT),
    ("metadata_sha256", "STRING", "SHA-256 of _metadata: recognises the savepoint after a move"),
)


def sql_string(text: str) -> str:
    """A Spark SQL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _column_ddl(name: str, kind: str, comment: str) -> str:
    return f"`{name}` {kind} COMMENT {sql_string(comment)}"


REGISTRY_COLUMNS = ", ".join(_column_ddl(*column) for column in REGISTRY_SCHEMA)


@dataclass(frozen=True)
class SavepointRecord:
    """One row of ``statecat.savepoints``: what ``_metadata`` says about a savepoint."""

    database: str
    path: str
    checkpoint_id: int
    time: dt.datetime | None
    size_bytes: int
    flink_version: str
    metadata_version: int
    checkpoint_type: str | None
    savepoint_format: str | None
    operators: int
    attached_at: dt.datetime
    time_source: str | None = None
    metadata_sha256: str | None = None

    def row(self) -> tuple:
        return (
            self.database,
            self.path,
            self.checkpoint_id,
            self.time,
            self.size_bytes,
            self.flink_version,
            self.metadata_version,
            self.checkpoint_type,
            self.savepoint_format,
            self.operators,
            self.attached_at,
            self.time_source,
            self.metadata_sha256,
        )

    @staticmethod
    def from_row(row: dict[str, Any]) -> SavepointRecord:
        # A registry row's values, as Spark returns them for the schema's columns.
        return SavepointRecord(*(cast(Any, row.get(name)) for name, _, _ in REGISTRY_SCHEMA))

    def same_savepoint(self, other: SavepointRecord) -> bool:
        """Is ``other`` (read from some path) this savepoint: same ``_metadata`` bytes, or same checkpoint and size."""
        if self.metadata_sha256 and other.metadata_sha256:
            return self.metadata_sha256 == other.metadata_sha256 and self.size_bytes == other.size_bytes
        return self.checkpoint_id == other.checkpoint_id and self.size_bytes == other.size_bytes


def read_record(path: str, database: str, attached_at: dt.datetime) -> SavepointRecord:
    """What the registry keeps about a savepoint, from its ``_metadata`` (and stateInfo's time record) only."""
    from statecat.statemeta.files.metadata import METADATA_VERSION_RELEASES, read_metadata
    from statecat.statemeta.files.storage import open_storage
    from statecat.statemeta.snapshotter.stateinfo import metadata_fingerprint
    from statecat.statemeta.snapshotter.taken_at import savepoint_time

    storage = open_storage(path)
    metadata = read_metadata(storage)
    time, time_source = savepoint_time(storage)  # aware: Spark stores the instant, shows it in session time
    return SavepointRecord(
        database,
        path,
        metadata.checkpoint_id,
        time,
        _savepoint_size(metadata),
        METADATA_VERSION_RELEASES.get(metadata.version, "unknown"),
        metadata.version,
        metadata.checkpoint_type,
        metadata.savepoint_format,
        len(metadata.operators),
        attached_at,
        time_source,
        metadata_fingerprint(storage).sha256,
    )


def _savepoint_size(metadata: CheckpointMetadata) -> int:
    """``_metadata`` plus every distinct file (segment) its handles refer to."""
    seen: dict[tuple, int] = {}
    for op in metadata.operators:
        streams = [op.coordinator] if op.coordinator is not None else []
        for subtask in op.subtasks:
            for handle in (subtask.managed_operator, subtask.raw_operator, subtask.managed_keyed, subtask.raw_keyed):
                stream = getattr(handle, "stream", None)
                if stream is not None:
                    streams.append(stream)
                if hasattr(handle, "files"):  # a native RocksDB instance: its meta-data stream and files
                    native = cast("NativeRocksDBHandle", handle)
                    streams += [native.meta_stream] + [f.stream for f in native.files]
        for stream in streams:
            path = getattr(stream, "path", None)
            if path is not None:
                seen[(path, getattr(stream, "start", 0))] = stream.size
    return metadata.size + sum(seen.values())


def ensure_registry(spark: SparkSession) -> None:
    """Creates the registry, or brings one an older statecat created up to date (idempotent)."""
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {REGISTRY_DATABASE} COMMENT 'statecat: attached Flink savepoints'")
    spark.sql(
        f"CREATE TABLE IF NOT EXISTS {REGISTRY_TABLE} ({REGISTRY_COLUMNS}) USING parquet "
        "COMMENT 'every savepoint statecat attached: one row each, with its database name'"
    )
    _migrate(spark)


def _migrate(spark: SparkSession) -> None:
    fields = {f.name: f for f in spark.table(REGISTRY_TABLE).schema.fields}
    added = [column for column in REGISTRY_SCHEMA if column[0] not in fields]
    if added:
        spark.sql(f"ALTER TABLE {REGISTRY_TABLE} ADD COLUMNS ({', '.join(_column_ddl(*c) for c in added)})")
    for name, _kind, comment in REGISTRY_SCHEMA:
        if name in fields and (fields[name].metadata or {}).get("comment") != comment:
            spark.sql(f"ALTER TABLE {REGISTRY_TABLE} ALTER COLUMN `{name}` COMMENT {sql_string(comment)}")
    if "time_source" in [c[0] for c in added]:
        records = registry_records(spark)
        if records:
            # Rows from before: their time was the _metadata mtime; ask the savepoints still there again.
            rewrite_records(spark, [_with_time_source(r) for r in records])


def _with_time_source(record: SavepointRecord) -> SavepointRecord:
    from dataclasses import replace

    from statecat.statemeta.files.storage import open_storage
    from statecat.statemeta.snapshotter.stateinfo import metadata_fingerprint
    from statecat.statemeta.snapshotter.taken_at import SOURCE_FILE, SOURCE_UNKNOWN, savepoint_time

    if record.time_source is not None:
        return record
    try:
        storage = open_storage(record.path)
        time, source = savepoint_time(storage)
        return replace(record, time=time, time_source=source, metadata_sha256=metadata_fingerprint(storage).sha256)
    except (StatecatError, OSError):
        return replace(record, time_source=SOURCE_FILE if record.time is not None else SOURCE_UNKNOWN)


def registered(spark: SparkSession) -> dict[str, str]:
    """path -> database of every registered savepoint."""
    if not spark.catalog.tableExists(REGISTRY_TABLE):
        return {}
    return {r["path"]: r["database"] for r in spark.table(REGISTRY_TABLE).select("path", "database").collect()}


def registry_records(spark: SparkSession) -> list[SavepointRecord]:
    """Every row of the registry (empty when there is none)."""
    if not spark.catalog.tableExists(REGISTRY_TABLE):
        return []
    return [SavepointRecord.from_row(r.asDict()) for r in spark.table(REGISTRY_TABLE).collect()]


def append_records(spark: SparkSession, records: list[SavepointRecord]) -> None:
    schema = spark.table(REGISTRY_TABLE).schema
    spark.createDataFrame([r.row() for r in records], schema).write.insertInto(REGISTRY_TABLE)


_GENERATION = re.compile(r"savepoints(-[0-9a-f]{32})?")


def rewrite_records(spark: SparkSession, records: list[SavepointRecord]) -> None:
    """Replaces the registry's rows with ``records``, atomically.

    The rows go to a new directory first; pointing the table at it (one metastore update) is the
    switch, so a crash leaves the old registry or the new one, never a half-written one. The
    generation before stays for sessions that listed its files; older ones and leftovers of
    interrupted rewrites are removed.
    """
    schema = spark.table(REGISTRY_TABLE).schema
    current = _table_location(spark)
    parent, current_name = current.rstrip("/").rsplit("/", 1)
    target = f"{parent}/savepoints-{uuid.uuid4().hex}"
    (spark.createDataFrame([r.row() for r in records], schema).coalesce(1).write.mode("errorifexists").parquet(target))
    spark.sql(f"ALTER TABLE {REGISTRY_TABLE} SET LOCATION {sql_string(target)}")
    _remove_generations(spark, parent, keep={current_name, target.rsplit("/", 1)[1]})
    from statecat.catalog.spark.catalog_views import refresh_catalog_views

    refresh_catalog_views(spark)  # statecat.states / statecat.operators read the registry's files directly


def _table_location(spark: SparkSession) -> str:
    for row in spark.sql(f"DESCRIBE TABLE EXTENDED {REGISTRY_TABLE}").collect():
        if row[0] == "Location":
            return row[1]
    raise StatecatError(f"the metastore names no location for {REGISTRY_TABLE}")


def _remove_generations(spark: SparkSession, parent: str, keep: set[str]) -> None:
    jvm = cast("JVMView", spark._jvm)  # set while the session runs
    directory = jvm.org.apache.hadoop.fs.Path(parent)
    filesystem = directory.getFileSystem(spark._jsc.hadoopConfiguration())
    for status in filesystem.listStatus(directory):
        name = status.getPath().getName()
        if status.isDirectory() and _GENERATION.fullmatch(name) and name not in keep:
            filesystem.delete(status.getPath(), True)


_PROPERTY_PAIR = re.compile(r"\(([^,()]+),(.*?)\)")


def database_properties(spark: SparkSession, database: str) -> dict[str, str]:
    """The database's properties (``statecat.savepoint``, ``statecat.lake``); none for one Spark cannot describe."""
    try:
        rows = spark.sql(f"DESCRIBE DATABASE EXTENDED `{database}`").collect()
    except Exception:  # noqa: BLE001 - a database Spark cannot describe is not one of ours
        return {}
    for row in rows:
        if row[0] == "Properties":
            return {key.strip(): value for key, value in _PROPERTY_PAIR.findall(row[1])}
    return {}


def existing_databases(spark: SparkSession) -> set[str]:
    return {row[0] for row in spark.sql("SHOW DATABASES").collect()}
