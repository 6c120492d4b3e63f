"""Side-by-side benchmark: the standard workload (shared/bench/WORKLOAD.md) for several systems.

Every selected system runs the same steps on the same deterministic data, in one run, on
local disk::

    python bench/side_by_side.py --small                       # N = 200_000, every step
    python bench/side_by_side.py --n 5000000 --steps W1,R1,R2,P1 --systems kstore,pyarrow,plateau

Systems: ``kstore``, ``plateau`` (4.6, the kartothek successor), ``pyarrow`` (raw
``pyarrow.parquet``: one ``pq.write_table`` per day, ``pq.read_table`` of the directory),
``pyarrow-dataset`` (``ds.write_dataset`` with hive partitioning, filtered scans). ``spark``
and ``dask`` are hooks that report "not yet" (their drivers come with later issues).

Per step: wall seconds (median of 3; a step whose first run takes > 60 s runs once), peak
RSS of the step (``/proc/self/status`` VmHWM after resetting it, so per step; in ``note``),
row counts (and the ``qty`` sum) checked against pandas filtering of the source (a mismatch
is an error line, and the exit status is 1), and for planning steps the number of storage
calls (kstore: :class:`kstore.io.store.CountingStore`; plateau: a counting proxy around the
minimalkv store; pyarrow: a counting ``pyarrow.fs`` handler). One JSON line per step::

    {"system": ..., "step": ..., "seconds": ..., "calls": ..., "rows": ..., "note": ...}

A failing system records an error line and the run goes on.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import gc
import json
import os
import platform
import resource
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

# --------------------------------------------------------------------------------------
# data (WORKLOAD.md "Data")
# --------------------------------------------------------------------------------------

START_DAY = dt.date(2024, 1, 1)
N_DAYS = 100
N_LOCATIONS = 1_000
N_PRODUCTS = 20_000
N_NOTES = 5_000
NOTE_LEN = 16
N_BUCKETS = 200
A1_ROWS = 50_000

Q_LOCATION = 7
Q_DAY = dt.date(2024, 2, 1)
Q_DAYS = [dt.date(2024, 1, 5), dt.date(2024, 1, 6)]

ALL_STEPS = ["W1", "R1", "R2", "R3", "R4", "P1", "A1", "M1", "W2", "R5", "P2"]
NEEDS = {"R1": "W1", "R2": "W1", "R3": "W1", "R4": "W1", "P1": "W1", "A1": "W1", "R5": "W2", "P2": "W2"}
SLOW_SECONDS = 60.0
REPEATS = 3


def note_vocabulary(rng: np.random.Generator, n: int = N_NOTES, length: int = NOTE_LEN) -> pa.Array:
    """``n`` distinct random lowercase strings of ``length`` characters."""
    codes = rng.integers(ord("a"), ord("z") + 1, size=(n, length), dtype=np.uint8)
    words = [row.tobytes().decode("ascii") for row in codes]
    if len(set(words)) != n:  # 26**16 possibilities: never happens, but the count is part of the spec
        raise RuntimeError("note vocabulary is not distinct")
    return pa.array(words, pa.string())


def make_data(n: int, seed: int = 42) -> pa.Table:
    """The "sales" table of WORKLOAD.md: deterministic for (n, seed).

    Draw order (fixed): day permutation, location, product, price, qty, note vocabulary,
    note choice.
    """
    rng = np.random.default_rng(seed)
    day_codes = rng.permutation(np.arange(n, dtype=np.int32) % N_DAYS)
    day = (np.datetime64(START_DAY, "D") + day_codes).astype("datetime64[D]")
    location = rng.integers(0, N_LOCATIONS, n, dtype=np.int64)
    product = rng.integers(0, N_PRODUCTS, n, dtype=np.int64)
    price = rng.uniform(0.0, 100.0, n)
    qty = rng.integers(1, 51, n, dtype=np.int32)
    vocab = note_vocabulary(rng)
    note = vocab.take(pa.array(rng.integers(0, N_NOTES, n, dtype=np.int32)))
    return pa.table(
        {
            "day": pa.array(day, pa.date32()),
            "location": pa.array(location, pa.int64()),
            "product": pa.array(product, pa.int64()),
            "price": pa.array(price, pa.float64()),
            "qty": pa.array(qty, pa.int32()),
            "note": note,
        }
    )


def make_a1_rows(day: dt.date, n: int = A1_ROWS, seed: int = 43) -> pa.Table:
    """The rows A1 appends: ``n`` rows of one new day (same columns as the source)."""
    t = make_data(n, seed)
    return t.set_column(0, "day", pa.array([day] * n, pa.date32()))


def make_m1_rows(p: int) -> pa.Table:
    """M1: ``p`` rows, one per day (so one single-row partition each); location = k % 1000."""
    k = np.arange(p, dtype=np.int64)
    day = (np.datetime64(START_DAY, "D") + k).astype("datetime64[D]")
    vocab = note_vocabulary(np.random.default_rng(44))
    return pa.table(
        {
            "day": pa.array(day, pa.date32()),
            "location": pa.array(k % N_LOCATIONS),
            "product": pa.array(k % N_PRODUCTS),
            "price": pa.array(k.astype(np.float64)),
            "qty": pa.array(np.ones(p, np.int32)),
            "note": vocab.take(pa.array(k % N_NOTES)),
        }
    )


def bucket_of(location: np.ndarray) -> np.ndarray:
    return (location * 7919) % N_BUCKETS


def split_by_bucket(table: pa.Table) -> list[pa.Table]:
    """The W2 pieces: one table per bucket (0..199), rows in source order, no bucket column."""
    buckets = bucket_of(table.column("location").to_numpy())
    order = np.argsort(buckets, kind="stable")
    counts = np.bincount(buckets, minlength=N_BUCKETS)
    sorted_t = table.take(pa.array(order))
    out, start = [], 0
    for c in counts:
        out.append(sorted_t.slice(start, int(c)))
        start += int(c)
    return out


@dataclass
class Expected:
    """What a correct answer looks like, from pandas filtering of the source."""

    rows: dict[str, int]
    qty: dict[str, int]
    files: dict[str, int]  # files that hold matching rows (a correct plan keeps >= this many)


def expected_from(table: pa.Table) -> Expected:
    chk = pd.DataFrame(
        {
            "day": table.column("day").to_numpy().astype("datetime64[s]"),
            "location": table.column("location").to_numpy(),
            "qty": table.column("qty").to_numpy().astype(np.int64),
        }
    )
    loc = chk["location"] == Q_LOCATION
    masks = {
        "R1": np.ones(len(chk), dtype=bool),
        "R2": loc,
        "R3": chk["day"] == pd.Timestamp(Q_DAY),
        "R4": chk["day"].isin([pd.Timestamp(d) for d in Q_DAYS]) & loc,
        "R5": loc,
    }
    rows = {k: int(np.asarray(m).sum()) for k, m in masks.items()}
    qty = {k: int(chk.loc[np.asarray(m), "qty"].sum()) for k, m in masks.items()}
    files = {"P1": int(chk.loc[loc, "day"].nunique()), "P2": 1}
    return Expected(rows, qty, files)


# --------------------------------------------------------------------------------------
# measuring
# --------------------------------------------------------------------------------------


class CheckError(AssertionError):
    """A system returned a wrong answer."""


class NotYet(Exception):
    """A hook that is not implemented yet."""


@dataclass
class Outcome:
    rows: int | None = None
    qty: int | None = None
    calls: int | None = None
    files: int | None = None  # files planned (planning steps)
    total_files: int | None = None
    note: str = ""


def frame_outcome(df: pd.DataFrame) -> Outcome:
    return Outcome(rows=len(df), qty=int(df["qty"].astype("int64").sum()))


def _status_kb(field_name: str) -> int | None:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _loadavg() -> str:
    try:
        return " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "?"


def _reset_peak_rss() -> bool:
    """Reset the process' peak RSS (Linux: write 5 to clear_refs); False where unsupported."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def _peak_rss_mb() -> float:
    kb = _status_kb("VmHWM")
    if kb is None:  # ru_maxrss: peak of the whole run, not of the step
        kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kb / 1024


