"""Value-sorted index blocks beside a checkpoint (issue #32, FORMAT.md E.7): an ``==`` /
``in`` predicate on a large index column reads a block or two instead of decoding every
file's list. These tests try to make the blocks' answer differ from the lists' (random
lists, block sizes, terms and later changes to the table), and damage the blocks."""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kstore.core import sorted_index
from kstore.core.filetable import IDX, FileTable
from kstore.core.metadata import DatasetMetadata
from kstore.core.planning import _lists_mask, _Probe
from kstore.core.predicates import bind, parse
from kstore.core.state import _grouped_from_index, checkpoint_bytes, checkpoint_parts, from_checkpoint
from kstore.errors import KeyNotFoundError
from tests.core.test_lazy_index_lists import apply_step

UUID = "d"
SCHEMA = pa.schema([("a", pa.int64()), ("s", pa.string()), ("d", pa.date32()), ("f", pa.float64())])
TYPES = {"a": pa.int64(), "s": pa.string(), "d": pa.date32(), "f": pa.float64()}


class Reader:
    """The sidecar in memory: counts reads, can fail."""

    def __init__(self, blob: bytes, digest: str | None) -> None:
        self.blob, self.digest = blob, digest
        self.reads: list[tuple[int, int]] = []
        self.failures: list[Exception] = []
        self.missing = False

    def read(self, digest: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        assert digest == self.digest
        if self.missing:
            raise KeyNotFoundError("gone")
        self.reads.extend(ranges)
        return [self.blob[o:o + n] for o, n in ranges]

    def failed(self, digest: str, error: Exception) -> None:
        self.failures.append(error)


def use_small_blocks(mp: pytest.MonkeyPatch, block_rows: int) -> None:
    mp.setattr(sorted_index, "BLOCK_ROWS", block_rows)
    mp.setattr(sorted_index, "MIN_ENTRIES", 1)
    mp.setattr(sorted_index, "MAX_SHARE", 1.0)
    mp.setattr(sorted_index, "MAX_UNKNOWN_SHARE", 1.0)


@pytest.fixture
def small_blocks(monkeypatch):
    return lambda block_rows: use_small_blocks(monkeypatch, block_rows)


def value(column: str, i: int):
    if column == "s":
        return f"v{i:02d}"
    if column == "d":
        import datetime

        return datetime.date(2024, 1, 1) + datetime.timedelta(days=i)
    return float(i) if column == "f" else i


def rows(labels: list[str], lists: dict[str, list[list[int] | None]]) -> pa.Table:
    cols = {"label": pa.array(labels, pa.string()), "table": pa.array(["table"] * len(labels), pa.string()),
            "key": pa.array([f"{UUID}/table/{lab}.parquet" for lab in labels], pa.string())}
    for c, v in lists.items():
        cols[IDX + c] = pa.array([None if x is None else [value(c, i) for i in x] for x in v], pa.list_(TYPES[c]))
    return pa.table(cols)


def open_lazy(ft: FileTable) -> tuple[FileTable, Reader]:
    meta = DatasetMetadata.new(UUID).evolve(version=3, schema=SCHEMA).with_files(ft)
    data, blob, digest = checkpoint_parts(meta)
    reader = Reader(blob, digest)
    return from_checkpoint(data, dataset_uuid=UUID, version=3, sidecar=reader).files, reader


def term(column: str, op: str, v):
    return bind(parse([(column, op, v)]), SCHEMA)[0][0]


def check(eager: FileTable, lazy: FileTable, t) -> bool:
    """The blocks' answer (where they give one) is the lists' answer; True when they gave one."""
    hits = lazy.index_hits(t.column, _Probe(t, SCHEMA))
    lists = eager.index_lists(t.column)
    if lists is None:
        assert hits is None
        return False
    expected = _lists_mask(t, lists, SCHEMA)
    if hits is not None:
        assert hits.tolist() == expected.tolist(), (t, lists.to_pylist())
    return hits is not None


LISTS = st.one_of(*[st.lists(st.integers(0, 12), max_size=4, unique=True).map(sorted)] * 3, st.none())
TERM = st.tuples(st.sampled_from(["a", "s", "d", "f"]), st.sampled_from(["==", "in", "==", "in", ">", "!="]),
                 st.lists(st.integers(-1, 13), min_size=1, max_size=3))
STEP = st.one_of(
    st.tuples(st.just("add"), st.integers(0, 3), st.sets(st.sampled_from(["a", "s"])), st.data()),
    st.tuples(st.just("remove"), st.lists(st.integers(0, 12), max_size=4)),
    st.tuples(st.just("drop"), st.sampled_from(["a", "s"])),
    st.tuples(st.just("set"), st.sampled_from(["a", "s"]), st.lists(st.integers(0, 12), max_size=3), st.data()),
)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 4), st.integers(0, 10), st.lists(STEP, max_size=6), st.lists(TERM, min_size=1, max_size=4),
       st.data())
