"""Spark SQL expressions of state edits, typed and evaluated row by row, as Spark 4 (ANSI mode) would.

``statecat write --sql`` runs ``UPDATE … SET … WHERE …``, ``DELETE … WHERE …`` and ``INSERT …`` on
a savepoint's tables without a JVM: statements are parsed with sqlglot's Spark dialect, every
expression is typed against the table's columns before anything is written (an unknown column, a
string into BIGINT, an unsupported function are refused then), and evaluated per row here.

The supported subset, with Spark's semantics (tests/test_edit_sql.py checks it against Spark):
literals (``1``, ``1L``, ``1.5``, ``1.5D``, ``'s'``, ``NULL``, ``TRUE``, ``DATE '…'``,
``TIMESTAMP '…'``), columns and struct fields (``value.f0``), ``map[k]``/``array[i]``, ``+ - * / %``
and unary minus with ANSI overflow and division-by-zero errors, comparisons, ``AND OR NOT``,
``IS [NOT] NULL``, ``IN``, ``BETWEEN``, ``LIKE``, ``CASE``, and the functions in ``FUNCTIONS``.
Anything else is refused with the list of what is supported.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation, localcontext
from typing import Any

import pyarrow as pa
from sqlglot import exp

from statecat.statemeta.errors import StatecatError

MAX_DECIMAL_PRECISION = 38
INTEGRAL_RANGES = {
    "TINYINT": (-(1 << 7), (1 << 7) - 1),
    "SMALLINT": (-(1 << 15), (1 << 15) - 1),
    "INT": (-(1 << 31), (1 << 31) - 1),
    "BIGINT": (-(1 << 63), (1 << 63) - 1),
}
INTEGRAL_ORDER = ("TINYINT", "SMALLINT", "INT", "BIGINT")
# Precision an integral type needs as a decimal (Spark's DecimalType.forType).
INTEGRAL_DECIMAL_PRECISION = {"TINYINT": 3, "SMALLINT": 5, "INT": 10, "BIGINT": 20}
EPOCH = dt.datetime(1970, 1, 1)


class EditError(StatecatError):
    """A statement statecat cannot run: not understood, mistyped, or refused by Spark's rules."""


# ----------------------------------------------------------------------------- types


@dataclass(frozen=True)
class SqlType:
    """A Spark SQL type: ``name`` plus parameters (DECIMAL precision/scale, element types, fields)."""

    name: str
    params: tuple = ()

    def __str__(self) -> str:
        if self.name == "DECIMAL":
            return f"DECIMAL({self.params[0]},{self.params[1]})"
        if self.name == "ARRAY":
            return f"ARRAY<{self.params[0]}>"
        if self.name == "MAP":
            return f"MAP<{self.params[0]}, {self.params[1]}>"
        if self.name == "STRUCT":
            return "STRUCT<" + ", ".join(f"{n}: {t}" for n, t in self.params) + ">"
        return self.name

    @property
    def integral(self) -> bool:
        return self.name in INTEGRAL_RANGES

    @property
    def numeric(self) -> bool:
        return self.integral or self.name in ("DECIMAL", "FLOAT", "DOUBLE")

    def field(self, name: str) -> SqlType | None:
        for field_name, field_type in self.params if self.name == "STRUCT" else ():
            if field_name == name:
                return field_type
        return None


NULL = SqlType("NULL")
BOOLEAN = SqlType("BOOLEAN")
STRING = SqlType("STRING")
DOUBLE = SqlType("DOUBLE")
BIGINT = SqlType("BIGINT")
INT = SqlType("INT")


def decimal(precision: int, scale: int) -> SqlType:
    precision = min(precision, MAX_DECIMAL_PRECISION)
    return SqlType("DECIMAL", (precision, min(scale, precision)))


def sql_type_of_arrow(t: pa.DataType) -> SqlType:
    """The Spark type of a column statecat reads (readers/arrow_types.py builds the Arrow one)."""
    simple = {
        pa.int8(): "TINYINT",
        pa.int16(): "SMALLINT",
        pa.int32(): "INT",
        pa.int64(): "BIGINT",
        pa.float32(): "FLOAT",
        pa.float64(): "DOUBLE",
        pa.bool_(): "BOOLEAN",
        pa.string(): "STRING",
        pa.large_string(): "STRING",
        pa.binary(): "BINARY",
        pa.large_binary(): "BINARY",
        pa.date32(): "DATE",
        pa.null(): "NULL",
    }
    if t in simple:
        return SqlType(simple[t])
    if pa.types.is_decimal(t):
        return SqlType("DECIMAL", (t.precision, t.scale))
    if pa.types.is_timestamp(t):
        return SqlType("TIMESTAMP" if t.tz else "TIMESTAMP_NTZ")
    if pa.types.is_map(t):
        return SqlType("MAP", (sql_type_of_arrow(t.key_type), sql_type_of_arrow(t.item_type)))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return SqlType("ARRAY", (sql_type_of_arrow(t.value_type),))
    if pa.types.is_struct(t):
        return SqlType(
            "STRUCT", tuple((t.field(i).name, sql_type_of_arrow(t.field(i).type)) for i in range(t.num_fields))
        )
    return SqlType(str(t).upper())


