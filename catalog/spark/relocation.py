"""Detaching a savepoint from the catalog, and following one that moved.

A savepoint's database holds only references (each table's first column names the savepoint's
path, see ``tables.TableRef``), so both operations rewrite statecat's own catalog entries and
never touch Flink's files. Each step converges when run again after a crash:

* ``detach``: drop the database (its tables are references), then remove the registry row;
* ``relocate``: rewrite the registry row to the new path, then recreate the database from it.

Registry rewrites are atomic (``registry.rewrite_records``).
"""

from __future__ import annotations

import json
import logging
import posixpath
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, cast

from statecat.catalog.spark.discovery import REGISTRY_DATABASE, normalise_path
from statecat.catalog.spark.registry import (
    PROPERTY_SAVEPOINT,
    SavepointRecord,
    ensure_registry,
    existing_databases,
    read_record,
    registry_records,
    rewrite_records,
)
from statecat.catalog.spark.tables import SOURCE_NAME
from statecat.statemeta.errors import LookupFailedError, StatecatError, did_you_mean

if TYPE_CHECKING:
    from py4j.java_gateway import JVMView
    from pyspark.sql import SparkSession

    from statecat.catalog.spark.tables import TableRef

log = logging.getLogger("statecat.catalog")


class SavepointMissingError(StatecatError):
    """A savepoint the catalog attached is no longer at its recorded path."""


def missing_error(path: str, database: str | None = None) -> SavepointMissingError:
    drop = f"`statecat detach {database}`" if database else f"`statecat detach {path}`"
    return SavepointMissingError(
        f"savepoint attached from {path} is missing",
        hint=f"If it moved, run `statecat relocate {path} NEW`; to drop its database, {drop}",
    )


def is_missing(path: str) -> bool:
    """Is there no ``_metadata`` at the recorded path any more (moved or deleted)?"""
    import pyarrow.fs as pafs

    from statecat.statemeta.files.storage import METADATA_FILE

    try:
        if "://" in path:
            filesystem, inner = pafs.FileSystem.from_uri(path)
        else:
            filesystem, inner = pafs.LocalFileSystem(), path
        return filesystem.get_file_info(posixpath.join(inner, METADATA_FILE)).type == pafs.FileType.NotFound
    except (ValueError, OSError):
        return False  # cannot tell (no credentials, network): let the read say what is wrong


@dataclass(frozen=True)
class Detached:
    database: str
    path: str | None
    dropped: bool  # the database existed and was dropped
    unregistered: bool  # the registry row existed and was removed


def detach(spark: SparkSession, target: str) -> Detached | None:
    """Drops the database of the savepoint ``target`` names (database or path) and its registry row.

    None when nothing is attached under that name or path (already detached).
    """
    ensure_registry(spark)
    records = registry_records(spark)
    record = _find(records, target)
    database = record.database if record else _savepoint_database(spark, target)
    if database is None:
        return None
    dropped = _drop_savepoint_database(spark, database)
    unregistered = False
    if record is not None:
        rewrite_records(spark, [r for r in records if r.database != record.database])
        unregistered = True
    return Detached(database, record.path if record else None, dropped, unregistered)


def relocate(spark: SparkSession, old: str, new: str) -> SavepointRecord:
    """Points the savepoint attached from ``old`` (path or database) at ``new``; returns its new row.

    ``new`` must hold the same savepoint (same ``_metadata``, or same checkpoint id and size).
    Running it again after it completed (or crashed half way) leaves the same state.
    """
    from statecat.catalog.spark.databases import materialise
    from statecat.statemeta.files.storage import open_storage

    ensure_registry(spark)
    records = registry_records(spark)
    new_path = normalise_path(open_storage(new).uri)
    record = _find(records, old) or _find(records, new_path)
    if record is None:
        raise LookupFailedError(
            f"no savepoint attached from {old}",
            hint=did_you_mean(old, [r.path for r in records] + [r.database for r in records])
            + " `SELECT * FROM statecat.savepoints` lists them",
        )
    found = read_record(new_path, record.database, record.attached_at)
    if not record.same_savepoint(found):
        raise LookupFailedError(
            f"{new_path} is not the savepoint attached from {record.path} as {record.database} "
            f"(checkpoint {found.checkpoint_id}, {found.size_bytes} bytes; attached: checkpoint "
            f"{record.checkpoint_id}, {record.size_bytes} bytes)",
            hint="Attach it as a savepoint of its own",
        )
    other = next((r for r in records if r.path == new_path and r.database != record.database), None)
    if other is not None:
        raise LookupFailedError(
            f"{new_path} is already attached as {other.database}",
            hint=f"Detach one of them first: `statecat detach {other.database}`",
        )
    moved = replace(
        record,
        path=new_path,
        metadata_sha256=record.metadata_sha256 or found.metadata_sha256,
        time=found.time if record.time_source is None else record.time,
        time_source=record.time_source or found.time_source,
    )
    if record != moved:
        rewrite_records(spark, [moved if r.database == record.database else r for r in records])
    # Tables attached with a descriptor file or a classpath carry them: the new tables keep them.
    refs = _table_refs(spark, record.database)
    descriptors = sorted(cast("set[str]", {ref.descriptors for ref in refs} - {None}))
    classpath = next((ref.classpath for ref in refs if ref.classpath), ())
    _drop_savepoint_database(spark, record.database)
    materialise(spark, record.database, new_path, descriptors[0] if descriptors else None, classpath)
    return moved


