"""The ``_metadata`` file of a Flink savepoint or retained checkpoint, versions 3 to 7 (Flink 1.11–2.3+).

Parses into plain frozen objects: operators, subtask states and state handles. Inline state
(byte stream handles) is not copied: an ``InlineStream`` records where its bytes lie inside
``_metadata`` so readers stream them like any file.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from statecat.statemeta.binary import DataInput
from statecat.statemeta.errors import FormatError, StatecatError, UnsupportedError
from statecat.statemeta.files.storage import Storage, open_storage

METADATA_MAGIC = 0x4960672D
MASTER_STATE_MAGIC = 0xC96B1696
SUPPORTED_METADATA_VERSIONS = (3, 4, 5, 6, 7)
# Flink release that first wrote each version, for messages.
METADATA_VERSION_RELEASES = {3: "1.11–1.15", 4: "1.16–1.20", 5: "2.0", 6: "2.1–2.3", 7: "after 2.3"}

FIRST_VERSION_WITH_PROPERTIES = 4
FIRST_VERSION_WITH_OPERATOR_NAMES = 5
FIRST_VERSION_WITH_CHANNEL_STATE_V2 = 6
FIRST_VERSION_WITH_REF_CHECKPOINT = 7

# Bounds on counts read from the file: far above anything Flink writes, low enough that a garbled
# count fails at once instead of looping for hours.
MAX_OPERATORS = 1_000_000
MAX_SUBTASKS = 1 << 16
MAX_KEY_GROUPS = 1 << 15
MAX_ENTRIES = 1 << 24
# Flink nests a changelog handle's materialized handles one level deep; more is damage (and
# would exhaust Python's recursion limit).
MAX_HANDLE_NESTING = 4

# Handle type tags (one byte before each handle).
TAG_NULL = 0
TAG_BYTE_STREAM = 1
TAG_FILE = 2
TAG_KEY_GROUPS_V1 = 3
TAG_OPERATOR_STREAM = 4
TAG_INCREMENTAL_V1 = 5
TAG_RELATIVE_FILE = 6
TAG_KEY_GROUPS_SAVEPOINT = 7
TAG_CHANGELOG_V1 = 8
TAG_CHANGELOG_IN_MEMORY = 9
TAG_CHANGELOG_STREAM_V1 = 10
TAG_INCREMENTAL_V2 = 11
TAG_KEY_GROUPS_V2 = 12
TAG_CHANGELOG_STREAM_V2 = 13
TAG_CHANGELOG_V2 = 14
TAG_SEGMENT_FILE = 15
TAG_EMPTY_SEGMENT_FILE = 16
TAG_FILE_MERGING_OPERATOR_STREAM = 17

DISTRIBUTION_MODES = ("SPLIT_DISTRIBUTE", "UNION", "BROADCAST")

log = logging.getLogger(__name__)


# ----------------------------------------------------------------------------- stream handles


@dataclass(frozen=True)
class InlineStream:
    """Bytes stored inside ``_metadata`` (ByteStreamStateHandle): ``length`` bytes at ``offset``."""

    name: str
    offset: int
    length: int
    kind: str = field(default="inline", init=False)

    @property
    def size(self) -> int:
        return self.length


@dataclass(frozen=True)
class FileStream:
    """A whole file (relative handles resolved into the savepoint directory) or a segment of one."""

    path: str  # a path on the savepoint's filesystem
    size: int
    kind: str  # "file" (absolute), "relative", "segment" (file merging)
    start: int = 0


StreamHandle = InlineStream | FileStream


@dataclass(frozen=True)
class KeyGroupsHandle:
    """Keyed state: key-groups [start, start + len(offsets)) with each one's start in ``stream``."""

    kind: str  # "savepoint" (tag 7), "checkpoint" (tag 12), "legacy" (tag 3)
    start_key_group: int
    offsets: tuple[int, ...]
    stream: StreamHandle

    @property
    def key_group_range(self) -> tuple[int, int]:
        return self.start_key_group, self.start_key_group + len(self.offsets) - 1


@dataclass(frozen=True)
class UnsupportedKeyedHandle:
    """A keyed handle statecat recognises but does not read yet (native RocksDB, changelog)."""

    kind: str
    start_key_group: int
    num_key_groups: int
    size: int
    reason: str


@dataclass(frozen=True)
class OperatorStateEntry:
    name: str
    mode: str  # SPLIT_DISTRIBUTE | UNION | BROADCAST
    offsets: tuple[int, ...]


