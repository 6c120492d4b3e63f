"""Format 2 (issue #12): the action log with checkpoints, on real stores.

- Datasets kstore wrote before format 2 (``tests/data/format1/``, real bytes of that
  kstore) open, read every version, time-travel, accept new commits and garbage collection;
  kartothek's view (the main file plateau reads) stays right across the change.
- A commit writes O(changed) bytes to the log whatever the size of the dataset.
- Every version reads the same after any number of commits, through checkpoints and replay.
"""

from __future__ import annotations

import functools
import json
from datetime import timedelta

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import kstore
from kstore.blocks import load
from kstore.core import naming
from kstore.core.state import CHECKPOINT_INTERVAL
from kstore.io.store import CountingStore
from tests.format1 import copy_format1

ZERO = {"retention": timedelta(0), "enforce_retention_duration": False}
#: rows (id) of each version of the fixture dataset "h" (see tests/data/format1/make.py)
H_VERSIONS = {0: {0, 1, 2}, 1: {0, 1, 2, 3, 4}, 2: {2, 3, 4, 5}, 3: {2, 3, 5}}


def ids(url: str, uuid: str, **kw) -> set[int]:
    return set(kstore.read_dataset(url, uuid, columns=["id"], **kw)["id"].tolist())


@pytest.fixture
def f1(store_url):
    copy_format1(store_url, "history", "h")
    copy_format1(store_url, "history", "m")
    return store_url


def test_format1_dataset_reads_every_version_and_its_history(f1):
    for v, rows in H_VERSIONS.items():
        assert ids(f1, "h", version=v) == rows
    assert ids(f1, "h") == H_VERSIONS[3]
    assert ids(f1, "h", predicates=[[("x", "==", 9)]]) == {5}  # its index file, format 1
    assert [(h.version, h.operation) for h in kstore.history(f1, "h")] == [
        (0, "create"), (1, "append"), (2, "overwrite_partitions"), (3, "delete_rows")]
    as_of = kstore.history(f1, "h")[1].timestamp
    assert ids(f1, "h", as_of=as_of) == H_VERSIONS[1]


@pytest.mark.parametrize("uuid", ["h", "m"])
def test_format1_dataset_accepts_commits_and_keeps_every_version(f1, uuid):
    base = kstore.open_dataset(f1, uuid)
    expected = {v: ids(f1, uuid, version=v) for v in range(base.version + 1)}
    for i in range(12):  # past a checkpoint interval
        meta = kstore.update_dataset(f1, uuid, pd.DataFrame({"p": [i % 3 + 1], "x": [100 + i], "id": [100 + i]}))
        expected[meta.version] = expected[meta.version - 1] | {100 + i}
    first_new = base.version + 1
    st = kstore.open_store(f1)
    entry = load.load_entry(st, uuid, first_new)
    assert entry.format == 2 and entry.is_base  # the first format-2 commit records the whole state once
    assert load.load_entry(st, uuid, first_new + 1).format == 2 and not load.load_entry(st, uuid, first_new + 1).is_base
    for v, rows in expected.items():
        assert ids(f1, uuid, version=v) == rows, v
    assert ids(f1, uuid, predicates=[[("x", "==", 105)]]) == {105}
    assert ids(f1, uuid, predicates=[[("x", "in", [3, 111])]]) == ({0} if uuid == "m" else set()) | {111}
    # the main file stays in the dataset's format, at the newest version, for kartothek readers
    main = {k for k in st.iter_prefix("") if k.startswith(uuid + ".by-dataset-metadata")}
    assert main == {naming.metadata_key(uuid, "msgpack.zstd" if uuid == "m" else "json")}
    assert load.load_main(st, uuid)[0].version == max(expected)


#: the store calls of opening and planning the format-1 fixture ``h`` (kstore before
#: format 2: log entries with the whole metadata, a statistics file, an index file), as
#: they were before its metadata got a file table (issue #30): 1 get of _last_checkpoint,
#: 1 listing of the log, 4 gets of its entries, 1 probe of the main file; then 1 get of the
#: index file when a predicate uses the index, 1 of the statistics file when one needs them
F1_PLAN_CALLS = {
    "p": ([[("p", "==", 1)]], {"get": 5, "iter_prefix": 1, "exists": 1}, []),
    "x": ([[("x", "==", 9)]], {"get": 6, "iter_prefix": 1, "exists": 1}, ["index"]),
    "id": ([[("id", ">", 3)]], {"get": 6, "iter_prefix": 1, "exists": 1}, ["stats"]),
    "x_id": ([[("x", "==", 6), ("id", "<", 9)]], {"get": 7, "iter_prefix": 1, "exists": 1}, ["index", "stats"]),
}


