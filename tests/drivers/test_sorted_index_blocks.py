"""Value-sorted index blocks end to end (issue #32, FORMAT.md E.7), on a local directory,
a memory store and S3 (moto): the checkpoint writer stores them before the checkpoint, an
``==`` / ``in`` plan reads one range of them (3 + 1 store calls) and keeps exactly the
files the lists keep, through later appends and removals; damaged or missing blocks are
logged and the lists answer; garbage collection and dataset deletion remove them with
their checkpoints. Thresholds are lowered so that small datasets get blocks."""

from __future__ import annotations

import logging
import time
from datetime import timedelta

import numpy as np
import pandas as pd
import pytest

import kstore
from kstore.blocks import load
from kstore.core import naming, sorted_index
from kstore.io.store import CountingStore

UUID = "sx"
ZERO = {"retention": timedelta(0), "enforce_retention_duration": False}


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    monkeypatch.setattr(sorted_index, "BLOCK_ROWS", 16)
    monkeypatch.setattr(sorted_index, "MIN_ENTRIES", 32)


@pytest.fixture(params=["file", "memory", "s3"])
def store(request, tmp_path, s3_endpoint_if_s3):
    if request.param == "file":
        return kstore.open_store(str(tmp_path / "store"))
    if request.param == "memory":
        return kstore.open_store(f"memory://blocks-{time.monotonic_ns()}")
    import boto3

    bucket = f"blocks-{time.monotonic_ns()}"
    boto3.client("s3", endpoint_url=s3_endpoint_if_s3, region_name="us-east-1").create_bucket(Bucket=bucket)
    return kstore.S3Store(bucket, prefix="data", endpoint_url=s3_endpoint_if_s3)


@pytest.fixture
def s3_endpoint_if_s3(request):
    if "s3" in request.node.callspec.params.get("store", ""):
        return request.getfixturevalue("s3_endpoint")
    return None


def piece(i: int) -> pd.DataFrame:
    """File ``i``: ids 10*i .. 10*i+9 (distinct over files), a code shared by a few files."""
    return pd.DataFrame({"id": np.arange(10 * i, 10 * i + 10, dtype=np.int64),
                         "code": [f"c{(i * 7 + j) % 23:02d}" for j in range(10)],
                         "x": np.arange(10, dtype=np.float64) + i})


def expected(frames: list[pd.DataFrame], column: str, values: list) -> set[tuple]:
    return {tuple(r) for f in frames for r in f[f[column].isin(values)].itertuples(index=False)}


def planned(store, column: str, op: str, value) -> list[str]:
    return sorted(kstore.plan_read(store, UUID, predicates=[[(column, op, value)]]).keys)


def sidecars(store) -> list[str]:
    return [k for _, k in load.list_log(store, UUID).sorted_indices]


def test_plans_read_one_range_and_keep_exactly_the_files_the_lists_keep(store, monkeypatch):
    frames = [piece(i) for i in range(12)]
    kstore.store_dataset(store, UUID, iter(frames), secondary_indices=["id", "code"])
    assert len(sidecars(store)) == 1  # version 0's checkpoint has blocks (id: 120 values, code: 84 pairs)
    counting = CountingStore(store)
    queries = [("id", "==", 57), ("id", "in", [3, 118, 5000]), ("code", "==", "c05"), ("code", "in", ["c01", "c22"]),
               ("id", "==", -1)]
    with_blocks = {}
    for column, op, value in queries:
        counting.reset()
        with_blocks[(column, op, str(value))] = planned(counting, column, op, value)
        assert counting.calls.get("open", 0) == (0 if value == -1 else 1), (column, op, value, counting.calls)
        assert counting.calls["get"] + counting.calls["iter_prefix"] <= 3
        values = value if isinstance(value, list) else [value]
        got = kstore.read_dataset(store, UUID, predicates=[[(column, op, value)]])
        assert {tuple(r) for r in got[["id", "code", "x"]].itertuples(index=False)} == expected(frames, column, values)
    monkeypatch.setattr(sorted_index, "MAX_LITERALS", 0)  # the lists answer every query now
    for column, op, value in queries:
        assert planned(store, column, op, value) == with_blocks[(column, op, str(value))]
    assert with_blocks[("id", "==", "57")] == sorted(
        kstore.plan_read(store, UUID, predicates=[[("id", "==", 57)]]).keys)
    assert len(with_blocks[("id", "==", "57")]) == 1 and with_blocks[("id", "==", "-1")] == []


