package io.kstore.spark;

import java.util.ArrayList;
import java.util.List;

import org.apache.hadoop.conf.Configuration;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.execution.datasources.PartitionedFile;
import org.apache.spark.sql.execution.datasources.parquet.ParquetFileFormat;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.StructType;

import scala.jdk.javaapi.CollectionConverters;

/**
 * Spark's Parquet format, without row-group skipping on float and double columns.
 *
 * <p>kstore's files are written by Arrow, whose Parquet statistics leave NaN out of min/max
 * (as the Parquet spec asks). Spark orders NaN above every number, so {@code x > 1.0} matches
 * a NaN row, while a row group whose max (NaN left out) is 0.5 looks like it holds no match:
 * Spark's own Parquet scan would drop that row. Spark still evaluates every filter on the rows
 * it reads, so not pushing a filter into the Parquet reader only costs skipping, never rows.
 * kstore's planner does not prune on floats either (see FilterConverter).
 */
public class KstoreParquetFormat extends ParquetFileFormat {
    @Override
    public scala.Function1<PartitionedFile, scala.collection.Iterator<InternalRow>> buildReaderWithPartitionValues(
            SparkSession sparkSession, StructType dataSchema, StructType partitionSchema, StructType requiredSchema,
            scala.collection.immutable.Seq<Filter> filters, scala.collection.immutable.Map<String, String> options,
            Configuration hadoopConf) {
        List<Filter> kept = new ArrayList<>();
        for (Filter f : CollectionConverters.asJava(filters)) {
            if (!onFloatingPoint(f, dataSchema)) kept.add(f);
        }
        return super.buildReaderWithPartitionValues(sparkSession, dataSchema, partitionSchema, requiredSchema,
            CollectionConverters.asScala(kept).toSeq(), options, hadoopConf);
    }

    private static boolean onFloatingPoint(Filter f, StructType schema) {
        for (String name : f.references()) {
            String top = name.contains(".") && !schema.getFieldIndex(name).isDefined() ? name.split("\\.")[0] : name;
            if (!schema.getFieldIndex(top).isDefined()) return true;  // unknown: do not push (safe)
            DataType type = schema.apply(top).dataType();
            if (type instanceof FloatType || type instanceof DoubleType) return true;
        }
        return false;
    }

    @Override
    public String toString() { return "Parquet (kstore)"; }
}
