"""The Dask driver: compose the blocks over a ``dask.dataframe``, nothing else.

Writes are ``map_partitions(write one partition's files)`` followed by ONE commit on the
client through :func:`kstore.blocks.commit.commit`; only small file records travel back
from the workers. Reads are planned once on the client (with the dataset's indices) and
become ``dd.from_map`` over the planned files, with ``meta`` built from the schema and
column projection pushed into the Parquet read by Dask's optimizer; ``blocksize`` makes one
Dask partition read several small files.

Stores reach the workers as URLs or picklable factories
(:func:`kstore.io.store.store_factory`); an in-process ``memory://`` store is refused when
the workers are other processes.

Examples
--------
>>> import pandas as pd, dask, dask.dataframe as dd, kstore.dask
>>> df = pd.DataFrame({"day": ["a", "a", "b", "b"], "x": [1, 2, 3, 4]})
>>> with dask.config.set(scheduler="threads"):
...     meta = kstore.dask.store_dataset("memory://dask-doc", "sales", dd.from_pandas(df, npartitions=2),
...                                      partition_on=["day"], secondary_indices=["x"])
...     ddf = kstore.dask.read_dataset("memory://dask-doc", "sales", predicates=[[("x", ">=", 2)]])
...     ddf.compute().sort_values("x").reset_index(drop=True)
  day  x
0   a  2
1   b  3
2   b  4
"""

from __future__ import annotations

import os
import uuid as _uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, TypedDict, cast, overload

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pyarrow as pa
from dask.base import compute as dask_compute
from dask.dataframe.utils import clear_known_categories, pyarrow_strings_enabled
from dask.delayed import Delayed, delayed
from dask.utils import parse_bytes

if TYPE_CHECKING:
    from typing_extensions import Unpack

from kstore.blocks.changes import CHANGE_COLUMNS, ChangeRange, conform_changes, plan_changes, version_changes
from kstore.blocks.compact import (
    DEFAULT_TARGET_FILE_SIZE,
    CompactionGroup,
    CompactionPlan,
    CompactionRequest,
    finish_compaction,
    plan_compaction,
    rewrite_group,
    worker_plan,
)
from kstore.blocks.job import (
    SchemaMode,
    WriteMode,
    WriteRequest,
    as_columns,
    check_fits,
    delete_files,
    finish_write,
    merge_worker_schemas,
    prepare_write,
)
from kstore.blocks.merge import (
    MergeRequest,
    MergeResult,
    distributed_merge,
)
from kstore.blocks.mutate import RewritePlan, UpdateResult, distributed_rows, rewrite_task
from kstore.blocks.read import concat_tables, empty_table, nullable_columns, read_task, to_pandas
from kstore.blocks.write import (
    ENGINE_TASK_THREADS,
    FileLayout,
    WrittenFile,
    delete_by_token,
    delete_keys,
    table_schema,
    to_arrow,
    write_partitions,
)
from kstore.core import naming
from kstore.core.arguments import (
    AsOf,
    DataKind,
    as_bool,
    as_column_list,
    as_count,
    predicates_or_filters,
    store_uuid_data,
)
from kstore.core.commit_options import CommitOptions
from kstore.core.log import LogEntry
from kstore.core.metadata import DatasetMetadata
from kstore.core.naming import MetadataFormat
from kstore.core.planning import ReadPlan, ReadTask, file_sizes, pack_in_order
from kstore.core.predicates import Predicates
from kstore.core.writer_options import WriteOptions
from kstore.eager import load_metadata, plan_with_stats
from kstore.errors import (
    ColumnNotFoundError,
    InvalidArgumentError,
    StoreError,
)
from kstore.io.store import Store, StoreLike, open_store, store_factory

__all__ = ["store_dataset", "update_dataset", "read_dataset", "read_changes", "merge", "update_rows", "delete_rows",
           "compact", "BUCKET_COLUMN"]

#: Temporary column holding the bucket number while a bucketed write shuffles (never stored).
BUCKET_COLUMN = "__kstore_bucket__"
_MAX_BUCKETS = 0xFFFFF  # the bucket number is 5 hex digits of the file id
_MAX_DASK_PARTITIONS = 0xFFFFFFF  # the partition number is 7 hex digits


# ---------------------------------------------------------------------------------------
# stores on workers
# ---------------------------------------------------------------------------------------


def _distributed_client() -> Any | None:
    """The ``distributed.Client`` that would run a compute now, or None (local scheduler)."""
    get = dask.base.get_scheduler()
    client = getattr(get, "__self__", None)
    if client is not None and type(client).__name__ == "Client":
        return client
    return None


def _workers_in_process() -> bool:
    """True when the tasks of a compute run in this process (threads, sync, in-process cluster)."""
    get = dask.base.get_scheduler()
    if get is None:
        return True
    from dask.multiprocessing import get as multiprocessing_get

    if get is multiprocessing_get:
        return False
    client = _distributed_client()
    if client is None:
        return True
    pids = client.run(os.getpid)
    return bool(pids) and set(pids.values()) == {os.getpid()}


def _worker_store(store: StoreLike, dataset_uuid: str) -> Callable[[], Store]:
    """A picklable factory for the workers; refuse in-process stores the workers cannot see."""
    factory = store_factory(store)  # raises StoreError for unpicklable stores
    url = getattr(open_store(store), "url", None)
    if isinstance(url, str) and url.startswith("memory://") and not _workers_in_process():
        raise StoreError(
            f"dataset {dataset_uuid!r}: {url!r} is an in-process memory store, which Dask workers in "
            "other processes cannot see; use a directory ('file:///path') or S3 URL, or a "
            "threaded/in-process scheduler"
        )
    return factory


# ---------------------------------------------------------------------------------------
# writing
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Written:
    """What one Dask partition's write sends back: its files and its normalized schema."""

    number: int
    schema: pa.Schema | None  # None: the partition was empty
    files: tuple[WrittenFile, ...]


