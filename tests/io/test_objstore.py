"""kstore.io.objstore (obstore): URL dispatch, options and secrets, Azure on Azurite and S3 on
moto, a put_if_absent race, pickling to a worker process, and a dataset round trip (create,
read, append, overwrite a partition, GC) through the public API on both.

The store contract itself runs on these backends in test_store_contract.py ("obstore-s3",
"obstore-abfs"). GCS is not exercised against a server: neither gcp-storage-emulator nor
fake-gcs-server implements the GCS XML API that obstore uses (object PUT, ``list-type=2``
listings, DELETE), so only its URL and option handling are tested here.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import operator
import os
import pickle
import threading
import time
from datetime import timedelta
from typing import Any

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kstore
from kstore.errors import InvalidArgumentError, KeyNotFoundError, StoreError, StoreNotFoundError
from kstore.io.objstore import ObjectStore
from kstore.io.s3 import S3Store
from kstore.io.store import open_store, store_factory
from tests.io.conftest import AZURITE_KEY, azurite_options, moto_obstore_options

SECRET = "c2VjcmV0LXNlY3JldC1zZWNyZXQ="


# -- URLs, options, secrets (no server) ----------------------------------------------------------


@pytest.mark.parametrize(
    "url, backend, bucket, prefix",
    [
        ("gs://bkt", "gcs", "bkt", ""),
        ("gs://bkt/a/b/", "gcs", "bkt", "a/b"),
        ("abfs://cont/p", "azure", "cont", "p"),
        ("abfss://cont", "azure", "cont", ""),
        ("az://cont/x/y", "azure", "cont", "x/y"),
        ("azure://cont", "azure", "cont", ""),
        ("abfs://cont@acct.dfs.core.windows.net/p", "azure", "cont@acct.dfs.core.windows.net", "p"),
    ],
)
def test_open_store_dispatches_gs_and_azure_urls(url: str, backend: str, bucket: str, prefix: str) -> None:
    options = {"account_name": "acct", "account_key": SECRET} if backend == "azure" else {"bearer_token": SECRET}
    store = open_store(url, storage_options=options)
    assert isinstance(store, ObjectStore)
    assert (store.backend, store.bucket, store.prefix) == (backend, bucket, prefix)
    assert store.atomic_create is True
    for text in (str(store.url), repr(store)):
        assert SECRET not in text


def test_s3_urls_open_the_s3_form_of_the_one_client() -> None:
    store = open_store("s3://bkt/p", storage_options={"endpoint_url": "http://h:1"})
    assert isinstance(store, S3Store) and isinstance(store, ObjectStore)  # one object-store client
    assert isinstance(ObjectStore("s3://bkt", {"region": "us-east-1"}), ObjectStore)


def test_url_keeps_public_options_only() -> None:
    store = ObjectStore(
        "abfs://cont/data",
        {"AZURE_STORAGE_ACCOUNT_NAME": "acct", "AZURE_STORAGE_ACCOUNT_KEY": SECRET,
         "azure_storage_endpoint": "http://127.0.0.1:1/acct", "allow_http": True},
    )
    assert store.url == "abfs://cont/data?account_name=acct&endpoint=http://127.0.0.1:1/acct&allow_http=true"
    assert SECRET not in repr(store)
    reopened = ObjectStore(store.url)  # the URL reopens it (credentials from the environment)
    assert reopened.url == store.url
    copy = pickle.loads(pickle.dumps(store))  # a pickle carries the credentials
    assert isinstance(copy, ObjectStore) and copy.url == store.url and copy._secrets == [SECRET]


@pytest.mark.parametrize(
    "url, options, error, match",
    [
        ("abfs://c", {"acount_name": "x"}, InvalidArgumentError, "acount_name"),
        ("abfs://c", {"account_key": 42}, InvalidArgumentError, "'account_key' must be"),
        ("abfs://c", {"account_key": ""}, InvalidArgumentError, "'account_key' must be"),
        ("abfs://c", [("account_name", "x")], InvalidArgumentError, "must be a dict"),
        ("abfs://c?account_name=a", {"account_name": "b"}, InvalidArgumentError, "'account_name'"),
        ("abfs://c", {"account_key": SECRET, "AZURE_STORAGE_ACCOUNT_KEY": "other"}, InvalidArgumentError,
         "'account_key' and 'AZURE_STORAGE_ACCOUNT_KEY'"),
        (f"abfs://c?account_key={SECRET}", None, StoreError, "unknown parameter 'account_key'"),
        (f"gs://user:{SECRET}@bkt", None, StoreError, "no credentials in the URL"),
        ("gs://", None, StoreError, "no bucket"),
        ("gs://bkt/a/../b", None, Exception, "invalid key"),
        ("memory://x", {"account_key": SECRET}, InvalidArgumentError, "s3:// URLs only"),
    ],
)
def test_bad_urls_and_options_name_the_key_not_the_value(url: str, options: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match) as info:
        open_store(url, storage_options=options)
    assert SECRET not in str(info.value)


def test_obstore_memory_backend_is_one_process_only() -> None:
    store = ObjectStore("memory://")
    store.put("k", b"v")
    assert store.url is None and store.get("k") == b"v"
    with pytest.raises(StoreError):
        store_factory(store)


def test_obstore_memory_backend_meets_the_protocol() -> None:
    """The protocol's basics on obstore's in-process backend (once the ObjectStore methods'
    doctests; the contract in test_store_contract runs the other backends on moto/Azurite)."""
    store = ObjectStore("memory://")
    store.put("ds/a", b"1")
    store.put("ds/a", b"2")  # replaces
    assert store.get("ds/a") == b"2"
    assert store.put_if_absent("ds/_kstore/log/1.json", b"first") is True
    assert store.put_if_absent("ds/_kstore/log/1.json", b"second") is False
    assert store.get("ds/_kstore/log/1.json") == b"first"
    assert (store.exists("ds/a"), store.exists("ds/b")) == (True, False)
    store.delete("ds/a")
    store.delete("ds/a")  # already gone: no error
    assert store.exists("ds/a") is False
    for key in ("ds/x=1/a", "ds/x=2/b", "ds2/c"):
        store.put(key, b"hello world")
    assert sorted(store.iter_prefix("ds/x=")) == ["ds/x=1/a", "ds/x=2/b"]  # a string prefix
    assert sorted(store.iter_prefix("ds")) == ["ds/_kstore/log/1.json", "ds/x=1/a", "ds/x=2/b", "ds2/c"]
    assert sorted(store.iter_prefix("ds/", start_after="ds/x=1/a")) == ["ds/x=2/b"]
    with store.open("ds/x=1/a", buffer_size=4) as fh:
        fh.seek(6)
        assert fh.read() == b"world"


# -- Azure (Azurite) -------------------------------------------------------------------------------


def test_azure_with_account_key_and_endpoint(azurite_endpoint: str, azure_container: str) -> None:
    """What a real account looks like: name, key, endpoint in storage_options."""
    store = open_store(f"abfs://{azure_container}/data", storage_options=azurite_options(azurite_endpoint))
    store.put("ds/x", b"1")
    assert store.put_if_absent("ds/x", b"2") is False and store.get("ds/x") == b"1"
    assert ObjectStore(f"az://{azure_container}?use_emulator=true").get("data/ds/x") == b"1"
    assert AZURITE_KEY not in repr(store) + str(store.url)


def test_azure_wrong_key_is_a_store_error_without_the_key(azurite_endpoint: str, azure_container: str) -> None:
    wrong = "d3Jvbmcta2V5LXdyb25nLWtleS13cm9uZy1rZXk="
    options = {**azurite_options(azurite_endpoint), "account_key": wrong}
    store = ObjectStore(f"abfs://{azure_container}", options)
    with pytest.raises(StoreError) as info:
        store.put("k", b"v")
    assert not isinstance(info.value, KeyNotFoundError)
    assert wrong not in str(info.value) and "key 'k'" in str(info.value)


def test_azure_missing_container(azurite_endpoint: str) -> None:
    store = ObjectStore("abfs://kstore-no-such-container", azurite_options(azurite_endpoint))
    with pytest.raises(StoreNotFoundError):
        store.get("k")
    with pytest.raises(StoreNotFoundError):
        list(store.iter_prefix(""))


@pytest.mark.parametrize("kind", ["abfs", "s3"])
def test_put_if_absent_race_through_open_store(kind: str, request: pytest.FixtureRequest) -> None:
    """16 threads create one key: exactly one wins, on the service's atomic create."""
    store = request.getfixturevalue("make_objstore")(kind)
    barrier = threading.Barrier(16, timeout=30)

    def claim(i: int) -> bool:
        barrier.wait()
        return bool(store.put_if_absent("ds/_kstore/log/00000000000000000001.json", f"w{i}".encode()))

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        results = list(pool.map(claim, range(16)))
    assert results.count(True) == 1
    assert store.get("ds/_kstore/log/00000000000000000001.json") == f"w{results.index(True)}".encode()


