"""statecat's own RocksDB SST reader (readers/backends/sst) against RocksDB itself.

Ground truth: tests/flink_jobs/java/SstSamples.java writes column families through a real RocksDB
(the FRocksDB inside Flink's flink-dist: 8.10 for Flink 2.3, 6.20 for Flink 1.20) — every
compression, format_version 2..6, each checksum type, partitioned and first-key indexes, the data
block hash index, overwrites, deletes, single deletes, range deletes and merge operands over several
uncompacted flushes — and records what RocksDB's own iterator returns for each column family and
its live SST files. A small set is committed under tests/fixtures/sst/<flink version>/ (refresh:
`python -m tests.test_sst_format --refresh`); the live_flink test regenerates and checks fresh files.
Damaged files are hand-made from the committed ones.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import shutil
import struct
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from statecat.readers.backends.sst import SUPPORTED_FORMAT_VERSIONS, ColumnFamilyView, SstFile
from statecat.readers.backends.sst.format import BLOCK_BASED_TABLE_MAGIC, FOOTER_LENGTH, block_checksum
from statecat.statemeta.errors import FormatError, UnsupportedError

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures" / "sst"
JAVA_SOURCE = HERE / "flink_jobs" / "java" / "SstSamples.java"
FLINK_VERSIONS = {"2.3": "2.3.0", "1.20": "1.20.5"}  # fixture dir -> Flink release (FRocksDB 8.10, 6.20)
NATIVE_CASE = HERE / "fixtures" / "cases" / "sql_groupby_native_rocksdb_2.3"
COMPRESSION_NAMES = {
    "NO_COMPRESSION": "NoCompression",
    "SNAPPY_COMPRESSION": "Snappy",
    "LZ4_COMPRESSION": "LZ4",
    "LZ4HC_COMPRESSION": "LZ4HC",
    "ZSTD_COMPRESSION": "ZSTD",
    "ZLIB_COMPRESSION": "Zlib",
}


def load_truth(directory: Path) -> dict:
    plain = directory / "truth.json"
    if plain.exists():
        return json.loads(plain.read_text())
    return json.loads(gzip.decompress((directory / "truth.json.gz").read_bytes()))


def open_sst(path: Path, **kwargs) -> SstFile:
    return SstFile(io.BytesIO(path.read_bytes()), str(path), path.stat().st_size, **kwargs)


def sst_from_bytes(data: bytes, name: str = "damaged.sst", **kwargs) -> SstFile:
    return SstFile(io.BytesIO(data), name, len(data), **kwargs)


def family_cases():
    for version in FLINK_VERSIONS:
        for cf in load_truth(FIXTURES / version)["column_families"]:
            yield pytest.param(version, cf["name"], id=f"{version}-{cf['name']}")


def family(version: str, name: str) -> tuple[dict, list[SstFile]]:
    directory = FIXTURES / version
    cf = next(c for c in load_truth(directory)["column_families"] if c["name"] == name)
    return cf, open_family(directory, cf)


def open_family(directory: Path, cf: dict) -> list[SstFile]:
    # largest_seqno: what RocksDB's MANIFEST says, needed by ingested files only
    return [open_sst(directory / f["name"], largest_seqno=f["largest_seqno"]) for f in cf["files"]]


def check_family(cf: dict, files: list[SstFile]) -> None:
    """The view of the column family's live files is exactly RocksDB's iteration, and each file
    describes itself as RocksDB wrote it."""
    got = [[k.hex(), v.hex()] for k, v in ColumnFamilyView(files).entries()]
    assert got == cf["entries"]
    for f in files:
        # SstFileWriter's file (ingested) names no column family and uses the writer's own options
        if f.global_seqno is None:
            assert f.column_family == cf["name"]
            assert f.properties["rocksdb.merge.operator"] == "StringAppendTESTOperator"
        assert f.compression == COMPRESSION_NAMES[cf["compression"]]
        assert f.index_type_name == cf["index_type"]
        if cf["format_version"] is not None:
            assert f.format_version == cf["format_version"]
        if cf["checksum"] is not None:
            assert f.checksum_type == cf["checksum"]
        entries = list(f.entries())
        assert entries == sorted(entries, key=lambda e: (e[0], -e[1]))
        assert len(entries) + len(f.range_tombstones()) == f.properties["rocksdb.num.entries"]


@pytest.mark.parametrize(("version", "name"), list(family_cases()))
def test_view_is_rocksdb_iteration(version, name):
    cf, files = family(version, name)
    check_family(cf, files)


def test_fixtures_cover_the_features():
    for version in FLINK_VERSIONS:
        truth = load_truth(FIXTURES / version)
        cfs = {c["name"]: c for c in truth["column_families"]}
        assert truth["rocksdb_version"].startswith({"2.3": "8.10", "1.20": "6.20"}[version])
        assert {c["compression"] for c in cfs.values()} == set(COMPRESSION_NAMES)
        files = [open_sst(FIXTURES / version / f["name"]) for c in cfs.values() for f in c["files"]]
        assert {f.format_version for f in files} >= {2, 3, 4, 5}
        assert {f.checksum_type for f in files} >= {"kCRC32c", "kxxHash", "kxxHash64"}
        assert any(f.properties.get("rocksdb.index.partitions", 0) > 1 for f in files)
        assert any(f.properties["rocksdb.merge.operands"] > 0 for f in files)
        assert any(f.properties["rocksdb.deleted.keys"] > 0 for f in files)
        assert any(f.range_tombstones() for f in files)
        assert all(len(c["files"]) == 3 for c in cfs.values() if c["writes"] == "three_flushes" and not c["compacted"])
        assert len(cfs["one_flush"]["files"]) == len(cfs["compacted"]["files"]) == 1
        disjoint = [open_sst(FIXTURES / version / f["name"]) for f in cfs["disjoint_flushes"]["files"]]
        assert len(disjoint) == 2 and ColumnFamilyView(disjoint)._disjoint_order() is not None
        # An ingested file: its keys' sequence number comes from the MANIFEST (here: the live file list).
        plain = [open_sst(FIXTURES / version / f["name"]) for f in cfs["ingested"]["files"]]
        assert sum(f.global_seqno_unknown for f in plain) == 1
        with pytest.raises(UnsupportedError, match="MANIFEST"):
            ColumnFamilyView(plain)
        ingested = [f for f in open_family(FIXTURES / version, cfs["ingested"]) if f.global_seqno]
        assert len(ingested) == 1 and {e[1] for e in ingested[0].entries()} == {ingested[0].global_seqno}
    files_2_3 = [open_sst(p) for p in (FIXTURES / "2.3").glob("*.sst")]
    assert {f.format_version for f in files_2_3} >= {6}
    assert "kXXH3" in {f.checksum_type for f in files_2_3}


def test_decoded_block_arrays():
    cf, files = family("2.3", "none")
    f = files[-1]  # the first flush: most blocks
    blocks = list(f.data_blocks())
    assert len(blocks) == f.properties["rocksdb.num.data.blocks"] > 3
    rebuilt = []
    for block in blocks:
        assert block.keys.dtype == np.uint8 and block.data.dtype == np.uint8
        assert block.seq.dtype == np.uint64 and block.vtype.dtype == np.uint8
        # full user keys back to back
        assert block.key_start.tolist() == np.concatenate(([0], np.cumsum(block.key_len)[:-1])).tolist()
        assert int(block.key_len.sum()) == block.keys.shape[0]
        data = block.data.tobytes()
        for i in range(len(block)):
            key = block.keys[block.key_start[i] : block.key_start[i] + block.key_len[i]].tobytes()
            value = data[block.value_start[i] : block.value_start[i] + block.value_len[i]]
            rebuilt.append((key, int(block.seq[i]), int(block.vtype[i]), value))
    assert rebuilt == list(f.entries())


@pytest.mark.parametrize("name", ["none", "partitioned", "fv2_crc32c", "first_key_hash", "fv6_xxh3"])
def test_key_ranges_read_only_their_blocks(name):
    cf, files = family("2.3", name)
    truth = [(bytes.fromhex(k), bytes.fromhex(v)) for k, v in cf["entries"]]
    keys = [k for k, _ in truth]
    for lower, upper in [
        (keys[5], keys[9]),
        (None, keys[3]),
        (keys[-4], None),
        (keys[10], keys[10] + b"\0"),
        (b"\x00\x01", b"\x00\x02"),
        (b"\xff", None),
        (keys[7], keys[7]),
    ]:
        expected = [(k, v) for k, v in truth if (lower is None or k >= lower) and (upper is None or k < upper)]
        assert list(ColumnFamilyView(files).entries(lower, upper)) == expected, (lower, upper)
    # One key: at most the two blocks around its separator, not the others (found through the index).
    for f in files:
        everything = f.data_block_handles()
        for key in keys[::7]:
            chosen = f.data_block_handles(key, key + b"\0")
            assert len(chosen) <= 2 and set(chosen) <= set(everything)
            holding = [e for e in f.entries() if e[0] == key]
            in_chosen = [e for b in f.data_blocks(key, key + b"\0") for e in _block_rows(b) if e[0] == key]
            assert in_chosen == holding


def _block_rows(block):
    return list(zip(block.key_list(), block.seq.tolist(), block.vtype.tolist(), block.value_list()))


def test_reads_lazily():
    _, files = family("2.3", "none")
    f = files[-1]
    opened = f.bytes_read
    assert opened < f.size / 2  # footer, metaindex and properties only
    key = next(f.entries())[0]
    f2 = open_sst(FIXTURES / "2.3" / f.display.rsplit("/", 1)[1])
    list(f2.entries(key, key + b"\0"))
    full = open_sst(FIXTURES / "2.3" / f.display.rsplit("/", 1)[1])
    list(full.entries())
    assert f2.bytes_read < full.bytes_read


def test_overlapping_range_tombstones():
    """The newest covering deletion per key, against the definition (max seq over the tombstones
    whose [start, end) holds the key), for nested, overlapping, adjacent and empty ranges."""
    from statecat.readers.backends.sst import RangeTombstones

    tombstones = [
        (b"b", b"m", 5),
        (b"d", b"f", 9),
        (b"e", b"q", 7),
        (b"q", b"r", 3),
        (b"x", b"x", 11),
        (b"a", b"c", 2),
        (b"k", b"l", 1),
    ]
    index = RangeTombstones(tombstones)
    for key in [b"", b"a", b"a\0", b"b", b"c", b"d", b"e", b"f", b"g", b"k", b"l", b"m", b"p", b"q", b"r", b"x", b"y"]:
        expected = max([seq for start, end, seq in tombstones if start <= key < end], default=0)
        assert index.covering_seq(key) == expected, key


# ---------------------------------------------------------------------- real Flink snapshot files


def inline_sst_files(metadata: bytes) -> list[bytes]:
    """SST files stored inline in a `_metadata` (byte stream handles): each ends with the table
    magic and follows its big-endian int length."""
    magic = BLOCK_BASED_TABLE_MAGIC.to_bytes(8, "little")
    out = []
    at = metadata.find(magic)
    while at >= 0:
        end = at + 8
        start = next(
            s for s in range(end - FOOTER_LENGTH, 3, -1) if struct.unpack_from(">i", metadata, s - 4)[0] == end - s
        )
        out.append(metadata[start:end])
        at = metadata.find(magic, end)
    return out


def test_real_flink_2_3_native_savepoint():
    """The GROUP BY accumulators in the RocksDB files of a real native savepoint are the counts and
    sums of the job's input."""
    counts, sums = Counter(), Counter()
    for part in sorted((NATIVE_CASE / "input").glob("*.csv")):
        for word, amount in csv.reader(part.open()):
            counts[word] += 1
            sums[word] += int(amount)
    blobs = inline_sst_files((NATIVE_CASE / "savepoint" / "_metadata").read_bytes())
    assert len(blobs) == 2  # one per subtask
    seen = {}
    for i, blob in enumerate(blobs):
        f = sst_from_bytes(blob, f"_metadata sst {i}")
        assert (f.format_version, f.checksum_type, f.compression, f.index_type_name) == (
            5,
            "kXXH3",
            "Snappy",
            "kBinarySearch",
        )
        assert f.column_family == "accState"
        rows = list(ColumnFamilyView([f]).entries())
        assert len(rows) == f.properties["rocksdb.num.entries"]
        for key, value in rows:
            # key-group byte, RowData(word) as a 16-byte binary row (8 bytes of null bits, one 8-byte slot
            # holding the string inline: its last byte is 0x80 | length), the namespace byte
            assert len(key) == 22 and struct.unpack_from(">i", key, 1)[0] == 16 and key[20] & 0x80
            word = key[13 : 13 + (key[20] & 0x7F)].decode()
            # RowData(cnt, total): length, 8 bytes of null bits, two 8-byte little-endian slots
            assert struct.unpack_from(">i", value)[0] == 24
            seen[word] = struct.unpack_from("<qq", value, 12)
    assert seen == {w: (counts[w], sums[w]) for w in counts}
    # The two subtasks' files hold disjoint key-groups: one view over both, no k-way merge needed.
    view = ColumnFamilyView([sst_from_bytes(blob, f"_metadata sst {i}") for i, blob in enumerate(blobs)])
    assert view._disjoint_order() is not None
    both = list(view.entries())
    assert [k for k, _ in both] == sorted(k for k, _ in both) and len(both) == len(seen)