@dataclass
class Record:
    system: str
    step: str
    seconds: float | None
    calls: int | None
    rows: int | None
    note: str
    ok: bool = True
    times: list[float] = field(default_factory=list)
    label: str = ""  # table label (M1 carries its P); not part of the JSON line

    def json(self) -> str:
        return json.dumps(
            {"system": self.system, "step": self.step, "seconds": self.seconds, "calls": self.calls,
             "rows": self.rows, "note": self.note}
        )


def measure(
    run: Callable[[int], Outcome],
    prepare: Callable[[int], None] | None,
    check: Callable[[Outcome], str],
    repeats: int = REPEATS,
) -> tuple[list[float], Outcome, str, float, float]:
    """Run ``prepare(rep)`` (untimed) then ``run(rep)`` (timed) up to ``repeats`` times.

    Returns (times, last outcome, check note, peak RSS MB, RSS MB before). A first run
    slower than SLOW_SECONDS is not repeated.
    """
    gc.collect()
    rss_before = (_status_kb("VmRSS") or 0) / 1024
    _reset_peak_rss()
    times: list[float] = []
    out = Outcome()
    note = ""
    for rep in range(repeats):
        if prepare is not None:
            prepare(rep)
        t0 = time.perf_counter()
        out = run(rep)
        times.append(time.perf_counter() - t0)
        note = check(out)
        if rep == 0 and times[0] > SLOW_SECONDS:
            break
    return times, out, note, _peak_rss_mb(), rss_before


# --------------------------------------------------------------------------------------
# storage-call counting for the other systems
# --------------------------------------------------------------------------------------


