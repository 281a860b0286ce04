"""Savepoints as databases in Spark's session catalog (the Hive metastore: embedded Derby by default).

    import statecat
    spark = statecat.catalog.session()                 # local Spark, Hive catalog, pushdown on
    statecat.attach(spark, ["/savepoints"])            # every savepoint under the roots
    statecat.catalog.sql(spark, "SELECT * FROM my_job.groupaggregate_3__accstate WHERE key = 'k'")

Attaching has two steps. *Registering* reads each savepoint's ``_metadata`` (never its state) and
appends one row per new savepoint to the catalog-wide table ``statecat.savepoints``, which also fixes
the savepoint's database name. *Materialising* creates the database and its tables (stream headers
are read for the types, state data still is not). Small attaches do both; large ones (more than
``EAGER_LIMIT`` new savepoints) only register, and ``statecat.catalog.sql`` materialises the
databases a query names (found with sqlglot) just before running it. ``attach(..., eager=True)``
materialises everything.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import os
import posixpath
import re
import sys
from dataclasses import dataclass

from statecat.catalog.tables import SOURCE_NAME, savepoint_tables, spark_schema
from statecat.statemeta.errors import LookupFailedError, StatecatError, did_you_mean
from statecat.statemeta.storage import METADATA_FILE

REGISTRY_DATABASE = "statecat"
REGISTRY_TABLE = f"{REGISTRY_DATABASE}.savepoints"
EAGER_LIMIT = 20  # about 1-2 s per savepoint on Derby; beyond this attach only registers
MAX_DATABASE_NAME = 100
# Directory names that say nothing about the savepoint; the database is named after their parent.
GENERIC_DIR_NAMES = {"savepoint", "savepoints", "checkpoint", "checkpoints", "state"}
PROPERTY_SAVEPOINT = "statecat.savepoint"

REGISTRY_COLUMNS = (
    "`database` STRING, path STRING, checkpoint_id BIGINT, time TIMESTAMP, size_bytes BIGINT, "
    "flink_version STRING, metadata_version INT, checkpoint_type STRING, savepoint_format STRING, "
    "operators INT, attached_at TIMESTAMP"
)

log = logging.getLogger("statecat.catalog")


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


@dataclass(frozen=True)
class AttachResult:
    registered: list[SavepointRecord]  # newly registered by this call
    known: list[str]  # databases of savepoints that were registered before
    materialised: list[str]  # databases created (or completed) by this call
    failed: list[tuple[str, str]]  # (savepoint path, error) of savepoints that could not be attached
    seconds: float = 0.0


# ----------------------------------------------------------------------------- sessions

def session(home: str | None = None, *, master: str = "local[2]", app_name: str = "statecat",
            conf: dict | None = None):
    """A Spark session with the Hive catalog, statecat's data source and filter pushdown on.

    ``home`` holds the embedded Derby metastore (``metastore_db``), the warehouse and ``derby.log``;
    by default Spark's own choice, the working directory, so that ``spark-sql`` started in the same
    place sees the attached savepoints. A ``hive-site.xml`` on Spark's conf path (a real Hive
    metastore) is used as is when ``home`` is not given.
    """
    from pyspark.sql import SparkSession

    # Spark's Python workers must import statecat: use this interpreter unless told otherwise.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (SparkSession.builder.master(master).appName(app_name).enableHiveSupport()
               .config("spark.sql.python.filterPushdown.enabled", "true")
               .config("spark.ui.enabled", "false"))
    if home is not None:
        home = os.path.abspath(home)
        os.makedirs(home, exist_ok=True)
        builder = (builder
                   .config("spark.sql.warehouse.dir", os.path.join(home, "spark-warehouse"))
                   .config("spark.hadoop.javax.jdo.option.ConnectionURL",
                           f"jdbc:derby:;databaseName={os.path.join(home, 'metastore_db')};create=true")
                   .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={home}"))
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


# ----------------------------------------------------------------------------- discovery and naming

def discover_savepoints(root: str) -> list[str]:
    """Savepoint directories (holding ``_metadata``) at or under ``root``, sorted; never descends into one."""
    if "://" in root:
        return _discover_remote(root)
    root = os.path.abspath(root)
    if os.path.isfile(root) and os.path.basename(root) == METADATA_FILE:
        return [os.path.dirname(root)]
    if not os.path.isdir(root):
        from statecat.statemeta.errors import SavepointNotFoundError

        raise SavepointNotFoundError("no such directory", file=root,
                                     hint="Give a savepoint directory or a directory holding savepoints")
    found = []
    stack = [root]
    while stack:
        directory = stack.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError as exc:
            log.warning("skipping %s: %s", directory, exc)
            continue
        if any(e.name == METADATA_FILE and e.is_file() for e in entries):
            found.append(directory)
            continue
        stack.extend(e.path for e in entries if e.is_dir(follow_symlinks=False) and not e.name.startswith("."))
    return sorted(found)


def _discover_remote(root: str) -> list[str]:
    import pyarrow.fs as pafs

    filesystem, inner = pafs.FileSystem.from_uri(root)
    scheme_prefix = root[: len(root) - len(root.split("://", 1)[1])]
    inner = inner.rstrip("/")
    infos = filesystem.get_file_info(pafs.FileSelector(inner, recursive=True, allow_not_found=True))
    directories = sorted({posixpath.dirname(i.path) for i in infos
                          if i.type == pafs.FileType.File and posixpath.basename(i.path) == METADATA_FILE})
    # A savepoint's own subdirectories never hold another _metadata; keep the outermost anyway.
    outer = [d for d in directories if not any(d != o and d.startswith(o + "/") for o in directories)]
    return [scheme_prefix + d for d in outer]


def readable_name(path: str, root: str | None = None) -> str:
    """A database name from the savepoint's path relative to the attach root (or its own name)."""
    path = path.rstrip("/")
    parts = []
    if root is not None:
        rel = posixpath.relpath(path, root.rstrip("/")) if "://" not in path else path[len(root.rstrip("/")):]
        parts = [p for p in rel.split("/") if p not in ("", ".")]
    if not parts:
        parts = [posixpath.basename(path)]
    if parts[-1].lower() in GENERIC_DIR_NAMES:
        parts = parts[:-1] or [posixpath.basename(posixpath.dirname(path)) or "savepoint"]
    from statecat.statemeta.model import sql_name

    name = sql_name("_".join(parts))
    if not name[0].isalpha():
        name = f"sp_{name}"
    if name == REGISTRY_DATABASE:
        name = f"{name}_savepoint"
    return name[:MAX_DATABASE_NAME]


