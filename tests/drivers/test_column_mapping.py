"""Renaming and dropping columns without rewriting data (#33; ``kstore.core.columns``).

What is tried to break: after any sequence of renames, drops, re-adds under a used name,
appends, compactions and row changes, every version must read exactly what a model of the
same steps on a pandas frame holds (old values of a dropped column never reappear under a
column added later with its name), in every engine; a write that read the dataset before a
rename or drop and commits after it must fail with nothing committed and its files deleted;
partition columns, missing columns and name clashes are refused before anything is written;
what kartothek/plateau readers see is stated here.
"""

from __future__ import annotations

import uuid
import warnings
from datetime import timedelta

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kstore
from kstore.blocks.job import WriteRequest, finish_write, prepare_write, write_files
from kstore.core.columns import file_name, file_names
from kstore.errors import (
    ColumnNotFoundError,
    CommitConflictError,
    InvalidArgumentError,
    SchemaMismatchError,
)
from kstore.io.store import open_store

UUID = "cm"


def rows(df: pd.DataFrame) -> list[tuple]:
    """Rows sorted by id, the columns in name order, missing values as None."""
    df = df.sort_values("id").reset_index(drop=True)
    return [tuple(None if pd.isna(v) else v for v in r) for r in df[sorted(df.columns)].itertuples(index=False)]


def data_keys(store: str) -> set[str]:
    return {k for k in open_store(store).iter_prefix(UUID + "/")
            if k.endswith(".parquet") and "/_kstore/" not in k and "/indices/" not in k}


def file_columns(store: str, key: str) -> list[str]:
    st_ = open_store(store)
    with st_.open(key) as fh:
        return pq.ParquetFile(fh).schema_arrow.names


@pytest.fixture
def renamed(store_url):
    """A partitioned dataset with an indexed column ``a`` renamed to ``amount``, then appended to."""
    df = pd.DataFrame({"id": [1, 2, 3, 4], "p": [1, 1, 2, 2], "a": [10, 20, 30, 40], "s": list("wxyz")})
    kstore.store_dataset(store_url, UUID, df, partition_on="p", secondary_indices=["a"])
    kstore.rename_columns(store_url, UUID, {"a": "amount"})
    kstore.update_dataset(store_url, UUID, pd.DataFrame({"id": [5], "p": [3], "amount": [50], "s": ["v"]}))
    want = pd.DataFrame({"id": [1, 2, 3, 4, 5], "p": [1, 1, 2, 2, 3], "amount": [10, 20, 30, 40, 50],
                         "s": list("wxyzv")})
    return store_url, want


def test_rename_reads_under_the_new_name(renamed):
    store, want = renamed
    got = kstore.read_dataset(store, UUID)
    assert list(got.columns) == ["p", "amount", "s", "id"] or set(got.columns) == set(want.columns)
    assert rows(got) == rows(want)
    assert rows(kstore.read_table(store, UUID).to_pandas()) == rows(want)
    assert rows(pd.concat(list(kstore.iter_dataset(store, UUID)))) == rows(want)
    # the old version keeps the old name (time travel)
    old = kstore.read_dataset(store, UUID, version=0)
    assert "a" in old.columns and "amount" not in old.columns
    assert sorted(old["a"]) == [10, 20, 30, 40]
    # no data file was rewritten: every file holds the column under its file name "a"
    for key in data_keys(store):
        names = file_columns(store, key)
        assert "a" in names and "amount" not in names
    assert file_names(kstore.read_schema(store, UUID)) == {"amount": "a"}


@pytest.mark.parametrize("predicate", [
    [("amount", "==", 20)], [("amount", "in", [30, 50])], [("amount", ">", 25), ("s", "!=", "y")],
    [("amount", "<=", 10)],
])
def test_predicates_on_a_renamed_column_are_exact_and_use_its_index(renamed, predicate):
    store, want = renamed
    got = kstore.read_dataset(store, UUID, predicates=[predicate])
    mask = np.ones(len(want), bool)
    for col, op, value in predicate:
        s = want[col]
        mask &= {"==": s.eq, ">": s.gt, "<=": s.le, "!=": s.ne}[op](value) if op != "in" else s.isin(value)
    assert rows(got) == rows(want[mask])
    # the index (built under the old name) answers under the new name: files that cannot match are not planned
    plan = kstore.plan_read(store, UUID, predicates=[predicate])
    assert "amount" in kstore.load_metadata(store, UUID).indices
    if predicate == [("amount", "==", 20)]:
        assert len(plan.tasks) == 1


