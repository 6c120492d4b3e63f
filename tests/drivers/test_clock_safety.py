"""Acknowledged writes survive wrong clocks, long pauses and claims that land late (#29, items 1-3).

The commit protocol's safety must not depend on any host's clock (FORMAT.md C, C2): a
garbage collection whose clock runs days ahead, a writer whose clock runs behind, or a
writer paused for hours between its checks and its claim may cost availability (a clear
error), never an acknowledged write. A conditional create that the store still processes
(S3 answers others ``409`` meanwhile) must be resolved, never taken for a lost race.

Each test builds the schedule that lost data before, with a clock per actor: a
``FixedRuntime`` installed around that actor's calls.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from datetime import timedelta

import pandas as pd
import pytest

import kstore
from kstore.blocks import load
from kstore.blocks.commit import write_checkpoint
from kstore.core import naming, runtime, serialize
from kstore.errors import CommitConflictError, DatasetNotFoundError, KeyNotFoundError, StoreError
from tests.drivers._stores import HookStore


def _gc(*args, **kwargs):
    """``kstore.garbage_collect`` deleting expired versions' entries after LOG_MIN_AGE (one
    hour), the protocol's floor, not the 30-day log retention: the schedules here need the
    entries gone (``log_retention=timedelta(0)`` is what a user may ask for too)."""
    kwargs.setdefault("log_retention", timedelta(0))
    return kstore.garbage_collect(*args, **kwargs)


UUID = "ds"
DAY = 24 * 3600


def frame(p: list[str], ids: list[int]) -> pd.DataFrame:
    return pd.DataFrame({"p": p, "id": ids})


def ids(url) -> list[int]:
    return sorted(kstore.read_dataset(url, UUID, columns=["id"])["id"].tolist())


def every_listed_version_reads(url) -> None:
    st = kstore.open_store(url)
    for v in load.log_versions(st, UUID):
        entry = load.load_entry(st, UUID, v)
        if entry.has_dataset and v >= min(load.list_log(st, UUID).checkpoints or [v]):
            meta = load.load_version(st, UUID, v)
            for key in meta.referenced_keys():
                assert st.exists(key), f"version {v} references {key}, which is gone"


@pytest.fixture(params=["file", "memory"])
def url(request, tmp_path):
    if request.param == "file":
        return str(tmp_path / "store")
    return f"memory://clock-{request.node.name}"


_seeds = iter(range(1, 1_000_000))


def skewed(seconds: float) -> runtime.FixedRuntime:
    """A runtime whose wall clock is ``seconds`` off the real one (monotonic as well: only
    differences of it are used), with its own random ids (each host draws its own)."""
    return runtime.FixedRuntime(runtime.SystemRuntime().time() + seconds, seed=next(_seeds))


# item 2: a number used, expired and deleted early must not be claimed again --------------


@pytest.mark.parametrize("how", ["gc-clock-8-days-ahead", "writer-paused-2-hours"])
def test_a_claim_of_a_number_gc_deleted_early_is_not_acknowledged(url, how):
    """Writer W stages an append on version 2 and stops right before its claim. Meanwhile
    versions 3 and 4 are committed and a garbage collection deletes entry 3 seconds after
    it was written: its clock is 8 days ahead (default retention), or W was paused for two
    hours (retention 30 minutes). W's claim of 3 then succeeds, on a number whose version
    4 built on another entry: before, W's append was acknowledged and lost (its files
    deleted by that GC too). Now W sees that the entry after its own names another parent,
    retracts its entry and either commits again or fails cleanly; nothing acknowledged is
    lost and every listed version reads."""
    kstore.store_dataset(url, UUID, frame(["a"], [0]), partition_on="p")
    kstore.update_dataset(url, UUID, frame(["b"], [1]))
    kstore.update_dataset(url, UUID, frame(["c"], [2]))
    clock = skewed(0)
    fired: list[object] = []

    def before(method, key):
        if method == "put_if_absent" and key == naming.log_key(UUID, 3) and not fired:
            fired.append(True)
            with runtime.installed(skewed(0)):
                kstore.update_dataset(url, UUID, frame(["d"], [3]))
                kstore.update_dataset(url, UUID, frame(["e"], [4]))
            if how == "gc-clock-8-days-ahead":
                with runtime.installed(skewed(8 * DAY)):
                    gc = _gc(url, UUID)
            else:
                clock.advance(2 * 3600)
                with runtime.installed(skewed(2 * 3600)):
                    gc = _gc(url, UUID, retention=timedelta(minutes=30),
                                                enforce_retention_duration=False)
            assert 3 in gc.expired_versions
            assert not kstore.open_store(url).exists(naming.log_key(UUID, 3))  # deleted seconds after its claim
            fired.append(gc)

    acknowledged = True
    with runtime.installed(clock):
        try:
            kstore.update_dataset(HookStore(url, before=before), UUID, frame(["w"], [99]))
        except CommitConflictError as exc:
            assert "garbage collection" in str(exc)
            acknowledged = False
    assert len(fired) == 2
    got = ids(url)
    assert got == sorted([0, 1, 2, 3, 4] + ([99] if acknowledged else []))
    assert got.count(99) <= 1
    every_listed_version_reads(url)
    # the void claim is marked expired, never read as a version
    st = kstore.open_store(url)
    if st.exists(naming.log_key(UUID, 3)):
        assert load.load_entry(st, UUID, 3).expired


class Killed(BaseException):
    """The writer's process died (no cleanup runs)."""


