package io.kstore.spark;

import java.util.Map;

import org.apache.spark.rdd.RDD;
import org.apache.spark.sql.Column;
import org.apache.spark.sql.DataFrameReader;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SQLContext;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.sources.BaseRelation;
import org.apache.spark.sql.sources.PrunedScan;
import org.apache.spark.sql.types.StructType;

/**
 * A pinned kstore version read through kstore's Python data source, for a version Spark's
 * Parquet scan cannot read exactly: one with a widened column (schema_mode="merge": files of
 * an older kind, such as int64 files of a double column, which Spark's Parquet reader does
 * not convert). The Python source converts each file with Arrow's safe cast and plans the
 * files itself; this relation hands it the options, the pinned version and the columns Spark
 * needs. Spark evaluates every filter after the scan.
 */
final class PythonSourceRelation extends BaseRelation implements PrunedScan {
    private final SQLContext context;
    private final StructType schema;
    private final String format;
    private final Map<String, String> options;

    PythonSourceRelation(SQLContext context, StructType schema, String format, Map<String, String> options) {
        this.context = context;
        this.schema = schema;
        this.format = format;
        this.options = options;
    }

    @Override
    public SQLContext sqlContext() { return context; }

    @Override
    public StructType schema() { return schema; }

    @Override
    public RDD<Row> buildScan(String[] requiredColumns) {
        DataFrameReader reader = context.sparkSession().read().format(format);
        for (Map.Entry<String, String> e : options.entrySet()) reader = reader.option(e.getKey(), e.getValue());
        Dataset<Row> df = reader.load();
        Column[] columns = new Column[requiredColumns.length];
        for (int i = 0; i < columns.length; i++) columns[i] = functions.col("`" + requiredColumns[i].replace("`", "``") + "`");
        return df.select(columns).rdd();
    }
}
