"""Issue #29 item 5: a damaged checkpoint does not make an intact dataset unavailable.

Checkpoints, the ``_last_checkpoint`` hint and history summaries are derived and best
effort (FORMAT.md E). A damaged one (truncated, zeroed, bytes flipped, another version's,
empty) is logged (``kstore.load`` warning naming the dataset and the key) and read
around: the version is rebuilt from an older checkpoint or resetting entry and the log
entries. Read, time travel, ``history()``, ``as_of``, append and garbage collection all
work; a commit writes a fresh checkpoint, so later opens are back to 3 + k calls. Only
when the entries below a damaged checkpoint are gone (garbage collection) is the version
unreadable: a ``CorruptMetadataError`` naming the dataset, the version and the checkpoint.
"""

from __future__ import annotations

import logging
from datetime import timedelta

import pandas as pd
import pyarrow as pa
import pytest

import kstore
from kstore.blocks import load
from kstore.core import naming
from kstore.errors import CorruptMetadataError
from kstore.io.store import CountingStore

UUID = "dc"
ZERO = {"retention": timedelta(0), "enforce_retention_duration": False}
NEWEST = 24  # versions 0..24: checkpoints at 0, 10 and 20, _last_checkpoint names 20


def frame(ids, p: int | None = None) -> pd.DataFrame:
    ids = list(ids)
    return pd.DataFrame({"p": [i % 3 if p is None else p for i in ids], "id": ids})


def ids(url: str, **kw) -> set[int]:
    return set(kstore.read_dataset(url, UUID, columns=["id"], **kw)["id"].tolist())


def snapshot_of_store(url: str) -> dict[str, bytes]:
    st = kstore.open_store(url)
    return {k: st.get(k) for k in st.iter_prefix("")}


@pytest.fixture
def url(store_url):
    kstore.store_dataset(store_url, UUID, frame(range(6)), partition_on=["p"])
    for v in range(1, NEWEST + 1):
        if v == 3:
            kstore.update_dataset(store_url, UUID, delete_scope=[{"p": 0}])  # garbage for GC later
        else:
            kstore.update_dataset(store_url, UUID, frame([100 + v]))
    listing = load.list_log(kstore.open_store(store_url), UUID)
    assert listing.checkpoints == (0, 10, 20) and listing.versions[-1] == NEWEST
    assert load.read_last_checkpoint(kstore.open_store(store_url), UUID) == 20
    return store_url


@pytest.fixture
def expected(url):
    """Rows (ids) of every version of the ``url`` dataset (p = id % 3)."""
    rows = set(range(6))
    out = {0: set(rows)}
    for v in range(1, NEWEST + 1):
        rows = {i for i in rows if i % 3 != 0} if v == 3 else rows | {100 + v}
        out[v] = set(rows)
    assert ids(url) == out[NEWEST] and ids(url, version=3) == out[3]
    return out


def _flip_state(raw: bytes) -> bytes:
    at = raw.rindex(b'"dataset_uuid"')  # the small state in the footer's schema (what a reader decodes)
    return raw[:at] + b"\x00" + raw[at + 1:]


