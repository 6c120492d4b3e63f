"""The one narrow store protocol kstore talks to, and :func:`open_store`.

A store is a flat ``key -> bytes`` namespace. Every backend (local directory, memory, S3,
any simplekv/minimalkv store) implements :class:`Store`; everything above ``kstore.io``
uses only these methods.

Each method's contract (parameters, return value, errors, an example) is documented once, in
full, on :class:`Store`. A backend's or wrapper's method that implements one of them
(:class:`~kstore.io.local.LocalStore`, :class:`~kstore.io.memory.MemoryStore`,
:class:`~kstore.io.objstore.ObjectStore`, :class:`~kstore.io.s3.S3Store`,
:class:`~kstore.io.kv.KVStore`, :class:`CountingStore`) has a docstring of one short paragraph:
what is particular to it (how it is atomic, which errors it maps, what it costs in requests),
ending in a reference to the protocol method, and no sections of its own, except for parameters
the protocol method lacks. ``tests/docs/test_api_docs.py`` holds the public stores to it (each such
method needs a docstring of its own; their other methods, and the protocol's, full sections).

Examples
--------
>>> store = open_store("memory://doc-store")
>>> store.put("a/b", b"1")
>>> store.put_if_absent("a/b", b"2")
False
>>> store.get("a/b"), sorted(store.iter_prefix("a/"))
(b'1', ['a/b'])
"""

from __future__ import annotations

import os
import pickle
import threading
import urllib.parse
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, BinaryIO, Protocol, TypeAlias, Union, runtime_checkable

from kstore.errors import InvalidArgumentError, InvalidKeyError, KstoreError, StoreError, failed_deletes_error
from kstore.io.redact import redact_exception, redact_url, url_secrets

__all__ = [
    "Store",
    "StoreLike",
    "KeyValueStore",
    "open_store",
    "CountingStore",
    "store_factory",
    "delete_many",
]


