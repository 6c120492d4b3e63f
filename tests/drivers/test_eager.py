"""Behaviour tests of the eager driver (``kstore.eager``) on real stores.

Every test that takes ``store_url`` runs twice: on a local directory (``file://``) and on a
named memory store (``memory://``). Results are compared with ``pandas.testing`` after
sorting by a row id.

dtype contract checked here (read side, pandas output)
-------------------------------------------------------
Values always round-trip exactly. Numeric types come back as written (the dataset schema
keeps them; ``_common_metadata`` records the normalized family for kartothek, FORMAT.md A):

=========================  ==========================================================
written                    read back (``read_dataset``)
=========================  ==========================================================
int8 / ... / int64         the same (int8 / ... / int64)
uint8 / ... / uint64       the same (uint64 max exact)
float32 / float64          the same (NaN, +-inf kept; a pandas NaN is a missing value)
bool                       bool; with a missing value: boolean
str (pandas 3 ``str``)     ``str`` (empty string kept, missing -> NaN)
bytes                      object (``bytes``)
date (``datetime.date``)   datetime64[us]; ``dates_as_object=True``: ``datetime.date``
timestamp naive (any unit) datetime64[us] (0001-01-01 .. 9999-12-31; nanoseconds refused)
timestamp tz               datetime64[us, <same tz>]
Int8..64 / boolean (null.) the same (Int32 stays Int32), with ``<NA>``
list<int64>                object (one numpy array per row; None stays None)
category                   ``str``; ``categoricals=[col]``: category
=========================  ==========================================================

Partition columns follow the same table: the value decoded from the key is typed by the
dataset schema (``'False'`` -> False, ``'a%2Fb'`` -> ``'a/b'``, dates -> datetime64[us]).
``as_arrow=True`` returns the written Arrow types (timestamps in us, dates as date32). Default column order: partition columns first, then the data columns in input
order.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import logging
import math
import operator
import re

import msgpack
import numpy as np
import pandas as pd
import pandas.testing as pdt
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

import kstore
from kstore.blocks import load
from kstore.core import naming, runtime
from kstore.errors import (
    ColumnNotFoundError,
    CorruptMetadataError,
    DatasetExistsError,
    DatasetNotFoundError,
    InvalidArgumentError,
    InvalidKeyError,
    InvalidPredicateError,
    KstoreError,
    SchemaMismatchError,
    UnsupportedTypeError,
)
from kstore.io.store import CountingStore

BERLIN = "Europe/Berlin"

# ---------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------


def by_id(df: pd.DataFrame, col: str = "id") -> pd.DataFrame:
    return df.sort_values(col, kind="stable").reset_index(drop=True)


def lists(series: pd.Series) -> list:
    """A list column as plain Python lists (numpy arrays from Arrow -> lists)."""
    return [None if v is None else [int(x) for x in v] for v in series]


def ts_ns(values, tz: str | None = None) -> pd.Series:
    """Timestamps in a nanosecond pandas dtype (whole microseconds: kstore's unit)."""
    s = pd.Series([pd.Timestamp(v) for v in values]).astype("datetime64[ns]")
    return s.dt.tz_localize("UTC").dt.tz_convert(tz) if tz else s


def expected_read(src: pd.DataFrame) -> pd.DataFrame:
    """What ``read_dataset`` returns for ``src`` (see the dtype contract above)."""
    out = {}
    for name, s in src.items():
        dtype = s.dtype
        if isinstance(dtype, pd.CategoricalDtype):
            s = s.astype("str")
        elif isinstance(dtype, pd.DatetimeTZDtype):
            s = s.astype(f"datetime64[us, {dtype.tz}]")
        elif str(dtype).startswith("datetime64"):
            s = s.astype("datetime64[us]")
        elif isinstance(dtype, pd.api.extensions.ExtensionDtype):
            pass  # Int8..Int64, UInt8..UInt64, Float32/64, boolean, str: kept
        elif dtype.kind == "f" and dtype.itemsize < 4:
            s = s.astype("float32")  # Parquet holds no float16
        elif dtype.kind == "O" and s.notna().any() and all(
            isinstance(v, dt.date) and not isinstance(v, dt.datetime) for v in s.dropna()
        ):
            s = pd.to_datetime(s).astype("datetime64[us]")
        out[name] = s.reset_index(drop=True)
    return pd.DataFrame(out)


def assert_read_equals(out: pd.DataFrame, src: pd.DataFrame, *, id_col: str = "id", list_cols=()) -> None:
    out = by_id(out, id_col)
    exp = by_id(expected_read(src), id_col)
    assert sorted(out.columns) == sorted(exp.columns)
    exp = exp[list(out.columns)]
    for c in list_cols:
        assert lists(out[c]) == lists(exp[c]), c
    keep = [c for c in out.columns if c not in list_cols]
    pdt.assert_frame_equal(out[keep], exp[keep], check_dtype=True, check_exact=True)


def has_large_type(t: pa.DataType) -> bool:
    if pa.types.is_large_string(t) or pa.types.is_large_binary(t) or pa.types.is_large_list(t):
        return True
    if pa.types.is_string_view(t) or pa.types.is_binary_view(t):
        return True
    if pa.types.is_list(t):
        return has_large_type(t.value_type)
    if pa.types.is_dictionary(t):
        return has_large_type(t.value_type)
    if pa.types.is_struct(t):
        return any(has_large_type(f.type) for f in t)
    return False


def parquet_schema(url: str, key: str) -> pa.Schema:
    return pq.read_schema(io.BytesIO(kstore.open_store(url).get(key)))


def simple_frame(n: int = 8) -> pd.DataFrame:
    ids = np.arange(n)
    return pd.DataFrame(
        {
            "id": ids,
            "p": np.where(ids % 2 == 0, "a", "b"),
            "q": ids % 3,
            "x": ids * 10,
            "s": [f"s{i % 4}" for i in ids],
        }
    )


# ---------------------------------------------------------------------------------------
# 1. round trip of every supported type
# ---------------------------------------------------------------------------------------


def type_frame() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "id": np.arange(5, dtype="int64"),
            "i8": np.array([-128, -1, 0, 1, 127], dtype="int8"),
            "i16": np.array([-32768, -1, 0, 1, 32767], dtype="int16"),
            "i32": np.array([-(2**31), -1, 0, 1, 2**31 - 1], dtype="int32"),
            "i64": np.array([-(2**63), -1, 0, 1, 2**63 - 1], dtype="int64"),
            "u8": np.array([0, 1, 2, 254, 255], dtype="uint8"),
            "u16": np.array([0, 1, 2, 65534, 65535], dtype="uint16"),
            "u32": np.array([0, 1, 2, 2**32 - 2, 2**32 - 1], dtype="uint32"),
            "u64": np.array([0, 1, 2**53 + 1, 2**63, 2**64 - 1], dtype="uint64"),
            "f32": np.array([1.5, -0.25, np.nan, np.inf, -np.inf], dtype="float32"),
            "f64": np.array([0.1, 1e-300, np.nan, np.inf, -np.inf], dtype="float64"),
            "b": [True, False, True, False, True],
            "nb": pd.array([True, None, False, None, True], dtype="boolean"),
            "s": ["a", "", "ü日本 ☃", "with space", "x/y=z%"],
            "ns": ["a", None, "", None, "z"],
            "by": [b"a", b"", b"\x00\xff", b"xyz", b"/"],
            "d": [dt.date(1970, 1, 1), dt.date(2024, 2, 29), dt.date(1900, 1, 1), dt.date(2200, 12, 31),
                  dt.date(2000, 1, 1)],
            "ts": ts_ns(["2024-01-01 00:00:00.000001", "1970-01-01", "1969-12-31 23:59:59.999999",
                         "2262-04-11", "2000-02-29 12:00"]),
            # UTC instants around both 2024 DST switches in Berlin (incl. the repeated hour)
            "tz": ts_ns(["2024-03-31 00:59:59.999999", "2024-03-31 01:00:00", "2024-10-27 00:30",
                         "2024-10-27 01:30", "2024-06-01 12:00:00.000007"], BERLIN),
            "ni": pd.array([1, None, -3, None, 2**62], dtype="Int64"),
            "l": [[1, 2], [], None, [-1], [2**62]],
            "cat": pd.Categorical(["x", "y", "x", None, "z"]),
        }
    )


def test_type_frame_input_dtypes_are_what_the_tests_claim():
    df = type_frame()
    assert df["s"].dtype == "str" and df["ns"].dtype == "str"  # pandas 3 default string dtype
    assert str(df["tz"].dtype) == f"datetime64[ns, {BERLIN}]"
    assert df["by"].dtype == object and df["d"].dtype == object


def test_round_trip_every_type(store_url):
    src = type_frame()
    kstore.store_dataset(store_url, "types", src)
    out = kstore.read_dataset(store_url, "types")
    assert list(out.columns) == list(src.columns)
    assert_read_equals(out, src, list_cols=["l"])
    # spot checks of the extreme values, independent of expected_read
    out = by_id(out)
    assert out["u64"].iloc[4] == np.uint64(2**64 - 1)
    assert out["i64"].iloc[0] == -(2**63)
    assert out["ts"].iloc[0] == pd.Timestamp("2024-01-01") + pd.Timedelta(microseconds=1)
    assert math.isnan(out["f32"].iloc[2]) and out["f32"].iloc[3] == np.inf and out["f64"].iloc[4] == -np.inf
    assert out["s"].iloc[1] == "" and pd.isna(out["ns"].iloc[1])
    assert out["ni"].iloc[1] is pd.NA and out["nb"].iloc[1] is pd.NA
    assert out["tz"].iloc[4] == pd.Timestamp("2024-06-01 14:00:00.000007", tz=BERLIN)
    assert type(out["by"].iloc[2]) is bytes and out["by"].iloc[2] == b"\x00\xff"


