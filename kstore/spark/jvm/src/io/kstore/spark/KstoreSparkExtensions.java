package io.kstore.spark;

import org.apache.spark.sql.SparkSessionExtensions;

import scala.runtime.BoxedUnit;

/**
 * {@code spark.sql.extensions=io.kstore.spark.KstoreSparkExtensions} (what
 * {@code kstore.spark.configure} sets): SQL on a dataset path, {@code kstore.`/store/dataset`},
 * with {@code VERSION AS OF} / {@code TIMESTAMP AS OF}.
 */
public class KstoreSparkExtensions implements scala.Function1<SparkSessionExtensions, BoxedUnit> {
    @Override
    public BoxedUnit apply(SparkSessionExtensions extensions) {
        extensions.injectParser((session, delegate) -> KstoreSqlParser.wrap(session, delegate));
        return BoxedUnit.UNIT;
    }
}
