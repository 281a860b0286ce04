"""The table runtime's binary formats, both ways: BinaryRowData, BinaryArrayData, BinaryMapData
(the decoders first, then their inverse encoders).

Little-endian, with fixed 8-byte slots and a variable part addressed by offsets from the start of
the structure. Field readers take (buf, base, end, slot position): ``base`` is where the enclosing
row or array starts and ``end`` where it ends; no field reads outside [base, end).
"""

from __future__ import annotations

import operator
import struct
from collections.abc import Callable
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from statecat.readers.codecs.decoders import (
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
from statecat.readers.codecs.encoders import (
    _BE_I32,
    MAX_COMPACT_PRECISION,
    MAX_COMPACT_TIMESTAMP_PRECISION,
    _timestamp_millis_nanos,
)
from statecat.readers.codecs.values import (
    EncodeError,
    Encoder,
    _big_integer_bytes,
    _binary,
    _boolean,
    _epoch_days,
    _fields_of,
    _integer,
    _millis_of_day,
    _pairs,
    _real,
    _sequence,
    _unscaled,
    _utf8,
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


# ----------------------------------------------------------------------------- encoding: the inverse of the decoders above

# A binary row/array field writer: (value, out, start of the enclosing structure, its slot's position).
SlotWriter = Callable[[Any, bytearray, int, int], None]
ROW_KIND_INSERT = 0  # RowKind.INSERT: what a row is written with (the decoders do not read the kind)
WORD = 8
ROW_HEADER_BITS = 8  # BinaryRowData: the RowKind byte precedes the null bits
ARRAY_COUNT_BYTES = 4
INLINE_MARK_BYTE = INLINE_MARK >> INLINE_LENGTH_SHIFT  # the slot's top byte: 0x80 | length
NON_COMPACT_DECIMAL_BYTES = 16  # reserved in the variable part whatever the value's length
NON_COMPACT_TIMESTAMP_BYTES = 8  # the epoch millis; the nanos of the milli sit in the slot
DEFAULT_TIMESTAMP_PRECISION = 6  # what the decoder above reads a TIMESTAMP without one as
ARRAY_NULL_WORD_BITS = 32  # BinaryArrayData's null bits come in 4-byte words
FLOAT_NAN = b"\x00\x00\xc0\x7f"  # Float.NaN, little-endian: BinaryArrayWriter canonicalises NaN
DOUBLE_NAN = b"\x00\x00\x00\x00\x00\x00\xf8\x7f"
_LE_I32_AT = struct.Struct("<i").pack_into
_LE_I64_AT = struct.Struct("<q").pack_into
_LE_U64_AT = struct.Struct("<Q").pack_into
_PACK_LE_I64 = struct.Struct("<q").pack
_ZEROS = bytes(NON_COMPACT_DECIMAL_BYTES)


def _pad(out: bytearray, start: int) -> None:
    """Zero bytes up to the next word boundary after ``start`` (roundNumberOfBytesToNearestWord)."""
    pad = -(len(out) - start) & (WORD - 1)
    if pad:
        out += _ZEROS[:pad]


def _var_part(data: bytes, out: bytearray, base: int, at: int) -> None:
    """Bytes in the variable part, padded to a word, the slot holding (offset << 32) | length."""
    start = len(out)
    out += data
    _pad(out, start)
    _LE_U64_AT(out, at, ((start - base) << 32) | len(data))


def _var_bytes(inline: bool) -> Callable[[bytes, bytearray, int, int], None]:
    """CHAR/VARCHAR/BINARY/VARBINARY: up to 7 bytes inline in the slot (highest byte 0x80 | length),
    longer ones in the variable part. RAW values are never inlined (writeRawValue)."""

    def write(data: bytes, out: bytearray, base: int, at: int) -> None:
        n = len(data)
        if inline and n <= MAX_INLINE_BYTES:
            out[at : at + n] = data  # the slot was zeroed: the rest of the seven bytes stays 0
            out[at + WORD - 1] = INLINE_MARK_BYTE | n
        else:
            _var_part(data, out, base, at)

    return write


def _fixed_slot(fmt: str, expected: str, bits: int | None, nan: bytes | None = None) -> SlotWriter:
    """A fixed-width field in the low bytes of its slot (little-endian); ``bits`` bounds integers."""
    pack_into = struct.Struct(fmt).pack_into
    if bits is None:

        def real(value: Any, out: bytearray, base: int, at: int) -> None:
            number = _real(value, expected)
            if nan is not None and number != number:
                out[at : at + len(nan)] = nan
                return
            try:
                pack_into(out, at, number)
            except OverflowError:
                raise EncodeError(f"{expected} within its range", value) from None

        return real
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1

    def integer(value: Any, out: bytearray, base: int, at: int) -> None:
        number = value if value.__class__ is int else _integer(value, expected)
        if not lo <= number <= hi:
            raise EncodeError(f"{expected} within {lo}..{hi}", value)
        pack_into(out, at, number)

    return integer


def _slot_writer(desc: TypeDescriptor, reserve_nulls: bool, in_array: bool = False) -> SlotWriter:
    """Writes one non-null field of a binary row or array (see ``_field_reader`` above)."""
    kind = desc.kind
    if kind == "BOOLEAN":

        def boolean(value: Any, out: bytearray, base: int, at: int) -> None:
            out[at] = 1 if _boolean(value) else 0

        return boolean
    if kind == "TINYINT":
        return _fixed_slot("<b", "a TINYINT (8-bit integer)", 8)
    if kind == "SMALLINT":
        return _fixed_slot("<h", "a SMALLINT (16-bit integer)", 16)
    if kind == "INTEGER":
        return _fixed_slot("<i", "an INT (32-bit integer)", 32)
    if kind == "BIGINT":
        return _fixed_slot("<q", "a BIGINT (64-bit integer)", 64)
    if kind == "FLOAT":  # BinaryArrayWriter writes Float.NaN for every NaN; BinaryRowWriter the bits
        return _fixed_slot("<f", "a FLOAT (32-bit float)", None, FLOAT_NAN if in_array else None)
    if kind == "DOUBLE":
        return _fixed_slot("<d", "a DOUBLE (64-bit float)", None, DOUBLE_NAN if in_array else None)
    if kind == "DATE":

        def date(value: Any, out: bytearray, base: int, at: int) -> None:
            _LE_I32_AT(out, at, _epoch_days(value, "a DATE (datetime.date or epoch days)"))

        return date
    if kind == "TIME_WITHOUT_TIME_ZONE":

        def time(value: Any, out: bytearray, base: int, at: int) -> None:
            _LE_I32_AT(out, at, _millis_of_day(value, desc.describe()))

        return time
    if kind in ("CHAR", "VARCHAR"):
        write_text = _var_bytes(inline=True)

        def text(value: Any, out: bytearray, base: int, at: int) -> None:
            write_text(_utf8(value, f"a {desc.describe()} (str)"), out, base, at)

        return text
    if kind in ("BINARY", "VARBINARY", "RAW"):
        write_binary = _var_bytes(inline=kind != "RAW")
        expected = f"a {desc.describe()} value (bytes)" if kind != "RAW" else "the stored bytes of a RAW value"

        def binary(value: Any, out: bytearray, base: int, at: int) -> None:
            write_binary(_binary(value, expected), out, base, at)

        return binary
    if kind == "DECIMAL":
        precision, scale = desc.attr("precision"), desc.attr("scale")
        expected = desc.describe()
        if precision <= MAX_COMPACT_PRECISION:

            def compact(value: Any, out: bytearray, base: int, at: int) -> None:
                _LE_I64_AT(out, at, _unscaled(value, precision, scale, expected))

            return compact

        def decimal(value: Any, out: bytearray, base: int, at: int) -> None:
            data = _big_integer_bytes(_unscaled(value, precision, scale, expected))
            start = len(out)
            out += data
            out += _ZEROS[: NON_COMPACT_DECIMAL_BYTES - len(data)]  # writeDecimal reserves 16 bytes
            _LE_U64_AT(out, at, ((start - base) << 32) | len(data))

        return decimal
    if kind in ("TIMESTAMP_WITHOUT_TIME_ZONE", "TIMESTAMP_WITH_LOCAL_TIME_ZONE"):
        precision = desc.attr("precision", DEFAULT_TIMESTAMP_PRECISION)
        utc = kind == "TIMESTAMP_WITH_LOCAL_TIME_ZONE"
        expected = f"{desc.describe()} (epoch µs or {'datetime' if utc else 'naive datetime'})"
        if precision <= MAX_COMPACT_TIMESTAMP_PRECISION:

            def compact_timestamp(value: Any, out: bytearray, base: int, at: int) -> None:
                _LE_I64_AT(out, at, _timestamp_millis_nanos(value, precision, expected, utc)[0])

            return compact_timestamp

        def timestamp(value: Any, out: bytearray, base: int, at: int) -> None:
            millis, nanos = _timestamp_millis_nanos(value, precision, expected, utc)
            start = len(out)
            out += _PACK_LE_I64(millis)
            _LE_U64_AT(out, at, ((start - base) << 32) | nanos)

        return timestamp
    if kind in ("ROW", "ARRAY", "MAP", "MULTISET"):
        nested = _binary_structure(desc, reserve_nulls)

        def structure(value: Any, out: bytearray, base: int, at: int) -> None:
            start = len(out)
            nested(value, out)
            size = len(out) - start
            _pad(out, start)
            _LE_U64_AT(out, at, ((start - base) << 32) | size)

        return structure
    if kind == "NULL":

        def null(value: Any, out: bytearray, base: int, at: int) -> None:
            raise EncodeError("NULL (the field's type is NULL)", value)

        return null
    raise UnsupportedError(f"no encoder for SQL type {desc.describe()} inside a binary row")


def _null_reserver(desc: TypeDescriptor) -> SlotWriter | None:
    """What generated code writes for a NULL non-compact DECIMAL or TIMESTAMP: the field keeps its
    bytes in the variable part (zeroed), the slot their offset and length 0."""
    size = None
    if desc.kind == "DECIMAL" and desc.attr("precision") > MAX_COMPACT_PRECISION:
        size = NON_COMPACT_DECIMAL_BYTES
    if desc.kind in ("TIMESTAMP_WITHOUT_TIME_ZONE", "TIMESTAMP_WITH_LOCAL_TIME_ZONE"):
        if desc.attr("precision", DEFAULT_TIMESTAMP_PRECISION) > MAX_COMPACT_TIMESTAMP_PRECISION:
            size = NON_COMPACT_TIMESTAMP_BYTES
    if size is None:
        return None
    reserved = bytes(size)

    def reserve(value: Any, out: bytearray, base: int, at: int) -> None:
        start = len(out)
        out += reserved
        _LE_U64_AT(out, at, (start - base) << 32)

    return reserve


def _binary_structure(desc: TypeDescriptor, reserve_nulls: bool) -> Encoder:
    """The unframed encoder of a binary row (rowdata/ROW), array (array_data/ARRAY) or map."""
    if desc.kind in ("rowdata", "ROW"):
        return binary_row_encoder([t for _, t in desc.fields], [n for n, _ in desc.fields], reserve_nulls)
    if desc.kind in ("array_data", "ARRAY"):
        return binary_array_encoder(desc.fields[0][1], reserve_nulls)
    if desc.kind == "MULTISET":
        return binary_map_encoder(desc.child("element"), TypeDescriptor.of("INTEGER"), reserve_nulls)
    return binary_map_encoder(desc.child("key"), desc.child("value"), reserve_nulls)


def binary_row_encoder(types: list[TypeDescriptor], names: list[str], reserve_nulls: bool = False) -> Encoder:
    """BinaryRowData: RowKind byte + null bits, 8-byte slots, variable part (all little-endian)."""
    arity = len(types)
    null_bits_bytes = ((arity + 63 + ROW_HEADER_BITS) // 64) * WORD
    zeros = bytes(null_bits_bytes + WORD * arity)
    plan = []
    for i, (name, t) in enumerate(zip(names, types)):
        bit = ROW_HEADER_BITS + i
        plan.append(
            (
                name,
                _slot_writer(t, reserve_nulls),
                null_bits_bytes + WORD * i,
                bit >> 3,
                1 << (bit & 7),
                _null_reserver(t) if reserve_nulls else None,
                bool(t.attr("nullable", True)),
                t.describe(),
            )
        )
    expected = f"a ROW (dict of {', '.join(names)})"
    keyset = frozenset(names)

    def row(value: Any, out: bytearray) -> None:
        given = _fields_of(value, names, expected, keyset)
        base = len(out)
        out += zeros
        out[base] = ROW_KIND_INSERT
        for name, write, slot, null_byte, null_bit, reserve, nullable, what in plan:
            item = given[name]
            if item is None:
                if not nullable:
                    raise EncodeError(f"a value of type {what}", item, f".{name}", note="the field is NOT NULL")
                out[base + null_byte] |= null_bit
                if reserve is not None:
                    reserve(None, out, base, base + slot)
                continue
            try:
                write(item, out, base, base + slot)
            except EncodeError as exc:
                raise exc.within(f".{name}") from None

    return row


# Fixed-width fields whose slot is one struct code (low bytes, then zero padding), by the Python
# type their value has in the common case; a row of only these is packed in one call.
_FIXED_SLOT_CODES = {
    "BOOLEAN": ("?7x", bool),
    "TINYINT": ("b7x", int),
    "SMALLINT": ("h6x", int),
    "INTEGER": ("i4x", int),
    "BIGINT": ("q", int),
    "FLOAT": ("f4x", float),
    "DOUBLE": ("d", float),
}


def _fixed_row_fast_path(desc: TypeDescriptor, generic: Encoder) -> Encoder | None:
    """A framed row of fixed-width fields packed in one struct call when every value is present and
    of its usual type; anything else (a NULL, an int for a DOUBLE, a value out of range) takes
    ``generic``, which writes the same bytes or raises the precise error."""
    codes = [_FIXED_SLOT_CODES.get(t.kind) for _, t in desc.fields]
    if not codes or any(code is None for code in codes):
        return None
    names = tuple(n for n, _ in desc.fields)
    keyset = frozenset(names)
    types = tuple(code[1] for code in codes if code is not None)
    arity = len(names)
    null_bits_bytes = ((arity + 63 + ROW_HEADER_BITS) // 64) * WORD
    size = null_bits_bytes + WORD * arity
    head = _BE_I32(size) + bytes(null_bits_bytes)  # the frame, then RowKind INSERT and no null bits
    pack = struct.Struct("<" + "".join(code[0] for code in codes if code is not None)).pack
    getter = operator.itemgetter(*names)
    one = arity == 1  # itemgetter of one name gives the value, not a tuple

    def fixed_row(value: Any, out: bytearray) -> None:
        if value.__class__ is dict and value.keys() == keyset:
            values = (getter(value),) if one else getter(value)
            if tuple(map(type, values)) == types:
                try:
                    packed = pack(*values)
                except (struct.error, OverflowError):
                    pass
                else:
                    out += head
                    out += packed
                    return
        generic(value, out)

    return fixed_row


_ENCODED_ELEMENT_SIZES = {
    "BOOLEAN": 1,
    "TINYINT": 1,
    "SMALLINT": 2,
    "INTEGER": 4,
    "FLOAT": 4,
    "DATE": 4,
    "TIME_WITHOUT_TIME_ZONE": 4,
}


def binary_array_encoder(element: TypeDescriptor, reserve_nulls: bool = False, label: str = "") -> Encoder:
    """BinaryArrayData: i32 count, null bits in 4-byte words, fixed-size elements, variable part.

    A NULL element is a zeroed slot whatever its type (BinaryArrayWriter.setNullAt)."""
    write = _slot_writer(element, reserve_nulls, in_array=True)
    size = _ENCODED_ELEMENT_SIZES.get(element.kind, WORD)
    nullable = bool(element.attr("nullable", True))
    what = element.describe()

    def array(value: Any, out: bytearray) -> None:
        values = _sequence(value, "an ARRAY (list)")
        n = len(values)
        header = ARRAY_COUNT_BYTES + (n + ARRAY_NULL_WORD_BITS - 1) // ARRAY_NULL_WORD_BITS * 4
        fixed = header + n * size
        base = len(out)
        out += bytes(fixed + (-fixed & (WORD - 1)))
        _LE_I32_AT(out, base, n)
        for i, item in enumerate(values):
            if item is None:
                if not nullable:
                    raise EncodeError(
                        f"a value of type {what}", item, f"[{i}]{label}", note="the elements are NOT NULL"
                    )
                out[base + ARRAY_COUNT_BYTES + (i >> 3)] |= 1 << (i & 7)
                continue
            try:
                write(item, out, base, base + header + i * size)
            except EncodeError as exc:
                raise exc.within(f"[{i}]{label}") from None

    return array


def binary_map_encoder(key: TypeDescriptor, value: TypeDescriptor, reserve_nulls: bool = False) -> Encoder:
    """BinaryMapData: i32 byte size of the key array, the key array, then the value array."""
    keys = binary_array_encoder(key, reserve_nulls, ".key")
    values = binary_array_encoder(value, reserve_nulls, ".value")

    def map_(entries: Any, out: bytearray) -> None:
        pairs = _pairs(entries, "a MAP (list of (key, value) pairs or dict)")
        start = len(out)
        out += b"\x00\x00\x00\x00"
        keys([k for k, _ in pairs], out)
        _LE_I32_AT(out, start, len(out) - start - ARRAY_COUNT_BYTES)
        values([v for _, v in pairs], out)

    return map_
