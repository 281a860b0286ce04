"""Spark evaluates state edits: every expression, cast, function, subquery and error is Spark's.

Each edited state table gets a working copy in Spark: the rows of SRC the statements can touch
(the keys a ``key = …`` / ``key IN (…)`` names, else the whole table), read through the
``flinkstate`` source. The table's name is a temporary view of that copy, so the statements'
own text runs against it; each statement's result is written into a Parquet temporary view of the
table's schema with ``INSERT INTO``, so Spark's store assignment (ANSI: a STRING into a BIGINT is
refused, a BIGINT out of INT's range fails) types every value as ``UPDATE`` or ``INSERT`` would,
and becomes the next statement's input:

- ``UPDATE t SET c = e WHERE p``: the rows where ``p`` holds, with ``c`` replaced by ``e`` (a struct
  field ``c.f`` by a struct of the old fields and ``e``; every SET sees the old row), then the rest;
- ``DELETE FROM t WHERE p``: the rows where ``p`` does not hold;
- ``INSERT INTO t …``: the rows, then the statement itself, its target the Parquet view;
- ``MERGE INTO t USING s ON c WHEN …``: Delta's and Spark's MERGE: a target row matched by two
  source rows is an error when a WHEN MATCHED clause applies; the first clause whose condition
  holds acts; ``UPDATE SET *`` / ``INSERT *`` take the source's columns by name.

The result per table is what changed: Spark compares the copy's rows before and after the
statements and writes the rows gone and the rows new by key-group (edit_changes.py), which
writers/savepoint_writer.py applies key-group by key-group.
Unqualified names of SRC's other tables mean SRC's state; qualified names mean the catalog's tables.
"""

from __future__ import annotations

import itertools
import os
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from sqlglot import exp
from sqlglot.dialects.spark import Spark
from sqlglot.tokens import Token, TokenType

from statecat.catalog.spark.edit_changes import (
    ADDED,
    HELD_ROWS,
    REMOVED,
    SIDE,
    TableChanges,
    compare_held,
    compute_changes,
)
from statecat.catalog.spark.edit_plan import EditError, EditTable, PlannedStatement, edit_tables
from statecat.readers.codecs.arrow_types import state_schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructType

    from statecat.statemeta.model import StateMeta

# Temporary views this module creates besides the state tables' names; a run removes its own.
VIEW_PREFIX = "__statecat_edit_"
# The column that says whether a row matched a statement's WHERE.
MATCHED = "`__statecat_matched`"
# MERGE's row numbers of the target and the source, and the WHEN clause acting on a row.
TARGET_ROW, SOURCE_ROW, CLAUSE = "`__statecat_target_row`", "`__statecat_source_row`", "`__statecat_clause`"


# Spark's settings that, when LEGACY, write Parquet dates and timestamps in the hybrid calendar.
_REBASE_CONFS = ("spark.sql.parquet.datetimeRebaseModeInWrite", "spark.sql.parquet.int96RebaseModeInWrite")
# Where a statement's rows are counted: its copies (a Parquet directory, or the rows held in this
# process), each with the column saying which rows acted.
Counted = list[tuple["str | pa.Table", str | None]]


@dataclass(frozen=True)
class SourceTables:
    """How Spark reads SRC's tables: the flinkstate options every view of SRC carries."""

    path: str
    descriptors: str | None = None  # a descriptor file
    classpath: tuple[str, ...] = ()

    @property
    def state_source(self) -> tuple[str, str | None, tuple[str, ...]]:
        """What Spark's tasks load SRC's StateMeta from."""
        return (self.path, self.descriptors, self.classpath)

    def read(self, spark: SparkSession, table: EditTable) -> DataFrame:
        from pyspark.sql.functions import col

        reader = (
            spark.read.format("flinkstate")
            .option("path", self.path)
            .option("state", table.state.name)
            .option("operator", table.operator.id)
        )
        if self.descriptors:
            reader = reader.option("descriptors", self.descriptors)
        if self.classpath:
            reader = reader.option("classpath", os.pathsep.join(self.classpath))
        df = reader.load()
        # Without the flinkstate table's column metadata: the copies are plain data, not SRC's tables.
        return df.select([col(f"`{name}`").alias(name, metadata={}) for name in df.columns])