def test_round_trip_dates_as_object_and_categoricals(store_url):
    src = type_frame()
    kstore.store_dataset(store_url, "types", src)
    out = by_id(kstore.read_dataset(store_url, "types", dates_as_object=True, categoricals=["cat", "s"]))
    assert out["d"].dtype == object
    assert out["d"].tolist() == src["d"].tolist()
    assert all(type(v) is dt.date for v in out["d"])
    assert isinstance(out["cat"].dtype, pd.CategoricalDtype)
    assert out["cat"].astype(object).where(out["cat"].notna(), None).tolist() == ["x", "y", "x", None, "z"]
    assert isinstance(out["s"].dtype, pd.CategoricalDtype)
    assert out["s"].astype(str).tolist() == src["s"].tolist()


def test_round_trip_as_arrow_types(store_url):
    kstore.store_dataset(store_url, "types", type_frame())
    t = kstore.read_dataset(store_url, "types", as_arrow=True)
    assert isinstance(t, pa.Table)
    types = {f.name: f.type for f in t.schema}
    for c, want in (("i8", pa.int8()), ("i16", pa.int16()), ("i32", pa.int32()), ("i64", pa.int64()),
                    ("ni", pa.int64()), ("u8", pa.uint8()), ("u16", pa.uint16()), ("u32", pa.uint32()),
                    ("u64", pa.uint64())):
        assert types[c] == want, c
    assert types["f32"] == pa.float32() and types["f64"] == pa.float64()
    assert types["b"] == pa.bool_() and types["nb"] == pa.bool_()
    assert types["s"] == pa.string() and types["ns"] == pa.string() and types["cat"] == pa.string()
    assert types["by"] == pa.binary()
    assert types["d"] == pa.date32()
    assert types["ts"] == pa.timestamp("us")
    assert types["tz"] == pa.timestamp("us", BERLIN)
    assert pa.types.is_list(types["l"]) and types["l"].value_type == pa.int64()
    t = t.sort_by("id")
    assert t.column("u64").to_pylist()[4] == 2**64 - 1
    assert t.column("ts").cast(pa.int64()).to_pylist()[0] == pd.Timestamp("2024-01-01").value // 1000 + 1
    assert t.column("l").to_pylist() == [[1, 2], [], None, [-1], [2**62]]


def test_common_metadata_holds_normalized_types(store_url):
    kstore.store_dataset(store_url, "types", type_frame())
    schema = parquet_schema(store_url, "types/table/_common_metadata")
    types = {f.name: f.type for f in schema}
    assert types["i8"] == pa.int64() and types["u8"] == pa.uint64() and types["f32"] == pa.float64()
    assert types["ts"] == pa.timestamp("us") and types["tz"] == pa.timestamp("us", BERLIN)
    assert types["cat"] == pa.string() and types["d"] == pa.date32()
    assert kstore.read_schema(store_url, "types").names == list(type_frame().columns)


def test_timestamps_and_dates_at_the_extremes(store_url):
    """Open-ended validity (``valid_to = 9999-12-31``) and 0001-01-01: written, indexed,
    partitioned, filtered and read back exactly (microseconds, as Spark holds them)."""
    lo, hi = dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999999)
    utc = dt.timezone.utc
    src = pa.table({
        "id": [0, 1, 2, 3],
        "p": pa.array([dt.datetime(9999, 12, 31), dt.datetime(9999, 12, 31), lo, dt.datetime(2024, 1, 1)],
                      pa.timestamp("us")),
        "valid_to": pa.array([hi, dt.datetime(2024, 1, 1), lo, None], pa.timestamp("us")),
        "tz": pa.array([hi.replace(tzinfo=utc), lo.replace(tzinfo=utc), None, dt.datetime(1677, 9, 21, tzinfo=utc)],
                       pa.timestamp("us", "UTC")),
        "d": pa.array([dt.date(9999, 12, 31), dt.date(1, 1, 1), None, dt.date(2262, 4, 12)]),
    })
    kstore.store_dataset(store_url, "ext", src, partition_on=["p"], secondary_indices=["valid_to"])
    assert kstore.read_schema(store_url, "ext").field("valid_to").type == pa.timestamp("us")
    t = kstore.read_dataset(store_url, "ext", as_arrow=True).sort_by("id")
    assert t.select(src.column_names).equals(src)
    df = by_id(kstore.read_dataset(store_url, "ext"))
    assert df["valid_to"].dtype == "datetime64[us]" and df["d"].dtype == "datetime64[us]"
    assert df["valid_to"].iloc[0] == pd.Timestamp(hi) and df["d"].iloc[1] == pd.Timestamp("0001-01-01")
    assert by_id(kstore.read_dataset(store_url, "ext", dates_as_object=True))["d"].tolist()[:2] == [
        dt.date(9999, 12, 31), dt.date(1, 1, 1)]
    for pred, want in [
        ([("valid_to", "==", hi)], [0]),
        ([("valid_to", ">", dt.datetime(2262, 4, 12))], [0]),
        ([("valid_to", "<", "1677-09-21")], [2]),
        ([("valid_to", "in", [lo, hi])], [0, 2]),
        ([("p", "==", dt.datetime(9999, 12, 31))], [0, 1]),
        ([("p", "<", pd.Timestamp("1000-01-01"))], [2]),
        ([("tz", ">=", pd.Timestamp("9999-12-31", tz="UTC"))], [0]),
        ([("d", "==", "9999-12-31")], [0]),
        ([("d", "<", dt.date(1677, 9, 21))], [1]),
        ([("valid_to", "==", pd.Timestamp("2024-01-01 00:00:00.000000001"))], []),  # between microseconds
        ([("valid_to", "<=", pd.Timestamp("2024-01-01 00:00:00.000000001"))], [1, 2]),
    ]:
        assert sorted(kstore.read_dataset(store_url, "ext", predicates=[pred])["id"]) == want, pred
    frames = list(kstore.iter_dataset(store_url, "ext"))
    assert sorted(i for f in frames for i in f["id"]) == [0, 1, 2, 3]


@pytest.mark.parametrize("tz", [None, BERLIN])
def test_nanosecond_timestamps_are_refused_before_writing(store_url, all_keys, tz):
    """Microseconds hold what Spark and kartothek hold; a nanosecond value is refused with
    the column and the value named, and nothing is written (whole microseconds in a
    nanosecond dtype are fine)."""
    fine = pd.DataFrame({"id": [0, 1], "t": ts_ns(["2024-01-01 00:00:00.000001", "1969-12-31 23:59:59"], tz)})
    kstore.store_dataset(store_url, "fine", fine)
    assert_read_equals(kstore.read_dataset(store_url, "fine"), fine)
    before = all_keys(store_url)
    bad = pd.DataFrame({"id": [0, 1], "t": ts_ns(["2024-01-01", "2024-01-01 00:00:00.000000001"], tz)})
    with pytest.raises(UnsupportedTypeError, match=r"column 't' .* 0[01]:00:00\.000000001.*microseconds"):
        kstore.store_dataset(store_url, "bad", bad)
    assert all_keys(store_url) == before


# -- partition columns ---------------------------------------------------------------------

PARTITION_CASES = {
    "bool": pd.Series([True, False, True, False]),
    "int8": pd.Series([-128, 0, 127, 5], dtype="int8"),
    "int16": pd.Series([-32768, 0, 32767, 5], dtype="int16"),
    "int32": pd.Series([-(2**31), 0, 2**31 - 1, 5], dtype="int32"),
    "int64": pd.Series([-(2**63), 0, 2**63 - 1, -5], dtype="int64"),
    "uint8": pd.Series([0, 1, 255, 5], dtype="uint8"),
    "uint16": pd.Series([0, 1, 65535, 5], dtype="uint16"),
    "uint32": pd.Series([0, 1, 2**32 - 1, 5], dtype="uint32"),
    "uint64": pd.Series([0, 2**63, 2**64 - 1, 5], dtype="uint64"),
    "float32": pd.Series([1.5, -0.25, 3.4e38, 1e-7], dtype="float32"),
    "float64": pd.Series([0.1, -2.5, 1e-300, 1 / 3, np.inf, -np.inf, 2.0**60]),
    "string": pd.Series(["a/b", "c=d", "e%f", "sp ace", "ü 日本 ☃", " lead", "trail ", "", ".", "..",
                         "a+b", "~x", "%2F", "back\\slash", "q?&#", "new\nline", "'quote\"", "True"]),
    "bytes": pd.Series([b"a", b"b/c", b"\xff\x00", b"", b"'", b"=%"]),
    "date": pd.Series([dt.date(2024, 1, 1), dt.date(1970, 1, 1), dt.date(2099, 12, 31), dt.date(2000, 2, 29)]),
    "timestamp": ts_ns(["2024-01-01", "2024-01-01 12:34:56.123456", "1969-12-31 23:59:59", "2000-01-01 00:00:01"]),
    "timestamp_tz": ts_ns(["2024-03-31 00:30", "2024-10-27 00:30", "2024-10-27 01:30",
                           "2024-06-01 00:00:00.000001"], BERLIN),
    "timestamp_extremes": pd.Series([pd.Timestamp("0001-01-01"), pd.Timestamp("9999-12-31 23:59:59.999999"),
                                     pd.Timestamp("1677-09-21"), pd.Timestamp("2262-04-12")]),
    "date_extremes": pd.Series([dt.date(1, 1, 1), dt.date(9999, 12, 31), dt.date(1970, 1, 1)]),
    "categorical": pd.Series(pd.Categorical(["u", "v", "u", "w"])),
}


@pytest.mark.parametrize("case", list(PARTITION_CASES))
def test_partition_column_round_trip(store_url, case):
    values = PARTITION_CASES[case]
    src = pd.DataFrame({"id": np.arange(len(values)), "p": values, "v": np.arange(len(values)) * 2})
    meta = kstore.store_dataset(store_url, "part", src, partition_on="p")
    assert meta.partition_keys == ("p",)
    assert len(meta.partitions) == values.nunique()
    out = kstore.read_dataset(store_url, "part")
    assert list(out.columns) == ["p", "id", "v"]  # partition columns first
    assert_read_equals(out, src)
    # every label is `p=<quoted value>/<id>`: no raw '/', only unreserved chars and %XX
    for label in meta.partitions:
        parts = label.split("/")
        assert len(parts) == 2, label
        assert re.fullmatch(r"p=([A-Za-z0-9_.\-~]|%[0-9A-F]{2})*", parts[0]), label


