"""The one commit every write path uses (eager, iterator, Dask, Spark, index builds, GC).

Protocol (FORMAT.md, "Commit protocol"; every step is a store call or pure):

1. find the newest version ``N``: the main file as a hint, then one listing of the log
   (:func:`kstore.blocks.load.load_head`);
2. check the operation against it (``op.check``, :mod:`kstore.core.operations`); refuse files
   older than the newest garbage collection's orphan cutoff (GC may have deleted them);
3. build the new metadata (pure), write new index and statistics files under fresh keys,
   and serialize the log entry and the main file — everything that can fail, before the
   commit point;
4. **the commit point**: claim version ``N+1`` with an atomic ``put_if_absent`` of its
   log entry. The claim is made only on a head listed less than :data:`BASE_MAX_AGE` ago,
   and a failed or lost claim is confirmed by reading the entry back (its ``commit_id``
   says whose it is);
5. publish: rewrite the main metadata file (what kartothek reads) and, if the schema
   changed, ``_common_metadata``; then republish whatever newer version a faster writer
   committed meanwhile, so the main file ends at the newest version.

Losing the claim means another writer committed first: this attempt's index and
statistics files are deleted and the loop goes back to step 1 (appends commute), with
jittered backoff, up to ``max_attempts`` times. After the claim nothing is ever deleted:
a failure to publish raises :class:`~kstore.errors.CommitStateUnknownError` with
``committed=True``.
"""

from __future__ import annotations

import logging
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from kstore._version import __version__
from kstore.blocks import load
from kstore.blocks.history import write_summary
from kstore.blocks.load import Head
from kstore.blocks.read import index_from_store
from kstore.blocks.write import (
    WrittenFile,
    common_metadata_bytes,
    delete_files,
    write_index_file,
)
from kstore.core import naming, runtime, serialize
from kstore.core.columns import check_written_names, current_names, file_name, with_file_names, without_mapping
from kstore.core.filetable import IDX, file_rows, ipc_text
from kstore.core.index import ColumnIndex, index_storage_type
from kstore.core.log import FENCE_OPERATIONS, LOG_MIN_AGE, LogEntry
from kstore.core.metadata import DatasetMetadata
from kstore.core.naming import MetadataFormat
from kstore.core.operations import AddedFile, ColumnChange, Delete, Operation, Overwrite, Restore
from kstore.core.state import CHECKPOINT_INTERVAL, checkpoint_parts, encode_actions, main_file_bytes
from kstore.core.stats import exact_int64_columns, stats_table
from kstore.core.types import (
    check_partitioning,
    merge_schemas,
    normalize_type,
    schema_pandas_metadata,
    with_pandas_metadata,
    without_file_kinds,
)
from kstore.errors import (
    CommitConflictError,
    CommitStateUnknownError,
    CorruptMetadataError,
    InvalidArgumentError,
    KeyNotFoundError,
    KstoreError,
    UnsafeStoreWarning,
    UnsupportedTypeError,
    VersionNotFoundError,
)
from kstore.io.store import Store

log = logging.getLogger("kstore.commit")

__all__ = ["commit", "owning_files", "Committed", "added_files", "BASE_MAX_AGE", "oldest_file_ms", "write_checkpoint"]

#: A commit claims a version only on a log listing younger than this. Log entries are never
#: deleted before :data:`~kstore.core.log.LOG_MIN_AGE`, so the number it claims cannot have
#: been used and expired since (the margin covers clock skew and one slow store call).
BASE_MAX_AGE = LOG_MIN_AGE / 4

_PUBLISH_ATTEMPTS = 3

#: How long a commit keeps resolving a claim whose outcome the store left open (a
#: conditional put in flight, failed store calls) before it raises CommitStateUnknownError.
CLAIM_RESOLVE_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class Committed:
    """What a commit produced: the log entry, and the dataset metadata it holds (None for a
    fence without a dataset). ``new`` is False when nothing was committed because the
    operation's transaction was already committed (idempotent retry)."""

    entry: LogEntry | None
    meta: DatasetMetadata | None
    new: bool = True

    @property
    def dataset(self) -> DatasetMetadata:
        """The committed dataset metadata (operations that leave a dataset)."""
        if self.meta is None:
            raise InvalidArgumentError("this commit leaves no dataset (a delete or a fence)")
        return self.meta


def added_files(files: Sequence[WrittenFile]) -> tuple[AddedFile, ...]:
    return tuple(AddedFile(f.label, f.table, f.key) for f in files)


_M = TypeVar("_M", bound="DatasetMetadata | None")


def owning_files(store: Store, files: Sequence[WrittenFile], work: Callable[[], _M]) -> _M:
    """Run ``work`` (everything from the first written file up to the one :func:`commit`
    that adds ``files``) as the owner of those files: the one place that decides their fate.

    - ``work`` fails before the claim: the files are deleted (nothing half-written);
    - :class:`~kstore.errors.CommitStateUnknownError`, or any exception :func:`commit` raised
      during or after its claim (a ``KeyboardInterrupt``, a store adapter's own error): they
      stay (the version is, or may be, committed; GC removes them if it is not);
    - the state ``work`` returns does not name them: deleted (the same transaction was
      committed before, or nothing was committed).

    ``files`` may be a list ``work`` still appends to: it is read when the fate is decided.

    >>> from kstore.io import MemoryStore
    >>> st = MemoryStore()
    >>> st.put("d/table/x.parquet", b"")
    >>> f = WrittenFile("x", "table", "d/table/x.parquet", None)  # type: ignore[arg-type]
    >>> owning_files(st, [f], lambda: None)  # no state names it: deleted
    >>> st.exists("d/table/x.parquet")
    False
    """
    try:
        result = work()
    except CommitStateUnknownError:
        raise  # the version is (or may be) committed: its files must stay
    except BaseException as exc:
        if getattr(exc, COMMITTED_ATTRIBUTE, None) is None:
            delete_files(store, files)
        raise
    meta: DatasetMetadata | None = result
    if files and (meta is None or not meta.has_keys([f.key for f in files])):
        delete_files(store, files)
    return result


