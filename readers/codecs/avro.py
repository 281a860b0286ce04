"""Decoder of flink-avro's ``AvroSerializer`` values, compiled from the writer schema.

``AvroSerializer.serialize`` runs Avro's datum writer over flink-avro's ``DataOutputEncoder``,
not Avro's binary encoder, and frames nothing around it (no length, no schema fingerprint):

- null: nothing; boolean: one byte; int, long, float, double: 4 or 8 bytes big-endian (Java
  ``DataOutput``, not zig-zag varints);
- string and bytes: an i32 length, then the bytes (UTF-8 for strings); fixed: its size in bytes;
- enum: the symbol's index as an i32; union: the branch index as an i32, then the branch;
- array and map: blocks of an unsigned varint item count (7 bits a byte, least significant
  first) and the items (a map item: its string key, then the value), ended by a count of 0. The
  writer makes one block (none for an empty one), the reader takes any number.

Values come out as ``decoders`` values of the column type ``statemeta.avro.column_type`` gives:
records as dicts, maps as (key, value) pairs, dates as epoch days, timestamps as epoch
microseconds, times as text, decimals as ``Decimal`` (text beyond 38 digits), uuids as text.
Every length and count is checked against the bytes left, every index against the schema.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import Any

from statecat.readers.codecs.decoders import (
    _BE_F32,
    _BE_F64,
    _BE_I32,
    _BE_I64,
    DecodeError,
    Decoder,
    _framed_bytes,
    _string_data,
    _time_text,
    days,
    fields_decoder,
    micros,
    render_big_decimal,
    sql_decimal,
)
from statecat.readers.codecs.encoders import _field
from statecat.readers.codecs.values import (
    EncodeError,
    Encoder,
    _big_integer_bytes,
    _binary,
    _epoch_days,
    _epoch_micros,
    _fields_of,
    _millis_of_day,
    _nanos_of_day,
    _pairs,
    _ranged,
    _real,
    _sequence,
    _text,
    _unscaled,
    _utf8,
    _whole,
)
from statecat.readers.codecs.values import _boolean as _boolean_value
from statecat.statemeta.errors import UnsupportedError
from statecat.statemeta.java.avro import MAX_COLUMN_DECIMAL_PRECISION, AvroSchemaError, AvroType, parse_schema
from statecat.statemeta.types import TypeDescriptor

# DataOutputEncoder.writeVarLongCount: a non-negative long, so at most 9 full bytes and a 10th.
MAX_COUNT_VARINT_BYTES = 10
# Items of a type that takes no bytes (null, or records of nothing but nulls) cannot be bounded
# by the bytes left: a count of them beyond this is damage, not a list statecat builds.
MAX_ZERO_WIDTH_ITEMS = 1 << 20
MICROS_PER_MILLI = 1000
NANOS_PER_MICRO = 1000


def build_avro_decoder(desc: TypeDescriptor) -> Decoder:
    """The decoder of an ``avro`` descriptor (statemeta.avro), from its writer schema."""
    try:
        root = parse_schema(desc.attr("schema") or "")
    except AvroSchemaError as exc:  # a descriptor file or stateInfo edited by hand
        raise UnsupportedError(f"the Avro schema of {desc.attr('record')} cannot be decoded: {exc}") from None
    return _Compiler().decoder(root)


class _Compiler:
    def __init__(self) -> None:
        self.min_sizes: dict[int, int] = {}

    def min_size(self, t: AvroType) -> int:
        """Fewest bytes a value of ``t`` takes (schemas are acyclic: parse_schema refuses recursion)."""
        if id(t) not in self.min_sizes:
            self.min_sizes[id(t)] = self._min_size(t)
        return self.min_sizes[id(t)]

    def _min_size(self, t: AvroType) -> int:
        kind = t.kind
        if kind in _FIXED_SIZES:
            return _FIXED_SIZES[kind]
        if kind == "fixed":
            return t.size
        if kind == "record":
            return sum(self.min_size(f) for _, f in t.fields)
        if kind == "union":
            return 4 + min(self.min_size(b) for b in t.branches)
        return 1  # array and map: at least the closing 0 count

    def decoder(self, t: AvroType) -> Decoder:
        if t.logical is not None:
            return self._logical(t)
        kind = t.kind
        if kind in _PRIMITIVE_DECODERS:
            return _PRIMITIVE_DECODERS[kind]
        if kind == "fixed":
            return _fixed(t.size)
        if kind == "enum":
            return _enum(t)
        if kind == "record":
            return self._record(t)
        if kind == "array":
            assert t.items is not None  # parse_schema sets items on every array
            return _blocks(self.decoder(t.items), self.min_size(t.items), "array item")
        if kind == "map":
            assert t.items is not None  # and on every map
            value = self.decoder(t.items)

            def entry(buf: bytes, pos: int) -> tuple[tuple[str, Any], int]:
                k, pos = _string(buf, pos)
                v, pos = value(buf, pos)
                return (k, v), pos

            return _blocks(entry, 4 + self.min_size(t.items), "map entry")
        return self._union(t)

    def _record(self, t: AvroType) -> Decoder:
        return fields_decoder([(name, self.decoder(f)) for name, f in t.fields])

    def _union(self, t: AvroType) -> Decoder:
        others = [i for i, b in enumerate(t.branches) if b.kind != "null"]
        decoders = [self.decoder(b) for b in t.branches]
        count = len(t.branches)
        # The column: the one non-null branch itself, or a struct member per non-null branch.
        member = {i: f"member{m}" for m, i in enumerate(others)} if len(others) > 1 else None
        members = list(member.values()) if member else []

        def union(buf: bytes, pos: int) -> tuple[Any, int]:
            _need(buf, pos + 4)
            index = _BE_I32(buf, pos)[0]
            if not 0 <= index < count:
                raise DecodeError(f"expected an Avro union branch index in 0..{count - 1}, got {index} (at {pos})")
            value, pos = decoders[index](buf, pos + 4)
            if member is None or index not in member:
                return value, pos
            out = dict.fromkeys(members)
            out[member[index]] = value
            return out, pos

        return union

    def _logical(self, t: AvroType) -> Decoder:
        logical = t.logical or ""
        base = _fixed(t.size) if t.kind == "fixed" else _PRIMITIVE_DECODERS[t.kind]
        if logical == "decimal":
            precision, scale = t.precision, t.scale

            def decimal(buf: bytes, pos: int) -> tuple[Any, int]:
                raw, pos = base(buf, pos)
                unscaled = int.from_bytes(raw, "big", signed=True)
                if precision > MAX_COLUMN_DECIMAL_PRECISION:
                    return render_big_decimal(unscaled, scale), pos
                return sql_decimal(unscaled, precision, scale), pos

            return decimal
        if logical == "uuid" and t.kind == "fixed":
            return _mapped(base, lambda raw: str(uuid.UUID(bytes=bytes(raw))))
        if logical == "uuid":
            return base
        if logical == "date":
            return _mapped(base, days)
        if logical == "time-millis":
            return _mapped(base, lambda ms: _time_of_day(ms * MICROS_PER_MILLI))
        if logical == "time-micros":
            return _mapped(base, _time_of_day)
        if logical.endswith("-millis"):
            return _mapped(base, lambda ms: micros(ms * MICROS_PER_MILLI))
        if logical.endswith("-micros"):
            return _mapped(base, micros)
        return _mapped(base, lambda ns: micros(ns // NANOS_PER_MICRO))  # -nanos: Spark keeps microseconds


MICROS_PER_DAY = 86_400_000_000


def _time_of_day(us: int) -> str:
    if not 0 <= us < MICROS_PER_DAY:
        raise DecodeError(f"expected a time of day in 0..{MICROS_PER_DAY - 1} µs, got {us}")
    millis, rest = divmod(us, MICROS_PER_MILLI)
    return _time_text(millis, (millis % 1000) * 1_000_000 + rest * 1000)


def _mapped(base: Decoder, convert: Callable[[Any], Any]) -> Decoder:
    def mapped(buf: bytes, pos: int) -> tuple[Any, int]:
        value, pos = base(buf, pos)
        return convert(value), pos

    return mapped


def _need(buf: bytes, end: int) -> None:
    if end > len(buf):
        raise DecodeError(f"expected {end} bytes of Avro value, got {len(buf)}")


def _fixed_width(unpack: Callable[[bytes, int], tuple[Any, ...]], size: int) -> Decoder:
    def decode(buf: bytes, pos: int) -> tuple[Any, int]:
        _need(buf, pos + size)
        return unpack(buf, pos)[0], pos + size

    return decode


def _null(buf: bytes, pos: int) -> tuple[None, int]:
    return None, pos


def _boolean(buf: bytes, pos: int) -> tuple[bool, int]:
    _need(buf, pos + 1)
    return buf[pos] != 0, pos + 1  # DataInput.readBoolean: any non-zero byte is true


# Avro bytes and strings as flink-avro's DataOutputEncoder writes them: an i32 length, then the
# bytes (UTF-8 for strings), as Flink's own byte[] and StringData serializers do.
_bytes = _framed_bytes
_string = _string_data


def _fixed(size: int) -> Decoder:
    def fixed(buf: bytes, pos: int) -> tuple[bytes, int]:
        _need(buf, pos + size)
        return bytes(buf[pos : pos + size]), pos + size

    return fixed


def _enum(t: AvroType) -> Decoder:
    symbols = t.symbols

    def enum(buf: bytes, pos: int) -> tuple[str, int]:
        _need(buf, pos + 4)
        index = _BE_I32(buf, pos)[0]
        if not 0 <= index < len(symbols):
            raise DecodeError(
                f"expected a symbol index of enum {t.name} in 0..{len(symbols) - 1}, got {index} (at {pos})"
            )
        return symbols[index], pos + 4

    return enum


def _count(buf: bytes, pos: int) -> tuple[int, int]:
    """DataInputDecoder.readVarLongCount: an unsigned varint, 7 bits a byte, low bits first."""
    at = pos
    value = shift = 0
    for _ in range(MAX_COUNT_VARINT_BYTES):
        _need(buf, pos + 1)
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
    raise DecodeError(f"expected an Avro item count of at most {MAX_COUNT_VARINT_BYTES} bytes (at {at})")


def _blocks(item: Decoder, min_size: int, what: str) -> Decoder:
    def blocks(buf: bytes, pos: int) -> tuple[list[Any], int]:
        out: list[Any] = []
        while True:
            at = pos
            n, pos = _count(buf, pos)
            if n == 0:
                return out, pos
            limit = (len(buf) - pos) // min_size if min_size else MAX_ZERO_WIDTH_ITEMS - len(out)
            if n > limit:
                raise DecodeError(
                    f"expected at most {limit} Avro {what}s in the bytes left, got a count of {n} (at {at})"
                )
            for _ in range(n):
                value, pos = item(buf, pos)
                out.append(value)

    return blocks


_FIXED_SIZES = {"null": 0, "boolean": 1, "int": 4, "long": 8, "float": 4, "double": 8, "bytes": 4, "string": 4}
_PRIMITIVE_DECODERS: dict[str, Decoder] = {
    "null": _null,
    "boolean": _boolean,
    "int": _fixed_width(_BE_I32, 4),
    "long": _fixed_width(_BE_I64, 8),
    "float": _fixed_width(_BE_F32, 4),
    "double": _fixed_width(_BE_F64, 8),
    "bytes": _bytes,
    "string": _string,
}


# ----------------------------------------------------------------------------- encoder


def build_avro_encoder(desc: TypeDescriptor) -> Encoder:
    """The inverse of ``build_avro_decoder`` (for ``statecat write``): a value in the decoders'
    form or Arrow's (datetimes, dates, Decimals) → the bytes AvroSerializer writes."""
    try:
        root = parse_schema(desc.attr("schema") or "")
    except AvroSchemaError as exc:
        raise UnsupportedError(f"the Avro schema of {desc.attr('record')} cannot be encoded: {exc}") from None
    return _encoder(root)


