"""Differential test of `statecat write`'s edit engine (catalog/spark/edit_plan.py, edit_spark.py,
edits.py): Spark is the reference. Hundreds of seeded, generated expressions, each typed to the
column it is assigned to, are evaluated by Spark on SRC (``SELECT expr FROM t WHERE key = k``), then
written into the savepoint by UPDATE statements; the value read back from DST (without Spark) must
equal Spark's, in type and value, and nothing else may change. Expressions Spark rejects (an
overflow, a division by zero, an invalid cast, a string stored into a BIGINT, an unknown function,
a lambda of the wrong type) must make the write fail with Spark's error condition, writing nothing.
Statements that read other tables (a second savepoint, a Parquet file of corrections) must give
what Spark computes from the same data.

How the expressions are made cheap: each row of a table gets its own expression per column, in one
statement per table (``SET value.b = CASE key WHEN 'k_1' THEN e1 WHEN 'k_2' THEN e2 … END, …``).
Candidates are generated per (row, column), then pre-evaluated by Spark on SRC's rows (read through
the ``flinkstate`` source into a relation the driver holds, so that a query is answered without a
Spark job): those of another type, that Spark rejects, or whose value the state's Flink type cannot
hold (a Java char of two characters, an enum constant that does not exist, a NULL where Flink
writes a primitive) are set aside, and another candidate is drawn. The chosen ones' values are then
fetched as Arrow gives them, one query per table.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import random
import re
import struct
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from statecat.catalog.spark.edit_plan import EditError, edit_tables
from statecat.catalog.spark.edits import write_savepoint
from statecat.readers import SavepointReader, diff_savepoints
from statecat.statemeta.errors import StatecatError
from statecat.statemeta.model import load_state_meta
from tests.fixtures.expected import savepoint_dir
from tests.fixtures.spark_expressions import ENUM_COLORS, LITERALS, Gen, quoted

pytestmark = pytest.mark.spark

SEED = 20240229
MATRIX = "java_type_matrix_2.3_hashmap"  # Java POJOs, tuples, rows, primitives, times, arrays, enums, TTL
POJO = "datastream_java_pojo_2.3"  # a list of tuples and a map of POJOs, 98 keys
GROUPBY = "sql_groupby_hashmap_1.20"  # a SQL aggregate: STRUCT<f0 BIGINT, f1 BIGINT> per STRING key (300)
TYPES = "sql_types_2.3"  # a SQL join's records: a map keyed by rows of 29 SQL types (decimals among them)
# Spark's session time zone while the matrix is evaluated and written: not UTC, with historic offsets.
TIME_ZONE = "America/Sao_Paulo"
ROUNDS = 2  # candidates drawn per (row, column) at most
MIN_EXPRESSIONS = 500
THREADS = 3  # queries of the pre-evaluation in flight at once


# ----------------------------------------------------------------------------- what the state's types hold


def anything(value: Any) -> bool:
    return True


def not_null(value: Any) -> bool:
    """A POJO field of a primitive kind (statecat refuses NULL there: the class may declare a
    primitive), a Tuple field (Flink's TupleSerializer has no NULL), a TTL timestamp."""
    return value is not None


def java_char(value: Any) -> bool:
    return isinstance(value, str) and len(value) == 1 and not 0xD800 <= ord(value) <= 0xDFFF and ord(value) <= 0xFFFF


def java_char_value(value: Any) -> bool:  # a POJO's char field: never NULL (it may be a primitive)
    return not_null(value) and java_char(value)


NOT_NULL = (not_null, java_char_value)


def java_chars(value: Any) -> bool:  # char[]
    return value is None or all(java_char(c) for c in value)


def no_null_elements(value: Any) -> bool:  # int[], long[], double[], boolean[]
    return value is None or None not in value


def enum_constant(value: Any) -> bool:
    return value is None or value in ENUM_COLORS


TIME_TEXT = re.compile(r"([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d*[1-9])?")


def time_text(digits: int) -> Callable[[Any], bool]:
    """java.sql.Time (milliseconds) and LocalTime as statecat shows them: HH:MM:SS[.fraction],
    no trailing zeros. Other text that parses (12:00:00.000) is written, but reads back otherwise."""

    def holds(value: Any) -> bool:
        if value is None:
            return True
        match = TIME_TEXT.fullmatch(value)
        return match is not None and len(match.group(2) or ".") - 1 <= digits

    return holds


def whole_millis(value: Any) -> bool:  # java.util.Date
    return value is None or value.microsecond % 1000 == 0


def decimal_text(value: Any) -> bool:
    """A BigDecimal's plain text as statecat shows it: what Java's toPlainString gives back."""
    if value is None:
        return True
    if not re.fullmatch(r"-?(0|[1-9]\d*)(\.\d+)?", value):
        return False
    try:
        return not (Decimal(value).is_zero() and value.startswith("-"))
    except InvalidOperation:
        return False


def tuple_pairs(value: Any) -> bool:  # LIST<Tuple2<String, Long>>
    return value is None or all(p is not None and p["f0"] is not None and p["f1"] is not None for p in value)


def pojo_summaries(value: Any) -> bool:  # MAP<String, POJO{long count, String name, double total}>
    return value is None or all(v is not None and v["count"] is not None and v["total"] is not None for _, v in value)


# ----------------------------------------------------------------------------- what is edited


@dataclass(frozen=True)
class Target:
    """A column (or struct field) assigned in the table's UPDATE, and how candidates are drawn."""

    column: tuple[str, ...]  # ("value", "b"): SET value.b = …; ("value",): SET value = …
    make: Callable[[Gen], str] | None = None  # None: Gen.e of the column's Spark type
    holds: Callable[[Any], bool] = anything  # what the state's Flink type holds, beyond Spark's type

    @property
    def sql(self) -> str:
        return ".".join(self.column)


@dataclass(frozen=True)
class Table:
    name: str
    targets: tuple[Target, ...]


def fields(names: str, holds: Callable[[Any], bool] = anything) -> tuple[Target, ...]:
    return tuple(Target(("value", n), holds=holds) for n in names.split())


MATRIX_TABLES = (
    Table(  # POJO JavaTypeMatrix$Prims: every Java primitive and its box
        "prims",
        fields("b bo boxB boxBo boxD boxF boxI boxL boxSh d f i l sh", not_null)
        + (Target(("value", "ch"), Gen.char, java_char_value), Target(("value", "boxCh"), Gen.char, java_char_value)),
    ),
    Table(  # POJO JavaTypeMatrix$Times: LocalDate, LocalDateTime, Instant, java.sql.*, LocalTime, java.util.Date
        "times",
        fields("date dateTime instant sqlDate sqlTimestamp")
        + (
            Target(("value", "sqlTime"), Gen.time_text, time_text(3)),
            Target(("value", "time"), Gen.time_text, time_text(9)),
            Target(("value", "utilDate"), Gen.millis_timestamp, whole_millis),
        ),
    ),
    Table(  # POJO JavaTypeMatrix$ArrayFields: primitive arrays, Integer[], String[], byte[]
        "arrays",
        fields("booleans doubles ints longs", no_null_elements)
        + fields("boxes bytes strings")
        + (Target(("value", "chars"), holds=java_chars),),
    ),
    Table(  # POJO JavaTypeMatrix$Bag: an enum, a HashMap, an Integer, a String, an ArrayList
        "bag",
        fields("counts note tags")
        + (Target(("value", "color"), Gen.enum, enum_constant), Target(("value", "maybe"), holds=not_null)),
    ),
    Table("tuple5", fields("f0 f1 f2 f3 f4", not_null)),  # Tuple5<String, Integer, Long, Double, Boolean>
    Table("row", (Target(("value",), Gen.row_struct),)),  # Row(INT, STRING, DOUBLE, BOOLEAN): whole structs
    Table("big_dec", (Target(("value",), Gen.decimal_text, decimal_text),)),  # BigDecimal
    Table("ttl_count", (Target(("value",)), Target(("ttl_timestamp",), Gen.ttl_millis, not_null))),  # with TTL
)
# Expressions every run executes, besides the generated ones: (table, column, key) -> candidates.
PINNED = {
    # Doubles as text, as Spark writes them (a past bug: 71477500.0 must be '7.14775E7').
    ("tuple5", "value.f0", "k_0"): ["CAST(71477500.0D AS STRING)"],
    ("tuple5", "value.f0", "k_1"): ["CAST(value.f3 * 1234567.0D AS STRING)"],
    ("tuple5", "value.f0", "k_10"): ["CAST(CAST(value.f2 AS DOUBLE) / 3 AS STRING)"],
    ("tuple5", "value.f0", "k_11"): ["CAST(1.0E-5D * value.f1 AS STRING)"],
    ("bag", "value.note", "k_0"): ["CAST(TIMESTAMP'2024-02-29 12:34:56.123456' AS STRING)"],
    ("bag", "value.note", "k_1"): ["CAST(CAST(value.maybe AS DECIMAL(10, 2)) / 7 AS STRING)"],
    ("bag", "value.note", "k_10"): ["concat_ws('|', '', 'é€😀', value.note, '')"],
    ("tuple5", "value.f2", "k_0"): ["CAST(TIMESTAMP'2024-02-29 12:34:56.123456' AS BIGINT)"],
    ("tuple5", "value.f1", "k_0"): ["coalesce(try_cast('1_000' AS INT), try_cast('٣٤٥' AS INT), -1)"],
    ("prims", "value.i", "k_1"): ["hash(key, value.i, value.d)"],
    ("prims", "value.l", "k_0"): ["xxhash64(key, value.l)"],
    ("prims", "value.i", "k_0"): ["pmod(shiftleft(value.i, 3) | 5, 1000) + greatest(abs(value.sh), least(value.b, 0))"],
    ("arrays", "value.ints", "k_0"): [
        "if(array_contains(value.ints, 5), array_remove(value.ints, 5), sort_array(concat(value.ints, array(size(value.ints)))))"
    ],
    ("arrays", "value.strings", "k_0"): ["transform(filter(value.strings, s -> s IS NOT NULL), s -> upper(s) || '!')"],
    ("bag", "value.counts", "k_0"): [
        "map_concat(map_filter(value.counts, (k, v) -> v > 1), map_from_arrays(array('é€😀'), array(element_at(value.counts, 'ann'))))"
    ],
    ("bag", "value.counts", "k_1"): ["transform_values(value.counts, (k, v) -> v * 10 + length(k))"],
    ("times", "value.date", "k_0"): ["make_date(2024, 2, 29) + 1"],
    ("prims", "value.d", "k_0"): ["sqrt(abs(value.d)) + exp(value.d / 1000) - ln(abs(value.d) + 1) * pow(value.d, 2)"],
    ("times", "value.instant", "k_0"): ["timestamp_millis(unix_millis(value.instant) + 1)"],
}
POJO_TABLES = (
    Table("history", (Target(("value",), Gen.history, tuple_pairs),)),  # LIST<Tuple2<String, Long>>
    Table("per_name", (Target(("value",), Gen.per_name, pojo_summaries),)),  # MAP<String, POJO>
)


# ----------------------------------------------------------------------------- Spark's side


@dataclass
class Candidate:
    sql: str
    type: str | None = None  # Spark's type of it
    value: Any = None  # Spark's value of it on the row (pre-evaluation)
    status: str = "drawn"  # analysis | error (Spark rejects it) | type | domain (set aside) | ok
    condition: str | None = None  # Spark's error condition
    origin: str = "generated"  # generated | pinned (PINNED) | fallback (a literal, after ROUNDS)


@dataclass
class Slot:
    """One (row, column) of a table: the expression its UPDATE assigns there."""

    table: str
    key: Any
    target: Target
    type: str  # the column's Spark type
    candidates: list[Candidate] = field(default_factory=list)
    expected: Any = None  # Spark's SELECT of the chosen expression on SRC
    actual: Any = None  # the value read back from DST

    @property
    def key_sql(self) -> str:
        return quoted(self.key)

    @property
    def chosen(self) -> Candidate | None:
        return next((c for c in self.candidates if c.status == "ok"), None)

    @property
    def clears(self) -> bool:
        """The row's value becomes NULL or an empty list or map: Flink keeps no state for it."""
        return self.target.column == ("value",) and self.expected in (None, [])


def source(spark: Any, path: str, table: Any) -> Any:
    """SRC's state table as Spark reads it (the flinkstate source)."""
    return (
        spark.read.format("flinkstate")
        .option("path", path)
        .option("state", table.state.name)
        .option("operator", table.operator.id)
        .load()
    )


def column_types(schema: Any, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], str]:
    """Every column and struct field of a schema, by path: its Spark type."""
    from pyspark.sql.types import StructType

    out = {}
    for f in schema.fields:
        path = (*prefix, f.name)
        out[path] = f.dataType.simpleString()
        if isinstance(f.dataType, StructType) and not prefix:  # the value's fields (one level)
            out.update(column_types(f.dataType, path))
    return out


