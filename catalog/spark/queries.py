"""Running SQL over attached savepoints: the databases a query names are materialised first.

The query is parsed with sqlglot's Spark dialect only to find the names it uses; Spark runs the text
as the user wrote it.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING

from statecat.catalog.spark.databases import materialise
from statecat.catalog.spark.discovery import REGISTRY_DATABASE
from statecat.catalog.spark.registry import (
    PROPERTY_LAKE,
    PROPERTY_SAVEPOINT,
    database_properties,
    existing_databases,
    registered,
)
from statecat.statemeta.errors import LookupFailedError, StatecatError, did_you_mean

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from sqlglot import exp

log = logging.getLogger("statecat.catalog")


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


def _command_databases(statement: exp.Command) -> set[str]:
    # SHOW TABLES IN db, SHOW COLUMNS IN db.t: sqlglot keeps these as raw commands.
    text = statement.sql(dialect="spark")
    if not text.upper().startswith("SHOW"):
        return set()
    return {m.group(1).lower() for m in _SHOW_IN.finditer(text)}


def prepare(spark: SparkSession, query: str) -> list[str]:
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
    from statecat.catalog.spark.relocation import is_missing, missing_error

    missing = {d for d in databases if not spark.catalog.databaseExists(d)}
    for database in sorted(databases - missing - {REGISTRY_DATABASE}):
        properties = database_properties(spark, database)
        path = properties.get(PROPERTY_SAVEPOINT)
        if path is not None and is_missing(path):
            raise missing_error(path, database)
        if PROPERTY_LAKE in properties:  # a lake's database: its state tables materialized since are registered first
            from statecat.catalog.spark.lakes import sync_lake_database

            sync_lake_database(spark, database, properties[PROPERTY_LAKE])
    created = []
    if missing:
        known = registered(spark)
        by_name = {name: path for path, name in known.items()}
        for database in sorted(missing):
            if database not in by_name:
                raise LookupFailedError(
                    f"unknown savepoint database {database!r}",
                    hint=did_you_mean(database, list(by_name) + sorted(existing_databases(spark)))
                    + " Attach savepoints with `statecat attach ROOT`; `SELECT * FROM statecat.savepoints` lists them",
                )
            if is_missing(by_name[database]):
                raise missing_error(by_name[database], database)
            materialise(spark, database, by_name[database])
            created.append(database)
    for database, table in sorted(tables):
        if database == REGISTRY_DATABASE or not _is_savepoint_database(spark, database):
            continue
        if not spark.catalog.tableExists(f"`{database}`.`{table}`"):
            names = [t.name for t in spark.catalog.listTables(database)]
            raise LookupFailedError(
                f"unknown state table {table!r} in savepoint database {database!r} ({_savepoint_of(spark, database)})",
                hint=did_you_mean(table, names) + f" `SELECT * FROM {database}.state_meta` lists its states",
            )
    return created


def _is_savepoint_database(spark: SparkSession, database: str) -> bool:
    return _savepoint_of(spark, database) is not None


def _savepoint_of(spark: SparkSession, database: str) -> str | None:
    return database_properties(spark, database).get(PROPERTY_SAVEPOINT)


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
            statements.append(query[start : token.start])
            start = token.end + 1
    statements.append(query[start:])
    return [s.strip() for s in statements if s.strip()]


def sql(spark: SparkSession, query: str) -> DataFrame:
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


def kryo_notes(spark: SparkSession, query: str) -> list[str]:
    """Why Kryo values of the state tables a query names print as bytes (the job's classes were
    not given), one line per reason, for the CLI's stderr."""
    from sqlglot.errors import SqlglotError

    from statecat.catalog.spark.tables import ref_from_schema
    from statecat.statemeta.descriptors import with_classpath
    from statecat.statemeta.java.kryo import kryo_notes as state_notes
    from statecat.statemeta.model import load_state_meta

    try:
        _, tables = referenced_databases(query)
    except SqlglotError:
        return []
    notes: list[str] = []
    for database, table in sorted(tables):
        if database == REGISTRY_DATABASE or not _is_savepoint_database(spark, database):
            continue
        try:
            ref = ref_from_schema(spark.table(f"`{database}`.`{table}`").schema)
            if ref is None or ref.kind != "state" or ref.state is None:
                continue
            meta = load_state_meta(ref.savepoint, descriptors=with_classpath(ref.descriptors, ref.classpath))
            _, state = meta.find_state(ref.state, ref.operator)
        except (StatecatError, Exception) as exc:  # noqa: BLE001 - a note is best effort; the query already answered
            log.debug("no Kryo note for %s.%s: %s", database, table, exc)
            continue
        notes += [f"{database}.{table}: shown as bytes: {note}" for note in state_notes(state)]
    return list(dict.fromkeys(notes))
