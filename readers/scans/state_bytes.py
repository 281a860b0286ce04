"""Bytes and entries of each state in its operator's streams, adding up to the operator's total (no Spark).

The canonical format keeps no per-state offsets: a subtask's keyed stream holds every keyed state
of the operator, key-group by key-group. So keyed sizes come from walking the key-groups' framing
once per stream (the scanner's compiled walk; no key or value is decoded). Operator states' sizes
come from the element offsets in ``_metadata`` (broadcast entry counts from each copy's first 4 bytes).

What is counted, so that for every operator
``sum(state bytes) + framing_bytes + unattributed_bytes == operator_bytes``:

* keyed and timer state: in each key-group, the state's run of entries: the 2-byte state id that
  opens the run, then per entry its 4-byte key length, key (key-group prefix, key, namespace, map
  key or timer), 4-byte value length and value. A snappy-compressed key-group's stored bytes are
  shared out in proportion to those uncompressed bytes (largest remainder, so they add up exactly).
* operator list, union and broadcast state: the state's part of each subtask's operator stream,
  from its first element to the next state's first element (or the stream's end).
* the coordinator (``_coordinator``): its whole stream.
* ``framing_bytes``: the header at the start of each keyed and operator stream (serializer
  snapshots, state names) and each non-empty key-group's 2-byte end marker (its proportional share
  when compressed); a stream that holds no state's data is framing as a whole.
* ``unattributed_bytes``: streams whose bytes statecat cannot tell apart by state: handles it
  does not read (native RocksDB, raw keyed or operator state) and key-groups in a layout other
  than the canonical savepoint's (heap-backend checkpoints), whose states' ``bytes`` and
  ``entries`` are ``None``.
* ``operator_bytes``: every stream of the operator in the snapshot.

``entries``: keyed state: stored entries, one per key and namespace (MapState: one per map entry;
timers: one per timer); list and union state: elements; broadcast state: map entries, summed over
the subtasks' identical copies; coordinator: ``None`` (connector-specific bytes).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import cast

from statecat.readers.scans.scan import (
    KeyedStateScanner,
    ReadStats,
    _keyed_state_counts,
    _read_up_to,
    decompress_snappy_framed,
)
from statecat.statemeta.errors import FormatError, StatecatError
from statecat.statemeta.files.headers import open_stream
from statecat.statemeta.files.metadata import (
    FileStream,
    InlineStream,
    NativeRocksDBHandle,
    OperatorState,
    UnsupportedKeyedHandle,
)
from statecat.statemeta.model import KeyedLocation, OperatorLocation, OperatorMeta, StateInfo, StateMeta

CANONICAL_LAYOUT = "canonical"  # KeyedLocation.layout of a savepoint's (and full RocksDB checkpoint's) key-groups
END_MARKER_BYTES = 2  # 0xFFFF after a key-group's last entry
STATE_ID_BYTES = 2  # opens each state's run of entries in a key-group
ENTRY_LENGTH_BYTES = 8  # the i32 key length and i32 value length of each entry

_I32 = struct.Struct(">i").unpack_from


@dataclass(frozen=True)
class StateBytes:
    bytes: int | None  # None: not measured (its key-groups are not in the canonical layout)
    entries: int | None  # None: not countable (the coordinator's opaque bytes) or not measured


@dataclass(frozen=True)
class KeyGroupBytes:
    """One keyed state's share of one key-group of one subtask's stream."""

    subtask: int
    key_group: int
    state: str
    entries: int
    bytes: int


@dataclass(frozen=True)
class OperatorBytes:
    operator_id: str
    states: dict[str, StateBytes]  # by state name, summed over subtasks
    framing_bytes: int
    unattributed_bytes: int
    operator_bytes: int

    @property
    def state_bytes(self) -> int:
        return sum(s.bytes or 0 for s in self.states.values())


class _KeyGroupWalker(KeyedStateScanner):
    """The scanner's key-group reading and framing walk without its decoders: sizes decode nothing,
    so they are known for states whose types statecat cannot decode too."""

    def __init__(self, meta: StateMeta, operator: OperatorMeta, state: StateInfo) -> None:  # no super(): no decoders
        self.meta = meta
        self.operator = operator
        self.state = state
        self.prefix = operator.key_group_prefix_bytes
        self.state_counts = _keyed_state_counts(operator)
        self.stats = ReadStats()

    def run_bytes(
        self, key_group: int, data: bytes | memoryview, location: KeyedLocation, file: str, base: int
    ) -> tuple[int, int]:
        """(entries, uncompressed bytes) of this state's run in one key-group."""
        _, (_, key_len, _, value_len) = self._locate(key_group, data, location, file, base)
        count = len(key_len)
        if not count:
            return 0, 0
        return count, STATE_ID_BYTES + ENTRY_LENGTH_BYTES * count + int(key_len.sum()) + int(value_len.sum())


