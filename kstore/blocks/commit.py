"""The one commit every write path uses (eager, iterator, Dask, Spark, index builds, GC).

Protocol (FORMAT.md B.2):

1. load the newest version (main file + a probe of the log for versions a crashed or
   concurrent writer claimed but did not publish);
2. check the operation against it (:func:`kstore.core.operations.check`): a real conflict
   raises :class:`~kstore.errors.CommitConflictError`, nothing is written;
3. build the new metadata (pure), write new index and statistics files under fresh keys;
4. claim version ``v+1`` with an atomic ``put_if_absent`` of its log entry;
5. publish: rewrite the main metadata file (what kartothek reads) and, if the schema
   changed, ``_common_metadata``.

Losing the race at step 4 means another writer committed first: the files written in
step 3 are deleted, and the loop goes back to step 1 (appends commute), with backoff,
up to ``max_attempts`` times.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa

from kstore import __version__
from kstore.blocks import load
from kstore.blocks.read import index_from_store
from kstore.blocks.write import (
    WrittenFile,
    index_from_files,
    write_common_metadata,
    write_index_file,
    write_stats_file,
)
from kstore.core import naming, serialize
from kstore.core.index import ColumnIndex, index_storage_type
from kstore.core.metadata import DatasetMetadata
from kstore.core.naming import MetadataFormat
from kstore.core.operations import AddedFile, Operation, apply, check
from kstore.core.stats import merge_stats_tables, stats_table
from kstore.core.types import merge_schemas, schema_pandas_metadata, with_pandas_metadata
from kstore.errors import (
    CommitConflictError,
    CommitStateUnknownError,
    InvalidArgumentError,
    KstoreError,
)
from kstore.io.store import Store

__all__ = ["commit", "added_files"]


def added_files(files: Sequence[WrittenFile]) -> tuple[AddedFile, ...]:
    return tuple(AddedFile(f.label, f.table, f.key) for f in files)


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _merged_schema(base: DatasetMetadata | None, base_schema: pa.Schema | None, new: pa.Schema | None,
                   op: Operation, uuid: str) -> pa.Schema | None:
    if op.creates or base is None:
        return new
    if new is None:
        return base_schema
    merged = merge_schemas(base_schema, new, dataset=uuid, allow_new_columns=op.schema_mode == "merge")
    if merged.equals(base_schema, check_metadata=False):
        return base_schema
    return with_pandas_metadata(merged, schema_pandas_metadata(base_schema) or schema_pandas_metadata(new))


def _build_indices(
    store: Store,
    base: DatasetMetadata | None,
    new: DatasetMetadata,
    op: Operation,
    files: Sequence[WrittenFile],
    schema: pa.Schema,
    prebuilt: Mapping[str, tuple[ColumnIndex, frozenset[str]]],
) -> tuple[dict[str, str], list[str]]:
    """Index keys of the new version, and the keys this attempt wrote (to undo on retry).

    Every index of the new version covers exactly its partitions: indices of the base are
    updated incrementally (removed labels dropped, new files merged); partitions a
    concurrent commit added that no index source covers are read back from the store.
    """
    wanted = [c for c in dict.fromkeys(tuple(new.indices) + tuple(new.inline_indices) + op.index_columns)
              if c not in new.partition_keys and c not in op.drop_index_columns]
    keys: dict[str, str] = {}
    written: list[str] = []
    current = set(new.partitions)
    by_label = {f.label: f for f in files}
    for col in wanted:
        if col not in schema.names:
            raise InvalidArgumentError(f"dataset {new.uuid!r}: cannot index column {col!r}: no such column")
        vtype = index_storage_type(schema.field(col).type)
        base_has = base is not None and not op.creates and (col in base.indices or col in base.inline_indices)
        if col in prebuilt:
            idx, covered = prebuilt[col]
        elif base_has:
            changed = bool(op.remove) or bool(files)
            if not changed and col in base.indices:
                keys[col] = base.indices[col]
                continue
            idx = load.load_index(store, base, col, schema)
            covered = frozenset(base.partitions)
        else:
            idx, covered = ColumnIndex.empty(col, vtype), frozenset()
        stale = [lab for lab in covered if lab not in current]
        if stale:
            idx = idx.drop_labels(stale)
        missing = [lab for lab in current if lab not in covered]
        with_values = [by_label[lab] for lab in missing if lab in by_label and col in by_label[lab].index_values]
        if with_values:
            idx = idx.merge(index_from_files(col, with_values, vtype))
        unread = [lab for lab in missing if not (lab in by_label and col in by_label[lab].index_values)]
        if unread:
            if len(unread) > 1000 and not base_has and col not in prebuilt and op.kind != "build_indices":
                raise InvalidArgumentError(
                    f"dataset {new.uuid!r} has no index on {col!r} yet; build it first with "
                    f"build_indices(store, {new.uuid!r}, [{col!r}])"
                )
            idx = idx.merge(index_from_store(store, new, unread, col, vtype))
        key = write_index_file(store, new.uuid, idx)
        keys[col] = key
        written.append(key)
    return keys, written


def _build_stats(store: Store, base: DatasetMetadata | None, op: Operation,
                 files: Sequence[WrittenFile], schema: pa.Schema) -> pa.Table | None:
    if not files and not op.remove and base is not None and not op.creates:
        return None  # unchanged
    new = stats_table([f.label for f in files], [f.stats for f in files], schema)
    if op.creates or base is None:
        return new
    old = load.load_stats(store, base)
    return merge_stats_tables(old, new, op.remove)


def commit(
    store: Store,
    dataset_uuid: str,
    op: Operation,
    *,
    files: Sequence[WrittenFile] = (),
    schema: pa.Schema | None = None,
    metadata_format: MetadataFormat | None = None,
    prebuilt_indices: Mapping[str, tuple[ColumnIndex, frozenset[str]]] | None = None,
    scope: Callable[[DatasetMetadata], set[str]] | None = None,
    max_attempts: int = 50,
    on_claimed: Callable[[], Any] | None = None,
    known_base: tuple[DatasetMetadata, MetadataFormat] | None = None,
) -> DatasetMetadata:
    """Commit ``op`` as the next version of ``dataset_uuid``; return the new metadata.

    ``files`` are the data files the operation adds (their statistics and index values
    feed the new version's statistics and indices); ``schema`` is the normalized schema of
    the new data. Re-submitting an already committed ``op.txn`` returns the committed
    version unchanged (idempotent writes). ``known_base`` is the (metadata, format) the
    caller just loaded: the first attempt then costs one existence probe instead of a reload.
    """
    naming.validate_name(dataset_uuid)
    if files and not op.added:
        op = replace(op, added=added_files(files))
    prebuilt = dict(prebuilt_indices or {})
    delay = 0.01
    for attempt in range(max_attempts):
        if attempt == 0 and known_base is not None:
            # the caller just loaded it: one probe says whether it is still the newest
            base, base_fmt = known_base
            nxt = 0 if base.version is None else base.version + 1
            if store.exists(naming.log_key(dataset_uuid, nxt)):
                base, base_fmt = load.load_latest(store, dataset_uuid)
        else:
            base, base_fmt = load.load_latest(store, dataset_uuid)
        if op.txn is not None and base is not None and base.txns.get(op.txn[0], -1) >= op.txn[1]:
            return base
        if op.kind == "upgrade" and base is not None and base.version is not None:
            return base  # a concurrent upgrade won
        check(base, op, dataset_uuid=dataset_uuid, scope_now=scope(base) if (scope and base is not None) else None)
        fmt: MetadataFormat = metadata_format or base_fmt or "json"
        base_schema = load.load_schema(store, base) if (base is not None and not op.creates) else None
        new_schema = _merged_schema(base, base_schema, schema, op, dataset_uuid)
        if new_schema is None:
            raise InvalidArgumentError(f"dataset {dataset_uuid!r}: a new dataset needs data or a schema")
        now = _now()
        new = apply(base, op, dataset_uuid=dataset_uuid, schema=new_schema, now=now.replace(tzinfo=None).isoformat())
        written: list[str] = []
        if store.exists(naming.log_key(dataset_uuid, new.version)):
            continue  # lost already: reload before writing index and statistics files
        try:
            index_keys, written = _build_indices(store, base, new, op, files, new_schema, prebuilt)
            stats = _build_stats(store, base, op, files, new_schema)
            stats_key = base.stats_key if (stats is None and base is not None) else None
            if stats is not None:
                stats_key = write_stats_file(store, dataset_uuid, stats)
                written.append(stats_key)
            new = new.evolve(indices=index_keys, inline_indices={}, stats_key=stats_key)
            entry = {
                "version": new.version,
                "parent": base.version if base is not None else None,
                "timestamp": now.isoformat(),
                "operation": op.kind,
                "added": sorted({f.label for f in op.added}),
                "removed": sorted(op.remove),
                "rows_added": int(sum(f.stats.rows for f in files)),
                "txn": list(op.txn) if op.txn else None,
                "writer": f"kstore {__version__}",
                "metadata": new.to_dict(),
            }
            claimed = store.put_if_absent(naming.log_key(dataset_uuid, new.version), serialize.dumps(entry, "json"))
        except KstoreError:
            _cleanup(store, written)
            raise
        if not claimed:
            _cleanup(store, written)
            time.sleep(delay * random.random())  # full jitter
            delay = min(delay * 2, 0.25)
            continue
        if on_claimed is not None:
            on_claimed()
        try:
            _publish(store, new, fmt, base_fmt, schema_changed=(base_schema is None or not new_schema.equals(base_schema)))
        except Exception as exc:  # the version is committed; only the main file may lag
            raise CommitStateUnknownError(
                f"dataset {dataset_uuid!r}: version {new.version} is committed but publishing the "
                f"main metadata file failed ({exc}); the next commit or a reader of the log repairs it"
            ) from exc
        return new
    raise CommitConflictError(
        f"dataset {dataset_uuid!r}: gave up after {max_attempts} attempts; other writers kept committing first"
    )


def _publish(store: Store, new: DatasetMetadata, fmt: MetadataFormat, old_fmt: MetadataFormat | None,
             *, schema_changed: bool) -> None:
    if schema_changed and new.schema is not None:
        write_common_metadata(store, new.uuid, new.table, new.schema)
    store.put(naming.metadata_key(new.uuid, fmt), serialize.dumps(new.to_dict(), fmt))
    if old_fmt is not None and old_fmt != fmt:
        store.delete(naming.metadata_key(new.uuid, old_fmt))
    # A faster writer may have published a newer version before us: publish the newest
    # again, and repeat until no newer version is claimed after our last write. A version
    # claimed after that check is published by its own writer after our write, so the
    # main file always ends at the newest committed version (a single re-publish could
    # overwrite a version committed while we loaded the one we saw as newest).
    latest = new.version
    while store.exists(naming.log_key(new.uuid, latest + 1)):
        while store.exists(naming.log_key(new.uuid, latest + 1)):
            latest += 1
        newest = load.load_version(store, new.uuid, latest)
        store.put(naming.metadata_key(new.uuid, fmt), serialize.dumps(newest.to_dict(), fmt))


def _cleanup(store: Store, keys: Sequence[str]) -> None:
    for key in keys:
        try:
            store.delete(key)
        except Exception:  # best effort; GC removes what is left
            pass
