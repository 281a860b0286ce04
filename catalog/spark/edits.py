"""State surgery: SQL statements against a savepoint's tables, planned here, written by readers/.

    from statecat.catalog import write_savepoint

    write_savepoint(
        "/savepoints/savepoint-1a2b3c-4d5e6f7a8b9c",
        "/savepoints/fixed",
        sql=["UPDATE accstate SET value = named_struct('f0', value.f0 + 1, 'f1', value.f1) WHERE key = 'key_662'"],
    )

Every statement is parsed with sqlglot's Spark dialect and understood before anything is written:
its table (named as in the Spark catalog: ``accstate`` or ``<operator>__<state>``), its columns
(``key``, ``namespace``, ``value`` as ``statecat read`` shows them), the types of its expressions
(edit_sql.py). Then ``readers/savepoint_writer.py`` streams the snapshot into a new canonical
savepoint and this module's editor rewrites the key-groups the statements touch: the key-groups of
the keys a WHERE clause names (``key = …``, ``key IN (…)``), or every key-group when it names none.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from statecat.catalog.spark.edit_sql import (
    NULL,
    Compiled,
    EditError,
    ExpressionCompiler,
    SqlType,
    assign,
    sql_type_of_arrow,
)
from statecat.readers.arrow_types import state_schema
from statecat.readers.decoders import build_decoder
from statecat.readers.entry_codec import EntryCodec, StateRow
from statecat.readers.framing import Entry
from statecat.readers.savepoint_writer import KeyedJob, KeyedRunner, WriteSummary, rebuild_keyed_stream
from statecat.readers.savepoint_writer import write_savepoint as write_canonical
from statecat.readers.scan import _hashable
from statecat.statemeta.errors import StatecatError, did_you_mean
from statecat.statemeta.metadata_writer import KeyGroupsOut
from statecat.statemeta.model import OperatorMeta, StateInfo, StateMeta, load_state_meta
from statecat.statemeta.naming import catalog_table_names

if TYPE_CHECKING:
    from statecat.statemeta.descriptors import DescriptorSource

log = logging.getLogger(__name__)

COLUMNS = ("key", "namespace", "value", "ttl_timestamp", "subtask")  # ttl_timestamp: states with TTL
KEYED_KINDS = ("keyed", "timer")
OPERATOR_KINDS = ("operator_list", "union", "broadcast", "coordinator")
STATEMENT_KINDS = ("UPDATE", "DELETE", "INSERT")


@dataclass(frozen=True)
class EditTable:
    name: str
    operator: OperatorMeta
    state: StateInfo
    columns: dict[str, SqlType]


@dataclass
class PlannedStatement:
    """One statement, understood: its table, condition, assignments or rows, and the keys it names."""

    sql: str
    kind: str  # UPDATE | DELETE | INSERT
    table: EditTable
    where: Compiled | None = None
    assignments: list[tuple[tuple[str, ...], Compiled]] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)  # INSERT, evaluated
    keys: list[Any] | None = None  # the keys named; None: any key may match
    matched: int = 0

    def key_groups(self, codec: EntryCodec) -> frozenset[int] | None:
        keys = [r["key"] for r in self.rows] if self.kind == "INSERT" else self.keys
        return None if keys is None else frozenset(codec.key_group(k) for k in keys)


def edit_tables(meta: StateMeta) -> dict[str, EditTable]:
    """The keyed state tables of a savepoint by catalog name (lower case), with their column types."""
    names = catalog_table_names(meta).states
    tables: dict[str, EditTable] = {}
    for op in meta.operators:
        for state in op.states:
            name = names.get((op.id, state.name))
            if name is None:
                continue
            try:
                schema = state_schema(state)
            except TypeError:
                continue
            columns = {f.name: sql_type_of_arrow(f.type) for f in schema if f.name in COLUMNS}
            tables[name.lower()] = EditTable(name, op, state, columns)
    return tables


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


def _parse(sql: str) -> exp.Expr:
    try:
        parsed = sqlglot.parse(sql, read="spark")
    except ParseError as exc:
        first = exc.errors[0] if exc.errors else {}
        where = f" at line {first.get('line')}, column {first.get('col')}" if first else ""
        raise EditError(f"cannot parse {sql!r}{where}: {first.get('description', exc)}") from None
    statements = [p for p in parsed if p is not None]
    if len(statements) != 1:
        raise EditError(f"expected one statement per --sql, got {len(statements)} in {sql!r}")
    return statements[0]


def _plan(sql: str, tables: dict[str, EditTable], meta: StateMeta) -> PlannedStatement:
    node = _parse(sql)
    if isinstance(node, exp.Update):
        kind = "UPDATE"
    elif isinstance(node, exp.Delete):
        kind = "DELETE"
    elif isinstance(node, exp.Insert):
        kind = "INSERT"
    else:
        raise EditError(
            f"{node.key.upper()} statements cannot edit state: {sql!r}",
            hint="statecat write runs UPDATE … SET … WHERE …, DELETE FROM … WHERE … and INSERT INTO … VALUES …",
        )
    target = node.this.this if isinstance(node.this, exp.Schema) else node.this
    if not isinstance(target, exp.Table):
        raise EditError(f"expected a table after {kind} in {sql!r}")
    table = _table(target, tables, sql)
    if table.state.kind not in KEYED_KINDS + OPERATOR_KINDS:
        raise EditError(f"{table.name} is {table.state.kind} state, which statecat cannot edit")
    if kind != "DELETE":  # a deletion writes no value: state shown as bytes may lose rows, not gain them
        try:
            if table.state.kind in KEYED_KINDS:
                EntryCodec(meta, table.operator, table.state).writable()
            else:
                element_encoder(table.state)
        except StatecatError as exc:
            raise EditError(f"{table.name} cannot be edited: {exc.message}") from None
    compiler = ExpressionCompiler(table.columns, table.name)
    planned = PlannedStatement(sql, kind, table)
    if isinstance(node, exp.Insert):
        planned.rows = _insert_rows(node, table, compiler, sql)
        return planned
    where = node.args.get("where")
    if where is not None:
        condition = compiler.compile(where.this)
        if condition.type not in (SqlType("BOOLEAN"), NULL):
            raise EditError(f"WHERE must be a condition, got {condition.type} in {sql!r}")
        planned.where = condition.run
        if table.state.kind in KEYED_KINDS:
            planned.keys = _named_keys(where.this, compiler, table)
    if kind == "UPDATE":
        for assignment in node.expressions:
            if not isinstance(assignment, exp.EQ) or not isinstance(assignment.this, exp.Column | exp.Dot):
                raise EditError(f"expected column = expression in SET, got {assignment.sql(dialect='spark')!r}")
            path = _target_path(assignment.this, table)
            target_type = _path_type(table, path, sql)
            typed = compiler.compile(assignment.expression)
            _refuse_null_primitive(table.state, path, typed.type)
            planned.assignments.append((path, assign(typed, target_type, ".".join(path))))
    return planned


# Java types with a primitive form: a POJO field of these may be declared primitive, which the
# serializer snapshot does not record, and Flink's PojoSerializer cannot set a primitive to NULL.
PRIMITIVE_KINDS = frozenset({"boolean", "byte", "short", "int", "long", "float", "double", "char"})
WRAPPERS = ("ttl", "nullable", "external")


def _refuse_null_primitive(state: StateInfo, path: tuple[str, ...], source: SqlType) -> None:
    """Refuses a NULL into a POJO field that may be a Java primitive: Flink would fail to restore it."""
    if path[0] != "value":
        return
    desc = state.value
    parent = None
    for name in path[1:]:
        while desc.kind in WRAPPERS:
            desc = desc.fields[0][1]
        child = next((d for n, d in desc.fields if n == name), None)
        if child is None:
            return
        parent, desc = desc, child
    _check_null_fields(desc, source, ".".join(path), parent)


def _check_null_fields(desc: Any, source: SqlType, where: str, parent: Any) -> None:
    while desc.kind in WRAPPERS:
        desc = desc.fields[0][1]
    if source == NULL and parent is not None and parent.kind == "pojo" and desc.kind in PRIMITIVE_KINDS:
        raise EditError(
            f"cannot set {where} to NULL: it is a field of {parent.describe().split('<')[0]} written by "
            f"Flink's {desc.kind} serializer, and if the class declares it as a primitive {desc.kind}, Flink "
            f"cannot restore a NULL there (PojoSerializer: 'Can not set {desc.kind} field … to null value'); "
            f"statecat cannot tell without the job's classes"
        )
    if source.name == "STRUCT" and desc.kind == "pojo":
        for (_, field_type), (field_name, field_desc) in zip(source.params, desc.fields):
            _check_null_fields(field_desc, field_type, f"{where}.{field_name}", desc)
    elif source.name == "ARRAY" and desc.kind == "list":
        _check_null_fields(desc.fields[0][1], source.params[0], f"{where}[]", desc)
    elif source.name == "MAP" and desc.kind == "map":
        _check_null_fields(desc.child("value"), source.params[1], f"{where}[key]", desc)


def _table(node: exp.Table, tables: dict[str, EditTable], sql: str) -> EditTable:
    name = node.name
    table = tables.get(name.lower())
    if table is None:
        keyed = sorted(t.name for t in tables.values() if t.state.kind in ("keyed", "timer"))
        raise EditError(
            f"unknown table {name!r} in {sql!r}; keyed state tables of this savepoint: {', '.join(keyed)}. "
            f"{did_you_mean(name.lower(), tables)}"
        )
    return table


def _target_path(column: exp.Expr, table: EditTable) -> tuple[str, ...]:
    parts: list[str] = []
    node = column
    while isinstance(node, exp.Dot):
        parts.insert(0, node.expression.name)
        node = node.this
    assert isinstance(node, exp.Column)
    parts = [p.name for p in node.parts] + parts
    if len(parts) > 1 and parts[0].lower() == table.name.lower() and parts[1] in table.columns:
        parts = parts[1:]
    if parts[0] == "subtask":
        raise EditError(
            f"SET subtask is not supported: an operator state element stays on its subtask; DELETE it and "
            f"INSERT it with the other subtask ({table.name})"
        )
    if parts[0] == "key":
        raise EditError(
            f"SET key is not supported: a key's state moves with its key-group; DELETE the row and INSERT it "
            f"under the new key ({table.name})"
        )
    return tuple(parts)


def _path_type(table: EditTable, path: tuple[str, ...], sql: str) -> SqlType:
    if path[0] not in table.columns:
        raise EditError(
            f"unknown column {path[0]!r} in SET of {sql!r}; columns of {table.name}: {', '.join(table.columns)}. "
            f"{did_you_mean(path[0], table.columns)}"
        )
    current = table.columns[path[0]]
    for name in path[1:]:
        field_type = current.field(name)
        if field_type is None:
            raise EditError(f"{'.'.join(path)}: {current} has no field {name!r} (in {sql!r})")
        current = field_type
    return current


def _named_keys(condition: exp.Expr, compiler: ExpressionCompiler, table: EditTable) -> list[Any] | None:
    """The keys a WHERE clause pins with ``key = literal`` / ``key IN (literals)`` in a top-level
    conjunct: only their key-groups can match. None when it pins none (every key-group is read)."""
    conjuncts = list(condition.flatten()) if isinstance(condition, exp.And) else [condition]
    key_type = table.columns["key"]
    for conjunct in conjuncts:
        literals: list[exp.Expr] | None = None
        if isinstance(conjunct, exp.EQ):
            if _is_key(conjunct.this, table) and not conjunct.expression.find(exp.Column):
                literals = [conjunct.expression]
            elif _is_key(conjunct.expression, table) and not conjunct.this.find(exp.Column):
                literals = [conjunct.this]
        elif isinstance(conjunct, exp.In) and _is_key(conjunct.this, table):
            if not any(e.find(exp.Column) for e in conjunct.expressions):
                literals = list(conjunct.expressions)
        if literals is not None:
            keys = []
            for literal in literals:
                value = assign(compiler.compile(literal), key_type, "key")({})
                if value is not None:
                    keys.append(value)
            return keys
    return None


def _is_key(node: exp.Expr, table: EditTable) -> bool:
    if not isinstance(node, exp.Column):
        return False
    parts = [p.name for p in node.parts]
    return parts == ["key"] or (len(parts) == 2 and parts[0].lower() == table.name.lower() and parts[1] == "key")


def _insert_rows(node: exp.Insert, table: EditTable, compiler: ExpressionCompiler, sql: str) -> list[dict[str, Any]]:
    if isinstance(node.this, exp.Schema):
        names = [c.name for c in node.this.expressions]
    else:
        names = [c for c in COLUMNS if c in table.columns]
    for name in names:
        if name not in table.columns:
            raise EditError(
                f"unknown column {name!r} in {sql!r}; columns of {table.name}: {', '.join(table.columns)}. "
                f"{did_you_mean(name, table.columns)}"
            )
    keyed = table.state.kind in KEYED_KINDS
    if keyed and "key" not in names:
        raise EditError(f"an INSERT must give the key: {sql!r}")
    if table.state.kind == "coordinator":
        raise EditError(f"{table.name} holds one checkpoint of the source coordinator: UPDATE it, not INSERT")
    source = node.expression
    if isinstance(source, exp.Values):
        tuples = [t.expressions if isinstance(t, exp.Tuple) else [t] for t in source.expressions]
    elif isinstance(source, exp.Select) and not source.args.get("from"):
        tuples = [source.expressions]
    else:
        raise EditError(
            f"INSERT … SELECT … FROM is not supported yet: {sql!r}",
            hint="Use INSERT INTO t VALUES (…), or SELECT of literals without FROM",
        )
    rows = []
    for values in tuples:
        if len(values) != len(names):
            raise EditError(
                f"INSERT gives {len(values)} values for the {len(names)} columns ({', '.join(names)}) in {sql!r}"
            )
        row: dict[str, Any] = dict.fromkeys(table.columns)
        for name, value in zip(names, values):
            typed = compiler.compile(value)
            _refuse_null_primitive(table.state, (name,), typed.type)
            row[name] = assign(typed, table.columns[name], name)({})
        if keyed and row["key"] is None:
            raise EditError(f"a state's key cannot be NULL: {sql!r}")
        if not keyed and row.get("subtask") is None:
            row["subtask"] = 0  # an operator state element lives on a subtask: the first, unless given
        if row["value"] is None:
            raise EditError(f"an inserted state value cannot be NULL: {sql!r}")
        rows.append(row)
    return rows


# ----------------------------------------------------------------------------- applying


class SqlEditor:
    """The StateEditor of planned statements: readers/savepoint_writer.py calls it per touched
    key-group and per edited operator state."""

    def __init__(self, meta: StateMeta, statements: list[PlannedStatement]) -> None:
        self.meta = meta
        self.statements = statements
        self.codecs: dict[tuple[str, str], EntryCodec] = {}
        self._key_groups: dict[str, frozenset[int]] = {}
        self._operator_states: dict[str, set[str]] = {}
        self._orphans: dict[tuple[str, str, str], set[tuple]] = {}
        for statement in statements:
            op, state = statement.table.operator, statement.table.state
            if state.kind not in KEYED_KINDS:
                self._operator_states.setdefault(op.id, set()).add(state.name)
                continue
            codec = self.codec(op, state)
            groups = statement.key_groups(codec)
            if groups is None:
                groups = frozenset(range(op.max_parallelism))
            self._key_groups[op.id] = self._key_groups.get(op.id, frozenset()) | groups

    def codec(self, operator: OperatorMeta, state: StateInfo) -> EntryCodec:
        key = (operator.id, state.name)
        if key not in self.codecs:
            self.codecs[key] = EntryCodec(self.meta, operator, state)
        return self.codecs[key]

    def key_groups(self, operator_id: str) -> frozenset[int]:
        return self._key_groups.get(operator_id, frozenset())

    def edit(self, operator: OperatorMeta, key_group: int, entries: dict[str, list[Entry]]) -> dict[str, list[Entry]]:
        rows_by_state: dict[str, list[StateRow]] = {}
        deleted_keys: set[Any] = set()
        for statement in self.statements:
            if statement.table.operator.id != operator.id or statement.table.state.kind not in KEYED_KINDS:
                continue
            state = statement.table.state
            codec = self.codec(operator, state)
            if state.name not in rows_by_state:
                rows = codec.rows(key_group, entries.get(state.name, []))
                rows_by_state[state.name] = rows
            rows_by_state[state.name] = self._apply(
                statement, codec, key_group, rows_by_state[state.name], deleted_keys
            )
        out: dict[str, list[Entry]] = {}
        for name, rows in rows_by_state.items():
            codec = self.codec(operator, operator.state(name))
            new_entries: list[Entry] = []
            for row in rows:
                if row.entries is not None:
                    new_entries += row.entries
                else:
                    new_entries += codec.entries(key_group, row)
            out[name] = new_entries
        if deleted_keys:
            self._warn_orphan_timers(operator, key_group, entries, out, deleted_keys)
        return out

    # -- operator states

    def operator_states(self, operator_id: str) -> frozenset[str]:
        return frozenset(self._operator_states.get(operator_id, ()))

    def edit_elements(
        self, operator: OperatorMeta, state_name: str, subtask: int | None, elements: list[bytes]
    ) -> list[bytes]:
        state = operator.state(state_name)
        schema = state_schema(state)
        value_type = schema.field("value").type
        decode = None if state.value.kind == "raw" else build_decoder(state.value)
        broadcast = state.kind == "broadcast"
        if broadcast:
            (blob,) = elements or [b"\x00\x00\x00\x00"]
            values, originals = _broadcast_values(decode, blob), None
        else:
            values = [_decode_element(decode, e) for e in elements]
            originals = list(elements)
        shown = pa.array(values, type=value_type).to_pylist()
        rows = [{"value": v, "subtask": subtask} for v in shown]
        kept: list[tuple[dict[str, Any], bytes | None]] = [
            (row, originals[i] if originals is not None else None) for i, row in enumerate(rows)
        ]
        changed = False
        for statement in self.statements:
            if statement.table.operator.id != operator.id or statement.table.state.name != state_name:
                continue
            kept, edited = _apply_to_elements(statement, kept, subtask)
            changed |= edited
        if not changed:
            return elements
        encode = element_encoder(state)
        if broadcast:
            out = bytearray(len(kept).to_bytes(4, "big"))
            for row, _ in kept:
                encode(row["value"], out)
            return [bytes(out)]
        result = []
        for row, original in kept:
            if original is not None:
                result.append(original)
            else:
                out = bytearray()
                encode(row["value"], out)
                result.append(bytes(out))
        return result

    def _apply(
        self, statement: PlannedStatement, codec: EntryCodec, key_group: int, rows: list[StateRow], deleted: set
    ) -> list[StateRow]:
        if statement.kind == "INSERT":
            existing = {_identity(r) for r in rows}
            for values in statement.rows:
                if codec.key_group(values["key"]) != key_group:
                    continue
                row = StateRow(
                    values["key"], values.get("namespace"), values.get("value"), None, values.get("ttl_timestamp")
                )
                if _identity(row) in existing:
                    raise EditError(
                        f"{statement.table.name} already holds state for key {row.key!r}"
                        + (f" and namespace {row.namespace!r}" if row.namespace is not None else "")
                        + f": {statement.sql!r}",
                        hint="UPDATE it, or DELETE it first",
                    )
                if row.value is None:
                    raise EditError(f"an inserted state value cannot be NULL: {statement.sql!r}")
                existing.add(_identity(row))
                rows.append(row)
                statement.matched += 1
            return rows
        kept = []
        for row in rows:
            current = row.as_dict()
            if statement.where is not None and statement.where(current) is not True:
                kept.append(row)
                continue
            statement.matched += 1
            if statement.kind == "DELETE":
                deleted.add(_identity(row))
                continue
            updated = dict(current)
            results = [run(current) for _, run in statement.assignments]  # every SET sees the old row
            for (path, _), result in zip(statement.assignments, results):
                _set_path(updated, path, result)
            if updated["value"] is None or (codec.kind in ("list", "map") and not updated["value"]):
                deleted.add(_identity(row))  # Flink clears a state set to null or emptied
                continue
            # ttl_timestamp as any column: kept unless SET (readers/entry_codec.py)
            kept.append(
                StateRow(updated["key"], updated["namespace"], updated["value"], None, updated.get("ttl_timestamp"))
            )
        return kept

    def _warn_orphan_timers(
        self,
        operator: OperatorMeta,
        key_group: int,
        before: dict[str, list[Entry]],
        after: dict[str, list[Entry]],
        deleted: set,
    ) -> None:
        """Timers whose (key, namespace) lost its last state: they still fire (a window fires
        empty). Collected per timer table; ``timer_warnings`` words them once per table."""
        live: set = set()
        timers: dict[str, set] = {}
        for state in operator.states:
            if not state.is_keyed:
                continue
            entries = after.get(state.name, before.get(state.name, []))
            if not entries:
                continue
            try:
                pairs = {_identity(r) for r in self.codec(operator, state).rows(key_group, entries)}
            except StatecatError:
                continue
            if state.kind == "timer":
                timers[state.name] = pairs
            else:
                live |= pairs
        for name, pairs in timers.items():
            orphans = (deleted - live) & pairs
            if orphans:
                self._orphans.setdefault((operator.id, operator.label, name), set()).update(orphans)

    def timer_warnings(self) -> list[str]:
        names = catalog_table_names(self.meta).states
        out = []
        for (operator_id, label, state), pairs in sorted(self._orphans.items()):
            shown = ", ".join(
                repr(key) if namespace is None else f"({key!r}, {namespace!r})" for key, namespace in sorted(pairs)[:5]
            )
            more = f" and {len(pairs) - 5} more" if len(pairs) > 5 else ""
            out.append(
                f"timer table {names.get((operator_id, state), state)} of operator {label} still holds timers of "
                f"{len(pairs)} key(s)/namespace(s) whose state was deleted: {shown}{more}; they will fire on empty "
                f"state (DELETE them from that table too)"
            )
        return out


def element_encoder(state: StateInfo) -> Any:
    """The encoder of one operator state element (a broadcast state: of one map entry)."""
    from statecat.readers.encoders import build_encoder

    if state.value.raw_reasons():
        raise EditError(
            f"state {state.name!r} is shown only as bytes ({'; '.join(state.value.raw_reasons())}), so it cannot be "
            f"written from an edited value; its bytes are copied unchanged when not edited"
        )
    return build_encoder(state.value)


def _decode_element(decode: Any, data: bytes) -> Any:
    if decode is None:
        return bytes(data)
    value, end = decode(data, 0)
    if end != len(data):
        raise EditError(f"an operator state element of {len(data)} bytes decodes in {end}: it cannot be edited")
    return value


def _broadcast_values(decode: Any, blob: bytes) -> list[Any]:
    count = int.from_bytes(blob[:4], "big", signed=True)
    if not 0 <= count <= len(blob) - 4:
        raise EditError(f"a broadcast state of {len(blob)} bytes gives {count} entries")
    pos, values = 4, []
    for _ in range(count):
        value, pos = decode(blob, pos)
        values.append(value)
    return values


def _apply_to_elements(
    statement: PlannedStatement, rows: list[tuple[dict[str, Any], bytes | None]], subtask: int | None
) -> tuple[list[tuple[dict[str, Any], bytes | None]], bool]:
    """A statement on one subtask's elements; edited rows lose their stored bytes (re-encoded)."""
    changed = False
    if statement.kind == "INSERT":
        added = [
            ({"value": r["value"], "subtask": subtask}, None) for r in statement.rows if r.get("subtask") == subtask
        ]
        statement.matched += len(added)
        return rows + added, bool(added)
    out = []
    for row, original in rows:
        if statement.where is not None and statement.where(row) is not True:
            out.append((row, original))
            continue
        statement.matched += 1
        changed = True
        if statement.kind == "DELETE":
            continue
        updated = dict(row)
        results = [run(row) for _, run in statement.assignments]
        for (path, _), result in zip(statement.assignments, results):
            _set_path(updated, path, result)
        if updated["value"] is None:
            raise EditError(f"an operator state element cannot be NULL: {statement.sql!r}")
        out.append((updated, None))
    return out, changed


