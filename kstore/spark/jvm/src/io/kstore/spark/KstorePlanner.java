package io.kstore.spark;

/**
 * kstore's planner and committer, implemented in Python (kstore.spark.jvm) and registered
 * through PySpark's py4j callback server. Every argument and result is a JSON string, so
 * the JVM side never re-implements kstore's format.
 */
public interface KstorePlanner {
    /** Resolve options (store, dataset_uuid, version, ...): pinned version, schema, sizes. */
    String resolve(String optionsJson);

    /** Plan one pinned version with DNF predicates: the files to read with partition values. */
    String plan(String handleJson, String predicatesJson);

    /** Write a DataFrame (a Java Dataset handed over to PySpark) with kstore's Spark writer. */
    String write(Object dataset, String requestJson);

    /** The newest version of the dataset a stream reads ({"version": v}): the stream source's offset. */
    String latest(String optionsJson);
}
