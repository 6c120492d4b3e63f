"""The write block's split of a chunk into partition files (kstore.blocks.write).

Rows are grouped by partition value, gathered in runs of consecutive groups (one ``take``
a run, each group a zero-copy slice) and written by a pool of writers. These tests try to
break that: every row in exactly one file and in input order, runs that cover every group
once, and a store call failing at any point of a many-run write leaving no file behind.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kstore.blocks.write as bw
from kstore.errors import StoreError
from kstore.io.memory import MemoryStore


def _table(keys: list[int], second: list[str] | None = None) -> pa.Table:
    cols = {"p": pa.array(keys, pa.int64()), "row": pa.array(np.arange(len(keys)), pa.int64()),
            "s": pa.array([f"v{i % 7}" for i in range(len(keys))], pa.string())}
    if second is not None:
        cols["q"] = pa.array(second, pa.string())
    return pa.table(cols)


@settings(max_examples=150, deadline=None)
@given(keys=st.lists(st.integers(0, 12), max_size=200), two_keys=st.booleans(),
       parts=st.integers(1, 20), gather=st.integers(1, 80), data=st.data())
def test_runs_cover_every_group_once_and_gather_the_rows_a_take_per_group_would(keys, two_keys, parts, gather, data):
    second = data.draw(st.lists(st.sampled_from(["a", "b"]), min_size=len(keys), max_size=len(keys))) if two_keys else None
    table = _table(keys, second)
    on = ["p", "q"] if two_keys else ["p"]
    split = bw.split_rows(table, on)
    groups = [g for g in range(len(split)) if split.rows(g) > 0]
    runs = split.runs(groups, parts, max_rows=gather)
    assert [g for r in runs for g in r] == groups  # every group once, in order
    cap = max(1, min(gather, -(-len(keys) // parts)))
    for r in runs:
        assert r == list(range(r[0], r[-1] + 1))  # consecutive: one gather serves the run
        assert len(r) == 1 or sum(split.rows(g) for g in r) <= cap
    seen = []
    for r in runs:
        for g, got in zip(r, split.tables(r)):
            assert got.equals(split.table(g))
            rows = got.column("row").to_pylist()
            assert rows == sorted(rows)  # input order kept within a partition
            want = {tuple(table.column(c)[i].as_py() for c in on) for i in rows}
            assert want == {split.values[g]}  # every row of the group has the group's values
            seen += rows
    assert sorted(seen) == list(range(len(keys)))  # every row exactly once


class _Failing(MemoryStore):
    """Put number ``at`` fails: before it takes effect, or after it (a lost reply)."""

    def __init__(self, at: int, after: bool) -> None:
        super().__init__()
        self.at, self.after, self.puts = at, after, 0

    def put(self, key, data):
        self.puts += 1
        if self.puts == self.at and not self.after:
            raise StoreError(f"injected failure of put {key}")
        super().put(key, data)
        if self.puts == self.at:
            raise StoreError(f"injected lost reply of put {key}")


@pytest.mark.parametrize("after", [False, True], ids=["fails", "reply-lost"])
@pytest.mark.parametrize("threads", [1, 4])
def test_a_put_failing_anywhere_in_a_many_run_write_leaves_no_file(monkeypatch, threads, after):
    monkeypatch.setattr(bw, "GATHER_ROWS", 25)  # 30 partitions of 10 rows: runs of 2, many per writer
    table = _table([i % 30 for i in range(300)])
    probe = _Failing(at=0, after=False)
    files = bw.write_partitions(probe, "ds", table, bw.FileLayout(("p",), ("s",)), max_workers=threads)
    assert len(files) == 30 and sum(f.stats.rows for f in files) == 300
    for at in range(1, 31):
        store = _Failing(at=at, after=after)
        with pytest.raises(StoreError, match="injected"):
            bw.write_partitions(store, "ds", table, bw.FileLayout(("p",), ("s",)), max_workers=threads)
        assert list(store.iter_prefix("")) == [], f"put {at} failed and left files behind"


def test_dictionary_misses_finds_the_unique_columns_between_nested_ones():
    """The Parquet leaf columns of nested types (a struct's fields, a map's keys and values,
    a list's items) come between the flat ones: each flat column's chunks must be its own.
    Unique ids and floats are misses; repeated values, nested columns, categoricals,
    booleans and all-null columns are not."""
    import io

    import pyarrow.parquet as pq

    n = 3000
    rng = np.random.default_rng(0)
    table = pa.table({
        "s": pa.array([{"a": i, "b": [f"x{i % 3}"]} for i in range(n)]),
        "id": pa.array(np.arange(n)),
        "m": pa.array([[("k", {"x": i % 5, "y": i})] for i in range(n)],
                      pa.map_(pa.string(), pa.struct([("x", pa.int64()), ("y", pa.int64())]))),
        "price": pa.array(rng.random(n)),
        "few": pa.array(rng.integers(0, 9, n)),
        "cat": pa.array([f"c{i}" for i in range(n)]).dictionary_encode(),
        "flag": pa.array(rng.random(n) < 0.5),
        "none": pa.nulls(n, pa.int64()),
        "text": pa.array([f"unique text {i}" for i in range(n)]),
        "label": pa.array([f"label {i % 40}" for i in range(n)]),
    })
    collected: list = []
    pq.write_table(table, io.BytesIO(), metadata_collector=collected, use_dictionary=True)
    assert bw.dictionary_misses(collected[0], table) == {"id", "price", "text"}
    collected = []
    pq.write_table(table, io.BytesIO(), metadata_collector=collected, use_dictionary=False)
    assert bw.dictionary_misses(collected[0], table) == set()  # nothing dictionary-encoded: no miss


@pytest.mark.parametrize("tiny_at", [0, 5, 15])
def test_auto_dictionary_is_judged_on_the_runs_largest_file(tiny_at):
    """``use_dictionary="auto"`` decides once per run, on its largest file: a tiny partition
    (all of whose values are unique) must not make the large files of its run drop the
    dictionary of a column with a few hundred values; a unique column is written plain in
    every file but the judged one of each run, and every row reads back exactly."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    rng = np.random.default_rng(1)
    sizes = [500] * 16
    sizes.insert(tiny_at, 5)
    keys = np.repeat(np.arange(len(sizes)), sizes)
    n = len(keys)
    table = pa.table({"p": pa.array(keys), "id": pa.array(np.arange(n)),
                      "loc": pa.array(rng.integers(0, 300, n))})
    store = MemoryStore()
    runs = bw.split_rows(table, ["p"]).runs(list(range(len(sizes))), 4)  # a writer's runs (4 a thread)
    tiny_run = next(r for r in runs if tiny_at in r)
    assert len(tiny_run) > 1  # the tiny partition shares its run with large ones
    written = bw.write_partitions(store, "ds", table, bw.FileLayout(("p",)), max_workers=1, file_id="f")
    assert [w.label for w in written] == [f"p={g}/f" for g in range(len(sizes))]  # in partition order
    has_dictionary = {}
    for w in written:
        part = int(w.label.split("/")[0].split("=")[1])
        pf = pq.ParquetFile(pa.BufferReader(store.get(w.key)))
        has_dictionary[part] = {pf.schema_arrow.names[i]: pf.metadata.row_group(0).column(i).has_dictionary_page
                                for i in range(pf.metadata.num_columns)}
        back, rows = pf.read(), table.filter(pc.equal(table["p"], part))
        assert back.column("id").equals(rows.column("id")) and back.column("loc").equals(rows.column("loc"))
    assert all(cols["loc"] for part, cols in has_dictionary.items() if sizes[part] == 500), has_dictionary
    judged = sorted(part for part, cols in has_dictionary.items() if cols["id"])
    assert len(judged) == len(runs) and tiny_at not in judged  # one judged file a run, never the tiny one
    assert all(any(part in run for part in judged) for run in runs)


_INT_TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()]