class CountingKV:
    """Proxy around a minimalkv store that counts calls of its public methods by name."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        if name in ("_inner", "calls"):
            raise AttributeError(name)
        attr = getattr(self._inner, name)
        if name.startswith("_") or not callable(attr):
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return attr(*args, **kwargs)

        return counted

    def __contains__(self, key: str) -> bool:
        self.calls["__contains__"] += 1
        return key in self._inner

    def __iter__(self) -> Iterator[str]:
        self.calls["__iter__"] += 1
        return iter(self._inner)


class CountingFSHandler(pafs.FileSystemHandler):
    """A ``pyarrow.fs`` handler over the local file system counting listing/info/open calls."""

    def __init__(self) -> None:
        self.fs = pafs.LocalFileSystem()
        self.calls: Counter[str] = Counter()

    def get_type_name(self) -> str:
        return "counting-local"

    def normalize_path(self, path: str) -> str:
        return self.fs.normalize_path(path)

    def equals(self, other: Any) -> bool:
        return self is other

    def get_file_info(self, paths: list[str]) -> list[pafs.FileInfo]:
        self.calls["get_file_info"] += len(paths)
        return self.fs.get_file_info(paths)

    def get_file_info_selector(self, selector: pafs.FileSelector) -> list[pafs.FileInfo]:
        self.calls["list"] += 1
        return self.fs.get_file_info(selector)

    def open_input_file(self, path: str) -> Any:
        self.calls["open"] += 1
        return self.fs.open_input_file(path)

    def open_input_stream(self, path: str) -> Any:
        self.calls["open"] += 1
        return self.fs.open_input_stream(path)

    def create_dir(self, path: str, recursive: bool) -> None:
        self.fs.create_dir(path, recursive=recursive)

    def delete_dir(self, path: str) -> None:
        self.fs.delete_dir(path)

    def delete_dir_contents(self, path: str, missing_dir_ok: bool = False) -> None:
        self.fs.delete_dir_contents(path, missing_dir_ok=missing_dir_ok)

    def delete_root_dir_contents(self) -> None:
        raise OSError("refusing to delete the root directory")

    def delete_file(self, path: str) -> None:
        self.fs.delete_file(path)

    def move(self, src: str, dest: str) -> None:
        self.fs.move(src, dest)

    def copy_file(self, src: str, dest: str) -> None:
        self.fs.copy_file(src, dest)

    def open_output_stream(self, path: str, metadata: Any) -> Any:
        return self.fs.open_output_stream(path, metadata=metadata)

    def open_append_stream(self, path: str, metadata: Any) -> Any:
        return self.fs.open_append_stream(path, metadata=metadata)


def counting_fs() -> tuple[pafs.PyFileSystem, CountingFSHandler]:
    handler = CountingFSHandler()
    return pafs.PyFileSystem(handler), handler


def fmt_calls(calls: Counter[str] | dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(calls.items()) if v)


# --------------------------------------------------------------------------------------
# systems
# --------------------------------------------------------------------------------------


class System:
    """One system under test. ``step_<name>(arg, rep)`` is timed; ``prepare_<name>`` is not.

    ``arg`` is None except for M1 (the partition count P). Steps a system cannot do are
    listed in ``unsupported`` with the reason.
    """

    name = "?"
    exact_index = False  # an inverted index: plans exactly the files that hold matches
    unsupported: dict[str, str] = {}

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.root = os.path.join(ctx.workdir, self.name)
        os.makedirs(self.root, exist_ok=True)

    def path(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    def rm(self, *parts: str) -> None:
        """Delete a dataset: its directory and (kartothek layout) ``<uuid>.by-dataset-metadata.*``."""
        shutil.rmtree(self.path(*parts), ignore_errors=True)
        if len(parts) == 1:
            for suffix in (".by-dataset-metadata.json", ".by-dataset-metadata.msgpack.zstd"):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(self.path(parts[0] + suffix))

    def close(self) -> None:
        self.rm()


@dataclass
class Context:
    workdir: str
    n: int
    table: pa.Table
    expected: Expected
    m1_sizes: list[int]
    _frame: pd.DataFrame | None = None
    _buckets: list[pa.Table] | None = None

    @property
    def frame(self) -> pd.DataFrame:
        """The source as pandas (dates as ``datetime.date`` objects: plateau keeps date32)."""
        if self._frame is None:
            self._frame = self.table.to_pandas()
        return self._frame

    @property
    def buckets(self) -> list[pa.Table]:
        if self._buckets is None:
            self._buckets = split_by_bucket(self.table)
        return self._buckets


def a1_day(rep: int) -> dt.date:
    return START_DAY + dt.timedelta(days=N_DAYS + rep)


DNF_R2 = [[("location", "==", Q_LOCATION)]]
DNF_R3 = [[("day", "==", Q_DAY)]]
DNF_R4 = [[("day", "in", Q_DAYS), ("location", "==", Q_LOCATION)]]


class KstoreSystem(System):
    name = "kstore"
    exact_index = True

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        import kstore
        import kstore.eager  # noqa: F401  (kstore imports lazily: load the API before any clock)
        import kstore.lifecycle  # noqa: F401
        from kstore.io.local import LocalStore
        from kstore.io.store import CountingStore

        self.ks = kstore
        self.store = LocalStore(self.root)
        self.counting = CountingStore

    def _plan(self, uuid: str, dnf: Any) -> Outcome:
        cs = self.counting(self.store)
        plan = self.ks.plan_read(cs, uuid, predicates=dnf)
        calls = sum(cs.calls.values())
        note = f"store calls: {fmt_calls(cs.calls)}"
        if plan.store_calls != calls:
            note += f"; plan.store_calls says {plan.store_calls}"
        return Outcome(calls=calls, files=len(plan.keys), total_files=plan.n_files, note=note)

    def prepare_W1(self, arg: Any, rep: int) -> None:
        self.rm("sales")

    def step_W1(self, arg: Any, rep: int) -> Outcome:
        meta = self.ks.store_dataset(self.store, "sales", self.ctx.table, partition_on=["day"],
                                     secondary_indices=["location"])
        return Outcome(files=len(meta.partitions), note="input: Arrow table")

    def step_R1(self, arg: Any, rep: int) -> Outcome:
        return frame_outcome(self.ks.read_dataset(self.store, "sales"))

    def step_R2(self, arg: Any, rep: int) -> Outcome:
        return frame_outcome(self.ks.read_dataset(self.store, "sales", predicates=DNF_R2))

    def step_R3(self, arg: Any, rep: int) -> Outcome:
        return frame_outcome(self.ks.read_dataset(self.store, "sales", predicates=DNF_R3))

    def step_R4(self, arg: Any, rep: int) -> Outcome:
        return frame_outcome(self.ks.read_dataset(self.store, "sales", predicates=DNF_R4))

    def step_P1(self, arg: Any, rep: int) -> Outcome:
        return self._plan("sales", DNF_R2)

    def step_A1(self, arg: Any, rep: int) -> Outcome:
        self.ks.update_dataset(self.store, "sales", make_a1_rows(a1_day(rep)))
        return Outcome()

    def check_A1(self, rep: int) -> int:
        return len(self.ks.read_dataset(self.store, "sales", columns=["qty"], predicates=[[("day", "==", a1_day(rep))]]))

    def setup_M1(self, p: int) -> str:
        uuid = f"m1_{p}"
        self.rm(uuid)
        rows = make_m1_rows(p)
        self.ks.store_dataset(self.store, uuid, rows.slice(0, 1), partition_on=["day"], secondary_indices=["location"])
        self.ks.update_dataset(self.store, uuid, rows.slice(1))
        return f"store_dataset of 1 row + update_dataset appending {p - 1} single-row partitions"

    def step_M1(self, p: int, rep: int) -> Outcome:
        return self._plan(f"m1_{p}", DNF_R2)

    def prepare_W2(self, arg: Any, rep: int) -> None:
        self.rm("sales_b")

    def step_W2(self, arg: Any, rep: int) -> Outcome:
        meta = self.ks.store_dataset(self.store, "sales_b", iter(self.ctx.buckets),
                                     secondary_indices=["location", "product"])
        return Outcome(files=len(meta.partitions), note="input: 200 Arrow tables, one file each")

    def step_R5(self, arg: Any, rep: int) -> Outcome:
        return frame_outcome(self.ks.read_dataset(self.store, "sales_b", predicates=DNF_R2))

    def step_P2(self, arg: Any, rep: int) -> Outcome:
        return self._plan("sales_b", DNF_R2)


class PlateauSystem(System):
    name = "plateau"
    exact_index = True

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        from minimalkv import get_store_from_url
        from plateau.api.dataset import read_table, store_dataframes_as_dataset, update_dataset_from_dataframes
        from plateau.core.factory import DatasetFactory
        from plateau.io_components.read import dispatch_metapartitions_from_factory

        self.url = "hfs://" + self.root
        self.kv = get_store_from_url(self.url)
        self.read_table = read_table
        self.store_dfs = store_dataframes_as_dataset
        self.update = update_dataset_from_dataframes
        self.factory = DatasetFactory
        self.dispatch = dispatch_metapartitions_from_factory

    def _plan(self, uuid: str, dnf: Any) -> Outcome:
        proxy = CountingKV(self.kv)
        # what plateau.api.dataset.read_table / dispatch_metapartitions do before reading
        factory = self.factory(uuid, store_factory=lambda: proxy, load_schema=True, load_all_indices=False)
        mps = list(self.dispatch(factory, predicates=dnf))
        files = [mp.file for mp in mps if mp.file]
        return Outcome(calls=sum(proxy.calls.values()), files=len(files), total_files=len(factory.partitions),
                       note=f"store calls: {fmt_calls(proxy.calls)}; DatasetFactory + dispatch_metapartitions")

    def prepare_W1(self, arg: Any, rep: int) -> None:
        self.rm("sales")
        _ = self.ctx.frame  # pandas conversion outside the timing

    def step_W1(self, arg: Any, rep: int) -> Outcome:
        meta = self.store_dfs(self.kv, "sales", [self.ctx.frame], partition_on=["day"],
                              secondary_indices=["location"])
        return Outcome(files=len(meta.partitions), note="input: pandas DataFrame")

    def _read(self, uuid: str, dnf: Any = None) -> Outcome:
        return frame_outcome(self.read_table(uuid, self.kv, predicates=dnf))

    def step_R1(self, arg: Any, rep: int) -> Outcome:
        return self._read("sales")

    def step_R2(self, arg: Any, rep: int) -> Outcome:
        return self._read("sales", DNF_R2)

    def step_R3(self, arg: Any, rep: int) -> Outcome:
        return self._read("sales", DNF_R3)

    def step_R4(self, arg: Any, rep: int) -> Outcome:
        return self._read("sales", DNF_R4)

    def step_P1(self, arg: Any, rep: int) -> Outcome:
        return self._plan("sales", DNF_R2)

    def prepare_A1(self, arg: Any, rep: int) -> None:
        self._a1 = make_a1_rows(a1_day(rep)).to_pandas()

    def step_A1(self, arg: Any, rep: int) -> Outcome:
        self.update([self._a1], store=self.kv, dataset_uuid="sales", partition_on=["day"],
                    secondary_indices=["location"])
        return Outcome(note="input: pandas DataFrame")

    def check_A1(self, rep: int) -> int:
        return len(self.read_table("sales", self.kv, columns=["qty"], predicates=[[("day", "==", a1_day(rep))]]))

    def setup_M1(self, p: int) -> str:
        uuid = f"m1_{p}"
        self.rm(uuid)
        rows = make_m1_rows(p).to_pandas()
        self.store_dfs(self.kv, uuid, [rows.iloc[:1]], partition_on=["day"], secondary_indices=["location"])
        self.update([rows.iloc[1:]], store=self.kv, dataset_uuid=uuid, partition_on=["day"],
                    secondary_indices=["location"])
        return f"store_dataframes_as_dataset of 1 row + update_dataset_from_dataframes of {p - 1} partitions"

    def step_M1(self, p: int, rep: int) -> Outcome:
        return self._plan(f"m1_{p}", DNF_R2)

    def prepare_W2(self, arg: Any, rep: int) -> None:
        self.rm("sales_b")
        if not hasattr(self, "_bucket_frames"):
            self._bucket_frames = [t.to_pandas() for t in self.ctx.buckets]

    def step_W2(self, arg: Any, rep: int) -> Outcome:
        meta = self.store_dfs(self.kv, "sales_b", self._bucket_frames, secondary_indices=["location", "product"])
        return Outcome(files=len(meta.partitions), note="input: 200 pandas DataFrames, one file each")

    def step_R5(self, arg: Any, rep: int) -> Outcome:
        return self._read("sales_b", DNF_R2)

    def step_P2(self, arg: Any, rep: int) -> Outcome:
        return self._plan("sales_b", DNF_R2)


def _hive_day() -> ds.Partitioning:
    return ds.partitioning(pa.schema([("day", pa.date32())]), flavor="hive")


def _to_filters(dnf: Any) -> list[list[tuple[str, str, Any]]]:
    return [list(conj) for conj in dnf]


def _files_with_matches(dataset: ds.Dataset, expr: ds.Expression) -> tuple[int, int]:
    """Fragments left after partition pruning and then row-group statistics (opens footers)."""
    frags = list(dataset.get_fragments(filter=expr))
    kept = sum(1 for f in frags if f.subset(filter=expr).num_row_groups > 0)
    return kept, len(frags)


class PyarrowSystem(System):
    """Raw pyarrow.parquet: the user splits by day and writes one file per day."""

    name = "pyarrow"

    def _split_write(self, table: pa.Table, base: str) -> int:
        codes = table.column("day").cast(pa.int32()).to_numpy()
        order = np.argsort(codes, kind="stable")
        sorted_t = table.take(pa.array(order))
        uniq, counts = np.unique(codes[order], return_counts=True)
        data = sorted_t.drop_columns(["day"])
        start = 0
        for code, cnt in zip(uniq, counts):
            day = dt.date(1970, 1, 1) + dt.timedelta(days=int(code))
            d = os.path.join(base, f"day={day.isoformat()}")
            os.makedirs(d, exist_ok=True)
            pq.write_table(data.slice(start, int(cnt)), os.path.join(d, "part-0.parquet"), compression="snappy")
            start += int(cnt)
        return len(uniq)

    def _read(self, base: str, dnf: Any = None, partitioning: Any = "day") -> Outcome:
        part = _hive_day() if partitioning == "day" else "hive"
        t = pq.read_table(base, partitioning=part, filters=_to_filters(dnf) if dnf else None)
        return frame_outcome(t.to_pandas())

    def _plan(self, base: str, dnf: Any, partitioning: Any = "day") -> Outcome:
        fs, handler = counting_fs()
        part = _hive_day() if partitioning == "day" else "hive"
        pds = pq.ParquetDataset(base, filesystem=fs, partitioning=part, filters=_to_filters(dnf))
        return Outcome(calls=sum(handler.calls.values()), files=len(pds.files),
                       note=f"fs calls: {fmt_calls(handler.calls)}; ParquetDataset(filters).files "
                            "(partition pruning only; row groups are pruned while reading)")

    def prepare_W1(self, arg: Any, rep: int) -> None:
        self.rm("sales")

    def step_W1(self, arg: Any, rep: int) -> Outcome:
        n = self._split_write(self.ctx.table, self.path("sales"))
        return Outcome(files=n, note="split by day (argsort) + one pq.write_table per day, sequential")

    def step_R1(self, arg: Any, rep: int) -> Outcome:
        return self._read(self.path("sales"))

    def step_R2(self, arg: Any, rep: int) -> Outcome:
        return self._read(self.path("sales"), DNF_R2)

    def step_R3(self, arg: Any, rep: int) -> Outcome:
        return self._read(self.path("sales"), DNF_R3)

    def step_R4(self, arg: Any, rep: int) -> Outcome:
        return self._read(self.path("sales"), DNF_R4)

    def step_P1(self, arg: Any, rep: int) -> Outcome:
        return self._plan(self.path("sales"), DNF_R2)

    def prepare_A1(self, arg: Any, rep: int) -> None:
        self._a1 = make_a1_rows(a1_day(rep))

    def step_A1(self, arg: Any, rep: int) -> Outcome:
        self._split_write(self._a1, self.path("sales"))
        return Outcome(note="one more pq.write_table (no metadata to update)")

    def check_A1(self, rep: int) -> int:
        t = pq.read_table(self.path("sales"), columns=["qty"], partitioning=_hive_day(),
                          filters=[("day", "==", a1_day(rep))])
        return t.num_rows

    def setup_M1(self, p: int) -> str:
        self.rm(f"m1_{p}")
        self._split_write(make_m1_rows(p), self.path(f"m1_{p}"))
        return f"{p} pq.write_table"

    def step_M1(self, p: int, rep: int) -> Outcome:
        return self._plan(self.path(f"m1_{p}"), DNF_R2)

    def prepare_W2(self, arg: Any, rep: int) -> None:
        self.rm("sales_b")
        os.makedirs(self.path("sales_b"))

    def step_W2(self, arg: Any, rep: int) -> Outcome:
        for b, t in enumerate(self.ctx.buckets):
            pq.write_table(t, self.path("sales_b", f"bucket-{b:03d}.parquet"), compression="snappy")
        return Outcome(files=len(self.ctx.buckets), note="200 pq.write_table, flat directory")

    def step_R5(self, arg: Any, rep: int) -> Outcome:
        return self._read(self.path("sales_b"), DNF_R2, partitioning=None)

    def step_P2(self, arg: Any, rep: int) -> Outcome:
        return self._plan(self.path("sales_b"), DNF_R2, partitioning=None)


class PyarrowDatasetSystem(System):
    """pyarrow.dataset with hive partitioning; planning prunes by partition and footer statistics."""

    name = "pyarrow-dataset"

    def _write(self, table: pa.Table, base: str, column: str = "day", **kw: Any) -> None:
        part = (_hive_day() if column == "day"
                else ds.partitioning(pa.schema([(column, table.schema.field(column).type)]), flavor="hive"))
        ds.write_dataset(table, base, format="parquet", partitioning=part,
                         existing_data_behavior="overwrite_or_ignore", **kw)

    def _dataset(self, base: str, column: str = "day", filesystem: Any = None) -> ds.Dataset:
        part = _hive_day() if column == "day" else ds.partitioning(pa.schema([(column, pa.int64())]), flavor="hive")
        return ds.dataset(base, format="parquet", partitioning=part, filesystem=filesystem)

    def _read(self, base: str, expr: ds.Expression | None = None, column: str = "day") -> Outcome:
        t = self._dataset(base, column).to_table(filter=expr)
        if column != "day":
            t = t.drop_columns([column])
        return frame_outcome(t.to_pandas())

    def _plan(self, base: str, expr: ds.Expression, column: str = "day") -> Outcome:
        fs, handler = counting_fs()
        kept, total = _files_with_matches(self._dataset(base, column, fs), expr)
        return Outcome(calls=sum(handler.calls.values()), files=kept, total_files=total,
                       note=f"fs calls: {fmt_calls(handler.calls)}; listing + partition pruning + "
                            "row-group statistics from every remaining footer")

    def prepare_W1(self, arg: Any, rep: int) -> None:
        self.rm("sales")

    def step_W1(self, arg: Any, rep: int) -> Outcome:
        self._write(self.ctx.table, self.path("sales"))
        return Outcome(note="ds.write_dataset(partitioning=[day], hive)")

    def step_R1(self, arg: Any, rep: int) -> Outcome:
        return self._read(self.path("sales"))

    def step_R2(self, arg: Any, rep: int) -> Outcome:
        return self._read(self.path("sales"), pc.field("location") == Q_LOCATION)

    def step_R3(self, arg: Any, rep: int) -> Outcome:
        return self._read(self.path("sales"), pc.field("day") == pa.scalar(Q_DAY, pa.date32()))

    def step_R4(self, arg: Any, rep: int) -> Outcome:
        expr = pc.field("day").isin(pa.array(Q_DAYS, pa.date32())) & (pc.field("location") == Q_LOCATION)
        return self._read(self.path("sales"), expr)

    def step_P1(self, arg: Any, rep: int) -> Outcome:
        return self._plan(self.path("sales"), pc.field("location") == Q_LOCATION)

    def prepare_A1(self, arg: Any, rep: int) -> None:
        self._a1 = make_a1_rows(a1_day(rep))

    def step_A1(self, arg: Any, rep: int) -> Outcome:
        self._write(self._a1, self.path("sales"), basename_template=f"a1-{rep}-{{i}}.parquet")
        return Outcome(note="ds.write_dataset into the existing directory")

    def check_A1(self, rep: int) -> int:
        day = pa.scalar(a1_day(rep), pa.date32())
        return self._dataset(self.path("sales")).count_rows(filter=pc.field("day") == day)

    def setup_M1(self, p: int) -> str:
        self.rm(f"m1_{p}")
        self._write(make_m1_rows(p), self.path(f"m1_{p}"), max_partitions=max(1024, p + 1))
        return f"one ds.write_dataset of {p} partitions"

    def step_M1(self, p: int, rep: int) -> Outcome:
        return self._plan(self.path(f"m1_{p}"), pc.field("location") == Q_LOCATION)

    def prepare_W2(self, arg: Any, rep: int) -> None:
        self.rm("sales_b")
        if not hasattr(self, "_bucketed"):
            b = bucket_of(self.ctx.table.column("location").to_numpy())
            self._bucketed = self.ctx.table.append_column("bucket", pa.array(b, pa.int64()))

    def step_W2(self, arg: Any, rep: int) -> Outcome:
        self._write(self._bucketed, self.path("sales_b"), column="bucket", max_partitions=N_BUCKETS + 1)
        return Outcome(note="ds.write_dataset(partitioning=[bucket], hive); no secondary indices")

    def step_R5(self, arg: Any, rep: int) -> Outcome:
        return self._read(self.path("sales_b"), pc.field("location") == Q_LOCATION, column="bucket")

    def step_P2(self, arg: Any, rep: int) -> Outcome:
        return self._plan(self.path("sales_b"), pc.field("location") == Q_LOCATION, column="bucket")


class SparkSystem(System):
    """Hook for the Spark driver (kstore.spark): not yet."""

    name = "spark"
    not_yet = "not yet: the Spark driver (kstore.spark) is a later issue"


class DaskSystem(System):
    """Hook for the Dask driver (kstore.dask): not yet."""

    name = "dask"
    not_yet = "not yet: the Dask driver (kstore.dask) is a later issue"


def run_spark_step(step: str) -> None:
    """Spark: write with the kstore Spark driver, read back as a Spark DataFrame. Not yet."""
    raise NotYet(SparkSystem.not_yet)


def run_dask_step(step: str) -> None:
    """Dask: kstore's dask write/read with a local cluster. Not yet."""
    raise NotYet(DaskSystem.not_yet)


