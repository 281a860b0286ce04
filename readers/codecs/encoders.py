"""Typed encoders, the byte-exact inverse of ``decoders`` (the table runtime's formats, PyFlink's coders
and source splits have theirs beside their decoders: ``rowdata``, ``pyflink``, ``source_splits``).

An encoder is ``encode(value, out)``: it appends the bytes Flink's serializer writes for one value
to the bytearray ``out``. It is built once per type descriptor (``build_encoder``) and run per
record, like the decoders. It takes what the matching decoder returns, and also what pyarrow's
``to_pylist()`` gives for the column the reader builds (``arrow_types``): ``datetime`` for
timestamps, ``datetime.date`` for dates, ``Decimal`` for decimals, a dict or a list of pairs for
maps. A value of the wrong type, out of range, NULL where the type has no NULL, or with more digits
than the type stores is refused with an ``EncodeError`` naming the value's place
(``value.f0[2].key``), what was expected and what was given: nothing is wrapped, rounded or
truncated silently.

Serializers whose values statecat shows only as bytes (``raw``, pickles, Kryo without the job's
classes) get no encoder: such a value is copied unchanged, never edited. Kryo values typed from the
job's classes are written by ``readers.codecs.kryo_encoder``. Bytes statecat shows for a *framed* part of a
value it decodes (a table runtime RAW field, a RawValueData of an unknown type, a source split
of an unknown connector) are written back as given: they are the stored bytes.

Flink-side choices the decoded value does not record are made the way Flink's own writers make
them (each noted where it is made): a row's RowKind is INSERT, BigInteger/BigDecimal 0, 1 and 10
take the serializer's short forms, a NULL non-compact DECIMAL or TIMESTAMP field of a binary row is
a zeroed slot as RowDataSerializer writes a GenericRowData (``reserve_nulls=True``: its bytes kept
in the variable part, as generated code writes it), and a TTL value's last-access timestamp is
given explicitly (``TtlValue`` or ``ttl_timestamp``). Flink reads either form the same way.
"""

from __future__ import annotations

import datetime as dt
import json
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, TypeVar

from statecat.readers.codecs.decoders import (
    BIGINT_LENGTH_OFFSET,
    BYTE_MIN,
    EPOCH_ORDINAL,
    INT_MIN,
    INTERNAL_WATERMARK,
    LATENCY_MARKER,
    LIST_ELEMENT_DELIMITER,
    LONG_MIN,
    MAX_BIG_INTEGER_BYTES,
    MILLIS_PER_DAY,
    POJO_EXACT,
    POJO_NULL,
    POJO_SUBCLASS,
    POJO_TAGGED,
    RECORD_ATTRIBUTES,
    RECORD_WITH_TIMESTAMP,
    RECORD_WITHOUT_TIMESTAMP,
    ROW_KIND_BITS,
    STREAM_ELEMENT_TAGS,
    TIMER_TIMESTAMP_FLIP,
    TUPLE0_TEXT,
    WATERMARK,
    WATERMARK_STATUS,
)
from statecat.readers.codecs.values import (
    NANOS_PER_MICRO,
    NANOS_PER_MILLI,
    NANOS_PER_SECOND,
    EncodeError,
    Encoder,
    _big_integer_bytes,
    _binary,
    _boolean,
    _epoch_days,
    _epoch_micros,
    _fields_of,
    _integer,
    _millis_of_day,
    _nanos_of_day,
    _not_null,
    _pairs,
    _ranged,
    _real,
    _refuse,
    _sequence,
    _text,
    _unscaled,
    _utf8,
    _whole,
)
from statecat.statemeta.binary import MAX_UTF_BYTES, encode_modified_utf8
from statecat.statemeta.errors import UnsupportedError
from statecat.statemeta.types import CEP_KINDS, STRUCT_KINDS, TypeDescriptor, key_column_type

_Out = TypeVar("_Out", bound=bytearray)  # what an encoder appends to: a bytearray, or one carrying write state

LONG_MAX = (1 << 63) - 1
SHORT_MIN = -(1 << 15)
INT_MAX = (1 << 31) - 1
MICROS_PER_SECOND = 1_000_000
MICROS_PER_MILLI = 1000
MILLIS_PER_SECOND = 1000
SECONDS_PER_DAY = 86_400
MICROS_PER_DAY = SECONDS_PER_DAY * MICROS_PER_SECOND
MICROS_DIGITS = 6  # fraction digits of a microsecond timestamp
CHAR_MAX = 0xFFFF  # a Java char is one UTF-16 code unit
VARINT_HIGH_BIT = 0x80
NULL_FLAG, NOT_NULL_FLAG = b"\x01", b"\x00"
# BigIntSerializer's short forms for the BigInteger constants ZERO, ONE and TEN (0 = null).
BIGINT_NULL = 0
BIGINT_SHORT_FORM_OF = {0: 1, 1: 2, 10: 3}
MAX_COMPACT_PRECISION = 18  # DecimalData.isCompact; TimestampData.isCompact is precision <= 3
MAX_COMPACT_TIMESTAMP_PRECISION = 3

