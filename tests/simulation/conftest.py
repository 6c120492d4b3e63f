"""A moto S3 server for the simulation's S3 schedules (session-scoped, 127.0.0.1)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.s3_server import S3Server


@pytest.fixture(scope="session")
def sim_s3_endpoint() -> Iterator[str]:
    server = S3Server()
    endpoint = server.start()
    try:
        yield endpoint
    finally:
        server.stop()
