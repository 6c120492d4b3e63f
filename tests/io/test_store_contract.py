"""One contract for every store backend (kstore.io.store.Store), plus S3 specifics.

Backends: LocalStore, MemoryStore, KVStore around minimalkv ``hmemory://``, ``hfs://``
through open_store (a LocalStore), and S3Store on a moto server (with and without a key
prefix inside the bucket).
"""

from __future__ import annotations

import concurrent.futures
import io
import multiprocessing
import operator
import os
import pickle
import threading
import types
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import minimalkv
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import kstore.io.s3 as s3_module
from kstore.errors import InvalidKeyError, KeyNotFoundError, KstoreError, StoreError
from kstore.io.kv import KVStore
from kstore.io.local import _TMP_DIR, LocalStore
from kstore.io.memory import MemoryStore
from kstore.io.s3 import S3Store
from kstore.io.store import CountingStore, Store, open_store, store_factory

BACKENDS = ["local", "memory", "kv", "hfs", "s3", "s3-prefixed", "obstore-s3", "obstore-abfs"]
ATOMIC_BACKENDS = ["local", "memory", "hfs", "s3", "s3-prefixed", "obstore-s3", "obstore-abfs"]

S3_PREFIX = "some/prefix"
#: Objects the s3-prefixed store must never see: outside its prefix, or a string-prefix
#: sibling of it ("some/prefix-other" starts with "some/prefix").
S3_DECOYS = ["outside/x", "some/prefix-other/y", "some/prefixz", "some/x"]


def _make_store(kind: str, tmp_path: Any, request: pytest.FixtureRequest) -> Store:
    if kind == "local":
        (tmp_path / "local").mkdir()  # an empty store (a missing root is no store: see below)
        return LocalStore(tmp_path / "local")
    if kind == "memory":
        return MemoryStore()
    if kind == "kv":
        return KVStore(minimalkv.get_store_from_url("hmemory://"))
    if kind == "hfs":
        (tmp_path / "hfs").mkdir()
        store = open_store(f"hfs://{tmp_path / 'hfs'}")
        assert isinstance(store, LocalStore)
        return store
    if kind.startswith("obstore-"):  # kstore.io.objstore: S3 on moto, Azure on Azurite (conftest)
        return request.getfixturevalue("make_objstore")(kind.removeprefix("obstore-"))
    endpoint = request.getfixturevalue("s3_endpoint")
    bucket = request.getfixturevalue("s3_bucket")
    if kind == "s3":
        return S3Store(bucket, endpoint_url=endpoint)
    store = S3Store(bucket, S3_PREFIX, endpoint_url=endpoint)
    client = request.getfixturevalue("s3_client")  # boto3, beside kstore: objects outside the prefix
    for decoy in S3_DECOYS:
        client.put_object(Bucket=bucket, Key=decoy, Body=b"decoy")
    return store


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Any) -> Store:
    return _make_store(request.param, tmp_path, request)


@pytest.fixture(params=ATOMIC_BACKENDS)
def atomic_store(request: pytest.FixtureRequest, tmp_path: Any) -> Store:
    """Backends whose put_if_absent is atomic (KVStore's is atomic only per process)."""
    return _make_store(request.param, tmp_path, request)


def parquet_bytes(table: pa.Table, **kwargs: Any) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, **kwargs)
    return sink.getvalue()


SMALL_TABLE = pa.table(
    {
        "a": pa.array(range(1000), pa.int64()),
        "b": pa.array([f"value-{i}" for i in range(1000)]),
        "c": pa.array([i / 3 for i in range(1000)], pa.float64()),
    }
)


# -- basic operations ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "key, data",
    [
        ("k", b"v"),
        ("ds/table/x=a%20b/day=2024-01-01/f00.parquet", b"\x00\xff" * 1000),
        ("ds/_kstore/log/00000000000000000000.json", b"{}"),
        ("ds.by-dataset-metadata.json", b""),
        ("a+b/c-d_e.f", bytes(range(256))),
    ],
)
def test_put_get_roundtrip(store: Store, key: str, data: bytes) -> None:
    assert store.exists(key) is False
    store.put(key, data)
    got = store.get(key)
    assert got == data
    assert type(got) is bytes
    assert store.exists(key) is True


def test_put_accepts_bytearray_and_memoryview(store: Store) -> None:
    store.put("ba", bytearray(b"abc"))
    store.put("mv", memoryview(b"xyz"))
    assert (store.get("ba"), store.get("mv")) == (b"abc", b"xyz")


def test_missing_key_raises_key_not_found(store: Store) -> None:
    store.put("present/x", b"1")
    for key in ("missing", "present/y", "present"):
        with pytest.raises(KeyNotFoundError) as info:
            store.get(key)
        assert isinstance(info.value, KeyError)
        assert isinstance(info.value, KstoreError)
        assert key in str(info.value)
        with pytest.raises(KeyNotFoundError):
            store.open(key)
    with pytest.raises(KeyError):  # callers that only know builtins
        store.get("missing")


def test_put_overwrites(store: Store) -> None:
    store.put("k/v", b"first")
    store.put("k/v", b"second, longer")
    assert store.get("k/v") == b"second, longer"
    store.put("k/v", b"3")
    assert store.get("k/v") == b"3"
    assert sorted(store.iter_prefix("k/")) == ["k/v"]


