"""RocksDB block-based table (SST) layout: constants, varints, block handles, the footer and the
block checksums.

The facts come from RocksDB's table/format.h/.cc, db/dbformat.h and util/compression.h (as of
RocksDB 6.20 and 8.10, the FRocksDB releases Flink 1.x and 2.x ship). Every value read from the
file is checked before it is used; damage raises ``FormatError`` naming the file and byte offset.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c
import xxhash

from statecat.statemeta.errors import FormatError, UnsupportedError

# Table magic numbers (the footer's last 8 bytes, little-endian).
BLOCK_BASED_TABLE_MAGIC = 0x88E241B785F4CFF7
LEGACY_BLOCK_BASED_TABLE_MAGIC = 0xDB4775248B80FB57  # format_version 0 (RocksDB < 4.6), no checksum type byte
PLAIN_TABLE_MAGIC = 0x8242229663BF9564
LEGACY_PLAIN_TABLE_MAGIC = 0x4F3418EB7A8F13B8
CUCKOO_TABLE_MAGIC = 0x926789D0C5F17873
OTHER_TABLE_MAGICS = {
    PLAIN_TABLE_MAGIC: "PlainTable",
    LEGACY_PLAIN_TABLE_MAGIC: "PlainTable (legacy)",
    CUCKOO_TABLE_MAGIC: "CuckooTable",
}

# format_version: 2 (varint size prefix on compressed blocks), 3 (index keys may be user keys),
# 4 (delta-encoded index values), 5 (new Bloom filter), 6 (context checksums, index handle in the
# metaindex). RocksDB 6.20 writes 2..5 (default 4), FRocksDB 8.10 writes 2..6 (default 5).
FORMAT_VERSION_2 = 2
FORMAT_VERSION_6 = 6
SUPPORTED_FORMAT_VERSIONS = (2, 3, 4, 5, 6)

MAGIC_LENGTH = 8
BLOCK_HANDLE_MAX_LENGTH = 20  # two varint64
LEGACY_FOOTER_LENGTH = 2 * BLOCK_HANDLE_MAX_LENGTH + MAGIC_LENGTH  # 48
FOOTER_LENGTH = 1 + 2 * BLOCK_HANDLE_MAX_LENGTH + 4 + MAGIC_LENGTH  # 53
EXTENDED_MAGIC = b"\x3e\x00\x7a\x00"  # format_version >= 6, first bytes of footer part 2
BLOCK_TRAILER_SIZE = 5  # compression type byte + fixed32 checksum

# Checksum types (table/format.h ChecksumType).
NO_CHECKSUM, CRC32C, XXHASH, XXHASH64, XXH3 = 0, 1, 2, 3, 4
CHECKSUM_NAMES = {
    NO_CHECKSUM: "kNoChecksum",
    CRC32C: "kCRC32c",
    XXHASH: "kxxHash",
    XXHASH64: "kxxHash64",
    XXH3: "kXXH3",
}

# Compression types (include/rocksdb/compression_type.h), the block trailer's first byte.
NO_COMPRESSION, SNAPPY, ZLIB, BZIP2, LZ4, LZ4HC, XPRESS, ZSTD = 0, 1, 2, 3, 4, 5, 6, 7
ZSTD_NOT_FINAL = 0x40  # ZSTD before it was declared final: same framing
COMPRESSION_NAMES = {
    NO_COMPRESSION: "NoCompression",
    SNAPPY: "Snappy",
    ZLIB: "Zlib",
    BZIP2: "BZip2",
    LZ4: "LZ4",
    LZ4HC: "LZ4HC",
    XPRESS: "Xpress",
    ZSTD: "ZSTD",
    ZSTD_NOT_FINAL: "ZSTDNotFinal",
}

# Value types of the internal key trailer (db/dbformat.h ValueType).
TYPE_DELETION = 0x0
TYPE_VALUE = 0x1
TYPE_MERGE = 0x2
TYPE_SINGLE_DELETION = 0x7
TYPE_RANGE_DELETION = 0xF
TYPE_BLOB_INDEX = 0x11
TYPE_DELETION_WITH_TIMESTAMP = 0x14
TYPE_WIDE_COLUMN_ENTITY = 0x16
TYPE_VALUE_PREFERRED_SEQNO = 0x18
DELETION_TYPES = (TYPE_DELETION, TYPE_SINGLE_DELETION, TYPE_DELETION_WITH_TIMESTAMP)
VALUE_TYPE_NAMES = {
    TYPE_DELETION: "Deletion",
    TYPE_VALUE: "Value",
    TYPE_MERGE: "Merge",
    TYPE_SINGLE_DELETION: "SingleDeletion",
    TYPE_RANGE_DELETION: "RangeDeletion",
    TYPE_BLOB_INDEX: "BlobIndex",
    TYPE_DELETION_WITH_TIMESTAMP: "DeletionWithTimestamp",
    TYPE_WIDE_COLUMN_ENTITY: "WideColumnEntity",
    TYPE_VALUE_PREFERRED_SEQNO: "ValuePreferredSeqno",
}
INTERNAL_KEY_TRAILER = 8

# Index types (BlockBasedTableOptions::IndexType), stored as a fixed32 user property.
INDEX_BINARY_SEARCH, INDEX_HASH_SEARCH, INDEX_TWO_LEVEL, INDEX_BINARY_SEARCH_WITH_FIRST_KEY = 0, 1, 2, 3
INDEX_TYPE_NAMES = {
    INDEX_BINARY_SEARCH: "kBinarySearch",
    INDEX_HASH_SEARCH: "kHashSearch",
    INDEX_TWO_LEVEL: "kTwoLevelIndexSearch",
    INDEX_BINARY_SEARCH_WITH_FIRST_KEY: "kBinarySearchWithFirstKey",
}

# Meta block names in the metaindex block.
PROPERTIES_BLOCK = b"rocksdb.properties"
PROPERTIES_BLOCK_OLD = b"rocksdb.stats"
RANGE_DEL_BLOCK = b"rocksdb.range_del"
INDEX_BLOCK = b"rocksdb.index"  # format_version >= 6
COMPRESSION_DICT_BLOCK = b"rocksdb.compression_dict"

BYTEWISE_COMPARATOR = "leveldb.BytewiseComparator"
# Table properties RocksDB stores as varint64 (table/meta_blocks.cc predefined_uint64_properties).
UINT64_PROPERTIES = frozenset(
    (
        "rocksdb.original.file.number",
        "rocksdb.data.size",
        "rocksdb.index.size",
        "rocksdb.index.partitions",
        "rocksdb.top-level.index.size",
        "rocksdb.index.key.is.user.key",
        "rocksdb.index.value.is.delta.encoded",
        "rocksdb.filter.size",
        "rocksdb.raw.key.size",
        "rocksdb.raw.value.size",
        "rocksdb.num.data.blocks",
        "rocksdb.num.entries",
        "rocksdb.num.filter_entries",
        "rocksdb.deleted.keys",
        "rocksdb.merge.operands",
        "rocksdb.num.range-deletions",
        "rocksdb.format.version",
        "rocksdb.fixed.key.length",
        "rocksdb.column.family.id",
        "rocksdb.creation.time",
        "rocksdb.oldest.key.time",
        "rocksdb.file.creation.time",
        "rocksdb.sample_for_compression.slow.data.size",
        "rocksdb.sample_for_compression.fast.data.size",
        "rocksdb.tail.start.offset",
        "rocksdb.user.defined.timestamps.persisted",
        "rocksdb.newest.key.time",
    )
)
# Fixed32 user properties written by the block-based table's own collector.
FIXED32_PROPERTIES = frozenset(("rocksdb.block.based.table.index.type", "rocksdb.external_sst_file.version"))
# Fixed64 user property of files made by SstFileWriter and ingested: every key's sequence number.
FIXED64_PROPERTIES = frozenset(("rocksdb.external_sst_file.global_seqno",))
# Properties that hold binary data, kept as bytes.
BYTES_PROPERTIES = frozenset(("rocksdb.seqno.time.map",))


class VarintError(ValueError):
    """A varint runs past its buffer or is longer than its type allows (position in args[0])."""


def read_varint(buf: bytes | memoryview, pos: int, limit: int, max_bytes: int = 10) -> tuple[int, int]:
    """(value, next position) of the LEB128 varint at ``pos``; at most ``max_bytes`` bytes
    (5 for varint32, 10 for varint64), never reading at or past ``limit``."""
    result = 0
    shift = 0
    start = pos
    while pos < limit and pos - start < max_bytes:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            if max_bytes == 5 and result > 0xFFFFFFFF:
                break
            return result, pos
        shift += 7
    raise VarintError(start)


def zigzag_decode(value: int) -> int:
    return (value >> 1) ^ -(value & 1)


@dataclass(frozen=True)
class BlockHandle:
    offset: int
    size: int


def decode_block_handle(buf: bytes, pos: int, limit: int) -> tuple[BlockHandle, int]:
    offset, pos = read_varint(buf, pos, limit)
    size, pos = read_varint(buf, pos, limit)
    return BlockHandle(offset, size), pos


@dataclass(frozen=True)
class Footer:
    format_version: int
    checksum_type: int
    metaindex: BlockHandle
    index: BlockHandle | None  # None for format_version >= 6: found under INDEX_BLOCK in the metaindex
    base_context_checksum: int
    offset: int  # of the footer in the file


def parse_footer(tail: bytes, file_size: int, display: str) -> Footer:
    """The footer from the last bytes of the file (``tail``: up to FOOTER_LENGTH bytes)."""
    at = file_size - len(tail)
    if len(tail) < LEGACY_FOOTER_LENGTH:
        raise FormatError(
            f"expected an SST footer of {FOOTER_LENGTH} bytes at the end of the file, got a file of {file_size} bytes",
            file=display,
            offset=0,
            hint="The file is truncated or not an SST file; copy it again from the snapshot",
        )
    (magic,) = struct.unpack_from("<Q", tail, len(tail) - MAGIC_LENGTH)
    magic_at = file_size - MAGIC_LENGTH
    if magic == LEGACY_BLOCK_BASED_TABLE_MAGIC:
        raise UnsupportedError(
            "SST file of format_version 0 (legacy block-based table magic, RocksDB < 4.6); statecat reads "
            f"format_version {', '.join(map(str, SUPPORTED_FORMAT_VERSIONS))}",
            file=display,
            offset=magic_at,
            hint="Flink's RocksDB never writes it; compact the DB with a recent RocksDB to rewrite the file",
        )
    if magic in OTHER_TABLE_MAGICS:
        raise UnsupportedError(
            f"SST file in RocksDB's {OTHER_TABLE_MAGICS[magic]} format; statecat reads the block-based table "
            "format only",
            file=display,
            offset=magic_at,
            hint="Flink's RocksDB state backend writes block-based tables; use its default table format",
        )
    if magic != BLOCK_BASED_TABLE_MAGIC:
        raise FormatError(
            f"expected the block-based table magic 0x{BLOCK_BASED_TABLE_MAGIC:016x} in the last 8 bytes, "
            f"got 0x{magic:016x}",
            file=display,
            offset=magic_at,
            hint="The file is truncated, damaged or not an SST file; copy it again from the snapshot",
        )
    if len(tail) < FOOTER_LENGTH:
        raise FormatError(
            f"expected an SST footer of {FOOTER_LENGTH} bytes, got a file of {file_size} bytes",
            file=display,
            offset=0,
            hint="The file is truncated; copy it again from the snapshot",
        )
    base = len(tail) - FOOTER_LENGTH
    footer_at = at + base
    (version,) = struct.unpack_from("<I", tail, len(tail) - MAGIC_LENGTH - 4)
    if version not in SUPPORTED_FORMAT_VERSIONS:
        raise UnsupportedError(
            f"expected an SST format_version among {SUPPORTED_FORMAT_VERSIONS}, got {version}",
            file=display,
            offset=file_size - MAGIC_LENGTH - 4,
            hint="Flink's FRocksDB 6.20 and 8.10 write format_version 2 to 6; a larger number is a newer "
            "RocksDB, a wild one a damaged footer",
        )
    checksum_type = tail[base]
    if checksum_type not in CHECKSUM_NAMES:
        raise FormatError(
            f"expected a checksum type among {sorted(CHECKSUM_NAMES)} in the footer, got {checksum_type}",
            file=display,
            offset=footer_at,
            hint="The footer is damaged; copy the file again from the snapshot",
        )
    part2 = base + 1
    if version >= FORMAT_VERSION_6:
        if tail[part2 : part2 + 4] != EXTENDED_MAGIC:
            raise FormatError(
                f"expected the extended footer magic {EXTENDED_MAGIC.hex()} of format_version {version}, "
                f"got {bytes(tail[part2 : part2 + 4]).hex()}",
                file=display,
                offset=footer_at + 1,
                hint="The footer is damaged; copy the file again from the snapshot",
            )
        stored, base_context, metaindex_size = struct.unpack_from("<III", tail, part2 + 4)
        (reserved,) = struct.unpack_from("<Q", tail, part2 + 32)
        if base_context == 0:
            raise FormatError(
                "expected a non-zero base context checksum in a format_version 6 footer, got 0",
                file=display,
                offset=footer_at + 9,
                hint="The footer is damaged; copy the file again from the snapshot",
            )
        if reserved != 0:
            raise UnsupportedError(
                "the SST footer uses a RocksDB feature newer than format_version 6 (reserved bytes set)",
                file=display,
                offset=footer_at + 33,
            )
        if checksum_type != NO_CHECKSUM:
            cleared = bytearray(tail[base : base + FOOTER_LENGTH])
            cleared[5:9] = b"\0\0\0\0"
            computed = (
                compute_checksum(checksum_type, bytes(cleared)) + context_modifier(base_context, footer_at)
            ) & 0xFFFFFFFF
            if computed != stored:
                raise FormatError(
                    f"footer checksum mismatch: expected 0x{stored:08x} ({CHECKSUM_NAMES[checksum_type]}), "
                    f"got 0x{computed:08x}",
                    file=display,
                    offset=footer_at,
                    hint="The footer is damaged; copy the file again from the snapshot",
                )
        metaindex_end = footer_at - BLOCK_TRAILER_SIZE
        if metaindex_size > metaindex_end:
            raise FormatError(
                f"expected a metaindex block within the file, got a size of {metaindex_size}",
                file=display,
                offset=footer_at + 13,
                hint="The footer is damaged",
            )
        return Footer(
            version,
            checksum_type,
            BlockHandle(metaindex_end - metaindex_size, metaindex_size),
            None,
            base_context,
            footer_at,
        )
    try:
        metaindex, pos = decode_block_handle(tail, part2, part2 + 2 * BLOCK_HANDLE_MAX_LENGTH)
        index, _ = decode_block_handle(tail, pos, part2 + 2 * BLOCK_HANDLE_MAX_LENGTH)
    except VarintError:
        raise FormatError(
            "expected the metaindex and index block handles in the footer, got a bad varint",
            file=display,
            offset=footer_at + 1,
            hint="The footer is damaged; copy the file again from the snapshot",
        ) from None
    return Footer(version, checksum_type, metaindex, index, 0, footer_at)


def context_modifier(base_context_checksum: int, offset: int) -> int:
    """What format_version 6 adds to a block's checksum at ``offset`` (0 when disabled)."""
    if base_context_checksum == 0:
        return 0
    return base_context_checksum ^ (((offset & 0xFFFFFFFF) + (offset >> 32)) & 0xFFFFFFFF)


