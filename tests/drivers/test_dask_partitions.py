"""``kstore.dask.read_dataset(blocksize=)``: small files aggregated into Dask partitions.

Behaviours: with a target size, each Dask partition reads a run of consecutive planned files
(plan order) whose stored bytes sum to at most the target (a larger file alone), and no two
neighbouring partitions could have been one; the rows are the eager reader's, on a local
directory and a memory store (threads) and on the process cluster; predicates prune before
grouping; ``version=`` / ``as_of=`` group that version's files; ``meta`` has exactly the
dtypes of every computed partition and of the result; datasets without statistics keep one
partition per file; bad values raise InvalidArgumentError naming ``blocksize``.
"""

from __future__ import annotations

import datetime as dt
import time
from decimal import Decimal

import numpy as np
import pandas as pd
import pandas.testing as pdt
import pytest

import kstore
import kstore.dask as kd
from kstore.errors import InvalidArgumentError

dask = pytest.importorskip("dask")
dd = pytest.importorskip("dask.dataframe")
pytest.importorskip("distributed")

pytestmark = pytest.mark.dask

UUID = "small"
FILES = 200


def batch_frame(i: int, rows: int = 5) -> pd.DataFrame:
    """One file's rows: ``batch`` names the file (one value per file), ``k`` is high-cardinality."""
    ids = np.arange(i * rows, (i + 1) * rows)
    return pd.DataFrame({"batch": i, "k": i, "id": ids, "v": ids * 0.5, "s": [f"s{j % 4}" for j in ids]})


def write_small_files(url: str, layout: str, n: int = FILES, start: int = 0, uuid: str = UUID) -> None:
    """``n`` files: one per append-chunk ("chunks") or one per value of ``k`` ("partition_on")."""
    frames = [batch_frame(i) for i in range(start, start + n)]
    exists = start > 0
    if layout == "chunks":
        write = kstore.update_dataset if exists else kstore.store_dataset
        write(url, uuid, iter(frames))
    else:
        write = kstore.update_dataset if exists else kstore.store_dataset
        write(url, uuid, pd.concat(frames, ignore_index=True), partition_on=["k"])


def file_bytes(url: str, uuid: str = UUID, **version) -> dict[int, int]:
    """Stored bytes of each file, by the batch it holds (from the statistics)."""
    stats = kstore.open_dataset(url, uuid, **version).stats()
    assert stats is not None
    lo, hi = stats.column("min:batch").to_pylist(), stats.column("max:batch").to_pylist()
    assert lo == hi  # one batch per file
    return dict(zip(lo, stats.column("bytes").to_pylist()))


def planned_batches(url: str, predicates=None, uuid: str = UUID, **version) -> list[int]:
    """The batches of the planned files, in plan order."""
    snap = kstore.open_dataset(url, uuid, **version)
    stats = snap.stats()
    by_label = dict(zip(stats.column("label").to_pylist(), stats.column("min:batch").to_pylist()))
    return [by_label[label] for label in snap.plan(predicates=predicates).labels]


def partition_batches(ddf) -> list[list[int]]:
    """The batches each Dask partition read, in row order (computed partition by partition)."""
    out = []
    for i in range(ddf.npartitions):
        part = ddf.partitions[i].compute()
        out.append(list(dict.fromkeys(part["batch"].tolist())))
    return out


def assert_grouping(groups: list[list[int]], plan: list[int], sizes: dict[int, int], target: int) -> None:
    """Runs of the plan, in order, each within ``target`` (or one file), none mergeable with the next."""
    assert [b for g in groups for b in g] == plan  # every planned file once, in plan order
    for g in groups:
        assert g, "an empty partition"
        assert len(g) == 1 or sum(sizes[b] for b in g) <= target, (g, [sizes[b] for b in g], target)
    for g, nxt in zip(groups, groups[1:]):  # greedy: the next file did not fit
        assert sum(sizes[b] for b in g) + sizes[nxt[0]] > target


def by_id(df: pd.DataFrame) -> pd.DataFrame:
    return df.sort_values("id").reset_index(drop=True)


@pytest.fixture
def url(tmp_path) -> str:
    return "file://" + str(tmp_path / "store")


@pytest.fixture(params=["file", "memory"])
def any_url(request, tmp_path) -> str:
    if request.param == "file":
        return "file://" + str(tmp_path / "store")
    return f"memory://dask-partitions-{tmp_path.name}"


