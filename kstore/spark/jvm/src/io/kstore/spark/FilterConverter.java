package io.kstore.spark;

import java.time.LocalDate;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.spark.sql.catalyst.expressions.And;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.BinaryComparison;
import org.apache.spark.sql.catalyst.expressions.EqualNullSafe;
import org.apache.spark.sql.catalyst.expressions.EqualTo;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GreaterThan;
import org.apache.spark.sql.catalyst.expressions.GreaterThanOrEqual;
import org.apache.spark.sql.catalyst.expressions.In;
import org.apache.spark.sql.catalyst.expressions.InSet;
import org.apache.spark.sql.catalyst.expressions.IsNotNull;
import org.apache.spark.sql.catalyst.expressions.IsNull;
import org.apache.spark.sql.catalyst.expressions.LessThan;
import org.apache.spark.sql.catalyst.expressions.LessThanOrEqual;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.expressions.Or;
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
import org.apache.spark.sql.types.TimestampNTZType;
import org.apache.spark.sql.types.TimestampType;

import scala.jdk.javaapi.CollectionConverters;

/**
 * Catalyst filters (as Spark pushes them to a FileIndex) to kstore's DNF
 * {@code [[[col, op, value], ...], ...]}. The conversion is conservative: each filter implies
 * its DNF (a conjunct kstore cannot use is dropped, an OR with an unusable side is dropped), so
 * kstore only prunes files Spark would filter out anyway. Spark still evaluates every data
 * filter after the scan; partition filters are re-checked by KstoreFileIndex.
 *
 * Literal values travel as JSON: strings, integers and booleans as they are; dates as
 * {"$date": "YYYY-MM-DD"}, timestamps as {"$ts": micros} / {"$ts_ntz": micros}, decimals as
 * {"$dec": "digits"}. Float and double columns are not pushed (NaN orders differently in Spark
 * and Arrow), nor are binary, nested or cast expressions.
 */
final class FilterConverter {
    static final int MAX_CONJUNCTIONS = 64;
    private final Set<String> columns;

    FilterConverter(Set<String> columns) { this.columns = columns; }

    /** The DNF implied by the conjunction of {@code filters}; null: no usable filter. */
    List<List<List<Object>>> convertAll(List<Expression> filters) {
        List<List<List<Object>>> out = null;
        for (Expression f : filters) {
            out = and(out, convert(f));
        }
        return out;
    }

    private static List<List<List<Object>>> and(List<List<List<Object>>> a, List<List<List<Object>>> b) {
        if (a == null) return b;
        if (b == null) return a;
        if ((long) a.size() * b.size() > MAX_CONJUNCTIONS) return a.size() <= b.size() ? a : b;  // keep one side
        List<List<List<Object>>> out = new ArrayList<>();
        for (List<List<Object>> x : a) {
            for (List<List<Object>> y : b) {
                List<List<Object>> c = new ArrayList<>(x);
                c.addAll(y);
                out.add(c);
            }
        }
        return out;
    }

    private static List<List<List<Object>>> single(List<Object> term) {
        List<List<List<Object>>> out = new ArrayList<>();
        List<List<Object>> conj = new ArrayList<>();
        conj.add(term);
        out.add(conj);
        return out;
    }

    List<List<List<Object>>> convert(Expression e) {
        if (e instanceof And a) {
            return and(convert(a.left()), convert(a.right()));
        }
        if (e instanceof Or o) {
            List<List<List<Object>>> l = convert(o.left());
            List<List<List<Object>>> r = convert(o.right());
            if (l == null || r == null || l.size() + r.size() > MAX_CONJUNCTIONS) return null;
            List<List<List<Object>>> out = new ArrayList<>(l);
            out.addAll(r);
            return out;
        }
        if (e instanceof IsNull n) {
            String c = column(n.child());
            return c == null ? null : single(List.of(c, "is null"));
        }
        if (e instanceof IsNotNull n) {
            String c = column(n.child());
            return c == null ? null : single(List.of(c, "is not null"));
        }
        if (e instanceof In in) {
            String c = column(in.value());
            if (c == null) return null;
            List<Object> values = new ArrayList<>();
            for (Expression v : CollectionConverters.asJava(in.list())) {
                if (!(v instanceof Literal lit)) return null;
                if (lit.value() == null) continue;  // x IN (.., NULL) matches no row through the NULL
                Object j = literal(lit.value(), lit.dataType());
                if (j == null) return null;
                values.add(j);
            }
            return single(List.of(c, "in", values));
        }
        if (e instanceof InSet in) {
            String c = column(in.child());
            if (c == null) return null;
            List<Object> values = new ArrayList<>();
            for (Object v : CollectionConverters.asJava(in.hset())) {
                if (v == null) continue;
                Object j = literal(v, in.child().dataType());
                if (j == null) return null;
                values.add(j);
            }
            return single(List.of(c, "in", values));
        }
        if (e instanceof BinaryComparison b) {
            String op = op(b);
            if (op == null) return null;
            Expression left = b.left();
            Expression right = b.right();
            if (left instanceof Literal && !(right instanceof Literal)) {  // 5 < x  ->  x > 5
                Expression t = left;
                left = right;
                right = t;
                op = flip(op);
            }
            String c = column(left);
            if (c == null || !(right instanceof Literal lit)) return null;
            if (lit.value() == null) {
                return (b instanceof EqualNullSafe) ? single(List.of(c, "is null")) : null;
            }
            Object j = literal(lit.value(), lit.dataType());
            return j == null ? null : single(List.of(c, op, j));
        }
        return null;
    }

    private static String op(BinaryComparison b) {
        if (b instanceof EqualTo || b instanceof EqualNullSafe) return "==";
        if (b instanceof GreaterThan) return ">";
        if (b instanceof GreaterThanOrEqual) return ">=";
        if (b instanceof LessThan) return "<";
        if (b instanceof LessThanOrEqual) return "<=";
        return null;
    }

    private static String flip(String op) {
        switch (op) {
            case ">": return "<";
            case ">=": return "<=";
            case "<": return ">";
            case "<=": return ">=";
            default: return op;
        }
    }

    private String column(Expression e) {
        if (e instanceof Attribute a && columns.contains(a.name())) return a.name();
        return null;
    }

    /** A Catalyst literal (internal representation) as JSON; null: not pushed. */
    static Object literal(Object v, DataType t) {
        if (t instanceof StringType) return v.toString();  // UTF8String
        if (t instanceof IntegerType || t instanceof LongType || t instanceof ShortType || t instanceof ByteType) {
            return ((Number) v).longValue();
        }
        if (t instanceof BooleanType) return v;
        Map<String, Object> tagged = new LinkedHashMap<>();
        if (t instanceof DateType) {
            tagged.put("$date", LocalDate.ofEpochDay(((Number) v).longValue()).toString());
        } else if (t instanceof TimestampType) {
            tagged.put("$ts", ((Number) v).longValue());
        } else if (t instanceof TimestampNTZType) {
            tagged.put("$ts_ntz", ((Number) v).longValue());
        } else if (t instanceof DecimalType) {
            tagged.put("$dec", ((Decimal) v).toJavaBigDecimal().toPlainString());
        } else {
            return null;
        }
        return tagged;
    }
}
