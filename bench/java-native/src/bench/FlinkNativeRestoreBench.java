package bench;

import org.apache.flink.api.common.typeutils.TypeSerializer;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.fs.CloseableRegistry;
import org.apache.flink.core.memory.DataInputViewStreamWrapper;
import org.apache.flink.metrics.groups.UnregisteredMetricsGroup;
import org.apache.flink.runtime.checkpoint.Checkpoints;
import org.apache.flink.runtime.checkpoint.OperatorState;
import org.apache.flink.runtime.checkpoint.OperatorSubtaskState;
import org.apache.flink.runtime.checkpoint.metadata.CheckpointMetadata;
import org.apache.flink.runtime.state.CompositeKeySerializationUtils;
import org.apache.flink.runtime.state.IncrementalKeyedStateHandle;
import org.apache.flink.runtime.state.IncrementalLocalKeyedStateHandle;
import org.apache.flink.runtime.state.IncrementalRemoteKeyedStateHandle;
import org.apache.flink.runtime.state.KeyedBackendSerializationProxy;
import org.apache.flink.runtime.state.KeyedStateHandle;
import org.apache.flink.runtime.state.RegisteredKeyValueStateBackendMetaInfo;
import org.apache.flink.runtime.state.RegisteredPriorityQueueStateBackendMetaInfo;
import org.apache.flink.runtime.state.StateSerializerProvider;
import org.apache.flink.runtime.state.StreamStateHandle;
import org.apache.flink.runtime.state.filesystem.FileStateHandle;
import org.apache.flink.runtime.state.memory.ByteStreamStateHandle;
import org.apache.flink.runtime.state.ttl.TtlTimeProvider;
import org.apache.flink.state.rocksdb.EmbeddedRocksDBStateBackend;
import org.apache.flink.state.rocksdb.RocksDBKeyedStateBackend.RocksDbKvStateInfo;
import org.apache.flink.state.rocksdb.RocksDBKeyedStateBackendBuilder;
import org.apache.flink.state.rocksdb.RocksDBNativeMetricOptions;
import org.apache.flink.state.rocksdb.RocksDBOperationUtils;
import org.apache.flink.state.rocksdb.RocksDBResourceContainer;
import org.apache.flink.state.rocksdb.RocksDBStateDataTransferHelper;
import org.apache.flink.state.rocksdb.RocksDBStateDownloader;
import org.apache.flink.state.rocksdb.RocksIteratorWrapper;
import org.apache.flink.state.rocksdb.StateHandleDownloadSpec;
import org.apache.flink.state.rocksdb.restore.RocksDBIncrementalRestoreOperation;
import org.apache.flink.state.rocksdb.restore.RocksDBRestoreResult;
import org.apache.flink.state.rocksdb.ttl.RocksDbTtlCompactFiltersManager;
import org.apache.flink.util.FileUtils;
import org.apache.flink.util.IOUtils;
import org.apache.flink.util.ResourceGuard;

import org.rocksdb.ColumnFamilyOptions;
import org.rocksdb.RocksDB;

import java.io.BufferedInputStream;
import java.io.DataInputStream;
import java.io.File;
import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.PrintStream;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import java.util.UUID;
import java.util.stream.Stream;

/**
 * Performance yardstick for NATIVE RocksDB snapshots (retained incremental checkpoints {@code
 * chk-N} and NATIVE savepoints): restores every keyed handle with Flink's own RocksDB restore
 * classes (the jars of the PyPI package apache-flink 2.3.0) and iterates every column family, on
 * one thread, reporting per phase seconds, entries and bytes.
 *
 * <p>Per {@link IncrementalRemoteKeyedStateHandle} (what native savepoints and RocksDB checkpoints
 * both hold), the steps of a TaskManager restoring an operator at unchanged parallelism:
 *
 * <ol>
 *   <li><b>transfer</b>: {@link RocksDBStateDownloader} copies the handle's shared and private
 *       files (SST, MANIFEST, OPTIONS, CURRENT; inline byte handles or files) into a fresh
 *       directory under the instance base path, exactly as {@code
 *       RocksDBIncrementalRestoreOperation#transferRemoteStateToLocalDirectory} does;
 *   <li><b>open</b>: a {@link RocksDBIncrementalRestoreOperation} built as {@code
 *       RocksDBKeyedStateBackendBuilder#getRocksDBRestoreOperation} builds it (options from {@code
 *       EmbeddedRocksDBStateBackend#createOptionsAndResourceContainer}, column family options
 *       {@code stateName -> resourceContainer.getColumnOptions()}, i.e. Flink's merge operator,
 *       TTL compaction filters registered) is given the downloaded directory as an {@link
 *       IncrementalLocalKeyedStateHandle} and restores it: it reads the meta-data stream with
 *       {@link KeyedBackendSerializationProxy}, checks the key serializer, hard-links the SST files
 *       into {@code <base>/db}, and opens the DB with one column family per state ({@code
 *       RocksDBHandle#openDB}, {@code RocksDBOperationUtils#openDB});
 *   <li><b>iterate</b>: every registered column family is walked with {@link
 *       RocksDBOperationUtils#getRocksIterator} (Flink's {@link RocksIteratorWrapper}) and the
 *       backend's read options; every key and value byte is folded into a checksum.
 * </ol>
 *
 * <p>Emulated, because there is no TaskManager: the key serializer is restored from the snapshot's
 * own key serializer snapshot (a job would bring its serializer; Flink checks compatibility either
 * way); no managed-memory shared block cache (a TaskManager would hand RocksDB a cache sized from
 * managed memory); native metrics off; the transfer runs with 1 thread by default (direct
 * executor: the calling thread); the download step is timed on its own instead of inside {@code
 * restore()}, which is why the operation receives the local handle the downloader produced.
 */