def test_changes_after_the_checkpoint_are_planned_with_the_blocks(store):
    frames = [piece(i).assign(part=i % 3) for i in range(12)]
    kstore.store_dataset(store, UUID, iter(frames), secondary_indices=["id"], partition_on=["part"])
    later = piece(50).assign(part=1)
    kstore.update_dataset(store, UUID, later)  # version 1: an entry after the checkpoint
    kstore.update_dataset(store, UUID, delete_scope=[{"part": 0}])  # version 2: files removed
    alive = [f for f in frames if f["part"].iloc[0] != 0] + [later]
    assert load.list_log(store, UUID).checkpoints == (0,)
    for value in (3, 57, 505, 9999):
        counting = CountingStore(store)
        got = kstore.read_dataset(counting, UUID, predicates=[[("id", "==", value)]])
        want = [i for f in alive for i in f["id"] if i == value]
        assert sorted(got["id"]) == want
        assert counting.calls.get("open", 0) <= 1 + len(want)  # one range of blocks, then the data files read


@pytest.mark.parametrize("damage", ["garbage", "truncated", "missing"])
def test_damaged_or_missing_blocks_are_logged_and_the_lists_answer(store, caplog, damage):
    frames = [piece(i) for i in range(12)]
    kstore.store_dataset(store, UUID, iter(frames), secondary_indices=["id"])
    (key,) = sidecars(store)
    if damage == "missing":
        store.delete(key)
    else:
        store.put(key, b"garbage" * 100 if damage == "garbage" else store.get(key)[:-10])
    with caplog.at_level(logging.WARNING, logger="kstore.load"):
        for value in (57, 3, 119):  # the first lookup finds the damage; the lists answer all three
            got = kstore.read_dataset(store, UUID, predicates=[[("id", "==", value)]])
            assert got["id"].tolist() == [value]
            assert len(planned(store, "id", "==", value)) == 1
    assert any("sorted index blocks" in r.getMessage() and "version 0" in r.getMessage() for r in caplog.records)


def test_garbage_collection_and_delete_remove_the_blocks_with_their_checkpoints(store):
    kstore.store_dataset(store, UUID, iter([piece(i) for i in range(12)]), secondary_indices=["id"])
    for v in range(1, 11):  # version 10 gets the next checkpoint (and blocks)
        kstore.update_dataset(store, UUID, piece(100 + v))
    listing = load.list_log(store, UUID)
    assert listing.checkpoints == (0, 10) and [v for v, _ in listing.sorted_indices] == [0, 10]
    kstore.garbage_collect(store, UUID, **ZERO)
    listing = load.list_log(store, UUID)
    assert 0 not in listing.checkpoints and [v for v, _ in listing.sorted_indices] == list(listing.checkpoints)
    assert planned(store, "id", "==", 1015) == planned(store, "id", "in", [1015])
    assert len(planned(store, "id", "==", 1015)) == 1
    kstore.delete_dataset(store, UUID)
    assert load.list_log(store, UUID).sorted_indices == ()


def test_a_failed_blocks_write_leaves_no_checkpoint_and_the_commit_stands(store, monkeypatch):
    from kstore.errors import StoreError

    real_put = type(store).put

    def put(self, key, data):
        if key.endswith(naming.SORTED_INDEX_SUFFIX):
            raise StoreError("injected")
        return real_put(self, key, data)

    monkeypatch.setattr(type(store), "put", put)
    frames = [piece(i) for i in range(12)]
    kstore.store_dataset(store, UUID, iter(frames), secondary_indices=["id"])
    monkeypatch.setattr(type(store), "put", real_put)
    listing = load.list_log(store, UUID)
    assert listing.versions == (0,) and listing.checkpoints == () and listing.sorted_indices == ()
    got = kstore.read_dataset(store, UUID, predicates=[[("id", "==", 57)]])
    assert got["id"].tolist() == [57]
