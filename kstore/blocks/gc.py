"""Garbage collection with retention (FORMAT.md B.4) and dataset deletion.

A key under ``<uuid>/`` is garbage when no retained version references it. Retained
versions: the newest, every version committed within the retention window, and the
newest version committed before the window starts (it was current at the window's start,
so time travel to any instant inside the window works). Unreferenced files whose kstore
file id says they are younger than the window are kept too: they may belong to a write
that has not committed yet. Log entries of versions no longer retained are expired.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from kstore.blocks import load
from kstore.blocks.history import history, log_versions
from kstore.core import naming
from kstore.errors import CorruptMetadataError, DatasetNotFoundError
from kstore.io.store import Store

__all__ = ["GCResult", "collect_garbage", "delete_all"]


@dataclass(frozen=True, slots=True)
class GCResult:
    """What a GC run deleted (or would delete, with ``dry_run``)."""

    deleted_files: tuple[str, ...]
    expired_versions: tuple[int, ...]
    retained_versions: tuple[int, ...]
    dry_run: bool


_PROTECTED_SUFFIXES = ("/" + naming.COMMON_METADATA,)


def collect_garbage(
    store: Store,
    dataset_uuid: str,
    *,
    retention: timedelta = timedelta(days=7),
    dry_run: bool = False,
    now: datetime | None = None,
) -> GCResult:
    now = now or datetime.now(timezone.utc)
    cutoff = now - retention
    current, _ = load.load_latest(store, dataset_uuid)
    if current is None:
        raise DatasetNotFoundError(f"dataset {dataset_uuid!r} does not exist")
    entries = history(store, dataset_uuid)
    retained: list[int] = []
    expired: list[int] = []
    older = [e.version for e in entries if e.timestamp < cutoff]
    boundary = max(older) if older else None
    newest = current.version
    for e in entries:
        if e.timestamp >= cutoff or e.version == boundary or e.version == newest:
            retained.append(e.version)
        else:
            expired.append(e.version)
    referenced = set(current.referenced_keys())
    # the main file (what kartothek and current reads use) may lag behind the log when a
    # writer died between claiming its version and publishing it: never delete its files
    try:
        referenced |= load.load_metadata(store, dataset_uuid)[0].referenced_keys()
    except DatasetNotFoundError:  # version 0 claimed, main file never written
        pass
    for v in retained:
        referenced |= load.load_version(store, dataset_uuid, v).referenced_keys()
    log_keys = {naming.log_key(dataset_uuid, v) for v in log_versions(store, dataset_uuid)}
    garbage = []
    for key in store.iter_prefix(naming.dataset_prefix(dataset_uuid)):
        if key in referenced or key in log_keys or key.endswith(_PROTECTED_SUFFIXES):
            continue
        born = _born(key)
        if born is not None and born >= cutoff:
            continue  # may belong to a write in progress
        garbage.append(key)
    if not dry_run:
        # expire log entries first: a GC that dies half-way must not leave a listed version
        # whose files are gone (files left behind are garbage for the next run)
        for v in expired:
            store.delete(naming.log_key(dataset_uuid, v))
        for key in garbage:
            store.delete(key)
        # temporary files of puts that a crash interrupted (local directory stores)
        remove_temporary = getattr(store, "remove_temporary", None)
        if remove_temporary is not None:
            remove_temporary(dataset_uuid, cutoff.timestamp())
    return GCResult(tuple(sorted(garbage)), tuple(expired), tuple(retained), dry_run)


def _born(key: str) -> datetime | None:
    """When a file was written: from its kstore file id, or from an index file's timestamp."""
    born = naming.file_id_time(key)
    if born is not None:
        return datetime.fromtimestamp(born, timezone.utc)
    if key.endswith(naming.INDEX_SUFFIX):  # <uuid>/indices/<col>/<quoted iso timestamp>.by-dataset-index.parquet
        try:
            ts = datetime.fromisoformat(naming.unquote(key.rsplit("/", 1)[-1][: -len(naming.INDEX_SUFFIX)]))
        except (ValueError, CorruptMetadataError):
            return None
        return ts if ts.tzinfo else ts.replace(tzinfo=timezone.utc)
    return None


def delete_all(store: Store, dataset_uuid: str) -> int:
    """Delete every key of a dataset; the main metadata file goes last. Returns the count."""
    meta, fmt = load.load_latest(store, dataset_uuid)
    if meta is None:
        raise DatasetNotFoundError(f"dataset {dataset_uuid!r} does not exist")
    n = 0
    for key in sorted(meta.referenced_keys()):
        store.delete(key)
        n += 1
    logs = []
    for key in list(store.iter_prefix(naming.dataset_prefix(dataset_uuid))):
        if naming.version_from_log_key(dataset_uuid, key) is not None:
            logs.append(key)
            continue
        store.delete(key)
        n += 1
    for key in logs:
        store.delete(key)
        n += 1
    for f in naming.METADATA_FORMATS:
        store.delete(naming.metadata_key(dataset_uuid, f))
    return n + 1
