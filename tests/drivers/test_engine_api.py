"""One API across engines (#30): ``kstore``, ``kstore.dask`` and ``kstore.spark`` take the
same first parameters in the same order and the same keyword names with the same types and
defaults; a keyword only one engine has is listed here with its reason. The older orders and
``store_dataset(overwrite=)`` keep working for one release with a FutureWarning."""

from __future__ import annotations

import inspect
import subprocess
import sys
import warnings
from collections.abc import Callable
from typing import Any

import pandas as pd
import pytest

import kstore
import kstore.dask as kd
from kstore.errors import DatasetExistsError, InvalidArgumentError

ks = pytest.importorskip("kstore.spark")

ENGINES = {"eager": kstore, "dask": kd, "spark": ks}

#: keywords only some engines have, and why (anything else must be on every engine)
ENGINE_ONLY: dict[str, set[str]] = {
    "overwrite": {"eager"},         # deprecated: mode="overwrite" (FutureWarning)
    "progress": {"eager"},          # a progress bar of the local process (Dask and Spark have their own)
    "compute": {"dask"},            # Dask's lazy graph
    "shuffle": {"dask", "spark"},   # how the engine groups rows before writing (types differ per engine)
    "bucket_by": {"dask"},
    "num_buckets": {"dask"},
    "chunk_bytes": {"spark"},       # executor memory per chunk
    "as_arrow": {"eager"},          # local results: Dask and Spark return their own frames
    "categoricals": {"eager", "dask"},  # pandas dtypes: Spark has its own types
    "dates_as_object": {"eager", "dask"},
    "dispatch_by": {"dask"},        # Dask partitions per partition value
    "blocksize": {"dask"},
    "spark": {"spark"},             # the session (default: the active one)
    "partition_bytes": {"spark"},   # Spark input partition size
}
#: keywords whose type is engine-specific by nature
ENGINE_TYPED = {"shuffle", "store", "dataset_uuid", "data"}

FIRST = {
    "store_dataset": ["store", "dataset_uuid", "data"],
    "update_dataset": ["store", "dataset_uuid", "data"],
    "read_dataset": ["store", "dataset_uuid", "columns", "predicates"],
}


def _params(function: str, engine: str) -> dict[str, inspect.Parameter]:
    return dict(inspect.signature(getattr(ENGINES[engine], function)).parameters)


@pytest.mark.parametrize("function", sorted(FIRST))
def test_every_engine_takes_the_same_leading_parameters(function: str) -> None:
    for engine in ENGINES:
        params = list(_params(function, engine).values())
        lead = [p.name for p in params[: len(FIRST[function])]]
        assert lead == FIRST[function], (engine, lead)
        assert all(p.kind is p.POSITIONAL_OR_KEYWORD for p in params[: len(FIRST[function])]), engine


@pytest.mark.parametrize("function", sorted(FIRST))
def test_every_engine_has_the_same_keywords_with_the_same_types(function: str) -> None:
    by_engine = {engine: _params(function, engine) for engine in ENGINES}
    names = set().union(*(p.keys() for p in by_engine.values()))
    for name in sorted(names):
        having = {engine for engine, params in by_engine.items() if name in params}
        allowed = ENGINE_ONLY.get(name, set(ENGINES))
        assert having <= allowed, f"{function}({name}=) is on {sorted(having)}, allowed on {sorted(allowed)} only"
        if name not in ENGINE_ONLY:
            assert having == set(ENGINES), f"{function}({name}=) is missing on {sorted(set(ENGINES) - having)}"
        if name in ENGINE_TYPED or len(having) < 2:
            continue
        shapes = {engine: (str(by_engine[engine][name].annotation), by_engine[engine][name].default)
                  for engine in having}
        assert len(set(shapes.values())) == 1, f"{function}({name}=) differs between engines: {shapes}"


def test_plan_read_takes_columns_before_predicates_like_read_dataset() -> None:
    lead = list(inspect.signature(kstore.plan_read).parameters)[:4]
    assert lead == FIRST["read_dataset"]


# --- eager: mode= replaces overwrite= -------------------------------------------------------


def _frame(ids: list[int], **extra: Any) -> pd.DataFrame:
    return pd.DataFrame({"p": [i % 2 for i in ids], "id": ids, **extra})


def _ids(url: str) -> list[int]:
    return sorted(kstore.read_dataset(url, "ds")["id"])


