"""The files of one dataset version as columns, and the actions that change them (pure).

This is the in-memory state of format 2 (docs/design/format-2.md): one row per data file
(``label``, ``table``, ``key``) plus its statistics (``rows``, ``bytes``, ``min:<col>``,
``max:<col>``, ``nulls:<col>``, the layout of ``_kstore/stats`` files), held as one Arrow
table. A commit's change is an :class:`Actions` value (files added with their statistics,
labels removed, small state set) that encodes to a few KiB of JSON whatever the size of
the dataset, and :meth:`FileTable.apply` replays it with array kernels: no Python object
per partition.

Examples
--------
>>> ft = FileTable.from_partitions({"p=1/a": {"table": "d/table/p=1/a.parquet"}})
>>> add = FileTable.from_partitions({"p=2/b": {"table": "d/table/p=2/b.parquet"}}).table
>>> ft = ft.apply(Actions(add=add, remove=("p=1/a",)))
>>> ft.partitions()
{'p=2/b': {'table': 'd/table/p=2/b.parquet'}}
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import chain
from types import MappingProxyType
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kstore.core.index import ColumnIndex, index_storage_type
from kstore.core.stats import FileStats, bound_type, in_microseconds, stats_table
from kstore.core.types import decoded_schema
from kstore.errors import CorruptMetadataError

__all__ = ["FileTable", "Actions", "FILE_COLUMNS", "IDX", "ColumnarPartitions", "LazyIndexLists", "IndexProbe", "file_rows",
           "index_lists", "sorted_value_lists"]

#: Prefix of a file table's index columns: ``idx:<col>`` holds, per file, the distinct
#: non-null values of ``<col>`` (a list; null = not known yet). The inverted index of a
#: column is these lists read the other way round (:meth:`FileTable.column_index`).
IDX = "idx:"

_BAD_KEY = r"(/\.|//|/$|\\|\x00)"

#: The columns every file table has, in this order; statistics columns follow.
FILE_COLUMNS: tuple[tuple[str, pa.DataType], ...] = (
    ("label", pa.string()),
    ("table", pa.string()),
    ("key", pa.string()),
)


def _empty() -> pa.Table:
    return pa.table({n: pa.array([], t) for n, t in FILE_COLUMNS})


def derived_keys(labels: pa.Array | pa.ChunkedArray, dataset_uuid: str, table_name: str) -> pa.ChunkedArray:
    """``<uuid>/<table>/<label>.parquet`` for every label: the key kartothek, plateau and
    kstore give a partition's file (string kernels, no Python object per label).

    >>> derived_keys(pa.array(["p=1/a"]), "d", "table").to_pylist()
    ['d/table/p=1/a.parquet']
    """
    from kstore.core import naming

    chunks = labels.chunks if isinstance(labels, pa.ChunkedArray) else [labels]
    prefix = naming.table_prefix(dataset_uuid, table_name)
    out = [pc.binary_replace_slice(pc.binary_replace_slice(c, start=0, stop=0, replacement=prefix),
                                   start=1 << 40, stop=1 << 40, replacement=naming.DATA_SUFFIX) for c in chunks]
    return pa.chunked_array(out, pa.string())


class FileTable:
    """One row per data file of a version (see the module docstring). Immutable: every
    change returns a new table.

    A table read from a checkpoint whose keys are all derivable (every file in one table,
    each key ``<uuid>/<table>/<label>.parquet``, see :func:`derived_keys`) holds only its
    other columns: :attr:`table` builds the ``table`` and ``key`` columns on first use, and
    planning asks for the keys of the files it keeps (:meth:`keys_of`) without building
    them for every file.

    A table read from a checkpoint also leaves its ``idx:`` lists encoded
    (:class:`LazyIndexLists`): opening a version decodes the labels and statistics, and a
    predicate on an indexed column decodes that column's lists alone
    (:meth:`index_lists`). Everything that needs the whole table (:attr:`rows`,
    :attr:`table`, a new index, a checkpoint, a pickle) decodes the rest first, so a
    table always holds every list it was given; changes (:meth:`apply`,
    :meth:`drop_index`) keep the lists that were not decoded yet encoded.
    """

    def __init__(self, table: pa.Table | None = None) -> None:
        table = _empty() if table is None else table
        names = table.column_names
        if tuple(names[:3]) != tuple(n for n, _ in FILE_COLUMNS):
            raise CorruptMetadataError(f"a file table starts with {names[:3]}, not label, table, key")
        self._stored = table
        self._lazy: LazyIndexLists | None = None
        self._derived: tuple[str, str] | None = None

    @classmethod
    def with_derived_keys(cls, rows: pa.Table, dataset_uuid: str, table_name: str) -> FileTable:
        """A table of ``rows`` (``label`` first, no ``table`` or ``key`` column) whose files
        are all in ``table_name`` under their derived keys.

        >>> ft = FileTable.with_derived_keys(pa.table({"label": ["p=1/a"]}), "d", "table")
        >>> ft.table.column("key").to_pylist(), ft.keys_of(["p=1/a"])
        (['d/table/p=1/a.parquet'], ['d/table/p=1/a.parquet'])
        """
        names = rows.column_names
        if not names or names[0] != "label" or "table" in names or "key" in names:
            raise CorruptMetadataError(f"a file table with derived keys starts with {names[:1]}, not label, "
                                       "and has no table or key column")
        out = cls.__new__(cls)
        out._stored = rows
        out._lazy = None
        out._derived = (dataset_uuid, table_name)
        return out

    def with_lazy_index_lists(self, lazy: LazyIndexLists | None) -> FileTable:
        """This table (which holds no ``idx:`` column) with the ``idx:`` lists of ``lazy``,
        decoded when first used (see the class docstring).

        >>> ft = FileTable.from_partitions({"a": {"table": "d/table/a.parquet"}})
        >>> lazy = LazyIndexLists(("idx:x",), lambda name: pa.chunked_array([pa.array([[1, 2]])]), 1)
        >>> ft = ft.with_lazy_index_lists(lazy)
        >>> ft.index_columns, ft.base.column_names, ft.index_lists("x").to_pylist()
        (('x',), ['label', 'table', 'key'], [[1, 2]])
        """
        if lazy is None or not lazy.names:
            return self
        if any(n.startswith(IDX) for n in self._stored.column_names):
            raise ValueError("with_lazy_index_lists: the table holds idx: columns already")
        if lazy.n != self._stored.num_rows:
            raise CorruptMetadataError(f"a file table of {self._stored.num_rows} files has index lists of {lazy.n}")
        out = _restore(self._stored, self._derived)
        out._lazy = lazy
        return out

    @property
    def _rows(self) -> pa.Table:
        """Every stored column, the ``idx:`` lists decoded (they come last)."""
        return self._stored if self._lazy is None else self._full

    @cached_property
    def _full(self) -> pa.Table:
        lazy = self._lazy
        assert lazy is not None
        t = self._stored
        for name in lazy.names:
            t = t.append_column(name, lazy.column(name))
        return t

    @property
    def base(self) -> pa.Table:
        """The stored columns without the ``idx:`` lists not decoded yet (the labels,
        derived or stored keys and the statistics are always here); nothing is decoded."""
        return self._stored

    def index_lists(self, column: str) -> pa.ChunkedArray | None:
        """The ``idx:`` lists of ``column`` (one per file; None: the column has none),
        decoding only them."""
        name = IDX + column
        if self._lazy is not None and name in self._lazy.names:
            return self._lazy.column(name)
        if name in self._stored.column_names:
            return self._stored.column(name)
        return None

    def index_hits(self, column: str, probe: IndexProbe) -> np.ndarray | None:
        """Per file, whether its ``idx:`` list of ``column`` may satisfy ``probe``'s term,
        where that is known without decoding the lists (:meth:`LazyIndexLists.hits`);
        None otherwise (the caller reads :meth:`index_lists`)."""
        name = IDX + column
        if self._lazy is not None and name in self._lazy.names:
            return self._lazy.hits(name, probe)
        return None

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # pickles (to Dask and Spark workers) carry the stored columns, not derived keys
        return (_restore, (self._rows, self._derived))

    def _same_kind(self, rows: pa.Table) -> FileTable:
        """A table of ``rows`` of the same kind as this one (derived keys or not)."""
        return _restore(rows, self._derived)

    @property
    def derived(self) -> tuple[str, str] | None:
        """``(dataset_uuid, table)`` when the keys are derived from the labels, else None."""
        return self._derived

    @property
    def rows(self) -> pa.Table:
        """The stored columns: :attr:`table` without ``table`` and ``key`` when they are
        derived (no copy, nothing built)."""
        return self._rows

    @cached_property
    def table(self) -> pa.Table:
        """One row per file: ``label, table, key``, statistics and ``idx:`` lists."""
        return self._keyed(self._rows)

    def _keyed(self, rows: pa.Table) -> pa.Table:
        """``rows`` (of this table) with the ``table`` and ``key`` columns."""
        if self._derived is None:
            return rows
        uuid, name = self._derived
        n = rows.num_rows
        return (rows.add_column(1, "table", pa.chunked_array([pa.repeat(pa.scalar(name, pa.string()), n)]))
                .add_column(2, "key", derived_keys(rows.column("label"), uuid, name)))

    def keys_of(self, labels: Sequence[str]) -> list[str]:
        """The keys of the (first) files of ``labels`` of a table with derived keys."""
        from kstore.core import naming

        if self._derived is None:
            raise ValueError("keys_of: this file table stores its keys")
        prefix = naming.table_prefix(*self._derived)  # naming.data_key without its per-key checks:
        return [prefix + label + naming.DATA_SUFFIX for label in labels]  # the labels were screened

    def derive(self, dataset_uuid: str) -> FileTable:
        """This table with derived keys when every file's key is derivable (one table,
        ``<uuid>/<table>/<label>.parquet``), else itself."""
        if self._derived is not None or not len(self) or not self.single_table():
            return self
        t = self._rows
        name = t.column("table")[0].as_py()
        same = pc.equal(t.column("key"), derived_keys(t.column("label"), dataset_uuid, name))
        if not pc.all(same).as_py() or t.column("key").null_count:
            return self
        return FileTable.with_derived_keys(t.drop_columns(["table", "key"]), dataset_uuid, name)

    @classmethod
    def from_partitions(cls, partitions: Mapping[str, Mapping[str, str]], stats: pa.Table | None = None) -> FileTable:
        """From kartothek's ``label -> {table: key}`` mapping, joined with a statistics table
        (one row per label, as ``_kstore/stats`` holds it) when one is given."""
        labels = list(partitions)
        per_label = list(partitions.values())
        tables = list(chain.from_iterable(per_label))
        keys = list(chain.from_iterable(files.values() for files in per_label))
        if len(tables) != len(labels):  # several tables (or none) in some partition
            labels = [label for label, files in zip(labels, per_label) for _ in range(len(files))]
        base = pa.table({"label": pa.array(labels, pa.string()), "table": pa.array(tables, pa.string()),
                         "key": pa.array(keys, pa.string())})
        return cls(base).with_stats(stats)

    def with_stats(self, stats: pa.Table | None) -> FileTable:
        """This table (a format-1 version's: ``label, table, key``) joined with a statistics
        table (one row per label, as ``_kstore/stats`` holds it), in this table's row order;
        itself when there are no statistics.

        >>> ft = FileTable.from_partitions({"a": {"table": "d/table/a.parquet"}, "b": {"table": "d/table/b.parquet"}})
        >>> ft.with_stats(pa.table({"label": ["b", "a"], "rows": [2, 1]})).table.column("rows").to_pylist()
        [1, 2]
        """
        if stats is None or stats.num_rows == 0:
            return self
        base = self.table
        stats = in_microseconds(stats)
        joined = base.join(stats, "label", join_type="left outer", use_threads=False)
        # a join reorders rows: restore the metadata's order (the partitions' order is kept)
        order = pc.index_in(joined.column("key"), value_set=base.column("key"))
        joined = joined.take(pc.sort_indices(order))
        return FileTable(joined.select(["label", "table", "key", *[c for c in joined.column_names
                                                                   if c not in ("label", "table", "key")]]))

    # -- queries -----------------------------------------------------------------------

    def with_bound_types(self, schema: pa.Schema) -> FileTable:
        """This table with the ``min:`` / ``max:`` statistics of every column of ``schema``
        in that column's type (:func:`~kstore.core.stats.bound_type`): after a column
        widened (``schema_mode="merge"``), the bounds of the files written before.

        >>> ft = FileTable(pa.table({"label": ["a"], "table": ["t"], "key": ["d/t/a.parquet"],
        ...                          "min:d": pa.array([0], pa.date32()), "max:d": pa.array([1], pa.date32()),
        ...                          "nulls:d": [0]}))
        >>> ft.with_bound_types(pa.schema([("d", pa.timestamp("us"))])).table.schema.field("max:d").type
        TimestampType(timestamp[us])
        """
        rows = self._rows
        for f in schema:
            want = bound_type(f.type)
            for name in ("min:" + f.name, "max:" + f.name):
                i = rows.schema.get_field_index(name)
                if i >= 0 and not rows.schema.field(i).type.equals(want):
                    rows = rows.set_column(i, name, rows.column(i).cast(want))
        return self if rows is self._rows else self._same_kind(rows)

    def with_columns_renamed(self, renames: Mapping[str, str | None]) -> FileTable:
        """This table with the statistics and ``idx:`` lists of the columns ``renames`` names
        under their new names (``None``: dropped), for a rename or drop of dataset columns.

        >>> ft = FileTable(pa.table({"label": ["a"], "table": ["t"], "key": ["d/t/a.parquet"],
        ...                          "min:x": [1], "max:x": [2], "nulls:x": [0], "idx:x": [[1, 2]]}))
        >>> ft.with_columns_renamed({"x": "y"}).table.column_names[3:]
        ['min:y', 'max:y', 'nulls:y', 'idx:y']
        >>> ft.with_columns_renamed({"x": None}).table.column_names
        ['label', 'table', 'key']
        """
        rows = self._rows
        names, keep = [], []
        for i, name in enumerate(rows.column_names):
            prefix, _, col = name.partition(":")
            if col and prefix in ("min", "max", "nulls", "idx") and col in renames:
                if renames[col] is None:
                    continue
                name = f"{prefix}:{renames[col]}"
            names.append(name)
            keep.append(i)
        return self._same_kind(rows.select(keep).rename_columns(names))

    def __len__(self) -> int:
        return int(self._stored.num_rows)

    @property
    def labels(self) -> pa.ChunkedArray:
        return self._stored.column("label")

    def partitions(self) -> dict[str, dict[str, str]]:
        """kartothek's ``label -> {table: key}`` mapping (for the main file and old code)."""
        out: dict[str, dict[str, str]] = {}
        for label, table, key in zip(self.labels.to_pylist(), self.table.column("table").to_pylist(),
                                     self.table.column("key").to_pylist()):
            out.setdefault(label, {})[table] = key
        return out

    def stats(self) -> pa.Table:
        """The statistics as ``_kstore/stats`` lays them out (one row per label)."""
        cols = [c for c in self._stored.column_names if c not in ("table", "key") and not c.startswith(IDX)]
        return self._stored.select(cols).take(self.first_rows())

    def first_rows(self) -> pa.Array:
        """Row positions of each label's first file (one per label, in table order)."""
        n = self._stored.num_rows
        if n == 0 or self.single_table():
            return pa.array(np.arange(n, dtype=np.int64))
        labels = self.labels.to_numpy(zero_copy_only=False)
        _, first = np.unique(labels, return_index=True)
        return pa.array(np.sort(first))

    def single_table(self) -> bool:
        """True when every file belongs to one table (one row per label)."""
        return self._single_table

    @cached_property
    def _single_table(self) -> bool:
        if self._derived is not None:
            return True
        t = self._stored.column("table")
        return bool(t.num_chunks == 0 or len(t) == 0 or pc.count_distinct(t).as_py() <= 1)

    def num_labels(self) -> int:
        if self.single_table():
            return int(self._stored.num_rows)
        return int(pc.count_distinct(self.labels).as_py())

    def unique_labels(self) -> pa.Array:
        """Labels in table order, once each."""
        return self.labels.combine_chunks().take(self.first_rows()) if len(self) else pa.array([], pa.string())

    def for_table(self, table: str) -> pa.Table:
        """The rows of one table's files."""
        if self._derived is not None:
            return self.table if self._derived[1] == table else self.table.slice(0, 0)
        if self.single_table():
            if self.table.num_rows and self.table.column("table")[0].as_py() != table:
                return self.table.slice(0, 0)
            return self.table
        return self.table.filter(pc.equal(self.table.column("table"), table))

    @property
    def index_columns(self) -> tuple[str, ...]:
        lazy = self._lazy.names if self._lazy is not None else ()
        return tuple(c[len(IDX):] for c in (*self._stored.column_names, *lazy) if c.startswith(IDX))

    def column_index(self, column: str, vtype: pa.DataType) -> ColumnIndex:
        """The inverted index of ``column`` (value -> labels) from its ``idx:`` lists."""
        got = self.index_lists(column)
        if got is None:
            return ColumnIndex.empty(column, vtype)
        lists = got.combine_chunks()
        flat = pc.list_flatten(lists)
        if len(flat) == 0:
            return ColumnIndex.empty(column, vtype)
        parents = pc.list_parent_indices(lists)
        if self.single_table():  # one row per label: the rows are the label ids
            return ColumnIndex.build_ids(column, flat, parents.to_numpy(zero_copy_only=False),
                                         self.labels.combine_chunks())
        return ColumnIndex.build(column, flat, self.labels.combine_chunks().take(parents))

    def unindexed_labels(self, column: str) -> list[str]:
        """Labels whose ``idx:`` list of ``column`` is unknown (null, or no such column)."""
        got = self.index_lists(column)
        if got is None:
            return list(self.unique_labels().to_pylist())
        rows = pa.table({"label": self.labels, "lists": got})
        if not self.single_table():
            rows = rows.take(self.first_rows())
        lists = rows.column("lists")
        if lists.null_count == 0:
            return []
        return list(rows.filter(pc.is_null(lists)).column("label").to_pylist())

    def with_index(self, column: str, lists: pa.Array) -> FileTable:
        """The table with ``idx:<column>`` set to ``lists`` (one entry per row)."""
        name = IDX + column
        names = self._rows.column_names
        if name in names:
            return self._same_kind(self._rows.set_column(names.index(name), name, lists))
        return self._same_kind(self._rows.append_column(name, lists))

    def merge_index(self, index: ColumnIndex, labels: Sequence[str]) -> FileTable:
        """Fill the ``idx:`` lists of ``labels`` (first file of each) from ``index``."""
        name = IDX + index.column
        rows = self.first_rows().to_numpy()
        target = np.zeros(len(self), dtype=bool)
        all_labels = self.labels.combine_chunks()
        chosen = pc.is_in(all_labels.take(pa.array(rows)), value_set=pa.array(list(labels), pa.string()))
        target[rows[np.asarray(chosen.to_numpy(zero_copy_only=False), dtype=bool)]] = True
        fresh = index_lists(index, all_labels, pa.array(target))
        if name in self._rows.column_names:
            old = self._rows.column(name).combine_chunks()
            if not old.type.equals(fresh.type):
                old = old.cast(fresh.type)
            fresh = pc.if_else(pa.array(target), fresh, old)
        return self.with_index(index.column, fresh)

    def drop_index(self, column: str) -> FileTable:
        name = IDX + column
        if self._lazy is not None and name in self._lazy.names:
            return _restore(self._stored, self._derived).with_lazy_index_lists(self._lazy.without(name))
        if name not in self._stored.column_names:
            return self
        return self._same_kind(self._rows.drop_columns([name]))

    def validate(self, dataset_uuid: str, where: str) -> FileTable:
        """Check labels and keys (vectorized): no nulls, every key inside the dataset's
        prefix and free of ``.``/``..``/empty components. Raises CorruptMetadataError.

        With derived keys the labels are screened instead (a derived key is safe when its
        label is); anything the screen flags gets the exact check on the built keys."""
        if self._derived is not None:
            return self._validate_derived(dataset_uuid, where)
        t = self._stored  # label, table, key (the index lists stay encoded)
        for i in range(3):
            if not pa.types.is_string(t.schema.field(i).type):
                raise CorruptMetadataError(f"{where}: file table column {t.column_names[i]!r} is not a string column")
            if t.column(i).null_count:
                raise CorruptMetadataError(f"{where}: the file table has null {t.column_names[i]}s")
        if not len(self):
            return self
        from kstore.core import naming

        keys = t.column("key")
        outside = pc.invert(pc.starts_with(keys, dataset_uuid + "/"))
        if pc.any(outside).as_py():
            first = keys.filter(outside)[0].as_py()
            raise CorruptMetadataError(f"{where}: file key {first!r:.120} is not a key inside dataset {dataset_uuid!r}")
        if any(_maybe_odd(chunk) for chunk in keys.chunks):  # the cheap screen flagged some: the full check decides
            odd = pc.match_substring_regex(keys, _BAD_KEY)
            for key in keys.filter(odd).to_pylist():
                try:
                    naming.validate_key(key)
                except Exception as exc:
                    raise CorruptMetadataError(f"{where}: {exc}") from exc
        return self

    def _validate_derived(self, dataset_uuid: str, where: str) -> FileTable:
        from kstore.core import naming

        uuid, name = self._derived  # type: ignore[misc]
        labels = self._stored.column("label")
        if not pa.types.is_string(labels.type):
            raise CorruptMetadataError(f"{where}: file table column 'label' is not a string column")
        if labels.null_count:
            raise CorruptMetadataError(f"{where}: the file table has null labels")
        if uuid != dataset_uuid:
            raise CorruptMetadataError(f"{where}: its keys are derived for dataset {uuid!r}, not {dataset_uuid!r}")
        try:
            naming.validate_name(name, "table name")
        except Exception as exc:
            raise CorruptMetadataError(f"{where}: {exc}") from exc
        if len(self) and any(_label_maybe_odd(chunk) for chunk in labels.chunks):
            FileTable(self._keyed(self._stored)).validate(dataset_uuid, where)
        return self

    # -- changes -----------------------------------------------------------------------

    def apply(self, actions: Actions) -> FileTable:
        """The table after ``actions``: removed labels dropped, added rows appended."""
        if self._derived is not None and actions.add is not None and actions.add.num_rows:
            add = _strip_derived(actions.add, *self._derived)
            if add is None:  # a file whose key is not derivable: this table stores keys from now on
                return FileTable(self.table).apply(actions)
            actions = Actions(add=add, remove=actions.remove)
        if self._lazy is not None:
            return self._apply_lazy(actions, self._lazy)
        table = self._stored
        if actions.remove and table.num_rows:
            gone = pc.is_in(table.column("label"), value_set=pa.array(list(actions.remove), pa.string()))
            table = table.filter(pc.invert(gone))
        if actions.add is not None and actions.add.num_rows:
            if table.num_rows == 0 and table.num_columns <= (3 if self._derived is None else 1):
                table = _idx_last(in_microseconds(actions.add))
            else:
                table = _idx_last(pa.concat_tables([in_microseconds(table), in_microseconds(actions.add)],
                                                   promote_options="permissive"))
        return self._same_kind(table)

    def _apply_lazy(self, actions: Actions, lazy: LazyIndexLists) -> FileTable:
        """:meth:`apply` on the decoded columns; the encoded lists get the same change
        when they are decoded (:meth:`LazyIndexLists.after`)."""
        table = self._stored
        keep = None
        if actions.remove and table.num_rows:
            keep = pc.invert(pc.is_in(table.column("label"), value_set=pa.array(list(actions.remove), pa.string())))
            table = table.filter(keep)
        kept = table.num_rows
        add = actions.add if actions.add is not None and actions.add.num_rows else None
        if add is not None:
            plain = add.drop_columns([n for n in add.column_names if n.startswith(IDX)])
            table = _idx_last(pa.concat_tables([in_microseconds(table), in_microseconds(plain)],
                                               promote_options="permissive"))
        return _restore(table, self._derived).with_lazy_index_lists(lazy.after(keep, kept, add))


def _restore(rows: pa.Table, derived: tuple[str, str] | None) -> FileTable:
    return FileTable(rows) if derived is None else FileTable.with_derived_keys(rows, *derived)


def _idx_last(table: pa.Table) -> pa.Table:
    """``table`` with its ``idx:`` columns last (their order kept): the order a table whose
    lists were decoded late has, so that both give the same checkpoint."""
    names = table.column_names
    idx = [n for n in names if n.startswith(IDX)]
    if not idx or names[-len(idx):] == idx:
        return table
    return table.select([n for n in names if not n.startswith(IDX)] + idx)


class IndexProbe(Protocol):
    """What a planner asks of a column's index lists for one term (see
    :meth:`LazyIndexLists.hits`)."""

    @property
    def op(self) -> str:
        """The term's operator."""
        ...

    def lists(self, lists: pa.ChunkedArray) -> np.ndarray:
        """Per file (one list each): whether its list may satisfy the term (null: kept)."""
        ...

    def values(self, values: pa.Array) -> np.ndarray:
        """Which of ``values`` satisfy the term."""
        ...

    def literals(self, t: pa.DataType) -> pa.Array | None:
        """The term's values as ``t`` (an ``==`` / ``in`` term on a column of type ``t``),
        else None."""
        ...


class LazyIndexLists:
    """The ``idx:`` lists of a file table, decoded column by column on first use.

    ``fetch(name)`` decodes one column (one list per file, ``n`` files; it raises
    CorruptMetadataError when the column is damaged); each column is decoded once
    (thread-safe). A change to the table (:meth:`after`, :meth:`without`) is a new
    value that applies the change to the columns as they are decoded.

    >>> lazy = LazyIndexLists(("idx:x",), lambda name: pa.chunked_array([pa.array([[1], [2]])]), 2)
    >>> later = lazy.after(pa.array([False, True]), 1, pa.table({"label": ["c"], "idx:x": [[3]]}))
    >>> later.n, later.column("idx:x").to_pylist()
    (2, [[2], [3]])
    """

    def __init__(self, names: Sequence[str], fetch: Callable[[str], pa.ChunkedArray], n: int,
                 probe: Callable[[str, IndexProbe], np.ndarray | None] | None = None) -> None:
        self.names = tuple(names)
        self.n = n
        self._fetch = fetch
        self._probe = probe
        self._got: dict[str, pa.ChunkedArray] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"LazyIndexLists({list(self.names)}, {self.n} files, decoded {sorted(self._got)})"

    def column(self, name: str) -> pa.ChunkedArray:
        if name not in self.names:
            raise KeyError(name)
        with self._lock:
            got = self._got.get(name)
            if got is None:
                got = self._fetch(name)
                if isinstance(got, pa.Array):
                    got = pa.chunked_array([got])
                if len(got) != self.n:
                    raise CorruptMetadataError(f"index lists {name!r} hold {len(got)} entries for {self.n} files")
                self._got[name] = got
            return got

    def hits(self, name: str, probe: IndexProbe) -> np.ndarray | None:
        """Per file, whether its ``name`` list may hold a value ``probe`` asks for (as
        ``probe.lists`` says of the lists), found without decoding the lists where the
        checkpoint's value-sorted blocks answer (:mod:`kstore.core.sorted_index`); None
        when only the lists can tell."""
        if name not in self.names:
            raise KeyError(name)
        with self._lock:
            got = self._got.get(name)
        if got is not None:
            return probe.lists(got)
        return None if self._probe is None else self._probe(name, probe)

    def without(self, name: str) -> LazyIndexLists:
        return LazyIndexLists([n for n in self.names if n != name], self.column, self.n, self.hits)

    def after(self, keep: pa.Array | pa.ChunkedArray | None, kept: int, add: pa.Table | None) -> LazyIndexLists:
        """The lists once the files where ``keep`` is false are removed (``kept`` left) and
        the rows of ``add`` are appended (its ``idx:`` columns; null lists where it has none,
        and for the kept files in a column only ``add`` has)."""
        n_add = add.num_rows if add is not None else 0
        extra = {n: add.column(n) for n in add.column_names if n.startswith(IDX)} if add is not None else {}
        names = self.names + tuple(n for n in extra if n not in self.names)

        def fetch(name: str) -> pa.ChunkedArray:
            old = self.column(name) if name in self.names else None
            if old is not None and keep is not None:
                old = old.filter(keep)
            new = extra.get(name)
            if old is None:
                assert new is not None
                old = pa.chunked_array([pa.nulls(kept, new.type)])
            if new is None:
                new = pa.chunked_array([pa.nulls(n_add, old.type)]) if n_add else None
            if new is None:
                return old
            if not new.type.equals(old.type):
                if pa.types.is_null(old.type):
                    old = old.cast(new.type)
                else:
                    new = new.cast(old.type)
            return pa.chunked_array([*old.chunks, *new.chunks], old.type)

        def probe(name: str, p: IndexProbe) -> np.ndarray | None:
            if name in self.names:
                old = self.hits(name, p)
                if old is None:
                    return None
                if keep is not None:
                    kept_mask = keep.to_numpy(zero_copy_only=False) if isinstance(keep, pa.Array) \
                        else np.concatenate([c.to_numpy(zero_copy_only=False) for c in keep.chunks] or [[]])
                    old = old[np.asarray(kept_mask, dtype=bool)]
            else:
                old = np.ones(kept, dtype=bool)  # (null lists: unknown, kept)
            new = extra.get(name)
            return np.concatenate([old, p.lists(new) if new is not None else np.ones(n_add, dtype=bool)])

        return LazyIndexLists(names, fetch, kept + n_add, probe)


def _strip_derived(add: pa.Table, dataset_uuid: str, table_name: str) -> pa.Table | None:
    """``add`` (rows with ``table`` and ``key``) without those columns when every row is
    in ``table_name`` under its derived key, else None."""
    tables, keys = add.column("table"), add.column("key")
    if tables.null_count or keys.null_count or not pc.all(pc.equal(tables, table_name)).as_py():
        return None
    if not pc.all(pc.equal(keys, derived_keys(add.column("label"), dataset_uuid, table_name))).as_py():
        return None
    return add.drop_columns(["table", "key"])


def _label_maybe_odd(labels: pa.Array) -> bool:
    """The screen of :func:`_maybe_odd` for keys ``<uuid>/<table>/<label>.parquet`` built
    from ``labels``: also flags an empty label and one that starts with ``/`` or ``.``."""
    data, ends = string_bytes(labels)
    if not len(ends):
        return False
    starts = np.concatenate(([0], ends[:-1]))
    if (ends == starts).any():
        return True
    first = data[starts]
    return bool(((first == 0x2F) | (first == 0x2E)).any()) or _maybe_odd(labels)


def string_bytes(strings: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """The UTF-8 bytes of a (non-null) string array as one uint8 array, and each string's
    end offset into it: for byte scans over every string at once."""
    if strings.offset:
        strings = pa.concat_arrays([strings])
    buf = strings.buffers()[2]
    if buf is None or len(strings) == 0:
        return np.empty(0, np.uint8), np.empty(0, np.int64)
    offsets = np.frombuffer(strings.buffers()[1], dtype=np.int32, count=len(strings) + 1)
    data = np.frombuffer(buf, dtype=np.uint8)[offsets[0]:offsets[-1]]
    return data, offsets[1:] - offsets[0]


#: IPC body compression of log entries' tables: zstd level 3 (any Arrow reader decodes it,
#: and the stream names its codec, so entries written with LZ4 before read as they did).
#: As small as LZ4 where that did best (200 files x 1,000 values 0..999: 0.06 MB; zstd's
#: level 1 took 0.26), a quarter of it on real indices (W2's 200 files x 14,000 values:
#: 2.9 MB against 11.5; 5M distinct ids: 5.2 against 21.2), decoded faster (18 ms against
#: 85), encoded in 20-50 ms more, which the base64 and JSON of the smaller text win back
_IPC_OPTIONS = pa.ipc.IpcWriteOptions(compression=pa.Codec("zstd", 3))


def ipc_text(table: pa.Table) -> str:
    """A table as base64 Arrow IPC, zstd-compressed (a log entry's JSON carries it; types
    stay exact).

    >>> from_ipc_text(ipc_text(pa.table({"x": [1, 2]})), "doc").to_pydict()
    {'x': [1, 2]}
    """
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=_IPC_OPTIONS) as writer:
        writer.write_table(table)
    return base64.b64encode(sink.getvalue().to_pybytes()).decode("ascii")


#: IPC reads of bytes Python owns decode on the calling thread: an Arrow thread must not
#: release the last view of them, which takes the GIL and at interpreter exit aborts the
#: process (apache/arrow#34314, #50482; see kstore.io.arrowfs.open_for_arrow)
SYNC_IPC = pa.ipc.IpcReadOptions(use_threads=False)


def checked_ipc_table(table: pa.Table) -> pa.Table:
    """A table an IPC reader decoded from stored bytes, checked before anything uses it:
    every name and time zone decodes (:func:`~kstore.core.types.decoded_schema`), and the
    buffers are fully validated (IPC readers take them as they are: damaged offsets or
    lengths would be read out of bounds later; ~1.3 ms per 100k files, a tenth of the
    decoding). Raises ``ValueError`` / ``ArrowInvalid`` for the caller to name the file."""
    decoded_schema(table.schema)
    table.validate(full=True)
    return table


def from_ipc_text(text: Any, where: str) -> pa.Table:
    """The table :func:`ipc_text` wrote (CorruptMetadataError naming ``where`` if it is not)."""
    if not isinstance(text, str):
        raise CorruptMetadataError(f"{where} must be base64 text")
    try:
        return checked_ipc_table(
            pa.ipc.open_stream(pa.py_buffer(base64.b64decode(text, validate=True)), options=SYNC_IPC).read_all())
    except (ValueError, OSError, pa.ArrowException) as exc:  # (damaged framing: OSError)
        raise CorruptMetadataError(f"{where} is not an Arrow IPC stream ({exc})") from exc


#: bytes :func:`_maybe_odd` scans at a time (its temporaries stay in cache, and are reused)
_SCREEN_CHUNK = 1 << 18


def _maybe_odd(keys: pa.Array) -> bool:
    """A scan of the keys' bytes: True when some key may hold ``/.``, ``//``, ``\\`` or
    NUL, or end in ``/`` (then the exact check runs). It runs on every open of a checkpoint
    (100k labels: ~5 MB), in cache-sized chunks with reused buffers. Each pair of adjacent
    bytes is read as one little-endian 16-bit word (even pairs, then odd pairs): ``/`` then
    ``/`` or ``.`` is ``(w | 0x0100) == 0x2F2F``, one compare for both patterns (~2 ms for
    5 MB against ~4 ms for a gather of the bytes after each ``/``)."""
    data, ends = string_bytes(keys)
    n = len(data)
    if not n:
        return False
    words = np.empty(_SCREEN_CHUNK // 2 + 1, np.uint16)
    flags = np.empty(_SCREEN_CHUNK + 1, bool)
    for i in range(0, n, _SCREEN_CHUNK):
        chunk = data[i:i + _SCREEN_CHUNK + 1]  # one byte of overlap: a pair across the border
        m = len(chunk)
        if chunk.min() == 0 or np.equal(chunk, 0x5C, out=flags[:m]).any():
            return True
        for first in (0, 1):
            k = (m - first) // 2
            if k <= 0:
                continue
            pairs = chunk[first:first + 2 * k].view("<u2")
            np.bitwise_or(pairs, 0x0100, out=words[:k])
            if np.equal(words[:k], 0x2F2F, out=flags[:k]).any():
                return True
    ends = ends - 1
    ends = ends[ends >= 0]
    return bool((data[ends] == 0x2F).any())


def index_lists(index: ColumnIndex, labels: pa.Array, target: pa.Array | None = None) -> pa.Array:
    """Per row of ``labels``: the values ``index`` holds for that label (a list), for rows
    where ``target`` is true (default: the first row of every label); null elsewhere."""
    n = len(labels)
    vals, labs = index.pairs()
    if target is None:
        first = pc.index_in(labels, value_set=labels).to_numpy(zero_copy_only=False)
        mask = first == np.arange(n)
    else:
        mask = np.asarray(target.to_numpy(zero_copy_only=False), dtype=bool)
    value_set = labels.filter(pa.array(mask))
    rows_of = np.flatnonzero(mask)
    pos = pc.index_in(labs, value_set=value_set)
    keep = pc.is_valid(pos)
    pos_np = rows_of[pos.filter(keep).to_numpy(zero_copy_only=False)] if len(rows_of) else np.empty(0, np.int64)
    vals = vals.filter(keep)
    order = np.argsort(pos_np, kind="stable")
    counts = np.bincount(pos_np, minlength=n) if len(pos_np) else np.zeros(n, dtype=np.int64)
    offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int32)
    values = vals.take(pa.array(order)) if len(order) else pa.array([], index.values.type)
    return pa.ListArray.from_arrays(pa.array(offsets), values, mask=pa.array(~mask))


def file_rows(labels: Sequence[str], tables: Sequence[str], keys: Sequence[str],
              stats: Sequence[FileStats | None], schema: pa.Schema,
              index_values: Mapping[str, Sequence[pa.Array | None]] | None = None) -> pa.Table:
    """File-table rows of newly written files: statistics (unknown where None) and, per
    indexed column, each file's distinct values (``index_values[col][i]``; None = unknown)."""
    known = [s if s is not None else FileStats(0, 0, {}) for s in stats]
    st = stats_table(list(labels), known, schema)
    if any(s is None for s in stats):
        unknown = pa.array([s is None for s in stats])
        for name in st.column_names[1:]:
            col = st.column(name)
            st = st.set_column(st.column_names.index(name), name,
                               pc.if_else(unknown, pa.nulls(len(col), col.type), col))
    table = st.add_column(1, "table", pa.array(list(tables), pa.string())).add_column(
        2, "key", pa.array(list(keys), pa.string()))
    for col, per_file in (index_values or {}).items():
        vtype = index_storage_type(schema.field(col).type)
        fast = sorted_value_lists(per_file, vtype)
        if fast is not None:
            table = table.append_column(IDX + col, fast)
            continue
        arrays = [a for a in per_file if a is not None and len(a)]
        idx = ColumnIndex.build(col, pa.concat_arrays([a.cast(arrays[0].type) for a in arrays]),
                                pa.array([lab for lab, a in zip(labels, per_file) if a is not None and len(a)
                                          for _ in range(len(a))], pa.string())) if arrays else ColumnIndex.empty(col, vtype)
        target = pa.array([a is not None for a in per_file])
        lists = index_lists(idx, table.column("label").combine_chunks(), target)
        if not lists.type.value_type.equals(vtype):
            lists = lists.cast(pa.list_(vtype))
        table = table.append_column(IDX + col, lists)
    return table


def sorted_value_lists(per_file: Sequence[pa.Array | None], vtype: pa.DataType) -> pa.Array | None:
    """Per file, its distinct values as an ``idx:`` list, straight from the writers' reports,
    when each file's values are already strictly increasing (writers sort them) and need no
    normalization that could merge two of them; None otherwise (the caller then builds the
    lists through a :class:`ColumnIndex`, which sorts). ``None`` entries are unknown (a null
    list). The lists equal that general path's exactly (a property test checks it).

    >>> sorted_value_lists([pa.array([1, 5]), None, pa.array([2])], pa.int64()).to_pylist()
    [[1, 5], None, [2]]
    >>> sorted_value_lists([pa.array([5, 1])], pa.int64()) is None
    True
    """
    arrays = [a for a in per_file if a is not None]
    if not arrays:
        return None
    t0 = arrays[0].type
    if (any(not a.type.equals(t0) for a in arrays) or pa.types.is_dictionary(t0) or pa.types.is_floating(t0)
            or (pa.types.is_timestamp(t0) and not t0.equals(vtype))):
        return None  # decoding, -0.0/NaN or sub-microsecond flooring could merge or reorder values
    vals = pa.concat_arrays(arrays) if len(arrays) > 1 else arrays[0]
    if vals.null_count:
        return None
    if not vals.type.equals(vtype):
        try:
            vals = vals.cast(vtype)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None
    lengths = np.array([0 if a is None else len(a) for a in per_file], dtype=np.int64)
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    n = len(vals)
    if n > 1:
        try:
            up = np.asarray(pc.greater(vals.slice(1), vals.slice(0, n - 1)).to_numpy(zero_copy_only=False), bool)
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
            return None  # a type without an order comparison: the general path decides
        starts = offsets[1:-1]
        boundary = np.zeros(n - 1, dtype=bool)
        boundary[starts[(starts > 0) & (starts < n)] - 1] = True  # a new file starts after position j
        if not bool(np.all(up | boundary)):
            return None
    if offsets[-1] >= 2**31:
        return None
    unknown = pa.array([a is None for a in per_file])
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), vals, mask=unknown)


