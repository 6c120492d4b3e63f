"""The Dask driver on a real ``distributed.LocalCluster`` (2 worker processes) and on threads.

Behaviours: round trips with exact dtypes, shuffle/bucketing file counts, predicates
planned on the client (files opened are counted across processes through a log file),
column projection reaching the Parquet read, dispatch_by, updates, a Dask append racing
eager appends, failures that commit nothing, and stores that cannot reach the workers.
"""

from __future__ import annotations

import datetime as dt
import io
import math
import os
import pathlib
import threading
import time
from collections import Counter
from decimal import Decimal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import kstore
import kstore.dask as kd
from kstore.errors import (
    ColumnNotFoundError,
    DatasetExistsError,
    InvalidArgumentError,
    SchemaMismatchError,
    StoreError,
)
from kstore.io.local import LocalStore
from kstore.io.memory import MemoryStore

dask = pytest.importorskip("dask")
dd = pytest.importorskip("dask.dataframe")
distributed = pytest.importorskip("distributed")

pytestmark = pytest.mark.dask

UUID = "sales"
N = 240


@pytest.fixture
def client(dask_cluster_client):
    """The worker's process cluster (tests/conftest.py): 2 worker processes, 1 thread each."""
    return dask_cluster_client


@pytest.fixture(params=["distributed", "threads"])
def scheduler(request):
    """Run the test body with the process cluster or the threaded scheduler as default."""
    target = request.getfixturevalue("client") if request.param == "distributed" else "threads"
    with dask.config.set(scheduler=target):
        yield request.param


@pytest.fixture
def url(tmp_path) -> str:
    return "file://" + str(tmp_path / "store")


def frame(n: int = N, start: int = 0) -> pd.DataFrame:
    ids = np.arange(start, start + n)
    return pd.DataFrame(
        {
            "id": ids,
            "p": pd.Series(["a", "b", "c d"])[ids % 3].to_numpy(),
            "x": ids % 7,
            "s": [f"s{i % 5}" for i in ids],
            "v": ids * 0.5,
            "d": pd.Series([dt.datetime(2024, 1, 1) + dt.timedelta(days=int(i % 4)) for i in ids]).astype(
                "datetime64[ns]"),
            "n": pd.array([None if i % 11 == 0 else i for i in ids], dtype="Int64"),
            "b": ids % 2 == 0,
        }
    )


def ddf_of(df: pd.DataFrame, npartitions: int = 4):
    return dd.from_pandas(df, npartitions=npartitions, sort=False)


def by_id(df: pd.DataFrame) -> pd.DataFrame:
    return df.sort_values("id").reset_index(drop=True)


def data_keys(url: str, uuid: str = UUID) -> set[str]:
    st = kstore.open_store(url)
    return {k for k in st.iter_prefix(f"{uuid}/table/") if k.endswith(".parquet")}


def files_per_value(url: str, column: str = "p", uuid: str = UUID) -> Counter:
    meta = kstore.load_metadata(url, uuid)
    return Counter(label.split("/")[0] for label in meta.partitions)


class OpenLogStore(LocalStore):
    """A local directory that appends every opened key to a log file (works across processes)."""

    def __init__(self, root: str, log: str) -> None:
        super().__init__(root)
        self.url = None  # no URL: workers must get the factory, not a plain directory URL
        self.log = log

    def open(self, key: str):
        with open(self.log, "a") as fh:
            fh.write(key + "\n")
        return super().open(key)


class OpenLogFactory:
    """Picklable zero-argument store factory for :class:`OpenLogStore`."""

    def __init__(self, root: str, log: str) -> None:
        self.root, self.log = root, log

    def __call__(self) -> OpenLogStore:
        return OpenLogStore(self.root, self.log)

    def opened(self) -> list[str]:
        if not os.path.exists(self.log):
            return []
        with open(self.log) as fh:
            return [line.strip() for line in fh if line.strip().endswith(".parquet")]


# ---------------------------------------------------------------------------------------
# round trips
# ---------------------------------------------------------------------------------------


