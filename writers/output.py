"""DST's streams: new ones written front to back, SRC's untouched bytes copied unread, and every
file durable before ``_metadata`` names it.

A byte range of a local SRC file is copied by the kernel (``os.copy_file_range``: no bytes pass
through Python, and a filesystem that shares extents shares them); any other storage, or a kernel
without that call, in chunks through this process. Either way the range must be there in full: a
file shorter than its handle says is a truncated snapshot, reported with the file and the offset.
Finished files are fsync'ed in background threads while the next ones are written.
"""

from __future__ import annotations

import contextlib
import errno
import os
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO

from statecat.statemeta.errors import StatecatError
from statecat.statemeta.files.headers import open_stream
from statecat.statemeta.files.metadata import FileStream, InlineStream, StreamHandle
from statecat.statemeta.files.storage import Storage, regular_file_size
from statecat.writers.metadata_writer import InlineData, RelativeFile, WrittenStream

if TYPE_CHECKING:
    from statecat.statemeta.model import StateMeta
    from statecat.writers.savepoint_writer import WriteSummary

# Flink's default execution.checkpointing.data-inline-threshold: smaller streams live in _metadata.
INLINE_THRESHOLD = 20 * 1024


@dataclass(frozen=True)
class StoredSpan:
    """A key-group's bytes left where SRC stores them: ``length`` bytes at ``offset`` in its stream."""

    offset: int
    length: int


