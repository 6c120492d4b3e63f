package io.kstore.spark;

import java.math.BigDecimal;
import java.time.LocalDate;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.BasePredicate;
import org.apache.spark.sql.catalyst.expressions.BoundReference;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.Predicate$;
import org.apache.spark.sql.execution.datasources.FileIndex;
import org.apache.spark.sql.execution.datasources.PartitionDirectory;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DateType;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.types.TimestampNTZType;
import org.apache.spark.sql.types.TimestampType;
import org.apache.spark.unsafe.types.UTF8String;

import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.AbstractPartialFunction;

/**
 * The files of one pinned kstore version, as Spark's file sources see them (Delta's
 * TahoeFileIndex idea): Spark's own Parquet scan reads what kstore's planner names.
 */
public class KstoreFileIndex implements FileIndex {
    private static final ObjectMapper JSON = new ObjectMapper();
    /** Files the last listFiles call returned in this JVM (for tests and explain). */
    public static final AtomicLong LAST_LISTED = new AtomicLong(-1);

    private final String handle;
    private final Path root;
    private final StructType partitionSchema;
    private final FilterConverter converter;
    private final long sizeInBytes;
    private final long version;

    public KstoreFileIndex(String handle, Path root, StructType schema, StructType partitionSchema,
                           long sizeInBytes, long version) {
        this.handle = handle;
        this.root = root;
        this.partitionSchema = partitionSchema;
        this.sizeInBytes = sizeInBytes;
        this.version = version;
        this.converter = new FilterConverter(new HashSet<>(List.of(schema.fieldNames())));
    }

    @Override
    public Seq<Path> rootPaths() {
        // The dataset as a path no Hadoop file system serves ("kstore:" + the directory, version).
        // Spark uses the first root path as the output of INSERT INTO / INSERT OVERWRITE on a
        // HadoopFsRelation, writing Parquet files beside kstore's (uncommitted) or deleting the
        // dataset's files first; with this path it fails before touching the directory
        // (KstoreSparkExtensions' check rule refuses it earlier, with a message). Reads never
        // resolve it: the files come from listFiles, explain() prints it.
        return CollectionConverters.asScala(List.of(new Path("kstore:" + root.toUri().getPath() + "@v" + version))).toSeq();
    }

    @Override
    public Seq<PartitionDirectory> listFiles(Seq<Expression> partitionFilters, Seq<Expression> dataFilters) {
        List<Expression> pf = CollectionConverters.asJava(partitionFilters);
        List<Expression> all = new ArrayList<>(pf);
        all.addAll(CollectionConverters.asJava(dataFilters));
        List<PartitionDirectory> dirs = plan(all);
        // kstore prunes partitions exactly for the terms it got; Spark does not re-check
        // partition filters after a FileIndex, so every partition filter is evaluated here.
        if (!pf.isEmpty()) {
            BasePredicate p = partitionPredicate(pf);
            List<PartitionDirectory> kept = new ArrayList<>();
            for (PartitionDirectory d : dirs) {
                if (p.eval(d.values())) kept.add(d);
            }
            dirs = kept;
        }
        long n = 0;
        for (PartitionDirectory d : dirs) n += d.files().size();
        LAST_LISTED.set(n);
        return CollectionConverters.asScala(dirs).toSeq();
    }

    private BasePredicate partitionPredicate(List<Expression> filters) {
        Expression conj = filters.get(0);
        for (int i = 1; i < filters.size(); i++) {
            conj = new org.apache.spark.sql.catalyst.expressions.And(conj, filters.get(i));
        }
        StructField[] fields = partitionSchema.fields();
        Expression bound = conj.transform(new AbstractPartialFunction<Expression, Expression>() {
            @Override
            public boolean isDefinedAt(Expression e) {
                return e instanceof Attribute;
            }

            @Override
            public <A1 extends Expression, B1> B1 applyOrElse(A1 e, scala.Function1<A1, B1> orElse) {
                if (!(e instanceof Attribute a)) return orElse.apply(e);
                for (int i = 0; i < fields.length; i++) {
                    if (fields[i].name().equals(a.name())) {
                        @SuppressWarnings("unchecked")
                        B1 out = (B1) new BoundReference(i, fields[i].dataType(), true);
                        return out;
                    }
                }
                throw new IllegalStateException("partition filter on " + a.name() + ", not a partition column");
            }
        });
        BasePredicate p = Predicate$.MODULE$.createInterpreted(bound);
        p.initialize(0);
        return p;
    }