@pytest.mark.parametrize("case", ["bool", "uint64", "string", "date", "timestamp_tz"])
def test_partition_column_predicate_equality_finds_each_value(store_url, case):
    values = PARTITION_CASES[case]
    src = pd.DataFrame({"id": np.arange(len(values)), "p": values})
    src["v"] = src["id"]
    kstore.store_dataset(store_url, "part", src, partition_on="p")
    exp = expected_read(src)
    for i, value in enumerate(values):
        lit = value.date() if isinstance(value, dt.datetime) and case == "date" else value
        out = kstore.read_dataset(store_url, "part", predicates=[[("p", "==", lit)]])
        assert sorted(out["id"]) == sorted(exp.index[exp["p"] == exp["p"].iloc[i]]), (case, value)


def test_partition_on_two_columns_with_awkward_values(store_url):
    src = pd.DataFrame(
        {
            "id": np.arange(6),
            "tz": ts_ns(["2024-10-27 00:30", "2024-10-27 01:30"] * 3, BERLIN),
            "s": ["a/b", "a/b", "c=d%", "c=d%", "x y", "x y"],
            "v": [1.0, 2.0, np.nan, 4.0, 5.0, 6.0],
        }
    )
    meta = kstore.store_dataset(store_url, "two", src, partition_on=["s", "tz"])
    assert meta.partition_keys == ("s", "tz")
    assert len(meta.partitions) == 6
    out = kstore.read_dataset(store_url, "two")
    assert list(out.columns) == ["s", "tz", "id", "v"]
    assert_read_equals(out, src)
    got = kstore.read_dataset(store_url, "two", predicates=[[("s", "==", "c=d%"), ("tz", "==", src["tz"][3])]])
    assert got["id"].tolist() == [3]


# ---------------------------------------------------------------------------------------
# 2. layout options: partition_on, secondary indices, metadata format, table name
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("partition_on", [[], ["p"], ["p", "q"]], ids=["0cols", "1col", "2cols"])
@pytest.mark.parametrize("fmt", ["json", "msgpack.zstd"])
def test_layouts(store_url, partition_on, fmt, dataset_keys, data_keys):
    src = simple_frame(12)
    meta = kstore.store_dataset(store_url, "lay", src, partition_on=partition_on, secondary_indices=["x", "s"],
                                metadata_format=fmt)
    assert meta.partition_keys == tuple(partition_on)
    assert sorted(meta.indices) == ["s", "x"]
    n_parts = len(src.groupby(partition_on)) if partition_on else 1
    assert len(meta.partitions) == n_parts
    keys = dataset_keys(store_url, "lay")
    main = {k for k in keys if "by-dataset-metadata" in k}
    other = "msgpack.zstd" if fmt == "json" else "json"
    assert main == {f"lay.by-dataset-metadata.{fmt}"}
    assert f"lay.by-dataset-metadata.{other}" not in keys
    assert "lay/table/_common_metadata" in keys
    assert len(data_keys(store_url, "lay")) == n_parts
    assert {k for k in keys if "/indices/" in k} == set(meta.indices.values())
    for col, key in meta.indices.items():
        assert key.startswith(f"lay/indices/{col}/") and key.endswith(".by-dataset-index.parquet")
    out = kstore.read_dataset(store_url, "lay")
    assert list(out.columns) == partition_on + [c for c in src.columns if c not in partition_on]
    assert_read_equals(out, src)
    got = kstore.read_dataset(store_url, "lay", predicates=[[("x", "==", 50)]])
    assert got["id"].tolist() == [5]
    got = kstore.read_dataset(store_url, "lay", predicates=[[("s", "==", "s1")]])
    assert sorted(got["id"]) == [1, 5, 9]


@pytest.mark.parametrize("fmt", ["json", "msgpack.zstd"])
def test_main_metadata_file_decodes_as_format(store_url, fmt):
    kstore.store_dataset(store_url, "fmt", simple_frame(), partition_on="p", metadata_format=fmt,
                         metadata={"owner": "me"})
    raw = kstore.open_store(store_url).get(f"fmt.by-dataset-metadata.{fmt}")
    if fmt == "json":
        d = json.loads(raw)
    else:
        d = msgpack.unpackb(zstandard.ZstdDecompressor().decompress(raw))
    assert d["dataset_metadata_version"] == 4
    assert d["dataset_uuid"] == "fmt"
    assert d["partition_keys"] == ["p"]
    assert d["metadata"]["owner"] == "me"
    assert len(d["partitions"]) == 2


def test_secondary_index_files_and_lookup(store_url):
    src = simple_frame(12)
    meta = kstore.store_dataset(store_url, "idx", src, partition_on="p", secondary_indices=["s", "x"])
    t = pq.read_table(io.BytesIO(kstore.open_store(store_url).get(meta.indices["s"])))
    assert t.column_names == ["s", "partition"]
    assert t.schema.field("s").type == pa.string()
    assert t.schema.field("partition").type == pa.list_(pa.string())
    index = dict(zip(t.column("s").to_pylist(), t.column("partition").to_pylist()))
    assert sorted(index) == ["s0", "s1", "s2", "s3"]
    p_of = {lab.split("/")[0]: lab for lab in meta.partitions}
    assert sorted(index["s1"]) == [p_of["p=b"]]  # ids 1, 5, 9 are odd -> p=b
    assert kstore.index_lookup(store_url, "idx", "s", "s1") == [p_of["p=b"]]
    assert kstore.index_lookup(store_url, "idx", "x", 40) == [p_of["p=a"]]
    assert kstore.index_lookup(store_url, "idx", "x", 41) == []
    assert kstore.index_lookup(store_url, "idx", "p", "b") == [p_of["p=b"]]  # partition index


def test_partition_column_in_secondary_indices_is_not_double_indexed(store_url):
    meta = kstore.store_dataset(store_url, "pi", simple_frame(), partition_on="p", secondary_indices=["p", "x"])
    assert sorted(meta.indices) == ["x"]


def test_table_name(store_url, data_keys, dataset_keys):
    src = simple_frame()
    meta = kstore.store_dataset(store_url, "tn", src, partition_on="p", table_name="events")
    assert meta.tables == ("events",)
    keys = dataset_keys(store_url, "tn")
    assert "tn/events/_common_metadata" in keys
    assert not any(k.startswith("tn/table/") for k in keys)
    assert all(k.startswith("tn/events/p=") for k in data_keys(store_url, "tn"))
    assert all(set(files) == {"events"} for files in meta.partitions.values())
    assert_read_equals(kstore.read_dataset(store_url, "tn"), src)
    assert_read_equals(kstore.read_dataset(store_url, "tn", table="events"), src)
    kstore.update_dataset(store_url, "tn", src.assign(id=src["id"] + 100))
    assert all(k.startswith("tn/events/") for k in data_keys(store_url, "tn"))
    assert len(kstore.read_dataset(store_url, "tn")) == 2 * len(src)


@pytest.mark.parametrize("fmt", ["json", "msgpack.zstd"])
def test_user_metadata_round_trip(store_url, fmt):
    user = {"owner": "me", "nested": {"a": [1, 2, 3], "b": None}, "unicode": "ü日本", "n": 1.5, "flag": True}
    kstore.store_dataset(store_url, "um", simple_frame(), metadata=user, metadata_format=fmt)
    meta = kstore.load_metadata(store_url, "um")
    assert {k: meta.metadata[k] for k in user} == user
    assert "creation_time" in meta.metadata  # as kartothek adds it
    kstore.update_dataset(store_url, "um", simple_frame().assign(id=lambda d: d["id"] + 50), metadata={"owner": "you"})
    meta = kstore.load_metadata(store_url, "um")
    assert meta.metadata["owner"] == "you" and meta.metadata["nested"] == user["nested"]
    assert kstore.open_store(store_url).exists(f"um.by-dataset-metadata.{fmt}")  # format kept by update


# ---------------------------------------------------------------------------------------
# 3. input forms
# ---------------------------------------------------------------------------------------


def _chunks(df: pd.DataFrame, n: int) -> list[pd.DataFrame]:
    bounds = np.linspace(0, len(df), n + 1).astype(int)
    return [df.iloc[a:b].reset_index(drop=True) for a, b in zip(bounds[:-1], bounds[1:])]


INPUT_FORMS = {
    "dataframe": lambda df: df,
    "table": lambda df: pa.Table.from_pandas(df, preserve_index=False),
    "record_batch": lambda df: pa.RecordBatch.from_pandas(df, preserve_index=False),
    "list_of_frames": lambda df: _chunks(df, 3),
    "list_of_tables": lambda df: [pa.Table.from_pandas(c, preserve_index=False) for c in _chunks(df, 3)],
    "mixed_list": lambda df: [c if i % 2 else pa.Table.from_pandas(c, preserve_index=False)
                              for i, c in enumerate(_chunks(df, 4))],
    "generator_50": lambda df: (c for c in _chunks(df, 50)),
    "generator_50_tables": lambda df: (pa.Table.from_pandas(c, preserve_index=False) for c in _chunks(df, 50)),
}


@pytest.mark.parametrize("form", list(INPUT_FORMS))
def test_input_forms_give_the_same_dataset(store_url, form):
    src = simple_frame(100)
    src["f"] = src["id"] * 0.5
    kstore.store_dataset(store_url, "ref", src, partition_on="p", secondary_indices="x")
    kstore.store_dataset(store_url, "inp", INPUT_FORMS[form](src), partition_on="p", secondary_indices="x")
    ref = by_id(kstore.read_dataset(store_url, "ref"))
    out = by_id(kstore.read_dataset(store_url, "inp"))
    pdt.assert_frame_equal(out, ref)
    assert_read_equals(out, src)
    assert kstore.read_schema(store_url, "inp").equals(kstore.read_schema(store_url, "ref"), check_metadata=False)
    got = kstore.read_dataset(store_url, "inp", predicates=[[("x", "in", [30, 990])]])
    assert sorted(got["id"]) == [3, 99]


