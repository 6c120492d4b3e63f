"""Reading building blocks: one planned file -> an Arrow table in the dataset's read schema.

Files are opened through ``Store.open`` (range reads), only the needed columns are read,
row groups are pruned by their Parquet statistics, rows are filtered exactly by the task's
residual predicate, and partition columns are rebuilt, typed, from the label.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pyarrow.types as pat

if TYPE_CHECKING:
    import pandas as pd

from kstore.blocks.arrow import LOCAL_PARQUET, PARQUET
from kstore.core.arguments import as_bool, as_columns
from kstore.core.columns import file_names, renamed_dnf
from kstore.core.planning import ReadPlan, ReadTask
from kstore.core.predicates import columns_of, to_expression
from kstore.core.runtime import parallel_map, pool_size
from kstore.core.types import read_schema, read_type, schema_pandas_metadata
from kstore.errors import CorruptMetadataError, KeyNotFoundError, UnsupportedTypeError
from kstore.io.arrowfs import open_for_arrow
from kstore.io.store import Store

__all__ = ["read_task", "read_plan", "concat_tables", "to_pandas", "index_columns", "nullable_columns", "empty_table"]


def _constant(value: Any, t: pa.DataType, n: int) -> pa.Array:
    one = pa.array([value], type=t)
    return one.take(pa.array(np.zeros(n, dtype=np.int32)))


def _conform(table: pa.Table, schema: pa.Schema, names: Sequence[str], dataset: str, key: str) -> pa.Table:
    """Cast/reorder to ``names`` of the read schema; columns the file lacks become null."""
    if not names:
        return table.select([])  # keeps the row count
    arrays = []
    for name in names:
        t = schema.field(name).type
        if name in table.column_names:
            col = table.column(name)
            if not col.type.equals(t):
                try:
                    col = col.cast(t)
                except pa.ArrowException as exc:
                    if pat.is_timestamp(col.type) and pat.is_timestamp(t):
                        raise UnsupportedTypeError(
                            f"dataset {dataset!r}: column {name!r} in {key!r} holds {col.type} values with "
                            f"nanoseconds, which kstore reads as {t} (microseconds); read that file with "
                            "pyarrow to keep them"
                        ) from exc
                    raise CorruptMetadataError(
                        f"dataset {dataset!r}: column {name!r} in {key!r} is {col.type}, "
                        f"which does not convert to the dataset type {t}"
                    ) from exc
            arrays.append(col)
        else:
            arrays.append(pa.nulls(table.num_rows, t))
    return pa.Table.from_arrays(arrays, schema=pa.schema([schema.field(n) for n in names]))


def read_task(
    store: Store,
    plan: ReadPlan,
    task: ReadTask,
    columns: Sequence[str] | None = None,
    *,
    memory_pool: pa.MemoryPool | None = None,
) -> pa.Table:
    """Read one planned file: projected, row-group pruned, exactly filtered, typed
    (decoded into ``memory_pool``, default Arrow's)."""
    rschema = read_schema(plan.schema)
    columns = list(columns if columns is not None else plan.columns)
    pvalues = dict(task.partition_values)
    residual_cols = [c for c in columns_of(task.residual) if c not in pvalues]
    data_cols = [c for c in dict.fromkeys(columns + residual_cols) if c not in pvalues]
    renames = file_names(plan.schema)  # columns the files hold under another name (FORMAT.md)
    try:
        fh, threads = open_for_arrow(store, task.key)
    except KeyNotFoundError as exc:
        raise CorruptMetadataError(
            f"dataset {plan.dataset_uuid!r}: partition {task.label!r} file {task.key!r} is missing"
        ) from exc
    with fh:
        try:
            # a Python file (stores other than a local directory) is scanned on this thread,
            # its reads pre-buffered: then this thread, not one of Arrow's, releases the file
            # and the bytes it returned (see kstore.io.arrowfs.open_for_arrow)
            fragment = (LOCAL_PARQUET if threads else PARQUET).make_fragment(fh)
            physical = fragment.physical_schema
            present = [c for c in data_cols if renames.get(c, c) in physical.names]
            expr = to_expression(task.residual, rschema) if task.residual else None
            can_push = (expr is not None and all(renames.get(c, c) in physical.names for c in residual_cols)
                        and nan_safe(task.residual, rschema))
            # the pushed filter names the files' columns (a renamed column: its file name)
            pushed = files_expression(task.residual, rschema, renames) if can_push and renames else expr
            stored = [renames.get(c, c) for c in present]
            try:
                table = fragment.to_table(columns=stored, filter=pushed if can_push else None,
                                          memory_pool=memory_pool, use_threads=threads)
            except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
                can_push = False
                table = fragment.to_table(columns=stored, memory_pool=memory_pool, use_threads=threads)
            if renames:
                table = table.rename_columns(present)
        except (pa.ArrowException, OSError, ValueError, KeyError) as exc:
            raise CorruptMetadataError(
                f"dataset {plan.dataset_uuid!r}: {task.key!r} is not a readable Parquet file ({exc})"
            ) from exc
    table = _conform(table, rschema, data_cols, plan.dataset_uuid, task.key)
    if expr is not None and not can_push:
        table = table.filter(expr)
    n = table.num_rows
    if not columns:
        return table.select([])  # no column, but the row count (``from_arrays`` would give 0 rows)
    arrays, fields = [], []
    for name in columns:
        f = rschema.field(name)
        arrays.append(_constant(pvalues[name], f.type, n) if name in pvalues else table.column(name))
        fields.append(f)
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def files_expression(dnf: Any, schema: pa.Schema, renames: Mapping[str, str]) -> ds.Expression:
    """A predicate in DNF on the dataset's names (``schema``: their read types) as an Arrow
    expression on the names the files hold the columns under (``renames``: ``{name: file
    name}`` of the renamed columns)."""
    in_files = pa.schema([f.with_name(renames.get(f.name, f.name)) for f in schema])
    return to_expression(renamed_dnf(dnf, renames), in_files)


def empty_table(plan: ReadPlan, columns: Sequence[str] | None = None) -> pa.Table:
    rschema = read_schema(plan.schema)
    cols = list(columns if columns is not None else plan.columns)
    return pa.schema([rschema.field(c) for c in cols]).empty_table()


def concat_tables(tables: Sequence[pa.Table]) -> pa.Table:
    """``pa.concat_tables`` that keeps the row count of tables without columns (``columns=[]``).

    >>> t = pa.table({"x": [1, 2]}).select([])
    >>> concat_tables([t, t]).num_rows
    4
    """
    if tables and tables[0].num_columns == 0:
        return pa.table({"_": pa.nulls(sum(t.num_rows for t in tables))}).select([])
    return pa.concat_tables(tables)


#: read a plan of a local store with one multi-file ``pyarrow.dataset`` scan (False: file by file)
MULTI_FILE_SCAN = True


def nan_safe(dnf: Any, schema: pa.Schema) -> bool:
    """Whether Parquet row-group statistics may prune for ``dnf``: not when a term is ``!=``
    or ``not in`` on a floating-point column. Parquet's min/max leave NaN out, so a row group
    holding only ``1.5`` and NaN claims ``min == max == 1.5`` and Arrow's pruning drops it for
    ``x != 1.5``, although NaN != 1.5 is true. Such filters are applied after reading.
    """
    for conj in dnf or ():
        for t in conj:
            if t.op in ("!=", "not in"):
                i = schema.get_field_index(t.column)
                if i >= 0 and pat.is_floating(schema.field(i).type):
                    return False
    return True


def _scan_plan(store: Store, plan: ReadPlan, columns: Sequence[str] | None,
               max_workers: int | None) -> pa.Table | None:
    """All tasks of ``plan`` in one ``pyarrow.dataset`` scan over a local store's files.

    Partition columns come from each file's ``partition_expression`` (constants, not
    per-row work), the residual predicate is pushed down as one expression (row groups
    pruned by their statistics), files missing a column read it as nulls and other types
    are cast (safely) to the read schema: the result equals :func:`read_task` of every task
    concatenated in plan order. None when the plan does not fit (not a plain local store,
    tasks with different residuals or partition columns) or the scan fails; the caller then
    reads file by file, which also raises the precise error.
    """
    from kstore.blocks.arrow import has_duplicate_columns, plan_dataset
    from kstore.io.arrowfs import is_plain_local

    if not MULTI_FILE_SCAN:
        return None
    if not is_plain_local(store):
        return None  # other stores: per-file range reads (a Python file per fragment is slower)
    tasks = plan.tasks
    residual = tasks[0].residual
    pkeys = tuple(c for c, _ in tasks[0].partition_values)
    for t in tasks:
        if t.residual != residual or tuple(c for c, _ in t.partition_values) != pkeys:
            return None
    if residual and not nan_safe(residual, read_schema(plan.schema)):
        return None  # the per-file path filters after reading (see nan_safe)
    rschema = read_schema(plan.schema)
    columns = list(columns if columns is not None else plan.columns)
    if not columns:
        return None  # the row count only: rare, the per-file path keeps it
    residual_cols = list(columns_of(residual)) if residual else []
    used_pkeys = [k for k in pkeys if k in columns or k in residual_cols]
    data_cols = [c for c in dict.fromkeys(columns + residual_cols) if c not in pkeys]
    renames = file_names(plan.schema)  # (renamed columns: the dataset names them as the files do)
    try:
        dataset = plan_dataset(store, plan, data_cols + used_pkeys, in_files=True)
        expr = files_expression(residual, rschema, renames) if residual else None
        threads = pool_size(len(tasks), max_workers, cpu_bound=True) > 1
        projection: Any = {c: ds.field(renames.get(c, c)) for c in columns} if renames else columns
        table = dataset.to_table(columns=projection, filter=expr, use_threads=threads)
        # a file with duplicated column names is read silently (its first match): leave it to
        # the per-file path, which names it (the scan kept every footer it read: no I/O here)
        if has_duplicate_columns(dataset):
            return None
        out_schema = pa.schema([rschema.field(c) for c in columns])
        if not table.schema.equals(out_schema):
            table = pa.Table.from_arrays(table.columns, schema=out_schema)
    except (pa.ArrowException, OSError, ValueError, KeyError, TypeError):
        return None
    return table


def read_plan(
    store: Store,
    plan: ReadPlan,
    columns: Sequence[str] | None = None,
    *,
    max_workers: int | None = None,
) -> pa.Table:
    """Read every task of a plan and concatenate (plan order): one multi-file scan for a
    local store (see :func:`_scan_plan`), else the files in parallel, one by one."""
    if not plan.tasks:
        return empty_table(plan, columns)
    table = _scan_plan(store, plan, columns, max_workers)
    if table is not None:
        return table
    tables = parallel_map(lambda t: read_task(store, plan, t, columns), plan.tasks, max_workers=max_workers)
    return concat_tables(tables)


def to_pandas(
    table: pa.Table,
    schema: pa.Schema,
    *,
    categoricals: Sequence[str] | None = None,
    dates_as_object: bool = False,
    types_mapper: Any = None,
    nullable: Collection[str] | None = None,
    index: bool = True,
) -> pd.DataFrame:
    """Arrow -> pandas the way kartothek users expect.

    Dates become ``datetime64[us]`` unless ``dates_as_object``; ``categoricals`` columns
    become pandas categoricals; nullable dtypes recorded in the dataset's pandas metadata
    (``Int64``, ``Int32``, ``boolean``) are restored, and so is the named index the data
    was written with (:func:`index_columns`). Integer and bool columns in ``nullable`` become
    pandas' nullable dtypes (``Int64`` / ``UInt32`` / ``boolean`` ...) whatever the data; with
    ``nullable=None`` the columns that hold a null here do (see :func:`nullable_columns`
    for one choice that every partition of a read shares). ``types_mapper`` is passed to
    ``Table.to_pandas`` (the Dask driver's mapping keeps Dask from converting columns).
    ``index=False`` leaves every column a column (a ``RangeIndex``).

    >>> t = pa.table({"n": pa.array([1, None]), "b": pa.array([True, None])})
    >>> to_pandas(t, t.schema).dtypes.to_dict()
    {'n': Int64Dtype(), 'b': BooleanDtype}
    >>> to_pandas(t.slice(0, 1), t.schema, nullable=["n"]).dtypes.to_dict()
    {'n': Int64Dtype(), 'b': dtype('bool')}
    """
    import json

    categoricals = list(as_columns(categoricals, "categoricals"))
    dates_as_object = as_bool(dates_as_object, "dates_as_object")
    missing = [c for c in categoricals if c not in table.column_names]
    if missing:
        from kstore.errors import ColumnNotFoundError

        raise ColumnNotFoundError(f"categoricals names column(s) {missing} that are not read")
    if table.num_columns == 0:  # a frame of the right length (``from_arrays`` would give 0 rows)
        import pandas as pd

        return pd.DataFrame(index=pd.RangeIndex(table.num_rows))
    arrays, fields = [], []
    for f, col in zip(table.schema, table.columns):
        if pat.is_date32(f.type) and not dates_as_object:
            col = col.cast(pa.timestamp("us"))  # 0001-01-01 .. 9999-12-31 fit (ns would not)
        if f.name in categoricals and not pat.is_dictionary(col.type):
            col = pc.dictionary_encode(col)
        if f.name in categoricals and pat.is_null(col.type.value_type):
            # nulls only (Arrow's dictionary is [null], a category pandas refuses): no categories
            col = pa.DictionaryArray.from_arrays(pa.nulls(len(col), pa.int32()), pa.array([], pa.null()))
        arrays.append(col)
        fields.append(pa.field(f.name, col.type))
    meta = schema_pandas_metadata(schema) or {"columns": []}
    cols = {c["field_name"]: c for c in meta.get("columns", []) if c.get("field_name")}
    is_nullable = [(col.null_count > 0) if nullable is None else (f.name in nullable) for f, col in zip(fields, arrays)]
    meta = dict(meta, index_columns=index_columns(schema, table.column_names) if index else [], column_indexes=[],
                columns=[_pandas_col(cols.get(f.name), f, n) for f, n in zip(fields, is_nullable)])
    out_schema = pa.schema(fields).with_metadata({b"pandas": json.dumps(meta).encode()})
    table = pa.Table.from_arrays(arrays, schema=out_schema)
    return table.to_pandas(date_as_object=dates_as_object, types_mapper=types_mapper)


def index_columns(schema: pa.Schema, names: Sequence[str]) -> list[str]:
    """The columns of ``names`` that readers of pandas frames make the index: the named
    index the data was written with (the dataset's pandas metadata), when every one of
    its levels is read.

    >>> import pandas as pd
    >>> s = pa.Table.from_pandas(pd.DataFrame({"x": [1]}, index=pd.Index(["a"], name="k"))).schema
    >>> index_columns(s, ["x", "k"]), index_columns(s, ["x"])
    (['k'], [])
    """
    index = (schema_pandas_metadata(schema) or {}).get("index_columns") or []
    return list(index) if index and all(c in names for c in index) else []


def _pandas_col(entry: dict[str, Any] | None, f: pa.Field, nullable: bool = False) -> dict[str, Any]:
    from kstore.core.types import nullable_dtype, pandas_metadata

    fresh: dict[str, Any] = pandas_metadata(pa.schema([pa.field(f.name, read_type(f.type) if not pat.is_dictionary(f.type) else f.type.value_type)]))["columns"][0]
    wanted = nullable_dtype(entry.get("numpy_type"), f.type) if entry is not None else None
    if wanted is not None:
        fresh["numpy_type"] = wanted
    elif nullable and pat.is_integer(f.type):
        # an integer column with missing values stays integer: pandas' nullable dtype (its width)
        fresh["numpy_type"] = f"{'UInt' if pat.is_unsigned_integer(f.type) else 'Int'}{f.type.bit_width}"
    elif nullable and pat.is_boolean(f.type):
        fresh["numpy_type"] = "boolean"  # not object (True/False/None)
    if pat.is_dictionary(f.type):
        fresh["pandas_type"] = "categorical"
        fresh["numpy_type"] = str(f.type.index_type)
        fresh["metadata"] = {"num_categories": None, "ordered": f.type.ordered}
    return fresh


def nullable_columns(plan: ReadPlan, stats: pa.Table | None) -> frozenset[str]:
    """The integer and bool columns of ``plan`` that may hold a null in a planned file.

    Readers that return several frames (``iter_dataset``, Dask partitions and their
    ``meta``) read these with pandas' nullable dtypes in *every* frame, so all frames of
    one read agree on their dtypes. The per-file statistics (``nulls:<column>``) decide;
    a file without statistics for a column (kartothek datasets, a column added later)
    may hold nulls. Partition columns never hold nulls.
    """
    pkeys = {c for t in plan.tasks[:1] for c, _ in t.partition_values}
    cols = [c for c in plan.columns if c not in pkeys
            and (pat.is_integer(plan.schema.field(c).type) or pat.is_boolean(plan.schema.field(c).type))]
    if not cols or not plan.tasks:
        return frozenset()
    if stats is None:
        return frozenset(cols)
    labels = pa.array(sorted({t.label for t in plan.tasks}), pa.string())
    rows = stats.filter(pc.is_in(stats.column("label"), value_set=labels))
    if rows.num_rows < len(labels):
        return frozenset(cols)  # files without statistics
    out = set()
    for c in cols:
        name = f"nulls:{c}"
        if name not in rows.column_names:
            out.add(c)
            continue
        nulls = rows.column(name)
        if nulls.null_count or (pc.sum(nulls).as_py() or 0) > 0:
            out.add(c)
    return frozenset(out)


def index_from_store(
    store: Store, meta: Any, labels: Sequence[str], column: str, vtype: pa.DataType, *, max_workers: int | None = None,
    stored_as: str | None = None,
) -> Any:
    """Build the index of ``column`` over the given partitions by reading that one column
    (``stored_as``: its file name, when the files hold it under another one)."""
    from kstore.core.index import ColumnIndex

    name = stored_as or column

    def one(label: str) -> tuple[pa.Array, str]:
        key = meta.file_key(label)
        try:
            with store.open(key) as fh:
                pf = pq.ParquetFile(fh)
                if name not in pf.schema_arrow.names:
                    return pa.array([], vtype), label
                col = pf.read(columns=[name]).column(name)
            if pat.is_dictionary(col.type):
                col = col.cast(col.type.value_type)
            values = pc.unique(col.combine_chunks()).drop_null()
            return (values.cast(vtype) if not values.type.equals(vtype) else values), label
        except KeyNotFoundError as exc:
            raise CorruptMetadataError(f"dataset {meta.uuid!r}: partition {label!r} file {key!r} is missing") from exc
        except (pa.ArrowException, OSError, ValueError, KeyError) as exc:  # KeyError: a duplicated column
            raise CorruptMetadataError(
                f"dataset {meta.uuid!r}: cannot index column {column!r} of {key!r}: not a readable Parquet "
                f"file with a {vtype} column ({exc})"
            ) from exc

    labels = list(labels)
    if not labels:
        return ColumnIndex.empty(column, vtype)
    parts = parallel_map(one, labels, max_workers=max_workers)
    vals = [v for v, _ in parts if len(v)]
    labs = [pa.array([lab] * len(v), pa.string()) for v, lab in parts if len(v)]
    if not vals:
        return ColumnIndex.empty(column, vtype)
    return ColumnIndex.build(column, pa.concat_arrays(vals), pa.concat_arrays(labs))
