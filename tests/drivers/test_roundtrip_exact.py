"""Round trips that must not change the data (issue #29, item 8).

Every read, in every engine, returns exactly the rows, values and types that were written:

- narrow integer and float columns (int8..int32, uint8..uint32, float32, their nullable
  pandas dtypes) read back in their own width from every kstore reader, the dataset schema
  and ``to_pyarrow_dataset`` (so DuckDB and Polars), while ``_common_metadata`` keeps the
  normalized schema kartothek reads; appends of the same type keep it, a wider append
  widens the column; predicates, indices and statistics on narrow columns stay exact;
- a named pandas index is stored (as a column) and read back as the index;
- an overwrite keeps the dataset's user metadata.
"""

from __future__ import annotations

import io
import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import kstore
from kstore.blocks import write as write_block
from kstore.core.metadata import DatasetMetadata
from kstore.core.operations import Create, Overwrite
from kstore.core.types import normalize_schema
from kstore.errors import InvalidArgumentError, SchemaMismatchError

NARROW = {
    "i8": pa.int8(), "i16": pa.int16(), "i32": pa.int32(),
    "u8": pa.uint8(), "u16": pa.uint16(), "u32": pa.uint32(),
    "f32": pa.float32(),
}


def narrow_frame(n: int = 12, start: int = 0) -> pd.DataFrame:
    ids = np.arange(start, start + n)
    return pd.DataFrame({
        "p": (ids % 3).astype("int8"),
        "id": ids.astype("int64"),
        "i8": (ids - 6).astype("int8"),
        "i16": (ids * 1000).astype("int16"),
        "i32": (ids * 100_000).astype("int32"),
        "u8": (ids + 200).astype("uint8"),
        "u16": (ids * 5000).astype("uint16"),
        "u32": (ids * 300_000_000).astype("uint32"),
        "f32": (ids * 0.1).astype("float32"),
        "n32": pd.array([None if i % 4 == 0 else int(i) for i in ids], dtype="Int32"),
        "nu16": pd.array([None if i % 5 == 0 else int(i) for i in ids], dtype="UInt16"),
        "nf32": pd.array([None if i % 3 == 0 else i * 0.5 for i in ids], dtype="Float32"),
    })


EXPECTED_ARROW = {"p": pa.int8(), "id": pa.int64(), **NARROW, "n32": pa.int32(), "nu16": pa.uint16(),
                  "nf32": pa.float32()}


def by_id(df: pd.DataFrame) -> pd.DataFrame:
    return df.sort_values("id", kind="stable").reset_index(drop=True)


def assert_types(schema: pa.Schema, expected=EXPECTED_ARROW) -> None:
    got = {f.name: f.type for f in schema if f.name in expected}
    assert got == expected


def common_metadata(url: str, uuid: str) -> pa.Schema:
    meta = kstore.load_metadata(url, uuid)
    return pq.read_schema(io.BytesIO(kstore.open_store(url).get(f"{uuid}/{meta.table}/_common_metadata")))


# -- (a) narrow types ---------------------------------------------------------------------


@pytest.mark.parametrize("partitioned", [True, False])
def test_narrow_types_read_back_as_written(store_url, partitioned):
    df = narrow_frame()
    kstore.store_dataset(store_url, "d", df, partition_on="p" if partitioned else None)
    expected = df[["p", *[c for c in df.columns if c != "p"]]] if partitioned else df

    assert_types(kstore.read_table(store_url, "d").schema)
    assert_types(kstore.read_dataset(store_url, "d", as_arrow=True).schema)
    assert_types(kstore.read_schema(store_url, "d"))
    snap = kstore.open_dataset(store_url, "d")
    assert_types(snap.schema())
    assert_types(snap.to_pyarrow_dataset().schema)
    assert_types(snap.to_pyarrow_dataset().to_table().schema)
    # pandas: the frame path (row counts known), the Arrow path (a residual predicate), iter
    pd.testing.assert_frame_equal(by_id(kstore.read_dataset(store_url, "d")), by_id(expected))
    pd.testing.assert_frame_equal(by_id(kstore.read_dataset(store_url, "d", predicates=[[("id", ">=", 0)]])),
                                  by_id(expected))
    pd.testing.assert_frame_equal(by_id(pd.concat(list(kstore.iter_dataset(store_url, "d")))), by_id(expected))
    # kartothek's view stays normalized
    common = common_metadata(store_url, "d")
    assert common.field("i32").type == pa.int64() and common.field("f32").type == pa.float64()
    assert common.field("u8").type == pa.uint64()
    assert json.loads(common.metadata[b"pandas"])["index_columns"] == []


