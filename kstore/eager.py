"""The eager (pandas / pyarrow) driver: compose the blocks, nothing else.

Examples
--------
>>> import pandas as pd, kstore
>>> df = pd.DataFrame({"day": ["a", "a", "b"], "x": [1, 2, 3]})
>>> meta = kstore.store_dataset("memory://eager-doc", "sales", df, partition_on=["day"],
...                             secondary_indices=["x"])
>>> kstore.read_dataset("memory://eager-doc", "sales", predicates=[[("x", ">=", 2)]])
  day  x
0   a  2
1   b  3
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, ParamSpec, TypedDict, TypeVar, overload

import pandas as pd
import pyarrow as pa

if TYPE_CHECKING:
    from typing_extensions import Unpack

from kstore.blocks.frame import planned_rows, read_frame
from kstore.blocks.job import (
    WRITE_MODES,
    SchemaMode,
    WriteMode,
    WriteRequest,
    finish_write,
    prepare_write,
    write_files,
)
from kstore.blocks.planned import check_missing, is_missing_file, replan
from kstore.blocks.read import nullable_columns, read_plan, read_task, to_pandas
from kstore.blocks.snapshot import Snapshot, open_snapshot, raise_if_expired
from kstore.core import naming
from kstore.core.arguments import (
    AsOf,
    as_bool,
    as_choice,
    as_timestamp,
    as_version,
    looks_like_predicates,
    predicates_or_filters,
)
from kstore.core.commit_options import CommitOptions
from kstore.core.metadata import DatasetMetadata
from kstore.core.naming import MetadataFormat
from kstore.core.planning import ReadPlan
from kstore.core.predicates import Predicates
from kstore.core.writer_options import WriteOptions
from kstore.errors import (
    CorruptMetadataError,
    InvalidArgumentError,
    KstoreError,
)
from kstore.io.progress import ProgressLike, is_data_file, tracked
from kstore.io.store import Store, StoreLike, open_store

T = TypeVar("T")
P = ParamSpec("P")
R = TypeVar("R")

__all__ = [
    "store_dataset",
    "update_dataset",
    "read_dataset",
    "read_table",
    "iter_dataset",
    "open_dataset",
    "plan_read",
    "plan_with_stats",
    "load_metadata",
    "read_schema",
    "index_lookup",
    "write_files",
]


def store_dataset(
    store: StoreLike,
    dataset_uuid: str,
    data: Any,
    *,
    partition_on: str | Sequence[str] | None = None,
    secondary_indices: str | Sequence[str] | None = None,
    metadata: Mapping[str, Any] | None = None,
    metadata_format: MetadataFormat | None = None,
    table_name: str = naming.DEFAULT_TABLE,
    mode: WriteMode = "error",
    schema_mode: SchemaMode = "strict",
    txn: tuple[str, int] | None = None,
    write_options: WriteOptions | Mapping[str, Any] | None = None,
    sort_by: str | Sequence[str] | None = None,
    commit_options: CommitOptions | Mapping[str, Any] | None = None,
    progress: ProgressLike = False,
    overwrite: bool | None = None,
) -> DatasetMetadata:
    """Write a new dataset (or replace one with ``mode="overwrite"``) in one commit.

    Rows are split by ``partition_on`` (hive-encoded in the keys, dropped from the files);
    ``secondary_indices`` get inverted index files.

    Parameters
    ----------
    store
        Where the dataset lives (:data:`~kstore.io.store.StoreLike`: a path, URL, store or
        factory).
    dataset_uuid
        The dataset's name.
    data
        A pandas DataFrame, a pyarrow Table, or an iterable of them (streamed: one chunk in
        memory at a time). Column types are kept as written (``int32`` reads back as
        ``int32``); a named index is stored as columns and read back as the index.
    partition_on
        Partition columns (hive-style ``col=value`` directories; not stored in the files).
    secondary_indices
        Columns that get an inverted index (value -> partitions), used by predicates.
    metadata
        User metadata stored with the dataset (JSON-compatible). An overwrite keeps the
        dataset's user metadata, merging ``metadata`` into it (keys given here replace
        theirs), as Delta Lake keeps a table's configuration; ``creation_time`` is new.
    metadata_format
        ``"json"`` or ``"msgpack.zstd"`` for the main metadata file; None (default): JSON
        for a new dataset, the existing dataset's format otherwise.
    table_name
        The table's name inside the dataset (kartothek's ``table``).
    mode
        The same modes on every engine (:func:`kstore.dask.store_dataset`,
        :func:`kstore.spark.store_dataset`): ``"error"`` (default: create;
        :class:`~kstore.errors.DatasetExistsError` if the dataset exists), ``"overwrite"``
        (replace it: a new version; old files stay until garbage collection), ``"append"``
        or ``"overwrite_partitions"`` (as :func:`update_dataset`, creating the dataset when
        it is missing).
    schema_mode
        How the data's schema meets an existing dataset's (docs/guides/schema.md):
        ``"strict"`` (the columns must match; a full overwrite keeps the partition columns
        too, none given: the dataset's), ``"merge"`` (new columns are added, columns widen
        where no value changes: ``int32`` -> ``double``, ``date`` -> ``timestamp``), or, with
        ``mode="overwrite"`` only, ``"overwrite"`` (the data's schema and partitioning
        replace the dataset's: Delta's ``overwriteSchema``).
    txn
        ``(app_id, version)``: a retry of a write already committed under that id writes
        nothing and returns the committed metadata (idempotent jobs).
    write_options
        :class:`~kstore.WriteOptions` or a dict (compression, level, row-group and page
        sizes, page index, Bloom filters, dictionary encoding): how files are encoded.
    sort_by
        Sort the rows inside every file by these columns (clustering), so row-group
        statistics skip data for predicates on them.
    commit_options
        :class:`~kstore.CommitOptions` or a dict of its fields, the same on every engine and
        on :class:`~kstore.Snapshot`: ``info`` (recorded with this version, shown by
        ``history()``), ``max_attempts`` (retries when other writers commit first), and
        ``txn`` / ``metadata`` (or their keywords; not both).
    progress
        ``True`` for a progress bar on stderr (files written), or a callable
        ``progress(files_written, None)`` (see :mod:`kstore.io.progress`); off by default.
    overwrite
        Deprecated (a :class:`FutureWarning`; removed in the next release): ``True`` is
        ``mode="overwrite"`` with ``schema_mode="overwrite"`` (kartothek's meaning: the dataset
        is replaced, schema and partitioning too) unless ``schema_mode`` is given.

    Returns
    -------
    DatasetMetadata
        The committed version (:class:`~kstore.core.metadata.DatasetMetadata`).

    Raises
    ------
    DatasetExistsError
        The dataset exists and ``mode`` is ``"error"``.

    Examples
    --------
    >>> import pandas as pd, kstore
    >>> m = kstore.store_dataset("memory://store-doc", "ds", pd.DataFrame({"p": [1, 2], "v": [1.0, 2.0]}),
    ...                          partition_on="p")
    >>> sorted(lab.split("/")[0] for lab in m.partitions)
    ['p=1', 'p=2']
    """
    mode = as_choice(mode, WRITE_MODES, "mode")
    if overwrite is not None:
        warnings.warn("kstore.store_dataset(overwrite=...) is deprecated; pass mode='overwrite' (the same "
                      "keyword on every engine)", FutureWarning, stacklevel=2)
        if as_bool(overwrite, "overwrite") and mode != "error":
            raise InvalidArgumentError(f"overwrite=True and mode={mode!r} were both given; pass mode='overwrite'")
        mode = "overwrite" if overwrite else mode
        if overwrite and schema_mode == "strict":
            schema_mode = "overwrite"  # kartothek's overwrite=True replaces the dataset, schema and all
    with tracked(open_store(store), progress, f"write {dataset_uuid}", method="put", key_filter=is_data_file) as st:
        job = prepare_write(st, dataset_uuid, WriteRequest.of(
            dataset_uuid, mode, partition_on=partition_on, secondary_indices=secondary_indices, table_name=table_name,
            schema_mode=schema_mode, metadata=metadata, metadata_format=metadata_format, txn=txn,
            write_options=write_options, sort_by=sort_by, commit_options=commit_options))
        if job.already_committed:
            return job.existing  # a retried job: nothing to write
        files, schema = write_files(job, data)
        return finish_write(job, files, schema)


def update_dataset(
    store: StoreLike,
    dataset_uuid: str,
    data: Any = None,
    *,
    delete_scope: Sequence[Mapping[str, Any]] | None = None,
    partition_on: str | Sequence[str] | None = None,
    secondary_indices: str | Sequence[str] | None = None,
    metadata: Mapping[str, Any] | None = None,
    mode: Literal["append", "overwrite_partitions"] = "append",
    schema_mode: SchemaMode = "strict",
    txn: tuple[str, int] | None = None,
    write_options: WriteOptions | Mapping[str, Any] | None = None,
    sort_by: str | Sequence[str] | None = None,
    commit_options: CommitOptions | Mapping[str, Any] | None = None,
    progress: ProgressLike = False,
) -> DatasetMetadata:
    """Append ``data`` and/or delete the partitions matching ``delete_scope``, in one commit.

    A concurrent writer that removed or added partitions inside the scope makes this commit
    fail with :class:`~kstore.errors.CommitConflictError`; concurrent appends elsewhere are
    merged automatically.

    Parameters
    ----------
    store
        Where the dataset lives (:data:`~kstore.io.store.StoreLike`).
    dataset_uuid
        The dataset's name; it must exist.
    data
        Rows to add: a pandas DataFrame, a pyarrow Table, an iterable of them, or None
        (only delete).
    delete_scope
        A list of ``{partition column: value}`` dicts (as in kartothek): the partitions they
        match are removed in the same commit.
    partition_on
        The dataset's partition columns, or None (they are taken from the dataset; other
        columns raise :class:`~kstore.errors.InvalidArgumentError`).
    secondary_indices
        Columns to index in addition to the dataset's indices (which are kept).
    metadata
        User metadata merged into the dataset's (keys given here replace theirs).
    mode
        ``"append"`` (default) or ``"overwrite_partitions"``: replace every partition value
        the new data touches.
    schema_mode
        ``"strict"`` (the schema must match) or ``"merge"`` (new columns are added; missing
        ones are null; columns widen where no value changes, as in :func:`store_dataset`).
    txn
        ``(app_id, version)`` for idempotent retries, as in :func:`store_dataset`.
    write_options, sort_by, commit_options, progress
        As in :func:`store_dataset`.

    Returns
    -------
    DatasetMetadata
        The committed version.

    Examples
    --------
    >>> import pandas as pd, kstore
    >>> _ = kstore.store_dataset("memory://update-doc", "d", pd.DataFrame({"p": [1, 2], "x": [1, 2]}), partition_on="p")
    >>> m = kstore.update_dataset("memory://update-doc", "d", pd.DataFrame({"p": [2], "x": [20]}),
    ...                           mode="overwrite_partitions")
    >>> m.version, kstore.read_dataset("memory://update-doc", "d")["x"].tolist()
    (1, [1, 20])
    >>> kstore.update_dataset("memory://update-doc", "d", delete_scope=[{"p": 1}]).version
    2
    """
    mode = as_choice(mode, ("append", "overwrite_partitions"), "mode")
    with tracked(open_store(store), progress, f"write {dataset_uuid}", method="put", key_filter=is_data_file) as st:
        job = prepare_write(st, dataset_uuid, WriteRequest.of(
            dataset_uuid, mode, partition_on=partition_on, secondary_indices=secondary_indices,
            schema_mode=schema_mode, delete_scope=delete_scope, metadata=metadata, txn=txn, must_exist=True,
            write_options=write_options, sort_by=sort_by, commit_options=commit_options))
        if job.already_committed:
            return job.existing  # re-submitted transaction: nothing to do
        files, schema = write_files(job, data) if data is not None else ([], None)
        return finish_write(job, files, schema)


def open_dataset(store: StoreLike, dataset_uuid: str, *, version: int | None = None, as_of: AsOf = None) -> Snapshot:
    """Open one committed version of a dataset: the newest, a retained ``version``, or the
    one current at ``as_of`` (time travel).

    The :class:`~kstore.Snapshot` plans and reads that version however often it is used;
    its indices and statistics are loaded on first use and cached. Costs 1 get for the main
    metadata file and 1 listing of the log (+1 get when the main file lags); ``version`` /
    ``as_of`` read the log entry of that version instead.

    Parameters
    ----------
    store
        Where the dataset lives (:data:`~kstore.io.store.StoreLike`).
    dataset_uuid
        The dataset's name.
    version
        A retained version number (None: the newest).
    as_of
        A ``datetime`` or ISO 8601 text (:data:`~kstore.core.arguments.AsOf`): the version
        that was current then. Give ``version`` or ``as_of``, not both.

    Returns
    -------
    Snapshot
        The immutable view of that version.

    Raises
    ------
    DatasetNotFoundError
        There is no such dataset.
    VersionNotFoundError
        The version is not retained (expired by garbage collection) or never existed.

    Examples
    --------
    >>> import pandas as pd, kstore
    >>> _ = kstore.store_dataset("memory://open-doc", "d", pd.DataFrame({"x": [1, 2]}))
    >>> _ = kstore.update_dataset("memory://open-doc", "d", pd.DataFrame({"x": [3]}))
    >>> snap = kstore.open_dataset("memory://open-doc", "d", version=0)
    >>> snap.version, len(snap.plan().tasks)
    (0, 1)
    """
    return open_snapshot(open_store(store), dataset_uuid, version=as_version(version),
                         as_of=as_timestamp(as_of) if as_of is not None else None)


def _predicates_third(plan: Callable[P, R]) -> Callable[P, R]:
    """Also accept the old order ``plan_read(store, dataset_uuid, predicates, columns)``
    (a DNF where the columns go now), with a :class:`FutureWarning`, for one release."""

    @functools.wraps(plan)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        if len(args) >= 3 and looks_like_predicates(args[2]):
            warnings.warn("kstore.plan_read(store, dataset_uuid, predicates, columns) is deprecated; pass "
                          "(store, dataset_uuid, columns, predicates) like kstore.read_dataset, or predicates=",
                          FutureWarning, stacklevel=2)
            if len(args) > 4 or "predicates" in kwargs or (len(args) == 4 and "columns" in kwargs):
                raise InvalidArgumentError("kstore.plan_read: predicates given twice; pass (store, dataset_uuid, "
                                           "columns, predicates)")
            moved: dict[str, Any] = {"predicates": args[2]}
            if len(args) == 4:
                moved["columns"] = args[3]
            return plan(*args[:2], **moved, **kwargs)  # type: ignore[arg-type]
        return plan(*args, **kwargs)

    return call


@_predicates_third
def plan_read(
    store: StoreLike,
    dataset_uuid: str,
    columns: Sequence[str] | None = None,
    predicates: Predicates = None,
    *,
    filters: Predicates = None,
    version: int | None = None,
    as_of: AsOf = None,
    table: str | None = None,
) -> ReadPlan:
    """Plan a read: the files that can hold matching rows, with store calls counted.

    Costs 1 get for the main metadata file and 1 listing of the log entries after it (the
    newest version; +1 get if the main file lags), +1 for kartothek datasets'
    ``_common_metadata``, 1 per secondary index a predicate uses, 1 for statistics when a
    predicate column has no index. No listing of partitions.

    Parameters
    ----------
    store
        Where the dataset lives (:data:`~kstore.io.store.StoreLike`).
    dataset_uuid
        The dataset's name.
    columns
        Columns the read would return (None: all).
    predicates
        DNF ``[[(col, op, value), ...], ...]`` (:data:`~kstore.core.predicates.Predicates`).
        The order is :func:`read_dataset`'s; the old ``plan_read(store, dataset_uuid,
        predicates)`` still works with a :class:`FutureWarning`.
    filters
        ``predicates`` under pyarrow's, Dask's and deltalake's name, as in :func:`read_dataset`.
    version, as_of
        Plan an older retained version, as in :func:`read_dataset`.
    table
        The table to plan (default: the dataset's only table).

    Returns
    -------
    ReadPlan
        The files to read (``plan.tasks``), the partitions kept per stage and the store calls
        made (``plan.explain()``).

    Examples
    --------
    >>> import pandas as pd, kstore
    >>> _ = kstore.store_dataset("memory://plan-doc", "d", pd.DataFrame({"p": [1, 2, 3], "x": [5, 6, 7]}),
    ...                          partition_on="p")
    >>> plan = kstore.plan_read("memory://plan-doc", "d", predicates=[[("p", ">=", 2)]])
    >>> len(plan.tasks), sorted(lab.split("/")[0] for lab in plan.labels)
    (2, ['p=2', 'p=3'])
    """
    return plan_with_stats(store, dataset_uuid, columns, predicates_or_filters(predicates, filters), version=version,
                           as_of=as_of, table=table)[0]


def plan_with_stats(
    store: StoreLike,
    dataset_uuid: str,
    columns: Sequence[str] | None = None,
    predicates: Predicates = None,
    *,
    filters: Predicates = None,
    version: int | None = None,
    as_of: AsOf = None,
    table: str | None = None,
    stats: bool = False,
) -> tuple[ReadPlan, pa.Table | None]:
    """:func:`plan_read`, and the per-file statistics when the plan needed them or
    ``stats=True`` asks for them (+1 get; readers of several frames use them to choose
    one set of dtypes, :func:`kstore.blocks.read.nullable_columns`).

    Parameters
    ----------
    store, dataset_uuid, columns, predicates, filters, version, as_of, table
        As in :func:`plan_read` (``filters`` is ``predicates`` under pyarrow's, Dask's and
        deltalake's name).
    stats
        Load the statistics even when planning did not need them.

    Returns
    -------
    tuple[ReadPlan, pyarrow.Table | None]
        The plan, and the statistics table (one row per data file) or None.

    Examples
    --------
    >>> import pandas as pd, kstore
    >>> from kstore.eager import plan_with_stats
    >>> _ = kstore.store_dataset("memory://pws-doc", "d", pd.DataFrame({"x": [1, 2]}))
    >>> plan, stats = plan_with_stats("memory://pws-doc", "d", stats=True)
    >>> len(plan.tasks), stats.num_rows
    (1, 1)
    """
    snap = open_dataset(store, dataset_uuid, version=version, as_of=as_of)
    return snap.plan_with_stats(columns, predicates_or_filters(predicates, filters), table=table, stats=stats)


def read_table(
    store: StoreLike,
    dataset_uuid: str,
    columns: Sequence[str] | None = None,
    predicates: Predicates = None,
    *,
    filters: Predicates = None,
    version: int | None = None,
    as_of: AsOf = None,
    table: str | None = None,
) -> pa.Table:
    """Read (a filtered part of) a dataset as one Arrow table.

    Parameters
    ----------
    store, dataset_uuid, columns, predicates, filters, version, as_of, table
        As in :func:`read_dataset` (``filters`` is ``predicates`` under pyarrow's, Dask's and
        deltalake's name).

    Returns
    -------
    pyarrow.Table
        The matching rows (partition columns included, with their column types).

    Examples
    --------
    >>> import pandas as pd, kstore
    >>> _ = kstore.store_dataset("memory://table-doc", "d", pd.DataFrame({"p": [1, 2], "x": [5, 6]}), partition_on="p")
    >>> kstore.read_table("memory://table-doc", "d", columns=["x"], predicates=[[("x", ">", 5)]]).to_pylist()
    [{'x': 6}]
    """
    predicates = predicates_or_filters(predicates, filters)
    st = open_store(store)
    return _plan_and_read(st, dataset_uuid, predicates, columns, version, as_of, table,
                          lambda plan, meta: read_plan(st, plan, columns))


def _plan_and_read(st: Store, dataset_uuid: str, predicates: Predicates, columns: Sequence[str] | None,
                   version: int | None, as_of: AsOf, table: str | None,
                   read: Callable[[ReadPlan, DatasetMetadata], T]) -> T:
    """Plan and ``read(plan, metadata)``; a read of the newest version that finds a planned
    file gone (a newer version removed it and garbage collection at a short retention
    deleted it) plans again on the newer version (:mod:`kstore.blocks.planned`). A pinned
    version that expired while it was read is a :class:`~kstore.errors.VersionNotFoundError`,
    not damage."""

    def attempt(_: int) -> T:
        snap = open_dataset(st, dataset_uuid, version=version, as_of=as_of)
        plan = snap.plan(columns, predicates, table=table)
        try:
            return read(plan, snap.metadata)
        except CorruptMetadataError as exc:
            if not is_missing_file(exc):
                raise
            if version is not None or as_of is not None:
                raise_if_expired(st, dataset_uuid, plan.version, exc)
                raise
            check_missing(st, dataset_uuid, plan.version, [(t.label, t.key) for t in plan.tasks], exc, "the read")
            raise  # the newest version still references the missing file: real damage

    return replan(attempt, what="the read", attempts=_READ_ATTEMPTS, gave_up=lambda last: CorruptMetadataError(
        f"dataset {dataset_uuid!r}: files kept vanishing under {_READ_ATTEMPTS} reads of the newest version "
        "(garbage collection with a very short retention is running)"))


_READ_ATTEMPTS = 5


class _ReadKeywords(TypedDict, total=False):
    """The keywords of :func:`read_dataset` other than ``as_arrow`` (typing only: its
    overloads say what ``as_arrow`` returns)."""

    filters: Predicates
    categoricals: Sequence[str] | None
    dates_as_object: bool
    version: int | None
    as_of: AsOf
    table: str | None


@overload
def read_dataset(store: StoreLike, dataset_uuid: str, columns: Sequence[str] | None = None,
                 predicates: Predicates = None, *, as_arrow: Literal[False] = False,
                 **kwargs: Unpack[_ReadKeywords]) -> pd.DataFrame: ...


@overload
def read_dataset(store: StoreLike, dataset_uuid: str, columns: Sequence[str] | None = None,
                 predicates: Predicates = None, *, as_arrow: Literal[True],
                 **kwargs: Unpack[_ReadKeywords]) -> pa.Table: ...


@overload
def read_dataset(store: StoreLike, dataset_uuid: str, columns: Sequence[str] | None = None,
                 predicates: Predicates = None, *, as_arrow: bool,
                 **kwargs: Unpack[_ReadKeywords]) -> pd.DataFrame | pa.Table: ...


def read_dataset(
    store: StoreLike,
    dataset_uuid: str,
    columns: Sequence[str] | None = None,
    predicates: Predicates = None,
    *,
    filters: Predicates = None,
    as_arrow: bool = False,
    categoricals: Sequence[str] | None = None,
    dates_as_object: bool = False,
    version: int | None = None,
    as_of: AsOf = None,
    table: str | None = None,
) -> pd.DataFrame | pa.Table:
    """Read a dataset into pandas (or Arrow with ``as_arrow=True``), planned by its indices.

    Parameters
    ----------
    store
        Where the dataset lives (:data:`~kstore.io.store.StoreLike`: a path, URL, store or factory).
    dataset_uuid
        The dataset's name.
    columns
        Columns to read (None: all; ``[]`` reads no column but counts the rows).
    predicates
        DNF ``[[(col, op, value), ...], ...]`` (:data:`~kstore.core.predicates.Predicates`);
        comparisons never match nulls (use ``is null``). Results are exact: planning prunes
        files, then rows are filtered. A flat list of terms ``[(col, op, value), ...]`` is one
        conjunction (as in pyarrow); ``[]`` is no filter (pyarrow refuses an empty list).
    filters
        The same as ``predicates``, under the name pyarrow (``pyarrow.parquet.read_table``,
        ``pyarrow.dataset``), Dask (``dd.read_parquet``) and deltalake
        (``DeltaTable.to_pandas``) use; give one of the two
        (:class:`~kstore.errors.InvalidArgumentError` for both).
    as_arrow
        Return a ``pyarrow.Table`` instead of a pandas DataFrame.
    categoricals
        Columns to return as pandas ``category`` dtype.
    dates_as_object
        Return date columns as ``datetime.date`` objects instead of ``datetime64``.
    version, as_of
        Read an older retained version (time travel): a version number, or the version that
        was current at a ``datetime`` / ISO 8601 text (:data:`~kstore.core.arguments.AsOf`).
    table
        The table to read (default: the dataset's only table).

    Returns
    -------
    pandas.DataFrame or pyarrow.Table
        The matching rows; a pandas frame has a fresh ``RangeIndex``, or the named index
        the data was written with (when its columns are read).

    Raises
    ------
    DatasetNotFoundError
        There is no such dataset.
    InvalidPredicateError
        A predicate names an unknown column or a value the column cannot be compared with.

    Examples
    --------
    >>> import pandas as pd, kstore
    >>> _ = kstore.store_dataset("memory://read-doc", "d", pd.DataFrame({"p": [1, 2], "x": [5, 6]}), partition_on="p")
    >>> kstore.read_dataset("memory://read-doc", "d", ["x"], [("p", "==", 2)])
       x
    0  6
    >>> kstore.read_dataset("memory://read-doc", "d", ["x"], filters=[("p", "==", 2)]).equals(
    ...     kstore.read_dataset("memory://read-doc", "d", ["x"], predicates=[[("p", "==", 2)]]))
    True
    >>> kstore.read_dataset("memory://read-doc", "d", as_arrow=True).num_rows
    2
    """
    predicates = predicates_or_filters(predicates, filters)
    as_arrow = as_bool(as_arrow, "as_arrow")
    dates_as_object = as_bool(dates_as_object, "dates_as_object")
    st = open_store(store)
    if as_arrow:
        return _plan_and_read(st, dataset_uuid, predicates, columns, version, as_of, table,
                              lambda plan, meta: read_plan(st, plan, columns))
    return _plan_and_read(st, dataset_uuid, predicates, columns, version, as_of, table,
                          lambda plan, meta: read_frame(st, plan, columns, planned_rows(meta, plan),
                                                        categoricals=categoricals, dates_as_object=dates_as_object))


def iter_dataset(
    store: StoreLike,
    dataset_uuid: str,
    columns: Sequence[str] | None = None,
    predicates: Predicates = None,
    *,
    filters: Predicates = None,
    as_arrow: bool = False,
    categoricals: Sequence[str] | None = None,
    dates_as_object: bool = False,
    version: int | None = None,
    as_of: AsOf = None,
) -> Iterator[pd.DataFrame | pa.Table]:
    """Yield the planned partitions one at a time (bounded memory); empty ones are skipped.

    Parameters
    ----------
    store, dataset_uuid, columns, predicates, filters, version, as_of
        As in :func:`read_dataset` (``filters`` is ``predicates`` under pyarrow's, Dask's and
        deltalake's name).
    as_arrow, categoricals, dates_as_object
        As in :func:`read_dataset`.

    Yields
    ------
    pandas.DataFrame or pyarrow.Table
        One frame per planned file: pandas frames (all with the same dtypes), or Arrow
        tables with ``as_arrow=True``.

    Examples
    --------
    >>> import pandas as pd, kstore
    >>> _ = kstore.store_dataset("memory://iter-doc", "d", pd.DataFrame({"p": [1, 2], "x": [5, 6]}), partition_on="p")
    >>> [len(frame) for frame in kstore.iter_dataset("memory://iter-doc", "d")]
    [1, 1]
    """
    predicates = predicates_or_filters(predicates, filters)
    as_arrow = as_bool(as_arrow, "as_arrow")
    dates_as_object = as_bool(dates_as_object, "dates_as_object")
    st = open_store(store)
    plan, stats = plan_with_stats(st, dataset_uuid, columns, predicates, version=version, as_of=as_of,
                                  stats=not as_arrow)
    nullable = nullable_columns(plan, stats)  # one set of dtypes for every frame
    for task in plan.tasks:
        t = read_task(st, plan, task, columns)
        if t.num_rows == 0 and plan.predicates is not None:
            continue
        yield t if as_arrow else to_pandas(t, plan.schema, categoricals=categoricals, dates_as_object=dates_as_object,
                                           nullable=nullable)


def load_metadata(store: StoreLike, dataset_uuid: str, *, version: int | None = None) -> DatasetMetadata:
    """The dataset's metadata (current, or a retained ``version``).

    Parameters
    ----------
    store
        Where the dataset lives (:data:`~kstore.io.store.StoreLike`).
    dataset_uuid
        The dataset's name.
    version
        A retained version number (None: the newest).

    Returns
    -------
    DatasetMetadata
        Partitions and their files, partition keys, indices, user metadata, version.

    Examples
    --------
    >>> import pandas as pd, kstore
    >>> _ = kstore.store_dataset("memory://meta-doc", "d", pd.DataFrame({"p": [1, 2], "x": [5, 6]}), partition_on="p",
    ...                          metadata={"owner": "sales"})
    >>> m = kstore.load_metadata("memory://meta-doc", "d")
    >>> m.version, m.partition_keys, dict(m.metadata)["owner"], len(m.partitions)
    (0, ('p',), 'sales', 2)
    """
    return open_dataset(store, dataset_uuid, version=version).metadata


def read_schema(store: StoreLike, dataset_uuid: str, *, version: int | None = None) -> pa.Schema:
    """The dataset's schema: the column types every kstore reader returns, as they were
    written (``int32`` stays ``int32``; ``_common_metadata`` holds them normalized for
    kartothek). Datasets written by kartothek or by older kstore versions have only the
    normalized one.

    Parameters
    ----------
    store
        Where the dataset lives (:data:`~kstore.io.store.StoreLike`).
    dataset_uuid
        The dataset's name.
    version
        A retained version number (None: the newest).

    Returns
    -------
    pyarrow.Schema
        Every column, partition columns included.

    Examples
    --------
    >>> import pandas as pd, kstore
    >>> _ = kstore.store_dataset("memory://schema-doc", "d", pd.DataFrame({"p": [1], "x": [0.5]}), partition_on="p")
    >>> kstore.read_schema("memory://schema-doc", "d").names
    ['p', 'x']
    """
    return open_dataset(store, dataset_uuid, version=version).schema()


def index_lookup(store: StoreLike, dataset_uuid: str, column: str, value: Any) -> list[str]:
    """Partition labels whose index (secondary or partition) says ``column == value`` may occur.

    Parameters
    ----------
    store
        Where the dataset lives (:data:`~kstore.io.store.StoreLike`).
    dataset_uuid
        The dataset's name.
    column
        An indexed or partition column.
    value
        The value to look up (converted to the column's type).

    Returns
    -------
    list[str]
        Sorted partition labels (``"col=value/.../<file-id>"``).

    Examples
    --------
    >>> import pandas as pd, kstore
    >>> _ = kstore.store_dataset("memory://lookup-doc", "d", pd.DataFrame({"p": [1, 2], "x": [5, 6]}), partition_on="p",
    ...                          secondary_indices=["x"])
    >>> [label.split("/")[0] for label in kstore.index_lookup("memory://lookup-doc", "d", "x", 6)]
    ['p=2']
    """
    plan = plan_read(store, dataset_uuid, columns=[column], predicates=[[(column, "==", value)]])
    if column not in plan.schema.names:
        raise KstoreError(f"dataset {dataset_uuid!r} has no column {column!r}")
    return sorted(plan.labels)