public final class FlinkNativeRestoreBench {

    static final class Opts {
        File dir;
        int repeat = 1;
        int transferThreads = 1;
        File work;
        String json;
        int sample = 0;
    }

    static void usage(PrintStream out) {
        out.println(
                "usage: FlinkNativeRestoreBench <snapshot-dir> [--repeat N] [--transfer-threads N]\n"
                        + "                               [--work DIR] [--sample N] [--json FILE]\n"
                        + "  <snapshot-dir>      directory with _metadata: a retained checkpoint chk-N or a\n"
                        + "                      NATIVE savepoint\n"
                        + "  --repeat N          restore and iterate everything N times; with N > 1 the first\n"
                        + "                      pass is JVM warm-up and left out of the figures\n"
                        + "  --transfer-threads  RocksDBStateDownloader threads (default 1: the calling thread;\n"
                        + "                      Flink's default state.backend.rocksdb.checkpoint.transfer.thread.num\n"
                        + "                      is 4)\n"
                        + "  --work DIR          where the instance directories go (default: a new temp dir);\n"
                        + "                      they are deleted after each handle\n"
                        + "  --sample N          print the first N entries (hex) of every column family\n"
                        + "  --json FILE         write the summary as JSON as well");
    }

    static Opts parse(String[] args) {
        Opts o = new Opts();
        for (int i = 0; i < args.length; i++) {
            String a = args[i];
            switch (a) {
                case "--repeat":
                    o.repeat = Integer.parseInt(args[++i]);
                    break;
                case "--transfer-threads":
                    o.transferThreads = Integer.parseInt(args[++i]);
                    break;
                case "--work":
                    o.work = new File(args[++i]);
                    break;
                case "--json":
                    o.json = args[++i];
                    break;
                case "--sample":
                    o.sample = Integer.parseInt(args[++i]);
                    break;
                case "-h":
                case "--help":
                    usage(System.out);
                    System.exit(0);
                    break;
                default:
                    if (a.startsWith("--")) {
                        throw new IllegalArgumentException("unknown option " + a);
                    }
                    if (o.dir != null) {
                        throw new IllegalArgumentException("more than one snapshot directory given");
                    }
                    o.dir = new File(a);
            }
        }
        if (o.dir == null) {
            throw new IllegalArgumentException("no snapshot directory given");
        }
        if (o.repeat < 1) {
            throw new IllegalArgumentException("--repeat must be >= 1");
        }
        return o;
    }

    // ------------------------------------------------------------------------------- statistics

    static final class StateStats {
        final String operator;
        final String state;
        String kind = "?";
        long entries;
        long keyBytes;
        long valueBytes;

        StateStats(String operator, String state) {
            this.operator = operator;
            this.state = state;
        }
    }

    static final class PassResult {
        final Map<String, StateStats> states = new LinkedHashMap<>();
        final List<String> notes = new ArrayList<>();
        final Map<String, Long> flinkMetrics = new TreeMap<>();
        long metadataNanos;
        long transferNanos;
        long openNanos;
        long iterateNanos;
        long closeNanos;
        long entries;
        long keyBytes;
        long valueBytes;
        long transferredBytes;
        final Map<String, Long> referencedFiles = new TreeMap<>(); // file handles outside _metadata
        long inlineBytes; // byte handles inside _metadata
        int relocatedFiles; // files of a moved checkpoint, found beside chk-N
        long checksum = 1;
        int handles;
        int skippedHandles;

