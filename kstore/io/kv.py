"""Adapter for any simplekv / minimalkv store (the kartothek store API).

Most key-value stores have no atomic create. For them ``put_if_absent`` checks and then
puts, which is safe for one writer process at a time: two processes committing to the same
dataset through such a store could both claim one version. The adapter therefore declares
``atomic_create = False``, and every commit through it issues a
:class:`~kstore.errors.UnsafeStoreWarning` (once per store) that says so; concurrent
writers need a backend with a real atomic create (local directory, S3, memory).
Directory stores (``hfs://``) are mapped to :class:`~kstore.io.local.LocalStore` by
:func:`~kstore.io.store.open_store` for that reason.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator
from typing import Any, BinaryIO, cast

from kstore.core.naming import validate_key
from kstore.errors import KeyNotFoundError
from kstore.io.redact import redact_text

__all__ = ["KVStore"]


class KVStore:
    """A simplekv/minimalkv ``KeyValueStore`` as a kstore :class:`~kstore.io.store.Store`.

    :func:`~kstore.io.store.open_store` wraps such stores in it (a minimalkv directory
    store becomes a :class:`~kstore.io.local.LocalStore` instead, which creates keys
    atomically). ``put_if_absent`` is check-then-put, atomic within one process only
    (:attr:`atomic_create` is False): kstore warns when several writers would need it.

    Parameters
    ----------
    kv
        The simplekv/minimalkv store.
    url
        The URL that reopens it (None: not reopenable from a URL).

    Examples
    --------
    >>> from minimalkv.memory import DictStore
    >>> store = KVStore(DictStore())
    >>> store.put_if_absent("a", b"1"), store.put_if_absent("a", b"2"), store.get("a")
    (True, False, b'1')
    """

    #: put_if_absent is check-then-put: atomic within one process only
    atomic_create = False

    def __init__(self, kv: Any, url: str | None = None) -> None:
        self.kv = kv
        self.url = url
        self._lock = threading.Lock()

    def __repr__(self) -> str:  # the wrapped store's repr may show a URL with credentials
        return f"KVStore({redact_text(repr(self.kv))})"

    def _missing(self, key: str) -> KeyNotFoundError:
        return KeyNotFoundError(f"key {key!r} not found in {redact_text(repr(self.kv))}")

    def get(self, key: str) -> bytes:
        """The wrapped store's ``get``; its ``KeyError`` becomes :class:`~kstore.errors.KeyNotFoundError`. See
        :meth:`kstore.io.store.Store.get`."""
        try:
            return bytes(self.kv.get(validate_key(key)))
        except KeyError as exc:
            raise self._missing(key) from exc

    def put(self, key: str, data: bytes) -> None:
        """The wrapped store's ``put`` (of a ``bytes`` copy). See :meth:`kstore.io.store.Store.put`."""
        self.kv.put(validate_key(key), bytes(data))

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Check, then put, under a lock: atomic within this process only (:attr:`atomic_create` is False). See
        :meth:`kstore.io.store.Store.put_if_absent`."""
        with self._lock:  # atomic within this process only (see module docstring)
            if self.exists(key):
                return False
            self.put(key, data)
            return True

    def delete(self, key: str) -> None:
        """The wrapped store's ``delete``; its ``KeyError`` (a missing key) is ignored. See
        :meth:`kstore.io.store.Store.delete`."""
        try:
            self.kv.delete(validate_key(key))
        except KeyError:
            pass

    def exists(self, key: str) -> bool:
        """``key in`` the wrapped store. See :meth:`kstore.io.store.Store.exists`."""
        return validate_key(key) in self.kv

    def iter_prefix(self, prefix: str, start_after: str | None = None) -> Iterator[str]:
        """The wrapped store's ``iter_keys(prefix=...)``, filtered by ``start_after``. See
        :meth:`kstore.io.store.Store.iter_prefix`."""
        keys = self.kv.iter_keys(prefix=prefix)
        if start_after is None:
            return iter(keys)
        return (k for k in keys if k > start_after)

    def open(self, key: str) -> BinaryIO:
        """The wrapped store's file where it is seekable, else its bytes read into an :class:`io.BytesIO`. See
        :meth:`kstore.io.store.Store.open`."""
        try:
            fh = self.kv.open(validate_key(key))
        except KeyError as exc:
            raise self._missing(key) from exc
        if hasattr(fh, "seekable") and fh.seekable():
            return cast(BinaryIO, fh)
        data = fh.read()
        fh.close()
        return io.BytesIO(data)
