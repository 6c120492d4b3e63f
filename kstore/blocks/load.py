"""Loading what planning needs: metadata, schema, indices, statistics, versions.

Call budget of open + plan (counted in tests), format 2: 1 get of ``_last_checkpoint``,
1 listing of the log from it, 1 get of the newest checkpoint and 1 get per log entry after
it (k, in parallel): **3 + k**, whatever the number of partitions and the predicate (the
schema, index values and per-file statistics travel in the state). A version kstore wrote
in format 1 costs 1 get of its entry plus 1 per secondary index a predicate uses and 1 for
its statistics file; a dataset kartothek or plateau wrote (no log): 1 get of the main file
(2 for msgpack) + 1 of ``_common_metadata`` + 1 per index. No listing of partitions (except
kartothek's header-only datasets, which have no partition list).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from kstore.core import naming, runtime, serialize
from kstore.core.filetable import IDX
from kstore.core.index import ColumnIndex, index_storage_type
from kstore.core.log import LogEntry, names_another_parent, successor_gone
from kstore.core.metadata import DatasetMetadata
from kstore.core.naming import MetadataFormat
from kstore.core.runtime import parallel_map
from kstore.core.stats import check_stats_table
from kstore.core.types import check_dataset_schema, decoded_schema, duplicate_names, storage_schema
from kstore.errors import (
    CommitConflictError,
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

log = logging.getLogger("kstore.load")

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
    "resolve_version",
    "Resolved",
    "load_latest",
    "list_log",
    "LogListing",
    "resolve",
    "load_checkpoint",
    "read_last_checkpoint",
    "to_columnar",
    "read_parquet_bytes",
    "check_not_created_again",
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
        _check_unique_names(decoded_schema(pf.schema_arrow).names, what)
        return pf.read(use_threads=False)  # (bytes Python owns: see kstore.io.arrowfs.open_for_arrow)
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
    or a fence without a dataset). A format-2 entry is replayed from its checkpoint."""
    if entry.metadata is None and entry.has_dataset:
        return load_version(store, dataset_uuid, entry.version)
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
    :data:`kstore.blocks.commit.BASE_MAX_AGE`. ``chain`` is how many format-2 entries were
    replayed on top of the base (a checkpoint, a resetting entry, a format-1 entry or the
    main file) to build ``meta`` (so a commit knows when to write a checkpoint).
    ``damaged`` lists the checkpoints found damaged and read around (a commit on this head
    writes a fresh checkpoint, so that later reads need not).
    """

    dataset_uuid: str
    meta: DatasetMetadata | None
    fmt: MetadataFormat | None
    version: int | None
    orphan_cutoff_ms: int | None
    main_version: int | None
    loaded_at: float
    entries: tuple[LogEntry, ...] = ()  # the replayed entries (a history summary reuses them)
    damaged: tuple[int, ...] = ()

    @property
    def chain(self) -> int:
        return len(self.entries)

    @property
    def next_version(self) -> int:
        return 0 if self.version is None else self.version + 1

    @property
    def has_log(self) -> bool:
        """True when the dataset (or a fence) has a log entry: kstore versions it."""
        return self.version is not None and (self.meta is None or self.meta.version is not None)

    def age(self) -> float:
        return runtime.current().monotonic() - self.loaded_at


@dataclass(frozen=True, slots=True)
class LogListing:
    """One listing of ``_kstore/log/``: entry, checkpoint and history-summary versions, and
    the versions garbage collection marked expired (all sorted)."""

    versions: tuple[int, ...]
    checkpoints: tuple[int, ...]
    summaries: tuple[int, ...] = ()
    expired: tuple[int, ...] = ()
    #: ``(version, key)`` of the checkpoints' value-sorted index blocks (FORMAT.md E.7)
    sorted_indices: tuple[tuple[int, str], ...] = ()


def list_log(store: Store, dataset_uuid: str, start: int | None = None) -> LogListing:
    """Entries and checkpoints at or above version ``start`` (all when None): one listing."""
    prefix = naming.log_prefix(dataset_uuid)
    after = f"{prefix}{start:020d}" if start is not None else None
    found: tuple[list[int], ...] = ([], [], [], [])
    kinds = (naming.version_from_log_key, naming.version_from_checkpoint_key, naming.version_from_summary_key,
             naming.version_from_expired_key)
    sidecars: list[tuple[int, str]] = []
    for key in store.iter_prefix(prefix, after):
        for into, parse in zip(found, kinds):
            v = parse(dataset_uuid, key)
            if v is not None:
                into.append(v)
                break
        else:
            v = naming.version_from_sorted_index_key(dataset_uuid, key)
            if v is not None:
                sidecars.append((v, key))
    versions, checkpoints, summaries, expired = (tuple(sorted(f)) for f in found)
    return LogListing(versions, checkpoints, summaries, expired, tuple(sorted(sidecars)))


def read_last_checkpoint(store: Store, dataset_uuid: str) -> int | None:
    """The ``_last_checkpoint`` hint (None when missing or unreadable: it is only a hint; a
    damaged one is logged, and the whole log is listed instead)."""
    key = naming.last_checkpoint_key(dataset_uuid)
    try:
        raw = serialize.loads(store.get(key), "json", what=f"dataset {dataset_uuid!r}: _last_checkpoint")
    except KeyNotFoundError:
        return None
    except (CorruptMetadataError, LimitExceededError) as exc:
        log.warning("dataset %r: the checkpoint hint %r is damaged (%s); listing the whole log instead",
                    dataset_uuid, key, exc)
        return None
    v = raw.get("version") if isinstance(raw, dict) else None
    if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
        return v
    log.warning("dataset %r: the checkpoint hint %r names no version (%s); listing the whole log instead",
                dataset_uuid, key, short_repr(raw))
    return None


def load_checkpoint(store: Store, dataset_uuid: str, version: int, *, lazy: bool = True) -> DatasetMetadata:
    """The state a checkpoint holds (:class:`KeyNotFoundError` when it is gone).

    ``lazy``: each column's index lists are decoded when a reader first asks for them
    (FORMAT.md E); one found damaged then is logged and read around like a damaged
    checkpoint: rebuilt from an older checkpoint and the log entries (a
    CorruptMetadataError when those are gone). ``lazy=False`` decodes everything now."""
    from kstore.core.state import from_checkpoint

    data = store.get(naming.checkpoint_key(dataset_uuid, version))
    rebuilt: list[DatasetMetadata] = []

    def read_around(column: str, error: CorruptMetadataError) -> pa.ChunkedArray:
        if not rebuilt:  # (_resolve_around logs it)
            try:
                got = _resolve_around(store, dataset_uuid, version, _Damaged(version, error), lazy=False)
            except (_Moved, VersionNotFoundError) as exc:
                raise error from exc
            if got.meta is None:
                raise error
            rebuilt.append(got.meta)
        files = rebuilt[0].files
        lists = files.index_lists(column[len(IDX):])
        if lists is None or len(files) != len(mine.files) or not files.labels.equals(mine.files.labels):
            raise CorruptMetadataError(f"{error}; the log rebuilds version {version} with other files") from error
        return lists

    mine = from_checkpoint(data, dataset_uuid=dataset_uuid, version=version, max_bytes=serialize.MAX_METADATA_BYTES,
                           lazy=lazy, read_around=read_around, sidecar=_Sidecar(store, dataset_uuid, version))
    return mine


class _Sidecar:
    """A checkpoint's value-sorted index blocks in the store (range reads through
    ``store.open``; adjacent ranges in one read). A failure is logged once: the lists
    answer from then on."""

    def __init__(self, store: Store, dataset_uuid: str, version: int) -> None:
        self._store, self._uuid, self._version = store, dataset_uuid, version

    def read(self, digest: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        key = naming.sorted_index_key(self._uuid, self._version, digest)
        out: list[bytes] = []
        with self._store.open(key) as fh:
            i = 0
            while i < len(ranges):
                j, end = i + 1, ranges[i][0] + ranges[i][1]
                while j < len(ranges) and ranges[j][0] == end:
                    end += ranges[j][1]
                    j += 1
                fh.seek(ranges[i][0])
                data = fh.read(end - ranges[i][0])
                pos = 0
                for _off, length in ranges[i:j]:
                    out.append(data[pos:pos + length])
                    pos += length
                i = j
        return out

    def failed(self, digest: str, error: Exception) -> None:
        log.warning("dataset %r: the sorted index blocks of the checkpoint of version %d (%s) cannot be used (%s); "
                    "planning reads the index lists instead", self._uuid, self._version, digest, error)


class _Moved(Exception):
    """The log changed under a read (a concurrent GC expired what the read was using)."""


class _NoBase(Exception):
    """Read around a damaged checkpoint, the replay ran out of listed entries: no older
    checkpoint or base entry is left (garbage collection removed the entries below it)."""


class _Damaged(Exception):
    """A checkpoint that exists but cannot be read (truncated, flipped bytes, wrong content)."""

    def __init__(self, version: int, error: CorruptMetadataError) -> None:
        super().__init__(str(error))
        self.version = version
        self.error = error


@dataclass(frozen=True, slots=True)
class Resolved:
    """A version's state and how it was built (see :class:`Head`)."""

    meta: DatasetMetadata | None
    entry: LogEntry | None  # None when the version was read from its checkpoint alone
    entries: tuple[LogEntry, ...] = ()  # the format-2 entries replayed (oldest first)
    damaged: tuple[int, ...] = ()  # checkpoints found damaged and read around

    @property
    def chain(self) -> int:
        return len(self.entries)


