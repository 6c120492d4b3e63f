"""Runs in its own process for tests/drivers/test_spark_streaming.py's kill test: one
streaming query from a directory of Parquet files (one file per micro-batch) into kstore,
until every file is processed (``trigger(availableNow=True)``). The test SIGKILLs it at
random moments and starts it again from the same checkpoint. argv: src, store, checkpoint."""

from __future__ import annotations

import sys


def main(src: str, store: str, checkpoint: str) -> None:
    from pyspark.sql import SparkSession

    import kstore.spark as ks

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").config("spark.sql.shuffle.partitions", "2")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    ks.register(spark)
    (spark.readStream.schema("id BIGINT, day STRING").option("maxFilesPerTrigger", 1).parquet(src)
     .writeStream.format("kstore").option("dataset_uuid", "sink").option("partition_on", "day")
     .option("checkpointLocation", checkpoint).trigger(availableNow=True).start(store).awaitTermination())
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:4])