def environment(types: dict[tuple[str, ...], str]) -> dict[str, list[str]]:
    """What expressions may read, by type: the key, the value's fields, the TTL timestamp."""
    env: dict[str, list[str]] = {}
    for path, t in types.items():
        if path[0] != "namespace":
            env.setdefault(t, []).append(".".join(path))
    return env


def utf16(text: str) -> int:
    """Spark's offsets into SQL text count Java chars (UTF-16 code units)."""
    return len(text.encode("utf-16-le")) // 2


def error_condition(exc: BaseException) -> str:
    getter = getattr(exc, "getCondition", None)
    if getter is not None and getter():
        return getter()
    found = re.search(r"\[([A-Z][A-Z0-9_.]+)\]", str(exc))  # an unconverted error (Py4JJavaError)
    return found.group(1) if found else type(exc).__name__


def error_offsets(exc: BaseException) -> list[int]:
    """Where in the SQL text Spark says its error is: the query context, or a parse error's position."""
    out = []
    try:
        out += [c.startIndex() for c in exc.getQueryContext()]  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - not every error has one
        pass
    out += [int(m) for m in re.findall(r"\(line 1, pos (\d+)\)", str(exc))]
    return out


def spark_errors() -> tuple[type[BaseException], ...]:
    from py4j.protocol import Py4JJavaError
    from pyspark.errors.exceptions.captured import CapturedException

    return (CapturedException, Py4JJavaError)  # Py4JJavaError: Spark's INTERNAL_ERRORs


