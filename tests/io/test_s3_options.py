"""S3 ``storage_options`` (pandas/deltalake keys), minimalkv's ``s3://key:secret@host/bucket``
URLs, and that credentials never show in URLs, reprs, error messages or logs."""

from __future__ import annotations

import logging
import pickle
import urllib.parse
import uuid
from typing import Any

import pandas as pd
import pytest

import kstore
from kstore.errors import InvalidArgumentError, KstoreError, StoreError
from kstore.io.s3 import S3Store, redact_url
from kstore.io.store import open_store, store_factory

KEY = "AKIDOPTIONS4242"
SECRET = "sekrit/with+odd=chars"
TOKEN = "tok3n-0f-the-session"
QSECRET = urllib.parse.quote_plus(SECRET)
SECRETS = (KEY, SECRET, TOKEN, QSECRET)


def _credentials(store: S3Store) -> tuple[str | None, str | None, str | None]:
    """The explicit credentials the store signs with (and pickles)."""
    creds = store._credentials
    return creds.get("aws_access_key_id"), creds.get("aws_secret_access_key"), creds.get("aws_session_token")


def _assert_no_secret(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"{secret!r} leaked into {text!r}"


def _host(endpoint: str) -> str:
    return urllib.parse.urlsplit(endpoint).netloc


@pytest.mark.parametrize(
    "style",
    [
        {"key": KEY, "secret": SECRET, "token": TOKEN, "endpoint_url": "{e}", "region": "eu-west-1"},
        {
            "AWS_ACCESS_KEY_ID": KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET,
            "AWS_SESSION_TOKEN": TOKEN,
            "AWS_ENDPOINT_URL": "{e}",
            "AWS_REGION": "eu-west-1",
            "AWS_ALLOW_HTTP": "true",
        },
        {"aws_access_key_id": KEY, "Aws_Secret_Access_Key": SECRET, "session_token": TOKEN,
         "endpoint": "{e}", "region_name": "eu-west-1"},
    ],
    ids=["fsspec", "deltalake", "mixed-case"],
)
def test_storage_options_open_the_bucket(
    style: dict[str, str], s3_endpoint: str, s3_bucket: str, s3_client: Any
) -> None:
    options = {k: v.format(e=s3_endpoint) for k, v in style.items()}
    store = open_store(f"s3://{s3_bucket}/pre", storage_options=options)
    assert isinstance(store, S3Store)
    assert (store.bucket, store.prefix, store.endpoint_url, store.region_name) == (
        s3_bucket, "pre", s3_endpoint, "eu-west-1"
    )
    assert _credentials(store) == (KEY, SECRET, TOKEN)
    store.put("k", b"v")  # the endpoint came from the options alone
    assert s3_client.get_object(Bucket=s3_bucket, Key="pre/k")["Body"].read() == b"v"
    _assert_no_secret(store.url + repr(store))
    # the same through the small public constructor
    again = kstore.S3Store.from_options(f"s3://{s3_bucket}/pre", options)
    assert again.url == store.url and _credentials(again) == (KEY, SECRET, TOKEN)


def test_storage_options_travel_to_workers_without_showing(s3_endpoint: str, s3_bucket: str) -> None:
    options = {"key": KEY, "secret": SECRET, "endpoint_url": s3_endpoint}
    store = open_store(f"s3://{s3_bucket}", storage_options=options)
    factory = store_factory(store)
    _assert_no_secret(repr(factory))
    rebuilt = pickle.loads(pickle.dumps(factory))()
    assert isinstance(rebuilt, S3Store) and rebuilt is not store
    assert _credentials(rebuilt)[:2] == (KEY, SECRET)
    store.put("k", b"1")
    assert rebuilt.get("k") == b"1"


def test_public_functions_take_a_store_opened_with_options(s3_endpoint: str, s3_bucket: str) -> None:
    import dask
    import dask.dataframe as dd

    import kstore.dask

    store = open_store(
        f"s3://{s3_bucket}/data",
        storage_options={"AWS_ACCESS_KEY_ID": KEY, "AWS_SECRET_ACCESS_KEY": SECRET,
                         "AWS_ENDPOINT_URL": s3_endpoint, "AWS_REGION": "us-east-1"},
    )
    df = pd.DataFrame({"p": ["a", "b"], "x": [1, 2]})
    kstore.store_dataset(store, "eager", df, partition_on=["p"])
    got = kstore.read_table(store, "eager").to_pandas().sort_values("x").reset_index(drop=True)
    assert got["x"].tolist() == [1, 2]
    with dask.config.set(scheduler="sync"):
        kstore.dask.store_dataset(store, "lazy", dd.from_pandas(df, npartitions=2))
        out = kstore.dask.read_dataset(store, "lazy").compute()
    assert sorted(out["x"].tolist()) == [1, 2]


def test_minimalkv_url(s3_endpoint: str, s3_client: Any) -> None:
    base = f"kstore-mkv-{uuid.uuid4().hex[:8]}"
    key = "testing"
    s3_client.create_bucket(Bucket=f"{base}-{key}")  # minimalkv appends "-<key>" by default
    url = f"s3://{key}:{urllib.parse.quote_plus(SECRET)}@{_host(s3_endpoint)}/{base}/pre/fix?is_secure=false"
    store = open_store(url)
    assert isinstance(store, S3Store)
    assert (store.bucket, store.prefix, store.endpoint_url) == (f"{base}-{key}", "pre/fix", s3_endpoint)
    assert _credentials(store)[:2] == (key, SECRET)
    store.put("k", b"mkv")
    assert s3_client.get_object(Bucket=f"{base}-{key}", Key="pre/fix/k")["Body"].read() == b"mkv"
    _assert_no_secret(store.url + repr(store) + repr(store_factory(url)))
    # the factory of the URL rebuilds the store, credentials included
    rebuilt = pickle.loads(pickle.dumps(store_factory(url)))()
    assert rebuilt.get("k") == b"mkv" and _credentials(rebuilt)[:2] == (key, SECRET)

    plain = f"kstore-mkv-{uuid.uuid4().hex[:8]}"
    s3_client.create_bucket(Bucket=plain)
    store = open_store(
        f"s3://{key}:{SECRET.replace('/', '%2F')}@{_host(s3_endpoint)}/{plain}"
        "?is_secure=False&force_bucket_suffix=false&region_name=eu-west-1&create_if_missing=false"
    )
    assert (store.bucket, store.prefix, store.region_name) == (plain, "", "eu-west-1")
    store.put("k", b"1")
    assert store.get("k") == b"1"
    # https unless is_secure=false; no port is fine; an existing suffix is kept
    secure = S3Store.from_url(f"s3://{KEY}:{urllib.parse.quote_plus(SECRET)}@s3.example.com/bkt-{KEY.lower()}")
    assert secure.endpoint_url == "https://s3.example.com"
    assert secure.bucket == f"bkt-{KEY.lower()}"


@pytest.mark.parametrize(
    "url, options, match",
    [
        ("s3://bkt", {"key": KEY, "pasword": SECRET}, "'pasword'"),
        ("s3://bkt", {"key": KEY, "AWS_ACCESS_KEY_ID": "other"}, "'key' and 'AWS_ACCESS_KEY_ID'"),
        ("s3://bkt", {"secret": 42}, "'secret' must be a non-empty string"),
        ("s3://bkt", {"secret": ""}, "'secret' must be a non-empty string"),
        ("s3://bkt", [("key", KEY)], "must be a dict"),
        ("s3://bkt?endpoint_url=http://a:1", {"endpoint_url": "http://b:2"}, "endpoint_url"),
        ("memory://x", {"key": KEY}, "s3:// URLs only"),
        (f"s3://{KEY}:{QSECRET}@h/b", {"key": "other"}, "aws_access_key_id"),
    ],
    ids=["unknown", "conflict", "not-str", "empty", "not-a-dict", "url-conflict", "not-s3", "url-creds"],
)
def test_bad_storage_options_name_the_key_not_the_value(url: str, options: Any, match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match) as info:
        open_store(url, storage_options=options)
    _assert_no_secret(str(info.value))


def test_storage_options_only_for_urls() -> None:
    from kstore.io.memory import MemoryStore

    with pytest.raises(InvalidArgumentError, match="MemoryStore"):
        open_store(MemoryStore(), storage_options={"key": KEY})
    assert isinstance(open_store(MemoryStore(), storage_options={}), MemoryStore)


@pytest.mark.parametrize(
    "url",
    [
        f"s3://{KEY}:{SECRET}@host/bkt",  # an unencoded "/" in the secret
        f"s3://{KEY}:{QSECRET}@host/",
        f"s3://{KEY}:{QSECRET}@host:notaport/bkt",
        f"s3://{KEY}:{QSECRET}@host/bkt?unknown=1",
        f"s3://{KEY}:{QSECRET}@host/bkt?is_secure=maybe",
        f"s3://{KEY}:{QSECRET}@host/",
        f"s3://{KEY}@host/bkt",
        f"s3://{KEY}:{QSECRET}@host/bkt#frag",
        f"s3://{KEY}:{QSECRET}@host/bkt/a/../b",
        f"s3://{KEY}:{QSECRET}@host/bkt?session_token={TOKEN}&x=1",
        f"s3://{KEY}:{QSECRET}@host/bkt\x00",
        f"redis://{SECRET}@127.0.0.1:1/notadb",
    ],
)
def test_bad_urls_with_credentials_do_not_show_them(url: str) -> None:
    with pytest.raises(KstoreError) as info:
        open_store(url)
    _assert_no_secret(str(info.value))
    _assert_no_secret(repr(info.value))


def test_errors_and_logs_never_show_credentials(
    s3_endpoint: str, s3_bucket: str, caplog: pytest.LogCaptureFixture
) -> None:
    missing = f"kstore-missing-{uuid.uuid4().hex[:8]}"
    caplog.set_level(logging.DEBUG)
    store = open_store(
        f"s3://{missing}/p",
        storage_options={"key": KEY, "secret": SECRET, "token": TOKEN, "endpoint_url": s3_endpoint},
    )
    for call in (lambda: store.get("k"), lambda: store.put("k", b"1"), lambda: list(store.iter_prefix(""))):
        with pytest.raises(StoreError, match=missing) as info:
            call()
        _assert_no_secret(str(info.value))
    mkv = open_store(f"s3://{KEY}:{urllib.parse.quote_plus(SECRET)}@{_host(s3_endpoint)}/{missing}?is_secure=false")
    with pytest.raises(StoreError) as info:
        mkv.get("k")
    _assert_no_secret(str(info.value))
    # a write and a read with every logger at DEBUG: kstore logs its commit
    ok = open_store(f"s3://{s3_bucket}/p", storage_options={"key": KEY, "secret": SECRET, "token": TOKEN,
                                                            "endpoint_url": s3_endpoint})
    kstore.store_dataset(ok, "d", pd.DataFrame({"x": [1]}))
    assert kstore.read_table(ok, "d").num_rows == 1
    assert any(r.name.startswith("kstore") for r in caplog.records), "DEBUG logging was captured"
    # no log shows the secret, and kstore's own loggers show none of the credentials
    for record in caplog.records:
        message = record.getMessage()
        assert SECRET not in message and urllib.parse.quote_plus(SECRET) not in message
        if record.name.startswith("kstore"):
            _assert_no_secret(message)


def test_redact_url() -> None:
    assert redact_url("s3://bkt/p?endpoint_url=http://h:1") == "s3://bkt/p?endpoint_url=http://h:1"
    shown = redact_url(f"s3://{KEY}:{SECRET}@h:9/b?session_token={TOKEN}&is_secure=false")
    assert shown == "s3://***@h:9/b?session_token=***&is_secure=false"


def test_spark_factory_keeps_the_credentials(s3_endpoint: str, s3_bucket: str) -> None:
    pytest.importorskip("pyspark")
    from kstore.spark.writer import spark_store_factory

    store = open_store(f"s3://{s3_bucket}", storage_options={"key": KEY, "secret": SECRET,
                                                            "endpoint_url": s3_endpoint})
    url = f"s3://{KEY}:{QSECRET}@{_host(s3_endpoint)}/{s3_bucket}?is_secure=false&force_bucket_suffix=false"
    for source in (store, url):
        factory = spark_store_factory(source)
        _assert_no_secret(repr(factory))
        rebuilt = pickle.loads(pickle.dumps(factory))()
        assert isinstance(rebuilt, S3Store) and _credentials(rebuilt)[:2] == (KEY, SECRET)
        assert rebuilt.url == store.url


# -- incomplete credentials, bad endpoints and text that is no Unicode (issue #29 item 7) -----------

STORAGE_KEYS = {"key": "aws_access_key_id", "secret": "aws_secret_access_key", "aws_secret_access_key":
                "aws_secret_access_key", "token": "aws_session_token"}



@pytest.mark.parametrize(
    "options, missing",
    [
        ({"secret": SECRET}, "aws_access_key_id (storage_options 'key' or 'AWS_ACCESS_KEY_ID')"),
        ({"AWS_SECRET_ACCESS_KEY": SECRET, "token": TOKEN}, "aws_access_key_id"),
        ({"key": KEY}, "aws_secret_access_key (storage_options 'secret' or 'AWS_SECRET_ACCESS_KEY')"),
        ({"token": TOKEN}, "aws_access_key_id (storage_options 'key' or 'AWS_ACCESS_KEY_ID') and aws_secret_access_key"),
        ({"key": KEY, "token": TOKEN}, "aws_secret_access_key"),
    ],
    ids=["secret only", "secret and token", "key only", "token only", "key and token"],
)
def test_incomplete_credentials_name_the_missing_option(options: dict[str, str], missing: str) -> None:
    url = "s3://bkt/p"
    with pytest.raises(InvalidArgumentError, match=r"S3 credentials are incomplete: .* given without ") as info:
        open_store(url, storage_options={**options, "endpoint_url": "http://127.0.0.1:1"})
    assert missing in str(info.value)
    _assert_no_secret(str(info.value))
    creds = {STORAGE_KEYS[k.lower()]: v for k, v in options.items()}
    with pytest.raises(InvalidArgumentError, match="incomplete"):
        S3Store("bkt", **creds)



def test_incomplete_credentials_of_the_obstore_backend_name_the_missing_option(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kstore.io.objstore import ObjectStore

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    base = {"endpoint": "http://127.0.0.1:1", "allow_http": True, "region": "us-east-1"}
    for options, missing in (({"aws_secret_access_key": SECRET}, "aws_access_key_id"),
                             ({"AWS_ACCESS_KEY_ID": KEY}, "aws_secret_access_key")):
        with pytest.raises(InvalidArgumentError, match=f"incomplete: .* without {missing}") as info:
            ObjectStore("s3://bkt/p", {**options, **base})
        _assert_no_secret(str(info.value))


@pytest.mark.parametrize("endpoint", ["127.0.0.1:9000", "http://", "ftp://host", "http://host:99999", "http://host:x",
                                      f"{KEY}:{SECRET}@127.0.0.1:9000", 9000])
def test_an_endpoint_that_is_no_http_url_is_an_argument_error(endpoint: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="endpoint_url must be an http:// or https:// URL") as info:
        S3Store("bkt", endpoint_url=endpoint)  # botocore: a raw ValueError on first use
    _assert_no_secret(str(info.value))
    if isinstance(endpoint, str):
        with pytest.raises(InvalidArgumentError, match="endpoint_url must be an http:// or https:// URL"):
            open_store("s3://bkt", storage_options={"endpoint_url": endpoint})


@pytest.mark.parametrize("name", ["secret", "key", "token", "endpoint_url", "region"])
def test_option_values_that_are_no_unicode_text_are_argument_errors(name: str) -> None:
    options = {"key": KEY, "secret": SECRET, name: "x\ud800y"}
    with pytest.raises(InvalidArgumentError, match="is not valid Unicode text") as info:
        open_store("s3://bkt", storage_options=options)
    _assert_no_secret(str(info.value))


def test_a_password_in_the_endpoint_never_shows_and_travels_to_workers(
    s3_endpoint: str, s3_bucket: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="kstore")
    endpoint = f"http://user:{urllib.parse.quote_plus(SECRET)}@{_host(s3_endpoint)}"
    store = open_store(f"s3://{s3_bucket}/p", storage_options={"key": KEY, "secret": SECRET, "endpoint_url": endpoint,
                                                                "region": "eu-west-1"})
    assert store.url == f"s3://{s3_bucket}/p?endpoint_url=http://***@{_host(s3_endpoint)}&region=eu-west-1"
    assert repr(store) == f"S3Store({store.url!r})"
    store.put("k", b"1")
    rebuilt = pickle.loads(pickle.dumps(store_factory(store)))()
    assert rebuilt.endpoint_url == endpoint and rebuilt.region_name == "eu-west-1" and rebuilt.get("k") == b"1"
    _assert_no_secret(repr(store_factory(store)) + repr(rebuilt) + rebuilt.url)
    # the same endpoint in the URL's query opens the store too
    again = open_store(f"s3://{s3_bucket}/p?endpoint_url={urllib.parse.quote(endpoint, safe='')}",
                       storage_options={"key": KEY, "secret": SECRET})
    assert again.get("k") == b"1" and again.url == store.url.partition("&")[0]
    missing = S3Store(f"kstore-missing-{uuid.uuid4().hex[:8]}", endpoint_url=endpoint, aws_access_key_id=KEY,
                      aws_secret_access_key=SECRET)
    for call in (lambda: missing.get("k"), lambda: list(missing.iter_prefix("")), lambda: missing.delete_many(["a"]),
                 lambda: kstore.read_table(missing, "d"), lambda: kstore.store_dataset(missing, "d", pd.DataFrame({"x": [1]}))):
        with pytest.raises(KstoreError) as info:
            call()
        assert "http://***@" in str(info.value)
        _assert_no_secret(str(info.value) + repr(info.value))
    for record in caplog.records:
        if record.name.startswith("kstore"):
            _assert_no_secret(record.getMessage())


# -- where credentials come from without explicit ones (issue #30: one client, the SDKs' parity) ----


def _no_aws_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                 "AWS_DEFAULT_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))


def test_a_named_profile_is_read_through_boto3(monkeypatch: pytest.MonkeyPatch, tmp_path: Any,
                                               s3_endpoint: str, s3_bucket: str) -> None:
    """Profiles, SSO and credential_process live in the shared config files, which obstore
    does not read: a named profile (or files holding the only credentials) goes to boto3's
    chain, and the store signs with that profile's key."""
    _no_aws_environment(monkeypatch, tmp_path)
    (tmp_path / "credentials").write_text(f"[team]\naws_access_key_id = {KEY}\naws_secret_access_key = {SECRET}\n")
    monkeypatch.setenv("AWS_PROFILE", "team")
    store = S3Store(s3_bucket, endpoint_url=s3_endpoint)
    provider = store._credential_provider()
    assert provider is not None
    got = provider()
    assert (got["access_key_id"], got["secret_access_key"]) == (KEY, SECRET)
    store.put("k", b"from a profile")  # moto takes any key: the request is signed and sent
    assert store.get("k") == b"from a profile"
    _assert_no_secret(store.url + repr(store))
    # the files alone (no profile named, no key in the environment): boto3's default profile
    monkeypatch.delenv("AWS_PROFILE")
    (tmp_path / "credentials").write_text(f"[default]\naws_access_key_id = {KEY}\naws_secret_access_key = {SECRET}\n")
    assert S3Store(s3_bucket, endpoint_url=s3_endpoint)._credential_provider()()["access_key_id"] == KEY


def test_environment_and_explicit_credentials_stay_with_obstore(monkeypatch: pytest.MonkeyPatch,
                                                                tmp_path: Any) -> None:
    _no_aws_environment(monkeypatch, tmp_path)
    (tmp_path / "credentials").write_text(f"[default]\naws_access_key_id = {KEY}\naws_secret_access_key = {SECRET}\n")
    # explicit credentials: no chain at all
    assert S3Store("bkt", aws_access_key_id="a", aws_secret_access_key="b")._credential_provider() is None
    # a key in the environment (or a web identity token): obstore's own lookup, as the SDKs
    # prefer the environment over the files
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "env-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
    assert S3Store("bkt")._credential_provider() is None
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(tmp_path / "token"))
    assert S3Store("bkt")._credential_provider() is None
    # nothing anywhere: obstore's lookup (ECS, the instance metadata service)
    monkeypatch.delenv("AWS_WEB_IDENTITY_TOKEN_FILE")
    (tmp_path / "credentials").unlink()
    assert S3Store("bkt")._credential_provider() is None
