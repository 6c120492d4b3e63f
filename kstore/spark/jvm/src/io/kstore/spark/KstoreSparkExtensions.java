package io.kstore.spark;

import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.execution.datasources.InsertIntoHadoopFsRelationCommand;

import scala.runtime.BoxedUnit;

/**
 * {@code spark.sql.extensions=io.kstore.spark.KstoreSparkExtensions} (what
 * {@code kstore.spark.configure} sets): SQL on a dataset path, {@code kstore.`/store/dataset`},
 * with {@code VERSION AS OF} / {@code TIMESTAMP AS OF}; and a check that refuses Spark's file
 * insert ({@code INSERT INTO} / {@code INSERT OVERWRITE} of a table {@code USING kstore}).
 */
public class KstoreSparkExtensions implements scala.Function1<SparkSessionExtensions, BoxedUnit> {
    @Override
    public BoxedUnit apply(SparkSessionExtensions extensions) {
        extensions.injectParser((session, delegate) -> KstoreSqlParser.wrap(session, delegate));
        extensions.injectCheckRule(session -> plan -> {
            if (plan instanceof InsertIntoHadoopFsRelationCommand insert
                    && insert.fileFormat() instanceof KstoreParquetFormat) {
                // Spark's file insert would write Parquet files kstore never commits (or, with
                // OVERWRITE, delete the dataset's files): kstore writes through its own source
                throw new IllegalArgumentException(
                    "kstore.errors.InvalidArgumentError: INSERT INTO / INSERT OVERWRITE of a kstore dataset is not "
                    + "supported by Spark's file insert; write with df.write.format('kstore').mode('append' | "
                    + "'overwrite').save('<store>/<dataset>') (one kstore commit)");
            }
            return BoxedUnit.UNIT;
        });
        return BoxedUnit.UNIT;
    }
}
