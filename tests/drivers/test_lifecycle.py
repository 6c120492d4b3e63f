"""Lifecycle behaviour on real stores: time travel, history, diff, GC retention, txn
idempotence, delete / copy / upgrade of datasets, row deletes; plateau 4.6 interop.

Local-directory stores unless a test says otherwise (``store_url`` = local dir and memory).
"""

from __future__ import annotations

import os
import time
import warnings
from datetime import timedelta, timezone
from pathlib import Path

import minimalkv
import pandas as pd
import pytest

import kstore
from kstore.blocks import load
from kstore.blocks.gc import collect_garbage
from kstore.core import naming, runtime
from kstore.errors import (
    DatasetNotFoundError,
    InvalidArgumentError,
    VersionNotFoundError,
)
from tests.drivers._stores import HookStore

UUID = "ds"

# ---------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------


def local_url(tmp_path: Path, name: str = "store") -> str:
    root = tmp_path / name
    root.mkdir(parents=True, exist_ok=True)
    return "file://" + str(root)


def frame(p: list[str], ids: list[int]) -> pd.DataFrame:
    return pd.DataFrame({"p": p, "id": ids, "x": [i % 5 for i in ids], "v": [i * 1.5 for i in ids],
                         "s": [f"s{i % 3}" for i in ids]})


def ids_of(url, uuid=UUID, **kw) -> list[int]:
    return sorted(kstore.read_dataset(url, uuid, columns=["id"], **kw)["id"].tolist())


def keys_of(url, uuid=UUID) -> set[str]:
    st = kstore.open_store(url)
    keys = set(st.iter_prefix(uuid + "/"))
    keys |= {k for k in (naming.metadata_key(uuid, f) for f in naming.METADATA_FORMATS) if st.exists(k)}
    return keys


def p_of(label: str) -> str:
    return naming.parse_label(label, ["p"])[0][0]


def by_id(df: pd.DataFrame) -> pd.DataFrame:
    return df.sort_values("id", kind="stable").reset_index(drop=True)


#: records every call; ``before(method, key)`` may interfere
RecordingStore = HookStore


def build_versions(url: str) -> dict[int, set[int]]:
    """v0 create (p=a, b), v1 append (c), v2 delete_scope (a), v3 overwrite_partitions (b),
    v4 build_indices (s), v5 delete_rows (id 12). Returns the row ids of every version."""
    kstore.store_dataset(url, UUID, frame(["a", "b", "a", "b"], [0, 1, 2, 3]), partition_on="p",
                         secondary_indices=["x"])
    time.sleep(0.005)
    kstore.update_dataset(url, UUID, frame(["c", "c"], [10, 11]))
    time.sleep(0.005)
    kstore.update_dataset(url, UUID, delete_scope=[{"p": "a"}])
    time.sleep(0.005)
    kstore.update_dataset(url, UUID, frame(["b", "b"], [12, 13]), mode="overwrite_partitions")
    time.sleep(0.005)
    kstore.build_indices(url, UUID, ["s"])
    time.sleep(0.005)
    kstore.delete_rows(url, UUID, [[("id", "==", 12)]])
    return {0: {0, 1, 2, 3}, 1: {0, 1, 2, 3, 10, 11}, 2: {1, 3, 10, 11}, 3: {10, 11, 12, 13},
            4: {10, 11, 12, 13}, 5: {10, 11, 13}}


# ---------------------------------------------------------------------------------------
# time travel, history, diff
# ---------------------------------------------------------------------------------------


