"""Keyed state kept as native RocksDB files: retained RocksDB checkpoints and NATIVE savepoints.

Flink's RocksDB backend keeps one column family per state; a key is the composite key of a
canonical savepoint (key-group prefix, key, namespace, MapState user key) and a value is the
canonical value (a ListState's elements joined by ',' through merge operands). So each state's
entries of one key-group are read from the instance's SST files (``readers/sst``: newest version
wins, deletions hide, merge operands combine as RocksDB itself would) and handed to the scanner
framed like a canonical key-group (``u16 state id``, then ``i32 length``-prefixed key and value
pairs, the last key flagged): one decoder serves both layouts.
"""

from __future__ import annotations

import functools
import io
import struct
from collections.abc import Iterator
from dataclasses import dataclass

from statecat.readers.sst import ColumnFamilyView, SstFile
from statecat.statemeta.errors import FormatError, StatecatError
from statecat.statemeta.headers import open_stream
from statecat.statemeta.metadata import InlineStream, NativeRocksDBHandle, RocksDBFile
from statecat.statemeta.model import KeyedLocation
from statecat.statemeta.storage import Storage

# The canonical key-group framing of readers/scan.py: a state run ends with its last key's first
# byte flagged and the 0xFFFF end marker.
META_DATA_FOLLOWS_FLAG = 0x80
END_OF_KEY_GROUP = 0xFFFF
# Small SSTs (inline handles inside _metadata) are read into memory whole; larger ones are read
# through the file, block by block.
INLINE_READ_LIMIT = 1 << 20


@dataclass(frozen=True)
class _SstRef:
    file: RocksDBFile
    display: str
    column_family: str


def key_group_prefix(key_group: int, prefix_bytes: int) -> bytes:
    return key_group.to_bytes(prefix_bytes, "big")


class NativeInstance:
    """The SST files of one RocksDB handle, with the column family each belongs to."""

    def __init__(self, storage: Storage, handle: NativeRocksDBHandle, *, verify_checksums: bool = True):
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

    def entries(self, column_family: str, lower: bytes | None, upper: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) of the column family in [lower, upper), as RocksDB would return them."""
        refs = self.files_of(column_family)
        if not refs:
            return
        opened = [_open_sst(self.storage, ref.file, self.verify_checksums) for ref in refs]
        try:
            view = ColumnFamilyView([sst for sst, _ in opened])
            yield from view.entries(lower, upper)
        finally:
            for sst, source in opened:
                self.bytes_read += sst.bytes_read
                source.close()


def _column_families(storage: Storage, handle: NativeRocksDBHandle) -> tuple[_SstRef, ...]:
    return _column_families_cached(_StorageKey(storage), handle)


@functools.lru_cache(maxsize=64)
def _column_families_cached(key: "_StorageKey", handle: NativeRocksDBHandle) -> tuple[_SstRef, ...]:
    """Each SST file with its column family (from its properties block), once per instance: every
    state of the instance and every key read needs it."""
    refs = []
    for file in handle.sst_files:
        sst, source = _open_sst(key.storage, file, True)
        with source:
            name = sst.column_family
        refs.append(_SstRef(file, _display(key.storage, file), name))
    return tuple(refs)


class _StorageKey:
    """A storage as a cache key (pyarrow filesystems are not hashable): its URI, directory and roots."""

    def __init__(self, storage: Storage):
        self.storage = storage
        self._identity = (storage.uri, storage.directory, storage.allowed_roots)

    def __hash__(self):
        return hash(self._identity)

    def __eq__(self, other):
        return isinstance(other, _StorageKey) and self._identity == other._identity


def _display(storage: Storage, file: RocksDBFile) -> str:
    stream = file.stream
    if isinstance(stream, InlineStream):
        return f"{storage.display(storage.metadata_path)} (inline {file.name} at byte {stream.offset})"
    return f"{storage.display(stream.path)} ({file.name})"


def _open_sst(storage, file: RocksDBFile, verify_checksums: bool):
    """An SstFile over the file's bytes, and the source to close afterwards."""
    stream, name, base = open_stream(storage, file.stream, 0)
    size = file.stream.size
    display = _display(storage, file)
    if base == 0 and not isinstance(file.stream, InlineStream):
        source = stream
    else:
        # A segment of a larger file (inline bytes of _metadata, a file-merging segment).
        with stream:
            if size > INLINE_READ_LIMIT:
                source = _Window(storage.open(file.stream.path), base, size)
            else:
                data = stream.read(size)
                if len(data) != size:
                    raise FormatError(f"expected {size} bytes of the SST file {file.name}, got {len(data)}",
                                      file=name, offset=base + len(data), hint="The snapshot's file is truncated")
                source = io.BytesIO(data)
    try:
        return SstFile(source, display, size, verify_checksums=verify_checksums), source
    except BaseException:
        source.close()
        raise


