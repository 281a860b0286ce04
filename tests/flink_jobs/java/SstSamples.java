import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import org.rocksdb.BlockBasedTableConfig;
import org.rocksdb.ChecksumType;
import org.rocksdb.ColumnFamilyDescriptor;
import org.rocksdb.ColumnFamilyHandle;
import org.rocksdb.ColumnFamilyOptions;
import org.rocksdb.CompressionType;
import org.rocksdb.DBOptions;
import org.rocksdb.DataBlockIndexType;
import org.rocksdb.EnvOptions;
import org.rocksdb.FlushOptions;
import org.rocksdb.IndexType;
import org.rocksdb.IngestExternalFileOptions;
import org.rocksdb.LiveFileMetaData;
import org.rocksdb.Options;
import org.rocksdb.RocksDB;
import org.rocksdb.RocksIterator;
import org.rocksdb.SstFileWriter;

/**
 * Writes RocksDB SST files through a real DB with the RocksDB build Flink ships (FRocksDB inside
 * flink-dist) and records, as ground truth for statecat's own SST reader, what RocksDB itself
 * returns iterating each column family plus the live SST files of each.
 *
 * <p>Usage: SstSamples OUT_DIR [samples | big ENTRIES]. "samples": one column family per
 * compression and table feature, each written in three flushes with overwrites, deletes, single
 * deletes, range deletes and merge operands (auto compaction off, so the versions stay in separate
 * files); plus the same writes in one flush, one family compacted, one of two disjoint flushes, and
 * one with a file made by SstFileWriter ingested on top. "big": one column family "big" of ENTRIES puts plus merge operands, for timing.
 * Writes OUT_DIR/db (the DB) and OUT_DIR/truth.json.
 */
public class SstSamples {
    // Flink's list-state merge operator (RocksDBKeyedStateBackend.MERGE_OPERATOR_NAME): operands
    // joined by ','.
    static final String MERGE_OPERATOR = "stringappendtest";
    static final int N = 60;

    static final class Cf {
        final String name;
        final CompressionType compression;
        final IndexType index;
        final Integer formatVersion;
        final String checksum;
        final boolean hashIndex;
        final boolean compact;
        String writes = "three_flushes";

        Cf(String name, CompressionType compression, IndexType index, Integer formatVersion,
           String checksum, boolean hashIndex, boolean compact) {
            this.name = name;
            this.compression = compression;
            this.index = index;
            this.formatVersion = formatVersion;
            this.checksum = checksum;
            this.hashIndex = hashIndex;
            this.compact = compact;
        }
    }

    static boolean hasXxh3() {
        try {
            ChecksumType.valueOf("kXXH3");
            return true;
        } catch (IllegalArgumentException e) {
            return false;
        }
    }

    static List<Cf> sampleFamilies() {
        boolean modern = hasXxh3();  // FRocksDB 8.x (Flink 2.x); 6.20 has neither kXXH3 nor format_version 6
        List<Cf> cfs = new ArrayList<>();
        cfs.add(new Cf("none", CompressionType.NO_COMPRESSION, IndexType.kBinarySearch, null, null, false, false));
        cfs.add(new Cf("snappy", CompressionType.SNAPPY_COMPRESSION, IndexType.kBinarySearch, null, null, false, false));
        cfs.add(new Cf("lz4", CompressionType.LZ4_COMPRESSION, IndexType.kBinarySearch, null, null, false, false));
        cfs.add(new Cf("lz4hc", CompressionType.LZ4HC_COMPRESSION, IndexType.kBinarySearch, null, null, false, false));
        cfs.add(new Cf("zstd", CompressionType.ZSTD_COMPRESSION, IndexType.kBinarySearch, null, null, false, false));
        cfs.add(new Cf("zlib", CompressionType.ZLIB_COMPRESSION, IndexType.kBinarySearch, null, null, false, false));
        cfs.add(new Cf("partitioned", CompressionType.SNAPPY_COMPRESSION, IndexType.kTwoLevelIndexSearch, null, null,
                       false, false));
        cfs.add(new Cf("fv2_crc32c", CompressionType.SNAPPY_COMPRESSION, IndexType.kBinarySearch, 2, "kCRC32c",
                       false, false));
        cfs.add(new Cf("fv3_xxhash", CompressionType.LZ4_COMPRESSION, IndexType.kBinarySearch, 3, "kxxHash",
                       false, false));
        cfs.add(new Cf("fv4_xxhash64", CompressionType.NO_COMPRESSION, IndexType.kTwoLevelIndexSearch, 4,
                       "kxxHash64", false, false));
        if (modern) {
            cfs.add(new Cf("fv6_xxh3", CompressionType.SNAPPY_COMPRESSION, IndexType.kTwoLevelIndexSearch, 6,
                           "kXXH3", false, false));
        }
        cfs.add(new Cf("first_key_hash", CompressionType.NO_COMPRESSION, IndexType.kBinarySearchWithFirstKey, null,
                       null, true, false));
        cfs.add(new Cf("compacted", CompressionType.SNAPPY_COMPRESSION, IndexType.kBinarySearch, null, null, false,
                       true));
        // All writes in one memtable, one flush: deletes, merges and a range deletion in one file.
        Cf one = new Cf("one_flush", CompressionType.LZ4_COMPRESSION, IndexType.kBinarySearch, null, null, false,
                        false);
        one.writes = "one_flush";
        cfs.add(one);
        // Two flushes of disjoint key ranges: files that need no merging.
        Cf disjoint = new Cf("disjoint_flushes", CompressionType.ZSTD_COMPRESSION, IndexType.kBinarySearch, null,
                             null, false, false);
        disjoint.writes = "disjoint_flushes";
        cfs.add(disjoint);
        // The samples, then a file made by SstFileWriter ingested on top (keys stored with seq 0,
        // the real one kept in the MANIFEST only), then one more flush.
        Cf ingested = new Cf("ingested", CompressionType.SNAPPY_COMPRESSION, IndexType.kBinarySearch, null, null,
                             false, false);
        ingested.writes = "ingested";
        cfs.add(ingested);
        return cfs;
    }

