"""State surgery: SQL statements against a savepoint's tables, evaluated by Spark, written by readers/.

    from statecat.catalog import write_savepoint

    write_savepoint(
        "/savepoints/savepoint-1a2b3c-4d5e6f7a8b9c",
        "/savepoints/fixed",
        sql=["UPDATE accstate SET value = named_struct('f0', value.f0 + 1, 'f1', value.f1) WHERE key = 'key_662'"],
    )

Every statement is parsed with sqlglot's Spark dialect and checked against SRC's tables before
anything runs (edit_plan.py): its kind, its target, the columns it assigns. Spark then evaluates
the statements in order on working copies of the rows they can touch (edit_spark.py), and what
changed (rows gone, rows new) is handed to ``writers/savepoint_writer.py``, which streams SRC into a
new canonical savepoint: key-groups and operator states without a change keep their bytes, rows
without a change keep their entries, new rows are encoded.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import signal
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from statecat.catalog.spark.edit_changes import TableChanges
from statecat.catalog.spark.edit_plan import (
    KEYED_KINDS,
    EditError,
    PlannedStatement,
    element_encoder,
    plan_statements,
    state_columns,
)
from statecat.catalog.spark.edit_spark import SourceTables, evaluate
from statecat.readers.backends.framing import Entry
from statecat.readers.codecs.arrow_types import state_schema
from statecat.readers.codecs.decoders import build_decoder, hashable
from statecat.readers.codecs.values import EncodeError
from statecat.statemeta.errors import Interrupted, StatecatError
from statecat.statemeta.model import OperatorMeta, StateInfo, StateMeta, load_state_meta
from statecat.statemeta.naming import catalog_table_names
from statecat.writers.entry_codec import EntryCodec, StateRow
from statecat.writers.metadata_writer import InlineData, KeyGroupsOut, RelativeFile, WrittenStream
from statecat.writers.publish import check_destination, destination_display
from statecat.writers.savepoint_writer import (
    KeyedJob,
    KeyedRunner,
    WriteSummary,
    rebuild_keyed_stream,
)
from statecat.writers.savepoint_writer import write_savepoint as write_canonical

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from statecat.statemeta.descriptors import DescriptorSet, DescriptorSource

log = logging.getLogger(__name__)

# Java types with a primitive form: a POJO field of these may be declared primitive, which the
# serializer snapshot does not record, and Flink's PojoSerializer cannot set a primitive to NULL.
PRIMITIVE_KINDS = frozenset({"boolean", "byte", "short", "int", "long", "float", "double", "char"})
WRAPPERS = ("ttl", "nullable", "external")
ENGINES = ("local", "spark")


# ----------------------------------------------------------------------------- applying


class ChangesEditor:
    """The StateEditor of evaluated statements: writers/savepoint_writer.py calls it per key-group
    and operator state that changed; it removes the rows that are gone and encodes the new ones.
    A keyed state's changes are read from disk one key-group at a time (edit_changes.py)."""

    def __init__(self, meta: StateMeta, changes: Sequence[TableChanges]) -> None:
        self.meta = meta
        self.codecs: dict[tuple[str, str], EntryCodec] = {}
        self.names = catalog_table_names(meta).states
        self._keyed: dict[tuple[str, str], TableChanges] = {}
        self._elements: dict[tuple[str, str], tuple[list[dict[str, Any]], list[dict[str, Any]]]] = {}
        self._orphans: dict[tuple[str, str, str], set[tuple]] = {}
        self.cleared: dict[str, int] = {}  # table -> rows whose value became NULL or empty: no state
        for stored in changes:
            operator = meta.operator(stored.operator_id)
            state = operator.state(stored.state_name)
            if state.kind in KEYED_KINDS:
                self._keyed[(operator.id, state.name)] = stored
                continue
            removed, added = stored.rows(state)
            for row in added:
                subtask = _subtask_of(row, state)
                if subtask is not None and not 0 <= subtask < operator.parallelism:
                    raise EditError(
                        f"a row of {self._table(operator, state)} is on subtask {subtask} after the edits, but "
                        f"operator {operator.label} runs at parallelism {operator.parallelism} (subtasks 0 to "
                        f"{operator.parallelism - 1})"
                    )
            self._elements[(operator.id, state.name)] = (removed, added)

    def _table(self, operator: OperatorMeta, state: StateInfo) -> str:
        return self.names.get((operator.id, state.name), state.name)

    def _check_added(
        self, operator: OperatorMeta, state: StateInfo, removed: list[dict[str, Any]], added: list[dict[str, Any]]
    ) -> None:
        """Refuses NULLs Flink could not restore; the value each (key, namespace) held before tells
        a NULL Flink wrote itself (no primitive's) from a new one."""
        held = {(hashable(r["key"]), hashable(r.get("namespace"))): r.get("value") for r in removed}
        for row in added:
            identity = (hashable(row["key"]), hashable(row.get("namespace")))
            _check_null_fields(
                state.value,
                row.get("value"),
                "value",
                None,
                self._table(operator, state),
                held.get(identity),
                identity in held,
            )

    def codec(self, operator: OperatorMeta, state: StateInfo) -> EntryCodec:
        key = (operator.id, state.name)
        if key not in self.codecs:
            self.codecs[key] = EntryCodec(self.meta, operator, state)
        return self.codecs[key]

    def key_groups(self, operator_id: str) -> frozenset[int]:
        return frozenset(g for (op, _), stored in self._keyed.items() if op == operator_id for g in stored.key_groups)

    def edit(self, operator: OperatorMeta, key_group: int, entries: dict[str, list[Entry]]) -> dict[str, list[Entry]]:
        out: dict[str, list[Entry]] = {}
        gone_identities: set = set()
        for (operator_id, state_name), stored in self._keyed.items():
            if operator_id != operator.id or key_group not in stored.key_groups:
                continue
            state = operator.state(state_name)
            removed, added = stored.rows(state, key_group)
            self._check_added(operator, state, removed, added)
            out[state_name], gone = self._apply(operator, state, key_group, entries.get(state_name, []), removed, added)
            if state.kind != "timer":  # a timer taken away leaves no other timer without its state
                gone_identities |= gone
        if gone_identities:
            self._warn_orphan_timers(operator, key_group, entries, out, gone_identities)
        return out

    def _apply(
        self,
        operator: OperatorMeta,
        state: StateInfo,
        key_group: int,
        entries: list[Entry],
        removed: list[dict[str, Any]],
        added: list[dict[str, Any]],
    ) -> tuple[list[Entry], set]:
        """The key-group's entries of one state with ``removed`` rows taken out and ``added`` ones
        encoded; and the identities of the rows gone (for the orphan-timer warning)."""
        codec = self.codec(operator, state)
        table = self._table(operator, state)
        columns = state_columns(state)
        new_rows: list[StateRow] = []
        for values in added:
            value = values.get("value")
            if value is None or (codec.kind in ("list", "map") and not value):
                self.cleared[table] = self.cleared.get(table, 0) + 1  # Flink keeps no state for it
                continue
            new_rows.append(StateRow(values["key"], values.get("namespace"), value, None, values.get("ttl_timestamp")))
        found = None
        if len(removed) <= FEW_ROWS and len(new_rows) <= FEW_ROWS:
            found = _found_by_bytes(codec, key_group, entries, removed, new_rows, columns)
        if found is not None:
            kept_entries, gone = found
            kept: list[StateRow] = []
        else:
            kept_entries, kept, gone = [], *_found_by_decoding(codec, key_group, entries, removed, columns, table)
        seen: set = set()
        for row in [*kept, *new_rows]:
            identity = _identity(codec, row)
            if identity in seen:
                raise _two_values(table, codec, row)
            seen.add(identity)
        new_entries = list(kept_entries)
        for row in [*kept, *new_rows]:
            try:
                new_entries += row.entries if row.entries is not None else codec.entries(key_group, row)
            except EncodeError as exc:  # a value Spark gives that Flink's type cannot hold ('ab' as a Java char)
                raise EditError(f"{table}, key {row.key!r}: {exc.message}") from None
        return new_entries, gone - seen

    def _warn_orphan_timers(
        self,
        operator: OperatorMeta,
        key_group: int,
        before: dict[str, list[Entry]],
        after: dict[str, list[Entry]],
        gone: set,
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
                pairs = {
                    (hashable(r.key), hashable(r.namespace))
                    for r in self.codec(operator, state).rows(key_group, entries)
                }
            except StatecatError:
                continue
            if state.kind == "timer":
                timers[state.name] = pairs
            else:
                live |= pairs
        lost = {identity[:2] for identity in gone}
        for name, pairs in timers.items():
            orphans = (lost - live) & pairs
            if orphans:
                self._orphans.setdefault((operator.id, operator.label, name), set()).update(orphans)

    def timer_warnings(self) -> list[str]:
        out = []
        for (operator_id, label, state), pairs in sorted(self._orphans.items()):
            shown = ", ".join(
                repr(key) if namespace is None else f"({key!r}, {namespace!r})" for key, namespace in sorted(pairs)[:5]
            )
            more = f" and {len(pairs) - 5} more" if len(pairs) > 5 else ""
            out.append(
                f"timer table {self.names.get((operator_id, state), state)} of operator {label} still holds timers of "
                f"{len(pairs)} key(s)/namespace(s) whose state was deleted: {shown}{more}; they will fire on empty "
                f"state (DELETE them from that table too)"
            )
        return out

    # -- operator states

    def operator_states(self, operator_id: str) -> frozenset[str]:
        return frozenset(name for op, name in self._elements if op == operator_id)

    def edit_elements(
        self, operator: OperatorMeta, state_name: str, subtask: int | None, elements: list[bytes]
    ) -> list[bytes]:
        state = operator.state(state_name)
        removed, added = self._elements[(operator.id, state_name)]
        value_type = state_schema(state).field("value").type
        decode = None if state.value.kind == "raw" else build_decoder(state.value)
        broadcast = state.kind == "broadcast"
        if broadcast:
            (blob,) = elements or [b"\x00\x00\x00\x00"]
            values, originals = _broadcast_values(decode, blob), None
        else:
            values = [_decode_element(decode, e) for e in elements]
            originals = list(elements)
        shown = pa.array(values, type=value_type).to_pylist()
        columns = state_columns(state)
        mine = [r for r in removed if _subtask_of(r, state) == subtask]
        left = Counter(hashable(_element_row(r, columns)) for r in mine)
        kept: list[tuple[Any, bytes | None]] = []
        for i, value in enumerate(shown):
            h = hashable(_element_row({"value": value, "subtask": subtask}, columns))
            if left[h] > 0:
                left[h] -= 1
                continue
            kept.append((value, originals[i] if originals is not None else None))
        new = [r for r in added if _subtask_of(r, state) == subtask]
        if not mine and not new:
            return elements
        for row in new:
            if row.get("value") is None:
                raise EditError(f"an element of {self._table(operator, state)} cannot be NULL")
            kept.append((row["value"], None))
        encode = element_encoder(state)
        if broadcast:
            out = bytearray(len(kept).to_bytes(4, "big"))
            for value, _ in kept:
                encode(value, out)
            return [bytes(out)]
        result = []
        for value, original in kept:
            if original is not None:
                result.append(original)
            else:
                buffer = bytearray()
                encode(value, buffer)
                result.append(bytes(buffer))
        return result


# A key-group's changed rows found by their keys' bytes, up to this many (decoding only their own
# entries: a one-key edit of a large state decodes one row, not its key-group's tens of thousands);
# more, and the key-group is decoded whole.
FEW_ROWS = 64


def _found_by_bytes(
    codec: EntryCodec,
    key_group: int,
    entries: list[Entry],
    removed: list[dict[str, Any]],
    added: list[StateRow],
    columns: tuple[str, ...],
) -> tuple[list[Entry], set] | None:
    """The entries left once the ``removed`` rows are taken out, each found by its composite key
    (a map's entries: by that prefix) and checked by decoding its own entries; and the rows gone.
    None where the bytes do not settle it (a row not found so, a new row whose key has entries
    left): the caller then decodes the key-group."""
    exact = codec.kind != "map"  # one entry a row, whose key is the row's identity
    index = {key: i for i, (key, _) in enumerate(entries)} if exact else None

    def identity(row: StateRow) -> bytes:
        if codec.kind == "timer":
            return codec.entries(key_group, row)[0][0]  # a timer's entry key is timestamp, key and namespace
        return codec.composite_key(key_group, row.key, row.namespace)

    def places(key: bytes) -> list[int]:
        if index is not None:
            at = index.get(key)
            return [] if at is None else [at]
        return [i for i, (entry_key, _) in enumerate(entries) if entry_key.startswith(key)]

    taken: set[int] = set()
    gone: set = set()
    try:
        for values in removed:
            row = StateRow(
                values["key"], values.get("namespace"), values.get("value"), None, values.get("ttl_timestamp")
            )
            at = [i for i in places(identity(row)) if i not in taken]
            decoded = codec.rows(key_group, [entries[i] for i in at]) if at else []
            if len(decoded) != 1 or hashable({c: _column_value(decoded[0], c) for c in columns}) != hashable(values):
                return None
            taken.update(at)
            gone.add(_identity(codec, decoded[0]))
        if any(i not in taken for row in added for i in places(identity(row))):
            return None  # two values for one key, or a prefix another key shares: decoding tells which
    except (StatecatError, TypeError, ValueError, KeyError):
        return None  # a value the encoder refuses: decoding the key-group says so with the row
    return [entry for i, entry in enumerate(entries) if i not in taken], gone


def _found_by_decoding(
    codec: EntryCodec,
    key_group: int,
    entries: list[Entry],
    removed: list[dict[str, Any]],
    columns: tuple[str, ...],
    table: str,
) -> tuple[list[StateRow], set]:
    """The key-group's rows (with their entries) left once the ``removed`` ones are taken out, and
    the rows gone: every entry decoded."""
    left = Counter(hashable(r) for r in removed)
    kept: list[StateRow] = []
    gone: set = set()
    for row in codec.rows(key_group, entries):
        shown = hashable({c: _column_value(row, c) for c in columns})
        if left[shown] > 0:
            left[shown] -= 1
            gone.add(_identity(codec, row))
            continue
        kept.append(row)
    if +left:
        raise StatecatError(
            f"{table}: {sum(left.values())} row(s) the edits changed are no longer in key-group {key_group} of the "
            f"source",
            hint="Was the source snapshot modified while writing? Run the write again",
        )
    return kept, gone


def _two_values(table: str, codec: EntryCodec, row: StateRow) -> EditError:
    what = "timer" if codec.kind == "timer" else "state"
    return EditError(
        f"{table} would hold two {what}s for key {row.key!r}"
        + (f" and namespace {row.namespace!r}" if row.namespace is not None else "")
        + (f" at {row.value}" if codec.kind == "timer" else "")
        + " after the edits",
        hint="A key (and namespace) holds one value: UPDATE it, DELETE it in an earlier statement, or "
        "MERGE INTO the table"
        if codec.kind != "timer"
        else "A timer is a (key, namespace, timestamp): this one is there already",
    )


def _column_value(row: StateRow, column: str) -> Any:
    return row.ttl_timestamp if column == "ttl_timestamp" else getattr(row, column)


def _identity(codec: EntryCodec, row: StateRow) -> tuple:
    """What a keyed state holds once: a value per (key, namespace); a timer per (key, namespace, time)."""
    base = (hashable(row.key), hashable(row.namespace))
    return (*base, row.value) if codec.kind == "timer" else base


def _subtask_of(row: dict[str, Any], state: StateInfo) -> int | None:
    """The subtask an element lives on; the coordinator's checkpoint belongs to none."""
    if state.kind == "coordinator":
        return None
    # An element inserted without a subtask lives on the first: Flink redistributes list state anyway.
    subtask = row.get("subtask")
    return 0 if subtask is None else subtask


def _element_row(row: dict[str, Any], columns: tuple[str, ...]) -> dict[str, Any]:
    return {c: row.get(c) for c in columns if c != "subtask"}


def _check_null_fields(desc: Any, value: Any, where: str, parent: Any, table: str, old: Any, had: bool) -> None:
    """Refuses a NULL into a POJO field that may be a Java primitive: Flink would fail to restore it.
    ``old``: what the field held before the edits (``had``: the row was there); a NULL that was
    there already is Flink's own, so the field is no primitive."""
    while desc.kind in WRAPPERS:
        desc = desc.fields[0][1]
    if value is None:
        if had and old is None:
            return
        if parent is not None and parent.kind == "pojo" and desc.kind in PRIMITIVE_KINDS:
            raise EditError(
                f"cannot set {where} of {table} to NULL: it is a field of {parent.describe().split('<')[0]} written "
                f"by Flink's {desc.kind} serializer, and if the class declares it as a primitive {desc.kind}, Flink "
                f"cannot restore a NULL there (PojoSerializer: 'Can not set {desc.kind} field … to null value'); "
                f"statecat cannot tell without the job's classes"
            )
        return
    if desc.kind == "pojo" and isinstance(value, dict):
        was = old if isinstance(old, dict) else None
        for field_name, field_desc in desc.fields:
            if field_name in value:
                before = was.get(field_name) if was is not None else None
                _check_null_fields(
                    field_desc, value[field_name], f"{where}.{field_name}", desc, table, before, had and was is not None
                )
    elif desc.kind in ("list", "map") and isinstance(value, list) and not had:
        # Elements cannot be paired with the old ones: only a new row's are checked.
        for element in value:
            element_desc = desc.fields[0][1] if desc.kind == "list" else desc.child("value")
            element_value = element if desc.kind == "list" else element[1]
            _check_null_fields(element_desc, element_value, f"{where}[]", desc, table, None, False)


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


# Spark's tasks (--engine spark) are rows of a DataFrame, so that they run on a classic session's
# executors and on a Spark Connect server's alike; each returns its stream's handle as columns.
TASK_SCHEMA = (
    "operator_id string, subtask int, start_key_group int, offsets array<bigint>, inline_name string, "
    "inline_data binary, file_path string, file_size bigint, counts map<string, bigint>"
)


def _spark_runner(spark: SparkSession, source: str, descriptors: Any, changes: Sequence[TableChanges]) -> KeyedRunner:
    def run(jobs: list[KeyedJob], directory: str) -> dict[KeyedJob, tuple[KeyGroupsOut, dict[str, int]]]:
        work = spark.createDataFrame(
            [(job.operator_id, job.subtask) for job in jobs], "operator_id string, subtask int"
        ).repartition(len(jobs))
        task = functools.partial(_rebuild_in_task, source, descriptors, tuple(changes), directory)
        results = {}
        for row in work.mapInArrow(task, TASK_SCHEMA).collect():
            stream: WrittenStream = (
                InlineData(row.inline_name, bytes(row.inline_data))
                if row.file_path is None
                else RelativeFile(row.file_path, row.file_size)
            )
            handle = KeyGroupsOut(row.start_key_group, tuple(row.offsets), stream)
            results[KeyedJob(row.operator_id, row.subtask)] = (handle, dict(row.counts))
        return results

    return run


def _rebuild_in_task(
    source: str,
    descriptors: Any,
    changes: tuple[TableChanges, ...],
    directory: str,
    batches: Iterable[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """Spark tasks: each subtask's keyed stream of the batch rebuilt, with the evaluated changes applied."""
    meta = load_state_meta(source, descriptors=descriptors)
    editor = ChangesEditor(meta, changes) if changes else None
    for batch in batches:
        for job in batch.to_pylist():
            handle, counts = rebuild_keyed_stream(meta, KeyedJob(job["operator_id"], job["subtask"]), editor, directory)
            stream = handle.stream
            placed = (
                {"inline_name": stream.name, "inline_data": stream.data, "file_path": None, "file_size": None}
                if isinstance(stream, InlineData)
                else {"inline_name": None, "inline_data": None, "file_path": stream.path, "file_size": stream.size}
            )
            yield pa.RecordBatch.from_pylist(
                [
                    {
                        **job,
                        "start_key_group": handle.start_key_group,
                        "offsets": list(handle.offsets),
                        **placed,
                        "counts": list(counts.items()),
                    }
                ],
                schema=_task_schema(),
            )


def _task_schema() -> pa.Schema:
    return pa.schema(
        [
            ("operator_id", pa.string()),
            ("subtask", pa.int32()),
            ("start_key_group", pa.int32()),
            ("offsets", pa.list_(pa.int64())),
            ("inline_name", pa.string()),
            ("inline_data", pa.binary()),
            ("file_path", pa.string()),
            ("file_size", pa.int64()),
            ("counts", pa.map_(pa.string(), pa.int64())),
        ]
    )


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
    spark: SparkSession | Callable[[], SparkSession] | None = None,
    engine: str = "local",
    descriptors: DescriptorSource | None = None,
) -> WriteResult:
    """Writes ``source`` (any snapshot statecat reads) as a canonical savepoint at ``destination``,
    with the ``sql`` statements applied, operators dropped, uids set and keys moved to the
    key-groups of a new ``max_parallelism``. Statements are checked before anything runs, then
    evaluated by Spark; ``destination`` appears whole or not at all.

    ``spark``: the SparkSession (or a function returning one, called once the statements are
    checked) that evaluates the statements, and with ``engine="spark"`` rebuilds the subtasks'
    keyed streams in parallel tasks (DST must then be on storage every executor writes to). Without
    it, statements run on the home's server when one runs, else in a local session
    (``edit_session``). ``descriptors``: declared PyFlink state types (a descriptor file, its
    document or a DescriptorSet), so typed PyFlink state can be edited."""
    if engine not in ENGINES:
        raise StatecatError(f"expected an engine among {', '.join(ENGINES)}, got {engine!r}")
    statements = [sql] if isinstance(sql, str) else list(sql)
    descriptor_set: DescriptorSet | None = None
    if descriptors is not None:
        from statecat.statemeta.descriptors import as_descriptor_set

        descriptor_set = as_descriptor_set(descriptors)  # parsed once: Spark gets the same
    meta = load_state_meta(source, descriptors=descriptor_set)
    planned = plan_statements(meta, statements)
    check_destination(meta, destination, overwrite)  # before Spark starts
    from statecat import __version__
    from statecat.statemeta.snapshotter.stateinfo import metadata_fingerprint

    source_path = meta.path if "://" in meta.path else os.path.abspath(meta.storage.directory)
    dropped = list(drop_operators)
    provenance: dict[str, Any] = {
        "source": source_path,
        "source_metadata_sha256": metadata_fingerprint(meta.storage).sha256,
        "statements": statements,
        "drop_operators": dropped,
        "set_uids": dict(set_uids or {}),
        "max_parallelism": max_parallelism,
        "descriptors": descriptor_set is not None,
        "written_by": f"statecat {__version__}",
        "written_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    session: SparkSession | None = None
    if planned or engine == "spark":
        if spark is None:
            raise StatecatError(
                "statements are evaluated by Spark, and --engine spark runs Spark tasks: pass spark=SparkSession",
                hint="statecat.catalog.session() gives one on the home's server",
            )
        session = spark() if callable(spark) else spark
    with contextlib.ExitStack() as scratch:
        changes: list[TableChanges] = []
        if planned:
            assert session is not None
            try:
                # The changes are files in the scratch directory until DST is written.
                changes = _evaluate(session, meta, source_path, scratch, destination, planned, descriptor_set)
            except Interrupted as exc:  # Spark's work is dropped with its scratch directory: say that DST is not there
                name = signal.Signals(exc.signum).name
                raise Interrupted(
                    exc.signum, f"interrupted by {name}: nothing written at {destination_display(destination)}"
                ) from None
        editor = ChangesEditor(meta, changes) if changes else None
        runner = None
        if engine == "spark":
            assert session is not None
            runner = _spark_runner(session, source_path, descriptor_set, changes)
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
    if editor is not None:
        for table, rows in sorted(editor.cleared.items()):
            warnings.append(
                f"{rows} row(s) of {table} have a NULL value (or an empty list or map) after the edits: Flink keeps "
                f"no state for them, so none is written"
            )
    for statement in planned:
        if statement.matched == 0:
            warnings.append(f"{statement.sql!r} matched no rows")
    return WriteResult(summary, planned, warnings)


def _evaluate(
    spark: SparkSession,
    meta: StateMeta,
    source_path: str,
    scratch: contextlib.ExitStack,
    destination: str,
    planned: list[PlannedStatement],
    descriptors: DescriptorSet | None,
) -> list[TableChanges]:
    """The statements' changes, in a scratch directory that ``scratch`` removes."""
    from statecat.catalog.spark.edit_spark import scratch_directory

    directory = scratch.enter_context(scratch_directory(destination))
    descriptor_file = None
    if descriptors is not None:
        descriptor_file = os.path.join(directory, "descriptors.json")
        with open(descriptor_file, "w", encoding="utf-8") as f:
            json.dump(descriptors.to_json(), f)
    tables = SourceTables(source_path, descriptor_file, descriptors.classpath if descriptors is not None else ())
    return evaluate(spark, meta, tables, planned, directory)
