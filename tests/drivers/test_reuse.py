"""Reused frames: kstore never changes the caller's data, and a result the caller changes
never changes what a later read returns.

What must hold, and is tried here to break:
- a write (eager create, append with a delete scope, ``sort_by``, Dask) leaves the input
  frame exactly as it was: values, dtypes (categorical, nullable, time zones, object
  dates), index and column order;
- mutating a frame a read returned (in place, every column kind) and reading again, from
  the same :class:`~kstore.Snapshot` too (whose planning state is cached), gives the first
  result again;
- writing the same frame object twice gives every row twice, each version as written.
"""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd
import pandas.testing as pdt
import pytest

import kstore

UUID = "reuse"


def odd_frame(start: int = 0, n: int = 12) -> pd.DataFrame:
    ids = np.arange(start, start + n)
    return pd.DataFrame(
        {
            "p": ids % 3,
            "id": ids,
            "f": np.where(ids % 5 == 0, np.nan, ids / 4),
            "s": [f"s{i % 4}" for i in ids],
            "d": [dt.date(2024, 1, 1) + dt.timedelta(days=int(i % 7)) for i in ids],
            "n": pd.array([None if i % 4 == 0 else int(i) for i in ids], dtype="Int64"),
            "b": pd.array([None if i % 6 == 0 else bool(i % 2) for i in ids], dtype="boolean"),
            "c": pd.Categorical([["u", "v", "w"][i % 3] for i in ids]),
            "t": pd.to_datetime(ids, unit="h", origin=pd.Timestamp("2024-01-01")).tz_localize("Europe/Paris"),
        },
        index=pd.RangeIndex(100 + start, 100 + start + n),  # not the default index
    )


def mutate_in_place(df: pd.DataFrame) -> None:
    """Change the first value of every column in place, and add and drop a column."""
    for j, col in enumerate(df.columns):
        dtype, value = df[col].dtype, df.iloc[0, j]
        if isinstance(dtype, pd.CategoricalDtype):
            df[col] = df[col].cat.add_categories(["zz"])
            df.iloc[0, j] = "zz"
        elif str(dtype) == "boolean" or dtype.kind == "b":
            df.iloc[0, j] = True if pd.isna(value) else not value
        elif dtype.kind in "iuf":
            df.iloc[0, j] = 999
        elif dtype.kind == "M":
            df.iloc[0, j] = value + pd.Timedelta(days=365)
        else:
            df.iloc[0, j] = dt.date(1999, 1, 1) if col == "d" else "mutated"
    df["extra"] = 1
    del df["extra"]


def by_id(df: pd.DataFrame) -> pd.DataFrame:
    return df.sort_values("id").reset_index(drop=True)


def test_writes_leave_the_input_frame_as_it_was(store_url):
    df = odd_frame()
    before = df.copy(deep=True)
    kstore.store_dataset(store_url, UUID, df, partition_on="p", secondary_indices=["id"],
                         write_options={"sort_by": ["f"]})
    pdt.assert_frame_equal(df, before)
    more = odd_frame(start=12)
    more_before = more.copy(deep=True)
    kstore.update_dataset(store_url, UUID, more, delete_scope=[{"p": 0}])
    pdt.assert_frame_equal(more, more_before)
    got = by_id(kstore.read_dataset(store_url, UUID))
    assert got["id"].tolist() == [i for i in range(24) if i < 12 and i % 3 != 0 or i >= 12]


def test_a_mutated_read_result_does_not_change_later_reads(store_url):
    kstore.store_dataset(store_url, UUID, odd_frame(), partition_on="p", secondary_indices=["id"])
    snap = kstore.open_dataset(store_url, UUID)
    readers = {
        "read_dataset": lambda: kstore.read_dataset(store_url, UUID),
        "read_dataset with a predicate": lambda: kstore.read_dataset(store_url, UUID, predicates=[[("id", ">", 2)]]),
        "Snapshot.read": lambda: snap.read(),
        "Snapshot.read with a predicate": lambda: snap.read(predicates=[[("f", ">", 1.0)]]),
        "iter_dataset": lambda: pd.concat(list(kstore.iter_dataset(store_url, UUID))),
        "categoricals": lambda: kstore.read_dataset(store_url, UUID, categoricals=["s"]),
    }
    for name, read in readers.items():
        first = read()
        expected = first.copy(deep=True)
        assert len(first) > 0, name
        mutate_in_place(first)
        assert not first.equals(expected), name  # the mutation took
        pdt.assert_frame_equal(read(), expected, obj=name)


def test_the_same_frame_written_twice(store_url):
    df = odd_frame()
    kstore.store_dataset(store_url, UUID, df, partition_on="p")
    v1 = kstore.update_dataset(store_url, UUID, df)
    assert v1.version == 1
    got = by_id(kstore.read_dataset(store_url, UUID))
    assert got["id"].tolist() == sorted(list(range(12)) * 2)
    assert by_id(kstore.read_dataset(store_url, UUID, version=0))["id"].tolist() == list(range(12))


def test_a_dask_write_leaves_its_partitions_as_they_were(tmp_path):
    dask = pytest.importorskip("dask")
    dd = pytest.importorskip("dask.dataframe")
    import kstore.dask as kd

    df = odd_frame(n=40)
    with dask.config.set({"dataframe.convert-string": False}, scheduler="sync"):
        ddf = dd.from_pandas(df, npartitions=3, sort=False).persist()
        before = ddf.compute().copy(deep=True)
        kd.store_dataset("file://" + str(tmp_path), UUID, ddf, partition_on=["p"], secondary_indices=["id"],
                         sort_by=["f"])
        pdt.assert_frame_equal(ddf.compute(), before)
    got = by_id(kstore.read_dataset("file://" + str(tmp_path), UUID))
    assert got["id"].tolist() == list(range(40))