def evaluate(
    spark: SparkSession, meta: StateMeta, source: SourceTables, planned: Sequence[PlannedStatement], scratch: str
) -> list[TableChanges]:
    """Runs ``planned`` in order in Spark; the changes of each table they changed. ``scratch``: a
    directory Spark's executors and this process both reach, for the Parquet views and the changes
    (removed by the caller once the changes are written)."""
    run = _Run(spark, meta, source, scratch)
    try:
        return run.all(planned)
    finally:
        run.drop_views()


class _Run:
    def __init__(self, spark: SparkSession, meta: StateMeta, source: SourceTables, scratch: str) -> None:
        self.spark = spark
        self.meta = meta
        self.source = source
        self.scratch = scratch
        self.tables = edit_tables(meta)
        self.views: list[str] = []
        self.counter = itertools.count()
        self.copies: dict[int, str | pa.Table] = {}  # a copy's DataFrame (by id) -> its rows, where they are
        self.sinks: dict[str, str] = {}  # a sink's view name -> its Parquet directory
        # table -> the flagged copy of its first statement, when that was an UPDATE or DELETE
        self.first_copies: dict[str, DataFrame] = {}
        self.seen: set[str] = set()
        self.pinned: set[str] = set()  # tables whose statements reach only the keys they name
        # table -> its one statement's held flagged rows and Parquet sink (None: a DELETE's)
        self.held: dict[str, tuple[pa.Table, str | None]] = {}

    def all(self, planned: Sequence[PlannedStatement]) -> list[TableChanges]:
        targets: dict[str, EditTable] = {}
        for statement in planned:
            targets.setdefault(statement.table.name.lower(), statement.table)
        scopes = _scopes(planned)
        # SRC's tables the statements read but do not edit: views of SRC as it is.
        for statement in planned:
            for span in statement.spans:
                if span.table not in targets and span.table not in self.views:
                    self._view(self.source.read(self.spark, self.tables[span.table]), span.table)
        # SRC's rows each table's statements can reach; SRC does not change, so reading it again gives
        # the same rows. A statement's flagged copy holds every row it saw: the first one's are SRC's.
        before: dict[str, DataFrame] = {}
        for name, table in targets.items():
            rows = self.source.read(self.spark, table)
            scope = scopes[name]
            if scope is not None:
                rows = rows.where(scope)
                self.pinned.add(name)
            before[name] = rows
            self._view(rows, name)
        for statement in planned:
            counted = self._run(statement)
            statement.matched = sum(_rows_in(rows, condition) for rows, condition in counted)
        statements = {name: sum(s.table.name.lower() == name for s in planned) for name in targets}
        out = []
        for name, table in targets.items():
            held = self._held_rows(table) if statements[name] == 1 else None
            if held is not None:
                changes = compare_held(table, held, self.source.state_source)
            else:
                old = self.first_copies.get(name, before[name])
                _, path = self._path()
                changes = compute_changes(table, old, self.spark.table(name), self.source.state_source, path)
            if changes is not None:
                out.append(changes)
        return out

    def _held_rows(self, table: EditTable) -> pa.Table | None:
        """Before and after a table's one UPDATE or DELETE, in this process, when its rows are held:
        the rows it saw, those it left and the sink's (read back by pyarrow in the held rows' types).
        None when they are not held, or the sink's Parquet is not in the calendar pyarrow reads."""
        import pyarrow.compute as pc
        import pyarrow.dataset as ds

        record = self.held.get(table.name.lower())
        if record is None:
            return None
        flagged, sink = record
        columns = list(table.columns)
        seen = flagged.select(columns)
        kept = flagged.filter(pc.invert(flagged.column(MATCHED.strip("`")))).select(columns)
        parts = [_sided(seen, REMOVED), _sided(kept, ADDED)]
        if sink is not None:
            conf = self.spark.conf
            # Spark's legacy rebasing writes dates and INT96 times in the hybrid calendar: Spark reads them.
            if any(conf.get(k, "CORRECTED") != "CORRECTED" for k in _REBASE_CONFS):
                return None
            fmt = ds.ParquetFileFormat(read_options=ds.ParquetReadOptions(coerce_int96_timestamp_unit="us"))
            try:
                new = ds.dataset(sink, format=fmt).to_table(columns=columns).cast(seen.schema)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, KeyError):
                return None  # Spark's own comparison reads it instead
            parts.append(_sided(new, ADDED))
        return pa.concat_tables(parts)

    # -- views

    def _view(self, df: DataFrame, name: str) -> None:
        df.createOrReplaceTempView(name)
        if name not in self.views:
            self.views.append(name)

    def drop_views(self) -> None:
        for name in self.views:
            try:
                self.spark.catalog.dropTempView(name)
            except Exception:  # noqa: BLE001 - the session may be gone; its views went with it
                pass

    def _path(self) -> tuple[str, str]:
        number = next(self.counter)
        return f"{VIEW_PREFIX}{number}", os.path.join(self.scratch, f"view-{number}")  # Spark skips _… and .…

    def copy(self, rows: DataFrame, few: bool = False) -> DataFrame:
        """``rows`` evaluated once: what later statements read stays what this one saw. ``few``: the
        rows of the keys a statement names, held in this process when there are at most HELD_ROWS
        (a Spark job writing and listing Parquet costs more than sending them back); else a Parquet copy."""
        if few:
            held = rows.limit(HELD_ROWS + 1).toArrow()
            if held.num_rows <= HELD_ROWS:
                copied = self.spark.createDataFrame(held, schema=rows.schema)
                self.copies[id(copied)] = held
                return copied
            # More rows than are held: evaluated again into Parquet, the held ones discarded unseen.
        _, path = self._path()
        rows.write.parquet(path)
        copied = self.spark.read.parquet(path)
        self.copies[id(copied)] = path
        return copied

    def sink(self, table: EditTable) -> str:
        """An empty Parquet temporary view with the table's columns: INSERT INTO it types values as
        Spark's store assignment does for a table (a STRING into a BIGINT column is refused)."""
        name, path = self._path()
        os.makedirs(path)
        columns = ", ".join(f"{_name(f.name)} {_ddl(f.dataType)}" for f in _schema(table).fields)
        self.spark.sql(f"CREATE TEMPORARY VIEW {_name(name)} ({columns}) USING parquet OPTIONS (path '{_quote(path)}')")
        self.views.append(name)
        self.sinks[name] = path
        return name

    # -- statements

    def _run(self, statement: PlannedStatement) -> Counted:
        """Runs one statement; the table's view is then its result. Returns where its rows are counted."""
        from statecat.catalog.spark.errors import spark_error_message, spark_error_types

        table = statement.table
        name = table.name.lower()
        first = name not in self.seen
        self.seen.add(name)
        try:
            if statement.kind == "MERGE":
                result, count = _Merge(self, statement).run()
            else:
                result, count = self._dml(statement, first)
        except spark_error_types() as exc:
            reason = spark_error_message(exc)
            if reason is None:
                raise
            # Spark names the Parquet view it writes into "unknown": the user wrote the state table.
            reason = reason.replace("the table `unknown`", f"the table `{table.name}`")
            raise EditError(f"Spark refused {statement.sql!r}: {reason}") from None
        self._view(result, name)
        return count

    def _dml(self, statement: PlannedStatement, first: bool) -> tuple[DataFrame, Counted]:
        """UPDATE, DELETE, INSERT; ``first``: the table's first statement (it reads SRC's rows)."""
        table = statement.table
        name = table.name.lower()
        node = statement.node
        text = statement.sql
        alias = statement.alias
        current = self.spark.table(name)
        if statement.kind == "INSERT":
            sink = self.sink(table)
            target = statement.target
            self.spark.sql(text[: target.start] + _name(sink) + text[target.end :])
            return current.unionAll(self.spark.table(sink)), [(self.sinks[sink], None)]
        # Whether each row matches, evaluated once (a WHERE with current_timestamp() or rand() too).
        condition = _clause_text(text, "WHERE") or "true"
        flagged = self.copy(
            self.spark.sql(
                f"SELECT *, coalesce(({condition}), false) AS {MATCHED} FROM {_name(name)} AS {_name(alias)}"
            ),
            few=name in self.pinned,
        )
        flagged_view = f"{VIEW_PREFIX}{next(self.counter)}"
        self._view(flagged, flagged_view)
        columns = [f.name for f in _schema(table).fields]
        if first:
            self.first_copies[name] = flagged.select(*[f"`{c}`" for c in columns])
        kept = flagged.where(f"NOT {MATCHED}").select(*[f"`{c}`" for c in columns])
        held = self.copies[id(flagged)]
        count: Counted = [(held, MATCHED.strip("`"))]
        if statement.kind == "DELETE":
            if first and isinstance(held, pa.Table):
                self.held[name] = (held, None)
            return kept, count
        sink = self.sink(table)
        if first and isinstance(held, pa.Table):
            self.held[name] = (held, self.sinks[sink])
        assigned = _assignments(text, node, table, alias)
        values = [_assigned_column(f, assigned, _name(alias)) for f in _schema(table).fields]
        self.spark.sql(
            f"INSERT INTO {_name(sink)} SELECT {', '.join(values)} FROM {_name(flagged_view)} AS {_name(alias)} "
            f"WHERE {MATCHED}"
        )
        return kept.unionAll(self.spark.table(sink)), count


