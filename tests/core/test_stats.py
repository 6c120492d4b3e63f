"""Unit and property tests for kstore.core.stats (per-file statistics and pruning)."""

from __future__ import annotations

import datetime as dt
import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kstore.core.predicates import OPS, Term, bind, parse
from kstore.core.stats import (
    FileStats,
    check_stats_table,
    file_stats,
    merge_stats_tables,
    prune_mask,
    stats_by_label,
    stats_table,
)
from kstore.errors import CorruptMetadataError

SETTINGS = settings(max_examples=40, deadline=None)

# -- file_stats ---------------------------------------------------------------------------


def test_doc_example():
    s = file_stats(pa.table({"x": [3, None, 1]}), nbytes=10)
    assert s.rows == 3 and s.nbytes == 10
    assert s.columns["x"] == (1, 3, 1)


def test_file_stats_values_per_type():
    table = pa.table({
        "i": pa.array([5, -2, None], pa.int64()),
        "u": pa.array([2**64 - 1, 0, 7], pa.uint64()),
        "f": pa.array([1.5, math.nan, -3.0]),
        "s": pa.array(["b", "a", "é"]),
        "y": pa.array([b"\x00", b"\xff", None]),
        "b": pa.array([True, None, True]),
        "d": pa.array([dt.date(2024, 1, 3), dt.date(2024, 1, 1), None]),
        "t": pa.array([0, 5_000, None], pa.int64()).cast(pa.timestamp("us", "UTC")),
        "c": pa.array(["x", "y", "x"]).dictionary_encode(),
        "n": pa.array([None, None, None], pa.int64()),
        "z": pa.array([None, None, None], pa.null()),
        "l": pa.array([[1], None, []], pa.list_(pa.int64())),
    })
    s = file_stats(table, nbytes=123)
    assert s.rows == 3 and s.nbytes == 123
    c = s.columns
    assert c["i"] == (-2, 5, 1)
    assert c["u"] == (0, 2**64 - 1, 0)
    assert c["f"] == (-3.0, 1.5, 0)  # NaN is not null and does not widen the bounds
    assert c["s"] == ("a", "é", 0)
    assert c["y"] == (b"\x00", b"\xff", 1)
    assert c["b"] == (True, True, 1)
    assert c["d"] == (dt.date(2024, 1, 1), dt.date(2024, 1, 3), 1)
    lo, hi, nulls = c["t"]
    assert pd.Timestamp(lo) == pd.Timestamp(0, tz="UTC") and pd.Timestamp(hi) == pd.Timestamp(5_000_000, tz="UTC")
    assert nulls == 1
    assert c["c"] == ("x", "y", 0)
    assert c["n"] == (None, None, 3)
    assert c["z"][2] == 3 and c["z"][:2] == (None, None)
    assert c["l"] == (None, None, 1)  # lists are not orderable: bounds unknown


def test_file_stats_unknown_bounds():
    long = "x" * 300
    s = file_stats(pa.table({"s": [long, "a"], "f": [math.nan, math.nan], "y": [b"a", b"b" * 300]}), 1)
    assert s.columns["s"] == (None, None, 0)  # too long to keep
    assert s.columns["f"] == (None, None, 0)  # only NaN: unknown
    assert s.columns["y"] == (None, None, 0)
    assert s.rows == 2
    e = file_stats(pa.table({"e": pa.array([], pa.int64())}), 0)
    assert e.rows == 0 and e.columns["e"] == (None, None, 0)


def test_file_stats_chunked():
    table = pa.concat_tables([pa.table({"x": [3, 4]}), pa.table({"x": [None, 1]})])
    assert file_stats(table, 0).columns["x"] == (1, 4, 1)


# -- stats tables -------------------------------------------------------------------------


def test_stats_table_shape_and_round_trip():
    schema = pa.schema([("i", pa.int64()), ("t", pa.timestamp("us", "UTC")), ("l", pa.list_(pa.int64())),
                        ("c", pa.dictionary(pa.int8(), pa.string()))])
    t1 = pa.table({"i": [1, 2], "t": pa.array([1, 2], pa.int64()).cast(schema.field("t").type), "l": [[1], [2]],
                   "c": pa.array(["a", "b"]).dictionary_encode()})
    t2 = pa.table({"i": pa.array([None], pa.int64()), "t": pa.array([None], schema.field("t").type),
                   "l": pa.array([None], pa.list_(pa.int64())), "c": pa.array(["z"]).dictionary_encode()})
    stats = [file_stats(t1, 10), file_stats(t2, 20)]
    table = stats_table(["a", "b"], stats, schema)
    assert table.column_names[:3] == ["label", "rows", "bytes"]
    assert "min:l" not in table.column_names  # not orderable
    assert table.schema.field("min:t").type.equals(pa.timestamp("us", "UTC"))
    assert table.schema.field("min:c").type.equals(pa.string())
    assert table.column("rows").to_pylist() == [2, 1]
    assert table.column("bytes").to_pylist() == [10, 20]
    assert table.column("nulls:i").to_pylist() == [0, 1]
    back = stats_by_label(table)
    assert set(back) == {"a", "b"}
    assert back["a"].rows == 2 and back["a"].nbytes == 10
    assert back["a"].columns["i"] == (1, 2, 0)
    assert back["b"].columns["i"] == (None, None, 1)
    assert back["b"].columns["c"] == ("z", "z", 0)
    assert stats_by_label(None) == {}


