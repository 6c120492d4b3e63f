"""Loading what planning needs: metadata, schema, indices, statistics, versions.

Call budget of a read plan (counted in tests): 1 get for the main metadata file (2 for a
msgpack dataset: JSON is tried first), 0 for the schema of a kstore-written dataset (it
travels in the metadata; 1 get of ``_common_metadata`` for kartothek datasets), 1 get per
secondary index a predicate uses, 1 get for per-file statistics when a predicate column
has no index. No listing (except kartothek's header-only datasets, which have none).
"""

from __future__ import annotations

import io
from collections.abc import Iterable

import pyarrow as pa
import pyarrow.parquet as pq

from kstore.core import naming, serialize
from kstore.core.index import ColumnIndex, index_storage_type
from kstore.core.metadata import DatasetMetadata
from kstore.core.naming import MetadataFormat
from kstore.core.stats import check_stats_table
from kstore.core.types import check_dataset_schema, duplicate_names, storage_schema
from kstore.errors import (
    CorruptMetadataError,
    DatasetNotFoundError,
    InvalidArgumentError,
    KeyNotFoundError,
    LimitExceededError,
    UnsupportedTypeError,
    VersionNotFoundError,
    short_repr,
)
from kstore.io.store import Store

__all__ = [
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


def load_metadata_raw(store: Store, dataset_uuid: str) -> tuple[dict, MetadataFormat]:
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


def load_metadata(store: Store, dataset_uuid: str) -> tuple[DatasetMetadata, MetadataFormat]:
    """The dataset's current metadata as readers see it (the main file) and its format."""
    raw, fmt = load_metadata_raw(store, dataset_uuid)
    meta = DatasetMetadata.from_dict(raw, expected_uuid=dataset_uuid)
    if not meta.explicit_partitions:
        meta = _discover_partitions(store, meta)
    return meta, fmt


def load_version(store: Store, dataset_uuid: str, version: int, fmt: MetadataFormat = "json") -> DatasetMetadata:
    """The metadata of one committed version, from its write-once log entry."""
    key = naming.log_key(dataset_uuid, version)
    try:
        data = store.get(key)
    except KeyNotFoundError as exc:
        raise VersionNotFoundError(
            f"dataset {dataset_uuid!r} has no version {version} (never committed or expired)"
        ) from exc
    entry = serialize.loads(data, "json", what=f"dataset {dataset_uuid!r} version {version}")
    try:
        return DatasetMetadata.from_dict(entry["metadata"], expected_uuid=dataset_uuid)
    except KeyError as exc:
        raise CorruptMetadataError(f"dataset {dataset_uuid!r}: log entry {version} has no metadata") from exc


def load_latest(store: Store, dataset_uuid: str) -> tuple[DatasetMetadata | None, MetadataFormat | None]:
    """Newest committed version for a writer: the main file, then probe the log forward.

    A writer that died after claiming a version but before rewriting the main file leaves
    the main file one (or more) versions behind; the probe finds those versions.
    """
    try:
        meta, fmt = load_metadata(store, dataset_uuid)
    except DatasetNotFoundError:
        meta, fmt = None, None
    version = meta.version if meta is not None and meta.version is not None else -1
    while True:
        try:
            newer = load_version(store, dataset_uuid, version + 1)
        except VersionNotFoundError:
            break
        meta, version = newer, version + 1
        if newer.explicit_partitions is False:
            meta = _discover_partitions(store, newer)
    return meta, fmt


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
    if len(cols) <= 1:
        return {c: load_index(store, meta, c, schema) for c in cols}
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(8, len(cols))) as pool:
        return dict(zip(cols, pool.map(lambda c: load_index(store, meta, c, schema), cols)))


def load_stats(store: Store, meta: DatasetMetadata) -> pa.Table | None:
    if not meta.stats_key:
        return None
    try:
        data = store.get(meta.stats_key)
    except KeyNotFoundError:
        return None
    what = f"dataset {meta.uuid!r}: statistics file {meta.stats_key!r}"
    return check_stats_table(read_parquet_bytes(data, what), meta.schema, what=what)


def parquet_bytes(table: pa.Table, **options) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, **options)
    return sink.getvalue()