        long restoreAndIterateNanos() {
            return metadataNanos + transferNanos + openNanos + iterateNanos;
        }
    }

    // --------------------------------------------------- Flink's backend defaults (one per run)

    /**
     * Flink's RocksDB backend with default configuration (what a job gets from {@code
     * state.backend.type: rocksdb}), and its package-private accessors that the builder reads.
     */
    static final class Backend {
        final EmbeddedRocksDBStateBackend backend;
        final Method createOptionsAndResourceContainer;
        final long writeBatchSize;
        final double overlapFractionThreshold;
        final boolean useIngestDbRestoreMode;
        final boolean asyncCompactAfterRescale;
        final boolean useDeleteFilesInRange;

        Backend(ClassLoader cl, File tmp) throws Exception {
            backend = new EmbeddedRocksDBStateBackend(true).configure(new Configuration(), cl);
            // loads the FRocksDB JNI library as createKeyedStateBackend does first
            Method load = EmbeddedRocksDBStateBackend.class.getDeclaredMethod("ensureRocksDBIsLoaded", String.class);
            load.setAccessible(true);
            load.invoke(null, tmp.getAbsolutePath());
            createOptionsAndResourceContainer =
                    EmbeddedRocksDBStateBackend.class.getDeclaredMethod("createOptionsAndResourceContainer", File.class);
            createOptionsAndResourceContainer.setAccessible(true);
            writeBatchSize = backend.getWriteBatchSize();
            overlapFractionThreshold = (Double) call("getOverlapFractionThreshold");
            useIngestDbRestoreMode = (Boolean) call("getUseIngestDbRestoreMode");
            asyncCompactAfterRescale = (Boolean) call("getIncrementalRestoreAsyncCompactAfterRescale");
            useDeleteFilesInRange = (Boolean) call("isRescalingUseDeleteFilesInRange");
        }

        private Object call(String name) throws Exception {
            Method m = EmbeddedRocksDBStateBackend.class.getDeclaredMethod(name);
            m.setAccessible(true);
            return m.invoke(backend);
        }

        RocksDBResourceContainer resourceContainer(File instanceBasePath) throws Exception {
            return (RocksDBResourceContainer) createOptionsAndResourceContainer.invoke(backend, instanceBasePath);
        }
    }

    // ------------------------------------------------------------------------------ one pass

    static PassResult runPass(File dir, Opts o, ClassLoader cl, Backend backend, File work) throws Exception {
        PassResult r = new PassResult();
        long t0 = System.nanoTime();
        CheckpointMetadata md;
        try (DataInputStream in =
                new DataInputStream(new BufferedInputStream(new FileInputStream(new File(dir, "_metadata")), 1 << 16))) {
            md = Checkpoints.loadCheckpointMetadata(in, cl, dir.getAbsolutePath());
        }
        r.metadataNanos = System.nanoTime() - t0;

        for (OperatorState op : md.getOperatorStates()) {
            String opName = op.getOperatorName().orElse("");
            String opLabel = (opName.isEmpty() ? "" : opName + " ") + "(id " + op.getOperatorID().toHexString()
                    + op.getOperatorUid().map(u -> ", uid " + u).orElse("") + ")";
            for (Map.Entry<Integer, OperatorSubtaskState> st : new TreeMap<>(op.getSubtaskStates()).entrySet()) {
                for (KeyedStateHandle h : st.getValue().getManagedKeyedState()) {
                    if (h == null) {
                        continue;
                    }
                    if (h instanceof IncrementalRemoteKeyedStateHandle) {
                        r.handles++;
                        h = relocatedIfMoved((IncrementalRemoteKeyedStateHandle) h, dir, r);
                        ((IncrementalRemoteKeyedStateHandle) h).streamSubHandles().forEach(s -> {
                            if (s instanceof FileStateHandle) {
                                r.referencedFiles.put(((FileStateHandle) s).getFilePath().toString(), s.getStateSize());
                            } else if (s instanceof ByteStreamStateHandle) {
                                r.inlineBytes += s.getStateSize();
                            }
                        });
                        restoreAndIterate((IncrementalRemoteKeyedStateHandle) h, op, opLabel, st.getKey(), o, cl,
                                backend, work, r);
                    } else {
                        r.skippedHandles++;
                        r.notes.add(String.format("%s subtask %d: %s is not a native RocksDB handle, skipped",
                                opLabel, st.getKey(), h.getClass().getSimpleName()));
                    }
                }
            }
        }
        return r;
    }