_BE_I8 = struct.Struct(">b").pack
_BE_I16 = struct.Struct(">h").pack
_BE_U16 = struct.Struct(">H").pack
_BE_I32 = struct.Struct(">i").pack
_BE_I64 = struct.Struct(">q").pack
_BE_F32 = struct.Struct(">f").pack
_BE_F64 = struct.Struct(">d").pack
_BE_I64_I32 = struct.Struct(">qi").pack
_BE_I32_AT = struct.Struct(">i").pack_into


@dataclass(frozen=True, slots=True)
class TtlValue:
    """A value of a state with TTL and its last-access timestamp (epoch ms), which Flink writes
    before it. Pass one where the descriptor has a ``ttl`` part to keep a value's own timestamp;
    a plain value gets the ``ttl_timestamp`` the encoder was built with."""

    value: Any
    last_access: int


def ttl_timestamp(data: bytes, pos: int = 0) -> int:
    """The last-access timestamp (epoch ms) of a TTL'd value's stored bytes: to keep it on rewrite."""
    return int(struct.unpack_from(">q", data, pos)[0])


# ----------------------------------------------------------------------------- Java serializers


def _fixed_integer(pack: Callable[[int], bytes], bits: int, expected: str) -> Encoder:
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1

    def encode(value: Any, out: bytearray) -> None:
        number = value if value.__class__ is int else _integer(value, expected)
        if not lo <= number <= hi:
            raise EncodeError(f"{expected} within {lo}..{hi}", value)
        out += pack(number)

    return encode


def _fixed_float(pack: Callable[[float], bytes], expected: str) -> Encoder:
    def encode(value: Any, out: bytearray) -> None:
        try:
            out += pack(_real(value, expected))
        except OverflowError:
            raise EncodeError(f"{expected} within its range", value) from None

    return encode


def _encode_boolean(value: Any, out: bytearray) -> None:
    out.append(1 if _boolean(value) else 0)


def _char_encoder(pack: Callable[[int], bytes]) -> Encoder:
    """A Java char (one UTF-16 code unit) as a u16 ``pack`` writes it."""

    def encode(value: Any, out: bytearray) -> None:
        if value.__class__ is not str or len(value) != 1 or ord(value) > CHAR_MAX:
            raise _refuse("a CHAR (one character of the Basic Multilingual Plane)", value)
        out += pack(ord(value))

    return encode


_encode_char = _char_encoder(_BE_U16)


def _write_varint(number: int, out: bytearray) -> None:
    """StringValue's varint: 7 bits per byte, least significant group first."""
    while number >= VARINT_HIGH_BIT:
        out.append((number & 0x7F) | VARINT_HIGH_BIT)
        number >>= 7
    out.append(number)


def java_string(value: Any, out: bytearray) -> None:
    """StringSerializer (StringValue.writeString): varint(length + 1), then each UTF-16 code unit
    as a varint; NULL is a single 0. Not modified UTF-8 (that is writeUTF, ``write_utf``)."""
    if value is None:
        out.append(0)
        return
    if value.__class__ is not str:
        raise EncodeError("a STRING (str)", value)
    if value.isascii():
        _write_varint(len(value) + 1, out)
        out += value.encode("ascii")
        return
    # Java strings are UTF-16: characters beyond the BMP are two units; a lone surrogate is its unit.
    data = value.encode("utf-16-be", "surrogatepass")
    units = struct.unpack(f">{len(data) // 2}H", data)
    _write_varint(len(units) + 1, out)
    for unit in units:
        if unit < VARINT_HIGH_BIT:
            out.append(unit)
        else:
            _write_varint(unit, out)


def write_utf(value: str, out: bytearray, expected: str = "a string") -> None:
    """DataOutput.writeUTF: u16 byte length, then Java's modified UTF-8 of the UTF-16 code units
    (U+0000 as C0 80, each surrogate of a pair as its own 3-byte sequence)."""
    data = encode_modified_utf8(_text(value, expected))
    if len(data) > MAX_UTF_BYTES:
        raise EncodeError(f"{expected} of at most {MAX_UTF_BYTES} modified UTF-8 bytes", value)
    out += _BE_U16(len(data))
    out += data


def _framed_bytes(value: Any, out: bytearray) -> None:
    data = _binary(value, "a BYTES value (bytes)")
    out += _BE_I32(len(data))
    out += data


def _encode_string_data(value: Any, out: bytearray) -> None:
    data = _utf8(value, "a STRING (str)")
    out += _BE_I32(len(data))
    out += data


def _write_big_integer(number: int, out: bytearray) -> None:
    """BigIntSerializer.writeBigInteger: 0, 1 and 10 take their short forms, as Flink writes the
    BigInteger constants (what BigInteger.valueOf and BigDecimal.unscaledValue give)."""
    short = BIGINT_SHORT_FORM_OF.get(number)
    if short is not None:
        out += _BE_I32(short)
        return
    data = _big_integer_bytes(number)
    if len(data) > MAX_BIG_INTEGER_BYTES:
        raise EncodeError(f"a BigInteger of at most {MAX_BIG_INTEGER_BYTES} bytes", number)
    out += _BE_I32(len(data) + BIGINT_LENGTH_OFFSET)
    out += data


