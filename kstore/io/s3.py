"""An S3 bucket (or a prefix in one) as a store, using boto3 directly.

Any S3-compatible service works: pass ``endpoint_url`` (MinIO, Ceph, moto, ...).
Credentials come from the usual boto3 chain (environment, config files, instance roles)
unless given explicitly; they never appear in :attr:`S3Store.url`.

- ``put_if_absent`` is a conditional write (``PutObject`` with ``If-None-Match: *``), which
  S3 performs atomically: of several concurrent writers exactly one succeeds, the others
  get ``412 Precondition Failed`` (or ``409 ConditionalRequestConflict``) and see False.
  The service must support conditional writes (AWS S3 does since 2024-08; MinIO does).
- ``open`` returns a seekable file that fetches only the byte ranges that are read
  (HTTP Range GETs through a 1 MiB buffer), so pyarrow reads a Parquet footer and the
  column chunks it needs without downloading the whole object.

URL forms (what :func:`kstore.io.store.open_store` accepts)::

    s3://bucket
    s3://bucket/some/prefix
    s3://bucket/some/prefix?endpoint_url=http://127.0.0.1:9000&region=eu-west-1
    s3://key:secret@host[:port]/bucket[/prefix][?is_secure=false&region_name=...]

The last is minimalkv's (kartothek's) form: credentials and the endpoint host are in the URL,
the endpoint is ``https`` unless ``is_secure=false``, and, as in minimalkv,
``-<key>`` is appended to the bucket name unless it already ends with it or
``force_bucket_suffix=false``. Key and secret are percent-decoded (encode them with
``urllib.parse.quote_plus``). ``create_if_missing`` is accepted and ignored (kstore never
creates buckets).

``storage_options`` (:meth:`S3Store.from_options`, ``open_store(url, storage_options=...)``)
take the keys of pandas/fsspec and deltalake, case-insensitively: ``key``/``secret``/
``token``/``endpoint_url``/``region`` or ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/
``AWS_SESSION_TOKEN``/``AWS_ENDPOINT_URL``/``AWS_REGION`` (see :data:`STORAGE_OPTION_KEYS`).
Credentials (and a password in ``endpoint_url``) never appear in :attr:`S3Store.url`, ``repr``
or error messages (``kstore.io.redact``). Incomplete credentials (a secret without its key
id, a token without both) and an endpoint that is no ``http(s)://host[:port]`` URL are
:class:`~kstore.errors.InvalidArgumentError` when the store is made, not on its first request.

Examples
--------
>>> store = S3Store("my-bucket", "datasets/", endpoint_url="http://127.0.0.1:9000")
>>> store.url
's3://my-bucket/datasets?endpoint_url=http://127.0.0.1:9000'
>>> S3Store.from_url(store.url).prefix
'datasets'
"""

from __future__ import annotations

import io
import os
import threading
import time
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from kstore.core.arguments import check_text
from kstore.core.naming import validate_key
from kstore.errors import InvalidArgumentError, InvalidKeyError, KeyNotFoundError, StoreError, failed_deletes_error
from kstore.io.redact import has_userinfo, redact_exception, redact_text, redact_url, url_secrets

__all__ = ["S3Store", "S3RangeReader", "DEFAULT_BUFFER_SIZE", "STORAGE_OPTION_KEYS", "redact_url"]

#: Buffer of the files :meth:`S3Store.open` returns: one Range GET fetches at least this much
#: (up to the end of the object), so small sequential reads do not each cost a request.
DEFAULT_BUFFER_SIZE = 1 << 20

#: Client connection pool size (boto3's default of 10 is small for threaded writers).
_MAX_POOL_CONNECTIONS = 32

#: Keys per ``DeleteObjects`` request (S3's limit).
DELETE_BATCH = 1000

#: How often ``put_if_absent`` retries after ``409 ConditionalRequestConflict``.
_CONFLICT_RETRIES = 4

_NOT_FOUND_CODES = frozenset({"NoSuchKey", "NotFound", "404"})
_PRECONDITION_CODES = frozenset({"PreconditionFailed", "412"})
_CONFLICT_CODES = frozenset({"ConditionalRequestConflict", "409"})
_URL_QUERY_KEYS = frozenset({"endpoint_url", "region", "region_name"})
#: Query parameters of the minimalkv URL form ``s3://key:secret@host/bucket``.
_MINIMALKV_QUERY_KEYS = frozenset(
    {"is_secure", "region", "region_name", "session_token", "force_bucket_suffix", "create_if_missing"}
)
_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})