def _spark_runner(
    spark: Any, source: str, statements: list[str], planned: list[PlannedStatement], descriptors: Any
) -> KeyedRunner:
    def run(jobs: list[KeyedJob], directory: str) -> dict[KeyedJob, tuple[KeyGroupsOut, dict[str, int]]]:
        work = [(job.operator_id, job.subtask) for job in jobs]
        task = functools.partial(_rebuild_in_task, source, statements, descriptors, directory)
        session = spark() if callable(spark) else spark  # started only now that the edits are understood
        results = session.sparkContext.parallelize(work, len(work)).map(task).collect()
        out = {}
        for (operator_id, subtask), handle, counts, matched in results:
            out[KeyedJob(operator_id, subtask)] = (handle, counts)
            for statement, rows in zip(planned, matched):
                statement.matched += rows
        return out

    return run


def _rebuild_in_task(
    source: str, statements: list[str], descriptors: Any, directory: str, job: tuple[str, int]
) -> tuple[tuple[str, int], KeyGroupsOut, dict[str, int], list[int]]:
    """A Spark task: one subtask's keyed stream, with the statements planned again on the worker."""
    meta = load_state_meta(source, descriptors=descriptors)
    planned = plan_statements(meta, statements)
    editor = SqlEditor(meta, planned) if planned else None
    handle, counts = rebuild_keyed_stream(meta, KeyedJob(*job), editor, directory)
    return job, handle, counts, [s.matched for s in planned]


