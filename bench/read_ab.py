"""R1/R2 before/after in one process, interleaved per repetition (a shared box slows every
case alike), medians: for R1 kstore's bounded-memory pandas read (``kstore.blocks.frame``)
against the whole Arrow table converted (``to_pandas(read_plan(...))``); for R2 kstore's
multi-file scan against its per-file path (``kstore.blocks.read.MULTI_FILE_SCAN`` off);
pyarrow and DuckDB beside them, and for R2 Arrow's scan alone of the listed files (the
Parquet format kstore's reader uses): the floor of a reader built on Arrow's decoder.

    python bench/throughput.py --steps W1 --repeats 1 --workdir /dev/shm/kt   # the data, once
    python bench/read_ab.py /dev/shm/kt 9 R1,R2
"""

from __future__ import annotations

import glob
import os
import statistics
import sys
import time
from collections.abc import Callable

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

import kstore
from kstore.blocks import read as R
from kstore.blocks.arrow import LOCAL_PARQUET


def per_file(fn: Callable[[], object]) -> Callable[[], object]:
    def g() -> object:
        R.MULTI_FILE_SCAN = False
        try:
            return fn()
        finally:
            R.MULTI_FILE_SCAN = True
    return g


def main() -> None:
    work = sys.argv[1]
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    steps = sys.argv[3].split(",") if len(sys.argv) > 3 else ["R1", "R2"]
    hive = ds.partitioning(pa.schema([("day", pa.date32())]), flavor="hive")
    con = duckdb.connect()
    con.execute(f"SET threads TO {os.cpu_count()}")
    pred = [[("location", "==", 7)]]
    cases: dict[str, Callable[[], object]] = {}
    if "R1" in steps:
        def r1() -> object:
            return kstore.read_dataset(work + "/kstore", "sales")
        cases["R1 pyarrow.dataset"] = lambda: ds.dataset(
            work + "/kstore/sales/table", format="parquet", partitioning=hive).to_table().to_pandas()
        cases["R1 pq.read_table"] = lambda: pq.read_table(work + "/kstore/sales/table", partitioning=hive).to_pandas()
        def r1_arrow() -> object:
            snap = kstore.open_dataset(work + "/kstore", "sales")
            plan = snap.plan()
            return R.to_pandas(R.read_plan(snap.store, plan), plan.schema)
        cases["R1 kstore old"] = r1_arrow
        cases["R1 kstore new"] = r1
    if "R2" in steps:
        for lab, p in (("", work + "/kstore"), ("c", work + "/kstore_c")):
            q = f"SELECT * FROM read_parquet('{p}/sales/table/**/*.parquet', hive_partitioning=true) WHERE location = 7"
            cases[f"R2{lab} duckdb"] = lambda q=q: con.execute(q).df()
            listed = sorted(glob.glob(f"{p}/sales/table/**/*.parquet", recursive=True))
            cases[f"R2{lab} arrow scan"] = lambda fl=listed: ds.dataset(fl, format=LOCAL_PARQUET).to_table(
                filter=ds.field("location") == 7).to_pandas()
            cases[f"R2{lab} kstore old"] = per_file(lambda p=p: kstore.read_dataset(p, "sales", predicates=pred))
            cases[f"R2{lab} kstore new"] = lambda p=p: kstore.read_dataset(p, "sales", predicates=pred)
    times: dict[str, list[float]] = {k: [] for k in cases}
    load0 = os.getloadavg()[0]
    for _ in range(reps):
        for k, fn in cases.items():
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"reps={reps} loadavg before={load0:.1f} after={os.getloadavg()[0]:.1f}")
    for k, v in times.items():
        print(f"  {k:22s} {med[k]:.3f}  ({', '.join(f'{x:.3f}' for x in v)})")
    if "R1" in steps:
        best = min(med["R1 pyarrow.dataset"], med["R1 pq.read_table"])
        print(f"R1 old/best {med['R1 kstore old'] / best:.2f}x  new/best {med['R1 kstore new'] / best:.2f}x")
    if "R2" in steps:
        for lab in ("", "c"):
            duck = med[f"R2{lab} duckdb"]
            print(f"R2{lab} old/duckdb {med[f'R2{lab} kstore old'] / duck:.2f}x  "
                  f"new/duckdb {med[f'R2{lab} kstore new'] / duck:.2f}x  "
                  f"Arrow's scan alone/duckdb {med[f'R2{lab} arrow scan'] / duck:.2f}x  "
                  f"new/Arrow's scan {med[f'R2{lab} kstore new'] / med[f'R2{lab} arrow scan']:.2f}x")


if __name__ == "__main__":
    main()
