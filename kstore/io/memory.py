"""An in-process dict as a store (tests, demos, single-process pipelines).

``MemoryStore.named("x")`` (URL ``memory://x``) returns the same store for the same name in
one process, so a URL can stand for it in threads.

>>> s = MemoryStore()
>>> s.put("k", b"v"); s.get("k")
b'v'
"""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator
from typing import BinaryIO, ClassVar

from kstore.core.naming import validate_key
from kstore.errors import KeyNotFoundError
from kstore.io.redact import redact_url

__all__ = ["MemoryStore"]


class MemoryStore:
    """Keys in a dict of this process (tests, examples, threaded Dask).

    ``MemoryStore.named(name)`` (what ``"memory://name"`` opens) returns the same store for
    the same name in the whole process; ``MemoryStore()`` is a private one. Workers in
    other processes cannot see it: Dask with process workers and Spark refuse it.

    Parameters
    ----------
    name
        The name in :attr:`url` (``memory://<name>``); None: an anonymous store.

    Examples
    --------
    >>> MemoryStore.named("mem-doc") is MemoryStore.named("mem-doc")
    True
    >>> s = MemoryStore(); s.put("k", b"v"); s.get("k")
    b'v'
    """

    _registry: ClassVar[dict[str, MemoryStore]] = {}
    _registry_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, name: str | None = None) -> None:
        self._data: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self.url = f"memory://{name}" if name else None

    @classmethod
    def named(cls, name: str) -> MemoryStore:
        """The process-wide store called ``name`` (created on first use).

        Parameters
        ----------
        name
            The store's name.

        Returns
        -------
        MemoryStore
            The same object for the same name.

        Examples
        --------
        >>> s = MemoryStore.named("mem-named-doc")
        >>> s is MemoryStore.named("mem-named-doc"), s.url
        (True, 'memory://mem-named-doc')
        """
        with cls._registry_lock:
            if name not in cls._registry:
                cls._registry[name] = cls(name)
            return cls._registry[name]

    def __repr__(self) -> str:  # a name may look like user:password@host: never shown
        return f"MemoryStore({redact_url(self.url) if self.url else id(self)}, {len(self._data)} keys)"

    def get(self, key: str) -> bytes:
        """The value in this process's dict. See :meth:`kstore.io.store.Store.get`."""
        try:
            return self._data[validate_key(key)]
        except KeyError as exc:
            raise KeyNotFoundError(f"key {key!r} not found in the memory store") from exc

    def put(self, key: str, data: bytes) -> None:
        """Keeps a copy of ``data`` (any bytes-like object). See :meth:`kstore.io.store.Store.put`."""
        with self._lock:
            self._data[validate_key(key)] = bytes(data)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Atomic among this process's threads (one lock); no other process sees the store. See
        :meth:`kstore.io.store.Store.put_if_absent`."""
        with self._lock:
            if validate_key(key) in self._data:
                return False
            self._data[key] = bytes(data)
            return True

    def delete(self, key: str) -> None:
        """Removes the key from the dict, under the store's lock. See :meth:`kstore.io.store.Store.delete`."""
        with self._lock:
            self._data.pop(validate_key(key), None)

    def exists(self, key: str) -> bool:
        """One dict lookup. See :meth:`kstore.io.store.Store.exists`."""
        return validate_key(key) in self._data

    def iter_prefix(self, prefix: str, start_after: str | None = None) -> Iterator[str]:
        """A snapshot of the keys taken at the call, in insertion order. See
        :meth:`kstore.io.store.Store.iter_prefix`."""
        with self._lock:
            keys = [k for k in self._data if k.startswith(prefix) and (start_after is None or k > start_after)]
        return iter(keys)

    def open(self, key: str) -> BinaryIO:
        """An :class:`io.BytesIO` over the value (a copy). See :meth:`kstore.io.store.Store.open`."""
        return io.BytesIO(self.get(key))
