"""kstore.compact: small files merged per partition in one conflict-checked commit, with
rows, indices and statistics exact; concurrent appends survive; dry_run writes nothing."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

import kstore
from kstore.blocks import load
from kstore.blocks.compact import finish_compaction, plan_compaction, rewrite_groups
from kstore.errors import CommitConflictError

UUID = "c"


def chunks(n_chunks: int = 100, parts: int = 10, rows: int = 20, start: int = 0):
    """``n_chunks`` frames, each with ``rows`` rows in every one of ``parts`` partitions."""
    rng = np.random.default_rng(start)
    for k in range(n_chunks):
        n = parts * rows
        ids = np.arange(start + k * n, start + (k + 1) * n)
        yield pd.DataFrame({"p": np.repeat(np.arange(parts), rows), "id": ids,
                            "x": rng.integers(0, 500, n), "s": [f"v{i % 37}" for i in ids]})


def rows(url: str, **kw) -> pd.DataFrame:
    df = kstore.read_dataset(url, UUID, **kw)
    return df.sort_values("id").reset_index(drop=True)[["p", "id", "x", "s"]]


def check_exact(url: str, expected: pd.DataFrame) -> None:
    """Rows, the index on x and the per-file statistics all agree with the data files."""
    got = rows(url)
    pd.testing.assert_frame_equal(got, expected.sort_values("id").reset_index(drop=True), check_dtype=False)
    st = kstore.open_store(url)
    meta = kstore.load_metadata(url, UUID)
    schema = kstore.read_schema(url, UUID)
    idx = load.load_indices(st, meta, ["x"], schema)["x"]
    stats = {r["label"]: r for r in load.load_stats(st, meta).to_pylist()}
    assert set(stats) == set(meta.partitions)
    by_label = {}
    for label, files in meta.partitions.items():
        t = pq.read_table(io.BytesIO(st.get(files[meta.table])))
        by_label[label] = t
        s = stats[label]
        assert s["rows"] == t.num_rows and s["bytes"] == len(st.get(files[meta.table]))
        assert s["min:x"] == min(t.column("x").to_pylist()) and s["max:x"] == max(t.column("x").to_pylist())
        assert s["min:id"] == min(t.column("id").to_pylist())
    for v in (0, 7, 123, 499):
        want = sorted(lab for lab, t in by_label.items() if v in set(t.column("x").to_pylist()))
        assert sorted(idx.lookup_labels("==", v)) == want
        hit = kstore.read_dataset(url, UUID, predicates=[[("x", "==", v)]])
        assert sorted(hit["id"]) == sorted(expected.loc[expected.x == v, "id"])


def test_compacts_1000_small_files_in_10_partitions(store_url):
    frames = list(chunks())
    kstore.store_dataset(store_url, UUID, iter(frames), partition_on="p", secondary_indices=["x"])
    before = kstore.load_metadata(store_url, UUID)
    assert len(before.partitions) == 1000
    expected = pd.concat(frames, ignore_index=True)
    done = kstore.compact(store_url, UUID)
    assert (done.files_in, done.files_out, len(done.partitions)) == (1000, 10, 10)
    assert done.committed == before.version + 1 and done.bytes_out > 0
    after = kstore.load_metadata(store_url, UUID)
    assert len(after.partitions) == 10
    assert kstore.history(store_url, UUID)[-1].operation == "compaction"
    check_exact(store_url, expected)
    # time travel: the replaced files stay until garbage collection
    old = kstore.read_dataset(store_url, UUID, version=before.version)
    assert sorted(old["id"]) == sorted(expected["id"])
    # nothing left to do
    again = kstore.compact(store_url, UUID)
    assert again.files_in == 0 and again.committed is None
    assert kstore.load_metadata(store_url, UUID).version == after.version


def test_target_size_min_files_partitions_and_sort_by(store_url):
    frames = list(chunks(12, parts=3))
    kstore.store_dataset(store_url, UUID, iter(frames), partition_on="p", secondary_indices=["x"])
    expected = pd.concat(frames, ignore_index=True)
    sizes = load.load_stats(kstore.open_store(store_url), kstore.load_metadata(store_url, UUID)).column("bytes")
    target = int(max(sizes.to_pylist())) * 4  # about four files per output file
    done = kstore.compact(store_url, UUID, target_file_size=target, partitions=[{"p": 1}], sort_by=["x"],
                          write_options={"compression": "zstd"})
    assert done.partitions == [{"p": 1}]
    assert done.files_in == 12 and 3 <= done.files_out <= 4
    meta = kstore.load_metadata(store_url, UUID)
    per_p = pd.Series([lab.split("/")[0] for lab in meta.partitions]).value_counts().to_dict()
    assert per_p == {"p=0": 12, "p=1": done.files_out, "p=2": 12}
    st = kstore.open_store(store_url)
    for lab in meta.partitions:
        if lab.startswith("p=1/"):
            pf = pq.ParquetFile(io.BytesIO(st.get(meta.partitions[lab][meta.table])))
            assert pf.metadata.row_group(0).column(0).compression == "ZSTD"
            x = pf.read(columns=["x"]).column("x").to_numpy()
            assert (np.diff(x) >= 0).all()
    check_exact(store_url, expected)
    # min_files: a partition with fewer small files is left alone
    assert kstore.compact(store_url, UUID, min_files=13).files_in == 0
    # predicates choose files by their plan (partition column here)
    done = kstore.compact(store_url, UUID, predicates=[[("p", "==", 2)]])
    assert done.partitions == [{"p": 2}] and done.files_out == 1
    check_exact(store_url, expected)


def test_dry_run_writes_nothing(store_url):
    kstore.store_dataset(store_url, UUID, chunks(5, parts=2), partition_on="p", secondary_indices=["x"])
    st = kstore.open_store(store_url)
    keys = {k: st.get(k) for k in st.iter_prefix("")}
    plan = kstore.compact(store_url, UUID, dry_run=True)
    assert (plan.files_in, plan.files_out, plan.dry_run, plan.committed) == (10, 2, True, None)
    assert plan.bytes_in > 0 and plan.rows == 200
    assert "dry run" in plan.explain() and "10 files" in plan.explain()
    assert {k: st.get(k) for k in st.iter_prefix("")} == keys


def test_concurrent_append_survives(store_url):
    frames = list(chunks(4, parts=2))
    kstore.store_dataset(store_url, UUID, iter(frames), partition_on="p", secondary_indices=["x"])
    st = kstore.open_store(store_url)
    plan = plan_compaction(st, UUID)
    files = rewrite_groups(st, plan)
    # another writer appends to the same partitions before the compaction commits
    extra = next(chunks(1, parts=2, start=10_000))
    kstore.update_dataset(store_url, UUID, extra)
    done, meta = finish_compaction(st, plan, files)
    assert done.committed == meta.version == plan.version + 2
    assert len(meta.partitions) == 2 + 2  # two compacted files + the appended ones
    check_exact(store_url, pd.concat(frames + [extra], ignore_index=True))


@pytest.mark.parametrize("concurrent", ["delete_scope", "delete_rows", "compact"])
def test_conflicts_when_a_compacted_file_was_replaced(store_url, concurrent):
    frames = list(chunks(4, parts=2))
    kstore.store_dataset(store_url, UUID, iter(frames), partition_on="p", secondary_indices=["x"])
    st = kstore.open_store(store_url)
    plan = plan_compaction(st, UUID)
    files = rewrite_groups(st, plan)
    if concurrent == "delete_scope":
        kstore.update_dataset(store_url, UUID, delete_scope=[{"p": 0}])
    elif concurrent == "delete_rows":
        kstore.delete_rows(store_url, UUID, [[("id", "==", int(frames[0].id[0]))]])
    else:
        kstore.compact(store_url, UUID)
    version = kstore.load_metadata(store_url, UUID).version
    with pytest.raises(CommitConflictError, match="removed or replaced"):
        finish_compaction(st, plan, files)
    assert kstore.load_metadata(store_url, UUID).version == version
    assert not any(st.exists(f.key) for f in files)  # the attempt's files are gone


@pytest.mark.parametrize("kwargs, name", [
    ({"target_file_size": 0}, "target_file_size"),
    ({"min_files": 1}, "min_files"),
    ({"dry_run": "yes"}, "dry_run"),
    ({"partitions": [{"x": 1}]}, "partition"),
    ({"sort_by": ["nope"]}, "sort_by"),
    ({"write_options": {"compression": "zip"}}, "compression"),
])
def test_bad_arguments_write_nothing(store_url, kwargs, name):
    kstore.store_dataset(store_url, UUID, chunks(2, parts=2), partition_on="p")
    st = kstore.open_store(store_url)
    keys = set(st.iter_prefix(""))
    with pytest.raises(kstore.KstoreError, match=name):
        kstore.compact(store_url, UUID, **kwargs)
    assert set(st.iter_prefix("")) == keys


@pytest.mark.dask
@pytest.mark.parametrize("where", ["threads", "distributed"])
def test_dask_compact_rewrites_on_workers_and_commits_once(tmp_path, request, where):
    dask = pytest.importorskip("dask")
    import kstore.dask

    url = "file://" + str(tmp_path / "s")
    frames = list(chunks(20, parts=3))
    kstore.store_dataset(url, UUID, iter(frames), partition_on="p", secondary_indices=["x"])
    version = kstore.load_metadata(url, UUID).version
    target = request.getfixturevalue("dask_cluster_client") if where == "distributed" else "threads"
    with dask.config.set(scheduler=target):
        assert kstore.dask.compact(url, UUID, dry_run=True).files_in == 60
        done = kstore.dask.compact(url, UUID, sort_by=["x"])
    assert (done.files_in, done.files_out, done.committed) == (60, 3, version + 1)
    assert len(kstore.history(url, UUID)) == 2  # the create and ONE compaction commit
    check_exact(url, pd.concat(frames, ignore_index=True))
