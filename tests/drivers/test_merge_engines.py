"""``kstore.dask.merge`` and ``kstore.spark.merge`` (#33): the target files a merge rewrites
are rewritten in Dask / Spark tasks, with ONE commit on the client / driver. What is tried to
break: the result must equal the eager merge of the same source on a copy of the same
dataset (the oracle: rows, counts, files read and rewritten, the change feed), for every
``when_*`` choice; a task that fails must leave no version and no file behind; a key
predicate must keep the files that cannot hold a key unread; a retried transaction commits
nothing."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

import kstore
from kstore.errors import InvalidArgumentError

UUID = "up"


def target() -> pd.DataFrame:
    n = 60
    return pd.DataFrame({"p": np.arange(n) % 3, "k": np.arange(n, dtype=np.int64),
                         "x": np.arange(n, dtype=np.float64), "s": [f"s{i}" for i in range(n)]})


def source() -> pd.DataFrame:
    # 4 existing keys (one in each partition, one moved to another partition), 2 new ones
    return pd.DataFrame({"p": [0, 1, 2, 0, 1, 2], "k": np.array([0, 4, 8, 7, 100, 101], dtype=np.int64),
                         "x": [0.5, 4.5, 8.5, 7.5, 100.5, 101.5], "s": ["a", "b", "c", "moved", "new1", "new2"]})


def build(root: str) -> str:
    url = os.path.join(root, "store")
    kstore.store_dataset(url, UUID, iter([target().iloc[i::4] for i in range(4)]), partition_on="p",
                         secondary_indices="k")
    return url


def rows(url: str) -> list[tuple]:
    df = kstore.read_dataset(url, UUID)
    return sorted(zip(df["k"].tolist(), df["p"].tolist(), df["x"].tolist(), df["s"].tolist()))


def data_files(url: str) -> set[str]:
    return {os.path.relpath(os.path.join(d, f), url) for d, _, fs in os.walk(url) for f in fs
            if f.endswith(".parquet") and "_kstore" not in d and "indices" not in d}


CHOICES = [
    {},
    {"when_matched": "delete"},
    {"when_matched": "ignore", "when_not_matched": "ignore"},
    {"when_not_matched_by_source": "delete"},
]


SPARK_SCHEMA = "p long, k long, x double, s string"


def spark_frame(spark, df: pd.DataFrame):
    return spark.createDataFrame([tuple(r) for r in df[["p", "k", "x", "s"]].itertuples(index=False)], SPARK_SCHEMA)


def counts(r) -> tuple:
    return (r.inserted, r.updated, r.deleted, r.files_read, r.files_rewritten, r.files_added)


def _same_as_eager(tmp_path, run, choice):
    eager_url, engine_url = build(str(tmp_path / "eager")), build(str(tmp_path / "engine"))
    want = kstore.merge(eager_url, UUID, source(), "k", **choice)
    got = run(engine_url, source(), choice)
    assert counts(got) == counts(want)
    assert rows(engine_url) == rows(eager_url)
    assert got.dataset.version == want.dataset.version
    feed = kstore.read_changes(engine_url, UUID, got.dataset.version)
    want_feed = kstore.read_changes(eager_url, UUID, want.dataset.version)
    cols = ["k", "p", "x", "s", "_change_type"]
    assert sorted(map(tuple, feed[cols].values.tolist())) == sorted(map(tuple, want_feed[cols].values.tolist()))
    if not choice:  # an upsert of 6 keys reads only the files that may hold them (the index on k)
        assert got.files_read < len(kstore.load_metadata(engine_url, UUID, version=0).partitions)


@pytest.mark.parametrize("choice", CHOICES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "upsert")
def test_dask_merge_equals_the_eager_merge(tmp_path, choice):
    import dask
    import dask.dataframe as dd

    import kstore.dask as kd

    def run(url, src, choice):
        with dask.config.set(scheduler="threads"):
            return kd.merge(url, UUID, dd.from_pandas(src, npartitions=2), "k", **choice)

    _same_as_eager(tmp_path, run, choice)


def fail_second_file(monkeypatch) -> None:
    """Every file rewrite of the row operations goes through kstore.blocks.mutate.rewrite_file:
    the second one raises (a worker whose disk went away)."""
    import kstore.blocks.mutate as bm

    real, calls = bm.rewrite_file, []

    def failing(store, rp, task, change, **kw):
        calls.append(task.label)
        if len(calls) == 2:
            raise OSError("disk gone")
        return real(store, rp, task, change, **kw)

    monkeypatch.setattr(bm, "rewrite_file", failing)


def test_dask_merge_task_failure_leaves_nothing(tmp_path, monkeypatch):
    import dask

    import kstore.dask as kd

    url = build(str(tmp_path))
    before, v = data_files(url), kstore.load_metadata(url, UUID).version
    fail_second_file(monkeypatch)
    with dask.config.set(scheduler="sync"), pytest.raises(OSError, match="disk gone"):
        kd.merge(url, UUID, source(), "k")
    assert kstore.load_metadata(url, UUID).version == v and data_files(url) == before


def test_dask_merge_retried_transaction_commits_once(tmp_path):
    import dask

    import kstore.dask as kd

    url = build(str(tmp_path))
    with dask.config.set(scheduler="threads"):
        first = kd.merge(url, UUID, source(), "k", commit_options={"txn": ("job", 1)})
        again = kd.merge(url, UUID, source(), "k", commit_options={"txn": ("job", 1)})
    assert again.dataset.version == first.dataset.version and again.inserted == 0
    assert len(kstore.history(url, UUID)) == 2


@pytest.mark.parametrize("choice", [CHOICES[0], CHOICES[3]], ids=["upsert", "by-source-delete"])
def test_spark_merge_equals_the_eager_merge(spark, tmp_path, choice):
    import kstore.spark as ks

    def run(url, src, choice):
        return ks.merge(spark, url, UUID, spark_frame(spark, src), "k", **choice)

    _same_as_eager(tmp_path, run, choice)


def test_spark_merge_refuses_duplicate_keys_before_any_task(spark, tmp_path):
    import kstore.spark as ks

    url = build(str(tmp_path))
    before = data_files(url)
    dupes = spark_frame(spark, pd.concat([source(), source().iloc[:1]]))
    with pytest.raises(InvalidArgumentError, match="more than once"):
        ks.merge(spark, url, UUID, dupes, "k")
    assert data_files(url) == before


# ---------------------------------------------------------------------------------------
# update_rows and delete_rows on Dask and Spark: the same oracle, the eager call on a copy
# ---------------------------------------------------------------------------------------

#: (predicate, set values or None for a delete); the first moves rows to another partition
ROW_CHANGES = [
    ([[("k", "in", [3, 5, 11])]], {"p": 2, "s": "moved"}),
    ([[("p", "==", 1), ("x", ">", 30.0)]], {"x": -1.0}),
    ([[("k", "<", 7)], [("s", "==", "s40")]], None),
    ([[("k", "==", 10_000)]], None),  # matches nothing: no commit
]


def _same_rows_change_as_eager(tmp_path, run, predicate, values):
    eager_url, engine_url = build(str(tmp_path / "eager")), build(str(tmp_path / "engine"))
    if values is None:
        want_meta = kstore.delete_rows(eager_url, UUID, predicate)
        got_meta = run(engine_url, predicate, None)
    else:
        want = kstore.update_rows(eager_url, UUID, predicate, set=values)
        got = run(engine_url, predicate, values)
        assert (got.updated, got.files_read, got.files_rewritten) == (want.updated, want.files_read,
                                                                     want.files_rewritten)
        want_meta, got_meta = want.dataset, got.dataset
    assert rows(engine_url) == rows(eager_url)
    assert got_meta.version == want_meta.version
    assert [h.operation for h in kstore.history(engine_url, UUID)] == [h.operation
                                                                       for h in kstore.history(eager_url, UUID)]
    if want_meta.version:
        feed = kstore.read_changes(engine_url, UUID, got_meta.version)
        want_feed = kstore.read_changes(eager_url, UUID, want_meta.version)
        cols = ["k", "p", "x", "s", "_change_type"]
        assert sorted(map(tuple, feed[cols].values.tolist())) == sorted(map(tuple, want_feed[cols].values.tolist()))


@pytest.mark.parametrize(("predicate", "values"), ROW_CHANGES, ids=["update-move", "update", "delete", "no-match"])
def test_dask_update_and_delete_rows_equal_the_eager_ones(tmp_path, predicate, values):
    import dask

    import kstore.dask as kd

    def run(url, predicate, values):
        with dask.config.set(scheduler="threads"):
            if values is None:
                return kd.delete_rows(url, UUID, predicate)
            return kd.update_rows(url, UUID, predicate, values)

    _same_rows_change_as_eager(tmp_path, run, predicate, values)


def test_dask_update_rows_task_failure_leaves_nothing(tmp_path, monkeypatch):
    import dask

    import kstore.dask as kd

    url = build(str(tmp_path))
    before, v = data_files(url), kstore.load_metadata(url, UUID).version
    fail_second_file(monkeypatch)
    with dask.config.set(scheduler="sync"), pytest.raises(OSError, match="disk gone"):
        kd.update_rows(url, UUID, [[("x", ">=", 0.0)]], {"s": "all"})
    assert kstore.load_metadata(url, UUID).version == v and data_files(url) == before


def test_dask_row_changes_refuse_bad_input_before_any_task(tmp_path):
    import kstore.dask as kd
    from kstore.errors import ColumnNotFoundError

    url = build(str(tmp_path))
    before = data_files(url)
    with pytest.raises(InvalidArgumentError, match="needs a predicate"):
        kd.delete_rows(url, UUID, None)
    with pytest.raises(ColumnNotFoundError):
        kd.update_rows(url, UUID, [[("k", "==", 1)]], {"nope": 1})
    with pytest.raises(InvalidArgumentError, match="cannot set column 'k'"):
        kd.update_rows(url, UUID, [[("k", "==", 1)]], {"k": 1.5})
    assert data_files(url) == before and kstore.load_metadata(url, UUID).version == 0


@pytest.mark.parametrize(("predicate", "values"), ROW_CHANGES[:3], ids=["update-move", "update", "delete"])
def test_spark_update_and_delete_rows_equal_the_eager_ones(spark, tmp_path, predicate, values):
    import kstore.spark as ks

    def run(url, predicate, values):
        if values is None:
            return ks.delete_rows(spark, url, UUID, predicate)
        return ks.update_rows(spark, url, UUID, predicate, values)

    _same_rows_change_as_eager(tmp_path, run, predicate, values)
