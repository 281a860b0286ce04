"""Flink's key-group assignment: which key-group (and so which subtask and byte range) holds a key.

``keyGroup = murmurHash(key.hashCode()) % maxParallelism`` with Java's ``hashCode`` of the key
object; SQL keys are BinaryRowData whose hash is MurmurHash3 (seed 42) over the row's bytes, so a
SQL key is first encoded into the binary row Flink would build for it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import mmh3

from statecat.statemeta.errors import StatecatError, UnsupportedError
from statecat.statemeta.types import TypeDescriptor, key_column_type

BINARY_ROW_HASH_SEED = 42
ROW_KIND_INSERT = 0
ROW_LENGTH_BYTES = 4  # BinaryRowDataSerializer frames the row with its length
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
    return key_grouper(key_type, max_parallelism)(value)


def key_grouper(key_type: TypeDescriptor, max_parallelism: int) -> Callable[[Any], int]:
    """``key_group_for`` of one key type, built once for many keys (a SQL key's row encoder with it)."""
    wrap = key_column_type(key_type) is not key_type
    field = key_type.fields[0][0] if wrap else None
    if key_type.kind == "rowdata":
        from statecat.readers.codecs.encoders import build_encoder

        encoder = build_encoder(key_type)

        def row_hash(value: Any) -> int:
            out = bytearray()
            try:
                encoder(value, out)
            except StatecatError as exc:
                raise UnsupportedError(
                    f"statecat cannot compute the key-group of SQL key {value!r}: {exc.message}",
                    hint="Read the state without a key filter",
                ) from None
            return mmh3.hash(bytes(out[ROW_LENGTH_BYTES:]), BINARY_ROW_HASH_SEED, signed=True)

        hash_of = row_hash
    else:

        def hash_of(value: Any) -> int:
            return java_hash(value, key_type)

    def group(value: Any) -> int:
        return murmur_hash(hash_of({field: value} if wrap else value)) % max_parallelism

    return group


def serialized_key(value: Any, key_type: TypeDescriptor) -> bytes | None:
    """The bytes Flink's key serializer writes for ``value`` (as the ``key`` column shows it), or
    None when it cannot be written (then the reader reads the key's whole key-group)."""
    from statecat.readers.codecs.encoders import build_key_encoder

    out = bytearray()
    try:
        build_key_encoder(key_type)(value, out)
    except (StatecatError, TypeError, ValueError, OverflowError, KeyError, IndexError, struct.error):
        return None
    return bytes(out)


def subtask_for_key_group(key_group: int, parallelism: int, max_parallelism: int) -> int:
    return key_group * parallelism // max_parallelism


def encode_binary_row(value: Any, desc: TypeDescriptor) -> bytes:
    """The BinaryRowData bytes Flink hashes for a SQL key (the serializer's output without its length)."""
    from statecat.readers.codecs.encoders import encode

    try:
        return encode(desc, value, what="key")[ROW_LENGTH_BYTES:]
    except StatecatError as exc:
        raise UnsupportedError(
            f"statecat cannot compute the key-group of SQL key {value!r}: {exc.message}",
            hint="Read the state without a key filter",
        ) from None
