"""Structured Streaming on the ``kstore`` data source (#31 item 5, #33): Delta's streaming
sink (each micro-batch one commit, exactly once across restarts, through the application
transaction ``(checkpoint or txnAppId, batch id)``) and Delta's streaming source (every row
of the dataset, then each new version's added rows; versions that changed rows stop the
stream unless ``skipChangeCommits``). Real ``local[2]`` Spark, real stores; the restart
case deletes the checkpoint's record of the last micro-batch, which makes Spark run that
micro-batch again, as it does after a crash between kstore's commit and Spark's."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("pyspark")

import kstore  # noqa: E402

pytestmark = [
    pytest.mark.spark,
    pytest.mark.xdist_group("spark"),
    pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::DeprecationWarning", "ignore::UserWarning"),
]

SCHEMA = "id BIGINT, day STRING, qty DOUBLE"


def _source_file(directory: Path, name: str, ids: range) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"id": list(ids), "day": [f"d{i % 2}" for i in ids], "qty": [i / 2 for i in ids]}).to_parquet(
        directory / f"{name}.parquet")


def _sink_once(spark, src: Path, store: str, ck: Path, **options) -> None:
    """One ``availableNow`` run of the file stream ``src`` into kstore dataset ``sink``."""
    writer = (spark.readStream.schema(SCHEMA).parquet(str(src)).writeStream.format("kstore")
              .option("dataset_uuid", "sink").option("checkpointLocation", str(ck)))
    for k, v in options.items():
        writer = writer.option(k, v)
    writer.trigger(availableNow=True).start(store).awaitTermination()


def _data_files(store: str, uuid: str) -> set[str]:
    root = Path(store) / uuid
    return {str(p.relative_to(root)) for p in root.rglob("*.parquet")}


def test_stream_sink_commits_each_micro_batch_exactly_once(spark, tmp_path):
    src, ck, store = tmp_path / "src", tmp_path / "ck", str(tmp_path / "store")
    _source_file(src, "a", range(10))
    _sink_once(spark, src, store, ck, partition_on="day", secondary_indices="id")
    _source_file(src, "b", range(10, 25))
    _sink_once(spark, src, store, ck, partition_on="day", secondary_indices="id")
    got = kstore.read_dataset(store, "sink")
    assert sorted(got["id"]) == list(range(25))  # every row once
    assert set(got["day"]) == {"d0", "d1"} and kstore.load_metadata(store, "sink").partition_keys == ("day",)
    assert sorted(kstore.read_dataset(store, "sink", predicates=[[("id", "==", 17)]])["qty"]) == [8.5]
    versions = kstore.history(store, "sink")
    app = f"spark-stream:{ck}"
    assert [e.txn for e in versions] == [(app, 0), (app, 1)]
    before = _data_files(store, "sink")

    # a crash after kstore's commit of batch 1 and before Spark recorded it: Spark runs batch 1 again
    for name in ("1", ".1.crc"):
        (ck / "commits" / name).unlink(missing_ok=True)
    _sink_once(spark, src, store, ck, partition_on="day", secondary_indices="id")
    assert sorted(kstore.read_dataset(store, "sink")["id"]) == list(range(25))  # not twice
    assert len(kstore.history(store, "sink")) == 2  # no version for the repeat
    assert _data_files(store, "sink") == before  # the repeat's files were deleted

    # the same data under another id is another stream: it commits (the txn is what dedupes)
    _sink_once(spark, src, store, tmp_path / "ck2", txnAppId="second")
    assert len(kstore.read_dataset(store, "sink")) == 50


def test_stream_sink_complete_mode_replaces_the_dataset(spark, tmp_path):
    src, store = tmp_path / "src", str(tmp_path / "store")
    _source_file(src, "a", range(10))

    def run():
        (spark.readStream.schema(SCHEMA).parquet(str(src)).groupBy("day").count().writeStream.format("kstore")
         .outputMode("complete").option("dataset_uuid", "counts").option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(availableNow=True).start(store).awaitTermination())

    run()
    _source_file(src, "b", range(10, 13))
    run()
    got = kstore.read_dataset(store, "counts").sort_values("day")
    assert list(zip(got["day"], got["count"])) == [("d0", 7), ("d1", 6)]
    assert [e.operation for e in kstore.history(store, "counts")][-1] == "overwrite"


def test_stream_sink_needs_an_id_that_outlives_restarts(spark, tmp_path):
    src, store = tmp_path / "src", str(tmp_path / "store")
    _source_file(src, "a", range(3))
    spark.conf.set("spark.sql.streaming.checkpointLocation", str(tmp_path / "session-ck"))
    try:
        with pytest.raises(Exception, match="checkpointLocation"):
            (spark.readStream.schema(SCHEMA).parquet(str(src)).writeStream.format("kstore")
             .option("dataset_uuid", "sink").trigger(availableNow=True).start(store).awaitTermination())
    finally:
        spark.conf.unset("spark.sql.streaming.checkpointLocation")
    with pytest.raises(Exception, match="do not apply to a streaming write"):
        _sink_once(spark, src, store, tmp_path / "ck", replaceWhere="day = 'd0'")
    assert not (Path(store) / "sink").exists()  # nothing was written


def _read_stream(spark, store: str, uuid: str, ck: Path, **options) -> list[tuple]:
    """One ``availableNow`` run of a stream of dataset ``uuid``: (batch, id) of each row."""
    got: list[tuple] = []
    reader = spark.readStream.format("kstore").option("dataset_uuid", uuid)
    for k, v in options.items():
        reader = reader.option(k, v)
    (reader.load(store).writeStream.foreachBatch(lambda df, i: got.extend((i, r.id) for r in df.collect()))
     .option("checkpointLocation", str(ck)).trigger(availableNow=True).start().awaitTermination())
    return got


def test_stream_source_reads_the_dataset_then_each_append(spark, tmp_path):
    store, ck = str(tmp_path / "store"), tmp_path / "ck"
    kstore.store_dataset(store, "ev", pd.DataFrame({"id": [1, 2], "day": ["a", "b"]}), partition_on="day")
    kstore.update_dataset(store, "ev", pd.DataFrame({"id": [3], "day": ["a"]}))
    first = _read_stream(spark, store, "ev", ck)
    assert sorted(r[1] for r in first) == [1, 2, 3]  # the dataset as it was
    kstore.update_dataset(store, "ev", pd.DataFrame({"id": [4, 5], "day": ["b", "c"]}))
    assert kstore.compact(store, "ev").groups  # rewrites files, adds no row
    second = _read_stream(spark, store, "ev", ck)
    assert sorted(r[1] for r in second) == [4, 5]  # only the new rows, not the compacted ones again
    assert {r[0] for r in second}.isdisjoint({r[0] for r in first})
    assert _read_stream(spark, store, "ev", ck) == []  # nothing new

    kstore.delete_rows(store, "ev", [[("id", "==", 1)]])
    kstore.update_dataset(store, "ev", pd.DataFrame({"id": [6], "day": ["a"]}))
    with pytest.raises(Exception, match="skipChangeCommits"):
        _read_stream(spark, store, "ev", ck)
    # Delta's option: versions that changed rows are skipped, the stream goes on
    assert sorted(r[1] for r in _read_stream(spark, store, "ev", ck, skipChangeCommits="true")) == [6]


def test_stream_source_from_a_starting_version_into_a_kstore_sink(spark, tmp_path):
    store = str(tmp_path / "store")
    kstore.store_dataset(store, "ev", pd.DataFrame({"id": [1, 2], "qty": [1.0, 2.0]}))
    kstore.update_dataset(store, "ev", pd.DataFrame({"id": [3], "qty": [3.0]}))
    kstore.update_dataset(store, "ev", pd.DataFrame({"id": [4], "qty": [4.0]}))

    def copy():
        (spark.readStream.format("kstore").option("dataset_uuid", "ev").option("startingVersion", 1).load(store)
         .writeStream.format("kstore").option("dataset_uuid", "copy").option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(availableNow=True).start(store).awaitTermination())

    copy()
    assert sorted(kstore.read_dataset(store, "copy")["id"]) == [3, 4]
    kstore.update_dataset(store, "ev", pd.DataFrame({"id": [5], "qty": [5.0]}))
    copy()
    got = kstore.read_dataset(store, "copy").sort_values("id")
    assert list(zip(got["id"], got["qty"])) == [(3, 3.0), (4, 4.0), (5, 5.0)]
    with pytest.raises(Exception, match="add readChangeFeed=true"):
        spark.read.format("kstore").option("dataset_uuid", "ev").option("startingVersion", 1).load(store).collect()


# -- the sink's commit, driven without a session (what Spark calls, in order) -----------------

def _stream_writer(store: str, **options):
    from pyspark.sql import types as T

    from kstore.spark.datasource import KstoreDataSource

    schema = T.StructType([T.StructField("id", T.LongType()), T.StructField("day", T.StringType())])
    source = KstoreDataSource({"path": store, "dataset_uuid": "ev", "checkpointLocation": "/ck/ev", **options})
    return source.streamWriter(schema, overwrite=False)


def _batch(writer, ids):
    import pyarrow as pa

    return writer.write(iter([pa.record_batch({"id": ids, "day": [f"d{i % 2}" for i in ids]})]))


def test_stream_sink_refuses_a_batch_gc_may_have_deleted(tmp_path):
    """GC with retention 0 runs after a micro-batch's files were written and before its commit:
    it deletes them as orphans. The commit must not make a version that names missing files; it
    fails, and the restarted micro-batch (Spark runs it again) commits every row once."""
    from datetime import timedelta

    from kstore.errors import CommitConflictError, KstoreError

    store = str(tmp_path / "store")
    kstore.store_dataset(store, "ev", pd.DataFrame({"id": [0], "day": ["d0"]}), partition_on="day")
    writer = _stream_writer(store)
    message = _batch(writer, [1, 2, 3])
    kstore.garbage_collect(store, "ev", retention=timedelta(0), enforce_retention_duration=False)
    with pytest.raises(KstoreError) as caught:
        writer.commit([message], 0)
    assert isinstance(caught.value, CommitConflictError), caught.value
    assert sorted(kstore.read_dataset(store, "ev")["id"]) == [0]  # nothing committed, every file readable
    again = _stream_writer(store)  # Spark's retry of micro-batch 0 after the failure
    again.commit([_batch(again, [1, 2, 3])], 0)
    assert sorted(kstore.read_dataset(store, "ev")["id"]) == [0, 1, 2, 3]


def test_stream_sink_refuses_a_batch_after_the_dataset_was_recreated(tmp_path):
    """The dataset is deleted and created again with other partition columns while a stream
    runs: its next micro-batch (files written for the old partitioning) is refused, and its
    files are deleted; nothing of it reaches the new dataset."""
    from kstore.errors import CommitConflictError

    store = str(tmp_path / "store")
    kstore.store_dataset(store, "ev", pd.DataFrame({"id": [0], "day": ["d0"]}), partition_on="day")
    writer = _stream_writer(store)
    writer.commit([_batch(writer, [1, 2])], 0)
    message = _batch(writer, [3, 4])
    kstore.delete_dataset(store, "ev")
    kstore.store_dataset(store, "ev", pd.DataFrame({"id": [9], "day": ["x"]}))  # not partitioned
    before = _data_files(store, "ev")
    with pytest.raises(CommitConflictError, match="restart the stream"):
        writer.commit([message], 1)
    assert sorted(kstore.read_dataset(store, "ev")["id"]) == [9]
    assert _data_files(store, "ev") == before  # the micro-batch's files are gone



def test_stream_source_max_files_per_trigger(spark, tmp_path):
    """Delta's ``maxFilesPerTrigger``: each micro-batch takes whole versions while their added
    files stay within the limit (at least one version); every row still arrives once. The
    first micro-batch of a stream without ``startingVersion`` is the whole dataset."""
    store = str(tmp_path / "store")
    for v in range(5):  # 5 versions of 2 files each (two days)
        kstore.store_dataset(store, "ev", pd.DataFrame({"id": [2 * v, 2 * v + 1], "day": ["a", "b"]}),
                             partition_on="day", mode="error" if v == 0 else "append")
    by_batch = {}
    for r in _read_stream(spark, store, "ev", tmp_path / "ck3", startingVersion=0, maxFilesPerTrigger=3):
        by_batch.setdefault(r[0], []).append(r[1])
    assert sorted(sorted(ids) for ids in by_batch.values()) == [[2 * v, 2 * v + 1] for v in range(5)]  # a version each
    by_batch = {}
    for r in _read_stream(spark, store, "ev", tmp_path / "ck4", startingVersion=1, maxFilesPerTrigger=4):
        by_batch.setdefault(r[0], []).append(r[1])
    assert sorted(sorted(ids) for ids in by_batch.values()) == [[2, 3, 4, 5], [6, 7, 8, 9]]  # two versions each
    first = _read_stream(spark, store, "ev", tmp_path / "ck5", maxFilesPerTrigger=1)
    assert sorted(r[1] for r in first) == list(range(10)) and len({r[0] for r in first}) == 1
    kstore.update_dataset(store, "ev", pd.DataFrame({"id": [10, 11], "day": ["a", "b"]}))
    kstore.update_dataset(store, "ev", pd.DataFrame({"id": [12], "day": ["a"]}))
    later = _read_stream(spark, store, "ev", tmp_path / "ck5", maxFilesPerTrigger=1)
    assert sorted(r[1] for r in later) == [10, 11, 12] and len({r[0] for r in later}) == 2
    with pytest.raises(Exception, match="maxFilesPerTrigger must be a positive"):
        _read_stream(spark, store, "ev", tmp_path / "ck6", maxFilesPerTrigger=0)
