"""The fault proxy itself (tests/fault_proxy.py): it forwards what it should, and injects
exactly the faults it is told to."""

from __future__ import annotations

import http.client
import threading
import time
import urllib.parse
from typing import Any

import pytest

from kstore.io.objstore import ObjectStore
from tests.fault_proxy import FaultProxy, is_log_entry_path
from tests.io.conftest import moto_obstore_options

pytestmark = pytest.mark.timeout(60)

LOG_ENTRY = "ds/_kstore/log/00000000000000000001.json"


def raw(endpoint: str, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None,
        ) -> tuple[int, bytes]:
    """One unsigned request (moto accepts them) on a new connection: ``(status, body)``."""
    parts = urllib.parse.urlsplit(endpoint)
    assert parts.hostname is not None and parts.port is not None
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def upstream_body(s3_client: Any, bucket: str, key: str) -> bytes | None:
    """The object as the moto server has it (not through the proxy); None if missing."""
    try:
        return bytes(s3_client.get_object(Bucket=bucket, Key=key)["Body"].read())
    except s3_client.exceptions.NoSuchKey:
        return None


def proxy_threads(proxy: FaultProxy) -> list[str]:
    """Names of the threads of ``proxy`` (they carry its port)."""
    assert proxy.endpoint is not None
    port = proxy.endpoint.rsplit(":", 1)[1]
    return [t.name for t in threading.enumerate() if t.name.startswith(f"fault-proxy-{port}")]


def test_forwards_boto3_and_obstore_requests(fault_proxy: FaultProxy, s3_bucket: str, s3_client: Any) -> None:
    import boto3

    client = boto3.client("s3", endpoint_url=fault_proxy.endpoint, region_name="us-east-1")
    client.put_object(Bucket=s3_bucket, Key="a/x", Body=b"hello")
    assert client.get_object(Bucket=s3_bucket, Key="a/x")["Body"].read() == b"hello"
    assert client.head_object(Bucket=s3_bucket, Key="a/x")["ContentLength"] == 5
    assert client.get_object(Bucket=s3_bucket, Key="a/x", Range="bytes=1-3")["Body"].read() == b"ell"
    assert [o["Key"] for o in client.list_objects_v2(Bucket=s3_bucket)["Contents"]] == ["a/x"]
    with pytest.raises(client.exceptions.ClientError, match="PreconditionFailed"):
        client.put_object(Bucket=s3_bucket, Key="a/x", Body=b"other", IfNoneMatch="*")
    store = ObjectStore(f"s3://{s3_bucket}", moto_obstore_options(fault_proxy.endpoint))
    assert store.put_if_absent("o/y", b"obstore") and not store.put_if_absent("o/y", b"again")
    assert store.get("o/y") == b"obstore" and list(store.iter_prefix("o/")) == ["o/y"]
    store.delete("o/y")
    assert upstream_body(s3_client, s3_bucket, "a/x") == b"hello"
    assert upstream_body(s3_client, s3_bucket, "o/y") is None
    counts = fault_proxy.counters()
    assert counts["requests"] == counts["forwarded"] >= 10
    assert counts["held"] == counts["conflicts"] == counts["failed"] == counts["dropped"] == 0
    assert {e.action for e in fault_proxy.events} == {"forward"}
    assert {e.status for e in fault_proxy.events} <= {200, 204, 206, 404, 412}


def test_chunked_request_bodies_are_forwarded_whole(fault_proxy: FaultProxy, s3_bucket: str, s3_client: Any) -> None:
    assert fault_proxy.endpoint is not None
    parts = urllib.parse.urlsplit(fault_proxy.endpoint)
    assert parts.hostname is not None and parts.port is not None
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        conn.request("PUT", f"/{s3_bucket}/chunked", body=iter([b"first ", b"", b"second ", b"third"]),
                     encode_chunked=True)
        assert conn.getresponse().status == 200
    finally:
        conn.close()
    assert upstream_body(s3_client, s3_bucket, "chunked") == b"first second third"


def test_fail_rate_answers_5xx_without_forwarding(fault_proxy: FaultProxy, s3_bucket: str, s3_client: Any) -> None:
    assert fault_proxy.endpoint is not None
    fault_proxy.set_faults(fail_rate=1.0, seed=1, match=lambda method, path: method == "PUT")
    status, body = raw(fault_proxy.endpoint, "PUT", f"/{s3_bucket}/failed", b"data")
    assert status in (500, 503)
    assert b"<Code>InternalError</Code>" in body or b"<Code>SlowDown</Code>" in body
    assert raw(fault_proxy.endpoint, "GET", f"/{s3_bucket}/failed")[0] == 404  # a GET is not matched
    assert upstream_body(s3_client, s3_bucket, "failed") is None
    counts = fault_proxy.counters()
    assert (counts["failed"], counts["forwarded"], counts["dropped"]) == (1, 1, 0)


