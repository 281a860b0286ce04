"""Typed encoders, the byte-exact inverse of ``decoders`` (and of ``binary_formats`` and ``pyflink_coders``).

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
job's classes are written by ``readers.kryo_encoder``. Bytes statecat shows for a *framed* part of a
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
import operator
import re
import struct
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from numbers import Real
from typing import Any, TypeVar

from statecat.readers.binary_formats import INLINE_LENGTH_SHIFT, INLINE_MARK, MAX_INLINE_BYTES
from statecat.readers.decoders import (
    BIGINT_LENGTH_OFFSET,
    BYTE_MIN,
    EPOCH_ORDINAL,
    EXACT,
    INT_MIN,
    INTERNAL_WATERMARK,
    LATENCY_MARKER,
    LIST_ELEMENT_DELIMITER,
    LONG_MIN,
    MAX_BIG_INTEGER_BYTES,
    MAX_DAYS,
    MAX_MICROS,
    MILLIS_PER_DAY,
    MIN_DAYS,
    MIN_MICROS,
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
from statecat.readers.source_splits import (
    FILE_PENDING_MAGIC,
    KAFKA_ENUMERATOR_VERSIONS,
    KAFKA_STARTING_MARKERS,
    KAFKA_STATUS,
    KAFKA_STOPPING_MARKERS,
    SPLIT_FORMATS,
)
from statecat.statemeta.binary import MAX_UTF_BYTES, encode_modified_utf8
from statecat.statemeta.descriptors import CoderType, parse_type
from statecat.statemeta.errors import StatecatError, UnsupportedError
from statecat.statemeta.source_splits import ENUMERATOR_CODEC, SPLIT_CODEC
from statecat.statemeta.types import CEP_KINDS, STRUCT_KINDS, TypeDescriptor, key_column_type, struct_field_names

Encoder = Callable[[Any, bytearray], None]
_Out = TypeVar("_Out", bound=bytearray)  # what an encoder appends to: a bytearray, or one carrying write state
# A binary row/array field writer: (value, out, start of the enclosing structure, its slot's position).
SlotWriter = Callable[[Any, bytearray, int, int], None]

LONG_MAX = (1 << 63) - 1
SHORT_MIN = -(1 << 15)
INT_MAX = (1 << 31) - 1
MICROS_PER_SECOND = 1_000_000
MICROS_PER_MILLI = 1000
MILLIS_PER_SECOND = 1000
NANOS_PER_MICRO = 1000
NANOS_PER_MILLI = 1_000_000
NANOS_PER_SECOND = 1_000_000_000
SECONDS_PER_DAY = 86_400
MICROS_PER_DAY = SECONDS_PER_DAY * MICROS_PER_SECOND
MAX_NANOS_DIGITS = 9
MICROS_DIGITS = 6  # fraction digits of a microsecond timestamp
CHAR_MAX = 0xFFFF  # a Java char is one UTF-16 code unit
VARINT_HIGH_BIT = 0x80
MAX_REPR = 80  # characters of a refused value shown in an error
ROW_KIND_INSERT = 0  # RowKind.INSERT: what a row is written with (the decoders do not read the kind)
NULL_FLAG, NOT_NULL_FLAG = b"\x01", b"\x00"
# BigIntSerializer's short forms for the BigInteger constants ZERO, ONE and TEN (0 = null).
BIGINT_NULL = 0
BIGINT_SHORT_FORM_OF = {0: 1, 1: 2, 10: 3}
# The table runtime's binary formats.
WORD = 8
ROW_HEADER_BITS = 8  # BinaryRowData: the RowKind byte precedes the null bits
ARRAY_COUNT_BYTES = 4
INLINE_MARK_BYTE = INLINE_MARK >> INLINE_LENGTH_SHIFT  # the slot's top byte: 0x80 | length
NON_COMPACT_DECIMAL_BYTES = 16  # reserved in the variable part whatever the value's length
NON_COMPACT_TIMESTAMP_BYTES = 8  # the epoch millis; the nanos of the milli sit in the slot
MAX_COMPACT_PRECISION = 18  # DecimalData.isCompact; TimestampData.isCompact is precision <= 3
MAX_COMPACT_TIMESTAMP_PRECISION = 3
DEFAULT_TIMESTAMP_PRECISION = 6  # what binary_formats reads a TIMESTAMP without one as
ARRAY_NULL_WORD_BITS = 32  # BinaryArrayData's null bits come in 4-byte words
FLOAT_NAN = b"\x00\x00\xc0\x7f"  # Float.NaN, little-endian: BinaryArrayWriter canonicalises NaN
DOUBLE_NAN = b"\x00\x00\x00\x00\x00\x00\xf8\x7f"
# PyFlink's coders write these for a NULL LocalDate / LocalTime (pyflink coder_impl LocalDateCoderImpl).
PYFLINK_NULL_LOCAL_DATE = b"\xff\xff\xff\xff\xff\xff"
PYFLINK_NULL_LOCAL_TIME = b"\xff\xff\xff\xff\xff\xff\xff"

_BE_I8 = struct.Struct(">b").pack
_BE_I16 = struct.Struct(">h").pack
_BE_U16 = struct.Struct(">H").pack
_BE_I32 = struct.Struct(">i").pack
_BE_I64 = struct.Struct(">q").pack
_BE_F32 = struct.Struct(">f").pack
_BE_F64 = struct.Struct(">d").pack
_BE_I64_I32 = struct.Struct(">qi").pack
_BE_I32_AT = struct.Struct(">i").pack_into
_LE_I32_AT = struct.Struct("<i").pack_into
_LE_I64_AT = struct.Struct("<q").pack_into
_LE_U64_AT = struct.Struct("<Q").pack_into
_LE_I64 = struct.Struct("<q").pack
_ZEROS = bytes(NON_COMPACT_DECIMAL_BYTES)
_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_ONE_MICRO = dt.timedelta(microseconds=1)
_TIME_TEXT = re.compile(r"(\d{1,2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?")


class EncodeError(StatecatError, ValueError):
    """A value that does not fit the type it is written as: it names the value's place, what was
    expected and what was given."""

    def __init__(self, expected: str, value: Any, path: str = "", root: str = "value", note: str = "") -> None:
        self.expected, self.value, self.path, self.root, self.note = expected, value, path, root, note
        super().__init__(f"expected {expected} for {root}{path}, got {_show(value)}" + (f": {note}" if note else ""))

    def within(self, step: str) -> EncodeError:
        """The same error one level further out: ``step`` is the field, index or part it sits in."""
        return EncodeError(self.expected, self.value, step + self.path, self.root, self.note)

    def named(self, root: str) -> EncodeError:
        return EncodeError(self.expected, self.value, self.path, root, self.note)

    def __reduce__(self) -> tuple:
        return (EncodeError, (self.expected, self.value, self.path, self.root, self.note))


def _refuse(expected: str, value: Any) -> EncodeError:
    """The error for a value of the wrong type; NULL gets its own reason."""
    return EncodeError(expected, value, note="this serializer writes no NULL" if value is None else "")


def _show(value: Any) -> str:
    text = repr(value)
    if len(text) > MAX_REPR:
        text = text[: MAX_REPR - 3] + "..."
    return f"{text} ({type(value).__name__})"


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


# ----------------------------------------------------------------------------- value checks


def _integer(value: Any, expected: str) -> int:
    """An int from an int (or anything with __index__, e.g. numpy integers), never from a bool."""
    if value.__class__ is int:
        return value
    if isinstance(value, bool) or not hasattr(type(value), "__index__"):
        raise _refuse(expected, value)
    return operator.index(value)


def _ranged(value: Any, lo: int, hi: int, expected: str) -> int:
    number = _integer(value, expected)
    if not lo <= number <= hi:
        raise EncodeError(f"{expected} within {lo}..{hi}", value)
    return number


def _real(value: Any, expected: str) -> float:
    if value.__class__ is float:
        return value
    if isinstance(value, bool) or not isinstance(value, Real):
        raise _refuse(expected, value)
    return float(value)


def _text(value: Any, expected: str) -> str:
    if value.__class__ is not str:
        raise _refuse(expected, value)
    return value


def _binary(value: Any, expected: str) -> bytes:
    if value.__class__ is bytes:
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise _refuse(expected, value)


def _utf8(value: Any, expected: str) -> bytes:
    try:
        return _text(value, expected).encode("utf-8")
    except UnicodeEncodeError:
        raise EncodeError(f"{expected} (valid Unicode: no unpaired surrogates)", value) from None


def _boolean(value: Any, expected: str = "a BOOLEAN (bool)") -> bool:
    if value is True or value is False:
        return value
    raise _refuse(expected, value)


def _epoch_days(value: Any, expected: str) -> int:
    """Epoch days from days (what the decoders return) or a datetime.date (what Arrow gives)."""
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return value.toordinal() - EPOCH_ORDINAL
    if isinstance(value, dt.datetime):
        raise EncodeError(f"{expected}, a date without a time of day", value)
    return _ranged(value, MIN_DAYS, MAX_DAYS, expected)


def _epoch_micros(value: Any, expected: str, utc: bool) -> int:
    """Epoch microseconds from an int (the decoders' form) or a datetime (Arrow's).

    ``utc``: an instant (TIMESTAMP_LTZ, Instant, java.util.Date), where an aware datetime is
    converted and a naive one is read as UTC; otherwise a wall-clock TIMESTAMP, where an aware
    datetime is refused: its offset would be silently dropped."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            return (value - _EPOCH) // _ONE_MICRO
        if not utc:
            raise EncodeError(f"{expected} (a datetime without a time zone)", value)
        return (value - _EPOCH_UTC) // _ONE_MICRO
    if isinstance(value, dt.date):
        raise EncodeError(expected, value)
    return _ranged(value, MIN_MICROS, MAX_MICROS, expected)