DAMAGE = {
    "truncated": lambda raw, other: raw[: len(raw) // 2],
    "zeroed": lambda raw, other: bytes(len(raw)),
    "footer flipped": lambda raw, other: raw[:-10] + bytes(b ^ 0xFF for b in raw[-10:]),
    "state flipped": lambda raw, other: _flip_state(raw),
    "empty": lambda raw, other: b"",
    "another version's": lambda raw, other: other(),  # a whole checkpoint, of version 10
}


def damage(url: str, version: int, how: str = "truncated") -> str:
    st = kstore.open_store(url)
    key = naming.checkpoint_key(UUID, version)
    st.put(key, DAMAGE[how](st.get(key), lambda: st.get(naming.checkpoint_key(UUID, 10))))
    return key


def warned(caplog, key: str) -> bool:
    return any(r.name == "kstore.load" and r.levelno == logging.WARNING and key in r.getMessage()
               and repr(UUID) in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("how", sorted(DAMAGE))
def test_every_version_reads_around_a_damaged_checkpoint(url, expected, caplog, how):
    key = damage(url, 20, how)
    before = snapshot_of_store(url)
    with caplog.at_level(logging.WARNING, logger="kstore.load"):
        assert ids(url) == expected[NEWEST]
    assert warned(caplog, key)
    for v in (0, 9, 10, 19, 20, 21, NEWEST):  # time travel: below, at and above the damaged checkpoint
        assert ids(url, version=v) == expected[v], v
    assert kstore.open_dataset(url, UUID).version == NEWEST
    assert snapshot_of_store(url) == before  # reads write nothing


def test_damaged_checkpoints_fall_back_to_the_creating_entry(url, expected, caplog):
    keys = [damage(url, 0, "empty"), damage(url, 10, "zeroed"), damage(url, 20, "truncated")]
    with caplog.at_level(logging.WARNING, logger="kstore.load"):
        assert ids(url) == expected[NEWEST]
    assert all(warned(caplog, k) for k in keys)
    assert ids(url, version=15) == expected[15]


def test_history_and_as_of_read_around_damaged_derived_files(url, expected, caplog):
    st = kstore.open_store(url)
    before = [(h.version, h.operation, h.timestamp) for h in kstore.history(url, UUID)]
    damage(url, 20)
    for s in load.list_log(st, UUID).summaries:
        st.put(naming.summary_key(UUID, s), b"\x00garbage")
    assert [(h.version, h.operation, h.timestamp) for h in kstore.history(url, UUID)] == before
    assert [h.version for h in kstore.open_dataset(url, UUID, version=22).history()] == list(range(23))
    for v in (5, 20, 22):
        assert ids(url, as_of=before[v][2]) == expected[v]


def test_an_append_works_and_its_checkpoint_ends_the_fallback(url, expected, caplog):
    damage(url, 20)
    meta = kstore.update_dataset(url, UUID, frame([500]))
    assert meta.version == NEWEST + 1
    assert ids(url) == expected[NEWEST] | {500}
    st = kstore.open_store(url)
    assert NEWEST + 1 in load.list_log(st, UUID).checkpoints  # written because the head read around one
    assert load.read_last_checkpoint(st, UUID) == NEWEST + 1
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="kstore.load"):
        snap = kstore.open_dataset(CountingStore(url), UUID)
    assert not caplog.records  # the newest version no longer needs the damaged checkpoint
    assert snap.open_calls == {"get": 2, "iter_prefix": 1}  # 3 + k, k = 0: the happy path again
    assert ids(url, version=22) == expected[22]  # time travel below it still reads around it
    snap = kstore.open_dataset(url, UUID, version=NEWEST)
    assert set(snap.append(frame([501])).read()["id"]) == expected[NEWEST] | {500, 501}


def test_the_happy_path_costs_3_plus_k_calls(url):
    snap = kstore.open_dataset(CountingStore(url), UUID)
    assert snap.open_calls == {"get": 2 + (NEWEST - 20), "iter_prefix": 1}


def test_a_damaged_checkpoint_hint_is_logged_and_skipped(url, expected, caplog):
    st = kstore.open_store(url)
    key = naming.last_checkpoint_key(UUID)
    for bad in (b"{not json", b'{"version": "x"}'):
        st.put(key, bad)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="kstore.load"):
            assert ids(url) == expected[NEWEST]
        assert warned(caplog, key)
    kstore.update_dataset(url, UUID, frame([600]))
    assert ids(url) == expected[NEWEST] | {600}


@pytest.mark.parametrize("retention", ["default", "zero"])
def test_garbage_collection_works_on_a_dataset_with_a_damaged_checkpoint(url, expected, retention):
    damage(url, 20)
    result = kstore.garbage_collect(url, UUID, **(ZERO if retention == "zero" else {}))
    st = kstore.open_store(url)
    if retention == "zero":
        assert result.deleted_files  # the files of the deleted partition
        assert result.expired_versions
    for v in load.log_versions(st, UUID):
        entry = load.load_entry(st, UUID, v)
        if entry.has_dataset:
            assert ids(url, version=v) == (expected[v] if v <= NEWEST else expected[NEWEST]), v
    assert ids(url) == expected[NEWEST]
    kstore.update_dataset(url, UUID, frame([700]))
    assert ids(url) == expected[NEWEST] | {700}