# ---------------------------------------------------------------------------------------
# grouping
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["chunks", "partition_on"])
def test_blocksize_groups_small_files(any_url, layout):
    write_small_files(any_url, layout)
    sizes = file_bytes(any_url)
    assert len(sizes) == FILES
    target = 10 * int(np.median(list(sizes.values())))
    with dask.config.set(scheduler="threads"):
        plain = kd.read_dataset(any_url, UUID)
        ddf = kd.read_dataset(any_url, UUID, blocksize=target)
        assert plain.npartitions == FILES
        assert 1 < ddf.npartitions <= FILES // 9  # about 10 files per partition
        groups = partition_batches(ddf)
        got = ddf.compute()
    assert len(groups) == ddf.npartitions
    assert_grouping(groups, planned_batches(any_url), sizes, target)
    expected = kstore.read_dataset(any_url, UUID)
    assert len(got) == FILES * 5
    pdt.assert_frame_equal(by_id(got), by_id(expected), check_dtype=False)
    assert got.dtypes.drop("s").equals(expected.dtypes.drop("s"))  # strings follow Dask's convert-string


def test_blocksize_strings_and_extremes(url):
    write_small_files(url, "chunks", n=40)
    sizes = file_bytes(url)
    total = sum(sizes.values())
    with dask.config.set(scheduler="threads"):
        assert kd.read_dataset(url, UUID, blocksize="1 GiB").npartitions == 1
        assert kd.read_dataset(url, UUID, blocksize=total).npartitions == 1
        assert kd.read_dataset(url, UUID, blocksize=total - 1).npartitions == 2
        one = kd.read_dataset(url, UUID, blocksize=1)  # every file is larger: one partition each
        assert one.npartitions == 40
        assert partition_batches(one) == [[b] for b in planned_batches(url)]
        kib = kd.read_dataset(url, UUID, blocksize="4KiB")
        assert_grouping(partition_batches(kib), planned_batches(url), sizes, 4096)
        assert kd.read_dataset(url, UUID, blocksize=None).npartitions == 40


def test_larger_files_are_partitions_of_their_own(url):
    kstore.store_dataset(url, UUID, iter([batch_frame(0, rows=3), batch_frame(1, rows=3000), batch_frame(2, rows=3),
                                          batch_frame(3, rows=3), batch_frame(4, rows=3000), batch_frame(5, rows=3)]))
    sizes = file_bytes(url)
    target = 3 * max(sizes[0], sizes[2], sizes[3], sizes[5])
    assert sizes[1] > target and sizes[4] > target
    with dask.config.set(scheduler="threads"):
        ddf = kd.read_dataset(url, UUID, blocksize=target)
        groups = partition_batches(ddf)
    plan = planned_batches(url)
    assert_grouping(groups, plan, sizes, target)
    assert [1] in groups and [4] in groups


