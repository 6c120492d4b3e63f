"""One committed version as a ``pyarrow.dataset.Dataset``: exactly its files, nothing else.

A kstore directory holds more Parquet files than any one version reads: files of replaced
partitions and deleted rows stay until garbage collection (time travel reads them), and a
failed write may leave files no version names. ``pyarrow.dataset.dataset(directory)``,
DuckDB's ``read_parquet`` and Polars' ``scan_parquet`` see all of them and return wrong
rows. :func:`plan_dataset` builds the dataset from a :class:`~kstore.core.planning.ReadPlan`
instead: one fragment per planned file, each with its partition values as the fragment's
``partition_expression`` (so engines prune partitions by a filter and fill the partition
columns as constants), under the version's read schema (files missing a column read it as
nulls).

Files are opened through :func:`kstore.io.arrowfs.filesystem_paths`: by path in a local
directory, through the store's range reads elsewhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs

from kstore.core.columns import file_names
from kstore.core.planning import ReadPlan
from kstore.core.types import duplicate_names, read_schema
from kstore.io.arrowfs import filesystem_paths
from kstore.io.store import Store

__all__ = ["plan_dataset", "partition_expression", "has_duplicate_columns", "PARQUET", "LOCAL_PARQUET"]

#: Arrow's Parquet format as kstore scans files of object stores and Python files
PARQUET = ds.ParquetFileFormat()
#: native local files: column chunks read as the decoder asks (pre-buffering coalesces
#: reads on Arrow's I/O threads, which pays on object stores, not on a local disk)
LOCAL_PARQUET = ds.ParquetFileFormat(default_fragment_scan_options=ds.ParquetFragmentScanOptions(pre_buffer=False))


def partition_expression(values: Sequence[tuple[str, Any]], schema: pa.Schema) -> ds.Expression:
    """The expression a fragment's partition values satisfy: ``k == v`` for each key
    (``is_null(k)`` for a null value), typed by ``schema``; ``true`` without keys."""
    expr: ds.Expression | None = None
    for key, value in values:
        f = ds.field(key)
        term = f.is_null() if value is None else f == pa.scalar(value, schema.field(key).type)
        expr = term if expr is None else expr & term
    return ds.scalar(True) if expr is None else expr


def plan_dataset(store: Store, plan: ReadPlan, columns: Sequence[str] | None = None, *,
                 in_files: bool = False) -> ds.FileSystemDataset:
    """The planned files of ``plan`` as one ``pyarrow.dataset`` (fragments in plan order).

    The schema is the version's read schema, restricted to ``columns`` (in that order) when
    given; partition columns not in it are left out of the fragments' expressions. Rows are
    not filtered: the dataset holds every row of every planned file. ``in_files``: renamed
    columns (:mod:`kstore.core.columns`) under their file names, as the files hold them
    (the caller projects them back: ``{name: ds.field(file name)}``).
    """
    rschema = read_schema(plan.schema)
    names = list(columns) if columns is not None else list(rschema.names)
    renames = file_names(plan.schema) if in_files else {}
    schema = pa.schema([rschema.field(c).with_name(renames.get(c, c)) for c in names])
    fs, paths = filesystem_paths(store, [t.key for t in plan.tasks])
    partitions = [partition_expression([(k, v) for k, v in t.partition_values if k in schema.names], schema)
                  for t in plan.tasks]
    fmt = LOCAL_PARQUET if isinstance(fs, pafs.LocalFileSystem) else PARQUET
    return ds.FileSystemDataset.from_paths(paths, schema=schema, format=fmt, filesystem=fs,
                                           partitions=partitions)


def has_duplicate_columns(dataset: ds.FileSystemDataset) -> bool:
    """Whether a file of ``dataset`` repeats a column name (a scan reads its first match
    silently). Readers call it after their scan, which kept every footer it read on the
    fragments: no I/O then (a footer no scan read is read here).

    >>> import pyarrow as pa, pyarrow.parquet as pq, tempfile, os
    >>> d = tempfile.mkdtemp(); pq.write_table(pa.table({"x": [1]}), os.path.join(d, "f.parquet"))
    >>> has_duplicate_columns(ds.dataset(d))
    False
    """
    return any(duplicate_names(f.physical_schema.names) for f in dataset.get_fragments())
