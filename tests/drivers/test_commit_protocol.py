"""Regression tests of the commit/GC protocol: one per way acknowledged writes were lost.

Each test reproduces a schedule that lost an acknowledged write (or left a version that
does not read) before the protocol of FORMAT.md ("Commit protocol", "Garbage collection")
and asserts that it no longer can. The deterministic simulation suite
(``tests/simulation/``) explores such schedules at random; these pin the known ones.
"""

from __future__ import annotations

import threading
import time
import warnings
from datetime import timedelta

import minimalkv
import pandas as pd
import pytest

import kstore
from kstore.blocks import load
from kstore.core import naming, runtime
from kstore.errors import (
    CommitConflictError,
    CommitStateUnknownError,
    CorruptMetadataError,
    DatasetNotFoundError,
    InvalidArgumentError,
    KstoreError,
    StoreError,
    StoreNotFoundError,
    UnsafeStoreWarning,
    VersionNotFoundError,
)
from kstore.io.kv import KVStore
from tests.drivers._stores import HookStore

UUID = "ds"
ZERO = {"retention": timedelta(0), "enforce_retention_duration": False}


class Killed(BaseException):
    """The process died: no ``except Exception`` cleanup runs, and no later store call happens."""


class Mortal(HookStore):
    """A store seen by one process: ``kill_when(method, key)`` kills it before (or after)
    that call; every call after the death fails without effect, as for a SIGKILLed process."""

    def __init__(self, inner, kill_when, after: bool = False) -> None:
        super().__init__(inner)
        self.dead = False
        self.kill_when, self.kill_after = kill_when, after

    def _call(self, method, key, *args):
        if self.dead:
            raise Killed(method, key)
        if not self.kill_after and self.kill_when(method, key):
            self.dead = True
            raise Killed(method, key)
        result = super()._call(method, key, *args)
        if self.kill_after and self.kill_when(method, key):
            self.dead = True
            raise Killed(method, key)
        return result


def frame(p: list[str], ids: list[int]) -> pd.DataFrame:
    return pd.DataFrame({"p": p, "id": ids, "x": [i % 5 for i in ids]})


def ids(url, **kw) -> list[int]:
    return sorted(kstore.read_dataset(url, UUID, columns=["id"], **kw)["id"].tolist())


def _keys(url) -> list[str]:
    try:
        return list(kstore.open_store(url).iter_prefix(""))
    except StoreNotFoundError:
        return []  # nothing written: not even the store's root


def versions(url) -> list[int]:
    try:
        return load.log_versions(kstore.open_store(url), UUID)
    except kstore.errors.StoreNotFoundError:  # nothing was ever written
        return []


def every_retained_version_reads(url) -> None:
    st = kstore.open_store(url)
    for v in versions(url):
        entry = load.load_entry(st, UUID, v)
        if entry.has_dataset:
            for key in load.entry_metadata(st, UUID, entry).referenced_keys():
                assert st.exists(key), f"version {v} references {key}, which is gone"


@pytest.fixture(params=["file", "memory"])
def url(request, tmp_path):
    if request.param == "file":
        return str(tmp_path / "store")
    return f"memory://protocol-{request.node.name}"


# 1. GC at the default retention beside committing writers -----------------------------


def test_gc_never_deletes_a_log_entry_claimed_while_it_runs(url):
    """Writer A claims version 1 while GC lists the dataset and pauses before publishing; GC
    finishes; writer B commits; then A publishes. GC used to delete A's fresh log entry as
    an unreferenced file, B then claimed version 1 again, and one of the two writes was lost."""
    kstore.store_dataset(url, UUID, frame(["a"], [0]), partition_on="p")
    claimed, publish = threading.Event(), threading.Event()
    out: dict = {}

    def pause_after_claim(method, key, result):
        if method == "put_if_absent" and key == naming.log_key(UUID, 1):
            claimed.set()
            assert publish.wait(30)

    def writer_a():
        try:
            out["a"] = kstore.update_dataset(HookStore(url, after=pause_after_claim), UUID, frame(["b"], [1])).version
        except BaseException as exc:  # reported below
            out["a"] = exc
            claimed.set()

    a = threading.Thread(target=writer_a)

    def start_a_during_the_listing(method, key):
        if method == "iter_prefix" and key == naming.dataset_prefix(UUID) and not a.is_alive() and "a" not in out:
            a.start()
            assert claimed.wait(30)

    kstore.garbage_collect(HookStore(url, before=start_a_during_the_listing), UUID)  # default retention
    out["b"] = kstore.update_dataset(url, UUID, frame(["c"], [2])).version
    publish.set()
    a.join(30)
    assert (out["a"], out["b"]) == (1, 2), out
    assert versions(url) == [0, 1, 2] and ids(url) == [0, 1, 2]
    assert load.load_main(kstore.open_store(url), UUID)[0].version == 2


