"""Version history: list log entries, resolve ``as_of`` timestamps, diff versions."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from kstore.blocks import load
from kstore.core.log import LogEntry
from kstore.core.runtime import parallel_map
from kstore.errors import DatasetNotFoundError, InvalidArgumentError, VersionNotFoundError
from kstore.io.store import Store

__all__ = ["HistoryEntry", "history", "version_as_of", "Diff", "diff", "log_versions"]

log_versions = load.log_versions


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One committed version, as its log entry records it."""

    version: int
    parent: int | None
    timestamp: datetime
    operation: str
    added: tuple[str, ...]
    removed: tuple[str, ...]
    rows_added: int
    writer: str
    txn: tuple[str, int] | None
    n_partitions: int
    info: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Diff:
    """Partitions added and removed between two versions (for incremental processing)."""

    from_version: int
    to_version: int
    added: tuple[str, ...]
    removed: tuple[str, ...]


def _entries(store: Store, dataset_uuid: str) -> list[LogEntry]:
    entries = (_entry_or_none(store, dataset_uuid, v) for v in log_versions(store, dataset_uuid))
    return [e for e in entries if e is not None]


def history(store: Store, dataset_uuid: str, limit: int | None = None) -> list[HistoryEntry]:
    """The retained versions of the dataset as it exists now, oldest first (only the newest
    ``limit`` of them when given: then only their log entries are read).

    Expired versions (tombstones) are left out; so is everything before the dataset was
    last deleted. A dataset kartothek wrote (no log) has no history: ``[]``. Costs 1 listing
    of the log and 1 get per entry read (newest first, in parallel batches).
    """
    versions = log_versions(store, dataset_uuid)
    if not versions:
        if load.load_main(store, dataset_uuid)[0] is None:
            raise DatasetNotFoundError(f"dataset {dataset_uuid!r} does not exist")
        return []  # kartothek/plateau wrote it: no log, no history
    newest_first: list[HistoryEntry] = []
    seen_dataset = False
    end = len(versions)
    batch = 8 if limit is None else max(1, min(64, limit))
    while end > 0:
        chunk = versions[max(0, end - batch):end]
        end -= len(chunk)
        batch = min(batch * 2, 256)
        for e in reversed(parallel_map(lambda v: _entry_or_none(store, dataset_uuid, v), chunk)):
            if e is None or (not e.has_dataset and not e.deletes_dataset):
                continue  # expired by a concurrent garbage collection, or a tombstone
            if e.deletes_dataset:
                if not seen_dataset and e.operation == "delete":
                    raise DatasetNotFoundError(f"dataset {dataset_uuid!r} does not exist (it was deleted)")
                if not seen_dataset:
                    continue  # a garbage collection fence of a dataset that was never created
                return newest_first[::-1]  # a deletion ends the history before it
            seen_dataset = True
            parts = e.metadata.get("partitions") if e.metadata is not None else None
            count = e.n_partitions if e.n_partitions is not None else (len(parts) if isinstance(parts, dict) else 0)
            newest_first.append(HistoryEntry(
                version=e.version, parent=e.parent, timestamp=e.timestamp, operation=e.operation,
                added=e.added, removed=e.removed, rows_added=e.rows_added, writer=e.writer, txn=e.txn,
                n_partitions=count, info=dict(e.info),
            ))
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
    an older version in its place.
    """
    if not isinstance(as_of, datetime):
        raise InvalidArgumentError(f"as_of must be a datetime, got {type(as_of).__name__} {as_of!r}")
    if as_of.tzinfo is None:
        as_of = as_of.replace(tzinfo=timezone.utc)
    entries = _entries(store, dataset_uuid)
    before = [e for e in entries if e.timestamp <= as_of]
    if not before:
        raise VersionNotFoundError(f"dataset {dataset_uuid!r} has no retained version as of {as_of.isoformat()}")
    best = before[-1]
    later = [e for e in entries if e.version > best.version]
    if later and later[0].version != best.version + 1:
        raise VersionNotFoundError(
            f"dataset {dataset_uuid!r}: the version current at {as_of.isoformat()} has expired")
    if not best.has_dataset:
        why = "has expired" if best.expired else "did not exist (it was deleted)"
        raise VersionNotFoundError(
            f"dataset {dataset_uuid!r}: the version current at {as_of.isoformat()} (version {best.version}) {why}")
    return best.version


def diff(store: Store, dataset_uuid: str, from_version: int, to_version: int) -> Diff:
    a = load.load_version(store, dataset_uuid, from_version)
    b = load.load_version(store, dataset_uuid, to_version)
    return Diff(
        from_version, to_version,
        added=tuple(sorted(set(b.partitions) - set(a.partitions))),
        removed=tuple(sorted(set(a.partitions) - set(b.partitions))),
    )