def evaluate_row(spark: Any, view: str, key_sql: str, candidates: list[Candidate]) -> None:
    """``SELECT c1, c2, … FROM view WHERE key = k`` (an in-memory copy of SRC's rows): each
    candidate's type and value, or Spark's error for it (found by the offset Spark reports, else by
    halving the list)."""
    pending = list(candidates)
    while pending:
        parts, spans, offset = [], [], utf16("SELECT ")
        for i, c in enumerate(pending):
            spans.append((offset, offset + utf16(c.sql), c))
            parts.append(f"{c.sql} AS c{i}")
            offset += utf16(parts[-1]) + utf16(", ")
        text = f"SELECT {', '.join(parts)} FROM {view} WHERE key = {key_sql}"
        failure: BaseException | None = None
        try:
            df = spark.sql(text)
            types = [f.dataType.simpleString() for f in df.schema.fields]
        except spark_errors() as exc:
            failure, stage = exc, "analysis"
        else:
            try:
                rows = [r.asDict() for r in df.collect()]
            except spark_errors() as exc:
                failure, stage = exc, "error"
            except (ValueError, OverflowError) as exc:  # a date or time Python cannot hold (year -21474)
                failure, stage = exc, "domain"
        if failure is not None:
            culprits = [c for start, end, c in spans for at in error_offsets(failure) if start <= at < end]
            if not culprits and len(pending) > 1:
                half = len(pending) // 2
                evaluate_row(spark, view, key_sql, pending[:half])
                evaluate_row(spark, view, key_sql, pending[half:])
                return
            culprit = culprits[0] if culprits else pending[0]
            culprit.status, culprit.condition = stage, error_condition(failure)
            if stage == "error":
                culprit.type = types[pending.index(culprit)]
            pending.remove(culprit)
            continue
        (row,) = rows
        for i, (c, t) in enumerate(zip(pending, types)):
            c.type, c.value, c.status = t, arrowish(row[f"c{i}"]), "evaluated"
        return


def arrowish(value: Any) -> Any:
    """A value PySpark collected in the form Arrow's to_pylist gives (structs as dicts, maps as
    lists of pairs), for the checks of what a state's type holds."""
    from pyspark.sql import Row

    if isinstance(value, Row):
        return {k: arrowish(v) for k, v in value.asDict().items()}
    if isinstance(value, dict):
        return [(arrowish(k), arrowish(v)) for k, v in value.items()]
    if isinstance(value, list):
        return [arrowish(v) for v in value]
    return value


