"""FLIP-27 source state, both ways: the splits in ``SourceReaderState`` and the enumerator's
checkpoint (the decoders first, then their inverse encoders).

The column types are ``statecat.statemeta.source_splits.SPLIT_TYPE`` / ``ENUMERATOR_TYPE``. The
bytes name no connector, so each known format is tried and kept only if it explains every byte
with plausible values; a format that does not fit leaves ``connector`` null, the bytes in ``raw``
and the reason. Formats, each read from its serializer's source (and checked on real bytes, see
tests/fixtures/source_positions/README.md):

* framing: SourceOperator stores ``SimpleVersionedSerialization.writeVersionAndSerialize(split)``
  as a ``byte[]`` element (i32 length first): i32 version, i32 length, the split (Flink 1.20 and
  2.x, checked with javap and on real bytes; older releases wrote no length); SourceCoordinator
  checkpoints ``i32 coordinator serde version (0 or 1), i32 enumerator serializer version,
  i32 length, enumerator bytes`` (version 0 may be followed by more bytes);
* FileSource (flink-connector-files): FileSourceSplitSerializer v1 (writeUTF id, Path, offset,
  length, modification time, file size, hostnames, optional CheckpointedPosition) and
  PendingSplitsCheckpointSerializer v1 (little-endian: magic 0xDEADBEEF, split version, counts,
  length-prefixed splits and UTF-8 paths);
* Kafka (flink-connector-kafka): KafkaPartitionSplitSerializer v0 (writeUTF topic, i32 partition,
  i64 starting and stopping offset) and KafkaSourceEnumStateSerializer v1, v2, v3;
* NumberSequenceSource (also DataGen's DataGeneratorSource): SplitSerializer v1 (writeUTF id,
  i64 from, i64 to) and CheckpointSerializer v1 (i32 count, then splits).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Mapping
from typing import Any

from statecat.readers.codecs.decoders import (
    INT_MIN,
    DecodeError,
    java_string,
    read_length,
)
from statecat.readers.codecs.encoders import (
    _BE_I32,
    _BE_I64,
    INT_MAX,
    _field,
    _framed_bytes,
    _long_field,
    write_utf,
)
from statecat.readers.codecs.encoders import (
    java_string as write_java_string,
)
from statecat.readers.codecs.values import (
    EncodeError,
    Encoder,
    _binary,
    _boolean,
    _fields_of,
    _ranged,
    _sequence,
    _text,
    _utf8,
)
from statecat.statemeta.errors import UnsupportedError
from statecat.statemeta.source_splits import ENUMERATOR_CODEC, SPLIT_CODEC

_I32 = struct.Struct(">i").unpack_from
_I64 = struct.Struct(">q").unpack_from
_LE_I32 = struct.Struct("<i").unpack_from
_U16 = struct.Struct(">H").unpack_from

LONG_MIN = -(1 << 63)
FILE_PENDING_MAGIC = -0x21524111  # 0xDEADBEEF as a signed int
NO_OFFSET = -1  # CheckpointedPosition.NO_OFFSET
# KafkaPartitionSplit's markers for offsets not known yet (negative stored values)
KAFKA_STARTING_MARKERS = {-1: "latest", -2: "earliest", -3: "committed", LONG_MIN: "migrated"}
KAFKA_STOPPING_MARKERS = {-1: "latest", -3: "committed", LONG_MIN: None}  # MIN: no stopping offset
KAFKA_STATUS = {0: "ASSIGNED", 1: "UNASSIGNED"}
KAFKA_ENUMERATOR_VERSIONS = (1, 2, 3)
COORDINATOR_VERSIONS = (0, 1)
MAX_HOSTNAMES = 1 << 16


class _Reader:
    """Big-endian DataInput over one value's bytes; every read is bounds-checked."""

    def __init__(self, buf: bytes, pos: int = 0, end: int | None = None) -> None:
        self.buf, self.pos, self.end = buf, pos, len(buf) if end is None else end

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.end:
            raise DecodeError(f"{what} needs {n} bytes, {self.end - self.pos} left")

    def i32(self, what: str = "int") -> int:
        self.need(4, what)
        self.pos += 4
        return _I32(self.buf, self.pos - 4)[0]

    def i64(self, what: str = "long") -> int:
        self.need(8, what)
        self.pos += 8
        return _I64(self.buf, self.pos - 8)[0]

    def boolean(self, what: str = "boolean") -> bool:
        self.need(1, what)
        b = self.buf[self.pos]
        if b > 1:
            raise DecodeError(f"{what}: expected a boolean byte 0 or 1, got {b}")
        self.pos += 1
        return b == 1

    def utf(self, what: str = "string") -> str:
        """DataOutput.writeUTF: u16 length, then Java's modified UTF-8."""
        self.need(2, what)
        n = _U16(self.buf, self.pos)[0]
        self.pos += 2
        self.need(n, what)
        data = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        return modified_utf8(data)

    def string_value(self, what: str = "string") -> str | None:
        """StringUtils.writeNullableString's payload (StringValue's varint chars)."""
        if self.pos >= self.end:
            raise DecodeError(f"{what}: no bytes left")
        value, self.pos = java_string(self.buf[: self.end], self.pos)
        return value

    def nullable_string(self, what: str = "string") -> str | None:
        return self.string_value(what) if self.boolean(what + " present") else None

    def done(self, what: str) -> None:
        if self.pos != self.end:
            raise DecodeError(f"{what} ends after {self.pos} of its {self.end} bytes")