def number_reused_at(url, version: int, *, kill_retraction: bool = False):
    """A hook for writer W: right before W claims ``version``, two other appends commit it and
    the next one, and a GC whose clock is 8 days ahead deletes entry ``version`` (seconds
    old). ``kill_retraction``: W dies when it marks its void entry expired."""
    fired: list[object] = []

    def before(method, key):
        if method == "put_if_absent" and key == naming.log_key(UUID, version) and not fired:
            fired.append(True)
            with runtime.installed(skewed(0)):
                kstore.update_dataset(url, UUID, frame(["d"], [3]))
                kstore.update_dataset(url, UUID, frame(["e"], [4]))
            with runtime.installed(skewed(8 * DAY)):
                _gc(url, UUID)
            assert not kstore.open_store(url).exists(naming.log_key(UUID, version))
        if kill_retraction and method == "put" and key == naming.log_key(UUID, version):
            raise Killed(key)  # the retraction

    return before, fired


def test_a_void_claim_retries_and_commits_when_its_files_are_safe(url):
    """As above, but W's files are younger than GC's cutoff (W's clock is 2 days ahead, GC's
    8 days at the default retention: its cutoff is 1 day ahead), so GC leaves them: W
    retracts its void entry and commits its append again at the newest version."""
    kstore.store_dataset(url, UUID, frame(["a"], [0]), partition_on="p")
    kstore.update_dataset(url, UUID, frame(["b"], [1]))
    before, fired = number_reused_at(url, 2)
    with runtime.installed(skewed(2 * DAY)):  # W's files are born after GC's cutoff (now + 1 day)
        meta = kstore.update_dataset(HookStore(url, before=before), UUID, frame(["w"], [99]))
    assert fired and meta.version is not None and meta.version > 3  # after X's versions 2 and 3
    assert ids(url) == [0, 1, 3, 4, 99]
    st = kstore.open_store(url)
    assert load.load_entry(st, UUID, 2).expired  # the void claim, retracted
    every_listed_version_reads(url)


# item 3: a wrong clock costs no availability to writers that start after it ----------------


def test_a_file_born_30_days_ahead_does_not_block_a_recreate_after_delete(url):
    with runtime.installed(skewed(30 * DAY)):
        kstore.store_dataset(url, UUID, frame(["a"], [0]), partition_on="p")
    kstore.delete_dataset(url, UUID)  # its fence's cutoff lies 30 days ahead
    meta = kstore.store_dataset(url, UUID, frame(["b"], [1]), partition_on="p")
    assert ids(url) == [1] and meta.version is not None
    kstore.update_dataset(url, UUID, frame(["c"], [2]))
    assert ids(url) == [1, 2]


def test_a_gc_host_days_ahead_does_not_block_writers_that_start_after_it(url):
    kstore.store_dataset(url, UUID, frame(["a"], [0]), partition_on="p")
    kstore.store_dataset(url, UUID, frame(["b"], [1]), partition_on="p", mode="overwrite")  # leaves garbage
    with runtime.installed(skewed(30 * DAY)):
        gc = _gc(url, UUID)
    assert gc.deleted_files and gc.fence_version is not None  # a fence whose cutoff is 23 days ahead
    kstore.update_dataset(url, UUID, frame(["c"], [2]))
    assert ids(url) == [1, 2]


