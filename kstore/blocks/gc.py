"""Garbage collection with retention (FORMAT.md, "Garbage collection"), and dataset deletion.

What GC may delete, and why it is safe beside any writer (FORMAT.md says it in full):

- **Versions it expires**: every version older than the retention window except the
  newest, the newest one committed before the window starts (it was current at the
  window's start, so time travel to any instant inside the window works) and the one the
  main file shows. An expired version's log entry is deleted once it is older than
  :data:`~kstore.core.log.LOG_MIN_AGE`, and replaced by a tombstone before that, so its
  number is never claimed again.
- **Files**: a key under ``<uuid>/`` that no retained version references and whose file id
  says it was written before the cutoff (``now - retention``). Before deleting any file, GC
  commits a ``vacuum`` version that records the cutoff (the *fence*). The fence orders GC
  against every writer through the one atomic claim: a writer that committed before the
  fence is in the log GC reads after it, so its files are referenced; a writer that commits
  after it sees the cutoff and refuses files written before it (they may be gone).
  Log entries and ``_common_metadata`` are never deleted as files.

The order makes a GC that dies half-way harmless: the fence first, then expired log
entries, then files (a file left behind is garbage for the next run; a listed version
never loses its files).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from kstore.blocks import load
from kstore.blocks.commit import commit, republish_newest, write_checkpoint
from kstore.core import naming, runtime, serialize
from kstore.core.log import FENCE_OPERATIONS, LOG_MIN_AGE, LogEntry, names_another_parent, successor_gone
from kstore.core.metadata import DatasetMetadata
from kstore.core.naming import MetadataFormat
from kstore.core.operations import Delete, Vacuum
from kstore.errors import (
    CorruptMetadataError,
    DatasetNotFoundError,
    KeyNotFoundError,
    StoreError,
    VersionNotFoundError,
)
from kstore.io.store import Store, delete_many

log = logging.getLogger("kstore.gc")

__all__ = ["GCResult", "collect_garbage", "delete_all", "DEFAULT_RETENTION", "MIN_RETENTION", "DEFAULT_LOG_RETENTION",
           "born_ms"]

#: Default retention of ``garbage_collect``.
DEFAULT_RETENTION: timedelta = timedelta(days=7)
#: A shorter retention needs ``enforce_retention_duration=False``: it can fail writes that
#: run longer than it (their files are refused at commit, never lost) and reads of versions
#: it expires. The same threshold and the same override as Delta Lake's VACUUM.
MIN_RETENTION: timedelta = timedelta(days=7)
#: How long the log entry of an expired version stays (as a tombstone: its operation,
#: timestamp, counts and info, no state), so ``history()`` lists it: Delta's
#: ``delta.logRetentionDuration``, 30 days, independent of the data retention. Never less
#: than :data:`~kstore.core.log.LOG_MIN_AGE`.
DEFAULT_LOG_RETENTION: timedelta = timedelta(days=30)


@dataclass(frozen=True, slots=True)
class GCResult:
    """What a GC run deleted (or would delete, with ``dry_run``;
    :func:`kstore.garbage_collect` returns it).

    Attributes
    ----------
    deleted_files : tuple[str, ...]
        Keys of the files deleted (with ``dry_run``: that would be deleted).
    expired_versions : tuple[int, ...]
        Versions this run expired (with ``dry_run``: would expire); they can no longer be
        read.
    retained_versions : tuple[int, ...]
        Versions still readable after the run.
    dry_run : bool
        True when nothing was changed.
    fence_version : int or None
        The ``vacuum`` version committed before files were deleted (None when no file was
        deleted).

    Examples
    --------
    >>> import pandas as pd, kstore
    >>> from datetime import timedelta
    >>> from kstore.io import MemoryStore
    >>> store = MemoryStore()
    >>> _ = kstore.store_dataset(store, "d", pd.DataFrame({"p": [1], "x": [1]}), partition_on="p")
    >>> _ = kstore.update_dataset(store, "d", pd.DataFrame({"p": [1], "x": [2]}), mode="overwrite_partitions")
    >>> r = kstore.garbage_collect(store, "d", retention=timedelta(0), dry_run=True,
    ...                            enforce_retention_duration=False)
    >>> len(r.deleted_files), r.expired_versions, r.retained_versions, r.dry_run, r.fence_version
    (1, (0,), (1,), True, None)
    """

    deleted_files: tuple[str, ...]
    expired_versions: tuple[int, ...]
    retained_versions: tuple[int, ...]
    dry_run: bool
    fence_version: int | None = None


def born_ms(key: str) -> int:
    """When a file was written (epoch ms): from its kstore file id or an index file's
    timestamp; 0 (long ago) for keys that carry no time, such as kartothek's uuid ids."""
    ms = naming.file_id_ms(key)
    if ms is not None:
        return ms
    if key.endswith(naming.INDEX_SUFFIX):  # <uuid>/indices/<col>/<quoted iso timestamp>.by-dataset-index.parquet
        try:
            ts = datetime.fromisoformat(naming.unquote(key.rsplit("/", 1)[-1][: -len(naming.INDEX_SUFFIX)]))
        except (ValueError, CorruptMetadataError):
            return 0
        ts = ts if ts.tzinfo else ts.replace(tzinfo=timezone.utc)
        return int(ts.timestamp() * 1000)
    return 0


