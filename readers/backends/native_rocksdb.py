"""Keyed state kept as native RocksDB files: retained RocksDB checkpoints and NATIVE savepoints.

Flink's RocksDB backend keeps one column family per state; a key is the composite key of a
canonical savepoint (key-group prefix, key, namespace, MapState user key) and a value is the
canonical value (a ListState's elements joined by ',' through merge operands). So each state's
entries of one key-group are read from the instance's SST files (``readers/backends/sst``: newest version
wins, deletions hide, merge operands combine as RocksDB itself would) and handed to the scanner
framed like a canonical key-group (``u16 state id``, then ``i32 length``-prefixed key and value
pairs, the last key flagged): one decoder serves both layouts.
"""

from __future__ import annotations

import functools
import io
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from statecat.readers.backends.framing import frame_runs
from statecat.readers.backends.native_merge import MERGE_UNSUPPORTED_TYPE, MergeFailure, Runs
from statecat.readers.backends.sst import ColumnFamilyView, SstFile
from statecat.readers.backends.sst.format import RANGE_DEL_BLOCK
from statecat.statemeta.errors import FormatError, StatecatError, UnsupportedError
from statecat.statemeta.files.headers import open_stream
from statecat.statemeta.files.metadata import FileStream, InlineStream, NativeRocksDBHandle, RocksDBFile
from statecat.statemeta.files.storage import Storage
from statecat.statemeta.model import KeyedLocation

if TYPE_CHECKING:
    import numpy as np

    from statecat.statemeta.files.storage import StateFile

# Small SSTs (inline handles inside _metadata) are read into memory whole; larger ones are read
# through the file, block by block.
INLINE_READ_LIMIT = 1 << 20
SST_READ_BUFFER = 4096


@dataclass(frozen=True)
class _SstRef:
    file: RocksDBFile
    display: str
    column_family: str


def key_group_prefix(key_group: int, prefix_bytes: int) -> bytes:
    return key_group.to_bytes(prefix_bytes, "big")


class NativeInstance:
    """The SST files of one RocksDB handle, with the column family each belongs to."""

    def __init__(self, storage: Storage, handle: NativeRocksDBHandle, *, verify_checksums: bool = True) -> None:
        self.storage = storage
        self.handle = handle
        self.verify_checksums = verify_checksums
        self.bytes_read = 0
        self._column_families = _column_families(storage, handle)

    @property
    def description(self) -> str:
        first, last = self.handle.key_group_range
        return f"RocksDB instance {self.handle.backend_id or '?'} (key-groups {first}..{last})"

    def files_of(self, column_family: str) -> list[_SstRef]:
        return [ref for ref in self._column_families if ref.column_family == column_family]

    def column_family_names(self) -> list[str]:
        return sorted({ref.column_family for ref in self._column_families})

    def column_family(self, name: str) -> ColumnFamilyReader:
        """The column family's SST files, open until the reader is closed."""
        files, sources = [], []
        try:
            for ref in self.files_of(name):
                sst, source = _open_sst(self.storage, ref.file, self.verify_checksums)
                files.append(sst)
                sources.append(source)
        except BaseException:
            for source in sources:
                source.close()
            raise
        return ColumnFamilyReader(self, name, files, sources)


def _column_families(storage: Storage, handle: NativeRocksDBHandle) -> tuple[_SstRef, ...]:
    return _column_families_cached(_StorageKey(storage), handle)


@functools.lru_cache(maxsize=64)
def _column_families_cached(key: _StorageKey, handle: NativeRocksDBHandle) -> tuple[_SstRef, ...]:
    """Each SST file with its column family (from its properties block), once per instance: every
    state of the instance and every key read needs it."""
    refs = []
    for file in handle.sst_files:
        sst, source = _open_sst(key.storage, file, True)
        with source:
            name = sst.column_family
        # ignore: a file without a text name (no or damaged properties) matches no state, silently.
        refs.append(_SstRef(file, _display(key.storage, file), name))  # type: ignore[arg-type]
    return tuple(refs)


