"""Reading one SST block (trailer, checksum, decompression) and decoding its entries.

A block is: entries, a restart array of fixed32 offsets, and a fixed32 restart count (whose top bit
marks a data-block hash index placed between the two). Each entry is varint32 shared key bytes,
varint32 non-shared key bytes, varint32 value length (absent in delta-encoded index blocks), the
non-shared key bytes and the value. Keys are rebuilt from the previous key's prefix, so decoding is
a sequential walk: it runs compiled (numba), checking every length and offset against the block
before use and returning error codes, not raising (see readers/scans/fastscan.py for the same style).
"""

from __future__ import annotations

import bz2
import struct
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, cast

import cramjam
import numba
import numpy as np
from xxhash import xxh3_64_intdigest

from statecat.readers.backends.sst.format import (
    BLOCK_TRAILER_SIZE,
    BZIP2,
    CHECKSUM_NAMES,
    COMPRESSION_NAMES,
    LZ4,
    LZ4HC,
    NO_CHECKSUM,
    NO_COMPRESSION,
    SNAPPY,
    XXH3,
    ZLIB,
    ZSTD,
    ZSTD_NOT_FINAL,
    BlockHandle,
    VarintError,
    block_checksum,
    context_modifier,
    read_varint,
)
from statecat.statemeta.errors import FormatError, UnsupportedError

if TYPE_CHECKING:

    class BlockSource(Protocol):
        """Where blocks are read from: a seekable binary file, or a span of one already read."""

        def seek(self, position: int, /) -> int: ...

        def read(self, n: int, /) -> bytes: ...


# How values are laid out in a block (the walk's ``value_mode``).
VALUES_LENGTH_PREFIXED = 0  # data, metaindex, properties, range-deletion and format_version < 4 index blocks
VALUES_DELTA_HANDLES = 1  # index blocks with index_value_is_delta_encoded: handle or size delta, no length

# Error codes of the compiled walk.
BLOCK_OK, BLOCK_BAD_VARINT, BLOCK_OVERRUN, BLOCK_BAD_SHARED, BLOCK_BAD_RESTART, BLOCK_SHORT_KEY = 0, 1, 2, 3, 4, 5
BLOCK_BAD_HANDLE = 6
BLOCK_ERRORS = {
    BLOCK_BAD_VARINT: "expected a varint within the block, got one running past the entries or too long",
    BLOCK_OVERRUN: "expected the entry's key and value within the block's entries, got lengths running past them",
    BLOCK_BAD_SHARED: "expected a shared key prefix no longer than the previous key (and none at a restart "
    "point), got a longer one",
    BLOCK_BAD_RESTART: "expected the restart array to list the offsets of entries in ascending order, got an "
    "offset that is not an entry's start",
    BLOCK_SHORT_KEY: "expected an internal key of at least 8 bytes (user key + sequence/type), got a shorter one",
    BLOCK_BAD_HANDLE: "expected a block handle (varint64 offset and size) as the index value, got a malformed one",
}
# A block holds at least one whole value, and Flink's values are Java byte arrays: below 2 GiB.
MAX_BLOCK_SIZE = (1 << 31) - 1
MAX_HASH_INDEX_BLOCK = 1 << 16  # larger blocks never carry a data-block hash index
HINT_DAMAGED = "The SST file is damaged; copy it again from the snapshot"


@numba.njit(cache=True, nogil=True)
def _varint(
    buf: np.ndarray, pos: int, limit: int, max_bytes: int
) -> tuple[np.uint64, int]:  # pragma: no cover - compiled
    """(value, next position), or (0, -1) when the varint runs past ``limit`` or ``max_bytes``."""
    result = np.uint64(0)
    shift = 0
    start = pos
    while pos < limit and pos - start < max_bytes:
        b = buf[pos]
        pos += 1
        result |= np.uint64(b & 0x7F) << np.uint64(shift)
        if b < 0x80:
            if max_bytes == 5 and result > np.uint64(0xFFFFFFFF):
                return np.uint64(0), -1
            return result, pos
        shift += 7
    return np.uint64(0), -1