class _WritePartition:
    """The function Dask maps over the partitions: write files, return their records."""

    #: the tasks' name in Dask's dashboard, progress bars and task stream (``kstore-write-<token>``)
    __name__ = "kstore-write"

    def __init__(self, factory: Callable[[], Store], dataset_uuid: str, layout: FileLayout, token: str,
                 bucketed: bool) -> None:
        self.factory = factory
        self.dataset_uuid = dataset_uuid
        self.layout = layout
        self.token = token
        self.bucketed = bucketed

    def __dask_tokenize__(self) -> tuple[Any, ...]:
        return ("kstore-write", self.dataset_uuid, self.token)

    def __call__(self, df: pd.DataFrame, partition_info: Mapping[str, Any] | None = None) -> pd.Series:
        number = int(partition_info["number"]) if partition_info else 0
        if len(df) == 0:  # (a shuffle leaves some empty) object columns have no type here
            return pd.Series([_Written(number, None, ())], dtype=object)
        table = to_arrow(df, dataset=self.dataset_uuid, threads=ENGINE_TASK_THREADS)
        groups: list[tuple[int, pa.Table]]
        if self.bucketed:
            buckets = table.column(BUCKET_COLUMN).to_numpy(zero_copy_only=False).astype(np.int64)
            table = table.drop_columns([BUCKET_COLUMN])
            groups = _split_buckets(table, buckets)
        else:
            groups = [(0, table)]
        layout = self.layout
        schema = table_schema(table, partition_on=layout.partition_on, secondary_indices=layout.index_columns,
                              dataset=self.dataset_uuid)
        layout.options.check_columns(schema, layout.partition_on, dataset=self.dataset_uuid)
        store = self.factory()
        files: list[WrittenFile] = []
        try:
            for bucket, part in groups:
                files.extend(write_partitions(
                    store, self.dataset_uuid, part, layout,
                    file_id=naming.tagged_file_id(self.token, (number << 20) | bucket),
                    max_workers=ENGINE_TASK_THREADS,
                ))
        except BaseException:
            delete_keys(store, [f.key for f in files])
            raise
        return pd.Series([_Written(number, schema, tuple(files))], dtype=object)


def _split_buckets(table: pa.Table, buckets: np.ndarray) -> list[tuple[int, pa.Table]]:
    if table.num_rows == 0:
        return []
    values, counts = np.unique(buckets, return_counts=True)
    if len(values) == 1:
        return [(int(values[0]), table)]
    ordered = table.take(pa.array(np.argsort(buckets, kind="stable")))
    out, start = [], 0
    for b, n in zip(values, counts):
        out.append((int(b), ordered.slice(start, int(n))))
        start += int(n)
    return out


def _add_bucket(df: pd.DataFrame, bucket_by: list[str], num_buckets: int) -> pd.DataFrame:
    """A stable bucket number per row: hash of the ``bucket_by`` values mod ``num_buckets``."""
    hashed = pd.util.hash_pandas_object(df[bucket_by], index=False).to_numpy()
    return df.assign(**{BUCKET_COLUMN: (hashed % np.uint64(num_buckets)).astype(np.int64)})


def _meta_schema(ddf: dd.DataFrame, pon: tuple[str, ...], sec: tuple[str, ...], dataset_uuid: str) -> pa.Schema:
    """Validate the column choices and types against ``ddf._meta`` (no data is computed).

    Object columns of the empty meta have no type yet (Arrow ``null``); their type checks
    wait for the data (each worker runs the same checks on its partition).
    """
    table = to_arrow(ddf._meta, dataset=dataset_uuid)
    names = table.column_names
    untyped = {n for n in names if pa.types.is_null(table.schema.field(n).type)}
    missing = [c for c in pon + sec if c not in names]
    if missing:  # table_schema would say it too; say it for every column at once
        what = "partition_on" if any(c in pon for c in missing) else "secondary_indices"
        raise ColumnNotFoundError(
            f"dataset {dataset_uuid!r}: {what} names column(s) {missing} not in the data "
            f"(columns: {', '.join(names)})"
        )
    if pon and len(pon) == len(names):
        raise InvalidArgumentError(f"dataset {dataset_uuid!r}: partition_on uses every column; keep at least one data column")
    return table_schema(table, partition_on=[c for c in pon if c not in untyped],
                        secondary_indices=[c for c in sec if c not in untyped], dataset=dataset_uuid)


def _run_writes(parts: dd.Series, store: Store, dataset_uuid: str, table_name: str, token: str) -> list[_Written]:
    """Compute the per-partition writes; on any failure delete what was written and re-raise.

    On a distributed cluster every task is waited for before cleaning up (so nothing is
    written after the cleanup); a local scheduler raises at the first failure, so files of
    tasks still running then are left for garbage collection.
    """
    client = _distributed_client()
    if client is None:
        try:
            return list(parts.compute())
        except BaseException:
            delete_by_token(store, dataset_uuid, table_name, token)
            raise
    from distributed import as_completed

    futures = client.compute(parts.to_delayed())
    try:
        # every task is waited for, failed or not; each result comes back as its task ends,
        # so the transfers overlap the tasks still running instead of following the last one
        position = {f.key: i for i, f in enumerate(futures)}
        done: dict[int, list[_Written]] = {}
        failed = []
        for f, result in as_completed(futures, loop=client.loop, with_results=True, raise_errors=False):
            if f.status == "finished":
                done[position[f.key]] = result
                # the result is here: released, so that a worker dying later (another task's)
                # does not make the scheduler run this write again, after the cleanup below
                f.release()
            else:
                failed.append(f)
        results = [w for i in sorted(done) for w in done[i]]
        if failed:
            delete_keys(store, [f.key for w in results for f in w.files])
            delete_by_token(store, dataset_uuid, table_name, token)
            failed[0].result()  # re-raises the task's exception
            raise RuntimeError(f"dataset {dataset_uuid!r}: a write task ended as {failed[0].status!r}")
        return results
    except BaseException:
        client.cancel(futures)
        delete_by_token(store, dataset_uuid, table_name, token)
        raise


