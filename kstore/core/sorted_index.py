"""Value-sorted index blocks beside a checkpoint (pure; FORMAT.md E.7).

A checkpoint holds each indexed column's values per file (``idx:<c>`` lists): planning an
equality on ``c`` reads them the other way round, which costs time in proportion to every
value of every file (1M distinct values over 10,000 files: ~20 ms of decoding and ~10 ms of
comparing, for one value). For columns that large, the checkpoint writer also writes the
same pairs read the other way round (each value with the rows of its files, sorted by
value), cut into blocks of about :data:`BLOCK_ROWS` pairs, into one **sidecar** file; the checkpoint's schema metadata carries the directory (each
block's byte range, SHA-256 prefix, and first and last value). An ``==`` / ``in`` predicate
then reads only the blocks whose value range holds a literal (range reads of a few KB)
and keeps the files those pairs name.

The sidecar is derived and optional: the lists stay in the checkpoint, and any sidecar
that is missing, damaged (its digest is in the checkpoint) or of another type makes the
reader fall back to the lists; no answer differs (the property tests compare both).

>>> import pyarrow as pa
>>> lists = pa.chunked_array([pa.array([[1, 5], [2, 5], None, [9]])])
>>> blob, directory = build({"idx:k": lists}, block_rows=2, min_entries=1)
>>> entry = parse_directory(directory, 4)["idx:k"]
>>> [(b.first, b.last) for b in entry.blocks]
[(1, 2), (5, 5), (9, 9)]
>>> entry.select(pa.array([5]))
[1]
>>> values, rows = decode_block(blob[entry.blocks[1].offset:entry.blocks[1].end], entry.blocks[1], entry.type, 4)
>>> values.to_pylist(), rows.to_pylist(), entry.unknown.tolist()  # (distinct values: one pair per row)
([5, 5], [0, 1], [2])
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kstore.core.index import stable_order

__all__ = ["BLOCK_ROWS", "MIN_ENTRIES", "DIRECTORY_KEY", "Block", "Entry", "build", "group_lists",
           "parse_directory", "decode_block", "rows_of", "digest_of", "answers"]

#: pairs per block: one block of int64 values is ~0.8 MB before compression, decoded in <1 ms
BLOCK_ROWS = 65_536
#: a column gets blocks from this many (value, file) pairs: below it, decoding its lists costs
#: about what reading a block does
MIN_ENTRIES = 4 * BLOCK_ROWS
#: a column with more files whose lists are unknown (null) than this share gets no blocks
MAX_UNKNOWN_SHARE = 0.125
#: the checkpoint's schema-metadata key that holds the directory (JSON)
DIRECTORY_KEY = b"kstore.sorted_index"
#: at most this many literals (an ``in`` list) are looked up in the blocks; more read the lists
MAX_LITERALS = 64
#: a lookup that needs more than this share of a column's blocks reads the lists instead
MAX_SHARE = 0.25
_IPC = pa.ipc.IpcWriteOptions(compression="zstd")


def _orderable(t: pa.DataType) -> bool:
    """Types whose Arrow sort order is the order ``==`` and ``in`` compare by, and that the
    lists store as they are (timestamps are truncated to microseconds there; floats have
    NaN and -0.0): integers, dates, strings and binaries."""
    return bool(pa.types.is_integer(t) or pa.types.is_date(t) or pa.types.is_string(t)
                or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t))


def answers(op: str) -> bool:
    """Whether blocks answer a term with operator ``op`` (equality lookups only)."""
    return op in ("==", "in")


def digest_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:32]


@dataclass(frozen=True)
class Block:
    """One block's place in the sidecar, digest, number of values and value range."""

    offset: int
    length: int
    digest: str
    rows: int
    first: Any
    last: Any

    @property
    def end(self) -> int:
        return self.offset + self.length


@dataclass(frozen=True)
class Entry:
    """One column's blocks (value order) and the files whose lists are unknown (always kept)."""

    type: pa.DataType
    blocks: tuple[Block, ...]
    firsts: pa.Array
    lasts: pa.Array
    unknown: np.ndarray

    def select(self, literals: pa.Array) -> list[int] | None:
        """The blocks that may hold one of ``literals`` (of :attr:`type`), in order; None
        when so many are needed that reading the lists costs less."""
        if not len(self.blocks):
            return []
        hit = np.zeros(len(self.blocks), dtype=bool)
        for v in literals:
            if not v.is_valid:
                continue
            inside = pc.and_(pc.less_equal(self.firsts, v), pc.greater_equal(self.lasts, v))
            hit |= np.asarray(inside.to_numpy(zero_copy_only=False), dtype=bool)
        chosen = np.flatnonzero(hit)
        if len(chosen) > max(1, int(len(self.blocks) * MAX_SHARE)):
            return None
        return [int(i) for i in chosen]


