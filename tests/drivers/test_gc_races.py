"""Writes that read files of the version they planned on, beside a compaction and a garbage
collection with retention 0 (issue #29, item 6).

``delete_rows`` reads the files whose rows it filters, ``build_indices`` the files it
indexes, a compaction the files it merges. A compaction (or any write removing files)
committed after the plan, and a GC with retention 0, can delete those files before they are
read. That is not damage: a stale snapshot's operation is a ``CommitConflictError`` naming
the file and the version that removed it (nothing committed); an operation on the newest
version plans again on the newer one. A missing file the newest version still references
stays a ``CorruptMetadataError``. Each race is interleaved deterministically by a store
wrapper that runs the compaction and the GC just before the planned file is opened.
"""

from __future__ import annotations

import io
import pickle
import random
import threading
import time
from datetime import timedelta

import pandas as pd
import pyarrow.parquet as pq
import pytest

import kstore
from kstore.blocks import load
from kstore.blocks.compact import plan_compaction, rewrite_groups
from kstore.blocks.planned import PlannedFileGone
from kstore.errors import CommitConflictError, CorruptMetadataError
from tests.drivers._stores import HookStore

UUID = "ds"
ZERO = {"retention": timedelta(0), "enforce_retention_duration": False}


@pytest.fixture(params=["file", "memory"])
def url(request, tmp_path):
    if request.param == "file":
        return str(tmp_path / "store")
    return f"memory://gc-races-{request.node.name}"


def frame(p: list[str], ids: list[int]) -> pd.DataFrame:
    return pd.DataFrame({"p": p, "id": ids, "x": [i % 5 for i in ids]})


def make(url: str) -> list[int]:
    """Version 0 and 1: two files in each of partitions a and b (ids 0..7, x = id % 5)."""
    kstore.store_dataset(url, UUID, frame(["a", "a", "b", "b"], [0, 1, 2, 3]), partition_on="p")
    kstore.update_dataset(url, UUID, frame(["a", "a", "b", "b"], [4, 5, 6, 7]))
    return list(range(8))


def ids(url: str) -> list[int]:
    return sorted(kstore.read_dataset(url, UUID, columns=["id"])["id"].tolist())


def keys(url: str) -> set[str]:
    return set(kstore.open_store(url).iter_prefix(""))


def newest(url: str) -> int:
    return kstore.load_metadata(url, UUID).version


def every_retained_version_reads(url: str) -> None:
    st = kstore.open_store(url)
    for v in load.log_versions(st, UUID):
        entry = load.load_entry(st, UUID, v)
        if entry.has_dataset:
            for key in load.entry_metadata(st, UUID, entry).referenced_keys():
                assert st.exists(key), f"version {v} references {key}, which is gone"


class Race:
    """A ``before`` hook for :class:`HookStore`: just before the ``at``-th open of a data file
    (1 = the first), commit ``change`` (default: a compaction) on the plain store and collect
    garbage with retention 0 — the planned files are then gone. ``every`` repeats it on every
    ``at``-th open after that too."""

    def __init__(self, url: str, *, at: int = 1, change=None, every: bool = False) -> None:
        self.url, self.at, self.every = url, at, every
        self.change = change or (lambda u: kstore.compact(u, UUID))
        self.opens = 0
        self.runs: list[tuple[int, tuple[str, ...]]] = []  # (version the change committed, files GC deleted)
        self.keys_after: set[str] = set()

    def __call__(self, method: str, key: str) -> None:
        if method != "open" or "/table/" not in key:
            return
        self.opens += 1
        if self.opens == self.at or (self.every and self.opens % self.at == 0):
            self.change(self.url)
            version = newest(self.url)
            gc = kstore.garbage_collect(self.url, UUID, **ZERO)
            assert key in gc.deleted_files  # the file about to be opened is gone
            self.runs.append((version, gc.deleted_files))
            self.keys_after = keys(self.url)


# delete_rows ---------------------------------------------------------------------------------


def test_delete_rows_of_the_newest_version_plans_again_after_a_compaction_and_gc(url):
    """The delete planned version 1; before it reads its first file a compaction commits
    version 2 and GC (fence version 3) deletes version 1's files. It plans again on version 3:
    exactly the matching rows are gone, every other row is there once."""
    rows = make(url)
    race = Race(url)
    meta = kstore.delete_rows(HookStore(url, before=race), UUID, [[("x", "==", 1)]])
    assert race.runs and race.runs[0][0] == 2
    assert meta.version == 4 and newest(url) == 4
    assert ids(url) == [i for i in rows if i % 5 != 1]
    assert [h.operation for h in kstore.history(url, UUID)][-3:] == ["compaction", "vacuum", "delete_rows"]
    every_retained_version_reads(url)