def test_eager_store_dataset_modes(store_url: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kstore.store_dataset(store_url, "ds", _frame([1]), partition_on="p")
        with pytest.raises(DatasetExistsError, match="mode='overwrite'"):
            kstore.store_dataset(store_url, "ds", _frame([2]), partition_on="p")
        kstore.store_dataset(store_url, "ds", _frame([2]), mode="append")
        assert _ids(store_url) == [1, 2]
        kstore.store_dataset(store_url, "ds", _frame([4]), mode="overwrite_partitions")
        assert _ids(store_url) == [1, 4]  # p=0 replaced, p=1 kept
        kstore.store_dataset(store_url, "ds", _frame([7], extra=["x"]), mode="append", schema_mode="merge")
        assert _ids(store_url) == [1, 4, 7]
        kstore.store_dataset(store_url, "ds", _frame([9]), mode="overwrite", partition_on="p",
                             schema_mode="overwrite")
        assert _ids(store_url) == [9]
        kstore.store_dataset(store_url, "new", _frame([3]), mode="append", partition_on="p")  # creates
        assert sorted(kstore.read_dataset(store_url, "new")["id"]) == [3]


def test_eager_append_with_a_new_column_needs_schema_merge(store_url: str) -> None:
    kstore.store_dataset(store_url, "ds", _frame([1]), partition_on="p")
    with pytest.raises(kstore.errors.SchemaMismatchError):
        kstore.store_dataset(store_url, "ds", _frame([2], extra=["x"]), mode="append")
    assert _ids(store_url) == [1]


def test_overwrite_keyword_still_works_with_a_future_warning(store_url: str) -> None:
    kstore.store_dataset(store_url, "ds", _frame([1]))
    with pytest.warns(FutureWarning, match=r"overwrite=\.\.\.\) is deprecated; pass mode='overwrite'") as record:
        kstore.store_dataset(store_url, "ds", _frame([5]), overwrite=True)
    assert record[0].filename == __file__
    assert _ids(store_url) == [5]
    with pytest.warns(FutureWarning), pytest.raises(InvalidArgumentError, match="mode='append'"):
        kstore.store_dataset(store_url, "ds", _frame([6]), overwrite=True, mode="append")
    assert _ids(store_url) == [5]


def test_an_overwrite_keeps_the_main_file_format_unless_one_is_given(store_url: str) -> None:
    kstore.store_dataset(store_url, "ds", _frame([1]), metadata_format="msgpack.zstd")
    kstore.store_dataset(store_url, "ds", _frame([2]), mode="overwrite")
    assert kstore.load_metadata(store_url, "ds").main_format == "msgpack.zstd"
    kstore.store_dataset(store_url, "ds", _frame([3]), mode="overwrite", metadata_format="json")
    assert kstore.load_metadata(store_url, "ds").main_format == "json"


# --- Dask: schema_mode on store_dataset -----------------------------------------------------


def test_dask_store_dataset_merges_a_new_column_on_append(store_url: str) -> None:
    import dask
    import dask.dataframe as dd

    kstore.store_dataset(store_url, "ds", _frame([1]), partition_on="p")
    with dask.config.set(scheduler="sync"):
        kd.store_dataset(store_url, "ds", dd.from_pandas(_frame([2], extra=["x"]), npartitions=1),
                         mode="append", schema_mode="merge")
    back = kstore.read_dataset(store_url, "ds").sort_values("id")
    assert back["id"].tolist() == [1, 2]
    assert pd.isna(back["extra"].iloc[0]) and back["extra"].iloc[1] == "x"


# --- Spark: (store, dataset_uuid, data), checked before Spark is touched ---------------------


@pytest.mark.parametrize("function", ["store_dataset", "update_dataset"])
@pytest.mark.parametrize(
    "args, match",
    [
        (lambda u: (u, "ds", pd.DataFrame({"a": [1]})), r"third argument .* got DataFrame \(convert it with "
                                                         r"spark.createDataFrame\)"),
        (lambda u: (u, 42, None), "second argument is the dataset name .* got int"),
        (lambda u: (pd.DataFrame({"a": [1]}), "ds", None), "first argument is the store .* got DataFrame"),
    ],
    ids=["pandas-data", "int-name", "pandas-store"],
)
def test_spark_writers_name_the_wrong_position(function: str, args: Callable[[str], tuple], match: str,
                                               tmp_path: Any) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        getattr(ks, function)(*args(str(tmp_path)))


def test_spark_store_dataset_needs_data(tmp_path: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="third argument .* a Spark DataFrame, got NoneType"):
        ks.store_dataset(str(tmp_path), "ds", None)


def test_spark_read_without_a_session_says_so(tmp_path: Any) -> None:
    # in a fresh interpreter: this worker may have a session running for other tests
    code = ("import kstore.spark as ks, kstore.errors as e\n"
            f"try:\n    ks.read_dataset({str(tmp_path)!r}, 'ds')\n"
            "except e.InvalidArgumentError as exc:\n    print(exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "no SparkSession is active in this thread; start one or pass spark=" in out.stdout, out.stderr


@pytest.mark.spark
@pytest.mark.xdist_group("spark")
def test_spark_old_orders_still_work_with_a_future_warning(spark: Any, tmp_path: Any) -> None:
    root = str(tmp_path / "store")
    df = spark.createDataFrame([(0, 1), (1, 2)], "p INT, id LONG")
    more = spark.createDataFrame([(0, 3)], "p INT, id LONG")
    with pytest.warns(FutureWarning, match=r"kstore\.spark\.store_dataset\(data, store, dataset_uuid\)") as rec:
        ks.store_dataset(df, root, "ds", partition_on="p")
    assert rec[0].filename == __file__
    with pytest.warns(FutureWarning, match=r"kstore\.spark\.update_dataset\(data, store, dataset_uuid\)"):
        ks.update_dataset(more, root, "ds")
    with pytest.warns(FutureWarning, match=r"kstore\.spark\.update_dataset\(data, store, dataset_uuid\)"):
        ks.update_dataset(None, root, "ds", delete_scope=[{"p": 1}])
    with pytest.warns(FutureWarning, match=r"kstore\.spark\.read_dataset\(spark, store, dataset_uuid\)") as rec:
        old = sorted(r.id for r in ks.read_dataset(spark, root, "ds", columns=["id"]).collect())
    assert rec[0].filename == __file__
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*deprecated", category=FutureWarning)
        new = sorted(r.id for r in ks.read_dataset(root, "ds", ["id"]).collect())  # the active session
        also = sorted(r.id for r in ks.read_dataset(root, "ds", ["id"], [[("p", "==", 0)]], spark=spark).collect())
    assert old == new == also == [1, 3]
    with pytest.warns(FutureWarning), pytest.raises(InvalidArgumentError, match="old order takes every other"):
        ks.read_dataset(spark, root, "ds", ["id"])


def test_plan_read_old_order_still_works_with_a_future_warning(store_url: str) -> None:
    kstore.store_dataset(store_url, "ds", _frame([1, 2, 3]), partition_on="p")
    dnf = [[("p", "==", 1)]]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        new = kstore.plan_read(store_url, "ds", ["id"], dnf)
    with pytest.warns(FutureWarning, match=r"plan_read\(store, dataset_uuid, predicates, columns\) is deprecated") as rec:
        old = kstore.plan_read(store_url, "ds", dnf, ["id"])
    assert rec[0].filename == __file__
    with pytest.warns(FutureWarning):
        old_keyword = kstore.plan_read(store_url, "ds", dnf, columns=["id"])
    assert new.keys == old.keys == old_keyword.keys and len(new.keys) == 1  # p=1: one file
    assert new.columns == old.columns == old_keyword.columns
    with pytest.warns(FutureWarning), pytest.raises(InvalidArgumentError, match="predicates given twice"):
        kstore.plan_read(store_url, "ds", dnf, predicates=dnf)


# --- CommitOptions on every write of every engine ---------------------------------------------


def _info_of_newest(url: str) -> dict:
    return dict(kstore.history(url, "ds")[-1].info or {})


@pytest.mark.parametrize("function", ["store_dataset", "update_dataset"])
def test_commit_options_on_eager_and_dask_writes(function: str, store_url: str) -> None:
    import dask
    import dask.dataframe as dd

    if function == "update_dataset":
        kstore.store_dataset(store_url, "ds", _frame([0]), partition_on="p")
    mode = {"mode": "overwrite"} if function == "store_dataset" else {}
    getattr(kstore, function)(store_url, "ds", _frame([1]), partition_on="p", **mode,
                              commit_options={"info": {"job": "eager"}, "max_attempts": 3})
    assert _info_of_newest(store_url) == {"job": "eager"}
    with dask.config.set(scheduler="sync"):
        getattr(kd, function)(store_url, "ds", dd.from_pandas(_frame([2]), npartitions=1), partition_on="p",
                              **mode, commit_options=kstore.CommitOptions(info={"job": "dask"}, txn=("etl", 1)))
        again = getattr(kd, function)(store_url, "ds", dd.from_pandas(_frame([3]), npartitions=1),
                                      partition_on="p", **mode, commit_options={"txn": ("etl", 1)})
    assert _info_of_newest(store_url) == {"job": "dask"}
    assert again.version == kstore.load_metadata(store_url, "ds").version  # the txn made the re-run a no-op
    assert 3 not in _ids(store_url)


@pytest.mark.parametrize("bad, match", [
    ({"txn": ("a", 1)}, "txn= and commit_options 'txn' were both given"),
    ({"retries": 3}, r"unknown commit option\(s\) \['retries'\]"),
    ({"max_attempts": 0}, "max_attempts must be an int from 1 to 10000"),
])
def test_bad_commit_options_write_nothing(bad: dict, match: str, store_url: str) -> None:
    kstore.store_dataset(store_url, "ds", _frame([0]))
    with pytest.raises(InvalidArgumentError, match=match):
        kstore.update_dataset(store_url, "ds", _frame([1]), txn=("a", 1), commit_options=bad)
    assert _ids(store_url) == [0] and len(kstore.history(store_url, "ds")) == 1


@pytest.mark.spark
@pytest.mark.xdist_group("spark")
def test_commit_options_on_spark_writes(spark: Any, tmp_path: Any) -> None:
    root = str(tmp_path / "store")
    df = spark.createDataFrame([(0, 1), (1, 2)], "p INT, id LONG")
    ks.store_dataset(root, "ds", df, partition_on="p", commit_options={"info": {"job": "spark-create"}})
    assert _info_of_newest(root) == {"job": "spark-create"}
    ks.update_dataset(root, "ds", df, commit_options={"info": {"job": "spark-append"}, "metadata": {"team": "a"}})
    assert _info_of_newest(root) == {"job": "spark-append"}
    assert kstore.load_metadata(root, "ds").metadata["team"] == "a"
    ks.update_dataset(root, "ds", delete_scope=[{"p": 1}], commit_options={"info": {"job": "spark-delete"}})
    assert _info_of_newest(root) == {"job": "spark-delete"}
    assert _ids(root) == [1, 1]


# --- Dask read_dataset: the eager reader's pandas options ------------------------------------


def test_dask_read_takes_categoricals_dates_as_object_and_table_like_eager(store_url: str) -> None:
    import datetime as dt

    import dask

    src = pd.DataFrame({"p": ["a", "b", "a", "c"], "s": ["x", "y", "x", "z"], "id": [1, 2, 3, 4],
                        "d": [dt.date(2024, 1, i) for i in range(1, 5)]})
    kstore.store_dataset(store_url, "ds", src, partition_on="p", table_name="events")
    kw: dict[str, Any] = {"categoricals": ["s", "p"], "dates_as_object": True, "table": "events"}
    eager = kstore.read_dataset(store_url, "ds", **kw).sort_values("id").reset_index(drop=True)
    ddf = kd.read_dataset(store_url, "ds", **kw)
    assert all(isinstance(ddf.dtypes[c], pd.CategoricalDtype) for c in ("s", "p"))
    assert str(ddf.dtypes["d"]) == "date32[day][pyarrow]"  # Dask would turn an object column into strings
    with dask.config.set(scheduler="sync"):
        got = ddf.compute().sort_values("id").reset_index(drop=True)
    for col in ("s", "p"):
        assert isinstance(got[col].dtype, pd.CategoricalDtype)
        assert got[col].astype(str).tolist() == eager[col].astype(str).tolist() == src[col].tolist()
    assert got["d"].tolist() == eager["d"].tolist() == src["d"].tolist()
    assert all(type(v) is dt.date for v in got["d"])
    with pytest.raises(kstore.errors.ColumnNotFoundError, match="categoricals"):
        kd.read_dataset(store_url, "ds", categoricals=["nope"], table="events")
    with pytest.raises(kstore.errors.KstoreError, match="table"):
        kd.read_dataset(store_url, "ds", table="other")
