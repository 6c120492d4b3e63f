"""The change feed: which rows each version inserted, deleted and updated (Delta's change
data feed, Iceberg's incremental scans), derived from the log and the files the versions
reference: no extra file is written at commit time, and every retained version of any kstore
dataset has its changes.

For version ``v`` (its log entry, its state and the state of ``v - 1``):

- ``create``, ``append``: the rows of the files it added are ``insert``;
- ``delete_scope``: the rows of the files it removed are ``delete``;
- ``overwrite``, ``overwrite_partitions``: the removed files' rows ``delete``, the added
  files' rows ``insert`` (as Delta reports an overwrite);
- ``delete_rows``, ``restore``: the removed files' rows less the added files' rows (a
  multiset difference of whole rows: rows a rewrite carried over cancel out) are
  ``delete``, the rest of the added files' rows ``insert``;
- ``update`` (:func:`kstore.update_rows`), ``merge``: that difference, each removed row paired
  with the added row it became: by the merge's keys, or by the columns an update did not set
  (the log entry's info names them) — ``update_preimage`` and ``update_postimage``; unpaired
  rows are ``delete`` / ``insert``. A row an update or merge left as it was is no change;
- ``compaction``, ``build_indices``, ``drop_indices``, ``upgrade``, ``vacuum``: no row changes.

Each change row has the columns of the files it comes from (columns a version lacks are
null) and ``_change_type``, ``_commit_version``, ``_commit_timestamp``, as Delta's.

Examples
--------
>>> import pandas as pd, kstore
>>> from kstore.io.memory import MemoryStore
>>> st = MemoryStore()
>>> _ = kstore.store_dataset(st, "d", pd.DataFrame({"k": [1, 2], "x": [5, 6]}))
>>> _ = kstore.update_rows(st, "d", [[("k", "==", 2)]], set={"x": 60})
>>> t = read_changes(st, "d", 0)
>>> list(zip(t["_commit_version"].to_pylist(), t["_change_type"].to_pylist(), t["x"].to_pylist()))
[(0, 'insert', 5), (0, 'insert', 6), (1, 'update_preimage', 6), (1, 'update_postimage', 60)]
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa

from kstore.blocks import load
from kstore.blocks.read import read_plan
from kstore.core.columns import FILE_NAME, file_name
from kstore.core.log import LogEntry
from kstore.core.metadata import DatasetMetadata
from kstore.core.planning import plan_read
from kstore.errors import DatasetNotFoundError, InvalidArgumentError, VersionNotFoundError
from kstore.io.store import Store

log = logging.getLogger("kstore.read")

__all__ = ["read_changes", "plan_changes", "version_changes", "conform_changes", "appends_only", "ChangeRange",
           "CHANGE_COLUMNS", "NO_ROW_CHANGES", "APPEND_ONLY"]

#: the columns every change row has besides the data columns (Delta's names)
CHANGE_COLUMNS = ("_change_type", "_commit_version", "_commit_timestamp")
#: operations that change no row
NO_ROW_CHANGES = frozenset({"compaction", "build_indices", "drop_indices", "upgrade", "vacuum"})
#: operations that only add rows: the versions a stream of a dataset's new rows reads
APPEND_ONLY = frozenset({"create", "append"})
#: operations whose added files carry rows of the files they replace (compared row by row);
#: every other operation is reported as whole files (one this kstore does not know too)
_REWRITES = frozenset({"delete_rows", "restore", "update", "merge"})


@dataclass(frozen=True)
class ChangeRange:
    """A checked range of versions to read the changes of (:func:`plan_changes`): the
    versions with row changes (their log entries, oldest first) and the ``schema`` engines
    with one fixed schema (Spark, Dask) give every change row: the newest version's columns
    and the change columns. Small and picklable (workers compute one version each with
    :func:`version_changes`)."""

    dataset_uuid: str
    start: int
    end: int
    entries: tuple[LogEntry, ...]
    schema: pa.Schema
    #: ``(name, file name)`` of the end version's columns: each version's rows are read under
    #: the end version's names (a column renamed in the range reads under its new name)
    names: tuple[tuple[str, str], ...] = ()


def plan_changes(store: Store, dataset_uuid: str, start_version: int, end_version: int | None = None) -> ChangeRange:
    """Check the range ``start_version`` .. ``end_version`` (inclusive; None: the newest) and
    list its versions with row changes; reads the log entries, no data file.

    A version in the range that garbage collection expired is a
    :class:`~kstore.errors.VersionNotFoundError`; a ``delete`` of the dataset in the range too
    (the one before a version is checked when its changes are computed).
    """
    newest, _ = load.load_latest(store, dataset_uuid)
    if newest is None:
        raise DatasetNotFoundError(f"dataset {dataset_uuid!r} does not exist")
    if newest.version is None:
        raise VersionNotFoundError(f"dataset {dataset_uuid!r} has no versions (a kartothek dataset: "
                                   "kstore.upgrade_dataset gives it its first)")
    end = newest.version if end_version is None else end_version
    for name, v in (("start_version", start_version), ("end_version", end)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise InvalidArgumentError(f"{name} must be a version number >= 0, got {v!r}")
    if end > newest.version:
        raise VersionNotFoundError(f"dataset {dataset_uuid!r} has no version {end} (the newest is {newest.version})")
    if start_version > end:
        raise InvalidArgumentError(f"start_version {start_version} is after end_version {end}")
    entries = []
    for v in range(start_version, end + 1):
        entry = _entry(store, dataset_uuid, v, start_version, end)
        if entry.operation == "delete":
            raise VersionNotFoundError(
                f"dataset {dataset_uuid!r}: version {v} deleted the dataset (its files are gone): read the changes "
                "of a range after it")
        if entry.operation not in NO_ROW_CHANGES:
            entries.append(entry)
    last = newest if end == newest.version else _version(store, dataset_uuid, end, start_version, end)
    names = tuple((f.name, file_name(f)) for f in load.load_schema(store, last))
    return ChangeRange(dataset_uuid, start_version, end, tuple(entries), _empty(last, store).schema, names)


def version_changes(store: Store, changes: ChangeRange, entry: LogEntry, before: DatasetMetadata | None = None,
                    ) -> tuple[list[pa.Table], DatasetMetadata]:
    """The change rows of one version of ``changes`` (one table per kind of change, in the
    order reported; each in that version's own types) and the version's state. ``before``:
    the state of the version before, when the caller has it (else it is loaded)."""
    v, start, end = entry.version, changes.start, changes.end
    now = _version(store, changes.dataset_uuid, v, start, end)
    if before is None and v > 0 and entry.operation != "create":
        before = _version(store, changes.dataset_uuid, v - 1, start, end, previous=True)
    return _changes_of(store, entry, before, now, changes.names), now


def appends_only(changes: ChangeRange, *, skip_change_commits: bool = False) -> ChangeRange:
    """``changes`` with only the versions that added rows and changed none (``create``,
    ``append``): what a stream of a dataset's new rows reads (Delta's streaming source; their
    change rows are all ``insert``). A version in the range that changed or removed rows
    (an overwrite, a row delete or update, a merge, a restore) is an
    :class:`~kstore.errors.InvalidArgumentError` naming it, unless ``skip_change_commits``
    (Delta's ``skipChangeCommits``): then it is left out, the rows it added too.

    >>> import pandas as pd, kstore
    >>> from kstore.io.memory import MemoryStore
    >>> st = MemoryStore()
    >>> _ = kstore.store_dataset(st, "d", pd.DataFrame({"k": [1, 2]}))
    >>> _ = kstore.delete_rows(st, "d", [[("k", "==", 2)]])
    >>> _ = kstore.update_dataset(st, "d", pd.DataFrame({"k": [3]}))
    >>> [e.version for e in appends_only(plan_changes(st, "d", 0), skip_change_commits=True).entries]
    [0, 2]
    >>> appends_only(plan_changes(st, "d", 0))
    Traceback (most recent call last):
    ...
    kstore.errors.InvalidArgumentError: dataset 'd': version 1 (delete_rows) changed or removed rows, so a stream of the dataset's new rows cannot go past it: set the option skipChangeCommits=true to skip such versions (and the rows they added), or stream the change feed (readChangeFeed=true)
    """
    kept = []
    for entry in changes.entries:
        if entry.operation in APPEND_ONLY:
            kept.append(entry)
        elif not skip_change_commits:
            raise InvalidArgumentError(
                f"dataset {changes.dataset_uuid!r}: version {entry.version} ({entry.operation}) changed or removed rows, "
                "so a stream of the dataset's new rows cannot go past it: set the option skipChangeCommits=true to "
                "skip such versions (and the rows they added), or stream the change feed (readChangeFeed=true)")
    return replace(changes, entries=tuple(kept))


def conform_changes(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Change rows in the fixed ``schema`` of a range (:attr:`ChangeRange.schema`): columns
    it lacks dropped, columns the rows lack null, widened columns converted (exactly)."""
    return pa.Table.from_arrays(
        [table.column(f.name).cast(f.type) if f.name in table.column_names else pa.nulls(table.num_rows, f.type)
         for f in schema], schema=schema)


def read_changes(store: Store, dataset_uuid: str, start_version: int, end_version: int | None = None) -> pa.Table:
    """The row changes of versions ``start_version`` .. ``end_version`` (inclusive; None:
    the newest), oldest first (see the module docstring): :func:`plan_changes`, then
    :func:`version_changes` of each version, in one table (:func:`_concat`).
    """
    changes = plan_changes(store, dataset_uuid, start_version, end_version)
    parts: list[pa.Table] = []
    before: DatasetMetadata | None = None
    previous = None
    for entry in changes.entries:
        if previous is None or entry.version != previous + 1:
            before = None  # (a version without row changes between: load the one before)
        got, before = version_changes(store, changes, entry, before)
        parts += got
        previous = entry.version
    if not parts:
        return changes.schema.empty_table()
    return _concat(parts)


def _concat(parts: list[pa.Table]) -> pa.Table:
    """The changes of several versions in one table, the data columns in the newest version's
    order (then those only older versions have), the change columns last: a column the
    schema gained reads null in versions before; a column that widened (``schema_mode=
    "merge"``) has its newest type, older versions' values converted exactly (the widening
    rule guarantees it)."""
    fields: dict[str, pa.Field] = {}
    for part in reversed(parts):  # the newest version's type first
        for f in part.schema:
            fields.setdefault(f.name, f)
    names = [n for n in fields if n not in CHANGE_COLUMNS] + list(CHANGE_COLUMNS)
    try:
        return pa.concat_tables(parts, promote_options="permissive").select(names)
    except (pa.ArrowTypeError, pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass  # a kind permissive promotion does not join (date -> timestamp)
    schema = pa.schema([fields[n] for n in names])
    return pa.concat_tables([
        pa.Table.from_arrays([part.column(n).cast(fields[n].type) if n in part.column_names
                              else pa.nulls(part.num_rows, fields[n].type) for n in names], schema=schema)
        for part in parts])


def _entry(store: Store, uuid: str, v: int, start: int, end: int) -> LogEntry:
    try:
        entry = load.load_entry(store, uuid, v)
    except VersionNotFoundError as exc:
        raise VersionNotFoundError(f"dataset {uuid!r}: the changes of versions {start}..{end} are not retained: "
                                   f"{exc}") from exc
    if entry.expired:
        raise VersionNotFoundError(f"dataset {uuid!r}: the changes of versions {start}..{end} are not retained: "
                                   f"version {v} was expired by garbage collection")
    return entry


def _version(store: Store, uuid: str, v: int, start: int, end: int, *, previous: bool = False) -> DatasetMetadata:
    try:
        return load.load_version(store, uuid, v)
    except VersionNotFoundError as exc:
        what = f"version {v}, which the changes of version {v + 1} are computed against," if previous else \
            f"version {v}"
        raise VersionNotFoundError(f"dataset {uuid!r}: the changes of versions {start}..{end} are not retained: "
                                   f"{what} is not readable ({exc})") from exc


def _keys(meta: DatasetMetadata | None) -> dict[str, str]:
    """key -> label of the version's data files (every table)."""
    if meta is None:
        return {}
    return {key: label for label, files in meta.partitions.items() for key in files.values()}


def _aligned(schema: pa.Schema, names: tuple[tuple[str, str], ...]) -> pa.Schema:
    """``schema`` (a version's) with its columns under the names of the range's end version
    (``names``: its ``(name, file name)``): a column stored under the same file name takes
    the end version's name; one the end version dropped and added again (same name,
    another file name) is left out."""
    if not names:
        return schema
    by_file = {fn: n for n, fn in names}
    end_names = dict(names)
    fields = []
    for f in schema:
        fn = file_name(f)
        if fn in by_file:
            f = f.with_name(by_file[fn])
            if by_file[fn] != fn:
                f = f.with_metadata({**(f.metadata or {}), FILE_NAME: fn.encode()})
        elif f.name in end_names:
            continue  # another column of the same name (dropped, then added again)
        fields.append(f)
    return pa.schema(fields, metadata=schema.metadata)


def _rows(store: Store, meta: DatasetMetadata | None, keys: set[str],
          names: tuple[tuple[str, str], ...] = ()) -> pa.Table | None:
    """All rows of ``meta``'s files among ``keys`` (None: no such file), under the names
    ``names`` gives (:func:`_aligned`)."""
    if meta is None or not keys:
        return None
    schema = load.load_schema(store, meta)
    plan = plan_read(meta, schema)
    tasks = tuple(t for t in plan.tasks if t.key in keys)
    if not tasks:
        return None
    plan = replace(plan, tasks=tasks)
    if names and [(f.name, file_name(f)) for f in schema] != list(names):
        aligned = _aligned(schema, names)  # (every file is read whole: no predicate names a column)
        plan = replace(plan, schema=aligned, columns=tuple(aligned.names))
    return read_plan(store, plan)


def _changes_of(store: Store, entry: LogEntry, before: DatasetMetadata | None,
                now: DatasetMetadata, names: tuple[tuple[str, str], ...] = ()) -> list[pa.Table]:
    old, new = _keys(before), _keys(now)
    removed = _rows(store, before, set(old) - set(new), names)
    added = _rows(store, now, set(new) - set(old), names)
    out: list[tuple[str | pa.Array, pa.Table]] = []  # (change type(s), rows), in the order reported
    if entry.operation not in _REWRITES:
        out += [("delete", removed)] if removed is not None else []
        out += [("insert", added)] if added is not None else []
    else:
        gone, came = _net(removed, added)
        pairing = _pairing_columns(entry, gone if gone is not None else came)
        if pairing and gone is not None and came is not None:
            pre, post, gone, came = _pair(gone, came, pairing)
            out.append(("delete", gone))
            # each preimage right before its postimage (Delta's order within a version)
            n = pre.num_rows
            order = np.empty(2 * n, dtype=np.int64)
            order[0::2], order[1::2] = np.arange(n), np.arange(n, 2 * n)
            kinds = pa.array(["update_preimage", "update_postimage"] * n, pa.string())
            out.append((kinds, pa.concat_tables([pre, post], promote_options="default").take(pa.array(order))))
        else:
            out += [("delete", gone)] if gone is not None else []
        out += [("insert", came)] if came is not None else []
    stamp = pa.scalar(entry.timestamp, pa.timestamp("us", tz="UTC"))
    tables = []
    for kind, rows in out:
        n = rows.num_rows
        if n:
            tables.append(rows.append_column("_change_type", pa.array([kind] * n, pa.string()) if isinstance(kind, str)
                                             else kind)
                          .append_column("_commit_version", pa.array(np.full(n, entry.version, np.int64)))
                          .append_column("_commit_timestamp", pa.array([stamp] * n, stamp.type)))
    return tables


def _net(removed: pa.Table | None, added: pa.Table | None) -> tuple[pa.Table | None, pa.Table | None]:
    """``removed`` less ``added`` and ``added`` less ``removed``, as multisets of whole rows."""
    if removed is None or added is None:
        return removed, added
    added = added.select(removed.column_names) if set(added.column_names) == set(removed.column_names) else added
    if added.schema.names != removed.schema.names or not added.schema.equals(removed.schema, check_metadata=False):
        return removed, added  # (other columns or types: nothing to cancel)
    cols = list(removed.column_names)
    side = pa.concat_tables([
        _groupable(removed).append_column("__side", pa.array(np.full(removed.num_rows, -1, np.int64))),
        _groupable(added).append_column("__side", pa.array(np.full(added.num_rows, 1, np.int64))),
    ])
    side = side.append_column("__pos", pa.array(np.arange(side.num_rows, dtype=np.int64)))
    groups = side.group_by(cols, use_threads=False).aggregate([("__side", "sum"), ("__pos", "list")])
    net = groups.column("__side_sum").to_numpy()
    changed = np.flatnonzero(net != 0)
    positions = groups.column("__pos_list").take(pa.array(changed, pa.int64())).to_pylist()
    take_gone: list[int] = []
    take_came: list[int] = []
    for i, pos in zip(changed, positions):
        if net[i] < 0:  # removed copies left over
            take_gone += sorted(p for p in pos if p < removed.num_rows)[: -net[i]]
        else:
            take_came += sorted(p - removed.num_rows for p in pos if p >= removed.num_rows)[: net[i]]
    return (removed.take(pa.array(sorted(take_gone), pa.int64())),
            added.take(pa.array(sorted(take_came), pa.int64())))


def _groupable(table: pa.Table) -> pa.Table:
    """``table`` with each nested column (list, struct, map: no hash grouping in Arrow) as
    the text of its values, which tells equal values from unequal ones the same way."""
    for i, f in enumerate(table.schema):
        if pa.types.is_nested(f.type):
            text = pa.array([None if v is None else repr(v) for v in table.column(i).to_pylist()], pa.string())
            table = table.set_column(i, pa.field(f.name, pa.string()), text)
    return table


def _pairing_columns(entry: LogEntry, rows: pa.Table | None) -> list[str]:
    """The columns that tell which added row a removed row became: a merge's keys; for an
    update, every column it did not set. None known (other operations): no pairs."""
    if rows is None:
        return []
    info = entry.info or {}
    if entry.operation == "merge" and isinstance(info.get("on"), list):
        return [c for c in info["on"] if c in rows.column_names]
    if entry.operation == "update" and isinstance(info.get("set_columns"), list):
        return [c for c in rows.column_names if c not in info["set_columns"]]
    return []


def _pair(gone: pa.Table, came: pa.Table, by: Sequence[str]) -> tuple[pa.Table, pa.Table, pa.Table, pa.Table]:
    """(preimages, postimages (row i became row i), unpaired removed, unpaired added): rows
    with equal ``by`` values (nulls equal, as in a group) paired in order (the n-th removed
    with the n-th added)."""
    n = gone.num_rows
    both = pa.concat_tables([_groupable(gone.select(list(by))), _groupable(came.select(list(by)))])
    both = both.append_column("__pos", pa.array(np.arange(both.num_rows, dtype=np.int64)))
    groups = both.group_by(list(by), use_threads=False).aggregate([("__pos", "list")])
    li: list[int] = []
    ri: list[int] = []
    for pos in groups.column("__pos_list").to_pylist():
        left = sorted(p for p in pos if p < n)
        right = sorted(p - n for p in pos if p >= n)
        k = min(len(left), len(right))
        li += left[:k]
        ri += right[:k]
    order = np.argsort(np.asarray(li, dtype=np.int64), kind="stable")
    lia, ria = np.asarray(li, dtype=np.int64)[order], np.asarray(ri, dtype=np.int64)[order]
    rest_l = np.setdiff1d(np.arange(n), lia)
    rest_r = np.setdiff1d(np.arange(came.num_rows), ria)
    return gone.take(pa.array(lia)), came.take(pa.array(ria)), gone.take(pa.array(rest_l)), came.take(pa.array(rest_r))


def _empty(meta: DatasetMetadata, store: Store) -> pa.Table:
    schema = load.load_schema(store, meta)
    fields = [pa.field(f.name, f.type) for f in schema] + [
        pa.field("_change_type", pa.string()), pa.field("_commit_version", pa.int64()),
        pa.field("_commit_timestamp", pa.timestamp("us", tz="UTC"))]
    return pa.schema(fields).empty_table()
