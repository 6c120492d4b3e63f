"""A write job: the client side of every write path (eager, iterator, Dask, Spark).

Every driver does the same three things, and only the middle one differs:

1. :func:`prepare_write` (client): validate the arguments, load the newest version, decide
   the partition columns and the indices the new files must carry values for;
2. workers call :func:`kstore.blocks.write.write_partitions` with ``job.partition_on``,
   ``job.index_columns`` and ``job.table_name`` and send back :class:`WrittenFile` records;
3. :func:`finish_write` (client): merge the workers' schemas, resolve delete scopes, build
   the :class:`~kstore.core.operations.Operation` and make the ONE commit; on failure, or
   when the commit did not take the files, delete them.

Examples
--------
>>> import pandas as pd
>>> from kstore.io.memory import MemoryStore
>>> from kstore.blocks.write import to_arrow, write_partitions
>>> st = MemoryStore()
>>> job = prepare_write(st, "ds", WriteRequest.of("ds", "error", partition_on=["p"]))
>>> files = write_partitions(st, "ds", to_arrow(pd.DataFrame({"p": [1, 2], "x": [3, 4]})), job.layout)
>>> meta = finish_write(job, files, check_schema(job, pd.DataFrame({"p": [1], "x": [3]})))
>>> meta.version, len(meta.partitions)
(0, 2)
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, fields, replace
from typing import Any, Literal

import pyarrow as pa
import pyarrow.types as pat

from kstore.blocks import load
from kstore.blocks.commit import commit, owning_files
from kstore.blocks.load import Head
from kstore.blocks.mutate import base_version
from kstore.blocks.scope import resolve_scope, scope_from_files
from kstore.blocks.write import (
    DictionaryChoice,
    FileLayout,
    WrittenFile,
    delete_files,
    iter_tables,
    table_schema,
    to_arrow,
    write_partitions,
)
from kstore.core import naming, serialize
from kstore.core.arguments import as_choice, as_columns, as_delete_scope, as_txn
from kstore.core.columns import ColumnNames
from kstore.core.commit_options import DEFAULT_MAX_ATTEMPTS, CommitOptions, plain
from kstore.core.metadata import DatasetMetadata
from kstore.core.naming import MetadataFormat
from kstore.core.operations import (
    SCHEMA_MODES,
    Append,
    Create,
    DeleteScope,
    Operation,
    Overwrite,
    OverwritePartitions,
    SchemaMode,
    txn_committed,
)
from kstore.core.runtime import pool_size
from kstore.core.stats import exact_int64_columns, file_stats, stats_table
from kstore.core.types import check_partitioning, drop_stale_type_hints, merge_schemas
from kstore.core.writer_options import DEFAULT_OPTIONS, WriteOptions
from kstore.errors import (
    DatasetExistsError,
    DatasetNotFoundError,
    InvalidArgumentError,
)
from kstore.io.store import Store

log = logging.getLogger("kstore.write")

__all__ = ["WriteMode", "WRITE_MODES", "SchemaMode", "WriteRequest", "WriteJob", "WriteOptions", "prepare_write", "check_schema", "check_fits", "merge_worker_schemas", "finish_write",
           "delete_files", "as_columns", "write_files"]

WriteMode = Literal["error", "overwrite", "append", "overwrite_partitions"]
#: The write modes, the same on every engine (eager, Dask, Spark).
WRITE_MODES: tuple[WriteMode, ...] = ("error", "overwrite", "append", "overwrite_partitions")


@dataclass(frozen=True)
class WriteJob:
    """Everything workers and the final commit need to know about one write."""

    store: Store
    dataset_uuid: str
    mode: WriteMode
    partition_on: tuple[str, ...]
    index_columns: tuple[str, ...]
    table_name: str
    base: DatasetMetadata | None
    base_schema: pa.Schema | None
    schema_mode: SchemaMode = "strict"
    delete_scope: tuple[Mapping[str, Any], ...] | None = None
    metadata: Mapping[str, Any] | None = None
    metadata_format: MetadataFormat | None = None
    txn: tuple[str, int] | None = None
    base_format: MetadataFormat | None = None
    head: Head | None = None
    #: how workers encode the data files (validated on the client)
    options: WriteOptions = DEFAULT_OPTIONS
    #: the secondary indices the user asked for (``index_columns`` adds the dataset's own):
    #: the commit keeps the indices the newest version has and adds only these
    requested_indices: tuple[str, ...] = ()
    #: recorded in the log entry (``history()`` shows it)
    info: Mapping[str, Any] | None = None
    max_attempts: int = DEFAULT_MAX_ATTEMPTS

    @property
    def layout(self) -> FileLayout:
        """Where the job's files go and how they are encoded (what workers need)."""
        # a new dataset (a full overwrite too: no file stays) stores every column under its
        # own name; a write to an existing one, as that version names them (FORMAT.md)
        names = ColumnNames() if self.creates else ColumnNames.of(self.base_schema)
        return FileLayout(tuple(self.partition_on), tuple(self.index_columns), self.table_name, self.options, names)

    @property
    def creates(self) -> bool:
        """True when this write makes a new dataset (or replaces one)."""
        return self.mode in ("error", "overwrite") or self.base is None

    @property
    def keeps_schema(self) -> bool:
        """True when the new data must fit the dataset's schema: a write to an existing
        dataset, a full overwrite too unless ``schema_mode="overwrite"`` (Delta's rule)."""
        if self.base is None:
            return False
        return not self.creates or (self.mode == "overwrite" and self.schema_mode != "overwrite")

    @property
    def existing(self) -> DatasetMetadata:
        """The base version of a job that does not create the dataset (it exists)."""
        if self.base is None:  # pragma: no cover - callers check creates / already_committed first
            raise AssertionError(f"dataset {self.dataset_uuid!r}: the write job has no base version")
        return self.base

    @property
    def already_committed(self) -> bool:
        """The job's application transaction is already committed (a retried job)."""
        return txn_committed(self.base, self.txn)


