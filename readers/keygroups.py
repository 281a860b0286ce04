"""Flink's key-group assignment: which key-group (and so which subtask and byte range) holds a key.

``keyGroup = murmurHash(key.hashCode()) % maxParallelism`` with Java's ``hashCode`` of the key
object; SQL keys are BinaryRowData whose hash is MurmurHash3 (seed 42) over the row's bytes, so a
SQL key is first encoded into the binary row Flink would build for it.
"""

from __future__ import annotations

import struct
from decimal import Decimal
from typing import Any, cast

import mmh3

from statecat.readers.decoders import ROW_KIND_BITS
from statecat.statemeta.errors import UnsupportedError
from statecat.statemeta.types import TypeDescriptor, key_column_type

BINARY_ROW_HASH_SEED = 42
ROW_KIND_INSERT = 0
INT32_MIN = -(1 << 31)


def _int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= (1 << 31) else value


def murmur_hash(code: int) -> int:
    """Flink ``MathUtils.murmurHash(int)``: MurmurHash3 x86_32 of the int's 4 LE bytes, made non-negative."""
    h = mmh3.hash(struct.pack("<i", _int32(code)), 0, signed=True)
    if h >= 0:
        return h
    return -h if h != INT32_MIN else 0


def java_string_hash(text: str) -> int:
    h = 0
    for unit in struct.unpack(f"<{len(text.encode('utf-16-le')) // 2}H", text.encode("utf-16-le")):
        h = (31 * h + unit) & 0xFFFFFFFF
    return _int32(h)


def java_hash(value: Any, desc: TypeDescriptor) -> int:
    """Java ``hashCode()`` of a key of the given (serializer) type."""
    kind = desc.kind
    if kind in ("string", "string_data", "char"):
        return java_string_hash(str(value))
    if kind in ("int", "short", "byte"):
        return _int32(int(value))
    if kind == "long":
        v = int(value) & 0xFFFFFFFFFFFFFFFF
        return _int32(v ^ (v >> 32))
    if kind == "boolean":
        return 1231 if value else 1237
    if kind == "double":
        bits = struct.unpack(">q", struct.pack(">d", float(value)))[0] & 0xFFFFFFFFFFFFFFFF
        return _int32(bits ^ (bits >> 32))
    if kind == "float":
        return struct.unpack(">i", struct.pack(">f", float(value)))[0]
    if kind == "tuple":
        h = 0
        for i, (name, field) in enumerate(desc.fields):
            part = value[name] if isinstance(value, dict) else value[i]
            element = 0 if part is None else java_hash(part, field)
            h = element if i == 0 else _int32(31 * h + element)
        return h
    if kind == "rowdata":
        return mmh3.hash(encode_binary_row(value, desc), BINARY_ROW_HASH_SEED, signed=True)
    if kind == "row":
        # Row.hashCode (RowUtils.deepHashCodeRow): 31 * RowKind byte + the fields' deep hash, where
        # each non-array field contributes Arrays.deepHashCode([field]) = 31 + field.hashCode().
        h = 1
        for i, (name, field) in enumerate(desc.fields):
            part = value[name] if isinstance(value, dict) else value[i]
            h = _int32(31 * h + (0 if part is None else 31 + java_hash(part, field)))
        return _int32(31 * ROW_KIND_INSERT + h)
    if kind in ("nullable", "external"):
        return java_hash(value, desc.fields[0][1])
    raise UnsupportedError(
        f"statecat cannot compute the key-group of keys of type {desc.describe()}",
        hint="Read the state without a key filter",
    )


def key_group_for(value: Any, key_type: TypeDescriptor, max_parallelism: int) -> int:
    """The key-group Flink assigns ``value`` (as it appears in the ``key`` column) to."""
    if key_column_type(key_type) is not key_type:
        value = {key_type.fields[0][0]: value}
    return murmur_hash(java_hash(value, key_type)) % max_parallelism


def serialized_key(value: Any, key_type: TypeDescriptor) -> bytes | None:
    """The bytes Flink's key serializer writes for ``value`` (as the ``key`` column shows it), for
    the key types a native RocksDB read can seek to; None for other types (then the reader reads
    the key's whole key-group)."""
    if key_column_type(key_type) is not key_type:
        value = {key_type.fields[0][0]: value}
    try:
        return _serialized(value, key_type)
    except (UnsupportedError, TypeError, ValueError, OverflowError, KeyError, IndexError, struct.error):
        return None


