"""Typed decoders, built once per type descriptor and then run per record.

A decoder is ``decode(buf, pos) -> (value, next_pos)`` over a ``bytes`` buffer. Values come out in
the form ``pyarrow.array`` takes for the column's Arrow type (see ``arrow_types``): dicts for
structs, lists of pairs for maps, epoch microseconds for timestamps, epoch days for dates.
Java serializers write big-endian; the table runtime's binary rows are little-endian
(``rowdata``). Every length and count is checked against the bytes left before it is
used, and every value against the range its column holds: damage is a ``DecodeError``.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import pickle
import struct
from collections.abc import Callable, Sequence
from decimal import MAX_EMAX, MAX_PREC, MIN_EMIN, Context, Decimal
from typing import Any

from statecat.statemeta.errors import UnsupportedError
from statecat.statemeta.types import CEP_KINDS, STRUCT_KINDS, TypeDescriptor, key_column_type

Decoder = Callable[[bytes, int], tuple[Any, int]]

_BE_I8 = struct.Struct(">b").unpack_from
_BE_I16 = struct.Struct(">h").unpack_from
_BE_U16 = struct.Struct(">H").unpack_from
_BE_I32 = struct.Struct(">i").unpack_from
_BE_U32 = struct.Struct(">I").unpack_from
_BE_I64 = struct.Struct(">q").unpack_from
_BE_F32 = struct.Struct(">f").unpack_from
_BE_F64 = struct.Struct(">d").unpack_from
_BE_I64_I32 = struct.Struct(">qi").unpack_from

LONG_MIN = -(1 << 63)
INT_MIN = -(1 << 31)
BYTE_MIN = -128
TIMER_TIMESTAMP_FLIP = 1 << 63
MILLIS_PER_DAY = 86_400_000
EPOCH_ORDINAL = dt.date(1970, 1, 1).toordinal()
# BigIntSerializer's short forms: 0 = null, then ZERO, ONE, TEN; longer byte arrays are offset by 4.
BIGINT_SHORT_FORMS = {1: 0, 2: 1, 3: 10}
BIGINT_LENGTH_OFFSET = 4
POJO_NULL, POJO_EXACT, POJO_SUBCLASS, POJO_TAGGED = 0x01, 0x02, 0x04, 0x08
LIST_ELEMENT_DELIMITER = 0x2C
EXACT = Context(prec=MAX_PREC, Emax=MAX_EMAX, Emin=MIN_EMIN)
# BigDecimals render as plain digits (Java's toPlainString) while that pads with at most this many
# zeros; beyond, as Java's BigDecimal.toString() does (1.5E-1000000), so a scale from the data
# (any int) never makes a string of millions of zeros.
PLAIN_DECIMAL_MAX_SCALE = 1000
# Longest BigInteger magnitude rendered: decimal conversion costs quadratic time in its length.
MAX_BIG_INTEGER_BYTES = 4096
# Dates and timestamps are read within 0001-01-01 .. 9999-12-31, what Spark's DATE/TIMESTAMP and
# Python's datetime hold (Flink SQL's own range is 0000..9999); anything beyond is reported.
MIN_DAYS = dt.date(1, 1, 1).toordinal() - EPOCH_ORDINAL
MAX_DAYS = dt.date(9999, 12, 31).toordinal() - EPOCH_ORDINAL
MIN_MICROS = MIN_DAYS * 86_400_000_000
MAX_MICROS = (MAX_DAYS + 1) * 86_400_000_000 - 1
REPLACEMENT_CHARACTER = "\ufffd"
ROW_KIND_BITS = 2  # a Row's null mask starts with two bits of its RowKind


class DecodeError(Exception):
    """A value's bytes do not fit its type; the reader turns it into a FormatError with the location."""


# What a decoder raises on bytes that do not fit its type: its own DecodeError, and the errors
# of reading past a buffer's end (struct, indexing) or of building a value out of range (dates).
DECODE_FAILURES = (DecodeError, struct.error, IndexError, ValueError, OverflowError)


def _need(buf: bytes, end: int) -> None:
    if end > len(buf):
        raise DecodeError(f"value runs past the end of its bytes (needs {end}, has {len(buf)})")


def read_length(buf: bytes, pos: int, what: str = "byte length") -> tuple[int, int]:
    """An i32 length followed by that many bytes: (length, position after the i32).

    Checked before use: negative lengths would move decoding backwards, and a length past the
    buffer would be a silent short read."""
    n = _BE_I32(buf, pos)[0]
    pos += 4
    if n < 0 or n > len(buf) - pos:
        raise DecodeError(f"expected a {what} between 0 and the {len(buf) - pos} bytes left, got {n}")
    return n, pos


