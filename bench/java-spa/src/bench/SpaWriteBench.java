package bench;

import java.io.File;
import java.io.IOException;
import java.io.PrintWriter;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Locale;
import java.util.stream.Stream;

import org.apache.flink.api.common.JobExecutionResult;
import org.apache.flink.api.common.RuntimeExecutionMode;
import org.apache.flink.api.common.functions.MapFunction;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.java.functions.KeySelector;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.api.java.typeutils.ResultTypeQueryable;
import org.apache.flink.api.java.typeutils.TupleTypeInfo;
import org.apache.flink.configuration.BatchExecutionOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.ExecutionOptions;
import org.apache.flink.runtime.state.hashmap.HashMapStateBackend;
import org.apache.flink.state.api.OneInputStateTransformation;
import org.apache.flink.state.api.OperatorIdentifier;
import org.apache.flink.state.api.OperatorTransformation;
import org.apache.flink.state.api.SavepointReader;
import org.apache.flink.state.api.SavepointWriter;
import org.apache.flink.state.api.StateBootstrapTransformation;
import org.apache.flink.state.api.functions.KeyedStateBootstrapFunction;
import org.apache.flink.state.api.functions.KeyedStateReaderFunction;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.table.data.GenericRowData;
import org.apache.flink.table.data.RowData;
import org.apache.flink.table.data.StringData;
import org.apache.flink.table.data.binary.BinaryRowData;
import org.apache.flink.table.data.writer.BinaryRowWriter;
import org.apache.flink.table.runtime.typeutils.InternalTypeInfo;
import org.apache.flink.table.types.logical.BigIntType;
import org.apache.flink.table.types.logical.VarCharType;
import org.apache.flink.util.Collector;

/**
 * Times Flink's State Processor API writing the keyed state of the SQL job
 * {@code SELECT word, COUNT(*), SUM(amount) FROM src GROUP BY word} as a canonical savepoint.
 *
 * <p>The state has the shapes the SQL GroupAggregate operator gives it: the key is a RowData
 * {@code (word VARCHAR)} in its binary form (RowDataSerializer; the key-group is the binary row's
 * hash, as SQL's key selector computes it), the value state {@code accState} a RowData
 * {@code (BIGINT, BIGINT)} (RowDataSerializer), all fields nullable as the SQL planner declares
 * them. Heap state backend (HashMapStateBackend), canonical savepoint format.
 *
 * <p>Modes:
 *
 * <ul>
 *   <li>{@code bootstrap --keys N}: keys {@code key_0 .. key_(N-1)} from {@code fromSequence}, each
 *       with the accumulator {@code (1, amount)}, written into a new savepoint
 *       ({@code SavepointWriter.newSavepoint}) under the given operator id.
 *   <li>{@code rewrite --src SAVEPOINT}: {@code accState} read with {@code SavepointReader}
 *       ({@code readKeyedState}), optionally one key's count incremented ({@code --update-key}),
 *       and written back with {@code SavepointWriter.fromExistingSavepoint} (the operator replaced,
 *       the other operators' state kept); with {@code --max-parallelism N} the operator gets that
 *       max parallelism ({@code OneInputStateTransformation.setMaxParallelism}).
 * </ul>
 *
 * <p>Each pass is one {@code env.execute()} (a local MiniCluster started and stopped inside it),
 * timed from before the job is built to after {@code execute()} returns with the savepoint
 * written. The JVM's start (uptime when {@code main} begins) is reported on its own.
 */
public final class SpaWriteBench {

    static final TypeInformation<RowData> KEY_TYPE =
            InternalTypeInfo.ofFields(new VarCharType(VarCharType.MAX_LENGTH));
    static final TypeInformation<RowData> ACC_TYPE =
            InternalTypeInfo.ofFields(new BigIntType(), new BigIntType());
    static final String STATE = "accState";

    private SpaWriteBench() {}

