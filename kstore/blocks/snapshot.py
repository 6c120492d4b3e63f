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
>>> snap.version, snap.partition_keys, snap.num_files
(0, ('p',), 2)
>>> snap.plan(predicates=[[("p", "==", 2)]]).labels
('p=2/...',)
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import pyarrow as pa
import pyarrow.dataset as ds

from kstore.blocks import load
from kstore.blocks.frame import planned_rows, read_frame
from kstore.blocks.read import read_plan
from kstore.core.arguments import as_bool, as_columns, as_workers, predicates_or_filters, renamed
from kstore.core.commit_options import CommitOptions
from kstore.core.index import ColumnIndex
from kstore.core.metadata import DatasetMetadata
from kstore.core.operations import SchemaMode
from kstore.core.planning import ReadPlan
from kstore.core.planning import plan_read as _plan
from kstore.core.predicates import Predicates, columns_of, parse
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

    Open one with :func:`kstore.open_dataset`. It reads the same rows however often it is
    used; its typed operations (:meth:`append`, :meth:`overwrite_partitions`,
    :meth:`delete_partitions`, :meth:`delete_rows`, :meth:`build_indices`,
    :meth:`drop_indices`, :meth:`compact`) each commit one new version built on it and
    return that version's snapshot.

    Examples
    --------
    >>> import pandas as pd, kstore
    >>> _ = kstore.store_dataset("memory://snap-class", "d", pd.DataFrame({"p": [1, 2], "x": [1, 2]}), partition_on="p")
    >>> snap = kstore.open_dataset("memory://snap-class", "d")
    >>> snap
    Snapshot(dataset='d', version=0, files=2, partition_keys=['p'], indices=[], store=MemoryStore(memory://snap-class, 8 keys))
    >>> newer = snap.append(pd.DataFrame({"p": [3], "x": [3]}))
    >>> snap.read()["x"].tolist(), newer.read()["x"].tolist()
    ([1, 2], [1, 2, 3])

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
    def num_files(self) -> int:
        """Files of the version (per table: a label names one file of each table)."""
        return len(self.metadata.partitions)

    @property
    def num_partitions(self) -> int:
        """Deprecated name of :attr:`num_files`."""
        renamed("Snapshot", "num_partitions", "num_files", "it counts files, not partition values")
        return self.num_files

    @property
    def tables(self) -> tuple[str, ...]:
        return tuple(self.metadata.tables)

    @property
    def index_columns(self) -> tuple[str, ...]:
        """Columns with a secondary index (partition columns are indexed by their labels)."""
        return tuple(dict.fromkeys((*self.metadata.indices, *self.metadata.inline_indices)))

    def __repr__(self) -> str:
        return (f"Snapshot(dataset={self.dataset_uuid!r}, version={self.version}, "
                f"files={self.num_files}, partition_keys={list(self.partition_keys)}, "
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
        """The schema (of ``table``; default: the dataset's table): the column types the
        readers return, as written (``int32`` stays ``int32``); the normalized one for
        datasets kartothek or older kstore versions wrote. Cached.

        Parameters
        ----------
        table
            The table of a multi-table (kartothek) dataset; default: the dataset's table.

        Examples
        --------
        >>> import pandas as pd, kstore
        >>> _ = kstore.store_dataset("memory://snap-schema", "d", pd.DataFrame({"p": [1], "x": [1.5]}), partition_on="p")
        >>> kstore.open_dataset("memory://snap-schema", "d").schema().names
        ['p', 'x']
        """
        return self._schema(self.store, table)

    def _schema(self, store: Store, table: str | None) -> pa.Schema:
        return self._cached(("schema", table), lambda: load.load_schema(store, self.metadata, table))

    def indices(self, columns: Sequence[str], table: str | None = None) -> dict[str, ColumnIndex]:
        """The secondary indices of ``columns`` that exist (1 get each for format-1 and
        kartothek datasets, none for format 2; cached).

        Parameters
        ----------
        columns
            Column names; those without a secondary index (and partition columns) are left
            out of the result.
        table
            As for :meth:`schema`.

        Examples
        --------
        >>> import pandas as pd, kstore
        >>> _ = kstore.store_dataset("memory://snap-idx", "d", pd.DataFrame({"p": [1, 2], "x": [5, 6]}), partition_on="p",
        ...                          secondary_indices="x")
        >>> sorted(kstore.open_dataset("memory://snap-idx", "d").indices(["x", "p"]))
        ['x']
        """
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
        None for datasets written without them (kartothek, plateau).

        Examples
        --------
        >>> import pandas as pd, kstore
        >>> _ = kstore.store_dataset("memory://snap-stats", "d", pd.DataFrame({"p": [1, 1, 2], "x": [5, 6, 7]}),
        ...                          partition_on="p")
        >>> kstore.open_dataset("memory://snap-stats", "d").stats().column("rows").to_pylist()
        [2, 1]
        """
        return self._stats(self.store)

    def _stats(self, store: Store) -> pa.Table | None:
        return self._cached("stats", lambda: load.load_stats(store, self.metadata))

    # -- planning --------------------------------------------------------------------------

    def plan(self, columns: Sequence[str] | None = None, predicates: Predicates = None, *, filters: Predicates = None,
             table: str | None = None, stats: bool = False) -> ReadPlan:
        """The files that can hold rows matching ``predicates`` (DNF), with store calls counted.

        Costs beyond opening: +1 get for kartothek datasets' ``_common_metadata``, 1 get per
        secondary index a predicate uses, 1 for statistics when a predicate column has no
        index (or ``stats=True``). Loaded parts are cached, so a second plan of the same
        snapshot may cost nothing.

        Parameters
        ----------
        columns
            The columns a read would load (default: all); checked against the schema.
        predicates
            DNF ``[[(column, op, value), ...], ...]`` (see :func:`kstore.read_dataset`).
        filters
            ``predicates`` under pyarrow's, Dask's and deltalake's name (see
            :func:`kstore.read_dataset`); give one of the two.
        table
            As for :meth:`schema`.
        stats
            Load the per-file statistics even when no predicate needs them.

        Returns
        -------
        ReadPlan
            The files to read (``tasks``), the predicate, and ``store_calls``;
            ``plan.explain()`` tells why each file was kept or pruned.

        Examples
        --------
        >>> import pandas as pd, kstore
        >>> _ = kstore.store_dataset("memory://snap-plan", "d", pd.DataFrame({"p": [1, 2, 3], "x": [5, 6, 7]}),
        ...                          partition_on="p")
        >>> plan = kstore.open_dataset("memory://snap-plan", "d").plan(predicates=[[("p", ">=", 2)]])
        >>> len(plan.tasks), plan.n_files
        (2, 3)
        """
        return self.plan_with_stats(columns, predicates_or_filters(predicates, filters), table=table, stats=stats)[0]

    def plan_with_stats(self, columns: Sequence[str] | None = None, predicates: Predicates = None, *, filters: Predicates = None,
                        table: str | None = None, stats: bool = False) -> tuple[ReadPlan, pa.Table | None]:
        """:meth:`plan`, and the per-file statistics when the plan needed them or ``stats=True``.

        Parameters
        ----------
        columns, predicates, filters, table, stats
            As for :meth:`plan` (``filters`` is ``predicates`` under pyarrow's, Dask's and
            deltalake's name).

        Returns
        -------
        tuple[ReadPlan, pyarrow.Table | None]
            The plan, and the statistics table (None when neither the plan nor ``stats``
            needed it, or the dataset has none).

        Examples
        --------
        >>> import pandas as pd, kstore
        >>> _ = kstore.store_dataset("memory://snap-pws", "d", pd.DataFrame({"x": [5, 6]}))
        >>> plan, stats = kstore.open_dataset("memory://snap-pws", "d").plan_with_stats(stats=True)
        >>> len(plan.tasks), stats.num_rows
        (1, 1)
        """
        predicates = predicates_or_filters(predicates, filters)
        stats = as_bool(stats, "stats")
        counting = CountingStore(self.store)
        meta = self.metadata
        schema = self._schema(counting, table)
        dnf = parse(predicates)
        if meta.columnar:
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
                  self.version, len(plan.tasks), plan.n_files, plan.store_calls)
        return plan, file_stats

    # -- reading ---------------------------------------------------------------------------

    def read_table(self, columns: Sequence[str] | None = None, predicates: Predicates = None, *, filters: Predicates = None,
                   table: str | None = None) -> pa.Table:
        """The matching rows of this version as an Arrow table (exact: files are pruned by
        the plan, rows filtered by the predicate). A file of this version that garbage
        collection deleted because the version expired is a
        :class:`~kstore.errors.VersionNotFoundError`.

        Parameters
        ----------
        columns
            The columns to load (default: all, partition columns first).
        predicates
            DNF filter (see :func:`kstore.read_dataset`).
        filters
            ``predicates`` under pyarrow's, Dask's and deltalake's name (see
            :func:`kstore.read_dataset`); give one of the two.
        table
            As for :meth:`schema`.

        Examples
        --------
        >>> import pandas as pd, kstore
        >>> _ = kstore.store_dataset("memory://snap-rt", "d", pd.DataFrame({"p": [1, 2], "x": [5, 6]}), partition_on="p")
        >>> kstore.open_dataset("memory://snap-rt", "d").read_table(["x"], [[("x", ">", 5)]]).to_pydict()
        {'x': [6]}
        """
        plan = self.plan(columns, predicates_or_filters(predicates, filters), table=table)
        try:
            return read_plan(self.store, plan, columns)
        except CorruptMetadataError as exc:
            if isinstance(exc.__cause__, KeyNotFoundError):
                raise_if_expired(self.store, self.dataset_uuid, self.version, exc)
            raise

    def read(self, columns: Sequence[str] | None = None, predicates: Predicates = None, *, filters: Predicates = None,
             table: str | None = None, categoricals: Sequence[str] | None = None,
             dates_as_object: bool = False) -> Any:
        """:meth:`read_table` as a pandas DataFrame (the dtypes :func:`kstore.read_dataset` gives).

        Parameters
        ----------
        columns, predicates, filters, table
            As for :meth:`read_table` (``filters`` is ``predicates`` under pyarrow's, Dask's and
            deltalake's name).
        categoricals
            Columns to return as pandas ``category``.
        dates_as_object
            Date columns as Python ``datetime.date`` objects instead of ``datetime64``.

        Examples
        --------
        >>> import pandas as pd, kstore
        >>> _ = kstore.store_dataset("memory://snap-read", "d", pd.DataFrame({"p": [1, 2], "x": [5, 6]}), partition_on="p")
        >>> kstore.open_dataset("memory://snap-read", "d").read(predicates=[[("p", "==", 2)]])
           p  x
        0  2  6
        """
        plan = self.plan(columns, predicates_or_filters(predicates, filters), table=table)
        try:
            return read_frame(self.store, plan, columns, planned_rows(self.metadata, plan),
                              categoricals=categoricals, dates_as_object=dates_as_object)
        except CorruptMetadataError as exc:
            if isinstance(exc.__cause__, KeyNotFoundError):
                raise_if_expired(self.store, self.dataset_uuid, self.version, exc)
            raise

    # -- other engines ---------------------------------------------------------------------

    def to_pyarrow_dataset(self, predicates: Predicates = None, *, filters: Predicates = None,
                           table: str | None = None) -> ds.Dataset:
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
        filters
            ``predicates`` under pyarrow's, Dask's and deltalake's name (see
            :func:`kstore.read_dataset`); give one of the two.
        table
            The table of a multi-table (kartothek) dataset; default: the dataset's table.

        Returns
        -------
        pyarrow.dataset.Dataset
            Files of a local directory are opened by path; files of other stores through
            :class:`~kstore.io.arrowfs.StoreFileSystem` (the store's range reads). Once
            garbage collection expires this version its files may be gone: a scan then
            fails with ``FileNotFoundError``. Scan a dataset of another store with
            ``use_threads=False`` in a process that may exit soon after: its files are
            Python objects, and an Arrow thread that releases one while the interpreter
            exits aborts the process (apache/arrow#34314, #50482; kstore's own readers
            scan such files on the calling thread).

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
        dataset, renamed = self._files_dataset(predicates_or_filters(predicates, filters), table)
        if renamed:
            raise InvalidArgumentError(
                f"dataset {self.dataset_uuid!r} version {self.version}: column(s) {sorted(renamed)} are stored under "
                f"other names in the data files ({renamed}: renamed, or added again after a drop), which a pyarrow "
                "dataset cannot map; use to_duckdb / to_polars (they map the names), Snapshot.read_table / "
                "kstore.read_table, or Dask / Spark")
        return dataset

    def _files_dataset(self, predicates: Predicates, table: str | None) -> tuple[ds.Dataset, dict[str, str]]:
        """This version's planned files as a ``pyarrow.dataset`` with the predicate attached,
        renamed columns under their file names (as the files hold them), and those names:
        ``{name: file name}`` (empty for a dataset that never renamed a column)."""
        from kstore.blocks.arrow import plan_dataset
        from kstore.blocks.read import files_expression, nan_safe
        from kstore.core.columns import file_names
        from kstore.core.types import read_schema

        plan = self.plan(predicates=predicates, table=table)
        renames = file_names(plan.schema)
        dataset = plan_dataset(self.store, plan, in_files=True)
        if plan.predicates is None:
            return dataset, renames
        rschema = read_schema(plan.schema)
        if not nan_safe(plan.predicates, rschema):
            raise InvalidArgumentError(
                f"dataset {self.dataset_uuid!r}: a '!=' or 'not in' predicate on a float column cannot be "
                "attached to a pyarrow dataset exactly (Arrow prunes row groups by statistics that leave "
                "NaN out, losing NaN rows); read with Snapshot.read_table or filter after scanning")
        return dataset.filter(files_expression(plan.predicates, rschema, renames)), renames

    def to_duckdb(self, table_name: str, connection: Any = None, *, predicates: Any = None, filters: Any = None,
                  table: str | None = None) -> Any:
        """Register this version (:meth:`to_pyarrow_dataset`) as ``table_name`` on a DuckDB
        connection (a new in-memory one by default) and return the connection.

        DuckDB scans the Arrow dataset lazily and pushes its projections and filters into
        it, so only this version's files are read, and only the partitions a filter on a
        partition column can match. A version with renamed columns
        (:func:`kstore.rename_columns`) is registered under ``<table_name>__kstore_files``
        in the files' names, and ``table_name`` is a view giving each column its name.
        Needs ``pip install duckdb``.

        Parameters
        ----------
        table_name
            The name SQL refers to.
        connection
            A ``duckdb.DuckDBPyConnection``; default: ``duckdb.connect()``.
        predicates, filters, table
            As for :meth:`to_pyarrow_dataset` (``filters`` is ``predicates`` under pyarrow's,
            Dask's and deltalake's name).

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
        dataset, renames = self._files_dataset(predicates_or_filters(predicates, filters), table)
        if not renames:
            con.register(table_name, dataset)
            return con
        # renamed columns: the files' names, mapped back by a view (DuckDB pushes its
        # projections and filters through it into the Arrow scan)
        def quoted(name: str) -> str:
            return '"' + name.replace('"', '""') + '"'

        files = f"{table_name}__kstore_files"
        con.register(files, dataset)
        name_of = {fn: n for n, fn in renames.items()}
        select = ", ".join(f"{quoted(fn)} AS {quoted(name_of.get(fn, fn))}" for fn in dataset.schema.names)
        con.execute(f"CREATE OR REPLACE VIEW {quoted(table_name)} AS SELECT {select} FROM {quoted(files)}")
        return con

    def to_polars(self, predicates: Predicates = None, *, filters: Predicates = None, table: str | None = None) -> Any:
        """This version as a Polars ``LazyFrame`` over :meth:`to_pyarrow_dataset`.

        Renamed columns (:func:`kstore.rename_columns`) are read under their file names and
        renamed in the frame. Polars evaluates its own filters after the scan (``allow_pyarrow_filter=False``):
        pushed into Arrow they would be pruned by Parquet statistics that leave NaN out and
        could lose rows. Pass ``predicates`` to skip files (partition values, indices,
        statistics) before Polars sees them. Needs ``pip install polars``.

        Parameters
        ----------
        predicates, filters, table
            As for :meth:`to_pyarrow_dataset` (``filters`` is ``predicates`` under pyarrow's,
            Dask's and deltalake's name).

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

        dataset, renames = self._files_dataset(predicates_or_filters(predicates, filters), table)
        lazy = pl.scan_pyarrow_dataset(dataset, allow_pyarrow_filter=False)
        return lazy.rename({fn: n for n, fn in renames.items()}) if renames else lazy

    # -- typed operations: each is one commit built on this version -------------------------

    def append(self, data: Any, *, secondary_indices: str | Sequence[str] | None = None,
               schema_mode: SchemaMode = "strict", write_options: Any = None,
               sort_by: str | Sequence[str] | None = None,
               options: CommitOptions | Mapping[str, Any] | None = None) -> Snapshot:
        """Add ``data`` as new files; one commit. Returns the committed version's snapshot.

        Appends commute: versions committed after this one do not conflict with it.

        Parameters
        ----------
        data
            A pandas DataFrame, a pyarrow Table, or an iterable of them (streamed).
        secondary_indices
            Columns to index in addition to the dataset's indices.
        schema_mode
            ``"strict"`` (the schema must match) or ``"merge"`` (new columns are added,
            columns widen where no value changes: docs/guides/schema.md).
        write_options, sort_by
            How the files are encoded (:class:`~kstore.WriteOptions`), clustering columns.
        options
            :class:`~kstore.CommitOptions` (or a dict): ``txn``, ``max_attempts``,
            ``metadata``, ``info``.

        Examples
        --------
        >>> import pandas as pd, kstore
        >>> _ = kstore.store_dataset("memory://snap-append", "d", pd.DataFrame({"p": [1], "x": [1]}), partition_on="p")
        >>> snap = kstore.open_dataset("memory://snap-append", "d")
        >>> new = snap.append(pd.DataFrame({"p": [2], "x": [2]}), options={"info": {"job": "load-7"}})
        >>> new.version, new.read()["x"].tolist(), new.history()[-1].info
        (1, [1, 2], {'job': 'load-7'})
        """
        return self._write(data, "append", None, secondary_indices, schema_mode, write_options, sort_by, options)

    def overwrite_partitions(self, data: Any, *, schema_mode: SchemaMode = "strict",
                             write_options: Any = None, sort_by: str | Sequence[str] | None = None,
                             options: CommitOptions | Mapping[str, Any] | None = None) -> Snapshot:
        """Replace every partition ``data`` has rows for with ``data``; one commit.

        The partitions replaced are those of this version. If a version committed after
        this one removed one of them or added files to them, the commit fails with
        :class:`~kstore.errors.CommitConflictError` and nothing changes (the overwrite did
        not see those rows); appends to other partitions commute.

        Parameters
        ----------
        data
            The new rows (they must carry the partition columns).
        schema_mode, write_options, sort_by, options
            As for :meth:`append`.

        Examples
        --------
        >>> import pandas as pd, kstore
        >>> _ = kstore.store_dataset("memory://snap-ow", "d", pd.DataFrame({"p": [1, 2], "x": [1, 2]}), partition_on="p")
        >>> snap = kstore.open_dataset("memory://snap-ow", "d")
        >>> snap.overwrite_partitions(pd.DataFrame({"p": [2], "x": [20]})).read()["x"].tolist()
        [1, 20]
        """
        return self._write(data, "overwrite_partitions", None, None, schema_mode, write_options, sort_by, options)

    def delete_partitions(self, scope: Sequence[Mapping[str, Any]], *,
                          options: CommitOptions | Mapping[str, Any] | None = None) -> Snapshot:
        """Remove the partitions matching ``scope`` (``[{partition column: value}, ...]``).

        Conflicts as :meth:`overwrite_partitions`: a later version that added files to a
        matching partition, or removed one, makes it fail. A scope matching nothing
        commits nothing and returns this snapshot.

        Parameters
        ----------
        scope
            ``[{partition column: value}, ...]``: a partition matching every item of one
            dict is removed.
        options
            As for :meth:`append`.

        Examples
        --------
        >>> import pandas as pd, kstore
        >>> _ = kstore.store_dataset("memory://snap-dp", "d", pd.DataFrame({"p": [1, 2], "x": [1, 2]}), partition_on="p")
        >>> kstore.open_dataset("memory://snap-dp", "d").delete_partitions([{"p": 1}]).read()["x"].tolist()
        [2]
        """
        return self._write(None, "append", scope, None, "strict", None, None, options)

    def delete_rows(self, predicates: Any, *, options: CommitOptions | Mapping[str, Any] | None = None) -> Snapshot:
        """Delete the rows matching ``predicates`` (DNF) by rewriting the files holding them.

        A version committed after this one that removed an affected file, or added a file
        the predicate may match (by partition values, indices, statistics), makes it fail
        with :class:`~kstore.errors.CommitConflictError`. No matching row: nothing is
        committed and this snapshot comes back.

        Parameters
        ----------
        predicates
            DNF ``[[(column, op, value), ...], ...]``: the rows to delete.
        options
            As for :meth:`append`.

        Examples
        --------
        >>> import pandas as pd, kstore
        >>> _ = kstore.store_dataset("memory://snap-dr", "d", pd.DataFrame({"p": [1, 1], "x": [5, 6]}), partition_on="p")
        >>> kstore.open_dataset("memory://snap-dr", "d").delete_rows([[("x", "==", 6)]]).read()["x"].tolist()
        [5]
        """
        from kstore.blocks import mutate

        opts = CommitOptions.of(options)
        return self._next(mutate.delete_rows(self.store, self.dataset_uuid, predicates, base=self.metadata,
                                             options=opts))

    def update_rows(self, predicates: Any, set: Mapping[str, Any], *,  # noqa: A002 - SQL's word, as kstore.update_rows
                    options: CommitOptions | Mapping[str, Any] | None = None) -> Snapshot:
        """Set columns to constant values in the rows matching ``predicates`` (DNF) by
        rewriting the files holding them (:func:`kstore.update_rows`); the conflict rule of
        :meth:`delete_rows`. No matching row: nothing is committed and this snapshot comes back.

        Parameters
        ----------
        predicates
            DNF ``[[(column, op, value), ...], ...]``: the rows to update.
        set
            ``{column: value}``: the new values (converted exactly to the columns' types).
        options
            As for :meth:`append`.

        Examples
        --------
        >>> import pandas as pd, kstore
        >>> _ = kstore.store_dataset("memory://snap-ur", "d", pd.DataFrame({"p": [1, 1], "x": [5, 6]}), partition_on="p")
        >>> kstore.open_dataset("memory://snap-ur", "d").update_rows([[("x", "==", 6)]], {"x": 60}).read()["x"].tolist()
        [5, 60]
        """
        from kstore.blocks import mutate

        opts = CommitOptions.of(options)
        return self._next(mutate.update_rows(self.store, self.dataset_uuid, predicates, set, base=self.metadata,
                                             options=opts).dataset)

    def merge(self, source: Any, on: str | Sequence[str], *, when_matched: str = "update",
              when_not_matched: str = "insert", when_not_matched_by_source: str = "ignore",
              options: CommitOptions | Mapping[str, Any] | None = None) -> Snapshot:
        """Upsert ``source`` by the key columns ``on`` into this version (:func:`kstore.merge`;
        the row counts are in the new version's ``history()`` info). A version committed
        after this one that removed a file the merge rewrites, or added one its keys may match,
        makes it fail with :class:`~kstore.errors.CommitConflictError` (Iceberg's "validate
        from snapshot"); so does a planned file garbage collection deleted meanwhile.

        Parameters
        ----------
        source
            A pandas DataFrame or Arrow table with the dataset's columns, one row per key.
        on
            The key column(s).
        when_matched, when_not_matched, when_not_matched_by_source
            As for :func:`kstore.merge`.
        options
            As for :meth:`append`.

        Examples
        --------
        >>> import pandas as pd, kstore
        >>> _ = kstore.store_dataset("memory://snap-mg", "d", pd.DataFrame({"k": [1, 2], "x": [5, 6]}))
        >>> new = kstore.open_dataset("memory://snap-mg", "d").merge(pd.DataFrame({"k": [2, 3], "x": [60, 7]}), "k")
        >>> sorted(new.read()["x"].tolist()), new.history()[-1].info["inserted"]
        ([5, 7, 60], 1)
        """
        from kstore.blocks import merge as merging

        request = merging.MergeRequest.of(self.dataset_uuid, on, when_matched, when_not_matched,
                                          when_not_matched_by_source)
        opts = CommitOptions.of(options)
        return self._next(merging.merge(self.store, self.dataset_uuid, source, request, base=self.metadata,
                                        options=opts).dataset)

    def restore(self, *, options: CommitOptions | Mapping[str, Any] | None = None) -> Snapshot:
        """Make this version the newest again, as a new version (:func:`kstore.restore`);
        returns the snapshot of that version (this one when it is the newest already).

        Parameters
        ----------
        options
            As for :meth:`append`.

        Examples
        --------
        >>> import pandas as pd, kstore
        >>> _ = kstore.store_dataset("memory://snap-rs", "d", pd.DataFrame({"x": [1]}))
        >>> _ = kstore.update_dataset("memory://snap-rs", "d", pd.DataFrame({"x": [2]}))
        >>> back = kstore.open_dataset("memory://snap-rs", "d", version=0).restore()
        >>> back.version, back.read()["x"].tolist()
        (2, [1])
        """
        from kstore.blocks import restore as restoring

        assert self.version is not None
        meta = restoring.restore(self.store, self.dataset_uuid, self.version, options=CommitOptions.of(options))
        return self._next(meta)

    def build_indices(self, columns: str | Sequence[str], *,
                      options: CommitOptions | Mapping[str, Any] | None = None) -> Snapshot:
        """Build secondary indices of ``columns`` over every file; files committed after this
        version are indexed at commit time (never a conflict).

        Parameters
        ----------
        columns
            Column(s) to index; partition columns are indexed by their labels and skipped.
        options
            As for :meth:`append`.

        Examples
        --------
        >>> import pandas as pd, kstore
        >>> _ = kstore.store_dataset("memory://snap-bi", "d", pd.DataFrame({"p": [1, 2], "x": [5, 6]}), partition_on="p")
        >>> kstore.open_dataset("memory://snap-bi", "d").build_indices("x").index_columns
        ('x',)
        """
        from kstore.blocks import mutate

        cols = list(as_columns(columns, "columns"))
        opts = CommitOptions.of(options)
        return self._next(mutate.build_indices(self.store, self.dataset_uuid, cols, base=self.metadata,
                                               options=opts))

    def drop_indices(self, columns: str | Sequence[str], *,
                     options: CommitOptions | Mapping[str, Any] | None = None) -> Snapshot:
        """Drop the secondary indices of ``columns`` (no data file is touched).

        Parameters
        ----------
        columns
            Indexed column(s); a column without an index is an
            :class:`~kstore.errors.InvalidArgumentError`.
        options
            As for :meth:`append`.

        Examples
        --------
        >>> import pandas as pd, kstore
        >>> _ = kstore.store_dataset("memory://snap-di", "d", pd.DataFrame({"p": [1], "x": [5]}), partition_on="p",
        ...                          secondary_indices="x")
        >>> kstore.open_dataset("memory://snap-di", "d").drop_indices("x").index_columns
        ()
        """
        from kstore.blocks import mutate

        cols = list(as_columns(columns, "columns"))
        opts = CommitOptions.of(options)
        return self._next(mutate.drop_indices(self.store, self.dataset_uuid, cols, base=self.metadata,
                                              options=opts))

    def compact(self, *, target_file_size: int | None = None, min_files: int = 2,
                partitions: Sequence[Mapping[str, Any]] | None = None, predicates: Any = None,
                write_options: Any = None, sort_by: str | Sequence[str] | None = None,
                max_workers: int | None = None, progress: Any = None,
                options: CommitOptions | Mapping[str, Any] | None = None) -> Snapshot:
        """Merge this version's small files per partition (see :func:`kstore.compact`).

        A later version that removed a file this merges makes it fail with
        :class:`~kstore.errors.CommitConflictError`; files appended meanwhile are kept.
        Nothing to merge: this snapshot comes back.

        Parameters
        ----------
        target_file_size
            Bytes per merged file, at most (default 128 MiB).
        min_files
            A partition with fewer small files than this is left alone.
        partitions
            ``[{partition column: value}, ...]``: compact only these partitions.
        predicates
            A DNF: compact only the files its plan keeps.
        write_options, sort_by
            How the merged files are encoded (``sort_by`` clusters them).
        max_workers
            Threads rewriting groups of files (default: one per CPU).
        progress
            ``progress(done, total)`` is called after each rewritten group.
        options
            As for :meth:`append` (``info`` is merged into the compaction's counts).

        Examples
        --------
        >>> import pandas as pd, kstore
        >>> _ = kstore.store_dataset("memory://snap-c", "d", pd.DataFrame({"x": [1]}))
        >>> snap = kstore.open_dataset("memory://snap-c", "d")
        >>> snap = snap.append(pd.DataFrame({"x": [2]})).append(pd.DataFrame({"x": [3]}))
        >>> snap.num_files, snap.compact().num_files
        (3, 1)
        """
        from kstore.blocks.compact import CompactionRequest, finish_compaction, plan_compaction, rewrite_groups

        max_workers = as_workers(max_workers)  # before any store call
        opts = CommitOptions.of(options)
        plan = plan_compaction(self.store, self.dataset_uuid, CompactionRequest.of(
            self.dataset_uuid, target_file_size=target_file_size, min_files=min_files, partitions=partitions,
            predicates=predicates, write_options=write_options, sort_by=sort_by, txn=opts.txn), base=self.metadata)
        if not plan.groups:
            return self
        files = rewrite_groups(self.store, plan, max_workers=max_workers, progress=progress)
        return self._next(finish_compaction(self.store, plan, files, options=opts)[1])

    def _write(self, data: Any, mode: Literal["append", "overwrite_partitions"],
               scope: Sequence[Mapping[str, Any]] | None, secondary_indices: str | Sequence[str] | None,
               schema_mode: SchemaMode, write_options: Any, sort_by: str | Sequence[str] | None,
               options: CommitOptions | Mapping[str, Any] | None) -> Snapshot:
        from kstore.blocks.job import WriteRequest, finish_write, prepare_write, write_files

        job = prepare_write(self.store, self.dataset_uuid, WriteRequest.of(
            self.dataset_uuid, mode, base=self.metadata, must_exist=True, secondary_indices=secondary_indices,
            schema_mode=schema_mode, delete_scope=scope, write_options=write_options, sort_by=sort_by,
            commit_options=options))
        if job.already_committed:
            return self
        files, schema = write_files(job, data) if data is not None else ([], None)
        return self._next(finish_write(job, files, schema))

    def _next(self, meta: DatasetMetadata) -> Snapshot:
        """The snapshot of a commit's result (this one when nothing was committed)."""
        if meta is self.metadata or (meta.version is not None and meta.version == self.version):
            return self
        return Snapshot(store=self.store, metadata=meta)

    def history(self) -> list[Any]:
        """The retained versions up to and including this one, oldest first.

        Examples
        --------
        >>> import pandas as pd, kstore
        >>> _ = kstore.store_dataset("memory://snap-hist", "d", pd.DataFrame({"x": [1]}))
        >>> _ = kstore.update_dataset("memory://snap-hist", "d", pd.DataFrame({"x": [2]}))
        >>> [h.operation for h in kstore.open_dataset("memory://snap-hist", "d", version=0).history()]
        ['create']
        """
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
