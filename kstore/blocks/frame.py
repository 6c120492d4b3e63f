"""Reading a plan into a pandas DataFrame with bounded memory.

``to_pandas(read_plan(...))`` holds the whole Arrow table and the DataFrame at once, and
Arrow's pool keeps the decoded pages: about 2.4x the frame at the peak (5M WORKLOAD rows).
When the file table knows every planned file's row count and no row is filtered (no
residual predicate: full reads and reads pruned by partition only), :func:`read_frame`
allocates the frame's numeric, boolean and date/time columns once and decodes each file
into its slice, about one file per thread in flight, each batch's buffers freed (and
reused for the next) once copied. The other columns (strings, categoricals, time zones,
nested types) keep their per-file Arrow chunks and convert at the end exactly as
:func:`~kstore.blocks.read.to_pandas` converts them. The peak is the frame plus about one
file per thread and what the allocator keeps: 1.40-1.48x the frame for the 5M-row
WORKLOAD read.

The result equals ``to_pandas(read_plan(...))``: the same values, dtypes (an integer or
bool column with a null anywhere becomes pandas' nullable dtype, as there), column order
and index (a ``RangeIndex``, or the named index the data was written with). Whatever does
not fit (no row counts, a residual predicate, a file whose row count disagrees with the
file table) takes that path instead.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.types as pat

from kstore.blocks.read import index_columns, read_plan, read_task, to_pandas
from kstore.core.arguments import as_bool, as_columns
from kstore.core.metadata import DatasetMetadata
from kstore.core.planning import ReadPlan
from kstore.core.runtime import parallel_map, pool_size
from kstore.core.types import nullable_dtype, read_schema, schema_pandas_metadata
from kstore.io.store import Store

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["read_frame", "planned_rows"]

log = logging.getLogger("kstore.read")

#: the pool files are decoded into: Arrow's default (mimalloc) reuses the freed buffers of
#: one batch for the next. The system allocator gives them back to the OS and peaks lower
#: (1.2x the frame against 1.4x), but maps and faults fresh pages for every batch: in a
#: process whose other reads filled mimalloc, reads took 0.54 s against 0.29 s (5M rows)
_POOL = pa.default_memory_pool()


def planned_rows(meta: DatasetMetadata, plan: ReadPlan) -> list[int] | None:
    """The row count of each planned file, in task order, from the file table (no store
    call); None when it does not know them all (kartothek datasets, files without
    statistics, several tables sharing labels).

    >>> import pandas as pd, kstore
    >>> _ = kstore.store_dataset("memory://rows-doc", "d", pd.DataFrame({"p": [1, 1, 2], "x": [5, 6, 7]}), partition_on="p")
    >>> snap = kstore.open_dataset("memory://rows-doc", "d")
    >>> planned_rows(snap.metadata, snap.plan())
    [2, 1]
    """
    files = meta.files
    if not plan.tasks or "rows" not in files.base.column_names or not files.single_table():
        return None  # (a format-1 version's file table has no statistics: they are a file of their own)
    stats = files.stats()
    labels = pa.array([t.label for t in plan.tasks], pa.string())
    at = pc.index_in(labels, value_set=stats.column("label"))
    if at.null_count:
        return None
    rows = stats.column("rows").take(at)
    if rows.null_count:
        return None
    out: list[int] = rows.to_pylist()
    return out


@dataclass
class _Column:
    """One column of the frame: filled in place (``values``) or kept as Arrow chunks."""

    name: str
    type: pa.DataType
    values: np.ndarray | None = None  # preallocated; None: Arrow chunks (``chunks``)
    masked: bool = False  # the nullable dtype whatever the data (the dataset's pandas metadata)
    mask: np.ndarray | None = None  # True where null; made on the first null
    chunks: dict[int, pa.Array] = field(default_factory=dict)  # by first row

    def chunk_type(self) -> pa.DataType:
        return pa.large_string() if pat.is_string(self.type) else self.type


class _RowsDisagree(Exception):
    """A file holds another number of rows than the file table says."""


def _numpy_dtype(t: pa.DataType, numpy_type: str | None, dates_as_object: bool) -> tuple[np.dtype[Any] | None, bool]:
    """The numpy dtype a column of type ``t`` is filled into, and whether it is always
    masked; (None, False) for the columns that stay Arrow chunks."""
    if pat.is_float16(t):
        return None, False
    if nullable_dtype(numpy_type, t) is not None:
        return np.dtype(t.to_pandas_dtype()), True
    if pat.is_integer(t) or pat.is_boolean(t) or pat.is_floating(t):
        return np.dtype(t.to_pandas_dtype()), False
    if pat.is_timestamp(t) and t.tz is None:
        return np.dtype(f"datetime64[{t.unit}]"), False
    if pat.is_date32(t) and not dates_as_object:
        return np.dtype("datetime64[us]"), False  # as to_pandas: dates as timestamp[us]
    return None, False


def _empty(n: int, dtype: np.dtype[Any]) -> np.ndarray:
    """``np.empty(n, dtype)`` in Arrow's memory pool, as the Arrow path's frames are: a
    process that reads again reuses the pool's pages instead of faulting in fresh ones
    for every column (the array keeps its buffer alive).

    >>> a = _empty(3, np.dtype("int64")); a[:] = 7; a.tolist(), a.flags.writeable
    ([7, 7, 7], True)
    """
    return np.frombuffer(pa.allocate_buffer(n * dtype.itemsize, memory_pool=_POOL), dtype=dtype, count=n)


def _columns(plan: ReadPlan, names: Sequence[str], total: int, categoricals: Sequence[str],
             dates_as_object: bool) -> list[_Column]:
    rschema = read_schema(plan.schema)
    meta = schema_pandas_metadata(plan.schema) or {"columns": []}
    numpy_types = {c["field_name"]: c.get("numpy_type") for c in meta.get("columns", []) if c.get("field_name")}
    out = []
    for name in names:
        t = rschema.field(name).type
        dtype, masked = (None, False) if name in categoricals else _numpy_dtype(t, numpy_types.get(name),
                                                                                 dates_as_object)
        col = _Column(name, t, masked=masked)
        if dtype is not None:
            col.values = _empty(total, dtype)
        out.append(col)
    return out


def _fill(col: _Column, start: int, arr: pa.Array | pa.ChunkedArray, lock: threading.Lock) -> None:
    """Put ``arr`` (rows ``start`` ...) into the column: copied into its slice, or kept."""
    chunks = [arr] if isinstance(arr, pa.Array) else arr.chunks
    for chunk in chunks:
        _fill_chunk(col, start, chunk, lock)
        start += len(chunk)


def _fill_chunk(col: _Column, start: int, arr: pa.Array, lock: threading.Lock) -> None:
    if col.values is None:
        if pat.is_string(arr.type):
            arr = pc.cast(arr, pa.large_string(), memory_pool=_POOL)  # pandas' string arrays hold large strings
        col.chunks[start] = arr
        return
    stop = start + len(arr)
    if pat.is_date32(arr.type):
        arr = pc.cast(arr, pa.timestamp("us"), memory_pool=_POOL)
    if arr.null_count and (col.masked or pat.is_integer(arr.type) or pat.is_boolean(arr.type)):
        with lock:
            if col.mask is None:
                col.mask = np.zeros(len(col.values), np.bool_)
        col.mask[start:stop] = pc.is_null(arr, memory_pool=_POOL).to_numpy(zero_copy_only=False)
        arr = pc.coalesce(arr, pa.scalar(False if pat.is_boolean(arr.type) else 0, arr.type), memory_pool=_POOL)
    col.values[start:stop] = arr.to_numpy(zero_copy_only=False)


def _scan_local(store: Store, plan: ReadPlan, names: Sequence[str], cols: list[_Column], rows: Sequence[int],
                offsets: np.ndarray, lock: threading.Lock, max_workers: int | None) -> bool:
    """Fill ``cols`` from one ordered ``pyarrow.dataset`` scan of a plain local store's
    files (Arrow's threads decode, files opened by path); each batch goes to its file's
    next rows. False when the scan does not fit (not a plain local store, a file with
    duplicated column names) or fails: the caller then reads file by file, which also
    raises the precise error."""
    from kstore.blocks.arrow import has_duplicate_columns, plan_dataset
    from kstore.core.columns import file_names
    from kstore.io.arrowfs import is_plain_local

    if not is_plain_local(store):
        return False
    renames = file_names(plan.schema)  # (renamed columns: the dataset names them as the files do)
    try:
        dataset = plan_dataset(store, plan, names, in_files=True)
        fragments = list(dataset.get_fragments())
        task_of = {f.path: i for i, f in enumerate(fragments)}
        seen = [0] * len(fragments)
        threads = pool_size(len(fragments), max_workers, cpu_bound=True)
        # files in flight: about one per thread (Arrow's defaults, 4 files and 16 batches, hold
        # more than 2 cores decode: a peak of 1.42-1.51x the frame against 1.37-1.39x)
        projection: Any = {n: ds.field(renames.get(n, n)) for n in names} if renames else list(names)
        scanner = ds.Scanner.from_dataset(dataset, columns=projection, use_threads=threads > 1,
                                          memory_pool=_POOL, fragment_readahead=max(2, threads),
                                          batch_readahead=2 * max(2, threads))
        for tagged in scanner.scan_batches():
            i, batch = task_of[tagged.fragment.path], tagged.record_batch
            start = int(offsets[i]) + seen[i]
            seen[i] += batch.num_rows
            if seen[i] > rows[i]:
                raise _RowsDisagree(f"{plan.tasks[i].key!r} holds more than the {rows[i]} rows the file table says")
            for col, arr in zip(cols, batch.columns):
                _fill(col, start, arr, lock)
        # a file with duplicated column names was read silently (its first match): the caller
        # reads file by file, which names it (the scan kept every footer it read: no I/O here)
        if has_duplicate_columns(dataset):
            return False
    except (pa.ArrowException, OSError, ValueError, KeyError, TypeError):
        return False
    for i, n in enumerate(seen):
        if n != rows[i]:
            raise _RowsDisagree(f"{plan.tasks[i].key!r} holds {n} rows, the file table says {rows[i]}")
    return True


def _read_files(store: Store, plan: ReadPlan, names: Sequence[str], cols: list[_Column], offsets: np.ndarray,
                lock: threading.Lock, max_workers: int | None) -> None:
    """Fill ``cols`` file by file (``read_task``, files in parallel)."""

    def one(i: int) -> None:
        table = read_task(store, plan, plan.tasks[i], names, memory_pool=_POOL)
        start, stop = int(offsets[i]), int(offsets[i + 1])
        if table.num_rows != stop - start:
            raise _RowsDisagree(f"{plan.tasks[i].key!r} holds {table.num_rows} rows, the file table says "
                                f"{stop - start}")
        for col, arr in zip(cols, table.columns):
            _fill(col, start, arr, lock)

    parallel_map(one, range(len(plan.tasks)), max_workers=max_workers, cpu_bound=True)


def _assemble(plan: ReadPlan, cols: list[_Column], total: int, categoricals: Sequence[str],
              dates_as_object: bool) -> pd.DataFrame:
    import pandas as pd

    arrays: dict[str, Any] = {}
    rest = [c for c in cols if c.values is None]
    if rest:
        table = pa.table({c.name: pa.chunked_array([c.chunks[k] for k in sorted(c.chunks)], c.chunk_type())
                          for c in rest})
        for c in rest:
            c.chunks = {}
        frame = to_pandas(table, plan.schema, categoricals=[c for c in categoricals if c in table.column_names],
                          dates_as_object=dates_as_object, index=False)
        del table
        arrays.update((name, frame[name].array) for name in frame.columns)
    for c in cols:
        if c.values is None:
            continue
        if c.mask is None and not c.masked:
            arrays[c.name] = c.values
            continue
        mask = c.mask if c.mask is not None else np.zeros(total, np.bool_)
        if c.values.dtype == np.bool_:
            arrays[c.name] = pd.arrays.BooleanArray(c.values, mask, copy=False)
        elif c.values.dtype.kind == "f":
            arrays[c.name] = pd.arrays.FloatingArray(c.values, mask, copy=False)
        else:
            arrays[c.name] = pd.arrays.IntegerArray(c.values, mask, copy=False)
    frame = pd.DataFrame({c.name: arrays[c.name] for c in cols}, index=pd.RangeIndex(total), copy=False)
    index = index_columns(plan.schema, frame.columns)
    return frame.set_index(index) if index else frame


def read_frame(
    store: Store,
    plan: ReadPlan,
    columns: Sequence[str] | None = None,
    rows: Sequence[int] | None = None,
    *,
    categoricals: Sequence[str] | None = None,
    dates_as_object: bool = False,
    max_workers: int | None = None,
) -> pd.DataFrame:
    """``to_pandas(read_plan(store, plan, columns), ...)`` with bounded memory.

    Parameters
    ----------
    store, plan, columns
        As for :func:`~kstore.blocks.read.read_plan`.
    rows
        Each planned file's row count, in task order (:func:`planned_rows`); None reads
        through Arrow (the whole table, then pandas).
    categoricals, dates_as_object
        As for :func:`~kstore.blocks.read.to_pandas`.
    max_workers
        Files decoded at once (default: sized from the machine).

    Examples
    --------
    >>> import pandas as pd, kstore
    >>> _ = kstore.store_dataset("memory://frame-doc", "d", pd.DataFrame({"p": [1, 1, 2], "x": [5, 6, 7]}), partition_on="p")
    >>> snap = kstore.open_dataset("memory://frame-doc", "d")
    >>> plan = snap.plan()
    >>> read_frame(snap.store, plan, rows=planned_rows(snap.metadata, plan))
       p  x
    0  1  5
    1  1  6
    2  2  7
    """
    cats = list(as_columns(categoricals, "categoricals"))
    dates_as_object = as_bool(dates_as_object, "dates_as_object")
    names = list(columns if columns is not None else plan.columns)
    if rows is not None and (len(rows) != len(plan.tasks) or not names or set(cats) - set(names)
                             or any(t.residual is not None for t in plan.tasks)):
        rows = None
    total = sum(rows) if rows is not None else 0
    if rows is None or total == 0:
        return _via_arrow(store, plan, columns, cats, dates_as_object, max_workers)
    cols = _columns(plan, names, total, cats, dates_as_object)
    offsets = np.concatenate([[0], np.cumsum(np.asarray(rows, dtype=np.int64))])
    lock = threading.Lock()
    try:
        if not _scan_local(store, plan, names, cols, rows, offsets, lock, max_workers):
            cols = _columns(plan, names, total, cats, dates_as_object)  # afresh (a failed scan may have filled some)
            _read_files(store, plan, names, cols, offsets, lock, max_workers)
    except _RowsDisagree as exc:
        log.warning("dataset %r: %s; reading it through Arrow", plan.dataset_uuid, exc)
        del cols
        return _via_arrow(store, plan, columns, cats, dates_as_object, max_workers)
    return _assemble(plan, cols, total, cats, dates_as_object)


def _via_arrow(store: Store, plan: ReadPlan, columns: Sequence[str] | None, categoricals: Sequence[str],
               dates_as_object: bool, max_workers: int | None) -> pd.DataFrame:
    table = read_plan(store, plan, columns, max_workers=max_workers)
    return to_pandas(table, plan.schema, categoricals=categoricals, dates_as_object=dates_as_object)
