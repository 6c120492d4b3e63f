"""kstore.update_rows (UPDATE ... SET ... WHERE): an oracle computed from the rows, partition
moves, exact value conversion, conflicts, a failure at every store call (#33)."""

from __future__ import annotations

import operator

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kstore
from kstore.errors import ColumnNotFoundError, CommitConflictError, InvalidArgumentError
from kstore.io.memory import MemoryStore
from tests.drivers._rows import (
    UUID,
    assert_all_or_nothing,
    data_files,
    expect_rows,
    file_keys,
    frame,
    referenced,
    row,
    rows_of,
)
from tests.drivers._stores import HookStore

_CMP = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, ">=": operator.ge}
_VALUES = {"p": st.integers(0, 3), "k": st.integers(0, 12), "i8": st.integers(-128, 127),
           "s": st.sampled_from(["a", "ü", "", "x/y"])}


@st.composite
def terms(draw):
    col = draw(st.sampled_from(sorted(_VALUES)))
    op = draw(st.sampled_from(["==", "!=", "<", ">=", "in", "is null"]))
    if op == "is null":
        return (col, op)
    if op == "in":
        return (col, op, draw(st.lists(_VALUES[col], max_size=3)))
    return (col, op, draw(_VALUES[col]))


def term_mask(df: pd.DataFrame, term: tuple) -> np.ndarray:
    """SQL semantics: a comparison never matches a null."""
    values = df[term[0]].astype(object).to_numpy()
    null = df[term[0]].isna().to_numpy()
    if term[1] == "is null":
        return null
    if term[1] == "in":
        return np.array([not n and v in term[2] for v, n in zip(values, null)], dtype=bool)
    return np.array([not n and _CMP[term[1]](v, term[2]) for v, n in zip(values, null)], dtype=bool)


SETS = st.fixed_dictionaries({}, optional={
    "p": st.integers(0, 3),  # a partition column: rows move
    "i8": st.integers(-128, 127),
    "s": st.one_of(st.none(), st.sampled_from(["new", "ü"])),
    "f32": st.sampled_from([0.1, -2.5]),
    "k": st.one_of(st.none(), st.integers(0, 20)),
}).filter(bool)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(row(), min_size=1, max_size=25), st.lists(st.lists(terms(), min_size=1, max_size=2), min_size=1,
                                                          max_size=2), SETS)
def test_update_rows_matches_the_oracle(rows, predicates, values):
    store = MemoryStore()
    target = frame(rows)
    kstore.store_dataset(store, UUID, target, partition_on="p", secondary_indices=["k"])
    before = kstore.read_dataset(store, UUID)
    mask = np.zeros(len(target), dtype=bool)
    for conj in predicates:
        m = np.ones(len(target), dtype=bool)
        for t in conj:
            m &= term_mask(target, t)
        mask |= m
    expected = [dict(r, **values) if hit else r for r, hit in zip(target.to_dict("records"), mask)]

    result = kstore.update_rows(store, UUID, predicates, set=values)

    after = kstore.read_dataset(store, UUID)
    exp = pd.DataFrame(expected, columns=target.columns)
    if "f32" in values:  # the value as the float32 column holds it
        exp["f32"] = exp["f32"].astype("float32")
    assert rows_of(after) == expect_rows(exp)
    assert result.updated == int(mask.sum())
    assert dict(after.dtypes) == dict(before.dtypes)
    assert result.dataset.version == (1 if mask.any() else 0)
    assert (result.files_rewritten > 0) == bool(mask.any())
    assert result.files_read >= result.files_rewritten
    if mask.any():
        assert kstore.history(store, UUID)[-1].operation == "update"
        assert rows_of(kstore.read_dataset(store, UUID, version=0)) == rows_of(before)
    assert data_files(store) <= referenced(store)


def _people(store):
    df = pd.DataFrame({"region": ["eu", "eu", "us", "us"], "id": [1, 2, 3, 4], "v": pd.array([10, 20, 30, 40], "int8")})
    return kstore.store_dataset(store, UUID, df, partition_on="region", secondary_indices=["id"])