def test_put_if_absent(store: Store) -> None:
    assert store.put_if_absent("log/0.json", b"first") is True
    assert store.get("log/0.json") == b"first"
    assert store.put_if_absent("log/0.json", b"second") is False
    assert store.get("log/0.json") == b"first"
    store.put("log/1.json", b"by put")
    assert store.put_if_absent("log/1.json", b"x") is False
    assert store.get("log/1.json") == b"by put"


def test_delete(store: Store) -> None:
    store.put("d/a", b"1")
    store.put("d/b", b"2")
    store.delete("d/a")
    assert store.exists("d/a") is False
    with pytest.raises(KeyNotFoundError):
        store.get("d/a")
    assert store.get("d/b") == b"2"
    assert sorted(store.iter_prefix("d/")) == ["d/b"]
    # after a delete the key can be created again
    assert store.put_if_absent("d/a", b"again") is True
    assert store.get("d/a") == b"again"


def test_delete_missing_is_fine(store: Store) -> None:
    store.delete("never/existed")
    store.put("dir/file", b"1")
    store.delete("dir/other")
    store.delete("dir")  # a "directory" in path-like stores, a missing key everywhere
    assert store.get("dir/file") == b"1"
    store.delete("dir/file")
    store.delete("dir/file")
    assert list(store.iter_prefix("")) == []


def test_exists(store: Store) -> None:
    assert store.exists("e/x") is False
    store.put("e/x", b"")
    assert store.exists("e/x") is True
    assert store.exists("e") is False  # a prefix is no key
    assert store.exists("e/x/y") is False
    store.delete("e/x")
    assert store.exists("e/x") is False


# -- listing -------------------------------------------------------------------------------


def test_iter_prefix(store: Store) -> None:
    keys = [
        "ds/a",
        "ds/table/x=1/f.parquet",
        "ds/table/x=2/deep/er/g.parquet",
        "ds2/b",
        "ds.by-dataset-metadata.json",
        "other",
    ]
    for k in keys:
        store.put(k, b"1")
    assert sorted(store.iter_prefix("")) == sorted(keys)
    assert sorted(store.iter_prefix("ds/")) == [
        "ds/a",
        "ds/table/x=1/f.parquet",
        "ds/table/x=2/deep/er/g.parquet",
    ]
    assert sorted(store.iter_prefix("ds2/")) == ["ds2/b"]
    # a prefix is a plain string prefix, not a directory
    assert sorted(store.iter_prefix("ds")) == sorted(k for k in keys if k.startswith("ds"))
    assert sorted(store.iter_prefix("ds/table/x=")) == [
        "ds/table/x=1/f.parquet",
        "ds/table/x=2/deep/er/g.parquet",
    ]
    assert sorted(store.iter_prefix("ds/table/x=2/")) == ["ds/table/x=2/deep/er/g.parquet"]
    assert list(store.iter_prefix("ds/a")) == ["ds/a"]
    assert list(store.iter_prefix("nothing/")) == []
    assert list(store.iter_prefix("ds/table/x=1/f.parquet/")) == []


def test_iter_prefix_start_after(store: Store) -> None:
    """``start_after`` (S3's StartAfter): only keys that sort after it; how kstore finds the
    newest log entries in one call."""
    log = [f"ds/_kstore/log/{v:020d}.json" for v in (0, 1, 2, 10, 11)]
    for k in log + ["ds/_kstore/logz", "ds/table/f.parquet"]:
        store.put(k, b"1")
    prefix = "ds/_kstore/log/"
    assert sorted(store.iter_prefix(prefix, None)) == log
    assert sorted(store.iter_prefix(prefix, log[2])) == log[3:]
    assert sorted(store.iter_prefix(prefix, "ds/_kstore/log/00000000000000000003.json")) == log[3:]
    assert list(store.iter_prefix(prefix, log[-1])) == []
    assert sorted(store.iter_prefix(prefix, "ds/")) == log  # before the prefix: everything in it
    assert sorted(store.iter_prefix("ds/", "ds/_kstore/logz")) == ["ds/table/f.parquet"]


def test_atomic_create_is_declared(store: Store) -> None:
    """Stores say whether put_if_absent is atomic across processes; only the check-then-put
    simplekv/minimalkv adapter says no (commits through it warn)."""
    kind = type(store).__name__
    assert getattr(store, "atomic_create", True) is (kind != "KVStore")


def test_iter_prefix_is_an_iterator_of_str(store: Store) -> None:
    store.put("it/a", b"1")
    result = store.iter_prefix("it/")
    assert isinstance(result, Iterator)
    assert [type(k) for k in result] == [str]


@pytest.mark.parametrize("kind", ["local", "hfs"])
def test_local_temp_files_never_listed(
    kind: str, tmp_path: Any, request: pytest.FixtureRequest
) -> None:
    store = _make_store(kind, tmp_path, request)
    assert isinstance(store, LocalStore)
    store.put("ds/a", b"1")
    assert store.put_if_absent("ds/b", b"2") is True
    # a writer that crashed between writing its temporary file and renaming it
    tmp_dir = os.path.join(store.root, _TMP_DIR)
    os.makedirs(tmp_dir, exist_ok=True)
    with open(os.path.join(tmp_dir, "leftover"), "wb") as fh:
        fh.write(b"partial")
    assert sorted(store.iter_prefix("")) == ["ds/a", "ds/b"]
    assert sorted(store.iter_prefix("ds/")) == ["ds/a", "ds/b"]
    assert list(store.iter_prefix(".kstore")) == []


