"""An S3 bucket (or a prefix in one) as a store: S3's URL forms, ``storage_options`` keys
and credential lookup over the one object-store client, :class:`~kstore.io.objstore.ObjectStore`
(obstore, Rust's ``object_store``).

Any S3-compatible service works: pass ``endpoint_url`` (MinIO, Ceph, moto, ...).
Credentials are given explicitly, or found as the AWS SDKs find them: obstore's own lookup
reads the environment (``AWS_ACCESS_KEY_ID``, ...), web identity tokens (EKS/IRSA), ECS task
roles and the instance metadata service (IMDSv2); where a profile is named
(``AWS_PROFILE``) or only the shared config files hold credentials (profiles, SSO,
``credential_process``), boto3's chain is asked (``obstore.auth.boto3``; needs boto3).
They never appear in :attr:`S3Store.url`.

- ``put_if_absent`` is a conditional write (``PutObject`` with ``If-None-Match: *``), which
  S3 performs atomically: of several concurrent writers exactly one succeeds, the others
  see False. The service must support conditional writes (AWS S3 does since 2024-08;
  MinIO does). A failure that may have reached the service is retried, and the stored
  bytes tell whether an earlier attempt was this call's.
- ``open`` returns a seekable file that fetches only the byte ranges that are read
  (ranged GETs through a 1 MiB buffer), so pyarrow reads a Parquet footer and the column
  chunks it needs without downloading the whole object.

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

import os
import urllib.parse
import warnings
from collections.abc import Mapping
from typing import Any

from kstore.core.arguments import check_text
from kstore.core.naming import validate_key
from kstore.errors import InvalidArgumentError, InvalidKeyError, StoreError
from kstore.io.objstore import CLIENT_OPTION_KEYS, DEFAULT_BUFFER_SIZE, DELETE_BATCH, ObjectRangeReader, ObjectStore
from kstore.io.redact import has_userinfo, redact_url

__all__ = ["S3Store", "S3RangeReader", "DEFAULT_BUFFER_SIZE", "DELETE_BATCH", "STORAGE_OPTION_KEYS", "redact_url"]

#: The seekable reader :meth:`S3Store.open` returns (the one of every object store).
S3RangeReader = ObjectRangeReader

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
        http = low.removeprefix("aws_")
        if http in CLIENT_OPTION_KEYS:
            if value is not None:
                out.setdefault("client_options", {})[http] = value
            continue
        target = STORAGE_OPTION_KEYS.get(low)
        if target is None:
            raise InvalidArgumentError(
                f"unknown S3 storage_options key {name!r}; known keys: "
                f"{sorted(set(STORAGE_OPTION_KEYS) | _IGNORED_OPTION_KEYS)} and the HTTP client's "
                f"{sorted(CLIENT_OPTION_KEYS)} (any case)"
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


def _is_aws_endpoint(endpoint_url: str | None) -> bool:
    host = urllib.parse.urlsplit(endpoint_url or "").hostname or ""
    return host.endswith((".amazonaws.com", ".amazonaws.com.cn"))


def _shared_config_names_credentials() -> bool:
    """Whether credentials are to come from boto3's chain rather than obstore's lookup: a
    profile is named, or the shared config/credentials files exist and the environment has
    no key (profiles, SSO and ``credential_process`` live there)."""
    if os.environ.get("AWS_PROFILE") or os.environ.get("AWS_DEFAULT_PROFILE"):
        return True
    if os.environ.get("AWS_ACCESS_KEY_ID") or os.environ.get("AWS_WEB_IDENTITY_TOKEN_FILE"):
        return False
    files = (os.environ.get("AWS_SHARED_CREDENTIALS_FILE") or os.path.expanduser("~/.aws/credentials"),
             os.environ.get("AWS_CONFIG_FILE") or os.path.expanduser("~/.aws/config"))
    return any(os.path.isfile(f) for f in files)


class S3Store(ObjectStore):
    """Keys are objects ``<prefix>/<key>`` in ``bucket`` (an :class:`~kstore.io.objstore.ObjectStore`
    with S3's URL forms and options).

    Parameters
    ----------
    bucket
        The bucket name (it must exist; kstore never creates buckets).
    prefix
        Optional key prefix all keys live under (``"a/b"`` and ``"a/b/"`` are the same).
    client
        Deprecated (a boto3 client; kstore's requests go through obstore now): its endpoint,
        region and credentials are used, with a ``FutureWarning``. Pass them instead.
    endpoint_url, region_name
        For S3-compatible services and non-default regions; both are part of :attr:`url`
        (a password in the endpoint, ``http://user:password@host``, shows as ``***`` there
        and in every message; a pickled store keeps it).
    aws_access_key_id, aws_secret_access_key, aws_session_token
        Explicit credentials (without them, they are looked up as the module docstring
        says: environment, web identity, ECS, instance metadata; profiles and SSO through
        boto3). They are never part of :attr:`url` or ``repr``, but do travel with a
        pickled store.
    client_options
        Options of the HTTP client (:data:`~kstore.io.objstore.CLIENT_OPTION_KEYS`:
        ``timeout``, ``connect_timeout``, ``proxy_url``, ``user_agent``, ...); in
        ``storage_options`` they are given by name (``AWS_`` prefix optional).

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
        client_options: Mapping[str, Any] | None = None,
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
            endpoint_url, region_name, credentials = _from_boto3_client(client, endpoint_url, region_name,
                                                                        credentials)
        self.endpoint_url = endpoint_url
        self.region_name = region_name
        self._credentials = credentials
        self._client_options = dict(client_options or {})
        unknown = sorted(set(self._client_options) - CLIENT_OPTION_KEYS)
        if unknown:
            raise InvalidArgumentError(f"unknown S3 client option(s) {unknown}; known: {sorted(CLIENT_OPTION_KEYS)}")
        options: dict[str, Any] = {**self._client_options, **credentials}
        if endpoint_url:
            options["aws_endpoint"] = endpoint_url
            if endpoint_url.lower().startswith("http://"):
                options["allow_http"] = True
        if region_name:
            options["aws_region"] = region_name
        self._boto3_chain = not credentials and _shared_config_names_credentials()
        super().__init__(f"s3://{bucket}" + (f"/{prefix}" if prefix else ""), options)
        self.url: str = self._build_url()

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
    def from_url(cls, url: str, storage_options: Mapping[str, Any] | None = None, **kwargs: Any) -> S3Store:
        """Open ``s3://bucket[/prefix][?endpoint_url=...&region=...]`` or minimalkv's
        ``s3://key:secret@host[:port]/bucket[/prefix][?is_secure=false...]``.

        Parameters
        ----------
        url
            The S3 URL.
        storage_options
            As for :meth:`from_options`.
        **kwargs
            Passed on to the constructor (``client``, credentials, ...); the same setting in
            the URL and in ``kwargs`` with different values is an error.

        Returns
        -------
        S3Store
            The store, made without a request (its first method call sends one).

        Examples
        --------
        >>> S3Store.from_url("s3://bkt/a/b?region=eu-west-1").region_name
        'eu-west-1'
        >>> store = S3Store.from_url("s3://AKID:s3cr3t@127.0.0.1:9000/bkt-akid/p?is_secure=false")
        >>> store.url, repr(store)
        ('s3://bkt-akid/p?endpoint_url=http://127.0.0.1:9000', "S3Store('s3://bkt-akid/p?endpoint_url=http://127.0.0.1:9000')")
        """
        if storage_options is not None:
            return cls.from_options(url, storage_options, **kwargs)
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
            return (_rebuild, (url, {**self._credentials, "endpoint_url": self.endpoint_url,
                                     **self._pickled_client_options()}))
        return (_rebuild, (self.url, {**self._credentials, **self._pickled_client_options()}))

    def _pickled_client_options(self) -> dict[str, Any]:
        return {"client_options": dict(self._client_options)} if self._client_options else {}

    def __repr__(self) -> str:
        return f"S3Store({self.url!r})"

    # -- what differs from ObjectStore ---------------------------------------------------------

    def _credential_provider(self) -> Any:
        """boto3's chain where the shared config files hold the credentials (see the module
        docstring); else None: obstore's own lookup."""
        if not self._boto3_chain:
            return None
        try:
            import boto3
            from obstore.auth.boto3 import Boto3CredentialProvider
        except ImportError as exc:
            raise StoreError(
                "S3 credentials from a named profile or the shared config files need boto3: "
                "pip install boto3 (or give the credentials in storage_options or the environment)"
            ) from exc
        return Boto3CredentialProvider(boto3.session.Session(region_name=self.region_name))

    def _at(self) -> str:
        """`` at <endpoint>`` (redacted) for messages, or nothing for AWS's default endpoint."""
        return f" at {redact_url(self.endpoint_url)}" if self.endpoint_url else ""

    def _container(self) -> str:
        return f"bucket {self.bucket!r}{self._at()}"


def _from_boto3_client(client: Any, endpoint_url: str | None, region_name: str | None,
                       credentials: dict[str, str]) -> tuple[str | None, str | None, dict[str, str]]:
    """Endpoint, region and credentials of a boto3 client given as ``S3Store(client=...)``
    (deprecated), where the arguments do not give them."""
    warnings.warn(FutureWarning(
        "S3Store(client=...) is deprecated: kstore's S3 requests go through obstore; its endpoint, region "
        "and credentials are used. Pass endpoint_url, region_name and the credentials instead"), stacklevel=3)
    meta = getattr(client, "meta", None)
    client_endpoint = getattr(meta, "endpoint_url", None)
    if endpoint_url is None and client_endpoint and not _is_aws_endpoint(client_endpoint):
        endpoint_url = client_endpoint
    if region_name is None:
        region_name = getattr(meta, "region_name", None)
    if not credentials:
        signer = getattr(client, "_request_signer", None)
        found = getattr(signer, "_credentials", None)
        frozen = found.get_frozen_credentials() if found is not None else None
        if frozen is not None and frozen.access_key and frozen.secret_key:
            credentials = {"aws_access_key_id": frozen.access_key, "aws_secret_access_key": frozen.secret_key}
            if frozen.token:
                credentials["aws_session_token"] = frozen.token
    return endpoint_url, region_name, credentials


def _rebuild(url: str, kwargs: dict[str, Any]) -> S3Store:
    """Unpickle helper: :meth:`S3Store.from_url` with the explicit credentials."""
    return S3Store.from_url(url, **kwargs)

