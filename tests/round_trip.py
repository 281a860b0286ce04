"""Stored bytes against statecat's encoders and writer.

Encoders (readers/codecs/encoders.py): every part of a state — key, namespace, map user key and value,
list element, whole list, value, timer, operator state element, broadcast entry — cut from a
canonical savepoint's streams where the decoders end, and ``encode(decode(bytes))`` held to those
bytes. Writer (writers/savepoint_writer.py): the bytes of every stream a ``_metadata`` refers to,
to compare a rewrite with its source.

Shared by tests/test_encoders.py and tests/test_write.py (the fixture corpus) and
tests/test_flink_restore_values.py (Flink's own restore-test savepoints), so both corpora are held
to one standard.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pyarrow as pa
import pytest

from statecat.readers import SavepointReader
from statecat.readers.backends.streams import decompress_snappy_framed
from statecat.readers.codecs.arrow_types import arrow_type
from statecat.readers.codecs.decoders import (
    BIGINT_LENGTH_OFFSET,
    BIGINT_SHORT_FORMS,
    LIST_ELEMENT_DELIMITER,
    TIMER_TIMESTAMP_FLIP,
    build_decoder,
    build_key_decoder,
)
from statecat.readers.codecs.encoders import (
    MICROS_DIGITS,
    TtlValue,
    build_encoder,
    build_key_encoder,
    build_list_state_encoder,
    build_timer_encoder,
    ttl_timestamp,
)
from statecat.readers.codecs.rowdata import ROW_HEADER_BITS, ROW_KIND_INSERT, WORD
from statecat.readers.codecs.values import NANOS_PER_MICRO
from statecat.readers.scans.scan import KeyedStateScanner
from statecat.statemeta.errors import UnsupportedError
from statecat.statemeta.files.headers import open_stream
from statecat.statemeta.files.metadata import InlineStream, read_metadata
from statecat.statemeta.model import KEY_GROUP_LAYOUTS, OperatorMeta, StateInfo
from statecat.statemeta.types import TypeDescriptor, key_column_type

T = TypeDescriptor.of
CANONICAL = KEY_GROUP_LAYOUTS[0]  # savepoint key-group streams (the other layouts: checkpoints)
FRAME = 4  # the i32 length before a framed value
JAVA_STREAM_MAGIC = b"\xac\xed\x00\x05"  # starts the CheckpointProperties at the end of _metadata (v4+)

# (what, type, stored bytes): one part of a state, each of its byte strings holding one value.
Part = tuple[str, object, list[bytes]]


def keyed_entries(reader: SavepointReader, op: OperatorMeta, state: StateInfo) -> list[dict]:
    """Per stored entry of a keyed state (canonical key-group streams): the bytes of its key,
    namespace, user key, value and (timers) whole element, cut where the decoders end."""
    scanner = KeyedStateScanner(reader.meta, op, state)
    decode_key = build_decoder(state.key_type)
    decode_namespace = build_decoder(state.namespace or T("void_namespace"))
    entries = []
    for location in state.keyed_locations:
        if location.layout != CANONICAL:
            continue
        for key_group, data, file, base in scanner._key_groups(location, None):
            data = bytes(data)
            _, (key_at, key_len, value_at, value_len) = scanner._locate(key_group, data, location, file, base)
            for kat, klen, vat, vlen in zip(key_at.tolist(), key_len.tolist(), value_at.tolist(), value_len.tolist()):
                start, end = kat + scanner.prefix, kat + klen
                entry = {"element": data[start:end], "value": data[vat : vat + vlen]}
                pos = start + (8 if state.kind == "timer" else 0)
                at = pos
                _, pos = decode_key(data, pos)
                entry["key"] = data[at:pos]
                if scanner.ambiguous:
                    pos = _length_trailer_end(data, pos, pos - at)
                at = pos
                _, pos = decode_namespace(data, pos)
                entry["namespace"] = data[at:pos]
                if scanner.ambiguous:
                    pos = _length_trailer_end(data, pos, pos - at)
                entry["user_key"] = data[pos:end]
                entries.append(entry)
    return entries


def _length_trailer_end(buf: bytes, pos: int, n: int) -> int:
    """Past the little-endian base-256 byte count Flink writes after an ambiguous key or namespace."""
    pos += 1
    while n >> 8:
        n >>= 8
        pos += 1
    return pos


def operator_elements(reader: SavepointReader, state: StateInfo) -> list[bytes]:
    """Each element of an operator state as stored at the handle's offsets."""
    elements = []
    for location in state.operator_locations:
        offsets = sorted(location.offsets)
        stream, file, base = open_stream(reader.meta.storage, location.stream, 0)
        with stream:
            for start, end in zip(offsets, offsets[1:] + [location.end]):
                stream.seek(base + start)
                data = stream.read(end - start)
                elements.append(decompress_snappy_framed(data, file, base + start) if location.compressed else data)
    return elements