# 2. a failed publish must not delete a committed version's files ----------------------


def test_failed_publish_keeps_the_committed_version(url):
    kstore.store_dataset(url, UUID, frame(["a"], [0]), partition_on="p")
    failing = HookStore(url, before=lambda m, k: _raise_on_main_put(m, k))
    with pytest.raises(CommitStateUnknownError) as info:
        kstore.update_dataset(failing, UUID, frame(["b"], [1]))
    assert info.value.committed is True and info.value.version == 1
    every_retained_version_reads(url)
    assert ids(url) == [0, 1]  # readers follow the log: the version is there
    assert kstore.update_dataset(url, UUID, frame(["c"], [2])).version == 2
    assert ids(url) == [0, 1, 2] and load.load_main(kstore.open_store(url), UUID)[0].version == 2


def _raise_on_main_put(method, key):
    if method == "put" and key == naming.metadata_key(UUID):
        raise StoreError("503 Slow Down")


def test_unstorable_metadata_fails_before_the_commit_point(url):
    """msgpack cannot hold 2**70: this used to claim version 0, fail to write the main
    file and leave a dataset that did not read."""
    with pytest.raises(InvalidArgumentError, match="2\\*\\*70|1180591620717411303424"):
        kstore.store_dataset(url, UUID, frame(["a"], [0]), partition_on="p", metadata={"n": 2**70},
                             metadata_format="msgpack.zstd")
    assert versions(url) == [] and not _keys(url)
    with pytest.raises(DatasetNotFoundError):
        kstore.read_dataset(url, UUID)
    assert kstore.store_dataset(url, UUID, frame(["a"], [0]), partition_on="p",
                                metadata_format="msgpack.zstd").version == 0


# 3. writers killed between claim and publish, then GC, then a new writer ----------------


@pytest.mark.parametrize("gc_kind", ["zero", "default-after-the-window"])
def test_killed_claims_then_gc_then_a_new_writer(url, gc_kind):
    kstore.store_dataset(url, UUID, frame(["a"], [0]), partition_on="p")
    for i in (1, 2):  # two writers die after their claim, before their publish
        dying = Mortal(url, lambda m, k: m == "put" and k == naming.metadata_key(UUID))
        with pytest.raises(Killed):
            kstore.update_dataset(dying, UUID, frame(["b"], [i]))
    assert versions(url) == [0, 1, 2] and load.load_main(kstore.open_store(url), UUID)[0].version == 0
    clock = runtime.FixedRuntime(runtime.current().time())
    with runtime.installed(clock):
        if gc_kind == "zero":
            kstore.garbage_collect(url, UUID, **ZERO)
        else:
            clock.advance(timedelta(days=8).total_seconds())
            kstore.garbage_collect(url, UUID)
        clock.advance(1)
        meta = kstore.update_dataset(url, UUID, frame(["c"], [3]))
    st = kstore.open_store(url)
    assert meta.version == max(versions(url)) and len(set(versions(url))) == len(versions(url))
    assert ids(url) == [0, 1, 2, 3]  # the claimed versions are committed; nothing lost
    assert load.load_main(st, UUID)[0].version == meta.version
    every_retained_version_reads(url)


@pytest.mark.parametrize("stall_at", ["listing", "index-file"])
def test_a_writer_never_claims_on_a_stale_listing(url, stall_at):
    """A writer stalls for two hours after it listed the log; meanwhile versions 1 and 2 are
    committed, and GC deletes their entries (expired, older than an hour). Claiming the
    number its old listing saw free (1) would commit on a stale base and lose the write:
    a commit lists again when its listing is older than BASE_MAX_AGE."""
    kstore.store_dataset(url, UUID, frame(["a"], [0]), partition_on="p", secondary_indices=["id"])
    clock = runtime.FixedRuntime(runtime.current().time())
    done = []

    def at(method, key, *result):
        if stall_at == "listing":  # right after the writer listed the log
            return method == "iter_prefix" and key == naming.log_prefix(UUID)
        return method == "put_if_absent" and key.startswith(f"{UUID}/indices/")  # inside the commit

    def stall(method, key, *result):
        if at(method, key) and not done:
            done.append(True)
            kstore.update_dataset(url, UUID, frame(["b"], [1]))
            kstore.update_dataset(url, UUID, frame(["c"], [2]))
            clock.advance(2 * 3600)
            kstore.update_dataset(url, UUID, frame(["d"], [3]))
            # (log_retention=0: the entries older than an hour are deleted, not kept for history)
            gc = kstore.garbage_collect(url, UUID, retention=timedelta(minutes=30), enforce_retention_duration=False,
                                        log_retention=timedelta(0))
            assert set(gc.expired_versions) == {0, 1}  # entries older than an hour: deleted

    with runtime.installed(clock):
        if stall_at == "listing":  # the files are written after the stall: the write commits
            meta = kstore.update_dataset(HookStore(url, after=stall), UUID, frame(["e"], [4]))
            assert meta.version == max(versions(url)) >= 4 and ids(url) == [0, 1, 2, 3, 4]
        else:  # the files predate GC's cutoff: refused, nothing committed
            with pytest.raises(CommitConflictError, match="garbage collection"):
                kstore.update_dataset(HookStore(url, before=stall), UUID, frame(["e"], [4]))
            assert ids(url) == [0, 1, 2, 3] and max(versions(url)) == 4  # version 4: GC's fence
    assert 1 not in versions(url) and 0 not in versions(url)  # never claimed a second time
    every_retained_version_reads(url)


