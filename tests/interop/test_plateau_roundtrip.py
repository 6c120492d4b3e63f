"""kstore <-> plateau 4.6 (the maintained kartothek fork) on one local directory store.

* Datasets kstore writes (several dtypes, partition_on 0/1/2 columns, secondary indices,
  JSON and msgpack.zstd metadata) read correctly with ``plateau.api.dataset.read_table``,
  with and without predicates, and plateau sees and answers kstore's secondary indices and
  the implicit partition indices.
* Datasets plateau writes (``store_dataframes_as_dataset``, then
  ``update_dataset_from_dataframes`` with ``delete_scope``) read correctly in kstore,
  including predicates and index lookups; kstore can append to them and plateau still
  reads the result.

plateau gets ``functools.partial(minimalkv.get_store_from_url, "hfs://<dir>")``; kstore gets
the same directory as a plain path.
"""

from __future__ import annotations

import datetime as dt
import functools
import operator
import warnings

import minimalkv
import numpy as np
import pandas as pd
import pandas.testing as pdt
import pytest

import kstore

plateau_api = pytest.importorskip("plateau.api.dataset")
from plateau.core.dataset import DatasetMetadata as PlateauMetadata  # noqa: E402
from plateau.core.factory import DatasetFactory  # noqa: E402

BERLIN = "Europe/Berlin"

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning",
                                        "ignore::UserWarning")


@pytest.fixture
def store_dir(tmp_path) -> str:
    d = tmp_path / "store"
    d.mkdir()
    return str(d)


def pstore(path: str):
    """plateau's store: a minimalkv factory of the same directory."""
    return functools.partial(minimalkv.get_store_from_url, "hfs://" + path)


def p_read(path: str, uuid: str, **kwargs) -> pd.DataFrame:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return plateau_api.read_table(uuid, store=pstore(path), **kwargs)


def by_id(df: pd.DataFrame) -> pd.DataFrame:
    return df.sort_values("id", kind="stable").reset_index(drop=True)


_OPS = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
        ">=": operator.ge}


def pandas_ids(df: pd.DataFrame, dnf) -> list[int]:
    """Ids of the rows of ``df`` matching a DNF predicate (no nulls in the columns used)."""
    keep = np.zeros(len(df), dtype=bool)
    for conj in dnf:
        m = np.ones(len(df), dtype=bool)
        for col, op, value in conj:
            s = df[col]
            m &= (s.isin(value) if op == "in" else _OPS[op](s, value)).to_numpy(dtype=bool)
        keep |= m
    return sorted(int(i) for i in df.loc[keep, "id"])


def ts_ns(values, tz: str | None = None) -> pd.Series:
    s = pd.Series([pd.Timestamp(v) for v in values]).astype("datetime64[ns]")
    return s.dt.tz_localize("UTC").dt.tz_convert(tz) if tz else s


# ---------------------------------------------------------------------------------------
# kstore writes, plateau reads
# ---------------------------------------------------------------------------------------

N = 24