def _type_of_sqlglot(node: exp.DataType) -> SqlType:
    name = node.this.name if hasattr(node.this, "name") else str(node.this)
    aliases = {
        "INT": "INT",
        "BIGINT": "BIGINT",
        "SMALLINT": "SMALLINT",
        "TINYINT": "TINYINT",
        "FLOAT": "FLOAT",
        "DOUBLE": "DOUBLE",
        "BOOLEAN": "BOOLEAN",
        "TEXT": "STRING",
        "VARCHAR": "STRING",
        "STRING": "STRING",
        "BINARY": "BINARY",
        "VARBINARY": "BINARY",
        "DATE": "DATE",
        "TIMESTAMP": "TIMESTAMP",
        "TIMESTAMPTZ": "TIMESTAMP",
        "TIMESTAMPLTZ": "TIMESTAMP",
        "TIMESTAMPNTZ": "TIMESTAMP_NTZ",
        "DATETIME": "TIMESTAMP_NTZ",
    }
    if name == "DECIMAL":
        params = [int(p.this.name) for p in node.expressions]
        precision, scale = (params + [10, 0][len(params) :])[:2]
        return decimal(precision, scale)
    if name in aliases:
        return SqlType(aliases[name])
    raise EditError(
        f"CAST to {node.sql(dialect='spark')} is not supported in edits; supported: {', '.join(sorted(set(aliases.values())))}, DECIMAL(p,s)"
    )


# ----------------------------------------------------------------------------- compiled expressions

Row = Mapping[str, Any]
Compiled = Callable[[Row], Any]


@dataclass(frozen=True)
class Typed:
    """An expression compiled once: its Spark type and a function of a row."""

    type: SqlType
    run: Compiled
    sql: str


def _sql(node: exp.Expr) -> str:
    return node.sql(dialect="spark")


