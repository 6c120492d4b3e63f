"""Throughput at the floor: kstore against pyarrow.dataset and DuckDB, same data, one run.

The WORKLOAD data (shared/bench/WORKLOAD.md, ``bench/side_by_side.make_data``), local disk:

- W1  write N rows partitioned on ``day`` (kstore: with the inverted index on ``location``)
      — kstore ``store_dataset`` vs ``pyarrow.dataset.write_dataset`` (multi-threaded, hive)
      vs DuckDB ``COPY ... (FORMAT parquet, PARTITION_BY (day))``; kstore also with
      ``sort_by=["location"]`` (W1c);
- R1  full read into pandas — kstore ``read_dataset`` vs ``pyarrow.dataset`` and raw
      ``pq.read_table`` of kstore's own files (the best of the two is the floor);
- C1  compaction of 1,000 small files (100 appends' worth) in 10 partitions (500k rows):
      files before/after and seconds (``--steps C1``);
- R2  ``location == 7`` — kstore on the unclustered and on the clustered dataset, DuckDB
      on the same files (``read_parquet(glob, hive_partitioning)``), pyarrow.dataset, and
      Arrow's scan alone (the files listed, as kstore's reader scans them): the floor of any
      reader built on Arrow's Parquet decoder.

Each step is timed ``--repeats`` times (median reported, every time listed); the box may
be shared, so the figures that matter are the ratios printed at the end, all from one run::

    python bench/throughput.py --n 5000000 --repeats 5
    python bench/throughput.py --small           # N = 200_000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)
import pyarrow.dataset as ds
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from side_by_side import Q_LOCATION, make_data  # noqa: E402

import kstore  # noqa: E402
from kstore.blocks.arrow import LOCAL_PARQUET  # noqa: E402  (the format kstore scans local files with)
from kstore.core import runtime  # noqa: E402

CLUSTER = {"row_group_size": 4096}


def timed(fn: Callable[[], object], repeats: int, before: Callable[[], None] | None = None) -> tuple[float, list[float], object]:
    times, out = [], None
    for _ in range(repeats):
        if before is not None:
            before()
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times, out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=5_000_000)
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", default="W1,R1,R2")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--out", default=None, help="JSON lines file (default: print only)")
    args = ap.parse_args(argv)
    n = 200_000 if args.small else args.n
    steps = set(args.steps.split(","))
    work = Path(args.workdir or tempfile.mkdtemp(prefix="kstore-throughput-"))
    work.mkdir(parents=True, exist_ok=True)
    import duckdb

    con = duckdb.connect()
    con.execute(f"SET threads TO {os.cpu_count()}")
    table = make_data(n)
    expect_r2 = int((table.column("location").to_numpy() == Q_LOCATION).sum())
    res: dict[str, tuple[float, list[float]]] = {}
    print(f"N={n} repeats={args.repeats} cpus={os.cpu_count()} kstore threads={runtime.cpu_threads()} "
          f"pyarrow={pa.__version__} duckdb={duckdb.__version__} loadavg={os.getloadavg()[0]:.1f}")

    def rm(p: Path) -> None:
        shutil.rmtree(p, ignore_errors=True)

    ks_dir, ksc_dir, pa_dir, dk_dir = work / "kstore", work / "kstore_c", work / "pads", work / "duck"

    def record(name: str, r: tuple[float, list[float], object]) -> object:
        res[name] = (r[0], r[1])
        print(f"  {name:34s} {r[0]:8.3f} s   ({', '.join(f'{t:.3f}' for t in r[1])})", flush=True)
        return r[2]

    # ---- W1 -------------------------------------------------------------------------
    def w_kstore(path: Path, **kw) -> Callable[[], object]:
        return lambda: kstore.store_dataset(str(path), "sales", table, partition_on=["day"],
                                            secondary_indices=["location"], **kw)

    if "W1" in steps or not ks_dir.exists():
        con.register("src", table)
        writers = {
            "W1 pyarrow.dataset.write_dataset": (pa_dir, lambda: ds.write_dataset(
                table, pa_dir, format="parquet", partitioning=["day"], partitioning_flavor="hive",
                existing_data_behavior="overwrite_or_ignore", max_rows_per_group=1 << 20, min_rows_per_group=1 << 16)),
            "W1 duckdb COPY PARTITION_BY": (dk_dir, lambda: con.execute(
                f"COPY src TO '{dk_dir}' (FORMAT parquet, PARTITION_BY (day), OVERWRITE_OR_IGNORE)")),
            "W1 kstore store_dataset": (ks_dir, w_kstore(ks_dir)),
            "W1c kstore sort_by=location": (ksc_dir, w_kstore(ksc_dir, sort_by=["location"], write_options=CLUSTER)),
        }
        times: dict[str, list[float]] = {k: [] for k in writers}
        for _ in range(args.repeats):  # interleaved: a noisy neighbour slows every system alike
            for name, (path, fn) in writers.items():
                rm(path)
                times[name].append(timed(fn, 1)[0])
        for name in writers:
            record(name, (statistics.median(times[name]), times[name], None))

    files = [str(p) for p in sorted((ks_dir / "sales" / "table").rglob("*.parquet"))]
    hive = ds.partitioning(pa.schema([("day", pa.date32())]), flavor="hive")

    # ---- R1 -------------------------------------------------------------------------
    if "R1" in steps:
        def r1_pads():
            return ds.dataset(str(ks_dir / "sales" / "table"), format="parquet", partitioning=hive).to_table().to_pandas()

        def r1_raw():
            return pq.read_table(str(ks_dir / "sales" / "table"), partitioning=hive).to_pandas()

        df = record("R1 pyarrow.dataset (kstore files)", timed(r1_pads, args.repeats))
        assert len(df) == n
        df = record("R1 pq.read_table (kstore files)", timed(r1_raw, args.repeats))
        assert len(df) == n
        df = record("R1 kstore read_dataset", timed(lambda: kstore.read_dataset(str(ks_dir), "sales"), args.repeats))
        assert len(df) == n

    # ---- R2 -------------------------------------------------------------------------
    if "R2" in steps:
        pred = [[("location", "==", Q_LOCATION)]]
        for label, path in (("", ks_dir), ("c", ksc_dir)):
            glob = f"{path}/sales/table/**/*.parquet"
            q = f"SELECT * FROM read_parquet('{glob}', hive_partitioning=true) WHERE location = {Q_LOCATION}"
            df = record(f"R2{label} duckdb (same files)", timed(lambda q=q: con.execute(q).df(), args.repeats))
            assert len(df) == expect_r2, (len(df), expect_r2)
            df = record(f"R2{label} pyarrow.dataset (same files)", timed(
                lambda p=path: ds.dataset(str(p / "sales" / "table"), format="parquet", partitioning=hive)
                .to_table(filter=ds.field("location") == Q_LOCATION).to_pandas(), args.repeats))
            assert len(df) == expect_r2
            # Arrow's floor: the scan kstore's reader runs (the files listed, no discovery,
            # no pre-buffering on a local disk, no partition column), then pandas
            listed = [str(f) for f in sorted((path / "sales" / "table").rglob("*.parquet"))]
            df = record(f"R2{label} pyarrow scan of the file list", timed(
                lambda fl=listed: ds.dataset(fl, format=LOCAL_PARQUET)
                .to_table(filter=ds.field("location") == Q_LOCATION).to_pandas(), args.repeats))
            assert len(df) == expect_r2
            df = record(f"R2{label} kstore read_dataset", timed(
                lambda p=path: kstore.read_dataset(str(p), "sales", predicates=pred), args.repeats))
            assert len(df) == expect_r2

    # ---- C1: compaction of 1,000 small files in 10 partitions --------------------------
    if "C1" in steps:
        c_dir = work / "compact"
        small = table.slice(0, min(n, 500_000))
        part = pa.array(pa.compute.cast(small.column("location"), pa.int64()).to_numpy() % 10)
        small = small.append_column("part", part)
        per = max(1, small.num_rows // 100)
        chunks = [small.slice(i * per, per) for i in range(100)]
        times_c = []
        for _ in range(args.repeats):
            rm(c_dir)
            kstore.store_dataset(str(c_dir), "c", iter(chunks), partition_on=["part"], secondary_indices=["location"])
            before = len(kstore.load_metadata(str(c_dir), "c").partitions)
            t0 = time.perf_counter()
            done = kstore.compact(str(c_dir), "c")
            times_c.append(time.perf_counter() - t0)
        after = len(kstore.load_metadata(str(c_dir), "c").partitions)
        print(f"  C1 compaction: {before} files -> {after} files ({done.rows} rows, {done.bytes_in} -> "
              f"{done.bytes_out} bytes)")
        record("C1 kstore.compact 1000 files", (statistics.median(times_c), times_c, None))

    def ratio(a: str, b: str) -> str:
        if a not in res or b not in res:
            return "n/a"
        return f"{res[a][0] / res[b][0]:.2f}x"

    print("\nratios (medians, same run):")
    lines = [
        ("W1 kstore / write_dataset", ratio("W1 kstore store_dataset", "W1 pyarrow.dataset.write_dataset"), "target <= 1.2x"),
        ("W1 kstore / duckdb", ratio("W1 kstore store_dataset", "W1 duckdb COPY PARTITION_BY"), ""),
        ("W1c kstore sorted / write_dataset", ratio("W1c kstore sort_by=location", "W1 pyarrow.dataset.write_dataset"), ""),
    ]
    if "R1 pq.read_table (kstore files)" in res:
        best = min(("R1 pyarrow.dataset (kstore files)", "R1 pq.read_table (kstore files)"), key=lambda k: res[k][0])
        lines.append(("R1 kstore / best of pyarrow", ratio("R1 kstore read_dataset", best), "target <= 1.1x"))
    lines += [
        ("R2 kstore / duckdb (unclustered)", ratio("R2 kstore read_dataset", "R2 duckdb (same files)"), ""),
        ("R2c kstore / duckdb (sort_by location)", ratio("R2c kstore read_dataset", "R2c duckdb (same files)"), "target <= 1.5x"),
        ("R2c kstore clustered / unclustered", ratio("R2c kstore read_dataset", "R2 kstore read_dataset"), ""),
        ("R2c Arrow's scan alone / duckdb (the floor)", ratio("R2c pyarrow scan of the file list", "R2c duckdb (same files)"), ""),
        ("R2c kstore / Arrow's scan alone", ratio("R2c kstore read_dataset", "R2c pyarrow scan of the file list"), ""),
    ]
    for name, r, target in lines:
        print(f"  {name:42s} {r:>7s}  {target}")
    if args.out:
        with open(args.out, "a") as fh:
            for k, (med, times) in res.items():
                fh.write(json.dumps({"step": k, "n": n, "seconds": med, "times": times}) + "\n")
    del files
    if not args.workdir:
        rm(work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