@numba.njit(cache=True, nogil=True)
def walk_block(
    buf: np.ndarray,
    restarts_at: int,
    num_restarts: int,
    value_mode: int,
    have_first_key: bool,
    key_trailer: bool,
    fill: bool,
    keys: np.ndarray,
    key_start: np.ndarray,
    key_len: np.ndarray,
    seq: np.ndarray,
    vtype: np.ndarray,
    value_start: np.ndarray,
    value_len: np.ndarray,
    handle_offset: np.ndarray,
    handle_size: np.ndarray,
    scratch: np.ndarray,
) -> tuple[int, int, int, int]:  # pragma: no cover - compiled
    """Walks the entries of one uncompressed block; returns (entries, key bytes, error, error position).

    With ``fill`` false it only counts entries and total key bytes (the output arrays may be
    empty); with ``fill`` true the arrays must hold that many. ``key_trailer``: keys are internal
    keys whose last 8 bytes (seq << 8 | type) go to ``seq``/``vtype``, the rest to ``keys``.
    ``scratch`` (at least ``restarts_at`` bytes) holds the previous full key: a key is at most
    the sum of non-shared bytes so far, so it always fits."""
    n = 0
    total = 0
    pos = 0
    prev_len = 0
    next_restart = 0
    prev_offset = np.int64(0)
    prev_size = np.int64(0)
    while pos < restarts_at:
        is_restart = False
        if next_restart < num_restarts:
            r = restarts_at + 4 * next_restart
            restart = (
                np.int64(buf[r])
                | (np.int64(buf[r + 1]) << 8)
                | (np.int64(buf[r + 2]) << 16)
                | (np.int64(buf[r + 3]) << 24)
            )
            if restart == pos:
                is_restart = True
                next_restart += 1
            elif restart < pos:
                return n, total, BLOCK_BAD_RESTART, r
        if n == 0 and not is_restart:
            return n, total, BLOCK_BAD_RESTART, restarts_at
        entry_at = pos
        shared, pos = _varint(buf, pos, restarts_at, 5)
        if pos < 0:
            return n, total, BLOCK_BAD_VARINT, entry_at
        non_shared, pos = _varint(buf, pos, restarts_at, 5)
        if pos < 0:
            return n, total, BLOCK_BAD_VARINT, entry_at
        vlen = np.int64(0)
        if value_mode == 0:
            v, pos = _varint(buf, pos, restarts_at, 5)
            if pos < 0:
                return n, total, BLOCK_BAD_VARINT, entry_at
            vlen = np.int64(v)
        sh = np.int64(shared)
        ns = np.int64(non_shared)
        if sh > prev_len or (is_restart and sh != 0):
            return n, total, BLOCK_BAD_SHARED, entry_at
        if pos + ns > restarts_at:
            return n, total, BLOCK_OVERRUN, entry_at
        klen = sh + ns
        if fill:  # counting needs the lengths only
            for j in range(ns):
                scratch[sh + j] = buf[pos + j]
        pos += ns  # type: ignore[assignment]  # numba types int and np.int64 alike (int64)
        prev_len = klen  # type: ignore[assignment]  # numba types int and np.int64 alike (int64)
        ukey_len = klen
        if key_trailer:
            if klen < 8:
                return n, total, BLOCK_SHORT_KEY, entry_at
            ukey_len = klen - 8
        vat = pos
        h_off = np.int64(0)
        h_size = np.int64(0)
        if value_mode == 0:
            if pos + vlen > restarts_at:
                return n, total, BLOCK_OVERRUN, entry_at
            pos += vlen  # type: ignore[assignment]  # numba types int and np.int64 alike (int64)
        else:
            # RocksDB delta-encodes a handle only when the key shares bytes with the previous one.
            if sh == 0:
                o, pos = _varint(buf, pos, restarts_at, 10)
                if pos < 0:
                    return n, total, BLOCK_BAD_HANDLE, entry_at
                s, pos = _varint(buf, pos, restarts_at, 10)
                if pos < 0 or o >= np.uint64(1 << 62) or s >= np.uint64(1 << 62):
                    return n, total, BLOCK_BAD_HANDLE, entry_at
                h_off = np.int64(o)
                h_size = np.int64(s)
            else:
                z, pos = _varint(buf, pos, restarts_at, 10)
                if pos < 0:
                    return n, total, BLOCK_BAD_HANDLE, entry_at
                delta = np.int64(z >> np.uint64(1))
                if z & np.uint64(1):
                    delta = -delta - 1
                h_off = prev_offset + prev_size + 5
                h_size = prev_size + delta
                if h_size < 0 or h_size >= (1 << 62) or h_off >= (1 << 62):
                    return n, total, BLOCK_BAD_HANDLE, entry_at
            prev_offset = h_off
            prev_size = h_size
            if have_first_key:
                flen, pos = _varint(buf, pos, restarts_at, 5)
                if pos < 0:
                    return n, total, BLOCK_BAD_HANDLE, entry_at
                if pos + np.int64(flen) > restarts_at:
                    return n, total, BLOCK_OVERRUN, entry_at
                pos += np.int64(flen)  # type: ignore[assignment]  # numba types int and np.int64 alike (int64)
            vlen = pos - vat  # type: ignore[assignment]  # numba types int and np.int64 alike (int64)
        if fill:
            key_start[n] = total
            key_len[n] = ukey_len
            for j in range(ukey_len):
                keys[total + j] = scratch[j]
            if key_trailer:
                t = np.uint64(0)
                for j in range(8):
                    t |= np.uint64(scratch[ukey_len + j]) << np.uint64(8 * j)
                seq[n] = t >> np.uint64(8)
                vtype[n] = np.uint8(t & np.uint64(0xFF))
            value_start[n] = vat
            value_len[n] = vlen
            if value_mode != 0:
                handle_offset[n] = h_off
                handle_size[n] = h_size
        total += ukey_len  # type: ignore[assignment]  # numba types int and np.int64 alike (int64)
        n += 1
    if n > 0 and next_restart != num_restarts:
        return n, total, BLOCK_BAD_RESTART, restarts_at + 4 * next_restart
    return n, total, BLOCK_OK, pos