def _big_integer_value(value: Any) -> int:
    """A BigInteger from its decimal text (what the decoders give) or an int."""
    expected = "a BigInteger (int or its decimal text)"
    if isinstance(value, str):  # through Decimal: int() of text refuses more than 4300 digits
        try:
            parsed = Decimal(value)
            number = int(parsed)
        except (InvalidOperation, ValueError, OverflowError):
            raise EncodeError(expected, value) from None
        if parsed != number:
            raise EncodeError(expected, value)
        return number
    return _integer(value, expected)


def _big_decimal_parts(value: Any) -> tuple[int, int]:
    """A BigDecimal's (unscaled value, scale) from Java's toPlainString text (what the decoders
    give: its digits after the point are the scale), a decimal.Decimal or an int."""
    expected = "a BigDecimal (decimal.Decimal, int or its decimal text)"
    try:
        number = Decimal(value) if isinstance(value, (str, int)) and not isinstance(value, bool) else value
    except InvalidOperation:
        raise EncodeError(expected, value) from None
    if not isinstance(number, Decimal) or not number.is_finite():
        raise EncodeError(expected, value)
    sign, digits, exponent = number.as_tuple()
    scale = -int(exponent)
    if not INT_MIN <= scale <= INT_MAX:
        raise EncodeError(f"{expected} with a 32-bit scale", value)
    return int(Decimal((sign, digits, 0))), scale


def _encode_bigint(value: Any, out: bytearray) -> None:
    """BigIntSerializer: the decoders give decimal text; ints are taken too."""
    if value is None:
        out += _BE_I32(BIGINT_NULL)
        return
    _write_big_integer(_big_integer_value(value), out)


def _encode_bigdec(value: Any, out: bytearray) -> None:
    """BigDecSerializer: the unscaled BigInteger, then the i32 scale."""
    if value is None:
        out += _BE_I32(BIGINT_NULL)
        return
    unscaled, scale = _big_decimal_parts(value)
    _write_big_integer(unscaled, out)
    out += _BE_I32(scale)


def _encode_date_millis(value: Any, out: bytearray) -> None:
    """java.util.Date (DateSerializer): epoch ms, Long.MIN_VALUE for NULL."""
    if value is None:
        out += _BE_I64(LONG_MIN)
        return
    expected = "a DATE-TIME (java.util.Date: epoch µs or datetime, whole milliseconds)"
    out += _BE_I64(_whole(_epoch_micros(value, expected, utc=True), MICROS_PER_MILLI, value, expected))


def _encode_sql_date(value: Any, out: bytearray) -> None:
    """java.sql.Date: epoch ms of the day's start (the decoders read whole days of UTC)."""
    if value is None:
        out += _BE_I64(LONG_MIN)
        return
    out += _BE_I64(_epoch_days(value, "a DATE (datetime.date or epoch days)") * MILLIS_PER_DAY)


def _encode_sql_time(value: Any, out: bytearray) -> None:
    """java.sql.Time: ms of the day on 1970-01-01."""
    if value is None:
        out += _BE_I64(LONG_MIN)
        return
    out += _BE_I64(_millis_of_day(value, "a TIME"))


def _timestamp_parts(micros: int) -> tuple[int, int]:
    """(epoch seconds, nanos of the second) of epoch microseconds, nanos in [0, 1e9)."""
    seconds, fraction = divmod(micros, MICROS_PER_SECOND)
    return seconds, fraction * NANOS_PER_MICRO


