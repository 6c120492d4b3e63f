"""Fixtures of the conformance suite: engines (started on first use), the source table and
the datasets each writer wrote (once per pytest worker, in a local directory store that
Spark executors and Dask worker processes reach too)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from tests.conformance import drivers, matrix


@pytest.fixture(scope="session")
def engines(request: pytest.FixtureRequest) -> drivers.Engines:
    return drivers.Engines(get_spark=lambda: request.getfixturevalue("spark"),
                           get_client=lambda: request.getfixturevalue("dask_cluster_client"))


@pytest.fixture(scope="session")
def source() -> pa.Table:
    return matrix.source_table()


class Datasets:
    """``get(writer, layout) -> (store url, dataset uuid)``, writing each dataset once."""

    def __init__(self, root: Path, engines: drivers.Engines, source: pa.Table) -> None:
        self.root, self.engines, self.source = root, engines, source
        self._written: dict[tuple[str, str], tuple[str, str]] = {}

    def get(self, writer: str, layout: str) -> tuple[str, str]:
        key = (writer, layout)
        if key not in self._written:
            url, uuid = "file://" + str(self.root), f"{writer}-{layout}"
            source = self.source.select(drivers.written_columns(writer, self.source))
            drivers.write(writer, self.engines, url, uuid, source, matrix.LAYOUTS[layout])
            self._written[key] = (url, uuid)
        return self._written[key]


@pytest.fixture(scope="session")
def datasets(tmp_path_factory: pytest.TempPathFactory, engines: drivers.Engines, source: pa.Table) -> Datasets:
    return Datasets(tmp_path_factory.mktemp("conformance"), engines, source)