def _write(
    ddf: dd.DataFrame,
    store: StoreLike,
    dataset_uuid: str,
    *,
    mode: WriteMode,
    partition_on: str | Sequence[str] | None,
    secondary_indices: str | Sequence[str] | None,
    shuffle: bool,
    bucket_by: str | Sequence[str] | None,
    num_buckets: int | None,
    metadata: Mapping[str, Any] | None,
    metadata_format: MetadataFormat | None,
    table_name: str,
    delete_scope: Sequence[Mapping[str, Any]] | None,
    schema_mode: SchemaMode,
    txn: tuple[str, int] | None,
    must_exist: bool = False,
    write_options: WriteOptions | Mapping[str, Any] | None = None,
    sort_by: str | Sequence[str] | None = None,
    commit_options: CommitOptions | Mapping[str, Any] | None = None,
    compute: bool = True,
) -> DatasetMetadata | Delayed:
    # 1. validate everything on the client, before any task runs
    if not isinstance(ddf, dd.DataFrame):
        raise InvalidArgumentError(
            f"dataset {dataset_uuid!r}: data must be a dask.dataframe.DataFrame, got {type(ddf).__name__}"
        )
    shuffle = as_bool(shuffle, "shuffle")
    compute = as_bool(compute, "compute")
    buckets = as_columns(bucket_by, "bucket_by")
    if buckets or num_buckets is not None:
        if not shuffle:
            raise InvalidArgumentError("bucket_by/num_buckets need shuffle=True")
        if not buckets:
            raise InvalidArgumentError("num_buckets needs bucket_by (the columns to hash into buckets)")
        if not isinstance(num_buckets, int) or isinstance(num_buckets, bool) or not 1 <= num_buckets <= _MAX_BUCKETS:
            raise InvalidArgumentError(f"num_buckets must be an integer in 1..{_MAX_BUCKETS}, got {num_buckets!r}")
    if ddf.npartitions > _MAX_DASK_PARTITIONS:
        raise InvalidArgumentError(f"dataset {dataset_uuid!r}: at most {_MAX_DASK_PARTITIONS} Dask partitions")
    st = open_store(store)
    factory = _worker_store(store, dataset_uuid)
    job = prepare_write(st, dataset_uuid, WriteRequest.of(
        dataset_uuid, mode, partition_on=partition_on, secondary_indices=secondary_indices, table_name=table_name,
        schema_mode=schema_mode, delete_scope=delete_scope, metadata=metadata, metadata_format=metadata_format,
        txn=txn, must_exist=must_exist, write_options=write_options, sort_by=sort_by, commit_options=commit_options))
    if job.already_committed:  # a re-submitted transaction: already committed, nothing to write
        return job.existing if compute else delayed(_existing, pure=False)(job.existing)
    pon, sec = job.partition_on, job.index_columns
    missing = [c for c in buckets if c not in ddf.columns]
    if missing:
        raise ColumnNotFoundError(f"dataset {dataset_uuid!r}: bucket_by names column(s) {missing} not in the data")
    if BUCKET_COLUMN in ddf.columns:
        raise InvalidArgumentError(f"dataset {dataset_uuid!r}: column name {BUCKET_COLUMN!r} is reserved")
    meta_schema = _meta_schema(ddf, pon, sec, dataset_uuid)
    job.options.check_columns(meta_schema, pon, dataset=dataset_uuid)  # before any task runs
    check_fits(job, meta_schema, meta_schema.empty_table())  # the values: when the commit checks again

    # 2. the graph: (bucket, shuffle,) write each partition's files
    if buckets and num_buckets is not None:  # checked above: both or neither
        meta = _add_bucket(ddf._meta, list(buckets), num_buckets)
        ddf = ddf.map_partitions(_add_bucket, list(buckets), num_buckets, meta=meta)
    if shuffle and (pon or buckets):
        ddf = ddf.shuffle(on=list(pon) + ([BUCKET_COLUMN] if buckets else []))
    token = _uuid.uuid4().hex[:8]
    writer = _WritePartition(factory, dataset_uuid, job.layout, token, bool(buckets))
    parts = ddf.map_partitions(writer, meta=pd.Series([], dtype=object), align_dataframes=False)
    if not compute:
        # the writes and then the commit, as one graph: nothing happens before compute
        commit_task = _CommitWritten(factory, replace(job, store=cast(Store, None)), meta_schema)
        result: Delayed = delayed(commit_task, pure=False)(parts.to_delayed())
        return result

    # 3. run, then ONE commit (shared with every driver: kstore.blocks.job.finish_write)
    written = _run_writes(parts, st, dataset_uuid, job.table_name, token)
    files = [f for w in written for f in w.files]
    try:
        schema = merge_worker_schemas(job, [w.schema for w in sorted(written, key=lambda w: w.number)])
    except BaseException:
        delete_files(st, files)
        raise
    if schema is None and job.creates:
        schema = meta_schema
    return finish_write(job, files, schema)


def _arguments(function: str, store: Any, dataset_uuid: Any, data: Any) -> tuple[StoreLike, str, dd.DataFrame]:
    return store_uuid_data(f"kstore.dask.{function}", store, dataset_uuid, data, _DASK_FRAME, stacklevel=4)


_DASK_FRAME = DataKind("a dask.dataframe.DataFrame", lambda d: isinstance(d, dd.DataFrame),
                       lambda d: " (wrap a pandas DataFrame with dask.dataframe.from_pandas)"
                       if isinstance(d, pd.DataFrame) else "")


def _existing(meta: DatasetMetadata) -> DatasetMetadata:
    return meta


class _CommitWritten:
    """The last task of a ``compute=False`` write: merge the partitions' schemas and commit.

    If a write task fails this never runs: nothing is committed and the files already
    written stay until garbage collection removes them.
    """

    def __init__(self, factory: Callable[[], Store], job: Any, meta_schema: pa.Schema) -> None:
        self.factory = factory
        self.job = job  # its store travels as the factory
        self.meta_schema = meta_schema

    def __call__(self, parts: Sequence[pd.Series]) -> DatasetMetadata:
        job = replace(self.job, store=self.factory())
        written = [w for series in parts for w in series]
        files = [f for w in written for f in w.files]
        try:
            schema = merge_worker_schemas(job, [w.schema for w in sorted(written, key=lambda w: w.number)])
        except BaseException:
            delete_files(job.store, files)
            raise
        if schema is None and job.creates:
            schema = self.meta_schema
        return finish_write(job, files, schema)


class _WriteKeywords(TypedDict, total=False):
    """The keywords :func:`store_dataset` and :func:`update_dataset` share (typing only:
    their overloads say what ``compute`` returns)."""

    partition_on: str | Sequence[str] | None
    secondary_indices: str | Sequence[str] | None
    shuffle: bool
    bucket_by: str | Sequence[str] | None
    num_buckets: int | None
    schema_mode: SchemaMode
    metadata: Mapping[str, Any] | None
    txn: tuple[str, int] | None
    write_options: WriteOptions | Mapping[str, Any] | None
    sort_by: str | Sequence[str] | None
    commit_options: CommitOptions | Mapping[str, Any] | None


class _StoreKeywords(_WriteKeywords, total=False):
    mode: WriteMode
    metadata_format: MetadataFormat | None
    table_name: str


@overload
def store_dataset(store: StoreLike | dd.DataFrame, dataset_uuid: Any, data: Any, *,
                  compute: Literal[True] = ..., **kwargs: Unpack[_StoreKeywords]) -> DatasetMetadata: ...


@overload
def store_dataset(store: StoreLike | dd.DataFrame, dataset_uuid: Any, data: Any, *,
                  compute: Literal[False], **kwargs: Unpack[_StoreKeywords]) -> Delayed: ...


