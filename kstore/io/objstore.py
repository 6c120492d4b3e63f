"""Object stores (S3, Google Cloud Storage, Azure Blob Storage) through the ``obstore`` library.

:class:`ObjectStore` adapts `obstore <https://developmentseed.org/obstore/>`_ (Python bindings
of Rust's ``object_store``) to the :class:`~kstore.io.store.Store` protocol. Install it with
``pip install 'kstore[gcs]'`` or ``'kstore[azure]'``. :func:`~kstore.io.store.open_store`
opens these URLs with it::

    gs://bucket[/prefix]
    abfs://container[/prefix]          (also abfss://, az://, azure://)
    abfs://container@account.dfs.core.windows.net[/prefix]

``s3://`` URLs open :class:`~kstore.io.s3.S3Store`, this class with S3's URL forms,
``storage_options`` keys and credential lookup; ``ObjectStore("s3://...")`` works too.

- ``put_if_absent`` is obstore's ``put(..., mode="create")``: ``If-None-Match: *`` on S3 and
  Azure, ``x-goog-if-generation-match: 0`` on GCS; the service creates the object atomically,
  so of several concurrent writers exactly one succeeds. The request is sent without
  obstore's automatic retries; kstore retries it itself and, when an earlier attempt may
  have reached the service, compares the stored bytes to tell whether it was its own.
- ``open`` returns a seekable file that fetches only the byte ranges read (ranged GETs
  through a 1 MiB buffer, each with ``If-Match`` on the object's ETag).
- ``iter_prefix`` takes any string prefix: obstore lists whole path segments, so the
  listing starts at the prefix's "directory" and keys are filtered by the string prefix.
- ``delete_many`` uses obstore's batch delete (S3 ``DeleteObjects``, Azure blob batch).

``storage_options`` are obstore's (``object_store``'s) configuration keys, matched
case-insensitively, with or without their ``AZURE_STORAGE_``/``AZURE_``/``GOOGLE_``/``AWS_``
prefix: Azure ``account_name``, ``account_key``, ``sas_key``, ``token``, ``client_id``,
``client_secret``, ``tenant_id``, ``endpoint``, ``use_emulator``, ...; GCS
``service_account``, ``service_account_key``, ``application_credentials``, ``bearer_token``,
``base_url``, ...; plus HTTP client keys (``allow_http``, ``timeout``, ``connect_timeout``,
``proxy_url``, ...). Values are strings (``True``/``False`` become ``"true"``/``"false"``).
Unset keys come from the environment variables obstore reads (``AZURE_STORAGE_ACCOUNT_NAME``,
``GOOGLE_APPLICATION_CREDENTIALS``, ...). Only :data:`URL_OPTION_KEYS` appear in
:attr:`ObjectStore.url`; credentials never do, nor in ``repr`` or error messages, but they
travel with a pickled store (for Dask/Spark workers).

Examples
--------
>>> store = ObjectStore("memory://")  # obstore's in-process memory store
>>> store.put("ds/a", b"1")
>>> store.put_if_absent("ds/a", b"2"), store.get("ds/a"), sorted(store.iter_prefix("d"))
(False, b'1', ['ds/a'])
>>> ObjectStore("abfs://container/datasets", {"account_name": "acct", "account_key": "c2VjcmV0"}).url
'abfs://container/datasets?account_name=acct'
"""

from __future__ import annotations

import io
import os
import re
import threading
import time
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, cast

from kstore.core.arguments import check_text
from kstore.core.naming import validate_key
from kstore.errors import (
    InvalidArgumentError,
    InvalidKeyError,
    KeyNotFoundError,
    KstoreError,
    StoreError,
    StoreNotFoundError,
    failed_deletes_error,
)
from kstore.io.redact import redact_exception, redact_text, redact_url, url_secrets

__all__ = ["ObjectStore", "ObjectRangeReader", "SCHEMES", "URL_OPTION_KEYS", "CLIENT_OPTION_KEYS", "DELETE_BATCH",
           "DEFAULT_BUFFER_SIZE"]

#: Buffer of the files :meth:`ObjectStore.open` returns: one ranged GET fetches at least this
#: much (up to the end of the object), so small sequential reads do not each cost a request.
DEFAULT_BUFFER_SIZE = 1 << 20

