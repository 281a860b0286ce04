/*
 * Flink SQL word count with a sum, as tests/flink_jobs/sql_groupby.py, for Flink releases whose
 * PyFlink cannot run on our Python (1.15): compiled and run by tests/fixtures/generate.py with
 * javac / java -cp against the jars of the PyPI sdist apache-flink-libraries.
 *
 *   java -cp <classes>:<flink lib>/* SqlGroupBy --input DIR --records N --work DIR --result FILE
 *        [--backend hashmap|rocksdb] [--parallelism 2] [--max-parallelism 128] [--timeout S]
 *        [--conf KEY=VALUE]...
 *
 * Same protocol as tests/flink_jobs/_common.py: a continuously monitored filesystem CSV source
 * (the job never finishes by itself), local MiniCluster with a known REST port, poll the REST
 * metrics until the GroupAggregate vertex's numRecordsIn (summed over subtasks) equals the input
 * row count, then stopWithSavepoint(false, dir, CANONICAL) and write
 * {"savepoint": path, "job_id": id} to --result. No fixed sleep stands in for a condition.
 *
 * Uses only the Flink 1.15 API (checked with javap): JobClient.stopWithSavepoint(boolean,
 * String, SavepointFormatType), StreamExecutionEnvironment.createLocalEnvironment(Configuration).
 *
 * --snapshot successive --phase STAGED_DIR:RECORDS ... (the successive protocol of _common.py,
 * adapted to 1.15, which cannot trigger a checkpoint on request): periodic incremental
 * checkpoints every --checkpoint-interval ms (default 500), all retained on cancellation; per
 * phase, move STAGED_DIR into --input, wait for the cumulative RECORDS, then wait (REST
 * /jobs/:id/checkpoints) for a completed checkpoint TRIGGERED after that moment (its barriers
 * followed every counted record), then triggerSavepoint(dir, CANONICAL) of the running job.
 * Writes {"job_id", "phases": [{"phase", "checkpoint_id", "checkpoint", "savepoint"}]}.
 */

import java.io.IOException;
import java.io.InputStream;
import java.net.ConnectException;
import java.net.HttpURLConnection;
import java.net.ServerSocket;
import java.net.URL;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.core.execution.SavepointFormatType;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.table.api.TableResult;
import org.apache.flink.table.api.bridge.java.StreamTableEnvironment;

public class SqlGroupBy {
    private static final ObjectMapper JSON = new ObjectMapper();