def test_writes_after_a_rename(renamed):
    store, want = renamed
    # the old name is not a column any more (strict mode)
    with pytest.raises((SchemaMismatchError, ColumnNotFoundError), match="amount|'a'"):
        kstore.update_dataset(store, UUID, pd.DataFrame({"id": [9], "p": [1], "a": [1], "s": ["q"]}))
    # merge, overwrite_partitions, update_rows, delete_rows, merge-by-key and compaction keep the mapping
    kstore.update_dataset(store, UUID, pd.DataFrame({"id": [6], "p": [1], "amount": [60], "s": ["u"]}),
                          mode="overwrite_partitions")
    want = pd.concat([want[want.p != 1], pd.DataFrame({"id": [6], "p": [1], "amount": [60], "s": ["u"]})])
    kstore.update_rows(store, UUID, [[("amount", "==", 30)]], set={"s": "upd"})
    want.loc[want.amount == 30, "s"] = "upd"
    kstore.delete_rows(store, UUID, [[("amount", "==", 40)]])
    want = want[want.amount != 40]
    kstore.merge(store, UUID, pd.DataFrame({"id": [7, 5], "p": [3, 3], "amount": [70, 55], "s": ["t", "v"]}),
                 on="id")
    want.loc[want.id == 5, "amount"] = 55
    want = pd.concat([want, pd.DataFrame({"id": [7], "p": [3], "amount": [70], "s": ["t"]})])
    kstore.compact(store, UUID)
    assert rows(kstore.read_dataset(store, UUID)) == rows(want)
    for key in kstore.plan_read(store, UUID).tasks:
        assert "a" in file_columns(store, key.key)  # new files too: under the file name


def test_drop_then_add_again_never_shows_old_values(store_url):
    df = pd.DataFrame({"id": [1, 2], "x": [1.5, 2.5], "tmp": ["old1", "old2"]})
    kstore.store_dataset(store_url, UUID, df)
    kstore.drop_columns(store_url, UUID, ["tmp"])
    assert list(kstore.read_dataset(store_url, UUID).columns) == ["id", "x"]
    with pytest.raises(ColumnNotFoundError):
        kstore.read_dataset(store_url, UUID, columns=["tmp"])
    with pytest.raises((ColumnNotFoundError, InvalidArgumentError)):
        kstore.read_dataset(store_url, UUID, predicates=[[("tmp", "==", "old1")]])
    # added again (another type, too): the old files hold "tmp", the column now lives under a fresh name
    kstore.update_dataset(store_url, UUID, pd.DataFrame({"id": [3], "x": [3.5], "tmp": [7]}), schema_mode="merge")
    got = kstore.read_dataset(store_url, UUID)
    assert rows(got) == [(1, None, 1.5), (2, None, 2.5), (3, 7, 3.5)]
    assert kstore.read_dataset(store_url, UUID, predicates=[[("tmp", "==", 7)]])["id"].tolist() == [3]
    assert file_name(kstore.read_schema(store_url, UUID).field("tmp")) != "tmp"
    # time travel: the version before the drop still has the old values
    assert kstore.read_dataset(store_url, UUID, version=0)["tmp"].tolist() == ["old1", "old2"]
    # a compaction rewrites the old files without the dropped values
    kstore.compact(store_url, UUID)
    assert rows(kstore.read_dataset(store_url, UUID)) == [(1, None, 1.5), (2, None, 2.5), (3, 7, 3.5)]


def test_drop_an_indexed_column_drops_its_index(store_url):
    df = pd.DataFrame({"id": [1, 2], "k": [5, 6], "v": ["a", "b"]})
    kstore.store_dataset(store_url, UUID, df, secondary_indices=["k"])
    meta = kstore.drop_columns(store_url, UUID, "k")
    assert "k" not in meta.indices
    assert rows(kstore.read_dataset(store_url, UUID)) == [(1, "a"), (2, "b")]


