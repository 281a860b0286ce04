"""How big a savepoint's state is, and how it spreads: per operator and state, per key-group and
subtask, per key, and per subtask after a rescale. No Spark; the numbers behind ``catalog.plots``
and ``statecat report``.

    from statecat.readers import skew

    skew.state_sizes(meta).to_pandas()                        # entries and bytes of every state
    groups = skew.key_group_stats(meta, "accState")           # one row per key-group
    skew.subtask_totals(groups)                               # per subtask, as the savepoint is
    skew.rescale_preview(groups, parallelism=4)               # per subtask at parallelism 4
    skew.top_keys(meta, "accState", n=10)                     # the largest keys

Entries and bytes per state and per key-group are those of ``state_bytes`` (what ``statecat.states``
shows): stored bytes, walked from the key-groups' framing without decoding. ``top_keys`` decodes
each entry's key and counts what the entry takes in its key-group, uncompressed: the two length
fields, the key with its key-group prefix and namespace, and the value.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any, cast

from statecat.readers.codecs.decoders import DECODE_FAILURES, hashable
from statecat.readers.keygroups import subtask_for_key_group
from statecat.readers.scans.scan import KeyedStateScanner, _position
from statecat.readers.scans.state_bytes import key_group_bytes, operator_bytes
from statecat.statemeta.errors import FormatError, LookupFailedError, StatecatError
from statecat.statemeta.model import KeyedLocation, OperatorMeta, StateInfo, StateMeta, load_state_meta

if TYPE_CHECKING:
    import pandas as pd

    from statecat.readers import SavepointReader

ENTRY_LENGTH_FIELDS = 8  # an entry's i32 key length and i32 value length


@dataclass(frozen=True)
class StateSize:
    operator: str  # the operator's label: uid, else name, else id
    operator_id: str
    state: str
    kind: str
    entries: int | None  # None: not countable (the coordinator's bytes; see note)
    bytes: int | None
    note: str = ""  # why a state has no size


@dataclass(frozen=True)
class KeyGroupSize:
    key_group: int
    subtask: int  # the subtask whose stream holds the key-group in this savepoint
    entries: int
    bytes: int


@dataclass(frozen=True)
class SubtaskSize:
    subtask: int
    first_key_group: int
    last_key_group: int
    key_groups: int
    entries: int
    bytes: int


@dataclass(frozen=True)
class KeySize:
    key: object  # as in the state's key column
    entries: int  # (namespace, map entry) entries of this key
    bytes: int


class SizeTable(tuple):
    """Rows of one size computation (dataclasses) and what they describe: ``title`` and, for keyed
    state, ``operator``, ``state``, ``parallelism`` and ``max_parallelism``."""

    row_type: type
    title: str
    operator: str | None
    state: str | None
    parallelism: int | None
    max_parallelism: int | None

    def __new__(cls, rows: Iterable, row_type: type, title: str, **context: Any) -> SizeTable:
        table = super().__new__(cls, rows)
        table.row_type = row_type
        table.title = title
        table.operator = context.get("operator")
        table.state = context.get("state")
        table.parallelism = context.get("parallelism")
        table.max_parallelism = context.get("max_parallelism")
        return table

    @property
    def columns(self) -> list[str]:
        return [f.name for f in fields(self.row_type)]

    def column(self, name: str) -> list:
        return [getattr(row, name) for row in self]

    def to_pandas(self) -> pd.DataFrame:
        import pandas as pd

        frame = pd.DataFrame([asdict(row) for row in self], columns=self.columns)
        # Counts that may be missing (None) stay integers (pandas' nullable Int64), not floats.
        return frame.convert_dtypes(convert_string=False, convert_boolean=False, convert_floating=False)

    def _repr_html_(self) -> str:  # notebooks' rich display
        from statecat.statemeta.html import block, table

        numeric = ("entries", "bytes", "key_group", "subtask", "first_key_group", "last_key_group", "key_groups")
        return block(
            table(
                self.columns,
                [[getattr(row, c) for c in self.columns] for row in self],
                caption=self.title,
                numeric=numeric,
            )
        )


def _meta(savepoint: StateMeta | SavepointReader | str) -> StateMeta:
    """A StateMeta from a StateMeta, a SavepointReader (its ``meta``) or a path."""
    if isinstance(savepoint, StateMeta):
        return savepoint
    meta = getattr(savepoint, "meta", None)
    return meta if isinstance(meta, StateMeta) else load_state_meta(cast(str, savepoint))  # then a path


def _keyed_state(meta: StateMeta, state: str, operator: str | None) -> tuple[OperatorMeta, StateInfo]:
    op, info = meta.find_state(state, operator)
    if not info.is_keyed:
        raise LookupFailedError(
            f"{info.name!r} is a {info.kind} state; key-groups and keys belong to keyed states",
            operator=op.label,
            hint="Name a keyed state (see `statecat inspect`)",
        )
    return op, info


def _subtask_of(op: OperatorMeta, info: StateInfo) -> dict[int, int]:
    owner = {}
    for location in info.keyed_locations:  # a keyed state's
        for i in range(location.num_key_groups):
            owner[location.start_key_group + i] = location.subtask
    return owner


def key_group_stats(savepoint: StateMeta | SavepointReader | str, state: str, operator: str | None = None) -> SizeTable:
    """Entries and bytes of a keyed state in each of the operator's key-groups (all of them, empty
    ones too), as ``state_bytes.key_group_bytes`` counts them."""
    meta = _meta(savepoint)
    op, info = _keyed_state(meta, state, operator)
    entries = [0] * op.max_parallelism
    sizes = [0] * op.max_parallelism
    for group in key_group_bytes(meta, op):
        if group.state == info.name:
            entries[group.key_group] += group.entries
            sizes[group.key_group] += group.bytes
    owner = _subtask_of(op, info)
    rows = [
        KeyGroupSize(
            g, owner.get(g, subtask_for_key_group(g, op.parallelism, op.max_parallelism)), entries[g], sizes[g]
        )
        for g in range(op.max_parallelism)
    ]
    return SizeTable(
        rows,
        KeyGroupSize,
        f"{info.name} ({op.label}): entries and bytes per key-group",
        operator=op.label,
        state=info.name,
        parallelism=op.parallelism,
        max_parallelism=op.max_parallelism,
    )


def _subtask_rows(groups: Iterable[KeyGroupSize], subtask_of: Callable[[KeyGroupSize], int]) -> list[SubtaskSize]:
    by_subtask: dict[int, list[KeyGroupSize]] = {}
    for row in groups:
        by_subtask.setdefault(subtask_of(row), []).append(row)
    return [
        SubtaskSize(
            subtask,
            min(r.key_group for r in rows),
            max(r.key_group for r in rows),
            len(rows),
            sum(r.entries for r in rows),
            sum(r.bytes for r in rows),
        )
        for subtask, rows in sorted(by_subtask.items())
    ]


def subtask_totals(groups: SizeTable) -> SizeTable:
    """Per subtask of the savepoint: its key-group range, entries and bytes (from ``key_group_stats``)."""
    return SizeTable(
        _subtask_rows(groups, lambda row: row.subtask),
        SubtaskSize,
        f"{groups.state} ({groups.operator}): per subtask at parallelism {groups.parallelism}",
        operator=groups.operator,
        state=groups.state,
        parallelism=groups.parallelism,
        max_parallelism=groups.max_parallelism,
    )


def rescale_preview(groups: SizeTable, parallelism: int) -> SizeTable:
    """Per subtask if the job were restored at ``parallelism``: Flink's KeyGroupRangeAssignment gives
    key-group g to subtask ``g * parallelism // max_parallelism``."""
    max_parallelism = cast(int, groups.max_parallelism)  # a key_group_stats table's
    if not isinstance(parallelism, int) or not 1 <= parallelism <= max_parallelism:
        raise StatecatError(
            f"expected a parallelism from 1 to the max parallelism {max_parallelism}, got {parallelism!r}",
            operator=groups.operator,
            state=groups.state,
            hint="Flink cannot restore keyed state at a parallelism above its max parallelism",
        )
    rows = _subtask_rows(groups, lambda row: subtask_for_key_group(row.key_group, parallelism, max_parallelism))
    return SizeTable(
        rows,
        SubtaskSize,
        f"{groups.state} ({groups.operator}): per subtask at parallelism {parallelism} (now {groups.parallelism})",
        operator=groups.operator,
        state=groups.state,
        parallelism=parallelism,
        max_parallelism=max_parallelism,
    )


