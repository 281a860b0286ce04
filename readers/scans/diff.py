"""What changed between two savepoints: per state, the keys added, removed and changed.

    from statecat.readers import diff_savepoints

    diff = diff_savepoints(older, newer, states=["accState"])
    for change in diff.changes():          # streamed: Change(operator, state, change, key, namespace, old, new)
        ...
    diff.summary()                         # per state: status, reason, added / removed / changed / unchanged

States are matched by operator id (derived from the uid when there is one) and state name, then by
their stable table name (``statemeta.naming``). Keyed states with the same max parallelism are
compared key-group by key-group, so memory holds one key-group of each side whatever the states'
sizes and whatever the two jobs' parallelism. What cannot be compared (another max parallelism, a
changed type or kind) is a summary line with the reason, never an error.

States with TTL (readers/codecs/ttl.py): each change carries the value's last-access timestamps
(``old_ttl_timestamp``, ``new_ttl_timestamp``), but a change is a change of the value. A key whose
value is equal and whose timestamp moved is counted unchanged, and ``restamped`` says how many of
those there are: with ``OnReadAndWrite`` every read moves the timestamp, and a diff that listed
them would bury the keys whose state did change. That the key was written again shows in the
``restamped`` count, and a key's timestamps in its history (``statecat history``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from statecat.readers.codecs.arrow_types import state_schema
from statecat.readers.codecs.ttl import TTL_COLUMN
from statecat.readers.scans.keyview import decode_key_group, select_states
from statecat.readers.scans.scan import KeyedStateScanner, scanner_for
from statecat.statemeta.errors import StatecatError, UnsupportedError
from statecat.statemeta.model import OperatorMeta, StateInfo, StateMeta, load_state_meta
from statecat.statemeta.naming import stable_state_names
from statecat.statemeta.types import TypeDescriptor

ADDED, REMOVED, CHANGED = "added", "removed", "changed"
COMPARED, NOT_COMPARED, ONLY_IN_A, ONLY_IN_B = "compared", "not compared", "only in A", "only in B"


@dataclass(frozen=True)
class Change:
    """One key (and namespace) of one state that differs: added (new only), removed (old only), changed (both)."""

    operator: str
    state: str
    table: str
    change: str
    key: object
    namespace: object
    old: object
    new: object
    key_group: int | None  # keyed states; None for operator state
    # States with TTL: the last-access timestamps (epoch ms) of the old and new value; else None
    old_ttl_timestamp: object = None
    new_ttl_timestamp: object = None

    def as_dict(self) -> dict:
        return {
            "operator": self.operator,
            "state": self.state,
            "table": self.table,
            "change": self.change,
            "key": self.key,
            "namespace": self.namespace,
            "old": self.old,
            "new": self.new,
            "key_group": self.key_group,
            "old_ttl_timestamp": self.old_ttl_timestamp,
            "new_ttl_timestamp": self.new_ttl_timestamp,
        }


@dataclass
class StateDiff:
    """One state of A matched with one of B (or alone), and the counts once compared."""

    operator: str
    state: str
    table: str
    kind: str
    a: tuple[OperatorMeta, StateInfo] | None
    b: tuple[OperatorMeta, StateInfo] | None
    status: str = COMPARED
    reason: str | None = None
    added: int = 0
    removed: int = 0
    changed: int = 0
    unchanged: int = 0
    restamped: int = 0  # of the unchanged: an equal value with another TTL timestamp

    def as_dict(self) -> dict:
        return {
            "operator": self.operator,
            "state": self.state,
            "table": self.table,
            "kind": self.kind,
            "status": self.status,
            "reason": self.reason,
            "added": self.added,
            "removed": self.removed,
            "changed": self.changed,
            "unchanged": self.unchanged,
            "restamped": self.restamped,
        }


@dataclass
class SavepointDiff:
    """The plan of a diff (``states``, matched at construction) and its changes, read on demand."""

    a: StateMeta
    b: StateMeta
    states: list[StateDiff]
    unpickle: bool = False
    _done: bool = field(default=False, repr=False)

    def changes(self) -> Iterator[Change]:
        """Every change, state after state, key-group after key-group; fills in each state's counts."""
        for entry in self.states:
            if entry.status != COMPARED:
                continue
            entry.added = entry.removed = entry.changed = entry.unchanged = entry.restamped = 0
            try:
                if entry.kind in ("keyed", "timer"):
                    yield from self._keyed_changes(entry)
                else:
                    yield from self._operator_changes(entry)
            except UnsupportedError as exc:
                entry.status, entry.reason = NOT_COMPARED, exc.message
        self._done = True

    def summary(self) -> list[StateDiff]:
        """Per state: status, reason and counts (compares everything first when not done yet)."""
        if not self._done:
            for _ in self.changes():
                pass
        return self.states

    def totals(self) -> dict:
        states = self.summary()
        names = ("added", "removed", "changed", "unchanged", "restamped")
        return {name: sum(getattr(s, name) for s in states) for name in names}

    # -- keyed states: key-group by key-group

    def _keyed_changes(self, entry: StateDiff) -> Iterator[Change]:
        # A compared state is on both sides.
        (op_a, state_a), (op_b, state_b) = cast("tuple[tuple[OperatorMeta, StateInfo], ...]", (entry.a, entry.b))
        side_a = _key_groups(self.a, op_a, state_a, self.unpickle)
        side_b = _key_groups(self.b, op_b, state_b, self.unpickle)
        timers = entry.kind == "timer"
        for group, rows_a, rows_b in merge_key_groups(side_a, side_b):
            yield from self._compare(entry, group, rows_a, rows_b, timers)

    def _compare(
        self, entry: StateDiff, group: int | None, rows_a: list, rows_b: list, exact: bool
    ) -> Iterator[Change]:
        # Timers and operator list elements have no key of their own: the whole row is the identity.
        def identity(row: dict[str, Any]) -> tuple:
            ident = (comparable(row.get("key")), comparable(row.get("namespace")))
            return ident + (comparable(row["value"]),) if exact else ident

        old: dict[tuple, list[dict[str, Any]]] = {}
        for row in rows_a:
            ident = identity(row)
            old.setdefault(ident, []).append(row)
        for row in rows_b:
            ident = identity(row)
            before = old.get(ident)
            if before:
                previous = before.pop()
                if not before:
                    del old[ident]
                if exact or comparable(previous["value"]) == comparable(row["value"]):
                    entry.unchanged += 1
                    if comparable(previous.get(TTL_COLUMN)) != comparable(row.get(TTL_COLUMN)):
                        entry.restamped += 1
                    continue
                entry.changed += 1
                yield Change(
                    entry.operator,
                    entry.state,
                    entry.table,
                    CHANGED,
                    row.get("key"),
                    row.get("namespace"),
                    previous["value"],
                    row["value"],
                    group,
                    previous.get(TTL_COLUMN),
                    row.get(TTL_COLUMN),
                )
            else:
                entry.added += 1
                yield Change(
                    entry.operator,
                    entry.state,
                    entry.table,
                    ADDED,
                    row.get("key"),
                    row.get("namespace"),
                    None,
                    row["value"],
                    group,
                    None,
                    row.get(TTL_COLUMN),
                )
        for rows in old.values():
            for row in rows:
                entry.removed += 1
                yield Change(
                    entry.operator,
                    entry.state,
                    entry.table,
                    REMOVED,
                    row.get("key"),
                    row.get("namespace"),
                    row["value"],
                    None,
                    group,
                    row.get(TTL_COLUMN),
                    None,
                )

    # -- operator states: small by nature (Flink holds them in memory on restore), compared whole

    def _operator_changes(self, entry: StateDiff) -> Iterator[Change]:
        # A compared state is on both sides.
        (op_a, state_a), (op_b, state_b) = cast("tuple[tuple[OperatorMeta, StateInfo], ...]", (entry.a, entry.b))
        rows_a = _operator_rows(self.a, op_a, state_a, self.unpickle)
        rows_b = _operator_rows(self.b, op_b, state_b, self.unpickle)
        # List elements are their own identity; broadcast entries are keyed; the coordinator is one blob.
        yield from self._compare(entry, None, rows_a, rows_b, exact=state_a.kind in ("operator_list", "union"))