def test_blocks_answer_as_the_lists_do_through_every_change(block_rows, n0, steps, terms, data):
    with pytest.MonkeyPatch.context() as mp:
        use_small_blocks(mp, block_rows)
        _changes(block_rows, n0, steps, terms, data)


def _changes(block_rows, n0, steps, terms, data):
    labels = [f"p={i}/f0" for i in range(n0)]
    eager = FileTable(rows(labels, {c: [data.draw(LISTS) for _ in labels] for c in ("a", "s", "d", "f")}))
    lazy, _ = open_lazy(eager)
    bound = [term(c, op, [value(c, v) for v in vs] if op == "in" else value(c, vs[0])) for c, op, vs in terms]
    for t in bound:
        check(eager, lazy, t)
    for k, step in enumerate(steps):
        eager, lazy = apply_step(k, step, eager, lazy, rows, lambda labels, c, d: [d.draw(LISTS) for _ in labels])
        for t in bound:
            check(eager, lazy, t)


def test_blocks_are_read_for_equality_on_large_orderable_columns_only(small_blocks):
    small_blocks(2)
    lists = {c: [[1, 2], [2, 3], None, [7]] for c in ("a", "s", "d", "f")}
    eager = FileTable(rows(["p=1/a", "p=2/b", "p=3/c", "p=4/d"], lists))
    lazy, reader = open_lazy(eager)
    for c in ("a", "s", "d"):
        reader.reads.clear()
        assert check(eager, lazy, term(c, "==", value(c, 2)))
        assert len(reader.reads) == 2  # the blocks that hold 2 (pairs: [1a 2a] [2b 3b] [7d])
        reader.reads.clear()
        assert check(eager, lazy, term(c, "==", value(c, 7)))
        assert len(reader.reads) == 1
        assert lazy.index_hits(c, _Probe(term(c, "==", value(c, 2)), SCHEMA)).tolist() == [True, True, True, False]
    assert not check(eager, lazy, term("f", "==", 2.0))  # floats: the lists answer (NaN, -0.0)
    assert not check(eager, lazy, term("a", ">", 2))  # ranges: the lists answer
    assert not check(eager, lazy, term("a", "==", 2.5))  # a literal not of the column's type
    assert lazy.index_columns == eager.index_columns and reader.failures == []
    # nothing decoded a list: the blocks answered
    assert lazy._lazy is not None and lazy._lazy._got == {}


def test_values_of_many_files_are_stored_with_their_rows_and_read_in_one_block(small_blocks):
    small_blocks(2)
    eager = FileTable(rows(["p=1/a", "p=2/b", "p=3/c", "p=4/d"], {"a": [[1, 2], [1, 2], [1, 2], [7]]}))
    lazy, reader = open_lazy(eager)
    assert check(eager, lazy, term("a", "==", 2))
    assert len(reader.reads) == 1  # values with their rows: {1: a b c} {2: a b c} {7: d}
    assert lazy.index_hits("a", _Probe(term("a", "==", 2), SCHEMA)).tolist() == [True, True, True, False]
    assert lazy.index_hits("a", _Probe(term("a", "in", [7, 8]), SCHEMA)).tolist() == [False, False, False, True]
    meta = DatasetMetadata.new(UUID).evolve(version=3, schema=SCHEMA).with_files(eager)
    directory = json.loads(pa.ipc.open_file(checkpoint_parts(meta)[0]).schema.metadata[sorted_index.DIRECTORY_KEY])
    block = sorted_index.parse_directory(directory, 4)["idx:a"].blocks[1]
    values, rows_ = sorted_index.decode_block(reader.blob[block.offset:block.end], block, pa.int64(), 4)
    assert values.to_pylist() == [2] and rows_.to_pylist() == [[0, 1, 2]]


def test_a_value_past_every_block_reads_nothing(small_blocks):
    small_blocks(2)
    eager = FileTable(rows(["p=1/a", "p=2/b"], {"a": [[1, 2], [3, 4]]}))
    lazy, reader = open_lazy(eager)
    assert lazy.index_hits("a", _Probe(term("a", "in", [0, 99]), SCHEMA)).tolist() == [False, False]
    assert reader.reads == []


def test_small_columns_get_no_blocks():
    eager = FileTable(rows(["p=1/a", "p=2/b"], {"a": [[1, 2], [3, 4]]}))
    meta = DatasetMetadata.new(UUID).evolve(version=3, schema=SCHEMA).with_files(eager)
    data, blob, digest = checkpoint_parts(meta)
    assert (blob, digest) == (b"", None) and data == checkpoint_bytes(meta)


