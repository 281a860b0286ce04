"""Streams one state's rows out of its subtasks' state streams as Arrow record batches.

Keyed state is read key-group by key-group (each one a byte range given by the handle's offsets),
so memory is bounded by one key-group plus one batch, and reading chosen key-groups touches only
their bytes. Operator state is read element by element at the offsets the handle lists.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from statecat.readers.backends.streams import decompress_snappy_framed
from statecat.readers.codecs.arrow_types import state_schema
from statecat.readers.codecs.decoders import (
    DECODE_FAILURES,
    LIST_ELEMENT_DELIMITER,
    TIMER_TIMESTAMP_FLIP,
    DecodeError,
    build_decoder,
    build_key_decoder,
    hashable,
)
from statecat.readers.codecs.ttl import split as split_ttl
from statecat.readers.codecs.ttl import stamped_decoder, ttl_layout
from statecat.readers.scans.fastscan import (
    MIN_ENTRY_BYTES,
    WALK_BAD_STATE_ID,
    WALK_ERRORS,
    WALK_OK,
    ColumnExtractor,
    plan_column,
    walk_key_group_all,
)
from statecat.statemeta.errors import FormatError, StatecatError, UnsupportedError
from statecat.statemeta.files.headers import open_stream
from statecat.statemeta.files.metadata import InlineStream
from statecat.statemeta.model import (
    HEAP_CHECKPOINT_LAYOUT,
    NATIVE_ROCKSDB_LAYOUT,
    KeyedLocation,
    OperatorLocation,
    OperatorMeta,
    StateInfo,
    StateMeta,
)
from statecat.statemeta.types import TypeDescriptor

if TYPE_CHECKING:
    from statecat.readers.backends.heap_checkpoint import HeapKeyGroupDecoder
    from statecat.readers.codecs.decoders import Decoder
    from statecat.statemeta.files.metadata import NativeRocksDBHandle
    from statecat.statemeta.files.storage import StateFile

DEFAULT_BATCH_ROWS = 65_536
# Key-group bytes decoded column-wise in one go: many small key-groups share the per-call cost,
# while a large key-group is decoded alone (no copy) and while its bytes are still in the core's cache.
FAST_GROUP_BYTES = 1 << 20
# Largest single read of state data: lengths come from _metadata, the file may be shorter.
READ_PIECE_BYTES = 64 << 20

_U16 = struct.Struct(">H").unpack_from
_I32 = struct.Struct(">i").unpack_from
_U64 = struct.Struct(">Q").unpack_from


@dataclass
class ReadStats:
    """What a read cost: bytes of state data read from storage and key-groups visited."""

    bytes_read: int = 0
    key_groups: int = 0
    rows: int = 0
    subtasks: set = field(default_factory=set)


def _skip_length_trailer(buf: bytes, pos: int, n: int) -> int:
    """Checks Flink's little-endian base-256 trailer of the length ``n`` at ``pos``; returns the
    position after it. A trailer that disagrees means key and namespace were split wrongly."""
    stored = buf[pos]
    pos += 1
    shift = 8
    while n >> shift:
        stored |= buf[pos] << shift
        pos += 1
        shift += 8
    if stored != n:
        raise DecodeError(f"key or namespace of {n} bytes is followed by the length {stored}")
    return pos


def _read_up_to(stream: StateFile, n: int) -> bytes:
    """At most ``n`` bytes, read in bounded pieces: ``n`` comes from _metadata, and a buffered read
    allocates its whole size up front even when the file is shorter."""
    if n <= READ_PIECE_BYTES:
        return stream.read(n)
    pieces = []
    while n > 0:
        piece = stream.read(min(n, READ_PIECE_BYTES))
        if not piece:
            break
        pieces.append(piece)
        n -= len(piece)
    return b"".join(pieces)


class WindowBuffer:
    """Consecutive key-groups' bytes read into one buffer that is reused from window to window.

    The column cut of a window then needs no copy to join its key-groups, and no fresh pages from
    the kernel for every window. Reuse is safe because every column cut out of it is a copy; a
    window is reset only after all its batches were built. A key-group that does not fit is read
    on its own (``read`` returns None) and its window is joined as before."""

    def __init__(self, capacity: int | None = None) -> None:
        # A window flushes once it holds FAST_GROUP_BYTES, so most windows fit in twice that.
        self.data = bytearray(2 * FAST_GROUP_BYTES if capacity is None else capacity)
        self.view = memoryview(self.data)
        self.used = 0
        self.starts: dict[int, int] = {}  # id of a view handed out in this window -> its start

    def read(self, stream: StateFile, n: int) -> memoryview | None:
        """The next ``n`` bytes of ``stream`` in the buffer (fewer at the end of the file), or None
        (nothing read) when they do not fit."""
        start = self.used
        if start + n > len(self.data):
            return None
        got = 0
        while got < n:
            count = stream.readinto(self.view[start + got : start + n])
            if not count:
                break
            got += count
        self.used = start + got
        part = self.view[start : start + got]
        self.starts[id(part)] = start
        return part

    def joined(self, datas: list) -> tuple | None:
        """(the buffer's filled bytes, {id of each data: its start}) when every one of ``datas``
        was read into this buffer in this window, else None."""
        if all(id(data) in self.starts for data in datas):
            return self.view[: self.used], self.starts
        return None

    def reset(self) -> None:
        self.used = 0
        self.starts = {}


class KeyedStateScanner:
    """Decodes one keyed (or timer) state of one operator."""

    def __init__(self, meta: StateMeta, operator: OperatorMeta, state: StateInfo, *, unpickle: bool = False) -> None:
        if not state.is_keyed:
            raise ValueError(f"{state.name} is not a keyed state")
        self.meta = meta
        self.operator = operator
        self.state = state
        self.schema = _schema(operator, state)
        self.prefix = operator.key_group_prefix_bytes
        self.state_counts = _keyed_state_counts(operator)
        # A keyed state has a key type (casts below: StateInfo.key is None for operator states only).
        self.key_raw = state.key_type.kind == "raw"
        self.key_decoder = None if self.key_raw else build_key_decoder(state.key_type)
        namespace = state.namespace or TypeDescriptor.of("void_namespace")
        self.namespace_raw = namespace.kind == "raw"
        self.namespace_decoder = None if self.namespace_raw else build_decoder(namespace, unpickle=unpickle)
        self.namespace_length = namespace.fixed_length
        self.ambiguous = (
            state.kind == "keyed" and state.key_type.fixed_length is None and namespace.fixed_length is None
        )
        self.stats = ReadStats()
        value = state.value
        # TTL-wrapped values, elements or map values decode to (timestamp, value): _batch splits them.
        self.ttl = ttl_layout(state)
        if state.kind == "timer" and value.kind == "raw":
            self.value_kind = "element"
        elif state.kind == "timer":
            self.value_kind = "timer"
        elif state.state_type == "MAP" and value.kind == "map":
            self.value_kind = "map"
            self.user_key_decoder = self._decoder_or_none(value.child("key"), unpickle)
            self.map_value_decoder = (
                stamped_decoder(value.child("value"), unpickle=unpickle)
                if self.ttl
                else self._decoder_or_none(value.child("value"), unpickle)
            )
        elif state.state_type == "LIST" and value.kind == "list":
            self.value_kind = "list"
            element = value.child("element")
            self.element_decoder = (stamped_decoder if self.ttl else build_decoder)(element, unpickle=unpickle)
        else:
            self.value_kind = "value"
            self.value_decoder = (
                stamped_decoder(value, unpickle=unpickle) if self.ttl else self._decoder_or_none(value, unpickle)
            )
        self.unpickle = unpickle
        self.heap: HeapKeyGroupDecoder | None = None
        if any(loc.layout == HEAP_CHECKPOINT_LAYOUT for loc in state.keyed_locations):
            # Heap checkpoint entries are unframed: decoded record by record, every part typed.
            self.heap = self._heap_decoder()
            self.fast = None
            return
        self.fast = self._fast_extractor(namespace)
        if (
            self.value_kind != "element"
            and (self.key_raw or self.namespace_raw)
            and (self.value_kind in ("map", "timer") or self.namespace_length is None)
        ):
            raise UnsupportedError(
                "the key and namespace of this state cannot be told apart: " + "; ".join(state.raw_reasons),
                operator=operator.label,
                state=state.name,
            )

    @staticmethod
    def _decoder_or_none(desc: TypeDescriptor, unpickle: bool) -> Decoder | None:
        return None if desc.kind == "raw" else build_decoder(desc, unpickle=unpickle)

    def _heap_decoder(self) -> HeapKeyGroupDecoder:
        if self.heap is None:
            from statecat.readers.backends.heap_checkpoint import HeapKeyGroupDecoder

            try:
                self.heap = HeapKeyGroupDecoder(self, self.unpickle)
            except UnsupportedError as exc:
                raise UnsupportedError(exc.message, operator=self.operator.label, state=self.state.name) from None
        return self.heap

    def _fast_extractor(self, namespace: TypeDescriptor) -> ColumnExtractor | None:
        """The column-wise path, for values, timers, MapStates and ListStates of types it covers,
        with unambiguous keys."""
        if self.value_kind == "element" or self.ambiguous or self.key_raw or self.namespace_raw:
            return None
        key, ns = plan_column(self.state.key_type, key=True), plan_column(namespace)
        if key is None or ns is None:
            return None
        value = self.state.value
        value_arrow = self.schema.field("value").type
        if self.value_kind == "timer":
            return ColumnExtractor(key, ns, None, prefix=self.prefix, mode="timer")
        if self.value_kind == "map":
            user_key, map_value = plan_column(value.child("key")), plan_column(value.child("value"))
            if user_key is None or map_value is None:
                return None
            return ColumnExtractor(
                key, ns, map_value, prefix=self.prefix, mode="map", user_key=user_key, value_arrow=value_arrow
            )
        if self.value_kind == "list":
            element = plan_column(value.child("element"))
            if element is None or element.kind not in ("java_scalar", "java_string"):
                return None
            return ColumnExtractor(key, ns, element, prefix=self.prefix, mode="list", value_arrow=value_arrow)
        plan = plan_column(value)
        return None if plan is None else ColumnExtractor(key, ns, plan, prefix=self.prefix)

    # -- reading

    def batches(
        self,
        locations: Iterable[KeyedLocation] | None = None,
        key_groups: set[int] | None = None,
        batch_rows: int = DEFAULT_BATCH_ROWS,
        keys: Sequence[Any] | None = None,
    ) -> Iterator[pa.RecordBatch]:
        # A keyed state's locations are keyed ones.
        locations = self.state.keyed_locations if locations is None else locations
        if self.fast is not None and (keys is None or self._filterable_keys()):
            batches = self._fast_batches(locations, key_groups, batch_rows, keys)
            if keys is None:
                yield from batches
            else:
                wanted_keys = pa.array(keys, type=self.schema.field("key").type)
                for batch in batches:
                    yield batch.filter(pc.is_in(batch.column(0), value_set=wanted_keys))
            return
        columns: tuple[list, list, list] = ([], [], [])
        wanted = None if keys is None else {hashable(k) for k in keys}
        for location in locations:
            for key_group, data, file, base in self._key_groups(location, key_groups, keys):
                self._decode_key_group(key_group, data, location, columns, file, base, wanted)
                if len(columns[0]) >= batch_rows:
                    yield self._batch(columns)
                    columns = ([], [], [])
        if columns[0] or not self.stats.rows:
            yield self._batch(columns)

    def _filterable_keys(self) -> bool:
        """Whether Arrow can match the key column against wanted keys (scalar key columns)."""
        key_type = self.schema.field("key").type
        return not (pa.types.is_struct(key_type) or pa.types.is_list(key_type) or pa.types.is_map(key_type))

    def _fast_batches(
        self,
        locations: Iterable[KeyedLocation],
        key_groups: set[int] | None,
        batch_rows: int,
        keys: Sequence[Any] | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """Walks each key-group compiled, then cuts columns out of many key-groups at once."""
        group: list[tuple] = []  # (key_group, data, file, base, state_id, positions)
        group_rows = group_bytes = 0
        window = WindowBuffer()
        for location in locations:
            for key_group, data, file, base in self._key_groups(location, key_groups, keys, window):
                _, positions = self._locate(key_group, data, location, file, base)
                group.append((key_group, data, file, base, location, positions))
                group_rows += len(positions[0])
                group_bytes += len(data)
                if group_rows >= batch_rows or group_bytes >= FAST_GROUP_BYTES:
                    yield self._fast_batch(group, window.joined([item[1] for item in group]))
                    group, group_rows, group_bytes = [], 0, 0
                    window.reset()
        if group or not self.stats.rows:
            yield self._fast_batch(group, window.joined([item[1] for item in group]))

    def _fast_batch(self, group: list[tuple], joined: tuple | None = None) -> pa.RecordBatch:
        """``joined``: (bytes, {id of a key-group's data: its start in them}) when the caller already
        joined the key-groups' bytes (several states cut out of one window)."""
        if not group:
            return self._batch(([], [], []))
        if len(group) == 1:  # one large key-group: its bytes and positions as they are, no copy
            buf = np.frombuffer(group[0][1], dtype=np.uint8)
            # Callers come here only with a column-wise plan (self.fast set).
            columns = cast(ColumnExtractor, self.fast).extract(buf, *group[0][5])
        else:
            if joined is None:
                starts, start = {}, 0
                for item in group:
                    starts[id(item[1])] = start
                    start += len(item[1])
                joined = (b"".join(item[1] for item in group), starts)
            buf = np.frombuffer(joined[0], dtype=np.uint8)
            shifted: list[list[np.ndarray]] = [[], [], [], []]
            for _, data, _, _, _, positions in group:
                start = joined[1][id(data)]
                for i, p in enumerate(positions):
                    shifted[i].append(p + start if i in (0, 2) else p)
            columns = cast(ColumnExtractor, self.fast).extract(buf, *(np.concatenate(col) for col in shifted))
        if columns is None:  # some entry is outside the column-wise plan: decode this group per record
            rows: tuple[list, list, list] = ([], [], [])
            for key_group, data, file, base, location, positions in group:
                self._decode_key_group(key_group, data, location, rows, file, base, None, positions)
            return self._batch(rows)
        self.stats.rows += len(columns[0])
        return pa.RecordBatch.from_arrays(list(columns), schema=self.schema)

    def _batch(self, columns: tuple[list, list, list]) -> pa.RecordBatch:
        keys, namespaces, values = columns
        self.stats.rows += len(keys)
        parts: list[list] = list(columns)
        if self.ttl is not None:
            parts[2:] = split_ttl(self.ttl, values)
        try:
            arrays = [pa.array(col, type=f.type) for col, f in zip(parts, self.schema)]
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as exc:
            raise FormatError(
                f"decoded values do not fit the state's type {self.schema}: {exc}",
                operator=self.operator.label,
                state=self.state.name,
            ) from exc
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def _key_groups(
        self,
        location: KeyedLocation,
        key_groups: set[int] | None,
        keys: Sequence[Any] | None = None,
        window: WindowBuffer | None = None,
    ) -> Iterator[tuple[int, bytes | memoryview, str, int]]:
        """(key-group, bytes, file, file offset) of each wanted non-empty key-group, in order.

        ``keys``: the only keys wanted (a hint: a native RocksDB instance then reads only the
        blocks that can hold them; other layouts read their whole key-groups). ``window``: read
        uncompressed key-groups into it (its views are only valid until the caller resets it)."""
        if location.layout == NATIVE_ROCKSDB_LAYOUT:
            yield from self._native_key_groups(location, key_groups, keys)
            return
        wanted = [
            (i, offset)
            for i, offset in enumerate(location.offsets)
            if offset != 0 and (key_groups is None or location.start_key_group + i in key_groups)
        ]
        if not wanted:
            return
        stream, file, base = open_stream(self.meta.storage, location.stream, 0)
        with stream:
            ends = self._key_group_ends(location, file, base)
            position = None
            for i, offset in wanted:
                key_group = location.start_key_group + i
                end = ends[i]
                if offset != position:
                    stream.seek(base + offset)
                data: bytes | memoryview | None = None
                if window is not None and not location.compressed:
                    data = window.read(stream, end - offset)
                if data is None:
                    data = _read_up_to(stream, end - offset)
                position = end
                if len(data) != end - offset:
                    raise FormatError(
                        f"expected key-group {key_group} to span {end - offset} bytes, the file ends after {len(data)}",
                        file=file,
                        offset=base + offset + len(data),
                        operator=self.operator.label,
                        state=self.state.name,
                        hint="The state file is truncated",
                    )
                self.stats.bytes_read += len(data)
                self.stats.key_groups += 1
                self.stats.subtasks.add(location.subtask)
                # Heap checkpoints compress each state's section on its own, after the key-group's id.
                if location.compressed and location.layout != HEAP_CHECKPOINT_LAYOUT:
                    # Compressed key-groups are never read into the window: their bytes are bytes.
                    data = decompress_snappy_framed(cast(bytes, data), file, base + offset)
                yield key_group, data, file, base + offset

    def _native_key_groups(
        self, location: KeyedLocation, key_groups: set[int] | None, keys: Sequence[Any] | None
    ) -> Iterator[tuple[int, bytes, str, int]]:
        """A RocksDB instance's key-groups of this state (readers/backends/native_rocksdb.py)."""
        from statecat.readers.backends.native_rocksdb import NativeInstance, framed_key_groups
        from statecat.readers.keygroups import key_group_for, serialized_key

        seeks: dict[int, list[bytes | None]] | None = None
        if keys is not None and self.state.kind == "keyed" and not self.key_raw:
            seeks = {}
            for key in keys:  # casts: a keyed state has a key type
                group = key_group_for(key, self.state.key_type, self.operator.max_parallelism)
                seeks.setdefault(group, []).append(serialized_key(key, self.state.key_type))
        # The native layout's locations carry their RocksDB instance.
        instance = NativeInstance(self.meta.storage, cast("NativeRocksDBHandle", location.native))
        try:
            for key_group, data in framed_key_groups(
                instance, location, self.state.name, self.prefix, key_groups, seeks
            ):
                self.stats.key_groups += 1
                self.stats.subtasks.add(location.subtask)
                yield key_group, data, instance.description, 0
        except StatecatError as exc:
            if exc.operator is not None:
                raise
            raise type(exc)(
                exc.message,
                file=exc.file,
                offset=exc.offset,
                operator=self.operator.label,
                state=self.state.name,
                hint=exc.hint,
            ) from None
        finally:
            self.stats.bytes_read += instance.bytes_read

    def _key_group_ends(self, location: KeyedLocation, file: str, base: int) -> dict[int, int]:
        """Where each non-empty key-group ends (index -> stream offset), after checking the offsets.

        Flink writes key-groups in order, so their offsets (0 = empty) rise strictly and each lies
        inside the stream; anything else would read the wrong bytes or lose a key-group."""
        size = location.stream.size
        starts: list[tuple[int, int]] = []
        for i, offset in enumerate(location.offsets):
            if offset == 0:
                continue
            previous = starts[-1][1] if starts else 0
            if offset < 0 or offset <= previous or offset >= size:
                expected = (
                    f"an offset after the previous key-group's {previous}"
                    if 0 < offset <= previous
                    else f"an offset within the stream's {size} bytes"
                )
                raise FormatError(
                    f"expected key-group {location.start_key_group + i} to start at {expected}, got "
                    f"{offset} (key-group offsets of the stream at byte offset {base})",
                    file=file,
                    offset=base + (previous if offset < 0 or offset <= previous else size),
                    operator=self.operator.label,
                    state=self.state.name,
                    hint="The key-group offsets in _metadata are damaged",
                )
            starts.append((i, offset))
        ends = [offset for _, offset in starts[1:]] + [size]
        return {i: end for (i, _), end in zip(starts, ends)}

    def _locate(
        self, key_group: int, data: bytes | memoryview, location: KeyedLocation, file: str, base: int
    ) -> tuple[np.ndarray, list[np.ndarray]]:
        """Positions (key at, key length, value at, value length) of the state's entries in a key-group.

        The framing walk is compiled; it also checks every length against the key-group's bytes,
        every entry's key-group prefix, and every state id against the stream header's states."""
        if location.layout == HEAP_CHECKPOINT_LAYOUT:
            raise UnsupportedError(
                "entry positions are only located in savepoint-layout key-groups, not in a heap checkpoint's",
                operator=self.operator.label,
                state=self.state.name,
            )
        native_positions = getattr(data, "positions", None)
        if location.layout == NATIVE_ROCKSDB_LAYOUT and native_positions is not None:
            return np.frombuffer(data, dtype=np.uint8), native_positions  # merged from SST files
        buf = np.frombuffer(data, dtype=np.uint8)
        capacity = len(data) // MIN_ENTRY_BYTES + 1
        state_of = np.empty(capacity, dtype=np.int64)
        positions = [np.empty(capacity, dtype=np.int64) for _ in range(4)]
        state_count = location.state_count or self.state_counts.get((location.subtask, location.stream), 0)
        count, error, at = walk_key_group_all(buf, state_count, self.prefix, key_group, state_of, *positions)
        if error != WALK_OK:
            offset, within = _position(location, base, at)
            got = f" ({_U16(data, at)[0]})" if error == WALK_BAD_STATE_ID else ""
            raise FormatError(
                f"{WALK_ERRORS[error]}{got} in key-group {key_group} ({len(data)} bytes, "
                f"{state_count} states in the stream){within}",
                file=file,
                offset=offset,
                operator=self.operator.label,
                state=self.state.name,
                hint="The state file is damaged or truncated",
            )
        hits = np.flatnonzero(state_of[:count] == location.state_id)
        if hits.size and hits[-1] - hits[0] + 1 == hits.size:  # one run, as Flink writes them: no copy
            return buf, [p[hits[0] : hits[-1] + 1] for p in positions]
        return buf, [p[hits] for p in positions]

    def _decode_key_group(
        self,
        key_group: int,
        data: bytes | memoryview,
        location: KeyedLocation,
        columns: tuple[list, list, list],
        file: str,
        base: int,
        wanted: set[Any] | None,
        positions: Sequence[np.ndarray] | None = None,
    ) -> None:
        """Decodes the state's entries of one key-group record by record (any type). ``positions``:
        the entries' positions when a walk over all states of the stream already found them."""
        if location.layout == HEAP_CHECKPOINT_LAYOUT:
            # Heap key-groups are read whole, never into a window: their bytes are bytes.
            self._heap_decoder().decode(key_group, cast(bytes, data), location, columns, file, base, wanted)
            return
        if isinstance(data, memoryview):  # a WindowBuffer's view: the record decoders slice bytes
            data = bytes(data)
        if positions is None:
            _, positions = self._locate(key_group, data, location, file, base)
        key_at, key_len, value_at, value_len = positions
        keys, namespaces, values = columns
        prefix = self.prefix
        value_kind = self.value_kind
        buf = data
        # A MapState row gathers the consecutive entries that share key and namespace bytes.
        map_identity = None
        map_keep = False
        map_entries: list = []
        kat = 0
        try:
            for kat, klen, vat, vlen in zip(key_at.tolist(), key_len.tolist(), value_at.tolist(), value_len.tolist()):
                kend = kat + klen
                # The prefix (and the "meta data follows" flag in its first byte) is not decoded:
                # the walk already checked it names this key-group.
                if value_kind == "map":
                    key, namespace, user_at = self._split_key(buf, kat + prefix, kend)
                    if user_at > kend:
                        raise DecodeError(f"key and namespace overrun the entry's key by {user_at - kend} bytes")
                    identity = buf[kat + prefix : user_at]
                    user_key = (
                        buf[user_at:kend]
                        if self.user_key_decoder is None
                        else _decode_exact(self.user_key_decoder, buf, user_at, kend, "map key")
                    )
                    if identity != map_identity:
                        if map_keep:
                            values.append(map_entries)
                        map_identity, map_entries = identity, []
                        map_keep = wanted is None or hashable(key) in wanted
                        if map_keep:
                            keys.append(key)
                            namespaces.append(namespace)
                    if map_keep:
                        map_entries.append((user_key, self._map_value(buf, vat, vlen)))
                elif value_kind == "element":
                    keys.append(None)
                    namespaces.append(None)
                    values.append(buf[kat + prefix : kend])
                elif value_kind == "timer":
                    # Flink flips the sign bit so timers sort by time as unsigned bytes.
                    timestamp = _U64(buf, kat + prefix)[0] - TIMER_TIMESTAMP_FLIP
                    key, namespace, end = self._split_key(buf, kat + prefix + 8, kend)
                    if end != kend:
                        raise DecodeError(f"timer element has {kend - end} unread bytes")
                    if wanted is None or hashable(key) in wanted:
                        keys.append(key)
                        namespaces.append(namespace)
                        values.append(timestamp)
                else:
                    key, namespace, end = self._split_key(buf, kat + prefix, kend)
                    if end != kend:
                        raise DecodeError(f"composite key has {kend - end} unread bytes after the namespace")
                    if wanted is None or hashable(key) in wanted:
                        keys.append(key)
                        namespaces.append(namespace)
                        values.append(self._value(buf, vat, vlen))
            if map_keep:
                values.append(map_entries)
        except DECODE_FAILURES as exc:
            offset, within = _position(location, base, kat)
            raise FormatError(
                f"could not decode an entry of key-group {key_group}{within}: {exc}",
                file=file,
                offset=offset,
                operator=self.operator.label,
                state=self.state.name,
                hint="The state file is damaged, or its type is not what the header says",
            ) from None

    def decode_entries(self, key_group: int, entries: Sequence[tuple[bytes, bytes]]) -> pa.RecordBatch:
        """The rows of this state's entries of one key-group (composite keys with their prefix,
        flag cleared), decoded as a query would decode them: what an edit starts from."""
        keys, values = [], []
        key_at, key_len, value_at, value_len = [], [], [], []
        position = 0
        for key, value in entries:
            key_at.append(position)
            key_len.append(len(key))
            value_at.append(position + len(key))
            value_len.append(len(value))
            position += len(key) + len(value)
            keys.append(key)
            values.append(value)
        buf = b"".join(k + v for k, v in zip(keys, values))
        positions = [np.asarray(p, dtype=np.int64) for p in (key_at, key_len, value_at, value_len)]
        location = KeyedLocation(0, InlineStream("<edited key-group>", 0, len(buf)), key_group, (), 0, False, 0)
        columns: tuple[list, list, list] = ([], [], [])
        self._decode_key_group(key_group, buf, location, columns, "<edited key-group>", 0, None, positions)
        return self._batch(columns)

    def _split_key(self, buf: bytes, pos: int, end: int) -> tuple[Any, Any, int]:
        """Decodes key and namespace of a composite key; returns (key, namespace, position after them)."""
        # Runs per record, so no cast() calls: __init__ refuses a raw key or namespace unless the
        # namespace has a fixed length, and a part that is not raw has its decoder.
        if self.key_raw:
            ns_at = end - self.namespace_length  # type: ignore[operator]
            if ns_at < pos:
                raise DecodeError(
                    f"composite key of {end - pos} bytes is shorter than its {self.namespace_length}-byte namespace"
                )
            key = bytes(buf[pos:ns_at])
            namespace, pos = self.namespace_decoder(buf, ns_at)  # type: ignore[misc]
            return key, namespace, pos
        start = pos
        key, pos = self.key_decoder(buf, pos)  # type: ignore[misc]
        if self.ambiguous:
            pos = _skip_length_trailer(buf, pos, pos - start)
        ns_start = pos
        if self.namespace_raw:
            size: int = self.namespace_length  # type: ignore[assignment]
            namespace, pos = bytes(buf[pos : pos + size]), pos + size
        else:
            namespace, pos = self.namespace_decoder(buf, pos)  # type: ignore[misc]
        if self.ambiguous:
            pos = _skip_length_trailer(buf, pos, pos - ns_start)
        return key, namespace, pos

    def _value(self, buf: bytes, at: int, length: int) -> Any:
        if self.value_kind == "list":
            return self._list(buf, at, at + length)
        if self.value_decoder is None:
            return bytes(buf[at : at + length])
        return _decode_exact(self.value_decoder, buf, at, at + length, "value")

    def _list(self, buf: bytes, pos: int, end: int) -> list:
        decode = self.element_decoder
        out = []
        while pos < end:
            before = pos
            value, pos = decode(buf, pos)
            if pos <= before:  # an element of no bytes would repeat forever
                raise DecodeError("list element takes no bytes")
            out.append(value)
            if pos < end:
                if buf[pos] != LIST_ELEMENT_DELIMITER:
                    raise DecodeError(f"expected the list delimiter 0x2C between elements, got 0x{buf[pos]:02x}")
                pos += 1
        if pos != end:
            raise DecodeError("list elements overrun the stored value")
        return out

    def _map_value(self, buf: bytes, at: int, length: int) -> Any:
        if length < 1:
            raise DecodeError("map entry value is empty")
        if buf[at]:  # null flag; heap writes the serializer's null form after it, RocksDB nothing
            return None
        if self.map_value_decoder is None:
            return bytes(buf[at + 1 : at + length])
        return _decode_exact(self.map_value_decoder, buf, at + 1, at + length, "map value")


class OperatorStateScanner:
    """Decodes one operator list, union or broadcast state."""

    def __init__(self, meta: StateMeta, operator: OperatorMeta, state: StateInfo, *, unpickle: bool = False) -> None:
        self.meta = meta
        self.operator = operator
        self.state = state
        self.schema = _schema(operator, state)
        self.stats = ReadStats()
        value = state.value
        self.broadcast = state.kind == "broadcast"
        if self.broadcast:
            self.entry_key = self._decoder_or_none(value.child("key"), unpickle)
            self.entry_value = self._decoder_or_none(value.child("value"), unpickle)
            if self.entry_key is None or (self.entry_value is None):
                raise UnsupportedError(
                    "broadcast state entries with a serializer statecat cannot decode are not "
                    "framed: " + "; ".join(state.raw_reasons),
                    operator=operator.label,
                    state=state.name,
                )
        else:
            self.element = self._decoder_or_none(value, unpickle)

    @staticmethod
    def _decoder_or_none(desc: TypeDescriptor, unpickle: bool) -> Decoder | None:
        return None if desc.kind == "raw" else build_decoder(desc, unpickle=unpickle)

    def batches(
        self, locations: Iterable[OperatorLocation] | None = None, batch_rows: int = DEFAULT_BATCH_ROWS
    ) -> Iterator[pa.RecordBatch]:
        values: list = []
        subtasks: list = []
        # An operator state's locations are operator ones.
        for location in self.state.operator_locations if locations is None else locations:
            for value in self._elements(location):
                values.append(value)
                subtasks.append(location.subtask)
                if len(values) >= batch_rows:
                    yield self._batch(values, subtasks)
                    values, subtasks = [], []
        if values or not self.stats.rows:
            yield self._batch(values, subtasks)

    def _batch(self, values: list, subtasks: list) -> pa.RecordBatch:
        self.stats.rows += len(values)
        try:
            return pa.RecordBatch.from_arrays(
                [pa.array(values, type=self.schema.field("value").type), pa.array(subtasks, type=pa.int32())],
                schema=self.schema,
            )
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as exc:
            raise FormatError(
                f"decoded values do not fit the state's type: {exc}",
                operator=self.operator.label,
                state=self.state.name,
            ) from exc

    def _elements(self, location: OperatorLocation) -> Iterator[Any]:
        if not location.offsets:
            return
        offsets = sorted(location.offsets)
        ends = offsets[1:] + [location.end]
        stream, file, base = open_stream(self.meta.storage, location.stream, 0)
        with stream:
            size = location.stream.size
            # Offsets and the end come from _metadata: each element must be a non-empty range of the stream.
            for start, end in zip(offsets, ends):
                if not 0 <= start < end <= size:
                    raise FormatError(
                        f"expected operator state elements within the stream's {size} bytes, one after "
                        f"the other, got an element from {start} to {end}",
                        file=file,
                        offset=base + min(max(start, 0), size),
                        operator=self.operator.label,
                        state=self.state.name,
                        hint="The state offsets in _metadata are damaged",
                    )
            for start, end in zip(offsets, ends):
                stream.seek(base + start)
                data = _read_up_to(stream, end - start)
                if len(data) != end - start:
                    raise FormatError(
                        f"expected {end - start} bytes of operator state, the file ends after {len(data)}",
                        file=file,
                        offset=base + start + len(data),
                        operator=self.operator.label,
                        state=self.state.name,
                        hint="The state file is truncated",
                    )
                self.stats.bytes_read += len(data)
                self.stats.subtasks.add(location.subtask)
                if location.compressed:
                    data = decompress_snappy_framed(data, file, base + start)
                try:
                    if self.broadcast:
                        yield from self._broadcast_entries(data)
                    elif self.element is None:
                        yield bytes(data)
                    else:
                        yield _decode_exact(self.element, data, 0, len(data), "operator state element")
                except DECODE_FAILURES as exc:
                    raise FormatError(
                        f"could not decode an operator state element: {exc}",
                        file=file,
                        offset=base + start,
                        operator=self.operator.label,
                        state=self.state.name,
                        hint="The state file is damaged, or its type is not what the header says",
                    ) from None

    def _broadcast_entries(self, data: bytes) -> Iterator[dict[str, Any]]:
        count = _I32(data, 0)[0]
        if not 0 <= count <= len(data) - 4:  # every entry takes at least one byte
            raise DecodeError(f"expected a broadcast entry count within the element's {len(data)} bytes, got {count}")
        pos = 4
        for _ in range(count):
            # Both set: __init__ refuses broadcast entries with an undecodable part (per entry: no cast()).
            key, pos = self.entry_key(data, pos)  # type: ignore[misc]
            value, pos = self.entry_value(data, pos)  # type: ignore[misc]
            yield {"key": key, "value": value}
        if pos != len(data):
            raise DecodeError(f"{count} broadcast entries take {pos} of the {len(data)} bytes stored")


class OperatorKeyedScan:
    """Several keyed states of one operator read in one pass: each key-group's bytes are read,
    decompressed and walked once, and every state's entries are cut out of them.

    Yields (state name, batch) with the same rows, in the same order per state, as each state's
    ``KeyedStateScanner.batches``. Memory stays bounded by one window of key-groups
    (``FAST_GROUP_BYTES`` or ``batch_rows`` rows of one state) plus the batches cut from it.
    States in heap checkpoints or native RocksDB instances are read state by state."""

    def __init__(self, scanners: list[KeyedStateScanner]) -> None:
        self.scanners = scanners

    def _one_pass(self, scanner: KeyedStateScanner) -> bool:
        return scanner.heap is None and all(
            loc.layout not in (HEAP_CHECKPOINT_LAYOUT, NATIVE_ROCKSDB_LAYOUT)
            for loc in scanner.state.keyed_locations  # a keyed state's
        )

    def batches(
        self, key_groups: set[int] | None = None, subtasks: set[int] | None = None, batch_rows: int = DEFAULT_BATCH_ROWS
    ) -> Iterator[tuple[str, pa.RecordBatch]]:
        shared = [s for s in self.scanners if self._one_pass(s)]
        # Streams in the order of the first state's locations: each state's rows keep its own order.
        streams: dict[tuple, dict[int, KeyedLocation]] = {}
        for index, scanner in enumerate(shared):
            for loc in scanner.state.keyed_locations:  # a keyed state's
                if subtasks is None or loc.subtask in subtasks:
                    streams.setdefault((loc.subtask, loc.stream), {})[index] = loc
        rows = [0] * len(shared)
        window: list[tuple] = []  # (key_group, data, file, base, {state index: (location, positions)})
        window_bytes = 0
        buffer = WindowBuffer()
        for (subtask, stream), by_state in streams.items():
            first = min(by_state)
            location = by_state[first]
            reader = shared[first]
            state_count = location.state_count or reader.state_counts.get((subtask, stream), 0)
            for key_group, data, file, base in reader._key_groups(location, key_groups, window=buffer):
                found = self._locate_all(reader, key_group, data, location, file, base, state_count, by_state)
                if not found:
                    continue
                window.append((key_group, data, file, base, found))
                window_bytes += len(data)
                for index, (_, positions) in found.items():
                    rows[index] += len(positions[0])
                if window_bytes >= FAST_GROUP_BYTES or max(rows) >= batch_rows:
                    yield from self._flush(shared, window, buffer.joined([item[1] for item in window]))
                    window, window_bytes, rows = [], 0, [0] * len(shared)
                    buffer.reset()
        yield from self._flush(shared, window, buffer.joined([item[1] for item in window]))
        for scanner in shared:
            if not scanner.stats.rows:
                yield scanner.state.name, scanner._batch(([], [], []))
        for scanner in self.scanners:
            if scanner not in shared:
                locations = [
                    loc
                    for loc in scanner.state.keyed_locations  # a keyed state's
                    if subtasks is None or loc.subtask in subtasks
                ]
                for batch in scanner.batches(locations, key_groups=key_groups, batch_rows=batch_rows):
                    yield scanner.state.name, batch

    @staticmethod
    def _locate_all(
        reader: KeyedStateScanner,
        key_group: int,
        data: bytes | memoryview,
        location: KeyedLocation,
        file: str,
        base: int,
        state_count: int,
        by_state: dict[int, KeyedLocation],
    ) -> dict[int, tuple]:
        """{state index: (its location, its entries' positions)} of the states with entries here."""
        buf = np.frombuffer(data, dtype=np.uint8)
        capacity = len(data) // MIN_ENTRY_BYTES + 1
        state_of = np.empty(capacity, dtype=np.int64)
        positions = [np.empty(capacity, dtype=np.int64) for _ in range(4)]
        count, error, at = walk_key_group_all(buf, state_count, reader.prefix, key_group, state_of, *positions)
        if error != WALK_OK:
            offset, within = _position(location, base, at)
            got = f" ({_U16(data, at)[0]})" if error == WALK_BAD_STATE_ID else ""
            raise FormatError(
                f"{WALK_ERRORS[error]}{got} in key-group {key_group} ({len(data)} bytes, "
                f"{state_count} states in the stream){within}",
                file=file,
                offset=offset,
                operator=reader.operator.label,
                hint="The state file is damaged or truncated",
            )
        state_of = state_of[:count]
        positions = [p[:count] for p in positions]
        found = {}
        for index, loc in by_state.items():
            # Flink writes each state's entries of a key-group as one run: usually a slice.
            hits = np.flatnonzero(state_of == loc.state_id)
            if not hits.size:
                continue
            if hits[-1] - hits[0] + 1 == hits.size:
                found[index] = (loc, [p[hits[0] : hits[-1] + 1] for p in positions])
            else:
                found[index] = (loc, [p[hits] for p in positions])
        return found

    @staticmethod
    def _flush(
        shared: list[KeyedStateScanner], window: list[tuple], joined: tuple | None
    ) -> Iterator[tuple[str, pa.RecordBatch]]:
        """``joined``: the window's bytes as one buffer (WindowBuffer.joined), or None: then they
        are joined here once for all its states."""
        for index, scanner in enumerate(shared):
            group = [
                (key_group, data, file, base, *found[index])
                for key_group, data, file, base, found in window
                if index in found
            ]
            if not group:
                continue
            if scanner.fast is not None:
                if joined is None and len(group) > 1:
                    starts, start = {}, 0
                    for item in window:
                        starts[id(item[1])] = start
                        start += len(item[1])
                    joined = (b"".join(item[1] for item in window), starts)
                yield scanner.state.name, scanner._fast_batch(group, joined)
                continue
            columns: tuple[list, list, list] = ([], [], [])
            for key_group, data, file, base, location, positions in group:
                scanner._decode_key_group(key_group, data, location, columns, file, base, None, positions)
            yield scanner.state.name, scanner._batch(columns)


def _decode_exact(decoder: Decoder, buf: bytes, pos: int, end: int, what: str) -> Any:
    """A value that must fill its stored bytes exactly: a shorter or longer decode means the type or
    the bytes are not what the header says."""
    value, stop = decoder(buf, pos)
    if stop != end:
        raise DecodeError(f"{what} decoded to {stop - pos} bytes but is stored in {end - pos}")
    return value


def _schema(operator: OperatorMeta, state: StateInfo) -> pa.Schema:
    try:
        return state_schema(state)
    except TypeError as exc:  # a type in the header with no Arrow column (``arrow_type``'s signal)
        raise UnsupportedError(
            f"statecat has no column type for this state: {exc}", operator=operator.label, state=state.name
        ) from None


def _keyed_state_counts(operator: OperatorMeta) -> dict[tuple, int]:
    """How many states each keyed stream's header lists, by (subtask, stream), for locations that
    do not carry the count (built by hand or by an older stateInfo).

    Every state in a keyed stream header has one location with its index as ``state_id``."""
    counts: dict[tuple, int] = {}
    for state in operator.states:
        if state.is_keyed:
            for location in state.keyed_locations:
                where = (location.subtask, location.stream)
                counts[where] = max(counts.get(where, 0), location.state_id + 1)
    return counts


def _position(location: KeyedLocation, base: int, at: int) -> tuple[int, str]:
    """The file offset to report for byte ``at`` of a key-group starting at ``base``, and a note
    when the key-group is compressed (then ``at`` counts decompressed bytes)."""
    if location.layout == NATIVE_ROCKSDB_LAYOUT:
        return base, f" (entry at byte {at} of the key-group's entries as read from its SST files)"
    if location.compressed:
        return base, f" (at byte {at} of the decompressed key-group)"
    return base + at, ""


def scanner_for(
    meta: StateMeta, operator: OperatorMeta, state: StateInfo, *, unpickle: bool = False
) -> KeyedStateScanner | OperatorStateScanner:
    if state.is_keyed:
        return KeyedStateScanner(meta, operator, state, unpickle=unpickle)
    return OperatorStateScanner(meta, operator, state, unpickle=unpickle)


__all__ = [
    "KeyedStateScanner",
    "OperatorKeyedScan",
    "OperatorStateScanner",
    "ReadStats",
    "scanner_for",
    "StatecatError",
]
