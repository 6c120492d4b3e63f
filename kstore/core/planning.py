"""Pure query planning: which partition files can hold rows matching a predicate.

``plan_read(meta, schema, predicates, columns, indices=..., stats=...)`` takes what the
caller loaded (metadata, schema, the secondary indices of predicate columns, per-file
statistics) and returns a :class:`ReadPlan`. Per conjunction it intersects the partition
sets of every partition column (exact), secondary index (partition-level) and per-file
statistics; conjunctions are unioned. Every task carries the residual predicate its rows
still have to pass, so reading is exact.

Examples
--------
>>> import pyarrow as pa
>>> from kstore.core.metadata import DatasetMetadata
>>> meta = DatasetMetadata.new("d", partition_keys=("p",)).with_partitions(
...     {"p=1/a": {"table": "d/table/p=1/a.parquet"}, "p=2/a": {"table": "d/table/p=2/a.parquet"}})
>>> schema = pa.schema([("p", pa.int64()), ("x", pa.string())])
>>> plan = plan_read(meta, schema, predicates=[[("p", "==", 2)]])
>>> plan.labels
('p=2/a',)
>>> print(plan.explain())  # doctest: +NORMALIZE_WHITESPACE
dataset 'd': 2 files -> 1 planned
  conjunction 1: partition index p: 2 -> 1
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kstore.core import naming
from kstore.core.arguments import as_column_list, renamed
from kstore.core.filetable import IndexProbe
from kstore.core.index import ColumnIndex
from kstore.core.metadata import DatasetMetadata
from kstore.core.predicates import DNF, Term, bind, columns_of, parse, term_expression, term_mask
from kstore.core.stats import prune_mask
from kstore.core.types import check_dataset_schema, decode_partition_value
from kstore.errors import ColumnNotFoundError, CorruptMetadataError, InvalidArgumentError, short_repr

__all__ = ["ReadTask", "ReadPlan", "plan_read", "partition_value_arrays", "label_values", "file_sizes", "pack_in_order"]


@dataclass(frozen=True, slots=True)
class ReadTask:
    """One file to read: its label and key, partition values, and the rows to keep."""

    label: str
    key: str
    partition_values: tuple[tuple[str, Any], ...]
    residual: tuple[tuple[Term, ...], ...] | None  # None: keep every row


@dataclass(frozen=True, slots=True)
class Stage:
    conjunction: int
    kind: str  # 'partition index', 'secondary index', 'statistics'
    column: str
    before: int
    after: int


@dataclass(frozen=True, slots=True)
class ReadPlan:
    """The files a read opens and why; ``explain()`` says it in words
    (:func:`kstore.plan_read` and :meth:`kstore.Snapshot.plan` return it).

    Attributes
    ----------
    dataset_uuid : str
        The dataset.
    version : int or None
        The version planned (None for a dataset kstore never committed).
    table : str
        The table read.
    schema : pyarrow.Schema
        The table's schema (partition columns included).
    columns : tuple[str, ...]
        The columns the read returns (all of the schema's when none were asked for).
    predicates : DNF or None
        The predicate, parsed and bound to the schema: a tuple of conjunctions of
        ``Term(column, op, value)``; None reads every row.
    tasks : tuple[ReadTask, ...]
        One per file to read: label, key, partition values and the residual predicate its
        rows must still pass.
    n_files : int
        Files of the table before pruning (``n_partitions``, the old name, works for one
        more release).
    stages : tuple[Stage, ...]
        The pruning steps (conjunction, kind, column, files before and after), in order.
    store_calls : int
        Store calls spent on loading and planning.
    calls_detail : Mapping[str, int]
        Those calls per store method (``{"get": 2, "iter_prefix": 1}``).

    Examples
    --------
    >>> import pandas as pd, kstore
    >>> from kstore.io import MemoryStore
    >>> store = MemoryStore()
    >>> _ = kstore.store_dataset(store, "d", pd.DataFrame({"p": [1, 2, 3], "x": [5, 6, 7]}), partition_on="p")
    >>> plan = kstore.plan_read(store, "d", predicates=[[("p", ">=", 2), ("x", "<", 7)]], columns=["x"])
    >>> plan.version, plan.columns, len(plan.tasks), plan.n_files, plan.tasks[0].partition_values
    (0, ('x',), 1, 3, (('p', 2),))
    """

    dataset_uuid: str
    version: int | None
    table: str
    schema: pa.Schema
    columns: tuple[str, ...]
    predicates: DNF | None
    tasks: tuple[ReadTask, ...]
    n_files: int
    stages: tuple[Stage, ...] = ()
    store_calls: int = 0
    calls_detail: Mapping[str, int] = field(default_factory=dict)

    @property
    def labels(self) -> tuple[str, ...]:
        """The labels of the planned files, in task order."""
        return tuple(t.label for t in self.tasks)

    @property
    def partitions(self) -> tuple[str, ...]:
        """Deprecated name of :attr:`labels` (they name files, not partition values)."""
        renamed("ReadPlan", "partitions", "labels", "the labels name files, not partition values")
        return self.labels

    @property
    def n_partitions(self) -> int:
        """Deprecated name of :attr:`n_files`."""
        renamed("ReadPlan", "n_partitions", "n_files", "it counts files, not partition values")
        return self.n_files

    @property
    def keys(self) -> tuple[str, ...]:
        """The storage keys of the planned files, in task order."""
        return tuple(t.key for t in self.tasks)

    def __repr__(self) -> str:
        preds = "None" if self.predicates is None else f"{sum(len(c) for c in self.predicates)} term(s)"
        return (f"ReadPlan(dataset={self.dataset_uuid!r}, version={self.version}, files={len(self.tasks)} of "
                f"{self.n_files}, columns={len(self.columns)}, predicates={preds}, "
                f"store_calls={self.store_calls})")

    def explain(self) -> str:
        """The plan in words: files before and after pruning, one line per pruning step
        (which conjunction, partition index / secondary index / statistics, which column,
        files before -> after), and the store calls planning cost.

        Returns
        -------
        str
            Lines separated by ``\\n``.

        Examples
        --------
        >>> import pandas as pd, kstore
        >>> from kstore.io import MemoryStore
        >>> store = MemoryStore()
        >>> _ = kstore.store_dataset(store, "d", pd.DataFrame({"p": [1, 2, 3], "x": [5, 6, 7]}), partition_on="p")
        >>> print(kstore.plan_read(store, "d", predicates=[[("p", ">=", 2), ("x", "<", 7)]]).explain())
        dataset 'd' version 0: 3 files -> 1 planned
          conjunction 1: partition index p: 3 -> 2
          conjunction 1: statistics x: 2 -> 1
          planning store calls: ... (get ..., iter_prefix 1)
        """
        lines = [
            f"dataset {self.dataset_uuid!r}"
            + (f" version {self.version}" if self.version is not None else "")
            + f": {self.n_files} files -> {len(self.tasks)} planned"
        ]
        for s in self.stages:
            lines.append(f"  conjunction {s.conjunction}: {s.kind} {s.column}: {s.before} -> {s.after}")
        if self.store_calls:
            detail = ", ".join(f"{k} {v}" for k, v in sorted(self.calls_detail.items()))
            lines.append(f"  planning store calls: {self.store_calls} ({detail})")
        return "\n".join(lines)


def label_values(meta: DatasetMetadata, labels: Sequence[str]) -> list[tuple[str, ...]]:
    """Decoded (string) partition values of each label."""
    return [naming.parse_label(lab, meta.partition_keys)[0] for lab in labels]


def partition_value_arrays(
    meta: DatasetMetadata, schema: pa.Schema, labels: Sequence[str]
) -> dict[str, pa.Array]:
    """Typed array per partition column, one value per label (vectorized on distinct values)."""
    if not meta.partition_keys:
        return {}
    out: dict[str, pa.Array] = {}
    decoded = label_values(meta, labels)
    for i, col in enumerate(meta.partition_keys):
        idx = schema.get_field_index(col)
        if idx < 0:
            raise CorruptMetadataError(
                f"dataset {meta.uuid!r}: partition column {col!r} is missing from the schema"
            )
        t = schema.field(idx).type
        enc = pa.array([d[i] for d in decoded], pa.string()).dictionary_encode()
        distinct = [decode_partition_value(s, t, col) for s in enc.dictionary.to_pylist()]
        typed = pa.array(distinct, type=t)
        out[col] = typed.take(enc.indices)
    return out


def partition_value_arrays_of(meta: DatasetMetadata, schema: pa.Schema, labels: pa.Array,
                              columns: Sequence[str]) -> dict[str, pa.Array]:
    """Typed partition values of ``columns`` per label, parsed once per distinct value:
    each column's ``<col>=<value>`` component is cut out with a vectorized regex."""
    out: dict[str, pa.Array] = {}
    slashes = pc.count_substring(labels, "/")
    if not pc.all(pc.equal(slashes, len(meta.partition_keys))).as_py():
        # kartothek wrote some labels with an unquoted '/' in a value: parse them one by one
        every = partition_value_arrays(meta, schema, labels.to_pylist())
        return {c: every[c] for c in columns}
    for col in columns:
        idx = schema.get_field_index(col)
        if idx < 0:
            raise CorruptMetadataError(f"dataset {meta.uuid!r}: partition column {col!r} is missing from the schema")
        pos = list(meta.partition_keys).index(col)
        pattern = "^" + "".join("[^/]*/" for _ in range(pos)) + "(?P<v>[^/]*)/"
        comp = pc.struct_field(pc.extract_regex(labels, pattern), [0]) if len(labels) else labels
        enc = comp.dictionary_encode()
        distinct = enc.dictionary.to_pylist()
        prefix = naming.quote(col) + "="
        raw = []
        for d in distinct:
            if d is None or not d.startswith(prefix):
                raise CorruptMetadataError(f"dataset {meta.uuid!r}: a partition label does not encode {col!r} "
                                           f"at position {pos + 1} ({d!r:.80})")
            raw.append(naming.unquote(d[len(prefix):]))
        t = schema.field(idx).type
        typed = pa.array([decode_partition_value(v, t, col) for v in raw], type=t)
        out[col] = typed.take(enc.indices)
    return out


def _contiguous(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(values, pa.ChunkedArray):
        return values.combine_chunks()
    return values


def _take(values: pa.Array | pa.ChunkedArray, positions: np.ndarray) -> list[Any]:
    """``values[positions]`` as Python objects, chunk by chunk: a chunked array (a
    checkpoint's chunk, then the replayed entries') is never concatenated to take a few rows."""
    if isinstance(values, pa.Array) or values.num_chunks == 1:
        arr = values if isinstance(values, pa.Array) else values.chunk(0)
        return list(arr.take(pa.array(positions, pa.int64())).to_pylist())
    ends = np.cumsum([len(c) for c in values.chunks])
    which = np.searchsorted(ends, positions, side="right")
    out: list[Any] = []
    for c in np.unique(which):  # positions are ascending: chunks come in order
        start = int(ends[c - 1]) if c else 0
        out.extend(values.chunk(int(c)).take(pa.array(positions[which == c] - start, pa.int64())).to_pylist())
    return out


def _idx_lists(rows: pa.Table | None, column: str) -> pa.ChunkedArray | None:
    if rows is None or f"idx:{column}" not in rows.column_names:
        return None
    return rows.column(f"idx:{column}")


def _no_lists(column: str) -> None:
    return None


def _no_hits(column: str, probe: IndexProbe) -> None:
    return None


@dataclass(frozen=True)
class _Probe:
    """One term as index lists and value-sorted index blocks are asked about it
    (:class:`~kstore.core.filetable.IndexProbe`): the same test either way."""

    term: Term
    schema: pa.Schema

    @property
    def op(self) -> str:
        return self.term.op

    def _type(self) -> pa.DataType:
        t = self.schema.field(self.term.column).type
        return t.value_type if pa.types.is_dictionary(t) else t

    def lists(self, lists: pa.ChunkedArray) -> np.ndarray:
        return _lists_mask(self.term, lists, self.schema)

    def values(self, values: pa.Array) -> np.ndarray:
        return _values_mask(self.term, values, self._type())

    def literals(self, t: pa.DataType) -> pa.Array | None:
        if self.term.op not in ("==", "in") or not t.equals(self._type()):
            return None
        vals = list(self.term.value) if self.term.op == "in" else [self.term.value]
        try:
            return pa.array(vals, type=t)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError, OverflowError):
            return None


def _lists_mask(term: Term, lists: pa.Array | pa.ChunkedArray, schema: pa.Schema) -> np.ndarray:
    """Per file: whether any of its distinct values (an ``idx:`` list) satisfies ``term``
    (files whose list is unknown are kept). The same test the rows get, on the values;
    chunk by chunk (no copy of the lists)."""
    if isinstance(lists, pa.ChunkedArray):
        if lists.num_chunks == 0:
            return np.zeros(0, dtype=bool)
        return np.concatenate([_lists_mask(term, chunk, schema) for chunk in lists.chunks])
    n = len(lists)
    out = np.asarray(pc.is_null(lists).to_numpy(zero_copy_only=False), dtype=bool)
    flat = pc.list_flatten(lists)
    if len(flat) == 0:
        return out
    t = schema.field(term.column).type
    t = t.value_type if pa.types.is_dictionary(t) else t
    if pa.types.is_timestamp(t) or pa.types.is_timestamp(flat.type):
        # index values are truncated to microseconds: compare as ColumnIndex does
        idx = ColumnIndex.build(term.column, flat, pa.array(pc.list_parent_indices(lists).cast(pa.string())))
        hit = np.asarray(idx.labels.take(pa.array(idx.lookup(term.op, term.value))).cast(pa.int64()).to_numpy(),
                         dtype=np.int64) if len(idx.values) else np.empty(0, np.int64)
        out[hit] = True
        return out
    if not flat.type.equals(t):
        try:
            flat = flat.cast(t)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return np.ones(n, dtype=bool)
    parents = pc.list_parent_indices(lists)
    hit = _values_mask(term, flat, t)
    out[np.asarray(parents.to_numpy(zero_copy_only=False), dtype=np.int64)[hit]] = True
    return out


def _values_mask(term: Term, values: pa.Array, t: pa.DataType) -> np.ndarray:
    """Which of ``values`` satisfy ``term``: the compute kernels directly, or (a type they
    do not take) the Arrow expression the rows get."""
    try:
        mask = term_mask(term, values)
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
        pos = pa.table({term.column: values, "__pos": pa.array(np.arange(len(values)))}).filter(
            term_expression(term, t)).column("__pos")
        out = np.zeros(len(values), dtype=bool)
        out[np.asarray(pos.to_numpy(), dtype=np.int64)] = True
        return out
    return np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool)


