"""The bounded-memory pandas read (``kstore.blocks.frame.read_frame``) returns exactly what
the Arrow path (``to_pandas(read_plan(...))``) returns, and falls back to it when it cannot
know where each file's rows go.

Random frames of every dtype read into preallocated columns (ints, unsigned, floats with
NaN and nulls, pandas' nullable dtypes, bools, naive and zoned timestamps, dates, strings,
categoricals), nulls in some files only (the mask is made by whichever thread meets the
first null), several files per partition, both store kinds (the local one reads through
``pyarrow.dataset`` fragments, the memory one through ``read_task``), column subsets,
``categoricals`` and ``dates_as_object``. Frames own their (pool-allocated) columns. Damage: a file holding other rows than the file
table says, a missing file, a file that is not Parquet.
"""

from __future__ import annotations

import datetime as dt
import itertools
import logging
import uuid
from unittest import mock

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kstore
from kstore.blocks import frame as frame_mod
from kstore.blocks.frame import planned_rows, read_frame
from kstore.errors import CorruptMetadataError
from kstore.io.store import open_store
from tests.conftest import drop_store, new_store_url

_counter = itertools.count()

_TS = [dt.datetime(2024, 1, 1, 12), dt.datetime(1970, 1, 1), dt.datetime(2262, 4, 12)]


def _nullable(draw, values, n, nulls):
    return [None if nulls and draw(st.booleans()) else draw(st.sampled_from(values)) for _ in range(n)]


@st.composite
def frames(draw):
    """A frame of ``n`` rows with a ``row`` id; ``nulls`` decides per frame whether the
    columns that can hold nulls get some (so some files of a dataset have none)."""
    n = draw(st.integers(1, 30))
    nulls = draw(st.booleans())
    d = {
        "row": np.arange(n, dtype=np.int64),
        "p": draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)),
        "i64": draw(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=n, max_size=n)),
        "u64": pd.array(draw(st.lists(st.integers(0, 2**64 - 1), min_size=n, max_size=n)), "uint64"),
        "f64": _nullable(draw, [1.5, -0.0, float("nan"), float("inf")], n, nulls),
        "f32": pd.array(draw(st.lists(st.sampled_from([1.5, -2.0, float("nan")]), min_size=n, max_size=n)),
                        "float32"),
        "Int": pd.array(_nullable(draw, [1, -7, 2**40], n, nulls), "Int64"),
        "Flt": pd.array(_nullable(draw, [0.5, -1.0, float("nan")], n, nulls), "Float64"),
        "b": draw(st.lists(st.booleans(), min_size=n, max_size=n)),
        "bool": pd.array(_nullable(draw, [True, False], n, nulls), "boolean"),
        "ts": pd.array(_nullable(draw, _TS, n, nulls), "datetime64[us]"),
        "tz": pd.Series(pd.array(_nullable(draw, _TS[:2], n, nulls), "datetime64[us]")).dt.tz_localize("Europe/Berlin"),
        "d": _nullable(draw, [dt.date(1, 1, 1), dt.date(2024, 2, 29), dt.date(9999, 12, 31)], n, nulls),
        "s": _nullable(draw, ["a", "ü", "", "x" * 40], n, nulls),
    }
    return pd.DataFrame(d)


COLUMN_SETS = [None, ["row", "i64", "s"], ["p", "d", "ts"], ["Int", "bool", "Flt", "row"], ["s"]]


def _reference(store, plan, columns, categoricals, dates_as_object):
    from kstore.blocks.read import read_plan, to_pandas

    return to_pandas(read_plan(store, plan, columns), plan.schema, categoricals=categoricals,
                     dates_as_object=dates_as_object)


def _no_arrow_read(*args, **kwargs):
    raise AssertionError("read through Arrow (the whole table), not into preallocated columns")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(parts=st.lists(frames(), min_size=1, max_size=4), kind=st.sampled_from(["file", "memory"]),
       partition_on=st.sampled_from([[], ["p"]]), columns=st.sampled_from(COLUMN_SETS),
       categoricals=st.sampled_from([None, ["s"], ["p", "i64"]]), dates_as_object=st.booleans(),
       workers=st.sampled_from([1, 4]))
