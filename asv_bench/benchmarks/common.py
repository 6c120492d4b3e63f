"""Shared data for the benchmarks: the WORKLOAD.md "sales" table (same generator as
``bench/side_by_side.py``: numpy seed 42, same draw order, so the same rows)."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa

N = 200_000
START_DAY = dt.date(2024, 1, 1)
N_DAYS = 100
Q_LOCATION = 7
Q_DAY = dt.date(2024, 2, 1)


def make_data(n: int = N, seed: int = 42) -> pa.Table:
    """day (date32, 100 days, shuffled), location, product, price, qty, note (5_000 strings)."""
    rng = np.random.default_rng(seed)
    day_codes = rng.permutation(np.arange(n, dtype=np.int32) % N_DAYS)
    day = (np.datetime64(START_DAY, "D") + day_codes).astype("datetime64[D]")
    location = rng.integers(0, 1_000, n, dtype=np.int64)
    product = rng.integers(0, 20_000, n, dtype=np.int64)
    price = rng.uniform(0.0, 100.0, n)
    qty = rng.integers(1, 51, n, dtype=np.int32)
    codes = rng.integers(ord("a"), ord("z") + 1, size=(5_000, 16), dtype=np.uint8)
    vocab = pa.array([row.tobytes().decode("ascii") for row in codes], pa.string())
    note = vocab.take(pa.array(rng.integers(0, 5_000, n, dtype=np.int32)))
    return pa.table(
        {
            "day": pa.array(day, pa.date32()),
            "location": pa.array(location, pa.int64()),
            "product": pa.array(product, pa.int64()),
            "price": pa.array(price, pa.float64()),
            "qty": pa.array(qty, pa.int32()),
            "note": note,
        }
    )


def single_row_partitions(p: int) -> pa.Table:
    """``p`` rows with distinct days (one partition each); location = k % 1000."""
    k = np.arange(p, dtype=np.int64)
    day = (np.datetime64(START_DAY, "D") + k).astype("datetime64[D]")
    return pa.table(
        {
            "day": pa.array(day, pa.date32()),
            "location": pa.array(k % 1_000),
            "qty": pa.array(np.ones(p, np.int32)),
        }
    )
