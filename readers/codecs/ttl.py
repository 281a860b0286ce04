"""State TTL's last-access timestamps: where a keyed state keeps them and the ``ttl_timestamp`` column.

A state with a ``StateTtlConfig`` is stored through Flink's ``TtlSerializer`` (flink-runtime,
``TtlStateFactory``): every user value becomes a ``TtlValue`` written as an i64 timestamp (epoch
milliseconds of the last write, or of the last read with ``OnReadAndWrite``; processing time) and
then the user value. The wrapper sits where the state keeps one value each:

* ValueState, ReducingState, AggregatingState: the value (``ttl<T>``);
* ListState: every element (``list<ttl<T>>``);
* MapState: every map value (``map<K, ttl<V>>``).

Tables of these states get a ``ttl_timestamp`` column after ``value`` holding the timestamps as
Flink stores them (BIGINT epoch milliseconds, not a TIMESTAMP: Flink's TTL clock is whatever its
``TtlTimeProvider`` gives, so the number is shown as it is): one BIGINT per row for value states, an
ARRAY<BIGINT> parallel to the list for ListStates, a MAP<K, BIGINT> with the map's keys for
MapStates (a map entry stored as null has no wrapper and so no timestamp). States without TTL keep
their columns. The decoders here return ``(timestamp, value)`` pairs; ``split`` takes them apart
into the ``value`` and ``ttl_timestamp`` columns.
"""

from __future__ import annotations

import struct
from typing import Any

from statecat.readers.codecs.decoders import DecodeError, Decoder, _counted, build_decoder, map_decoder
from statecat.statemeta.model import StateInfo
from statecat.statemeta.types import TypeDescriptor

TTL_COLUMN = "ttl_timestamp"
TTL_TIMESTAMP_BYTES = 8
_BE_I64 = struct.Struct(">q").unpack_from


def ttl_layout(state: StateInfo) -> str | None:
    """Where ``state`` keeps TTL timestamps: "value", "list" (per element), "map" (per map value),
    or None (no TTL). Follows the scanner's reading of the state's kind (``scan.KeyedStateScanner``)."""
    if state.kind != "keyed":
        return None
    value = state.value
    if state.state_type == "MAP" and value.kind == "map":
        return "map" if value.child("value").kind == "ttl" else None
    if state.state_type == "LIST" and value.kind == "list":
        return "list" if value.child("element").kind == "ttl" else None
    return "value" if value.kind == "ttl" else None


def ttl_arrow_type(state: StateInfo, layout: str) -> Any:
    """The Arrow type of the ``ttl_timestamp`` column of a state with TTL ``layout``."""
    import pyarrow as pa

    if layout == "list":
        return pa.list_(pa.int64())
    if layout == "map":
        from statecat.readers.codecs.arrow_types import arrow_type

        return pa.map_(arrow_type(state.value.child("key")), pa.int64())
    return pa.int64()


def stamped_decoder(desc: TypeDescriptor, *, unpickle: bool = False) -> Decoder:
    """The decoder of one ``ttl<T>`` (a TtlSerializer's output): ``(timestamp, value)``."""
    if desc.kind != "ttl":
        raise ValueError(f"expected a TTL-wrapped type, got {desc.describe()}")
    inner = build_decoder(desc.fields[0][1], unpickle=unpickle)

    def stamped(buf: bytes, pos: int) -> tuple[tuple[int, Any], int]:
        if pos + TTL_TIMESTAMP_BYTES > len(buf):
            raise DecodeError("TTL value shorter than its 8-byte timestamp")
        value, end = inner(buf, pos + TTL_TIMESTAMP_BYTES)
        return (_BE_I64(buf, pos)[0], value), end

    return stamped


def heap_value_decoder(state: StateInfo, layout: str, *, unpickle: bool = False) -> Decoder:
    """A TTL state's whole value as a heap checkpoint stores it (the state serializer's output: a
    ListState's ``ListSerializer`` count and elements, a MapState's ``MapSerializer`` count, keys,
    null flags and values), with the TTL parts as ``(timestamp, value)`` pairs."""
    value = state.value
    if layout == "value":
        return stamped_decoder(value, unpickle=unpickle)
    if layout == "list":
        return _counted(stamped_decoder(value.child("element"), unpickle=unpickle))
    # A null map value has no TtlValue: MapSerializer's null flag comes before the wrapper.
    return map_decoder(
        build_decoder(value.child("key"), unpickle=unpickle), stamped_decoder(value.child("value"), unpickle=unpickle)
    )


def split(layout: str, values: list) -> tuple[list, list]:
    """Decoded values with ``(timestamp, value)`` pairs in them -> (the value column, the
    ttl_timestamp column)."""
    if layout == "value":
        return [v[1] for v in values], [v[0] for v in values]
    if layout == "list":
        return [[e[1] for e in v] for v in values], [[e[0] for e in v] for v in values]
    shown, stamps = [], []
    for entries in values:
        shown.append([(k, None if v is None else v[1]) for k, v in entries])
        stamps.append([(k, None if v is None else v[0]) for k, v in entries])
    return shown, stamps


__all__ = ["TTL_COLUMN", "heap_value_decoder", "split", "stamped_decoder", "ttl_arrow_type", "ttl_layout"]
