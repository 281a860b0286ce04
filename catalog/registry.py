"""The catalog-wide registry table ``statecat.savepoints``: one row per attached savepoint.

A row is read from the savepoint's ``_metadata`` only (never its state) and fixes the savepoint's
database name.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from statecat.catalog.discovery import REGISTRY_DATABASE

REGISTRY_TABLE = f"{REGISTRY_DATABASE}.savepoints"
PROPERTY_SAVEPOINT = "statecat.savepoint"  # database property holding the savepoint's path

REGISTRY_COLUMNS = (
    "`database` STRING, path STRING, checkpoint_id BIGINT, time TIMESTAMP, size_bytes BIGINT, "
    "flink_version STRING, metadata_version INT, checkpoint_type STRING, savepoint_format STRING, "
    "operators INT, attached_at TIMESTAMP"
)


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

    def row(self) -> tuple:
        return (self.database, self.path, self.checkpoint_id, self.time, self.size_bytes, self.flink_version,
                self.metadata_version, self.checkpoint_type, self.savepoint_format, self.operators, self.attached_at)


def read_record(path: str, database: str, attached_at: dt.datetime) -> SavepointRecord:
    """What the registry keeps about a savepoint, from its ``_metadata`` only."""
    from statecat.statemeta.metadata import METADATA_VERSION_RELEASES, read_metadata
    from statecat.statemeta.storage import open_storage

    storage = open_storage(path)
    metadata = read_metadata(storage)
    time = None
    try:
        info = storage.filesystem.get_file_info(storage.metadata_path)
        if info.mtime is not None:
            time = info.mtime.astimezone(dt.UTC)  # aware: Spark stores the instant, shows it in session time
    except OSError:
        pass
    return SavepointRecord(database, path, metadata.checkpoint_id, time, _savepoint_size(metadata),
                           METADATA_VERSION_RELEASES.get(metadata.version, "unknown"), metadata.version,
                           metadata.checkpoint_type, metadata.savepoint_format, len(metadata.operators), attached_at)


def _savepoint_size(metadata) -> int:
    """``_metadata`` plus every distinct file (segment) its handles refer to."""
    seen: dict[tuple, int] = {}
    for op in metadata.operators:
        streams = [op.coordinator] if op.coordinator is not None else []
        for subtask in op.subtasks:
            for handle in (subtask.managed_operator, subtask.raw_operator, subtask.managed_keyed, subtask.raw_keyed):
                stream = getattr(handle, "stream", None)
                if stream is not None:
                    streams.append(stream)
        for stream in streams:
            path = getattr(stream, "path", None)
            if path is not None:
                seen[(path, getattr(stream, "start", 0))] = stream.size
    return metadata.size + sum(seen.values())


def ensure_registry(spark) -> None:
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {REGISTRY_DATABASE} COMMENT 'statecat: attached Flink savepoints'")
    spark.sql(f"CREATE TABLE IF NOT EXISTS {REGISTRY_TABLE} ({REGISTRY_COLUMNS}) USING parquet "
              "COMMENT 'every savepoint statecat attached: one row each, with its database name'")


def registered(spark) -> dict[str, str]:
    """path -> database of every registered savepoint."""
    if not spark.catalog.tableExists(REGISTRY_TABLE):
        return {}
    return {r["path"]: r["database"] for r in spark.table(REGISTRY_TABLE).select("path", "database").collect()}


def append_records(spark, records: list[SavepointRecord]) -> None:
    schema = spark.table(REGISTRY_TABLE).schema
    spark.createDataFrame([r.row() for r in records], schema).write.insertInto(REGISTRY_TABLE)


def existing_databases(spark) -> set[str]:
    return {row[0] for row in spark.sql("SHOW DATABASES").collect()}
