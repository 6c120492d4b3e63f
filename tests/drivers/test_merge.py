"""kstore.merge (upsert by key): an oracle computed from the target and source rows, the files
it reads, concurrent writers, a failure at every store call, txn and time travel (#33)."""

from __future__ import annotations

import datetime as dt
import itertools

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kstore
from kstore.blocks.merge import key_predicates
from kstore.cli.readonly import _history_note
from kstore.errors import (
    ColumnNotFoundError,
    CommitConflictError,
    InvalidArgumentError,
    SchemaMismatchError,
)
from kstore.io.memory import MemoryStore
from tests.drivers._rows import (
    UUID,
    assert_all_or_nothing,
    data_files,
    expect_rows,
    file_keys,
    frame,
    norm_value,
    referenced,
    row,
    rows_of,
)
from tests.drivers._stores import HookStore

MODES = list(itertools.product(("update", "delete", "ignore"), ("insert", "ignore"), ("delete", "ignore")))


def key_of(row: dict, on: list[str]):
    vals = tuple(norm_value(row[c]) for c in on)
    return None if any(v is None for v in vals) else vals


def oracle(target: pd.DataFrame, source: pd.DataFrame, on: list[str], wm: str, wnm: str, wnbs: str):
    """The merged rows and the counts, from the rows (Delta's MERGE; SQL nulls never match)."""
    src = {}
    for r in source.to_dict("records"):
        if key_of(r, on) is not None:
            src[key_of(r, on)] = r
    out, seen = [], set()
    counts = {"inserted": 0, "updated": 0, "deleted": 0}
    for r in target.to_dict("records"):
        key = key_of(r, on)
        if key is not None and key in src:
            seen.add(key)
            if wm == "update":
                out.append(src[key])
                counts["updated"] += 1
            elif wm == "delete":
                counts["deleted"] += 1
            else:
                out.append(r)
        elif wnbs == "delete":
            counts["deleted"] += 1
        else:
            out.append(r)
    for r in source.to_dict("records"):
        if (key_of(r, on) is None or key_of(r, on) not in seen) and wnm == "insert":
            out.append(r)
            counts["inserted"] += 1
    return pd.DataFrame(out, columns=target.columns), counts


# ---------------------------------------------------------------------------------------
# the oracle property
# ---------------------------------------------------------------------------------------

@st.composite
def merges(draw):
    target = draw(st.lists(row(), min_size=1, max_size=25))
    keys = draw(st.lists(st.integers(0, 15), unique=True, max_size=10))  # overlapping some target keys
    source = [dict(draw(row()), k=k) for k in keys] + draw(st.lists(row(st.none()), max_size=2))  # null keys
    split = draw(st.integers(0, len(target)))
    return target, draw(st.permutations(source)), split, draw(st.sampled_from(MODES))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(merges())
def test_merge_matches_the_oracle(case):
    target_rows, source_rows, split, (wm, wnm, wnbs) = case
    store = MemoryStore()
    target, source = frame(target_rows), frame(source_rows)
    kstore.store_dataset(store, UUID, target.iloc[:split] if split else target, partition_on="p",
                         secondary_indices=["k"])
    if split:  # a second batch of files: keys spread over several files of a partition
        kstore.update_dataset(store, UUID, target.iloc[split:])
    before = kstore.read_dataset(store, UUID)
    v0 = kstore.load_metadata(store, UUID).version
    src_copy = source.copy(deep=True)

    result = kstore.merge(store, UUID, source, "k", when_matched=wm, when_not_matched=wnm,
                          when_not_matched_by_source=wnbs)

    pd.testing.assert_frame_equal(source, src_copy)  # the caller's frame is not changed
    expected, counts = oracle(target, source, ["k"], wm, wnm, wnbs)
    after = kstore.read_dataset(store, UUID)
    assert rows_of(after) == expect_rows(expected)
    assert (result.inserted, result.updated, result.deleted) == (
        counts["inserted"], counts["updated"], counts["deleted"])
    assert dict(after.dtypes) == dict(before.dtypes)  # nothing widened (int8 stays int8, ...)
    changed = any(counts.values())
    assert result.dataset.version == (v0 + 1 if changed else v0)
    assert (result.files_rewritten + result.files_added > 0) == changed
    if changed:
        assert kstore.history(store, UUID)[-1].operation == "merge"
        assert rows_of(kstore.read_dataset(store, UUID, version=v0)) == rows_of(before)  # time travel
    assert data_files(store) <= referenced(store)  # nothing left behind