    @SuppressWarnings("unchecked")
    static void restoreAndIterate(
            IncrementalRemoteKeyedStateHandle handle,
            OperatorState op,
            String opLabel,
            int subtask,
            Opts o,
            ClassLoader cl,
            Backend backend,
            File work,
            PassResult r)
            throws Exception {
        String operatorIdentifier = op.getOperatorID().toHexString() + "_(" + (subtask + 1) + "/"
                + op.getParallelism() + ")";
        // same layout as createKeyedStateBackend: <base>/db is the instance, downloads beside it
        File instanceBasePath = new File(work, "job_bench_op_" + operatorIdentifier.replaceAll("[^a-zA-Z0-9\\-]", "_")
                + "_uuid_" + UUID.randomUUID());
        if (!instanceBasePath.mkdirs()) {
            throw new IOException("could not create " + instanceBasePath);
        }
        CloseableRegistry cancelStreamRegistryForRestore = new CloseableRegistry();
        CloseableRegistry cancelRegistryForBackend = new CloseableRegistry();
        RocksDBResourceContainer resources = null;
        RocksDbTtlCompactFiltersManager ttlCompactFiltersManager = null;
        RocksDBIncrementalRestoreOperation<Object> restore = null;
        RocksDBRestoreResult result = null;
        LinkedHashMap<String, RocksDbKvStateInfo> kvStateInformation = new LinkedHashMap<>();
        ResourceGuard resourceGuard = new ResourceGuard();
        try {
            // ---- transfer
            long t0 = System.nanoTime();
            StateHandleDownloadSpec spec =
                    new StateHandleDownloadSpec(handle, instanceBasePath.toPath().resolve(UUID.randomUUID().toString()));
            try (RocksDBStateDownloader downloader = new RocksDBStateDownloader(
                    RocksDBStateDataTransferHelper.forThreadNumIfSpecified(o.transferThreads, null))) {
                downloader.transferAllStateDataToDirectory(Collections.singletonList(spec),
                        cancelStreamRegistryForRestore);
            }
            long t1 = System.nanoTime();
            r.transferNanos += t1 - t0;
            r.transferredBytes += directoryBytes(spec.getDownloadDestination());
            IncrementalLocalKeyedStateHandle local = spec.createLocalStateHandleForDownloadedState();

            // ---- open: Flink's restore operation, built like RocksDBKeyedStateBackendBuilder does
            TypeSerializer<Object> keySerializer = restoredKeySerializer(handle.getMetaDataStateHandle(), cl);
            resources = backend.resourceContainer(instanceBasePath);
            final RocksDBResourceContainer rc = resources;
            ttlCompactFiltersManager = new RocksDbTtlCompactFiltersManager(
                    TtlTimeProvider.DEFAULT, rc.getQueryTimeAfterNumEntries(), rc.getPeriodicCompactionTime());
            int keyGroupPrefixBytes =
                    CompositeKeySerializationUtils.computeRequiredBytesInKeyGroupPrefix(op.getMaxParallelism());
            restore = new RocksDBIncrementalRestoreOperation<>(
                    operatorIdentifier,
                    handle.getKeyGroupRange(), // unchanged parallelism: the handle's own range
                    keyGroupPrefixBytes,
                    o.transferThreads,
                    resourceGuard,
                    cancelStreamRegistryForRestore,
                    cancelRegistryForBackend,
                    cl,
                    kvStateInformation,
                    StateSerializerProvider.fromNewRegisteredSerializer(keySerializer),
                    instanceBasePath,
                    RocksDBKeyedStateBackendBuilder.getInstanceRocksDBPath(instanceBasePath),
                    rc.getDbOptions(),
                    stateName -> rc.getColumnOptions(),
                    new RocksDBNativeMetricOptions(),
                    new UnregisteredMetricsGroup(),
                    (name, value) -> r.flinkMetrics.merge(name, value, Long::sum),
                    Collections.<IncrementalKeyedStateHandle>singletonList(local),
                    ttlCompactFiltersManager,
                    backend.writeBatchSize,
                    rc.getWriteBufferManagerCapacity(),
                    backend.overlapFractionThreshold,
                    backend.useIngestDbRestoreMode,
                    backend.asyncCompactAfterRescale,
                    backend.useDeleteFilesInRange,
                    null, // ioExecutor: only used for remote downloads and async compaction, neither happens here
                    (message, error) -> {
                        throw new RuntimeException(message, error);
                    });
            result = restore.restore();
            long t2 = System.nanoTime();
            r.openNanos += t2 - t1;

            // ---- iterate every column family
            RocksDB db = result.getDb();
            for (Map.Entry<String, RocksDbKvStateInfo> e : kvStateInformation.entrySet()) {
                String key = opLabel + " / " + e.getKey();
                StateStats s = r.states.computeIfAbsent(key, k -> new StateStats(opLabel, e.getKey()));
                s.kind = kindOf(e.getValue());
                int printed = 0;
                long entries = 0;
                long keyBytes = 0;
                long valueBytes = 0;
                long h = r.checksum;
                try (RocksIteratorWrapper it =
                        RocksDBOperationUtils.getRocksIterator(db, e.getValue().columnFamilyHandle, rc.getReadOptions())) {
                    for (it.seekToFirst(); it.isValid(); it.next()) {
                        byte[] k = it.key();
                        byte[] v = it.value();
                        for (byte b : k) {
                            h = 31 * h + b;
                        }
                        for (byte b : v) {
                            h = 31 * h + b;
                        }
                        entries++;
                        keyBytes += k.length;
                        valueBytes += v.length;
                        if (printed < o.sample) {
                            printed++;
                            System.out.printf(Locale.ROOT, "  sample %s: key=%s value=%s%n", key, hex(k), hex(v));
                        }
                    }
                }
                r.checksum = h;
                s.entries += entries;
                s.keyBytes += keyBytes;
                s.valueBytes += valueBytes;
                r.entries += entries;
                r.keyBytes += keyBytes;
                r.valueBytes += valueBytes;
            }
            r.iterateNanos += System.nanoTime() - t2;
        } finally {
            // ---- close and delete, as the builder's clean-up does
            long t3 = System.nanoTime();
            List<ColumnFamilyOptions> columnFamilyOptions = new ArrayList<>();
            IOUtils.closeQuietly(cancelRegistryForBackend);
            IOUtils.closeQuietly(resourceGuard);
            if (result != null) {
                RocksDBOperationUtils.addColumnFamilyOptionsToCloseLater(
                        columnFamilyOptions, result.getDefaultColumnFamilyHandle());
                IOUtils.closeQuietly(result.getDefaultColumnFamilyHandle());
                IOUtils.closeQuietly(result.getNativeMetricMonitor());
            }
            for (RocksDbKvStateInfo info : kvStateInformation.values()) {
                RocksDBOperationUtils.addColumnFamilyOptionsToCloseLater(columnFamilyOptions, info.columnFamilyHandle);
                IOUtils.closeQuietly(info.columnFamilyHandle);
            }
            if (result != null) {
                IOUtils.closeQuietly(result.getDb());
            }
            IOUtils.closeQuietly(restore);
            IOUtils.closeAllQuietly(columnFamilyOptions);
            IOUtils.closeQuietly(resources);
            if (ttlCompactFiltersManager != null) {
                ttlCompactFiltersManager.disposeAndClearRegisteredCompactionFactories();
            }
            IOUtils.closeQuietly(cancelStreamRegistryForRestore);
            FileUtils.deleteDirectory(instanceBasePath);
            r.closeNanos += System.nanoTime() - t3;
        }
    }

