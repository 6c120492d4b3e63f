"""Column mapping: the names columns have in the data files, apart from their names in the
dataset (renaming and dropping columns without rewriting data; FORMAT.md, "Column mapping").

Pure functions over a dataset schema; no I/O.

A dataset's schema names its columns as users see them. A field that was renamed carries
the name its data files hold it under in its metadata (:data:`FILE_NAME`, like Delta's
``delta.columnMapping.physicalName``); a field without it is stored under its own name, so
a dataset that never renamed a column is exactly the kartothek format. Dropping a column
removes its field and records its file name as retired (:data:`RETIRED`): the files written
before keep its values, which no reader reads again, and a column added later under a used
name gets a fresh file name (:func:`file_name_for`), so the old values never reappear.

Everything in kstore's metadata (statistics, indices, partition labels, predicates) uses the
dataset's names; only the data files use file names. Readers ask each file for the file
names of the columns they read and return the dataset's names; writers write each column
under :func:`file_name_for` and report that in :attr:`~kstore.blocks.write.WrittenFile.renamed`;
the commit checks every written file against the schema it commits
(:func:`check_written_names`), so a write that raced a rename or drop fails instead of
committing values under the wrong column.

>>> s = pa.schema([("a", pa.int64()), ("b", pa.string())])
>>> s2 = rename_columns(s, {"a": "x"}, dataset="d")
>>> s2.names, file_names(s2)
(['x', 'b'], {'x': 'a'})
>>> s3 = drop_columns(s2, ["b"], dataset="d")
>>> s3.names, sorted(retired_names(s3))
(['x'], ['b'])
>>> file_name_for(s3, "b"), file_name_for(s3, "c"), file_name_for(s3, "x")
('b__kstore1', 'c', 'a')
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from kstore.core.arguments import check_text
from kstore.errors import ColumnNotFoundError, CommitConflictError, InvalidArgumentError, SchemaMismatchError

__all__ = [
    "FILE_NAME", "RETIRED", "ColumnNames", "file_name", "file_names", "retired_names", "file_name_for",
    "with_file_names", "rename_columns", "drop_columns", "files_schema", "without_mapping", "renamed_dnf",
    "check_written_names", "current_names", "renamed_pandas_metadata",
]

#: field metadata: the name the data files hold the field under (absent: its own name)
FILE_NAME = b"kstore.file_name"
#: schema metadata: JSON list of file names no column uses any more (dropped columns), which
#: the files written before may still hold
RETIRED = b"kstore.retired_names"
#: the infix of a fresh file name (``<name>__kstore<n>``)
_FRESH = "__kstore"


def file_name(f: pa.Field) -> str:
    """The name the data files hold field ``f`` under.

    >>> file_name(pa.field("x", pa.int64())), file_name(pa.field("x", pa.int64(), metadata={FILE_NAME: b"a"}))
    ('x', 'a')
    """
    raw = (f.metadata or {}).get(FILE_NAME)
    return str(raw.decode("utf-8")) if raw else f.name


def file_names(schema: pa.Schema | None) -> dict[str, str]:
    """The columns of ``schema`` stored under another name: ``{name: file name}`` (empty for a
    dataset that never renamed a column)."""
    if schema is None:
        return {}
    return {f.name: n for f in schema if (n := file_name(f)) != f.name}


def retired_names(schema: pa.Schema | None) -> frozenset[str]:
    """The file names of dropped columns (:data:`RETIRED`)."""
    raw = ((schema.metadata or {}) if schema is not None else {}).get(RETIRED)
    if not raw:
        return frozenset()
    try:
        names = json.loads(raw)
    except ValueError:
        return frozenset()
    return frozenset(n for n in names if isinstance(n, str)) if isinstance(names, list) else frozenset()


def _used(schema: pa.Schema) -> set[str]:
    """Every name a data file of a dataset of ``schema`` may hold a column under."""
    return {file_name(f) for f in schema} | set(retired_names(schema))


def file_name_for(schema: pa.Schema | None, name: str) -> str:
    """The file name of column ``name`` written to a dataset of ``schema``: a column's own
    file name; for a new column, its name, unless a file may hold another column under it
    (a renamed column's file name, a dropped column's), then ``<name>__kstore<n>``, the
    first not used. A pure function of the schema: every writer of a version agrees."""
    return ColumnNames.of(schema).file_name(name)


@dataclass(frozen=True, slots=True)
class ColumnNames:
    """How a writer names the columns of the files it writes for one version of a dataset
    (small, immutable and picklable: Dask and Spark tasks carry it).

    >>> names = ColumnNames.of(rename_columns(pa.schema([("a", pa.int64())]), {"a": "b"}, dataset="d"))
    >>> names.file_name("b"), names.file_name("c"), bool(names), bool(ColumnNames())
    ('a', 'c', True, False)
    """

    #: ``(name, file name)`` of the columns stored under another name
    renamed: tuple[tuple[str, str], ...] = ()
    #: the file names a new column may not take
    used: frozenset[str] = frozenset()
    #: the dataset's column names
    names: frozenset[str] = frozenset()

    @classmethod
    def of(cls, schema: pa.Schema | None) -> ColumnNames:
        """The names of a version of ``schema`` (None: a new dataset, every name its own)."""
        if schema is None or not (file_names(schema) or retired_names(schema)):
            return cls()
        return cls(tuple(sorted(file_names(schema).items())), frozenset(_used(schema)), frozenset(schema.names))

    def __bool__(self) -> bool:
        return bool(self.renamed or self.used)

    def file_name(self, name: str) -> str:
        """The file name of column ``name`` in the version this was made of (see
        :func:`file_name_for`)."""
        for col, stored in self.renamed:
            if col == name:
                return stored
        if name in self.names or name not in self.used:
            return name
        n = 1
        while f"{name}{_FRESH}{n}" in self.used | self.names:
            n += 1
        return f"{name}{_FRESH}{n}"

    def mapping(self, columns: Iterable[str]) -> dict[str, str]:
        """``{name: file name}`` of the ``columns`` stored under another name."""
        out = {c: self.file_name(c) for c in columns} if self else {}
        return {c: f for c, f in out.items() if c != f}


def with_file_names(schema: pa.Schema, base: pa.Schema | None) -> pa.Schema:
    """``schema`` (a new version's, merged from ``base``'s and new data's) with every new
    column's file name (:func:`file_name_for` of ``base``) and ``base``'s retired names."""
    if base is None or not (file_names(base) or retired_names(base)):
        return schema
    fields = []
    for f in schema:
        if base.get_field_index(f.name) < 0 and (fn := file_name_for(base, f.name)) != f.name:
            f = f.with_metadata({**(f.metadata or {}), FILE_NAME: fn.encode()})
        fields.append(f)
    out = pa.schema(fields, metadata=schema.metadata)
    return _with_retired(out, retired_names(base) | retired_names(schema))


def _with_retired(schema: pa.Schema, retired: Collection[str]) -> pa.Schema:
    meta = {k: v for k, v in (schema.metadata or {}).items() if k != RETIRED}
    if retired:
        meta[RETIRED] = json.dumps(sorted(retired)).encode()
    return schema.with_metadata(meta)


def without_mapping(schema: pa.Schema) -> pa.Schema:
    """``schema`` with every column stored under its own name and nothing retired (a dataset
    whose every file is new: a full overwrite)."""
    if not (file_names(schema) or retired_names(schema)):
        return schema
    fields = [f.with_metadata({k: v for k, v in f.metadata.items() if k != FILE_NAME}) if f.metadata else f
              for f in schema]
    return _with_retired(pa.schema(fields, metadata=schema.metadata), ())


def renamed_pandas_metadata(meta: Mapping[str, Any] | None, renames: Mapping[str, str]) -> dict[str, Any] | None:
    """pandas metadata (``schema_pandas_metadata``) with its columns renamed: the column
    entries (``name``, ``field_name``) and the index columns; entries renamed to None are
    dropped.

    >>> renamed_pandas_metadata({"index_columns": ["k"], "columns": [{"name": "k", "field_name": "k"}]},
    ...                         {"k": "key"})
    {'index_columns': ['key'], 'columns': [{'name': 'key', 'field_name': 'key'}]}
    """
    if meta is None:
        return None
    out = dict(meta)
    cols = []
    for c in meta.get("columns", []):
        fname = c.get("field_name")
        if fname in renames:
            if renames[fname] is None:
                continue
            c = {**c, "field_name": renames[fname], "name": renames[fname] if c.get("name") == fname else c.get("name")}
        cols.append(c)
    out["columns"] = cols
    out["index_columns"] = [renames.get(c, c) for c in meta.get("index_columns", [])
                            if not (isinstance(c, str) and c in renames and renames[c] is None)]
    return out


def _pandas(schema: pa.Schema) -> dict[str, Any] | None:
    from kstore.core.types import schema_pandas_metadata

    return schema_pandas_metadata(schema)


def _with_pandas(schema: pa.Schema, source: Mapping[str, Any] | None) -> pa.Schema:
    from kstore.core.types import with_pandas_metadata

    if source is None:
        return schema
    return with_pandas_metadata(schema, source)


def rename_columns(schema: pa.Schema, renames: Mapping[str, str], *, dataset: str,
                   fixed: Collection[str] = ()) -> pa.Schema:
    """``schema`` with the columns ``renames`` names renamed (``{old: new}``); their data
    stays under its file name. ``fixed`` columns (the partition columns, whose names are in
    every file's path) cannot be renamed.

    >>> rename_columns(pa.schema([("a", pa.int64())]), {"b": "c"}, dataset="d")
    Traceback (most recent call last):
    ...
    kstore.errors.ColumnNotFoundError: dataset 'd' has no column 'b' to rename (its columns: ['a'])
    """
    if not renames:
        raise InvalidArgumentError(f"dataset {dataset!r}: rename_columns needs at least one column")
    for old, new in renames.items():
        if not isinstance(old, str) or not isinstance(new, str) or not new:
            raise InvalidArgumentError(f"dataset {dataset!r}: renames maps column names to new names, got "
                                       f"{old!r}: {new!r}")
        check_text(new, f"dataset {dataset!r}: the new name of column {old!r}")
        check_text(old, f"dataset {dataset!r}: a column to rename")
        if schema.get_field_index(old) < 0:
            raise ColumnNotFoundError(f"dataset {dataset!r} has no column {old!r} to rename (its columns: "
                                      f"{schema.names})")
        if old in fixed:
            raise InvalidArgumentError(
                f"dataset {dataset!r}: column {old!r} is a partition column, whose name is part of every file's "
                "path; renaming it rewrites the dataset: overwrite it with schema_mode='overwrite'")
    names = [renames.get(n, n) for n in schema.names]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise SchemaMismatchError(f"dataset {dataset!r}: renaming gives two columns the name(s) {dup}")
    fields = []
    for f in schema:
        if f.name in renames:
            fn = file_name(f)
            meta = {k: v for k, v in (f.metadata or {}).items() if k != FILE_NAME}
            if fn != renames[f.name]:
                meta[FILE_NAME] = fn.encode()
            f = f.with_name(renames[f.name]).with_metadata(meta) if meta else f.with_name(renames[f.name]).remove_metadata()
        fields.append(f)
    out = pa.schema(fields, metadata=schema.metadata)
    return _with_pandas(out, renamed_pandas_metadata(_pandas(schema), dict(renames)))


def drop_columns(schema: pa.Schema, columns: Sequence[str], *, dataset: str, fixed: Collection[str] = ()) -> pa.Schema:
    """``schema`` without ``columns``; their file names become retired (:data:`RETIRED`).

    >>> drop_columns(pa.schema([("a", pa.int64())]), ["a"], dataset="d")
    Traceback (most recent call last):
    ...
    kstore.errors.InvalidArgumentError: dataset 'd': dropping ['a'] leaves no column (but partition columns) in the data files
    """
    if not columns:
        raise InvalidArgumentError(f"dataset {dataset!r}: drop_columns needs at least one column")
    for c in columns:
        if isinstance(c, str):
            check_text(c, f"dataset {dataset!r}: a column to drop")
        if not isinstance(c, str) or schema.get_field_index(c) < 0:
            raise ColumnNotFoundError(f"dataset {dataset!r} has no column {c!r} to drop (its columns: "
                                      f"{schema.names})")
        if c in fixed:
            raise InvalidArgumentError(
                f"dataset {dataset!r}: column {c!r} is a partition column, whose values are part of every "
                "file's path; dropping it rewrites the dataset: overwrite it with schema_mode='overwrite'")
    if not [n for n in schema.names if n not in columns and n not in fixed]:
        raise InvalidArgumentError(f"dataset {dataset!r}: dropping {list(columns)} leaves no column "
                                   "(but partition columns) in the data files")
    gone = {file_name(schema.field(c)) for c in columns}
    out = pa.schema([f for f in schema if f.name not in columns], metadata=schema.metadata)
    out = _with_retired(out, retired_names(schema) | gone)
    return _with_pandas(out, renamed_pandas_metadata(_pandas(schema), dict.fromkeys(columns)))  # type: ignore[arg-type]


def files_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` as the data files hold it: every field under its file name, the pandas
    metadata renamed to match (what ``_common_metadata`` shows kartothek and plateau)."""
    renames = file_names(schema)
    if not renames:
        return schema
    fields = [f.with_name(renames.get(f.name, f.name)).remove_metadata() for f in schema]
    out = pa.schema(fields, metadata={k: v for k, v in (schema.metadata or {}).items() if k != RETIRED})
    return _with_pandas(out, renamed_pandas_metadata(_pandas(schema), renames))


def renamed_dnf(dnf: Any, renames: Mapping[str, str]) -> Any:
    """A predicate in DNF (tuples of :class:`~kstore.core.predicates.Term`) on the dataset's
    names, on the file names instead."""
    from dataclasses import replace

    if not dnf or not renames:
        return dnf
    return tuple(tuple(replace(t, column=renames.get(t.column, t.column)) for t in conj) for conj in dnf)


def check_written_names(schema: pa.Schema, written: Iterable[tuple[str, Sequence[str], Mapping[str, str]]], *,
                        dataset: str) -> None:
    """CommitConflictError unless every written file holds its columns under the file names
    ``schema`` (the version being committed) gives them. ``written``: per file its key, its
    columns and the ``{name: file name}`` it used for the ones it renamed. A write that read a
    version before a column was renamed or dropped (and added again) wrote its values under a
    name that now means another column: committing it would show them there."""
    for key, columns, renamed in written:
        for c in columns:
            i = schema.get_field_index(c)
            if i < 0:
                continue
            want, got = file_name(schema.field(i)), renamed.get(c, c)
            if want != got:
                raise CommitConflictError(
                    f"dataset {dataset!r}: file {key!r} holds column {c!r} under the name {got!r}, but the newest "
                    f"version stores that column under {want!r} (a column was renamed or dropped after this "
                    "write read the dataset); nothing was committed")


def current_names(schema: pa.Schema, columns: Iterable[str], renamed: Mapping[str, str]) -> dict[str, str]:
    """``{column: its name in schema}`` for the columns of a written file that ``schema``
    calls otherwise now (renamed after the write read the dataset: a compaction racing a
    rename), found by the file name the file holds each under (``renamed``: ``{name: file
    name}`` where it is not the name). Columns ``schema`` has under their names, or no
    longer has, are left out. Check the file first (:func:`check_written_names`).

    >>> moved = pa.schema([pa.field("b", pa.int64(), metadata={FILE_NAME: b"a"}), pa.field("id", pa.int64())])
    >>> current_names(moved, ["a", "id", "gone"], {})
    {'a': 'b'}
    """
    by_file = {file_name(f): f.name for f in schema}
    out: dict[str, str] = {}
    for c in columns:
        if schema.get_field_index(c) >= 0:
            continue
        now = by_file.get(renamed.get(c, c))
        if now is not None:
            out[c] = now
    return out