def _term_mask(term: Term, values: pa.Array) -> np.ndarray:
    """Which partitions' (constant) value satisfies ``term`` (exact)."""
    return _values_mask(term, values, values.type)


def _index_answers(idx: ColumnIndex, op: str) -> bool:
    """Whether an index can prune for ``op``: nulls are not indexed, so 'is null' cannot."""
    return op != "is null"


@dataclass(frozen=True)
class _Candidates:
    """The files a plan chooses from: one table's labels (and keys, where the state holds
    them), with where their statistics and index lists are."""

    labels: pa.Array | pa.ChunkedArray
    #: None where the keys are derived from the labels (``derived_keys``)
    keys: pa.Array | pa.ChunkedArray | None
    #: the file table's ``keys_of`` where its keys are derived from the labels
    derived_keys: Any
    #: the table's files (format 2: with statistics; ``idx:`` lists come from index_lists)
    rows: pa.Table
    stats: pa.Table | None
    #: each candidate's row in ``stats`` (-1: none)
    stats_rows: np.ndarray | None
    #: a column's ``idx:`` lists, one per candidate (None: it has none); decoded on demand
    index_lists: Callable[[str], pa.ChunkedArray | None]
    #: per candidate, whether its lists may satisfy a probe's term, where known without
    #: decoding them (None: read ``index_lists``)
    index_hits: Callable[[str, IndexProbe], np.ndarray | None] = _no_hits

    @property
    def n(self) -> int:
        return len(self.labels)


