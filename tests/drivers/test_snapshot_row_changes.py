"""Snapshot.merge, Snapshot.update_rows and Snapshot.restore (#33): built on the snapshot's
version (Iceberg's "validate from snapshot"): a later version that added a file the keys
(the predicate) may match, or removed a file they rewrite, is a conflict; anything else
commutes. Rows checked against the source rows."""

from __future__ import annotations

import pandas as pd
import pytest

import kstore
from kstore.errors import CommitConflictError

UUID = "ds"


@pytest.fixture
def url(tmp_path) -> str:
    u = str(tmp_path / "store")
    kstore.store_dataset(u, UUID, pd.DataFrame({"p": ["a", "a", "b"], "k": [1, 2, 3], "x": [10, 20, 30]}),
                         partition_on="p", secondary_indices=["k"])
    return u


def rows(url) -> list[tuple]:
    df = kstore.read_dataset(url, UUID)
    return sorted(zip(df["p"], df["k"], df["x"]))


def test_a_snapshot_merge_commutes_with_an_unrelated_append(url):
    snap = kstore.open_dataset(url, UUID)
    kstore.update_dataset(url, UUID, pd.DataFrame({"p": ["c"], "k": [9], "x": [90]}))
    new = snap.merge(pd.DataFrame({"p": ["a", "b"], "k": [2, 4], "x": [21, 40]}), "k")
    assert new.version == 2 and snap.version == 0
    assert rows(url) == [("a", 1, 10), ("a", 2, 21), ("b", 3, 30), ("b", 4, 40), ("c", 9, 90)]
    assert new.history()[-1].info["updated"] == 1


def test_a_snapshot_merge_conflicts_with_a_later_file_holding_a_key(url):
    snap = kstore.open_dataset(url, UUID)
    kstore.update_dataset(url, UUID, pd.DataFrame({"p": ["c"], "k": [4], "x": [41]}))  # key 4 arrives meanwhile
    with pytest.raises(CommitConflictError):
        snap.merge(pd.DataFrame({"p": ["b"], "k": [4], "x": [40]}), "k")
    assert rows(url) == [("a", 1, 10), ("a", 2, 20), ("b", 3, 30), ("c", 4, 41)]  # no duplicate key 4


def test_a_snapshot_update_conflicts_when_its_file_was_rewritten(url):
    snap = kstore.open_dataset(url, UUID)
    kstore.delete_rows(url, UUID, [[("k", "==", 1)]])  # rewrites p=a's file
    with pytest.raises(CommitConflictError):
        snap.update_rows([[("k", "==", 2)]], {"x": 0})
    assert rows(url) == [("a", 2, 20), ("b", 3, 30)]
    new = kstore.open_dataset(url, UUID).update_rows([[("k", "==", 2)]], {"x": 0, "p": "b"})
    assert rows(url) == [("b", 2, 0), ("b", 3, 30)] and new.version == 2


def test_a_snapshot_restores_its_version(url):
    old = kstore.open_dataset(url, UUID)
    before = rows(url)
    kstore.store_dataset(url, UUID, pd.DataFrame({"p": ["z"], "k": [0], "x": [0]}), partition_on="p", mode="overwrite")
    back = old.restore()
    assert back.version == 2 and rows(url) == before
    assert back.restore().version == 2  # the newest already: nothing committed