def test_a_stale_snapshots_delete_rows_conflicts_naming_the_file_and_the_version(url):
    """The race strikes at the second file: the first one was read and rewritten already.
    CommitConflictError naming the dataset, the file and the compaction's version; nothing
    committed and the rewritten file deleted; a fresh snapshot then deletes the rows."""
    rows = make(url)
    race = Race(url, at=2)
    snap = kstore.open_dataset(HookStore(url, before=race), UUID)
    with pytest.raises(CommitConflictError) as err:
        snap.delete_rows([[("x", "==", 1)]])
    exc = err.value
    assert isinstance(exc, PlannedFileGone)
    assert (exc.dataset_uuid, exc.version, exc.removed_by) == (UUID, 1, 2)
    assert exc.key in race.runs[0][1]
    assert repr(UUID) in str(exc) and repr(exc.key) in str(exc) and "version 2 (compaction)" in str(exc)
    assert "nothing was committed" in str(exc)
    assert newest(url) == 3 and ids(url) == rows  # the compaction and the fence only
    assert keys(url) == race.keys_after  # the file the delete had rewritten is gone again
    every_retained_version_reads(url)
    fresh = kstore.open_dataset(url, UUID).delete_rows([[("x", "==", 1)]])
    assert fresh.version == 4 and ids(url) == [i for i in rows if i % 5 != 1]


def test_delete_rows_gives_up_when_its_files_keep_vanishing(url, monkeypatch):
    """Every plan's first file is replaced (overwrite_partitions) and collected before it is
    read: after a bounded number of plans a CommitConflictError, nothing committed. (One file
    read at a time, so that every plan meets the race first; with several threads a file may
    be read before it and the commit's conflict check refuses instead, also committing
    nothing.)"""
    monkeypatch.setenv("KSTORE_THREADS", "1")
    make(url)

    def overwrite(u):
        kstore.update_dataset(u, UUID, kstore.read_dataset(u, UUID), mode="overwrite_partitions")

    race = Race(url, change=overwrite, every=True)
    with pytest.raises(CommitConflictError, match="kept vanishing under 5 plans of delete_rows") as err:
        kstore.delete_rows(HookStore(url, before=race), UUID, [[("x", "==", 1)]])
    assert isinstance(err.value.__cause__, PlannedFileGone)
    assert len(race.runs) == 5
    assert ids(url) == list(range(8))  # nothing of the delete was committed
    assert all(h.operation != "delete_rows" for h in kstore.history(url, UUID))
    every_retained_version_reads(url)


# build_indices -------------------------------------------------------------------------------


@pytest.mark.parametrize("stale", [False, True], ids=["newest", "snapshot"])
def test_build_indices_after_a_compaction_and_gc_indexes_the_newest_files(url, stale):
    """An index does not depend on the files it planned: the build starts again on the
    newest version (a stale snapshot's too) and the index covers exactly its files."""
    make(url)
    race = Race(url)
    hooked = HookStore(url, before=race)
    meta = (kstore.open_dataset(hooked, UUID).build_indices("x").metadata if stale
            else kstore.build_indices(hooked, UUID, ["x"]))
    assert race.runs and meta.version == 4 and "x" in meta.indices
    st = kstore.open_store(url)
    idx = load.load_indices(st, meta, ["x"], kstore.read_schema(url, UUID))["x"]
    by_label = {lab: pq.read_table(io.BytesIO(st.get(f[meta.table]))).column("x").to_pylist()
                for lab, f in meta.partitions.items()}
    for v in range(5):
        assert sorted(idx.lookup_labels("==", v)) == sorted(lab for lab, xs in by_label.items() if v in xs)
        got = kstore.read_dataset(url, UUID, predicates=[[("x", "==", v)]])["id"].tolist()
        assert sorted(got) == [i for i in range(8) if i % 5 == v]
    every_retained_version_reads(url)


# compaction ----------------------------------------------------------------------------------


def test_a_compaction_whose_files_a_newer_version_removed_conflicts_naming_it(url):
    make(url)
    st = kstore.open_store(url)
    plan = plan_compaction(st, UUID)
    assert plan.files_in == 4
    kstore.delete_rows(url, UUID, [[("x", "==", 1)]])  # version 2 rewrites one file of each partition
    kstore.garbage_collect(url, UUID, **ZERO)
    with pytest.raises(PlannedFileGone, match=r"removed by version 2 \(delete_rows\)") as err:
        rewrite_groups(st, plan, max_workers=1)
    assert err.value.removed_by == 2 and repr(UUID) in str(err.value)
    assert newest(url) == 3 and ids(url) == [i for i in range(8) if i % 5 != 1]
    every_retained_version_reads(url)


# real damage stays damage --------------------------------------------------------------------


def _lose_a_file_of_the_newest_version(url: str) -> None:
    """Delete version 1's first file of partition a, then commit version 2 (an append to
    partition c) that still references it: the dataset moved on, but the file is damage."""
    meta = kstore.load_metadata(url, UUID)
    label = sorted(lab for lab in meta.partitions if lab.startswith("p=a/"))[0]
    kstore.open_store(url).delete(meta.file_key(label))
    kstore.update_dataset(url, UUID, frame(["c"], [8]))


