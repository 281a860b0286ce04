"""A heap checkpoint's key-groups as canonical runs: what writing a savepoint from one needs.

The heap layout (readers/backends/heap_checkpoint.py) stores each state's entries unframed: namespace, key
and the state serializer's whole value back to back. The canonical layout frames one pair per entry
(per list value, per map entry): composite key ``prefix | key | namespace [| user key]`` and the
value as RocksDB keeps it (list elements joined by ``,``, a map value behind its null flag). Only
byte spans move: the decoders find where each part ends, and the stored bytes are copied.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator

from statecat.readers.backends.framing import Entry, Runs, composite_key, key_group_ends
from statecat.readers.backends.heap_checkpoint import HeapKeyGroupDecoder
from statecat.readers.backends.native_rocksdb import key_group_prefix
from statecat.readers.backends.streams import decompress_snappy_framed
from statecat.readers.codecs.decoders import DECODE_FAILURES, LIST_ELEMENT_DELIMITER, DecodeError, build_decoder
from statecat.statemeta.errors import FormatError, UnsupportedError
from statecat.statemeta.files.headers import open_stream
from statecat.statemeta.files.metadata import KeyGroupsHandle
from statecat.statemeta.model import KeyedLocation, OperatorMeta, StateInfo, StateMeta
from statecat.statemeta.types import TypeDescriptor

_I32 = struct.Struct(">i").unpack_from
_U16 = struct.Struct(">H").unpack_from
TIMESTAMP_BYTES = 8

# (buffer, position, key-group prefix) -> (the entry's canonical pairs, position after it)
Splitter = Callable[[bytes, int, bytes], tuple[list[Entry], int]]


def _span(desc: TypeDescriptor, what: str, state: StateInfo) -> Callable[[bytes, int], int]:
    """Where a serializer's output starting at ``pos`` ends (its decoder run for its length)."""
    if desc.raw_reasons():
        raise UnsupportedError(
            f"the {what} of state {state.name!r} cannot be decoded ({'; '.join(desc.raw_reasons())}), and heap "
            f"checkpoint entries are not length-framed, so this checkpoint cannot be rewritten",
            state=state.name,
            hint="Rewrite a canonical savepoint or a RocksDB checkpoint of the job instead",
        )
    decode = build_decoder(desc)

    def end(buf: bytes, pos: int) -> int:
        return decode(buf, pos)[1]

    return end


def entry_splitter(state: StateInfo) -> Splitter:
    namespace = state.namespace or TypeDescriptor.of("void_namespace")
    key_end = _span(state.key_type, "key", state)
    namespace_end = _span(namespace, "namespace", state)
    if state.kind == "timer":

        def timer(buf: bytes, pos: int, prefix: bytes) -> tuple[list[Entry], int]:
            end = namespace_end(buf, key_end(buf, pos + TIMESTAMP_BYTES))
            return [(prefix + buf[pos:end], b"")], end

        return timer
    ambiguous = state.key_type.fixed_length is None and namespace.fixed_length is None

    def composite(buf: bytes, pos: int, prefix: bytes) -> tuple[bytes, int]:
        ns_end = namespace_end(buf, pos)  # the namespace is written before the key
        k_end = key_end(buf, ns_end)
        return composite_key(prefix, buf[ns_end:k_end], buf[pos:ns_end], ambiguous), k_end

    value = state.value
    if state.state_type == "LIST" and value.kind == "list":
        element_end = _span(value.child("element"), "list element", state)

        def list_entry(buf: bytes, pos: int, prefix: bytes) -> tuple[list[Entry], int]:
            key, pos = composite(buf, pos, prefix)
            n = _I32(buf, pos)[0]
            if n < 0 or n > len(buf) - pos:
                raise DecodeError(f"list of {n} elements in {len(buf) - pos} bytes")
            pos += 4
            start = pos
            for _ in range(n):
                pos = element_end(buf, pos)
            if n == 0:
                return [], pos  # Flink writes no entry for an empty list
            elements = []
            at = start
            for _ in range(n):
                after = element_end(buf, at)
                elements.append(buf[at:after])
                at = after
            return [(key, bytes([LIST_ELEMENT_DELIMITER]).join(elements))], pos

        return list_entry
    if state.state_type == "MAP" and value.kind == "map":
        user_key_end = _span(value.child("key"), "map key", state)
        map_value_end = _span(value.child("value"), "map value", state)

        def map_entry(buf: bytes, pos: int, prefix: bytes) -> tuple[list[Entry], int]:
            key, pos = composite(buf, pos, prefix)
            n = _I32(buf, pos)[0]
            if n < 0 or n > len(buf) - pos:
                raise DecodeError(f"map of {n} entries in {len(buf) - pos} bytes")
            pos += 4
            pairs = []
            for _ in range(n):
                after_key = user_key_end(buf, pos)
                user_key = buf[pos:after_key]
                if buf[after_key]:  # null value: RocksDB keeps the flag alone
                    pairs.append((key + user_key, b"\x01"))
                    pos = after_key + 1
                else:
                    after = map_value_end(buf, after_key + 1)
                    pairs.append((key + user_key, buf[after_key:after]))
                    pos = after
            return pairs, pos

        return map_entry
    value_end = _span(value, "value", state)

    def value_entry(buf: bytes, pos: int, prefix: bytes) -> tuple[list[Entry], int]:
        key, pos = composite(buf, pos, prefix)
        end = value_end(buf, pos)
        return [(key, buf[pos:end])], end

    return value_entry