@pytest.mark.parametrize("threads", [None, "1", "3"])
def test_generator_is_streamed_one_chunk_per_writer_thread(store_url, data_keys, monkeypatch, threads):
    """A chunk is pulled only while fewer chunks than writer threads are being written: at
    most one chunk per thread is in memory (``KSTORE_THREADS=1``: one chunk at a time, each
    written before the next is pulled); the files come back in the chunks' order."""
    if threads is None:
        monkeypatch.delenv(runtime.THREADS_ENV, raising=False)
    else:
        monkeypatch.setenv(runtime.THREADS_ENV, threads)
    window = runtime.pool_size(1 << 30, cpu_bound=True)
    src = simple_frame(200)
    seen = []

    def gen():
        for i, chunk in enumerate(_chunks(src, 50)):
            seen.append(len(data_keys(store_url, "stream")))
            assert i - window + 1 <= seen[-1] <= i, f"before chunk {i}: {seen[-1]} files written ({window} threads)"
            yield chunk

    meta = kstore.store_dataset(store_url, "stream", gen())
    if window == 1:
        assert seen == list(range(50))
    assert len(meta.partitions) == 50
    assert_read_equals(kstore.read_dataset(store_url, "stream"), src)
    # the files in the chunks' order: a read (plan order) gives the rows in the input's order
    assert kstore.read_dataset(store_url, "stream", columns=["id"])["id"].tolist() == src["id"].tolist()


def test_large_and_view_types_are_written_as_plain_types(store_url, dataset_keys):
    t = pa.table(
        {
            "id": pa.array([0, 1, 2, 3], pa.int64()),
            "p": pa.array(["u", "v", "u", "v"], pa.large_string()),
            "ls": pa.array(["a", "b", None, "ü"], pa.large_string()),
            "sv": pa.array(["x", None, "z", ""], pa.string_view()),
            "lb": pa.array([b"1", b"2", None, b""], pa.large_binary()),
            "ll": pa.array([[1], [2, 3], None, []], pa.large_list(pa.int64())),
            "lls": pa.array([["a"], [], None, ["b", None]], pa.large_list(pa.large_string())),
        }
    )
    kstore.store_dataset(store_url, "large", t, partition_on="p", secondary_indices=["ls", "sv"])
    keys = dataset_keys(store_url, "large")
    checked = 0
    for key in keys:
        if key.endswith("/_common_metadata") or (key.endswith(".parquet") and "/_kstore/" not in key):
            schema = parquet_schema(store_url, key)
            bad = [f"{f.name}: {f.type}" for f in schema if has_large_type(f.type)]
            assert not bad, f"{key} has large/view types {bad}"
            checked += 1
    assert checked == 1 + 2 + 2  # _common_metadata, 2 data files, 2 index files
    out = kstore.read_dataset(store_url, "large", as_arrow=True).sort_by("id")
    assert out.column("ls").type == pa.string() and out.column("sv").type == pa.string()
    assert out.column("lb").type == pa.binary() and out.column("ll").type == pa.list_(pa.int64())
    assert out.column("ls").to_pylist() == ["a", "b", None, "ü"]
    assert out.column("sv").to_pylist() == ["x", None, "z", ""]
    assert out.column("lb").to_pylist() == [b"1", b"2", None, b""]
    assert out.column("ll").to_pylist() == [[1], [2, 3], None, []]
    assert out.column("lls").to_pylist() == [["a"], [], None, ["b", None]]
    assert out.column("p").to_pylist() == ["u", "v", "u", "v"]
    got = kstore.read_dataset(store_url, "large", predicates=[[("sv", "==", "z")]])
    assert got["id"].tolist() == [2]


def test_pandas3_default_str_dtype_input(store_url, data_keys):
    src = pd.DataFrame({"id": [0, 1, 2], "s": ["a", None, "ü"], "p": ["k", "k", "m"]})
    assert src["s"].dtype == "str"
    assert pa.Table.from_pandas(src).schema.field("s").type in (pa.large_string(), pa.string())
    kstore.store_dataset(store_url, "str3", src, partition_on="p", secondary_indices="s")
    for key in data_keys(store_url, "str3"):
        assert parquet_schema(store_url, key).field("s").type == pa.string()
    assert parquet_schema(store_url, "str3/table/_common_metadata").field("s").type == pa.string()
    out = kstore.read_dataset(store_url, "str3")
    assert out["s"].dtype == "str" and out["p"].dtype == "str"
    assert_read_equals(out, src)


# ---------------------------------------------------------------------------------------
# 4. read_dataset: projection, predicates, output options, iteration
# ---------------------------------------------------------------------------------------

PRED_UUID = "preds"

LITERALS = {
    "p": ("b", ["a", "c/d", "zz"]),
    "q": (2, [1, 5]),
    "x": (3, [0, 6, 99]),
    "s": ("s2", ["s1", "s4", "nope"]),
    "v": (10.0, [0.5, 12.0, 13.5]),
    "w": ("w1", ["w0", "w3"]),
    "d": (dt.date(2024, 1, 20), [dt.date(2024, 1, 2), dt.date(2024, 2, 1)]),
    "t": (pd.Timestamp("2024-01-02 00:00:01"), [pd.Timestamp("2024-01-01 00:00:01"),
                                                 pd.Timestamp("2024-01-03 05:00:01")]),
}
OPS = ["==", "!=", "<", "<=", ">", ">=", "in", "not in", "is null", "is not null"]
_CMP = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
        ">=": operator.ge}
PARTITION_COLS = {"p", "q"}
INDEXED_COLS = {"x", "s"}


def _is_null(v) -> bool:
    return v is None or v is pd.NA or v is pd.NaT or (isinstance(v, float) and math.isnan(v))


def _term_ok(value, op, lit) -> bool:
    if op == "is null":
        return _is_null(value)
    if op == "is not null":
        return not _is_null(value)
    if _is_null(value):
        return False  # SQL semantics: comparisons never match a missing value
    if op == "in":
        return value in lit
    if op == "not in":
        return value not in lit
    return _CMP[op](value, lit)


def oracle_ids(df: pd.DataFrame, dnf) -> list[int]:
    """Row ids matching a DNF predicate, evaluated row by row in Python."""
    rows = df.astype(object).to_dict("records")
    return sorted(
        int(r["id"]) for r in rows if any(all(_term_ok(r[c], op, *(lit or (None,))) for c, op, *lit in conj)
                                          for conj in dnf)
    )


def _term(col, op):
    if op in ("is null", "is not null"):
        return (col, op)
    scalar, many = LITERALS[col]
    return (col, op, many if op in ("in", "not in") else scalar)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("col", list(LITERALS))
def test_predicates_every_operator(pred_store, pred_df, file_rows, col, op):
    pred = [[_term(col, op)]]
    expected = oracle_ids(pred_df, pred)
    out = kstore.read_dataset(pred_store, PRED_UUID, predicates=pred)
    assert sorted(out["id"].tolist()) == expected, (col, op)
    # rows are exact; the plan prunes: partition and index answers are exact per partition
    plan = kstore.plan_read(pred_store, PRED_UUID, predicates=pred)
    rows = file_rows(pred_store, PRED_UUID)
    needed = {rows[i] for i in expected}
    assert needed <= set(plan.labels), (col, op)
    if col in PARTITION_COLS or (col in INDEXED_COLS and op != "is null"):
        assert set(plan.labels) == needed, (col, op)


DNF_CASES = {
    "or_of_ands": [[("p", "==", "a"), ("x", ">", 2)], [("s", "in", ["s1"]), ("v", "<", 5.0)]],
    "flat_conjunction": [("q", "==", 1), ("w", "!=", "w1")],
    "nulls_or": [[("x", "is null")], [("s", "is null")]],
    "contradiction": [[("p", "in", ["a"]), ("p", "not in", ["a"])]],
    "index_and_partition": [[("x", "in", [1, 2]), ("q", "==", 2), ("s", "!=", "s3")]],
    "date_and_timestamp": [[("d", ">=", dt.date(2024, 1, 10)), ("t", "<", pd.Timestamp("2024-01-02 12:00"))]],
    "empty_in": [[("x", "in", [])]],
}


@pytest.mark.parametrize("case", list(DNF_CASES))
def test_predicates_dnf(pred_store, pred_df, case):
    pred = DNF_CASES[case]
    dnf = [pred] if isinstance(pred[0], tuple) else pred
    out = kstore.read_dataset(pred_store, PRED_UUID, predicates=pred)
    assert sorted(out["id"].tolist()) == oracle_ids(pred_df, dnf)


def test_empty_result_keeps_columns_and_dtypes(pred_store):
    full = kstore.read_dataset(pred_store, PRED_UUID)
    empty = kstore.read_dataset(pred_store, PRED_UUID, predicates=[[("x", "==", 12345)]])
    assert len(empty) == 0
    assert list(empty.columns) == list(full.columns)
    assert empty.dtypes.to_dict() == full.dtypes.to_dict()
    t = kstore.read_dataset(pred_store, PRED_UUID, predicates=[[("p", "==", "nope")]], as_arrow=True)
    assert t.num_rows == 0
    assert t.schema.names == list(full.columns)


def test_full_read_of_predicate_dataset(pred_store, pred_df):
    out = kstore.read_dataset(pred_store, PRED_UUID)
    assert list(out.columns) == ["p", "q", "id", "x", "s", "v", "w", "d", "t"]
    assert_read_equals(out, pred_df)


def test_predicate_literal_forms(pred_store, pred_df):
    """Date columns accept ISO strings, datetimes at midnight and numpy/pandas scalars."""
    ref = kstore.read_dataset(pred_store, PRED_UUID, predicates=[[("d", "==", dt.date(2024, 1, 20))]])
    assert ref["id"].tolist() == [19]
    for lit in ("2024-01-20", pd.Timestamp("2024-01-20"), dt.datetime(2024, 1, 20)):
        got = kstore.read_dataset(pred_store, PRED_UUID, predicates=[[("d", "==", lit)]])
        assert got["id"].tolist() == [19], lit
    got = kstore.read_dataset(pred_store, PRED_UUID, predicates=[[("x", "==", np.int64(3))]])
    assert sorted(got["id"]) == oracle_ids(pred_df, [[("x", "==", 3)]])
    got = kstore.read_dataset(pred_store, PRED_UUID, predicates=[[("q", "==", 2.0)]])
    assert sorted(got["id"]) == oracle_ids(pred_df, [[("q", "==", 2)]])