def _identity(row: StateRow) -> tuple:
    return (_hashable(row.key), _hashable(row.namespace))


def _set_path(row: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    if len(path) == 1:
        row[path[0]] = value
        return
    parent = row[path[0]]
    if parent is None:
        raise EditError(f"cannot set {'.'.join(path)}: {path[0]} is NULL")
    parent = dict(parent)
    row[path[0]] = parent
    for name in path[1:-1]:
        child = parent.get(name)
        if child is None:
            raise EditError(f"cannot set {'.'.join(path)}: {name} is NULL")
        parent[name] = child = dict(child)
        parent = child
    parent[path[-1]] = value


# ----------------------------------------------------------------------------- the entry point


@dataclass
class WriteResult:
    summary: WriteSummary
    statements: list[PlannedStatement]
    warnings: list[str]

    @property
    def destination(self) -> str:
        return self.summary.destination


def write_savepoint(
    source: str,
    destination: str,
    *,
    sql: Sequence[str] | str = (),
    drop_operators: Iterable[str] = (),
    set_uids: Mapping[str, str] | None = None,
    max_parallelism: int | None = None,
    overwrite: bool = False,
    spark: Any = None,
    descriptors: DescriptorSource | None = None,
) -> WriteResult:
    """Writes ``source`` (any snapshot statecat reads) as a canonical savepoint at ``destination``,
    with the ``sql`` statements applied, operators dropped, uids set and keys moved to the
    key-groups of a new ``max_parallelism``. Statements are all
    understood before anything is written; ``destination`` appears whole or not at all.

    ``spark``: a SparkSession (or a function returning one, called once the statements, operators
    and destination are checked) whose tasks rebuild the subtasks' keyed streams in parallel (one
    task per subtask, each planning the statements again); the driver writes the rest and composes
    ``_metadata``. DST must then be on storage every executor writes to. ``descriptors``: declared
    PyFlink state types (a descriptor file, its document or a DescriptorSet), so typed PyFlink state
    can be edited."""
    statements = [sql] if isinstance(sql, str) else list(sql)
    if descriptors is not None:
        from statecat.statemeta.descriptors import as_descriptor_set

        descriptors = as_descriptor_set(descriptors)  # parsed once: the Spark tasks get the same
    meta = load_state_meta(source, descriptors=descriptors)
    planned = plan_statements(meta, statements)
    editor = SqlEditor(meta, planned) if planned else None
    from statecat import __version__
    from statecat.statemeta.stateinfo import metadata_fingerprint

    dropped = list(drop_operators)
    provenance: dict[str, Any] = {
        "source": meta.path if "://" in meta.path else os.path.abspath(meta.storage.directory),
        "source_metadata_sha256": metadata_fingerprint(meta.storage).sha256,
        "statements": statements,
        "drop_operators": dropped,
        "set_uids": dict(set_uids or {}),
        "max_parallelism": max_parallelism,
        "descriptors": descriptors is not None,
        "written_by": f"statecat {__version__}",
        "written_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    runner = _spark_runner(spark, provenance["source"], statements, planned, descriptors) if spark is not None else None
    summary = write_canonical(
        meta,
        destination,
        drop_operators=dropped,
        set_uids=set_uids,
        editor=editor,
        max_parallelism=max_parallelism,
        overwrite=overwrite,
        provenance=provenance,
        keyed_runner=runner,
    )
    warnings = editor.timer_warnings() if editor is not None else []
    for statement in planned:
        if statement.matched == 0:
            warnings.append(f"{statement.sql!r} matched no rows")
    return WriteResult(summary, planned, warnings)
