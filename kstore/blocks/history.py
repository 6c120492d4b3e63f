"""Version history: list versions, resolve ``as_of`` timestamps, diff versions, write the
history summaries that make both cost a constant number of store calls (FORMAT.md E.5)."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from kstore.blocks import load
from kstore.core import naming
from kstore.core.arguments import renamed
from kstore.core.log import LogEntry, names_another_parent, successor_gone
from kstore.core.runtime import parallel_map
from kstore.core.summary import Record, Summary, decode_summary, encode_summary, record_of
from kstore.errors import (
    CorruptMetadataError,
    DatasetNotFoundError,
    InvalidArgumentError,
    KeyNotFoundError,
    KstoreError,
    LimitExceededError,
    VersionNotFoundError,
)
from kstore.io.store import Store

log = logging.getLogger("kstore.history")

__all__ = ["HistoryEntry", "history", "version_as_of", "Diff", "diff", "log_versions", "write_summary"]

log_versions = load.log_versions


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One committed version, as its log entry records it (:func:`kstore.history` returns
    them, oldest first).

    Attributes
    ----------
    version : int
        The version number.
    parent : int or None
        The newest version when the commit was made; None for the dataset's first commit.
    timestamp : datetime
        When the version was committed (UTC, timezone-aware).
    operation : str
        What committed it: ``"create"``, ``"append"``, ``"overwrite"``,
        ``"overwrite_partitions"``, ``"delete_scope"``, ``"delete_rows"``, ``"update"``, ``"merge"``,
        ``"compaction"``, ``"build_indices"``, ``"drop_indices"``, ``"vacuum"``,
        ``"upgrade"``.
    added : tuple[str, ...]
        Labels of the partitions the commit added.
    removed : tuple[str, ...]
        Labels of the files it removed.
    rows_added : int
        Rows in the added files (for the rewrites, ``"compaction"``, ``"delete_rows"``,
        ``"update"`` and ``"merge"``, the rows of the rewritten files are counted too).
    writer : str
        The writing library and its version (``"kstore 0.1.0"``); ``"?"`` when unknown.
    txn : tuple[str, int] or None
        The ``(app_id, version)`` application transaction the commit recorded, if any.
    n_files : int
        Files of the dataset after the commit (``n_partitions``, the old name, works for
        one more release).
    info : dict[str, Any]
        The commit's info (``CommitOptions.info``; compaction adds its file and byte counts,
        ``merge`` its ``inserted``, ``updated`` and ``deleted`` rows, ``update`` its
        ``updated`` rows, ``restore`` the ``restored_version``).
    expired : bool
        True for a version garbage collection expired: its data may be gone (time travel to
        it raises :class:`~kstore.errors.VersionNotFoundError`), its log entry is kept for
        the log retention (``garbage_collect(log_retention=...)``, 30 days by default).

    Examples
    --------
    >>> import pandas as pd, kstore
    >>> from kstore.io import MemoryStore
    >>> store = MemoryStore()
    >>> _ = kstore.store_dataset(store, "d", pd.DataFrame({"p": [1, 2], "x": [1, 2]}), partition_on="p")
    >>> _ = kstore.update_dataset(store, "d", pd.DataFrame({"p": [3], "x": [3]}))
    >>> [(h.version, h.parent, h.operation, len(h.added), h.rows_added, h.n_files)
    ...  for h in kstore.history(store, "d")]
    [(0, None, 'create', 2, 2, 2), (1, 0, 'append', 1, 1, 3)]
    """

    version: int
    parent: int | None
    timestamp: datetime
    operation: str
    added: tuple[str, ...]
    removed: tuple[str, ...]
    rows_added: int
    writer: str
    txn: tuple[str, int] | None
    n_files: int
    info: dict[str, Any]
    expired: bool = False

    @property
    def n_partitions(self) -> int:
        """Deprecated name of :attr:`n_files`."""
        renamed("HistoryEntry", "n_partitions", "n_files", "it counts files, not partition values")
        return self.n_files


