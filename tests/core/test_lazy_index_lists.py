"""Index lists decoded on demand (issue #32): a file table read from a checkpoint leaves its
``idx:`` columns encoded until a reader asks for one, and every change to the table
(files added with or without lists, files removed, an index dropped or set) gives
exactly the table the fully decoded one gives: same columns, order and values, so the
same checkpoint bytes. These tests try to make the two differ."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kstore.core.filetable import IDX, Actions, FileTable, LazyIndexLists
from kstore.core.metadata import DatasetMetadata
from kstore.core.state import checkpoint_bytes, from_checkpoint, set_index_lists
from kstore.errors import CorruptMetadataError

UUID = "d"
LIST = pa.list_(pa.int64())
COLUMNS = ("a", "b", "c")


def rows(labels: list[str], lists: dict[str, list[list[int] | None]], n_rows: int = 1) -> pa.Table:
    """A file table piece: label/table/key, a statistic, then ``idx:`` columns."""
    cols = {"label": pa.array(labels, pa.string()), "table": pa.array(["table"] * len(labels), pa.string()),
            "key": pa.array([f"{UUID}/table/{lab}.parquet" for lab in labels], pa.string()),
            "rows": pa.array([n_rows] * len(labels), pa.int64())}
    for c, v in lists.items():
        cols[IDX + c] = pa.array(v, LIST)
    return pa.table(cols)


def lazy_twin(ft: FileTable, counter: list[str] | None = None) -> FileTable:
    """``ft`` with its ``idx:`` columns behind a :class:`LazyIndexLists` (what a checkpoint
    gives), each decoded from ``ft`` on demand (recorded in ``counter``)."""
    full = ft.table
    names = [n for n in full.column_names if n.startswith(IDX)]

    def fetch(name: str) -> pa.ChunkedArray:
        if counter is not None:
            counter.append(name)
        return full.column(name)

    base = FileTable(full.drop_columns(names))
    return base.with_lazy_index_lists(LazyIndexLists(names, fetch, len(ft)))


def same(eager: FileTable, lazy: FileTable) -> None:
    assert lazy.index_columns == eager.index_columns
    assert len(lazy) == len(eager)
    for c in COLUMNS:
        a, b = eager.index_lists(c), lazy.index_lists(c)
        assert (a is None) == (b is None), c
        if a is not None:
            assert b is not None and b.type.equals(a.type) and b.to_pylist() == a.to_pylist(), c
    assert lazy.table.equals(eager.table), (lazy.table.schema, eager.table.schema)


def apply_step(k: int, step: tuple, eager: FileTable, lazy: FileTable, make_rows: Callable[..., pa.Table],
               make_lists: Callable[[list[str], str, Any], list]) -> tuple[FileTable, FileTable]:
    """One random change (STEP) applied to both tables: files added, removed, an index
    dropped or set (rows from ``make_rows(labels, {column: lists})``, the lists of a column
    from ``make_lists(labels, column, data)``)."""
    if step[0] == "add":
        _, n, cols, d = step
        new = [f"p=n{k}/{i}" for i in range(n)]
        add = make_rows(new, {c: make_lists(new, c, d) for c in sorted(cols)})
        return eager.apply(Actions(add=add)), lazy.apply(Actions(add=add))
    if step[0] == "remove":
        current = eager.labels.to_pylist()
        gone = tuple(dict.fromkeys(current[i] for i in step[1] if i < len(current)))
        return eager.apply(Actions(remove=gone)), lazy.apply(Actions(remove=gone))
    if step[0] == "drop":
        return eager.drop_index(step[1]), lazy.drop_index(step[1])
    _, c, at, d = step
    current = eager.labels.to_pylist()
    chosen = list(dict.fromkeys(current[i] for i in at if i < len(current)))
    lists = make_rows(chosen, {c: make_lists(chosen, c, d)}).column(IDX + c).combine_chunks()
    chosen_arr = pa.array(chosen, pa.string())
    return set_index_lists(eager, c, chosen_arr, lists), set_index_lists(lazy, c, chosen_arr, lists)


LISTS = st.none() | st.lists(st.integers(0, 5), max_size=3, unique=True).map(sorted)
STEP = st.one_of(
    st.tuples(st.just("add"), st.integers(0, 3), st.sets(st.sampled_from(COLUMNS)), st.data()),
    st.tuples(st.just("remove"), st.lists(st.integers(0, 12), max_size=4)),
    st.tuples(st.just("drop"), st.sampled_from(COLUMNS)),
    st.tuples(st.just("set"), st.sampled_from(COLUMNS), st.lists(st.integers(0, 12), max_size=3), st.data()),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(COLUMNS), unique=True), st.integers(0, 4), st.lists(STEP, max_size=8), st.data())
def test_changes_to_a_lazy_table_give_the_eager_tables_result(start_cols, n0, steps, data):
    labels = [f"p={i}/f0" for i in range(n0)]
    eager = FileTable(rows(labels, {c: [data.draw(LISTS) for _ in labels] for c in start_cols}))
    lazy = lazy_twin(eager)
    same(eager, lazy)
    for k, step in enumerate(steps):
        eager, lazy = apply_step(k, step, eager, lazy, rows, lambda labels, c, d: [d.draw(LISTS) for _ in labels])
        same(eager, lazy)


def test_only_the_lists_a_reader_asks_for_are_decoded():
    eager = FileTable(rows(["p=1/a", "p=2/b"], {"a": [[1], [2]], "b": [[3], None]}))
    decoded: list[str] = []
    lazy = lazy_twin(eager, decoded)
    later = lazy.apply(Actions(add=rows(["p=3/c"], {"b": [[9]]}), remove=("p=1/a",))).drop_index("a")
    assert decoded == []  # changes decode nothing
    assert later.index_columns == ("b",) and len(later) == 2 and later.labels.to_pylist() == ["p=2/b", "p=3/c"]
    assert later.index_lists("b").to_pylist() == [None, [9]]
    assert later.unindexed_labels("b") == ["p=2/b"]
    assert decoded == [IDX + "b"]  # "a" never
    assert later.stats().column("rows").to_pylist() == [1, 1]
    assert decoded == [IDX + "b"]
    later.index_lists("b")
    assert decoded == [IDX + "b"]  # once


def test_a_lazy_table_pickles_whole():
    import pickle

    eager = FileTable(rows(["p=1/a"], {"a": [[1]]}))
    back = pickle.loads(pickle.dumps(lazy_twin(eager)))
    assert back.table.equals(eager.table)


def test_lists_of_the_wrong_length_are_corrupt_metadata():
    base = FileTable(rows(["p=1/a", "p=2/b"], {}))
    lazy = base.with_lazy_index_lists(LazyIndexLists(["idx:a"], lambda name: pa.chunked_array([pa.array([[1]], LIST)]),
                                                     2))
    with pytest.raises(CorruptMetadataError, match="1 entries for 2 files"):
        lazy.index_lists("a")


def checkpoint_of(ft: FileTable) -> bytes:
    schema = pa.schema([("x", pa.int64()), ("a", pa.int64()), ("b", pa.int64())])
    meta = DatasetMetadata.new(UUID).evolve(version=3, schema=schema).with_files(ft)
    return checkpoint_bytes(meta)


def test_a_checkpoint_decodes_index_lists_on_demand_and_writes_back_the_same_bytes():
    ft = FileTable(rows([f"p={i}/f" for i in range(50)], {"a": [[i] for i in range(50)],
                                                          "b": [[i, i + 1] for i in range(50)]}))
    data = checkpoint_of(ft)
    back = from_checkpoint(data, dataset_uuid=UUID, version=3)
    files = back.files
    assert files._lazy is not None and files.base.column_names[-1] == "rows"  # nothing decoded on open
    assert files.index_lists("a").to_pylist() == [[i] for i in range(50)]
    assert sorted(files._lazy._got) == [IDX + "a"]
    assert checkpoint_bytes(back) == data  # the whole table, decoded when written
    eager = from_checkpoint(data, dataset_uuid=UUID, version=3, lazy=False)
    assert eager.files._lazy is None and eager.files.table.equals(back.files.table)


def _damage_column(ft: FileTable, column: str) -> bytes:
    """A checkpoint of ``ft`` whose ``idx:<column>`` list offsets run backwards (damage only a
    full validation finds, in that column alone)."""
    data = checkpoint_of(ft)
    table = pa.ipc.open_file(pa.py_buffer(data)).read_all()
    name = IDX + column
    good = table.column(name).combine_chunks()
    assert len(good) == 2 and len(good.values) == 2
    bad_offsets = pa.array([0, 2, 1], pa.int32()).buffers()[1]
    bad = pa.ListArray.from_buffers(good.type, len(good), [None, bad_offsets], children=[good.values])
    table = table.set_column(table.column_names.index(name), name, bad)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression="zstd")) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def test_damaged_lists_are_corrupt_metadata_naming_the_checkpoint_and_the_column():
    ft = FileTable(rows(["p=1/a", "p=2/b"], {"a": [[1], [2]], "b": [[3], [4]]}))
    data = _damage_column(ft, "b")
    back = from_checkpoint(data, dataset_uuid=UUID, version=3)  # the rest is intact
    assert back.files.index_lists("a").to_pylist() == [[1], [2]]
    with pytest.raises(CorruptMetadataError, match=r"checkpoint of version 3: its index lists 'idx:b' do not decode"):
        back.files.index_lists("b")
    with pytest.raises(CorruptMetadataError, match="idx:b"):
        back.files.table  # noqa: B018 - nothing writes a table without the column
    with pytest.raises(CorruptMetadataError, match="not a readable Arrow IPC file"):  # what GC verifies
        from_checkpoint(data, dataset_uuid=UUID, version=3, lazy=False)
    got = from_checkpoint(data, dataset_uuid=UUID, version=3,
                          read_around=lambda name, error: pa.chunked_array([pa.array([[3], [4]], LIST)]))
    assert got.files.table.equals(ft.table)