def test_round_trip(scheduler, url):
    df = frame()
    meta = kd.store_dataset(url, UUID, ddf_of(df), partition_on=["p"], secondary_indices=["x"])
    assert meta.version == 0 and meta.partition_keys == ("p",)
    assert set(meta.indices) == {"x"}
    # no shuffle: every Dask partition writes one file per value it holds
    assert files_per_value(url) == {"p=a": 4, "p=b": 4, "p=c%20d": 4}

    ddf = kd.read_dataset(url, UUID)
    assert ddf.npartitions == 12
    got = ddf.compute()
    expected = kstore.read_dataset(url, UUID)
    # strings follow Dask's convert-string option (string[pyarrow]); every other dtype is eager's
    strings = ["p", "s"]
    assert all(got[c].dtype == pd.StringDtype("pyarrow") for c in strings)
    pd.testing.assert_frame_equal(by_id(got).astype({c: expected[c].dtype for c in strings}), by_id(expected))
    pd.testing.assert_frame_equal(by_id(got)[df.columns], by_id(df), check_dtype=False)
    # meta is the computed dtypes, exactly
    assert ddf.dtypes.to_dict() == got.dtypes.to_dict()
    assert got["n"].dtype == pd.Int64Dtype() and got["d"].dtype == np.dtype("datetime64[us]")
    assert got["x"].dtype == np.dtype("int64") and got["b"].dtype == np.dtype("bool")


def test_meta_matches_each_partition_with_projection_and_predicates(url):
    with dask.config.set(scheduler="threads"):
        kd.store_dataset(url, UUID, ddf_of(frame()), partition_on=["p", "b"])
        ddf = kd.read_dataset(url, UUID, columns=["n", "p", "d"], predicates=[[("x", ">", 3)]])
        assert list(ddf.columns) == ["n", "p", "d"]
        for part in ddf.to_delayed():
            pdf = part.compute()
            assert pdf.dtypes.to_dict() == ddf.dtypes.to_dict()
        got = ddf.compute()
    df = frame()
    assert sorted(got["n"].dropna()) == sorted(df.loc[df.x > 3, "n"].dropna())


def test_written_files_are_plain_parquet_without_partition_columns(url):
    with dask.config.set(scheduler="threads"):
        kd.store_dataset(url, UUID, ddf_of(frame(), 2), partition_on="p", shuffle=True)
    st = kstore.open_store(url)
    rows = 0
    for key in data_keys(url):
        t = pq.read_table(io.BytesIO(st.get(key)))
        assert "p" not in t.column_names
        rows += t.num_rows
    assert rows == N


# ---------------------------------------------------------------------------------------
# shuffle and buckets
# ---------------------------------------------------------------------------------------


def test_shuffle_writes_one_file_per_partition_value(scheduler, url):
    kd.store_dataset(url, UUID, ddf_of(frame(), 4), partition_on=["p"], shuffle=True)
    assert files_per_value(url) == {"p=a": 1, "p=b": 1, "p=c%20d": 1}
    assert len(data_keys(url)) == 3
    got = kd.read_dataset(url, UUID).compute()
    assert sorted(got["id"]) == list(range(N))


def test_bucketed_shuffle_writes_one_file_per_bucket(scheduler, url):
    df = frame()
    kd.store_dataset(url, UUID, ddf_of(df, 4), partition_on=["p"], secondary_indices=["x"], shuffle=True,
                     bucket_by="x", num_buckets=3)
    bucket = pd.util.hash_pandas_object(df[["x"]], index=False).to_numpy() % np.uint64(3)
    expected = Counter()
    for p, group in pd.DataFrame({"p": df["p"], "bucket": bucket}).groupby("p"):
        expected["p=" + p.replace(" ", "%20")] = group["bucket"].nunique()
    assert files_per_value(url) == expected
    assert max(expected.values()) == 3  # the data does fill several buckets
    # each file holds exactly one bucket; no row is lost or duplicated
    st = kstore.open_store(url)
    seen = []
    for key in data_keys(url):
        t = pq.read_table(io.BytesIO(st.get(key)), columns=["id", "x"]).to_pandas()
        b = pd.util.hash_pandas_object(t[["x"]], index=False).to_numpy() % np.uint64(3)
        assert len(set(b)) == 1
        seen.extend(t["id"])
    assert sorted(seen) == list(range(N))
    assert kd.BUCKET_COLUMN not in kstore.read_schema(url, UUID).names