def evaluate_slots(spark: Any, view: str, slots: list[Slot]) -> None:
    """The last candidate of each slot of one row, evaluated."""
    evaluate_row(spark, view, slots[0].key_sql, [s.candidates[-1] for s in slots])


@dataclass
class Edits:
    """One savepoint's generated edits: the slots, the statements, what was written."""

    case: str
    src: str
    tables: dict[str, Any]  # name -> EditTable
    slots: list[Slot]
    statements: list[str] = field(default_factory=list)
    result: Any = None
    dst: str = ""

    def chosen(self) -> list[Slot]:
        return [s for s in self.slots if s.chosen is not None]

    def candidates(self) -> list[tuple[Slot, Candidate]]:
        return [(s, c) for s in self.slots for c in s.candidates]


def draw(spark: Any, case: str, specs: Sequence[Table], rows: int) -> Edits:
    """Candidates for every (row, column) of the tables' first ``rows`` keys, pre-evaluated by Spark,
    until each slot has one of the column's type that Spark evaluates and the state's type holds (or
    ROUNDS are drawn)."""
    src = str(savepoint_dir(case))
    tables = edit_tables(load_state_meta(src))
    edits = Edits(case, src, tables, [])
    pool = ThreadPoolExecutor(THREADS)  # the driver analyses and evaluates a few rows' queries at once
    for spec in specs:
        df = source(spark, src, tables[spec.name])
        types = column_types(df.schema)
        env = environment(types)
        view = f"__differential_{spec.name}"
        # SRC's rows as the flinkstate source reads them, held by the driver (a LocalRelation): a query
        # of them is answered without a Spark job.
        spark.createDataFrame(df.toArrow(), schema=df.schema).createOrReplaceTempView(view)
        keys = sorted(r["key"] for r in spark.table(view).select("key").collect())[:rows]
        slots = [Slot(spec.name, k, t, types[t.column]) for k in keys for t in spec.targets]
        edits.slots += slots
        rng = random.Random(f"{SEED}:{case}:{spec.name}")
        for attempt in range(ROUNDS + 1):
            pending = [s for s in slots if s.chosen is None]
            if attempt == ROUNDS:  # a literal where the old value may not stay (a NULL in a primitive's field)
                pending = [s for s in pending if s.target.holds in NOT_NULL]
            for slot in pending:
                gen = Gen(rng, env)
                pinned = PINNED.get((spec.name, slot.target.sql, slot.key), ())
                origin = "pinned" if attempt < len(pinned) else "fallback" if attempt == ROUNDS else "generated"
                if origin == "pinned":
                    sql = pinned[attempt]
                elif origin == "fallback":
                    sql = "'x'" if slot.target.make is Gen.char else LITERALS[slot.type][0][-1]
                else:
                    sql = slot.target.make(gen) if slot.target.make else gen.e(slot.type, rng.choice([1, 2, 2]))
                    if slot.target.holds is not_null and slot.type in LITERALS and rng.random() < 0.7:
                        sql = f"coalesce({sql}, {gen.lit(slot.type)})"  # a NULL there is refused: mostly none
                slot.candidates.append(Candidate(sql, origin=origin))
            by_key = [[s for s in pending if s.key == key] for key in dict.fromkeys(s.key for s in pending)]
            list(pool.map(partial(evaluate_slots, spark, view), by_key))
            for row in by_key:
                for slot in row:
                    c = slot.candidates[-1]
                    if c.status == "evaluated":
                        c.status = "type" if c.type != slot.type else "ok" if slot.target.holds(c.value) else "domain"
    pool.shutdown()
    return edits


def expect(spark: Any, edits: Edits, specs: Sequence[Table]) -> None:
    """Spark's values of the chosen expressions on SRC's rows, as Arrow gives them: per table,
    ``SELECT expr, … FROM t WHERE key = k`` for every row, as one UNION ALL (each column has the same
    type in every row)."""
    for spec in specs:
        view = f"__differential_{spec.name}"  # draw's copy of SRC's rows
        rows: dict[Any, list[Slot]] = {}
        for slot in edits.chosen():
            if slot.table == spec.name:
                rows.setdefault(slot.key, []).append(slot)
        # Rows differ in which columns they assign: one UNION ALL per shape of row.
        shapes: dict[tuple[Target, ...], list[Any]] = {}
        for key, slots in rows.items():
            shapes.setdefault(tuple(s.target for s in slots), []).append(key)
        for keys in shapes.values():
            branches = []
            for key in keys:
                columns = ", ".join(f"{s.chosen.sql} AS c{i}" for i, s in enumerate(rows[key]))
                branches.append(f"SELECT {quoted(key)} AS __key, {columns} FROM {view} WHERE key = {quoted(key)}")
            for row in spark.sql(" UNION ALL ".join(branches)).toArrow().to_pylist():
                for i, slot in enumerate(rows[row["__key"]]):
                    slot.expected = row[f"c{i}"]
        spark.catalog.dropTempView(view)


def update_statement(spec: Table, slots: Sequence[Slot]) -> str | None:
    """One UPDATE giving each row its own expression per column."""
    sets, keys = [], []
    for target in spec.targets:
        whens = [f"WHEN {s.key_sql} THEN {s.chosen.sql}" for s in slots if s.target == target and s.chosen]
        if whens:
            sets.append(f"{target.sql} = CASE key {' '.join(whens)} ELSE {target.sql} END")
    for s in slots:
        if s.chosen and s.key_sql not in keys:
            keys.append(s.key_sql)
    if not sets:
        return None
    return f"UPDATE {spec.name} SET {', '.join(sets)} WHERE key IN ({', '.join(keys)})"


