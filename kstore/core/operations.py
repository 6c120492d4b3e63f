"""Commit operations as typed values, each with its pure fold ``op.apply(base) -> new metadata``.

An :class:`Operation` says what a writer wants (files added, partitions removed, schema,
indices requested) and which version it read; one subclass per kind of change
(:class:`Create`, :class:`Append`, :class:`Vacuum`, ...). ``op.check(base)`` raises when
the operation cannot be applied to the current version (a real conflict); ``op.apply``
computes the new metadata without I/O. Index and statistics files are the commit block's
job.

>>> op = Create(partition_on=("p",))
>>> new = op.apply(None, dataset_uuid="d", schema=None, now="2024-01-01T00:00:00")
>>> new.partition_keys, new.version
(('p',), 0)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import pyarrow as pa

from kstore.core import naming
from kstore.core.filetable import Actions, FileTable
from kstore.core.index import ColumnIndex
from kstore.core.metadata import DatasetMetadata
from kstore.core.naming import MetadataFormat
from kstore.core.types import TYPE_HINT_KEYS
from kstore.errors import (
    CommitConflictError,
    DatasetExistsError,
    DatasetNotFoundError,
    InvalidArgumentError,
)

__all__ = [
    "Operation", "OperationKind", "AddedFile", "next_version", "txn_committed", "Create", "Overwrite", "Append", "DeleteScope",
    "OverwritePartitions", "BuildIndices", "DropIndices", "DeleteRows", "UpdateRows", "Merge", "Compaction", "Upgrade",
    "Vacuum", "Delete", "Restore", "ColumnChange", "RenameColumns", "DropColumns", "SchemaMode", "SCHEMA_MODES",
]

#: How a write's schema meets the dataset's: ``"strict"`` (the columns and their kinds of type
#: must match), ``"merge"`` (new columns are added, columns widen without changing a value:
#: :func:`kstore.core.types.merge_schemas`), ``"overwrite"`` (a full overwrite replaces the
#: schema and the partitioning: Delta's ``overwriteSchema``).
SchemaMode = Literal["strict", "merge", "overwrite"]
SCHEMA_MODES: tuple[SchemaMode, ...] = ("strict", "merge", "overwrite")

OperationKind = Literal[
    "create", "overwrite", "append", "delete_scope", "overwrite_partitions",
    "build_indices", "drop_indices", "delete_rows", "update", "merge", "compaction", "upgrade", "vacuum", "delete",
    "restore", "rename_columns", "drop_columns",
]


@dataclass(frozen=True, slots=True)
class AddedFile:
    """A data file an operation adds (what the commit needs of a written file)."""

    label: str
    table: str
    key: str


@dataclass(frozen=True, slots=True)
class Operation:
    """What a writer asks the commit to do: one subclass per kind of change, each with its
    own conflict check (:meth:`check`) and fold (:meth:`apply`), as pyiceberg's typed
    updates. :attr:`kind` is the name the log entry records (unchanged byte for byte).

    ``remove`` lists partition labels to drop, as the writer resolved them at
    ``read_version``; ``scope_labels`` is the set of labels the writer's scope (a delete
    scope, the partitions an overwrite replaces, the files a row predicate may match)
    covered at that version, and ``scope`` resolves the same scope at a newer version. If
    the scope covers a label now that it did not then, another writer added data the
    operation did not see: a conflict (the operation would not be serializable in commit
    order).

    ``read_incarnation`` is the incarnation of the version read
    (:attr:`~kstore.core.metadata.DatasetMetadata.incarnation`; None for a dataset created
    before kstore recorded one), checked when ``checks_incarnation`` is set: a write that
    read one dataset never commits into another of the same name (deleted and created
    again, or overwritten, meanwhile).

    ``seen_version`` is the newest version the writer had loaded *before* it wrote its
    files: a garbage collection fenced at or below it listed its candidates before those
    files existed, so its orphan cutoff does not apply to them (FORMAT.md C2).
    """

    #: the operation's name in the log
    kind: ClassVar[OperationKind]
    #: whether the operation starts the dataset afresh (no base state is kept)
    creates: ClassVar[bool] = False
    #: ``vacuum`` and ``delete`` change no data; they order garbage collection against
    #: concurrent writers (FORMAT.md, commit protocol)
    is_fence: ClassVar[bool] = False
    #: whether the commit refuses to read more than 1,000 files to fill a requested index
    #: (an index build is the one operation that may)
    limits_index_reads: ClassVar[bool] = True
    #: whether the new version's state is not the base's changed but one given whole (a
    #: ``restore``): its log entry records the whole state, as a create's does
    resets: ClassVar[bool] = False

    added: tuple[AddedFile, ...] = ()
    remove: tuple[str, ...] = ()
    read_version: int | None = None
    partition_on: tuple[str, ...] | None = None
    index_columns: tuple[str, ...] = ()
    drop_index_columns: tuple[str, ...] = ()
    metadata: Mapping[str, Any] | None = None
    schema_mode: SchemaMode = "strict"
    table: str = naming.DEFAULT_TABLE
    txn: tuple[str, int] | None = None
    scope_labels: frozenset[str] | None = None
    #: the scope at a newer version (see above); compared with ``scope_labels``
    scope: Callable[[DatasetMetadata], set[str]] | None = field(default=None, compare=False, repr=False)
    #: for ``vacuum``/``delete``: files older than this (epoch ms) may be deleted as orphans
    orphan_cutoff_ms: int | None = None
    #: small user dict recorded in the log entry (``history()`` shows it), like Delta's commitInfo
    info: Mapping[str, Any] | None = None
    #: the incarnation of the version read (see above)
    read_incarnation: str | None = None
    #: whether ``read_incarnation`` was recorded (the operation builds on a version it read)
    checks_incarnation: bool = False
    #: the newest version loaded before the files were written (see above)
    seen_version: int | None = None
    #: the metadata file format of a new dataset (None: the head's format, else JSON)
    metadata_format: MetadataFormat | None = None
    #: indices built while writing the files: column -> (index, labels it covers)
    prebuilt_indices: Mapping[str, tuple[ColumnIndex, frozenset[str]]] | None = field(
        default=None, compare=False, repr=False)

    def partition_keys_on(self, base: DatasetMetadata | None) -> tuple[str, ...]:
        """The partition columns of the version this operation commits on top of ``base``."""
        if base is not None and not self.creates:
            return tuple(base.partition_keys)
        return tuple(self.partition_on or ())

    def done_before(self, base: DatasetMetadata | None) -> bool:
        """Whether ``base`` already holds this operation's effect (its transaction was
        committed before): the commit then commits nothing."""
        return txn_committed(base, self.txn)

    def check(self, base: DatasetMetadata | None, *, dataset_uuid: str) -> None:
        """Raise if the operation cannot be applied on top of ``base`` (the newest version)."""
        if base is None:
            raise DatasetNotFoundError(
                f"dataset {dataset_uuid!r} does not exist (or was deleted while this write ran)"
            )
        if self.checks_incarnation and base.incarnation is not None and self.read_incarnation != base.incarnation:
            # only a create gives a dataset its incarnation: one read without any, or another
            # one, means the dataset was created again after the version read. (The newest
            # version without one, the state cannot tell: the commit reads the log instead.)
            raise CommitConflictError(
                f"dataset {dataset_uuid!r} was deleted and created again (or overwritten) after version "
                f"{self.read_version}, which this write read: version {base.version} belongs to the new dataset; "
                "nothing was committed"
            )
        if self.partition_on is not None and tuple(self.partition_on) != tuple(base.partition_keys):
            raise InvalidArgumentError(
                f"dataset {dataset_uuid!r} is partitioned on {list(base.partition_keys)}; the update "
                f"asks for partition_on={list(self.partition_on)}"
            )
        if self.remove:
            gone = missing_labels(base, self.remove)
            if gone:
                raise CommitConflictError(
                    f"dataset {dataset_uuid!r}: version {base.version} (committed after version "
                    f"{self.read_version}, which this write read) already removed or replaced "
                    f"file(s) {gone[:5]}{' ...' if len(gone) > 5 else ''}"
                )
        if self.scope is not None and self.scope_labels is not None:
            added = sorted(self.scope(base) - set(self.scope_labels))
            if added:
                raise CommitConflictError(
                    f"dataset {dataset_uuid!r}: version {base.version} added file(s) "
                    f"{added[:5]} inside this write's scope after version {self.read_version}, which it read"
                )

    def apply(self, base: DatasetMetadata | None, *, dataset_uuid: str, schema: pa.Schema | None, now: str,
              version: int | None = None, add_rows: pa.Table | None = None) -> DatasetMetadata | None:
        """The metadata after the operation (indices and stats keys are filled in by the
        commit block).

        ``version`` is the number the new version gets (default: the base's plus one; the
        commit passes it when the newest log entry is a fence without a dataset). ``None``
        comes back for an operation that leaves no dataset (a ``delete``, a ``vacuum`` of a
        dataset that does not exist). ``add_rows`` (format 2) are the file-table rows of
        the added files: the new state is then columnar (the base must be columnar, or be
        replaced).
        """
        return self._apply(base, dataset_uuid=dataset_uuid, schema=schema, now=now,
                           version=next_version(base) if version is None else version, add_rows=add_rows)

    def _apply(self, base: DatasetMetadata | None, *, dataset_uuid: str, schema: pa.Schema | None, now: str,
               version: int, add_rows: pa.Table | None) -> DatasetMetadata | None:
        """What :meth:`apply` computes, with the version number resolved (subclasses
        override this, not :meth:`apply`)."""
        if base is None:
            raise DatasetNotFoundError(f"dataset {dataset_uuid!r} does not exist")
        if add_rows is not None and not base.columnar:
            # the base's statistics and indices are files of their own (format 1): they
            # would be lost (the commit makes such a base columnar first: load.to_columnar)
            raise ValueError("a columnar commit needs a columnar base")
        meta = base
        if self.metadata:
            merged = dict(base.metadata)
            merged.update(self.metadata)
            meta = meta.evolve(metadata=merged)
        return self._with_files(meta, base.files, self.remove, dict(base.txns), schema=schema,
                                version=version, add_rows=add_rows)

    def _with_files(self, meta: DatasetMetadata, start: FileTable, remove: tuple[str, ...],
                    txns: dict[str, int], *, schema: pa.Schema | None, version: int,
                    add_rows: pa.Table | None) -> DatasetMetadata:
        """``meta`` with the added files, without ``remove``, with the transaction recorded
        and the dropped indices gone, as ``version``."""
        if add_rows is not None:
            files = start.apply(Actions(add=add_rows if add_rows.num_rows else None, remove=remove))
            for col in self.drop_index_columns:
                files = files.drop_index(col)
            meta = meta.with_files(files)
        else:
            added: dict[str, dict[str, str]] = {}
            for f in self.added:
                added.setdefault(f.label, {})[f.table] = f.key
            meta = meta.with_partitions(added, removed=remove)
        if self.txn is not None:
            txns[self.txn[0]] = int(self.txn[1])
        return meta.evolve(
            version=version,
            schema=schema,
            txns=txns,
            indices={c: k for c, k in meta.indices.items() if c not in self.drop_index_columns},
            inline_indices={c: v for c, v in meta.inline_indices.items() if c not in self.drop_index_columns},
        )


@dataclass(frozen=True, slots=True)
class Create(Operation):
    """A new dataset; refused if one exists (``mode="error"``)."""

    kind: ClassVar[OperationKind] = "create"
    creates: ClassVar[bool] = True

    def check(self, base: DatasetMetadata | None, *, dataset_uuid: str) -> None:
        if base is not None:
            raise DatasetExistsError(
                f"dataset {dataset_uuid!r} already exists; pass mode='overwrite' to replace it or "
                "use update_dataset to append"
            )

    def _apply(self, base: DatasetMetadata | None, *, dataset_uuid: str, schema: pa.Schema | None, now: str,
               version: int, add_rows: pa.Table | None) -> DatasetMetadata | None:
        return self._fresh(base, {}, {}, dataset_uuid=dataset_uuid, schema=schema, now=now,
                           version=version, add_rows=add_rows)

    def _fresh(self, base: DatasetMetadata | None, kept: Mapping[str, Any], txns: dict[str, int], *,
               dataset_uuid: str, schema: pa.Schema | None, now: str, version: int,
               add_rows: pa.Table | None) -> DatasetMetadata:
        user = {**kept, **(self.metadata or {})}
        user.setdefault("creation_time", now)
        meta = DatasetMetadata.new(dataset_uuid, partition_keys=self.partition_on or (), metadata=user,
                                   tables=(self.table,))
        return self._with_files(meta, FileTable(), (), txns, schema=schema, version=version, add_rows=add_rows)


@dataclass(frozen=True, slots=True)
class Overwrite(Create):
    """The dataset replaced by new data (``mode="overwrite"``); creates it if missing."""

    kind: ClassVar[OperationKind] = "overwrite"

    def check(self, base: DatasetMetadata | None, *, dataset_uuid: str) -> None:
        return None  # replaces whatever is there

    def _apply(self, base: DatasetMetadata | None, *, dataset_uuid: str, schema: pa.Schema | None, now: str,
               version: int, add_rows: pa.Table | None) -> DatasetMetadata | None:
        # an overwrite keeps the user metadata (as Delta keeps a table's configuration) and
        # the transactions; the write's own ``metadata`` is merged over it, as an append
        # merges it. Not kept: the creation time (the dataset is new) and type hints of
        # another engine, which described the replaced data
        kept = {} if base is None else {k: v for k, v in base.metadata.items()
                                        if k != "creation_time" and k not in TYPE_HINT_KEYS}
        return self._fresh(base, kept, {} if base is None else dict(base.txns), dataset_uuid=dataset_uuid,
                           schema=schema, now=now, version=version,
                           add_rows=add_rows)


@dataclass(frozen=True, slots=True)
class Append(Operation):
    """Files added to an existing dataset (``update_dataset``, ``mode="append"``)."""

    kind: ClassVar[OperationKind] = "append"


@dataclass(frozen=True, slots=True)
class DeleteScope(Operation):
    """Partitions removed by a delete scope, with no new files."""

    kind: ClassVar[OperationKind] = "delete_scope"


@dataclass(frozen=True, slots=True)
class OverwritePartitions(Operation):
    """The partitions the new files fall into replaced by them."""

    kind: ClassVar[OperationKind] = "overwrite_partitions"


@dataclass(frozen=True, slots=True)
class BuildIndices(Operation):
    """Secondary indices built for existing files (``build_indices``)."""

    kind: ClassVar[OperationKind] = "build_indices"
    limits_index_reads: ClassVar[bool] = False


@dataclass(frozen=True, slots=True)
class DropIndices(Operation):
    """Secondary indices dropped (``drop_indices``)."""

    kind: ClassVar[OperationKind] = "drop_indices"


@dataclass(frozen=True, slots=True)
class DeleteRows(Operation):
    """Files rewritten without the rows a predicate matches (``delete_rows``)."""

    kind: ClassVar[OperationKind] = "delete_rows"


@dataclass(frozen=True, slots=True)
class UpdateRows(Operation):
    """Files rewritten with constant values set in the rows a predicate matches
    (``update_rows``); rows whose partition column is set move to that partition's new file.

    Conflict rule (that of :class:`DeleteRows`): a version committed after the one read that
    removed a rewritten file, or added a file the predicate may match (by partition values,
    indices and statistics), is a :class:`~kstore.errors.CommitConflictError`; appends of
    files the predicate cannot match commute.
    """

    kind: ClassVar[OperationKind] = "update"


@dataclass(frozen=True, slots=True)
class Merge(Operation):
    """An upsert by key (``merge``): the files holding matched target rows rewritten (rows
    updated or deleted), target rows absent from the source deleted when asked, and the
    source rows without a match added as new files, in one version.

    Conflict rule: ``scope`` resolves the files the key predicate (the source's key values,
    or their range) may match. A version committed after the one read that removed a
    rewritten file, or added a file the keys may match (it may hold a key this merge inserts
    or should have updated), is a :class:`~kstore.errors.CommitConflictError`; appends of
    files the keys cannot match commute. With ``when_not_matched_by_source="delete"`` the
    scope is every file: any added file is a conflict.
    """

    kind: ClassVar[OperationKind] = "merge"


@dataclass(frozen=True, slots=True)
class Compaction(Operation):
    """Small files merged into larger ones, the same rows (``compact``)."""

    kind: ClassVar[OperationKind] = "compaction"


@dataclass(frozen=True, slots=True)
class Upgrade(Operation):
    """A kartothek or format-1 dataset given its first log entry (``upgrade``)."""

    kind: ClassVar[OperationKind] = "upgrade"

    def done_before(self, base: DatasetMetadata | None) -> bool:
        return base is not None and base.version is not None  # a concurrent upgrade won


@dataclass(frozen=True, slots=True)
class Restore(Operation):
    """The dataset set back to an older retained version (``restore``): that version's
    files, schema, partition columns, indices and user metadata become a new version; the
    versions between stay in the history (time travel reads them until GC expires them).

    The dataset's incarnation and its application transactions are the base's: a restore
    changes the dataset, it does not create another one, and a job that committed after
    ``target`` does not run again because of it.

    Conflict rule: a restore replaces the whole state it read (``scope_labels``: every file
    of the version read), so any file another writer added or removed after it read is a
    :class:`~kstore.errors.CommitConflictError` (as a Delta ``RESTORE`` reads the whole
    table). The commit block also refuses a ``target`` older than the orphan cutoff of a
    garbage collection committed after it: that GC may expire it and delete its files.

    >>> base = DatasetMetadata.new("d").evolve(version=4, txns={"app": 3}, incarnation="i2")
    >>> old = DatasetMetadata.new("d", partition_keys=["p"], metadata={"owner": "me"}).evolve(
    ...     version=1, incarnation="i1")
    >>> new = Restore(target=old, read_version=4).apply(base, dataset_uuid="d", schema=None, now="t")
    >>> new.version, new.partition_keys, dict(new.metadata), dict(new.txns), new.incarnation
    (5, ('p',), {'owner': 'me'}, {'app': 3}, 'i2')
    """

    kind: ClassVar[OperationKind] = "restore"
    resets: ClassVar[bool] = True
    limits_index_reads: ClassVar[bool] = False

    #: the retained version whose state the new version takes
    target: DatasetMetadata | None = field(default=None, compare=False, repr=False)
    #: when ``target`` was committed (its log entry's timestamp, epoch ms): what garbage
    #: collection compares with its cutoff to decide whether ``target`` stays retained
    target_committed_ms: int | None = None

    def partition_keys_on(self, base: DatasetMetadata | None) -> tuple[str, ...]:
        assert self.target is not None
        return tuple(self.target.partition_keys)

    def check(self, base: DatasetMetadata | None, *, dataset_uuid: str) -> None:
        Operation.check(self, base, dataset_uuid=dataset_uuid)
        assert base is not None
        if self.scope_labels is not None and base.version != self.read_version:
            changed = sorted(set(base.partitions) ^ self.scope_labels)
            if changed:
                raise CommitConflictError(
                    f"dataset {dataset_uuid!r}: version {base.version} added or removed file(s) "
                    f"{changed[:5]}{' ...' if len(changed) > 5 else ''} after version {self.read_version}, which "
                    "this restore read; nothing was committed"
                )

    def _apply(self, base: DatasetMetadata | None, *, dataset_uuid: str, schema: pa.Schema | None, now: str,
               version: int, add_rows: pa.Table | None) -> DatasetMetadata | None:
        if base is None:
            raise DatasetNotFoundError(f"dataset {dataset_uuid!r} does not exist")
        if self.target is None:
            raise ValueError("a restore needs the version it restores")
        txns = dict(base.txns)
        if self.txn is not None:
            txns[self.txn[0]] = int(self.txn[1])
        user = {**self.target.metadata, **(self.metadata or {})}
        return self.target.evolve(version=version, schema=schema if schema is not None else self.target.schema,
                                  txns=txns, metadata=user, incarnation=base.incarnation, commit_id=None,
                                  orphan_cutoff_ms=base.orphan_cutoff_ms, main_format=base.main_format)


@dataclass(frozen=True, slots=True)
class ColumnChange(Operation):
    """Columns renamed or dropped without rewriting a data file (:mod:`kstore.core.columns`):
    the schema and the file table's statistics and index lists change names; the files keep
    every value under its file name.

    Conflict rule: the change applies to the newest version (it commutes with appends,
    compactions and row changes committed meanwhile); a column it names that the newest
    version lacks (renamed or dropped meanwhile) is a :class:`~kstore.errors.ColumnNotFoundError`.
    A write that read a version before the change and commits after it fails in its own
    commit (its files hold a column under a name that now means another one).
    """

    kind: ClassVar[OperationKind] = "rename_columns"

    #: ``(old name, new name)`` of the columns renamed
    renames: tuple[tuple[str, str], ...] = ()
    #: the columns dropped
    drops: tuple[str, ...] = ()

    def changed(self, base: DatasetMetadata, schema: pa.Schema, *,
                dataset_uuid: str) -> tuple[pa.Schema, DatasetMetadata]:
        """The new schema and ``base`` with its file table's columns and indices renamed or
        dropped (``base`` is columnar)."""
        from kstore.core.columns import drop_columns, rename_columns

        fixed = tuple(base.partition_keys)
        moved: dict[str, str | None] = dict(self.renames)
        if self.renames:
            schema = rename_columns(schema, dict(self.renames), dataset=dataset_uuid, fixed=fixed)
        if self.drops:
            schema = drop_columns(schema, self.drops, dataset=dataset_uuid, fixed=fixed)
            moved.update(dict.fromkeys(self.drops))

        def kept(indices: Mapping[str, Any]) -> dict[str, Any]:
            return {str(moved.get(c, c)): v for c, v in indices.items() if not (c in moved and moved[c] is None)}

        new = base.with_files(base.files.with_columns_renamed(moved)) if base.columnar else base
        return schema, new.evolve(indices=kept(base.indices), inline_indices=kept(base.inline_indices))


@dataclass(frozen=True, slots=True)
class RenameColumns(ColumnChange):
    """Columns renamed (``rename_columns``)."""

    kind: ClassVar[OperationKind] = "rename_columns"


@dataclass(frozen=True, slots=True)
class DropColumns(ColumnChange):
    """Columns dropped (``drop_columns``)."""

    kind: ClassVar[OperationKind] = "drop_columns"


@dataclass(frozen=True, slots=True)
class Vacuum(Operation):
    """A garbage collection's fence: no data change; raises the orphan cutoff."""

    kind: ClassVar[OperationKind] = "vacuum"
    is_fence: ClassVar[bool] = True

    def check(self, base: DatasetMetadata | None, *, dataset_uuid: str) -> None:
        return None  # a fence commits on any state, even none

    def _apply(self, base: DatasetMetadata | None, *, dataset_uuid: str, schema: pa.Schema | None, now: str,
               version: int, add_rows: pa.Table | None) -> DatasetMetadata | None:
        if base is None:
            return None
        return base.evolve(version=version,
                           orphan_cutoff_ms=_later(base.orphan_cutoff_ms, self.orphan_cutoff_ms))