def test_refusals_change_nothing(store_url):
    df = pd.DataFrame({"id": [1], "p": [1], "x": [2], "y": [3]})
    kstore.store_dataset(store_url, UUID, df, partition_on="p")
    cases = [
        (lambda: kstore.rename_columns(store_url, UUID, {"p": "q"}), InvalidArgumentError, "partition column"),
        (lambda: kstore.drop_columns(store_url, UUID, "p"), InvalidArgumentError, "partition column"),
        (lambda: kstore.rename_columns(store_url, UUID, {"nope": "q"}), ColumnNotFoundError, "no column 'nope'"),
        (lambda: kstore.drop_columns(store_url, UUID, "nope"), ColumnNotFoundError, "no column 'nope'"),
        (lambda: kstore.rename_columns(store_url, UUID, {"x": "y"}), SchemaMismatchError, "'y'"),
        (lambda: kstore.rename_columns(store_url, UUID, {}), InvalidArgumentError, "at least one"),
        (lambda: kstore.rename_columns(store_url, UUID, [("x", "z")]), InvalidArgumentError, "mapping"),
        (lambda: kstore.drop_columns(store_url, UUID, ["id", "x", "y"]), InvalidArgumentError, "no column"),
    ]
    for call, exc, text in cases:
        with pytest.raises(exc, match=text):
            call()
    assert kstore.load_metadata(store_url, UUID).version == 0
    # names may swap
    kstore.rename_columns(store_url, UUID, {"x": "y", "y": "x"})
    assert rows(kstore.read_dataset(store_url, UUID)) == [(1, 1, 3, 2)]  # id, p, x (was y), y (was x)


@pytest.mark.parametrize("schema_mode", ["strict", "merge"])
def test_a_write_that_raced_a_rename_commits_nothing(store_url, schema_mode):
    """The append read version 0 (column ``a``), a rename committed, then the append commits:
    its files hold ``a`` under the name that now means ``b`` (strict: the column is
    unknown; merge: ``a`` would be a new column with a fresh file name)."""
    kstore.store_dataset(store_url, UUID, pd.DataFrame({"id": [1], "a": [1]}))
    st_ = open_store(store_url)
    job = prepare_write(st_, UUID, WriteRequest.of(UUID, "append", schema_mode=schema_mode))
    files, schema = write_files(job, pd.DataFrame({"id": [2], "a": [2]}))
    assert {f.key for f in files} <= data_keys(store_url)
    kstore.rename_columns(store_url, UUID, {"a": "b"})
    with pytest.raises((CommitConflictError, SchemaMismatchError)):
        finish_write(job, files, schema)
    assert not {f.key for f in files} & data_keys(store_url)  # the write's files are deleted
    assert kstore.load_metadata(store_url, UUID).version == 1
    assert rows(kstore.read_dataset(store_url, UUID)) == [(1, 1)]


def test_a_write_that_raced_a_swap_commits_nothing(store_url):
    """A swap keeps the column names: the raced append fits the schema, but its files hold
    ``a``'s values under the name that now means ``b``; committed, they would read swapped."""
    kstore.store_dataset(store_url, UUID, pd.DataFrame({"id": [1], "a": [1], "b": [100]}))
    st_ = open_store(store_url)
    job = prepare_write(st_, UUID, WriteRequest.of(UUID, "append"))
    files, schema = write_files(job, pd.DataFrame({"id": [2], "a": [2], "b": [200]}))
    kstore.rename_columns(store_url, UUID, {"a": "b", "b": "a"})
    with pytest.raises(CommitConflictError, match="renamed or dropped"):
        finish_write(job, files, schema)
    assert not {f.key for f in files} & data_keys(store_url)
    assert rows(kstore.read_dataset(store_url, UUID)) == [(100, 1, 1)]  # a, b, id


def test_a_write_that_raced_a_drop_and_re_add_commits_nothing(store_url):
    kstore.store_dataset(store_url, UUID, pd.DataFrame({"id": [1], "c": ["x"]}))
    st_ = open_store(store_url)
    job = prepare_write(st_, UUID, WriteRequest.of(UUID, "append", schema_mode="merge"))
    files, schema = write_files(job, pd.DataFrame({"id": [2], "c": ["raced"]}))
    kstore.drop_columns(store_url, UUID, "c")
    with pytest.raises(CommitConflictError, match="renamed or dropped"):
        finish_write(job, files, schema)
    assert not {f.key for f in files} & data_keys(store_url)  # the write's files are deleted
    assert rows(kstore.read_dataset(store_url, UUID)) == [(1,)]