#: the attribute :func:`commit` sets on an exception raised once its version is, or may be,
#: committed (an interrupt, or an error that is no :class:`~kstore.errors.KstoreError`, during
#: or after the claim): :func:`owning_files` then keeps the files
COMMITTED_ATTRIBUTE = "kstore_may_be_committed"


def _mark_may_be_committed(exc: BaseException, version: int) -> None:
    """Mark ``exc``: the version it interrupted is, or may be, committed."""
    setattr(exc, COMMITTED_ATTRIBUTE, version)


def oldest_file_ms(keys: Sequence[str]) -> int | None:
    """Birth (epoch ms, from the kstore file id) of the oldest of ``keys``; keys without a
    kstore file id count as born at 0. None for no keys."""
    if not keys:
        return None
    born = [naming.file_id_ms(k) for k in keys]
    return min(0 if b is None else b for b in born)


def _merged_schema(base: DatasetMetadata | None, base_schema: pa.Schema | None, new: pa.Schema | None,
                   op: Operation, uuid: str, files: Sequence[WrittenFile]) -> pa.Schema | None:
    """The schema of the version ``op`` makes: its data's schema for a new or reset dataset,
    else the base schema merged with it (:func:`~kstore.core.types.merge_schemas`): partition
    and indexed columns keep their kind of type, and an ``int64`` column meets a ``double``
    only where the statistics of the ``int64`` side (the base's files, or ``files``) show
    every value exact in a ``double``."""
    if op.resets or base is None or (op.creates and not _overwrite_keeps_schema(op)):
        return new
    if new is None:
        return base_schema
    assert base_schema is not None
    if op.creates:  # a full overwrite (no file of the base stays): the new data must fit its schema
        check_partitioning(uuid, base.partition_keys, op.partition_on or ())
        merged = merge_schemas(base_schema, new, dataset=uuid, mode=op.schema_mode, exact_int64=new.names)
        return without_mapping(without_file_kinds(merged))  # every file is new
    fixed = {*op.partition_keys_on(base), *base.indices, *base.inline_indices, *op.index_columns}
    known = len(files) >= len(op.added) and all(f.stats is not None for f in files)
    new_stats = stats_table([f.label for f in files], [f.stats for f in files], new) if known else None
    exact = exact_int64_columns(base_schema, new, base.files.base if base.columnar else None, new_stats)
    merged = merge_schemas(base_schema, new, dataset=uuid, mode=op.schema_mode, fixed=fixed, exact_int64=exact)
    if merged.equals(base_schema, check_metadata=False):
        return base_schema
    merged = with_file_names(merged, base_schema)  # a column added under a used name: a fresh file name
    return with_pandas_metadata(merged, schema_pandas_metadata(base_schema) or schema_pandas_metadata(new))


def _overwrite_keeps_schema(op: Operation) -> bool:
    """A full overwrite whose data must fit the dataset's schema (``schema_mode`` other than
    ``"overwrite"``, Delta's rule)."""
    return isinstance(op, Overwrite) and op.schema_mode != "overwrite"


def _changes_kind(old: pa.Schema | None, new: pa.Schema | None) -> bool:
    """Whether a column of ``old`` has a type of another kind in ``new`` (a widening of
    ``schema_mode="merge"``: ``int32`` -> ``double``, ``date`` -> ``timestamp``, decimals)."""
    if old is None or new is None:
        return False
    for f in old:
        i = new.get_field_index(f.name)
        if i >= 0 and not f.type.equals(new.field(i).type):
            try:
                if not normalize_type(f.type).equals(normalize_type(new.field(i).type)):
                    return True
            except UnsupportedTypeError:
                return True
    return False