def plan_read(
    meta: DatasetMetadata,
    schema: pa.Schema,
    predicates: Any = None,
    columns: Sequence[str] | None = None,
    *,
    indices: Mapping[str, ColumnIndex] | None = None,
    stats: pa.Table | None = None,
    table: str | None = None,
    store_calls: Mapping[str, int] | None = None,
) -> ReadPlan:
    """Plan a read (pure). See the module docstring.

    Four stages, each a function: check the arguments, list the candidate files, prune
    them term by term (partition values, index lists or indices, statistics), make the
    kept files' read tasks with the terms left to apply to their rows.
    """
    table, columns = _checked(meta, schema, table, columns)
    dnf = bind(parse(predicates), schema, dataset=meta.uuid)
    files = _candidates(meta, table, stats)
    masks, residuals, stages = _prune(meta, schema, dnf, files, dict(indices or {}))
    keep = np.ones(files.n, dtype=bool) if dnf is None else np.zeros(files.n, dtype=bool)
    for mask in masks:
        keep |= mask
    tasks = _tasks(meta, schema, files, np.flatnonzero(keep), masks if dnf is not None else None, residuals)
    calls = dict(store_calls or {})
    return ReadPlan(
        dataset_uuid=meta.uuid,
        version=meta.version,
        table=table,
        schema=schema,
        columns=tuple(columns) if columns is not None else tuple(schema.names),
        predicates=dnf,
        tasks=tuple(tasks),
        n_files=files.n,
        stages=tuple(stages),
        store_calls=sum(calls.values()),
        calls_detail=calls,
    )