@numba.njit(cache=True, nogil=True)
def walk_data_blocks(
    buf: np.ndarray,
    block_at: np.ndarray,
    block_restarts: np.ndarray,
    block_num_restarts: np.ndarray,
    fill: bool,
    keys: np.ndarray,
    key_start: np.ndarray,
    key_len: np.ndarray,
    seq: np.ndarray,
    vtype: np.ndarray,
    value_start: np.ndarray,
    value_len: np.ndarray,
    scratch: np.ndarray,
) -> tuple[int, int, int, int, int]:  # pragma: no cover - compiled
    """``walk_block`` over several uncompressed data blocks laid back to back in ``buf``: returns
    (entries, key bytes, error, failing block, error position in it). With ``fill`` the entries of
    all blocks go to the arrays in order, values as positions in ``buf``."""
    n = 0
    total = 0
    e64 = np.empty(0, dtype=np.int64)
    e8 = np.empty(0, dtype=np.uint8)
    eu64 = np.empty(0, dtype=np.uint64)
    for b in range(block_at.shape[0]):
        at = block_at[b]
        block = buf[at : at + block_restarts[b] + 4 * block_num_restarts[b]]
        if fill:
            count, key_bytes, error, where = walk_block(
                block,
                block_restarts[b],
                block_num_restarts[b],
                VALUES_LENGTH_PREFIXED,
                False,
                True,
                True,
                keys[total:],
                key_start[n:],
                key_len[n:],
                seq[n:],
                vtype[n:],
                value_start[n:],
                value_len[n:],
                e64,
                e64,
                scratch,
            )
            for i in range(n, n + count):
                key_start[i] += total
                value_start[i] += at
        else:
            count, key_bytes, error, where = walk_block(
                block,
                block_restarts[b],
                block_num_restarts[b],
                VALUES_LENGTH_PREFIXED,
                False,
                True,
                False,
                e8,
                e64,
                e64,
                eu64,
                e8,
                e64,
                e64,
                e64,
                e64,
                scratch,
            )
        if error != BLOCK_OK:
            return n + count, total + key_bytes, error, b, where
        n += count
        total += key_bytes
    return n, total, BLOCK_OK, -1, 0