_BATCH = 16


def _fetch(store: Store, dataset_uuid: str, versions: list[int], checkpoint: int | None, lazy: bool = True,
           ) -> tuple[dict[int, LogEntry | None], DatasetMetadata | None]:
    """Entries (None when gone) and, optionally, one checkpoint, fetched in parallel."""
    jobs: list[tuple[str, int]] = [("e", v) for v in versions]
    if checkpoint is not None:
        jobs.append(("c", checkpoint))

    def get(job: tuple[str, int]) -> Any:
        kind, v = job
        try:
            if kind == "c":
                try:
                    return load_checkpoint(store, dataset_uuid, v, lazy=lazy)
                except CorruptMetadataError as exc:  # derived and best effort: read around it
                    return _Damaged(v, exc)
            return load_entry(store, dataset_uuid, v)
        except (VersionNotFoundError, KeyNotFoundError):
            return None

    got = parallel_map(get, jobs, max_workers=16)
    entries = {v: got[i] for i, v in enumerate(versions)}
    cp = got[-1] if checkpoint is not None else None
    if isinstance(cp, _Damaged):
        raise cp
    if checkpoint is not None and cp is None:
        raise _Moved()
    return entries, cp


def resolve(store: Store, dataset_uuid: str, target: int, listing: LogListing, *, newest: bool = False,
            lazy: bool = True) -> Resolved:
    """The state of version ``target`` from the log: the newest checkpoint at or below it
    (or the newest base entry), then the format-2 entries after it, replayed in order.

    Costs: 1 get of the checkpoint + 1 get per entry after it (in parallel; at most about
    :data:`~kstore.core.state.CHECKPOINT_INTERVAL` when checkpoints are written). Raises
    :class:`VersionNotFoundError` when ``target`` expired, ``_Moved`` when a concurrent
    garbage collection changed what the read used (the caller lists again).

    A damaged checkpoint (checkpoints are derived and best effort) is logged and read
    around: the whole log is listed, and the version is rebuilt from the next older
    checkpoint or base entry and the entries after it (more calls; ``damaged`` in the
    result says which). Only when no such chain is left is it a
    :class:`CorruptMetadataError` naming the dataset, the version and the checkpoint; or,
    when ``target`` was read as the ``newest`` version and the log now has a newer one,
    ``_Moved`` (the head moved on: a delete or a garbage collection removed what the read
    needed).

    ``lazy=False`` decodes every index list of the checkpoint now (garbage collection, before
    it lets the entries below a checkpoint go), so that damage anywhere in it is read around
    and reported in ``damaged``.
    """
    try:
        return _resolve(store, dataset_uuid, target, listing, (), lazy)
    except _Damaged as exc:
        return _resolve_around(store, dataset_uuid, target, exc, newest=newest, lazy=lazy)