def diff_savepoints(
    a: str | StateMeta,
    b: str | StateMeta,
    *,
    operators: Sequence[str] | None = None,
    states: Sequence[str] | None = None,
    unpickle: bool = False,
) -> SavepointDiff:
    """The diff of savepoint ``a`` (old) and ``b`` (new); nothing is read until ``changes()``/``summary()``."""
    from statecat.statemeta.descriptors import with_pyflink_pickles

    meta_a = a if isinstance(a, StateMeta) else load_state_meta(a)
    meta_b = b if isinstance(b, StateMeta) else load_state_meta(b)
    if unpickle:  # PyFlink thread-mode pickles in byte[] state decode too (as the reader does)
        meta_a, meta_b = with_pyflink_pickles(meta_a, unpickle=True), with_pyflink_pickles(meta_b, unpickle=True)
    chosen_a = _chosen(meta_a, operators, states)
    chosen_b = _chosen(meta_b, operators, states)
    if (operators or states) and not chosen_a and not chosen_b:
        # Each name must exist on one side at least: select_states says which names are known.
        select_states(meta_a, operators, states)
    return SavepointDiff(meta_a, meta_b, _match(meta_a, meta_b, chosen_a, chosen_b), unpickle)


def _chosen(
    meta: StateMeta, operators: Sequence[str] | None, states: Sequence[str] | None
) -> list[tuple[OperatorMeta, StateInfo]]:
    try:
        return select_states(meta, operators, states)
    except StatecatError:  # named states may exist on one side only
        return []


