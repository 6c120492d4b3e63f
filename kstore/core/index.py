"""Arrow-native inverted indices: build, merge, drop partitions, look up.

In memory an index is sorted unique values plus CSR offsets into partition ordinals,
never a per-value Python dict. Lookups are binary searches (ranges) or a hash join
(``in``) followed by vectorized gathers, so a range or a 100k-value ``in`` over an index
with a million values answers in milliseconds.

On disk (FORMAT.md A) an index is a Parquet table with the value column and
``partition: list<string>``; :meth:`ColumnIndex.to_table` and :meth:`ColumnIndex.from_table`
convert.

Examples
--------
>>> import pyarrow as pa
>>> idx = ColumnIndex.build("n", pa.array([3, 1, 3, 2]), pa.array(["a", "a", "b", "c"]))
>>> idx.values.to_pylist(), idx.lookup_labels("==", 3)
([1, 2, 3], ['a', 'b'])
>>> idx.lookup_labels(">=", 2)
['a', 'b', 'c']
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.types as pat

from kstore.core.types import normalize_type
from kstore.errors import CorruptMetadataError, UnsupportedTypeError, short_repr


def _normalizes_to(t: pa.DataType, target: pa.DataType) -> bool:
    try:
        return bool(index_storage_type(t).equals(target))
    except UnsupportedTypeError:
        return False


def _int_range(t: pa.DataType) -> tuple[int, int]:
    bits = t.bit_width
    return (0, 2**bits - 1) if pat.is_unsigned_integer(t) else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)

__all__ = ["ColumnIndex", "index_storage_type", "range_distinct"]


def _index_values(values: pa.Array | pa.ChunkedArray) -> tuple[pa.Array, pa.DataType]:
    """Index values in their storage type (:func:`index_storage_type`): dictionaries
    decoded, nanoseconds floored to microseconds, -0.0 as 0.0."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    vtype = index_storage_type(values.type)
    if pat.is_dictionary(values.type):
        values = values.dictionary_decode()
    if pat.is_timestamp(values.type) and values.type.unit == "ns":
        # floor (not truncate toward zero) so pre-1970 values stay below their true value
        values = pc.floor_temporal(values, unit="microsecond")
        values = values.cast(pa.timestamp("us", values.type.tz), safe=False)
    values = values.cast(vtype) if not values.type.equals(vtype) else values
    if pat.is_floating(vtype):
        values = pc.add(values, pa.scalar(0.0, vtype))  # -0.0 -> 0.0 (IEEE equal)
    return values, vtype


def index_storage_type(t: pa.DataType) -> pa.DataType:
    """Value type of an index file: normalized, timestamps as ``timestamp[us]`` (tz kept)."""
    return normalize_type(t)