def test_time_travel_by_version_and_as_of(store_url):
    model = build_versions(store_url)
    hist = kstore.history(store_url, UUID)
    assert [e.version for e in hist] == sorted(model)
    for v, ids in model.items():
        assert set(ids_of(store_url, version=v)) == ids
        assert kstore.load_metadata(store_url, UUID, version=v).version == v
        # indices of that version plan that version's read
        got = kstore.read_dataset(store_url, UUID, predicates=[[("x", "==", 1)]], version=v)
        assert set(got["id"]) == {i for i in ids if i % 5 == 1}
    assert set(ids_of(store_url)) == model[max(model)]
    for a, b in zip(hist, hist[1:]):
        assert a.timestamp < b.timestamp
        mid = a.timestamp + (b.timestamp - a.timestamp) / 2
        assert set(ids_of(store_url, as_of=mid)) == model[a.version]
        assert set(ids_of(store_url, as_of=a.timestamp)) == model[a.version]  # inclusive
        naive = mid.astimezone(timezone.utc).replace(tzinfo=None)  # naive = UTC
        assert set(ids_of(store_url, as_of=naive)) == model[a.version]
    assert set(ids_of(store_url, as_of=hist[-1].timestamp + timedelta(days=1))) == model[max(model)]
    with pytest.raises(VersionNotFoundError):
        kstore.read_dataset(store_url, UUID, as_of=hist[0].timestamp - timedelta(microseconds=1))
    with pytest.raises(VersionNotFoundError):
        kstore.read_dataset(store_url, UUID, version=max(model) + 1)
    with pytest.raises(InvalidArgumentError):
        kstore.read_dataset(store_url, UUID, version=0, as_of=hist[0].timestamp)


def test_history_fields(store_url):
    model = build_versions(store_url)
    kstore.update_dataset(store_url, UUID, frame(["d"], [20]), txn=("etl", 7))
    model[6] = model[5] | {20}
    hist = kstore.history(store_url, UUID)
    assert [e.operation for e in hist] == [
        "create", "append", "delete_scope", "overwrite_partitions", "build_indices", "delete_rows", "append"]
    st = kstore.open_store(store_url)
    metas = {e.version: load.load_version(st, UUID, e.version) for e in hist}
    for e in hist:
        assert e.parent == (e.version - 1 if e.version else None)
        assert e.timestamp.tzinfo is not None
        assert e.writer.startswith("kstore ")
        assert e.n_files == len(metas[e.version].partitions)
        prev = set(metas[e.version - 1].partitions) if e.version else set()
        now = set(metas[e.version].partitions)
        assert set(e.added) == now - prev, e
        assert set(e.removed) == prev - now, e
    assert [e.rows_added for e in hist] == [4, 2, 0, 2, 0, 1, 1]  # delete_rows rewrote id 13's file
    assert [e.txn for e in hist] == [None] * 6 + [("etl", 7)]
    assert {p_of(lab) for lab in hist[2].removed} == {"a"}
    assert {p_of(lab) for lab in hist[3].removed} == {"b"} and {p_of(lab) for lab in hist[3].added} == {"b"}
    assert hist[4].added == () and hist[4].removed == ()
    assert metas[4].indices.keys() == {"x", "s"}


def test_diff_between_versions(store_url):
    build_versions(store_url)
    st = kstore.open_store(store_url)
    parts = {v: set(load.load_version(st, UUID, v).partitions) for v in range(6)}
    for a in range(6):
        for b in range(6):
            d = kstore.diff(store_url, UUID, a, b)
            assert (d.from_version, d.to_version) == (a, b)
            assert set(d.added) == parts[b] - parts[a] and set(d.removed) == parts[a] - parts[b]
            assert list(d.added) == sorted(d.added)
    d = kstore.diff(store_url, UUID, 0, 1)
    assert {p_of(lab) for lab in d.added} == {"c"} and d.removed == ()
    # incremental processing: reading the added partitions of 0 -> 1 yields exactly the new rows
    added_rows = kstore.read_dataset(store_url, UUID, version=1, predicates=[[("p", "==", "c")]])
    assert sorted(added_rows["id"]) == [10, 11]
    with pytest.raises(VersionNotFoundError):
        kstore.diff(store_url, UUID, 0, 99)


# ---------------------------------------------------------------------------------------
# garbage collection with retention
# ---------------------------------------------------------------------------------------


def referenced(url: str, versions) -> set[str]:
    st = kstore.open_store(url)
    out: set[str] = set()
    for v in versions:
        out |= load.load_version(st, UUID, v).referenced_keys()
    return out