def _checked(meta: DatasetMetadata, schema: pa.Schema, table: str | None,
             columns: Sequence[str] | None) -> tuple[str, tuple[str, ...] | None]:
    """The table to read (default: the dataset's) and the column list, checked."""
    if table is not None and table not in meta.tables:
        raise InvalidArgumentError(f"dataset {meta.uuid!r} has table(s) {list(meta.tables)}, not {short_repr(table)}")
    cols = as_column_list(columns)
    if cols is not None:
        missing = [c for c in cols if schema.get_field_index(c) < 0]
        if missing:
            raise ColumnNotFoundError(
                f"dataset {meta.uuid!r}: columns {missing} do not exist (columns: {', '.join(schema.names)})"
            )
    check_dataset_schema(schema, meta.partition_keys, meta.uuid)
    return table or meta.table, cols


def _candidates(meta: DatasetMetadata, table: str, stats: pa.Table | None) -> _Candidates:
    """Every file of ``table``, from the file table; their statistics from it too when
    the version is :attr:`~kstore.core.metadata.DatasetMetadata.columnar`, else (format 1)
    from ``stats``, the statistics file the caller loaded (matched by label)."""
    files = meta.files
    derived_keys: Any = None
    index_lists: Callable[[str], pa.ChunkedArray | None] = files.index_lists  # only the lists a term needs
    index_hits: Callable[[str, IndexProbe], np.ndarray | None] = files.index_hits
    if files.derived is not None or files.single_table():
        rows = files.base
        if files.derived is not None:  # keys built for the kept files only
            derived_keys = files.keys_of
            ours = files.derived[1] == table
        else:
            ours = not rows.num_rows or rows.column("table")[0].as_py() == table
        if not ours:
            rows, index_lists, index_hits = rows.slice(0, 0), _no_lists, _no_hits
    else:
        rows = files.for_table(table)
        index_lists, index_hits = partial(_idx_lists, rows), _no_hits
    # chunked as replay left them (a checkpoint's chunk, then the entries' rows): no
    # copy of 100k labels and keys to plan, only the kept ones are taken
    labels = rows.column("label")
    keys = rows.column("key") if derived_keys is None else None
    if meta.columnar:
        has_stats = "rows" in rows.column_names and rows.num_rows > 0
        return _Candidates(labels, keys, derived_keys, rows, rows if has_stats else None,
                           np.arange(rows.num_rows) if has_stats else None, index_lists, index_hits)
    stats_rows = None
    if stats is not None and len(labels) and stats.num_rows:
        pos = pc.index_in(labels, value_set=stats.column("label").combine_chunks())
        stats_rows = pos.fill_null(-1).to_numpy(zero_copy_only=False)
    return _Candidates(labels, keys, derived_keys, rows, stats, stats_rows, index_lists, index_hits)


