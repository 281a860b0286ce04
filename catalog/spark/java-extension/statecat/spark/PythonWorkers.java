package statecat.spark;

import java.io.BufferedOutputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.Channels;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

import org.apache.spark.SparkEnv;
import org.apache.spark.api.python.PythonWorker;

/**
 * statecat's Python workers: Spark's own pyspark.daemon running statecat's worker module
 * (catalog/spark/columnar_worker.py, imported as pyspark_statecat.columnar because the daemon only
 * imports modules named pyspark*). Workers are reused across requests, so imports, compiled
 * decoders and cached StateMeta stay warm.
 *
 * <p>A request is an int32 op code and int32-length-prefixed blobs (big-endian); a reply ends with
 * STATUS_OK or with STATUS_ERROR and the Python error's text.
 */
final class PythonWorkers {
    static final String WORKER_MODULE = "pyspark_statecat.columnar";
    static final String DAEMON_MODULE = "pyspark.daemon";
    static final int OP_PLAN = 1;
    static final int OP_READ = 2;
    static final int STATUS_OK = 0x5C0FFEE0;
    static final int STATUS_ERROR = 0x5C0FFEE1;
    /** Most partitions a plan may name; a longer count means the stream is not a plan reply. */
    static final int MAX_PARTITIONS = 1 << 20;

    private PythonWorkers() {
    }

    /** The interpreter Spark's own Python workers use. */
    static String pythonExec() {
        String configured = SparkEnv.get().conf().get("spark.pyspark.python", null);
        if (configured == null) {
            configured = System.getenv("PYSPARK_PYTHON");
        }
        return configured != null ? configured : "python3";
    }

    /**
     * The workers' environment. glibc's malloc would hand each batch's arrays fresh pages from the
     * kernel (mmap above a threshold, trimmed on free): 10-15 % of a worker's CPU. These workers are
     * statecat's alone, so their heap keeps up to 64 MB of freed memory for the next batch instead.
     */
    static scala.collection.immutable.Map<String, String> env() {
        scala.collection.immutable.Map<String, String> env = scala.collection.immutable.Map$.MODULE$.empty();
        env = env.updated("SPARK_REUSE_WORKER", "1");
        env = env.updated("MALLOC_MMAP_THRESHOLD_", String.valueOf(32 << 20));
        return env.updated("MALLOC_TRIM_THRESHOLD_", String.valueOf(64 << 20));
    }

    /** A worker and blocking streams over its socket. */
    static final class Lease implements AutoCloseable {
        final String python;
        final PythonWorker worker;
        final DataOutputStream out;
        /** Replies are read from the socket itself, unbuffered: the Arrow stream reader reads its
         *  batches straight into Arrow's buffers, with no copy through a stream's byte arrays. */
        final SocketChannel in;
        private final ByteBuffer word = ByteBuffer.allocate(4);
        private boolean clean;

        Lease(String python) throws IOException {
            this.python = python;
            this.worker = SparkEnv.get().createPythonWorker(python, WORKER_MODULE, DAEMON_MODULE, env(), true)._1();
            SocketChannel channel = worker.channel();
            // The factory hands the channel over non-blocking, registered with the worker's selector:
            // drop that registration to use plain blocking streams (a released worker gets a fresh one).
            if (worker.selectionKey() != null) {
                worker.selectionKey().cancel();
            }
            if (worker.selector() != null) {
                worker.selector().close();
            }
            channel.configureBlocking(true);
            this.out = new DataOutputStream(new BufferedOutputStream(Channels.newOutputStream(channel), 1 << 16));
            this.in = channel;
        }

        private void fill(ByteBuffer buffer, String what) throws IOException {
            while (buffer.hasRemaining()) {
                if (in.read(buffer) < 0) {
                    throw new EOFException("statecat Python worker: the reply ended before " + what);
                }
            }
        }

        int readInt(String what) throws IOException {
            word.clear();
            fill(word, what);
            return word.getInt(0); // big-endian, as the worker writes
        }

        void writeBlob(byte[] blob) throws IOException {
            out.writeInt(blob.length);
            out.write(blob);
        }

        byte[] readBlob(String what) throws IOException {
            int length = readInt("the length of " + what);
            if (length < 0) {
                throw new IOException("statecat Python worker: expected the length of " + what + ", got " + length);
            }
            byte[] blob = new byte[length];
            fill(ByteBuffer.wrap(blob), what);
            return blob;
        }

        /** Reads a status of the reply; throws with the Python error's text unless it is OK. After the
         *  reply's last status the worker is free for another request. */
        void expectOk(boolean last) throws IOException {
            int status = readInt("a status");
            if (status == STATUS_OK) {
                clean = last;
                return;
            }
            if (status == STATUS_ERROR) {
                throw new StatecatPythonException(new String(readBlob("an error message"), StandardCharsets.UTF_8));
            }
            throw new IOException("statecat Python worker: expected a status, got 0x" + Integer.toHexString(status));
        }

        /** Returns a worker that finished its request for reuse; any other is ended. */
        @Override
        public void close() {
            try {
                if (clean) {
                    worker.channel().configureBlocking(false);
                    SparkEnv.get().releasePythonWorker(python, WORKER_MODULE, DAEMON_MODULE, env(), worker);
                } else {
                    SparkEnv.get().destroyPythonWorker(python, WORKER_MODULE, DAEMON_MODULE, env(), worker);
                }
            } catch (IOException | RuntimeException e) {
                // the request's outcome stands; a worker that cannot be released is just not reused
            }
        }
    }

    /** Plans a scan in Python, on the driver: the pickled reader and partitions. */
    static ColumnarStateTable.PythonPlan plan(String schema, String options, String filters, String readSchema) {
        try (Lease lease = new Lease(pythonExec())) {
            lease.out.writeInt(OP_PLAN);
            for (String blob : new String[] {schema, options, filters, readSchema}) {
                lease.writeBlob(blob.getBytes(StandardCharsets.UTF_8));
            }
            lease.out.flush();
            lease.expectOk(false);
            byte[] reader = lease.readBlob("the pickled reader");
            int count = lease.readInt("the partition count");
            if (count < 0 || count > MAX_PARTITIONS) {
                throw new IOException("statecat Python worker: expected at most " + MAX_PARTITIONS + " partitions, got " + count);
            }
            List<byte[]> partitions = new ArrayList<>(count);
            for (int i = 0; i < count; i++) {
                partitions.add(lease.readBlob("a pickled partition"));
            }
            lease.expectOk(true);
            return new ColumnarStateTable.PythonPlan(reader, partitions);
        } catch (IOException e) {
            throw new StatecatPythonException("statecat could not plan the scan in its Python worker: " + e);
        }
    }
}