def keyed_stream_bytes(
    meta: StateMeta, operator: OperatorMeta, located: list[tuple[StateInfo, KeyedLocation]]
) -> tuple[list[KeyGroupBytes], int]:
    """Each state's share of each non-empty key-group of one subtask's keyed stream, and the
    stream's framing bytes. ``located``: every keyed state of that stream with its location."""
    first = located[0][1]
    stored = _stored_key_group_bytes(first)
    walkers = [(state, location, _KeyGroupWalker(meta, operator, state)) for state, location in located]
    framing = min((o for o in first.offsets if o > 0), default=first.stream.size)  # the stream's header
    out: list[KeyGroupBytes] = []
    for key_group, data, file, base in walkers[0][2]._key_groups(first, None):
        runs = [
            (state.name, *walker.run_bytes(key_group, data, location, file, base))
            for state, location, walker in walkers
        ]
        uncompressed = [size for _, _, size in runs] + [END_MARKER_BYTES]
        shares = _shares(stored[key_group], uncompressed) if first.compressed else uncompressed
        if sum(shares) != stored[key_group]:
            # The walk checked each run and the end marker: bytes outside them are damage.
            raise FormatError(
                f"expected key-group {key_group} to hold only its states' entries and the end "
                f"marker ({sum(shares)} bytes), it spans {stored[key_group]}",
                file=file,
                offset=base,
                operator=operator.label,
                hint="The state file is damaged",
            )
        framing += shares[-1]
        out.extend(
            KeyGroupBytes(first.subtask, key_group, name, entries, share)
            for (name, entries, _), share in zip(runs, shares[:-1])
            if entries
        )
    return out, framing


def operator_bytes(meta: StateMeta, operator: OperatorMeta) -> OperatorBytes:
    """Bytes and entries of each of the operator's states, with the framing and the operator's total."""
    totals: dict[str, list] = {s.name: [0, 0 if s.kind != "coordinator" else None] for s in operator.states}
    framing = 0
    measured: set = set()  # (subtask, stream) of every stream measured here
    keyed = _keyed_streams(operator)
    operator_streams: dict[tuple, list[tuple[StateInfo, OperatorLocation]]] = {}
    for state in operator.states:
        for location in state.locations:
            if state.kind == "coordinator":
                totals[state.name][0] += location.stream.size
                measured.add((location.subtask, location.stream))
            elif not state.is_keyed:
                # An operator state's location is an operator one.
                operator_streams.setdefault((location.subtask, location.stream), []).append(
                    (state, cast(OperatorLocation, location))
                )

    native_bytes = 0
    # The name holds keyed states with their locations first, then operator states with theirs.
    located: list[tuple[StateInfo, KeyedLocation]] | list[tuple[StateInfo, OperatorLocation]]
    for where, located in keyed.items():
        native = located[0][1].native
        if native is not None:
            # Each SST file holds one column family (state); the meta-data stream, MANIFEST,
            # OPTIONS and CURRENT are the instance's framing. Entries would need a full read.
            from statecat.readers.backends.native_rocksdb import column_family_bytes

            sizes = column_family_bytes(meta.storage, native)
            for state, _ in located:
                size = totals[state.name][0]
                totals[state.name] = [None if size is None else size + sizes.get(state.name, 0), None]
            framing += native.size - sum(sizes.get(state.name, 0) for state, _ in located)
            native_bytes += native.size
            continue
        if any(getattr(location, "layout", CANONICAL_LAYOUT) != CANONICAL_LAYOUT for _, location in located):
            for state, _ in located:
                totals[state.name] = [None, None]
            continue
        measured.add(where)
        groups, stream_framing = keyed_stream_bytes(meta, operator, located)
        framing += stream_framing
        for group in groups:
            if totals[group.state][0] is None:
                continue
            totals[group.state][0] += group.bytes
            totals[group.state][1] += group.entries
    for where, located in operator_streams.items():
        measured.add(where)
        starts = [o for _, location in located for o in location.offsets]
        framing += min(starts, default=where[1].size)  # the header; all of it when no state has elements
        for state, location in located:
            if not location.offsets:
                continue
            totals[state.name][0] += location.end - min(location.offsets)
            totals[state.name][1] += (
                _broadcast_entries(meta, operator, state, location)
                if state.kind == "broadcast"
                else len(location.offsets)
            )

    total = operator_stream_bytes(meta, operator.id)
    unattributed = total - sum(stream.size for _, stream in measured) - native_bytes
    states = {name: StateBytes(size, entries) for name, (size, entries) in totals.items()}
    return OperatorBytes(operator.id, states, framing, unattributed, total)


