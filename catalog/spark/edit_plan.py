"""State edits understood before anything runs: sqlglot parses each statement with Spark's dialect
and checks it against SRC's tables; Spark evaluates it (catalog/spark/edit_spark.py).

What is checked here, so that a mistake costs no Spark job and writes nothing: one statement per
string, its kind (UPDATE, DELETE, INSERT INTO, MERGE INTO), its target (a state table of SRC,
unqualified), the columns it assigns (with "Did you mean"), whether the state can be written from
values at all. What is found here, so that Spark reads no more than it must: the key-groups a
statement can touch (``key = …``, ``key IN (…)`` in its WHERE) and where SRC's tables are named, so
the target can be pointed at its working copy. Expressions, types and functions are Spark's to judge.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from statecat.readers.codecs.arrow_types import state_schema
from statecat.statemeta.errors import StatecatError, did_you_mean
from statecat.statemeta.model import OperatorMeta, StateInfo, StateMeta
from statecat.statemeta.naming import catalog_table_names
from statecat.writers.entry_codec import EntryCodec

KEYED_KINDS = ("keyed", "timer")
OPERATOR_KINDS = ("operator_list", "union", "broadcast", "coordinator")
STATEMENT_KINDS = ("UPDATE", "DELETE", "INSERT", "MERGE")
# The columns a state table has (ttl_timestamp: states with TTL; subtask: operator states).
COLUMNS = ("key", "namespace", "value", "ttl_timestamp", "subtask")
HOW = "statecat write runs UPDATE t SET … WHERE …, DELETE FROM t WHERE …, INSERT INTO t VALUES … | SELECT … and MERGE INTO t USING …"


class EditError(StatecatError):
    """A statement statecat cannot run: not understood, not an edit of SRC's state, or refused by Spark."""


@dataclass(frozen=True)
class EditTable:
    """A state table of SRC as edits name it (the Spark catalog's name) and its columns."""

    name: str
    operator: OperatorMeta
    state: StateInfo
    columns: tuple[str, ...]

    @property
    def keyed(self) -> bool:
        return self.state.kind in KEYED_KINDS


@dataclass(frozen=True)
class TableSpan:
    """Where a statement names one of SRC's tables: character offsets [start, end) of the name."""

    start: int
    end: int
    table: str  # the EditTable's name, lower case
    aliased: bool  # the statement gives it an alias of its own


@dataclass
class PlannedStatement:
    """One statement, understood: its kind and target, where it names SRC's tables, and the keys
    its WHERE pins (``key_filter``: Spark SQL text; None: any row of the target may change)."""

    sql: str
    kind: str  # UPDATE | DELETE | INSERT | MERGE
    table: EditTable
    spans: tuple[TableSpan, ...]
    target: TableSpan  # where it names the table it edits
    alias: str  # the target's alias, else its name: how its columns may be qualified
    key_filter: str | None
    reads_target: bool  # its rows depend on the target's current rows (a pin narrows them)
    node: exp.Expr  # sqlglot's tree of it, parsed once
    matched: int = 0


def edit_tables(meta: StateMeta) -> dict[str, EditTable]:
    """The state tables of a savepoint by catalog name (lower case), with their columns."""
    names = catalog_table_names(meta).states
    tables: dict[str, EditTable] = {}
    for op in meta.operators:
        for state in op.states:
            name = names.get((op.id, state.name))
            if name is None:
                continue
            try:
                columns = state_columns(state)
            except TypeError:
                continue
            tables[name.lower()] = EditTable(name, op, state, columns)
    return tables


def state_columns(state: StateInfo) -> tuple[str, ...]:
    """The columns a state's table has, in the table's order (raises TypeError for a type Arrow lacks)."""
    return tuple(f.name for f in state_schema(state) if f.name in COLUMNS)