def test_gc_retention_default_keeps_old_versions_and_young_orphans(tmp_path):
    url = local_url(tmp_path)
    model = build_versions(url)
    st = kstore.open_store(url)
    old_orphan = f"{UUID}/table/p=a/{naming.new_file_id(now=time.time() - 30 * 86400)}.parquet"
    anon_orphan = f"{UUID}/table/p=a/0123456789abcdef0123456789abcdef.parquet"  # kartothek-style id: no time
    young_orphan = f"{UUID}/table/p=a/{naming.new_file_id()}.parquet"  # may be a write in progress
    for k in (old_orphan, anon_orphan, young_orphan):
        st.put(k, b"not parquet")
    before = keys_of(url)
    gc = kstore.garbage_collect(url, UUID)  # 7 days
    assert set(gc.deleted_files) == {old_orphan, anon_orphan}
    fence = max(model) + 1  # committed before any file is deleted; changes no data
    assert gc.fence_version == fence
    assert gc.expired_versions == () and gc.retained_versions == (*sorted(model), fence)
    assert keys_of(url) == before - {old_orphan, anon_orphan} | {naming.log_key(UUID, fence)}
    model[fence] = model[fence - 1]
    for v, ids in model.items():
        assert set(ids_of(url, version=v)) == ids
    assert kstore.history(url, UUID)[-1].operation == "vacuum"


def test_gc_dry_run_reports_and_deletes_nothing(tmp_path):
    url = local_url(tmp_path)
    model = build_versions(url)
    before = keys_of(url)
    gc = kstore.garbage_collect(url, UUID, retention=timedelta(0), dry_run=True, enforce_retention_duration=False)
    assert gc.dry_run
    newest = max(model)
    assert gc.retained_versions == (newest,) and gc.expired_versions == tuple(range(newest))
    only_old = referenced(url, range(newest)) - referenced(url, [newest])
    assert only_old and set(gc.deleted_files) == only_old  # files only expired versions reference
    assert keys_of(url) == before
    for v, ids in model.items():
        assert set(ids_of(url, version=v)) == ids


def test_gc_retention_zero_expires_old_versions(tmp_path):
    url = local_url(tmp_path)
    model = build_versions(url)
    newest = max(model)
    keep = referenced(url, [newest])
    gc = kstore.garbage_collect(url, UUID, retention=timedelta(0), enforce_retention_duration=False)
    assert not gc.dry_run and gc.expired_versions == tuple(range(newest))
    fence = newest + 1
    # expired versions younger than an hour keep a tombstone: their numbers stay taken
    cps = {k for k in keys_of(url) if naming.version_from_checkpoint_key(UUID, k) is not None
           or naming.version_from_summary_key(UUID, k) is not None}
    assert {naming.version_from_checkpoint_key(UUID, k) for k in cps} - {None} <= {newest, fence}  # GC's replay base
    assert len({k for k in cps if naming.version_from_summary_key(UUID, k) is not None}) <= 1  # the newest only
    markers = {naming.expired_key(UUID, v) for v in range(newest)}  # history() lists them, reads none
    assert keys_of(url) - cps == keep | markers | {naming.log_key(UUID, v) for v in range(fence + 1)} | {
        naming.metadata_key(UUID), naming.common_metadata_key(UUID), naming.last_checkpoint_key(UUID)}
    shown = kstore.history(url, UUID)  # the expired versions stay listed for the log retention (#33)
    assert [e.version for e in shown if not e.expired] == [newest, fence]
    assert [e.version for e in shown if e.expired] == list(range(newest))
    for v in range(newest):
        with pytest.raises(VersionNotFoundError):
            kstore.read_dataset(url, UUID, version=v)
    assert set(ids_of(url)) == model[newest] and set(ids_of(url, version=newest)) == model[newest]
    assert set(kstore.read_dataset(url, UUID, predicates=[[("s", "==", "s1")]])["id"]) == {10, 13}
    # the next commit still follows the log
    assert kstore.update_dataset(url, UUID, frame(["e"], [30])).version == fence + 1


