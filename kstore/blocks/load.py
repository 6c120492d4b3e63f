"""Loading what planning needs: metadata, schema, indices, statistics, versions.

Call budget of a read plan (counted in tests): 1 get for the main metadata file (2 for a
msgpack dataset: JSON is tried first) and 1 listing of the log entries above it (+1 get
when the main file lags behind the log), 0 for the schema of a kstore-written dataset (it
travels in the metadata; 1 get of ``_common_metadata`` for kartothek datasets), 1 get per
secondary index a predicate uses, 1 get for per-file statistics when a predicate column
has no index. No listing of partitions (except kartothek's header-only datasets, which
have no partition list).
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from kstore.core import naming, runtime, serialize
from kstore.core.index import ColumnIndex, index_storage_type
from kstore.core.log import LogEntry
from kstore.core.metadata import DatasetMetadata
from kstore.core.naming import MetadataFormat
from kstore.core.runtime import parallel_map
from kstore.core.stats import check_stats_table
from kstore.core.types import check_dataset_schema, duplicate_names, storage_schema
from kstore.errors import (
    CorruptMetadataError,
    DatasetNotFoundError,
    InvalidArgumentError,
    KeyNotFoundError,
    LimitExceededError,
    StoreNotFoundError,
    UnsupportedTypeError,
    VersionNotFoundError,
    short_repr,
)
from kstore.io.store import Store

__all__ = [
    "Head",
    "load_head",
    "load_main",
    "load_entry",
    "entry_metadata",
    "log_versions",
    "load_metadata",
    "load_metadata_raw",
    "load_schema",
    "load_index",
    "load_indices",
    "load_stats",
    "load_version",
    "load_latest",
    "read_parquet_bytes",
]


def read_parquet_bytes(data: bytes, what: str) -> pa.Table:
    """An index or statistics file as a table. Undecodable files raise
    :class:`CorruptMetadataError`; files whose footer declares more than
    :data:`~kstore.core.serialize.MAX_METADATA_BYTES` of data, :class:`LimitExceededError`."""
    try:
        pf = pq.ParquetFile(pa.BufferReader(data))
        size = sum(pf.metadata.row_group(i).total_byte_size for i in range(pf.metadata.num_row_groups))
        if size > serialize.MAX_METADATA_BYTES:
            raise LimitExceededError(
                f"{what} holds {size} bytes of data, more than the limit of {serialize.MAX_METADATA_BYTES} "
                "(MAX_METADATA_BYTES); refusing to read it"
            )
        _check_unique_names(pf.schema_arrow.names, what)
        return pf.read()
    except (pa.ArrowException, OSError, ValueError) as exc:
        if isinstance(exc, (LimitExceededError, CorruptMetadataError)):
            raise
        raise CorruptMetadataError(f"{what} is not a readable Parquet file ({exc})") from exc


def _check_unique_names(names: list[str], what: str) -> None:
    dupes = duplicate_names(names)
    if dupes:
        raise CorruptMetadataError(f"{what} has duplicate columns {short_repr(dupes)}")


def load_metadata_raw(store: Store, dataset_uuid: str) -> tuple[dict[str, Any], MetadataFormat]:
    """The main metadata dict and its format; tries JSON, then msgpack.zstd."""
    for fmt in naming.METADATA_FORMATS:
        key = naming.metadata_key(dataset_uuid, fmt)
        try:
            data = store.get(key)
        except KeyNotFoundError:
            continue
        return serialize.loads(data, fmt, what=f"dataset {dataset_uuid!r}"), fmt
    raise DatasetNotFoundError(f"dataset {dataset_uuid!r} does not exist in {store!r}")


def _discover_partitions(store: Store, meta: DatasetMetadata) -> DatasetMetadata:
    """kartothek header-only datasets have no ``partitions`` key: list the table prefix."""
    parts: dict[str, dict[str, str]] = {}
    for table in meta.tables:
        for key in store.iter_prefix(naming.table_prefix(meta.uuid, table)):
            label = naming.label_from_data_key(meta.uuid, table, key)
            if label is not None:
                parts.setdefault(label, {})[table] = key
    return meta.evolve(partitions=parts)


def load_main(store: Store, dataset_uuid: str) -> tuple[DatasetMetadata | None, MetadataFormat | None]:
    """The main metadata file (what kartothek reads): ``(None, None)`` when there is none."""
    try:
        raw, fmt = load_metadata_raw(store, dataset_uuid)
    except DatasetNotFoundError:
        return None, None
    meta = DatasetMetadata.from_dict(raw, expected_uuid=dataset_uuid)
    if not meta.explicit_partitions:
        meta = _discover_partitions(store, meta)
    return meta, fmt


def log_versions(store: Store, dataset_uuid: str, after: int | None = None) -> list[int]:
    """Versions with a log entry (sorted), only those above ``after`` if given: one listing."""
    start = naming.log_key(dataset_uuid, after) if after is not None else None
    out = []
    for key in store.iter_prefix(naming.log_prefix(dataset_uuid), start):
        v = naming.version_from_log_key(dataset_uuid, key)
        if v is not None and (after is None or v > after):
            out.append(v)
    return sorted(out)


def load_entry(store: Store, dataset_uuid: str, version: int) -> LogEntry:
    """One log entry, validated (:class:`VersionNotFoundError` when there is none)."""
    key = naming.log_key(dataset_uuid, version)
    try:
        data = store.get(key)
    except KeyNotFoundError as exc:
        raise VersionNotFoundError(
            f"dataset {dataset_uuid!r} has no version {version} (never committed, or expired "
            "by garbage collection)"
        ) from exc
    raw = serialize.loads(data, "json", what=f"dataset {dataset_uuid!r}: log entry of version {version}")
    return LogEntry.from_dict(raw, dataset_uuid=dataset_uuid, version=version)


def entry_metadata(store: Store, dataset_uuid: str, entry: LogEntry) -> DatasetMetadata:
    """The dataset metadata a log entry holds (:class:`VersionNotFoundError` for a tombstone
    or a fence without a dataset)."""
    if entry.metadata is None:
        why = ("was expired by garbage collection" if entry.expired
               else f"is a {entry.operation!r} record: the dataset did not exist then")
        raise VersionNotFoundError(f"dataset {dataset_uuid!r}: version {entry.version} {why}")
    try:
        meta = DatasetMetadata.from_dict(entry.metadata, expected_uuid=dataset_uuid)
    except CorruptMetadataError as exc:
        raise CorruptMetadataError(
            f"dataset {dataset_uuid!r}: the metadata in the log entry of version {entry.version} is damaged: {exc}"
        ) from exc
    if meta.version != entry.version:
        raise CorruptMetadataError(
            f"dataset {dataset_uuid!r}: log entry of version {entry.version} holds version {meta.version}"
        )
    if not meta.explicit_partitions:
        meta = _discover_partitions(store, meta)
    return meta


@dataclass(frozen=True, slots=True)
class Head:
    """The newest committed state of a dataset, as writers and readers find it.

    ``meta`` is None when no dataset exists (never created, deleted, or only a garbage
    collection fence was committed); ``version`` is still the newest log version then, so
    the next commit continues the numbering. ``loaded_at`` is the runtime's monotonic
    clock when the log was listed: a commit never claims on a head older than
    :data:`kstore.blocks.commit.BASE_MAX_AGE`.
    """

    dataset_uuid: str
    meta: DatasetMetadata | None
    fmt: MetadataFormat | None
    version: int | None
    orphan_cutoff_ms: int | None
    main_version: int | None
    loaded_at: float

    @property
    def next_version(self) -> int:
        return 0 if self.version is None else self.version + 1

    @property
    def has_log(self) -> bool:
        """True when the dataset (or a fence) has a log entry: kstore versions it."""
        return self.version is not None and (self.meta is None or self.meta.version is not None)

    def age(self) -> float:
        return runtime.current().monotonic() - self.loaded_at


def load_head(store: Store, dataset_uuid: str, *, missing_store_ok: bool = False) -> Head:
    """The newest committed version: the main file as a hint, then one listing of the log.

    The main file names version ``M`` (or is missing, or lags when a writer died between
    its claim and its publish); the log is listed from ``M`` on, and the highest version
    found is the newest. Listing (not probing ``M+1``) stays right when garbage collection
    has removed log entries between ``M`` and the newest (FORMAT.md, commit protocol).
    Costs: 1 get of the main file (+1 for msgpack), 1 listing, +1 get when the main file lags.
    A store that does not exist is :class:`StoreNotFoundError`, or (``missing_store_ok``,
    for a write that will create it) an empty head.
    """
    naming.validate_name(dataset_uuid)
    try:
        return _load_head(store, dataset_uuid)
    except StoreNotFoundError:
        if not missing_store_ok:
            raise
        return Head(dataset_uuid, None, None, None, None, None, runtime.current().monotonic())


def _load_head(store: Store, dataset_uuid: str) -> Head:
    for _ in range(20):
        started = runtime.current().monotonic()
        try:
            main, fmt = load_main(store, dataset_uuid)
        except CorruptMetadataError:
            # the log is the truth for a versioned dataset; a damaged main file is repaired
            # by the next publish. Without a log there is nothing to fall back to.
            if not log_versions(store, dataset_uuid):
                raise
            main, fmt = None, _main_format(store, dataset_uuid)
        hint = main.version if main is not None else None
        versions = log_versions(store, dataset_uuid, after=hint)
        if not versions:
            cutoff = main.orphan_cutoff_ms if main is not None else None
            return Head(dataset_uuid, main, fmt, hint, cutoff, hint, started)
        newest = versions[-1]
        try:
            entry = load_entry(store, dataset_uuid, newest)
        except VersionNotFoundError:
            continue  # expired between the listing and the get: a newer one exists; list again
        if entry.expired:
            raise CorruptMetadataError(
                f"dataset {dataset_uuid!r}: the newest log entry (version {newest}) is an expired tombstone"
            )
        meta = entry_metadata(store, dataset_uuid, entry) if entry.has_dataset else None
        cutoff = meta.orphan_cutoff_ms if meta is not None else entry.orphan_cutoff_ms
        return Head(dataset_uuid, meta, fmt, newest, cutoff, hint, started)
    raise CorruptMetadataError(f"dataset {dataset_uuid!r}: the log kept changing while it was read")


def _main_format(store: Store, dataset_uuid: str) -> MetadataFormat | None:
    for fmt in naming.METADATA_FORMATS:
        if store.exists(naming.metadata_key(dataset_uuid, fmt)):
            return fmt
    return None


def load_latest(store: Store, dataset_uuid: str, *, missing_store_ok: bool = False,
                ) -> tuple[DatasetMetadata | None, MetadataFormat | None]:
    """Newest committed metadata (None when no dataset exists) and the main file's format."""
    head = load_head(store, dataset_uuid, missing_store_ok=missing_store_ok)
    return head.meta, head.fmt