def test_narrow_types_through_duckdb_and_polars(store_url):
    pytest.importorskip("duckdb")
    pl = pytest.importorskip("polars")
    kstore.store_dataset(store_url, "d", narrow_frame(), partition_on="p")
    snap = kstore.open_dataset(store_url, "d")
    con = snap.to_duckdb("t")
    types = dict(con.execute("select column_name, column_type from (describe t)").fetchall())
    assert (types["i8"], types["i32"], types["u16"], types["f32"], types["p"]) == (
        "TINYINT", "INTEGER", "USMALLINT", "FLOAT", "TINYINT")
    frame = pl.scan_pyarrow_dataset(snap.to_pyarrow_dataset()).collect()
    assert (frame.schema["i16"], frame.schema["u32"], frame.schema["f32"]) == (pl.Int16, pl.UInt32, pl.Float32)


def test_files_hold_the_written_types(store_url, data_keys):
    kstore.store_dataset(store_url, "d", narrow_frame(), partition_on="p")
    st = kstore.open_store(store_url)
    for key in data_keys(store_url, "d"):
        schema = pq.read_schema(io.BytesIO(st.get(key)))
        assert_types(schema, {k: v for k, v in EXPECTED_ARROW.items() if k != "p"})


def test_append_of_the_same_narrow_types_keeps_them(store_url):
    kstore.store_dataset(store_url, "d", narrow_frame(), partition_on="p")
    kstore.update_dataset(store_url, "d", narrow_frame(start=12))
    assert_types(kstore.read_schema(store_url, "d"))
    out = kstore.read_dataset(store_url, "d")
    assert len(out) == 24 and out["i32"].dtype == np.int32 and out["n32"].dtype == pd.Int32Dtype()


def test_append_of_a_wider_type_widens_the_column(store_url):
    kstore.store_dataset(store_url, "d", pd.DataFrame({"id": [0, 1], "x": np.array([1, 2], np.int32),
                                                       "f": np.array([0.5, 1.5], np.float32)}))
    wide = pd.DataFrame({"id": [2], "x": np.array([2**40], np.int64), "f": [0.1]})
    kstore.update_dataset(store_url, "d", wide)
    schema = kstore.read_schema(store_url, "d")
    assert schema.field("x").type == pa.int64() and schema.field("f").type == pa.float64()
    out = by_id(kstore.read_dataset(store_url, "d"))
    assert out["x"].tolist() == [1, 2, 2**40] and out["x"].dtype == np.int64
    assert out["f"].tolist() == [0.5, 1.5, 0.1]
    # a narrower append leaves the (now wider) column as it is
    kstore.update_dataset(store_url, "d", pd.DataFrame({"id": [3], "x": np.array([7], np.int8),
                                                       "f": np.array([2.5], np.float32)}))
    assert kstore.read_schema(store_url, "d").field("x").type == pa.int64()
    assert by_id(kstore.read_dataset(store_url, "d"))["x"].tolist() == [1, 2, 2**40, 7]


def test_append_of_another_type_family_still_refused(store_url):
    kstore.store_dataset(store_url, "d", pd.DataFrame({"x": np.array([1], np.int32)}))
    with pytest.raises(SchemaMismatchError, match="'x'.*int32.*double"):
        kstore.update_dataset(store_url, "d", pd.DataFrame({"x": [1.5]}))
    with pytest.raises(SchemaMismatchError, match="'x'.*int32.*uint8"):
        kstore.update_dataset(store_url, "d", pd.DataFrame({"x": np.array([1], np.uint8)}))


def test_predicates_on_narrow_columns(store_url):
    df = narrow_frame()
    kstore.store_dataset(store_url, "d", df, partition_on="p", secondary_indices=["i16", "f32"])

    def ids(predicates):
        return sorted(kstore.read_table(store_url, "d", predicates=predicates).column("id").to_pylist())

    assert ids([[("i8", "==", 1000)]]) == []  # beyond int8: matches nothing, no overflow
    assert ids([[("i8", "<", 1000)]]) == list(range(12))
    assert ids([[("i8", "in", [-6, 1000])]]) == [0]
    assert ids([[("p", "==", 1000)]]) == [] and ids([[("p", "==", 2)]]) == [2, 5, 8, 11]
    assert ids([[("p", "in", [1, 300])]]) == [1, 4, 7, 10]
    assert ids([[("i16", "==", 3000)]]) == [3]  # through the index
    assert ids([[("u32", ">", 3_000_000_000)]]) == [11]
    # a float32 column compares as float32 (numpy and pandas do): rows, statistics and index agree
    f32 = df["f32"].to_numpy()
    for value in (0.1, float(np.float32(0.1)), 0.30000001, 1.1):
        for op, fn in (("==", np.equal), ("<=", np.less_equal), (">", np.greater)):
            want = sorted(df["id"][fn(f32, np.float32(value))].tolist())
            assert ids([[("f32", op, value)]]) == want, (op, value)
            assert ids([[("f32", op, value), ("id", ">=", 0)]]) == want, (op, value)
    assert ids([[("f32", "in", [0.1, 0.2])]]) == [1, 2]
    snap = kstore.open_dataset(store_url, "d")
    got = snap.to_pyarrow_dataset(predicates=[[("f32", "==", 0.1)]]).to_table().column("id").to_pylist()
    assert got == [1]