def _encoder(t: AvroType) -> Encoder:
    if t.logical is not None:
        return _logical_encoder(t)
    kind = t.kind
    if kind in _PRIMITIVE_ENCODERS:
        return _PRIMITIVE_ENCODERS[kind]
    if kind == "fixed":
        return _fixed_encoder(t.size, f"a fixed {t.name} of {t.size} bytes")
    if kind == "enum":
        indexes = {s: i for i, s in enumerate(t.symbols)}

        def enum(value: Any, out: bytearray) -> None:
            if value.__class__ is not str or value not in indexes:
                raise EncodeError(f"a symbol of enum {t.name} ({', '.join(t.symbols)})", value)
            out += struct.pack(">i", indexes[value])

        return enum
    if kind == "record":
        pairs = [(name, _encoder(f)) for name, f in t.fields]
        names = [name for name, _ in pairs]
        keyset = frozenset(names)

        def record(value: Any, out: bytearray) -> None:
            fields = _fields_of(value, names, f"a record {t.name}", keyset)
            for name, encode in pairs:
                _field(encode, fields[name], out, f".{name}")

        return record
    if kind == "array":
        assert t.items is not None  # parse_schema sets items on every array
        item = _encoder(t.items)

        def array(value: Any, out: bytearray) -> None:
            items = _sequence(value, "an Avro array (list)")
            _write_count(len(items), out)
            for i, element in enumerate(items):
                _field(item, element, out, f"[{i}]")
            out.append(0)

        return array
    if kind == "map":
        assert t.items is not None  # and on every map
        map_value = _encoder(t.items)

        def map_(value: Any, out: bytearray) -> None:
            entries = _pairs(value, "an Avro map ((key, value) pairs or a dict)")
            _write_count(len(entries), out)
            for k, v in entries:
                _field(_encode_string, k, out, "[key]")
                _field(map_value, v, out, f"[{k!r}]")
            out.append(0)

        return map_
    return _union_encoder(t)