def store_dataset(
    store: StoreLike | dd.DataFrame,
    dataset_uuid: Any,
    data: Any,
    *,
    partition_on: str | Sequence[str] | None = None,
    secondary_indices: str | Sequence[str] | None = None,
    shuffle: bool = False,
    bucket_by: str | Sequence[str] | None = None,
    num_buckets: int | None = None,
    mode: WriteMode = "error",
    schema_mode: SchemaMode = "strict",
    metadata: Mapping[str, Any] | None = None,
    metadata_format: MetadataFormat | None = None,
    table_name: str = naming.DEFAULT_TABLE,
    txn: tuple[str, int] | None = None,
    write_options: WriteOptions | Mapping[str, Any] | None = None,
    sort_by: str | Sequence[str] | None = None,
    commit_options: CommitOptions | Mapping[str, Any] | None = None,
    compute: bool = True,
) -> DatasetMetadata | Delayed:
    """Write a Dask DataFrame as a dataset: every partition writes its own files, then ONE commit.

    Parameters
    ----------
    store
        A URL (``file:///path``, ``s3://bucket/prefix``, ...) or a picklable store factory;
        workers rebuild the store from it.
    dataset_uuid
        The dataset's name.
    data
        The data, a ``dask.dataframe.DataFrame``; its index is not stored. The order is
        ``(store, dataset_uuid, data)`` on every engine, as in :func:`kstore.store_dataset`;
        the old ``(ddf, store, dataset_uuid)`` still works with a :class:`FutureWarning`.
    partition_on, secondary_indices
        As in :func:`kstore.store_dataset`.
    shuffle
        Shuffle rows (worker to worker, never through the client) so that each partition
        value lands in one Dask partition, hence in one file.
    bucket_by, num_buckets
        With ``shuffle=True``: hash the ``bucket_by`` values into ``num_buckets`` buckets
        and write each bucket of a partition value as its own file.
    mode
        ``"error"`` (create; :class:`~kstore.errors.DatasetExistsError` if it exists),
        ``"overwrite"`` (replace), ``"append"`` or ``"overwrite_partitions"`` (update, or
        create a missing dataset; see :func:`update_dataset`).
    schema_mode
        ``"strict"``, ``"merge"`` (new columns, widening) or, with ``mode="overwrite"``,
        ``"overwrite"``, as in :func:`kstore.store_dataset`.
    write_options, sort_by, commit_options
        As in :func:`kstore.store_dataset` (file encoding; rows sorted inside each file;
        ``CommitOptions`` of the one commit).
    compute
        ``False``: check the arguments now and return a ``dask.delayed`` that writes the
        files and makes the commit when computed (its result is the committed metadata);
        nothing is written or committed before. Compute it once. If a write task fails,
        nothing is committed and the files already written are left for
        :func:`kstore.garbage_collect`.
    metadata, metadata_format, table_name, txn
        As in :func:`kstore.store_dataset`.

    Returns
    -------
    DatasetMetadata or dask.delayed.Delayed
        The committed :class:`~kstore.core.metadata.DatasetMetadata`; with
        ``compute=False``, a ``Delayed`` that computes to it.

    Notes
    -----
    Arguments and the schema of ``ddf._meta`` are checked before anything is computed. If
    any task fails, nothing is committed and the files already written are deleted (best
    effort).

    Examples
    --------
    >>> import pandas as pd, dask, dask.dataframe as dd, kstore.dask
    >>> ddf = dd.from_pandas(pd.DataFrame({"p": [1, 2, 1, 2], "v": [1.0, 2.0, 3.0, 4.0]}), npartitions=2)
    >>> with dask.config.set(scheduler="threads"):
    ...     m = kstore.dask.store_dataset("memory://dask-store-doc", "ds", ddf, partition_on="p", shuffle=True)
    >>> sorted(lab.split("/")[0] for lab in m.partitions)
    ['p=1', 'p=2']
    """
    store, dataset_uuid, ddf = _arguments("store_dataset", store, dataset_uuid, data)
    return _write(ddf, store, dataset_uuid, mode=mode, partition_on=partition_on,
                  secondary_indices=secondary_indices, shuffle=shuffle, bucket_by=bucket_by,
                  num_buckets=num_buckets, metadata=metadata, metadata_format=metadata_format,
                  table_name=table_name, delete_scope=None, schema_mode=schema_mode, txn=txn,
                  write_options=write_options, sort_by=sort_by, commit_options=commit_options, compute=compute)


class _UpdateKeywords(_WriteKeywords, total=False):
    mode: Literal["append", "overwrite_partitions"]
    delete_scope: Sequence[Mapping[str, Any]] | None


@overload
def update_dataset(store: StoreLike | dd.DataFrame, dataset_uuid: Any, data: Any, *,
                   compute: Literal[True] = ..., **kwargs: Unpack[_UpdateKeywords]) -> DatasetMetadata: ...


@overload
def update_dataset(store: StoreLike | dd.DataFrame, dataset_uuid: Any, data: Any, *,
                   compute: Literal[False], **kwargs: Unpack[_UpdateKeywords]) -> Delayed: ...


def update_dataset(
    store: StoreLike | dd.DataFrame,
    dataset_uuid: Any,
    data: Any,
    *,
    partition_on: str | Sequence[str] | None = None,
    secondary_indices: str | Sequence[str] | None = None,
    shuffle: bool = False,
    bucket_by: str | Sequence[str] | None = None,
    num_buckets: int | None = None,
    mode: Literal["append", "overwrite_partitions"] = "append",
    delete_scope: Sequence[Mapping[str, Any]] | None = None,
    schema_mode: SchemaMode = "strict",
    metadata: Mapping[str, Any] | None = None,
    txn: tuple[str, int] | None = None,
    write_options: WriteOptions | Mapping[str, Any] | None = None,
    sort_by: str | Sequence[str] | None = None,
    commit_options: CommitOptions | Mapping[str, Any] | None = None,
    compute: bool = True,
) -> DatasetMetadata | Delayed:
    """Append a Dask DataFrame to a dataset (and/or delete partitions), in ONE commit.

    As :func:`kstore.update_dataset`: concurrent appends by other writers are merged; a
    concurrent change inside this write's scope raises
    :class:`~kstore.errors.CommitConflictError` (nothing is committed).

    Parameters
    ----------
    store, dataset_uuid, data
        As in :func:`store_dataset` (the dataset must exist).
    partition_on, secondary_indices
        As in :func:`kstore.update_dataset`.
    shuffle, bucket_by, num_buckets
        As in :func:`store_dataset`.
    mode
        ``"append"`` (default) or ``"overwrite_partitions"``: replace every partition value
        the new data touches.
    delete_scope
        ``[{partition column: value}, ...]``: partitions removed in the same commit.
    schema_mode
        ``"strict"`` or ``"merge"`` (new columns, widening), as in :func:`kstore.update_dataset`.
    metadata, txn, write_options, sort_by, commit_options
        As in :func:`kstore.update_dataset`.
    compute
        ``False``: return a ``dask.delayed`` as in :func:`store_dataset`.

    Returns
    -------
    DatasetMetadata or dask.delayed.Delayed
        The committed version; with ``compute=False``, a ``Delayed`` that computes to it.

    Examples
    --------
    >>> import pandas as pd, dask, dask.dataframe as dd, kstore, kstore.dask
    >>> _ = kstore.store_dataset("memory://dask-update-doc", "ds", pd.DataFrame({"p": [1], "v": [1.0]}),
    ...                          partition_on="p")
    >>> with dask.config.set(scheduler="threads"):
    ...     m = kstore.dask.update_dataset("memory://dask-update-doc", "ds",
    ...                                    dd.from_pandas(pd.DataFrame({"p": [2], "v": [2.0]}), npartitions=1))
    >>> m.version, len(m.partitions)
    (1, 2)
    """
    store, dataset_uuid, ddf = _arguments("update_dataset", store, dataset_uuid, data)
    if mode not in ("append", "overwrite_partitions"):
        raise InvalidArgumentError(f"mode must be 'append' or 'overwrite_partitions', got {mode!r}")
    return _write(ddf, store, dataset_uuid, mode=mode, partition_on=partition_on,
                  secondary_indices=secondary_indices, shuffle=shuffle, bucket_by=bucket_by,
                  num_buckets=num_buckets, metadata=metadata, metadata_format=None,
                  table_name=naming.DEFAULT_TABLE, delete_scope=delete_scope, schema_mode=schema_mode, txn=txn,
                  must_exist=True, write_options=write_options, sort_by=sort_by, commit_options=commit_options,
                  compute=compute)


