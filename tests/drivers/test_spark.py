"""The Spark driver (``kstore.spark``) on a real local Spark session (``local[2,2]``, Java 17).

One session per pytest worker (``spark`` in tests/conftest.py; starting Spark takes ~20 s):
2 cores, up to 2 attempts per task (so retries can be tested), UTC session time zone (one
test switches to Europe/Berlin). Stores are local directories (executors are separate Python processes, so
memory stores cannot be shared with them). Test-local classes (a store that logs every
``open`` to a file, failure injectors) reach the executors by value through cloudpickle.

What is checked:

* round trips of every supported type, exact Spark types back, through ``store_dataset``
  and ``df.write.format("kstore")``, and the same values through pandas, Dask and plateau;
* modes (error / append / overwrite / overwrite_partitions), ``update_dataset`` with
  ``delete_scope``, idempotent ``txn``, time travel (``version`` / ``as_of``);
* planning: with ``predicates`` the files opened (logged by the store) are exactly the
  planned ones; ``.filter`` results are exact however Spark reuses a DataFrame's read plan
  (unions, self-joins, repeated actions); decimal(38, s) literals; unknown options refused;
* failures: unsupported types fail before any file is written; a task failure mid-write
  leaves the dataset unchanged (and GC removes what the other tasks wrote); a retried
  task's first attempt leaves nothing in the committed version.
"""

from __future__ import annotations

import datetime as dt
import io
import os
import re
import sys
import time
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import numpy as np
import pandas as pd
import pandas.testing as pdt
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import kstore
from kstore.errors import (
    ColumnNotFoundError,
    DatasetExistsError,
    DatasetNotFoundError,
    InvalidArgumentError,
    SchemaMismatchError,
    UnsupportedTypeError,
)
from kstore.io.local import LocalStore

pyspark = pytest.importorskip("pyspark")

from pyspark import cloudpickle  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from pyspark.sql import types as T  # noqa: E402

import kstore.spark as ks  # noqa: E402

pytestmark = [
    pytest.mark.spark,
    pytest.mark.xdist_group("spark"),
    pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::DeprecationWarning", "ignore::UserWarning"),
]

# classes and functions defined here run on executors: ship them by value
cloudpickle.register_pickle_by_value(sys.modules[__name__])


# ---------------------------------------------------------------------------------------
# fixtures (``spark``, the worker's session, comes from tests/conftest.py)
# ---------------------------------------------------------------------------------------


@pytest.fixture
def store(tmp_path) -> str:
    root = tmp_path / "store"
    root.mkdir()
    return str(root)


@pytest.fixture
def berlin(spark):
    spark.conf.set("spark.sql.session.timeZone", "Europe/Berlin")
    yield
    spark.conf.set("spark.sql.session.timeZone", "UTC")


class _LoggingStore(LocalStore):
    """A local store that appends ``open`` calls and data-file ``put``/``delete`` calls to a
    log file (executors are separate processes, so the log is a file)."""

    def __init__(self, root: str, log: str) -> None:
        super().__init__(root)
        self.url = None  # not a URL: executors must get this object, not a plain LocalStore
        self.log = log

    def __reduce__(self):
        return (_LoggingStore, (self.root, self.log))

    def _note(self, op: str, key: str) -> None:
        with open(self.log, "a") as fh:
            fh.write(f"{op} {key}\n")

    def open(self, key: str):
        self._note("open", key)
        return super().open(key)

    def put(self, key: str, data: bytes) -> None:
        if "/table/" in key:
            self._note("put", key)
        super().put(key, data)

    def delete(self, key: str) -> None:
        if "/table/" in key:
            self._note("delete", key)
        super().delete(key)


class OpenLog:
    """A picklable store factory whose stores log calls; ``keys(op)`` reads the log."""

    def __init__(self, root: str, log: str) -> None:
        self.root, self.log = root, log

    def __call__(self) -> _LoggingStore:
        return _LoggingStore(self.root, self.log)

    def reset(self) -> None:
        Path(self.log).write_text("")

    def keys(self, op: str = "open") -> list[str]:
        if not Path(self.log).exists():
            return []
        lines = [line.split(" ", 1) for line in Path(self.log).read_text().splitlines() if line]
        return [k for o, k in lines if o == op]


def data_keys(root: str, uuid: str) -> set[str]:
    st = kstore.open_store(root)
    return {k for k in st.iter_prefix(uuid + "/") if k.endswith(".parquet")
            and "/indices/" not in k and "/_kstore/" not in k}


def referenced_data_keys(root: str, uuid: str) -> set[str]:
    meta = kstore.load_metadata(root, uuid)
    return {files[meta.table] for files in meta.partitions.values()}


# ---------------------------------------------------------------------------------------
# every type
# ---------------------------------------------------------------------------------------

ALL_TYPES = T.StructType(
    [
        T.StructField("id", T.LongType()),
        T.StructField("p", T.StringType()),
        T.StructField("b", T.ByteType()),
        T.StructField("s", T.ShortType()),
        T.StructField("i", T.IntegerType()),
        T.StructField("f", T.FloatType()),
        T.StructField("d", T.DoubleType()),
        T.StructField("dec", T.DecimalType(10, 2)),
        T.StructField("dec38", T.DecimalType(38, 10)),
        T.StructField("str", T.StringType()),
        T.StructField("bin", T.BinaryType()),
        T.StructField("bo", T.BooleanType()),
        T.StructField("da", T.DateType()),
        T.StructField("ts", T.TimestampType()),
        T.StructField("ntz", T.TimestampNTZType()),
        T.StructField("arr", T.ArrayType(T.IntegerType())),
        T.StructField("arrs", T.ArrayType(T.StringType())),
        T.StructField("st", T.StructType([T.StructField("x", T.IntegerType()), T.StructField("y", T.StringType())])),
        T.StructField("nul", T.NullType()),
    ]
)
UTC = dt.timezone.utc


def all_types_rows(n: int = 12) -> list[tuple]:
    rows = []
    for k in range(n):
        null = k % 4 == 3
        rows.append((
            k,
            ["a", "b/c", "ü %"][k % 3],  # partition values that need quoting
            None if null else k - 6,
            None if null else 1000 * k - 30000,
            None if null else 2**31 - 1 - k,
            None if null else k / 4,
            None if null else (float("inf") if k == 5 else k * 1.5),
            None if null else Decimal(f"{k}.{k:02d}"),
            None if null else Decimal("123456789012345678901234567.0123456789") - k,
            None if null else ("" if k == 0 else f"s{k} ✓"),
            None if null else bytes([k, 0, 255]),
            None if null else k % 2 == 0,
            None if null else dt.date(1999, 12, 31) + timedelta(days=k * 40),
            None if null else dt.datetime(2024, 10, 27, 0, 30, 0, 123456, tzinfo=UTC) + timedelta(hours=k),
            None if null else dt.datetime(1969, 7, 20, 20, 17, 40, 1) + timedelta(days=k),
            None if null else [k, None, -k],
            None if null else ([] if k == 0 else ["x", None]),
            None if null else (k, f"y{k}"),
            None,
        ))
    return rows


def assert_rows_equal(actual, expected) -> None:
    a = sorted((r.asDict(recursive=True) for r in actual), key=lambda r: r["id"])
    e = sorted((r.asDict(recursive=True) for r in expected), key=lambda r: r["id"])
    assert a == e


