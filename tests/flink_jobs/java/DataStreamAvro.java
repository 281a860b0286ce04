/*
 * A Java DataStream job whose keyed state holds Avro records, serialized by flink-avro's
 * AvroSerializer (Flink 1.20 and 2.x): compiled by tests/fixtures/runtime.py with javac against
 * the jars PyFlink bundles plus flink-avro and avro from Maven Central (runtime.maven_jars), and
 * run with java -cp <classes>:<those jars> DataStreamAvro.
 *
 *   java ... DataStreamAvro --input DIR --records N --work DIR --result FILE
 *        [--backend hashmap|rocksdb] [--parallelism 2] [--max-parallelism 128] [--timeout S]
 *        [--conf KEY=VALUE]... [--restore DIR] [--uid avro-fn]
 *
 * Input: text lines "key,name,v" (v an integer in [-500, 500), name possibly empty) in a
 * continuously monitored directory (FileSource, uid "lines"), keyed by the String key; the
 * KeyedProcessFunction (uid "avro-fn", name "Avro Fn") keeps per key:
 *
 *   profile  ValueState<GenericRecord>  (GenericRecordAvroTypeInfo of PROFILE) updated per record:
 *            key; count += 1; total += v / 4.0; level LOW (v < -100) / MID (v < 100) / HIGH;
 *            names += [name]; per_name[name] += 1; last = the key's previous record as a Point
 *            {v, half = v / 2, flag = v >= 0} (null on the first); nick = name (null when empty);
 *            updated = EVENT_BASE + v * 1000 (timestamp-millis); day = 19000 + v (date);
 *            amount = sum of v cents (decimal(9, 2) bytes); id = UUID.nameUUIDFromBytes(key)
 *            (uuid); hash = sum of v as a 4-byte big-endian int (fixed); choice = v when v is
 *            even, else name (union of int and string); micros = EVENT_BASE * 1000 + v
 *            (timestamp-micros); clock = (v + 500) * 1000 (time-millis)
 *   reading  ValueState<Reading>        (AvroTypeInfo of the SpecificRecord Reading) the last
 *            record: key, seq (0-based index of the record within its key), v, ratio = v / 8,
 *            name (null when empty), at = EVENT_BASE + v (timestamp-millis), tags = [name] *
 *            (seq % 3)
 *   readings ListState<Reading>         every record's Reading, in input order
 *
 * Logical-typed values are written as their underlying Avro types (Long, Integer, ByteBuffer,
 * String), what AvroSerializer writes whether or not its GenericData has conversions.
 *
 * AvroSerializer writes through flink-avro's DataOutputEncoder (not Avro's binary encoder):
 * big-endian fixed-width numbers, i32-length-prefixed strings and bytes, i32 enum ordinals and
 * union indexes, arrays and maps as a varint count, the items and a 0 byte.
 *
 * Same protocol as DataStreamPojo.java (tests/flink_jobs/_common.py): local MiniCluster with a
 * known REST port; poll the REST metrics until the keyed vertex's numRecordsIn (summed over
 * subtasks) equals --records, then stopWithSavepoint(false, dir, CANONICAL) and write
 * {"savepoint": path, "job_id": id} to --result.
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

import java.math.BigInteger;
import java.nio.ByteBuffer;
import java.util.UUID;

import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.specific.SpecificRecordBase;
import org.apache.flink.formats.avro.typeutils.AvroTypeInfo;
import org.apache.flink.formats.avro.typeutils.GenericRecordAvroTypeInfo;

public class DataStreamAvro {
    static final ObjectMapper JSON = new ObjectMapper();
    static final long EVENT_BASE = 1_700_000_000_000L;
    static final int DAY_BASE = 19000;

    /** The GenericRecord state's schema: nested record, enum, array, map, nullable unions, a
     * two-branch union, fixed, and logical types on long, int, bytes and string. */
    static final String PROFILE = "{\"type\": \"record\", \"name\": \"Profile\", \"namespace\": \"statecat.avro\","
            + " \"fields\": ["
            + "{\"name\": \"key\", \"type\": \"string\"},"
            + "{\"name\": \"count\", \"type\": \"long\"},"
            + "{\"name\": \"total\", \"type\": \"double\"},"
            + "{\"name\": \"level\", \"type\": {\"type\": \"enum\", \"name\": \"Level\", \"symbols\": [\"LOW\", \"MID\", \"HIGH\"]}},"
            + "{\"name\": \"names\", \"type\": {\"type\": \"array\", \"items\": \"string\"}},"
            + "{\"name\": \"per_name\", \"type\": {\"type\": \"map\", \"values\": \"long\"}},"
            + "{\"name\": \"last\", \"type\": [\"null\", {\"type\": \"record\", \"name\": \"Point\", \"fields\": ["
            + "  {\"name\": \"v\", \"type\": \"int\"}, {\"name\": \"half\", \"type\": \"float\"},"
            + "  {\"name\": \"flag\", \"type\": \"boolean\"}]}], \"default\": null},"
            + "{\"name\": \"nick\", \"type\": [\"null\", \"string\"], \"default\": null},"
            + "{\"name\": \"updated\", \"type\": {\"type\": \"long\", \"logicalType\": \"timestamp-millis\"}},"
            + "{\"name\": \"day\", \"type\": {\"type\": \"int\", \"logicalType\": \"date\"}},"
            + "{\"name\": \"amount\", \"type\": {\"type\": \"bytes\", \"logicalType\": \"decimal\", \"precision\": 9, \"scale\": 2}},"
            + "{\"name\": \"id\", \"type\": {\"type\": \"string\", \"logicalType\": \"uuid\"}},"
            + "{\"name\": \"hash\", \"type\": {\"type\": \"fixed\", \"name\": \"Hash4\", \"size\": 4}},"
            + "{\"name\": \"choice\", \"type\": [\"int\", \"string\"]},"
            + "{\"name\": \"micros\", \"type\": {\"type\": \"long\", \"logicalType\": \"timestamp-micros\"}},"
            + "{\"name\": \"clock\", \"type\": {\"type\": \"int\", \"logicalType\": \"time-millis\"}}"
            + "]}";

    /** A SpecificRecord written by hand (what avro-tools generates, reduced to what Avro's
     * SpecificData uses: SCHEMA$, a public no-arg constructor, get and put by field index). The
     * namespace "DataStreamAvro$" makes SpecificData find this nested class by the schema's name
     * (RocksDB state deserializes on every read). */
    public static class Reading extends SpecificRecordBase {
        public static final Schema SCHEMA$ = new Schema.Parser().parse(
                "{\"type\": \"record\", \"name\": \"Reading\", \"namespace\": \"DataStreamAvro$\", \"fields\": ["
                + "{\"name\": \"key\", \"type\": \"string\"},"
                + "{\"name\": \"seq\", \"type\": \"int\"},"
                + "{\"name\": \"v\", \"type\": \"long\"},"
                + "{\"name\": \"ratio\", \"type\": \"float\"},"
                + "{\"name\": \"name\", \"type\": [\"null\", \"string\"], \"default\": null},"
                + "{\"name\": \"at\", \"type\": {\"type\": \"long\", \"logicalType\": \"timestamp-millis\"}},"
                + "{\"name\": \"tags\", \"type\": {\"type\": \"array\", \"items\": \"string\"}}"
                + "]}");

        public CharSequence key;
        public int seq;
        public long v;
        public float ratio;
        public CharSequence name;
        public long at;
        public List<CharSequence> tags;

        public Reading() {}

        public static Schema getClassSchema() {
            return SCHEMA$;
        }

        @Override
        public Schema getSchema() {
            return SCHEMA$;
        }

        @Override
        public Object get(int field) {
            switch (field) {
                case 0: return key;
                case 1: return seq;
                case 2: return v;
                case 3: return ratio;
                case 4: return name;
                case 5: return at;
                case 6: return tags;
                default: throw new IndexOutOfBoundsException("Reading has no field " + field);
            }
        }

        @SuppressWarnings("unchecked")
        @Override
        public void put(int field, Object value) {
            switch (field) {
                case 0: key = (CharSequence) value; break;
                case 1: seq = (Integer) value; break;
                case 2: v = (Long) value; break;
                case 3: ratio = (Float) value; break;
                case 4: name = (CharSequence) value; break;
                case 5: at = (Long) value; break;
                case 6: tags = (List<CharSequence>) value; break;
                default: throw new IndexOutOfBoundsException("Reading has no field " + field);
            }
        }
    }

    public static class AvroFn extends KeyedProcessFunction<String, String, String> {
        private transient Schema schema;
        private transient ValueState<GenericRecord> profile;
        private transient ValueState<Reading> reading;
        private transient ListState<Reading> readings;

        @Override
        public void open(OpenContext ctx) {
            schema = new Schema.Parser().parse(PROFILE);
            profile = getRuntimeContext().getState(
                    new ValueStateDescriptor<>("profile", new GenericRecordAvroTypeInfo(schema)));
            AvroTypeInfo<Reading> specific = new AvroTypeInfo<>(Reading.class);
            reading = getRuntimeContext().getState(new ValueStateDescriptor<>("reading", specific));
            readings = getRuntimeContext().getListState(new ListStateDescriptor<>("readings", specific));
        }

        @Override
        public void processElement(String line, Context ctx, Collector<String> out)
                throws Exception {
            String[] f = line.split(",", -1);
            String key = f[0];
            String name = f[1];
            int v = Integer.parseInt(f[2]);
            GenericRecord prev = profile.value();
            GenericRecord p = new GenericData.Record(schema);
            long count = prev == null ? 0 : (Long) prev.get("count");
            double total = prev == null ? 0.0 : (Double) prev.get("total");
            // total is sum(v) / 4, exact in a double: the sum without reading the decimal back (a
            // GenericData with conversions would hand it back as a BigDecimal, without as bytes)
            long sum = Math.round(total * 4);
            List<CharSequence> names = new ArrayList<>();
            Map<CharSequence, Long> perName = new LinkedHashMap<>();
            GenericRecord last = null;
            if (prev != null) {
                names.addAll((List<CharSequence>) prev.get("names"));
                for (Map.Entry<?, ?> e : ((Map<?, ?>) prev.get("per_name")).entrySet()) {
                    perName.put(e.getKey().toString(), (Long) e.getValue());
                }
                Reading r = reading.value();
                Schema point = schema.getField("last").schema().getTypes().get(1);
                last = new GenericData.Record(point);
                last.put("v", (int) r.v);
                last.put("half", r.v / 2.0f);
                last.put("flag", r.v >= 0);
            }
            sum += v;
            names.add(name);
            perName.merge(name, 1L, Long::sum);
            p.put("key", key);
            p.put("count", count + 1);
            p.put("total", total + v / 4.0);
            p.put("level", new GenericData.EnumSymbol(schema.getField("level").schema(),
                    v < -100 ? "LOW" : v < 100 ? "MID" : "HIGH"));
            p.put("names", names);
            p.put("per_name", perName);
            p.put("last", last);
            p.put("nick", name.isEmpty() ? null : name);
            p.put("updated", EVENT_BASE + v * 1000L);
            p.put("day", DAY_BASE + v);
            p.put("amount", ByteBuffer.wrap(BigInteger.valueOf(sum).toByteArray()));
            p.put("id", UUID.nameUUIDFromBytes(key.getBytes(StandardCharsets.UTF_8)).toString());
            p.put("hash", new GenericData.Fixed(schema.getField("hash").schema(),
                    ByteBuffer.allocate(4).putInt((int) sum).array()));
            p.put("choice", v % 2 == 0 ? (Object) Integer.valueOf(v) : (Object) name);
            p.put("micros", EVENT_BASE * 1000L + v);
            p.put("clock", (v + 500) * 1000);
            profile.update(p);

            Reading r = new Reading();
            r.key = key;
            r.seq = (int) count;
            r.v = v;
            r.ratio = v / 8.0f;
            r.name = name.isEmpty() ? null : name;
            r.at = EVENT_BASE + v;
            r.tags = new ArrayList<>();
            for (int i = 0; i < r.seq % 3; i++) {
                r.tags.add(name);
            }
            reading.update(r);
            readings.add(r);
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
        a.put("uid", "avro-fn");
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
                .process(new AvroFn(), Types.STRING)
                .uid(a.get("uid"))
                .name("Avro Fn");
        JobClient client = env.executeAsync("datastream_java_avro");
        String jobId = client.getJobID().toString();
        try {
            if (restore != null) {
                waitForRestore(port, jobId, Paths.get(restore), timeoutMs);
            }
            waitForRecords(port, jobId, "Avro Fn", records, timeoutMs);
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