def _whole(micros: int, unit: int, value: Any, expected: str) -> int:
    """``micros`` in a coarser ``unit``, refused when it has digits below the unit."""
    whole, rest = divmod(micros, unit)
    if rest:
        raise EncodeError(f"{expected} (no digits below its precision)", value)
    return whole


def _nanos_of_day(value: Any, expected: str) -> int:
    """A time of day from the decoders' text (HH:MM:SS[.fraction]) or a datetime.time."""
    if isinstance(value, dt.time):
        if value.tzinfo is not None:
            raise EncodeError(f"{expected} (a time without a time zone)", value)
        seconds = (value.hour * 60 + value.minute) * 60 + value.second
        return seconds * NANOS_PER_SECOND + value.microsecond * NANOS_PER_MICRO
    text = _text(value, f"{expected} (text HH:MM:SS[.fraction] or datetime.time)")
    match = _TIME_TEXT.fullmatch(text)
    if match is None:
        raise EncodeError(f"{expected} (text HH:MM:SS[.fraction] or datetime.time)", value)
    h, m, s, frac = match.groups()
    hours, minutes, seconds = int(h), int(m), int(s)
    if hours > 23 or minutes > 59 or seconds > 59:
        raise EncodeError(f"{expected} (a time of day 00:00:00 to 23:59:59.999999999)", value)
    nanos = int(frac.ljust(MAX_NANOS_DIGITS, "0")) if frac else 0
    return ((hours * 60 + minutes) * 60 + seconds) * NANOS_PER_SECOND + nanos


