"""Writing building blocks: input -> Arrow, split by partition, write files, indices, stats.

Workers (threads, Dask tasks, Spark executors) call :func:`write_partitions` and send back
only :class:`WrittenFile` records (keys, row counts, statistics, distinct values of indexed
columns). The commit (:mod:`kstore.blocks.commit`) turns those into one new version.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import json
import logging
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pyarrow.types as pat

from kstore.core import naming, runtime
from kstore.core.columns import ColumnNames, files_schema
from kstore.core.index import ColumnIndex, range_distinct
from kstore.core.runtime import pool_size
from kstore.core.stats import FileStats, file_stats
from kstore.core.types import (
    check_partition_type,
    duplicate_names,
    encode_partition_value,
    normalize_schema,
    normalize_type,
    schema_pandas_metadata,
    storage_schema,
    with_pandas_metadata,
    written_schema,
)
from kstore.core.writer_options import DEFAULT_OPTIONS, WriteOptions
from kstore.errors import (
    ColumnNotFoundError,
    InvalidArgumentError,
    LimitExceededError,
    StoreError,
    UnsupportedTypeError,
    short_repr,
)
from kstore.io.store import Store, delete_many

log = logging.getLogger("kstore.write")

__all__ = [
    "WrittenFile",
    "FileLayout",
    "to_arrow",
    "iter_tables",
    "table_schema",
    "split_partitions",
    "split_rows",
    "Split",
    "write_partitions",
    "delete_files",
    "write_index_file",
    "index_file_bytes",
    "write_stats_file",
    "write_common_metadata",
    "common_metadata_bytes",
    "PARQUET_OPTIONS",
    "parquet_bytes",
    "sort_rows",
    "ENGINE_TASK_THREADS",
]

#: threads one engine task (a Dask or Spark task) writes its files with: the engine runs one
#: task per core, so a pool inside each task would only oversubscribe the cores (measured:
#: Dask W1 tasks 20% slower with 2 threads each on 2 cores than with 1)
ENGINE_TASK_THREADS = 1

#: most rows one ``take`` gathers for a run of partitions (:meth:`Split.tables`): enough to
#: gather at Arrow's sequential speed, few enough that each writer thread holds little
GATHER_ROWS = 1 << 17

#: Parquet writer options for data files (kartothek 5.3 / pyarrow 6 can read them).
PARQUET_OPTIONS: dict[str, Any] = {"compression": "snappy", "write_statistics": True}


@dataclass(frozen=True, slots=True)
class WrittenFile:
    """What a worker reports about one written data file (small and picklable)."""

    label: str
    table: str
    key: str
    stats: FileStats
    index_values: Mapping[str, pa.Array] = field(default_factory=dict)
    #: ``(column, file name)`` of the columns the file holds under another name (a renamed
    #: column, a column added again after a drop: :mod:`kstore.core.columns`); the commit
    #: checks them against the version it commits
    renamed: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class FileLayout:
    """Where a write's data files go and how they are encoded (immutable): one file per
    value of ``partition_on``, each reporting the distinct values of ``index_columns`` (for
    the commit's indices), in ``table_name``, encoded as ``options`` say (sort order
    included). A write job, a compaction plan and a row delete each build one.

    >>> FileLayout(("p",), ("x",)).table_name
    'table'
    """

    partition_on: tuple[str, ...] = ()
    index_columns: tuple[str, ...] = ()
    table_name: str = naming.DEFAULT_TABLE
    options: WriteOptions = DEFAULT_OPTIONS
    #: the names the files hold columns under (:class:`~kstore.core.columns.ColumnNames` of
    #: the version written to; empty: every column under its own name)
    names: ColumnNames = ColumnNames()


def to_arrow(data: Any, *, dataset: str = "?", threads: int | None = None) -> pa.Table:
    """A pandas DataFrame, pyarrow Table or RecordBatch as a Table.

    A DataFrame's named index levels become columns (after the others), recorded as the
    index in the pandas metadata, as pandas' ``to_parquet`` stores them: kstore's pandas
    readers restore them as the index, other readers see columns. Unnamed levels (the
    default ``RangeIndex`` and any other) are dropped, as kartothek drops them.

    ``threads`` caps the threads that convert a DataFrame's columns (default: Arrow's
    choice, one per core for large frames); engine tasks pass 1, as Dask's own
    ``to_parquet`` does, since the engine already runs a task per core.

    >>> import pandas as pd
    >>> to_arrow(pd.DataFrame({"x": [1, 2]}, index=[5, 6]), threads=1).to_pydict()
    {'x': [1, 2]}
    >>> to_arrow(pd.DataFrame({"x": [1, 2]}, index=pd.Index(["a", "b"], name="k")), threads=1).to_pydict()
    {'x': [1, 2], 'k': ['a', 'b']}
    """
    import pandas as pd

    if isinstance(data, pa.Table):
        table = data
    elif isinstance(data, pa.RecordBatch):
        table = pa.Table.from_batches([data])
    elif isinstance(data, pd.DataFrame):
        if not all(isinstance(c, str) for c in data.columns):
            bad = [c for c in data.columns if not isinstance(c, str)]
            raise InvalidArgumentError(f"dataset {dataset!r}: column names must be strings, got {short_repr(bad)}")
        _check_duplicates(list(data.columns), dataset)
        table = _from_pandas(data, dataset, threads, index=_named_index(data, dataset))
    else:
        raise InvalidArgumentError(
            f"dataset {dataset!r}: data must be a pandas DataFrame, a pyarrow Table or RecordBatch "
            f"(or an iterable of them), got {type(data).__name__}"
        )
    names = table.column_names
    _check_duplicates(names, dataset)
    for n in names:
        if n.startswith("__index_level_"):
            table = table.drop_columns([n])
    target = storage_schema(table.schema)
    if not target.equals(table.schema, check_metadata=False):
        table = _cast_columns(table, target, dataset)
    return table


def _check_duplicates(names: Sequence[str], dataset: str) -> None:
    dupes = duplicate_names(names)
    if dupes:
        raise InvalidArgumentError(f"dataset {dataset!r}: duplicate column names {short_repr(dupes)}")


def _named_index(df: Any, dataset: str) -> list[str]:
    """The names of ``df``'s named index levels, which :func:`to_arrow` stores as columns;
    a name that is not a string, repeats, or is also a column's raises
    :class:`~kstore.errors.InvalidArgumentError` (nothing is dropped silently)."""
    named = [n for n in df.index.names if n is not None]
    if not named:
        return []
    bad = [n for n in named if not isinstance(n, str)]
    if bad:
        raise InvalidArgumentError(
            f"dataset {dataset!r}: the index level name(s) {short_repr(bad)} are not strings; kstore stores a named "
            "index as columns, whose names must be strings (rename it, or reset_index(drop=True) to drop it)")
    clash = sorted({n for n in named if n in df.columns} | set(duplicate_names(named)))
    if clash:
        raise InvalidArgumentError(
            f"dataset {dataset!r}: the index level(s) {short_repr(clash)} have the name of a column or of another "
            "level; kstore stores a named index as columns (rename it, or reset_index(drop=True) to drop it)")
    return named


def _from_pandas(df: Any, dataset: str, threads: int | None = None, index: Sequence[str] = ()) -> pa.Table:
    """``Table.from_pandas`` with every failure (and every silent change of a value) as a
    KstoreError naming the column; the named ``index`` levels become columns."""
    try:
        table = pa.Table.from_pandas(df, preserve_index=bool(index), nthreads=threads)
    except (pa.ArrowException, OverflowError, ValueError, TypeError, UnicodeError) as exc:
        column = next((c for c in df.columns if _fails(df[c])), None)
        if column is None:
            column = next((n for n in index if _fails(df.index.get_level_values(n))), None)
        where = f"dataset {dataset!r}: column {column!r}" if column is not None else f"dataset {dataset!r}"
        if isinstance(exc, UnicodeError):
            raise InvalidArgumentError(f"{where} holds a string that is not valid Unicode (a lone surrogate?): {exc}") from exc
        if isinstance(exc, OverflowError):
            raise UnsupportedTypeError(f"{where} holds an integer beyond 64 bits, which Arrow cannot store") from exc
        raise UnsupportedTypeError(f"{where} cannot be converted to Arrow: {exc}") from exc
    for name in df.columns:
        if df[name].dtype == object:
            _check_exact(df[name], table.schema.field(name).type, f"dataset {dataset!r}: column {name!r}")
    for name in index:
        level = df.index.get_level_values(name)
        if level.dtype == object:
            _check_exact(level, table.schema.field(name).type, f"dataset {dataset!r}: index {name!r}")
    return table


def _fails(series: Any) -> bool:
    try:
        pa.Array.from_pandas(series)
        return False
    except Exception:
        return True


def _check_exact(series: Any, t: pa.DataType, where: str) -> None:
    """Object columns Arrow converts by changing values: str in a bytes column (encoded), a
    datetime in a date column (time of day dropped), naive and aware datetimes mixed."""
    import datetime as dt

    import pandas as pd

    if pat.is_binary(t) or pat.is_large_binary(t):  # (one bytes value makes Arrow infer binary, so
        # a column inferred as string holds str only: nothing to check there)
        if pd.api.types.infer_dtype(series, skipna=True) == "mixed":
            kinds = {type(v).__name__ for v in series if isinstance(v, (str, bytes))}
            if len(kinds) > 1:
                raise InvalidArgumentError(f"{where} mixes bytes and str values; Arrow would store the str as bytes")
    elif pat.is_date(t):
        values = series.to_numpy()
        if any(issubclass(k, dt.datetime) for k in set(map(type, values))) and any(  # (the type set: C speed)
                isinstance(v, dt.datetime) and v.time() != dt.time(0) for v in values):
            raise InvalidArgumentError(f"{where} mixes dates and datetimes with a time of day, which a date column would drop")
    elif pat.is_timestamp(t):
        aware = {v.tzinfo is not None for v in series if isinstance(v, dt.datetime) and v == v}
        if len(aware) > 1:
            raise InvalidArgumentError(f"{where} mixes datetimes with and without a time zone")


def _cast_columns(table: pa.Table, target: pa.Schema, dataset: str) -> pa.Table:
    """Cast each column to its storage type; a value the storage type cannot hold exactly
    (a timestamp with nanoseconds) is refused, naming the column and the value."""
    arrays = []
    for name, col, f in zip(table.column_names, table.columns, target):
        if col.type.equals(f.type):
            arrays.append(col)
            continue
        try:
            arrays.append(col.cast(f.type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise UnsupportedTypeError(
                f"dataset {dataset!r}: column {name!r} is {col.type}, stored as {f.type}, and holds values "
                f"that type cannot hold exactly{_example(col)}; kstore stores timestamps in "
                f"microseconds (as Spark and kartothek): round them first, e.g. df[{name!r}].dt.floor('us')"
            ) from exc
    return pa.Table.from_arrays(arrays, schema=target)


def _example(col: pa.ChunkedArray) -> str:
    """`` such as <value>``: the first timestamp with nanoseconds (empty when there is none)."""
    if not pat.is_timestamp(col.type) or col.type.unit != "ns":
        return ""
    lost = pc.not_equal(col, pc.floor_temporal(col, unit="microsecond")).fill_null(False)
    idx = pc.index(lost, True).as_py()
    return f" such as {col[idx]}" if idx >= 0 else ""


def iter_tables(data: Any, *, dataset: str = "?") -> Iterator[pa.Table]:
    """Accept one frame/table or an iterable of them; yield Arrow tables lazily."""
    import pandas as pd

    if isinstance(data, (pa.Table, pa.RecordBatch, pd.DataFrame)):
        yield to_arrow(data, dataset=dataset)
        return
    if isinstance(data, (str, bytes, Mapping)) or not isinstance(data, Iterable):
        raise InvalidArgumentError(
            f"dataset {dataset!r}: data must be a DataFrame, a pyarrow Table, or an iterable of "
            f"them; got {type(data).__name__}"
        )
    for item in data:
        yield to_arrow(item, dataset=dataset)


def table_schema(
    table: pa.Table,
    *,
    partition_on: Sequence[str],
    secondary_indices: Sequence[str],
    dataset: str,
) -> pa.Schema:
    """Validate column choices and return the dataset schema of ``table``: its written
    types (:func:`~kstore.core.types.written_type`), partition keys first, with pandas
    metadata (nullable dtypes, a named index)."""
    names = table.column_names
    for what, cols in (("partition_on", partition_on), ("secondary_indices", secondary_indices)):
        missing = [c for c in cols if c not in names]
        if missing:
            raise ColumnNotFoundError(
                f"dataset {dataset!r}: {what} names column(s) {missing} not in the data "
                f"(columns: {', '.join(names)})"
            )
    if len(set(partition_on)) != len(partition_on):
        raise InvalidArgumentError(f"dataset {dataset!r}: partition_on lists a column twice: {list(partition_on)}")
    if partition_on and len(partition_on) == len(names):
        raise InvalidArgumentError(f"dataset {dataset!r}: partition_on uses every column; keep at least one data column")
    written = written_schema(table.schema)
    for c in partition_on:
        check_partition_type(c, normalize_type(written.field(c).type, c))
    for c in secondary_indices:
        t = written.field(c).type
        if pat.is_list(t) or pat.is_struct(t) or pat.is_decimal(t):
            raise UnsupportedTypeError(f"dataset {dataset!r}: column {c!r} has type {t}; it cannot have a secondary index")
    order = list(partition_on) + [n for n in written.names if n not in partition_on]
    written = pa.schema([written.field(n) for n in order])
    return with_pandas_metadata(written, schema_pandas_metadata(table.schema))


@dataclass(frozen=True, slots=True)
class Split:
    """Rows grouped by partition values without copying data: group ``g`` holds the rows
    ``order[starts[g]:starts[g + 1]]`` of ``data`` (the table without partition columns)."""

    values: list[tuple[Any, ...]]
    data: pa.Table
    order: np.ndarray | None  # None: one group holding every row in input order
    starts: np.ndarray

    def __len__(self) -> int:
        return len(self.values)

    def rows(self, g: int) -> int:
        return int(self.starts[g + 1] - self.starts[g])

    def table(self, g: int, sort_by: Sequence[str] = ()) -> pa.Table:
        """Group ``g``'s rows (one ``take``, done by the worker that writes the group),
        sorted by ``sort_by`` when given (the sort keys are gathered first, then every
        column once in the final order)."""
        idx = None if self.order is None else self.order[self.starts[g]:self.starts[g + 1]]
        if sort_by and self.rows(g) > 1:
            keys = self.data.select(list(sort_by))
            if idx is not None:
                keys = keys.take(pa.array(idx))
            by = pc.sort_indices(keys, sort_keys=[(c, "ascending") for c in sort_by]).to_numpy()
            idx = by if idx is None else idx[by]
        return self.data if idx is None else self.data.take(pa.array(idx))

    def tables(self, groups: Sequence[int], sort_by: Sequence[str] = ()) -> list[pa.Table]:
        """The tables of ``groups``, ascending group numbers: unsorted, one ``take`` gathers
        the rows from the first group's to the last's and each group is a zero-copy slice of
        it (a 625k-row chunk in 100 groups: 18 ms against 26-34 ms for a take per group);
        sorted, :meth:`table` per group.

        >>> s = split_rows(pa.table({"p": [2, 1, 2, 1], "x": [0, 1, 2, 3]}), ["p"])
        >>> s.values, [t.column("x").to_pylist() for t in s.tables([0, 1])]
        ([(2,), (1,)], [[0, 2], [1, 3]])
        """
        if sort_by or self.order is None or len(groups) < 2:
            return [self.table(g, sort_by) for g in groups]
        lo, hi = int(self.starts[groups[0]]), int(self.starts[groups[-1] + 1])
        block = self.data.take(pa.array(self.order[lo:hi]))
        return [block.slice(int(self.starts[g]) - lo, self.rows(g)) for g in groups]

    def runs(self, groups: Sequence[int], parts: int, max_rows: int | None = None) -> list[list[int]]:
        """``groups`` (ascending) cut into runs of consecutive groups for :meth:`tables`: at
        most ``max_rows`` (default :data:`GATHER_ROWS`) rows a run (a larger group alone)
        and, rows allowing, at least ``parts`` runs, so that ``parts`` writers share the work.

        >>> s = split_rows(pa.table({"p": [1, 1, 2, 3, 3, 3]}), ["p"])
        >>> s.runs([0, 1, 2], 2)
        [[0, 1], [2]]
        """
        total = sum(self.rows(g) for g in groups)
        cap = max(1, min(GATHER_ROWS if max_rows is None else max_rows, -(-total // max(1, parts))))
        out: list[list[int]] = []
        rows = 0
        for g in groups:
            if out and rows + self.rows(g) <= cap:
                out[-1].append(g)
                rows += self.rows(g)
            else:
                out.append([g])
                rows = self.rows(g)
        return out


def split_rows(table: pa.Table, partition_on: Sequence[str], *, dataset: str = "?") -> Split:
    """Group the rows of ``table`` by the values of ``partition_on`` (vectorized, no copy of
    the data: dictionary-encode each key column, combine the codes, one stable radix sort of
    small group ids; the rows are gathered later, per group, by :meth:`Split.table`)."""
    if not partition_on:
        return Split([()], table, None, np.array([0, table.num_rows]))
    if table.num_rows == 0:
        return Split([], table.drop_columns(list(partition_on)), None, np.array([0]))
    codes = np.zeros(table.num_rows, dtype=np.int64)
    for col in partition_on:
        arr = table.column(col)
        if arr.null_count:
            raise InvalidArgumentError(
                f"dataset {dataset!r}: partition column {col!r} has {arr.null_count} null value(s); "
                "partition values must not be null"
            )
        if pat.is_dictionary(arr.type):
            arr = arr.cast(arr.type.value_type)
        enc = arr.combine_chunks().dictionary_encode()
        codes = codes * len(enc.dictionary) + enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    # group ids are small and dense: count with bincount, order with a stable (radix) sort
    nbins = int(codes.max()) + 1 if len(codes) else 0
    if nbins <= 1 << 22:
        counts_all = np.bincount(codes, minlength=nbins)
        present = np.flatnonzero(counts_all)
        remap = np.zeros(nbins, dtype=np.int64)
        remap[present] = np.arange(len(present))
        inverse = remap[codes]
        counts = counts_all[present]
        ngroups = len(present)
    else:
        _, inverse, counts = np.unique(codes, return_inverse=True, return_counts=True)
        ngroups = len(counts)
    data = table.drop_columns(list(partition_on))
    starts = np.concatenate(([0], np.cumsum(counts)))
    if ngroups == 1:
        order = None
        first_rows = np.array([0])
    else:
        small = np.int16 if ngroups < (1 << 15) else (np.int32 if ngroups < (1 << 31) else np.int64)
        order = np.argsort(inverse.astype(small), kind="stable")
        first_rows = order[starts[:-1]]
    keys = table.select(list(partition_on)).take(pa.array(first_rows)).to_pylist()
    values = [tuple(k[c] for c in partition_on) for k in keys]
    return Split(values, data, order, starts)


def split_partitions(table: pa.Table, partition_on: Sequence[str], *, dataset: str = "?") -> list[tuple[tuple[Any, ...], pa.Table]]:
    """Group rows by the values of ``partition_on``: ``[(values, rows without those columns)]``."""
    split = split_rows(table, partition_on, dataset=dataset)
    return [(split.values[g], split.table(g)) for g in range(len(split))]


def _label_and_key(
    dataset_uuid: str, table_name: str, partition_on: Sequence[str], values: tuple[Any, ...], file_id: str | None,
) -> tuple[str, str]:
    label = naming.build_label(
        [(c, encode_partition_value(v)) for c, v in zip(partition_on, values)],
        file_id or naming.new_file_id(),
    )
    try:
        return label, naming.data_key(dataset_uuid, table_name, label)
    except LimitExceededError as exc:
        raise LimitExceededError(f"dataset {dataset_uuid!r}: partition {dict(zip(partition_on, values))}: {exc}") from exc


def sort_rows(data: pa.Table, sort_by: Sequence[str]) -> pa.Table:
    """``data`` sorted by ``sort_by`` (ascending, nulls last; stable)."""
    if not sort_by or data.num_rows < 2:
        return data
    keys = [(c, "ascending") for c in sort_by]
    order = pc.sort_indices(data, sort_keys=keys)  # nulls at the end (Arrow's default)
    return data.take(order)


def parquet_bytes(data: pa.Table, options: WriteOptions = DEFAULT_OPTIONS, *, presorted: bool = False) -> bytes:
    """One data file's bytes: ``data`` encoded with ``options`` (sorted by ``options.sort_by``
    first unless ``presorted``, the order recorded as the row groups' sorting columns)."""
    return _data_file(data, options, presorted=presorted)[0]


