"""A planned file that is gone: the dataset moved on, or damage? One decision for every caller.

An operation plans on one version (``delete_rows`` the files whose rows it filters,
``build_indices`` the files it indexes, a compaction the files it merges, a read the files
it returns) and reads those files later. Meanwhile another writer may commit a version that
no longer references some of them (a compaction, an overwrite, a delete) and a garbage
collection with a short retention may delete them (FORMAT.md C2). Such a read finds the file
missing (:class:`~kstore.errors.CorruptMetadataError` caused by
:class:`~kstore.errors.KeyNotFoundError`), but nothing is damaged.

:func:`check_missing` tells the two apart with the newest version (one listing and its
replay): when the dataset has a version newer than the plan's and that version no longer
references a planned file that is missing, it raises :class:`PlannedFileGone` (a
:class:`~kstore.errors.CommitConflictError` naming the dataset, the file and the version
that removed it: nothing was committed); when the newest version still references the
missing file it returns and the caller re-raises its error (real damage).
:func:`reading_planned` wraps the reads of planned files with that check, and
:func:`replan` runs an operation again on the newest version after :class:`PlannedFileGone`
(for operations that commute with the newer versions: a read of the newest version,
``delete_rows`` and ``build_indices`` of the newest version).

Examples
--------
>>> import pandas as pd
>>> from datetime import timedelta
>>> import kstore
>>> from kstore.blocks.read import read_task
>>> st = kstore.open_store("memory://planned-doc")
>>> _ = kstore.store_dataset(st, "d", pd.DataFrame({"x": [1]}))
>>> _ = kstore.update_dataset(st, "d", pd.DataFrame({"x": [2]}))
>>> snap = kstore.open_dataset(st, "d")
>>> plan = snap.plan()
>>> _ = kstore.compact(st, "d")
>>> _ = kstore.garbage_collect(st, "d", retention=timedelta(0), enforce_retention_duration=False)
>>> try:
...     with reading_planned(st, "d", plan.version, [(t.label, t.key) for t in plan.tasks], "the example"):
...         _ = [read_task(st, plan, t) for t in plan.tasks]
... except PlannedFileGone as exc:
...     print(exc.removed_by)
2
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from kstore.blocks import load
from kstore.core.log import LogEntry
from kstore.core.runtime import parallel_map
from kstore.errors import (
    CommitConflictError,
    CorruptMetadataError,
    DatasetNotFoundError,
    KeyNotFoundError,
    VersionNotFoundError,
)
from kstore.io.store import Store

log = logging.getLogger("kstore.write")

__all__ = ["PlannedFileGone", "check_missing", "reading_planned", "replan", "REPLAN_ATTEMPTS"]

T = TypeVar("T")

#: how often :func:`replan` runs an operation before it gives up
REPLAN_ATTEMPTS = 5

#: log entries read, at most, to name the version that removed a file
_MAX_ENTRIES = 64


class PlannedFileGone(CommitConflictError):
    """A file an operation planned to read was removed by a newer version and garbage
    collected before the read; nothing was committed (the caller may plan again).

    ``dataset_uuid``, ``version`` (the planned version), ``key`` (the file) and
    ``removed_by`` (the version that removed it, None when its log entry is gone)."""

    def __init__(self, message: str, dataset_uuid: str | None = None, version: int | None = None,
                 key: str | None = None, removed_by: int | None = None) -> None:
        super().__init__(message)
        self.dataset_uuid, self.version, self.key, self.removed_by = dataset_uuid, version, key, removed_by

    def __reduce__(self) -> tuple[Any, ...]:  # Dask and Spark workers send it back pickled
        return (type(self), (str(self), self.dataset_uuid, self.version, self.key, self.removed_by))


def is_missing_file(exc: BaseException) -> bool:
    """True for the error a read of a missing file raises (CorruptMetadataError from KeyNotFoundError)."""
    return isinstance(exc, CorruptMetadataError) and isinstance(exc.__cause__, KeyNotFoundError)


def check_missing(store: Store, dataset_uuid: str, version: int | None, files: Sequence[tuple[str, str]],
                  exc: BaseException, what: str) -> None:
    """A read of ``files`` (``(label, key)`` pairs planned on ``version``) found a file missing
    (``exc``): raise :class:`PlannedFileGone` when the dataset moved on and its newest
    version no longer references a missing one of them; return when it still references
    them (real damage: the caller re-raises ``exc``).

    A dataset deleted meanwhile is a :class:`~kstore.errors.DatasetNotFoundError`. ``what``
    names the operation in the message (``"delete_rows"``). Costs, only on this error path:
    the newest version (1 listing + its replay), an ``exists`` per unreferenced file when
    ``files`` holds more than one, and the log entries up to the one that removed the file.
    """
    head = load.load_head(store, dataset_uuid)
    if head.version is None or (version is not None and head.version <= version):
        return  # nothing newer: a file of the newest version is missing
    newest = head.meta
    if newest is None:
        raise DatasetNotFoundError(
            f"dataset {dataset_uuid!r} was deleted while {what} read the files of version {version}; "
            "nothing was committed") from exc
    refs = newest.referenced_keys()
    gone = [(label, key) for label, key in files if key not in refs]
    if len(files) > 1:  # which one is missing: the error names only one, and one of these may be the damage
        gone = next(([f] for f in gone if not store.exists(f[1])), [])
    if not gone:
        return  # the newest version still references every planned file: the missing one is damage
    label, key = gone[0]
    entry = _removed_by(store, dataset_uuid, version, head.version, label, head.entries)
    by = entry.version if entry is not None else None
    who = (f"version {by} ({entry.operation})" if entry is not None
           else f"a version after {version} (up to {head.version})")
    raise PlannedFileGone(
        f"dataset {dataset_uuid!r}: file {key!r} (partition {label!r}) of version {version}, which {what} "
        f"planned on, was removed by {who} and deleted by garbage collection before {what} read it; "
        "nothing was committed (retry on the newest version)",
        dataset_uuid, version, key, by) from exc


def _removed_by(store: Store, dataset_uuid: str, version: int | None, newest: int, label: str,
                entries: Sequence[LogEntry]) -> LogEntry | None:
    """The log entry of the first version after ``version`` that removed ``label`` (None if unknown)."""
    known = {e.version: e for e in entries}
    lo = -1 if version is None else version
    try:
        wanted = [v for v in load.log_versions(store, dataset_uuid, after=version) if v <= newest][:_MAX_ENTRIES]
    except Exception:  # only names the version: the listing may fail like any store call
        wanted = sorted(v for v in known if lo < v <= newest)

    def entry(v: int) -> LogEntry | None:
        if v in known:
            return known[v]
        try:
            return load.load_entry(store, dataset_uuid, v)
        except (VersionNotFoundError, CorruptMetadataError):
            return None  # expired and deleted meanwhile, or unreadable: keep looking

    for e in parallel_map(entry, wanted, max_workers=8):
        if e is not None and label in e.removed:
            return e
    return None


@contextmanager
def reading_planned(store: Store, dataset_uuid: str, version: int | None,
                    files: Sequence[tuple[str, str]] | Callable[[], Sequence[tuple[str, str]]],
                    what: str) -> Iterator[None]:
    """Run the reads of ``files`` (``(label, key)`` pairs planned on ``version``, or a function
    giving them, called only after a failure); a missing file goes through
    :func:`check_missing` (:class:`PlannedFileGone` when the dataset moved on, the read's own
    error when it is damage)."""
    try:
        yield
    except CorruptMetadataError as exc:
        if is_missing_file(exc):
            check_missing(store, dataset_uuid, version, files() if callable(files) else files, exc, what)
        raise


def replan(attempt: Callable[[int], T], *, what: str,
           gave_up: Callable[[PlannedFileGone], BaseException] | None = None,
           attempts: int = REPLAN_ATTEMPTS) -> T:
    """``attempt(n)`` for n = 0, 1, ...: each plans on the newest version (the first may
    use the caller's) and runs; a :class:`PlannedFileGone` runs it again, at most
    ``attempts`` times, then raises ``gave_up(last)`` (default: a
    :class:`~kstore.errors.CommitConflictError` saying that ``what`` committed nothing)."""
    last: PlannedFileGone | None = None
    for n in range(attempts):
        try:
            return attempt(n)
        except PlannedFileGone as exc:
            last = exc
            log.debug("%s; planning again on the newest version (attempt %d)", exc, n + 1)
    assert last is not None
    if gave_up is not None:
        raise gave_up(last) from last
    raise CommitConflictError(
        f"dataset {last.dataset_uuid!r}: planned files kept vanishing under {attempts} plans of {what} on the "
        "newest version (other writers replace files and garbage collection with a very short retention "
        "deletes them); nothing was committed") from last
