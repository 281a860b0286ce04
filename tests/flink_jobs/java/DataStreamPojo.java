/*
 * A Java DataStream job whose keyed state holds a POJO and Flink tuples (Flink 1.20 and 2.x):
 * compiled by tests/fixtures/runtime.py with javac against the jars PyFlink bundles
 * (pyflink/lib of the version's venv) and run with java -cp <classes>:<that lib>/* DataStreamPojo.
 *
 *   java ... DataStreamPojo --input DIR --records N --work DIR --result FILE
 *        [--backend hashmap|rocksdb] [--parallelism 2] [--max-parallelism 128] [--timeout S]
 *        [--conf KEY=VALUE]... [--restore DIR] [--output FILE] [--uid pojo-fn] [--kryo-state true]
 *
 * Input: text lines "key,name,v" (v an integer, name possibly empty) in a continuously monitored
 * directory (FileSource, uid "lines"), keyed by the String key; the KeyedProcessFunction (uid
 * "pojo-fn", name "Pojo Fn") keeps per key:
 *
 *   summary  ValueState<Summary>               name = the record's name (null when empty),
 *                                              count += 1, total += v / 4.0
 *   history  ListState<Tuple2<String, Long>>   append (name, v)
 *   per_name MapState<String, Summary>         per_name[name]: name, count += 1, total += v / 4.0
 *   timer    on a key's first record an event-time timer at EVENT_BASE + v * 1000 (no
 *            watermarks: it never fires)
 *   summary_kryo ValueState<SummaryValue>      with --kryo-state true only (bench/bench_layouts.py):
 *            the summary again as a value class Flink serializes with Kryo (final fields, no
 *            no-arg constructor): the same data shape through Kryo's FieldSerializer
 *
 * Summary is a Flink POJO (public class, public fields, public no-arg constructor): Flink's
 * PojoSerializer writes its fields in name order (count, name, total), a null flag per field.
 *
 * Same protocol as tests/flink_jobs/_common.py: local MiniCluster with a known REST port; poll the
 * REST metrics until the keyed vertex's numRecordsIn (summed over subtasks) equals --records,
 * then stopWithSavepoint(false, dir, CANONICAL) and write {"savepoint": path, "job_id": id} to
 * --result. --restore DIR: execution.state-recovery.path = DIR (NO_CLAIM, unclaimed state
 * refused), and the job checks through REST (latest.restored.external_path) that Flink restored
 * it from DIR. --output FILE: System.out goes to FILE and the function emits, per record, one
 * JSON line with the record and its states after the update, printed by print("out").
 */

import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.PrintStream;
import java.net.ConnectException;
import java.net.HttpURLConnection;
import java.net.ServerSocket;
import java.net.URL;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.state.MapState;
import org.apache.flink.api.common.state.MapStateDescriptor;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.connector.file.src.FileSource;
import org.apache.flink.connector.file.src.reader.TextLineInputFormat;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.core.execution.SavepointFormatType;
import org.apache.flink.runtime.util.EnvironmentInformation;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.flink.streaming.api.datastream.SingleOutputStreamOperator;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.util.Collector;

public class DataStreamPojo {
    static final ObjectMapper JSON = new ObjectMapper();
    static final long EVENT_BASE = 1_700_000_000_000L;

    /** The state's POJO: public, public fields, public no-arg constructor. */
    public static class Summary {
        public String name;
        public long count;
        public double total;

        public Summary() {}

        Map<String, Object> json() {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("name", name);
            m.put("count", count);
            m.put("total", total);
            return m;
        }
    }

    /** Summary's fields as a value class: not a POJO, so Flink serializes it with Kryo. */
    public static final class SummaryValue {
        private final String name;
        private final long count;
        private final double total;

        public SummaryValue(String name, long count, double total) {
            this.name = name;
            this.count = count;
            this.total = total;
        }
    }

    public static class PojoFn extends KeyedProcessFunction<String, String, String> {
        private final boolean emitStates;
        private final boolean kryoState;
        private transient ValueState<SummaryValue> summaryKryo;
        private transient ValueState<Summary> summary;
        private transient ListState<Tuple2<String, Long>> history;
        private transient MapState<String, Summary> perName;

        public PojoFn(boolean emitStates, boolean kryoState) {
            this.emitStates = emitStates;
            this.kryoState = kryoState;
        }