def _one_of(keyword: Any, option: Any, name: str, dataset_uuid: str) -> Any:
    """A commit setting given as a keyword (``txn=``, ``metadata=``) or in
    ``commit_options``, not both."""
    if keyword is not None and option is not None:
        raise InvalidArgumentError(f"dataset {dataset_uuid!r}: {name}= and commit_options {name!r} were both given; "
                                   "pass one of them")
    return option if keyword is None else keyword


@dataclass(frozen=True)
class WriteRequest:
    """One write as the caller asked for it: validated and normalized once, at the API edge
    (:meth:`of`); :func:`prepare_write` then loads what it builds on. Immutable.

    ``mode``: ``"error"`` creates (an existing dataset is an error), ``"overwrite"`` replaces,
    ``"append"`` adds files, ``"overwrite_partitions"`` replaces the partition values the new
    data touches. Appending to a missing dataset creates it unless ``must_exist``.
    ``options`` say how the files are encoded (sort order included), ``commit`` how the
    commit is made. ``base`` (a committed version of this dataset, e.g. a snapshot's
    metadata) makes the write build on that version instead of the newest: partitions an
    overwrite or delete scope removes are resolved there, and the commit fails with
    :class:`~kstore.errors.CommitConflictError` if a version committed after it removed them
    or added files inside the scope (appends commute).

    Examples
    --------
    >>> r = WriteRequest.of("ds", "append", partition_on="p", txn=("job", 1))
    >>> r.partition_on, r.commit.txn, r.options.sort_by
    (('p',), ('job', 1), ())
    >>> WriteRequest.of("ds", "upsert")
    Traceback (most recent call last):
    ...
    kstore.errors.InvalidArgumentError: mode must be one of 'error', 'overwrite', 'append', 'overwrite_partitions', got 'upsert' (str)
    """

    mode: WriteMode
    partition_on: tuple[str, ...] = ()
    secondary_indices: tuple[str, ...] = ()
    table_name: str = naming.DEFAULT_TABLE
    schema_mode: SchemaMode = "strict"
    delete_scope: tuple[Mapping[str, Any], ...] | None = None
    metadata_format: MetadataFormat | None = None
    must_exist: bool = False
    options: WriteOptions = DEFAULT_OPTIONS
    commit: CommitOptions = CommitOptions()
    base: DatasetMetadata | None = None

    @classmethod
    def of(cls, dataset_uuid: str, mode: WriteMode, *, write_options: WriteOptions | Mapping[str, Any] | None = None,
           sort_by: str | Sequence[str] | None = None, txn: tuple[str, int] | None = None,
           metadata: Mapping[str, Any] | None = None, commit_options: CommitOptions | Mapping[str, Any] | None = None,
           **given: Any) -> WriteRequest:
        """Validate a write's arguments (``given``: the other fields, in the user's types:
        a column name or a list of them, a list of delete scopes). ``txn`` and ``metadata``
        may be given as keywords or in ``commit_options``, not both; ``write_options`` and
        ``sort_by`` make :attr:`options`."""
        unknown = sorted(set(given) - ({f.name for f in fields(cls)} - {"mode", "options", "commit"}))
        if unknown:
            raise InvalidArgumentError(f"unknown write argument(s) {unknown}")
        naming.validate_name(dataset_uuid)
        table_name = given.get("table_name", naming.DEFAULT_TABLE)
        naming.validate_name(table_name, "table name")
        as_choice(mode, WRITE_MODES, "mode")
        schema_mode = given.get("schema_mode", "strict")
        as_choice(schema_mode, SCHEMA_MODES, "schema_mode")
        if schema_mode == "overwrite" and mode != "overwrite":
            raise InvalidArgumentError(f"dataset {dataset_uuid!r}: schema_mode='overwrite' replaces the dataset's "
                                       f"schema and needs mode='overwrite', not mode={mode!r}")
        metadata_format = given.get("metadata_format")
        if metadata_format is not None:
            as_choice(metadata_format, naming.METADATA_FORMATS, "metadata_format")
        if metadata is not None and not isinstance(metadata, Mapping):
            raise InvalidArgumentError(f"metadata must be a dict, got {type(metadata).__name__}")
        opts = CommitOptions.of(commit_options)
        txn = _one_of(as_txn(txn), opts.txn, "txn", dataset_uuid)
        metadata = _one_of(metadata, plain(opts.metadata), "metadata", dataset_uuid)
        pon = as_columns(given.get("partition_on"), "partition_on")
        sec = as_columns(given.get("secondary_indices"), "secondary_indices")
        naming.check_key_columns(dataset_uuid, partition_on=pon, index_columns=sec)
        return cls(mode=mode, partition_on=tuple(pon), secondary_indices=tuple(sec), table_name=table_name,
                   schema_mode=schema_mode, delete_scope=as_delete_scope(given.get("delete_scope"), dataset_uuid),
                   metadata_format=metadata_format, must_exist=bool(given.get("must_exist", False)),
                   options=WriteOptions.of(write_options, sort_by=sort_by),
                   commit=replace(opts, txn=txn, metadata=metadata), base=given.get("base"))