def test_s3_prefixed_store_sees_only_its_prefix(
    tmp_path: Any, request: pytest.FixtureRequest
) -> None:
    store = _make_store("s3-prefixed", tmp_path, request)
    assert isinstance(store, S3Store)
    store.put("a", b"1")
    store.put("x", b"2")
    assert sorted(store.iter_prefix("")) == ["a", "x"]
    assert store.exists("x") and store.get("x") == b"2"  # not the decoy "some/x"
    client = request.getfixturevalue("s3_client")
    listed = client.list_objects_v2(Bucket=store.bucket, Prefix=S3_PREFIX + "/")
    assert sorted(o["Key"] for o in listed["Contents"]) == [f"{S3_PREFIX}/a", f"{S3_PREFIX}/x"]
    assert client.get_object(Bucket=store.bucket, Key="some/x")["Body"].read() == b"decoy"


# -- open / range reads --------------------------------------------------------------------


def test_open_reads_and_seeks(store: Store) -> None:
    data = bytes(range(256)) * 40
    store.put("blob", data)
    with store.open("blob") as fh:
        assert fh.readable() and fh.seekable()
        assert fh.read() == data
        assert fh.tell() == len(data)
        assert fh.read(1) == b""
        fh.seek(0)
        assert fh.read(10) == data[:10]
        assert fh.tell() == 10
        assert fh.read(5) == data[10:15]
        fh.seek(1000)
        assert fh.read(7) == data[1000:1007]
        assert fh.seek(3, io.SEEK_CUR) == 1010
        assert fh.read(2) == data[1010:1012]
        assert fh.seek(-8, io.SEEK_END) == len(data) - 8
        assert fh.read(8) == data[-8:]
        assert fh.tell() == len(data)
        fh.seek(len(data) - 3)
        assert fh.read(100) == data[-3:]  # a short read at the end
        fh.seek(len(data) + 10)
        assert fh.read(4) == b""
        fh.seek(5)
        assert fh.read() == data[5:]


def test_open_empty_object(store: Store) -> None:
    store.put("empty", b"")
    with store.open("empty") as fh:
        assert fh.read() == b""
        assert fh.seek(0, io.SEEK_END) == 0
        assert fh.read(10) == b""


def test_open_parquet_with_pyarrow(store: Store) -> None:
    store.put("ds/table/part.parquet", parquet_bytes(SMALL_TABLE, row_group_size=300))
    with store.open("ds/table/part.parquet") as fh:
        pf = pq.ParquetFile(fh)
        assert pf.metadata.num_rows == 1000
        assert pf.metadata.num_row_groups == 4
        assert pf.schema_arrow.names == ["a", "b", "c"]
        assert pf.read_row_group(2, columns=["b"]).column("b").to_pylist() == [
            f"value-{i}" for i in range(600, 900)
        ]
    with store.open("ds/table/part.parquet") as fh:
        table = pq.read_table(fh, columns=["c", "a"])
    assert table.column_names == ["c", "a"]
    assert table.equals(SMALL_TABLE.select(["c", "a"]))


# -- invalid keys --------------------------------------------------------------------------

INVALID_KEYS = ["../x", "a/../../x", "/abs", "a//b", "a/./b", "a\\b", "", ".", "a/", "a\x00b"]


@pytest.mark.parametrize("key", INVALID_KEYS)
def test_invalid_keys_rejected(store: Store, key: str) -> None:
    calls: list[Callable[[], Any]] = [
        lambda: store.get(key),
        lambda: store.put(key, b"x"),
        lambda: store.put_if_absent(key, b"x"),
        lambda: store.delete(key),
        lambda: store.exists(key),
        lambda: store.open(key),
    ]
    for call in calls:
        with pytest.raises(InvalidKeyError):
            call()
    assert list(store.iter_prefix("")) == []  # nothing was written


def test_non_string_key_rejected(store: Store) -> None:
    with pytest.raises(InvalidKeyError):
        store.put(b"bytes-key", b"x")  # type: ignore[arg-type]
    with pytest.raises(InvalidKeyError):
        store.get(None)  # type: ignore[arg-type]


# -- concurrency ---------------------------------------------------------------------------


def _race(n_threads: int, fn: Callable[[int], Any]) -> list[Any]:
    barrier = threading.Barrier(n_threads, timeout=30)

    def run(i: int) -> Any:
        barrier.wait()
        return fn(i)

    with concurrent.futures.ThreadPoolExecutor(n_threads) as pool:
        return list(pool.map(run, range(n_threads)))


def test_put_if_absent_race_has_one_winner(atomic_store: Store) -> None:
    for round_ in range(5):
        key = f"ds/_kstore/log/{round_:020d}.json"
        results = _race(
            8, lambda i, key=key: atomic_store.put_if_absent(key, f"writer {i}".encode())
        )
        assert results.count(True) == 1, results
        winner = results.index(True)
        assert atomic_store.get(key) == f"writer {winner}".encode()


def test_concurrent_puts_are_atomic(atomic_store: Store) -> None:
    payloads = [bytes([i]) * 50_000 for i in range(8)]
    _race(8, lambda i: atomic_store.put("shared", payloads[i]))
    assert atomic_store.get("shared") in payloads