@dataclass(frozen=True)
class OperatorStreamHandle:
    entries: tuple[OperatorStateEntry, ...]
    stream: StreamHandle
    kind: str = "operator"


@dataclass(frozen=True)
class RocksDBFile:
    """One file of a RocksDB instance as Flink uploaded it, under RocksDB's own file name."""

    name: str  # 000023.sst, MANIFEST-000005, OPTIONS-000019, CURRENT
    stream: StreamHandle
    shared: bool  # in the checkpoint's shared/ part (incremental SSTs), else private

    @property
    def is_sst(self) -> bool:
        return self.name.endswith(".sst")


@dataclass(frozen=True)
class NativeRocksDBHandle:
    """Keyed state as native RocksDB files (IncrementalRemoteKeyedStateHandle, tags 5 and 11).

    Written for incremental and full RocksDB checkpoints and NATIVE savepoints alike: the
    serialization proxy header (state names and serializers) in ``meta_stream``, and the
    instance's files, one column family per state."""

    checkpoint_id: int
    backend_id: str
    start_key_group: int
    num_key_groups: int
    checkpointed_size: int
    meta_stream: StreamHandle
    files: tuple[RocksDBFile, ...]
    handle_id: str = ""
    kind: str = field(default="native-rocksdb", init=False)

    @property
    def key_group_range(self) -> tuple[int, int]:
        return self.start_key_group, self.start_key_group + self.num_key_groups - 1

    @property
    def sst_files(self) -> tuple[RocksDBFile, ...]:
        return tuple(f for f in self.files if f.is_sst)

    @property
    def size(self) -> int:
        return self.meta_stream.size + sum(f.stream.size for f in self.files if f.stream is not None)


KeyedHandle = KeyGroupsHandle | NativeRocksDBHandle | UnsupportedKeyedHandle


@dataclass(frozen=True)
class SubtaskState:
    index: int
    managed_operator: OperatorStreamHandle | None
    raw_operator: OperatorStreamHandle | None
    managed_keyed: KeyedHandle | None
    raw_keyed: KeyedHandle | None
    channel_state_handles: int = 0  # unaligned-checkpoint channel state (never in savepoints)


@dataclass(frozen=True)
class OperatorState:
    id: str  # 32 hex chars, Flink's OperatorID string
    uid: str | None
    name: str | None
    parallelism: int
    max_parallelism: int
    coordinator: StreamHandle | None
    subtasks: tuple[SubtaskState, ...]
    finished: bool = False
    finished_subtasks: tuple[int, ...] = ()


@dataclass(frozen=True)
class MasterState:
    name: str
    version: int
    size: int


@dataclass(frozen=True)
class CheckpointMetadata:
    storage: Storage
    version: int
    checkpoint_id: int
    master_states: tuple[MasterState, ...]
    operators: tuple[OperatorState, ...]
    checkpoint_type: str | None  # e.g. "Suspend Savepoint", "Checkpoint" (version >= 4)
    savepoint_format: str | None  # CANONICAL | NATIVE for savepoints
    size: int

    @property
    def path(self) -> str:
        return self.storage.uri

    @property
    def is_savepoint(self) -> bool:
        return self.savepoint_format is not None


# ----------------------------------------------------------------------------- parsing


def read_metadata(path: str | Storage) -> CheckpointMetadata:
    """Reads ``_metadata`` of the savepoint at ``path`` (directory, _metadata file or URI)."""
    storage = path if isinstance(path, Storage) else open_storage(path)
    display = storage.display(storage.metadata_path)
    with storage.open(storage.metadata_path) as stream:
        return _MetadataParser(DataInput(stream, display, length=stream.file_size), storage, stream.file_size).parse()