def at(row: dict[str, Any], column: tuple[str, ...]) -> Any:
    value: Any = row
    for name in column:
        value = value[name]
    return value


def write(spark: Any, edits: Edits, specs: Sequence[Table], dst: Path) -> None:
    for spec in specs:
        statement = update_statement(spec, [s for s in edits.slots if s.table == spec.name])
        if statement:
            edits.statements.append(statement)
    edits.dst = str(dst)
    edits.result = write_savepoint(edits.src, edits.dst, sql=edits.statements, spark=spark)
    reader = SavepointReader(edits.dst)
    for spec in specs:
        table = edits.tables[spec.name]
        rows = {r["key"]: r for r in reader.table(table.state.name, table.operator.id).to_pylist()}
        for slot in edits.chosen():
            if slot.table == spec.name:
                slot.actual = at(rows[slot.key], slot.target.column) if slot.key in rows else ABSENT


class _Absent:
    def __repr__(self) -> str:
        return "<no row>"


ABSENT = _Absent()


def canonical(value: Any) -> Any:
    """A value with its Python type, exactly: floats by their bits (NaN as NaN), instants in UTC,
    maps (Arrow's lists of pairs) without their order."""
    if value is None or value is ABSENT:
        return value
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, float):
        return ("float", "nan" if math.isnan(value) else struct.pack(">d", value))
    if isinstance(value, dt.datetime):
        aware = value.tzinfo is not None
        return ("datetime", aware, value.astimezone(dt.UTC) if aware else value)
    if isinstance(value, dict):
        return ("struct", tuple((k, canonical(v)) for k, v in value.items()))
    if isinstance(value, list):
        if value and all(isinstance(x, tuple) and len(x) == 2 for x in value):
            return ("map", tuple(sorted(((canonical(k), canonical(v)) for k, v in value), key=repr)))
        return ("list", tuple(canonical(x) for x in value))
    return (type(value).__name__, value)


@contextmanager
def session_time_zone(spark: Any, zone: str) -> Iterator[None]:
    previous = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", zone)
    try:
        yield
    finally:
        spark.conf.set("spark.sql.session.timeZone", previous)