@pytest.mark.parametrize("kind", ["local", "hfs"])
def test_local_put_and_delete_race_in_one_directory(
    kind: str, tmp_path: Any, request: pytest.FixtureRequest
) -> None:
    """delete() prunes empty directories; a put into the same directory must still work."""
    store = _make_store(kind, tmp_path, request)

    def work(i: int) -> None:
        for j in range(100):
            if i % 2:
                assert store.put_if_absent(f"p/d{j}/w{i}", b"x")
            else:
                store.put(f"p/d{j}/w{i}", b"x")
            store.delete(f"p/d{j}/w{i}")

    _race(8, work)
    assert list(store.iter_prefix("")) == []


@pytest.mark.parametrize("method", ["put", "put_if_absent"])
def test_local_file_on_the_way_is_a_store_error(tmp_path: Any, method: str) -> None:
    """A file where a directory of the key (or of the root) must be is a StoreError naming
    that file, at any depth (not a raw NotADirectoryError), and no temporary file stays."""
    root = tmp_path / "local"
    root.mkdir()
    store = LocalStore(root)
    store.put("a", b"file")
    for key in ("a/b", "a/b/c", "a/b/c/d"):
        with pytest.raises(StoreError, match=r"'[^']*/local/a' is a file"):
            getattr(store, method)(key, b"x")
    assert sorted(store.iter_prefix("")) == ["a"] and store.get("a") == b"file"
    assert os.listdir(root / ".kstore-tmp") == []
    (tmp_path / "plain").write_bytes(b"")
    for below in ("plain", "plain/sub"):  # the store's root is, or lies below, a file
        with pytest.raises(StoreError, match=r"'[^']*/plain' is a file"):
            getattr(LocalStore(tmp_path / below), method)("k", b"x")


def test_local_put_survives_a_directory_created_and_pruned_by_others(tmp_path: Any, monkeypatch: Any) -> None:
    """makedirs fails with "exists" while the directory is gone (another thread created it
    and a delete pruned it): the put retries instead of calling the directory a file."""
    (tmp_path / "local").mkdir()
    store = LocalStore(tmp_path / "local")
    real = os.makedirs
    raced: list[str] = []

    def racing_makedirs(name: Any, mode: int = 0o777, exist_ok: bool = False) -> None:
        if str(name).endswith(os.path.join("p", "d")) and len(raced) < 2:  # twice in a row
            raced.append(str(name))
            real(name, exist_ok=True)
            os.rmdir(name)  # created, then pruned: what a racing put and delete leave
            raise FileExistsError(17, "File exists", str(name))
        real(name, mode, exist_ok)

    monkeypatch.setattr(os, "makedirs", racing_makedirs)
    store.put("p/d/w", b"1")
    assert store.put_if_absent("p/d/v", b"2") is True
    assert len(raced) == 2 and store.get("p/d/w") == b"1" and store.get("p/d/v") == b"2"


# -- open_store / store_factory ------------------------------------------------------------


def test_open_store_urls(tmp_path: Any, s3_endpoint: str, s3_bucket: str) -> None:
    name = uuid.uuid4().hex
    memory = open_store(f"memory://{name}")
    assert isinstance(memory, MemoryStore)
    memory.put("k", b"1")
    assert open_store(f"memory://{name}").get("k") == b"1"  # same name, same store

    for url in (f"file://{tmp_path}/f", str(tmp_path / "plain"), f"hfs://{tmp_path}/h"):
        local = open_store(url)
        assert isinstance(local, LocalStore), url
        local.put("a/b", url.encode())
        assert LocalStore(local.root).get("a/b") == url.encode()

    kv = open_store("hmemory://")
    assert isinstance(kv, KVStore)
    kv.put("x/y", b"2")
    assert kv.get("x/y") == b"2"

    s3 = open_store(f"s3://{s3_bucket}/pre/fix?endpoint_url={s3_endpoint}")
    assert isinstance(s3, S3Store)
    assert (s3.bucket, s3.prefix, s3.endpoint_url) == (s3_bucket, "pre/fix", s3_endpoint)
    s3.put("k", b"3")
    assert S3Store(s3_bucket, endpoint_url=s3_endpoint).get("pre/fix/k") == b"3"


def test_open_store_objects_and_factories(tmp_path: Any) -> None:
    mem = MemoryStore()
    assert open_store(mem) is mem
    local = LocalStore(tmp_path)
    assert open_store(local) is local
    counting = CountingStore(mem)
    assert open_store(counting) is counting

    kv = minimalkv.get_store_from_url("hmemory://")
    adapted = open_store(kv)
    assert isinstance(adapted, KVStore) and adapted.kv is kv
    adapted.put("a", b"1")
    assert kv.get("a") == b"1"

    hfs = minimalkv.get_store_from_url(f"hfs://{tmp_path}/kvdir")
    assert isinstance(open_store(hfs), LocalStore)

    assert open_store(lambda: mem) is mem
    made = open_store(lambda: str(tmp_path / "from-factory"))
    assert isinstance(made, LocalStore) and made.root == str(tmp_path / "from-factory")
    assert isinstance(open_store(lambda: kv), KVStore)


@pytest.mark.parametrize(
    "bad",
    [object(), 42, None, b"memory://x", ["memory://x"], lambda: object(), lambda: 3.5],
    ids=["object", "int", "None", "bytes", "list", "factory-of-object", "factory-of-float"],
)
def test_open_store_rejects_unknown_objects(bad: Any) -> None:
    with pytest.raises(StoreError):
        open_store(bad)


