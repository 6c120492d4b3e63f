"""The ``kstore`` Spark Python data source (``spark.read/df.write.format("kstore")``).

With kstore installed (not as a setuptools strict editable install), every new
SparkSession has it: PySpark discovers ``pyspark_kstore.DefaultSource`` (this module's
:class:`KstoreDataSourceNoPushdown`, which needs no session setting).
:func:`kstore.spark.register` replaces it in one session with the pushdown source where
that is exact (and then turns on ``spark.sql.python.filterPushdown.enabled``)::

    df.write.format("kstore").option("dataset_uuid", "sales").option("partition_on", "day") \\
        .option("secondary_indices", "location").mode("overwrite").save("/data/store")
    spark.read.format("kstore").option("dataset_uuid", "sales").load("/data/store") \\
        .filter("location = 7")

Write options: ``dataset_uuid`` (required), ``partition_on`` and ``secondary_indices``
(comma-separated), ``write_mode`` (``error`` / ``append`` / ``overwrite`` /
``overwrite_partitions`` / ``ignore``; default: Spark's ``overwrite`` or ``append``, which
creates a missing dataset), ``partitionOverwriteMode`` (``dynamic`` with
``mode("overwrite")``: ``overwrite_partitions``), ``replaceWhere`` (with
``mode("overwrite")``: partition-column ``=`` / ``IN`` conditions joined by ``AND``; the
partitions they select are replaced, and rows outside them fail the write, as in Delta),
``schema_mode`` (``strict`` / ``merge`` / ``overwrite``; Delta's ``mergeSchema=true`` is
``merge``, ``overwriteSchema=true`` is ``overwrite``, with ``mode("overwrite")``),
``table``, ``metadata``
(JSON object), ``metadata_format``, ``txn`` (``"app_id:version"``), ``chunk_bytes``, and the
file encoding (:class:`kstore.WriteOptions`): ``compression``, ``compression_level``,
``row_group_size``, ``data_page_size``, ``write_page_index`` (``true``/``false``),
``bloom_filters``, ``use_dictionary`` (``auto``, the default, ``true``/``false`` or columns) and ``sort_by``
(comma-separated columns: rows sorted inside every file).

Spark 4.3 refuses, before kstore runs, what a Python data source cannot take: a bare
``.save()`` and ``mode("ignore")`` (``UNSUPPORTED_DATA_SOURCE_SAVE_MODE``: use
``mode("append")``, with ``option("write_mode", "error")`` or ``"ignore"`` for those
semantics) and ``.partitionBy`` ("partitioning ... do not match": use
``option("partition_on", ...)``). The writer sees only its options and the overwrite
flag, in a Python worker without a SparkSession: the session setting
``spark.sql.sources.partitionOverwriteMode`` does not reach it (pass the option).

Read options: ``dataset_uuid`` (required), ``version`` or ``as_of`` (ISO timestamp;
naive = UTC) for time travel (Delta's ``versionAsOf`` / ``timestampAsOf`` are accepted
too), ``columns`` (comma-separated), ``predicates`` (JSON DNF, ``[[["location", "==",
7]]]``, ORs included; numbers are read exactly, so ``decimal(38, s)`` literals keep every
digit), ``table``, ``partition_bytes`` and ``min_partitions`` (planned files are grouped
into Spark input partitions as Spark groups files: at most ``partition_bytes``, default 128
MiB, and spread over at least ``min_partitions`` tasks when there are enough files;
default: the driver's CPU count). Spark 4.3 does not tell a Python data source which columns a
query uses (its scan builder takes filters only), so ``.select`` after ``load()`` still
reads every column: pass ``columns`` (or a ``.schema(...)`` naming the columns) to read
fewer. ``readChangeFeed=true`` with ``startingVersion`` / ``startingTimestamp`` and optional
``endingVersion`` / ``endingTimestamp`` (Delta's change data feed) reads
:func:`kstore.read_changes` instead, one input partition per version
(:class:`ChangeFeedReader`). Any other option raises
:class:`~kstore.errors.InvalidArgumentError` listing the valid ones, on reads and writes: a
misspelt ``version`` must not silently read the latest data.

Streams (Delta's streaming source and sink): ``spark.readStream.format("kstore")`` reads
every row of the dataset, then each new version's added rows
(:class:`AppendStreamReader`; ``startingVersion`` / ``startingTimestamp`` start at a
version instead, ``skipChangeCommits=true`` skips versions that changed rows), or with
``readChangeFeed=true`` the change feed (:class:`ChangeFeedStreamReader`);
``maxFilesPerTrigger`` bounds each micro-batch (whole versions).
``df.writeStream.format("kstore")`` commits each micro-batch once
(:class:`KstoreStreamWriter`): the write options apply, plus ``checkpointLocation`` /
``txnAppId`` (the transaction's app id).

The path is a store URL (``/dir``, ``file://``, ``s3://...``) or
:func:`kstore.spark.store_option` of any other store. The version is pinned when Spark
resolves the schema: a DataFrame keeps reading the version it was created on.

Rows are exact whatever Spark reuses. The ``predicates`` option belongs to the DataFrame
(every scan of it has it), so kstore's planner prunes by it: partition values, secondary
indices, per-file statistics, then exact row filtering. Filters added with ``.filter``
are different: Spark 4.3 keeps the read plan that filter pushdown produces on the
*relation*, which every scan of the DataFrame shares, a union or self-join of it (both
sides pushed, one plan read twice) and every later query that pushes no filter. There,
kstore does not implement ``pushFilters`` (:func:`kstore.spark.register` checks the Spark
version): Spark evaluates ``.filter`` after reading every file of the version. On a Spark
whose scans keep their own read plan, ``.filter`` conditions Spark pushes (``=``, ``<=>``,
``<``, ``<=``, ``>``, ``>=``, ``IN``, ``IS [NOT] NULL`` and their negations on top-level
columns) prune too; kstore reports a filter as handled only when it evaluates it exactly
(not on float columns, whose NaN ordering differs, nor with a decimal literal PySpark may
have rounded to 28 digits), so Spark re-applies the rest. To prune on Spark 4.3, pass
``predicates`` (:func:`kstore.spark.read_dataset` takes them as a list).
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeVar, cast

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from kstore.blocks.changes import appends_only
from kstore.blocks.job import SchemaMode, WriteMode
from kstore.blocks.write import WrittenFile
from kstore.core.naming import DEFAULT_TABLE, MetadataFormat
from kstore.core.predicates import Term
from kstore.core.writer_options import WriteOptions
from kstore.errors import CommitConflictError, InvalidArgumentError
from kstore.spark.reader import (
    WRITE_OPTIONS,
    AppendSource,
    ChangeSource,
    ReadSource,
    check_options,
    decode_store,
    filter_to_term,
    limited_end,
    max_files_per_trigger,
    newest_change_version,
    option_flag,
    plan_partitions,
    read_change_partition,
    read_partition,
    resolve_appends,
    resolve_changes,
    resolve_source,
    snapshot_source,
    store_and_dataset,
    stream_changes,
    wants_changes,
)
from kstore.spark.writer import (
    DEFAULT_CHUNK_BYTES,
    WriteJob,
    check_in_scope,
    cleanup_files,
    commit_files,
    parse_replace_where,
    prepare_write,
    spark_store_factory,
    write_batches,
)

_T = TypeVar("_T")

__all__ = [
    "KstoreDataSource",
    "KstoreDataSourceNoPushdown",
    "KstoreReader",
    "KstoreWriter",
    "KstoreCommitMessage",
    "KstorePartition",
    "ChangeFeedReader",
    "ChangePartition",
    "ChangeFeedStreamReader",
    "AppendStreamReader",
    "KstoreStreamWriter",
    "stream_app_id",
]


class KstorePartition(InputPartition):
    """One Spark input partition: the read plan restricted to a group of planned files."""

    def __init__(self, plan: Any) -> None:
        self.plan = plan

    def __repr__(self) -> str:
        return f"KstorePartition({len(self.plan.tasks)} file(s): {', '.join(self.plan.labels[:3])}...)"


class ChangePartition(InputPartition):
    """One Spark input partition of a change-feed read: one version's log entry."""

    def __init__(self, entry: Any) -> None:
        self.entry = entry

    def __repr__(self) -> str:
        return f"ChangePartition(version {self.entry.version}: {self.entry.operation})"