def _match(meta_a: StateMeta, meta_b: StateMeta, chosen_a: list, chosen_b: list) -> list[StateDiff]:
    tables_a, tables_b = stable_state_names(meta_a), stable_state_names(meta_b)
    by_id_b = {(op.id, s.name): (op, s) for op, s in chosen_b}
    by_table_b = {tables_b[(op.id, s.name)]: (op, s) for op, s in chosen_b}
    used_b = set()
    pairs: list[tuple] = []
    unmatched_a = []
    for op, s in chosen_a:
        other = by_id_b.get((op.id, s.name))
        if other is None:
            unmatched_a.append((op, s))
            continue
        used_b.add((other[0].id, other[1].name))
        pairs.append(((op, s), other))
    for op, s in unmatched_a:
        # The same logical state under another operator id (a changed SQL plan): its stable table name.
        other = by_table_b.get(tables_a[(op.id, s.name)])
        if other is not None and (other[0].id, other[1].name) not in used_b:
            used_b.add((other[0].id, other[1].name))
            pairs.append(((op, s), other))
        else:
            pairs.append(((op, s), None))
    pairs += [(None, (op, s)) for op, s in chosen_b if (op.id, s.name) not in used_b]
    entries = []
    for side_a, side_b in pairs:
        op, s = side_a or side_b
        table = (tables_a if side_a else tables_b)[(op.id, s.name)]
        entry = StateDiff(op.label, s.name, table, s.kind, side_a, side_b)
        if side_b is None:
            entry.status, entry.reason = ONLY_IN_A, "the state is not in B"
        elif side_a is None:
            entry.status, entry.reason = ONLY_IN_B, "the state is not in A"
        else:
            reason = incomparable(side_a, side_b)
            if reason:
                entry.status, entry.reason = NOT_COMPARED, reason
        entries.append(entry)
    return entries


def incomparable(side_a: tuple[OperatorMeta, StateInfo], side_b: tuple[OperatorMeta, StateInfo]) -> str | None:
    """Why two matched states cannot be compared entry by entry, or None."""
    (op_a, a), (op_b, b) = side_a, side_b
    if (a.kind, a.state_type) != (b.kind, b.state_type):
        return f"the state's kind changed: {a.kind} {a.state_type or ''} -> {b.kind} {b.state_type or ''}".replace(
            "  ", " "
        )
    if a.is_keyed and op_a.max_parallelism != op_b.max_parallelism:
        return (
            f"max parallelism changed: {op_a.max_parallelism} -> {op_b.max_parallelism}; keys fall into other "
            f"key-groups, so the states cannot be compared key-group by key-group"
        )
    changed = []
    for part in ("key", "namespace", "value"):
        type_a, type_b = getattr(a, part), getattr(b, part)
        if _described(type_a) != _described(type_b):
            changed.append(f"{part} {_described(type_a)} -> {_described(type_b)}")
    if not changed:
        try:
            if state_schema(a) != state_schema(b):
                changed.append(f"columns {state_schema(a)} -> {state_schema(b)}".replace("\n", ", "))
        except TypeError as exc:
            return f"statecat has no column type for this state: {exc}"
    if changed:
        return "the type changed: " + "; ".join(changed)
    return None