def test_gc_window_keeps_the_version_current_at_the_window_start(tmp_path):
    """retention window starting between v1 and v2: v0 expires, v1 (current at the start of
    the window) and newer stay readable, also by ``as_of`` at the window start."""
    url = local_url(tmp_path)
    model = build_versions(url)
    hist = kstore.history(url, UUID)
    cutoff = hist[1].timestamp + (hist[2].timestamp - hist[1].timestamp) / 2
    retention = timedelta(hours=1)
    with runtime.installed(runtime.FixedRuntime((cutoff + retention).timestamp())):
        gc = collect_garbage(kstore.open_store(url), UUID, retention=retention)
    fence = max(model) + 1
    assert gc.expired_versions == (0,) and gc.retained_versions == tuple(range(1, fence + 1))
    for v in range(1, max(model) + 1):
        assert set(ids_of(url, version=v)) == model[v]
    assert set(ids_of(url, as_of=cutoff)) == model[1]
    with pytest.raises(VersionNotFoundError):
        kstore.read_dataset(url, UUID, version=0)


def test_gc_during_a_write_keeps_the_writers_new_files(tmp_path):
    """GC (default retention) runs while a writer is between writing its files and claiming
    its version: none of the writer's fresh files (data, index, statistics) may be deleted."""
    url = local_url(tmp_path)
    build_versions(url)
    ran = []

    def gc_before_claim(method, key):
        if method == "put_if_absent" and "/_kstore/log/" in key and not ran:
            ran.append(kstore.garbage_collect(url, UUID))

    w = RecordingStore(url, before=gc_before_claim)
    meta = kstore.update_dataset(w, UUID, frame(["f", "f"], [40, 41]))
    assert ran and not (set(ran[0].deleted_files) & meta.referenced_keys()), ran[0].deleted_files
    assert all(kstore.open_store(url).exists(k) for k in meta.referenced_keys())
    assert set(kstore.read_dataset(url, UUID, predicates=[[("x", "==", 0)]])["id"]) == {10, 40}
    assert set(kstore.read_dataset(url, UUID, predicates=[[("s", "==", "s2")]])["id"]) == {11, 41}


# ---------------------------------------------------------------------------------------
# txn idempotence
# ---------------------------------------------------------------------------------------


def test_txn_idempotence(store_url):
    kstore.store_dataset(store_url, UUID, frame(["a"], [0]), partition_on="p", txn=("app", 0))
    m1 = kstore.update_dataset(store_url, UUID, frame(["b"], [1]), txn=("app", 1))
    m2 = kstore.update_dataset(store_url, UUID, frame(["b"], [1]), txn=("app", 1))  # re-submitted
    assert m1.version == m2.version == 1 and m2 == m1
    m3 = kstore.update_dataset(store_url, UUID, frame(["c"], [2]), txn=("app", 0))  # older: also done
    assert m3.version == 1
    m4 = kstore.update_dataset(store_url, UUID, frame(["c"], [3]), txn=("other", 1))  # another app
    m5 = kstore.update_dataset(store_url, UUID, frame(["d"], [4]), txn=("app", 2))
    assert (m4.version, m5.version) == (2, 3)
    assert ids_of(store_url) == [0, 1, 3, 4]
    hist = kstore.history(store_url, UUID)
    assert [e.txn for e in hist] == [("app", 0), ("app", 1), ("other", 1), ("app", 2)]
    assert dict(kstore.load_metadata(store_url, UUID).txns) == {"app": 2, "other": 1}
    # the re-submitted writes' data files are not referenced; GC removes them
    data = {k for k in keys_of(store_url) if k.startswith(f"{UUID}/table/") and k.endswith(".parquet")}
    unreferenced = data - kstore.load_metadata(store_url, UUID).referenced_keys()
    kstore.garbage_collect(store_url, UUID, retention=timedelta(0), enforce_retention_duration=False)
    assert not (unreferenced & keys_of(store_url))