SCHEMES: dict[str, str] = {
    "gs": "gcs",
    "abfs": "azure",
    "abfss": "azure",
    "az": "azure",
    "azure": "azure",
    "s3": "s3",
    "s3a": "s3",
    "memory": "memory",
}
"""URL scheme -> obstore backend (``"gcs"``, ``"azure"``, ``"s3"``, ``"memory"``).

:func:`~kstore.io.store.open_store` sends ``gs://``, ``abfs://``, ``abfss://``, ``az://`` and
``azure://`` URLs here; ``s3://`` goes to :class:`~kstore.io.s3.S3Store` (a subclass) unless
an :class:`ObjectStore` is made directly."""

URL_OPTION_KEYS = ("account_name", "endpoint", "base_url", "region", "use_emulator", "allow_http")
"""Options that are no secret: they are part of :attr:`ObjectStore.url` (as its query) and
may be given there. Every other option (credentials above all) is given in
``storage_options`` or the environment."""

#: obstore's HTTP client options (``client_options``); every other key is store configuration.
CLIENT_OPTION_KEYS = _CLIENT_KEYS = frozenset(
    {
        "allow_http",
        "allow_invalid_certificates",
        "connect_timeout",
        "default_content_type",
        "http1_only",
        "http2_keep_alive_interval",
        "http2_keep_alive_timeout",
        "http2_keep_alive_while_idle",
        "http2_only",
        "pool_idle_timeout",
        "pool_max_idle_per_host",
        "proxy_url",
        "proxy_ca_certificate",
        "proxy_excludes",
        "randomize_addresses",
        "read_timeout",
        "timeout",
        "user_agent",
    }
)
_KEY_PREFIXES = ("azure_storage_", "azure_", "google_", "aws_")
_ALIASES = {"endpoint_url": "endpoint", "sas_token": "sas_key"}
DELETE_BATCH = 1000
"""Keys per batch delete call of :meth:`ObjectStore.delete_many` (S3's limit; obstore splits
further where a service takes fewer)."""
#: Attempts of a conditional put (obstore's own retries are off for it).
_CREATE_ATTEMPTS = 4
_MISSING_CONTAINER = ("NoSuchBucket", "ContainerNotFound", "The specified bucket does not exist")
_SECRET_PARAM = re.compile(r"(?i)((?:sig|signature|credential|token|key)[\w-]*=)[^&\s\"'<]+")
#: Options whose value is a URL (a password in it is a credential).
_URL_VALUED = frozenset({"endpoint", "base_url", "proxy_url"})
#: obstore's S3 complaints about half a key pair -> (the option given, the option missing).
_MISSING_S3_KEYS = {
    "MissingAccessKeyId": ("aws_secret_access_key", "aws_access_key_id"),
    "Missing AccessKeyId": ("aws_secret_access_key", "aws_access_key_id"),
    "MissingSecretAccessKey": ("aws_access_key_id", "aws_secret_access_key"),
    "Missing SecretAccessKey": ("aws_access_key_id", "aws_secret_access_key"),
}


def _option_name(name: str) -> str:
    """The canonical name of a ``storage_options`` key (lower case, no service prefix)."""
    low = name.lower()
    for prefix in _KEY_PREFIXES:
        if low.startswith(prefix):
            low = low[len(prefix) :]
            break
    return _ALIASES.get(low, low)