def modified_utf8(data: bytes) -> str:
    """Java's modified UTF-8 (NUL as C0 80, supplementary characters as surrogate pairs)."""
    try:
        text = data.replace(b"\xc0\x80", b"\x00").decode("utf-8", "surrogatepass")
    except UnicodeDecodeError as exc:
        raise DecodeError(f"not modified UTF-8: {exc}") from None
    # pair up surrogates; a lone one (valid in Java) becomes U+FFFD
    return text.encode("utf-16-be", "surrogatepass").decode("utf-16-be", "replace")


# ----------------------------------------------------------------------------- FileSource


def _path(r: _Reader) -> str:
    """flink-core Path.serializeToDataOutputView: the URI's components, each a nullable string."""
    if not r.boolean("path present"):
        raise DecodeError("split without a path")
    scheme = r.nullable_string("path scheme")
    user_info = r.nullable_string("path user info")
    host = r.nullable_string("path host")
    port = r.i32("path port")
    path = r.nullable_string("path")
    query = r.nullable_string("path query")
    fragment = r.nullable_string("path fragment")
    if port < -1 or port > 65535:
        raise DecodeError(f"path port {port} out of range")
    # As java.net.URI.toString() composes them (what Path.toString() shows).
    text = f"{scheme}:" if scheme is not None else ""
    if host is not None:
        text += "//" + (f"{user_info}@" if user_info is not None else "") + host + (f":{port}" if port != -1 else "")
    text += path or ""
    if query is not None:
        text += "?" + query
    if fragment is not None:
        text += "#" + fragment
    return text