# 4. GC with a short retention during a write ---------------------------------------------


@pytest.mark.parametrize("retention", [timedelta(0), timedelta(seconds=2)])
def test_short_retention_gc_during_a_write_fails_the_write_not_the_dataset(url, retention):
    kstore.store_dataset(url, UUID, frame(["a"], [0]), partition_on="p", secondary_indices="x")
    clock = runtime.FixedRuntime(runtime.current().time())
    ran = []

    def gc_before_claim(method, key):
        if method == "put_if_absent" and "/_kstore/log/" in key and not ran:
            clock.advance(5)  # the write took a few seconds
            ran.append(kstore.garbage_collect(url, UUID, retention=retention, enforce_retention_duration=False))

    with runtime.installed(clock):
        with pytest.raises(CommitConflictError, match="garbage collection"):
            kstore.update_dataset(HookStore(url, before=gc_before_claim), UUID, frame(["b", "c"], [1, 2]))
        assert ran and ran[0].deleted_files  # it did delete the writer's files
        every_retained_version_reads(url)
        assert ids(url) == [0]
        clock.advance(1)
        assert kstore.update_dataset(url, UUID, frame(["b", "c"], [1, 2])).version == 2  # a retry succeeds
    assert ids(url) == [0, 1, 2]
    assert sorted(kstore.read_dataset(url, UUID, predicates=[[("x", "==", 1)]])["id"]) == [1]


def test_gc_refuses_a_short_retention_unless_asked(url):
    kstore.store_dataset(url, UUID, frame(["a"], [0]), partition_on="p")
    for retention in (timedelta(0), timedelta(days=6, hours=23)):
        with pytest.raises(InvalidArgumentError, match="enforce_retention_duration=False"):
            kstore.garbage_collect(url, UUID, retention=retention)
    assert kstore.garbage_collect(url, UUID, retention=timedelta(days=7)).deleted_files == ()


# 5. a failed create leaves orphans ---------------------------------------------------------


def test_gc_and_delete_clean_the_orphans_of_a_failed_create(url):
    st = kstore.open_store(url)
    dying = Mortal(url, lambda m, k: m == "put_if_absent" and "/_kstore/log/" in k)
    with pytest.raises(Killed):
        kstore.store_dataset(dying, UUID, frame(["a", "b"], [0, 1]), partition_on="p", secondary_indices="x")
    orphans = sorted(st.iter_prefix(UUID + "/"))
    assert orphans and versions(url) == []
    with pytest.raises(DatasetNotFoundError):
        kstore.read_dataset(url, UUID)
    assert kstore.garbage_collect(url, UUID).deleted_files == ()  # young: may be a write in progress
    # a millisecond later at least: a file born in GC's own millisecond is not older than
    # its cutoff, so it stays (a fast memory store can get there within that millisecond)
    time.sleep(0.005)
    gc = kstore.garbage_collect(url, UUID, **ZERO)
    assert sorted(gc.deleted_files) == orphans
    # what stays is the fence (the cutoff a create still running must respect)
    assert sorted(st.iter_prefix(UUID + "/")) == [naming.log_key(UUID, 0)]
    with pytest.raises(DatasetNotFoundError):
        kstore.read_dataset(url, UUID)
    assert kstore.store_dataset(url, UUID, frame(["a"], [5]), partition_on="p").version == 1
    assert ids(url) == [5]
    # delete_dataset works on a dataset that never committed, too
    with pytest.raises(Killed):
        kstore.store_dataset(Mortal(url, lambda m, k: m == "put_if_absent" and "/_kstore/log/" in k),
                             "other", frame(["a"], [0]), partition_on="p")
    assert list(st.iter_prefix("other/"))
    assert kstore.delete_dataset(url, "other") >= 1
    assert [k for k in st.iter_prefix("other/") if "/_kstore/log/" not in k] == []