def _millis_of_day(value: Any, expected: str) -> int:
    nanos = _nanos_of_day(value, expected)
    if nanos % NANOS_PER_MILLI:
        raise EncodeError(f"{expected} (at most millisecond digits)", value)
    return nanos // NANOS_PER_MILLI


def _unscaled(value: Any, precision: int, scale: int, expected: str) -> int:
    """DECIMAL(precision, scale)'s unscaled integer of a Decimal or int, exactly (never rounded)."""
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise EncodeError(expected, value)
        scaled = value.scaleb(scale, EXACT)
        if scaled != scaled.to_integral_value():
            raise EncodeError(f"{expected} (at most {scale} digits after the point)", value)
        if scaled and scaled.adjusted() >= precision:  # refused before int() of a huge exponent
            raise EncodeError(f"{expected} (at most {precision} digits)", value)
        unscaled = int(scaled)
    else:
        if isinstance(value, float):  # a float is not exact: refused rather than rounded
            raise EncodeError(f"{expected} (a decimal.Decimal or int)", value)
        unscaled = _integer(value, f"{expected} (a decimal.Decimal or int)") * 10**scale
    if not -(10**precision) < unscaled < 10**precision:
        raise EncodeError(f"{expected} (at most {precision} digits)", value)
    return unscaled


def _big_integer_bytes(number: int) -> bytes:
    """Java's BigInteger.toByteArray(): minimal big-endian two's complement, at least one byte."""
    length = (number if number >= 0 else ~number).bit_length() // 8 + 1
    return number.to_bytes(length, "big", signed=True)


