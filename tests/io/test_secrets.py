"""No credential ever shows (issue #29 item 7): one known secret in every place a secret can go
(storage options, URL user info, an endpoint's password, query tokens), every error kstore can
be made to raise with it (bad URLs and options, a missing bucket, an unreachable endpoint, bad
keys, the whole hostile-input suite), and every text a user sees: ``str`` and ``repr`` of the
error, its traceback (the library errors it chains), the store's ``repr`` and ``url``, a
worker factory's ``repr``, and the records of kstore's loggers at DEBUG.
"""

from __future__ import annotations

import logging
import socket
import traceback
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pandas as pd
import pytest

import kstore
from kstore.errors import KstoreError
from kstore.io.memory import MemoryStore
from kstore.io.objstore import ObjectStore
from kstore.io.s3 import S3Store
from kstore.io.store import open_store, store_factory
from tests.drivers import test_hostile_input as hostile

MARK = "S3CR3T-xyz"
KEY_ID = f"AKIA{MARK}ID"
SECRET_KEY = f"{MARK}/secret+key="
TOKEN = f"{MARK}-session-token"
PASSWORD = f"{MARK}-pw"
#: Every form a secret may take in a text: raw and percent-encoded (all contain MARK).
FORMS = (MARK, urllib.parse.quote_plus(SECRET_KEY), urllib.parse.quote(SECRET_KEY, safe=""))


def assert_clean(text: str, where: str) -> None:
    for form in FORMS:
        assert form not in text, f"secret {form!r} shows in {where}: {text!r}"


def assert_error_clean(exc: BaseException, where: str) -> None:
    assert isinstance(exc, KstoreError), f"{where}: {type(exc).__name__} is no KstoreError: {exc}"
    assert_clean(str(exc), f"str of {where}")
    assert_clean(repr(exc), f"repr of {where}")
    assert_clean("".join(traceback.format_exception(exc)), f"the traceback of {where}")


def assert_store_clean(store: Any, where: str) -> None:
    assert_clean(repr(store), f"repr of {where}")
    if not isinstance(store, MemoryStore):  # its url is its in-process name: how the same store is found again
        assert_clean(str(getattr(store, "url", "")), f"url of {where}")
    assert_clean(repr(store_factory(store)), f"the worker factory of {where}")


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """kstore's loggers at DEBUG; after the test, no record shows a secret."""
    caplog.set_level(logging.DEBUG, logger="kstore")
    yield caplog
    for record in caplog.records:
        if record.name.startswith("kstore"):
            assert_clean(record.getMessage(), f"log record {record.name}")
            if record.exc_info and record.exc_info[1] is not None:
                assert_clean("".join(traceback.format_exception(record.exc_info[1])), f"log record {record.name}")


