"""The change feed on every engine (#33): ``kstore.dask.read_changes`` and Spark's
``readChangeFeed`` option return exactly the rows of ``kstore.read_changes`` (the oracle of
tests/drivers/test_changes.py), for whole and partial ranges over appends, partition
overwrites, row deletes, updates, merges, compactions and a widening; expired ranges and
bad options fail before anything is read."""

from __future__ import annotations

import datetime as dt
import math

import numpy as np
import pandas as pd
import pytest

import kstore
from kstore.errors import InvalidArgumentError, VersionNotFoundError

UUID = "feed"


def _norm(v):
    if v is None or v is pd.NA or v is pd.NaT or (isinstance(v, float) and math.isnan(v)):
        return None
    if isinstance(v, (pd.Timestamp, dt.datetime)):
        return pd.Timestamp(v).tz_localize(None).isoformat() if pd.Timestamp(v).tzinfo is None else \
            pd.Timestamp(v).tz_convert("UTC").isoformat()
    if isinstance(v, np.generic):
        return v.item()
    return v


def rows(df: pd.DataFrame, columns: list[str]) -> list[tuple]:
    """Change rows in a comparable form, in their order (the feed's order is part of it:
    oldest version first, an update's images together)."""
    return [tuple(_norm(v) for v in r) for r in df[columns].itertuples(index=False, name=None)]


def by_version(df: pd.DataFrame, columns: list[str]) -> list[tuple]:
    """Rows ordered by version, then as a multiset within it (engines may order the rows of
    one version's kinds of change as they read them)."""
    out = rows(df, columns)
    return sorted(out, key=lambda r: (r[columns.index("_commit_version")], repr(r)))


def history_of_changes(url: str) -> None:
    """v0 create, v1 append, v2 update, v3 merge, v4 delete_rows, v5 compaction, v6 partition
    overwrite, v7 a widening append (x: int64 -> double) with a new column."""
    kstore.store_dataset(url, UUID, pd.DataFrame({"p": [0, 0, 1], "k": [1, 2, 3], "x": [10, 20, 30]}),
                         partition_on="p")
    kstore.update_dataset(url, UUID, pd.DataFrame({"p": [1, 2], "k": [4, 5], "x": [40, 50]}))
    kstore.update_rows(url, UUID, [[("k", "==", 2)]], set={"x": 21})
    kstore.merge(url, UUID, pd.DataFrame({"p": [1, 2], "k": [3, 6], "x": [31, 60]}), on="k")
    kstore.delete_rows(url, UUID, [[("k", "==", 1)]])
    kstore.compact(url, UUID)
    kstore.update_dataset(url, UUID, pd.DataFrame({"p": [2], "k": [7], "x": [70]}), mode="overwrite_partitions")
    kstore.update_dataset(url, UUID, pd.DataFrame({"p": [3], "k": [8], "x": [0.5], "note": ["n"]}),
                          schema_mode="merge")


COLUMNS = ["p", "k", "x", "note", "_change_type", "_commit_version", "_commit_timestamp"]


@pytest.fixture
def feed(tmp_path):
    url = str(tmp_path / "store")
    history_of_changes(url)
    return url


@pytest.mark.parametrize("start,end", [(0, None), (2, 4), (5, 5), (3, None), (7, 7)])
def test_dask_read_changes_equals_the_eager_feed(feed, start, end):
    import kstore.dask as kd

    want = kstore.read_changes(feed, UUID, start, end)
    ddf = kd.read_changes(feed, UUID, start, end)
    got = ddf.compute(scheduler="threads")
    columns = COLUMNS if end is None or end >= 7 else [c for c in COLUMNS if c != "note"]  # (v7 adds note)
    assert list(got.columns) == list(want.columns) == columns
    assert rows(got, columns) == rows(want, columns)
    # one partition per version with row changes (the compaction, v5, has none)
    last = 7 if end is None else end
    assert ddf.npartitions == max(1, len([v for v in range(start, last + 1) if v != 5]))
    assert (got.dtypes == ddf._meta.dtypes).all()


def test_dask_read_changes_checks_the_range_on_the_client(feed):
    import kstore.dask as kd

    with pytest.raises(VersionNotFoundError, match="no version 99"):
        kd.read_changes(feed, UUID, 0, 99)
    with pytest.raises(InvalidArgumentError, match="after end_version"):
        kd.read_changes(feed, UUID, 4, 2)
    kstore.garbage_collect(feed, UUID, retention=dt.timedelta(0), enforce_retention_duration=False)
    with pytest.raises(VersionNotFoundError, match="not retained"):
        kd.read_changes(feed, UUID, 0)


def _spark_feed(spark, url, **options):
    reader = spark.read.format("kstore").option("readChangeFeed", "true")
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load(url + "/" + UUID)