def test_a_create_that_started_before_the_gc_cutoff_fails_cleanly(url):
    """A create still writing when GC (retention 0) removes its files must not commit them."""
    clock = runtime.FixedRuntime(runtime.current().time())
    ran = []

    def gc_before_claim(method, key):
        if method == "put_if_absent" and "/_kstore/log/" in key and not ran:
            clock.advance(1)
            ran.append(kstore.garbage_collect(url, UUID, **ZERO))

    with runtime.installed(clock), pytest.raises(CommitConflictError):
        kstore.store_dataset(HookStore(url, before=gc_before_claim), UUID, frame(["a"], [0]), partition_on="p")
    assert ran[0].deleted_files and ran[0].fence_version == 0
    with pytest.raises(DatasetNotFoundError):
        kstore.read_dataset(url, UUID)


# 6. stores without an atomic create ------------------------------------------------------


def test_a_store_without_atomic_create_warns_at_the_commit():
    kv = KVStore(minimalkv.get_store_from_url("hmemory://"))
    with pytest.warns(UnsafeStoreWarning, match="more than one process"):
        kstore.store_dataset(kv, UUID, frame(["a"], [0]), partition_on="p")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnsafeStoreWarning)
        assert kstore.read_dataset(kv, UUID)["id"].tolist() == [0]  # reads do not warn


def test_check_then_put_claims_are_read_back():
    """Two writers through check-then-put: B checks and puts, A (which checked before) puts
    over it. B reads its claim back, sees A's, and retries: no version is claimed twice."""
    raw = minimalkv.get_store_from_url("hmemory://")
    with pytest.warns(UnsafeStoreWarning):
        kstore.store_dataset(KVStore(raw), UUID, frame(["a"], [0]), partition_on="p")
    a_done = []

    def b_then_a(method, key):  # runs inside B's claim, between its put and its read-back
        if method == "get" and key == naming.log_key(UUID, 1) and not a_done:
            a_done.append(True)
            raw.put(key, raw.get(key).replace(b'"commit_id":"', b'"commit_id":"A'))  # A's put wins

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnsafeStoreWarning)
        meta = kstore.update_dataset(HookStore(KVStore(raw), before=b_then_a), UUID, frame(["b"], [1]))
    assert a_done and meta.version == 2  # B noticed it lost version 1 and committed version 2


# readers beside a short-retention GC ------------------------------------------------------


@pytest.mark.parametrize("pinned", [False, True])
def test_a_read_whose_files_gc_removes_reads_the_newer_version_or_says_expired(url, pinned):
    """A reader planned version 0; before it opens the file, an overwrite commits version 1
    and GC (retention 0) deletes version 0's file. A read of the newest version plans again
    (on version 1); a read pinned to version 0 says the version expired (not "corrupt")."""
    kstore.store_dataset(url, UUID, frame(["a"], [0]), partition_on="p")
    done = []

    def overwrite_and_collect(method, key):
        if method == "open" and not done:
            done.append(True)
            kstore.update_dataset(url, UUID, frame(["a"], [1]), mode="overwrite_partitions")
            kstore.garbage_collect(url, UUID, **ZERO)

    reader = HookStore(url, before=overwrite_and_collect)
    if pinned:
        with pytest.raises(VersionNotFoundError, match="version 0 was expired by garbage collection"):
            kstore.read_dataset(reader, UUID, version=0)
    else:
        assert kstore.read_dataset(reader, UUID)["id"].tolist() == [1]
    assert done


def test_a_missing_file_of_the_newest_version_is_still_damage(url):
    meta = kstore.store_dataset(url, UUID, frame(["a"], [0]), partition_on="p")
    kstore.open_store(url).delete(next(iter(meta.referenced_keys() - {meta.stats_key})))
    with pytest.raises(CorruptMetadataError, match="is missing"):
        kstore.read_dataset(url, UUID)


# damaged log entries ----------------------------------------------------------------------

