"""History summaries (issue #12, FORMAT.md E.5): ``history()`` and ``as_of=`` cost a
constant number of store calls, and a summary never makes either answer wrong.

The reference answer comes from the same dataset with every summary removed (so each
version is read from its own log entry) and from the model of what was committed. The
tests then try to break the summary: stale summaries beside garbage collection that
expires versions, a GC that died between its marker and its tombstone, damaged and
missing summaries, a dataset upgraded from format 1, a deletion and re-creation.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

import pandas as pd
import pytest

import kstore
from kstore.blocks import history as hist
from kstore.blocks import load
from kstore.core import naming, runtime, serialize
from kstore.errors import DatasetNotFoundError, VersionNotFoundError
from kstore.io.memory import MemoryStore
from kstore.io.store import CountingStore
from tests.format1 import copy_format1


def _gc(*args, **kwargs):
    """``kstore.garbage_collect`` deleting expired versions' entries after LOG_MIN_AGE (one
    hour), the protocol's floor, not the 30-day log retention: the schedules here need the
    entries gone (``log_retention=timedelta(0)`` is what a user may ask for too)."""
    kwargs.setdefault("log_retention", timedelta(0))
    return kstore.garbage_collect(*args, **kwargs)


ZERO = {"retention": timedelta(0), "enforce_retention_duration": False}
EPOCH = datetime(2026, 1, 1, tzinfo=timezone.utc).timestamp()


def frame(i: int) -> pd.DataFrame:
    return pd.DataFrame({"p": [i % 7], "id": [i]})


def without_summaries(store, uuid: str) -> MemoryStore:
    """A copy of ``store`` (any kind) with every history summary removed (the per-entry answer)."""
    copy = MemoryStore()
    for key in store.iter_prefix(""):
        if naming.version_from_summary_key(uuid, key) is None:
            copy.put(key, store.get(key))
    return copy


def rows(entries):
    return [(h.version, h.parent, h.timestamp, h.operation, h.added, h.removed, h.rows_added, h.txn,
             h.n_files, h.info) for h in entries]


def commit_many(store, uuid: str, n: int, clock: runtime.FixedRuntime, start: int = 0) -> None:
    for i in range(start, start + n):
        clock.advance(60)
        if i == 0:
            kstore.store_dataset(store, uuid, frame(i), partition_on="p")
        else:
            kstore.update_dataset(store, uuid, frame(i), partition_on="p",
                                  metadata={"run": i} if i % 97 == 0 else None)


def test_history_of_1000_versions_costs_at_most_20_store_calls():
    store = MemoryStore()
    clock = runtime.FixedRuntime(EPOCH, seed=1)
    with runtime.installed(clock):
        commit_many(store, "ds", 1000, clock)
    counting = CountingStore(store)
    got = kstore.history(counting, "ds")
    calls = sum(counting.calls.values())
    assert calls <= 20, dict(counting.calls)
    assert [h.version for h in got] == list(range(1000))
    assert rows(got) == rows(kstore.history(without_summaries(store, "ds"), "ds"))
    assert sum(h.rows_added for h in got) == 1000 and got[-1].n_files == 1000  # one file (label) per append
    # as_of: same cost, same answer as reading every entry, at 200 random instants
    counting.reset()
    rng = random.Random(7)
    plain = without_summaries(store, "ds")
    for _ in range(200):
        t = datetime.fromtimestamp(EPOCH + rng.uniform(-60, 1000 * 60 + 120), timezone.utc)
        try:
            want: int | VersionNotFoundError = hist.version_as_of(plain, "ds", t)
        except VersionNotFoundError as exc:
            want = exc
        counting.reset()
        if isinstance(want, int):
            assert hist.version_as_of(counting, "ds", t) == want == int((t.timestamp() - EPOCH) // 60) - 1
        else:
            with pytest.raises(VersionNotFoundError):
                hist.version_as_of(counting, "ds", t)
        assert sum(counting.calls.values()) <= 20


def test_a_stale_summary_never_shows_a_version_gc_expired():
    """Versions expire (retention 0) after the newest summary was written: their entries
    become tombstones; the summary still says they are versions of the dataset. The
    ``.expired`` markers GC writes first make history and as_of say what the log says."""
    store = MemoryStore()
    clock = runtime.FixedRuntime(EPOCH, seed=2)
    with runtime.installed(clock):
        commit_many(store, "ds", 25, clock)
        stamps = {h.version: h.timestamp for h in kstore.history(store, "ds")}
        listing = load.list_log(store, "ds")
        assert listing.summaries and listing.summaries[-1] >= 20
        clock.advance(60)
        gc = _gc(store, "ds", **ZERO)
    assert gc.expired_versions == tuple(range(24))
    listing = load.list_log(store, "ds")
    assert set(listing.expired) == set(range(24))  # marked, tombstoned, numbers still taken
    got = kstore.history(store, "ds")
    assert [h.version for h in got] == [h.version for h in kstore.history(without_summaries(store, "ds"), "ds")]
    # the expired versions stay listed (their entries, tombstones now, for the log retention)
    assert [h.version for h in got if not h.expired] == [24] and [h.version for h in got if h.expired] == list(range(24))
    with pytest.raises(VersionNotFoundError, match="expired"):
        hist.version_as_of(store, "ds", stamps[10])  # never version 24's older neighbour
    with pytest.raises(VersionNotFoundError):
        kstore.read_dataset(store, "ds", as_of=stamps[10])
    assert hist.version_as_of(store, "ds", stamps[24]) == 24


def test_a_gc_that_died_after_its_marker_leaves_history_conservative_and_is_repaired():
    store = MemoryStore()
    clock = runtime.FixedRuntime(EPOCH, seed=3)
    with runtime.installed(clock):
        commit_many(store, "ds", 12, clock)
    store.put(naming.expired_key("ds", 3), b"")  # the marker, then the GC died
    assert [h.expired for h in kstore.history(store, "ds") if h.version == 3] == [True]  # conservative: marked
    assert kstore.read_dataset(store, "ds", version=3)["id"].tolist() == [0, 1, 2, 3]  # still readable
    with runtime.installed(clock):
        clock.advance(60)
        _gc(store, "ds")  # default retention keeps version 3: the marker goes
    assert naming.expired_key("ds", 3) not in set(store.iter_prefix("ds/"))
    assert [(h.version, h.expired) for h in kstore.history(store, "ds")] == [(v, False) for v in range(12)]


@pytest.mark.parametrize("damage", ["garbage", "truncated", "wrong-format", "missing"])
def test_a_damaged_or_missing_summary_costs_calls_not_rows(damage, caplog):
    store = MemoryStore()
    clock = runtime.FixedRuntime(EPOCH, seed=4)
    with runtime.installed(clock):
        commit_many(store, "ds", 23, clock)
    newest = load.list_log(store, "ds").summaries[-1]
    key = naming.summary_key("ds", newest)
    data = store.get(key)
    if damage == "missing":
        store.delete(key)
    else:
        store.put(key, {"garbage": b"\x00not zstd", "truncated": data[: len(data) // 2],
                        "wrong-format": serialize.dumps({"summary": 99, "version": newest}, "msgpack.zstd")}[damage])
    want = rows(kstore.history(without_summaries(store, "ds"), "ds"))
    counting = CountingStore(store)
    assert rows(kstore.history(counting, "ds")) == want
    if damage == "missing":  # the older summary (version 10) serves, the 12 entries after it and
        # entry 0 (the first of the run: always read, FORMAT.md E.5)
        assert counting.calls["get"] == 14
    else:
        assert counting.calls["get"] >= 23  # every entry read instead
    if damage != "missing":
        assert "unreadable" in caplog.text
    # the next summary is whole again (the writer backfills what the damaged one lost)
    with runtime.installed(clock):
        commit_many(store, "ds", 10, clock, start=23)
    counting.reset()
    assert rows(kstore.history(counting, "ds")) == rows(kstore.history(without_summaries(store, "ds"), "ds"))
    assert counting.calls["get"] <= 12


def test_history_of_a_dataset_upgraded_from_format1(tmp_path):
    url = f"file://{tmp_path}"
    copy_format1(url, "history", "h")
    for i in range(15):
        kstore.update_dataset(url, "h", pd.DataFrame({"p": [1], "x": [i], "id": [100 + i]}))
    st = kstore.open_store(url)
    got = kstore.history(url, "h")
    assert [h.version for h in got] == list(range(19))
    assert [h.operation for h in got[:4]] == ["create", "append", "overwrite_partitions", "delete_rows"]
    assert rows(got) == rows(kstore.history(without_summaries(st, "h"), "h"))


def test_history_after_delete_and_recreate_starts_at_the_new_dataset():
    store = MemoryStore()
    clock = runtime.FixedRuntime(EPOCH, seed=5)
    with runtime.installed(clock):
        commit_many(store, "ds", 15, clock)
        kstore.delete_dataset(store, "ds")
        with pytest.raises(DatasetNotFoundError):
            kstore.history(store, "ds")
        commit_many(store, "ds", 14, clock)
    got = kstore.history(store, "ds")
    assert [h.operation for h in got][0] == "create" and len(got) == 14
    assert rows(got) == rows(kstore.history(without_summaries(store, "ds"), "ds"))
    assert all(naming.version_from_summary_key("ds", k) is None or
               naming.version_from_summary_key("ds", k) > 15 for k in store.iter_prefix("ds/"))


def test_gc_keeps_only_the_newest_summary():
    store = MemoryStore()
    clock = runtime.FixedRuntime(EPOCH, seed=6)
    with runtime.installed(clock):
        commit_many(store, "ds", 35, clock)
        assert len(load.list_log(store, "ds").summaries) >= 3
        clock.advance(60)
        _gc(store, "ds")
    summaries = load.list_log(store, "ds").summaries
    assert len(summaries) == 1
    assert rows(kstore.history(store, "ds")) == rows(kstore.history(without_summaries(store, "ds"), "ds"))


def test_a_large_create_stays_out_of_the_summaries_and_is_read_once():
    """A create of 1,200 partitions names every label: its record stays out of the summary
    (listed as large), history() reads its entry, and summary writers never re-read it."""
    store = MemoryStore()
    clock = runtime.FixedRuntime(EPOCH, seed=8)
    with runtime.installed(clock):
        kstore.store_dataset(store, "ds", pd.DataFrame({"p": range(1200), "id": range(1200)}), partition_on="p")
        counting = CountingStore(store)
        for i in range(1, 25):
            clock.advance(60)
            kstore.update_dataset(counting, "ds", frame(5000 + i), partition_on="p")
    assert (("get", naming.log_key("ds", 0)) not in counting.keys)  # no summary writer read the create
    newest = load.list_log(store, "ds").summaries[-1]
    summary = hist._summary(store, "ds", newest)
    assert summary is not None and summary.large == (0,) and 0 not in {r.version for r in summary.records}
    assert len(store.get(naming.summary_key("ds", newest))) < 8_000
    counting = CountingStore(store)
    got = kstore.history(counting, "ds")
    assert sum(counting.calls.values()) <= 20 and ("get", naming.log_key("ds", 0)) in counting.keys
    assert got[0].n_files == 1200 and len(got[0].added) == 1200
    assert rows(got) == rows(kstore.history(without_summaries(store, "ds"), "ds"))


@pytest.mark.parametrize("outcome", ["retained", "tombstoned"])
def test_a_summary_written_while_gc_marks_a_version_does_not_outlive_the_marker(outcome):
    """GC marks version 3 expired (the marker before its tombstone); a writer's summary is
    written meanwhile; then GC either finds the version retained after all (its tombstone
    put failed, or a later run keeps it) and deletes the marker, or tombstones the entry
    and deletes the marker. history() then shows the version as live, resp. expired, as the
    per-entry answer does (the simulation found the first case: a summary that had baked
    the marker in kept showing a live version as expired)."""
    store = MemoryStore()
    clock = runtime.FixedRuntime(EPOCH, seed=3)
    with runtime.installed(clock):
        commit_many(store, "ds", 12, clock)
        store.put(naming.expired_key("ds", 3), b"")
        assert [h.version for h in kstore.history(store, "ds") if h.expired] == [3]  # conservative meanwhile
        assert hist.write_summary(store, "ds", 11)
        if outcome == "tombstoned":
            entry = load.load_entry(store, "ds", 3)
            store.put(naming.log_key("ds", 3), serialize.dumps(entry.tombstone().to_dict(), "json"))
        store.delete(naming.expired_key("ds", 3))
        got = kstore.history(store, "ds")
    assert [h.version for h in got if h.expired] == ([3] if outcome == "tombstoned" else [])
    assert rows(got) == rows(kstore.history(without_summaries(store, "ds"), "ds"))
    assert [h.expired for h in got] == [h.expired for h in kstore.history(without_summaries(store, "ds"), "ds")]