def load_metadata(store: Store, dataset_uuid: str) -> tuple[DatasetMetadata, MetadataFormat | None]:
    """The dataset's newest committed metadata and the main file's format.

    :class:`DatasetNotFoundError` when no dataset exists (also when the store itself does not).
    """
    try:
        head = load_head(store, dataset_uuid)
    except StoreNotFoundError as exc:
        raise DatasetNotFoundError(f"dataset {dataset_uuid!r} does not exist: {exc}") from exc
    if head.meta is None:
        raise DatasetNotFoundError(f"dataset {dataset_uuid!r} does not exist in {store!r}")
    return head.meta, head.fmt


def load_version(store: Store, dataset_uuid: str, version: int) -> DatasetMetadata:
    """The metadata of one retained version, from its write-once log entry."""
    return entry_metadata(store, dataset_uuid, load_entry(store, dataset_uuid, version))


def load_schema(store: Store, meta: DatasetMetadata, table: str | None = None) -> pa.Schema:
    """The normalized schema: from the metadata (kstore) or ``_common_metadata`` (kartothek)."""
    if table is not None and table not in meta.tables:
        raise InvalidArgumentError(f"dataset {meta.uuid!r} has table(s) {list(meta.tables)}, not {short_repr(table)}")
    if meta.schema is not None and (table is None or table == meta.table):
        return check_dataset_schema(meta.schema, meta.partition_keys, meta.uuid)
    key = naming.common_metadata_key(meta.uuid, table or meta.table)
    try:
        data = store.get(key)
    except KeyNotFoundError as exc:
        raise CorruptMetadataError(f"dataset {meta.uuid!r}: schema file {key!r} is missing") from exc
    try:
        schema = pq.read_schema(pa.BufferReader(data))
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise CorruptMetadataError(f"dataset {meta.uuid!r}: {key!r} is not a Parquet schema ({exc})") from exc
    # plateau under pandas 3 writes large_string (etc.) here; kstore's types are the plain ones
    try:
        schema = storage_schema(schema)
    except UnsupportedTypeError:
        pass
    return check_dataset_schema(schema, meta.partition_keys, meta.uuid)


