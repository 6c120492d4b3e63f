"""Schema evolution (#33): type widening with ``schema_mode="merge"`` and
``schema_mode="overwrite"`` on a full overwrite, on every engine.

What is tried to break: a widened column must read back every value written before, exactly,
in every engine and at every version (time travel, checkpoints, planning by statistics);
``int64 -> double`` is allowed only where the statistics show every value exact, and a
concurrent append of a value that is not must make the widening commit fail (nothing
half-written); partition and indexed columns keep their kind of type; a strict overwrite
keeps the schema and partitioning; what plateau reads of a widened dataset is stated here.
"""

from __future__ import annotations

import datetime as dt
import decimal
import functools
import warnings

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kstore
from kstore.blocks.job import WriteRequest, finish_write, prepare_write, write_files
from kstore.core.state import CHECKPOINT_INTERVAL
from kstore.core.types import EXACT_IN_DOUBLE, merge_schemas, widened_type
from kstore.errors import InvalidArgumentError, SchemaMismatchError
from kstore.io.store import open_store

UUID = "evo"


def versions(store) -> int:
    return kstore.load_metadata(store, UUID).version


def data_keys(store) -> set[str]:
    return {k for k in open_store(store).iter_prefix(UUID + "/") if k.endswith(".parquet") and "/_kstore/" not in k
            and "/indices/" not in k}


def sorted_rows(df: pd.DataFrame, by: str = "id") -> list[tuple]:
    df = df.sort_values(by).reset_index(drop=True)
    return [tuple(None if (v is None or v is pd.NaT or (isinstance(v, float) and np.isnan(v))) else v for v in r)
            for r in df[sorted(df.columns)].itertuples(index=False, name=None)]


# ---------------------------------------------------------------------------------------
# the widening rule itself: every value of either side is exact in the widened type
# ---------------------------------------------------------------------------------------

_SIDES = {
    "int8": (pa.int8(), st.integers(-128, 127)),
    "int16": (pa.int16(), st.integers(-(2**15), 2**15 - 1)),
    "int32": (pa.int32(), st.integers(-(2**31), 2**31 - 1)),
    "uint32": (pa.uint32(), st.integers(0, 2**32 - 1)),
    "int64-exact": (pa.int64(), st.integers(-EXACT_IN_DOUBLE, EXACT_IN_DOUBLE)),
    "float32": (pa.float32(), st.floats(width=32, allow_nan=False)),
    "float64": (pa.float64(), st.floats(allow_nan=False)),
    "date": (pa.date32(), st.dates(dt.date(1, 1, 1), dt.date(9999, 12, 31))),
    "timestamp": (pa.timestamp("us"), st.datetimes(dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31))),
    "decimal(10,2)": (pa.decimal128(10, 2), st.decimals(-(10**8) + 1, 10**8 - 1, places=2, allow_nan=False,
                                                         allow_infinity=False)),
    "decimal(6,4)": (pa.decimal128(6, 4), st.decimals(-99, 99, places=4, allow_nan=False, allow_infinity=False)),
}


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(_SIDES)), st.sampled_from(sorted(_SIDES)), st.data())
def test_widened_type_keeps_every_value_of_both_sides(a, b, data):
    (ta, va), (tb, vb) = _SIDES[a], _SIDES[b]
    exact = a == "int64-exact" or b == "int64-exact"
    w = widened_type(ta, tb, exact_int64=exact)
    if w is None:
        return
    for t, values in ((ta, va), (tb, vb)):
        xs = data.draw(st.lists(values, min_size=1, max_size=20))
        arr = pa.array(xs, t)
        wide = arr.cast(w)  # a safe cast: raises where a value would change
        assert wide.cast(t).equals(arr), (t, w, xs)