def _gather_ranges(offsets: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Positions ``offsets[s]..offsets[e]`` for every value range ``[s, e)``, concatenated."""
    lo = offsets[starts]
    hi = offsets[ends]
    lengths = hi - lo
    total = int(lengths.sum())
    if total == 0:
        return np.empty(0, dtype=np.int64)
    shifts = np.repeat(lo - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths)
    out: np.ndarray = np.arange(total, dtype=np.int64) + shifts
    return out


def stable_order(values: pa.Array) -> np.ndarray:
    """The stable ascending order of ``values`` (integers or dates without nulls; others
    through Arrow's sort): numpy's radix sort where the values span less than 2**16 (2.8M
    pairs of W2's ``product`` index: ~35 ms, half of the merge sort), else its merge sort,
    which runs through already sorted runs (each file's index values are sorted).

    >>> stable_order(pa.array([3, 1, 3, 2])).tolist()
    [1, 3, 0, 2]
    """
    t = values.type
    if (pat.is_integer(t) or pat.is_date(t)) and not values.null_count and len(values):
        if pat.is_date(t):
            values = values.view(pa.int32() if pat.is_date32(t) else pa.int64())
        v = np.asarray(values.to_numpy(zero_copy_only=False))
        lo, hi = int(v.min()), int(v.max())
        if hi - lo < 1 << 16:
            v = (v - np.uint64(lo) if v.dtype == np.uint64 else v.astype(np.int64) - lo).astype(np.uint16)
        elif hi - lo < 4 * len(v):
            dense = _distinct_dense(v, lo, hi)
            if dense is not None:
                return dense[0]
        return np.argsort(v, kind="stable")
    return np.asarray(pc.sort_indices(values).to_numpy(zero_copy_only=False))


def _range_offsets(v: np.ndarray, lo: int) -> np.ndarray:
    """``v - lo`` for integers ``>= lo`` without wrapping: unsigned in their own type, signed
    in int64 (a narrow type would wrap past half its range)."""
    out: np.ndarray = v - v.dtype.type(lo) if v.dtype.kind == "u" else np.subtract(v, lo, dtype=np.int64)
    return out


def _range_values(where: np.ndarray, lo: int, dtype: np.dtype) -> np.ndarray:
    """The values at offsets ``where`` from ``lo`` (:func:`_range_offsets` reversed), in ``dtype``."""
    if dtype.kind == "u":
        values = where.astype(dtype)
        values += dtype.type(lo)
        return values
    where = where + lo
    return where.astype(dtype, copy=False)


def range_distinct(v: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """The sorted distinct values of integers in ``[lo, hi]``, each marking its slot in a
    table of that range (no hashing, no sort: for a range not much wider than the values).

    >>> range_distinct(np.array([7, 5, 7], np.uint8), 5, 7).tolist()
    [5, 7]
    """
    present = np.zeros(hi - lo + 1, dtype=bool)
    present[_range_offsets(v, lo)] = True
    return _range_values(np.flatnonzero(present), lo, v.dtype)


def _distinct_dense(v: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The ascending order of integers in ``[lo, hi]`` and the values in that order, when
    they are all distinct (an id column), by placing each position at its value's slot:
    O(n), no comparisons (5M ids over 60 files: ~40 ms against ~150 ms of merge sort);
    None when a value repeats.

    >>> order, values = _distinct_dense(np.array([12, 10, 11]), 10, 12)
    >>> order.tolist(), values.tolist(), _distinct_dense(np.array([3, 3]), 3, 3)
    ([1, 2, 0], [10, 11, 12], None)
    """
    # few and narrow temporaries: each large one costs its page faults again
    pos = np.int32 if len(v) < (1 << 31) else np.int64
    slot = np.full(hi - lo + 1, -1, dtype=pos)
    slot[_range_offsets(v, lo)] = np.arange(len(v), dtype=pos)
    taken = slot >= 0
    order = slot[taken]
    if len(order) != len(v):
        return None
    return order, _range_values(np.flatnonzero(taken), lo, v.dtype)


def _distinct_grouped(column: str, values: pa.Array, ids: pa.Array | np.ndarray,
                      label_dict: pa.Array) -> ColumnIndex | None:
    """The index of pairs whose integer values are all distinct and dense (an id column:
    one label each, nothing to group or drop), else None (:meth:`ColumnIndex._grouped`)."""
    n = len(values)
    if n < (1 << 16):
        return None
    v = np.asarray(values.to_numpy(zero_copy_only=False))
    lo, hi = int(v.min()), int(v.max())
    if hi - lo >= 4 * n:
        return None
    dense = _distinct_dense(v, lo, hi)
    if dense is None:
        return None
    order, sorted_values = dense
    i = ids if isinstance(ids, np.ndarray) else ids.to_numpy(zero_copy_only=False)
    return ColumnIndex(column, pa.array(sorted_values, values.type), np.arange(n + 1, dtype=np.int64),
                       i[order].astype(np.int32, copy=False), label_dict)


@dataclass(frozen=True, slots=True, eq=False)
class ColumnIndex:
    """Inverted index of one column.

    ``values[i]`` occurs in the partitions ``labels[label_ids[offsets[i]:offsets[i+1]]]``.
    ``values`` is sorted, unique and free of nulls; a float index keeps NaN as its last
    value (NaN rows match ``!=`` and ``not in``), which no comparison selects.
    """

    column: str
    values: pa.Array
    offsets: np.ndarray
    label_ids: np.ndarray
    labels: pa.Array

    # -- construction ----------------------------------------------------------------

    @classmethod
    def build(cls, column: str, values: pa.Array, labels: pa.Array) -> ColumnIndex:
        """Index from parallel arrays: ``values[i]`` occurs in partition ``labels[i]``."""
        if isinstance(labels, pa.ChunkedArray):
            labels = labels.combine_chunks()
        values, vtype = _index_values(values)
        labels = labels.cast(pa.string())
        keep = pc.is_valid(values)
        if labels.null_count:
            keep = pc.and_(keep, pc.is_valid(labels))
        table = pa.table({"v": values, "l": labels}).filter(keep)
        if table.num_rows == 0:
            return cls.empty(column, vtype)
        enc = table.column("l").combine_chunks().dictionary_encode()
        return cls._grouped(column, vtype, table.column("v"), enc.indices.cast(pa.int64()), enc.dictionary)

    @classmethod
    def build_ids(cls, column: str, values: pa.Array, ids: np.ndarray, names: pa.Array) -> ColumnIndex:
        """Index from ``values[i]`` occurring in partition ``names[ids[i]]``, for ``names``
        that are unique and ``ids`` that are ascending (a file table's ``idx:`` lists read
        the other way round): the same index as :meth:`build` over ``names.take(ids)``,
        without building and hashing one label string per value.

        >>> idx = ColumnIndex.build_ids("x", pa.array([5, 7, 5]), np.array([0, 0, 2]), pa.array(["a", "b", "c"]))
        >>> idx.lookup("==", 5).tolist(), idx.labels.to_pylist()
        ([0, 1], ['a', 'c'])
        """
        values, vtype = _index_values(values)
        ids = np.asarray(ids, dtype=np.int64)
        if values.null_count:
            keep = np.asarray(pc.is_valid(values).to_numpy(zero_copy_only=False), dtype=bool)
            values, ids = values.filter(pa.array(keep)), ids[keep]
        if len(values) == 0:
            return cls.empty(column, vtype)
        # the used ids, and each pair's position among them: a lookup table as long as the
        # names (ids are small), not a pass over every pair (800k pairs: 1 ms, not 5)
        present = np.zeros(int(ids[-1]) + 1, dtype=bool)
        present[ids] = True
        used = np.flatnonzero(present)
        small = np.int32 if len(used) < (1 << 31) else np.int64
        local = (np.cumsum(present, dtype=small) - 1)[ids]
        return cls._grouped(column, vtype, values, local, names.take(pa.array(used)).cast(pa.string()),
                            ids_ascending=True)

    @classmethod
    def _grouped(cls, column: str, vtype: pa.DataType, values: pa.Array | pa.ChunkedArray,
                 ids: pa.Array | np.ndarray, label_dict: pa.Array, *, ids_ascending: bool = False) -> ColumnIndex:
        """The index of (value, label id) pairs: sorted, duplicates dropped, grouped. With
        ``ids_ascending`` (the pairs come in label id order) a stable sort by value alone
        gives the (value, id) order."""
        if ids_ascending and pat.is_integer(vtype) and not values.null_count:
            flat = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
            distinct = _distinct_grouped(column, flat, ids, label_dict)
            if distinct is not None:
                return distinct
            order = pa.array(stable_order(flat))
        elif ids_ascending:
            order = pc.sort_indices(values)  # stable: equal values keep their (ascending) id order
        else:
            pairs = pa.table({"v": values, "i": ids})
            order = pc.sort_indices(pairs, sort_keys=[("v", "ascending"), ("i", "ascending")])
        v = (values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values).take(order)
        i = ids if isinstance(ids, np.ndarray) else ids.to_numpy(zero_copy_only=False)
        i = i[order.to_numpy(zero_copy_only=False)]
        if len(v) > 1:  # drop repeated (value, partition) pairs: they are adjacent now
            a, b = v.slice(1), v.slice(0, len(v) - 1)
            eq = pc.equal(a, b)
            if pat.is_floating(vtype):  # NaN pairs of one partition are duplicates too
                eq = pc.or_(eq, pc.and_(pc.is_nan(a), pc.is_nan(b)))
            same = (i[1:] == i[:-1]) & np.asarray(eq.fill_null(False).to_numpy(zero_copy_only=False), bool)
            if same.any():
                keep = np.concatenate(([True], ~same))
                v, i = v.filter(pa.array(keep)), i[keep]
        n = len(v)
        # NaN sorts last; NaN != NaN, so the NaN pairs form one group by position
        n_real = n - (pc.sum(pc.is_nan(v)).as_py() or 0) if pat.is_floating(vtype) else n
        if n_real > 1:
            change = pc.not_equal(v.slice(1, n_real - 1), v.slice(0, n_real - 1)).to_numpy(zero_copy_only=False)
            starts = np.concatenate(([0], np.flatnonzero(change) + 1))
        else:
            starts = np.array([0] if n_real else [], dtype=np.int64)
        if n_real < n:
            starts = np.concatenate((starts, [n_real]))
        offsets = np.concatenate((starts, [n])).astype(np.int64)
        uniq = v.take(pa.array(starts))
        return cls(column, uniq, offsets, i.astype(np.int32, copy=False), label_dict)

    @classmethod
    def empty(cls, column: str, vtype: pa.DataType) -> ColumnIndex:
        return cls(column, pa.array([], type=vtype), np.zeros(1, np.int64),
                   np.zeros(0, np.int32), pa.array([], type=pa.string()))

    @classmethod
    def from_table(cls, column: str, table: pa.Table, vtype: pa.DataType | None = None) -> ColumnIndex:
        """Read the on-disk form (value column + ``partition: list<string>``).

        ``vtype`` is the column's normalized type (:func:`index_storage_type` of the schema
        type): values of another type (one that does not normalize to it) make the file
        corrupt, as do labels that are not strings. Null labels are dropped.
        """
        if column not in table.column_names or "partition" not in table.column_names:
            raise CorruptMetadataError(
                f"index of column {column!r} has columns {table.column_names}; expected "
                f"[{column!r}, 'partition']"
            )
        vals = table.column(column).combine_chunks()
        parts = table.column("partition").combine_chunks()
        if not (pat.is_list(parts.type) or pat.is_large_list(parts.type)) or not (
            pat.is_string(parts.type.value_type) or pat.is_large_string(parts.type.value_type)
            or pat.is_null(parts.type.value_type)
        ):
            raise CorruptMetadataError(
                f"index of column {column!r}: 'partition' is {parts.type}, not a list of partition labels"
            )
        if vtype is not None and not vals.type.equals(vtype):
            if len(vals) == 0:
                return cls.empty(column, vtype)
            if not _normalizes_to(vals.type, vtype):
                raise CorruptMetadataError(
                    f"index of column {column!r} holds {vals.type} values; the column is {vtype}"
                )
        n = len(vals)
        flat = pc.list_flatten(parts)
        canonical = (
            n > 0 and vals.null_count == 0 and parts.null_count == 0 and flat.null_count == 0
            and index_storage_type(vals.type).equals(vals.type) and not pat.is_floating(vals.type)
            and (n == 1 or pc.all(pc.greater(vals.slice(1), vals.slice(0, n - 1))).as_py())
        )
        if canonical:
            # already in canonical form (sorted, unique): take it as it is, no rebuild
            offsets = np.asarray(parts.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
            offsets = offsets - offsets[0]
            enc = flat.cast(pa.string()).dictionary_encode()
            if np.all(np.diff(offsets) > 0):
                return cls(column, vals, offsets, enc.indices.to_numpy(zero_copy_only=False).astype(np.int32),
                           enc.dictionary)
        lengths = pc.list_value_length(parts).fill_null(0).to_numpy(zero_copy_only=False)
        return cls.build(column, vals.take(pa.array(np.repeat(np.arange(len(vals)), lengths))), flat)

    @classmethod
    def from_inline(cls, column: str, mapping: dict[Any, Any], vtype: pa.DataType) -> ColumnIndex:
        """kartothek's inline form ``{value: [labels]}``; keys are parsed to ``vtype``."""
        from kstore.core.types import decode_partition_value

        vals, labels = [], []
        for raw, ls in mapping.items():
            if not isinstance(ls, (list, tuple)) or not all(isinstance(label, str) for label in ls):
                raise CorruptMetadataError(
                    f"inline index of column {column!r}: value {short_repr(raw)} maps to {short_repr(ls)}, "
                    "not a list of partition labels"
                )
            v = decode_partition_value(str(raw), vtype, column) if isinstance(raw, str) and not pat.is_string(vtype) else raw
            for label in ls:
                vals.append(v)
                labels.append(label)
        try:
            values = pa.array(vals, type=vtype)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as exc:
            raise CorruptMetadataError(
                f"inline index of column {column!r}: its values do not fit the column type {vtype} ({exc})"
            ) from exc
        return cls.build(column, values, pa.array(labels, type=pa.string()))

    def to_table(self) -> pa.Table:
        """The on-disk form: one row per value, ``partition`` lists its labels."""
        lists = pa.ListArray.from_arrays(
            pa.array(self.offsets.astype(np.int32)), self.labels.take(pa.array(self.label_ids))
        )
        return pa.table({self.column: self.values, "partition": lists})

    # -- algebra ---------------------------------------------------------------------

    def pairs(self) -> tuple[pa.Array, pa.Array]:
        """The (value, label) pairs this index holds, as parallel arrays."""
        counts = np.diff(self.offsets)
        vals = self.values.take(pa.array(np.repeat(np.arange(len(self.values)), counts)))
        return vals, self.labels.take(pa.array(self.label_ids))

    def merge(self, other: ColumnIndex) -> ColumnIndex:
        """Union of two indices of the same column."""
        v1, l1 = self.pairs()
        v2, l2 = other.pairs()
        if len(v1) == 0:
            return other
        if len(v2) == 0:
            return self
        return ColumnIndex.build(self.column, pa.concat_arrays([v1, v2.cast(v1.type)]), pa.concat_arrays([l1, l2]))

    def drop_labels(self, labels: list[str] | pa.Array) -> ColumnIndex:
        """This index without the given partitions."""
        if len(labels) == 0:
            return self
        v, lab = self.pairs()
        keep = pc.invert(pc.is_in(lab, value_set=pa.array(list(labels), type=pa.string())))
        return ColumnIndex.build(self.column, v.filter(keep), lab.filter(keep))

    def keep_labels(self, labels: list[str] | pa.Array) -> ColumnIndex:
        v, lab = self.pairs()
        keep = pc.is_in(lab, value_set=pa.array(list(labels), type=pa.string()))
        return ColumnIndex.build(self.column, v.filter(keep), lab.filter(keep))

    # -- lookups ---------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.values)

    @property
    def _n_real(self) -> int:
        """Number of values before the trailing NaN value (if any)."""
        n = len(self.values)
        if n and pat.is_floating(self.values.type) and math.isnan(self.values[n - 1].as_py()):
            return n - 1
        return n

    def _key(self, value: Any) -> Any:
        """A literal in the index's value domain, comparable with ``_py`` results."""
        t = self.values.type
        if pat.is_timestamp(t):
            import pandas as pd

            ts = pd.Timestamp(value)
            if t.tz is None and ts.tzinfo is not None:
                ts = ts.tz_convert("UTC").tz_localize(None)
            elif t.tz is not None and ts.tzinfo is None:
                ts = ts.tz_localize(t.tz)
            # floor to the index unit (us): index values are truncated the same way
            return ts.floor("us").to_pydatetime()
        return value

    def _bisect(self, value: Any, right: bool) -> int:
        lo, hi = 0, self._n_real
        key = self._key(value)
        arr = self.values
        t = arr.type
        if pat.is_timestamp(t) or pat.is_date32(t):
            # compare as integers: values may lie far beyond what Python's datetime can hold
            ints = arr.slice(0, hi).cast(pa.int64() if pat.is_timestamp(t) else pa.int32())
            k = pa.scalar(key, t).cast(ints.type).as_py()
            return int(np.searchsorted(ints.to_numpy(zero_copy_only=False), k, side="right" if right else "left"))
        while lo < hi:
            mid = (lo + hi) // 2
            v = arr[mid].as_py()
            if (v <= key) if right else (v < key):
                lo = mid + 1
            else:
                hi = mid
        return lo

    def lookup(self, op: str, value: Any = None) -> np.ndarray:
        """Label ids (into :attr:`labels`, unique, sorted) of partitions that may match."""
        n = len(self.values)
        if op == "never" or n == 0:
            return np.empty(0, dtype=np.int32)
        approx = pat.is_timestamp(self.values.type)  # values truncated to us on disk
        if isinstance(value, float) and math.isnan(value) and op in ("==", "<", "<=", ">", ">="):
            return np.empty(0, dtype=np.int32)  # NaN compares false with everything
        if isinstance(value, float):
            value = value + 0.0
        if op == "is null":
            raise ValueError("an index cannot answer 'is null' (nulls are not indexed)")
        if op == "is not null" or (op in ("!=", "not in") and approx):
            return np.unique(self.label_ids)
        if pat.is_integer(self.values.type) and op not in ("in", "not in") and isinstance(value, float):
            from kstore.core.predicates import _int_term  # a raw float literal: rewrite as bound

            t = _int_term(self.column, op, value, self.values.type)
            return self.lookup(t.op, t.value)
        real = self._n_real
        if op in ("==", "!="):
            if isinstance(value, float) and math.isnan(value):
                lo = hi = 0
            else:
                lo, hi = self._bisect(value, False), self._bisect(value, True)
            if op == "==":
                return np.unique(self.label_ids[self.offsets[lo] : self.offsets[hi]])
            if isinstance(value, float) and math.isnan(value):
                lo = hi = real  # everything (incl. NaN) differs from NaN
            ids = _gather_ranges(self.offsets, np.array([0, hi]), np.array([lo, n]))
            return np.unique(self.label_ids[ids])
        if op in ("<", "<=", ">", ">="):
            if approx:
                op = {"<": "<=", ">": ">="}.get(op, op)
            if op == "<":
                s, e = 0, self._bisect(value, False)
            elif op == "<=":
                s, e = 0, self._bisect(value, True)
            elif op == ">":
                s, e = self._bisect(value, True), real
            else:
                s, e = self._bisect(value, False), real
            return np.unique(self.label_ids[self.offsets[s] : self.offsets[e]])
        if op in ("in", "not in"):
            raw = np.asarray(value) if pat.is_integer(self.values.type) else None
            if raw is not None and raw.dtype.kind in "iu" and raw.ndim == 1:
                lo_, hi_ = _int_range(self.values.type)  # vectorized fast path: plain ints
                vals: np.ndarray | list[Any] = raw[(raw >= lo_) & (raw <= hi_)] if raw.dtype.kind == "i" else raw[raw <= hi_]
            else:
                vals = [v + 0.0 if isinstance(v, float) else v for v in value
                        if not (isinstance(v, float) and math.isnan(v))]
            if raw is not None and isinstance(vals, np.ndarray):
                pass
            elif pat.is_integer(self.values.type):  # fractional / out-of-range values match nothing
                lo_, hi_ = _int_range(self.values.type)
                vals = [int(v) for v in vals if float(v).is_integer() and lo_ <= v <= hi_]
            if approx:
                vals = [self._key(v) for v in vals]
            vt = self.values.type
            if pat.is_integer(vt) or pat.is_floating(vt):
                # sorted values: binary search every literal at once
                sorted_np = self.values.to_numpy(zero_copy_only=False)[:real]
                lits = np.sort(np.asarray(vals, dtype=sorted_np.dtype))  # sorted: cache-friendly search
                cand = np.searchsorted(sorted_np, lits)
                inside = cand < real
                cand, lits = cand[inside], lits[inside]
                hit = cand[sorted_np[cand] == lits]
                pos = hit[np.concatenate(([True], hit[1:] != hit[:-1]))] if len(hit) else hit.astype(np.int64)
                pos = pos.astype(np.int64)
            else:
                lit = pa.array(vals, type=vt)
                pos = pc.index_in(lit, value_set=self.values)
                pos = np.unique(pos.drop_null().to_numpy(zero_copy_only=False)).astype(np.int64)
                pos = pos[pos < real]  # never the NaN group
            if op == "in":
                ids = _gather_ranges(self.offsets, pos, pos + 1)
            else:
                mask = np.ones(n, dtype=bool)
                mask[pos] = False
                keep = np.flatnonzero(mask)
                ids = _gather_ranges(self.offsets, keep, keep + 1)
            return np.unique(self.label_ids[ids])
        raise ValueError(f"unknown index operator {op!r}")

    def lookup_labels(self, op: str, value: Any = None) -> list[str]:
        """Labels of partitions that may match ``column op value`` (sorted)."""
        return sorted(self.labels.take(pa.array(self.lookup(op, value))).to_pylist())