def load_index(store: Store, meta: DatasetMetadata, column: str, schema: pa.Schema) -> ColumnIndex:
    """One secondary index (from its file, or kartothek's inline form), checked against ``schema``."""
    if schema.get_field_index(column) < 0:
        raise CorruptMetadataError(f"dataset {meta.uuid!r} has an index of column {column!r}, which its schema lacks")
    vtype = index_storage_type(schema.field(column).type)
    if column in meta.inline_indices:
        try:
            return ColumnIndex.from_inline(column, dict(meta.inline_indices[column]), vtype)
        except CorruptMetadataError as exc:
            raise CorruptMetadataError(f"dataset {meta.uuid!r}: {exc}") from exc
    key = meta.indices[column]
    what = f"dataset {meta.uuid!r}: index file {key!r}"
    try:
        data = store.get(key)
    except KeyNotFoundError as exc:
        raise CorruptMetadataError(f"{what} of column {column!r} is missing") from exc
    table = read_parquet_bytes(data, what)
    try:
        return ColumnIndex.from_table(column, table, vtype)
    except CorruptMetadataError as exc:
        raise CorruptMetadataError(f"{what}: {exc}") from exc


def load_indices(store: Store, meta: DatasetMetadata, columns: Iterable[str], schema: pa.Schema) -> dict[str, ColumnIndex]:
    cols = [c for c in dict.fromkeys(columns) if c in meta.indices or c in meta.inline_indices]
    return dict(zip(cols, parallel_map(lambda c: load_index(store, meta, c, schema), cols, max_workers=8)))


def load_stats(store: Store, meta: DatasetMetadata) -> pa.Table | None:
    if not meta.stats_key:
        return None
    try:
        data = store.get(meta.stats_key)
    except KeyNotFoundError:
        return None
    what = f"dataset {meta.uuid!r}: statistics file {meta.stats_key!r}"
    return check_stats_table(read_parquet_bytes(data, what), meta.schema, what=what)


def parquet_bytes(table: pa.Table, **options: Any) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, **options)
    return sink.getvalue()