def prepare_write(store: Store, dataset_uuid: str, request: WriteRequest) -> WriteJob:
    """Load what the write ``request`` builds on and decide the partition columns and the
    indices the new files must carry values for (client side, before any file is written)."""
    mode, base, pon, sec = request.mode, request.base, request.partition_on, request.secondary_indices
    metadata_format, table_name, txn = request.metadata_format, request.table_name, request.commit.txn
    metadata = plain(request.commit.metadata)
    head: Head | None = None
    base_format: MetadataFormat | None
    if base is not None:
        base = base_version(store, dataset_uuid, base)  # checked to be a version of this dataset
        if mode not in ("append", "overwrite_partitions"):
            raise InvalidArgumentError(f"dataset {dataset_uuid!r}: mode={mode!r} does not build on a version")
        base_format = "msgpack.zstd" if base.main_format == "msgpack.zstd" else "json"
    else:
        head = load.load_head(store, dataset_uuid, missing_store_ok=True)  # a first write creates the store
        base, base_format = head.meta, head.fmt
    if base is None and request.must_exist:
        raise DatasetNotFoundError(f"dataset {dataset_uuid!r} does not exist; create it with store_dataset")
    # the log entry is JSON, the main file JSON or msgpack: a value either cannot hold fails now
    main_format = (metadata_format if (base is None or mode in ("error", "overwrite")) else None) or base_format
    serialize.check_encodable(metadata, f"dataset {dataset_uuid!r}: metadata", ("json", main_format or "json"))
    job = WriteJob(store=store, dataset_uuid=dataset_uuid, mode=mode, partition_on=pon,
                   index_columns=tuple(c for c in sec if c not in pon), table_name=table_name, base=base,
                   base_schema=None, schema_mode=request.schema_mode,
                   delete_scope=request.delete_scope,
                   metadata=metadata, metadata_format=metadata_format, txn=txn, base_format=base_format,
                   head=head, options=request.options, requested_indices=tuple(c for c in sec if c not in pon),
                   info=plain(request.commit.info), max_attempts=request.commit.max_attempts)
    if job.already_committed:
        assert txn is not None
        log.info("dataset %r: %s with txn %s:%d was committed before; nothing to do", dataset_uuid, mode,
                 txn[0], txn[1])
        return replace(job, partition_on=job.existing.partition_keys, index_columns=())
    if mode == "error" and base is not None:
        raise DatasetExistsError(
            f"dataset {dataset_uuid!r} already exists; pass mode='overwrite' to replace it or mode='append' to "
            "append to it"
        )
    if job.creates:
        if request.delete_scope:
            raise InvalidArgumentError(f"dataset {dataset_uuid!r}: delete_scope needs an existing dataset")
        if mode == "overwrite_partitions" and not pon:
            raise InvalidArgumentError(f"dataset {dataset_uuid!r}: mode='overwrite_partitions' needs partition_on")
        if job.keeps_schema:  # a full overwrite keeping the schema and partitioning (Delta's rule)
            assert base is not None
            pon = pon or base.partition_keys  # none given: the dataset's
            check_partitioning(dataset_uuid, base.partition_keys, pon)
            return replace(job, partition_on=tuple(pon), base_schema=load.load_schema(store, base),
                           index_columns=tuple(c for c in sec if c not in pon),
                           requested_indices=tuple(c for c in sec if c not in pon))
        return job
    base = job.existing
    if table_name not in (naming.DEFAULT_TABLE, base.table):
        raise InvalidArgumentError(f"dataset {dataset_uuid!r} stores table {base.table!r}, not {table_name!r}")
    if mode == "overwrite_partitions" and not base.partition_keys:
        raise InvalidArgumentError(f"dataset {dataset_uuid!r} is not partitioned; mode='overwrite_partitions' "
                                   "needs partition columns")
    if pon and tuple(pon) != tuple(base.partition_keys):
        raise InvalidArgumentError(
            f"dataset {dataset_uuid!r} is partitioned on {list(base.partition_keys)}; got partition_on={list(pon)}"
        )
    existing = tuple(c for c in list(base.indices) + list(base.inline_indices) if c not in base.partition_keys)
    sec = tuple(dict.fromkeys(existing + tuple(c for c in sec if c not in base.partition_keys)))
    return replace(job, partition_on=base.partition_keys, index_columns=sec, table_name=base.table,
                   requested_indices=tuple(c for c in job.requested_indices if c not in base.partition_keys),
                   base_schema=load.load_schema(store, base))