def commit(
    store: Store,
    dataset_uuid: str,
    op: Operation,
    *,
    files: Sequence[WrittenFile] = (),
    schema: pa.Schema | None = None,
    max_attempts: int = 50,
    on_claimed: Callable[[], Any] | None = None,
    known_base: Head | None = None,
) -> Committed:
    """Commit ``op`` as the next version of ``dataset_uuid``.

    ``files`` are the data files the operation adds (their statistics and index values
    feed the new version's statistics and indices); ``schema`` is the normalized schema of
    the new data. Re-submitting an already committed ``op.txn`` commits nothing and returns
    the committed state (idempotent writes). ``known_base`` is the head the caller loaded:
    if it is young and still the newest (one listing says so), it is used as it is.
    ``op.seen_version`` is the newest version the caller had loaded *before* it wrote
    ``files``: a garbage collection fenced at or below it listed its candidates before those
    files existed, so its orphan cutoff does not apply to them, whatever the clocks say
    (FORMAT.md C2; without it, every fence's cutoff is compared with the files' births).
    ``on_claimed`` runs right after the claim (tests use it to stop a writer there).
    Returns the :class:`Committed` log entry and metadata (``.dataset`` for the metadata of
    an operation that leaves a dataset).
    """
    naming.validate_name(dataset_uuid)
    if files and not op.added:
        op = replace(op, added=added_files(files))
    if not getattr(store, "atomic_create", True):
        warnings.warn(UnsafeStoreWarning(
            f"{store!r} cannot create keys atomically across processes: committing to dataset "
            f"{dataset_uuid!r} from more than one process at a time could claim one version twice; "
            "use a local directory, S3 or memory store for concurrent writers"), stacklevel=3)
    delay = 0.01
    rt = runtime.current()
    for attempt in range(max_attempts):
        head = _fresh_head(store, dataset_uuid, known_base if attempt == 0 else None)
        base = head.meta
        if op.done_before(base):
            log.info("dataset %r: this %s was committed before (%s); nothing to do", dataset_uuid, op.kind,
                     f"transaction {op.txn[0]!r} {op.txn[1]}" if op.txn is not None else "by a concurrent writer")
            return Committed(None, base, new=False)
        op.check(base, dataset_uuid=dataset_uuid)
        _check_orphan_cutoff(store, dataset_uuid, head, files, op.seen_version,
                             creates=op.creates or base is None)
        if isinstance(op, Restore):
            _check_restore_retained(store, dataset_uuid, head, op)
        written: list[str] = []
        try:
            staged = _stage(store, head, op, files, schema, written)
        except CorruptMetadataError:
            _cleanup(store, written)
            if _moved_on(store, head):
                continue  # a file of the base vanished: GC expired it after a newer commit
            raise
        except BaseException:
            _cleanup(store, written)
            raise
        if head.age() > BASE_MAX_AGE.total_seconds():
            _cleanup(store, written)
            log.debug("dataset %r: base listed %.1f s ago, listing again", dataset_uuid, head.age())
            continue  # too long since the listing: the number may be stale; list again
        try:
            claimed = _claim(store, naming.log_key(dataset_uuid, staged.entry.version), staged.entry_bytes,
                             staged.entry)
        except KstoreError:
            raise  # (the claim turns store errors into an answer or a CommitStateUnknownError)
        except BaseException as exc:  # an interrupt, a store adapter's own error: the entry may have landed
            _mark_may_be_committed(exc, staged.entry.version)
            raise
        if not claimed:
            log.debug("dataset %r: version %d was claimed by another writer (attempt %d); retrying",
                      dataset_uuid, staged.entry.version, attempt + 1)
            _cleanup(store, written)
            rt.sleep(delay * rt.random())  # full jitter
            delay = min(delay * 2, 0.25)
            continue
        later = _successors(store, dataset_uuid, staged.entry)
        if later and not _claim_stands(store, dataset_uuid, staged.entry, later):
            # our number had been used and its entry deleted before (a garbage collection
            # whose clock ran ahead, or this writer paused past BASE_MAX_AGE after its
            # check): the entry is no version of the dataset. Mark it expired and go again.
            log.warning("dataset %r: version %d had been committed and expired before this writer claimed "
                        "it again (a host clock off, or a long pause); committing again at the newest version",
                        dataset_uuid, staged.entry.version)
            _retract(store, dataset_uuid, staged.entry)
            _cleanup(store, written)
            continue
        try:
            if on_claimed is not None:
                on_claimed()
            _publish(store, staged, head, later)
            if staged.checkpoint and staged.meta is not None:
                write_checkpoint(store, staged.meta, column_indexes=staged.column_indexes, parts=staged.checkpoint_parts)
                write_summary(store, dataset_uuid, staged.entry.version, (*head.entries, staged.entry))
        except CommitStateUnknownError:
            raise
        except BaseException as exc:  # whatever fails after the claim, the version is committed
            _mark_may_be_committed(exc, staged.entry.version)
            raise
        log.info("dataset %r: committed version %d (%s: %d file(s) added, %d file(s) removed%s)",
                 dataset_uuid, staged.entry.version, op.kind, len(op.added), len(op.remove),
                 f", after {attempt + 1} attempts" if attempt else "")
        return Committed(staged.entry, staged.meta)
    raise CommitConflictError(
        f"dataset {dataset_uuid!r}: gave up after {max_attempts} attempts; other writers kept committing first"
    )


def _fresh_head(store: Store, dataset_uuid: str, known: Head | None) -> Head:
    """The caller's head when it is young and one listing shows nothing newer; else a reload."""
    if known is None or known.age() > BASE_MAX_AGE.total_seconds() / 2:
        return load.load_head(store, dataset_uuid)
    listed_at = runtime.current().monotonic()
    if load.log_versions(store, dataset_uuid, after=known.version):
        return load.load_head(store, dataset_uuid)
    return replace(known, loaded_at=listed_at)


def _head_commit_id(store: Store, head: Head) -> str | None:
    """``commit_id`` of the newest version's entry (recorded as the next entry's parent):
    from its state, else from the entries the head replayed, else one get (a fence, or a
    checkpoint written before kstore recorded it)."""
    if head.version is None or not head.has_log:
        return None
    if head.meta is not None and head.meta.commit_id is not None and head.meta.version == head.version:
        return head.meta.commit_id  # carried by the version's state (entry and checkpoint alike)
    for entry in head.entries:
        if entry.version == head.version:
            return entry.commit_id
    try:
        return load.load_entry(store, head.dataset_uuid, head.version).commit_id
    except (VersionNotFoundError, CorruptMetadataError, KeyNotFoundError):
        return None  # unknown: the next writer's check falls back to trusting its claim


def _claim_stands(store: Store, dataset_uuid: str, entry: LogEntry, later: Sequence[int]) -> bool:
    """After a claim: True unless the log proves that the claimed number had been used
    before (its first successor names another entry as its parent).

    Entries are deleted only while a newer one exists, so a number that was used and
    deleted always has a successor older than our claim; a successor written after our
    claim names our ``commit_id`` as its parent. A gap right after our entry (the successor
    itself deleted) cannot be told apart: the outcome is unknown, and nothing is deleted.
    """
    successor: LogEntry | None = None
    for _ in range(3):
        first = later[0]
        if first != entry.version + 1:
            break
        try:
            successor = load.load_entry(store, dataset_uuid, first)
            break
        except VersionNotFoundError:  # deleted since the listing: list again
            later = load.log_versions(store, dataset_uuid, after=entry.version)
            if not later:
                return True
        except (CorruptMetadataError, KstoreError):
            successor = None
            break
    if successor is not None and successor.parent == entry.version:
        if successor.parent_commit_id is None:
            return True  # written by a kstore that does not record it (or its parent was unknown)
        return successor.parent_commit_id == entry.commit_id
    raise CommitStateUnknownError(
        f"dataset {dataset_uuid!r}: version {entry.version} was claimed, but the entry after it "
        f"(version {later[0]}) cannot tell whether the claim built on a number used before; check "
        "history() or re-run the write with the same txn. Nothing of this write was deleted.",
        committed=None, version=entry.version,
    )


