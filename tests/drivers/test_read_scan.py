"""The multi-file scan of a local store (``kstore.blocks.read._scan_plan``) returns exactly
what the per-file path returns: same rows, same order, same schema, same errors.

Random data and predicates, partition layouts and several files on a local directory store,
and files that lack a column or hold another type; every read runs twice, with
``MULTI_FILE_SCAN`` on and off.
"""

from __future__ import annotations

import atexit
import itertools
import os
import shutil
import tempfile

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kstore
from kstore.blocks import read as read_mod
from kstore.errors import CorruptMetadataError, KeyNotFoundError, UnsupportedTypeError
from tests.drivers.test_read_property import expected_rows, frames, predicates

_counter = itertools.count()
_ROOT = tempfile.mkdtemp(prefix="kstore-scan-")
atexit.register(shutil.rmtree, _ROOT, True)  # hypothesis runs many examples: one root, removed at exit


def _both(fn):
    read_mod.MULTI_FILE_SCAN = False
    try:
        old = fn()
    finally:
        read_mod.MULTI_FILE_SCAN = True
    return old, fn()


def _scan_used(monkeypatch) -> None:
    def no(*a, **k):
        raise AssertionError("read file by file")
    monkeypatch.setattr(read_mod, "read_task", no)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(df=frames(), dnf=st.one_of(st.none(), predicates),
       partition_on=st.sampled_from([[], ["p_int"], ["p_str"], ["p_int", "p_str"]]),
       chunks=st.integers(1, 3), columns=st.sampled_from([None, ["row", "p_str"], ["f", "row"], ["p_int"]]))
def test_scan_equals_per_file_read(df, dnf, partition_on, chunks, columns):
    url = "file://" + os.path.join(_ROOT, f"s{next(_counter)}")
    bounds = np.linspace(0, len(df), chunks + 1).astype(int)
    parts = [df.iloc[a:b] for a, b in zip(bounds[:-1], bounds[1:]) if b > a]
    kstore.store_dataset(url, "ds", parts, partition_on=partition_on, secondary_indices=["idx", "s"])
    old, new = _both(lambda: kstore.read_table(url, "ds", columns=columns, predicates=dnf))
    assert new.schema.equals(old.schema, check_metadata=True)
    assert new.equals(old), (dnf, partition_on, columns)
    if columns is None or "row" in columns:
        expect = expected_rows(df, dnf) if dnf else sorted(df["row"])
        assert sorted(new.column("row").to_pylist()) == expect
    old_df, new_df = _both(lambda: kstore.read_dataset(url, "ds", columns=columns, predicates=dnf))
    pd.testing.assert_frame_equal(new_df, old_df)


@pytest.fixture()
def local(tmp_path):
    url = "file://" + str(tmp_path / "store")
    df = pd.DataFrame({"p": [1, 1, 2, 2, 3], "x": [1, 2, 3, 4, 5], "s": list("abcde")})
    kstore.store_dataset(url, "d", df, partition_on=["p"], secondary_indices=["x"])
    return url, df


def test_local_read_takes_the_scan(local, monkeypatch):
    url, df = local
    _scan_used(monkeypatch)
    out = kstore.read_dataset(url, "d", predicates=[[("x", ">", 1)]])
    assert out["x"].tolist() == [2, 3, 4, 5]
    assert out["p"].tolist() == [1, 2, 2, 3]


def test_counting_store_reads_file_by_file(local):
    url, _ = local
    counting = kstore.io.store.CountingStore(url)
    kstore.read_dataset(counting, "d")
    assert counting.calls["open"] == 3


def test_missing_file_is_the_per_file_error(local):
    url, _ = local
    st = kstore.open_store(url)
    meta = kstore.load_metadata(url, "d")
    key = sorted(meta.partitions.items())[0][1][meta.table]
    os.unlink(st.file_path(key))
    with pytest.raises(CorruptMetadataError) as err:
        kstore.read_dataset(url, "d", version=meta.version)
    assert isinstance(err.value.__cause__, KeyNotFoundError)


def test_lossy_cast_is_the_per_file_error(tmp_path):
    url = "file://" + str(tmp_path / "store")
    kstore.store_dataset(url, "d", pd.DataFrame({"t": pd.to_datetime(["2024-01-01"]).astype("datetime64[us]")}))
    st = kstore.open_store(url)
    meta = kstore.load_metadata(url, "d")
    key = next(iter(meta.partitions.values()))[meta.table]
    pq.write_table(pa.table({"t": pa.array([1_000_000_001], pa.timestamp("ns"))}), st.file_path(key))
    with pytest.raises(UnsupportedTypeError):
        kstore.read_dataset(url, "d")


def test_file_without_a_column_and_with_a_narrower_type(local, monkeypatch):
    url, _ = local
    st = kstore.open_store(url)
    meta = kstore.load_metadata(url, "d")
    key = sorted(meta.partitions.items())[1][1][meta.table]
    pq.write_table(pa.table({"x": pa.array([3, 4], pa.int32())}), st.file_path(key))  # no "s", x int32
    for pred in (None, [[("s", "is null")]], [[("x", ">=", 4)]]):
        old, new = _both(lambda pred=pred: kstore.read_table(url, "d", predicates=pred))
        assert new.equals(old) and new.schema.equals(old.schema), pred
    assert kstore.read_table(url, "d").column("s").null_count == 2
    _scan_used(monkeypatch)
    kstore.read_table(url, "d")