def _prune(meta: DatasetMetadata, schema: pa.Schema, dnf: Any, files: _Candidates,
           indices: Mapping[str, ColumnIndex]) -> tuple[list[np.ndarray], list[tuple[Term, ...]], list[Stage]]:
    """Per conjunction of ``dnf``: the candidates it may match, the terms left for the
    rows (those no partition value decides) and the stages, in order."""
    n = files.n
    pkeys = set(meta.partition_keys)
    pcols = [c for c in columns_of(dnf) if c in pkeys]
    part_arrays = partition_value_arrays_of(meta, schema, _contiguous(files.labels), pcols) if (pcols and n) else {}
    idx_maps: dict[str, np.ndarray] = {}
    stages: list[Stage] = []
    masks: list[np.ndarray] = []
    residuals: list[tuple[Term, ...]] = []
    for ci, conj in enumerate(dnf or ()):
        mask = np.ones(n, dtype=bool)
        residual: list[Term] = []
        for term in conj:
            before = int(mask.sum())
            if term.column in pkeys:
                if n:
                    mask &= _term_mask(term, part_arrays[term.column])
                stages.append(Stage(ci + 1, "partition index", term.column, before, int(mask.sum())))
                continue
            residual.append(term)
            how = _prune_term(term, files, schema, indices, idx_maps, mask)
            if how is not None:
                stages.append(Stage(ci + 1, how, term.column, before, int(mask.sum())))
        masks.append(mask)
        residuals.append(tuple(residual))
    return masks, residuals, stages


