"""A lake of Delta tables (``statecat materialize``) as a database of Delta tables in Spark's catalog.

``attach_lake`` creates the database (property ``statecat.lake`` = the lake's URI) and registers
each Delta table of the lake as ``CREATE TABLE … USING delta LOCATION …``: the lake's top-level
tables under their directory names (``snapshots``, ``state_meta``, ``state_stats``) and every
``states/<name>`` as ``<name>``. A Delta table in the catalog reads the table's latest version, so
new snapshots show at once; a state table materialized later is registered by ``sync_lake``, which
every query naming the database runs first (``queries.prepare``) and ``statecat serve`` runs on each
poll. Needs Delta in the session (``catalog/spark/delta.py``).
"""

from __future__ import annotations

import logging
import os
import posixpath
import re
from typing import TYPE_CHECKING

from statecat.catalog.spark.delta import CATALOG_CLASS, SESSION_CATALOG, delta_unavailable
from statecat.catalog.spark.registry import PROPERTY_LAKE, database_properties, sql_string
from statecat.statemeta.errors import LookupFailedError, StatecatError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

STATES_DIR = "states"
DELTA_LOG = "_delta_log"
# A state table named like a top-level table is registered with this prefix.
STATE_PREFIX = "state_"
log = logging.getLogger("statecat.catalog")


def normalise_lake(uri: str) -> str:
    uri = str(uri).rstrip("/")
    return uri if "://" in uri else os.path.abspath(uri)


def lake_tables(uri: str) -> dict[str, str]:
    """{table name: location} of the lake's Delta tables (directories holding a ``_delta_log``)."""
    import pyarrow.fs as pafs

    filesystem, base = pafs.FileSystem.from_uri(uri) if "://" in uri else (pafs.LocalFileSystem(), uri)

    def delta_dirs(directory: str) -> list[str]:
        infos = filesystem.get_file_info(pafs.FileSelector(directory, allow_not_found=True))
        return sorted(
            info.base_name
            for info in infos
            if info.type == pafs.FileType.Directory
            and filesystem.get_file_info(posixpath.join(info.path, DELTA_LOG)).type == pafs.FileType.Directory
        )

    tables = {name: _join(uri, name) for name in delta_dirs(base)}
    for name in delta_dirs(posixpath.join(base, STATES_DIR)):
        table = f"{STATE_PREFIX}{name}" if name in tables else name
        tables[table] = _join(uri, STATES_DIR, name)
    return tables


def _join(uri: str, *parts: str) -> str:
    return posixpath.join(uri, *parts) if "://" in uri else os.path.join(uri, *parts)


def lake_database_name(uri: str) -> str:
    """The lake directory's name as a database name: lower case, letters, digits and underscores."""
    name = re.sub(r"[^0-9a-z_]+", "_", posixpath.basename(uri.rstrip("/")).lower()).strip("_")
    return name if name and not name[0].isdigit() else f"lake_{name}"


def check_lake(uri: str) -> None:
    """Raises unless ``uri`` holds a statecat lake (its ``snapshots`` Delta table)."""
    if "snapshots" not in lake_tables(uri):
        raise LookupFailedError(
            f"{uri} is not a statecat lake: it has no Delta table 'snapshots'",
            hint="Write one with `statecat materialize ROOT --to LAKE`",
        )


def check_delta(spark: SparkSession) -> None:
    """Raises with the reason when the session has no Delta (offline at its first use, no JDK)."""
    if (spark.conf.get(SESSION_CATALOG, "") or "") == CATALOG_CLASS:
        return
    reason = delta_unavailable() or f"the session's {SESSION_CATALOG} is not statecat's Delta catalog"
    raise StatecatError(
        f"a lake's tables need Delta Lake in Spark: {reason}",
        hint="Connect to Maven Central once (the jars are kept in ~/.cache/statecat), or query the lake "
        "with DuckDB or deltalake",
    )


def attach_lake(spark: SparkSession, lake: str, database: str | None = None) -> tuple[str, list[str]]:
    """Registers the lake's tables in database ``database`` (default: the lake directory's name);
    returns (database, tables registered now)."""
    uri = normalise_lake(lake)
    check_lake(uri)
    check_delta(spark)
    name = database or lake_database_name(uri)
    if spark.catalog.databaseExists(name):
        current = lake_of(spark, name)
        if current is None or normalise_lake(current) != uri:
            raise LookupFailedError(
                f"the database {name!r} already exists"
                + (f" for the lake {current}" if current else " and is not a lake's"),
                hint="Choose another name with --database NAME",
            )
    else:
        comment = sql_string(f"statecat lake {uri}")
        spark.sql(
            f"CREATE DATABASE IF NOT EXISTS `{name}` COMMENT {comment} "
            f"WITH DBPROPERTIES ({sql_string(PROPERTY_LAKE)} = {sql_string(uri)})"
        )
    return name, sync_lake(spark, name, uri)


def sync_lake(spark: SparkSession, database: str, uri: str) -> list[str]:
    """Registers the lake's tables the database does not have yet; returns their names."""
    existing = {t.name for t in spark.catalog.listTables(database)}
    added = []
    for table, location in lake_tables(uri).items():
        if table in existing:
            continue
        try:
            spark.sql(f"CREATE TABLE IF NOT EXISTS `{database}`.`{table}` USING delta LOCATION {sql_string(location)}")
        except Exception as exc:
            # Another process (an attach and the server's poll) created it between Spark's check and
            # the metastore's create: IF NOT EXISTS does not cover that race.
            if "AlreadyExists" not in str(exc) or not spark.catalog.tableExists(f"`{database}`.`{table}`"):
                raise
            continue
        added.append(table)
    return added


def lake_of(spark: SparkSession, database: str) -> str | None:
    """The lake a database was attached from, or None for any other database."""
    return database_properties(spark, database).get(PROPERTY_LAKE)


def sync_lake_database(spark: SparkSession, database: str, uri: str) -> list[str]:
    """``sync_lake``, where the lake's storage may be unreachable now: its registered tables still answer
    or say why."""
    try:
        return sync_lake(spark, database, uri)
    except OSError as exc:
        log.warning("cannot list the lake %s of %s: %s", uri, database, exc)
        return []
