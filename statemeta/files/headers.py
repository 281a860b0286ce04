"""State stream headers: the keyed and operator serialization proxies and their state meta infos.

Snapshot payloads carry no length, so one serializer statecat does not know would hide where the
rest of the header starts. The header's end is known, though (the first data offset), so the
parser recovers: it tries the few positions where the header could continue after the unknown
serializer and keeps the one from which the rest of the header parses exactly to that end
(at most ``MAX_RECOVERY_ATTEMPTS`` trial parses per header, so damaged headers cost bounded work). The state that used it reads as raw
bytes with the class name as the reason; every other state still decodes.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field

from statecat.statemeta.binary import DataInput
from statecat.statemeta.errors import FormatError, StatecatError, UnsupportedError
from statecat.statemeta.files.metadata import FileStream, InlineStream, StreamHandle
from statecat.statemeta.files.snapshots import SNAPSHOT_PROXY_VERSION, SnapshotReader, UnknownSnapshotError
from statecat.statemeta.files.storage import StateFile, Storage
from statecat.statemeta.types import TypeDescriptor

SUPPORTED_KEYED_PROXY_VERSIONS = (4, 5, 6)
FIRST_KEYED_PROXY_WITH_COMPRESSION = 4
SUPPORTED_OPERATOR_PROXY_VERSIONS = (5, 6)
FIRST_OPERATOR_PROXY_WITH_COMPRESSION = 6

BACKEND_STATE_TYPES = ("KEY_VALUE", "OPERATOR", "BROADCAST", "PRIORITY_QUEUE", "KEY_VALUE_V2")
MAX_STATES = 1 << 15
MAX_OPTIONS = 1 << 10
# Bound on trial parses per header while recovering past unknown serializers: this many, plus one
# per position the header could resume at (a few per state; see _resume_points), so a header with
# many unknown serializers still recovers. Each trial is at most one pass over the header, and
# RECOVERY_WORK_BYTES bounds attempts x header size: damaged headers cost bounded work.
MAX_RECOVERY_ATTEMPTS = 128
RECOVERY_WORK_BYTES = 64 << 20
# Largest stream header read into memory (real ones are a few KB; a damaged offset must not make
# statecat read a whole state file as "header").
MAX_HEADER_BYTES = 16 << 20
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

    def __init__(self, start: int, reason: str) -> None:
        self.start = start
        self.reason = reason


def open_stream(
    storage: Storage, handle: StreamHandle, start: int = 0, length: int | None = None
) -> tuple[StateFile, str, int]:
    """A read stream positioned at ``start`` within the handle's bytes; returns (stream, name, base).

    The stream (``storage.StateFile``) is confined to the snapshot, refuses negative positions and
    lengths with a ``FormatError``, and never reads past its file's end.
    """
    if isinstance(handle, InlineStream):
        path, base = storage.metadata_path, handle.offset
    else:
        path, base = handle.path, handle.start
    stream = storage.open(path)
    try:
        stream.seek(base + start)
    except BaseException:
        stream.close()
        raise
    return stream, storage.display(path), base


def read_stream_bytes(storage: Storage, handle: StreamHandle, start: int, length: int) -> tuple[bytes, str, int]:
    """Reads ``length`` bytes of a handle's stream at ``start``; returns (bytes, file name, file offset)."""
    stream, name, base = open_stream(storage, handle, start)
    with stream:
        if length < 0 or length > MAX_HEADER_BYTES:
            raise FormatError(
                f"expected a state stream header of 0 to {MAX_HEADER_BYTES} bytes, got {length}",
                file=name,
                offset=base + start,
                hint="The handle's size or key-group offsets in _metadata are damaged",
            )
        data = stream.read(length)
    if len(data) != length:
        raise FormatError(
            f"expected {length} bytes of state data, got {len(data)} before the end of the file",
            file=name,
            offset=base + start + len(data),
            hint="The state file is truncated",
        )
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


def _attempt_limit(resume_points: int, work_limit: int) -> int:
    return min(MAX_RECOVERY_ATTEMPTS + resume_points, work_limit)


class _RecoveryExhausted(Exception):
    """The trial-parse budget ran out: the header cannot be recovered within bounded work."""