def _resolve_around(store: Store, dataset_uuid: str, target: int, first: _Damaged, *, newest: bool = False,
                    lazy: bool = True) -> Resolved:
    """:func:`resolve` without the damaged checkpoint(s): from the whole log (the listing
    the read used may start at the damaged one, the ``_last_checkpoint`` hint)."""
    damaged: dict[int, CorruptMetadataError] = {}
    exc: _Damaged | None = first
    previous: LogListing | None = None
    for _ in range(20):
        if exc is not None:
            damaged[exc.version] = exc.error
            log.warning("dataset %r: checkpoint %r is damaged (%s); reading version %d from an older checkpoint "
                        "and the log entries instead", dataset_uuid, naming.checkpoint_key(dataset_uuid, exc.version),
                        exc.error, target)
            exc, previous = None, None
        listing = list_log(store, dataset_uuid)
        try:
            got = _resolve(store, dataset_uuid, target, listing, tuple(damaged), lazy)
        except _Damaged as again:
            exc = again
            continue
        except (_Moved, _NoBase):
            if newest and listing.versions and listing.versions[-1] > target:
                raise _Moved() from None  # a newer head to read instead
            if listing == previous:
                break  # the same log twice: the entries below the damaged checkpoint are gone
            previous = listing
            continue
        return replace(got, damaged=tuple(sorted(damaged)))
    try:  # no chain around them: a damaged checkpoint may have been written again meanwhile
        return _resolve(store, dataset_uuid, target, list_log(store, dataset_uuid), (), lazy)  # (GC rewrites them)
    except (_Damaged, _Moved, _NoBase):
        pass
    versions = sorted(damaged)
    raise CorruptMetadataError(
        f"dataset {dataset_uuid!r}: version {target} cannot be read: its checkpoint{'s' if len(versions) > 1 else ''} "
        f"of version{'s' if len(versions) > 1 else ''} {', '.join(map(str, versions))} "
        f"{'are' if len(versions) > 1 else 'is'} damaged ({damaged[versions[-1]]}), and the log entries needed "
        "to rebuild it without them are gone (garbage collection removed the entries below the checkpoint)"
    ) from damaged[versions[-1]]