@contextmanager
def quiet_errors() -> Iterator[None]:
    """PySpark logs every failing query with its stack trace; the candidates Spark rejects are expected."""
    from pyspark.logger import PySparkLogger

    from statecat.catalog.servers.sessions import PYTHON_ERROR_ECHO_LOGGERS

    loggers = [PySparkLogger.getLogger(name) for name in PYTHON_ERROR_ECHO_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def cleared_rows(edits: Edits) -> set[tuple[str, Any]]:
    """Rows whose value becomes NULL or an empty list or map: Flink keeps no state for them."""
    return {(s.table, s.key) for s in edits.chosen() if s.clears}


def mismatches(edits: Edits) -> list[str]:
    cleared = cleared_rows(edits)
    out = []
    for slot in edits.chosen():
        expected = ABSENT if (slot.table, slot.key) in cleared else slot.expected
        if canonical(slot.actual) != canonical(expected):
            out.append(
                f"{slot.table}.{slot.target.sql} of key {slot.key!r}: DST holds {slot.actual!r}, Spark gives "
                f"{expected!r} for {slot.chosen.sql}"
            )
    return out


def expected_changes(edits: Edits) -> set[tuple[str, Any, str]]:
    """(table, key, change) of the rows whose value the statements change (diff compares values)."""
    reader = SavepointReader(edits.src)
    old = {}
    for name in {s.table for s in edits.slots}:
        table = edits.tables[name]
        old[name] = {r["key"]: r for r in reader.table(table.state.name, table.operator.id).to_pylist()}
    cleared = cleared_rows(edits)
    out = set()
    for slot in edits.chosen():
        if (slot.table, slot.key) in cleared:
            out.add((slot.table, slot.key, "removed"))
        elif slot.target.column[0] == "value":
            if canonical(at(old[slot.table][slot.key], slot.target.column)) != canonical(slot.expected):
                out.add((slot.table, slot.key, "changed"))
    return out


# ----------------------------------------------------------------------------- the fixtures


@pytest.fixture(scope="module")
def spark():
    from statecat.catalog.servers.sessions import session

    return session()


@pytest.fixture(scope="module")
def matrix(spark, tmp_path_factory) -> Edits:
    """The Java type matrix's states edited by 11 keys' generated expressions, in a session whose time
    zone is not UTC (timestamps with a time zone are instants; their text is the session's)."""
    with session_time_zone(spark, TIME_ZONE), quiet_errors():
        edits = draw(spark, MATRIX, MATRIX_TABLES, rows=11)
        expect(spark, edits, MATRIX_TABLES)
        write(spark, edits, MATRIX_TABLES, tmp_path_factory.mktemp("matrix") / "dst")
    return edits


@pytest.fixture(scope="module")
def pojo(spark, tmp_path_factory) -> Edits:
    """A Java job's list of tuples and map of POJOs, edited by 20 keys' lambdas."""
    with quiet_errors():
        edits = draw(spark, POJO, POJO_TABLES, rows=20)
        expect(spark, edits, POJO_TABLES)
        write(spark, edits, POJO_TABLES, tmp_path_factory.mktemp("pojo") / "dst")
    return edits


@pytest.fixture(params=["matrix", "pojo"])
def edits(request) -> Edits:
    return request.getfixturevalue(request.param)


# ----------------------------------------------------------------------------- (a) what Spark evaluates


COVERED = (  # functions and forms every run executes (the generator is seeded: a failure names what is new)
    *("abs(", "greatest(", "least(", "pmod(", "shiftleft(", " & ", " | ", " ^ ", "~ ", "hash("),
    *("DECIMAL(", "BD", "round(", "CAST(", "try_cast("),
    *("sqrt(", "exp(", "ln(", "pow(", "AS STRING)"),
    *("substring(", "regexp_replace(", "trim(", "concat_ws(", " || ", "upper(", "lpad(", "replace(", "split("),
    *("element_at(", "'é€😀'", "''"),
    *("date_add(", "unix_millis(", "date_format(", "make_date(", "TIMESTAMP'", "TIMESTAMP_NTZ'", "timestampadd("),
    *("array_remove(", "array_contains(", "filter(", "transform(", "concat(", "size(", "sort_array(", "array("),
    *("map_filter(", "map_concat(", "map_from_arrays(", "transform_values(", "map("),
    *("named_struct(", "coalesce(", "nvl(", "NULL", "if(", "CASE WHEN", "->"),
)
SPARK_TYPES = ("tinyint", "smallint", "int", "bigint", "float", "double", "string", "boolean", "date")
SPARK_TYPES += ("timestamp", "timestamp_ntz", "binary", "array<", "map<", "struct<")


def executed(*edits: Edits) -> list[Slot]:
    return [s for e in edits for s in e.chosen() if s.chosen.origin != "fallback"]


def test_at_least_500_generated_expressions_of_every_type(matrix, pojo):
    slots = executed(matrix, pojo)
    assert len(slots) >= MIN_EXPRESSIONS
    text = "\n".join(s.chosen.sql for s in slots)
    assert [f for f in COVERED if f not in text] == []
    assert [t for t in SPARK_TYPES if not any(s.type.startswith(t) for s in slots)] == []
    values = [s.expected for s in slots]
    strings = [v for v in values if isinstance(v, str)]
    assert "" in strings and any(not v.isascii() for v in strings) and any(ord(c) > 0xFFFF for v in strings for c in v)
    assert sum(v is None for v in values) >= 10  # NULLs written
    assert sum("->" in s.chosen.sql for s in slots) >= 50  # lambdas
    assert sum("DECIMAL(" in s.chosen.sql or "BD" in s.chosen.sql for s in slots) >= 15  # decimals computed
    rejected = [c for e in (matrix, pojo) for _, c in e.candidates() if c.status in ("analysis", "error")]
    assert len(rejected) >= 10  # and Spark's refusals were drawn too (see test_rejected_statements)


def test_values_read_back_equal_spark(edits):
    """Every generated expression's value in DST is Spark's SELECT of it on SRC, in type and value."""
    assert mismatches(edits) == []
    assert all(s.chosen.type == s.type for s in edits.chosen())  # typed exactly as the column


def test_doubles_as_text_are_spark(matrix):
    (slot,) = [s for s in matrix.chosen() if s.chosen.sql == "CAST(71477500.0D AS STRING)"]
    assert slot.expected == slot.actual == "7.14775E7"


def test_only_the_edited_rows_changed(edits):
    """Other rows, other states and other operators are as in SRC; statements matched their rows."""
    changes = {(c.table, c.key, c.change) for c in diff_savepoints(edits.src, edits.dst).changes()}
    assert changes == expected_changes(edits)
    rows = Counter(s.table for s in {(s.table, s.key): s for s in edits.chosen()}.values())
    assert [s.matched for s in edits.result.statements] == [rows[s.table.name] for s in edits.result.statements]


# ----------------------------------------------------------------------------- (b) what Spark rejects

# One write per error class. The expression is one the generator drew and Spark rejected with that
# condition when the seed drew one (the shortest), else the one given here: (table, column, key,
# expression). Store assignment (a STRING into a BIGINT, a BIGINT beyond INT) is the write's own.
REJECTIONS = {
    "ARITHMETIC_OVERFLOW": ("prims", "value.i", "k_12", "value.i * 2147483647"),
    "DIVIDE_BY_ZERO": ("prims", "value.l", "k_12", "value.l div (value.i - value.i)"),
    "CAST_INVALID_INPUT": ("prims", "value.i", "k_12", "CAST(concat(value.ch, '1') AS INT)"),
    "INCOMPATIBLE_DATA_FOR_TABLE": ("prims", "value.l", "k_12", "concat('1', value.ch)"),
    "CAST_OVERFLOW_IN_TABLE_INSERT": ("prims", "value.i", "k_12", "value.l * 10"),
    "UNRESOLVED_ROUTINE": ("prims", "value.i", "k_12", "no_such_function(value.i)"),
    "DATATYPE_MISMATCH": ("arrays", "value.ints", "k_12", "filter(value.ints, x -> x + 1)"),  # a lambda of INT
}
STORE_ASSIGNMENT = ("INCOMPATIBLE_DATA_FOR_TABLE", "CAST_OVERFLOW_IN_TABLE_INSERT")


def rejection(edits: Edits, error: str) -> tuple[str, str, Any, str, bool]:
    """(table, column, key, expression, drawn): what the error class's write assigns."""
    drawn = [
        (slot, c)
        for slot, c in edits.candidates()
        if c.status == "error" and c.type == slot.type and (c.condition or "").split(".")[0] == error
    ]
    if not drawn:
        return (*REJECTIONS[error], False)
    slot, c = min(drawn, key=lambda sc: (len(sc[1].sql), sc[1].sql))
    return slot.table, slot.target.sql, slot.key, c.sql, True


@pytest.mark.parametrize("error", list(REJECTIONS))
def test_rejected_statements(spark, matrix, tmp_path, error):
    """A statement Spark rejects fails the write with Spark's error condition, and writes nothing."""
    table, column, key, expression, drawn = rejection(matrix, error)
    statement = f"UPDATE {table} SET {column} = {expression} WHERE key = {quoted(key)}"
    dst = tmp_path / "dst"
    with quiet_errors(), pytest.raises(EditError) as refused:
        write_savepoint(matrix.src, str(dst), sql=[statement], spark=spark)
    assert f"[{error}" in refused.value.message and table in refused.value.message
    assert list(tmp_path.iterdir()) == []  # no DST, no scratch directory
    if error not in STORE_ASSIGNMENT and not drawn:  # Spark's own SELECT of it on SRC fails alike (as drawn ones did)
        view = f"__differential_rejected_{table}"
        source(spark, matrix.src, matrix.tables[table]).createOrReplaceTempView(view)
        try:
            with quiet_errors(), pytest.raises(spark_errors()) as selected:
                spark.sql(f"SELECT {expression} FROM {view} WHERE key = {quoted(key)}").collect()
        finally:
            spark.catalog.dropTempView(view)
        assert error_condition(selected.value).split(".")[0] == error


def test_a_value_the_state_type_cannot_hold_is_refused(spark, tmp_path):
    """Spark's STRING holds 'ab'; a Java char does not: refused, nothing written."""
    dst = tmp_path / "dst"
    with pytest.raises(StatecatError, match=r"CHAR.*value\.ch"):
        write_savepoint(
            str(savepoint_dir(MATRIX)),
            str(dst),
            sql=["UPDATE prims SET value.ch = 'ab' WHERE key = 'k_5'"],
            spark=spark,
        )
    assert list(tmp_path.iterdir()) == []


def test_an_update_keeps_the_nulls_a_pojo_holds(spark, tmp_path):
    src = str(savepoint_dir(MATRIX))
    table = edit_tables(load_state_meta(src))["prims"]
    (old,) = [
        r for r in SavepointReader(src).table(table.state.name, table.operator.id).to_pylist() if r["key"] == "k_10"
    ]
    assert old["value"]["boxB"] is None  # Flink wrote a NULL Byte: the field is no primitive
    write_savepoint(
        src, str(tmp_path / "dst"), sql=["UPDATE prims SET value.i = value.i + 1 WHERE key = 'k_10'"], spark=spark
    )
    rows = SavepointReader(str(tmp_path / "dst")).table(table.state.name, table.operator.id).to_pylist()
    (new,) = [r for r in rows if r["key"] == "k_10"]
    assert new["value"] == {**old["value"], "i": old["value"]["i"] + 1}


@pytest.mark.xfail(
    strict=True,
    reason="engine: an UPDATE of left_records (even SET value = value) is refused: the INSERT INTO of edit_spark.py's "
    "Parquet view rebuilds the map's ROW keys (one field is a MAP) with map_from_arrays, which Spark refuses "
    "(DATATYPE_MISMATCH.INVALID_MAP_KEY_TYPE, reported as 'Spark refused' the user's statement)",
)
def test_decimals_in_a_map_keyed_by_rows(spark, tmp_path):
    """sql_types_2.3's join records: a MAP keyed by ROWs of 29 SQL types, DECIMAL(10, 2) and DECIMAL(30, 10)
    among them. Lambdas over the keys' decimals give each record's count and keep or drop records."""
    src = str(savepoint_dir(TYPES))
    table = edit_tables(load_state_meta(src))["left_records"]
    view = "__differential_left_records"
    df = source(spark, src, table)
    spark.createDataFrame(df.toArrow(), schema=df.schema).createOrReplaceTempView(view)
    keys = [r["key"] for r in spark.table(view).select("key").collect()]
    rng = random.Random(f"{SEED}:{TYPES}")
    env = {"decimal": ["k.f13", "k.f14"], "int": ["v", "k.f1", "k.f9"], "bigint": ["k.f10"], "double": ["k.f12"]}
    expressions = {}
    with quiet_errors():
        for key in keys:
            key_sql = f"named_struct('f0', {quoted(key.f0)}, 'f1', {key.f1})"
            for _ in range(ROUNDS):  # the first that Spark evaluates on the row (size(): without Arrow's job)
                gen = Gen(rng, env)
                keep = f"coalesce({gen.e('decimal', 2)} > {gen.lit('decimal')}, k.f14 IS NULL)"
                count = gen.cast(f"pmod({gen.e('decimal', 2)}, 1000)", "int")
                expression = f"transform_values(map_filter(value, (k, v) -> {keep}), (k, v) -> coalesce({count}, v))"
                try:
                    spark.sql(f"SELECT size({expression}) FROM {view} WHERE key = {key_sql}").collect()
                except spark_errors():
                    continue
                expressions[key_sql] = expression
                break
    assert len(expressions) >= 10
    branches = [f"SELECT key, {e} AS value FROM {view} WHERE key = {k}" for k, e in expressions.items()]
    expected = {
        (r["key"]["f0"], r["key"]["f1"]): r["value"]
        for r in spark.sql(" UNION ALL ".join(branches)).toArrow().to_pylist()
    }
    spark.catalog.dropTempView(view)
    cases = " ".join(f"WHEN {k} THEN {e}" for k, e in expressions.items())
    statement = f"UPDATE left_records SET value = CASE key {cases} END WHERE key IN ({', '.join(expressions)})"
    write_savepoint(src, str(tmp_path / "dst"), sql=[statement], spark=spark)
    rows = SavepointReader(str(tmp_path / "dst")).table(table.state.name, table.operator.id).to_pylist()
    actual = {(r["key"]["f0"], r["key"]["f1"]): r["value"] for r in rows}
    assert {k: canonical(actual.get(k, ABSENT)) for k in expected} == {
        k: canonical(v if v else ABSENT)
        for k, v in expected.items()  # an empty map: Flink keeps no state
    }


# ----------------------------------------------------------------------------- (c) statements reading other tables

GROUPBY_OTHER = "sql_groupby_hashmap_2.3"  # the same job on Flink 2.3: another savepoint


@pytest.fixture
def accstate(spark):
    """SRC's accstate (GROUPBY) as Spark reads it, and its table."""
    src = str(savepoint_dir(GROUPBY))
    table = edit_tables(load_state_meta(src))["accstate"]
    source(spark, src, table).createOrReplaceTempView("__differential_accstate")
    yield src, table
    spark.catalog.dropTempView("__differential_accstate")


@pytest.fixture
def corrections(spark, tmp_path):
    """A Parquet file of corrections written by pyarrow (keys of SRC, and keys it lacks), as a temporary view."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "corrections" / "corrections.parquet"
    path.parent.mkdir()
    keys = ["key_500", "key_507", "key_799", "key_missing", "clé-é€😀"]
    pq.write_table(pa.table({"key": keys, "n": pa.array([100, -7, 0, 42, 5], pa.int64())}), path)
    spark.read.parquet(str(path)).createOrReplaceTempView("corrections")
    yield path
    spark.catalog.dropTempView("corrections")


def written_rows(dst: Path, table: Any) -> dict[Any, Any]:
    rows = SavepointReader(str(dst)).table(table.state.name, table.operator.id).to_pylist()
    assert len({r["key"] for r in rows}) == len(rows)
    return {r["key"]: canonical(r["value"]) for r in rows}


def spark_rows(spark: Any, query: str) -> dict[Any, Any]:
    rows = spark.sql(query).toArrow().to_pylist()
    assert len({r["key"] for r in rows}) == len(rows)
    return {r["key"]: canonical(r["value"]) for r in rows}


def test_insert_rows_of_another_savepoint(spark, accstate, tmp_path):
    src, table = accstate
    other = str(savepoint_dir(GROUPBY_OTHER))
    source(spark, other, edit_tables(load_state_meta(other))["accstate"]).createOrReplaceTempView("other_accstate")
    try:
        select = (
            "SELECT concat('v2.3:', key) AS key, named_struct('f0', value.f0 * 10, 'f1', value.f1 - value.f0) AS value "
            "FROM other_accstate WHERE value.f0 % 7 = 1"
        )
        inserted = spark_rows(spark, select)
        expected = {**spark_rows(spark, "SELECT key, value FROM __differential_accstate"), **inserted}
        result = write_savepoint(
            src, str(tmp_path / "dst"), sql=[f"INSERT INTO accstate (key, value) {select}"], spark=spark
        )
    finally:
        spark.catalog.dropTempView("other_accstate")
    assert [s.matched for s in result.statements] == [len(inserted)] and inserted
    assert written_rows(tmp_path / "dst", table) == expected
    changes = {(c.table, c.change) for c in diff_savepoints(src, str(tmp_path / "dst")).changes()}
    assert changes == {("accstate", "added")}


def test_delete_the_keys_of_a_parquet_file(spark, accstate, corrections, tmp_path):
    src, table = accstate
    keys = f"SELECT key FROM parquet.`{corrections}`"
    expected = spark_rows(spark, f"SELECT key, value FROM __differential_accstate WHERE key NOT IN ({keys})")
    result = write_savepoint(
        src, str(tmp_path / "dst"), sql=[f"DELETE FROM accstate WHERE key IN ({keys})"], spark=spark
    )
    assert [s.matched for s in result.statements] == [3]  # key_missing and the other are no keys of SRC
    assert written_rows(tmp_path / "dst", table) == expected


def test_merge_corrections(spark, accstate, corrections, tmp_path):
    src, table = accstate
    statement = (
        "MERGE INTO accstate t USING corrections c ON t.key = c.key "
        "WHEN MATCHED THEN UPDATE SET value.f0 = c.n "
        "WHEN NOT MATCHED THEN INSERT (key, value) VALUES (c.key, named_struct('f0', c.n, 'f1', 0))"
    )
    expected = spark_rows(
        spark,
        "SELECT coalesce(t.key, c.key) AS key, CASE WHEN c.key IS NULL THEN t.value "
        "WHEN t.key IS NULL THEN named_struct('f0', c.n, 'f1', 0L) ELSE named_struct('f0', c.n, 'f1', t.value.f1) END "
        "AS value FROM __differential_accstate t FULL OUTER JOIN corrections c ON t.key = c.key",
    )
    result = write_savepoint(src, str(tmp_path / "dst"), sql=[statement], spark=spark)
    assert [s.matched for s in result.statements] == [5]
    assert written_rows(tmp_path / "dst", table) == expected


def test_update_from_a_correlated_subquery(spark, accstate, corrections, tmp_path):
    src, table = accstate
    statement = (
        "UPDATE accstate SET value.f1 = (SELECT c.n FROM corrections c WHERE c.key = accstate.key) "
        "WHERE key IN (SELECT key FROM corrections)"
    )
    expected = spark_rows(
        spark,
        "SELECT t.key, CASE WHEN c.key IS NULL THEN t.value ELSE named_struct('f0', t.value.f0, 'f1', c.n) END AS value "
        "FROM __differential_accstate t LEFT JOIN corrections c ON t.key = c.key",
    )
    result = write_savepoint(src, str(tmp_path / "dst"), sql=[statement], spark=spark)
    assert [s.matched for s in result.statements] == [3]
    assert written_rows(tmp_path / "dst", table) == expected
    changes = {(c.table, c.key, c.change) for c in diff_savepoints(src, str(tmp_path / "dst")).changes()}
    assert changes == {("accstate", k, "changed") for k in ("key_500", "key_507", "key_799")}