class ExpressionCompiler:
    """Types and compiles expressions against a table's columns (``key``, ``namespace``, ``value``)."""

    def __init__(self, columns: Mapping[str, SqlType], table: str) -> None:
        self.columns = dict(columns)
        self.table = table

    def compile(self, node: exp.Expr) -> Typed:
        method = getattr(self, f"_{type(node).__name__.lower()}", None)
        if method is None:
            raise EditError(
                f"{_sql(node)!r} ({type(node).__name__}) is not supported in edits",
                hint="Supported: literals, columns and struct fields, + - * / %, comparisons, AND/OR/NOT, "
                "IS NULL, IN, BETWEEN, LIKE, CASE, and the functions " + ", ".join(sorted(FUNCTIONS)),
            )
        return method(node)

    # -- leaves

    def _literal(self, node: exp.Literal) -> Typed:
        text = node.this
        if node.is_string:
            return Typed(STRING, _constant(text), _sql(node))
        if re.fullmatch(r"[+-]?\d+", text):
            value = int(text)
            if INTEGRAL_RANGES["INT"][0] <= value <= INTEGRAL_RANGES["INT"][1]:
                return Typed(INT, _constant(value), text)
            if INTEGRAL_RANGES["BIGINT"][0] <= value <= INTEGRAL_RANGES["BIGINT"][1]:
                return Typed(BIGINT, _constant(value), text)
            digits = len(str(abs(value)))
            if digits > MAX_DECIMAL_PRECISION:
                raise EditError(f"the number {text} has more than {MAX_DECIMAL_PRECISION} digits")
            return Typed(decimal(digits, 0), _constant(Decimal(value)), text)
        if re.fullmatch(r"[+-]?(\d+\.?\d*|\.\d+)", text):
            d = Decimal(text)
            exponent = d.as_tuple().exponent
            scale = -exponent if isinstance(exponent, int) and exponent < 0 else 0
            precision = max(len(d.as_tuple().digits), scale)
            return Typed(decimal(precision, scale), _constant(d), text)
        return Typed(DOUBLE, _constant(float(text)), text)

    def _hexstring(self, node: exp.HexString) -> Typed:
        try:
            value = bytes.fromhex(node.this)
        except ValueError:
            raise EditError(f"{_sql(node)!r} is not a binary literal of hex digits") from None
        return Typed(SqlType("BINARY"), _constant(value), _sql(node))

    def _null(self, node: exp.Null) -> Typed:
        return Typed(NULL, _constant(None), "NULL")

    def _boolean(self, node: exp.Boolean) -> Typed:
        value = bool(node.this)
        return Typed(BOOLEAN, _constant(value), _sql(node))

    def _paren(self, node: exp.Paren) -> Typed:
        return self.compile(node.this)

    def _column(self, node: exp.Column) -> Typed:
        parts = [p.name for p in node.parts]
        return self._path(parts, _sql(node))

    def _dot(self, node: exp.Dot) -> Typed:
        parts: list[str] = []
        current: exp.Expr = node
        while isinstance(current, exp.Dot):
            parts.insert(0, current.expression.name)
            current = current.this
        if not isinstance(current, exp.Column):
            base = self.compile(current)
            return self._fields(base, parts, _sql(node))
        return self._path([p.name for p in current.parts] + parts, _sql(node))

    def _path(self, parts: list[str], text: str) -> Typed:
        if len(parts) > 1 and parts[0].lower() == self.table.lower() and parts[1] in self.columns:
            parts = parts[1:]
        root = parts[0]
        if root not in self.columns:
            from statecat.statemeta.errors import did_you_mean

            raise EditError(
                f"unknown column {root!r} in {text!r} of table {self.table}; its columns are "
                f"{', '.join(self.columns)}. {did_you_mean(root, self.columns)}"
            )
        base = Typed(self.columns[root], _column_getter(root), root)
        return self._fields(base, parts[1:], text)

    def _fields(self, base: Typed, names: list[str], text: str) -> Typed:
        for name in names:
            field_type = base.type.field(name)
            if field_type is None:
                fields = [n for n, _ in base.type.params] if base.type.name == "STRUCT" else []
                raise EditError(
                    f"{base.sql} has no field {name!r} (in {text!r}); "
                    + (f"its fields are {', '.join(fields)}" if fields else f"it is a {base.type}, not a struct")
                )
            base = Typed(field_type, _field_getter(base.run, name), f"{base.sql}.{name}")
        return base

    def _bracket(self, node: exp.Bracket) -> Typed:
        base = self.compile(node.this)
        if len(node.expressions) != 1:
            raise EditError(f"{_sql(node)!r}: one subscript expected")
        index = self.compile(node.expressions[0])
        if base.type.name == "MAP":
            key_type, value_type = base.type.params
            _assignable(index.type, key_type, f"the key of {_sql(node)}")

            def lookup(row: Row) -> Any:
                m, k = base.run(row), index.run(row)
                if m is None or k is None:
                    return None
                for mk, mv in m:
                    if mk == k:
                        return mv
                return None

            return Typed(value_type, lookup, _sql(node))
        if base.type.name == "ARRAY":
            if not index.type.integral:
                raise EditError(f"an array subscript must be an integer, got {index.type} in {_sql(node)!r}")

            def element(row: Row) -> Any:
                a, i = base.run(row), index.run(row)
                if a is None or i is None:
                    return None
                if not 0 <= i < len(a):
                    raise EditError(
                        f"INVALID_ARRAY_INDEX: index {i} is out of bounds for {len(a)} elements in {_sql(node)!r}"
                    )
                return a[i]

            return Typed(base.type.params[0], element, _sql(node))
        raise EditError(f"{_sql(node)!r}: {base.type} cannot be subscripted")

    # -- casts

    def _trycast(self, node: exp.TryCast) -> Typed:
        return self._cast(node, safe=bool(node.args.get("safe")))

    def _cast(self, node: exp.Cast, safe: bool = False) -> Typed:
        inner = self.compile(node.this)
        target = _type_of_sqlglot(node.to)
        convert = _caster(inner.type, target, _sql(node))

        def cast(row: Row) -> Any:
            value = inner.run(row)
            if value is None:
                return None
            try:
                return convert(value)
            except EditError:
                if safe:
                    return None
                raise

        return Typed(target, cast, _sql(node))

    # -- arithmetic

    def _arithmetic(self, node: exp.Binary, op: str) -> Typed:
        left, right = self.compile(node.this), self.compile(node.expression)
        result_type = _arithmetic_type(left.type, right.type, op, _sql(node))
        text = _sql(node)

        def run(row: Row) -> Any:
            a, b = left.run(row), right.run(row)
            if a is None or b is None:
                return None
            return _arithmetic_value(a, b, op, left.type, right.type, result_type, text)

        return Typed(result_type, run, text)

    def _add(self, node: exp.Add) -> Typed:
        return self._arithmetic(node, "+")

    def _sub(self, node: exp.Sub) -> Typed:
        return self._arithmetic(node, "-")

    def _mul(self, node: exp.Mul) -> Typed:
        return self._arithmetic(node, "*")

    def _div(self, node: exp.Div) -> Typed:
        return self._arithmetic(node, "/")

    def _mod(self, node: exp.Mod) -> Typed:
        return self._arithmetic(node, "%")

    def _neg(self, node: exp.Neg) -> Typed:
        inner = self.compile(node.this)
        if not inner.type.numeric:
            raise EditError(f"cannot negate a {inner.type} in {_sql(node)!r}")
        text = _sql(node)

        def run(row: Row) -> Any:
            v = inner.run(row)
            if v is None:
                return None
            return _check_range(-v, inner.type, text)

        return Typed(inner.type, run, text)

    # -- predicates

    def _comparison(self, node: exp.Binary, test: Callable[[Any, Any], bool]) -> Typed:
        left, right = self.compile(node.this), self.compile(node.expression)
        _comparable(left.type, right.type, _sql(node))

        def run(row: Row) -> Any:
            a, b = left.run(row), right.run(row)
            if a is None or b is None:
                return None
            return test(_comparison_key(a), _comparison_key(b))

        return Typed(BOOLEAN, run, _sql(node))

    def _eq(self, node: exp.EQ) -> Typed:
        return self._comparison(node, lambda a, b: a == b)

    def _neq(self, node: exp.NEQ) -> Typed:
        return self._comparison(node, lambda a, b: a != b)

    def _lt(self, node: exp.LT) -> Typed:
        return self._comparison(node, lambda a, b: a < b)

    def _lte(self, node: exp.LTE) -> Typed:
        return self._comparison(node, lambda a, b: a <= b)

    def _gt(self, node: exp.GT) -> Typed:
        return self._comparison(node, lambda a, b: a > b)

    def _gte(self, node: exp.GTE) -> Typed:
        return self._comparison(node, lambda a, b: a >= b)

    def _nullsafeeq(self, node: exp.NullSafeEQ) -> Typed:
        left, right = self.compile(node.this), self.compile(node.expression)
        _comparable(left.type, right.type, _sql(node))

        def run(row: Row) -> bool:
            a, b = left.run(row), right.run(row)
            if a is None or b is None:
                return a is None and b is None
            return _comparison_key(a) == _comparison_key(b)

        return Typed(BOOLEAN, run, _sql(node))

    def _boolean_operand(self, node: exp.Expr) -> Typed:
        typed = self.compile(node)
        if typed.type not in (BOOLEAN, NULL):
            raise EditError(f"expected a BOOLEAN condition, got {typed.type} in {typed.sql!r}")
        return typed

    def _and(self, node: exp.And) -> Typed:
        left, right = self._boolean_operand(node.this), self._boolean_operand(node.expression)

        def run(row: Row) -> Any:
            a = left.run(row)
            if a is False:
                return False
            b = right.run(row)
            if b is False:
                return False
            return None if a is None or b is None else True

        return Typed(BOOLEAN, run, _sql(node))

    def _or(self, node: exp.Or) -> Typed:
        left, right = self._boolean_operand(node.this), self._boolean_operand(node.expression)

        def run(row: Row) -> Any:
            a = left.run(row)
            if a is True:
                return True
            b = right.run(row)
            if b is True:
                return True
            return None if a is None or b is None else False

        return Typed(BOOLEAN, run, _sql(node))

    def _not(self, node: exp.Not) -> Typed:
        inner = self._boolean_operand(node.this)

        def run(row: Row) -> Any:
            v = inner.run(row)
            return None if v is None else not v

        return Typed(BOOLEAN, run, _sql(node))

    def _is(self, node: exp.Is) -> Typed:
        if not isinstance(node.expression, exp.Null):
            raise EditError(f"only IS [NOT] NULL is supported, got {_sql(node)!r}")
        inner = self.compile(node.this)
        return Typed(BOOLEAN, lambda row: inner.run(row) is None, _sql(node))

    def _in(self, node: exp.In) -> Typed:
        if node.args.get("query") is not None:
            raise EditError(f"IN with a subquery is not supported in edits: {_sql(node)!r}")
        left = self.compile(node.this)
        options = [self.compile(e) for e in node.expressions]
        for option in options:
            _comparable(left.type, option.type, _sql(node))

        def run(row: Row) -> Any:
            a = left.run(row)
            if a is None:
                return None
            key = _comparison_key(a)
            saw_null = False
            for option in options:
                b = option.run(row)
                if b is None:
                    saw_null = True
                elif _comparison_key(b) == key:
                    return True
            return None if saw_null else False

        return Typed(BOOLEAN, run, _sql(node))

    def _between(self, node: exp.Between) -> Typed:
        value, low, high = self.compile(node.this), self.compile(node.args["low"]), self.compile(node.args["high"])
        _comparable(value.type, low.type, _sql(node))
        _comparable(value.type, high.type, _sql(node))

        def run(row: Row) -> Any:
            v, lo, hi = value.run(row), low.run(row), high.run(row)
            lower = None if v is None or lo is None else _comparison_key(lo) <= _comparison_key(v)
            upper = None if v is None or hi is None else _comparison_key(v) <= _comparison_key(hi)
            if lower is False or upper is False:
                return False
            return None if lower is None or upper is None else True

        return Typed(BOOLEAN, run, _sql(node))

    def _like(self, node: exp.Like) -> Typed:
        value, pattern = self.compile(node.this), self.compile(node.expression)
        if value.type not in (STRING, NULL) or pattern.type not in (STRING, NULL):
            raise EditError(f"LIKE compares strings, got {value.type} LIKE {pattern.type} in {_sql(node)!r}")

        def run(row: Row) -> Any:
            v, p = value.run(row), pattern.run(row)
            if v is None or p is None:
                return None
            return _like_regex(p).fullmatch(v) is not None

        return Typed(BOOLEAN, run, _sql(node))

    def _case(self, node: exp.Case) -> Typed:
        if node.this is not None:
            raise EditError(f"CASE <expr> WHEN … is not supported; write CASE WHEN <condition> …: {_sql(node)!r}")
        branches = [(self._boolean_operand(i.this), self.compile(i.args["true"])) for i in node.args["ifs"]]
        default = self.compile(node.args["default"]) if node.args.get("default") is not None else None
        result = _common_type([t for _, t in branches] + ([default] if default else []), _sql(node))

        def run(row: Row) -> Any:
            for condition, value in branches:
                if condition.run(row) is True:
                    return _convert(value.run(row), value.type, result, _sql(node))
            return None if default is None else _convert(default.run(row), default.type, result, _sql(node))

        return Typed(result, run, _sql(node))

    def _if(self, node: exp.If) -> Typed:
        condition = self._boolean_operand(node.this)
        yes = self.compile(node.args["true"])
        no = self.compile(node.args["false"]) if node.args.get("false") is not None else self._null(exp.Null())
        result = _common_type([yes, no], _sql(node))

        def run(row: Row) -> Any:
            chosen = yes if condition.run(row) is True else no
            return _convert(chosen.run(row), chosen.type, result, _sql(node))

        return Typed(result, run, _sql(node))

    # -- constructors and functions

    def _struct(self, node: exp.Struct) -> Typed:
        fields: list[tuple[str, Typed]] = []
        for item in node.expressions:
            if isinstance(item, exp.PropertyEQ):
                fields.append((item.this.name, self.compile(item.expression)))
            else:
                raise EditError(f"name every field: named_struct('f0', …, 'f1', …), got {_sql(node)!r}")
        struct_type = SqlType("STRUCT", tuple((name, typed.type) for name, typed in fields))

        def run(row: Row) -> dict:
            return {name: typed.run(row) for name, typed in fields}

        return Typed(struct_type, run, _sql(node))

    def _array(self, node: exp.Array) -> Typed:
        items = [self.compile(e) for e in node.expressions]
        element = _common_type(items, _sql(node)) if items else NULL
        text = _sql(node)
        return Typed(
            SqlType("ARRAY", (element,)),
            lambda row: [_convert(i.run(row), i.type, element, text) for i in items],
            text,
        )

    def _varmap(self, node: exp.VarMap) -> Typed:
        keys = [self.compile(e) for e in node.args["keys"].expressions]
        values = [self.compile(e) for e in node.args["values"].expressions]
        key_type = _common_type(keys, _sql(node)) if keys else NULL
        value_type = _common_type(values, _sql(node)) if values else NULL
        text = _sql(node)

        def run(row: Row) -> list:
            out: list[tuple[Any, Any]] = []
            for k, v in zip(keys, values):
                key = _convert(k.run(row), k.type, key_type, text)
                if key is None:
                    raise EditError(f"NULL_MAP_KEY: a map key cannot be NULL in {text!r}")
                if any(existing == key for existing, _ in out):
                    raise EditError(f"DUPLICATED_MAP_KEY: {key!r} appears twice in {text!r}")
                out.append((key, _convert(v.run(row), v.type, value_type, text)))
            return out

        return Typed(SqlType("MAP", (key_type, value_type)), run, text)

    _map = _varmap

    def _coalesce(self, node: exp.Coalesce) -> Typed:
        items = [self.compile(node.this)] + [self.compile(e) for e in node.expressions]
        result = _common_type(items, _sql(node))
        text = _sql(node)

        def run(row: Row) -> Any:
            for item in items:
                v = item.run(row)
                if v is not None:
                    return _convert(v, item.type, result, text)
            return None

        return Typed(result, run, text)

    def _concat(self, node: exp.Concat) -> Typed:
        items = [self.compile(e) for e in node.expressions]
        for item in items:
            if item.type not in (STRING, NULL):
                raise EditError(f"concat takes strings, got {item.type} ({item.sql}); CAST it AS STRING")

        def run(row: Row) -> Any:
            parts = [i.run(row) for i in items]
            return None if any(p is None for p in parts) else "".join(parts)

        return Typed(STRING, run, _sql(node))

    def _abs(self, node: exp.Abs) -> Typed:
        inner = self.compile(node.this)
        if not inner.type.numeric:
            raise EditError(f"abs takes a number, got {inner.type}")
        text = _sql(node)
        return Typed(
            inner.type,
            lambda row: None if inner.run(row) is None else _check_range(abs(inner.run(row)), inner.type, text),
            text,
        )

    def _upper(self, node: exp.Upper) -> Typed:
        return self._string_function(node, str.upper)

    def _lower(self, node: exp.Lower) -> Typed:
        return self._string_function(node, str.lower)

    def _string_function(self, node: exp.Func, fn: Callable[[str], str]) -> Typed:
        inner = self.compile(node.this)
        if inner.type not in (STRING, NULL):
            raise EditError(f"{node.sql_name().lower()} takes a string, got {inner.type}")
        return Typed(STRING, lambda row: None if inner.run(row) is None else fn(inner.run(row)), _sql(node))

    def _anonymous(self, node: exp.Anonymous) -> Typed:
        raise EditError(
            f"function {node.name}() is not supported in edits",
            hint="Supported functions: " + ", ".join(sorted(FUNCTIONS)),
        )