def test_columns_projection_keeps_order(pred_store, pred_df):
    cols = ["w", "id", "p", "x", "d"]
    out = kstore.read_dataset(pred_store, PRED_UUID, columns=cols)
    assert list(out.columns) == cols
    assert_read_equals(out, pred_df[cols])
    # projection + a predicate on a column that is not projected
    out = kstore.read_dataset(pred_store, PRED_UUID, columns=["id"], predicates=[[("s", "==", "s2"), ("q", "==", 1)]])
    assert list(out.columns) == ["id"]
    assert sorted(out["id"]) == oracle_ids(pred_df, [[("s", "==", "s2"), ("q", "==", 1)]])
    t = kstore.read_dataset(pred_store, PRED_UUID, columns=["q", "s"], as_arrow=True)
    assert t.schema.names == ["q", "s"]


@pytest.mark.parametrize("pred", [None, [[("s", "==", "s2"), ("q", "==", 1)]], [[("p", "==", "a")]]],
                         ids=["all", "plain-column", "partition-column"])
def test_no_columns_still_counts_rows(pred_store, pred_df, pred):
    """``columns=[]`` reads no column but every matching row (a row count), in every read call."""
    want = len(oracle_ids(pred_df, pred)) if pred else len(pred_df)
    assert kstore.read_dataset(pred_store, PRED_UUID, columns=[], predicates=pred).shape == (want, 0)
    t = kstore.read_dataset(pred_store, PRED_UUID, columns=[], predicates=pred, as_arrow=True)
    assert (t.num_rows, t.num_columns) == (want, 0)
    t = kstore.read_table(pred_store, PRED_UUID, columns=[], predicates=pred)
    assert (t.num_rows, t.num_columns) == (want, 0)
    frames = list(kstore.iter_dataset(pred_store, PRED_UUID, columns=[], predicates=pred))
    assert sum(len(f) for f in frames) == want and all(f.shape[1] == 0 for f in frames)


def test_as_arrow_equals_pandas_read(pred_store):
    pred = [[("x", ">=", 2)]]
    t = kstore.read_dataset(pred_store, PRED_UUID, predicates=pred, as_arrow=True)
    df = kstore.read_dataset(pred_store, PRED_UUID, predicates=pred)
    assert isinstance(t, pa.Table)
    assert t.schema.field("d").type == pa.date32() and t.schema.field("t").type == pa.timestamp("us")
    assert t.schema.field("x").type == pa.int64() and t.schema.field("q").type == pa.int64()
    assert sorted(t.column("id").to_pylist()) == sorted(df["id"].tolist())
    rt = kstore.read_table(pred_store, PRED_UUID, predicates=pred)
    assert rt.sort_by("id").equals(t.sort_by("id"))


def test_read_table(pred_store, pred_df):
    t = kstore.read_table(pred_store, PRED_UUID)
    assert isinstance(t, pa.Table) and t.num_rows == len(pred_df)
    t = kstore.read_table(pred_store, PRED_UUID, columns=["id", "s"], predicates=[[("s", "in", ["s1", "s3"])]])
    assert t.schema.names == ["id", "s"]
    assert sorted(t.column("id").to_pylist()) == oracle_ids(pred_df, [[("s", "in", ["s1", "s3"])]])


def test_read_categoricals(pred_store, pred_df):
    out = kstore.read_dataset(pred_store, PRED_UUID, categoricals=["p", "s", "w"])
    for c in ("p", "s", "w"):
        assert isinstance(out[c].dtype, pd.CategoricalDtype), c
    out = by_id(out)
    assert out["p"].astype(str).tolist() == pred_df["p"].tolist()
    assert [None if pd.isna(v) else v for v in out["s"]] == [None if pd.isna(v) else v for v in pred_df["s"]]
    assert isinstance(out["x"].dtype, pd.Int64Dtype)


def test_dates_as_object(pred_store, pred_df):
    out = by_id(kstore.read_dataset(pred_store, PRED_UUID, dates_as_object=True))
    assert out["d"].dtype == object and out["d"].tolist() == pred_df["d"].tolist()
    assert out["t"].dtype == "datetime64[us]"  # only dates change
    out = kstore.read_dataset(pred_store, PRED_UUID)
    assert out["d"].dtype == "datetime64[us]"


def test_iter_dataset_yields_one_frame_per_partition(pred_store, pred_df):
    meta = kstore.load_metadata(pred_store, PRED_UUID)
    frames = list(kstore.iter_dataset(pred_store, PRED_UUID))
    assert len(frames) == len(meta.partitions) == 12  # 6 partition values x 2 chunks
    for f in frames:
        assert isinstance(f, pd.DataFrame) and len(f) > 0
        assert f["p"].nunique() == 1 and f["q"].nunique() == 1
    assert_read_equals(pd.concat(frames, ignore_index=True), pred_df)
    # with a predicate: only planned, non-empty partitions; rows exact
    pred = [[("q", "==", 1), ("x", "==", 3)]]
    frames = list(kstore.iter_dataset(pred_store, PRED_UUID, predicates=pred, columns=["id", "q"]))
    assert all(len(f) > 0 and list(f.columns) == ["id", "q"] for f in frames)
    assert sorted(pd.concat(frames)["id"]) == oracle_ids(pred_df, pred)
    tables = list(kstore.iter_dataset(pred_store, PRED_UUID, as_arrow=True, predicates=[[("p", "==", "a")]]))
    assert len(tables) == 4 and all(isinstance(t, pa.Table) for t in tables)


def test_iter_dataset_frames_share_dtypes(store_url):
    """A null in one file only: every frame of ``iter_dataset`` reads the int/bool columns
    as Int64/boolean (and the null-free file's frame too); values exact."""
    first = pa.table({"id": [0, 1], "n": pa.array([1, 2 ** 40]), "bo": pa.array([True, False])})
    second = pa.table({"id": [2, 3], "n": pa.array([None, 4], pa.int64()), "bo": pa.array([None, False])})
    kstore.store_dataset(store_url, "nulls", [first, second])
    frames = list(kstore.iter_dataset(store_url, "nulls"))
    assert len(frames) == 2
    assert all(f.dtypes.to_dict() == {"id": np.dtype("int64"), "n": pd.Int64Dtype(), "bo": pd.BooleanDtype()}
               for f in frames)
    got = by_id(pd.concat(frames, ignore_index=True))
    assert [None if v is pd.NA else v for v in got["n"]] == [1, 2 ** 40, None, 4]
    assert [None if v is pd.NA else v for v in got["bo"]] == [True, False, None, False]
    assert int((got["bo"] == False).sum()) == 2  # noqa: E712
    # the eager read: one frame, the same dtypes
    assert kstore.read_dataset(store_url, "nulls").dtypes.to_dict() == frames[0].dtypes.to_dict()


def test_plan_read_prunes_by_partition_and_index(pred_store, pred_df, file_rows):
    plan = kstore.plan_read(pred_store, PRED_UUID)
    assert plan.n_files == 12 and len(plan.tasks) == 12
    plan = kstore.plan_read(pred_store, PRED_UUID, predicates=[[("p", "==", "c/d"), ("x", "==", 4)]])
    rows = file_rows(pred_store, PRED_UUID)
    assert set(plan.labels) == {rows[i] for i in oracle_ids(pred_df, [[("p", "==", "c/d"), ("x", "==", 4)]])}
    assert all(lab.startswith("p=c%2Fd/") for lab in plan.labels)


# ---------------------------------------------------------------------------------------
# 5. errors: KstoreError subclasses naming the culprit; failing writes leave nothing behind
# ---------------------------------------------------------------------------------------


def raises(exc_type, *needles):
    """pytest.raises that also checks the class is a KstoreError and the message names things."""

    class _Check:
        def __enter__(self):
            self.ctx = pytest.raises(exc_type)
            self.info = self.ctx.__enter__()
            return self.info

        def __exit__(self, *exc):
            suppressed = self.ctx.__exit__(*exc)
            if not suppressed:  # another exception type: let it propagate unchanged
                return suppressed
            assert isinstance(self.info.value, KstoreError), type(self.info.value).__mro__
            msg = str(self.info.value)
            for needle in needles:
                assert str(needle) in msg, f"{needle!r} not in error message {msg!r}"
            return suppressed

    return _Check()


def snapshot(url: str, uuid: str):
    """(keys of the dataset, sorted rows) to compare before and after a failing write."""
    st = kstore.open_store(url)
    keys = set(st.iter_prefix(uuid + "/")) | {k for k in st.iter_prefix(uuid + ".") if "/" not in k}
    try:
        rows = by_id(kstore.read_dataset(url, uuid))
    except DatasetNotFoundError:
        rows = None
    return keys, rows


def assert_unchanged(url: str, uuid: str, before) -> None:
    keys, rows = snapshot(url, uuid)
    assert keys == before[0], f"keys changed: +{sorted(keys - before[0])} -{sorted(before[0] - keys)}"
    if before[1] is None:
        assert rows is None
    else:
        pdt.assert_frame_equal(rows, before[1])


READ_CALLS = {
    "read_dataset": lambda url, u: kstore.read_dataset(url, u),
    "read_table": lambda url, u: kstore.read_table(url, u),
    "iter_dataset": lambda url, u: next(iter(kstore.iter_dataset(url, u))),
    "plan_read": lambda url, u: kstore.plan_read(url, u),
    "load_metadata": lambda url, u: kstore.load_metadata(url, u),
    "read_schema": lambda url, u: kstore.read_schema(url, u),
    "index_lookup": lambda url, u: kstore.index_lookup(url, u, "x", 1),
    "update_dataset": lambda url, u: kstore.update_dataset(url, u, simple_frame()),
}


@pytest.mark.parametrize("call", list(READ_CALLS))
def test_dataset_not_found(store_url, call, all_keys):
    kstore.store_dataset(store_url, "other", simple_frame())
    before = all_keys(store_url)
    with raises(DatasetNotFoundError, "'missing'"):
        READ_CALLS[call](store_url, "missing")
    assert all_keys(store_url) == before