class _Merge:
    """MERGE INTO t USING s ON c WHEN …, as Spark and Delta define it, in SELECTs over the copy."""

    def __init__(self, run: _Run, statement: PlannedStatement) -> None:
        self.run_ = run
        self.statement = statement
        node = statement.node
        assert isinstance(node, exp.Merge)
        self.node: exp.Merge = node
        self.copies: dict[str, str | pa.Table] = {}  # a copy's quoted view name -> its rows, where they are

    def run(self) -> tuple[DataFrame, Counted]:
        run, statement, node = self.run_, self.statement, self.node
        spark, table = run.spark, statement.table
        name = table.name.lower()
        target_alias = _name(statement.alias)
        using = node.args["using"]
        source_alias = _name(using.alias_or_name if isinstance(using, exp.Table | exp.Subquery) else "source")
        clauses = _merge_clauses(statement.sql, node)
        # Numbered copies: each target and source row addressable once the join has run, and every
        # condition evaluated once.
        targets = self._copy(f"SELECT *, monotonically_increasing_id() AS {TARGET_ROW} FROM {_name(name)}")
        sources = self._copy(f"SELECT *, monotonically_increasing_id() AS {SOURCE_ROW} FROM {clauses.source_text}")
        t, s = f"{targets} AS {target_alias}", f"{sources} AS {source_alias}"
        joined = self._copy(
            f"SELECT {target_alias}.{TARGET_ROW}, {source_alias}.{SOURCE_ROW} FROM {t} JOIN {s} ON ({clauses.on})"
        )
        if clauses.matched:
            twice = spark.sql(f"SELECT 1 FROM {joined} GROUP BY {TARGET_ROW} HAVING count(*) > 1 LIMIT 1").collect()
            if twice:
                raise EditError(
                    f"MERGE_CARDINALITY_VIOLATION: a row of {table.name} is matched by more than one source row in "
                    f"{statement.sql!r}; Spark and Delta refuse to update or delete it twice",
                    hint="Make the ON condition match at most one source row per target row",
                )
        pair = (
            f"{joined} AS j JOIN {t} ON j.{TARGET_ROW} = {target_alias}.{TARGET_ROW} "
            f"JOIN {s} ON j.{SOURCE_ROW} = {source_alias}.{SOURCE_ROW}"
        )
        # The clause that acts on each row: the first whose condition holds (-1: none).
        matched = self._copy(
            f"SELECT j.{TARGET_ROW}, j.{SOURCE_ROW}, {_first_clause(clauses.matched)} AS {CLAUSE} FROM {pair}"
        )
        by_source = self._copy(
            f"SELECT {target_alias}.{TARGET_ROW}, {_first_clause(clauses.by_source)} AS {CLAUSE} FROM {t} "
            f"WHERE {target_alias}.{TARGET_ROW} NOT IN (SELECT {TARGET_ROW} FROM {joined})"
        )
        not_matched = self._copy(
            f"SELECT {source_alias}.{SOURCE_ROW}, {_first_clause(clauses.not_matched)} AS {CLAUSE} FROM {s} "
            f"WHERE {source_alias}.{SOURCE_ROW} NOT IN (SELECT {SOURCE_ROW} FROM {joined})"
        )
        sink = _name(run.sink(table))
        fields = _schema(table).fields
        for i, clause in enumerate(clauses.matched):
            if clause.action == "UPDATE":
                values = [_merge_column(f, clause, target_alias, source_alias) for f in fields]
                spark.sql(
                    f"INSERT INTO {sink} SELECT {', '.join(values)} FROM {matched} AS a "
                    f"JOIN {t} ON a.{TARGET_ROW} = {target_alias}.{TARGET_ROW} "
                    f"JOIN {s} ON a.{SOURCE_ROW} = {source_alias}.{SOURCE_ROW} WHERE a.{CLAUSE} = {i}"
                )
        for i, clause in enumerate(clauses.by_source):
            if clause.action == "UPDATE":
                values = [_merge_column(f, clause, target_alias, None) for f in fields]
                spark.sql(
                    f"INSERT INTO {sink} SELECT {', '.join(values)} FROM {by_source} AS a "
                    f"JOIN {t} ON a.{TARGET_ROW} = {target_alias}.{TARGET_ROW} WHERE a.{CLAUSE} = {i}"
                )
        for i, clause in enumerate(clauses.not_matched):
            values = [_insert_column(f, clause, source_alias) for f in fields]
            spark.sql(
                f"INSERT INTO {sink} SELECT {', '.join(values)} FROM {not_matched} AS a "
                f"JOIN {s} ON a.{SOURCE_ROW} = {source_alias}.{SOURCE_ROW} WHERE a.{CLAUSE} = {i}"
            )
        # Target rows no clause acted on stay as they are.
        kept = spark.sql(
            f"SELECT {', '.join(f'{target_alias}.{_name(f.name)}' for f in fields)} FROM {t} "
            f"WHERE {target_alias}.{TARGET_ROW} NOT IN (SELECT {TARGET_ROW} FROM {matched} WHERE {CLAUSE} >= 0) "
            f"AND {target_alias}.{TARGET_ROW} NOT IN (SELECT {TARGET_ROW} FROM {by_source} WHERE {CLAUSE} >= 0)"
        )
        acting = CLAUSE.strip("`")
        counted: Counted = [(self.copies[v], acting) for v in (matched, by_source, not_matched)]
        return kept.unionAll(spark.table(sink)), counted

    def _copy(self, query: str) -> str:
        """The query's rows as a Parquet copy, under a temporary view's quoted name."""
        name = f"{VIEW_PREFIX}{next(self.run_.counter)}"
        copied = self.run_.copy(self.run_.spark.sql(query))
        self.run_._view(copied, name)
        self.copies[_name(name)] = self.run_.copies[id(copied)]
        return _name(name)


