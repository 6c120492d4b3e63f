package io.kstore.spark;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SQLContext;
import org.apache.spark.sql.SaveMode;
import org.apache.spark.sql.execution.datasources.HadoopFsRelation;
import org.apache.spark.sql.sources.BaseRelation;
import org.apache.spark.sql.sources.CreatableRelationProvider;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.sources.RelationProvider;
import org.apache.spark.sql.sources.StreamSinkProvider;
import org.apache.spark.sql.sources.StreamSourceProvider;
import org.apache.spark.sql.execution.streaming.Source;
import org.apache.spark.sql.execution.streaming.Sink;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

import scala.Option;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The {@code kstore} data source on the JVM: a HadoopFsRelation over the files of one pinned
 * kstore version (Spark's own Parquet scan), planned by kstore's Python planner through py4j.
 */
public class DefaultSource implements DataSourceRegister, RelationProvider, CreatableRelationProvider,
        StreamSinkProvider, StreamSourceProvider {
    private static final ObjectMapper JSON = new ObjectMapper();

    @Override
    public String shortName() { return "kstore"; }

    private static Map<String, String> javaOptions(scala.collection.immutable.Map<String, String> params) {
        return new HashMap<>(CollectionConverters.asJava(params));
    }

    @Override
    public BaseRelation createRelation(SQLContext sqlContext, scala.collection.immutable.Map<String, String> params) {
        try {
            String options = JSON.writeValueAsString(javaOptions(params));
            String resolved = KstoreBridge.call(p -> p.resolve(options));
            JsonNode r = JSON.readTree(resolved);
            StructType schema = (StructType) DataType.fromJson(r.get("schema").asText());
            if (r.hasNonNull("python_read")) {
                // a version Spark's Parquet scan cannot read exactly (a widened column): the
                // Python source reads it, pinned to the version resolved here
                Map<String, String> pinned = JSON.convertValue(r.get("python_read"),
                    JSON.getTypeFactory().constructMapType(HashMap.class, String.class, String.class));
                return new PythonSourceRelation(sqlContext, schema, r.get("python_source").asText(), pinned);
            }
            List<String> partitionColumns = JSON.convertValue(r.get("partition_columns"),
                JSON.getTypeFactory().constructCollectionType(List.class, String.class));
            StructField[] pfields = new StructField[partitionColumns.size()];
            for (int i = 0; i < pfields.length; i++) pfields[i] = schema.apply(partitionColumns.get(i));
            StructType partitionSchema = new StructType(pfields);
            KstoreFileIndex index = new KstoreFileIndex(r.get("handle").toString(), new Path(r.get("root").asText()),
                schema, partitionSchema, r.get("size").asLong(), r.get("version").asLong());
            // dataSchema is the whole schema: HadoopFsRelation keeps its column order and takes
            // the partition columns' values from the index (kstore's files do not hold them).
            return new HadoopFsRelation(index, partitionSchema, schema, Option.empty(), new KstoreParquetFormat(),
                scala.collection.immutable.Map$.MODULE$.empty(), sqlContext.sparkSession());
        } catch (java.io.IOException exc) {
            throw new RuntimeException("kstore: bad JSON from the Python planner", exc);
        }
    }

    /** {@code df.writeStream.format("kstore")}: one exactly-once kstore commit per micro-batch. */
    @Override
    public Sink createSink(SQLContext sqlContext, scala.collection.immutable.Map<String, String> params,
                           scala.collection.immutable.Seq<String> partitionColumns, OutputMode outputMode) {
        return new KstoreSink(javaOptions(params), new ArrayList<>(CollectionConverters.asJava(partitionColumns)),
            outputMode);
    }

    /** {@code spark.readStream.format("kstore")}: the stream's columns (the newest version's). */
    @Override
    public scala.Tuple2<String, StructType> sourceSchema(SQLContext sqlContext, Option<StructType> schema,
                                                         String providerName,
                                                         scala.collection.immutable.Map<String, String> params) {
        StructType resolved = KstoreStreamSource.pythonReader(sqlContext, javaOptions(params)).load().schema();
        if (schema.isDefined() && !schema.get().equals(resolved)) {
            throw new IllegalArgumentException("kstore.errors.InvalidArgumentError: a kstore stream has the dataset's "
                + "columns (" + resolved.simpleString() + "); select columns after load()");
        }
        return new scala.Tuple2<>(shortName(), resolved);
    }

    @Override
    public Source createSource(SQLContext sqlContext, String metadataPath, Option<StructType> schema,
                               String providerName, scala.collection.immutable.Map<String, String> params) {
        StructType resolved = schema.isDefined() ? schema.get()
            : sourceSchema(sqlContext, schema, providerName, params)._2();
        return new KstoreStreamSource(sqlContext, javaOptions(params), resolved);
    }

    @Override
    public BaseRelation createRelation(SQLContext sqlContext, SaveMode mode,
                                       scala.collection.immutable.Map<String, String> params, Dataset<Row> data) {
        Map<String, String> options = javaOptions(params);
        Map<String, Object> request = new LinkedHashMap<>();
        String partitionColumns = options.remove("__partition_columns");  // DataFrameWriter.partitionBy (JSON)
        request.put("mode", mode.name());
        request.put("partition_by", partitionColumns);
        request.put("partition_overwrite_mode",
            sqlContext.sparkSession().conf().get("spark.sql.sources.partitionOverwriteMode", "STATIC"));
        request.put("options", options);
        try {
            String text = JSON.writeValueAsString(request);
            KstoreBridge.call(p -> p.write(data, text));
        } catch (java.io.IOException exc) {
            throw new RuntimeException(exc);
        }
        // the relation Spark gets back reads what was written: only the options naming the dataset
        Map<String, String> read = new HashMap<>();
        for (Map.Entry<String, String> e : options.entrySet()) {
            String key = e.getKey().toLowerCase(java.util.Locale.ROOT);
            if (key.equals("path") || key.equals("store") || key.equals("dataset_uuid")) read.put(e.getKey(), e.getValue());
        }
        return createRelation(sqlContext, scala.collection.immutable.Map$.MODULE$.from(CollectionConverters.asScala(read)));
    }
}