def plan_statements(meta: StateMeta, statements: Sequence[str]) -> list[PlannedStatement]:
    """Every statement understood against ``meta``'s tables, or an EditError naming what is not."""
    tables = edit_tables(meta)
    planned = []
    for sql in statements:
        try:
            planned.append(_plan(sql, tables, meta))
        except EditError as exc:
            if sql in exc.message:
                raise
            raise EditError(f"{exc.message} (in {sql!r})", hint=exc.hint) from None
    return planned


# ----------------------------------------------------------------------------- parsing

# sqlglot names a missing operand by the node it belongs to: "Required keyword: 'expression'
# missing for <class 'sqlglot.expressions.And'>". A user wrote SQL, not sqlglot's classes.
_MISSING_OPERAND = re.compile(r"Required keyword: '(\w+)' missing for <class 'sqlglot\.expressions\.(?:\w+\.)*(\w+)'>")
_OPERATOR_WORDS = {
    "And": "AND",
    "Or": "OR",
    "Not": "NOT",
    "EQ": "=",
    "NEQ": "<>",
    "GT": ">",
    "GTE": ">=",
    "LT": "<",
    "LTE": "<=",
    "Add": "+",
    "Sub": "-",
    "Mul": "*",
    "Div": "/",
    "Mod": "%",
    "In": "IN",
    "Like": "LIKE",
    "Is": "IS",
    "Where": "WHERE",
}


def _parse(sql: str) -> exp.Expr:
    try:
        parsed = sqlglot.parse(sql, read="spark")
    except ParseError as exc:
        first = exc.errors[0] if exc.errors else {}
        where = f" at line {first.get('line')}, column {first.get('col')}" if first.get("line") else ""
        raise EditError(f"cannot parse {sql!r}{where}: {_parse_reason(str(first.get('description', exc)))}") from None
    except TokenError as exc:
        raise EditError(f"cannot parse {sql!r}: {exc}") from None
    statements = [p for p in parsed if p is not None]
    if len(statements) != 1:
        raise EditError(f"expected one statement per --sql, got {len(statements)} in {sql!r}")
    statement = statements[0]
    missing = _missing_operand(statement)
    if missing is not None:
        raise EditError(f"cannot parse {sql!r}: {missing}")
    return statement


def _parse_reason(description: str) -> str:
    found = _MISSING_OPERAND.search(description)
    if found is None:
        return description
    word = _OPERATOR_WORDS.get(found.group(2), found.group(2).upper())
    return f"expected an expression after {word}"


def _missing_operand(statement: exp.Expr) -> str | None:
    """sqlglot accepts a dangling operator in some places ("… WHERE a = 1 AND"); Spark does not."""
    for node in statement.walk():
        if isinstance(node, exp.Connector | exp.Binary | exp.Where) and not isinstance(node, exp.Dot):
            for arg in ("this", "expression"):
                if arg in node.arg_types and node.arg_types[arg] and node.args.get(arg) is None:
                    word = _OPERATOR_WORDS.get(type(node).__name__, type(node).__name__.upper())
                    return f"expected an expression {'after' if arg == 'expression' else 'before'} {word}"
    return None


# ----------------------------------------------------------------------------- planning