def test_merge_stats_tables():
    schema = pa.schema([("i", pa.int64())])
    old = stats_table(["a", "b"], [file_stats(pa.table({"i": [1]}), 1), file_stats(pa.table({"i": [2]}), 1)], schema)
    new_schema = pa.schema([("i", pa.int64()), ("s", pa.string())])
    new = stats_table(["c"], [file_stats(pa.table({"i": [3], "s": ["x"]}), 1)], new_schema)
    merged = merge_stats_tables(old, new, drop_labels=["a"])
    assert merged.column("label").to_pylist() == ["b", "c"]
    assert merged.column("min:i").to_pylist() == [2, 3]
    assert merged.column("min:s").to_pylist() == [None, "x"]
    assert merge_stats_tables(None, new).equals(new)
    assert merge_stats_tables(old, new, drop_labels=["a", "b"]).column("label").to_pylist() == ["c"]
    assert merge_stats_tables(old, new).column("label").to_pylist() == ["a", "b", "c"]


# -- prune_mask ---------------------------------------------------------------------------


def _stats_for(files: list[pa.Table]) -> pa.Table:
    labels = [f"f{i}" for i in range(len(files))]
    return stats_table(labels, [file_stats(t, 1) for t in files], files[0].schema)


def test_prune_examples():
    t = pa.timestamp("us")
    files = [
        pa.table({"x": [1, 5], "s": ["a", "c"], "t": pa.array([0, 10], pa.int64()).cast(t)}),
        pa.table({"x": [7, 9], "s": ["d", "d"], "t": pa.array([20, 30], pa.int64()).cast(t)}),
        pa.table({"x": pa.array([None, None], pa.int64()), "s": pa.array([None, "z"]),
                  "t": pa.array([None, None], t)}),
    ]
    stats = _stats_for(files)

    def keep(col, op, value=None):
        return prune_mask(Term(col, op, value), stats).tolist()

    assert keep("x", "==", 6) == [False, False, False]
    assert keep("x", "==", 5) == [True, False, False]
    assert keep("x", "<", 1) == [False, False, False]
    assert keep("x", "<=", 1) == [True, False, False]
    assert keep("x", ">", 8) == [False, True, False]
    assert keep("x", ">=", 9) == [False, True, False]
    assert keep("x", "in", (6, 8)) == [False, True, False]
    assert keep("x", "!=", 1) == [True, True, False]
    assert keep("x", "not in", (1,)) == [True, True, False]
    assert keep("x", "is null") == [False, False, True]
    assert keep("x", "is not null") == [True, True, False]
    assert keep("x", "never") == [False, False, False]
    assert keep("s", "!=", "d") == [True, False, True]  # file 2: all 'd'
    assert keep("s", "==", "z") == [False, False, True]
    assert keep("t", ">", pd.Timestamp(15_000)) == [False, True, False]
    assert keep("unknown", "==", 1) == [True, True, True]


def test_prune_in_with_many_values_is_conservative():
    stats = _stats_for([pa.table({"x": [1]}), pa.table({"x": pa.array([None], pa.int64())})])
    values = tuple(range(1000, 1300))
    assert prune_mask(Term("x", "in", values), stats).tolist() == [True, False]


def test_prune_unknown_bounds_never_prune():
    stats = _stats_for([pa.table({"s": ["x" * 300]})])
    assert prune_mask(Term("s", "==", "a"), stats).tolist() == [True]
    assert prune_mask(Term("s", "<", "a"), stats).tolist() == [True]


def test_prune_missing_stats_rows_keep():
    # merged stats with a column unknown for older files: null bounds and null counts
    old = stats_table(["a"], [file_stats(pa.table({"i": [1]}), 1)], pa.schema([("i", pa.int64())]))
    new = stats_table(["b"], [file_stats(pa.table({"i": [5], "s": ["q"]}), 1)],
                      pa.schema([("i", pa.int64()), ("s", pa.string())]))
    stats = merge_stats_tables(old, new)
    assert prune_mask(Term("s", "==", "zz"), stats).tolist() == [True, False]
    assert prune_mask(Term("s", "is null"), stats).tolist() == [True, False]


