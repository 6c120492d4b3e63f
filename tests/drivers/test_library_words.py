"""Issue #30: "partition" means a partition value wherever a user reads it; files are "files".

The library's names that counted files under the word "partition" (``ReadPlan.n_partitions``
and ``.partitions``, ``HistoryEntry.n_partitions``, ``Snapshot.num_partitions``, the history
frame's ``n_partitions`` column) have file names now; the old ones still answer, with a
``FutureWarning``, for one release. Conflict messages and the commit log name files.
"""

from __future__ import annotations

import warnings

import pandas as pd
import pytest

import kstore
from kstore.core.operations import DeleteScope
from kstore.errors import CommitConflictError
from kstore.io import MemoryStore


@pytest.fixture()
def store() -> MemoryStore:
    st = MemoryStore()
    # 2 partition values (p), 4 files: each write makes one file per value
    kstore.store_dataset(st, "d", pd.DataFrame({"p": [1, 2], "x": [1, 2]}), partition_on="p")
    kstore.update_dataset(st, "d", pd.DataFrame({"p": [1, 2], "x": [3, 4]}))
    return st


def _quiet(fn):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new names warn about nothing
        return fn()


def test_read_plan_counts_files(store):
    plan = _quiet(lambda: kstore.plan_read(store, "d", predicates=[[("p", "==", 1)]]))
    assert _quiet(lambda: (plan.n_files, len(plan.labels))) == (4, 2)
    assert "4 files -> 2 planned" in plan.explain() and "partitions ->" not in plan.explain()
    assert "files=2 of 4" in repr(plan)
    with pytest.warns(FutureWarning, match="ReadPlan.n_partitions is now ReadPlan.n_files"):
        assert plan.n_partitions == 4
    with pytest.warns(FutureWarning, match="ReadPlan.partitions is now ReadPlan.labels"):
        assert plan.partitions == plan.labels


def test_history_counts_files(store):
    entries = _quiet(lambda: kstore.history(store, "d"))
    assert [e.n_files for e in entries] == [2, 4]
    with pytest.warns(FutureWarning, match="HistoryEntry.n_partitions is now HistoryEntry.n_files"):
        assert entries[-1].n_partitions == 4
    frame = _quiet(lambda: kstore.history(store, "d", as_frame=True))
    assert list(frame["n_files"]) == [2, 4] and list(frame["n_partitions"]) == [2, 4]


def test_snapshot_counts_files(store):
    snap = kstore.open_dataset(store, "d")
    assert _quiet(lambda: snap.num_files) == 4 and "files=4" in repr(snap) and "partitions=" not in repr(snap)
    with pytest.warns(FutureWarning, match="Snapshot.num_partitions is now Snapshot.num_files"):
        assert snap.num_partitions == 4


def test_conflicts_name_files():
    base = kstore.load_metadata(_store_with_two_files(), "d")
    with pytest.raises(CommitConflictError, match=r"already removed or replaced file\(s\) \['p=9/x'\]"):
        DeleteScope(remove=("p=9/x",), read_version=0).check(base, dataset_uuid="d")
    op = DeleteScope(remove=(), scope_labels=frozenset(), scope=lambda meta: {"p=1/new"}, read_version=0)
    with pytest.raises(CommitConflictError, match=r"added file\(s\) \['p=1/new'\] inside this write's scope"):
        op.check(base, dataset_uuid="d")


def _store_with_two_files() -> MemoryStore:
    st = MemoryStore()
    kstore.store_dataset(st, "d", pd.DataFrame({"p": [1, 2], "x": [1, 2]}), partition_on="p")
    return st
