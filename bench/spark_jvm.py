"""kstore's JVM data source against Spark's own Parquet, side by side in one session (#31).

    PYSPARK_PYTHON=.venv/bin/python .venv/bin/python bench/spark_jvm.py --rows 5000000 --rounds 3

One ``local[2]`` session started with :func:`kstore.spark.configure`. A dataset of ``--rows``
rows and six columns, partitioned on ``day`` (``--days`` values), secondary index on ``id``,
is written through ``format("kstore")`` and through ``partitionBy("day").parquet`` (the write
workload, alternating). Then, alternating per round, each query runs on both:

- ``scan``: ``count()`` and ``sum(qty)`` over every row;
- ``one_column``: ``sum(price)``, one column of six;
- ``partition_filter``: ``sum(qty)`` where ``day`` is one value;
- ``point``: ``count()`` where ``id`` is one value (kstore skips files by its index; Parquet
  by row-group statistics only).

Prints one JSON line per workload: medians (seconds) of kstore and Parquet, their ratio,
and the files each scan read. Results are checked equal before timing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", default=None, help="work directory (default: a temp dir, removed)")
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import kstore
    import kstore.spark as ks

    work = args.dir or tempfile.mkdtemp(prefix="kstore-jvm-bench-")
    spark = (ks.configure(SparkSession.builder.master("local[2]"))
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    src = spark.range(args.rows).select(
        F.date_add(F.lit("2024-01-01").cast("date"), (F.col("id") % args.days).cast("int")).alias("day"),
        F.col("id"),
        (F.col("id") * 7919 % 1000).alias("loc"),
        (F.col("id") % 49 + 1).cast("double").alias("qty"),
        (F.col("id") % 1000 / 10).alias("price"),
        F.concat(F.lit("n"), (F.col("id") % 97).cast("string")).alias("name"),
    ).cache()
    src.count()
    kpath, ppath = os.path.join(work, "store", "events"), os.path.join(work, "parquet")

    def timed(fn: Any) -> float:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    writers = {
        "kstore": lambda: src.write.format("kstore").partitionBy("day").mode("overwrite")
        .option("secondary_indices", "id").save(kpath),
        "parquet": lambda: src.write.partitionBy("day").mode("overwrite").parquet(ppath),
    }
    writes: dict[str, list[float]] = {"kstore": [], "parquet": []}
    for r in range(args.rounds):
        for name, fn in (list(writers.items()) if r % 2 == 0 else list(writers.items())[::-1]):
            writes[name].append(timed(fn))
    report("write", writes, {})

    def scan_files(query: Any) -> int:
        spark.conf.set("spark.sql.adaptive.enabled", "false")  # query stages hide the scan from collectLeaves
        try:
            df = query()
            df.collect()
            leaves = df._jdf.queryExecution().executedPlan().collectLeaves()
            for i in range(leaves.size()):
                node = leaves.apply(i)
                if "FileSourceScan" in node.getClass().getName():
                    return int(node.metrics().apply("numFiles").value())
            return -1
        finally:
            spark.conf.unset("spark.sql.adaptive.enabled")

    point_id = args.rows // 2 + 7
    queries = {
        "scan": lambda r: r.agg(F.count("*"), F.sum("qty")),
        "one_column": lambda r: r.agg(F.sum("price")),
        "partition_filter": lambda r: r.filter("day = DATE'2024-01-05'").agg(F.sum("qty")),
        "point": lambda r: r.filter(f"id = {point_id}").agg(F.count("*")),
    }
    readers = {"kstore": lambda: spark.read.format("kstore").load(kpath), "parquet": lambda: spark.read.parquet(ppath)}
    for qname, q in queries.items():
        want = q(readers["parquet"]()).collect()
        got = q(readers["kstore"]()).collect()
        assert len(got) == len(want) and all(
            math.isclose(float(a), float(b), rel_tol=1e-9) for g, w in zip(got, want) for a, b in zip(g, w)
        ), (qname, got, want)  # sums of doubles: the order of additions differs
        files = {name: scan_files(lambda reader=reader, q=q: q(reader())) for name, reader in readers.items()}
        times: dict[str, list[float]] = {"kstore": [], "parquet": []}
        for r in range(args.rounds):
            for name, reader in (list(readers.items()) if r % 2 == 0 else list(readers.items())[::-1]):
                times[name].append(timed(lambda reader=reader, q=q: q(reader()).collect()))
        report(qname, times, files)
    planned = len(kstore.plan_read(os.path.dirname(kpath), "events").tasks)
    print(json.dumps({"rows": args.rows, "days": args.days, "kstore_files": planned}))
    spark.stop()
    if args.dir is None:
        shutil.rmtree(work, ignore_errors=True)


def report(name: str, times: dict[str, list[float]], files: dict[str, int]) -> None:
    med = {k: statistics.median(v) for k, v in times.items()}
    print(json.dumps({"workload": name, "kstore_s": round(med["kstore"], 3), "parquet_s": round(med["parquet"], 3),
                      "ratio": round(med["kstore"] / med["parquet"], 2), "files_read": files,
                      "rounds": {k: [round(x, 3) for x in v] for k, v in times.items()}}), flush=True)


if __name__ == "__main__":
    main()