def test_spark_read_change_feed_equals_the_eager_feed(spark, feed):
    for start, end in [(0, None), (2, 4), (7, 7)]:
        want = kstore.read_changes(feed, UUID, start, end)
        opts = {"startingVersion": start} if end is None else {"startingVersion": start, "endingVersion": end}
        df = _spark_feed(spark, feed, **opts)
        columns = COLUMNS if end is None or end >= 7 else [c for c in COLUMNS if c != "note"]  # (v7 adds note)
        assert df.columns == list(want.columns) == columns
        got = pd.DataFrame([r.asDict() for r in df.collect()], columns=columns)
        got["_commit_timestamp"] = pd.to_datetime(got["_commit_timestamp"]).dt.tz_localize("UTC")  # session: UTC
        assert by_version(got, columns) == by_version(want, columns), (start, end)
    # Delta's timestamp bounds: the first version committed at or after, the version current at
    hist = {h.version: h.timestamp for h in kstore.history(feed, UUID)}
    got = _spark_feed(spark, feed, startingTimestamp=hist[3].isoformat(), endingTimestamp=hist[4].isoformat())
    assert sorted({r._commit_version for r in got.collect()}) == [3, 4]
    # filters and projections run on the change rows
    ups = _spark_feed(spark, feed, startingVersion=0).filter("_change_type = 'update_postimage'").select("k", "x")
    assert sorted((r.k, r.x) for r in ups.collect()) == [(2, 21.0), (3, 31.0)]


def test_spark_change_feed_options_are_checked(spark, feed):
    with pytest.raises(Exception, match="needs the option startingVersion or startingTimestamp"):
        _spark_feed(spark, feed).collect()
    with pytest.raises(Exception, match="add readChangeFeed=true"):
        spark.read.format("kstore").option("startingVersion", 1).load(feed + "/" + UUID).collect()
    with pytest.raises(Exception, match="do not apply to the change feed"):
        _spark_feed(spark, feed, startingVersion=0, versionAsOf=1).collect()
    with pytest.raises(Exception, match="no version 99"):
        _spark_feed(spark, feed, startingVersion=0, endingVersion=99).collect()


def _stream_once(spark, url: str, uuid: str, checkpoint: str, **options) -> list[tuple]:
    """One ``trigger(availableNow=True)`` run of a change-feed stream from ``checkpoint``: the
    rows each micro-batch delivered, as (batch, id, change type, version)."""
    got: list[tuple] = []
    reader = spark.readStream.format("kstore").option("dataset_uuid", uuid).option("readChangeFeed", "true")
    for k, v in options.items():
        reader = reader.option(k, v)
    q = (reader.load(url).writeStream
         .foreachBatch(lambda df, i: got.extend((i, r.id, r._change_type, r._commit_version) for r in df.collect()))
         .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    q.awaitTermination()
    return got


def test_spark_streams_the_change_feed_incrementally(spark, tmp_path):
    """Delta's ``readStream ... readChangeFeed``: each run from the same checkpoint delivers
    exactly the versions committed since the last one (the eager feed of that range), no
    version twice; a schema change since the stream started fails it, asking for a restart."""
    url, ck = str(tmp_path / "store"), str(tmp_path / "ck")
    kstore.store_dataset(url, "ev", pd.DataFrame({"id": [1, 2], "x": [1.0, 2.0]}))
    first = _stream_once(spark, url, "ev", ck, startingVersion=0)
    assert sorted(r[1:] for r in first) == [(1, "insert", 0), (2, "insert", 0)]
    kstore.update_dataset(url, "ev", pd.DataFrame({"id": [3], "x": [3.0]}))
    kstore.update_rows(url, "ev", [[("id", "==", 2)]], set={"x": 20.0})
    kstore.delete_rows(url, "ev", [[("id", "==", 1)]])
    second = _stream_once(spark, url, "ev", ck, startingVersion=0)
    want = kstore.read_changes(url, "ev", 1)
    assert sorted(r[1:] for r in second) == sorted(zip(want["id"], want["_change_type"], want["_commit_version"]))
    assert {r[0] for r in second}.isdisjoint({r[0] for r in first})  # new micro-batches only
    assert _stream_once(spark, url, "ev", ck, startingVersion=0) == []  # nothing new: nothing delivered
    # a running stream: a column added while it runs no longer fits its schema; it fails and says so
    got: list[tuple] = []
    q = (spark.readStream.format("kstore").option("dataset_uuid", "ev").option("readChangeFeed", "true")
         .option("startingVersion", 0).load(url).writeStream
         .foreachBatch(lambda df, i: got.extend((r.id, r._commit_version) for r in df.collect()))
         .option("checkpointLocation", str(tmp_path / "ck-running")).trigger(processingTime="100 milliseconds")
         .start())
    try:
        q.processAllAvailable()
        everything = kstore.read_changes(url, "ev", 0)
        assert sorted(got) == sorted(zip(everything["id"], everything["_commit_version"]))
        kstore.update_dataset(url, "ev", pd.DataFrame({"id": [4], "x": [4.0], "note": ["n"]}), schema_mode="merge")
        with pytest.raises(Exception, match="restart the stream"):
            q.processAllAvailable()
    finally:
        q.stop()
    # restarted (from its checkpoint), the stream reads on in the new schema
    again = _stream_once(spark, url, "ev", ck, startingVersion=0)
    assert [r[1:] for r in again] == [(4, "insert", 4)]


def test_spark_stream_options_are_checked(spark, tmp_path):
    url = str(tmp_path / "store")
    kstore.store_dataset(url, "ev", pd.DataFrame({"id": [1]}))
    with pytest.raises(Exception, match="do not apply to a stream"):
        (spark.readStream.format("kstore").option("dataset_uuid", "ev").option("versionAsOf", 0).load(url)
         .writeStream.foreachBatch(lambda df, i: None).option("checkpointLocation", str(tmp_path / "ck0"))
         .trigger(availableNow=True).start().awaitTermination())
    with pytest.raises(Exception, match="has no end"):
        _stream_once(spark, url, "ev", str(tmp_path / "ck"), startingVersion=0, endingVersion=0)