def file_schema_metadata(schema: pa.Schema) -> dict[bytes, bytes]:
    """The schema metadata of a data file holding ``schema``'s columns: fresh pandas
    metadata (no index; the input's nullable dtypes kept), which lets kartothek and
    plateau restore ``Int64`` and friends. It depends on the schema alone, so a writer
    computes it once for all the files it cuts from one table.

    >>> import json
    >>> meta = file_schema_metadata(pa.schema([("x", pa.int64())]))
    >>> [c["numpy_type"] for c in json.loads(meta[b"pandas"])["columns"]]
    ['int64']
    """
    return dict(_file_schema_metadata(schema.serialize().to_pybytes()))


@functools.lru_cache(maxsize=64)
def _file_schema_metadata(serialized: bytes) -> tuple[tuple[bytes, bytes], ...]:
    """:func:`file_schema_metadata` of a serialized schema (the bytes are the key: a schema's
    ``==`` ignores its metadata, which the result depends on); a stream of chunks of one
    schema pays for the pandas metadata once."""
    schema = pa.ipc.read_schema(pa.py_buffer(serialized))
    meta = with_pandas_metadata(schema.remove_metadata(), schema_pandas_metadata(schema), index=False).metadata
    return tuple((meta or {}).items())


def _data_file(data: pa.Table, options: WriteOptions, *, presorted: bool,
               plain: frozenset[str] = frozenset(), judge: bool = False,
               metadata: Mapping[bytes, bytes] | None = None,
               renames: Mapping[str, str] | None = None) -> tuple[bytes, frozenset[str]]:
    """:func:`parquet_bytes`, with ``use_dictionary="auto"``'s columns in ``plain`` written
    without a dictionary; with ``judge``, also returns the columns whose dictionary did not
    pay in this file (:func:`dictionary_misses`), which the writer's other files write plain.
    ``metadata``: :func:`file_schema_metadata` of ``data.schema``, when the caller has it.
    ``renames``: ``{column: file name}`` of the columns the file holds under another name."""
    data = data.replace_schema_metadata(file_schema_metadata(data.schema) if metadata is None else metadata)
    if renames:
        return _renamed_file(data, options, presorted=presorted, plain=plain, judge=judge, renames=renames)
    kwargs = options.parquet_kwargs()
    if options.sort_by:
        if not presorted:
            data = sort_rows(data, options.sort_by)
        kwargs["sorting_columns"] = pq.SortingColumn.from_ordering(
            data.schema, [(c, "ascending") for c in options.sort_by], null_placement="at_end")
    if "bloom_filter_options" in kwargs:  # size each filter for the rows of one row group
        ndv = max(1, min(data.num_rows, options.row_group_size or (1 << 20)))
        kwargs["bloom_filter_options"] = {c: {"ndv": ndv} for c in kwargs["bloom_filter_options"]}
    data = data.combine_chunks()
    auto = options.use_dictionary == "auto"
    if auto and plain:
        kwargs["use_dictionary"] = [c for c in data.column_names if c not in plain]
    if not (auto and judge):
        return _encoded(data, **kwargs), frozenset()
    collected: list[pq.FileMetaData] = []
    payload = _encoded(data, metadata_collector=collected, **kwargs)
    return payload, (dictionary_misses(collected[0], data) if collected else frozenset())