def _union_encoder(t: AvroType) -> Encoder:
    null_index = next((i for i, b in enumerate(t.branches) if b.kind == "null"), None)
    others = [(i, _encoder(b)) for i, b in enumerate(t.branches) if b.kind != "null"]
    members = {f"member{m}": pair for m, pair in enumerate(others)}
    keyset = frozenset(members)

    def union(value: Any, out: bytearray) -> None:
        if value is None:
            if null_index is None:
                raise EncodeError("a value of the union (it has no null branch)", value)
            out += struct.pack(">i", null_index)
            return
        if len(others) == 1:
            index, encode = others[0]
        else:
            fields = _fields_of(value, list(members), "a union struct with one member set", keyset)
            chosen = [name for name, v in fields.items() if v is not None]
            if len(chosen) != 1:
                raise EncodeError("a union struct with exactly one member set", value)
            index, encode = members[chosen[0]]
            value = fields[chosen[0]]
        out += struct.pack(">i", index)
        encode(value, out)

    return union


def _logical_encoder(t: AvroType) -> Encoder:
    logical = t.logical or ""
    what = f"an Avro {logical}"
    if logical == "decimal":
        precision, scale, size = t.precision, t.scale, t.size

        def decimal(value: Any, out: bytearray) -> None:
            if precision > MAX_COLUMN_DECIMAL_PRECISION and value.__class__ is str:
                try:
                    value = Decimal(value)
                except InvalidOperation:
                    raise EncodeError(f"{what}({precision}, {scale}) as digits", value) from None
            unscaled = _unscaled(value, precision, scale, f"{what}({precision}, {scale})")
            if t.kind == "fixed":
                out += unscaled.to_bytes(size, "big", signed=True)
            else:
                _encode_bytes(_big_integer_bytes(unscaled), out)

        return decimal
    if logical == "uuid":
        if t.kind == "string":
            return _encode_string

        def fixed_uuid(value: Any, out: bytearray) -> None:
            try:
                out += uuid.UUID(_text(value, f"{what} (text)")).bytes
            except ValueError:
                raise EncodeError(f"{what} (text of a UUID)", value) from None

        return fixed_uuid
    if logical == "date":
        return _packed(">i", lambda v: _epoch_days(v, f"{what} (epoch days or a date)"))
    if logical == "time-millis":
        return _packed(">i", lambda v: _millis_of_day(v, what))
    if logical == "time-micros":
        return _packed(">q", lambda v: _whole(_nanos_of_day(v, what), NANOS_PER_MICRO, v, what))
    utc = not logical.startswith("local-")
    if logical.endswith("-millis"):
        return _packed(">q", lambda v: _whole(_epoch_micros(v, what, utc), MICROS_PER_MILLI, v, what))
    if logical.endswith("-micros"):
        return _packed(">q", lambda v: _epoch_micros(v, what, utc))
    return _packed(">q", lambda v: _epoch_micros(v, what, utc) * NANOS_PER_MICRO)