@st.composite
def _int_column(draw: st.DrawFn) -> pa.Array:
    """Integers of any width, mostly near one base (the marked-table path) with some
    anywhere in the type's range (the sorting path), sorted or not, and nulls."""
    t = draw(st.sampled_from(_INT_TYPES))
    bits = t.bit_width
    lo, hi = (0, 2**bits - 1) if pa.types.is_unsigned_integer(t) else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    base = draw(st.integers(lo, hi))
    near = st.integers(max(lo, base - 300), min(hi, base + 300))
    xs = draw(st.lists(st.one_of(st.none(), near, st.integers(lo, hi)), max_size=200))
    if draw(st.booleans()):  # in ascending order (nulls anywhere): the run path
        present = iter(sorted(x for x in xs if x is not None))
        xs = [None if x is None else next(present) for x in xs]
    return pa.array(xs, t)


@settings(max_examples=400, deadline=None)
@given(_int_column())
def test_distinct_index_values_of_a_file_are_exact(col: pa.Array) -> None:
    """A file's index values (:func:`kstore.blocks.write._sorted_distinct`) are its distinct
    non-null values, sorted, in the column's type, at the edges of every integer width."""
    got = bw._sorted_distinct(col)
    assert got.type == col.type
    assert got.to_pylist() == sorted({x for x in col.to_pylist() if x is not None})