def _renamed_file(data: pa.Table, options: WriteOptions, *, presorted: bool, plain: frozenset[str], judge: bool,
                  renames: Mapping[str, str]) -> tuple[bytes, frozenset[str]]:
    """:func:`_data_file` of ``data`` with its columns under their file names (``renames``):
    the write options and the pandas metadata name them so too."""
    from kstore.core.columns import renamed_pandas_metadata

    if options.sort_by and not presorted:
        data = sort_rows(data, options.sort_by)
    meta = dict(data.schema.metadata or {})
    pandas = renamed_pandas_metadata(schema_pandas_metadata(data.schema), renames)
    if pandas is not None:
        meta[b"pandas"] = json.dumps(pandas).encode()
    stored = data.rename_columns([renames.get(c, c) for c in data.column_names]).replace_schema_metadata(meta)
    use_dictionary = options.use_dictionary
    if isinstance(use_dictionary, tuple):
        use_dictionary = tuple(renames.get(c, c) for c in use_dictionary)
    stored_options = replace(options, sort_by=tuple(renames.get(c, c) for c in options.sort_by),
                             bloom_filters=tuple(renames.get(c, c) for c in options.bloom_filters),
                             use_dictionary=use_dictionary)
    back = {f: c for c, f in renames.items()}
    payload, misses = _data_file(stored, stored_options, presorted=True,
                                 plain=frozenset(renames.get(c, c) for c in plain), judge=judge, metadata=meta)
    return payload, frozenset(back.get(c, c) for c in misses)