SYSTEMS: dict[str, type[System]] = {
    s.name: s for s in (KstoreSystem, PlateauSystem, PyarrowSystem, PyarrowDatasetSystem, SparkSystem, DaskSystem)
}
DEFAULT_SYSTEMS = ["kstore", "plateau", "pyarrow", "pyarrow-dataset"]


# --------------------------------------------------------------------------------------
# the run
# --------------------------------------------------------------------------------------


def _check(step: str, system: System, ctx: Context, m1_need: int = -1) -> Callable[[Outcome], str]:
    exp = ctx.expected

    def check(out: Outcome) -> str:
        if step in exp.rows:
            want_rows, want_qty = exp.rows[step], exp.qty[step]
            if out.rows != want_rows or out.qty != want_qty:
                raise CheckError(f"{system.name} {step}: {out.rows} rows / qty sum {out.qty}, "
                                 f"expected {want_rows} / {want_qty} (pandas filtering of the source)")
            return "rows ok"
        if step in exp.files or step == "M1":
            need = m1_need if step == "M1" else exp.files.get(step, -1)
            if out.files is None:
                return ""
            if need >= 0 and out.files < need:
                raise CheckError(f"{system.name} {step}: planned {out.files} files, but {need} hold matching rows")
            if need >= 0 and system.exact_index and out.files != need:
                return f"over-planned: {out.files} > {need} needed"
            return ""
        if step == "W1" and out.files is not None and out.files != N_DAYS:
            raise CheckError(f"{system.name} W1: {out.files} files, expected {N_DAYS}")
        if step == "W2" and out.files is not None and out.files != N_BUCKETS:
            raise CheckError(f"{system.name} W2: {out.files} files, expected {N_BUCKETS}")
        return ""

    return check