def _resolve(store: Store, dataset_uuid: str, target: int, listing: LogListing, skip: tuple[int, ...],
             lazy: bool = True) -> Resolved:
    """:func:`resolve`, not using the checkpoints of the versions in ``skip`` (damaged)."""
    from kstore.core.state import decode_actions, replay

    cps = [c for c in listing.checkpoints if c <= target and c not in skip]
    cp = cps[-1] if cps else None
    listed = [v for v in listing.versions if v <= target and (cp is None or v > cp)]
    if target not in listing.versions and target != cp:
        raise VersionNotFoundError(f"dataset {dataset_uuid!r} has no version {target} (never committed, or "
                                   "expired by garbage collection)")
    entries: dict[int, LogEntry | None] = {}
    base_meta: DatasetMetadata | None = None
    chain: list[LogEntry] = []
    target_entry: LogEntry | None = None
    pending = sorted(listed, reverse=True)
    fetched_cp = False
    while True:
        batch, pending = pending[:_BATCH], pending[_BATCH:]
        want_cp = cp if (not pending and not fetched_cp and cp is not None) else None
        got, cp_meta = _fetch(store, dataset_uuid, batch, want_cp, lazy)
        fetched_cp = fetched_cp or want_cp is not None
        entries.update(got)
        found = False
        for v in batch:
            e = entries[v]
            if chain and v != chain[-1].version - 1:
                raise _Moved()  # a gap in the listing: GC deleted an entry of the chain meanwhile
            if e is None or e.expired:
                if v == target:
                    raise VersionNotFoundError(f"dataset {dataset_uuid!r}: version {target} was expired by "
                                               "garbage collection")
                raise _Moved()
            if v == target:
                target_entry = e
            if e.metadata is not None:  # format 1: the full state
                base_meta = entry_metadata(store, dataset_uuid, e)
                found = True
                break
            if not e.has_dataset:
                if v == target:
                    return Resolved(None, e)
                raise CorruptMetadataError(f"dataset {dataset_uuid!r}: version {v} (no dataset) lies in the "
                                           f"replay chain of version {target}")
            chain.append(e)
            if e.is_base:
                found = True
                break
        if found:
            break
        if not pending:
            if cp is None:
                if skip:
                    raise _NoBase()
                if listing.versions and listing.versions[0] > 0 and chain and not chain[-1].is_base:
                    raise _Moved()
                raise CorruptMetadataError(f"dataset {dataset_uuid!r}: version {target} has no checkpoint or "
                                           "base entry to replay from")
            if not fetched_cp:
                _, cp_meta = _fetch(store, dataset_uuid, [], cp, lazy)
            base_meta = cp_meta
            if cp == target:
                assert base_meta is not None
                return Resolved(base_meta, None)
            break
    # the chain is newest first; contiguous versions are required
    chain.reverse()
    expect = None
    parent_id = base_meta.commit_id if base_meta is not None else None
    for e in chain:
        if expect is not None and e.version != expect:
            raise _Moved()
        if (e.parent_commit_id is not None and parent_id is not None and e.parent == e.version - 1
                and e.parent_commit_id != parent_id):
            raise _Moved()  # the chain runs through a void claim (FORMAT.md C): list again
        expect, parent_id = e.version + 1, e.commit_id
    meta = base_meta
    if meta is not None and not meta.columnar and chain and not chain[0].is_base:
        meta = to_columnar(store, meta)  # a format-2 entry on a format-1 version
    for e in chain:
        where = f"dataset {dataset_uuid!r}: log entry of version {e.version}"
        meta = replay(meta if not e.is_base else None, decode_actions(e.actions, dataset_uuid=dataset_uuid,
                                                                        where=where), version=e.version, where=where)
    if meta is None:
        raise CorruptMetadataError(f"dataset {dataset_uuid!r}: version {target} has no base to replay from")
    if not meta.explicit_partitions:
        meta = _discover_partitions(store, meta)
    return Resolved(meta, target_entry, tuple(chain))