def _ms(t: datetime) -> int:
    return int(t.timestamp() * 1000)


def _is_file(uuid: str, key: str) -> bool:
    """Keys GC may delete as files: not log entries, not ``_common_metadata``."""
    return (not key.startswith(naming.log_prefix(uuid))
            and not key.endswith("/" + naming.COMMON_METADATA))


@dataclass(frozen=True, slots=True)
class _LogState:
    retained: tuple[int, ...]
    expired: tuple[LogEntry, ...]  # entries to replace by tombstones now
    drop: tuple[int, ...]          # entries (expired earlier or now) old enough to delete
    references: frozenset[str]
    starts: tuple[DatasetMetadata, ...] = ()  # first version of each run of retained versions
    main_version: int | None = None
    listing: load.LogListing = load.LogListing((), ())  # entries, checkpoints, summaries, markers
    damaged: frozenset[int] = frozenset()  # damaged checkpoints the log was read around

    @property
    def expired_versions(self) -> tuple[int, ...]:
        return tuple(sorted([e.version for e in self.expired] + list(self.drop)))


def _read_log(store: Store, uuid: str, now: datetime, cutoff: datetime,
              log_retention: timedelta = DEFAULT_LOG_RETENTION) -> _LogState:
    """Decide which versions stay (one listing + one get per entry) and what they reference."""
    listing = load.list_log(store, uuid)
    versions = list(listing.versions)
    entries: dict[int, LogEntry | None] = {}
    for v in versions:
        try:
            entries[v] = load.load_entry(store, uuid, v)
        except VersionNotFoundError:
            continue  # deleted by a concurrent GC
        except CorruptMetadataError:
            entries[v] = None  # damaged: decided below by its neighbours
    main, _ = _main_or_none(store, uuid)
    if not entries and main is None:
        return _LogState((), (), (), frozenset(), (), None, listing)
    present = sorted(entries)
    newest = present[-1] if present else None

    def stamp(v: int) -> datetime | None:
        e = entries[v]
        if e is not None:
            return e.timestamp
        later = [entries[w].timestamp for w in present if w > v and entries[w] is not None]  # type: ignore[union-attr]
        return min(later) if later else None  # a damaged entry is no younger than its successor

    linked, orphaned = _void_claims(entries, listing.checkpoints)
    void = linked | {v for v in orphaned if not _readable(store, uuid, v)}  # never retained, whatever their stamps say
    # a deletion (or GC's fence on a dataset that did not exist) ends the versions before it:
    # none of them is retained, whatever its stamp (delete_dataset removed their files)
    floor = max((v for v, e in entries.items() if e is not None and not e.expired and not e.has_dataset
                 and e.operation in FENCE_OPERATIONS), default=-1)
    before = [v for v in present if v not in void and v >= floor and (stamp(v) or now) < cutoff]
    boundary = max(before) if before else None
    main_version = main.version if main is not None else None
    retained, expired, drop = [], [], []
    log_cutoff = now - max(LOG_MIN_AGE, log_retention)  # tombstones stay for history() until then
    for v in present:
        e = entries[v]
        keep = v not in void and v >= floor and (v == newest or v == boundary or v == main_version
                                                 or (stamp(v) or now) >= cutoff)
        if keep and e is None:
            raise CorruptMetadataError(
                f"dataset {uuid!r}: the log entry of version {v} is damaged and the version is retained; "
                "garbage collection deleted nothing (it cannot tell which files that version uses)"
            )
        if keep and not (e is not None and e.expired):
            retained.append(v)
            continue
        old = (stamp(v) or now) < log_cutoff
        if old:
            drop.append(v)
        elif e is not None and not e.expired:
            expired.append(e)
    refs: set[str] = set()
    starts: list[DatasetMetadata] = []
    damaged: set[int] = set()  # checkpoints read around: rewritten before entries go
    for v in retained:
        e = entries[v]
        if e is None or not e.has_dataset:
            continue
        if e.metadata is not None:
            refs |= load.entry_metadata(store, uuid, e).referenced_keys()
        elif (v - 1) in retained and entries.get(v - 1) is not None and not e.is_base:
            refs |= _added_keys(uuid, e)  # what the version before it referenced, plus its adds
        else:  # the first of a run of retained versions: its whole state
            got = load.resolve_version(store, uuid, v, lazy=False)  # (damage anywhere in a checkpoint it keeps)
            assert got.meta is not None
            refs |= got.meta.referenced_keys()
            starts.append(got.meta)
            damaged |= set(got.damaged)
    if main is not None:
        refs |= main.referenced_keys()  # kartothek readers read it, even when it lags
    return _LogState(tuple(retained), tuple(expired), tuple(drop), frozenset(refs), tuple(starts),
                     main_version, listing, frozenset(damaged))