FUNCTIONS = ("named_struct", "array", "map", "coalesce", "concat", "abs", "upper", "lower", "if", "cast", "try_cast")


def _constant(value: Any) -> Compiled:
    def constant(row: Row) -> Any:
        return value

    return constant


def _column_getter(name: str) -> Compiled:
    def get(row: Row) -> Any:
        return row.get(name)

    return get


def _field_getter(parent: Compiled, name: str) -> Compiled:
    def get(row: Row) -> Any:
        value = parent(row)
        return None if value is None else value.get(name)

    return get


_LIKE_CACHE: dict[str, re.Pattern[str]] = {}


def _like_regex(pattern: str) -> re.Pattern[str]:
    compiled = _LIKE_CACHE.get(pattern)
    if compiled is None:
        out, i = [], 0
        while i < len(pattern):
            c = pattern[i]
            if c == "\\" and i + 1 < len(pattern):
                out.append(re.escape(pattern[i + 1]))
                i += 2
                continue
            out.append(".*" if c == "%" else "." if c == "_" else re.escape(c))
            i += 1
        compiled = _LIKE_CACHE[pattern] = re.compile("".join(out), re.DOTALL)
    return compiled


# ----------------------------------------------------------------------------- typing rules


def _comparison_key(value: Any) -> Any:
    """Numbers compare by value across int, Decimal and float; the rest as they are."""
    if isinstance(value, float) and math.isnan(value):
        return math.inf  # Spark orders NaN above every other number
    return value


