"""Per-file statistics (FORMAT.md B.5): row count, byte size, per-column min / max / nulls.

One Parquet table per dataset version holds a row per partition file, so planning loads
all statistics with one store call. Columns: ``label``, ``rows``, ``bytes`` and, per data
column ``c``, ``min:c``, ``max:c``, ``nulls:c``. A null min/max with ``nulls < rows`` means
"unknown" (never prunes).

>>> import pyarrow as pa
>>> s = file_stats(pa.table({"x": [3, None, 1]}), nbytes=10)
>>> s.rows, s.columns["x"]
(3, (1, 3, 1))
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.types as pat

from kstore.core.predicates import Term
from kstore.core.types import EXACT_IN_DOUBLE, normalize_type
from kstore.errors import CorruptMetadataError, UnsupportedTypeError

__all__ = ["FileStats", "file_stats", "stats_table", "check_stats_table", "stats_by_label", "prune_mask",
           "merge_stats_tables", "in_microseconds", "bound_type", "exact_int64_columns"]

_MAX_STR = 256  # longer string/binary bounds are not kept (the column stays "unknown")


@dataclass(frozen=True, slots=True)
class FileStats:
    rows: int
    nbytes: int
    columns: Mapping[str, tuple[Any, Any, int]] = field(default_factory=dict)


def _orderable(t: pa.DataType) -> bool:
    return (
        pat.is_boolean(t) or pat.is_integer(t) or pat.is_floating(t) or pat.is_string(t)
        or pat.is_large_string(t) or pat.is_binary(t) or pat.is_date(t) or pat.is_timestamp(t)
        or pat.is_decimal(t) or (pat.is_dictionary(t) and _orderable(t.value_type))
    )


def file_stats(table: pa.Table, nbytes: int) -> FileStats:
    """Statistics of one file's table (computed from the data, not from Parquet footers)."""
    cols: dict[str, tuple[Any, Any, int]] = {}
    for name in table.column_names:
        col = table.column(name)
        nulls = col.null_count
        lo: Any = None
        hi: Any = None
        t = col.type
        if _orderable(t) and nulls < len(col):
            if pat.is_dictionary(t):
                col = col.cast(t.value_type)
            mm = pc.min_max(col)
            try:
                lo, hi = mm["min"].as_py(), mm["max"].as_py()
            except (OverflowError, ValueError):  # beyond Python's datetime: unknown, never prunes
                lo = hi = None
            if isinstance(lo, (str, bytes)) and (len(lo) > _MAX_STR or len(hi) > _MAX_STR):
                lo = hi = None
            if isinstance(lo, float) and (math.isnan(lo) or math.isnan(hi)):
                lo = hi = None
        cols[name] = (lo, hi, nulls)
    return FileStats(rows=table.num_rows, nbytes=nbytes, columns=cols)


def stats_table(labels: Sequence[str], stats: Sequence[FileStats], schema: pa.Schema) -> pa.Table:
    """The on-disk table for ``stats[i]`` of partition ``labels[i]``."""
    arrays: dict[str, pa.Array] = {
        "label": pa.array(list(labels), pa.string()),
        "rows": pa.array([s.rows for s in stats], pa.int64()),
        "bytes": pa.array([s.nbytes for s in stats], pa.int64()),
    }
    for f in schema:
        if not _orderable(f.type):
            continue
        t = f.type.value_type if pat.is_dictionary(f.type) else f.type
        get = [s.columns.get(f.name, (None, None, None)) for s in stats]
        arrays[f"min:{f.name}"] = pa.array([g[0] for g in get], t)
        arrays[f"max:{f.name}"] = pa.array([g[1] for g in get], t)
        arrays[f"nulls:{f.name}"] = pa.array([g[2] for g in get], pa.int64())
    return pa.table(arrays)


def bound_type(t: pa.DataType) -> pa.DataType:
    """The type of a column's ``min:``/``max:`` statistics (timestamps in microseconds)."""
    t = t.value_type if pat.is_dictionary(t) else t
    return pa.timestamp("us", t.tz) if pat.is_timestamp(t) else t


def _shown_exact(stats: pa.Table | None, column: str) -> bool:
    """Whether ``stats`` (the ``_kstore/stats`` layout) show every value of ``column`` within
    +-2**53: a file without values of it counts, a file with unknown bounds does not."""
    if stats is None:
        return False
    if stats.num_rows == 0:
        return True
    names = [f"min:{column}", f"max:{column}", f"nulls:{column}"]
    if any(n not in stats.column_names for n in names):
        return False
    lo, hi, nulls = (stats.column(n) for n in names)
    if not (pat.is_integer(lo.type) and pat.is_integer(hi.type)):
        return False
    empty = pc.equal(nulls, stats.column("rows"))
    inside = pc.and_kleene(pc.greater_equal(lo, -EXACT_IN_DOUBLE), pc.less_equal(hi, EXACT_IN_DOUBLE))
    return pc.all(pc.or_kleene(empty, inside), skip_nulls=False).as_py() is True