# ----------------------------------------------------------------------------- statement text


def _tokens(text: str) -> list[Token]:
    return list(Spark().tokenize(text))


def _top_level(tokens: Sequence[Token]) -> Iterator[tuple[int, Token]]:
    """The tokens outside any parentheses or brackets, with their index."""
    depth = 0
    for i, token in enumerate(tokens):
        if token.token_type in (TokenType.L_PAREN, TokenType.L_BRACKET):
            depth += 1
        elif token.token_type in (TokenType.R_PAREN, TokenType.R_BRACKET):
            depth -= 1
        elif depth == 0:
            yield i, token


def _clause_text(text: str, keyword: str) -> str | None:
    """The text after the statement's top-level ``keyword`` (UPDATE's and DELETE's WHERE is last)."""
    for _, token in _top_level(_tokens(text)):
        if token.text.upper() == keyword:
            return text[token.end + 1 :].strip().rstrip(";")
    return None


def _assignments(text: str, node: exp.Expr, table: EditTable, alias: str) -> dict[tuple[str, ...], str]:
    """UPDATE's SET: column path -> the expression's text as written."""
    from statecat.catalog.spark.edit_plan import _column_path

    tokens = _tokens(text)
    top = list(_top_level(tokens))
    start = next(i for i, t in top if t.token_type == TokenType.SET)
    end = next((i for i, t in top if t.token_type == TokenType.WHERE), len(tokens))
    pieces = _split(text, tokens, start + 1, end)
    paths = [_column_path(a.this, table, alias) for a in node.expressions]
    out = {}
    for path, piece in zip(paths, pieces):
        out[path] = _after_equals(piece)
    return out


