"""Typed operations on a :class:`kstore.Snapshot`: one commit each, built on that version.

What is tried here, against a row model (every row has a unique ``x``):

- each operation on the newest snapshot equals the eager verb on a twin dataset;
- from a stale snapshot, operations commute with later versions outside their scope and
  fail with ``CommitConflictError`` (committing nothing, leaving no file) inside it;
- ``CommitOptions``: idempotent ``txn`` (also from a stale snapshot), ``info`` in history,
  ``metadata`` merged, ``max_attempts`` against a writer that keeps winning, bad options
  refused before any store call;
- a failing store call at every position of every operation: the operation commits
  exactly its result or nothing, every retained version still reads, and whatever a failed
  attempt left behind is unreferenced and removed by garbage collection;
- an append prepared before an index was dropped does not bring the index back.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pandas as pd
import pytest

import kstore
from kstore.blocks import load
from kstore.blocks.job import WriteRequest, finish_write, prepare_write, write_files
from kstore.errors import (
    CommitConflictError,
    CommitStateUnknownError,
    InvalidArgumentError,
    KstoreError,
    StoreError,
)
from tests.conftest import drop_store
from tests.drivers._stores import HookStore

UUID = "tc"
ZERO = {"retention": timedelta(0), "enforce_retention_duration": False}


def frame(ids, p: int | None = None) -> pd.DataFrame:
    ids = list(ids)
    return pd.DataFrame({"p": [i % 3 if p is None else p for i in ids], "loc": [i % 7 for i in ids], "x": ids})


def model(ids, p: int | None = None) -> dict[int, tuple[int, int]]:
    """x -> (p, loc) of the rows ``frame(ids, p)`` holds."""
    return {x: ((x % 3) if p is None else p, x % 7) for x in ids}


def rows(source) -> dict[int, tuple[int, int]]:
    """The rows a snapshot (or a URL's newest version) reads, as x -> (p, loc)."""
    df = source.read() if isinstance(source, kstore.Snapshot) else kstore.read_dataset(source, UUID)
    assert df["x"].is_unique, "a row was read twice"
    return {int(x): (int(p), int(loc)) for x, p, loc in zip(df["x"], df["p"], df["loc"])}


def keys(url) -> set[str]:
    return set(kstore.open_store(url).iter_prefix(""))


def newest(url) -> int:
    return kstore.open_dataset(url, UUID).version


def every_retained_version_reads(url) -> None:
    st = kstore.open_store(url)
    for v in load.log_versions(st, UUID):
        entry = load.load_entry(st, UUID, v)
        if entry.has_dataset:
            for key in load.entry_metadata(st, UUID, entry).referenced_keys():
                assert st.exists(key), f"version {v} references {key}, which is gone"


@pytest.fixture
def url(store_url):
    kstore.store_dataset(store_url, UUID, frame(range(30)), partition_on=["p"], secondary_indices=["loc"])
    kstore.update_dataset(store_url, UUID, frame(range(30, 45)))  # two files per partition
    return store_url


BASE = model(range(45))


# -- 1. each operation on the newest snapshot equals the eager verb ------------------------------

def _drop_p(rows_: dict, p: int) -> dict:
    return {x: v for x, v in rows_.items() if v[0] != p}


OPERATIONS: dict[str, tuple[Callable, Callable, Callable[[dict], dict]]] = {
    # name: (snapshot op, eager verb on (url, uuid), expected rows from the base rows)
    "append": (lambda s: s.append(frame(range(100, 106))),
               lambda u, d: kstore.update_dataset(u, d, frame(range(100, 106))),
               lambda r: {**r, **model(range(100, 106))}),
    "overwrite_partitions": (lambda s: s.overwrite_partitions(frame(range(200, 204), p=1)),
                             lambda u, d: kstore.update_dataset(u, d, frame(range(200, 204), p=1),
                                                                mode="overwrite_partitions"),
                             lambda r: {**_drop_p(r, 1), **model(range(200, 204), p=1)}),
    "delete_partitions": (lambda s: s.delete_partitions([{"p": 0}]),
                          lambda u, d: kstore.update_dataset(u, d, delete_scope=[{"p": 0}]),
                          lambda r: _drop_p(r, 0)),
    "delete_rows": (lambda s: s.delete_rows([[("loc", "==", 3)], [("x", ">=", 40)]]),
                    lambda u, d: kstore.delete_rows(u, d, [[("loc", "==", 3)], [("x", ">=", 40)]]),
                    lambda r: {x: v for x, v in r.items() if not (v[1] == 3 or x >= 40)}),
    "build_indices": (lambda s: s.build_indices("x"), lambda u, d: kstore.build_indices(u, d, "x"), dict),
    "drop_indices": (lambda s: s.drop_indices("loc"), lambda u, d: kstore.drop_indices(u, d, "loc"), dict),
    "compact": (lambda s: s.compact(), lambda u, d: kstore.compact(u, d), dict),
}


@pytest.mark.parametrize("store_url", ["file", "memory"], indirect=True)
@pytest.mark.parametrize("name", list(OPERATIONS))
def test_each_operation_equals_the_eager_verb(url, name):
    op, verb, expect = OPERATIONS[name]
    _fault_dataset(url, "twin")  # the same two commits
    snap = kstore.open_dataset(url, UUID)
    before = rows(snap)
    new = op(snap)
    verb(url, "twin")
    twin = kstore.open_dataset(url, "twin")
    assert new.version == snap.version + 1 == newest(url)
    assert rows(new) == expect(BASE) == rows(twin) == rows(url)
    assert new.index_columns == twin.index_columns
    assert new.history()[-1].operation == twin.history()[-1].operation
    for preds in ([[("loc", "==", 5)]], [[("x", "==", 7)]], [[("p", "==", 2), ("x", "<", 20)]]):
        assert len(new.plan(predicates=preds).tasks) == len(twin.plan(predicates=preds).tasks), preds
        got = {int(x) for x in new.read(predicates=preds)["x"]}
        assert got == {x for x in expect(BASE) if _holds(preds, x)}, preds
    assert rows(snap) == before == BASE  # the snapshot is a value: it still reads its version


def _holds(preds, x: int) -> bool:
    value = {"x": x, "p": x % 3 if x < 100 else (1 if 200 <= x < 204 else x % 3), "loc": x % 7}
    ops = {"==": lambda a, b: a == b, "<": lambda a, b: a < b, ">=": lambda a, b: a >= b}
    return any(all(ops[o](value[c], v) for c, o, v in conj) for conj in preds)


# -- 2. from a stale snapshot: commute outside the scope, conflict inside ------------------------

COMMUTING = {
    # name: (snapshot op, expected rows from the rows after the concurrent append to p=2)
    "append": (lambda s: s.append(frame(range(100, 103), p=1)), lambda r: {**r, **model(range(100, 103), p=1)}),
    "overwrite_partitions": (lambda s: s.overwrite_partitions(frame(range(200, 204), p=1)),
                             lambda r: {**_drop_p(r, 1), **model(range(200, 204), p=1)}),
    "delete_partitions": (lambda s: s.delete_partitions([{"p": 0}]), lambda r: _drop_p(r, 0)),
    "delete_rows": (lambda s: s.delete_rows([[("p", "==", 1), ("x", "<", 10)]]),
                    lambda r: {x: v for x, v in r.items() if not (v[0] == 1 and x < 10)}),
    "build_indices": (lambda s: s.build_indices("x"), dict),
    "drop_indices": (lambda s: s.drop_indices("loc"), dict),
    "compact": (lambda s: s.compact(partitions=[{"p": 1}]), dict),
}


@pytest.mark.parametrize("store_url", ["file", "memory"], indirect=True)
@pytest.mark.parametrize("name", list(COMMUTING))
def test_a_stale_snapshot_commutes_with_an_append_outside_its_scope(url, name):
    op, expect = COMMUTING[name]
    snap = kstore.open_dataset(url, UUID)
    kstore.update_dataset(url, UUID, frame(range(300, 306), p=2))  # committed after the snapshot
    new = op(snap)
    want = expect({**BASE, **model(range(300, 306), p=2)})
    assert new.version == snap.version + 2 == newest(url)
    assert rows(new) == rows(url) == want  # the concurrent append survived
    assert rows(snap) == BASE
    # the appended files are planned and indexed like any other
    hit = new.read(predicates=[[("x", "==", 303)]])
    assert hit["x"].tolist() == [303]
    if name == "build_indices":
        plan = new.plan(predicates=[[("x", "==", 303)]])
        assert len(plan.tasks) == 1 and "x" in new.index_columns
    every_retained_version_reads(url)


CONFLICTS = {
    # name: (what a later version does, the stale snapshot's operation)
    "overwrite after an append into the partition": (
        lambda u: kstore.update_dataset(u, UUID, frame([500], p=1)),
        lambda s: s.overwrite_partitions(frame(range(200, 204), p=1))),
    "overwrite after the partition was deleted": (
        lambda u: kstore.update_dataset(u, UUID, delete_scope=[{"p": 1}]),
        lambda s: s.overwrite_partitions(frame(range(200, 204), p=1))),
    "delete_partitions after an append into it": (
        lambda u: kstore.update_dataset(u, UUID, frame([500], p=0)),
        lambda s: s.delete_partitions([{"p": 0}])),
    "delete_rows after an append the predicate matches": (
        lambda u: kstore.update_dataset(u, UUID, frame([501], p=1)),
        lambda s: s.delete_rows([[("p", "==", 1)]])),
    "delete_rows after its file was rewritten": (
        lambda u: kstore.delete_rows(u, UUID, [[("x", "==", 4)]]),
        lambda s: s.delete_rows([[("x", "==", 1)]])),
    "compact after one of its files was rewritten": (
        lambda u: kstore.delete_rows(u, UUID, [[("x", "==", 4)]]),
        lambda s: s.compact(partitions=[{"p": 1}])),
    "delete_rows after a compaction": (
        lambda u: kstore.compact(u, UUID),
        lambda s: s.delete_rows([[("x", "==", 1)]])),
}


@pytest.mark.parametrize("store_url", ["file", "memory"], indirect=True)
@pytest.mark.parametrize("name", list(CONFLICTS))
def test_a_stale_snapshot_conflicts_inside_its_scope_and_commits_nothing(url, name):
    later, op = CONFLICTS[name]
    snap = kstore.open_dataset(url, UUID)
    later(url)
    version, want, stored = newest(url), rows(url), keys(url)
    with pytest.raises(CommitConflictError) as err:
        op(snap)
    assert repr(UUID) in str(err.value)
    assert newest(url) == version and rows(url) == want  # nothing committed
    assert keys(url) == stored  # no file of the failed operation is left behind
    assert rows(snap) == BASE
    # the same operation on a fresh snapshot goes through
    fresh = op(kstore.open_dataset(url, UUID))
    assert fresh.version == version + 1


def test_an_append_prepared_before_an_index_was_dropped_does_not_bring_it_back(store_url):
    kstore.store_dataset(store_url, UUID, frame(range(30)), partition_on=["p"], secondary_indices=["loc"])
    st = kstore.open_store(store_url)
    job = prepare_write(st, UUID, WriteRequest.of(UUID, "append"))  # sees the index on loc
    assert "loc" in job.index_columns
    files, schema = write_files(job, frame(range(30, 40)))
    kstore.drop_indices(store_url, UUID, "loc")
    meta = finish_write(job, files, schema)
    assert meta.version == 2 and "loc" not in meta.indices and "loc" not in kstore.open_dataset(store_url, UUID).index_columns
    assert rows(store_url) == model(range(40))
    # an index asked for by the append itself is built over every file
    job = prepare_write(st, UUID, WriteRequest.of(UUID, "append", secondary_indices=["x"]))
    meta = finish_write(job, *write_files(job, frame(range(40, 45))))
    snap = kstore.open_dataset(store_url, UUID)
    assert snap.index_columns == ("x",) and len(snap.plan(predicates=[[("x", "==", 12)]]).tasks) == 1


# -- 3. CommitOptions -------------------------------------------------------------------------------

@pytest.mark.parametrize("store_url", ["memory"], indirect=True)
def test_txn_makes_every_operation_idempotent_even_from_a_stale_snapshot(url):
    snap = kstore.open_dataset(url, UUID)
    opts = kstore.CommitOptions(txn=("nightly", 1))
    first = snap.append(frame(range(100, 103)), options=opts)
    stored = keys(url)
    again = snap.append(frame(range(100, 103)), options=opts)  # the job re-runs from its old snapshot
    assert again.version == first.version == newest(url)
    assert rows(url) == {**BASE, **model(range(100, 103))}  # no row twice
    assert keys(url) == stored  # the re-run's files were removed
    # an older txn version, and each other operation, are no-ops too once committed
    assert snap.delete_rows([[("x", "==", 1)]], options={"txn": ("nightly", 0)}).version == first.version
    assert first.build_indices("x", options={"txn": ("nightly", 1)}).version == first.version
    assert newest(url) == first.version and keys(url) == stored
    second = first.delete_rows([[("x", "==", 1)]], options={"txn": ("nightly", 2)})
    assert second.version == first.version + 1 and 1 not in rows(url)


@pytest.mark.parametrize("store_url", ["memory"], indirect=True)
def test_info_and_metadata_are_recorded(url):
    snap = kstore.open_dataset(url, UUID)
    new = snap.overwrite_partitions(frame([200], p=1), options={"info": {"job": "etl", "run": 7},
                                                               "metadata": {"owner": "team-a"}})
    last = kstore.history(url, UUID)[-1]
    assert last.version == new.version and last.info == {"job": "etl", "run": 7}
    assert new.metadata.metadata["owner"] == "team-a"
    assert kstore.load_metadata(url, UUID).metadata["owner"] == "team-a"
    comp = new.compact(options={"info": {"why": "nightly"}})
    info = kstore.history(url, UUID)[-1].info
    assert info["why"] == "nightly" and info["files_in"] >= 2 and comp.version == new.version + 1


class Racer(HookStore):
    """Before each of the first ``n`` claims of a log entry, another writer commits first."""

    def __init__(self, inner, n: int) -> None:
        super().__init__(inner, before=self._race)
        self.left = n

    def _race(self, method, key):
        if method == "put_if_absent" and "/log/" in key and key.endswith(".json") and self.left > 0:
            self.left -= 1
            kstore.update_dataset(self.inner, UUID, frame([1000 + self.left], p=2))


@pytest.mark.parametrize("store_url", ["memory"], indirect=True)
@pytest.mark.parametrize(("races", "attempts", "wins"), [(1, 1, False), (1, 2, True), (3, 3, False), (3, 4, True)])
def test_max_attempts_bounds_the_retries(url, races, attempts, wins):
    snap = kstore.open_dataset(Racer(url, races), UUID)
    act = lambda: snap.append(frame([900], p=0), options={"max_attempts": attempts})  # noqa: E731
    if wins:
        assert act().version == newest(url) == snap.version + races + 1
        assert 900 in rows(url)
    else:
        with pytest.raises(CommitConflictError, match=f"after {attempts} attempts"):
            act()
        assert 900 not in rows(url) and newest(url) == snap.version + races


@pytest.mark.parametrize("store_url", ["memory"], indirect=True)
@pytest.mark.parametrize("options", [
    {"retries": 3}, {"txn": ["a", 1]}, {"txn": ("a", -1)}, {"txn": ("a", True)}, {"max_attempts": 0},
    {"max_attempts": 2.5}, {"info": "x"}, {"info": {1: "x"}}, {"info": {"big": "x" * 20_000}},
    {"metadata": {"s": {1, 2}}}, "txn",
])
def test_bad_options_are_refused_before_any_store_call(url, options):
    calls: list = []
    snap = kstore.open_dataset(HookStore(url, before=lambda m, k: calls.append(m)), UUID)
    calls.clear()
    for op in (lambda: snap.append(frame([1]), options=options), lambda: snap.drop_indices("loc", options=options),
               lambda: snap.compact(options=options)):
        with pytest.raises(InvalidArgumentError):
            op()
    assert calls == []


# -- 4. a failing store call at every position --------------------------------------------------

FAULT_OPS = {
    "append": (lambda s: s.append(frame(range(100, 104))), lambda r: {**r, **model(range(100, 104))}),
    "overwrite_partitions": (lambda s: s.overwrite_partitions(frame(range(200, 203), p=1)),
                             lambda r: {**_drop_p(r, 1), **model(range(200, 203), p=1)}),
    "delete_rows": (lambda s: s.delete_rows([[("loc", "==", 2)]]),
                    lambda r: {x: v for x, v in r.items() if v[1] != 2}),
    "build_indices": (lambda s: s.build_indices("x"), dict),
    "drop_indices": (lambda s: s.drop_indices("loc"), dict),
    "compact": (lambda s: s.compact(), dict),
}


class Fault(HookStore):
    """Store call number ``at`` fails: before it takes effect, or after (a lost reply)."""

    def __init__(self, inner, at: int, after: bool) -> None:
        super().__init__(inner)
        self.at, self.fail_after, self.n = at, after, 0

    def _call(self, method, key, *args):
        self.n += 1
        if self.n == self.at and not self.fail_after:
            raise StoreError(f"injected failure of {method} {key}")
        result = super()._call(method, key, *args)
        if self.n == self.at:
            raise StoreError(f"injected lost reply of {method} {key}")
        return result


def _fault_dataset(url: str, uuid: str = UUID) -> None:
    kstore.store_dataset(url, uuid, frame(range(30)), partition_on=["p"], secondary_indices=["loc"])
    kstore.update_dataset(url, uuid, frame(range(30, 45)))


@pytest.mark.parametrize("after", [False, True], ids=["fails", "reply-lost"])
@pytest.mark.parametrize("name", list(FAULT_OPS))
def test_a_failing_store_call_anywhere_commits_all_or_nothing(tmp_path, name, after):
    op, expect = FAULT_OPS[name]
    probe = f"memory://faults-probe-{name}-{after}"
    _fault_dataset(probe)
    counter = Fault(probe, at=0, after=False)
    op(kstore.open_dataset(counter, UUID))
    total = counter.n
    assert total > 3
    outcomes = {"committed": 0, "nothing": 0}
    for at in range(1, total + 1):
        url = f"memory://faults-{name}-{after}-{at}"
        _fault_dataset(url)
        stored, base = keys(url), newest(url)
        faulty = Fault(url, at=at, after=after)
        try:
            snap = kstore.open_dataset(faulty, UUID)
        except KstoreError:
            continue  # the fault hit opening the snapshot: no operation ran
        try:
            result = op(snap)
        except CommitStateUnknownError:
            result = None  # committed or not: the store says which
        except KstoreError as exc:
            assert not isinstance(exc, CommitConflictError), exc
            result = None
        v = newest(url)
        if v == base:
            outcomes["nothing"] += 1
            assert result is None, f"call {at}: the operation returned but nothing was committed"
            assert rows(url) == BASE
        else:
            outcomes["committed"] += 1
            assert v == base + 1 and rows(url) == expect(BASE), f"call {at}"
            if result is not None:
                assert result.version == v and rows(result) == expect(BASE)
        every_retained_version_reads(url)
        leftover = keys(url) - stored
        if v == base:
            if not after:
                assert leftover == set(), f"call {at}: a failed operation left {sorted(leftover)}"
            kstore.garbage_collect(url, UUID, **ZERO)
            assert keys(url) - stored <= {k for k in keys(url) if "/log/" in k}, (
                f"call {at}: garbage collection left files of the failed operation")
            assert rows(url) == BASE
        assert rows(kstore.open_dataset(url, UUID, version=base)) == BASE
        drop_store(url)
    drop_store(probe)
    assert outcomes["committed"] and outcomes["nothing"], outcomes
