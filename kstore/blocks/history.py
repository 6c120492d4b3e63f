"""Version history: list log entries, resolve ``as_of`` timestamps, diff versions."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from kstore.blocks import load
from kstore.core import naming, serialize
from kstore.errors import KeyNotFoundError, VersionNotFoundError
from kstore.io.store import Store

__all__ = ["HistoryEntry", "history", "version_as_of", "Diff", "diff", "log_versions"]


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


@dataclass(frozen=True, slots=True)
class Diff:
    """Partitions added and removed between two versions (for incremental processing)."""

    from_version: int
    to_version: int
    added: tuple[str, ...]
    removed: tuple[str, ...]


def log_versions(store: Store, dataset_uuid: str) -> list[int]:
    """Every version with a log entry (sorted); lists the log prefix."""
    out = []
    for key in store.iter_prefix(naming.log_prefix(dataset_uuid)):
        v = naming.version_from_log_key(dataset_uuid, key)
        if v is not None:
            out.append(v)
    return sorted(out)


def _entry(store: Store, dataset_uuid: str, version: int) -> dict[str, Any]:
    try:
        data = store.get(naming.log_key(dataset_uuid, version))
    except KeyNotFoundError as exc:
        raise VersionNotFoundError(f"dataset {dataset_uuid!r} has no version {version}") from exc
    return serialize.loads(data, "json", what=f"dataset {dataset_uuid!r} version {version}")


def _parse_ts(text: str) -> datetime:
    ts = datetime.fromisoformat(text)
    return ts if ts.tzinfo else ts.replace(tzinfo=timezone.utc)


def history(store: Store, dataset_uuid: str) -> list[HistoryEntry]:
    """All retained versions, oldest first."""
    versions = log_versions(store, dataset_uuid)
    if not versions:
        load.load_metadata(store, dataset_uuid)  # raises DatasetNotFoundError if absent
        return []
    out = []
    for v in versions:
        e = _entry(store, dataset_uuid, v)
        out.append(
            HistoryEntry(
                version=v,
                parent=e.get("parent"),
                timestamp=_parse_ts(e["timestamp"]),
                operation=e.get("operation", "?"),
                added=tuple(e.get("added") or ()),
                removed=tuple(e.get("removed") or ()),
                rows_added=int(e.get("rows_added") or 0),
                writer=e.get("writer", "?"),
                txn=tuple(e["txn"]) if e.get("txn") else None,
                n_partitions=len((e.get("metadata") or {}).get("partitions") or {}),
            )
        )
    return out


def version_as_of(store: Store, dataset_uuid: str, as_of: datetime) -> int:
    """The newest version committed at or before ``as_of`` (naive = UTC)."""
    if as_of.tzinfo is None:
        as_of = as_of.replace(tzinfo=timezone.utc)
    best = None
    for v in log_versions(store, dataset_uuid):
        if _parse_ts(_entry(store, dataset_uuid, v)["timestamp"]) <= as_of:
            best = v
        else:
            break
    if best is None:
        raise VersionNotFoundError(f"dataset {dataset_uuid!r} has no retained version as of {as_of.isoformat()}")
    return best


def diff(store: Store, dataset_uuid: str, from_version: int, to_version: int) -> Diff:
    a = load.load_version(store, dataset_uuid, from_version)
    b = load.load_version(store, dataset_uuid, to_version)
    return Diff(
        from_version, to_version,
        added=tuple(sorted(set(b.partitions) - set(a.partitions))),
        removed=tuple(sorted(set(a.partitions) - set(b.partitions))),
    )

