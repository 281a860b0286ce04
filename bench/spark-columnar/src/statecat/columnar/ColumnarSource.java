package statecat.columnar;

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.Serializable;
import java.nio.channels.Channels;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.EnumSet;
import java.util.Map;
import java.util.Set;

import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ArrowStreamReader;
import org.apache.spark.SparkEnv;
import org.apache.spark.api.python.PythonWorker;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.sql.vectorized.ArrowColumnVector;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * Prototype: a DataSource V2 that hands statecat's Arrow batches to Spark as ColumnarBatches.
 *
 * <p>Options (all set by bench/bench_columnar.py, which plans on the driver in Python):
 * schema (StructType JSON), reader (base64 pickled FlinkStateReader), partitions (base64 pickled
 * partitions, comma separated), python (executable), pythonpath (where the worker module lives).
 * Each task asks a reused pyspark.daemon worker (module pyspark_statecat_columnar_proto) for its
 * partition and wraps the Arrow IPC stream's vectors, without turning rows into UnsafeRows.
 */
public final class ColumnarSource implements TableProvider {
    static final String WORKER_MODULE = "pyspark_statecat_columnar_proto";
    static final int STATUS_OK = 0x5C0FFEE0;
    static final int STATUS_ERROR = 0x5C0FFEE1;
    /** Python CPU ns of the requests this JVM served (local mode: the bench reads it through py4j). */
    static final java.util.concurrent.atomic.AtomicLong PYTHON_CPU_NS = new java.util.concurrent.atomic.AtomicLong();

