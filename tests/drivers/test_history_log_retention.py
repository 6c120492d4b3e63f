"""History outlives garbage collection for the log retention (#33, Delta's
``logRetentionDuration``): expired versions stay in ``history()`` (``expired=True``, with their
operation, counts, txn and info) while their data follows the data retention.

What is tried to break: an expired version must never read (its files may be gone), every
version ``history()`` lists must have been committed, tombstones older than the log
retention must go (and only those), a deletion still ends the history, and the setting is
validated.
"""

from __future__ import annotations

from datetime import timedelta

import pandas as pd
import pytest

import kstore
from kstore.core import runtime
from kstore.errors import InvalidArgumentError, VersionNotFoundError
from kstore.io.store import open_store

DAY = 24 * 3600


@pytest.fixture
def clock():
    c = runtime.FixedRuntime(runtime.SystemRuntime().time(), seed=7)
    with runtime.installed(c):
        yield c


def _log_keys(store, uuid="d") -> list[str]:
    return sorted(k for k in open_store(store).iter_prefix(f"{uuid}/_kstore/log/") if k.endswith(".json"))


def test_expired_versions_stay_in_history_until_the_log_retention(store_url, clock):
    kstore.store_dataset(store_url, "d", pd.DataFrame({"x": [1, 2]}))
    for i in range(3):
        kstore.update_dataset(store_url, "d", pd.DataFrame({"x": [i]}), txn=("app", i))
    clock.advance(8 * DAY)
    kstore.update_dataset(store_url, "d", pd.DataFrame({"x": [9]}))
    result = kstore.garbage_collect(store_url, "d")
    assert result.expired_versions == (0, 1, 2)
    rows = kstore.history(store_url, "d")
    assert [(h.version, h.operation, h.expired) for h in rows] == [
        (0, "create", True), (1, "append", True), (2, "append", True), (3, "append", False), (4, "append", False),
    ] + [(h.version, h.operation, False) for h in rows[5:]]
    assert [h.rows_added for h in rows[:3]] == [2, 1, 1] and rows[1].txn == ("app", 0)
    for v in (0, 1, 2):  # listed, but not readable: their data follows the data retention
        with pytest.raises(VersionNotFoundError):
            kstore.read_dataset(store_url, "d", version=v)
    assert kstore.history(store_url, "d", limit=2)[-1].version == rows[-1].version
    # 31 days later a GC deletes the tombstones (older than the log retention)
    clock.advance(31 * DAY)
    kstore.update_dataset(store_url, "d", pd.DataFrame({"x": [10]}))
    kstore.garbage_collect(store_url, "d")
    after = kstore.history(store_url, "d")
    assert all(h.version > 2 for h in after)
    assert not any(k.endswith(f"{v:020d}.json") for k in _log_keys(store_url) for v in (0, 1, 2))


def test_log_retention_zero_keeps_the_old_behaviour(store_url, clock):
    """Entries of expired versions older than an hour (LOG_MIN_AGE) go at once; history shows
    the retained versions only."""
    kstore.store_dataset(store_url, "d", pd.DataFrame({"x": [1]}))
    kstore.update_dataset(store_url, "d", pd.DataFrame({"x": [2]}))
    clock.advance(8 * DAY)
    kstore.update_dataset(store_url, "d", pd.DataFrame({"x": [3]}))
    kstore.garbage_collect(store_url, "d", log_retention=timedelta(0))
    assert not [h for h in kstore.history(store_url, "d") if h.expired]
    assert not any(k.endswith(f"{0:020d}.json") for k in _log_keys(store_url))


def test_a_deletion_still_ends_the_history(store_url, clock):
    kstore.store_dataset(store_url, "d", pd.DataFrame({"x": [1]}))
    kstore.update_dataset(store_url, "d", pd.DataFrame({"x": [2]}))
    kstore.delete_dataset(store_url, "d")
    kstore.store_dataset(store_url, "d", pd.DataFrame({"y": [1]}))
    kstore.update_dataset(store_url, "d", pd.DataFrame({"y": [1]}))
    clock.advance(8 * DAY)
    kstore.update_dataset(store_url, "d", pd.DataFrame({"y": [2]}))
    kstore.update_dataset(store_url, "d", pd.DataFrame({"y": [3]}))
    kstore.garbage_collect(store_url, "d")
    shown = kstore.history(store_url, "d")
    assert [(h.version, h.operation, h.expired) for h in shown[:2]] == [(3, "create", True), (4, "append", False)]


@pytest.mark.parametrize("bad", [timedelta(days=-1), 30, "30d"])
def test_log_retention_is_validated(store_url, bad):
    kstore.store_dataset(store_url, "d", pd.DataFrame({"x": [1]}))
    with pytest.raises(InvalidArgumentError, match="log_retention"):
        kstore.garbage_collect(store_url, "d", log_retention=bad)