class ChangeFeedReader(DataSourceReader):
    """The reader of ``readChangeFeed=true``: one input partition per version with row
    changes, computed in the workers (:func:`kstore.blocks.changes.version_changes`)."""

    def __init__(self, source: ChangeSource) -> None:
        self.source = source

    def partitions(self) -> Sequence[InputPartition]:
        return [ChangePartition(e) for e in self.source.changes.entries]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, ChangePartition):  # Spark's placeholder for "no versions"
            return iter(())
        return read_change_partition(self.source, partition.entry)


class StreamChangePartition(InputPartition):
    """One Spark input partition of a micro-batch of a streaming change-feed read: one
    version, with the range it belongs to."""

    def __init__(self, source: ChangeSource, entry: Any) -> None:
        self.source, self.entry = source, entry

    def __repr__(self) -> str:
        return f"StreamChangePartition(version {self.entry.version}: {self.entry.operation})"


class ChangeFeedStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("kstore").option("readChangeFeed", "true")``: Delta's
    streaming change data feed. The offset is the last version delivered (``{"version": v}``);
    each micro-batch reads the versions committed since, one input partition per version
    with row changes (:func:`kstore.blocks.changes.version_changes` in the workers), in the
    schema the stream started with (a schema change since is an error asking for a restart).
    A version garbage collection expired before the stream read it is a
    :class:`~kstore.errors.VersionNotFoundError`, as for a batch read."""

    def __init__(self, source: ChangeSource, max_files: int | None = None) -> None:
        self.source, self.max_files = source, max_files
        self.until: int | None = None  # Trigger.AvailableNow: the newest version when the query started

    def prepareForTriggerAvailableNow(self) -> None:
        self.until = newest_change_version(self.source)

    def initialOffset(self) -> dict[str, Any]:
        return {"version": self.source.changes.start - 1}

    def getDefaultReadLimit(self) -> Any:
        return _read_limit(self.max_files)

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, Any]:
        done = int(start["version"]) if start else self.source.changes.start - 1
        return {"version": _next_end(self.source, done, limit, self.until, changes=True)}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        first, last = int(start["version"]) + 1, int(end["version"])
        if first > last:
            return []
        batch = stream_changes(self.source, first, last)
        return [StreamChangePartition(batch, e) for e in batch.changes.entries]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, StreamChangePartition):
            return iter(())
        return read_change_partition(partition.source, partition.entry)

    def commit(self, end: dict[str, Any]) -> None:
        return None


class SnapshotPartition(InputPartition):
    """One Spark input partition of a stream's first micro-batch when it has no
    ``startingVersion``: a group of the files of the version it starts from."""

    def __init__(self, source: ReadSource, plan: Any) -> None:
        self.source, self.plan = source, plan

    def __repr__(self) -> str:
        return f"SnapshotPartition(version {self.source.version}: {len(self.plan.tasks)} files)"


class AppendStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("kstore")``: Delta's streaming source, the rows each new
    version added. The offset is the last version delivered (``{"version": v}``); the
    initial offset of a stream without ``startingVersion`` is ``{"version": -1,
    "snapshot": true}``, and its first micro-batch reads every row of the version it ends
    at (the files grouped as a batch read groups them). Each later micro-batch reads the
    versions committed since that only added rows, one input partition per version
    (:func:`kstore.blocks.changes.appends_only`): compaction and index builds add no rows;
    a version that changed or removed rows stops the stream with an
    :class:`~kstore.errors.InvalidArgumentError` unless ``skipChangeCommits=true``."""

    def __init__(self, source: AppendSource, max_files: int | None = None) -> None:
        self.source, self.max_files = source, max_files
        self.until: int | None = None  # Trigger.AvailableNow: the newest version when the query started

    def prepareForTriggerAvailableNow(self) -> None:
        self.until = newest_change_version(self.source.changes)

    def initialOffset(self) -> dict[str, Any]:
        if self.source.snapshot:
            return {"version": -1, "snapshot": True}
        return {"version": self.source.changes.changes.start - 1}

    def getDefaultReadLimit(self) -> Any:
        return _read_limit(self.max_files)

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, Any]:
        if start is None or start.get("snapshot"):  # the first micro-batch: the whole dataset
            limit = None
        done = int(start["version"]) if start else self.source.changes.changes.start - 1
        return {"version": _next_end(self.source.changes, done, limit, self.until, changes=False)}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        last = int(end["version"])
        if start.get("snapshot"):
            snap = snapshot_source(self.source, last)
            _, parts = plan_partitions(snap)
            return [SnapshotPartition(snap, p) for p in parts]
        first = int(start["version"]) + 1
        if first > last:
            return []
        batch = stream_changes(self.source.changes, first, last)
        batch = replace(batch, changes=appends_only(batch.changes, skip_change_commits=self.source.skip_change_commits))
        return [StreamChangePartition(batch, e) for e in batch.changes.entries]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, SnapshotPartition):
            return read_partition(partition.source, partition.plan)
        if isinstance(partition, StreamChangePartition):
            return read_change_partition(partition.source, partition.entry)
        return iter(())

    def commit(self, end: dict[str, Any]) -> None:
        return None


