"""``kstore.open_dataset``: one committed version that plans and reads the same rows
however often it is used, while writers and garbage collection run beside it."""

from __future__ import annotations

import datetime as dt
import threading

import pandas as pd
import pytest

import kstore
from kstore.errors import InvalidArgumentError, VersionNotFoundError

UUID = "snap"


def frame(start: int, n: int) -> pd.DataFrame:
    ids = range(start, start + n)
    return pd.DataFrame({"p": [i % 3 for i in ids], "loc": [i % 7 for i in ids], "x": list(ids)})


@pytest.fixture
def url(store_url):
    kstore.store_dataset(store_url, UUID, frame(0, 30), partition_on=["p"], secondary_indices=["loc"])
    return store_url


def xs(table) -> list[int]:
    return sorted(table.column("x").to_pylist())


def test_a_snapshot_reads_its_version_while_writers_commit(url):
    snap = kstore.open_dataset(url, UUID)
    before = xs(snap.read_table())
    kstore.update_dataset(url, UUID, frame(30, 9))
    kstore.update_dataset(url, UUID, delete_scope=[{"p": 0}])
    assert snap.version == 0 and xs(snap.read_table()) == before == list(range(30))
    assert xs(snap.read_table(predicates=[[("loc", "==", 3)]])) == [x for x in range(30) if x % 7 == 3]
    newest = kstore.open_dataset(url, UUID)
    assert newest.version == 2
    assert xs(newest.read_table()) == [x for x in range(39) if x % 3 != 0]
    assert xs(kstore.open_dataset(url, UUID, version=1).read_table()) == list(range(39))


def test_snapshot_reads_equal_read_dataset(url):
    kstore.update_dataset(url, UUID, frame(30, 20))
    snap = kstore.open_dataset(url, UUID)
    for preds in (None, [[("loc", "==", 2)]], [[("p", "in", [1, 2]), ("x", ">", 10)]], [[("loc", ">=", 5)], [("p", "==", 0)]]):
        want = kstore.read_dataset(url, UUID, predicates=preds).sort_values("x").reset_index(drop=True)
        got = snap.read(predicates=preds).sort_values("x").reset_index(drop=True)
        pd.testing.assert_frame_equal(got[want.columns], want)


def test_plans_of_one_snapshot_load_each_index_once(url):
    snap = kstore.open_dataset(url, UUID)
    # _last_checkpoint, one listing, the checkpoint (+ the entries after it)
    assert dict(snap.open_calls)["iter_prefix"] == 1 and 2 <= dict(snap.open_calls)["get"] <= 12
    first = snap.plan(predicates=[[("loc", "==", 3)]])
    assert first.calls_detail == snap.open_calls  # index values travel in the state: no call
    second = snap.plan(predicates=[[("loc", "==", 4)]])
    assert second.calls_detail == snap.open_calls
    assert set(first.labels) and set(first.labels) <= set(snap.metadata.partitions)


def test_concurrent_plans_of_one_snapshot_agree(url):
    snap = kstore.open_dataset(url, UUID)
    want = {loc: xs(kstore.read_table(url, UUID, predicates=[[("loc", "==", loc)]])) for loc in range(7)}
    got: dict[int, list[int]] = {}
    errors: list[BaseException] = []

    def work(loc: int) -> None:
        try:
            got[loc] = xs(snap.read_table(predicates=[[("loc", "==", loc)]]))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(loc,)) for loc in range(7)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and got == want


def test_a_snapshot_of_an_expired_version_says_so(tmp_path):
    url = "file://" + str(tmp_path)
    kstore.store_dataset(url, UUID, frame(0, 30), partition_on=["p"])
    old = kstore.open_dataset(url, UUID)
    kstore.store_dataset(url, UUID, frame(100, 5), partition_on=["p"], mode="overwrite")
    kstore.garbage_collect(url, UUID, retention=dt.timedelta(0), enforce_retention_duration=False)
    with pytest.raises(VersionNotFoundError, match="version 0"):
        old.read_table()
    with pytest.raises(VersionNotFoundError):
        kstore.open_dataset(url, UUID, version=0)
    assert xs(kstore.open_dataset(url, UUID).read_table()) == list(range(100, 105))


def test_open_dataset_arguments(url):
    kstore.update_dataset(url, UUID, frame(30, 3))
    with pytest.raises(InvalidArgumentError, match="version or as_of"):
        kstore.open_dataset(url, UUID, version=0, as_of=dt.datetime.now(dt.timezone.utc))
    with pytest.raises(InvalidArgumentError):
        kstore.open_dataset(url, UUID, version="first")
    with pytest.raises(VersionNotFoundError):
        kstore.open_dataset(url, UUID, version=7)
    snap = kstore.open_dataset(url, UUID, as_of=dt.datetime.now(dt.timezone.utc))
    assert snap.version == 1
    assert [h.version for h in kstore.open_dataset(url, UUID, version=0).history()] == [0]
    assert [h.version for h in snap.history()] == [0, 1]
    assert "version=1" in repr(snap) and "files=6" in repr(snap)  # 3 files per write
