"""Lifecycle driver: indices, row deletes, updates and merges, history, GC, deletion, copies, upgrades.

Every mutation here goes through :func:`kstore.blocks.commit.commit`.

Examples
--------
>>> import pandas as pd, kstore
>>> _ = kstore.store_dataset("memory://life-doc", "d", pd.DataFrame({"p": [1, 2], "x": [5, 6]}), partition_on="p")
>>> _ = kstore.build_indices("memory://life-doc", "d", ["x"])
>>> [h.operation for h in kstore.history("memory://life-doc", "d")]
['create', 'build_indices']
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Literal, overload

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

from kstore.blocks import changes as _changes
from kstore.blocks import load, mutate
from kstore.blocks import merge as _merge
from kstore.blocks import restore as _restore
from kstore.blocks.commit import commit, owning_files
from kstore.blocks.compact import (
    DEFAULT_TARGET_FILE_SIZE,
    CompactionPlan,
    CompactionRequest,
    finish_compaction,
    plan_compaction,
    rewrite_groups,
)
from kstore.blocks.gc import (
    DEFAULT_LOG_RETENTION,
    DEFAULT_RETENTION,
    MIN_RETENTION,
    GCResult,
    collect_garbage,
    delete_all,
)
from kstore.blocks.history import Diff, HistoryEntry, version_as_of
from kstore.blocks.history import diff as _diff
from kstore.blocks.history import history as _history
from kstore.blocks.merge import MergeRequest, MergeResult, WhenMatched, WhenNotMatched, WhenNotMatchedBySource
from kstore.blocks.mutate import UpdateResult
from kstore.blocks.write import WrittenFile
from kstore.core import naming, runtime
from kstore.core.arguments import AsOf, as_bool, as_columns, as_count, as_timestamp, as_txn, as_version, as_workers
from kstore.core.commit_options import CommitOptions
from kstore.core.metadata import DatasetMetadata
from kstore.core.operations import Create, Upgrade
from kstore.core.predicates import Predicates
from kstore.core.writer_options import WriteOptions
from kstore.errors import DatasetExistsError, InvalidArgumentError
from kstore.io.progress import ProgressLike, bar, check_progress, is_data_file, tracked
from kstore.io.store import StoreLike, open_store

__all__ = [
    "compact",
    "build_indices",
    "drop_indices",
    "delete_rows",
    "update_rows",
    "merge",
    "restore",
    "read_changes",
    "history",
    "diff",
    "resolve_version",
    "garbage_collect",
    "delete_dataset",
    "copy_dataset",
    "upgrade_dataset",
]


def build_indices(store: StoreLike, dataset_uuid: str, columns: str | Sequence[str], *,
                  txn: tuple[str, int] | None = None) -> DatasetMetadata:
    """Build (or rebuild) secondary indices of ``columns`` over every partition; one commit.

    Reads only the indexed column of each file. Partitions appended concurrently are
    indexed at commit time, so the index always covers the committed partitions.

    Parameters
    ----------
    store
        Where the dataset lives (:data:`~kstore.io.store.StoreLike`).
    dataset_uuid
        The dataset's name.
    columns
        The column(s) to index (partition columns are indexed already and skipped).
    txn
        ``(app_id, version)``: makes the build idempotent, as for every write.

    Returns
    -------
    DatasetMetadata
        The committed version.

    Raises
    ------
    ColumnNotFoundError
        A column is not in the dataset's schema.

    Examples
    --------
    >>> import pandas as pd, kstore
    >>> _ = kstore.store_dataset("memory://bi-doc", "d", pd.DataFrame({"p": [1, 2], "x": [5, 6]}), partition_on="p")
    >>> sorted(kstore.build_indices("memory://bi-doc", "d", ["x"]).indices)
    ['x']
    """
    if columns is None:
        raise InvalidArgumentError(f"dataset {dataset_uuid!r}: build_indices needs columns to index")
    return mutate.build_indices(open_store(store), dataset_uuid, list(as_columns(columns, "columns")),
                                options=CommitOptions(txn=as_txn(txn)))


def drop_indices(store: StoreLike, dataset_uuid: str, columns: str | Sequence[str], *,
                 txn: tuple[str, int] | None = None) -> DatasetMetadata:
    """Drop the secondary indices of ``columns``; one commit, no data file touched.

    Older versions keep their indices (time travel plans as before); the index files are
    deleted by garbage collection once no retained version references them.

    Parameters
    ----------
    store
        Where the dataset lives (:data:`~kstore.io.store.StoreLike`).
    dataset_uuid
        The dataset's name.
    columns
        The indexed column(s) to drop.
    txn
        ``(app_id, version)``: makes the drop idempotent, as for every write.

    Returns
    -------
    DatasetMetadata
        The committed version.

    Raises
    ------
    InvalidArgumentError
        A column has no secondary index.

    Examples
    --------
    >>> import pandas as pd, kstore
    >>> _ = kstore.store_dataset("memory://di-doc", "d", pd.DataFrame({"p": [1, 2], "x": [5, 6]}), partition_on="p",
    ...                          secondary_indices=["x"])
    >>> dict(kstore.drop_indices("memory://di-doc", "d", "x").indices)
    {}
    """
    return mutate.drop_indices(open_store(store), dataset_uuid, list(as_columns(columns, "columns")),
                               options=CommitOptions(txn=as_txn(txn)))


def rename_columns(store: StoreLike, dataset_uuid: str, renames: Mapping[str, str], *,
                   txn: tuple[str, int] | None = None) -> DatasetMetadata:
    """Rename columns; one commit, no data file rewritten (Delta's column mapping, Iceberg's
    field ids).

    The data files keep each renamed column under the name they hold it under (its *file
    name*, recorded in the schema); every kstore reader (eager, iterator, Dask, Spark)
    returns it under its new name, predicates and indices use the new name, and new writes
    store it under the file name too. Older versions keep the old name (time travel reads
    them as they were). kartothek and plateau read the files: they see the column under its
    file name (``docs/guides/schema.md``).

    Parameters
    ----------
    store
        Where the dataset lives (:data:`~kstore.io.store.StoreLike`).
    dataset_uuid
        The dataset's name.
    renames
        ``{old name: new name}``; names may swap (``{"a": "b", "b": "a"}``).
    txn
        ``(app_id, version)``: makes the rename idempotent, as for every write.

    Returns
    -------
    DatasetMetadata
        The committed version.

    Raises
    ------
    ColumnNotFoundError
        A column to rename is not in the dataset (or another writer renamed or dropped it).
    SchemaMismatchError
        Two columns would have the same name.
    InvalidArgumentError
        A partition column (its name is in every file's path: overwrite the dataset with
        ``schema_mode="overwrite"`` instead).

    Examples
    --------
    >>> import pandas as pd, kstore
    >>> _ = kstore.store_dataset("memory://rename-doc", "d", pd.DataFrame({"id": [1, 2], "amt": [5.0, 6.0]}))
    >>> _ = kstore.rename_columns("memory://rename-doc", "d", {"amt": "amount"})
    >>> kstore.read_dataset("memory://rename-doc", "d", predicates=[[("amount", ">", 5.5)]]).to_dict("list")
    {'id': [2], 'amount': [6.0]}
    >>> list(kstore.read_dataset("memory://rename-doc", "d", version=0).columns)
    ['id', 'amt']
    """
    if not isinstance(renames, Mapping):
        raise InvalidArgumentError(f"dataset {dataset_uuid!r}: renames is a mapping {{old name: new name}}, "
                                   f"not {type(renames).__name__}")
    return mutate.change_columns(open_store(store), dataset_uuid, renames=renames,
                                 options=CommitOptions(txn=as_txn(txn)))


def drop_columns(store: StoreLike, dataset_uuid: str, columns: str | Sequence[str], *,
                 txn: tuple[str, int] | None = None) -> DatasetMetadata:
    """Drop columns; one commit, no data file rewritten (Delta's column mapping, Iceberg's
    field ids).

    The files written before keep the values, which no reader of this or a later version
    reads; garbage collection removes them with the files once no retained version
    references those (a compaction rewrites files without them). Older versions keep the
    column (time travel). A column added later under the same name starts empty: its files
    hold it under a fresh file name, so the dropped values never come back.

    Parameters
    ----------
    store
        Where the dataset lives (:data:`~kstore.io.store.StoreLike`).
    dataset_uuid
        The dataset's name.
    columns
        The column(s) to drop; a secondary index on one is dropped with it.
    txn
        ``(app_id, version)``: makes the drop idempotent, as for every write.

    Returns
    -------
    DatasetMetadata
        The committed version.

    Raises
    ------
    ColumnNotFoundError
        A column is not in the dataset (or another writer renamed or dropped it).
    InvalidArgumentError
        A partition column, or every column.

    Examples
    --------
    >>> import pandas as pd, kstore
    >>> _ = kstore.store_dataset("memory://dropcol-doc", "d", pd.DataFrame({"id": [1], "tmp": ["x"]}))
    >>> _ = kstore.drop_columns("memory://dropcol-doc", "d", "tmp")
    >>> list(kstore.read_dataset("memory://dropcol-doc", "d").columns)
    ['id']
    >>> _ = kstore.update_dataset("memory://dropcol-doc", "d", pd.DataFrame({"id": [2], "tmp": ["new"]}),
    ...                           schema_mode="merge")
    >>> kstore.read_dataset("memory://dropcol-doc", "d")["tmp"].isna().tolist()  # the old values never come back
    [True, False]
    """
    return mutate.change_columns(open_store(store), dataset_uuid, drops=list(as_columns(columns, "columns")),
                                 options=CommitOptions(txn=as_txn(txn)))


def delete_rows(store: StoreLike, dataset_uuid: str, predicates: Predicates, *,
                txn: tuple[str, int] | None = None) -> DatasetMetadata:
    """Delete the rows matching ``predicates``: rewrite only the affected files (copy-on-write).

    A file left empty is dropped. If another writer removes or replaces an affected
    partition, or adds a file the predicate may match (by the indices and statistics),
    before this commits, it fails with :class:`~kstore.errors.CommitConflictError`: the
    delete did not see those rows, and committing it would leave them in place.

    Parameters
    ----------
    store
        Where the dataset lives (:data:`~kstore.io.store.StoreLike`).
    dataset_uuid
        The dataset's name.
    predicates
        DNF ``[[(col, op, value), ...], ...]``: the rows to delete (required; use
        :func:`delete_dataset` to delete everything).
    txn
        ``(app_id, version)``: a re-run after the delete committed changes nothing.

    Returns
    -------
    DatasetMetadata
        The committed version, or the current one when no row matched (nothing committed).

    Examples
    --------
    >>> import pandas as pd, kstore
    >>> _ = kstore.store_dataset("memory://dr-doc", "d", pd.DataFrame({"p": [1, 1, 2], "x": [5, 6, 7]}), partition_on="p")
    >>> m = kstore.delete_rows("memory://dr-doc", "d", [[("x", "==", 6)]])
    >>> m.version, sorted(kstore.read_dataset("memory://dr-doc", "d")["x"])
    (1, [5, 7])
    """
    return mutate.delete_rows(open_store(store), dataset_uuid, predicates, options=CommitOptions(txn=as_txn(txn)))



def update_rows(store: StoreLike, dataset_uuid: str, predicates: Predicates, set: Mapping[str, Any], *,  # noqa: A002
                txn: tuple[str, int] | None = None) -> UpdateResult:
    """Set columns to constant values in the rows matching ``predicates`` (SQL's ``UPDATE ...
    SET ... WHERE``): rewrite only the affected files (copy-on-write); one commit.

    Each value is converted exactly to its column's type (``None`` sets nulls); setting a
    partition column moves the rows to that partition. Conflicts as for
    :func:`delete_rows`: another writer removing an affected file, or adding a file the
    predicate may match, before this commits is a :class:`~kstore.errors.CommitConflictError`
    (nothing committed).

    Parameters
    ----------
    store
        Where the dataset lives (:data:`~kstore.io.store.StoreLike`).
    dataset_uuid
        The dataset's name.
    predicates
        DNF ``[[(col, op, value), ...], ...]``: the rows to update (required; the forms of
        :func:`delete_rows`).
    set
        ``{column: value}``: the new values.
    txn
        ``(app_id, version)``: a re-run after the update committed changes nothing.

    Returns
    -------
    UpdateResult
        ``dataset`` (the committed version, or the current one when no row matched: nothing
        committed), ``updated`` (rows), ``files_read``, ``files_rewritten``.

    Raises
    ------
    ColumnNotFoundError
        A column of ``set`` (or of the predicate) is not in the dataset.
    InvalidArgumentError
        No predicate, or a value its column's type cannot hold (the message names both).

    Examples
    --------
    >>> import pandas as pd, kstore
    >>> _ = kstore.store_dataset("memory://ur-doc", "d", pd.DataFrame({"p": [1, 1, 2], "x": [5, 6, 7]}), partition_on="p")
    >>> r = kstore.update_rows("memory://ur-doc", "d", [[("x", ">=", 6)]], set={"x": 0})
    >>> r.updated, r.files_rewritten, sorted(kstore.read_dataset("memory://ur-doc", "d")["x"])
    (2, 2, [0, 0, 5])
    """
    return mutate.update_rows(open_store(store), dataset_uuid, predicates, set, options=CommitOptions(txn=as_txn(txn)))


def merge(store: StoreLike, dataset_uuid: str, source: pd.DataFrame | pa.Table, on: str | Sequence[str], *,
          when_matched: WhenMatched = "update", when_not_matched: WhenNotMatched = "insert",
          when_not_matched_by_source: WhenNotMatchedBySource = "ignore",
          txn: tuple[str, int] | None = None) -> MergeResult:
    """Upsert ``source`` by the key columns ``on`` (Delta's ``MERGE``, pyiceberg's ``upsert``,
    Lance's ``merge_insert``); one atomic commit.

    - ``when_matched``: ``"update"`` (the target rows get the source row's values, Delta's
      ``whenMatchedUpdateAll``), ``"delete"`` or ``"ignore"``;
    - ``when_not_matched``: ``"insert"`` the source rows whose key no target row has, or
      ``"ignore"`` them;
    - ``when_not_matched_by_source``: ``"delete"`` the target rows whose key the source
      lacks (a full sync), or ``"ignore"`` them.

    Only the files that may hold a source key are read: the keys become a predicate (per key
    column an ``in`` of the distinct values, or their range beyond 10,000 of them) pruned by
    partition values, secondary indices and statistics; each file holding a matched row is
    rewritten once (a row whose partition column changes moves to its new partition), new
    rows are added as new files, unaffected files stay. ``when_not_matched_by_source="delete"``
    must read every file.

    Keys compare as in SQL: a key with a null in any key column matches nothing, so such a
    source row is inserted (with ``when_not_matched="insert"``) and such a target row is
    "not matched by the source". A source key that occurs twice is an error (not a silent
    choice); a target key held by several rows updates (deletes) each of them.

    Conflicts: another writer removing a file this merge rewrites, or adding a file the
    source's keys may match (by partition values, indices and statistics), before this
    commits is a :class:`~kstore.errors.CommitConflictError` (nothing committed); appends
    the keys cannot match commute. With ``when_not_matched_by_source="delete"`` any
    concurrent append is a conflict.

    Parameters
    ----------
    store
        Where the dataset lives (:data:`~kstore.io.store.StoreLike`).
    dataset_uuid
        The dataset's name.
    source
        A pandas DataFrame or pyarrow Table with exactly the dataset's columns, converted and
        checked as :func:`~kstore.update_dataset` converts an append (not changed).
    on
        The key column(s).
    when_matched, when_not_matched, when_not_matched_by_source
        What becomes of each kind of row (above).
    txn
        ``(app_id, version)``: a re-run after the merge committed changes nothing.

    Returns
    -------
    MergeResult
        ``dataset`` (the committed version, or the current one when nothing changed),
        ``inserted``, ``updated``, ``deleted`` (rows), ``files_read``, ``files_rewritten``,
        ``files_added``.

    Raises
    ------
    SchemaMismatchError
        The source lacks a column of the dataset, has one it does not, or a column's type
        does not fit.
    InvalidArgumentError
        A key occurs twice in the source (the message shows up to 5), or a bad argument.

    Examples
    --------
    >>> import pandas as pd, kstore
    >>> _ = kstore.store_dataset("memory://mg-doc", "d", pd.DataFrame({"k": [1, 2, 3], "x": [5, 6, 7]}))
    >>> r = kstore.merge("memory://mg-doc", "d", pd.DataFrame({"k": [3, 4], "x": [70, 8]}), on="k")
    >>> r.inserted, r.updated, r.deleted, r.dataset.version
    (1, 1, 0, 1)
    >>> kstore.read_dataset("memory://mg-doc", "d").sort_values("k")["x"].tolist()
    [5, 6, 70, 8]
    """
    request = MergeRequest.of(dataset_uuid, on, when_matched, when_not_matched, when_not_matched_by_source)
    return _merge.merge(open_store(store), dataset_uuid, source, request, options=CommitOptions(txn=as_txn(txn)))

def restore(store: StoreLike, dataset_uuid: str, version: int | None = None, *, as_of: AsOf = None,
            txn: tuple[str, int] | None = None) -> DatasetMetadata:
    """Make an older retained version the newest again, as a new version (nothing is rewritten).

    The new version references the files ``version`` referenced and takes its schema,
    partition columns, secondary indices and user metadata (Delta's ``RESTORE``, Iceberg's
    rollback, Lance's ``restore``). The versions in between stay in :func:`history` and
    readable by time travel until :func:`garbage_collect` expires them. Application
    transactions (``txn``) committed since stay committed.

    Parameters
    ----------
    store
        Where the dataset lives (:data:`~kstore.io.store.StoreLike`).
    dataset_uuid
        The dataset's name.
    version
        The retained version to restore.
    as_of
        Or: the version that was current at this ``datetime`` / ISO 8601 text
        (:data:`~kstore.core.arguments.AsOf`). Give ``version`` or ``as_of``.
    txn
        ``(app_id, version)``: a re-run after the restore committed changes nothing.

    Returns
    -------
    DatasetMetadata
        The committed version (the newest one unchanged when it is ``version`` itself).

    Raises
    ------
    VersionNotFoundError
        The version was expired by :func:`garbage_collect` (or never existed), or a garbage
        collection committed after it may expire it (its cutoff is later than the
        version's commit): its files may be deleted, so it cannot be restored.
    CommitConflictError
        Another writer added or removed files after the restore read the newest version
        (nothing was committed; run it again).

    Examples
    --------
    >>> import pandas as pd, kstore
    >>> _ = kstore.store_dataset("memory://restore-doc", "d", pd.DataFrame({"x": [1, 2]}))
    >>> _ = kstore.store_dataset("memory://restore-doc", "d", pd.DataFrame({"x": [9]}), mode="overwrite")
    >>> kstore.restore("memory://restore-doc", "d", 0).version
    2
    >>> sorted(kstore.read_dataset("memory://restore-doc", "d")["x"])
    [1, 2]
    >>> [h.operation for h in kstore.history("memory://restore-doc", "d")]
    ['create', 'overwrite', 'restore']
    """
    if version is None and as_of is None:
        raise InvalidArgumentError("restore needs the version to restore: pass version or as_of")
    st = open_store(store)
    target = resolve_version(st, dataset_uuid, version=version, as_of=as_of)
    assert target is not None
    return _restore.restore(st, dataset_uuid, target, options=CommitOptions(txn=as_txn(txn)))


@overload
def read_changes(store: StoreLike, dataset_uuid: str, start_version: int, end_version: int | None = None, *,
                 as_arrow: Literal[False] = False) -> pd.DataFrame: ...


@overload
def read_changes(store: StoreLike, dataset_uuid: str, start_version: int, end_version: int | None = None, *,
                 as_arrow: Literal[True]) -> pa.Table: ...


def read_changes(store: StoreLike, dataset_uuid: str, start_version: int, end_version: int | None = None, *,
                 as_arrow: bool = False) -> pd.DataFrame | pa.Table:
    """The rows each version inserted, deleted and updated (a change feed, like Delta's change
    data feed and Iceberg's incremental scans), for incremental pipelines.

    Every row carries ``_change_type`` (``insert``, ``delete``, ``update_preimage``,
    ``update_postimage``), ``_commit_version`` and ``_commit_timestamp``; an update's two
    images follow each other. Appends and creates insert, partition deletes delete,
    overwrites delete the replaced rows and insert the new ones, :func:`delete_rows` deletes,
    :func:`update_rows` and :func:`merge` update (pairs found by the columns an update did not
    set, by a merge's keys), insert and delete, :func:`restore` deletes and inserts what
    differs, and compactions, index builds and garbage collection change nothing. The
    changes are derived from the log and the files the versions reference (nothing extra is
    written at commit time), so they are there for every version garbage collection retains.

    Parameters
    ----------
    store
        Where the dataset lives (:data:`~kstore.io.store.StoreLike`).
    dataset_uuid
        The dataset's name.
    start_version
        The first version whose changes are read (Delta's ``startingVersion``: inclusive).
    end_version
        The last one (inclusive; None: the newest).
    as_arrow
        Return a ``pyarrow.Table`` instead of a pandas DataFrame.

    Returns
    -------
    pandas.DataFrame or pyarrow.Table
        The change rows, oldest version first.

    Raises
    ------
    VersionNotFoundError
        A version of the range, or the one before it (changes are computed against it), was
        expired by :func:`garbage_collect`; or a version of the range deleted the dataset.

    Examples
    --------
    >>> import pandas as pd, kstore
    >>> _ = kstore.store_dataset("memory://changes-doc", "d", pd.DataFrame({"k": [1, 2], "x": [5, 6]}))
    >>> _ = kstore.merge("memory://changes-doc", "d", pd.DataFrame({"k": [2, 3], "x": [60, 7]}), "k")
    >>> kstore.read_changes("memory://changes-doc", "d", 1)[["k", "x", "_change_type", "_commit_version"]]
       k   x      _change_type  _commit_version
    0  2   6   update_preimage                1
    1  2  60  update_postimage                1
    2  3   7            insert                1
    """
    from kstore.blocks.read import to_pandas

    st = open_store(store)
    table = _changes.read_changes(st, dataset_uuid, as_count(start_version, "start_version", minimum=0),
                                  None if end_version is None else as_count(end_version, "end_version", minimum=0))
    if as_bool(as_arrow, "as_arrow"):
        return table
    newest = load.load_latest(st, dataset_uuid)[0]
    metadata = load.load_schema(st, newest).metadata if newest is not None else None
    return to_pandas(table, table.schema.with_metadata(metadata), index=False)  # (its nullable dtypes)


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
    max_workers: int | None = None,
    progress: ProgressLike = None,
) -> CompactionPlan:
    """Merge small files per partition into files of up to ``target_file_size`` bytes, in
    ONE conflict-checked commit (see :mod:`kstore.blocks.compact`).

    Rows, indices and statistics stay exact; the replaced files stay for time travel until
    garbage collection. A file compacted here that another writer removed or replaced
    meanwhile makes it fail with :class:`~kstore.errors.CommitConflictError` (nothing
    committed); concurrent appends are kept.

    Parameters
    ----------
    store
        Where the dataset lives (:data:`~kstore.io.store.StoreLike`).
    dataset_uuid
        The dataset's name.
    target_file_size
        Bytes per merged file, at most (default 128 MiB); files at least this large are
        left alone.
    min_files
        A partition with fewer small files than this is left alone.
    partitions
        ``[{partition column: value}, ...]``: compact only these partitions.
    predicates
        A DNF: compact only the files its plan keeps. Give ``partitions`` or
        ``predicates``, not both.
    dry_run
        Return the plan (partitions, files in and out, bytes) and write nothing.
    write_options, sort_by
        How the new files are encoded (as for writes: ``sort_by`` clusters them).
    txn
        ``(app_id, version)`` for an idempotent compaction.
    max_workers
        Threads rewriting groups of files (default: one per CPU).
    progress
        ``True`` for a progress bar on stderr, or ``progress(done, total)``, called after
        each rewritten group (groups of files merged into one).

    Returns
    -------
    CompactionPlan
        The plan (:class:`~kstore.blocks.compact.CompactionPlan`), with ``committed`` set to
        the new version (None for a dry run or when there was nothing to compact).

    Examples
    --------
    >>> import pandas as pd, kstore
    >>> for i in range(3):
    ...     _ = kstore.update_dataset("memory://compact-doc", "d", pd.DataFrame({"p": [1, 2], "x": [i, i]}),
    ...                               partition_on="p") if i else kstore.store_dataset(
    ...         "memory://compact-doc", "d", pd.DataFrame({"p": [1, 2], "x": [i, i]}), partition_on="p")
    >>> kstore.compact("memory://compact-doc", "d", dry_run=True).files_in
    6
    >>> done = kstore.compact("memory://compact-doc", "d")
    >>> done.files_in, done.files_out, len(kstore.load_metadata("memory://compact-doc", "d").partitions)
    (6, 2, 2)
    """
    max_workers = as_workers(max_workers)
    st = open_store(store)
    plan = plan_compaction(st, dataset_uuid, CompactionRequest.of(
        dataset_uuid, target_file_size=target_file_size, min_files=min_files, partitions=partitions,
        predicates=predicates, write_options=write_options, sort_by=sort_by, txn=txn, dry_run=dry_run))
    if plan.dry_run or not plan.groups:
        return plan
    if progress is True:
        with bar(f"compact {dataset_uuid}", len(plan.groups)) as advance:
            files = rewrite_groups(st, plan, max_workers=max_workers, progress=lambda done, total: advance())
    else:
        check_progress(progress)
        files = rewrite_groups(st, plan, max_workers=max_workers, progress=progress or None)
    return finish_compaction(st, plan, files)[0]


@overload
def history(store: StoreLike, dataset_uuid: str, *, limit: int | None = None,
            as_frame: Literal[False] = False) -> list[HistoryEntry]: ...


@overload
def history(store: StoreLike, dataset_uuid: str, *, limit: int | None = None,
            as_frame: Literal[True]) -> pd.DataFrame: ...


def history(store: StoreLike, dataset_uuid: str, *, limit: int | None = None,
            as_frame: bool = False) -> list[HistoryEntry] | pd.DataFrame:
    """Retained versions, oldest first.

    Each entry has the version, timestamp, operation, partitions added/removed, rows
    added, writer, txn and info (:class:`~kstore.HistoryEntry`).

    Parameters
    ----------
    store
        Where the dataset lives (:data:`~kstore.io.store.StoreLike`).
    dataset_uuid
        The dataset's name.
    limit
        Only the newest ``limit`` versions. Either way the cost is 1 listing of the log,
        1 get of the newest history summary and 1 get per version it does not cover (the
        few after it); with ``limit``, the summary is read only if those few do not suffice.
    as_frame
        Return a pandas DataFrame, one row per version (columns ``version``, ``parent``,
        ``timestamp``, ``operation``, ``rows_added``, ``added``, ``removed``,
        ``n_files``, ``writer``, ``txn``, ``info``, ``expired``; ``n_partitions``, the old
        name of ``n_files``, stays for one more release).

    Returns
    -------
    list[HistoryEntry] or pandas.DataFrame
        The versions, oldest first: the retained ones, and those garbage collection expired
        within its log retention (``expired=True``: listed, no longer readable; 30 days by
        default, see :func:`garbage_collect`). A kartothek/plateau dataset that kstore never
        wrote has none (an empty list).

    Examples
    --------
    >>> import pandas as pd, kstore
    >>> _ = kstore.store_dataset("memory://hist-doc", "d", pd.DataFrame({"x": [1]}))
    >>> _ = kstore.update_dataset("memory://hist-doc", "d", pd.DataFrame({"x": [2, 3]}))
    >>> kstore.history("memory://hist-doc", "d", as_frame=True)[["version", "operation", "rows_added"]]
       version operation  rows_added
    0        0    create           1
    1        1    append           2
    >>> [h.version for h in kstore.history("memory://hist-doc", "d", limit=1)]
    [1]
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise InvalidArgumentError(f"limit must be an int >= 1, got {limit!r}")
    entries = _history(open_store(store), dataset_uuid, limit)
    if not as_bool(as_frame, "as_frame"):
        return entries
    import pandas as pd

    columns = ["version", "parent", "timestamp", "operation", "rows_added", "added", "removed", "n_files",
               "writer", "txn", "info", "expired", "n_partitions"]
    rows = [{"version": e.version, "parent": e.parent, "timestamp": e.timestamp, "operation": e.operation,
             "rows_added": e.rows_added, "added": len(e.added), "removed": len(e.removed),
             "n_files": e.n_files, "writer": e.writer, "txn": e.txn, "info": e.info, "expired": e.expired,
             "n_partitions": e.n_files} for e in entries]  # the old name of n_files, for one more release
    return pd.DataFrame(rows, columns=columns)


def diff(store: StoreLike, dataset_uuid: str, from_version: int, to_version: int) -> Diff:
    """Partitions added and removed between two versions (incremental processing).

    Parameters
    ----------
    store
        Where the dataset lives (:data:`~kstore.io.store.StoreLike`).
    dataset_uuid
        The dataset's name.
    from_version, to_version
        Two retained versions (``from_version <= to_version``).

    Returns
    -------
    Diff
        The partition labels added and removed (:class:`~kstore.Diff`).

    Examples
    --------
    >>> import pandas as pd, kstore
    >>> _ = kstore.store_dataset("memory://diff-doc", "d", pd.DataFrame({"p": [1], "x": [1]}), partition_on="p")
    >>> _ = kstore.update_dataset("memory://diff-doc", "d", pd.DataFrame({"p": [2], "x": [2]}))
    >>> d = kstore.diff("memory://diff-doc", "d", 0, 1)
    >>> [label.split("/")[0] for label in d.added], d.removed
    (['p=2'], ())
    """
    from_version, to_version = as_count(from_version, "from_version", 0), as_count(to_version, "to_version", 0)
    return _diff(open_store(store), dataset_uuid, from_version, to_version)


def resolve_version(store: StoreLike, dataset_uuid: str, *, version: int | None = None,
                    as_of: AsOf = None) -> int | None:
    """The version a ``version=`` / ``as_of=`` pair names (None: the newest); both is an error.

    Parameters
    ----------
    store, dataset_uuid
        The dataset.
    version
        A version number, returned as it is (after validation).
    as_of
        A ``datetime`` or ISO 8601 text: the version current then is looked up in the log.

    Returns
    -------
    int or None
        The version number, or None for the newest.

    Examples
    --------
    >>> import pandas as pd, kstore
    >>> from kstore.lifecycle import resolve_version
    >>> _ = kstore.store_dataset("memory://rv-doc", "d", pd.DataFrame({"x": [1]}))
    >>> resolve_version("memory://rv-doc", "d"), resolve_version("memory://rv-doc", "d", as_of="2999-01-01")
    (None, 0)
    """
    version = as_version(version)
    if version is not None and as_of is not None:
        raise InvalidArgumentError("pass version or as_of, not both")
    if as_of is not None:
        return version_as_of(open_store(store), dataset_uuid, as_timestamp(as_of))
    return version


def garbage_collect(
    store: StoreLike,
    dataset_uuid: str,
    *,
    retention: timedelta = DEFAULT_RETENTION,
    dry_run: bool = False,
    enforce_retention_duration: bool = True,
    progress: ProgressLike = False,
    log_retention: timedelta = DEFAULT_LOG_RETENTION,
) -> GCResult:
    """Expire versions older than ``retention`` and delete the files nothing retained references.

    Versions committed within ``retention`` stay readable (time travel), and so does the
    newest one committed before it. Unreferenced files written before ``now - retention``
    are deleted: debris of failed writes, and files only expired versions used.

    Safe beside any writer, at any retention: before deleting a file, GC commits a
    ``vacuum`` version, and a write still running that started before the cutoff then
    fails with :class:`~kstore.errors.CommitConflictError` instead of committing files that
    may be gone; an acknowledged write is never lost. A retention below 7 days
    (:data:`~kstore.blocks.gc.MIN_RETENTION`) can therefore fail long writes and reads of
    old versions, and is refused unless ``enforce_retention_duration=False`` (as Delta
    Lake's VACUUM does).

    The log entries of expired versions stay, as tombstones (operation, timestamp, counts,
    info; no state), for ``log_retention`` (default 30 days, Delta's log retention), so
    :func:`history` lists those versions (``expired=True``) after their data is gone; a
    later run deletes the tombstones older than that.

    Parameters
    ----------
    store
        Where the dataset lives (:data:`~kstore.io.store.StoreLike`).
    dataset_uuid
        The dataset's name.
    retention
        How long versions stay readable (default 7 days). ``timedelta(0)`` keeps only the
        newest version; a retention longer than the time since 1970 (up to
        ``timedelta.max``) keeps every version.
    dry_run
        Only report what would be expired and deleted; change nothing.
    enforce_retention_duration
        Refuse a retention under 7 days (default). ``False`` allows it, on purpose.

    progress
        ``True`` for a progress bar on stderr (keys deleted), or a callable
        ``progress(keys_deleted, None)`` (see :mod:`kstore.io.progress`); off by default.
    log_retention
        How long :func:`history` keeps listing an expired version (default 30 days;
        ``timedelta(0)``: tombstones go after one hour,
        :data:`~kstore.core.log.LOG_MIN_AGE`, which the commit protocol needs).

    Returns
    -------
    GCResult
        The deleted files, the expired versions and the ``vacuum`` version committed
        (:class:`~kstore.GCResult`).

    Raises
    ------
    InvalidArgumentError
        ``retention`` or ``log_retention`` is negative or not a ``timedelta``, or
        ``retention`` is under 7 days while ``enforce_retention_duration`` is True.

    Examples
    --------
    >>> import pandas as pd, kstore
    >>> from datetime import timedelta
    >>> _ = kstore.store_dataset("memory://gc-doc", "d", pd.DataFrame({"p": [1], "x": [1]}), partition_on="p")
    >>> _ = kstore.update_dataset("memory://gc-doc", "d", pd.DataFrame({"p": [1], "x": [2]}),
    ...                           mode="overwrite_partitions")
    >>> r = kstore.garbage_collect("memory://gc-doc", "d", retention=timedelta(0),
    ...                            enforce_retention_duration=False)
    >>> len(r.deleted_files), r.expired_versions, r.fence_version   # v0's data file
    (1, (0,), 2)
    """
    if not isinstance(retention, timedelta) or retention < timedelta(0):
        raise InvalidArgumentError(f"retention must be a non-negative timedelta, got {retention!r}")
    if not isinstance(log_retention, timedelta) or log_retention < timedelta(0):
        raise InvalidArgumentError(f"log_retention must be a non-negative timedelta, got {log_retention!r}")
    dry_run = as_bool(dry_run, "dry_run")
    enforce_retention_duration = as_bool(enforce_retention_duration, "enforce_retention_duration")
    if enforce_retention_duration and retention < MIN_RETENTION:
        raise InvalidArgumentError(
            f"dataset {dataset_uuid!r}: retention {retention} is shorter than {MIN_RETENTION.days} days; it can "
            "fail writes and reads running longer than it (no acknowledged write is lost). Pass "
            "enforce_retention_duration=False to use it on purpose"
        )
    # nothing was committed before 1970: a longer window is the same, and `now - retention` stays a date
    since_1970 = runtime.current().now() - datetime(1970, 1, 1, tzinfo=timezone.utc)
    retention, log_retention = min(retention, since_1970), min(log_retention, since_1970)
    with tracked(open_store(store), progress, f"gc {dataset_uuid}", method="delete") as st:
        return collect_garbage(st, dataset_uuid, retention=retention, dry_run=dry_run, log_retention=log_retention)


def delete_dataset(store: StoreLike, dataset_uuid: str, *, progress: ProgressLike = False) -> int:
    """Delete the dataset's data, indices, statistics and main metadata file.

    A ``delete`` version is committed first, so a writer still running against the dataset
    fails cleanly instead of bringing back half of it; that small log entry stays (and
    numbering continues if the dataset is created again).

    Parameters
    ----------
    store
        Where the dataset lives (:data:`~kstore.io.store.StoreLike`).
    dataset_uuid
        The dataset's name.

    progress
        As for :func:`garbage_collect` (keys deleted).

    Returns
    -------
    int
        How many keys were deleted.

    Examples
    --------
    >>> import pandas as pd, kstore
    >>> _ = kstore.store_dataset("memory://del-doc", "d", pd.DataFrame({"x": [1]}))
    >>> kstore.delete_dataset("memory://del-doc", "d") > 0
    True
    >>> kstore.read_dataset("memory://del-doc", "d")
    Traceback (most recent call last):
    ...
    kstore.errors.DatasetNotFoundError: ...
    """
    with tracked(open_store(store), progress, f"delete {dataset_uuid}", method="delete") as st:
        return delete_all(st, dataset_uuid)


def copy_dataset(source: StoreLike, dataset_uuid: str, target: StoreLike | None = None,
                 new_uuid: str | None = None, *, progress: ProgressLike = False) -> DatasetMetadata:
    """Copy the current version to ``new_uuid`` and/or another store (files are copied).

    The copy starts a new history at version 0; indices and statistics are kept.

    Parameters
    ----------
    source
        The store holding the dataset (:data:`~kstore.io.store.StoreLike`).
    dataset_uuid
        The dataset's name.
    target
        The store to copy to (None: ``source``).
    new_uuid
        The copy's name (None: ``dataset_uuid``). Same store and same name is an error.

    progress
        ``True`` for a progress bar on stderr, or a callable ``progress(files_copied,
        files_total)``; off by default.

    Returns
    -------
    DatasetMetadata
        The copy's first version.

    Raises
    ------
    DatasetExistsError
        The target dataset exists already.

    Examples
    --------
    >>> import pandas as pd, kstore
    >>> _ = kstore.store_dataset("memory://copy-doc", "d", pd.DataFrame({"x": [1, 2]}))
    >>> kstore.copy_dataset("memory://copy-doc", "d", "memory://copy-doc-2").uuid
    'd'
    >>> kstore.read_dataset("memory://copy-doc-2", "d")["x"].tolist()
    [1, 2]
    """
    naming.validate_name(dataset_uuid)
    src = open_store(source)
    dst = open_store(target) if target is not None else src
    if new_uuid is not None:
        naming.validate_name(new_uuid)
    new_uuid = new_uuid if new_uuid is not None else dataset_uuid
    if dst is src and new_uuid == dataset_uuid:
        raise InvalidArgumentError("copy_dataset needs another store or another uuid")
    if load.load_latest(dst, new_uuid, missing_store_ok=True)[0] is not None:
        raise DatasetExistsError(f"dataset {new_uuid!r} already exists in the target store")
    meta, fmt = load.load_latest(src, dataset_uuid)
    if meta is None:
        from kstore.errors import DatasetNotFoundError

        raise DatasetNotFoundError(f"dataset {dataset_uuid!r} does not exist")
    schema = load.load_schema(src, meta)
    from kstore.core.columns import file_names
    from kstore.core.stats import FileStats, stats_by_label

    def moved(key: str) -> str:
        return new_uuid + key[len(dataset_uuid):]

    # everything that can fail on a damaged source is loaded before the first file is copied
    old_stats = stats_by_label(load.load_stats(src, meta))
    stored_as = tuple(sorted(file_names(schema).items()))  # the copies hold renamed columns as the files do
    prebuilt = {
        col: (load.load_index(src, meta, col, schema), frozenset(meta.partitions))
        for col in list(meta.indices) + list(meta.inline_indices)
    }
    files: list[WrittenFile] = []
    n_files = sum(len(tables) for tables in meta.partitions.values())
    with tracked(dst, progress, f"copy {dataset_uuid}", method="put", total=n_files, key_filter=is_data_file) as out:

        def copy_and_commit() -> DatasetMetadata:
            for label, tables in meta.partitions.items():
                for table, key in tables.items():
                    data = src.get(key)
                    files.append(WrittenFile(label, table, moved(key), old_stats.get(label, FileStats(0, 0, {})),
                                             renamed=stored_as))
                    out.put(moved(key), data)
            op = Create(partition_on=meta.partition_keys, metadata=dict(meta.metadata), table=meta.table,
                        index_columns=tuple(prebuilt), metadata_format=fmt, prebuilt_indices=prebuilt)
            return commit(out, new_uuid, op, files=files, schema=schema).dataset

        return owning_files(dst, files, copy_and_commit)  # no half-written copy


def upgrade_dataset(store: StoreLike, dataset_uuid: str) -> DatasetMetadata:
    """Turn a kartothek/plateau dataset into a versioned kstore dataset (no data rewritten).

    Records version 0 with the schema from ``_common_metadata``; indices are kept.
    A dataset kstore already versions is returned unchanged.

    Parameters
    ----------
    store
        Where the dataset lives (:data:`~kstore.io.store.StoreLike`).
    dataset_uuid
        The dataset's name.

    Returns
    -------
    DatasetMetadata
        The dataset's metadata, now with a version.

    Examples
    --------
    >>> import pandas as pd, kstore
    >>> _ = kstore.store_dataset("memory://upgrade-doc", "d", pd.DataFrame({"x": [1]}))
    >>> kstore.upgrade_dataset("memory://upgrade-doc", "d").version   # already versioned: unchanged
    0
    """
    st = open_store(store)
    base, _ = load.load_latest(st, dataset_uuid)
    if base is None:
        from kstore.errors import DatasetNotFoundError

        raise DatasetNotFoundError(f"dataset {dataset_uuid!r} does not exist")
    if base.version is not None:
        return base
    op = Upgrade(read_version=None, table=base.table)
    return commit(st, dataset_uuid, op, schema=None).dataset