    static ColumnFamilyOptions options(Cf cf, long blockSize) {
        BlockBasedTableConfig table = new BlockBasedTableConfig()
                .setBlockSize(blockSize)
                .setBlockRestartInterval(4)
                .setIndexType(cf.index);
        if (!cf.name.equals("none") && !cf.name.equals("snappy")) {
            table.setIndexBlockRestartInterval(3);  // delta-encoded index values between restart points
        }
        if (cf.index == IndexType.kTwoLevelIndexSearch) {
            table.setMetadataBlockSize(48);  // several index partitions
        }
        if (cf.formatVersion != null) {
            table.setFormatVersion(cf.formatVersion);
        }
        if (cf.checksum != null) {
            table.setChecksumType(ChecksumType.valueOf(cf.checksum));
        }
        if (cf.hashIndex) {
            table.setDataBlockIndexType(DataBlockIndexType.kDataBlockBinaryAndHash);
        }
        return new ColumnFamilyOptions()
                .setMergeOperatorName(MERGE_OPERATOR)
                .setCompressionType(cf.compression)
                .setDisableAutoCompactions(true)
                .setTableFormatConfig(table);
    }

    // Keys shaped like Flink's: a 2-byte key-group prefix, a serialized key, sometimes binary bytes.
    static byte[] key(int i) {
        byte[] tail = String.format("key%05d", i).getBytes(StandardCharsets.US_ASCII);
        int extra = i % 5 == 0 ? 2 : 0;
        byte[] k = new byte[2 + tail.length + extra];
        k[0] = 0;
        k[1] = (byte) (i % 4 == 3 ? 0xFF : i % 4);
        System.arraycopy(tail, 0, k, 2, tail.length);
        if (extra > 0) {
            k[k.length - 2] = (byte) 0xFF;
            k[k.length - 1] = 0;
        }
        return k;
    }

    static byte[] listKey(int i) {
        return String.format("\u0001list%04d", i).getBytes(StandardCharsets.US_ASCII);
    }

    static byte[] value(int i, int round) {
        String v = "v" + round + "-" + i;
        if (i % 13 == 0) {  // multi-byte varint lengths
            StringBuilder b = new StringBuilder(v);
            while (b.length() < 200) {
                b.append('|').append(i * round);
            }
            v = b.toString();
        }
        return v.getBytes(StandardCharsets.US_ASCII);
    }

    static byte[] ascii(String s) {
        return s.getBytes(StandardCharsets.US_ASCII);
    }

    static void flush(RocksDB db, ColumnFamilyHandle h) throws Exception {
        try (FlushOptions f = new FlushOptions().setWaitForFlush(true)) {
            db.flush(f, h);
        }
    }