def test_shuffle_with_empty_partitions_and_object_dates(scheduler, url):
    """More Dask partitions than values: some are empty after the shuffle; their object
    columns have no type, which must not fail the write or the schema."""
    df = frame(40)
    df["day"] = [dt.date(2024, 1, 1 + i % 2) for i in range(40)]  # object dtype: datetime.date
    with dask.config.set({"dataframe.convert-string": False}):  # else Dask makes the dates strings
        ddf = ddf_of(df, 6)
    kd.store_dataset(url, UUID, ddf, partition_on=["day"], shuffle=True)
    assert files_per_value(url, "day") == {"day=2024-01-01": 1, "day=2024-01-02": 1}
    assert str(kstore.read_schema(url, UUID).field("day").type) == "date32[day]"
    got = kd.read_dataset(url, UUID, predicates=[[("day", "==", dt.date(2024, 1, 2))]]).compute()
    assert sorted(got["id"]) == list(range(1, 40, 2))


def test_bucket_arguments_are_checked(url):
    ddf = ddf_of(frame())
    with pytest.raises(InvalidArgumentError, match="shuffle=True"):
        kd.store_dataset(url, UUID, ddf, partition_on="p", bucket_by="x", num_buckets=2)
    with pytest.raises(InvalidArgumentError, match="num_buckets"):
        kd.store_dataset(url, UUID, ddf, partition_on="p", shuffle=True, bucket_by="x")
    with pytest.raises(ColumnNotFoundError, match="nope"):
        kd.store_dataset(url, UUID, ddf, partition_on="p", shuffle=True, bucket_by="nope", num_buckets=2)
    assert not kstore.open_store(url).exists(f"{UUID}.by-dataset-metadata.json")


# ---------------------------------------------------------------------------------------
# reads: planning, projection, dispatch
# ---------------------------------------------------------------------------------------


def test_predicates_are_planned_on_the_client(scheduler, tmp_path):
    root = str(tmp_path / "logged")
    factory = OpenLogFactory(root, str(tmp_path / "opens.log"))
    with dask.config.set(scheduler="threads"):
        kd.store_dataset("file://" + root, UUID, ddf_of(frame(), 4), partition_on=["p"], secondary_indices=["x"],
                         shuffle=True, bucket_by="x", num_buckets=7)
    all_files = data_keys("file://" + root)
    df = frame()
    bucket = pd.util.hash_pandas_object(df[["x"]], index=False).to_numpy() % np.uint64(7)
    assert len(all_files) == len(set(zip(df["p"], bucket))) >= 12

    ddf = kd.read_dataset(factory, UUID, predicates=[[("x", "==", 3)]])
    assert ddf.npartitions == 3  # one bucket per value of p holds x == 3
    got = ddf.compute()
    opened = factory.opened()
    assert len(opened) == 3 and set(opened) < all_files
    pd.testing.assert_frame_equal(by_id(got)[df.columns], by_id(df[df.x == 3]), check_dtype=False)

    os.unlink(factory.log)
    got = kd.read_dataset(factory, UUID, predicates=[[("p", "==", "b"), ("x", "in", [1, 2])]]).compute()
    assert len(factory.opened()) == 2
    assert sorted(got["id"]) == sorted(df.loc[(df.p == "b") & df.x.isin([1, 2]), "id"])


def test_column_projection_reaches_the_parquet_read(monkeypatch, url):
    with dask.config.set(scheduler="threads"):
        kd.store_dataset(url, UUID, ddf_of(frame()), partition_on=["p"])
        seen = []
        real = kd.read_task

        def spy(store, plan, task, columns=None):
            seen.append(tuple(columns))
            return real(store, plan, task, columns)

        monkeypatch.setattr(kd, "read_task", spy)
        ddf = kd.read_dataset(url, UUID)
        total = ddf["v"].sum().compute()
        assert total == frame()["v"].sum()
        assert seen and set(seen) == {("v",)}
        seen.clear()
        sub = ddf[["id", "p"]].compute()
        assert {frozenset(c) for c in seen} == {frozenset({"id", "p"})} and list(sub.columns) == ["id", "p"]