Grouped = tuple[pa.Array, np.ndarray, np.ndarray]
"""A column's index read the other way round: sorted unique values, offsets (one more than
values) into ``rows``, the file rows of each value (ascending within a value)."""


def group_lists(lists: pa.Array) -> Grouped | None:
    """The (value, file row) pairs of ``lists`` (one list per file; null values and
    repeated pairs dropped) grouped by value; None when there are none."""
    flat = pc.list_flatten(lists)
    parents = pc.list_parent_indices(lists)
    if flat.null_count:
        valid = pc.is_valid(flat)
        flat, parents = flat.filter(valid), parents.filter(valid)
    if not len(flat):
        return None
    order = stable_order(flat)  # equal values keep their (ascending) files
    values = flat.take(pa.array(order))
    rows = np.asarray(parents.to_numpy(zero_copy_only=False), dtype=np.int64)[order]
    n = len(values)
    same_value = np.asarray(pc.equal(values.slice(1), values.slice(0, n - 1)).to_numpy(zero_copy_only=False),
                            dtype=bool) if n > 1 else np.zeros(0, dtype=bool)
    repeated = same_value & (rows[1:] == rows[:-1])
    if repeated.any():  # (a list that repeats a value)
        keep = np.concatenate(([True], ~repeated))
        values, rows, same_value = values.filter(pa.array(keep)), rows[keep], same_value[keep[1:]]
        n = len(values)
    starts = np.concatenate(([0], np.flatnonzero(~same_value) + 1)).astype(np.int64)
    return values.take(pa.array(starts)), np.concatenate((starts, [n])).astype(np.int64), rows


def build(columns: Mapping[str, pa.ChunkedArray | pa.Array], *, block_rows: int | None = None,
          min_entries: int | None = None,
          grouped: Callable[[str], Grouped | None] | None = None) -> tuple[bytes, dict[str, Any]]:
    """The sidecar bytes and the directory for the ``idx:`` lists in ``columns`` (one list
    per file) that are large enough and of an orderable type; ``(b"", {})`` when none is.
    ``grouped(name)`` may give a column's pairs already grouped (the commit built them for
    the kartothek index files): the same as :func:`group_lists` of its lists. Each block
    holds the values whose first pair falls in one stretch of ``block_rows`` pairs, as a
    table ``value, rows`` (a list of file rows per value) where values repeat over files,
    else as the pairs ``value, row`` (one row per pair: no list offsets for a column of
    distinct values). Deterministic."""
    block_rows = BLOCK_ROWS if block_rows is None else block_rows
    min_entries = MIN_ENTRIES if min_entries is None else min_entries
    parts: list[bytes] = []
    offset = 0
    out: dict[str, Any] = {}
    for name in sorted(columns):
        lists = columns[name]
        lists = lists.combine_chunks() if isinstance(lists, pa.ChunkedArray) else lists
        if not (pa.types.is_list(lists.type) or pa.types.is_large_list(lists.type)):
            continue
        t = lists.type.value_type
        n = len(lists)
        unknown = np.flatnonzero(np.asarray(pc.is_null(lists).to_numpy(zero_copy_only=False), dtype=bool))
        if not _orderable(t) or len(unknown) > n * MAX_UNKNOWN_SHARE + 1:  # (kept in the directory)
            continue
        if len(pc.list_flatten(lists)) < min_entries:
            continue
        got = grouped(name) if grouped is not None else None
        if got is None or not got[0].type.equals(t):
            got = group_lists(lists)
        if got is None or len(got[2]) < min_entries:
            continue
        values, offsets, rows = got
        rows32 = rows.astype(np.int32, copy=False)
        if len(rows) < 2 * len(values):  # mostly one file per value: (value, row) pairs
            if len(rows) != len(values):  # (all distinct: one pair per value already)
                values = values.take(pa.array(np.repeat(np.arange(len(values)), np.diff(offsets))))
                offsets = np.arange(len(rows) + 1, dtype=np.int64)
            grouped_rows = False
        else:  # each value with the list of its files' rows
            grouped_rows = True
        # a value goes to the stretch its first pair is in: a block starts at the first
        # value at or past each multiple of block_rows (stretches without one add none)
        starts = offsets[:-1]
        marks = np.arange(0, int(starts[-1]) + 1, block_rows, dtype=np.int64)
        cuts = np.unique(np.concatenate((np.searchsorted(starts, marks, side="left"), [len(values)])))
        blocks = []
        for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
            lo, hi = int(offsets[a]), int(offsets[b])
            if grouped_rows:
                piece = pa.table({"value": values.slice(a, b - a),
                                  "rows": pa.ListArray.from_arrays(pa.array(offsets[a:b + 1] - lo, pa.int32()),
                                                                   pa.array(rows32[lo:hi], pa.int32()))})
            else:
                piece = pa.table({"value": values.slice(a, b - a), "row": pa.array(rows32[lo:hi], pa.int32())})
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, piece.schema, options=_IPC) as writer:
                writer.write_table(piece)
            data = sink.getvalue().to_pybytes()
            parts.append(data)
            blocks.append((offset, len(data), digest_of(data), b - a))
            offset += len(data)
        bounds = pa.table({"first": values.take(pa.array(cuts[:-1])), "last": values.take(pa.array(cuts[1:] - 1))})
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, bounds.schema) as writer:
            writer.write_table(bounds)
        out[name] = {"files": n, "blocks": [list(b) for b in blocks], "unknown": unknown.tolist(),
                     "bounds": base64.b64encode(sink.getvalue().to_pybytes()).decode("ascii")}
    if not out:
        return b"", {}
    blob = b"".join(parts)
    return blob, {"digest": digest_of(blob), "size": len(blob), "columns": out}