def test_delete_rows_agrees_with_reads_on_float32(store_url):
    df = narrow_frame()
    kstore.store_dataset(store_url, "d", df, partition_on="p")
    predicate = [[("f32", ">", 0.5)]]
    matched = sorted(kstore.read_table(store_url, "d", predicates=predicate).column("id").to_pylist())
    kstore.delete_rows(store_url, "d", predicate)
    left = sorted(kstore.read_table(store_url, "d").column("id").to_pylist())
    assert sorted(set(range(12)) - set(matched)) == left
    assert_types(kstore.read_table(store_url, "d").schema)  # the rewritten files keep their types


def test_statistics_of_narrow_columns(store_url):
    kstore.store_dataset(store_url, "d", narrow_frame(), partition_on="p")
    kstore.update_dataset(store_url, "d", narrow_frame(start=100))
    snap = kstore.open_dataset(store_url, "d")
    plan = snap.plan(predicates=[[("i32", ">=", 100 * 100_000)]])
    assert {lab.split("/")[0] for lab in plan.labels} == {"p=0", "p=1", "p=2"}
    assert len(plan.tasks) == 3  # the first write's files are pruned by their statistics
    assert sorted(kstore.read_table(store_url, "d", predicates=[[("i32", ">=", 100 * 100_000)]])
                  .column("id").to_pylist()) == list(range(100, 112))


def test_datasets_with_a_normalized_schema_read_as_before(store_url, monkeypatch):
    """Datasets older kstore wrote record the normalized schema only: they read as before,
    and appends of narrow data keep it."""
    with monkeypatch.context() as m:
        m.setattr(write_block, "written_schema", normalize_schema)
        kstore.store_dataset(store_url, "d", narrow_frame(), partition_on="p")
    widened = {k: (pa.int64() if pa.types.is_signed_integer(t) else pa.uint64() if pa.types.is_integer(t)
                   else pa.float64()) for k, t in EXPECTED_ARROW.items()}
    assert_types(kstore.read_schema(store_url, "d"), widened)
    assert_types(kstore.read_table(store_url, "d").schema, widened)
    kstore.update_dataset(store_url, "d", narrow_frame(start=12))
    assert_types(kstore.read_table(store_url, "d").schema, widened)
    out = kstore.read_dataset(store_url, "d")
    assert len(out) == 24 and out["n32"].dtype == pd.Int64Dtype()


# -- (b) a named index ---------------------------------------------------------------------


def indexed_frame() -> pd.DataFrame:
    return pd.DataFrame({"name": ["a", "b", "c", "d"], "p": [1, 1, 2, 2], "x": np.array([1, 2, 3, 4], np.int32)})


@pytest.mark.parametrize("partition_on", [None, "p"])
def test_named_index_is_kept(store_url, partition_on):
    df = indexed_frame().set_index("name")
    kstore.store_dataset(store_url, "ix", df, partition_on=partition_on)
    table = kstore.read_table(store_url, "ix")
    assert sorted(table.column("name").to_pylist()) == ["a", "b", "c", "d"]
    out = kstore.read_dataset(store_url, "ix").sort_index()
    pd.testing.assert_frame_equal(out, df[list(out.columns)], check_like=False)
    assert list(out.columns) == ["p", "x"]
    # the Arrow path (a residual predicate) and iter_dataset restore it too
    out = kstore.read_dataset(store_url, "ix", predicates=[[("name", "!=", "b")]]).sort_index()
    assert out.index.tolist() == ["a", "c", "d"] and out.index.name == "name"
    out = pd.concat(kstore.iter_dataset(store_url, "ix")).sort_index()
    assert out.index.tolist() == ["a", "b", "c", "d"]
    # without the index column read, the frame has a RangeIndex
    assert isinstance(kstore.read_dataset(store_url, "ix", columns=["x"]).index, pd.RangeIndex)
    # kartothek's view: a plain column (no index in _common_metadata nor in the files)
    assert json.loads(common_metadata(store_url, "ix").metadata[b"pandas"])["index_columns"] == []