class ColumnarPartitions(Mapping[str, Mapping[str, str]]):
    """kartothek's ``label -> {table: key}`` mapping as a read-only view of a
    :class:`FileTable`: the one in-memory form of a version's files, whatever its format.

    :attr:`columnar` says where the version's per-file statistics and secondary indices
    are. True (format 2/3): they are columns of :attr:`files` (``rows``, ``min:<col>``,
    ``idx:<col>``, ...). False (format 1: a kartothek or plateau dataset, a kstore version
    written before format 2): :attr:`files` holds ``label, table, key`` only, and the
    statistics and indices are files of their own (``DatasetMetadata.stats_key``,
    ``indices``, ``inline_indices``), which readers load when they need them.

    Made from a file table (:class:`ColumnarPartitions` ``(files)``) the length and the
    table are free and the dict is built on first use (only code outside kstore's hot
    paths asks for it). Made from the mapping a format-1 file holds
    (:meth:`of_mapping`), it is the other way round: the mapping is kept, and the file table
    is built from it on the first :attr:`files` (O(partitions), once).

    Examples
    --------
    >>> parts = ColumnarPartitions.of_mapping({"p=1/a": {"table": "d/table/p=1/a.parquet"}})
    >>> parts.columnar, len(parts), parts.files.table.column("key").to_pylist()
    (False, 1, ['d/table/p=1/a.parquet'])
    >>> ColumnarPartitions(parts.files).columnar
    True
    """

    __slots__ = ("_files", "_dict", "_len", "columnar")

    _files: FileTable | None
    _dict: Mapping[str, Mapping[str, str]] | None
    _len: int | None
    #: True when the statistics and secondary indices are columns of :attr:`files`
    columnar: bool

    def __init__(self, files: FileTable, *, columnar: bool = True) -> None:
        self._files = files
        self._dict = None
        self._len = None
        self.columnar = columnar

    @classmethod
    def of_mapping(cls, partitions: Mapping[str, Mapping[str, str]]) -> ColumnarPartitions:
        """The files of a format-1 version (``columnar`` False) from the ``label -> {table:
        key}`` mapping its metadata file holds; ``partitions`` is kept as it is (not copied).

        >>> parts = ColumnarPartitions.of_mapping({"a": {"t": "d/t/a.parquet"}})
        >>> dict(parts["a"]), list(parts), "a" in parts
        ({'t': 'd/t/a.parquet'}, ['a'], True)
        """
        out = cls.__new__(cls)
        out._files = None
        out._dict = partitions
        out._len = len(partitions)
        out.columnar = False
        return out

    @property
    def files(self) -> FileTable:
        """The files as a :class:`FileTable` (built from the mapping on first use)."""
        if self._files is None:
            assert self._dict is not None
            self._files = FileTable.from_partitions(self._dict)
        return self._files

    def _mapping(self) -> Mapping[str, Mapping[str, str]]:
        if self._dict is None:
            assert self._files is not None
            self._dict = {k: MappingProxyType(v) for k, v in self._files.partitions().items()}
        return self._dict

    def __getitem__(self, label: str) -> Mapping[str, str]:
        return self._mapping()[label]

    def __iter__(self) -> Any:
        if self._dict is None and self.files.single_table():
            return iter(self.files.labels.to_pylist())
        return iter(self._mapping())

    def __len__(self) -> int:
        if self._len is None:
            self._len = self.files.num_labels()
        return self._len

    def __contains__(self, label: object) -> bool:
        return label in self._mapping()

    def items(self) -> Any:
        return self._mapping().items()

    def values(self) -> Any:
        return self._mapping().values()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ColumnarPartitions):
            other = other._mapping()
        if not isinstance(other, Mapping):
            return NotImplemented
        if not isinstance(other, (dict, MappingProxyType)):
            other = dict(other.items())
        return bool(self._mapping() == other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ColumnarPartitions({len(self)} partitions{'' if self.columnar else ', format 1'})"

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        if self._dict is not None and not self.columnar:  # the mapping, as plain dicts (proxies do not pickle)
            return (_of_plain_mapping, ({k: dict(v) for k, v in self._dict.items()},))
        return (_partitions_of, (self.files, self.columnar))


def _partitions_of(files: FileTable, columnar: bool) -> ColumnarPartitions:
    return ColumnarPartitions(files, columnar=columnar)


def _of_plain_mapping(partitions: dict[str, dict[str, str]]) -> ColumnarPartitions:
    return ColumnarPartitions.of_mapping({k: MappingProxyType(v) for k, v in partitions.items()})


@dataclass(frozen=True)
class Actions:
    """What one commit changes in the file table: ``add``, a file table of the added files
    (label, table, key and their statistics), and ``remove``, the labels removed. The log
    entry's encoding of it is :func:`kstore.core.state.encode_actions`."""

    add: pa.Table | None = None
    remove: tuple[str, ...] = ()