def test_a_rename_commutes_with_an_append_committed_first(store_url):
    kstore.store_dataset(store_url, UUID, pd.DataFrame({"id": [1], "a": [1]}))
    # the rename reads version 0; an append commits version 1 meanwhile: the rename applies to it
    from kstore.blocks.mutate import change_columns

    kstore.update_dataset(store_url, UUID, pd.DataFrame({"id": [2], "a": [2]}))
    change_columns(open_store(store_url), UUID, renames={"a": "b"})
    assert rows(kstore.read_dataset(store_url, UUID)) == [(1, 1), (2, 2)]
    assert list(kstore.read_schema(store_url, UUID).names) == ["id", "b"]


def test_full_overwrite_resets_the_mapping(store_url):
    kstore.store_dataset(store_url, UUID, pd.DataFrame({"id": [1], "a": [1], "c": [0]}))
    kstore.rename_columns(store_url, UUID, {"a": "b"})
    kstore.drop_columns(store_url, UUID, "c")
    kstore.store_dataset(store_url, UUID, pd.DataFrame({"id": [2], "b": [5]}), mode="overwrite")
    schema = kstore.read_schema(store_url, UUID)
    assert file_names(schema) == {} and b"kstore.retired_names" not in (schema.metadata or {})
    (task,) = kstore.plan_read(store_url, UUID).tasks
    assert file_columns(store_url, task.key) == ["id", "b"]
    assert rows(kstore.read_dataset(store_url, UUID)) == [(5, 2)]  # (b, id)


def test_restore_across_a_rename(store_url):
    kstore.store_dataset(store_url, UUID, pd.DataFrame({"id": [1], "a": [1]}))
    kstore.rename_columns(store_url, UUID, {"a": "b"})
    kstore.update_dataset(store_url, UUID, pd.DataFrame({"id": [2], "b": [2]}))
    kstore.restore(store_url, UUID, 0)
    assert rows(kstore.read_dataset(store_url, UUID)) == [(1, 1)]
    assert kstore.read_schema(store_url, UUID).names == ["id", "a"]
    kstore.update_dataset(store_url, UUID, pd.DataFrame({"id": [3], "a": [3]}))
    assert rows(kstore.read_dataset(store_url, UUID)) == [(1, 1), (3, 3)]


def test_change_feed_reads_old_versions_under_new_names(store_url):
    kstore.store_dataset(store_url, UUID, pd.DataFrame({"id": [1, 2], "a": [10, 20], "c": ["x", "y"]}))
    kstore.rename_columns(store_url, UUID, {"a": "b"})
    kstore.delete_rows(store_url, UUID, [[("b", "==", 20)]])
    kstore.drop_columns(store_url, UUID, "c")
    kstore.update_dataset(store_url, UUID, pd.DataFrame({"id": [3], "b": [30], "c": [1.0]}), schema_mode="merge")
    got = kstore.read_changes(store_url, UUID, 0)
    assert list(got.columns[:3]) == ["id", "b", "c"]
    assert [(i, b, None if pd.isna(c) else c, t) for i, b, c, t in
            zip(got["id"], got["b"], got["c"], got["_change_type"])] == [
        (1, 10, None, "insert"), (2, 20, None, "insert"), (2, 20, None, "delete"), (3, 30, 1.0, "insert")]


def test_pyarrow_dataset_of_a_renamed_version_is_refused(renamed):
    store, _ = renamed
    with pytest.raises(InvalidArgumentError, match="stored under other names"):
        kstore.open_dataset(store, UUID).to_pyarrow_dataset()
    assert kstore.open_dataset(store, UUID, version=0).to_pyarrow_dataset().count_rows() == 4