def _m1_needed(p: int) -> int:
    return int((np.arange(p) % N_LOCATIONS == Q_LOCATION).sum())


def run_step(system: System, step: str, arg: Any, ctx: Context, repeats: int) -> Record:
    run_fn = getattr(system, f"step_{step}")
    prep_fn = getattr(system, f"prepare_{step}", None)
    extra: list[str] = []
    if step == "M1":
        t0 = time.perf_counter()
        how = system.setup_M1(arg)
        extra.append(f"P={arg}; setup ({how}) {time.perf_counter() - t0:.2f}s untimed")
    check = _check(step, system, ctx, _m1_needed(arg) if step == "M1" else -1)
    times, out, check_note, peak, before = measure(
        lambda rep: run_fn(arg, rep),
        (lambda rep: prep_fn(arg, rep)) if prep_fn else None,
        check,
        repeats,
    )
    if step == "A1":  # each repetition appended a new day: read each back (untimed)
        got = [system.check_A1(rep) for rep in range(len(times))]
        if any(g != A1_ROWS for g in got):
            raise CheckError(f"{system.name} A1: appended days read back {got} rows, expected {A1_ROWS} each")
        check_note = f"each appended day reads back {A1_ROWS} rows"
    med = statistics.median(times)
    parts = []
    if out.files is not None and step in ("P1", "P2", "M1"):
        total = out.total_files
        parts.append(f"files planned {out.files}" + (f"/{total}" if total is not None else ""))
    elif out.files is not None:
        parts.append(f"files {out.files}")
    parts += extra
    if out.note:
        parts.append(out.note)
    if check_note:
        parts.append(check_note)
    reps = f"{len(times)} rep" + ("s" if len(times) != 1 else "")
    if len(times) < repeats and times[0] > SLOW_SECONDS:
        reps += f" (first run > {SLOW_SECONDS:.0f}s)"
    parts.append(f"{reps}: " + " ".join(f"{t:.3f}" for t in times))
    parts.append(f"peak_rss {peak:.0f}MB (+{max(0.0, peak - before):.0f})")
    return Record(system.name, step, round(med, 4), out.calls, out.rows, "; ".join(parts), times=times,
                  label=f"M1 P={arg}" if step == "M1" else step)