    /**
     * A checkpoint names its files by absolute path; one that was moved (as the test fixtures'
     * checkpoints are, out of the job's scratch directory) has them in the job directory beside
     * chk-N instead: {@code <job dir>/shared/<file>}, {@code <job dir>/taskowned/<file>}, {@code
     * <job dir>/chk-N/<file>}. Flink itself would need them at the recorded path; this handle names
     * the moved files, which Flink's restore then reads as usual.
     */
    static IncrementalRemoteKeyedStateHandle relocatedIfMoved(
            IncrementalRemoteKeyedStateHandle h, File snapshotDir, PassResult r) {
        File jobDir = snapshotDir.getParentFile();
        int[] moved = {0};
        java.util.function.Function<StreamStateHandle, StreamStateHandle> relocate = s -> {
            if (!(s instanceof FileStateHandle) || jobDir == null) {
                return s;
            }
            org.apache.flink.core.fs.Path recorded = ((FileStateHandle) s).getFilePath();
            File file = new File(recorded.toUri().getPath());
            if (!"file".equals(recorded.toUri().getScheme()) && recorded.toUri().getScheme() != null || file.exists()) {
                return s;
            }
            File candidate = new File(new File(jobDir, file.getParentFile().getName()), file.getName());
            if (!candidate.isFile()) {
                return s;
            }
            moved[0]++;
            return new FileStateHandle(new org.apache.flink.core.fs.Path(candidate.toURI()), s.getStateSize());
        };
        List<IncrementalKeyedStateHandle.HandleAndLocalPath> shared = new ArrayList<>();
        for (IncrementalKeyedStateHandle.HandleAndLocalPath p : h.getSharedState()) {
            shared.add(IncrementalKeyedStateHandle.HandleAndLocalPath.of(relocate.apply(p.getHandle()), p.getLocalPath()));
        }
        List<IncrementalKeyedStateHandle.HandleAndLocalPath> priv = new ArrayList<>();
        for (IncrementalKeyedStateHandle.HandleAndLocalPath p : h.getPrivateState()) {
            priv.add(IncrementalKeyedStateHandle.HandleAndLocalPath.of(relocate.apply(p.getHandle()), p.getLocalPath()));
        }
        StreamStateHandle meta = relocate.apply(h.getMetaDataStateHandle());
        if (moved[0] == 0) {
            return h;
        }
        r.relocatedFiles += moved[0];
        return new IncrementalRemoteKeyedStateHandle(h.getBackendIdentifier(), h.getKeyGroupRange(),
                h.getCheckpointId(), shared, priv, meta, h.getCheckpointedSize());
    }