def _retract(store: Store, dataset_uuid: str, entry: LogEntry) -> None:
    """Turn a claim that proved void into a tombstone (best effort: GC finds it too)."""
    try:
        store.put(naming.log_key(dataset_uuid, entry.version),
                  serialize.dumps(entry.tombstone().to_dict(), "json"))
    except KstoreError:
        log.warning("dataset %r: could not mark the void entry of version %d expired; garbage "
                    "collection will", dataset_uuid, entry.version)


def _moved_on(store: Store, head: Head) -> bool:
    return bool(load.log_versions(store, head.dataset_uuid, after=head.version))


def _check_orphan_cutoff(store: Store, dataset_uuid: str, head: Head, files: Sequence[WrittenFile],
                         seen_version: int | None = None, *, creates: bool = False) -> None:
    """Refuse files a garbage collection may have deleted as orphans while this write ran.

    A fence the writer had seen before it wrote its files is no threat to them (that GC
    listed its candidates before the fence, so before the files existed): with
    ``seen_version``, only the fences committed after it count, read from the log. This
    needs no clock, so a GC host whose clock runs ahead (or a delete fence after a file
    born in the future) cannot block writers that start after it.

    The head's cutoff is the largest of the fences since the last ``delete``: every version
    carries it forward, a delete starts afresh. A write that ``creates`` the dataset can
    commit after a delete, so it reads every fence after ``seen_version`` (all of them when
    it saw no log): a delete whose host's clock runs behind must not hide the cutoff of a
    GC before it (seed 1400355 of the create-delete-mixed simulation).
    """
    oldest = oldest_file_ms([f.key for f in files])
    if oldest is None:
        return
    cutoff = head.orphan_cutoff_ms
    newer = head.version is not None and (seen_version is None or head.version > seen_version)
    if not (cutoff is not None and oldest < cutoff) and not (creates and newer):
        return
    if seen_version is not None or newer:
        since = _cutoff_since(store, dataset_uuid, seen_version, head)
        if since is not _UNKNOWN and (since is None or oldest >= since):
            return
        if since is not _UNKNOWN:
            cutoff = since
        elif cutoff is None or oldest >= cutoff:
            cutoff = None  # entries of the range are gone: which fences they were is unknown
    when = ("an unknown time (log entries after the version it read are gone)" if cutoff is None
            else datetime.fromtimestamp(cutoff / 1000, timezone.utc).isoformat())
    raise CommitConflictError(
        f"dataset {dataset_uuid!r}: a garbage collection committed as version {head.version} or before it "
        f"deleted unreferenced files written before {when}, and this write started before then (its "
        "retention was shorter than this write took); nothing was committed: run the write again"
    )


_UNKNOWN: Any = object()


def _cutoff_since(store: Store, dataset_uuid: str, seen_version: int | None, head: Head) -> Any:
    """The largest orphan cutoff of the fences committed after ``seen_version`` (all of
    them for None) up to the head (None: no fence), or ``_UNKNOWN`` when an entry of that
    range is gone or damaged."""
    fences = _fences_since(store, dataset_uuid, seen_version, head)
    if fences is _UNKNOWN:
        return _UNKNOWN
    cutoffs = [cutoff for _, cutoff in fences]
    return max(cutoffs) if cutoffs else None


def _fences_since(store: Store, dataset_uuid: str, seen_version: int | None, head: Head) -> Any:
    """``(operation, orphan cutoff)`` of each fence committed after ``seen_version`` up to
    the head, or ``_UNKNOWN`` when an entry of that range is gone or damaged."""
    first = 0 if seen_version is None else seen_version + 1
    if head.version is None or head.version < first:
        return []
    wanted = list(range(first, head.version + 1))
    if load.log_versions(store, dataset_uuid, after=seen_version)[: len(wanted)] != wanted:
        return _UNKNOWN  # entries of the range were deleted: their fences cannot be read

    def get(v: int) -> LogEntry | None:
        try:
            return load.load_entry(store, dataset_uuid, v)
        except (VersionNotFoundError, CorruptMetadataError):  # gone or damaged (a store error propagates)
            return None

    entries = runtime.parallel_map(get, wanted, max_workers=16)
    if any(e is None for e in entries):
        return _UNKNOWN
    return [(e.operation, e.orphan_cutoff_ms) for e in entries if e is not None and e.orphan_cutoff_ms is not None
            and e.operation in FENCE_OPERATIONS]