def decode_data_blocks(contents: list[bytes], offsets: list[int], display: str) -> DecodedBlock:
    """The entries of several uncompressed data blocks (``offsets``: where each is in the file) as
    one DecodedBlock: one compiled walk for all, whose values index the blocks joined in ``data``."""
    sizes = np.array([len(data) for data in contents], dtype=np.int64)
    return decode_joined_blocks(np.frombuffer(b"".join(contents), dtype=np.uint8), sizes, offsets, display)


def decode_joined_blocks(buf: np.ndarray, sizes: np.ndarray, offsets: list[int], display: str) -> DecodedBlock:
    """``decode_data_blocks`` over uncompressed blocks already laid back to back in ``buf``
    (``sizes``: each block's length)."""
    block_at = np.zeros(sizes.shape[0], dtype=np.int64)
    np.cumsum(sizes[:-1], out=block_at[1:])
    restarts = np.empty(sizes.shape[0], dtype=np.int64)
    num_restarts = np.empty(sizes.shape[0], dtype=np.int64)
    failed = _restart_layouts(buf, block_at, sizes, MAX_HASH_INDEX_BLOCK, restarts, num_restarts)
    if failed >= 0:  # the Python reading of that block raises the error with its details
        at = int(block_at[failed])
        restart_layout(buf[at : at + int(sizes[failed])].tobytes(), display, offsets[failed])
        raise AssertionError("restart layout checks disagree")  # pragma: no cover
    scratch = np.empty(max(1, int(restarts.max(initial=1))), dtype=np.uint8)
    e64 = np.empty(0, dtype=np.int64)
    e8 = np.empty(0, dtype=np.uint8)
    n, total, err, failed, at = walk_data_blocks(
        buf, block_at, restarts, num_restarts, False, e8, e64, e64, np.empty(0, dtype=np.uint64), e8, e64, e64, scratch
    )
    if err != BLOCK_OK:
        raise FormatError(
            f"data block entry: {BLOCK_ERRORS[err]}",
            file=display,
            offset=offsets[failed] + at,
            hint=f"{HINT_DAMAGED} (the data block starts at byte offset {offsets[failed]})",
        )
    keys = np.empty(total, dtype=np.uint8)
    key_start, key_len, value_start, value_len = (np.empty(n, dtype=np.int64) for _ in range(4))
    seq = np.empty(n, dtype=np.uint64)
    vtype = np.empty(n, dtype=np.uint8)
    walk_data_blocks(
        buf,
        block_at,
        restarts,
        num_restarts,
        True,
        keys,
        key_start,
        key_len,
        seq,
        vtype,
        value_start,
        value_len,
        scratch,
    )
    return DecodedBlock(offsets[0] if offsets else 0, buf, keys, key_start, key_len, seq, vtype, value_start, value_len)


@numba.njit(cache=True, nogil=True)
def _restart_layouts(
    buf: np.ndarray,
    block_at: np.ndarray,
    sizes: np.ndarray,
    max_hash_index_block: int,
    restarts: np.ndarray,
    num_restarts: np.ndarray,
) -> int:  # pragma: no cover
    """``restart_layout`` of every block; returns the first block it does not hold for (else -1)."""
    for b in range(block_at.shape[0]):
        at = block_at[b]
        size = sizes[b]
        if size < 4:
            return b
        e = at + size - 4
        footer = (
            np.int64(buf[e]) | (np.int64(buf[e + 1]) << 8) | (np.int64(buf[e + 2]) << 16) | (np.int64(buf[e + 3]) << 24)
        )
        end = size - 4
        count = footer
        if size <= max_hash_index_block and footer & 0x80000000:
            count = footer & 0x7FFFFFFF
            if end < 2:
                return b
            buckets = np.int64(buf[at + end - 2]) | (np.int64(buf[at + end - 1]) << 8)
            end = end - 2 - buckets
        restarts_at = end - 4 * count
        if restarts_at < 0 or count > (1 << 30):
            return b
        restarts[b] = restarts_at
        num_restarts[b] = count
    return -1


