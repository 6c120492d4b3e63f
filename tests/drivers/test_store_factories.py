"""The one store factory the engines ship to their workers (``kstore.io.store.store_factory``):
Dask pickles with :mod:`pickle`, Spark with cloudpickle; what each can ship, and what neither
can, is decided on the client with an error naming the engine's workers."""

from __future__ import annotations

import pickle
import threading

import pytest

pytest.importorskip("pyspark")

from pyspark import cloudpickle  # noqa: E402

from kstore.errors import InvalidArgumentError, StoreError  # noqa: E402
from kstore.io.local import LocalStore  # noqa: E402
from kstore.io.store import store_factory  # noqa: E402
from kstore.spark.writer import spark_store_factory  # noqa: E402


class _NoUrlStore(LocalStore):
    """A local store that does not say its URL: it travels as an object or not at all."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.url = None  # type: ignore[assignment]


class _LockedStore(_NoUrlStore):
    """Holds a lock (as a client with a connection pool does): no pickler can ship it."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.lock = threading.Lock()

    def __reduce__(self):  # LocalStore pickles as its root; this one carries its lock
        return (_LockedStore, (self.root,), {"lock": self.lock})


def test_a_lambda_factory_travels_to_spark_but_not_through_pickle(tmp_path):
    root = str(tmp_path)

    def make():
        return _NoUrlStore(root)

    factory = spark_store_factory(make)
    shipped = cloudpickle.loads(cloudpickle.dumps(factory))
    shipped().put("k", b"v")
    assert (tmp_path / "k").read_bytes() == b"v"
    with pytest.raises(StoreError, match="cannot be pickled for workers"):
        store_factory(make)  # a local function: plain pickle cannot ship it, and no URL to fall back on


def test_an_unpicklable_store_is_refused_on_the_driver_naming_the_engine(tmp_path):
    with pytest.raises(StoreError, match=r"_LockedStore cannot be pickled for Spark executors"):
        spark_store_factory(_LockedStore(str(tmp_path)))
    with pytest.raises(StoreError, match=r"_LockedStore cannot be pickled for workers"):
        store_factory(_LockedStore(str(tmp_path)))


def test_memory_stores_stay_in_process(tmp_path):
    with pytest.raises(InvalidArgumentError, match="memory store cannot be shared"):
        spark_store_factory("memory://factories")
    factory = store_factory("memory://factories")  # Dask's threads share the process
    assert pickle.loads(pickle.dumps(factory))().url == "memory://factories"
    url = f"file://{tmp_path}"
    assert spark_store_factory(url)().url == store_factory(url)().url