def savepoint_bytes(meta: StateMeta) -> dict[str, OperatorBytes]:
    """``operator_bytes`` of every operator, by operator id."""
    return {op.id: operator_bytes(meta, op) for op in meta.operators}


def key_group_bytes(meta: StateMeta, operator: OperatorMeta) -> Iterator[KeyGroupBytes]:
    """Every keyed state's share of every non-empty key-group of every subtask (per-key-group
    statistics): what ``operator_bytes`` sums. A native RocksDB instance keeps no per-key-group
    sizes: its states' key-groups count their live entries' key and value bytes."""
    for located in _keyed_streams(operator).values():
        if located[0][1].native is None:
            yield from keyed_stream_bytes(meta, operator, located)[0]
            continue
        for state, location in located:
            walker = _KeyGroupWalker(meta, operator, state)
            for key_group, data, file, base in walker._key_groups(location, None):
                _, (_, key_len, _, value_len) = walker._locate(key_group, data, location, file, base)
                if len(key_len):
                    yield KeyGroupBytes(
                        location.subtask, key_group, state.name, len(key_len), int(key_len.sum()) + int(value_len.sum())
                    )


def operator_stream_bytes(meta: StateMeta, operator_id: str) -> int:
    """Every stream of the operator in the snapshot: keyed, operator and raw state of each
    subtask, handles statecat does not read, and the coordinator's (as ``statecat inspect`` counts)."""
    raw = next(op for op in meta.metadata.operators if op.id == operator_id)
    return (raw.coordinator.size if raw.coordinator is not None else 0) + subtask_stream_bytes(raw)


def subtask_stream_bytes(raw_operator: OperatorState) -> int:
    """The streams of an operator's subtasks (``_metadata``'s operator): keyed, operator and raw
    state, and the handles statecat does not read; not the coordinator's."""
    total = 0
    for subtask in raw_operator.subtasks:
        for handle in (subtask.managed_keyed, subtask.raw_keyed, subtask.managed_operator, subtask.raw_operator):
            stream = getattr(handle, "stream", None)
            if isinstance(stream, (InlineStream, FileStream)):
                total += stream.size
            elif isinstance(handle, (NativeRocksDBHandle, UnsupportedKeyedHandle)):
                total += handle.size
    return total


def _keyed_streams(operator: OperatorMeta) -> dict[tuple, list[tuple[StateInfo, KeyedLocation]]]:
    """(subtask, stream) -> the keyed states in that stream, each with its location."""
    streams: dict[tuple, list] = {}
    for state in operator.states:
        if state.is_keyed:
            for location in state.locations:
                streams.setdefault((location.subtask, location.stream), []).append((state, location))
    return streams


def _stored_key_group_bytes(location: KeyedLocation) -> dict[int, int]:
    """Stored (compressed or not) bytes of each non-empty key-group of a location."""
    starts = sorted(o for o in location.offsets if o > 0)
    ends = dict(zip(starts, starts[1:] + [location.stream.size]))
    return {location.start_key_group + i: ends[o] - o for i, o in enumerate(location.offsets) if o > 0}


def _shares(total: int, weights: list[int]) -> list[int]:
    """``total`` split in proportion to ``weights``, in integers that add up to ``total``
    (largest remainder; ties go to the earlier part)."""
    weight = sum(weights)
    exact = [total * w for w in weights]
    shares = [e // weight for e in exact]
    by_remainder = sorted(range(len(weights)), key=lambda i: (-(exact[i] % weight), i))
    for i in by_remainder[: total - sum(shares)]:
        shares[i] += 1
    return shares


def _broadcast_entries(meta: StateMeta, operator: OperatorMeta, state: StateInfo, location: OperatorLocation) -> int:
    """The entry count a broadcast state's copy starts with (an i32 before its entries)."""
    start = min(location.offsets)
    length = location.end - start
    stream, file, base = open_stream(meta.storage, location.stream, 0)
    with stream:
        stream.seek(base + start)
        data = _read_up_to(stream, length if location.compressed else min(length, 4))
    if location.compressed:
        data = decompress_snappy_framed(data, file, base + start)
    count = _I32(data, 0)[0] if len(data) >= 4 else -1
    if not 0 <= count <= (len(data) if location.compressed else length) - 4:  # an entry takes a byte at least
        raise FormatError(
            f"expected a broadcast entry count within the state's {length} bytes, got "
            f"{'nothing' if count < 0 else count}",
            file=file,
            offset=base + start,
            operator=operator.label,
            state=state.name,
            hint="The state file is damaged",
        )
    return count


__all__ = [
    "KeyGroupBytes",
    "OperatorBytes",
    "StateBytes",
    "StatecatError",
    "key_group_bytes",
    "keyed_stream_bytes",
    "operator_bytes",
    "operator_stream_bytes",
    "savepoint_bytes",
]
