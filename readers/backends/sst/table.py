"""One RocksDB block-based SST file, read lazily: footer, metaindex, properties and index on
demand, then only the data blocks a key range needs."""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

from statecat.readers.backends.sst.block import (
    HINT_DAMAGED,
    VALUES_DELTA_HANDLES,
    VALUES_LENGTH_PREFIXED,
    DecodedBlock,
    decode_block,
    decode_index_values,
    decode_joined_blocks,
    decode_span_fast,
    read_block_bytes,
)
from statecat.readers.backends.sst.format import (
    BLOCK_TRAILER_SIZE,
    BYTES_PROPERTIES,
    BYTEWISE_COMPARATOR,
    CHECKSUM_NAMES,
    COMPRESSION_DICT_BLOCK,
    FIXED32_PROPERTIES,
    FIXED64_PROPERTIES,
    FOOTER_LENGTH,
    INDEX_BINARY_SEARCH,
    INDEX_BINARY_SEARCH_WITH_FIRST_KEY,
    INDEX_BLOCK,
    INDEX_TWO_LEVEL,
    INDEX_TYPE_NAMES,
    PROPERTIES_BLOCK,
    PROPERTIES_BLOCK_OLD,
    RANGE_DEL_BLOCK,
    TYPE_RANGE_DELETION,
    UINT64_PROPERTIES,
    BlockHandle,
    VarintError,
    decode_block_handle,
    parse_footer,
    read_varint,
)
from statecat.statemeta.errors import FormatError, UnsupportedError

if TYPE_CHECKING:
    from statecat.readers.backends.sst.block import BlockSource