def _split(text: str, tokens: Sequence[Token], first: int, end: int) -> list[str]:
    """The text of tokens[first:end] split at top-level commas."""
    pieces, depth, begin = [], 0, first
    for i in range(first, end):
        kind = tokens[i].token_type
        if kind in (TokenType.L_PAREN, TokenType.L_BRACKET):
            depth += 1
        elif kind in (TokenType.R_PAREN, TokenType.R_BRACKET):
            depth -= 1
        elif kind == TokenType.COMMA and depth == 0:
            pieces.append(text[tokens[begin].start : tokens[i - 1].end + 1])
            begin = i + 1
    if begin < end:
        pieces.append(text[tokens[begin].start : tokens[end - 1].end + 1])
    return pieces


def _after_equals(assignment: str) -> str:
    for _, token in _top_level(_tokens(assignment)):
        if token.token_type == TokenType.EQ:
            return assignment[token.end + 1 :].strip()
    raise EditError(f"expected column = expression, got {assignment!r}")


# ----------------------------------------------------------------------------- columns


def _assigned_column(column: Any, assigned: dict[tuple[str, ...], str], alias: str) -> str:
    """One output column of UPDATE: the old value, the expression assigned, or for assignments to
    its struct fields a struct of the old fields and the new ones (NULL stays an error, as a struct
    that is not there has no field to set). ``alias``: the target's, quoted."""
    old = f"{alias}.{_name(column.name)}"
    return f"{_assigned(column.dataType, (column.name,), assigned, old)} AS {_name(column.name)}"