def load_head(store: Store, dataset_uuid: str, *, missing_store_ok: bool = False) -> Head:
    """The newest committed version: the log, read from its newest checkpoint.

    Costs: 1 get of ``_last_checkpoint`` (a hint), 1 listing of the log from there, 1 get
    of the newest checkpoint and 1 get per entry after it (in parallel; at most about
    :data:`~kstore.core.state.CHECKPOINT_INTERVAL`). A dataset without a log (kartothek,
    plateau) is read from its main file (1 get, +1 for msgpack). Listing (not probing
    ``N+1``) stays right when garbage collection removed entries (FORMAT.md, part C).
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
    for attempt in range(20):
        started = runtime.current().monotonic()
        hint = read_last_checkpoint(store, dataset_uuid) if attempt == 0 else None
        listing = list_log(store, dataset_uuid, hint)
        if hint is not None and not listing.versions and not listing.checkpoints:
            listing = list_log(store, dataset_uuid)  # a stale hint (the dataset was deleted)
        if not listing.versions:
            try:
                main, fmt = load_main(store, dataset_uuid)
            except CorruptMetadataError:
                if list_log(store, dataset_uuid).versions:
                    continue
                raise
            hint_v = main.version if main is not None else None
            if main is not None and main.version is not None and list_log(store, dataset_uuid).versions:
                continue  # the log appeared meanwhile
            cutoff = main.orphan_cutoff_ms if main is not None else None
            return Head(dataset_uuid, main, fmt, hint_v, cutoff, hint_v, started)
        newest = listing.versions[-1]
        try:
            got = resolve(store, dataset_uuid, newest, listing, newest=True)
        except _Moved:
            continue
        except VersionNotFoundError:
            continue  # expired between the listing and the get: a newer one exists; list again
        meta, entry = got.meta, got.entry
        if meta is not None and entry is not None and entry.metadata is not None:
            fmt = _main_format(store, dataset_uuid) or "json"  # a format-1 version
            meta = meta.evolve(main_format=fmt)
        else:
            fmt = meta.main_format if meta is not None else None  # type: ignore[assignment]  # checked on read
        cutoff = meta.orphan_cutoff_ms if meta is not None else (entry.orphan_cutoff_ms if entry else None)
        log.debug("dataset %r: newest version %d, %d log entr(ies) replayed after its checkpoint",
                  dataset_uuid, newest, len(got.entries))
        return Head(dataset_uuid, meta, fmt, newest, cutoff, None, started, got.entries, got.damaged)
    raise CorruptMetadataError(f"dataset {dataset_uuid!r}: the log kept changing while it was read")


def check_not_created_again(store: Store, head: Head, read_version: int | None) -> None:
    """For a dataset whose newest version records no incarnation (created before kstore
    recorded one, or by such a kstore): raise :class:`CommitConflictError` when the log
    after ``read_version`` (the version a write read) up to the head shows that the
    dataset was deleted or created again, or cannot tell (an entry of that range is gone or
    unreadable: nothing is committed then either).

    Costs nothing when the head is the version read, or when the head replayed every entry
    of the range; else 1 listing + 1 get per other entry of the range (in parallel).
    """
    uuid = head.dataset_uuid
    if head.version is None or (read_version is not None and read_version >= head.version):
        return
    wanted = range(0 if read_version is None else read_version + 1, head.version + 1)
    known: dict[int, LogEntry | None] = {e.version: e for e in head.entries}
    missing = [v for v in wanted if v not in known]
    if missing:
        listed = set(log_versions(store, uuid, after=read_version))

        def get(v: int) -> LogEntry | None:
            try:
                return load_entry(store, uuid, v) if v in listed else None
            except (VersionNotFoundError, CorruptMetadataError, LimitExceededError):
                return None

        known.update(zip(missing, parallel_map(get, missing, max_workers=16)))
    for v in wanted:
        e = known.get(v)
        if e is None:
            raise CommitConflictError(
                f"dataset {uuid!r}: the log entry of version {v}, committed after version {read_version} which "
                "this write read, is gone (expired by garbage collection) or unreadable, so kstore cannot tell "
                "whether the dataset was deleted and created again meanwhile (it was created before kstore "
                "recorded incarnations); nothing was committed: run the write again on the newest version"
            )
        if e.operation in ("create", "overwrite", "delete") or e.deletes_dataset:
            raise CommitConflictError(
                f"dataset {uuid!r} was deleted and created again (or overwritten) after version {read_version}, "
                f"which this write read: version {v} is a {e.operation!r} (the newest is {head.version}); "
                "nothing was committed"
            )


def to_columnar(store: Store, meta: DatasetMetadata) -> DatasetMetadata:
    """Format-1 (or kartothek) metadata as a columnar state: the file table joined with the
    version's statistics file, every secondary index turned into ``idx:`` value lists.
    O(partitions); a dataset pays it once, on its first format-2 commit."""
    if meta.columnar:
        return meta
    files = meta.files.with_stats(load_stats(store, meta))
    cols = [c for c in dict.fromkeys((*meta.indices, *meta.inline_indices)) if c not in meta.partition_keys]
    if cols:
        schema = load_schema(store, meta)
        for idx in load_indices(store, meta, cols, schema).values():
            files = files.merge_index(idx, files.unique_labels().to_pylist())
    return meta.with_files(files).evolve(inline_indices={})


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
    """The metadata of one retained version: its checkpoint and the log entries after it
    (1 listing + 1 get of the checkpoint + 1 get per entry after it, in parallel; +1 get of the
    next entry, which must not prove the version a void claim: FORMAT.md C)."""
    meta = resolve_version(store, dataset_uuid, version).meta
    assert meta is not None
    return meta


def resolve_version(store: Store, dataset_uuid: str, version: int, *, lazy: bool = True) -> Resolved:
    """:func:`load_version`, and how the version was built: ``damaged`` lists the
    checkpoints that were damaged and read around (a writer that keeps the version
    replayable, as garbage collection does, writes a fresh checkpoint of such a version)."""
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise VersionNotFoundError(f"dataset {dataset_uuid!r} has no version {version!r}")
    previous: LogListing | None = None
    for _ in range(20):
        listing = list_log(store, dataset_uuid)
        try:
            got = resolve(store, dataset_uuid, version, listing, lazy=lazy)
        except _Moved:
            if listing == previous:  # the same log twice: not a chain GC is changing
                raise VersionNotFoundError(
                    f"dataset {dataset_uuid!r}: version {version} cannot be rebuilt from the log (the entries "
                    "before it are gone): it was expired by garbage collection, or its entry is a void claim of "
                    "a number used before (FORMAT.md C)") from None
            previous = listing
            continue
        if got.meta is None:
            e = got.entry
            why = ("was expired by garbage collection" if e is None or e.expired
                   else f"is a {e.operation!r} record: the dataset did not exist then")
            raise VersionNotFoundError(f"dataset {dataset_uuid!r}: version {version} {why}")
        if listing.versions and successor_gone(version, set(listing.versions), listing.versions[-1]):
            raise VersionNotFoundError(
                f"dataset {dataset_uuid!r}: version {version} was expired by garbage collection (the entry "
                f"of version {version + 1} is gone), or its entry is a void claim of a number used before "
                "(FORMAT.md C)")
        if got.entry is not None and version + 1 in listing.versions:
            try:
                successor: LogEntry | None = load_entry(store, dataset_uuid, version + 1)
            except (VersionNotFoundError, CorruptMetadataError):
                successor = None
            if names_another_parent(got.entry, successor):
                raise VersionNotFoundError(
                    f"dataset {dataset_uuid!r}: version {version} is not a version of the dataset: its entry is "
                    "a void claim of a number used before (version "
                    f"{version + 1} names another parent; FORMAT.md C)")
        return got
    raise CorruptMetadataError(f"dataset {dataset_uuid!r}: the log kept changing while version {version} was read")


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
        schema = decoded_schema(pq.read_schema(pa.BufferReader(data)))
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
    if meta.columnar:  # the file table's idx: lists
        return meta.files.column_index(column, vtype)
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
    """Per-file statistics, one row per label (format 2: from the file table, no call)."""
    if meta.columnar:
        st = meta.files.stats()
        return st if "rows" in st.column_names else None
    if not meta.stats_key:
        return None
    try:
        data = store.get(meta.stats_key)
    except KeyNotFoundError:
        return None
    what = f"dataset {meta.uuid!r}: statistics file {meta.stats_key!r}"
    return check_stats_table(read_parquet_bytes(data, what), meta.schema, what=what)