def test_store_pickled_to_another_process(azurite_endpoint: str, azure_container: str) -> None:
    """A spawned worker rebuilds the store (credentials included) from its pickle."""
    store = open_store(f"abfs://{azure_container}/p", storage_options=azurite_options(azurite_endpoint))
    store.put("from-parent", b"hello")
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=ctx) as pool:
        assert pool.submit(operator.methodcaller("get", "from-parent"), store).result(timeout=60) == b"hello"
        put = pool.submit(operator.methodcaller("put", "from-worker", b"written"), store)
        assert put.result(timeout=60) is None
        assert pool.submit(os.getpid).result(timeout=60) != os.getpid()
    assert store.get("from-worker") == b"written"


# -- datasets through the public API -------------------------------------------------------------


def _dataset_round_trip(store: Any) -> None:
    df = pd.DataFrame({"p": [1, 1, 2, 2], "x": [1.0, 2.0, 3.0, 4.0], "s": list("abcd")})
    kstore.store_dataset(store, "d", df, partition_on=["p"])
    got = kstore.read_dataset(store, "d").sort_values("x").reset_index(drop=True)
    pd.testing.assert_frame_equal(got[["p", "x", "s"]], df, check_dtype=False)
    assert kstore.read_dataset(store, "d", predicates=[[("p", "==", 2)]])["x"].sort_values().tolist() == [3.0, 4.0]

    kstore.update_dataset(store, "d", pd.DataFrame({"p": [3], "x": [5.0], "s": ["e"]}))  # append
    kstore.update_dataset(
        store, "d", pd.DataFrame({"p": [1], "x": [9.0], "s": ["z"]}), mode="overwrite_partitions"
    )
    expected = [3.0, 4.0, 5.0, 9.0]
    assert sorted(kstore.read_dataset(store, "d")["x"]) == expected
    assert sorted(kstore.read_dataset(store, "d", version=0)["x"]) == [1.0, 2.0, 3.0, 4.0]

    time.sleep(0.01)  # files born in this millisecond are not older than a 0 retention
    result = kstore.garbage_collect(store, "d", retention=timedelta(0), enforce_retention_duration=False)
    assert result.deleted_files  # the overwritten partition's file
    assert not any(store.exists(key) for key in result.deleted_files)
    assert sorted(kstore.read_dataset(store, "d")["x"]) == expected
    assert kstore.delete_dataset(store, "d") > 0
    assert [k for k in store.iter_prefix("d/") if k.endswith(".parquet")] == []


