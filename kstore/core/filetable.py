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
>>> Actions.decode(Actions(add=add).encode(), where="x").add.equals(add)
True
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from kstore.core.stats import in_microseconds
from kstore.errors import CorruptMetadataError

__all__ = ["FileTable", "Actions", "FILE_COLUMNS"]

#: The columns every file table has, in this order; statistics columns follow.
FILE_COLUMNS: tuple[tuple[str, pa.DataType], ...] = (
    ("label", pa.string()),
    ("table", pa.string()),
    ("key", pa.string()),
)


def _empty() -> pa.Table:
    return pa.table({n: pa.array([], t) for n, t in FILE_COLUMNS})


@dataclass(frozen=True, eq=False)
class FileTable:
    """One row per data file of a version (see the module docstring). Immutable: every
    change returns a new table."""

    table: pa.Table = field(default_factory=_empty)

    def __post_init__(self) -> None:
        names = self.table.column_names
        if tuple(names[:3]) != tuple(n for n, _ in FILE_COLUMNS):
            raise CorruptMetadataError(f"a file table starts with {names[:3]}, not label, table, key")

    @classmethod
    def from_partitions(cls, partitions: Mapping[str, Mapping[str, str]], stats: pa.Table | None = None) -> FileTable:
        """From kartothek's ``label -> {table: key}`` mapping, joined with a statistics table
        (one row per label, as ``_kstore/stats`` holds it) when one is given."""
        labels: list[str] = []
        tables: list[str] = []
        keys: list[str] = []
        for label, files in partitions.items():
            for table, key in files.items():
                labels.append(label)
                tables.append(table)
                keys.append(key)
        base = pa.table({"label": pa.array(labels, pa.string()), "table": pa.array(tables, pa.string()),
                         "key": pa.array(keys, pa.string())})
        if stats is None or stats.num_rows == 0:
            return cls(base)
        stats = in_microseconds(stats)
        joined = base.join(stats, "label", join_type="left outer", use_threads=False)
        # a join reorders rows: restore the metadata's order (the partitions' order is kept)
        order = pc.index_in(joined.column("key"), value_set=base.column("key"))
        joined = joined.take(pc.sort_indices(order))
        return cls(joined.select(["label", "table", "key", *[c for c in joined.column_names
                                                             if c not in ("label", "table", "key")]]))

    # -- queries -----------------------------------------------------------------------

    def __len__(self) -> int:
        return int(self.table.num_rows)

    @property
    def labels(self) -> pa.ChunkedArray:
        return self.table.column("label")

    def partitions(self) -> dict[str, dict[str, str]]:
        """kartothek's ``label -> {table: key}`` mapping (for the main file and old code)."""
        out: dict[str, dict[str, str]] = {}
        for label, table, key in zip(self.labels.to_pylist(), self.table.column("table").to_pylist(),
                                     self.table.column("key").to_pylist()):
            out.setdefault(label, {})[table] = key
        return out

    def stats(self) -> pa.Table:
        """The statistics as ``_kstore/stats`` lays them out (one row per label)."""
        import numpy as np

        cols = [c for c in self.table.column_names if c not in ("table", "key")]
        labels = self.labels.to_numpy(zero_copy_only=False)
        _, first = np.unique(labels, return_index=True)
        return self.table.select(cols).take(pa.array(np.sort(first)))

    # -- changes -----------------------------------------------------------------------

    def apply(self, actions: Actions) -> FileTable:
        """The table after ``actions``: removed labels dropped, added rows appended."""
        table = self.table
        if actions.remove:
            gone = pc.is_in(table.column("label"), value_set=pa.array(list(actions.remove), pa.string()))
            table = table.filter(pc.invert(gone))
        if actions.add is not None and actions.add.num_rows:
            table = pa.concat_tables([in_microseconds(table), in_microseconds(actions.add)],
                                     promote_options="permissive")
        return FileTable(table)


@dataclass(frozen=True)
class Actions:
    """What one commit changes (format 2's log entry ``actions``).

    ``add`` is a file table of the added files (label, table, key and their statistics),
    ``remove`` the labels removed, ``set`` the small parts of the state that changed
    (schema, partition keys, user metadata, txns, orphan cutoff, index keys).
    """

    add: pa.Table | None = None
    remove: tuple[str, ...] = ()
    set: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def encode(self) -> dict[str, Any]:
        """JSON-ready dict; the added rows travel as base64 Arrow IPC (types stay exact)."""
        out: dict[str, Any] = {"remove": list(self.remove), "set": dict(self.set)}
        if self.add is not None:
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, self.add.schema) as writer:
                writer.write_table(self.add)
            out["add"] = base64.b64encode(sink.getvalue().to_pybytes()).decode("ascii")
        return out

    @classmethod
    def decode(cls, raw: Any, *, where: str) -> Actions:
        """Validate an encoded dict (``where`` names the log entry in errors)."""
        if not isinstance(raw, Mapping):
            raise CorruptMetadataError(f"{where}: actions must be a mapping, got {type(raw).__name__}")
        remove = raw.get("remove")
        remove = [] if remove is None else remove
        if not isinstance(remove, list) or not all(isinstance(x, str) for x in remove):
            raise CorruptMetadataError(f"{where}: actions.remove must be a list of partition labels")
        small = raw.get("set")
        small = {} if small is None else small
        if not isinstance(small, Mapping):
            raise CorruptMetadataError(f"{where}: actions.set must be a mapping")
        add = None
        if raw.get("add") is not None:
            text = raw["add"]
            if not isinstance(text, str):
                raise CorruptMetadataError(f"{where}: actions.add must be base64 text")
            try:
                add = pa.ipc.open_stream(pa.py_buffer(base64.b64decode(text, validate=True))).read_all()
            except (ValueError, pa.ArrowException) as exc:
                raise CorruptMetadataError(f"{where}: actions.add is not an Arrow IPC stream ({exc})") from exc
            names = add.column_names
            if tuple(names[:3]) != ("label", "table", "key") or not all(
                    pa.types.is_string(add.schema.field(i).type) for i in range(3)):
                raise CorruptMetadataError(f"{where}: actions.add must start with string columns label, table, key")
            if any(add.column(i).null_count for i in range(3)):
                raise CorruptMetadataError(f"{where}: actions.add has null labels, tables or keys")
        return cls(add=add, remove=tuple(remove), set=MappingProxyType(dict(small)))


def labels_of(actions: Sequence[Actions]) -> tuple[set[str], set[str]]:
    """(labels added, labels removed) over a sequence of actions, for conflict checks."""
    added: set[str] = set()
    removed: set[str] = set()
    for a in actions:
        removed.update(a.remove)
        if a.add is not None:
            added.update(a.add.column("label").to_pylist())
    return added, removed