@pytest.mark.parametrize(
    "url",
    [
        "nosuchscheme://x",
        "s3://",
        "s3:///prefix",
        "s3://bucket/p?endpont_url=http://x",
        "s3://bucket/a/../b",
    ],
)
def test_open_store_rejects_bad_urls(url: str) -> None:
    with pytest.raises(KstoreError):
        open_store(url)


def _assert_equivalent(original: Store, rebuilt: Store) -> None:
    assert type(rebuilt) is type(original)
    assert rebuilt is not original
    assert rebuilt.url == original.url
    original.put("shared/key", b"from the original")
    assert rebuilt.get("shared/key") == b"from the original"
    rebuilt.put("shared/back", b"from the copy")
    assert original.get("shared/back") == b"from the copy"


@pytest.mark.parametrize("kind", ["local", "hfs", "s3", "s3-prefixed", "obstore-abfs"])
def test_store_factory_pickles(kind: str, tmp_path: Any, request: pytest.FixtureRequest) -> None:
    store = _make_store(kind, tmp_path, request)
    # a store, its URL, and an (unpicklable) lambda factory, which travels as the URL
    for source in (store, store.url, lambda: store.url):
        factory = store_factory(source)
        rebuilt = pickle.loads(pickle.dumps(factory))()
        _assert_equivalent(store, rebuilt)
    # the store object itself pickles too (also after its client was made)
    _assert_equivalent(store, pickle.loads(pickle.dumps(store)))


def test_store_factory_rejects_unpicklable_store() -> None:
    with pytest.raises(StoreError):
        store_factory(MemoryStore())  # an unnamed memory store lives in one process only


def test_s3_store_pickled_to_another_process(s3_store: S3Store) -> None:
    """A spawned worker rebuilds the store from its pickle and makes its own client."""
    s3_store.put("from-parent", b"hello")
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=ctx) as pool:
        got = pool.submit(operator.methodcaller("get", "from-parent"), s3_store)
        assert got.result(timeout=60) == b"hello"
        put = pool.submit(operator.methodcaller("put", "from-worker", b"written"), s3_store)
        assert put.result(timeout=60) is None
        pid = pool.submit(os.getpid).result(timeout=60)
    assert pid != os.getpid()
    assert s3_store.get("from-worker") == b"written"


# -- S3 specifics --------------------------------------------------------------------------


def test_s3_url_roundtrip_and_no_secrets() -> None:
    store = S3Store(
        "bkt",
        "/a/b/",
        endpoint_url="http://127.0.0.1:9000",
        region_name="eu-west-1",
        aws_access_key_id="AKIDEXAMPLE",
        aws_secret_access_key="s3cr3t",
    )
    assert store.prefix == "a/b"
    assert store.url == "s3://bkt/a/b?endpoint_url=http://127.0.0.1:9000&region=eu-west-1"
    for text in (store.url, repr(store)):
        assert "s3cr3t" not in text and "AKIDEXAMPLE" not in text
    again = S3Store.from_url(store.url)
    assert (again.bucket, again.prefix, again.endpoint_url, again.region_name) == (
        "bkt",
        "a/b",
        "http://127.0.0.1:9000",
        "eu-west-1",
    )
    assert S3Store("bkt").url == "s3://bkt"
    assert S3Store.from_url("s3://bkt").prefix == ""
    assert S3Store.from_url("s3://bkt/").prefix == ""
    # explicit credentials travel with a pickled store (never in the URL)
    copy = pickle.loads(pickle.dumps(store))
    assert copy.url == store.url
    assert copy._credentials == {"aws_access_key_id": "AKIDEXAMPLE", "aws_secret_access_key": "s3cr3t"}


def test_s3_given_client_is_deprecated_and_its_settings_kept(s3_endpoint: str, s3_bucket: str) -> None:
    import boto3

    client = boto3.client("s3", endpoint_url=s3_endpoint, region_name="eu-west-1", aws_access_key_id="AKIDC",
                          aws_secret_access_key="s3cr3t-c")
    with pytest.warns(FutureWarning, match=r"S3Store\(client=...\) is deprecated"):
        store = S3Store(s3_bucket, client=client)
    assert (store.endpoint_url, store.region_name) == (s3_endpoint, "eu-west-1")
    assert store._credentials == {"aws_access_key_id": "AKIDC", "aws_secret_access_key": "s3cr3t-c"}
    store.put("k", b"v")
    copy = pickle.loads(pickle.dumps(store))
    assert copy.get("k") == b"v" and "s3cr3t-c" not in repr(copy) + copy.url


def test_s3_clients_are_made_once_per_process(s3_store: S3Store) -> None:
    store = S3Store(s3_store.bucket, endpoint_url=s3_store.endpoint_url)
    clients = _race(8, lambda i: store._obstores())
    assert all(c is clients[0] for c in clients)
    store.put("k", b"v")
    assert s3_store.get("k") == b"v"


def test_s3_missing_bucket_is_a_store_error(s3_endpoint: str) -> None:
    store = S3Store("kstore-no-such-bucket", endpoint_url=s3_endpoint)
    for call in (
        lambda: store.get("k"),
        lambda: store.put("k", b"1"),
        lambda: list(store.iter_prefix("")),
    ):
        with pytest.raises(StoreError, match="kstore-no-such-bucket") as info:
            call()
        assert not isinstance(info.value, KeyNotFoundError)
    with pytest.raises(StoreError, match="'k'"):
        store.put_if_absent("k", b"1")


