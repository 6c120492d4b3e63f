"""M1 metadata scale (shared/bench/WORKLOAD.md): append cost and open + plan at P partitions.

For each P in ``--sizes``, kstore, plateau 4.6 and deltalake each get a dataset of P single-row
partitions (``part`` = 0..P-1 is the partition column, ``location = part % 1000``, ``qty``
int64), with a secondary index on ``location`` where the system has one (kstore, plateau;
Delta plans by per-file min/max statistics). Then, same run, same disk, interleaved:

- ``M1.setup``  (untimed for the ratios, but reported): writing the P partitions.
- ``M1.append``: one more single-row partition through the system's normal append
  (``kstore.update_dataset``, plateau ``update_dataset_from_dataframes``, ``write_deltalake(...,
  mode="append")``); median of ``--repeats``, repeat r appends ``part = P + r``.
- ``M1.plan``:   open the newest version and list the files that can hold ``location == 7``,
  in a fresh subprocess per repeat (imports done before the timer); median of ``--repeats``.
  The file count is checked against the truth (the partitions, appended ones included, whose
  ``location`` is 7).

  * kstore:    ``kstore.open_dataset(root, "m1").plan(predicates=[[("location", "==", 7)]])``;
    ``calls`` is ``plan.store_calls`` (open + plan).
  * plateau:   ``DatasetMetadata.load_from_store("m1", store, load_schema=False)``, then
    ``.load_index("location", store).query(location=7)`` and the partitions' files (no
    ``_common_metadata`` get: the cheapest public way; ``read_table`` would also load it).
  * deltalake: ``DeltaTable(path).file_uris(file_pruning_predicate=[("location", "=", 7)])``
    (deltalake's pruned listing: partition values, then per-file min/max statistics).

    python bench/metadata_scale.py                                   # P = 1000, 10000
    python bench/metadata_scale.py --sizes 100000 --systems kstore,deltalake

For kstore the append is also split (same appends, instrumented, behaviour unchanged):
``M1.append.log`` is the append without kartothek's view, with the log bytes per commit;
``M1.append.view`` is the time spent building and writing kartothek's view (main file and
index files, O(partitions) by nature) and its bytes (docs/FORMAT.md part E).

One JSON line per (system, P, step), the WORKLOAD.md keys ``{"system", "step", "seconds",
"calls", "rows", "note"}`` (``note`` starts with ``P=``), then a table of medians and ratios
(kstore / plateau, kstore / deltalake) and kstore's scaling (P / smallest P) for append and
plan. Exit status 1 if a step failed or planned a wrong number of files.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from typing import Any

import numpy as np
import pandas as pd

SYSTEMS = ("kstore", "plateau", "deltalake")
UUID = "m1"
VALUE = 7  # the planned query: location == VALUE


def frame(p: int, start: int = 0) -> pd.DataFrame:
    ids = np.arange(start, start + p, dtype="int64")
    return pd.DataFrame({"part": ids, "location": ids % 1000, "qty": np.ones(p, dtype="int64")})


def truth(p: int, appended: int) -> int:
    """Partitions among part = 0 .. p + appended - 1 whose location is VALUE."""
    return int(np.count_nonzero(np.arange(p + appended) % 1000 == VALUE))


# --------------------------------------------------------------------------------------
# setup and append (in this process)
# --------------------------------------------------------------------------------------


def _plateau_store(path: str) -> Any:
    from minimalkv import get_store_from_url

    return partial(get_store_from_url, "hfs://" + path)


#: from this P on, plateau's dataset is written by kstore (``--plateau-setup-from``): plateau
#: 4.6 needs over 8 minutes to write 100k partitions on the 2-core box; the two formats are
#: the same (kstore's interop promise), and plateau still does its own appends and plans
PLATEAU_SETUP_FROM: int | None = None


def setup(system: str, path: str, p: int) -> None:
    df = frame(p)
    if system == "kstore" or (system == "plateau" and PLATEAU_SETUP_FROM is not None and p >= PLATEAU_SETUP_FROM):
        import kstore

        kstore.store_dataset(path, UUID, df, partition_on=["part"], secondary_indices=["location"])
    elif system == "plateau":
        from plateau.api.dataset import store_dataframes_as_dataset

        store_dataframes_as_dataset(store=_plateau_store(path), dataset_uuid=UUID, dfs=[df],
                                    partition_on=["part"], secondary_indices=["location"])
    elif system == "deltalake":
        from deltalake import write_deltalake

        write_deltalake(path, df, partition_by=["part"])
    else:
        raise ValueError(system)


#: kstore's append, split (filled by :func:`append`): seconds spent on kartothek's view (main
#: file and index files: built, serialized, written) and bytes written to the log vs the view
KSTORE_SPLIT: list[dict[str, float]] = []
_VIEW = {"seconds": 0.0}


def _instrument_kstore() -> None:
    """Time the kartothek-view steps of kstore's commit (instrumentation only: behaviour unchanged)."""
    import kstore.blocks.commit as c

    if getattr(c, "_bench_instrumented", False):
        return
    for name in ("_kartothek_indices", "main_file_bytes", "_put_main"):
        f = getattr(c, name)

        def timed(*a: Any, _f: Any = f, **k: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return _f(*a, **k)
            finally:
                _VIEW["seconds"] += time.perf_counter() - t0

        setattr(c, name, timed)
    c._bench_instrumented = True  # type: ignore[attr-defined]


def append(system: str, path: str, part: int) -> None:
    df = frame(1, start=part)
    if system == "kstore":
        import kstore
        from kstore.core import naming
        from kstore.io.store import CountingStore

        _instrument_kstore()
        _VIEW["seconds"] = 0.0
        counting = CountingStore(path)
        t0 = time.perf_counter()
        kstore.update_dataset(counting, UUID, df)
        total = time.perf_counter() - t0
        st = kstore.open_store(path)
        log = view = 0
        for m, key in counting.keys:
            if m not in ("put", "put_if_absent") or "/table/" in key:
                continue
            size = len(st.get(key))
            if key.startswith(naming.log_prefix(UUID)):
                log += size
            else:
                view += size
        KSTORE_SPLIT.append({"total": total, "view_s": _VIEW["seconds"], "log_bytes": log, "view_bytes": view})
    elif system == "plateau":
        from plateau.api.dataset import update_dataset_from_dataframes

        update_dataset_from_dataframes([df], store=_plateau_store(path), dataset_uuid=UUID,
                                       partition_on=["part"], secondary_indices=["location"])
    elif system == "deltalake":
        from deltalake import write_deltalake

        write_deltalake(path, df, mode="append")
    else:
        raise ValueError(system)


# --------------------------------------------------------------------------------------
# open + plan (in a fresh child process: ``--child SYSTEM PATH``)
# --------------------------------------------------------------------------------------


def child(system: str, path: str) -> dict[str, Any]:
    """Import first, then time open + plan of ``location == VALUE``; the files planned."""
    calls: int | None = None
    detail: dict[str, int] = {}
    if system == "kstore":
        import kstore

        open_dataset = kstore.open_dataset  # (kstore imports lazily: load the API before the clock)
        t0 = time.perf_counter()
        plan = open_dataset(path, UUID).plan(predicates=[[("location", "==", VALUE)]])
        files = list(plan.keys)
        seconds = time.perf_counter() - t0
        calls, detail = plan.store_calls, dict(plan.calls_detail)
    elif system == "plateau":
        from minimalkv import get_store_from_url
        from plateau.core.dataset import DatasetMetadata

        t0 = time.perf_counter()
        store = get_store_from_url("hfs://" + path)
        meta = DatasetMetadata.load_from_store(UUID, store, load_schema=False).load_index("location", store)
        files = [key for label in meta.query(location=VALUE) for key in meta.partitions[label].files.values()]
        seconds = time.perf_counter() - t0
    elif system == "deltalake":
        from deltalake import DeltaTable

        t0 = time.perf_counter()
        files = DeltaTable(path).file_uris(file_pruning_predicate=[("location", "=", VALUE)])
        seconds = time.perf_counter() - t0
    else:
        raise ValueError(system)
    return {"seconds": seconds, "files": len(files), "calls": calls, "calls_detail": detail}


def plan_in_child(system: str, path: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", system, path],
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"child exited {out.returncode}: {out.stderr.strip()[-500:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------------------
# driver
# --------------------------------------------------------------------------------------


def emit(system: str, step: str, seconds: float | None, note: str, calls: int | None = None,
         rows: int | None = None) -> dict[str, Any]:
    line = {"system": system, "step": step, "seconds": None if seconds is None else round(seconds, 4),
            "calls": calls, "rows": rows, "note": note}
    print(json.dumps(line), flush=True)
    return line


def run_size(p: int, systems: list[str], repeats: int, workdir: str, results: dict, failed: list) -> None:
    paths = {s: os.path.join(workdir, f"{s}_{p}") for s in systems}
    live = []
    for s in systems:  # setup
        try:
            t0 = time.perf_counter()
            setup(s, paths[s], p)
            seconds = time.perf_counter() - t0
            results[(s, p, "M1.setup")] = seconds
            via = (" (written by kstore: --plateau-setup-from)" if s == "plateau" and PLATEAU_SETUP_FROM is not None
                   and p >= PLATEAU_SETUP_FROM else "")
            emit(s, "M1.setup", seconds, f"P={p}; write of {p} single-row partitions{via} (untimed in ratios)", rows=p)
            live.append(s)
        except Exception as exc:  # record, keep going
            failed.append((s, p, "M1.setup"))
            emit(s, "M1.setup", None, f"P={p}; error: {type(exc).__name__}: {exc}")

    times: dict[str, list[float]] = {s: [] for s in live}
    errors: dict[str, str] = {}
    for r in range(repeats):  # append, interleaved per repeat
        for s in live:
            if s in errors:
                continue
            try:
                t0 = time.perf_counter()
                append(s, paths[s], p + r)
                times[s].append(time.perf_counter() - t0)
            except Exception as exc:
                errors[s] = f"{type(exc).__name__}: {exc}"
    appended = {s: len(times[s]) for s in live}
    if "kstore" in live and KSTORE_SPLIT:
        split = KSTORE_SPLIT[-len(times["kstore"]):]
        view = statistics.median(x["view_s"] for x in split)
        log_only = statistics.median(x["total"] - x["view_s"] for x in split)
        results[("kstore", p, "M1.append.log")] = log_only
        results[("kstore", p, "M1.append.view")] = view
        emit("kstore", "M1.append.log", log_only,
             f"P={p}; the append without kartothek's view (median); log bytes per commit "
             f"{statistics.median(x['log_bytes'] for x in split):.0f}", rows=1)
        emit("kstore", "M1.append.view", view,
             f"P={p}; of the append: kartothek's view (main file + index files, built and written; median); "
             f"bytes {statistics.median(x['view_bytes'] for x in split):.0f}", rows=1)
        KSTORE_SPLIT.clear()
    for s in live:
        if s in errors:
            failed.append((s, p, "M1.append"))
            emit(s, "M1.append", None, f"P={p}; error after {appended[s]} appends: {errors[s]}")
        else:
            med = statistics.median(times[s])
            results[(s, p, "M1.append")] = med
            emit(s, "M1.append", med, f"P={p}; single-partition append, median of {repeats}: "
                 + ", ".join(f"{t:.4f}" for t in times[s]), rows=1)

    plans: dict[str, list[dict[str, Any]]] = {s: [] for s in live}
    errors = {}
    for _ in range(repeats):  # open + plan, a fresh process per repeat, interleaved
        for s in live:
            if s in errors:
                continue
            try:
                plans[s].append(plan_in_child(s, paths[s]))
            except Exception as exc:
                errors[s] = f"{type(exc).__name__}: {exc}"
    for s in live:
        want = truth(p, appended[s])
        if s in errors:
            failed.append((s, p, "M1.plan"))
            emit(s, "M1.plan", None, f"P={p}; error: {errors[s]}")
            continue
        runs = plans[s]
        med = statistics.median(x["seconds"] for x in runs)
        counts = sorted({x["files"] for x in runs})
        ok = counts == [want]
        if not ok:
            failed.append((s, p, "M1.plan"))
        detail = runs[-1]["calls_detail"]
        note = (f"P={p} (+{appended[s]} appended); files planned {counts[0] if len(counts) == 1 else counts}"
                f"/{p + appended[s]}, truth {want}{'' if ok else ' WRONG'}; fresh process per repeat, median of "
                f"{repeats}: " + ", ".join(f"{x['seconds']:.4f}" for x in runs))
        if detail:
            note += "; calls " + ", ".join(f"{k} {v}" for k, v in sorted(detail.items()))
        if ok:
            results[(s, p, "M1.plan")] = med
        emit(s, "M1.plan", med if ok else None, note, calls=runs[-1]["calls"])


def fmt(x: float | None, ratio: bool = False) -> str:
    if x is None:
        return "-"
    return f"{x:.2f}x" if ratio else f"{x:.4f}"


def label(p: int) -> str:
    return f"{p // 1000}k" if p % 1000 == 0 else str(p)


def report(results: dict, sizes: list[int], systems: list[str]) -> None:
    others = [s for s in systems if s != "kstore"]
    head = ["step", "P", *[f"{s} s" for s in systems]]
    if "kstore" in systems:
        head += [f"kstore/{o}" for o in others]
    rows = []
    for step in ("M1.setup", "M1.append", "M1.append.log", "M1.append.view", "M1.plan"):
        for p in sizes:
            vals = {s: results.get((s, p, step)) for s in systems}
            if all(v is None for v in vals.values()):
                continue
            row = [step, str(p), *[fmt(vals[s]) for s in systems]]
            if "kstore" in systems:
                for o in others:
                    k, v = vals["kstore"], vals[o]
                    row.append(fmt(k / v if k is not None and v else None, ratio=True))
            rows.append(row)
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    print()
    for r in [head, *rows]:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths)))
    base = min(sizes)
    print()
    for s in systems:
        for p in sizes:
            if p == base:
                continue
            parts = []
            steps = ("M1.append", "M1.append.log", "M1.plan") if s == "kstore" else ("M1.append", "M1.plan")
            for step in steps:
                a, b = results.get((s, base, step)), results.get((s, p, step))
                parts.append(f"{step} {fmt(b / a if a and b is not None else None, ratio=True)}")
            print(f"{s} scaling {label(p)}/{label(base)}: " + ", ".join(parts))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,10000", help="P values, comma separated (100000 only when asked)")
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--workdir", default=None, help="where the datasets go (default: a temp dir, deleted)")
    ap.add_argument("--plateau-setup-from", type=int, default=None, metavar="P",
                    help="from this P on, write plateau's dataset with kstore (same format; plateau's own "
                         "writer takes minutes at 100k); plateau still appends and plans itself")
    ap.add_argument("--child", nargs=2, metavar=("SYSTEM", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(*args.child)), flush=True)
        return
    global PLATEAU_SETUP_FROM
    PLATEAU_SETUP_FROM = args.plateau_setup_from
    sizes = [int(x) for x in args.sizes.split(",")]
    systems = [s for s in args.systems.split(",") if s]
    unknown = set(systems) - set(SYSTEMS)
    if unknown:
        ap.error(f"unknown systems {sorted(unknown)}; known: {', '.join(SYSTEMS)}")
    results: dict = {}
    failed: list = []
    with tempfile.TemporaryDirectory(dir=args.workdir) as workdir:
        for p in sizes:
            run_size(p, systems, args.repeats, workdir, results, failed)
    report(results, sizes, systems)
    if failed:
        print("failed: " + ", ".join(f"{s} P={p} {step}" for s, p, step in failed))
        sys.exit(1)


if __name__ == "__main__":
    main()