def _readable(store: Store, uuid: str, version: int) -> bool:
    """Whether a read can rebuild ``version`` now (from a fresh listing: a concurrent GC
    writes a checkpoint before it deletes the entries below it)."""
    try:
        load.resolve_version(store, uuid, version)
    except (CorruptMetadataError, VersionNotFoundError):
        return False
    return True


def _void_claims(entries: dict[int, LogEntry | None], checkpoints: tuple[int, ...]) -> tuple[set[int], set[int]]:
    """Entries that are no version of the dataset: claims of a number that had been used and
    deleted before (the entry after them names another parent; FORMAT.md C). Their writer
    retracts them; one that died first leaves them for GC to expire. Also entries that no
    read can rebuild (not a base, their parent entry gone and no checkpoint of their own,
    not the newest): a void claim whose successor was deleted as well, which its writer
    could not tell (it raised CommitStateUnknownError); expiring them changes no answer.
    And entries whose successor's entry is gone (:func:`~kstore.core.log.successor_gone`).
    Returns (linked, orphaned): the second still to be confirmed by a read attempt."""
    void: set[int] = set()
    orphaned: set[int] = set()
    newest = max(entries, default=None)
    for v, e in entries.items():
        if e is None or e.expired:
            continue
        if names_another_parent(e, entries.get(v + 1)):
            void.add(v)
        elif (v != newest and v > 0 and e.has_dataset and not e.is_base and (v - 1) not in entries
              and v not in checkpoints):
            orphaned.add(v)
        elif e.has_dataset and newest is not None and successor_gone(v, entries, newest):
            orphaned.add(v)  # expired by a GC before, or a claim of an expired number
    return void, orphaned


def _added_keys(uuid: str, entry: LogEntry) -> set[str]:
    """Keys a format-2 entry adds: its data files and the index/statistics files it names."""
    from kstore.core.state import decode_actions

    act = decode_actions(entry.actions, dataset_uuid=uuid, where=f"dataset {uuid!r}: log entry of version "
                                                                   f"{entry.version}")
    keys = set(act.add.table.column("key").to_pylist()) if act.add is not None else set()
    indices = act.state.get("indices") or {}
    keys |= {k for k in indices.values() if isinstance(k, str)}
    stats = (act.state.get("kstore") or {}).get("stats")
    if isinstance(stats, str):
        keys.add(stats)
    return keys


def _main_or_none(store: Store, uuid: str) -> tuple[DatasetMetadata | None, MetadataFormat | None]:
    try:
        return load.load_main(store, uuid)
    except CorruptMetadataError:
        return None, None