def test_key_predicates_use_a_range_beyond_the_in_bound():
    src = pa.table({"k": list(range(20)), "j": [1] * 20})
    assert key_predicates(src, ["k", "j"], max_in=10) == [[("k", ">=", 0), ("k", "<=", 19), ("j", "in", [1])]]
    assert key_predicates(pa.table({"k": pa.array([None], pa.int64())}), ["k"]) == [[("k", "in", [])]]


# ---------------------------------------------------------------------------------------
# keys: several columns, the partition column, moves, nulls, duplicates
# ---------------------------------------------------------------------------------------

def _people(store):
    df = pd.DataFrame({"region": ["eu", "eu", "us", "us"], "id": [1, 2, 1, 3], "v": [10, 20, 30, 40]})
    return kstore.store_dataset(store, UUID, df, partition_on="region")


def test_multi_column_keys_including_the_partition_column():
    store = MemoryStore()
    _people(store)
    src = pd.DataFrame({"region": ["us", "eu"], "id": [1, 3], "v": [31, 50]})
    r = kstore.merge(store, UUID, src, on=["region", "id"])
    assert (r.inserted, r.updated, r.files_read) == (1, 1, 1)  # region=eu holds no id 3: only us is read
    got = sorted(kstore.read_dataset(store, UUID)[["region", "id", "v"]].itertuples(index=False, name=None))
    assert got == [("eu", 1, 10), ("eu", 2, 20), ("eu", 3, 50), ("us", 1, 31), ("us", 3, 40)]


def test_an_update_moves_a_row_to_its_new_partition():
    store = MemoryStore()
    _people(store)
    r = kstore.merge(store, UUID, pd.DataFrame({"region": ["us"], "id": [2], "v": [21]}), on="id")
    assert (r.updated, r.inserted) == (1, 0)
    assert kstore.read_dataset(store, UUID, predicates=[[("id", "==", 2)]])["region"].tolist() == ["us"]
    assert sorted(kstore.read_dataset(store, UUID, predicates=[[("region", "==", "eu")]])["id"]) == [1]
    assert sorted(kstore.read_dataset(store, UUID, predicates=[[("region", "==", "us")]])["id"]) == [1, 2, 3]


def test_null_keys_never_match():
    store = MemoryStore()
    df = pd.DataFrame({"k": pd.array([1, None], "Int64"), "v": [1, 2]})
    kstore.store_dataset(store, UUID, df)
    src = pd.DataFrame({"k": pd.array([None, 1], "Int64"), "v": [3, 4]})
    r = kstore.merge(store, UUID, src, "k")
    assert (r.inserted, r.updated) == (1, 1)  # the null-key source row is new; the target's null stays
    got = kstore.read_dataset(store, UUID)
    assert sorted(got["v"].tolist()) == [2, 3, 4]
    assert got["k"].isna().sum() == 2


