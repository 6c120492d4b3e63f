"""Upserts (issue #33): ``kstore.merge`` against deltalake's ``merge`` and Lance's
``merge_insert`` on the same data, in one run, interleaved per repetition.

Data: WORKLOAD.md's "sales" table (N rows, numpy seed 42) sorted by ``day``, with a key
``id`` = row number after the sort (keys arrive over time, as in a real table: each day's
file holds one range of ids). Each system starts every repetition from a fresh copy of its
dataset (the copy is not timed):

- kstore: ``store_dataset`` partitioned on ``day`` (100 files), no secondary index (the
  per-file statistics of ``id`` prune);
- deltalake: ``write_deltalake(partition_by=["day"])``;
- Lance: ``write_dataset`` and a BTREE scalar index on ``id``.

Sources (1% of N rows each, ``price`` changed):

- ``recent``: 90% of the newest day's keys updated, 10% new keys inserted (late corrections
  and new records: the everyday upsert of an incremental pipeline);
- ``random``: keys drawn uniformly from the whole table (every file holds some: a
  copy-on-write table rewrites all of them, Lance writes deletion files instead).

Each merge: matched rows updated with all columns, new keys inserted. Reported per system:
seconds (median), files read / rewritten / added where the system says, and the rows
checked after the first repetition (every source row reads back with its new price; the
row count is N + inserts).

::

    python bench/upsert.py --n 5000000 --repeats 3
    python bench/upsert.py --n 500000 --repeats 3 --sources recent   # quick
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from side_by_side import make_data  # noqa: E402

import kstore  # noqa: E402

UUID = "sales"


def base_table(n: int) -> pa.Table:
    t = make_data(n).sort_by("day")
    return t.append_column("id", pa.array(np.arange(n, dtype=np.int64)))


def source_rows(base: pa.Table, kind: str, seed: int = 7) -> pa.Table:
    """1% of the rows, ``price`` + 1000 (so an updated row is told apart), new keys appended."""
    rng = np.random.default_rng(seed)
    n = base.num_rows
    k = max(1, n // 100)
    if kind == "recent":
        last = base.filter(pc.equal(base["day"], pc.max(base["day"])))
        upd = last.take(pa.array(rng.choice(last.num_rows, min(last.num_rows, k * 9 // 10), replace=False)))
        new = base.take(pa.array(rng.choice(n, k - upd.num_rows, replace=False)))
        new = new.set_column(new.schema.get_field_index("id"), "id",
                             pa.array(np.arange(n, n + new.num_rows, dtype=np.int64)))
        new = new.set_column(0, "day", pa.array([last["day"][0].as_py()] * new.num_rows, pa.date32()))
        src = pa.concat_tables([upd, new])
    else:
        src = base.take(pa.array(np.sort(rng.choice(n, k, replace=False))))
    return src.set_column(src.schema.get_field_index("price"), "price", pc.add(src["price"], 1000.0))


# ---------------------------------------------------------------------------------------
# the systems: prepare once, then copy + merge per repetition
# ---------------------------------------------------------------------------------------


def prepare_kstore(base: pa.Table, root: Path) -> None:
    kstore.store_dataset(str(root), UUID, base, partition_on="day")


def merge_kstore(root: Path, src: pa.Table) -> dict[str, Any]:
    res = kstore.merge(str(root), UUID, src, on="id")  # type: ignore[attr-defined]
    return {"updated": res.updated, "inserted": res.inserted, "files_read": res.files_read,
            "files_rewritten": res.files_rewritten, "files_added": res.files_added}


def read_kstore(root: Path) -> pa.Table:
    return kstore.read_table(str(root), UUID, columns=["id", "price"])


def prepare_delta(base: pa.Table, root: Path) -> None:
    from deltalake import write_deltalake

    write_deltalake(str(root), base, partition_by=["day"])


def merge_delta(root: Path, src: pa.Table) -> dict[str, Any]:
    from deltalake import DeltaTable

    m = (DeltaTable(str(root)).merge(src, predicate="t.id = s.id", source_alias="s", target_alias="t")
         .when_matched_update_all().when_not_matched_insert_all().execute())
    return {"updated": m.get("num_target_rows_updated"), "inserted": m.get("num_target_rows_inserted"),
            "files_read": m.get("num_target_files_scanned"), "files_rewritten": m.get("num_target_files_removed"),
            "files_added": m.get("num_target_files_added"),
            "files_skipped": m.get("num_target_files_skipped_during_scan")}


def read_delta(root: Path) -> pa.Table:
    from deltalake import DeltaTable

    return pa.table(DeltaTable(str(root)).to_pyarrow_table(columns=["id", "price"]))


def prepare_lance(base: pa.Table, root: Path) -> None:
    import lance

    d = lance.write_dataset(base, str(root))
    d.create_scalar_index("id", "BTREE")


def merge_lance(root: Path, src: pa.Table) -> dict[str, Any]:
    import lance

    d = lance.dataset(str(root))
    before = len(d.get_fragments())
    r = d.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(src)
    after = lance.dataset(str(root))
    return {"updated": r.get("num_updated_rows"), "inserted": r.get("num_inserted_rows"), "files_read": None,
            "files_rewritten": None, "files_added": len(after.get_fragments()) - before,
            "note": "deletion files, no rewrite"}


def read_lance(root: Path) -> pa.Table:
    import lance

    return lance.dataset(str(root)).to_table(columns=["id", "price"])


SYSTEMS: dict[str, tuple[Callable[[pa.Table, Path], None], Callable[[Path, pa.Table], dict[str, Any]],
                         Callable[[Path], pa.Table]]] = {
    "kstore": (prepare_kstore, merge_kstore, read_kstore),
    "deltalake": (prepare_delta, merge_delta, read_delta),
    "lance": (prepare_lance, merge_lance, read_lance),
}


def check(read: pa.Table, base_rows: int, src: pa.Table, inserted: int) -> str:
    """Every source row reads back with its price; the row count is the base's plus inserts."""
    if read.num_rows != base_rows + inserted:
        return f"WRONG: {read.num_rows} rows, expected {base_rows + inserted}"
    got = read.filter(pc.is_in(read["id"], value_set=src["id"])).sort_by("id")
    want = src.select(["id", "price"]).sort_by("id")
    if not got.equals(want):
        return "WRONG: the source rows do not read back with their new values"
    return f"checked ({read.num_rows} rows)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=5_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sources", default="recent,random")
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()
    systems = [s for s in args.systems.split(",") if s]
    work = Path(args.workdir or tempfile.mkdtemp(prefix="kstore-upsert-"))
    work.mkdir(parents=True, exist_ok=True)
    base = base_table(args.n)
    new_rows = {kind: source_rows(base, kind) for kind in args.sources.split(",") if kind}
    for name in systems:
        t0 = time.perf_counter()
        SYSTEMS[name][0](base, work / f"{name}-base")
        print(f"# prepared {name} in {time.perf_counter() - t0:.1f} s", flush=True)
    for kind, src in new_rows.items():
        times: dict[str, list[float]] = {s: [] for s in systems}
        info: dict[str, dict[str, Any]] = {}
        for rep in range(args.repeats):
            for name in systems if rep % 2 == 0 else systems[::-1]:  # interleaved
                run = work / f"{name}-run"
                shutil.rmtree(run, ignore_errors=True)
                shutil.copytree(work / f"{name}-base", run)
                t0 = time.perf_counter()
                out = SYSTEMS[name][1](run, src)
                times[name].append(time.perf_counter() - t0)
                if rep == 0:
                    out["check"] = check(SYSTEMS[name][2](run), base.num_rows, src, int(out.get("inserted") or 0))
                    info[name] = out
        best_peer = min(statistics.median(times[s]) for s in systems if s != "kstore") if len(systems) > 1 else None
        for name in systems:
            med = statistics.median(times[name])
            row = {"source": kind, "system": name, "seconds": round(med, 3), "n": args.n, "source_rows": src.num_rows,
                   **info[name]}
            if name == "kstore" and best_peer:
                row["ratio_to_best_peer"] = round(med / best_peer, 2)
            print(json.dumps(row), flush=True)
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