    private List<PartitionDirectory> plan(List<Expression> filters) {
        String predicates;
        try {
            List<List<List<Object>>> dnf = converter.convertAll(filters);
            predicates = JSON.writeValueAsString(dnf);
            String planned = KstoreBridge.call(p -> p.plan(handle, predicates));
            JsonNode result = JSON.readTree(planned);
            Map<String, List<FileStatus>> byPartition = new LinkedHashMap<>();
            Map<String, InternalRow> rows = new LinkedHashMap<>();
            for (JsonNode f : result.get("files")) {
                JsonNode pv = f.get("partition");
                String key = pv.toString();
                if (!rows.containsKey(key)) rows.put(key, partitionRow(pv));
                Path path = new Path(f.get("path").asText());
                FileStatus st = new FileStatus(f.get("size").asLong(), false, 1, 128L << 20, 0L, path);
                byPartition.computeIfAbsent(key, k -> new ArrayList<>()).add(st);
            }
            List<PartitionDirectory> out = new ArrayList<>();
            for (Map.Entry<String, List<FileStatus>> e : byPartition.entrySet()) {
                out.add(PartitionDirectory.apply(rows.get(e.getKey()), e.getValue().toArray(new FileStatus[0])));
            }
            return out;
        } catch (java.io.IOException exc) {
            throw new RuntimeException("kstore: bad JSON from the Python planner", exc);
        }
    }

    private InternalRow partitionRow(JsonNode values) {
        StructField[] fields = partitionSchema.fields();
        Object[] out = new Object[fields.length];
        for (int i = 0; i < fields.length; i++) {
            JsonNode v = values.get(fields[i].name());
            out[i] = (v == null || v.isNull()) ? null : internal(v, fields[i].dataType());
        }
        return new GenericInternalRow(out);
    }

    /** A partition value from the planner's JSON as Catalyst's internal value. */
    static Object internal(JsonNode v, DataType t) {
        if (t instanceof StringType) return UTF8String.fromString(v.asText());
        if (t instanceof IntegerType) return v.asInt();
        if (t instanceof LongType) return v.asLong();
        if (t instanceof ShortType) return (short) v.asInt();
        if (t instanceof ByteType) return (byte) v.asInt();
        if (t instanceof BooleanType) return v.asBoolean();
        if (t instanceof DateType) return (int) LocalDate.parse(v.asText()).toEpochDay();
        if (t instanceof TimestampType || t instanceof TimestampNTZType) return v.asLong();  // micros
        if (t instanceof DecimalType d) {
            return Decimal.apply(new BigDecimal(v.asText()), d.precision(), d.scale());
        }
        throw new IllegalArgumentException("kstore: partition columns of type " + t.simpleString()
            + " are not supported by the JVM source yet");
    }

    @Override
    public String[] inputFiles() {
        List<String> out = new ArrayList<>();
        for (PartitionDirectory d : plan(List.of())) {
            for (var f : CollectionConverters.asJava(d.files())) out.add(f.getPath().toString());
        }
        return out.toArray(new String[0]);
    }

    @Override
    public void refresh() {}  // a pinned version never changes

    @Override
    public long sizeInBytes() { return sizeInBytes; }

    @Override
    public StructType partitionSchema() { return partitionSchema; }

    @Override
    public String toString() { return "KstoreFileIndex(" + root + ", version " + version + ")"; }
}