    static void writeIngested(RocksDB db, ColumnFamilyHandle h, Path dir) throws Exception {
        writeSamples(db, h, "three_flushes");
        List<byte[]> keys = new ArrayList<>();
        for (int i = 0; i < N + 8; i += 4) {
            keys.add(key(i));
        }
        keys.sort(Arrays::compareUnsigned);
        String file = dir.resolve("ingest.sst").toString();
        try (EnvOptions env = new EnvOptions(); Options options = new Options();
             SstFileWriter writer = new SstFileWriter(env, options)) {
            writer.open(file);
            for (byte[] k : keys) {
                writer.put(k, ascii("ingested"));
            }
            writer.finish();
        }
        try (IngestExternalFileOptions ingest = new IngestExternalFileOptions().setMoveFiles(true)
                .setWriteGlobalSeqno(false)) {
            db.ingestExternalFile(h, List.of(file), ingest);
        }
        db.put(h, key(8), value(8, 4));
        db.merge(h, key(12), ascii("after-ingest"));
        flush(db, h);
    }

    static void writeSamples(RocksDB db, ColumnFamilyHandle h, String writes) throws Exception {
        boolean flushes = writes.equals("three_flushes");
        if (writes.equals("disjoint_flushes")) {
            for (int i = 0; i < N; i++) {
                if (i == N / 2) {
                    flush(db, h);
                }
                db.put(h, key(i < N / 2 ? i * 4 : i * 4 + 3), value(i, 1));  // key-group bytes 0, then 0xFF
                if (i % 6 == 0) {
                    db.merge(h, key(i < N / 2 ? i * 4 : i * 4 + 3), ascii("d" + i));
                }
            }
            flush(db, h);
            return;
        }
        // Flush 1: the base values, list keys with a first operand (no base value).
        for (int i = 0; i < N; i++) {
            db.put(h, key(i), value(i, 1));
        }
        for (int i = 0; i < 12; i++) {
            db.merge(h, listKey(i), ascii("a" + i));
        }
        if (flushes) {
            flush(db, h);
        }
        // Flush 2: overwrites, deletes, single deletes, operands on top of puts, a range delete.
        for (int i = 0; i < N; i++) {
            if (i % 3 == 0) {
                db.put(h, key(i), value(i, 2));
            } else if (i % 7 == 1) {
                db.delete(h, key(i));
            } else if (i % 11 == 2) {
                db.singleDelete(h, key(i));  // written once before: what single delete requires
            } else if (i % 5 == 4) {
                db.merge(h, key(i), ascii("m2-" + i));
            }
        }
        for (int i = 0; i < 12; i += 2) {
            db.merge(h, listKey(i), ascii("b" + i));
        }
        db.deleteRange(h, key(20), key(30));
        if (flushes) {
            flush(db, h);
        }
        // Flush 3: a put and operands inside the deleted range, operands after a delete, more
        // operands, new keys, a deleted list, a second range delete over older files only.
        db.put(h, key(24), value(24, 3));
        db.merge(h, key(26), ascii("m3-after-range"));
        for (int i = 0; i < N; i++) {
            if (i % 5 == 4 && i % 3 != 0 && i % 7 != 1) {
                db.merge(h, key(i), ascii("m3-" + i));
            } else if (i % 7 == 1 && i < 40) {
                db.merge(h, key(i), ascii("m3-after-delete-" + i));
            }
        }
        for (int i = 0; i < 12; i += 3) {
            db.merge(h, listKey(i), ascii("c" + i));
        }
        db.delete(h, listKey(5));
        for (int i = N; i < N + 8; i++) {
            db.put(h, key(i), value(i, 3));
        }
        db.deleteRange(h, key(40), key(44));
        db.put(h, key(42), value(42, 3));
        flush(db, h);
    }

    static void writeBig(RocksDB db, ColumnFamilyHandle h, int entries) throws Exception {
        int perFlush = Math.max(1, entries / 4);
        for (int i = 0; i < entries; i++) {
            // Flink-like keys: key-group prefix, a long key, a namespace.
            byte[] k = String.format("%c%ckey%09dns", (char) ((i >> 8) & 0x7F), (char) (i & 0x7F), i)
                    .getBytes(StandardCharsets.ISO_8859_1);
            if (i % 10 == 0) {
                db.merge(h, k, ascii("e" + i));
            } else {
                db.put(h, k, ascii("value-" + i + "-" + (i * 2654435761L)));
            }
            if (i % perFlush == perFlush - 1) {
                flush(db, h);
            }
        }
        flush(db, h);
    }

    static String hex(byte[] b) {
        StringBuilder s = new StringBuilder(b.length * 2);
        for (byte x : b) {
            s.append(Character.forDigit((x >> 4) & 0xF, 16)).append(Character.forDigit(x & 0xF, 16));
        }
        return s.toString();
    }