#: a dictionary pays when a column's chunks (dictionary page and indices, before
#: compression) take less than this share of its plain values' bytes (parquet-mr's test)
DICTIONARY_PAYS = 0.9


def _leaves(t: pa.DataType) -> int:
    """Parquet leaf columns of an Arrow type (a struct's fields, a list's items, a map's
    keys and values)."""
    if pat.is_dictionary(t):
        return _leaves(t.value_type)
    if pat.is_struct(t):
        return sum(_leaves(t.field(i).type) for i in range(t.num_fields))
    if pat.is_map(t):
        return _leaves(t.key_type) + _leaves(t.item_type)
    if pat.is_nested(t) and hasattr(t, "value_type"):  # every kind of list
        return _leaves(t.value_type)
    return 1


def dictionary_misses(meta: pq.FileMetaData, data: pa.Table) -> frozenset[str]:
    """Columns of ``data`` that its Parquet file (``meta``) dictionary-encoded although the
    dictionary did not pay: their chunks, dictionary page and indices before compression,
    take at least :data:`DICTIONARY_PAYS` of the plain values' bytes. Nearly unique values
    (prices, ids, timestamps) are such columns: the dictionary repeats every value, and
    building it costs the writer a hash of each. Only flat columns, not categoricals (the
    user chose their dictionary) nor booleans (Parquet has no dictionary for them).

    >>> import io, numpy as np
    >>> t = pa.table({"id": np.arange(5000), "few": np.arange(5000) % 7})
    >>> collected = []
    >>> pq.write_table(t, io.BytesIO(), metadata_collector=collected)
    >>> sorted(dictionary_misses(collected[0], t))
    ['id']
    """
    misses = []
    leaf = 0
    groups = [meta.row_group(r) for r in range(meta.num_row_groups)]
    for f, col in zip(data.schema, data.columns):
        n = _leaves(f.type)
        if n == 1:
            chunks = [g.column(leaf) for g in groups]
            if any(c.has_dictionary_page for c in chunks):  # (a column written plain has none)
                plain = _plain_bytes(col)
                if plain and sum(c.total_uncompressed_size for c in chunks) >= DICTIONARY_PAYS * plain:
                    misses.append(f.name)
        leaf += n
    return frozenset(misses)