def test_drop_rate_forwards_then_drops_the_answer(fault_proxy: FaultProxy, s3_bucket: str, s3_client: Any) -> None:
    assert fault_proxy.endpoint is not None
    fault_proxy.set_faults(drop_rate=1.0, seed=1)
    with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
        raw(fault_proxy.endpoint, "PUT", f"/{s3_bucket}/dropped", b"landed")
    assert upstream_body(s3_client, s3_bucket, "dropped") == b"landed"  # it took effect
    counts = fault_proxy.counters()
    assert (counts["dropped"], counts["forwarded"], counts["failed"]) == (1, 0, 0)


def test_faults_follow_the_seed(fault_proxy: FaultProxy, s3_bucket: str) -> None:
    assert fault_proxy.endpoint is not None

    def outcomes(seed: int) -> list[int]:
        fault_proxy.set_faults(fail_rate=0.5, seed=seed)
        return [raw(fault_proxy.endpoint, "GET", f"/{s3_bucket}/missing-{i}")[0] for i in range(24)]

    first = outcomes(7)
    assert outcomes(7) == first
    assert 404 in first and set(first) - {404}  # both forwards and failures
    counts = fault_proxy.counters()
    assert counts["failed"] == 2 * sum(s != 404 for s in first)


def test_a_held_conditional_put_lands_later_and_conflicts_meanwhile(
        fault_proxy: FaultProxy, s3_bucket: str, s3_client: Any) -> None:
    endpoint = fault_proxy.endpoint
    assert endpoint is not None
    key = f"/{s3_bucket}/{LOG_ENTRY}"
    fault_proxy.hold_conditional_puts(hold_seconds=1.0)
    assert raw(endpoint, "PUT", f"/{s3_bucket}/{LOG_ENTRY}x", b"not matched", {"If-None-Match": "*"})[0] == 200
    started = time.monotonic()
    with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
        raw(endpoint, "PUT", key, b"first", {"If-None-Match": "*"})
    assert fault_proxy.holding()
    status, body = raw(endpoint, "PUT", key, b"first", {"If-None-Match": "*"})  # the client's retry
    assert status == 409 and b"<Code>ConditionalRequestConflict</Code>" in body
    assert raw(endpoint, "PUT", key, b"other writer", {"If-None-Match": "*"})[0] == 409
    assert raw(endpoint, "GET", key)[0] == 404  # nothing readable while it is held
    assert upstream_body(s3_client, s3_bucket, LOG_ENTRY) is None
    assert fault_proxy.wait_idle(10)
    assert time.monotonic() - started >= 0.9
    assert upstream_body(s3_client, s3_bucket, LOG_ENTRY) == b"first"
    import boto3

    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    with pytest.raises(client.exceptions.ClientError, match="PreconditionFailed"):  # count=1: no second hold
        client.put_object(Bucket=s3_bucket, Key=LOG_ENTRY, Body=b"late", IfNoneMatch="*")
    assert fault_proxy.held_statuses() == [200]
    counts = fault_proxy.counters()
    assert (counts["held"], counts["held_forwarded"], counts["conflicts"], counts["conflicts_same_body"]) == (1, 1, 2, 1)


def test_is_log_entry_path() -> None:
    assert is_log_entry_path("/bkt/p/ds/_kstore/log/00000000000000000012.json")
    assert is_log_entry_path("/bkt/ds%2F_kstore%2Flog%2F00000000000000000012.json?x-id=PutObject")
    assert not is_log_entry_path("/bkt/ds/_kstore/log/_last_checkpoint.json")
    assert not is_log_entry_path("/bkt/ds/_kstore/log/00000000000000000012.checkpoint.arrow")


def test_stop_is_bounded_and_leaves_no_thread(s3_endpoint: str, s3_bucket: str, s3_client: Any) -> None:
    proxy = FaultProxy(s3_endpoint)
    endpoint = proxy.start()
    parts = urllib.parse.urlsplit(endpoint)
    assert parts.hostname is not None and parts.port is not None
    idle = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)  # a keep-alive connection
    idle.request("GET", f"/{s3_bucket}/none")
    assert idle.getresponse().read() is not None
    proxy.hold_conditional_puts(hold_seconds=30.0)
    with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
        raw(endpoint, "PUT", f"/{s3_bucket}/{LOG_ENTRY}", b"held", {"If-None-Match": "*"})
    assert proxy_threads(proxy)
    started = time.monotonic()
    proxy.stop(timeout=5)
    assert time.monotonic() - started < 5
    assert proxy_threads(proxy) == []
    assert upstream_body(s3_client, s3_bucket, LOG_ENTRY) == b"held"  # forwarded on stop, not lost
    idle.close()
    with pytest.raises(OSError):
        raw(endpoint, "GET", f"/{s3_bucket}/none")
