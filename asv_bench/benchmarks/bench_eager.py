"""store_dataset / read_dataset of the WORKLOAD data (N = 200_000, 100 day partitions)."""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile

import kstore

from .common import Q_DAY, Q_LOCATION, make_data

PARTITION_ON = ["day"]
INDICES = ["location"]


class WriteRead:
    """One dataset written once (``setup_cache``) and read many times; writes go to a temp dir."""

    timeout = 300

    def setup_cache(self):
        table = make_data()
        root = os.path.abspath("kstore-asv-eager")
        shutil.rmtree(root, ignore_errors=True)
        kstore.store_dataset(root, "sales", table, partition_on=PARTITION_ON, secondary_indices=INDICES)
        return {"root": root, "table": table}

    def setup(self, cache):
        self.root = cache["root"]
        self.table = cache["table"]
        self.frame = None
        self.tmp = tempfile.mkdtemp(prefix="kstore-asv-write-")
        self.counter = itertools.count()

    def teardown(self, cache):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def time_store_dataset(self, cache):
        kstore.store_dataset(self.tmp, f"w{next(self.counter)}", self.table, partition_on=PARTITION_ON,
                             secondary_indices=INDICES)

    def time_store_dataset_pandas(self, cache):
        if self.frame is None:
            self.frame = self.table.to_pandas()
        kstore.store_dataset(self.tmp, f"p{next(self.counter)}", self.frame, partition_on=PARTITION_ON,
                             secondary_indices=INDICES)

    def time_read_dataset(self, cache):
        kstore.read_dataset(self.root, "sales")

    def time_read_table_arrow(self, cache):
        kstore.read_table(self.root, "sales")

    def time_read_indexed_predicate(self, cache):
        kstore.read_dataset(self.root, "sales", predicates=[[("location", "==", Q_LOCATION)]])

    def time_read_partition_predicate(self, cache):
        kstore.read_dataset(self.root, "sales", predicates=[[("day", "==", Q_DAY)]])

    def time_plan_indexed_predicate(self, cache):
        kstore.plan_read(self.root, "sales", predicates=[[("location", "==", Q_LOCATION)]])

    def peakmem_read_dataset(self, cache):
        kstore.read_dataset(self.root, "sales")

    def track_plan_store_calls(self, cache):
        return kstore.plan_read(self.root, "sales", predicates=[[("location", "==", Q_LOCATION)]]).store_calls

    track_plan_store_calls.unit = "calls"