def _read_limit(max_files: int | None) -> Any:
    """Spark's read limit of a stream: ``maxFilesPerTrigger`` files, else everything."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxFiles

    return ReadMaxFiles(max_files) if max_files else ReadAllAvailable()


def _next_end(source: ChangeSource, done: int, limit: Any, until: int | None, *, changes: bool) -> int:
    """The end version of a stream's next micro-batch after version ``done``: the newest
    (no later than ``until``, the newest when an ``availableNow`` query started), or fewer
    versions under a ``ReadMaxFiles`` limit (:func:`kstore.spark.reader.limited_end`)."""
    from pyspark.sql.streaming.datasource import ReadMaxFiles

    newest = newest_change_version(source) if until is None else until
    newest = max(newest, done)
    if isinstance(limit, ReadMaxFiles) and newest > done:
        return limited_end(source.store(), source.changes.dataset_uuid, done, newest, int(limit.max_files),
                           changes=changes)
    return newest


class _MicroBatchReader(DataSourceReader):
    """A batch read of one micro-batch of a stream reader (the JVM stream source's
    ``getBatch``): its partitions for the offsets ``start`` .. ``end``."""

    def __init__(self, stream: DataSourceStreamReader, start: dict[str, Any], end: dict[str, Any],
                 schema: StructType) -> None:
        self.stream, self.start, self.end, self.schema = stream, start, end, schema

    def partitions(self) -> Sequence[InputPartition]:
        return self.stream.partitions(self.start, self.end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return cast(Iterator[pa.RecordBatch], self.stream.read(partition))


class _Reader(DataSourceReader):
    def __init__(self, source: ReadSource) -> None:
        self.source = source
        self.pushed: list[Term] = []

    def partitions(self) -> Sequence[InputPartition]:
        _, parts = plan_partitions(self.source, self.pushed)
        return [KstorePartition(p) for p in parts]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, KstorePartition):  # Spark's placeholder for "no files"
            return iter(())
        return read_partition(self.source, partition.plan)


class KstoreReaderNoPushdown(_Reader):
    """The reader without ``pushFilters`` (for sessions with Python filter pushdown off)."""


class KstoreReader(_Reader):
    """Reader with filter pushdown into kstore's planner, for Spark versions whose scans
    keep their own read plan (see the module docstring)."""

    def pushFilters(self, filters: list[Any]) -> Iterator[Any]:
        for f in filters:
            term, exact = filter_to_term(f, self.source.schema)
            if term is not None:
                self.pushed.append(term)
            if term is None or not exact:
                yield f


@dataclass
class KstoreCommitMessage(WriterCommitMessage):
    """What one write task reports: its written files (pickled, small)."""

    files: bytes = field(default=b"")

    def written(self) -> list[WrittenFile]:
        return pickle.loads(self.files) if self.files else []


class KstoreWriter(DataSourceArrowWriter):
    """Executors write files (``write``); the driver commits once (``commit``) or deletes
    what the successful tasks wrote (``abort``)."""

    def __init__(self, job: WriteJob, replace_where: tuple[str, tuple[dict[str, Any], ...]] | None = None) -> None:
        self.job = job
        self.replace_where = replace_where  # (condition, its delete scopes): the new rows must match it

    def write(self, iterator: Iterator[pa.RecordBatch]) -> KstoreCommitMessage:
        files = [f for chunk in write_batches(self.job, iterator) for f in chunk]
        return KstoreCommitMessage(pickle.dumps(files, protocol=pickle.HIGHEST_PROTOCOL))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        files = [f for m in messages if isinstance(m, KstoreCommitMessage) for f in m.written()]
        if self.replace_where is not None:
            try:
                check_in_scope(self.job, files, self.replace_where[1], self.replace_where[0])
            except BaseException:
                cleanup_files(self.job.store(), files)
                raise
        commit_files(self.job, files)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        files = [f for m in messages if isinstance(m, KstoreCommitMessage) for f in m.written()]
        if files:
            cleanup_files(self.job.store(), files)


class KstoreStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("kstore")``: Delta's streaming sink. Executors write each
    micro-batch's files (``write``); the driver makes one commit per micro-batch
    (``commit``) with the application transaction ``(app_id, batch id)``, so a micro-batch
    that Spark runs again after a failure or a restart commits nothing the second time
    (exactly once; the files of the repeat are deleted). ``app_id`` is the ``txnAppId``
    option or the query's checkpoint location (both outlive a restart).

    Each commit is prepared afresh on the driver (the dataset may have been created by
    the first micro-batch, or changed by other writers since), with the head the writer
    loaded before any of the batch's files was written (the orphan check of FORMAT.md C2).
    A dataset whose partition columns or table changed since the stream started refuses
    the micro-batch with a :class:`~kstore.errors.CommitConflictError` (restart the
    stream). ``overwrite`` (Spark's complete output mode) replaces the dataset with each
    micro-batch's rows."""

    def __init__(self, job: WriteJob, schema: StructType, app_id: str, overwrite: bool,
                 settings: dict[str, Any]) -> None:
        self.job, self.schema, self.app_id, self.overwrite, self.settings = job, schema, app_id, overwrite, settings

    def write(self, iterator: Iterator[pa.RecordBatch]) -> KstoreCommitMessage:
        files = [f for chunk in write_batches(self.job, iterator) for f in chunk]
        return KstoreCommitMessage(pickle.dumps(files, protocol=pickle.HIGHEST_PROTOCOL))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        files = [f for m in messages if isinstance(m, KstoreCommitMessage) for f in m.written()]
        if not files and not self.overwrite:
            return None  # no rows: nothing to add (an empty append would only record the batch)
        try:
            job = self.batch_job(batchId)
        except BaseException:
            cleanup_files(self.job.store(), files)
            raise
        commit_files(job, files)
        return None

    def batch_job(self, batch_id: int) -> WriteJob:
        """The write job of micro-batch ``batch_id``: prepared on the dataset as it is now,
        with the transaction ``(app_id, batch_id)``."""
        core = self.job.core
        fresh = prepare_write(core.store, core.dataset_uuid, self.schema,
                              mode="overwrite" if self.overwrite else "append", txn=(self.app_id, batch_id),
                              **self.settings)
        if fresh.core.already_committed:
            return fresh
        was, now = core.layout, fresh.core.layout
        if (was.partition_on, was.table_name) != (now.partition_on, now.table_name):
            raise CommitConflictError(
                f"dataset {core.dataset_uuid!r}: its partition columns or table changed since this stream started "
                f"({list(was.partition_on)} in table {was.table_name!r}, now {list(now.partition_on)} in {now.table_name!r}); "
                f"micro-batch {batch_id} was not committed: restart the stream")
        return replace(fresh, core=replace(fresh.core, head=core.head))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        files = [f for m in messages if isinstance(m, KstoreCommitMessage) for f in m.written()]
        if files:
            cleanup_files(self.job.store(), files)


