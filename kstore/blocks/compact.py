"""Compaction: merge small files per partition up to a target size, in ONE commit.

Every driver does the same three things (as for writes, :mod:`kstore.blocks.job`):

1. :func:`plan_compaction` (client): load the newest version and its statistics, choose
   the partitions (all, a ``partitions`` scope of ``{column: value}`` dicts, or the files a
   ``predicates`` plan keeps), and per partition bin-pack the files smaller than
   ``target_file_size`` into groups of at most that many bytes; a partition with fewer
   than ``min_files`` small files, and a group of one file, are left alone. Nothing is
   written; ``dry_run`` stops here;
2. workers (threads, Dask tasks, Spark executors) call :func:`rewrite_group` on each
   :class:`CompactionGroup`: read its files, write them back as one file through the
   shared :func:`kstore.blocks.write.write_partitions` (with the index values of every
   secondary index and the statistics), return :class:`~kstore.blocks.write.WrittenFile`
   records;
3. :func:`finish_compaction` (client): ONE commit of a ``compaction`` operation that
   removes exactly the compacted files and adds the new ones. It conflicts only if a
   compacted file was removed or replaced meanwhile (:class:`~kstore.errors.CommitConflictError`,
   nothing committed): a concurrent append adds files the compaction did not touch, so
   it commutes and survives. Indices drop the removed labels and merge the new files'
   values; statistics drop the removed rows and add the new ones (both exact).

The commit protocol is the one of every write (FORMAT.md C): the new files are written
before the claim, files born before a garbage collection's orphan cutoff are refused, a
failure before the claim deletes the new files, and after
:class:`~kstore.errors.CommitStateUnknownError` nothing is deleted. The compacted files
stay in the store (older versions still reference them: time travel reads them) until
garbage collection removes them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from kstore.blocks import load
from kstore.blocks.commit import commit, owning_files
from kstore.blocks.mutate import base_version
from kstore.blocks.planned import reading_planned
from kstore.blocks.read import concat_tables, read_task
from kstore.blocks.scope import resolve_scope
from kstore.blocks.write import FileLayout, WrittenFile, delete_files, to_arrow, write_partitions
from kstore.core import runtime
from kstore.core.arguments import as_bool, as_delete_scope, as_txn, as_workers
from kstore.core.columns import ColumnNames
from kstore.core.commit_options import CommitOptions, plain
from kstore.core.metadata import DatasetMetadata
from kstore.core.operations import Compaction, txn_committed
from kstore.core.planning import ReadPlan, ReadTask
from kstore.core.planning import plan_read as _plan
from kstore.core.predicates import Predicates, columns_of, parse
from kstore.core.writer_options import WriteOptions
from kstore.errors import InvalidArgumentError
from kstore.io.store import Store

__all__ = ["CompactionGroup", "CompactionPlan", "CompactionRequest", "plan_compaction", "rewrite_group", "rewrite_groups",
           "finish_compaction", "worker_plan", "DEFAULT_TARGET_FILE_SIZE"]

#: default size of a compacted file (bytes of Parquet, as the statistics record them)
DEFAULT_TARGET_FILE_SIZE = 128 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class CompactionGroup:
    """Files of one partition that become one file."""

    partition: tuple[tuple[str, Any], ...]  # (partition column, value) pairs
    tasks: tuple[ReadTask, ...]
    rows: int
    nbytes: int

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(t.label for t in self.tasks)


@dataclass(frozen=True)
class CompactionPlan:
    """What a compaction does (or, with ``dry_run``, would do).

    ``version`` is the version the plan was made on; after a commit, ``committed`` is the
    new version and ``bytes_out`` the bytes written (None for a dry run or when nothing
    was worth compacting).
    """

    dataset_uuid: str
    version: int | None
    target_file_size: int
    groups: tuple[CompactionGroup, ...]
    read_plan: ReadPlan | None = field(default=None, repr=False)
    partition_on: tuple[str, ...] = ()
    index_columns: tuple[str, ...] = ()
    table: str = "table"
    options: WriteOptions = field(default_factory=WriteOptions)
    txn: tuple[str, int] | None = None
    dry_run: bool = False
    committed: int | None = None
    bytes_out: int | None = None
    #: the incarnation of the version planned on (a dataset deleted and created again
    #: since is a conflict at the commit, FORMAT.md C)
    incarnation: str | None = None

    @property
    def files_in(self) -> int:
        return sum(len(g.tasks) for g in self.groups)

    @property
    def files_out(self) -> int:
        return len(self.groups)

    @property
    def bytes_in(self) -> int:
        return sum(g.nbytes for g in self.groups)

    @property
    def rows(self) -> int:
        return sum(g.rows for g in self.groups)

    @property
    def partitions(self) -> list[dict[str, Any]]:
        """The partitions compacted (``{column: value}``), each once."""
        seen = dict.fromkeys(g.partition for g in self.groups)
        return [dict(p) for p in seen]

    def __repr__(self) -> str:
        state = "dry run" if self.dry_run else (f"committed version {self.committed}" if self.committed is not None
                                                else "not committed")
        return (f"CompactionPlan(dataset={self.dataset_uuid!r}, version={self.version}, files {self.files_in} -> "
                f"{self.files_out} in {len(self.partitions)} partition(s), {state})")

    def explain(self) -> str:
        head = (f"{'dry run: ' if self.dry_run else ''}dataset {self.dataset_uuid!r} version {self.version}: "
                f"{self.files_in} files ({self.bytes_in} bytes, {self.rows} rows) in {len(self.partitions)} "
                f"partition(s) -> {self.files_out} files")
        if self.committed is not None:
            head += f"; committed as version {self.committed} ({self.bytes_out} bytes written)"
        lines = [head]
        for g in self.groups[:20]:
            lines.append(f"  {dict(g.partition)}: {len(g.tasks)} files, {g.nbytes} bytes, {g.rows} rows -> 1 file")
        if len(self.groups) > 20:
            lines.append(f"  ... {len(self.groups) - 20} more groups")
        return "\n".join(lines)


def _as_size(value: Any, name: str, lo: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        raise InvalidArgumentError(f"compact: {name} must be an int >= {lo}, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class CompactionRequest:
    """What a compaction asks for, validated once at each engine's edge (:meth:`of`).

    ``scopes``: compact only these partitions (``[{partition column: value}, ...]``);
    ``predicates``: only the files their plan keeps; ``options``: how the merged files are
    encoded; ``txn``: the compaction's transaction (committed once).

    >>> CompactionRequest.of("d", min_files=3, sort_by="x").options.sort_by
    ('x',)
    """

    target_file_size: int = DEFAULT_TARGET_FILE_SIZE
    min_files: int = 2
    scopes: tuple[Mapping[str, Any], ...] | None = None
    predicates: Predicates = None
    options: WriteOptions = WriteOptions()
    txn: tuple[str, int] | None = None
    dry_run: bool = False

    @classmethod
    def of(cls, dataset_uuid: str, **given: Any) -> CompactionRequest:
        """Validate a compaction's arguments, in the user's names and types
        (``target_file_size``, ``min_files``, ``partitions``, ``predicates``,
        ``write_options``, ``sort_by``, ``txn``, ``dry_run``); None means the default."""
        unknown = sorted(set(given) - {"target_file_size", "min_files", "partitions", "predicates", "write_options",
                                       "sort_by", "txn", "dry_run"})
        if unknown:
            raise InvalidArgumentError(f"compact: unknown argument(s) {unknown}")
        target = given.get("target_file_size")
        min_files = given.get("min_files")
        partitions = given.get("partitions")
        return cls(target_file_size=DEFAULT_TARGET_FILE_SIZE if target is None
                   else _as_size(target, "target_file_size", 1),
                   min_files=2 if min_files is None else _as_size(min_files, "min_files", 2),
                   scopes=as_delete_scope(partitions, dataset_uuid) if partitions is not None else None,
                   predicates=given.get("predicates"),
                   options=WriteOptions.of(given.get("write_options"), sort_by=given.get("sort_by")),
                   txn=as_txn(given.get("txn")), dry_run=as_bool(given.get("dry_run", False), "dry_run"))


def plan_compaction(store: Store, dataset_uuid: str, request: CompactionRequest | None = None, *,
                    base: DatasetMetadata | None = None) -> CompactionPlan:
    """Choose the files to merge (reads metadata and statistics only; writes nothing).

    ``request``: what to compact (default: every partition, 128 MiB files). ``base``: the
    version to compact (a snapshot's); default the newest. The commit fails with
    :class:`~kstore.errors.CommitConflictError` if a later version removed one of the
    files it merges; files appended meanwhile are kept as they are.
    """
    request = request or CompactionRequest()
    target, min_files, options, dry_run, txn = (request.target_file_size, request.min_files, request.options,
                                                request.dry_run, request.txn)
    predicates, scopes = request.predicates, request.scopes
    base = base_version(store, dataset_uuid, base)
    if txn_committed(base, txn):  # committed before: nothing to do
        return CompactionPlan(dataset_uuid=dataset_uuid, version=base.version, target_file_size=target, groups=(),
                              txn=txn, dry_run=dry_run, incarnation=base.incarnation)
    schema = load.load_schema(store, base)
    options.check_columns(schema, base.partition_keys, dataset=dataset_uuid)
    sec = tuple(c for c in dict.fromkeys(list(base.indices) + list(base.inline_indices))
                if c not in base.partition_keys)
    stats = load.load_stats(store, base)
    dnf = parse(predicates)
    idx_cols = [c for c in columns_of(dnf) if c in sec]
    indices = load.load_indices(store, base, idx_cols, schema) if idx_cols else {}
    plan = _plan(base, schema, predicates, indices=indices, stats=stats)
    plan = replace(plan, predicates=None, columns=tuple(schema.names))
    tasks = [replace(t, residual=None) for t in plan.tasks]
    if scopes is not None:
        keep = resolve_scope(base, schema, list(scopes))
        tasks = [t for t in tasks if t.label in keep]
    sizes: dict[str, tuple[int, int]] = {}
    if stats is not None:
        for label, rows, nbytes in zip(stats.column("label").to_pylist(), stats.column("rows").to_pylist(),
                                       stats.column("bytes").to_pylist()):
            sizes[label] = (rows, nbytes)
    by_partition: dict[tuple[tuple[str, Any], ...], list[ReadTask]] = {}
    for t in tasks:
        by_partition.setdefault(t.partition_values, []).append(t)
    groups: list[CompactionGroup] = []
    for part, members in by_partition.items():
        small = [t for t in sorted(members, key=lambda t: t.label) if sizes.get(t.label, (0, 0))[1] < target]
        if len(small) < min_files:
            continue
        bin_: list[ReadTask] = []
        size = 0
        for t in small:  # first fit in label (birth) order: files of one write stay together
            nbytes = sizes.get(t.label, (0, 0))[1]
            if bin_ and size + nbytes > target:
                groups.extend(_group(part, bin_, sizes))
                bin_, size = [], 0
            bin_.append(t)
            size += nbytes
        groups.extend(_group(part, bin_, sizes))
    return CompactionPlan(dataset_uuid=dataset_uuid, version=base.version, target_file_size=target,
                          groups=tuple(groups), read_plan=plan, partition_on=tuple(base.partition_keys),
                          index_columns=sec, table=base.table, options=options, txn=txn, dry_run=dry_run,
                          incarnation=base.incarnation)


def rewrite_groups(store: Store, plan: CompactionPlan, *, max_workers: int | None = None,
                   progress: Callable[[int, int], Any] | None = None) -> list[WrittenFile]:
    """Rewrite every group of ``plan`` on a thread pool (one group per thread at a time);
    on any failure the files written so far are deleted and the error re-raised.
    ``progress(done, total)`` is called after each group."""
    max_workers = as_workers(max_workers)
    groups = list(plan.groups)
    written: list[WrittenFile] = []
    lock = threading.Lock()
    done = 0

    def one(group: CompactionGroup) -> None:
        nonlocal done
        files = rewrite_group(store, plan, group)
        with lock:
            written.extend(files)
            done += 1
            if progress is not None:
                progress(done, len(groups))

    try:
        threads = runtime.pool_size(len(groups), max_workers, cpu_bound=True)
        if threads <= 1:
            for g in groups:
                one(g)
        else:
            with ThreadPoolExecutor(threads) as pool:
                futures = [pool.submit(one, g) for g in groups]
            for f in futures:
                f.result()  # re-raises the first failure
    except BaseException:
        delete_files(store, written)
        raise
    return written


def worker_plan(plan: CompactionPlan) -> CompactionPlan:
    """``plan`` without what workers do not need (the groups, every planned file): small to
    ship to each Dask task or Spark executor."""
    rp = plan.read_plan
    return replace(plan, groups=(), read_plan=replace(rp, tasks=()) if rp is not None else None)


def _group(part: tuple[Any, ...], tasks: list[ReadTask], sizes: Mapping[str, tuple[int, int]]) -> list[CompactionGroup]:
    if len(tasks) < 2:
        return []  # one file alone is not rewritten
    rows = sum(sizes.get(t.label, (0, 0))[0] for t in tasks)
    nbytes = sum(sizes.get(t.label, (0, 0))[1] for t in tasks)
    return [CompactionGroup(partition=part, tasks=tuple(tasks), rows=rows, nbytes=nbytes)]


def rewrite_group(store: Store, plan: CompactionPlan, group: CompactionGroup, *,
                  file_id: str | None = None) -> list[WrittenFile]:
    """Worker side: read ``group``'s files and write their rows as one file (not committed).

    Rows keep their order (file by file, in label order) unless the plan's options sort
    them. A file that vanished because a newer version removed it (and garbage collection
    deleted it) makes the compaction a :class:`~kstore.errors.CommitConflictError`
    (:class:`~kstore.blocks.planned.PlannedFileGone`: it would conflict at the commit
    anyway); a missing file the newest version still references is damage
    (:class:`~kstore.errors.CorruptMetadataError`).
    """
    rp = plan.read_plan
    assert rp is not None
    names = list(rp.schema.names)
    tables = []
    for t in group.tasks:
        with reading_planned(store, plan.dataset_uuid, plan.version, [(t.label, t.key)], "compaction"):
            tables.append(read_task(store, rp, t, names))
    data = to_arrow(concat_tables(tables), dataset=plan.dataset_uuid)
    data_cols = [c for c in names if c not in plan.partition_on]
    data = data.select(list(plan.partition_on) + data_cols)
    return write_partitions(store, plan.dataset_uuid, data,
                            FileLayout(plan.partition_on, plan.index_columns, plan.table, plan.options,
                                       ColumnNames.of(rp.schema)),
                            file_id=file_id, max_workers=1)


def finish_compaction(store: Store, plan: CompactionPlan, files: Sequence[WrittenFile],
                      on_claimed: Callable[[], Any] | None = None,
                      options: CommitOptions | None = None) -> tuple[CompactionPlan, DatasetMetadata]:
    """The ONE commit: remove exactly the compacted files, add ``files``. On failure before
    the claim the new files are deleted; after :class:`CommitStateUnknownError` nothing is.

    ``options``: user metadata, commit info (merged into the compaction's counts) and
    attempts; the transaction is the plan's.
    """
    files = list(files)
    options = options or CommitOptions()
    remove = tuple(sorted(lab for g in plan.groups for lab in g.labels))
    info = {"files_in": len(remove), "files_out": len(files), "bytes_in": plan.bytes_in, **(options.info or {})}
    # the indices of the newest version are kept by the commit (none is asked for here: an
    # index dropped meanwhile must not come back)
    op = Compaction(remove=remove, read_version=plan.version, partition_on=plan.partition_on,
                   table=plan.table, txn=plan.txn, info=info,
                    metadata=plain(options.metadata), read_incarnation=plan.incarnation, checks_incarnation=True,
                    seen_version=plan.version)
    meta = owning_files(store, files, lambda: commit(
        store, plan.dataset_uuid, op, files=files, schema=None, on_claimed=on_claimed,
        max_attempts=options.max_attempts).dataset)
    if files and not meta.has_keys([f.key for f in files]):
        return plan, meta  # the transaction was committed before (its files were deleted)
    return replace(plan, committed=meta.version, bytes_out=sum(f.stats.nbytes for f in files)), meta