def _fields_of(
    value: Any, names: Sequence[str], expected: str, keyset: frozenset[str] | None = None
) -> Mapping[str, Any]:
    """A struct value: a mapping holding exactly these field names (``keyset``: them, precomputed)."""
    if value.__class__ is not dict and not isinstance(value, Mapping):
        raise _refuse(expected, value)
    keys: AbstractSet[object] = value.keys()
    if keys != (keyset if keyset is not None else set(names)):
        missing = [n for n in names if n not in value]
        extra = [str(k) for k in value if k not in names]
        what = (f"; missing {', '.join(missing)}" if missing else "") + (
            f"; unknown {', '.join(extra)}" if extra else ""
        )
        raise EncodeError(f"{expected}{what}", value)
    return value


def _pairs(value: Any, expected: str) -> list[tuple[Any, Any]]:
    """Map entries from a list of (key, value) pairs (the decoders' and Arrow's form) or a mapping."""
    if isinstance(value, Mapping):
        return list(value.items())
    if not isinstance(value, (list, tuple)):
        raise _refuse(expected, value)
    entries = []
    for i, entry in enumerate(value):
        if not isinstance(entry, (tuple, list)) or len(entry) != 2:
            raise EncodeError("a (key, value) pair", entry, f"[{i}]")
        entries.append((entry[0], entry[1]))
    return entries


def _sequence(value: Any, expected: str) -> Sequence[Any]:
    if value.__class__ is list or isinstance(value, (list, tuple)):
        return value
    raise _refuse(expected, value)


def _not_null(encode: Encoder, expected: str) -> Encoder:
    """``encode`` for a serializer that cannot write NULL: None is refused by name."""

    def checked(value: Any, out: bytearray) -> None:
        if value is None:
            raise _refuse(expected, value)
        encode(value, out)

    return checked


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
    if kind == "avro":  # flink-avro's AvroSerializer, from the writer schema (readers/avro.py)
        from statecat.readers.avro import build_avro_encoder

        return build_avro_encoder(desc)
    if kind == "kryo":  # Kryo's FieldSerializer, typed from the job's class files (readers/kryo_encoder.py)
        from statecat.readers.kryo_encoder import build_kryo_encoder

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
    if kind in CEP_KINDS or kind == "dewey_number":  # CEP's NFA state and shared buffer (readers/cep.py)
        from statecat.readers.cep import build_cep_encoder

        return build_cep_encoder(desc, lambda child: _build(child, options))
    if kind == "java_serialized":  # the stored stream, checked against its reading (readers/java_serialized.py)
        from statecat.readers.java_serialized import encode_java_serialized

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


# ----------------------------------------------------------------------------- table runtime binary formats


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
    """Writes one non-null field of a binary row or array (see ``binary_formats._field_reader``)."""
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
            out += _LE_I64(millis)
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


