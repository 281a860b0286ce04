"""State stream headers: the keyed and operator serialization proxies and their state meta infos.

Snapshot payloads carry no length, so one serializer statecat does not know would hide where the
rest of the header starts. The header's end is known, though (the first data offset), so the
parser recovers: it tries each plausible end for the unknown serializer and keeps the one from
which the rest of the header parses exactly to that end. The state that used it reads as raw
bytes with the class name as the reason; every other state still decodes.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field

from statecat.statemeta.binary import DataInput
from statecat.statemeta.errors import FormatError, StatecatError, UnsupportedError
from statecat.statemeta.metadata import FileStream, InlineStream, StreamHandle
from statecat.statemeta.snapshots import SnapshotReader, UnknownSnapshotError
from statecat.statemeta.storage import Storage
from statecat.statemeta.types import TypeDescriptor

SUPPORTED_KEYED_PROXY_VERSIONS = (4, 5, 6)
FIRST_KEYED_PROXY_WITH_COMPRESSION = 4
SUPPORTED_OPERATOR_PROXY_VERSIONS = (5, 6)
FIRST_OPERATOR_PROXY_WITH_COMPRESSION = 6

BACKEND_STATE_TYPES = ("KEY_VALUE", "OPERATOR", "BROADCAST", "PRIORITY_QUEUE", "KEY_VALUE_V2")
MAX_STATES = 1 << 15
MAX_OPTIONS = 1 << 10
# Bound on parse attempts while recovering past unknown serializers.
MAX_RECOVERY_ATTEMPTS = 20_000
# Longest state name / serializer key we expect when looking for where a header continues.
MAX_PLAUSIBLE_NAME = 1024

SNAPPY_STREAM_IDENTIFIER = b"\xff\x06\x00\x00sNaPpY"
KEYED_STATE_TYPE_OPTION = "KEYED_STATE_TYPE"
DISTRIBUTION_MODE_OPTION = "OPERATOR_STATE_DISTRIBUTION_MODE"


@dataclass(frozen=True)
class StateMetaInfo:
    name: str
    backend_type: str  # KEY_VALUE | OPERATOR | BROADCAST | PRIORITY_QUEUE | KEY_VALUE_V2
    options: dict[str, str]
    serializers: dict[str, TypeDescriptor]
    offset: int  # where this meta info starts in its stream, for messages


@dataclass(frozen=True)
class StreamHeader:
    kind: str  # "keyed" | "operator"
    version: int
    compressed: bool
    key: TypeDescriptor | None
    states: tuple[StateMetaInfo, ...]
    broadcast_states: tuple[StateMetaInfo, ...] = ()
    length: int = 0
    recovered: tuple[str, ...] = field(default=())  # serializers skipped by recovery, for diagnostics


class _Recover(Exception):
    """Raised inside a trial parse: the serializer starting at ``start`` could not be read."""

    def __init__(self, start: int, reason: str):
        self.start = start
        self.reason = reason


def open_stream(storage: Storage, handle: StreamHandle, start: int = 0, length: int | None = None) -> tuple[io.BufferedReader, str, int]:
    """A buffered reader positioned at ``start`` within the handle's bytes; returns (stream, name, base)."""
    if isinstance(handle, InlineStream):
        path, base = storage.metadata_path, handle.offset
    else:
        path, base = handle.path, handle.start
    raw = storage.open(path)
    raw.seek(base + start)
    return io.BufferedReader(raw, buffer_size=1 << 16), storage.display(path), base


def read_stream_bytes(storage: Storage, handle: StreamHandle, start: int, length: int) -> tuple[bytes, str, int]:
    """Reads ``length`` bytes of a handle's stream at ``start``; returns (bytes, file name, file offset)."""
    stream, name, base = open_stream(storage, handle, start)
    with stream:
        data = stream.read(length)
    if len(data) != length:
        raise FormatError(f"expected {length} bytes of state data, got {len(data)} before the end of the file",
                          file=name, offset=base + start + len(data), hint="The state file is truncated")
    return data, name, base + start


def header_end(handle: StreamHandle, offsets: list[int]) -> int:
    """Headers end where the first data begins; with no data they fill the stream."""
    starts = [o for o in offsets if o > 0]
    return min(starts) if starts else handle.size


def read_keyed_header(storage: Storage, handle: StreamHandle, offsets: list[int]) -> StreamHeader:
    end = header_end(handle, offsets)
    data, name, base = read_stream_bytes(storage, handle, 0, end)
    return _parse_with_recovery(data, name, base, _KeyedHeaderParser)


def read_operator_header(storage: Storage, handle: StreamHandle, offsets: list[int]) -> StreamHeader:
    end = header_end(handle, offsets)
    data, name, base = read_stream_bytes(storage, handle, 0, end)
    return _parse_with_recovery(data, name, base, _OperatorHeaderParser)


def _parse_with_recovery(data: bytes, name: str, base: int, parser_class) -> StreamHeader:
    attempts = [0]

    def attempt(skips: dict[int, tuple[int, str]]) -> StreamHeader:
        attempts[0] += 1
        if attempts[0] > MAX_RECOVERY_ATTEMPTS:
            raise UnsupportedError("could not find where an unknown serializer snapshot ends in this state header",
                                   file=name, offset=base,
                                   hint="Register the serializer's snapshot layout with statecat or report the class")
        try:
            return parser_class(data, name, base, skips).parse()
        except _Recover as need:
            if need.start in skips:
                raise FormatError(need.reason, file=name, offset=base + need.start) from None
            for candidate in _plausible_ends(data, need.start):
                try:
                    return attempt({**skips, need.start: (candidate, need.reason)})
                except (StatecatError, _Recover):
                    continue
            raise FormatError(f"{need.reason}; no way to read the rest of the header past it", file=name,
                              offset=base + need.start) from None

    return attempt({})