@pytest.mark.parametrize("how", ["duckdb", "polars"])
def test_duckdb_and_polars_map_renamed_columns(store_url, how):
    """``to_duckdb`` (a view over the files' names) and ``to_polars`` (a rename of the scan)
    give a renamed version the dataset's names: a swap of two columns, a column dropped and
    added again under its old name, a predicate on a renamed column; the rows equal
    ``read_dataset``'s."""
    kstore.store_dataset(store_url, UUID, pd.DataFrame({"p": [1, 1, 2], "x": [10, 20, 30], "y": ["a", "b", "c"],
                                                        "z": [1.0, 2.0, 3.0]}), partition_on="p")
    kstore.rename_columns(store_url, UUID, {"x": "y", "y": "x"})  # swap
    kstore.drop_columns(store_url, UUID, "z")
    kstore.update_dataset(store_url, UUID, pd.DataFrame({"p": [2], "y": [40], "x": ["d"], "z": ["new"]}),
                          schema_mode="merge")  # z again, another column (file name z__kstore1)
    snap = kstore.open_dataset(store_url, UUID)

    def frame(predicates=None) -> list[tuple]:
        if how == "duckdb":
            got = snap.to_duckdb("t", predicates=predicates).execute("SELECT * FROM t").df()
        else:
            got = snap.to_polars(predicates=predicates).collect().to_pandas()
        assert list(got.columns) == ["p", "y", "x", "z"]
        return sorted(tuple(None if pd.isna(v) else v for v in r) for r in got.itertuples(index=False, name=None))

    def want(predicates=None) -> list[tuple]:
        got = kstore.read_dataset(store_url, UUID, predicates=predicates)[["p", "y", "x", "z"]]
        return sorted(tuple(None if pd.isna(v) else v for v in r) for r in got.itertuples(index=False, name=None))

    assert frame() == want() and len(want()) == 4 and (2, 40, "d", "new") in want()
    for pred in ([[("y", ">", 15)]], [[("x", "==", "b")]], [[("z", "==", "new")]]):
        assert frame(pred) == want(pred) and frame(pred)


def test_garbage_collection_keeps_what_versions_reference(tmp_path):
    store = str(tmp_path)
    kstore.store_dataset(store, UUID, pd.DataFrame({"id": [1, 2], "a": [1, 2], "c": ["x", "y"]}))
    kstore.rename_columns(store, UUID, {"a": "b"})
    kstore.drop_columns(store, UUID, "c")
    kstore.update_dataset(store, UUID, pd.DataFrame({"id": [3], "b": [3]}))
    kstore.garbage_collect(store, UUID, retention=timedelta(0), enforce_retention_duration=False)
    # the renamed version's files are all still referenced: nothing it reads was deleted
    assert rows(kstore.read_dataset(store, UUID)) == [(1, 1), (2, 2), (3, 3)]
    kstore.compact(store, UUID)
    r = kstore.garbage_collect(store, UUID, retention=timedelta(0), enforce_retention_duration=False)
    assert r.deleted_files  # the files before the compaction (holding the dropped "c") are gone
    assert rows(kstore.read_dataset(store, UUID)) == [(1, 1), (2, 2), (3, 3)]
    for key in data_keys(store):
        assert "c" not in file_columns(store, key)


def test_copy_dataset_keeps_the_mapping(renamed, tmp_path):
    store, want = renamed
    kstore.drop_columns(store, UUID, "s")
    kstore.copy_dataset(store, UUID, str(tmp_path), new_uuid="copy")
    got = kstore.read_dataset(str(tmp_path), "copy", predicates=[[("amount", ">", 15)]])
    assert rows(got) == rows(want.drop(columns="s")[want.amount > 15])


def test_dask_reads_and_writes_renamed_columns(renamed):
    import kstore.dask as kd

    store, want = renamed
    got = kd.read_dataset(store, UUID, predicates=[[("amount", ">=", 20)]]).compute()
    assert rows(got) == rows(want[want.amount >= 20])
    import dask.dataframe as dd

    kd.update_dataset(store, UUID, dd.from_pandas(pd.DataFrame({"id": [8], "p": [4], "amount": [80], "s": ["r"]}),
                                                 npartitions=1))
    assert kstore.read_dataset(store, UUID, predicates=[[("amount", "==", 80)]])["id"].tolist() == [8]
    changes = kd.read_changes(store, UUID, 0).compute()
    assert sorted(changes["amount"].dropna()) == [10, 20, 30, 40, 50, 80]


