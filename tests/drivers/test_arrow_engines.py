"""One version through pyarrow.dataset, DuckDB and Polars (``Snapshot.to_pyarrow_dataset``,
``to_duckdb``, ``to_polars``): exactly the rows of that version, never the stale files a
kstore directory keeps for time travel.

Every expected answer is computed from the frames written (or from kstore's own exact read,
which the rest of the suite checks against the source rows), never written down.
"""

from __future__ import annotations

import datetime as dt
import time

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pytest

import kstore
from kstore.errors import InvalidArgumentError
from tests.drivers.conftest import PRED_UUID
from tests.drivers.test_eager import LITERALS, OPS, _term, oracle_ids

duckdb = pytest.importorskip("duckdb")
pl = pytest.importorskip("polars")


def _frame(seed: int, n: int, day_values: list[str]) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "day": rng.choice(day_values, n),
        "location": rng.integers(0, 20, n),
        "qty": rng.integers(1, 100, n),
        "price": rng.random(n).round(3),
        "row": np.arange(seed * 1000, seed * 1000 + n),
    })


def _rows(table: pa.Table | pd.DataFrame, columns=("row", "day", "location", "qty")) -> list[tuple]:
    df = table.to_pandas() if isinstance(table, pa.Table) else table
    if isinstance(df, pl.DataFrame):
        df = df.to_pandas()
    return sorted(zip(*(df[c].astype(object).tolist() for c in columns)))


@pytest.fixture(params=["file", "memory", "s3"])
def store(request, tmp_path, s3_endpoint):
    if request.param == "file":
        return str(tmp_path / "store")
    if request.param == "memory":
        return f"memory://engines-{time.monotonic_ns()}"
    import boto3

    bucket = f"engines-{time.monotonic_ns()}"
    boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
    return kstore.S3Store(bucket, prefix="data", endpoint_url=s3_endpoint)


@pytest.fixture
def versions(store):
    """A dataset with three versions: create, replace one day's partition, append; returns the
    store and each version's source rows."""
    days = ["2024-01-01", "2024-01-02", "2024-01-03"]
    v0 = _frame(0, 300, days)
    kstore.store_dataset(store, "sales", v0, partition_on=["day"], secondary_indices=["location"])
    replacement = _frame(1, 40, ["2024-01-02"])
    kstore.update_dataset(store, "sales", replacement, mode="overwrite_partitions")
    v1 = pd.concat([v0[v0.day != "2024-01-02"], replacement])
    added = _frame(2, 25, days)
    kstore.update_dataset(store, "sales", added)
    v2 = pd.concat([v1, added])
    return store, [v0, v1, v2]


def test_a_directory_scan_reads_stale_files_but_the_version_dataset_does_not(tmp_path):
    """The issue's case: after one overwrite_partitions a plain scan of the directory counts
    the replaced files too; the version's dataset, DuckDB and Polars see the version."""
    store = str(tmp_path / "store")
    src = pd.DataFrame({"p": [1, 1, 2, 2, 3, 3], "x": [100, 100, 100, 100, 100, 100]})
    kstore.store_dataset(store, "d", src, partition_on=["p"])
    kstore.update_dataset(store, "d", pd.DataFrame({"p": [1, 1], "x": [5, 10]}), mode="overwrite_partitions")
    stale = ds.dataset(tmp_path / "store" / "d", format="parquet", partitioning="hive",
                       exclude_invalid_files=True)
    assert stale.count_rows() == 8  # the replaced p=1 file is still there
    snap = kstore.open_dataset(store, "d")
    dataset = snap.to_pyarrow_dataset()
    assert dataset.count_rows() == 6
    assert pa.compute.sum(dataset.to_table()["x"]).as_py() == 415
    con = snap.to_duckdb("d")
    assert con.execute("SELECT count(*), sum(x) FROM d").fetchall() == [(6, 415)]
    got = snap.to_polars().select(pl.len(), pl.col("x").sum()).collect().row(0)
    assert got == (6, 415)


def test_every_version_reads_exactly_its_rows_in_every_engine(versions):
    store, frames = versions
    for version, src in enumerate(frames):
        snap = kstore.open_dataset(store, "sales", version=version)
        want = _rows(src)
        dataset = snap.to_pyarrow_dataset()
        assert _rows(dataset.to_table()) == want, version
        assert dataset.count_rows() == len(src)
        con = snap.to_duckdb("sales")
        got = con.execute("SELECT row, day, location, qty FROM sales").fetchdf()
        assert _rows(got) == want, version
        assert _rows(snap.to_polars().collect()) == want, version
        # the same answer kstore's own reader gives, column types included
        assert dataset.to_table().schema == snap.read_table().schema


def test_as_of_reads_the_version_current_then(versions):
    store, frames = versions
    history = kstore.history(store, "sales")
    at = history[1].timestamp + dt.timedelta(microseconds=1)
    snap = kstore.open_dataset(store, "sales", as_of=at)
    assert snap.version == 1
    assert _rows(snap.to_pyarrow_dataset().to_table()) == _rows(frames[1])