@dataclass(frozen=True, slots=True)
class Diff:
    """Partitions added and removed between two versions (for incremental processing;
    :func:`kstore.diff` returns it).

    Attributes
    ----------
    from_version : int
        The older version compared.
    to_version : int
        The newer version compared.
    added : tuple[str, ...]
        Labels of partitions in ``to_version`` but not in ``from_version``, sorted.
    removed : tuple[str, ...]
        Labels of partitions in ``from_version`` but not in ``to_version``, sorted.

    Examples
    --------
    >>> import pandas as pd, kstore
    >>> from kstore.io import MemoryStore
    >>> store = MemoryStore()
    >>> _ = kstore.store_dataset(store, "d", pd.DataFrame({"p": [1], "x": [1]}), partition_on="p")
    >>> _ = kstore.update_dataset(store, "d", pd.DataFrame({"p": [1], "x": [2]}), mode="overwrite_partitions")
    >>> d = kstore.diff(store, "d", 0, 1)
    >>> d.from_version, d.to_version, len(d.added), len(d.removed), d.added[0].split("/")[0]
    (0, 1, 1, 1, 'p=1')
    """

    from_version: int
    to_version: int
    added: tuple[str, ...]
    removed: tuple[str, ...]


#: entries a summary writer reads itself at most (versions its head did not replay)
SUMMARY_BACKFILL = 64


def _summary(store: Store, dataset_uuid: str, version: int) -> Summary | None:
    """The summary written at ``version`` (None when it is gone or damaged: it is a cache)."""
    where = f"dataset {dataset_uuid!r}: history summary of version {version}"
    try:
        return decode_summary(store.get(naming.summary_key(dataset_uuid, version)), where=where)
    except KeyNotFoundError:
        return None
    except (CorruptMetadataError, LimitExceededError) as exc:  # a store error propagates
        log.warning("%s is unreadable (%s); reading the log entries instead", where, exc)
        return None


def _timeline(store: Store, dataset_uuid: str, listing: load.LogListing, *, batch: int = 8,
              ) -> Iterator[Record]:
    """Every listed version's record, newest first: from the newest summary where it has one,
    else from the entry (read in parallel batches that grow). The first version of each run
    of listed versions (its predecessor's entry gone) is always read from its entry: its
    number may hold another entry than the one the summary saw (a void claim of it, or a
    tombstone a paused actor put again after GC deleted it; FORMAT.md E.5). A version with
    an expired marker is expired; one that vanished meanwhile (a concurrent GC) is left out."""
    expired = set(listing.expired)
    known: dict[int, Record] = {}
    cover = [s for s in listing.summaries if listing.versions and s <= listing.versions[-1]]
    listed = set(listing.versions)
    pending = list(reversed(listing.versions))
    while pending:
        if cover and pending[0] <= cover[-1]:  # read the summary when the first version it covers is due
            summary = _summary(store, dataset_uuid, cover[-1])
            if summary is not None:  # (the first version of each run is read from its entry: below)
                known = {r.version: r for r in summary.records if r.version in listed and r.version - 1 in listed}
            cover = []
        unknown: list[int] = []
        take = 0
        for v in pending:  # the known ones up to the next batch of unknown ones
            if cover and v <= cover[-1] and unknown:
                break  # the summary may know the rest
            take += 1
            if v not in known:
                unknown.append(v)
                if len(unknown) >= batch:
                    break
        chunk, pending = pending[:take], pending[take:]
        read = dict(zip(unknown, parallel_map(lambda v: _entry_or_none(store, dataset_uuid, v), unknown)))
        batch = min(batch * 2, 256)
        for v in chunk:
            if v in known:
                rec: Record | None = known[v]
            else:
                e = read[v]
                rec = record_of(e) if e is not None else None
            if rec is None:
                continue
            yield rec.expire() if (v in expired and rec.kind == "dataset") else rec