    /** The key serializer a job would register: restored from the handle's own key serializer snapshot. */
    @SuppressWarnings("unchecked")
    static TypeSerializer<Object> restoredKeySerializer(StreamStateHandle metaData, ClassLoader cl) throws Exception {
        try (InputStream in = metaData.openInputStream()) {
            KeyedBackendSerializationProxy<Object> proxy = new KeyedBackendSerializationProxy<>(cl);
            proxy.read(new DataInputViewStreamWrapper(in));
            return proxy.getKeySerializerSnapshot().restoreSerializer();
        }
    }

    static String kindOf(RocksDbKvStateInfo info) {
        if (info.metaInfo instanceof RegisteredKeyValueStateBackendMetaInfo) {
            return String.valueOf(((RegisteredKeyValueStateBackendMetaInfo<?, ?>) info.metaInfo).getStateType());
        }
        if (info.metaInfo instanceof RegisteredPriorityQueueStateBackendMetaInfo) {
            return "PRIORITY_QUEUE";
        }
        return info.metaInfo.getClass().getSimpleName();
    }

    static long directoryBytes(Path p) throws IOException {
        try (Stream<Path> s = Files.walk(p)) {
            return s.filter(Files::isRegularFile).mapToLong(f -> f.toFile().length()).sum();
        }
    }

    /** This process's peak resident set (Linux VmHWM; it restarts at exec, unlike a parent's ru_maxrss). */
    static long peakRssBytes() {
        try {
            for (String line : Files.readAllLines(new File("/proc/self/status").toPath())) {
                if (line.startsWith("VmHWM:")) {
                    return Long.parseLong(line.replaceAll("[^0-9]", "")) * 1024;
                }
            }
        } catch (IOException | NumberFormatException e) {
            // not Linux: no figure
        }
        return -1;
    }

    static long fileBytes(PassResult r) {
        return r.referencedFiles.values().stream().mapToLong(Long::longValue).sum();
    }

    static String hex(byte[] b) {
        StringBuilder s = new StringBuilder();
        for (int i = 0; i < b.length && i < 48; i++) {
            s.append(String.format("%02x", b[i]));
        }
        return b.length > 48 ? s + "..(" + b.length + " B)" : s.toString();
    }

    // ------------------------------------------------------------------------------- output

    static String fmtInt(long v) {
        return String.format(Locale.ROOT, "%,d", v);
    }