_ARRAY_ELEMENT_SIZES = {
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
    size = _ARRAY_ELEMENT_SIZES.get(element.kind, WORD)
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


# ----------------------------------------------------------------------------- PyFlink coders


def _pyflink_utf8(value: Any, out: bytearray) -> None:
    data = _utf8(value, "a STRING (str)")
    out += _BE_I32(len(data))
    out += data


def _pyflink_big_dec(value: Any, out: bytearray) -> None:
    """BigDecimalCoderImpl: str(Decimal) as UTF-8; the decoder gives that text back."""
    if isinstance(value, Decimal):
        value = str(value)
    text = _text(value, "a BIG_DEC (its text or decimal.Decimal)")
    try:
        Decimal(text)
    except InvalidOperation:
        raise EncodeError("a BIG_DEC (its text or decimal.Decimal)", value) from None
    _pyflink_utf8(text, out)


def _pyflink_local_date(value: Any, out: bytearray) -> None:
    if value is None:
        out += PYFLINK_NULL_LOCAL_DATE
        return
    out += _local_date_bytes(_epoch_days(value, "a LOCAL_DATE (datetime.date or epoch days)"))


def _pyflink_local_time(value: Any, out: bytearray) -> None:
    if value is None:
        out += PYFLINK_NULL_LOCAL_TIME
        return
    nanos = _nanos_of_day(value, "a LOCAL_TIME")
    if nanos % NANOS_PER_MICRO:  # PyFlink's coder writes datetime.time's microseconds
        raise EncodeError("a LOCAL_TIME (at most microsecond digits)", value)
    out += _local_time_bytes(nanos)


def _pyflink_local_datetime(value: Any, out: bytearray) -> None:
    if value is None:
        out += PYFLINK_NULL_LOCAL_DATE + PYFLINK_NULL_LOCAL_TIME
        return
    micros = _epoch_micros(value, "a LOCAL_DATETIME (epoch µs or naive datetime)", utc=False)
    days, micros_of_day = divmod(micros, MICROS_PER_DAY)
    out += _local_date_bytes(days) + _local_time_bytes(micros_of_day * NANOS_PER_MICRO)


def _pyflink_sql_date(value: Any, out: bytearray) -> None:
    out += _BE_I32(_epoch_days(value, "a SQL_DATE (datetime.date or epoch days)"))


def _pyflink_sql_time(value: Any, out: bytearray) -> None:
    out += _BE_I32(_millis_of_day(value, "a SQL_TIME"))


def _pyflink_sql_timestamp(value: Any, out: bytearray) -> None:
    expected = "a SQL_TIMESTAMP (epoch µs or naive datetime, whole milliseconds)"
    out += _BE_I64(_whole(_epoch_micros(value, expected, utc=False), MICROS_PER_MILLI, value, expected))


_PYFLINK_SCALARS: dict[str, Encoder] = {
    "BOOLEAN": _encode_boolean,
    "BYTE": _SIMPLE["byte"],
    "SHORT": _SIMPLE["short"],
    "INT": _SIMPLE["int"],
    "LONG": _SIMPLE["long"],
    "BIG_INT": _SIMPLE["long"],  # PyFlink's BIG_INT coder is its int64 coder
    "FLOAT": _SIMPLE["float"],
    "DOUBLE": _SIMPLE["double"],
    "STRING": _pyflink_utf8,
    "CHAR": _pyflink_utf8,
    "BIG_DEC": _pyflink_big_dec,
    "BYTES": _SIMPLE["bytes"],
    "SQL_DATE": _pyflink_sql_date,
    "SQL_TIME": _pyflink_sql_time,
    "SQL_TIMESTAMP": _pyflink_sql_timestamp,
    "INSTANT": _encode_instant,
    "LOCAL_DATE": _pyflink_local_date,
    "LOCAL_TIME": _pyflink_local_time,
    "LOCAL_DATETIME": _pyflink_local_datetime,
}


def coder_encoder(t: CoderType) -> Encoder:
    """The encoder of one PyFlink coder value of declared type ``t`` (inverse of ``coder_decoder``)."""
    name = t.name
    if name in _PYFLINK_SCALARS:
        return _PYFLINK_SCALARS[name]
    if name == "PICKLED":
        raise UnsupportedError(
            "no encoder for PyFlink PICKLED values: statecat shows a pickle as text (JSON or hex), "
            "which does not turn back into the pickle; a value statecat shows only as bytes is copied "
            "unchanged, it cannot be edited"
        )
    if name in ("LIST", "BASIC_ARRAY", "OBJECT_ARRAY"):
        return _generic_array(coder_encoder(t.args[0][1]))
    if name == "PRIMITIVE_ARRAY":
        return _counted(coder_encoder(t.args[0][1]))
    if name == "MAP":
        return _map(coder_encoder(t.args[0][1]), coder_encoder(t.args[1][1]))
    if name in ("TUPLE", "ROW"):
        names: Sequence[str | None] = [n for n, _ in t.args]
        if name == "TUPLE" or not all(names):
            names = struct_field_names(len(t.args))
        pairs = [(str(n), coder_encoder(ft)) for n, (_, ft) in zip(names, t.args)]
        if name == "TUPLE":
            return fields_encoder(pairs)
        return masked_fields_encoder(pairs, ROW_KIND_BITS)
    raise UnsupportedError(f"no encoder for PyFlink type {t.text()}")


def build_pyflink_encoder(desc: TypeDescriptor) -> Encoder:
    """A ``pyflink`` descriptor's bytes: Java's framing (layout) around the coder values, as
    PyFlink stores them (one coder value per byte[]; list elements separated by 0x2C)."""
    layout = desc.attr("layout")
    value = coder_encoder(parse_type(desc.attr("coder")))
    framed = _framed(value)
    if layout in ("plain", "bag_first"):
        # a bag_first value (ValueState, ReducingState, AggregatingState) is a one-element list
        return _not_null(framed, f"a PyFlink {desc.attr('coder')} value")
    if layout == "bag_all":

        def bag(values: Any, out: bytearray) -> None:
            items = _sequence(values, "a LIST of values")
            if not items:
                raise EncodeError("a non-empty LIST (Flink writes no entry for an empty list state)", values)
            for i, item in enumerate(items):
                if i:
                    out.append(LIST_ELEMENT_DELIMITER)
                _field(framed, item, out, f"[{i}]")

        return bag
    raise UnsupportedError(f"unknown PyFlink state layout {layout!r}")


# ----------------------------------------------------------------------------- FLIP-27 source splits
# The inverse of readers/source_splits.py: a decoded connector's struct is written with that
# connector's serializer; a split or enumerator state of a connector statecat does not decode is
# its stored bytes (``raw``), written back unchanged.

SPLIT_FIELDS = ("connector", "split_version", "split_id", "file", "kafka", "number_sequence", "raw", "reason")
ENUMERATOR_FIELDS = (
    "coordinator_version",
    "enumerator_version",
    "connector",
    "file",
    "kafka",
    "number_sequence",
    "raw",
    "reason",
)
FILE_SPLIT_FIELDS = (
    "split_id",
    "path",
    "offset",
    "length",
    "modification_time",
    "file_size",
    "hostnames",
    "reader_offset",
    "records_to_skip",
)
KAFKA_SPLIT_FIELDS = ("topic", "partition", "starting_offset", "stopping_offset", "starting_marker", "stopping_marker")
SPLIT_HEADER_BYTES = 8  # i32 version, i32 length (Flink 1.20, 2.x); older releases wrote no length
COORDINATOR_HEADER_BYTES = 12  # i32 coordinator serde version, i32 enumerator version, i32 length
# A URI as java.net.URI splits it (what flink-core's Path serializes): scheme, authority, path, query, fragment.
_URI = re.compile(r"(?:([A-Za-z][A-Za-z0-9+.\-]*):)?(?://([^/?#]*))?([^?#]*)(?:\?([^#]*))?(?:#(.*))?", re.S)
_HOST_PORT = re.compile(r"(.*):(\d+)", re.S)


def _int(value: Any, what: str) -> int:
    return _ranged(value, INT_MIN, INT_MAX, f"an INT ({what})")


def _nullable_string(value: str | None, out: bytearray) -> None:
    """StringUtils.writeNullableString: a presence flag, then StringValue's chars."""
    if value is None:
        out.append(0)
        return
    out.append(1)
    java_string(value, out)


def _write_path(value: Any, out: bytearray) -> None:
    """flink-core Path.serialize: the URI's scheme, user info, host, port, path, query, fragment
    (the text the decoder composes from them, parsed back)."""
    text = _text(value, "a path (URI text)")
    # every text matches (each part is optional), so the match is never None
    scheme, authority, path, query, fragment = _URI.fullmatch(text).groups()  # type: ignore[union-attr]
    user_info = host = None
    port = -1
    if authority is not None:
        user_info, _, host_port = authority.rpartition("@") if "@" in authority else (None, "", authority)
        match = _HOST_PORT.fullmatch(host_port)
        host, port = (match.group(1), int(match.group(2))) if match else (host_port, -1)
    out.append(1)  # the path is present
    for part in (scheme, user_info, host):
        _nullable_string(part, out)
    out += _BE_I32(port)
    for part in (path, query, fragment):
        _nullable_string(part, out)


def _file_split(value: Any, out: bytearray) -> None:
    """FileSourceSplitSerializer version 1."""
    split = _fields_of(value, FILE_SPLIT_FIELDS, "a FileSourceSplit")
    write_utf(split["split_id"], out, "a split id")
    _field(_write_path, split["path"], out, ".path")
    for name in ("offset", "length", "modification_time", "file_size"):
        out += _BE_I64(_long_field(split, name))
    hostnames = _sequence(split["hostnames"], "a list of hostnames")
    out += _BE_I32(len(hostnames))
    for host in hostnames:
        write_utf(host, out, "a hostname")
    if split["reader_offset"] is None and split["records_to_skip"] is None:
        out.append(0)
        return
    out.append(1)
    out += _BE_I64(_long_field(split, "reader_offset")) + _BE_I64(_long_field(split, "records_to_skip"))


def _kafka_offset(split: Mapping[str, Any], name: str, markers: Mapping[int, str | None], unset: int | None) -> int:
    """A stored Kafka offset: the number, or the marker's stored value; both must agree."""
    offset, marker = split[f"{name}_offset"], split[f"{name}_marker"]
    by_marker = {m: v for v, m in markers.items() if m is not None}
    if offset is None:
        if marker is None:
            if unset is None:
                raise EncodeError(f"a Kafka {name} offset or marker", offset, f".{name}_offset")
            return unset
        if marker not in by_marker:
            raise EncodeError(f"a Kafka {name} marker ({', '.join(by_marker)})", marker, f".{name}_marker")
        return by_marker[marker]
    number = _long_field(split, f"{name}_offset")
    if marker is not None and markers.get(number) != marker:
        raise EncodeError(f"a {name} marker that agrees with the offset {number}", marker, f".{name}_marker")
    return number


def _kafka_split(value: Any, out: bytearray) -> None:
    """KafkaPartitionSplitSerializer version 0: topic, partition, starting and stopping offset."""
    # an enumerator's (version 3) partition is a split with its assignment status
    with_status = isinstance(value, Mapping) and "status" in value
    split = _fields_of(value, KAFKA_SPLIT_FIELDS + (("status",) if with_status else ()), "a Kafka split")
    write_utf(split["topic"], out, "a Kafka topic")
    out += _BE_I32(_in_part(split, "partition", _int))
    out += _BE_I64(_kafka_offset(split, "starting", KAFKA_STARTING_MARKERS, None))
    out += _BE_I64(_kafka_offset(split, "stopping", KAFKA_STOPPING_MARKERS, LONG_MIN))


def _in_part(fields: Mapping[str, Any], name: str, check: Callable[[Any, str], int]) -> int:
    try:
        return check(fields[name], name)
    except EncodeError as exc:
        raise exc.within(f".{name}") from None


def _number_split(split_id: Any, value: Any, out: bytearray) -> None:
    """NumberSequenceSource SplitSerializer version 1: id, from, to."""
    split = _fields_of(value, ("from_value", "to_value"), "a number sequence split {from_value, to_value}")
    write_utf(split_id, out, "a split id")
    out += _BE_I64(_long_field(split, "from_value")) + _BE_I64(_long_field(split, "to_value"))


def encode_split_element(value: Any, out: bytearray) -> None:
    """One SourceReaderState element: the byte[] of version (+ length) + split, as SourceOperator stores it."""
    split = _fields_of(value, SPLIT_FIELDS, "a source split")
    connector, raw = split["connector"], split["raw"]
    if connector is None:
        _field(_framed_bytes, raw, out, ".raw")
        return
    payload = bytearray()
    if connector == "file":
        _field(_file_split, split["file"], payload, ".file")
    elif connector == "kafka":
        _field(_kafka_split, split["kafka"], payload, ".kafka")
    elif connector == "number_sequence":
        _field(
            lambda v, o: _number_split(split["split_id"], v, o), split["number_sequence"], payload, ".number_sequence"
        )
    else:
        known = ", ".join(c for c, _, _ in SPLIT_FORMATS)
        raise EncodeError(f"a connector statecat encodes ({known}) or None with the split's raw bytes", connector)
    version = _in_part(split, "split_version", _int)
    # Framed as the stored element was (decode_split's test); a new split as Flink 1.20 and 2.x frame it.
    old_unframed = (
        isinstance(raw, (bytes, bytearray))
        and len(raw) >= 4
        and not (
            len(raw) >= SPLIT_HEADER_BYTES and struct.unpack_from(">i", raw, 4)[0] == len(raw) - SPLIT_HEADER_BYTES
        )
    )
    element = _BE_I32(version) + (b"" if old_unframed else _BE_I32(len(payload))) + payload
    out += _BE_I32(len(element))
    out += element


def _file_enumerator(value: Any, out: bytearray) -> None:
    """PendingSplitsCheckpointSerializer version 1 (little-endian framing)."""
    state = _fields_of(value, ("split_version", "pending_splits", "processed_paths"), "a FileSource enumerator state")
    splits = []
    for i, split in enumerate(_sequence(state["pending_splits"], "a list of splits")):
        serialized = bytearray()
        _field(_file_split, split, serialized, f".pending_splits[{i}]")
        splits.append(bytes(serialized))
    paths = [_utf8(p, "a path") for p in _sequence(state["processed_paths"], "a list of paths")]
    header = (FILE_PENDING_MAGIC, _in_part(state, "split_version", _int), len(splits), len(paths))
    out += struct.pack("<4i", *header)
    for data in splits + paths:
        out += struct.pack("<i", len(data))
        out += data


def _kafka_enumerator(version: int) -> Encoder:
    """KafkaSourceEnumStateSerializer versions 1, 2 and 3 (as readers.source_splits reads them)."""
    status_codes = {name: code for code, name in KAFKA_STATUS.items()}

    def encode(value: Any, out: bytearray) -> None:
        state = _fields_of(
            value, ("split_version", "initial_discovery_finished", "partitions"), "a Kafka enumerator state"
        )
        partitions = _sequence(state["partitions"], "a list of partitions")
        out += _BE_I32(len(partitions))
        if version == 3:
            out += _BE_I32(_in_part(state, "split_version", _int))
        for i, partition in enumerate(partitions):
            if version == 3:
                data = bytearray()
                _field(_kafka_split, partition, data, f".partitions[{i}]")
                out += _BE_I32(len(data))
                out += data
            else:
                fields = _fields_of(partition, KAFKA_SPLIT_FIELDS + ("status",), "a Kafka partition")
                write_utf(fields["topic"], out, "a Kafka topic")
                out += _BE_I32(_in_part(fields, "partition", _int))
            if version >= 2:
                status = partition["status"] if isinstance(partition, Mapping) else None
                if status not in status_codes:
                    raise EncodeError(f"a status ({', '.join(status_codes)})", status, f".partitions[{i}].status")
                out += _BE_I32(status_codes[status])
        if version >= 2:
            out.append(1 if _boolean(state["initial_discovery_finished"]) else 0)

    return encode


def _number_enumerator(value: Any, out: bytearray) -> None:
    """NumberSequenceSource CheckpointSerializer version 1: i32 count, then the splits."""
    state = _fields_of(value, ("remaining_splits",), "a number sequence enumerator state")
    splits = _sequence(state["remaining_splits"], "a list of splits")
    out += _BE_I32(len(splits))
    for i, split in enumerate(splits):
        try:
            fields = _fields_of(split, ("split_id", "from_value", "to_value"), "a number sequence split")
            _number_split(fields["split_id"], {k: fields[k] for k in ("from_value", "to_value")}, out)
        except EncodeError as exc:
            raise exc.within(f".remaining_splits[{i}]") from None


def encode_enumerator(value: Any, out: bytearray) -> None:
    """The operator coordinator's state: SourceCoordinator's i32 serde version, i32 enumerator
    serializer version, i32 length, then the enumerator checkpoint."""
    state = _fields_of(value, ENUMERATOR_FIELDS, "a source enumerator state")
    connector, raw = state["connector"], state["raw"]
    if connector is None:
        out += _binary(raw, "the stored bytes of an enumerator statecat does not decode (raw)")
        return
    version = _in_part(state, "enumerator_version", _int)
    payload = bytearray()
    if connector == "file":
        _field(_file_enumerator, state["file"], payload, ".file")
    elif connector == "kafka" and version in KAFKA_ENUMERATOR_VERSIONS:
        _field(_kafka_enumerator(version), state["kafka"], payload, ".kafka")
    elif connector == "number_sequence":
        _field(_number_enumerator, state["number_sequence"], payload, ".number_sequence")
    else:
        raise EncodeError("a connector statecat encodes (file, kafka v1-v3, number_sequence)", connector)
    out += _BE_I32(_in_part(state, "coordinator_version", _int)) + _BE_I32(version) + _BE_I32(len(payload))
    out += payload
    if isinstance(raw, (bytes, bytearray)) and len(raw) >= COORDINATOR_HEADER_BYTES:
        # coordinator serde version 0 may carry bytes after the enumerator's: kept as stored
        stored = struct.unpack_from(">i", raw, 8)[0]
        out += raw[COORDINATOR_HEADER_BYTES + max(stored, 0) :]


def _source_split_encoder(codec: str) -> Encoder:
    encoders: dict[str, Encoder] = {SPLIT_CODEC: encode_split_element, ENUMERATOR_CODEC: encode_enumerator}
    if codec not in encoders:
        raise UnsupportedError(f"no encoder for source state codec {codec!r}")
    return encoders[codec]
