"""Log entries: the write-once record of one committed version (FORMAT.md B.1).

A log entry lives at ``<uuid>/_kstore/log/<version:020d>.json``. Claiming that key with an
atomic put-if-absent IS the commit. An entry is one of:

- a **version of the dataset**: format 2 (``"format": 2``) records what the commit changed
  in ``actions`` (files added with their statistics and index values, labels removed, the
  small state; :mod:`kstore.core.filetable`), and a reader replays the entries after the
  newest checkpoint; format 1 (written by kstore before format 2) holds the full dataset
  metadata in ``metadata``, and is a base for replay like a checkpoint;
- a **tombstone**: garbage collection expired the version (``expired: true``, no metadata).
  The key stays until the entry is older than :data:`LOG_MIN_AGE`, so that the version
  number can never be claimed a second time;
- a **fence without a dataset**: ``operation`` is ``"delete"`` (the dataset was deleted) or
  ``"vacuum"`` on a dataset that was never created (garbage collection of a failed
  create). ``metadata`` is null; the next create continues the numbering.

``orphan_cutoff_ms`` (on ``vacuum`` and ``delete`` entries) is the garbage collector's
promise: files whose kstore file id is older than this instant and which no retained
version referenced may have been deleted. A writer whose own files are older than the
newest cutoff it sees must not commit them (:mod:`kstore.blocks.commit`).

Examples
--------
>>> from datetime import datetime, timezone
>>> e = LogEntry(version=3, commit_id="c0ffee", operation="append", parent=2,
...              timestamp=datetime(2024, 1, 1, tzinfo=timezone.utc), metadata={"dataset_uuid": "d"})
>>> LogEntry.from_dict(e.to_dict(), dataset_uuid="d", version=3) == e
True
>>> e.tombstone().has_dataset, e.tombstone().expired
(False, True)
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from types import MappingProxyType
from typing import Any, Protocol

from kstore.errors import CorruptMetadataError

__all__ = ["LogEntry", "LOG_MIN_AGE", "FENCE_OPERATIONS", "Linked", "names_another_parent", "successor_gone"]

#: A log entry is never deleted before it is this old (it is replaced by a tombstone when
#: its version expires earlier). Together with the writers' base-age limit
#: (:data:`kstore.blocks.commit.BASE_MAX_AGE`) this makes version numbers unique forever.
LOG_MIN_AGE = timedelta(hours=1)

#: Operations that may carry an orphan cutoff.
FENCE_OPERATIONS = ("vacuum", "delete")


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One version's log entry (see the module docstring)."""

    version: int
    commit_id: str | None
    operation: str
    timestamp: datetime
    parent: int | None = None
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    rows_added: int = 0
    txn: tuple[str, int] | None = None
    writer: str = "?"
    metadata: Mapping[str, Any] | None = None
    orphan_cutoff_ms: int | None = None
    expired: bool = False
    info: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    #: format 2: what changed (encoded :class:`kstore.core.filetable.Actions` + small state)
    actions: Mapping[str, Any] | None = None
    #: partitions of the version after this commit (format 2; for history())
    n_partitions: int | None = None
    #: ``commit_id`` of the entry of version ``parent`` (None: unknown, or written before
    #: kstore recorded it). A writer checks it after its claim: an entry after its own
    #: that names another parent proves its number had been used before (FORMAT.md C)
    parent_commit_id: str | None = None

    @property
    def format(self) -> int:
        return 2 if self.actions is not None else 1

    @property
    def has_dataset(self) -> bool:
        """True when the entry holds a version of the dataset (not a tombstone or fence)."""
        return self.metadata is not None or self.actions is not None

    @property
    def is_base(self) -> bool:
        """True when the entry alone gives its version's state: a format-1 entry (full
        metadata) or a format-2 entry that starts from nothing (create, overwrite)."""
        return self.metadata is not None or bool(self.actions and self.actions.get("reset"))

    @property
    def deletes_dataset(self) -> bool:
        """True for the fence ``delete_dataset`` writes (and a vacuum of a dataset-less log)."""
        return not self.expired and not self.has_dataset

    def tombstone(self) -> LogEntry:
        """This entry with its metadata dropped, marked expired (keeps the number taken)."""
        return replace(self, metadata=None, actions=None, expired=True)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "version": self.version,
            "parent": self.parent,
            "commit_id": self.commit_id,
            "timestamp": self.timestamp.isoformat(),
            "operation": self.operation,
            "added": list(self.added),
            "removed": list(self.removed),
            "rows_added": self.rows_added,
            "txn": list(self.txn) if self.txn else None,
            "writer": self.writer,
            "metadata": _plain(self.metadata),
        }
        if self.actions is not None:
            out["format"] = 2
            out["actions"] = dict(self.actions)
        if self.n_partitions is not None:
            out["n_partitions"] = self.n_partitions
        if self.parent_commit_id is not None:
            out["parent_commit_id"] = self.parent_commit_id
        if self.orphan_cutoff_ms is not None:
            out["orphan_cutoff_ms"] = self.orphan_cutoff_ms
        if self.expired:
            out["expired"] = True
        if self.info:
            out["info"] = _thaw(self.info)
        return out

    @classmethod
    def from_dict(cls, raw: Any, *, dataset_uuid: str, version: int) -> LogEntry:
        """Validate a decoded entry read from version ``version``'s key.

        Every defect (missing or mistyped field, another version number) is a
        :class:`~kstore.errors.CorruptMetadataError` naming the dataset, version and field.
        """
        where = f"dataset {dataset_uuid!r}: log entry of version {version}"
        if not isinstance(raw, Mapping):
            raise CorruptMetadataError(f"{where} is not a mapping (got {type(raw).__name__})")

        def get(name: str, kinds: tuple[type, ...], default: Any = None, required: bool = False) -> Any:
            if name not in raw or raw[name] is None:
                if required:
                    raise CorruptMetadataError(f"{where} has no {name!r}")
                return default
            value = raw[name]
            if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
                raise CorruptMetadataError(
                    f"{where}: {name!r} must be {' or '.join(k.__name__ for k in kinds)}, got {value!r:.80}"
                )
            return value

        stored = get("version", (int,), required=True)
        if stored != version:
            raise CorruptMetadataError(f"{where} says it is version {stored}")
        parent = get("parent", (int,))
        stamp = get("timestamp", (str,), required=True)
        try:
            ts = datetime.fromisoformat(stamp)
        except ValueError as exc:
            raise CorruptMetadataError(f"{where}: timestamp {stamp!r:.80} is not an ISO date-time") from exc
        if ts.tzinfo is None:
            ts = ts.replace(tzinfo=timezone.utc)
        operation = get("operation", (str,), default="?")
        added = _strings(get("added", (list, tuple), default=()), where, "added")
        removed = _strings(get("removed", (list, tuple), default=()), where, "removed")
        rows = get("rows_added", (int,), default=0)
        txn_raw = get("txn", (list, tuple))
        txn = None
        if txn_raw is not None:
            if len(txn_raw) != 2 or not isinstance(txn_raw[0], str) or not isinstance(txn_raw[1], int):
                raise CorruptMetadataError(f"{where}: txn must be [app_id, version], got {txn_raw!r:.80}")
            txn = (txn_raw[0], int(txn_raw[1]))
        metadata = get("metadata", (Mapping,))
        cutoff = get("orphan_cutoff_ms", (int, float))
        if cutoff is not None and not math.isfinite(cutoff):
            raise CorruptMetadataError(f"{where}: orphan_cutoff_ms is not finite")
        expired = get("expired", (bool,), default=False)
        info = get("info", (Mapping,), default={})
        commit_id = get("commit_id", (str,))
        fmt = get("format", (int,), default=1)
        if fmt not in (1, 2):
            raise CorruptMetadataError(f"{where} has format {fmt}; this kstore reads formats 1 and 2 "
                                       "(upgrade kstore to read it)")
        actions = get("actions", (Mapping,))
        if fmt == 2 and actions is None and metadata is None and not expired and operation not in FENCE_OPERATIONS:
            raise CorruptMetadataError(f"{where} is format 2 but has no actions")
        n_parts = get("n_partitions", (int,))
        parent_commit_id = get("parent_commit_id", (str,))
        return cls(
            version=stored,
            commit_id=commit_id,
            operation=operation,
            timestamp=ts,
            parent=parent,
            added=added,
            removed=removed,
            rows_added=rows,
            txn=txn,
            writer=str(get("writer", (str,), default="?")),
            metadata=metadata,
            orphan_cutoff_ms=int(cutoff) if cutoff is not None else None,
            expired=expired,
            info=MappingProxyType(dict(info)),
            actions=actions,
            n_partitions=n_parts,
            parent_commit_id=parent_commit_id,
        )