def test_every_type_round_trips_exactly(spark, store):
    df = spark.createDataFrame(all_types_rows(), ALL_TYPES)
    meta = ks.store_dataset(store, "types", df, partition_on=["p"], secondary_indices=["i", "str", "da", "ts"])
    assert meta.version == 0 and meta.partition_keys == ("p",)
    back = spark.read.format("kstore").option("dataset_uuid", "types").load(store)
    # exact Spark types (partition column first, as kstore orders columns)
    assert back.schema["i"].dataType == T.IntegerType() and back.schema["b"].dataType == T.ByteType()
    assert {f.name: f.dataType for f in back.schema.fields} == {f.name: f.dataType for f in ALL_TYPES.fields}
    assert_rows_equal(back.collect(), df.collect())
    # pushed filters on every type give what Spark's own filtering of the source gives
    for cond in ["b = -3", "s <= -20000", "i IN (2147483647, 2147483640)", "f <= 1.0", "d > 3", "d = 'Infinity'",
                 "dec >= 5", "dec38 < 123456789012345678901234567", "str = ''", "str > 's5'", "bin = X'0500FF'",
                 "bo", "NOT bo", "da BETWEEN DATE'2000-03-01' AND DATE'2000-06-30'",
                 "ts > timestamp'2024-10-27 04:00:00+00:00'", "ntz <= timestamp_ntz'1969-07-22 20:17:40'",
                 "p = 'ü %' AND i IS NOT NULL", "arr IS NULL", "st IS NOT NULL", "p IN ('a', 'b/c') AND str <> ''"]:
        got = sorted(r.id for r in back.filter(cond).collect())
        assert got == sorted(r.id for r in df.filter(cond).collect()), cond
    # the dataset schema keeps the written types (what kstore's readers return) ...
    schema = kstore.read_schema(store, "types")
    assert schema.field("i").type == pa.int32() and schema.field("f").type == pa.float32()
    assert schema.field("ts").type == pa.timestamp("us", "UTC") and schema.field("ntz").type == pa.timestamp("us")
    assert schema.field("dec38").type == pa.decimal128(38, 10)
    # ... and _common_metadata the normalized ones (what kartothek readers see)
    meta = kstore.load_metadata(store, "types")
    common = pq.read_schema(io.BytesIO(kstore.open_store(store).get(f"types/{meta.table}/_common_metadata")))
    assert common.field("i").type == pa.int64() and common.field("f").type == pa.float64()


def test_every_type_reads_the_same_in_pandas(spark, store):
    rows = all_types_rows()
    df = spark.createDataFrame(rows, ALL_TYPES)
    ks.store_dataset(store, "types", df, partition_on=["p"])
    got = kstore.read_dataset(store, "types", dates_as_object=True).sort_values("id").reset_index(drop=True)
    assert got["id"].tolist() == list(range(len(rows)))
    for col_pos, field in enumerate(ALL_TYPES.fields):
        name = field.name
        expected = [r[col_pos] for r in rows]
        values = got[name].tolist()
        for v, e in zip(values, expected):
            if e is None:
                assert v is None or pd.isna(v) if not isinstance(v, (list, np.ndarray)) else False, (name, v)
            elif name == "ts":
                assert pd.Timestamp(v) == pd.Timestamp(e), (name, v, e)
            elif name == "ntz":
                assert pd.Timestamp(v) == pd.Timestamp(e), (name, v, e)
            elif name in ("arr", "arrs"):
                assert [None if (x is None or (isinstance(x, float) and np.isnan(x))) else x for x in list(v)] == e
            elif name == "st":
                assert v == {"x": e[0], "y": e[1]}
            elif name == "nul":
                assert v is None
            else:
                assert v == e, (name, v, e)


def test_partition_columns_of_every_partitionable_type(spark, store):
    rows = [(k, k % 2 == 0, k % 3 - 1, k / 2, dt.date(2024, 1, 1 + k % 2),
             dt.datetime(2024, 1, 1, k % 2, 30, tzinfo=UTC), bytes([65 + k % 2]), f"v{k}") for k in range(8)]
    df = spark.createDataFrame(rows, "id long, bo boolean, i int, f double, da date, ts timestamp, bin binary, v string")
    ks.store_dataset(store, "parts", df, partition_on=["bo", "i", "f", "da", "ts", "bin"])
    back = ks.read_dataset(store, "parts", spark=spark)
    assert {f.name: f.dataType for f in back.schema.fields} == {f.name: f.dataType for f in df.schema.fields}
    assert_rows_equal(back.collect(), df.collect())
    assert sorted(r.id for r in back.filter("da = DATE'2024-01-02' AND NOT bo").collect()) == [1, 3, 5, 7]
    assert sorted(r.id for r in back.filter("ts = timestamp'2024-01-01 01:30:00+00:00'").collect()) == [1, 3, 5, 7]
    assert sorted(r.id for r in back.filter("i IN (-1, 1) AND f > 1.0").collect()) == [3, 5, 6]


def test_datasource_write_round_trips(spark, store):
    df = spark.createDataFrame(all_types_rows(), ALL_TYPES)
    (df.write.format("kstore").option("dataset_uuid", "types").option("partition_on", "p")
       .option("secondary_indices", "i,str").mode("overwrite").save(store))
    meta = kstore.load_metadata(store, "types")
    assert meta.partition_keys == ("p",) and set(meta.indices) == {"i", "str"}
    back = ks.read_dataset(store, "types", spark=spark)
    assert_rows_equal(back.collect(), df.collect())


def test_write_options_reach_the_files(spark, store):
    import io

    import pyarrow.parquet as pq

    rows = [(k % 3, (k * 7919) % 100, float(k)) for k in range(600)]
    df = spark.createDataFrame(rows, "p long, location long, x double")
    (df.write.format("kstore").option("dataset_uuid", "opts").option("partition_on", "p")
       .option("compression", "zstd").option("row_group_size", "50").option("sort_by", "location")
       .option("write_page_index", "true").mode("overwrite").save(store))
    ks.store_dataset(store, "opts2", df, partition_on=["p"], write_options={"compression": "gzip"},
                     sort_by=["location"], mode="overwrite")
    for uuid, codec in (("opts", "ZSTD"), ("opts2", "GZIP")):
        meta = kstore.load_metadata(store, uuid)
        st = kstore.open_store(store)
        for files in meta.partitions.values():
            pf = pq.ParquetFile(io.BytesIO(st.get(files[meta.table])))
            assert pf.metadata.row_group(0).column(0).compression == codec
            loc = pf.read(columns=["location"]).column("location").to_pylist()
            assert loc == sorted(loc)
            if uuid == "opts":
                assert all(pf.metadata.row_group(i).num_rows <= 50 for i in range(pf.metadata.num_row_groups))
                assert pf.metadata.row_group(0).column(0).has_column_index
        assert sorted(ks.read_dataset(store, uuid, spark=spark).collect()) == sorted(df.collect())
    with pytest.raises(Exception, match="compression"):
        (df.write.format("kstore").option("dataset_uuid", "opts3").option("compression", "zip")
           .mode("overwrite").save(store))
    with pytest.raises(InvalidArgumentError, match="row_group_size"):
        ks.store_dataset(store, "opts4", df, write_options={"row_group_size": -1})
    assert not any(k.startswith(("opts3", "opts4")) for k in kstore.open_store(store).iter_prefix(""))


def test_compact_on_executors_commits_once(spark, store):
    import pandas as pd

    frames = [pd.DataFrame({"p": [k % 2, (k + 1) % 2], "id": [2 * k, 2 * k + 1], "x": [k % 5, k % 7]})
              for k in range(30)]
    kstore.store_dataset(store, "cmp", iter(frames), partition_on="p", secondary_indices=["x"])
    version = kstore.load_metadata(store, "cmp").version
    plan = ks.compact(spark, store, "cmp", dry_run=True)
    assert (plan.files_in, plan.files_out, plan.committed) == (60, 2, None)
    assert kstore.load_metadata(store, "cmp").version == version
    done = ks.compact(spark, store, "cmp")
    assert (done.files_in, done.files_out, done.committed) == (60, 2, version + 1)
    meta = kstore.load_metadata(store, "cmp")
    assert len(meta.partitions) == 2
    back = kstore.read_dataset(store, "cmp").sort_values("id")
    assert back["id"].tolist() == list(range(60))
    assert sorted(kstore.read_dataset(store, "cmp", predicates=[[("x", "==", 3)]])["id"]) == sorted(
        i for f in frames for i, x in zip(f["id"], f["x"]) if x == 3)


