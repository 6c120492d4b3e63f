"""kstore on Spark: a PySpark job writes a partitioned, indexed dataset, then reads it back.

Local mode, embedded local store (a directory). Steps:

1. Spark generates a sample "sales" table on its executors (``spark.range``; no pandas);
   ``kstore.spark.store_dataset`` writes it partitioned on ``day`` with an inverted index
   on ``location``: executors write the Parquet files, the driver makes one commit.
2. The query ``location == 7`` is planned by kstore (files kept / pruned, store calls),
   then run through Spark (``kstore.spark.read_dataset`` with ``predicates``: the
   ``kstore`` data source plans them, Spark reads only the planned files) and through
   pandas (``kstore.read_dataset``).
3. ``df.write.format("kstore")`` appends one more day; a time-travel read of version 0
   shows the dataset as it was before.

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

    spark = (
        SparkSession.builder.master("local[2]")
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

    t0 = time.perf_counter()
    spark = spark_session()
    ks.register(spark)
    print(f"Spark {spark.version} local[2] started in {time.perf_counter() - t0:.1f}s")
    try:
        # 1. write
        df = sales(spark, args.rows)
        t0 = time.perf_counter()
        meta = ks.store_dataset(store, "sales", df, partition_on=["day"], secondary_indices=["location"],
                                shuffle="repartition")
        print(f"\n[write] {args.rows:,} rows -> {len(meta.partitions)} files of dataset 'sales' "
              f"(version {meta.version}, one commit) in {time.perf_counter() - t0:.1f}s -> {store}/")

        # 2. plan and read location == 7
        predicates = [[("location", "==", 7)]]
        plan = kstore.plan_read(store, "sales", predicates=predicates)
        print("\n[plan] location == 7")
        print(plan.explain())
        print(f"  files kept: {len(plan.tasks)}, pruned: {plan.n_partitions - len(plan.tasks)}")
        for key in plan.keys:
            print("   ", key)

        from pyspark.sql import functions as F

        t0 = time.perf_counter()
        sdf = ks.read_dataset(store, "sales", predicates=predicates, spark=spark)
        agg = sdf.agg(F.count("*").alias("rows"), F.sum("qty").alias("qty")).collect()[0]
        print(f"\n[spark] predicates planned by kstore: {agg.rows} rows, sum(qty) = {agg.qty} "
              f"in {time.perf_counter() - t0:.2f}s")
        t0 = time.perf_counter()
        pdf = kstore.read_dataset(store, "sales", predicates=predicates)
        print(f"[pandas] kstore.read_dataset: {len(pdf)} rows, sum(qty) = {int(pdf['qty'].sum())} "
              f"in {time.perf_counter() - t0:.2f}s")
        expected = df.filter("location = 7").count()  # Spark filtering of the source
        assert agg.rows == len(pdf) == expected, (agg.rows, len(pdf), expected)
        print(sdf.orderBy("day", "product").limit(5).toPandas().to_string(index=False))

        # 3. append through the data source; time travel
        more = sales(spark, 10_000, first_day="2024-02-15", days=1)
        (more.write.format("kstore").option("dataset_uuid", "sales").mode("append").save(store))
        now = kstore.load_metadata(store, "sales")
        before = ks.read_dataset(store, "sales", version=0, spark=spark).count()
        after = ks.read_dataset(store, "sales", spark=spark).count()
        print(f"\n[append] df.write.format('kstore'): version {now.version}, {len(now.partitions)} files; "
              f"rows at version 0: {before:,}, now: {after:,}")
        assert before == args.rows and after == args.rows + 10_000
        for entry in kstore.history(store, "sales"):
            print(f"   version {entry.version}: {entry.operation}, +{entry.rows_added:,} rows, "
                  f"{len(entry.added)} files added")
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
