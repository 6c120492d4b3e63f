"""Unit and property tests for kstore.core.index (Arrow-backed inverted indices).

The central property: for random (value, label) pairs, ``lookup(op, literal)`` returns
exactly the labels a brute-force evaluation over the pairs finds (a superset where the
index is documented to be conservative: ``!=`` / ``not in`` / ``is not null`` on floats and
every operator on timestamps).
"""

from __future__ import annotations

import datetime as dt
import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kstore.core.index import ColumnIndex, index_storage_type
from kstore.errors import CorruptMetadataError
from tests.core.conftest import match_value

SETTINGS = settings(max_examples=60, deadline=None)
FEW = settings(max_examples=30, deadline=None)
LABELS = st.sampled_from([f"l{i}" for i in range(6)])
OPS = ["==", "!=", "<", "<=", ">", ">=", "in", "not in", "is not null", "never"]

# -- brute force --------------------------------------------------------------------------


def _match(v, op, lit) -> bool:
    """SQL/Arrow semantics of ``v op lit`` for one non-null value (NaN compares unequal)."""
    return match_value(v, op, lit)


def brute(pairs, op, lit) -> set[str]:
    return {label for v, label in pairs if v is not None and _match(v, op, lit)}


def _nan_key(v):
    return "NaN" if isinstance(v, float) and math.isnan(v) else v


def index_pairs(idx: ColumnIndex) -> set:
    v, lab = idx.pairs()
    return {(_nan_key(x), y) for x, y in zip(v.to_pylist(), lab.to_pylist())}


def expected_pairs(values, labels) -> set:
    # nulls are not indexed; NaN is (one trailing value), so NaN rows are found by != / not in
    return {(_nan_key(v), lab) for v, lab in zip(values, labels) if v is not None}


# -- per-type domains ---------------------------------------------------------------------

def _no_neg_zero(x: float) -> float:
    # -0.0 vs 0.0 under 'in' is covered by test_in_with_signed_zero; keep it out of the
    # general property so a failure there does not hide other findings.
    return 0.0 if x == 0 else x


FLOATS_SMALL = st.sampled_from([-2.5, -1.0, 0.0, 0.5, 1.0, 3.0, 1e300, -math.inf, math.inf])
FLOATS = (FLOATS_SMALL | st.floats(allow_nan=False)).map(_no_neg_zero)

DOMAINS = {
    "int64": (
        pa.int64(),
        st.integers(-5, 5) | st.integers(-(2**63), 2**63 - 1),
        st.integers(-6, 6) | st.integers(-(2**63), 2**63 - 1),
    ),
    "uint64": (
        pa.uint64(),
        st.integers(0, 5) | st.integers(0, 2**64 - 1),
        st.integers(0, 6) | st.integers(0, 2**64 - 1),
    ),
    "float64": (pa.float64(), FLOATS, FLOATS),
    "string": (pa.string(), st.text(alphabet="ab\u00e9\U0001f600", max_size=3), st.text(alphabet="ab\u00e9\U0001f600", max_size=3)),
    "binary": (pa.binary(), st.binary(max_size=3), st.binary(max_size=3)),
    "date": (
        pa.date32(),
        st.dates(dt.date(2020, 1, 1), dt.date(2020, 1, 10)) | st.dates(),
        st.dates(dt.date(2020, 1, 1), dt.date(2020, 1, 10)) | st.dates(),
    ),
    "bool": (pa.bool_(), st.booleans(), st.booleans()),
}


@st.composite
def pair_lists(draw, values, min_size=0):
    n = draw(st.integers(min_size, 25))
    vals = [draw(st.none() | values) if draw(st.integers(0, 9)) == 0 else draw(values) for _ in range(n)]
    labels = [draw(LABELS) for _ in range(n)]
    return vals, labels


@st.composite
def op_and_literal(draw, literals):
    op = draw(st.sampled_from(OPS))
    if op in ("in", "not in"):
        lit = tuple(draw(st.lists(literals, max_size=5)))
    elif op in ("is not null", "never"):
        lit = None
    else:
        lit = draw(literals)
    return op, lit