class SstFile:
    """A block-based SST file over a seekable binary ``source`` of ``size`` bytes; ``display``
    names it in errors. Reads the footer, metaindex and properties on construction.

    ``largest_seqno`` (the file's largest sequence number in the DB's MANIFEST) is only needed for
    files made by SstFileWriter and ingested: their keys are stored with sequence number 0 and
    RocksDB gives them all that one (``global_seqno``)."""

    def __init__(
        self,
        source: BlockSource,
        display: str,
        size: int,
        *,
        verify_checksums: bool = True,
        largest_seqno: int | None = None,
    ) -> None:
        self.source = source
        self.display = display
        self.size = size
        self.verify_checksums = verify_checksums
        self.bytes_read = 0
        tail_len = min(size, FOOTER_LENGTH)
        source.seek(size - tail_len)
        tail = source.read(tail_len)
        self.bytes_read += len(tail)
        if len(tail) != tail_len:
            raise FormatError(
                f"truncated: expected {tail_len} bytes of footer, got {len(tail)}",
                file=display,
                offset=size - tail_len,
                hint="The file is shorter than its stated size; copy it again",
            )
        self.footer = parse_footer(tail, size, display)
        self.format_version = self.footer.format_version
        self.checksum_type = CHECKSUM_NAMES[self.footer.checksum_type]
        self.metaindex = self._metaindex()
        self.properties = self._properties()
        self.column_family = self.properties.get("rocksdb.column.family.name")
        self.compression = self.properties.get("rocksdb.compression")
        comparator = self.properties.get("rocksdb.comparator", BYTEWISE_COMPARATOR)
        if comparator != BYTEWISE_COMPARATOR:
            raise UnsupportedError(
                f"SST file ordered by comparator {comparator!r}; statecat reads files ordered by "
                f"{BYTEWISE_COMPARATOR} (Flink's choice) only",
                file=display,
                hint="User-defined timestamps and custom comparators are not read",
            )
        if COMPRESSION_DICT_BLOCK in self.metaindex:
            raise UnsupportedError(
                "SST file compressed with a dictionary (rocksdb.compression_dict); statecat "
                "does not read dictionary compression",
                file=display,
                offset=self.metaindex[COMPRESSION_DICT_BLOCK].offset,
                hint="Turn off max_dict_bytes in the column family's compression options",
            )
        self.index_type = self.properties.get("rocksdb.block.based.table.index.type", INDEX_BINARY_SEARCH)
        # a damaged property may be text or bytes: then the name is its text and the check below raises
        self.index_type_name = INDEX_TYPE_NAMES.get(self.index_type, str(self.index_type))  # type: ignore[arg-type]
        if self.index_type not in INDEX_TYPE_NAMES:
            raise UnsupportedError(
                f"SST index type {self.index_type} is unknown; statecat reads {', '.join(INDEX_TYPE_NAMES.values())}",  # type: ignore[str-bytes-safe]  # damaged bytes shown as they are
                file=display,
            )
        self._index_keys_internal = not self.properties.get("rocksdb.index.key.is.user.key", 0)
        self._index_delta = bool(self.properties.get("rocksdb.index.value.is.delta.encoded", 0))
        self._first_key = self.index_type == INDEX_BINARY_SEARCH_WITH_FIRST_KEY
        if self.footer.index is not None:
            self._index_handle = self.footer.index
        elif INDEX_BLOCK in self.metaindex:
            self._index_handle = self.metaindex[INDEX_BLOCK]
        else:
            raise FormatError(
                f"expected a {INDEX_BLOCK.decode()} entry in the metaindex of a format_version "
                f"{self.format_version} file, got none",
                file=display,
                offset=self.footer.metaindex.offset,
                hint=HINT_DAMAGED,
            )
        self._top_index: DecodedBlock | None = None
        self._partitions: dict[BlockHandle, DecodedBlock] = {}  # the last index partitions decoded
        # Ingested external files (version >= 2): one sequence number for every key.
        self.global_seqno: int | None = None
        self.global_seqno_unknown = False
        # Suspected bug: a fixed-width property of the wrong length is kept as text (_properties), so a
        # damaged one makes a TypeError here or a text global_seqno, not a FormatError.
        if self.properties.get("rocksdb.external_sst_file.version", 0) >= 2:  # type: ignore[operator]
            self.global_seqno = self.properties.get("rocksdb.external_sst_file.global_seqno", 0) or largest_seqno  # type: ignore[assignment]
            self.global_seqno_unknown = not self.global_seqno

    # ------------------------------------------------------------------ blocks
    def read_block(self, handle: BlockHandle, what: str, source: BlockSource | None = None) -> bytes:
        """The uncompressed contents of the block at ``handle`` (checksum verified if asked);
        ``source``: where to read it (a span of the file already read), else the file."""
        end = handle.offset + handle.size + BLOCK_TRAILER_SIZE
        if self.footer.offset < end <= self.size:
            raise FormatError(
                f"{what} handle overlaps the footer: expected offset + size + {BLOCK_TRAILER_SIZE} <= "
                f"{self.footer.offset}, got {handle.offset} + {handle.size} + {BLOCK_TRAILER_SIZE} = {end}",
                file=self.display,
                offset=handle.offset,
                hint="The file is truncated or its index is damaged; copy it again from the snapshot",
            )
        data, n = read_block_bytes(
            self.source if source is None else source,
            handle,
            file_size=self.size,
            display=self.display,
            checksum_type=self.footer.checksum_type,
            base_context_checksum=self.footer.base_context_checksum,
            verify=self.verify_checksums,
            what=what,
        )
        self.bytes_read += n
        return data

    def _metaindex(self) -> dict[bytes, BlockHandle]:
        handle = self.footer.metaindex
        block = decode_block(
            self.read_block(handle, "metaindex block"),
            self.display,
            handle.offset,
            key_trailer=False,
            what="metaindex block",
        )
        out = {}
        raw = block.data.tobytes()
        for key, start, length in zip(block.key_list(), block.value_start.tolist(), block.value_len.tolist()):
            try:
                out[key], _ = decode_block_handle(raw, start, start + length)
            except VarintError:
                raise FormatError(
                    f"expected a block handle for meta block {key!r}, got a bad varint",
                    file=self.display,
                    offset=handle.offset + start,
                    hint=HINT_DAMAGED,
                ) from None
        return out

    def _properties(self) -> dict[str, int | str | bytes]:
        handle = self.metaindex.get(PROPERTIES_BLOCK) or self.metaindex.get(PROPERTIES_BLOCK_OLD)
        if handle is None:
            return {}
        block = decode_block(
            self.read_block(handle, "properties block"),
            self.display,
            handle.offset,
            key_trailer=False,
            what="properties block",
        )
        props: dict[str, int | str | bytes] = {}
        for key, value in zip(block.key_list(), block.value_list()):
            name = key.decode("utf-8", "replace")
            if name in UINT64_PROPERTIES:
                try:
                    props[name], _ = read_varint(value, 0, len(value))
                except VarintError:
                    props[name] = value  # RocksDB skips a malformed value too
            elif name in FIXED32_PROPERTIES and len(value) == 4:
                (props[name],) = struct.unpack("<I", value)
            elif name in FIXED64_PROPERTIES and len(value) == 8:
                (props[name],) = struct.unpack("<Q", value)
            elif name in BYTES_PROPERTIES:
                props[name] = value
            else:
                try:
                    props[name] = value.decode("utf-8")
                except UnicodeDecodeError:
                    props[name] = value
        return props

    def _decode_index(self, handle: BlockHandle, what: str) -> DecodedBlock:
        data = self.read_block(handle, what)
        mode = VALUES_DELTA_HANDLES if self._index_delta else VALUES_LENGTH_PREFIXED
        block = decode_block(
            data,
            self.display,
            handle.offset,
            key_trailer=self._index_keys_internal,
            value_mode=mode,
            have_first_key=self._first_key,
            what=what,
        )
        if not self._index_delta:
            decode_index_values(block, self.display, self._first_key)
        return block

    def _index_range(self, block: DecodedBlock, lower: bytes | None, upper: bytes | None) -> tuple[int, int]:
        """[first, stop) of ``block``'s entries whose key range can meet [lower, upper).

        Entry j's separator is >= every key of its block and <= every key of the next, compared
        as internal keys; by user key, block j holds keys in [separator j-1, separator j]."""
        seps = getattr(block, "_seps", None)
        if seps is None:  # the same index block serves many key-groups
            seps = block._seps = block.key_list()  # type: ignore[attr-defined]  # a cache beside the dataclass fields
        first = bisect.bisect_left(seps, lower) if lower is not None else 0
        # entry j > 0 is out once separator j-1 >= upper
        stop = len(seps) if upper is None else min(len(seps), bisect.bisect_left(seps, upper) + 1)
        return first, max(first, stop)

    def _index_entries(self, block: DecodedBlock, lower: bytes | None, upper: bytes | None) -> list[BlockHandle]:
        """The handles of ``block``'s entries whose key range can meet [lower, upper)."""
        first, stop = self._index_range(block, lower, upper)
        offsets, sizes = block.handles(first, stop)
        return [BlockHandle(offset, size) for offset, size in zip(offsets.tolist(), sizes.tolist())]

    def _top(self) -> DecodedBlock:
        if self._top_index is None:
            what = "top-level index block" if self.index_type == INDEX_TWO_LEVEL else "index block"
            self._top_index = self._decode_index(self._index_handle, what)
        return self._top_index

    def _partition(self, handle: BlockHandle) -> DecodedBlock:
        block = self._partitions.get(handle)
        if block is None:
            # Key-groups are read in order: the last partitions read serve the next one too.
            if len(self._partitions) >= PARTITIONS_KEPT:
                del self._partitions[next(iter(self._partitions))]
            block = self._partitions[handle] = self._decode_index(handle, "index partition")
        return block

    def data_block_handles(self, lower: bytes | None = None, upper: bytes | None = None) -> list[BlockHandle]:
        """Handles of the data blocks that can hold user keys in [lower, upper), in key order."""
        handles = self._index_entries(self._top(), lower, upper)
        if self.index_type != INDEX_TWO_LEVEL:
            return handles
        out = []
        for partition in handles:
            out.extend(self._index_entries(self._partition(partition), lower, upper))
        return out

    def _data_block_arrays(self, lower: bytes | None, upper: bytes | None) -> tuple[np.ndarray, np.ndarray]:
        """``data_block_handles`` as arrays of offsets and sizes (no object per block)."""
        top = self._top()
        first, stop = self._index_range(top, lower, upper)
        top_offsets, top_sizes = top.handles(first, stop)
        if self.index_type != INDEX_TWO_LEVEL:
            return top_offsets, top_sizes
        offsets, sizes = [], []
        for offset, size in zip(top_offsets.tolist(), top_sizes.tolist()):
            block = self._partition(BlockHandle(offset, size))
            block_offsets, block_sizes = block.handles(*self._index_range(block, lower, upper))
            offsets.append(block_offsets)
            sizes.append(block_sizes)
        if not offsets:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        return np.concatenate(offsets), np.concatenate(sizes)

    def data_blocks(self, lower: bytes | None = None, upper: bytes | None = None) -> Iterator[DecodedBlock]:
        """The decoded data blocks whose key range can meet [lower, upper), in key order."""
        for span, handles in self._spans(self.data_block_handles(lower, upper)):
            for handle in handles:
                yield self._decode_data(handle, span)

    def data_span(self, lower: bytes | None = None, upper: bytes | None = None) -> DecodedBlock | None:
        """The data blocks ``data_blocks`` would give, decoded at once into one DecodedBlock (its
        ``data`` the blocks back to back); None when there are none."""
        offsets, sizes = self._data_block_arrays(lower, upper)
        if not offsets.shape[0]:
            return None
        parts, lengths = [], []
        for start, stop in _span_ranges(offsets, sizes):
            first = int(offsets[start])
            self.source.seek(first)
            span = _Span(self.source.read(int(offsets[stop - 1] + sizes[stop - 1]) + BLOCK_TRAILER_SIZE - first), first)
            part = self._decode_span(span, offsets[start:stop], sizes[start:stop])
            if part is None:  # block by block: other compressions, and the precise error for damage
                contents = [
                    self.read_block(BlockHandle(offset, size), "data block", span)
                    for offset, size in zip(offsets[start:stop].tolist(), sizes[start:stop].tolist())
                ]
                part = (
                    np.frombuffer(b"".join(contents), dtype=np.uint8),
                    np.array([len(c) for c in contents], dtype=np.int64),
                )
            parts.append(part[0])
            lengths.append(part[1])
        block = decode_joined_blocks(
            parts[0] if len(parts) == 1 else np.concatenate(parts),
            lengths[0] if len(lengths) == 1 else np.concatenate(lengths),
            offsets.tolist(),
            self.display,
        )
        if self.global_seqno:
            block.seq[:] = self.global_seqno
        return block

    def entries(
        self, lower: bytes | None = None, upper: bytes | None = None
    ) -> Iterator[tuple[bytes, int, int, bytes]]:
        """(user key, seq, value type, value) of every entry with a user key in [lower, upper),
        in internal-key order (user key ascending, then newest first)."""
        for block in self.data_blocks(lower, upper):
            yield from block_entries(block, lower, upper)

    def rows(self, lower: bytes | None = None, upper: bytes | None = None) -> Iterator[tuple[bytes, int, int, bytes]]:
        """Like ``entries`` with the seq negated: tuples whose natural order is internal-key order
        (what a k-way merge of several files compares)."""
        for block in self.data_blocks(lower, upper):
            yield from block_entries(block, lower, upper, negate_seq=True)

    def range_tombstones(self) -> list[tuple[bytes, bytes, int]]:
        """(start user key, end user key (exclusive), seq) of the file's range deletions."""
        handle = self.metaindex.get(RANGE_DEL_BLOCK)
        if handle is None:
            return []
        block = decode_block(
            self.read_block(handle, "range deletion block"),
            self.display,
            handle.offset,
            key_trailer=True,
            what="range deletion block",
        )
        out = []
        for i, (start, end) in enumerate(zip(block.key_list(), block.value_list())):
            if int(block.vtype[i]) != TYPE_RANGE_DELETION:
                raise FormatError(
                    f"expected range deletion entries (type {TYPE_RANGE_DELETION}) in the range "
                    f"deletion block, got type {int(block.vtype[i])} at entry {i}",
                    file=self.display,
                    offset=handle.offset,
                    hint=HINT_DAMAGED,
                )
            out.append((start, end, self.global_seqno or int(block.seq[i])))
        return out

    def key_range(self) -> tuple[bytes, bytes] | None:
        """(smallest, largest) user key of the point entries, or None when there are none; reads
        the first and last data blocks."""
        handles = self.data_block_handles()
        if not handles:
            return None
        first = self._decode_data(handles[0])
        last = first if len(handles) == 1 else self._decode_data(handles[-1])
        if not len(first) or not len(last):
            return None
        return first.key_list()[0], last.key_list()[-1]

    def _spans(self, handles: list[BlockHandle]) -> Iterator[tuple[_Span, list[BlockHandle]]]:
        """Runs of consecutive blocks, each read with one call (a key-group's blocks lie side by side)."""
        start = 0
        while start < len(handles):
            stop = start + 1
            while (
                stop < len(handles)
                and handles[stop].offset == handles[stop - 1].offset + handles[stop - 1].size + BLOCK_TRAILER_SIZE
                and handles[stop].offset - handles[start].offset < SPAN_READ_BYTES
            ):
                stop += 1
            first, last = handles[start], handles[stop - 1]
            self.source.seek(first.offset)
            yield (
                _Span(self.source.read(last.offset + last.size + BLOCK_TRAILER_SIZE - first.offset), first.offset),
                handles[start:stop],
            )
            start = stop

    def _decode_span(self, span: _Span, offsets: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """The span's blocks (``offsets``/``sizes``: their handles) uncompressed back to back and
        their lengths, through the batched path (``decode_span_fast``); None when the span needs
        the block-by-block one."""
        ends = offsets + sizes + BLOCK_TRAILER_SIZE
        if int(ends[-1]) > self.footer.offset:  # read_block says what is wrong
            return None
        part = decode_span_fast(
            span.data,
            span.start,
            offsets,
            sizes,
            checksum_type=self.footer.checksum_type,
            base_context_checksum=self.footer.base_context_checksum,
            verify=self.verify_checksums,
        )
        if part is not None:
            self.bytes_read += int(ends[-1] - offsets[0])
        return part

    def _decode_data(self, handle: BlockHandle, source: BlockSource | None = None) -> DecodedBlock:
        block = decode_block(
            self.read_block(handle, "data block", source),
            self.display,
            handle.offset,
            key_trailer=True,
            what="data block",
        )
        if self.global_seqno:
            block.seq[:] = self.global_seqno
        return block

    def __repr__(self) -> str:
        return (
            f"SstFile({self.display!r}, column_family={self.column_family!r}, format_version="
            f"{self.format_version}, checksum={self.checksum_type}, compression={self.compression!r}, "
            f"index={self.index_type_name})"
        )


def block_entries(
    block: DecodedBlock, lower: bytes | None, upper: bytes | None, *, negate_seq: bool = False
) -> list[tuple[bytes, int, int, bytes]]:
    """The (user key, seq, type, value) tuples of a data block restricted to [lower, upper);
    with ``negate_seq`` the seq is negated, so that plain tuple order is internal-key order."""
    keys, start, stop = block_slice(block, lower, upper)
    seqs = (-block.seq.astype(np.int64)).tolist() if negate_seq else block.seq.tolist()
    rows = list(zip(keys, seqs, block.vtype.tolist(), block.value_list()))
    return rows if (start, stop) == (0, len(rows)) else rows[start:stop]


def block_slice(block: DecodedBlock, lower: bytes | None, upper: bytes | None) -> tuple[list[bytes], int, int]:
    """(all user keys of the block, first and end index of those in [lower, upper))."""
    keys = block.key_list()
    start, stop = 0, len(keys)
    if lower is not None and keys and keys[0] < lower:
        start = bisect.bisect_left(keys, lower)
    if upper is not None and keys and keys[-1] >= upper:
        stop = bisect.bisect_left(keys, upper)
    return keys, start, max(start, stop)


SPAN_READ_BYTES = 1 << 20


def _span_ranges(offsets: np.ndarray, sizes: np.ndarray) -> Iterator[tuple[int, int]]:
    """``SstFile._spans`` over arrays of handles: [start, stop) of each run of consecutive blocks
    read with one call (at most SPAN_READ_BYTES from its first block's start)."""
    n = offsets.shape[0]
    breaks = (np.flatnonzero(offsets[1:] != offsets[:-1] + sizes[:-1] + BLOCK_TRAILER_SIZE) + 1).tolist()
    for start, end in zip([0, *breaks], [*breaks, n]):
        while start < end:  # offsets rise within a run of consecutive blocks
            stop = start + 1 + int(np.searchsorted(offsets[start + 1 : end], offsets[start] + SPAN_READ_BYTES))
            yield start, stop
            start = stop


PARTITIONS_KEPT = 4


class _Span:
    """Bytes of a file read at once from ``start``: reads of blocks inside it cost no call."""

    def __init__(self, data: bytes, start: int) -> None:
        self.data, self.start, self.position = data, start, start

    def seek(self, position: int) -> int:
        self.position = position
        return position

    def read(self, n: int) -> bytes:
        at = self.position - self.start
        out = self.data[at : at + n] if at >= 0 else b""
        self.position += len(out)
        return out