def moved_record(records: list[SavepointRecord], found: SavepointRecord) -> SavepointRecord | None:
    """The registered savepoint ``found`` (read from a new path) is, if its recorded path is missing."""
    for record in records:
        if record.path != found.path and record.same_savepoint(found) and is_missing(record.path):
            return record
    return None


def _find(records: list[SavepointRecord], target: str) -> SavepointRecord | None:
    by_database = [r for r in records if r.database == target.lower()]
    if by_database:
        return by_database[0]
    path = normalise_path(target)
    if posixpath.basename(path) == "_metadata":
        path = posixpath.dirname(path)
    exact = [r for r in records if r.path == path]
    # A directory attach was given that holds the savepoint (``case/`` for ``case/savepoint``).
    below = [r for r in records if r.path.startswith(path.rstrip("/") + "/")]
    return exact[0] if exact else below[0] if len(below) == 1 else None


def _savepoint_database(spark: SparkSession, name: str) -> str | None:
    """``name`` when it is a savepoint database the registry lost (a crash between detach's two steps)."""
    name = name.lower()
    if name == REGISTRY_DATABASE or name not in existing_databases(spark):
        return None
    return name if _database_property(spark, name) is not None else None


def _database_property(spark: SparkSession, database: str) -> str | None:
    for row in spark.sql(f"DESCRIBE DATABASE EXTENDED `{database}`").collect():
        if row[0] == "Properties" and PROPERTY_SAVEPOINT in row[1]:
            return row[1]
    return None


def _drop_savepoint_database(spark: SparkSession, database: str) -> bool:
    """Drops a savepoint's database, refusing when it holds tables statecat did not create."""
    if database == REGISTRY_DATABASE or not spark.catalog.databaseExists(database):
        return False
    foreign = [
        t
        for t in spark.catalog.listTables(database)
        if not t.isTemporary and _provider(spark, database, t.name) != SOURCE_NAME
    ]
    if foreign:
        names = ", ".join(sorted(t.name for t in foreign))
        raise StatecatError(
            f"database {database} holds tables statecat did not create ({names})",
            hint="Move or drop them, then run this again; statecat drops only its own tables",
        )
    spark.sql(f"DROP DATABASE IF EXISTS `{database}` CASCADE")
    return True


def _provider(spark: SparkSession, database: str, table: str) -> str | None:
    provider = _table_metadata(spark, database, table).provider()
    return provider.get() if provider.isDefined() else None


def _table_refs(spark: SparkSession, database: str) -> list[TableRef]:
    """The TableRefs of the database's flinkstate tables, from the metastore (no read, no Python worker)."""
    from pyspark.sql.types import StructType

    from statecat.catalog.spark.tables import ref_from_schema

    if not spark.catalog.databaseExists(database):
        return []
    refs = []
    for table in spark.catalog.listTables(database):
        if table.isTemporary:
            continue
        metadata = _table_metadata(spark, database, table.name)
        provider = metadata.provider()
        if provider.isDefined() and provider.get() == SOURCE_NAME:
            ref = ref_from_schema(StructType.fromJson(json.loads(metadata.schema().json())))
            if ref is not None:
                refs.append(ref)
    return refs


def _table_metadata(spark: SparkSession, database: str, table: str) -> Any:  # a JVM CatalogTable (Py4J)

    jvm = cast("JVMView", spark._jvm)  # set while the session runs
    identifier = jvm.org.apache.spark.sql.catalyst.TableIdentifier(table, jvm.scala.Option.apply(database))
    return spark._jsparkSession.sessionState().catalog().getTableMetadata(identifier)
