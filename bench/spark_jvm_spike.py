"""Spike bench for issue #31 (kstore/spark/jvm/DESIGN.md): partition filter and indexed point filter
through the JVM kstore source vs spark.read.parquet vs the Python source, one local[2] session,
alternating, 3 rounds. Run from the repo root with PYTHONPATH=. PYSPARK_PYTHON=<python>."""
import datetime as dt, time, statistics, sys, os
import numpy as np, pandas as pd
import kstore
from pyspark.sql import SparkSession
from kstore.spark import jvm
from kstore.spark.datasource import KstoreDataSourceNoPushdown

class KstorePy(KstoreDataSourceNoPushdown):
    @classmethod
    def name(cls):
        return "kstore_py"

root = "/tmp/ksbench"
url = "file://" + root
if not os.path.exists(root):
    n, days = 200_000, 20
    rng = np.random.default_rng(0)
    pdf = pd.DataFrame({"day": [dt.date(2024, 1, 1) + dt.timedelta(days=int(d)) for d in rng.integers(0, days, n)],
                        "id": np.arange(n, dtype="int64"), "loc": rng.integers(0, 100, n), "qty": rng.random(n),
                        "price": rng.random(n) * 100, "name": [f"n{i % 97}" for i in range(n)]})
    kstore.store_dataset(url, "ds", pdf, partition_on=["day"], secondary_indices=["id"])
spark = (jvm.configure(SparkSession.builder.master("local[2]")).config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false").config("spark.sql.shuffle.partitions", "2")
         .config("spark.sql.session.timeZone", "UTC").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
pl = jvm.install(spark)
spark.dataSource.register(KstorePy)
day = dt.date(2024, 1, 5)
plan = kstore.plan_read(url, "ds", predicates=[[("day", "==", day)]])
files = [kstore.open_store(url).file_path(t.key) for t in plan.tasks]
Q = "day = DATE'2024-01-05'"
def q_jvm():
    return spark.read.format("kstore").option("dataset_uuid", "ds").load(root).filter(Q).agg({"qty": "sum"}).collect()[0][0]
def q_parquet():  # every file of the dataset, Spark's own partition discovery
    return spark.read.parquet(root + "/ds/table").filter(Q).agg({"qty": "sum"}).collect()[0][0]
def q_py():
    return spark.read.format("kstore_py").option("dataset_uuid", "ds").load(url).filter(Q).agg({"qty": "sum"}).collect()[0][0]
ref = q_jvm(); assert abs(q_parquet() - ref) < 1e-6 and abs(q_py() - ref) < 1e-6, (ref, q_parquet(), q_py())
times = {"jvm": [], "parquet": [], "python": []}
for r in range(3):
    for name, f in (("jvm", q_jvm), ("parquet", q_parquet), ("python", q_py)):
        t = time.perf_counter(); f(); times[name].append(time.perf_counter() - t)
med = {k: statistics.median(v) for k, v in times.items()}
print("rounds", times)
print("median s", med)
print("ratio jvm/parquet %.2f  python/parquet %.2f  python/jvm %.2f" % (med["jvm"] / med["parquet"], med["python"] / med["parquet"], med["python"] / med["jvm"]))
# indexed point filter
def pt_jvm():
    return spark.read.format("kstore").option("dataset_uuid", "ds").load(root).filter("id = 123456").count()
def pt_parquet():
    return spark.read.parquet(root + "/ds/table").filter("id = 123456").count()
tp = {"jvm": [], "parquet": []}
for r in range(3):
    for name, f in (("jvm", pt_jvm), ("parquet", pt_parquet)):
        t = time.perf_counter(); f(); tp[name].append(time.perf_counter() - t)
print("point", tp, "files planned", len(pl.last_plan.tasks))
spark.stop()
