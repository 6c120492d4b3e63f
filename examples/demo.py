"""kstore demo: write a partitioned, indexed dataset to a local directory and query it.

Run with ``bash scripts/demo.sh`` (or ``.venv/bin/python examples/demo.py [--store DIR]``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import time

import numpy as np
import pandas as pd

import kstore


def make_sales(n: int = 200_000, seed: int = 42) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    days = pd.date_range("2024-01-01", periods=30, freq="D").date
    return pd.DataFrame(
        {
            "day": np.asarray(days)[rng.integers(0, len(days), n)],
            "location": rng.integers(0, 1000, n),
            "product": rng.integers(0, 20_000, n),
            "price": rng.uniform(0, 100, n).round(2),
            "qty": rng.integers(1, 50, n).astype("int32"),
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--store", default="demo-store", help="local directory for the store")
    parser.add_argument("--rows", type=int, default=200_000)
    args = parser.parse_args()
    shutil.rmtree(args.store, ignore_errors=True)

    df = make_sales(args.rows)
    t0 = time.perf_counter()
    meta = kstore.store_dataset(args.store, "sales", df, partition_on=["day"], secondary_indices=["location"])
    print(f"wrote {len(df):,} rows into {len(meta.partitions)} partitions of dataset 'sales' "
          f"(version {meta.version}) in {time.perf_counter() - t0:.2f}s -> {args.store}/")

    predicates = [[("location", "==", 7), ("day", ">=", dt.date(2024, 1, 20))]]
    plan = kstore.plan_read(args.store, "sales", predicates=predicates)
    print("\nquery: location == 7 and day >= 2024-01-20")
    print(plan.explain())
    print("files the plan kept:")
    for key in plan.keys:
        print("  ", key)

    t0 = time.perf_counter()
    result = kstore.read_dataset(args.store, "sales", predicates=predicates)
    expected = df[(df.location == 7) & (df.day >= dt.date(2024, 1, 20))]
    print(f"\nread {len(result)} rows in {time.perf_counter() - t0:.3f}s "
          f"(pandas filtering of the source finds {len(expected)}):")
    print(result.sort_values(["day", "product"]).head(10).to_string(index=False))
    assert len(result) == len(expected), "kstore and pandas disagree"


if __name__ == "__main__":
    main()