def _described(desc: TypeDescriptor | None) -> str:
    return desc.describe() if desc is not None else "-"


def merge_key_groups(
    side_a: Iterator[tuple[int, list[dict[str, Any]]]], side_b: Iterator[tuple[int, list[dict[str, Any]]]]
) -> Iterator[tuple[int, list[dict[str, Any]], list[dict[str, Any]]]]:
    """Two sides' (key-group, rows), each in ascending key-group order, merged into (key-group, rows
    of A, rows of B), with [] for a side that has nothing in that key-group. One key-group of each
    side is in memory at a time."""
    next_a, next_b = next(side_a, None), next(side_b, None)
    while next_a is not None or next_b is not None:
        if next_a is not None and next_b is not None and next_a[0] == next_b[0]:
            yield next_a[0], next_a[1], next_b[1]
            next_a, next_b = next(side_a, None), next(side_b, None)
        elif next_a is not None and (next_b is None or next_a[0] < next_b[0]):
            yield next_a[0], next_a[1], []
            next_a = next(side_a, None)
        elif next_b is not None:  # always, here: A is done or ahead
            yield next_b[0], [], next_b[1]
            next_b = next(side_b, None)


def _key_groups(
    meta: StateMeta, op: OperatorMeta, state: StateInfo, unpickle: bool
) -> Iterator[tuple[int, list[dict[str, Any]]]]:
    """(key-group, rows) of each non-empty key-group of the state, in ascending key-group order.

    Locations cover disjoint key-group ranges (one per subtask), so sorting them by their first
    key-group gives the order whatever the job's parallelism."""
    # A keyed state's scanner and locations.
    scanner = cast(KeyedStateScanner, scanner_for(meta, op, state, unpickle=unpickle))
    for location in sorted(state.keyed_locations, key=lambda loc: loc.start_key_group):
        for key_group, data, file, base in scanner._key_groups(location, None):
            rows = decode_key_group(scanner, location, key_group, data, file, base).to_pylist()
            if rows:
                yield key_group, rows


def _operator_rows(meta: StateMeta, op: OperatorMeta, state: StateInfo, unpickle: bool) -> list[dict]:
    scanner = scanner_for(meta, op, state, unpickle=unpickle)
    rows = [row for batch in scanner.batches() for row in batch.to_pylist()]
    if state.kind == "broadcast":
        # Every subtask holds the same copy: one row per entry key, keyed like a map.
        entries: dict[Any, dict[str, Any]] = {}
        for row in rows:
            entries.setdefault(comparable(row["value"]["key"]), row["value"])
        return [{"key": v["key"], "namespace": None, "value": v["value"]} for v in entries.values()]
    # Elements move between subtasks on rescale: compared as a multiset, whatever subtask holds them.
    return [{"key": None, "namespace": None, "value": row["value"]} for row in rows]


def comparable(value: Any) -> Any:
    """A hashable form of a decoded value in which equal state values are equal: maps (Arrow's lists of
    pairs, dicts) ignore entry order, lists keep it; NaN equals NaN."""
    if isinstance(value, dict):
        return ("struct", tuple(sorted(((k, comparable(v)) for k, v in value.items()), key=repr)))
    if isinstance(value, list):
        if value and all(type(item) is tuple and len(item) == 2 for item in value):  # an Arrow map
            return ("map", tuple(sorted(((comparable(k), comparable(v)) for k, v in value), key=repr)))
        return ("list", tuple(comparable(v) for v in value))
    if isinstance(value, tuple):
        return ("list", tuple(comparable(v) for v in value))
    if isinstance(value, float) and math.isnan(value):
        return ("nan",)
    if isinstance(value, bytearray):
        return bytes(value)
    return value


__all__ = ["SavepointDiff", "StateDiff", "Change", "diff_savepoints", "merge_key_groups", "comparable", "incomparable"]