def _check(idx, pairs, op, lit, exact: bool):
    got = set(idx.lookup_labels(op, lit))
    want = brute(pairs, op, lit)
    if exact:
        assert got == want, (op, lit, sorted(got), sorted(want))
    else:
        assert got >= want, (op, lit, sorted(got), sorted(want))
    # never more than the labels that have an indexed value
    assert got <= {lab for v, lab in index_pairs(idx)}


@pytest.mark.parametrize("domain", sorted(DOMAINS))
@SETTINGS
@given(data=st.data())
def test_lookup_matches_brute_force(domain, data):
    t, values, literals = DOMAINS[domain]
    vals, labels = data.draw(pair_lists(values))
    idx = ColumnIndex.build("c", pa.array(vals, type=t), pa.array(labels, pa.string()))
    pairs = list(zip(vals, labels))
    for _ in range(4):
        op, lit = data.draw(op_and_literal(literals))
        exact = not (domain == "float64" and op in ("!=", "not in", "is not null"))
        _check(idx, pairs, op, lit, exact)


@pytest.mark.parametrize("with_nan", [False, True], ids=["no-nan", "nan"])
@SETTINGS
@given(data=st.data())
def test_float_lookup_superset_with_nan(with_nan, data):
    # NaN is not indexed. NaN rows still satisfy '!=', 'not in' and 'is not null' (Arrow
    # and SQL: NaN != x), so a partition holding only NaN must still be found for those.
    values = FLOATS | st.just(math.nan) if with_nan else FLOATS
    literals = FLOATS | st.just(math.nan) if with_nan else FLOATS
    vals, labels = data.draw(pair_lists(values))
    idx = ColumnIndex.build("c", pa.array(vals, type=pa.float64()), pa.array(labels, pa.string()))
    pairs = list(zip(vals, labels))
    for _ in range(4):
        op, lit = data.draw(op_and_literal(literals))
        got = set(idx.lookup_labels(op, lit))
        want = brute(pairs, op, lit)
        assert got >= want, (op, lit, sorted(got), sorted(want))
        if op not in ("!=", "not in", "is not null"):
            assert got == want, (op, lit, sorted(got), sorted(want))


def test_nan_only_partition_found_by_not_equal():
    idx = ColumnIndex.build("x", pa.array([1.0, math.nan]), pa.array(["a", "b"]))
    assert idx.lookup_labels("==", 1.0) == ["a"]
    # the NaN row in 'b' satisfies x != 1.0 (Arrow: NaN != 1.0 is true)
    assert "b" in idx.lookup_labels("!=", 1.0)
    assert "b" in idx.lookup_labels("not in", (1.0,))
    assert "b" in idx.lookup_labels("is not null")


@FEW
@given(data=st.data())
def test_int_index_with_non_integral_float_literals(data):
    # bind() keeps non-integral floats as floats for int columns: 'n < 2.5' etc.
    vals, labels = data.draw(pair_lists(st.integers(-5, 5) | st.integers(-(2**52), 2**52)))
    idx = ColumnIndex.build("n", pa.array(vals, type=pa.int64()), pa.array(labels, pa.string()))
    pairs = list(zip(vals, labels))
    lits = st.floats(-6, 6).filter(lambda f: not f.is_integer()) | st.integers(-6, 6)
    for _ in range(4):
        op, lit = data.draw(op_and_literal(lits))
        _check(idx, pairs, op, lit, exact=True)


@pytest.mark.parametrize("op", ["==", "<", "<=", ">", ">=", "in"])
def test_float_index_nan_literal_matches_nothing(op):
    # a NaN literal compares false with every value: nothing matches
    idx = ColumnIndex.build("x", pa.array([-1.0, 2.0, math.inf]), pa.array(["a", "b", "c"]))
    lit = (math.nan,) if op == "in" else math.nan
    assert idx.lookup_labels(op, lit) == []


def test_int_index_float_in_with_values_beyond_2_53():
    # large int64 values must not break an 'in' lookup that carries a float literal
    idx = ColumnIndex.build("n", pa.array([2**60, 1, 2**53 + 1], pa.int64()), pa.array(["a", "b", "c"]))
    assert idx.lookup_labels("in", (1.5, 1)) == ["b"]
    assert idx.lookup_labels("in", (2.5,)) == []
    uidx = ColumnIndex.build("u", pa.array([2**63 + 5, 1], pa.uint64()), pa.array(["a", "b"]))
    assert uidx.lookup_labels("in", (0.5, 1)) == ["b"]


