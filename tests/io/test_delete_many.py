"""``delete_many``: the protocol helper's loop, S3's batched ``DeleteObjects``, and GC and
``delete_dataset`` using it (one S3 request per 1,000 keys, not one per key)."""

from __future__ import annotations

import concurrent.futures
import math
from datetime import timedelta
from typing import Any

import pandas as pd
import pytest

import kstore
from kstore.blocks.gc import collect_garbage
from kstore.errors import InvalidKeyError, StoreError
from kstore.io.memory import MemoryStore
from kstore.io.s3 import DELETE_BATCH, S3Store
from kstore.io.store import CountingStore, delete_many
from tests.io.test_store_contract import BACKENDS, _make_store


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Any) -> Any:
    return _make_store(request.param, tmp_path, request)


def test_delete_many_on_every_backend(store: Any) -> None:
    keys = [f"d/k{i}" for i in range(5)]
    for key in keys + ["keep/me"]:
        store.put(key, b"x")
    delete_many(store, keys[:3] + ["d/missing", keys[0]])  # missing and repeated keys are fine
    assert sorted(store.iter_prefix("")) == ["d/k3", "d/k4", "keep/me"]
    delete_many(store, iter(keys[3:]))
    delete_many(store, [])
    assert sorted(store.iter_prefix("")) == ["keep/me"]
    with pytest.raises(InvalidKeyError):
        delete_many(store, ["keep/me", "../escape"])


class _FailingStore(MemoryStore):
    def delete(self, key: str) -> None:
        if "bad" in key:
            raise StoreError(f"no delete of {key!r} for you")
        super().delete(key)


def test_default_loop_tries_every_key_and_names_the_failures() -> None:
    store = _FailingStore()
    for key in ("a", "bad1", "b", "bad2"):
        store.put(key, b"x")
    with pytest.raises(StoreError, match="2 key") as info:
        delete_many(store, ["a", "bad1", "b", "bad2"])
    assert "'bad1'" in str(info.value) and "'bad2'" in str(info.value)
    assert sorted(store.iter_prefix("")) == ["bad1", "bad2"]


def test_counting_store_counts_one_batched_call() -> None:
    counting = CountingStore(MemoryStore())
    counting.put("a", b"1")
    delete_many(counting, ["a", "b"])
    assert dict(counting.calls) == {"put": 1, "delete_many": 1}
    assert ("delete_many", "b") in counting.keys
    assert list(counting.iter_prefix("")) == []


class _Deletes:
    """``obstore.delete`` counted (batch calls and single-key calls), failing for the keys in
    ``fail`` as S3 reports a per-key error (the batch fails, then each key alone)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, fail: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        import obstore

        self.real = obstore.delete
        self.fail = set(fail)
        self.batches: list[list[str]] = []
        self.single_deletes: list[str] = []
        monkeypatch.setattr(obstore, "delete", self)

    def __call__(self, store: Any, paths: Any) -> None:
        import obstore.exceptions

        if isinstance(paths, str):
            self.single_deletes.append(paths)
            if paths in self.fail:
                raise obstore.exceptions.PermissionDeniedError(f"AccessDenied: Access Denied ({paths})")
            return self.real(store, paths)
        self.batches.append(list(paths))
        if self.fail & set(paths):
            raise obstore.exceptions.GenericError("DeleteObjects: some keys failed")
        return self.real(store, paths)


def test_s3_per_key_errors_name_the_keys(s3_endpoint: str, s3_bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:
    store = S3Store(s3_bucket, "pre", endpoint_url=s3_endpoint)
    seen = _Deletes(monkeypatch, {"pre/k7", "pre/k2500"})
    keys = [f"k{i}" for i in range(2501)] + ["gone"]
    with pytest.raises(StoreError) as info:
        store.delete_many(keys)
    message = str(info.value)
    assert "'pre/k7'" in message and "'pre/k2500'" in message and "AccessDenied" in message
    assert f"'{s3_bucket}'" in message and "gone" not in message  # a missing key is no error
    assert [len(r) for r in seen.batches] == [1000, 1000, 502]  # every batch was sent
    seen.fail.clear()
    store.delete_many(keys)


@pytest.mark.parametrize("n", [DELETE_BATCH + 1, 7])
def test_s3_gc_deletes_in_batches(n: int, s3_endpoint: str, s3_bucket: str, s3_client: Any,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    store = S3Store(s3_bucket, "data", endpoint_url=s3_endpoint)
    # n orphan files of a failed write, born an hour ago
    keys = [f"ds/table/p={i % 3}/k{1_700_000_000_000:011x}_{i:020x}.parquet" for i in range(n)]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda k: s3_client.put_object(Bucket=s3_bucket, Key="data/" + k, Body=b"x"), keys))
    seen = _Deletes(monkeypatch)
    result = collect_garbage(store, "ds", retention=timedelta(0))
    assert sorted(result.deleted_files) == sorted(keys)
    assert len(seen.batches) == math.ceil(n / DELETE_BATCH)
    assert all(k.startswith("data/ds.by-dataset-metadata.") for k in seen.single_deletes), seen.single_deletes
    assert len(seen.single_deletes) <= 2
    assert not list(store.iter_prefix("ds/table/"))


def test_s3_delete_dataset_deletes_in_one_batch(s3_endpoint: str, s3_bucket: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    store = S3Store(s3_bucket, endpoint_url=s3_endpoint)
    df = pd.DataFrame({"p": list("abcdefgh"), "x": range(8)})
    kstore.store_dataset(store, "ds", df, partition_on=["p"], secondary_indices=["x"])
    files = [k for k in store.iter_prefix("ds/") if "/_kstore/" not in k]
    assert len(files) > 8
    seen = _Deletes(monkeypatch)
    assert kstore.delete_dataset(store, "ds") >= len(files)
    assert len(seen.batches) == 1
    assert not set(seen.single_deletes) & set(files), seen.single_deletes
    assert [k for k in store.iter_prefix("ds/") if "/_kstore/" not in k] == []


def test_cli_progress_store_ticks_per_deleted_key() -> None:
    from kstore.io.progress import ProgressStore

    ticks: list[int] = []
    inner = CountingStore(MemoryStore())
    for key in ("a", "b", "c"):
        inner.put(key, b"x")
    wrapped = ProgressStore(inner, "delete", lambda: ticks.append(1))
    delete_many(wrapped, ["a", "b", "c"])
    assert len(ticks) == 3 and inner.calls["delete_many"] == 1
    assert list(inner.iter_prefix("")) == []