@runtime_checkable
class Store(Protocol):
    """What kstore needs from a store. Keys are validated ``/``-separated relative paths.

    - ``get`` raises :class:`~kstore.errors.KeyNotFoundError` for a missing key.
    - ``put`` is atomic: readers see the old bytes or the new, never a part.
    - ``put_if_absent`` atomically creates the key; returns False (and writes nothing)
      when it exists. Commits rely on it.
    - ``delete`` of a missing key is not an error.
    - ``iter_prefix`` lists keys starting with ``prefix`` (no order promised); with
      ``start_after`` only keys that sort after it (S3's ``StartAfter``: finding the
      newest log entries costs one listing call however long the log is).
    - ``open`` returns a seekable binary file for range reads.
    - ``atomic_create`` (optional attribute, default True) says whether ``put_if_absent``
      is atomic across processes; kstore warns when several writers would need it.
    - ``url`` (read-only) is the URL that reopens the store, or None.
    - ``delete_many(keys)`` (optional method) deletes several keys in few requests (S3:
      ``DeleteObjects``, 1,000 keys a request); missing keys are no error, keys it could
      not delete raise :class:`~kstore.errors.StoreError` naming them. Callers use
      :func:`delete_many`, which loops over ``delete`` for stores without it.

    kstore's :class:`~kstore.io.LocalStore`, :class:`~kstore.io.MemoryStore`,
    :class:`~kstore.io.s3.S3Store`, :class:`~kstore.io.kv.KVStore` and
    :class:`CountingStore` satisfy it for a type checker (``store: Store = LocalStore(p)``).

    Attributes
    ----------
    url : str or None
        Read-only: the URL that reopens the store (``open_store(store.url)``), or None
        for a store no URL names (an anonymous :class:`~kstore.io.MemoryStore`).
    atomic_create : bool
        Optional, default True: whether ``put_if_absent`` is atomic across processes.

    Examples
    --------
    >>> from kstore.io.memory import MemoryStore
    >>> store: Store = MemoryStore()
    >>> isinstance(store, Store), store.url
    (True, None)
    >>> isinstance(open_store("memory://store-protocol-doc"), Store)
    True
    """

    @property
    def url(self) -> str | None: ...

    def get(self, key: str) -> bytes:
        """The bytes stored under ``key``.

        Parameters
        ----------
        key
            A ``/``-separated relative key (validated: no ``..``, empty or absolute parts).

        Returns
        -------
        bytes
            The value.

        Raises
        ------
        KeyNotFoundError
            ``key`` does not exist.

        Examples
        --------
        >>> from kstore.io.memory import MemoryStore
        >>> store = MemoryStore()
        >>> store.put("a/b", b"1"); store.get("a/b")
        b'1'
        """
        ...

    def put(self, key: str, data: bytes) -> None:
        """Write ``data`` under ``key``, replacing any value, atomically (readers see the old
        bytes or the new, never a part).

        Parameters
        ----------
        key
            The key to write.
        data
            The bytes to store (any bytes-like object).

        Examples
        --------
        >>> from kstore.io.memory import MemoryStore
        >>> store = MemoryStore()
        >>> store.put("k", b"old"); store.put("k", b"new"); store.get("k")
        b'new'
        """
        ...

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Create ``key`` with ``data`` unless it exists, atomically (commits rely on it).

        Parameters
        ----------
        key
            The key to create.
        data
            The bytes to store.

        Returns
        -------
        bool
            True if this call created the key; False (and nothing written) if it existed.

        Examples
        --------
        >>> from kstore.io.memory import MemoryStore
        >>> store = MemoryStore()
        >>> store.put_if_absent("k", b"1"), store.put_if_absent("k", b"2"), store.get("k")
        (True, False, b'1')
        """
        ...

    def delete(self, key: str) -> None:
        """Remove ``key``; a missing key is not an error.

        Parameters
        ----------
        key
            The key to remove.

        Examples
        --------
        >>> from kstore.io.memory import MemoryStore
        >>> store = MemoryStore()
        >>> store.put("k", b"1"); store.delete("k"); store.delete("k"); store.exists("k")
        False
        """
        ...

    def iter_prefix(self, prefix: str, start_after: str | None = None) -> Iterator[str]:
        """The keys that start with ``prefix`` (a plain string prefix; no order promised).

        Parameters
        ----------
        prefix
            ``""`` lists every key; ``"ds/"`` the keys below ``ds``; ``"ds"`` also ``ds2/...``.
        start_after
            Only keys that sort after this full key (S3's ``StartAfter``).

        Returns
        -------
        Iterator[str]
            The full keys (possibly lazy: errors may surface while iterating).

        Examples
        --------
        >>> from kstore.io.memory import MemoryStore
        >>> store = MemoryStore()
        >>> for k in ("d/1", "d/2", "d2/1"): store.put(k, b"")
        >>> sorted(store.iter_prefix("d/")), sorted(store.iter_prefix("d", start_after="d/1"))
        (['d/1', 'd/2'], ['d/2', 'd2/1'])
        """
        ...

    def exists(self, key: str) -> bool:
        """Whether ``key`` exists.

        Parameters
        ----------
        key
            The key to look up.

        Returns
        -------
        bool
            True if :meth:`get` would find it.

        Examples
        --------
        >>> from kstore.io.memory import MemoryStore
        >>> store = MemoryStore()
        >>> store.put("k", b"1"); store.exists("k"), store.exists("other")
        (True, False)
        """
        ...

    def open(self, key: str) -> BinaryIO:
        """A seekable binary file over the value of ``key``, for range reads (pyarrow reads
        Parquet footers and column chunks through it). The caller closes it.

        Parameters
        ----------
        key
            The key to read.

        Returns
        -------
        BinaryIO
            A readable, seekable file.

        Raises
        ------
        KeyNotFoundError
            ``key`` does not exist (as for :meth:`get`).

        Examples
        --------
        >>> from kstore.io.memory import MemoryStore
        >>> store = MemoryStore()
        >>> store.put("k", b"0123456789")
        >>> with store.open("k") as fh:
        ...     _ = fh.seek(7); fh.read()
        b'789'
        """
        ...


def delete_many(store: Store, keys: Iterable[str]) -> None:
    """Delete ``keys`` from ``store``: its ``delete_many`` where it has one (batched), else
    ``delete`` key by key. Missing keys are not an error.

    Every key is attempted; keys that could not be deleted raise one
    :class:`~kstore.errors.StoreError` that names them.

    Parameters
    ----------
    store
        The store.
    keys
        The keys to delete.

    Examples
    --------
    >>> from kstore.io.memory import MemoryStore
    >>> s = MemoryStore(); s.put("a", b"1"); s.put("b", b"2")
    >>> delete_many(s, ["a", "b", "missing"]); sorted(s.iter_prefix(""))
    []
    """
    keys = list(keys)
    if not keys:
        return
    batched = getattr(store, "delete_many", None)
    if callable(batched):
        batched(keys)
        return
    failed: list[tuple[str, BaseException]] = []
    for key in keys:
        try:
            store.delete(key)
        except InvalidKeyError:
            raise
        except (KstoreError, OSError) as exc:
            failed.append((key, exc))
    if failed:
        raise failed_deletes_error(failed)


class KeyValueStore(Protocol):
    """A simplekv/minimalkv ``KeyValueStore`` (the methods kstore recognizes it by).

    Those libraries are untyped; any object with these methods is accepted.
    """

    def get(self, *args: Any, **kwargs: Any) -> Any: ...

    def put(self, *args: Any, **kwargs: Any) -> Any: ...

    def delete(self, *args: Any, **kwargs: Any) -> Any: ...

    def iter_keys(self, *args: Any, **kwargs: Any) -> Any: ...

    def keys(self, *args: Any, **kwargs: Any) -> Any: ...


#: What every ``store`` argument accepts: a URL or local path (``str`` or ``os.PathLike``), a
#: :class:`Store`, a simplekv/minimalkv store, or a zero-argument factory returning one of these.
StoreLike: TypeAlias = Union[str, "os.PathLike[str]", Store, KeyValueStore, Callable[[], Any]]


def _is_kv_store(obj: Any) -> bool:
    return all(hasattr(obj, m) for m in ("get", "put", "delete", "iter_keys", "keys"))


#: URL schemes served by :class:`kstore.io.objstore.ObjectStore` (obstore).
_OBJSTORE_PREFIXES = ("gs://", "abfs://", "abfss://", "az://", "azure://")


def _from_url(url: str, storage_options: Mapping[str, Any] | None = None) -> Store:
    from kstore.io.local import LocalStore
    from kstore.io.memory import MemoryStore

    if "\x00" in url:
        raise InvalidArgumentError(f"store URL or path {redact_url(url)!r} contains a NUL byte")
    if storage_options and not url.startswith(("s3://", *_OBJSTORE_PREFIXES)):
        raise InvalidArgumentError(
            "storage_options apply to gs://, abfs://, az:// and s3:// URLs only, not to "
            f"{redact_url(url)!r}"
        )
    if url.startswith("memory://"):
        return MemoryStore.named(url[len("memory://") :] or "default")
    if url.startswith("file:"):
        return LocalStore(_file_url_path(url))
    if url.startswith(("hfs://", "fs://")):  # minimalkv's directory stores, without creating the directory
        parts = urllib.parse.urlsplit(url)
        if "@" in parts.netloc:
            raise StoreError(
                f"directory store URL {redact_url(url)!r} has user info (credentials before an '@'); a directory "
                "store takes none: write hfs:///absolute/path or hfs://relative/path"
            )
        return LocalStore(parts.netloc + parts.path)
    if url.startswith("s3://"):
        from kstore.io.s3 import S3Store

        return S3Store.from_options(url, storage_options)
    if url.startswith(_OBJSTORE_PREFIXES):
        from kstore.io.objstore import ObjectStore

        return ObjectStore.from_url(url, storage_options)
    if "://" not in url:
        return LocalStore(url)
    try:
        import minimalkv
    except ImportError as exc:  # pragma: no cover - minimalkv is a dependency
        raise StoreError(f"store URL {redact_url(url)!r} needs minimalkv") from exc
    try:
        kv = minimalkv.get_store_from_url(url)
    except Exception as exc:  # minimalkv raises many kinds for bad URLs
        raise StoreError(
            f"cannot open store URL {redact_url(url)!r}: {redact_exception(exc, url_secrets(url))}"
        ) from exc
    return _adapt_kv(kv, url if redact_url(url) == url else None)


def _file_url_path(url: str) -> str:
    """The absolute local path of a ``file:`` URL: ``file:///p``, ``file://localhost/p``,
    ``file:/p``. Other hosts and relative paths are errors (never a directory under the
    working directory)."""
    rest = url[len("file:") :]
    shown = redact_url(url)
    if rest.startswith("//"):
        host, slash, path = rest[2:].partition("/")
        if "@" in host:
            raise StoreError(f"file URL {shown!r} has user info (credentials before an '@'); a local path takes "
                             "none: write file:///absolute/path")
        if host not in ("", "localhost"):
            raise StoreError(f"file URL {shown!r} names host {host!r}; only local paths work (file:///path)")
        rest = slash + path
    if not rest.startswith("/"):
        raise StoreError(f"file URL {shown!r} has no absolute path; write file:///absolute/path")
    return "/" + rest.lstrip("/")


def _adapt_kv(kv: Any, url: str | None = None) -> Store:
    from kstore.io.kv import KVStore
    from kstore.io.local import LocalStore

    root = getattr(kv, "root", None)
    if root is not None and type(kv).__name__ in ("FilesystemStore", "HFilesystemStore"):
        # a directory: use the local backend, which has atomic put-if-absent
        return LocalStore(root)
    return KVStore(kv, url=url)


def open_store(store: StoreLike, storage_options: Mapping[str, Any] | None = None) -> Store:
    """Turn a URL, a store object or a zero-argument factory into a :class:`Store`.

    Parameters
    ----------
    store
        ``"memory://name"``, ``"file:///path"`` or a plain path (``str`` or
        ``os.PathLike``), ``"s3://bucket/prefix"`` (the ``s3`` extra; also minimalkv's
        ``"s3://key:secret@host/bucket"``), kartothek-style ``"hfs://..."`` /
        ``"hmemory://"`` and any other minimalkv URL, ``"gs://bucket/prefix"`` and
        ``"abfs://container/prefix"`` (also ``abfss://``, ``az://``, ``azure://``; through
        obstore, the ``gcs``/``azure`` extras), a kstore :class:`Store`, any
        simplekv/minimalkv store, or a factory returning one of these (so distributed
        workers can rebuild it).
    storage_options
        S3 URLs: credentials, endpoint and region as in pandas and deltalake,
        ``{"key": ..., "secret": ..., "endpoint_url": ...}`` or ``{"AWS_ACCESS_KEY_ID": ...,
        "AWS_SECRET_ACCESS_KEY": ..., "AWS_ENDPOINT_URL": ..., "AWS_REGION": ...}``
        (:data:`kstore.io.s3.STORAGE_OPTION_KEYS`). ``gs://`` and ``abfs://``/``az://``
        URLs: obstore's configuration keys, e.g. ``{"account_name": ..., "account_key":
        ...}`` or ``{"service_account_key": ...}`` (see :mod:`kstore.io.objstore`).

    Returns
    -------
    Store
        The opened store. Pass it to any kstore function; an S3 store pickles with its
        credentials for Dask/Spark workers.

    Raises
    ------
    StoreError
        The object is not a store, or the URL cannot be opened.
    InvalidArgumentError
        ``storage_options`` given for anything but an ``s3://``, ``gs://`` or Azure URL.

    Examples
    --------
    >>> import tempfile
    >>> open_store("memory://open-store-doc").url
    'memory://open-store-doc'
    >>> type(open_store(tempfile.mkdtemp())).__name__
    'LocalStore'
    >>> open_store("s3://bkt/data", storage_options={"endpoint_url": "http://127.0.0.1:9000"}).url
    's3://bkt/data?endpoint_url=http://127.0.0.1:9000'
    """
    if isinstance(store, str):
        return _from_url(store, storage_options)
    if isinstance(store, os.PathLike):
        path = os.fspath(store)
        if not isinstance(path, str):
            raise StoreError("cannot use a bytes path as a store; pass a str path")
        return _from_url(path, storage_options)
    if storage_options:
        raise InvalidArgumentError(
            "storage_options apply to gs://, abfs://, az:// and s3:// URLs only, not to a "
            f"{type(store).__name__}"
        )
    if isinstance(store, Store) and hasattr(store, "put_if_absent"):
        return store
    if _is_kv_store(store):
        return _adapt_kv(store)
    if callable(store):
        return open_store(store())
    raise StoreError(
        f"cannot use {type(store).__name__} as a store: pass a URL, a kstore Store, a "
        "simplekv/minimalkv store or a zero-argument factory"
    )


def store_factory(store: StoreLike, *, dumps: Callable[[Any], bytes] | None = None,
                  workers: str = "workers") -> Callable[[], Store]:
    """A picklable zero-argument factory for ``store`` (for Dask/Spark workers).

    URLs and picklable objects travel as they are; an unpicklable store raises
    :class:`StoreError` here, on the client, not later on a worker.

    Parameters
    ----------
    store
        A path, URL, store or factory (:data:`StoreLike`).
    dumps
        The pickler the engine ships tasks with (default :func:`pickle.dumps`; Spark
        passes cloudpickle's), tried here on the store or factory that will travel.
    workers
        What the engine calls its workers, for the error message.

    Returns
    -------
    Callable[[], Store]
        Calling it (on any worker) opens the store.

    Examples
    --------
    >>> import pickle
    >>> factory = store_factory("memory://factory-doc")
    >>> pickle.loads(pickle.dumps(factory))().url
    'memory://factory-doc'
    """
    if isinstance(store, str) and redact_url(store) == store:
        return _UrlFactory(store)
    # a URL with credentials travels as the opened store (S3Store pickles its credentials
    # apart from its URL), so no factory's repr shows them
    opened = open_store(store)
    url = getattr(opened, "url", None)
    if url and url.startswith("memory://"):
        return _UrlFactory(url)  # the same in-process store in every thread
    target = store if callable(store) and not isinstance(store, Store) and not _is_kv_store(store) else opened
    try:
        (dumps or pickle.dumps)(target)
    except Exception as exc:
        if url:
            return _UrlFactory(url)
        raise StoreError(
            f"store {type(target).__name__} cannot be pickled for {workers}; pass a URL or a "
            "picklable factory"
        ) from exc
    return _ObjFactory(target)


class _UrlFactory:
    def __init__(self, url: str) -> None:
        self.url = url

    def __call__(self) -> Store:
        return open_store(self.url)

    def __repr__(self) -> str:
        return f"store_factory({redact_url(self.url)!r})"


class _ObjFactory:
    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __call__(self) -> Store:
        return open_store(self.obj)


class CountingStore:
    """Wrap a store and count calls per method (``calls['get']`` ...), thread-safe.

    Tests use it to check call budgets ("planning costs 1 + k gets, no listing"). Every
    method passes the call on to the wrapped store unchanged, after counting it.

    Parameters
    ----------
    inner
        The store to wrap (anything :func:`open_store` accepts).

    Attributes
    ----------
    inner : Store
        The wrapped store.
    calls : collections.Counter
        Calls per method name (``"get"``, ``"put"``, ``"iter_prefix"``, ...).
    keys : list[tuple[str, str]]
        ``(method, key)`` of every call in order (``iter_prefix`` records its prefix).
    url : str or None
        The wrapped store's URL.
    atomic_create : bool
        The wrapped store's ``atomic_create`` (default True).

    Examples
    --------
    >>> from kstore.io.memory import MemoryStore
    >>> s = CountingStore(MemoryStore())
    >>> s.put("k", b"v"); _ = s.get("k")
    >>> dict(s.calls), s.keys
    ({'put': 1, 'get': 1}, [('put', 'k'), ('get', 'k')])
    """

    def __init__(self, inner: StoreLike) -> None:
        self.inner = open_store(inner)
        self.url = getattr(self.inner, "url", None)
        self.atomic_create = getattr(self.inner, "atomic_create", True)
        self.calls: Counter[str] = Counter()
        self.keys: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return repr(self.inner)

    def _count(self, method: str, key: str) -> None:
        with self._lock:
            self.calls[method] += 1
            self.keys.append((method, key))

    def reset(self) -> None:
        """Forget the calls counted so far (:attr:`calls` and :attr:`keys` become empty).

        Examples
        --------
        >>> from kstore.io.memory import MemoryStore
        >>> s = CountingStore(MemoryStore())
        >>> s.exists("k"); s.reset(); dict(s.calls), s.keys
        False
        ({}, [])
        """
        with self._lock:
            self.calls.clear()
            self.keys.clear()

    def get(self, key: str) -> bytes:
        """Counts a ``get``, then calls the wrapped store's. See :meth:`kstore.io.store.Store.get`."""
        self._count("get", key)
        return self.inner.get(key)

    def put(self, key: str, data: bytes) -> None:
        """Counts a ``put``, then calls the wrapped store's. See :meth:`kstore.io.store.Store.put`."""
        self._count("put", key)
        self.inner.put(key, data)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Counts a ``put_if_absent``, then calls the wrapped store's. See
        :meth:`kstore.io.store.Store.put_if_absent`."""
        self._count("put_if_absent", key)
        return self.inner.put_if_absent(key, data)

    def delete(self, key: str) -> None:
        """Counts a ``delete``, then calls the wrapped store's. See :meth:`kstore.io.store.Store.delete`."""
        self._count("delete", key)
        self.inner.delete(key)

    def delete_many(self, keys: Iterable[str]) -> None:
        """Counted once as ``delete_many`` (and each key in :attr:`keys`); the inner store's
        batched delete where it has one (:func:`delete_many`).

        Parameters
        ----------
        keys
            The keys to delete; missing keys are not an error.

        Examples
        --------
        >>> from kstore.io.memory import MemoryStore
        >>> s = CountingStore(MemoryStore())
        >>> s.put("a", b"1"); s.put("b", b"2"); s.delete_many(["a", "b", "missing"])
        >>> sorted(s.inner.iter_prefix("")), s.calls["delete_many"], s.keys[-1]
        ([], 1, ('delete_many', 'missing'))
        """
        keys = list(keys)
        with self._lock:
            self.calls["delete_many"] += 1
            self.keys.extend(("delete_many", k) for k in keys)
        delete_many(self.inner, keys)

    def iter_prefix(self, prefix: str, start_after: str | None = None) -> Iterator[str]:
        """Counts an ``iter_prefix`` (recorded in :attr:`keys` with its prefix), then calls the wrapped store's.
        See :meth:`kstore.io.store.Store.iter_prefix`."""
        self._count("iter_prefix", prefix)
        return self.inner.iter_prefix(prefix, start_after)

    def exists(self, key: str) -> bool:
        """Counts an ``exists``, then calls the wrapped store's. See :meth:`kstore.io.store.Store.exists`."""
        self._count("exists", key)
        return self.inner.exists(key)

    def open(self, key: str) -> BinaryIO:
        """Counts an ``open`` (reads from the file are not counted), then calls the wrapped store's. See
        :meth:`kstore.io.store.Store.open`."""
        self._count("open", key)
        return self.inner.open(key)