def test_a_writer_that_started_before_a_gc_fence_still_refuses_its_files(url):
    """The rule above must not let through files a fence's GC may have deleted: a write
    whose files predate a fence it had not seen is refused as before."""
    kstore.store_dataset(url, UUID, frame(["a"], [0]), partition_on="p")
    kstore.store_dataset(url, UUID, frame(["b"], [1]), partition_on="p", mode="overwrite")
    fired: list[object] = []

    def before(method, key):
        if method == "put_if_absent" and "/_kstore/log/" in key and not fired:
            with runtime.installed(skewed(30 * DAY)):
                fired.append(_gc(url, UUID))

    with pytest.raises(CommitConflictError, match="garbage collection"):
        kstore.update_dataset(HookStore(url, before=before), UUID, frame(["c"], [2]))
    assert fired and ids(url) == [1]


def test_a_store_error_while_reading_the_fences_is_no_refusal(url):
    """The fence check reads the entries committed since the version the writer read; a
    store error there is a StoreError to retry, not a CommitConflictError blaming a garbage
    collection (seed 3000055 of the mixed simulation: a writer 30 days behind, one failed get)."""
    kstore.store_dataset(url, UUID, frame(["a"], [5]), partition_on="p")
    kstore.store_dataset(url, UUID, frame(["a"], [0]), partition_on="p", mode="overwrite")
    gc = _gc(url, UUID, retention=timedelta(0), enforce_retention_duration=False)
    assert gc.fence_version == 2
    state = {"raced": False, "failed": False}

    def in_fence_check() -> bool:
        frame_ = sys._getframe()
        while frame_ is not None and frame_.f_code.co_name != "_cutoff_since":
            frame_ = frame_.f_back
        return frame_ is not None

    def before(method, key):
        if method == "put_if_absent" and key == naming.log_key(UUID, 3) and not state["raced"]:
            state["raced"] = True
            kstore.update_dataset(url, UUID, frame(["b"], [1]))  # takes version 3 first
        elif method == "get" and key == naming.log_key(UUID, 3) and not state["failed"] and in_fence_check():
            state["failed"] = True
            raise StoreError("injected: the get of log entry 3 failed")

    with runtime.installed(skewed(-2 * DAY)), pytest.raises(StoreError, match="injected"):
        kstore.update_dataset(HookStore(url, before=before), UUID, frame(["c"], [2]))
    assert state["failed"] and ids(url) == [0, 1]
    with runtime.installed(skewed(-2 * DAY)):
        kstore.update_dataset(url, UUID, frame(["c"], [2]))  # its files predate no fence it had not seen
    assert ids(url) == [0, 1, 2]


# item 1: a conditional create in flight is not a lost race ---------------------------------


class InFlightStore(HookStore):
    """The first conditional create of a log entry is held, as S3 holds a request it is
    still processing after the client's connection dropped: the caller gets an error, gets
    of the key find nothing, other conditional creates of the key are answered "exists"
    (S3's 409, which the S3 stores report as not created), and the held request lands
    ``land_after`` calls later."""

    def __init__(self, inner, land_after: int = 6) -> None:
        super().__init__(inner)
        self.held: tuple[str, bytes] | None = None
        self.done = False
        self.countdown = land_after

    def _tick(self) -> None:
        if self.held is not None:
            self.countdown -= 1
            if self.countdown <= 0:
                key, data = self.held
                self.held = None
                self.inner.put_if_absent(key, data)  # lands now (or finds the key taken)

    def _call(self, method, key, *args):
        self._tick()
        if self.held is not None and key == self.held[0]:
            if method == "get":
                raise KeyNotFoundError(key)
            if method == "put_if_absent":
                return False
        if method == "put_if_absent" and "/_kstore/log/" in key and not self.done:
            self.done = True
            self.held = (key, args[0])
            raise StoreError(f"connection dropped while putting {key!r}")
        return super()._call(method, key, *args)


@pytest.mark.parametrize("land_after", [1, 6, 25])
def test_an_append_whose_claim_lands_late_is_committed_once(url, land_after):
    kstore.store_dataset(url, UUID, frame(["a"], [0]), partition_on="p")
    st = InFlightStore(url, land_after=land_after)
    meta = kstore.update_dataset(st, UUID, frame(["b"], [1]))
    while st.held is not None:
        st._tick()
    assert ids(url) == [0, 1]  # once, not twice
    assert load.log_versions(kstore.open_store(url), UUID) == [0, 1] and meta.version == 1