@dataclass(frozen=True, slots=True)
class Delete(Vacuum):
    """The dataset deleted (``delete_dataset``): a fence that leaves no dataset."""

    kind: ClassVar[OperationKind] = "delete"

    def _apply(self, base: DatasetMetadata | None, *, dataset_uuid: str, schema: pa.Schema | None, now: str,
               version: int, add_rows: pa.Table | None) -> DatasetMetadata | None:
        return None


def txn_committed(base: DatasetMetadata | None, txn: tuple[str, int] | None) -> bool:
    """Whether ``base`` records application transaction ``txn`` (or a later one of the
    same application) as committed: a retried job then commits nothing.

    >>> base = DatasetMetadata.new("ds").evolve(txns={"app": 7})
    >>> txn_committed(base, ("app", 7)), txn_committed(base, ("app", 8)), txn_committed(base, None)
    (True, False, False)
    """
    return txn is not None and base is not None and base.txns.get(txn[0], -1) >= txn[1]


def next_version(base: DatasetMetadata | None) -> int:
    if base is None or base.version is None:
        return 0
    return base.version + 1


def _later(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def missing_labels(meta: DatasetMetadata, labels: Sequence[str]) -> list[str]:
    """Those of ``labels`` that ``meta`` has no partition for (vectorized)."""
    import pyarrow.compute as pc

    ft = meta.files

    arr = pa.array(list(labels), pa.string())
    there = pc.is_in(arr, value_set=ft.labels.combine_chunks() if len(ft) else pa.array([], pa.string()))
    return list(arr.filter(pc.invert(there)).to_pylist())