@pytest.mark.parametrize("call", ["read_dataset", "plan_read", "load_metadata"])
def test_dataset_not_found_message_is_readable(store_url, call):
    """The message must not leak the repr of kstore's internal store wrappers."""
    with pytest.raises(DatasetNotFoundError) as info:
        READ_CALLS[call](store_url, "missing")
    assert "object at 0x" not in str(info.value), str(info.value)


def test_store_existing_dataset_without_overwrite(store_url):
    kstore.store_dataset(store_url, "ds", simple_frame(), partition_on="p", secondary_indices="x")
    before = snapshot(store_url, "ds")
    with raises(DatasetExistsError, "'ds'", "mode='overwrite'"):
        kstore.store_dataset(store_url, "ds", simple_frame(4).assign(id=[7, 8, 9, 10]), partition_on="p")
    assert_unchanged(store_url, "ds", before)


def test_overwrite_replaces_the_data(store_url):
    kstore.store_dataset(store_url, "ds", simple_frame(), partition_on="p", secondary_indices="x",
                         metadata={"k": 1})
    new = pd.DataFrame({"id": [100, 101], "q": [5, 6], "z": ["n", "m"]})
    meta = kstore.store_dataset(store_url, "ds", new, partition_on="q", mode="overwrite",
                                schema_mode="overwrite")
    assert meta.partition_keys == ("q",)
    assert meta.version == 1
    assert meta.metadata["k"] == 1  # the user metadata stays (as Delta keeps a table's configuration)
    assert not meta.indices
    out = kstore.read_dataset(store_url, "ds")
    assert list(out.columns) == ["q", "id", "z"]
    assert_read_equals(out, new)
    assert kstore.read_schema(store_url, "ds").names == ["q", "id", "z"]
    assert all(lab.startswith("q=") for lab in kstore.load_metadata(store_url, "ds").partitions)


@pytest.mark.parametrize("where", ["columns", "partition_on", "secondary_indices", "predicates", "categoricals"])
def test_unknown_column(store_url, where, all_keys):
    kstore.store_dataset(store_url, "ds", simple_frame(), partition_on="p", secondary_indices="x")
    before = all_keys(store_url)
    with raises(ColumnNotFoundError, "'nope'"):
        if where == "columns":
            kstore.read_dataset(store_url, "ds", columns=["id", "nope"])
        elif where == "partition_on":
            kstore.store_dataset(store_url, "new", simple_frame(), partition_on=["p", "nope"])
        elif where == "secondary_indices":
            kstore.store_dataset(store_url, "new", simple_frame(), secondary_indices=["x", "nope"])
        elif where == "predicates":
            kstore.read_dataset(store_url, "ds", predicates=[[("id", ">", 1)], [("nope", "==", 1)]])
        else:
            kstore.read_dataset(store_url, "ds", categoricals=["nope"])
    assert all_keys(store_url) == before


def test_unknown_column_in_read_table_and_iter(store_url):
    kstore.store_dataset(store_url, "ds", simple_frame())
    with raises(ColumnNotFoundError, "'nope'"):
        kstore.read_table(store_url, "ds", columns=["nope"])
    with raises(ColumnNotFoundError, "'nope'"):
        list(kstore.iter_dataset(store_url, "ds", predicates=[[("nope", "is null")]]))


@pytest.mark.parametrize(
    "col, lit",
    [("x", "10"), ("s", 1), ("p", 1), ("q", "one"), ("x", True), ("d", "not a date"), ("p", None)],
)
def test_bad_predicate_literal(store_url, col, lit):
    df = simple_frame()
    df["d"] = [dt.date(2024, 1, i + 1) for i in range(len(df))]
    kstore.store_dataset(store_url, "ds", df, partition_on=["p", "q"], secondary_indices=["s"])
    with raises(InvalidPredicateError, repr(col)):
        kstore.read_dataset(store_url, "ds", predicates=[[(col, "==", lit)]])
    if lit is not None:
        with raises(InvalidPredicateError, repr(col), repr(lit)):
            kstore.read_dataset(store_url, "ds", predicates=[[(col, "in", [lit])]])


@pytest.mark.parametrize("pred", [[[("x", "~", 1)]], [[("x",)]], "x == 1", [[("x", "in", 5)]], [[]]])
def test_malformed_predicate(store_url, pred):
    kstore.store_dataset(store_url, "ds", simple_frame())
    with raises(InvalidPredicateError):
        kstore.read_dataset(store_url, "ds", predicates=pred)


UNSUPPORTED = {
    "time64": lambda: pa.table({"id": [1, 2], "bad": pa.array([1, 2], pa.time64("us"))}),
    "duration": lambda: pd.DataFrame({"id": [1, 2], "bad": pd.to_timedelta([1, 2], unit="s")}),
    "interval": lambda: pa.table({"id": [1, 2], "bad": pa.array([(1, 2, 3), (4, 5, 6)], pa.month_day_nano_interval())}),
    "map": lambda: pa.table({"id": [1, 2], "bad": pa.array([[("a", 1)], []], pa.map_(pa.string(), pa.int64()))}),
}


@pytest.mark.parametrize("kind", list(UNSUPPORTED))
def test_unsupported_type(store_url, kind, all_keys):
    with raises(UnsupportedTypeError, "'bad'"):
        kstore.store_dataset(store_url, "ds", UNSUPPORTED[kind]())
    assert all_keys(store_url) == set()


def test_unsupported_type_in_a_later_chunk_leaves_nothing(store_url, all_keys):
    def gen():
        yield pa.table({"id": [1, 2], "bad": pa.array([1, 2], pa.int64())})
        yield pa.table({"id": [3], "bad": pa.array([1], pa.time64("us"))})

    with raises(UnsupportedTypeError, "'bad'", "time64"):
        kstore.store_dataset(store_url, "ds", gen())
    assert all_keys(store_url) == set()


@pytest.mark.parametrize("what", ["partition_on", "secondary_indices"])
def test_unsupported_partition_or_index_type(store_url, what, all_keys):
    df = pd.DataFrame({"id": [1, 2], "l": [[1], [2]]})
    with raises(UnsupportedTypeError, "'l'"):
        kstore.store_dataset(store_url, "ds", df, **{what: "l"})
    assert all_keys(store_url) == set()


@pytest.mark.parametrize("uuid", ["../x", "a/b", "", "/abs", ".hidden", "x/../../y", "a\\b",
                                  "x.by-dataset-metadata", 5])
def test_bad_dataset_uuid(store_url, uuid, all_keys, tmp_path):
    before = set(tmp_path.parent.iterdir())
    with raises(InvalidKeyError, repr(uuid)):
        kstore.store_dataset(store_url, uuid, simple_frame())
    with raises(InvalidKeyError, repr(uuid)):
        kstore.read_dataset(store_url, uuid)
    with raises(InvalidKeyError, repr(uuid)):
        kstore.update_dataset(store_url, uuid, simple_frame())
    assert all_keys(store_url) == set()
    assert set(tmp_path.parent.iterdir()) == before  # nothing written next to the store either


@pytest.mark.parametrize("name", ["a/b", "..", ""])
def test_bad_table_name(store_url, name, all_keys):
    with raises(InvalidKeyError, repr(name)):
        kstore.store_dataset(store_url, "ds", simple_frame(), table_name=name)
    assert all_keys(store_url) == set()


@pytest.mark.parametrize("fmt", ["yaml", "msgpack", "JSON", ""])  # None: the default (JSON, or the format kept)
def test_bad_metadata_format(store_url, fmt, all_keys):
    with raises(InvalidArgumentError, repr(fmt)):
        kstore.store_dataset(store_url, "ds", simple_frame(), metadata_format=fmt)
    assert all_keys(store_url) == set()


@pytest.mark.parametrize("null", [None, np.nan, pd.NaT])
def test_null_in_partition_column(store_url, null, all_keys):
    df = simple_frame()
    if null is pd.NaT:
        df["p"] = pd.Series(pd.to_datetime(["2024-01-01"] * len(df))).astype("datetime64[ns]")
    elif null is not None:
        df["p"] = df["q"].astype(float)
    df.loc[3, "p"] = null
    with raises(InvalidArgumentError, "'p'", "null"):
        kstore.store_dataset(store_url, "ds", df, partition_on="p")
    assert all_keys(store_url) == set()


def test_null_in_partition_column_of_a_later_chunk_leaves_nothing(store_url, all_keys):
    good = simple_frame()
    bad = simple_frame().assign(p=["a", None, "b", "b", "a", "a", "b", "b"])
    with raises(InvalidArgumentError, "'p'"):
        kstore.store_dataset(store_url, "ds", iter([good, good, bad]), partition_on="p", secondary_indices="x")
    assert all_keys(store_url) == set()


def test_schema_mismatch_between_chunks_leaves_nothing(store_url, all_keys):
    df = simple_frame()
    with raises(SchemaMismatchError, "'x'", "int64", "string"):
        kstore.store_dataset(store_url, "ds", iter([df, df.assign(x=df["x"].astype(str))]), partition_on="p")
    assert all_keys(store_url) == set()


def test_error_raised_by_the_input_generator_leaves_nothing(store_url, all_keys):
    def gen():
        yield simple_frame()
        raise RuntimeError("upstream failed")

    with pytest.raises(RuntimeError, match="upstream failed"):
        kstore.store_dataset(store_url, "ds", gen(), partition_on="p")
    assert all_keys(store_url) == set()


def test_failed_overwrite_keeps_the_old_dataset(store_url):
    kstore.store_dataset(store_url, "ds", simple_frame(), partition_on="p", secondary_indices="x")
    before = snapshot(store_url, "ds")
    bad = simple_frame().assign(p=["a", "b", None, "a", "b", "a", "b", "a"])
    with raises(InvalidArgumentError, "'p'", "null"):
        kstore.store_dataset(store_url, "ds", [simple_frame(), bad], partition_on="p", mode="overwrite")
    assert_unchanged(store_url, "ds", before)