def test_engine_filters_prune_partitions_and_match_pandas(versions):
    store, frames = versions
    src = frames[2]
    con = kstore.open_dataset(store, "sales").to_duckdb("sales")
    got = con.execute("""SELECT day, location, sum(qty) FROM sales
                         WHERE day IN ('2024-01-01', '2024-01-03') AND location < 7
                         GROUP BY day, location ORDER BY day, location""").fetchall()
    sel = src[src.day.isin(["2024-01-01", "2024-01-03"]) & (src.location < 7)]
    want = [(d, int(loc), int(q)) for (d, loc), q in sel.groupby(["day", "location"])["qty"].sum().items()]
    assert got == want
    lazy = kstore.open_dataset(store, "sales").to_polars()
    out = lazy.filter((pl.col("day") == "2024-01-02") & (pl.col("qty") > 50)).collect()
    assert _rows(out) == _rows(src[(src.day == "2024-01-02") & (src.qty > 50)])
    # a filter on the partition column skips the other days' fragments
    dataset = kstore.open_dataset(store, "sales").to_pyarrow_dataset()
    fragments = list(dataset.get_fragments(filter=ds.field("day") == "2024-01-02"))
    assert fragments and len(fragments) < len(list(dataset.get_fragments()))
    assert sum(f.count_rows() for f in fragments) == int((src.day == "2024-01-02").sum())


def test_predicates_prune_files_and_filter_rows(versions):
    store, frames = versions
    src = frames[2]
    pred = [[("location", "==", 7)], [("day", "==", "2024-01-03"), ("qty", ">=", 90)]]
    snap = kstore.open_dataset(store, "sales")
    dataset = snap.to_pyarrow_dataset(pred)
    want = src[(src.location == 7) | ((src.day == "2024-01-03") & (src.qty >= 90))]
    assert _rows(dataset.to_table()) == _rows(want)
    assert len(dataset.files) == len(snap.plan(predicates=pred).tasks)
    assert len(dataset.files) < len(snap.to_pyarrow_dataset().files)
    # the filter travels with the dataset into DuckDB and Polars
    con = snap.to_duckdb("hits", predicates=pred)
    assert _rows(con.execute("SELECT * FROM hits").fetchdf()) == _rows(want)
    assert _rows(snap.to_polars(pred).collect()) == _rows(want)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("col", list(LITERALS))
def test_every_predicate_operator_matches_the_oracle(pred_store, pred_df, col, op):
    pred = [[_term(col, op)]]
    snap = kstore.open_dataset(pred_store, PRED_UUID)
    if col == "v" and op in ("!=", "not in"):
        with pytest.raises(InvalidArgumentError, match="float column"):
            snap.to_pyarrow_dataset(pred)
        return
    table = snap.to_pyarrow_dataset(pred).to_table()
    assert sorted(table["id"].to_pylist()) == oracle_ids(pred_df, pred), (col, op)


def test_nan_rows_survive_polars_and_duckdb_filters(tmp_path):
    """Parquet statistics leave NaN out (a file of 1.5, NaN and null claims min == max ==
    1.5): an engine filter pushed into Arrow's row-group pruning would drop the NaN row.
    Each engine must give the answer it gives on the same rows in memory."""
    store = str(tmp_path / "store")
    src = pa.table({"p": [1, 1, 1, 2], "v": pa.array([1.5, float("nan"), None, 2.0]), "id": [0, 1, 2, 3]})
    kstore.store_dataset(store, "nan", src, partition_on=["p"])  # Arrow keeps NaN and null apart
    snap = kstore.open_dataset(store, "nan")
    for expr in (pl.col("v") != 1.5, ~(pl.col("v") == 1.5), pl.col("v") > 1):
        got = snap.to_polars().filter(expr).collect()["id"].sort().to_list()
        want = pl.from_arrow(src).filter(expr)["id"].sort().to_list()
        assert got == want and 1 in want, str(expr)
    con = snap.to_duckdb("t")
    mem = duckdb.connect()
    mem.register("m", src)
    for where in ("v != 1.5", "v > 1", "NOT (v = 1.5)"):
        q = f"SELECT id FROM {{}} WHERE {where} ORDER BY id"
        want = mem.execute(q.format("m")).fetchall()
        assert con.execute(q.format("t")).fetchall() == want and (1,) in want, where


def test_deleted_rows_and_merged_schema(tmp_path):
    """Row deletes rewrite files (the old ones stay for time travel); a merged column reads
    as nulls from the files written before it."""
    store = str(tmp_path / "store")
    src = _frame(3, 120, ["a", "b"])
    kstore.store_dataset(store, "d", src, partition_on=["day"])
    kstore.delete_rows(store, "d", [[("qty", "<", 50)]])
    extra = _frame(4, 10, ["b"]).assign(note="new")
    kstore.update_dataset(store, "d", extra, schema_mode="merge")
    snap = kstore.open_dataset(store, "d")
    table = snap.to_pyarrow_dataset().to_table()
    kept = src[src.qty >= 50]
    assert _rows(table) == _rows(pd.concat([kept, extra]))
    notes = dict(zip(table["row"].to_pylist(), table["note"].to_pylist()))
    assert all(notes[r] is None for r in kept.row) and all(notes[r] == "new" for r in extra.row)
    assert _rows(kstore.open_dataset(store, "d", version=0).to_pyarrow_dataset().to_table()) == _rows(src)


def test_a_reused_dataset_keeps_its_version_after_later_commits(versions):
    store, frames = versions
    dataset = kstore.open_dataset(store, "sales", version=1).to_pyarrow_dataset()
    kstore.update_dataset(store, "sales", _frame(9, 30, ["2024-01-01"]), mode="overwrite_partitions")
    assert _rows(dataset.to_table()) == _rows(frames[1])


def test_the_dataset_is_read_only_through_its_file_system(tmp_path):
    store = f"memory://engines-ro-{time.monotonic_ns()}"
    kstore.store_dataset(store, "d", pd.DataFrame({"p": [1], "x": [2]}), partition_on=["p"])
    dataset = kstore.open_dataset(store, "d").to_pyarrow_dataset()
    with pytest.raises(NotImplementedError, match="commit"):
        dataset.filesystem.delete_file(dataset.files[0])
    with pytest.raises(NotImplementedError, match="commit"):
        dataset.filesystem.open_output_stream("d/x.parquet")