def _prune_term(term: Term, files: _Candidates, schema: pa.Schema, indices: Mapping[str, ColumnIndex],
                idx_maps: dict[str, np.ndarray], mask: np.ndarray) -> str | None:
    """Narrow ``mask`` (in place) by one term on a data column: the state's index lists,
    else a secondary index that answers the operator, else statistics. Returns the
    stage's name (None: nothing could prune)."""
    if term.op != "is null":
        hits = files.index_hits(term.column, _Probe(term, schema))
        if hits is not None:
            mask &= hits
            return "secondary index"
    lists = files.index_lists(term.column)
    if lists is not None and term.op != "is null":
        mask &= _lists_mask(term, lists, schema)
        return "secondary index"
    idx = indices.get(term.column)
    if idx is not None and _index_answers(idx, term.op):
        if term.column not in idx_maps:
            m = pc.index_in(idx.labels, value_set=_contiguous(files.labels)).fill_null(-1)
            idx_maps[term.column] = m.to_numpy(zero_copy_only=False)
        hits = idx_maps[term.column][idx.lookup(term.op, term.value)]
        term_mask = np.zeros(files.n, dtype=bool)
        term_mask[hits[hits >= 0]] = True
        mask &= term_mask
        return "secondary index"
    if files.stats_rows is not None:
        sm = prune_mask(term, files.stats)
        mask &= np.where(files.stats_rows >= 0, sm[np.maximum(files.stats_rows, 0)], True)
        return "statistics"
    return None


def _tasks(meta: DatasetMetadata, schema: pa.Schema, files: _Candidates, kept: np.ndarray,
           masks: list[np.ndarray] | None, residuals: list[tuple[Term, ...]]) -> list[ReadTask]:
    """The read tasks of the ``kept`` candidates, each with the residual terms of the
    conjunctions that kept it (None: every row matches, or no predicate)."""
    kept_labels = _take(files.labels, kept)
    kept_keys = _take(files.keys, kept) if files.keys is not None else files.derived_keys(kept_labels)
    values = label_values(meta, kept_labels) if meta.partition_keys else [()] * len(kept_labels)
    tasks = []
    for j, i in enumerate(kept):
        res = None
        if masks is not None:
            res_conjs = [residuals[c] for c in range(len(masks)) if masks[c][i]]
            res = None if any(len(r) == 0 for r in res_conjs) else tuple(res_conjs)
        pv = tuple(
            (col, decode_partition_value(values[j][k], schema.field(col).type, col))
            for k, col in enumerate(meta.partition_keys)
        )
        tasks.append(ReadTask(kept_labels[j], kept_keys[j], pv, res))
    return tasks


def file_sizes(plan: ReadPlan, stats: pa.Table | None) -> dict[str, int]:
    """Bytes of each planned file, from the per-file statistics; files without statistics
    (kartothek and plateau datasets) are left out."""
    if stats is None or not plan.tasks or "bytes" not in stats.column_names:
        return {}
    planned = {t.label for t in plan.tasks}
    return {label: int(n) for label, n in zip(stats.column("label").to_pylist(), stats.column("bytes").to_pylist())
            if n is not None and label in planned}


def pack_in_order(tasks: Sequence[ReadTask], costs: Sequence[int | None], limit: int) -> list[tuple[ReadTask, ...]]:
    """Consecutive runs of ``tasks`` (plan order kept) whose summed ``costs`` stay within
    ``limit``: the one bin-packer of the engines' readers (Dask's ``blocksize``, Spark's
    input partitions). Greedy: a task joins the current group while the group stays within
    ``limit``; a task costlier than that, or of unknown cost (None), is a group of its own.
    Concatenated, the groups are ``tasks``.

    >>> ts = [ReadTask(str(i), f"{i}.parquet", (), None) for i in range(6)]
    >>> [[t.label for t in g] for g in pack_in_order(ts, [40, 40, 40, 200, None, 10], 100)]
    [['0', '1'], ['2'], ['3'], ['4'], ['5']]
    """
    groups: list[tuple[ReadTask, ...]] = []
    current: list[ReadTask] = []
    total = 0
    for task, cost in zip(tasks, costs, strict=True):
        if current and (cost is None or total + cost > limit):
            groups.append(tuple(current))
            current, total = [], 0
        if cost is None:
            groups.append((task,))
            continue
        current.append(task)
        total += cost
    if current:
        groups.append(tuple(current))
    return groups
