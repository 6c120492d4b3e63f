package io.kstore.spark;

import java.util.HashMap;
import java.util.Map;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.spark.sql.DataFrameReader;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SQLContext;
import org.apache.spark.sql.classic.ClassicConversions$;
import org.apache.spark.sql.execution.streaming.Offset;
import org.apache.spark.sql.execution.streaming.Source;
import org.apache.spark.sql.types.StructType;

import scala.Option;

/**
 * {@code spark.readStream.format("kstore")} on the JVM: Delta's streaming source (every row of
 * the dataset, then each new version's added rows; or from {@code startingVersion}). The offset
 * is the last version delivered ({@code {"version": v}}, from the Python planner's
 * {@code latest}). Each micro-batch is read by kstore's Python source (option
 * {@code __stream_batch}: the range), which decides which versions' rows it holds
 * ({@code kstore.blocks.changes.appends_only}), so the format stays defined once; its rows
 * reach Spark as a streaming Dataset in the schema the stream started with (a schema change
 * stops the stream, asking for a restart).
 */
final class KstoreStreamSource implements Source {
    private static final ObjectMapper JSON = new ObjectMapper();
    /** The name the Python source is registered under beside the JVM source (kstore.spark.register). */
    static final String PYTHON_SOURCE = "kstore_python";

    private final SQLContext context;
    private final Map<String, String> options;
    private final StructType schema;

    KstoreStreamSource(SQLContext context, Map<String, String> options, StructType schema) {
        this.context = context;
        this.options = options;
        this.schema = schema;
    }

    /** The Python source's reader with these options (and the stream's own). */
    static DataFrameReader pythonReader(SQLContext context, Map<String, String> options) {
        DataFrameReader reader = context.sparkSession().read().format(PYTHON_SOURCE);
        for (Map.Entry<String, String> e : options.entrySet()) reader = reader.option(e.getKey(), e.getValue());
        return reader;
    }

    @Override
    public StructType schema() { return schema; }

    @Override
    public Option<Offset> getOffset() {
        try {
            String text = JSON.writeValueAsString(options);
            return Option.apply(new VersionOffset(KstoreBridge.call(p -> p.latest(text))));
        } catch (java.io.IOException exc) {
            throw new RuntimeException(exc);
        }
    }

    @Override
    public Dataset<Row> getBatch(Option<Offset> start, Offset end) {
        Map<String, String> opts = new HashMap<>(options);
        try {
            ObjectNode range = JSON.createObjectNode();
            range.set("start", start.isEmpty() ? null : JSON.readTree(start.get().json()));
            range.set("end", JSON.readTree(end.json()));
            opts.put("__stream_batch", JSON.writeValueAsString(range));
        } catch (java.io.IOException exc) {
            throw new RuntimeException(exc);
        }
        Dataset<Row> batch = pythonReader(context, opts).load();
        if (!batch.schema().equals(schema)) {
            throw new IllegalArgumentException("kstore.errors.InvalidArgumentError: the dataset's schema changed after "
                + "this stream started (now " + batch.schema().simpleString() + ", the stream's "
                + schema.simpleString() + "); restart the stream");
        }
        return ClassicConversions$.MODULE$.castToImpl(context.sparkSession())
            .internalCreateDataFrame(batch.queryExecution().toRdd(), schema, true);
    }

    @Override
    public void stop() {}

    @Override
    public String toString() { return "KstoreStreamSource" + options; }

    /** An offset as the JSON the planner gives ({"version": v}); equal when the JSON is. */
    static final class VersionOffset extends Offset {
        private final String json;

        VersionOffset(String json) { this.json = json; }

        @Override
        public String json() { return json; }
    }
}