# ---------------------------------------------------------------------------------------
# compaction
# ---------------------------------------------------------------------------------------


def _compute_all(tasks: Sequence[Delayed]) -> tuple[Any, ...]:
    """Compute ``tasks``; on a distributed client wait for every one, failed or not, before
    an error comes back (the caller then deletes what they all wrote)."""
    client = _distributed_client()
    if client is None:
        return tuple(dask_compute(*tasks))
    futures = client.compute(list(tasks))
    for f in futures:
        try:
            f.exception()
        except Exception:  # noqa: BLE001 - gathered (and raised) below
            pass
    return tuple(client.gather(futures))


def _rewrite_file(factory: Callable[[], Store], rewrite: RewritePlan, change: Any, number: int, task: ReadTask,
                  token: str) -> tuple[int, Any]:
    return number, rewrite_task(factory(), rewrite, change, number, task, token)


def _rewrite_in_tasks(factory: Callable[[], Store]) -> Callable[[Any, str], Sequence[tuple[int, Any]]]:
    """``run(job, token)`` of a distributed row rewrite (a merge, delete_rows, update_rows):
    one Dask task per planned file of ``job``, the plan and the change shipped once."""

    def run(job: Any, token: str) -> Sequence[tuple[int, Any]]:
        light = delayed(job.rewrite.light(), traverse=False)
        change = delayed(job.change, traverse=False)  # (one copy in the graph, shared by every task)
        return _compute_all([delayed(_rewrite_file, pure=False)(factory, light, change, i, t, token)
                             for i, t in enumerate(job.rewrite.tasks)])

    return run


def merge(
    store: StoreLike,
    dataset_uuid: str,
    source: Any,
    on: str | Sequence[str],
    *,
    when_matched: str = "update",
    when_not_matched: str = "insert",
    when_not_matched_by_source: str = "ignore",
    commit_options: CommitOptions | Mapping[str, Any] | None = None,
) -> MergeResult:
    """:func:`kstore.merge` with the target files it rewrites rewritten in Dask tasks (one per
    planned file) and ONE commit on the client.

    The source (a Dask or pandas DataFrame, or a pyarrow Table) is computed on the client and
    checked there (columns, types, unique keys), then shipped to the tasks once: an upsert's
    changed rows, not a second copy of the table. The client plans the files its keys may
    match, writes the inserts and commits; a failed task commits nothing and the files the
    tasks wrote are deleted.

    Parameters
    ----------
    store
        A URL or picklable store the workers can reach (``memory://`` only with threaded or
        in-process workers).
    dataset_uuid
        The dataset's name.
    source
        The changed rows, with the dataset's columns.
    on, when_matched, when_not_matched, when_not_matched_by_source, commit_options
        As in :func:`kstore.merge`.

    Returns
    -------
    MergeResult
        The counts and the committed version, as :func:`kstore.merge`.

    Examples
    --------
    >>> import pandas as pd, dask, kstore, kstore.dask
    >>> _ = kstore.store_dataset("memory://dask-merge-doc", "d", pd.DataFrame({"k": [1, 2], "x": [5, 6]}))
    >>> with dask.config.set(scheduler="threads"):
    ...     r = kstore.dask.merge("memory://dask-merge-doc", "d", pd.DataFrame({"k": [2, 3], "x": [60, 7]}), "k")
    >>> r.inserted, r.updated, sorted(kstore.read_dataset("memory://dask-merge-doc", "d")["x"])
    (1, 1, [5, 7, 60])
    """
    run = _rewrite_in_tasks(_worker_store(store, dataset_uuid))
    request = MergeRequest.of(dataset_uuid, on, when_matched, when_not_matched, when_not_matched_by_source)
    data = source.compute() if isinstance(source, dd.DataFrame) else source
    return distributed_merge(open_store(store), dataset_uuid, data, request, CommitOptions.of(commit_options), run)


def update_rows(
    store: StoreLike,
    dataset_uuid: str,
    predicates: Predicates,
    set: Mapping[str, Any],  # noqa: A002 - kstore.update_rows' name (SQL's SET)
    *,
    commit_options: CommitOptions | Mapping[str, Any] | None = None,
) -> UpdateResult:
    """:func:`kstore.update_rows` with the files it rewrites rewritten in Dask tasks (one per
    planned file: those the predicate may match by partition values, indices and
    statistics) and ONE commit on the client; a failed task commits nothing and the files
    the tasks wrote are deleted.

    Parameters
    ----------
    store
        A URL or picklable store the workers can reach (``memory://`` only with threaded or
        in-process workers).
    dataset_uuid
        The dataset's name.
    predicates
        The rows to change (DNF, as for :func:`kstore.read_dataset`); required.
    set
        ``{column: value}``, each value converted exactly to its column's type.
    commit_options
        :class:`~kstore.CommitOptions` or a dict (``txn``, ``info``, ``metadata``, ``max_attempts``).

    Returns
    -------
    UpdateResult
        The committed version, the rows updated, the files read and rewritten.

    Examples
    --------
    >>> import pandas as pd, dask, kstore, kstore.dask
    >>> _ = kstore.store_dataset("memory://dask-upd-doc", "d", pd.DataFrame({"k": [1, 2], "x": [5, 6]}))
    >>> with dask.config.set(scheduler="threads"):
    ...     r = kstore.dask.update_rows("memory://dask-upd-doc", "d", [[("k", "==", 2)]], {"x": 0})
    >>> r.updated, sorted(kstore.read_dataset("memory://dask-upd-doc", "d")["x"])
    (1, [0, 5])
    """
    run = _rewrite_in_tasks(_worker_store(store, dataset_uuid))
    return distributed_rows(open_store(store), dataset_uuid, predicates, set, CommitOptions.of(commit_options), run)