@pytest.mark.parametrize("entries", ["tombstones", "deleted"])
def test_no_chain_left_below_a_damaged_checkpoint_is_a_clear_error(url, expected, entries):
    kstore.garbage_collect(url, UUID, **ZERO)  # keeps the newest versions, the oldest checkpointed
    st = kstore.open_store(url)
    listing = load.list_log(st, UUID)
    newest = listing.versions[-1]
    (oldest,) = listing.checkpoints
    if entries == "deleted":  # as garbage collection does once the tombstones are an hour old
        for v in listing.versions:
            if v < oldest:
                st.delete(naming.log_key(UUID, v))
    key = damage(url, oldest, "truncated")
    for attempt in (lambda: ids(url), lambda: kstore.update_dataset(url, UUID, frame([800])),
                    lambda: kstore.garbage_collect(url, UUID, **ZERO)):
        before = snapshot_of_store(url)
        with pytest.raises(CorruptMetadataError) as err:
            attempt()
        msg = str(err.value)
        assert f"dataset {UUID!r}: version {newest} cannot be read" in msg, msg
        assert f"checkpoint of version {oldest} is damaged" in msg, msg
        assert "garbage collection" in msg, msg
        assert snapshot_of_store(url) == before  # nothing written, nothing deleted
    assert key in snapshot_of_store(url)


def test_gc_without_garbage_replaces_a_damaged_start_checkpoint_before_expiring(store_url):
    """No files to delete (no fence, so no fresh checkpoint from a commit), the damaged
    checkpoint is that of the first version GC keeps: GC must write it anew before the
    entries below it go, or the newest version would have no base left."""
    kstore.store_dataset(store_url, UUID, frame(range(3)), partition_on=["p"])
    for v in range(1, 21):
        kstore.update_dataset(store_url, UUID, frame([100 + v]))
    st = kstore.open_store(store_url)
    assert 20 in load.list_log(st, UUID).checkpoints
    damage(store_url, 20)
    result = kstore.garbage_collect(store_url, UUID, **ZERO)
    assert not result.deleted_files and 19 in result.expired_versions and 20 in result.retained_versions
    assert ids(store_url) == set(range(3)) | {100 + v for v in range(1, 21)}
    load.load_checkpoint(st, UUID, 20)  # readable again


# -- index lists decoded on demand (issue #32) ------------------------------------------------
# A checkpoint's ``idx:`` columns are decoded when a predicate first needs them, so damage
# confined to one column's bytes shows then, not on open. It is read around the same way
# (rebuilt from an older checkpoint and the entries); garbage collection decodes every
# column of a checkpoint it keeps before the entries below it go.

IUUID = "dcx"


def xframe(ids) -> pd.DataFrame:
    ids = list(ids)
    return pd.DataFrame({"p": [i % 3 for i in ids], "id": ids, "x": [i % 7 for i in ids]})


@pytest.fixture
def xurl(store_url):
    """Versions 0..12 of a dataset with an index on ``x``: checkpoints at 0 and 10."""
    kstore.store_dataset(store_url, IUUID, xframe(range(6)), partition_on=["p"], secondary_indices=["x"])
    for v in range(1, 13):
        kstore.update_dataset(store_url, IUUID, xframe([10 * v, 10 * v + 1]))
    assert load.list_log(kstore.open_store(store_url), IUUID).checkpoints == (0, 10)
    return store_url


def xids(url: str, x: int, **kw) -> set[int]:
    return set(kstore.read_dataset(url, IUUID, columns=["id"], predicates=[[("x", "==", x)]], **kw)["id"].tolist())


def x_expected(version: int, x: int) -> set[int]:
    rows = set(range(6)) | {i for v in range(1, version + 1) for i in (10 * v, 10 * v + 1)}
    return {i for i in rows if i % 7 == x}