def _assigned(data_type: DataType, path: tuple[str, ...], assigned: dict[tuple[str, ...], str], old: str) -> str:
    from pyspark.sql.types import StructType

    if path in assigned:
        return f"({assigned[path]})"
    inner = [p for p in assigned if len(p) > len(path) and p[: len(path)] == path]
    if not inner:
        return old
    assert isinstance(data_type, StructType)
    fields = ", ".join(
        f"'{_quote(f.name)}', {_assigned(f.dataType, (*path, f.name), assigned, f'{old}.{_name(f.name)}')}"
        for f in data_type.fields
    )
    where = ".".join(path)
    return (
        f"CASE WHEN {old} IS NULL THEN raise_error('cannot set a field of {_quote(where)}: it is NULL') "
        f"ELSE named_struct({fields}) END"
    )


@dataclass
class _Clause:
    action: str  # UPDATE | DELETE | INSERT
    condition: str | None
    assigned: dict[tuple[str, ...], str] = field(default_factory=dict)
    star: bool = False  # UPDATE SET * / INSERT *
    insert_columns: list[str] = field(default_factory=list)
    insert_values: list[str] = field(default_factory=list)


@dataclass
class _MergeClauses:
    on: str
    source_text: str
    matched: list[_Clause]
    not_matched: list[_Clause]
    by_source: list[_Clause]


def _merge_clauses(text: str, node: exp.Merge) -> _MergeClauses:
    """MERGE's parts as written: the USING source, the ON condition and each WHEN clause."""
    tokens = _tokens(text)
    top = list(_top_level(tokens))
    using = next(i for i, t in top if t.token_type == TokenType.USING)
    on = next(i for i, t in top if t.token_type == TokenType.ON and i > using)
    whens = [i for i, t in top if t.token_type == TokenType.WHEN]
    if not whens:
        raise EditError(f"MERGE needs at least one WHEN clause: {text!r}")
    source_text = text[tokens[using + 1].start : tokens[on - 1].end + 1]
    on_text = text[tokens[on + 1].start : tokens[whens[0] - 1].end + 1]
    out = _MergeClauses(on_text, source_text, [], [], [])
    bounds = [*whens, len(tokens)]
    for begin, end in zip(bounds, bounds[1:]):
        out_list, clause = _when(text, tokens, begin, end)
        getattr(out, out_list).append(clause)
    return out