def _comparable(a: SqlType, b: SqlType, text: str) -> None:
    if NULL in (a, b) or a == b or (a.numeric and b.numeric):
        return
    if {a.name, b.name} <= {"DATE", "TIMESTAMP", "TIMESTAMP_NTZ"}:
        return
    raise EditError(f"cannot compare {a} with {b} in {text!r}; CAST one side")


def _wider_integral(a: SqlType, b: SqlType) -> SqlType:
    return SqlType(max(a.name, b.name, key=INTEGRAL_ORDER.index))


def _as_decimal_type(t: SqlType) -> SqlType:
    return decimal(INTEGRAL_DECIMAL_PRECISION[t.name], 0) if t.integral else t


def _arithmetic_type(a: SqlType, b: SqlType, op: str, text: str) -> SqlType:
    if a == NULL or b == NULL:
        other = b if a == NULL else a
        if other == NULL:
            return DOUBLE if op == "/" else INT
        a = b = other
    if not (a.numeric and b.numeric):
        raise EditError(f"cannot apply {op} to {a} and {b} in {text!r}")
    if "DOUBLE" in (a.name, b.name) or "FLOAT" in (a.name, b.name):
        return SqlType("FLOAT") if a.name == b.name == "FLOAT" and op != "/" else DOUBLE
    if a.integral and b.integral:
        return DOUBLE if op == "/" else _wider_integral(a, b)
    # Spark's DecimalPrecision rules (allowPrecisionLoss=true).
    (p1, s1), (p2, s2) = _as_decimal_type(a).params, _as_decimal_type(b).params
    if op in ("+", "-"):
        scale = max(s1, s2)
        return _bounded_decimal(max(p1 - s1, p2 - s2) + scale + 1, scale)
    if op == "*":
        return _bounded_decimal(p1 + p2 + 1, s1 + s2)
    if op == "/":
        scale = max(6, s1 + p2 + 1)
        return _bounded_decimal(p1 - s1 + s2 + scale, scale)
    scale = max(s1, s2)
    return _bounded_decimal(min(p1 - s1, p2 - s2) + scale, scale)