def test_dataset_round_trip_on_azure(azurite_endpoint: str, azure_container: str) -> None:
    _dataset_round_trip(
        open_store(f"abfs://{azure_container}/datasets", storage_options=azurite_options(azurite_endpoint))
    )


def test_dataset_round_trip_on_s3_through_obstore(s3_endpoint: str, s3_bucket: str) -> None:
    _dataset_round_trip(ObjectStore(f"s3://{s3_bucket}/datasets", moto_obstore_options(s3_endpoint)))


@settings(max_examples=300, deadline=None)
@given(st.sets(st.lists(st.sampled_from(["a", "b", "a-b", "a.c", "b0"]), min_size=1, max_size=3).map("/".join),
               max_size=12),
       st.data())
def test_folder_markers_are_dropped_from_listings(paths: set[str], data: st.DataObject) -> None:
    """S3 "folder" markers (empty ``dir/`` objects, listed by object_store as ``dir``) never
    show as keys; every real key does, empty ones included, in listing order."""
    from kstore.io.objstore import _without_folder_markers

    # keys as on a file system: none is also a folder of another
    keys = {p for p in paths if not any(q.startswith(p + "/") for q in paths)}
    folders = {p.rsplit("/", i)[0] for p in keys for i in range(1, p.count("/") + 1)}
    markers = data.draw(st.sets(st.sampled_from(sorted(folders)))) if folders else set()
    sizes = {k: data.draw(st.integers(0, 2)) for k in keys}
    listing = sorted([(k, sizes[k]) for k in keys] + [(m, 0) for m in markers])
    assert list(_without_folder_markers(iter(listing))) == sorted(keys)