@pytest.mark.parametrize("case", list(F1_PLAN_CALLS))
def test_format1_reads_make_the_same_store_calls(f1, case):
    """A format-1 version's file table is built from its metadata (no call); its statistics
    and index files are loaded only when a predicate needs them (issue #30)."""
    pred, calls, loaded = F1_PLAN_CALLS[case]
    counting = CountingStore(f1)
    snap = kstore.open_dataset(counting, "h")
    meta = snap.metadata
    assert not meta.columnar and meta.stats_key and set(meta.indices) == {"x"}
    assert meta.files.labels.to_pylist() == list(meta.partitions)
    assert meta.files.table.column("key").to_pylist() == [meta.file_key(lab) for lab in meta.partitions]
    assert dict(counting.calls) == {"get": 5, "iter_prefix": 1, "exists": 1}  # the file table cost nothing
    plan = snap.plan(predicates=pred)
    assert dict(counting.calls) == calls
    got = [k for m, k in counting.keys if m == "get"][5:]
    assert [("index" if k == meta.indices["x"] else "stats" if k == meta.stats_key else k) for k in got] == loaded
    assert plan.store_calls == sum(calls.values())
    every = kstore.read_dataset(f1, "h")
    want = every[every.eval(" | ".join("(" + " & ".join(f"({c} {op} {v!r})" for c, op, v in conj) + ")"
                                       for conj in pred))]
    assert set(want["p"].map(lambda p: f"p={p}")) <= {t.label.split("/")[0] for t in plan.tasks}
    assert ids(f1, "h", predicates=pred) == set(want["id"])


def test_gc_across_format1_and_format2_versions(f1):
    for i in range(3):
        kstore.update_dataset(f1, "h", pd.DataFrame({"p": [1], "x": [50 + i], "id": [50 + i]}))
    newest = kstore.open_dataset(f1, "h").version
    want = ids(f1, "h")
    gc = kstore.garbage_collect(f1, "h", **ZERO)
    assert set(gc.expired_versions) == set(range(newest))
    st = kstore.open_store(f1)
    # the oldest retained version got a checkpoint before older entries became tombstones
    assert st.exists(naming.checkpoint_key("h", newest))
    assert ids(f1, "h") == want and ids(f1, "h", version=newest) == want
    assert not list(st.iter_prefix("h/_kstore/stats/"))  # format 1's statistics files went with their versions
    assert kstore.update_dataset(f1, "h", pd.DataFrame({"p": [2], "x": [60], "id": [60]})).version == newest + 2


def test_plateau_reads_the_main_file_of_an_upgraded_dataset(tmp_path):
    plateau_api = pytest.importorskip("plateau.api.dataset")
    minimalkv = pytest.importorskip("minimalkv")
    root = tmp_path / "store"
    root.mkdir()
    url = str(root)
    copy_format1(url, "history", "h")
    for i in range(CHECKPOINT_INTERVAL + 1):
        kstore.update_dataset(url, "h", pd.DataFrame({"p": [3], "x": [70 + i], "id": [70 + i]}))
    store = functools.partial(minimalkv.get_store_from_url, "hfs://" + url)
    got = plateau_api.read_table("h", store=store)
    assert set(got["id"]) == ids(url, "h")
    by_index = plateau_api.read_table("h", store=store, predicates=[[("x", "==", 75)]])
    assert set(by_index["id"]) == {75}


@pytest.mark.parametrize("n", [200, 2000])
def test_a_commit_writes_o_changed_bytes_to_the_log(tmp_path, n):
    """An append of one partition writes a log entry of a few KiB whatever the size of the
    dataset (format 1 wrote the whole metadata and a statistics file: O(partitions))."""
    url = str(tmp_path)
    df = pd.DataFrame({"p": range(n), "loc": [i % 50 for i in range(n)], "q": 1})
    kstore.store_dataset(url, "d", df, partition_on="p", secondary_indices=["loc"])
    counting = CountingStore(url)
    kstore.update_dataset(counting, "d", pd.DataFrame({"p": [n], "loc": [7], "q": [1]}))
    written = {k: len(kstore.open_store(url).get(k)) for m, k in counting.keys if m in ("put", "put_if_absent")}
    log = {k: b for k, b in written.items() if k.startswith(naming.log_prefix("d"))}
    assert list(log) == [naming.log_key("d", 1)]  # no checkpoint at version 1, no statistics file
    assert log[naming.log_key("d", 1)] < 8 * 1024
    entry = json.loads(kstore.open_store(url).get(naming.log_key("d", 1)))
    assert entry["format"] == 2 and entry["n_partitions"] == n + 1 and "metadata" not in entry or entry["metadata"] is None