def test_widening_kinds_and_refusals():
    assert widened_type(pa.int64(), pa.float64()) is None  # rounds above 2**53 unless shown exact
    assert widened_type(pa.date32(), pa.timestamp("us", "UTC")) is None  # Delta: date -> timestamp_ntz only
    assert widened_type(pa.decimal128(38, 0), pa.decimal128(10, 5)) is None  # 43 digits do not fit
    assert widened_type(pa.string(), pa.binary()) is None
    s32, f64 = pa.schema([("x", pa.int32())]), pa.schema([("x", pa.float64())])
    with pytest.raises(SchemaMismatchError, match=r"int32 in the dataset but double .*schema_mode='merge'"):
        merge_schemas(s32, f64, dataset="d")
    with pytest.raises(SchemaMismatchError, match="partition or indexed column"):
        merge_schemas(s32, f64, dataset="d", mode="merge", fixed=["x"])
    assert merge_schemas(s32, f64, dataset="d", mode="merge").field("x").type == pa.float64()


# ---------------------------------------------------------------------------------------
# widening on append, read back by every engine and at every version
# ---------------------------------------------------------------------------------------


def _old() -> pd.DataFrame:
    return pd.DataFrame({
        "id": np.arange(6, dtype=np.int64),
        "p": [0, 0, 1, 1, 2, 2],
        "i32": np.array([-(2**31), 2**31 - 1, 0, 7, -7, 123456789], dtype=np.int32),
        "i16": np.array([1, 2, 3, 4, 5, -(2**15)], dtype=np.int16),
        "big": np.array([EXACT_IN_DOUBLE, -EXACT_IN_DOUBLE, 0, 1, 2, 3], dtype=np.int64),
        "day": [dt.date(1, 1, 1), dt.date(9999, 12, 31), dt.date(2020, 2, 29), None, dt.date(1970, 1, 1),
                dt.date(2000, 1, 1)],
        "dec": [decimal.Decimal("12345678.91"), None, decimal.Decimal("-0.01"), decimal.Decimal("0"),
                decimal.Decimal("1"), decimal.Decimal("99999999.99")],
    })


def _old_table() -> pa.Table:
    df = _old()
    return pa.table({"id": df["id"], "p": df["p"], "i32": df["i32"], "i16": df["i16"], "big": df["big"],
                     "day": pa.array(df["day"], pa.date32()), "dec": pa.array(df["dec"], pa.decimal128(10, 2))})


def _new_table() -> pa.Table:
    return pa.table({
        "id": pa.array([6, 7], pa.int64()), "p": pa.array([0, 3], pa.int64()),
        "i32": pa.array([0.5, None], pa.float64()), "i16": pa.array([1.25, -2.5], pa.float64()),
        "big": pa.array([0.5, float(2**60)], pa.float64()),
        "day": pa.array([dt.datetime(2021, 1, 1, 10, 30, 0, 1), None], pa.timestamp("us")),
        "dec": pa.array([decimal.Decimal("1.2345"), decimal.Decimal("-99.9999")], pa.decimal128(6, 4)),
    })


def _expected() -> pd.DataFrame:
    """The oracle: the written values, each converted by pyarrow's safe cast to the widened type."""
    wide = pa.schema([("id", pa.int64()), ("p", pa.int64()), ("i32", pa.float64()), ("i16", pa.float64()),
                      ("big", pa.float64()), ("day", pa.timestamp("us")), ("dec", pa.decimal128(12, 4))])
    both = pa.concat_tables([_old_table().cast(wide), _new_table().cast(wide)])
    return both.to_pandas()


def _widen(url: str) -> tuple[str, int]:
    """The dataset of :func:`_old_table`, then :func:`_new_table` appended with
    ``schema_mode="merge"``; returns the store and the version before the widening."""
    kstore.store_dataset(url, UUID, _old_table(), partition_on="p", secondary_indices=["id"])
    before = versions(url)
    kstore.update_dataset(url, UUID, _new_table(), schema_mode="merge")
    return url, before


@pytest.fixture
def widened(store_url):
    return _widen(store_url)