class _Window(io.RawIOBase):
    """Bytes [base, base + size) of a file, seekable from 0."""

    def __init__(self, raw, base: int, size: int):
        self.raw, self.base, self.size, self.position = raw, base, size, 0

    def readable(self):
        return True

    def seekable(self):
        return True

    def tell(self):
        return self.position

    def seek(self, position, whence=io.SEEK_SET):
        self.position = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.size}[whence] + position
        return self.position

    def read(self, n=-1):
        n = self.size - self.position if n is None or n < 0 else min(n, self.size - self.position)
        if n <= 0:
            return b""
        self.raw.seek(self.base + self.position)
        data = self.raw.read(n)
        self.position += len(data)
        return data

    def close(self):
        self.raw.close()
        super().close()


def column_family_bytes(storage: Storage, handle: NativeRocksDBHandle) -> dict[str, int]:
    """Bytes of each column family's SST files (each SST file belongs to one column family)."""
    sizes: dict[str, int] = {}
    for ref in _column_families(storage, handle):
        sizes[ref.column_family] = sizes.get(ref.column_family, 0) + ref.file.stream.size
    return sizes


# --------------------------------------------------------------------------- key-groups


def framed_key_groups(instance: NativeInstance, location: KeyedLocation, column_family: str, prefix_bytes: int,
                      key_groups: set[int] | None) -> Iterator[tuple[int, bytes]]:
    """(key-group, canonical-framed bytes) of the state's non-empty key-groups, in order.

    Runs of wanted key-groups are read as one key range, so a full scan walks every SST block
    once; a key read touches only the blocks the index names for its key-group."""
    first = location.start_key_group
    last = first + location.num_key_groups - 1
    wanted = [g for g in range(first, last + 1) if key_groups is None or g in key_groups]
    for run_start, run_end in _runs(wanted):
        lower = key_group_prefix(run_start, prefix_bytes)
        upper = key_group_prefix(run_end + 1, prefix_bytes) if run_end + 1 < 256 ** prefix_bytes else None
        current = None
        entries: list[tuple[bytes, bytes]] = []
        for key, value in instance.entries(column_family, lower, upper):
            if len(key) < prefix_bytes:
                raise FormatError(f"expected a key of at least its {prefix_bytes}-byte key-group prefix, got "
                                  f"{len(key)} bytes in column family {column_family!r}",
                                  file=instance.description, hint="The SST files are damaged")
            key_group = int.from_bytes(key[:prefix_bytes], "big")
            if key_group != current:
                if entries:
                    yield current, frame_key_group(location.state_id, entries)
                current, entries = key_group, []
            entries.append((key, value))
        if entries:
            yield current, frame_key_group(location.state_id, entries)


def frame_key_group(state_id: int, entries: list[tuple[bytes, bytes]]) -> bytes:
    """One state's entries of a key-group in the canonical framing (docs: key-group data, framing)."""
    out = [struct.pack(">H", state_id)]
    last = len(entries) - 1
    for i, (key, value) in enumerate(entries):
        if i == last:
            key = bytes((key[0] | META_DATA_FOLLOWS_FLAG,)) + key[1:]
        out += (struct.pack(">i", len(key)), key, struct.pack(">i", len(value)), value)
    out.append(struct.pack(">H", END_OF_KEY_GROUP))
    return b"".join(out)


def _runs(values: list[int]) -> Iterator[tuple[int, int]]:
    start = previous = None
    for value in values:
        if start is None:
            start = previous = value
        elif value == previous + 1:
            previous = value
        else:
            yield start, previous
            start = previous = value
    if start is not None:
        yield start, previous


__all__ = ["NativeInstance", "framed_key_groups", "key_group_prefix", "StatecatError"]
