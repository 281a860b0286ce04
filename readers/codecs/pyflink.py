"""PyFlink coder bytes, both ways: the values of PyFlink ``process``-mode state (the decoders
first, then their inverse encoders).

In process mode Flink stores what PyFlink's coders wrote (``pyflink/fn_execution/coder_impl_*``)
inside Java ``byte[]`` state; a descriptor file says which coder (``statemeta/descriptors.py``).
Coder layouts (all big-endian): BOOLEAN 1 byte, BYTE/SHORT/INT/LONG/FLOAT/DOUBLE fixed width
(BIG_INT is the LONG coder), STRING/CHAR/BIG_DEC int32 length + UTF-8, BYTES and PICKLED int32
length + bytes, SQL_DATE int32 epoch days, SQL_TIME int32 millis of day, SQL_TIMESTAMP int64
millis (precision 3), INSTANT int64 seconds + int32 nanos, LOCAL_DATE int32 year + int8 month +
int8 day, LOCAL_TIME int8 h/m/s + int32 nanos, LIST/OBJECT_ARRAY int32 count + (presence byte,
value)*, PRIMITIVE_ARRAY int32 count + values, MAP int32 count + (key, null byte, value)*, TUPLE
the fields back to back, ROW a null mask (2 row-kind bits, then one bit per field, MSB first)
and the non-null fields.

How Java frames them (the descriptor's ``layout``):
  plain      one ``byte[]`` (int32 length + bytes) holding exactly one value: map keys and values;
  bag_first  a Java list of ``byte[]`` (elements joined by Flink's 0x2C list delimiter), each
             holding one or more values appended together; the state's value is the first one
             (what PyFlink's ValueState/ReducingState/AggregatingState read);
  bag_all    the same list, read as all values in order (ListState).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from decimal import Decimal, InvalidOperation
from typing import Any, cast

from statecat.readers.codecs.decoders import (
    _BE_F32,
    _BE_F64,
    _BE_I8,
    _BE_I16,
    _BE_I32,
    _BE_I64,
    _BE_U32,
    EPOCH_ORDINAL,
    LIST_ELEMENT_DELIMITER,
    ROW_KIND_BITS,
    DecodeError,
    Decoder,
    _counted,
    _fixed,
    _instant,
    _time_text,
    days,
    fields_decoder,
    masked_fields_decoder,
    micros,
    read_count,
    read_length,
    render_pickled,
    utf8_text,
)
from statecat.readers.codecs.encoders import (
    _BE_I32 as _PACK_I32,
)
from statecat.readers.codecs.encoders import (
    _BE_I64 as _PACK_I64,
)
from statecat.readers.codecs.encoders import (
    _SIMPLE,
    MICROS_PER_DAY,
    MICROS_PER_MILLI,
    _encode_boolean,
    _encode_instant,
    _field,
    _framed,
    _generic_array,
    _local_date_bytes,
    _local_time_bytes,
    _map,
    fields_encoder,
    masked_fields_encoder,
)
from statecat.readers.codecs.encoders import (
    _counted as _counted_encoder,
)
from statecat.readers.codecs.values import (
    NANOS_PER_MICRO,
    EncodeError,
    Encoder,
    _epoch_days,
    _epoch_micros,
    _millis_of_day,
    _nanos_of_day,
    _not_null,
    _sequence,
    _text,
    _whole,
)
from statecat.readers.codecs.values import (
    _utf8 as _checked_utf8,
)
from statecat.statemeta.descriptors import CoderType, parse_type
from statecat.statemeta.errors import UnsupportedError
from statecat.statemeta.types import TypeDescriptor, struct_field_names

LOCAL_DATE_NULL_YEAR = 0xFFFFFFFF
LOCAL_TIME_NULL_HOUR = 0xFF


def _boolean(buf: bytes, pos: int) -> tuple[bool, int]:
    return buf[pos] != 0, pos + 1


def _utf8(buf: bytes, pos: int) -> tuple[str, int]:
    n, pos = read_length(buf, pos, "string length")
    return utf8_text(bytes(buf[pos : pos + n])), pos + n


def _bytes(buf: bytes, pos: int) -> tuple[bytes, int]:
    n, pos = read_length(buf, pos)
    return bytes(buf[pos : pos + n]), pos + n


def _sql_date(buf: bytes, pos: int) -> tuple[int, int]:
    return days(_BE_I32(buf, pos)[0]), pos + 4


def _sql_time(buf: bytes, pos: int) -> tuple[str, int]:
    return _time_text(_BE_I32(buf, pos)[0]), pos + 4


def _sql_timestamp(buf: bytes, pos: int) -> tuple[int, int]:
    return micros(_BE_I64(buf, pos)[0] * 1000), pos + 8


def _local_date_days(buf: bytes, pos: int) -> tuple[int | None, int]:
    if _BE_U32(buf, pos)[0] == LOCAL_DATE_NULL_YEAR:
        return None, pos + 6
    year = _BE_I32(buf, pos)[0]
    return dt.date(year, buf[pos + 4], buf[pos + 5]).toordinal() - EPOCH_ORDINAL, pos + 6


def _local_time_parts(buf: bytes, pos: int) -> tuple[tuple[int, int, int, int] | None, int]:
    if buf[pos] == LOCAL_TIME_NULL_HOUR:
        return None, pos + 7
    h, m, s = buf[pos], buf[pos + 1], buf[pos + 2]
    return (h, m, s, _BE_I32(buf, pos + 3)[0]), pos + 7


def _local_time(buf: bytes, pos: int) -> tuple[str | None, int]:
    parts, pos = _local_time_parts(buf, pos)
    if parts is None:
        return None, pos
    h, m, s, nanos = parts
    text = f"{h:02d}:{m:02d}:{s:02d}"
    if nanos:
        text += "." + f"{nanos:09d}".rstrip("0")
    return text, pos


def _local_datetime(buf: bytes, pos: int) -> tuple[int | None, int]:
    epoch_days, pos = _local_date_days(buf, pos)
    parts, pos = _local_time_parts(buf, pos)
    if epoch_days is None or parts is None:
        return None, pos
    h, m, s, nanos = parts
    return micros((epoch_days * 86_400 + h * 3600 + m * 60 + s) * 1_000_000 + nanos // 1000), pos


_SCALARS: dict[str, Decoder] = {
    "BOOLEAN": _boolean,
    "BYTE": _fixed(_BE_I8, 1),
    "SHORT": _fixed(_BE_I16, 2),
    "INT": _fixed(_BE_I32, 4),
    "LONG": _fixed(_BE_I64, 8),
    "BIG_INT": _fixed(_BE_I64, 8),
    "FLOAT": _fixed(_BE_F32, 4),
    "DOUBLE": _fixed(_BE_F64, 8),
    "STRING": _utf8,
    "CHAR": _utf8,
    "BIG_DEC": _utf8,
    "BYTES": _bytes,
    "SQL_DATE": _sql_date,
    "SQL_TIME": _sql_time,
    "SQL_TIMESTAMP": _sql_timestamp,
    "INSTANT": _instant,
    "LOCAL_DATE": _local_date_days,
    "LOCAL_TIME": _local_time,
    "LOCAL_DATETIME": _local_datetime,
}


def coder_decoder(t: CoderType, *, unpickle: bool = False) -> Decoder:
    """The decoder of one PyFlink coder value of declared type ``t``."""
    name = t.name
    if name in _SCALARS:
        return _SCALARS[name]
    if name == "PICKLED":

        def pickled(buf: bytes, pos: int) -> tuple[str, int]:
            data, pos = _bytes(buf, pos)
            return render_pickled(data, unpickle), pos

        return pickled
    if name in ("LIST", "BASIC_ARRAY", "OBJECT_ARRAY"):
        element = coder_decoder(t.args[0][1], unpickle=unpickle)

        def generic_array(buf: bytes, pos: int) -> tuple[list[Any], int]:
            n, pos = read_count(buf, pos)  # each element has at least its presence byte
            out = []
            for _ in range(n):
                present = buf[pos]
                pos += 1
                if present:
                    value, pos = element(buf, pos)
                    out.append(value)
                else:
                    out.append(None)
            return out, pos

        return generic_array
    if name == "PRIMITIVE_ARRAY":
        return _counted(coder_decoder(t.args[0][1], unpickle=unpickle))
    if name == "MAP":
        key = coder_decoder(t.args[0][1], unpickle=unpickle)
        value = coder_decoder(t.args[1][1], unpickle=unpickle)

        def map_(buf: bytes, pos: int) -> tuple[list[tuple[Any, Any]], int]:
            n, pos = read_count(buf, pos, "map entry count")  # each entry has at least its null byte
            out = []
            for _ in range(n):
                k, pos = key(buf, pos)
                is_null = buf[pos]
                pos += 1
                if is_null:
                    out.append((k, None))
                else:
                    v, pos = value(buf, pos)
                    out.append((k, v))
            return out, pos

        return map_
    if name in ("TUPLE", "ROW"):
        names: Sequence[str | None] = [n for n, _ in t.args]
        if name == "TUPLE" or not all(names):
            names = struct_field_names(len(t.args))
        # all names are set: checked (all(names)) or made above
        fields = list(zip(cast(Sequence[str], names), (coder_decoder(ft, unpickle=unpickle) for _, ft in t.args)))
        return fields_decoder(fields) if name == "TUPLE" else masked_fields_decoder(fields, ROW_KIND_BITS)
    raise UnsupportedError(f"no decoder for PyFlink type {t.text()}")


def build_pyflink_decoder(desc: TypeDescriptor, *, unpickle: bool = False) -> Decoder:
    """The decoder of a ``pyflink`` descriptor: Java's framing (layout) around the coder values."""
    layout = desc.attr("layout")
    value = coder_decoder(parse_type(desc.attr("coder")), unpickle=unpickle)
    if layout == "plain":

        def plain(buf: bytes, pos: int) -> tuple[Any, int]:
            n, pos = read_length(buf, pos)
            end = pos + n
            result, stop = value(buf, pos)
            if stop != end:
                raise DecodeError(
                    f"PyFlink {desc.attr('coder')} value decoded to {stop - pos} bytes but is stored in {n}"
                )
            return result, end

        return plain
    if layout in ("bag_first", "bag_all"):
        everything = layout == "bag_all"

        def bag(buf: bytes, pos: int) -> tuple[Any, int]:
            # Java's list of byte[]: elements separated by 0x2C. A value is followed by the next
            # entry's int32 key length or a state id / end marker, whose first byte is never 0x2C
            # for real sizes, so the delimiter tells whether another element follows.
            values = []
            size = len(buf)
            while True:
                n, pos = read_length(buf, pos)
                end = pos + n
                while pos < end:
                    before = pos
                    item, pos = value(buf, pos)
                    if pos <= before:  # a value of no bytes would repeat forever
                        raise DecodeError(f"PyFlink {desc.attr('coder')} value takes no bytes")
                    values.append(item)
                if pos != end:
                    raise DecodeError(f"PyFlink {desc.attr('coder')} values overrun their byte array")
                if pos < size and buf[pos] == LIST_ELEMENT_DELIMITER:
                    pos += 1
                    continue
                break
            if everything:
                return values, pos
            return (values[0] if values else None), pos

        return bag
    raise UnsupportedError(f"unknown PyFlink state layout {layout!r}")


# ----------------------------------------------------------------------------- encoding: the inverse of the decoders above

# PyFlink's coders write these for a NULL LocalDate / LocalTime (pyflink coder_impl LocalDateCoderImpl).
PYFLINK_NULL_LOCAL_DATE = b"\xff\xff\xff\xff\xff\xff"
PYFLINK_NULL_LOCAL_TIME = b"\xff\xff\xff\xff\xff\xff\xff"


def _pyflink_utf8(value: Any, out: bytearray) -> None:
    data = _checked_utf8(value, "a STRING (str)")
    out += _PACK_I32(len(data))
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
    out += _PACK_I32(_epoch_days(value, "a SQL_DATE (datetime.date or epoch days)"))


def _pyflink_sql_time(value: Any, out: bytearray) -> None:
    out += _PACK_I32(_millis_of_day(value, "a SQL_TIME"))


def _pyflink_sql_timestamp(value: Any, out: bytearray) -> None:
    expected = "a SQL_TIMESTAMP (epoch µs or naive datetime, whole milliseconds)"
    out += _PACK_I64(_whole(_epoch_micros(value, expected, utc=False), MICROS_PER_MILLI, value, expected))


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
        return _counted_encoder(coder_encoder(t.args[0][1]))
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