def encode_directory(directory: Mapping[str, Any]) -> bytes:
    return json.dumps(directory, separators=(",", ":"), sort_keys=True).encode("utf-8")


def parse_directory(directory: Mapping[str, Any], n_files: int, only: str | None = None) -> dict[str, Entry]:
    """The entries of a directory :func:`build` wrote (``only``: that column's alone, if it
    has one), checked against the checkpoint's ``n_files``; raises ``ValueError`` (or an
    Arrow error) naming what is wrong."""
    out: dict[str, Entry] = {}
    columns = directory.get("columns")
    if not isinstance(columns, Mapping):
        raise ValueError("no columns")
    for name, raw in columns.items():
        if only is not None and name != only:
            continue
        if not isinstance(raw, Mapping) or raw.get("files") != n_files:
            raise ValueError(f"{name!r}: not for {n_files} files")
        bounds = pa.ipc.open_stream(base64.b64decode(raw["bounds"], validate=True)).read_all().combine_chunks()
        bounds.validate(full=True)
        blocks_raw = raw["blocks"]
        if bounds.column_names != ["first", "last"] or bounds.num_rows != len(blocks_raw):
            raise ValueError(f"{name!r}: bounds do not match its blocks")
        t = bounds.schema.field("first").type
        if not _orderable(t):
            raise ValueError(f"{name!r}: values of type {t}")
        firsts, lasts = bounds.column("first").chunk(0), bounds.column("last").chunk(0)
        blocks = []
        for (off, length, digest, rows), first, last in zip(blocks_raw, firsts.to_pylist(), lasts.to_pylist()):
            if not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in (off, length, rows)):
                raise ValueError(f"{name!r}: a block's range is not counts")
            if not isinstance(digest, str):
                raise ValueError(f"{name!r}: a block's digest is not text")
            blocks.append(Block(off, length, digest, rows, first, last))
        unknown = np.asarray(raw.get("unknown", []), dtype=np.int64)
        if len(unknown) and (unknown.min() < 0 or unknown.max() >= n_files):
            raise ValueError(f"{name!r}: unknown files out of range")
        out[name] = Entry(t, tuple(blocks), firsts, lasts, unknown)
    return out


def decode_block(data: bytes, block: Block, t: pa.DataType, n_files: int) -> tuple[pa.Array, pa.Array]:
    """A block's values and, per value, its file rows (a list each, or one row each; checked:
    digest, type, count, rows in range)."""
    if len(data) != block.length or digest_of(data) != block.digest:
        raise ValueError("its bytes do not match the checkpoint's digest")
    table = pa.ipc.open_stream(pa.py_buffer(data), options=pa.ipc.IpcReadOptions(use_threads=False)).read_all()
    table.validate(full=True)
    kinds = {"rows": pa.list_(pa.int32()), "row": pa.int32()}
    names = table.column_names
    if len(names) != 2 or names[0] != "value" or names[1] not in kinds \
            or not table.schema.field(0).type.equals(t) or not table.schema.field(1).type.equals(kinds[names[1]]) \
            or table.num_rows != block.rows:
        raise ValueError("its content is not the block the checkpoint lists")
    rows = table.column(1).combine_chunks()
    flat = rows_of(rows, np.ones(len(rows), dtype=bool))
    if len(flat) and (flat.min() < 0 or flat.max() >= n_files):
        raise ValueError("it names files out of range")
    return table.column("value").combine_chunks(), rows


def rows_of(rows: pa.Array, hit: np.ndarray) -> np.ndarray:
    """The file rows of the values where ``hit`` is true (``rows``: :func:`decode_block`'s)."""
    if pa.types.is_list(rows.type):
        return np.asarray(pc.list_flatten(rows.filter(pa.array(hit))).to_numpy(zero_copy_only=False), dtype=np.int64)
    out: np.ndarray = np.asarray(rows.to_numpy(zero_copy_only=False), dtype=np.int64)[hit]
    return out