    /** A binary row (word) as SQL's key selector produces it: its hash decides the key-group. */
    static BinaryRowData wordKey(String word) {
        BinaryRowData row = new BinaryRowData(1);
        BinaryRowWriter writer = new BinaryRowWriter(row);
        writer.writeString(0, StringData.fromString(word));
        writer.complete();
        return row;
    }

    static ValueStateDescriptor<RowData> accDescriptor() {
        return new ValueStateDescriptor<>(STATE, ACC_TYPE);
    }

    /**
     * key_i for a sequence number. The key selectors name their key type themselves
     * (ResultTypeQueryable, as SQL's key selectors do): otherwise Flink infers RowData as a generic
     * type and sorts (BATCH) and stores the keys with Kryo.
     */
    public static final class SequenceKey implements KeySelector<Long, RowData>, ResultTypeQueryable<RowData> {
        @Override
        public RowData getKey(Long i) {
            return wordKey("key_" + i);
        }

        @Override
        public TypeInformation<RowData> getProducedType() {
            return KEY_TYPE;
        }
    }

    /** accState = (1, amount) for sequence number i: a deterministic amount in [-1000, 1000]. */
    public static final class SequenceAccumulator extends KeyedStateBootstrapFunction<RowData, Long> {
        private transient ValueState<RowData> acc;

        @Override
        public void open(OpenContext context) {
            acc = getRuntimeContext().getState(accDescriptor());
        }

        @Override
        public void processElement(Long i, Context ctx) throws Exception {
            acc.update(GenericRowData.of(1L, (i * 7919L) % 2001L - 1000L));
        }
    }

    /** Every key of accState with its value. */
    public static final class AccReader extends KeyedStateReaderFunction<RowData, Tuple2<RowData, RowData>> {
        private transient ValueState<RowData> acc;

        @Override
        public void open(OpenContext context) {
            acc = getRuntimeContext().getState(accDescriptor());
        }

        @Override
        public void readKey(RowData key, Context ctx, Collector<Tuple2<RowData, RowData>> out) throws Exception {
            out.collect(Tuple2.of(key, acc.value()));
        }
    }

    /** UPDATE accState SET f0 = f0 + 1 WHERE key = word. */
    public static final class BumpCount implements MapFunction<Tuple2<RowData, RowData>, Tuple2<RowData, RowData>> {
        private final String word;
        private transient StringData target;

        BumpCount(String word) {
            this.word = word;
        }

        @Override
        public Tuple2<RowData, RowData> map(Tuple2<RowData, RowData> entry) {
            if (target == null) {
                target = StringData.fromString(word);
            }
            if (!entry.f0.getString(0).equals(target)) {
                return entry;
            }
            RowData v = entry.f1;
            Long count = v.isNullAt(0) ? null : v.getLong(0) + 1;
            Long total = v.isNullAt(1) ? null : v.getLong(1);
            return Tuple2.of(entry.f0, GenericRowData.of(count, total));
        }
    }

    /** The key of an entry read back. */
    public static final class EntryKey
            implements KeySelector<Tuple2<RowData, RowData>, RowData>, ResultTypeQueryable<RowData> {
        @Override
        public RowData getKey(Tuple2<RowData, RowData> entry) {
            return entry.f0;
        }

        @Override
        public TypeInformation<RowData> getProducedType() {
            return KEY_TYPE;
        }
    }

    /** accState = the entry's value. */
    public static final class EntryWriter extends KeyedStateBootstrapFunction<RowData, Tuple2<RowData, RowData>> {
        private transient ValueState<RowData> acc;

        @Override
        public void open(OpenContext context) {
            acc = getRuntimeContext().getState(accDescriptor());
        }

        @Override
        public void processElement(Tuple2<RowData, RowData> entry, Context ctx) throws Exception {
            acc.update(entry.f1);
        }
    }

    // ------------------------------------------------------------------------------------------