class _MetadataParser:
    def __init__(self, data: DataInput, storage: Storage, size: int) -> None:
        self.data = data
        self.storage = storage
        self.size = size
        self.version = 0
        self.nesting = 0  # changelog handles hold keyed handles

    def parse(self) -> CheckpointMetadata:
        data = self.data
        magic = data.read_i32() & 0xFFFFFFFF
        if magic != METADATA_MAGIC:
            raise data.error(
                f"the _metadata magic number 0x{METADATA_MAGIC:08X}",
                f"0x{magic:08X}",
                offset=0,
                hint="This file is not a Flink savepoint/checkpoint _metadata file",
            )
        at = data.offset
        self.version = data.read_i32()
        if self.version not in SUPPORTED_METADATA_VERSIONS:
            supported = ", ".join(f"{v} (Flink {METADATA_VERSION_RELEASES[v]})" for v in SUPPORTED_METADATA_VERSIONS)
            raise UnsupportedError(
                f"unknown _metadata version {self.version}; supported versions: {supported}",
                file=data.name,
                offset=at,
                hint="Take the savepoint with a Flink release between 1.11 and 2.3",
            )
        checkpoint_id = data.read_i64()
        masters = tuple(self._master_state() for _ in range(self._count("number of master states", MAX_ENTRIES)))
        n_operators = self._count("number of operators", MAX_OPERATORS)
        operators = tuple(self._operator_state() for _ in range(n_operators))
        checkpoint_type = savepoint_format = None
        if self.version >= FIRST_VERSION_WITH_PROPERTIES:
            checkpoint_type, savepoint_format = self._checkpoint_properties()
        elif not data.at_end():
            raise data.error("end of file after the last operator", "more bytes")
        elif _has_savepoint_key_groups(operators):
            # Before version 4 nothing records the type; only canonical savepoints write tag-7 handles.
            savepoint_format = "CANONICAL"
        return CheckpointMetadata(
            self.storage, self.version, checkpoint_id, masters, operators, checkpoint_type, savepoint_format, self.size
        )

    def _count(self, what: str, limit: int) -> int:
        return self.data.read_length(what, limit=limit)

    def _master_state(self) -> MasterState:
        data = self.data
        at = data.offset
        magic = data.read_i32() & 0xFFFFFFFF
        if magic != MASTER_STATE_MAGIC:
            raise data.error(f"master state magic 0x{MASTER_STATE_MAGIC:08X}", f"0x{magic:08X}", offset=at)
        block = data.read_length("master state block length in bytes")
        end = data.offset + block
        version = data.read_i32()
        name = data.read_utf()
        payload = data.read_length("master state payload length in bytes")
        data.skip(payload)
        if data.offset != end:
            raise data.error(f"the master state block to end at offset {end}", f"offset {data.offset}")
        return MasterState(name, version, payload)

    def _operator_state(self) -> OperatorState:
        data = self.data
        name = uid = None
        if self.version >= FIRST_VERSION_WITH_OPERATOR_NAMES:
            name = data.read_utf() or None
            uid = data.read_utf() or None
        low = data.read_i64()
        high = data.read_i64()
        # OperatorID prints its lower part first: the id string is the 16 bytes in file order.
        operator_id = (low & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "big").hex() + (high & 0xFFFFFFFFFFFFFFFF).to_bytes(
            8, "big"
        ).hex()
        at = data.offset
        parallelism = data.read_i32()
        max_parallelism = data.read_i32()
        if parallelism < 0 or max_parallelism <= 0 or max_parallelism > MAX_KEY_GROUPS:
            raise data.error(
                "parallelism >= 0 and max parallelism in 1..32768", f"{parallelism} and {max_parallelism}", offset=at
            )
        coordinator = self._stream_handle(allow=(TAG_NULL, TAG_BYTE_STREAM))
        at = data.offset
        n_subtasks = data.read_i32()
        if n_subtasks == -1:  # the whole operator finished; nothing more is stored
            return OperatorState(operator_id, uid, name, parallelism, max_parallelism, coordinator, (), finished=True)
        if n_subtasks < 0 or n_subtasks > MAX_SUBTASKS:
            raise data.error(f"a subtask count between -1 and {MAX_SUBTASKS}", n_subtasks, offset=at)
        subtasks = []
        finished = []
        seen = set()
        for _ in range(n_subtasks):
            at = data.offset
            index = data.read_i32()
            if index < 0:
                finished.append(-index - 1)
            else:
                # A repeated subtask would be read twice: its rows would appear twice in every result.
                if index in seen:
                    raise data.error("each subtask index once", f"subtask {index} again", offset=at)
                seen.add(index)
                subtasks.append(self._subtask_state(index, max_parallelism))
            if self.version >= FIRST_VERSION_WITH_REF_CHECKPOINT and data.read_u8() == 1:
                data.read_i64()  # the checkpoint this subtask's state was reused from
        return OperatorState(
            operator_id,
            uid,
            name,
            parallelism,
            max_parallelism,
            coordinator,
            tuple(subtasks),
            finished_subtasks=tuple(finished),
        )

    def _subtask_state(self, index: int, max_parallelism: int) -> SubtaskState:
        data = self.data
        managed_op = self._operator_handle() if data.read_i32() != 0 else None
        raw_op = self._operator_handle() if data.read_i32() != 0 else None
        managed_keyed = self._keyed_handle(max_parallelism)
        raw_keyed = self._keyed_handle(max_parallelism)
        channels = 0
        for _ in range(2):  # input channel handles, then result subpartition handles
            n = self._count("number of channel state handles", MAX_ENTRIES)
            for _ in range(n):
                self._channel_state_handle()
            channels += n
        return SubtaskState(index, managed_op, raw_op, managed_keyed, raw_keyed, channels)

    # -- handles

    def _tag(self, allow: tuple[int, ...]) -> int:
        at = self.data.offset
        tag = self.data.read_u8()
        if tag not in allow:
            raise self.data.error(
                f"a state handle type tag in {sorted(allow)}",
                tag,
                offset=at,
                hint="The _metadata file is damaged, or written by a Flink version statecat does not know",
            )
        return tag

    def _stream_handle(
        self,
        allow: tuple[int, ...] = (
            TAG_NULL,
            TAG_BYTE_STREAM,
            TAG_FILE,
            TAG_RELATIVE_FILE,
            TAG_SEGMENT_FILE,
            TAG_EMPTY_SEGMENT_FILE,
        ),
        tag: int | None = None,
    ) -> StreamHandle | None:
        data = self.data
        if tag is None:
            tag = self._tag(allow)
        if tag == TAG_NULL:
            return None
        if tag == TAG_BYTE_STREAM:
            name = data.read_utf()
            length = data.read_length("inline state length in bytes")
            offset = data.offset
            data.skip(length)
            return InlineStream(name, offset, length)
        if tag == TAG_FILE:
            size = self._non_negative_i64("state file size")
            uri = data.read_utf()
            return FileStream(self.storage.resolve_absolute(uri), size, "file")
        if tag == TAG_RELATIVE_FILE:
            relative = data.read_utf()
            size = self._non_negative_i64("state file size")
            return FileStream(self.storage.resolve_relative(relative), size, "relative")
        if tag == TAG_EMPTY_SEGMENT_FILE:
            # File merging's empty handle is the tag alone (seen in Flink 2.3 checkpoints: an
            # operator without operator state gets a FileMergingOperatorStreamStateHandle over it).
            return None
        if tag == TAG_SEGMENT_FILE:
            start = self._non_negative_i64("segment start")
            size = self._non_negative_i64("segment size")
            data.read_i32()  # scope ordinal
            path = data.read_utf()
            data.read_utf()  # logical file id
            return FileStream(self.storage.resolve_absolute(path), size, "segment", start)
        raise data.error("a stream state handle", f"tag {tag}")

    def _non_negative_i64(self, what: str) -> int:
        at = self.data.offset
        value = self.data.read_i64()
        if value < 0:
            raise self.data.error(f"a {what} >= 0", value, offset=at)
        return value

    def _key_groups_body(self, max_parallelism: int) -> tuple[int, tuple[int, ...], StreamHandle | None]:
        data = self.data
        at = data.offset
        start = data.read_i32()
        count = data.read_i32()
        if start < 0 or count < 0 or start + count > max_parallelism:
            raise data.error(
                f"a key-group range within the operator's key-groups 0..{max_parallelism - 1}",
                f"start {start}, count {count}",
                offset=at,
            )
        offsets_at = data.offset
        raw = data.read(8 * count)
        offsets = tuple(int.from_bytes(raw[i : i + 8], "big", signed=True) for i in range(0, len(raw), 8))
        stream = self._stream_handle()
        if stream is not None:
            check_key_group_offsets(offsets, stream.size, data.name, offsets_at)
        return start, offsets, stream

    def _keyed_handle(self, max_parallelism: int = MAX_KEY_GROUPS) -> KeyedHandle | None:
        data = self.data
        at = data.offset
        tag = self._tag(tuple(range(TAG_NULL, TAG_FILE_MERGING_OPERATOR_STREAM)))
        if tag == TAG_NULL:
            return None
        if tag in (TAG_KEY_GROUPS_V1, TAG_KEY_GROUPS_SAVEPOINT, TAG_KEY_GROUPS_V2):
            start, offsets, stream = self._key_groups_body(max_parallelism)
            if tag == TAG_KEY_GROUPS_V2:
                data.read_utf()  # state handle id
            kind = {
                TAG_KEY_GROUPS_V1: "legacy",
                TAG_KEY_GROUPS_SAVEPOINT: "savepoint",
                TAG_KEY_GROUPS_V2: "checkpoint",
            }[tag]
            if stream is None:
                return None
            return KeyGroupsHandle(kind, start, offsets, stream)
        if tag in (TAG_INCREMENTAL_V1, TAG_INCREMENTAL_V2):
            return self._incremental_handle(tag, max_parallelism)
        if tag in (TAG_CHANGELOG_V1, TAG_CHANGELOG_V2):
            start, count = data.read_i32(), data.read_i32()
            size = data.read_i64()
            if self.nesting >= MAX_HANDLE_NESTING:
                raise data.error(
                    f"changelog handles nested at most {MAX_HANDLE_NESTING} deep", "deeper nesting", offset=at
                )
            self.nesting += 1
            for _ in range(2):  # materialized, then non-materialized handles
                for _ in range(self._count("number of changelog handles", MAX_ENTRIES)):
                    self._keyed_handle(max_parallelism)
            self.nesting -= 1
            data.read_i64()  # materialization id
            if tag == TAG_CHANGELOG_V2:
                data.read_i64()  # checkpoint id
            data.read_utf()
            return UnsupportedKeyedHandle("changelog", start, count, size, _CHANGELOG_REASON)
        if tag == TAG_CHANGELOG_IN_MEMORY:
            start, count = data.read_i32(), data.read_i32()
            data.read_i64(), data.read_i64()
            size = 0
            for _ in range(self._count("number of changelog entries", MAX_ENTRIES)):
                data.read_i32()
                n = data.read_length("changelog entry length in bytes")
                data.skip(n)
                size += n
            data.read_utf()
            return UnsupportedKeyedHandle("changelog", start, count, size, _CHANGELOG_REASON)
        if tag in (TAG_CHANGELOG_STREAM_V1, TAG_CHANGELOG_STREAM_V2):
            start, count = data.read_i32(), data.read_i32()
            for _ in range(self._count("number of changelog streams", MAX_ENTRIES)):
                data.read_i64()
                self._stream_handle()
            size = data.read_i64()
            data.read_i64()
            data.read_utf()
            if tag == TAG_CHANGELOG_STREAM_V2:
                data.read_utf()
            return UnsupportedKeyedHandle("changelog", start, count, size, _CHANGELOG_REASON)
        raise data.error("a keyed state handle", f"tag {tag}", offset=at)

    def _incremental_handle(self, tag: int, max_parallelism: int) -> NativeRocksDBHandle:
        data = self.data
        checkpoint_id = data.read_i64()
        backend_id = data.read_utf()
        at = data.offset
        start, count = data.read_i32(), data.read_i32()
        if start < 0 or count < 0 or start + count > max_parallelism:
            raise data.error(
                f"a key-group range within max parallelism {max_parallelism}",
                f"start {start}, count {count}",
                offset=at,
            )
        size = self._non_negative_i64("checkpointed size") if tag == TAG_INCREMENTAL_V2 else 0
        meta_at = data.offset
        meta_stream = self._stream_handle()  # the keyed proxy header only
        files = []
        for shared in (True, False):
            for _ in range(self._count("number of RocksDB files", MAX_ENTRIES)):
                name_at = data.offset
                name = data.read_utf()
                if not name or "/" in name or "\\" in name or name in (".", ".."):
                    raise data.error("a RocksDB file name", repr(name), offset=name_at)
                stream = self._stream_handle()
                if stream is not None:
                    files.append(RocksDBFile(name, stream, shared))
        handle_id = data.read_utf() if tag == TAG_INCREMENTAL_V2 else ""
        if meta_stream is None:
            raise data.error(
                "the RocksDB handle's meta-data stream (its state names and serializers)", "null", offset=meta_at
            )
        return NativeRocksDBHandle(checkpoint_id, backend_id, start, count, size, meta_stream, tuple(files), handle_id)

    def _operator_handle(self) -> OperatorStreamHandle | None:
        data = self.data
        tag = self._tag((TAG_NULL, TAG_OPERATOR_STREAM, TAG_FILE_MERGING_OPERATOR_STREAM))
        if tag == TAG_NULL:
            return None
        entries = []
        offsets_at = []
        for _ in range(self._count("number of operator states", MAX_ENTRIES)):
            name = data.read_utf()
            at = data.offset
            mode = data.read_u8()
            if mode >= len(DISTRIBUTION_MODES):
                raise data.error(f"a distribution mode ordinal 0..{len(DISTRIBUTION_MODES) - 1}", mode, offset=at)
            n = self._count("number of offsets", MAX_ENTRIES)
            offsets_at.append(data.offset)
            raw = data.read(8 * n)
            offsets = tuple(int.from_bytes(raw[i : i + 8], "big", signed=True) for i in range(0, len(raw), 8))
            entries.append(OperatorStateEntry(name, DISTRIBUTION_MODES[mode], offsets))
        if tag == TAG_FILE_MERGING_OPERATOR_STREAM:
            data.read_utf(), data.read_utf()  # task-owned and shared directories
            data.read_bool()  # isEmpty
        stream = self._stream_handle()
        if stream is None:
            return None
        for entry, at in zip(entries, offsets_at):
            check_operator_offsets(entry, stream.size, data.name, at)
        return OperatorStreamHandle(tuple(entries), stream)

    def _channel_state_handle(self) -> None:
        data = self.data
        merged = False
        if self.version >= FIRST_VERSION_WITH_CHANNEL_STATE_V2:
            at = data.offset
            kind = data.read_u8()
            if kind not in (1, 2, 3, 4):
                raise data.error("a channel state handle kind 1..4", kind, offset=at)
            merged = kind in (3, 4)
        if merged:
            data.read_i32()
            data.read_i64()
            self._stream_handle()
            data.skip(data.read_length("channel offsets length in bytes"))
            return
        data.read_i32()
        data.read_i32(), data.read_i32()
        n = self._count("number of channel offsets", MAX_ENTRIES)
        data.skip(8 * n)
        data.read_i64()
        self._stream_handle()

    def _checkpoint_properties(self) -> tuple[str | None, str | None]:
        """The Java-serialized CheckpointProperties trailer: tells savepoint vs checkpoint and the format."""
        data = self.data
        at = data.offset
        blob = data.read(self.size - at)
        from statecat.statemeta.java.javaser import parse_java_object

        try:
            obj, consumed = parse_java_object(blob)
        except StatecatError as exc:
            raise FormatError(
                f"expected a Java-serialized CheckpointProperties trailer: {exc.message}",
                file=data.name,
                offset=at + (exc.offset or 0),
                hint=exc.hint,
            ) from exc
        if consumed != len(blob):
            raise FormatError(
                "expected end of file after the CheckpointProperties trailer", file=data.name, offset=at + consumed
            )
        checkpoint_type = obj.get("checkpointType") if isinstance(obj, dict) else None
        if not isinstance(checkpoint_type, dict):
            return None, None
        fmt = checkpoint_type.get("formatType")
        return checkpoint_type.get("name"), (fmt if isinstance(fmt, str) else None)


