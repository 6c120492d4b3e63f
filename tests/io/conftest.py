"""Fixtures for store tests: a moto S3 server for the session and a fresh bucket per test; an
Azurite blob emulator for the session and a fresh container per test (obstore-backed stores);
``fault_proxy``: a fault-injecting HTTP proxy in front of the moto server (tests/fault_proxy.py),
reset for every test."""

from __future__ import annotations

import base64
import email.utils
import hashlib
import hmac
import http.client
import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kstore.io.s3 import S3Store
from tests.fault_proxy import FaultProxy


@pytest.fixture(scope="session")
def s3_client(s3_endpoint: str) -> Any:
    """One boto3 S3 client for the moto server (clients are thread-safe; making one costs
    about 0.1 s, so tests share this one)."""
    import boto3

    return boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")


@pytest.fixture
def s3_bucket(s3_client: Any) -> str:
    """A new, empty bucket."""
    name = f"kstore-test-{uuid.uuid4().hex[:16]}"
    s3_client.create_bucket(Bucket=name)
    return name


@pytest.fixture
def s3_store(s3_endpoint: str, s3_bucket: str) -> S3Store:
    """An :class:`S3Store` on a new, empty bucket of the moto server."""
    return S3Store(s3_bucket, endpoint_url=s3_endpoint)


@pytest.fixture(scope="session")
def fault_proxy_session(s3_endpoint: str) -> Iterator[FaultProxy]:
    """One :class:`~tests.fault_proxy.FaultProxy` in front of the session's moto server
    (use :func:`fault_proxy`, which resets it around every test)."""
    proxy = FaultProxy(s3_endpoint)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()


@pytest.fixture
def fault_proxy(fault_proxy_session: FaultProxy) -> Iterator[FaultProxy]:
    """The session's fault proxy with no faults, holds or counts (``.endpoint`` is its URL):
    held requests of the test before have landed, and this test's land before the next."""
    fault_proxy_session.reset()
    yield fault_proxy_session
    fault_proxy_session.reset()


# -- obstore-backed stores (kstore.io.objstore): S3 on the moto server, Azure on Azurite --------

#: Azurite's well-known development account (public, documented by Microsoft).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
#: Objects a prefixed store must never see (outside its prefix, or a string-prefix sibling).
OBJSTORE_PREFIX = "some/prefix"
OBJSTORE_DECOYS = ["outside/x", "some/prefix-other/y", "some/prefixz", "some/x"]