def _encode_sql_timestamp(value: Any, out: bytearray) -> None:
    """java.sql.Timestamp: getTime() (epoch ms) and getNanos() (the whole fraction of the second)."""
    if value is None:
        out += _BE_I64_I32(LONG_MIN, 0)
        return
    micros = _epoch_micros(value, "a TIMESTAMP (epoch µs or naive datetime)", utc=False)
    seconds, nanos = _timestamp_parts(micros)
    out += _BE_I64_I32(seconds * MILLIS_PER_SECOND + nanos // NANOS_PER_MILLI, nanos)


def _encode_instant(value: Any, out: bytearray) -> None:
    """java.time.Instant: epoch seconds, nanos; Long.MIN_VALUE and Integer.MIN_VALUE for NULL."""
    if value is None:
        out += _BE_I64_I32(LONG_MIN, INT_MIN)
        return
    out += _BE_I64_I32(*_timestamp_parts(_epoch_micros(value, "an INSTANT (epoch µs or datetime)", utc=True)))


def _local_date_bytes(days: int) -> bytes:
    day = dt.date.fromordinal(days + EPOCH_ORDINAL)
    return _BE_I32(day.year) + bytes((day.month, day.day))


def _local_time_bytes(nanos_of_day: int) -> bytes:
    seconds, nanos = divmod(nanos_of_day, NANOS_PER_SECOND)
    minutes, second = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    return bytes((hour, minute, second)) + _BE_I32(nanos)


# LocalDateSerializer / LocalTimeSerializer NULL forms: Integer.MIN_VALUE year + Short.MIN_VALUE,
# Byte.MIN_VALUE hour + Short.MIN_VALUE + Integer.MIN_VALUE.
_NULL_LOCAL_DATE = _BE_I32(INT_MIN) + _BE_I16(SHORT_MIN)
_NULL_LOCAL_TIME = _BE_I8(BYTE_MIN) + _BE_I16(SHORT_MIN) + _BE_I32(INT_MIN)


def _encode_local_date(value: Any, out: bytearray) -> None:
    if value is None:
        out += _NULL_LOCAL_DATE
        return
    out += _local_date_bytes(_epoch_days(value, "a LOCAL DATE (datetime.date or epoch days)"))


def _encode_local_time(value: Any, out: bytearray) -> None:
    if value is None:
        out += _NULL_LOCAL_TIME
        return
    out += _local_time_bytes(_nanos_of_day(value, "a LOCAL TIME"))


def _encode_local_datetime(value: Any, out: bytearray) -> None:
    if value is None:
        out += _NULL_LOCAL_DATE + _NULL_LOCAL_TIME
        return
    micros = _epoch_micros(value, "a LOCAL DATE-TIME (epoch µs or naive datetime)", utc=False)
    days, micros_of_day = divmod(micros, MICROS_PER_DAY)
    out += _local_date_bytes(days) + _local_time_bytes(micros_of_day * NANOS_PER_MICRO)


def _encode_tuple0(value: Any, out: bytearray) -> None:
    """Tuple0Serializer: one byte, 42."""
    if value != TUPLE0_TEXT:
        raise EncodeError(f'the empty tuple "{TUPLE0_TEXT}"', value)
    out.append(42)


def _encode_void(value: Any, out: bytearray) -> None:
    """VoidSerializer, VoidNamespaceSerializer, GlobalWindow.Serializer: one 0 byte."""
    if value is not None:
        raise EncodeError("no value (None: the type holds none)", value)
    out.append(0)


def _long_field(fields: Mapping[str, Any], name: str) -> int:
    try:
        return _ranged(fields[name], LONG_MIN, LONG_MAX, "a BIGINT (64-bit integer)")
    except EncodeError as exc:
        raise exc.within(f".{name}") from None


def _encode_time_window(value: Any, out: bytearray) -> None:
    """TimeWindow.Serializer: i64 start, i64 end (epoch ms)."""
    fields = _fields_of(value, ("start", "end"), "a TimeWindow {start, end} (epoch ms)")
    out += _BE_I64(_long_field(fields, "start")) + _BE_I64(_long_field(fields, "end"))


def _encode_count_window(value: Any, out: bytearray) -> None:
    """CountWindow.Serializer: i64 id."""
    out += _BE_I64(_long_field(_fields_of(value, ("id",), "a CountWindow {id}"), "id"))


_SIMPLE: dict[str, Encoder] = {
    "boolean": _encode_boolean,
    "byte": _fixed_integer(_BE_I8, 8, "a TINYINT (8-bit integer)"),
    "short": _fixed_integer(_BE_I16, 16, "a SMALLINT (16-bit integer)"),
    "int": _fixed_integer(_BE_I32, 32, "an INT (32-bit integer)"),
    "long": _fixed_integer(_BE_I64, 64, "a BIGINT (64-bit integer)"),
    "float": _fixed_float(_BE_F32, "a FLOAT (32-bit float)"),
    "double": _fixed_float(_BE_F64, "a DOUBLE (64-bit float)"),
    "char": _encode_char,
    "string": java_string,
    "bytes": _framed_bytes,
    "void": _encode_void,
    "tuple0": _encode_tuple0,
    "void_namespace": _encode_void,
    "global_window": _encode_void,
    "bigint": _encode_bigint,
    "bigdec": _encode_bigdec,
    "date": _encode_date_millis,
    "sql_date": _encode_sql_date,
    "sql_time": _encode_sql_time,
    "sql_timestamp": _encode_sql_timestamp,
    "instant": _encode_instant,
    "local_date": _encode_local_date,
    "local_time": _encode_local_time,
    "local_datetime": _encode_local_datetime,
    "string_data": _encode_string_data,
    "time_window": _encode_time_window,
    "count_window": _encode_count_window,
}

# Serializers whose values statecat shows only as bytes or text it cannot turn back.
_BYTES_ONLY = {
    "raw": "its serializer is one statecat does not decode",
    "pickled": "a PyFlink pickle is shown as text (JSON or hex), which does not turn back into the pickle",
}


def build_encoder(desc: TypeDescriptor, *, ttl_timestamp: int | None = None, reserve_nulls: bool = False) -> Encoder:
    """The encoder of one serializer's output: ``encode(value, out)`` appends the value's bytes to ``out``.

    ``ttl_timestamp``: the last-access timestamp (epoch ms) written before a value of a ``ttl`` part
    given plainly; a ``TtlValue`` carries its own. Without either, such a value is refused.
    ``reserve_nulls``: a NULL non-compact DECIMAL (precision > 18) or TIMESTAMP (precision > 3)
    field of a binary row keeps its bytes in the variable part, as Flink's generated code writes
    it (``writeDecimal(pos, null, p)``); False zeroes the slot only, as RowDataSerializer does for
    a GenericRowData. Flink reads both the same (the null bit decides).
    """
    return _build(desc, _Options(ttl_timestamp, reserve_nulls))


@dataclass(frozen=True)
class _Options:
    ttl_timestamp: int | None
    reserve_nulls: bool


def _build(desc: TypeDescriptor, options: _Options) -> Encoder:
    encoder = _build_kind(desc, options)
    if desc.kind in STRUCT_KINDS and not desc.fields:
        return _empty_row(encoder)
    return encoder


def _empty_row(encoder: Encoder) -> Encoder:
    """A row of no fields, read as ``"()"`` (decoders._empty_row)."""

    def empty_row(value: Any, out: bytearray) -> None:
        if value != TUPLE0_TEXT:
            raise EncodeError(f'the empty row "{TUPLE0_TEXT}"', value)
        encoder({}, out)

    return empty_row


def _build_kind(desc: TypeDescriptor, options: _Options) -> Encoder:
    from statecat.readers.codecs.pyflink import build_pyflink_encoder
    from statecat.readers.codecs.rowdata import _binary_structure, _fixed_row_fast_path
    from statecat.readers.codecs.source_splits import _source_split_encoder

    kind = desc.kind
    simple = _SIMPLE.get(kind)
    if simple is not None:
        return simple
    if kind in _BYTES_ONLY:
        what = desc.attr("serializer") or kind
        raise UnsupportedError(
            f"no encoder for {what}: {_BYTES_ONLY[kind]}; a value statecat shows only as bytes is "
            f"copied unchanged, it cannot be edited" + (f" ({desc.attr('reason')})" if desc.attr("reason") else "")
        )
    if desc.attr("codec") is not None:  # FLIP-27 source splits and enumerator state
        return _source_split_encoder(desc.attr("codec"))
    if kind in ("tuple", "either", "row", "pojo"):
        return _struct_encoder(desc, options)
    if kind == "nullable":
        return _nullable(_build(desc.fields[0][1], options), desc.attr("padding", 0))
    if kind == "ttl":
        return _ttl(_build(desc.fields[0][1], options), options.ttl_timestamp)
    if kind == "external":
        return _build(desc.fields[0][1], options)
    if kind == "avro":  # flink-avro's AvroSerializer, from the writer schema (readers/codecs/avro.py)
        from statecat.readers.codecs.avro import build_avro_encoder

        return build_avro_encoder(desc)
    if kind == "kryo":  # Kryo's FieldSerializer, typed from the job's class files (readers/codecs/kryo_encoder.py)
        from statecat.readers.codecs.kryo_encoder import build_kryo_encoder

        return build_kryo_encoder(desc)
    if kind == "raw_value":
        inner_desc = desc.fields[0][1]
        return _not_null(
            _framed_bytes if inner_desc.raw_reasons() else _framed(_build(inner_desc, options)), "a RAW value"
        )
    if kind == "list":
        return _counted(_build(desc.fields[0][1], options))
    if kind == "primitive_array":  # its element encoders refuse NULL, as Java's primitive arrays hold none
        return _counted(_build(desc.fields[0][1], options))
    if kind == "string_array":
        return _counted(java_string)
    if kind == "generic_array":
        return _generic_array(_build(desc.fields[0][1], options))
    if kind == "map":
        return _map(_build(desc.child("key"), options), _build(desc.child("value"), options))
    if kind == "enum":
        return _enum(desc)
    if kind == "decimal_data":
        return _decimal_data(desc.attr("precision"), desc.attr("scale"))
    if kind == "timestamp_data":
        return _timestamp_data(desc.attr("precision"))
    if kind in ("rowdata", "array_data", "map_data"):
        framed = _framed(_binary_structure(desc, options.reserve_nulls))
        if kind == "rowdata":
            return _fixed_row_fast_path(desc, framed) or framed
        return framed
    if kind == "pyflink":
        return build_pyflink_encoder(desc)
    if kind == "broadcast_entry":
        key, value = _build(desc.child("key"), options), _build(desc.child("value"), options)

        def entry(value_: Any, out: bytearray) -> None:
            fields = _fields_of(value_, ("key", "value"), "a broadcast state entry {key, value}")
            _field(key, fields["key"], out, ".key")
            _field(value, fields["value"], out, ".value")

        return entry
    if kind == "stream_element":
        return _stream_element_encoder(_build(desc.child("value"), options))
    if kind in CEP_KINDS or kind == "dewey_number":  # CEP's NFA state and shared buffer (readers/codecs/cep.py)
        from statecat.readers.codecs.cep import build_cep_encoder

        return build_cep_encoder(desc, lambda child: _build(child, options))
    if kind == "java_serialized":  # the stored stream, checked against its reading (readers/codecs/java_serialized.py)
        from statecat.readers.codecs.java_serialized import encode_java_serialized

        return encode_java_serialized
    if kind == "timer":
        raise UnsupportedError("a timer is encoded with build_timer_encoder(key type, namespace type)")
    raise UnsupportedError(f"no encoder for type {desc.describe()}")


_STREAM_ELEMENT_FIELDS = ("element", "timestamp", "value", "status", "detail")
_STREAM_ELEMENTS = sorted(set(STREAM_ELEMENT_TAGS.values()))


def _stream_element_encoder(value_encoder: Encoder) -> Encoder:
    """StreamElementSerializer (decoders.stream_element_decoder): the tag the element and its fields say."""

    def element(value: Any, out: bytearray) -> None:
        fields = _fields_of(
            value, _STREAM_ELEMENT_FIELDS, "a stream element {element, timestamp, value, status, detail}"
        )
        kind, timestamp = fields["element"], fields["timestamp"]
        if kind == "record":
            if timestamp is None:
                out.append(RECORD_WITHOUT_TIMESTAMP)
            else:
                out.append(RECORD_WITH_TIMESTAMP)
                out += _BE_I64(_ranged(timestamp, LONG_MIN, LONG_MAX, "a record timestamp (BIGINT)"))
            _field(value_encoder, fields["value"], out, ".value")
        elif kind == "watermark":
            out.append(WATERMARK)
            out += _BE_I64(_ranged(timestamp, LONG_MIN, LONG_MAX, "a watermark timestamp (BIGINT)"))
        elif kind == "internal_watermark":
            out.append(INTERNAL_WATERMARK)
            out += _BE_I32(_ranged(fields["status"], INT_MIN, INT_MAX, "the subpartition (INT) as status"))
            out += _BE_I64(_ranged(timestamp, LONG_MIN, LONG_MAX, "a watermark timestamp (BIGINT)"))
        elif kind == "watermark_status":
            out.append(WATERMARK_STATUS)
            out += _BE_I32(_ranged(fields["status"], INT_MIN, INT_MAX, "a watermark status (INT)"))
        elif kind == "latency_marker":
            detail = _json_object(fields["detail"], ("operator_lower", "operator_upper", "subtask"))
            out.append(LATENCY_MARKER)
            out += _BE_I64(_ranged(timestamp, LONG_MIN, LONG_MAX, "a latency marker's time (BIGINT)"))
            for name in ("operator_lower", "operator_upper"):
                out += _BE_I64(_ranged(detail[name], LONG_MIN, LONG_MAX, f"{name} (BIGINT)"))
            out += _BE_I32(_ranged(detail["subtask"], INT_MIN, INT_MAX, "subtask (INT)"))
        elif kind == "record_attributes":
            detail = _json_object(fields["detail"], ("backlog",))
            if not isinstance(detail["backlog"], bool):
                raise EncodeError('detail {"backlog": true or false}', fields["detail"])
            out.append(RECORD_ATTRIBUTES)
            out.append(1 if detail["backlog"] else 0)
        else:
            raise EncodeError(f"element one of {', '.join(_STREAM_ELEMENTS)}", kind)

    return element


def _json_object(text: Any, names: Sequence[str]) -> dict[str, Any]:
    try:
        parsed = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict) or set(parsed) != set(names):
        raise EncodeError(f"detail as a JSON object of {', '.join(names)}", text)
    return parsed


