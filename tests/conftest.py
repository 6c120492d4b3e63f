"""Shared fixtures for the whole test tree (keep this file small).

``store_url``: a fresh, empty store per test, once as a local directory
(``file:///...``) and once as a named in-process memory store (``memory://<unique>``).
Sub-directories may override it (tests/interop does, with its fixture store).
``s3_endpoint``: a moto S3 server on 127.0.0.1 for the session (started on first use).

``dask_cluster_client``: a ``distributed.LocalCluster`` (2 worker processes, 1 thread each)
and its client, one per pytest worker, started on first use.

``spark``: the one local Spark session of a pytest (xdist) worker (``local[2,2]``: 2 cores,
up to 2 attempts per task; UTC session time zone; the ``kstore`` data source registered).
Tests that use it carry ``pytest.mark.xdist_group`` so that ``--dist loadgroup`` keeps
them on one worker.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

STORE_KINDS = ("file", "memory")


def new_store_url(kind: str, tmp_path: Path) -> str:
    """A URL of a new, empty store of ``kind`` ("file" below ``tmp_path``, or "memory")."""
    if kind == "file":
        root = tmp_path / f"store-{uuid.uuid4().hex[:8]}"
        root.mkdir(parents=True)
        return "file://" + str(root)
    if kind == "memory":
        return f"memory://kstore-test-{uuid.uuid4().hex}"
    raise ValueError(f"unknown store kind {kind!r}")


def drop_store(url: str) -> None:
    """Free a named memory store (memory stores live for the whole process otherwise)."""
    if url.startswith("memory://"):
        from kstore.io.memory import MemoryStore

        with MemoryStore._registry_lock:
            MemoryStore._registry.pop(url[len("memory://") :], None)


@pytest.fixture(params=STORE_KINDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh empty store: ``file://<tmp dir>`` or ``memory://<unique name>``."""
    url = new_store_url(request.param, tmp_path)
    yield url
    drop_store(url)


@pytest.fixture(scope="session")
def new_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """Factory ``new_store(kind) -> url`` for fixtures wider than one test (module scope)."""
    made: list[str] = []

    def make(kind: str) -> str:
        url = new_store_url(kind, tmp_path_factory.mktemp("stores"))
        made.append(url)
        return url

    yield make
    for url in made:
        drop_store(url)


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """Endpoint URL of a moto S3 server on 127.0.0.1 (fake credentials set in os.environ)."""
    from tests.s3_server import S3Server

    server = S3Server()
    endpoint = server.start()
    try:
        yield endpoint
    finally:
        server.stop()
def _java_ok() -> bool:
    try:
        return subprocess.run(["java", "-version"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@pytest.fixture(scope="session")
def spark():
    """The worker's Spark session (started on first use; starting Spark takes ~20 s)."""
    pytest.importorskip("pyspark")
    if not _java_ok():
        pytest.skip("Spark needs Java (17)")
    from pyspark.sql import SparkSession

    import kstore.spark as ks

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    builder = SparkSession.builder
    if os.environ.get("KSTORE_SPARK_JVM", "") == "1":  # the JVM source's conformance run
        builder = ks.configure(builder)
    session = (
        builder.master("local[2,2]")  # 2 cores, 2 attempts per task
        .appName("kstore-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    ks.register(session)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def dask_cluster_client() -> Iterator:
    """The worker's Dask process cluster (a client that is not the default scheduler)."""
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                                       silence_logs=40)
    client = distributed.Client(cluster, set_as_default=False)
    try:
        yield client
    finally:
        client.close()
        cluster.close()