def _bounded_decimal(precision: int, scale: int) -> SqlType:
    """Spark's adjustPrecisionScale: over 38 digits, keep the integral digits and at least 6 of scale."""
    if precision <= MAX_DECIMAL_PRECISION:
        return decimal(precision, scale)
    integral = precision - scale
    min_scale = min(scale, 6)
    return decimal(MAX_DECIMAL_PRECISION, max(MAX_DECIMAL_PRECISION - integral, min_scale))


def _arithmetic_value(a: Any, b: Any, op: str, ta: SqlType, tb: SqlType, result: SqlType, text: str) -> Any:
    if result.name in ("DOUBLE", "FLOAT"):
        x, y = float(a), float(b)
        if op == "/" or op == "%":
            if y == 0:
                raise EditError(f"{_BY_ZERO[op]}: division by zero in {text!r}")
            return x / y if op == "/" else math.fmod(x, y)
        return x + y if op == "+" else x - y if op == "-" else x * y
    if result.integral:
        if op == "%":
            if b == 0:
                raise EditError(f"{_BY_ZERO[op]}: division by zero in {text!r}")
            # Java's remainder takes the dividend's sign (Python's % takes the divisor's).
            value = abs(a) % abs(b) * (-1 if a < 0 else 1)
        else:
            value = a + b if op == "+" else a - b if op == "-" else a * b
        return _check_range(value, result, text)
    dx, dy = Decimal(a), Decimal(b)
    with localcontext() as ctx:
        ctx.prec = 80
        if op in ("/", "%") and dy == 0:
            raise EditError(f"{_BY_ZERO[op]}: division by zero in {text!r}")
        exact = (
            dx + dy
            if op == "+"
            else dx - dy
            if op == "-"
            else dx * dy
            if op == "*"
            else dx / dy
            if op == "/"
            else dx % dy
        )
    return _fit_decimal(exact, result, text)