class _StorageKey:
    """A storage as a cache key (pyarrow filesystems are not hashable): its URI, directory and roots."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self._identity = (storage.uri, storage.directory, storage.allowed_roots)

    def __hash__(self) -> int:
        return hash(self._identity)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _StorageKey) and self._identity == other._identity


def _display(storage: Storage, file: RocksDBFile) -> str:
    stream = file.stream
    if isinstance(stream, InlineStream):
        return f"{storage.display(storage.metadata_path)} (inline {file.name} at byte {stream.offset})"
    return f"{storage.display(stream.path)} ({file.name})"


def _open_sst(
    storage: Storage, file: RocksDBFile, verify_checksums: bool
) -> tuple[SstFile, StateFile | _Window | io.BytesIO]:
    """An SstFile over the file's bytes, and the source to close afterwards."""
    size = file.stream.size
    display = _display(storage, file)
    source: StateFile | _Window | io.BytesIO
    if isinstance(file.stream, FileStream) and file.stream.start == 0:
        # SST reads jump between footer, index and data blocks: a small buffer reads little more.
        source = storage.open(file.stream.path, buffer_size=SST_READ_BUFFER)
    else:
        stream, name, base = open_stream(storage, file.stream, 0)
        # A segment of a larger file (inline bytes of _metadata, a file-merging segment).
        with stream:
            if size > INLINE_READ_LIMIT:
                path = storage.metadata_path if isinstance(file.stream, InlineStream) else file.stream.path
                source = _Window(storage.open(path), base, size)
            else:
                data = stream.read(size)
                if len(data) != size:
                    raise FormatError(
                        f"expected {size} bytes of the SST file {file.name}, got {len(data)}",
                        file=name,
                        offset=base + len(data),
                        hint="The snapshot's file is truncated",
                    )
                source = io.BytesIO(data)
    try:
        return SstFile(source, display, size, verify_checksums=verify_checksums), source
    except BaseException:
        source.close()
        raise


class _Window(io.RawIOBase):
    """Bytes [base, base + size) of a file, seekable from 0."""

    def __init__(self, raw: StateFile, base: int, size: int) -> None:
        self.raw, self.base, self.size, self.position = raw, base, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, position: int, whence: int = io.SEEK_SET) -> int:
        self.position = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.size}[whence] + position
        return self.position

    def read(self, n: int | None = -1) -> bytes:
        n = self.size - self.position if n is None or n < 0 else min(n, self.size - self.position)
        if n <= 0:
            return b""
        self.raw.seek(self.base + self.position)
        data = self.raw.read(n)
        self.position += len(data)
        return data

    def close(self) -> None:
        self.raw.close()
        super().close()


def column_family_bytes(storage: Storage, handle: NativeRocksDBHandle) -> dict[str, int]:
    """Bytes of each column family's SST files (each SST file belongs to one column family)."""
    sizes: dict[str, int] = {}
    for ref in _column_families(storage, handle):
        sizes[ref.column_family] = sizes.get(ref.column_family, 0) + ref.file.stream.size
    return sizes


# --------------------------------------------------------------------------- key-groups


def framed_key_groups(
    instance: NativeInstance,
    location: KeyedLocation,
    column_family: str,
    prefix_bytes: int,
    key_groups: set[int] | None,
    seeks: dict[int, list[bytes | None]] | None = None,
) -> Iterator[tuple[int, bytes]]:
    """(key-group, its entries) of the state's non-empty key-groups, in order.

    One key-group at a time (memory bounded by a key-group, as for savepoints); each file's index
    names the data blocks that can hold it. ``seeks``: key-group -> the serialized keys wanted in
    it (None where a key's bytes are not known): then only the blocks that can hold those keys
    are read, and the entries of other keys there may come along (the scanner filters them)."""
    first = location.start_key_group
    wanted = [g for g in range(first, first + location.num_key_groups) if key_groups is None or g in key_groups]
    if not wanted:
        return
    with instance.column_family(column_family) as reader:
        for key_group in wanted:
            keys = seeks.get(key_group) if seeks is not None else None
            data = reader.key_group(key_group, prefix_bytes, location.state_id, keys)
            if data:
                yield key_group, data


