"""Spark writes: executors write Parquet files, the driver makes one commit.

The shape is prepare -> write -> commit (lance's fragments, dask's ``ToParquetBarrier``):

1. :func:`prepare_write` (driver) checks everything that can be checked before a file is
   written (types, partition and index columns, the mode against the current version,
   the schema against the dataset's) and returns a picklable :class:`WriteJob`;
2. :func:`write_batches` (executors) turns one Spark partition's Arrow batches into
   bounded chunks and calls :func:`kstore.blocks.write.write_partitions` on each; only
   :class:`~kstore.blocks.write.WrittenFile` records (keys, row counts, statistics,
   distinct values of indexed columns) go back to the driver;
3. :func:`commit_files` (driver) builds the :class:`~kstore.core.operations.Operation` and
   calls :func:`kstore.blocks.commit.commit` once.

A task attempt that fails deletes what it wrote (best effort); a killed, failed or
speculative attempt's files are never reported, so they are orphans that
:func:`kstore.garbage_collect` removes once they are older than its retention. A job
that fails commits nothing.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import pickle
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa
import pyarrow.types as pat

from kstore.blocks import load
from kstore.blocks.compact import (
    DEFAULT_TARGET_FILE_SIZE,
    CompactionGroup,
    CompactionPlan,
    CompactionRequest,
    finish_compaction,
    plan_compaction,
    rewrite_group,
    worker_plan,
)
from kstore.blocks.job import SchemaMode, WriteMode, WriteRequest, check_schema, delete_files, finish_write
from kstore.blocks.job import WriteJob as CoreJob
from kstore.blocks.job import prepare_write as prepare_core
from kstore.blocks.scope import resolve_scope
from kstore.blocks.write import ENGINE_TASK_THREADS, WrittenFile, delete_by_token, write_partitions
from kstore.core import naming
from kstore.core.arguments import DataKind, store_uuid_data
from kstore.core.commit_options import CommitOptions
from kstore.core.metadata import DatasetMetadata
from kstore.core.naming import MetadataFormat
from kstore.core.predicates import Predicates
from kstore.core.writer_options import WriteOptions
from kstore.errors import (
    DatasetNotFoundError,
    InvalidArgumentError,
)
from kstore.io.store import Store, StoreLike, open_store, store_factory
from kstore.spark.types import SPARK_SCHEMA_KEY, arrow_schema, dataset_type, schema_hint, to_storage

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

__all__ = [
    "WriteJob",
    "prepare_write",
    "write_batches",
    "commit_files",
    "cleanup_files",
    "store_dataset",
    "update_dataset",
    "spark_store_factory",
    "DEFAULT_CHUNK_BYTES",
    "compact",
    "parse_replace_where",
    "check_in_scope",
]

Shuffle = Literal["none", "repartition", "sort"]

#: Arrow bytes an executor buffers before writing a chunk (one file per partition value).
DEFAULT_CHUNK_BYTES = 256 * 1024 * 1024
_PAYLOAD_SCHEMA = "payload binary"


@dataclass(frozen=True, slots=True)
class WriteJob:
    """A write resolved on the driver (picklable: executors and the commit worker get it).

    ``core`` is the shared :class:`kstore.blocks.job.WriteJob` (partition columns, indices,
    base version, scope, transaction) that :func:`kstore.blocks.job.finish_write` commits;
    the rest is what Spark executors need to turn Arrow batches into files.
    """

    core: CoreJob
    store: Callable[[], Store]
    file_schema: pa.Schema
    schema: pa.Schema
    chunk_bytes: int = DEFAULT_CHUNK_BYTES


def _as_tuple(value: str | Sequence[str] | None, what: str) -> tuple[str, ...]:
    """Column names; a string may list several, comma-separated (data source options)."""
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(v.strip() for v in value.split(",") if v.strip())
    if not all(isinstance(v, str) for v in value):
        raise InvalidArgumentError(f"{what} must be a column name or a list of column names, got {value!r}")
    return tuple(value)


def spark_store_factory(store: StoreLike) -> Callable[[], Store]:
    """A picklable store factory executors can use; memory stores are refused.

    URLs (and stores that have one) travel as URLs; other stores and factories travel
    pickled with cloudpickle (checked here, on the driver). Spark runs Python code in
    separate worker processes, even in local mode, so a ``memory://`` store would be a
    different, empty store on every executor.
    """
    from kstore.io.memory import MemoryStore
    from kstore.io.s3 import S3Store

    if isinstance(store, str) and not store.startswith("memory://"):
        return store_factory(store)
    opened = MemoryStore() if isinstance(store, str) else open_store(store)
    if isinstance(opened, MemoryStore):
        raise InvalidArgumentError(
            "Spark executors run in separate Python processes, so a memory store cannot be shared "
            "with them; use a local directory, file://, s3:// or another shared store"
        )
    if isinstance(opened, S3Store):  # pickles as its URL plus any explicit credentials
        return store_factory(opened)
    url = getattr(opened, "url", None)
    if isinstance(url, str) and url:
        return store_factory(url)
    from pyspark import cloudpickle

    return store_factory(store if callable(store) and not isinstance(store, Store) else opened,
                         dumps=cloudpickle.dumps, workers="Spark executors")


def _tz_like_base(file_schema: pa.Schema, base_schema: pa.Schema) -> pa.Schema:
    """Write timestamp columns in the zone the dataset already uses (same instants)."""
    fields = []
    for f in file_schema:
        t = f.type
        i = base_schema.get_field_index(f.name)
        if i >= 0 and pat.is_timestamp(t) and t.tz is not None:
            bt = base_schema.field(i).type
            if pat.is_timestamp(bt) and bt.tz is not None and bt.tz != t.tz:
                t = pa.timestamp(t.unit, bt.tz)
        fields.append(pa.field(f.name, t))
    return pa.schema(fields)


def _merge_hint(base: DatasetMetadata | None, base_schema: pa.Schema | None, spark_schema: StructType) -> str:
    """The Spark schema to record for the dataset after this write.

    A column this write creates gets this write's Spark type. A column the dataset already
    has keeps its recorded type if this write has the same one, and otherwise becomes the
    dataset's type (:func:`~kstore.spark.types.dataset_type`: ``long``, ``double``, ...):
    a ``float`` append onto ``double`` values must not make Spark read them as ``float``,
    an ``int`` append onto ``long`` values must not make 2**40 unreadable.
    """
    from pyspark.sql.types import StructField, StructType

    old = schema_hint(base.metadata) if base is not None else None
    recorded = {f.name: f for f in old.fields} if old is not None else {}
    written = {f.name: f for f in spark_schema.fields}
    names = (list(recorded) if old is not None else list(base_schema.names) if base_schema is not None else [])
    fields = []
    for name in list(dict.fromkeys(names + list(written))):
        new, prev = written.get(name), recorded.get(name)
        existing = base_schema is not None and name in base_schema.names
        if new is None:
            if prev is not None:
                fields.append(prev)
            continue
        if not existing or (prev is not None and prev.dataType == new.dataType):
            fields.append(new)
        elif base_schema is not None:  # existing: the base schema has the column
            fields.append(StructField(name, dataset_type(base_schema.field(name).type, name), True))
    return json.dumps(StructType(fields).jsonValue(), separators=(",", ":"))


def prepare_write(
    store: StoreLike,
    dataset_uuid: str,
    spark_schema: StructType,
    *,
    mode: WriteMode = "error",
    require_existing: bool = False,
    partition_on: str | Sequence[str] | None = None,
    secondary_indices: str | Sequence[str] | None = None,
    delete_scope: Sequence[Mapping[str, Any]] | None = None,
    metadata: Mapping[str, Any] | None = None,
    metadata_format: MetadataFormat | None = None,
    table_name: str = naming.DEFAULT_TABLE,
    schema_mode: SchemaMode = "strict",
    txn: tuple[str, int] | None = None,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    write_options: WriteOptions | Mapping[str, Any] | None = None,
    sort_by: str | Sequence[str] | None = None,
    commit_options: CommitOptions | Mapping[str, Any] | None = None,
) -> WriteJob:
    """Check a write against the store and the Spark schema; nothing is written.

    ``mode``: ``"error"`` creates (the dataset must not exist), ``"overwrite"`` replaces
    (or creates), ``"append"`` adds files (creating the dataset if missing, unless
    ``require_existing``), ``"overwrite_partitions"`` replaces every partition value the
    new data touches (kartothek's update with ``delete_scope``; Spark's dynamic
    partition overwrite).
    """
    factory = spark_store_factory(store)
    if not isinstance(chunk_bytes, int) or chunk_bytes <= 0:
        raise InvalidArgumentError(f"chunk_bytes must be a positive int, got {chunk_bytes!r}")
    if isinstance(txn, list):  # the data source passes decoded JSON
        txn = tuple(txn)  # type: ignore[unreachable]
    if metadata is not None and not isinstance(metadata, Mapping):
        raise InvalidArgumentError(f"metadata must be a dict, got {type(metadata).__name__}")
    file_schema = arrow_schema(spark_schema, dataset=dataset_uuid)  # unsupported types fail here
    core = prepare_core(factory(), dataset_uuid, WriteRequest.of(
        dataset_uuid, mode, partition_on=_as_tuple(partition_on, "partition_on"),
        secondary_indices=_as_tuple(secondary_indices, "secondary_indices"), table_name=table_name,
        schema_mode=schema_mode, delete_scope=delete_scope, metadata=metadata, metadata_format=metadata_format,
        txn=txn, must_exist=require_existing, write_options=write_options,
        sort_by=_as_tuple(sort_by, "sort_by") if sort_by is not None else None, commit_options=commit_options))
    if core.base_schema is not None and not core.creates:
        file_schema = _tz_like_base(file_schema, core.base_schema)
    schema = check_schema(core, file_schema.empty_table())
    if delete_scope and not core.creates:
        resolve_scope(core.existing, core.base_schema, list(delete_scope))  # validate the scope now
    user_meta = dict(core.metadata or {})
    user_meta[SPARK_SCHEMA_KEY] = (_merge_hint(None, None, spark_schema) if core.creates
                                   else _merge_hint(core.base, core.base_schema, spark_schema))
    return WriteJob(core=replace(core, metadata=user_meta), store=factory, file_schema=file_schema,
                    schema=schema, chunk_bytes=chunk_bytes)


_RW_TOKEN = re.compile(r"""\s*(?:
    (?P<str>'(?:[^']|'')*'|"(?:[^"]|"")*")
  | (?P<num>[-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)
  | (?P<ident>`(?:[^`]|``)+`|[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>==|=|,|\(|\))
  | (?P<other>\S+)
)""", re.VERBOSE)


def _rw_error(text: str, why: str) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"option replaceWhere {text!r}: {why}; kstore supports equality and IN conditions on partition "
        "columns joined by AND, such as \"day = '2024-01-01' AND region IN ('eu', 'us')\" (for other "
        "conditions, read, filter and overwrite the affected partitions with "
        "option('partitionOverwriteMode', 'dynamic'))"
    )


def parse_replace_where(text: str) -> list[dict[str, Any]]:
    """The ``replaceWhere`` option (Delta's) as kstore delete scopes (one dict per combination).

    Only ``column = literal`` and ``column IN (literal, ...)`` joined by ``AND`` are
    accepted (partition columns; checked against the dataset later); literals are quoted
    strings, numbers, ``true`` / ``false``, ``DATE'...'`` and ``TIMESTAMP'...'``. Anything
    else raises :class:`~kstore.errors.InvalidArgumentError`.

    >>> parse_replace_where("day = '2024-01-01' and loc in (1, 2)")
    [{'day': '2024-01-01', 'loc': 1}, {'day': '2024-01-01', 'loc': 2}]
    >>> parse_replace_where("qty > 3")
    Traceback (most recent call last):
    ...
    kstore.errors.InvalidArgumentError: option replaceWhere 'qty > 3': unexpected '>' (at character 4); kstore supports equality and IN conditions on partition columns joined by AND, such as "day = '2024-01-01' AND region IN ('eu', 'us')" (for other conditions, read, filter and overwrite the affected partitions with option('partitionOverwriteMode', 'dynamic'))
    """
    tokens: list[tuple[str, str, int]] = []
    pos = 0
    while pos < len(text):
        m = _RW_TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            break
        kind = m.lastgroup or "other"
        tokens.append((kind, m.group(kind), m.start(kind)))
        pos = m.end()
    if not tokens:
        raise _rw_error(text, "no condition")
    i = 0

    def peek() -> tuple[str, str, int]:
        return tokens[i] if i < len(tokens) else ("end", "", len(text))

    def take(kind: str, value: str | None = None) -> str:
        nonlocal i
        k, v, at = peek()
        if k != kind or (value is not None and v.lower() != value):
            raise _rw_error(text, f"unexpected {v!r} (at character {at})" if k != "end" else "unexpected end")
        i += 1
        return v

    def literal() -> Any:
        k, v, at = peek()
        if k == "num":
            take("num")
            return int(v) if re.fullmatch(r"[-+]?\d+", v) else Decimal(v)
        if k == "str":
            take("str")
            return v[1:-1].replace(v[0] * 2, v[0])
        if k == "ident" and v.lower() in ("true", "false"):
            take("ident")
            return v.lower() == "true"
        if k == "ident" and v.lower() in ("date", "timestamp"):
            take("ident")
            raw = take("str")
            s = raw[1:-1]
            if v.lower() == "date":
                return s
            try:
                return dt.datetime.fromisoformat(s.strip().replace("Z", "+00:00"))
            except ValueError as exc:
                raise _rw_error(text, f"bad timestamp {s!r}") from exc
        raise _rw_error(text, f"expected a literal, got {v!r} (at character {at})" if k != "end" else "unexpected end")

    conditions: dict[str, list[Any]] = {}
    while True:
        raw = take("ident")
        column = raw[1:-1].replace("``", "`") if raw.startswith("`") else raw
        if column.lower() in ("and", "or", "not", "in"):
            raise _rw_error(text, f"expected a column, got {raw!r}")
        k, v, at = peek()
        if k == "op" and v in ("=", "=="):
            take("op")
            values = [literal()]
        elif k == "ident" and v.lower() == "in":
            take("ident")
            take("op", "(")
            values = [literal()]
            while peek()[:2] == ("op", ","):
                take("op")
                values.append(literal())
            take("op", ")")
        else:
            raise _rw_error(text, f"unexpected {v!r} (at character {at})" if k != "end" else "unexpected end")
        if column in conditions:
            raise _rw_error(text, f"column {column!r} appears twice")
        conditions[column] = list(dict.fromkeys(values))
        if peek()[0] == "end":
            break
        take("ident", "and")
    names = list(conditions)
    return [dict(zip(names, combo)) for combo in itertools.product(*(conditions[c] for c in names))]


def check_in_scope(job: WriteJob, files: Sequence[WrittenFile], scopes: Sequence[Mapping[str, Any]],
                   condition: str) -> None:
    """Raise :class:`~kstore.errors.InvalidArgumentError` when a written file holds a partition
    outside ``scopes`` (``replaceWhere``: the new rows must match the condition, as in Delta)."""
    from kstore.core.types import coerce_literal, decode_partition_value

    keys = job.core.partition_on
    missing = [c for scope in scopes for c in scope if c not in keys]
    if missing:
        raise InvalidArgumentError(
            f"option replaceWhere {condition!r}: {sorted(set(missing))} are not partition columns of dataset "
            f"{job.core.dataset_uuid!r} (partition columns: {list(keys)})"
        )
    typed = [{c: coerce_literal(v, job.schema.field(c).type, c, job.core.dataset_uuid) for c, v in scope.items()}
             for scope in scopes]
    for f in files:
        values, _ = naming.parse_label(f.label, keys)
        row = {c: decode_partition_value(values[i], job.schema.field(c).type, c) for i, c in enumerate(keys)}
        if not any(all(row[c] == v for c, v in scope.items()) for scope in typed):
            shown = ", ".join(f"{c}={row[c]!r}" for c in keys)
            raise InvalidArgumentError(
                f"option replaceWhere {condition!r}: the written data has rows outside the condition "
                f"(partition {shown}); nothing was committed. Filter the DataFrame to the condition first"
            )


def _chunks(batches: Iterable[pa.RecordBatch], target: pa.Schema, chunk_bytes: int) -> Iterator[pa.Table]:
    buf: list[pa.RecordBatch] = []
    size = 0
    for batch in batches:
        if batch.num_rows == 0:
            continue
        buf.append(batch)
        size += batch.nbytes
        if size >= chunk_bytes:
            yield to_storage(buf, target)
            buf, size = [], 0
    if buf:
        yield to_storage(buf, target)


def write_batches(job: WriteJob, batches: Iterable[pa.RecordBatch]) -> Iterator[list[WrittenFile]]:
    """Executor side: write one Spark partition's batches; yield the files of each chunk.

    Memory is bounded by ``job.chunk_bytes`` (plus Parquet encoding buffers). If anything
    fails (or the consumer stops early), every file this call wrote is deleted before the
    error propagates, so a failed task attempt leaves nothing behind when it can help it.
    """
    if job.core.already_committed:
        for _ in batches:
            pass
        return
    store = job.store()
    written: list[WrittenFile] = []
    try:
        for table in _chunks(batches, job.file_schema, job.chunk_bytes):
            files = write_partitions(store, job.core.dataset_uuid, table, job.core.layout, max_workers=ENGINE_TASK_THREADS)
            written.extend(files)
            yield files
    except BaseException:
        cleanup_files(store, written)
        raise


def cleanup_files(store: Store, files: Iterable[WrittenFile]) -> None:
    """Delete written files, best effort (GC removes what is left)."""
    delete_files(store, list(files))


def commit_files(job: WriteJob, files: Sequence[WrittenFile]) -> DatasetMetadata:
    """Driver side: the one commit of everything the successful task attempts wrote
    (:func:`kstore.blocks.job.finish_write`); on error the files are deleted."""
    schema = job.schema if (files or job.core.creates) else None
    return finish_write(job.core, files, schema)


class _MapWriter:
    """The ``mapInArrow`` function: one payload row (pickled WrittenFiles) per chunk."""

    def __init__(self, job: WriteJob) -> None:
        self.job = job

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for files in write_batches(self.job, batches):
            payload = pa.array([pickle.dumps(files, protocol=pickle.HIGHEST_PROTOCOL)], pa.binary())
            yield pa.RecordBatch.from_arrays([payload], names=["payload"])


def _shuffled(df: DataFrame, job: WriteJob, shuffle: Shuffle | None) -> DataFrame:
    if shuffle is None:
        shuffle = "none"
    if shuffle not in ("none", "repartition", "sort"):
        raise InvalidArgumentError(f"shuffle must be 'none', 'repartition' or 'sort', got {shuffle!r}")
    if not job.core.partition_on or shuffle == "none":
        return df
    if shuffle == "repartition":
        return df.repartition(*job.core.partition_on)
    return df.sortWithinPartitions(*job.core.partition_on)


def _run(df: DataFrame | None, job: WriteJob, shuffle: Shuffle | None) -> DatasetMetadata:
    files: list[WrittenFile] = []
    if df is not None and not job.core.already_committed:
        mapped = _shuffled(df, job, shuffle).mapInArrow(_MapWriter(job), _PAYLOAD_SCHEMA)
        for row in mapped.collect():  # metadata only: one small row per written chunk
            files.extend(pickle.loads(row[0]))
    return commit_files(job, files)


def _arguments(function: str, store: Any, dataset_uuid: Any, data: Any,
               optional: bool = False) -> tuple[StoreLike, str, DataFrame | None]:
    from pyspark.sql import DataFrame

    kind = DataKind("a Spark DataFrame", lambda d: isinstance(d, DataFrame),
                    lambda d: " (convert it with spark.createDataFrame)" if _is_local_frame(d) else "")
    return store_uuid_data(f"kstore.spark.{function}", store, dataset_uuid, data, kind, optional=optional,
                           stacklevel=4)


def _is_local_frame(data: Any) -> bool:
    return type(data).__module__.split(".")[0] in ("pandas", "pyarrow")


def store_dataset(
    store: StoreLike | DataFrame,
    dataset_uuid: Any,
    data: Any,
    *,
    partition_on: str | Sequence[str] | None = None,
    secondary_indices: str | Sequence[str] | None = None,
    mode: WriteMode = "error",
    metadata: Mapping[str, Any] | None = None,
    metadata_format: MetadataFormat | None = None,
    table_name: str = naming.DEFAULT_TABLE,
    schema_mode: SchemaMode = "strict",
    shuffle: Shuffle | None = None,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    txn: tuple[str, int] | None = None,
    write_options: WriteOptions | Mapping[str, Any] | None = None,
    sort_by: str | Sequence[str] | None = None,
    commit_options: CommitOptions | Mapping[str, Any] | None = None,
) -> DatasetMetadata:
    """Write a Spark DataFrame as a kstore dataset: executors write, the driver commits once.

    Executors receive Arrow batches (``mapInArrow``; no data reaches the driver and
    nothing goes through pandas), write one Parquet file per partition value and chunk,
    and send back file metadata; the driver builds the indices and commits one version.

    Parameters
    ----------
    store
        A URL, path or store that executors can reach (not ``memory://``).
    dataset_uuid
        The dataset's name.
    data
        The Spark DataFrame. Column types must map to kstore (see
        :mod:`kstore.spark.types`); an unsupported type raises before any file is written.
        The order is ``(store, dataset_uuid, data)`` on every engine, as in
        :func:`kstore.store_dataset`; the old ``(df, store, dataset_uuid)`` still works with
        a :class:`FutureWarning`.
    partition_on, secondary_indices
        Partition columns (hive-style ``col=value`` directories) and columns that get an
        inverted index: a column name or a list of them, as in :func:`kstore.store_dataset`.
    mode
        ``"error"`` (the dataset must not exist), ``"overwrite"`` (replace it),
        ``"append"`` (add files; creates the dataset when missing) or
        ``"overwrite_partitions"`` (replace the partition values the data touches).
    metadata, metadata_format, table_name
        As in :func:`kstore.store_dataset`: user metadata (JSON-compatible; the Spark
        schema is recorded next to it), the main metadata file's format (default
        ``"json"``) and the table's name inside the dataset.
    schema_mode
        ``"strict"``, ``"merge"`` (new columns are added, missing ones are null, columns
        widen) or, with ``mode="overwrite"``, ``"overwrite"``, as in :func:`kstore.store_dataset`.
    shuffle
        How rows are grouped before the write when ``partition_on`` is given: ``"none"``
        (default; each task writes one file per partition value it holds, per
        ``chunk_bytes`` of data), ``"repartition"`` (``df.repartition(*partition_on)``:
        one file per partition value, one shuffle) or ``"sort"``
        (``sortWithinPartitions``: fewer files per chunk without a shuffle).
    chunk_bytes
        Arrow bytes an executor buffers per chunk (bounds its memory).
    txn
        ``(app_id, version)``: a retry of an already committed write commits nothing and
        returns the committed metadata (idempotent jobs).
    write_options, sort_by, commit_options
        As in :func:`kstore.store_dataset`: how files are encoded, the columns rows are
        sorted by inside each file (each executor sorts its own files), and the
        ``CommitOptions`` of the driver's one commit (``info``, ``max_attempts``, ...).

    Returns
    -------
    DatasetMetadata
        The committed version.

    Examples
    --------
    With a SparkSession and a DataFrame ``df`` (tested in ``tests/drivers/test_spark.py``)::

        import kstore.spark as ks
        ks.store_dataset("/data/store", "sales", df, partition_on=["day"], secondary_indices=["location"])
    """
    store, dataset_uuid, df = _arguments("store_dataset", store, dataset_uuid, data)
    assert df is not None
    job = prepare_write(store, dataset_uuid, df.schema, mode=mode, partition_on=partition_on,
                        secondary_indices=secondary_indices, metadata=metadata,
                        metadata_format=metadata_format, table_name=table_name, schema_mode=schema_mode,
                        txn=txn, chunk_bytes=chunk_bytes, write_options=write_options, sort_by=sort_by,
                        commit_options=commit_options)
    return _run(df, job, shuffle)


def update_dataset(
    store: StoreLike | DataFrame | None,
    dataset_uuid: Any,
    data: Any = None,
    *,
    delete_scope: Sequence[Mapping[str, Any]] | None = None,
    partition_on: str | Sequence[str] | None = None,
    secondary_indices: str | Sequence[str] | None = None,
    metadata: Mapping[str, Any] | None = None,
    mode: Literal["append", "overwrite_partitions"] = "append",
    schema_mode: SchemaMode = "strict",
    shuffle: Shuffle | None = None,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    txn: tuple[str, int] | None = None,
    write_options: WriteOptions | Mapping[str, Any] | None = None,
    sort_by: str | Sequence[str] | None = None,
    commit_options: CommitOptions | Mapping[str, Any] | None = None,
) -> DatasetMetadata:
    """Append ``df`` to an existing dataset and/or delete partitions, in one commit.

    As :func:`kstore.update_dataset`: a concurrent writer that changed partitions inside the
    scope makes the commit fail with :class:`~kstore.errors.CommitConflictError` (nothing
    committed).

    Parameters
    ----------
    store
        A URL, path or store that executors can reach (not ``memory://``).
    dataset_uuid
        The dataset's name; it must exist.
    data
        The rows to append (a Spark DataFrame), or None to only delete (``delete_scope`` is
        then required). The old order ``(df, store, dataset_uuid)`` still works with a
        :class:`FutureWarning`.
    delete_scope
        A list of ``{partition column: value}`` dicts: partitions removed in the same commit.
    partition_on, secondary_indices, metadata, schema_mode, txn
        As in :func:`kstore.update_dataset`.
    mode
        ``"append"`` (default) or ``"overwrite_partitions"`` (replace every partition value
        the new data touches).
    shuffle, chunk_bytes, write_options, sort_by, commit_options
        As in :func:`store_dataset`.

    Returns
    -------
    DatasetMetadata
        The committed version.

    Examples
    --------
    With a SparkSession and a DataFrame ``more`` (tested in ``tests/drivers/test_spark.py``)::

        import kstore.spark as ks
        ks.update_dataset("/data/store", "sales", more, mode="overwrite_partitions")
        ks.update_dataset("/data/store", "sales", delete_scope=[{"day": "2024-01-01"}])
    """
    store, dataset_uuid, df = _arguments("update_dataset", store, dataset_uuid, data, optional=True)
    if mode not in ("append", "overwrite_partitions"):
        raise InvalidArgumentError(f"mode must be 'append' or 'overwrite_partitions', got {mode!r}")
    if df is None:
        if not delete_scope:
            raise InvalidArgumentError("update_dataset needs a DataFrame or a delete_scope")
        base, _ = load.load_latest(open_store(store), dataset_uuid)
        if base is None:
            raise DatasetNotFoundError(f"dataset {dataset_uuid!r} does not exist; create it with store_dataset")
        job = _delete_only_job(store, base, delete_scope, metadata, txn, commit_options)
        return _run(None, job, None)
    job = prepare_write(store, dataset_uuid, df.schema, mode=mode, require_existing=True,
                        partition_on=partition_on, secondary_indices=secondary_indices,
                        delete_scope=delete_scope, metadata=metadata, schema_mode=schema_mode, txn=txn,
                        chunk_bytes=chunk_bytes, write_options=write_options, sort_by=sort_by,
                        commit_options=commit_options)
    return _run(df, job, shuffle)


def _delete_only_job(store: StoreLike, base: DatasetMetadata, delete_scope: Sequence[Mapping[str, Any]],
                     metadata: Mapping[str, Any] | None, txn: tuple[str, int] | None,
                     commit_options: CommitOptions | Mapping[str, Any] | None) -> WriteJob:
    factory = spark_store_factory(store)
    core = prepare_core(factory(), base.uuid, WriteRequest.of(
        base.uuid, "append", delete_scope=delete_scope, metadata=metadata, txn=txn, must_exist=True,
        commit_options=commit_options))
    resolve_scope(core.existing, core.base_schema, list(delete_scope))
    return WriteJob(core=core, store=factory, file_schema=pa.schema([]), schema=core.base_schema)


class _RewriteGroups:
    """The executor function of :func:`compact`: rewrite each (number, group) it gets."""

    def __init__(self, factory: Callable[[], Store], plan: CompactionPlan, token: str) -> None:
        self.factory, self.plan, self.token = factory, plan, token

    def __call__(self, items: Iterable[tuple[int, CompactionGroup]]) -> Iterator[bytes]:
        store = self.factory()
        for number, group in items:
            files = rewrite_group(store, self.plan, group, file_id=naming.tagged_file_id(self.token, number))
            yield pickle.dumps(files, protocol=pickle.HIGHEST_PROTOCOL)


def compact(
    spark: Any,
    store: StoreLike,
    dataset_uuid: str,
    *,
    target_file_size: int = DEFAULT_TARGET_FILE_SIZE,
    min_files: int = 2,
    partitions: Sequence[Mapping[str, Any]] | None = None,
    predicates: Predicates = None,
    dry_run: bool = False,
    write_options: WriteOptions | Mapping[str, Any] | None = None,
    sort_by: str | Sequence[str] | None = None,
    txn: tuple[str, int] | None = None,
) -> CompactionPlan:
    """:func:`kstore.compact` with the rewriting on Spark executors (the groups of files
    are spread over the session's default parallelism) and ONE commit on the driver.

    If the job fails, nothing is committed and the files its tasks wrote are deleted.

    Parameters
    ----------
    spark
        The ``SparkSession`` whose executors rewrite the files.
    store
        A path or URL the executors can reach (not ``memory://``).
    dataset_uuid
        The dataset's name.
    target_file_size, min_files, partitions, predicates, dry_run, write_options, sort_by, txn
        As in :func:`kstore.compact`.

    Returns
    -------
    CompactionPlan
        The plan, with ``committed`` set to the new version.

    Examples
    --------
    With a SparkSession ``spark``::

        import kstore.spark as ks
        ks.compact(spark, "/data/store", "sales", target_file_size=256 << 20)
    """
    import uuid as _uuid

    factory = spark_store_factory(store)
    st = factory()
    plan = plan_compaction(st, dataset_uuid, CompactionRequest.of(
        dataset_uuid, target_file_size=target_file_size, min_files=min_files, partitions=partitions,
        predicates=predicates, write_options=write_options, sort_by=sort_by, txn=txn, dry_run=dry_run))
    if plan.dry_run or not plan.groups:
        return plan
    token = _uuid.uuid4().hex[:8]
    items = list(enumerate(plan.groups))
    slices = max(1, min(len(items), spark.sparkContext.defaultParallelism * 2))
    try:
        payloads = (spark.sparkContext.parallelize(items, slices)
                    .mapPartitions(_RewriteGroups(factory, worker_plan(plan), token)).collect())
    except BaseException:
        delete_by_token(st, plan.dataset_uuid, plan.table, token)
        raise
    files = [f for p in payloads for f in pickle.loads(p)]
    return finish_compaction(st, plan, files)[0]
