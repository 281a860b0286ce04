package statecat.spark;

import java.util.Locale;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation;
import org.apache.spark.sql.execution.datasources.v2.python.PythonTable;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

import scala.Function1;
import scala.runtime.AbstractPartialFunction;

/**
 * Swaps the relation of a {@code flinkstate} state table (one keyed or operator state) for a
 * {@link ColumnarStateTable}: the same Python planning and decoding, but Spark gets the decoded
 * Arrow batches as columns, and only the columns a query reads, instead of one row at a time.
 * Other flinkstate tables (state_meta, operator tables, the catalog views) stay Spark's Python
 * data source. {@code spark.statecat.columnar.enabled=false} turns the swap off for a session.
 */
public final class ColumnarStateRule extends Rule<LogicalPlan> {
    public static final String ENABLED = "spark.statecat.columnar.enabled";
    static final String SOURCE_NAME = "flinkstate";
    /** The first column's metadata key holding a catalog table's TableRef (catalog/spark/tables.py). */
    static final String REF_METADATA_KEY = "statecat.table";
    private static final ObjectMapper JSON = new ObjectMapper();

    private final SparkSession session;

    public ColumnarStateRule(SparkSession session) {
        this.session = session;
    }

    @Override
    public LogicalPlan apply(LogicalPlan plan) {
        if (!"true".equalsIgnoreCase(session.conf().get(ENABLED, "true"))) {
            return plan;
        }
        return plan.transformUp(new AbstractPartialFunction<LogicalPlan, LogicalPlan>() {
            @Override
            public boolean isDefinedAt(LogicalPlan node) {
                return node instanceof DataSourceV2Relation relation && isStateTable(relation);
            }

            @Override
            public <A1 extends LogicalPlan, B1> B1 applyOrElse(A1 node, Function1<A1, B1> otherwise) {
                if (node instanceof DataSourceV2Relation relation && isStateTable(relation)) {
                    @SuppressWarnings("unchecked")
                    B1 swapped = (B1) relation.copy(new ColumnarStateTable(relation.table().schema(),
                            relation.options(), relation.table().name()), relation.output(), relation.catalog(),
                            relation.identifier(), relation.options(), relation.timeTravelSpec());
                    return swapped;
                }
                return otherwise.apply(node);
            }
        });
    }

    static boolean isStateTable(DataSourceV2Relation relation) {
        Table table = relation.table();
        if (!(table instanceof PythonTable) || !SOURCE_NAME.equalsIgnoreCase(table.name())) {
            return false;
        }
        String kind = kindFromSchema(table.schema());
        return "state".equals(kind != null ? kind : kindFromOptions(relation.options()));
    }

    private static String kindFromSchema(StructType schema) {
        if (schema.fields().length == 0 || !schema.fields()[0].metadata().contains(REF_METADATA_KEY)) {
            return null;
        }
        try {
            JsonNode ref = JSON.readTree(schema.fields()[0].metadata().getString(REF_METADATA_KEY));
            return ref.path("kind").asText(null);
        } catch (Exception e) {
            return null; // not statecat's metadata: leave the table to the Python source
        }
    }

    /** spark.read.format("flinkstate").option("path", ...).option("state", ...): as ref_from_options. */
    private static String kindFromOptions(CaseInsensitiveStringMap options) {
        if (!options.containsKey("path") && !options.containsKey("savepoint")) {
            return null;
        }
        String table = options.get("table");
        if (table != null) {
            return table.toLowerCase(Locale.ROOT);
        }
        return options.containsKey("state") ? "state" : null;
    }
}