def _field(encode: Callable[[Any, _Out], None], value: Any, out: _Out, step: str) -> None:
    try:
        encode(value, out)
    except EncodeError as exc:
        raise exc.within(step) from None


def encode(
    desc: TypeDescriptor,
    value: Any,
    *,
    what: str = "value",
    ttl_timestamp: int | None = None,
    reserve_nulls: bool = False,
) -> bytes:
    """One value's bytes. Builds the encoder each call: for many values, ``build_encoder`` once.
    ``what`` names the value in errors (``key``, ``namespace``, ...); the options are ``build_encoder``'s."""
    out = bytearray()
    try:
        build_encoder(desc, ttl_timestamp=ttl_timestamp, reserve_nulls=reserve_nulls)(value, out)
    except EncodeError as exc:
        raise exc.named(what) from None
    return bytes(out)


def build_key_encoder(key: TypeDescriptor) -> Encoder:
    """The inverse of ``build_key_decoder``: a key of a one-field SQL row is given as that field."""
    encoder = build_encoder(key)
    if key_column_type(key) is key:
        return encoder
    name = key.fields[0][0]

    def single(value: Any, out: bytearray) -> None:
        encoder({name: value}, out)

    return single


def build_list_state_encoder(
    element: TypeDescriptor, *, ttl_timestamp: int | None = None, reserve_nulls: bool = False
) -> Encoder:
    """A ListState's value as a savepoint stores it: the elements back to back, separated by 0x2C
    (the inverse of the scanner's list reading). NULL elements and an empty list are refused:
    Flink's ListState holds no NULL and writes no entry for an empty list."""
    encode_element = _not_null(
        build_encoder(element, ttl_timestamp=ttl_timestamp, reserve_nulls=reserve_nulls), "a list element"
    )

    def list_state(value: Any, out: bytearray) -> None:
        values = _sequence(value, "a LIST of elements")
        if not values:
            raise EncodeError("a non-empty LIST (Flink writes no entry for an empty list state)", value)
        for i, item in enumerate(values):
            if i:
                out.append(LIST_ELEMENT_DELIMITER)
            _field(encode_element, item, out, f"[{i}]")

    return list_state