def delete_rows(
    store: StoreLike,
    dataset_uuid: str,
    predicates: Predicates,
    *,
    commit_options: CommitOptions | Mapping[str, Any] | None = None,
) -> DatasetMetadata:
    """:func:`kstore.delete_rows` with the files it rewrites rewritten in Dask tasks (one per
    planned file) and ONE commit on the client; a failed task commits nothing and the files
    the tasks wrote are deleted.

    Parameters
    ----------
    store
        A URL or picklable store the workers can reach.
    dataset_uuid
        The dataset's name.
    predicates
        The rows to delete (DNF); required.
    commit_options
        :class:`~kstore.CommitOptions` or a dict (``txn``, ``info``, ``metadata``, ``max_attempts``).

    Returns
    -------
    DatasetMetadata
        The committed version (the newest one unchanged when no row matched).

    Examples
    --------
    >>> import pandas as pd, dask, kstore, kstore.dask
    >>> _ = kstore.store_dataset("memory://dask-del-doc", "d", pd.DataFrame({"k": [1, 2, 3]}))
    >>> with dask.config.set(scheduler="threads"):
    ...     _ = kstore.dask.delete_rows("memory://dask-del-doc", "d", [[("k", ">=", 2)]])
    >>> kstore.read_dataset("memory://dask-del-doc", "d")["k"].tolist()
    [1]
    """
    run = _rewrite_in_tasks(_worker_store(store, dataset_uuid))
    return distributed_rows(open_store(store), dataset_uuid, predicates, None, CommitOptions.of(commit_options),
                            run).dataset



def _rewrite_task(factory: Callable[[], Store], plan: CompactionPlan, group: CompactionGroup,
                  file_id: str) -> list[WrittenFile]:
    return rewrite_group(factory(), plan, group, file_id=file_id)


def compact(
    store: StoreLike,
    dataset_uuid: str,
    *,
    target_file_size: int = DEFAULT_TARGET_FILE_SIZE,
    min_files: int = 2,
    partitions: Sequence[Mapping[str, Any]] | None = None,
    predicates: Predicates = None,
    dry_run: bool = False,
    write_options: WriteOptions | Mapping[str, Any] | None = None,
    sort_by: str | Sequence[str] | None = None,
    txn: tuple[str, int] | None = None,
) -> CompactionPlan:
    """:func:`kstore.compact` with the rewriting on Dask workers (one task per group of
    files that becomes one file) and ONE commit on the client.

    The default scheduler runs the tasks (a ``distributed.Client`` when one is active). If
    any task fails, nothing is committed and the files the tasks wrote are deleted.

    Parameters
    ----------
    store
        Where the dataset lives: a URL or picklable store that the workers can reach.
    dataset_uuid
        The dataset's name.
    target_file_size, min_files, partitions, predicates, dry_run, write_options, sort_by, txn
        As in :func:`kstore.compact`.

    Returns
    -------
    CompactionPlan
        The plan, with ``committed`` set to the new version (as :func:`kstore.compact`).

    Examples
    --------
    >>> import pandas as pd, dask, kstore, kstore.dask
    >>> _ = kstore.store_dataset("memory://dask-compact-doc", "d",
    ...                          iter([pd.DataFrame({"p": [1, 2], "x": [i, i]}) for i in range(3)]), partition_on="p")
    >>> with dask.config.set(scheduler="threads"):
    ...     done = kstore.dask.compact("memory://dask-compact-doc", "d")
    >>> done.files_in, done.files_out
    (6, 2)
    """
    st = open_store(store)
    plan = plan_compaction(st, dataset_uuid, CompactionRequest.of(
        dataset_uuid, target_file_size=target_file_size, min_files=min_files, partitions=partitions,
        predicates=predicates, write_options=write_options, sort_by=sort_by, txn=txn, dry_run=dry_run))
    if plan.dry_run or not plan.groups:
        return plan
    factory = _worker_store(store, dataset_uuid)
    token = _uuid.uuid4().hex[:8]
    light = delayed(worker_plan(plan), traverse=False)
    tasks = [delayed(_rewrite_task, pure=False)(factory, light, g, naming.tagged_file_id(token, i))
             for i, g in enumerate(plan.groups)]
    try:
        results = _compute_all(tasks)
    except BaseException:
        delete_by_token(st, plan.dataset_uuid, plan.table, token)
        raise
    files = [f for written in results for f in written]
    return finish_compaction(st, plan, files)[0]


# ---------------------------------------------------------------------------------------
# reading
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Pandas:
    """How every partition (and ``meta``) becomes pandas: the same dtypes in all of them."""

    arrow_strings: bool  # Dask's dataframe.convert-string option
    nullable: frozenset[str]  # integer/bool columns that may hold a null in any planned file
    categoricals: tuple[str, ...] = ()
    dates_as_object: bool = False


class _ReadPartition:
    """Read one Dask partition (a group of planned files); ``columns`` is Dask's projection."""

    def __init__(self, factory: Callable[[], Store], plan: ReadPlan, conversion: _Pandas) -> None:
        self.factory = factory
        self.plan = replace(plan, tasks=())  # the tasks travel one group per Dask partition
        self.conversion = conversion

    def __dask_tokenize__(self) -> tuple[Any, ...]:
        p, c = self.plan, self.conversion
        return ("kstore-read", repr(self.factory), p.dataset_uuid, p.version, p.table, repr(p.predicates), p.columns,
                c.arrow_strings, sorted(c.nullable), c.categoricals, c.dates_as_object)

    def __call__(self, files: _Files, columns: Sequence[str] | None = None) -> pd.DataFrame:
        plan = self.plan
        cols = list(plan.columns if columns is None else columns)
        store = self.factory()
        tables = [read_task(store, plan, t, cols) for t in files.tasks]
        table = concat_tables(tables) if tables else empty_table(plan, cols)
        return _to_pandas(table, plan.schema, self.conversion)