def unique_name(path: str, readable: str, taken: set[str]) -> str:
    """``readable``, or with a short hash of the path when another savepoint (or database) has it."""
    if readable not in taken:
        return readable
    return f"{readable[:MAX_DATABASE_NAME - 9]}_{hashlib.sha1(path.encode()).hexdigest()[:8]}"


def normalise_path(path: str) -> str:
    return path.rstrip("/") if "://" in path else os.path.abspath(path)


# ----------------------------------------------------------------------------- registry

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


def _existing_databases(spark) -> set[str]:
    return {row[0] for row in spark.sql("SHOW DATABASES").collect()}


# ----------------------------------------------------------------------------- attach

def attach(spark, roots, *, eager: bool | None = None) -> AttachResult:
    """Registers every savepoint under ``roots`` (a path or a list), each as a database.

    ``eager=None`` materialises the databases when at most ``EAGER_LIMIT`` savepoints are new,
    ``True`` always, ``False`` never (they are then created by ``statecat.catalog.sql`` on first use).
    """
    import time

    started = time.perf_counter()
    if isinstance(roots, (str, os.PathLike)):
        roots = [roots]
    ensure_registry(spark)
    known = registered(spark)
    taken = set(known.values()) | _existing_databases(spark)
    attached_at = dt.datetime.now(dt.UTC)
    new: list[SavepointRecord] = []
    again: list[str] = []
    failed: list[tuple[str, str]] = []
    for root in roots:
        root = normalise_path(str(root))
        if posixpath.basename(root) == METADATA_FILE:
            root = posixpath.dirname(root)
        paths = discover_savepoints(root)
        if not paths:
            raise LookupFailedError(f"no savepoint under {root}", hint="A savepoint is a directory holding _metadata")
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
            taken.add(name)
            known[path] = name
            new.append(record)
    if new:
        _append_records(spark, new)
    if eager is None:
        eager = len(new) <= EAGER_LIMIT
    materialised = []
    if eager:
        existing = _existing_databases(spark)
        paths = {name: path for path, name in known.items()}
        for database in [r.database for r in new] + [d for d in again if d not in existing]:
            try:
                materialise(spark, database, paths[database])
                materialised.append(database)
            except StatecatError as exc:
                failed.append((paths[database], str(exc)))
    for path, error in failed:
        log.warning("could not attach %s: %s", path, error)
    return AttachResult(new, again, materialised, failed, time.perf_counter() - started)