def test_append_widens_and_every_value_reads_back(widened):
    store, before = widened
    schema = kstore.read_schema(store, UUID)
    assert {f.name: f.type for f in schema} == {
        "id": pa.int64(), "p": pa.int64(), "i32": pa.float64(), "i16": pa.float64(), "big": pa.float64(),
        "day": pa.timestamp("us"), "dec": pa.decimal128(12, 4)}
    got = kstore.read_table(store, UUID).to_pandas()
    assert sorted_rows(got) == sorted_rows(_expected())
    # the version before reads as it was written (types and values)
    old = kstore.read_table(store, UUID, version=before)
    assert old.schema.field("i32").type == pa.int32() and old.schema.field("day").type == pa.date32()
    assert sorted_rows(old.to_pandas()) == sorted_rows(_old_table().to_pandas())


@pytest.mark.parametrize("predicate", [
    [("i32", ">", 7.5)], [("i32", "==", 7.0)], [("big", ">=", float(EXACT_IN_DOUBLE))], [("big", "<", 0.0)],
    [("day", "<", pd.Timestamp("1970-01-01 00:00:01"))], [("day", ">", pd.Timestamp("2020-02-29"))],
    [("dec", "<", decimal.Decimal("0"))], [("i16", "in", [1.25, 5.0, -32768.0])],
])
def test_predicates_on_a_widened_column_are_exact(widened, predicate):
    """Planning prunes by statistics that were int / date before: converted, never wrong."""
    store, _ = widened
    exp = _expected()
    col, op, value = predicate[0]
    s = exp[col]
    mask = s.isin(value) if op == "in" else {"<": s.lt, ">": s.gt, ">=": s.ge, "==": s.eq}[op](value)
    want = exp[mask.fillna(False).astype(bool)]
    got = kstore.read_table(store, UUID, predicates=[predicate]).to_pandas()
    assert sorted_rows(got) == sorted_rows(want)


def test_widened_dataset_reads_in_dask(widened):
    import kstore.dask as kd

    store, _ = widened
    got = kd.read_dataset(store, UUID).compute()
    exp = _expected()
    assert sorted(got["i32"].dropna().tolist()) == sorted(exp["i32"].dropna().tolist())
    assert sorted(got["day"].dropna().tolist()) == sorted(exp["day"].dropna().tolist())
    assert len(got) == len(exp)


def test_widened_dataset_reads_in_spark(spark, tmp_path):
    store, _ = _widen(str(tmp_path))  # (Spark's workers reach a directory, not this process's memory)
    rows = spark.read.format("kstore").option("dataset_uuid", UUID).load(store).collect()
    got = sorted((r.id, r.i32, r.big, r.dec) for r in rows)
    exp = _expected()
    want = sorted((int(i), None if pd.isna(a) else a, b, d) for i, a, b, d in
                  zip(exp["id"], exp["i32"], exp["big"], exp["dec"]))
    assert got == want


def test_row_operations_after_widening(widened):
    """update_rows / delete_rows / merge rewrite files written before the widening."""
    store, _ = widened
    kstore.update_rows(store, UUID, [[("id", "==", 1)]], set={"i32": 0.25})
    kstore.delete_rows(store, UUID, [[("id", "==", 2)]])
    kstore.merge(store, UUID, pd.DataFrame({"id": [3], "p": [1], "i32": [3.5], "i16": [1.0], "big": [1.0],
                                            "day": [pd.Timestamp("2001-01-01")],
                                            "dec": [decimal.Decimal("1.5")]}), on="id")
    exp = _expected().set_index("id")
    exp.loc[1, "i32"] = 0.25
    exp = exp.drop(index=2)
    exp.loc[3, ["i32", "i16", "big", "day", "dec"]] = [3.5, 1.0, 1.0, pd.Timestamp("2001-01-01"),
                                                         decimal.Decimal("1.5")]
    got = kstore.read_table(store, UUID).to_pandas()
    assert sorted_rows(got) == sorted_rows(exp.reset_index())
    # compaction merges files of both types into files of the widened one: no row changes
    v = versions(store)
    kstore.compact(store, UUID)
    assert versions(store) == v + 1
    assert sorted_rows(kstore.read_table(store, UUID).to_pandas()) == sorted_rows(exp.reset_index())
    assert len(kstore.read_changes(store, UUID, v + 1)) == 0