    static String quote(String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    public static void main(String[] args) throws Exception {
        Path out = Paths.get(args[0]);
        String mode = args.length > 1 ? args[1] : "samples";
        Path dbDir = out.resolve("db");
        Files.createDirectories(out);
        RocksDB.loadLibrary();
        List<Cf> cfs;
        long blockSize;
        if (mode.equals("big")) {
            cfs = List.of(new Cf("big", CompressionType.SNAPPY_COMPRESSION, IndexType.kBinarySearch, null, null,
                                 false, false));
            blockSize = 4096;
        } else {
            cfs = sampleFamilies();
            blockSize = 160;  // many blocks and restart points from a few dozen keys
        }
        List<ColumnFamilyDescriptor> descriptors = new ArrayList<>();
        descriptors.add(new ColumnFamilyDescriptor(RocksDB.DEFAULT_COLUMN_FAMILY,
                new ColumnFamilyOptions().setMergeOperatorName(MERGE_OPERATOR)));
        for (Cf cf : cfs) {
            descriptors.add(new ColumnFamilyDescriptor(ascii(cf.name), options(cf, blockSize)));
        }
        List<ColumnFamilyHandle> handles = new ArrayList<>();
        StringBuilder json = new StringBuilder();
        try (DBOptions dbOptions = new DBOptions().setCreateIfMissing(true).setCreateMissingColumnFamilies(true);
             RocksDB db = RocksDB.open(dbOptions, dbDir.toString(), descriptors, handles)) {
            for (int c = 0; c < cfs.size(); c++) {
                ColumnFamilyHandle h = handles.get(c + 1);
                if (mode.equals("big")) {
                    writeBig(db, h, Integer.parseInt(args[2]));
                } else {
                    if (cfs.get(c).writes.equals("ingested")) {
                        writeIngested(db, h, out);
                    } else {
                        writeSamples(db, h, cfs.get(c).writes);
                    }
                }
                if (cfs.get(c).compact) {
                    db.compactRange(h);
                }
            }
            RocksDB.Version v = RocksDB.rocksdbVersion();
            json.append("{\"rocksdb_version\": ").append(quote(v.toString())).append(",\n \"column_families\": [");
            List<LiveFileMetaData> live = db.getLiveFilesMetaData();
            for (int c = 0; c < cfs.size(); c++) {
                Cf cf = cfs.get(c);
                json.append(c == 0 ? "\n" : ",\n").append("  {\"name\": ").append(quote(cf.name))
                    .append(", \"compression\": ").append(quote(cf.compression.name()))
                    .append(", \"index_type\": ").append(quote(cf.index.name()))
                    .append(", \"format_version\": ").append(cf.formatVersion)
                    .append(", \"checksum\": ").append(cf.checksum == null ? "null" : quote(cf.checksum))
                    .append(", \"data_block_hash_index\": ").append(cf.hashIndex)
                    .append(", \"compacted\": ").append(cf.compact)
                    .append(", \"writes\": ").append(quote(cf.writes))
                    .append(",\n   \"files\": [");
                boolean first = true;
                for (LiveFileMetaData f : live) {
                    if (!new String(f.columnFamilyName(), StandardCharsets.UTF_8).equals(cf.name)) {
                        continue;
                    }
                    json.append(first ? "" : ", ").append("{\"name\": ")
                        .append(quote(f.fileName().replaceFirst("^/", "")))
                        .append(", \"level\": ").append(f.level())
                        .append(", \"size\": ").append(f.size())
                        .append(", \"smallest_seqno\": ").append(f.smallestSeqno())
                        .append(", \"largest_seqno\": ").append(f.largestSeqno()).append("}");
                    first = false;
                }
                json.append("],\n   \"entries\": [");
                first = true;
                try (RocksIterator it = db.newIterator(handles.get(c + 1))) {
                    for (it.seekToFirst(); it.isValid(); it.next()) {
                        if (mode.equals("big")) {
                            continue;  // the big family's truth is its count (below), not every entry
                        }
                        json.append(first ? "\n    " : ",\n    ").append("[").append(quote(hex(it.key())))
                            .append(", ").append(quote(hex(it.value()))).append("]");
                        first = false;
                    }
                    it.status();
                }
                long count = 0;
                if (mode.equals("big")) {
                    try (RocksIterator it = db.newIterator(handles.get(c + 1))) {
                        for (it.seekToFirst(); it.isValid(); it.next()) {
                            count++;
                        }
                    }
                }
                json.append("],\n   \"count\": ").append(count).append("}");
            }
            json.append("\n]}\n");
            for (ColumnFamilyHandle h : handles) {
                h.close();
            }
        }
        Files.write(out.resolve("truth.json"), json.toString().getBytes(StandardCharsets.UTF_8));
    }
}