def damage_index_lists(url: str, version: int, column: str = "x") -> str:
    """Rewrite the checkpoint of ``version`` with the list offsets of ``idx:<column>`` running
    backwards: everything else in it decodes."""
    st = kstore.open_store(url)
    key = naming.checkpoint_key(IUUID, version)
    table = pa.ipc.open_file(pa.py_buffer(st.get(key))).read_all()
    name = "idx:" + column
    good = table.column(name).combine_chunks()
    offsets = good.offsets.to_pylist()
    assert len(offsets) > 3 and offsets[2] < offsets[-1]
    offsets[1] = offsets[-1]  # slot 1 now ends past where slot 2 ends
    bad = pa.ListArray.from_buffers(good.type, len(good), [None, pa.array(offsets, pa.int32()).buffers()[1]],
                                    children=[good.values])
    table = table.set_column(table.column_names.index(name), name, bad)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression="zstd")) as w:
        w.write_table(table)
    st.put(key, sink.getvalue().to_pybytes())
    return key


def test_opening_decodes_no_index_lists_and_a_predicate_decodes_only_its_column(xurl):
    kstore.update_dataset(xurl, IUUID, xframe([500]), secondary_indices=["id"])  # a second index, version 13
    snap = kstore.open_dataset(xurl, IUUID, version=10)
    lazy = snap.metadata.files._lazy
    assert lazy is not None and set(lazy.names) == {"idx:x"} and not lazy._got
    assert set(snap.read(columns=["id"], predicates=[[("x", "==", 3)]])["id"]) == x_expected(10, 3)
    assert snap.read(columns=["id"], predicates=[[("x", "==", 3)]]).shape[0] == len(x_expected(10, 3))
    assert set(lazy._got) == {"idx:x"}


def test_damaged_index_lists_in_a_checkpoint_are_read_around(xurl, caplog):
    key = damage_index_lists(xurl, 10)
    before = snapshot_of_store(xurl)
    with caplog.at_level(logging.WARNING, logger="kstore.load"):
        snap = kstore.open_dataset(xurl, IUUID)  # opens: the lists are not decoded yet
        assert not caplog.records
        for x in range(7):
            assert set(snap.read(columns=["id"], predicates=[[("x", "==", x)]])["id"]) == x_expected(12, x), x
    assert any(key in r.getMessage() and "idx:x" in r.getMessage() for r in caplog.records)
    for v in (10, 11):
        assert xids(xurl, 3, version=v) == x_expected(v, 3)
    assert snapshot_of_store(xurl) == before  # reads write nothing
    kstore.update_dataset(xurl, IUUID, xframe([700]))  # an append on the damaged base commits
    assert xids(xurl, 700 % 7) == x_expected(12, 700 % 7) | {700}


def test_damaged_index_lists_without_a_chain_left_are_a_clear_error_naming_the_column(xurl):
    st = kstore.open_store(xurl)
    for v in range(10):  # as if garbage collection had removed the entries below the checkpoint
        st.delete(naming.log_key(IUUID, v))
    st.delete(naming.checkpoint_key(IUUID, 0))
    damage_index_lists(xurl, 10)
    assert set(kstore.read_dataset(xurl, IUUID, columns=["id"])["id"]) == x_expected(12, 0) | {
        i for x in range(1, 7) for i in x_expected(12, x)}  # what needs no index lists still reads
    before = snapshot_of_store(xurl)
    with pytest.raises(CorruptMetadataError) as err:
        xids(xurl, 3)
    msg = str(err.value)
    assert "checkpoint of version 10" in msg and "idx:x" in msg and "garbage collection" in msg, msg
    assert snapshot_of_store(xurl) == before


def test_garbage_collection_replaces_a_checkpoint_whose_index_lists_are_damaged(xurl):
    """GC keeps version 10 (its checkpoint) and expires 0..9: it must decode every column of
    that checkpoint first, find the damage and write it anew, or the lists of ``x`` would
    have nothing left to be rebuilt from."""
    damage_index_lists(xurl, 10)
    st = kstore.open_store(xurl)
    kstore.update_dataset(xurl, IUUID, delete_scope=[{"p": 0}])  # garbage (version 13)
    result = kstore.garbage_collect(xurl, IUUID, retention=timedelta(0), enforce_retention_duration=False)
    assert result.expired_versions
    retained = load.list_log(st, IUUID).checkpoints
    for c in retained:
        load.load_checkpoint(st, IUUID, c, lazy=False)  # every column decodes again
    for x in range(7):
        assert xids(xurl, x) == {i for i in x_expected(12, x) if i % 3 != 0}, x
