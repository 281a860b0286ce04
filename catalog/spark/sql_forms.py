"""The key view, a key's history and the savepoint diff in SQL: ``statecat.key_view`` and ``statecat.diff``.

    SELECT operator, state, namespace, value FROM statecat.key_view WHERE key = 'key_662'
    SELECT database, taken_at, state, value FROM statecat.key_view WHERE key = 'key_662' ORDER BY checkpoint_id, taken_at
    SELECT state, change, count(*) FROM statecat.diff WHERE a = 'db1' AND b = 'db2' GROUP BY state, change

``statecat.key_view`` is ``SavepointReader.key`` over every attached savepoint (or those a pushed
``database = / IN`` names): one Spark task per savepoint, reading one key-group per keyed location.
It needs a pushed ``key = '...'`` (or ``key IN (...)``). Ordered by ``checkpoint_id, taken_at`` it is the key's
history (``key_history``): there is no separate history table. ``key`` is the key as the query gives
it (text: a number's digits, a composite key's JSON list), namespace and value JSON text, since
their types differ from state to state.

``statecat.diff`` is ``diff_savepoints`` of the savepoints whose databases a pushed ``a = '...' AND
b = '...'`` names. The states are matched on the driver (``_metadata`` only); each compared keyed
state is split into key-group ranges of about ``PARTITION_BYTES`` (both sides' bytes), one Spark
task each, so a state too large for one process spreads over executors, and each task still holds
one key-group of each side at a time. A state that cannot be compared (one side only, another max
parallelism, a changed type) is one row with ``change = 'reason'``.

Design as ``catalog_views``: ``flinkstate`` tables whose reader takes the savepoints from the
registry's Parquet files; created (and re-pointed) with the catalog-wide tables.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from statecat.catalog.spark.discovery import REGISTRY_DATABASE
from statecat.statemeta.errors import LookupFailedError, StatecatError, UnsupportedError, did_you_mean

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from statecat.readers.scans.diff import Change, SavepointDiff, StateDiff
    from statecat.readers.scans.scan import KeyedStateScanner
    from statecat.statemeta.model import OperatorMeta, StateInfo, StateMeta

    _Side = tuple[OperatorMeta, StateInfo]

KEY_VIEW_TABLE = f"{REGISTRY_DATABASE}.key_view"
DIFF_TABLE = f"{REGISTRY_DATABASE}.diff"
SQL_FORM_KINDS = ("key_view", "diff")
TABLES = {"key_view": KEY_VIEW_TABLE, "diff": DIFF_TABLE}
# Bytes of both sides' key-groups per diff task (as source.PARTITION_BYTES for a state's table).
PARTITION_BYTES = 32 << 20
BATCH_ROWS = 8192

KEY_VIEW_COLUMNS = (
    ("database", "string"),
    ("path", "string"),
    ("checkpoint_id", "bigint"),
    ("taken_at", "timestamp"),
    ("time_source", "string"),
    ("operator", "string"),
    ("operator_id", "string"),
    ("state", "string"),
    ("table_name", "string"),
    ("kind", "string"),
    ("key", "string"),
    ("key_group", "int"),
    ("namespace", "string"),
    ("value", "string"),
)
KEY_VIEW_COMMENTS = {
    "database": "the savepoint's database (as in statecat.savepoints); WHERE database = ... reads only those",
    "path": "the savepoint's directory or URI",
    "checkpoint_id": "the checkpoint id Flink gave the savepoint",
    "taken_at": "when the savepoint was taken, as well as statecat knows (see time_source); ORDER BY "
    "checkpoint_id, taken_at gives the key's history (a copy resets file times, never checkpoint ids)",
    "time_source": "where taken_at comes from: rest_trigger, stateinfo_snapshot, rest_checkpoint_history, checkpoint_mtime, "
    "'file_mtime: may be the copy time', unknown",
    "operator": "the operator's uid, else its name, else its id (how statecat names it)",
    "operator_id": "Flink's operator id (32 hex digits)",
    "state": "the state's name as Flink writes it",
    "table_name": "the state's table in the savepoint's database",
    "kind": "keyed | timer",
    "key": "the key as the query gives it (required: WHERE key = '...' or key IN (...)); coerced to each "
    "state's key type: text, a number, or a JSON list of a composite key's fields",
    "key_group": "the key-group the key falls into (the one key-group read)",
    "namespace": "window or other namespace of the value, as JSON text (null for plain keyed state)",
    "value": "the state's value for the key and namespace, as JSON text (timers: the timestamp in ms)",
}
DIFF_COLUMNS = (
    ("a", "string"),
    ("b", "string"),
    ("operator", "string"),
    ("state", "string"),
    ("key", "string"),
    ("namespace", "string"),
    ("change", "string"),
    ("old_value", "string"),
    ("new_value", "string"),
    ("reason", "string"),
)
DIFF_COMMENTS = {
    "a": "the old savepoint's database (required: WHERE a = '...' AND b = '...')",
    "b": "the new savepoint's database",
    "operator": "the operator's uid, else its name, else its id",
    "state": "the state's name (WHERE state = ... compares only that state)",
    "key": "the key: text as is, other keys as JSON text (null for operator state)",
    "namespace": "window or other namespace, as JSON text (null for plain keyed and operator state)",
    "change": "added (in b only) | removed (in a only) | changed (old_value -> new_value) | reason (the state "
    "was not compared: see reason)",
    "old_value": "the value in a, as JSON text (null when added)",
    "new_value": "the value in b, as JSON text (null when removed)",
    "reason": "why the state was not compared (one side only, another max parallelism, a changed type); null "
    "for changes",
}
TABLE_COMMENTS = {
    "key_view": "one key in every keyed state of every attached savepoint: needs WHERE key = '...'; "
    "ORDER BY checkpoint_id, taken_at for its history",
    "diff": "keys added, removed and changed between two attached savepoints: needs WHERE a = '...' AND b = '...'",
}
MISSING_KEY = (
    "statecat.key_view needs the key: add WHERE key = '...' (or key IN (...)), the key as text, "
    "a number's digits, or a composite key's fields as a JSON list"
)
MISSING_SIDES = (
    "statecat.diff needs the two savepoints: add WHERE a = 'DATABASE' AND b = 'DATABASE' "
    "(databases of statecat.savepoints; a the old one, b the new one)"
)


def sql_form_columns(kind: str) -> tuple[tuple, dict]:
    """(columns, comments) of ``statecat.key_view`` or ``statecat.diff``."""
    return (KEY_VIEW_COLUMNS, KEY_VIEW_COMMENTS) if kind == "key_view" else (DIFF_COLUMNS, DIFF_COMMENTS)


# ----------------------------------------------------------------------------- creating (driver, Spark)


def ensure_sql_forms(spark: SparkSession, location: str) -> None:
    """Creates ``statecat.key_view`` and ``statecat.diff`` reading the registry at ``location``
    (idempotent; recreated when their columns or the registry's location changed)."""
    from statecat.catalog.spark.catalog_views import ensure_registry_tables

    ensure_registry_tables(spark, location, [(kind, name, TABLE_COMMENTS[kind]) for kind, name in TABLES.items()])


# ----------------------------------------------------------------------------- planning (driver, no Spark)


class KeyViewPartition(InputPartition):
    """One task: the key view of the keys in one registered savepoint."""

    def __init__(self, database: str, path: str, checkpoint_id: int | None, keys: tuple):
        super().__init__(database)
        self.database = database
        self.path = path
        self.checkpoint_id = checkpoint_id
        self.keys = keys


class DiffPartition(InputPartition):
    """One task: one matched state of a diff, in a range of key-groups (keyed), whole (operator
    state), or only its reason (not compared)."""

    def __init__(
        self,
        a: str,
        b: str,
        path_a: str,
        path_b: str,
        operator: str,
        state: str,
        table: str,
        kind: str,
        side_a: tuple[str, str] | None,
        side_b: tuple[str, str] | None,
        key_groups: tuple[int, int] | None = None,
        reason: str | None = None,
    ):
        super().__init__((a, b, operator, state, key_groups))
        self.a, self.b, self.path_a, self.path_b = a, b, path_a, path_b
        self.operator, self.state, self.table, self.kind = operator, state, table, kind
        self.side_a, self.side_b = side_a, side_b  # (operator id, state name) on each side
        self.key_groups = key_groups  # (first, last) inclusive; None: the whole state
        self.reason = reason


def sql_form_partitions(
    kind: str, location: str, *, keys: set | None, databases: set | None, sides: dict, states: set | None
) -> Sequence[InputPartition]:
    if kind == "key_view":
        return key_view_partitions(location, keys, databases)
    return diff_partitions(location, sides.get("a"), sides.get("b"), states)


def key_view_partitions(location: str, keys: set | None, databases: set | None) -> list[KeyViewPartition]:
    from statecat.catalog.spark.catalog_views import registered_savepoints

    if keys is None:
        raise StatecatError(MISSING_KEY)
    given = tuple(sorted({str(k) for k in keys}))  # the key column holds the key as given
    if not given:
        return []  # key = NULL matches nothing
    return [
        KeyViewPartition(database, path, checkpoint_id, given)
        for database, path, checkpoint_id in registered_savepoints(location)
        if databases is None or database in databases
    ]


def diff_partitions(
    location: str, olds: set | None, news: set | None, states: set | None, target_bytes: int | None = None
) -> list[DiffPartition]:
    from statecat.catalog.spark.catalog_views import registered_savepoints
    from statecat.readers.scans.diff import COMPARED, diff_savepoints

    if olds is None or news is None:
        raise StatecatError(MISSING_SIDES)
    paths = {database: path for database, path, _ in registered_savepoints(location)}
    for name in sorted(olds | news):
        if name not in paths:
            raise LookupFailedError(
                f"statecat.diff: unknown savepoint database {name!r}. "
                + did_you_mean(name, sorted(paths))
                + " `SELECT database, path FROM statecat.savepoints` lists them"
            )
    parts: list[DiffPartition] = []
    for a in sorted(olds):
        for b in sorted(news):
            metas = []
            for database in (a, b):
                try:
                    metas.append(_meta(paths[database]))
                except (StatecatError, OSError) as exc:
                    raise _savepoint_error(DIFF_TABLE, paths[database], database, exc) from None
            diff = diff_savepoints(*metas)
            for entry in diff.states:
                if states is not None and entry.state not in states:
                    continue
                side_a = (entry.a[0].id, entry.a[1].name) if entry.a else None
                side_b = (entry.b[0].id, entry.b[1].name) if entry.b else None
                common = (
                    a,
                    b,
                    paths[a],
                    paths[b],
                    entry.operator,
                    entry.state,
                    entry.table,
                    entry.kind,
                    side_a,
                    side_b,
                )
                if entry.status != COMPARED:
                    parts.append(DiffPartition(*common, reason=f"{entry.status}: {entry.reason}"))
                elif entry.kind in ("keyed", "timer"):
                    # A compared state has both sides.
                    ranges = key_group_ranges(
                        cast("_Side", entry.a)[1], cast("_Side", entry.b)[1], target_bytes or PARTITION_BYTES
                    )
                    parts.extend(DiffPartition(*common, key_groups=r) for r in ranges)
                else:  # operator state: small by nature (Flink holds it in memory on restore), one task
                    parts.append(DiffPartition(*common))
    return parts


def key_group_ranges(state_a: StateInfo, state_b: StateInfo, target_bytes: int) -> list[tuple[int, int]]:
    """Consecutive key-group ranges holding about ``target_bytes`` of both sides' data each; key-groups
    empty on both sides are left out (they hold no change)."""
    from statecat.catalog.spark.source import key_group_bytes

    sizes: dict[int, int] = {}
    for location in state_a.keyed_locations + state_b.keyed_locations:
        for group, size in key_group_bytes(location).items():
            sizes[group] = sizes.get(group, 0) + size
    ranges: list[tuple[int, int]] = []
    first: int | None = None
    last = total = 0  # last is set whenever first is
    for group in sorted(sizes):
        if first is not None and total + sizes[group] > target_bytes:
            ranges.append((first, last))
            first, total = None, 0
        if first is None:
            first = group
        last = group
        total += sizes[group]
    if first is not None:
        ranges.append((first, last))
    return ranges


def _meta(path: str) -> StateMeta:
    from statecat.catalog.spark.source import _state_meta

    return _state_meta(path)


# ----------------------------------------------------------------------------- reading (workers, no Spark)


def sql_form_batches(kind: str, partition: InputPartition, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    if kind == "key_view" and isinstance(partition, KeyViewPartition):
        yield from key_view_batches(partition, schema)
    elif kind == "diff" and isinstance(partition, DiffPartition):
        yield from diff_batches(partition, schema)


def key_view_batches(partition: KeyViewPartition, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    from statecat.readers import SavepointReader
    from statecat.readers.scans.keyview import key_view, snapshot_time

    try:
        reader = SavepointReader(_meta(partition.path))
        taken_at, time_source = snapshot_time(partition.path)
        rows = []
        for key in partition.keys:
            # A key that fits no state's key type here has no rows here (it may fit other savepoints).
            for row in key_view(reader, key).rows:
                rows.append(
                    (
                        partition.database,
                        partition.path,
                        partition.checkpoint_id,
                        taken_at,
                        time_source,
                        row.operator,
                        row.operator_id,
                        row.state,
                        row.table,
                        row.kind,
                        key,
                        row.key_group,
                        json_text(row.namespace),
                        json_text(row.value),
                    )
                )
    except (StatecatError, OSError) as exc:
        raise _savepoint_error(KEY_VIEW_TABLE, partition.path, partition.database, exc) from None
    if rows:
        yield _batch(rows, schema)


def diff_batches(partition: DiffPartition, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    front = (partition.a, partition.b, partition.operator, partition.state)
    if partition.reason is not None:
        yield _batch([front + (None, None, "reason", None, None, partition.reason)], schema)
        return
    rows: list[tuple] = []
    try:
        for change in _changes(partition):
            rows.append(
                front
                + (
                    key_text(change.key),
                    json_text(change.namespace),
                    change.change,
                    json_text(change.old),
                    json_text(change.new),
                    None,
                )
            )
            if len(rows) >= BATCH_ROWS:
                yield _batch(rows, schema)
                rows = []
    except UnsupportedError as exc:  # as diff_savepoints does: the state is not compared, with the reason
        rows.append(front + (None, None, "reason", None, None, f"not compared: {exc.message}"))
    except (StatecatError, OSError) as exc:
        for database, path in ((partition.a, partition.path_a), (partition.b, partition.path_b)):
            from statecat.catalog.spark.relocation import is_missing

            if is_missing(path):
                raise _savepoint_error(DIFF_TABLE, path, database, exc) from None
        raise StatecatError(
            f"{DIFF_TABLE}: cannot compare state {partition.state!r} of {partition.operator} "
            f"between {partition.a} and {partition.b}: {exc}"
        ) from None
    if rows:
        yield _batch(rows, schema)


def _changes(partition: DiffPartition) -> Iterator[Change]:
    from statecat.readers.scans.diff import SavepointDiff, StateDiff

    meta_a, meta_b = _meta(partition.path_a), _meta(partition.path_b)
    # Only a compared state's partition gets here (diff_batches returns a reason's row): both sides are named.
    side_a, side_b = (
        _side(meta_a, cast("tuple[str, str]", partition.side_a)),
        _side(meta_b, cast("tuple[str, str]", partition.side_b)),
    )
    entry = StateDiff(partition.operator, partition.state, partition.table, partition.kind, side_a, side_b)
    diff = SavepointDiff(meta_a, meta_b, [entry])
    if partition.key_groups is None:
        return diff._operator_changes(entry)
    return _keyed_changes(diff, entry, partition.key_groups)


def _side(meta: StateMeta, side: tuple[str, str]) -> tuple[OperatorMeta, StateInfo]:
    op = meta.operator(side[0])
    return op, next(s for s in op.states if s.name == side[1])


def _keyed_changes(diff: SavepointDiff, entry: StateDiff, key_groups: tuple[int, int]) -> Iterator[Change]:
    """``SavepointDiff._keyed_changes`` over one range of key-groups: the two sides merged key-group by
    key-group, one key-group of each in memory."""
    from statecat.readers.scans.diff import merge_key_groups

    (op_a, state_a), (op_b, state_b) = cast("tuple[_Side, _Side]", (entry.a, entry.b))  # a compared state
    side_a = _key_groups_in(diff.a, op_a, state_a, key_groups)
    side_b = _key_groups_in(diff.b, op_b, state_b, key_groups)
    timers = entry.kind == "timer"
    for group, rows_a, rows_b in merge_key_groups(side_a, side_b):
        yield from diff._compare(entry, group, rows_a, rows_b, timers)


def _key_groups_in(
    meta: StateMeta, op: OperatorMeta, state: StateInfo, key_groups: tuple[int, int]
) -> Iterator[tuple[int, list[dict[str, Any]]]]:
    """(key-group, rows) of the state's non-empty key-groups in ``key_groups`` (first, last), ascending."""
    from statecat.readers.scans.keyview import decode_key_group
    from statecat.readers.scans.scan import scanner_for

    first, last = key_groups
    scanner = cast("KeyedStateScanner", scanner_for(meta, op, state))  # a keyed state's
    for location in sorted(state.keyed_locations, key=lambda loc: loc.start_key_group):
        start = location.start_key_group
        wanted = set(range(max(first, start), min(last, start + location.num_key_groups - 1) + 1))
        if not wanted:
            continue
        for group, data, file, base in scanner._key_groups(location, wanted):
            rows = decode_key_group(scanner, location, group, data, file, base).to_pylist()
            if rows:
                yield group, rows


def key_text(value: Any) -> str | None:
    """A key as a user gives it to ``WHERE key = ...``: text as is, anything else as JSON."""
    return value if isinstance(value, str) or value is None else json_text(value)


def json_text(value: Any) -> str | None:
    from statecat.catalog.render import json_value

    return None if value is None else json.dumps(json_value(value), ensure_ascii=False)


def _batch(rows: list[tuple], schema: pa.Schema) -> pa.RecordBatch:
    columns = list(zip(*rows))
    return pa.RecordBatch.from_arrays([pa.array(list(c), type=f.type) for c, f in zip(columns, schema)], schema=schema)


def _savepoint_error(table: str, path: str, database: str, exc: Exception) -> StatecatError:
    from statecat.catalog.spark.relocation import is_missing, missing_error

    # Moved or deleted since it was attached: say how to put the catalog right.
    problem = missing_error(path, database) if is_missing(path) else exc
    return StatecatError(f"{table}: cannot read savepoint {path} (database {database}): {problem}")


__all__ = [
    "DIFF_TABLE",
    "KEY_VIEW_TABLE",
    "SQL_FORM_KINDS",
    "diff_partitions",
    "ensure_sql_forms",
    "key_group_ranges",
    "key_view_partitions",
    "sql_form_batches",
    "sql_form_columns",
    "sql_form_partitions",
]