def test_a_partition_overwrite_whose_claim_lands_late_keeps_its_files(url):
    kstore.store_dataset(url, UUID, frame(["a", "b"], [0, 1]), partition_on="p")
    st = InFlightStore(url, land_after=8)
    meta = kstore.update_dataset(st, UUID, frame(["a"], [10]), mode="overwrite_partitions")
    assert meta.version == 1
    while st.held is not None:
        st._tick()
    assert ids(url) == [1, 10]
    every_listed_version_reads(url)


def test_gc_expires_a_void_claim_whose_writer_died_before_retracting_it(url):
    """W's claim of 2 is void (the number was used and deleted while W was paused) and W
    dies before it marks its entry expired: GC must never treat that entry as a version
    (retain it, rebuild it, or keep its files), and readers never see its rows."""
    kstore.store_dataset(url, UUID, frame(["a"], [0]), partition_on="p")
    kstore.update_dataset(url, UUID, frame(["b"], [1]))
    before, fired = number_reused_at(url, 2, kill_retraction=True)

    with runtime.installed(skewed(2 * DAY)), pytest.raises(Killed):
        kstore.update_dataset(HookStore(url, before=before), UUID, frame(["w"], [99]))
    st = kstore.open_store(url)
    assert load.load_entry(st, UUID, 2).operation == "append"  # the void entry, as W left it
    assert ids(url) == [0, 1, 3, 4]
    with runtime.installed(skewed(3 * DAY)):  # W's files are older than this cutoff
        gc = _gc(url, UUID, retention=timedelta(0), enforce_retention_duration=False)
    assert 2 in gc.expired_versions and 2 not in gc.retained_versions
    assert not [k for k in st.iter_prefix(UUID + "/") if "/p=w/" in k]  # W's file: never acknowledged, gone
    assert ids(url) == [0, 1, 3, 4]
    every_listed_version_reads(url)


def test_gc_never_retains_an_entry_whose_successor_names_another_parent(url):
    """A void entry with a young stamp (its writer's clock ahead) would be retained by its
    time; the entry after it proves it is no version: GC expires it and keeps the rest."""
    kstore.store_dataset(url, UUID, frame(["a"], [0]), partition_on="p")
    kstore.update_dataset(url, UUID, frame(["b"], [1]))
    kstore.update_dataset(url, UUID, frame(["c"], [2]))
    st = kstore.open_store(url)
    write_checkpoint(st, load.load_version(st, UUID, 2))  # as the GC that deleted the real entry 1 did
    real = load.load_entry(st, UUID, 1)
    void = replace(real, commit_id="f" * 32, timestamp=real.timestamp + timedelta(days=2))
    st.put(naming.log_key(UUID, 1), serialize.dumps(void.to_dict(), "json"))  # as a void claim leaves it
    gc = _gc(url, UUID, retention=timedelta(days=1), enforce_retention_duration=False)
    assert 1 not in gc.retained_versions and 1 in gc.expired_versions
    assert load.load_entry(st, UUID, 1).expired
    assert ids(url) == [0, 1, 2]


def test_a_reader_never_replays_a_chain_through_a_void_claim(url):
    """Entry 2 replaced by a void claim (another commit_id; the real entry 2 is gone) with no
    checkpoint above it: replaying 3 on top of it would give a state that never existed.
    The reader refuses (CorruptMetadataError) instead of returning wrong rows."""
    kstore.store_dataset(url, UUID, frame(["a"], [0]), partition_on="p")
    for i in (1, 2, 3):
        kstore.update_dataset(url, UUID, frame([f"b{i}"], [i]))
    st = kstore.open_store(url)
    real = load.load_entry(st, UUID, 2)
    void = replace(real, commit_id="f" * 32)  # same content: only the link tells
    st.put(naming.log_key(UUID, 2), serialize.dumps(void.to_dict(), "json"))
    assert load.list_log(st, UUID).checkpoints == (0,)
    with pytest.raises(kstore.errors.CorruptMetadataError):
        kstore.read_dataset(url, UUID)


def three_versions_checkpointed_at_2(url):
    """Versions 0-2 and a checkpoint of 2, as GC writes before it deletes the entries below."""
    kstore.store_dataset(url, UUID, frame(["a"], [0]), partition_on="p")
    kstore.update_dataset(url, UUID, frame(["b"], [1]))
    kstore.update_dataset(url, UUID, frame(["c"], [2]))
    st = kstore.open_store(url)
    write_checkpoint(st, load.load_version(st, UUID, 2))
    return st