def test_timestamps_keep_their_instants_in_another_session_zone(spark, store, berlin):
    instants = [dt.datetime(2024, 10, 27, 0, 30, tzinfo=UTC) + timedelta(minutes=30 * k) for k in range(8)]
    df = spark.createDataFrame([(k, ts, ts.replace(tzinfo=None)) for k, ts in enumerate(instants)],
                               "id long, ts timestamp, ntz timestamp_ntz")
    ks.store_dataset(store, "tz", df, secondary_indices=["ts"])
    pdf = kstore.read_dataset(store, "tz").sort_values("id")
    assert list(pdf["ts"]) == [pd.Timestamp(t) for t in instants]  # UTC instants
    assert str(pdf["ts"].dtype) == "datetime64[us, UTC]"
    assert list(pdf["ntz"]) == [pd.Timestamp(t.replace(tzinfo=None)) for t in instants]
    back = ks.read_dataset(store, "tz", spark=spark)
    assert_rows_equal(back.collect(), df.collect())
    # pushed literals: a Berlin wall time (04:00 CET = 03:00 UTC), an explicit offset, a range
    hit = back.filter(F.col("ts") == F.lit("2024-10-27 04:00:00").cast("timestamp")).collect()
    assert [r.id for r in hit] == [5]
    hit = back.filter("ts = timestamp'2024-10-27 01:30:00+00:00'").collect()
    assert [r.id for r in hit] == [2]
    later = back.filter("ts >= timestamp'2024-10-27 02:00:00+00:00'")
    assert sorted(r.id for r in later.collect()) == [k for k, t in enumerate(instants)
                                                    if t >= dt.datetime(2024, 10, 27, 2, tzinfo=UTC)]
    assert [r.id for r in back.filter("ntz = timestamp_ntz'2024-10-27 01:30:00'").collect()] == [2]


def extremes_frame(spark):
    lo, hi = dt.datetime(1, 1, 1, tzinfo=UTC), dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
    rows = [(0, hi, hi.replace(tzinfo=None), dt.date(9999, 12, 31), "open"),
            (1, lo, lo.replace(tzinfo=None), dt.date(1, 1, 1), "first"),
            (2, dt.datetime(1677, 9, 21, tzinfo=UTC), dt.datetime(2262, 4, 12), dt.date(1970, 1, 1), "ns-edge"),
            (3, None, None, None, "open")]
    return spark.createDataFrame(rows, "id long, valid_to timestamp, ntz timestamp_ntz, d date, kind string")


@pytest.mark.parametrize("how", ["store_dataset", "datasource"])
def test_timestamps_and_dates_at_the_extremes(spark, store, how):
    """``valid_to = 9999-12-31 23:59:59.999999`` and year 1: written from Spark (statistics
    included), read back exactly in Spark (pushed and not) and in pandas."""
    df = extremes_frame(spark)
    if how == "store_dataset":
        ks.store_dataset(store, "ext", df, partition_on=["kind"], secondary_indices=["valid_to"])
    else:
        (df.write.format("kstore").option("dataset_uuid", "ext").option("partition_on", "kind")
           .option("secondary_indices", "valid_to").mode("overwrite").save(store))
    back = ks.read_dataset(store, "ext", spark=spark)

    def canon(d):  # PySpark cannot collect year-1 TimestampType values (local-time conversion)
        return d.selectExpr("id", "unix_micros(valid_to) AS valid_to", "ntz", "d", "kind").collect()

    assert_rows_equal(canon(back), canon(df))
    for cond in ["valid_to = timestamp'9999-12-31 23:59:59.999999+00:00'", "valid_to < timestamp'1677-09-21 00:00:00+00:00'",
                 "ntz > timestamp_ntz'2262-04-11 00:00:00'", "d = DATE'0001-01-01'", "d > DATE'2262-04-11'"]:
        got = sorted(r.id for r in back.filter(cond).select("id").collect())
        assert got == sorted(r.id for r in df.filter(cond).select("id").collect()), cond
    pushed = ks.read_dataset(store, "ext", predicates=[[("valid_to", ">", dt.datetime(2262, 4, 12, tzinfo=UTC))]], spark=spark)
    assert [r.id for r in pushed.select("id").collect()] == [0]
    pdf = kstore.read_dataset(store, "ext").sort_values("id")
    assert pdf["valid_to"].tolist()[:3] == [pd.Timestamp("9999-12-31 23:59:59.999999", tz="UTC"),
                                            pd.Timestamp("0001-01-01", tz="UTC"), pd.Timestamp("1677-09-21", tz="UTC")]
    assert pdf["ntz"].tolist()[:2] == [pd.Timestamp("9999-12-31 23:59:59.999999"), pd.Timestamp("0001-01-01")]
    assert pdf["d"].tolist()[:2] == [pd.Timestamp("9999-12-31"), pd.Timestamp("0001-01-01")]


# ---------------------------------------------------------------------------------------
# types that cannot be stored: a clear error before any file is written
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ddl, column, spark_type",
    [
        ("id long, m map<string,int>", "m", "map<string,int>"),
        ("id long, s struct<a:int, m:map<string,int>>", "s.m", "map<string,int>"),
        ("id long, a array<map<string,int>>", "a[]", "map<string,int>"),
        ("id long, iv interval day to second", "iv", "interval day to second"),
        ("id long, ym interval year to month", "ym", "interval year to month"),
    ],
)
def test_unsupported_types_fail_before_writing(spark, store, ddl, column, spark_type):
    df = spark.createDataFrame([], ddl)
    with pytest.raises(UnsupportedTypeError, match=rf"dataset 'bad': column '{re.escape(column)}' has Spark type "
                                                    rf"{re.escape(spark_type)}"):
        ks.store_dataset(store, "bad", df)
    assert list(kstore.open_store(store).iter_prefix("")) == []


def test_bad_columns_fail_before_writing(spark, store):
    df = spark.createDataFrame([(1, [1], 2.0)], "id long, arr array<int>, v double")
    with pytest.raises(ColumnNotFoundError, match="'nope'"):
        ks.store_dataset(store, "bad", df, secondary_indices=["nope"])
    with pytest.raises(UnsupportedTypeError, match="'arr'"):
        ks.store_dataset(store, "bad", df, partition_on=["arr"])
    with pytest.raises(UnsupportedTypeError, match="'arr'"):
        ks.store_dataset(store, "bad", df, secondary_indices=["arr"])
    with pytest.raises(InvalidArgumentError, match="memory store"):
        ks.store_dataset("memory://spark-test", "bad", df)
    assert list(kstore.open_store(store).iter_prefix("")) == []


def test_unsupported_type_via_datasource_writes_nothing(spark, store):
    df = spark.createDataFrame([(1, {"a": 1})], "id long, m map<string,int>")
    with pytest.raises(Exception, match="column 'm' has Spark type map<string,int>"):
        df.write.format("kstore").option("dataset_uuid", "bad").mode("append").save(store)
    assert list(kstore.open_store(store).iter_prefix("")) == []


# ---------------------------------------------------------------------------------------
# modes
# ---------------------------------------------------------------------------------------


def frame(spark, ids, day: str = "2024-01-01"):
    return spark.createDataFrame([(int(i), day, int(i) % 5, float(i)) for i in ids],
                                 "id long, day string, loc long, v double")


def ids_of(store: str, uuid: str, **kwargs) -> list[int]:
    return sorted(kstore.read_dataset(store, uuid, **kwargs)["id"].tolist())