def _plan(sql: str, tables: dict[str, EditTable], meta: StateMeta) -> PlannedStatement:
    node = _parse(sql)
    kinds = {exp.Update: "UPDATE", exp.Delete: "DELETE", exp.Insert: "INSERT", exp.Merge: "MERGE"}
    kind = next((k for t, k in kinds.items() if isinstance(node, t)), None)
    if kind is None:
        raise EditError(f"{node.key.upper()} statements cannot edit state: {sql!r}", hint=HOW)
    if isinstance(node, exp.Insert) and node.args.get("overwrite"):
        raise EditError(
            f"INSERT OVERWRITE would replace the whole state: {sql!r}",
            hint="DELETE FROM t first (it names what goes), then INSERT INTO t",
        )
    target = node.this.this if isinstance(node.this, exp.Schema) else node.this
    if not isinstance(target, exp.Table) or not isinstance(target.this, exp.Identifier):
        raise EditError(f"expected a table after {kind} in {sql!r}")
    table = _target_table(target, tables, sql)
    _check_editable(table, kind, meta)
    if isinstance(node, exp.Update):
        for assignment in node.expressions:
            if not isinstance(assignment, exp.EQ) or not isinstance(assignment.this, exp.Column | exp.Dot):
                raise EditError(f"expected column = expression in SET, got {assignment.sql(dialect='spark')!r}")
            _check_path(_column_path(assignment.this, table, target.alias_or_name), table, sql)
    if isinstance(node, exp.Insert) and isinstance(node.this, exp.Schema):
        for column in node.this.expressions:
            _check_path((column.name,), table, sql)
    if isinstance(node, exp.Merge):
        _check_merge_assignments(node, table, target.alias_or_name, sql)
    spans = tuple(_spans(node, tables))
    (target_span,) = [s for s in spans if s.start == target.this.meta.get("start")]
    named_elsewhere = any(s.table == table.name.lower() and s is not target_span for s in spans)
    reads_target = kind in ("UPDATE", "DELETE", "MERGE") or named_elsewhere
    key_filter = None
    if kind in ("UPDATE", "DELETE") and table.keyed:
        where = node.args.get("where")
        if where is not None and not named_elsewhere:
            key_filter = _key_filter(where.this, table, target.alias_or_name)
    return PlannedStatement(sql, kind, table, spans, target_span, target.alias_or_name, key_filter, reads_target, node)


def _target_table(node: exp.Table, tables: dict[str, EditTable], sql: str) -> EditTable:
    name = node.name
    if node.args.get("db") is not None or node.args.get("catalog") is not None:
        raise EditError(
            f"{node.sql(dialect='spark')} names another database's table; statecat write edits SRC's state tables, "
            f"named without a database (in {sql!r})",
            hint="Name the table to edit unqualified (accstate); other databases' tables may be read by their "
            "qualified names",
        )
    table = tables.get(name.lower())
    if table is None:
        listed = sorted(t.name for t in tables.values())
        raise EditError(
            f"unknown table {name!r} in {sql!r}; state tables of this savepoint: {', '.join(listed)}. "
            f"{did_you_mean(name.lower(), tables)}"
        )
    return table


def _check_editable(table: EditTable, kind: str, meta: StateMeta) -> None:
    if table.state.kind not in KEYED_KINDS + OPERATOR_KINDS:
        raise EditError(f"{table.name} is {table.state.kind} state, which statecat cannot edit")
    if table.state.kind == "coordinator" and kind != "UPDATE":
        raise EditError(f"{table.name} holds one checkpoint of the source coordinator: UPDATE it, not {kind}")
    if kind == "DELETE":  # a deletion writes no value: state shown as bytes may lose rows, not gain them
        return
    try:
        if table.keyed:
            EntryCodec(meta, table.operator, table.state).writable()
        else:
            element_encoder(table.state)
    except StatecatError as exc:
        raise EditError(f"{table.name} cannot be edited: {exc.message}") from None


def element_encoder(state: StateInfo) -> Any:
    """The encoder of one operator state element (a broadcast state: of one map entry)."""
    from statecat.readers.codecs.encoders import build_encoder

    if state.value.raw_reasons():
        raise EditError(
            f"state {state.name!r} is shown only as bytes ({'; '.join(state.value.raw_reasons())}), so it cannot be "
            f"written from an edited value; its bytes are copied unchanged when not edited"
        )
    return build_encoder(state.value)


def _column_path(column: exp.Expr, table: EditTable, alias: str) -> tuple[str, ...]:
    """``value.f0`` (sqlglot reads it as table.column), ``t.value.f0`` or ``alias.value``: the path
    from one of the table's columns."""
    parts: list[str] = []
    node = column
    while isinstance(node, exp.Dot):
        parts.insert(0, node.expression.name)
        node = node.this
    assert isinstance(node, exp.Column)
    parts = [p.name for p in node.parts] + parts
    if len(parts) > 1 and parts[0].lower() in (table.name.lower(), alias.lower()) and parts[1] in table.columns:
        parts = parts[1:]
    return tuple(parts)


