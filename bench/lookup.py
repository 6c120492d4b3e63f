"""Indexed lookups (issue #32): WORKLOAD.md's W2, R5 and P2, kstore against pyarrow.dataset,
DuckDB and (where ``pylance`` is installed: ``pip install pylance``) Lance with BTREE scalar
indices, same data, one run, interleaved per repetition (a shared box slows every system
alike; the ratios are what matters).

- W2  200 files, one per ``bucket = location * 7919 % 200`` — kstore ``store_dataset`` of the
      200 tables with secondary indices on ``location`` and ``product``; pyarrow
      ``ds.write_dataset`` of the same rows (grouped by bucket) partitioned on the bucket;
      DuckDB ``COPY ... PARTITION_BY (bucket)`` of them; Lance ``write_dataset`` of the same
      rows and ``create_scalar_index`` (BTREE) on ``location`` and ``product``;
- R5  ``location == 7`` into pandas — kstore ``read_dataset`` (the index keeps 1 file of
      200), ``pyarrow.dataset`` ``to_table(filter)``, DuckDB ``read_parquet(glob)``, Lance
      ``to_table(filter)`` (its index answers);
- P2  open + plan ``location == 7`` in a fresh interpreter (imports excluded) — kstore
      ``plan_read`` (store calls and bytes read listed), pyarrow.dataset discovery and
      ``get_fragments(filter)``, Lance open + the index query alone (``scanner(filter,
      columns=[], with_row_id=True)``: the matching row ids, no data read).

::

    python bench/lookup.py --n 5000000 --repeats 5
    python bench/lookup.py --n 1000000 --steps R5,P2 --workdir /tmp/lk --keep   # reuse the data
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
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

from side_by_side import Q_LOCATION, bucket_of, make_data, split_by_bucket  # noqa: E402

import kstore  # noqa: E402

P2_KSTORE = r"""
import json, sys, time
import kstore, kstore.eager
from kstore.io.local import LocalStore
from kstore.io.store import CountingStore
n = 0
class Bytes(CountingStore):
    def get(self, key):
        global n
        data = super().get(key)
        n += len(data)
        return data
    def open(self, key):
        fh = super().open(key)
        read = fh.read
        def counted(*a):
            global n
            data = read(*a)
            n += len(data)
            return data
        fh.read = counted
        return fh
