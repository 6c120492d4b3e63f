"""Before/after figures of one change: the same small workloads on two checkouts of kstore,
interleaved in one run, as ratios (after / before).

    git worktree add /tmp/before <commit before the change>
    python bench/ab_checkouts.py --before /tmp/before --after . --rounds 5

Each round runs every workload once per checkout, in a fresh interpreter whose
``sys.path`` starts with that checkout (the order alternates per round, so a load that
comes and goes hits both alike). Workloads (local disk, a temp dir per run):

- ``C1``: one single-file append (``update_dataset``) to a dataset of 10,000 files with a
  secondary index (the commit's cost);
- ``P1``: open and plan (``plan_read``) an indexed ``==`` predicate on that dataset;
- ``W1``: ``store_dataset`` of 1,000,000 rows in 10 partitions with an index;
- ``R2``: ``read_dataset`` of one partition value and one index value of it;
- ``K1``: ``compact`` of 200 small files in 4 partitions.

Prints one JSON line per workload: the medians (seconds) of each checkout and their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = r'''
import json, sys, tempfile, time
import numpy as np, pandas as pd
import kstore, kstore.eager  # noqa: F401

def timed(fn, repeats):
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter(); fn(); out.append(time.perf_counter() - t0)
    return sorted(out)[len(out) // 2]

root = sys.argv[1]
res = {}
p = 10_000
ids = np.arange(p)
kstore.store_dataset(root, "c", pd.DataFrame({"part": ids, "location": ids % 1000, "qty": np.ones(p, "int64")}),
                     partition_on=["part"], secondary_indices=["location"])
n = [p]
def append():
    kstore.update_dataset(root, "c", pd.DataFrame({"part": [n[0]], "location": [n[0] % 1000], "qty": [1]}))
    n[0] += 1
res["C1"] = timed(append, 5)
res["P1"] = timed(lambda: kstore.plan_read(root, "c", predicates=[[("location", "==", 7)]]), 9)
rows = 1_000_000
big = pd.DataFrame({"day": np.arange(rows) % 10, "location": np.arange(rows) % 997,
                    "qty": np.arange(rows, dtype="int64")})
k = [0]
def write():
    kstore.store_dataset(root, f"w{k[0]}", big, partition_on=["day"], secondary_indices=["location"])
    k[0] += 1
res["W1"] = timed(write, 3)
res["R2"] = timed(lambda: kstore.read_dataset(root, "w0", predicates=[[("day", "==", 3), ("location", "==", 7)]]), 5)
for i in range(50):
    kstore.update_dataset(root, "w0", big.iloc[i * 4:(i + 1) * 4].assign(day=[0, 1, 2, 3]))
t0 = time.perf_counter(); kstore.compact(root, "w0", min_files=2); res["K1"] = time.perf_counter() - t0
print(json.dumps(res))
'''


def run(checkout: str) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(checkout))
    with tempfile.TemporaryDirectory() as root:
        out = subprocess.run([sys.executable, "-c", CHILD, root], env=env, check=True, capture_output=True,
                             text=True, cwd=root)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True, help="checkout before the change")
    ap.add_argument("--after", default=".", help="checkout after the change (default: this one)")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    got: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    for r in range(args.rounds):
        order = ("before", "after") if r % 2 == 0 else ("after", "before")
        for side in order:
            got[side].append(run(getattr(args, side)))
    for step in got["before"][0]:
        b = statistics.median(x[step] for x in got["before"])
        a = statistics.median(x[step] for x in got["after"])
        print(json.dumps({"step": step, "before_s": round(b, 4), "after_s": round(a, 4), "ratio": round(a / b, 3),
                          "rounds": args.rounds}), flush=True)


if __name__ == "__main__":
    main()