def test_named_multi_index_and_unnamed_levels(store_url):
    df = indexed_frame().set_index(["name", "p"])
    kstore.store_dataset(store_url, "ix", df)
    out = kstore.read_dataset(store_url, "ix").sort_index()
    pd.testing.assert_frame_equal(out, df)
    # an unnamed level is dropped (as kartothek drops the index), a named one kept
    half = indexed_frame().set_index(["name", "p"])
    half.index = half.index.set_names([None, "p"])
    kstore.store_dataset(store_url, "half", half)
    assert kstore.read_table(store_url, "half").column_names == ["x", "p"]
    # the default RangeIndex and an unnamed index stay dropped
    kstore.store_dataset(store_url, "plain", indexed_frame().iloc[1:])
    assert kstore.read_table(store_url, "plain").column_names == ["name", "p", "x"]
    assert isinstance(kstore.read_dataset(store_url, "plain").index, pd.RangeIndex)


def test_named_index_through_the_iterator_writer(store_url):
    df = indexed_frame().set_index("name")
    kstore.store_dataset(store_url, "ix", iter([df.iloc[:2], df.iloc[2:]]), partition_on="p")
    pd.testing.assert_frame_equal(kstore.read_dataset(store_url, "ix").sort_index(), df)


def test_bad_index_names_are_refused(store_url):
    df = indexed_frame()
    with pytest.raises(InvalidArgumentError, match="'name'.*reset_index"):
        kstore.store_dataset(store_url, "ix", df.set_index(pd.Index(["q"] * 4, name="name")))
    bad = df.set_index("name")
    bad.index.name = 7
    with pytest.raises(InvalidArgumentError, match="not strings"):
        kstore.store_dataset(store_url, "ix", bad)


def test_append_with_a_new_named_index_explains(store_url):
    kstore.store_dataset(store_url, "ix", indexed_frame().drop(columns="name"))
    with pytest.raises(SchemaMismatchError, match="named index.*reset_index"):
        kstore.update_dataset(store_url, "ix", indexed_frame().set_index("name"))


@pytest.mark.dask
def test_named_index_through_dask(store_url):
    dd = pytest.importorskip("dask.dataframe")
    import dask

    df = indexed_frame().set_index("name")
    with dask.config.set(scheduler="sync"):
        import kstore.dask as kd

        kd.store_dataset(store_url, "ix", dd.from_pandas(df, npartitions=2), partition_on="p")
        out = kd.read_dataset(store_url, "ix").compute().sort_index()
    # (Dask reads strings, the index's too, with its Arrow string dtype)
    pd.testing.assert_frame_equal(out, df[list(out.columns)], check_index_type=False)
    assert out.index.name == "name"
    pd.testing.assert_frame_equal(kstore.read_dataset(store_url, "ix").sort_index(), df[list(out.columns)])


# -- (c) an overwrite keeps the user metadata ----------------------------------------------


def test_overwrite_keeps_user_metadata(store_url):
    df = pd.DataFrame({"x": [1]})
    kstore.store_dataset(store_url, "d", df, metadata={"owner": "me", "team": "a"})
    first = kstore.load_metadata(store_url, "d").metadata["creation_time"]
    kstore.store_dataset(store_url, "d", df, mode="overwrite")
    meta = kstore.load_metadata(store_url, "d").metadata
    assert meta["owner"] == "me" and meta["team"] == "a"
    assert "creation_time" in meta
    # metadata= merges over the kept keys (keys given replace theirs)
    kstore.store_dataset(store_url, "d", df, mode="overwrite", metadata={"team": "b"})
    meta = kstore.load_metadata(store_url, "d").metadata
    assert (meta["owner"], meta["team"]) == ("me", "b")
    assert isinstance(first, str)


def test_overwrite_in_the_fold_drops_creation_time_and_engine_type_hints():
    base = Create(metadata={"owner": "me", "spark_schema": "{}"}).apply(None, dataset_uuid="d", schema=None,
                                                                         now="t0")
    assert isinstance(base, DatasetMetadata)
    out = Overwrite().apply(base, dataset_uuid="d", schema=None, now="t1")
    assert out is not None
    assert dict(out.metadata) == {"owner": "me", "creation_time": "t1"}
    out = Overwrite(metadata={"spark_schema": "{new}", "k": 1}).apply(base, dataset_uuid="d", schema=None, now="t1")
    assert out is not None
    assert dict(out.metadata) == {"owner": "me", "spark_schema": "{new}", "k": 1, "creation_time": "t1"}