    static final class Args {
        String mode;
        long keys = -1;
        String src;
        String out;
        String uidHash;
        int parallelism = 2;
        int maxParallelism = 0;
        String updateKey;
        int repeat = 1;
        String json;
    }

    static Args parse(String[] argv) {
        Args a = new Args();
        if (argv.length == 0) {
            usage("no mode");
        }
        a.mode = argv[0];
        for (int i = 1; i < argv.length; i++) {
            String flag = argv[i];
            if (i + 1 >= argv.length) {
                usage("missing value for " + flag);
            }
            String v = argv[++i];
            switch (flag) {
                case "--keys": a.keys = Long.parseLong(v); break;
                case "--src": a.src = v; break;
                case "--out": a.out = v; break;
                case "--uid-hash": a.uidHash = v; break;
                case "--parallelism": a.parallelism = Integer.parseInt(v); break;
                case "--max-parallelism": a.maxParallelism = Integer.parseInt(v); break;
                case "--update-key": a.updateKey = v; break;
                case "--repeat": a.repeat = Integer.parseInt(v); break;
                case "--json": a.json = v; break;
                default: usage("unknown option " + flag);
            }
        }
        if (a.out == null || a.uidHash == null) {
            usage("--out and --uid-hash are required");
        }
        if (a.mode.equals("bootstrap") && a.keys <= 0) {
            usage("bootstrap needs --keys N");
        }
        if (a.mode.equals("rewrite") && a.src == null) {
            usage("rewrite needs --src SAVEPOINT");
        }
        if (!a.mode.equals("bootstrap") && !a.mode.equals("rewrite")) {
            usage("mode is bootstrap or rewrite");
        }
        return a;
    }

    static void usage(String why) {
        System.err.println("error: " + why);
        System.err.println("usage: SpaWriteBench bootstrap --keys N --out DIR --uid-hash H"
                + " [--parallelism P] [--max-parallelism M] [--repeat R] [--json FILE]");
        System.err.println("       SpaWriteBench rewrite --src SAVEPOINT --out DIR --uid-hash H"
                + " [--update-key WORD] [--max-parallelism M] [--parallelism P] [--repeat R] [--json FILE]");
        System.exit(2);
    }

    static JobExecutionResult runPass(Args a, String out) throws Exception {
        Configuration conf = new Configuration();
        conf.set(ExecutionOptions.RUNTIME_MODE, RuntimeExecutionMode.BATCH);
        // The subtasks (and so the savepoint's keyed streams) are --parallelism, not what the
        // adaptive batch scheduler would derive from the data volume (it takes P as a maximum).
        conf.set(BatchExecutionOptions.ADAPTIVE_AUTO_PARALLELISM_ENABLED, false);
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
        env.setParallelism(a.parallelism);
        OperatorIdentifier id = OperatorIdentifier.forUidHash(a.uidHash);
        if (a.mode.equals("bootstrap")) {
            int maxParallelism = a.maxParallelism > 0 ? a.maxParallelism : 128;
            DataStream<Long> sequence = env.fromSequence(0, a.keys - 1);
            StateBootstrapTransformation<Long> t = OperatorTransformation.bootstrapWith(sequence)
                    .keyBy(new SequenceKey(), KEY_TYPE)
                    .transform(new SequenceAccumulator());
            SavepointWriter.newSavepoint(env, new HashMapStateBackend(), maxParallelism)
                    .withOperator(id, t)
                    .write(out);
        } else {
            SavepointReader reader = SavepointReader.read(env, a.src, new HashMapStateBackend());
            TypeInformation<Tuple2<RowData, RowData>> entryType = new TupleTypeInfo<>(KEY_TYPE, ACC_TYPE);
            DataStream<Tuple2<RowData, RowData>> entries = reader.readKeyedState(id, new AccReader(), KEY_TYPE, entryType);
            if (a.updateKey != null) {
                entries = entries.map(new BumpCount(a.updateKey)).returns(entryType);
            }
            OneInputStateTransformation<Tuple2<RowData, RowData>> input = OperatorTransformation.bootstrapWith(entries);
            if (a.maxParallelism > 0) {
                input = input.setMaxParallelism(a.maxParallelism);
            }
            StateBootstrapTransformation<Tuple2<RowData, RowData>> t =
                    input.keyBy(new EntryKey(), KEY_TYPE).transform(new EntryWriter());
            SavepointWriter.fromExistingSavepoint(env, a.src, new HashMapStateBackend())
                    .removeOperator(id)
                    .withOperator(id, t)
                    .write(out);
        }
        return env.execute("state-processor-api " + a.mode);
    }

