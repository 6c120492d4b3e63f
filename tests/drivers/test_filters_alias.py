"""Issue #30: ``filters=`` (pyarrow's, Dask's and deltalake's name) is ``predicates=`` on every reader.

pyarrow (``pq.read_table(filters=...)``, ``pyarrow.dataset``), Dask (``dd.read_parquet(filters=...)``)
and deltalake (``DeltaTable.to_pandas(filters=...)``) call kstore's ``predicates`` argument
``filters``. Every read entry point (eager, :class:`kstore.Snapshot`, Dask, Spark) takes both;
``kstore.core.arguments.predicates_or_filters`` resolves them, and giving both is an
:class:`~kstore.errors.InvalidArgumentError` naming both.

What is checked:

* for a predicate on a partition column and one on an indexed column (``==`` and ``in``), an
  OR of the two, and pyarrow's flat list of terms (one conjunction), ``filters=`` returns
  exactly the rows ``predicates=`` returns (and the rows pandas selects), and plans the same
  files, on the eager readers and planners, the Snapshot methods, Dask (threaded scheduler)
  and Spark (the worker's session, one test);
* both given: an ``InvalidArgumentError`` naming both, on every entry point;
* signatures: every public reader of the eager, Dask and Spark drivers and of ``Snapshot``
  that has ``predicates`` has ``filters`` too, keyword-only, default None, typed the same.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pytest

import kstore
import kstore.eager
from kstore.blocks.snapshot import Snapshot
from kstore.errors import InvalidArgumentError, KstoreError

UUID = "alias"
N = 48

#: name -> predicate; each selects some rows but not all, and prunes files.
CASES: dict[str, Any] = {
    "partition": [[("p", "==", 2)]],
    "partition-in": [[("p", "in", [1, 3])]],
    "index": [[("x", "==", 7)]],
    "index-in": [[("x", "in", [0, 2])]],
    "partition-or-index-in": [[("p", "==", 0)], [("x", "in", [2, 4])]],
    "flat-conjunction": [("p", "in", [0, 1]), ("x", "in", [1, 5, 6, 8])],  # pyarrow's flat form: one AND
}


def frame() -> pd.DataFrame:
    ids = np.arange(N)
    return pd.DataFrame({"id": ids, "p": ids % 4, "x": (ids * 7) % 10, "v": ids * 0.5})


def expected_ids(case: str) -> list[int]:
    """The ids pandas selects for ``CASES[case]`` (a flat list is one conjunction)."""
    df = frame()
    dnf = CASES[case]
    if isinstance(dnf[0], tuple):
        dnf = [dnf]
    keep = np.zeros(len(df), dtype=bool)
    for conj in dnf:
        mask = np.ones(len(df), dtype=bool)
        for col, op, value in conj:
            mask &= (df[col] == value).to_numpy() if op == "==" else df[col].isin(value).to_numpy()
        keep |= mask
    return sorted(df.loc[keep, "id"].tolist())


@pytest.fixture(scope="module")
def url(new_store) -> str:
    """A memory store holding the dataset: 4 partitions x 2 chunks = 8 files, ``x`` indexed."""
    store = new_store("memory")
    df = frame()
    kstore.store_dataset(store, UUID, [df.iloc[: N // 2], df.iloc[N // 2:]], partition_on=["p"],
                         secondary_indices=["x"])
    return store


def test_cases_select_some_rows_and_prune_files(url):
    """The cases are discriminating: a reader that ignored ``filters`` would return every row
    and plan every file."""
    all_files = len(kstore.plan_read(url, UUID).tasks)
    assert all_files == 8
    for case, dnf in CASES.items():
        ids = expected_ids(case)
        assert 0 < len(ids) < N, case
        assert len(kstore.plan_read(url, UUID, predicates=dnf).tasks) < all_files, case


# ---------------------------------------------------------------------------------------
# eager readers and Snapshot methods: rows
# ---------------------------------------------------------------------------------------


def _ids(values: Any) -> list[int]:
    return sorted(int(v) for v in values)


def _iter_ids(url: str, **kw: Any) -> list[int]:
    return _ids(i for part in kstore.iter_dataset(url, UUID, **kw) for i in part["id"])


def _polars_ids(url: str, **kw: Any) -> list[int]:
    pytest.importorskip("polars")
    return _ids(kstore.open_dataset(url, UUID).to_polars(**kw).collect()["id"].to_list())


def _duckdb_ids(url: str, **kw: Any) -> list[int]:
    pytest.importorskip("duckdb")
    con = kstore.open_dataset(url, UUID).to_duckdb("t", **kw)
    return _ids(r[0] for r in con.execute("SELECT id FROM t").fetchall())


#: reader name -> f(url, **predicates-or-filters) -> sorted ids
READERS: dict[str, Callable[..., list[int]]] = {
    "read_dataset": lambda url, **kw: _ids(kstore.read_dataset(url, UUID, **kw)["id"]),
    "read_dataset-arrow": lambda url, **kw: _ids(kstore.read_dataset(url, UUID, as_arrow=True, **kw)["id"].to_pylist()),
    "read_table": lambda url, **kw: _ids(kstore.read_table(url, UUID, **kw)["id"].to_pylist()),
    "iter_dataset": _iter_ids,
    "Snapshot.read": lambda url, **kw: _ids(kstore.open_dataset(url, UUID).read(**kw)["id"]),
    "Snapshot.read_table": lambda url, **kw: _ids(kstore.open_dataset(url, UUID).read_table(**kw)["id"].to_pylist()),
    "Snapshot.to_pyarrow_dataset": lambda url, **kw: _ids(
        kstore.open_dataset(url, UUID).to_pyarrow_dataset(**kw).to_table()["id"].to_pylist()),
    "Snapshot.to_polars": _polars_ids,
    "Snapshot.to_duckdb": _duckdb_ids,
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("reader", READERS)
def test_eager_filters_return_the_rows_of_predicates(url, reader, case):
    read = READERS[reader]
    dnf = CASES[case]
    with_filters = read(url, filters=dnf)
    assert with_filters == read(url, predicates=dnf)
    assert with_filters == expected_ids(case)


#: planner name -> f(url, **predicates-or-filters) -> ReadPlan
PLANNERS: dict[str, Callable[..., Any]] = {
    "plan_read": lambda url, **kw: kstore.plan_read(url, UUID, **kw),
    "plan_with_stats": lambda url, **kw: kstore.eager.plan_with_stats(url, UUID, **kw)[0],
    "Snapshot.plan": lambda url, **kw: kstore.open_dataset(url, UUID).plan(**kw),
    "Snapshot.plan_with_stats": lambda url, **kw: kstore.open_dataset(url, UUID).plan_with_stats(**kw)[0],
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("planner", PLANNERS)
def test_eager_filters_plan_the_files_of_predicates(url, planner, case):
    plan = PLANNERS[planner]
    dnf = CASES[case]
    by_filters, by_predicates = plan(url, filters=dnf), plan(url, predicates=dnf)
    assert [t.key for t in by_filters.tasks] == [t.key for t in by_predicates.tasks]
    assert by_filters.predicates == by_predicates.predicates is not None
    assert len(by_filters.tasks) < len(plan(url).tasks)  # pruned


def test_filters_may_be_given_positionally_only_as_predicates(url):
    """``filters`` is keyword-only: the positional order (columns, predicates) is unchanged."""
    dnf = CASES["partition"]
    assert _ids(kstore.read_dataset(url, UUID, ["id"], dnf)["id"]) == expected_ids("partition")
    assert _ids(kstore.read_dataset(url, UUID, ["id"], filters=dnf)["id"]) == expected_ids("partition")


# ---------------------------------------------------------------------------------------
# Dask (threaded scheduler)
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES)
def test_dask_filters_return_the_rows_of_predicates(url, case):
    dask = pytest.importorskip("dask")
    kd = pytest.importorskip("kstore.dask")
    dnf = CASES[case]
    with dask.config.set(scheduler="threads"):
        by_filters = kd.read_dataset(url, UUID, filters=dnf)
        by_predicates = kd.read_dataset(url, UUID, predicates=dnf)
        assert by_filters.npartitions == by_predicates.npartitions < kd.read_dataset(url, UUID).npartitions
        got = _ids(by_filters["id"].compute())
    assert got == _ids(by_predicates["id"].compute(scheduler="threads"))
    assert got == expected_ids(case)


# ---------------------------------------------------------------------------------------
# Spark (the worker's session from tests/conftest.py; a local directory store)
# ---------------------------------------------------------------------------------------


@pytest.mark.spark
@pytest.mark.xdist_group("spark")
@pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::DeprecationWarning", "ignore::UserWarning")
def test_spark_filters_return_the_rows_of_predicates(spark, tmp_path):
    import kstore.spark as ks

    root = str(tmp_path / "store")
    df = frame()
    kstore.store_dataset(root, UUID, [df.iloc[: N // 2], df.iloc[N // 2:]], partition_on=["p"],
                         secondary_indices=["x"])
    for case in ("partition-in", "index-in"):
        dnf = CASES[case]
        by_filters = _ids(r.id for r in ks.read_dataset(root, UUID, columns=["id"], filters=dnf, spark=spark).collect())
        by_predicates = _ids(r.id for r in ks.read_dataset(root, UUID, columns=["id"], predicates=dnf, spark=spark).collect())
        assert by_filters == by_predicates == expected_ids(case), case


# ---------------------------------------------------------------------------------------
# both given: one error, naming both, on every entry point
# ---------------------------------------------------------------------------------------


def _dask_read(url: str, **kw: Any) -> Any:
    return pytest.importorskip("kstore.dask").read_dataset(url, UUID, **kw)


def _spark_read(url: str, **kw: Any) -> Any:
    ks = pytest.importorskip("kstore.spark")
    # the arguments are checked before Spark is touched: no session needed
    return ks.read_dataset(url, UUID, **kw, spark=object())


BOTH: dict[str, Callable[..., Any]] = {
    **READERS,
    **PLANNERS,
    "dask.read_dataset": _dask_read,
    "spark.read_dataset": _spark_read,
}


@pytest.mark.parametrize("entry", BOTH)
def test_both_predicates_and_filters_is_an_error_naming_both(url, entry):
    with pytest.raises(InvalidArgumentError) as info:
        BOTH[entry](url, predicates=CASES["partition"], filters=CASES["partition"])
    message = str(info.value)
    assert "predicates=" in message and "filters=" in message
    assert isinstance(info.value, KstoreError)


def test_empty_predicates_with_filters_is_still_both(url):
    """``predicates=[]`` (no filter) is given: with ``filters`` it is the same error, never a
    silent choice of one of the two."""
    with pytest.raises(InvalidArgumentError, match="predicates= and filters="):
        kstore.read_dataset(url, UUID, predicates=[], filters=CASES["partition"])


# ---------------------------------------------------------------------------------------
# signatures
# ---------------------------------------------------------------------------------------

#: Public callables that take ``predicates`` but are no readers (they rewrite data).
WRITES = {"kstore.dask.compact", "kstore.spark.compact", "Snapshot.compact", "Snapshot.delete_rows", "Snapshot.update_rows",
          "kstore.dask.update_rows", "kstore.dask.delete_rows", "kstore.spark.update_rows", "kstore.spark.delete_rows"}
#: The readers this issue covers; the scan below must find every one of them.
KNOWN_READERS = {
    "kstore.eager.read_dataset", "kstore.eager.read_table", "kstore.eager.iter_dataset", "kstore.eager.plan_read",
    "kstore.eager.plan_with_stats", "Snapshot.plan", "Snapshot.plan_with_stats", "Snapshot.read",
    "Snapshot.read_table", "Snapshot.to_pyarrow_dataset", "Snapshot.to_duckdb", "Snapshot.to_polars",
    "kstore.dask.read_dataset", "kstore.spark.read_dataset",
}


def _engine_modules() -> list[Any]:
    """kstore.eager, and kstore.dask / kstore.spark where their engine is installed."""
    modules = [kstore.eager]
    for name in ("kstore.dask", "kstore.spark"):
        try:
            modules.append(importlib.import_module(name))
        except ImportError:
            continue
    return modules


def _public_callables(modules: list[Any]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for module in modules:
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isfunction(obj):
                found[f"{module.__name__}.{name}"] = obj
    for name, obj in vars(Snapshot).items():
        if not name.startswith("_") and inspect.isfunction(obj):
            found[f"Snapshot.{name}"] = obj
    return found


def test_every_reader_with_predicates_takes_filters_the_same_way():
    modules = _engine_modules()
    readers = {name: obj for name, obj in _public_callables(modules).items()
               if "predicates" in inspect.signature(obj).parameters and name not in WRITES}
    loaded = {m.__name__ for m in modules}
    expected = {n for n in KNOWN_READERS if n.startswith("Snapshot.") or n.rsplit(".", 1)[0] in loaded}
    assert expected <= set(readers)  # the scan found them all: this test cannot pass on an empty set
    wrong = {}
    for name, obj in readers.items():
        params = inspect.signature(obj).parameters
        filters, predicates = params.get("filters"), params["predicates"]
        if filters is None:
            wrong[name] = "no filters parameter"
        elif filters.default is not None or predicates.default is not None:
            wrong[name] = f"filters defaults to {filters.default!r}, predicates to {predicates.default!r}"
        elif filters.kind is not inspect.Parameter.KEYWORD_ONLY:
            wrong[name] = f"filters is {filters.kind.description}, not keyword-only"
        elif filters.annotation != predicates.annotation:
            wrong[name] = f"filters is typed {filters.annotation!r}, predicates {predicates.annotation!r}"
    assert wrong == {}


def test_read_dataset_of_every_engine_types_filters_as_predicates():
    """The read_dataset of each engine: ``filters`` and ``predicates`` both default to None
    and are both typed :data:`~kstore.core.predicates.Predicates` (not ``Any``)."""
    readers = [kstore.read_dataset]
    for name in ("kstore.dask", "kstore.spark"):
        readers.append(pytest.importorskip(name).read_dataset)
    for read in readers:
        params = inspect.signature(read).parameters
        assert params["filters"].default is None is params["predicates"].default, read.__module__
        assert params["filters"].annotation == params["predicates"].annotation == "Predicates", read.__module__
