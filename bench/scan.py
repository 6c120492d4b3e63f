"""Selective scans without clustering (issue #32): WORKLOAD.md's R2, ``location == 7`` on the
W1 layout (100 day files, rows of every location in every file, so no index or statistic
can skip a file), kstore against pyarrow.dataset, DuckDB and (where ``pylance`` is
installed) Lance with a BTREE index on ``location``; same data, one run, interleaved per
repetition, rows checked against pandas filtering of the source::

    python bench/scan.py --n 5000000 --repeats 5 [--workdir /tmp/scan --keep]

Each system writes W1 once (kstore: ``partition_on=["day"]``, index on ``location``;
pyarrow: hive by ``day``; DuckDB reads pyarrow's files; Lance: one dataset and the index).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lookup import report  # noqa: E402
from side_by_side import Q_LOCATION, make_data  # noqa: E402

import kstore  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=5_000_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--keep", action="store_true", help="keep (and reuse) the written datasets")
    args = ap.parse_args(argv)
    work = args.workdir or tempfile.mkdtemp(prefix="kstore-scan-")
    os.makedirs(work, exist_ok=True)
    kroot, proot, lroot = (os.path.join(work, d) for d in ("kstore", "pyarrow", "lance"))
    try:
        import lance
    except ImportError:
        lance = None
    table = make_data(args.n)
    by_day = table.sort_by("day")  # one file per day for every system (the rows of a day together)
    expected = int(np.count_nonzero(table.column("location").to_numpy() == Q_LOCATION))
    if not os.path.exists(kroot):
        kstore.store_dataset(kroot, "sales", by_day, partition_on=["day"], secondary_indices=["location"])
    if not os.path.exists(proot):
        ds.write_dataset(by_day, proot, format="parquet", partitioning=["day"], partitioning_flavor="hive")
    if lance is not None and not os.path.exists(lroot):
        d = lance.write_dataset(by_day, lroot)
        d.create_scalar_index("location", "BTREE")
    con = duckdb.connect()
    print(f"N={args.n:,} repeats={args.repeats} kstore={kstore.__version__} pyarrow={pa.__version__} "
          f"duckdb={duckdb.__version__} lance={lance.__version__ if lance else 'not installed'} "
          f"cpus={os.cpu_count()} loadavg={os.getloadavg()[0]:.1f}")

    cases: dict[str, Callable[[], int]] = {
        "kstore": lambda: len(kstore.read_dataset(kroot, "sales", predicates=[[("location", "==", Q_LOCATION)]])),
        "pyarrow.dataset": lambda: len(ds.dataset(proot, format="parquet", partitioning="hive").to_table(
            filter=ds.field("location") == Q_LOCATION).to_pandas()),
        "duckdb": lambda: len(con.execute(f"SELECT * FROM read_parquet('{proot}/*/*.parquet', hive_partitioning=true) "
                                          f"WHERE location = {Q_LOCATION}").df()),
    }
    if lance is not None:
        cases["lance"] = lambda: len(lance.dataset(lroot).to_table(filter=f"location = {Q_LOCATION}").to_pandas())
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.repeats):
        for name, fn in cases.items():
            t0 = time.perf_counter()
            got = fn()
            times[name].append(time.perf_counter() - t0)
            if got != expected:
                print(f"ERROR R2 {name}: {got} rows, expected {expected}")
                return 1
    report("R2", times, f" ({expected} rows)")
    if not args.keep and not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