def split_list(element: TypeDescriptor, values: list[bytes]) -> list[bytes]:
    """A ListState's elements, each cut where its decoder ends (0x2C between them)."""
    decode = build_decoder(element)
    out = []
    for data in values:
        pos = 0
        while pos < len(data):
            _, end = decode(data, pos)
            out.append(data[pos:end])
            assert end == len(data) or data[end] == LIST_ELEMENT_DELIMITER
            pos = end + 1
    return out


def stored_parts(reader: SavepointReader, op: OperatorMeta, state: StateInfo) -> list[Part]:
    """Every part of one state, as (what, type, stored bytes)."""
    namespace = state.namespace or T("void_namespace")
    if not state.is_keyed:
        elements = operator_elements(reader, state)
        if state.kind != "broadcast":
            return [("element", state.value, elements)]
        key, value = state.value.child("key"), state.value.child("value")
        keys, values = [], []
        decode_key, decode_value = build_decoder(key), build_decoder(value)
        for data in elements:
            pos = 4
            for _ in range(struct.unpack_from(">i", data)[0]):
                _, end = decode_key(data, pos)
                keys.append(data[pos:end])
                _, pos = decode_value(data, end)
                values.append(data[end:pos])
        entries = [k + v for k, v in zip(keys, values)]
        return [
            ("broadcast key", key, keys),
            ("broadcast value", value, values),
            ("broadcast entry", state.value, entries),
        ]
    entries = keyed_entries(reader, op, state)
    parts: list[Part] = [
        ("key", state.key_type, [e["key"] for e in entries]),
        ("namespace", namespace, [e["namespace"] for e in entries]),
    ]
    value = state.value
    if state.kind == "timer":
        parts.append(("timer", (state.key_type, namespace), [e["element"] for e in entries]))
    elif state.state_type == "MAP" and value.kind == "map":
        assert all(e["value"][:1] == b"\x00" for e in entries), "a map value is NULL"
        parts.append(("user key", value.child("key"), [e["user_key"] for e in entries]))
        parts.append(("map value", value.child("value"), [e["value"][1:] for e in entries]))
    elif state.state_type == "LIST" and value.kind == "list":
        stored = [e["value"] for e in entries]
        parts.append(("list element", value.child("element"), split_list(value.child("element"), stored)))
        parts.append(("list state", value.child("element"), stored))
    else:
        parts.append(("value", value, [e["value"] for e in entries]))
    return parts