def _check_restore_retained(store: Store, dataset_uuid: str, head: Head, op: Restore) -> None:
    """Refuse to restore a version a garbage collection committed after it may expire.

    GC keeps a version whose log entry is no older than its cutoff (and the newest one
    before it); it decides after its fence and deletes the files no version it keeps
    references. So a GC whose fence is in the log after ``op.target`` and whose cutoff is
    younger than the target's commit may expire the target and delete its files while this
    restore commits (the versions GC reads may not include the restore yet); a
    ``delete_dataset`` after it deleted them. A GC committed after this restore's claim reads
    the restore, which references the files: no threat. Reads the log entries after the
    target (a restore is rare; this is its cost).
    """
    assert op.target is not None and op.target.version is not None
    fences = _fences_since(store, dataset_uuid, op.target.version, head)
    if fences == []:
        return
    deleted = fences is not _UNKNOWN and any(kind == "delete" for kind, _ in fences)
    since = None if fences is _UNKNOWN else max(cutoff for _, cutoff in fences)
    if not deleted and since is not None and op.target_committed_ms is not None and op.target_committed_ms > since:
        return
    if deleted:
        why = "the dataset was deleted after it (its files are gone)"
    elif since is None:
        why = "log entries after it are gone, so whether a garbage collection expires it is unknown"
    else:
        when = datetime.fromtimestamp(since / 1000, timezone.utc).isoformat()
        why = (f"a garbage collection committed after it expires versions committed before {when}, so its files "
               "may be deleted")
    raise VersionNotFoundError(
        f"dataset {dataset_uuid!r}: version {op.target.version} cannot be restored: {why}; restore a version inside "
        "the retention window (nothing was committed)"
    )


@dataclass(frozen=True, slots=True)
class _Staged:
    entry: LogEntry
    entry_bytes: bytes
    meta: DatasetMetadata | None
    main_bytes: bytes | None
    fmt: MetadataFormat
    common_bytes: bytes | None
    checkpoint: bool = False
    #: the inverted indices the kartothek view's index files were built from (the
    #: checkpoint's sorted index blocks reuse their grouping)
    column_indexes: Mapping[str, ColumnIndex] = field(default_factory=dict)
    #: the checkpoint's parts (:func:`checkpoint_parts` of ``meta``), when built while staging
    checkpoint_parts: tuple[bytes, bytes, str | None] | None = None


def _stage(store: Store, head: Head, op: Operation, files: Sequence[WrittenFile], schema: pa.Schema | None,
           written: list[str]) -> _Staged:
    """Everything up to the commit point: the new state (columnar), the kartothek view's
    index files, the log entry's bytes (format 2: what changed, naming the head's commit as
    its parent) and the main file's bytes."""
    dataset_uuid = head.dataset_uuid
    parent_commit_id = _head_commit_id(store, head)
    base = head.meta
    if base is not None and op.checks_incarnation and base.incarnation is None and not op.creates:
        # no incarnation to compare (a dataset created before kstore recorded one): the log
        # after the version the write read tells whether it was deleted or created again
        load.check_not_created_again(store, head, op.read_version)
    fmt: MetadataFormat = op.metadata_format or head.fmt or "json"
    now = runtime.current().now()
    # a base kstore has no log form for (a format-1 version, a kartothek dataset: statistics
    # and indices in files of their own) becomes columnar once; this commit then records
    # the whole state (reset) so replay starts here
    reset = base is None or op.creates or op.resets
    if base is not None and not base.columnar and not op.creates and not isinstance(op, Delete):
        base = load.to_columnar(store, base)
        reset = True
    new_schema = base_schema = None
    add_rows: pa.Table | None = None
    index_updates: dict[str, pa.Table] = {}
    built: dict[str, ColumnIndex] = {}
    add_text: str | None = None
    wanted: list[str] = []
    if not op.is_fence:
        keeps = base is not None and (not op.creates or _overwrite_keeps_schema(op))
        base_schema = load.load_schema(store, base) if keeps and base is not None else None
        new_schema = _merged_schema(base, base_schema, schema, op, dataset_uuid, files)
        if new_schema is None:
            raise InvalidArgumentError(f"dataset {dataset_uuid!r}: a new dataset needs data or a schema")
        if isinstance(op, ColumnChange):  # a rename or drop: the schema and the file table's columns
            assert base is not None
            new_schema, base = op.changed(base, new_schema, dataset_uuid=dataset_uuid)
            reset = True
        # every written file must hold its columns under the names the new version gives them
        check_written_names(new_schema, [(f.key, list(f.stats.columns), dict(f.renamed)) for f in files
                                         if f.stats is not None], dataset=dataset_uuid)
        if base is not None and not reset and _changes_kind(base_schema, new_schema):
            # a widened column: the statistics of every file take its new type, and this
            # commit records the whole state (replay never meets bounds of both types)
            base = base.with_files(base.files.with_bound_types(new_schema))
            reset = True
        wanted = _index_columns(base, op, new_schema, dataset_uuid)
        pkeys = op.partition_keys_on(base)
        # partition columns are not in the files (their statistics would be all null) and
        # are pruned by the labels: no statistics columns for them
        add_rows = _added_rows(op, files, pa.schema([f for f in new_schema if f.name not in pkeys]), wanted)
    new = op.apply(base, dataset_uuid=dataset_uuid, schema=new_schema if not op.is_fence else None,
                   now=now.replace(tzinfo=None).isoformat(), version=head.next_version, add_rows=add_rows)
    commit_id = runtime.current().token(16)
    if new is not None and not op.is_fence and (op.creates or head.meta is None):
        new = new.evolve(incarnation=commit_id)  # a new dataset: its incarnation is its creating entry's id
    if new is not None:
        cutoffs = [c for c in (head.orphan_cutoff_ms, new.orphan_cutoff_ms) if c is not None]
        new = new.evolve(orphan_cutoff_ms=max(cutoffs) if cutoffs else None, main_format=fmt,
                         commit_id=commit_id)  # the next entry names it as its parent
        if not op.is_fence:
            assert new_schema is not None
            new, index_updates = _fill_indices(store, new, op, wanted, new_schema)
            changed = bool(files) or bool(op.added) or bool(op.remove) or bool(index_updates) or reset
            filled = new
            keys, add_text = _both(
                lambda: _kartothek_indices(store, base, filled, wanted, new_schema, changed, written, built),
                lambda: ipc_text(add_rows) if add_rows is not None and add_rows.num_rows else None,
                parallel=add_rows is not None and add_rows.nbytes > PARALLEL_BYTES)
            new = new.evolve(indices=keys, inline_indices={}, stats_key=None)
    resets_all = reset and not op.creates and base is not None
    # a checkpoint certain to follow (the entry holds the added rows' text) is built beside
    # the entry's encoding, on the core the commit leaves idle (built again after the
    # claim if this fails: a checkpoint is best effort)
    early = new is not None and _wants_checkpoint(head, new, reset, len(add_text or ""))
    snapshot = new

    def entry_parts() -> tuple[dict[str, Any] | None, bytes | None]:
        if snapshot is None:
            return None, None
        if resets_all:
            encoded = encode_actions(snapshot, add=snapshot.files.table, reset=True)
        else:
            encoded = encode_actions(snapshot, add=add_rows, remove=() if reset else op.remove, reset=reset,
                                     index=index_updates, add_text=add_text)
        return encoded, main_file_bytes(snapshot, fmt)

    def early_checkpoint() -> tuple[bytes, bytes, str | None] | None:
        if not early or snapshot is None:
            return None
        try:
            return checkpoint_parts(snapshot, column_indexes=built)
        except KstoreError:
            return None

    (actions, main_bytes), checkpoint = _both(entry_parts, early_checkpoint, parallel=early)
    entry = LogEntry(
        version=head.next_version,
        commit_id=commit_id,
        operation=op.kind,
        timestamp=now,
        parent=head.version,
        added=tuple(sorted({f.label for f in op.added})),
        removed=tuple(sorted(op.remove)),
        rows_added=int(sum(f.stats.rows for f in files)),
        txn=op.txn,
        writer=f"kstore {__version__}",
        orphan_cutoff_ms=op.orphan_cutoff_ms if op.is_fence else None,
        info=dict(op.info or {}),
        actions=actions,
        n_partitions=len(new.partitions) if new is not None else None,
        parent_commit_id=parent_commit_id,
    )
    schema_changed = new is not None and new.schema is not None and (
        base_schema is None or not new.schema.equals(base_schema))
    entry_bytes = serialize.dumps(entry.to_dict(), "json")
    return _Staged(
        entry=entry,
        entry_bytes=entry_bytes,
        meta=new,
        main_bytes=main_bytes,
        fmt=fmt,
        common_bytes=common_metadata_bytes(new.schema) if (schema_changed and new is not None
                                                            and new.schema is not None) else None,
        # a head read around a damaged checkpoint: a fresh one spares later reads that
        checkpoint=new is not None and (_wants_checkpoint(head, new, reset, len(entry_bytes)) or bool(head.damaged)),
        column_indexes=built,
        checkpoint_parts=checkpoint,
    )