def kstore_source() -> pd.DataFrame:
    ids = np.arange(N)
    return pd.DataFrame(
        {
            "id": ids,
            "p": pd.Series(["a/b", "c d", "ü%="])[ids % 3].to_numpy(),  # values kartothek would mangle
            "q": (ids // 3) % 2 + 1,
            "x": (ids % 5).astype("int64"),
            "s": [f"s{i % 4}" for i in ids],
            "i8": (ids - 12).astype("int8"),
            "u64": np.array([2**64 - 1 - int(i) for i in ids], dtype="uint64"),
            "f": ids * 0.25,
            "f32": (ids * 0.5).astype("float32"),
            "b": ids % 2 == 0,
            "d": [dt.date(2024, 1, 1) + dt.timedelta(days=int(i)) for i in ids],
            "ts": ts_ns([f"2024-01-01 {int(i) % 24:02d}:00:00.000001" for i in ids]),
            "tz": ts_ns([f"2024-10-26 {int(i):02d}:30" if i < 24 else "2024-01-01" for i in ids], BERLIN),
            "ns": [None if i % 7 == 0 else f"n{i}" for i in ids],
            "by": [bytes([int(i)]) for i in ids],
            "l": [[int(i)] * int(i % 3) for i in ids],
        }
    )


def expected_plateau(src: pd.DataFrame) -> pd.DataFrame:
    """What plateau returns (dates as objects, its default; normalized ints/floats)."""
    out = src.copy()
    out["i8"] = out["i8"].astype("int64")
    out["f32"] = out["f32"].astype("float64")
    return out


LAYOUTS = {"0cols": [], "1col": ["p"], "2cols": ["p", "q"]}


@pytest.fixture(scope="module", params=[(lay, fmt) for lay in LAYOUTS for fmt in ("json", "msgpack.zstd")],
                ids=lambda p: f"{p[0]}-{p[1]}")
def kstore_dataset(request, tmp_path_factory):
    """Read-only for the tests (module scope: written once per layout)."""
    layout, fmt = request.param
    store_dir = str(tmp_path_factory.mktemp("kstore-written"))
    src = kstore_source()
    partition_on = LAYOUTS[layout]
    # two chunks -> two files per partition value
    kstore.store_dataset(store_dir, "kds", [src.iloc[: N // 2], src.iloc[N // 2 :]], partition_on=partition_on,
                         secondary_indices=["x", "s"], metadata_format=fmt, metadata={"by": "kstore"})
    return store_dir, src, partition_on, fmt


def test_plateau_reads_kstore_dataset(kstore_dataset):
    path, src, partition_on, fmt = kstore_dataset
    df = p_read(path, "kds")
    assert sorted(df.columns) == sorted(src.columns)
    out = by_id(df)[list(src.columns)]
    exp = expected_plateau(src)
    assert [list(v) for v in out["l"]] == [list(v) for v in exp["l"]]
    out, exp = out.drop(columns="l"), exp.drop(columns="l")
    pdt.assert_frame_equal(out, exp, check_dtype=False, check_exact=True)
    # dtype families as plateau users know them
    assert out["id"].dtype == "int64" and out["i8"].dtype == "int64" and out["u64"].dtype == "uint64"
    assert out["b"].dtype == bool and out["d"].dtype == object
    assert str(out["tz"].dtype).endswith(f"{BERLIN}]")
    assert out["p"].tolist() == src["p"].tolist()  # '/', ' ', '%', '=' survive in partition values


def test_plateau_reads_kstore_metadata(kstore_dataset):
    path, src, partition_on, fmt = kstore_dataset
    meta = PlateauMetadata.load_from_store("kds", pstore(path)())
    assert meta.uuid == "kds"
    assert meta.partition_keys == partition_on
    assert meta.metadata["by"] == "kstore"
    assert set(meta.partitions) == set(kstore.load_metadata(path, "kds").partitions)
    assert meta.table_name == "table"
    assert set(meta.schema.names) == set(src.columns)


PLATEAU_PREDICATES = [
    [[("x", "==", 3)]],
    [[("p", "==", "a/b")]],
    [[("p", "in", ["c d", "ü%="]), ("q", "==", 2)]],
    [[("s", "in", ["s1", "s2"]), ("f", ">", 3.0)]],
    [[("q", "==", 2)], [("x", "<", 2)]],
    [[("s", "!=", "s0"), ("i8", ">=", 0)]],
]


@pytest.mark.parametrize("pred", PLATEAU_PREDICATES, ids=lambda p: str(p))
def test_plateau_predicates_on_kstore_dataset(kstore_dataset, pred):
    path, src, partition_on, fmt = kstore_dataset
    df = p_read(path, "kds", predicates=pred)
    assert sorted(df["id"].tolist()) == pandas_ids(src, pred)


def test_plateau_sees_and_answers_kstore_indices(kstore_dataset):
    path, src, partition_on, fmt = kstore_dataset
    store = pstore(path)()
    meta = PlateauMetadata.load_from_store("kds", store).load_all_indices(store)
    assert set(meta.secondary_indices) == {"x", "s"}
    assert set(meta.index_columns) == {"x", "s", *partition_on}
    for col, values in (("x", range(6)), ("s", ["s0", "s1", "s2", "s3", "nope"])):
        index = meta.indices[col]
        for v in values:
            theirs = sorted(index.eval_operator("==", v))
            ours = kstore.index_lookup(path, "kds", col, v)
            assert theirs == ours, (col, v)
            rows = src[src[col] == v]
            assert bool(ours) == (len(rows) > 0)
        assert sorted(index.eval_operator(">=", values[0] if col == "x" else "s2")) == sorted(
            kstore.plan_read(path, "kds", predicates=[[(col, ">=", values[0] if col == "x" else "s2")]]).labels)
    # plateau's query over both indices == kstore's plan (exact per partition)
    theirs = sorted(meta.query(x=3, s="s3"))
    ours = sorted(kstore.plan_read(path, "kds", predicates=[[("x", "==", 3), ("s", "==", "s3")]]).labels)
    assert theirs == ours and ours
    # via the factory, as plateau's readers use it
    factory = DatasetFactory("kds", pstore(path), load_all_indices=True)
    assert set(factory.secondary_indices) == {"x", "s"}
    assert sorted(factory.indices["x"].eval_operator("in", [1, 2])) == sorted(
        kstore.plan_read(path, "kds", predicates=[[("x", "in", [1, 2])]]).labels)


def test_plateau_partition_indices_on_kstore_dataset(kstore_dataset):
    path, src, partition_on, fmt = kstore_dataset
    store = pstore(path)()
    meta = PlateauMetadata.load_from_store("kds", store).load_partition_indices()
    if not partition_on:  # an unpartitioned dataset has no partition index in plateau either
        assert not meta.partition_keys and "p" not in meta.indices
        return
    for value in src["p"].unique():
        assert sorted(meta.indices["p"].eval_operator("==", value)) == kstore.index_lookup(path, "kds", "p", value)
        assert kstore.index_lookup(path, "kds", "p", value)


def test_plateau_index_file_schema_is_what_kartothek_writes(kstore_dataset):
    path, src, partition_on, fmt = kstore_dataset
    store = pstore(path)()
    meta = PlateauMetadata.load_from_store("kds", store).load_all_indices(store)
    frame = meta.get_indices_as_dataframe(columns=["x", "s"])
    assert len(frame) > 0


def test_plateau_reads_kstore_nullable_ints_exactly(store_dir):
    """An Int64 column with missing values must not come back as float (precision loss)."""
    src = pd.DataFrame({"id": [0, 1, 2, 3], "ni": pd.array([2**62 + 1, None, -3, 2**53 + 1], dtype="Int64"),
                        "nb": pd.array([True, None, False, True], dtype="boolean")})
    kstore.store_dataset(store_dir, "nullable", src)
    out = by_id(p_read(store_dir, "nullable"))
    assert out["ni"].dtype == "Int64", out["ni"].dtype
    assert out["ni"].tolist()[0] == 2**62 + 1 and out["ni"].tolist()[3] == 2**53 + 1
    assert out["nb"].dtype == "boolean", out["nb"].dtype


def test_plateau_reads_kstore_update(store_dir):
    src = kstore_source()
    kstore.store_dataset(store_dir, "upd", src.iloc[:12], partition_on=["p"], secondary_indices=["x"])
    kstore.update_dataset(store_dir, "upd", src.iloc[12:])
    kstore.update_dataset(store_dir, "upd", delete_scope=[{"p": "c d"}])
    keep = src[src["p"] != "c d"]
    out = by_id(p_read(store_dir, "upd"))
    assert out["id"].tolist() == keep["id"].tolist()
    assert sorted(p_read(store_dir, "upd", predicates=[[("x", "==", 4)]])["id"]) == pandas_ids(keep, [[("x", "==", 4)]])


# ---------------------------------------------------------------------------------------
# plateau writes, kstore reads
# ---------------------------------------------------------------------------------------


def plateau_source(n: int = 24, offset: int = 0) -> pd.DataFrame:
    ids = np.arange(offset, offset + n)
    return pd.DataFrame(
        {
            "id": ids,
            "p": pd.Series(["a", "b", "c"])[ids % 3].to_numpy(),
            "q": (ids // 3) % 2 + 1,
            "x": (ids % 5).astype("int64"),
            "s": [f"s{i % 4}" for i in ids],
            "f": ids * 0.25,
            "b": ids % 2 == 0,
            "d": [dt.date(2024, 1, 1) + dt.timedelta(days=int(i)) for i in ids],
            "ts": ts_ns([pd.Timestamp("2024-01-01") + pd.Timedelta(hours=int(i)) for i in ids]),
            "ns": [None if i % 7 == 0 else f"n{i}" for i in ids],
        }
    )


def kstore_expected(src: pd.DataFrame) -> pd.DataFrame:
    """kstore's dtype contract: dates and timestamps -> datetime64[us] (see tests/drivers/test_eager.py)."""
    out = src.copy()
    out["d"] = pd.to_datetime(out["d"]).astype("datetime64[us]")
    out["ts"] = out["ts"].astype("datetime64[us]")
    return out


def write_plateau(path: str, uuid: str, dfs, partition_on, fmt: str = "json", secondary_indices=("x", "s")):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plateau_api.store_dataframes_as_dataset(
            store=pstore(path), dataset_uuid=uuid, dfs=list(dfs), partition_on=list(partition_on) or None,
            secondary_indices=list(secondary_indices) or None, metadata_storage_format=fmt,
            metadata={"by": "plateau"},
        )


#: plateau layouts: an int partition column alone, and a str one (large_string under pandas 3)
P_LAYOUTS = {"0cols": [], "1col_int": ["q"], "2cols": ["p", "q"]}


@pytest.fixture(scope="module", params=[(lay, fmt) for lay in P_LAYOUTS for fmt in ("json", "msgpack")],
                ids=lambda p: f"{p[0]}-{p[1]}")
def plateau_dataset(request, tmp_path_factory):
    """Read-only for the tests (module scope: written once per layout)."""
    layout, fmt = request.param
    store_dir = str(tmp_path_factory.mktemp("plateau-written"))
    src = plateau_source()
    write_plateau(store_dir, "pds", [src.iloc[:12], src.iloc[12:]], P_LAYOUTS[layout], fmt)
    suffix = ".msgpack.zstd" if fmt == "msgpack" else ".json"
    assert kstore.open_store(store_dir).exists("pds.by-dataset-metadata" + suffix)
    return store_dir, src, P_LAYOUTS[layout], fmt


def test_kstore_reads_plateau_dataset(plateau_dataset):
    path, src, partition_on, fmt = plateau_dataset
    out = kstore.read_dataset(path, "pds")
    assert list(out.columns)[: len(partition_on)] == partition_on
    out = by_id(out)[list(src.columns)]
    pdt.assert_frame_equal(out, kstore_expected(src), check_dtype=True, check_exact=True)
    meta = kstore.load_metadata(path, "pds")
    assert meta.partition_keys == tuple(partition_on)
    assert meta.metadata["by"] == "plateau"
    assert set(meta.indices) | set(meta.inline_indices) == {"x", "s"}
    assert kstore.read_schema(path, "pds").names[: len(partition_on)] == partition_on
    # dates as objects, as plateau returns them
    obj = by_id(kstore.read_dataset(path, "pds", dates_as_object=True))
    assert obj["d"].tolist() == src["d"].tolist()


KSTORE_PREDICATES = [
    [[("x", "==", 3)]],
    [[("x", "in", [0, 4]), ("s", "!=", "s0")]],
    [[("p", "==", "b")]],
    [[("p", "in", ["a", "c"]), ("q", ">", 1)]],
    [[("s", "==", "s2")], [("f", ">=", 5.0)]],
    [[("b", "==", False), ("d", "<", dt.date(2024, 1, 10))]],
    [[("ts", ">", pd.Timestamp("2024-01-01 20:00")), ("x", "<=", 1)]],
]


@pytest.mark.parametrize("pred", KSTORE_PREDICATES, ids=lambda p: str(p))
def test_kstore_predicates_on_plateau_dataset(plateau_dataset, pred):
    path, src, partition_on, fmt = plateau_dataset
    expected = pandas_ids(src, pred)
    out = kstore.read_dataset(path, "pds", predicates=pred)
    assert sorted(out["id"].tolist()) == expected
    # plateau agrees on the rows
    theirs = p_read(path, "pds", predicates=pred)
    assert sorted(theirs["id"].tolist()) == expected


def test_kstore_uses_plateau_indices(plateau_dataset):
    path, src, partition_on, fmt = plateau_dataset
    store = pstore(path)()
    meta = PlateauMetadata.load_from_store("pds", store).load_all_indices(store)
    for col, values in (("x", range(6)), ("s", ["s0", "s3", "nope"])):
        for v in values:
            assert kstore.index_lookup(path, "pds", col, v) == sorted(meta.indices[col].eval_operator("==", v))
    plan = kstore.plan_read(path, "pds", predicates=[[("x", "==", 2), ("s", "==", "s1")]])
    assert sorted(plan.labels) == sorted(meta.query(x=2, s="s1"))
    if partition_on:
        assert len(plan.labels) < plan.n_files


def test_kstore_reads_plateau_update_with_delete_scope(store_dir):
    src = plateau_source()
    write_plateau(store_dir, "pds", [src], ["p", "q"])
    new = plateau_source(6, offset=100)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plateau_api.update_dataset_from_dataframes(
            [new], store=pstore(store_dir), dataset_uuid="pds", delete_scope=[{"p": "a"}, {"p": "b", "q": 2}],
            partition_on=["p", "q"], secondary_indices=["x", "s"],
        )
    gone = (src["p"] == "a") | ((src["p"] == "b") & (src["q"] == 2))
    expected = pd.concat([src[~gone], new], ignore_index=True)
    out = by_id(kstore.read_dataset(store_dir, "pds"))[list(src.columns)]
    pdt.assert_frame_equal(out, by_id(kstore_expected(expected)), check_dtype=True)
    for pred in ([[("p", "==", "a")]], [[("x", "==", 2)]], [[("q", "==", 2), ("s", "in", ["s1", "s2"])]]):
        got = kstore.read_dataset(store_dir, "pds", predicates=pred)
        assert sorted(got["id"].tolist()) == pandas_ids(expected, pred), pred
    assert kstore.index_lookup(store_dir, "pds", "x", 2) == sorted(
        PlateauMetadata.load_from_store("pds", pstore(store_dir)()).load_all_indices(pstore(store_dir)())
        .indices["x"].eval_operator("==", 2)
    )


def test_kstore_appends_to_plateau_dataset_and_plateau_reads_it(store_dir):
    src = plateau_source()
    write_plateau(store_dir, "mix", [src], ["p"])
    more = plateau_source(9, offset=200)
    kstore.update_dataset(store_dir, "mix", more)
    kstore.update_dataset(store_dir, "mix", delete_scope=[{"p": "c"}])
    expected = pd.concat([src, more], ignore_index=True)
    expected = expected[expected["p"] != "c"]
    theirs = by_id(p_read(store_dir, "mix"))
    assert theirs["id"].tolist() == sorted(expected["id"])
    assert sorted(p_read(store_dir, "mix", predicates=[[("x", "==", 1)]])["id"]) == pandas_ids(
        expected, [[("x", "==", 1)]])
    ours = by_id(kstore.read_dataset(store_dir, "mix"))[list(src.columns)]
    pdt.assert_frame_equal(ours, by_id(kstore_expected(expected)), check_dtype=True)


def test_kstore_reads_plateau_bool_and_slash_partitions_correctly(store_dir):
    """plateau/kartothek bugs: unescaped '/' in values, 'False' read back as True. kstore
    returns the source truth for datasets plateau wrote."""
    src = pd.DataFrame({"id": range(6), "flag": [True, False] * 3, "path": ["a/b", "a/b", "c", "c", "d/e/f", "d/e/f"],
                        "v": np.arange(6) * 1.5})
    write_plateau(store_dir, "bugs", [src], ["flag", "path"], secondary_indices=())
    out = by_id(kstore.read_dataset(store_dir, "bugs"))[list(src.columns)]
    pdt.assert_frame_equal(out, src, check_dtype=True)
    got = kstore.read_dataset(store_dir, "bugs", predicates=[[("flag", "==", False), ("path", "==", "d/e/f")]])
    assert got["id"].tolist() == [5]