def heap_key_group_runs(
    meta: StateMeta,
    operator: OperatorMeta,
    handle: KeyGroupsHandle,
    by_id: dict[int, StateInfo],
    locations: dict[int, KeyedLocation],
) -> Iterator[tuple[int, Runs]]:
    """(key-group, canonical runs in state-id order) of each key-group of a heap checkpoint stream."""
    splitters = {state_id: entry_splitter(state) for state_id, state in by_id.items()}
    compressed = next(iter(locations.values())).compressed
    prefix_bytes = operator.key_group_prefix_bytes
    first = handle.start_key_group
    ends = key_group_ends(handle.offsets, handle.stream.size)
    stream, name, base = open_stream(meta.storage, handle.stream, 0)
    with stream:
        for i, offset in enumerate(handle.offsets):
            key_group = first + i
            if offset <= 0:
                yield key_group, []
                continue
            stream.seek(base + offset)
            data = stream.read(ends[i] - offset)
            if len(data) < 4 or _I32(data, 0)[0] != key_group:
                raise FormatError(
                    f"expected key-group {key_group} to start with its id",
                    file=name,
                    offset=base + offset,
                    hint="The key-group offsets in _metadata or the state file are damaged",
                )
            prefix = key_group_prefix(key_group, prefix_bytes)
            if compressed:
                sections = [
                    decompress_snappy_framed(data[s:e], name, base + offset + s)
                    for s, e in HeapKeyGroupDecoder._snappy_sections(key_group, data, name, base + offset)
                ]
            else:
                sections = [data[4:]]
            runs: dict[int, list[Entry]] = {}
            for section in sections:
                pos = 0
                while pos < len(section):
                    state_id, count = _U16(section, pos)[0], _I32(section, pos + 2)[0]
                    splitter = splitters.get(state_id)
                    if splitter is None or count < 0:
                        raise FormatError(
                            f"expected a state section of a declared state in key-group {key_group}, got state "
                            f"id {state_id} with {count} entries",
                            file=name,
                            offset=base + offset,
                            hint="The state file is damaged",
                        )
                    pos += 6
                    entries: list[Entry] = []
                    try:
                        for _ in range(count):
                            pairs, pos = splitter(section, pos, prefix)
                            entries += pairs
                    except DECODE_FAILURES as exc:
                        raise FormatError(
                            f"could not split an entry of state {by_id[state_id].name!r} in key-group {key_group}: {exc}",
                            file=name,
                            offset=base + offset,
                            hint="The state file is damaged, or its type is not what the header says",
                        ) from None
                    runs[state_id] = sorted(entries)
            yield key_group, sorted(runs.items())