def write_files(
    job: WriteJob,
    data: Any,
) -> tuple[list[WrittenFile], pa.Schema | None]:
    """Write every chunk of ``data`` for ``job``; no commit.

    Chunks are encoded in parallel, one per writer thread (:func:`~kstore.core.runtime.
    cpu_threads`; ``KSTORE_THREADS=1`` writes one chunk at a time): the next chunk is pulled
    from ``data`` only while fewer than that many are being written, so at most one chunk
    per thread, plus the one being pulled, is in memory. The files come back in the
    chunks' order. On any error every file written so far is deleted (the chunks in
    flight are finished first, so none is left behind) and the error re-raised. Drivers
    call this between :func:`kstore.blocks.job.prepare_write` and
    :func:`kstore.blocks.job.finish_write`; users call :func:`kstore.store_dataset` /
    :func:`kstore.update_dataset` instead.

    Parameters
    ----------
    job
        The prepared write job (store, dataset, partitioning, indices, options).
    data
        A pandas DataFrame, a pyarrow Table, or an iterable of them.

    Returns
    -------
    tuple[list[WrittenFile], pyarrow.Schema | None]
        The records of the written files, and the merged schema of the chunks (None when
        ``data`` held no chunk).
    """
    window = pool_size(1 << 30, cpu_bound=True)
    files: list[WrittenFile] = []
    schemas: list[pa.Schema] = []
    pending: deque[Future[list[WrittenFile]]] = deque()
    seen: tuple[pa.Schema, pa.Schema] | None = None  # (a chunk's schema, what check_schema made of it)
    choice = DictionaryChoice()  # judged on the first large file, used by the later chunks
    pool = ThreadPoolExecutor(window, thread_name_prefix="kstore-write") if window > 1 else None
    try:
        for table in iter_tables(data, dataset=job.dataset_uuid):
            if seen is not None and table.schema.equals(seen[0], check_metadata=True):
                schema = seen[1]  # (a pure function of the chunk's schema: checked once per schema)
            else:
                schema = check_schema(job, table)
                seen = (table.schema, schema)
            if not schemas or not schema.equals(schemas[-1], check_metadata=True):
                schemas.append(schema)
                merge_worker_schemas(job, schemas[-2:])  # fail on the first chunk that disagrees
            if pool is None:
                files.extend(write_partitions(job.store, job.dataset_uuid, table, job.layout, dictionaries=choice))
                continue
            pending.append(pool.submit(write_partitions, job.store, job.dataset_uuid, table, job.layout,
                                       dictionaries=choice))
            del table  # (the pool holds it until it is written)
            while len(pending) >= window:
                files.extend(pending.popleft().result())
        while pending:
            files.extend(pending.popleft().result())
    except BaseException:
        for f in pending:  # let the chunks in flight finish, then delete what they wrote
            try:
                files.extend(f.result())
            except BaseException:  # noqa: BLE001 - write_partitions deleted its own files
                pass
        delete_files(job.store, files)
        raise
    finally:
        if pool is not None:
            pool.shutdown(wait=True)
    return files, merge_worker_schemas(job, schemas)