@pytest.mark.parametrize("fmt", ["json", "msgpack.zstd"])
@pytest.mark.parametrize("garbage", [b"\x00garbage\xff{", b"", b"[1, 2]", b'{"dataset_metadata_version": 4}'])
def test_corrupt_main_metadata_file(store_url, fmt, garbage):
    """The log is the truth for a versioned dataset: a damaged main file does not stop kstore
    (reads follow the log, the next commit writes a good main file again). Without a log (a
    kartothek dataset) the damage is a clear CorruptMetadataError, and nothing is written."""
    kstore.store_dataset(store_url, "ds", simple_frame(), partition_on="p", metadata_format=fmt)
    st = kstore.open_store(store_url)
    main = f"ds.by-dataset-metadata.{fmt}"
    expected = kstore.read_dataset(store_url, "ds")
    st.put(main, garbage)
    assert kstore.read_dataset(store_url, "ds").equals(expected)
    assert kstore.update_dataset(store_url, "ds", simple_frame()).version == 1
    assert load.load_main(st, "ds")[0].version == 1  # repaired by the commit
    assert len(kstore.read_dataset(store_url, "ds")) == 2 * len(expected)
    # unversioned (no log): nothing to fall back to
    for key in list(st.iter_prefix(naming.log_prefix("ds"))):
        st.delete(key)
    st.put(main, garbage)
    before = set(st.iter_prefix("ds"))
    for call in ("read_dataset", "load_metadata", "plan_read", "update_dataset"):
        with raises(CorruptMetadataError, "'ds'"):
            READ_CALLS[call](store_url, "ds")
    assert set(st.iter_prefix("ds")) == before  # the failed update wrote nothing


def test_corrupt_checkpoint(store_url, caplog):
    """A damaged checkpoint is derived data: it is logged, naming it, and read around (the
    creating entry holds the whole state; #29 item 5, tests/drivers/test_damaged_checkpoint.py);
    kartothek's index files are not read by kstore (the index values travel in the
    checkpoint), so damage there does not change kstore's answers."""
    meta = kstore.store_dataset(store_url, "ds", simple_frame(), partition_on="p", secondary_indices="x")
    st = kstore.open_store(store_url)
    st.put(meta.indices["x"], b"not parquet")
    expected = kstore.read_dataset(store_url, "ds", predicates=[[("x", "==", 10)]])
    assert len(expected) == 1
    st.put(naming.checkpoint_key("ds", 0), b"not parquet")
    with caplog.at_level("WARNING", logger="kstore.load"):
        got = kstore.read_dataset(store_url, "ds", predicates=[[("x", "==", 10)]])
    pd.testing.assert_frame_equal(got, expected)
    assert any("'ds'" in r.getMessage() and naming.checkpoint_key("ds", 0) in r.getMessage()
               for r in caplog.records if r.name == "kstore.load")


def test_corrupt_or_missing_data_file(store_url):
    meta = kstore.store_dataset(store_url, "ds", simple_frame(), partition_on="p")
    label = sorted(meta.partitions)[0]
    key = meta.partitions[label]["table"]
    st = kstore.open_store(store_url)
    st.put(key, b"PAR1 garbage")
    with raises(CorruptMetadataError, key):
        kstore.read_dataset(store_url, "ds")
    st.delete(key)
    with raises(CorruptMetadataError, key):
        kstore.read_dataset(store_url, "ds")


# ---------------------------------------------------------------------------------------
# 6. update_dataset
# ---------------------------------------------------------------------------------------


def test_update_append(store_url, data_keys):
    first = simple_frame(8)
    second = simple_frame(8).assign(id=lambda d: d["id"] + 100, p=["b", "c"] * 4, x=lambda d: d["x"] + 1000)
    m0 = kstore.store_dataset(store_url, "ds", first, partition_on="p", secondary_indices=["x", "s"])
    keys0 = data_keys(store_url, "ds")
    m1 = kstore.update_dataset(store_url, "ds", second)
    assert m1.version == m0.version + 1
    assert set(m0.partitions) < set(m1.partitions)
    assert keys0 < data_keys(store_url, "ds")
    assert_read_equals(kstore.read_dataset(store_url, "ds"), pd.concat([first, second]))
    # indices cover the new partitions
    got = kstore.read_dataset(store_url, "ds", predicates=[[("x", "==", 1030)]])
    assert got["id"].tolist() == [103]
    labels = kstore.index_lookup(store_url, "ds", "s", "s1")  # ids 1, 5 (p=b) and 101, 105 (p=c)
    assert len(labels) == 2 and {lab.split("/")[0] for lab in labels} == {"p=b", "p=c"}
    assert set(labels) <= set(m1.partitions) and set(labels) - set(m0.partitions)
    got = kstore.read_dataset(store_url, "ds", predicates=[[("p", "==", "c")]])
    assert sorted(got["id"]) == [101, 103, 105, 107]


def test_update_append_list_and_generator(store_url):
    base = simple_frame(4)
    kstore.store_dataset(store_url, "ds", base, partition_on="p")
    more = [simple_frame(4).assign(id=lambda d, k=k: d["id"] + 10 * k) for k in range(1, 6)]
    kstore.update_dataset(store_url, "ds", (m for m in more))
    assert_read_equals(kstore.read_dataset(store_url, "ds"), pd.concat([base, *more]))


def test_update_delete_scope(store_url, data_keys):
    src = simple_frame(12)
    kstore.store_dataset(store_url, "ds", src, partition_on=["p", "q"], secondary_indices="x")
    m = kstore.update_dataset(store_url, "ds", delete_scope=[{"p": "a", "q": 0}, {"q": 2}])
    keep = src[~(((src["p"] == "a") & (src["q"] == 0)) | (src["q"] == 2))]
    assert_read_equals(kstore.read_dataset(store_url, "ds"), keep)
    assert all(not lab.startswith(("p=a/q=0/",)) and "/q=2/" not in lab for lab in m.partitions)
    # the index forgot the removed partitions
    assert kstore.read_dataset(store_url, "ds", predicates=[[("x", "==", 0)]]).empty
    assert kstore.index_lookup(store_url, "ds", "x", 0) == []
    # delete_scope with new data in the same commit
    new = pd.DataFrame({"id": [500], "p": ["b"], "q": [1], "x": [5000], "s": ["n"]})
    kstore.update_dataset(store_url, "ds", new, delete_scope=[{"p": "b"}])
    keep2 = pd.concat([keep[keep["p"] != "b"], new])
    assert_read_equals(kstore.read_dataset(store_url, "ds"), keep2)


def test_update_delete_scope_typed_partition_values(store_url):
    src = pd.DataFrame({"id": range(6), "d": [dt.date(2024, 1, 1 + i % 3) for i in range(6)],
                        "b": [True, False] * 3, "v": range(6)})
    kstore.store_dataset(store_url, "ds", src, partition_on=["d", "b"])
    kstore.update_dataset(store_url, "ds", delete_scope=[{"d": dt.date(2024, 1, 2)}, {"b": False, "d": "2024-01-3"}])
    keep = src[~((src["d"] == dt.date(2024, 1, 2)) | (~src["b"] & (src["d"] == dt.date(2024, 1, 3))))]
    assert_read_equals(kstore.read_dataset(store_url, "ds"), keep)


def test_update_delete_scope_on_a_non_partition_column_fails(store_url):
    kstore.store_dataset(store_url, "ds", simple_frame(), partition_on="p")
    before = snapshot(store_url, "ds")
    with raises(InvalidArgumentError, "'x'"):
        kstore.update_dataset(store_url, "ds", delete_scope=[{"x": 10}])
    assert_unchanged(store_url, "ds", before)


def test_update_overwrite_partitions(store_url):
    src = simple_frame(8)
    kstore.store_dataset(store_url, "ds", src, partition_on="p", secondary_indices="x")
    new = pd.DataFrame({"id": [100, 101], "p": ["a", "c"], "q": [9, 9], "x": [-1, -2], "s": ["n", "m"]})
    kstore.update_dataset(store_url, "ds", new, mode="overwrite_partitions")
    expected = pd.concat([src[src["p"] == "b"], new])
    assert_read_equals(kstore.read_dataset(store_url, "ds"), expected)
    assert kstore.read_dataset(store_url, "ds", predicates=[[("x", "==", 0)]]).empty  # old p=a rows gone
    assert kstore.read_dataset(store_url, "ds", predicates=[[("x", "==", -1)]])["id"].tolist() == [100]


def test_update_schema_merge_adds_a_column(store_url):
    src = simple_frame(4)
    kstore.store_dataset(store_url, "ds", src, partition_on="p")
    new = simple_frame(4).assign(id=lambda d: d["id"] + 10, extra=[1.5, 2.5, 3.5, 4.5],
                                 tag=["u", None, "w", "x"])
    kstore.update_dataset(store_url, "ds", new, schema_mode="merge")
    schema = kstore.read_schema(store_url, "ds")
    assert schema.names == ["p", "id", "q", "x", "s", "extra", "tag"]
    assert schema.field("extra").type == pa.float64() and schema.field("tag").type == pa.string()
    out = by_id(kstore.read_dataset(store_url, "ds"))
    old = out[out["id"] < 10]
    assert old["extra"].isna().all() and old["tag"].isna().all()
    assert out.loc[out["id"] >= 10, "extra"].tolist() == [1.5, 2.5, 3.5, 4.5]
    expected = pd.concat([src, new], ignore_index=True)
    assert_read_equals(out, expected)
    got = kstore.read_dataset(store_url, "ds", predicates=[[("extra", "is null")]])
    assert sorted(got["id"]) == [0, 1, 2, 3]


@pytest.mark.parametrize("mode", ["strict", "merge"])
def test_update_schema_mismatch(store_url, mode):
    kstore.store_dataset(store_url, "ds", simple_frame(), partition_on="p", secondary_indices="x")
    before = snapshot(store_url, "ds")
    bad = simple_frame().assign(x=lambda d: d["x"].astype(str))
    with raises(SchemaMismatchError, "'x'", "int64", "string"):
        kstore.update_dataset(store_url, "ds", bad, schema_mode=mode)
    assert_unchanged(store_url, "ds", before)
    # the mismatch only in a later chunk: the files of the earlier chunks are removed again
    with raises(SchemaMismatchError, "'x'", "int64", "string"):
        kstore.update_dataset(store_url, "ds", iter([simple_frame(), simple_frame(), bad]), schema_mode=mode)
    assert_unchanged(store_url, "ds", before)