#: staging work on more bytes of added file-table rows than this runs in two threads
PARALLEL_BYTES = 1 << 20

A = TypeVar("A")
B = TypeVar("B")


def _both(first: Callable[[], A], second: Callable[[], B], *, parallel: bool) -> tuple[A, B]:
    """``(first(), second())``, on two threads where ``parallel`` (and the runtime allows
    two: a simulated one runs them in order)."""
    if not parallel:
        return first(), second()
    got: list[Any] = runtime.parallel_map(lambda f: f(), [first, second], cpu_bound=True)
    return got[0], got[1]


#: an entry larger than this (bytes) is followed by a checkpoint: replaying it would decode
#: all of it on every read (an overwrite or append carrying millions of index values),
#: while a checkpoint's ``idx:`` lists are decoded only for the column a predicate needs
LARGE_ENTRY_BYTES = 1 << 20


def _wants_checkpoint(head: Head, new: DatasetMetadata, reset: bool, entry_size: int = 0) -> bool:
    """Checkpoint every CHECKPOINT_INTERVAL versions, when the replay chain grew that long,
    after a large resetting entry, and after any entry over :data:`LARGE_ENTRY_BYTES` (so
    readers do not decode it again)."""
    v = new.version or 0
    return (v % CHECKPOINT_INTERVAL == 0 or head.chain + 1 >= CHECKPOINT_INTERVAL
            or (reset and len(new.partitions) > 1000) or entry_size > LARGE_ENTRY_BYTES)


def _index_columns(base: DatasetMetadata | None, op: Operation, schema: pa.Schema, uuid: str) -> list[str]:
    keep = [] if (base is None or op.creates or op.resets) else [*base.indices, *base.inline_indices]
    pkeys = op.partition_keys_on(base)
    wanted = [c for c in dict.fromkeys((*keep, *op.index_columns))
              if c not in op.drop_index_columns and c not in pkeys]
    for col in wanted:
        if col not in schema.names:
            raise InvalidArgumentError(f"dataset {uuid!r}: cannot index column {col!r}: no such column")
    return wanted


def _added_rows(op: Operation, files: Sequence[WrittenFile], schema: pa.Schema, wanted: Sequence[str]) -> pa.Table:
    """File-table rows of the files ``op`` adds: statistics and index values from the
    writers' reports; files added without a report get unknown ones (filled below)."""
    by_key = {f.key: f for f in files}
    added = list(op.added)
    reports = [_in_current_names(by_key.get(a.key), schema) for a in added]
    return file_rows(
        [a.label for a in added], [a.table for a in added], [a.key for a in added],
        [r.stats if r is not None else None for r in reports], schema,
        {col: [r.index_values.get(col) if r is not None else None for r in reports] for col in wanted},
    )


def _in_current_names(report: WrittenFile | None, schema: pa.Schema) -> WrittenFile | None:
    """A writer's report with its statistics and index values under the names ``schema``
    gives their columns (a compaction that read the dataset before a rename reports the
    old names; its files hold the values under the file names the new ones map to)."""
    if report is None:
        return None
    names = current_names(schema, report.stats.columns, dict(report.renamed))
    if not names:
        return report
    stats = replace(report.stats, columns={names.get(c, c): v for c, v in report.stats.columns.items()})
    return replace(report, stats=stats, index_values={names.get(c, c): v for c, v in report.index_values.items()})