def _azurite_binary() -> str | None:
    local = Path(__file__).resolve().parents[2] / ".ci-tools" / "node_modules" / ".bin" / "azurite-blob"
    return str(local) if local.exists() else shutil.which("azurite-blob")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def azurite_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Blob endpoint ``http://127.0.0.1:<port>`` of an Azurite emulator for the session
    (in memory). Fails (never skips) where Azurite or node is missing: ``bash
    scripts/azurite.sh`` (run by ``scripts/setup.sh``) installs it into ``.ci-tools/``.

    Sets ``AZURITE_BLOB_STORAGE_URL`` (where obstore's ``use_emulator=true`` connects).
    """
    binary = _azurite_binary()
    if binary is None:
        pytest.fail(
            "Azurite is not installed: the Azure store tests need it. Run `bash scripts/azurite.sh` "
            "(needs node and npm; scripts/setup.sh runs it) to install it into .ci-tools/.",
            pytrace=False,
        )
    if shutil.which("node") is None:
        pytest.fail(
            f"Azurite ({binary}) needs node on the PATH: install Node.js (scripts/azurite.sh does "
            "so with apt-get when run as root).",
            pytrace=False,
        )
    port = _free_port()
    log = tmp_path_factory.mktemp("azurite") / "azurite.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            [binary, "--silent", "--disableTelemetry", "--skipApiVersionCheck", "--inMemoryPersistence",
             "--blobHost", "127.0.0.1", "--blobPort", str(port)],
            stdout=subprocess.DEVNULL, stderr=err, start_new_session=True,
        )
    endpoint = f"http://127.0.0.1:{port}"
    saved = os.environ.get("AZURITE_BLOB_STORAGE_URL")
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"Azurite did not start: {log.read_text()[-2000:]}") from None
                time.sleep(0.05)
        os.environ["AZURITE_BLOB_STORAGE_URL"] = endpoint
        yield endpoint
    finally:
        if saved is None:
            os.environ.pop("AZURITE_BLOB_STORAGE_URL", None)
        else:
            os.environ["AZURITE_BLOB_STORAGE_URL"] = saved
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def create_azurite_container(endpoint: str, name: str) -> None:
    """Create a blob container (obstore has no call for it): one SharedKey-signed request."""
    headers = {"x-ms-date": email.utils.formatdate(usegmt=True), "x-ms-version": "2021-08-06"}
    canonical = "".join(f"{k}:{v}\n" for k, v in sorted(headers.items()))
    to_sign = "PUT\n" + "\n" * 11 + canonical + f"/{AZURITE_ACCOUNT}/{AZURITE_ACCOUNT}/{name}\nrestype:container"
    digest = hmac.new(base64.b64decode(AZURITE_KEY), to_sign.encode(), hashlib.sha256).digest()
    headers["Authorization"] = f"SharedKey {AZURITE_ACCOUNT}:{base64.b64encode(digest).decode()}"
    host, _, port = endpoint.removeprefix("http://").partition(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request("PUT", f"/{AZURITE_ACCOUNT}/{name}?restype=container", body=b"",
                     headers={**headers, "Content-Length": "0"})
        response = conn.getresponse()
        body = response.read()
    finally:
        conn.close()
    if response.status != 201:
        raise RuntimeError(f"cannot create container {name!r}: {response.status} {body[:300]!r}")


def azurite_options(endpoint: str) -> dict[str, Any]:
    """``storage_options`` for Azurite as for a real account: name, key and endpoint."""
    return {"account_name": AZURITE_ACCOUNT, "account_key": AZURITE_KEY,
            "endpoint": f"{endpoint}/{AZURITE_ACCOUNT}", "allow_http": True}


def moto_obstore_options(endpoint: str) -> dict[str, Any]:
    """``storage_options`` for obstore's S3 backend on the moto server."""
    return {"endpoint": endpoint, "allow_http": True, "region": "us-east-1",
            "access_key_id": "testing", "secret_access_key": "testing"}


@pytest.fixture
def azure_container(azurite_endpoint: str) -> str:
    """A new, empty container on the Azurite emulator."""
    name = f"kstore-{uuid.uuid4().hex[:16]}"
    create_azurite_container(azurite_endpoint, name)
    return name


@pytest.fixture
def make_objstore(request: pytest.FixtureRequest) -> Callable[[str], Any]:
    """``make_objstore(kind)``: a fresh :class:`~kstore.io.objstore.ObjectStore`.

    ``"s3"``: obstore's S3 backend on a new moto bucket. ``"abfs"``: a new Azurite container
    opened with ``use_emulator=true``, under the key prefix :data:`OBJSTORE_PREFIX` with
    :data:`OBJSTORE_DECOYS` around it.
    """
    from kstore.io.objstore import ObjectStore

    def make(kind: str) -> Any:
        if kind == "s3":
            endpoint = request.getfixturevalue("s3_endpoint")
            bucket = request.getfixturevalue("s3_bucket")
            return ObjectStore(f"s3://{bucket}", moto_obstore_options(endpoint))
        if kind == "abfs":
            container = request.getfixturevalue("azure_container")
            whole = ObjectStore(f"abfs://{container}?use_emulator=true")
            for decoy in OBJSTORE_DECOYS:
                whole.put(decoy, b"decoy")
            return ObjectStore(f"abfs://{container}/{OBJSTORE_PREFIX}?use_emulator=true")
        raise ValueError(f"unknown obstore kind {kind!r}")

    return make