def test_reads_through_statecat_state_files():
    from statecat.statemeta.files.storage import StateFile

    cf, _ = family("1.20", "partitioned")
    files = []
    for f in cf["files"]:
        path = FIXTURES / "1.20" / f["name"]
        files.append(
            SstFile(StateFile(io.FileIO(path), str(path), path.stat().st_size), str(path), path.stat().st_size)
        )
    assert [[k.hex(), v.hex()] for k, v in ColumnFamilyView(files).entries()] == cf["entries"]


# ---------------------------------------------------------------------- damaged files


def fixture_bytes(version: str, name: str, index: int = -1) -> tuple[bytes, SstFile]:
    cf, files = family(version, name)
    f = files[index]
    return (FIXTURES / version / Path(f.display).name).read_bytes(), f


def reseal(data: bytearray, f: SstFile, offset: int, size: int) -> None:
    """Recomputes the trailer checksum of the block at ``offset`` (format_version < 6)."""
    stored = block_checksum(
        {"kCRC32c": 1, "kxxHash": 2, "kxxHash64": 3, "kXXH3": 4}[f.checksum_type],
        bytes(data[offset : offset + size]),
        data[offset + size],
    )
    struct.pack_into("<I", data, offset + size + 1, stored)


def test_flipped_byte_is_a_checksum_mismatch():
    for version, name in [
        ("2.3", "snappy"),
        ("2.3", "fv6_xxh3"),
        ("2.3", "fv2_crc32c"),
        ("1.20", "fv3_xxhash"),
        ("1.20", "fv4_xxhash64"),
    ]:
        data, f = fixture_bytes(version, name)
        handle = f.data_block_handles()[2]
        damaged = bytearray(data)
        damaged[handle.offset + handle.size // 2] ^= 0x10
        g = sst_from_bytes(bytes(damaged), "flipped.sst")
        with pytest.raises(FormatError) as e:
            list(g.entries())
        text = str(e.value)
        assert "checksum mismatch" in text and f"at block offset {handle.offset}" in text
        assert "flipped.sst" in text and e.value.offset == handle.offset
        # Without verification the damage surfaces elsewhere or not at all, never as a crash.
        try:
            list(sst_from_bytes(bytes(damaged), "flipped.sst", verify_checksums=False).entries())
        except FormatError:
            pass


def test_truncated_file():
    data, _ = fixture_bytes("2.3", "zstd")
    for cut in (1, 10, len(data) // 2, len(data) - 20):
        with pytest.raises(FormatError) as e:
            sst_from_bytes(data[:-cut], "cut.sst")
        assert "cut.sst" in str(e.value) and ("truncated" in str(e.value) or "magic" in str(e.value))
    with pytest.raises(FormatError, match="truncated"):
        sst_from_bytes(data[:20], "tiny.sst")
    # A source shorter than the size it is said to have.
    with pytest.raises(FormatError, match="truncated|shorter"):
        SstFile(io.BytesIO(data[:-100]), "short.sst", len(data))


def test_bad_footer_magic():
    data, _ = fixture_bytes("1.20", "lz4")
    damaged = bytearray(data)
    damaged[-3] ^= 0xFF
    with pytest.raises(FormatError) as e:
        sst_from_bytes(bytes(damaged), "magic.sst")
    assert "magic" in str(e.value) and e.value.offset == len(data) - 8


def test_unsupported_format_version():
    data, _ = fixture_bytes("2.3", "none")
    damaged = bytearray(data)
    struct.pack_into("<I", damaged, len(data) - 12, 99)
    with pytest.raises(UnsupportedError) as e:
        sst_from_bytes(bytes(damaged))
    assert "99" in str(e.value) and str(SUPPORTED_FORMAT_VERSIONS) in str(e.value)


def test_format_version_6_footer_checksum():
    data, _ = fixture_bytes("2.3", "fv6_xxh3")
    damaged = bytearray(data)
    damaged[len(data) - FOOTER_LENGTH + 13] ^= 1  # metaindex size: covered by the footer checksum
    with pytest.raises(FormatError, match="footer checksum mismatch"):
        sst_from_bytes(bytes(damaged))


def test_block_handle_past_the_end():
    data, f = fixture_bytes("2.3", "none")
    # A format_version 5 footer: checksum type, metaindex handle, index handle (varints), padding.
    footer = bytearray(data[-FOOTER_LENGTH:])
    meta = f.footer.metaindex
    handles = _varint(meta.offset) + _varint(meta.size) + _varint(len(data) + 1000) + _varint(64)
    footer[1:41] = handles.ljust(40, b"\0")
    with pytest.raises(FormatError) as e:
        list(sst_from_bytes(data[:-FOOTER_LENGTH] + bytes(footer), "handle.sst").entries())
    assert "past the end of the file" in str(e.value) and e.value.offset == len(data) + 1000


def _varint(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append(v & 0x7F | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def test_restart_count_too_large():
    data, f = fixture_bytes("2.3", "none")
    handle = f.data_block_handles()[1]
    damaged = bytearray(data)
    struct.pack_into("<I", damaged, handle.offset + handle.size - 4, 0x00FFFFFF)
    reseal(damaged, f, handle.offset, handle.size)
    with pytest.raises(FormatError) as e:
        list(sst_from_bytes(bytes(damaged)).entries())
    assert "bad restart array" in str(e.value) and e.value.offset == handle.offset
    # A restart offset that is not an entry's start.
    damaged = bytearray(data)
    (count,) = struct.unpack_from("<I", data, handle.offset + handle.size - 4)
    struct.pack_into("<I", damaged, handle.offset + handle.size - 8, 1)
    reseal(damaged, f, handle.offset, handle.size)
    assert count > 1
    with pytest.raises(FormatError, match="restart array"):
        list(sst_from_bytes(bytes(damaged)).entries())


def test_unknown_compression_and_corrupt_compressed_block():
    data, f = fixture_bytes("2.3", "none")
    handle = f.data_block_handles()[0]
    damaged = bytearray(data)
    damaged[handle.offset + handle.size] = 9
    reseal(damaged, f, handle.offset, handle.size)
    with pytest.raises(FormatError, match="unknown compression type 9"):
        list(sst_from_bytes(bytes(damaged)).entries())
    for name, match in [
        ("zstd", "corrupt ZSTD"),
        ("lz4", "corrupt LZ4"),
        ("zlib", "corrupt Zlib"),
        ("snappy", "corrupt Snappy"),
    ]:
        data, f = fixture_bytes("2.3", name)
        handle = f.data_block_handles()[1]
        damaged = bytearray(data)
        if name == "snappy":
            damaged[handle.offset] ^= 0x7F  # the uncompressed length snappy announces
        else:
            damaged[handle.offset] += 1  # RocksDB's varint32 uncompressed size
        reseal(damaged, f, handle.offset, handle.size)
        with pytest.raises(FormatError, match=match) as e:
            list(sst_from_bytes(bytes(damaged)).entries())
        assert e.value.offset == handle.offset


def test_other_comparator_and_blob_values_are_unsupported():
    data, f = fixture_bytes("2.3", "none")
    props = f.metaindex[b"rocksdb.properties"]
    damaged = bytearray(data)
    at = data.index(b"leveldb.BytewiseComparator", props.offset)
    damaged[at : at + 26] = b"leveldb.BytewiseCOMPARATOR"
    reseal(damaged, f, props.offset, props.size)
    with pytest.raises(UnsupportedError, match="comparator"):
        sst_from_bytes(bytes(damaged))
    # An entry whose type is a blob index (value stored in a blob file).
    handle = f.data_block_handles()[0]
    block = next(f.data_blocks())
    first_key = block.key_list()[0]
    type_at = data.index(first_key, handle.offset) + len(first_key)  # first trailer byte: the type
    damaged = bytearray(data)
    assert damaged[type_at] == 1
    damaged[type_at] = 0x11
    reseal(damaged, f, handle.offset, handle.size)
    with pytest.raises(UnsupportedError, match="BlobIndex"):
        list(ColumnFamilyView([sst_from_bytes(bytes(damaged))]).entries())


def test_mutated_files_fail_cleanly():
    """Seeded byte mutations of real files, read without checksum verification so that the damage
    reaches the decoders: each read succeeds or raises a StatecatError, never anything else."""
    import random

    from statecat.statemeta.errors import StatecatError

    rng = random.Random(20261123)
    paths = sorted(FIXTURES.glob("*/*.sst"))
    outcomes = Counter()
    for _ in range(400):
        data = bytearray(rng.choice(paths).read_bytes())
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(data))
            if rng.random() < 0.8:
                data[at] ^= 1 << rng.randrange(8)
            else:
                del data[at : at + rng.randint(1, 40)]
        try:
            f = sst_from_bytes(bytes(data), "mutated.sst", verify_checksums=False)
            list(ColumnFamilyView([f]).entries())
            outcomes["read"] += 1
        except StatecatError as e:
            assert "mutated.sst" in str(e)
            outcomes["error"] += 1
    assert outcomes["read"] and outcomes["error"]


# ---------------------------------------------------------------------- fresh files from RocksDB


def flink_dist_jar(version: str) -> Path:
    from tests.fixtures import runtime

    runtime.ensure_venv(version)
    return next(runtime.venv_dir(version).glob(f"lib/python3*/site-packages/pyflink/lib/flink-dist-{version}.jar"))


def sst_samples_command(version: str) -> list[str]:
    """java -cp <classes>:<flink-dist> SstSamples, compiled once per source content."""
    from tests.fixtures import runtime

    jar = flink_dist_jar(version)
    classes = (
        runtime.flink_cache_dir(version)
        / "classes"
        / ("sst-" + hashlib.sha256(JAVA_SOURCE.read_bytes()).hexdigest()[:16])
    )
    if not (classes / "SstSamples.class").is_file():
        classes.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix="javac-", dir=classes.parent))
        try:
            subprocess.run(
                [runtime.jdk_tool("javac"), "-nowarn", "-d", str(tmp), "-cp", str(jar), str(JAVA_SOURCE)], check=True
            )
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        shutil.rmtree(classes, ignore_errors=True)
        tmp.rename(classes)
    return [runtime.jdk_tool("java"), "-cp", f"{classes}:{jar}", "SstSamples"]


def write_samples(version: str, out: Path, *args: str) -> dict:
    """Runs SstSamples (one JVM at a time on this machine) and returns its truth.json."""
    subprocess.run(["flock", "/tmp/statecat-heavy.lock", *sst_samples_command(version), str(out), *args], check=True)
    return load_truth(out)


@pytest.mark.live_flink
@pytest.mark.parametrize("fixture_dir", list(FLINK_VERSIONS))
def test_fresh_rocksdb_files(fixture_dir):
    out = Path(tempfile.mkdtemp(prefix="statecat-sst-"))
    try:
        truth = write_samples(FLINK_VERSIONS[fixture_dir], out)
        assert len(truth["column_families"]) >= 12
        for cf in truth["column_families"]:
            check_family(cf, open_family(out / "db", cf))
    finally:
        shutil.rmtree(out, ignore_errors=True)


def refresh_committed_fixtures() -> None:
    """Rewrites tests/fixtures/sst/<version>/ (live SST files + truth.json.gz) from fresh runs."""
    for fixture_dir, version in FLINK_VERSIONS.items():
        out = Path(tempfile.mkdtemp(prefix="statecat-sst-"))
        try:
            truth = write_samples(version, out)
            target = FIXTURES / fixture_dir
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir(parents=True)
            for cf in truth["column_families"]:
                for f in cf["files"]:
                    shutil.copy(out / "db" / f["name"], target / f["name"])
            (target / "truth.json.gz").write_bytes(gzip.compress(json.dumps(truth, indent=1).encode(), mtime=0))
        finally:
            shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    if sys.argv[1:] == ["--refresh"]:
        refresh_committed_fixtures()
    else:
        sys.exit("usage: python -m tests.test_sst_format --refresh")
