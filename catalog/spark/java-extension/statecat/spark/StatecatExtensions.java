package statecat.spark;

import org.apache.spark.sql.SparkSessionExtensions;

import scala.runtime.AbstractFunction1;
import scala.runtime.BoxedUnit;

/**
 * statecat's hook into a Spark session ({@code spark.sql.extensions=statecat.spark.StatecatExtensions}):
 * state tables of the {@code flinkstate} source are read as Arrow columns (see {@link ColumnarStateRule}).
 */
public final class StatecatExtensions extends AbstractFunction1<SparkSessionExtensions, BoxedUnit> {
    @Override
    public BoxedUnit apply(SparkSessionExtensions extensions) {
        extensions.injectPostHocResolutionRule(new AbstractFunction1<>() {
            @Override
            public ColumnarStateRule apply(org.apache.spark.sql.SparkSession session) {
                return new ColumnarStateRule(session);
            }
        });
        return BoxedUnit.UNIT;
    }
}
