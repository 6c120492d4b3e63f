"""Open + plan one value of a large secondary index, in a fresh process (issue #32).

The dataset: ``--files`` files (default 10,000) of ``--rows`` rows each (default 100), an
indexed int64 column ``k`` whose values are all distinct (1M distinct values by default),
plus ``g`` (10 values, a second, small index) and a payload column. Written once into
``--dir`` (kept between runs). Each round starts a new interpreter that opens the newest
version and plans ``k == <one value>`` and then ``g == 3``, and reports wall ms per plan
(imports excluded), the store calls and the bytes the calls returned::

    python bench/index_scale.py --dir /tmp/kstore-index-scale --rounds 5

One JSON line per round on stdout, then the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

CHILD = r"""
import json, sys, time
import kstore, kstore.eager
from kstore.io.local import LocalStore
from kstore.io.store import CountingStore

class Bytes(CountingStore):
    n = 0
    def get(self, key):
        data = super().get(key)
        Bytes.n += len(data)
        return data
    def open(self, key):
        fh = super().open(key)
        read = fh.read
        def counted(*a):
            data = read(*a)
            Bytes.n += len(data)
            return data
        fh.read = counted
        return fh

root, value = sys.argv[1], int(sys.argv[2])
out = {}
for name, pred in (("k", [[("k", "==", value)]]), ("g", [[("g", "==", 3)]])):
    st = Bytes(LocalStore(root))
    Bytes.n = 0
    t0 = time.perf_counter()
    plan = kstore.plan_read(st, "big", predicates=pred)
    ms = (time.perf_counter() - t0) * 1000
    out[name] = {"ms": round(ms, 2), "files": len(plan.keys), "of": plan.n_files, "calls": dict(st.calls),
                 "bytes_read": Bytes.n}
print(json.dumps(out))
"""


def build(root: str, files: int, rows: int) -> None:
    import numpy as np
    import pyarrow as pa

    import kstore
    from kstore.io.local import LocalStore

    if os.path.exists(os.path.join(root, "big")):
        return
    rng = np.random.default_rng(1)

    def pieces():
        for i in range(files):
            k = np.arange(i * rows, (i + 1) * rows, dtype=np.int64)
            yield pa.table({"k": k, "g": rng.integers(0, 10, rows), "x": rng.random(rows)})

    t0 = time.perf_counter()
    kstore.store_dataset(LocalStore(root), "big", pieces(), secondary_indices=["k", "g"])
    print(f"built {files} files x {rows} rows in {time.perf_counter() - t0:.1f} s", file=sys.stderr)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dir", default="/tmp/kstore-index-scale")
    p.add_argument("--files", type=int, default=10_000)
    p.add_argument("--rows", type=int, default=100)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    build(args.dir, args.files, args.rows)
    value = (args.files * args.rows) // 2 + 17
    got = []
    for _ in range(args.rounds):
        out = subprocess.run([sys.executable, "-c", CHILD, args.dir, str(value)], check=True, capture_output=True,
                             text=True).stdout
        got.append(json.loads(out))
        print(out.strip())
    for name in ("k", "g"):
        ms = statistics.median(r[name]["ms"] for r in got)
        last = got[-1][name]
        print(f"{name}: open + plan median {ms:.1f} ms, {last['files']}/{last['of']} files, calls {last['calls']}, "
              f"{last['bytes_read']:,} bytes read")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