    public static long pythonCpuNs() {
        return PYTHON_CPU_NS.get();
    }

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        String json = options.get("schema");
        if (json == null) {
            throw new IllegalArgumentException("option 'schema' (a StructType as JSON) is missing");
        }
        return (StructType) DataType.fromJson(json);
    }

    @Override
    public boolean supportsExternalMetadata() {
        return true;
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        return new StateTable(schema, new CaseInsensitiveStringMap(properties));
    }

    static final class StateTable implements Table, SupportsRead {
        private final StructType schema;
        private final CaseInsensitiveStringMap options;

        StateTable(StructType schema, CaseInsensitiveStringMap options) {
            this.schema = schema;
            this.options = options;
        }

        @Override
        public String name() {
            return "statecat_columnar_proto";
        }

        @Override
        public StructType schema() {
            return schema;
        }

        @Override
        public Set<TableCapability> capabilities() {
            return EnumSet.of(TableCapability.BATCH_READ);
        }

        @Override
        public ScanBuilder newScanBuilder(CaseInsensitiveStringMap scanOptions) {
            return new PruningScanBuilder(schema, options);
        }
    }

    /** Spark names the columns (and struct fields) a query reads; the Python worker sends only those. */
    static final class PruningScanBuilder implements ScanBuilder, SupportsPushDownRequiredColumns {
        private StructType required;
        private final CaseInsensitiveStringMap options;

        PruningScanBuilder(StructType schema, CaseInsensitiveStringMap options) {
            this.required = schema;
            this.options = options;
        }

        @Override
        public void pruneColumns(StructType requiredSchema) {
            if (!"false".equalsIgnoreCase(options.getOrDefault("prune", "true"))) {
                required = requiredSchema;
            }
        }

        @Override
        public Scan build() {
            return new StateScan(required, options);
        }
    }

    static final class StateScan implements Scan, Batch {
        private final StructType schema;
        private final CaseInsensitiveStringMap options;

        StateScan(StructType schema, CaseInsensitiveStringMap options) {
            this.schema = schema;
            this.options = options;
        }

        @Override
        public StructType readSchema() {
            return schema;
        }

        @Override
        public Batch toBatch() {
            return this;
        }

        @Override
        public ColumnarSupportMode columnarSupportMode() {
            return ColumnarSupportMode.SUPPORTED;
        }

        @Override
        public InputPartition[] planInputPartitions() {
            String all = options.getOrDefault("partitions", "");
            if (all.isEmpty()) {
                return new InputPartition[0];
            }
            String[] encoded = all.split(",");
            InputPartition[] parts = new InputPartition[encoded.length];
            for (int i = 0; i < encoded.length; i++) {
                parts[i] = new PicklePartition(Base64.getDecoder().decode(encoded[i]));
            }
            return parts;
        }

        @Override
        public PartitionReaderFactory createReaderFactory() {
            return new ReaderFactory(Base64.getDecoder().decode(options.get("reader")),
                    schema.json().getBytes(StandardCharsets.UTF_8),
                    options.getOrDefault("python", "python3"), options.getOrDefault("pythonpath", ""),
                    options.getOrDefault("replay", ""));
        }
    }

    /** One task: the pickled partition object statecat's Python planner made. */
    static final class PicklePartition implements InputPartition {
        final byte[] pickled;

        PicklePartition(byte[] pickled) {
            this.pickled = pickled;
        }
    }

    static final class ReaderFactory implements PartitionReaderFactory {
        final byte[] reader;
        final byte[] columns; // the read schema as JSON: the worker projects each batch to it (empty: all)
        final String python;
        final String pythonPath;
        // Measuring only: a directory where the workers keep each partition's first reply and resend it.
        final String replay;

        ReaderFactory(byte[] reader, byte[] columns, String python, String pythonPath, String replay) {
            this.reader = reader;
            this.columns = columns;
            this.replay = replay;
            this.python = python;
            this.pythonPath = pythonPath;
        }

        @Override
        public boolean supportColumnarReads(InputPartition partition) {
            return true;
        }

        @Override
        public PartitionReader<InternalRow> createReader(InputPartition partition) {
            throw new UnsupportedOperationException("columnar reads only");
        }

        @Override
        public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
            try {
                return new ArrowReader(this, ((PicklePartition) partition).pickled);
            } catch (IOException e) {
                throw new RuntimeException("cannot start the statecat Python worker: " + e, e);
            }
        }

        scala.collection.immutable.Map<String, String> envVars() {
            scala.collection.immutable.Map<String, String> env = scala.collection.immutable.Map$.MODULE$.empty();
            env = env.updated("PYTHONPATH", pythonPath);
            env = env.updated("SPARK_REUSE_WORKER", "1");
            if (!replay.isEmpty()) {
                env = env.updated("STATECAT_COLUMNAR_REPLAY", replay);
            }
            return env;
        }
    }

    /**
     * A column over a vector the stream reader owns: Spark 4.2's ColumnarToRow calls
     * closeIfFreeable() on each batch it has consumed, which for an ArrowColumnVector frees the vector
     * (a struct forgets its children) that the next batch is loaded into. The stream frees it at close().
     */
    static final class BorrowedVector extends ArrowColumnVector {
        BorrowedVector(FieldVector vector) {
            super(vector);
        }

        @Override
        public void closeIfFreeable() {
        }
    }

    /** Reads one partition's Arrow IPC stream; the vectors stay valid until the next batch or close(). */
    static final class ArrowReader implements PartitionReader<ColumnarBatch> {
        private final ReaderFactory factory;
        private final scala.collection.immutable.Map<String, String> env;
        private final PythonWorker worker;
        private final DataInputStream in;
        private final BufferAllocator allocator;
        private final ArrowStreamReader stream;
        private ColumnarBatch batch;
        private boolean clean;
        private boolean closed;

        ArrowReader(ReaderFactory factory, byte[] partition) throws IOException {
            this.factory = factory;
            this.env = factory.envVars();
            scala.Tuple2<PythonWorker, scala.Option<ProcessHandle>> created =
                    SparkEnv.get().createPythonWorker(factory.python, WORKER_MODULE, "pyspark.daemon", env, true);
            this.worker = created._1();
            SocketChannel channel = worker.channel();
            // The factory hands the channel over non-blocking, registered with the worker's selector:
            // drop that registration to use plain blocking streams (released workers get a fresh one).
            if (worker.selectionKey() != null) {
                worker.selectionKey().cancel();
            }
            if (worker.selector() != null) {
                worker.selector().close();
            }
            channel.configureBlocking(true);
            DataOutputStream out = new DataOutputStream(new BufferedOutputStream(Channels.newOutputStream(channel)));
            out.writeInt(factory.reader.length);
            out.write(factory.reader);
            out.writeInt(partition.length);
            out.write(partition);
            out.writeInt(factory.columns.length);
            out.write(factory.columns);
            out.flush();
            this.in = new DataInputStream(new BufferedInputStream(Channels.newInputStream(channel), 1 << 16));
            this.allocator = new RootAllocator(Long.MAX_VALUE);
            this.stream = new ArrowStreamReader(in, allocator);  // Spark's DataSourceRDD closes us at task end
        }

        @Override
        public boolean next() throws IOException {
            if (stream.loadNextBatch()) {
                VectorSchemaRoot root = stream.getVectorSchemaRoot();
                if (batch == null) {
                    ColumnVector[] columns = new ColumnVector[root.getFieldVectors().size()];
                    int i = 0;
                    for (FieldVector vector : root.getFieldVectors()) {
                        columns[i++] = new BorrowedVector(vector);
                    }
                    batch = new ColumnarBatch(columns);
                }
                batch.setNumRows(root.getRowCount());
                return true;
            }
            int status = in.readInt();
            if (status == STATUS_OK) {
                PYTHON_CPU_NS.addAndGet(in.readLong());
                clean = true;
                return false;
            }
            if (status == STATUS_ERROR) {
                byte[] message = new byte[in.readInt()];
                in.readFully(message);
                throw new IOException("statecat read failed in Python: " + new String(message, StandardCharsets.UTF_8));
            }
            throw new IOException("statecat Python worker: bad status 0x" + Integer.toHexString(status));
        }

        @Override
        public ColumnarBatch get() {
            return batch;
        }

        @Override
        public void close() throws IOException {
            if (closed) {
                return;
            }
            closed = true;
            try {
                stream.close(false); // frees the vectors; the socket stays the worker's
            } finally {
                allocator.close();
                try {
                    if (clean) {
                        worker.channel().configureBlocking(false);
                        SparkEnv.get().releasePythonWorker(factory.python, WORKER_MODULE, "pyspark.daemon", env, worker);
                    } else {
                        SparkEnv.get().destroyPythonWorker(factory.python, WORKER_MODULE, "pyspark.daemon", env, worker);
                    }
                } catch (RuntimeException e) {
                    // the task's outcome stands; a worker that cannot be released is just not reused
                }
            }
        }
    }
}