def compute_checksum(checksum_type: int, data: bytes) -> int:
    """RocksDB's ComputeBuiltinChecksum over ``data`` (for a block: its bytes + the type byte)."""
    if checksum_type == CRC32C:
        crc = crc32c.crc32c(data)
        return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF
    if checksum_type == XXHASH:
        return xxhash.xxh32_intdigest(data)
    if checksum_type == XXHASH64:
        return xxhash.xxh64_intdigest(data) & 0xFFFFFFFF
    if checksum_type == XXH3:
        if not data:
            return 0
        # The last byte (a block's compression type) is mixed in separately.
        return ((xxhash.xxh3_64_intdigest(data[:-1]) & 0xFFFFFFFF) ^ (data[-1] * 0x6B9083D9)) & 0xFFFFFFFF
    return 0


def block_checksum(checksum_type: int, payload: bytes | memoryview, type_byte: int) -> int:
    """The checksum of a block's ``payload`` followed by its compression ``type_byte`` (RocksDB's
    ComputeBuiltinChecksumWithLastByte), without copying the payload."""
    if checksum_type == CRC32C:
        crc = crc32c.crc32c(bytes((type_byte,)), value=crc32c.crc32c(payload))
        return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF
    if checksum_type == XXHASH:
        h: xxhash.xxh32 | xxhash.xxh64 = xxhash.xxh32(payload)
        h.update(bytes((type_byte,)))
        return h.intdigest()
    if checksum_type == XXHASH64:
        h = xxhash.xxh64(payload)
        h.update(bytes((type_byte,)))
        return h.intdigest() & 0xFFFFFFFF
    if checksum_type == XXH3:
        return ((xxhash.xxh3_64_intdigest(payload) & 0xFFFFFFFF) ^ (type_byte * 0x6B9083D9)) & 0xFFFFFFFF
    return 0