# Spark's error conditions, which statecat's messages start with.
_BY_ZERO = {"/": "DIVIDE_BY_ZERO", "%": "REMAINDER_BY_ZERO"}


def _check_range(value: Any, t: SqlType, text: str) -> Any:
    if t.integral:
        low, high = INTEGRAL_RANGES[t.name]
        if not low <= value <= high:
            raise EditError(f"ARITHMETIC_OVERFLOW: {value} does not fit {t} in {text!r}")
    elif t.name == "DECIMAL":
        return _fit_decimal(value, t, text)
    return value


def _fit_decimal(value: Decimal, t: SqlType, text: str) -> Decimal:
    precision, scale = t.params
    with localcontext() as ctx:
        ctx.prec = 80
        try:
            quantized = Decimal(value).quantize(Decimal(1).scaleb(-scale), rounding=ROUND_HALF_UP)
        except InvalidOperation as exc:
            raise EditError(f"NUMERIC_VALUE_OUT_OF_RANGE: {value} does not fit {t} in {text!r}") from exc
    if len(quantized.as_tuple().digits) > precision and quantized != 0:
        raise EditError(f"NUMERIC_VALUE_OUT_OF_RANGE: {value} does not fit {t} in {text!r}")
    return quantized


def _common_type(items: Sequence[Typed], text: str) -> SqlType:
    result = NULL
    for item in items:
        t = item.type
        if result == NULL:
            result = t
        elif t == NULL or t == result:
            continue
        elif result.numeric and t.numeric:
            if "DOUBLE" in (result.name, t.name) or "FLOAT" in (result.name, t.name):
                result = DOUBLE
            elif result.integral and t.integral:
                result = _wider_integral(result, t)
            else:
                (p1, s1), (p2, s2) = _as_decimal_type(result).params, _as_decimal_type(t).params
                scale = max(s1, s2)
                result = _bounded_decimal(max(p1 - s1, p2 - s2) + scale, scale)
        else:
            raise EditError(f"{', '.join(str(i.type) for i in items)} have no common type in {text!r}")
    return result


def _assignable(source: SqlType, target: SqlType, what: str) -> None:
    """Spark's ANSI store assignment: numbers into numbers (checked at run time), like into like."""
    if source == NULL or source == target:
        return
    if source.numeric and target.numeric:
        return
    if source.name == "DATE" and target.name in ("TIMESTAMP", "TIMESTAMP_NTZ"):
        return
    if {source.name, target.name} == {"TIMESTAMP", "TIMESTAMP_NTZ"}:
        return
    if source.name == target.name == "ARRAY":
        _assignable(source.params[0], target.params[0], f"the elements of {what}")
        return
    if source.name == target.name == "MAP":
        _assignable(source.params[0], target.params[0], f"the keys of {what}")
        _assignable(source.params[1], target.params[1], f"the values of {what}")
        return
    if source.name == target.name == "STRUCT":
        names = [n for n, _ in source.params]
        wanted = [n for n, _ in target.params]
        if names != wanted:
            raise EditError(
                f"cannot assign a struct with fields ({', '.join(names)}) to {what}, whose fields are "
                f"({', '.join(wanted)}); name them in that order"
            )
        for (name, s), (_, t) in zip(source.params, target.params):
            _assignable(s, t, f"{what}.{name}")
        return
    raise EditError(f"cannot assign {source} to {what} ({target})")