def _packed(fmt: str, convert: Callable[[Any], int]) -> Encoder:
    pack = struct.Struct(fmt).pack

    def packed(value: Any, out: bytearray) -> None:
        out += pack(convert(value))

    return packed


def _write_count(n: int, out: bytearray) -> None:
    """DataOutputEncoder.setItemCount: nothing for 0 items, else the count as an unsigned varint."""
    if n == 0:
        return
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)


def _encode_null(value: Any, out: bytearray) -> None:
    if value is not None:
        raise EncodeError("null (an Avro null)", value)


def _encode_boolean(value: Any, out: bytearray) -> None:
    out.append(1 if _boolean_value(value, "an Avro boolean (bool)") else 0)


def _encode_bytes(value: Any, out: bytearray) -> None:
    data = _binary(value, "Avro bytes")
    out += struct.pack(">i", len(data))
    out += data


def _encode_string(value: Any, out: bytearray) -> None:
    data = _utf8(value, "an Avro string (str)")
    out += struct.pack(">i", len(data))
    out += data


def _fixed_encoder(size: int, what: str) -> Encoder:
    def fixed(value: Any, out: bytearray) -> None:
        data = _binary(value, what)
        if len(data) != size:
            raise EncodeError(what, value)
        out += data

    return fixed


def _not_none(encode: Callable[[Any], bytes], what: str) -> Encoder:
    def checked(value: Any, out: bytearray) -> None:
        if value is None:
            raise EncodeError(what, value, note="an Avro value is null only in a union with null")
        out += encode(value)

    return checked


_PRIMITIVE_ENCODERS: dict[str, Encoder] = {
    "null": _encode_null,
    "boolean": _encode_boolean,
    "int": _not_none(lambda v: struct.pack(">i", _ranged(v, -(1 << 31), (1 << 31) - 1, "an Avro int")), "an Avro int"),
    "long": _not_none(
        lambda v: struct.pack(">q", _ranged(v, -(1 << 63), (1 << 63) - 1, "an Avro long")), "an Avro long"
    ),
    "float": _not_none(lambda v: struct.pack(">f", _real(v, "an Avro float")), "an Avro float"),
    "double": _not_none(lambda v: struct.pack(">d", _real(v, "an Avro double")), "an Avro double"),
    "bytes": _encode_bytes,
    "string": _encode_string,
}