def test_s3_connection_error_is_a_store_error() -> None:
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    store = S3Store("bkt", endpoint_url=f"http://127.0.0.1:{port}", aws_access_key_id="a",
                    aws_secret_access_key="b")
    with pytest.raises(StoreError, match="'bkt'"):
        store.get("some/key")


def test_s3_open_uses_range_requests(s3_store: S3Store, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(0)
    table = pa.table({f"col{i}": rng.random(150_000) for i in range(8)})  # 8 x 1.2 MB
    data = parquet_bytes(table, compression="none")  # random doubles: incompressible anyway
    assert len(data) > 9_000_000
    s3_store.put("big.parquet", data)

    # every ranged GET of the reader, counted
    import obstore

    store = S3Store(s3_store.bucket, endpoint_url=s3_store.endpoint_url)
    ranges: list[tuple[int, int] | None] = []
    transferred: list[int] = []
    real_get = obstore.get

    def counting_get(st: Any, key: str, options: Any = None) -> Any:
        result = real_get(st, key, options=options)
        ranges.append((options or {}).get("range"))
        data = result.bytes()
        transferred.append(len(data))
        return types.SimpleNamespace(bytes=lambda: data)

    monkeypatch.setattr(obstore, "get", counting_get)
    with store.open("big.parquet") as fh:
        column = pq.read_table(fh, columns=["col3"]).column("col3")
    assert column.equals(table.column("col3"))
    assert ranges and all(r is not None for r in ranges), ranges
    assert len(ranges) == len(transferred)
    # one column of eight, the footer and at most one buffer of read-ahead
    assert sum(transferred) < len(data) / 8 + 1.5 * s3_module.DEFAULT_BUFFER_SIZE, transferred
    assert sum(transferred) < len(data) / 3

    ranges.clear()
    transferred.clear()
    with store.open("big.parquet") as fh:
        fh.seek(-8, io.SEEK_END)
        assert fh.read(8) == data[-8:]
    assert len(ranges) == 1 and transferred == [8]


def test_s3_open_reads_across_many_buffers(s3_store: S3Store) -> None:
    data = os.urandom(300_000)
    s3_store.put("blob", data)
    with s3_store.open("blob", buffer_size=4096) as fh:
        chunks = []
        while chunk := fh.read(10_000):
            chunks.append(chunk)
        assert b"".join(chunks) == data
        fh.seek(123_457)
        assert fh.read(1) == data[123_457:123_458]


def test_s3_open_detects_replaced_object(s3_store: S3Store) -> None:
    s3_store.put("changing", b"a" * 10_000)
    with s3_store.open("changing", buffer_size=64) as fh:
        assert fh.read(4) == b"aaaa"
        s3_store.put("changing", b"b" * 10_000)
        fh.seek(5000)
        with pytest.raises(StoreError, match="changed while it was being read"):
            fh.read(4)


def test_s3_iter_prefix_skips_folder_markers(s3_store: S3Store, s3_client: Any) -> None:
    s3_client.put_object(Bucket=s3_store.bucket, Key="ds/", Body=b"")
    s3_store.put("ds/x", b"1")
    assert list(s3_store.iter_prefix("")) == ["ds/x"]


def test_s3_iter_prefix_follows_pages(s3_store: S3Store, s3_client: Any) -> None:
    """More keys than one listing page holds (1,000 on S3 and moto): every page is read."""
    keys = [f"ds/{i:05d}" for i in range(1_005)]
    for key in keys:  # boto3, beside kstore: one request per key
        s3_client.put_object(Bucket=s3_store.bucket, Key=key, Body=b"")
    assert list(s3_store.iter_prefix("ds/")) == keys
    assert list(s3_store.iter_prefix("ds/", start_after="ds/01000")) == keys[1_001:]


class _FlakyPut:
    """``obstore.put`` that fails (as a dropped connection) the first ``fail`` times, after
    letting ``land`` of those requests reach the service."""

    def __init__(self, real: Callable[..., Any], fail: int, land: int) -> None:
        self.real, self.fail, self.land, self.calls = real, fail, land, 0

    def __call__(self, st: Any, key: str, data: Any, **kw: Any) -> Any:
        import obstore.exceptions

        self.calls += 1
        if self.calls <= self.fail:
            if self.calls <= self.land:
                self.real(st, key, data, **kw)
            raise obstore.exceptions.GenericError("connection reset while reading the response")
        return self.real(st, key, data, **kw)


def test_s3_put_if_absent_after_a_lost_answer_checks_who_wrote(s3_store: S3Store,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import obstore

    real = obstore.put
    # the first attempt reached S3 and its answer was lost: the retry finds our own bytes
    monkeypatch.setattr(obstore, "put", _FlakyPut(real, fail=1, land=1))
    assert s3_store.put_if_absent("mine", b"mine") is True
    # another writer's bytes under the key: not ours
    s3_store.put("theirs", b"theirs")
    monkeypatch.setattr(obstore, "put", _FlakyPut(real, fail=1, land=0))
    assert s3_store.put_if_absent("theirs", b"mine") is False
    # no failure: an existing key is somebody else's
    monkeypatch.setattr(obstore, "put", real)
    assert s3_store.put_if_absent("theirs", b"theirs") is False
    # every attempt fails: a StoreError naming the key and bucket, never "not created"
    monkeypatch.setattr(obstore, "put", _FlakyPut(real, fail=99, land=0))
    with pytest.raises(StoreError, match=f"'never' in bucket '{s3_store.bucket}'"):
        s3_store.put_if_absent("never", b"x")
    monkeypatch.setattr(obstore, "put", real)
    assert not s3_store.exists("never")


@pytest.mark.parametrize("method", ["get", "head", "delete"])
def test_s3_server_errors_name_bucket_and_key(s3_store: S3Store, monkeypatch: pytest.MonkeyPatch,
                                              method: str) -> None:
    import obstore
    import obstore.exceptions

    def denied(*args: Any, **kwargs: Any) -> Any:
        raise obstore.exceptions.PermissionDeniedError("403 AccessDenied: secret-in-message")

    monkeypatch.setattr(obstore, method, denied)
    call = {"get": lambda: s3_store.get("a/b"), "head": lambda: s3_store.exists("a/b"),
            "delete": lambda: s3_store.delete("a/b")}[method]
    with pytest.raises(StoreError, match=f"'a/b' in bucket '{s3_store.bucket}'") as info:
        call()
    assert not isinstance(info.value, KeyNotFoundError)


# -- what is particular to one store (once the doctests of its methods) --------------------------


def test_counting_store_counts_every_protocol_call_and_passes_it_on() -> None:
    inner = MemoryStore()
    s = CountingStore(inner)
    s.put("k", b"v")
    assert inner.get("k") == b"v" and s.get("k") == b"v"
    assert (s.put_if_absent("n", b"1"), s.put_if_absent("n", b"2"), inner.get("n")) == (True, False, b"1")
    assert (s.exists("k"), s.exists("x")) == (True, False)
    assert sorted(s.iter_prefix("")) == ["k", "n"]
    with s.open("k") as fh:
        assert fh.read() == b"v"  # reads from the file are not counted
    s.delete("k")
    assert inner.exists("k") is False
    assert dict(s.calls) == {"put": 1, "get": 1, "put_if_absent": 2, "exists": 2, "iter_prefix": 1, "open": 1,
                             "delete": 1}
    assert s.keys == [("put", "k"), ("get", "k"), ("put_if_absent", "n"), ("put_if_absent", "n"), ("exists", "k"),
                      ("exists", "x"), ("iter_prefix", ""), ("open", "k"), ("delete", "k")]
    s.reset()
    assert (dict(s.calls), s.keys) == ({}, [])


def test_local_keys_are_files_and_delete_prunes_empty_directories(tmp_path: Any) -> None:
    store = LocalStore(tmp_path / "root")
    store.put("a/b/c", b"old")
    store.put("a/b/c", b"new")
    assert (tmp_path / "root" / "a" / "b" / "c").read_bytes() == b"new"
    assert store.exists("a/b") is False  # a directory is no key
    store.put("a/d", b"1")
    store.delete("a/b/c")
    assert _tree(tmp_path / "root") == [_TMP_DIR, "a", "a/d"]  # a/b pruned, a still holds a/d
    store.delete("a/d")
    store.delete("a/d")
    assert _tree(tmp_path / "root") == [_TMP_DIR]  # the root stays


def test_memory_store_keeps_a_copy_and_lists_in_insertion_order() -> None:
    store = MemoryStore()
    data = bytearray(b"v")
    store.put("k", data)
    data[:] = b"changed"
    assert store.get("k") == b"v"
    for key in ("d/2", "d/1", "e/1"):
        store.put(key, b"")
    assert list(store.iter_prefix("d/")) == ["d/2", "d/1"]
    assert list(store.iter_prefix("", start_after="d/2")) == ["k", "e/1"]


# -- read paths never create anything; links and odd file URLs (issue #11) ----------------------


def _tree(root: Any) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, n), root) for d, ds, fs in os.walk(root) for n in ds + fs)