def test_in_with_signed_zero():
    # -0.0 == 0.0, so 'in' must treat them alike (as '==' does)
    idx = ColumnIndex.build("x", pa.array([0.0, 1.0]), pa.array(["a", "b"]))
    assert idx.lookup_labels("==", -0.0) == ["a"]
    assert idx.lookup_labels("in", (-0.0,)) == ["a"]
    idx = ColumnIndex.build("x", pa.array([-0.0, 1.0]), pa.array(["a", "b"]))
    assert idx.lookup_labels("in", (0.0,)) == ["a"]
    assert set(idx.lookup_labels("not in", (0.0,))) >= {"b"}


# -- timestamps ---------------------------------------------------------------------------

TS_RANGE = (pd.Timestamp("2024-01-01").value // 1000, pd.Timestamp("2024-01-01").value // 1000 + 20)


@st.composite
def ts_us(draw, tz):
    us = draw(st.integers(*TS_RANGE) | st.integers(-(10**15), 10**15))
    return pd.Timestamp(us * 1000, unit="ns", tz=tz)


@st.composite
def ts_literal(draw, tz):
    ns = draw(st.integers(TS_RANGE[0] * 1000 - 2000, TS_RANGE[1] * 1000 + 2000) | st.integers(-(10**18), 10**18))
    ts = pd.Timestamp(ns, unit="ns", tz="UTC")
    if tz is None:
        return ts.tz_localize(None)
    return ts.tz_convert(draw(st.sampled_from([tz, "Europe/Berlin", "Asia/Kolkata"])))


@pytest.mark.parametrize("tz", [None, "UTC", "Europe/Berlin"])
@FEW
@given(data=st.data())
def test_timestamp_lookup_is_superset(tz, data):
    vals, labels = data.draw(pair_lists(ts_us(tz)))
    arr = pa.array([None if v is None else v.value // 1000 for v in vals], type=pa.int64()).cast(pa.timestamp("us", tz))
    idx = ColumnIndex.build("t", arr, pa.array(labels, pa.string()))
    assert idx.values.type.equals(pa.timestamp("us", tz))
    pairs = list(zip(vals, labels))
    for _ in range(4):
        op, lit = data.draw(op_and_literal(ts_literal(tz)))
        _check(idx, pairs, op, lit, exact=False)
        # us-aligned literals find exactly the matching partitions for == / in
        if op in ("==", "in", "<=", ">="):
            lits = lit if op == "in" else (lit,)
            if all(x.value % 1000 == 0 for x in lits):
                assert set(idx.lookup_labels(op, lit)) == brute(pairs, op, lit)


def test_timestamp_index_from_nanosecond_data():
    # data files may keep ns precision (FORMAT.md); indexing them must work and stay
    # conservative: the ns value must be found by == and by ranges around it
    values = pa.array(
        [pd.Timestamp("2024-01-01 00:00:00.000000700").value, pd.Timestamp("1969-12-31 23:59:59.999999500").value],
        pa.int64(),
    ).cast(pa.timestamp("ns"))
    idx = ColumnIndex.build("t", values, pa.array(["a", "b"]))
    assert idx.values.type.equals(pa.timestamp("us"))
    a = pd.Timestamp("2024-01-01 00:00:00.000000700")
    b = pd.Timestamp("1969-12-31 23:59:59.999999500")
    assert "a" in idx.lookup_labels("==", a)
    assert "a" in idx.lookup_labels(">", pd.Timestamp("2024-01-01 00:00:00.000000600"))
    assert "a" in idx.lookup_labels("in", (a,))
    assert "b" in idx.lookup_labels("==", b)
    assert "b" in idx.lookup_labels("<=", pd.Timestamp("1969-12-31 23:59:59.999999600"))
    assert "b" in idx.lookup_labels("<", pd.Timestamp("1969-12-31 23:59:59.999999600"))
    assert "b" in idx.lookup_labels("in", (b,))


# -- structure and on-disk form -----------------------------------------------------------

ALL_TYPES = {**{k: v[:2] for k, v in DOMAINS.items()}, "ts": (pa.timestamp("us", "UTC"), ts_us("UTC"))}


def _draw_pairs(domain: str, data) -> tuple[pa.DataType, pa.Array, list[str]]:
    """(type, values, labels): parallel (value, label) pairs of ``domain`` (NaN among floats)."""
    t, values = ALL_TYPES[domain]
    if domain == "float64":
        values = values | st.just(math.nan)
    vals, labels = data.draw(pair_lists(values))
    if domain == "ts":
        arr = pa.array([None if v is None else v.value // 1000 for v in vals], pa.int64()).cast(t)
    else:
        arr = pa.array(vals, type=t)
    return t, arr, labels


@pytest.mark.parametrize("domain", sorted(ALL_TYPES))
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_build_invariants_and_table_round_trip(domain, data):
    t, arr, labels = _draw_pairs(domain, data)
    idx = ColumnIndex.build("c", arr, pa.array(labels, pa.string()))
    want = expected_pairs(arr.to_pylist(), labels)
    assert index_pairs(idx) == want
    # values sorted, unique, no nulls, NaN at most once and last; CSR structure consistent
    pyvals = idx.values.to_pylist()
    nans = [i for i, v in enumerate(pyvals) if isinstance(v, float) and math.isnan(v)]
    assert nans in ([], [len(pyvals) - 1])
    real = pyvals[: len(pyvals) - len(nans)]
    assert real == sorted(set(real)) and len(real) == len(set(real))
    assert idx.values.null_count == 0
    assert idx.offsets[0] == 0 and idx.offsets[-1] == len(idx.label_ids)
    assert np.all(np.diff(idx.offsets) > 0)
    assert len(idx) == len(pyvals)
    # on-disk form
    table = idx.to_table()
    assert table.column_names == ["c", "partition"]
    assert table.schema.field("partition").type.equals(pa.list_(pa.string()))
    assert table.schema.field("c").type.equals(index_storage_type(t))
    assert table.num_rows == len(idx)
    for row in table.to_pylist():
        assert len(row["partition"]) == len(set(row["partition"])) > 0
    back = ColumnIndex.from_table("c", table)
    assert index_pairs(back) == want
    assert [_nan_key(v) for v in back.values.to_pylist()] == [_nan_key(v) for v in idx.values.to_pylist()]


def test_build_from_chunked_and_dictionary_and_small_ints():
    values = pa.chunked_array([pa.array([3, 1], pa.int8()), pa.array([3, None], pa.int8())])
    labels = pa.chunked_array([pa.array(["a", "a"]), pa.array(["b", "c"])])
    idx = ColumnIndex.build("n", values, labels)
    assert idx.values.type.equals(pa.int64())
    assert index_pairs(idx) == {(3, "a"), (1, "a"), (3, "b")}
    d = pa.array(["x", "y", "x"]).dictionary_encode()
    idx = ColumnIndex.build("s", d, pa.array(["a", "b", "c"]))
    assert idx.values.type.equals(pa.string())
    assert idx.lookup_labels("==", "x") == ["a", "c"]
    idx = ColumnIndex.build("s", pa.array(["x"], pa.large_string()), pa.array(["a"], pa.large_string()))
    assert idx.to_table().schema.field("s").type.equals(pa.string())


def test_doc_example():
    idx = ColumnIndex.build("n", pa.array([3, 1, 3, 2]), pa.array(["a", "a", "b", "c"]))
    assert idx.values.to_pylist() == [1, 2, 3]
    assert idx.lookup_labels("==", 3) == ["a", "b"]
    assert idx.lookup_labels(">=", 2) == ["a", "b", "c"]


def test_empty_index():
    idx = ColumnIndex.build("n", pa.array([None, None], pa.int64()), pa.array(["a", "b"]))
    assert len(idx) == 0
    for op in OPS:
        lit = (1,) if op in ("in", "not in") else 1
        assert idx.lookup_labels(op, lit) == []
    assert idx.to_table().num_rows == 0
    assert len(ColumnIndex.from_table("n", idx.to_table())) == 0
    e = ColumnIndex.empty("n", pa.string())
    assert e.values.type.equals(pa.string()) and len(e) == 0


def test_is_null_is_not_answerable():
    idx = ColumnIndex.build("n", pa.array([1]), pa.array(["a"]))
    with pytest.raises(ValueError):
        idx.lookup("is null")
    with pytest.raises(ValueError):
        idx.lookup("~=", 1)


def test_from_table_rejects_bad_shapes():
    with pytest.raises(CorruptMetadataError):
        ColumnIndex.from_table("n", pa.table({"other": [1], "partition": [["a"]]}))
    with pytest.raises(CorruptMetadataError):
        ColumnIndex.from_table("n", pa.table({"n": [1], "labels": [["a"]]}))
    with pytest.raises(CorruptMetadataError):
        ColumnIndex.from_table("n", pa.table({"n": [1], "partition": ["a"]}))


def test_from_table_kartothek_shapes():
    # large_list partitions, null partition lists and int32 values are accepted
    table = pa.table({
        "n": pa.array([1, 2, 3], pa.int32()),
        "partition": pa.array([["a", "b"], None, ["c"]], pa.large_list(pa.string())),
    })
    idx = ColumnIndex.from_table("n", table)
    assert index_pairs(idx) == {(1, "a"), (1, "b"), (3, "c")}


def test_from_inline():
    idx = ColumnIndex.from_inline("n", {"1": ["a", "b"], "2": ["b"]}, pa.int64())
    assert index_pairs(idx) == {(1, "a"), (1, "b"), (2, "b")}
    idx = ColumnIndex.from_inline("s", {"1": ["a"]}, pa.string())
    assert index_pairs(idx) == {("1", "a")}
    idx = ColumnIndex.from_inline("d", {"2024-01-02": ["a"]}, pa.date32())
    assert index_pairs(idx) == {(dt.date(2024, 1, 2), "a")}
    idx = ColumnIndex.from_inline("b", {"False": ["a"], "True": ["b"]}, pa.bool_())
    assert index_pairs(idx) == {(False, "a"), (True, "b")}


# -- algebra ------------------------------------------------------------------------------


@FEW
@given(pair_lists(st.integers(-5, 5)), pair_lists(st.integers(-5, 5)), st.lists(LABELS, max_size=4))
def test_merge_and_drop_laws(a_in, b_in, drop):
    a = ColumnIndex.build("n", pa.array(a_in[0], pa.int64()), pa.array(a_in[1], pa.string()))
    b = ColumnIndex.build("n", pa.array(b_in[0], pa.int64()), pa.array(b_in[1], pa.string()))
    pa_, pb = index_pairs(a), index_pairs(b)
    assert index_pairs(a.merge(b)) == pa_ | pb
    assert index_pairs(b.merge(a)) == pa_ | pb
    assert index_pairs(a.merge(a)) == pa_
    empty = ColumnIndex.empty("n", pa.int64())
    assert index_pairs(a.merge(empty)) == pa_
    assert index_pairs(empty.merge(a)) == pa_
    dropped = a.drop_labels(drop)
    assert index_pairs(dropped) == {(v, lab) for v, lab in pa_ if lab not in drop}
    assert index_pairs(a.drop_labels(pa.array(drop, pa.string()))) == index_pairs(dropped)
    assert index_pairs(a.drop_labels([])) == pa_
    kept = a.keep_labels(drop)
    assert index_pairs(kept) == {(v, lab) for v, lab in pa_ if lab in drop}
    # lookups on merged indices equal lookups on the union of inputs
    merged = a.merge(b)
    for op, lit in (("==", 1), ("<", 0), ("in", (1, 2)), ("!=", 3), ("not in", (0,))):
        assert set(merged.lookup_labels(op, lit)) == set(a.lookup_labels(op, lit)) | set(b.lookup_labels(op, lit))


def test_merge_string_and_timestamp_indices():
    a = ColumnIndex.build("s", pa.array(["x", "y"]), pa.array(["a", "b"]))
    b = ColumnIndex.build("s", pa.array(["y", "z"], pa.large_string()), pa.array(["c", "c"]))
    assert index_pairs(a.merge(b)) == {("x", "a"), ("y", "b"), ("y", "c"), ("z", "c")}
    t = pa.timestamp("us", "UTC")
    a = ColumnIndex.build("t", pa.array([0, 5], pa.int64()).cast(t), pa.array(["a", "b"]))
    b = ColumnIndex.build("t", pa.array([5], pa.int64()).cast(t), pa.array(["c"]))
    assert a.merge(b).lookup_labels("==", pd.Timestamp(5000, tz="UTC")) == ["b", "c"]


# -- scale (correctness only) -------------------------------------------------------------


@pytest.fixture(scope="module")
def big_index():
    n = 1_000_000
    rng = np.random.default_rng(42)
    vals = np.arange(n, dtype=np.int64) * 7
    order = rng.permutation(n)
    labels = np.char.add("p", ((vals // 7) % 100_000).astype(str))
    idx = ColumnIndex.build("n", pa.array(vals[order]), pa.array(labels[order]))
    return idx, n


def test_million_value_index_in_query(big_index):
    idx, n = big_index
    assert len(idx) == n
    rng = np.random.default_rng(7)
    query = rng.integers(-1000, 7 * n + 1000, size=100_000)
    got = set(idx.lookup_labels("in", tuple(int(q) for q in query)))
    hits = query[(query % 7 == 0) & (query >= 0) & (query < 7 * n)]
    want = {f"p{x}" for x in np.unique((hits // 7) % 100_000)}
    assert got == want
    assert 0 < len(want) < 100_000


def test_million_value_index_ranges(big_index):
    idx, n = big_index
    assert set(idx.lookup_labels("<", 7 * 5000)) == {f"p{i}" for i in range(5000)}
    assert set(idx.lookup_labels("<=", 7 * 5000)) == {f"p{i}" for i in range(5001)}
    assert set(idx.lookup_labels(">", 7 * (n - 3000))) == {f"p{i % 100_000}" for i in range(n - 2999, n)}
    assert set(idx.lookup_labels(">=", 7 * (n - 3000) + 1)) == {f"p{i % 100_000}" for i in range(n - 2999, n)}
    assert idx.lookup_labels("==", 7 * 123_456) == ["p23456"]
    assert idx.lookup_labels("==", 7 * 123_456 + 1) == []
    assert len(idx.lookup_labels("!=", 0)) == 100_000


# -- damaged index files (issue #11) ----------------------------------------------------------


@pytest.mark.parametrize(
    "vtype, table",
    [
        (pa.int64(), pa.table({"n": ["3", "4"], "partition": [["a"], ["b"]]})),
        (pa.int64(), pa.table({"n": [3.5, 4.0], "partition": [["a"], ["b"]]})),
        (pa.int64(), pa.table({"n": [[3], [4]], "partition": [["a"], ["b"]]})),
        (pa.int64(), pa.table({"n": pa.nulls(2), "partition": [["a"], ["b"]]})),
        (pa.string(), pa.table({"n": [1, 2], "partition": [["a"], ["b"]]})),
        (pa.int64(), pa.table({"n": [3, 4], "partition": [[1], [2]]})),
        (pa.int64(), pa.table({"n": [3, 4], "partition": [[["a"]], [["b"]]]})),
    ],
    ids=["str for int", "float for int", "list values", "null values", "int for str", "int labels", "nested labels"],
)
def test_from_table_rejects_values_or_labels_of_the_wrong_type(vtype, table):
    with pytest.raises(CorruptMetadataError, match="'n'"):
        ColumnIndex.from_table("n", table, vtype)


def test_from_table_accepts_types_that_normalize_to_the_column_type():
    table = pa.table({"n": pa.array([1, 2], pa.int32()), "partition": pa.array([["a"], ["b"]], pa.list_(pa.large_string()))})
    idx = ColumnIndex.from_table("n", table, pa.int64())
    assert idx.values.type.equals(pa.int64())
    assert idx.lookup_labels("==", 2) == ["b"]
    empty = pa.table({"n": pa.array([], pa.null()), "partition": pa.array([], pa.list_(pa.string()))})
    assert len(ColumnIndex.from_table("n", empty, pa.int64())) == 0


def test_from_table_drops_null_labels_instead_of_inventing_partitions():
    table = pa.table({"n": [1, 2], "partition": [["a", None], ["b"]]})
    idx = ColumnIndex.from_table("n", table, pa.int64())
    assert index_pairs(idx) == {(1, "a"), (2, "b")}


@pytest.mark.parametrize(
    "mapping",
    [{"3": [5]}, {"3": [None]}, {"3": [["a"]]}, {3: [None]}, {"x": ["a"]}, {"3": "abc"}],
)
def test_from_inline_rejects_what_kartothek_never_writes(mapping):
    with pytest.raises(CorruptMetadataError, match="'n'"):
        ColumnIndex.from_inline("n", mapping, pa.int64())


def test_lookups_over_values_python_datetimes_cannot_hold():
    # timestamp[us] and date32 reach far beyond year 9999; a lookup must not convert them
    far = pa.array([-(2**62), 0, 1_700_000_000_000_000, 2**62], pa.timestamp("us", "UTC"))
    idx = ColumnIndex.build("t", far, pa.array(["a", "b", "c", "d"]))
    lit = pd.Timestamp("2023-11-14 22:13:20", tz="UTC")
    assert idx.lookup_labels("==", lit) == ["c"]
    assert idx.lookup_labels(">", pd.Timestamp("2030-01-01", tz="UTC")) == ["d"]
    assert idx.lookup_labels("<=", lit) == ["a", "b", "c"]
    days = pa.array([-(2**31), 0, 19_000, 2**31 - 1], pa.int32()).cast(pa.date32())
    idx = ColumnIndex.build("d", days, pa.array(["a", "b", "c", "d"]))
    assert idx.lookup_labels(">=", dt.date(2022, 1, 8)) == ["c", "d"]  # day 19,000
    assert idx.lookup_labels("!=", dt.date(1970, 1, 1)) == ["a", "c", "d"]


@pytest.mark.parametrize("domain", sorted(ALL_TYPES))
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_build_from_label_ids_equals_build_from_label_strings(domain, data):
    """``build_ids`` (a file table's idx: lists: ascending row ids into unique labels, some
    labels without values) is the same index as ``build`` over the label strings: values,
    groups, label order, label ids and the on-disk table."""
    t, values = ALL_TYPES[domain]
    if domain == "float64":
        values = values | st.just(math.nan)
    n_labels = data.draw(st.integers(1, 6))
    ids = sorted(data.draw(st.lists(st.integers(0, n_labels - 1), max_size=20)))
    vals = data.draw(st.lists(values, min_size=len(ids), max_size=len(ids)))
    if domain == "ts":
        arr = pa.array([None if v is None else v.value // 1000 for v in vals], pa.int64()).cast(t)
    else:
        arr = pa.array(vals, type=t)
    names = pa.array([f"p={k}/f" for k in range(n_labels)], pa.string())
    a = ColumnIndex.build("c", arr, names.take(pa.array(ids, pa.int64())))
    b = ColumnIndex.build_ids("c", arr, np.array(ids, dtype=np.int64), names)
    assert b.labels.to_pylist() == a.labels.to_pylist()
    assert b.label_ids.tolist() == a.label_ids.tolist() and b.offsets.tolist() == a.offsets.tolist()
    assert [_nan_key(v) for v in b.values.to_pylist()] == [_nan_key(v) for v in a.values.to_pylist()]
    rows = [[(_nan_key(r["c"]), r["partition"]) for r in i.to_table().to_pylist()] for i in (a, b)]
    assert rows[0] == rows[1] and b.to_table().schema.equals(a.to_table().schema)


@pytest.mark.parametrize("domain", sorted(ALL_TYPES))
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_index_file_reads_back_as_the_plain_table(domain, data):
    """The index file (labels handed to the writer dictionary-encoded, without the stored
    Arrow schema where Parquet restores the value type alone) reads back, with pyarrow as
    kartothek and plateau read it, exactly as the plain ``to_table()``: same schema (the
    time zone of zoned timestamps kept), values and label lists."""
    import io

    import pyarrow.parquet as pq

    from kstore.blocks.write import index_file_bytes

    t, arr, labels = _draw_pairs(domain, data)
    idx = ColumnIndex.build("c", arr, pa.array(labels, pa.string()))
    got = pq.read_table(io.BytesIO(index_file_bytes(idx)))
    plain = idx.to_table()
    assert got.schema.remove_metadata().equals(plain.schema.remove_metadata())
    assert got.column("partition").to_pylist() == plain.column("partition").to_pylist()
    assert [_nan_key(v) for v in got.column("c").to_pylist()] == [_nan_key(v) for v in plain.column("c").to_pylist()]
    back = ColumnIndex.from_table("c", got, index_storage_type(t))
    assert index_pairs(back) == index_pairs(idx)


def test_index_file_keeps_a_time_zone_parquet_cannot_say():
    """Parquet knows only "adjusted to UTC": a Europe/Berlin index keeps its stored schema."""
    import io

    import pyarrow.parquet as pq

    from kstore.blocks.write import index_file_bytes

    t = pa.timestamp("us", "Europe/Berlin")
    idx = ColumnIndex.build("c", pa.array([0, 10**12, 0], pa.int64()).cast(t), pa.array(["a", "b", "c"]))
    got = pq.read_table(io.BytesIO(index_file_bytes(idx)))
    assert got.schema.field("c").type == t
    assert got.column("partition").to_pylist() == [["a", "c"], ["b"]]


@pytest.mark.parametrize("column", ["c", "partition.list.element"])
def test_index_file_delta_encodes_sorted_integers(column):
    """An integer index's values are sorted and distinct: their file stores the small steps
    (DELTA_BINARY_PACKED, no dictionary) and the labels stay dictionary-encoded; a value
    column named like the labels' Parquet path still writes and reads back."""
    import io

    import pyarrow.parquet as pq

    from kstore.blocks.write import index_file_bytes

    n = 100_000
    idx = ColumnIndex.build(column, pa.array(np.arange(n) * 3), pa.array([f"p={k % 7}/f" for k in range(n)]))
    data = index_file_bytes(idx)
    meta = pq.ParquetFile(io.BytesIO(data)).metadata.row_group(0)
    if column == "c":
        assert "DELTA_BINARY_PACKED" in meta.column(0).encodings
        assert meta.column(0).total_compressed_size < n // 10  # a few bits a value, not 8 bytes
    assert "RLE_DICTIONARY" in meta.column(1).encodings
    back = ColumnIndex.from_table(column, pq.read_table(io.BytesIO(data)), pa.int64())
    assert index_pairs(back) == index_pairs(idx)


@pytest.mark.parametrize(("dtype", "base"), [(pa.int64(), -(2**63)), (pa.int32(), -5), (pa.uint64(), 2**64 - 300_000),
                                             (pa.int64(), 2**63 - 300_000)])
@pytest.mark.parametrize("repeat", [False, True])
@pytest.mark.parametrize("seed", [0, 1])
def test_index_of_many_distinct_ids_equals_the_general_build(dtype, base, repeat, seed):
    """Distinct dense integers (an id column: its positions are placed by value, not
    sorted) give the index the general build gives, at the type's edges; one repeated
    value sends the build back to sorting, with the same result."""
    from kstore.core.index import stable_order

    rng = np.random.default_rng(seed)
    n = 70_000 + int(rng.integers(0, 1000))
    values = base + rng.permutation(3 * n)[:n].astype(object)
    if repeat:
        values[-1] = values[0]
    files = np.sort(rng.integers(0, 40, n))  # ascending file ids, as a file table gives them
    arr = pa.array(list(values), dtype)
    names = pa.array([f"p={k}/f" for k in range(40)], pa.string())
    fast = ColumnIndex.build_ids("id", arr, files, names)
    general = ColumnIndex.build("id", arr, names.take(pa.array(files)))
    assert index_pairs(fast) == index_pairs(general)
    assert fast.values.equals(general.values) and fast.offsets.tolist() == general.offsets.tolist()
    order = stable_order(arr)
    assert order.tolist() == np.argsort(np.array(values.tolist(), dtype=object), kind="stable").tolist()