def exact_int64_columns(existing: pa.Schema, new: pa.Schema, existing_stats: pa.Table | None,
                        new_stats: pa.Table | None) -> frozenset[str]:
    """The columns that are integers on one side and floats on the other, whose integer
    side's statistics show every value exact in a ``double`` (within +-2**53): where
    :func:`~kstore.core.types.merge_schemas` may widen an ``int64`` column to ``double``.
    ``existing_stats`` / ``new_stats`` are statistics tables (the ``_kstore/stats`` layout)
    of the dataset's files and of the new data; None: unknown (nothing shown).

    >>> s = stats_table(["a"], [file_stats(pa.table({"k": [1, 2**53]}), 0)], pa.schema([("k", pa.int64())]))
    >>> ints, floats = pa.schema([("k", pa.int64())]), pa.schema([("k", pa.float64())])
    >>> sorted(exact_int64_columns(ints, floats, s, None)), sorted(exact_int64_columns(floats, ints, None, s))
    (['k'], ['k'])
    >>> big = stats_table(["a"], [file_stats(pa.table({"k": [2**53 + 1]}), 0)], ints)
    >>> sorted(exact_int64_columns(ints, floats, big, None))
    []
    """
    out = set()
    for f in existing:
        i = new.get_field_index(f.name)
        if i < 0:
            continue
        nt = new.field(i).type
        if pat.is_integer(f.type) and pat.is_floating(nt) and _shown_exact(existing_stats, f.name):
            out.add(f.name)
        elif pat.is_floating(f.type) and pat.is_integer(nt) and _shown_exact(new_stats, f.name):
            out.add(f.name)
    return frozenset(out)