def read_count(buf: bytes, pos: int, what: str = "element count", min_size: int = 1) -> tuple[int, int]:
    """An i32 count of elements that each take at least ``min_size`` bytes: (count, position after it).

    Checked against the bytes left before anything is allocated or looped over."""
    n = _BE_I32(buf, pos)[0]
    pos += 4
    if n < 0 or n * min_size > len(buf) - pos:
        raise DecodeError(f"expected an {what} that fits the {len(buf) - pos} bytes left, got {n}")
    return n, pos


def micros(value: int) -> int:
    """A timestamp in epoch microseconds, checked against the years 1..9999 (MIN_MICROS..MAX_MICROS)."""
    if not MIN_MICROS <= value <= MAX_MICROS:
        raise DecodeError(f"timestamp {value} µs from the epoch is outside the years 1 to 9999")
    return value


def days(value: int) -> int:
    """A date in epoch days, checked against the years 1..9999 (MIN_DAYS..MAX_DAYS)."""
    if not MIN_DAYS <= value <= MAX_DAYS:
        raise DecodeError(f"date {value} days from the epoch is outside the years 1 to 9999")
    return value


def utf16_text(units: list[int]) -> str:
    """Java chars (UTF-16 code units) as text; unpaired surrogates become U+FFFD, so the text is
    valid UTF-8 (the replacement Java's own UTF-8 encoding of such a string makes)."""
    return struct.pack(f"<{len(units)}H", *units).decode("utf-16-le", "replace")


def utf8_text(data: bytes) -> str:
    """UTF-8 bytes as text, each malformed sequence replaced by U+FFFD as Flink's StringData
    (Java's UTF-8 decoder) does."""
    return data.decode("utf-8", "replace")


# ----------------------------------------------------------------------------- Java serializers


def _fixed(unpack: Callable[[bytes, int], tuple[Any, ...]], size: int) -> Decoder:
    def decode(buf: bytes, pos: int) -> tuple[Any, int]:
        return unpack(buf, pos)[0], pos + size

    return decode


def _boolean(buf: bytes, pos: int) -> tuple[bool, int]:
    return buf[pos] != 0, pos + 1


def _char(buf: bytes, pos: int) -> tuple[str, int]:
    unit = _BE_U16(buf, pos)[0]
    return (REPLACEMENT_CHARACTER if 0xD800 <= unit <= 0xDFFF else chr(unit)), pos + 2


def _skip_one(buf: bytes, pos: int) -> tuple[None, int]:
    return None, pos + 1


TUPLE0_BYTE = 42  # Tuple0Serializer writes this one byte for the empty tuple
# The empty tuple as Java prints it: Parquet (the lake) has no struct without fields.
TUPLE0_TEXT = "()"


def _tuple0(buf: bytes, pos: int) -> tuple[str, int]:
    if buf[pos] != TUPLE0_BYTE:
        raise DecodeError(f"expected Tuple0's byte {TUPLE0_BYTE}, got {buf[pos]}")
    return TUPLE0_TEXT, pos + 1


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
        if shift > 35:
            raise DecodeError("varint longer than 5 bytes")


def java_string(buf: bytes, pos: int) -> tuple[str | None, int]:
    """StringValue: varint(length + 1), then UTF-16 code units as varints (0 = null)."""
    n = buf[pos]
    pos += 1
    if n >= 0x80:
        n, pos = read_varint(buf, pos - 1)
    if n == 0:
        return None, pos
    n -= 1
    if n > len(buf) - pos:  # every char takes at least one byte
        raise DecodeError(f"string of {n} chars is longer than the {len(buf) - pos} bytes left")
    chunk = buf[pos : pos + n]
    if chunk.isascii():
        return chunk.decode("ascii"), pos + n
    units = []
    for _ in range(n):
        c = buf[pos]
        pos += 1
        if c >= 0x80:
            c, pos = read_varint(buf, pos - 1)
        units.append(c & 0xFFFF)  # Java keeps the low 16 bits: (char) c
    return utf16_text(units), pos


def _framed_bytes(buf: bytes, pos: int) -> tuple[bytes, int]:
    n, pos = read_length(buf, pos, "byte array length")
    return bytes(buf[pos : pos + n]), pos + n


def _string_data(buf: bytes, pos: int) -> tuple[str, int]:
    n, pos = read_length(buf, pos, "string length")
    return utf8_text(bytes(buf[pos : pos + n])), pos + n