def collect_garbage(
    store: Store,
    dataset_uuid: str,
    *,
    retention: timedelta = DEFAULT_RETENTION,
    dry_run: bool = False,
    log_retention: timedelta = DEFAULT_LOG_RETENTION,
) -> GCResult:
    """Expire versions older than ``retention`` and delete files nothing retained references;
    delete the tombstones of expired versions older than ``log_retention``.

    Works on a dataset with no committed version too (the orphans of a failed create):
    its files are deleted after the retention, and the fence stays as the log's one entry.
    """
    naming.validate_name(dataset_uuid)
    now = runtime.current().now()
    cutoff = now - retention
    cutoff_ms = _ms(cutoff)
    prefix = naming.dataset_prefix(dataset_uuid)
    keys = sorted(store.iter_prefix(prefix))
    head = load.load_head(store, dataset_uuid)
    if head.meta is None and head.version is None and not keys:
        raise DatasetNotFoundError(f"dataset {dataset_uuid!r} does not exist")
    # 1. candidates: files written before the cutoff (listed before the fence: a file
    #    written after this listing is no candidate, whatever its writer does)
    candidates = [k for k in keys if _is_file(dataset_uuid, k) and born_ms(k) < cutoff_ms]
    state = _read_log(store, dataset_uuid, now, cutoff, log_retention)
    if not dry_run and head.has_log and state.main_version != head.version:
        # repair the main file a writer that died between its claim and its publish left
        # behind (or a delete_dataset that died before removing it) before its references
        # count: what only a stale main file references is garbage of this run, not the next
        republish_newest(store, dataset_uuid, state.main_version, head.fmt or "json")
        state = _read_log(store, dataset_uuid, now, cutoff, log_retention)
    garbage = [k for k in candidates if k not in state.references]
    fence = None
    if garbage and not dry_run:
        # 2. the fence; 3. what is retained now (every claim before the fence is in the log)
        done = commit(store, dataset_uuid, Vacuum(orphan_cutoff_ms=cutoff_ms, read_version=head.version))
        fence = done.entry.version if done.entry is not None else None
        state = _read_log(store, dataset_uuid, now, cutoff, log_retention)
        garbage = [k for k in candidates if k not in state.references]
    if not dry_run:
        _expire(store, dataset_uuid, state)
        delete_many(store, garbage)  # S3: one DeleteObjects per 1,000 keys
        remove_temporary = getattr(store, "remove_temporary", None)
        if remove_temporary is not None:  # temporary files of puts a crash interrupted (local stores)
            remove_temporary(dataset_uuid, cutoff.timestamp())
    log.info("dataset %r: garbage collection%s (retention %s): %d file(s) %sdeleted, %d version(s) expired, "
             "%d retained", dataset_uuid, " dry run" if dry_run else "", retention, len(garbage),
             "to be " if dry_run else "", len(state.expired_versions), len(state.retained))
    return GCResult(tuple(garbage), state.expired_versions, state.retained, dry_run, fence)


def _expire(store: Store, uuid: str, state: _LogState) -> None:
    """Tombstone young expired entries, delete old ones (never a retained one).

    Any failure propagates: GC deletes no file unless every version that used it has
    stopped being listed as retained.

    Format 2: every retained version must stay replayable after its older entries are
    gone, so the first version of each run of retained versions gets a checkpoint first
    (deterministic content: a concurrent writer or GC writing the same one agrees);
    checkpoints of versions no longer retained are deleted last.

    History summaries (FORMAT.md E.5) may still show an expired version as a version of the
    dataset, so its ``.expired`` marker is written before its tombstone (one listing then
    tells ``history()``); a marker goes after its entry, or when its version is retained
    after all (a GC that died between the marker and the tombstone). Summaries older than
    the newest are deleted.
    """
    if state.expired or state.drop:
        for meta in state.starts:
            assert meta.version is not None
            if meta.version not in state.listing.checkpoints or meta.version in state.damaged:
                _write_verified_checkpoint(store, meta)  # (a damaged one is replaced)
    marked = set(state.listing.expired)
    for entry in state.expired:
        if entry.version not in marked:
            store.put(naming.expired_key(uuid, entry.version), b"")
        store.put(naming.log_key(uuid, entry.version), serialize.dumps(entry.tombstone().to_dict(), "json"))
    delete_many(store, [naming.log_key(uuid, v) for v in state.drop])
    retained = set(state.retained)
    oldest = min(retained, default=None)
    expired_now = {e.version for e in state.expired}
    listed = set(state.listing.versions)
    delete_many(store, [naming.checkpoint_key(uuid, c) for c in state.listing.checkpoints
                        if c not in retained and oldest is not None and c < oldest]
                + [naming.summary_key(uuid, s) for s in state.listing.summaries[:-1]]
                + [naming.expired_key(uuid, v) for v in sorted(marked) if v not in expired_now
                   and (v in retained or v in state.drop or v not in listed)]
                + [key for c, key in state.listing.sorted_indices  # (after the checkpoints naming them)
                   if c not in retained and oldest is not None and c < oldest])