def stream_app_id(opts: Mapping[str, str]) -> str:
    """The application id of a streaming write's transactions: the ``txnAppId`` option
    (Delta's name), else the query's ``checkpointLocation`` option, a local one as an
    absolute path (a restart that spells the same directory otherwise, as Spark accepts,
    keeps the id).

    >>> stream_app_id({"txnAppId": "orders-sink"}), stream_app_id({"checkpointLocation": "/ck/orders"})
    ('orders-sink', 'spark-stream:/ck/orders')
    >>> stream_app_id({"checkpointLocation": "file:///ck/orders/"}), stream_app_id({"checkpointLocation": "s3a://b/ck"})
    ('spark-stream:/ck/orders', 'spark-stream:s3a://b/ck')
    """
    import os
    from urllib.parse import unquote, urlparse

    app = (opts.get("txnAppId") or "").strip()
    if app:
        return app
    location = (opts.get("checkpointLocation") or "").strip()
    if location:
        parsed = urlparse(location)
        if parsed.scheme in ("", "file"):
            location = os.path.abspath(unquote(parsed.path) if parsed.scheme else location)
        return f"spark-stream:{location}"
    raise InvalidArgumentError(
        "a streaming write to kstore commits each micro-batch exactly once under an id that outlives restarts: "
        "give .option('checkpointLocation', ...) on writeStream (a session-wide checkpoint directory is not passed "
        "to Python data sources) or .option('txnAppId', ...)")


def _txn(text: str | None) -> tuple[str, int] | None:
    if not text:
        return None
    app, sep, version = text.rpartition(":")
    if not sep or not app:
        raise InvalidArgumentError(f"option txn must be 'app_id:version', got {text!r}")
    try:
        return app, int(version)
    except ValueError as exc:
        raise InvalidArgumentError(f"option txn must be 'app_id:version', got {text!r}") from exc


