"""Fixtures for the driver tests: key listings and shared (module-scoped) datasets.

``store_url`` (a fresh empty local-dir or memory store per test) comes from tests/conftest.py.
"""

from __future__ import annotations

import datetime as dt
import io

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

import kstore

# ---------------------------------------------------------------------------------------
# store inspection helpers (exposed as fixtures: tests/ has no packages to import from)
# ---------------------------------------------------------------------------------------


def _dataset_keys(url: str, uuid: str) -> set[str]:
    """Every key the dataset owns: ``<uuid>/...`` plus its main metadata file(s)."""
    st = kstore.open_store(url)
    keys = set(st.iter_prefix(uuid + "/"))
    keys |= {k for k in st.iter_prefix(uuid + ".") if "/" not in k}
    return keys


def _data_keys(url: str, uuid: str) -> set[str]:
    """The Parquet data files of the dataset (every table), excluding kstore's own files."""
    return {
        k
        for k in _dataset_keys(url, uuid)
        if k.endswith(".parquet") and "/indices/" not in k and "/_kstore/" not in k
    }


def _all_keys(url: str) -> set[str]:
    return set(kstore.open_store(url).iter_prefix(""))


def _file_rows(url: str, uuid: str, column: str = "id") -> dict:
    """``row id -> partition label`` read straight from the data files (independent of planning)."""
    st = kstore.open_store(url)
    meta = kstore.load_metadata(url, uuid)
    out = {}
    for label, files in meta.partitions.items():
        table = pq.read_table(io.BytesIO(st.get(files[meta.table])), columns=[column])
        for v in table.column(column).to_pylist():
            out[v] = label
    return out


@pytest.fixture
def dataset_keys():
    return _dataset_keys


@pytest.fixture
def data_keys():
    return _data_keys


@pytest.fixture
def all_keys():
    return _all_keys


@pytest.fixture
def file_rows():
    return _file_rows


# ---------------------------------------------------------------------------------------
# the predicate dataset: every operator on partition / indexed / plain columns
# ---------------------------------------------------------------------------------------

PRED_UUID = "preds"
PRED_N = 60


def pred_frame() -> pd.DataFrame:
    """60 rows; nulls in every non-partition column except ``id``."""
    ids = np.arange(PRED_N)
    return pd.DataFrame(
        {
            "id": ids,
            "p": pd.Series(["a", "b", "c/d"])[ids % 3].to_numpy(),  # partition, with a '/'
            "q": (ids // 3) % 2 + 1,  # partition, int
            "x": pd.array([None if i % 11 == 0 else i % 7 for i in ids], dtype="Int64"),  # index
            "s": [None if i % 13 == 0 else f"s{i % 5}" for i in ids],  # index, str
            "v": [np.nan if i % 9 == 0 else i * 0.5 for i in ids],  # plain float
            "w": [None if i % 10 == 0 else f"w{i % 4}" for i in ids],  # plain str
            "d": [dt.date(2024, 1, 1) + dt.timedelta(days=int(i)) for i in ids],  # plain date
            "t": pd.Series(pd.Timestamp("2024-01-01") + pd.to_timedelta(ids * 3600 + 1, unit="s")).astype(
                "datetime64[ns]"
            ),
        }
    )


@pytest.fixture(scope="module", params=["file", "memory"])
def pred_store(request, new_store) -> str:
    """A store holding the predicate dataset (2 chunks -> 2 files per partition)."""
    url = new_store(request.param)
    df = pred_frame()
    kstore.store_dataset(
        url, PRED_UUID, [df.iloc[: PRED_N // 2], df.iloc[PRED_N // 2 :]], partition_on=["p", "q"],
        secondary_indices=["x", "s"],
    )
    return url


# ---------------------------------------------------------------------------------------
# plan budget datasets: 10 and 2,000 single-row partitions with two secondary indices
# ---------------------------------------------------------------------------------------


def budget_frame(n: int) -> pd.DataFrame:
    k = np.arange(n)
    return pd.DataFrame({"k": k, "x": k % 50, "y": [f"s{i % 7}" for i in k], "v": k * 1.0})


@pytest.fixture(scope="module", params=[("file", 10), ("memory", 10), ("memory", 10_000)],
                ids=["file-10", "memory-10", "memory-10000"])
def budget_store(request, new_store) -> tuple[str, int]:
    kind, n = request.param
    url = new_store(kind)
    kstore.store_dataset(url, "budget", budget_frame(n), partition_on=["k"], secondary_indices=["x", "y"])
    return url, n


@pytest.fixture(scope="session")
def pred_df() -> pd.DataFrame:
    """The source frame of the predicate dataset (do not modify)."""
    return pred_frame()