def test_dispatch_by_partition_column(scheduler, url):
    kd.store_dataset(url, UUID, ddf_of(frame(), 4), partition_on=["p", "b"])
    ddf = kd.read_dataset(url, UUID, dispatch_by=["p"])
    assert ddf.npartitions == 3
    parts = [part.compute() for part in ddf.to_delayed()]
    assert [sorted(set(p["p"])) for p in parts] == [["a"], ["b"], ["c d"]]
    assert sum(len(p) for p in parts) == N
    with pytest.raises(InvalidArgumentError, match="partition columns"):
        kd.read_dataset(url, UUID, dispatch_by=["x"])
    with pytest.raises(ColumnNotFoundError):
        kd.read_dataset(url, UUID, dispatch_by=["nope"])


def nullable_chunks():
    """Two chunks (two files): nulls only in the second, non-UTF-8 bytes in both."""
    first = pa.table({"id": [0, 1], "bo": pa.array([True, False]), "n": pa.array([1, 2 ** 40]),
                      "bin": pa.array([b"\xff\x00", b"ok"]), "lst": pa.array([[1], [2, None]]),
                      "dec": pa.array([Decimal("1.5"), Decimal("-2")], pa.decimal128(38, 10)),
                      "st": pa.array([{"x": 1}, {"x": 2}])})
    second = pa.table({"id": [2, 3], "bo": pa.array([None, False]), "n": pa.array([None, 4], pa.int64()),
                       "bin": pa.array([b"\x80", None]), "lst": pa.array([None, []], pa.list_(pa.int64())),
                       "dec": pa.array([None, Decimal("3")], pa.decimal128(38, 10)),
                       "st": pa.array([None, {"x": 3}])})
    return first, second


@pytest.mark.parametrize("convert_string", [True, False])
def test_every_partition_has_the_meta_dtypes_and_exact_values(url, convert_string):
    """Nulls in one file only: meta and every partition agree (nullable Int64/boolean);
    binary (non-UTF-8), decimal, list and struct columns are never turned into strings."""
    first, second = nullable_chunks()
    kstore.store_dataset(url, UUID, [first, second])
    source = pa.concat_tables([first, second])
    with dask.config.set({"scheduler": "threads", "dataframe.convert-string": convert_string}):
        ddf = kd.read_dataset(url, UUID)
        assert ddf.npartitions == 2
        for part in ddf.to_delayed():
            assert part.compute().dtypes.to_dict() == ddf.dtypes.to_dict()
        got = by_id(ddf.compute())
        assert int((ddf["bo"] == False).sum().compute()) == 2  # noqa: E712
    assert ddf.dtypes["n"] == pd.Int64Dtype() and ddf.dtypes["bo"] == pd.BooleanDtype()
    for name in source.column_names:
        values = [None if v is pd.NA else v for v in got[name].tolist()]
        assert values == source.column(name).to_pylist(), name
    # a read that plans only the null-free file has plain dtypes in meta and partitions alike
    ddf = kd.read_dataset(url, UUID, predicates=[[("id", "<", 2)]], columns=["n", "bo"])
    with dask.config.set(scheduler="threads"):
        assert ddf.compute().dtypes.to_dict() == ddf.dtypes.to_dict() == {"n": np.dtype("int64"),
                                                                       "bo": np.dtype("bool")}


def test_kartothek_dtypes_fixture_reads_exactly(tmp_path):
    """kartothek's pub_dtypes (bytes, lists, nullable columns, no statistics) through Dask."""
    import shutil

    from tests.interop.fixtures import SOURCE_STORE

    root = str(tmp_path / "kartothek")
    shutil.copytree(SOURCE_STORE / "pub_dtypes", f"{root}/pub_dtypes")
    shutil.copy(SOURCE_STORE / "pub_dtypes.by-dataset-metadata.json", root)
    expected = kstore.read_dataset(root, "pub_dtypes")
    with dask.config.set(scheduler="threads"):
        ddf = kd.read_dataset(root, "pub_dtypes")
        got = ddf.compute()
        for part in ddf.to_delayed():
            assert part.compute().dtypes.to_dict() == ddf.dtypes.to_dict()
    got, expected = by_id_col(got, "row_id"), by_id_col(expected, "row_id")
    for name in expected.columns:
        assert [_plain(v) for v in got[name]] == [_plain(v) for v in expected[name]], name


