"""Wrong uses a user's type checker must reject (never executed, not in mypy's default files).

``test_typing.py`` runs mypy on this file and checks that every line marked ``# E: <code>``
gets exactly that error, and that no other line gets one.
"""

from __future__ import annotations

from collections.abc import Iterator

import dask.dataframe as dd

import kstore
import kstore.dask
from kstore import AsOf, Predicates, Store
from kstore.io import LocalStore


class HalfAStore:
    """Has get/put but no put_if_absent, iter_prefix, ...: not a Store."""

    url: str | None = None

    def get(self, key: str) -> bytes:
        return b""

    def put(self, key: str, data: bytes) -> None:
        pass


class WrongSignature(HalfAStore):
    """Every method, but iter_prefix yields bytes."""

    def put_if_absent(self, key: str, data: bytes) -> bool:
        return True

    def delete(self, key: str) -> None:
        pass

    def iter_prefix(self, prefix: str, start_after: str | None = None) -> Iterator[bytes]:
        yield b""

    def exists(self, key: str) -> bool:
        return False

    def open(self, key: str) -> bytes:
        return b""


not_a_store: Store = HalfAStore()  # E: assignment
wrong: Store = WrongSignature()  # E: assignment
a_path_is_no_store: Store = "/tmp/x"  # E: assignment
local: Store = LocalStore("/tmp/x")
ddf: dd.DataFrame = dd.from_dict({"p": [1]}, npartitions=1)
bad_predicates: Predicates = "x == 1"  # E: assignment
bad_term: Predicates = [[(1, "==", 2)]]  # E: list-item
bad_as_of: AsOf = 1700000000  # E: assignment
kstore.read_dataset(42, "d")  # E: call-overload
kstore.plan_read("memory://x", "d", as_of=3.5)  # E: arg-type
kstore.history(local, "d", version=1)  # E: call-overload
kstore.read_dataset(local, "d", as_arrow=True, dates_as_objects=True)  # E: call-overload
kstore.read_dataset(local, "d", version="3")  # E: call-overload
meta: kstore.DatasetMetadata = kstore.dask.store_dataset(local, "d", ddf, compute=False)  # E: assignment
kstore.dask.store_dataset(local, "d", ddf, shuffle="yes")  # E: call-overload
kstore.dask.store_dataset(local, "d", ddf, partitions_on="p")  # E: call-overload
kstore.dask.update_dataset(local, "d", ddf, mode="error")  # E: call-overload
n: str = kstore.delete_dataset(local, "d")  # E: assignment