def _plain_bytes(col: pa.ChunkedArray) -> int | None:
    """Bytes of the column's non-null values in Parquet's plain encoding (a 4-byte length
    before each string or binary value); None for the types :func:`dictionary_misses`
    leaves alone (nested, dictionary, boolean)."""
    t = col.type
    valid = len(col) - col.null_count
    if pat.is_string(t) or pat.is_large_string(t) or pat.is_binary(t) or pat.is_large_binary(t):
        return int(pc.sum(pc.binary_length(col)).as_py() or 0) + 4 * int(valid)
    if pat.is_integer(t) or pat.is_floating(t) or pat.is_temporal(t) or pat.is_decimal(t) \
            or pat.is_fixed_size_binary(t):
        return int(valid * t.bit_width // 8)
    return None


def _encoded(table: pa.Table, **kwargs: Any) -> bytes:
    """``pq.write_table(table, **kwargs)``'s bytes, encoded into an Arrow output stream: it
    grows in Arrow's pool without the GIL (a ``BytesIO`` takes it for every page written),
    so parallel writers do not contend."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, **kwargs)
    data: bytes = sink.getvalue().to_pybytes()
    return data


def _write_file(store: Store, layout: FileLayout, label: str, key: str, data: pa.Table, *,
                plain: frozenset[str] = frozenset(), judge: bool = False,
                metadata: Mapping[bytes, bytes] | None = None) -> tuple[WrittenFile, frozenset[str]]:
    """Write one data file; returns its record and (``judge``) the columns whose dictionary
    did not pay in it (:func:`_data_file`)."""
    renames = layout.names.mapping(data.column_names)
    payload, misses = _data_file(data, layout.options, presorted=True, plain=plain, judge=judge, metadata=metadata,
                                 renames=renames)
    store.put(key, payload)
    idx_values = {}
    for c in layout.index_columns:
        if c in layout.partition_on:
            continue
        col = data.column(c)
        if pat.is_dictionary(col.type):
            col = col.cast(col.type.value_type)
        idx_values[c] = _sorted_distinct(col)
    return WrittenFile(label, layout.table_name, key, file_stats(data, len(payload)), idx_values,
                       tuple(sorted(renames.items()))), misses


#: rows a file needs before its dictionary misses decide for a whole stream of chunks (a
#: small file holds few repeats even of a column with few values, and would mislead)
JUDGE_ROWS = 8192


class DictionaryChoice:
    """The columns whose dictionary did not pay (``use_dictionary="auto"``), learned from the
    first large file of a stream of chunks and used by its later files: one judgement per
    write instead of one per chunk, and the later files skip the dictionary those columns
    do not need. Thread-safe (chunks are written in parallel).

    >>> choice = DictionaryChoice()
    >>> choice.plain is None
    True
    >>> choice.record(frozenset({"price"}), rows=100_000)
    >>> choice.plain
    frozenset({'price'})
    """

    def __init__(self) -> None:
        self._plain: frozenset[str] | None = None
        self._lock = threading.Lock()

    @property
    def plain(self) -> frozenset[str] | None:
        """The columns to write without a dictionary (None: not judged yet)."""
        return self._plain

    def record(self, misses: frozenset[str], *, rows: int) -> None:
        if rows < JUDGE_ROWS:
            return
        with self._lock:
            self._plain = misses if self._plain is None else self._plain | misses


def _sorted_distinct(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    """A file's distinct non-null values of an indexed column, sorted where the type sorts
    (the commit takes sorted lists as they are; it sorts floats and the rest itself).
    Integers spanning a range not much wider than the file's rows are marked in a table
    of that range (:func:`~kstore.core.index.range_distinct`; no hashing, no sort: W2's
    25,000-row files of a 20,000-value ``product``, 0.2 ms a file instead of 0.85);
    integers in ascending order keep each first of a run; other integers sort in numpy
    (one pass, a third of Arrow's sort-and-take).

    >>> _sorted_distinct(pa.chunked_array([[3, 1, None, 3, 2]])).to_pylist()
    [1, 2, 3]
    >>> _sorted_distinct(pa.array([2**63 - 1, -2**63, 5])).to_pylist()
    [-9223372036854775808, 5, 9223372036854775807]
    """
    flat = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if pat.is_integer(flat.type) and len(flat) > flat.null_count:
        v = (flat.drop_null() if flat.null_count else flat).to_numpy()
        lo, hi = int(v.min()), int(v.max())
        if hi - lo + 1 <= max(4 * len(v), 1 << 16):  # a range not much wider than the rows
            return pa.array(range_distinct(v, lo, hi), flat.type)
        if len(v) > 1 and bool((v[1:] >= v[:-1]).all()):  # in order already (an id column): drop repeats
            return pa.array(v[np.concatenate(([True], v[1:] != v[:-1]))], flat.type)
    distinct = pc.unique(flat).drop_null()
    if pat.is_integer(distinct.type):
        return pa.array(np.sort(distinct.to_numpy()), distinct.type)
    if not pat.is_floating(distinct.type):
        with contextlib.suppress(pa.ArrowNotImplementedError):  # unsorted: the commit sorts
            distinct = distinct.take(pc.array_sort_indices(distinct))
    return distinct


def write_partitions(
    store: Store,
    dataset_uuid: str,
    table: pa.Table,
    layout: FileLayout = FileLayout(),
    *,
    file_id: str | None = None,
    max_workers: int | None = None,
    dictionaries: DictionaryChoice | None = None,
) -> list[WrittenFile]:
    """Split ``table`` by ``layout.partition_on`` and write one Parquet file per partition value.

    Files are written in parallel threads (Arrow releases the GIL while encoding). Returns
    one :class:`WrittenFile` per file; nothing is committed here. ``dictionaries`` carries
    the dictionary choice from one call to the next (the chunks of one write).
    """
    split = split_rows(table, layout.partition_on, dataset=dataset_uuid)
    # every key first: a partition value that cannot be a key fails before any file is written
    named = [(_label_and_key(dataset_uuid, layout.table_name, layout.partition_on, split.values[g], file_id), g)
             for g in range(len(split)) if split.rows(g) > 0]
    keys = {g: lk for lk, g in named}
    threads = pool_size(len(named), max_workers, cpu_bound=True)
    # runs of groups, one gather each, a few per thread (bounded memory: one run a thread)
    runs = split.runs([g for _, g in named], threads * 4)
    metadata = file_schema_metadata(split.data.schema)  # every file's slice has this schema

    def work(run: list[int]) -> list[WrittenFile]:
        done: dict[int, WrittenFile] = {}  # the worker gathers its run's rows: parallel, one run at a time
        key = None
        try:
            tables = split.tables(run, layout.options.sort_by)
            # use_dictionary="auto": the run's largest file goes first, with a dictionary for
            # every column, and its misses are the columns the run's other files write plain
            # (a small file would mislead: it holds few repeats even of a column with few values)
            first = max(range(len(run)), key=lambda i: tables[i].num_rows)
            known = dictionaries.plain if dictionaries is not None else None
            plain: frozenset[str] = known or frozenset()
            for i in [first, *(i for i in range(len(run)) if i != first)]:
                label, key = keys[run[i]]
                judge = i == first and known is None and (len(run) > 1 or dictionaries is not None)
                done[i], misses = _write_file(store, layout, label, key, tables[i], plain=plain, judge=judge,
                                              metadata=metadata)
                plain |= misses
                if judge and dictionaries is not None:
                    dictionaries.record(misses, rows=tables[i].num_rows)
        except BaseException:
            # this run's files, and the key being put: a put that failed may still have landed
            delete_keys(store, [f.key for f in done.values()] + ([key] if key is not None else []))
            raise
        return [done[i] for i in range(len(run))]

    written: list[WrittenFile] = []
    try:
        threads = min(threads, len(runs))
        if threads <= 1:
            for run in runs:
                written.extend(work(run))
        else:
            with ThreadPoolExecutor(threads) as pool:
                futures = [pool.submit(work, run) for run in runs]
            failed = [exc for f in futures if (exc := f.exception()) is not None]
            written = [w for f in futures if f.exception() is None for w in f.result()]
            if failed:
                raise failed[0]
        log.debug("dataset %r: wrote %d file(s), %d row(s), %d byte(s) (%d thread(s); not committed yet)",
                  dataset_uuid, len(written), sum(w.stats.rows for w in written),
                  sum(w.stats.nbytes for w in written), threads)
        return written
    except BaseException:
        delete_files(store, written)  # a failed call leaves no file behind
        raise


def delete_files(store: Store, files: Sequence[WrittenFile]) -> None:
    """Best-effort delete of written files (GC removes what is left)."""
    delete_keys(store, [f.key for f in files])


def delete_keys(store: Store, keys: Sequence[str]) -> None:
    """Best-effort delete of keys (GC removes what is left)."""
    try:
        delete_many(store, keys)
    except Exception:
        pass


def delete_by_token(store: Store, dataset_uuid: str, table: str, token: str) -> None:
    """Best effort: delete the data files of one distributed job (a Dask write, a Dask or
    Spark compaction), found by the job's ``token`` in their file id
    (:func:`kstore.core.naming.tagged_file_id`); GC removes the rest."""
    marker = f"_{token[:8]:0>8}"
    try:
        keys = [k for k in store.iter_prefix(naming.table_prefix(dataset_uuid, table))
                if marker in k.rsplit("/", 1)[-1]]
    except Exception:
        return
    delete_keys(store, keys)


def _parquet_native(t: pa.DataType) -> bool:
    """Types a Parquet reader restores exactly without the stored Arrow schema."""
    return bool(pat.is_integer(t) or pat.is_floating(t) or pat.is_boolean(t) or pat.is_string(t)
                or pat.is_binary(t) or pat.is_date32(t) or (pat.is_timestamp(t) and t.tz is None))


def index_file_bytes(index: ColumnIndex) -> bytes:
    """An index in kartothek's on-disk format: ``<column>`` values and ``partition``, a
    ``list<string>`` of labels per value.

    The labels go to the writer dictionary-encoded (the index's label ids into its unique
    labels) instead of one string per (value, label) pair for the writer to hash again:
    Parquet stores dictionary-encoded strings either way, and readers get
    ``list<string>`` back. Without the stored Arrow schema (which would say
    "dictionary"), so only for value types Parquet restores exactly by itself; others are
    written from the strings. Statistics for the value column only: min/max labels of the
    ``partition`` lists prune nothing and cost more than half the encoding (12 of 21 ms
    for 800 files x 1,000 values).

    >>> import pyarrow as pa, pyarrow.parquet as pq
    >>> idx = ColumnIndex.build("x", pa.array([1, 2, 1]), pa.array(["a", "a", "b"]))
    >>> pq.read_table(pa.BufferReader(index_file_bytes(idx))).to_pydict()
    {'x': [1, 2], 'partition': [['a', 'b'], ['a']]}
    """
    if _parquet_native(index.values.type) and pat.is_string(index.labels.type):
        labels = pa.DictionaryArray.from_arrays(pa.array(index.label_ids, pa.int32()), index.labels)
        lists = pa.ListArray.from_arrays(pa.array(index.offsets.astype(np.int32)), labels)
        table = pa.table({index.column: index.values, "partition": lists})
        kwargs: dict[str, Any] = {}
        if (pat.is_integer(index.values.type) or pat.is_date32(index.values.type) or pat.is_timestamp(index.values.type)
                ) and index.column != "partition.list.element":  # (a column of the labels' path name)
            # sorted distinct integers: delta encoding stores their small steps in a few
            # bits (5M ids: 12 MB -> 50 KB) and spares a dictionary that cannot pay
            # (0.18 s -> 0.11 s); the labels keep theirs
            kwargs = {"use_dictionary": ["partition.list.element"],
                      "column_encoding": {index.column: "DELTA_BINARY_PACKED"}}
        return _encoded(table, compression="snappy", store_schema=False, write_statistics=[index.column], **kwargs)
    return _encoded(index.to_table(), compression="snappy", write_statistics=[index.column])


def write_index_file(store: Store, dataset_uuid: str, index: ColumnIndex) -> str:
    """Write an index in the on-disk format under a fresh key; returns the key."""
    payload = index_file_bytes(index)
    now = runtime.current().now()
    for step in range(1_000_000):  # a fresh timestamp per file; a collision moves on by 1 us
        key = naming.index_key(dataset_uuid, index.column,
                               naming.index_timestamp(now + datetime.timedelta(microseconds=step)))
        if store.put_if_absent(key, payload):
            return key
    raise StoreError(f"dataset {dataset_uuid!r}: no free key for an index file of column {index.column!r}")


def write_stats_file(store: Store, dataset_uuid: str, stats: pa.Table) -> str:
    key = naming.stats_key(dataset_uuid)
    store.put(key, _encoded(stats, compression="zstd"))
    return key


def common_metadata_bytes(schema: pa.Schema) -> bytes:
    """The 0-row ``_common_metadata`` Parquet file kartothek reads the schema from: the
    dataset schema normalized (FORMAT.md A; kstore's own schema keeps the written types),
    its pandas metadata without an index (kartothek reads every column as a column).

    >>> import pyarrow.parquet as pq
    >>> pq.read_schema(pa.BufferReader(common_metadata_bytes(pa.schema([("n", pa.int32())])))).field("n").type
    DataType(int64)
    """
    schema = files_schema(schema)  # (kartothek reads the files: renamed columns under their file names)
    common = normalize_schema(schema)
    source = schema_pandas_metadata(schema)
    if not (common.equals(schema, check_metadata=False) and not (source or {}).get("index_columns")):
        schema = with_pandas_metadata(common, source, index=False)
    return _encoded(schema.empty_table())


def write_common_metadata(store: Store, dataset_uuid: str, table_name: str, schema: pa.Schema) -> str:
    """Write ``_common_metadata`` for ``table_name``; returns its key."""
    key = naming.common_metadata_key(dataset_uuid, table_name)
    store.put(key, common_metadata_bytes(schema))
    return key