def _fill_indices(store: Store, new: DatasetMetadata, op: Operation, wanted: Sequence[str], schema: pa.Schema,
                  ) -> tuple[DatasetMetadata, dict[str, pa.Table]]:
    """Index values of files whose ``idx:`` lists are unknown (a new index, files added
    without a writer's report): from the operation's prebuilt index, else read from the files."""
    prebuilt = op.prebuilt_indices or {}
    files = new.files
    updates: dict[str, pa.Table] = {}
    for col in wanted:
        vtype = index_storage_type(schema.field(col).type)
        if IDX + col not in files.table.column_names:
            files = files.with_index(col, pa.nulls(len(files), pa.list_(vtype)))
        unread = files.unindexed_labels(col)
        if not unread:
            continue
        filled = list(unread)
        if col in prebuilt:
            idx, covered = prebuilt[col]
            have = [lab for lab in unread if lab in covered]
            if have:
                files = files.merge_index(idx, have)
            unread = [lab for lab in unread if lab not in covered]
        if unread:
            if len(unread) > 1000 and op.limits_index_reads and col not in prebuilt and col in op.index_columns:
                raise InvalidArgumentError(
                    f"dataset {new.uuid!r} has no index on {col!r} yet; build it first with "
                    f"build_indices(store, {new.uuid!r}, [{col!r}])")
            files = files.merge_index(index_from_store(store, new, unread, col, vtype,
                                                       stored_as=file_name(schema.field(col))), unread)
        rows = files.table.take(files.first_rows())
        mask = pc.is_in(rows.column("label"), value_set=pa.array(filled, pa.string()))
        part = rows.filter(mask).select(["label", IDX + col])
        if part.num_rows:
            updates[col] = part
    return new.with_files(files), updates


def _kartothek_indices(store: Store, base: DatasetMetadata | None, new: DatasetMetadata, wanted: Sequence[str],
                       schema: pa.Schema, changed: bool, written: list[str],
                       built: dict[str, ColumnIndex]) -> dict[str, str]:
    """The kartothek view's index files (value -> labels, what kartothek/plateau read):
    rewritten from the file table's ``idx:`` lists when the version changed them (the
    indices they were built from go into ``built``)."""
    files = new.files
    keys: dict[str, str] = {}
    fresh = []
    for col in wanted:
        if not changed and base is not None and col in base.indices:
            keys[col] = base.indices[col]
        else:
            fresh.append(col)

    def build(col: str) -> str:  # one column each, in parallel (Arrow's kernels release the GIL)
        idx = files.column_index(col, index_storage_type(schema.field(col).type))
        key = write_index_file(store, new.uuid, idx)
        with lock:
            written.append(key)
            built[col] = idx
        return key

    lock = threading.Lock()
    keys.update(zip(fresh, runtime.parallel_map(build, fresh, cpu_bound=True)))
    return {col: keys[col] for col in wanted}


def _claim(store: Store, key: str, data: bytes, entry: LogEntry) -> bool:
    """Claim ``key``; True when this commit owns it. Raises CommitStateUnknownError when
    the outcome stays unknown for :data:`CLAIM_RESOLVE_SECONDS` (nothing is deleted then).

    Only a readable entry decides: its ``commit_id`` says whose it is. "Exists" or
    "conflict" with nothing readable yet is no answer: a conditional put of the key is
    still in flight (S3 answers others ``409`` meanwhile), and it may be this writer's own
    first attempt, which a retry of the client library took for lost. Moving on to
    another number then could commit the write twice, or report a committed write as
    lost; so the same put (same bytes, same ``commit_id``) is sent again until the key is
    readable or this writer creates it.
    """
    rt = runtime.current()
    try:
        ok: bool | None = store.put_if_absent(key, data)
    except KstoreError:
        ok = None  # the store failed: the put may or may not have happened
    if ok and getattr(store, "atomic_create", True):
        return True
    deadline = rt.monotonic() + CLAIM_RESOLVE_SECONDS
    delay = 0.05
    last: BaseException | None = None
    while True:
        try:
            owner = _owner(store, key)
        except KeyNotFoundError:
            pass  # nothing readable: not created yet, or a create still in flight
        except KstoreError as exc:
            last = exc
        else:
            return owner == entry.commit_id
        if rt.monotonic() >= deadline:
            break
        if ok is not None:  # the store answered "exists"/"conflict" (or created it): let it settle
            rt.sleep(delay * (0.5 + rt.random() / 2))
            delay = min(delay * 2, 2.0)
        try:  # idempotent: same key, same bytes, same commit_id
            ok = store.put_if_absent(key, data)
        except KstoreError as exc:
            last, ok = exc, None
            rt.sleep(delay * (0.5 + rt.random() / 2))
            delay = min(delay * 2, 2.0)
            continue
        if ok and getattr(store, "atomic_create", True):
            return True
    raise CommitStateUnknownError(
        f"dataset {key.split('/', 1)[0]!r}: the store did not settle whether version {entry.version} was "
        f"claimed within {CLAIM_RESOLVE_SECONDS:.0f} s ({last or 'a conditional put of it stayed in flight'}); "
        "the version may be committed: check history() or re-run the write with the same txn. "
        "Nothing of this write was deleted.",
        committed=None, version=entry.version,
    ) from last


def _owner(store: Store, key: str) -> str | None:
    raw = serialize.loads(store.get(key), "json", what=f"log entry {key!r}")
    return raw.get("commit_id") if isinstance(raw, dict) else None


