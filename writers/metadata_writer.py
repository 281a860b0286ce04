"""Writes a savepoint's ``_metadata``: the inverse of ``statemeta/files/metadata.py`` for what a canonical
savepoint holds.

A written savepoint is self-contained: its streams are inline (ByteStreamStateHandle) or files next
to ``_metadata`` (RelativeFileStateHandle), its keyed state is KeyGroupsSavepointStateHandles (tag
7), its operator state OperatorStreamStateHandles (tag 4). The layout follows the version: names
and uids from 5, the CheckpointProperties trailer from 4, a reference-checkpoint marker per subtask
from 7.
"""

from __future__ import annotations

from dataclasses import dataclass

from statecat.statemeta.binary import DataOutput
from statecat.statemeta.errors import UnsupportedError
from statecat.statemeta.files.metadata import (
    DISTRIBUTION_MODES,
    FIRST_VERSION_WITH_OPERATOR_NAMES,
    FIRST_VERSION_WITH_PROPERTIES,
    FIRST_VERSION_WITH_REF_CHECKPOINT,
    METADATA_MAGIC,
    METADATA_VERSION_RELEASES,
    SUPPORTED_METADATA_VERSIONS,
    TAG_BYTE_STREAM,
    TAG_KEY_GROUPS_SAVEPOINT,
    TAG_NULL,
    TAG_OPERATOR_STREAM,
    TAG_RELATIVE_FILE,
    OperatorStateEntry,
)
from statecat.statemeta.java.javaser import JavaClass, JavaEnum, JavaObject, enum_class, write_java_object

# ----------------------------------------------------------------------------- the model written


@dataclass(frozen=True)
class InlineData:
    """A stream stored inside ``_metadata`` (tag 1). ``name`` is informational to Flink."""

    name: str
    data: bytes

    @property
    def size(self) -> int:
        return len(self.data)


@dataclass(frozen=True)
class RelativeFile:
    """A stream in a file next to ``_metadata`` (tag 6), named relative to the savepoint directory."""

    path: str
    size: int


WrittenStream = InlineData | RelativeFile


@dataclass(frozen=True)
class KeyGroupsOut:
    """Keyed state of key-groups [start, start + len(offsets)): each one's start in ``stream`` (0 = empty)."""

    start_key_group: int
    offsets: tuple[int, ...]
    stream: WrittenStream


@dataclass(frozen=True)
class OperatorStreamOut:
    entries: tuple[OperatorStateEntry, ...]
    stream: WrittenStream


@dataclass(frozen=True)
class SubtaskOut:
    index: int
    managed_operator: OperatorStreamOut | None = None
    raw_operator: OperatorStreamOut | None = None
    managed_keyed: KeyGroupsOut | None = None
    raw_keyed: KeyGroupsOut | None = None


@dataclass(frozen=True)
class OperatorOut:
    id: str  # 32 hex chars
    uid: str | None
    name: str | None
    parallelism: int
    max_parallelism: int
    coordinator: InlineData | None
    subtasks: tuple[SubtaskOut, ...]
    finished: bool = False
    finished_subtasks: tuple[int, ...] = ()


# ----------------------------------------------------------------------------- CheckpointProperties

# The classes as Flink 1.16–2.3 serialize them (checked byte for byte against real savepoints).
CHECKPOINT_PROPERTIES_CLASS = JavaClass(
    "org.apache.flink.runtime.checkpoint.CheckpointProperties",
    2,
    (
        ("discardCancelled", "Z"),
        ("discardFailed", "Z"),
        ("discardFinished", "Z"),
        ("discardSubsumed", "Z"),
        ("discardSuspended", "Z"),
        ("forced", "Z"),
        ("unclaimed", "Z"),
        ("checkpointType", "Lorg/apache/flink/runtime/checkpoint/SnapshotType;"),
    ),
)
SAVEPOINT_TYPE_CLASS = JavaClass(
    "org.apache.flink.runtime.checkpoint.SavepointType",
    -0x5F782CF75BA7EB48,  # 0xA087D308A45814B8
    (
        ("formatType", "Lorg/apache/flink/core/execution/SavepointFormatType;"),
        ("name", "Ljava/lang/String;"),
        ("postCheckpointAction", "Lorg/apache/flink/runtime/checkpoint/SavepointType$PostCheckpointAction;"),
    ),
)
SAVEPOINT_FORMAT_TYPE_CLASS = enum_class("org.apache.flink.core.execution.SavepointFormatType")
POST_CHECKPOINT_ACTION_CLASS = enum_class("org.apache.flink.runtime.checkpoint.SavepointType$PostCheckpointAction")

# What `flink savepoint` (a savepoint that leaves the job running) records; stop-with-savepoint
# records "Suspend Savepoint" / SUSPEND.
SAVEPOINT_NAME = "Savepoint"
SAVEPOINT_ACTION = "NONE"