def test_store_dataset_modes(spark, store):
    a = frame(spark, range(10), "d1")
    ks.store_dataset(store, "m", a, partition_on="day", secondary_indices="loc")
    with pytest.raises(DatasetExistsError, match="'m' already exists"):
        ks.store_dataset(store, "m", a, partition_on="day")
    assert ids_of(store, "m") == list(range(10))
    meta = ks.store_dataset(store, "m", frame(spark, range(10, 15), "d2"), mode="append")
    assert meta.version == 1 and ids_of(store, "m") == list(range(15))
    assert set(meta.indices) == {"loc"}  # the index covers the new files too
    assert any(lab.startswith("day=d2/") for lab in kstore.index_lookup(store, "m", "loc", 0))
    assert ids_of(store, "m", predicates=[[("loc", "==", 0)]]) == [0, 5, 10]
    meta = ks.store_dataset(store, "m", frame(spark, range(100, 103), "d1"), mode="overwrite_partitions")
    assert ids_of(store, "m") == [10, 11, 12, 13, 14, 100, 101, 102]
    meta = ks.store_dataset(store, "m", frame(spark, [7], "d9"), mode="overwrite", partition_on="day")
    assert ids_of(store, "m") == [7] and meta.version == 3
    # append to a missing dataset creates it (Spark's semantics)
    ks.store_dataset(store, "fresh", frame(spark, [1, 2]), mode="append", partition_on="day")
    assert ids_of(store, "fresh") == [1, 2]
    with pytest.raises(InvalidArgumentError, match="partitioned on"):
        ks.store_dataset(store, "fresh", frame(spark, [3]), mode="append", partition_on="loc")
    wrong = spark.createDataFrame([(1, "x", "not a number", 1.0)], "id long, day string, loc string, v double")
    with pytest.raises(SchemaMismatchError, match="'loc'"):
        ks.store_dataset(store, "fresh", wrong, mode="append")
    assert len(data_keys(store, "fresh")) == len(referenced_data_keys(store, "fresh"))  # nothing written


def test_update_dataset(spark, store):
    ks.store_dataset(store, "u", frame(spark, range(6), "d1").union(frame(spark, range(6, 9), "d2")),
                     partition_on="day")
    with pytest.raises(DatasetNotFoundError):
        ks.update_dataset(store, "missing", frame(spark, [1]))
    meta = ks.update_dataset(store, "u", frame(spark, [50], "d3"), delete_scope=[{"day": "d1"}])
    assert ids_of(store, "u") == [6, 7, 8, 50] and meta.version == 1
    meta = ks.update_dataset(store, "u", frame(spark, [60, 61], "d2"), mode="overwrite_partitions")
    assert ids_of(store, "u") == [50, 60, 61]
    meta = ks.update_dataset(store, "u", None, delete_scope=[{"day": "d3"}])
    assert ids_of(store, "u") == [60, 61] and meta.version == 3
    # schema evolution needs schema_mode="merge"
    extra = frame(spark, [70], "d4").withColumn("w", F.lit("new"))
    with pytest.raises(SchemaMismatchError, match="schema_mode='merge'"):
        ks.update_dataset(store, "u", extra)
    ks.update_dataset(store, "u", extra, schema_mode="merge")
    got = kstore.read_dataset(store, "u").sort_values("id")
    assert got["w"].tolist()[-1] == "new" and got["w"].isna().sum() == 2


def test_txn_makes_retries_idempotent(spark, store):
    ks.store_dataset(store, "t", frame(spark, range(3)), partition_on="day")
    m1 = ks.update_dataset(store, "t", frame(spark, [10]), txn=("job-a", 1))
    m2 = ks.update_dataset(store, "t", frame(spark, [10]), txn=("job-a", 1))  # a re-run of batch 1
    assert m1.version == m2.version == 1 and ids_of(store, "t") == [0, 1, 2, 10]
    assert len(data_keys(store, "t")) == len(referenced_data_keys(store, "t"))


def test_datasource_modes(spark, store):
    w = frame(spark, range(4), "d1").write.format("kstore").option("dataset_uuid", "ds").option("partition_on", "day")
    w.mode("append").save(store)  # creates
    frame(spark, range(4, 6), "d2").write.format("kstore").option("dataset_uuid", "ds").mode("append").save(store)
    assert ids_of(store, "ds") == list(range(6))
    (frame(spark, [9], "d1").write.format("kstore").option("dataset_uuid", "ds")
        .option("write_mode", "overwrite_partitions").mode("append").save(store))
    assert ids_of(store, "ds") == [4, 5, 9]
    with pytest.raises(Exception, match="already exists"):
        (frame(spark, [1]).write.format("kstore").option("dataset_uuid", "ds").option("write_mode", "error")
            .mode("append").save(store))
    with pytest.raises(Exception, match="changes its partitioning"):  # Delta's rule: overwriteSchema to change it
        (frame(spark, [1]).write.format("kstore").option("dataset_uuid", "ds").option("partition_on", "loc")
            .mode("overwrite").save(store))
    (frame(spark, [1]).write.format("kstore").option("dataset_uuid", "ds").option("partition_on", "loc")
        .option("overwriteSchema", "true").mode("overwrite").save(store))
    meta = kstore.load_metadata(store, "ds")
    assert meta.partition_keys == ("loc",) and ids_of(store, "ds") == [1]
    assert [h.operation for h in kstore.history(store, "ds")] == ["create", "append", "overwrite_partitions",
                                                                  "overwrite"]


def test_time_travel(spark, store):
    ks.store_dataset(store, "tt", frame(spark, range(3)), partition_on="day")
    time.sleep(0.05)
    cut = dt.datetime.now(UTC)
    time.sleep(0.05)
    ks.update_dataset(store, "tt", frame(spark, [10]))
    ks.store_dataset(store, "tt", frame(spark, [20]), mode="overwrite", partition_on="day")

    def ids(**opts):
        reader = spark.read.format("kstore").option("dataset_uuid", "tt")
        for k, v in opts.items():
            reader = reader.option(k, v)
        return sorted(r.id for r in reader.load(store).collect())

    assert ids() == [20]
    assert ids(version="0") == [0, 1, 2]
    assert ids(version="1") == [0, 1, 2, 10]
    assert ids(as_of=cut.isoformat()) == [0, 1, 2]
    assert sorted(r.id for r in ks.read_dataset(store, "tt", version=1, spark=spark).collect()) == [0, 1, 2, 10]
    # a DataFrame keeps the version it was created on
    pinned = spark.read.format("kstore").option("dataset_uuid", "tt").load(store)
    ks.update_dataset(store, "tt", frame(spark, [30]))
    assert sorted(r.id for r in pinned.collect()) == [20]
    assert ids() == [20, 30]


def test_empty_dataframe(spark, store):
    empty = spark.createDataFrame([], "id long, day string, v double")
    meta = ks.store_dataset(store, "e", empty, partition_on="day")
    assert meta.partitions == {} or len(meta.partitions) == 0
    back = ks.read_dataset(store, "e", spark=spark)
    assert back.count() == 0 and back.schema.fieldNames() == ["day", "id", "v"]
    assert back.filter("id = 1").count() == 0


# ---------------------------------------------------------------------------------------
# filter pushdown
# ---------------------------------------------------------------------------------------

PUSH_N = 400


def push_frame(spark):
    """4 partitions (p); loc 0-9 only in p=a, 10-19 in p=b, ...; ``z`` is null only in p=d."""
    return spark.createDataFrame([(r["id"], r["p"], r["loc"], r["z"], r["day"]) for r in push_rows()],
                                 "id long, p string, loc long, z string, day date")


@pytest.fixture
def pushed(spark, store, tmp_path):
    """The pushdown dataset (one file per partition) and a store factory that logs opens."""
    log = OpenLog(store, str(tmp_path / "opens.log"))
    ks.store_dataset(store, "push", push_frame(spark), partition_on=["p"], secondary_indices=["loc", "z"],
                     shuffle="repartition")
    assert len(kstore.load_metadata(store, "push").partitions) == 4
    log.reset()
    return log


