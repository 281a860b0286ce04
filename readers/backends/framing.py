"""The canonical framing of one key-group's bytes, both ways (docs: key-group data, framing).

A key-group is a series of runs, one per state with entries there, each introduced by the state's
``u16`` id. An entry is ``i32 keyLen | key | i32 valLen | value``; the last entry of a run sets the
"meta data follows" bit in its key's first byte and is followed by the next run's id or by END.
Writers and the native-layout reader build key-groups here; readers walk them here when a whole
key-group is edited (the scanners' compiled walk serves queries).
"""

from __future__ import annotations

import struct

from statecat.statemeta.errors import FormatError

META_DATA_FOLLOWS_FLAG = 0x80
END_OF_KEY_GROUP = 0xFFFF

_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")

Entry = tuple[bytes, bytes]  # composite key bytes (flag cleared), value bytes
Runs = list[tuple[int, list[Entry]]]  # (state id, entries) in stream order


def key_group_ends(offsets: tuple[int, ...], size: int) -> dict[int, int]:
    """Where each non-empty key-group (index into ``offsets``) ends: at the next one's start, the
    last at the stream's end. Offsets 0 mark empty key-groups."""
    starts = [(i, o) for i, o in enumerate(offsets) if o > 0]
    return {i: end for (i, _), end in zip(starts, [o for _, o in starts[1:]] + [size])}


def length_trailer(n: int) -> bytes:
    """Flink's little-endian base-256 length written after an ambiguous key or namespace."""
    out = bytearray([n & 0xFF])
    n >>= 8
    while n:
        out.append(n & 0xFF)
        n >>= 8
    return bytes(out)


def composite_key(prefix: bytes, key: bytes, namespace: bytes, ambiguous: bool) -> bytes:
    """``prefix | key | namespace``, each part followed by its length when both are variable-length."""
    if ambiguous:
        return prefix + key + length_trailer(len(key)) + namespace + length_trailer(len(namespace))
    return prefix + key + namespace


def frame_runs(runs: Runs) -> bytes:
    """The bytes of a key-group holding ``runs``; empty runs are left out (Flink writes none).
    No runs at all: empty bytes, which the key-group's offset records as 0."""
    out: list[bytes] = []
    for state_id, entries in runs:
        if not entries:
            continue
        out.append(_U16.pack(state_id))
        last = len(entries) - 1
        for i, (key, value) in enumerate(entries):
            if i == last:
                key = bytes((key[0] | META_DATA_FOLLOWS_FLAG,)) + key[1:]
            out += (_I32.pack(len(key)), key, _I32.pack(len(value)), value)
    if not out:
        return b""
    out.append(_U16.pack(END_OF_KEY_GROUP))
    return b"".join(out)


def parse_runs(data: bytes, file: str = "<key-group>", base: int = 0) -> Runs:
    """The runs of one uncompressed key-group, flags cleared. Every length is checked against the
    bytes that remain; a run without its END or next id is a truncated key-group."""
    runs: Runs = []
    pos, end = 0, len(data)

    def fail(expected: str, at: int) -> FormatError:
        return FormatError(
            f"expected {expected} in a key-group of {end} bytes, got the end of its bytes",
            file=file,
            offset=base + at,
            hint="The state file is truncated or damaged",
        )

    if end < 2:
        raise fail("a state id", pos)
    state_id = _U16.unpack_from(data, 0)[0]
    pos = 2
    entries: list[Entry] = []
    while True:
        if pos + 4 > end:
            raise fail("an entry's key length", pos)
        key_len = _I32.unpack_from(data, pos)[0]
        if key_len < 1 or pos + 4 + key_len + 4 > end:
            raise fail(f"a key of {key_len} bytes and a value length", pos)
        key = data[pos + 4 : pos + 4 + key_len]
        pos += 4 + key_len
        value_len = _I32.unpack_from(data, pos)[0]
        if value_len < 0 or pos + 4 + value_len > end:
            raise fail(f"a value of {value_len} bytes", pos)
        value = data[pos + 4 : pos + 4 + value_len]
        pos += 4 + value_len
        if not key[0] & META_DATA_FOLLOWS_FLAG:
            entries.append((key, value))
            continue
        entries.append((bytes((key[0] & ~META_DATA_FOLLOWS_FLAG,)) + key[1:], value))
        runs.append((state_id, entries))
        if pos + 2 > end:
            raise fail("the next state id or the end marker", pos)
        following = _U16.unpack_from(data, pos)[0]
        pos += 2
        if following == END_OF_KEY_GROUP:
            break
        state_id, entries = following, []
    if pos != end:
        raise FormatError(
            f"expected the key-group to end after its end marker, got {end - pos} more bytes",
            file=file,
            offset=base + pos,
            hint="The key-group offsets in _metadata or the state file are damaged",
        )
    return runs
