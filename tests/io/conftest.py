"""Fixtures for store tests: a moto S3 server for the session and a fresh bucket per test."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from kstore.io.s3 import S3Store


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
def s3_store(s3_endpoint: str, s3_bucket: str, s3_client: Any) -> S3Store:
    """An :class:`S3Store` on a new, empty bucket of the moto server."""
    return S3Store(s3_bucket, endpoint_url=s3_endpoint, client=s3_client)