def by_id_col(df: pd.DataFrame, col: str) -> pd.DataFrame:
    return df.sort_values(col).reset_index(drop=True)


def _plain(v):
    if isinstance(v, np.ndarray):
        v = v.tolist()
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return None if v is None or v is pd.NA or v is pd.NaT or (isinstance(v, float) and math.isnan(v)) else v


@pytest.mark.parametrize("pred", [None, [[("x", ">", 3)]], [[("p", "==", "b")]]])
def test_no_columns_counts_rows(scheduler, url, pred):
    df = frame()
    kd.store_dataset(url, UUID, ddf_of(df), partition_on=["p"])
    ddf = kd.read_dataset(url, UUID, columns=[], predicates=pred)
    want = len(df) if pred is None else int(((df.x > 3) if pred[0][0][0] == "x" else (df.p == "b")).sum())
    assert list(ddf.columns) == [] and len(ddf) == want
    assert ddf.compute().shape == (want, 0)


def test_read_with_nothing_planned_is_empty_with_meta(url):
    with dask.config.set(scheduler="threads"):
        kd.store_dataset(url, UUID, ddf_of(frame()), partition_on=["p"])
        ddf = kd.read_dataset(url, UUID, columns=["id", "n"], predicates=[[("p", "==", "zz")]])
        got = ddf.compute()
    assert len(got) == 0 and got.dtypes.to_dict() == {"id": np.dtype("int64"), "n": pd.Int64Dtype()}


def test_time_travel_reads_an_older_version(url):
    with dask.config.set(scheduler="threads"):
        kd.store_dataset(url, UUID, ddf_of(frame()), partition_on=["p"])
        kd.update_dataset(url, UUID, ddf_of(frame(30, start=N), 1))
        assert len(kd.read_dataset(url, UUID).compute()) == N + 30
        assert len(kd.read_dataset(url, UUID, version=0).compute()) == N


# ---------------------------------------------------------------------------------------
# modes and validation
# ---------------------------------------------------------------------------------------


def test_modes(url):
    with dask.config.set(scheduler="threads"):
        kd.store_dataset(url, UUID, ddf_of(frame()), partition_on=["p"], secondary_indices=["x"])
        with pytest.raises(DatasetExistsError):
            kd.store_dataset(url, UUID, ddf_of(frame()), partition_on=["p"])
        m = kd.store_dataset(url, UUID, ddf_of(frame(30)), partition_on=["p"], secondary_indices="x",
                             mode="overwrite")
        assert m.version == 1 and len(kd.read_dataset(url, UUID).compute()) == 30
        m = kd.store_dataset(url, UUID, ddf_of(frame(30, start=30)), mode="append")
        assert m.version == 2 and set(m.indices) == {"x"}  # the existing index is kept up to date
        assert len(kstore.read_dataset(url, UUID, predicates=[[("x", "==", 1)]])) == len(
            [i for i in range(60) if i % 7 == 1])
        # overwrite_partitions: replace only the values the new data has
        new = frame(6, start=1000)
        new = new[new.p == "a"]
        m = kd.update_dataset(url, UUID, ddf_of(new, 1), mode="overwrite_partitions")
        assert m.version == 3
        got = kd.read_dataset(url, UUID).compute()
    assert sorted(got.loc[got.p == "a", "id"]) == sorted(new["id"])
    assert sorted(got.loc[got.p != "a", "id"]) == [i for i in range(60) if i % 3 != 0]
    assert [e.operation for e in kstore.history(url, UUID)] == ["create", "overwrite", "append",
                                                                "overwrite_partitions"]