def _caster(source: SqlType, target: SqlType, text: str) -> Callable[[Any], Any]:
    """CAST(x AS target): Spark's ANSI casts for the atomic types edits use."""
    if source == target or source == NULL:
        return lambda v: v
    if target.numeric and source.numeric:
        return lambda v: _convert(v, source, target, text)
    if target.numeric and source == STRING:

        def from_string(v: str) -> Any:
            s = v.strip()
            try:
                number: Any = Decimal(s) if target.name != "DOUBLE" and target.name != "FLOAT" else float(s)
            except (InvalidOperation, ValueError):
                raise EditError(f"CAST_INVALID_INPUT: {v!r} is not a valid {target} in {text!r}") from None
            if target.integral:
                if number != number.to_integral_value():
                    raise EditError(f"CAST_INVALID_INPUT: {v!r} is not a valid {target} in {text!r}")
                return _check_range(int(number), target, text)
            return _check_range(number, target, text) if target.name == "DECIMAL" else number

        return from_string
    if target == STRING:
        return lambda v: _to_string(v, source)
    if target == BOOLEAN and source == STRING:

        def to_bool(v: str) -> bool:
            s = v.strip().lower()
            if s in ("true", "t", "yes", "y", "1"):
                return True
            if s in ("false", "f", "no", "n", "0"):
                return False
            raise EditError(f"CAST_INVALID_INPUT: {v!r} is not a valid BOOLEAN in {text!r}")

        return to_bool
    if target.name == "DATE" and source == STRING:
        return lambda v: _parse_date(v, text)
    if target.name in ("TIMESTAMP", "TIMESTAMP_NTZ") and source == STRING:
        return lambda v: _parse_timestamp(v, target, text)
    if target.name in ("TIMESTAMP", "TIMESTAMP_NTZ") and source.name in ("DATE", "TIMESTAMP", "TIMESTAMP_NTZ"):
        return lambda v: _convert(v, source, target, text)
    raise EditError(f"cannot CAST {source} AS {target} in {text!r}")


def _to_string(v: Any, source: SqlType) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, Decimal):
        return format(v, "f")
    return str(v)


def _parse_date(v: str, text: str) -> dt.date:
    try:
        return dt.date.fromisoformat(v.strip())
    except ValueError:
        raise EditError(f"CAST_INVALID_INPUT: {v!r} is not a valid DATE in {text!r}") from None


def _parse_timestamp(v: str, target: SqlType, text: str) -> dt.datetime:
    try:
        parsed = dt.datetime.fromisoformat(v.strip())
    except ValueError:
        raise EditError(f"CAST_INVALID_INPUT: {v!r} is not a valid {target} in {text!r}") from None
    if target.name == "TIMESTAMP":
        # statecat's sessions run in UTC: a timestamp without a zone is UTC wall time.
        return parsed.replace(tzinfo=dt.UTC) if parsed.tzinfo is None else parsed.astimezone(dt.UTC)
    return parsed.replace(tzinfo=None)


def _convert(value: Any, source: SqlType, target: SqlType, text: str) -> Any:
    """A value of ``source`` stored as ``target`` (ANSI: out of range is an error, never a wrap)."""
    if value is None or source == target or source == NULL:
        return value
    if target.integral:
        if isinstance(value, float):
            if math.isnan(value) or math.isinf(value):
                raise EditError(f"CAST_OVERFLOW: {value} does not fit {target} in {text!r}")
            value = math.trunc(value)
        elif isinstance(value, Decimal):
            value = int(value.to_integral_value(rounding="ROUND_DOWN"))
        return _check_range(int(value), target, text)
    if target.name == "DECIMAL":
        if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
            raise EditError(f"CAST_OVERFLOW: {value} does not fit {target} in {text!r}")
        return _fit_decimal(Decimal(value) if not isinstance(value, float) else Decimal(repr(value)), target, text)
    if target.name in ("DOUBLE", "FLOAT"):
        return float(value)
    if target.name == "ARRAY" and source.name == "ARRAY":
        return [_convert(v, source.params[0], target.params[0], text) for v in value]
    if target.name == "MAP" and source.name == "MAP":
        return [
            (
                _convert(k, source.params[0], target.params[0], text),
                _convert(v, source.params[1], target.params[1], text),
            )
            for k, v in value
        ]
    if target.name == "STRUCT" and source.name == "STRUCT":
        return {name: _convert(value.get(name), s, t, text) for (name, s), (_, t) in zip(source.params, target.params)}
    if target.name in ("TIMESTAMP", "TIMESTAMP_NTZ"):
        if isinstance(value, dt.datetime):
            if target.name == "TIMESTAMP":
                return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value
            return value.astimezone(dt.UTC).replace(tzinfo=None) if value.tzinfo else value
        if isinstance(value, dt.date):
            stamp = dt.datetime(value.year, value.month, value.day)
            return stamp.replace(tzinfo=dt.UTC) if target.name == "TIMESTAMP" else stamp
    return value


def assign(typed: Typed, target: SqlType, what: str) -> Compiled:
    """The compiled expression as a value of column ``target``, after Spark's store-assignment check."""
    _assignable(typed.type, target, what)
    run = typed.run
    source = typed.type

    def assigned(row: Row) -> Any:
        return _convert(run(row), source, target, typed.sql)

    return assigned