def file_split(data: bytes, start: int = 0, end: int | None = None) -> dict:
    """FileSourceSplitSerializer version 1."""
    r = _Reader(data, start, end)
    split_id = r.utf("split id")
    path = _path(r)
    offset, length = r.i64("offset"), r.i64("length")
    modification_time, file_size = r.i64("modification time"), r.i64("file size")
    count = r.i32("hostname count")
    if not 0 <= count <= min(MAX_HOSTNAMES, (r.end - r.pos) // 2):
        raise DecodeError(f"hostname count {count} does not fit")
    hostnames = [r.utf("hostname") for _ in range(count)]
    reader_offset = records = None
    if r.boolean("reader position present"):
        reader_offset, records = r.i64("reader offset"), r.i64("records to skip")
        if reader_offset < NO_OFFSET or records < 0:
            raise DecodeError(f"implausible reader position ({reader_offset}, {records})")
    r.done("FileSourceSplit")
    if offset < 0 or length < 0 or file_size < 0:
        raise DecodeError(f"implausible split range offset={offset} length={length} file size={file_size}")
    return {
        "split_id": split_id,
        "path": path,
        "offset": offset,
        "length": length,
        "modification_time": modification_time,
        "file_size": file_size,
        "hostnames": hostnames,
        "reader_offset": reader_offset,
        "records_to_skip": records,
    }


def file_enumerator(data: bytes) -> dict:
    """PendingSplitsCheckpointSerializer version 1 (little-endian framing)."""
    if len(data) < 16 or _LE_I32(data, 0)[0] != FILE_PENDING_MAGIC:
        raise DecodeError("no PendingSplitsCheckpoint magic number 0xDEADBEEF")
    split_version, n_splits, n_paths = (_LE_I32(data, at)[0] for at in (4, 8, 12))
    if split_version != 1:
        raise DecodeError(f"FileSourceSplit serializer version {split_version} is not known (1 is)")
    if n_splits < 0 or n_paths < 0 or (n_splits + n_paths) * 4 > len(data) - 16:
        raise DecodeError(f"split count {n_splits} / path count {n_paths} do not fit")
    pos = 16

    def framed() -> tuple[int, int]:
        nonlocal pos
        if pos + 4 > len(data):
            raise DecodeError("length past the end")
        n = _LE_I32(data, pos)[0]
        if n < 0 or pos + 4 + n > len(data):
            raise DecodeError(f"length {n} past the end")
        pos += 4 + n
        return pos - n, pos

    # each split parsed from its own copy: string reads then never scan the whole checkpoint
    splits = []
    for _ in range(n_splits):
        a, b = framed()
        splits.append(file_split(bytes(data[a:b])))
    paths = []
    for _ in range(n_paths):
        a, b = framed()
        try:
            paths.append(bytes(data[a:b]).decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise DecodeError(f"processed path is not UTF-8: {exc}") from None
    if pos != len(data):
        raise DecodeError(f"PendingSplitsCheckpoint ends after {pos} of {len(data)} bytes")
    return {"split_version": split_version, "pending_splits": splits, "processed_paths": paths}


# ----------------------------------------------------------------------------- Kafka


def _kafka_offsets(starting: int, stopping: int | None) -> dict:
    if starting < 0 and starting not in KAFKA_STARTING_MARKERS:
        raise DecodeError(f"invalid Kafka starting offset {starting}")
    out = {
        "starting_offset": starting,
        "starting_marker": KAFKA_STARTING_MARKERS.get(starting),
        "stopping_offset": None,
        "stopping_marker": None,
    }
    if stopping is not None:
        if stopping < 0 and stopping not in KAFKA_STOPPING_MARKERS:
            raise DecodeError(f"invalid Kafka stopping offset {stopping}")
        out["stopping_offset"] = None if stopping == LONG_MIN else stopping
        out["stopping_marker"] = KAFKA_STOPPING_MARKERS.get(stopping)
    return out


def _topic_partition(r: _Reader) -> dict:
    topic = r.utf("topic")
    partition = r.i32("partition")
    if not topic or partition < 0:
        raise DecodeError(f"implausible topic partition {topic!r}/{partition}")
    return {"topic": topic, "partition": partition}


def kafka_split(data: bytes, start: int = 0, end: int | None = None) -> dict:
    """KafkaPartitionSplitSerializer version 0."""
    r = _Reader(data, start, end)
    out = _topic_partition(r)
    out.update(_kafka_offsets(r.i64("starting offset"), r.i64("stopping offset")))
    r.done("KafkaPartitionSplit")
    return out


def kafka_enumerator(version: int, data: bytes) -> dict:
    """KafkaSourceEnumStateSerializer versions 1 (assigned partitions), 2 (+ status and
    initial discovery) and 3 (whole splits with their offsets)."""
    r = _Reader(data)
    count = r.i32("partition count")
    if count < 0 or count * 6 > len(data):
        raise DecodeError(f"partition count {count} does not fit")
    split_version = None
    if version == 3:
        split_version = r.i32("split serializer version")
        if split_version != 0:
            raise DecodeError(f"KafkaPartitionSplit serializer version {split_version} is not known (0 is)")
    partitions = []
    for _ in range(count):
        if version == 3:
            n = r.i32("split length")
            r.need(n, "split")
            entry = kafka_split(data, r.pos, r.pos + n)
            r.pos += n
        else:
            # v1/v2 keep no offsets (restored as MIGRATED: the offsets initializer runs again)
            entry = {
                **_topic_partition(r),
                "starting_offset": None,
                "starting_marker": None,
                "stopping_offset": None,
                "stopping_marker": None,
            }
        status = r.i32("assignment status") if version >= 2 else 0
        if status not in KAFKA_STATUS:
            raise DecodeError(f"unknown assignment status {status}")
        entry["status"] = KAFKA_STATUS[status]
        partitions.append(entry)
    finished = r.boolean("initial discovery finished") if version >= 2 else True
    r.done("KafkaSourceEnumState")
    return {"split_version": split_version, "initial_discovery_finished": finished, "partitions": partitions}


# ----------------------------------------------------------------------------- NumberSequence / DataGen


def _number_split(r: _Reader) -> dict:
    split_id = r.utf("split id")
    first, last = r.i64("from"), r.i64("to")
    if first > last + 1 and not (last == (1 << 63) - 1):
        raise DecodeError(f"implausible number range {first}..{last}")
    return {"split_id": split_id, "from_value": first, "to_value": last}


def number_split(data: bytes, start: int = 0, end: int | None = None) -> dict:
    r = _Reader(data, start, end)
    out = _number_split(r)
    r.done("NumberSequenceSplit")
    return out


def number_enumerator(data: bytes) -> dict:
    r = _Reader(data)
    count = r.i32("split count")
    if count < 0 or count * 18 > len(data) - 4:
        raise DecodeError(f"split count {count} does not fit")
    splits = [_number_split(r) for _ in range(count)]
    r.done("NumberSequenceSource checkpoint")
    return {"remaining_splits": splits}


# ----------------------------------------------------------------------------- the columns

# (connector, split serializer version) -> parser of the split bytes
SPLIT_FORMATS = (
    ("file", 1, file_split),
    ("kafka", 0, kafka_split),
    ("number_sequence", 1, number_split),
)


def _empty_split(raw: bytes, version: int | None, reason: str | None) -> dict:
    return {
        "connector": None,
        "split_version": version,
        "split_id": None,
        "file": None,
        "kafka": None,
        "number_sequence": None,
        "raw": raw,
        "reason": reason,
    }


def decode_split(raw: bytes) -> dict:
    """One SourceReaderState element's ``byte[]`` (version + split) as the split column."""
    if len(raw) < 4:
        return _empty_split(raw, None, f"a split element of {len(raw)} bytes has no version")
    version = _I32(raw, 0)[0]
    # i32 length after the version (Flink 1.20, 2.x); without it the split follows the version
    start = 8 if len(raw) >= 8 and _I32(raw, 4)[0] == len(raw) - 8 else 4
    fits, failures = [], []
    for connector, known_version, parse in SPLIT_FORMATS:
        if version != known_version:
            continue
        try:
            fits.append((connector, parse(raw, start)))
        except (DecodeError, struct.error, IndexError, ValueError) as exc:
            failures.append(f"{connector}: {exc}")
    if len(fits) != 1:
        known = ", ".join(f"{c} v{v}" for c, v, _ in SPLIT_FORMATS)
        if fits:
            reason = "the split fits several formats: " + ", ".join(c for c, _ in fits)
        else:
            reason = f"split serializer version {version} of a connector statecat does not decode (known: {known})" + (
                f"; not {'; not '.join(failures)}" if failures else ""
            )
        out = _empty_split(raw, version, reason)
        for connector, value in fits:
            out[connector] = _split_struct(connector, value)
        return out
    connector, value = fits[0]
    out = _empty_split(raw, version, None)
    out["connector"] = connector
    out["split_id"] = f"{value['topic']}-{value['partition']}" if connector == "kafka" else value["split_id"]
    out[connector] = _split_struct(connector, value)
    return out


def _split_struct(connector: str, value: dict) -> dict:
    if connector == "number_sequence":
        return {"from_value": value["from_value"], "to_value": value["to_value"]}
    return value


def decode_enumerator(raw: bytes) -> dict:
    """The operator coordinator's state: a SourceCoordinator checkpoint, decoded where known."""
    out: dict[str, Any] = {
        "coordinator_version": None,
        "enumerator_version": None,
        "connector": None,
        "file": None,
        "kafka": None,
        "number_sequence": None,
        "raw": raw,
        "reason": None,
    }
    if len(raw) < 12:
        out["reason"] = f"{len(raw)} bytes are too short for a source coordinator's checkpoint"
        return out
    coordinator_version, enumerator_version, n = _I32(raw, 0)[0], _I32(raw, 4)[0], _I32(raw, 8)[0]
    trailing = len(raw) - 12 - n
    if coordinator_version not in COORDINATOR_VERSIONS or n < 0 or trailing < 0 or (trailing and coordinator_version):
        out["reason"] = (
            "not a source coordinator's checkpoint (SourceCoordinator writes serde version 0 or 1, "
            f"the enumerator serializer's version and length; got {coordinator_version}, "
            f"{enumerator_version}, {n} for {len(raw) - 12} bytes)"
        )
        return out
    out["coordinator_version"], out["enumerator_version"] = coordinator_version, enumerator_version
    data = raw[12 : 12 + n]
    candidates: list[tuple[str, Callable[[bytes], dict]]] = []
    if enumerator_version == 1:
        candidates += [("file", file_enumerator), ("number_sequence", number_enumerator)]
    if enumerator_version in KAFKA_ENUMERATOR_VERSIONS:
        candidates.append(("kafka", lambda d: kafka_enumerator(enumerator_version, d)))
    fits, failures = [], []
    for connector, parse in candidates:
        try:
            fits.append((connector, parse(data)))
        except (DecodeError, struct.error, IndexError, ValueError) as exc:
            failures.append(f"{connector}: {exc}")
    for connector, value in fits:
        out[connector] = value
    if len(fits) == 1:
        out["connector"] = fits[0][0]
    elif fits:
        out["reason"] = (
            "the enumerator state fits several formats ("
            + ", ".join(c for c, _ in fits)
            + "), each filled in; the operator's splits tell which"
        )
    else:
        out["reason"] = (
            f"enumerator serializer version {enumerator_version} of a connector statecat does not "
            "decode (known: file v1, kafka v1-v3, number_sequence v1)"
            + (f"; not {'; not '.join(failures)}" if failures else "")
        )
    return out


def split_element_decoder(buf: bytes, pos: int) -> tuple[dict, int]:
    """Decoder (``readers.decoders`` protocol) of one SourceReaderState element: a byte[]."""
    n, pos = read_length(buf, pos, "split length")
    return decode_split(bytes(buf[pos : pos + n])), pos + n


def enumerator_decoder(buf: bytes, pos: int) -> tuple[dict, int]:
    """Decoder of the coordinator state: the whole stream is one SourceCoordinator checkpoint."""
    return decode_enumerator(bytes(buf[pos:])), len(buf)


DECODERS = {SPLIT_CODEC: split_element_decoder, ENUMERATOR_CODEC: enumerator_decoder}


# ----------------------------------------------------------------------------- encoding: the inverse of the decoders above

# A decoded connector's struct is written with that connector's serializer; a split or enumerator
# state of a connector statecat does not decode is its stored bytes (``raw``), written back unchanged.

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
    write_java_string(value, out)


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


def _encode_number_split(split_id: Any, value: Any, out: bytearray) -> None:
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
            lambda v, o: _encode_number_split(split["split_id"], v, o),
            split["number_sequence"],
            payload,
            ".number_sequence",
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
            _encode_number_split(fields["split_id"], {k: fields[k] for k in ("from_value", "to_value")}, out)
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