@numba.njit(cache=True, nogil=True)
def _span_trailers(
    buf: np.ndarray,
    rel: np.ndarray,
    sizes: np.ndarray,
    compression: np.ndarray,
    stored: np.ndarray,
    body_at: np.ndarray,
    out_size: np.ndarray,
) -> int:  # pragma: no cover - compiled
    """Each block's trailer (compression type, stored checksum) and where its body starts and how
    long it is uncompressed, for blocks stored uncompressed or LZ4-compressed; returns the first
    block it does not take (another compression, a bad size prefix, past the buffer), else -1."""
    for b in range(rel.shape[0]):
        at = rel[b]
        end = at + sizes[b]
        if at < 0 or sizes[b] < 0 or end + 5 > buf.shape[0]:
            return b
        kind = buf[end]
        compression[b] = kind
        stored[b] = (
            np.uint32(buf[end + 1])
            | (np.uint32(buf[end + 2]) << np.uint32(8))
            | (np.uint32(buf[end + 3]) << np.uint32(16))
            | (np.uint32(buf[end + 4]) << np.uint32(24))
        )
        if kind == NO_COMPRESSION:
            body_at[b] = at
            out_size[b] = sizes[b]
        elif kind == LZ4 or kind == LZ4HC:
            size, pos = _varint(buf, at, end, 5)
            # LZ4 expands at most 255-fold: a larger size prefix is damage (the slow path says so)
            if pos < 0 or np.int64(size) > 255 * (end - pos) + 16:
                return b
            body_at[b] = pos
            out_size[b] = np.int64(size)
        else:
            return b
    return -1


def decode_span_fast(
    raw: bytes,
    raw_start: int,
    offsets: np.ndarray,
    sizes: np.ndarray,
    *,
    checksum_type: int,
    base_context_checksum: int,
    verify: bool,
) -> tuple[np.ndarray, np.ndarray] | None:
    """The uncompressed contents of consecutive data blocks read at once (``raw``: the file's bytes
    from ``raw_start``; ``offsets``/``sizes``: the blocks' handles) laid back to back, with each
    block's length; checksums verified as ``read_block_bytes`` does, with a few Python calls per
    block. None when a block is anything but a valid uncompressed or LZ4 block: the caller then
    reads the span block by block (``read_block_bytes``), which decompresses other kinds and
    raises the precise error for damage."""
    n = offsets.shape[0]
    buf = np.frombuffer(raw, dtype=np.uint8)
    rel = offsets - raw_start
    compression = np.empty(n, dtype=np.uint8)
    stored = np.empty(n, dtype=np.uint32)
    body_at = np.empty(n, dtype=np.int64)
    out_size = np.empty(n, dtype=np.int64)
    if _span_trailers(buf, rel, sizes, compression, stored, body_at, out_size) >= 0:
        return None
    view = memoryview(raw)
    starts = rel.tolist()
    ends = (rel + sizes).tolist()
    if verify and checksum_type != NO_CHECKSUM:
        if checksum_type == XXH3:
            hashes = np.fromiter((xxh3_64_intdigest(view[a:e]) for a, e in zip(starts, ends)), dtype=np.uint64, count=n)
            computed = (hashes & np.uint64(0xFFFFFFFF)) ^ (compression.astype(np.uint64) * np.uint64(0x6B9083D9))
        else:
            computed = np.fromiter(
                (block_checksum(checksum_type, view[a:e], t) for a, e, t in zip(starts, ends, compression.tolist())),
                dtype=np.uint64,
                count=n,
            )
        if base_context_checksum:
            off = offsets.astype(np.uint64)
            mask = np.uint64(0xFFFFFFFF)
            computed = computed + (np.uint64(base_context_checksum) ^ (((off & mask) + (off >> np.uint64(32))) & mask))
        if ((computed & np.uint64(0xFFFFFFFF)) != stored).any():
            return None
    block_at = np.zeros(n, dtype=np.int64)
    np.cumsum(out_size[:-1], out=block_at[1:])
    out = np.empty(int(out_size.sum()), dtype=np.uint8)
    target = memoryview(out)  # type: ignore[arg-type]  # an ndarray is a buffer (numpy stubs: on 3.12+ only)
    try:
        for _b, (body, end, at, size, kind) in enumerate(
            zip(body_at.tolist(), ends, block_at.tolist(), out_size.tolist(), compression.tolist())
        ):
            if kind == NO_COMPRESSION:
                target[at : at + size] = view[body:end]
            elif cramjam.lz4.decompress_block_into(view[body:end], target[at : at + size]) != size:
                return None
    except cramjam.DecompressionError:
        return None
    return out, out_size