DAMAGE = {
    "garbage bytes": lambda e: b"\x00\xffnot json",
    "not a mapping": lambda e: b"[1, 2, 3]",
    "no timestamp": lambda e: _dump({k: v for k, v in e.items() if k != "timestamp"}),
    "timestamp not iso": lambda e: _dump({**e, "timestamp": "yesterday"}),
    "timestamp a number": lambda e: _dump({**e, "timestamp": 12}),
    "version mismatch": lambda e: _dump({**e, "version": 99}),
    "version a string": lambda e: _dump({**e, "version": "1"}),
    "txn malformed": lambda e: _dump({**e, "txn": ["app"]}),
    "added not labels": lambda e: _dump({**e, "added": [1, 2]}),
    "actions a list": lambda e: _dump({**e, "actions": [1]}),
    "format unknown": lambda e: _dump({**e, "format": 9}),
    "state of another dataset": lambda e: _dump({**e, "actions": {**e["actions"], "state": {
        **e["actions"]["state"], "dataset_uuid": "other"}}}),
    "state of another version": lambda e: _dump({**e, "actions": {**e["actions"], "state": {
        **e["actions"]["state"], "kstore": {**e["actions"]["state"]["kstore"], "version": 7}}}}),
    "added files not arrow": lambda e: _dump({**e, "actions": {**e["actions"], "add": "bm90IGFycm93"}}),
    "added file outside the dataset": lambda e: _dump({**e, "actions": {**e["actions"], "add": _ipc_outside()}}),
    "cutoff not a number": lambda e: _dump({**e, "orphan_cutoff_ms": "soon"}),
    "expired not a bool": lambda e: _dump({**e, "expired": "yes"}),
}


def _ipc_outside() -> str:
    from kstore.core.filetable import FileTable, ipc_text

    return ipc_text(FileTable.from_partitions({"p=1/x": {"table": "elsewhere/x.parquet"}}).table)


def _dump(raw) -> bytes:
    import json

    return json.dumps(raw).encode()


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damaged_log_entries_give_clear_errors(url, damage):
    """One damaged (retained, not newest) log entry: every consumer answers with a clear
    KstoreError naming the dataset and version, or works; reads of the newest version work
    (they replay from the newest checkpoint, version 10, which lies above the damage)."""
    import json

    kstore.store_dataset(url, UUID, frame(["a"], [0]), partition_on="p")
    for i in range(1, 12):
        kstore.update_dataset(url, UUID, frame([f"u{i}"], [i]))
    st = kstore.open_store(url)
    assert st.exists(naming.checkpoint_key(UUID, 10))
    key = naming.log_key(UUID, 1)
    st.put(key, DAMAGE[damage](json.loads(st.get(key))))
    assert ids(url) == list(range(12))  # the newest version does not need entry 1
    calls = {
        "history": lambda: kstore.history(url, UUID),
        "version=1": lambda: kstore.read_dataset(url, UUID, version=1),
        "as_of": lambda: kstore.read_dataset(url, UUID, as_of=_as_of(url)),
        "diff": lambda: kstore.diff(url, UUID, 0, 1),
        "gc": lambda: kstore.garbage_collect(url, UUID),
        "gc zero": lambda: kstore.garbage_collect(url, UUID, **ZERO),
    }
    for name, call in calls.items():
        try:
            call()
        except KstoreError as exc:
            assert f"'{UUID}'" in str(exc), (name, exc)
            if "version 1" not in str(exc) and name in ("history", "version=1", "diff"):
                raise AssertionError(f"{name}: the error does not name the damaged version: {exc}") from exc
    assert ids(url) == list(range(12))
    nxt = max(versions(url)) + 1  # GC may have committed its fence
    assert kstore.update_dataset(url, UUID, frame(["d"], [3])).version == nxt


@pytest.mark.parametrize("damage", ["garbage bytes", "state of another version", "added files not arrow"])
def test_a_damaged_entry_in_the_newest_replay_chain_is_a_clear_error(url, damage):
    """Format 2 replays the entries after the newest checkpoint: one of them damaged makes
    the newest version unreadable with a CorruptMetadataError naming the dataset and the
    version, never a crash or a wrong state; a commit refuses to build on it."""
    import json

    kstore.store_dataset(url, UUID, frame(["a"], [0]), partition_on="p")
    kstore.update_dataset(url, UUID, frame(["b"], [1]))
    kstore.update_dataset(url, UUID, frame(["c"], [2]))
    st = kstore.open_store(url)
    key = naming.log_key(UUID, 1)
    st.put(key, DAMAGE[damage](json.loads(st.get(key))))
    for call in (lambda: kstore.read_dataset(url, UUID), lambda: kstore.update_dataset(url, UUID, frame(["d"], [3]))):
        with pytest.raises(CorruptMetadataError, match=f"'{UUID}'.*version 1"):
            call()
    assert kstore.read_dataset(url, UUID, version=0)["id"].tolist() == [0]


def _as_of(url):
    from datetime import datetime, timezone

    return datetime.now(timezone.utc)
