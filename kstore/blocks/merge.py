"""Upsert by key (``merge``): Delta's ``MERGE`` on kstore's copy-on-write files, one commit.

The source (a DataFrame or Arrow table with the dataset's columns) is converted and checked
as an append converts and checks its data (:func:`~kstore.blocks.write.to_arrow`,
:func:`~kstore.blocks.write.table_schema`, :func:`~kstore.core.types.merge_schemas`). Its
keys become a predicate (per key column an ``in`` of its distinct values, or a ``>=``/``<=``
range beyond :data:`MAX_IN_VALUES` of them; one conjunction per partition when the keys
include partition columns: :func:`key_predicates`) that the planner prunes with partition values,
secondary indices and statistics: only the files that may hold a source key are read.
:func:`plan_merge` plans them; each is rewritten once (:func:`~kstore.blocks.mutate.rewrite_file`
with :class:`MergeFile`: in threads here, in Dask or Spark tasks through :func:`~kstore.blocks.mutate.rewrite_task`
and :func:`distributed_merge`), and :func:`commit_merge` adds the unmatched source rows as new
files in one :class:`~kstore.core.operations.Merge` commit.

Matching is SQL's: a key with a null in any key column matches nothing (such a source row
is inserted when ``when_not_matched="insert"``, such a target row counts as not matched by
the source). A source key that occurs twice is an error; a target key held by several rows
updates (deletes) each of them.

Conflicts (:class:`~kstore.core.operations.Merge`): a concurrent commit that removed a file
this merge rewrites, or added a file the key predicate may match, fails the merge with
:class:`~kstore.errors.CommitConflictError` (nothing committed); with
``when_not_matched_by_source="delete"`` any added file does.

Examples
--------
>>> import pandas as pd, kstore
>>> from kstore.io.memory import MemoryStore
>>> st = MemoryStore()
>>> _ = kstore.store_dataset(st, "d", pd.DataFrame({"p": [1, 1, 2], "k": [1, 2, 3], "x": [5, 6, 7]}), partition_on="p")
>>> r = merge(st, "d", pd.DataFrame({"p": [1, 2], "k": [2, 4], "x": [60, 8]}), MergeRequest.of("d", ["k"]))
>>> r.inserted, r.updated, r.dataset.version
(1, 1, 1)
>>> sorted(kstore.read_dataset(st, "d")[["k", "x"]].itertuples(index=False, name=None))
[(1, 5), (2, 60), (3, 7), (4, 8)]
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kstore.blocks import load
from kstore.blocks.commit import owning_files
from kstore.blocks.mutate import RewritePlan, commit_rewrite, on_newest, plan_rewrite, rewrite_file
from kstore.blocks.write import WrittenFile, table_schema, to_arrow, write_partitions
from kstore.core import runtime
from kstore.core.commit_options import CommitOptions
from kstore.core.metadata import DatasetMetadata
from kstore.core.operations import Merge, txn_committed
from kstore.core.planning import ReadTask
from kstore.core.predicates import MAX_PREDICATE_TERMS
from kstore.core.types import merge_schemas
from kstore.errors import ColumnNotFoundError, InvalidArgumentError, SchemaMismatchError, short_repr
from kstore.io.store import Store

__all__ = ["MergeResult", "MergeRequest", "merge", "key_predicates", "MAX_IN_VALUES", "MergeFile", "MergeJob", "plan_merge",
           "commit_merge", "distributed_merge", "FileOutcome"]

#: A key column with at most this many distinct source values is planned with an ``in`` of
#: them (partition values, index lookups and statistics prune by each value); with more, by
#: the range of its values (statistics and partition values prune by it).
MAX_IN_VALUES = 10_000

WhenMatched = Literal["update", "delete", "ignore"]
WhenNotMatched = Literal["insert", "ignore"]
WhenNotMatchedBySource = Literal["delete", "ignore"]
_CHOICES = {"when_matched": ("update", "delete", "ignore"), "when_not_matched": ("insert", "ignore"),
            "when_not_matched_by_source": ("delete", "ignore")}


@dataclass(frozen=True, slots=True)
class MergeResult:
    """What :func:`kstore.merge` did.

    Attributes
    ----------
    dataset : DatasetMetadata
        The committed version, or the current one when nothing changed (nothing committed).
    inserted : int
        Source rows added (no target row had their key).
    updated : int
        Target rows given their source row's values.
    deleted : int
        Target rows deleted (matched with ``when_matched="delete"``, or absent from the
        source with ``when_not_matched_by_source="delete"``).
    files_read : int
        Data files read (those that may hold a source key; every file for
        ``when_not_matched_by_source="delete"``).
    files_rewritten : int
        Data files replaced by rewritten ones.
    files_added : int
        Data files the commit added (the rewritten files' replacements and the inserts).

    Examples
    --------
    >>> import pandas as pd, kstore
    >>> _ = kstore.store_dataset("memory://mr-doc", "d", pd.DataFrame({"k": [1, 2], "x": [5, 6]}))
    >>> r = kstore.merge("memory://mr-doc", "d", pd.DataFrame({"k": [2], "x": [60]}), "k",
    ...                  when_not_matched_by_source="delete")
    >>> r.inserted, r.updated, r.deleted, r.files_read, r.files_rewritten, r.files_added
    (0, 1, 1, 1, 1, 1)
    """

    dataset: DatasetMetadata
    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    files_read: int = 0
    files_rewritten: int = 0
    files_added: int = 0


@dataclass(frozen=True, slots=True)
class MergeRequest:
    """What :func:`merge` is asked (validated by :meth:`of`): the key columns and what
    becomes of matched rows, unmatched source rows and target rows the source lacks.

    >>> MergeRequest.of("d", "k").keys
    ('k',)
    """

    keys: tuple[str, ...]
    when_matched: WhenMatched = "update"
    when_not_matched: WhenNotMatched = "insert"
    when_not_matched_by_source: WhenNotMatchedBySource = "ignore"

    @classmethod
    def of(cls, dataset_uuid: str, on: str | Sequence[str], when_matched: str = "update",
           when_not_matched: str = "insert", when_not_matched_by_source: str = "ignore") -> MergeRequest:
        """The request, or :class:`~kstore.errors.InvalidArgumentError` for a bad argument."""
        keys = [on] if isinstance(on, str) else list(on) if isinstance(on, (list, tuple)) else None
        if not keys or not all(isinstance(k, str) for k in keys) or len(set(keys)) != len(keys):
            raise InvalidArgumentError(
                f"dataset {dataset_uuid!r}: merge needs on= a column name or a list of distinct column names, "
                f"got {short_repr(on)}")
        modes = {"when_matched": when_matched, "when_not_matched": when_not_matched,
                 "when_not_matched_by_source": when_not_matched_by_source}
        for name, value in modes.items():
            if value not in _CHOICES[name]:
                raise InvalidArgumentError(f"dataset {dataset_uuid!r}: {name} must be one of "
                                           f"{', '.join(map(repr, _CHOICES[name]))}, got {short_repr(value)}")
        return cls(tuple(keys), **modes)  # type: ignore[arg-type]


def merge(store: Store, dataset_uuid: str, source: Any, request: MergeRequest, *,
          base: DatasetMetadata | None = None, options: CommitOptions | None = None) -> MergeResult:
    """Merge ``source`` into ``base`` (default: the newest version) as ``request`` says; one
    commit. See the module docstring and :func:`kstore.merge`.

    A planned file gone (GC after a newer version removed it): as
    :func:`~kstore.blocks.mutate.delete_rows` (planned again on the newest version, or a
    conflict for a snapshot's ``base``).
    """
    opts = options or CommitOptions()
    table = to_arrow(source, dataset=dataset_uuid)  # (a new table: the caller's frame is not changed)
    return on_newest(store, dataset_uuid, base, "merge",
                     lambda b, origin: _merge(store, dataset_uuid, table, request, b, opts, origin))


def _source(table: pa.Table, schema: pa.Schema, base: DatasetMetadata, keys: Sequence[str],
            dataset_uuid: str) -> tuple[pa.Table, pa.Schema, pa.Schema]:
    """The source checked against the dataset as an append is (the same columns, types that
    fit), cast to the merged types in the dataset's column order; with the normalized schema
    of the source (for the commit) and the merged schema."""
    missing = [k for k in keys if k not in schema.names]
    if missing:
        raise ColumnNotFoundError(f"dataset {dataset_uuid!r}: merge keys {missing} are not columns of the dataset "
                                  f"(columns: {', '.join(schema.names)})")
    lacks = [n for n in schema.names if n not in table.column_names]
    extra = [n for n in table.column_names if n not in schema.names]
    if lacks or extra:
        raise SchemaMismatchError(
            f"dataset {dataset_uuid!r}: the merge source must have the dataset's columns; "
            + "; ".join(([f"it lacks {lacks}"] if lacks else []) + ([f"it has {extra}, which the dataset does not"]
                                                                     if extra else [])))
    new_schema = table_schema(table, partition_on=base.partition_keys, secondary_indices=(), dataset=dataset_uuid)
    merged = merge_schemas(schema, new_schema, dataset=dataset_uuid)
    target = pa.schema([pa.field(f.name, f.type) for f in merged])
    return table.select(target.names).cast(target), new_schema, target


def _check_unique(src: pa.Table, keys: Sequence[str], dataset_uuid: str) -> None:
    """Duplicate (non-null) keys in the source: an error naming up to 5 of them."""
    valid = src.select(keys).filter(_complete(src, keys))
    counts = valid.group_by(list(keys)).aggregate([([], "count_all")])
    dupes = counts.filter(pc.greater(counts.column("count_all"), 1))
    if dupes.num_rows:
        shown = [tuple(r[k] for k in keys) if len(keys) > 1 else r[keys[0]] for r in dupes.slice(0, 5).to_pylist()]
        raise InvalidArgumentError(
            f"dataset {dataset_uuid!r}: the merge source holds {dupes.num_rows} key(s) of {list(keys)} more than once, "
            f"e.g. {short_repr(shown)}; a merge needs one source row per key (deduplicate the source first)")


def _complete(table: pa.Table, keys: Sequence[str]) -> pa.Array:
    """Rows with no null in any key column (only those can match)."""
    mask = pa.array(np.ones(table.num_rows, dtype=bool))
    for k in keys:
        mask = pc.and_(mask, pc.is_valid(table.column(k)))
    return mask


def key_predicates(src: pa.Table, keys: Sequence[str], partition_keys: Sequence[str] = (), *,
                   max_in: int = MAX_IN_VALUES) -> list[list[tuple[str, str, Any]]]:
    """A predicate every row holding a (complete) key of ``src`` matches: per key column an
    ``in`` of its distinct values, or its ``>=``/``<=`` range beyond ``max_in`` of them. Keys
    that include partition columns get one conjunction per partition (its values ``==``,
    the other key columns' values in that partition), while that stays within
    :data:`~kstore.core.predicates.MAX_PREDICATE_TERMS`. No complete key: a predicate
    nothing matches.

    >>> key_predicates(pa.table({"k": [3, 1, 3, None]}), ["k"])
    [[('k', 'in', [3, 1])]]
    >>> key_predicates(pa.table({"k": [3, 1, 2]}), ["k"], max_in=2)
    [[('k', '>=', 1), ('k', '<=', 3)]]
    >>> key_predicates(pa.table({"p": ["a", "b", "a"], "k": [1, 2, 3]}), ["p", "k"], ["p"])
    [[('p', '==', 'a'), ('k', 'in', [1, 3])], [('p', '==', 'b'), ('k', 'in', [2])]]
    """
    valid = src.select(keys).filter(_complete(src, keys))
    if valid.num_rows == 0:
        return [[(keys[0], "in", [])]]
    parts = [k for k in keys if k in partition_keys]
    rest = [k for k in keys if k not in partition_keys]
    if parts and rest:
        groups = valid.group_by(parts).aggregate([([], "count_all")]).drop_columns(["count_all"])
        if groups.num_rows * len(keys) <= MAX_PREDICATE_TERMS // 2:  # (a range takes two terms)
            out = []
            for values in groups.to_pylist():
                mask = pa.array(np.ones(valid.num_rows, dtype=bool))
                for k in parts:
                    mask = pc.and_(mask, pc.equal(valid.column(k), pa.scalar(values[k], valid.schema.field(k).type)))
                out.append([(k, "==", values[k]) for k in parts] + _value_terms(valid.filter(mask), rest, max_in))
            return out
    return [_value_terms(valid, keys, max_in)]


def _value_terms(valid: pa.Table, keys: Sequence[str], max_in: int) -> list[tuple[str, str, Any]]:
    terms: list[tuple[str, str, Any]] = []
    for k in keys:
        distinct = pc.unique(valid.column(k))
        if len(distinct) <= max_in:
            terms.append((k, "in", distinct.to_pylist()))
        else:
            bounds = pc.min_max(distinct)
            terms += [(k, ">=", bounds["min"].as_py()), (k, "<=", bounds["max"].as_py())]
    return terms


def _pairs(rows: pa.Table, src: pa.Table, keys: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """(target row, source row) positions of equal complete keys (a null matches nothing;
    NaN matches NaN, as in the join). One key column: a hash lookup of the (unique) source
    keys; several: a hash join."""
    if len(keys) == 1:
        pos = pc.index_in(rows.column(keys[0]), value_set=src.column(keys[0]), skip_nulls=True)
        pos = pos.combine_chunks() if isinstance(pos, pa.ChunkedArray) else pos
        t_idx = np.flatnonzero(pos.is_valid().to_numpy(zero_copy_only=False))
        return t_idx.astype(np.int64, copy=False), pos.drop_null().to_numpy().astype(np.int64, copy=False)
    left = rows.select(keys).append_column("__t", pa.array(np.arange(rows.num_rows)))
    right = src.select(keys).append_column("__s", pa.array(np.arange(src.num_rows)))
    joined = left.join(right, keys=list(keys), join_type="inner", use_threads=False)
    return (joined.column("__t").to_numpy().astype(np.int64, copy=False),
            joined.column("__s").to_numpy().astype(np.int64, copy=False))


@dataclass(frozen=True)
class MergeFile:
    """What a merge does to one target file (:func:`~kstore.blocks.mutate.rewrite_file`'s
    ``change``; picklable, so Dask and Spark tasks run it): its rows paired with the source
    rows of equal keys, matched rows updated / deleted / kept, target rows the source lacks
    deleted with ``by_source``. Returns the new rows (None: the file stays as it is) and a
    report: the positions of the source rows matched, the rows updated and deleted."""

    src: pa.Table
    keys: tuple[str, ...]
    when_matched: str
    by_source: bool
    target: pa.Schema

    def __call__(self, rows: pa.Table) -> tuple[pa.Table | None, tuple[np.ndarray, int, int]]:
        rows = rows.cast(self.target)
        t_idx, s_idx = _pairs(rows, self.src, self.keys)
        hit = np.zeros(rows.num_rows, dtype=bool)
        hit[t_idx] = True
        gone = rows.num_rows - len(t_idx) if self.by_source else 0  # target rows the source lacks
        if gone == 0 and (len(t_idx) == 0 or self.when_matched == "ignore"):
            return None, (s_idx, 0, 0)  # the file stays as it is
        parts = [] if self.by_source else [rows.filter(pa.array(~hit))]
        if self.when_matched == "update":
            parts.append(self.src.take(pa.array(s_idx)))
        elif self.when_matched == "ignore":
            parts.append(rows.filter(pa.array(hit)))
        updated = len(t_idx) if self.when_matched == "update" else 0
        deleted = gone + (len(t_idx) if self.when_matched == "delete" else 0)
        return (pa.concat_tables(parts) if parts else rows.slice(0, 0)), (s_idx, updated, deleted)


@dataclass(frozen=True)
class MergeJob:
    """A merge planned on one version (:func:`plan_merge`): the files its keys may match
    (:class:`~kstore.blocks.mutate.RewritePlan`), the change of each (:class:`MergeFile`,
    holding the checked source) and the normalized schema of the source's values."""

    base: DatasetMetadata
    request: MergeRequest
    rewrite: RewritePlan
    change: MergeFile
    new_schema: pa.Schema


def plan_merge(store: Store, dataset_uuid: str, table: pa.Table, request: MergeRequest,
               base: DatasetMetadata, *, origin: DatasetMetadata | None = None) -> MergeJob:
    """Check the source against ``base`` (columns, types, unique keys) and plan the files its
    keys may match (every file with ``when_not_matched_by_source="delete"``); ``origin``: the
    version read first, when ``base`` is a plan again."""
    keys = list(request.keys)
    schema = load.load_schema(store, base)
    src, new_schema, target = _source(table, schema, base, keys, dataset_uuid)
    _check_unique(src, keys, dataset_uuid)
    by_source = request.when_not_matched_by_source == "delete"
    predicates = None if by_source else key_predicates(src, keys, base.partition_keys)  # by source: every file
    rewrite = plan_rewrite(store, dataset_uuid, base, schema, predicates, Merge, origin=origin)
    return MergeJob(base, request, rewrite, MergeFile(src, tuple(keys), request.when_matched, by_source, target),
                    new_schema)


#: one planned file's outcome: its new files (None: it stays) and :class:`MergeFile`'s report
FileOutcome = tuple["list[WrittenFile] | None", tuple[np.ndarray, int, int]]


def commit_merge(store: Store, job: MergeJob, outcomes: Sequence[FileOutcome], options: CommitOptions,
                 owned: list[WrittenFile]) -> MergeResult:
    """After every planned file of ``job`` was rewritten (``outcomes``, in plan order; in
    this process, or in Dask or Spark tasks): write the inserts (the source rows no file
    matched) and make the ONE commit. ``owned`` holds every file written for the merge; the
    inserts are added to it (callers run this inside
    :func:`~kstore.blocks.commit.owning_files` over it)."""
    src = job.change.src
    matched = np.zeros(src.num_rows, dtype=bool)
    updated = deleted = 0
    replaced: list[tuple[str, list[WrittenFile]]] = []
    for task, (out, (s_idx, up, gone)) in zip(job.rewrite.tasks, outcomes, strict=True):
        matched[s_idx] = True
        updated += up
        deleted += gone
        if out is not None:
            replaced.append((task.label, out))
    inserts = src.filter(pa.array(~matched)) if job.request.when_not_matched == "insert" else src.slice(0, 0)
    rp = job.rewrite
    added = write_partitions(store, rp.dataset_uuid, inserts.select(list(rp.order)), rp.layout) \
        if inserts.num_rows else []
    owned.extend(added)
    # (the keys: read_changes pairs each updated row's images by them)
    counts = {"inserted": inserts.num_rows, "updated": updated, "deleted": deleted, "on": list(job.request.keys)}
    meta = commit_rewrite(store, job.base, options, rp, replaced, added, new_schema=job.new_schema,
                          info={**counts, **(options.info or {})})
    if meta is job.base:
        return MergeResult(job.base, files_read=len(rp.tasks))
    return MergeResult(meta, inserts.num_rows, updated, deleted, len(rp.tasks), len(replaced),
                       sum(len(out) for _, out in replaced) + len(added))


def _merge(store: Store, dataset_uuid: str, table: pa.Table, request: MergeRequest, base: DatasetMetadata,
           options: CommitOptions, origin: DatasetMetadata | None) -> MergeResult:
    """The merge in this process: the planned files rewritten in threads."""
    job = plan_merge(store, dataset_uuid, table, request, base, origin=origin)
    if txn_committed(base, options.txn):
        return MergeResult(base)  # committed before: nothing to do
    owned: list[WrittenFile] = []  # every file written so far (deleted if the merge fails)
    lock = threading.Lock()
    outcomes: list[FileOutcome | None] = [None] * len(job.rewrite.tasks)

    def one(numbered: tuple[int, ReadTask]) -> None:
        i, task = numbered
        out, report = rewrite_file(store, job.rewrite, task, job.change)
        with lock:
            owned.extend(out or ())
            outcomes[i] = (out, report)

    def rewrite_and_commit() -> MergeResult:
        runtime.parallel_map(one, list(enumerate(job.rewrite.tasks)), cpu_bound=True)
        return commit_merge(store, job, [o for o in outcomes if o is not None], options, owned)

    return _owning(store, owned, rewrite_and_commit)


def distributed_merge(store: Store, dataset_uuid: str, source: Any, request: MergeRequest, options: CommitOptions,
                      run: Callable[[MergeJob, str], Sequence[tuple[int, FileOutcome]]]) -> MergeResult:
    """A merge whose planned files an engine rewrites (Dask, Spark), on the newest version:
    the source is checked and the files planned here (:func:`plan_merge`); ``run(job,
    token)`` runs :func:`~kstore.blocks.mutate.rewrite_task` for every planned file of ``job`` and returns the
    outcomes with their plan positions; if it fails, every file tagged with the token is
    deleted (:func:`~kstore.blocks.write.delete_by_token`) and nothing is committed. Then
    :func:`commit_merge`, owning every file written (deleted if the commit fails). A
    transaction committed before: nothing runs."""
    from kstore.blocks.mutate import base_version, run_tagged

    base = base_version(store, dataset_uuid, None)
    job = plan_merge(store, dataset_uuid, to_arrow(source, dataset=dataset_uuid), request, base)
    if txn_committed(base, options.txn):
        return MergeResult(base)  # committed before: nothing to do
    outcomes = run_tagged(store, job.rewrite, lambda token: run(job, token))
    owned = [f for out, _ in outcomes for f in (out or ())]
    return _owning(store, owned, lambda: commit_merge(store, job, outcomes, options, owned))


def _owning(store: Store, owned: list[WrittenFile], work: Callable[[], MergeResult]) -> MergeResult:
    """``work`` as the owner of ``owned`` (:func:`~kstore.blocks.commit.owning_files`)."""
    done: list[MergeResult] = []

    def run() -> DatasetMetadata:
        done.append(work())
        return done[-1].dataset

    owning_files(store, owned, run)
    return done[-1]