st = Bytes(LocalStore(sys.argv[1]))
t0 = time.perf_counter()
plan = kstore.plan_read(st, "sales_b", predicates=[[("location", "==", int(sys.argv[2]))]])
print(json.dumps({"s": time.perf_counter() - t0, "files": len(plan.keys), "calls": dict(st.calls), "bytes": n}))
"""

P2_LANCE = r"""
import json, sys, time
import lance
t0 = time.perf_counter()
d = lance.dataset(sys.argv[1])
ids = d.scanner(filter=f"location = {int(sys.argv[2])}", columns=[], with_row_id=True).to_table()
print(json.dumps({"s": time.perf_counter() - t0, "rows": ids.num_rows}))
"""

P2_PYARROW = r"""
import json, sys, time
import pyarrow.dataset as ds
t0 = time.perf_counter()
d = ds.dataset(sys.argv[1], format="parquet", partitioning="hive")
frags = list(d.get_fragments(filter=ds.field("location") == int(sys.argv[2])))
print(json.dumps({"s": time.perf_counter() - t0, "files": len(frags)}))
"""


def report(step: str, times: dict[str, list[float]], extra: str = "") -> dict[str, float]:
    """Print each system's median and runs, and kstore's ratio to the best peer (and to Lance)."""
    best = {name: statistics.median(t) for name, t in times.items()}
    peer = min(v for k, v in best.items() if k != "kstore")
    for name, t in best.items():
        print(f"{step} {name:16s} {t * 1000:9.1f} ms  (runs: {', '.join(f'{x * 1000:.1f}' for x in times[name])})")
    print(f"{step} kstore / best peer = {best['kstore'] / peer:.2f}x"
          + (f"; kstore / lance = {best['kstore'] / best['lance']:.2f}x" if "lance" in best else "") + extra)
    return best


def fresh(code: str, *args: str) -> dict:
    import json

    out = subprocess.run([sys.executable, "-c", code, *args], check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=5_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", default="W2,R5,P2")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--keep", action="store_true", help="keep (and reuse) the written datasets")
    args = ap.parse_args(argv)
    steps = args.steps.split(",")
    work = args.workdir or tempfile.mkdtemp(prefix="kstore-lookup-")
    os.makedirs(work, exist_ok=True)
    kroot, proot, droot, lroot = (os.path.join(work, d) for d in ("kstore", "pyarrow", "duckdb", "lance"))
    try:
        import lance
    except ImportError:
        lance = None
    table = make_data(args.n)
    buckets = split_by_bucket(table)
    # the peers get the rows already grouped by bucket, as kstore gets its 200 tables (interleaved
    # rows would cost them a row group per batch and bucket: 4x the write time, 60x R5's read)
    grouped = pa.concat_tables(buckets)
    with_bucket = grouped.append_column("bucket", pa.array(bucket_of(grouped.column("location").to_numpy()),
                                                           pa.int64()))
    con = duckdb.connect()
    print(f"N={args.n:,} repeats={args.repeats} kstore={kstore.__version__} pyarrow={pa.__version__} "
          f"duckdb={duckdb.__version__} lance={lance.__version__ if lance else 'not installed'} "
          f"loadavg={os.getloadavg()[0]:.1f}")

    def w_kstore() -> None:
        shutil.rmtree(kroot, ignore_errors=True)
        kstore.store_dataset(kroot, "sales_b", iter(buckets), secondary_indices=["location", "product"])

    def w_pyarrow() -> None:
        shutil.rmtree(proot, ignore_errors=True)
        ds.write_dataset(with_bucket, proot, format="parquet", partitioning=["bucket"], partitioning_flavor="hive")

    def w_duckdb() -> None:
        shutil.rmtree(droot, ignore_errors=True)
        con.register("src", with_bucket)
        con.execute(f"COPY src TO '{droot}' (FORMAT parquet, PARTITION_BY (bucket))")
        con.unregister("src")

    def w_lance() -> None:
        shutil.rmtree(lroot, ignore_errors=True)
        d = lance.write_dataset(grouped, lroot)
        d.create_scalar_index("location", "BTREE")
        d.create_scalar_index("product", "BTREE")

    def r_lance() -> int:
        return len(lance.dataset(lroot).to_table(filter=f"location = {Q_LOCATION}").to_pandas())

    def p_lance() -> float:
        got = fresh(P2_LANCE, lroot, str(Q_LOCATION))
        notes.setdefault("P2 lance", f"{got['rows']} row ids from the BTREE index")
        return float(got["s"])

    def r_kstore() -> int:
        return len(kstore.read_dataset(kroot, "sales_b", predicates=[[("location", "==", Q_LOCATION)]]))

    def r_pyarrow() -> int:
        d = ds.dataset(proot, format="parquet", partitioning="hive")
        return len(d.to_table(filter=ds.field("location") == Q_LOCATION).to_pandas())

    def r_duckdb() -> int:
        return len(con.execute(f"SELECT * FROM read_parquet('{proot}/*/*.parquet', hive_partitioning=true) "
                               f"WHERE location = {Q_LOCATION}").df())

    def p_kstore() -> float:
        got = fresh(P2_KSTORE, kroot, str(Q_LOCATION))
        notes.setdefault("P2 kstore", f"{got['files']} of 200 files, calls {got['calls']}, {got['bytes']:,} bytes read")
        return float(got["s"])

    def p_pyarrow() -> float:
        got = fresh(P2_PYARROW, proot, str(Q_LOCATION))
        notes.setdefault("P2 pyarrow.dataset", f"{got['files']} fragments kept (no statistics pruning at plan time)")
        return float(got["s"])

    notes: dict[str, str] = {}
    cases: dict[str, dict[str, Callable[[], object]]] = {
        "W2": {"kstore": w_kstore, "pyarrow.dataset": w_pyarrow, "duckdb": w_duckdb},
        "R5": {"kstore": r_kstore, "pyarrow.dataset": r_pyarrow, "duckdb": r_duckdb},
        "P2": {"kstore": p_kstore, "pyarrow.dataset": p_pyarrow},
    }
    if lance is not None:
        cases["W2"]["lance"], cases["R5"]["lance"], cases["P2"]["lance"] = w_lance, r_lance, p_lance
    need_data = [s for s in ("R5", "P2") if s in steps] and "W2" not in steps
    if need_data and not (os.path.exists(kroot) and os.path.exists(proot)):
        w_kstore()
        w_pyarrow()
    if need_data and lance is not None and not os.path.exists(lroot):
        w_lance()
    expected = int(np.count_nonzero(table.column("location").to_numpy() == Q_LOCATION))
    for step in [s for s in ("W2", "R5", "P2") if s in steps]:
        times: dict[str, list[float]] = {name: [] for name in cases[step]}
        for _ in range(args.repeats):
            for name, fn in cases[step].items():
                t0 = time.perf_counter()
                out = fn()
                wall = time.perf_counter() - t0
                if step == "P2":
                    wall = float(out)  # type: ignore[arg-type]
                elif step == "R5" and out != expected:
                    print(f"ERROR {step} {name}: {out} rows, expected {expected}")
                    return 1
                times[name].append(wall)
        report(step, times)
    for k, v in notes.items():
        print(f"{k}: {v}")
    if not args.keep and not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