# -- the pruning property -----------------------------------------------------------------


def _nz(x):
    return 0.0 if x == 0 else x


BERLIN = "Europe/Berlin"
TS0 = pd.Timestamp("2024-01-01", tz=BERLIN).value

DOMAINS = {
    # name: (arrow type, value strategy, literal strategy); literals are raw user values
    "int64": (pa.int64(), st.integers(-5, 5), st.integers(-6, 6) | st.floats(-6, 6).map(_nz)),
    "uint64": (pa.uint64(), st.integers(0, 5) | st.just(2**64 - 1), st.integers(-2, 6) | st.just(2**64 - 1)),
    "float64": (
        pa.float64(),
        st.sampled_from([-1.0, 0.0, 0.5, 2.0, math.inf, math.nan]),
        st.sampled_from([-1.0, 0.0, 0.25, 0.5, 2.0, math.inf, -math.inf, math.nan]),
    ),
    "string": (
        pa.string(),
        st.text(alphabet="abé", max_size=3) | st.just("b" * 300),
        st.text(alphabet="abé", max_size=3) | st.just("b" * 300),
    ),
    "binary": (pa.binary(), st.binary(max_size=2), st.binary(max_size=2)),
    "bool": (pa.bool_(), st.booleans(), st.booleans()),
    "date": (
        pa.date32(),
        st.dates(dt.date(2024, 1, 1), dt.date(2024, 1, 6)),
        st.dates(dt.date(2024, 1, 1), dt.date(2024, 1, 7)),
    ),
    "ts_tz": (
        pa.timestamp("us", BERLIN),
        st.integers(0, 6).map(lambda h: pd.Timestamp(TS0 + h * 3600 * 10**9, tz="UTC").tz_convert(BERLIN)),
        st.tuples(st.integers(-1, 7), st.sampled_from([0, 0, 1, -1, 1000, -1000])).map(
            lambda p: pd.Timestamp(TS0 + p[0] * 3600 * 10**9 + p[1], tz="UTC").tz_convert(BERLIN)),
    ),
    "ts_ns": (
        pa.timestamp("ns"),
        st.integers(0, 5).map(lambda n: pd.Timestamp(1_000_000_000 + n)),
        st.integers(-1, 6).map(lambda n: pd.Timestamp(1_000_000_000 + n)),
    ),
}


@st.composite
def files_and_term(draw, name):
    t, values, literals = DOMAINS[name]
    n_files = draw(st.integers(1, 5))
    files = []
    for _ in range(n_files):
        vals = draw(st.lists(st.none() | values, min_size=1, max_size=6))
        if pa.types.is_timestamp(t):
            arr = pa.array([None if v is None else v.value for v in vals], pa.int64()).cast(
                pa.timestamp("ns", t.tz)).cast(t)
        else:
            arr = pa.array(vals, t)
        files.append((vals, pa.table({"c": arr})))
    op = draw(st.sampled_from(OPS))
    if op in ("in", "not in"):
        lit = draw(st.lists(literals, max_size=4))
        raw = ("c", op, lit)
    elif op in ("is null", "is not null"):
        lit = None
        raw = ("c", op)
    else:
        lit = draw(literals)
        raw = ("c", op, lit)
    return files, raw, lit


@pytest.mark.parametrize("name", sorted(DOMAINS))
@SETTINGS
@given(data=st.data())
def test_prune_never_drops_a_file_with_a_matching_row(name, data, oracle):
    files, raw, lit = data.draw(files_and_term(name))
    schema = files[0][1].schema
    ((term,),) = bind(parse([raw]), schema)
    stats = _stats_for([f for _, f in files])
    keep = prune_mask(term, stats)
    assert keep.dtype == np.bool_ and len(keep) == len(files)
    for i, (vals, _) in enumerate(files):
        if any(oracle.match_value(v, raw[1], lit) for v in vals):
            assert keep[i], (raw, term, vals, stats.slice(i, 1).to_pylist())
    # null handling is exact
    if raw[1] in ("is null", "is not null", "never"):
        want = [any(oracle.match_value(v, raw[1], lit) for v in vals) for vals, _ in files]
        assert keep.tolist() == want


