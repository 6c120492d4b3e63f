package io.kstore.spark;

/** The Python planner registered with this JVM (driver side only). */
public final class KstoreBridge {
    private static volatile KstorePlanner planner;

    private KstoreBridge() {}

    public static void register(KstorePlanner p) { planner = p; }

    public static boolean isRegistered() { return planner != null; }

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