def _option_value(name: str, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if not isinstance(value, str) or not value:
        raise InvalidArgumentError(
            f"storage_options key {name!r} must be a non-empty string or a bool, not "
            f"{type(value).__name__ if value != '' else 'an empty string'}"
        )
    return check_text(value, f"storage_options key {name!r}")


def _parse_options(storage_options: Any) -> dict[str, tuple[str, str]]:
    """``{canonical name: (name as given, value)}``; names keys, never values, in errors."""
    if storage_options is None:
        return {}
    if not isinstance(storage_options, Mapping):
        raise InvalidArgumentError(
            f"storage_options must be a dict of str to str, not {type(storage_options).__name__}"
        )
    out: dict[str, tuple[str, str]] = {}
    for name, value in storage_options.items():
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError(f"storage_options key {name!r} is not a string")
        if value is None:
            continue
        canonical = _option_name(name)
        text = _option_value(name, value)
        if canonical in out and out[canonical][1] != text:
            raise InvalidArgumentError(
                f"storage_options keys {out[canonical][0]!r} and {name!r} give different values"
            )
        out[canonical] = (name, text)
    return out


def _check_prefix(prefix: str, what: str) -> None:
    """Reject ``.``/``..``/empty components, backslashes and NULs in a (partial) key prefix."""
    parts = prefix.split("/")
    if (
        "\\" in prefix
        or "\x00" in prefix
        or any(p in (".", "..") for p in parts)
        or any(p == "" for p in parts[:-1])
    ):
        raise InvalidKeyError(
            f"invalid {what} {prefix!r}: empty, '.' or '..' component, or a backslash/NUL"
        )


def _without_folder_markers(listed: Iterator[tuple[str, int]]) -> Iterator[str]:
    """The keys of a sorted listing of ``(key, size)`` without S3 "folder" markers.

    A marker is an empty object named ``a/`` (the S3 console's "Create folder", some
    uploaders); ``object_store`` lists it as ``a``. An empty key with keys below it
    (``a/...``) is such a marker: no file system has a file and a folder of one name, and
    kstore writes none. An empty key waits until the listing passes ``a/`` to be decided.

    >>> list(_without_folder_markers(iter([("a", 0), ("a-b", 3), ("a/x", 5), ("b", 0)])))
    ['a-b', 'a/x', 'b']
    """
    pending: list[list[Any]] = []  # [key, decided, keep], in listing order
    for name, size in listed:
        for item in pending:
            if not item[1]:
                if name.startswith(item[0] + "/"):
                    item[1], item[2] = True, False  # a folder marker
                elif name > item[0] + "/":
                    item[1] = True  # nothing can be below it any more
        while pending and pending[0][1]:
            key, _, keep = pending.pop(0)
            if keep:
                yield key
        pending.append([name, size != 0, True])
        while pending and pending[0][1]:
            key, _, keep = pending.pop(0)
            if keep:
                yield key
    for key, _, keep in pending:
        if keep:
            yield key


def _missing_container(exc: BaseException) -> bool:
    """Whether a "not found" names the bucket or container, not the key."""
    return any(code in str(exc) for code in _MISSING_CONTAINER)


def _obstore_errors() -> Any:
    import obstore.exceptions

    return obstore.exceptions


class ObjectStore:
    """Keys are objects ``<prefix>/<key>`` in a GCS bucket or Azure container, via obstore.

    Parameters
    ----------
    url
        ``gs://bucket[/prefix]``, ``abfs://container[/prefix]`` (``abfss``, ``az``,
        ``azure``; ``abfs://container@account.dfs.core.windows.net/...``), ``s3://bucket``
        or ``memory://`` (obstore's in-process store, for tests). A query may set the
        :data:`URL_OPTION_KEYS` (``?account_name=...&endpoint=...``), never credentials.
    storage_options
        obstore configuration and client keys (see the module docstring); a key given in
        the URL and here must have the same value.

    Raises
    ------
    StoreError
        A malformed URL, or obstore is not installed.
    InvalidArgumentError
        An unknown or malformed ``storage_options`` key (named, its value never shown).

    Examples
    --------
    >>> store = ObjectStore("gs://bkt/data", {"GOOGLE_BEARER_TOKEN": "t0k3n", "base_url": "http://127.0.0.1:4443"})
    >>> store.url, store.bucket, store.prefix
    ('gs://bkt/data?base_url=http://127.0.0.1:4443', 'bkt', 'data')
    >>> "t0k3n" in repr(store) + str(store.url)
    False
    """

    #: obstore's ``mode="create"`` is an atomic create on every backend.
    atomic_create = True

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        shown = redact_url(url) if isinstance(url, str) else repr(url)
        if not isinstance(url, str):
            raise StoreError(f"invalid object store URL {shown}: must be a string")
        try:
            parts = urllib.parse.urlsplit(url)
        except ValueError as exc:
            raise StoreError(f"invalid object store URL {shown!r}: cannot be parsed") from exc
        backend = SCHEMES.get(parts.scheme.lower())
        if backend is None:
            raise StoreError(
                f"invalid object store URL {shown!r}: the scheme must be one of {sorted(SCHEMES)}"
            )
        if parts.fragment:
            raise StoreError(f"invalid object store URL {shown!r}: no '#' allowed")
        netloc = parts.netloc
        if backend != "memory" and (not netloc or any(c in netloc for c in "\\ ")):
            raise StoreError(f"invalid object store URL {shown!r}: no bucket or container name")
        if "@" in netloc and (":" in netloc.partition("@")[0] or backend in ("gcs", "s3")):
            raise StoreError(
                f"invalid object store URL {shown!r}: no credentials in the URL; pass them "
                "in storage_options or the environment"
            )
        prefix = parts.path.strip("/")
        if prefix:
            validate_key(prefix)
        options = self._url_options(parts.query, shown)
        for canonical, (name, value) in _parse_options(storage_options).items():
            if canonical in options and options[canonical][1] != value:
                raise InvalidArgumentError(
                    f"object store URL {shown!r} and storage_options key {name!r} give "
                    "different values"
                )
            options[canonical] = (name, value)
        self.scheme = parts.scheme.lower()
        self.backend = backend
        #: The bucket or container (for ``container@account.host`` URLs, the whole netloc).
        self.bucket = netloc
        self.prefix = prefix
        self._key_prefix = prefix + "/" if prefix else ""
        self._options = options
        self._secrets = [
            v for k, (_, v) in options.items() if k not in URL_OPTION_KEYS and v not in ("true", "false")
        ] + [s for k, (_, v) in options.items() if k in _URL_VALUED for s in url_secrets(v)]
        self._pid = -1
        self._lock = threading.Lock()
        self._stores: tuple[Any, Any] | None = None
        self.url: str | None = None if backend == "memory" else self._build_url()
        self._obstores()  # unknown keys and missing obstore fail here, not on first use

    @classmethod
    def from_url(cls, url: str, storage_options: Mapping[str, Any] | None = None) -> ObjectStore:
        """The store for ``url`` (what :func:`~kstore.io.store.open_store` calls).

        Parameters
        ----------
        url
            The URL (see :class:`ObjectStore`).
        storage_options
            obstore configuration and client keys.

        Returns
        -------
        ObjectStore
            The store (no request is made until it is used).

        Examples
        --------
        >>> ObjectStore.from_url("az://c/p?account_name=acct&use_emulator=true").url
        'az://c/p?account_name=acct&use_emulator=true'
        """
        return cls(url, storage_options)

    @staticmethod
    def _url_options(query: str, shown: str) -> dict[str, tuple[str, str]]:
        options: dict[str, tuple[str, str]] = {}
        for name, values in urllib.parse.parse_qs(query, keep_blank_values=True).items():
            canonical = _option_name(name)
            if canonical not in URL_OPTION_KEYS:
                raise StoreError(
                    f"invalid object store URL {shown!r}: unknown parameter {name!r}; the URL "
                    f"takes {list(URL_OPTION_KEYS)} (credentials: storage_options or the environment)"
                )
            options[canonical] = (canonical, _option_value(name, values[-1]))
        return options

    def _build_url(self) -> str:
        url = f"{self.scheme}://{self.bucket}" + (f"/{self.prefix}" if self.prefix else "")
        # a password in an endpoint URL is a credential: shown redacted (the options keep it)
        query = {k: redact_url(self._options[k][1]) for k in URL_OPTION_KEYS if k in self._options}
        if query:
            url += "?" + urllib.parse.urlencode(query, safe=":/*@")
        return url

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickle as URL + options (credentials included); the copy makes its own client."""
        if self.url is None:
            raise TypeError("an obstore memory store cannot be pickled; it lives in one process")
        options = {name: value for _, (name, value) in self._options.items()}
        return (_rebuild, (self.url.partition("?")[0], options))

    def __repr__(self) -> str:
        return f"ObjectStore({self.url or self.scheme + '://'!r})"

    # -- the obstore clients ------------------------------------------------------------------

    def _obstores(self) -> tuple[Any, Any]:
        """``(store, store without automatic retries)``, built once per process."""
        stores = self._stores
        if stores is not None and self._pid == os.getpid():
            return stores
        if self._pid not in (-1, os.getpid()):
            self._lock = threading.Lock()  # forked: the parent's lock may be held
        with self._lock:
            if self._stores is None or self._pid != os.getpid():
                first = self._make(retry=True)
                self._stores = (first, first if self.backend == "memory" else self._make(retry=False))
                self._pid = os.getpid()
            return self._stores

    def _make(self, retry: bool) -> Any:
        try:
            import obstore.store as obs
        except ImportError as exc:
            raise StoreError(
                f"{self.scheme}:// stores need obstore: pip install 'kstore[gcs]' or 'kstore[azure]'"
            ) from exc
        if self.backend == "memory":
            return obs.MemoryStore()
        config = {n: v for k, (n, v) in self._options.items() if k not in _CLIENT_KEYS}
        client = {k: v for k, (_, v) in self._options.items() if k in _CLIENT_KEYS}
        kwargs: dict[str, Any] = {"config": config, "client_options": client or None}
        provider = self._credential_provider()
        if provider is not None:
            kwargs["credential_provider"] = provider
        if not retry:
            kwargs["retry_config"] = {"max_retries": 0}
        errors = _obstore_errors()
        try:
            if self.backend == "gcs":
                return obs.GCSStore(self.bucket, **kwargs)
            if self.backend == "s3":
                return obs.S3Store(self.bucket, **kwargs)
            return obs.AzureStore.from_url(f"{self.scheme}://{self.bucket}", **kwargs)
        except (errors.UnknownConfigurationKeyError, ValueError, TypeError) as exc:
            raise InvalidArgumentError(
                f"cannot open {self._shown()}: {self._scrub(exc)} (storage_options keys: "
                f"{sorted(n for n, _ in self._options.values())})"
            ) from exc
        except errors.BaseError as exc:
            self._scrub(exc)  # redacts exc, which is chained to the error
            for code, (given, missing) in _MISSING_S3_KEYS.items():
                if code in str(exc):
                    raise InvalidArgumentError(
                        f"cannot open {self._shown()}: the S3 credentials are incomplete: {given} is given "
                        f"without {missing} (storage_options {missing!r} or {missing.upper()!r}, or the "
                        f"environment variable {missing.upper()}); give both, or neither to use the environment"
                    ) from exc
            raise StoreError(f"cannot open {self._shown()}: {self._scrub(exc)}") from exc

    def _credential_provider(self) -> Any:
        """A callable obstore asks for credentials (None: obstore's own lookup)."""
        return None

    # -- helpers ------------------------------------------------------------------------------

    def _shown(self) -> str:
        return repr(self.url or f"{self.scheme}://")

    def _scrub(self, exc: BaseException | str) -> str:
        """The first line of an obstore error without credentials (configured secrets and
        signature-like URL parameters become ``***``)."""
        text = redact_exception(exc, self._secrets) if isinstance(exc, BaseException) else redact_text(exc, self._secrets)
        return _SECRET_PARAM.sub(r"\1***", text.split("\n", 1)[0])

    def _full_key(self, key: str) -> str:
        return self._key_prefix + validate_key(key)

    def _container(self) -> str:
        """The bucket or container, as messages name it."""
        return f"{self.scheme}://{self.bucket}"

    def _where(self, full_key: str) -> str:
        return f"key {full_key!r} in {self._container()}"

    def _error(self, action: str, full_key: str, exc: BaseException) -> KstoreError:
        """The kstore error for an obstore failure of ``action`` on ``full_key`` (``exc`` is
        redacted in place: it is chained to the error)."""
        errors = _obstore_errors()
        text = self._scrub(exc)
        if isinstance(exc, (FileNotFoundError, errors.NotFoundError)):
            if _missing_container(exc):
                return StoreNotFoundError(f"{self._container()} does not exist ({action} of {full_key!r})")
            return KeyNotFoundError(f"{self._where(full_key)} not found")
        if isinstance(exc, ValueError):
            return InvalidKeyError(f"invalid key {full_key!r}: {text}")
        return StoreError(f"{self.backend} {action} of {self._where(full_key)} failed: {text}")

    # -- the Store protocol -------------------------------------------------------------------

    def get(self, key: str) -> bytes:
        """One GET. A missing bucket or container raises :class:`~kstore.errors.StoreNotFoundError`, any other
        failure :class:`~kstore.errors.StoreError` (credentials never shown). See
        :meth:`kstore.io.store.Store.get`."""
        import obstore

        full_key = self._full_key(key)
        try:
            return bytes(obstore.get(self._obstores()[0], full_key).bytes())
        except (_obstore_errors().BaseError, OSError, ValueError) as exc:
            raise self._error("get", full_key, exc) from exc

    def put(self, key: str, data: bytes) -> None:
        """One PUT, atomic on every backend; a failure raises :class:`~kstore.errors.StoreError`. See
        :meth:`kstore.io.store.Store.put`."""
        import obstore

        full_key = self._full_key(key)
        body = data if isinstance(data, bytes) else bytes(data)
        try:
            obstore.put(self._obstores()[0], full_key, body)
        except (_obstore_errors().BaseError, OSError, ValueError) as exc:
            raise self._error("put", full_key, exc) from exc

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """obstore's ``mode="create"``, the service's atomic create, sent without obstore's retries: a failure
        that may have reached the service (a timeout, a 5xx, a 409 conflict) is retried here a few times, and
        if a retry then finds the object, the stored bytes are compared with ``data`` to tell whether the
        earlier attempt was this call's. Failing after the retries, or with the bucket or container missing,
        raises :class:`~kstore.errors.StoreError`. See :meth:`kstore.io.store.Store.put_if_absent`."""
        import obstore

        errors = _obstore_errors()
        full_key = self._full_key(key)
        body = bytes(data)
        maybe_written = False
        last: BaseException | None = None
        for attempt in range(_CREATE_ATTEMPTS):
            try:
                obstore.put(self._obstores()[1], full_key, body, mode="create")
                return True
            except (errors.AlreadyExistsError, errors.PreconditionError):
                if maybe_written:
                    return self._get_or_none(full_key) == body
                return False
            except (
                errors.NotFoundError,
                FileNotFoundError,
                errors.PermissionDeniedError,
                errors.UnauthenticatedError,
                errors.NotSupportedError,
                ValueError,
            ) as exc:
                raise self._error("conditional put", full_key, exc) from exc
            except (errors.BaseError, OSError) as exc:
                maybe_written, last = True, exc
                if attempt + 1 < _CREATE_ATTEMPTS:
                    time.sleep(0.05 * 2**attempt)
        assert last is not None
        raise self._error("conditional put", full_key, last) from last

    def _get_or_none(self, full_key: str) -> bytes | None:
        try:
            return self.get(full_key[len(self._key_prefix) :])
        except KeyNotFoundError:
            return None

    def delete(self, key: str) -> None:
        """One DELETE; a missing bucket or container raises :class:`~kstore.errors.StoreNotFoundError`, any other
        failure :class:`~kstore.errors.StoreError`. See :meth:`kstore.io.store.Store.delete`."""
        import obstore

        errors = _obstore_errors()
        full_key = self._full_key(key)
        try:
            obstore.delete(self._obstores()[0], full_key)
        except (errors.NotFoundError, FileNotFoundError) as exc:
            if _missing_container(exc):
                raise self._error("delete", full_key, exc) from exc
            return  # a missing key is no error
        except (errors.BaseError, OSError, ValueError) as exc:
            raise self._error("delete", full_key, exc) from exc

    def delete_many(self, keys: Iterable[str]) -> None:
        """Remove objects with obstore's batch delete, :data:`DELETE_BATCH` keys a call.

        Missing keys are not an error. A batch that fails (GCS and Azure fail a batch on a
        missing key) is deleted again key by key; keys that could not be deleted raise one
        :class:`~kstore.errors.StoreError` naming them.

        Parameters
        ----------
        keys
            Keys relative to the store's prefix; duplicates are deleted once. All are
            validated before anything is deleted.

        Raises
        ------
        InvalidKeyError
            A key is not a valid kstore key (nothing was deleted).
        StoreError
            Some keys could not be deleted (the others were).

        Examples
        --------
        >>> store = ObjectStore("memory://")
        >>> for key in ("ds/a", "ds/b", "ds/c"):
        ...     store.put(key, b"x")
        >>> store.delete_many(["ds/a", "ds/b", "ds/missing"])
        >>> list(store.iter_prefix("ds/"))
        ['ds/c']
        """
        import obstore


        errors = _obstore_errors()
        full_keys = list(dict.fromkeys(self._full_key(k) for k in keys))  # validate all first
        store = self._obstores()[0]
        failed: list[tuple[str, str]] = []
        for start in range(0, len(full_keys), DELETE_BATCH):
            batch = full_keys[start : start + DELETE_BATCH]
            try:
                obstore.delete(store, batch)
                continue
            except (errors.BaseError, OSError):
                pass
            for full_key in batch:
                try:
                    obstore.delete(store, full_key)
                except (errors.NotFoundError, FileNotFoundError) as exc:
                    if _missing_container(exc):
                        raise self._error("delete", full_key, exc) from exc
                except (errors.BaseError, OSError) as exc:
                    failed.append((full_key, self._scrub(exc)))
        if failed:
            raise failed_deletes_error(failed, f" in {self._container()}")

    def exists(self, key: str) -> bool:
        """One HEAD request; a failure other than a missing object raises :class:`~kstore.errors.StoreError`. See
        :meth:`kstore.io.store.Store.exists`."""
        import obstore

        errors = _obstore_errors()
        full_key = self._full_key(key)
        try:
            obstore.head(self._obstores()[0], full_key)
            return True
        except (errors.NotFoundError, FileNotFoundError):
            return False
        except (errors.BaseError, OSError, ValueError) as exc:
            raise self._error("head", full_key, exc) from exc

    def iter_prefix(self, prefix: str, start_after: str | None = None) -> Iterator[str]:
        """obstore lists whole path segments, so the listing covers the prefix's "directory" (``"ds/table/x="``
        lists ``ds/table/``), starting after ``start_after`` or just before ``prefix`` (``offset``), page by
        page, and stops at the first key past the prefix: keys come in lexicographic order on GCS, Azure and
        S3 (obstore's memory backend does not sort). "Folder" marker objects (``ds/``) are skipped. A
        malformed or non-string ``prefix`` or ``start_after`` raises :class:`~kstore.errors.InvalidKeyError`
        at once; a missing bucket or container (:class:`~kstore.errors.StoreNotFoundError`) and a failed
        listing (:class:`~kstore.errors.StoreError`) raise while iterating. See
        :meth:`kstore.io.store.Store.iter_prefix`."""
        if not isinstance(prefix, str):
            raise InvalidKeyError(f"invalid key prefix {prefix!r}: must be a string")
        if prefix:
            _check_prefix(prefix, "key prefix")
        if start_after is not None and not isinstance(start_after, str):
            raise InvalidKeyError(f"invalid start_after {start_after!r}: must be a string")
        full_prefix = self._key_prefix + prefix
        after = self._key_prefix + start_after if start_after is not None else None
        return _without_folder_markers(self._list(full_prefix, after))

    def _list(self, full_prefix: str, after: str | None) -> Iterator[tuple[str, int]]:
        import obstore

        directory = full_prefix.rpartition("/")[0]
        offsets = [o for o in (after, full_prefix[:-1]) if o]
        offset = max(offsets) if offsets else None
        cut = len(self._key_prefix)
        ordered = self.backend != "memory"
        try:
            stream = obstore.list(self._obstores()[0], prefix=directory or None, offset=offset)
            for chunk in stream:
                for meta in chunk:
                    name: str = meta["path"]
                    if not name.startswith(full_prefix):
                        if ordered and name > full_prefix:
                            return
                        continue
                    if (after is None or name > after) and len(name) > cut and not name.endswith("/"):
                        yield name[cut:], int(meta["size"])
        except (_obstore_errors().BaseError, OSError) as exc:
            what = f"{self.backend} listing of prefix {full_prefix!r} in {self._container()}"
            text = self._scrub(exc)  # also redacts exc, which is chained to the error
            if _missing_container(exc):
                raise StoreNotFoundError(f"{what} failed: it does not exist") from exc
            raise StoreError(f"{what} failed: {text}") from exc

    def open(self, key: str, buffer_size: int = DEFAULT_BUFFER_SIZE) -> io.BufferedReader:
        """An :class:`io.BufferedReader` over an :class:`ObjectRangeReader`: one HEAD now (size and
        ETag; a failure raises :class:`~kstore.errors.StoreError`), then a ranged GET with ``If-Match``
        per buffer refill, so an object replaced while it is read raises
        :class:`~kstore.errors.StoreError` instead of mixing versions. See
        :meth:`kstore.io.store.Store.open`.

        Parameters
        ----------
        buffer_size
            Bytes fetched at least per ranged GET (up to the end of the object); beside the
            protocol's ``key``.
        """
        import obstore

        full_key = self._full_key(key)
        try:
            meta = obstore.head(self._obstores()[0], full_key)
        except (_obstore_errors().BaseError, OSError, ValueError) as exc:
            raise self._error("head", full_key, exc) from exc
        raw = ObjectRangeReader(self, full_key, int(meta["size"]), meta.get("e_tag"))
        return io.BufferedReader(raw, buffer_size=buffer_size)


class ObjectRangeReader(io.RawIOBase):
    """Unbuffered, seekable, read-only view of one object; each read is one ranged GET.

    Use it through :meth:`ObjectStore.open`, which adds a buffer.

    Parameters
    ----------
    store
        The store holding the object.
    full_key
        The object's name in the bucket or container, the store's prefix included.
    size
        The object's size in bytes (reads stop there).
    etag
        The object's ETag: every GET is conditional on it, so a replaced object raises
        :class:`~kstore.errors.StoreError`. None: unconditional GETs.

    Examples
    --------
    >>> store = ObjectStore("memory://")
    >>> store.put("ds/a", b"hello world")
    >>> raw = ObjectRangeReader(store, "ds/a", size=11)
    >>> raw.read(5), raw.seek(6), raw.read()
    (b'hello', 6, b'world')
    """

    def __init__(self, store: ObjectStore, full_key: str, size: int, etag: str | None = None) -> None:
        super().__init__()
        self._owner = store
        self._key = full_key
        self._etag = etag
        self._pos = 0
        #: The object's size in bytes (from the HEAD request at open time).
        self.size = size

    def __repr__(self) -> str:
        return f"ObjectRangeReader({self._owner.scheme}://{self._owner.bucket}/{self._key}, size={self.size})"

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def tell(self) -> int:
        self._check_open()
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._check_open()
        if whence == io.SEEK_SET:
            pos = offset
        elif whence == io.SEEK_CUR:
            pos = self._pos + offset
        elif whence == io.SEEK_END:
            pos = self.size + offset
        else:
            raise ValueError(f"invalid whence {whence!r}")
        if pos < 0:
            raise ValueError(f"negative seek position {pos}")
        self._pos = pos
        return pos

    def readinto(self, buffer: Any) -> int:
        self._check_open()
        view = memoryview(buffer).cast("B")
        data = self._fetch(self._pos, len(view))
        view[: len(data)] = data
        self._pos += len(data)
        return len(data)

    def readall(self) -> bytes:
        """The rest of the object in one request (the default would loop in 8 KiB steps)."""
        self._check_open()
        data = self._fetch(self._pos, max(self.size - self._pos, 0))
        self._pos += len(data)
        return data

    def _check_open(self) -> None:
        if self.closed:
            raise ValueError("I/O operation on closed file")

    def _fetch(self, start: int, length: int) -> bytes:
        if length <= 0 or start >= self.size:
            return b""
        import obstore

        errors = _obstore_errors()
        end = min(start + length, self.size)
        options: dict[str, Any] = {"range": (start, end)}
        if self._etag:
            options["if_match"] = self._etag
        owner = self._owner
        where = owner._where(self._key)
        try:
            return bytes(obstore.get(owner._obstores()[0], self._key, options=cast(Any, options)).bytes())
        except errors.PreconditionError as exc:
            owner._scrub(exc)  # redacts exc, which is chained to the error
            raise StoreError(f"{where} changed while it was being read; open it again") from exc
        except (errors.NotFoundError, FileNotFoundError) as exc:
            owner._scrub(exc)
            raise StoreError(f"{where} was deleted while it was being read") from exc
        except (errors.BaseError, OSError) as exc:
            raise StoreError(
                f"range read (bytes {start}-{end - 1}) of {where} failed: {owner._scrub(exc)}"
            ) from exc


def _rebuild(url: str, options: dict[str, str]) -> ObjectStore:
    """Unpickle helper: :class:`ObjectStore` from its URL and options."""
    return ObjectStore(url, options)