def _key_groups(
    scanner: KeyedStateScanner, info: StateInfo
) -> Iterator[tuple[KeyedLocation, int, bytes | memoryview, str, int]]:
    for location in info.keyed_locations:  # a keyed state's
        for key_group, data, file, base in scanner._key_groups(location, None):
            yield location, key_group, data, file, base


def top_keys(
    savepoint: StateMeta | SavepointReader | str,
    state: str,
    operator: str | None = None,
    *,
    n: int = 10,
    by: str = "bytes",
) -> SizeTable:
    """The ``n`` keys of a keyed state with the most bytes (``by="bytes"``) or entries (``by="entries"``)."""
    if by not in ("bytes", "entries"):
        raise StatecatError(f"expected by='bytes' or by='entries', got {by!r}")
    meta = _meta(savepoint)
    op, info = _keyed_state(meta, state, operator)
    totals: dict = {}  # hashable key -> [key, entries, bytes]
    scanner = KeyedStateScanner(meta, op, info)
    for location, key_group, data, file, base in _key_groups(scanner, info):
        _, positions = scanner._locate(key_group, data, location, file, base)
        prefix = scanner.prefix
        # Timers lead with their 8-byte timestamp; raw priority-queue elements have no separable key.
        skip = prefix + 8 if scanner.value_kind == "timer" else prefix
        kat = 0
        try:
            for kat, klen, vlen in zip(positions[0].tolist(), positions[1].tolist(), positions[3].tolist()):
                # Read without a window: the key-group's bytes are bytes.
                key = (
                    None
                    if scanner.value_kind == "element"
                    else scanner._split_key(cast(bytes, data), kat + skip, kat + klen)[0]
                )
                slot = totals.setdefault(hashable(key), [key, 0, 0])
                slot[1] += 1
                slot[2] += klen + vlen + ENTRY_LENGTH_FIELDS
        except DECODE_FAILURES as exc:
            offset, within = _position(location, base, kat)
            raise FormatError(
                f"could not decode the key of an entry of key-group {key_group}{within}: {exc}",
                file=file,
                offset=offset,
                operator=op.label,
                state=info.name,
                hint="The state file is damaged, or its key type is not what the header says",
            ) from None
    column = 2 if by == "bytes" else 1
    ranked = sorted(totals.values(), key=lambda slot: (-slot[column], -slot[3 - column], str(slot[0])))[:n]
    return SizeTable(
        [KeySize(key, entries, size) for key, entries, size in ranked],
        KeySize,
        f"{info.name} ({op.label}): top {n} keys by {by}",
        operator=op.label,
        state=info.name,
        parallelism=op.parallelism,
        max_parallelism=op.max_parallelism,
    )


def state_sizes(savepoint: StateMeta | SavepointReader | str) -> SizeTable:
    """Entries and bytes of every state of every operator (``state_bytes.operator_bytes``)."""
    meta = _meta(savepoint)
    rows: list[StateSize] = []
    for op in meta.operators:
        try:
            measured = operator_bytes(meta, op).states
        except StatecatError as exc:
            # One operator statecat cannot walk must not hide the sizes of the others.
            rows.extend(StateSize(op.label, op.id, info.name, info.kind, None, None, exc.message) for info in op.states)
            continue
        for info in op.states:
            size = measured[info.name]
            rows.append(StateSize(op.label, op.id, info.name, info.kind, size.entries, size.bytes))
    return SizeTable(rows, StateSize, f"state sizes of {meta.path}")


__all__ = [
    "KeyGroupSize",
    "KeySize",
    "SizeTable",
    "StateSize",
    "SubtaskSize",
    "key_group_stats",
    "rescale_preview",
    "state_sizes",
    "subtask_totals",
    "top_keys",
]