class ColumnFamilyReader:
    """A column family's open SST files, read one key-group at a time."""

    def __init__(self, instance: NativeInstance, name: str, files: list, sources: list) -> None:
        self.instance = instance
        self.name = name
        self.files = files
        self.sources = sources
        # Range deletions (Flink clips a rescaled instance with them) go through the general view.
        self.view = ColumnFamilyView(files) if any(RANGE_DEL_BLOCK in f.metaindex for f in files) else None

    def key_group(self, key_group: int, prefix_bytes: int, state_id: int, keys: list | None = None) -> bytes:
        """The state's live entries of one key-group (empty bytes: none); with ``keys`` (their
        serialized bytes) only those of the one key given, when exactly one is."""
        lower = key_group_prefix(key_group, prefix_bytes)
        upper = key_group_prefix(key_group + 1, prefix_bytes) if key_group + 1 < 256**prefix_bytes else None
        if keys is not None and len(keys) == 1 and keys[0] is not None:
            # Every composite key of that key starts with the prefix and its serialized bytes.
            lower = lower + keys[0]
            upper = _successor(lower) or upper
        if self.view is None:
            spans = [f.data_span(lower, upper) for f in self.files]
            runs = Runs([[span] if span is not None else [] for span in spans])
            runs.restrict(lower, upper)
            try:
                resolved = runs.resolved()
            except MergeFailure as failure:
                raise (UnsupportedError if failure.error == MERGE_UNSUPPORTED_TYPE else FormatError)(
                    f"{failure} (value type {failure.value_type}) in column family {self.name!r}, key-group "
                    f"{key_group}",
                    file=self.instance.description,
                    hint="The SST files are damaged, or were not written by Flink's RocksDB backend",
                ) from None
            if resolved is not None:
                buffer, *positions = resolved
                return NativeKeyGroup.of(buffer, positions) if positions[0].shape[0] else b""
        # Range deletions (Flink clips a rescaled instance with them) and very long keys.
        view = self.view or ColumnFamilyView(self.files)
        entries = list(view.entries(lower, upper))
        return frame_key_group(state_id, entries) if entries else b""

    def close(self) -> None:
        for sst, source in zip(self.files, self.sources):
            self.instance.bytes_read += sst.bytes_read
            source.close()

    def __enter__(self) -> ColumnFamilyReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _successor(prefix: bytes) -> bytes | None:
    """The smallest byte string above every string starting with ``prefix`` (None: there is none)."""
    trimmed = prefix.rstrip(b"\xff")
    if not trimmed:
        return None
    return trimmed[:-1] + bytes((trimmed[-1] + 1,))


class NativeKeyGroup(bytes):
    """A key-group's decoded keys and values with each live entry's positions in them
    (key at, key length, value at, value length), as the scanner's walk of a canonical
    key-group would give them: the scanner takes the positions instead of walking."""

    positions: list

    @classmethod
    def of(cls, buffer: np.ndarray, positions: list[np.ndarray]) -> NativeKeyGroup:
        data = cls(buffer)  # one copy, straight from the array's memory
        data.positions = positions
        return data


def frame_key_group(state_id: int, entries: list[tuple[bytes, bytes]]) -> bytes:
    """One state's entries of a key-group in the canonical framing (docs: key-group data, framing)."""
    return frame_runs([(state_id, entries)])


__all__ = ["NativeInstance", "framed_key_groups", "key_group_prefix", "StatecatError"]