def push_rows() -> list[dict]:
    return [{"id": k, "p": "abcd"[k % 4], "loc": (k % 4) * 10 + (k // 4) % 10,
             "z": None if k % 4 == 3 else f"z{k % 3}", "day": dt.date(2024, 1, 1) + timedelta(days=k % 4)}
            for k in range(PUSH_N)]


@pytest.mark.parametrize(
    "spark_filter, dnf, python_filter, files, pushed_files",
    [
        ("loc = 15", [[("loc", "==", 15)]], lambda r: r["loc"] == 15, 1, 1),  # secondary index
        ("p = 'c'", [[("p", "==", "c")]], lambda r: r["p"] == "c", 1, 1),  # partition value
        ("loc IN (1, 35)", [[("loc", "in", [1, 35])]], lambda r: r["loc"] in (1, 35), 2, 2),
        ("loc >= 30", [[("loc", ">=", 30)]], lambda r: r["loc"] >= 30, 1, 1),  # index range
        ("loc < 12 AND p <> 'a'", [[("loc", "<", 12), ("p", "!=", "a")]],
         lambda r: r["loc"] < 12 and r["p"] != "a", 1, 1),
        ("z IS NULL", [[("z", "is null")]], lambda r: r["z"] is None, 1, 1),  # statistics: only p=d has nulls
        ("z = 'z1' AND loc = 22", [[("z", "==", "z1"), ("loc", "==", 22)]],
         lambda r: r["z"] == "z1" and r["loc"] == 22, 1, 1),
        ("day = DATE'2024-01-02'", [[("day", "==", dt.date(2024, 1, 2))]],
         lambda r: r["day"] == dt.date(2024, 1, 2), 1, 1),  # statistics
        ("loc % 2 = 0", None, lambda r: r["loc"] % 2 == 0, 4, 4),  # not a kstore predicate
        ("loc = 15 OR p = 'a'", [[("loc", "==", 15)], [("p", "==", "a")]],
         lambda r: r["loc"] == 15 or r["p"] == "a", 2, 4),  # Spark pushes no OR
    ],
)
def test_predicates_prune_files_and_filters_are_exact(spark, store, pushed, spark_filter, dnf, python_filter, files,
                                                     pushed_files):
    """``predicates`` (kstore's planner) open only the planned files; ``.filter`` gives the
    same rows. Spark 4.3 shares a pushed read plan between the scans of a DataFrame, so
    there kstore takes no ``.filter`` pushdown (every file is read, Spark filters); where
    scans keep their own plan, pushed filters prune like predicates."""
    expected = sorted(r["id"] for r in push_rows() if python_filter(r))
    df = ks.read_dataset(pushed, "push", predicates=dnf, spark=spark)
    if dnf is None:
        df = df.filter(spark_filter)
    assert sorted(r.id for r in df.collect()) == expected
    opened = pushed.keys()
    assert len(opened) == files, opened
    assert all("/p=" in k for k in opened) and len(set(opened)) == len(opened)
    pushed.reset()
    df = ks.read_dataset(pushed, "push", spark=spark).filter(spark_filter)
    assert sorted(r.id for r in df.collect()) == expected
    assert len(pushed.keys()) == (pushed_files if ks.scans_keep_own_read_plan(spark) else 4)


def test_negated_filters_are_exact(spark, store, pushed):
    base = ks.read_dataset(pushed, "push", spark=spark)
    rows = push_rows()
    cases = {
        "NOT loc IN (0, 1, 2, 3, 4, 5, 6, 7, 8, 9)": lambda r: r["loc"] >= 10,
        "z <> 'z1'": lambda r: r["z"] is not None and r["z"] != "z1",
        "z IS NOT NULL AND p = 'd'": lambda r: False,
        "NOT (p = 'a')": lambda r: r["p"] != "a",
        "z <=> 'z2'": lambda r: r["z"] == "z2",
    }
    for spark_filter, python_filter in cases.items():
        got = sorted(r.id for r in base.filter(spark_filter).collect())
        assert got == sorted(r["id"] for r in rows if python_filter(r)), spark_filter


def test_pushdown_with_predicates_option_and_reuse(spark, store, pushed):
    df = ks.read_dataset(pushed, "push", predicates=[[("loc", "==", 15)], [("p", "==", "d")]], spark=spark)
    assert df.count() == 10 + PUSH_N // 4
    assert len(pushed.keys()) == 2
    pushed.reset()
    narrow = ks.read_dataset(pushed, "push", columns=["id", "loc"], spark=spark)
    assert narrow.columns == ["id", "loc"]
    assert sorted(r.id for r in narrow.filter("loc = 15").collect()) == [r["id"] for r in push_rows() if r["loc"] == 15]
    pushed.reset()
    # the same DataFrame, reused with and without filters: every query is planned afresh
    base = ks.read_dataset(pushed, "push", spark=spark)
    assert base.filter("loc = 15").count() == 10
    assert base.count() == PUSH_N
    assert base.filter("loc % 10 = 0").count() == PUSH_N // 10
    assert base.filter("p = 'a'").count() == PUSH_N // 4


def test_plain_load_reused_without_filters(spark, store, pushed):
    """Spark 4.3 keeps a pushed scan's read plan on the relation and reuses it for a later
    query on the same DataFrame that pushes no filter; the plan must hold every row."""
    df = spark.read.format("kstore").option("dataset_uuid", "push").load(store)
    assert df.filter("loc = 15").count() == 10
    assert df.count() == PUSH_N  # Spark 4.3.0 with kstore's pushdown: 10 (the previous query's plan)
    assert df.filter("p = 'a'").count() == PUSH_N // 4


def test_plain_load_filters_are_exact(spark, store, pushed):
    df = spark.read.format("kstore").option("dataset_uuid", "push").load(ks.store_option(pushed))
    assert sorted(r.id for r in df.filter("loc = 15").collect()) == [k for k in range(PUSH_N)
                                                                     if k % 4 == 1 and (k // 4) % 10 == 5]
    assert len(pushed.keys()) == (1 if ks.scans_keep_own_read_plan(spark) else 4)


def reuse_dataset(spark, store):
    ks.store_dataset(store, "d", spark.range(100).selectExpr("id", "cast(id % 10 as int) as loc"),
                     partition_on=["loc"])


@pytest.mark.parametrize("load", ["read_dataset", "format"])
def test_union_and_self_join_of_one_dataframe_are_exact(spark, store, load):
    """Spark plans the pushdown of both sides on the same relation and reads one plan twice
    (the issue's examples: 200 and 50 rows were returned for 110 and 0)."""
    reuse_dataset(spark, store)
    if load == "read_dataset":
        d = ks.read_dataset(store, "d", spark=spark)
    else:
        d = spark.read.format("kstore").option("dataset_uuid", "d").load(store)
    ids = range(100)
    cases = [  # (the DataFrame, the ids it must return: Python filtering of the source)
        (d.filter("loc = 3").union(d), [i for i in ids if i % 10 == 3] + list(ids)),
        (d.union(d.filter("loc = 3")), list(ids) + [i for i in ids if i % 10 == 3]),
        (d.filter("loc < 5").join(d.filter("loc >= 5"), "id"), []),
        (d.filter("loc < 5").join(d.filter("loc < 7"), "id"), [i for i in ids if i % 10 < 5]),
        (d.filter("loc < 7").join(d.filter("loc < 5"), "id"), [i for i in ids if i % 10 < 5]),
        (d.filter("loc = 1").union(d.filter("loc = 2")).union(d.filter("id >= 95")),
         [i for i in ids if i % 10 in (1, 2) or i >= 95]),
    ]
    assert d.filter("loc = 3").union(d).count() == 110 and d.filter("loc < 5").join(d.filter("loc >= 5"), "id").count() == 0
    for df, want in cases:
        assert sorted(r.id for r in df.select("id").collect()) == sorted(want)
    # repeated actions on one DataFrame, with and without filters
    for _ in range(2):
        assert d.count() == 100 and d.filter("loc = 9").count() == 10 and d.filter("id < 10").count() == 10


def test_scoped_reader_pushdown_prunes_and_reports_exact_terms_only(spark, store, pushed):
    """What a Spark that keeps read plans per scan gets: the reader prunes by the pushed
    filters and hands back every filter it does not evaluate exactly (a decimal literal
    PySpark may have rounded, floats)."""
    from pyspark.sql.datasource import EqualTo, GreaterThan, In

    from kstore.spark.datasource import KstoreDataSource

    source = KstoreDataSource({"path": store, "dataset_uuid": "push"})
    reader = source.reader(source.schema())
    keep = [EqualTo(("loc",), 15), GreaterThan(("id",), 3), EqualTo(("nope",), 1)]
    assert list(reader.pushFilters(keep)) == [keep[2]]
    parts = reader.partitions()
    assert sum(len(p.plan.tasks) for p in parts) == 1
    rows = [r for p in parts for b in reader.read(p) for r in b.to_pylist()]
    assert sorted(r["id"] for r in rows) == sorted(r["id"] for r in push_rows() if r["loc"] == 15 and r["id"] > 3)
    from kstore.spark.reader import filter_to_term

    dec = pa.schema([("d", pa.decimal128(38, 10)), ("f", pa.float64())])
    rounded = Decimal("123456789012345678901234567.0")  # 28 digits: what PySpark's context leaves
    assert filter_to_term(EqualTo(("d",), rounded), dec) == (None, False)
    assert filter_to_term(In(("d",), (Decimal("1.5"), rounded)), dec) == (None, False)
    term, exact = filter_to_term(EqualTo(("d",), Decimal("1.5")), dec)
    assert term.value == Decimal("1.5") and exact
    assert filter_to_term(GreaterThan(("f",), 1.5), dec)[1] is False


DEC = [Decimal("123456789012345678901234567.0123456789"), Decimal("123456789012345678901234567.0123456788"),
       Decimal("-9999999999999999999999999999.9999999999"), Decimal("1.5"), None]


def test_decimal_38_filters_are_exact(spark, store):
    """decimal(38,10) literals keep all 38 digits (PySpark rounds pushed ones to 28):
    Spark filters, the predicates option (list and JSON) and pandas agree with Spark's
    own filtering of the source."""
    df = spark.createDataFrame([(i, v) for i, v in enumerate(DEC)], "id long, dec decimal(38,10)")
    ks.store_dataset(store, "dec", df, secondary_indices=["id"])
    back = ks.read_dataset(store, "dec", spark=spark)
    big = "123456789012345678901234567.0123456789"
    for cond in [f"dec = {big}", f"dec < {big}", f"dec IN ({big})", f"dec != {big}", f"dec >= {big}",
                 f"NOT dec IN ({big}, 1.5)", "dec > -9999999999999999999999999999.9999999998"]:
        want = sorted(r.id for r in df.filter(cond).collect())
        assert sorted(r.id for r in back.filter(cond).collect()) == want, cond
    for op, lit in [("==", DEC[0]), ("<", DEC[0]), ("in", [DEC[0]]), ("!=", DEC[0]), (">", DEC[2])]:
        want = sorted(i for i, v in enumerate(DEC) if v is not None and _cmp_py(v, op, lit))
        got = ks.read_dataset(store, "dec", predicates=[[("dec", op, lit)]], spark=spark)
        assert sorted(r.id for r in got.collect()) == want, (op, lit)
        assert sorted(kstore.read_dataset(store, "dec", predicates=[[("dec", op, lit)]])["id"]) == want
    as_json = f'[[["dec", "==", {big}]]]'
    got = spark.read.format("kstore").option("dataset_uuid", "dec").option("predicates", as_json).load(store)
    assert [r.id for r in got.collect()] == [0]


def _cmp_py(v, op, lit):
    return {"==": v == lit, "<": v < lit, "!=": v != lit, ">": v > lit}[op] if op != "in" else v in lit


@pytest.mark.parametrize("how", ["store_dataset", "datasource"])
def test_appending_a_narrower_type_keeps_the_dataset_type(spark, store, how):
    """float onto double, int onto long (holding 2**40), byte onto int: Spark reads every
    row with the dataset's type (the wider of the two: int for int and byte), old rows exact."""
    first = spark.createDataFrame([(1, 0.1, 2**40, 70000)], "id long, f double, l long, i int")
    more = spark.createDataFrame([(2, 0.5, 3, 5)], "id long, f float, l int, i byte")
    ks.store_dataset(store, "n", first)
    if how == "store_dataset":
        ks.update_dataset(store, "n", more)
    else:
        more.write.format("kstore").option("dataset_uuid", "n").mode("append").save(store)
    back = ks.read_dataset(store, "n", spark=spark)
    assert {f.name: f.dataType for f in back.schema.fields} == {
        "id": T.LongType(), "f": T.DoubleType(), "l": T.LongType(), "i": T.IntegerType()}
    assert sorted((r.id, r.f, r.l, r.i) for r in back.collect()) == [(1, 0.1, 2**40, 70000), (2, 0.5, 3, 5)]
    # the same type again keeps it; a new column keeps the written type
    ks.update_dataset(store, "n", spark.createDataFrame([(3, 1.0, 4, 6, 7)], "id long, f double, l long, i long, s short"), schema_mode="merge")
    assert ks.read_dataset(store, "n", spark=spark).schema["s"].dataType == T.ShortType()


def test_pandas_append_onto_spark_types_reads_exactly_in_spark(spark, store):
    """A Spark ``int`` / ``float`` column, then pandas appends 2**40 and 0.1: Spark reads the
    dataset types (long / double) from then on, every value exact."""
    ks.store_dataset(store, "pd", spark.createDataFrame([(1, 5, 0.5)], "id long, i int, f float"))
    assert ks.read_dataset(store, "pd", spark=spark).schema["i"].dataType == T.IntegerType()
    kstore.update_dataset(store, "pd", pd.DataFrame({"id": [2], "i": [2**40], "f": [0.1]}))
    back = ks.read_dataset(store, "pd", spark=spark)
    assert back.schema["i"].dataType == T.LongType() and back.schema["f"].dataType == T.DoubleType()
    assert sorted((r.id, r.i, r.f) for r in back.collect()) == [(1, 5, 0.5), (2, 2**40, 0.1)]
    # pandas does not keep Spark's narrower types: the recorded Spark schema is dropped
    assert kstore.load_metadata(store, "pd").metadata.get("spark_schema") is None


def test_unknown_options_are_refused_and_delta_names_accepted(spark, store):
    ks.store_dataset(store, "o", frame(spark, range(3)), partition_on="day")
    ks.update_dataset(store, "o", frame(spark, [10]))
    cut = dt.datetime.now(UTC)
    ks.update_dataset(store, "o", frame(spark, [20]))

    def ids(**opts):
        reader = spark.read.format("kstore").option("dataset_uuid", "o")
        for k, v in opts.items():
            reader = reader.option(k, v)
        return sorted(r.id for r in reader.load(store).collect())

    assert ids(versionAsOf="0") == ids(version="0") == [0, 1, 2]
    assert ids(VERSIONASOF="1") == [0, 1, 2, 10]
    assert ids(timestampAsOf=cut.isoformat()) == ids(as_of=cut.isoformat()) == [0, 1, 2, 10]
    for typo in ("verison", "partition_on", "versionasof ", "snapshot"):
        with pytest.raises(Exception, match=r"no read option .*read options: as_of, columns, dataset_uuid"):
            ids(**{typo: "0"})
    with pytest.raises(Exception, match=r"did you mean 'version'"):
        ids(verison="0")
    with pytest.raises(Exception, match="option 'version' twice"):
        ids(version="0", versionAsOf="0")
    with pytest.raises(Exception, match=r"no write option 'partitionon'.*write options: .*chunk_bytes"):
        (frame(spark, [1]).write.format("kstore").option("dataset_uuid", "o").option("partitionOn", "day")
            .mode("append").save(store))
    assert ids() == [0, 1, 2, 10, 20]


def test_partitions_group_small_files(spark, store):
    ks.store_dataset(store, "g", frame(spark, range(40)).repartition(4), partition_on="day", chunk_bytes=1)
    n_files = len(kstore.load_metadata(store, "g").partitions)
    assert n_files >= 4
    spread = ks.read_dataset(store, "g", spark=spark)  # tiny files: spread over defaultParallelism (2) tasks
    assert 2 <= spread.rdd.getNumPartitions() <= 3
    one = spark.read.format("kstore").option("dataset_uuid", "g").option("min_partitions", "1").load(store)
    assert one.rdd.getNumPartitions() == 1
    each = ks.read_dataset(store, "g", partition_bytes=1, spark=spark)
    assert each.rdd.getNumPartitions() == n_files
    assert sorted(r.id for r in each.collect()) == list(range(40))


def test_group_tasks_splits_like_spark():
    from kstore.core.planning import ReadTask
    from kstore.spark.reader import OPEN_COST_BYTES, group_tasks

    tasks = [ReadTask(f"f{i}", f"k{i}", (), None) for i in range(10)]
    mb = 1024 * 1024
    big = {f"f{i}": 100 * mb for i in range(10)}
    groups = group_tasks(tasks, big, partition_bytes=128 * mb, min_partitions=2)
    assert [len(g) for g in groups] == [1] * 10  # 104 MiB each: one file per task
    groups = group_tasks(tasks, {}, partition_bytes=128 * mb, min_partitions=2)  # sizes unknown
    assert len(groups) == 10
    small = {f"f{i}": 1000 for i in range(10)}
    assert [len(g) for g in group_tasks(tasks, small, 128 * mb, min_partitions=2)] == [5, 5]
    assert [len(g) for g in group_tasks(tasks, small, 128 * mb, min_partitions=1)] == [10]
    assert [len(g) for g in group_tasks(tasks, small, OPEN_COST_BYTES, min_partitions=1)] == [1] * 10
    assert [t.label for g in group_tasks(tasks, small, 128 * mb, 3) for t in g] == [t.label for t in tasks]


# ---------------------------------------------------------------------------------------
# failures
# ---------------------------------------------------------------------------------------


class _FailingStore(_LoggingStore):
    """A logging store whose data-file ``put`` fails in Spark partition ``partition`` after
    ``after`` files (a task failing mid-write). With ``wait_for``, the failure first waits
    (up to 60 s) until that many data files were put in total, so the other task has
    finished writing; with ``first_attempt_only`` the retry succeeds. With ``die`` the
    Python worker process exits instead (``os._exit``: no exception, no cleanup)."""

    def __init__(self, root: str, log: str, partition: int, after: int, wait_for: int = 0,
                 first_attempt_only: bool = False, die: bool = False) -> None:
        super().__init__(root, log)
        self.partition, self.after, self.wait_for = partition, after, wait_for
        self.first_attempt_only, self.die = first_attempt_only, die
        self.puts = 0

    def __reduce__(self):
        return (_FailingStore, (self.root, self.log, self.partition, self.after, self.wait_for,
                                self.first_attempt_only, self.die))

    def put(self, key: str, data: bytes) -> None:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        failing = (ctx is not None and ctx.partitionId() == self.partition and "/table/" in key
                   and (not self.first_attempt_only or ctx.attemptNumber() == 0))
        if failing and self.puts == self.after:
            deadline = time.monotonic() + 60
            while (time.monotonic() < deadline
                   and Path(self.log).read_text().count("put ") < self.wait_for):
                time.sleep(0.1)
            if self.die:
                os._exit(1)
            raise RuntimeError("injected failure")
        super().put(key, data)
        if failing:
            self.puts += 1


class FailingLog(OpenLog):
    """Store factory for :class:`_FailingStore`."""

    def __init__(self, root: str, log: str, **fail) -> None:
        super().__init__(root, log)
        self.fail = fail

    def __call__(self) -> _FailingStore:
        return _FailingStore(self.root, self.log, **self.fail)


class FailInPartition:
    """``mapInArrow`` pass-through that raises in Spark partition ``partition`` after
    ``after`` batches: bad data upstream of the write."""

    def __init__(self, partition: int, after: int) -> None:
        self.partition, self.after = partition, after

    def __call__(self, batches):
        from pyspark import TaskContext

        fail = TaskContext.get().partitionId() == self.partition
        for i, batch in enumerate(batches):
            if fail and i == self.after:
                raise RuntimeError("injected failure")
            yield batch


@pytest.fixture
def small_batches(spark):
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "10")
    yield
    spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")


def two_partitions(spark):
    """200 rows of day d2 in 2 Spark partitions (~100 rows each, batches of 10 rows)."""
    return frame(spark, range(100, 300), "d2").repartition(2, "id")


def rows_in_partition(df, i: int) -> int:
    return df.where(F.spark_partition_id() == i).count()


def test_task_failure_mid_write_leaves_dataset_unchanged(spark, store, tmp_path, small_batches):
    ks.store_dataset(store, "f", frame(spark, range(5)), partition_on="day")
    before = kstore.load_metadata(store, "f")
    src = two_partitions(spark)
    n0 = -(-rows_in_partition(src, 0) // 10)  # partition 0's chunks (one file per 10-row batch)
    failing = FailingLog(store, str(tmp_path / "calls.log"), partition=1, after=3, wait_for=n0 + 3)
    with pytest.raises(Exception, match="injected failure"):
        ks.update_dataset(failing, "f", src, chunk_bytes=1)
    after = kstore.load_metadata(store, "f")
    assert after.version == before.version and dict(after.partitions) == dict(before.partitions)
    assert ids_of(store, "f") == list(range(5))
    puts, deletes = failing.keys("put"), failing.keys("delete")
    # partition 1 wrote 3 files per attempt and, when it failed, deleted them and the key
    # whose put failed (a failed put may have landed); partition 0's files were never
    # committed: orphans, which GC removes
    failed = set(deletes) - set(puts)
    assert len(deletes) == 8 and len(failed) == 2 and len(set(deletes) - failed) == 6
    orphans = data_keys(store, "f") - referenced_data_keys(store, "f")
    assert orphans == set(puts) - set(deletes) and len(orphans) == n0
    result = kstore.garbage_collect(store, "f", retention=timedelta(0), enforce_retention_duration=False)
    assert orphans <= set(result.deleted_files)
    assert data_keys(store, "f") == referenced_data_keys(store, "f")
    assert ids_of(store, "f") == list(range(5))


def test_failing_upstream_task_commits_nothing(spark, store, small_batches):
    ks.store_dataset(store, "f", frame(spark, range(5)), partition_on="day")
    src = two_partitions(spark)
    bad = src.mapInArrow(FailInPartition(1, after=3), src.schema)
    with pytest.raises(Exception, match="injected failure"):
        ks.update_dataset(store, "f", bad, chunk_bytes=1)
    assert kstore.load_metadata(store, "f").version == 0 and ids_of(store, "f") == list(range(5))
    kstore.garbage_collect(store, "f", retention=timedelta(0), enforce_retention_duration=False)
    assert data_keys(store, "f") == referenced_data_keys(store, "f")


def test_datasource_write_failure_aborts(spark, store, tmp_path, small_batches):
    ks.store_dataset(store, "f", frame(spark, range(5)), partition_on="day")
    src = two_partitions(spark)
    n0 = -(-rows_in_partition(src, 0) // 10)
    failing = FailingLog(store, str(tmp_path / "calls.log"), partition=1, after=3, wait_for=n0 + 3)
    with pytest.raises(Exception, match="injected failure"):
        (src.write.format("kstore").option("dataset_uuid", "f").option("chunk_bytes", "1").mode("append")
            .save(ks.store_option(failing)))
    assert kstore.load_metadata(store, "f").version == 0
    assert ids_of(store, "f") == list(range(5))
    # the failed attempts cleaned up after themselves (their files, and the key whose put
    # failed); abort deleted what partition 0 reported
    puts, deletes = failing.keys("put"), failing.keys("delete")
    assert len(puts) == n0 + 6 and set(puts) <= set(deletes) and len(set(deletes) - set(puts)) == 2
    assert data_keys(store, "f") == referenced_data_keys(store, "f")


def test_retried_task_commits_only_the_successful_attempt(spark, store, tmp_path, small_batches):
    src = two_partitions(spark)
    flaky = FailingLog(store, str(tmp_path / "calls.log"), partition=1, after=3, first_attempt_only=True)
    meta = ks.store_dataset(flaky, "r", src, partition_on="day", chunk_bytes=1)
    assert ids_of(store, "r") == list(range(100, 300))  # no row twice, none missing
    n_files = -(-rows_in_partition(src, 0) // 10) + -(-rows_in_partition(src, 1) // 10)
    assert meta.version == 0 and len(meta.partitions) == n_files
    deleted = flaky.keys("delete")
    # the first attempt's 3 files, and the key whose put failed (a failed put may have landed)
    assert len(deleted) == 4 and len(set(deleted) - set(flaky.keys("put"))) == 1
    assert not set(deleted) & set(referenced_data_keys(store, "r"))
    assert data_keys(store, "r") == referenced_data_keys(store, "r")


def test_a_python_worker_dying_mid_write_is_retried_and_commits_every_row_once(spark, store, tmp_path,
                                                                               small_batches):
    """The Python worker of a task's first attempt exits after writing 3 files (a killed
    process: nothing of the attempt's own cleanup runs). Spark retries the task; the commit
    holds the retry's files only, every row once; the dead attempt's files are orphans that
    garbage collection removes."""
    src = two_partitions(spark)
    dying = FailingLog(store, str(tmp_path / "calls.log"), partition=1, after=3, first_attempt_only=True, die=True)
    meta = ks.store_dataset(dying, "k", src, partition_on="day", chunk_bytes=1)
    assert ids_of(store, "k") == list(range(100, 300))  # no row twice, none missing
    n_files = -(-rows_in_partition(src, 0) // 10) + -(-rows_in_partition(src, 1) // 10)
    assert meta.version == 0 and len(meta.partitions) == n_files
    assert dying.keys("delete") == []  # the dead attempt cleaned up nothing
    orphans = data_keys(store, "k") - referenced_data_keys(store, "k")
    assert len(orphans) == 3 and orphans <= set(dying.keys("put"))
    result = kstore.garbage_collect(store, "k", retention=timedelta(0), enforce_retention_duration=False)
    assert orphans <= set(result.deleted_files)
    assert data_keys(store, "k") == referenced_data_keys(store, "k")
    assert ids_of(store, "k") == list(range(100, 300))


# ---------------------------------------------------------------------------------------
# interop: what Spark writes, pandas / Dask / plateau read the same
# ---------------------------------------------------------------------------------------


def interop_frame(spark):
    rows = [(k, ["x", "y/z"][k % 2], k % 7, float(k) / 3, f"n{k % 5}", dt.date(2024, 1, 1) + timedelta(days=k % 3),
             dt.datetime(2024, 1, 1, tzinfo=UTC) + timedelta(minutes=k)) for k in range(60)]
    return spark.createDataFrame(rows, "id long, p string, loc int, v double, note string, day date, ts timestamp")


def test_spark_dataset_reads_the_same_in_pandas_dask_and_plateau(spark, store):
    df = interop_frame(spark)
    ks.store_dataset(store, "inter", df, partition_on=["p"], secondary_indices=["loc"])
    expected = kstore.read_dataset(store, "inter").sort_values("id").reset_index(drop=True)
    src = df.toPandas()
    assert expected["id"].tolist() == list(range(60))
    assert expected["loc"].tolist() == src.sort_values("id")["loc"].tolist()
    assert expected["ts"].tolist() == [pd.Timestamp(t).tz_convert("UTC") if pd.Timestamp(t).tzinfo
                                       else pd.Timestamp(t).tz_localize("UTC")
                                       for t in src.sort_values("id")["ts"]]
    pred = [[("loc", "==", 3)]]
    want = expected[expected["loc"] == 3].reset_index(drop=True)
    got = kstore.read_dataset(store, "inter", predicates=pred).sort_values("id").reset_index(drop=True)
    pdt.assert_frame_equal(got, want)

    try:
        import kstore.dask as kdask
    except ImportError:
        kdask = None
    if kdask is not None:
        ddf = kdask.read_dataset(store, "inter", predicates=pred)
        dgot = ddf.compute(scheduler="sync").sort_values("id").reset_index(drop=True)
        pdt.assert_frame_equal(dgot, want, check_dtype=False)
    plateau = pytest.importorskip("plateau.api.dataset")
    import functools

    import minimalkv

    pstore = functools.partial(minimalkv.get_store_from_url, "hfs://" + store)
    pgot = plateau.read_table("inter", store=pstore).sort_values("id").reset_index(drop=True)
    assert pgot["id"].tolist() == list(range(60))
    assert pgot["loc"].tolist() == expected["loc"].tolist()
    assert pgot["p"].tolist() == expected["p"].tolist()
    assert pgot["note"].tolist() == expected["note"].tolist()
    assert [pd.Timestamp(t) for t in pgot["ts"]] == list(expected["ts"])
    pgot3 = plateau.read_table("inter", store=pstore, predicates=pred)
    assert sorted(pgot3["id"].tolist()) == want["id"].tolist()
    from plateau.core.factory import DatasetFactory

    factory = DatasetFactory("inter", pstore)
    assert "loc" in factory.load_all_indices().indices


def test_pandas_written_dataset_reads_in_spark(spark, store):
    pdf = pd.DataFrame({"id": np.arange(10), "p": ["a", "b"] * 5, "x": pd.array([1, None] * 5, dtype="Int64"),
                        "t": pd.date_range("2024-01-01", periods=10, freq="h", tz="Europe/Berlin"),
                        "u": np.arange(10, dtype="uint64") + 2**63})
    kstore.store_dataset(store, "pd", pdf, partition_on=["p"], secondary_indices=["x"])
    back = ks.read_dataset(store, "pd", spark=spark)
    assert back.schema["u"].dataType == T.DecimalType(20, 0) and back.schema["t"].dataType == T.TimestampType()
    rows = sorted(back.collect(), key=lambda r: r.id)
    assert [r.u for r in rows] == [Decimal(2**63 + i) for i in range(10)]
    assert [pd.Timestamp(r.t.astimezone(UTC)) for r in rows] == [t.tz_convert("UTC") for t in pdf["t"]]
    assert back.filter("x = 1").count() == 5 and back.filter("x IS NULL").count() == 5
    # Spark appends to a pandas-written dataset (timestamps written in its zone)
    more = spark.createDataFrame([(10, "a", 1, dt.datetime(2024, 2, 1, tzinfo=UTC), Decimal(5))],
                                 "id long, p string, x long, t timestamp, u decimal(20,0)")
    with pytest.raises(SchemaMismatchError, match="'u'"):
        ks.update_dataset(store, "pd", more)
    ks.update_dataset(store, "pd", more.drop("u"), schema_mode="merge")
    got = kstore.read_dataset(store, "pd").sort_values("id")
    assert str(got["t"].dt.tz) == "Europe/Berlin"  # Spark's timestamps were written in the dataset's zone
    assert got["t"].iloc[-1] == pd.Timestamp("2024-02-01", tz="UTC") and got["u"].isna().sum() == 1