def build_timer_encoder(key: TypeDescriptor, namespace: TypeDescriptor) -> Encoder:
    """A timer element (TimerSerializer): the timestamp with its sign bit flipped (so timers sort as
    unsigned bytes), the key, the namespace. The value is ``{"timestamp", "key", "namespace"}``,
    the key as the key column holds it (``build_key_encoder``)."""
    encode_key, encode_namespace = build_key_encoder(key), build_encoder(namespace)
    expected = "a timer {timestamp, key, namespace}"

    def timer(value: Any, out: bytearray) -> None:
        fields = _fields_of(value, ("timestamp", "key", "namespace"), expected)
        out += struct.pack(">Q", _long_field(fields, "timestamp") + TIMER_TIMESTAMP_FLIP)
        _field(encode_key, fields["key"], out, ".key")
        _field(encode_namespace, fields["namespace"], out, ".namespace")

    return timer


# ----------------------------------------------------------------------------- composites


def _framed(inner: Encoder) -> Encoder:
    """i32 length, then what ``inner`` writes (patched in once the length is known)."""

    def framed(value: Any, out: bytearray) -> None:
        at = len(out)
        out += b"\x00\x00\x00\x00"
        inner(value, out)
        _BE_I32_AT(out, at, len(out) - at - 4)

    return framed


