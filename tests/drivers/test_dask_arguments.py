"""The Dask writers' argument convention ``(store, dataset_uuid, data, *, ...)``, the old
order with a FutureWarning, clear errors for wrong types, and ``read_dataset(as_of=)``."""

from __future__ import annotations

import time
import warnings
from typing import Any

import pandas as pd
import pytest

import kstore
from kstore.errors import InvalidArgumentError

dask = pytest.importorskip("dask")
dd = pytest.importorskip("dask.dataframe")
import kstore.dask as kd  # noqa: E402


def _ddf(values: list[int]) -> Any:
    return dd.from_pandas(pd.DataFrame({"p": [v % 2 for v in values], "x": values}), npartitions=1)


def _xs(url: str, **kwargs: Any) -> list[int]:
    with dask.config.set(scheduler="sync"):
        return sorted(kd.read_dataset(url, "ds", **kwargs).compute()["x"].tolist())


@pytest.mark.parametrize("function", ["store_dataset", "update_dataset"])
def test_new_order_without_warning(function: str, store_url: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with dask.config.set(scheduler="sync"):
            if function == "update_dataset":
                kd.store_dataset(store_url, "ds", _ddf([0]), partition_on=["p"])
            getattr(kd, function)(store_url, "ds", _ddf([1, 2]), partition_on=["p"])
    assert _xs(store_url) == ([0, 1, 2] if function == "update_dataset" else [1, 2])


@pytest.mark.parametrize("function", ["store_dataset", "update_dataset"])
def test_old_order_still_works_with_a_future_warning(function: str, store_url: str) -> None:
    with dask.config.set(scheduler="sync"):
        if function == "update_dataset":
            kd.store_dataset(store_url, "ds", _ddf([0]))
        with pytest.warns(FutureWarning, match=rf"kstore\.dask\.{function}\(data, store, dataset_uuid\) is deprecated") as record:
            getattr(kd, function)(_ddf([1, 2]), store_url, "ds")
    assert record[0].filename == __file__  # points at the caller
    assert _xs(store_url) == ([0, 1, 2] if function == "update_dataset" else [1, 2])


@pytest.mark.parametrize("function", ["store_dataset", "update_dataset"])
@pytest.mark.parametrize(
    "args, match",
    [
        (lambda u, f: (u, f, "ds"), "second argument is the dataset name .* got DataFrame"),
        (lambda u, f: (u, "ds", f.compute()), "third argument .* got DataFrame .*from_pandas"),
        (lambda u, f: (u, "ds", None), "third argument .* got NoneType"),
        (lambda u, f: (f.compute(), u, "ds"), "first argument is the store .* got DataFrame"),
        (lambda u, f: (None, "ds", f), "first argument is the store .* got NoneType"),
        (lambda u, f: (u, 42, f), "second argument is the dataset name .* got int"),
        (lambda u, f: (f, u, 42), "second argument is the dataset name .* got int"),  # old order
    ],
    ids=["ddf-as-name", "pandas-data", "no-data", "pandas-store", "none-store", "int-name", "old-order-int-name"],
)
def test_wrong_types_name_the_position(function: str, args: Any, match: str, store_url: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        with pytest.raises(InvalidArgumentError, match=match) as info:
            getattr(kd, function)(*args(store_url, _ddf([1])))
    assert "Dask DataFrame Structure" not in str(info.value)  # no DataFrame repr in the message
    assert "npartitions" not in str(info.value)


@pytest.mark.parametrize("function", ["store_dataset", "update_dataset"])
@pytest.mark.parametrize("flag", ["shuffle", "compute"])
@pytest.mark.parametrize("value", [pd.Series([True, False]), "no", 1], ids=["series", "text", "int"])
def test_flags_take_true_or_false_only(function: str, flag: str, value: Any, store_url: str) -> None:
    with dask.config.set(scheduler="sync"):
        kd.store_dataset(store_url, "ds", _ddf([0]), partition_on=["p"])
        before = {k: kstore.open_store(store_url).get(k) for k in kstore.open_store(store_url).iter_prefix("")}
        with pytest.raises(InvalidArgumentError, match=flag):
            getattr(kd, function)(store_url, "ds", _ddf([1, 2]), partition_on=["p"], **{flag: value})
    st = kstore.open_store(store_url)
    assert {k: st.get(k) for k in st.iter_prefix("")} == before  # refused before any write
    assert _xs(store_url) == [0]


def test_options_are_keyword_only(store_url: str) -> None:
    with pytest.raises(TypeError):
        kd.store_dataset(store_url, "ds", _ddf([1]), ["p"])  # type: ignore[misc]


def test_read_as_of(store_url: str) -> None:
    with dask.config.set(scheduler="sync"):
        kd.store_dataset(store_url, "ds", _ddf([1]))
        time.sleep(0.05)
        kd.update_dataset(store_url, "ds", _ddf([2]))
    entries = {e.version: e for e in kstore.history(store_url, "ds")}
    first, second = entries[0], entries[1]
    assert _xs(store_url, as_of=first.timestamp) == [1]
    assert _xs(store_url, as_of=second.timestamp.isoformat()) == [1, 2]
    assert _xs(store_url) == [1, 2]
    with pytest.raises(kstore.KstoreError):
        _xs(store_url, as_of=first.timestamp.replace(year=2000))


@pytest.mark.parametrize("function", ["store_dataset", "update_dataset"])
def test_compute_false_commits_only_when_computed(function: str, store_url: str) -> None:
    from dask.delayed import Delayed

    with dask.config.set(scheduler="sync"):
        if function == "update_dataset":
            kd.store_dataset(store_url, "ds", _ddf([0]), partition_on=["p"])
        before = sorted(kstore.open_store(store_url).iter_prefix(""))
        lazy = getattr(kd, function)(store_url, "ds", _ddf([1, 2, 3]), partition_on=["p"], compute=False)
        assert isinstance(lazy, Delayed)
        assert sorted(kstore.open_store(store_url).iter_prefix("")) == before  # nothing written
        meta = lazy.compute()
    assert isinstance(meta, kstore.DatasetMetadata)
    assert meta.version == (1 if function == "update_dataset" else 0)
    assert _xs(store_url) == ([0, 1, 2, 3] if function == "update_dataset" else [1, 2, 3])


def test_compute_false_checks_arguments_now_and_failed_tasks_commit_nothing(store_url: str) -> None:
    with pytest.raises(InvalidArgumentError):
        kd.store_dataset(store_url, "ds", _ddf([1]), mode="upsert", compute=False)  # type: ignore[arg-type]

    def boom(df: pd.DataFrame) -> pd.DataFrame:
        raise RuntimeError("task failed")

    bad = _ddf([1, 2]).map_partitions(boom, meta=_ddf([1])._meta)
    lazy = kd.store_dataset(store_url, "ds", bad, compute=False)
    with dask.config.set(scheduler="sync"), pytest.raises(RuntimeError, match="task failed"):
        lazy.compute()
    with pytest.raises(kstore.errors.DatasetNotFoundError):
        kstore.read_table(store_url, "ds")


def test_compute_false_on_a_process_cluster(dask_cluster_client: Any, tmp_path: Any) -> None:
    url = "file://" + str(tmp_path / "store")
    lazy = kd.store_dataset(url, "ds", _ddf([5, 6]), compute=False)
    meta = dask_cluster_client.compute(lazy).result(timeout=120)
    assert meta.version == 0
    assert _xs(url) == [5, 6]