def _when(text: str, tokens: Sequence[Token], begin: int, end: int) -> tuple[str, _Clause]:
    words = [t.text.upper() for t in tokens[begin:end]]
    then = begin + _index_at_depth0(tokens, begin, end, "THEN")
    head = " ".join(words[: then - begin])
    if head.startswith("WHEN MATCHED"):
        kind = "matched"
    elif "BY SOURCE" in head:
        kind = "by_source"
    else:
        kind = "not_matched"
    condition = None
    and_at = next((i for i in range(begin, then) if tokens[i].token_type == TokenType.AND), None)
    if and_at is not None:
        condition = text[tokens[and_at + 1].start : tokens[then - 1].end + 1]
    action = tokens[then + 1].text.upper()
    body = text[tokens[then + 2].start : tokens[end - 1].end + 1] if then + 2 < end else ""
    clause = _Clause(action, condition)
    if action == "UPDATE":
        body = body.strip()
        assert body.upper().startswith("SET")
        rest = body[3:].strip()
        if rest == "*":
            clause.star = True
        else:
            sub = _tokens(rest)
            for piece in _split(rest, sub, 0, len(sub)):
                path_text, _, _ = piece.partition("=")
                path = tuple(p.strip().strip("`") for p in path_text.strip().split("."))
                clause.assigned[path] = _after_equals(piece)
    elif action == "INSERT":
        rest = body.strip()
        if rest == "*":
            clause.star = True
        else:
            sub = _tokens(rest)
            close = _matching_paren(sub, 0)
            clause.insert_columns = [p.strip().strip("`") for p in _split(rest, sub, 1, close)]
            values_at = close + 1
            if sub[values_at].text.upper() != "VALUES":
                raise EditError(f"expected VALUES in MERGE's INSERT, got {sub[values_at].text!r}")
            vclose = _matching_paren(sub, values_at + 1)
            clause.insert_values = _split(rest, sub, values_at + 2, vclose)
    elif action != "DELETE":
        raise EditError(f"expected UPDATE, DELETE or INSERT after THEN, got {action!r}")
    return kind, clause


def _index_at_depth0(tokens: Sequence[Token], begin: int, end: int, word: str) -> int:
    depth = 0
    for i in range(begin, end):
        kind = tokens[i].token_type
        if kind == TokenType.L_PAREN:
            depth += 1
        elif kind == TokenType.R_PAREN:
            depth -= 1
        elif depth == 0 and tokens[i].text.upper() == word:
            return i - begin
    raise EditError(f"expected {word} in a WHEN clause")


def _matching_paren(tokens: Sequence[Token], open_at: int) -> int:
    depth = 0
    for i in range(open_at, len(tokens)):
        if tokens[i].token_type == TokenType.L_PAREN:
            depth += 1
        elif tokens[i].token_type == TokenType.R_PAREN:
            depth -= 1
            if depth == 0:
                return i
    raise EditError("unbalanced parentheses in a MERGE clause")


def _first_clause(clauses: Sequence[_Clause]) -> str:
    """The index of the first clause whose condition holds, -1 for none: the one that acts."""
    if not clauses:
        return "-1"
    branches = " ".join(f"WHEN coalesce(({c.condition or 'true'}), false) THEN {i}" for i, c in enumerate(clauses))
    return f"CASE {branches} ELSE -1 END"


def _merge_column(column: Any, clause: _Clause, target: str, source: str | None) -> str:
    """A column of a row MERGE updates; ``target``, ``source``: the quoted aliases."""
    assigned = clause.assigned
    if clause.star:
        assigned = {(column.name,): f"{source}.{_name(column.name)}"}
    return _assigned_column(column, assigned, target)


def _insert_column(column: Any, clause: _Clause, source: str) -> str:
    """A column of a row MERGE inserts (a column the clause does not give is NULL, as in Spark)."""
    if clause.star:
        return f"{source}.{_name(column.name)} AS {_name(column.name)}"
    given = dict(zip(clause.insert_columns, clause.insert_values))
    return (
        f"({given[column.name]}) AS {_name(column.name)}" if column.name in given else f"NULL AS {_name(column.name)}"
    )


