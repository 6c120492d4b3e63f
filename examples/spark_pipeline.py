"""kstore on Spark: a PySpark job writes a partitioned, indexed dataset, then reads it back.

Local mode, embedded local store (a directory). The session gets kstore's JVM data source
with one line (``kstore.spark.configure``), so Spark users write and read as they do with
Delta Lake: a path names a dataset, ``partitionBy`` and save modes work, and reads are
Spark's own Parquet scan over the files kstore's planner keeps. Steps:

1. Spark generates a sample "sales" table on its executors (``spark.range``; no pandas) and
   ``df.write.format("kstore").partitionBy("day")`` writes it with an inverted index on
   ``location`` (executors write the Parquet files, the driver makes one commit).
2. The query ``location == 7`` is planned by kstore (files kept / pruned, store calls),
   then run through Spark (``spark.read.format("kstore").load(path).filter(...)``: the
   filter reaches kstore's planner, Spark reads only the planned files) and through pandas
   (``kstore.read_dataset``); both are checked against Spark filtering the source rows.
3. An append, and an overwrite of one day with the session's
   ``partitionOverwriteMode=dynamic`` (only that day is replaced); time travel to version 0
   with ``versionAsOf`` and with SQL ``VERSION AS OF``; the version history.

Without a JDK's ``javac`` the JVM source is not built (``scripts/setup.sh`` says so) and
the job uses kstore's Python data source and Spark writer instead.

Run with ``.venv/bin/python examples/spark_pipeline.py [--store DIR] [--rows N]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time

N_DAYS = 30
N_LOCATIONS = 1000


def spark_session():
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # executors run this Python (with kstore)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # one machine: no "resolves to a loopback" notice
    from pyspark.sql import SparkSession

    quiet = os.path.join(os.path.dirname(os.path.abspath(__file__)), "log4j2-quiet.properties")

    import kstore.spark as ks

    spark = (
        ks.configure(SparkSession.builder.master("local[2]"))  # kstore's JVM data source (+ SQL on a path)
        .appName("kstore-spark-pipeline")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={quiet}")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def sales(spark, rows: int, first_day: str = "2024-01-01", days: int = N_DAYS):
    """Each location sells on 3 of the 30 days, so ``location == 7`` touches 3 partitions."""
    from pyspark.sql import functions as F

    loc = (F.col("id") * 7919 % N_LOCATIONS).cast("long")
    day_no = (loc + (F.col("id") % 3) * 10) % days
    return spark.range(rows).select(
        F.date_add(F.lit(first_day).cast("date"), day_no.cast("int")).alias("day"),
        loc.alias("location"),
        (F.col("id") % 20_000).alias("product"),
        F.round(F.rand(seed=42) * 100, 2).alias("price"),
        (F.col("id") % 49 + 1).cast("int").alias("qty"),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", default="spark-demo-store", help="local directory for the store")
    parser.add_argument("--rows", type=int, default=300_000)
    args = parser.parse_args()
    store = os.path.abspath(args.store)
    shutil.rmtree(store, ignore_errors=True)

    import kstore
    import kstore.spark as ks
    from kstore.spark import jvm

    t0 = time.perf_counter()
    spark = spark_session()
    native = jvm.on_session(spark)
    print(f"Spark {spark.version} local[2] started in {time.perf_counter() - t0:.1f}s; format('kstore') is "
          + ("kstore's JVM data source" if native else "kstore's Python data source (no JVM source built)"))
    path = os.path.join(store, "sales")  # a path names a dataset: <store>/<dataset>
    try:
        # 1. write
        df = sales(spark, args.rows)
        t0 = time.perf_counter()
        if native:
            df.write.format("kstore").partitionBy("day").option("secondary_indices", "location").save(path)
        else:
            ks.store_dataset(store, "sales", df, partition_on=["day"], secondary_indices=["location"],
                             shuffle="repartition")
        meta = kstore.load_metadata(store, "sales")
        print(f"\n[write] {args.rows:,} rows -> {len(meta.partitions)} files of dataset 'sales' "
              f"(version {meta.version}, one commit) in {time.perf_counter() - t0:.1f}s -> {path}/")

        # 2. plan and read location == 7
        predicates = [[("location", "==", 7)]]
        plan = kstore.plan_read(store, "sales", predicates=predicates)
        print("\n[plan] location == 7")
        print(plan.explain())
        print(f"  files kept: {len(plan.tasks)}, pruned: {plan.n_files - len(plan.tasks)}")
        for key in plan.keys:
            print("   ", key)

        from pyspark.sql import functions as F

        t0 = time.perf_counter()
        if native:
            sdf = spark.read.format("kstore").load(path).filter("location = 7")
        else:
            sdf = ks.read_dataset(store, "sales", predicates=predicates, spark=spark)
        agg = sdf.agg(F.count("*").alias("rows"), F.sum("qty").alias("qty")).collect()[0]
        print(f"\n[spark] filter location = 7, files planned by kstore: {agg.rows} rows, sum(qty) = {agg.qty} "
              f"in {time.perf_counter() - t0:.2f}s")
        t0 = time.perf_counter()
        pdf = kstore.read_dataset(store, "sales", predicates=predicates)
        print(f"[pandas] kstore.read_dataset: {len(pdf)} rows, sum(qty) = {int(pdf['qty'].sum())} "
              f"in {time.perf_counter() - t0:.2f}s")
        expected = df.filter("location = 7").count()  # Spark filtering of the source
        assert agg.rows == len(pdf) == expected, (agg.rows, len(pdf), expected)
        print(sdf.orderBy("day", "product").limit(5).toPandas().to_string(index=False))

        # 3. append, replace one day, time travel
        more = sales(spark, 10_000, first_day="2024-02-15", days=1)
        if native:
            more.write.format("kstore").mode("append").save(path)
            spark.conf.set("spark.sql.sources.partitionOverwriteMode", "dynamic")
            one_day = sales(spark, 500, first_day="2024-01-05", days=1)
            one_day.write.format("kstore").mode("overwrite").save(path)  # replaces 2024-01-05 only
            replaced = df.filter("day = DATE'2024-01-05'").count()
            before = spark.read.format("kstore").option("versionAsOf", 0).load(path).count()
            in_sql = spark.sql(f"SELECT count(*) AS n FROM kstore.`{path}` VERSION AS OF 0").collect()[0].n
            after = spark.read.format("kstore").load(path).count()
            assert before == in_sql == args.rows and after == args.rows + 10_000 - replaced + 500, (before, after)
            print(f"\n[append + dynamic overwrite of 2024-01-05] rows at version 0: {before:,} (SQL VERSION AS OF 0: "
                  f"{in_sql:,}), now: {after:,} ({replaced:,} rows of 2024-01-05 replaced by 500)")
        else:
            more.write.format("kstore").option("dataset_uuid", "sales").mode("append").save(store)
            before = ks.read_dataset(store, "sales", version=0, spark=spark).count()
            after = ks.read_dataset(store, "sales", spark=spark).count()
            assert before == args.rows and after == args.rows + 10_000
            print(f"\n[append] rows at version 0: {before:,}, now: {after:,}")
        for entry in kstore.history(store, "sales"):
            print(f"   version {entry.version}: {entry.operation}, +{entry.rows_added:,} rows, "
                  f"{len(entry.added)} files added")
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