def _check_path(path: tuple[str, ...], table: EditTable, sql: str) -> None:
    """The column (and struct fields) a statement assigns exists: said before Spark starts."""
    if path[0] not in table.columns:
        raise EditError(
            f"unknown column {path[0]!r} in {sql!r}; columns of {table.name}: {', '.join(table.columns)}. "
            f"{did_you_mean(path[0], table.columns)}"
        )
    import pyarrow as pa

    current = state_schema(table.state).field(path[0]).type
    for i, name in enumerate(path[1:], start=1):
        if not pa.types.is_struct(current):
            raise EditError(f"{'.'.join(path[:i])} is {current}, not a struct with field {name!r} (in {sql!r})")
        names = [current.field(j).name for j in range(current.num_fields)]
        if name not in names:
            raise EditError(
                f"{'.'.join(path[:i])} has no field {name!r} (in {sql!r}); its fields: {', '.join(names)}. "
                f"{did_you_mean(name, names)}"
            )
        current = current.field(name).type


def _check_merge_assignments(node: exp.Merge, table: EditTable, alias: str, sql: str) -> None:
    whens = node.args.get("whens")
    for when in whens.expressions if whens is not None else ():
        then = when.args.get("then")
        if isinstance(then, exp.Update):
            for assignment in then.expressions:
                if isinstance(assignment, exp.EQ) and isinstance(assignment.this, exp.Column | exp.Dot):
                    _check_path(_column_path(assignment.this, table, alias), table, sql)
        elif isinstance(then, exp.Insert) and isinstance(then.this, exp.Tuple):
            for column in then.this.expressions:
                if isinstance(column, exp.Column):
                    _check_path((column.name,), table, sql)


def _spans(node: exp.Expr, tables: dict[str, EditTable]) -> list[TableSpan]:
    """Where the statement names SRC's tables without a database: those names mean SRC's."""
    out = []
    ctes = {cte.alias_or_name.lower() for cte in node.find_all(exp.CTE)}
    for table in node.find_all(exp.Table):
        identifier = table.this
        if not isinstance(identifier, exp.Identifier) or table.args.get("db") is not None:
            continue
        name = identifier.name.lower()
        if name not in tables or name in ctes:
            continue
        start, end = identifier.meta.get("start"), identifier.meta.get("end")
        if start is None or end is None:
            raise EditError(f"cannot locate table {identifier.name!r} in the statement")
        out.append(TableSpan(start, end + 1, name, bool(table.alias)))
    return sorted(out, key=lambda s: s.start)


def _key_filter(condition: exp.Expr, table: EditTable, alias: str) -> str | None:
    """The first top-level conjunct ``key = <no column>`` / ``key IN (<no columns>)``: only rows of
    those keys can match, so only their key-groups are read. Its Spark SQL text, the key unqualified."""
    conjuncts = list(condition.flatten()) if isinstance(condition, exp.And) else [condition]
    for conjunct in conjuncts:
        if isinstance(conjunct, exp.EQ):
            if _is_key(conjunct.this, table, alias) and not _has_columns(conjunct.expression):
                return f"key = {conjunct.expression.sql(dialect='spark')}"
            if _is_key(conjunct.expression, table, alias) and not _has_columns(conjunct.this):
                return f"key = {conjunct.this.sql(dialect='spark')}"
        elif isinstance(conjunct, exp.In) and _is_key(conjunct.this, table, alias):
            values = conjunct.expressions
            if values and not any(_has_columns(v) for v in values):
                return f"key IN ({', '.join(v.sql(dialect='spark') for v in values)})"
    return None


def _has_columns(node: exp.Expr) -> bool:
    return node.find(exp.Column, exp.Subquery, exp.Select) is not None


def _is_key(node: exp.Expr, table: EditTable, alias: str) -> bool:
    if not isinstance(node, exp.Column):
        return False
    parts = [p.name.lower() for p in node.parts]
    return parts == ["key"] or (
        len(parts) == 2 and parts[0] in (table.name.lower(), alias.lower()) and parts[1] == "key"
    )