def check_schema(job: WriteJob, sample: Any) -> pa.Schema:
    """Validate the columns of ``sample`` (a frame/table, possibly empty) for ``job``; return
    its normalized schema. Drivers call it on the client before workers start."""
    table = to_arrow(sample, dataset=job.dataset_uuid)
    schema = table_schema(table, partition_on=job.partition_on, secondary_indices=job.index_columns,
                          dataset=job.dataset_uuid)
    job.options.check_columns(schema, job.partition_on, dataset=job.dataset_uuid)
    check_fits(job, schema, table)
    return schema


def check_fits(job: WriteJob, schema: pa.Schema, table: pa.Table) -> None:
    """SchemaMismatchError unless new data of ``schema`` (``table``: its values, or a sample;
    an empty one for data not seen yet) fits the dataset ``job`` writes to: the schema
    check of :func:`~kstore.core.types.merge_schemas` with the job's ``schema_mode``,
    made again by the commit with the written files."""
    if job.base_schema is None or not job.keeps_schema:
        return
    if job.creates:  # a full overwrite: no file of the dataset stays, any widening keeps every value
        merge_schemas(job.base_schema, schema, dataset=job.dataset_uuid, mode=job.schema_mode,
                      exact_int64=schema.names)
        return
    merge_schemas(job.base_schema, schema, dataset=job.dataset_uuid, mode=job.schema_mode,
                  fixed={*job.partition_on, *job.index_columns}, exact_int64=_exact_int64(job, schema, table))


