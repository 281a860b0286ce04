"""Decoders of the table runtime's binary formats: BinaryRowData, BinaryArrayData, BinaryMapData.

Little-endian, with fixed 8-byte slots and a variable part addressed by offsets from the start of
the structure. Field readers take (buf, base, end, slot position): ``base`` is where the enclosing
row or array starts and ``end`` where it ends; no field reads outside [base, end).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from statecat.readers.decoders import (
    DecodeError,
    Decoder,
    _need,
    _time_text,
    days,
    micros,
    read_length,
    sql_decimal,
    utf8_text,
)
from statecat.statemeta.errors import UnsupportedError
from statecat.statemeta.types import TypeDescriptor

if TYPE_CHECKING:
    from decimal import Decimal

_LE_I8 = struct.Struct("<b").unpack_from
_LE_I16 = struct.Struct("<h").unpack_from
_LE_I32 = struct.Struct("<i").unpack_from
_LE_I64 = struct.Struct("<q").unpack_from
_LE_U64 = struct.Struct("<Q").unpack_from
_LE_F32 = struct.Struct("<f").unpack_from
_LE_F64 = struct.Struct("<d").unpack_from

# Variable-length slots: highest bit set = stored inline in the slot, its length in the top byte.
INLINE_MARK = 1 << 63
INLINE_LENGTH_SHIFT = 56
MAX_INLINE_BYTES = 7  # Flink inlines at most 7 bytes (BinarySegmentUtils MAX_FIX_PART_DATA_SIZE)


def framed_binary_decoder(desc: TypeDescriptor) -> Decoder:
    """The decoder of a ``rowdata``/``array_data``/``map_data`` serializer: i32 length, then the structure."""
    if desc.kind == "rowdata":
        return _framed_binary(binary_row_decoder([t for _, t in desc.fields], [n for n, _ in desc.fields]))
    if desc.kind == "array_data":
        return _framed_binary(binary_array_decoder(desc.fields[0][1]))
    return _framed_binary(binary_map_decoder(desc.child("key"), desc.child("value")))


def _framed_binary(decoder: Callable[[bytes, int, int], Any]) -> Decoder:
    def framed(buf: bytes, pos: int) -> tuple[Any, int]:
        n, pos = read_length(buf, pos, "binary row length")
        return decoder(buf, pos, n), pos + n

    return framed


def _var_slot(buf: bytes, base: int, end: int, slot_at: int) -> tuple[int, int]:
    """(absolute start, length) of a variable-length field: inline in the slot, or offset/len."""
    raw = _LE_U64(buf, slot_at)[0]
    if raw & INLINE_MARK:
        start, n = slot_at, (raw >> INLINE_LENGTH_SHIFT) & 0x7F
        if n > MAX_INLINE_BYTES:
            raise DecodeError(f"inline field of {n} bytes, more than its slot's {MAX_INLINE_BYTES}")
    else:
        start, n = base + (raw >> 32), raw & 0xFFFFFFFF
    if start + n > end:
        raise DecodeError(f"field of {n} bytes at {start - base} runs past the end of its {end - base}-byte structure")
    return start, n


def _field_reader(desc: TypeDescriptor) -> Callable[[bytes, int, int, int], Any]:
    """Reads one field of a binary row/array: (buf, base, end of the structure, slot position) -> value."""
    kind = desc.kind
    if kind == "BOOLEAN":
        return lambda buf, base, end, at: buf[at] != 0
    if kind == "TINYINT":
        return lambda buf, base, end, at: _LE_I8(buf, at)[0]
    if kind == "SMALLINT":
        return lambda buf, base, end, at: _LE_I16(buf, at)[0]
    if kind == "INTEGER":
        return lambda buf, base, end, at: _LE_I32(buf, at)[0]
    if kind == "DATE":
        return lambda buf, base, end, at: days(_LE_I32(buf, at)[0])
    if kind == "TIME_WITHOUT_TIME_ZONE":
        return lambda buf, base, end, at: _time_text(_LE_I32(buf, at)[0])
    if kind == "BIGINT":
        return lambda buf, base, end, at: _LE_I64(buf, at)[0]
    if kind == "FLOAT":
        return lambda buf, base, end, at: _LE_F32(buf, at)[0]
    if kind == "DOUBLE":
        return lambda buf, base, end, at: _LE_F64(buf, at)[0]
    if kind in ("CHAR", "VARCHAR"):

        def text(buf: bytes, base: int, end: int, at: int) -> str:
            start, n = _var_slot(buf, base, end, at)
            return utf8_text(bytes(buf[start : start + n]))

        return text
    if kind in ("BINARY", "VARBINARY", "RAW"):

        def binary(buf: bytes, base: int, end: int, at: int) -> bytes:
            start, n = _var_slot(buf, base, end, at)
            return bytes(buf[start : start + n])

        return binary
    if kind == "DECIMAL":
        precision, scale = desc.attr("precision"), desc.attr("scale")
        if precision <= 18:
            return lambda buf, base, end, at: sql_decimal(_LE_I64(buf, at)[0], precision, scale)

        def decimal(buf: bytes, base: int, end: int, at: int) -> Decimal:
            raw = _LE_U64(buf, at)[0]
            start, n = base + (raw >> 32), raw & 0xFFFFFFFF
            if start + n > end:
                raise DecodeError(f"decimal of {n} bytes at {start - base} runs past the end of its structure")
            return sql_decimal(int.from_bytes(buf[start : start + n], "big", signed=True), precision, scale)

        return decimal
    if kind in ("TIMESTAMP_WITHOUT_TIME_ZONE", "TIMESTAMP_WITH_LOCAL_TIME_ZONE"):
        if desc.attr("precision", 6) <= 3:
            return lambda buf, base, end, at: micros(_LE_I64(buf, at)[0] * 1000)

        def timestamp(buf: bytes, base: int, end: int, at: int) -> int:
            raw = _LE_U64(buf, at)[0]
            millis_at = base + (raw >> 32)
            if millis_at + 8 > end:
                raise DecodeError(f"timestamp at {millis_at - base} runs past the end of its structure")
            millis = _LE_I64(buf, millis_at)[0]
            return micros(millis * 1000 + (raw & 0xFFFFFFFF) // 1000)

        return timestamp
    if kind == "ROW":
        # the name is reused below for array and map decoders
        nested: Callable[[bytes, int, int], Any] = binary_row_decoder(
            [t for _, t in desc.fields], [n for n, _ in desc.fields]
        )

        def row(buf: bytes, base: int, end: int, at: int) -> dict[str, Any]:
            start, n = _var_slot(buf, base, end, at)
            return nested(buf, start, n)

        return row
    if kind in ("ARRAY",):
        nested = binary_array_decoder(desc.fields[0][1])

        def array(buf: bytes, base: int, end: int, at: int) -> list[Any]:
            start, n = _var_slot(buf, base, end, at)
            return nested(buf, start, n)

        return array
    if kind in ("MAP", "MULTISET"):
        key = desc.child("key") if kind == "MAP" else desc.child("element")
        value = desc.child("value") if kind == "MAP" else TypeDescriptor.of("INTEGER")
        nested = binary_map_decoder(key, value)

        def map_(buf: bytes, base: int, end: int, at: int) -> list[tuple[Any, Any]]:
            start, n = _var_slot(buf, base, end, at)
            return nested(buf, start, n)

        return map_
    if kind == "NULL":
        return lambda buf, base, end, at: None
    raise UnsupportedError(f"no decoder for SQL type {desc.describe()} inside a binary row")


def binary_row_decoder(types: list[TypeDescriptor], names: list[str]) -> Callable[[bytes, int, int], dict]:
    """BinaryRowData: header byte + null bits, 8-byte slots, variable part (all little-endian)."""
    arity = len(types)
    null_bits_bytes = ((arity + 63 + 8) // 64) * 8
    readers = [
        (name, _field_reader(t), null_bits_bytes + 8 * i, 8 + i) for i, (name, t) in enumerate(zip(names, types))
    ]

    def decode(buf: bytes, base: int, size: int) -> dict[str, Any]:
        if size < null_bits_bytes + 8 * arity:
            raise DecodeError(f"binary row of {size} bytes is shorter than its {arity} fixed slots")
        _need(buf, base + size)
        end = base + size
        out: dict[str, Any] = {}
        for name, read, slot, bit in readers:
            if buf[base + (bit >> 3)] & (1 << (bit & 7)):
                out[name] = None
            else:
                out[name] = read(buf, base, end, base + slot)
        return out

    return decode


_ARRAY_ELEMENT_SIZES = {
    "BOOLEAN": 1,
    "TINYINT": 1,
    "SMALLINT": 2,
    "INTEGER": 4,
    "FLOAT": 4,
    "DATE": 4,
    "TIME_WITHOUT_TIME_ZONE": 4,
}


def binary_array_decoder(element: TypeDescriptor) -> Callable[[bytes, int, int], list]:
    """BinaryArrayData: i32 count, null bits in 4-byte words, fixed-size elements, variable part."""
    read = _field_reader(element)
    size = _ARRAY_ELEMENT_SIZES.get(element.kind, 8)

    def decode(buf: bytes, base: int, length: int) -> list[Any]:
        if length < 4:
            raise DecodeError(f"binary array of {length} bytes has no room for its element count")
        _need(buf, base + length)
        n = _LE_I32(buf, base)[0]
        elements_at = base + 4 + ((n + 31) // 32) * 4
        end = base + length
        if n < 0 or elements_at + n * size > end:
            raise DecodeError(f"binary array claims {n} elements in {length} bytes")
        out: list[Any] = []
        for i in range(n):
            if buf[base + 4 + (i >> 3)] & (1 << (i & 7)):
                out.append(None)
            else:
                out.append(read(buf, base, end, elements_at + i * size))
        return out

    return decode


def binary_map_decoder(key: TypeDescriptor, value: TypeDescriptor) -> Callable[[bytes, int, int], list]:
    """BinaryMapData: i32 byte size of the key array, the key array, then the value array."""
    keys = binary_array_decoder(key)
    values = binary_array_decoder(value)

    def decode(buf: bytes, base: int, length: int) -> list[tuple[Any, Any]]:
        if length < 4:
            raise DecodeError(f"binary map of {length} bytes has no room for its key array size")
        key_bytes = _LE_I32(buf, base)[0]
        if not 0 <= key_bytes <= length - 4:
            raise DecodeError(f"binary map of {length} bytes claims a {key_bytes}-byte key array")
        k = keys(buf, base + 4, key_bytes)
        v = values(buf, base + 4 + key_bytes, length - 4 - key_bytes)
        if len(k) != len(v):
            raise DecodeError(f"binary map has {len(k)} keys but {len(v)} values")
        return list(zip(k, v))

    return decode