def test_local_reads_never_create_the_root(tmp_path: Any) -> None:
    from kstore.errors import StoreNotFoundError

    root = tmp_path / "missing" / "store"
    store = LocalStore(root)
    with pytest.raises(KeyNotFoundError, match="does not exist"):
        store.get("ds.by-dataset-metadata.json")
    with pytest.raises(KeyNotFoundError):
        store.open("ds/x")
    with pytest.raises(KeyNotFoundError, match="does not exist"):
        store.open_native("ds/x")
    assert store.exists("ds/x") is False
    store.delete("ds/x")
    with pytest.raises(StoreNotFoundError, match=str(root)) as exc:
        list(store.iter_prefix(""))
    assert isinstance(exc.value, StoreError) and isinstance(exc.value, FileNotFoundError)
    assert not (tmp_path / "missing").exists()
    store.put("ds/x", b"1")  # writes create the root
    assert store.get("ds/x") == b"1" and list(store.iter_prefix("")) == ["ds/x"]


@pytest.mark.parametrize(
    "url, where",
    [("file://localhost{p}", "p"), ("file:{p}", "p"), ("file://{p}", "p"), ("file:///{p}", "p")],
)
def test_file_url_forms(tmp_path: Any, monkeypatch: pytest.MonkeyPatch, url: str, where: str) -> None:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "abs"
    store = open_store(url.format(p=path))
    assert isinstance(store, LocalStore) and store.root == str(path)
    store.put("k", b"1")
    assert _tree(tmp_path) == ["abs", "abs/.kstore-tmp", "abs/k"]


