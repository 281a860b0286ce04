"""One keyed state's entries of a key-group as rows and back: what an edit reads and writes.

Rows are what ``statecat read`` shows (``key``, ``namespace``, ``value``, as pyarrow's
``to_pylist`` gives them). Entries are the canonical pairs (composite key with its key-group
prefix, value as RocksDB keeps it): one per value, list or timer, one per map entry. A row keeps
the entries it was decoded from, so rows an edit does not touch are written back byte for byte.

A state with TTL (readers/codecs/ttl.py) has a ``ttl_timestamp`` column, and an edited row is written with
the timestamps it holds after the edit, as SQL treats any column: an UPDATE that does not SET
``ttl_timestamp`` keeps each value's stored timestamp (a ListState's by position, a MapState's by
map key), ``SET ttl_timestamp = …`` writes the one given, and a value with none (an INSERT without
it, a new list element or map entry, ``ttl_timestamp`` set to NULL) gets the time of the write, as
Flink stamps a created value. Editing a value does not refresh its timestamp by itself: an edit is a
repair, not the job's write, and refreshing would keep every key a bulk UPDATE touches alive for
another TTL; ``SET ttl_timestamp = NULL`` refreshes it explicitly (the write time).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from statecat.readers.backends.framing import Entry, composite_key
from statecat.readers.backends.native_rocksdb import key_group_prefix
from statecat.readers.codecs.decoders import LIST_ELEMENT_DELIMITER, TIMER_TIMESTAMP_FLIP, hashable
from statecat.readers.codecs.ttl import TTL_COLUMN, TTL_TIMESTAMP_BYTES
from statecat.readers.keygroups import key_grouper
from statecat.readers.scans.scan import KeyedStateScanner
from statecat.statemeta.errors import UnsupportedError
from statecat.statemeta.model import OperatorMeta, StateInfo, StateMeta
from statecat.statemeta.types import TypeDescriptor, key_column_type

MAP_VALUE_NULL = b"\x01"
MAP_VALUE_PRESENT = b"\x00"


@dataclass
class StateRow:
    """A row of the state with the entries it came from (None: a row the edit created)."""

    key: Any
    namespace: Any
    value: Any
    entries: list[Entry] | None = None
    # A TTL state's timestamps (readers/codecs/ttl.py): an int (value), a list (ListState), map pairs
    # (MapState); None: the state has no TTL, or the row's values are stamped with the write time.
    ttl_timestamp: Any = None

    def as_dict(self) -> dict[str, Any]:
        row = {"key": self.key, "namespace": self.namespace, "value": self.value}
        if self.ttl_timestamp is not None:
            row[TTL_COLUMN] = self.ttl_timestamp
        return row


def _bytes_encoder(desc: TypeDescriptor, what: str, state: StateInfo) -> Callable[[Any], bytes]:
    if desc.raw_reasons():
        raise UnsupportedError(
            f"the {what} of state {state.name!r} is shown only as bytes ({'; '.join(desc.raw_reasons())}), "
            f"so it cannot be written from an edited value; its bytes are copied unchanged when not edited",
            state=state.name,
        )
    from statecat.readers.codecs.encoders import build_encoder

    encoder = build_encoder(desc)

    def encode(value: Any) -> bytes:
        out = bytearray()
        encoder(value, out)
        return bytes(out)

    return encode


class EntryCodec:
    """Decodes and encodes one keyed state's entries (built once per state, used per key-group)."""

    def __init__(self, meta: StateMeta, operator: OperatorMeta, state: StateInfo) -> None:
        self.operator = operator
        self.state = state
        self.scanner = KeyedStateScanner(meta, operator, state)
        self.kind = self.scanner.value_kind  # value | list | map | timer | element
        self.prefix_bytes = operator.key_group_prefix_bytes
        key_type = state.key_type
        self.key_type = key_type
        self.wrap_key = key_column_type(key_type) is not key_type
        namespace = state.namespace or TypeDescriptor.of("void_namespace")
        self.ambiguous = self.scanner.ambiguous
        self._encoders: dict[str, Callable[[Any], bytes]] = {}
        self._key_group: Callable[[Any], int] | None = None
        self._descs = {"key": key_type, "namespace": namespace}
        value = state.value
        self.ttl = value.kind == "ttl"
        if self.kind == "list":
            element = value.child("element")
            self.ttl = element.kind == "ttl"
            self._descs["element"] = element.fields[0][1] if self.ttl else element
        elif self.kind == "map":
            map_value = value.child("value")
            self.ttl = map_value.kind == "ttl"
            self._descs["map key"] = value.child("key")
            self._descs["map value"] = map_value.fields[0][1] if self.ttl else map_value
        elif self.kind == "value":
            self._descs["value"] = value.fields[0][1] if self.ttl else value

    def encoder(self, part: str) -> Callable[[Any], bytes]:
        encode = self._encoders.get(part)
        if encode is None:
            encode = self._encoders[part] = _bytes_encoder(self._descs[part], part, self.state)
        return encode

    def writable(self) -> None:
        """Raises when rows of this state cannot be written from values (checked before writing)."""
        if self.kind == "element":
            raise UnsupportedError(
                f"timer state {self.state.name!r} holds elements statecat cannot decode", state=self.state.name
            )
        for part in self._descs:
            self.encoder(part)

    # -- decoding

    def rows(self, key_group: int, entries: Sequence[Entry]) -> list[StateRow]:
        if not entries:
            return []
        decoded = self.scanner.decode_entries(key_group, entries).to_pylist()
        rows = []
        at = 0
        for record in decoded:
            n = len(record["value"]) if self.kind == "map" else 1
            rows.append(
                StateRow(
                    record["key"],
                    record["namespace"],
                    record["value"],
                    list(entries[at : at + n]),
                    record.get(TTL_COLUMN),
                )
            )
            at += n
        if at != len(entries):
            raise UnsupportedError(
                f"state {self.state.name!r}: {len(entries)} entries of key-group {key_group} decoded into rows "
                f"covering {at}",
                state=self.state.name,
            )
        return rows

    # -- encoding

    def key_group(self, key: Any) -> int:
        if self._key_group is None:
            self._key_group = key_grouper(self.key_type, self.operator.max_parallelism)
        return self._key_group(key)

    def composite_key(self, key_group: int, key: Any, namespace: Any) -> bytes:
        key_bytes = self.encoder("key")({self.key_type.fields[0][0]: key} if self.wrap_key else key)
        namespace_bytes = self.encoder("namespace")(namespace)
        return composite_key(key_group_prefix(key_group, self.prefix_bytes), key_bytes, namespace_bytes, self.ambiguous)

    def entries(self, key_group: int, row: StateRow) -> list[Entry]:
        """The canonical entries of ``row``; TTL timestamps are the row's ``ttl_timestamp`` where it
        gives one, else the current time, as Flink stamps a write (see the module's docstring)."""
        now = int(time.time() * 1000)
        if self.kind == "timer":
            stamp = ((row.value + TIMER_TIMESTAMP_FLIP) & ((1 << 64) - 1)).to_bytes(8, "big")
            composite = self.composite_key(key_group, row.key, row.namespace)
            prefix = key_group_prefix(key_group, self.prefix_bytes)
            # A timer's element is timestamp | key | namespace: the composite without the prefix.
            return [(prefix + stamp + composite[len(prefix) :], b"")]
        composite = self.composite_key(key_group, row.key, row.namespace)
        given = row.ttl_timestamp if self.ttl else None
        if self.kind == "value":
            payload = self.encoder("value")(row.value)
            return [(composite, _stamp(given, now) + payload if self.ttl else payload)]
        if self.kind == "list":
            if not row.value:
                return []  # Flink keeps no entry for an empty list
            if None in row.value:
                raise UnsupportedError(
                    f"list state {self.state.name!r} cannot hold a NULL element", state=self.state.name
                )
            encode = self.encoder("element")
            stamps = list(given or ())
            parts = []
            for i, element in enumerate(row.value):
                payload = encode(element)
                parts.append(_stamp(stamps[i] if i < len(stamps) else None, now) + payload if self.ttl else payload)
            return [(composite, bytes([LIST_ELEMENT_DELIMITER]).join(parts))]
        # map: one entry per map entry, ordered by the user key's bytes as RocksDB orders them
        encode_key, encode_value = self.encoder("map key"), self.encoder("map value")
        # Map keys as the ttl_timestamp column holds them (pairs; a dict once SQL built the map)
        stamp_of = {hashable(k): v for k, v in (given.items() if isinstance(given, dict) else given or ())}
        out = []
        for user_key, user_value in row.value:
            full_key = composite + encode_key(user_key)
            if user_value is None:
                out.append((full_key, MAP_VALUE_NULL))
                continue
            payload = encode_value(user_value)
            if self.ttl:
                payload = _stamp(stamp_of.get(hashable(user_key)), now) + payload
            out.append((full_key, MAP_VALUE_PRESENT + payload))
        return sorted(out)


def _stamp(timestamp: int | None, now: int) -> bytes:
    """A TtlValue's timestamp as TtlSerializer writes it (i64, big-endian)."""
    return (now if timestamp is None else timestamp).to_bytes(TTL_TIMESTAMP_BYTES, "big", signed=True)