def test_spark_reads_and_writes_renamed_columns(spark, tmp_path):
    import kstore.spark as ks

    store = str(tmp_path)
    df = pd.DataFrame({"id": [1, 2, 3], "p": [1, 1, 2], "a": [10, 20, 30], "c": ["x", "y", "z"]})
    kstore.store_dataset(store, UUID, df, partition_on="p")
    kstore.rename_columns(store, UUID, {"a": "amount"})
    kstore.drop_columns(store, UUID, "c")
    ks.update_dataset(store, UUID, spark.createDataFrame(pd.DataFrame({"id": [4], "p": [2], "amount": [40]})))
    want = [(1, 1, 10), (2, 1, 20), (3, 2, 30), (4, 2, 40)]
    for fmt in ("kstore",):  # (the JVM source: tests/drivers/test_spark_jvm.py)
        sdf = spark.read.format(fmt).option("dataset_uuid", UUID).load(store)
        assert sorted((r.id, r.p, r.amount) for r in sdf.collect()) == want
        assert sdf.columns == ["p", "amount", "id"] or set(sdf.columns) == {"p", "amount", "id"}
        assert sorted(r.id for r in sdf.filter("amount > 15").collect()) == [2, 3, 4]


def test_plateau_sees_the_file_names(tmp_path):
    """What kartothek/plateau readers see (docs/guides/schema.md): the columns under their
    file names (the names before a rename), without dropped columns, every row; a predicate
    on the old name works, one on the new name fails in plateau."""
    plateau_api = pytest.importorskip("plateau.api.dataset")
    import functools

    import minimalkv

    store = str(tmp_path)
    kstore.store_dataset(store, UUID, pd.DataFrame({"id": [1, 2], "p": [1, 2], "a": [10, 20], "c": ["x", "y"]}),
                         partition_on="p")
    kstore.rename_columns(store, UUID, {"a": "amount"})
    kstore.drop_columns(store, UUID, "c")
    kstore.update_dataset(store, UUID, pd.DataFrame({"id": [3], "p": [1], "amount": [30]}))
    pstore = functools.partial(minimalkv.get_store_from_url, "hfs://" + store)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = plateau_api.read_table(UUID, store=pstore)
        assert sorted(theirs.columns) == ["a", "id", "p"]
        assert sorted(zip(theirs["id"], theirs["a"])) == [(1, 10), (2, 20), (3, 30)]
        assert plateau_api.read_table(UUID, store=pstore, predicates=[[("a", "==", 20)]])["id"].tolist() == [2]
        with pytest.raises(Exception):  # noqa: B017 - plateau's own error (a KeyError)
            plateau_api.read_table(UUID, store=pstore, predicates=[[("amount", "==", 20)]])


# ---------------------------------------------------------------------------------------
# any sequence of steps reads as a model of the same steps on a pandas frame
# ---------------------------------------------------------------------------------------

_NAMES = ["a", "b", "c"]  # few names: renames, drops and re-adds reuse them
_step = st.one_of(
    st.tuples(st.just("append"), st.integers(1, 3)),
    st.tuples(st.just("rename"), st.sampled_from(_NAMES), st.sampled_from(_NAMES + ["a__kstore1"])),
    st.tuples(st.just("drop"), st.sampled_from(_NAMES)),
    st.tuples(st.just("add"), st.sampled_from(_NAMES + ["a__kstore1"])),
    st.tuples(st.just("compact")),
    st.tuples(st.just("update"), st.integers(0, 100)),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(_step, min_size=1, max_size=10))