    public static void main(String[] argv) throws Exception {
        Map<String, String> a = new LinkedHashMap<>();
        a.put("backend", "hashmap");
        a.put("parallelism", "2");
        a.put("max-parallelism", "128");
        a.put("timeout", "600");
        List<String> extraConf = new ArrayList<>();
        List<String> phases = new ArrayList<>();
        a.put("snapshot", "canonical");
        a.put("checkpoint-interval", "500");
        for (int i = 0; i < argv.length; i += 2) {
            if (!argv[i].startsWith("--") || i + 1 >= argv.length) {
                throw new IllegalArgumentException("bad argument " + argv[i]);
            }
            String k = argv[i].substring(2);
            if (k.equals("conf")) {
                extraConf.add(argv[i + 1]);
            } else if (k.equals("phase")) {
                phases.add(argv[i + 1]);
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
        Path work = Paths.get(a.get("work")).toAbsolutePath();
        int port = freePort();

        // Flink 1.15 keys (state.backend, state.checkpoints.dir, ...). A checkpoint directory
        // makes streams above the 20 KiB inline threshold separate files, as in the 2.x jobs.
        Configuration conf = new Configuration();
        conf.setString("state.backend", a.get("backend"));
        conf.setString("state.checkpoints.dir", work.resolve("checkpoints").toUri().toString());
        conf.setString("state.savepoints.dir", work.resolve("savepoints").toUri().toString());
        conf.setString("rest.bind-address", "127.0.0.1");
        conf.setString("rest.address", "127.0.0.1");
        conf.setString("rest.bind-port", String.valueOf(port));
        conf.setString("rest.port", String.valueOf(port));
        // the metric fetcher caches for 10 s by default; its values are our sync condition
        conf.setString("metrics.fetcher.update-interval", "200");
        conf.setString("parallelism.default", a.get("parallelism"));
        conf.setString("pipeline.max-parallelism", a.get("max-parallelism"));
        Path io = work.resolve("io"); // RocksDB native libs extract here
        Files.createDirectories(io);
        conf.setString("io.tmp.dirs", io.toString());
        boolean successive = a.get("snapshot").equals("successive");
        if (successive) {
            // periodic incremental checkpoints (1.15 has no checkpoint trigger on request), all
            // kept: the one chosen per phase must outlive the later ones and the cancellation
            conf.setString("execution.checkpointing.interval", a.get("checkpoint-interval") + "ms");
            conf.setString("execution.checkpointing.externalized-checkpoint-retention",
                    "RETAIN_ON_CANCELLATION");
            conf.setString("state.backend.incremental", "true");
            conf.setString("state.checkpoints.num-retained", "10000");
        }
        for (String kv : extraConf) {
            int eq = kv.indexOf('=');
            conf.setString(kv.substring(0, eq), kv.substring(eq + 1));
        }

        StreamExecutionEnvironment env = StreamExecutionEnvironment.createLocalEnvironment(conf);
        StreamTableEnvironment tEnv = StreamTableEnvironment.create(env);
        String input = Paths.get(a.get("input")).toAbsolutePath().toUri().toString();
        tEnv.executeSql(
                "CREATE TABLE src (word STRING, amount BIGINT) WITH ("
                        + " 'connector' = 'filesystem', 'path' = '" + input + "',"
                        + " 'format' = 'csv',"
                        // continuous monitoring keeps the source (and the job) RUNNING
                        + " 'source.monitor-interval' = '1s')");
        tEnv.executeSql(
                "CREATE TABLE snk (word STRING, cnt BIGINT, total BIGINT)"
                        + " WITH ('connector' = 'blackhole')");
        TableResult result = tEnv.executeSql(
                "INSERT INTO snk SELECT word, COUNT(*) AS cnt, SUM(amount) AS total"
                        + " FROM src GROUP BY word");
        JobClient client = result.getJobClient().orElseThrow(IllegalStateException::new);
        String jobId = client.getJobID().toString();

        long timeoutMs = (long) (Double.parseDouble(a.get("timeout")) * 1000);
        if (successive) {
            successive(client, port, jobId, phases, Paths.get(a.get("input")), work, timeoutMs,
                    Paths.get(a.get("result")));
            System.exit(0);
        }
        try {
            waitForRecords(port, jobId, "GroupAggregate", records, timeoutMs);
        } catch (Exception e) {
            // Without a log configuration the task failure is not printed: attach it.
            try {
                client.getJobExecutionResult().get(10, TimeUnit.SECONDS);
            } catch (Exception cause) {
                e.addSuppressed(cause);
            }
            throw e;
        }

        String path = client.stopWithSavepoint(
                        false, work.resolve("savepoints").toUri().toString(),
                        SavepointFormatType.CANONICAL)
                .get(300, TimeUnit.SECONDS);
        if (path.startsWith("file:")) {
            path = Paths.get(java.net.URI.create(path)).toString();
        }
        Map<String, String> out = new LinkedHashMap<>();
        out.put("savepoint", path);
        out.put("job_id", jobId);
        Files.write(Paths.get(a.get("result")), JSON.writeValueAsBytes(out));
        // The local environment's MiniCluster threads are not all daemons.
        System.exit(0);
    }

    static void successive(JobClient client, int port, String jobId, List<String> phases,
            Path input, Path work, long timeoutMs, Path result) throws Exception {
        List<Map<String, Object>> done = new ArrayList<>();
        for (String spec : phases) {
            int colon = spec.lastIndexOf(':');
            Path staged = Paths.get(spec.substring(0, colon));
            long records = Long.parseLong(spec.substring(colon + 1));
            String name = staged.getFileName().toString();
            // one rename: the monitoring source sees the phase's files complete or not at all
            Files.move(staged, input.resolve(name));
            waitForRecords(port, jobId, "GroupAggregate", records, timeoutMs);
            long reachedAt = System.currentTimeMillis();
            JsonNode chk = waitForCheckpointAfter(port, jobId, reachedAt, timeoutMs);
            String savepoint = client.triggerSavepoint(
                            work.resolve("savepoints").resolve(name).toUri().toString(),
                            SavepointFormatType.CANONICAL)
                    .get(300, TimeUnit.SECONDS);
            Map<String, Object> ph = new LinkedHashMap<>();
            ph.put("phase", name);
            ph.put("checkpoint_id", chk.get("id").asLong());
            ph.put("checkpoint", localPath(chk.get("external_path").asText()));
            ph.put("savepoint", localPath(savepoint));
            done.add(ph);
        }
        client.cancel().get(300, TimeUnit.SECONDS);
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("job_id", jobId);
        out.put("phases", done);
        Files.write(result, JSON.writeValueAsBytes(out));
    }

    static String localPath(String path) {
        return path.startsWith("file:") ? Paths.get(java.net.URI.create(path)).toString() : path;
    }

    /** Polls /jobs/:id/checkpoints until the latest completed checkpoint was triggered after
     * `after` (epoch ms, the same clock as the JobManager's: one local JVM); returns it. */
    static JsonNode waitForCheckpointAfter(int port, String jobId, long after, long timeoutMs)
            throws Exception {
        long deadline = System.currentTimeMillis() + timeoutMs;
        String last = "nothing yet";
        while (System.currentTimeMillis() < deadline) {
            JsonNode latest = get(port, "/jobs/" + jobId + "/checkpoints").path("latest")
                    .path("completed");
            if (!latest.isMissingNode() && !latest.isNull()) {
                last = latest.toString();
                if (latest.get("trigger_timestamp").asLong() > after
                        && !latest.path("is_savepoint").asBoolean(false)) {
                    return latest;
                }
            }
            Thread.sleep(200);
        }
        throw new IllegalStateException("timed out waiting for a checkpoint triggered after "
                + after + "; last completed: " + last);
    }

    static int freePort() throws IOException {
        try (ServerSocket s = new ServerSocket(0, 1, java.net.InetAddress.getLoopbackAddress())) {
            return s.getLocalPort();
        }
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
                String state = job.get("state").asText();
                if (state.equals("FAILED") || state.equals("CANCELED")
                        || state.equals("FINISHED")) {
                    throw new IllegalStateException("job is " + state + " before the savepoint");
                }
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