def test_setting_the_partition_column_moves_the_rows_and_reads_only_planned_files():
    store = MemoryStore()
    before = _people(store)
    r = kstore.update_rows(store, UUID, [[("id", "==", 2)]], set={"region": "asia", "v": 21})
    assert (r.updated, r.files_read, r.files_rewritten) == (1, 1, 1)
    assert file_keys(r.dataset)[[lab for lab in file_keys(before) if "us" in lab][0]] == \
        file_keys(before)[[lab for lab in file_keys(before) if "us" in lab][0]]  # region=us untouched
    got = kstore.read_dataset(store, UUID)
    assert sorted(got[["region", "id", "v"]].itertuples(index=False, name=None)) == [
        ("asia", 2, 21), ("eu", 1, 10), ("us", 3, 30), ("us", 4, 40)]
    assert str(got["v"].dtype) == "int8"
    assert sorted(lab.split("/")[0] for lab in r.dataset.partitions) == ["region=asia", "region=eu", "region=us"]


def test_values_that_do_not_fit_and_unknown_columns_are_refused():
    store = MemoryStore()
    _people(store)
    with pytest.raises(InvalidArgumentError, match=r"column 'v' \(int8\) to 300"):
        kstore.update_rows(store, UUID, [[("id", "==", 1)]], set={"v": 300})
    with pytest.raises(InvalidArgumentError, match=r"column 'v' \(int8\) to 'x'"):
        kstore.update_rows(store, UUID, [[("id", "==", 1)]], set={"v": "x"})
    with pytest.raises(InvalidArgumentError, match=r"column 'v' \(int8\) to 1.5"):
        kstore.update_rows(store, UUID, [[("id", "==", 1)]], set={"v": 1.5})
    with pytest.raises(ColumnNotFoundError, match="nope"):
        kstore.update_rows(store, UUID, [[("id", "==", 1)]], set={"nope": 1})
    with pytest.raises(InvalidArgumentError, match="needs a predicate"):
        kstore.update_rows(store, UUID, None, set={"v": 1})
    with pytest.raises(InvalidArgumentError, match="set="):
        kstore.update_rows(store, UUID, [[("id", "==", 1)]], set={})
    assert kstore.load_metadata(store, UUID).version == 0


def test_no_match_commits_nothing_and_a_txn_rerun_changes_nothing():
    store = MemoryStore()
    meta = _people(store)
    r = kstore.update_rows(store, UUID, [[("id", "==", 99)]], set={"v": 1})
    assert (r.dataset.version, r.updated, r.files_read, r.files_rewritten) == (meta.version, 0, 0, 0)
    r1 = kstore.update_rows(store, UUID, [[("v", ">=", 20)]], set={"v": None}, txn=("job", 3))
    r2 = kstore.update_rows(store, UUID, [[("v", ">=", 10)]], set={"v": 0}, txn=("job", 3))
    assert r1.updated == 3 and r2.dataset.version == r1.dataset.version == 1 and r2.updated == 0
    h = kstore.history(store, UUID)[-1]
    assert (h.operation, h.info, h.txn) == ("update", {"updated": 3, "set_columns": ["v"]}, ("job", 3))
    assert kstore.read_dataset(store, UUID)["v"].isna().sum() == 3


def test_a_concurrent_append_the_predicate_matches_is_a_conflict_other_appends_commute():
    def run(appended):
        inner = MemoryStore()
        _people(inner)
        done = []

        def before(method, key):
            if method == "put_if_absent" and "/_kstore/log/" in key and not done:
                done.append(kstore.update_dataset(inner, UUID, appended))

        return inner, lambda: kstore.update_rows(HookStore(inner, before=before), UUID, [[("id", "in", [1, 5])]],
                                                 set={"v": 0})

    inner, go = run(pd.DataFrame({"region": ["eu"], "id": [5], "v": pd.array([50], "int8")}))
    with pytest.raises(CommitConflictError):
        go()
    assert sorted(kstore.read_dataset(inner, UUID)["v"]) == [10, 20, 30, 40, 50]
    assert data_files(inner) == set(file_keys(kstore.load_metadata(inner, UUID)).values())
    inner, go = run(pd.DataFrame({"region": ["eu"], "id": [6], "v": pd.array([60], "int8")}))
    assert go().updated == 1
    assert sorted(kstore.read_dataset(inner, UUID)["v"]) == [0, 20, 30, 40, 60]


def test_a_failure_at_any_store_call_leaves_the_old_or_the_updated_rows_and_no_orphan():
    def fresh():
        inner = MemoryStore()
        _people(inner)
        return inner

    assert_all_or_nothing(fresh, lambda store: kstore.update_rows(store, UUID, [[("id", "in", [2, 3])]],
                                                                  set={"region": "eu", "v": 7}))