def test_one_commit_per_write_and_transactions_are_idempotent(monkeypatch, url):
    import kstore.blocks.job

    commits = []
    real = kstore.blocks.job.commit

    def counting(*args, **kwargs):
        commits.append(args[2].kind)
        return real(*args, **kwargs)

    monkeypatch.setattr(kstore.blocks.job, "commit", counting)
    with dask.config.set(scheduler="threads"):
        kd.store_dataset(url, UUID, ddf_of(frame(), 6), partition_on=["p"], secondary_indices=["x"])
        assert commits == ["create"]
        first = kd.update_dataset(url, UUID, ddf_of(frame(30, start=N), 3), txn=("job", 1))
        keys = data_keys(url)
        again = kd.update_dataset(url, UUID, ddf_of(frame(30, start=N), 3).map_partitions(_fail_in_partition),
                                  txn=("job", 1))
    assert commits == ["create", "append"]
    assert again.version == first.version == 1 and data_keys(url) == keys


def test_arguments_and_schema_are_checked_before_computing(url):
    calls = []

    def spy(part):
        calls.append(len(part))
        return part

    with dask.config.set(scheduler="threads"):
        ddf = ddf_of(frame()).map_partitions(spy, meta=frame().iloc[:0])
        with pytest.raises(ColumnNotFoundError, match="nope"):
            kd.store_dataset(url, UUID, ddf, partition_on=["nope"])
        with pytest.raises(ColumnNotFoundError, match="missing"):
            kd.store_dataset(url, UUID, ddf, secondary_indices=["missing"])
        with pytest.raises(InvalidArgumentError, match="mode"):
            kd.store_dataset(url, UUID, ddf, mode="upsert")
        with pytest.raises(InvalidArgumentError, match="dask.dataframe"):
            kd.store_dataset(url, UUID, frame())
        assert calls == []
        assert not kstore.open_store(url).exists(f"{UUID}.by-dataset-metadata.json")
        kstore.store_dataset(url, UUID, frame(10), partition_on=["p"])
        bad = ddf_of(frame().assign(v=lambda d: d["v"].astype(str)))
        bad = bad.map_partitions(spy, meta=bad._meta)
        with pytest.raises(SchemaMismatchError, match="'v'"):
            kd.update_dataset(url, UUID, bad)
        with pytest.raises(InvalidArgumentError, match="partitioned on"):
            kd.update_dataset(url, UUID, ddf, partition_on=["s"])
    assert calls == []
    assert kstore.load_metadata(url, UUID).version == 0


# ---------------------------------------------------------------------------------------
# concurrency and failures
# ---------------------------------------------------------------------------------------


def _gated(part: pd.DataFrame, gate: str) -> pd.DataFrame:
    """A Dask task that says it started (the write has read its version) and waits until the
    test opens the gate (files: the tasks run in worker processes)."""
    pathlib.Path(gate + ".started").touch()
    deadline = time.monotonic() + 60
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.01)
    return part


def test_dask_append_and_eager_appends_both_land(client, url, tmp_path):
    kstore.store_dataset(url, UUID, frame(30), partition_on=["p"], secondary_indices=["x"])
    errors = []
    gate = str(tmp_path / "gate")

    def dask_append():
        try:
            with dask.config.set(scheduler=client):
                kd.update_dataset(url, UUID, ddf_of(frame(60, start=1000), 4).map_partitions(_gated, gate))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    t = threading.Thread(target=dask_append)
    t.start()
    deadline = time.monotonic() + 60
    while not os.path.exists(gate + ".started") and time.monotonic() < deadline:  # the Dask workers run
        time.sleep(0.01)
    for k in range(5):  # eager appends commit while the Dask write runs
        kstore.update_dataset(url, UUID, frame(3, start=2000 + 10 * k))
    pathlib.Path(gate).touch()
    t.join()
    assert not errors
    hist = kstore.history(url, UUID)
    assert [e.operation for e in hist] == ["create"] + ["append"] * 6
    # the Dask write read version 0 and committed last, on top of the eager appends
    assert [e.rows_added for e in hist[1:]] == [3] * 5 + [60]
    expected = list(range(30)) + list(range(1000, 1060)) + [2000 + 10 * k + i for k in range(5) for i in range(3)]
    with dask.config.set(scheduler="threads"):
        got = kd.read_dataset(url, UUID).compute()
    assert sorted(got["id"]) == sorted(expected)
    assert sorted(kstore.read_dataset(url, UUID, predicates=[[("x", "==", 2)]])["id"]) == sorted(
        i for i in expected if i % 7 == 2)