def test_txn_idempotence_when_a_concurrent_writer_commits_the_same_txn(tmp_path):
    """Writer A loses its claim to writer B committing the same (app_id, version): A's retry
    sees the txn committed and returns that version instead of committing twice."""
    url = local_url(tmp_path)
    kstore.store_dataset(url, UUID, frame(["a"], [0]), partition_on="p")

    def b_first(method, key):
        if method == "put_if_absent" and key == naming.log_key(UUID, 1):
            kstore.update_dataset(url, UUID, frame(["b"], [1]), txn=("job", 5))

    meta = kstore.update_dataset(RecordingStore(url, before=b_first), UUID, frame(["b"], [1]), txn=("job", 5))
    assert meta.version == 1
    assert [e.version for e in kstore.history(url, UUID)] == [0, 1]
    assert ids_of(url) == [0, 1]
    # the loser's data files are not left behind
    assert data_files(url, UUID) == {k for fs in meta.partitions.values() for k in fs.values()}


# ---------------------------------------------------------------------------------------
# delete_dataset, copy_dataset
# ---------------------------------------------------------------------------------------


def test_delete_dataset_deletes_every_key_main_file_last(tmp_path):
    url = local_url(tmp_path)
    build_versions(url)
    kstore.store_dataset(url, "ds2", frame(["a"], [0]), partition_on="p")
    kstore.store_dataset(url, "ds.b", frame(["a"], [0]), partition_on="p")  # shares the "ds" name prefix
    kstore.open_store(url).put(f"{UUID}/table/p=zz/orphan.parquet", b"x")  # debris is deleted too
    own = keys_of(url)
    others = set(kstore.open_store(url).iter_prefix("")) - own
    rec = RecordingStore(url)
    fence = max(load.log_versions(kstore.open_store(url), UUID)) + 1
    n = kstore.delete_dataset(rec, UUID)
    # the delete version is committed first; then the main file, then every other key
    claims = [i for i, (m, k) in enumerate(rec.calls) if m == "put_if_absent"]
    assert [rec.calls[i][1] for i in claims] == [naming.log_key(UUID, fence)]
    deletes = [k for m, k in rec.calls if m == "delete"]
    assert deletes[0] == naming.metadata_key(UUID) and min(rec.calls.index(("delete", k)) for k in deletes) > claims[0]
    log = {naming.log_key(UUID, v) for v in range(fence)}
    existing = [k for k in deletes if k in own]
    assert set(existing) == own - log and len(existing) == n
    # what stays: the log (expired versions younger than an hour as tombstones, and the fence)
    st = kstore.open_store(url)
    assert set(st.iter_prefix("")) == others | log | {naming.log_key(UUID, fence)}
    assert all(load.load_entry(st, UUID, v).expired for v in range(fence))
    with pytest.raises(DatasetNotFoundError):
        kstore.read_dataset(url, UUID)
    with pytest.raises(DatasetNotFoundError):
        kstore.delete_dataset(url, UUID)
    with pytest.raises(DatasetNotFoundError):
        kstore.history(url, UUID)
    assert ids_of(url, "ds2") == [0] and ids_of(url, "ds.b") == [0]
    # created again, the dataset continues the numbering after the delete
    assert kstore.store_dataset(url, UUID, frame(["n"], [7]), partition_on="p").version == fence + 1
    assert [h.version for h in kstore.history(url, UUID)] == [fence + 1]