def _exact_int64(job: WriteJob, schema: pa.Schema, table: pa.Table) -> frozenset[str]:
    """The columns an ``int64`` / ``double`` mismatch between the dataset and ``table`` may
    widen (:func:`~kstore.core.stats.exact_int64_columns`; the commit checks again with the
    written files' statistics and the newest version's)."""
    base, base_schema = job.base, job.base_schema
    assert base is not None and base_schema is not None
    ints = [f.name for f in schema if f.name in base_schema.names and f.name in table.column_names
            and {pat.is_integer(f.type), pat.is_integer(base_schema.field(f.name).type)} == {True, False}]
    if not ints:
        return frozenset()
    new_stats = stats_table([""], [file_stats(table.select(ints), 0)], schema)
    return exact_int64_columns(base_schema, schema, base.files.base if base.columnar else None, new_stats)


def merge_worker_schemas(job: WriteJob, schemas: Sequence[pa.Schema | None]) -> pa.Schema | None:
    """One schema from the schemas the workers saw (SchemaMismatchError when they disagree)."""
    out = None
    for s in schemas:
        if s is None:
            continue
        out = s if out is None else merge_schemas(out, s, dataset=job.dataset_uuid,
                                                  mode=job.schema_mode)
    return out


def _seen_version(job: WriteJob) -> int | None:
    """The newest version the job had loaded before any of its files was written."""
    if job.head is not None:
        return job.head.version
    return job.base.version if job.base is not None else None


def finish_write(job: WriteJob, files: Sequence[WrittenFile], schema: pa.Schema | None) -> DatasetMetadata:
    """Make the job's one commit. ``schema`` is the merged normalized schema of the new data."""
    files = list(files)
    return owning_files(job.store, files, lambda: _commit_job(job, files, schema))


def _commit_job(job: WriteJob, files: list[WrittenFile], schema: pa.Schema | None) -> DatasetMetadata:
    if job.already_committed:
        return job.existing  # (names none of the files: they are deleted)
    scope_fn: Callable[[DatasetMetadata], set[str]] | None = None
    remove: tuple[str, ...] = ()
    if files and not job.creates:  # new values may not fit another engine's narrower types
        job = replace(job, metadata=drop_stale_type_hints(job.existing.metadata, job.metadata))
    if job.creates:
        fresh = Overwrite if job.mode == "overwrite" and job.base is not None else Create
        op: Operation = fresh(partition_on=job.partition_on, index_columns=job.index_columns, metadata=job.metadata,
                              schema_mode=job.schema_mode, table=job.table_name, txn=job.txn, info=job.info, metadata_format=job.metadata_format,
                              seen_version=_seen_version(job))
    else:
        if job.delete_scope is not None or job.mode == "overwrite_partitions":
            scopes = list(job.delete_scope or [])
            if job.mode == "overwrite_partitions":
                scopes += scope_from_files(files, job.partition_on)
            base_schema = job.base_schema

            def scope_fn(meta: DatasetMetadata, _scopes: list[Mapping[str, Any]] = scopes) -> set[str]:
                return resolve_scope(meta, base_schema, _scopes)

            remove = tuple(sorted(scope_fn(job.existing)))
        if not files and not remove and not job.metadata and job.txn is None:
            return job.existing  # nothing to change (a delete scope matching nothing): no empty version
        kind: type[Operation] = (OverwritePartitions if job.mode == "overwrite_partitions"
                                 else DeleteScope if remove and not files else Append)
        op = kind(remove=remove, read_version=job.existing.version, partition_on=job.partition_on,
                  index_columns=job.requested_indices, metadata=job.metadata, schema_mode=job.schema_mode,
                  table=job.table_name, txn=job.txn, scope_labels=frozenset(remove) if scope_fn else None,
                  scope=scope_fn, info=job.info, read_incarnation=job.existing.incarnation, checks_incarnation=True,
                  seen_version=_seen_version(job))
    return commit(job.store, job.dataset_uuid, op, files=files, schema=schema, known_base=job.head,
                  max_attempts=job.max_attempts).dataset
