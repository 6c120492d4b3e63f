"""kstore.restore (#33): an older retained version committed again as the newest.

What must hold, and what each test tries to break:

- The restored version reads exactly what the version restored read when it was current
  (rows, values, types, schema, plans through its indices), after any sequence of appends,
  overwrites (other partitioning, other schema), row deletes, compactions, index builds and
  drops, and earlier restores; every other version still reads as it did (hypothesis).
- A store call failing at any point leaves the dataset at the old or the restored state,
  exactly, with every listed version's files present; a retry then restores.
- A concurrent writer's change, or a garbage collection that may expire the version being
  restored, is a clear error with nothing committed; a GC after the restore keeps its files.
- kartothek/plateau readers see the restored state.
"""

from __future__ import annotations

import functools
import shutil
import uuid
import warnings
from datetime import timedelta

import minimalkv
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kstore
from kstore.blocks import load
from kstore.core import runtime
from kstore.errors import (
    CommitConflictError,
    InvalidArgumentError,
    KstoreError,
    StoreError,
    VersionNotFoundError,
)
from tests.drivers._stores import HookStore

UUID = "ds"
DAY = 24 * 3600


def frame(ids: list[int], p: str = "a") -> pd.DataFrame:
    return pd.DataFrame({
        "p": [p] * len(ids),
        "id": pd.array(ids, dtype="int64"),
        "x": pd.array([i % 5 for i in ids], dtype="int16"),
        "s": [None if i % 4 == 0 else f"s{i}" for i in ids],
    })


def read(store, version: int | None = None) -> pa.Table:
    t = kstore.read_dataset(store, UUID, as_arrow=True, version=version)
    return t.select(sorted(t.column_names)).sort_by("id")


def same(a: pa.Table, b: pa.Table) -> bool:
    return a.schema.equals(b.schema, check_metadata=False) and a.equals(b)


def every_listed_version_has_its_files(store) -> None:
    st_ = kstore.open_store(store)
    for v in load.log_versions(st_, UUID):
        if not load.load_entry(st_, UUID, v).has_dataset:
            continue
        try:
            meta = load.load_version(st_, UUID, v)
        except VersionNotFoundError:
            continue  # expired by GC (a tombstone)
        for key in meta.referenced_keys():
            assert st_.exists(key), f"version {v} references {key}, which is gone"


# ---------------------------------------------------------------------------------------
# exactness after any history (hypothesis)
# ---------------------------------------------------------------------------------------

_step = st.one_of(
    st.tuples(st.just("append"), st.lists(st.integers(0, 40), min_size=1, max_size=6, unique=True),
              st.sampled_from(["a", "b", "c"])),
    st.tuples(st.just("overwrite"), st.lists(st.integers(0, 40), min_size=1, max_size=6, unique=True),
              st.sampled_from(["p", None])),
    st.tuples(st.just("delete_rows"), st.integers(0, 4)),
    st.tuples(st.just("compact")),
    st.tuples(st.just("build_index")),
    st.tuples(st.just("drop_index")),
    st.tuples(st.just("add_column"), st.lists(st.integers(41, 60), min_size=1, max_size=3, unique=True)),
    st.tuples(st.just("restore"), st.integers(0, 1000)),
)


def _apply(url: str, step: tuple) -> None:
    meta = kstore.load_metadata(url, UUID)
    kind = step[0]
    if kind == "append":
        extra = [c for c in meta.schema.names if c not in ("p", "id", "x", "s")]
        df = frame(step[1], step[2])
        for c in extra:
            df[c] = pd.array([1.5] * len(df), dtype="float32")
        kstore.update_dataset(url, UUID, df)
    elif kind == "overwrite":
        kstore.store_dataset(url, UUID, frame(step[1]), partition_on=step[2], mode="overwrite",
                             schema_mode="overwrite", secondary_indices=["x"])
    elif kind == "delete_rows":
        kstore.delete_rows(url, UUID, [[("x", "==", step[1])]])
    elif kind == "compact":
        kstore.compact(url, UUID)
    elif kind == "build_index":
        kstore.build_indices(url, UUID, ["id"])
    elif kind == "drop_index":
        if "id" in meta.indices:
            kstore.drop_indices(url, UUID, ["id"])
    elif kind == "add_column":
        if "y" not in meta.schema.names:
            df = frame(step[1])
            df["y"] = pd.array([2.5] * len(df), dtype="float32")
            kstore.update_dataset(url, UUID, df, schema_mode="merge")
    elif kind == "restore":
        kstore.restore(url, UUID, step[1] % (meta.version + 1))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(_step, min_size=1, max_size=7), pick=st.integers(0, 1000))