def step_instances(steps: list[str], m1_sizes: list[int]) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for s in ALL_STEPS:
        if s not in steps:
            continue
        if s == "M1":
            out += [("M1", p) for p in m1_sizes]
        else:
            out.append((s, None))
    return out


class SystemRun:
    """One system's progress through the steps: what is built, what failed."""

    def __init__(self, name: str, ctx: Context, repeats: int, emit: Callable[[Record], None]) -> None:
        self.name, self.ctx, self.repeats, self.emit = name, ctx, repeats, emit
        self.cls = SYSTEMS[name]
        self.system: System | None = None
        self.setup_error: str | None = None
        self.done: set[str] = set()
        self.failed: set[str] = set()
        if not hasattr(self.cls, "not_yet"):
            try:
                self.system = self.cls(ctx)
            except Exception as exc:
                self.setup_error = f"error: cannot set up {name}: {exc!r}"

    def _skip(self, step: str, arg: Any, note: str, ok: bool = True) -> Record:
        return Record(self.name, step, None, None, None, note, ok=ok, label=f"M1 P={arg}" if step == "M1" else step)

    def run(self, step: str, arg: Any) -> None:
        name, cls = self.name, self.cls
        if hasattr(cls, "not_yet"):
            hook = run_spark_step if name == "spark" else run_dask_step
            try:
                hook(step)
            except NotYet as exc:
                self.emit(self._skip(step, arg, f"skipped: {exc}"))
            return
        if self.system is None:
            self.emit(self._skip(step, arg, self.setup_error or "error", ok=False))
            return
        need = NEEDS.get(step)
        if step in cls.unsupported:
            self.emit(self._skip(step, arg, f"skipped: {cls.unsupported[step]}"))
            return
        if need and need in self.failed:
            self.emit(self._skip(step, arg, f"skipped: {need} failed"))
            return
        if need and need not in self.done:  # prerequisite not selected: build it once, untimed
            try:
                prep = getattr(self.system, f"prepare_{need}", None)
                if prep is not None:
                    prep(None, 0)
                getattr(self.system, f"step_{need}")(None, 0)
                self.done.add(need)
            except Exception as exc:
                self.failed.add(need)
                self.emit(self._skip(step, arg, f"error: setup {need}: {exc!r}", ok=False))
                return
        try:
            rec = run_step(self.system, step, arg, self.ctx, self.repeats)
            self.done.add(step)
        except Exception as exc:
            self.failed.add(step)
            kind = "check failed" if isinstance(exc, CheckError) else "error"
            frames = [ln.strip() for ln in traceback.format_exc().splitlines() if ln.strip().startswith('File "')]
            where = frames[-1] if frames else ""
            rec = self._skip(step, arg, f"{kind}: {exc!r} [{where}]", ok=False)
        self.emit(rec)

    def close(self) -> None:
        if self.system is not None:
            with contextlib.suppress(Exception):
                self.system.close()


