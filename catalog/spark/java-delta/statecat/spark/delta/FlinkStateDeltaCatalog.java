package statecat.spark.delta;

import java.util.HashMap;
import java.util.Map;

import org.apache.spark.sql.catalyst.catalog.CatalogTable;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.catalog.V1Table;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.delta.catalog.DeltaCatalog;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Utils;
import org.apache.spark.sql.internal.SQLConf;

import scala.Option;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Delta's session catalog, which also loads {@code flinkstate} tables through statecat's data source.
 *
 * <p>Spark's own session catalog loads a table of a DataSource V2 provider (as Spark's Python data
 * sources are) through that provider, but not once a custom session catalog is set, as Delta's
 * must be: it hands back a V1 table, which Spark then fails to read ("flinkstate is not a valid
 * Spark SQL Data Source"). This catalog does for {@code flinkstate} tables what Spark's does when
 * there is no custom catalog; every other table, Delta's included, is Delta's catalog's answer.
 */
public class FlinkStateDeltaCatalog extends DeltaCatalog {
    static final String SOURCE_NAME = "flinkstate";

    @Override
    public Table loadTable(Identifier ident) {
        Table table = super.loadTable(ident);
        if (!(table instanceof V1Table v1)) {
            return table;
        }
        CatalogTable meta = v1.v1Table();
        if (meta.provider().isEmpty() || !SOURCE_NAME.equalsIgnoreCase(meta.provider().get())) {
            return table;
        }
        Option<TableProvider> provider = DataSourceV2Utils.getTableProvider(SOURCE_NAME, SQLConf.get());
        if (provider.isEmpty()) {
            return table; // statecat's source not registered in this session: Spark says so as before
        }
        Map<String, String> options = new HashMap<>(CollectionConverters.asJava(meta.storage().properties()));
        // The table's schema (whose first column's metadata says what it reads) as Spark's catalog passes it.
        return provider.get().getTable(meta.schema(), new Transform[0], options);
    }
}