@pytest.fixture(scope="module")
def dead() -> str:
    """``127.0.0.1:<port>`` where nothing listens (connections are refused at once)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"127.0.0.1:{port}"


def provoke(call: Callable[[], Any], where: str, *, must_fail: bool = True) -> BaseException | None:
    """Run ``call``, which must fail with a kstore error (``must_fail``), and check the error."""
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - every error is checked, kstore's or not
        assert_error_clean(exc, where)
        return exc
    if must_fail:
        pytest.fail(f"{where}: no error")
    return None


#: Store calls that may succeed where others fail (``exists`` of a missing bucket is False on S3;
#: deleting from a missing bucket deletes nothing that is there, on obstore).
MAY_SUCCEED = frozenset({"exists", "delete_many"})


def store_calls(store: Any) -> dict[str, Callable[[], Any]]:
    """Every store method, and the public functions on top, in ways that fail on a store that
    does not work (missing bucket, no server) or with a bad key."""
    return {
        "get": lambda: store.get("ds/k"),
        "put": lambda: store.put("ds/k", b"1"),
        "exists": lambda: store.exists("ds/k"),
        "iter_prefix": lambda: list(store.iter_prefix("ds/")),
        "delete_many": lambda: store.delete_many(["ds/a", "ds/b"]),
        "open": lambda: store.open("ds/k").read(),
        "bad key": lambda: store.get("../escape"),
        "read_table": lambda: kstore.read_table(store, "ds"),
        "store_dataset": lambda: kstore.store_dataset(store, "ds", pd.DataFrame({"x": [1]})),
    }


# -- URLs and options: bad in themselves ----------------------------------------------------------


def bad_urls(dead: str) -> dict[str, tuple[str, dict[str, Any] | None]]:
    q = urllib.parse.quote_plus
    return {
        "file user info": (f"file://user:{PASSWORD}@localhost/tmp/x", None),
        "file user info, no host": (f"file://user:{PASSWORD}@/tmp/x", None),
        "hfs user info": (f"hfs://user:{PASSWORD}@/tmp/x", None),
        "gs user info": (f"gs://user:{PASSWORD}@bkt/p", None),
        "gs token as user": (f"gs://{TOKEN}@bkt/p", None),
        "abfs user info": (f"abfs://acct:{PASSWORD}@container/p", None),
        "azure (minimalkv form)": (f"azure://acct:{PASSWORD}@container", None),
        "s3 secret with '/'": (f"s3://{KEY_ID}:{SECRET_KEY}@{dead}/bkt", None),
        "s3 secret with '?'": (f"s3://{KEY_ID}:{MARK}?x@{dead}/bkt", None),
        "s3 no bucket": (f"s3://{KEY_ID}:{q(SECRET_KEY)}@{dead}/", None),
        "s3 bad port": (f"s3://{KEY_ID}:{q(SECRET_KEY)}@host:port/bkt", None),
        "s3 unknown query": (f"s3://{KEY_ID}:{q(SECRET_KEY)}@{dead}/bkt?unknown=1&session_token={TOKEN}", None),
        "s3 bad flag": (f"s3://{KEY_ID}:{q(SECRET_KEY)}@{dead}/bkt?is_secure=maybe&session_token={TOKEN}", None),
        "s3 no secret": (f"s3://{KEY_ID}@{dead}/bkt", None),
        "s3 '#' in the secret": (f"s3://{KEY_ID}:{MARK}#x@{dead}/bkt", None),
        "s3 dot-dot": (f"s3://{KEY_ID}:{q(SECRET_KEY)}@{dead}/bkt/a/../b?session_token={TOKEN}", None),
        "s3 NUL": (f"s3://{KEY_ID}:{q(SECRET_KEY)}@{dead}/bkt\x00", None),
        "redis (minimalkv)": (f"redis://:{PASSWORD}@{dead}/notadb", None),
        "minimalkv unknown": (f"nosuchkv://user:{PASSWORD}@{dead}/x", None),
        "memory with options": (f"memory://user:{PASSWORD}@x", {"secret": SECRET_KEY}),
        "s3 unknown option": ("s3://bkt", {"key": KEY_ID, "pasword": SECRET_KEY}),
        "s3 conflicting options": ("s3://bkt", {"secret": SECRET_KEY, "AWS_SECRET_ACCESS_KEY": TOKEN, "key": KEY_ID}),
        "s3 secret without key": ("s3://bkt", {"secret": SECRET_KEY, "token": TOKEN}),
        "s3 key without secret": ("s3://bkt", {"key": KEY_ID}),
        "s3 endpoint no scheme": ("s3://bkt", {"key": KEY_ID, "secret": SECRET_KEY,
                                               "endpoint_url": f"user:{PASSWORD}@{dead}"}),
        "s3 endpoint bad port": ("s3://bkt", {"key": KEY_ID, "secret": SECRET_KEY,
                                              "endpoint_url": f"http://user:{PASSWORD}@127.0.0.1:99999"}),
        "s3 URL and option disagree": (f"s3://bkt?endpoint_url=http://user:{PASSWORD}@{dead}",
                                       {"endpoint_url": f"http://user:{MARK}-other@{dead}"}),
        "s3 surrogate secret": ("s3://bkt", {"key": KEY_ID, "secret": SECRET_KEY + "\ud800"}),
        "obstore s3 secret without key": ("s3://bkt", None),  # see below: made directly
        "gs bad service account key": ("gs://bkt/p", {"service_account_key": f'{{"private_key": "{MARK}"}}'}),
        "abfs bad account key": ("abfs://container/p", {"account_name": "acct", "account_key": MARK}),
        "abfs unknown option": ("abfs://container/p", {"account_name": "acct", "no_such_key": PASSWORD}),
        "gs surrogate token": ("gs://bkt/p", {"bearer_token": TOKEN + "\udc80"}),
    }


@pytest.mark.parametrize("case", list(bad_urls("127.0.0.1:1")))
def test_bad_urls_and_options_never_show_a_secret(case: str, dead: str, logs: Any,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    url, options = bad_urls(dead)[case]
    if case == "obstore s3 secret without key":
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
            monkeypatch.delenv(name, raising=False)
        provoke(lambda: ObjectStore(url, {"aws_secret_access_key": SECRET_KEY, "aws_session_token": TOKEN,
                                          "endpoint": f"http://user:{PASSWORD}@{dead}", "allow_http": True}), case)
        return
    provoke(lambda: open_store(url, storage_options=options), case)
    if options is None:
        provoke(lambda: kstore.read_table(url, "ds"), f"read_table of {case}")


# -- stores that open, then fail ------------------------------------------------------------------


def s3_stores(dead: str, live: str, bucket: str) -> dict[str, Callable[[], Any]]:
    q = urllib.parse.quote_plus
    live_host = urllib.parse.urlsplit(live).netloc
    options = {"key": KEY_ID, "secret": SECRET_KEY, "token": TOKEN}
    return {
        "s3 options, endpoint password, nothing listening": lambda: open_store(
            "s3://bkt/p", storage_options={**options, "endpoint_url": f"http://user:{PASSWORD}@{dead}"}),
        "s3 minimalkv URL, nothing listening": lambda: open_store(
            f"s3://{KEY_ID}:{q(SECRET_KEY)}@{dead}/bkt/p?is_secure=false&force_bucket_suffix=false"
            f"&session_token={TOKEN}"),
        "s3 endpoint password, missing bucket": lambda: open_store(
            f"s3://kstore-missing-{uuid.uuid4().hex[:8]}/p",
            storage_options={**options, "endpoint_url": f"http://user:{PASSWORD}@{live_host}"}),
        "s3 endpoint password in the URL, missing bucket": lambda: open_store(
            f"s3://kstore-missing-{uuid.uuid4().hex[:8]}/p?endpoint_url="
            + q(f"http://user:{PASSWORD}@{live_host}"), storage_options=options),
        "s3 minimalkv URL, missing bucket": lambda: open_store(
            f"s3://{KEY_ID}:{q(SECRET_KEY)}@{live_host}/kstore-missing-{uuid.uuid4().hex[:8]}"
            "?is_secure=false&force_bucket_suffix=false"),
        "s3 constructor": lambda: S3Store(f"kstore-missing-{uuid.uuid4().hex[:8]}", "p",
                                          endpoint_url=f"http://user:{PASSWORD}@{live_host}",
                                          aws_access_key_id=KEY_ID, aws_secret_access_key=SECRET_KEY,
                                          aws_session_token=TOKEN),
        "obstore s3, endpoint password, missing bucket": lambda: ObjectStore(
            f"s3://kstore-missing-{uuid.uuid4().hex[:8]}/p",
            {"aws_access_key_id": KEY_ID, "aws_secret_access_key": SECRET_KEY, "aws_session_token": TOKEN,
             "endpoint": f"http://user:{PASSWORD}@{live_host}", "allow_http": True, "region": "us-east-1"}),
    }


#: obstore retries a refused connection for long (its retries are off only for put_if_absent).
OBSTORE_DEAD_STORES = {
    "obstore s3, nothing listening": lambda dead: ObjectStore(
        "s3://bkt/p", {"aws_access_key_id": KEY_ID, "aws_secret_access_key": SECRET_KEY,
                       "endpoint": f"http://user:{PASSWORD}@{dead}", "allow_http": True, "region": "us-east-1"}),
    "obstore gs, nothing listening": lambda dead: ObjectStore(
        "gs://bkt/p", {"bearer_token": TOKEN, "base_url": f"http://user:{PASSWORD}@{dead}"}),
    "obstore abfs sas, nothing listening": lambda dead: ObjectStore(
        "abfs://container/p", {"account_name": "acct", "sas_key": f"sv=2024-01-01&sig={MARK}",
                               "endpoint": f"http://user:{PASSWORD}@{dead}/acct", "allow_http": True}),
}


@pytest.mark.parametrize("case", list(s3_stores("", "http://h", "")))
def test_failing_s3_stores_never_show_a_secret(case: str, dead: str, s3_endpoint: str, s3_bucket: str,
                                                logs: Any) -> None:
    store = s3_stores(dead, s3_endpoint, s3_bucket)[case]()
    assert_store_clean(store, case)
    for name, call in store_calls(store).items():
        provoke(call, f"{name} on {case}", must_fail=name not in MAY_SUCCEED)


@pytest.mark.parametrize("case", list(OBSTORE_DEAD_STORES))
def test_unreachable_obstore_stores_never_show_a_secret(case: str, dead: str, logs: Any) -> None:
    store = OBSTORE_DEAD_STORES[case](dead)
    assert_store_clean(store, case)
    provoke(lambda: store.put_if_absent("ds/k", b"1"), f"put_if_absent on {case}")
    provoke(lambda: store.get("../escape"), f"bad key on {case}")


def test_memory_store_names_with_user_info_never_show(logs: Any) -> None:
    url = f"memory://user:{PASSWORD}@secrets-{uuid.uuid4().hex[:8]}"
    store = open_store(url)
    assert_clean(repr(store), "repr of the memory store")
    for name, call in store_calls(store).items():
        if name not in ("put", "delete_many", "store_dataset", "exists", "iter_prefix"):  # these work here
            provoke(call, f"{name} on {url}")


# -- the hostile-input suite, run against stores with credentials ---------------------------------


@pytest.fixture(params=["memory", "s3"])
def secret_store(request: pytest.FixtureRequest, s3_endpoint: str, s3_client: Any) -> Any:
    """A store whose URL or options hold the secret: a memory store named ``user:<secret>@...``,
    or an S3 store on the moto server with credentials and a password in the endpoint."""
    if request.param == "memory":
        return f"memory://user:{PASSWORD}@hostile-{uuid.uuid4().hex[:8]}"
    bucket = f"kstore-secrets-{uuid.uuid4().hex[:12]}"
    s3_client.create_bucket(Bucket=bucket)
    host = urllib.parse.urlsplit(s3_endpoint).netloc
    return open_store(f"s3://{bucket}/p", storage_options={"key": KEY_ID, "secret": SECRET_KEY, "token": TOKEN,
                                                           "endpoint_url": f"http://user:{PASSWORD}@{host}"})


def test_the_hostile_input_suite_never_shows_a_secret(secret_store: Any, logs: Any) -> None:
    hostile.new_dataset(secret_store)
    calls: dict[str, Callable[[Any], Any]] = {case: call for case, (_, _, call) in hostile.BAD_CALLS.items()}
    calls.update({f"txn {case}": call for case, call in hostile.SURROGATE_TXN_CALLS.items()})
    calls.update({f"max_workers={w!r}": (lambda u, w=w: kstore.compact(u, hostile.UUID, max_workers=w))
                  for w in hostile.BAD_WORKERS})
    calls.update({
        "missing dataset": lambda u: kstore.read_table(u, "missing"),
        "missing version": lambda u: kstore.read_table(u, hostile.UUID, version=99),
        "exists": lambda u: kstore.store_dataset(u, hostile.UUID, hostile.frame()),
        "bad predicate": lambda u: kstore.read_dataset(u, hostile.UUID, predicates=[[("nope", "==", 1)]]),
        "diff": lambda u: kstore.diff(u, hostile.UUID, "0", 1),
    })
    for case, call in calls.items():
        provoke(lambda call=call: call(secret_store), f"{case!r} on a store with a secret")
    assert_store_clean(open_store(secret_store), "the store")