class Linked(Protocol):
    """What the void-claim rule reads of an entry (a :class:`LogEntry` or a history record)."""

    @property
    def version(self) -> int: ...
    @property
    def commit_id(self) -> str | None: ...
    @property
    def parent(self) -> int | None: ...
    @property
    def parent_commit_id(self) -> str | None: ...


def names_another_parent(claim: Linked, successor: Linked | None) -> bool:
    """True when ``successor`` (the entry of the version after ``claim``) proves ``claim``
    void: it names ``claim``'s version as its parent but another commit id, so ``claim``
    re-used a number whose first entry was deleted (FORMAT.md C). Unknown ids (entries
    written before kstore recorded them) prove nothing.

    >>> from datetime import datetime, timezone
    >>> t = datetime(2024, 1, 1, tzinfo=timezone.utc)
    >>> first = LogEntry(version=4, commit_id="a", operation="append", parent=3, timestamp=t)
    >>> again = LogEntry(version=4, commit_id="b", operation="append", parent=3, timestamp=t)
    >>> after = LogEntry(version=5, commit_id="c", operation="append", parent=4, timestamp=t,
    ...                  parent_commit_id="a")
    >>> names_another_parent(again, after), names_another_parent(first, after), names_another_parent(again, None)
    (True, False, False)
    """
    return (successor is not None and successor.version == claim.version + 1 and successor.parent == claim.version
            and successor.parent_commit_id is not None and claim.commit_id is not None
            and successor.parent_commit_id != claim.commit_id)