@pytest.mark.parametrize("target_kind", ["file", "memory"])
def test_copy_dataset_reads_identically(tmp_path, target_kind):
    src = local_url(tmp_path, "src")
    build_versions(src)
    kstore.update_dataset(src, UUID, frame(["g", "g", "h"], [50, 51, 52]))
    dst = local_url(tmp_path, "dst") if target_kind == "file" else f"memory://copy-{tmp_path.name}"
    src_keys = {k: kstore.open_store(src).get(k) for k in keys_of(src)}
    meta = kstore.copy_dataset(src, UUID, dst)
    assert meta.version == 0 and [e.operation for e in kstore.history(dst, UUID)] == ["create"]
    s_meta, d_meta = kstore.load_metadata(src, UUID), kstore.load_metadata(dst, UUID)
    assert set(d_meta.partitions) == set(s_meta.partitions)
    assert set(d_meta.indices) == set(s_meta.indices) == {"x", "s"}
    assert d_meta.files is not None and "rows" in d_meta.files.table.column_names  # statistics came along
    pd.testing.assert_frame_equal(by_id(kstore.read_dataset(dst, UUID)), by_id(kstore.read_dataset(src, UUID)))
    for preds in ([[("x", "==", 1)]], [[("s", "in", ["s0", "s2"])]], [[("v", ">", 70.0)]], [[("id", "<=", 11)]],
                  [[("p", "==", "g"), ("v", "<", 76.0)]]):
        sp, dp = kstore.plan_read(src, UUID, predicates=preds), kstore.plan_read(dst, UUID, predicates=preds)
        assert set(dp.labels) == set(sp.labels), preds
        assert [(s.kind, s.column, s.after) for s in dp.stages] == [(s.kind, s.column, s.after) for s in sp.stages]
        pd.testing.assert_frame_equal(by_id(kstore.read_dataset(dst, UUID, predicates=preds)),
                                      by_id(kstore.read_dataset(src, UUID, predicates=preds)))
    # statistics prune in the copy as in the source (v is no index column)
    plan = kstore.plan_read(dst, UUID, predicates=[[("v", ">", 70.0)]])
    assert [s.kind for s in plan.stages] == ["statistics"] and len(plan.labels) < plan.n_files
    for v in (1, 2):
        assert kstore.index_lookup(dst, UUID, "x", v) == kstore.index_lookup(src, UUID, "x", v)
    assert all(k.startswith(UUID) for k in kstore.open_store(dst).iter_prefix(""))
    assert {k: kstore.open_store(src).get(k) for k in keys_of(src)} == src_keys  # source untouched
    kstore.update_dataset(dst, UUID, frame(["i"], [60]))  # the copy is a live dataset
    assert ids_of(dst) == sorted(ids_of(src) + [60])


def test_copy_dataset_to_a_new_uuid_in_the_same_store(tmp_path):
    url = local_url(tmp_path)
    build_versions(url)
    kstore.copy_dataset(url, UUID, new_uuid="ds_copy")
    assert ids_of(url, "ds_copy") == ids_of(url)
    assert all(k.startswith("ds_copy") for k in keys_of(url, "ds_copy"))
    assert not (keys_of(url, "ds_copy") & keys_of(url))
    with pytest.raises(InvalidArgumentError):
        kstore.copy_dataset(url, UUID)


# ---------------------------------------------------------------------------------------
# plateau interop: upgrade_dataset, delete_rows
# ---------------------------------------------------------------------------------------


def plateau_store(root: Path):
    return lambda: minimalkv.get_store_from_url(f"hfs://{root}")


