package io.kstore.spark;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.classic.ClassicConversions$;
import org.apache.spark.sql.execution.LogicalRDD$;
import org.apache.spark.sql.execution.streaming.Sink;
import org.apache.spark.sql.streaming.OutputMode;

/**
 * {@code df.writeStream.format("kstore")} on the JVM: Delta's streaming sink. Each micro-batch
 * is one kstore write through the Python committer ({@code KstorePlanner.write}, as a batch
 * {@code save}) with the application transaction {@code (app id, batch id)}: the app id is the
 * {@code txnAppId} option, else the query's id (kept in its checkpoint, so it outlives
 * restarts, as Delta's sink uses it). A micro-batch Spark runs again after a restart commits
 * nothing the second time. Append mode appends (a missing dataset is created); complete mode
 * replaces the dataset with each micro-batch.
 */
final class KstoreSink implements Sink {
    private static final ObjectMapper JSON = new ObjectMapper();
    /** StreamExecution.QUERY_ID_KEY: the local property holding the query's persistent id. */
    private static final String QUERY_ID_KEY = "sql.streaming.queryId";

    private final Map<String, String> options;
    private final List<String> partitionColumns;
    private final boolean complete;

    KstoreSink(Map<String, String> options, List<String> partitionColumns, OutputMode mode) {
        this.options = options;
        this.partitionColumns = partitionColumns;
        if (mode == OutputMode.Update()) {
            throw new IllegalArgumentException("kstore.errors.InvalidArgumentError: a kstore stream sink takes the "
                + "append or complete output mode, not update (use foreachBatch with kstore.spark.merge to upsert)");
        }
        this.complete = mode == OutputMode.Complete();
    }

    @Override
    public String name() { return "kstore"; }

    @Override
    public void addBatch(long batchId, Dataset<Row> data) {
        // the micro-batch as a batch Dataset (what ForeachBatchSink hands foreachBatch)
        Dataset<Row> batch = org.apache.spark.sql.classic.Dataset$.MODULE$.ofRows(
            ClassicConversions$.MODULE$.castToImpl(data.sparkSession()),
            LogicalRDD$.MODULE$.fromDataset(data.queryExecution().toRdd(), ClassicConversions$.MODULE$.castToImpl(data),
                false, LogicalRDD$.MODULE$.fromDataset$default$4()));
        Map<String, String> opts = new LinkedHashMap<>();
        String app = null;
        for (Map.Entry<String, String> e : options.entrySet()) {
            String key = e.getKey().toLowerCase(java.util.Locale.ROOT);
            if (key.equals("txnappid")) app = e.getValue();
            else if (!key.equals("checkpointlocation") && !key.equals("queryname")) opts.put(e.getKey(), e.getValue());
        }
        if (app == null || app.isBlank()) {
            String queryId = data.sparkSession().sparkContext().getLocalProperty(QUERY_ID_KEY);
            if (queryId == null) throw new IllegalStateException("kstore sink: no streaming query id on this thread");
            app = "spark-stream:" + queryId;
        }
        opts.put("__stream_txn", app + ":" + batchId);
        Map<String, Object> request = new LinkedHashMap<>();
        request.put("mode", complete ? "Overwrite" : "Append");
        try {
            request.put("partition_by", partitionColumns.isEmpty() ? null : JSON.writeValueAsString(partitionColumns));
            request.put("partition_overwrite_mode", "STATIC");  // complete mode replaces the whole dataset
            request.put("options", opts);
            String text = JSON.writeValueAsString(request);
            KstoreBridge.call(p -> p.write(batch, text));
        } catch (java.io.IOException exc) {
            throw new RuntimeException(exc);
        }
    }

    @Override
    public String toString() { return "KstoreSink" + options; }
}