#: ``storage_options`` keys (matched case-insensitively) and the constructor argument each sets.
STORAGE_OPTION_KEYS: dict[str, str] = {
    **dict.fromkeys(
        ("key", "access_key", "access_key_id", "aws_access_key_id"), "aws_access_key_id"
    ),
    **dict.fromkeys(
        ("secret", "secret_key", "secret_access_key", "aws_secret_access_key"),
        "aws_secret_access_key",
    ),
    **dict.fromkeys(
        ("token", "session_token", "aws_session_token", "aws_token", "aws_security_token"),
        "aws_session_token",
    ),
    **dict.fromkeys(("endpoint_url", "endpoint", "aws_endpoint_url", "aws_endpoint"), "endpoint_url"),
    **dict.fromkeys(("region", "region_name", "aws_region", "aws_default_region"), "region_name"),
}
#: Accepted and without effect: deltalake's switch for ``http://`` endpoints (kstore takes the
#: scheme from the endpoint URL).
_IGNORED_OPTION_KEYS = frozenset({"aws_allow_http", "allow_http"})
_SECRET_ARGS = frozenset({"aws_access_key_id", "aws_secret_access_key", "aws_session_token"})


def _flag(value: str, name: str, url: str) -> bool:
    text = value.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise StoreError(f"invalid S3 URL {redact_url(url)!r}: {name} must be true or false")


def _parse_options(storage_options: Any) -> dict[str, Any]:
    """Constructor arguments from a ``storage_options`` mapping (names keys, never values)."""
    if storage_options is None:
        return {}
    if not isinstance(storage_options, Mapping):
        raise InvalidArgumentError(
            f"storage_options must be a dict of str to str, not {type(storage_options).__name__}"
        )
    out: dict[str, Any] = {}
    given: dict[str, str] = {}
    for name, value in storage_options.items():
        if not isinstance(name, str):
            raise InvalidArgumentError(f"storage_options key {name!r} is not a string")
        low = name.lower()
        if low in _IGNORED_OPTION_KEYS:
            continue
        target = STORAGE_OPTION_KEYS.get(low)
        if target is None:
            raise InvalidArgumentError(
                f"unknown S3 storage_options key {name!r}; known keys: "
                f"{sorted(set(STORAGE_OPTION_KEYS) | _IGNORED_OPTION_KEYS)} (any case)"
            )
        if value is None:
            continue
        if not isinstance(value, str) or not value:
            raise InvalidArgumentError(
                f"S3 storage_options key {name!r} must be a non-empty string, not "
                f"{type(value).__name__ if value != '' else 'an empty string'}"
            )
        check_text(value, f"S3 storage_options key {name!r}")
        if target in out and out[target] != value:
            raise InvalidArgumentError(
                f"S3 storage_options keys {given[target]!r} and {name!r} give different values "
                f"for {target}"
            )
        out[target] = value
        given[target] = name
    return out


#: How each constructor argument is spelled in ``storage_options`` (for error messages).
_OPTION_HINTS = {
    "aws_access_key_id": "storage_options 'key' or 'AWS_ACCESS_KEY_ID'",
    "aws_secret_access_key": "storage_options 'secret' or 'AWS_SECRET_ACCESS_KEY'",
    "aws_session_token": "storage_options 'token' or 'AWS_SESSION_TOKEN'",
}


def _check_credentials(credentials: Mapping[str, Any]) -> None:
    """Explicit credentials are all strings, and complete: an access key id with its secret
    (boto3 would fail on the first request with a ``TypeError``, or sign with half of them).
    Names the arguments, never a value."""
    for name, value in credentials.items():
        if not isinstance(value, str) or not value:
            raise InvalidArgumentError(
                f"S3 credential {name} ({_OPTION_HINTS[name]}) must be a non-empty string, not "
                f"{type(value).__name__ if value != '' else 'an empty string'}"
            )
        check_text(value, f"S3 credential {name}")
    has_key, has_secret = "aws_access_key_id" in credentials, "aws_secret_access_key" in credentials
    if has_key != has_secret or ("aws_session_token" in credentials and not has_key):
        given = [n for n in _OPTION_HINTS if n in credentials]
        missing = [n for n in ("aws_access_key_id", "aws_secret_access_key") if n not in credentials]
        raise InvalidArgumentError(
            f"S3 credentials are incomplete: {' and '.join(given)} given without "
            + " and ".join(f"{n} ({_OPTION_HINTS[n]})" for n in missing)
            + "; give the access key id and the secret access key together (a session token with both), or "
            "none of them to use boto3's credential chain (environment, config files, instance role)"
        )


def _check_endpoint(endpoint_url: Any) -> None:
    """An ``http(s)://host[:port]`` URL; botocore would raise a raw ``ValueError`` otherwise."""
    if endpoint_url is None:
        return
    if not isinstance(endpoint_url, str):
        shown = type(endpoint_url).__name__
    elif "://" not in endpoint_url and "@" in endpoint_url:  # user:password@host without a scheme
        shown = "***" + endpoint_url[endpoint_url.rfind("@") :]
    else:
        shown = redact_url(endpoint_url)
    ok = isinstance(endpoint_url, str)
    if ok:
        check_text(endpoint_url, "S3 endpoint_url")
        try:
            parts = urllib.parse.urlsplit(endpoint_url)
            ok = parts.scheme.lower() in ("http", "https") and bool(parts.hostname) and (
                parts.port is None or 0 < parts.port < 65536)
        except ValueError:  # a port that is no number or out of range
            ok = False
    if not ok:
        raise InvalidArgumentError(
            f"S3 endpoint_url must be an http:// or https:// URL with a host (and a port from 1 to 65535), "
            f"got {shown!r}"
        )