        @Override
        public void open(OpenContext ctx) {
            TypeInformation<Summary> pojo = Types.POJO(Summary.class);
            summary = getRuntimeContext().getState(new ValueStateDescriptor<>("summary", pojo));
            history = getRuntimeContext().getListState(
                    new ListStateDescriptor<>("history", Types.TUPLE(Types.STRING, Types.LONG)));
            perName = getRuntimeContext().getMapState(
                    new MapStateDescriptor<>("per_name", Types.STRING, pojo));
            if (kryoState) {
                summaryKryo = getRuntimeContext().getState(new ValueStateDescriptor<>(
                        "summary_kryo", TypeInformation.of(SummaryValue.class)));
            }
        }

        @Override
        public void processElement(String line, Context ctx, Collector<String> out)
                throws Exception {
            String[] f = line.split(",", -1);
            String key = f[0];
            String name = f[1];
            long v = Long.parseLong(f[2]);
            Summary s = summary.value();
            boolean isNew = s == null;
            if (isNew) {
                s = new Summary();
                ctx.timerService().registerEventTimeTimer(EVENT_BASE + v * 1000);
            }
            s.name = name.isEmpty() ? null : name;
            s.count += 1;
            s.total += v / 4.0;
            summary.update(s);
            if (kryoState) {
                summaryKryo.update(new SummaryValue(s.name, s.count, s.total));
            }
            history.add(Tuple2.of(name, v));
            Summary p = perName.get(name);
            if (p == null) {
                p = new Summary();
                p.name = name;
            }
            p.count += 1;
            p.total += v / 4.0;
            perName.put(name, p);
            if (!emitStates) {
                return;
            }
            Map<String, Object> o = new LinkedHashMap<>();
            o.put("key", key);
            o.put("name", name);
            o.put("v", v);
            o.put("new", isNew);
            o.put("summary", summary.value() == null ? null : summary.value().json());
            List<Object> h = new ArrayList<>();
            for (Tuple2<String, Long> t : history.get()) {
                List<Object> pair = new ArrayList<>();
                pair.add(t.f0);
                pair.add(t.f1);
                h.add(pair);
            }
            o.put("history", h);
            Map<String, Object> pn = new LinkedHashMap<>();
            for (Map.Entry<String, Summary> e : perName.entries()) {
                pn.put(e.getKey(), e.getValue().json());
            }
            o.put("per_name", pn);
            out.collect(JSON.writeValueAsString(o));
        }
    }