def test_frame_equals_arrow_path(tmp_path, parts, kind, partition_on, columns, categoricals, dates_as_object,
                                 workers):
    url = new_store_url(kind, tmp_path)
    try:
        start = 0
        for part in parts:  # distinct row ids over the parts
            part["row"] += start
            start += len(part)
        kstore.store_dataset(url, "ds", parts, partition_on=partition_on)
        if columns is not None and categoricals is not None:
            categoricals = [c for c in categoricals if c in columns]
        store = open_store(url)
        snap = kstore.open_dataset(store, "ds")
        plan = snap.plan(columns)
        rows = planned_rows(snap.metadata, plan)
        assert rows is not None and sum(rows) == start
        with mock.patch.object(frame_mod, "read_plan", _no_arrow_read):
            fast = read_frame(store, plan, columns, rows, categoricals=categoricals, dates_as_object=dates_as_object,
                              max_workers=workers)
        ref = _reference(store, plan, columns, categoricals, dates_as_object)
        pd.testing.assert_frame_equal(fast, ref, check_exact=True)
        assert list(fast.dtypes) == list(ref.dtypes)
        assert isinstance(fast.index, pd.RangeIndex)
        # and against what was written (an oracle that is not the other path)
        source = pd.concat(parts, ignore_index=True).set_index("row").sort_index()
        got = fast.set_index("row").sort_index() if "row" in fast.columns else None
        if got is not None:
            for c in got.columns:
                if c in ("p", "i64", "u64", "s") and c not in (categoricals or []):
                    assert got[c].astype(object).where(got[c].notna(), None).tolist() == \
                        source[c].astype(object).where(source[c].notna(), None).tolist(), c
    finally:
        drop_store(url)


@pytest.mark.parametrize("kind", ["file", "memory"])
def test_nulls_in_later_files_only_make_the_nullable_dtype(tmp_path, kind):
    """A column whose nulls sit in the last of many files (decoded by other threads first)
    still reads as ``Int64``/``boolean``, with the nulls in the right rows."""
    url = new_store_url(kind, tmp_path)
    parts = [pd.DataFrame({"i": np.arange(k * 10, k * 10 + 10), "b": [True] * 10}) for k in range(12)]
    parts[-1] = pd.DataFrame({"i": pd.array([None, 111] * 5, "Int64"), "b": pd.array([None, False] * 5, "boolean")})
    kstore.store_dataset(url, "ds", parts)
    with mock.patch.object(frame_mod, "read_plan", _no_arrow_read):
        df = kstore.read_dataset(url, "ds")
    assert str(df["i"].dtype) == "Int64" and str(df["b"].dtype) == "boolean"
    assert df["i"].isna().tolist() == [False] * 110 + [True, False] * 5
    assert df["i"].iloc[:110].tolist() == list(range(110))
    assert df["b"].isna().tolist() == [False] * 110 + [True, False] * 5
    assert df["b"].iloc[:110].all() and not df["b"].iloc[111]
    drop_store(url)


@pytest.mark.parametrize("kind", ["file", "memory"])
def test_frames_own_their_columns(tmp_path, kind):
    """Each read's columns live in buffers of their own (allocated from Arrow's pool): a
    frame the caller writes to, or drops, changes no other frame, and a later read that
    reuses the freed memory returns the stored values again."""
    url = new_store_url(kind, tmp_path)
    parts = [pd.DataFrame({"i": np.arange(k * 50, k * 50 + 50), "f": np.linspace(0, 1, 50),
                           "b": [k % 2 == 0] * 50, "t": pd.date_range("2024-01-01", periods=50, freq="h").astype("datetime64[us]")})
             for k in range(6)]
    kstore.store_dataset(url, "ds", parts)
    expected = pd.concat(parts, ignore_index=True)
    with mock.patch.object(frame_mod, "read_plan", _no_arrow_read):
        first = kstore.read_dataset(url, "ds")
        second = kstore.read_dataset(url, "ds")
        for c in ("i", "f", "b", "t"):
            assert not np.shares_memory(first[c].to_numpy(), second[c].to_numpy()), c
        first.loc[:, "i"] = -1
        first.loc[:, "f"] = np.nan
        pd.testing.assert_frame_equal(second, expected)
        del first, second
        third = kstore.read_dataset(url, "ds")  # in the memory the dropped frames gave back
    pd.testing.assert_frame_equal(third, expected)
    drop_store(url)


def test_a_column_of_nulls_only_reads_as_a_categorical_without_categories(tmp_path):
    """Arrow encodes a null-typed column with the dictionary [null], a category pandas
    refuses (it raised a raw ValueError): the categorical has no categories instead."""
    df = pd.DataFrame({"p": [1, 1, 2], "x": [1, 2, 3], "s": pd.Series([None] * 3, dtype=object)})
    kstore.store_dataset(str(tmp_path), "d", df, partition_on="p")
    frames = {
        "bounded": kstore.read_dataset(str(tmp_path), "d", categoricals=["s"]),
        "residual": kstore.read_dataset(str(tmp_path), "d", predicates=[[("x", ">", 0)]], categoricals=["s"]),
        "iterator": pd.concat(list(kstore.iter_dataset(str(tmp_path), "d", categoricals=["s"]))),
    }
    for how, got in frames.items():
        assert isinstance(got["s"].dtype, pd.CategoricalDtype), how
        assert list(got["s"].cat.categories) == [] and got["s"].isna().all() and len(got) == 3, how
        assert sorted(got["x"].tolist()) == [1, 2, 3], how