def test_any_sequence_reads_as_the_model(steps):
    store = f"memory://colmap-{uuid.uuid4().hex}"
    model = pd.DataFrame({"id": pd.array([0, 1], "Int64"), "a": pd.array([5, 6], "Int64")})
    kstore.store_dataset(store, UUID, model.astype({"id": "int64", "a": "int64"}))
    versions = {0: model.copy()}
    next_id = 2
    for step in steps:
        kind = step[0]
        if kind == "append":
            new = pd.DataFrame({c: pd.array(range(next_id * 10, next_id * 10 + step[1]), "Int64") for c in model.columns})
            new["id"] = pd.array(range(next_id, next_id + step[1]), "Int64")
            next_id += step[1]
            kstore.update_dataset(store, UUID, new.astype("int64"))
            model = pd.concat([model, new], ignore_index=True)
        elif kind == "rename":
            old, to = step[1], step[2]
            if old not in model.columns or old == to or to in model.columns:
                continue
            kstore.rename_columns(store, UUID, {old: to})
            model = model.rename(columns={old: to})
        elif kind == "drop":
            if step[1] not in model.columns:
                continue
            kstore.drop_columns(store, UUID, step[1])
            model = model.drop(columns=[step[1]])
        elif kind == "add":
            col = step[1]
            if col in model.columns:
                continue
            new = pd.DataFrame({c: pd.array([next_id * 10], "Int64") for c in [*model.columns, col]})
            new["id"] = pd.array([next_id], "Int64")
            next_id += 1
            kstore.update_dataset(store, UUID, new.astype("int64"), schema_mode="merge")
            model = pd.concat([model, new], ignore_index=True)
        elif kind == "compact":
            kstore.compact(store, UUID)
        elif kind == "update":
            data_cols = [c for c in model.columns if c != "id"]
            if not data_cols or model.empty:
                continue
            col = data_cols[0]
            target = int(model["id"].iloc[step[1] % len(model)])
            kstore.update_rows(store, UUID, [[("id", "==", target)]], set={col: -1})
            model.loc[model["id"] == target, col] = -1
        versions[kstore.load_metadata(store, UUID).version] = model.copy()
    for v, want in versions.items():
        got = kstore.read_dataset(store, UUID, version=v)
        assert sorted(got.columns) == sorted(want.columns), (v, steps)
        assert rows(got) == rows(want), (v, steps)
        for col in want.columns:  # a predicate on every column, under its name at that version
            if col == "id" or want[col].isna().all():
                continue
            value = want[col].dropna().iloc[0]
            hit = kstore.read_dataset(store, UUID, version=v, predicates=[[(col, "==", value)]])
            assert rows(hit) == rows(want[want[col] == value]), (v, col, steps)


@pytest.mark.parametrize("indexed", [False, True])
def test_a_compaction_that_raced_a_rename_keeps_statistics_and_index(store_url, indexed):
    """The compaction read version 2 (column ``a``), a rename ``a -> b`` committed, then the
    compaction commits (its files hold ``a`` under the file name ``b`` now has, so its rows
    are right): the compacted file's statistics and index values count for ``b``, so a
    predicate on ``b`` still prunes it."""
    import pyarrow.compute as pc

    from kstore.blocks.compact import CompactionRequest, finish_compaction, plan_compaction, rewrite_groups

    kstore.store_dataset(store_url, UUID, pd.DataFrame({"p": [0, 0], "id": [1, 2], "a": [10, 20]}),
                         partition_on="p", secondary_indices=["a"] if indexed else None)
    kstore.update_dataset(store_url, UUID, pd.DataFrame({"p": [0], "id": [3], "a": [30]}))
    kstore.update_dataset(store_url, UUID, pd.DataFrame({"p": [1], "id": [4], "a": [1000]}))
    st_ = open_store(store_url)
    plan = plan_compaction(st_, UUID, CompactionRequest(min_files=2))
    assert len(plan.groups) == 1  # the two files of p=0
    written = rewrite_groups(st_, plan)
    kstore.rename_columns(store_url, UUID, {"a": "b"})
    finish_compaction(st_, plan, written)
    meta = kstore.load_metadata(store_url, UUID)
    assert meta.version == 4
    stats = meta.files.stats()
    compacted = stats.filter(pc.equal(stats.column("label"), written[0].label)).to_pylist()
    assert [(r["min:b"], r["max:b"], r["nulls:b"]) for r in compacted] == [(10, 30, 0)]
    assert "min:a" not in stats.column_names
    plan_b = kstore.plan_read(store_url, UUID, predicates=[[("b", ">", 500)]])
    assert plan_b.n_files == 2 and len(plan_b.tasks) == 1  # the compacted file is pruned
    got = kstore.read_dataset(store_url, UUID, predicates=[[("b", "<=", 30)]])
    assert rows(got) == [(10, 1, 0), (20, 2, 0), (30, 3, 0)]  # b, id, p
    if indexed:
        assert list(meta.indices) == ["b"]
        lists = meta.files.index_lists("b")
        by_label = dict(zip(meta.files.labels.to_pylist(), lists.to_pylist()))
        assert by_label[written[0].label] == [10, 20, 30]