    public static void main(String[] argv) throws Exception {
        try {
            run(argv);
        } catch (Throwable t) {
            // first line: the exception and its message (restore.py shows it as the root cause)
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
        a.put("parallelism", "2");
        a.put("max-parallelism", "128");
        a.put("timeout", "600");
        a.put("uid", "pojo-fn");
        List<String> extraConf = new ArrayList<>();
        for (int i = 0; i < argv.length; i += 2) {
            if (!argv[i].startsWith("--") || i + 1 >= argv.length) {
                throw new IllegalArgumentException("bad argument " + argv[i]);
            }
            String k = argv[i].substring(2);
            if (k.equals("conf")) {
                extraConf.add(argv[i + 1]);
            } else {
                a.put(k, argv[i + 1]);
            }
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
        int port = freePort();
        boolean v1 = EnvironmentInformation.getVersion().startsWith("1.");

        Map<String, String> conf = new LinkedHashMap<>();
        String checkpoints = work.resolve("checkpoints").toUri().toString();
        String savepoints = work.resolve("savepoints").toUri().toString();
        conf.put("state.backend.type", a.get("backend"));
        conf.put("execution.checkpointing.dir", checkpoints);
        conf.put("execution.checkpointing.savepoint-dir", savepoints);
        if (v1) {
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
        conf.put("parallelism.default", a.get("parallelism"));
        conf.put("pipeline.max-parallelism", a.get("max-parallelism"));
        conf.put("io.tmp.dirs", io.toString());
        String restore = a.get("restore");
        if (restore != null) {
            // _common.restore_conf: NO_CLAIM, state no operator claims fails the restore
            conf.put("execution.state-recovery.path",
                    Paths.get(restore).toAbsolutePath().toUri().toString());
            conf.put("execution.state-recovery.ignore-unclaimed-state", "false");
            conf.put("execution.savepoint.ignore-unclaimed-state", "false");
            conf.put("execution.state-recovery.claim-mode", "NO_CLAIM");
        }
        for (String kv : extraConf) {
            int eq = kv.indexOf('=');
            conf.put(kv.substring(0, eq), kv.substring(eq + 1));
        }
        String output = a.get("output");
        if (output != null) {
            // the MiniCluster's tasks run in this JVM: the print sink writes here, whole lines
            System.setOut(new PrintStream(new FileOutputStream(output, true), true, "UTF-8"));
        }

        StreamExecutionEnvironment env =
                StreamExecutionEnvironment.getExecutionEnvironment(Configuration.fromMap(conf));
        FileSource<String> source = FileSource.forRecordStreamFormat(
                        new TextLineInputFormat(),
                        new org.apache.flink.core.fs.Path(
                                Paths.get(a.get("input")).toAbsolutePath().toUri()))
                .monitorContinuously(Duration.ofSeconds(1))
                .build();
        SingleOutputStreamOperator<String> keyed = env
                .fromSource(source, WatermarkStrategy.noWatermarks(), "lines")
                .uid("lines")
                .keyBy(line -> line.substring(0, line.indexOf(',')), Types.STRING)
                .process(new PojoFn(output != null, "true".equals(a.get("kryo-state"))), Types.STRING)
                .uid(a.get("uid"))
                .name("Pojo Fn");
        if (output != null) {
            keyed.print("out");
        }
        JobClient client = env.executeAsync("datastream_java_pojo");
        String jobId = client.getJobID().toString();
        try {
            if (restore != null) {
                waitForRestore(port, jobId, Paths.get(restore), timeoutMs);
            }
            waitForRecords(port, jobId, "Pojo Fn", records, timeoutMs);
        } catch (Exception e) {
            // A failed job (a refused restore) takes its MiniCluster, REST included, with it:
            // its result carries Flink's exception, whose innermost cause ends the printed trace
            // (restore.py shows the last "Caused by:" as the root cause).
            Exception failure = null;
            try {
                client.getJobExecutionResult().get(10, TimeUnit.SECONDS);
            } catch (Exception cause) {
                failure = cause;
            }
            if (failure == null) {
                throw e;
            }
            IllegalStateException failed = new IllegalStateException(e.getMessage(), failure);
            failed.addSuppressed(e);
            throw failed;
        }
        String path = client.stopWithSavepoint(false, savepoints, SavepointFormatType.CANONICAL)
                .get(300, TimeUnit.SECONDS);
        if (path.startsWith("file:")) {
            path = Paths.get(java.net.URI.create(path)).toString();
        }
        System.out.flush(); // the job has ended: every print sink line is written
        Map<String, String> result = new LinkedHashMap<>();
        result.put("savepoint", path);
        result.put("job_id", jobId);
        Files.write(Paths.get(a.get("result")), JSON.writeValueAsBytes(result));
    }

    /** A free port below the kernel's ephemeral range (_common.free_port): a just-released
     * ephemeral port could be handed to any socket before Flink binds it. */
    static int freePort() throws IOException {
        int low = 32768;
        try {
            low = Integer.parseInt(Files.readString(Paths.get("/proc/sys/net/ipv4/ip_local_port_range"))
                    .trim().split("\\s+")[0]);
        } catch (IOException | NumberFormatException e) {
            // keep the usual default
        }
        java.util.Random random = new java.security.SecureRandom();
        int span = Math.max(low - 20000, 1);
        for (int i = 0; i < 50; i++) {
            int port = 20000 + random.nextInt(span);
            try (ServerSocket s = new ServerSocket(port, 1, java.net.InetAddress.getLoopbackAddress())) {
                return s.getLocalPort();
            } catch (IOException e) {
                // taken: try another
            }
        }
        throw new IOException("no free port below the ephemeral range for Flink's REST endpoint");
    }

    static JsonNode get(int port, String path) throws IOException {
        HttpURLConnection c =
                (HttpURLConnection) new URL("http://127.0.0.1:" + port + path).openConnection();
        c.setConnectTimeout(10_000);
        c.setReadTimeout(10_000);
        try (InputStream in = c.getInputStream()) {
            return JSON.readTree(new String(in.readAllBytes(), StandardCharsets.UTF_8));
        } finally {
            c.disconnect();
        }
    }

    /** ': <Flink's root exception of the job>', or ''. */
    static String rootException(int port, String jobId) {
        try {
            JsonNode root = get(port, "/jobs/" + jobId + "/exceptions").path("root-exception");
            return root.isMissingNode() || root.isNull() ? "" : ": " + root.asText();
        } catch (IOException e) {
            return "";
        }
    }

    static String jobState(int port, String jobId, String what) throws IOException {
        String state = get(port, "/jobs/" + jobId).get("state").asText();
        if (state.equals("FAILED") || state.equals("CANCELED") || state.equals("FINISHED")) {
            throw new IllegalStateException("job is " + state + " " + what
                    + rootException(port, jobId));
        }
        return state;
    }

    /** Waits until the job runs and checks that it restored from `dir` (_common.wait_for_restore). */
    static void waitForRestore(int port, String jobId, Path dir, long timeoutMs) throws Exception {
        String want = dir.toRealPath().toString();
        long deadline = System.currentTimeMillis() + timeoutMs;
        boolean reached = false;
        String last = "nothing yet";
        while (System.currentTimeMillis() < deadline) {
            try {
                String state = jobState(port, jobId, "instead of restored from " + dir);
                reached = true;
                last = state;
                if (state.equals("RUNNING")) {
                    JsonNode restored = get(port, "/jobs/" + jobId + "/checkpoints")
                            .path("latest").path("restored");
                    if (restored.isMissingNode() || restored.isNull()) {
                        throw new IllegalStateException("job runs but did not restore from " + dir
                                + ": no restored checkpoint in its statistics");
                    }
                    String got = restored.path("external_path").asText("");
                    if (got.startsWith("file:")) {
                        got = got.substring("file:".length());
                    }
                    String real = Paths.get(got).toRealPath().toString();
                    if (!real.equals(want)) {
                        throw new IllegalStateException("job restored from " + got + ", not from "
                                + dir);
                    }
                    return;
                }
            } catch (ConnectException e) {
                if (reached) {
                    throw new IllegalStateException("REST endpoint went away", e);
                }
                last = e.toString();
            } catch (IOException e) {
                last = e.toString();
            }
            Thread.sleep(200);
        }
        throw new IllegalStateException("timed out waiting for the job to run restored from "
                + dir + "; last: " + last);
    }

    /** Polls until vertex `name`'s numRecordsIn summed over subtasks equals `want`. */
    static void waitForRecords(int port, String jobId, String name, long want, long timeoutMs)
            throws Exception {
        long deadline = System.currentTimeMillis() + timeoutMs;
        boolean reached = false;
        String last = "nothing yet";
        while (System.currentTimeMillis() < deadline) {
            try {
                JsonNode job = get(port, "/jobs/" + jobId);
                reached = true;
                jobState(port, jobId, "before the savepoint");
                String vid = null;
                List<String> names = new ArrayList<>();
                for (JsonNode v : job.get("vertices")) {
                    names.add(v.get("name").asText());
                    if (v.get("name").asText().contains(name)) {
                        vid = v.get("id").asText();
                    }
                }
                if (vid == null) {
                    throw new IllegalStateException("no job vertex named like " + name + ": "
                            + names);
                }
                JsonNode rows = get(port, "/jobs/" + jobId + "/vertices/" + vid
                        + "/subtasks/metrics?get=numRecordsIn&agg=sum");
                if (rows.size() > 0) {
                    long sum = (long) Double.parseDouble(rows.get(0).get("sum").asText());
                    last = name + ".numRecordsIn = " + sum;
                    if (sum > want) {
                        throw new IllegalStateException(last + " > expected " + want);
                    }
                    if (sum == want) {
                        return;
                    }
                }
            } catch (ConnectException e) {
                // not up yet is fine; gone after having answered means the cluster shut down
                if (reached) {
                    throw new IllegalStateException("REST endpoint went away", e);
                }
                last = e.toString();
            } catch (IOException e) {
                last = e.toString(); // slow answer or not served yet: poll again
            }
            Thread.sleep(200);
        }
        throw new IllegalStateException("timed out waiting for all input to reach " + name
                + "; last: " + last);
    }
}
