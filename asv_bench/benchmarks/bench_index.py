"""kstore.core.index.ColumnIndex: build from 1M (value, partition) pairs, load, look up."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from kstore.blocks.load import parquet_bytes
from kstore.core.index import ColumnIndex

N_PAIRS = 1_000_000
N_VALUES = 1_000_000
N_LABELS = 1_000
N_IN = 100_000


def _pairs() -> tuple[pa.Array, pa.Array]:
    rng = np.random.default_rng(42)
    values = pa.array(rng.integers(0, N_VALUES, N_PAIRS, dtype=np.int64))
    pool = pa.array([f"day=2024-01-01/part-{i:04d}" for i in range(N_LABELS)], pa.string())
    labels = pool.take(pa.array(rng.integers(0, N_LABELS, N_PAIRS, dtype=np.int32)))
    return values, labels


class IndexOps:
    """An index of ~630k distinct int64 values over 1_000 partitions (built once in setup_cache)."""

    timeout = 600

    def setup_cache(self):
        values, labels = _pairs()
        index = ColumnIndex.build("location", values, labels)
        return {"values": values, "labels": labels, "payload": parquet_bytes(index.to_table(), compression="snappy")}

    def setup(self, cache):
        self.values = cache["values"]
        self.labels = cache["labels"]
        self.payload = cache["payload"]
        self.table = pq.read_table(pa.BufferReader(self.payload))
        self.index = ColumnIndex.from_table("location", self.table)
        rng = np.random.default_rng(7)
        self.in_values = rng.integers(0, N_VALUES, N_IN).tolist()

    def time_build_1m(self, cache):
        ColumnIndex.build("location", self.values, self.labels)

    def time_to_table(self, cache):
        self.index.to_table()

    def time_load(self, cache):
        """Parquet bytes -> ColumnIndex, as planning does for every index a predicate uses."""
        ColumnIndex.from_table("location", pq.read_table(pa.BufferReader(self.payload)))

    def time_lookup_eq(self, cache):
        self.index.lookup("==", 12_345)

    def time_lookup_in_100k(self, cache):
        self.index.lookup("in", self.in_values)

    def time_lookup_range(self, cache):
        self.index.lookup(">=", 250_000)

    def time_lookup_between(self, cache):
        np.intersect1d(self.index.lookup(">=", 250_000), self.index.lookup("<", 260_000))

    def time_merge(self, cache):
        self.index.merge(self.index)

    def track_distinct_values(self, cache):
        return len(self.index)

    track_distinct_values.unit = "values"
