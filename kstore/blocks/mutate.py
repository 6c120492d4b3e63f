"""Mutations that rewrite metadata or files of a version: build and drop indices, delete rows.

Each builds on one committed version (``base``: the newest one, or a snapshot's) and makes
the ONE commit (:func:`kstore.blocks.commit.commit`). What a version committed after
``base`` may do without a conflict:

- **build_indices**: anything; files added meanwhile are indexed at commit time.
- **drop_indices**: anything; an index another writer builds again later is its own commit.
- **delete_rows**: appends of files the predicate cannot match (by partition values,
  indices and statistics). Removing an affected file, or adding one the predicate may
  match, is a :class:`~kstore.errors.CommitConflictError`: the delete did not see those
  rows.

The drivers (:func:`kstore.build_indices`, :func:`kstore.delete_rows`) and
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
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kstore.blocks import load
from kstore.blocks.commit import commit, owning_files
from kstore.blocks.planned import reading_planned, replan
from kstore.blocks.read import index_from_store, read_task
from kstore.blocks.write import FileLayout, WrittenFile, write_partitions
from kstore.core import naming
from kstore.core.commit_options import CommitOptions, plain
from kstore.core.index import index_storage_type
from kstore.core.metadata import DatasetMetadata
from kstore.core.operations import BuildIndices, DeleteRows, DropIndices, txn_committed
from kstore.core.planning import plan_read
from kstore.core.predicates import Predicates, bind, parse, to_expression
from kstore.core.types import read_schema
from kstore.errors import (
    ColumnNotFoundError,
    DatasetNotFoundError,
    InvalidArgumentError,
)
from kstore.io.store import Store

log = logging.getLogger("kstore.write")

__all__ = ["build_indices", "drop_indices", "delete_rows", "base_version"]


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
            c: (index_from_store(store, base, labels, c, index_storage_type(schema.field(c).type)), frozenset(labels))
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
    options = options or CommitOptions()
    first = base_version(store, dataset_uuid, base)
    if base is not None:
        return _delete_rows(store, dataset_uuid, predicates, first, options)
    # plans again stay on the incarnation read first (a dataset created since is a conflict)
    return replan(lambda n: _delete_rows(store, dataset_uuid, predicates,
                                         first if n == 0 else base_version(store, dataset_uuid, None), options,
                                         origin=first), what="delete_rows")


def _delete_rows(store: Store, dataset_uuid: str, predicates: Predicates, base: DatasetMetadata,
                 options: CommitOptions, *, origin: DatasetMetadata | None = None) -> DatasetMetadata:
    if _committed_before(base, options):
        return base  # committed before: nothing to rewrite
    schema = load.load_schema(store, base)
    dnf = bind(parse(predicates), schema, dataset=dataset_uuid)
    if dnf is None:
        raise InvalidArgumentError("delete_rows needs a predicate; use delete_dataset to delete everything")
    sec = tuple(c for c in list(base.indices) + list(base.inline_indices) if c not in base.partition_keys)
    indices = load.load_indices(store, base, sec, schema)  # all of them: the commit updates every one
    plan = plan_read(base, schema, predicates, indices=indices, stats=load.load_stats(store, base))
    expr = to_expression(dnf, read_schema(schema))
    data_cols = [c for c in schema.names if c not in base.partition_keys]
    files: list[WrittenFile] = []
    remove: list[str] = []

    def rewrite_and_commit() -> DatasetMetadata:
        for task in plan.tasks:
            with reading_planned(store, dataset_uuid, base.version, [(task.label, task.key)], "delete_rows"):
                full = read_task(store, plan, replace(task, residual=None), list(schema.names))
            hit = _mask(full, expr)
            if not hit.any():
                continue
            remove.append(task.label)
            keep = full.filter(pa.array(~hit))
            if keep.num_rows:
                keep = keep.select(list(base.partition_keys) + data_cols)
                files.extend(write_partitions(store, dataset_uuid, keep,
                                              FileLayout(base.partition_keys, sec, base.table)))
        if not remove:
            return base
        pred_cols = [t.column for c in dnf for t in c]
        planned = frozenset(t.label for t in plan.tasks)
        base_v = base.version

        def may_match(meta: DatasetMetadata) -> set[str]:
            """Labels of ``meta`` whose files the predicate may match (planned, no data read)."""
            if meta.version == base_v:
                return set(planned)
            s = load.load_schema(store, meta)
            idx = load.load_indices(store, meta, pred_cols, s)
            return {t.label for t in plan_read(meta, s, predicates, indices=idx,
                                               stats=load.load_stats(store, meta)).tasks}

        op = DeleteRows(remove=tuple(remove), read_version=base.version, table=base.table,
                        partition_on=base.partition_keys, txn=options.txn, scope_labels=planned, scope=may_match,
                        metadata=plain(options.metadata), info=plain(options.info),
                        read_incarnation=(origin or base).incarnation, checks_incarnation=True,
                        seen_version=base.version)
        return commit(store, dataset_uuid, op, files=files, schema=None, max_attempts=options.max_attempts).dataset

    return owning_files(store, files, rewrite_and_commit)


def _mask(table: pa.Table, expr: pc.Expression) -> np.ndarray:
    """Evaluate a filter expression to a boolean numpy mask (null -> False)."""
    pos = table.append_column("__row", pa.array(np.arange(table.num_rows))).filter(expr).column("__row")
    mask = np.zeros(table.num_rows, dtype=bool)
    mask[pos.to_numpy()] = True
    return mask