def _error_code(exc: Any) -> tuple[str, int | None]:
    """``(error code, HTTP status)`` of a botocore ``ClientError``."""
    response = getattr(exc, "response", None) or {}
    code = str(response.get("Error", {}).get("Code", ""))
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return code, status


def _retry_attempts(exc: Any) -> int:
    """How many times botocore retried the request that ended in ``exc``."""
    response = getattr(exc, "response", None) or {}
    return int(response.get("ResponseMetadata", {}).get("RetryAttempts", 0) or 0)


def _is_not_found(exc: Any) -> bool:
    code, status = _error_code(exc)
    # a missing bucket is a configuration error, not a missing key
    return code in _NOT_FOUND_CODES or (status == 404 and code != "NoSuchBucket")


def _is_aws_endpoint(endpoint_url: str | None) -> bool:
    host = urllib.parse.urlsplit(endpoint_url or "").hostname or ""
    return host.endswith((".amazonaws.com", ".amazonaws.com.cn"))


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


class S3Store:
    """Keys are objects ``<prefix>/<key>`` in ``bucket``.

    Parameters
    ----------
    bucket
        The bucket name (it must exist; kstore never creates buckets).
    prefix
        Optional key prefix all keys live under (``"a/b"`` and ``"a/b/"`` are the same).
    client
        A ready boto3 S3 client to use in this process. A pickled store (and a forked
        child process) builds its own client from the other arguments instead.
    endpoint_url, region_name
        For S3-compatible services and non-default regions; both are part of :attr:`url`
        (a password in the endpoint, ``http://user:password@host``, shows as ``***`` there
        and in every message; a pickled store keeps it).
    aws_access_key_id, aws_secret_access_key, aws_session_token
        Explicit credentials; by default boto3 finds them (environment, config, role).
        They are never part of :attr:`url` or ``repr``, but do travel with a pickled store.

    Examples
    --------
    Making a store sends no request; the first method call does (the method examples
    below need a reachable bucket):

    >>> import pickle
    >>> store = S3Store("my-bucket", "datasets/", region_name="eu-west-1", aws_access_key_id="AKID",
    ...                 aws_secret_access_key="s3cr3t")
    >>> store.prefix, store.url
    ('datasets', 's3://my-bucket/datasets?region=eu-west-1')
    >>> repr(pickle.loads(pickle.dumps(store)))  # for Dask/Spark workers; no credentials shown
    "S3Store('s3://my-bucket/datasets?region=eu-west-1')"
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        client: Any = None,
        endpoint_url: str | None = None,
        region_name: str | None = None,
        aws_access_key_id: str | None = None,
        aws_secret_access_key: str | None = None,
        aws_session_token: str | None = None,
    ) -> None:
        if not isinstance(bucket, str) or not bucket or any(c in bucket for c in "/?#\\ "):
            raise StoreError(f"invalid S3 bucket name {bucket!r}")
        if not isinstance(prefix, str):
            raise StoreError(f"invalid S3 key prefix {prefix!r}: must be a string")
        prefix = prefix.strip("/")
        credentials = {
            k: v
            for k, v in (
                ("aws_access_key_id", aws_access_key_id),
                ("aws_secret_access_key", aws_secret_access_key),
                ("aws_session_token", aws_session_token),
            )
            if v is not None
        }
        _check_credentials(credentials)
        _check_endpoint(endpoint_url)
        if region_name is not None and (not isinstance(region_name, str) or not region_name):
            raise InvalidArgumentError(f"S3 region_name must be a non-empty string, got {region_name!r}")
        if prefix:
            validate_key(prefix)
            if "?" in prefix or "#" in prefix:
                raise InvalidKeyError(f"invalid S3 key prefix {prefix!r}: no '?' or '#'")
        if client is not None:
            # remember where a given client points, so a pickled copy goes to the same place
            meta = getattr(client, "meta", None)
            client_endpoint = getattr(meta, "endpoint_url", None)
            if endpoint_url is None and client_endpoint and not _is_aws_endpoint(client_endpoint):
                endpoint_url = client_endpoint
            if region_name is None:
                region_name = getattr(meta, "region_name", None) if endpoint_url else None
        self.bucket = bucket
        self.prefix = prefix
        self.endpoint_url = endpoint_url
        self.region_name = region_name
        self._key_prefix = prefix + "/" if prefix else ""
        self._credentials = credentials
        self._client = client
        self._client_pid = os.getpid() if client is not None else None
        self._lock = threading.Lock()
        self.url = self._build_url()

    # -- construction, URL, pickling ------------------------------------------------------

    def _build_url(self) -> str:
        url = f"s3://{self.bucket}" + (f"/{self.prefix}" if self.prefix else "")
        query = {}
        if self.endpoint_url:  # a password in the endpoint is a credential: never shown, pickled apart
            query["endpoint_url"] = redact_url(self.endpoint_url)
        if self.region_name:
            query["region"] = self.region_name
        if query:
            url += "?" + urllib.parse.urlencode(query, safe=":/*@")
        return url

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> S3Store:
        """Open ``s3://bucket[/prefix][?endpoint_url=...&region=...]`` or minimalkv's
        ``s3://key:secret@host[:port]/bucket[/prefix][?is_secure=false...]``.

        Parameters
        ----------
        url
            The S3 URL.
        **kwargs
            Passed on to the constructor (``client``, credentials, ...); the same setting in
            the URL and in ``kwargs`` with different values is an error.

        Returns
        -------
        S3Store
            The store (no request is made until it is used).

        Examples
        --------
        >>> S3Store.from_url("s3://bkt/a/b?region=eu-west-1").region_name
        'eu-west-1'
        >>> store = S3Store.from_url("s3://AKID:s3cr3t@127.0.0.1:9000/bkt-akid/p?is_secure=false")
        >>> store.url, repr(store)
        ('s3://bkt-akid/p?endpoint_url=http://127.0.0.1:9000', "S3Store('s3://bkt-akid/p?endpoint_url=http://127.0.0.1:9000')")
        """
        shown = redact_url(url)
        try:
            parts = urllib.parse.urlsplit(url)
        except ValueError as exc:
            raise StoreError(f"invalid S3 URL {shown!r}: cannot be parsed") from exc
        if parts.scheme != "s3" or not parts.netloc:
            raise StoreError(
                f"invalid S3 URL {shown!r}: expected s3://bucket[/prefix][?endpoint_url=...]"
            )
        if has_userinfo(url) and "@" not in parts.netloc:
            raise StoreError(
                f"invalid S3 URL {shown!r}: percent-encode the key and secret of "
                "s3://key:secret@host/bucket (urllib.parse.quote_plus); a '/', '?' or '#' in "
                "them ends the host part"
            )
        if parts.fragment:
            raise StoreError(f"invalid S3 URL {shown!r}: no '#' allowed")
        query = urllib.parse.parse_qs(parts.query, keep_blank_values=True, strict_parsing=False)
        if "@" in parts.netloc:
            bucket, prefix, options = cls._minimalkv_options(url, parts, query)
        else:
            unknown = set(query) - _URL_QUERY_KEYS
            if unknown:
                raise StoreError(
                    f"invalid S3 URL {shown!r}: unknown parameter(s) {sorted(unknown)}; "
                    "use endpoint_url and region (credentials: storage_options or the environment)"
                )
            bucket, prefix, options = parts.netloc, parts.path, {}
            if query.get("endpoint_url", [""])[-1]:
                options["endpoint_url"] = query["endpoint_url"][-1]
            region = (query.get("region") or query.get("region_name") or [""])[-1]
            if region:
                options["region_name"] = region
        for name, value in kwargs.items():
            if name in options and value is not None and options[name] != value:
                raise InvalidArgumentError(
                    f"S3 URL {shown!r} and the options give different values for {name}"
                )
        options.update({k: v for k, v in kwargs.items() if v is not None or k not in options})
        return cls(bucket, prefix, **options)

    @staticmethod
    def _minimalkv_options(
        url: str, parts: urllib.parse.SplitResult, query: dict[str, list[str]]
    ) -> tuple[str, str, dict[str, Any]]:
        """Bucket, prefix and constructor arguments of ``s3://key:secret@host/bucket/prefix``."""
        shown = redact_url(url)
        unknown = set(query) - _MINIMALKV_QUERY_KEYS
        if unknown:
            raise StoreError(
                f"invalid S3 URL {shown!r}: unknown parameter(s) {sorted(unknown)}; this "
                f"minimalkv form takes {sorted(_MINIMALKV_QUERY_KEYS)}"
            )
        userinfo, _, hostport = parts.netloc.rpartition("@")
        key, colon, secret = userinfo.partition(":")
        key, secret = urllib.parse.unquote_plus(key), urllib.parse.unquote_plus(secret)
        if not key or not colon or not secret:
            raise StoreError(
                f"invalid S3 URL {shown!r}: expected s3://key:secret@host[:port]/bucket[/prefix]"
            )
        bucket, _, prefix = parts.path.lstrip("/").partition("/")
        if not bucket:
            raise StoreError(f"invalid S3 URL {shown!r}: no bucket after the host")
        last = {name: values[-1] for name, values in query.items()}
        if _flag(last.get("force_bucket_suffix", "true"), "force_bucket_suffix", url):
            if not bucket.lower().endswith("-" + key.lower()):
                bucket += "-" + key.lower()
        if "create_if_missing" in last:
            _flag(last["create_if_missing"], "create_if_missing", url)
        options: dict[str, Any] = {"aws_access_key_id": key, "aws_secret_access_key": secret}
        try:
            port = urllib.parse.urlsplit("//" + hostport).port
            if port is not None and not 0 < port < 65536:
                raise ValueError(port)
        except ValueError as exc:
            raise StoreError(f"invalid S3 URL {shown!r}: the port is not a number") from exc
        if hostport:
            secure = _flag(last.get("is_secure", "true"), "is_secure", url)
            options["endpoint_url"] = ("https" if secure else "http") + "://" + hostport
        region = last.get("region_name") or last.get("region")
        if region:
            options["region_name"] = region
        if last.get("session_token"):
            options["aws_session_token"] = last["session_token"]
        return bucket, prefix, options

    @classmethod
    def from_options(
        cls, url: str, storage_options: Mapping[str, Any] | None = None, **kwargs: Any
    ) -> S3Store:
        """Open an S3 URL (any form :meth:`from_url` takes) with pandas/deltalake-style
        ``storage_options`` (see :data:`STORAGE_OPTION_KEYS`).

        A setting given both in the URL and in the options must agree;
        :class:`~kstore.errors.InvalidArgumentError` names the conflicting or unknown key,
        never a value.

        Parameters
        ----------
        url
            The S3 URL.
        storage_options
            Credentials, endpoint and region, keys matched case-insensitively.
        **kwargs
            Passed on to the constructor, as in :meth:`from_url`.

        Returns
        -------
        S3Store
            The store; its :attr:`url` and ``repr`` never show the credentials.

        Examples
        --------
        >>> store = S3Store.from_options(
        ...     "s3://bkt/data",
        ...     {"AWS_ACCESS_KEY_ID": "AKID", "AWS_SECRET_ACCESS_KEY": "s3cr3t",
        ...      "AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_REGION": "eu-west-1"},
        ... )
        >>> store.url
        's3://bkt/data?endpoint_url=http://127.0.0.1:9000&region=eu-west-1'
        """
        options = _parse_options(storage_options)
        for name in set(options) & set(kwargs):
            if kwargs[name] is not None and kwargs[name] != options[name]:
                raise InvalidArgumentError(f"storage_options and the arguments give different values for {name}")
        options.update({k: v for k, v in kwargs.items() if v is not None})
        return cls.from_url(url, **options)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickle as URL + explicit credentials; the copy creates its own client lazily."""
        if self.endpoint_url and redact_url(self.endpoint_url) != self.endpoint_url:
            # the URL shows the endpoint redacted: the real one travels with the credentials
            url = self.url.partition("?")[0]
            if self.region_name:
                url += "?" + urllib.parse.urlencode({"region": self.region_name})
            return (_rebuild, (url, {**self._credentials, "endpoint_url": self.endpoint_url}))
        return (_rebuild, (self.url, dict(self._credentials)))

    def __repr__(self) -> str:
        return f"S3Store({self.url!r})"

    @property
    def client(self) -> Any:
        """The boto3 S3 client, created on first use (once per process, thread-safe)."""
        pid = os.getpid()
        client = self._client
        if client is not None and self._client_pid == pid:
            return client
        if self._client_pid is not None and self._client_pid != pid:
            # forked: the parent's lock may be held by a thread that does not exist here
            self._lock = threading.Lock()
        with self._lock:
            if self._client is None or self._client_pid != pid:
                self._client = self._make_client()
                self._client_pid = pid
            return self._client

    def _make_client(self) -> Any:
        try:
            import boto3
            from botocore.config import Config
        except ImportError as exc:  # pragma: no cover - boto3 is the s3 extra
            raise StoreError("S3 stores need boto3: pip install 'kstore[s3]'") from exc
        session = boto3.session.Session(region_name=self.region_name, **self._credentials)
        config = Config(max_pool_connections=_MAX_POOL_CONNECTIONS, retries={"mode": "standard"})
        return session.client("s3", endpoint_url=self.endpoint_url, config=config)

    # -- helpers ------------------------------------------------------------------------------

    def _full_key(self, key: str) -> str:
        return self._key_prefix + validate_key(key)

    def _at(self) -> str:
        """`` at <endpoint>`` (redacted) for messages, or nothing for AWS's default endpoint."""
        return f" at {redact_url(self.endpoint_url)}" if self.endpoint_url else ""

    def _scrub(self, exc: BaseException | str) -> str:
        """The text of a botocore error without credentials (those configured, a password of
        the endpoint, and any URL user info or signature-like parameter in it)."""
        secrets = list(self._credentials.values()) + url_secrets(self.endpoint_url or "")
        return redact_exception(exc, secrets) if isinstance(exc, BaseException) else redact_text(exc, secrets)

    def _where(self, full_key: str) -> str:
        return f"key {full_key!r} in bucket {self.bucket!r}{self._at()}"

    def _store_error(self, action: str, full_key: str, exc: BaseException) -> StoreError:
        return StoreError(f"S3 {action} of {self._where(full_key)} failed: {self._scrub(exc)}")

    def _not_found(self, full_key: str) -> KeyNotFoundError:
        return KeyNotFoundError(f"{self._where(full_key)} not found")

    # -- the Store protocol -------------------------------------------------------------------

    def get(self, key: str) -> bytes:
        """The object's bytes (one ``GetObject``).

        Parameters
        ----------
        key
            The key, relative to the store's prefix.

        Returns
        -------
        bytes
            The object's content.

        Raises
        ------
        KeyNotFoundError
            The object does not exist.
        StoreError
            Any other S3 failure (a missing bucket, denied access, ...).

        Examples
        --------
        Needs a reachable bucket, so it is not run here (the tests under ``tests/io/`` run every
        store method against moto's S3 server)::

            store = S3Store("my-bucket", "datasets")
            store.put("a/b", b"1")            # object datasets/a/b
            store.get("a/b")                  # b'1'
        """
        from botocore.exceptions import BotoCoreError, ClientError

        full_key = self._full_key(key)
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=full_key)
            body: bytes = response["Body"].read()
            return body
        except ClientError as exc:
            if _is_not_found(exc):
                raise self._not_found(full_key) from exc
            raise self._store_error("get", full_key, exc) from exc
        except BotoCoreError as exc:
            raise self._store_error("get", full_key, exc) from exc

    def put(self, key: str, data: bytes) -> None:
        """Write (or replace) the object (one ``PutObject``; S3 PUTs are atomic).

        Parameters
        ----------
        key
            The key, relative to the store's prefix.
        data
            The bytes to store.

        Raises
        ------
        StoreError
            The request failed.

        Examples
        --------
        Needs a reachable bucket, so it is not run here (the tests under ``tests/io/`` run every
        store method against moto's S3 server)::

            store = S3Store("my-bucket", "datasets")
            store.put("a/b", b"new")
        """
        from botocore.exceptions import BotoCoreError, ClientError

        full_key = self._full_key(key)
        try:
            self.client.put_object(Bucket=self.bucket, Key=full_key, Body=bytes(data))
        except (ClientError, BotoCoreError) as exc:
            raise self._store_error("put", full_key, exc) from exc

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Create the object unless it exists (``If-None-Match: *``); True if this call wrote it.

        ``412 PreconditionFailed`` means the key exists: False. ``409
        ConditionalRequestConflict`` (a concurrent write to the same key was in flight) is
        retried a few times and then answered with False, since another writer is creating
        the key. If botocore had retried the request (say after a timeout) and then got a
        412, the earlier attempt may have been ours: the stored bytes are compared with
        ``data`` to tell.

        Parameters
        ----------
        key
            The key, relative to the store's prefix.
        data
            The bytes to store.

        Returns
        -------
        bool
            True if this call created the object; False if it existed.

        Raises
        ------
        StoreError
            Any other S3 failure.

        Examples
        --------
        Needs a reachable bucket, so it is not run here (the tests under ``tests/io/`` run every
        store method against moto's S3 server)::

            store = S3Store("my-bucket", "datasets")
            store.put_if_absent("ds/_kstore/log/0.json", b"{}")   # True
            store.put_if_absent("ds/_kstore/log/0.json", b"{}")   # False: it exists
        """
        from botocore.exceptions import BotoCoreError, ClientError

        full_key = self._full_key(key)
        body = bytes(data)
        for attempt in range(_CONFLICT_RETRIES + 1):
            try:
                self.client.put_object(Bucket=self.bucket, Key=full_key, Body=body, IfNoneMatch="*")
                return True
            except ClientError as exc:
                code, status = _error_code(exc)
                if code in _PRECONDITION_CODES or status == 412:
                    if _retry_attempts(exc) > 0:
                        return self._get_or_none(full_key) == body
                    return False
                if code in _CONFLICT_CODES or status == 409:
                    if attempt < _CONFLICT_RETRIES:
                        time.sleep(0.05 * 2**attempt)
                        continue
                    return False
                raise self._store_error("conditional put", full_key, exc) from exc
            except BotoCoreError as exc:
                raise self._store_error("conditional put", full_key, exc) from exc
        return False  # pragma: no cover - the loop always returns

    def _get_or_none(self, full_key: str) -> bytes | None:
        try:
            return self.get(full_key[len(self._key_prefix) :])
        except KeyNotFoundError:
            return None

    def delete(self, key: str) -> None:
        """Remove the object (one ``DeleteObject``); a missing key is not an error.

        Parameters
        ----------
        key
            The key, relative to the store's prefix.

        Raises
        ------
        StoreError
            The request failed.

        Examples
        --------
        Needs a reachable bucket, so it is not run here (the tests under ``tests/io/`` run every
        store method against moto's S3 server)::

            store = S3Store("my-bucket", "datasets")
            store.delete("a/b")
            store.exists("a/b")               # False
        """
        from botocore.exceptions import BotoCoreError, ClientError

        full_key = self._full_key(key)
        try:
            self.client.delete_object(Bucket=self.bucket, Key=full_key)
        except ClientError as exc:
            if _is_not_found(exc):
                return
            raise self._store_error("delete", full_key, exc) from exc
        except BotoCoreError as exc:
            raise self._store_error("delete", full_key, exc) from exc

    def delete_many(self, keys: Iterable[str]) -> None:
        """Remove objects with ``DeleteObjects``, :data:`DELETE_BATCH` keys a request.

        Missing keys are not an error. Every batch is sent; keys S3 reports it could not
        delete (and those of failed requests) raise one :class:`StoreError` naming them.

        Parameters
        ----------
        keys
            The keys, relative to the store's prefix (all validated before any request;
            duplicates are sent once).

        Raises
        ------
        StoreError
            Names the keys that could not be deleted.

        Examples
        --------
        Needs a reachable bucket, so it is not run here (the tests under ``tests/io/`` run every
        store method against moto's S3 server)::

            store = S3Store("my-bucket", "datasets")
            store.delete_many(f"ds/table/part-{i}.parquet" for i in range(2500))  # 3 requests
        """
        from botocore.exceptions import BotoCoreError, ClientError


        full_keys = list(dict.fromkeys(self._full_key(k) for k in keys))  # validate all first
        failed: list[tuple[str, str]] = []
        for start in range(0, len(full_keys), DELETE_BATCH):
            batch = full_keys[start : start + DELETE_BATCH]
            try:
                response = self.client.delete_objects(
                    Bucket=self.bucket,
                    Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True},
                )
            except (ClientError, BotoCoreError) as exc:
                failed.extend((k, self._scrub(exc)) for k in batch)
                continue
            for error in response.get("Errors", ()):
                if error.get("Code") in _NOT_FOUND_CODES:
                    continue
                failed.append((str(error.get("Key")), self._scrub(f"{error.get('Code')}: {error.get('Message')}")))
        if failed:
            raise failed_deletes_error(failed, f" in bucket {self.bucket!r}{self._at()}")

    def exists(self, key: str) -> bool:
        """Whether the object exists (one ``HeadObject``).

        Parameters
        ----------
        key
            The key, relative to the store's prefix.

        Returns
        -------
        bool
            True if :meth:`get` would find it.

        Raises
        ------
        StoreError
            The request failed for another reason than a missing object.

        Examples
        --------
        Needs a reachable bucket, so it is not run here (the tests under ``tests/io/`` run every
        store method against moto's S3 server)::

            store = S3Store("my-bucket", "datasets")
            store.exists("a/b")               # True once store.put("a/b", ...) ran
        """
        from botocore.exceptions import BotoCoreError, ClientError

        full_key = self._full_key(key)
        try:
            self.client.head_object(Bucket=self.bucket, Key=full_key)
            return True
        except ClientError as exc:
            if _is_not_found(exc):
                return False
            raise self._store_error("head", full_key, exc) from exc
        except BotoCoreError as exc:
            raise self._store_error("head", full_key, exc) from exc

    def iter_prefix(self, prefix: str, start_after: str | None = None) -> Iterator[str]:
        """Keys (relative to the store prefix) that start with ``prefix``, page by page.

        ``prefix`` is a plain string prefix: ``"ds"`` matches ``ds/x`` and ``ds2/y``,
        ``"ds/"`` only the former. "Folder" marker objects (names ending in ``/``) are
        skipped; they are no valid keys. ``start_after`` is passed to ``ListObjectsV2`` as
        ``StartAfter``: the listing begins after that key.

        Parameters
        ----------
        prefix
            A plain string prefix, relative to the store's prefix (``""``: every key).
        start_after
            A key relative to the store's prefix; only keys after it are listed.

        Returns
        -------
        Iterator[str]
            The keys, relative to the store's prefix, in S3's (lexicographic) order; the
            pages are requested while iterating.

        Raises
        ------
        InvalidKeyError
            ``prefix`` has an empty, ``.`` or ``..`` component, a backslash or a NUL.
        StoreError
            A listing request failed.

        Examples
        --------
        Needs a reachable bucket, so it is not run here (the tests under ``tests/io/`` run every
        store method against moto's S3 server)::

            store = S3Store("my-bucket", "datasets")
            list(store.iter_prefix("ds/_kstore/log/"))                 # every log entry
            list(store.iter_prefix("ds/_kstore/log/", start_after="ds/_kstore/log/00000000000000000041.json"))
        """
        if not isinstance(prefix, str):
            raise InvalidKeyError(f"invalid key prefix {prefix!r}: must be a string")
        if prefix:
            _check_prefix(prefix, "key prefix")
        after = self._key_prefix + start_after if start_after is not None else None
        return self._list(self._key_prefix + prefix, after)

    def _list(self, full_prefix: str, start_after: str | None = None) -> Iterator[str]:
        from botocore.exceptions import BotoCoreError, ClientError

        cut = len(self._key_prefix)
        extra = {"StartAfter": start_after} if start_after is not None else {}
        try:
            paginator = self.client.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=self.bucket, Prefix=full_prefix, **extra):
                for obj in page.get("Contents", ()):
                    name: str = obj["Key"]
                    if (
                        name.startswith(self._key_prefix)
                        and len(name) > cut
                        and not name.endswith("/")
                    ):
                        yield name[cut:]
        except (ClientError, BotoCoreError) as exc:
            raise StoreError(
                f"S3 listing of prefix {full_prefix!r} in bucket {self.bucket!r}{self._at()} failed: "
                f"{self._scrub(exc)}"
            ) from exc

    def open(self, key: str, buffer_size: int = DEFAULT_BUFFER_SIZE) -> io.BufferedReader:
        """A seekable read-only file over the object that fetches byte ranges on demand.

        One ``HeadObject`` now (size and ETag; :class:`KeyNotFoundError` if missing), then a
        Range GET per buffer refill. Range GETs carry ``If-Match: <etag>``, so an object
        replaced while it is being read raises :class:`StoreError` instead of mixing bytes
        of two versions.

        Parameters
        ----------
        key
            The key, relative to the store's prefix.
        buffer_size
            Bytes one Range GET fetches at least (:data:`DEFAULT_BUFFER_SIZE`, 1 MiB).

        Returns
        -------
        io.BufferedReader
            A seekable file over an :class:`S3RangeReader`; the caller closes it.

        Raises
        ------
        KeyNotFoundError
            The object does not exist.

        Examples
        --------
        Needs a reachable bucket, so it is not run here (the tests under ``tests/io/`` run every
        store method against moto's S3 server)::

            import pyarrow.parquet as pq
            store = S3Store("my-bucket", "datasets")
            with store.open("ds/table/part-0.parquet") as fh:
                pq.ParquetFile(fh).metadata      # reads the footer only: a few Range GETs
        """
        from botocore.exceptions import BotoCoreError, ClientError

        full_key = self._full_key(key)
        try:
            head = self.client.head_object(Bucket=self.bucket, Key=full_key)
        except ClientError as exc:
            if _is_not_found(exc):
                raise self._not_found(full_key) from exc
            raise self._store_error("head", full_key, exc) from exc
        except BotoCoreError as exc:
            raise self._store_error("head", full_key, exc) from exc
        raw = S3RangeReader(self, full_key, int(head["ContentLength"]), head.get("ETag"))
        return io.BufferedReader(raw, buffer_size=buffer_size)


class S3RangeReader(io.RawIOBase):
    """Unbuffered, seekable, read-only view of one S3 object; each read is one Range GET.

    Use it through :meth:`S3Store.open`, which adds a buffer.
    """

    def __init__(self, store: S3Store, full_key: str, size: int, etag: str | None = None) -> None:
        super().__init__()
        self._store = store
        self._key = full_key
        self._etag = etag
        self._pos = 0
        #: The object's size in bytes (from ``HeadObject`` at open time).
        self.size = size

    def __repr__(self) -> str:
        return f"S3RangeReader(s3://{self._store.bucket}/{self._key}, size={self.size})"

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
        from botocore.exceptions import BotoCoreError, ClientError

        end = min(start + length, self.size) - 1
        kwargs: dict[str, Any] = {
            "Bucket": self._store.bucket,
            "Key": self._key,
            "Range": f"bytes={start}-{end}",
        }
        if self._etag:
            kwargs["IfMatch"] = self._etag
        try:
            chunk: bytes = self._store.client.get_object(**kwargs)["Body"].read()
            return chunk
        except ClientError as exc:
            code, status = _error_code(exc)
            where = self._store._where(self._key)
            if code in _PRECONDITION_CODES or status == 412:
                raise StoreError(f"{where} changed while it was being read; open it again") from exc
            if _is_not_found(exc):
                raise StoreError(f"{where} was deleted while it was being read") from exc
            raise StoreError(
                f"S3 range read (bytes {start}-{end}) of {where} failed: {self._store._scrub(exc)}"
            ) from exc
        except BotoCoreError as exc:
            raise self._store._store_error(
                f"range read (bytes {start}-{end})", self._key, exc
            ) from exc


def _rebuild(url: str, kwargs: dict[str, Any]) -> S3Store:
    """Unpickle helper: :meth:`S3Store.from_url` with the explicit credentials."""
    return S3Store.from_url(url, **kwargs)