def test_change_feed_across_the_widening(widened):
    """Changes of versions before and after the widening: one table in the newest types (the
    older rows converted exactly), a column the schema gained null before it, the change
    columns last."""
    store, before = widened
    changes = kstore.read_changes(store, UUID, before + 1, as_arrow=True)
    assert changes.column("_change_type").to_pylist() == ["insert", "insert"]
    assert sorted(changes.column("id").to_pylist()) == [6, 7]
    kstore.update_dataset(store, UUID, _new_table().append_column("extra", pa.array(["a", "b"])).set_column(
        0, "id", pa.array([8, 9], pa.int64())), schema_mode="merge")
    every = kstore.read_changes(store, UUID, 0, as_arrow=True)
    assert every.column_names[-4:] == ["extra", "_change_type", "_commit_version", "_commit_timestamp"]
    assert every.schema.field("i32").type == pa.float64() and every.schema.field("day").type == pa.timestamp("us")
    rows = every.drop_columns(["extra", "_change_type", "_commit_version", "_commit_timestamp"]).to_pandas()
    want = pd.concat([_expected(), _expected().iloc[6:].assign(id=[8, 9])])
    assert sorted_rows(rows) == sorted_rows(want)
    assert every.column("extra").to_pylist() == [None] * 8 + ["a", "b"]


