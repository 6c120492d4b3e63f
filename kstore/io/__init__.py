"""Stores: one protocol, several backends."""

from kstore.io.local import LocalStore
from kstore.io.memory import MemoryStore
from kstore.io.objstore import ObjectStore
from kstore.io.store import CountingStore, Store, open_store, store_factory

__all__ = ["Store", "open_store", "store_factory", "CountingStore", "LocalStore", "MemoryStore", "ObjectStore"]
