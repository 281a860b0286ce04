"""Is every state file a snapshot's ``_metadata`` refers to there, at full length?

A savepoint copied in file by file (or a checkpoint still being written) can have a complete
``_metadata`` whose state files are missing or still short. Each file handle records its size
(and a file-merging segment its start), and the key-group and operator-state offsets lie inside
that size, so a file at least ``start + size`` bytes long holds every byte the handles point at.

Native RocksDB and changelog handles do not keep their file list in the model: their files are
not checked (statecat does not read them either).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow.fs as pafs

from statecat.statemeta.errors import StateFileError
from statecat.statemeta.files.metadata import (
    CheckpointMetadata,
    FileStream,
    KeyedHandle,
    KeyGroupsHandle,
    NativeRocksDBHandle,
    OperatorStreamHandle,
    StreamHandle,
)
from statecat.statemeta.files.storage import Storage


@dataclass(frozen=True)
class Shortfall:
    """A referenced file that is missing (``actual`` None) or shorter than its handles need."""

    path: str  # as the user would write it
    needed: int
    actual: int | None

    def __str__(self) -> str:
        if self.actual is None:
            return f"{self.path} is missing ({self.needed} bytes expected)"
        return f"{self.path} has {self.actual} of {self.needed} bytes"


def required_sizes(metadata: CheckpointMetadata) -> dict[str, int]:
    """Every state file the handles refer to, with the least size that holds all their bytes."""
    needed: dict[str, int] = {}

    def need(stream: StreamHandle | None, offsets: tuple[int, ...] = ()) -> None:
        if not isinstance(stream, FileStream):
            return  # inline bytes live in _metadata itself
        end = stream.start + stream.size
        if offsets:  # the parser keeps offsets inside the stream; a file must hold them regardless
            end = max(end, stream.start + max(offsets) + 1)
        needed[stream.path] = max(needed.get(stream.path, 0), end)

    # The loops below give the name operator handles first, then keyed handles.
    handle: OperatorStreamHandle | KeyedHandle | None
    for op in metadata.operators:
        need(op.coordinator)
        for subtask in op.subtasks:
            for handle in (subtask.managed_operator, subtask.raw_operator):
                if isinstance(handle, OperatorStreamHandle):
                    need(handle.stream, tuple(o for entry in handle.entries for o in entry.offsets))
            for handle in (subtask.managed_keyed, subtask.raw_keyed):
                if isinstance(handle, KeyGroupsHandle):
                    need(handle.stream, handle.offsets)
                elif isinstance(handle, NativeRocksDBHandle):
                    need(handle.meta_stream)
                    for file in handle.files:
                        need(file.stream)
    return needed


def shortfalls(storage: Storage, needed: dict[str, int]) -> list[Shortfall]:
    """The files of ``needed`` that are missing or short, by one stat each (no file is opened).

    A path the snapshot may not read, or one that is not a regular file, raises ``StateFileError``:
    waiting would not make it readable.
    """
    short = []
    for path, size in needed.items():
        filesystem, target = storage.confine(path)
        try:
            info = filesystem.get_file_info(target)
        except OSError as exc:
            raise StateFileError(f"cannot read state file: {exc}", file=storage.display(path)) from exc
        if info.type == pafs.FileType.NotFound:
            short.append(Shortfall(storage.display(path), size, None))
        elif info.type != pafs.FileType.File:
            raise StateFileError(
                "state file referenced by _metadata is not a regular file",
                file=storage.display(path),
                hint="statecat reads regular files only",
            )
        elif info.size < size:
            short.append(Shortfall(storage.display(path), size, info.size))
    return short