def _write_verified_checkpoint(store: Store, meta: DatasetMetadata) -> None:
    """Write the checkpoint a retained version will be replayed from once the entries below
    it are gone, and read it back: a checkpoint that does not decode (a store that damaged
    it) is written again (replacing it), and GC stops with a StoreError (deleting nothing)
    if it still does not."""
    assert meta.version is not None
    for attempt in range(5):
        write_checkpoint(store, meta, best_effort=False, replace=attempt > 0)
        try:
            load.load_checkpoint(store, meta.uuid, meta.version, lazy=False)  # every byte decodes
            return
        except (CorruptMetadataError, KeyNotFoundError):
            log.warning("dataset %r: the checkpoint of version %d GC wrote does not read back; writing it again",
                        meta.uuid, meta.version)
    raise StoreError(
        f"dataset {meta.uuid!r}: the store does not return the checkpoint of version {meta.version} as it was "
        "written; garbage collection stopped before expiring any version (nothing was deleted)")


def delete_all(store: Store, dataset_uuid: str) -> int:
    """Delete the dataset: every data, index and statistics file, the main file and
    ``_common_metadata``; returns how many keys were deleted.

    A ``delete`` version is committed first (the fence): a writer still running against the
    dataset fails cleanly instead of bringing it back half. That one log entry stays
    (with tombstones of versions younger than :data:`~kstore.core.log.LOG_MIN_AGE`), so
    the numbering continues if the dataset is created again.
    """
    naming.validate_name(dataset_uuid)
    prefix = naming.dataset_prefix(dataset_uuid)
    keys = sorted(store.iter_prefix(prefix))
    head = load.load_head(store, dataset_uuid)
    files = [k for k in keys if _is_file(dataset_uuid, k)]
    if head.meta is None and not files and not _has_main(store, dataset_uuid):
        raise DatasetNotFoundError(f"dataset {dataset_uuid!r} does not exist")
    now_ms = _ms(runtime.current().now())
    cutoff_ms = max([now_ms] + [born_ms(k) for k in keys]) + 1
    done = commit(store, dataset_uuid, Delete(orphan_cutoff_ms=cutoff_ms, read_version=head.version))
    fence = done.entry.version if done.entry is not None else -1
    # the versions before the fence stop being listed first, then their files go
    horizon = runtime.current().now() - LOG_MIN_AGE
    old_entries: list[str] = []
    for v in [v for v in load.log_versions(store, dataset_uuid) if v < fence]:
        try:
            entry = load.load_entry(store, dataset_uuid, v)
        except VersionNotFoundError:
            continue
        except CorruptMetadataError:
            entry = None
        if entry is None or entry.timestamp < horizon:
            old_entries.append(naming.log_key(dataset_uuid, v))
        elif not entry.expired:
            store.put(naming.log_key(dataset_uuid, v), serialize.dumps(entry.tombstone().to_dict(), "json"))
    delete_many(store, old_entries)
    listing = load.list_log(store, dataset_uuid)
    bases = [naming.checkpoint_key(dataset_uuid, c) for c in listing.checkpoints if c < fence]
    bases += [naming.summary_key(dataset_uuid, s) for s in listing.summaries if s < fence]
    bases += [key for c, key in listing.sorted_indices if c < fence]
    bases += [naming.expired_key(dataset_uuid, v) for v in listing.expired if v not in listing.versions]
    bases += [k for k in (naming.last_checkpoint_key(dataset_uuid),) if k in keys]
    doomed = [k for k in keys if _is_file(dataset_uuid, k) or k.endswith("/" + naming.COMMON_METADATA)] + bases
    delete_many(store, doomed)  # S3: one DeleteObjects per 1,000 keys
    n = len(old_entries) + len(doomed)
    remove_temporary = getattr(store, "remove_temporary", None)
    if remove_temporary is not None:
        remove_temporary(dataset_uuid, float("inf"))
    return n + 1


def _has_main(store: Store, uuid: str) -> bool:
    return any(store.exists(naming.metadata_key(uuid, f)) for f in naming.METADATA_FORMATS)