def check_key_group_offsets(offsets: tuple[int, ...], size: int, file: str, at: int | None) -> None:
    """Key-group offsets as Flink writes them: 0 (empty), else increasing starts inside the stream.

    Out-of-order or repeated starts would make a reader read a key-group's bytes twice or as
    another's; one past the end would read nothing. ``at`` is where the offsets lie in ``file``.
    """
    previous = 0
    for i, offset in enumerate(offsets):
        where = None if at is None else at + 8 * i
        if offset < 0:
            raise FormatError(
                f"expected key-group offset {i} to be >= 0, got {offset}",
                file=file,
                offset=where,
                hint="The _metadata file is damaged",
            )
        if offset == 0:
            continue
        if offset <= previous:
            raise FormatError(
                f"expected key-group offsets in increasing order, got {offset} after {previous}",
                file=file,
                offset=where,
                hint="The _metadata file is damaged",
            )
        if offset >= size:
            raise FormatError(
                f"expected key-group offset {i} inside the {size}-byte state stream, got {offset}",
                file=file,
                offset=where,
                hint="The _metadata file is damaged",
            )
        previous = offset


def check_operator_offsets(entry: OperatorStateEntry, size: int, file: str, at: int | None) -> None:
    """An operator state's element offsets must lie inside its stream."""
    for i, offset in enumerate(entry.offsets):
        if not 0 <= offset < size:
            raise FormatError(
                f"expected offset {i} of operator state {entry.name!r} inside the {size}-byte state "
                f"stream, got {offset}",
                file=file,
                offset=None if at is None else at + 8 * i,
                hint="The _metadata file is damaged",
            )


def _has_savepoint_key_groups(operators: tuple[OperatorState, ...]) -> bool:
    return any(
        isinstance(subtask.managed_keyed, KeyGroupsHandle) and subtask.managed_keyed.kind == "savepoint"
        for op in operators
        for subtask in op.subtasks
    )


_CHANGELOG_REASON = "changelog state backend handles are not supported yet; disable the changelog backend and take a canonical savepoint"
