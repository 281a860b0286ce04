"""``statecat sql`` through a running ``statecat serve`` without Spark Connect (``--connect-port 0``):
a HiveServer2 client, no Spark in this process.

A query sent there answers in about a second instead of starting Spark. The local path still runs it when the query
needs what only it does: creating a database registered lazily (``queries.prepare``), or naming a
database or state table the catalog does not have (its error names the known ones). Values arrive
as HiveServer2 sends them (structs, maps and arrays as text) and are turned back into the values the
local path prints.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any

from statecat.catalog.servers.thrift_server import ServerInfo
from statecat.statemeta.errors import StatecatError

if TYPE_CHECKING:
    from pyhive.hive import Cursor

# Modes in which the server takes any user name without a password, as this client connects.
OPEN_AUTH_MODES = ("none", "nosasl")
COMPLEX_TYPES = ("STRUCT_TYPE", "MAP_TYPE", "ARRAY_TYPE")
_SERVER_ERROR_PREFIX = re.compile(
    r"^(?:Error running query:\s*)?(?:\[[A-Z0-9_.]+\]\s*)?(?:[\w$]+\.)+\w*(?:Exception|Error):\s*"
)

log = logging.getLogger("statecat.catalog")


class ServerQueryError(StatecatError):
    """The server rejected the query or failed running it."""


def query_server(info: ServerInfo, query: str, limit: int | None = None) -> tuple[list[str], list[list]] | None:
    """(columns, rows as json_value gives them) of the query's last statement, run on the server.

    None when the local path must run it (see the module doc) or the server cannot be reached.
    """
    from pyhive import hive
    from thrift.transport.TTransport import TTransportException

    try:
        connection = hive.connect(host=info.connect_host, port=info.port, auth=info.auth.upper())
    except (TTransportException, OSError) as exc:  # stopped since serve.json was read
        log.debug("server %s unreachable (%s); running locally", info.url, exc)
        return None
    try:
        return _run(connection.cursor(), query, limit)
    except (TTransportException, OSError) as exc:
        raise ServerQueryError(
            f"lost the connection to {info.url}: {exc}", hint="Was `statecat serve` stopped? Run the query again"
        ) from None
    finally:
        connection.close()


def _run(cursor: Cursor, query: str, limit: int | None) -> tuple[list[str], list[list]] | None:
    if not _catalog_has_names(cursor, query):
        return None
    from statecat.catalog.spark.queries import split_statements

    statements = split_statements(query)
    if not statements:
        raise StatecatError("the query is empty")
    for statement in statements:
        _execute(cursor, statement)
    if cursor.description is None:  # a statement without a result (USE, SET, CREATE ...)
        return [], []
    columns = [d[0] for d in cursor.description]
    types = [d[1] for d in cursor.description]
    rows = cursor.fetchall() if limit is None else cursor.fetchmany(limit) if limit > 0 else []
    return columns, [[_value(v, t) for v, t in zip(row, types)] for row in rows]


def _catalog_has_names(cursor: Cursor, query: str) -> bool:
    """Whether every database and savepoint table the query names exists on the server."""
    from sqlglot.errors import SqlglotError

    from statecat.catalog.spark.discovery import REGISTRY_DATABASE
    from statecat.catalog.spark.queries import referenced_databases

    try:
        databases, tables = referenced_databases(query)
    except SqlglotError:
        return True  # as the local path: the names are left to Spark
    if databases:
        _execute(cursor, "SHOW DATABASES LIKE '" + "|".join(sorted(databases)) + "'")
        if {row[0].lower() for row in cursor.fetchall()} != databases:
            return False  # registered lazily (the local path creates it) or unknown (it says which exist)
    for database, table in sorted(tables):
        if database == REGISTRY_DATABASE:
            continue
        _execute(cursor, f"SHOW TABLES IN `{database}` LIKE '{table}'")
        if not cursor.fetchall():
            return False
    return True


def _execute(cursor: Cursor, statement: str) -> None:
    from pyhive.exc import DatabaseError

    try:
        cursor.execute(statement)
    except DatabaseError as exc:
        raise ServerQueryError(server_error_message(exc)) from None


def server_error_message(exc: BaseException) -> str:
    """The line of a server-side error a user acts on, as ``catalog.spark.errors`` picks it for a local query."""
    from statecat.catalog.spark.errors import QUERY_ERROR_MARKER

    status = getattr(exc.args[0], "status", None) if exc.args else None
    text = getattr(status, "errorMessage", None) or str(exc)
    if QUERY_ERROR_MARKER in text:
        return text[text.rindex(QUERY_ERROR_MARKER) + len(QUERY_ERROR_MARKER) :].splitlines()[0].strip()
    # "Error running query: [CONDITION] org.apache...SomeException: [CONDITION] message": keep the message.
    text = _SERVER_ERROR_PREFIX.sub("", text.strip())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("\tat ")]
    return lines[0] if lines else type(exc).__name__


def _value(value: Any, type_code: str) -> Any:
    from statecat.catalog.render import json_value

    if type_code in COMPLEX_TYPES and isinstance(value, str):
        try:
            value = parse_hive_text(value)
        except ValueError:
            pass  # shown as the server sent it
    return json_value(value)


def parse_hive_text(text: str) -> Any:
    """A struct, map or array as Spark's Thrift server writes it: JSON, except that a map's keys may be
    any value (``{1:"a"}``) and strings are not escaped. Objects become lists of (key, value) pairs,
    which ``json_value`` turns into objects (text keys) or ``[key, value]`` lists, as for local results."""
    value, end = _parse(text, 0)
    if text[end:].strip():
        raise ValueError(f"trailing text at {end}")
    return value


_NUMBER = re.compile(r"-?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|Infinity)|NaN")
_CLOSERS = ",:}]"


def _parse(text: str, i: int) -> tuple[Any, int]:
    i = _skip(text, i)
    if i >= len(text):
        raise ValueError("unexpected end")
    char = text[i]
    if char == "{":
        pairs, i = [], _skip(text, i + 1)
        if text[i : i + 1] == "}":
            return {}, i + 1
        while True:
            key, i = _parse(text, i)
            i = _skip(text, i)
            if text[i : i + 1] != ":":
                raise ValueError(f"expected ':' at {i}")
            value, i = _parse(text, i + 1)
            pairs.append((key, value))
            i = _skip(text, i)
            if text[i : i + 1] == "}":
                return pairs, i + 1
            if text[i : i + 1] != ",":
                raise ValueError(f"expected ',' at {i}")
            i += 1
    if char == "[":
        items, i = [], _skip(text, i + 1)
        if text[i : i + 1] == "]":
            return [], i + 1
        while True:
            item, i = _parse(text, i)
            items.append(item)
            i = _skip(text, i)
            if text[i : i + 1] == "]":
                return items, i + 1
            if text[i : i + 1] != ",":
                raise ValueError(f"expected ',' at {i}")
            i += 1
    if char == '"':
        # Unescaped: the string ends at the first quote followed by a delimiter or the end.
        end = i + 1
        while True:
            end = text.find('"', end)
            if end < 0:
                raise ValueError("unterminated string")
            rest = _skip(text, end + 1)
            if rest >= len(text) or text[rest] in _CLOSERS:
                return text[i + 1 : end], end + 1
            end += 1
    for word, value in (("null", None), ("true", True), ("false", False)):
        if text.startswith(word, i):
            return value, i + len(word)
    match = _NUMBER.match(text, i)
    if match is None:
        raise ValueError(f"unexpected {char!r} at {i}")
    token = match.group()
    if re.fullmatch(r"-?\d+", token):
        return int(token), match.end()
    return float(token), match.end()


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\n\r":
        i += 1
    return i
