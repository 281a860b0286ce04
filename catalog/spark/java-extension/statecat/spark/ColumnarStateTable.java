package statecat.spark;

import java.util.ArrayList;
import java.util.EnumSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownFilters;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.sources.EqualTo;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.sources.In;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A flinkstate state table read as columns. Planning (the source's key pushdown and its partitions)
 * is the Python source's own, run by a statecat Python worker on the driver; each task asks a
 * worker for its partition's Arrow stream (see {@link ArrowPartitionReader}).
 */
final class ColumnarStateTable implements Table, SupportsRead {
    private static final ObjectMapper JSON = new ObjectMapper();

    private final StructType schema;
    private final CaseInsensitiveStringMap options;
    private final String name;

    ColumnarStateTable(StructType schema, CaseInsensitiveStringMap options, String name) {
        this.schema = schema;
        this.options = options;
        this.name = name;
    }

    @Override
    public String name() {
        return name;
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
        return new Builder();
    }

    final class Builder implements ScanBuilder, SupportsPushDownFilters, SupportsPushDownRequiredColumns {
        private StructType required = schema;
        private Filter[] pushed = new Filter[0];

        /** Equality and IN on a column go to the Python source, which prunes key-groups with them;
         *  Spark still evaluates every filter (pushdown only prunes), so all are returned. */
        @Override
        public Filter[] pushFilters(Filter[] filters) {
            List<Filter> offered = new ArrayList<>();
            for (Filter filter : filters) {
                if (filter instanceof EqualTo || filter instanceof In) {
                    offered.add(filter);
                }
            }
            pushed = offered.toArray(new Filter[0]);
            return filters;
        }

        @Override
        public Filter[] pushedFilters() {
            return pushed;
        }

        @Override
        public void pruneColumns(StructType requiredSchema) {
            required = requiredSchema;
        }

        @Override
        public Scan build() {
            return new StateScan(required, filtersJson(pushed));
        }
    }

    /** [{"op": "EqualTo"|"In", "column": name, "values": [...]}]; literals JSON cannot hold are left out. */
    static String filtersJson(Filter[] filters) {
        ArrayNode out = JSON.createArrayNode();
        for (Filter filter : filters) {
            String column;
            Object[] values;
            if (filter instanceof EqualTo equal) {
                column = equal.attribute();
                values = new Object[] {equal.value()};
            } else if (filter instanceof In in) {
                column = in.attribute();
                values = in.values();
            } else {
                continue;
            }
            ArrayNode literals = JSON.createArrayNode();
            boolean scalar = true;
            for (Object value : values) {
                if (value == null) {
                    literals.addNull();
                } else if (value instanceof String text) {
                    literals.add(text);
                } else if (value instanceof Boolean bool) {
                    literals.add(bool);
                } else if (value instanceof Long || value instanceof Integer || value instanceof Short || value instanceof Byte) {
                    literals.add(((Number) value).longValue());
                } else if (value instanceof Double || value instanceof Float) {
                    literals.add(((Number) value).doubleValue());
                } else {
                    scalar = false; // dates, decimals, structs: Spark filters those rows itself
                }
            }
            if (scalar) {
                ObjectNode node = out.addObject();
                node.put("op", filter instanceof EqualTo ? "EqualTo" : "In");
                node.put("column", column);
                node.set("values", literals);
            }
        }
        return out.toString();
    }

    final class StateScan implements Scan, Batch {
        private final StructType readSchema;
        private final String filters;
        private PythonPlan plan;

        StateScan(StructType readSchema, String filters) {
            this.readSchema = readSchema;
            this.filters = filters;
        }

        @Override
        public StructType readSchema() {
            return readSchema;
        }

        @Override
        public String description() {
            return "statecat columnar scan of " + name + (filters.equals("[]") ? "" : ", pushed " + filters);
        }

        @Override
        public Batch toBatch() {
            return this;
        }

        @Override
        public ColumnarSupportMode columnarSupportMode() {
            return ColumnarSupportMode.SUPPORTED;
        }

        private synchronized PythonPlan plan() {
            if (plan == null) {
                Map<String, String> copy = options.asCaseSensitiveMap();
                plan = PythonWorkers.plan(schema.json(), JSON.valueToTree(copy).toString(), filters, readSchema.json());
            }
            return plan;
        }

        @Override
        public InputPartition[] planInputPartitions() {
            List<byte[]> partitions = plan().partitions();
            InputPartition[] out = new InputPartition[partitions.size()];
            for (int i = 0; i < out.length; i++) {
                out[i] = new PicklePartition(partitions.get(i));
            }
            return out;
        }

        @Override
        public PartitionReaderFactory createReaderFactory() {
            return new ArrowPartitionReader.Factory(plan().reader(), PythonWorkers.pythonExec());
        }
    }

    /** One task: a partition object statecat's Python planner made, pickled. */
    static final class PicklePartition implements InputPartition {
        final byte[] pickled;

        PicklePartition(byte[] pickled) {
            this.pickled = pickled;
        }
    }

    /** What the Python planner returns: the pickled reader (its read schema's projection included) and partitions. */
    record PythonPlan(byte[] reader, List<byte[]> partitions) {
    }
}
