"""Issue #29 item 4: a write never lands in another dataset of the same name.

After ``delete_dataset`` and a re-create (or ``store_dataset(mode="overwrite")``), a write
that read the dataset before must fail with ``CommitConflictError`` (FORMAT.md C step 1:
"the dataset was created or deleted meanwhile"), committing nothing and leaving no file:

- every typed operation of a stale :class:`kstore.Snapshot`;
- an eager write whose head was loaded before the delete (its files written after it);
- the same for datasets written before incarnations existed (format 1, or a re-create by a
  kstore that does not record one): the log after the version read decides;
- writes to the same dataset keep committing (appends commute, fences change nothing).

The dataset's incarnation is the ``commit_id`` of the entry that created it, kept in the
small state (``kstore.incarnation``) by every later version.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pandas as pd
import pytest

import kstore
from kstore.blocks import load
from kstore.blocks.job import WriteRequest, finish_write, prepare_write, write_files
from kstore.core import naming
from kstore.core.metadata import DatasetMetadata
from kstore.core.operations import Append, Compaction, Operation
from kstore.errors import CommitConflictError, CorruptMetadataError, DatasetNotFoundError
from tests.format1 import copy_format1

UUID = "inc"
ZERO = {"retention": timedelta(0), "enforce_retention_duration": False}


def frame(ids, p: int | None = None) -> pd.DataFrame:
    ids = list(ids)
    return pd.DataFrame({"p": [i % 3 if p is None else p for i in ids], "x": [i * 10 for i in ids], "id": ids})


def ids(source, uuid: str = UUID) -> set[int]:
    df = source.read() if isinstance(source, kstore.Snapshot) else kstore.read_dataset(source, uuid)
    return set(df["id"].tolist())


def keys(url: str) -> set[str]:
    return set(kstore.open_store(url).iter_prefix(""))


def create(url: str, rows=range(6), indices=("x",), uuid: str = UUID) -> kstore.Snapshot:
    kstore.store_dataset(url, uuid, frame(rows), partition_on=["p"], secondary_indices=list(indices) or None)
    return kstore.open_dataset(url, uuid)


def recreate(url: str, rows=range(100, 106), indices=("x",), uuid: str = UUID) -> kstore.Snapshot:
    kstore.delete_dataset(url, uuid)
    return create(url, rows, indices, uuid)


def assert_untouched(url: str, new: kstore.Snapshot, before: set[str], uuid: str = UUID) -> None:
    """Nothing was committed to the new dataset and nothing of the failed write is left."""
    now = kstore.open_dataset(url, uuid)
    assert now.version == new.version
    assert ids(url, uuid) == ids(new)
    assert now.index_columns == new.index_columns
    assert keys(url) == before


# -- the operations of a stale snapshot --------------------------------------------------------


OPS = {
    "append": lambda s: s.append(frame([50])),
    "append to a new partition": lambda s: s.append(frame([50], p=9)),
    "overwrite_partitions of a partition neither has": lambda s: s.overwrite_partitions(frame([51], p=9)),
    "drop_indices": lambda s: s.drop_indices("x"),
    "build_indices": lambda s: s.build_indices("id"),
    "delete_rows": lambda s: s.delete_rows([[("id", "==", 1)]]),
    "delete_partitions": lambda s: s.delete_partitions([{"p": 1}]),
    "overwrite_partitions": lambda s: s.overwrite_partitions(frame([52], p=1)),
}


@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("how", ["delete and create", "overwrite"])
def test_a_stale_snapshot_does_not_commit_into_the_new_dataset(store_url, op, how):
    old = create(store_url)
    if how == "overwrite":
        kstore.store_dataset(store_url, UUID, frame(range(100, 106)), partition_on=["p"], secondary_indices=["x"],
                             mode="overwrite")
        new = kstore.open_dataset(store_url, UUID)
    else:
        new = recreate(store_url)
    before = keys(store_url)
    with pytest.raises(CommitConflictError, match=f"dataset {UUID!r}"):
        OPS[op](old)
    assert_untouched(store_url, new, before)


def test_the_conflict_names_the_dataset_and_both_versions(store_url):
    old = create(store_url)
    new = recreate(store_url)
    with pytest.raises(CommitConflictError) as err:
        old.append(frame([50]))
    msg = str(err.value)
    assert f"dataset {UUID!r}" in msg and f"version {old.version}" in msg and f"version {new.version}" in msg
    assert "created again" in msg


def test_a_snapshot_of_a_deleted_dataset_fails_cleanly(store_url):
    old = create(store_url)
    kstore.delete_dataset(store_url, UUID)
    before = keys(store_url)
    for op in ("append", "drop_indices"):
        with pytest.raises(DatasetNotFoundError):
            OPS[op](old)
    assert keys(store_url) == before


# -- eager writes whose head is stale --------------------------------------------------------------


@pytest.mark.parametrize("mode", ["append", "overwrite_partitions"])
def test_an_eager_write_prepared_before_a_re_create_conflicts(store_url, mode):
    create(store_url)
    st = kstore.open_store(store_url)
    job = prepare_write(st, UUID, WriteRequest.of(UUID, mode, must_exist=True))  # loads the head of the first dataset
    new = recreate(store_url)
    before = keys(store_url)
    files, schema = write_files(job, frame([60], p=9))  # written after the delete: no orphan cutoff stops them
    with pytest.raises(CommitConflictError, match="created again"):
        finish_write(job, files, schema)
    assert_untouched(store_url, new, before)


@pytest.mark.parametrize("verb", ["build_indices", "drop_indices"])
def test_mutations_of_the_newest_version_conflict_when_it_is_re_created_meanwhile(store_url, monkeypatch, verb):
    """kstore.build_indices / drop_indices load the newest version, work on it, then commit:
    a re-create in between is a conflict (the work was done for the other dataset)."""
    from kstore.blocks import mutate

    create(store_url)
    real = mutate.commit
    state: dict = {}

    def recreate_first(*args, **kwargs):
        if not state:
            state["new"] = recreate(store_url)
            state["before"] = keys(store_url)
        return real(*args, **kwargs)

    monkeypatch.setattr(mutate, "commit", recreate_first)
    with pytest.raises(CommitConflictError, match="created again"):
        if verb == "build_indices":
            kstore.build_indices(store_url, UUID, ["id"])
        else:
            kstore.drop_indices(store_url, UUID, ["x"])
    assert_untouched(store_url, state["new"], state["before"])


def test_a_compaction_planned_before_a_re_create_conflicts(store_url, monkeypatch):
    """A compaction plans on the newest version, rewrites, then commits: a re-create in
    between is a conflict that names the re-creation (not a missing file), and the new
    dataset keeps its files."""
    from kstore.blocks import compact

    create(store_url)
    kstore.update_dataset(store_url, UUID, frame(range(6, 12)))  # two files per partition
    real = compact.commit
    state: dict = {}

    def recreate_first(*args, **kwargs):
        if not state:
            state["new"] = recreate(store_url)
            kstore.update_dataset(store_url, UUID, frame(range(106, 112)))
            kstore.update_dataset(store_url, UUID, frame(range(112, 118)))
            state["new"] = kstore.open_dataset(store_url, UUID)
            state["before"] = keys(store_url)
        return real(*args, **kwargs)

    monkeypatch.setattr(compact, "commit", recreate_first)
    with pytest.raises(CommitConflictError, match="created again"):
        kstore.compact(store_url, UUID, target_file_size=1 << 30)
    assert_untouched(store_url, state["new"], state["before"])


# -- the same dataset: nothing changes ---------------------------------------------------------------


def test_writes_to_the_same_dataset_still_commit(store_url):
    old = create(store_url)
    kstore.update_dataset(store_url, UUID, frame([20]))
    kstore.garbage_collect(store_url, UUID)  # a fence (when there is garbage) is no re-create
    newer = old.append(frame([21]))
    assert ids(newer) == set(range(6)) | {20, 21}
    newer = old.build_indices("id")
    assert "id" in newer.index_columns
    assert ids(old.drop_indices("x")) == set(range(6)) | {20, 21}


def test_the_incarnation_is_recorded_by_the_create_and_carried_by_every_version(store_url):
    first = create(store_url).metadata.incarnation
    assert isinstance(first, str) and first
    for i in range(12):  # past a checkpoint
        kstore.update_dataset(store_url, UUID, frame([200 + i]))
    st = kstore.open_store(store_url)
    newest = kstore.open_dataset(store_url, UUID)
    assert load.list_log(st, UUID).checkpoints  # read through a checkpoint
    assert newest.metadata.incarnation == first
    assert {load.load_version(st, UUID, v).incarnation for v in range(newest.version + 1)} == {first}
    entry = load.load_entry(st, UUID, 0)
    assert entry.actions["state"]["kstore"]["incarnation"] == first == entry.commit_id
    main = json.loads(st.get(naming.metadata_key(UUID, "json")))
    assert main["kstore"]["incarnation"] == first  # kartothek's view carries it too (kartothek ignores it)
    kstore.store_dataset(store_url, UUID, frame([1]), partition_on=["p"], mode="overwrite")
    second = kstore.open_dataset(store_url, UUID).metadata.incarnation
    third = recreate(store_url).metadata.incarnation
    assert len({first, second, third}) == 3


def test_the_incarnation_round_trips_and_is_validated():
    m = DatasetMetadata.new("d").evolve(version=0, incarnation="abc")
    assert DatasetMetadata.from_dict(m.to_dict()).incarnation == "abc"
    assert "incarnation" not in DatasetMetadata.new("d").to_dict()["kstore"]  # none: the key is left out
    for bad in (5, ["a"], "", "x" * 300):
        raw = m.to_dict()
        raw["kstore"]["incarnation"] = bad
        with pytest.raises(CorruptMetadataError, match="incarnation"):
            DatasetMetadata.from_dict(raw)


def test_check_compares_incarnations():
    base = DatasetMetadata.new("d").evolve(version=4, incarnation="B")
    legacy = DatasetMetadata.new("d").evolve(version=4)

    def op(read: str | None, **kw) -> Operation:
        return Append(read_version=2, read_incarnation=read, checks_incarnation=True, **kw)

    op("B").check(base, dataset_uuid="d")
    for read in ("A", None):  # another incarnation, or one read before the dataset had any
        with pytest.raises(CommitConflictError, match="created again"):
            op(read).check(base, dataset_uuid="d")
    op("A").check(legacy, dataset_uuid="d")  # the state cannot tell: the commit reads the log
    op(None).check(legacy, dataset_uuid="d")
    Compaction(read_version=2).check(base, dataset_uuid="d")  # an op that does not say


# -- datasets written before incarnations -------------------------------------------------------------


def strip_incarnation(url: str, uuid: str, version: int) -> None:
    """Make version ``version`` look written by a kstore without incarnations (its entry's
    state loses the key; checkpoints, being derived, are removed)."""
    st = kstore.open_store(url)
    key = naming.log_key(uuid, version)
    raw = json.loads(st.get(key))
    del raw["actions"]["state"]["kstore"]["incarnation"]
    st.put(key, json.dumps(raw).encode())
    listing = load.list_log(st, uuid)
    for c in listing.checkpoints:
        st.delete(naming.checkpoint_key(uuid, c))
    st.delete(naming.last_checkpoint_key(uuid))


@pytest.fixture
def legacy(store_url):
    copy_format1(store_url, "history", "h")  # real bytes of a kstore before incarnations (format 1)
    return store_url


def test_a_legacy_snapshot_conflicts_with_a_new_dataset(legacy):
    old = kstore.open_dataset(legacy, "h")
    assert old.metadata.incarnation is None
    new = recreate(legacy, uuid="h")
    before = keys(legacy)
    with pytest.raises(CommitConflictError, match="created again"):
        old.append(frame([70]))
    with pytest.raises(CommitConflictError, match="created again"):
        old.drop_indices("x")
    assert_untouched(legacy, new, before, uuid="h")


def test_a_legacy_dataset_re_created_without_an_incarnation_conflicts(legacy):
    """A re-create by a kstore that records no incarnation: the log between the version read
    and the newest tells (its delete fence and create entry)."""
    old = kstore.open_dataset(legacy, "h")
    new = recreate(legacy, uuid="h")
    strip_incarnation(legacy, "h", new.version)
    new = kstore.open_dataset(legacy, "h")
    assert new.metadata.incarnation is None
    before = keys(legacy)
    for op in ("append", "append to a new partition", "drop_indices", "build_indices"):
        with pytest.raises(CommitConflictError, match="created again"):
            OPS[op](old)
    assert_untouched(legacy, new, before, uuid="h")
    job = prepare_write(kstore.open_store(legacy), "h", WriteRequest.of("h", "append", base=old.metadata))
    files, schema = write_files(job, frame([71], p=9))
    with pytest.raises(CommitConflictError, match="created again"):
        finish_write(job, files, schema)
    assert_untouched(legacy, new, before, uuid="h")


def test_a_snapshot_with_an_incarnation_conflicts_with_a_legacy_re_create(store_url):
    old = create(store_url)
    new = recreate(store_url)
    strip_incarnation(store_url, UUID, new.version)
    before = keys(store_url)
    with pytest.raises(CommitConflictError, match="created again"):
        old.append(frame([72], p=9))
    assert_untouched(store_url, kstore.open_dataset(store_url, UUID), before)


def test_legacy_datasets_keep_taking_writes_from_stale_snapshots(legacy):
    old = kstore.open_dataset(legacy, "h")
    for i in range(12):  # past a checkpoint: the log fallback reads entries below it too
        kstore.update_dataset(legacy, "h", frame([300 + i], p=1))
    kstore.garbage_collect(legacy, "h", **ZERO)  # tombstones keep their operation
    assert kstore.open_dataset(legacy, "h").metadata.incarnation is None  # appends give it none
    newer = old.append(frame([80], p=2))
    assert {80, 311} <= ids(newer)
    assert ids(old.drop_indices("x")) >= {80, 311}


def test_a_legacy_write_conflicts_when_the_log_cannot_tell(legacy):
    """Entries after the version read that are gone (garbage collection deleted them): it
    cannot be told that no re-create happened, so nothing is committed."""
    old = kstore.open_dataset(legacy, "h")
    for i in range(12):  # past a checkpoint, which the newest version is read from
        kstore.update_dataset(legacy, "h", frame([400 + i], p=1))
    st = kstore.open_store(legacy)
    assert load.list_log(st, "h").checkpoints
    st.delete(naming.log_key("h", old.version + 1))  # as garbage collection deletes an old expired entry
    before = keys(legacy)
    with pytest.raises(CommitConflictError, match="cannot tell"):
        old.append(frame([81], p=2))
    assert keys(legacy) == before