@pytest.mark.parametrize("damage", ["flip", "truncate", "missing", "swap"])
def test_damaged_or_missing_blocks_fall_back_to_the_lists(small_blocks, damage):
    small_blocks(2)
    eager = FileTable(rows([f"p={i}/a" for i in range(6)], {"a": [[i, i + 1] for i in range(6)]}))
    lazy, reader = open_lazy(eager)
    if damage == "flip":
        raw = bytearray(reader.blob)
        raw[len(raw) // 2] ^= 0x10
        reader.blob = bytes(raw)
    elif damage == "truncate":
        reader.blob = reader.blob[: len(reader.blob) // 2]
    elif damage == "missing":
        reader.missing = True
    else:  # another block's bytes where this one should be
        reader.blob = reader.blob[len(reader.blob) // 2:] + reader.blob[: len(reader.blob) // 2]
    probe = _Probe(term("a", "==", 3), SCHEMA)
    assert lazy.index_hits("a", probe) is None  # the lists answer instead
    assert len(reader.failures) == 1
    assert _lists_mask(probe.term, lazy.index_lists("a"), SCHEMA).tolist() == [False, False, True, True, False, False]
    reader.reads.clear()
    assert lazy.index_hits("a", _Probe(term("a", "==", 4), SCHEMA)) is not None  # (decoded now: the lists)
    assert reader.reads == [] and len(reader.failures) == 1


def test_a_damaged_directory_falls_back_to_the_lists(small_blocks):
    small_blocks(2)
    eager = FileTable(rows([f"p={i}/a" for i in range(4)], {"a": [[i] for i in range(4)]}))
    meta = DatasetMetadata.new(UUID).evolve(version=3, schema=SCHEMA).with_files(eager)
    data, blob, digest = checkpoint_parts(meta)
    reader = Reader(blob, digest)
    table = pa.ipc.open_file(data).read_all()
    kv = dict(table.schema.metadata)
    kv[sorted_index.DIRECTORY_KEY] = kv[sorted_index.DIRECTORY_KEY].replace(b'"files":4', b'"files":5')
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema.with_metadata(kv)) as w:
        w.write_table(table.replace_schema_metadata(kv))
    lazy = from_checkpoint(sink.getvalue().to_pybytes(), dataset_uuid=UUID, version=3, sidecar=reader).files
    assert lazy.index_hits("a", _Probe(term("a", "==", 2), SCHEMA)) is None
    assert len(reader.failures) == 1 and reader.reads == []


def test_blocks_are_deterministic_and_sorted():
    rng = np.random.default_rng(5)
    lists = pa.array([np.unique(rng.integers(-300, 300, 40)) for _ in range(50)], pa.list_(pa.int64()))
    one = sorted_index.build({"idx:a": lists}, block_rows=64, min_entries=1)
    two = sorted_index.build({"idx:a": pa.chunked_array([lists.slice(0, 20), lists.slice(20)])}, block_rows=64,
                             min_entries=1)
    assert one == two
    blob, directory = one
    entry = sorted_index.parse_directory(directory, 50)["idx:a"]
    got = [sorted_index.decode_block(blob[b.offset:b.end], b, entry.type, 50) for b in entry.blocks]
    values = np.concatenate([v.to_numpy() for v, _ in got])
    assert (np.diff(values) > 0).all()  # sorted, each value in one block
    pairs = sorted((int(v), int(r)) for r, lst in enumerate(lists.to_pylist()) for v in lst)
    assert sorted((v, r) for vs, rs in got for v, r_ in zip(vs.to_pylist(), rs.to_pylist()) for r in r_) == pairs
    assert all(rs == sorted(rs) for _, r in got for rs in r.to_pylist())  # files ascending within a value
    assert [(b.first, b.last) for b in entry.blocks] == [(v[0].as_py(), v[-1].as_py()) for v, _ in got]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.none() | st.lists(st.integers(-5, 40), max_size=6), min_size=1, max_size=12),
       st.integers(1, 5), st.sampled_from(["a", "s"]))
def test_blocks_from_the_commits_index_are_the_blocks_from_the_lists(lists, block_rows, column):
    """The commit hands the checkpoint writer the inverted index it built for the kartothek
    index file: the blocks made from it are byte for byte those made from the lists (a list
    that repeats a value included), so every writer of a checkpoint agrees."""
    labels = [f"p={i}/f" for i in range(len(lists))]
    eager = FileTable(rows(labels, {column: lists}))
    meta = DatasetMetadata.new(UUID).evolve(version=3, schema=SCHEMA).with_files(eager)
    index = eager.column_index(column, TYPES[column])
    if any(lst for lst in lists):  # (the commit's grouping is used, not rebuilt)
        grouped = _grouped_from_index(eager, index)
        assert grouped is not None and grouped[0].type.equals(TYPES[column])
    with pytest.MonkeyPatch.context() as mp:
        use_small_blocks(mp, block_rows)
        assert checkpoint_parts(meta, column_indexes={column: index}) == checkpoint_parts(meta)
