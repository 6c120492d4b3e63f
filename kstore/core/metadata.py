"""The immutable dataset metadata model (format version 4 plus kstore's extension).

:class:`DatasetMetadata` is a frozen value; change it with :meth:`DatasetMetadata.evolve`
(``dataclasses.replace``) or the helpers below, never in place. Conversion to and from the
on-disk dict lives here (:meth:`to_dict` / :meth:`from_dict`); bytes live in
:mod:`kstore.core.serialize`.

The kstore extension is one top-level key, ``"kstore"``, which kartothek and plateau ignore::

    "kstore": {"format": 1, "version": 7, "tables": ["table"], "stats": "<key>" | null}

Examples
--------
>>> m = DatasetMetadata.new("sales", partition_keys=("day",))
>>> m = m.with_partitions({"day=2024-01-01/a": {"table": "sales/table/day=2024-01-01/a.parquet"}})
>>> sorted(m.to_dict())
['dataset_metadata_version', 'dataset_uuid', 'indices', 'kstore', 'metadata', 'partition_keys', 'partitions']
>>> DatasetMetadata.from_dict(m.to_dict()) == m
True
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import pyarrow as pa

from kstore.core import naming, serialize
from kstore.core.filetable import ColumnarPartitions, FileTable
from kstore.core.types import decoded_schema
from kstore.errors import CorruptMetadataError, LimitExceededError

__all__ = ["DatasetMetadata", "FORMAT_VERSION", "KSTORE_FORMAT"]

FORMAT_VERSION = 4
KSTORE_FORMAT = 3

Files = Mapping[str, str]
InlineIndex = Mapping[Any, tuple[str, ...]]


def _freeze(d: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(d))


@dataclass(frozen=True, slots=True, eq=True)
class DatasetMetadata:
    """One version of a dataset's state.

    Attributes
    ----------
    uuid:
        The dataset uuid.
    partitions:
        ``label -> {table: storage key}``: a read-only mapping view
        (:class:`~kstore.core.filetable.ColumnarPartitions`) of :attr:`files`, the one
        in-memory form of the files for every format; any mapping given is wrapped in one.
    partition_keys:
        Columns encoded in the labels (``partition_on``), in key order.
    indices:
        ``column -> storage key`` of secondary index files. kartothek may store small
        indices inline; those appear in :attr:`inline_indices`.
    inline_indices:
        ``column -> {value: labels}`` of the indices kartothek stored inside the metadata.
    metadata:
        The user metadata dict (kartothek adds ``creation_time``).
    tables:
        Table names; derived from the partitions when there are any.
    version:
        kstore version number of this state; None for a dataset kstore never committed.
    schema:
        The normalized table schema of this version (kstore keeps it with the version, so
        it changes atomically with the commit; ``_common_metadata`` is the copy kartothek
        reads). None for datasets kstore never committed.
    txns:
        ``app_id -> version`` of the last application transaction committed (idempotence).
    stats_key:
        Storage key of the per-file statistics file of this version, if any.
    explicit_partitions:
        False for kartothek's ``create_empty_dataset_header`` (no ``partitions`` key).
    orphan_cutoff_ms:
        The newest orphan cutoff of a garbage collection in this version's history (epoch
        milliseconds): unreferenced files whose file id is older may have been deleted, so
        a write whose files are older must not commit them (FORMAT.md, commit protocol).
    extra:
        Top-level keys this version of kstore does not know; written back unchanged.
    main_format:
        The format of the main metadata file kstore publishes for kartothek readers
        (``"json"`` or ``"msgpack.zstd"``).
    incarnation:
        Which dataset of this name the version belongs to: the ``commit_id`` of the log
        entry that created it (create, or overwrite), carried by every later version
        (``kstore.incarnation``). A write that read another incarnation is a conflict
        (FORMAT.md C). None for datasets created before kstore recorded it.
    commit_id:
        The ``commit_id`` of the log entry that committed this version
        (``kstore.commit_id``): the next entry names it as its parent (FORMAT.md C, "A claim
        that proves void"). None for versions committed before kstore recorded it.

    Examples
    --------
    :func:`kstore.load_metadata` returns it; :meth:`new` builds one from scratch.

    >>> import pandas as pd, kstore
    >>> from kstore.io import MemoryStore
    >>> store = MemoryStore()
    >>> _ = kstore.store_dataset(store, "d", pd.DataFrame({"p": [1, 2], "x": [3, 4]}), partition_on="p")
    >>> meta = kstore.load_metadata(store, "d")
    >>> meta.uuid, meta.version, meta.partition_keys, len(meta.partitions), meta.schema.names
    ('d', 0, ('p',), 2, ['p', 'x'])
    """

    uuid: str
    partitions: Mapping[str, Files] = field(default_factory=lambda: ColumnarPartitions.of_mapping({}))
    partition_keys: tuple[str, ...] = ()
    indices: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    inline_indices: Mapping[str, InlineIndex] = field(default_factory=lambda: MappingProxyType({}))
    metadata: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    tables: tuple[str, ...] = (naming.DEFAULT_TABLE,)
    version: int | None = None
    stats_key: str | None = None
    schema: pa.Schema | None = None
    txns: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    explicit_partitions: bool = True
    orphan_cutoff_ms: int | None = None
    extra: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    main_format: str = "json"
    incarnation: str | None = None
    commit_id: str | None = None

    def __post_init__(self) -> None:
        # every version's files are a file table: a mapping given (format 1, a test's
        # dict) becomes its format-1 view, the file table built from it on first use
        if not isinstance(self.partitions, ColumnarPartitions):
            object.__setattr__(self, "partitions", ColumnarPartitions.of_mapping(
                {label: _freeze(files) for label, files in self.partitions.items()}))

    def __repr__(self) -> str:
        keys = f", partition_keys={list(self.partition_keys)}" if self.partition_keys else ""
        idx = tuple(dict.fromkeys((*self.indices, *self.inline_indices)))
        return (f"DatasetMetadata(uuid={self.uuid!r}, version={self.version}, partitions={len(self.partitions)}"
                f"{keys}, indices={list(idx)}, tables={list(self.tables)})")

    def __reduce__(self) -> tuple[Callable[[dict[str, Any]], DatasetMetadata], tuple[dict[str, Any]]]:
        """Pickle as plain dicts (mapping proxies do not pickle): for Dask/Spark workers."""
        state = {f.name: _thaw(getattr(self, f.name)) for f in dataclasses.fields(self)}
        return (_rebuild, (state,))

    # -- construction ------------------------------------------------------------------

    @classmethod
    def new(
        cls,
        uuid: str,
        *,
        partition_keys: Iterable[str] = (),
        metadata: Mapping[str, Any] | None = None,
        tables: Iterable[str] = (naming.DEFAULT_TABLE,),
    ) -> DatasetMetadata:
        """The metadata of an empty, never-committed dataset (no partitions, no version).

        Parameters
        ----------
        uuid
            The dataset's name (a safe key component).
        partition_keys
            The partition columns, in key order.
        metadata
            The user metadata dict (default: empty).
        tables
            The table names (default: the one table ``"table"``).

        Returns
        -------
        DatasetMetadata
            The new value.

        Raises
        ------
        InvalidKeyError
            ``uuid`` or a table name is not allowed.

        Examples
        --------
        >>> m = DatasetMetadata.new("sales", partition_keys=["day"], metadata={"owner": "me"})
        >>> m
        DatasetMetadata(uuid='sales', version=None, partitions=0, partition_keys=['day'], indices=[], tables=['table'])
        >>> dict(m.metadata)
        {'owner': 'me'}
        """
        naming.validate_name(uuid)
        tables = tuple(tables)
        for t in tables:
            naming.validate_name(t, "table name")
        return cls(
            uuid=uuid,
            partition_keys=tuple(partition_keys),
            metadata=_freeze(metadata or {}),
            tables=tables,
        )

    def evolve(self, **changes: Any) -> DatasetMetadata:
        """A copy with ``changes`` applied (mappings are frozen on the way in).

        Parameters
        ----------
        **changes
            New values of fields (``version=3``, ``metadata={...}``, ...), as for
            :func:`dataclasses.replace`; an unknown name raises ``TypeError``.

        Returns
        -------
        DatasetMetadata
            The copy; ``self`` is unchanged.

        Examples
        --------
        >>> m = DatasetMetadata.new("sales")
        >>> m2 = m.evolve(version=1, metadata={"owner": "me"})
        >>> m2.version, dict(m2.metadata), m.version
        (1, {'owner': 'me'}, None)
        """
        for key in ("indices", "inline_indices", "metadata", "extra", "txns"):
            if key in changes and not isinstance(changes[key], MappingProxyType):
                changes[key] = _freeze(changes[key])
        return dataclasses.replace(self, **changes)

    @property
    def files(self) -> FileTable:
        """The version's files as columns: one row per data file (``label, table, key``),
        whatever the format. Statistics and ``idx:`` index values per file are columns too
        when :attr:`columnar`; a format-1 version's file table is built from its partitions
        on first use (once), and its statistics and indices stay in their own files.

        Examples
        --------
        >>> raw = {"dataset_metadata_version": 4, "dataset_uuid": "d",
        ...        "partitions": {"a": {"files": {"table": "d/table/a.parquet"}}}}
        >>> m = DatasetMetadata.from_dict(raw)
        >>> m.files.table.column("key").to_pylist(), m.columnar
        (['d/table/a.parquet'], False)
        """
        return self._parts.files

    @property
    def columnar(self) -> bool:
        """Whether the per-file statistics and secondary indices of this version are columns
        of :attr:`files` (format 2/3: replayed from the log or read from a checkpoint).

        False for a format-1 version (a kartothek or plateau dataset, a kstore version
        written before format 2): its statistics are the file :attr:`stats_key` names and
        its indices the files :attr:`indices` names (or :attr:`inline_indices`); readers
        load them on demand (:func:`kstore.blocks.load.load_stats`,
        :func:`~kstore.blocks.load.load_index`), and its first format-2 commit joins them
        into the file table once (:func:`~kstore.blocks.load.to_columnar`).

        Examples
        --------
        >>> m = DatasetMetadata.new("d").with_partitions({"a": {"table": "d/table/a.parquet"}})
        >>> m.columnar, m.with_files(m.files).columnar
        (False, True)
        """
        return self._parts.columnar

    @property
    def _parts(self) -> ColumnarPartitions:
        parts = self.partitions
        assert isinstance(parts, ColumnarPartitions)  # __post_init__ made it one
        return parts

    def with_files(self, files: FileTable) -> DatasetMetadata:
        """A copy whose partitions are ``files`` (columnar).

        Parameters
        ----------
        files
            One row per data file (:class:`~kstore.core.filetable.FileTable`); it becomes
            :attr:`files`, and :attr:`partitions` a mapping view of it.

        Returns
        -------
        DatasetMetadata
            The copy (with ``explicit_partitions`` True), :attr:`columnar`: ``files`` holds
            the statistics and index values.

        Examples
        --------
        >>> from kstore.core.filetable import FileTable
        >>> files = FileTable.from_partitions({"p=1/a": {"table": "sales/table/p=1/a.parquet"}})
        >>> m = DatasetMetadata.new("sales", partition_keys=["p"]).with_files(files)
        >>> len(m.files), dict(m.partitions["p=1/a"])
        (1, {'table': 'sales/table/p=1/a.parquet'})
        """
        return dataclasses.replace(self, partitions=ColumnarPartitions(files), explicit_partitions=True)

    def with_partitions(self, added: Mapping[str, Files], removed: Iterable[str] = ()) -> DatasetMetadata:
        """A copy with partitions ``added`` (label -> files) and labels ``removed``.

        Parameters
        ----------
        added
            ``label -> {table: storage key}`` of the partitions to add (an existing label
            is replaced).
        removed
            Labels to drop (unknown labels are ignored).

        Returns
        -------
        DatasetMetadata
            The copy (:attr:`columnar` when ``self`` is).

        Examples
        --------
        >>> m = DatasetMetadata.new("sales", partition_keys=["p"]).with_partitions(
        ...     {"p=1/a": {"table": "sales/table/p=1/a.parquet"}, "p=2/a": {"table": "sales/table/p=2/a.parquet"}})
        >>> sorted(m.with_partitions({}, removed=["p=1/a"]).partitions)
        ['p=2/a']
        """
        from kstore.core.filetable import Actions

        add = FileTable.from_partitions(added).table
        # an added label replaces that label's files: they are removed first
        remove = tuple(dict.fromkeys((*removed, *added)))
        files = self.files.apply(Actions(add=add if add.num_rows else None, remove=remove))
        return dataclasses.replace(self, partitions=ColumnarPartitions(files, columnar=self.columnar),
                                   explicit_partitions=True)

    # -- queries -----------------------------------------------------------------------

    @property
    def table(self) -> str:
        """The first (usually only) table name."""
        return self.tables[0]

    @property
    def index_columns(self) -> tuple[str, ...]:
        """Columns with an index of any kind: partition keys first, then secondary."""
        sec = sorted(set(self.indices) | set(self.inline_indices))
        return tuple(self.partition_keys) + tuple(c for c in sec if c not in self.partition_keys)

    def file_key(self, label: str, table: str | None = None) -> str:
        """The storage key of partition ``label``'s file of ``table``.

        Parameters
        ----------
        label
            The partition label.
        table
            The table name (default: :attr:`table`, the first).

        Returns
        -------
        str
            The key.

        Raises
        ------
        CorruptMetadataError
            The partition has no file for the table (or there is no such partition).

        Examples
        --------
        >>> m = DatasetMetadata.new("sales").with_partitions({"a": {"table": "sales/table/a.parquet"}})
        >>> m.file_key("a")
        'sales/table/a.parquet'
        """
        try:
            return self.partitions[label][table or self.table]
        except KeyError as exc:
            raise CorruptMetadataError(
                f"dataset {self.uuid!r}: partition {label!r} has no file for table "
                f"{table or self.table!r}"
            ) from exc

    def has_keys(self, keys: Iterable[str]) -> bool:
        """True when any of ``keys`` is a data file of this version (vectorized for columnar state).

        Parameters
        ----------
        keys
            Storage keys.

        Returns
        -------
        bool
            Whether at least one of them is a partition's file (index and statistics files
            do not count).

        Examples
        --------
        >>> m = DatasetMetadata.new("sales").with_partitions({"a": {"table": "sales/table/a.parquet"}})
        >>> m.has_keys(["sales/table/a.parquet", "other"]), m.has_keys(["other"])
        (True, False)
        """
        import pyarrow.compute as pc

        keys = list(keys)
        ft = self.files
        if not len(ft) or not keys:
            return False
        return bool(pc.any(pc.is_in(ft.table.column("key"), value_set=pa.array(keys, pa.string()))).as_py())

    def referenced_keys(self) -> set[str]:
        """Every key this version references under ``<uuid>/`` (data, index, stats files).

        Returns
        -------
        set[str]
            The keys (inline indices have none).

        Examples
        --------
        >>> m = DatasetMetadata.new("sales").with_partitions({"a": {"table": "sales/table/a.parquet"}})
        >>> sorted(m.evolve(indices={"x": "sales/indices/x/t.by-dataset-index.parquet"}).referenced_keys())
        ['sales/indices/x/t.by-dataset-index.parquet', 'sales/table/a.parquet']
        """
        keys = set(self.files.table.column("key").to_pylist())
        keys.update(self.indices.values())
        if self.stats_key:
            keys.add(self.stats_key)
        return keys

    # -- (de)serialization -------------------------------------------------------------

    def to_dict(self, *, partitions: bool = True) -> dict[str, Any]:
        """The on-disk dict (kartothek format version 4 + the ``kstore`` key); without the
        ``partitions`` key when ``partitions`` is False (a checkpoint's small state).

        Parameters
        ----------
        partitions
            Include the ``partitions`` key (always left out for a dataset without
            ``explicit_partitions``).

        Returns
        -------
        dict
            Plain JSON-compatible values (the schema as base64 text).

        Examples
        --------
        >>> m = DatasetMetadata.new("sales").with_partitions({"a": {"table": "sales/table/a.parquet"}})
        >>> d = m.to_dict()
        >>> d["dataset_metadata_version"], d["partitions"], d["kstore"]["tables"]
        (4, {'a': {'files': {'table': 'sales/table/a.parquet'}}}, ['table'])
        >>> "partitions" in m.to_dict(partitions=False)
        False
        """
        out: dict[str, Any] = dict(self.extra)
        out.update(
            {
                "dataset_metadata_version": FORMAT_VERSION,
                "dataset_uuid": self.uuid,
                "metadata": dict(self.metadata),
                "partition_keys": list(self.partition_keys),
            }
        )
        if self.explicit_partitions and partitions:
            out["partitions"] = {
                label: {"files": dict(files)} for label, files in self.partitions.items()
            }
        indices: dict[str, Any] = {c: {_key(v): list(ls) for v, ls in idx.items()}
                                   for c, idx in self.inline_indices.items()}
        indices.update(self.indices)
        out["indices"] = indices
        out["kstore"] = {
            "format": KSTORE_FORMAT,
            "version": self.version,
            "tables": list(self.tables),
            "stats": self.stats_key,
            "schema": _schema_to_text(self.schema),
            "txns": dict(self.txns),
        }
        if self.orphan_cutoff_ms is not None:
            out["kstore"]["orphan_cutoff_ms"] = self.orphan_cutoff_ms
        if self.main_format != "json":
            out["kstore"]["main_format"] = self.main_format
        if self.incarnation is not None:
            out["kstore"]["incarnation"] = self.incarnation
        if self.commit_id is not None:
            out["kstore"]["commit_id"] = self.commit_id
        return out

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], *, expected_uuid: str | None = None) -> DatasetMetadata:
        """Parse and validate an on-disk dict; any violation is a CorruptMetadataError.

        Parameters
        ----------
        raw
            The decoded metadata file (what :meth:`to_dict` returns, or kartothek's).
        expected_uuid
            The dataset the file belongs to; a different ``dataset_uuid`` is an error.

        Returns
        -------
        DatasetMetadata
            The validated value.

        Raises
        ------
        CorruptMetadataError
            Wrong format version or uuid, keys outside the dataset's prefix, malformed
            fields.

        Examples
        --------
        >>> raw = {"dataset_metadata_version": 4, "dataset_uuid": "sales",
        ...        "partitions": {"a": {"files": {"table": "sales/table/a.parquet"}}}}
        >>> DatasetMetadata.from_dict(raw, expected_uuid="sales").file_key("a")
        'sales/table/a.parquet'
        >>> DatasetMetadata.from_dict(raw, expected_uuid="other")
        Traceback (most recent call last):
        ...
        kstore.errors.CorruptMetadataError: dataset 'other': metadata names dataset_uuid 'sales'
        """
        try:
            return cls._from_dict(raw, expected_uuid)
        except (CorruptMetadataError, LimitExceededError):
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            what = expected_uuid or (raw.get("dataset_uuid") if isinstance(raw, Mapping) else None)
            raise CorruptMetadataError(
                f"dataset {what!r}: metadata does not follow format version 4 ({exc!r})"
            ) from exc

    @classmethod
    def _from_dict(cls, raw: Mapping[str, Any], expected_uuid: str | None) -> DatasetMetadata:
        if not isinstance(raw, Mapping):
            raise CorruptMetadataError(f"dataset {expected_uuid!r}: metadata is not a mapping")
        version = raw.get("dataset_metadata_version")
        uuid = raw.get("dataset_uuid")
        if version != FORMAT_VERSION:
            raise CorruptMetadataError(
                f"dataset {uuid or expected_uuid!r}: dataset_metadata_version is {version!r}; "
                f"kstore reads version {FORMAT_VERSION}"
            )
        if not isinstance(uuid, str) or (expected_uuid is not None and uuid != expected_uuid):
            raise CorruptMetadataError(
                f"dataset {expected_uuid!r}: metadata names dataset_uuid {uuid!r}"
            )
        naming.validate_name(uuid)
        known = {"dataset_metadata_version", "dataset_uuid", "metadata", "partitions",
                 "partition_keys", "indices", "kstore"}
        for name in ("metadata", *(k for k in raw if k not in known)):
            serialize.check_nesting(raw.get(name), f"dataset {uuid!r}: {name!r}")
        raw_keys = raw.get("partition_keys") or ()
        if not isinstance(raw_keys, (list, tuple)):
            raise CorruptMetadataError(f"dataset {uuid!r}: partition_keys must be a list, got {raw_keys!r}")
        partition_keys = tuple(raw_keys)
        if not all(isinstance(c, str) for c in partition_keys):
            raise CorruptMetadataError(f"dataset {uuid!r}: partition_keys must be strings")
        explicit = "partitions" in raw
        partitions: dict[str, Files] = {}
        tables_seen: list[str] = []
        prefix = uuid + "/"
        for label, entry in (raw.get("partitions") or {}).items():
            files = entry["files"] if isinstance(entry, Mapping) and "files" in entry else entry
            if not isinstance(files, Mapping) or not files:
                raise CorruptMetadataError(f"dataset {uuid!r}: partition {label!r} lists no files")
            for key in files.values():
                if not (isinstance(key, str) and key.startswith(prefix)):
                    naming.validate_dataset_key(uuid, key)  # raises with a precise message
                # cheap screen; the full check only for keys that could hold '.', '..' or ''
                if "/." in key or "//" in key or key.endswith("/") or "\\" in key or "\x00" in key:
                    naming.validate_key(key)
            if not tables_seen:
                tables_seen = list(files)
            partitions[str(label)] = MappingProxyType(dict(files))
        indices: dict[str, str] = {}
        inline: dict[str, InlineIndex] = {}
        for col, ref in (raw.get("indices") or {}).items():
            if isinstance(ref, str):
                indices[col] = naming.validate_dataset_key(uuid, ref)
            elif isinstance(ref, Mapping):
                if not all(isinstance(ls, (list, tuple)) for ls in ref.values()):
                    raise CorruptMetadataError(f"dataset {uuid!r}: inline index {col!r} must map values to label lists")
                inline[col] = _freeze({v: tuple(ls) for v, ls in ref.items()})
            else:
                raise CorruptMetadataError(f"dataset {uuid!r}: index {col!r} is neither key nor inline")
        ext = raw.get("kstore") or {}
        tables = tuple(ext.get("tables") or tables_seen or (naming.DEFAULT_TABLE,))
        for t in tables:
            naming.validate_name(t, "table name")
        stats = ext.get("stats")
        if stats is not None:
            naming.validate_dataset_key(uuid, stats)
        kv = ext.get("version")
        if kv is not None and (isinstance(kv, bool) or not isinstance(kv, int) or kv < 0):
            raise CorruptMetadataError(f"dataset {uuid!r}: kstore version must be an int >= 0, got {kv!r:.40}")
        fmt = ext.get("format", 1)
        if isinstance(fmt, int) and not isinstance(fmt, bool) and fmt > KSTORE_FORMAT:
            raise CorruptMetadataError(f"dataset {uuid!r} was written in kstore format {fmt}; this kstore "
                                       f"reads formats up to {KSTORE_FORMAT} (upgrade kstore)")
        main_format = ext.get("main_format", "json")
        if main_format not in naming.METADATA_FORMATS:
            raise CorruptMetadataError(f"dataset {uuid!r}: unknown main_format {main_format!r:.40}")
        cutoff = ext.get("orphan_cutoff_ms")
        if cutoff is not None and (isinstance(cutoff, bool) or not isinstance(cutoff, int)):
            raise CorruptMetadataError(f"dataset {uuid!r}: orphan_cutoff_ms must be an int, got {cutoff!r}")
        incarnation = ext.get("incarnation")
        if incarnation is not None and (not isinstance(incarnation, str) or not 0 < len(incarnation) <= 128):
            raise CorruptMetadataError(f"dataset {uuid!r}: incarnation must be a non-empty string of at most 128 "
                                       f"characters, got {incarnation!r:.40}")
        commit_id = ext.get("commit_id")
        if commit_id is not None and (not isinstance(commit_id, str) or not 0 < len(commit_id) <= 128):
            raise CorruptMetadataError(f"dataset {uuid!r}: commit_id must be a non-empty string of at most 128 "
                                       f"characters, got {commit_id!r:.40}")
        return cls(
            uuid=uuid,
            partitions=ColumnarPartitions.of_mapping(partitions),
            partition_keys=partition_keys,
            indices=_freeze(indices),
            inline_indices=_freeze(inline),
            metadata=_freeze(raw.get("metadata") or {}),
            tables=tables,
            version=int(kv) if kv is not None else None,
            stats_key=stats,
            schema=_schema_from_text(ext.get("schema"), uuid),
            txns=_freeze({str(k): int(v) for k, v in (ext.get("txns") or {}).items()}),
            explicit_partitions=explicit,
            orphan_cutoff_ms=cutoff,
            extra=_freeze({k: v for k, v in raw.items() if k not in known}),
            main_format=main_format,
            incarnation=incarnation,
            commit_id=commit_id,
        )


def _key(value: Any) -> Any:
    return value if isinstance(value, (str, int, float, bool)) else str(value)


def _schema_to_text(schema: pa.Schema | None) -> str | None:
    if schema is None:
        return None
    return base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")


def _schema_from_text(text: str | None, uuid: str) -> pa.Schema | None:
    if not text:
        return None
    try:
        return decoded_schema(pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text))))
    except (ValueError, TypeError, OSError, pa.ArrowException) as exc:  # (a damaged flatbuffer: OSError)
        raise CorruptMetadataError(f"dataset {uuid!r}: the stored schema cannot be decoded") from exc


def _thaw(value: Any) -> Any:
    if isinstance(value, ColumnarPartitions):
        return value
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    return value


def _rebuild(state: dict[str, Any]) -> DatasetMetadata:
    state = dict(state)
    state["inline_indices"] = MappingProxyType({c: MappingProxyType(v) for c, v in state["inline_indices"].items()})
    for key in ("indices", "metadata", "extra", "txns"):
        state[key] = MappingProxyType(state[key])
    return DatasetMetadata(**state)
