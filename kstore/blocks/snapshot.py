"""A :class:`Snapshot`: one committed version of a dataset, the object readers work on.

``open_snapshot(store, uuid, version=None, as_of=None)`` resolves the version once (the
newest, a retained ``version``, or the one current at ``as_of``) and loads its metadata.
Everything else is loaded lazily and cached on the snapshot: the schema, the secondary
indices a predicate needs, the per-file statistics. A snapshot never changes: reading it
twice gives the same rows until garbage collection expires its version.

Every driver plans through it (eager, iterator, Dask, Spark), so version resolution and
the planning call budget live here once.

Examples
--------
>>> import pandas as pd, kstore
>>> kstore.store_dataset("memory://snap-doc", "d", pd.DataFrame({"p": [1, 2], "x": [3, 4]}), partition_on=["p"])
... # doctest: +ELLIPSIS
DatasetMetadata(...)
>>> snap = kstore.open_dataset("memory://snap-doc", "d")
>>> snap.version, snap.partition_keys, snap.num_partitions
(0, ('p',), 2)
>>> snap.plan(predicates=[[("p", "==", 2)]]).partitions
('p=2/...',)
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds

from kstore.blocks import load
from kstore.blocks.read import read_plan, to_pandas
from kstore.core.index import ColumnIndex
from kstore.core.metadata import DatasetMetadata
from kstore.core.planning import ReadPlan
from kstore.core.planning import plan_read as _plan
from kstore.core.predicates import columns_of, parse
from kstore.errors import CorruptMetadataError, InvalidArgumentError, KeyNotFoundError, VersionNotFoundError
from kstore.io.store import CountingStore, Store

log = logging.getLogger("kstore.read")

__all__ = ["Snapshot", "open_snapshot", "resolve_metadata", "raise_if_expired"]


def resolve_metadata(store: Store, dataset_uuid: str, version: int | None = None,
                     as_of: datetime | None = None) -> DatasetMetadata:
    """The metadata of the newest version, of a retained ``version``, or of the version
    current at ``as_of`` (validated arguments; pass at most one of the two)."""
    if as_of is not None:
        from kstore.blocks.history import version_as_of

        if version is not None:
            raise InvalidArgumentError("pass version or as_of, not both")
        version = version_as_of(store, dataset_uuid, as_of)
    if version is None:
        return load.load_metadata(store, dataset_uuid)[0]
    return load.load_version(store, dataset_uuid, version)


def open_snapshot(store: Store, dataset_uuid: str, *, version: int | None = None,
                  as_of: datetime | None = None) -> Snapshot:
    """Resolve and load one committed version (see the module docstring for the costs)."""
    counting = CountingStore(store)
    meta = resolve_metadata(counting, dataset_uuid, version, as_of)
    return Snapshot(store=store, metadata=meta, open_calls=dict(counting.calls))


@dataclass(frozen=True, eq=False)
class Snapshot:
    """One committed version of a dataset (immutable; lazily loaded parts are cached).

    Attributes
    ----------
    store:
        The store it was read from.
    metadata:
        The version's :class:`~kstore.core.metadata.DatasetMetadata`.
    open_calls:
        Store calls made to resolve and load the version (``{"get": n, "iter_prefix": m}``);
        plans add them to their own count.
    """

    store: Store
    metadata: DatasetMetadata
    open_calls: Mapping[str, int] = field(default_factory=dict)
    _cache: dict[Any, Any] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    # -- what the version is ------------------------------------------------------------

    @property
    def dataset_uuid(self) -> str:
        return self.metadata.uuid

    @property
    def version(self) -> int | None:
        """The kstore version number (None for a dataset only kartothek/plateau wrote)."""
        return self.metadata.version

    @property
    def partition_keys(self) -> tuple[str, ...]:
        return tuple(self.metadata.partition_keys)

    @property
    def num_partitions(self) -> int:
        return len(self.metadata.partitions)

    @property
    def tables(self) -> tuple[str, ...]:
        return tuple(self.metadata.tables)

    @property
    def index_columns(self) -> tuple[str, ...]:
        """Columns with a secondary index (partition columns are indexed by their labels)."""
        return tuple(dict.fromkeys((*self.metadata.indices, *self.metadata.inline_indices)))

    def __repr__(self) -> str:
        return (f"Snapshot(dataset={self.dataset_uuid!r}, version={self.version}, "
                f"partitions={self.num_partitions}, partition_keys={list(self.partition_keys)}, "
                f"indices={list(self.index_columns)}, store={self.store!r})")

    # -- lazily loaded parts ---------------------------------------------------------------

    def _cached(self, key: Any, load_it: Any) -> Any:
        with self._lock:
            if key in self._cache:
                return self._cache[key]
        value = load_it()
        with self._lock:
            return self._cache.setdefault(key, value)

    def schema(self, table: str | None = None) -> pa.Schema:
        """The normalized schema (of ``table``; default: the dataset's table)."""
        return self._schema(self.store, table)

    def _schema(self, store: Store, table: str | None) -> pa.Schema:
        return self._cached(("schema", table), lambda: load.load_schema(store, self.metadata, table))

    def indices(self, columns: Sequence[str], table: str | None = None) -> dict[str, ColumnIndex]:
        """The secondary indices of ``columns`` that exist (1 get each, cached)."""
        return self._indices(self.store, columns, table)

    def _indices(self, store: Store, columns: Sequence[str], table: str | None) -> dict[str, ColumnIndex]:
        meta = self.metadata
        wanted = [c for c in dict.fromkeys(columns) if c not in meta.partition_keys
                  and (c in meta.indices or c in meta.inline_indices)]
        missing = [c for c in wanted if ("index", c) not in self._cache]
        if missing:
            loaded = load.load_indices(store, meta, missing, self._schema(store, table))
            with self._lock:
                for c, idx in loaded.items():
                    self._cache.setdefault(("index", c), idx)
        return {c: self._cache[("index", c)] for c in wanted if ("index", c) in self._cache}

    def stats(self) -> pa.Table | None:
        """Per-file statistics (rows, bytes, min/max/null count per column): 1 get, cached.
        None for datasets written without them (kartothek, plateau)."""
        return self._stats(self.store)

    def _stats(self, store: Store) -> pa.Table | None:
        return self._cached("stats", lambda: load.load_stats(store, self.metadata))

    # -- planning --------------------------------------------------------------------------

    def plan(self, columns: Sequence[str] | None = None, predicates: Any = None, *,
             table: str | None = None, stats: bool = False) -> ReadPlan:
        """The files that can hold rows matching ``predicates`` (DNF), with store calls counted.

        Costs beyond opening: +1 get for kartothek datasets' ``_common_metadata``, 1 get per
        secondary index a predicate uses, 1 for statistics when a predicate column has no
        index (or ``stats=True``). Loaded parts are cached, so a second plan of the same
        snapshot may cost nothing.
        """
        return self.plan_with_stats(columns, predicates, table=table, stats=stats)[0]

    def plan_with_stats(self, columns: Sequence[str] | None = None, predicates: Any = None, *,
                        table: str | None = None, stats: bool = False) -> tuple[ReadPlan, pa.Table | None]:
        """:meth:`plan`, and the per-file statistics when the plan needed them or ``stats=True``."""
        counting = CountingStore(self.store)
        meta = self.metadata
        schema = self._schema(counting, table)
        dnf = parse(predicates)
        if meta.files is not None:
            # format 2: index values and statistics are columns of the file table; the
            # planner reads them there (no index to build, no call)
            indices: dict[str, ColumnIndex] = {}
            file_stats = None
        else:
            indices = self._indices(counting, columns_of(dnf), table)
            need_stats = any(
                t.column not in meta.partition_keys and (t.column not in indices or t.op == "is null")
                for conj in dnf or () for t in conj
            )
            file_stats = self._stats(counting) if need_stats else None
        calls = dict(self.open_calls)
        for name, n in counting.calls.items():
            calls[name] = calls.get(name, 0) + n
        plan = _plan(meta, schema, predicates, columns, indices=indices, stats=file_stats, table=table,
                     store_calls=calls)
        if stats and file_stats is None:
            file_stats = self._stats(self.store)  # asked for, not a planning call
        log.debug("dataset %r version %s: %d of %d file(s) planned, %d store call(s)", self.dataset_uuid,
                  self.version, len(plan.tasks), plan.n_partitions, plan.store_calls)
        return plan, file_stats

    # -- reading ---------------------------------------------------------------------------

    def read_table(self, columns: Sequence[str] | None = None, predicates: Any = None, *,
                   table: str | None = None) -> pa.Table:
        """The matching rows of this version as an Arrow table (exact: files are pruned by
        the plan, rows filtered by the predicate). A file of this version that garbage
        collection deleted because the version expired is a
        :class:`~kstore.errors.VersionNotFoundError`."""
        plan = self.plan(columns, predicates, table=table)
        try:
            return read_plan(self.store, plan, columns)
        except CorruptMetadataError as exc:
            if isinstance(exc.__cause__, KeyNotFoundError):
                raise_if_expired(self.store, self.dataset_uuid, self.version, exc)
            raise

    def read(self, columns: Sequence[str] | None = None, predicates: Any = None, *,
             table: str | None = None, categoricals: Sequence[str] | None = None,
             dates_as_object: bool = False) -> Any:
        """:meth:`read_table` as a pandas DataFrame (the dtypes :func:`kstore.read_dataset` gives)."""
        result = self.read_table(columns, predicates, table=table)
        return to_pandas(result, self.schema(table), categoricals=categoricals, dates_as_object=dates_as_object)

    # -- other engines ---------------------------------------------------------------------

    def to_pyarrow_dataset(self, predicates: Any = None, *, table: str | None = None) -> ds.Dataset:
        """This version as a ``pyarrow.dataset.Dataset``: exactly its files, nothing else.

        Reading a kstore directory with ``pyarrow.dataset.dataset(path)`` (or DuckDB's
        ``read_parquet``, Polars' ``scan_parquet``) also reads files of replaced partitions,
        deleted rows and failed writes, which stay until garbage collection. This dataset
        holds one fragment per file of this version, each with its partition values as its
        ``partition_expression`` (filters on partition columns skip whole files; the columns
        are filled as constants), under the version's read schema.

        Parameters
        ----------
        predicates
            Optional DNF (as for :func:`kstore.read_dataset`): only the files that can hold
            a match are included (partition values, secondary indices, statistics), and the
            predicate is attached as the dataset's row filter, so every scan of it returns
            exactly the matching rows. A ``!=`` / ``not in`` on a float column is refused
            (:class:`~kstore.errors.InvalidArgumentError`): Arrow prunes row groups by
            statistics that leave NaN out and would lose NaN rows; use :meth:`read_table`.
        table
            The table of a multi-table (kartothek) dataset; default: the dataset's table.

        Returns
        -------
        pyarrow.dataset.Dataset
            Files of a local directory are opened by path; files of other stores through
            :class:`~kstore.io.arrowfs.StoreFileSystem` (the store's range reads). Once
            garbage collection expires this version its files may be gone: a scan then
            fails with ``FileNotFoundError``.

        Examples
        --------
        >>> import pandas as pd, kstore
        >>> df = pd.DataFrame({"p": [1, 1, 2], "x": [10, 20, 30]})
        >>> _ = kstore.store_dataset("memory://pads", "d", df, partition_on=["p"])
        >>> _ = kstore.update_dataset("memory://pads", "d", pd.DataFrame({"p": [1], "x": [5]}), mode="overwrite_partitions")
        >>> dataset = kstore.open_dataset("memory://pads", "d").to_pyarrow_dataset()
        >>> sorted(dataset.to_table()["x"].to_pylist())
        [5, 30]
        >>> old = kstore.open_dataset("memory://pads", "d", version=0).to_pyarrow_dataset()
        >>> old.count_rows()
        3
        """
        from kstore.blocks.arrow import plan_dataset
        from kstore.blocks.read import nan_safe
        from kstore.core.predicates import to_expression
        from kstore.core.types import read_schema

        plan = self.plan(predicates=predicates, table=table)
        dataset = plan_dataset(self.store, plan)
        if plan.predicates is None:
            return dataset
        rschema = read_schema(plan.schema)
        if not nan_safe(plan.predicates, rschema):
            raise InvalidArgumentError(
                f"dataset {self.dataset_uuid!r}: a '!=' or 'not in' predicate on a float column cannot be "
                "attached to a pyarrow dataset exactly (Arrow prunes row groups by statistics that leave "
                "NaN out, losing NaN rows); read with Snapshot.read_table or filter after scanning")
        return dataset.filter(to_expression(plan.predicates, rschema))

    def to_duckdb(self, table_name: str, connection: Any = None, *, predicates: Any = None,
                  table: str | None = None) -> Any:
        """Register this version (:meth:`to_pyarrow_dataset`) as ``table_name`` on a DuckDB
        connection (a new in-memory one by default) and return the connection.

        DuckDB scans the Arrow dataset lazily and pushes its projections and filters into
        it, so only this version's files are read, and only the partitions a filter on a
        partition column can match. Needs ``pip install duckdb``.

        Parameters
        ----------
        table_name
            The name SQL refers to.
        connection
            A ``duckdb.DuckDBPyConnection``; default: ``duckdb.connect()``.
        predicates, table
            As for :meth:`to_pyarrow_dataset`.

        Examples
        --------
        >>> import pandas as pd, kstore
        >>> df = pd.DataFrame({"p": [1, 1, 2], "x": [10, 20, 30]})
        >>> _ = kstore.store_dataset("memory://duck-doc", "d", df, partition_on=["p"])
        >>> con = kstore.open_dataset("memory://duck-doc", "d").to_duckdb("d")
        >>> con.execute("SELECT p, sum(x) FROM d GROUP BY p ORDER BY p").fetchall()
        [(1, 30), (2, 30)]
        """
        import duckdb

        con = duckdb.connect() if connection is None else connection
        con.register(table_name, self.to_pyarrow_dataset(predicates, table=table))
        return con

    def to_polars(self, predicates: Any = None, *, table: str | None = None) -> Any:
        """This version as a Polars ``LazyFrame`` over :meth:`to_pyarrow_dataset`.

        Polars evaluates its own filters after the scan (``allow_pyarrow_filter=False``):
        pushed into Arrow they would be pruned by Parquet statistics that leave NaN out and
        could lose rows. Pass ``predicates`` to skip files (partition values, indices,
        statistics) before Polars sees them. Needs ``pip install polars``.

        Parameters
        ----------
        predicates, table
            As for :meth:`to_pyarrow_dataset`.

        Examples
        --------
        >>> import pandas as pd, polars as pl, kstore
        >>> df = pd.DataFrame({"p": [1, 1, 2], "x": [10, 20, 30]})
        >>> _ = kstore.store_dataset("memory://polars-doc", "d", df, partition_on=["p"])
        >>> lazy = kstore.open_dataset("memory://polars-doc", "d").to_polars()
        >>> lazy.filter(pl.col("x") > 15).select(pl.col("x").sum()).collect().item()
        50
        """
        import polars as pl

        return pl.scan_pyarrow_dataset(self.to_pyarrow_dataset(predicates, table=table), allow_pyarrow_filter=False)

    def history(self) -> list[Any]:
        """The retained versions up to and including this one, oldest first."""
        from kstore.blocks.history import history

        return [h for h in history(self.store, self.dataset_uuid)
                if self.version is None or h.version <= self.version]


def raise_if_expired(store: Store, dataset_uuid: str, version: int | None, exc: Exception) -> None:
    """Raise :class:`VersionNotFoundError` when ``version`` was expired (a read of it found
    files missing because garbage collection removed them); return otherwise."""
    if version is None:
        return
    try:
        entry = load.load_entry(store, dataset_uuid, version)
    except VersionNotFoundError as gone:
        raise VersionNotFoundError(
            f"dataset {dataset_uuid!r}: version {version} was expired by garbage collection while it was read"
        ) from gone
    if entry.expired:
        raise VersionNotFoundError(
            f"dataset {dataset_uuid!r}: version {version} was expired by garbage collection while it was read"
        ) from exc
