"""kstore.spark vs Spark's own Parquet writer/reader, in one run, on the WORKLOAD data.

One Spark DataFrame is built once from the WORKLOAD "sales" table (shared/bench/WORKLOAD.md,
``make_data`` of ``bench/side_by_side.py``: numpy seed 42) and cached; then, per step,
median of ``--repeats`` runs::

    W1      kstore.spark.store_dataset(df, partition_on=["day"], secondary_indices=["location"])
    W1      df.write.partitionBy("day").parquet(dir)                          (system "spark-parquet")
    R2      location == 7 on the W1 data: the kstore data source (filter pushed down to the
            planner) vs spark.read.parquet(dir).filter(...)   (rows collected and checked)
    W2/R5   (--w2) the same rows bucketed into 200 partitions by (location * 7919) % 200:
            the location index plans 1 of 200 files; Spark's min/max cannot prune

Systems are timed in alternating rounds (order flipped each round) after an untimed
warm-up round, so the load of a shared machine hits both alike; ``seconds`` is the median,
``runs`` every timed run. Output: one JSON line per step and system, as
bench/side_by_side.py: ``{"system", "step", "seconds", "runs", "rows", "files", "note"}``;
then a summary line with the ratios (goal: kstore W1 <= 1.0x spark-parquet, issue #14; kstore R2
faster than spark-parquet R2).

    python bench/spark_bench.py                 # N = 5_000_000
    python bench/spark_bench.py --small --w2    # N = 200_000, and the bucketed steps
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
from side_by_side import N_BUCKETS, Q_LOCATION, make_data  # noqa: E402


def emit(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


WARMUP = 1


def paired(runs: dict[str, tuple[Callable[[], Any], Callable[[], None] | None]], repeats: int
           ) -> dict[str, tuple[float, list[float], Any]]:
    """Time several systems in alternating rounds (the order flips every round), so load
    changes on the machine hit every system alike, after ``WARMUP`` untimed rounds (JVM JIT,
    Python worker start). Returns median, all times, last result."""
    names = list(runs)
    for _ in range(WARMUP):
        for name in names:
            fn, before = runs[name]
            if before is not None:
                before()
            fn()
    times: dict[str, list[float]] = {k: [] for k in runs}
    results: dict[str, Any] = {}
    for r in range(repeats):
        for name in (names if r % 2 == 0 else names[::-1]):
            fn, before = runs[name]
            if before is not None:
                before()
            t0 = time.perf_counter()
            results[name] = fn()
            times[name].append(time.perf_counter() - t0)
    return {k: (statistics.median(v), v, results[k]) for k, v in times.items()}


def spark_session(cores: int, memory: str):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName("kstore-spark-bench")
        .config("spark.driver.memory", memory)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", str(cores))
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def count_files(root: str) -> int:
    return sum(1 for p in Path(root).rglob("*.parquet") if "/indices/" not in str(p) and "/_kstore/" not in str(p))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=5_000_000)
    ap.add_argument("--small", action="store_true", help="N = 200_000")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1, help="untimed rounds before each step")
    ap.add_argument("--cores", type=int, default=min(os.cpu_count() or 2, 4))
    ap.add_argument("--memory", default="6g")
    ap.add_argument("--partitions", type=int, default=0,
                    help="Spark partitions of the source DataFrame (default: cores)")
    ap.add_argument("--shuffle", default="none", choices=["none", "repartition", "sort"],
                    help="kstore.spark.store_dataset(shuffle=...) for W1")
    ap.add_argument("--all-shuffles", action="store_true", help="time W1 with every shuffle option")
    ap.add_argument("--w2", action="store_true", help="also the bucketed W2/R5 steps")
    ap.add_argument("--dir", default=None, help="work directory (default: a temp dir, removed)")
    args = ap.parse_args(argv)
    n = 200_000 if args.small else args.n
    global WARMUP
    WARMUP = args.warmup

    import pyspark.sql.functions as F

    import kstore
    import kstore.spark as ks

    work = args.dir or tempfile.mkdtemp(prefix="kstore-spark-bench-")
    os.makedirs(work, exist_ok=True)
    spark = spark_session(args.cores, args.memory)
    try:
        table = make_data(n)
        expected_r2 = int(np.sum(table.column("location").to_numpy() == Q_LOCATION))
        t0 = time.perf_counter()
        df = spark.createDataFrame(table)  # Arrow -> Spark once
        parts = args.partitions or args.cores
        df = df.repartition(parts).cache()
        assert df.count() == n
        emit(system="setup", step="dataframe", seconds=round(time.perf_counter() - t0, 3), rows=n,
             note=f"{parts} Spark partitions, cached; local[{args.cores}], pyspark {spark.version}, "
                  f"pyarrow {pa.__version__}")

        kdir = os.path.join(work, "kstore")
        pdir = os.path.join(work, "parquet")

        def fresh_k() -> None:
            shutil.rmtree(kdir, ignore_errors=True)
            os.makedirs(kdir)

        # -- W1 (alternating rounds) -----------------------------------------------------
        results: dict[tuple[str, str], float] = {}
        shuffles = ["none", "repartition", "sort"] if args.all_shuffles else [args.shuffle]

        def k_write(shuffle: str) -> Any:
            return ks.store_dataset(kdir, "sales", df, partition_on=["day"], secondary_indices=["location"],
                                    shuffle=shuffle)

        def spark_write() -> None:
            df.write.mode("overwrite").partitionBy("day").parquet(pdir)

        runs: dict[str, Any] = {
            ("kstore" if sh == args.shuffle else f"kstore-{sh}"): (lambda sh=sh: k_write(sh), fresh_k)
            for sh in shuffles
        }
        runs["spark-parquet"] = (spark_write, None)
        w1 = paired(runs, args.repeats)
        for name, (sec, all_times, res) in w1.items():
            results[(name, "W1")] = sec
            if name == "spark-parquet":
                emit(system=name, step="W1", seconds=round(sec, 3), runs=[round(t, 2) for t in all_times], rows=n,
                     files=count_files(pdir), note='df.write.partitionBy("day").parquet(dir)')
            else:
                emit(system=name, step="W1", seconds=round(sec, 3), runs=[round(t, 2) for t in all_times], rows=n,
                     files=len(res.partitions), note="store_dataset(partition_on=day, index=location, "
                     f"shuffle={name.split('-', 1)[1] if '-' in name else args.shuffle!r})")
        if len(shuffles) > 1:  # R2 reads the layout of the default shuffle
            fresh_k()
            k_write(args.shuffle)

        # -- R2 (alternating rounds) ------------------------------------------------------
        def k_read() -> int:
            rows = ks.read_dataset(kdir, "sales", spark=spark).filter(F.col("location") == Q_LOCATION).collect()
            return len(rows)

        def p_read() -> int:
            rows = spark.read.parquet(pdir).filter(F.col("location") == Q_LOCATION).collect()
            return len(rows)

        r2 = paired({"kstore": (k_read, None), "spark-parquet": (p_read, None)}, args.repeats)
        plan = kstore.plan_read(kdir, "sales", predicates=[[("location", "==", Q_LOCATION)]])
        for name, (sec, all_times, rows) in r2.items():
            if rows != expected_r2:
                emit(system=name, step="R2", error=f"{rows} rows, expected {expected_r2}")
                return 1
            results[(name, "R2")] = sec
            emit(system=name, step="R2", seconds=round(sec, 3), runs=[round(t, 2) for t in all_times], rows=rows,
                 files=len(plan.tasks) if name == "kstore" else count_files(pdir),
                 note="location == 7, all columns collected"
                      + (f"; {plan.n_files} files, {len(plan.tasks)} planned" if name == "kstore" else
                         "; files in the directory"))

        # -- W2 / R5 (bucketed) -----------------------------------------------------------
        if args.w2:
            bdf = df.withColumn("bucket", (F.col("location") * 7919) % N_BUCKETS).cache()
            bdf.count()
            kb, pb = os.path.join(work, "kstore-b"), os.path.join(work, "parquet-b")

            def fresh_kb() -> None:
                shutil.rmtree(kb, ignore_errors=True)
                os.makedirs(kb)

            def kb_write() -> Any:
                return ks.store_dataset(kb, "sales", bdf, partition_on=["bucket"],
                                        secondary_indices=["location", "product"], shuffle="repartition")

            def pb_write() -> None:
                bdf.repartition("bucket").write.mode("overwrite").partitionBy("bucket").parquet(pb)

            w2 = paired({"kstore": (kb_write, fresh_kb), "spark-parquet": (pb_write, None)}, args.repeats)
            for name, (sec, all_times, res) in w2.items():
                emit(system=name, step="W2", seconds=round(sec, 3), runs=[round(t, 2) for t in all_times], rows=n,
                     files=len(res.partitions) if name == "kstore" else count_files(pb),
                     note="partition_on=bucket, index=location,product, shuffle='repartition'" if name == "kstore"
                     else 'repartition("bucket").write.partitionBy("bucket")')

            def k5() -> int:
                return len(ks.read_dataset(kb, "sales", spark=spark).filter(F.col("location") == Q_LOCATION).collect())

            def p5() -> int:
                return len(spark.read.parquet(pb).filter(F.col("location") == Q_LOCATION).collect())

            r5 = paired({"kstore": (k5, None), "spark-parquet": (p5, None)}, args.repeats)
            plan5 = kstore.plan_read(kb, "sales", predicates=[[("location", "==", Q_LOCATION)]])
            for name, (sec, all_times, rows) in r5.items():
                if rows != expected_r2:
                    emit(system=name, step="R5", error=f"{rows} rows, expected {expected_r2}")
                    return 1
                results[(name, "R5")] = sec
                emit(system=name, step="R5", seconds=round(sec, 3), runs=[round(t, 2) for t in all_times],
                     rows=rows, files=len(plan5.tasks) if name == "kstore" else count_files(pb),
                     note="location == 7 on the bucketed data" + (
                         f"; {plan5.n_files} files, {len(plan5.tasks)} planned" if name == "kstore" else ""))

        w = results[("kstore", "W1")] / results[("spark-parquet", "W1")]
        r = results[("kstore", "R2")] / results[("spark-parquet", "R2")]
        extra = {}
        if ("kstore", "R5") in results:
            extra["r5_ratio"] = round(results[("kstore", "R5")] / results[("spark-parquet", "R5")], 3)
        emit(system="summary", step="ratios", note=f"W1 kstore/spark = {w:.2f} (goal <= 1.0, issue #14); "
             f"R2 kstore/spark = {r:.2f} (goal < 1)",
             w1_ratio=round(w, 3), r2_ratio=round(r, 3), **extra)
    finally:
        spark.stop()
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