def _big_integer(buf: bytes, pos: int) -> tuple[int | None, int]:
    at = pos
    n = _BE_I32(buf, pos)[0]
    pos += 4
    if n == 0:
        return None, pos
    if n in BIGINT_SHORT_FORMS:
        return BIGINT_SHORT_FORMS[n], pos
    n -= BIGINT_LENGTH_OFFSET
    # Flink writes length + 4 for a non-empty magnitude; anything else is damage.
    if n < 1 or n > len(buf) - pos:
        raise DecodeError(f"expected a BigInteger length of 1 to {len(buf) - pos} bytes, got {n} (at {at})")
    if n > MAX_BIG_INTEGER_BYTES:
        raise DecodeError(f"BigInteger of {n} bytes is longer than the {MAX_BIG_INTEGER_BYTES} bytes statecat renders")
    return int.from_bytes(buf[pos : pos + n], "big", signed=True), pos + n


def _bigint(buf: bytes, pos: int) -> tuple[str | None, int]:
    value, pos = _big_integer(buf, pos)
    # Through Decimal: str(int) refuses more than 4300 digits, and MAX_BIG_INTEGER_BYTES bounds the cost.
    return (None if value is None else str(Decimal(value))), pos


def render_big_decimal(unscaled: int, scale: int) -> str:
    """Java BigDecimal text: plain digits for scales within ±PLAIN_DECIMAL_MAX_SCALE, else Java's
    scientific ``toString`` form (the two agree on every value Flink SQL's DECIMAL can hold)."""
    value = scaled_decimal(unscaled, scale)
    if -PLAIN_DECIMAL_MAX_SCALE <= scale <= PLAIN_DECIMAL_MAX_SCALE:
        return format(value, "f")
    return str(value)


def _bigdec(buf: bytes, pos: int) -> tuple[str | None, int]:
    unscaled, pos = _big_integer(buf, pos)
    if unscaled is None:
        return None, pos
    scale = _BE_I32(buf, pos)[0]
    return render_big_decimal(unscaled, scale), pos + 4


def _epoch_millis_to_micros(buf: bytes, pos: int) -> tuple[int | None, int]:
    ms = _BE_I64(buf, pos)[0]
    return (None if ms == LONG_MIN else micros(ms * 1000)), pos + 8


