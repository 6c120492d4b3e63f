package io.kstore.spark;

import java.lang.reflect.InvocationHandler;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.util.HashMap;
import java.util.Locale;
import java.util.Map;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.analysis.RelationTimeTravel;
import org.apache.spark.sql.catalyst.analysis.UnresolvedRelation;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.parser.ParserInterface;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.execution.datasources.LogicalRelation$;

import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.AbstractPartialFunction;

/**
 * Spark's SQL parser, with {@code kstore.`<store>/<dataset>`} read as the kstore dataset at
 * that path. Spark runs SQL on a path only for FileFormat sources and gives them no path
 * option ({@code ResolveSQLOnFile}), so the relation is made here, right after parsing, as
 * {@code spark.read.format("kstore").load(path)} makes it; {@code VERSION AS OF n} and
 * {@code TIMESTAMP AS OF '...'} become the {@code versionAsOf} / {@code timestampAsOf} options.
 * Every other statement passes through unchanged; every other parser method is Spark's (a
 * dynamic proxy, so methods a later Spark adds to ParserInterface pass through too).
 */
public final class KstoreSqlParser {
    private final SparkSession session;
    private final ParserInterface delegate;

    private KstoreSqlParser(SparkSession session, ParserInterface delegate) {
        this.session = session;
        this.delegate = delegate;
    }

    private static String kstorePath(LogicalPlan plan) {
        if (!(plan instanceof UnresolvedRelation u)) return null;
        Seq<String> parts = u.multipartIdentifier();
        if (parts.size() != 2 || !parts.head().toLowerCase(Locale.ROOT).equals("kstore")) return null;
        String path = parts.last();
        return path.contains("/") ? path : null;  // kstore.events stays a table name
    }

    private LogicalPlan relation(String path, String version, String timestamp) {
        Map<String, String> options = new HashMap<>();
        options.put("path", path);
        if (version != null) options.put("versionAsOf", version);
        if (timestamp != null) options.put("timestampAsOf", timestamp);
        scala.collection.immutable.Map<String, String> params =
            scala.collection.immutable.Map$.MODULE$.from(CollectionConverters.asScala(options));
        return LogicalRelation$.MODULE$.apply(new DefaultSource().createRelation(session.sqlContext(), params), false);
    }

    private LogicalPlan rewrite(LogicalPlan plan) {
        return plan.transformDown(new AbstractPartialFunction<LogicalPlan, LogicalPlan>() {
            @Override
            public boolean isDefinedAt(LogicalPlan p) {
                return kstorePath(p) != null
                    || (p instanceof RelationTimeTravel t && kstorePath(t.relation()) != null);
            }

            @Override
            public <A1 extends LogicalPlan, B1> B1 applyOrElse(A1 p, scala.Function1<A1, B1> orElse) {
                LogicalPlan out;
                if (p instanceof RelationTimeTravel t && kstorePath(t.relation()) != null) {
                    String timestamp = null;
                    if (t.timestamp().isDefined()) {
                        Expression e = t.timestamp().get();
                        if (!e.foldable()) {
                            throw new IllegalArgumentException("kstore: TIMESTAMP AS OF takes a constant, got " + e.sql());
                        }
                        timestamp = String.valueOf(e.eval(null));
                    }
                    out = relation(kstorePath(t.relation()), t.version().isDefined() ? t.version().get() : null,
                                   timestamp);
                } else if (kstorePath(p) != null) {
                    out = relation(kstorePath(p), null, null);
                } else {
                    return orElse.apply(p);
                }
                @SuppressWarnings("unchecked")
                B1 result = (B1) out;
                return result;
            }
        });
    }

    /** Spark's parser {@code delegate}, with every parsed plan passed through {@link #rewrite}. */
    public static ParserInterface wrap(SparkSession session, ParserInterface delegate) {
        KstoreSqlParser parser = new KstoreSqlParser(session, delegate);
        InvocationHandler handler = (proxy, method, args) -> {
            Object out;
            try {
                out = method.invoke(delegate, args);
            } catch (InvocationTargetException exc) {
                throw exc.getCause();
            }
            // parsePlan, parseQuery, parsePlanWithParameters, ...: statements that may read a path
            return out instanceof LogicalPlan plan && method.getName().startsWith("parse") ? parser.rewrite(plan) : out;
        };
        return (ParserInterface) Proxy.newProxyInstance(KstoreSqlParser.class.getClassLoader(),
            new Class<?>[] {ParserInterface.class}, handler);
    }
}
