"""Checked by mypy (``mypy`` runs on ``tests/typing``), never executed by pytest.

What a user's type checker must accept: kstore's own stores are :class:`kstore.Store`s,
the public functions take the documented argument types (``StoreLike``, ``Predicates``,
``AsOf``) and return what they say. ``test_typing.py`` runs mypy on this file and also
checks that mypy *rejects* the wrong uses in ``reject_*.py`` (so this check can fail).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa

import kstore
from kstore import AsOf, Predicates, Store, StoreLike
from kstore.io import CountingStore, LocalStore, MemoryStore
from kstore.io.kv import KVStore
from kstore.io.s3 import S3Store

local: Store = LocalStore("/tmp/kstore-typing")
memory: Store = MemoryStore()
s3: Store = S3Store("bucket", "prefix")
kv: Store = KVStore(object())
counting: Store = CountingStore(memory)
opened: Store = kstore.open_store("memory://typing")

stores: list[StoreLike] = ["/tmp/x", Path("/tmp/x"), "memory://x", local, memory, s3, kv, lambda: memory,
                           lambda: "memory://x"]

flat: Predicates = [("x", "==", 1), ("y", "is null")]
dnf: Predicates = [[("x", "in", [1, 2])], [("d", ">=", dt.date(2024, 1, 1))]]
terms = [[("x", "==", 1)]]  # inferred as list[list[tuple[str, str, int]]]: still Predicates
as_of: AsOf = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
as_of_text: AsOf = "2024-01-01T00:00:00Z"


def reads(store: StoreLike) -> None:
    table: pa.Table = kstore.read_dataset(store, "d", ["x"], terms, as_arrow=True)
    frame = kstore.read_dataset(store, "d", predicates=dnf, as_of=as_of_text)
    plan = kstore.plan_read(store, "d", predicates=flat, version=3)
    keys: tuple[str, ...] = plan.keys
    meta = kstore.load_metadata(store, "d")
    version: int | None = meta.version
    gc: kstore.GCResult = kstore.garbage_collect(store, "d", retention=dt.timedelta(days=7), dry_run=True)
    n: int = kstore.delete_dataset(store, "d")
    history: list[kstore.HistoryEntry] = kstore.history(store, "d")
    print(table, frame, keys, version, gc, n, history, as_of)