def _plausible_ends(data: bytes, start: int):
    """Positions where a header item could resume: a short modified-UTF-8 string of printable text."""
    for p in range(start + 6, len(data) + 1):
        if p == len(data):
            yield p
            continue
        if p + 2 > len(data):
            continue
        n = int.from_bytes(data[p:p + 2], "big")
        if 0 < n <= MAX_PLAUSIBLE_NAME and p + 2 + n <= len(data):
            text = data[p + 2:p + 2 + min(n, 16)]
            if all(32 <= b < 127 for b in text):
                yield p


class _HeaderParser:
    def __init__(self, data: bytes, name: str, base: int, skips: dict[int, tuple[int, str]]):
        self.bytes = data
        self.base = base
        self.data = DataInput.of_bytes(data, name, base=base)
        self.snapshots = SnapshotReader(self.data, data, base)
        self.skips = skips
        self.recovered: list[str] = []

    def serializer(self) -> TypeDescriptor:
        start = self.data.offset - self.base
        if start in self.skips:
            end, reason = self.skips[start]
            self.data.skip(end - start)
            self.recovered.append(reason)
            class_name = _class_name_at(self.bytes, start)
            return TypeDescriptor.raw(class_name, reason)
        try:
            return self.snapshots.top_level()
        except UnknownSnapshotError as exc:
            raise _Recover(start, f"serializer snapshot class {exc.class_name} is not known to statecat") from None
        except StatecatError as exc:
            raise _Recover(start, f"could not read the serializer snapshot: {exc.message}") from None

    def meta_info(self, allowed_types: tuple[str, ...]) -> StateMetaInfo:
        data = self.data
        at = data.offset
        name = data.read_utf()
        type_at = data.offset
        ordinal = data.read_i32()
        if not 0 <= ordinal < len(BACKEND_STATE_TYPES) or BACKEND_STATE_TYPES[ordinal] not in allowed_types:
            raise data.error(f"a state type in {allowed_types}", ordinal, offset=type_at)
        options = {}
        for _ in range(data.read_length("number of state options", limit=MAX_OPTIONS)):
            key = data.read_utf()
            options[key] = data.read_utf()
        serializers = {}
        for _ in range(data.read_length("number of state serializers", limit=MAX_OPTIONS)):
            key = data.read_utf()
            serializers[key] = self.serializer()
        return StateMetaInfo(name, BACKEND_STATE_TYPES[ordinal], options, serializers, at)

    def states(self, allowed_types: tuple[str, ...]) -> tuple[StateMetaInfo, ...]:
        at = self.data.offset
        count = self.data.read_i16()
        if count < 0:
            raise self.data.error(f"a state count between 0 and {MAX_STATES}", count, offset=at)
        return tuple(self.meta_info(allowed_types) for _ in range(count))

    def finish(self, allowed_trailer: bytes = b"") -> None:
        if allowed_trailer and self.data.remaining == len(allowed_trailer):
            at = self.data.offset - self.base
            if self.bytes[at:] == allowed_trailer:
                self.data.skip(len(allowed_trailer))
        if not self.data.at_end():
            raise self.data.error(f"the header to end at offset {self.base + len(self.bytes)} where the data begins",
                                  f"{self.data.remaining} unread bytes")


class _KeyedHeaderParser(_HeaderParser):
    def parse(self) -> StreamHeader:
        data = self.data
        at = data.offset
        version = data.read_i32()
        if version not in SUPPORTED_KEYED_PROXY_VERSIONS:
            raise UnsupportedError(
                f"keyed state header version {version} is not supported; supported versions: "
                f"{', '.join(map(str, SUPPORTED_KEYED_PROXY_VERSIONS))}", file=data.name, offset=at,
                hint="Savepoints of Flink before 1.8 must be migrated with a newer Flink first")
        compressed = data.read_bool() if version >= FIRST_KEYED_PROXY_WITH_COMPRESSION else False
        key = self.serializer()
        states = self.states(("KEY_VALUE", "PRIORITY_QUEUE", "KEY_VALUE_V2"))
        self.finish()
        return StreamHeader("keyed", version, compressed, key, states, (), len(self.bytes), tuple(self.recovered))


class _OperatorHeaderParser(_HeaderParser):
    def parse(self) -> StreamHeader:
        data = self.data
        at = data.offset
        version = data.read_i32()
        if version not in SUPPORTED_OPERATOR_PROXY_VERSIONS:
            raise UnsupportedError(
                f"operator state header version {version} is not supported; supported versions: "
                f"{', '.join(map(str, SUPPORTED_OPERATOR_PROXY_VERSIONS))}", file=data.name, offset=at)
        compressed = data.read_bool() if version >= FIRST_OPERATOR_PROXY_WITH_COMPRESSION else False
        states = self.states(("OPERATOR",))
        broadcast = self.states(("BROADCAST",))
        # With compression one snappy stream follows the header; its identifier precedes the first element.
        self.finish(SNAPPY_STREAM_IDENTIFIER if compressed else b"")
        return StreamHeader("operator", version, compressed, None, states, broadcast, len(self.bytes), tuple(self.recovered))


def _class_name_at(data: bytes, start: int) -> str:
    """The class name of a top-level snapshot at ``start`` (i32 version, utf name), for messages."""
    try:
        n = int.from_bytes(data[start + 4:start + 6], "big")
        return data[start + 6:start + 6 + n].decode("utf-8", "replace")
    except Exception:  # noqa: BLE001 - a message helper must not fail
        return "unknown serializer"


__all__ = ["StateMetaInfo", "StreamHeader", "read_keyed_header", "read_operator_header", "open_stream",
           "read_stream_bytes", "header_end", "FileStream", "InlineStream"]