def _nullable(inner: Encoder, padding: int) -> Encoder:
    """NullableSerializer: a null flag, then the value, or ``padding`` zero bytes for NULL."""
    null_form = NULL_FLAG + bytes(padding)

    def nullable(value: Any, out: bytearray) -> None:
        if value is None:
            out += null_form
            return
        out += NOT_NULL_FLAG
        inner(value, out)

    return nullable


def _ttl(inner: Encoder, default_timestamp: int | None) -> Encoder:
    def ttl(value: Any, out: bytearray) -> None:
        if isinstance(value, TtlValue):
            stamp, value = value.last_access, value.value
        elif default_timestamp is None:
            raise EncodeError(
                "a TtlValue(value, last_access) (a state with TTL stores each value's last-access "
                "timestamp; or build the encoder with ttl_timestamp=)",
                value,
            )
        else:
            stamp = default_timestamp
        out += _BE_I64(_ranged(stamp, LONG_MIN, LONG_MAX, "a last-access timestamp (epoch ms)"))
        inner(value, out)

    return ttl


def _counted(element: Encoder) -> Encoder:
    """i32 count, then the elements (ListSerializer, primitive and String arrays)."""

    def counted(value: Any, out: bytearray) -> None:
        values = _sequence(value, "a LIST (list)")
        out += _BE_I32(len(values))
        for i, item in enumerate(values):
            try:
                element(item, out)
            except EncodeError as exc:
                raise exc.within(f"[{i}]") from None

    return counted


def _generic_array(element: Encoder) -> Encoder:
    """GenericArraySerializer: i32 count, then per element a presence flag and the element."""

    def generic_array(value: Any, out: bytearray) -> None:
        values = _sequence(value, "an ARRAY (list)")
        out += _BE_I32(len(values))
        for i, item in enumerate(values):
            if item is None:
                out.append(0)
                continue
            out.append(1)
            _field(element, item, out, f"[{i}]")

    return generic_array


def _map(key: Encoder, value: Encoder) -> Encoder:
    """MapSerializer: i32 count, then per entry the key, a null flag and the value."""

    def map_(entries: Any, out: bytearray) -> None:
        pairs = _pairs(entries, "a MAP (list of (key, value) pairs or dict)")
        out += _BE_I32(len(pairs))
        for i, (k, v) in enumerate(pairs):
            _field(key, k, out, f"[{i}].key")
            if v is None:
                out += NULL_FLAG
            else:
                out += NOT_NULL_FLAG
                _field(value, v, out, f"[{i}].value")

    return map_


def _enum(desc: TypeDescriptor) -> Encoder:
    """EnumSerializer: the constant's ordinal in the serializer's (snapshot's) order."""
    ordinals = {name: i for i, name in enumerate(desc.attr("constants", ()))}
    expected = f"a constant of ENUM {desc.attr('class')} ({', '.join(ordinals)})"

    def enum(value: Any, out: bytearray) -> None:
        ordinal = ordinals.get(value) if isinstance(value, str) else None
        if ordinal is None:
            raise _refuse(expected, value)
        out += _BE_I32(ordinal)

    return enum


def _decimal_data(precision: int, scale: int) -> Encoder:
    """DecimalDataSerializer: compact (precision <= 18) an i64 unscaled, else i32 length + its bytes."""
    expected = f"a DECIMAL({precision}, {scale})"
    if precision <= MAX_COMPACT_PRECISION:

        def compact(value: Any, out: bytearray) -> None:
            out += _BE_I64(_unscaled(value, precision, scale, expected))

        return compact

    def wide(value: Any, out: bytearray) -> None:
        data = _big_integer_bytes(_unscaled(value, precision, scale, expected))
        out += _BE_I32(len(data))
        out += data

    return wide


def _timestamp_millis_nanos(value: Any, precision: int, expected: str, utc: bool) -> tuple[int, int]:
    """TimestampData's (epoch millis, nanos of the milli), refusing digits beyond ``precision``."""
    micros = _epoch_micros(value, expected, utc)
    if precision < MICROS_DIGITS:  # a finer precision holds every µs value (statecat keeps µs)
        _whole(micros, 10 ** (MICROS_DIGITS - precision), value, expected)
    millis, micros_of_milli = divmod(micros, MICROS_PER_MILLI)
    return millis, micros_of_milli * NANOS_PER_MICRO


def _timestamp_data(precision: int) -> Encoder:
    """TimestampDataSerializer: compact (precision <= 3) i64 epoch ms, else also i32 nanos of the milli."""
    expected = f"a TIMESTAMP({precision}) (epoch µs or naive datetime)"
    if precision <= MAX_COMPACT_TIMESTAMP_PRECISION:

        def compact(value: Any, out: bytearray) -> None:
            out += _BE_I64(_timestamp_millis_nanos(value, precision, expected, utc=False)[0])

        return compact

    def wide(value: Any, out: bytearray) -> None:
        out += _BE_I64_I32(*_timestamp_millis_nanos(value, precision, expected, utc=False))

    return wide