def test_replay_equals_the_committed_state_through_checkpoints(store_url):
    """Each version read back (checkpoint + replay) equals the state its commit produced:
    files, statistics and index values, across appends, overwrites, row deletes and index
    builds."""
    committed = {}
    m = kstore.store_dataset(store_url, "r", pd.DataFrame({"p": [1, 2], "x": [1, 2], "s": ["a", "b"]}),
                             partition_on="p", secondary_indices=["x"])
    committed[m.version] = m
    for i in range(3, 5 + 2 * CHECKPOINT_INTERVAL):
        if i % 7 == 0:
            m = kstore.delete_rows(store_url, "r", [[("x", "==", i - 4)]])
        elif i % 5 == 0:
            m = kstore.update_dataset(store_url, "r", pd.DataFrame({"p": [1], "x": [i], "s": ["o"]}),
                                      mode="overwrite_partitions")
        elif i == 9:
            m = kstore.build_indices(store_url, "r", ["s"])
        else:
            m = kstore.update_dataset(store_url, "r", pd.DataFrame({"p": [i % 4], "x": [i], "s": [f"s{i}"]}))
        committed[m.version] = m
    st = kstore.open_store(store_url)
    assert max(committed) > 2 * CHECKPOINT_INTERVAL
    assert st.exists(naming.checkpoint_key("r", 10)) and st.exists(naming.checkpoint_key("r", 20))
    for v, meta in committed.items():
        back = load.load_version(st, "r", v)
        assert back.files is not None and meta.files is not None
        assert back.files.table.equals(meta.files.table), v
        assert back.to_dict() == meta.to_dict(), v


@pytest.mark.parametrize("op", ["==", "in", ">", "<="])
def test_planning_over_a_replayed_chunked_file_table_matches_a_scan(store_url, op):
    """A replayed state is a chunked file table (the checkpoint's rows, then each entry's):
    planning tests the idx: lists chunk by chunk; the files it keeps are exactly those
    holding a matching row (plus none it could not rule out), and the read equals a scan."""
    kstore.store_dataset(store_url, "c", pd.DataFrame({"p": [0, 1, 2], "x": [1, 5, 9], "id": [0, 1, 2]}),
                         partition_on="p", secondary_indices="x")
    for i in range(1, 8):  # no checkpoint: a replay chain of seven one-file entries
        kstore.update_dataset(store_url, "c", pd.DataFrame({"p": [i % 3, i % 3], "x": [i, i + 3], "id": [10 * i, 10 * i + 1]}))
    snap = kstore.open_dataset(store_url, "c")
    assert snap.metadata.files.table.column("label").num_chunks > 1
    value = [4, 9] if op == "in" else 5
    pred = [[("x", op, value)]]
    every = kstore.read_dataset(store_url, "c")
    want = set(every[every["x"].isin(value) if op == "in" else every.eval(f"x {op if op != '==' else '=='} {value}")]["id"])
    assert set(kstore.read_dataset(store_url, "c", predicates=pred)["id"]) == want
    planned = set(snap.plan(predicates=pred).keys)
    st = kstore.open_store(store_url)
    holding = set()
    for key in snap.plan().keys:  # the files with a matching row, read one by one
        xs = pq.read_table(pa.BufferReader(st.get(key)), columns=["x"]).column("x").to_pylist()
        if any((x in value) if op == "in" else eval(f"{x} {op} {value}") for x in xs):
            holding.add(key)
    assert planned == holding  # the idx: lists are exact per file: nothing missed, nothing extra


# ---------------------------------------------------------------------------------------
# checkpoints written before derived keys (tests/data/checkpoint1/, real bytes of kstore
# 53414a1): every column stored. They open, read every version, accept commits whose new
# checkpoints leave the derivable columns out, and garbage collection works across both.
# ---------------------------------------------------------------------------------------

def _checkpoint1_ids(v: int) -> set[int]:
    return set(range(min(v, 10) + 1)) - ({2} if v >= 11 else set())