def test_duplicate_source_keys_are_an_error_naming_them_and_nothing_is_committed():
    store = MemoryStore()
    _people(store)
    before = set(store.iter_prefix(""))
    src = pd.DataFrame({"region": ["eu"] * 8, "id": [1, 1, 2, 2, 5, 5, 6, 7], "v": range(8)})
    with pytest.raises(InvalidArgumentError, match=r"3 key\(s\).*more than once.*1.*2.*5"):
        kstore.merge(store, UUID, src, "id")
    assert set(store.iter_prefix("")) == before
    dup = pd.DataFrame({"region": ["eu"] * 14, "id": [i // 2 for i in range(14)], "v": range(14)})
    with pytest.raises(InvalidArgumentError, match=r"7 key\(s\).*\[0, 1, 2, 3, 4\]"):
        kstore.merge(store, UUID, dup, "id")


def test_missing_extra_and_mistyped_columns_are_refused():
    store = MemoryStore()
    _people(store)
    with pytest.raises(SchemaMismatchError, match=r"lacks \['v'\]"):
        kstore.merge(store, UUID, pd.DataFrame({"region": ["eu"], "id": [9]}), "id")
    with pytest.raises(SchemaMismatchError, match=r"has \['w'\]"):
        kstore.merge(store, UUID, pd.DataFrame({"region": ["eu"], "id": [9], "v": [1], "w": [2]}), "id")
    with pytest.raises(SchemaMismatchError, match="'v' is int64 in the dataset but string"):
        kstore.merge(store, UUID, pd.DataFrame({"region": ["eu"], "id": [9], "v": ["x"]}), "id")
    with pytest.raises(ColumnNotFoundError, match="nope"):
        kstore.merge(store, UUID, pd.DataFrame({"region": ["eu"], "id": [9], "v": [1]}), "nope")
    with pytest.raises(InvalidArgumentError, match="when_matched"):
        kstore.merge(store, UUID, pd.DataFrame({"region": ["eu"], "id": [9], "v": [1]}), "id", when_matched="upsert")
    assert kstore.load_metadata(store, UUID).version == 0


def test_an_arrow_source_and_an_empty_source():
    store = MemoryStore()
    _people(store)
    empty = pa.table({"region": pa.array([], pa.string()), "id": pa.array([], pa.int64()),
                      "v": pa.array([], pa.int64())})
    r = kstore.merge(store, UUID, empty, "id")
    assert (r.dataset.version, r.files_read, r.inserted) == (0, 0, 0)
    r = kstore.merge(store, UUID, empty, "id", when_not_matched_by_source="delete")
    assert r.deleted == 4 and len(kstore.read_dataset(store, UUID)) == 0
    r = kstore.merge(store, UUID, pa.table({"region": ["eu"], "id": [1], "v": [5]}), "id")
    assert r.inserted == 1


# ---------------------------------------------------------------------------------------
# reads only the files that may hold a source key
# ---------------------------------------------------------------------------------------

def test_an_upsert_reads_only_the_files_holding_its_keys():
    store = HookStore(MemoryStore())
    for i in range(50):  # 50 files, 40 keys each, the key indexed
        df = pd.DataFrame({"p": [i % 5] * 40, "k": np.arange(i * 40, i * 40 + 40), "v": np.zeros(40)})
        if i == 0:
            kstore.store_dataset(store, UUID, df, partition_on="p", secondary_indices=["k"])
        else:
            kstore.update_dataset(store, UUID, df)
    before = kstore.load_metadata(store, UUID)
    keys = list(range(7 * 40, 7 * 40 + 30)) + list(range(31 * 40 + 10, 31 * 40 + 20)) + [999_999]
    src = pd.DataFrame({"p": [k % 5 if k < 2000 else 4 for k in keys], "k": keys, "v": np.ones(len(keys))})
    store.calls.clear()
    r = kstore.merge(store, UUID, src, "k")
    assert (r.files_read, r.files_rewritten, r.updated, r.inserted) == (2, 2, 40, 1)
    gets = [k for m, k in store.calls if m in ("get", "open") and k.endswith(".parquet") and "/indices/" not in k
            and "/_kstore/" not in k]
    assert len(gets) == 2  # the two files holding keys, nothing else
    after = r.dataset
    old, new = file_keys(before), file_keys(after)
    kept = {lab: key for lab, key in old.items() if lab in new}
    assert len(kept) == 48 and all(new[lab] == key for lab, key in kept.items())
    got = kstore.read_dataset(store, UUID)
    assert len(got) == 2001 and got["v"].sum() == 41


# ---------------------------------------------------------------------------------------
# concurrent writers between the plan and the commit
# ---------------------------------------------------------------------------------------

def _append_before_claim(inner, frame_):
    """A store whose first claim of a log entry is preceded by another writer's append."""
    done = []

    def before(method, key):
        if method == "put_if_absent" and "/_kstore/log/" in key and not done:
            done.append(True)
            kstore.update_dataset(inner, UUID, frame_)

    return HookStore(inner, before=before), done


def test_a_concurrent_append_of_a_source_key_is_a_conflict_and_nothing_is_left():
    inner = MemoryStore()
    _people(inner)
    store, done = _append_before_claim(inner, pd.DataFrame({"region": ["eu"], "id": [7], "v": [70]}))
    with pytest.raises(CommitConflictError, match="inside this write's scope"):
        kstore.merge(store, UUID, pd.DataFrame({"region": ["eu", "us"], "id": [7, 1], "v": [71, 31]}), "id")
    assert done
    meta = kstore.load_metadata(inner, UUID)
    assert meta.version == 1 and kstore.history(inner, UUID)[-1].operation == "append"
    assert sorted(kstore.read_dataset(inner, UUID)["v"]) == [10, 20, 30, 40, 70]
    assert data_files(inner) == set(file_keys(meta).values())  # the merge's files are gone


def test_a_concurrent_append_of_other_keys_commutes():
    inner = MemoryStore()
    _people(inner)
    store, done = _append_before_claim(inner, pd.DataFrame({"region": ["asia"], "id": [100], "v": [1]}))
    r = kstore.merge(store, UUID, pd.DataFrame({"region": ["us", "eu"], "id": [3, 7], "v": [41, 70]}), "id")
    assert done and r.dataset.version == 2 and (r.updated, r.inserted) == (1, 1)
    got = kstore.read_dataset(inner, UUID)
    assert sorted(got["id"]) == [1, 1, 2, 3, 7, 100] and sorted(got["v"]) == [1, 10, 20, 30, 41, 70]


def test_a_full_sync_conflicts_with_any_concurrent_append():
    inner = MemoryStore()
    _people(inner)
    store, _ = _append_before_claim(inner, pd.DataFrame({"region": ["asia"], "id": [100], "v": [1]}))
    with pytest.raises(CommitConflictError):
        kstore.merge(store, UUID, pd.DataFrame({"region": ["us"], "id": [1], "v": [31]}), "id",
                     when_not_matched_by_source="delete")
    assert kstore.load_metadata(inner, UUID).version == 1


def test_a_concurrent_rewrite_of_a_file_the_merge_rewrites_is_a_conflict():
    inner = MemoryStore()
    _people(inner)
    done = []

    def before(method, key):
        if method == "put_if_absent" and "/_kstore/log/" in key and not done:
            done.append(True)
            kstore.delete_rows(inner, UUID, [[("v", "==", 30)]])  # rewrites region=us

    with pytest.raises(CommitConflictError, match="removed or replaced"):
        kstore.merge(HookStore(inner, before=before), UUID, pd.DataFrame({"region": ["us"], "id": [3], "v": [41]}),
                     "id")
    assert sorted(kstore.read_dataset(inner, UUID)["v"]) == [10, 20, 40]


# ---------------------------------------------------------------------------------------
# a failure at every store call; txn; history
# ---------------------------------------------------------------------------------------

def test_a_failure_at_any_store_call_leaves_the_old_or_the_merged_rows_and_no_orphan():
    src = pd.DataFrame({"region": ["us", "eu", "asia"], "id": [1, 2, 9], "v": [31, 21, 90]})

    def fresh():
        inner = MemoryStore()
        _people(inner)
        return inner

    assert_all_or_nothing(fresh, lambda store: kstore.merge(store, UUID, src, "id"))


def test_a_txn_rerun_changes_nothing_and_history_shows_the_merge():
    store = MemoryStore()
    _people(store)
    src = pd.DataFrame({"region": ["us"], "id": [5], "v": [50]})
    r1 = kstore.merge(store, UUID, src, "id", txn=("loader", 1))
    r2 = kstore.merge(store, UUID, src, "id", txn=("loader", 1))
    assert r1.dataset.version == r2.dataset.version == 1 and r2.inserted == 0
    assert len(kstore.read_dataset(store, UUID)) == 5
    h = kstore.history(store, UUID)[-1]
    assert (h.operation, len(h.added), len(h.removed), h.rows_added) == ("merge", 1, 0, 1)
    assert h.info == {"inserted": 1, "updated": 0, "deleted": 0, "on": ["id"]}
    r3 = kstore.merge(store, UUID, pd.DataFrame({"region": ["us"], "id": [5], "v": [51]}), "id")
    h = kstore.history(store, UUID)[-1]
    assert (h.operation, len(h.removed), r3.updated) == ("merge", 1, 1)
    assert h.info == {"inserted": 0, "updated": 1, "deleted": 0, "on": ["id"]}
    assert _history_note(h) == "inserted 0, updated 1, deleted 0: rewrote 1 file into 1 (1 row in them)"
    assert sorted(kstore.read_dataset(store, UUID, version=1)["v"]) == [10, 20, 30, 40, 50]
    assert sorted(kstore.read_dataset(store, UUID, version=0)["v"]) == [10, 20, 30, 40]


def test_a_merge_plans_again_when_gc_removed_a_planned_file():
    """Before the merge reads its first planned file, a compaction commits and GC (retention 0)
    deletes the file: the merge plans again on the newest version and commits the right rows."""
    inner = MemoryStore()
    _people(inner)
    kstore.update_dataset(inner, UUID, pd.DataFrame({"region": ["us"], "id": [5], "v": [50]}))
    raced = []

    def before(method, key):
        if method == "open" and "/table/" in key and not raced:
            raced.append(kstore.compact(inner, UUID))
            gc = kstore.garbage_collect(inner, UUID, retention=dt.timedelta(0), enforce_retention_duration=False)
            assert key in gc.deleted_files

    r = kstore.merge(HookStore(inner, before=before), UUID,
                     pd.DataFrame({"region": ["us", "eu"], "id": [5, 8], "v": [51, 80]}), "id")
    assert raced and (r.updated, r.inserted) == (1, 1)
    assert [h.operation for h in kstore.history(inner, UUID)][-3:] == ["compaction", "vacuum", "merge"]
    got = sorted(kstore.read_dataset(inner, UUID)[["id", "v"]].itertuples(index=False, name=None))
    assert got == [(1, 10), (1, 30), (2, 20), (3, 40), (5, 51), (8, 80)]
    assert data_files(inner) <= referenced(inner)


@pytest.mark.parametrize("values", [
    pd.DataFrame({"k": pd.array([9], "int8"), "x": pd.array([1], "int8")}),  # the dataset's types
    pd.DataFrame({"k": [9], "x": [1]}),  # int64: an append widens the column, so does a merge
    pd.DataFrame({"k": [9], "x": [1.5]}),  # float into int: an append refuses it, so does a merge
    pd.DataFrame({"k": [9], "x": pd.to_datetime(["2020-01-01"])}),
])
def test_the_source_is_converted_and_checked_as_an_append(values):
    df = pd.DataFrame({"k": pd.array([1, 2], "int8"), "x": pd.array([5, 6], "int8")})
    appended, merged = MemoryStore(), MemoryStore()
    kstore.store_dataset(appended, UUID, df)
    kstore.store_dataset(merged, UUID, df)
    try:
        kstore.update_dataset(appended, UUID, values)
    except kstore.errors.KstoreError as exc:
        with pytest.raises(type(exc)):
            kstore.merge(merged, UUID, values, "k")
        assert kstore.load_metadata(merged, UUID).version == 0
        return
    kstore.merge(merged, UUID, values, "k")
    assert kstore.read_schema(merged, UUID).equals(kstore.read_schema(appended, UUID))
    a, m = kstore.read_dataset(appended, UUID), kstore.read_dataset(merged, UUID)
    pd.testing.assert_frame_equal(m.sort_values("k").reset_index(drop=True), a.sort_values("k").reset_index(drop=True))