def test_history_and_time_travel_never_show_a_linked_void_claim(url):
    """Before GC or its writer retracts it, a void claim (its successor names another
    parent) is no version: history() leaves it out, and time travel to its number is
    VersionNotFoundError, though its entry reads and its checkpoint-free chain looks whole."""
    st = three_versions_checkpointed_at_2(url)
    real = load.load_entry(st, UUID, 1)
    st.put(naming.log_key(UUID, 1), serialize.dumps(replace(real, commit_id="f" * 32).to_dict(), "json"))
    assert [h.version for h in kstore.history(url, UUID)] == [0, 2]
    with pytest.raises(kstore.errors.VersionNotFoundError):
        kstore.read_dataset(url, UUID, version=1)
    assert ids(url) == [0, 1, 2]


def test_history_and_time_travel_never_show_a_void_claim_after_a_gap(url):
    """The paused writer's claim of 1 lands after GC deleted entries 1 and 2 (its successor
    is gone too, so no link tells): no read can rebuild it, and history() must not list it
    (nor a history summary written at that number before: seed 2100084 of the pauses kind)."""
    kstore.store_dataset(url, UUID, frame(["a"], [0]), partition_on="p")
    for i in (1, 2, 3):
        kstore.update_dataset(url, UUID, frame([f"b{i}"], [i]))
    st = kstore.open_store(url)
    write_checkpoint(st, load.load_version(st, UUID, 3))  # as GC does before it deletes entries below
    real = load.load_entry(st, UUID, 1)
    for v in (0, 1, 2):
        st.delete(naming.log_key(UUID, v))
    for c in load.list_log(st, UUID).checkpoints:
        if c < 3:
            st.delete(naming.checkpoint_key(UUID, c))
    st.put(naming.log_key(UUID, 1), serialize.dumps(replace(real, commit_id="f" * 32).to_dict(), "json"))
    assert load.list_log(st, UUID).versions == (1, 3)
    assert [h.version for h in kstore.history(url, UUID)] == [3]
    with pytest.raises(kstore.errors.VersionNotFoundError, match="void claim"):
        load.load_version(st, UUID, 1)
    assert ids(url) == [0, 1, 2, 3]


def test_history_trusts_no_summary_record_of_an_entry_put_again_as_a_tombstone(url):
    """delete_dataset (or GC) paused before its tombstone put of a young entry; GC deleted
    that entry meanwhile; the put lands and lists the number again, as a tombstone. The
    history summary still calls it a version of the dataset: history() must not show it
    (seed 3000665 of the mixed simulation)."""
    kstore.store_dataset(url, UUID, frame(["a"], [0]), partition_on="p")
    kstore.update_dataset(url, UUID, frame(["b"], [1]))
    st = kstore.open_store(url)
    assert 0 in load.list_log(st, UUID).summaries
    write_checkpoint(st, load.load_version(st, UUID, 1))
    entry = load.load_entry(st, UUID, 0)
    st.delete(naming.log_key(UUID, 0))
    st.delete(naming.checkpoint_key(UUID, 0))
    st.put(naming.log_key(UUID, 0), serialize.dumps(entry.tombstone().to_dict(), "json"))
    # listed as what it is now: an expired version (the tombstone of version 0's own entry)
    assert [(h.version, h.expired) for h in kstore.history(url, UUID)] == [(0, True), (1, False)]
    assert ids(url) == [0, 1]


def test_history_trusts_no_summary_record_of_an_isolated_tombstone_with_a_checkpoint(url):
    """As above, but the tombstone put lands while the version's checkpoint is still there
    (delete_dataset paused before deleting it) and the entries on both sides are gone: one
    get of the entry shows it is no version (seed 3100232 of the mixed simulation)."""
    st = three_versions_checkpointed_at_2(url)
    entry = load.load_entry(st, UUID, 0)
    for v in (0, 1):
        st.delete(naming.log_key(UUID, v))
    st.put(naming.log_key(UUID, 0), serialize.dumps(entry.tombstone().to_dict(), "json"))
    assert 0 in load.list_log(st, UUID).checkpoints and 0 in load.list_log(st, UUID).summaries
    assert [h.version for h in kstore.history(url, UUID)] == [2]
    assert ids(url) == [0, 1, 2]