def _sub_micros_zeroed(desc: TypeDescriptor, data: bytes) -> bytes:
    """``data`` (a framed binary row) with the nanoseconds below the microsecond of its TIMESTAMP(7..9)
    fields zeroed: what statecat keeps of them, so what the round trip must give back."""
    if desc.kind != "rowdata":
        return data
    out = bytearray(data)
    arity = len(desc.fields)
    null_bits = ((arity + 63 + ROW_HEADER_BITS) // 64) * WORD
    for i, (_, field) in enumerate(desc.fields):
        bit = ROW_HEADER_BITS + i
        if (
            field.kind.startswith("TIMESTAMP")
            and field.attr("precision") > MICROS_DIGITS
            and not out[FRAME + bit // 8] & (1 << bit % 8)
        ):
            slot = FRAME + null_bits + WORD * i  # its low 32 bits: the nanos of the millisecond
            nanos = struct.unpack_from("<I", out, slot)[0]
            struct.pack_into("<I", out, slot, nanos - nanos % NANOS_PER_MICRO)
    return bytes(out)


def _row_kinds_inserted(desc: TypeDescriptor, data: bytes) -> bytes:
    """``data`` with the RowKind byte of each binary row it holds whole (the value itself, or a
    list's elements) set to INSERT: the decoded value keeps no RowKind and the encoders write
    INSERT, so the round trip must give that back (Flink's test sinks, keep-last deduplication and
    the upsert materializer keep rows of other kinds)."""
    at = 0
    while desc.kind in ("external", "ttl"):  # the same bytes; a TTL value after its timestamp
        at += 8 if desc.kind == "ttl" else 0
        desc = desc.fields[0][1]
    if desc.kind == "rowdata":
        starts = [at]
    elif desc.kind == "list" and desc.fields[0][1].kind == "rowdata":
        starts, pos = [], at + 4
        for _ in range(struct.unpack_from(">i", data, at)[0]):
            starts.append(pos)
            pos += FRAME + struct.unpack_from(">i", data, pos)[0]
    else:
        return data
    out = bytearray(data)
    for start in starts:
        out[start + FRAME] = ROW_KIND_INSERT
    return bytes(out)


def _negative_scale(desc: TypeDescriptor, data: bytes) -> bool:
    """A BigDecimal of negative scale, which statecat shows as plain digits (1E+3 as 1000)."""
    if desc.kind != "bigdec" or struct.unpack_from(">i", data)[0] == 0:  # not one, or NULL
        return False
    n = struct.unpack_from(">i", data)[0]  # 1..3: ZERO, ONE, TEN; else the byte count + 4
    scale_at = FRAME + (n - BIGINT_LENGTH_OFFSET if n > len(BIGINT_SHORT_FORMS) else 0)
    return struct.unpack_from(">i", data, scale_at)[0] < 0


def encoded(encoder, value) -> bytes:
    out = bytearray()
    encoder(value, out)
    return bytes(out)


def round_trip(what: str, desc: TypeDescriptor, blobs: list[bytes]) -> int:
    """Asserts encode(decode(b)) == b for every stored value, decoded and in its Arrow form; returns
    how many values were compared byte for byte."""
    decode, encoder = build_decoder(desc), build_encoder(desc)
    values = []
    for data in blobs:
        value, end = decode(data, 0)
        assert end == len(data), f"{what}: the decoder read {end} of {len(data)} bytes"
        values.append(value)
    arrow = pa.array(values, type=arrow_type(desc)).to_pylist()
    exact = 0
    for data, value, arrow_value in zip(blobs, values, arrow):
        for form, given in (("decoded", value), ("Arrow", arrow_value)):
            if desc.kind == "ttl":  # the last-access timestamp is the caller's to keep
                given = TtlValue(given, ttl_timestamp(data))
            got = encoded(encoder, given)
            if _negative_scale(desc, data):
                assert decode(got, 0)[0] == value, f"{what} ({form} form): {value!r} does not round-trip"
                continue
            assert got == _row_kinds_inserted(desc, _sub_micros_zeroed(desc, data)), (
                f"{what} ({form} form) of {value!r}:\n{data.hex()}\n{got.hex()}"
            )
            exact += form == "decoded"
    return exact


def refused(desc: TypeDescriptor) -> bool:
    """Whether the type has a part statecat shows only as bytes or text (no encoder by design)."""
    return desc.kind in ("raw", "pickled") or any(refused(t) for _, t in desc.fields)


def assert_parts_round_trip(state: str, parts: list[Part]) -> None:
    """Every stored value of every part comes back byte for byte from its encoder; a part shown
    as bytes has no encoder (its rows are copied unchanged) and says so."""
    for what, desc, blobs in parts:
        if what == "timer":
            key, namespace = desc
            encode_timer = build_timer_encoder(key, namespace)
            decode_key, decode_namespace = build_key_decoder(key), build_decoder(namespace)
            for element in blobs:
                timestamp = struct.unpack_from(">Q", element)[0] - TIMER_TIMESTAMP_FLIP
                key_value, pos = decode_key(element, 8)
                namespace_value, _ = decode_namespace(element, pos)
                timer = {"timestamp": timestamp, "key": key_value, "namespace": namespace_value}
                assert encoded(encode_timer, timer) == element
            continue
        if refused(desc):
            with pytest.raises(UnsupportedError, match="copied unchanged"):
                build_encoder(desc)
            continue
        if what == "list state":
            decode = build_decoder(desc)
            encoder = build_list_state_encoder(desc)
            for data in blobs:
                assert encoded(encoder, [decode(e, 0)[0] for e in split_list(desc, [data])]) == data
            continue
        round_trip(f"{what} of {state}", desc, blobs)
        if what == "key":  # the key column's form (one-field rows unwrapped)
            encode_key, decode_key = build_key_encoder(desc), build_key_decoder(desc)
            column = pa.array([decode_key(b, 0)[0] for b in blobs], type=arrow_type(key_column_type(desc)))
            for data, value in zip(blobs, column.to_pylist()):
                assert encoded(encode_key, value) == data


# ----------------------------------------------------------------------------- whole savepoints


def metadata_properties(raw: bytes) -> bytes:
    """The Java-serialized CheckpointProperties that end a version 4+ ``_metadata`` (the last Java
    stream in it: inline state written with Java serialization comes before)."""
    at = raw.rfind(JAVA_STREAM_MAGIC)
    assert at >= 0, "no CheckpointProperties: a _metadata of version 3 has none"
    return raw[at:]


def handle_streams(directory: Path) -> list[tuple]:
    """Every stream the savepoint's ``_metadata`` refers to, inline or in a file: (operator id,
    subtask or None for the coordinator, handle, its key-group offsets or state entries, bytes)."""
    md = read_metadata(str(directory))
    raw = (Path(directory) / "_metadata").read_bytes()

    def data(stream) -> bytes:
        if isinstance(stream, InlineStream):
            return raw[stream.offset : stream.offset + stream.length]
        return Path(stream.path).read_bytes()

    out: list[tuple] = []
    for op in md.operators:
        if op.coordinator is not None:
            out.append((op.id, None, "coordinator", None, data(op.coordinator)))
        for s in op.subtasks:
            for name in ("managed_keyed", "managed_operator", "raw_keyed", "raw_operator"):
                handle = getattr(s, name)
                if handle is not None:
                    layout = handle.offsets if hasattr(handle, "offsets") else tuple(handle.entries)
                    out.append((op.id, s.index, name, layout, data(handle.stream)))
    return out