def test_prune_with_large_ints_and_float_literal():
    # bind keeps 'n > 0.5' as a float comparison; statistics of huge ints must not break it
    stats = _stats_for([pa.table({"n": pa.array([2**60], pa.int64())}), pa.table({"n": pa.array([-5], pa.int64())})])
    assert prune_mask(Term("n", ">", 0.5), stats).tolist() == [True, False]
    assert prune_mask(Term("n", "in", (0.5, 2**60)), stats).tolist() == [True, False]


def test_file_stats_is_a_value():
    a = FileStats(1, 2, {"x": (1, 2, 0)})
    assert a == FileStats(1, 2, {"x": (1, 2, 0)})


# -- damaged statistics files (issue #11) -----------------------------------------------------

_SCHEMA = pa.schema([("s", pa.string()), ("t", pa.timestamp("us", "UTC"))])


def _good() -> pa.Table:
    t = pa.table({"s": ["a", "b"], "t": pa.array([1, 2], pa.int64()).cast(_SCHEMA.field("t").type)})
    return stats_table(["x", "y"], [file_stats(t, 1), file_stats(t.slice(1), 2)], _SCHEMA)


def _with(table: pa.Table, name: str, values: pa.Array | None) -> pa.Table:
    i = table.column_names.index(name)
    return table.remove_column(i) if values is None else table.set_column(i, name, values)


@pytest.mark.parametrize(
    "name, values",
    [
        ("label", pa.array([1, 2])),
        ("label", pa.array(["x", None])),
        ("label", None),
        ("rows", pa.array(["a", "b"])),
        ("rows", pa.array([1, None])),
        ("bytes", None),
        ("min:s", pa.array([1, 2])),
        ("min:s", pa.array([["a"], ["b"]])),
        ("max:t", pa.array(["2024", "2025"])),
        ("nulls:s", pa.array(["x", "y"])),
        ("nulls:s", None),
        ("max:s", None),
    ],
)
def test_check_stats_table_rejects_wrong_columns_naming_them(name, values):
    with pytest.raises(CorruptMetadataError, match=f"'{name.split(':')[-1]}'"):
        check_stats_table(_with(_good(), name, values), _SCHEMA, what="dataset 'd': statistics file 'k'")


def test_check_stats_table_keeps_good_tables_and_conforms_compatible_types():
    good = _good()
    assert check_stats_table(good, _SCHEMA, what="x").equals(good)
    us = _with(good, "min:t", good.column("min:t").cast(pa.timestamp("ns", "UTC")))  # older kstore
    us = _with(us, "rows", us.column("rows").cast(pa.int32()))
    assert check_stats_table(us, _SCHEMA, what="x").equals(good)
    nulls = _with(good, "min:s", pa.nulls(2))
    assert check_stats_table(nulls, _SCHEMA, what="x").column("min:s").type.equals(pa.string())
    extra = good.append_column("min:gone", pa.array([1, 2])).append_column("other", pa.array([1, 2]))
    assert check_stats_table(extra, _SCHEMA, what="x").equals(good)
def test_nanosecond_statistics_of_older_datasets_stay_conservative():
    """Statistics written in nanoseconds (kstore before microsecond timestamps) merge with
    new microsecond ones (min floored, max ceiled) and never prune a matching file; a
    literal beyond the nanosecond range does not fail."""
    ns = pa.timestamp("ns")
    old = stats_table(["a"], [FileStats(1, 1, {"t": (pd.Timestamp("2024-01-01 00:00:00.000000500"),
                                                    pd.Timestamp("2024-01-01 00:00:00.000001500"), 0)})],
                      pa.schema([("t", ns)]))
    assert old.schema.field("min:t").type == ns
    new = stats_table(["b"], [FileStats(1, 1, {"t": (dt.datetime(9999, 12, 31), dt.datetime(9999, 12, 31), 0)})],
                      pa.schema([("t", pa.timestamp("us"))]))
    merged = merge_stats_tables(old, new)
    assert merged.schema.field("min:t").type == pa.timestamp("us")
    assert merged.column("min:t").to_pylist()[0] == dt.datetime(2024, 1, 1)
    assert merged.column("max:t").to_pylist()[0] == dt.datetime(2024, 1, 1, 0, 0, 0, 2)
    schema = pa.schema([("t", pa.timestamp("us"))])
    for op, lit, want in [("==", "2024-01-01 00:00:00.000001", [True, False]), (">", "2024-06-01", [False, True]),
                          ("<", "2024-01-01 00:00:00.000001", [True, False])]:
        term = bind(parse([("t", op, lit)]), schema)[0][0]
        assert prune_mask(term, merged).tolist() == want, (op, lit)
    far = bind(parse([("t", "==", "9999-12-31")]), schema)[0][0]
    assert prune_mask(far, old).tolist() == [True]  # beyond nanoseconds: cannot prune, no error