def test_history_of_a_deleted_dataset_whose_delete_entry_gc_removed(url):
    """delete_dataset committed its fence but died before removing entry 0; a later GC of the
    deleted dataset committed a vacuum fence and (the delete entry being old) deleted the
    delete entry. The newest record is a fence: the dataset does not exist, and history()
    must not show the old incarnation's version 0 (seed 3102141 of the mixed simulation)."""
    kstore.store_dataset(url, UUID, frame(["a"], [0]), partition_on="p")
    st = kstore.open_store(url)
    entry0 = st.get(naming.log_key(UUID, 0))
    kstore.delete_dataset(url, UUID)  # fence: version 1
    st.put(naming.log_key(UUID, 0), entry0)  # as if the deletion had died before removing it
    fence = load.load_entry(st, UUID, 1)
    vacuum = replace(fence, version=2, operation="vacuum", parent=1)
    st.put(naming.log_key(UUID, 2), serialize.dumps(vacuum.to_dict(), "json"))
    st.delete(naming.log_key(UUID, 1))
    assert load.list_log(st, UUID).versions == (0, 2)
    with pytest.raises(kstore.errors.DatasetNotFoundError, match="does not exist"):
        kstore.history(url, UUID)


class OnceDamaged(HookStore):
    """Returns ``key`` damaged once (as a store does between a damaged put and the put that
    repairs it: GC rewrites the checkpoints it needs)."""

    def __init__(self, inner, key: str) -> None:
        super().__init__(inner)
        self.key, self.served = key, False

    def get(self, key):
        data = super().get(key)
        if key == self.key and not self.served:
            self.served = True
            return data[: len(data) // 3]
        return data


def test_a_checkpoint_repaired_while_a_reader_read_around_it_is_used(url):
    """The reader got the checkpoint damaged and found no entries below it to read around
    it; the checkpoint was written again meanwhile: the read succeeds instead of raising
    CorruptMetadataError on an intact dataset (seed 3200675 of the mixed simulation)."""
    st = three_versions_checkpointed_at_2(url)
    for v in (0, 1):
        st.delete(naming.log_key(UUID, v))
    flaky = OnceDamaged(url, naming.checkpoint_key(UUID, 2))
    assert sorted(kstore.read_dataset(flaky, UUID, columns=["id"])["id"]) == [0, 1, 2]
    assert flaky.served


def test_gc_replaces_a_damaged_checkpoint_it_needs(url):
    """The other side: a damaged checkpoint of a version GC keeps as the first of a run is
    written again (replaced) and verified before any entry below it is deleted."""
    st = three_versions_checkpointed_at_2(url)
    good = st.get(naming.checkpoint_key(UUID, 2))
    st.put(naming.checkpoint_key(UUID, 2), good[: len(good) // 3])
    later = runtime.FixedRuntime(runtime.SystemRuntime().time() + timedelta(hours=2).total_seconds(), seed=11)
    with runtime.installed(later):
        gc = _gc(url, UUID, retention=timedelta(0), enforce_retention_duration=False)
    assert gc.expired_versions == (0, 1)
    assert st.get(naming.checkpoint_key(UUID, 2)) == good
    assert sorted(kstore.read_dataset(url, UUID, columns=["id"])["id"]) == [0, 1, 2]


def test_a_delete_fence_behind_a_gc_fence_does_not_hide_its_cutoff(url):
    """Seed 1400355 of the create-delete-mixed simulation. Writer W (clock 30 days ahead)
    writes the files of an overwrite and stops before its claim. A garbage collection with
    the same clock fences and deletes those files as orphans; then a host with a right
    clock deletes the dataset, whose fence's cutoff is a month older than the GC's. W's
    create then compared its files only with the newest fence's cutoff and committed a
    version whose files were gone. Every fence committed after the version W had read
    counts, a delete in between included: W is refused and nothing it wrote is listed."""
    kstore.store_dataset(url, UUID, frame(["a"], [0]), partition_on="p")
    ahead = runtime.SystemRuntime().time() + 30 * DAY
    fired: list[object] = []

    def before(method, key):
        if method == "put_if_absent" and "/_kstore/log/" in key and not fired:
            with runtime.installed(runtime.FixedRuntime(ahead + 60, seed=7)):
                fired.append(_gc(url, UUID, retention=timedelta(0),
                                                    enforce_retention_duration=False))
            with runtime.installed(runtime.SystemRuntime()):
                kstore.delete_dataset(url, UUID)

    with runtime.installed(runtime.FixedRuntime(ahead, seed=8)), pytest.raises(CommitConflictError,
                                                                                match="garbage collection"):
        kstore.store_dataset(HookStore(url, before=before), UUID, frame(["b"], [1]), partition_on="p",
                             mode="overwrite")
    assert fired and fired[0].deleted_files  # the GC did delete W's files
    with pytest.raises(DatasetNotFoundError):
        kstore.read_dataset(url, UUID)
    kstore.store_dataset(url, UUID, frame(["c"], [2]), partition_on="p")  # a new create is not blocked
    assert ids(url) == [2]

def test_gc_retains_no_version_before_a_deletion(url):
    """delete_dataset committed its fence, deleted entry 0 and paused before it removed
    entry 1 (young: kept as a full entry until then). A GC meanwhile must not treat version 1
    as retained (it would try to rebuild it and fail: its base is gone) but expire it: the
    dataset was deleted (seed 3202134 of the mixed simulation)."""
    kstore.store_dataset(url, UUID, frame(["a"], [0]), partition_on="p")
    kstore.update_dataset(url, UUID, frame(["b"], [1]))
    st = kstore.open_store(url)
    entry1 = st.get(naming.log_key(UUID, 1))
    kstore.delete_dataset(url, UUID)  # fence: version 2
    st.put(naming.log_key(UUID, 1), entry1)  # as the paused deletion left it
    for c in load.list_log(st, UUID).checkpoints:
        st.delete(naming.checkpoint_key(UUID, c))
    gc = _gc(url, UUID)  # the default retention: version 1 is young
    assert 1 in gc.expired_versions and 1 not in gc.retained_versions
    with pytest.raises(kstore.errors.DatasetNotFoundError):
        kstore.read_dataset(url, UUID)


class _Died(BaseException):
    """A process killed mid-call (not an Exception: nothing in kstore handles it)."""


def test_one_gc_removes_every_file_of_a_deletion_that_died_after_its_fence(url):
    """delete_dataset claimed its fence and died before it published the empty main file or
    deleted a file: the stale main file still names every file. One GC past the retention
    repairs the main file first, so nothing is left for a second run (seed 3000094 of the
    mixed simulation)."""
    kstore.store_dataset(url, UUID, frame(["a", "b"], [0, 1]), partition_on="p")
    claimed = []

    def after(method, key, result):
        if method == "put_if_absent" and key.startswith(naming.log_prefix(UUID)):
            claimed.append(key)
            raise _Died()

    with pytest.raises(_Died):
        kstore.delete_dataset(HookStore(url, after=after), UUID)
    assert claimed == [naming.log_key(UUID, 1)]
    st = kstore.open_store(url)
    assert load.load_main(st, UUID)[0] is not None  # the stale main file
    later = runtime.FixedRuntime(runtime.SystemRuntime().time() + timedelta(days=30).total_seconds(), seed=7)
    with runtime.installed(later):
        _gc(url, UUID)
    left = [k for k in st.iter_prefix(naming.dataset_prefix(UUID))
            if not k.startswith(naming.log_prefix(UUID)) and not k.endswith(naming.COMMON_METADATA)]
    assert left == []  # (GC keeps log entries and _common_metadata, FORMAT.md)
    assert load.load_main(st, UUID)[0] is None
    with pytest.raises(kstore.errors.DatasetNotFoundError):
        kstore.read_dataset(url, UUID)


class DamagingPuts(HookStore):
    """A store that damages what it is given for ``key`` (truncated, as a failed upload)."""

    def __init__(self, inner, key: str) -> None:
        super().__init__(inner)
        self.key = key

    def put(self, key, data):
        return super().put(key, data[: len(data) // 3] if key == self.key else data)

    def put_if_absent(self, key, data):
        return super().put_if_absent(key, data[: len(data) // 3] if key == self.key else data)


def test_a_late_writer_never_replaces_the_checkpoint_gc_relies_on(url):
    """GC verified the checkpoint of version 2 and deleted the entries below it; the writer
    of version 2, paused until then, writes its own copy of that checkpoint, which the store
    damages. The verified one must stay: it is the only source of version 2 now (seed
    3301223 of the mixed simulation made every actor fail on the damaged copy)."""
    st = three_versions_checkpointed_at_2(url)
    for v in (0, 1):
        st.delete(naming.log_key(UUID, v))  # as GC does once the checkpoint reads back
    meta = load.load_version(st, UUID, 2)
    write_checkpoint(DamagingPuts(url, naming.checkpoint_key(UUID, 2)), meta)  # the late writer
    assert sorted(kstore.read_dataset(url, UUID, columns=["id"])["id"]) == [0, 1, 2]
    kstore.update_dataset(url, UUID, frame(["d"], [3]))
    assert sorted(kstore.read_dataset(url, UUID, columns=["id"])["id"]) == [0, 1, 2, 3]


def test_a_reader_around_a_damaged_checkpoint_tolerates_a_gap_gc_made_below_it(url):
    """A reader found the checkpoint of version 3 damaged; meanwhile GC wrote it again and
    deleted entry 2 (a base: the create after a delete). Listed again, the log reads
    3, 1, 0 around the skipped checkpoint: the gap means the log moved, not that the delete
    fence of version 1 lies in the chain (seed 1301531 of the create-delete-mixed
    simulation raised CorruptMetadataError there)."""
    kstore.store_dataset(url, UUID, frame(["a"], [0]), partition_on="p")
    kstore.delete_dataset(url, UUID)  # version 1: no dataset
    kstore.store_dataset(url, UUID, frame(["b"], [1]), partition_on="p")  # version 2: a base
    kstore.update_dataset(url, UUID, frame(["c"], [2]))
    st = kstore.open_store(url)
    cp = naming.checkpoint_key(UUID, 3)
    write_checkpoint(st, load.load_version(st, UUID, 3))
    good = st.get(cp)
    st.put(cp, good[: len(good) // 3])
    acted = []

    def gc_meanwhile(method, key, result):
        if method == "get" and key == cp and not acted:
            acted.append(key)
            st.put(cp, good)
            st.delete(naming.log_key(UUID, 2))

    reader = HookStore(url, after=gc_meanwhile)
    assert sorted(kstore.read_dataset(reader, UUID, columns=["id"])["id"]) == [1, 2]
    assert acted


def test_a_create_claimed_below_a_gap_is_no_version(url):
    """Seed 1000309 of the create-delete-mixed simulation. Writer W stages the create of a
    new dataset and stops before its claim of number 0. Meanwhile another writer creates
    the dataset and appends twice, and a garbage collection whose clock runs 30 days ahead
    expires versions 0 and 1 (their entries deleted). W's claim of 0 then lands: a whole
    state, so it rebuilds, but it re-used an expired number (the entry after it is gone,
    nothing links it). W cannot tell and says so (CommitStateUnknownError); history(),
    time travel and the next garbage collection must treat the entry as no version: not
    listed, not readable, its entry removed (the first GC deleted its files as orphans)."""
    fired: list[object] = []
    ahead = runtime.FixedRuntime(runtime.SystemRuntime().time() + 30 * DAY, seed=11)

    def before(method, key):
        if method == "put_if_absent" and key.endswith(naming.log_key(UUID, 0)) and not fired:
            with runtime.installed(runtime.SystemRuntime()):
                kstore.store_dataset(url, UUID, frame(["a"], [0]), partition_on="p")
                kstore.update_dataset(url, UUID, frame(["b"], [1]))
                kstore.update_dataset(url, UUID, frame(["c"], [2]))
            with runtime.installed(ahead):
                fired.append(_gc(url, UUID))

    with pytest.raises(kstore.errors.CommitStateUnknownError):
        kstore.store_dataset(HookStore(url, before=before), UUID, frame(["w"], [9]), partition_on="p")
    st = kstore.open_store(url)
    assert fired and fired[0].expired_versions == (0, 1)
    assert load.list_log(st, UUID).versions == (0, 2, 3)  # W's entry at 0 below the gap; 3: GC's fence
    assert load.load_entry(st, UUID, 0).operation == "create"
    assert [h.version for h in kstore.history(url, UUID)] == [2, 3]
    with pytest.raises(kstore.errors.VersionNotFoundError, match="version 1 is gone"):
        load.load_version(st, UUID, 0)
    assert ids(url) == [0, 1, 2]
    assert any("/p=w/" in k for k in fired[0].deleted_files)  # W's files went as orphans
    with runtime.installed(ahead):
        gc = _gc(url, UUID)
    assert 0 in gc.expired_versions
    assert 0 not in load.list_log(st, UUID).versions and ids(url) == [0, 1, 2]
    every_listed_version_reads(url)