def _live(store: Store, dataset_uuid: str, listing: load.LogListing, *, batch: int = 8) -> Iterator[Record]:
    """:func:`_timeline` without void claims (FORMAT.md C): a record whose successor names
    another parent commit, one whose successor's entry is gone (expired, or a claim of an
    expired number: :func:`~kstore.core.log.successor_gone`), and a version no read can rebuild (its predecessor's entry gone,
    no checkpoint of its own, not the newest: a void claim whose successor was deleted too,
    confirmed by a read attempt; garbage collection expires both kinds. The read attempt also
    catches a summary's record of an entry that is a tombstone now: one a paused actor put
    again after garbage collection deleted it). Costs nothing more unless a version qualifies."""
    listed = set(listing.versions)
    newest = listing.versions[-1] if listing.versions else None
    newer: Record | None = None
    for r in _timeline(store, dataset_uuid, listing, batch=batch):
        successor, newer = newer, r
        if r.kind == "expired" and not _linked(r, successor):
            continue  # not shown as history: no entry after it shows it was a version
        if r.kind == "dataset" and names_another_parent(r, successor):
            continue
        if r.kind == "dataset" and newest is not None and successor_gone(r.version, listed, newest):
            continue
        if (r.kind == "dataset" and r.version != newest and r.version - 1 not in listed
                and r.version not in listing.checkpoints and not _rebuilds(store, dataset_uuid, r.version)):
            continue
        yield r


def _linked(r: Record, successor: Record | None) -> bool:
    """Whether an expired record was a version: the entry after it (listed, expired or not)
    names it as its parent, by commit id where both are known. A void claim (FORMAT.md C)
    that its writer retracted is a tombstone too, and its successor names another commit;
    an expired record whose successor is gone proves nothing and is left out."""
    return (successor is not None and successor.version == r.version + 1 and successor.parent == r.version
            and not names_another_parent(r, successor))


def _rebuilds(store: Store, dataset_uuid: str, version: int) -> bool:
    """Whether a read rebuilds ``version`` now (a version garbage collection is expiring, its
    older entries deleted first, may also meet a damaged checkpoint below it)."""
    try:
        load.resolve_version(store, dataset_uuid, version)
    except VersionNotFoundError:
        return False
    except CorruptMetadataError as exc:
        log.warning("dataset %r: history leaves out version %d, which cannot be read: %s", dataset_uuid, version, exc)
        return False
    return True


def _row(r: Record) -> HistoryEntry:
    return HistoryEntry(version=r.version, parent=r.parent, timestamp=r.timestamp, operation=r.operation,
                        added=r.added, removed=r.removed, rows_added=r.rows_added, writer=r.writer, txn=r.txn,
                        n_files=r.n_partitions, info=dict(r.info), expired=r.kind == "expired")


def history(store: Store, dataset_uuid: str, limit: int | None = None) -> list[HistoryEntry]:
    """The versions of the dataset as it exists now, oldest first (only the newest ``limit``
    of them when given): the retained ones, and the ones garbage collection expired whose log
    entries it keeps for the log retention (``expired=True``; 30 days by default, as Delta
    keeps its log). Everything before the dataset was last deleted is left out. A dataset
    kartothek wrote (no log) has no history: ``[]``. Costs 1 listing
    of the log, 1 get of the newest history summary and 1 get per version it does not
    cover (the entries after it: about :data:`~kstore.core.state.CHECKPOINT_INTERVAL`; in
    parallel) and of the oldest retained version (FORMAT.md E.5), whatever the number of
    versions.
    """
    listing = load.list_log(store, dataset_uuid)
    if not listing.versions:
        if load.load_main(store, dataset_uuid)[0] is None:
            raise DatasetNotFoundError(f"dataset {dataset_uuid!r} does not exist")
        return []  # kartothek/plateau wrote it: no log, no history
    newest_first: list[HistoryEntry] = []
    seen_dataset = False
    batch = 8 if limit is None else max(1, min(64, limit))
    for r in _live(store, dataset_uuid, listing, batch=batch):
        if r.kind == "expired" and not seen_dataset:
            continue  # (older than the newest version, which is never expired: a stale listing)
        if r.kind == "expired" and r.operation == "delete":
            return newest_first[::-1]  # an expired deletion ends the history before it too
        if r.kind == "fence":  # the dataset did not exist at this version
            if not seen_dataset:  # (a vacuum fence: GC of a deleted dataset, or of one never created)
                why = "it was deleted" if r.operation == "delete" else f"version {r.version} has no dataset"
                raise DatasetNotFoundError(f"dataset {dataset_uuid!r} does not exist ({why})")
            return newest_first[::-1]  # a deletion ends the history before it
        seen_dataset = True
        newest_first.append(_row(r))
        if limit is not None and len(newest_first) >= limit:
            return newest_first[::-1]
    if not seen_dataset:
        raise DatasetNotFoundError(f"dataset {dataset_uuid!r} does not exist")
    return newest_first[::-1]


