"""Commit cost: time of a single-partition append to a dataset with P partitions.

kstore (``update_dataset``, one versioned, conflict-checked commit) next to plateau 4.6
(``update_dataset_from_dataframes``, a blind overwrite of the metadata), same run, local disk.
Both datasets have a secondary index on ``location`` so the append updates an index too.

    python bench/commit_cost.py --sizes 1000,10000,100000 [--systems kstore,plateau]

Prints one JSON line per (system, P) as WORKLOAD.md: {"system", "step": "C1", "seconds", ...}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from functools import partial

import numpy as np
import pandas as pd


def frame(p: int, start: int = 0) -> pd.DataFrame:
    ids = np.arange(start, start + p)
    return pd.DataFrame({"part": ids, "location": ids % 1000, "qty": np.ones(p, dtype="int64")})


def kstore_cost(root: str, p: int, repeats: int) -> tuple[float, float]:
    import kstore
    import kstore.eager  # noqa: F401  (kstore imports lazily: load the API before the clock)

    t0 = time.perf_counter()
    kstore.store_dataset(root, "c", frame(p), partition_on=["part"], secondary_indices=["location"])
    setup = time.perf_counter() - t0
    times = []
    for r in range(repeats):
        t0 = time.perf_counter()
        kstore.update_dataset(root, "c", frame(1, start=p + r))
        times.append(time.perf_counter() - t0)
    return statistics.median(times), setup


def plateau_cost(root: str, p: int, repeats: int) -> tuple[float, float]:
    from minimalkv import get_store_from_url
    from plateau.api.dataset import store_dataframes_as_dataset, update_dataset_from_dataframes

    store = partial(get_store_from_url, "hfs://" + root)
    t0 = time.perf_counter()
    store_dataframes_as_dataset(store=store, dataset_uuid="c", dfs=[frame(p)], partition_on=["part"],
                                secondary_indices=["location"])
    setup = time.perf_counter() - t0
    times = []
    for r in range(repeats):
        t0 = time.perf_counter()
        update_dataset_from_dataframes([frame(1, start=p + r)], store=store, dataset_uuid="c",
                                       partition_on=["part"], secondary_indices=["location"])
        times.append(time.perf_counter() - t0)
    return statistics.median(times), setup


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", default="1000,10000")
    ap.add_argument("--systems", default="kstore,plateau")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    runners = {"kstore": kstore_cost, "plateau": plateau_cost}
    for p in [int(x) for x in args.sizes.split(",")]:
        for system in args.systems.split(","):
            with tempfile.TemporaryDirectory() as root:
                try:
                    seconds, setup = runners[system](root, p, args.repeats)
                    line = {"system": system, "step": "C1", "seconds": round(seconds, 4), "calls": None,
                            "rows": 1, "note": f"P={p}; single-partition append; setup write {setup:.1f}s"}
                except Exception as exc:  # record, keep going
                    line = {"system": system, "step": "C1", "seconds": None, "calls": None, "rows": None,
                            "note": f"P={p}; error: {type(exc).__name__}: {exc}"}
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