def test_a_dataset_with_checkpoints_of_the_earlier_layout_keeps_working(store_url):
    from pathlib import Path

    import pyarrow as pa

    from kstore.core.state import DERIVED_KEY

    root = Path(__file__).parents[1] / "data" / "checkpoint1"
    st = kstore.open_store(store_url)
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_file() and rel.startswith(("c/", "c.by-dataset")):
            st.put(rel, path.read_bytes())
    old_cp = pa.ipc.open_file(pa.py_buffer(st.get(naming.checkpoint_key("c", 10)))).read_all()
    assert old_cp.column_names[:3] == ["label", "table", "key"]  # the fixture is the earlier layout
    for v in range(12):
        assert ids(store_url, "c", version=v) == _checkpoint1_ids(v), v
    assert set(kstore.read_dataset(store_url, "c", predicates=[[("x", "==", 1)]])["id"]) == {1, 4, 7, 10}
    assert [e.version for e in kstore.history(store_url, "c")] == list(range(12))
    # commits on top, up to the next checkpoint (v20): written with derived keys
    for i in range(12, 21):
        kstore.update_dataset(store_url, "c", pd.DataFrame({"p": [i], "x": [i % 3], "id": [i]}))
    new_cp = pa.ipc.open_file(pa.py_buffer(st.get(naming.checkpoint_key("c", 20)))).read_all()
    assert DERIVED_KEY in new_cp.schema.metadata and "key" not in new_cp.column_names
    want = _checkpoint1_ids(11) | set(range(12, 21))
    assert ids(store_url, "c") == want
    assert ids(store_url, "c", version=11) == _checkpoint1_ids(11) and ids(store_url, "c", version=15) == (
        _checkpoint1_ids(11) | set(range(12, 16)))
    plan = kstore.open_dataset(store_url, "c").plan(predicates=[[("x", "==", 2)]])
    assert sorted(plan.keys) == sorted(k for k in st.iter_prefix("c/table/") if k.endswith(".parquet") and any(
        f"p={p}/" in k for p in want if p % 3 == 2))
    # garbage collection across both layouts: everything but the newest version goes
    kstore.garbage_collect(store_url, "c", **ZERO)
    assert ids(store_url, "c") == want
    data_keys = {k for k in st.iter_prefix("c/table/") if k.endswith(".parquet")}
    assert data_keys == set(kstore.open_dataset(store_url, "c").plan().keys)


def test_a_large_entry_is_followed_by_a_checkpoint(tmp_path):
    """An overwrite carrying 300,000 index values (an entry of several MiB) is checkpointed at
    once: the next read loads the checkpoint (its idx: lists decoded only for the column a
    predicate needs) instead of decoding the entry; a small overwrite is not. The plans and
    rows are those of the committed state either way."""
    from kstore.blocks.commit import LARGE_ENTRY_BYTES

    url = str(tmp_path / "s")
    st = kstore.open_store(url)
    small = pd.DataFrame({"p": [0, 1], "id": [1, 2]})
    kstore.store_dataset(url, "big", small, partition_on="p", secondary_indices="id")
    kstore.store_dataset(url, "big", small, partition_on="p", secondary_indices="id", mode="overwrite")
    assert not st.exists(naming.checkpoint_key("big", 1))  # small: replayed
    n = 300_000
    ids = np.random.default_rng(7).integers(0, 2**62, n)  # (random: they do not compress)
    big = pd.DataFrame({"p": [i % 2 for i in range(n)], "id": ids})
    kstore.store_dataset(url, "big", big, partition_on="p", secondary_indices="id", mode="overwrite")
    assert len(st.get(naming.log_key("big", 2))) > LARGE_ENTRY_BYTES
    assert st.exists(naming.checkpoint_key("big", 2))
    head = load.load_head(st, "big")
    assert head.version == 2 and head.chain == 0  # from the checkpoint, no entry replayed
    wanted = int(ids[12345])
    assert list(kstore.read_dataset(url, "big", predicates=[[("id", "==", wanted)]])["id"]) == [wanted]


@pytest.mark.parametrize("threads", [None, 1])
def test_a_checkpoint_built_while_staging_is_the_one_any_writer_builds(tmp_path, threads):
    """A commit certain to checkpoint builds the checkpoint beside the entry's encoding
    (two threads, or in order where the runtime allows one). What it stores is byte for
    byte what GC or another writer would build from the committed version later
    (checkpoints are deterministic: a second copy must agree)."""
    from kstore.core import runtime
    from kstore.core.state import checkpoint_parts

    url = str(tmp_path / "s")
    st = kstore.open_store(url)
    n = 300_000  # (the id index gets value-sorted blocks)
    frame = pd.DataFrame({"p": [i % 3 for i in range(n)], "id": range(n), "g": [i % 5000 for i in range(n)]})
    rt = runtime.SystemRuntime()
    rt.max_threads = threads
    with runtime.installed(rt):
        kstore.store_dataset(url, "cp", frame, partition_on="p", secondary_indices=["id", "g"])
    data, blob, digest = checkpoint_parts(load.load_version(st, "cp", 0))
    assert digest is not None and blob
    assert st.get(naming.checkpoint_key("cp", 0)) == data
    assert st.get(naming.sorted_index_key("cp", 0, digest)) == blob
    got = kstore.read_dataset(url, "cp", predicates=[[("id", "==", 4242)]])
    assert got.to_dict("records") == [{"p": 0, "id": 4242, "g": 4242}]