def _successors(store: Store, dataset_uuid: str, entry: LogEntry) -> list[int]:
    """The log versions after a claimed entry (the claim's check reads the first); the store
    failing throughout leaves the claim's standing unknown."""
    last: BaseException | None = None
    for attempt in range(_PUBLISH_ATTEMPTS):
        try:
            return load.log_versions(store, dataset_uuid, after=entry.version)
        except KstoreError as exc:
            last = exc
            runtime.current().sleep(0.05 * 2**attempt)
    raise CommitStateUnknownError(
        f"dataset {dataset_uuid!r}: version {entry.version} was claimed, but listing the log after it failed "
        f"({last}); check history() or re-run the write with the same txn. Nothing of this write was deleted.",
        committed=None, version=entry.version,
    ) from last


def _publish(store: Store, staged: _Staged, head: Head, later: list[int]) -> None:
    """Make the main file show the newest version (ours, or a newer one: ``later`` lists the
    versions committed after ours, which are published instead). Never deletes data."""
    uuid = head.dataset_uuid
    last: BaseException | None = None
    for attempt in range(_PUBLISH_ATTEMPTS):
        try:
            if later:  # ours is not the newest any more: publish the newest, never ours
                republish_newest(store, uuid, staged.entry.version, staged.fmt, listed=later)
                return
            if staged.common_bytes is not None and staged.meta is not None:
                store.put(naming.common_metadata_key(uuid, staged.meta.table), staged.common_bytes)
            _put_main(store, uuid, staged.main_bytes, staged.fmt, head.fmt)
            republish_newest(store, uuid, staged.entry.version, staged.fmt)
            return
        except KstoreError as exc:
            last = exc
            runtime.current().sleep(0.05 * 2**attempt)
    raise CommitStateUnknownError(
        f"dataset {uuid!r}: version {staged.entry.version} is committed, but publishing the main "
        f"metadata file failed ({last}); kstore readers see the version already, and the next commit "
        "(or garbage_collect) repairs the main file for kartothek readers. Nothing was deleted.",
        committed=True, version=staged.entry.version,
    ) from last


def _put_main(store: Store, uuid: str, main_bytes: bytes | None, fmt: MetadataFormat,
              old_fmt: MetadataFormat | None) -> None:
    if main_bytes is None:  # no dataset in this version (deleted, or a fence of a failed create)
        for f in naming.METADATA_FORMATS:
            store.delete(naming.metadata_key(uuid, f))
        return
    store.put(naming.metadata_key(uuid, fmt), main_bytes)
    if old_fmt is not None and old_fmt != fmt:
        store.delete(naming.metadata_key(uuid, old_fmt))


def republish_newest(store: Store, uuid: str, published: int | None, fmt: MetadataFormat,
                     listed: list[int] | None = None) -> int | None:
    """After publishing version ``published``: if newer versions were committed meanwhile,
    publish the newest, and repeat until none is newer. Returns the version published last.

    A version committed after the last listing is published by its own writer after our
    write, so the main file ends at the newest version (it may show an older one for a
    moment: kstore readers list the log, kartothek readers see a consistent older version).
    """
    latest = published
    for _ in range(1000):
        newer = listed if listed is not None else load.log_versions(store, uuid, after=latest)
        listed = None
        if not newer:
            return latest
        try:
            entry = load.load_entry(store, uuid, newer[-1])
        except VersionNotFoundError:
            continue  # expired between listing and get: a newer one exists
        latest = entry.version
        if not entry.has_dataset:
            if entry.expired:
                continue
            _put_main(store, uuid, None, fmt, None)
            continue
        try:
            meta = load.load_version(store, uuid, entry.version)
        except VersionNotFoundError:
            continue
        if meta.schema is not None:
            store.put(naming.common_metadata_key(uuid, meta.table), common_metadata_bytes(meta.schema))
        other = [f for f in naming.METADATA_FORMATS if f != fmt]
        _put_main(store, uuid, main_file_bytes(meta, fmt), fmt, other[0])
    raise CorruptMetadataError(f"dataset {uuid!r}: the log kept growing while the main file was published")


def write_checkpoint(store: Store, meta: DatasetMetadata, *, best_effort: bool = True,
                     replace: bool = False, column_indexes: Mapping[str, ColumnIndex] | None = None,
                     parts: tuple[bytes, bytes, str | None] | None = None) -> bool:
    """Write the checkpoint of ``meta``'s version and point ``_last_checkpoint`` at it.

    Checkpoints are deterministic, so two writers (or a writer and GC) writing the same one
    agree. A committing writer's checkpoint is best effort (a failure costs readers replay,
    never a version); garbage collection's is not (``best_effort=False``: it raises).

    An existing checkpoint is never overwritten unless ``replace`` (GC repairing one that
    does not read back): once GC has verified it and deleted the entries below, it is the
    only source of its version, and a late writer's second copy (which a store could
    damage) must not replace it. ``column_indexes``: the commit's inverted indices of
    ``meta``'s files (the sorted index blocks reuse their grouping instead of sorting the
    values again). ``parts``: :func:`checkpoint_parts` of ``meta``, when the caller built them.
    """
    assert meta.version is not None
    key = naming.checkpoint_key(meta.uuid, meta.version)
    try:
        data, blocks, digest = parts if parts is not None else checkpoint_parts(meta, column_indexes=column_indexes)
        if digest is not None:  # before the checkpoint that names it (content-addressed: rewrites agree)
            store.put(naming.sorted_index_key(meta.uuid, meta.version, digest), blocks)
        if replace:
            store.put(key, data)
        else:
            store.put_if_absent(key, data)
        store.put(naming.last_checkpoint_key(meta.uuid), serialize.dumps({"version": meta.version}, "json"))
    except KstoreError:
        if not best_effort:
            raise
        return False
    return True


def _cleanup(store: Store, keys: Sequence[str]) -> None:
    for key in keys:
        try:
            store.delete(key)
        except Exception:  # best effort; GC removes what is left
            pass