def test_a_restored_version_reads_exactly_what_it_read(steps, pick):
    url = f"memory://restore-prop-{uuid.uuid4().hex}"  # (an id() is reused once its object is freed)
    kstore.store_dataset(url, UUID, frame([1, 2, 3, 4]), partition_on="p", secondary_indices=["x"])
    seen = {0: read(url, 0)}
    for step in steps:
        _apply(url, step)
        v = kstore.load_metadata(url, UUID).version
        seen.setdefault(v, read(url, v))
    newest = kstore.load_metadata(url, UUID)
    target = pick % (newest.version + 1)
    meta = kstore.restore(url, UUID, target)
    assert meta.version == (newest.version if target == newest.version else newest.version + 1)
    assert same(read(url), seen[target])
    old = kstore.load_metadata(url, UUID, version=target)
    assert meta.partition_keys == old.partition_keys
    assert sorted(meta.indices) == sorted(c for c in (*old.indices, *old.inline_indices)
                                          if c not in old.partition_keys)
    # plans through the restored version's indices keep exactly the rows the predicate selects
    want = seen[target].filter(pa.compute.equal(seen[target]["x"], 2))
    got = kstore.read_dataset(url, UUID, predicates=[[("x", "==", 2)]], as_arrow=True)
    assert same(got.select(sorted(got.column_names)).sort_by("id"), want)
    # time travel: every version reads as it did, the restore's included
    for v, table in seen.items():
        assert same(read(url, v), table), f"version {v} changed"
    # and a fresh process (no cached state) reads the restore from the log alone
    assert same(read(kstore.open_store(url)), seen[target])


# ---------------------------------------------------------------------------------------
# the common cases, with what the history says
# ---------------------------------------------------------------------------------------


@pytest.fixture
def url(tmp_path) -> str:
    return str(tmp_path / "store")


def three_versions(url: str) -> dict[int, pa.Table]:
    """v0 partitioned on p, indexed on x; v1 appends; v2 overwrites with another schema."""
    kstore.store_dataset(url, UUID, frame([1, 2, 3]), partition_on="p", secondary_indices=["x"],
                         metadata={"owner": "team-a"})
    kstore.update_dataset(url, UUID, frame([4, 5], "b"))
    kstore.store_dataset(url, UUID, pd.DataFrame({"q": ["z"], "id": [99]}), mode="overwrite",
                         schema_mode="overwrite")
    return {v: read(url, v) for v in range(3)}


def test_restore_after_an_overwrite_brings_back_schema_partitions_indices_and_metadata(url):
    seen = three_versions(url)
    meta = kstore.restore(url, UUID, 1)
    assert meta.version == 3 and meta.partition_keys == ("p",) and list(meta.indices) == ["x"]
    assert meta.metadata["owner"] == "team-a"
    assert same(read(url), seen[1])
    assert kstore.read_schema(url, UUID).names == kstore.read_schema(url, UUID, version=1).names
    plan = kstore.plan_read(url, UUID, predicates=[[("x", "==", 4)]])
    assert len(plan.tasks) == 1  # the index answers: only p=b's file holds x == 4
    hist = kstore.history(url, UUID)
    assert [h.operation for h in hist] == ["create", "append", "overwrite", "restore"]
    assert same(read(url, 2), seen[2])  # the overwrite stays readable by time travel


def test_restore_by_as_of_and_of_the_newest_version(url):
    seen = three_versions(url)
    when = kstore.history(url, UUID)[0].timestamp
    assert kstore.restore(url, UUID, as_of=when).version == 3
    assert same(read(url), seen[0])
    assert kstore.restore(url, UUID, 3).version == 3  # the newest already: nothing committed
    assert len(kstore.history(url, UUID)) == 4