@dataclass
class DecodedBlock:
    """The entries of one block as numpy arrays: full user keys back to back in ``keys``
    (``key_start``/``key_len``), the internal key's ``seq``/``vtype`` (data blocks), each value's
    place in ``data`` (the uncompressed block), and for index blocks the decoded block handles."""

    offset: int  # of the block in its file
    data: np.ndarray
    keys: np.ndarray
    key_start: np.ndarray
    key_len: np.ndarray
    seq: np.ndarray
    vtype: np.ndarray
    value_start: np.ndarray
    value_len: np.ndarray
    handle_offset: np.ndarray | None = None
    handle_size: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.key_start.shape[0])

    def key_list(self) -> list[bytes]:
        raw = self.keys.tobytes()
        return [raw[s : s + n] for s, n in zip(self.key_start.tolist(), self.key_len.tolist())]

    def value_list(self) -> list[bytes]:
        raw = self.data.tobytes()
        return [raw[s : s + n] for s, n in zip(self.value_start.tolist(), self.value_len.tolist())]

    def handles(self, first: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """Offsets and sizes of entries [first, stop) of an index block (which always has its handles)."""
        return cast(np.ndarray, self.handle_offset)[first:stop], cast(np.ndarray, self.handle_size)[first:stop]


def restart_layout(data: bytes, display: str, offset: int) -> tuple[int, int]:
    """(offset of the restart array, restart count) of an uncompressed block."""
    size = len(data)
    if size < 4:
        raise FormatError(
            f"expected a block of at least 4 bytes (its restart count), got {size}",
            file=display,
            offset=offset,
            hint=HINT_DAMAGED,
        )
    (footer,) = struct.unpack_from("<I", data, size - 4)
    end = size - 4
    num_restarts = footer
    if size <= MAX_HASH_INDEX_BLOCK and footer & 0x80000000:
        # Data-block hash index: buckets (1 byte each) and their count (fixed16) before the count.
        num_restarts = footer & 0x7FFFFFFF
        if end < 2:
            raise FormatError(
                "expected a data-block hash index footer, got a block too small for it",
                file=display,
                offset=offset,
                hint=HINT_DAMAGED,
            )
        (buckets,) = struct.unpack_from("<H", data, end - 2)
        end = end - 2 - buckets
    restarts_at = end - 4 * num_restarts
    if restarts_at < 0 or num_restarts > (1 << 30):
        raise FormatError(
            f"bad restart array: expected at most {max(end, 0) // 4} restart points in a block of {size} bytes, "
            f"got a count of {num_restarts}",
            file=display,
            offset=offset,
            hint=HINT_DAMAGED,
        )
    return restarts_at, num_restarts


def decode_block(
    data: bytes,
    display: str,
    offset: int,
    *,
    key_trailer: bool,
    value_mode: int = VALUES_LENGTH_PREFIXED,
    have_first_key: bool = False,
    what: str = "data block",
) -> DecodedBlock:
    """All entries of an uncompressed block (``offset``: where the block is in the file)."""
    buf = np.frombuffer(data, dtype=np.uint8)
    restarts_at, num_restarts = restart_layout(data, display, offset)
    scratch = np.empty(max(restarts_at, 1), dtype=np.uint8)
    e64 = np.empty(0, dtype=np.int64)
    e8 = np.empty(0, dtype=np.uint8)
    eu64 = np.empty(0, dtype=np.uint64)
    n, total, err, at = walk_block(
        buf,
        restarts_at,
        num_restarts,
        value_mode,
        have_first_key,
        key_trailer,
        False,
        e8,
        e64,
        e64,
        eu64,
        e8,
        e64,
        e64,
        e64,
        e64,
        scratch,
    )
    if err != BLOCK_OK:
        raise FormatError(
            f"{what} entry {n}: {BLOCK_ERRORS[err]}",
            file=display,
            offset=offset + at,
            hint=f"{HINT_DAMAGED} (the {what} starts at byte offset {offset})",
        )
    keys = np.empty(total, dtype=np.uint8)
    key_start = np.empty(n, dtype=np.int64)
    key_len = np.empty(n, dtype=np.int64)
    seq = np.zeros(n if key_trailer else 0, dtype=np.uint64)
    vtype = np.zeros(n if key_trailer else 0, dtype=np.uint8)
    value_start = np.empty(n, dtype=np.int64)
    value_len = np.empty(n, dtype=np.int64)
    handles = value_mode != VALUES_LENGTH_PREFIXED
    handle_offset = np.empty(n if handles else 0, dtype=np.int64)
    handle_size = np.empty(n if handles else 0, dtype=np.int64)
    walk_block(
        buf,
        restarts_at,
        num_restarts,
        value_mode,
        have_first_key,
        key_trailer,
        True,
        keys,
        key_start,
        key_len,
        seq,
        vtype,
        value_start,
        value_len,
        handle_offset,
        handle_size,
        scratch,
    )
    return DecodedBlock(
        offset,
        buf,
        keys,
        key_start,
        key_len,
        seq,
        vtype,
        value_start,
        value_len,
        handle_offset if handles else None,
        handle_size if handles else None,
    )


def decode_index_values(block: DecodedBlock, display: str, have_first_key: bool) -> None:
    """Fills ``handle_offset``/``handle_size`` of an index block whose values are full,
    length-prefixed handles (index_value_is_delta_encoded off)."""
    raw = block.data.tobytes()
    n = len(block)
    offsets = np.empty(n, dtype=np.int64)
    sizes = np.empty(n, dtype=np.int64)
    for i, (start, length) in enumerate(zip(block.value_start.tolist(), block.value_len.tolist())):
        try:
            off, pos = read_varint(raw, start, start + length)
            size, pos = read_varint(raw, pos, start + length)
            if have_first_key:
                first_len, pos = read_varint(raw, pos, start + length, 5)
                if pos + first_len > start + length:
                    raise VarintError(pos)
        except VarintError:
            raise FormatError(
                f"index entry {i}: {BLOCK_ERRORS[BLOCK_BAD_HANDLE]}",
                file=display,
                offset=block.offset + start,
                hint=HINT_DAMAGED,
            ) from None
        offsets[i] = off
        sizes[i] = size
    block.handle_offset = offsets
    block.handle_size = sizes


def read_block_bytes(
    source: BlockSource,
    handle: BlockHandle,
    *,
    file_size: int,
    display: str,
    checksum_type: int,
    base_context_checksum: int,
    verify: bool,
    what: str,
) -> tuple[bytes, int]:
    """(uncompressed contents, bytes read) of the block at ``handle``: its trailer's checksum
    checked (when ``verify``), then decompressed by the trailer's compression type."""
    end = handle.offset + handle.size + BLOCK_TRAILER_SIZE
    if end > file_size:
        raise FormatError(
            f"{what} handle points past the end of the file: expected offset + size + {BLOCK_TRAILER_SIZE} "
            f"<= {file_size}, got {handle.offset} + {handle.size} + {BLOCK_TRAILER_SIZE} = {end}",
            file=display,
            offset=handle.offset,
            hint="The file is truncated or its index is damaged; copy it again from the snapshot",
        )
    source.seek(handle.offset)
    raw = source.read(handle.size + BLOCK_TRAILER_SIZE)
    if len(raw) != handle.size + BLOCK_TRAILER_SIZE:
        raise FormatError(
            f"expected {handle.size + BLOCK_TRAILER_SIZE} bytes of {what}, got {len(raw)}",
            file=display,
            offset=handle.offset,
            hint="The file is truncated; copy it again",
        )
    view = memoryview(raw)
    payload = view[: handle.size]
    compression = raw[handle.size]
    if verify and checksum_type != NO_CHECKSUM:
        (stored,) = struct.unpack_from("<I", raw, handle.size + 1)
        computed = (
            block_checksum(checksum_type, payload, compression) + context_modifier(base_context_checksum, handle.offset)
        ) & 0xFFFFFFFF
        if computed != stored:
            raise FormatError(
                f"{what} checksum mismatch: expected 0x{stored:08x} ({CHECKSUM_NAMES[checksum_type]}) got "
                f"0x{computed:08x} at block offset {handle.offset}",
                file=display,
                offset=handle.offset,
                hint=HINT_DAMAGED,
            )
    return decompress(payload, compression, display=display, offset=handle.offset, what=what), len(raw)


def decompress(payload: memoryview, compression: int, *, display: str, offset: int, what: str) -> bytes:
    """The block contents of ``payload`` stored with ``compression`` (format_version >= 2 framing:
    a varint32 uncompressed size before every kind but Snappy)."""
    if compression == NO_COMPRESSION:
        return bytes(payload)
    if compression not in COMPRESSION_NAMES:
        raise FormatError(
            f"unknown compression type {compression} in the {what} trailer: expected one of "
            f"{', '.join(f'{k} ({v})' for k, v in COMPRESSION_NAMES.items())}",
            file=display,
            offset=offset,
            hint=HINT_DAMAGED,
        )
    name = COMPRESSION_NAMES[compression]
    try:
        if compression == SNAPPY:
            return bytes(cramjam.snappy.decompress_raw(payload))
        if compression not in (ZLIB, BZIP2, LZ4, LZ4HC, ZSTD, ZSTD_NOT_FINAL):
            raise UnsupportedError(
                f"{what} compressed with {name}, which statecat does not decompress",
                file=display,
                offset=offset,
                hint="Flink's RocksDB options use Snappy, LZ4, ZSTD or Zlib",
            )
        size, start = read_varint(payload, 0, len(payload), 5)
        if size > MAX_BLOCK_SIZE:
            raise ValueError(f"an uncompressed size of {size} bytes, above {MAX_BLOCK_SIZE}")
        body = payload[start:]
        # cramjam pads its output to an ``output_len``; these forms return the real length.
        if compression in (LZ4, LZ4HC):
            out = bytes(cramjam.lz4.decompress_block(struct.pack("<I", size) + bytes(body)))
        elif compression in (ZSTD, ZSTD_NOT_FINAL):
            out = bytes(cramjam.zstd.decompress(body))
        elif compression == ZLIB:
            try:  # RocksDB's default window_bits is negative: a raw deflate stream
                out = zlib.decompress(body, -15)
            except zlib.error:
                out = zlib.decompress(body, 47)
        else:
            out = bz2.decompress(body)
    except (VarintError, ValueError, OSError, zlib.error, cramjam.DecompressionError) as e:
        raise FormatError(
            f"corrupt {name}-compressed {what}: {e}", file=display, offset=offset, hint=HINT_DAMAGED
        ) from None
    if len(out) != size:
        raise FormatError(
            f"corrupt {name}-compressed {what}: expected {size} bytes uncompressed, got {len(out)}",
            file=display,
            offset=offset,
            hint=HINT_DAMAGED,
        )
    return out
