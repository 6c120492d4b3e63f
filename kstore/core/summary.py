"""History summaries: what ``history()`` and ``as_of=`` need of every version, in one file.

A summary (FORMAT.md E.5) sits beside a checkpoint at
``<uuid>/_kstore/log/<version:020d>.summary.msgpack.zstd``. It holds one :class:`Record`
per log entry the writer could list at or below its version: the fields a history row
shows (timestamp, operation, partitions added and removed, rows, writer, txn, partition
count, user info) and the entry's kind: a version of the dataset, a fence without a
dataset (``delete``, or the ``vacuum`` of a dataset never created), or an expired
version (a tombstone; its timestamp is kept, so ``as_of`` can tell "expired" from
"before it").

A record naming more than :data:`MAX_LABELS` partitions (a large create or overwrite) is
left out: its entry is read instead.

A summary is a cache, never the truth: a reader keeps only records of versions that one
listing of the log still shows, treats a version with an ``.expired`` marker as expired
(garbage collection writes the marker before the tombstone), and reads the entries of the
versions a summary does not cover. So a missing, stale or damaged summary costs store
calls, never a wrong answer.

Examples
--------
>>> from datetime import datetime, timezone
>>> from kstore.core.log import LogEntry
>>> e = LogEntry(version=3, commit_id="c", operation="append", parent=2, added=("p=1",),
...              timestamp=datetime(2024, 1, 1, tzinfo=timezone.utc), metadata={"partitions": {"p=1": {}}})
>>> r = record_of(e)
>>> (r.version, r.kind, r.n_partitions, r.added)
(3, 'dataset', 1, ('p=1',))
>>> decode_summary(encode_summary(7, [r]), where="x").records == (r,)
True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from types import MappingProxyType
from typing import Any, Literal

from kstore.core import serialize
from kstore.core.log import LogEntry
from kstore.errors import CorruptMetadataError, KstoreError

__all__ = ["Record", "Summary", "record_of", "encode_summary", "decode_summary", "SUMMARY_FORMAT", "MAX_LABELS"]

SUMMARY_FORMAT = 1

#: labels (added + removed) a record may name to be kept in a summary
MAX_LABELS = 1000

Kind = Literal["dataset", "fence", "expired"]


@dataclass(frozen=True, slots=True)
class Record:
    """One version as a history row sees it (see the module docstring)."""

    version: int
    kind: Kind
    timestamp: datetime
    operation: str
    parent: int | None = None
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    rows_added: int = 0
    writer: str = "?"
    txn: tuple[str, int] | None = None
    n_partitions: int = 0
    info: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    #: the entry's commit id and its parent's (None: unknown; summaries before kstore 0.6
    #: lack them): what a reader checks to leave out void claims (FORMAT.md C)
    commit_id: str | None = None
    parent_commit_id: str | None = None

    @property
    def small(self) -> bool:
        """True when the record names at most :data:`MAX_LABELS` partitions (a summary keeps
        only those: a create of 100k partitions is read from its entry, not copied into every
        summary while it is retained)."""
        return len(self.added) + len(self.removed) <= MAX_LABELS

    def expire(self) -> Record:
        """This record as an expired version (what a tombstone of it would say: everything
        but the state, which history rows do not show)."""
        return replace(self, kind="expired")


def record_of(entry: LogEntry) -> Record:
    """The record of one log entry (format 1 or 2, tombstone or fence)."""
    cid, pcid = entry.commit_id, entry.parent_commit_id
    if entry.expired:  # (a tombstone keeps what history rows show: GC keeps it for the log retention)
        return Record(entry.version, "expired", entry.timestamp, entry.operation, entry.parent, entry.added,
                      entry.removed, entry.rows_added, entry.writer, entry.txn, entry.n_partitions or 0, entry.info,
                      commit_id=cid, parent_commit_id=pcid)
    if not entry.has_dataset:
        return Record(entry.version, "fence", entry.timestamp, entry.operation, entry.parent,
                      commit_id=cid, parent_commit_id=pcid)
    parts = entry.metadata.get("partitions") if entry.metadata is not None else None
    count = entry.n_partitions if entry.n_partitions is not None else (len(parts) if isinstance(parts, Mapping) else 0)
    return Record(entry.version, "dataset", entry.timestamp, entry.operation, entry.parent, entry.added,
                  entry.removed, entry.rows_added, entry.writer, entry.txn, count, entry.info,
                  commit_id=cid, parent_commit_id=pcid)


@dataclass(frozen=True, slots=True)
class Summary:
    """A decoded summary: the version it was written at, its records (oldest first) and the
    versions whose records were too large to keep (their entries are read instead)."""

    version: int
    records: tuple[Record, ...]
    large: tuple[int, ...] = ()


_COLUMNS = ("version", "kind", "timestamp", "operation", "parent", "added", "removed", "rows_added",
            "writer", "txn", "n_partitions", "info")
#: columns a summary may lack (written before kstore recorded them)
_OPTIONAL = ("commit_id", "parent_commit_id")


def encode_summary(version: int, records: Sequence[Record], large: Sequence[int] = ()) -> bytes:
    """The bytes of a summary written at ``version`` (msgpack, zstd; one list per field)."""
    cols: dict[str, list[Any]] = {c: [] for c in _COLUMNS + _OPTIONAL}
    for r in records:
        cols["version"].append(r.version)
        cols["kind"].append(r.kind)
        cols["timestamp"].append(r.timestamp.isoformat())
        cols["operation"].append(r.operation)
        cols["parent"].append(r.parent)
        cols["added"].append(list(r.added))
        cols["removed"].append(list(r.removed))
        cols["rows_added"].append(r.rows_added)
        cols["writer"].append(r.writer)
        cols["txn"].append(list(r.txn) if r.txn else None)
        cols["n_partitions"].append(r.n_partitions)
        cols["info"].append(dict(r.info) if r.info else None)
        cols["commit_id"].append(r.commit_id)
        cols["parent_commit_id"].append(r.parent_commit_id)
    return serialize.dumps({"summary": SUMMARY_FORMAT, "version": version, "records": cols,
                            "large": sorted(large)}, "msgpack.zstd")


def decode_summary(data: bytes, *, where: str) -> Summary:
    """Parse summary bytes; any defect is a :class:`CorruptMetadataError` naming ``where``."""
    raw = serialize.loads(data, "msgpack.zstd", what=where)
    if raw.get("summary") != SUMMARY_FORMAT or not isinstance(raw.get("version"), int):
        raise CorruptMetadataError(f"{where}: not a history summary of format {SUMMARY_FORMAT}")
    cols = raw.get("records")
    if not isinstance(cols, dict) or any(not isinstance(cols.get(c), list) for c in _COLUMNS):
        raise CorruptMetadataError(f"{where}: the records are damaged")
    n = len(cols["version"])
    if any(len(cols[c]) != n for c in _COLUMNS):
        raise CorruptMetadataError(f"{where}: the record columns differ in length")
    ids = {c: cols.get(c, [None] * n) for c in _OPTIONAL}
    if any(not isinstance(v, list) or len(v) != n or not all(i is None or isinstance(i, str) for i in v)
           for v in ids.values()):
        raise CorruptMetadataError(f"{where}: the commit ids are damaged")
    records = []
    try:
        for i in range(n):
            entry = LogEntry.from_dict({
                "version": cols["version"][i], "operation": cols["operation"][i],
                "timestamp": cols["timestamp"][i], "parent": cols["parent"][i],
                "added": cols["added"][i], "removed": cols["removed"][i],
                "rows_added": cols["rows_added"][i], "writer": cols["writer"][i], "txn": cols["txn"][i],
                "info": cols["info"][i] or {}, "commit_id": None, "metadata": None,
            }, dataset_uuid=where, version=cols["version"][i])
            kind = cols["kind"][i]
            count = cols["n_partitions"][i]
            if kind not in ("dataset", "fence", "expired") or not isinstance(count, int) or isinstance(count, bool):
                raise CorruptMetadataError(f"{where}: record {i} has kind {kind!r}, partitions {count!r}")
            records.append(Record(entry.version, kind, entry.timestamp, entry.operation, entry.parent,
                                  entry.added, entry.removed, entry.rows_added, entry.writer, entry.txn,
                                  count, entry.info, ids["commit_id"][i], ids["parent_commit_id"][i]))
    except CorruptMetadataError:
        raise
    except (KstoreError, TypeError, ValueError) as exc:
        raise CorruptMetadataError(f"{where}: a record is damaged ({exc})") from exc
    large = raw.get("large", [])
    if not isinstance(large, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in large):
        raise CorruptMetadataError(f"{where}: 'large' must be a list of versions")
    return Summary(raw["version"], tuple(records), tuple(large))
