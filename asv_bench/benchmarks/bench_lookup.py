"""Open + plan an indexed lookup on WORKLOAD.md's W2 layout (issue #32): 200 bucket files,
secondary indices on ``location`` (1,000 values) and ``product`` (20,000 values).

``time_plan_location`` is P2 (the predicate needs the small index only: opening the
version must not pay for the large one); ``time_plan_product`` decodes the large one;
``time_pyarrow_dataset_plan`` is the peer's open + file pruning of the same files (it has
no index: it lists the directory and reads footers' statistics)."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds

import kstore

from .common import Q_LOCATION, make_data

N_BUCKETS = 200


def _buckets(table: pa.Table) -> list[pa.Table]:
    buckets = (table.column("location").to_numpy() * 7919) % N_BUCKETS
    order = np.argsort(buckets, kind="stable")
    counts = np.bincount(buckets, minlength=N_BUCKETS)
    t = table.take(pa.array(order))
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    return [t.slice(int(s), int(c)) for s, c in zip(starts, counts)]


class IndexedLookup:
    timeout = 300

    def setup_cache(self):
        root = os.path.abspath("kstore-asv-lookup")
        shutil.rmtree(root, ignore_errors=True)
        kstore.store_dataset(root, "sales_b", iter(_buckets(make_data())), secondary_indices=["location", "product"])
        return {"root": root}

    def setup(self, cache):
        self.root = cache["root"]

    def time_plan_location(self, cache):
        kstore.plan_read(self.root, "sales_b", predicates=[[("location", "==", Q_LOCATION)]])

    def time_plan_product(self, cache):
        kstore.plan_read(self.root, "sales_b", predicates=[[("product", "==", 123)]])

    def time_pyarrow_dataset_plan(self, cache):
        d = ds.dataset(os.path.join(self.root, "sales_b", "table"), format="parquet")
        list(d.get_fragments(filter=ds.field("location") == Q_LOCATION))

    def track_files_planned_location(self, cache):
        return len(kstore.plan_read(self.root, "sales_b", predicates=[[("location", "==", Q_LOCATION)]]).keys)

    track_files_planned_location.unit = "files"