def savepoint_properties(
    format_type: str = "CANONICAL", name: str = SAVEPOINT_NAME, post_checkpoint_action: str = SAVEPOINT_ACTION
) -> bytes:
    """The Java-serialized CheckpointProperties of a savepoint (metadata version 4 and later)."""
    savepoint_type = JavaObject(
        SAVEPOINT_TYPE_CLASS,
        (
            JavaEnum(SAVEPOINT_FORMAT_TYPE_CLASS, format_type),
            name,
            JavaEnum(POST_CHECKPOINT_ACTION_CLASS, post_checkpoint_action),
        ),
    )
    # A savepoint is forced and never discarded by Flink.
    return write_java_object(
        JavaObject(CHECKPOINT_PROPERTIES_CLASS, (False, False, False, False, False, True, False, savepoint_type))
    )


# ----------------------------------------------------------------------------- writing


def write_metadata(
    version: int,
    checkpoint_id: int,
    operators: tuple[OperatorOut, ...] | list[OperatorOut],
    *,
    properties: bytes | None = None,
) -> bytes:
    """The bytes of a canonical savepoint's ``_metadata`` in metadata ``version`` (3–7).
    ``properties``: the Java-serialized CheckpointProperties (version 4+); a plain canonical
    savepoint's by default."""
    if version not in SUPPORTED_METADATA_VERSIONS:
        supported = ", ".join(f"{v} (Flink {METADATA_VERSION_RELEASES[v]})" for v in SUPPORTED_METADATA_VERSIONS)
        raise UnsupportedError(f"cannot write _metadata version {version}; supported versions: {supported}")
    out = DataOutput()
    out.write(METADATA_MAGIC.to_bytes(4, "big"))
    out.write_i32(version)
    out.write_i64(checkpoint_id)
    out.write_i32(0)  # master states: Flink writes none
    out.write_i32(len(operators))
    for operator in operators:
        _operator(out, version, operator)
    if version >= FIRST_VERSION_WITH_PROPERTIES:
        out.write(properties if properties is not None else savepoint_properties())
    return out.getvalue()


def operator_id_bytes(operator_id: str) -> bytes:
    raw = bytes.fromhex(operator_id)
    if len(raw) != 16:
        raise UnsupportedError(f"expected an operator id of 32 hex characters, got {operator_id!r}")
    return raw


def _operator(out: DataOutput, version: int, operator: OperatorOut) -> None:
    if version >= FIRST_VERSION_WITH_OPERATOR_NAMES:
        out.write_utf(operator.name or "")
        out.write_utf(operator.uid or "")
    out.write(operator_id_bytes(operator.id))
    out.write_i32(operator.parallelism)
    out.write_i32(operator.max_parallelism)
    _stream(out, operator.coordinator)
    if operator.finished:
        out.write_i32(-1)
        return
    out.write_i32(len(operator.subtasks) + len(operator.finished_subtasks))
    for subtask in operator.subtasks:
        out.write_i32(subtask.index)
        _subtask(out, subtask, operator.max_parallelism)
        if version >= FIRST_VERSION_WITH_REF_CHECKPOINT:
            out.write_u8(0)  # no reference checkpoint: the state is this savepoint's own
    for index in operator.finished_subtasks:
        out.write_i32(-index - 1)
        if version >= FIRST_VERSION_WITH_REF_CHECKPOINT:
            out.write_u8(0)


def _subtask(out: DataOutput, subtask: SubtaskOut, max_parallelism: int) -> None:
    for operator_handle in (subtask.managed_operator, subtask.raw_operator):
        if operator_handle is None:
            out.write_i32(0)
        else:
            out.write_i32(1)
            _operator_handle(out, operator_handle)
    for keyed in (subtask.managed_keyed, subtask.raw_keyed):
        _keyed_handle(out, keyed, max_parallelism)
    out.write_i32(0)  # input channel state: savepoints have none
    out.write_i32(0)  # result subpartition state


def _stream(out: DataOutput, stream: WrittenStream | None) -> None:
    if stream is None:
        out.write_u8(TAG_NULL)
    elif isinstance(stream, InlineData):
        out.write_u8(TAG_BYTE_STREAM)
        out.write_utf(stream.name)
        out.write_i32(len(stream.data))
        out.write(stream.data)
    else:
        out.write_u8(TAG_RELATIVE_FILE)
        out.write_utf(stream.path)
        out.write_i64(stream.size)


def _keyed_handle(out: DataOutput, handle: KeyGroupsOut | None, max_parallelism: int) -> None:
    if handle is None:
        out.write_u8(TAG_NULL)
        return
    end = handle.start_key_group + len(handle.offsets)
    if handle.start_key_group < 0 or end > max_parallelism:
        raise UnsupportedError(
            f"key-groups {handle.start_key_group}..{end - 1} lie outside the operator's 0..{max_parallelism - 1}"
        )
    out.write_u8(TAG_KEY_GROUPS_SAVEPOINT)
    out.write_i32(handle.start_key_group)
    out.write_i32(len(handle.offsets))
    for offset in handle.offsets:
        out.write_i64(offset)
    _stream(out, handle.stream)


def _operator_handle(out: DataOutput, handle: OperatorStreamOut) -> None:
    out.write_u8(TAG_OPERATOR_STREAM)
    out.write_i32(len(handle.entries))
    for entry in handle.entries:
        out.write_utf(entry.name)
        out.write_u8(DISTRIBUTION_MODES.index(entry.mode))
        out.write_i32(len(entry.offsets))
        for offset in entry.offsets:
            out.write_i64(offset)
    _stream(out, handle.stream)