def test_snapshot_read_uses_the_bounded_path(tmp_path):
    url = new_store_url("file", tmp_path)
    df = pd.DataFrame({"p": [1, 1, 2], "x": [1.5, 2.5, 3.5], "s": ["a", "b", None]})
    kstore.store_dataset(url, "ds", df, partition_on="p")
    with mock.patch.object(frame_mod, "read_plan", _no_arrow_read):
        out = kstore.open_dataset(url, "ds").read()
    pd.testing.assert_frame_equal(out, kstore.read_dataset(url, "ds"))
    assert out["x"].tolist() == [1.5, 2.5, 3.5]


def test_residual_predicate_reads_through_arrow(tmp_path):
    """Rows filtered inside files: their number is unknown before reading, so the whole
    table is read (the result is small) and converted."""
    url = new_store_url("memory", tmp_path)
    kstore.store_dataset(url, "ds", pd.DataFrame({"p": [1, 2, 2], "x": [1, 2, 3]}), partition_on="p")
    with mock.patch.object(frame_mod, "read_plan", wraps=frame_mod.read_plan) as spy:
        out = kstore.read_dataset(url, "ds", predicates=[[("x", ">", 1)]])
        assert spy.call_count == 1
        spy.reset_mock()
        pruned = kstore.read_dataset(url, "ds", predicates=[[("p", "==", 2)]])
        assert spy.call_count == 0  # partition pruning only: no residual, the bounded path
    assert out["x"].tolist() == [2, 3] and pruned["x"].tolist() == [2, 3]
    drop_store(url)


@pytest.mark.parametrize("kind", ["file", "memory"])
@pytest.mark.parametrize("new_rows", [[7, 8, 9, 10, 11, 12], [7]])
def test_file_with_other_rows_than_the_file_table_says(tmp_path, caplog, kind, new_rows):
    """A data file replaced behind kstore's back (more or fewer rows): the read warns and
    returns what the files hold, as the Arrow path does, never rows in the wrong slots."""
    import io

    url = new_store_url(kind, tmp_path)
    kstore.store_dataset(url, "ds", [pd.DataFrame({"x": [1, 2, 3]}), pd.DataFrame({"x": [4, 5]})])
    store = open_store(url)
    snap = kstore.open_dataset(store, "ds")
    rows = planned_rows(snap.metadata, snap.plan())
    victim = snap.plan().tasks[rows.index(3)].key
    schema = pq.read_schema(io.BytesIO(store.get(victim)))
    sink = io.BytesIO()
    pq.write_table(pa.table({"x": pa.array(new_rows, pa.int64())}, schema=schema), sink)
    store.put(victim, sink.getvalue())
    with caplog.at_level(logging.WARNING, logger="kstore.read"):
        df = kstore.read_dataset(url, "ds")
    assert "3 rows the file table says" in caplog.text or "the file table says 3" in caplog.text
    assert victim in caplog.text
    assert sorted(df["x"]) == sorted([4, 5] + new_rows)
    pd.testing.assert_frame_equal(df, _reference(store, snap.plan(), None, None, False))
    drop_store(url)


@pytest.mark.parametrize("kind", ["file", "memory"])
@pytest.mark.parametrize("damage, message", [("delete", "is missing"), ("garbage", "not a readable Parquet file")])
def test_missing_or_damaged_file_is_named(tmp_path, kind, damage, message):
    """The local scan gives up on a file it cannot read; the file-by-file read names it."""
    url = new_store_url(kind, tmp_path)
    kstore.store_dataset(url, "ds", pd.DataFrame({"p": [1, 2, 3], "x": [1, 2, 3]}), partition_on="p")
    store = open_store(url)
    key = kstore.open_dataset(store, "ds").plan().tasks[1].key
    if damage == "delete":
        store.delete(key)
    else:
        store.put(key, b"PAR1 not really " + uuid.uuid4().bytes)
    with pytest.raises(CorruptMetadataError, match=message) as err:
        kstore.read_dataset(url, "ds")
    assert key in str(err.value)
    drop_store(url)