def _sql_date(buf: bytes, pos: int) -> tuple[int | None, int]:
    ms = _BE_I64(buf, pos)[0]
    return (None if ms == LONG_MIN else days(ms // MILLIS_PER_DAY)), pos + 8


def _time_text(millis_of_day: int, nanos: int = 0) -> str:
    seconds, ms = divmod(millis_of_day, 1000)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    frac = nanos if nanos else ms * 1_000_000
    text = f"{h:02d}:{m:02d}:{s:02d}"
    if frac:
        text += "." + f"{frac:09d}".rstrip("0")
    return text


def _sql_time(buf: bytes, pos: int) -> tuple[str | None, int]:
    ms = _BE_I64(buf, pos)[0]
    return (None if ms == LONG_MIN else _time_text(ms % MILLIS_PER_DAY)), pos + 8


def _sql_timestamp(buf: bytes, pos: int) -> tuple[int | None, int]:
    ms, nanos = _BE_I64_I32(buf, pos)
    if ms == LONG_MIN:
        return None, pos + 12
    # getTime() holds the millis, getNanos() the whole fraction of the second.
    return micros((ms // 1000) * 1_000_000 + nanos // 1000), pos + 12


def _instant(buf: bytes, pos: int) -> tuple[int | None, int]:
    seconds, nanos = _BE_I64_I32(buf, pos)
    if seconds == LONG_MIN and nanos == INT_MIN:
        return None, pos + 12
    return micros(seconds * 1_000_000 + nanos // 1000), pos + 12


def _local_date(buf: bytes, pos: int) -> tuple[int | None, int]:
    year = _BE_I32(buf, pos)[0]
    if year == INT_MIN:
        return None, pos + 6
    return dt.date(year, buf[pos + 4], buf[pos + 5]).toordinal() - EPOCH_ORDINAL, pos + 6


def _local_time_parts(buf: bytes, pos: int) -> tuple[tuple[int, int, int, int] | None, int]:
    hour = _BE_I8(buf, pos)[0]
    if hour == BYTE_MIN:
        return None, pos + 7
    nano = _BE_I32(buf, pos + 3)[0]
    return (hour, buf[pos + 1], buf[pos + 2], nano), pos + 7


def _local_time(buf: bytes, pos: int) -> tuple[str | None, int]:
    parts, pos = _local_time_parts(buf, pos)
    if parts is None:
        return None, pos
    h, m, s, nano = parts
    return _time_text(((h * 60 + m) * 60 + s) * 1000, nano), pos


def _local_datetime(buf: bytes, pos: int) -> tuple[int | None, int]:
    epoch_days, pos = _local_date(buf, pos)
    parts, pos = _local_time_parts(buf, pos)
    if epoch_days is None or parts is None:
        return None, pos
    h, m, s, nano = parts
    return micros(((epoch_days * 86400 + (h * 60 + m) * 60 + s) * 1_000_000) + nano // 1000), pos


def _time_window(buf: bytes, pos: int) -> tuple[dict[str, int], int]:
    start, end = struct.unpack_from(">qq", buf, pos)
    return {"start": start, "end": end}, pos + 16


def _count_window(buf: bytes, pos: int) -> tuple[dict[str, int], int]:
    return {"id": _BE_I64(buf, pos)[0]}, pos + 8


def scaled_decimal(unscaled: int, scale: int) -> Decimal:
    """unscaled × 10^-scale, exactly (Decimal arithmetic would round to 28 digits)."""
    return Decimal(unscaled).scaleb(-scale, EXACT)


MAX_DECIMAL_PRECISION = 38  # Flink SQL's DECIMAL, and Arrow's decimal128
_DECIMAL_LIMITS = [10**p for p in range(MAX_DECIMAL_PRECISION + 1)]


def sql_decimal(unscaled: int, precision: int, scale: int) -> Decimal:
    """A DECIMAL(precision, scale) value; Flink never stores more digits than the precision."""
    limit = _DECIMAL_LIMITS[precision] if 0 < precision <= MAX_DECIMAL_PRECISION else 0
    if not -limit < unscaled < limit:
        raise DecodeError(
            f"DECIMAL({precision}, {scale}) value with unscaled digits {unscaled} has more than {precision} digits"
        )
    return scaled_decimal(unscaled, scale)


def _timestamp_data(precision: int) -> Decoder:
    if precision <= 3:
        return _epoch_millis_to_micros

    def decode(buf: bytes, pos: int) -> tuple[int, int]:
        ms, nano_of_milli = _BE_I64_I32(buf, pos)
        return micros(ms * 1000 + nano_of_milli // 1000), pos + 12

    return decode


def _decimal_data(precision: int, scale: int) -> Decoder:
    if precision <= 18:

        def compact(buf: bytes, pos: int) -> tuple[Decimal, int]:
            return sql_decimal(_BE_I64(buf, pos)[0], precision, scale), pos + 8

        return compact

    def wide(buf: bytes, pos: int) -> tuple[Decimal, int]:
        n, pos = read_length(buf, pos, "decimal length")
        return sql_decimal(int.from_bytes(buf[pos : pos + n], "big", signed=True), precision, scale), pos + n

    return wide


_SIMPLE: dict[str, Decoder] = {
    "boolean": _boolean,
    "byte": _fixed(_BE_I8, 1),
    "short": _fixed(_BE_I16, 2),
    "int": _fixed(_BE_I32, 4),
    "long": _fixed(_BE_I64, 8),
    "float": _fixed(_BE_F32, 4),
    "double": _fixed(_BE_F64, 8),
    "char": _char,
    "string": java_string,
    "bytes": _framed_bytes,
    "void": _skip_one,
    "tuple0": _tuple0,
    "void_namespace": _skip_one,
    "global_window": _skip_one,
    "bigint": _bigint,
    "bigdec": _bigdec,
    "date": _epoch_millis_to_micros,
    "sql_date": _sql_date,
    "sql_time": _sql_time,
    "sql_timestamp": _sql_timestamp,
    "instant": _instant,
    "local_date": _local_date,
    "local_time": _local_time,
    "local_datetime": _local_datetime,
    "string_data": _string_data,
    "time_window": _time_window,
    "count_window": _count_window,
}


def build_decoder(desc: TypeDescriptor, *, unpickle: bool = False) -> Decoder:
    """The decoder for one serializer's output. ``raw`` types must be framed by the caller."""
    decoder = _build_decoder(desc, unpickle)
    if desc.kind in STRUCT_KINDS and not desc.fields:
        return _empty_row(decoder)
    return decoder


def _empty_row(decoder: Decoder) -> Decoder:
    """A row of no fields (Flink SQL's ``ROW<>``: the key of a global aggregate, the value of a join
    without equality) reads as the STRING ``"()"``, as Tuple0 does: Parquet and Spark have no empty
    struct (readers/codecs/arrow_types.py)."""

    def empty_row(buf: bytes, pos: int) -> tuple[Any, int]:
        value, pos = decoder(buf, pos)
        return (None if value is None else TUPLE0_TEXT), pos

    return empty_row


def _build_decoder(desc: TypeDescriptor, unpickle: bool) -> Decoder:
    kind = desc.kind
    simple = _SIMPLE.get(kind)
    if simple is not None:
        return simple
    if kind == "raw":
        raise UnsupportedError(f"{desc.attr('serializer')} cannot be decoded: {desc.attr('reason')}")
    if desc.attr("codec") is not None:  # FLIP-27 source splits and enumerator state
        from statecat.readers.codecs.source_splits import DECODERS

        return DECODERS[desc.attr("codec")]
    if kind in ("tuple", "either", "row", "pojo"):
        return _struct_decoder(desc, unpickle)
    if kind == "nullable":
        inner = build_decoder(desc.fields[0][1], unpickle=unpickle)
        padding = desc.attr("padding", 0)

        def nullable(buf: bytes, pos: int) -> tuple[Any, int]:
            if buf[pos]:
                return None, pos + 1 + padding
            return inner(buf, pos + 1)

        return nullable
    if kind == "ttl":
        inner = build_decoder(desc.fields[0][1], unpickle=unpickle)

        def ttl(buf: bytes, pos: int) -> tuple[Any, int]:  # the last-access timestamp precedes the user value
            return inner(buf, pos + 8)

        return ttl
    if kind in ("external",):
        return build_decoder(desc.fields[0][1], unpickle=unpickle)
    if kind == "avro":  # flink-avro's AvroSerializer, compiled from the writer schema (statemeta.avro)
        from statecat.readers.codecs.avro import build_avro_decoder

        return build_avro_decoder(desc)
    if kind == "kryo":  # Kryo's FieldSerializer, typed from the job's class files (statemeta.kryo)
        from statecat.readers.codecs.kryo import build_kryo_decoder

        return build_kryo_decoder(desc)
    if kind == "raw_value":
        inner_desc = desc.fields[0][1]
        # the name is reused (a Decoder above): None means bytes kept raw
        inner = None if inner_desc.raw_reasons() else build_decoder(inner_desc, unpickle=unpickle)  # type: ignore[assignment]

        def raw_value(buf: bytes, pos: int) -> tuple[Any, int]:
            data, end = _framed_bytes(buf, pos)
            if inner is None:
                return data, end
            return inner(data, 0)[0], end

        return raw_value
    if kind == "list":
        return _counted(build_decoder(desc.fields[0][1], unpickle=unpickle))
    if kind == "primitive_array":
        return _primitive_array(desc.fields[0][1].kind)
    if kind == "string_array":
        return _counted(java_string)
    if kind == "generic_array":
        element = build_decoder(desc.fields[0][1], unpickle=unpickle)

        def generic_array(buf: bytes, pos: int) -> tuple[list[Any], int]:
            n, pos = read_count(buf, pos)  # each element has at least its null flag
            out = []
            for _ in range(n):
                if buf[pos]:
                    value, pos = element(buf, pos + 1)
                else:
                    value, pos = None, pos + 1
                out.append(value)
            return out, pos

        return generic_array
    if kind == "map":
        return map_decoder(
            build_decoder(desc.child("key"), unpickle=unpickle), build_decoder(desc.child("value"), unpickle=unpickle)
        )
    if kind == "enum":
        constants = desc.attr("constants", ())

        def enum(buf: bytes, pos: int) -> tuple[Any, int]:
            ordinal = _BE_I32(buf, pos)[0]
            if not 0 <= ordinal < len(constants):
                raise DecodeError(f"enum ordinal {ordinal} outside 0..{len(constants) - 1}")
            return constants[ordinal], pos + 4

        return enum
    if kind == "decimal_data":
        return _decimal_data(desc.attr("precision"), desc.attr("scale"))
    if kind == "timestamp_data":
        return _timestamp_data(desc.attr("precision"))
    if kind in ("rowdata", "array_data", "map_data"):  # the table runtime's little-endian binary formats
        from statecat.readers.codecs.rowdata import framed_binary_decoder

        return framed_binary_decoder(desc)
    if kind == "pickled":
        return _pickled(unpickle, strict=bool(desc.attr("pyflink_pickle")))
    if kind == "pyflink":  # PyFlink process-mode state with a declared type
        from statecat.readers.codecs.pyflink import build_pyflink_decoder

        return build_pyflink_decoder(desc, unpickle=unpickle)
    if kind == "stream_element":
        return stream_element_decoder(build_decoder(desc.child("value"), unpickle=unpickle))
    if kind in CEP_KINDS or kind == "dewey_number":  # CEP's NFA state and shared buffer
        from statecat.readers.codecs.cep import build_cep_decoder

        return build_cep_decoder(desc, lambda child: build_decoder(child, unpickle=unpickle))
    if kind == "java_serialized":  # JavaSerializer: a Java serialization stream, walked, never deserialized
        from statecat.readers.codecs.java_serialized import decode_java_serialized

        return decode_java_serialized
    if kind == "broadcast_entry":
        key = build_decoder(desc.child("key"), unpickle=unpickle)
        value = build_decoder(desc.child("value"), unpickle=unpickle)

        def entry(buf: bytes, pos: int) -> tuple[dict[str, Any], int]:
            k, pos = key(buf, pos)
            v, pos = value(buf, pos)
            return {"key": k, "value": v}, pos

        return entry
    raise UnsupportedError(f"no decoder for type {desc.describe()}")


# StreamElementSerializer's tags, and the element each names (statemeta.types.stream_element_type).
STREAM_ELEMENT_TAGS = {
    0: "record",  # with a timestamp
    1: "record",  # without one
    2: "watermark",
    3: "latency_marker",
    4: "watermark_status",
    5: "record_attributes",
    6: "internal_watermark",
}
RECORD_WITH_TIMESTAMP, RECORD_WITHOUT_TIMESTAMP, WATERMARK, LATENCY_MARKER = 0, 1, 2, 3
WATERMARK_STATUS, RECORD_ATTRIBUTES, INTERNAL_WATERMARK = 4, 5, 6


def stream_element_decoder(value: Decoder) -> Decoder:
    """StreamElementSerializer: a tag byte, then what that element holds (a record: its timestamp if
    it has one, then the value)."""

    def element(buf: bytes, pos: int) -> tuple[dict[str, Any], int]:
        _need(buf, pos + 1)
        tag = buf[pos]
        pos += 1
        out: dict[str, Any] = {"timestamp": None, "value": None, "status": None, "detail": None}
        if tag not in STREAM_ELEMENT_TAGS:
            raise DecodeError(f"expected a stream element tag 0..{len(STREAM_ELEMENT_TAGS) - 1}, got {tag}")
        out["element"] = STREAM_ELEMENT_TAGS[tag]
        if tag in (RECORD_WITH_TIMESTAMP, WATERMARK):
            _need(buf, pos + 8)
            out["timestamp"] = _BE_I64(buf, pos)[0]
            pos += 8
        if tag in (RECORD_WITH_TIMESTAMP, RECORD_WITHOUT_TIMESTAMP):
            out["value"], pos = value(buf, pos)
        elif tag == INTERNAL_WATERMARK:
            _need(buf, pos + 12)
            out["status"], out["timestamp"] = _BE_I32(buf, pos)[0], _BE_I64(buf, pos + 4)[0]
            pos += 12
        elif tag == WATERMARK_STATUS:
            _need(buf, pos + 4)
            out["status"] = _BE_I32(buf, pos)[0]
            pos += 4
        elif tag == LATENCY_MARKER:
            _need(buf, pos + 28)
            out["timestamp"] = _BE_I64(buf, pos)[0]
            lower, upper, subtask = struct.unpack_from(">qqi", buf, pos + 8)
            out["detail"] = json.dumps({"operator_lower": lower, "operator_upper": upper, "subtask": subtask})
            pos += 28
        elif tag == RECORD_ATTRIBUTES:
            _need(buf, pos + 1)
            out["detail"] = json.dumps({"backlog": buf[pos] != 0})
            pos += 1
        return out, pos

    return element


def map_decoder(key: Decoder, value: Decoder) -> Decoder:
    """MapSerializer: a count, then per entry the key, a null flag and (not null) the value."""

    def map_(buf: bytes, pos: int) -> tuple[list[tuple[Any, Any]], int]:
        n, pos = read_count(buf, pos, "map entry count")  # each entry has at least its null flag
        out = []
        for _ in range(n):
            k, pos = key(buf, pos)
            if buf[pos]:
                out.append((k, None))
                pos += 1
            else:
                v, pos = value(buf, pos + 1)
                out.append((k, v))
        return out, pos

    return map_


def _counted(element: Decoder) -> Decoder:
    def counted(buf: bytes, pos: int) -> tuple[list[Any], int]:
        n, pos = read_count(buf, pos)
        out = []
        for _ in range(n):
            value, pos = element(buf, pos)
            out.append(value)
        return out, pos

    return counted


_PRIMITIVE_ARRAY_CODES = {
    "boolean": "?",
    "byte": "b",
    "short": "h",
    "int": "i",
    "long": "q",
    "float": "f",
    "double": "d",
    "char": "H",
}


def _primitive_array(element_kind: str) -> Decoder:
    code = _PRIMITIVE_ARRAY_CODES[element_kind]
    size = struct.calcsize(code)

    def primitive_array(buf: bytes, pos: int) -> tuple[list[Any], int]:
        n, pos = read_count(buf, pos, min_size=size)
        values = list(struct.unpack_from(f">{n}{code}", buf, pos))
        if element_kind == "char":
            values = [REPLACEMENT_CHARACTER if 0xD800 <= c <= 0xDFFF else chr(c) for c in values]
        return values, pos + n * size

    return primitive_array


def _struct_decoder(desc: TypeDescriptor, unpickle: bool) -> Decoder:
    names = [n for n, _ in desc.fields]
    decoders = [build_decoder(t, unpickle=unpickle) for _, t in desc.fields]
    pairs = list(zip(names, decoders))
    kind = desc.kind
    if kind == "tuple":
        return fields_decoder(pairs)
    if kind == "either":
        left, right = decoders

        def either(buf: bytes, pos: int) -> tuple[dict[str, Any], int]:
            if buf[pos]:
                value, pos = left(buf, pos + 1)
                return {"left": value, "right": None}, pos
            value, pos = right(buf, pos + 1)
            return {"left": None, "right": value}, pos

        return either
    if kind == "pojo":
        base = desc.attr("base_fields", len(pairs))
        own, extra = pairs[:base], [name for name, _ in pairs[base:]]
        subclass = _pojo_subclasses(desc, names, unpickle)

        def pojo(buf: bytes, pos: int) -> tuple[dict[str, Any] | None, int]:
            flags = buf[pos]
            pos += 1
            if flags & POJO_NULL:
                return None, pos
            if not flags & POJO_EXACT:
                return subclass(buf, pos, flags)
            out: dict[str, Any] = {}
            for name, decode in own:
                if buf[pos]:
                    out[name] = None
                    pos += 1
                else:
                    out[name], pos = decode(buf, pos + 1)
            for name in extra:
                out[name] = None
            return out, pos

        return pojo
    return masked_fields_decoder(pairs, ROW_KIND_BITS if desc.attr("row_kind", False) else 0)


def _pojo_subclasses(
    desc: TypeDescriptor, names: list[str], unpickle: bool
) -> Callable[[bytes, int, int], tuple[dict[str, Any] | None, int]]:
    """A POJO subclass instance: a tag (registered subclass) or the class name (writeUTF), then
    the subclass serializer's bytes; its fields fill the POJO's columns."""
    tagged: dict[int, TypeDescriptor] = {}
    named: dict[str, TypeDescriptor] = {}
    for sub, tag, doc in json.loads(desc.attr("subclasses") or "[]"):
        sub_desc = TypeDescriptor.from_json(doc)
        named[sub] = sub_desc
        if tag is not None:
            tagged[tag] = sub_desc
    decoders: dict[int, Decoder] = {}

    def subclass(buf: bytes, pos: int, flags: int) -> tuple[dict[str, Any] | None, int]:
        if flags & POJO_TAGGED:
            tag = buf[pos]
            pos += 1
            sub_desc = tagged.get(tag)
            if sub_desc is None:
                raise DecodeError(f"POJO {desc.attr('class')} subclass tag {tag} is not a registered subclass")
        elif flags & POJO_SUBCLASS:
            (length,) = _BE_U16(buf, pos)
            name = buf[pos + 2 : pos + 2 + length].decode("utf-8", "replace")
            pos += 2 + length
            sub_desc = named.get(name)
            if sub_desc is None:
                raise DecodeError(
                    f"a subclass instance of POJO {desc.attr('class')} of a class ({name}) its snapshot has no serializer for"
                )
        else:
            raise DecodeError(f"POJO flags 0x{flags:02x}: expected null, exact or subclass")
        decode = decoders.get(id(sub_desc))
        if decode is None:
            decode = decoders[id(sub_desc)] = build_decoder(sub_desc, unpickle=unpickle)
        value, pos = decode(buf, pos)
        if value is None:
            return None, pos
        return {name: value.get(name) for name in names}, pos

    return subclass


def fields_decoder(pairs: list[tuple[str, Decoder]]) -> Decoder:
    """Fields written one after the other, no null support (Tuple)."""

    def fields(buf: bytes, pos: int) -> tuple[dict[str, Any], int]:
        out = {}
        for name, decode in pairs:
            out[name], pos = decode(buf, pos)
        return out, pos

    return fields


def masked_fields_decoder(pairs: list[tuple[str, Decoder]], skip_bits: int) -> Decoder:
    """Row: a null mask (MSB first, after ``skip_bits`` RowKind bits), then the non-null fields."""
    mask_bytes = (len(pairs) + skip_bits + 7) // 8
    bit_positions = [(((i + skip_bits) // 8), 0x80 >> ((i + skip_bits) % 8)) for i in range(len(pairs))]

    def row(buf: bytes, pos: int) -> tuple[dict[str, Any], int]:
        mask_at = pos
        pos += mask_bytes
        out: dict[str, Any] = {}
        for (name, decode), (byte, bit) in zip(pairs, bit_positions):
            if buf[mask_at + byte] & bit:
                out[name] = None
            else:
                out[name], pos = decode(buf, pos)
        return out, pos

    return row


def _pickled(unpickle: bool, strict: bool = False) -> Decoder:
    def pickled(buf: bytes, pos: int) -> tuple[str, int]:
        data, pos = _framed_bytes(buf, pos)
        if strict and unpickle:
            check_pickle_header(data)
        return render_pickled(data, unpickle), pos

    return pickled


PICKLE_PROTO = 0x80  # PROTO opcode: every pickle of protocol 2 or later starts with it
PICKLE_FRAME = 0x95  # FRAME opcode (protocol 4+): an 8-byte little-endian length follows
PICKLE_STOP = 0x2E  # STOP opcode: the last byte of every pickle


def check_pickle_header(data: bytes) -> None:
    """Raises unless ``data`` is framed like ``pickle.dumps`` output: PROTO 2..5, a first FRAME that
    fits, STOP at the end. Thread-mode byte[] values are taken for pickles from the job's shape, so
    a value that is not one is an error, never unpickled."""
    ok = len(data) >= 4 and data[0] == PICKLE_PROTO and 2 <= data[1] <= 5 and data[-1] == PICKLE_STOP
    if ok and data[2] == PICKLE_FRAME:
        ok = len(data) >= 11 and 11 + int.from_bytes(data[3:11], "little") <= len(data)
    if not ok:
        raise DecodeError(
            f"a byte[] value taken for a PyFlink thread-mode pickle is not one (starts "
            f"{data[:12].hex() or 'empty'}): declare the state as BYTES in a descriptor file "
            f"(--descriptors FILE), or read without --unpickle"
        )


class _PyFlinkUnpickler(pickle.Unpickler):
    """pickle.Unpickler that reads a ``pyflink.common.Row`` (``Row.__reduce__``: ``_create_row(fields,
    values, RowKind)``) as a dict, named by field or f0, f1, ..., without pyflink installed."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "pyflink.common.types" and name == "_create_row":
            return _row_as_dict
        if module == "pyflink.common.types" and name == "RowKind":
            return int
        return super().find_class(module, name)


def _row_as_dict(fields: Sequence[str] | None, values: Sequence[Any], row_kind: int | None = None) -> dict[str, Any]:
    return dict(zip(fields, values)) if fields else {f"f{i}": v for i, v in enumerate(values)}


def render_pickled(data: bytes, unpickle: bool) -> str:
    """PyFlink pickled bytes as JSON text, only when the user opted in (unpickling runs code)."""
    if not unpickle:
        return data.hex()
    try:
        value = _PyFlinkUnpickler(io.BytesIO(data)).load()  # noqa: S301 - the user asked for it with unpickle=True
    except Exception as exc:  # noqa: BLE001 - damaged pickles fail in any way the unpickled code chooses
        raise DecodeError(f"the pickled value does not unpickle: {type(exc).__name__}: {exc}") from None
    return json.dumps(value, default=repr, sort_keys=True)


def build_key_decoder(key: TypeDescriptor) -> Decoder:
    """Keys of one-field SQL rows decode to that field (see ``key_column_type``)."""
    decoder = build_decoder(key)
    if key_column_type(key) is key:
        return decoder
    name = key.fields[0][0]

    def single(buf: bytes, pos: int) -> tuple[Any, int]:
        row, pos = decoder(buf, pos)
        return row[name], pos

    return single


def hashable(value: Any) -> Any:
    """A decoded value as a key of a dict or set: structs and lists become (nested) tuples."""
    if isinstance(value, dict):
        return tuple(sorted((k, hashable(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):  # a map's pairs are tuples, whose values may be structs
        return tuple(hashable(v) for v in value)
    return value