class Output:
    """The savepoint directory being written: new streams inline when small, else UUID-named files.
    Finished files reach the disk (fsync) in background threads while the next ones are written:
    the waiting overlaps the work; ``_metadata`` is written only once every one of them is durable."""

    def __init__(self, directory: str, summary: WriteSummary) -> None:
        self.directory = directory
        self.summary = summary
        self.open_sinks: set[StreamSink] = set()
        self.syncs: list[Future[None]] = []
        self.syncer: ThreadPoolExecutor | None = None

    def __enter__(self) -> Output:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        # A failed write (a full disk, a signal) keeps no file open: an open file of the removed
        # directory would hold its space, and its mount busy, until the garbage collector ran.
        for sink in list(self.open_sinks):
            sink.close()
        if self.syncer is not None:
            self.syncer.shutdown(wait=True, cancel_futures=exc_type is not None)
        if exc_type is None:
            self.wait_synced()

    def sync_later(self, path: str) -> None:
        if self.syncer is None:
            self.syncer = ThreadPoolExecutor(max_workers=2, thread_name_prefix="statecat-fsync")
        self.syncs.append(self.syncer.submit(_fsync_file, path))

    def wait_synced(self) -> None:
        """Every file finished so far is on disk (the first fsync error raised)."""
        syncs, self.syncs = self.syncs, []
        for sync in syncs:
            sync.result()

    def write_file(self, name: str, data: bytes) -> None:
        with open(os.path.join(self.directory, name), "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        self.summary.bytes_written += len(data)

    def inline_copy(self, meta: StateMeta, handle: StreamHandle) -> InlineData:
        name = handle.name if isinstance(handle, InlineStream) else str(uuid.uuid4())
        return InlineData(name, read_all(meta, handle))

    def copy(self, meta: StateMeta, handle: StreamHandle) -> WrittenStream:
        """A stream's bytes unchanged, where they were: inline stays inline, a file becomes a file."""
        self.summary.streams_copied += 1
        if isinstance(handle, InlineStream):
            data = read_all(meta, handle)
            self.summary.bytes_written += len(data)
            return InlineData(handle.name, data)
        sink = self.new_stream()
        sink.copy_range(meta.storage, handle, 0, handle.size)
        return sink.finish(keep_file=True)

    def new_stream(self) -> StreamSink:
        return StreamSink(self)


class StreamSink:
    """One new stream written front to back into a file; small results move inline at the end."""

    def __init__(self, output: Output) -> None:
        self.output = output
        self.name = str(uuid.uuid4())
        self.path = os.path.join(output.directory, self.name)
        self.file = open(self.path, "wb")  # noqa: SIM115 (closed in finish, or by the output's end)
        output.open_sinks.add(self)
        self.position = 0
        # A byte range of SRC not copied yet: adjacent ranges of one stream are copied as one.
        self.pending: tuple[Storage, StreamHandle, int, int] | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._copy_pending()
        self.file.write(data)
        self.position += len(data)

    def copy_range(self, storage: Storage, handle: StreamHandle, start: int, length: int) -> None:
        """Appends ``length`` bytes of a stored stream from ``start``, unread (``copy_range`` below)."""
        pending = self.pending
        if pending is not None and pending[1] is handle and pending[2] + pending[3] == start:
            self.pending = (storage, handle, pending[2], pending[3] + length)
        else:
            self._copy_pending()
            self.pending = (storage, handle, start, length)
        self.position += length

    def _copy_pending(self) -> None:
        if self.pending is not None:
            storage, handle, start, length = self.pending
            self.pending = None
            copy_range(storage, handle, start, length, self.file)

    def close(self) -> None:
        self.output.open_sinks.discard(self)
        with contextlib.suppress(OSError):  # the error that stopped the write is the one to report
            self.file.close()

    def finish(self, keep_file: bool = False) -> WrittenStream:
        self._copy_pending()
        self.file.close()
        self.output.open_sinks.discard(self)
        self.output.summary.bytes_written += self.position
        if keep_file or self.position >= INLINE_THRESHOLD:
            self.output.sync_later(self.path)
            return RelativeFile(self.name, self.position)
        with open(self.path, "rb") as f:
            data = f.read()
        os.unlink(self.path)
        return InlineData(self.name, data)


def _fsync_file(path: str) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def read_all(meta: StateMeta, handle: StreamHandle) -> bytes:
    stream, name, base = open_stream(meta.storage, handle, 0)
    with stream:
        data = stream.read(handle.size)
    if len(data) != handle.size:
        raise StatecatError(
            f"expected {handle.size} bytes of state, got {len(data)} before the end of the file",
            file=name,
            offset=base + len(data),
            hint="The state file is truncated",
        )
    return data


# ----------------------------------------------------------------------------- byte ranges of SRC

COPY_CHUNK = 1 << 20
# Errors meaning "no in-kernel copy here" (another filesystem, an old kernel, a special file):
# the chunked copy then does the work.
_NO_KERNEL_COPY = {errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL, errno.EBADF, errno.ETXTBSY, errno.EPERM}


def copy_range(storage: Storage, handle: StreamHandle, start: int, length: int, sink: BinaryIO) -> None:
    """Appends ``length`` bytes of ``handle``'s stream, from ``start`` within it, to ``sink`` (a
    file open for writing at its end; flushed first when the kernel copies)."""
    if length <= 0:
        return
    if storage.is_local and hasattr(os, "copy_file_range"):
        local = _local_file(storage, handle)
        if local is not None and _kernel_copy(storage, local[0], local[1] + start, length, sink):
            return
    _chunked_copy(storage, handle, start, length, sink)


def _local_file(storage: Storage, handle: StreamHandle) -> tuple[str, int] | None:
    """The handle's file as an OS path (confined to the snapshot, a regular file) and the offset
    its stream starts at, or None when its bytes live elsewhere (inline in _metadata, another filesystem)."""
    if not isinstance(handle, FileStream) or "://" in handle.path:
        return None
    filesystem, target = storage.confine(handle.path)
    regular_file_size(filesystem, target, storage.display(handle.path))
    return target, handle.start


def _kernel_copy(storage: Storage, path: str, offset: int, length: int, sink: BinaryIO) -> bool:
    """True once the range is copied; False when this file system or kernel cannot (nothing written)."""
    sink.flush()
    out = sink.fileno()
    copied = 0
    with open(path, "rb") as source:
        while copied < length:
            try:
                n = os.copy_file_range(source.fileno(), out, length - copied, offset + copied)
            except OSError as exc:
                if copied == 0 and exc.errno in _NO_KERNEL_COPY:
                    return False
                raise
            if n == 0:
                raise _truncated(storage.display(path), offset + copied, length - copied)
            copied += n
    # copy_file_range writes at the descriptor's offset and moves it; the file object follows.
    sink.seek(0, os.SEEK_END)
    return True


def _chunked_copy(storage: Storage, handle: StreamHandle, start: int, length: int, sink: BinaryIO) -> None:
    stream, name, base = open_stream(storage, handle, start)
    with stream:
        remaining = length
        while remaining:
            chunk = stream.read(min(COPY_CHUNK, remaining))
            if not chunk:
                raise _truncated(name, base + start + length - remaining, remaining)
            sink.write(chunk)
            remaining -= len(chunk)


def _truncated(file: str, offset: int, missing: int) -> StatecatError:
    return StatecatError(
        f"expected {missing} more bytes of state, the file ends at offset {offset}",
        file=file,
        offset=offset,
        hint="The state file is truncated",
    )