def run_all(systems: list[str], ctx: Context, steps: list[str], repeats: int, emit: Callable[[Record], None]) -> None:
    """Step by step, every system in turn (interleaved, so load drift hits all systems alike)."""
    runs = [SystemRun(name, ctx, repeats, emit) for name in systems]
    try:
        for step, arg in step_instances(steps, ctx.m1_sizes):
            for r in runs:
                r.run(step, arg)
                gc.collect()
    finally:
        for r in runs:
            r.close()


def print_table(records: list[Record], systems: list[str]) -> None:
    print()
    print("== seconds (median) by step ==")
    keys: list[str] = []
    cell: dict[tuple[str, str], str] = {}
    for r in records:
        key = r.label or r.step
        if key not in keys:
            keys.append(key)
        if r.seconds is not None:
            v = f"{r.seconds:.3f}"
            if r.calls is not None:
                v += f" ({r.calls} calls)"
        else:
            v = "error" if not r.ok else "-"
        cell[(key, r.system)] = v
    widths = [max(12, *(len(k) for k in keys))] + [max(len(s), 20) for s in systems]
    print("  ".join(h.ljust(w) for h, w in zip(["step"] + systems, widths)))
    for k in keys:
        print("  ".join([k.ljust(widths[0])] + [cell.get((k, s), "").ljust(w) for s, w in zip(systems, widths[1:])]))
    print()
    print("== details ==")
    print(f"{'system':<16} {'step':<10} {'seconds':>9} {'calls':>6} {'rows':>9}  note")
    for r in records:
        sec = f"{r.seconds:.4f}" if r.seconds is not None else "-"
        calls = str(r.calls) if r.calls is not None else "-"
        rows = str(r.rows) if r.rows is not None else "-"
        print(f"{r.system:<16} {r.label or r.step:<10} {sec:>9} {calls:>6} {rows:>9}  {r.note}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--small", action="store_true", help="N = 200_000 (default N = 5_000_000)")
    p.add_argument("--n", type=int, default=None, help="number of rows (overrides --small)")
    p.add_argument("--systems", default=",".join(DEFAULT_SYSTEMS),
                   help=f"comma-separated, from {', '.join(SYSTEMS)} (default: %(default)s)")
    p.add_argument("--steps", default=",".join(ALL_STEPS), help="comma-separated (default: %(default)s)")
    p.add_argument("--m1-sizes", default="1000,10000", help="M1 partition counts (default: %(default)s)")
    p.add_argument("--m1-large", action="store_true", help="also run M1 with P = 100_000")
    p.add_argument("--repeats", type=int, default=REPEATS, help="timed runs per step (median; default 3)")
    p.add_argument("--out", default=None, help="JSON lines file (default: bench/results/side_by_side_N<n>.jsonl)")
    p.add_argument("--workdir", default=None, help="where datasets are written (default: a temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the written datasets")
    args = p.parse_args(argv)
    args.n = args.n if args.n is not None else (200_000 if args.small else 5_000_000)
    args.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in args.systems if s not in SYSTEMS]
    if unknown:
        p.error(f"unknown systems {unknown}; choose from {list(SYSTEMS)}")
    args.steps = [s.strip().upper() for s in args.steps.split(",") if s.strip()]
    bad = [s for s in args.steps if s not in ALL_STEPS]
    if bad:
        p.error(f"unknown steps {bad}; choose from {ALL_STEPS}")
    args.m1_sizes = [int(x) for x in args.m1_sizes.split(",") if x.strip()]
    if args.m1_large and 100_000 not in args.m1_sizes:
        args.m1_sizes.append(100_000)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out_path = args.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                        f"side_by_side_N{args.n}.jsonl")
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    workdir = args.workdir or tempfile.mkdtemp(prefix="kstore-side-by-side-")
    os.makedirs(workdir, exist_ok=True)
    import plateau

    import kstore

    m1 = f" M1 P={args.m1_sizes}" if "M1" in args.steps else ""
    print(f"side_by_side: N={args.n:,} systems={args.systems} steps={args.steps}{m1}")
    print(f"  python {platform.python_version()}, pyarrow {pa.__version__}, pandas {pd.__version__}, "
          f"kstore {kstore.__version__}, plateau {plateau.__version__}, {os.cpu_count()} CPUs, "
          f"load average {_loadavg()}")
    print(f"  workdir {workdir} (local disk, warm page cache); results -> {out_path}")
    t0 = time.perf_counter()
    table = make_data(args.n)
    ctx = Context(workdir=workdir, n=args.n, table=table, expected=expected_from(table), m1_sizes=args.m1_sizes)
    print(f"  data: {table.num_rows:,} rows, {table.nbytes / 2**20:.0f} MiB in Arrow, made in {time.perf_counter() - t0:.1f}s")

    records: list[Record] = []
    with open(out_path, "w") as fh:

        def emit(rec: Record) -> None:
            records.append(rec)
            fh.write(rec.json() + "\n")
            fh.flush()
            sec = f"{rec.seconds:.4f}s" if rec.seconds is not None else "-"
            print(f"  {rec.system:<16} {rec.label or rec.step:<10} {sec:>10}  {rec.note}", flush=True)

        run_all(args.systems, ctx, args.steps, args.repeats, emit)
    print_table(records, args.systems)
    if not args.keep and args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)
    failed = [r for r in records if not r.ok]
    print(f"\n{len(records)} results, {len(failed)} errors; total {time.perf_counter() - t0:.0f}s; "
          f"load average now {_loadavg()}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
