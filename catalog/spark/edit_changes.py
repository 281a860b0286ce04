"""What the edits changed in one state table: computed by Spark, kept on disk by key-group.

Spark compares the rows the statements could reach before them with the rows after them (a
multiset difference: an updated row is one row gone and one row new). Rows are compared in
buckets of their key's hash, so only the rows that changed reach the second step, in which each
gets the key-group Flink assigns its key to. The rows gone and the rows new are written as Parquet,
one directory per key-group (an operator state's rows in one directory of their own):

    <changes>/statecat_key_group=17/part-….parquet     columns: the table's, statecat_side

The writer (writers/savepoint_writer.py, through edits.ChangesEditor) then reads one key-group's
changes at a time, in this process or in Spark's tasks: a statement touching every key needs
memory for one key-group, not for the table. Spark's tasks do the comparing and the key-group
assignment (Python on the executors: the state's own encoder gives the key's bytes, which Flink hashes).

A statement that reaches few rows (a key's, the usual repair) is compared the same way in this
process instead, its changes held in memory: up to HELD_ROWS rows cost less than a Spark job.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa
import pyarrow.compute

from statecat.readers.codecs.arrow_types import state_schema
from statecat.readers.codecs.decoders import hashable
from statecat.statemeta.errors import StatecatError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from statecat.catalog.spark.edit_plan import EditTable
    from statecat.statemeta.model import StateInfo
    from statecat.writers.entry_codec import EntryCodec

# Columns of the changes besides the table's own (no leading underscore: pyarrow's and Spark's file
# listings skip such names, and the key-group is a partition directory's name).
SIDE = "statecat_side"
KEY_GROUP = "statecat_key_group"
ERROR = "statecat_error"
REMOVED, ADDED = -1, 1
# Operator states have no key-groups: their rows share one directory.
OPERATOR_STATE_GROUP = -1
# Rows whose key-group cannot be computed (a NULL key, a key Flink's type cannot hold): the
# directory the driver looks in for the reason, before anything is written.
UNASSIGNED_GROUP = -2
# Rows (before and after the statements together) compared in this process rather than by Spark's tasks.
HELD_ROWS = 10_000
# Buckets of the key's hash in which rows are compared: many, so that a bucket of a table with
# tens of millions of keys stays small (a bucket is one Arrow table in one Python worker).
BUCKETS = 1024


class TableChanges(Protocol):
    """The changes of one state table as the writer reads them: the key-groups they touch, and per
    key-group (None: an operator state's) the rows gone and the rows new."""

    @property
    def operator_id(self) -> str: ...

    @property
    def state_name(self) -> str: ...

    @property
    def key_groups(self) -> tuple[int, ...]: ...

    def rows(
        self, state: StateInfo, key_group: int | None = None
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]: ...


@dataclass(frozen=True)
class StoredChanges:
    """The changes of one state table on disk: where they are, and which key-groups they touch."""

    operator_id: str
    state_name: str
    path: str
    key_groups: tuple[int, ...]  # empty for an operator state; see rows()

    def rows(self, state: StateInfo, key_group: int | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The rows gone and the rows new of one key-group (None: an operator state's), as
        ``statecat read`` gives them (pyarrow's ``to_pylist`` of the state's Arrow schema)."""
        return _sides(_read_group(self.path, _group(key_group)), state)


@dataclass(frozen=True)
class HeldChanges:
    """The changes of one state table in memory, by key-group: a few rows, compared in this process."""

    operator_id: str
    state_name: str
    groups: dict[int, pa.Table]

    @property
    def key_groups(self) -> tuple[int, ...]:
        return tuple(sorted(g for g in self.groups if g >= 0))

    def rows(self, state: StateInfo, key_group: int | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        return _sides(self.groups.get(_group(key_group)), state)


def _group(key_group: int | None) -> int:
    return OPERATOR_STATE_GROUP if key_group is None else key_group


def _sides(data: pa.Table | None, state: StateInfo) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    if data is None:
        return [], []
    sides = data.column(SIDE).to_pylist()
    rows = arrow_rows(data, state)
    return (
        [row for row, side in zip(rows, sides) if side == REMOVED],
        [row for row, side in zip(rows, sides) if side == ADDED],
    )


def arrow_rows(data: pa.Table, state: StateInfo) -> list[dict[str, Any]]:
    """Rows as ``statecat read`` gives them: Spark's columns cast to the state's Arrow schema."""
    schema = pa.schema([f for f in state_schema(state) if f.name in data.column_names])
    return data.select(schema.names).cast(schema).to_pylist()


def _read_group(path: str, group: int) -> pa.Table | None:
    import pyarrow.parquet as pq

    directory = os.path.join(path, f"{KEY_GROUP}={group}")
    if not os.path.isdir(directory):
        return None
    # Spark writes timestamps as INT96: read them in Spark's unit, not nanoseconds (which overflow).
    return pq.read_table(directory, coerce_int96_timestamp_unit="us")


def compute_changes(
    table: EditTable,
    before: DataFrame,
    after: DataFrame,
    state_source: tuple[str, str | None, tuple[str, ...]],
    directory: str,
) -> TableChanges | None:
    """The comparison of ``before`` and ``after`` (both with the table's columns); None when no row
    changed. Up to HELD_ROWS rows are compared in this process (a Spark job would cost more than
    they do); more by Spark's tasks, written under ``directory``. ``state_source``: (SRC's path,
    descriptor file, classpath), from which the comparison loads SRC's StateMeta for the key's encoder."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import IntegerType, StringType, StructField, StructType

    columns = list(table.columns)
    both = before.select(*[F.col(f"`{c}`") for c in columns], F.lit(REMOVED).alias(SIDE)).unionByName(
        after.select(*[F.col(f"`{c}`") for c in columns], F.lit(ADDED).alias(SIDE))
    )
    operator_id, state_name, keyed = table.operator.id, table.state.name, table.keyed
    few = both.limit(HELD_ROWS + 1).toArrow()
    if few.num_rows <= HELD_ROWS:
        return compare_held(table, few, state_source)
    schema = StructType(
        [
            *[both.schema[c] for c in columns],
            StructField(SIDE, IntegerType(), False),
            StructField(KEY_GROUP, IntegerType(), False),
            StructField(ERROR, StringType(), True),
        ]
    )
    # What Spark checks the function's result against (its rows come in the session's time zone).
    result_schema = to_arrow_schema(schema, timezone="UTC")

    def compare(rows: pa.Table) -> pa.Table:  # annotated: Spark takes the kind of function from the hints
        changed = _compare_bucket(state_source, operator_id, state_name, keyed, tuple(columns), rows)
        return changed.cast(result_schema)

    diffed = (
        both.withColumn("statecat_bucket", _bucket(table, both))
        .groupBy("statecat_bucket")
        .applyInArrow(compare, schema)
    )
    # One task per key-group directory: each key-group's changes in one file.
    diffed.repartition(KEY_GROUP).write.partitionBy(KEY_GROUP).parquet(directory)
    stored = sorted(_groups(directory))
    if UNASSIGNED_GROUP in stored:
        _refuse_unassigned(table, _read_group(directory, UNASSIGNED_GROUP))
    if not stored:
        return None
    return StoredChanges(operator_id, state_name, directory, tuple(g for g in stored if g >= 0))


def compare_held(
    table: EditTable, rows: pa.Table, state_source: tuple[str, str | None, tuple[str, ...]]
) -> TableChanges | None:
    """The comparison of rows held in this process (the table's columns and SIDE, as Spark's
    ``toArrow`` gives them); None when no row changed."""
    changed = _compare_bucket(
        state_source, table.operator.id, table.state.name, table.keyed, tuple(table.columns), rows
    )
    groups: dict[int, pa.Table] = {}
    for group in set(changed.column(KEY_GROUP).to_pylist()):
        groups[group] = changed.filter(pa.compute.equal(changed.column(KEY_GROUP), group))
    _refuse_unassigned(table, groups.get(UNASSIGNED_GROUP))
    return HeldChanges(table.operator.id, table.state.name, groups) if groups else None


def _refuse_unassigned(table: EditTable, unassigned: pa.Table | None) -> None:
    """A row whose key-group cannot be computed: refused, with the first such row's reason."""
    if unassigned is not None and unassigned.num_rows:
        from statecat.catalog.spark.edit_plan import EditError

        raise EditError(f"a row of {table.name} {unassigned.column(ERROR)[0].as_py()}")


def _bucket(table: EditTable, rows: DataFrame) -> Any:
    """The bucket a row is compared in: its key's hash (Spark hashes no maps: then one bucket)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import MapType

    if not table.keyed or _holds_map(rows.schema["key"].dataType, MapType):
        return F.lit(0)
    return F.pmod(F.hash(F.col("key")), F.lit(BUCKETS))


def _holds_map(data_type: Any, map_type: type) -> bool:
    from pyspark.sql.types import ArrayType, StructType

    if isinstance(data_type, map_type):
        return True
    if isinstance(data_type, ArrayType):
        return _holds_map(data_type.elementType, map_type)
    if isinstance(data_type, StructType):
        return any(_holds_map(f.dataType, map_type) for f in data_type.fields)
    return False


def _groups(directory: str) -> Iterator[int]:
    prefix = f"{KEY_GROUP}="
    for name in os.listdir(directory):
        if name.startswith(prefix):
            yield int(name[len(prefix) :])


# ----------------------------------------------------------------------------- on the executors

_codecs: dict[tuple[str, str | None, tuple[str, ...], str, str], EntryCodec] = {}


def _codec(state_source: tuple[str, str | None, tuple[str, ...]], operator_id: str, state_name: str) -> EntryCodec:
    """The state's EntryCodec, built once per Python worker (workers are reused across tasks)."""
    from statecat.catalog.spark.source import _state_meta
    from statecat.writers.entry_codec import EntryCodec

    cache_key = (*state_source, operator_id, state_name)
    codec = _codecs.get(cache_key)
    if codec is None:
        meta = _state_meta(*state_source)
        operator = meta.operator(operator_id)
        codec = _codecs[cache_key] = EntryCodec(meta, operator, operator.state(state_name))
    return codec


def _compare_bucket(
    state_source: tuple[str, str | None, tuple[str, ...]],
    operator_id: str,
    state_name: str,
    keyed: bool,
    columns: tuple[str, ...],
    rows: pa.Table,
) -> pa.Table:
    """One bucket's rows gone and rows new, each with the key-group of its key."""
    sides = rows.column(SIDE).to_pylist()
    shown = rows.select(list(columns)).to_pylist()
    hashed = [hashable(row) for row in shown]
    before = Counter(h for h, side in zip(hashed, sides) if side == REMOVED)
    after = Counter(h for h, side in zip(hashed, sides) if side == ADDED)
    gone, came = before - after, after - before
    picked: list[int] = []
    for i, (h, side) in enumerate(zip(hashed, sides)):
        left = gone if side == REMOVED else came
        if left[h] > 0:
            left[h] -= 1
            picked.append(i)
    changed = rows.select([*columns, SIDE]).take(pa.array(picked, pa.int64()))
    groups: list[int] = []
    errors: list[str | None] = []
    if keyed and picked:
        codec = _codec(state_source, operator_id, state_name)
        keys = arrow_rows(changed.select(["key"]), codec.state)
        for row, side in zip(keys, changed.column(SIDE).to_pylist()):
            group, error = _key_group(codec, row["key"], side)
            groups.append(group)
            errors.append(error)
    else:
        groups = [OPERATOR_STATE_GROUP] * len(picked)
        errors = [None] * len(picked)
    return changed.append_column(KEY_GROUP, pa.array(groups, pa.int32())).append_column(
        ERROR, pa.array(errors, pa.string())
    )


def _key_group(codec: EntryCodec, key: Any, side: int) -> tuple[int, str | None]:
    """The key's key-group, or UNASSIGNED_GROUP and why (said by the driver, not as a task's traceback)."""
    if key is None:
        return UNASSIGNED_GROUP, "has a NULL key after the edits"
    try:
        return codec.key_group(key), None
    except StatecatError as exc:
        what = "a key SRC holds" if side == REMOVED else "a key after the edits"
        return UNASSIGNED_GROUP, f"has {what} that statecat cannot place in a key-group: {exc.message}"