# ----------------------------------------------------------------------------- scopes and rows


def _scopes(planned: Sequence[PlannedStatement]) -> dict[str, str | None]:
    """Per edited table, the rows of SRC the statements can reach: the keys they pin (OR-ed), or
    None for every row (a statement without a pin, a MERGE, or the table read by a subquery)."""
    pins: dict[str, list[str] | None] = {}
    for statement in planned:
        name = statement.table.name.lower()
        pins.setdefault(name, [])
    for statement in planned:
        name = statement.table.name.lower()
        for span in statement.spans:
            if span.table in pins and span is not statement.target:
                pins[span.table] = None  # read as a table: every row, as edited so far
        if not statement.reads_target:
            continue
        pinned = pins[name]
        if statement.key_filter is None:
            pins[name] = None
        elif pinned is not None:
            pinned.append(statement.key_filter)
    return {
        name: "false" if p == [] else None if p is None else " OR ".join(f"({x})" for x in p)
        for name, p in pins.items()
    }


def _name(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _ddl(data_type: DataType) -> str:
    """A Spark type as DDL, every field name quoted (Flink's names hold characters like $)."""
    from pyspark.sql.types import ArrayType, MapType, StructType

    if isinstance(data_type, StructType):
        return "STRUCT<" + ", ".join(f"{_name(f.name)}: {_ddl(f.dataType)}" for f in data_type.fields) + ">"
    if isinstance(data_type, ArrayType):
        return f"ARRAY<{_ddl(data_type.elementType)}>"
    if isinstance(data_type, MapType):
        return f"MAP<{_ddl(data_type.keyType)}, {_ddl(data_type.valueType)}>"
    return data_type.simpleString()


def _schema(table: EditTable) -> StructType:
    from pyspark.sql.pandas.types import from_arrow_schema

    schema = state_schema(table.state)
    return from_arrow_schema(pa.schema([f for f in schema if f.name in table.columns]), prefer_timestamp_ntz=True)


def _sided(rows: pa.Table, side: int) -> pa.Table:
    """``rows`` with the comparison's SIDE column (Spark's IntegerType: int32)."""
    return rows.append_column(SIDE, pa.array([side] * rows.num_rows, pa.int32()))


def _rows_in(rows: str | pa.Table, column: str | None) -> int:
    """Rows of a copy (where ``column`` is true, or a WHEN clause's index >= 0): a Parquet
    directory's or the rows held in this process."""
    import pyarrow.dataset as ds

    data = ds.dataset(rows, format="parquet") if isinstance(rows, str) else ds.dataset(rows)
    if column is None:
        return data.count_rows()
    field = ds.field(column)
    is_flag = pa.types.is_boolean(data.schema.field(column).type)
    return data.count_rows(filter=field if is_flag else field >= 0)


def _quote(text: str) -> str:
    return text.replace("\\", "\\\\").replace("'", "\\'")


@contextmanager
def scratch_directory(destination: str) -> Iterator[str]:
    """A private directory for the Parquet views beside DST (where Spark's executors write too, and
    where the next write removes it if this process is killed), removed afterwards; in the system's
    temporary directory while DST's parent does not exist yet."""
    from statecat.writers.object_store import is_object_store
    from statecat.writers.publish import destination_display
    from statecat.writers.temp_dirs import make_temp_dir, remove_stale_temp_dirs, remove_temp_dir, signals_raise

    target = destination_display(destination)
    parent = os.path.dirname(target)
    if is_object_store(destination) or not os.path.isdir(parent):
        parent = tempfile.gettempdir()
    with signals_raise() as signals:
        directory = None
        try:
            with signals.hold():  # held until the directory is known, so the cleanup cannot miss it
                remove_stale_temp_dirs(parent)
                directory = make_temp_dir(parent, target.rsplit("/", 1)[-1], "edit")
            signals.check()
            yield directory
        finally:
            if directory is not None:
                with signals.hold():
                    remove_temp_dir(directory)
