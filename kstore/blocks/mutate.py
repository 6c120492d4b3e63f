"""Mutations that rewrite metadata or files of a version: build and drop indices, delete rows.

Each builds on one committed version (``base``: the newest one, or a snapshot's) and makes
the ONE commit (:func:`kstore.blocks.commit.commit`). What a version committed after
``base`` may do without a conflict:

- **build_indices**: anything; files added meanwhile are indexed at commit time.
- **drop_indices**: anything; an index another writer builds again later is its own commit.
- **delete_rows**, **update_rows**: appends of files the predicate cannot match (by
  partition values, indices and statistics). Removing an affected file, or adding one the
  predicate may match, is a :class:`~kstore.errors.CommitConflictError`: the delete (the
  update) did not see those rows.
- **merge** (:mod:`kstore.blocks.merge`): appends of files its key predicate (the source's
  key values, or their range) cannot match. Removing a rewritten file, or adding one the
  keys may match, is a conflict: the added file may hold a key the merge inserts or
  should have updated. With ``when_not_matched_by_source="delete"`` any added file is one.

:func:`rewrite_rows` is the one copy-on-write loop of the row operations: plan, read the
planned files, change each file's rows, rewrite, commit once.

The drivers (:func:`kstore.build_indices`, :func:`kstore.delete_rows`,
:func:`kstore.update_rows`, :func:`kstore.merge`) and
:class:`~kstore.blocks.snapshot.Snapshot`'s typed operations call these.

Examples
--------
>>> import pandas as pd
>>> from kstore.io.memory import MemoryStore
>>> from kstore.blocks.job import WriteRequest, finish_write, prepare_write, write_files
>>> st = MemoryStore()
>>> job = prepare_write(st, "d", WriteRequest.of("d", "error", partition_on=["p"]))
>>> meta = finish_write(job, *write_files(job, pd.DataFrame({"p": [1, 1, 2], "x": [5, 6, 7]})))
>>> meta = delete_rows(st, "d", [[("x", "==", 6)]])
>>> meta.version, sorted(build_indices(st, "d", ["x"]).indices)
(1, ['x'])
>>> dict(drop_indices(st, "d", ["x"]).indices)
{}
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.types as pat

from kstore.blocks import load
from kstore.blocks.commit import commit, owning_files
from kstore.blocks.planned import reading_planned, replan
from kstore.blocks.read import index_from_store, read_task
from kstore.blocks.write import FileLayout, WrittenFile, write_partitions
from kstore.core import naming, runtime
from kstore.core.columns import ColumnNames, drop_columns, file_name, rename_columns
from kstore.core.commit_options import CommitOptions, plain
from kstore.core.index import index_storage_type
from kstore.core.metadata import DatasetMetadata
from kstore.core.operations import (
    BuildIndices,
    DeleteRows,
    DropColumns,
    DropIndices,
    Operation,
    RenameColumns,
    UpdateRows,
    txn_committed,
)
from kstore.core.planning import ReadPlan, ReadTask, plan_read
from kstore.core.predicates import Predicates, bind, parse, to_expression
from kstore.core.types import coerce_literal, describe, read_schema
from kstore.errors import (
    ColumnNotFoundError,
    DatasetNotFoundError,
    InvalidArgumentError,
    KstoreError,
    short_repr,
)
from kstore.io.store import Store

log = logging.getLogger("kstore.write")

__all__ = ["build_indices", "drop_indices", "delete_rows", "update_rows", "UpdateResult", "rewrite_rows", "RowRewrite",
           "Rewritten", "RewritePlan", "plan_rewrite", "rewrite_file", "commit_rewrite", "FileChange",
           "on_newest", "set_values", "base_version", "run_tagged"]


def base_version(store: Store, dataset_uuid: str, base: DatasetMetadata | None) -> DatasetMetadata:
    """``base`` (checked to be a version of ``dataset_uuid``), or the newest version."""
    naming.validate_name(dataset_uuid)
    if base is not None:
        if base.uuid != dataset_uuid:
            raise InvalidArgumentError(f"dataset {dataset_uuid!r}: the base version belongs to dataset {base.uuid!r}")
        return base
    newest, _ = load.load_latest(store, dataset_uuid)
    if newest is None:
        raise DatasetNotFoundError(f"dataset {dataset_uuid!r} does not exist")
    return newest


def _committed_before(base: DatasetMetadata, options: CommitOptions) -> bool:
    return txn_committed(base, options.txn)


def build_indices(store: Store, dataset_uuid: str, columns: Sequence[str], *,
                  base: DatasetMetadata | None = None, options: CommitOptions | None = None) -> DatasetMetadata:
    """Build (or rebuild) the secondary indices of ``columns`` over every file; one commit.

    Reads only the indexed columns of each file of ``base``; files other writers add before
    the commit are indexed at commit time, so the index always covers the committed files.
    Partition columns are indexed by their labels already and are skipped. A file of
    ``base`` that a newer version removed and garbage collection deleted before it was read
    does not matter to the index: the build starts again on the newest version.
    """
    options = options or CommitOptions()
    first = base_version(store, dataset_uuid, base)  # the version read: plans again stay on its incarnation
    return replan(lambda n: _build_indices(store, dataset_uuid, columns, first if n == 0 else None, options,
                                           origin=first),
                  what="build_indices")


def _build_indices(store: Store, dataset_uuid: str, columns: Sequence[str], base: DatasetMetadata | None,
                   options: CommitOptions, *, origin: DatasetMetadata | None = None) -> DatasetMetadata:
    base = base_version(store, dataset_uuid, base)
    read = origin if origin is not None else base  # the version the caller read: a build planned again on
    #                                                the newest must not move to a dataset created since
    if _committed_before(base, options):
        return base
    cols = list(dict.fromkeys(columns))
    schema = load.load_schema(store, base)
    missing = [c for c in cols if c not in schema.names]
    if missing:
        raise ColumnNotFoundError(f"dataset {dataset_uuid!r}: cannot index {missing}: no such column(s)")
    cols = [c for c in cols if c not in base.partition_keys]
    naming.check_key_columns(dataset_uuid, partition_on=(), index_columns=cols)
    labels = list(base.partitions)
    # kartothek's inline indices become files in this commit: check them before writing any
    load.load_indices(store, base, [c for c in base.inline_indices if c not in cols and c not in base.partition_keys],
                      schema)
    planned = base
    with reading_planned(store, dataset_uuid, base.version, lambda: [(lab, planned.file_key(lab)) for lab in labels],
                         "build_indices"):
        prebuilt = {
            c: (index_from_store(store, base, labels, c, index_storage_type(schema.field(c).type),
                                 stored_as=file_name(schema.field(c))), frozenset(labels))
            for c in cols
        }
    op = BuildIndices(read_version=read.version, index_columns=tuple(cols), table=base.table, txn=options.txn,
                      metadata=plain(options.metadata), info=plain(options.info), read_incarnation=read.incarnation,
                      checks_incarnation=True, prebuilt_indices=prebuilt)
    return commit(store, dataset_uuid, op, max_attempts=options.max_attempts).dataset


def drop_indices(store: Store, dataset_uuid: str, columns: Sequence[str], *,
                 base: DatasetMetadata | None = None, options: CommitOptions | None = None) -> DatasetMetadata:
    """Drop the secondary indices of ``columns``; one commit (no data file is touched).

    Columns without an index are an :class:`~kstore.errors.InvalidArgumentError` (a typo
    should not pass as done). Plans of the new version prune by partition values and
    statistics only for these columns; older versions keep their indices for time travel.
    """
    options = options or CommitOptions()
    base = base_version(store, dataset_uuid, base)
    cols = list(dict.fromkeys(columns))
    have = set(base.indices) | set(base.inline_indices)
    missing = [c for c in cols if c not in have or c in base.partition_keys]
    if missing:
        raise InvalidArgumentError(
            f"dataset {dataset_uuid!r} has no secondary index on {missing}; its indices are "
            f"{sorted(c for c in have if c not in base.partition_keys)}")
    if _committed_before(base, options):
        return base
    op = DropIndices(read_version=base.version, drop_index_columns=tuple(cols), table=base.table,
                     txn=options.txn, metadata=plain(options.metadata), info=plain(options.info),
                     read_incarnation=base.incarnation, checks_incarnation=True)
    return commit(store, dataset_uuid, op, max_attempts=options.max_attempts).dataset


def change_columns(store: Store, dataset_uuid: str, *, renames: Mapping[str, str] | None = None,
                   drops: Sequence[str] = (), options: CommitOptions | None = None) -> DatasetMetadata:
    """Rename (``renames``: ``{old: new}``) or drop (``drops``) columns; one commit, no data
    file touched (:mod:`kstore.core.columns`). Checked against the version read before the
    commit (a missing column, a partition column, a name taken), and again by the commit
    against the newest version."""
    options = options or CommitOptions()
    base = base_version(store, dataset_uuid, None)
    schema = load.load_schema(store, base)
    renames = dict(renames or {})
    if not renames and not drops:
        raise InvalidArgumentError(f"dataset {dataset_uuid!r}: rename_columns / drop_columns needs at least one "
                                   "column")
    if renames:
        schema = rename_columns(schema, renames, dataset=dataset_uuid, fixed=base.partition_keys)
    if drops:
        schema = drop_columns(schema, list(drops), dataset=dataset_uuid, fixed=base.partition_keys)
    if _committed_before(base, options):
        return base
    kind = RenameColumns if renames else DropColumns
    op = kind(read_version=base.version, renames=tuple(renames.items()), drops=tuple(dict.fromkeys(drops)),
              table=base.table, txn=options.txn, metadata=plain(options.metadata), info=plain(options.info),
              read_incarnation=base.incarnation, checks_incarnation=True)
    return commit(store, dataset_uuid, op, max_attempts=options.max_attempts).dataset


T = TypeVar("T")


def on_newest(store: Store, dataset_uuid: str, base: DatasetMetadata | None, what: str,
              run: Callable[[DatasetMetadata, DatasetMetadata | None], T]) -> T:
    """``run(version, origin)`` on ``base`` (a snapshot: a planned file gone is a conflict),
    or on the newest version, planned again on the newest one after
    :class:`~kstore.blocks.planned.PlannedFileGone` (the row rewrites commute with the
    versions that removed their planned files). ``origin`` is the version read first: plans
    again stay on its incarnation (a dataset created since is a conflict)."""
    first = base_version(store, dataset_uuid, base)
    if base is not None:
        return run(first, None)
    return replan(lambda n: run(first if n == 0 else base_version(store, dataset_uuid, None), first), what=what)


@dataclass(frozen=True, slots=True)
class Rewritten:
    """What :func:`rewrite_rows` did: the version committed (``base`` when nothing changed),
    the files it read, the files it replaced and the files it wrote (replacements and
    additions)."""

    dataset: DatasetMetadata
    files_read: int = 0
    files_rewritten: int = 0
    files_added: int = 0


@dataclass(frozen=True, slots=True)
class RowRewrite:
    """What :func:`rewrite_rows` does to the files of one version (see there): the operation
    ``kind`` it commits, the dataset's ``schema``, the ``predicates`` it plans, the
    ``change`` of each planned file's rows, the ``extra`` rows it adds, the ``new_schema`` of
    new values, and the ``counts`` (called once the rows are known) the log entry's info
    records (the user's info keys win, as for a compaction's counts)."""

    kind: type[Operation]
    schema: pa.Schema
    predicates: Predicates
    change: Callable[[pa.Table], pa.Table | None]
    extra: Callable[[], pa.Table | None] | None = None
    new_schema: pa.Schema | None = None
    counts: Callable[[], Mapping[str, Any]] | None = None


@dataclass(frozen=True)
class RewritePlan:
    """What the tasks of a row rewrite need (small and picklable; see :func:`plan_rewrite`):
    the dataset, the version it builds on, the read plan of the files its predicates may
    match (:attr:`tasks`), the layout rewritten rows are written with and the operation kind
    (for errors)."""

    dataset_uuid: str
    version: int | None
    plan: ReadPlan
    layout: FileLayout
    order: tuple[str, ...]
    operation: type[Operation]
    #: the incarnation the rewrite read first (a dataset created again since is a conflict)
    incarnation: str | None = None

    @property
    def tasks(self) -> tuple[ReadTask, ...]:
        """The planned files, in plan order."""
        return self.plan.tasks

    def light(self) -> RewritePlan:
        """This plan without its tasks (what one worker task needs besides its own file)."""
        return replace(self, plan=replace(self.plan, tasks=()))


def plan_rewrite(store: Store, dataset_uuid: str, base: DatasetMetadata, schema: pa.Schema, predicates: Predicates,
                 operation: type[Operation], *, origin: DatasetMetadata | None = None) -> RewritePlan:
    """Plan a row rewrite of ``base`` committed as ``operation``: ``predicates`` (None: every
    file) with the partition values, every secondary index and the statistics (the commit
    updates every index). ``origin``: the version read first, when ``base`` is a plan again."""
    sec = tuple(c for c in list(base.indices) + list(base.inline_indices) if c not in base.partition_keys)
    indices = load.load_indices(store, base, sec, schema)
    plan = plan_read(base, schema, predicates, indices=indices, stats=load.load_stats(store, base))
    order = tuple(base.partition_keys) + tuple(c for c in schema.names if c not in base.partition_keys)
    return RewritePlan(dataset_uuid, base.version, plan, FileLayout(base.partition_keys, sec, base.table, names=ColumnNames.of(schema)), order,
                       operation, (origin or base).incarnation)


#: what a file's change returns: its new rows (None: the file stays as it is) and a report for
#: the driver (a merge's matched source rows and counts)
FileChange = Callable[[pa.Table], "tuple[pa.Table | None, Any]"]


def rewrite_file(store: Store, rp: RewritePlan, task: ReadTask, change: FileChange, *,
                 file_id: str | None = None) -> tuple[list[WrittenFile] | None, Any]:
    """Read one planned file (every column, as the dataset's schema types them, no filter),
    apply ``change`` and write the rows it returns with the rewrite's layout (a row whose
    partition value changed lands in its new partition); (None, report) when the file stays.
    Runs in threads of one process or in Dask and Spark tasks (``change`` must be picklable
    there)."""
    with reading_planned(store, rp.dataset_uuid, rp.version, [(task.label, task.key)], rp.operation.kind):
        full = read_task(store, rp.plan, replace(task, residual=None), list(rp.plan.schema.names))
    rows, report = change(full)
    if rows is None:
        return None, report
    if not rows.num_rows:
        return [], report
    return write_partitions(store, rp.dataset_uuid, rows.select(list(rp.order)), rp.layout, file_id=file_id), report


def commit_rewrite(store: Store, base: DatasetMetadata, options: CommitOptions, rp: RewritePlan,
                   replaced: Sequence[tuple[str, Sequence[WrittenFile]]], added: Sequence[WrittenFile], *,
                   new_schema: pa.Schema | None, info: Mapping[str, Any] | None) -> DatasetMetadata:
    """The ONE commit (of ``rp.operation``) of a row rewrite: ``replaced`` (label, its new files) in plan order and
    ``added`` files; its scope is the files the rewrite's predicates may match
    (:class:`~kstore.core.operations.DeleteRows`' conflict rule). Nothing replaced or added:
    no commit, ``base`` comes back. The caller owns the files (``owning_files``)."""
    remove = [label for label, _ in replaced]
    files = [f for _, out in replaced for f in out] + list(added)
    if not remove and not files:
        return base
    plan, dataset_uuid = rp.plan, rp.dataset_uuid
    planned = frozenset(t.label for t in plan.tasks)
    pred_cols = sorted({t.column for c in (plan.predicates or ()) for t in c})
    base_v = base.version

    def may_match(meta: DatasetMetadata) -> set[str]:
        """Labels of ``meta`` whose files the predicate may match (planned, no data read)."""
        if meta.version == base_v:
            return set(planned)
        s = load.load_schema(store, meta)
        idx = load.load_indices(store, meta, [c for c in pred_cols if c in s.names], s)
        return {t.label for t in plan_read(meta, s, plan.predicates, indices=idx,
                                           stats=load.load_stats(store, meta)).tasks}

    op = rp.operation(remove=tuple(remove), read_version=base.version, table=base.table,
              partition_on=base.partition_keys, txn=options.txn, scope_labels=planned, scope=may_match,
              metadata=plain(options.metadata), info=info,
              read_incarnation=rp.incarnation, checks_incarnation=True,
              seen_version=base.version)
    return commit(store, dataset_uuid, op, files=files, schema=new_schema, max_attempts=options.max_attempts).dataset


def rewrite_rows(store: Store, dataset_uuid: str, base: DatasetMetadata, options: CommitOptions, rewrite: RowRewrite,
                 *, origin: DatasetMetadata | None = None) -> Rewritten:
    """The copy-on-write loop of the row operations (delete_rows, update_rows, merge) in this
    process: one commit of ``rewrite.kind``.

    Plans ``predicates`` on ``base`` (:func:`plan_rewrite`); reads each planned file, and
    ``change(rows)`` says what becomes of it (:func:`rewrite_file`): None leaves the file as
    it is, a table (possibly empty) replaces it. ``change`` runs for several files at once,
    in threads (it must be thread-safe); the commit lists the files in plan order, whatever
    order they finished in. ``extra()``, called after the last file, gives rows to add as new
    files (a merge's inserts). ``new_schema`` is the normalized schema of new values the
    commit merges into the dataset's (None: the schema stays). The commit
    (:func:`commit_rewrite`) removes the replaced files and adds the written ones. Nothing
    changed: no commit, ``base`` comes back. Every file written is deleted when the commit
    fails or does not happen (:func:`~kstore.blocks.commit.owning_files`). Dask and Spark
    compose the same pieces with the files rewritten in their tasks.
    """
    rp = plan_rewrite(store, dataset_uuid, base, rewrite.schema, rewrite.predicates, rewrite.kind, origin=origin)
    files: list[WrittenFile] = []  # every file written so far (owning_files deletes them on failure)
    lock = threading.Lock()
    replaced: dict[int, tuple[str, list[WrittenFile]]] = {}

    def one(numbered: tuple[int, ReadTask]) -> None:
        """Read, change and rewrite one planned file (several at once: Arrow's reads, kernels
        and Parquet encoding release the GIL; at most one file per thread in memory)."""
        i, task = numbered
        out, _ = rewrite_file(store, rp, task, lambda rows: (rewrite.change(rows), None))
        if out is not None:
            with lock:
                files.extend(out)
                replaced[i] = (task.label, out)

    def rewrite_and_commit() -> DatasetMetadata:
        runtime.parallel_map(one, list(enumerate(rp.tasks)), cpu_bound=True)
        extra = rewrite.extra() if rewrite.extra is not None else None
        added = write_partitions(store, dataset_uuid, extra.select(list(rp.order)), rp.layout) \
            if extra is not None and extra.num_rows else []
        files.extend(added)
        info = plain(options.info) if rewrite.counts is None else {**rewrite.counts(), **(options.info or {})}
        return commit_rewrite(store, base, options, rp, [replaced[i] for i in sorted(replaced)], added,
                              new_schema=rewrite.new_schema, info=info)

    meta = owning_files(store, files, rewrite_and_commit)
    return Rewritten(meta, len(rp.tasks), len(replaced), len(files) if meta is not base else 0)


def delete_rows(store: Store, dataset_uuid: str, predicates: Predicates, *, base: DatasetMetadata | None = None,
                options: CommitOptions | None = None) -> DatasetMetadata:
    """Delete the rows of ``base`` matching ``predicates`` (copy-on-write); one commit.

    Only the files the plan keeps are read; a file with a matching row is rewritten without
    it (a file left empty is dropped). Returns ``base`` unchanged when no row matched.

    A planned file that a newer version removed and garbage collection deleted before it was
    read: with ``base`` given (a snapshot) a :class:`~kstore.errors.CommitConflictError`
    (:class:`~kstore.blocks.planned.PlannedFileGone`, nothing committed); on the newest
    version the delete plans again on the newer one (deleting rows commutes with it).
    """
    opts = options or CommitOptions()
    return on_newest(store, dataset_uuid, base, "delete_rows",
                     lambda b, origin: _delete_rows(store, dataset_uuid, predicates, b, opts, origin=origin))


@dataclass(frozen=True)
class RowsFile:
    """The change of one planned file of a ``delete_rows`` (no ``values``: the matching rows
    go) or an ``update_rows`` (``values`` set in them); small and picklable, so Dask and
    Spark tasks apply it as threads do. Returns the file's new rows (None: no row matched,
    the file stays) and the number of rows matched.

    >>> import pyarrow.compute as pc
    >>> rows = pa.table({"x": [1, 2, 3]})
    >>> RowsFile(pc.field("x") > 1)(rows)[0].to_pydict(), RowsFile(pc.field("x") > 5)(rows)
    ({'x': [1]}, (None, 0))
    >>> RowsFile(pc.field("x") == 2, (("x", pa.scalar(0)),))(rows)[0].to_pydict()
    {'x': [1, 0, 3]}
    """

    expr: pc.Expression
    #: ``(column, value)`` set in the matching rows (an update); empty: a delete
    values: tuple[tuple[str, pa.Scalar], ...] = ()

    def __call__(self, rows: pa.Table) -> tuple[pa.Table | None, int]:
        hit = _mask(rows, self.expr)
        if not hit.any():
            return None, 0
        if not self.values:
            return rows.filter(pa.array(~hit)), int(hit.sum())
        mask = pa.array(hit)
        for name, value in self.values:
            i = rows.schema.get_field_index(name)
            rows = rows.set_column(i, rows.schema.field(i), pc.if_else(mask, value, rows.column(i).combine_chunks()))
        return rows, int(hit.sum())


def _delete_rows(store: Store, dataset_uuid: str, predicates: Predicates, base: DatasetMetadata,
                 options: CommitOptions, *, origin: DatasetMetadata | None = None) -> DatasetMetadata:
    if _committed_before(base, options):
        return base  # committed before: nothing to rewrite
    schema = load.load_schema(store, base)
    expr = _row_filter(predicates, schema, dataset_uuid, "delete_rows",
                       "use delete_dataset to delete everything")

    def change(rows: pa.Table) -> pa.Table | None:
        return RowsFile(expr)(rows)[0]

    return rewrite_rows(store, dataset_uuid, base, options, RowRewrite(DeleteRows, schema, predicates, change),
                        origin=origin).dataset


def _row_filter(predicates: Predicates, schema: pa.Schema, dataset_uuid: str, what: str, hint: str) -> pc.Expression:
    """The row filter of a required predicate (InvalidArgumentError without one)."""
    dnf = bind(parse(predicates), schema, dataset=dataset_uuid)
    if dnf is None:
        raise InvalidArgumentError(f"{what} needs a predicate; {hint}")
    return to_expression(dnf, read_schema(schema))


@dataclass(frozen=True, slots=True)
class UpdateResult:
    """What :func:`kstore.update_rows` did.

    Attributes
    ----------
    dataset : DatasetMetadata
        The committed version, or the current one when no row matched (nothing committed).
    updated : int
        Rows given the new values.
    files_read : int
        Data files read (those the predicate may match).
    files_rewritten : int
        Data files replaced by rewritten ones.

    Examples
    --------
    >>> import pandas as pd, kstore
    >>> _ = kstore.store_dataset("memory://urr-doc", "d", pd.DataFrame({"p": [1, 2], "x": [5, 6]}), partition_on="p")
    >>> r = kstore.update_rows("memory://urr-doc", "d", [[("p", "==", 2)]], set={"x": 0})
    >>> r.dataset.version, r.updated, r.files_read, r.files_rewritten
    (1, 1, 1, 1)
    """

    dataset: DatasetMetadata
    updated: int = 0
    files_read: int = 0
    files_rewritten: int = 0


def update_rows(store: Store, dataset_uuid: str, predicates: Predicates, values: Mapping[str, Any], *,
                base: DatasetMetadata | None = None, options: CommitOptions | None = None) -> UpdateResult:
    """Set ``values`` (column -> one value) in the rows of ``base`` matching ``predicates``
    (copy-on-write); one commit (:class:`~kstore.core.operations.UpdateRows`).

    Each value is converted exactly to its column's type (a value that does not fit is an
    :class:`~kstore.errors.InvalidArgumentError` naming the column and the value; None sets
    nulls). Only the files the plan keeps are read; files with a matching row are
    rewritten, a row whose partition column is set moves to that partition. Nothing
    matched: nothing is committed. Planned files gone: as :func:`delete_rows`.
    """
    opts = options or CommitOptions()
    return on_newest(store, dataset_uuid, base, "update_rows",
                     lambda b, origin: _update_rows(store, dataset_uuid, predicates, values, b, opts, origin=origin))


def _update_rows(store: Store, dataset_uuid: str, predicates: Predicates, values: Mapping[str, Any],
                 base: DatasetMetadata, options: CommitOptions, *, origin: DatasetMetadata | None) -> UpdateResult:
    schema = load.load_schema(store, base)
    expr = _row_filter(predicates, schema, dataset_uuid, "update_rows", "to set a column everywhere, match every row "
                       "(e.g. [[(column, 'is null')], [(column, 'is not null')]])")
    scalars = set_values(values, schema, dataset_uuid)
    if _committed_before(base, options):
        return UpdateResult(base)  # committed before: nothing to rewrite
    updated = 0
    lock = threading.Lock()
    file_change = RowsFile(expr, tuple(scalars.items()))

    def change(rows: pa.Table) -> pa.Table | None:  # (in several threads at once)
        nonlocal updated
        out, n = file_change(rows)
        with lock:
            updated += n
        return out

    done = rewrite_rows(store, dataset_uuid, base, options,
                        RowRewrite(UpdateRows, schema, predicates, change,
                                   # (the columns set: read_changes pairs each row's images by the others)
                                   counts=lambda: {"updated": updated, "set_columns": sorted(scalars)}),
                        origin=origin)
    return UpdateResult(done.dataset, updated if done.dataset is not base else 0, done.files_read,
                        done.files_rewritten)


@dataclass(frozen=True)
class RowsJob:
    """A ``delete_rows`` / ``update_rows`` planned on one version for an engine to run
    (:func:`distributed_rows`): the files its predicate may match and the change of each
    (the same attribute names as a merge's job, so the engines run both alike)."""

    base: DatasetMetadata
    rewrite: RewritePlan
    change: RowsFile


def distributed_rows(store: Store, dataset_uuid: str, predicates: Predicates, values: Mapping[str, Any] | None,
                     options: CommitOptions, run: Callable[[RowsJob, str], Sequence[tuple[int, Any]]],
                     ) -> UpdateResult:
    """A ``delete_rows`` (``values`` None) or ``update_rows`` whose planned files an engine
    rewrites (Dask, Spark), on the newest version: the predicate and values are checked and
    the files planned here; ``run(job, token)`` rewrites every planned file of ``job``
    (:func:`rewrite_file` with ``job.change``, its files' ids tagged with ``token``) and
    returns ``(plan position, (new files or None, rows matched))``; if it fails, every file
    tagged with the token is deleted and nothing is committed. Then the ONE commit
    (:func:`commit_rewrite`), owning every file written. A transaction committed before:
    nothing runs. ``updated`` counts the rows deleted for a delete."""
    base = base_version(store, dataset_uuid, None)
    schema = load.load_schema(store, base)
    what = "delete_rows" if values is None else "update_rows"
    expr = _row_filter(predicates, schema, dataset_uuid, what, "use delete_dataset to delete everything"
                       if values is None else "to set a column everywhere, match every row")
    scalars = set_values(values, schema, dataset_uuid) if values is not None else {}
    if _committed_before(base, options):
        return UpdateResult(base)
    kind = DeleteRows if values is None else UpdateRows
    job = RowsJob(base, plan_rewrite(store, dataset_uuid, base, schema, predicates, kind),
                  RowsFile(expr, tuple(scalars.items())))
    rp = job.rewrite
    outcomes = run_tagged(store, rp, lambda token: run(job, token))
    replaced = [(t.label, out) for t, (out, _) in zip(rp.tasks, outcomes, strict=True) if out is not None]
    matched = sum(n for _, n in outcomes)
    owned = [f for _, out in replaced for f in out]
    counts: dict[str, Any] = {"updated": matched, "set_columns": sorted(scalars)} if values is not None else {}

    def commit_all() -> DatasetMetadata:
        return commit_rewrite(store, base, options, rp, replaced, [], new_schema=None,
                              info={**counts, **(options.info or {})} if counts else plain(options.info))

    meta = owning_files(store, owned, commit_all)
    return UpdateResult(meta, matched if meta is not base else 0, len(rp.tasks), len(replaced))


def run_tagged(store: Store, rewrite: RewritePlan, run: Callable[[str], Sequence[tuple[int, T]]]) -> list[T]:
    """Run an engine's tasks for every planned file of ``rewrite``: ``run(token)`` returns
    ``(plan position, outcome)`` pairs (each task tags its files' ids with ``token``:
    :func:`rewrite_task`); the outcomes come back in plan order. If ``run`` fails, every
    file tagged with the token is deleted (:func:`~kstore.blocks.write.delete_by_token`)
    before the error propagates: a failed job leaves nothing behind when it can help it."""
    import uuid as _uuid

    from kstore.blocks.write import delete_by_token

    token = _uuid.uuid4().hex[:8]
    try:
        got = dict(run(token)) if rewrite.tasks else {}
    except BaseException:
        delete_by_token(store, rewrite.dataset_uuid, rewrite.layout.table_name, token)
        raise
    return [got[i] for i in range(len(rewrite.tasks))]


def rewrite_task(store: Store, rewrite: RewritePlan, change: FileChange, number: int, task: ReadTask,
                 token: str) -> tuple[list[WrittenFile] | None, Any]:
    """One engine task of a distributed row rewrite (a merge, ``delete_rows``,
    ``update_rows``): rewrite planned file ``task`` (its files' ids carry the job's
    ``token`` and the task's ``number``: a failed job finds and deletes them)."""
    return rewrite_file(store, rewrite, task, change, file_id=naming.tagged_file_id(token, number))


def set_values(values: Mapping[str, Any], schema: pa.Schema, dataset_uuid: str) -> dict[str, pa.Scalar]:
    """``values`` (column -> one value) as scalars of their columns' types, converted
    exactly; an unknown column is a :class:`~kstore.errors.ColumnNotFoundError`, a value
    the type cannot hold an :class:`~kstore.errors.InvalidArgumentError` naming both.

    >>> set_values({"x": 3}, pa.schema([("x", pa.int8())]), "d")
    {'x': <pyarrow.Int8Scalar: 3>}
    >>> set_values({"x": 300}, pa.schema([("x", pa.int8())]), "d")
    Traceback (most recent call last):
    ...
    kstore.errors.InvalidArgumentError: dataset 'd': cannot set column 'x' (int8) to 300 (int): Value 300 too large to fit in C integer type
    >>> set_values({"x": 1.5}, pa.schema([("x", pa.int8())]), "d")
    Traceback (most recent call last):
    ...
    kstore.errors.InvalidArgumentError: dataset 'd': cannot set column 'x' (int8) to 1.5 (float): the type would hold it as 1
    """
    if not isinstance(values, Mapping) or not values:
        raise InvalidArgumentError(
            f"dataset {dataset_uuid!r}: update_rows needs set={{column: value, ...}}, got {short_repr(values)}")
    missing = [c for c in values if c not in schema.names]
    if missing:
        raise ColumnNotFoundError(f"dataset {dataset_uuid!r}: cannot set column(s) {short_repr(missing)}: no such "
                                  f"column(s) (columns: {', '.join(schema.names)})")
    out = {}
    for name, value in values.items():
        t = schema.field(name).type
        try:
            out[name] = _exact_scalar(value, t, name, dataset_uuid)
        except (KstoreError, pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            detail = str(exc) if not isinstance(exc, KstoreError) else "not a value of that type"
            raise InvalidArgumentError(
                f"dataset {dataset_uuid!r}: cannot set column {name!r} ({describe(t)}) to {short_repr(value)} "
                f"({type(value).__name__}): {detail}") from exc
    return out


def _exact_scalar(value: Any, t: pa.DataType, name: str, dataset_uuid: str) -> pa.Scalar:
    """``value`` as a scalar of ``t``, or ValueError when that changes it (Arrow truncates
    1.5 to an int 1, nanoseconds to microseconds, a float beyond float32 to inf; a zone
    would be dropped)."""
    if value is None:
        return pa.scalar(None, type=t)
    if pat.is_timestamp(t) and t.tz is None and getattr(value, "tzinfo", None) is not None:
        raise ValueError("the column has no time zone; the value has one")
    literal = coerce_literal(value, t, name, dataset_uuid)  # (a float32 column: rounded to float32)
    out = pa.scalar(literal, type=t)
    back = out.as_py()
    if isinstance(literal, float) and math.isnan(literal) and isinstance(back, float) and math.isnan(back):
        return out
    if isinstance(back, float) and math.isinf(back) and not math.isinf(float(value)):
        raise ValueError(f"it is beyond the range of {describe(t)}")
    if back != literal:
        raise ValueError(f"the type would hold it as {short_repr(back)}")
    return out


def _mask(table: pa.Table, expr: pc.Expression) -> np.ndarray:
    """Evaluate a filter expression to a boolean numpy mask (null -> False)."""
    pos = table.append_column("__row", pa.array(np.arange(table.num_rows))).filter(expr).column("__row")
    mask = np.zeros(table.num_rows, dtype=bool)
    mask[pos.to_numpy()] = True
    return mask