def _conform_column(table: pa.Table, name: str, want: pa.DataType, what: str, subject: str) -> pa.Table:
    col = table.column(name)
    if col.type.equals(want):
        return table
    try:
        same = pat.is_null(col.type) or normalize_type(col.type).equals(normalize_type(want))
        if same:
            return table.set_column(table.column_names.index(name), name, col.cast(want))
    except (UnsupportedTypeError, pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise CorruptMetadataError(f"{what}: {subject} is {col.type}, not {want}") from exc
    raise CorruptMetadataError(f"{what}: {subject} is {col.type}, not {want}")


def check_stats_table(stats: pa.Table, schema: pa.Schema | None, *, what: str) -> pa.Table:
    """Validate a statistics table read from a file against the dataset's ``schema``.

    Returns it with compatible types made exact (``int32`` counts, ``us`` timestamps);
    wrong column types, missing ``label``/``rows``/``bytes``, null labels or counts, and
    ``min:``/``max:``/``nulls:`` that do not come in threes raise
    :class:`~kstore.errors.CorruptMetadataError` naming the column (``what`` names the file).
    Statistics of columns the schema does not have (or cannot order) are dropped.
    """
    for name, want in (("label", pa.string()), ("rows", pa.int64()), ("bytes", pa.int64())):
        if name not in stats.column_names:
            raise CorruptMetadataError(f"{what}: column {name!r} is missing")
        stats = _conform_column(stats, name, want, what, f"column {name!r}")
        if stats.column(name).null_count:
            raise CorruptMetadataError(f"{what}: column {name!r} has nulls")
    try:
        stats = in_microseconds(stats)  # older kstore wrote nanosecond bounds
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise CorruptMetadataError(f"{what}: timestamp statistics do not convert to microseconds: {exc}") from exc
    columns = {c.split(":", 1)[1] for c in stats.column_names if c.startswith(("min:", "max:", "nulls:"))}
    keep = ["label", "rows", "bytes"]
    for c in sorted(columns):
        names = [f"min:{c}", f"max:{c}", f"nulls:{c}"]
        idx = schema.get_field_index(c) if schema is not None else -1
        if schema is not None and (idx < 0 or not _orderable(schema.field(idx).type)):
            continue  # no statistics kstore would use
        missing = [n for n in names if n not in stats.column_names]
        if missing:
            raise CorruptMetadataError(f"{what}: column {c!r} has statistics without {missing}")
        bound = bound_type(schema.field(idx).type) if schema is not None else stats.column(names[0]).type
        if not _orderable(bound):
            raise CorruptMetadataError(f"{what}: statistics of column {c!r} are {bound}, which has no order")
        for n, want in zip(names, (bound, bound, pa.int64())):
            stats = _conform_column(stats, n, want, what, f"statistic {n.split(':')[0]!r} of column {c!r}")
        keep.extend(names)
    return stats.select(keep) if keep != stats.column_names else stats


def stats_by_label(stats: pa.Table | None) -> dict[str, FileStats]:
    """The rows of a statistics table back as :class:`FileStats` per label."""
    if stats is None:
        return {}
    rows = stats.to_pylist()
    names = [c[4:] for c in stats.column_names if c.startswith("min:")]
    out = {}
    for r in rows:
        if r["rows"] is None or r["bytes"] is None:
            continue  # unknown (a file kstore has no statistics of)
        cols = {n: (r[f"min:{n}"], r[f"max:{n}"], r[f"nulls:{n}"]) for n in names}
        out[r["label"]] = FileStats(r["rows"], r["bytes"], cols)
    return out


def in_microseconds(stats: pa.Table) -> pa.Table:
    """Statistics with nanosecond timestamp bounds (kstore < issue 10 wrote them) in
    microseconds: minima floored, maxima ceiled, so pruning stays conservative."""
    if not any(pat.is_timestamp(t) and t.unit == "ns" for t in stats.schema.types):
        return stats
    cols = []
    for name, col in zip(stats.column_names, stats.columns):
        t = col.type
        if pat.is_timestamp(t) and t.unit == "ns":
            fn = pc.ceil_temporal if name.startswith("max:") else pc.floor_temporal
            col = fn(col, unit="microsecond").cast(pa.timestamp("us", t.tz), safe=False)
        cols.append(col)
    return pa.table(cols, names=stats.column_names)


def merge_stats_tables(old: pa.Table | None, new: pa.Table, drop_labels: Sequence[str] = ()) -> pa.Table:
    """Old statistics without ``drop_labels`` plus ``new`` (columns unified, missing = null)."""
    if old is not None and len(drop_labels):
        old = old.filter(pc.invert(pc.is_in(old.column("label"), pa.array(list(drop_labels), pa.string()))))
    if old is None or old.num_rows == 0:
        return new
    return pa.concat_tables([in_microseconds(old), in_microseconds(new)], promote_options="permissive")


def _cmp(values: pa.ChunkedArray | pa.Array, fn: str, lit: Any) -> np.ndarray:
    t = values.type
    if pat.is_timestamp(t):
        try:  # bound literals are exact microseconds; older statistics are in nanoseconds
            scalar = pa.scalar(lit, t)
        except (pa.ArrowInvalid, OverflowError, ValueError):
            return np.ones(len(values), dtype=bool)  # beyond the unit: cannot prune
    elif isinstance(lit, float) and pat.is_integer(t):
        scalar = pa.scalar(lit, pa.float64())
    else:
        scalar = pa.scalar(lit, t)
    out = getattr(pc, fn)(values, scalar)
    return np.asarray(out.fill_null(True).to_numpy(zero_copy_only=False), dtype=bool)


def prune_mask(term: Term, stats: pa.Table) -> np.ndarray:
    """Per stats row: False where the file provably holds no row matching ``term``."""
    n = stats.num_rows
    keep = np.ones(n, dtype=bool)
    name = term.column
    if f"nulls:{name}" not in stats.column_names:
        return keep
    rows: np.ndarray = np.asarray(stats.column("rows").to_numpy())
    nulls_col = stats.column(f"nulls:{name}")
    known = np.asarray(nulls_col.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    nulls: np.ndarray = np.asarray(nulls_col.fill_null(0).to_numpy())
    all_null: np.ndarray = known & (nulls == rows)
    if term.op == "is null":
        return np.asarray(~known | (nulls > 0), dtype=bool)
    if term.op == "is not null":
        return ~all_null
    if term.op == "never":
        return np.zeros(n, dtype=bool)
    lo, hi = stats.column(f"min:{name}"), stats.column(f"max:{name}")
    op, v = term.op, term.value
    if pat.is_integer(lo.type) and isinstance(v, float) and op not in ("in", "not in"):
        from kstore.core.predicates import _int_term  # a raw float literal: rewrite as bound

        return prune_mask(_int_term(name, op, v, lo.type), stats)
    if pat.is_integer(lo.type) and op == "in":
        v = tuple(int(x) for x in v if float(x).is_integer())
    if op == "==":
        keep = _cmp(lo, "less_equal", v) & _cmp(hi, "greater_equal", v)
    elif op == "<":
        keep = _cmp(lo, "less", v)
    elif op == "<=":
        keep = _cmp(lo, "less_equal", v)
    elif op == ">":
        keep = _cmp(hi, "greater", v)
    elif op == ">=":
        keep = _cmp(hi, "greater_equal", v)
    elif op == "!=":
        if pat.is_floating(lo.type):
            keep = np.ones(n, dtype=bool)
        else:
            keep = ~(~_cmp(lo, "not_equal", v) & ~_cmp(hi, "not_equal", v))
    elif op == "in":
        if len(v) > 256:
            return ~all_null
        keep = np.zeros(n, dtype=bool)
        for x in v:
            if isinstance(x, float) and math.isnan(x):
                continue
            keep |= _cmp(lo, "less_equal", x) & _cmp(hi, "greater_equal", x)
    # 'not in' and anything else: no pruning beyond all-null files
    return np.asarray(keep & ~all_null, dtype=bool)