LAST = 3 * (N // 4)  # first id of the last of 4 Dask partitions


def _fail_in_partition(part: pd.DataFrame) -> pd.DataFrame:
    if len(part) and part["id"].min() >= LAST:
        time.sleep(0.5)  # the other partitions have written their files by now
        raise ValueError("boom in partition")
    return part


def _delay_last(part: pd.DataFrame) -> pd.DataFrame:
    if len(part) and part["id"].min() >= LAST:
        time.sleep(0.5)
    return part


def _null_partition_values(df: pd.DataFrame) -> pd.DataFrame:
    """Null partition values in the last partition only: that partition's write task fails."""
    df = df.copy()
    df.loc[df["id"] >= LAST, "p"] = None
    return df


@pytest.mark.parametrize("where", ["upstream", "writer"])
def test_a_failing_task_commits_nothing(scheduler, url, where):
    kstore.store_dataset(url, UUID, frame(30), partition_on=["p"])
    before_keys = data_keys(url)
    if where == "upstream":
        ddf, error = ddf_of(frame(), 4).map_partitions(_fail_in_partition), ValueError
    else:
        ddf, error = ddf_of(_null_partition_values(frame()), 4).map_partitions(_delay_last), InvalidArgumentError
    with pytest.raises(error):
        kd.update_dataset(url, UUID, ddf)
    meta = kstore.load_metadata(url, UUID)
    assert meta.version == 0 and len(kstore.history(url, UUID)) == 1
    assert {meta.file_key(lab) for lab in meta.partitions} == before_keys
    assert sorted(kstore.read_dataset(url, UUID)["id"]) == list(range(30))
    # the other partitions wrote files before the failure; they are deleted again
    assert data_keys(url) == before_keys


class DyingStore(LocalStore):
    """A local directory whose worker process dies (``os._exit``) right after writing the
    second data file of Dask partition 1: once (a marker file remembers it), or every time."""

    def __init__(self, root: str, marker: str, always: bool) -> None:
        super().__init__(root)
        self.url = None  # no URL: workers get the factory
        self.marker, self.always, self.written = marker, always, 0

    def put(self, key: str, data: bytes) -> None:
        super().put(key, data)
        stem = key.rsplit("/", 1)[-1][: -len(".parquet")]
        if key.endswith(".parquet") and int(stem[-12:-5], 16) == 1:  # the file id's partition number
            self.written += 1
            if self.written == 2 and (self.always or not os.path.exists(self.marker)):
                open(self.marker, "a").close()
                os._exit(1)  # the worker process dies: no exception, no cleanup


class DyingFactory:
    def __init__(self, root: str, marker: str, always: bool) -> None:
        self.root, self.marker, self.always = root, marker, always

    def __call__(self) -> DyingStore:
        return DyingStore(self.root, self.marker, self.always)


@pytest.fixture
def own_cluster():
    """A cluster of its own (workers die here), with one retry per task: 3 workers, so that
    after two deaths one is still up to run the other tasks (the test does not wait on the
    nannies restarting the dead ones, which a loaded machine may not finish)."""
    with dask.config.set({"distributed.scheduler.allowed-failures": 1}):
        cluster = distributed.LocalCluster(n_workers=3, threads_per_worker=1, processes=True,
                                           dashboard_address=":0", silence_logs=50)
        client = distributed.Client(cluster, set_as_default=False)
    try:
        with dask.config.set(scheduler=client):
            yield client
    finally:
        client.close()
        cluster.close()


@pytest.mark.timeout(240)
@pytest.mark.parametrize("always", [False, True], ids=["dies-once", "dies-every-time"])
def test_a_worker_process_dying_mid_write(own_cluster, tmp_path, always):
    """A worker killed after writing part of its files: the retried task's write commits
    every row exactly once; a task that kills every worker it runs on fails the write, which
    commits nothing and leaves none of its files (those the dead workers wrote included)."""
    root = str(tmp_path / "store")
    url = "file://" + root
    kstore.store_dataset(url, UUID, frame(30), partition_on=["p"])
    before = data_keys(url)
    factory = DyingFactory(root, str(tmp_path / "died"), always)
    if always:
        with pytest.raises(distributed.scheduler.KilledWorker):
            kd.update_dataset(factory, UUID, ddf_of(frame(start=30), 4))
        assert data_keys(url) == before  # the dead attempts' files are gone too
        assert kstore.load_metadata(url, UUID).version == 0
        assert sorted(kstore.read_dataset(url, UUID)["id"]) == list(range(30))
    else:
        meta = kd.update_dataset(factory, UUID, ddf_of(frame(start=30), 4))
        assert os.path.exists(tmp_path / "died")  # a worker did die
        got = kstore.read_dataset(url, UUID)
        assert sorted(got["id"]) == list(range(N + 30))  # every row once: no lost, no doubled rows
        committed = {meta.file_key(lab) for lab in meta.partitions}
        assert committed <= data_keys(url)
        # the dead attempt's files are not part of the dataset (garbage collection's orphans)
        orphans = data_keys(url) - committed
        assert len(orphans) >= 2  # (and those of tasks whose results died with it)
        result = kstore.garbage_collect(url, UUID, retention=dt.timedelta(0), enforce_retention_duration=False)
        assert orphans <= set(result.deleted_files) and data_keys(url) == committed
        assert sorted(kstore.read_dataset(url, UUID)["id"]) == list(range(N + 30))


def test_partitions_disagreeing_on_a_type_commit_nothing(scheduler, url):
    df = frame()
    parts = [df.iloc[:120], df.iloc[120:].assign(x=lambda d: d["x"].astype(float))]
    ddf = dd.from_delayed([dask.delayed(p) for p in parts], meta=df.iloc[:0], verify_meta=False)
    with pytest.raises(SchemaMismatchError, match="'x'"):
        kd.store_dataset(url, UUID, ddf, partition_on=["p"])
    assert data_keys(url) == set()
    assert not kstore.open_store(url).exists(f"{UUID}.by-dataset-metadata.json")


# ---------------------------------------------------------------------------------------
# stores on workers
# ---------------------------------------------------------------------------------------


def test_in_process_stores_and_process_workers(client, url):
    name = f"memory://dask-{os.getpid()}-{time.time_ns()}"
    with dask.config.set(scheduler=client):
        with pytest.raises(StoreError, match="memory store"):
            kd.store_dataset(name, UUID, ddf_of(frame()))
        with pytest.raises(StoreError, match="pickled"):
            kd.store_dataset(MemoryStore(), UUID, ddf_of(frame()))
        # a directory URL or a picklable factory works
        kd.store_dataset(OpenLogFactory(url[len("file://"):], os.devnull), UUID, ddf_of(frame()))
        assert len(kd.read_dataset(url, UUID).compute()) == N
    kstore.store_dataset(name, UUID, frame(10))
    with dask.config.set(scheduler=client), pytest.raises(StoreError, match="memory store"):
        kd.read_dataset(name, UUID)
    with dask.config.set(scheduler="threads"):  # in-process workers see the memory store
        assert len(kd.read_dataset(name, UUID).compute()) == 10
        kd.update_dataset(name, UUID, ddf_of(frame(5, start=10), 1))
        assert sorted(kd.read_dataset(name, UUID).compute()["id"]) == list(range(15))


def test_write_tasks_carry_a_kstore_name(tmp_path):
    """The write's tasks are ``kstore-write-<token>`` in the task stream, the dashboard and
    progress bars (not the repr of an object), as the read's are ``kstore-read-<dataset>``."""
    from dask.callbacks import Callback
    from dask.utils import key_split

    keys: list = []
    df = pd.DataFrame({"p": [1, 1, 2, 2], "x": [1, 2, 3, 4]})
    with Callback(pretask=lambda key, dsk, state: keys.append(key)), dask.config.set(scheduler="sync"):
        kd.store_dataset("file://" + str(tmp_path), "named", dd.from_pandas(df, npartitions=2), partition_on=["p"])
    names = {key_split(k) for k in keys}
    assert "kstore-write" in names, names
    assert not any("object at 0x" in n for n in names), names
    assert len(kstore.read_dataset("file://" + str(tmp_path), "named")) == 4