def _parse_with_recovery(
    data: bytes, name: str, base: int, parser_class: type[_KeyedHeaderParser | _OperatorHeaderParser]
) -> StreamHeader:
    work_limit = max(2, RECOVERY_WORK_BYTES // max(len(data), 1))
    budget = [_attempt_limit(0, work_limit)]
    first_failure: list[_Recover] = []
    resume_points: list[list[int]] = []  # computed once per header, on the first unknown serializer

    def attempt(skips: dict[int, tuple[int, str]]) -> StreamHeader:
        if budget[0] <= 0:
            raise _RecoveryExhausted()
        budget[0] -= 1
        try:
            return parser_class(data, name, base, skips).parse()
        except _Recover as need:
            if not first_failure:
                first_failure.append(need)
            if need.start in skips:
                raise FormatError(need.reason, file=name, offset=base + need.start) from None
            if not resume_points:
                resume_points.append(_resume_points(data))
                budget[0] += _attempt_limit(len(resume_points[0]), work_limit) - _attempt_limit(0, work_limit)
            points = resume_points[0]
            for candidate in points[bisect.bisect_left(points, need.start + 6) :]:
                try:
                    return attempt({**skips, need.start: (candidate, need.reason)})
                except (StatecatError, _Recover):
                    continue
            raise FormatError(
                f"{need.reason}; no way to read the rest of the header past it", file=name, offset=base + need.start
            ) from None

    try:
        return attempt({})
    except _RecoveryExhausted:
        need = first_failure[0]
        limit = _attempt_limit(len(resume_points[0]) if resume_points else 0, work_limit)
        raise FormatError(
            f"{need.reason}; no way to read the rest of the header past it within {limit} trial parses",
            file=name,
            offset=base + need.start,
            hint="The state header is damaged, or holds several serializers statecat does not know",
        ) from None


# A modified-UTF-8 string start: u16 length up to 1279 (high byte 0..4), then a non-control byte.
_STRING_START = re.compile(rb"(?=[\x00-\x04][\x00-\xff][\x20-\x7e\x80-\xff])", re.DOTALL)


def _resume_points(data: bytes) -> list[int]:
    """Positions, in order, where a header could continue after a top-level serializer snapshot.

    What follows one is known: another serializer entry (an enum-style key, snapshot proxy
    version 2, a class name), the next state's meta info (name, state type ordinal, options, its
    first serializer entry), a state count followed by such a meta info, or the header's end
    (possibly the snappy stream identifier, after empty state counts). Only positions of those
    shapes are tried, so recovery makes a handful of trial parses, not one per byte.
    """
    size = len(data)
    found = set()
    for match in _STRING_START.finditer(data):
        p = match.start()
        if _state_meta_info_at(data, p) or _serializer_entry_at(data, p):
            found.add(p)
            if p >= 2 and 0 < int.from_bytes(data[p - 2 : p], "big") <= MAX_STATES:
                found.add(p - 2)  # a state count, then this state
    for end in (size, size - len(SNAPPY_STREAM_IDENTIFIER)):
        if end >= 0 and data[end:] in (b"", SNAPPY_STREAM_IDENTIFIER):
            found.add(end)
            for count_at in (end - 2, end - 4):  # empty state lists (operator headers have two counts)
                if count_at >= 0 and not any(data[count_at:end]):
                    found.add(count_at)
    return sorted(found)


def _string_at(data: bytes, p: int) -> int | None:
    """The byte length of a short printable modified-UTF-8 string at ``p``, or None."""
    if p + 2 > len(data):
        return None
    n = int.from_bytes(data[p : p + 2], "big")
    if not 0 < n <= MAX_PLAUSIBLE_NAME or p + 2 + n > len(data):
        return None
    if any(b < 32 or b == 127 for b in data[p + 2 : p + 2 + min(n, 32)]):
        return None
    return n


def _state_meta_info_at(data: bytes, p: int) -> bool:
    """A state's meta info: name, type ordinal, options (string pairs), then its first serializer entry.

    Checked that deep because a Java class descriptor (name, then a serialVersionUID such as 1L)
    looks like a name, an ordinal and an option count.
    """
    n = _string_at(data, p)
    if n is None:
        return False
    q = p + 2 + n
    if q + 8 > len(data):
        return False
    ordinal = int.from_bytes(data[q : q + 4], "big", signed=True)
    options = int.from_bytes(data[q + 4 : q + 8], "big", signed=True)
    if not (0 <= ordinal < len(BACKEND_STATE_TYPES) and 0 <= options <= MAX_OPTIONS):
        return False
    q += 8
    for _ in range(2 * options):
        m = _string_at(data, q)
        if m is None:
            return False
        q += 2 + m
    serializers = int.from_bytes(data[q : q + 4], "big", signed=True)
    return 0 < serializers <= MAX_OPTIONS and _serializer_entry_at(data, q + 4)


def _serializer_entry_at(data: bytes, p: int) -> bool:
    """A serializer entry: an enum-style key (``VALUE_SERIALIZER``), proxy version 2, a class name."""
    n = _string_at(data, p)
    if n is None or not _SERIALIZER_KEY.fullmatch(data[p + 2 : p + 2 + n]):
        return False
    q = p + 2 + n
    if int.from_bytes(data[q : q + 4], "big", signed=True) != SNAPSHOT_PROXY_VERSION:
        return False
    m = _string_at(data, q + 4)
    return m is not None and b"." in data[q + 6 : q + 6 + m]


_SERIALIZER_KEY = re.compile(rb"[A-Z][A-Z0-9_]*")
_ENUM_NAME = re.compile(r"[A-Z][A-Z0-9_]*")


class _HeaderParser:
    def __init__(self, data: bytes, name: str, base: int, skips: dict[int, tuple[int, str]]) -> None:
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
        except (TypeError, ValueError, AttributeError, KeyError, IndexError, OverflowError, RecursionError) as exc:
            # Values inside a damaged snapshot (a Java object graph, an attribute) of a shape no check
            # anticipated: still the snapshot's fault, so recover like any unreadable snapshot.
            raise _Recover(
                start, f"could not read the serializer snapshot: malformed ({type(exc).__name__}: {str(exc)[:200]})"
            ) from None

    def enum_name(self, what: str) -> str:
        """Option and serializer keys are Java enum names (``KEYED_STATE_TYPE``, ``VALUE_SERIALIZER``).

        Checked because recovery tries positions inside unknown snapshots: a wrong one must fail
        here instead of reading some string of the snapshot as a key.
        """
        at = self.data.offset
        key = self.data.read_utf()
        if not _ENUM_NAME.fullmatch(key):
            raise self.data.error(f"{what} (an enum name)", repr(key[:64]), offset=at)
        return key

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
            key = self.enum_name("a state option key")
            options[key] = data.read_utf()
        serializers = {}
        for _ in range(data.read_length("number of state serializers", limit=MAX_OPTIONS)):
            key = self.enum_name("a serializer key")
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
            raise self.data.error(
                f"the header to end at offset {self.base + len(self.bytes)} where the data begins",
                f"{self.data.remaining} unread bytes",
            )


class _KeyedHeaderParser(_HeaderParser):
    def parse(self) -> StreamHeader:
        data = self.data
        at = data.offset
        version = data.read_i32()
        if version not in SUPPORTED_KEYED_PROXY_VERSIONS:
            raise UnsupportedError(
                f"keyed state header version {version} is not supported; supported versions: "
                f"{', '.join(map(str, SUPPORTED_KEYED_PROXY_VERSIONS))}",
                file=data.name,
                offset=at,
                hint="Savepoints of Flink before 1.8 must be migrated with a newer Flink first",
            )
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
                f"{', '.join(map(str, SUPPORTED_OPERATOR_PROXY_VERSIONS))}",
                file=data.name,
                offset=at,
            )
        compressed = data.read_bool() if version >= FIRST_OPERATOR_PROXY_WITH_COMPRESSION else False
        states = self.states(("OPERATOR",))
        broadcast = self.states(("BROADCAST",))
        # With compression one snappy stream follows the header; its identifier precedes the first element.
        self.finish(SNAPPY_STREAM_IDENTIFIER if compressed else b"")
        return StreamHeader(
            "operator", version, compressed, None, states, broadcast, len(self.bytes), tuple(self.recovered)
        )


def _class_name_at(data: bytes, start: int) -> str:
    """The class name of a top-level snapshot at ``start`` (i32 version, utf name), for messages."""
    try:
        n = int.from_bytes(data[start + 4 : start + 6], "big")
        return data[start + 6 : start + 6 + n].decode("utf-8", "replace")
    except Exception:  # noqa: BLE001 - a message helper must not fail
        return "unknown serializer"


__all__ = [
    "StateMetaInfo",
    "StreamHeader",
    "read_keyed_header",
    "read_operator_header",
    "open_stream",
    "read_stream_bytes",
    "header_end",
    "FileStream",
    "InlineStream",
]
