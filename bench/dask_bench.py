"""Dask side by side (issue #6): write the WORKLOAD data from a ddf, read it back filtered.

Systems, on the same persisted ``dask.dataframe`` (WORKLOAD.md data, N rows, seed 42):

- ``kstore``: :func:`kstore.dask.store_dataset` (partition_on ``day``, secondary index on
  ``location``) and :func:`kstore.dask.read_dataset` with the predicate ``location == 7``;
- ``dask``: ``ddf.to_parquet(partition_on=["day"])`` and ``dd.read_parquet(filters=...)``;
- ``plateau``: ``store_dataset_from_ddf`` (same partitioning and index) and
  ``read_dataset_as_ddf(predicates=...)``.

Steps: ``DW1`` write without a shuffle (each Dask partition writes one file per day it
holds: the layout all three produce by default), ``DW1s`` write with ``shuffle=True`` (one
file per day; kstore and plateau), ``DR2`` the filtered read of the ``DW1`` dataset into
pandas (rows checked against pandas filtering), ``DR2s`` the same on the ``DW1s``
dataset. Wall seconds are the median of ``--repeats`` runs; the write steps run the systems
interleaved (each repetition runs every system once, so a shared box's load hits them
alike) and, on the ``cluster`` scheduler, split each run into its tasks' summed compute and
the time after the last task ended (kstore's commit). One JSON line per step, then the
ratios of the medians::

    {"system": ..., "step": ..., "seconds": ..., "calls": ..., "rows": ..., "note": ...}

Run::

    python bench/dask_bench.py --n 5000000 --scheduler cluster   # 2 worker processes
    python bench/dask_bench.py --small --scheduler threads
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
from typing import Any

import dask
import dask.dataframe as dd
import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from side_by_side import make_data  # noqa: E402  (the WORKLOAD.md data, one definition)

Q_LOCATION = 7


def _timed(fn: Callable[[], Any], repeats: int) -> tuple[float, Any, list]:
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out, times


def _timed_tasks(fn: Callable[[], Any], client: Any) -> tuple[float, float | None, float | None]:
    """Wall seconds of ``fn()``; on a distributed client also the summed compute of its
    tasks and the seconds from the last task's end to ``fn``'s return."""
    if client is None:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0, None, None
    import distributed

    with distributed.get_task_stream(client) as ts:
        t0 = time.perf_counter()
        fn()
        wall = time.perf_counter() - t0
        returned = time.time()
    spans = [s for t in ts.data for s in t["startstops"] if s["action"] == "compute"]
    compute = sum(s["stop"] - s["start"] for s in spans)
    return wall, compute, (returned - max(s["stop"] for s in spans)) if spans else None


def _warm_up() -> None:
    import plateau.api.dataset  # noqa: F401
    import pyarrow.dataset  # noqa: F401

    import kstore.dask  # noqa: F401


def _count_files(root: str) -> int:
    return sum(1 for _, _, files in os.walk(root) for f in files if f.endswith(".parquet"))


def run_dask_bench(
    n: int = 5_000_000,
    *,
    npartitions: int = 8,
    scheduler: str = "cluster",
    repeats: int = 3,
    systems: tuple[str, ...] = ("kstore", "dask", "plateau"),
    workdir: str | None = None,
    emit: Callable[[dict], None] = lambda rec: print(json.dumps(rec), flush=True),
) -> list[dict]:
    """Run the Dask comparison; emit (and return) one record per (system, step)."""
    import kstore.dask as kd

    records: list[dict] = []

    def out(system: str, step: str, seconds: float, rows: int | None = None, note: str = "", times=()) -> None:
        rec = {"system": system, "step": step, "seconds": round(seconds, 3), "calls": None, "rows": rows,
               "note": (note + f"; runs {[round(t, 2) for t in times]}").strip("; ")}
        records.append(rec)
        emit(rec)

    root = tempfile.mkdtemp(prefix="kstore-dask-bench-", dir=workdir)
    client = cluster = None
    if scheduler == "cluster":
        import distributed

        cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                           dashboard_address=":0", silence_logs=40)
        client = distributed.Client(cluster)
        client.run(_warm_up)  # imports in the worker processes are not part of any step
        sched_cfg: Any = client
    else:
        sched_cfg = "threads"
    try:
        with dask.config.set(scheduler=sched_cfg):
            source = make_data(n).to_pandas()  # day: datetime.date objects -> date32 again when written
            expected_rows = int((source["location"] == Q_LOCATION).sum())
            pq_schema = pa.Schema.from_pandas(source.iloc[:1000], preserve_index=False)  # day: date32
            with dask.config.set({"dataframe.convert-string": False}):  # keep `day` as dates, not strings
                ddf = dd.from_pandas(source, npartitions=npartitions, sort=False).persist()
            if client is not None:
                distributed.wait(ddf)
            setting = (f"N={n}, {npartitions} dask partitions (persisted), scheduler={scheduler}, "
                       f"{os.cpu_count()} CPUs")
            emit({"system": "env", "step": "-", "seconds": None, "calls": None, "rows": n, "note": setting})

            paths = {s: {} for s in systems}
            for shuffle in (False, True):
                step = "DW1s" if shuffle else "DW1"
                writers: dict[str, Callable[[], Any]] = {}
                for system in systems:
                    path = os.path.join(root, f"{system}-{step}")
                    paths[system][step] = path
                    if system == "kstore":
                        def write(path=path, shuffle=shuffle):
                            return kd.store_dataset("file://" + path, "sales", ddf, partition_on=["day"],
                                                    secondary_indices=["location"], shuffle=shuffle)
                    elif system == "dask":
                        if shuffle:
                            del paths[system][step]
                            continue  # to_parquet has no shuffle option (ddf.shuffle + to_parquet is the user's job)

                        def write(path=path):
                            # dates in an object column: Dask cannot infer their Arrow type from the meta
                            return ddf.to_parquet(path, partition_on=["day"], write_index=False,
                                                  schema=pq_schema)
                    else:
                        from plateau.api.dataset import store_dataset_from_ddf

                        def write(path=path, shuffle=shuffle):
                            return store_dataset_from_ddf(ddf, "hfs://" + path, "sales", partition_on=["day"],
                                                          secondary_indices=["location"], shuffle=shuffle).compute()
                    writers[system] = write
                # interleaved: each repetition runs every system once, so a noisy neighbour
                # slows all of them alike; on a cluster, the task stream splits each run into
                # its tasks' compute and the time after the last task (the commit, for kstore)
                runs: dict[str, list[tuple[float, float | None, float | None]]] = {s: [] for s in writers}
                for _ in range(repeats):
                    for system, write in writers.items():
                        shutil.rmtree(paths[system][step], ignore_errors=True)
                        os.makedirs(paths[system][step])
                        runs[system].append(_timed_tasks(write, client))
                for system, rs in runs.items():
                    note = f"{_count_files(paths[system][step])} files"
                    if client is not None:
                        note += (f"; task compute {statistics.median(r[1] for r in rs):.2f} s"  # type: ignore[misc]
                                 f"; after the last task {statistics.median(r[2] for r in rs):.3f} s")  # type: ignore[misc]
                    out(system, step, statistics.median(r[0] for r in rs), n, note, [r[0] for r in rs])

                rstep = "DR2s" if shuffle else "DR2"
                for system in systems:
                    path = paths[system].get(step)
                    if path is None:
                        continue
                    if system == "kstore":
                        def read(path=path):
                            return kd.read_dataset("file://" + path, "sales",
                                                   predicates=[[("location", "==", Q_LOCATION)]]).compute()
                    elif system == "dask":
                        def read(path=path):
                            return dd.read_parquet(path, filters=[("location", "==", Q_LOCATION)]).compute()
                    else:
                        from plateau.api.dataset import read_dataset_as_ddf

                        def read(path=path):
                            return read_dataset_as_ddf("sales", "hfs://" + path, table="table",
                                                       predicates=[[("location", "==", Q_LOCATION)]]).compute()
                    seconds, got, times = _timed(read, repeats)
                    ok = len(got) == expected_rows and bool((got["location"] == Q_LOCATION).all())
                    out(system, rstep, seconds, len(got),
                        ("rows ok" if ok else f"ROWS WRONG (expected {expected_rows})"), times)
    finally:
        if client is not None:
            client.close()
            cluster.close()
        shutil.rmtree(root, ignore_errors=True)
    return records


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=5_000_000)
    ap.add_argument("--small", action="store_true", help="N = 200_000")
    ap.add_argument("--npartitions", type=int, default=8)
    ap.add_argument("--scheduler", choices=["cluster", "threads"], default="cluster")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--systems", default="kstore,dask,plateau")
    args = ap.parse_args(argv)
    records = run_dask_bench(200_000 if args.small else args.n, npartitions=args.npartitions,
                             scheduler=args.scheduler, repeats=args.repeats,
                             systems=tuple(args.systems.split(",")))
    sec = {(r["system"], r["step"]): r["seconds"] for r in records if r["seconds"]}
    print("\nratios (medians, same run):")
    for label, a, b, target in (("DW1 kstore / to_parquet", ("kstore", "DW1"), ("dask", "DW1"), "target <= 1.0x"),
                                ("DW1 plateau / to_parquet", ("plateau", "DW1"), ("dask", "DW1"), ""),
                                ("DR2 kstore / read_parquet", ("kstore", "DR2"), ("dask", "DR2"), "")):
        if a in sec and b in sec:
            print(f"  {label:28s} {sec[a] / sec[b]:.2f}x  {target}")
    return 0 if all("WRONG" not in r["note"] for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