def plateau_write(root: Path, uuid: str, df: pd.DataFrame) -> None:
    from plateau.api.dataset import store_dataframes_as_dataset

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        store_dataframes_as_dataset(store=plateau_store(root), dataset_uuid=uuid,
                                    dfs=[df.iloc[: len(df) // 2], df.iloc[len(df) // 2:]],
                                    partition_on=["p"], secondary_indices=["x"])


def plateau_read(root: Path, uuid: str, predicates=None) -> pd.DataFrame:
    from plateau.api.dataset import read_table

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return by_id(read_table(uuid, store=plateau_store(root), predicates=predicates))


def file_state(root: Path, keys) -> dict[str, tuple]:
    out = {}
    for k in keys:
        st = os.stat(root / k)
        out[k] = (st.st_ino, st.st_mtime_ns, (root / k).read_bytes())
    return out


def data_files(url: str, uuid: str) -> set[str]:
    return {k for k in keys_of(url, uuid) if k.startswith(f"{uuid}/table/") and k.endswith(".parquet")}


PLATEAU_DF = pd.DataFrame({"p": ["a", "b", "a", "c", "b", "c", "a", "b"], "id": range(8),
                           "x": [1, 2, 1, 3, 2, 3, 4, 2], "v": [i * 0.5 for i in range(8)]})


def test_upgrade_plateau_dataset_keeps_data_files_and_plateau_reads_it(tmp_path):
    root = tmp_path / "pl"
    root.mkdir()
    url = "file://" + str(root)
    plateau_write(root, "pds", PLATEAU_DF)
    before_read = plateau_read(root, "pds")
    assert kstore.history(url, "pds") == []  # not versioned yet
    assert kstore.load_metadata(url, "pds").version is None
    files = data_files(url, "pds")
    index_keys = set(kstore.load_metadata(url, "pds").indices.values())
    state = file_state(root, files | index_keys | {"pds/table/_common_metadata"})

    meta = kstore.upgrade_dataset(url, "pds")
    assert meta.version == 0
    hist = kstore.history(url, "pds")
    assert [(e.version, e.operation) for e in hist] == [(0, "upgrade")]
    assert file_state(root, files | index_keys | {"pds/table/_common_metadata"}) == state  # nothing rewritten
    assert data_files(url, "pds") == files
    assert set(meta.partitions) == {k[len("pds/table/"):-len(".parquet")] for k in files}
    assert kstore.upgrade_dataset(url, "pds") == meta  # idempotent: no new version
    assert len(kstore.history(url, "pds")) == 1

    pd.testing.assert_frame_equal(plateau_read(root, "pds"), before_read)
    pd.testing.assert_frame_equal(plateau_read(root, "pds", [[("x", "==", 2)]]),
                                  before_read[before_read.x == 2].reset_index(drop=True))
    got = by_id(kstore.read_dataset(url, "pds"))
    assert got["id"].tolist() == before_read["id"].tolist()
    assert set(kstore.read_dataset(url, "pds", version=0, predicates=[[("x", "==", 1)]])["id"]) == {0, 2}

    # kstore writes on top; plateau reads the kstore-written version too
    kstore.update_dataset(url, "pds", pd.DataFrame({"p": ["a", "d"], "id": [100, 101], "x": [2, 9],
                                                    "v": [0.0, 1.0]}))
    out = plateau_read(root, "pds")
    assert out["id"].tolist() == list(range(8)) + [100, 101]
    assert set(plateau_read(root, "pds", [[("x", "==", 2)]])["id"]) == {1, 4, 7, 100}


def test_delete_rows_rewrites_only_affected_files_and_plateau_reads_the_result(tmp_path):
    root = tmp_path / "pl"
    root.mkdir()
    url = "file://" + str(root)
    plateau_write(root, "pds", PLATEAU_DF)
    kstore.upgrade_dataset(url, "pds")
    before = kstore.load_metadata(url, "pds")
    files = data_files(url, "pds")
    state = file_state(root, files)

    # ids 2 (p=a, first chunk, shares its file with id 0) and 6 (p=a, second chunk)
    meta = kstore.delete_rows(url, "pds", [[("id", "in", [2, 6])]])
    affected = {lab for lab, fs in before.partitions.items() if p_of(lab) == "a"}
    assert set(kstore.history(url, "pds")[-1].removed) == affected
    unaffected = {lab: fs for lab, fs in before.partitions.items() if lab not in affected}
    for lab, fs in unaffected.items():
        assert meta.partitions[lab] == fs  # same keys
        key = fs[meta.table]
        assert file_state(root, [key])[key] == state[key]  # and not rewritten
    new_a = {lab for lab in meta.partitions if p_of(lab) == "a"}
    assert not (new_a & affected) and len(new_a) == 1  # one rewritten file; the other became empty
    assert kstore.read_dataset(url, "pds", predicates=[[("p", "==", "a")]])["id"].tolist() == [0]

    want = by_id(PLATEAU_DF[~PLATEAU_DF.id.isin([2, 6])])
    got_pl = plateau_read(root, "pds")
    assert got_pl["id"].tolist() == want["id"].tolist()
    pd.testing.assert_frame_equal(got_pl[["id", "x", "v"]], want[["id", "x", "v"]].reset_index(drop=True),
                                  check_dtype=False)
    assert set(plateau_read(root, "pds", [[("x", "==", 1)]])["id"]) == {0}  # index rewritten for plateau
    assert set(plateau_read(root, "pds", [[("x", "==", 4)]])["id"]) == set()
    assert kstore.index_lookup(url, "pds", "x", 4) == []
    assert set(ids_of(url, "pds", version=0)) == set(range(8))  # the old version is still there
    # old files are garbage only once the version referencing them expires
    assert not kstore.garbage_collect(url, "pds").deleted_files
    gc = kstore.garbage_collect(url, "pds", retention=timedelta(0), enforce_retention_duration=False)
    assert {before.partitions[lab][before.table] for lab in affected} <= set(gc.deleted_files)
    assert plateau_read(root, "pds")["id"].tolist() == want["id"].tolist()


def test_delete_rows_on_a_kstore_dataset_touches_only_matching_files(store_url):
    kstore.store_dataset(store_url, UUID, [frame(["a", "b"], [0, 1]), frame(["a", "b"], [2, 3])],
                         partition_on="p", secondary_indices=["x"])
    before = kstore.load_metadata(store_url, UUID)
    assert kstore.delete_rows(store_url, UUID, [[("id", "==", 99)]]) == before  # nothing matches: no commit
    assert len(kstore.history(store_url, UUID)) == 1
    meta = kstore.delete_rows(store_url, UUID, [[("x", "==", 3)]])  # id 3 only
    changed = {lab for lab in before.partitions if lab not in meta.partitions}
    assert len(changed) == 1 and p_of(changed.pop()) == "b"
    assert len(set(meta.partitions) - set(before.partitions)) == 0  # id 3 was alone in its file
    assert ids_of(store_url) == [0, 1, 2]
    assert kstore.index_lookup(store_url, UUID, "x", 3) == []
    # a predicate on a partition column and a data column
    kstore.delete_rows(store_url, UUID, [[("p", "==", "a"), ("id", ">", 0)]])
    assert ids_of(store_url) == [0, 1]
    with pytest.raises(InvalidArgumentError):
        kstore.delete_rows(store_url, UUID, None)


def test_history_of_missing_dataset_raises(store_url):
    with pytest.raises(DatasetNotFoundError):
        kstore.history(store_url, "nope")
    with pytest.raises(DatasetNotFoundError):
        kstore.garbage_collect(store_url, "nope")


def test_history_limit_reads_only_the_newest_entries(store_url):
    from kstore.io.store import CountingStore

    kstore.store_dataset(store_url, "h", pd.DataFrame({"x": [0]}))
    for i in range(1, 30):
        kstore.update_dataset(store_url, "h", pd.DataFrame({"x": [i] * i}))
    full = kstore.history(store_url, "h")
    assert [h.version for h in full] == list(range(30))
    counting = CountingStore(store_url)
    newest = kstore.history(counting, "h", limit=3)
    assert newest == full[-3:]
    log_gets = [k for m, k in counting.keys if m == "get" and "/_kstore/log/" in k]
    assert len(log_gets) == 3 and dict(counting.calls)["iter_prefix"] == 1  # 1 listing + the three entries
    frame = kstore.history(store_url, "h", as_frame=True, limit=5)
    assert frame["version"].tolist() == list(range(25, 30))
    assert frame["rows_added"].tolist() == list(range(25, 30)) and set(frame["operation"]) == {"append"}
    with pytest.raises(kstore.errors.InvalidArgumentError, match="limit"):
        kstore.history(store_url, "h", limit=0)


def test_history_limit_stops_at_a_deletion(store_url):
    kstore.store_dataset(store_url, "h", pd.DataFrame({"x": [0]}))
    kstore.update_dataset(store_url, "h", pd.DataFrame({"x": [1]}))
    kstore.delete_dataset(store_url, "h")
    kstore.store_dataset(store_url, "h", pd.DataFrame({"x": [2]}))
    for limit in (None, 1, 5):
        got = [(h.version, h.operation) for h in kstore.history(store_url, "h", limit=limit)]
        assert got == [(3, "create")], limit
