"""Fixtures for store tests: a moto S3 server for the session and a fresh bucket per test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from kstore.io.s3 import S3Store
from tests.s3_server import S3Server


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """Endpoint URL of a moto S3 server on 127.0.0.1 (fake credentials set in os.environ)."""
    server = S3Server()
    endpoint = server.start()
    try:
        yield endpoint
    finally:
        server.stop()


def make_bucket(endpoint: str) -> str:
    """Create a bucket with a fresh name on the moto server and return its name."""
    import boto3

    name = f"kstore-test-{uuid.uuid4().hex[:16]}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=name)
    return name


@pytest.fixture
def s3_bucket(s3_endpoint: str) -> str:
    """A new, empty bucket."""
    return make_bucket(s3_endpoint)


@pytest.fixture
def s3_store(s3_endpoint: str, s3_bucket: str) -> S3Store:
    """An :class:`S3Store` on a new, empty bucket of the moto server."""
    return S3Store(s3_bucket, endpoint_url=s3_endpoint)