@pytest.mark.parametrize("operation", ["delete_rows", "snapshot delete_rows", "build_indices", "compaction"])
def test_a_missing_file_the_newest_version_references_is_still_damage(url, operation):
    make(url)
    st = kstore.open_store(url)
    snap = kstore.open_dataset(url, UUID)
    plan = plan_compaction(st, UUID)
    _lose_a_file_of_the_newest_version(url)
    run = {
        "delete_rows": lambda: kstore.delete_rows(url, UUID, [[("x", "<", 5)]]),
        "snapshot delete_rows": lambda: snap.delete_rows([[("x", "<", 5)]]),
        "build_indices": lambda: snap.build_indices("x"),
        "compaction": lambda: rewrite_groups(st, plan, max_workers=1),
    }[operation]
    with pytest.raises(CorruptMetadataError, match="is missing"):
        run()
    assert newest(url) == 2


def test_planned_file_gone_survives_pickling():  # Dask and Spark workers send it back pickled
    exc = PlannedFileGone("dataset 'd': gone", "d", 3, "d/table/k.parquet", 4)
    back = pickle.loads(pickle.dumps(exc))
    assert isinstance(back, CommitConflictError)
    assert (str(back), back.dataset_uuid, back.version, back.key, back.removed_by) == (
        str(exc), "d", 3, "d/table/k.parquet", 4)


# seeded randomized race ----------------------------------------------------------------------

SECONDS = 5.0


def test_delete_rows_compaction_and_gc_in_threads_lose_and_damage_nothing(url):
    """Threads for ``SECONDS`` (seeded choices): appends of fresh ids, delete_rows of
    acknowledged ids and build_indices (both slow readers: their first data file opens only
    after the next two GCs, at most 1 s), compactions, and GC with retention 0. No
    CorruptMetadataError; only CommitConflictError may fail an operation (nothing
    committed); the final rows are exactly the acknowledged appends minus the acknowledged
    deletes, each once."""
    rng = random.Random(20240629)
    seeds = [rng.randrange(2**32) for _ in range(5)]
    kstore.store_dataset(url, UUID, frame(["a", "b", "c"], [0, 1, 2]), partition_on="p")
    lock = threading.Condition()
    present: set[int] = {0, 1, 2}
    next_id = [3]
    gcs = [0]
    errors: list[BaseException] = []
    tried = {"append": 0, "delete_rows": 0, "build_indices": 0, "compaction": 0, "gc": 0}
    acked = dict(tried)
    stop = time.monotonic() + SECONDS

    def loop(name, fn, seed):
        r = random.Random(seed)
        while time.monotonic() < stop and not errors:
            with lock:
                tried[name] += 1
            try:
                if fn(r):
                    with lock:
                        acked[name] += 1
            except CommitConflictError:
                pass  # nothing committed: the model is unchanged
            except BaseException as exc:  # noqa: BLE001 - any other error fails the test
                errors.append(exc)
            time.sleep(r.uniform(0, 0.02))

    def slow(r):
        """The store as a slow reader sees it: its first data file opens after the next two
        GCs finished (at most 1 s): a compaction and a GC may remove the files it planned."""
        first = [True]

        def wait(method, key):
            if method == "open" and "/table/" in key and first[0]:
                first[0] = False
                with lock:
                    target = gcs[0] + 2
                    lock.wait_for(lambda: gcs[0] >= target or time.monotonic() > stop, timeout=r.uniform(0.2, 1))

        return HookStore(url, before=wait)

    def append(r):
        with lock:
            new = list(range(next_id[0], next_id[0] + r.randint(1, 3)))
            next_id[0] += len(new)
        kstore.update_dataset(url, UUID, frame([r.choice("abc") for _ in new], new))
        with lock:
            present.update(new)
        return True

    def delete(r):
        with lock:
            victims = r.sample(sorted(present), min(len(present), r.randint(1, 3)))
        if not victims:
            return False
        kstore.delete_rows(slow(r), UUID, [[("id", "in", victims)]])
        with lock:
            present.difference_update(victims)
        return True

    def index(r):
        kstore.build_indices(slow(r), UUID, ["x"])
        return True

    def compact(r):
        return kstore.compact(url, UUID, max_workers=1).committed is not None

    def gc(r):
        kstore.garbage_collect(url, UUID, **ZERO)
        with lock:
            gcs[0] += 1
            lock.notify_all()
        return True

    jobs = [("append", append), ("delete_rows", delete), ("build_indices", index), ("compaction", compact), ("gc", gc)]
    threads = [threading.Thread(target=loop, args=(name, fn, seed)) for (name, fn), seed in zip(jobs, seeds)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert all(tried.values()) and acked["append"] and acked["compaction"] and acked["gc"], (tried, acked)
    assert ids(url) == sorted(present)
    every_retained_version_reads(url)
