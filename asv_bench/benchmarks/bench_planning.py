"""Planning cost against the number of partitions (WORKLOAD.md M1): 1k and 10k single-row partitions."""

from __future__ import annotations

import os
import shutil

import kstore

from .common import Q_LOCATION, START_DAY, single_row_partitions

SIZES = [1_000, 10_000, 100_000]


class PlanManyPartitions:
    params = [SIZES]
    param_names = ["partitions"]
    timeout = 900  # setup_cache writes 11_000 files

    def setup_cache(self):
        root = os.path.abspath("kstore-asv-planning")
        shutil.rmtree(root, ignore_errors=True)
        for p in SIZES:
            kstore.store_dataset(root, f"m{p}", single_row_partitions(p), partition_on=["day"],
                                 secondary_indices=["location"])
        return root

    def time_plan_read_indexed(self, root, p):
        kstore.plan_read(root, f"m{p}", predicates=[[("location", "==", Q_LOCATION)]])

    def time_plan_read_partition(self, root, p):
        kstore.plan_read(root, f"m{p}", predicates=[[("day", "==", START_DAY)]])

    def time_plan_read_all(self, root, p):
        kstore.plan_read(root, f"m{p}")

    def time_load_metadata(self, root, p):
        kstore.load_metadata(root, f"m{p}")

    def track_planned_files(self, root, p):
        return len(kstore.plan_read(root, f"m{p}", predicates=[[("location", "==", Q_LOCATION)]]).keys)

    track_planned_files.unit = "files"

    def track_plan_store_calls(self, root, p):
        return kstore.plan_read(root, f"m{p}", predicates=[[("location", "==", Q_LOCATION)]]).store_calls

    track_plan_store_calls.unit = "calls"