class _ChangesOfVersion:
    """Compute one Dask partition of :func:`read_changes`: the change rows of one version."""

    def __init__(self, factory: Callable[[], Store], changes: ChangeRange, conversion: _Pandas) -> None:
        self.factory, self.changes, self.conversion = factory, changes, conversion

    def __dask_tokenize__(self) -> tuple[Any, ...]:
        c = self.changes
        return ("kstore-changes", repr(self.factory), c.dataset_uuid, c.start, c.end, self.conversion.arrow_strings)

    def __call__(self, entry: LogEntry) -> pd.DataFrame:
        tables, _ = version_changes(self.factory(), self.changes, entry)
        schema = self.changes.schema
        table = pa.concat_tables([conform_changes(t, schema) for t in tables]) if tables else schema.empty_table()
        return _to_pandas(table, schema, self.conversion)


def read_changes(store: StoreLike, dataset_uuid: str, start_version: int, end_version: int | None = None,
                 ) -> dd.DataFrame:
    """:func:`kstore.read_changes` as a lazy Dask DataFrame: one partition per version with
    row changes in ``start_version`` .. ``end_version`` (inclusive; None: the newest),
    computed on the workers, oldest version first.

    The range is checked here, on the client (its log entries; a version garbage collection
    expired, or a delete of the dataset in it, is a
    :class:`~kstore.errors.VersionNotFoundError` now, not at compute time). Every partition
    has the columns of the newest version in the range (columns only older versions had
    are left out: a fixed schema, as Spark's) and ``_change_type``, ``_commit_version``,
    ``_commit_timestamp``; integer and bool data columns are ``Int64`` / ``boolean`` in every
    partition (a delete's or insert's rows may hold nulls where another version's do not).

    Parameters
    ----------
    store
        Where the dataset lives: a URL or picklable store the workers can reach.
    dataset_uuid
        The dataset's name.
    start_version, end_version
        The range, as in :func:`kstore.read_changes`.

    Returns
    -------
    dask.dataframe.DataFrame
        A lazy frame; nothing is read until it is computed.

    Examples
    --------
    >>> import pandas as pd, kstore, kstore.dask
    >>> _ = kstore.store_dataset("memory://dask-changes-doc", "d", pd.DataFrame({"k": [1, 2], "x": [5, 6]}))
    >>> _ = kstore.update_rows("memory://dask-changes-doc", "d", [[("k", "==", 2)]], set={"x": 60})
    >>> ddf = kstore.dask.read_changes("memory://dask-changes-doc", "d", 0)
    >>> ddf.npartitions, ddf.compute(scheduler="sync")["_change_type"].tolist()
    (2, ['insert', 'insert', 'update_preimage', 'update_postimage'])
    """
    st = open_store(store)
    changes = plan_changes(st, dataset_uuid, as_count(start_version, "start_version", minimum=0),
                           None if end_version is None else as_count(end_version, "end_version", minimum=0))
    schema = changes.schema
    nullable = frozenset(f.name for f in schema if f.name not in CHANGE_COLUMNS
                         and (pa.types.is_integer(f.type) or pa.types.is_boolean(f.type)))
    conversion = _Pandas(pyarrow_strings_enabled(), nullable)
    meta = _to_pandas(schema.empty_table(), schema, conversion)
    if not changes.entries:
        return dd.from_pandas(meta, npartitions=1)
    return dd.from_map(_ChangesOfVersion(_worker_store(store, dataset_uuid), changes, conversion),
                       list(changes.entries), meta=meta, label=f"kstore-changes-{dataset_uuid}",
                       enforce_metadata=False)


def _to_pandas(table: pa.Table, schema: pa.Schema, conversion: _Pandas) -> pd.DataFrame:
    """As the eager driver, with dtypes that Dask keeps as they are and that every partition
    (and ``meta``) shares: integer/bool columns that may hold nulls anywhere in the read are
    ``Int64``/``boolean`` in all of them; strings are ``string[pyarrow]`` when Dask converts
    strings (its ``dataframe.convert-string`` option); binary, decimal, list and struct
    columns are ``pd.ArrowDtype`` (as object columns Dask would turn them into strings);
    ``categoricals`` as in :func:`kstore.read_dataset`; with ``dates_as_object`` date columns
    are ``date32[pyarrow]``, whose values are ``datetime.date`` (an object column of dates
    Dask would turn into strings too)."""
    categoricals = [c for c in conversion.categoricals if c in table.column_names]
    return to_pandas(table, schema, types_mapper=partial(_dask_dtype, conversion.arrow_strings,
                                                         conversion.dates_as_object),
                     nullable=conversion.nullable, categoricals=categoricals,
                     dates_as_object=conversion.dates_as_object)  # (no cast to timestamps)


def _dask_dtype(arrow_strings: bool, dates: bool, t: pa.DataType) -> Any:
    if dates and pa.types.is_date(t):
        return pd.ArrowDtype(t)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return pd.StringDtype("pyarrow") if arrow_strings else None
    if (pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_decimal(t) or pa.types.is_list(t)
            or pa.types.is_large_list(t) or pa.types.is_struct(t)):
        return pd.ArrowDtype(t)
    return None


class _Files:
    """The planned files of one Dask partition; Dask tokenizes it by the files' labels only
    (the plan's version and predicates are in the reader's token), which is cheap."""

    __slots__ = ("tasks",)

    def __init__(self, tasks: Sequence[ReadTask]) -> None:
        self.tasks = tuple(tasks)

    def __dask_tokenize__(self) -> tuple[str, ...]:
        return tuple(t.label for t in self.tasks)

    def __reduce__(self) -> tuple[type[_Files], tuple[tuple[ReadTask, ...]]]:
        return (_Files, (self.tasks,))


def _as_blocksize(value: Any) -> int | None:
    """``blocksize`` in bytes: None, a positive int, or a string Dask's ``parse_bytes``
    reads (``"128MiB"``, ``"64 MB"``)."""
    if value is None:
        return None
    size: Any = value
    if isinstance(value, str):
        try:  # parse_bytes reads "" and "MB" as 1 and 10**6 bytes: a number is required
            size = parse_bytes(value) if any(c.isdigit() for c in value) else None
        except (ValueError, TypeError):
            size = None
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise InvalidArgumentError(
            f"blocksize must be None, a positive number of bytes or a size such as '128MiB', got {value!r}"
        )
    return size