@pytest.mark.parametrize("url", ["file://otherhost/x", "file:relative/x", "file://localhost", "file:"])
def test_file_urls_that_name_no_local_absolute_path_are_rejected(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StoreError, match="file URL"):
        open_store(url)
    assert _tree(tmp_path) == []


@pytest.mark.parametrize("path", ["{t}/a\x00b", "file://{t}/a\x00b", "hfs://{t}/a\x00b"])
def test_nul_byte_in_a_store_path(tmp_path: Any, path: str) -> None:
    from kstore.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="NUL"):
        open_store(path.format(t=tmp_path))
    assert _tree(tmp_path) == []


def test_local_store_never_follows_a_symlink_below_its_root(tmp_path: Any) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"secret")
    root = tmp_path / "store"
    store = LocalStore(root)
    store.put("ds/table/a.parquet", b"data")
    os.symlink(outside / "secret", root / "ds" / "table" / "link.parquet")
    os.symlink(outside, root / "ds" / "linked-dir")
    os.symlink(outside, root / "top-dir")
    os.symlink(outside / "secret", root / "top-file")
    for key in ("ds/table/link.parquet", "ds/linked-dir/secret", "top-dir/secret", "top-file"):
        for call in (store.get, store.open, store.open_native, store.exists, store.file_path,
                     lambda k: store.file_paths(["ds/table/a.parquet", k])):
            with pytest.raises(StoreError, match="symbolic link"):
                call(key)
    assert store.file_paths(["ds/table/a.parquet", "ds/table/b.parquet"]) == [
        str(root / "ds" / "table" / "a.parquet"), str(root / "ds" / "table" / "b.parquet")]
    linked_root = LocalStore(tmp_path / "root-link")  # the root itself may be a link
    os.symlink(root, tmp_path / "root-link")
    assert linked_root.get("ds/table/a.parquet") == b"data"
    assert linked_root.file_paths(["ds/table/a.parquet"]) == [str(tmp_path / "root-link" / "ds" / "table" / "a.parquet")]
    with pytest.raises(StoreError, match="symbolic link"):
        store.put("ds/linked-dir/new", b"x")
    with pytest.raises(StoreError, match="symbolic link"):
        store.put_if_absent("ds/linked-dir/new", b"x")
    with pytest.raises(StoreError, match="symbolic link"):
        store.delete("ds/linked-dir/secret")
    assert _tree(outside) == ["secret"] and (outside / "secret").read_bytes() == b"secret"
    assert "ds/linked-dir/secret" not in set(store.iter_prefix("ds/"))
    store.delete("ds/table/link.parquet")  # removes the link itself, not its target
    assert not (root / "ds" / "table" / "link.parquet").exists() and (outside / "secret").exists()


def test_local_open_native_reads_what_open_reads(tmp_path: Any) -> None:
    """``open_native`` (the native Arrow file readers scan with Arrow's threads) gives the
    bytes ``open`` gives; a directory, a missing file or one below a file is a missing key."""
    import pyarrow as pa

    store = LocalStore(tmp_path)
    payload = bytes(range(256)) * 41
    store.put("ds/table/a.parquet", payload)
    with store.open_native("ds/table/a.parquet") as fh, store.open("ds/table/a.parquet") as py:
        assert isinstance(fh, pa.NativeFile) and not isinstance(fh, pa.PythonFile)
        assert fh.size() == len(payload) and fh.read() == py.read() == payload
        assert fh.read_at(7, 1000) == payload[1000:1007]
    for key in ("ds/table", "ds/table/b.parquet", "ds/table/a.parquet/below", "nowhere/x"):
        with pytest.raises(KeyNotFoundError, match=repr(key)):
            store.open_native(key)
    assert _tree(tmp_path) == [".kstore-tmp", "ds", "ds/table", "ds/table/a.parquet"]


def test_local_store_names_too_long_for_the_file_system(tmp_path: Any) -> None:
    from kstore.errors import LimitExceededError

    store = LocalStore(tmp_path)
    long_key = "ds/" + "x" * 300
    with pytest.raises(KeyNotFoundError):
        store.get(long_key)
    with pytest.raises(KeyNotFoundError):
        store.open(long_key)
    with pytest.raises(KeyNotFoundError):
        store.open_native(long_key)
    assert store.exists(long_key) is False
    assert list(store.iter_prefix(long_key + "/")) == []
    store.delete(long_key)
    for put in (store.put, store.put_if_absent):
        with pytest.raises(LimitExceededError, match="too long"):
            put(long_key, b"1")
    assert _tree(tmp_path) in ([], [".kstore-tmp"])


def test_open_store_takes_a_path_object(tmp_path: Any) -> None:
    """``StoreLike`` includes ``os.PathLike``: a ``pathlib.Path`` is a local directory store."""
    st = open_store(tmp_path / "root")
    assert isinstance(st, LocalStore) and st.root == str(tmp_path / "root")
    assert not (tmp_path / "root").exists()  # opening creates nothing
    st.put("a/b", b"1")
    assert open_store(tmp_path / "root").get("a/b") == b"1"

    class BytesPath:
        def __fspath__(self) -> bytes:
            return b"/x"

    with pytest.raises(StoreError, match="bytes path"):
        open_store(BytesPath())