def _struct_encoder(desc: TypeDescriptor, options: _Options) -> Encoder:
    names = [n for n, _ in desc.fields]
    encoders = [_build(t, options) for _, t in desc.fields]
    kind = desc.kind
    if kind == "tuple":
        return fields_encoder(list(zip(names, encoders)), "a TUPLE")
    if kind == "either":
        left, right = encoders

        def either(value: Any, out: bytearray) -> None:
            fields = _fields_of(value, ("left", "right"), "an EITHER {left, right}")
            if (fields["left"] is None) == (fields["right"] is None):
                raise EncodeError("an EITHER with exactly one of left and right set", value)
            if fields["left"] is not None:
                out.append(1)
                _field(left, fields["left"], out, ".left")
            else:
                out.append(0)
                _field(right, fields["right"], out, ".right")

        return either
    if kind == "pojo":
        base = desc.attr("base_fields", len(names))
        pairs = list(zip(names, encoders))[:base]
        subclass_only = names[base:]  # columns of subclasses' fields (see statemeta.snapshots._pojo)
        subclass = _pojo_subclass_encoder(desc, options)
        expected = f"a POJO {desc.attr('class')} (dict of {', '.join(names)})"
        keyset = frozenset(names)

        def pojo(value: Any, out: bytearray) -> None:
            if value is None:
                out += _BE_I8(POJO_NULL)
                return
            fields = _fields_of(value, names, expected, keyset)
            if any(fields[name] is not None for name in subclass_only):
                subclass(fields, value, out)
                return
            out.append(POJO_EXACT)  # statecat writes (and reads) instances of the POJO class itself
            for name, encode_field in pairs:
                item = fields[name]
                if item is None:
                    out.append(1)
                else:
                    out.append(0)
                    _field(encode_field, item, out, f".{name}")

        return pojo
    row_kind = bool(desc.attr("row_kind", False))
    return masked_fields_encoder(list(zip(names, encoders)), ROW_KIND_BITS if row_kind else 0)


def _pojo_subclass_encoder(
    desc: TypeDescriptor, options: _Options
) -> Callable[[Mapping[str, Any], Any, bytearray], None]:
    """A POJO row with a subclass's fields set: the first subclass (registered ones first) that has
    every set field, written as Flink does: its tag or class name, then its own serializer's bytes."""
    import json

    subclasses = []
    for sub, tag, doc in json.loads(desc.attr("subclasses") or "[]"):
        sub_desc = TypeDescriptor.from_json(doc)
        subclasses.append((sub, tag, sub_desc, frozenset(n for n, _ in sub_desc.fields), _build(sub_desc, options)))

    def subclass(fields: Mapping[str, Any], value: Any, out: bytearray) -> None:
        given = {name for name, item in fields.items() if item is not None}
        for sub, tag, sub_desc, names, encode in subclasses:
            if given <= names:
                if tag is not None:
                    out += bytes((POJO_TAGGED, tag))
                else:
                    encoded = sub.encode("utf-8")
                    out.append(POJO_SUBCLASS)
                    out += len(encoded).to_bytes(2, "big") + encoded
                encode({name: fields.get(name) for name, _ in sub_desc.fields}, out)
                return
        raise EncodeError(f"fields of one subclass of POJO {desc.attr('class')} (its snapshot's subclasses)", value)

    return subclass


def fields_encoder(pairs: list[tuple[str, Encoder]], what: str = "a TUPLE") -> Encoder:
    """Fields one after the other, no null flags (Tuple)."""
    names = [n for n, _ in pairs]
    expected = f"{what} (dict of {', '.join(names)})"
    keyset = frozenset(names)

    def fields(value: Any, out: bytearray) -> None:
        given = _fields_of(value, names, expected, keyset)
        for name, encode_field in pairs:  # a NULL field is written only if its own serializer can
            _field(encode_field, given[name], out, f".{name}")

    return fields


def masked_fields_encoder(pairs: list[tuple[str, Encoder]], skip_bits: int) -> Encoder:
    """Row: a null mask (MSB first, after ``skip_bits`` RowKind bits, INSERT), then the non-null fields."""
    names = [n for n, _ in pairs]
    mask_bytes = (len(pairs) + skip_bits + 7) // 8
    bits = [((i + skip_bits) // 8, 0x80 >> ((i + skip_bits) % 8)) for i in range(len(pairs))]
    plan = [(name, encode_field, byte, bit) for (name, encode_field), (byte, bit) in zip(pairs, bits)]
    expected = f"a ROW (dict of {', '.join(names)})"
    keyset = frozenset(names)

    def row(value: Any, out: bytearray) -> None:
        given = _fields_of(value, names, expected, keyset)
        mask_at = len(out)
        out += bytes(mask_bytes)
        for name, encode_field, byte, bit in plan:
            item = given[name]
            if item is None:
                out[mask_at + byte] |= bit
            else:
                _field(encode_field, item, out, f".{name}")

    return row