def _dispatch(plan: ReadPlan, store: Store, dispatch_by: Sequence[str] | None) -> list[_Files]:
    """One group per planned file, or one per distinct value combination of ``dispatch_by``."""
    if dispatch_by is None:
        return [_Files((t,)) for t in plan.tasks]
    cols = as_columns(dispatch_by, "dispatch_by")
    missing = [c for c in cols if c not in plan.schema.names]
    if missing:
        raise ColumnNotFoundError(f"dataset {plan.dataset_uuid!r}: dispatch_by names unknown column(s) {missing}")
    pkeys = load_metadata(store, plan.dataset_uuid, version=plan.version).partition_keys
    other = [c for c in cols if c not in pkeys]
    if other:
        raise InvalidArgumentError(
            f"dataset {plan.dataset_uuid!r}: dispatch_by supports partition columns {list(pkeys)}; "
            f"{other} are not"
        )
    groups: dict[tuple[Any, ...], list[ReadTask]] = {}
    for t in plan.tasks:
        values = dict(t.partition_values)
        groups.setdefault(tuple(values[c] for c in cols), []).append(t)
    return [_Files(groups[k]) for k in sorted(groups)]


def read_dataset(
    store: StoreLike,
    dataset_uuid: str,
    columns: Sequence[str] | None = None,
    predicates: Predicates = None,
    *,
    filters: Predicates = None,
    version: int | None = None,
    as_of: AsOf = None,
    table: str | None = None,
    categoricals: Sequence[str] | None = None,
    dates_as_object: bool = False,
    dispatch_by: str | Sequence[str] | None = None,
    blocksize: int | str | None = None,
) -> dd.DataFrame:
    """A lazy Dask DataFrame of (a filtered part of) a dataset.

    ``version`` or ``as_of`` (a datetime or ISO timestamp: the version current then) read
    an older version, as in :func:`kstore.read_dataset`.

    Planning happens once, here, on the client: ``predicates`` (DNF, as in
    :func:`kstore.read_dataset`) prune partitions by partition values, secondary indices
    and statistics, and each remaining file becomes one Dask partition (with
    ``dispatch_by``: one Dask partition per distinct value combination of those partition
    columns). ``meta`` comes from the schema and the per-file statistics (1 get), and
    every partition has exactly its dtypes: an integer or bool column that may hold a null
    in any planned file is ``Int64`` / ``boolean`` in all of them; binary, decimal, list
    and struct columns are ``pd.ArrowDtype`` (Dask would turn object columns into
    strings). ``columns=[]`` reads no column but every row (``len(ddf)`` counts). Dask's
    optimizer pushes column selections into the Parquet reads. Many small files (many
    appends, a high-cardinality ``partition_on``) make many tiny partitions: ``blocksize``
    reads several files per partition.

    Parameters
    ----------
    store
        Where the dataset lives: a URL or picklable store that the workers can reach
        (``memory://`` only with threaded or in-process workers).
    dataset_uuid
        The dataset's name.
    columns
        Columns to read (None: all; ``[]``: none, but every row).
    predicates
        DNF ``[[(col, op, value), ...], ...]``, as in :func:`kstore.read_dataset`.
    filters
        The same as ``predicates``, under the name ``dd.read_parquet`` (and pyarrow,
        deltalake) use for it; give one of the two.
    version, as_of, table
        Read an older retained version, or another table of a multi-table (kartothek)
        dataset, as in :func:`kstore.read_dataset`.
    categoricals, dates_as_object
        As in :func:`kstore.read_dataset`: columns read as pandas categoricals (Dask's
        *unknown* categories: each partition has its own; ``ddf.categorize()`` or
        ``.cat.as_known()`` computes them), and dates as ``datetime.date`` values (a
        ``date32[pyarrow]`` column: Dask turns object columns into strings).
    dispatch_by
        Partition columns: one Dask partition per distinct combination of their values
        (instead of one per file).
    blocksize
        Aggregate small files: each Dask partition reads consecutive planned files (plan
        order, across partition values) whose summed size is at most this many bytes; a
        larger file is a partition of its own. An int, or a string as Dask reads it
        (``"128MiB"``, ``"64 MB"``). The sizes are the files' stored (compressed Parquet)
        bytes from the per-file statistics, before predicates and column selection, so a
        partition holds at most ``blocksize`` bytes of files (in memory it is usually
        larger). Files without statistics (kartothek and plateau datasets) stay one
        partition each. None (default): one partition per file, as ``dd.read_parquet``
        (which by default never aggregates files: ``aggregate_files=False``; its
        ``blocksize`` splits large files by row groups instead). Not with ``dispatch_by``.

    Returns
    -------
    dask.dataframe.DataFrame
        A lazy frame; nothing is read until it is computed.

    Examples
    --------
    >>> import pandas as pd, dask, kstore, kstore.dask
    >>> _ = kstore.store_dataset("memory://dask-read-doc", "ds",
    ...                          pd.DataFrame({"p": [1, 2, 2], "v": [1.0, 2.0, 3.0]}), partition_on="p")
    >>> ddf = kstore.dask.read_dataset("memory://dask-read-doc", "ds", predicates=[[("p", "==", 2)]])
    >>> ddf.npartitions, ddf.dtypes.to_dict()
    (1, {'p': dtype('int64'), 'v': dtype('float64')})
    >>> ddf["v"].sum().compute(scheduler="threads")
    np.float64(5.0)
    >>> kstore.dask.read_dataset("memory://dask-read-doc", "ds", blocksize="128MiB").npartitions
    1
    """
    predicates = predicates_or_filters(predicates, filters)
    size = _as_blocksize(blocksize)
    if size is not None and dispatch_by is not None:
        raise InvalidArgumentError("blocksize and dispatch_by cannot be used together: each chooses the partitions")
    st = open_store(store)
    factory = _worker_store(store, dataset_uuid)
    plan, stats = plan_with_stats(st, dataset_uuid, columns, predicates, version=version, as_of=as_of, table=table,
                                  stats=True)
    cats = as_column_list(categoricals, "categoricals") or ()
    unknown = [c for c in cats if c not in plan.schema.names]
    if unknown:
        raise ColumnNotFoundError(f"dataset {dataset_uuid!r}: categoricals {unknown} are not columns of the dataset")
    conversion = _Pandas(pyarrow_strings_enabled(), nullable_columns(plan, stats), cats,
                         as_bool(dates_as_object, "dates_as_object"))
    meta = _to_pandas(empty_table(plan), plan.schema, conversion)
    if cats:  # each partition holds its own categories: Dask's "unknown categories"
        meta = clear_known_categories(meta, cols=[c for c in cats if c in meta.columns])
    if size is not None:
        sizes = file_sizes(plan, stats)
        groups = [_Files(g) for g in pack_in_order(plan.tasks, [sizes.get(t.label) for t in plan.tasks], size)]
    else:
        groups = _dispatch(plan, st, dispatch_by)
    if not groups:
        return dd.from_pandas(meta, npartitions=1)
    return dd.from_map(_ReadPartition(factory, plan, conversion), groups, meta=meta,
                       label=f"kstore-read-{dataset_uuid}", enforce_metadata=False)
