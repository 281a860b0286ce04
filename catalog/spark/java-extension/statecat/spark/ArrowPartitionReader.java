package statecat.spark;

import java.io.IOException;

import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.ValueVector;
import org.apache.arrow.vector.complex.StructVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ArrowStreamReader;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.vectorized.ArrowColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/** One task: a statecat Python worker's Arrow IPC stream of one partition, as ColumnarBatches. */
final class ArrowPartitionReader implements PartitionReader<ColumnarBatch> {
    static final class Factory implements PartitionReaderFactory {
        final byte[] reader;
        final String python;

        Factory(byte[] reader, String python) {
            this.reader = reader;
            this.python = python;
        }

        @Override
        public boolean supportColumnarReads(InputPartition partition) {
            return true;
        }

        @Override
        public PartitionReader<InternalRow> createReader(InputPartition partition) {
            throw new UnsupportedOperationException("statecat's state scans are columnar only");
        }

        @Override
        public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
            try {
                return new ArrowPartitionReader(this, ((ColumnarStateTable.PicklePartition) partition).pickled);
            } catch (IOException e) {
                throw new StatecatPythonException("statecat could not start its Python worker: " + e);
            }
        }
    }

    /**
     * A column over a vector the stream reader owns: Spark's ColumnarToRow calls closeIfFreeable() on
     * each batch it has consumed, which for an ArrowColumnVector frees the vector (a struct forgets its
     * children) that the next batch is loaded into. The stream frees it at close().
     *
     * Spark asks every nullable column (and struct field) isNullAt for every row; through Arrow that
     * is a bounds-checked read of the validity bitmap, a third of the JVM's time in a scan. State
     * columns are rarely null, so a batch with no nulls answers without reading (null counts are
     * counted again for each batch the vector is loaded with).
     */
    static final class BorrowedVector extends ArrowColumnVector {
        private final ValueVector vector;
        private final BorrowedVector[] fields;
        private boolean mayHaveNulls = true;

        BorrowedVector(ValueVector vector) {
            super(vector);
            this.vector = vector;
            if (vector instanceof StructVector struct) {
                fields = new BorrowedVector[struct.size()];
                for (int i = 0; i < fields.length; i++) {
                    fields[i] = new BorrowedVector(struct.getChildByOrdinal(i));
                }
            } else {
                fields = null;
            }
        }

        /** Called after each batch is loaded into the vector. */
        void batchLoaded() {
            mayHaveNulls = vector.getNullCount() > 0;
            if (fields != null) {
                for (BorrowedVector field : fields) {
                    field.batchLoaded();
                }
            }
        }

        @Override
        public boolean isNullAt(int rowId) {
            return mayHaveNulls && super.isNullAt(rowId);
        }

        @Override
        public ArrowColumnVector getChild(int ordinal) {
            return fields != null ? fields[ordinal] : super.getChild(ordinal);
        }

        @Override
        public void closeIfFreeable() {
        }
    }

    private final PythonWorkers.Lease lease;
    private final BufferAllocator allocator;
    private final ArrowStreamReader stream;
    private BorrowedVector[] columns;
    private ColumnarBatch batch;
    private boolean closed;

    ArrowPartitionReader(Factory factory, byte[] partition) throws IOException {
        this.lease = new PythonWorkers.Lease(factory.python);
        try {
            lease.out.writeInt(PythonWorkers.OP_READ);
            lease.writeBlob(factory.reader);
            lease.writeBlob(partition);
            lease.out.flush();
            lease.expectOk(false); // the partition's stream follows
        } catch (IOException | RuntimeException e) {
            lease.close(); // not released for reuse: its request did not finish
            throw e;
        }
        this.allocator = new RootAllocator(Long.MAX_VALUE);
        this.stream = new ArrowStreamReader(lease.in, allocator); // Spark's DataSourceRDD closes us at task end
    }

    @Override
    public boolean next() throws IOException {
        if (stream.loadNextBatch()) {
            VectorSchemaRoot root = stream.getVectorSchemaRoot();
            if (batch == null) {
                columns = new BorrowedVector[root.getFieldVectors().size()];
                int i = 0;
                for (FieldVector vector : root.getFieldVectors()) {
                    columns[i++] = new BorrowedVector(vector);
                }
                batch = new ColumnarBatch(columns);
            }
            for (BorrowedVector column : columns) {
                column.batchLoaded();
            }
            batch.setNumRows(root.getRowCount());
            return true;
        }
        // The worker always closes the stream (also when read() failed half way); the status says how it ended.
        lease.expectOk(true);
        return false;
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
            lease.close();
        }
    }
}
