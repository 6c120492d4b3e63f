"""Restore: an older retained version's state committed as the newest version.

Like Delta's ``RESTORE TABLE ... TO VERSION AS OF``, Iceberg's rollback and Lance's
``restore``: nothing is copied or rewritten; the new version references the files the
older one referenced (they are still there: GC never deletes what a retained version
references) and takes its schema, partition columns, indices and user metadata. The
versions in between stay in the history and readable by time travel until garbage
collection expires them. One commit (:class:`~kstore.core.operations.Restore`: its
conflict rule is there; the commit block refuses a version a garbage collection may be
expiring).

Examples
--------
>>> import pandas as pd
>>> import kstore
>>> from kstore.io.memory import MemoryStore
>>> st = MemoryStore()
>>> _ = kstore.store_dataset(st, "d", pd.DataFrame({"x": [1, 2]}))
>>> _ = kstore.store_dataset(st, "d", pd.DataFrame({"x": [9]}), mode="overwrite")
>>> meta = restore(st, "d", 0)
>>> meta.version, sorted(kstore.read_dataset(st, "d")["x"])
(2, [1, 2])
"""

from __future__ import annotations

import logging

from kstore.blocks import load
from kstore.blocks.commit import commit
from kstore.core import naming
from kstore.core.commit_options import CommitOptions, plain
from kstore.core.metadata import DatasetMetadata
from kstore.core.operations import AddedFile, Restore, txn_committed
from kstore.errors import DatasetNotFoundError, VersionNotFoundError
from kstore.io.store import Store

log = logging.getLogger("kstore.write")

__all__ = ["restore"]


def restore(store: Store, dataset_uuid: str, version: int, *, options: CommitOptions | None = None) -> DatasetMetadata:
    """Commit ``version``'s state as the newest version of ``dataset_uuid``; one commit.

    Returns the newest version unchanged when it is ``version`` itself, or when
    ``options.txn`` was committed before. A version that garbage collection expired, or one
    a garbage collection committed after it may expire, is a
    :class:`~kstore.errors.VersionNotFoundError`; a file another writer adds or removes
    before the restore commits is a :class:`~kstore.errors.CommitConflictError` (nothing is
    committed either way).
    """
    options = options or CommitOptions()
    naming.validate_name(dataset_uuid)
    head = load.load_head(store, dataset_uuid)
    base = head.meta
    if base is None or base.version is None:
        raise DatasetNotFoundError(f"dataset {dataset_uuid!r} does not exist")
    if version > base.version:
        raise VersionNotFoundError(f"dataset {dataset_uuid!r} has no version {version} (the newest is {base.version})")
    if version == base.version or txn_committed(base, options.txn):
        return base
    target = load.load_version(store, dataset_uuid, version)
    stamp = load.load_entry(store, dataset_uuid, version).timestamp
    if not target.columnar:  # a format-1 version: its statistics and indices become columns
        target = load.to_columnar(store, target)
    schema = load.load_schema(store, target)
    now = set(base.partitions)
    then = target.partitions
    added = tuple(AddedFile(label, table, key) for label in sorted(set(then) - now)
                  for table, key in then[label].items())
    op = Restore(
        target=target,
        target_committed_ms=int(stamp.timestamp() * 1000),
        read_version=base.version,
        remove=tuple(sorted(now - set(then))),
        added=added,
        index_columns=tuple(c for c in dict.fromkeys((*target.indices, *target.inline_indices))
                            if c not in target.partition_keys),
        scope_labels=frozenset(now),
        txn=options.txn,
        metadata=plain(options.metadata),
        info={**(plain(options.info) or {}), "restored_version": version},  # history() shows it
        read_incarnation=base.incarnation,
        checks_incarnation=True,
    )
    done = commit(store, dataset_uuid, op, schema=schema, max_attempts=options.max_attempts, known_base=head)
    log.info("dataset %r: version %s restores version %d", dataset_uuid,
             done.dataset.version, version)
    return done.dataset