def test_widening_across_a_checkpoint(store_url):
    """Commits before and after a widening, past a checkpoint: replay and checkpoint agree."""
    df = pd.DataFrame({"id": [0], "x": np.array([0], dtype=np.int32)})
    kstore.store_dataset(store_url, UUID, df)
    for i in range(1, CHECKPOINT_INTERVAL // 2):
        kstore.update_dataset(store_url, UUID, pd.DataFrame({"id": [i], "x": np.array([i], dtype=np.int32)}))
    kstore.update_dataset(store_url, UUID, pd.DataFrame({"id": [1000], "x": [0.5]}), schema_mode="merge")
    n = CHECKPOINT_INTERVAL // 2
    for i in range(n, CHECKPOINT_INTERVAL + 3):
        kstore.update_dataset(store_url, UUID, pd.DataFrame({"id": [i], "x": [i + 0.5]}))
    want = sorted([(i, float(i)) for i in range(n)] + [(1000, 0.5)]
                  + [(i, i + 0.5) for i in range(n, CHECKPOINT_INTERVAL + 3)])
    got = kstore.read_dataset(store_url, UUID)
    assert sorted(zip(got["id"].tolist(), got["x"].tolist())) == want
    hits = kstore.read_dataset(store_url, UUID, predicates=[[("x", ">", 1.2), ("x", "<", 3.0)]])
    assert sorted(hits["x"].tolist()) == [2.0]


# ---------------------------------------------------------------------------------------
# int64 -> double: only where every value is shown exact
# ---------------------------------------------------------------------------------------


def test_int64_to_double_refused_when_a_value_rounds(store_url):
    kstore.store_dataset(store_url, UUID, pd.DataFrame({"id": [1, 2], "k": [1, EXACT_IN_DOUBLE + 1]}))
    v, keys = versions(store_url), data_keys(store_url)
    with pytest.raises(SchemaMismatchError, match=r"'k' is int64 in the dataset but double.*2\*\*53"):
        kstore.update_dataset(store_url, UUID, pd.DataFrame({"id": [3], "k": [np.nan]}), schema_mode="merge")
    assert versions(store_url) == v and data_keys(store_url) == keys  # nothing half-written


def test_int64_into_a_double_column_checked_at_the_commit_dask(store_url):
    """Dask's pre-check sees no values: the commit checks the written files' statistics."""
    import dask.dataframe as dd

    import kstore.dask as kd

    kstore.store_dataset(store_url, UUID, pd.DataFrame({"id": [1], "k": [0.5]}))
    v, keys = versions(store_url), data_keys(store_url)
    bad = dd.from_pandas(pd.DataFrame({"id": [2, 3], "k": [1, EXACT_IN_DOUBLE + 1]}), npartitions=2)
    with pytest.raises(SchemaMismatchError, match=r"2\*\*53"):
        kd.update_dataset(store_url, UUID, bad, schema_mode="merge")
    assert versions(store_url) == v and data_keys(store_url) == keys
    good = dd.from_pandas(pd.DataFrame({"id": [2, 3], "k": [1, -EXACT_IN_DOUBLE]}), npartitions=2)
    kd.update_dataset(store_url, UUID, good, schema_mode="merge")
    got = kstore.read_dataset(store_url, UUID)
    assert sorted(zip(got["id"], got["k"])) == [(1, 0.5), (2, 1.0), (3, float(-EXACT_IN_DOUBLE))]


def test_concurrent_append_of_a_rounding_value_fails_the_widening(store_url):
    """Writer A widens k (int64 -> double) after checking the stats of version v; writer B
    appends 2**60 first: A's commit checks again against B's version and fails, its files
    gone; the dataset holds B's value exactly."""
    st_ = open_store(store_url)
    kstore.store_dataset(store_url, UUID, pd.DataFrame({"id": [1], "k": [5]}))
    job = prepare_write(st_, UUID, WriteRequest.of(UUID, "append", schema_mode="merge"))
    files, schema = write_files(job, pd.DataFrame({"id": [2], "k": [0.5]}))
    kstore.update_dataset(store_url, UUID, pd.DataFrame({"id": [3], "k": [2**60]}))
    v, keys = versions(store_url), data_keys(store_url)
    assert {f.key for f in files} <= keys
    with pytest.raises(SchemaMismatchError, match=r"2\*\*53"):
        finish_write(job, files, schema)
    assert versions(store_url) == v and data_keys(store_url) == keys - {f.key for f in files}
    got = kstore.read_table(store_url, UUID)
    assert got.schema.field("k").type == pa.int64() and sorted(got.column("k").to_pylist()) == [5, 2**60]


def test_partition_and_indexed_columns_keep_their_kind(store_url):
    kstore.store_dataset(store_url, UUID, pd.DataFrame({"p": np.array([1], np.int32), "x": np.array([1], np.int32),
                                                        "y": [1]}), partition_on="p", secondary_indices="x")
    for df in (pd.DataFrame({"p": [1.5], "x": np.array([2], np.int32), "y": [2]}),
               pd.DataFrame({"p": np.array([2], np.int32), "x": [2.5], "y": [2]})):
        with pytest.raises(SchemaMismatchError, match="partition or indexed column"):
            kstore.update_dataset(store_url, UUID, df, schema_mode="merge")
    assert kstore.read_dataset(store_url, UUID)["y"].tolist() == [1]


def test_plateau_reads_a_widened_dataset_without_predicates_on_it(tmp_path):
    """What a kartothek-format reader sees after a widening: every row, each file's values in
    that file's type (pandas makes the column float64, dates and timestamps object); a
    predicate on the widened column fails in plateau, which types it per file (stated in
    docs/guides/schema.md)."""
    plateau_api = pytest.importorskip("plateau.api.dataset")
    import minimalkv

    store = str(tmp_path)
    kstore.store_dataset(store, UUID, pd.DataFrame({"id": [1, 2], "a": np.array([1, 2], np.int32)}))
    kstore.update_dataset(store, UUID, pd.DataFrame({"id": [3], "a": [1.5]}), schema_mode="merge")
    factory = functools.partial(minimalkv.get_store_from_url, "hfs://" + store)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        df = plateau_api.read_table(UUID, store=factory)
        assert sorted(zip(df["id"], df["a"])) == [(1, 1.0), (2, 2.0), (3, 1.5)]
        by_id = plateau_api.read_table(UUID, store=factory, predicates=[[("id", ">", 1)]])
        assert sorted(by_id["a"]) == [1.5, 2.0]
        with pytest.raises(TypeError, match="predicate value"):
            plateau_api.read_table(UUID, store=factory, predicates=[[("a", ">", 1.2)]])


# ---------------------------------------------------------------------------------------
# schema_mode on a full overwrite
# ---------------------------------------------------------------------------------------


def test_overwrite_keeps_the_schema_unless_schema_mode_overwrite(store_url):
    kstore.store_dataset(store_url, UUID, pd.DataFrame({"p": [1, 2], "a": [1, 2]}), partition_on="p")
    v, keys = versions(store_url), data_keys(store_url)
    for df, kwargs, match in [
        (pd.DataFrame({"p": [1], "b": ["x"]}), {}, "lacks column"),
        (pd.DataFrame({"p": [1], "a": [1], "b": ["x"]}), {}, "schema_mode='merge' to add"),
        (pd.DataFrame({"p": [1], "a": ["x"]}), {"schema_mode": "merge"}, "'a' is int64 in the dataset but string"),
        (pd.DataFrame({"q": [1], "a": [1]}), {"partition_on": "q"}, "changes its partitioning"),
    ]:
        with pytest.raises(SchemaMismatchError, match=match):
            kstore.store_dataset(store_url, UUID, df, mode="overwrite", **kwargs)
    assert versions(store_url) == v and data_keys(store_url) == keys
    # no partition_on: the dataset's partitioning is kept (Delta's rule)
    kstore.store_dataset(store_url, UUID, pd.DataFrame({"p": [3], "a": [3]}), mode="overwrite")
    assert kstore.load_metadata(store_url, UUID).partition_keys == ("p",)
    # merge: a new column and a widening (no old file stays: int64 -> double needs no proof)
    kstore.store_dataset(store_url, UUID, pd.DataFrame({"p": [4], "a": [2.5], "c": ["z"]}), mode="overwrite",
                         schema_mode="merge")
    assert kstore.read_dataset(store_url, UUID).to_dict("list") == {"p": [4], "a": [2.5], "c": ["z"]}
    # overwrite: anything goes, partitioning included
    kstore.store_dataset(store_url, UUID, pd.DataFrame({"q": ["a"], "b": [True]}), mode="overwrite",
                         partition_on="q", schema_mode="overwrite")
    m = kstore.load_metadata(store_url, UUID)
    assert m.partition_keys == ("q",) and kstore.read_schema(store_url, UUID).names == ["q", "b"]
    with pytest.raises(InvalidArgumentError, match="schema_mode='overwrite' .* needs mode='overwrite'"):
        kstore.update_dataset(store_url, UUID, pd.DataFrame({"q": ["a"], "b": [True]}), schema_mode="overwrite")


def test_spark_overwrite_schema_option(spark, tmp_path):
    store_url = str(tmp_path)
    kstore.store_dataset(store_url, UUID, pd.DataFrame({"id": [1], "a": [1]}))
    other = spark.createDataFrame([(2, "x")], "id long, b string")
    w = other.write.format("kstore").option("dataset_uuid", UUID)
    with pytest.raises(Exception, match=SchemaMismatchError.__name__):
        w.mode("overwrite").save(store_url)
    with pytest.raises(Exception, match="overwriteSchema='true' and schema_mode='merge' disagree"):
        w.option("overwriteSchema", "true").option("schema_mode", "merge").mode("overwrite").save(store_url)
    other.write.format("kstore").option("dataset_uuid", UUID).option("overwriteSchema", "true") \
        .mode("overwrite").save(store_url)
    assert kstore.read_dataset(store_url, UUID).to_dict("list") == {"id": [2], "b": ["x"]}