    static void deleteTree(Path path) throws IOException {
        if (!Files.exists(path)) {
            return;
        }
        try (Stream<Path> walk = Files.walk(path)) {
            for (Path p : (Iterable<Path>) walk.sorted(Comparator.reverseOrder())::iterator) {
                Files.delete(p);
            }
        }
    }

    static long treeBytes(Path path) throws IOException {
        try (Stream<Path> walk = Files.walk(path)) {
            return walk.filter(Files::isRegularFile).mapToLong(p -> p.toFile().length()).sum();
        }
    }

    public static void main(String[] argv) {
        // A failed job leaves the MiniCluster's threads behind: exit explicitly either way.
        int code = 1;
        try {
            run(argv);
            code = 0;
        } catch (Throwable t) {
            t.printStackTrace();
        } finally {
            System.exit(code);
        }
    }

    static void run(String[] argv) throws Exception {
        long jvmStartMs = ManagementFactory.getRuntimeMXBean().getUptime();
        Args a = parse(argv);
        List<double[]> passes = new ArrayList<>(); // seconds, net runtime seconds
        long bytes = 0;
        for (int pass = 1; pass <= a.repeat; pass++) {
            Path out = Paths.get(a.out);
            deleteTree(out);
            long started = System.nanoTime();
            JobExecutionResult result = runPass(a, new File(a.out).toURI().toString());
            double seconds = (System.nanoTime() - started) / 1e9;
            double net = result.getNetRuntime() / 1e3;
            bytes = treeBytes(out);
            passes.add(new double[] {seconds, net});
            System.err.printf(Locale.ROOT, "[spa] %s pass %d: %.2f s end to end (job net runtime %.2f s), %d bytes%n",
                    a.mode, pass, seconds, net, bytes);
            if (pass < a.repeat) {
                deleteTree(out);
            }
        }
        double first = passes.get(0)[0];
        double best = passes.stream().mapToDouble(p -> p[0]).min().getAsDouble();
        StringBuilder json = new StringBuilder();
        json.append("{\"mode\": \"").append(a.mode).append("\", \"parallelism\": ").append(a.parallelism)
                .append(", \"max_parallelism\": ").append(a.maxParallelism)
                .append(", \"keys\": ").append(a.keys)
                .append(", \"jvm_start_s\": ").append(jvmStartMs / 1e3)
                .append(", \"first_s\": ").append(first)
                .append(", \"best_s\": ").append(best)
                .append(", \"out_bytes\": ").append(bytes)
                .append(", \"flink_version\": \"").append(org.apache.flink.runtime.util.EnvironmentInformation.getVersion())
                .append("\", \"passes\": [");
        for (int i = 0; i < passes.size(); i++) {
            json.append(i == 0 ? "" : ", ").append("{\"seconds\": ").append(passes.get(i)[0])
                    .append(", \"net_runtime_s\": ").append(passes.get(i)[1]).append('}');
        }
        json.append("]}");
        System.out.println(json);
        if (a.json != null) {
            try (PrintWriter w = new PrintWriter(a.json, StandardCharsets.UTF_8)) {
                w.println(json);
            }
        }
    }
}