def test_update_strict_rejects_new_or_missing_columns(store_url):
    kstore.store_dataset(store_url, "ds", simple_frame(), partition_on="p")
    before = snapshot(store_url, "ds")
    with raises(SchemaMismatchError, "'extra'"):
        kstore.update_dataset(store_url, "ds", simple_frame().assign(extra=1))
    with raises(SchemaMismatchError, "'s'"):
        kstore.update_dataset(store_url, "ds", simple_frame().drop(columns="s"))
    assert_unchanged(store_url, "ds", before)


def test_update_other_failures_leave_the_dataset_unchanged(store_url):
    kstore.store_dataset(store_url, "ds", simple_frame(), partition_on="p", secondary_indices="x")
    before = snapshot(store_url, "ds")
    with raises(InvalidArgumentError, "'p'"):
        kstore.update_dataset(store_url, "ds", [simple_frame(), simple_frame().assign(p=["a", None] * 4)])
    with raises(InvalidArgumentError, "'q'"):
        kstore.update_dataset(store_url, "ds", simple_frame(), partition_on="q")
    with raises(InvalidArgumentError, "'overwrite'"):
        kstore.update_dataset(store_url, "ds", simple_frame(), mode="overwrite")
    with raises(InvalidArgumentError, "'lenient'"):
        kstore.update_dataset(store_url, "ds", simple_frame(), schema_mode="lenient")
    with raises(UnsupportedTypeError, "'t'"):
        kstore.update_dataset(store_url, "ds", simple_frame().assign(t=pd.to_timedelta(1, unit="s")),
                              schema_mode="merge")
    assert_unchanged(store_url, "ds", before)


def test_update_txn_is_idempotent(store_url, dataset_keys, caplog):
    src = simple_frame(4)
    kstore.store_dataset(store_url, "ds", src, partition_on="p")
    new = simple_frame(4).assign(id=lambda d: d["id"] + 10)
    m1 = kstore.update_dataset(store_url, "ds", new, txn=("app", 1))
    keys = dataset_keys(store_url, "ds")
    rows = by_id(kstore.read_dataset(store_url, "ds"))
    with caplog.at_level(logging.INFO, logger="kstore"):
        again = kstore.update_dataset(store_url, "ds", new, txn=("app", 1))
    assert again.version == m1.version
    assert any("app:1 was committed before" in r.getMessage() for r in caplog.records), \
        [r.getMessage() for r in caplog.records]
    left = sorted(dataset_keys(store_url, "ds") - keys)
    assert not left, f"re-submitting a committed txn left unreferenced files behind: {left}"
    pdt.assert_frame_equal(by_id(kstore.read_dataset(store_url, "ds")), rows)
    older = kstore.update_dataset(store_url, "ds", new, txn=("app", 0))  # an older txn: also a no-op
    assert older.version == m1.version and dataset_keys(store_url, "ds") == keys
    other = kstore.update_dataset(store_url, "ds", new.assign(id=lambda d: d["id"] + 10), txn=("other-app", 1))
    assert other.version == m1.version + 1
    nxt = kstore.update_dataset(store_url, "ds", new.assign(id=lambda d: d["id"] + 20), txn=("app", 2))
    assert nxt.version == m1.version + 2
    assert len(kstore.read_dataset(store_url, "ds")) == 16


def test_store_txn_is_idempotent(store_url, dataset_keys):
    m = kstore.store_dataset(store_url, "ds", simple_frame(), txn=("job", 7))
    keys = dataset_keys(store_url, "ds")
    again = kstore.update_dataset(store_url, "ds", simple_frame(), txn=("job", 7))
    assert again.version == m.version
    left = sorted(dataset_keys(store_url, "ds") - keys)
    assert not left, f"re-submitting a committed txn left unreferenced files behind: {left}"


def test_update_adds_a_secondary_index_covering_existing_partitions(store_url):
    src = simple_frame()
    m0 = kstore.store_dataset(store_url, "ds", src, partition_on="p")
    new = simple_frame().assign(id=lambda d: d["id"] + 10)
    m1 = kstore.update_dataset(store_url, "ds", new, secondary_indices="s")
    assert sorted(m1.indices) == ["s"]
    labels = kstore.index_lookup(store_url, "ds", "s", "s1")
    old_b = [lab for lab in m0.partitions if lab.startswith("p=b/")]
    new_b = [lab for lab in m1.partitions if lab.startswith("p=b/") and lab not in m0.partitions]
    assert sorted(labels) == sorted(old_b + new_b)
    got = kstore.read_dataset(store_url, "ds", predicates=[[("s", "==", "s1")]])
    assert sorted(got["id"]) == [1, 5, 11, 15]


def test_update_msgpack_dataset_keeps_format(store_url, dataset_keys):
    kstore.store_dataset(store_url, "ds", simple_frame(), metadata_format="msgpack.zstd")
    kstore.update_dataset(store_url, "ds", simple_frame().assign(id=lambda d: d["id"] + 10))
    main = {k for k in dataset_keys(store_url, "ds") if "by-dataset-metadata" in k}
    assert main == {"ds.by-dataset-metadata.msgpack.zstd"}
    assert len(kstore.read_dataset(store_url, "ds")) == 16


# ---------------------------------------------------------------------------------------
# 7. planning call budget: O(1) store calls, no listing, whatever the partition count
# ---------------------------------------------------------------------------------------

BUDGET_CASES = {
    "one_index": ([[("x", "==", 3)]], 1),
    "one_index_range": ([[("x", ">=", 47)]], 1),
    "one_index_in": ([[("y", "in", ["s1", "s2"])]], 1),
    "two_indices": ([[("x", "==", 3), ("y", "==", "s1")]], 2),
    "two_indices_or": ([[("x", "==", 3)], [("y", "==", "s1")]], 2),
    "index_and_partition": ([[("x", "==", 3), ("k", "<", 500)]], 1),
    "partition_only": ([[("k", "==", 7)]], 0),
    "no_predicate": (None, 0),
}


@pytest.mark.parametrize("case", list(BUDGET_CASES))
def test_plan_call_budget(budget_store, case):
    """Open + plan costs 1 + 1 + 1 + k store calls (k = log entries after the newest
    checkpoint, at most about CHECKPOINT_INTERVAL), whatever the partitions and predicate."""
    url, n = budget_store
    pred, n_indices = BUDGET_CASES[case]
    counting = CountingStore(url)
    plan = kstore.plan_read(counting, "budget", predicates=pred)
    calls = dict(counting.calls)
    # format 2: 1 get of _last_checkpoint, 1 listing of the log from it, 1 get of the
    # checkpoint (+ k entries after it: none here). Index values and statistics travel in
    # the checkpoint: no further call, whatever the predicate
    assert calls == {"get": 2, "iter_prefix": 1}, calls
    assert [k for m, k in counting.keys if m == "get"] == [naming.last_checkpoint_key("budget"),
                                                            naming.checkpoint_key("budget", 0)]
    assert [k for m, k in counting.keys if m == "iter_prefix"] == [naming.log_prefix("budget")]
    assert plan.n_files == n
    # the plan is right, too
    k = np.arange(n)
    frame = pd.DataFrame({"k": k, "x": k % 50, "y": [f"s{i % 7}" for i in k]})
    if pred is None:
        expected = set(k)
    else:
        expected = set(frame.loc[frame.eval(_to_query(pred)), "k"])
    got = {int(lab.split("/")[0].removeprefix("k=")) for lab in plan.labels}
    assert got == expected


def _to_query(dnf) -> str:
    def term(c, op, v):
        return f"({c} {op} {v!r})" if op != "in" else f"({c}.isin({list(v)!r}))"

    return " | ".join("(" + " & ".join(term(*t) for t in conj) + ")" for conj in dnf)


def test_plan_call_budget_plain_column_uses_statistics(budget_store):
    """A predicate column without an index is pruned by the statistics in the checkpoint."""
    url, n = budget_store
    counting = CountingStore(url)
    plan = kstore.plan_read(counting, "budget", predicates=[[("v", ">=", n - 2.0)]])
    assert dict(counting.calls) == {"get": 2, "iter_prefix": 1}
    assert {lab.split("/")[0] for lab in plan.labels} == {f"k={n - 2}", f"k={n - 1}"}


def test_plan_call_budget_msgpack(store_url):
    kstore.store_dataset(store_url, "mp", simple_frame(), partition_on="p", secondary_indices="x",
                         metadata_format="msgpack.zstd")
    counting = CountingStore(store_url)
    kstore.plan_read(counting, "mp", predicates=[[("x", "==", 10)]])
    # the main file's format does not matter to kstore readers: they read the log
    assert dict(counting.calls) == {"get": 2, "iter_prefix": 1}


def test_read_opens_only_planned_files(budget_store):
    url, n = budget_store
    counting = CountingStore(url)
    out = kstore.read_dataset(counting, "budget", predicates=[[("x", "==", 3), ("y", "==", "s3")]])
    expected = [i for i in range(n) if i % 50 == 3 and i % 7 == 3]
    assert sorted(out["k"]) == expected
    assert counting.calls["open"] == len(expected)
    assert [k for m, k in counting.keys if m == "iter_prefix"] == [naming.log_prefix("budget")]


@pytest.mark.parametrize("op, value", [("!=", 1.5), ("not in", [1.5])])
def test_nan_rows_survive_row_group_pruning(store_url, op, value):
    """Parquet min/max leave NaN out: a file of 1.5, NaN and null says min == max == 1.5,
    and Arrow's row-group pruning would drop it for ``x != 1.5`` (conformance suite find)."""
    df = pa.table({"p": ["a", "a", "a", "b"], "x": pa.array([1.5, float("nan"), None, 2.0], pa.float32()),
                   "id": [0, 1, 2, 3]})  # Arrow keeps NaN and null apart (pandas would merge them)
    kstore.store_dataset(store_url, "nan", df, partition_on=["p"])
    got = kstore.read_dataset(store_url, "nan", predicates=[[("x", op, value)]])
    assert sorted(got["id"]) == [1, 3]
    assert sorted(kstore.read_table(store_url, "nan", ["id"], [[("x", op, value)]]).column("id").to_pylist()) == [1, 3]