    static String jsonStr(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') {
                b.append('\\').append(c);
            } else if (c < 0x20) {
                b.append(String.format("\\u%04x", (int) c));
            } else {
                b.append(c);
            }
        }
        return b.append('"').toString();
    }

    static String phase(String name, long nanos, long entries, long bytes) {
        double secs = nanos / 1e9;
        return String.format(Locale.ROOT, "  %-9s %8.3f s  %14s entries/s  %9.1f MB/s", name, secs,
                secs > 0 ? fmtInt((long) (entries / secs)) : "-", secs > 0 ? bytes / 1e6 / secs : 0.0);
    }

    static double median(List<Double> xs) {
        List<Double> s = new ArrayList<>(xs);
        Collections.sort(s);
        int n = s.size();
        return n % 2 == 1 ? s.get(n / 2) : (s.get(n / 2 - 1) + s.get(n / 2)) / 2;
    }

    static File resolveSnapshotDir(File d) throws IOException {
        if (new File(d, "_metadata").isFile()) {
            return d.getCanonicalFile();
        }
        if (d.isFile() && d.getName().equals("_metadata")) {
            return d.getCanonicalFile().getParentFile();
        }
        throw new IOException("no _metadata in " + d + " (give a retained checkpoint chk-N or a NATIVE savepoint)");
    }

    public static void main(String[] args) throws Exception {
        Opts o;
        try {
            o = parse(args);
        } catch (RuntimeException e) {
            System.err.println("error: " + e.getMessage());
            usage(System.err);
            System.exit(2);
            return;
        }
        File dir;
        try {
            dir = resolveSnapshotDir(o.dir);
        } catch (IOException e) {
            System.err.println("error: " + e.getMessage());
            System.exit(2);
            return;
        }
        ClassLoader cl = FlinkNativeRestoreBench.class.getClassLoader();
        boolean ownWork = o.work == null;
        File work = ownWork ? Files.createTempDirectory("flink-native-restore-").toFile() : o.work;
        work.mkdirs();
        Backend backend = new Backend(cl, work);
        System.out.printf(Locale.ROOT, "snapshot: %s (_metadata %s bytes)%n", dir, fmtInt(new File(dir, "_metadata").length()));
        System.out.printf(Locale.ROOT, "java %s, %s; restore and iterate thread: 1 (main); transfer threads: %d; "
                        + "FRocksDB %s; work dir %s; repeat=%d%n",
                System.getProperty("java.version"), System.getProperty("java.vm.name"), o.transferThreads,
                RocksDB.rocksdbVersion(), work, o.repeat);

        List<PassResult> passes = new ArrayList<>();
        try {
            for (int p = 1; p <= o.repeat; p++) {
                PassResult r = runPass(dir, o, cl, backend, work);
                passes.add(r);
                o.sample = 0;
                long bytes = r.keyBytes + r.valueBytes;
                System.out.printf(Locale.ROOT,
                        "pass %d%s: entries=%s bytes=%s secs=%.3f (metadata %.3f, transfer %.3f, open %.3f, iterate %.3f; "
                                + "close+delete %.3f) entries/s=%s%n",
                        p, (o.repeat > 1 && p == 1) ? " (warm-up, discarded)" : "", fmtInt(r.entries), fmtInt(bytes),
                        r.restoreAndIterateNanos() / 1e9, r.metadataNanos / 1e9, r.transferNanos / 1e9,
                        r.openNanos / 1e9, r.iterateNanos / 1e9, r.closeNanos / 1e9,
                        fmtInt((long) (r.entries / (r.restoreAndIterateNanos() / 1e9))));
            }
        } finally {
            if (ownWork) {
                FileUtils.deleteDirectory(work);
            }
        }

        PassResult last = passes.get(passes.size() - 1);
        List<PassResult> measured = passes.size() > 1 ? passes.subList(1, passes.size()) : passes;
        List<Double> total = new ArrayList<>();
        List<Double> transfer = new ArrayList<>();
        List<Double> open = new ArrayList<>();
        List<Double> iterate = new ArrayList<>();
        List<Double> metadata = new ArrayList<>();
        for (PassResult r : measured) {
            total.add(r.restoreAndIterateNanos() / 1e9);
            transfer.add(r.transferNanos / 1e9);
            open.add(r.openNanos / 1e9);
            iterate.add(r.iterateNanos / 1e9);
            metadata.add(r.metadataNanos / 1e9);
        }
        long kvBytes = last.keyBytes + last.valueBytes;

        System.out.println();
        System.out.println("per column family (one pass):");
        System.out.printf(Locale.ROOT, "  %-70s %-16s %14s %14s%n", "operator / state", "kind", "entries", "key+value B");
        for (StateStats s : last.states.values()) {
            String label = s.operator + " / " + s.state;
            if (label.length() > 70) {
                label = label.substring(0, 67) + "...";
            }
            System.out.printf(Locale.ROOT, "  %-70s %-16s %14s %14s%n", label, s.kind, fmtInt(s.entries),
                    fmtInt(s.keyBytes + s.valueBytes));
        }
        if (last.relocatedFiles > 0) {
            last.notes.add(String.format(Locale.ROOT, "%d files were not at the path _metadata records (the checkpoint "
                    + "was moved): read from the job directory beside %s", last.relocatedFiles, dir.getName()));
        }
        for (String n : last.notes) {
            System.out.println("  note: " + n);
        }
        System.out.println();
        System.out.printf(Locale.ROOT, "native handles restored: %d (skipped: %d); snapshot: _metadata %s bytes "
                        + "(inline handles %s bytes) + %d files %s bytes; files transferred: %s bytes; "
                        + "entries %s; key bytes %s; value bytes %s; checksum %016x%n",
                last.handles, last.skippedHandles, fmtInt(new File(dir, "_metadata").length()),
                fmtInt(last.inlineBytes), last.referencedFiles.size(), fmtInt(fileBytes(last)),
                fmtInt(last.transferredBytes), fmtInt(last.entries),
                fmtInt(last.keyBytes), fmtInt(last.valueBytes), last.checksum);
        System.out.printf(Locale.ROOT, "Flink's own restore metrics (last pass, ms, summed over handles): %s%n", last.flinkMetrics);
        System.out.printf(Locale.ROOT, "median of %d measured pass(es):%n", measured.size());
        System.out.println(phase("metadata", (long) (median(metadata) * 1e9), last.entries, new File(dir, "_metadata").length()));
        System.out.println(phase("transfer", (long) (median(transfer) * 1e9), last.entries, last.transferredBytes));
        System.out.println(phase("open", (long) (median(open) * 1e9), last.entries, last.transferredBytes));
        System.out.println(phase("iterate", (long) (median(iterate) * 1e9), last.entries, kvBytes));
        System.out.println(phase("total", (long) (median(total) * 1e9), last.entries, kvBytes));
        System.out.printf(Locale.ROOT,
                "RESULT entries=%d seconds=%.3f entries_per_s=%.0f iterate_entries_per_s=%.0f  "
                        + "[restore+iterate, 1 thread; MB = 10^6 key+value bytes]%n",
                last.entries, median(total), last.entries / median(total), last.entries / median(iterate));

        long peakRss = peakRssBytes();
        System.out.printf(Locale.ROOT, "JVM peak resident memory (VmHWM): %.0f MB%n", peakRss / 1e6);
        if (o.json != null) {
            StringBuilder j = new StringBuilder("{\n");
            j.append("  \"peak_rss_bytes\": ").append(peakRss).append(",\n");
            j.append("  \"snapshot\": ").append(jsonStr(dir.getPath())).append(",\n");
            j.append("  \"repeat\": ").append(o.repeat).append(",\n");
            j.append("  \"transfer_threads\": ").append(o.transferThreads).append(",\n");
            j.append("  \"first_pass_discarded\": ").append(passes.size() > 1).append(",\n");
            j.append("  \"handles\": ").append(last.handles).append(",\n");
            j.append("  \"skipped_handles\": ").append(last.skippedHandles).append(",\n");
            j.append("  \"entries\": ").append(last.entries).append(",\n");
            j.append("  \"key_bytes\": ").append(last.keyBytes).append(",\n");
            j.append("  \"value_bytes\": ").append(last.valueBytes).append(",\n");
            j.append("  \"transferred_bytes\": ").append(last.transferredBytes).append(",\n");
            j.append("  \"metadata_bytes\": ").append(new File(dir, "_metadata").length()).append(",\n");
            j.append("  \"inline_handle_bytes\": ").append(last.inlineBytes).append(",\n");
            j.append("  \"file_handles\": ").append(last.referencedFiles.size()).append(",\n");
            j.append("  \"file_handle_bytes\": ").append(fileBytes(last)).append(",\n");
            j.append(String.format(Locale.ROOT, "  \"seconds\": {\"metadata\": %.4f, \"transfer\": %.4f, \"open\": %.4f, "
                            + "\"iterate\": %.4f, \"total\": %.4f},%n", median(metadata), median(transfer), median(open),
                    median(iterate), median(total)));
            j.append(String.format(Locale.ROOT, "  \"entries_per_s\": %.0f,%n", last.entries / median(total)));
            j.append(String.format(Locale.ROOT, "  \"iterate_entries_per_s\": %.0f,%n", last.entries / median(iterate)));
            j.append("  \"states\": [\n");
            int i = 0;
            for (StateStats s : last.states.values()) {
                j.append(i++ == 0 ? "" : ",\n");
                j.append("    {\"operator\": ").append(jsonStr(s.operator)).append(", \"state\": ").append(jsonStr(s.state))
                        .append(", \"kind\": ").append(jsonStr(s.kind)).append(", \"entries\": ").append(s.entries)
                        .append(", \"bytes\": ").append(s.keyBytes + s.valueBytes).append("}");
            }
            j.append("\n  ],\n  \"notes\": [");
            for (int k = 0; k < last.notes.size(); k++) {
                j.append(k == 0 ? "" : ", ").append(jsonStr(last.notes.get(k)));
            }
            j.append("]\n}\n");
            Files.write(new File(o.json).toPath(), j.toString().getBytes(StandardCharsets.UTF_8));
        }
        System.exit(last.handles > 0 ? 0 : 1);
    }
}