class KstoreDataSource(DataSource):
    """``format("kstore")``: read and write kstore datasets (see the module docstring).

    Spark creates it from the options of ``spark.read`` / ``df.write`` and calls its
    methods on the driver (:meth:`schema`, :meth:`reader`, :meth:`writer`) and in Python
    workers (the reader's ``partitions`` / ``read``, the writer's ``write``); user code
    does not create it, but registers it (:func:`kstore.spark.register`) and passes options.

    Attributes
    ----------
    options : dict[str, str]
        The data source options Spark creates it with (its only constructor argument):
        ``path`` and ``dataset_uuid`` are required; the read and write options are listed
        in the module docstring. Option names are matched without regard to case.

    Examples
    --------
    What Spark does for ``spark.read.format("kstore").option("dataset_uuid", "sales").load(path)``,
    here without a SparkSession:

    >>> import tempfile, pandas as pd, kstore
    >>> from kstore.spark.datasource import KstoreDataSource
    >>> tmp = tempfile.TemporaryDirectory()
    >>> _ = kstore.store_dataset(tmp.name, "sales", pd.DataFrame({"day": ["a", "b"], "qty": [1, 2]}),
    ...                          partition_on="day")
    >>> source = KstoreDataSource({"path": tmp.name, "dataset_uuid": "sales"})
    >>> source.schema().simpleString()
    'struct<day:string,qty:bigint>'
    >>> reader = source.reader(source.schema())
    >>> [sum(b.num_rows for b in reader.read(p)) for p in reader.partitions()]
    [1, 1]
    >>> tmp.cleanup()

    With a SparkSession ``spark`` (tested in ``tests/drivers/test_spark.py``)::

        import kstore.spark as ks
        ks.register(spark)
        spark.read.format("kstore").option("dataset_uuid", "sales").load("/data/store").filter("location = 7")
    """

    _reader_cls: type[_Reader] = KstoreReader

    @classmethod
    def name(cls) -> str:
        """The format name Spark knows the data source by: ``"kstore"``.

        Returns
        -------
        str
            ``"kstore"`` (``spark.read.format("kstore")``, ``df.write.format("kstore")``).

        Examples
        --------
        >>> from kstore.spark.datasource import KstoreDataSource
        >>> KstoreDataSource.name()
        'kstore'
        """
        return "kstore"

    def _changes(self) -> ChangeSource | None:
        """The change-feed read the options ask for (``readChangeFeed=true``), else None."""
        if not wants_changes(self.options):
            return None
        return self._once("_resolved_changes", lambda: resolve_changes(self.options))

    def _stream_batch(self) -> _MicroBatchReader | None:
        """One micro-batch of the JVM source's stream (kstore-spark.jar's
        ``KstoreStreamSource`` passes the option ``__stream_batch``: ``{"start": offset or
        null, "end": offset}``): read here, as a batch, by the stream reader the other options
        ask for (:class:`AppendStreamReader`, or :class:`ChangeFeedStreamReader` with
        ``readChangeFeed=true``). A ``start`` offset becomes the range's first version, so a
        long-running stream does not re-read, or need retained, the versions before it."""
        raw = next((v for k, v in self.options.items() if k.lower() == "__stream_batch"), None)
        if raw is None:
            return None
        return self._once("_resolved_batch", lambda: self._micro_batch(raw))

    def _micro_batch(self, raw: str) -> _MicroBatchReader:
        span = json.loads(raw)
        start, end = span.get("start"), span["end"]
        opts = {k: v for k, v in self.options.items() if k.lower() != "__stream_batch"}
        if start is not None:
            opts = {k: v for k, v in opts.items() if k.lower() not in ("startingversion", "startingtimestamp")}
            opts["startingVersion"] = str(int(start["version"]) + 1)
        stream: DataSourceStreamReader
        if wants_changes(opts, stream=True):
            stream = ChangeFeedStreamReader(resolve_changes(opts))  # (the JVM source applies the limit)
            schema = stream.source.spark_schema
        else:
            appends = resolve_appends(opts)
            stream, schema = AppendStreamReader(appends), appends.changes.spark_schema
        return _MicroBatchReader(stream, start if start is not None else stream.initialOffset(), end, schema)

    def _once(self, attr: str, resolve: Callable[[], _T]) -> _T:
        """``resolve()`` the first time, then the value kept in ``attr``: it is pickled with
        the data source, so the version (or range) Spark resolved stays pinned in workers."""
        value = getattr(self, attr, None)
        if value is None:
            value = resolve()
            setattr(self, attr, value)
        return cast(_T, value)

    def _appends(self, stream: bool = False) -> AppendSource | None:
        """A stream of the dataset's rows (:func:`kstore.spark.reader.resolve_appends`):
        ``stream`` (``spark.readStream``), or options only such a stream takes
        (``startingVersion`` without ``readChangeFeed``, ``skipChangeCommits``); else None."""
        if wants_changes(self.options, stream=True):
            return None
        stream_only = {"startingversion", "startingtimestamp", "skipchangecommits"}
        if not stream and not any(k.lower() in stream_only for k in self.options):
            return None
        return self._once("_resolved_appends", lambda: resolve_appends(self.options))

    def _source(self) -> ReadSource:
        return self._once("_resolved", lambda: resolve_source(self.options))

    def schema(self) -> StructType:
        """The Spark schema of the dataset version the options select (the version is
        pinned here: every later scan of the DataFrame reads it).

        Returns
        -------
        pyspark.sql.types.StructType
            Every column nullable; the Spark types recorded by a Spark write are kept
            (:func:`kstore.spark.types.spark_schema`).

        Raises
        ------
        kstore.errors.InvalidArgumentError
            An unknown option, or ``path`` / ``dataset_uuid`` missing.
        kstore.errors.DatasetNotFoundError
            No such dataset in the store.

        Examples
        --------
        >>> import tempfile, pandas as pd, kstore
        >>> from kstore.spark.datasource import KstoreDataSource
        >>> tmp = tempfile.TemporaryDirectory()
        >>> _ = kstore.store_dataset(tmp.name, "sales", pd.DataFrame({"day": ["a"], "qty": [1]}))
        >>> KstoreDataSource({"path": tmp.name, "dataset_uuid": "sales"}).schema().simpleString()
        'struct<day:string,qty:bigint>'
        >>> KstoreDataSource({"path": tmp.name, "dataset_uuid": "sales", "verison": "0"}).schema()
        Traceback (most recent call last):
        ...
        kstore.errors.InvalidArgumentError: the kstore data source has no read option 'verison' (did you mean 'version'?); ...
        >>> tmp.cleanup()
        """
        batch = self._stream_batch()
        if batch is not None:
            return batch.schema
        appends = self._appends()
        if appends is not None:
            return appends.changes.spark_schema
        changes = self._changes()
        if changes is not None:
            return changes.spark_schema
        return self._source().spark_schema

    def reader(self, schema: StructType) -> DataSourceReader:
        """The reader of one scan: it plans the files (``partitions``, on the driver) and
        reads one group of planned files per Spark input partition (``read``, in workers).

        Parameters
        ----------
        schema
            The schema Spark reads with: :meth:`schema`, or the user's ``.schema(...)``,
            which may name a subset of the dataset's columns (only those are read). A
            column the dataset lacks raises :class:`~kstore.errors.InvalidArgumentError`.

        Returns
        -------
        pyspark.sql.datasource.DataSourceReader
            A :class:`KstoreReader` (it implements ``pushFilters``) or, for
            :class:`KstoreDataSourceNoPushdown`, a reader that does not (Spark evaluates
            every ``.filter``).

        Examples
        --------
        >>> import tempfile, pandas as pd, kstore
        >>> from pyspark.sql import types as T
        >>> from kstore.spark.datasource import KstoreDataSource
        >>> tmp = tempfile.TemporaryDirectory()
        >>> _ = kstore.store_dataset(tmp.name, "sales", pd.DataFrame({"day": ["a", "b"], "qty": [1, 2]}),
        ...                          partition_on="day")
        >>> reader = KstoreDataSource({"path": tmp.name, "dataset_uuid": "sales"}).reader(
        ...     T.StructType([T.StructField("qty", T.LongType())]))
        >>> parts = reader.partitions()
        >>> len(parts), sorted(b.to_pydict()["qty"][0] for p in parts for b in reader.read(p))
        (2, [1, 2])
        >>> tmp.cleanup()
        """
        batch = self._stream_batch()
        if batch is not None:
            return batch
        changes = self._changes()
        if changes is not None:
            if schema is not None and schema.fieldNames() != changes.spark_schema.fieldNames():
                raise InvalidArgumentError(f"dataset {changes.changes.dataset_uuid!r}: a change-feed read has the "
                                           "schema Spark asked for first; select columns after load()")
            return ChangeFeedReader(changes)
        source = self._source()
        if schema is not None and [f.name for f in schema.fields] != source.spark_schema.fieldNames():
            missing = [f.name for f in schema.fields if f.name not in source.schema.names]
            if missing:
                raise InvalidArgumentError(
                    f"dataset {source.dataset_uuid!r}: the given schema names columns {missing} the dataset lacks"
                )
        if schema is not None:
            from dataclasses import replace

            source = replace(source, spark_schema=schema)
        return self._reader_cls(source)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """``spark.readStream``, as Delta streams a table: the rows each new version adds
        (:class:`AppendStreamReader`: from ``startingVersion`` / ``startingTimestamp``, or
        every row of the newest version first; ``skipChangeCommits=true`` skips versions
        that changed rows), or the change feed with ``readChangeFeed=true``
        (:class:`ChangeFeedStreamReader`, ``startingVersion`` or ``startingTimestamp``
        required).

        Parameters
        ----------
        schema
            The schema Spark streams with: the change feed's (:meth:`schema`); a narrower
            one is refused (select columns after ``load()``).

        Returns
        -------
        pyspark.sql.datasource.DataSourceStreamReader
            An :class:`AppendStreamReader`, or with ``readChangeFeed=true`` a
            :class:`ChangeFeedStreamReader` over the range from the starting version on.

        Raises
        ------
        kstore.errors.InvalidArgumentError
            An ending option is given (a stream has no end), or a read option that does not
            apply to a stream (``version``, ``columns``, ``predicates``).

        Examples
        --------
        >>> import tempfile, pandas as pd, kstore
        >>> from kstore.spark.datasource import KstoreDataSource
        >>> tmp = tempfile.TemporaryDirectory()
        >>> _ = kstore.store_dataset(tmp.name, "ev", pd.DataFrame({"id": [1, 2]}))
        >>> source = KstoreDataSource({"path": tmp.name, "dataset_uuid": "ev", "readChangeFeed": "true",
        ...                            "startingVersion": "0"})
        >>> stream = source.streamReader(source.schema())
        >>> start = stream.initialOffset()
        >>> end = stream.latestOffset(start)
        >>> start, end, [sorted(b.to_pydict()["id"]) for p in stream.partitions(start, end) for b in stream.read(p)]
        ({'version': -1}, {'version': 0}, [[1, 2]])
        >>> _ = kstore.update_dataset(tmp.name, "ev", pd.DataFrame({"id": [3]}))
        >>> [b.to_pydict()["id"] for p in stream.partitions(end, stream.latestOffset(end)) for b in stream.read(p)]
        [[3]]
        >>> tmp.cleanup()
        """
        if any(k.lower() in ("endingversion", "endingtimestamp") for k in self.options):
            raise InvalidArgumentError("a stream has no end: endingVersion / endingTimestamp apply to batch reads "
                                       "(spark.read)")
        appends = self._appends(stream=True)
        if appends is not None:
            if schema is not None and schema.fieldNames() != appends.changes.spark_schema.fieldNames():
                raise InvalidArgumentError(f"dataset {appends.changes.changes.dataset_uuid!r}: a stream has the "
                                           "dataset's columns; select columns after load()")
            return AppendStreamReader(appends, max_files_per_trigger(self.options))
        if any(k.lower() in ("endingversion", "endingtimestamp") for k in self.options):
            raise InvalidArgumentError("a change-feed stream has no end: endingVersion / endingTimestamp apply to "
                                       "batch reads (spark.read)")
        source = self._changes()
        assert source is not None
        if schema is not None and schema.fieldNames() != source.spark_schema.fieldNames():
            raise InvalidArgumentError(f"dataset {source.changes.dataset_uuid!r}: a change-feed stream has the "
                                       "schema of the dataset's change feed; select columns after load()")
        return ChangeFeedStreamReader(source, max_files_per_trigger(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        """The writer of one ``df.write.format("kstore")...save(path)``: every check that
        can run before a file is written runs here, on the driver.

        Parameters
        ----------
        schema
            The DataFrame's Spark schema (types must map to kstore, see
            :mod:`kstore.spark.types`).
        overwrite
            Spark's save mode is ``overwrite`` (else ``append``); the ``write_mode``,
            ``partitionOverwriteMode`` and ``replaceWhere`` options refine it (see the
            module docstring).

        Returns
        -------
        pyspark.sql.datasource.DataSourceArrowWriter
            A :class:`KstoreWriter`: its ``write`` runs in each task on Arrow batches and
            returns a :class:`KstoreCommitMessage`; ``commit`` makes one commit on the driver,
            ``abort`` deletes what the tasks wrote. With ``write_mode=ignore`` on an
            existing dataset, a writer that writes nothing.

        Examples
        --------
        What Spark does for ``df.write.format("kstore").option("dataset_uuid", "sales")
        .option("partition_on", "day").mode("append").save(path)``, with one task:

        >>> import tempfile, pyarrow as pa, kstore
        >>> from pyspark.sql import types as T
        >>> from kstore.spark.datasource import KstoreDataSource
        >>> tmp = tempfile.TemporaryDirectory()
        >>> schema = T.StructType([T.StructField("day", T.StringType()), T.StructField("qty", T.LongType())])
        >>> source = KstoreDataSource({"path": tmp.name, "dataset_uuid": "sales", "partition_on": "day"})
        >>> writer = source.writer(schema, overwrite=False)
        >>> message = writer.write(iter([pa.record_batch({"day": ["a", "b"], "qty": [1, 2]})]))
        >>> writer.commit([message])
        >>> kstore.read_table(tmp.name, "sales").sort_by("qty").to_pydict()
        {'day': ['a', 'b'], 'qty': [1, 2]}
        >>> tmp.cleanup()
        """
        opts = check_options(self.options, WRITE_OPTIONS, "write")
        path, uuid = store_and_dataset(opts, "save")
        store = decode_store(path)
        settings = _write_settings(opts)
        mode, scopes = _write_mode(opts, overwrite, store, uuid)
        if mode == "ignore":
            return _IgnoreWriter()
        job = prepare_write(store, uuid, schema, mode=mode, delete_scope=scopes, txn=_txn(opts.get("txn")), **settings)
        condition = opts.get("replaceWhere")
        if condition:
            scope_list = parse_replace_where(condition)
            check_in_scope(job, [], scope_list, condition)  # partition columns, literal types: before writing
            return KstoreWriter(job, (condition, tuple(scope_list)))
        return KstoreWriter(job)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:
        """``df.writeStream.format("kstore")``: each micro-batch is one commit, exactly once
        (:class:`KstoreStreamWriter`, Delta's streaming sink).

        Parameters
        ----------
        schema
            The stream's Spark schema (types must map to kstore, see :mod:`kstore.spark.types`).
        overwrite
            Spark's complete output mode: each micro-batch replaces the dataset (else each
            appends; a missing dataset is created by the first).

        Returns
        -------
        pyspark.sql.datasource.DataSourceStreamArrowWriter
            A :class:`KstoreStreamWriter`.

        Raises
        ------
        kstore.errors.InvalidArgumentError
            No ``checkpointLocation`` / ``txnAppId`` option (see :func:`stream_app_id`), or an
            option that does not apply to a stream (``txn``, ``write_mode``,
            ``replaceWhere``, ``partitionOverwriteMode``).

        Examples
        --------
        What Spark does for two micro-batches of ``df.writeStream.format("kstore")
        .option("dataset_uuid", "ev").option("checkpointLocation", ck).start(path)``, the
        second run twice (a restart):

        >>> import tempfile, pyarrow as pa, kstore
        >>> from pyspark.sql import types as T
        >>> from kstore.spark.datasource import KstoreDataSource
        >>> tmp = tempfile.TemporaryDirectory()
        >>> schema = T.StructType([T.StructField("id", T.LongType())])
        >>> source = KstoreDataSource({"path": tmp.name, "dataset_uuid": "ev", "checkpointLocation": "/ck/ev"})
        >>> for batch_id, ids in [(0, [1, 2]), (1, [3]), (1, [3])]:
        ...     writer = source.streamWriter(schema, overwrite=False)
        ...     writer.commit([writer.write(iter([pa.record_batch({"id": ids})]))], batch_id)
        >>> sorted(kstore.read_table(tmp.name, "ev")["id"].to_pylist())
        [1, 2, 3]
        >>> tmp.cleanup()
        """
        opts = check_options(self.options, WRITE_OPTIONS + STREAM_WRITE_OPTIONS, "write")
        given = [o for o in _NOT_STREAMED if o in opts]
        if given:
            raise InvalidArgumentError(f"options {given} do not apply to a streaming write: each micro-batch appends "
                                       "(Spark's append output mode) or replaces the dataset (complete mode), once, "
                                       "under the transaction (txnAppId or checkpointLocation, batch id)")
        app = stream_app_id(opts)
        path, uuid = store_and_dataset(opts, "start")
        settings = _write_settings(opts)
        job = prepare_write(decode_store(path), uuid, schema, mode="overwrite" if overwrite else "append", **settings)
        return KstoreStreamWriter(job, schema, app, overwrite, settings)


def _write_settings(opts: dict[str, str]) -> dict[str, Any]:
    """The keywords of :func:`kstore.spark.writer.prepare_write` that the write options give
    (the same for a batch and a streaming write)."""
    metadata = None
    if opts.get("metadata"):
        try:
            metadata = json.loads(opts["metadata"])
        except ValueError as exc:
            raise InvalidArgumentError(f"option metadata must be a JSON object, got {opts['metadata']!r}") from exc
    return {
        "partition_on": opts.get("partition_on"),
        "secondary_indices": opts.get("secondary_indices"),
        "metadata": metadata,
        "metadata_format": cast(MetadataFormat | None, opts.get("metadata_format") or None),
        "table_name": opts.get("table") or DEFAULT_TABLE,
        "schema_mode": _schema_mode(opts),
        "chunk_bytes": int(opts.get("chunk_bytes") or DEFAULT_CHUNK_BYTES),
        "write_options": WriteOptions.from_text(opts),
    }


#: the options of a streaming write (``df.writeStream``) besides the write options
STREAM_WRITE_OPTIONS = ("checkpointLocation", "queryName", "txnAppId")
#: write options that do not apply to a stream (each micro-batch appends, or replaces all)
_NOT_STREAMED = ("txn", "write_mode", "replaceWhere", "partitionOverwriteMode")

_WRITE_MODES = ("error", "append", "overwrite", "overwrite_partitions", "ignore")


def _schema_mode(opts: dict[str, str]) -> SchemaMode:
    """``schema_mode``, or Delta's ``mergeSchema`` (``true`` -> ``merge``) or
    ``overwriteSchema`` (``true`` -> ``overwrite``); what is given must agree."""
    mode = (opts.get("schema_mode") or "").strip().lower() or None
    given = "schema_mode"
    for option, when_true in (("mergeSchema", "merge"), ("overwriteSchema", "overwrite")):
        flag = option_flag(opts, option)
        if flag is None:
            continue
        raw = "true" if flag else "false"
        if not flag:
            if mode == when_true:
                raise InvalidArgumentError(f"options {option}={raw!r} and {given}={mode!r} disagree; pass one of them")
            continue
        if mode is not None and mode != when_true:
            raise InvalidArgumentError(f"options {option}={raw!r} and {given}={mode!r} disagree; pass one of them")
        mode, given = when_true, option
    return cast(SchemaMode, mode or "strict")  # checked by prepare_write (a closed choice)


def _write_mode(opts: dict[str, str], overwrite: bool, store: Any, uuid: str,
                ) -> tuple[WriteMode | Literal["ignore"], list[dict[str, Any]] | None]:
    """The kstore write mode (and delete scope) of a data source write.

    ``write_mode`` wins when given (``ignore``: nothing is written when the dataset
    exists). Otherwise Spark's mode decides: ``append`` (creates a missing dataset) or
    ``overwrite``; with ``overwrite``, ``partitionOverwriteMode=dynamic`` replaces only the
    partitions the data holds and ``replaceWhere`` those the condition selects.
    """
    from kstore.blocks.load import load_latest
    from kstore.io.store import open_store

    explicit = (opts.get("write_mode") or "").strip().lower() or None
    dynamic_opt = opts.get("partitionOverwriteMode")
    dynamic = None if dynamic_opt is None else dynamic_opt.strip().lower()
    if dynamic not in (None, "static", "dynamic"):
        raise InvalidArgumentError(f"option partitionOverwriteMode must be 'static' or 'dynamic', got {dynamic_opt!r}")
    condition = opts.get("replaceWhere")
    if explicit is not None:
        if explicit not in _WRITE_MODES:
            raise InvalidArgumentError(f"option write_mode must be one of {', '.join(_WRITE_MODES)}, got {explicit!r}")
        if condition or dynamic == "dynamic":
            given = "replaceWhere" if condition else "partitionOverwriteMode=dynamic"
            raise InvalidArgumentError(f"options write_mode and {given} both choose the write mode; pass one of them")
        if explicit == "ignore":
            meta, _ = load_latest(open_store(spark_store_factory(store)), uuid, missing_store_ok=True)
            return ("ignore", None) if meta is not None else ("error", None)
        return cast(WriteMode, explicit), None
    if condition:
        if not overwrite:
            raise InvalidArgumentError("option replaceWhere replaces data: use it with .mode('overwrite')")
        if dynamic == "dynamic":
            raise InvalidArgumentError("pass option replaceWhere or partitionOverwriteMode=dynamic, not both")
        scopes = parse_replace_where(condition)
        meta, _ = load_latest(open_store(spark_store_factory(store)), uuid, missing_store_ok=True)
        if meta is None:
            return "error", None  # a new dataset: the rows must still match (checked on commit)
        bad = sorted({c for scope in scopes for c in scope if c not in meta.partition_keys})
        if bad:
            raise InvalidArgumentError(
                f"option replaceWhere {condition!r}: {bad} are not partition columns of dataset {uuid!r} "
                f"(partition columns: {list(meta.partition_keys)})"
            )
        return "append", scopes
    if not overwrite:
        return "append", None
    if dynamic == "dynamic":
        if opts.get("partition_on"):
            return "overwrite_partitions", None
        meta, _ = load_latest(open_store(spark_store_factory(store)), uuid, missing_store_ok=True)
        if meta is not None and meta.partition_keys:
            return "overwrite_partitions", None
        # as Spark's dynamic overwrite of an unpartitioned table: the whole dataset is replaced
    return "overwrite", None


class _IgnoreWriter(DataSourceArrowWriter):
    """``write_mode=ignore`` on an existing dataset: the rows are dropped, nothing is committed."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        for _ in iterator:
            pass
        return KstoreCommitMessage()

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        return None

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        return None


class KstoreDataSourceNoPushdown(KstoreDataSource):
    """The same data source with a reader that does not implement ``pushFilters`` (Spark
    evaluates every ``.filter``; the ``predicates`` option still prunes).

    It is the source PySpark discovers in every session (``pyspark_kstore.DefaultSource``)
    and the one :func:`kstore.spark.register` registers where filter pushdown would not be
    exact (Spark 4.3, or ``filter_pushdown=False``).

    Attributes
    ----------
    options : dict[str, str]
        The data source options (its only constructor argument), as for
        :class:`KstoreDataSource`.

    Examples
    --------
    >>> import tempfile, pandas as pd, kstore
    >>> from kstore.spark.datasource import KstoreDataSourceNoPushdown
    >>> tmp = tempfile.TemporaryDirectory()
    >>> _ = kstore.store_dataset(tmp.name, "sales", pd.DataFrame({"qty": [1, 2]}))
    >>> source = KstoreDataSourceNoPushdown({"path": tmp.name, "dataset_uuid": "sales"})
    >>> source.name(), type(source.reader(source.schema())).__name__
    ('kstore', 'KstoreReaderNoPushdown')
    >>> tmp.cleanup()
    """

    _reader_cls = KstoreReaderNoPushdown


#: The Python data source's name in a session that carries kstore's JVM source (which owns
#: ``"kstore"``: Spark looks up JVM sources first and refuses a Python source of the same name).
PYTHON_SOURCE_NAME = "kstore_python"


class _PythonSourceName:
    @classmethod
    def name(cls) -> str:
        """``"kstore_python"``: the name that does not clash with the JVM ``kstore`` source."""
        return PYTHON_SOURCE_NAME


class KstorePythonDataSource(_PythonSourceName, KstoreDataSource):
    """:class:`KstoreDataSource` as ``format("kstore_python")``, for sessions with kstore's JVM
    source (:func:`kstore.spark.configure`); :func:`kstore.spark.register` registers it there.

    It serves stores only kstore's Python layer opens (``memory://`` is refused either way,
    minimalkv URLs, store objects and factories) and :func:`kstore.spark.read_dataset`.

    Attributes
    ----------
    options : dict[str, str]
        The data source options, as for :class:`KstoreDataSource`.

    Examples
    --------
    >>> from kstore.spark.datasource import KstorePythonDataSource
    >>> KstorePythonDataSource.name()
    'kstore_python'
    """


class KstorePythonDataSourceNoPushdown(_PythonSourceName, KstoreDataSourceNoPushdown):
    """:class:`KstoreDataSourceNoPushdown` named ``kstore_python``: what
    :func:`kstore.spark.register` registers next to the JVM source where filter pushdown
    would not be exact (see :class:`KstorePythonDataSource`; ``options`` as there).

    >>> from kstore.spark.datasource import KstorePythonDataSourceNoPushdown as Source
    >>> Source.name(), Source({"path": "/data/store/sales"}).options["path"]
    ('kstore_python', '/data/store/sales')
    """
