"""Commit operations as data, and the pure fold ``apply(base, op) -> new metadata``.

An :class:`Operation` says what a writer wants (files added, partitions removed, schema,
indices requested) and which version it read. :func:`check` raises when the operation
cannot be applied to the current version (a real conflict); :func:`apply` computes the
new metadata without I/O. Index and statistics files are the commit block's job.

>>> base = None
>>> op = Operation(kind="create", partition_on=("p",))
>>> new = apply(base, op, dataset_uuid="d", schema=None, now="2024-01-01T00:00:00")
>>> new.partition_keys, new.version
(('p',), 0)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa

from kstore.core import naming
from kstore.core.metadata import DatasetMetadata
from kstore.core.types import TYPE_HINT_KEYS
from kstore.errors import (
    CommitConflictError,
    DatasetExistsError,
    DatasetNotFoundError,
    InvalidArgumentError,
)

__all__ = ["Operation", "OperationKind", "check", "apply", "next_version", "AddedFile"]

OperationKind = Literal[
    "create", "overwrite", "append", "delete_scope", "overwrite_partitions",
    "build_indices", "drop_indices", "delete_rows", "compaction", "upgrade", "metadata", "vacuum", "delete",
]


@dataclass(frozen=True, slots=True)
class AddedFile:
    """A data file an operation adds (what the commit needs of a written file)."""

    label: str
    table: str
    key: str


@dataclass(frozen=True, slots=True)
class Operation:
    """What a writer asks the commit to do.

    ``remove`` lists partition labels to drop, as the writer resolved them at
    ``read_version``; ``scope_labels`` is the set of labels the writer's scope (a delete
    scope, the partitions an overwrite replaces, the files a row predicate may match)
    covered at that version. If the scope covers a label now that it did not then, another
    writer added data the operation did not see: a conflict (the operation would not be
    serializable in commit order).

    ``read_incarnation`` is the incarnation of the version read
    (:attr:`~kstore.core.metadata.DatasetMetadata.incarnation`; None for a dataset created
    before kstore recorded one), checked when ``checks_incarnation`` is set: a write that
    read one dataset never commits into another of the same name (deleted and created
    again, or overwritten, meanwhile).
    """

    kind: OperationKind
    added: tuple[AddedFile, ...] = ()
    remove: tuple[str, ...] = ()
    read_version: int | None = None
    partition_on: tuple[str, ...] | None = None
    index_columns: tuple[str, ...] = ()
    drop_index_columns: tuple[str, ...] = ()
    metadata: Mapping[str, Any] | None = None
    schema_mode: Literal["strict", "merge"] = "strict"
    table: str = naming.DEFAULT_TABLE
    txn: tuple[str, int] | None = None
    scope_labels: frozenset[str] | None = None
    #: for ``vacuum``/``delete``: files older than this (epoch ms) may be deleted as orphans
    orphan_cutoff_ms: int | None = None
    #: small user dict recorded in the log entry (``history()`` shows it), like Delta's commitInfo
    info: Mapping[str, Any] | None = None
    #: the incarnation of the version read (see above)
    read_incarnation: str | None = None
    #: whether ``read_incarnation`` was recorded (the operation builds on a version it read)
    checks_incarnation: bool = False

    @property
    def creates(self) -> bool:
        return self.kind in ("create", "overwrite")

    @property
    def is_fence(self) -> bool:
        """``vacuum`` and ``delete`` change no data; they order garbage collection
        against concurrent writers (FORMAT.md, commit protocol)."""
        return self.kind in ("vacuum", "delete")


def next_version(base: DatasetMetadata | None) -> int:
    if base is None or base.version is None:
        return 0
    return base.version + 1


def check(base: DatasetMetadata | None, op: Operation, *, dataset_uuid: str, scope_now: set[str] | None = None) -> None:
    """Raise if ``op`` cannot be applied on top of ``base`` (the newest version)."""
    if op.kind == "create" and base is not None:
        raise DatasetExistsError(
            f"dataset {dataset_uuid!r} already exists; pass mode='overwrite' to replace it or "
            "use update_dataset to append"
        )
    if op.is_fence:
        return
    if not op.creates and base is None:
        raise DatasetNotFoundError(
            f"dataset {dataset_uuid!r} does not exist (or was deleted while this write ran)"
        )
    if base is None or op.creates:
        return
    if op.checks_incarnation and base.incarnation is not None and op.read_incarnation != base.incarnation:
        # only a create gives a dataset its incarnation: one read without any, or another
        # one, means the dataset was created again after the version read. (The newest
        # version without one, the state cannot tell: the commit reads the log instead.)
        raise CommitConflictError(
            f"dataset {dataset_uuid!r} was deleted and created again (or overwritten) after version "
            f"{op.read_version}, which this write read: version {base.version} belongs to the new dataset; "
            "nothing was committed"
        )
    if op.partition_on is not None and tuple(op.partition_on) != tuple(base.partition_keys):
        raise InvalidArgumentError(
            f"dataset {dataset_uuid!r} is partitioned on {list(base.partition_keys)}; the update "
            f"asks for partition_on={list(op.partition_on)}"
        )
    if op.remove:
        gone = missing_labels(base, op.remove)
        if gone:
            raise CommitConflictError(
                f"dataset {dataset_uuid!r}: version {base.version} (committed after version "
                f"{op.read_version}, which this write read) already removed or replaced "
                f"partition(s) {gone[:5]}{' ...' if len(gone) > 5 else ''}"
            )
    added = sorted(scope_now - set(op.scope_labels)) if (op.scope_labels is not None and scope_now is not None) else []
    if added:
        raise CommitConflictError(
            f"dataset {dataset_uuid!r}: version {base.version} added partition(s) "
            f"{added[:5]} inside this write's scope after version {op.read_version}, which it read"
        )


def apply(
    base: DatasetMetadata | None,
    op: Operation,
    *,
    dataset_uuid: str,
    schema: pa.Schema | None,
    now: str,
    version: int | None = None,
    add_rows: pa.Table | None = None,
) -> DatasetMetadata | None:
    """The metadata after ``op`` (indices and stats keys are filled in by the commit block).

    ``version`` is the number the new version gets (default: the base's plus one; the
    commit passes it when the newest log entry is a fence without a dataset). ``None``
    comes back for ``delete`` and for a ``vacuum`` of a dataset that does not exist.
    ``add_rows`` (format 2) are the file-table rows of the added files: the new state is
    then columnar (the base must be columnar, or be replaced).
    """
    number = next_version(base) if version is None else version
    if op.kind == "delete" or (op.kind == "vacuum" and base is None):
        return None
    if op.kind == "vacuum":
        assert base is not None
        return base.evolve(version=number, orphan_cutoff_ms=_later(base.orphan_cutoff_ms, op.orphan_cutoff_ms))
    if base is None or op.creates:
        user = dict(op.metadata or {})
        if base is not None and op.kind == "overwrite":
            # an overwrite keeps the user metadata (as Delta keeps a table's configuration);
            # the write's own ``metadata`` is merged over it, as an append merges it. Not kept:
            # the creation time (the dataset is new) and type hints of another engine, which
            # described the replaced data
            kept = {k: v for k, v in base.metadata.items() if k != "creation_time" and k not in TYPE_HINT_KEYS}
            user = {**kept, **user}
        user.setdefault("creation_time", now)
        meta = DatasetMetadata.new(
            dataset_uuid,
            partition_keys=op.partition_on or (),
            metadata=user,
            tables=(op.table,),
        )
        txns: dict[str, int] = {}
        if base is not None and op.kind == "overwrite":
            txns = dict(base.txns)
    else:
        meta = base
        if op.metadata:
            merged = dict(base.metadata)
            merged.update(op.metadata)
            meta = meta.evolve(metadata=merged)
        txns = dict(base.txns)
    if add_rows is not None:
        from kstore.core.filetable import Actions, FileTable

        start = FileTable() if (base is None or op.creates) else base.files
        if start is None:
            raise ValueError("a columnar commit needs a columnar base")
        files = start.apply(Actions(add=add_rows if add_rows.num_rows else None,
                                    remove=() if (base is None or op.creates) else tuple(op.remove)))
        for col in op.drop_index_columns:
            files = files.drop_index(col)
        meta = meta.with_files(files)
    else:
        added: dict[str, dict[str, str]] = {}
        for f in op.added:
            added.setdefault(f.label, {})[f.table] = f.key
        meta = meta.with_partitions(added, removed=op.remove)
    if op.txn is not None:
        txns[op.txn[0]] = int(op.txn[1])
    indices = {c: k for c, k in meta.indices.items() if c not in op.drop_index_columns}
    return meta.evolve(
        version=number,
        schema=schema,
        txns=txns,
        indices=indices,
        inline_indices={c: v for c, v in meta.inline_indices.items() if c not in op.drop_index_columns},
    )


def _later(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def missing_labels(meta: DatasetMetadata, labels: Sequence[str]) -> list[str]:
    """Those of ``labels`` that ``meta`` has no partition for (vectorized for columnar state)."""
    ft = meta.files
    if ft is None:
        return [lab for lab in labels if lab not in meta.partitions]
    import pyarrow.compute as pc

    arr = pa.array(list(labels), pa.string())
    there = pc.is_in(arr, value_set=ft.labels.combine_chunks() if len(ft) else pa.array([], pa.string()))
    return list(arr.filter(pc.invert(there)).to_pylist())


def labels_in_scope(meta: DatasetMetadata, labels: Sequence[str]) -> set[str]:
    return {lab for lab in labels if lab in meta.partitions}