def test_restore_with_a_transaction_runs_once(url):
    seen = three_versions(url)
    kstore.restore(url, UUID, 0, txn=("job", 1))
    kstore.update_dataset(url, UUID, frame([7], "c"))
    again = kstore.restore(url, UUID, 0, txn=("job", 1))
    assert again.version == 4
    assert sorted(read(url)["id"].to_pylist()) == sorted(seen[0]["id"].to_pylist() + [7])


@pytest.mark.parametrize("call, error", [
    (lambda u: kstore.restore(u, UUID), InvalidArgumentError),
    (lambda u: kstore.restore(u, UUID, 1, as_of="2020-01-01"), InvalidArgumentError),
    (lambda u: kstore.restore(u, UUID, 9), VersionNotFoundError),
    (lambda u: kstore.restore(u, UUID, -1), KstoreError),
    (lambda u: kstore.restore(u, UUID, as_of="2000-01-01"), VersionNotFoundError),
    (lambda u: kstore.restore(u, "nope", 0), KstoreError),
])
def test_bad_restores_name_what_is_wrong(url, call, error):
    three_versions(url)
    with pytest.raises(error):
        call(url)
    assert kstore.load_metadata(url, UUID).version == 2


def test_plateau_reads_the_restored_state(url):
    api = pytest.importorskip("plateau.api.dataset")
    seen = three_versions(url)
    kstore.restore(url, UUID, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = api.read_table(UUID, store=functools.partial(minimalkv.get_store_from_url, "hfs://" + url))
    assert sorted(got["id"].tolist()) == seen[1]["id"].to_pylist()
    assert sorted(got["x"].tolist()) == sorted(seen[1]["x"].to_pylist())


# ---------------------------------------------------------------------------------------
# garbage collection beside and after a restore
# ---------------------------------------------------------------------------------------


def test_a_version_gc_expired_cannot_be_restored(url):
    three_versions(url)
    kstore.garbage_collect(url, UUID, retention=timedelta(0), enforce_retention_duration=False)
    with pytest.raises(VersionNotFoundError, match="expired"):
        kstore.restore(url, UUID, 0)
    assert [h.operation for h in kstore.history(url, UUID)][-1] == "vacuum"


def test_a_gc_after_the_restore_keeps_the_restored_files(url):
    seen = three_versions(url)
    kstore.restore(url, UUID, 0)
    kstore.garbage_collect(url, UUID, retention=timedelta(0), enforce_retention_duration=False)
    assert same(read(url), seen[0])
    every_listed_version_has_its_files(url)


def test_a_version_older_than_a_later_gc_cutoff_is_refused_even_if_still_readable(tmp_path):
    """v0 at day 0, v1 (overwrite) at day 1, v2 (overwrite) at day 10, v3 (append) at day
    10.5, GC at day 11 with 7 days' retention: v0 expires, v1 stays as the window's start
    (readable), but a later GC may expire it any time: restoring it is refused. v2 (inside the
    window) restores."""
    url = str(tmp_path / "store")
    clock = runtime.FixedRuntime(1_700_000_000)
    with runtime.installed(clock):
        kstore.store_dataset(url, UUID, frame([1, 2]), partition_on="p")
        clock.advance(DAY)
        kstore.store_dataset(url, UUID, frame([3]), partition_on="p", mode="overwrite")
        clock.advance(9 * DAY)
        kstore.store_dataset(url, UUID, frame([4]), partition_on="p", mode="overwrite")
        clock.advance(DAY / 2)
        kstore.update_dataset(url, UUID, frame([5], "b"))
        clock.advance(DAY / 2)
        gc = kstore.garbage_collect(url, UUID, retention=timedelta(days=7))
        assert gc.fence_version == 4 and gc.expired_versions == (0,) and 1 in gc.retained_versions
        assert read(url, 1)["id"].to_pylist() == [3]  # still readable ...
        with pytest.raises(VersionNotFoundError, match="cannot be restored"):
            kstore.restore(url, UUID, 1)  # ... but not safe to restore
        with pytest.raises(VersionNotFoundError, match="expired"):
            kstore.restore(url, UUID, 0)
        assert kstore.load_metadata(url, UUID).version == 4
        assert kstore.restore(url, UUID, 2).version == 5
        assert read(url)["id"].to_pylist() == [4]
        every_listed_version_has_its_files(url)


def test_a_gc_fence_landing_while_the_restore_commits_refuses_it(url):
    """A GC (retention 0) commits its fence between the restore's read and its claim: it
    expires the version being restored and deletes its files; the restore must not commit."""
    seen = three_versions(url)
    fired = []

    def before(method, key):
        if method == "put_if_absent" and "/_kstore/log/" in key and not fired:
            fired.append(key)
            kstore.garbage_collect(url, UUID, retention=timedelta(0), enforce_retention_duration=False)

    with pytest.raises(VersionNotFoundError, match="cannot be restored"):
        kstore.restore(HookStore(url, before=before), UUID, 0)
    assert fired
    assert same(read(url), seen[2])
    assert "restore" not in [h.operation for h in kstore.history(url, UUID)]
    every_listed_version_has_its_files(url)


@pytest.mark.parametrize("other", ["append", "delete_rows", "compact"])
def test_a_concurrent_change_of_the_files_is_a_conflict(url, other):
    kstore.store_dataset(url, UUID, frame([1, 2, 3]), partition_on="p", secondary_indices=["x"])
    kstore.update_dataset(url, UUID, frame([4, 5], "b"))
    kstore.update_dataset(url, UUID, frame([6], "b"))
    fired = []

    def before(method, key):
        if method == "put_if_absent" and "/_kstore/log/" in key and not fired:
            fired.append(key)
            if other == "append":
                kstore.update_dataset(url, UUID, frame([7], "c"))
            elif other == "delete_rows":
                kstore.delete_rows(url, UUID, [[("id", "==", 4)]])
            else:
                kstore.compact(url, UUID)

    expected_after = None
    with pytest.raises(CommitConflictError, match="this (write|restore) read"):
        try:
            kstore.restore(HookStore(url, before=before), UUID, 0)
        finally:
            expected_after = read(url)
    assert fired
    assert "restore" not in [h.operation for h in kstore.history(url, UUID)]
    assert same(read(url), expected_after)


# ---------------------------------------------------------------------------------------
# a store call failing at every point of the restore
# ---------------------------------------------------------------------------------------


def test_a_failing_store_call_at_any_point_leaves_old_or_restored_state(tmp_path):
    base = str(tmp_path / "base")
    seen = three_versions(base)
    scratch = str(tmp_path / "scratch")
    shutil.copytree(base, scratch)
    recorder = HookStore(scratch)
    kstore.restore(recorder, UUID, 0)
    n_calls = len(recorder.calls)
    assert n_calls >= 6
    for n in range(n_calls):
        url = str(tmp_path / f"run{n}")
        shutil.copytree(base, url)
        count, failed = [0], []

        def before(method, key, n=n, count=count, failed=failed):
            count[0] += 1
            if count[0] == n + 1:
                failed.append(method)
                raise StoreError(f"injected failure of {method} {key}")

        committed = True
        try:
            kstore.restore(HookStore(url, before=before), UUID, 0)
        except KstoreError:
            committed = "restore" in [h.operation for h in kstore.history(url, UUID)]
        now = read(url)
        assert same(now, seen[0] if committed else seen[2]), f"call {n} ({recorder.calls[n]})"
        every_listed_version_has_its_files(url)
        if not committed:
            kstore.restore(url, UUID, 0)
            assert same(read(url), seen[0])
        for v in range(3):
            assert same(read(url, v), seen[v])
        # nothing half-written: each index file is referenced by a version (or was the
        # failed call's own cleanup)
        st_ = kstore.open_store(url)
        referenced = set()
        for v in load.log_versions(st_, UUID):
            if load.load_entry(st_, UUID, v).has_dataset:
                referenced |= load.load_version(st_, UUID, v).referenced_keys()
        stray = set(st_.iter_prefix(f"{UUID}/indices/")) - referenced
        assert not stray or failed == ["delete"], f"call {n} ({failed}) left {stray}"
