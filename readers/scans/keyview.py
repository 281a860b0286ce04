"""One key's whole story: every keyed state of every operator that holds it, in one savepoint or
across every savepoint and checkpoint under a root.

    from statecat.readers import SavepointReader, key_history

    view = SavepointReader(path).key("key_662")         # KeyView: rows (operator, state, namespace, value, ttl_timestamp)
    view = SavepointReader(path).key(["a", 3])          # a composite key (SQL multi-field, Row, Tuple)
    for entry in key_history("/checkpoints/my-job", "key_662"):
        entry.path, entry.taken_at, entry.view.rows

The key is coerced to each state's key type (text, a number, or a list/dict of fields for
composite keys); a state whose key type it cannot be coerced to is skipped with the reason. Each
state is read through its key's one key-group only. A state with TTL gives its rows' last-access
timestamps as ``ttl_timestamp`` (epoch ms, as the state's ``ttl_timestamp`` column: readers/codecs/ttl.py),
so a key's history shows when each value was last written (or read) and so when it expires.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa
import pyarrow.compute as pc

from statecat.readers.codecs.decoders import TUPLE0_TEXT, hashable
from statecat.readers.codecs.ttl import TTL_COLUMN
from statecat.readers.keygroups import key_group_for
from statecat.readers.scans.scan import KeyedStateScanner, ReadStats, scanner_for
from statecat.statemeta.errors import LookupFailedError, StatecatError, UnsupportedError, did_you_mean
from statecat.statemeta.model import (
    KeyedLocation,
    OperatorMeta,
    StateInfo,
    StateMeta,
    load_state_meta,
    operator_id_for_uid,
)
from statecat.statemeta.naming import matching_states, stable_state_names
from statecat.statemeta.snapshotter.taken_at import (
    FlinkCheckpointHistory,
    in_checkpoint_order,
    placing_of,
    savepoint_time,
)
from statecat.statemeta.types import TypeDescriptor, key_column_type

if TYPE_CHECKING:
    import pandas as pd

    from statecat.readers import SavepointReader
    from statecat.statemeta.descriptors import DescriptorSource

_STRING_KINDS = ("string", "string_data", "char", "CHAR", "VARCHAR")
_INT_RANGES = {
    "byte": 8,
    "TINYINT": 8,
    "short": 16,
    "SMALLINT": 16,
    "int": 32,
    "INTEGER": 32,
    "long": 64,
    "BIGINT": 64,
}
_FLOAT_KINDS = ("float", "double", "FLOAT", "DOUBLE")
_BOOLEAN_KINDS = ("boolean", "BOOLEAN")
_COMPOSITE_KINDS = ("rowdata", "row", "tuple", "ROW")
_WRAPPER_KINDS = ("nullable", "external")


class KeyNotCoercible(ValueError):
    """K cannot be a key of this type; the message says why (shown as a skip reason)."""


def coerce_key(value: Any, key_type: TypeDescriptor) -> Any:
    """``value`` as it appears in the ``key`` column of a state keyed by ``key_type``.

    Text is parsed for numeric and boolean keys, and as a JSON list or object for composite keys;
    a number becomes its decimal text for a string key; a key of one field may also be given as a
    list (or object) of that field. Raises ``KeyNotCoercible``."""
    column = key_column_type(key_type)
    if column is not key_type and isinstance(value, dict):  # a one-field row key as its row
        name = key_type.fields[0][0]
        if list(value) != [name]:
            raise KeyNotCoercible(
                f"{_given(value)} does not fit the key type {column.describe()} (one value, or an object of field {name})"
            )
        return _coerce(value[name], column)
    if column is not key_type and isinstance(value, (list, tuple)):
        if len(value) != 1:
            raise KeyNotCoercible(f"{_given(value)} does not fit the key type {column.describe()} (one value)")
        return _coerce(value[0], column)
    return _coerce(value, column)


def key_form(key_type: TypeDescriptor) -> str:
    """How a key of this type is written (``statecat key PATH K``, ``--key K``), for error hints."""
    t = _unwrapped(key_column_type(key_type))
    if t.kind in _COMPOSITE_KINDS and t.fields:
        example = json.dumps([_example(f) for _, f in t.fields], ensure_ascii=False)
        return f"a JSON list of its {len(t.fields)} fields, e.g. '{example}'"
    if t.kind in _COMPOSITE_KINDS:
        return f'"{TUPLE0_TEXT}", the one key a row of no fields has'
    if t.kind in _STRING_KINDS:
        return "plain text, without quotes or brackets"
    if t.kind in _INT_RANGES:
        return "an integer"
    if t.kind in _FLOAT_KINDS:
        return "a number"
    if t.kind in _BOOLEAN_KINDS:
        return "true or false"
    return "the key column shows it"


def _unwrapped(t: TypeDescriptor) -> TypeDescriptor:
    while t.kind in _WRAPPER_KINDS:
        t = t.fields[0][1]
    return t


def _example(t: TypeDescriptor) -> Any:
    t = _unwrapped(t)
    if t.kind in _COMPOSITE_KINDS and t.fields:
        return [_example(f) for _, f in t.fields]
    if t.kind in _INT_RANGES:
        return 1
    if t.kind in _FLOAT_KINDS:
        return 1.5
    if t.kind in _BOOLEAN_KINDS:
        return True
    return "text"


def _given(value: Any) -> str:
    """What K is, in the words of an error message."""
    if isinstance(value, (list, tuple)):
        return f"a list of {len(value)} field{'s' if len(value) != 1 else ''}"
    if isinstance(value, dict):
        return f"an object of field{'s' if len(value) != 1 else ''} {', '.join(map(str, value))}"
    return repr(value)


def _coerce(value: Any, t: TypeDescriptor) -> Any:
    kind = t.kind
    if kind in _WRAPPER_KINDS:
        return _coerce(value, t.fields[0][1])
    if kind in _COMPOSITE_KINDS and t.fields:
        return _coerce_composite(value, t)
    if kind in _COMPOSITE_KINDS:  # ROW<>: an aggregate over every row keys its state by the empty row
        if value == TUPLE0_TEXT or value in ([], ()):
            return TUPLE0_TEXT
        raise KeyNotCoercible(f'{_given(value)} is not "{TUPLE0_TEXT}", the one key of type {t.describe()}')
    if isinstance(value, (list, tuple, dict)):
        raise KeyNotCoercible(f"{_given(value)} does not fit the key type {t.describe()} (one value)")
    if kind in _STRING_KINDS:
        if isinstance(value, str):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        raise KeyNotCoercible(f"{value!r} is not text, the key type is {t.describe()}")
    if kind in _INT_RANGES:
        number: int | float = _integer(value, t)  # the name holds a float below
        bits = _INT_RANGES[kind]
        if not -(1 << (bits - 1)) <= number < (1 << (bits - 1)):
            raise KeyNotCoercible(f"{number} is out of range of the key type {t.describe()}")
        return number
    if kind in _FLOAT_KINDS:
        if isinstance(value, bool):
            raise KeyNotCoercible(f"{value!r} is not a number, the key type is {t.describe()}")
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise KeyNotCoercible(f"{value!r} is not a number, the key type is {t.describe()}") from None
        if math.isnan(number):  # NaN never equals a stored key
            raise KeyNotCoercible("NaN cannot be looked up")
        return number
    if kind in _BOOLEAN_KINDS:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        raise KeyNotCoercible(f"{value!r} is not true or false, the key type is {t.describe()}")
    if kind == "raw":
        raise KeyNotCoercible(f"the key type cannot be decoded ({'; '.join(t.raw_reasons())})")
    raise KeyNotCoercible(f"statecat does not look up keys of type {t.describe()}")


def _integer(value: Any, t: TypeDescriptor) -> int:
    if isinstance(value, bool):
        raise KeyNotCoercible(f"{value!r} is not an integer, the key type is {t.describe()}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    raise KeyNotCoercible(f"{value!r} is not an integer, the key type is {t.describe()}")


def _coerce_composite(value: Any, t: TypeDescriptor) -> dict:
    names = [name for name, _ in t.fields]
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise KeyNotCoercible(
                f"{value!r} is not a JSON list, the key type {t.describe()} has {len(names)} fields"
            ) from None
    if isinstance(value, dict):
        if set(value) != set(names):
            # Flink keeps no field names for SQL and Tuple keys: they are f0, f1, ...
            raise KeyNotCoercible(
                f"{_given(value)} given, the key type {t.describe()} has field{'s' if len(names) != 1 else ''} "
                + ", ".join(names)
            )
        parts = [value[name] for name in names]
    elif isinstance(value, (list, tuple)):
        if len(value) != len(names):
            raise KeyNotCoercible(f"{_given(value)} given, the key type {t.describe()} has {len(names)}")
        parts = list(value)
    else:
        raise KeyNotCoercible(f"{value!r} is one value, the key type {t.describe()} has {len(names)} fields")
    return {name: None if part is None else _coerce(part, ftype) for part, (name, ftype) in zip(parts, t.fields)}


def parse_key_text(text: str) -> Any:
    """A key as typed on the command line: a JSON list or object stands for a composite key's fields
    (checked against each key type, so ``["a", 1]`` never passes as the text of a STRING key);
    anything else is text, coerced to the key type (``42`` is the text "42" of a STRING key)."""
    if text[:1] in ("[", "{"):
        try:
            parsed = json.loads(text)
        except ValueError:
            return text
        if isinstance(parsed, (list, dict)):
            return parsed
    return text


# ----------------------------------------------------------------------------- the key view


@dataclass(frozen=True)
class KeyRow:
    """One entry of the key: in which operator and state, under which namespace, with what value."""

    operator: str  # the operator's label: uid, else name, else id
    operator_id: str
    state: str
    table: str  # the state's stable table name (as in the Spark catalog and the lake)
    kind: str  # keyed | timer
    key: object  # the key as coerced to this state's key type
    key_group: int
    namespace: object
    value: object  # timers: the timestamp (ms)
    # States with TTL: the last-access timestamp(s) in epoch ms (a list or map for List/MapState); else None
    ttl_timestamp: object = None

    def as_dict(self) -> dict:
        return {
            "operator": self.operator,
            "operator_id": self.operator_id,
            "state": self.state,
            "table": self.table,
            "kind": self.kind,
            "key": self.key,
            "key_group": self.key_group,
            "namespace": self.namespace,
            "value": self.value,
            "ttl_timestamp": self.ttl_timestamp,
        }


KEY_VIEW_COLUMNS = (
    "operator",
    "operator_id",
    "state",
    "table",
    "kind",
    "key",
    "key_group",
    "namespace",
    "value",
    "ttl_timestamp",
)


@dataclass(frozen=True)
class SkippedState:
    """A keyed state the view did not read, and why (its key type does not take K, or it cannot be read)."""

    operator: str
    operator_id: str
    state: str
    reason: str
    coercion: bool  # True when K does not fit the state's key type
    key_type: TypeDescriptor | None = None  # the state's key type, where K does not fit it

    def as_dict(self) -> dict:
        return {"operator": self.operator, "operator_id": self.operator_id, "state": self.state, "reason": self.reason}


@dataclass
class KeyView:
    """Every keyed state of a savepoint that holds ``key``: ``rows``; states passed over: ``skipped``."""

    key: object
    path: str
    checkpoint_id: int
    rows: list[KeyRow] = field(default_factory=list)
    skipped: list[SkippedState] = field(default_factory=list)
    states_read: int = 0
    stats: ReadStats = field(default_factory=ReadStats)
    # A few other keys of the key-groups read (as their key columns show them): when K has no rows,
    # they show how keys look, e.g. "key_662" where "662" was asked for.
    nearby_keys: list = field(default_factory=list)

    @property
    def coercible(self) -> bool:
        """Whether some state's key type took K (False: K fits no keyed state of the savepoint)."""
        return self.states_read > 0 or not any(s.coercion for s in self.skipped)

    def to_pylist(self) -> list[dict]:
        return [row.as_dict() for row in self.rows]

    def to_pandas(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame(self.to_pylist(), columns=list(KEY_VIEW_COLUMNS))

    def _repr_html_(self) -> str:
        from statecat.statemeta.html import block, escape, table

        heading = f"<b>key {escape(repr(self.key))}</b> in {escape(self.path)} (checkpoint {self.checkpoint_id})"
        body = table(
            KEY_VIEW_COLUMNS,
            [[row.as_dict()[c] for c in KEY_VIEW_COLUMNS] for row in self.rows],
            caption=f"{len(self.rows)} row(s) from {self.states_read} state(s)",
        )
        if self.skipped:
            body += table(
                ("operator", "state", "reason"),
                [(s.operator, s.state, s.reason) for s in self.skipped],
                caption="states not read",
            )
        return block(heading + body)


def select_states(
    meta: StateMeta, operators: Sequence[str] | None = None, states: Sequence[str] | None = None
) -> list[tuple[OperatorMeta, StateInfo]]:
    """The states of ``meta`` in the named operators (id, uid or name) with the given names.

    A name that matches nothing raises ``LookupFailedError`` with the known names."""
    chosen = list(meta.states())
    if operators:
        wanted = set()
        for ref in operators:
            # _metadata before Flink 2.0 keeps no uids, but an operator's id is derived from its uid.
            matches = {
                op.id for op in meta.operators if ref in (op.id, op.uid, op.name) or op.id == operator_id_for_uid(ref)
            }
            wanted |= matches
            if not matches:
                raise LookupFailedError(
                    f"unknown operator {ref!r} in savepoint {meta.path}",
                    hint=did_you_mean(ref, [op.label for op in meta.operators] + [op.id for op in meta.operators]),
                )
        chosen = [(op, s) for op, s in chosen if op.id in wanted]
    if states:
        named = set()
        for name in states:
            # Any name of a state (naming.matching_states); one name may stand for a state of several operators.
            found = matching_states(name, chosen, meta)
            if not found:
                raise LookupFailedError(
                    f"unknown state {name!r} in savepoint {meta.path}"
                    + (" (in the operators named)" if operators else ""),
                    hint=did_you_mean(name, {s.name for _, s in chosen}),
                )
            named |= {(op.id, s.name) for op, s in found}
        chosen = [(op, s) for op, s in chosen if (op.id, s.name) in named]
    return chosen


def key_view(
    reader: SavepointReader,
    key: Any,
    *,
    operators: Sequence[str] | None = None,
    states: Sequence[str] | None = None,
) -> KeyView:
    """Every keyed state (values and timers) of ``reader``'s savepoint that holds ``key`` (see ``SavepointReader.key``)."""
    meta = reader.meta
    tables = stable_state_names(meta)
    view = KeyView(key, meta.path, meta.checkpoint_id)
    plans: dict[tuple, list] = {}  # (subtask, stream, key-group) -> the states to decode from its bytes
    for op, state in select_states(meta, operators, states):
        if not state.is_keyed:
            continue
        if state.key is None or key_column_type(state.key).kind == "raw":
            # Not K's fault: no key of any form could be matched against these bytes.
            reasons = "; ".join(state.key.raw_reasons()) if state.key is not None else "no key serializer"
            view.skipped.append(
                SkippedState(op.label, op.id, state.name, f"its keys cannot be decoded ({reasons})", False)
            )
            continue
        try:
            coerced = coerce_key(key, state.key)
            key_group = key_group_for(coerced, state.key, op.max_parallelism)
        except KeyNotCoercible as exc:
            view.skipped.append(SkippedState(op.label, op.id, state.name, str(exc), True, state.key))
            continue
        except StatecatError as exc:  # e.g. a SQL key field whose key-group statecat cannot compute
            view.skipped.append(SkippedState(op.label, op.id, state.name, exc.message, True, state.key))
            continue
        try:
            scanner = cast(KeyedStateScanner, scanner_for(meta, op, state, unpickle=reader.unpickle))  # keyed
        except UnsupportedError as exc:  # a damaged file stays an error, not a state to pass over
            view.skipped.append(SkippedState(op.label, op.id, state.name, exc.message, False))
            continue
        view.states_read += 1
        # A keyed state's locations are keyed ones.
        location = next(
            (loc for loc in state.keyed_locations if loc.holds_key_group(key_group)),
            None,
        )
        if location is None or (
            location.native is None and location.offsets[key_group - location.start_key_group] == 0
        ):
            continue  # no subtask wrote anything into K's key-group
        # The states of an operator share each subtask's stream: its key-group is read once for all
        # (a native RocksDB instance keeps each state in its own column family).
        own = state.name if location.native is not None else None
        plans.setdefault((location.subtask, location.stream, key_group, own), []).append(
            (op, state, scanner, location, coerced)
        )
    for (_, _, key_group, _), items in plans.items():
        reading = items[0][2]
        native = items[0][3].native is not None  # one state per plan: seek to its key
        for group, data, file, base in reading._key_groups(items[0][3], {key_group}, [items[0][4]] if native else None):
            for op, state, scanner, location, coerced in items:
                batch = decode_key_group(scanner, location, group, data, file, base)
                _note_nearby_keys(view.nearby_keys, batch, coerced)
                for row in _rows_of_key(batch, coerced, scanner):
                    view.rows.append(
                        KeyRow(
                            op.label,
                            op.id,
                            state.name,
                            tables[(op.id, state.name)],
                            state.kind,
                            row["key"],
                            group,
                            row["namespace"],
                            row["value"],
                            row.get(TTL_COLUMN),
                        )
                    )
                view.stats.rows += batch.num_rows
        view.stats.bytes_read += reading.stats.bytes_read
        view.stats.key_groups += reading.stats.key_groups
        view.stats.subtasks |= reading.stats.subtasks
    return view


def decode_key_group(
    scanner: KeyedStateScanner,
    location: KeyedLocation,
    key_group: int,
    data: bytes | memoryview,
    file: str,
    base: int,
) -> pa.RecordBatch:
    """All rows of one state in one key-group's bytes (as ``KeyedStateScanner._key_groups`` yields them),
    column-wise where the scanner can, else entry by entry."""
    if scanner.fast is not None:
        _, positions = scanner._locate(key_group, data, location, file, base)
        return scanner._fast_batch([(key_group, data, file, base, location, positions)])
    columns: tuple[list, list, list] = ([], [], [])
    scanner._decode_key_group(key_group, data, location, columns, file, base, None)
    return scanner._batch(columns)


NEARBY_KEYS = 3


def _note_nearby_keys(nearby: list, batch: pa.RecordBatch, key: Any) -> None:
    for other in batch.column("key").slice(0, 2 * NEARBY_KEYS).to_pylist():
        if len(nearby) >= NEARBY_KEYS:
            return
        if other != key and other not in nearby:
            nearby.append(other)


def _rows_of_key(batch: pa.RecordBatch, key: Any, scanner: KeyedStateScanner) -> list[dict]:
    if batch.num_rows == 0:
        return []
    if scanner._filterable_keys():
        # Arrow compares in the column's type (a FLOAT key is matched as the float32 Flink stored).
        wanted = pa.array([key], type=batch.schema.field("key").type)
        return batch.filter(pc.is_in(batch.column(0), value_set=wanted)).to_pylist()
    wanted_key = hashable(key)
    return [row for row in batch.to_pylist() if hashable(row["key"]) == wanted_key]


def key_not_coercible_error(key: Any, views: Iterable[KeyView]) -> LookupFailedError:
    """The error for K that fits no keyed state: per key type present, its states and why K does
    not fit; the hint says how to write a key of each type."""
    by_type: dict[str, tuple[TypeDescriptor, set[str], set[str]]] = {}  # type -> (type, states, reasons)
    for skipped in (s for v in views for s in v.skipped if s.coercion):
        if skipped.key_type is None:
            continue
        column = key_column_type(skipped.key_type)
        _, states, reasons = by_type.setdefault(column.describe(), (skipped.key_type, set(), set()))
        states.add(skipped.state)
        reasons.add(skipped.reason)
    parts: list[str] = []
    forms: dict[str, list[str]] = {}  # how to write a key -> the key types written so
    for described, (key_type, states, reasons) in sorted(by_type.items()):
        names = sorted(states, key=lambda n: (n.startswith("_"), n))  # timers after the job's states
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        parts.append(f"{described} keys ({shown}): {'; '.join(sorted(reasons))}")
        forms.setdefault(key_form(key_type), []).append(described)
    return LookupFailedError(
        f"key {shown_key(key)} fits no keyed state's key type: {' | '.join(parts)}",
        hint="; ".join(f"Write keys of type {' or '.join(types)} as {form}" for form, types in forms.items()) or None,
    )


def shown_key(key: Any) -> str:
    """A key in a message: text quoted, a composite key as the JSON list (or object) it is given as."""
    return repr(key) if isinstance(key, str) else json.dumps(key, ensure_ascii=False, default=str)


# ----------------------------------------------------------------------------- history


@dataclass
class KeyHistoryEntry:
    """One snapshot in a key's history: where, when, and the key view (or why it could not be read)."""

    path: str
    checkpoint_id: int | None
    taken_at: dt.datetime | None
    time_source: str  # where taken_at comes from, or why it is unknown
    view: KeyView | None
    error: str | None = None


def snapshot_time(path: str, flink_history: FlinkCheckpointHistory | None = None) -> tuple[dt.datetime | None, str]:
    """When the snapshot was taken, and where that comes from (``statemeta.taken_at``)."""
    try:
        return savepoint_time(path, flink_history)
    except StatecatError as exc:  # the snapshot itself is then reported as unreadable
        return None, f"unknown: {exc.message}"


def key_history(
    root: str | Sequence[str],
    key: Any,
    *,
    operators: Sequence[str] | None = None,
    states: Sequence[str] | None = None,
    unpickle: bool = False,
    allowed_roots: Sequence[str] | None = None,
    descriptors: DescriptorSource | None = None,
    flink_history: FlinkCheckpointHistory | None = None,
) -> list[KeyHistoryEntry]:
    """The key view of ``key`` in every savepoint and checkpoint under ``root`` (or in each path given),
    in checkpoint order (``statemeta.taken_at.in_checkpoint_order``: by checkpoint id within a job,
    never by a file time that a copy may have reset). ``flink_history`` (Flink's REST checkpoint history)
    times the snapshots no stateInfo times.

    A snapshot that cannot be read, or lacks the named operators/states, is an entry with ``error``;
    a key that fits no keyed state of any snapshot raises ``LookupFailedError``."""
    from statecat.readers import SavepointReader
    from statecat.statemeta.files.discovery import discover_snapshots

    paths = discover_snapshots(root) if isinstance(root, str) else list(root)
    entries = []
    for path in paths:
        taken_at, source = snapshot_time(path, flink_history)
        try:
            meta = load_state_meta(path, allowed_roots=allowed_roots, descriptors=descriptors)
        except StatecatError as exc:
            entries.append(KeyHistoryEntry(path, None, taken_at, source, None, str(exc)))
            continue
        try:
            view = key_view(SavepointReader(meta, unpickle=unpickle), key, operators=operators, states=states)
        except StatecatError as exc:  # e.g. an older savepoint without the named state
            entries.append(KeyHistoryEntry(path, meta.checkpoint_id, taken_at, source, None, str(exc)))
            continue
        entries.append(KeyHistoryEntry(path, meta.checkpoint_id, taken_at, source, view))
    entries = in_checkpoint_order(entries, lambda e: placing_of(e.path, taken=(e.taken_at, e.time_source)))
    views = [e.view for e in entries if e.view is not None]
    if views and not any(v.coercible for v in views):
        raise key_not_coercible_error(key, views)
    return entries


__all__ = [
    "KeyView",
    "KeyRow",
    "SkippedState",
    "KeyHistoryEntry",
    "KeyNotCoercible",
    "coerce_key",
    "key_view",
    "key_history",
    "select_states",
]