def _append_records(spark, records: list[SavepointRecord]) -> None:
    schema = spark.table(REGISTRY_TABLE).schema
    spark.createDataFrame([r.row() for r in records], schema).write.insertInto(REGISTRY_TABLE)


def materialise(spark, database: str, path: str) -> list[str]:
    """Creates the savepoint's database and its tables (those missing); returns the table names."""
    from statecat.statemeta.model import load_state_meta

    meta = load_state_meta(path)
    comment = _sql_string(f"Flink savepoint {path} (checkpoint {meta.checkpoint_id})")
    spark.sql(f"CREATE DATABASE IF NOT EXISTS `{database}` COMMENT {comment} "
              f"WITH DBPROPERTIES ({_sql_string(PROPERTY_SAVEPOINT)} = {_sql_string(path)})")
    existing = {t.name for t in spark.catalog.listTables(database)}
    names = []
    for table in savepoint_tables(meta):
        if table.name not in existing:
            try:
                schema = spark_schema(table.ref, meta)
            except (TypeError, ValueError) as exc:
                # A type with no Spark column: the rest of the savepoint stays queryable, state_meta lists it.
                log.warning("no table for %s: %s", table.ref.describe(), exc)
                continue
            spark.catalog.createTable(f"`{database}`.`{table.name}`", source=SOURCE_NAME, schema=schema,
                                      description=table.comment)
        names.append(table.name)
    return names


def _sql_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


# ----------------------------------------------------------------------------- queries

def referenced_databases(query: str) -> tuple[set[str], set[tuple[str, str]]]:
    """Databases, and (database, table) pairs, a query names; parsed with sqlglot's Spark dialect."""
    import sqlglot
    from sqlglot import exp

    logging.getLogger("sqlglot").setLevel(logging.ERROR)
    databases: set[str] = set()
    tables: set[tuple[str, str]] = set()
    for statement in sqlglot.parse(query, read="spark"):
        if statement is None:
            continue
        if isinstance(statement, exp.Use):
            databases.add(statement.this.name.lower())
            continue
        if isinstance(statement, exp.Command):
            databases |= _command_databases(statement)
            continue
        ctes = {c.alias_or_name.lower() for c in statement.find_all(exp.CTE)}
        for table in statement.find_all(exp.Table):
            if table.db and (table.catalog in ("", "spark_catalog")):
                databases.add(table.db.lower())
                tables.add((table.db.lower(), table.name.lower()))
            elif not table.db and table.name.lower() in ctes:
                continue
    return databases, tables


_SHOW_IN = re.compile(r"\b(?:IN|FROM)\s+`?([A-Za-z0-9_]+)`?", re.IGNORECASE)


