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


def test_dask_merge_task_failure_leaves_nothing(tmp_path, monkeypatch):
    import dask

    import kstore.blocks.merge as bm
    import kstore.dask as kd

    url = build(str(tmp_path))
    before, v = data_files(url), kstore.load_metadata(url, UUID).version
    real = bm.rewrite_file
    calls = []

    def failing(store, rp, task, change, **kw):
        calls.append(task.label)
        if len(calls) == 2:
            raise OSError("disk gone")
        return real(store, rp, task, change, **kw)

    monkeypatch.setattr(bm, "rewrite_file", failing)
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
