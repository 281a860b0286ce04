/*
 * POJO and enum schema evolution between two savepoints (issue 26), one source for two versions
 * of the same job: tests/test_schema_evolution.py keeps the lines marked "// V1" (dropping those
 * marked "// V2") or the reverse, and compiles each version with javac, together with
 * DataStreamPojo.java (whose REST helpers this job uses), against the jars PyFlink bundles.
 *
 *   java ... PojoEvolution --input DIR --records N --work DIR --result FILE
 *        [--backend hashmap|rocksdb] [--restore DIR] [--timeout S]
 *
 * Input: text lines "key,name,v,level" in a continuously monitored directory (FileSource, uid
 * "lines"), keyed by key; the KeyedProcessFunction (uid "evolution-fn", name "Evolution Fn")
 * keeps per key:
 *
 *   item   ValueState<Item>    name = the record's name, count += 1, and
 *                              v1: legacy += v (int)   v2: weight = (weight or 0) + v / 2.0
 *   level  ValueState<Level>   Level.valueOf(level)    v1: {LOW, HIGH}  v2: {LOW, HIGH, CRITICAL}
 *
 * Item is a Flink POJO; v2 drops `legacy` and adds `weight` (a Double, so "never set" is null).
 * Same class names, uids and state names in both versions: v2 restored from v1's savepoint takes
 * Flink's PojoSerializer and EnumSerializer schema evolution.
 *
 * Protocol as DataStreamPojo's: poll REST until the keyed vertex's numRecordsIn equals --records,
 * stopWithSavepoint(false, dir, CANONICAL), write {"savepoint", "job_id"} to --result; --restore
 * DIR restores from DIR (NO_CLAIM, unclaimed state refused) and checks Flink restored it.
 */

import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.connector.file.src.FileSource;
import org.apache.flink.connector.file.src.reader.TextLineInputFormat;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.core.execution.SavepointFormatType;
import org.apache.flink.runtime.util.EnvironmentInformation;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.util.Collector;

public class PojoEvolution {
    /** A Flink POJO: public, public fields, public no-arg constructor. */
    public static class Item {
        public String name;
        public long count;
        public int legacy; // V1
        public Double weight; // V2

        public Item() {}
    }

    public enum Level {
        LOW,
        HIGH, // V1
        HIGH, CRITICAL // V2
    }

    public static class EvolutionFn extends KeyedProcessFunction<String, String, String> {
        private transient ValueState<Item> item;
        private transient ValueState<Level> level;

        @Override
        public void open(OpenContext ctx) {
            item = getRuntimeContext().getState(
                    new ValueStateDescriptor<>("item", Types.POJO(Item.class)));
            level = getRuntimeContext().getState(
                    new ValueStateDescriptor<>("level", Types.ENUM(Level.class)));
        }

        @Override
        public void processElement(String line, Context ctx, Collector<String> out)
                throws Exception {
            String[] f = line.split(",", -1);
            long v = Long.parseLong(f[2]);
            Item it = item.value();
            if (it == null) {
                it = new Item();
            }
            it.name = f[1];
            it.count += 1;
            it.legacy += (int) v; // V1
            it.weight = (it.weight == null ? 0.0 : it.weight) + v / 2.0; // V2
            item.update(it);
            level.update(Level.valueOf(f[3]));
        }
    }

    public static void main(String[] argv) throws Exception {
        try {
            run(argv);
        } catch (Throwable t) {
            t.printStackTrace();
            System.err.flush();
            System.exit(1);
        }
        // The local environment's MiniCluster threads are not all daemons.
        System.exit(0);
    }