def _entry_or_none(store: Store, dataset_uuid: str, version: int) -> LogEntry | None:
    """The entry, or None when a concurrent garbage collection expired it meanwhile."""
    try:
        return load.load_entry(store, dataset_uuid, version)
    except VersionNotFoundError:
        return None


def version_as_of(store: Store, dataset_uuid: str, as_of: datetime) -> int:
    """The version that was current at ``as_of`` (naive = UTC).

    That is the newest version committed at or before ``as_of``; if it has expired (or its
    successor's entry is gone, so kstore cannot tell), :class:`VersionNotFoundError` — never
    an older version in its place. Costs what :func:`history` costs.
    """
    if not isinstance(as_of, datetime):
        raise InvalidArgumentError(f"as_of must be a datetime, got {type(as_of).__name__} {as_of!r}")
    if as_of.tzinfo is None:
        as_of = as_of.replace(tzinfo=timezone.utc)
    records = list(_live(store, dataset_uuid, load.list_log(store, dataset_uuid)))[::-1]
    before = [r for r in records if r.timestamp <= as_of]
    if not before:
        raise VersionNotFoundError(f"dataset {dataset_uuid!r} has no retained version as of {as_of.isoformat()}")
    best = before[-1]
    later = [r for r in records if r.version > best.version]
    if later and later[0].version != best.version + 1:
        raise VersionNotFoundError(
            f"dataset {dataset_uuid!r}: the version current at {as_of.isoformat()} has expired")
    if best.kind != "dataset":
        why = "has expired" if best.kind == "expired" else "did not exist (it was deleted)"
        raise VersionNotFoundError(
            f"dataset {dataset_uuid!r}: the version current at {as_of.isoformat()} (version {best.version}) {why}")
    return best.version


def write_summary(store: Store, dataset_uuid: str, version: int, known: Sequence[LogEntry] = ()) -> bool:
    """Write the history summary of ``version`` (with its checkpoint; best effort: a failure
    costs later ``history()`` calls gets, never a wrong row).

    Built from the newest older summary and ``known`` (the entries the writer replayed and
    committed); the entries neither covers are read, the newest :data:`SUMMARY_BACKFILL` of
    them (older ones stay to be read by ``history()``). Costs 1 listing, 1 get of the older
    summary, the backfill gets and 1 put.
    """
    try:
        listing = load.list_log(store, dataset_uuid)
        listed = [v for v in listing.versions if v <= version]
        have: dict[int, Record] = {}
        large: set[int] = set()  # records too large to keep: history() reads their entries
        older = [s for s in listing.summaries if s < version]
        prior = _summary(store, dataset_uuid, older[-1]) if older else None
        if prior is not None:
            have.update((r.version, r) for r in prior.records)
            large.update(prior.large)
        have.update((e.version, record_of(e)) for e in known)
        need = [v for v in listed if v not in have and v not in large][-SUMMARY_BACKFILL:]
        for v, e in zip(need, parallel_map(lambda v: _entry_or_none(store, dataset_uuid, v), need)):
            if e is not None:
                have[v] = record_of(e)
        large |= {v for v, r in have.items() if not r.small}
        # a version with an expired marker is left out (its entry decides for the readers
        # and the next summary): GC may still tombstone it, or find it retained after all
        # and delete the marker; either way this summary must not outlive the marker
        marked = set(listing.expired)
        records = [have[v] for v in listed
                   if v in have and v not in large and not (v in marked and have[v].kind == "dataset")]
        large &= set(listed)
        store.put(naming.summary_key(dataset_uuid, version), encode_summary(version, records, sorted(large)))
    except KstoreError as exc:
        log.info("dataset %r: history summary of version %d not written (%s)", dataset_uuid, version, exc)
        return False
    return True


def diff(store: Store, dataset_uuid: str, from_version: int, to_version: int) -> Diff:
    a = load.load_version(store, dataset_uuid, from_version)
    b = load.load_version(store, dataset_uuid, to_version)
    return Diff(
        from_version, to_version,
        added=tuple(sorted(set(b.partitions) - set(a.partitions))),
        removed=tuple(sorted(set(a.partitions) - set(b.partitions))),
    )
