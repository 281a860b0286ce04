"""Savepoints as databases in Spark's session catalog (the Hive metastore: embedded Derby by default).

    import statecat
    spark = statecat.catalog.session()                 # Spark Connect to the home's server, Hive catalog, pushdown
    statecat.attach(spark, ["/savepoints"])            # every savepoint under the roots
    statecat.catalog.sql(spark, "SELECT * FROM my_job.accstate WHERE key = 'k'")

Attaching has two steps. *Registering* reads each savepoint's ``_metadata`` (never its state) and
appends one row per new savepoint to the catalog-wide table ``statecat.savepoints`` (see
``registry``), which also fixes the savepoint's database name. *Materialising* creates the database
and its tables (stream headers are read for the types, state data still is not). Small attaches do
both; large ones (more than ``EAGER_LIMIT`` new savepoints) only register, and
``statecat.catalog.sql`` materialises the databases a query names (see ``queries``) just before
running it. ``attach(..., eager=True)`` materialises everything.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import posixpath
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from statecat.catalog.spark.discovery import discover_savepoints, normalise_path, readable_name, unique_name
from statecat.catalog.spark.registry import (
    PROPERTY_SAVEPOINT,
    SavepointRecord,
    append_records,
    ensure_registry,
    existing_databases,
    read_record,
    registry_records,
)
from statecat.catalog.spark.tables import create_table, savepoint_tables, spark_schema
from statecat.statemeta.errors import LookupFailedError, StatecatError
from statecat.statemeta.files.storage import METADATA_FILE

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import SparkSession

ATTACH_COLUMNS = ("database", "savepoint", "status", "error")
EAGER_LIMIT = 20  # about 1-2 s per savepoint on Derby; beyond this attach only registers

log = logging.getLogger("statecat.catalog")


@dataclass(frozen=True)
class AttachResult:
    registered: list[SavepointRecord]  # newly registered by this call
    known: list[str]  # databases of savepoints that were registered before
    materialised: list[str]  # databases created (or completed) by this call
    failed: list[tuple[str, str]]  # (savepoint path, error) of savepoints that could not be attached
    seconds: float = 0.0

    def rows(self) -> list[tuple[str, str, str, str]]:
        """One row per savepoint this attach saw (``ATTACH_COLUMNS``): newly registered, already known,
        materialised, failed."""
        materialised = set(self.materialised)
        rows = [
            (r.database, r.path, "registered, materialised" if r.database in materialised else "registered", "")
            for r in self.registered
        ]
        registered = {r.database for r in self.registered}
        rows += [(name, "", "known, materialised" if name in materialised else "known", "") for name in self.known]
        rows += [
            (name, "", "materialised", "")
            for name in self.materialised
            if name not in registered and name not in self.known
        ]
        rows += [("", path, "failed", error) for path, error in self.failed]
        return rows

    def to_pandas(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame(self.rows(), columns=list(ATTACH_COLUMNS))

    def _repr_html_(self) -> str:  # notebooks' rich display, as StateMeta's (statemeta.html)
        from statecat.statemeta.html import block, table

        summary = (
            f"<div><b>attach</b>: {len(self.registered)} registered, {len(self.known)} already known, "
            f"{len(self.materialised)} materialised, {len(self.failed)} failed "
            f'<span class="note">in {self.seconds:.1f} s</span></div>'
        )
        return block(summary + table(ATTACH_COLUMNS, self.rows()))


def attach(
    spark: SparkSession,
    roots: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    *,
    eager: bool | None = None,
) -> AttachResult:
    """Registers every savepoint under ``roots`` (a path or a list), each as a database.

    ``eager=None`` materialises the databases when at most ``EAGER_LIMIT`` savepoints are new,
    ``True`` always, ``False`` never (they are then created by ``statecat.catalog.sql`` on first use).
    """
    import time

    started = time.perf_counter()
    if isinstance(roots, (str, os.PathLike)):
        roots = [roots]
    from statecat.catalog.spark.relocation import moved_record, relocate

    ensure_registry(spark)
    records = registry_records(spark)
    known = {r.path: r.database for r in records}
    taken = set(known.values()) | existing_databases(spark)
    attached_at = dt.datetime.now(dt.UTC)
    new: list[SavepointRecord] = []
    again: list[str] = []
    failed: list[tuple[str, str]] = []
    moves: list[tuple[str, str]] = []  # (recorded path, new path) of registered savepoints found moved
    for root in roots:
        root, paths = savepoints_under(root)
        for path in paths:
            if path in known:
                again.append(known[path])
                continue
            name = unique_name(path, readable_name(path, root if path != root else None), taken)
            try:
                record = read_record(path, name, attached_at)
            except StatecatError as exc:
                # One damaged savepoint must not keep the thousands next to it out of the catalog.
                failed.append((path, str(exc)))
                continue
            moved = moved_record(records, record)
            if moved is not None:  # the savepoint keeps its database at its new path
                moves.append((moved.path, path))
                known[path] = moved.database
                again.append(moved.database)
                continue
            taken.add(name)
            known[path] = name
            new.append(record)
    if new:
        append_records(spark, new)
    for old, path in moves:
        try:
            relocate(spark, old, path)
        except StatecatError as exc:
            failed.append((path, str(exc)))
    from statecat.catalog.spark.catalog_views import ensure_catalog_views

    ensure_catalog_views(spark)  # statecat.states / .operators, pointed at the registry as it is now
    if eager is None:
        eager = len(new) <= EAGER_LIMIT
    materialised = []
    if eager:
        existing = existing_databases(spark)
        database_paths = {name: path for path, name in known.items()}
        for database in [r.database for r in new] + [d for d in again if d not in existing]:
            try:
                materialise(spark, database, database_paths[database])
                materialised.append(database)
            except StatecatError as exc:
                failed.append((database_paths[database], str(exc)))
    for path, error in failed:
        log.warning("could not attach %s: %s", path, error)
    return AttachResult(new, again, materialised, failed, time.perf_counter() - started)


def savepoints_under(root: str | os.PathLike[str]) -> tuple[str, list[str]]:
    """``(root as attach records it, the savepoint directories under it)``; a root that does not
    exist or holds no savepoint is an error (no Spark needed: the CLI checks its roots first)."""
    root = normalise_path(str(root))
    if posixpath.basename(root) == METADATA_FILE:
        root = posixpath.dirname(root)
    paths = discover_savepoints(root)
    if not paths:
        raise LookupFailedError(f"no savepoint under {root}", hint="A savepoint is a directory holding _metadata")
    return root, paths


def materialise(
    spark: SparkSession, database: str, path: str, descriptors: str | None = None, classpath: Sequence[str] = ()
) -> list[str]:
    """Creates the savepoint's database and its tables (those missing); returns the table names.

    ``descriptors`` (a descriptor file's absolute path) and ``classpath`` (the job's JARs and class
    directories, absolute) are applied to the StateMeta and kept in every table's reference, so
    that the Spark workers reading the table apply them too."""
    from statecat.statemeta.descriptors import with_classpath
    from statecat.statemeta.model import load_state_meta

    meta = load_state_meta(path, descriptors=with_classpath(descriptors, classpath))
    comment = _sql_string(f"Flink savepoint {path} (checkpoint {meta.checkpoint_id})")
    spark.sql(
        f"CREATE DATABASE IF NOT EXISTS `{database}` COMMENT {comment} "
        f"WITH DBPROPERTIES ({_sql_string(PROPERTY_SAVEPOINT)} = {_sql_string(path)})"
    )
    existing = {t.name for t in spark.catalog.listTables(database)}
    names = []
    for table in savepoint_tables(meta, descriptors, tuple(classpath)):
        if table.name not in existing:
            try:
                schema = spark_schema(table.ref, meta)
            except (TypeError, ValueError) as exc:
                # A type with no Spark column: the rest of the savepoint stays queryable, state_meta lists it.
                log.warning("no table for %s: %s", table.ref.describe(), exc)
                continue
            create_table(spark, f"`{database}`.`{table.name}`", schema, table.comment)
        names.append(table.name)
    return names


def attach_with_descriptors(
    spark: SparkSession,
    roots: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    descriptors: str | None,
    classpath: Sequence[str] = (),
) -> AttachResult:
    """``attach`` with a descriptor file and/or the job's classpath: each savepoint's database and
    tables come from its StateMeta with them applied, and every table's TableRef carries the file's
    absolute path and the classpath, so the Spark workers that read the table apply them too.
    Tables that already exist are kept as they are (`statecat detach` first to re-create a database
    with other declarations)."""
    from statecat.statemeta.descriptors import load_descriptors

    path = os.path.abspath(descriptors) if descriptors else None
    if path is not None:
        load_descriptors(path)  # a bad file fails before anything is registered
    classpath = [os.path.abspath(entry) for entry in classpath]
    result = attach(spark, roots, eager=False)
    wanted = {r.database for r in result.registered} | set(result.known)
    for record in registry_records(spark):
        if record.database not in wanted:
            continue
        try:
            materialise(spark, record.database, record.path, path, classpath)
            result.materialised.append(record.database)
        except StatecatError as exc:
            result.failed.append((record.path, str(exc)))
    return result


def _sql_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