    static void run(String[] argv) throws Exception {
        Map<String, String> a = new LinkedHashMap<>();
        a.put("backend", "hashmap");
        a.put("timeout", "120");
        for (int i = 0; i < argv.length; i += 2) {
            if (!argv[i].startsWith("--") || i + 1 >= argv.length) {
                throw new IllegalArgumentException("bad argument " + argv[i]);
            }
            a.put(argv[i].substring(2), argv[i + 1]);
        }
        for (String k : new String[] {"input", "records", "work", "result"}) {
            if (!a.containsKey(k)) {
                throw new IllegalArgumentException("--" + k + " is required");
            }
        }
        long records = Long.parseLong(a.get("records"));
        long timeoutMs = (long) (Double.parseDouble(a.get("timeout")) * 1000);
        Path work = Paths.get(a.get("work")).toAbsolutePath();
        Path io = work.resolve("io"); // RocksDB native libs extract here
        Files.createDirectories(io);
        int port = DataStreamPojo.freePort();

        Map<String, String> conf = new LinkedHashMap<>();
        String checkpoints = work.resolve("checkpoints").toUri().toString();
        String savepoints = work.resolve("savepoints").toUri().toString();
        conf.put("state.backend.type", a.get("backend"));
        conf.put("execution.checkpointing.dir", checkpoints);
        conf.put("execution.checkpointing.savepoint-dir", savepoints);
        if (EnvironmentInformation.getVersion().startsWith("1.")) {
            conf.put("state.backend", a.get("backend"));
            conf.put("state.checkpoints.dir", checkpoints);
            conf.put("state.savepoints.dir", savepoints);
        }
        conf.put("rest.bind-address", "127.0.0.1");
        conf.put("rest.address", "127.0.0.1");
        conf.put("rest.bind-port", String.valueOf(port));
        conf.put("rest.port", String.valueOf(port));
        // the metric fetcher caches for 10 s by default; its values are our sync condition
        conf.put("metrics.fetcher.update-interval", "200");
        conf.put("parallelism.default", "2");
        conf.put("pipeline.max-parallelism", "128");
        conf.put("io.tmp.dirs", io.toString());
        String restore = a.get("restore");
        if (restore != null) {
            conf.put("execution.state-recovery.path",
                    Paths.get(restore).toAbsolutePath().toUri().toString());
            conf.put("execution.state-recovery.ignore-unclaimed-state", "false");
            conf.put("execution.savepoint.ignore-unclaimed-state", "false");
            conf.put("execution.state-recovery.claim-mode", "NO_CLAIM");
        }

        StreamExecutionEnvironment env =
                StreamExecutionEnvironment.getExecutionEnvironment(Configuration.fromMap(conf));
        FileSource<String> source = FileSource.forRecordStreamFormat(
                        new TextLineInputFormat(),
                        new org.apache.flink.core.fs.Path(
                                Paths.get(a.get("input")).toAbsolutePath().toUri()))
                .monitorContinuously(Duration.ofSeconds(1))
                .build();
        env.fromSource(source, WatermarkStrategy.noWatermarks(), "lines")
                .uid("lines")
                .keyBy(line -> line.substring(0, line.indexOf(',')), Types.STRING)
                .process(new EvolutionFn(), Types.STRING)
                .uid("evolution-fn")
                .name("Evolution Fn");
        JobClient client = env.executeAsync("pojo_evolution");
        String jobId = client.getJobID().toString();
        try {
            if (restore != null) {
                DataStreamPojo.waitForRestore(port, jobId, Paths.get(restore), timeoutMs);
            }
            DataStreamPojo.waitForRecords(port, jobId, "Evolution Fn", records, timeoutMs);
        } catch (Exception e) {
            // A refused restore takes the MiniCluster with it: show Flink's reason, if any.
            try {
                client.getJobExecutionResult().get(10, TimeUnit.SECONDS);
            } catch (Exception cause) {
                IllegalStateException failed = new IllegalStateException(e.getMessage(), cause);
                failed.addSuppressed(e);
                throw failed;
            }
            throw e;
        }
        String path = client.stopWithSavepoint(false, savepoints, SavepointFormatType.CANONICAL)
                .get(300, TimeUnit.SECONDS);
        if (path.startsWith("file:")) {
            path = Paths.get(java.net.URI.create(path)).toString();
        }
        Map<String, String> result = new LinkedHashMap<>();
        result.put("savepoint", path);
        result.put("job_id", jobId);
        Files.write(Paths.get(a.get("result")), DataStreamPojo.JSON.writeValueAsBytes(result));
    }
}
