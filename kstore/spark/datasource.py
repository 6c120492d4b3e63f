"""The ``kstore`` Spark Python data source (``spark.read/df.write.format("kstore")``).

Register it once per session with :func:`kstore.spark.register` (which also turns on
``spark.sql.python.filterPushdown.enabled``)::

    df.write.format("kstore").option("dataset_uuid", "sales").option("partition_on", "day") \\
        .option("secondary_indices", "location").mode("overwrite").save("/data/store")
    spark.read.format("kstore").option("dataset_uuid", "sales").load("/data/store") \\
        .filter("location = 7")

Write options: ``dataset_uuid`` (required), ``partition_on`` and ``secondary_indices``
(comma-separated), ``write_mode`` (``error`` / ``append`` / ``overwrite`` /
``overwrite_partitions``; default: Spark's ``overwrite`` or ``append``, which creates a
missing dataset), ``schema_mode`` (``strict`` / ``merge``), ``table``, ``metadata``
(JSON object), ``metadata_format``, ``txn`` (``"app_id:version"``), ``chunk_bytes``, and the
file encoding (:class:`kstore.WriteOptions`): ``compression``, ``compression_level``,
``row_group_size``, ``data_page_size``, ``write_page_index`` (``true``/``false``),
``bloom_filters``, ``use_dictionary`` (``true``/``false`` or columns) and ``sort_by``
(comma-separated columns: rows sorted inside every file).

Read options: ``dataset_uuid`` (required), ``version`` or ``as_of`` (ISO timestamp;
naive = UTC) for time travel (Delta's ``versionAsOf`` / ``timestampAsOf`` are accepted
too), ``columns`` (comma-separated), ``predicates`` (JSON DNF, ``[[["location", "==",
7]]]``, ORs included; numbers are read exactly, so ``decimal(38, s)`` literals keep every
digit), ``table``, ``partition_bytes`` and ``min_partitions`` (planned files are grouped
into Spark input partitions as Spark groups files: at most ``partition_bytes``, default 128
MiB, and spread over at least ``min_partitions`` tasks when there are enough files;
default: the driver's CPU count). Any other option raises
:class:`~kstore.errors.InvalidArgumentError` listing the valid ones, on reads and writes: a
misspelt ``version`` must not silently read the latest data.

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
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from kstore.blocks.write import WrittenFile
from kstore.core.naming import DEFAULT_TABLE, MetadataFormat
from kstore.core.predicates import Term
from kstore.core.writer_options import WriteOptions
from kstore.errors import InvalidArgumentError
from kstore.spark.reader import (
    WRITE_OPTIONS,
    ReadSource,
    check_options,
    decode_store,
    filter_to_term,
    plan_partitions,
    read_partition,
    resolve_source,
    store_and_dataset,
)
from kstore.spark.writer import (
    DEFAULT_CHUNK_BYTES,
    WriteJob,
    WriteMode,
    cleanup_files,
    commit_files,
    prepare_write,
    write_batches,
)

__all__ = [
    "KstoreDataSource",
    "KstoreDataSourceNoPushdown",
    "KstoreReader",
    "KstoreWriter",
    "KstoreCommitMessage",
    "KstorePartition",
]


class KstorePartition(InputPartition):
    """One Spark input partition: the read plan restricted to a group of planned files."""

    def __init__(self, plan: Any) -> None:
        self.plan = plan

    def __repr__(self) -> str:
        return f"KstorePartition({len(self.plan.tasks)} file(s): {', '.join(self.plan.partitions[:3])}...)"


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

    def __init__(self, job: WriteJob) -> None:
        self.job = job

    def write(self, iterator: Iterator[pa.RecordBatch]) -> KstoreCommitMessage:
        files = [f for chunk in write_batches(self.job, iterator) for f in chunk]
        return KstoreCommitMessage(pickle.dumps(files, protocol=pickle.HIGHEST_PROTOCOL))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        files = [f for m in messages if isinstance(m, KstoreCommitMessage) for f in m.written()]
        commit_files(self.job, files)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        files = [f for m in messages if isinstance(m, KstoreCommitMessage) for f in m.written()]
        if files:
            cleanup_files(self.job.store(), files)


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
    """``format("kstore")``: read and write kstore datasets (see the module docstring)."""

    _reader_cls: type[_Reader] = KstoreReader

    @classmethod
    def name(cls) -> str:
        return "kstore"

    def _source(self) -> ReadSource:
        source = getattr(self, "_resolved", None)
        if source is None:
            source = resolve_source(self.options)
            self._resolved = source  # pickled with the data source: the version stays pinned
        return source

    def schema(self) -> StructType:
        return self._source().spark_schema

    def reader(self, schema: StructType) -> DataSourceReader:
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

    def writer(self, schema: StructType, overwrite: bool) -> KstoreWriter:
        opts = check_options(self.options, WRITE_OPTIONS, "write")
        path, uuid = store_and_dataset(opts, "save")
        mode = opts.get("write_mode") or ("overwrite" if overwrite else "append")
        metadata = None
        if opts.get("metadata"):
            try:
                metadata = json.loads(opts["metadata"])
            except ValueError as exc:
                raise InvalidArgumentError(f"option metadata must be a JSON object, got {opts['metadata']!r}") from exc
        job = prepare_write(
            decode_store(path),
            uuid,
            schema,
            mode=cast(WriteMode, mode),  # checked by prepare_write (a closed choice)
            partition_on=opts.get("partition_on"),
            secondary_indices=opts.get("secondary_indices"),
            metadata=metadata,
            metadata_format=cast(MetadataFormat | None, opts.get("metadata_format") or None),
            table_name=opts.get("table") or DEFAULT_TABLE,
            schema_mode=cast(Literal["strict", "merge"], opts.get("schema_mode") or "strict"),
            txn=_txn(opts.get("txn")),
            chunk_bytes=int(opts.get("chunk_bytes") or DEFAULT_CHUNK_BYTES),
            write_options=WriteOptions.from_text(opts),
        )
        return KstoreWriter(job)


class KstoreDataSourceNoPushdown(KstoreDataSource):
    """The same data source with a reader that does not implement ``pushFilters`` (Spark
    evaluates every ``.filter``; the ``predicates`` option still prunes)."""

    _reader_cls = KstoreReaderNoPushdown