def _serialized(value: Any, key_type: TypeDescriptor) -> bytes | None:
    kind = key_type.kind
    if kind in ("row", "tuple"):
        parts = [
            value.get(name) if isinstance(value, dict) else value[i] for i, (name, _) in enumerate(key_type.fields)
        ]
        fields = [b"" if part is None else _serialized(part, field) for part, (_, field) in zip(parts, key_type.fields)]
        if any(f is None for f in fields):
            return None
        # Casts below: no field is None (returned above).
        if kind == "tuple":
            return None if any(p is None for p in parts) else b"".join(cast("list[bytes]", fields))
        # Row: a null mask (most significant bit first, after the RowKind bits), then the fields.
        skip = ROW_KIND_BITS if key_type.attr("row_kind", False) else 0
        mask = bytearray((len(parts) + skip + 7) // 8)
        for i, part in enumerate(parts):
            if part is None:
                mask[(i + skip) // 8] |= 0x80 >> ((i + skip) % 8)
        return bytes(mask) + b"".join(cast("list[bytes]", fields))
    if kind in ("string", "string_data"):
        return _string_value(str(value))
    if kind == "long":
        return struct.pack(">q", int(value))
    if kind == "int":
        return struct.pack(">i", int(value))
    if kind == "rowdata":
        row = encode_binary_row(value, key_type)
        return struct.pack(">i", len(row)) + row
    return None


def _string_value(text: str) -> bytes:
    """StringValue.writeString: length + 1, then each UTF-16 unit, as 7-bit groups low first."""
    units = text.encode("utf-16-be")
    out = bytearray()
    for number in [len(units) // 2 + 1] + [int.from_bytes(units[i : i + 2], "big") for i in range(0, len(units), 2)]:
        while number >= 0x80:
            out.append((number & 0x7F) | 0x80)
            number >>= 7
        out.append(number)
    return bytes(out)


def subtask_for_key_group(key_group: int, parallelism: int, max_parallelism: int) -> int:
    return key_group * parallelism // max_parallelism


# ----------------------------------------------------------------------------- BinaryRowData encoding

_FIXED_FORMATS = {
    "BOOLEAN": "<?",
    "TINYINT": "<b",
    "SMALLINT": "<h",
    "INTEGER": "<i",
    "DATE": "<i",
    "BIGINT": "<q",
    "FLOAT": "<f",
    "DOUBLE": "<d",
}


def encode_binary_row(value: Any, desc: TypeDescriptor) -> bytes:
    """The BinaryRowData bytes Flink builds for a row of the given logical field types (keys only)."""
    fields = desc.fields
    arity = len(fields)
    header = ((arity + 63 + 8) // 64) * 8
    fixed = bytearray(header + 8 * arity)
    variable = bytearray()
    for i, (name, field) in enumerate(fields):
        part = value.get(name) if isinstance(value, dict) else value[i]
        slot = header + 8 * i
        if part is None:
            bit = 8 + i
            fixed[bit >> 3] |= 1 << (bit & 7)
            continue
        kind = field.kind
        if kind in _FIXED_FORMATS:
            struct.pack_into(_FIXED_FORMATS[kind], fixed, slot, part)
        elif kind in ("CHAR", "VARCHAR", "BINARY", "VARBINARY"):
            data = part.encode("utf-8") if isinstance(part, str) else bytes(part)
            if len(data) <= 7:
                fixed[slot : slot + len(data)] = data
                fixed[slot + 7] = 0x80 | len(data)
            else:
                offset = header + 8 * arity + len(variable)
                struct.pack_into("<Q", fixed, slot, (offset << 32) | len(data))
                variable += data + bytes(-len(data) % 8)
        elif kind == "DECIMAL" and field.attr("precision") <= 18:
            unscaled = int(Decimal(part).scaleb(field.attr("scale")))
            struct.pack_into("<q", fixed, slot, unscaled)
        elif kind in ("TIMESTAMP_WITHOUT_TIME_ZONE", "TIMESTAMP_WITH_LOCAL_TIME_ZONE") and field.attr("precision") <= 3:
            struct.pack_into("<q", fixed, slot, int(part) // 1000)
        else:
            raise UnsupportedError(
                f"statecat cannot compute the key-group of SQL keys with a {field.describe()} field",
                hint="Read the state without a key filter",
            )
    return bytes(fixed + variable)