def test_predicates_prune_before_grouping(url):
    write_small_files(url, "partition_on")
    sizes = file_bytes(url)
    target = 8 * max(sizes.values())
    # a partition-column range and a data-column range (pruned by statistics) in two conjunctions
    predicates = [[("k", ">=", 150)], [("id", "<", 100), ("s", "==", "s1")]]
    plan = planned_batches(url, predicates)
    assert sorted(plan) == list(range(20)) + list(range(150, FILES))
    with dask.config.set(scheduler="threads"):
        ddf = kd.read_dataset(url, UUID, predicates=predicates, blocksize=target)
        assert ddf.npartitions == -(-len(plan) // 8)  # files of one size: 8 per partition
        groups = partition_batches(ddf)
        got = ddf.compute()
    assert_grouping(groups, plan, sizes, target)
    expected = kstore.read_dataset(url, UUID, predicates=predicates)
    assert len(expected) == 50 * 5 + 25
    pdt.assert_frame_equal(by_id(got), by_id(expected), check_dtype=False)


def test_columns_projection_with_grouping(url):
    write_small_files(url, "chunks", n=30)
    with dask.config.set(scheduler="threads"):
        ddf = kd.read_dataset(url, UUID, columns=["v", "batch"], blocksize="1MiB")
        assert ddf.npartitions == 1
        got = ddf.compute()
        assert list(got.columns) == ["v", "batch"]
        assert ddf["v"].sum().compute() == pytest.approx(sum(range(150)) * 0.5)
        counted = kd.read_dataset(url, UUID, columns=[], blocksize=3 * max(file_bytes(url).values()))
        assert counted.npartitions == 10
        assert len(counted) == 150


def test_local_cluster_reads_groups(client_scheduler, url):
    write_small_files(url, "partition_on", n=60)
    sizes = file_bytes(url)
    target = 6 * max(sizes.values())
    ddf = kd.read_dataset(url, UUID, blocksize=target, predicates=[[("v", ">", 10.0)]])
    assert ddf.npartitions == 10
    got = ddf.compute()
    expected = kstore.read_dataset(url, UUID, predicates=[[("v", ">", 10.0)]])
    assert len(got) == 60 * 5 - 21
    pdt.assert_frame_equal(by_id(got), by_id(expected), check_dtype=False)
    assert_grouping(partition_batches(ddf), planned_batches(url, [[("v", ">", 10.0)]]), sizes, target)


@pytest.fixture
def client_scheduler(dask_cluster_client):
    """The process cluster (2 worker processes, tests/conftest.py) as the default scheduler."""
    with dask.config.set(scheduler=dask_cluster_client):
        yield dask_cluster_client


def test_memory_store_refused_on_process_cluster(client_scheduler):
    write_small_files("memory://dask-partitions-refused", "chunks", n=3)
    with pytest.raises(kstore.errors.StoreError, match="memory"):
        kd.read_dataset("memory://dask-partitions-refused", UUID, blocksize="1MiB")


# ---------------------------------------------------------------------------------------
# versions
# ---------------------------------------------------------------------------------------


def test_version_and_as_of_group_that_versions_files(url):
    write_small_files(url, "chunks", n=50)
    time.sleep(0.05)
    write_small_files(url, "chunks", n=70, start=50)
    entries = {e.version: e for e in kstore.history(url, UUID)}
    sizes = file_bytes(url)
    target = 5 * max(sizes.values())
    old_plan = planned_batches(url, version=0)
    assert sorted(old_plan) == list(range(50))
    with dask.config.set(scheduler="threads"):
        for old in (kd.read_dataset(url, UUID, version=0, blocksize=target),
                    kd.read_dataset(url, UUID, as_of=entries[0].timestamp, blocksize=target),
                    kd.read_dataset(url, UUID, as_of=entries[0].timestamp.isoformat(), blocksize=target)):
            assert old.npartitions == 10
            assert_grouping(partition_batches(old), old_plan, sizes, target)
            pdt.assert_frame_equal(by_id(old.compute()), by_id(kstore.read_dataset(url, UUID, version=0)),
                                   check_dtype=False)
        new = kd.read_dataset(url, UUID, as_of=entries[1].timestamp, blocksize=target)
        assert new.npartitions == 24
        assert sorted(new.compute()["batch"].unique()) == list(range(120))


# ---------------------------------------------------------------------------------------
# meta
# ---------------------------------------------------------------------------------------


def odd_frame(i: int) -> pd.DataFrame:
    """Six rows of odd types; only batch 1 has a null in ``ni``/``nb`` (nullable dtypes everywhere)."""
    n = 6
    ids = np.arange(i * n, (i + 1) * n)
    return pd.DataFrame({
        "id": ids,
        "batch": i,
        "p": ids % 3,
        "pdate": [dt.date(2024, 1, 1 + int(j % 2)) for j in ids],
        "pstr": [f"v{j % 2}" for j in ids],
        "cat": pd.Categorical([["x", "y", "z"][j % 3] for j in ids]),
        "date": [dt.date(2024, 1, 1) + dt.timedelta(days=int(j)) for j in ids],
        "ts": pd.date_range("2024-01-01", periods=n, freq="h", tz="UTC") + pd.Timedelta(days=i),
        "naive": pd.date_range("2024-01-01", periods=n, freq="min").astype("datetime64[ns]"),
        "i8": (ids % 100).astype("int8"),
        "u32": ids.astype("uint32"),
        "f32": ids.astype("float32"),
        "ni": pd.array([None if (i == 1 and k == 2) else int(j) for k, j in enumerate(ids)], dtype="Int64"),
        "nb": pd.array([None if (i == 1 and k == 3) else bool(j % 2) for k, j in enumerate(ids)], dtype="boolean"),
        "s": [f"s{j}" for j in ids],
        "ns": [None if j % 5 == 0 else f"n{j}" for j in ids],
        "bin": [bytes([int(j) % 256]) for j in ids],
        "dec": [Decimal(int(j)) / 10 for j in ids],
        "lst": [[int(j), int(j) + 1] for j in ids],
    })


@pytest.fixture(scope="module")
def odd_url(tmp_path_factory) -> str:
    url = "file://" + str(tmp_path_factory.mktemp("odd") / "store")
    kstore.store_dataset(url, UUID, iter([odd_frame(i) for i in range(4)]), partition_on=["p", "pdate", "pstr"])
    return url


@pytest.mark.parametrize("blocksize", [None, "1MiB", "30KiB"])
@pytest.mark.parametrize(("columns", "predicates"), [
    (None, None),
    (["cat", "date", "p", "ni"], None),
    (["pstr", "nb", "lst"], [[("p", "==", 1)]]),
    (None, [[("i8", ">", 100)]]),          # empty result
    (["id", "ts"], [[("id", "<", 7)]]),    # batch 0 and 1 files only
], ids=["all", "subset", "predicate", "empty", "two-batches"])
def test_meta_dtypes_are_the_computed_dtypes(odd_url, blocksize, columns, predicates):
    with dask.config.set(scheduler="threads"):
        ddf = kd.read_dataset(odd_url, UUID, columns=columns, predicates=predicates, blocksize=blocksize)
        got = ddf.compute()
        parts = [ddf.partitions[i].compute() for i in range(ddf.npartitions)]
    files = len(kstore.open_dataset(odd_url, UUID).plan(columns, predicates).labels)
    expected_parts = {None: max(files, 1), "1MiB": 1}.get(blocksize)
    if expected_parts is not None:
        assert ddf.npartitions == expected_parts
    else:
        assert 1 <= ddf.npartitions <= max(files, 1)
    assert list(ddf.columns) == list(got.columns)
    pdt.assert_series_equal(ddf._meta.dtypes, got.dtypes)
    for part in parts:
        pdt.assert_series_equal(ddf._meta.dtypes, part.dtypes)
    assert ddf.dtypes.equals(got.dtypes)
    eager = kstore.read_dataset(odd_url, UUID, columns=columns, predicates=predicates)
    assert len(got) == len(eager)
    if "ni" in got.columns and len(got):
        assert str(got["ni"].dtype) == "Int64"  # a null in one file: Int64 in every partition


def test_grouped_partitions_without_the_nulls_keep_nullable_dtypes(odd_url):
    """Only batch 1's files hold nulls in ``ni``/``nb``: partitions without them are Int64/boolean too."""
    sizes = kstore.open_dataset(odd_url, UUID).stats().column("bytes").to_pylist()
    assert len(sizes) == 4 * 6  # 4 batches x 6 (p, pdate, pstr) value combinations, one row each
    with dask.config.set(scheduler="threads"):
        ddf = kd.read_dataset(odd_url, UUID, blocksize=3 * max(sizes))
        assert ddf.npartitions == 8
        parts = [ddf.partitions[i].compute() for i in range(ddf.npartitions)]
    assert sum(len(p) for p in parts) == 24
    without = [p for p in parts if 1 not in set(p["batch"])]
    assert without and all(p["ni"].notna().all() for p in without)
    for part in parts:
        assert str(part["ni"].dtype) == "Int64" and str(part["nb"].dtype) == "boolean"
        pdt.assert_series_equal(part.dtypes, ddf._meta.dtypes)


# ---------------------------------------------------------------------------------------
# datasets without statistics, arguments
# ---------------------------------------------------------------------------------------


def test_dataset_without_statistics_keeps_one_partition_per_file(tmp_path):
    plateau_api = pytest.importorskip("plateau.api.dataset")
    minimalkv = pytest.importorskip("minimalkv")
    import functools
    import warnings

    path = str(tmp_path / "plateau")
    (tmp_path / "plateau").mkdir()
    frames = [batch_frame(i) for i in range(6)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plateau_api.store_dataframes_as_dataset(
            store=functools.partial(minimalkv.get_store_from_url, "hfs://" + path), dataset_uuid=UUID,
            dfs=frames, partition_on=["k"])
    assert kstore.open_dataset(path, UUID).stats() is None
    with dask.config.set(scheduler="threads"):
        ddf = kd.read_dataset(path, UUID, blocksize="1GiB")
        assert ddf.npartitions == 6
        got = ddf.compute()
    pdt.assert_frame_equal(by_id(got), by_id(kstore.read_dataset(path, UUID)), check_dtype=False)


@pytest.mark.parametrize("bad", [0, -5, "0B", "-1MB", "lots", "", "MB", "inf", True, 1.5, [128]])
def test_bad_blocksize(url, bad):
    write_small_files(url, "chunks", n=2)
    with pytest.raises(InvalidArgumentError, match="blocksize"):
        kd.read_dataset(url, UUID, blocksize=bad)


def test_blocksize_with_dispatch_by_is_refused(url):
    write_small_files(url, "partition_on", n=2)
    with pytest.raises(InvalidArgumentError, match="blocksize and dispatch_by"):
        kd.read_dataset(url, UUID, blocksize="1MiB", dispatch_by=["k"])
