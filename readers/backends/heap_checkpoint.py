"""Key-groups of heap (hashmap) backend checkpoints: the layout of Flink's ``HeapSnapshotStrategy``.

A retained checkpoint of the heap backend shares the savepoint's stream header (proxy header with
the states' serializer snapshots) but lays out each key-group differently (flink-runtime,
``org.apache.flink.runtime.state.heap``)::

    i32 keyGroupId                               every key-group of the range, empty ones too
    per registered state, in hash-map order (not by id):
        [snapshot compression on: this section alone is one snappy-framed stream]
        u16 stateId
        i32 count
        KEY_VALUE state:  count x (namespace, key, state value)    CopyOnWriteStateMapSnapshot.writeState
        PRIORITY_QUEUE:   count x element                          KeyGroupPartitioner.writeStateInKeyGroup

Values are the state serializer's whole output: a ListState value is ``ListSerializer`` (count +
elements), a MapState value ``MapSerializer`` (count + key, null flag, value); TTL wraps values as
``TtlSerializer`` (last access timestamp, user value: the ``ttl_timestamp`` column, readers/codecs/ttl.py).
Timers are ``TimerSerializer`` elements (timestamp with its sign bit flipped, key, namespace). Nothing is length-framed: reaching one
state's section means decoding the sections written before it (uncompressed), or walking the
snappy chunks to the next stream identifier (compressed).
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any

from statecat.readers.backends.streams import decompress_snappy_framed
from statecat.readers.codecs.decoders import (
    _BE_I32,
    _BE_U16,
    DECODE_FAILURES,
    TIMER_TIMESTAMP_FLIP,
    DecodeError,
    build_decoder,
    build_key_decoder,
    hashable,
)
from statecat.readers.codecs.ttl import heap_value_decoder, ttl_layout
from statecat.statemeta.errors import FormatError, UnsupportedError
from statecat.statemeta.files.headers import SNAPPY_STREAM_IDENTIFIER
from statecat.statemeta.model import KeyedLocation, StateInfo
from statecat.statemeta.types import TypeDescriptor

if TYPE_CHECKING:
    from statecat.readers.codecs.decoders import Decoder
    from statecat.readers.scans.scan import KeyedStateScanner

_U64 = struct.Struct(">Q").unpack_from
SNAPPY_CHUNK_HEADER_BYTES = 4
SNAPPY_STREAM_IDENTIFIER_TYPE = 0xFF
TIMER_MIN_BYTES = 8  # the timestamp alone


def _entry_decoder(state: StateInfo, unpickle: bool, *, output_keys: bool) -> Decoder:
    """A function (buf, pos) -> ((key, namespace, value), pos) for one entry of the state's section.

    Raises UnsupportedError when some part has no decoder: heap entries are not framed, so an
    undecodable part leaves no way to find the next entry."""
    namespace_desc = state.namespace or TypeDescriptor.of("void_namespace")
    parts = [("key", state.key), ("namespace", namespace_desc)]
    if state.kind == "keyed":
        parts.append(("value", state.value))
        if state.state_type == "MAP" and state.value.kind == "map":
            parts += [("map key", state.value.child("key")), ("map value", state.value.child("value"))]
    for what, desc in parts:
        if desc is None or desc.raw_reasons():
            reasons = "; ".join(desc.raw_reasons()) if desc is not None else "no serializer"
            raise UnsupportedError(
                f"the {what} of state {state.name!r} cannot be decoded ({reasons}), and heap "
                f"checkpoint entries are not length-framed"
            )
    key = build_key_decoder(state.key_type) if output_keys else build_decoder(state.key_type)
    namespace = build_decoder(namespace_desc, unpickle=unpickle)
    if state.kind == "timer":
        if state.value.kind == "raw":
            raise UnsupportedError(
                f"timer state {state.name!r} holds priority-queue elements statecat cannot "
                f"decode, and heap checkpoint elements are not length-framed"
            )

        def timer(buf: bytes, pos: int) -> tuple[tuple[Any, Any, int], int]:
            if pos + TIMER_MIN_BYTES > len(buf):
                raise DecodeError("timer element shorter than its 8-byte timestamp")
            # TimerSerializer flips the sign bit so that timers sort by time as unsigned bytes.
            timestamp = _U64(buf, pos)[0] - TIMER_TIMESTAMP_FLIP
            k, pos = key(buf, pos + 8)
            n, pos = namespace(buf, pos)
            return (k, n, timestamp), pos

        return timer
    layout = ttl_layout(state)
    if layout is None:
        value = build_decoder(state.value, unpickle=unpickle)
    else:  # TTL timestamps as (timestamp, value) pairs, as the scanner's other paths give them
        value = heap_value_decoder(state, layout, unpickle=unpickle)

    def entry(buf: bytes, pos: int) -> tuple[tuple[Any, Any, Any], int]:
        n, pos = namespace(buf, pos)  # the namespace is written before the key
        k, pos = key(buf, pos)
        v, pos = value(buf, pos)
        return (k, n, v), pos

    return entry


class HeapKeyGroupDecoder:
    """Decodes one state's entries out of heap-checkpoint key-groups (the scanner's per-record path)."""

    def __init__(self, scanner: KeyedStateScanner, unpickle: bool = False) -> None:
        self.scanner = scanner
        self.unpickle = unpickle
        self.state = scanner.state
        self.decode_entry = _entry_decoder(self.state, unpickle, output_keys=True)
        self._skippers: dict[tuple, dict[int, tuple[str, Decoder | str]]] = {}

    # -- the other states of a stream, to step over their sections

    def _skipper(self, location: KeyedLocation, state_id: int) -> tuple[str, Decoder | str] | None:
        """The entry decoder of the state with ``state_id`` in the location's stream, or the reason there is none."""
        where = (location.subtask, location.stream)
        table = self._skippers.get(where)
        if table is None:
            table = {}
            for state in self.scanner.operator.states:
                for loc in state.locations:
                    if isinstance(loc, KeyedLocation) and (loc.subtask, loc.stream) == where:
                        try:
                            table[loc.state_id] = (state.name, _entry_decoder(state, False, output_keys=False))
                        except UnsupportedError as exc:
                            table[loc.state_id] = (state.name, exc.message)
            self._skippers[where] = table
        return table.get(state_id)

    # -- decoding

    def decode(
        self,
        key_group: int,
        data: bytes,
        location: KeyedLocation,
        columns: tuple[list, list, list],
        file: str,
        base: int,
        wanted: set[Any] | None,
    ) -> None:
        """Appends the state's rows of one key-group (its stored bytes, as ``_key_groups`` yields them)."""
        if len(data) < 4:
            raise self._error(
                f"expected key-group {key_group} to start with its 4-byte id, it has {len(data)} bytes",
                file,
                base,
                "The state file is truncated, or the key-group offsets are damaged",
            )
        written = _BE_I32(data, 0)[0]
        if written != key_group:
            raise self._error(
                f"expected key-group {key_group} to start with its id, got {written}",
                file,
                base,
                "The key-group offsets in _metadata or the state file are damaged",
            )
        state_count = location.state_count or self.scanner.state_counts.get((location.subtask, location.stream), 0)
        if location.compressed:
            self._decode_compressed(key_group, data, location, columns, file, base, wanted, state_count)
        else:
            self._decode_plain(key_group, data, location, columns, file, base, wanted, state_count)

    def _decode_plain(
        self,
        key_group: int,
        data: bytes,
        location: KeyedLocation,
        columns: tuple[list, list, list],
        file: str,
        base: int,
        wanted: set[Any] | None,
        state_count: int,
    ) -> None:
        pos = 4
        seen: set[int] = set()
        for _ in range(state_count):
            state_id, count, pos = self._section_head(key_group, data, pos, state_count, seen, file, base, base)
            if state_id == location.state_id:
                # The sections after it hold other states only: reading one state decodes just the
                # sections written before it (damage there is found when those states are read).
                self._entries(key_group, data, pos, count, columns, wanted, file, base, base)
                return
            pos = self._skip(key_group, data, pos, count, location, state_id, file, base, base)
        raise self._error(
            f"key-group {key_group} has no section of state id {location.state_id} among its "
            f"{state_count} state sections",
            file,
            base + pos,
            "The state file is damaged",
        )

    def _decode_compressed(
        self,
        key_group: int,
        data: bytes,
        location: KeyedLocation,
        columns: tuple[list, list, list],
        file: str,
        base: int,
        wanted: set[Any] | None,
        state_count: int,
    ) -> None:
        sections = self._snappy_sections(key_group, data, file, base)
        if len(sections) != state_count:
            raise self._error(
                f"expected {state_count} compressed state sections in key-group {key_group}, found {len(sections)}",
                file,
                base + 4,
                "The state file is damaged or truncated",
            )
        seen: set[int] = set()
        for start, end in sections:
            section = decompress_snappy_framed(data[start:end], file, base + start)
            state_id, count, pos = self._section_head(
                key_group, section, 0, state_count, seen, file, base + start, None
            )
            if state_id == location.state_id:
                end_pos = self._entries(key_group, section, pos, count, columns, wanted, file, base + start, None)
                if end_pos != len(section):
                    raise self._error(
                        f"the section of state id {state_id} in key-group {key_group} decompresses to "
                        f"{len(section)} bytes, its {count} entries take {end_pos}",
                        file,
                        base + start,
                        "The state file is damaged",
                    )
                return
        raise self._error(
            f"key-group {key_group} has no section of state id {location.state_id}",
            file,
            base + 4,
            "The state file is damaged",
        )

    @staticmethod
    def _snappy_sections(key_group: int, data: bytes, file: str, base: int) -> list[tuple[int, int]]:
        """(start, end) of each state's snappy-framed stream: each begins with a stream identifier chunk."""
        sections: list[tuple[int, int]] = []
        pos = 4
        while pos < len(data):
            if pos + SNAPPY_CHUNK_HEADER_BYTES > len(data):
                raise FormatError(
                    f"expected a snappy chunk header in key-group {key_group}, the key-group ends after "
                    f"{len(data) - pos} bytes",
                    file=file,
                    offset=base + pos,
                    hint="The state file is damaged or truncated",
                )
            chunk_type = data[pos]
            length = int.from_bytes(data[pos + 1 : pos + 4], "little")
            if chunk_type == SNAPPY_STREAM_IDENTIFIER_TYPE:
                if data[pos : pos + len(SNAPPY_STREAM_IDENTIFIER)] != SNAPPY_STREAM_IDENTIFIER:
                    raise FormatError(
                        "expected the snappy stream identifier 'sNaPpY'",
                        file=file,
                        offset=base + pos,
                        hint="The state file is damaged",
                    )
                if sections:
                    sections[-1] = (sections[-1][0], pos)
                sections.append((pos, len(data)))
            elif not sections:
                raise FormatError(
                    f"expected a snappy stream identifier chunk after key-group {key_group}'s id, got "
                    f"chunk type 0x{chunk_type:02x}",
                    file=file,
                    offset=base + pos,
                    hint="The state file is damaged, or not compressed as its header says",
                )
            end = pos + SNAPPY_CHUNK_HEADER_BYTES + length
            if end > len(data):
                raise FormatError(
                    f"expected a snappy chunk of {length} bytes, key-group {key_group} ends after "
                    f"{len(data) - pos - SNAPPY_CHUNK_HEADER_BYTES}",
                    file=file,
                    offset=base + pos,
                    hint="The state file is damaged or truncated",
                )
            pos = end
        return sections

    def _section_head(
        self,
        key_group: int,
        buf: bytes,
        pos: int,
        state_count: int,
        seen: set[int],
        file: str,
        base: int,
        plain_base: int | None,
    ) -> tuple[int, int, int]:
        """(state id, entry count, position after them) of the section at ``pos``, checked."""
        if pos + 6 > len(buf):
            raise self._error(
                f"expected a state section (u16 state id, i32 count) in key-group {key_group}, "
                f"{len(buf) - pos} bytes are left",
                file,
                self._offset(base, plain_base, pos),
                "The state file is truncated or damaged",
                within=(plain_base, pos),
            )
        state_id = _BE_U16(buf, pos)[0]
        count = _BE_I32(buf, pos + 2)[0]
        if state_id >= state_count or state_id in seen:
            raise self._error(
                f"expected a state id below {state_count}, once per key-group, got {state_id} in key-group {key_group}",
                file,
                self._offset(base, plain_base, pos),
                "The state file is damaged",
                within=(plain_base, pos),
            )
        seen.add(state_id)
        # Every entry or element takes at least one byte: a count beyond the bytes left is damage.
        if not 0 <= count <= len(buf) - pos - 6:
            raise self._error(
                f"expected an entry count of state id {state_id} in key-group {key_group} within the "
                f"{len(buf) - pos - 6} bytes left, got {count}",
                file,
                self._offset(base, plain_base, pos + 2),
                "The state file is damaged or truncated",
                within=(plain_base, pos + 2),
            )
        return state_id, count, pos + 6

    def _entries(
        self,
        key_group: int,
        buf: bytes,
        pos: int,
        count: int,
        columns: tuple[list, list, list],
        wanted: set[Any] | None,
        file: str,
        base: int,
        plain_base: int | None,
    ) -> int:
        keys, namespaces, values = columns
        decode = self.decode_entry
        at = pos
        try:
            for _ in range(count):
                at = pos
                (key, namespace, value), pos = decode(buf, pos)
                if pos > len(buf):
                    raise DecodeError(f"entry runs {pos - len(buf)} bytes past the end of the key-group")
                if wanted is None or hashable(key) in wanted:
                    keys.append(key)
                    namespaces.append(namespace)
                    values.append(value)
        except DECODE_FAILURES as exc:
            raise self._error(
                f"could not decode an entry of key-group {key_group}: {exc}",
                file,
                self._offset(base, plain_base, at),
                "The state file is damaged or truncated, or its type is not what the header says",
                within=(plain_base, at),
            ) from None
        return pos

    def _skip(
        self,
        key_group: int,
        buf: bytes,
        pos: int,
        count: int,
        location: KeyedLocation,
        state_id: int,
        file: str,
        base: int,
        plain_base: int | None,
    ) -> int:
        """The position after another state's section."""
        if count == 0:
            return pos
        found = self._skipper(location, state_id)
        if found is None:
            raise self._error(
                f"key-group {key_group} holds a section of state id {state_id}, which no state of the "
                f"stream's header has",
                file,
                self._offset(base, plain_base, pos),
                "The state file is damaged",
            )
        name, decode = found
        if isinstance(decode, str):
            raise UnsupportedError(
                f"cannot reach this state's entries in key-group {key_group}: they follow state "
                f"{name!r}, whose entries cannot be stepped over ({decode})",
                operator=self.scanner.operator.label,
                state=self.state.name,
                hint="Take a CANONICAL savepoint, or enable snapshot compression (sections are then delimited)",
            )
        at = pos
        try:
            for _ in range(count):
                at = pos
                _, pos = decode(buf, pos)
                if pos > len(buf):
                    raise DecodeError(f"entry runs {pos - len(buf)} bytes past the end of the key-group")
        except DECODE_FAILURES as exc:
            raise self._error(
                f"could not step over an entry of state {name!r} in key-group {key_group}: {exc}",
                file,
                self._offset(base, plain_base, at),
                "The state file is damaged or truncated, or its type is not what the header says",
                within=(plain_base, at),
            ) from None
        return pos

    @staticmethod
    def _offset(base: int, plain_base: int | None, pos: int) -> int:
        """A file offset: exact in plain key-groups; the section's start when ``pos`` counts decompressed bytes."""
        return base + pos if plain_base is not None else base

    def _error(
        self, message: str, file: str, offset: int, hint: str, within: tuple[int | None, int] | None = None
    ) -> FormatError:
        if within is not None and within[0] is None:
            message += f" (at byte {within[1]} of the decompressed section)"
        return FormatError(
            message, file=file, offset=offset, operator=self.scanner.operator.label, state=self.state.name, hint=hint
        )


__all__ = ["HeapKeyGroupDecoder"]