def _command_databases(statement) -> set[str]:
    # SHOW TABLES IN db, SHOW COLUMNS IN db.t: sqlglot keeps these as raw commands.
    text = statement.sql(dialect="spark")
    if not text.upper().startswith("SHOW"):
        return set()
    return {m.group(1).lower() for m in _SHOW_IN.finditer(text)}


def prepare(spark, query: str) -> list[str]:
    """Materialises the registered savepoint databases the query names; checks the names it uses.

    Returns the databases it created. Unknown databases and tables of savepoint databases raise
    ``LookupFailedError`` with the known names; other names are left to Spark.
    """
    from sqlglot.errors import SqlglotError

    try:
        databases, tables = referenced_databases(query)
    except SqlglotError as exc:  # sqlglot cannot parse every Spark statement; Spark will say what is wrong
        log.debug("sqlglot could not parse the query (%s); nothing attached lazily", exc)
        return []
    missing = {d for d in databases if not spark.catalog.databaseExists(d)}
    created = []
    if missing:
        known = registered(spark)
        by_name = {name: path for path, name in known.items()}
        for database in sorted(missing):
            if database not in by_name:
                raise LookupFailedError(
                    f"unknown savepoint database {database!r}",
                    hint=did_you_mean(database, list(by_name) + sorted(_existing_databases(spark)))
                    + " Attach savepoints with `statecat attach ROOT`; `SELECT * FROM statecat.savepoints` lists them")
            materialise(spark, database, by_name[database])
            created.append(database)
    for database, table in sorted(tables):
        if database == REGISTRY_DATABASE or not _is_savepoint_database(spark, database):
            continue
        if not spark.catalog.tableExists(f"`{database}`.`{table}`"):
            names = [t.name for t in spark.catalog.listTables(database)]
            raise LookupFailedError(
                f"unknown state table {table!r} in savepoint database {database!r} ({_savepoint_of(spark, database)})",
                hint=did_you_mean(table, names) + f" `SELECT * FROM {database}.state_meta` lists its states")
    return created


def _is_savepoint_database(spark, database: str) -> bool:
    return _savepoint_of(spark, database) is not None


def _savepoint_of(spark, database: str) -> str | None:
    try:
        rows = spark.sql(f"DESCRIBE DATABASE EXTENDED `{database}`").collect()
    except Exception:  # noqa: BLE001 - a database Spark cannot describe is not one of ours
        return None
    for row in rows:
        if row[0] == "Properties" and PROPERTY_SAVEPOINT in row[1]:
            match = re.search(re.escape(PROPERTY_SAVEPOINT) + r",(.*?)\)", row[1])
            return match.group(1) if match else row[1]
    return None


def split_statements(query: str) -> list[str]:
    """The query's statements as the user wrote them, split at top-level semicolons."""
    from sqlglot.tokens import Tokenizer, TokenType

    try:
        tokens = Tokenizer().tokenize(query)
    except Exception:  # noqa: BLE001 - unknown syntax: leave the text whole for Spark to judge
        return [query.strip().rstrip(";")]
    statements, start = [], 0
    for token in tokens:
        if token.token_type == TokenType.SEMICOLON:
            statements.append(query[start:token.start])
            start = token.end + 1
    statements.append(query[start:])
    return [s.strip() for s in statements if s.strip()]


def sql(spark, query: str):
    """Runs Spark SQL (one statement or several separated by ``;``) after attaching what it names.

    Returns the DataFrame of the last statement.
    """
    prepare(spark, query)
    result = None
    for statement in split_statements(query):
        result = spark.sql(statement)
    if result is None:
        raise StatecatError("the query is empty")
    return result


__all__ = [
    "EAGER_LIMIT",
    "REGISTRY_TABLE",
    "AttachResult",
    "SavepointRecord",
    "attach",
    "discover_savepoints",
    "materialise",
    "prepare",
    "readable_name",
    "referenced_databases",
    "session",
    "split_statements",
    "sql",
]
