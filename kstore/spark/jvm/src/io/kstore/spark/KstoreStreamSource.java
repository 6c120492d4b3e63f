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
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReadMaxFiles;
import org.apache.spark.sql.connector.read.streaming.SupportsAdmissionControl;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;
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
final class KstoreStreamSource implements Source, SupportsAdmissionControl, SupportsTriggerAvailableNow {
    private static final ObjectMapper JSON = new ObjectMapper();
    /** The name the Python source is registered under beside the JVM source (kstore.spark.register). */
    static final String PYTHON_SOURCE = "kstore_python";

    private final SQLContext context;
    private final Map<String, String> options;
    private final StructType schema;
    /** Trigger.AvailableNow: the end offset when the query started (no micro-batch goes past it). */
    private volatile String until;

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
        return Option.apply(latest(null, null));
    }

    /** Delta's maxFilesPerTrigger: whole versions while their files stay within it (at least one). */
    @Override
    public ReadLimit getDefaultReadLimit() {
        for (Map.Entry<String, String> e : options.entrySet()) {
            if (e.getKey().equalsIgnoreCase("maxFilesPerTrigger")) {
                try {
                    return ReadLimit.maxFiles(Integer.parseInt(e.getValue().strip()));
                } catch (NumberFormatException exc) {
                    throw new IllegalArgumentException("kstore.errors.InvalidArgumentError: option maxFilesPerTrigger "
                        + "must be a positive number of files, got '" + e.getValue() + "'");
                }
            }
        }
        return ReadLimit.allAvailable();
    }

    @Override
    public org.apache.spark.sql.connector.read.streaming.Offset latestOffset(
            org.apache.spark.sql.connector.read.streaming.Offset start, ReadLimit limit) {
        Integer maxFiles = limit instanceof ReadMaxFiles files ? files.maxFiles() : null;
        return latest(start == null ? null : start.json(), maxFiles);
    }

    @Override
    public void prepareForTriggerAvailableNow() {
        until = null;
        until = latest(null, null).json();
    }

    /** The planner's end offset for a micro-batch after {@code start} (null: the first), under {@code maxFiles}. */
    private VersionOffset latest(String start, Integer maxFiles) {
        Map<String, Object> request = new HashMap<>(options);
        if (start != null) request.put("__start", start);
        if (maxFiles != null) request.put("__max_files", maxFiles);
        if (until != null) request.put("__until", until);
        try {
            String text = JSON.writeValueAsString(request);
            return new VersionOffset(KstoreBridge.call(p -> p.latest(text)));
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