def successor_gone(version: int, listed: Collection[int], newest: int) -> bool:
    """True when ``version`` is older than the ``newest`` listed one but the entry after it
    is not ``listed``: it is no retained version (FORMAT.md C). Entries are deleted only
    when expired (or void claims, whose number's first entry was expired), and expiry runs
    from the oldest version up, so the version before a deleted entry is expired too, or
    is a claim that re-used an expired number (a writer paused past its check) and never
    became a version. History, time travel and garbage collection all leave it out.

    >>> successor_gone(0, {0, 2}, 2), successor_gone(1, {1, 2}, 2), successor_gone(2, {0, 2}, 2)
    (True, False, False)
    """
    return version < newest and version + 1 not in listed


def _strings(values: Any, where: str, name: str) -> tuple[str, ...]:
    if not all(isinstance(v, str) for v in values):
        raise CorruptMetadataError(f"{where}: {name!r} must be a list of partition labels")
    return tuple(values)


def _plain(value: Mapping[str, Any] | None) -> Any:
    """The metadata as plain dicts: as it is when it already is one (the commit builds it
    with ``DatasetMetadata.to_dict``; a deep copy of a large dataset's partitions costs
    more than writing them), thawed otherwise."""
    if value is None or type(value) is dict:
        return value
    return _thaw(value)


def _thaw(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    return value
