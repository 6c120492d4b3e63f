package io.kstore.spark;

/** The Python planner registered with this JVM (driver side only). */
public final class KstoreBridge {
    private static volatile KstorePlanner planner;

    private KstoreBridge() {}

    public static void register(KstorePlanner p) { planner = p; }

    public static boolean isRegistered() { return planner != null; }

    /**
     * Run a call into the Python planner; a Python exception (py4j wraps it with the whole
     * traceback) becomes an IllegalArgumentException with kstore's error class and message,
     * which PySpark raises as pyspark.errors.IllegalArgumentException.
     */
    public static <T> T call(java.util.function.Function<KstorePlanner, T> fn) {
        KstorePlanner p = planner();
        try {
            return fn.apply(p);
        } catch (RuntimeException exc) {
            String text = String.valueOf(exc.getMessage());
            int at = text.lastIndexOf("\nkstore.errors.");
            if (at < 0) throw exc;
            throw new IllegalArgumentException(text.substring(at + 1).strip(), exc);
        }
    }

    public static KstorePlanner planner() {
        KstorePlanner p = planner;
        if (p == null) {
            throw new IllegalStateException(
                "the kstore JVM data source has no Python planner in this driver: call "
                + "kstore.spark.jvm.install(spark) (or kstore.spark.configure(builder)) from PySpark first");
        }
        return p;
    }
}
