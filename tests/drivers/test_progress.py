"""``progress=`` on long library operations: writes, garbage collection, delete, copy,
compaction. Off by default; a callable sees exact counts; ``True`` draws a bar on stderr;
a callback that raises cancels the operation and leaves nothing behind."""

from __future__ import annotations

import pickle
from datetime import timedelta

import pandas as pd
import pytest

import kstore
from kstore.errors import InvalidArgumentError
from kstore.io.progress import ProgressStore

UUID = "prog"


def frame(n: int, start: int = 0) -> pd.DataFrame:
    ids = range(start, start + n)
    return pd.DataFrame({"p": [i % 4 for i in ids], "x": list(ids)})


def keys(url) -> set[str]:
    return set(kstore.open_store(url).iter_prefix(""))


def data_keys(url) -> set[str]:
    return {k for k in keys(url) if k.endswith(".parquet") and "/indices/" not in k}


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[int, int | None]] = []

    def __call__(self, done: int, total: int | None) -> None:
        self.calls.append((done, total))


def counts_up(calls, total=None) -> bool:
    return [d for d, _ in calls] == list(range(1, len(calls) + 1)) and all(t == total for _, t in calls)


def test_a_write_reports_each_data_file_it_writes(store_url):
    rec = Recorder()
    chunks = [frame(40), frame(40, 40), frame(8, 80)]  # a streamed write: three chunks
    meta = kstore.store_dataset(store_url, UUID, iter(chunks), partition_on="p", secondary_indices="x", progress=rec)
    files = [k for tables in meta.partitions.values() for k in tables.values()]
    assert len(rec.calls) == len(files) == len(data_keys(store_url)) == 12 and counts_up(rec.calls)
    rec2 = Recorder()
    kstore.update_dataset(store_url, UUID, frame(6, 100), progress=rec2)
    assert len(rec2.calls) == 4 and counts_up(rec2.calls)
    assert sorted(kstore.read_dataset(store_url, UUID)["x"]) == list(range(88)) + list(range(100, 106))


def test_gc_delete_and_copy_report_exactly_what_they_do(store_url):
    kstore.store_dataset(store_url, UUID, frame(20), partition_on="p")
    for i in range(3):
        kstore.update_dataset(store_url, UUID, frame(4, 100 + 10 * i), mode="overwrite_partitions")
    rec = Recorder()
    before = keys(store_url)
    res = kstore.garbage_collect(store_url, UUID, retention=timedelta(0), enforce_retention_duration=False,
                                 progress=rec)
    gone = before - keys(store_url)
    assert res.deleted_files and len(rec.calls) == len(gone) >= len(res.deleted_files) and counts_up(rec.calls)

    rec = Recorder()
    copy = kstore.copy_dataset(store_url, UUID, new_uuid="copy", progress=rec)
    n = sum(len(t) for t in copy.partitions.values())
    assert len(rec.calls) == n and counts_up(rec.calls, total=n)

    rec = Recorder()
    before = keys(store_url)
    deleted = kstore.delete_dataset(store_url, "copy", progress=rec)
    gone = before - keys(store_url)
    assert deleted > 0 and counts_up(rec.calls)
    # every key deleted, plus the main file of the other format (absent; deleted to be sure)
    assert len(rec.calls) == len(gone) + 1


def test_progress_bars_go_to_stderr_and_change_nothing(store_url, capsys):
    kstore.store_dataset(store_url, UUID, frame(40), partition_on="p", progress=True)
    for i in range(3):
        kstore.update_dataset(store_url, UUID, frame(8, 100 + 10 * i), progress=True)
    plan = kstore.compact(store_url, UUID, progress=True)
    kstore.garbage_collect(store_url, UUID, retention=timedelta(0), enforce_retention_duration=False, progress=True)
    assert plan.files_out == 4 and len(kstore.load_metadata(store_url, UUID).partitions) == 4
    assert sorted(kstore.read_dataset(store_url, UUID)["x"]) == list(range(40)) + [
        x for i in range(3) for x in range(100 + 10 * i, 108 + 10 * i)]
    out = capsys.readouterr()
    assert out.out == ""  # nothing on stdout: a library's output is the caller's


def test_compaction_reports_groups_with_their_total(store_url):
    kstore.store_dataset(store_url, UUID, frame(8), partition_on="p")
    for i in range(3):
        kstore.update_dataset(store_url, UUID, frame(8, 100 + 10 * i))
    rec = Recorder()
    plan = kstore.compact(store_url, UUID, progress=rec)
    assert len(rec.calls) == len(plan.groups) == 4 and counts_up(rec.calls, total=4)


@pytest.mark.parametrize("bad", ["yes", 1, [1]])
def test_a_bad_progress_argument_is_refused_before_anything_is_written(store_url, bad):
    with pytest.raises(InvalidArgumentError, match="progress"):
        kstore.store_dataset(store_url, UUID, frame(8), partition_on="p", progress=bad)
    assert data_keys(store_url) == set()
    kstore.store_dataset(store_url, UUID, frame(8), partition_on="p")
    kstore.update_dataset(store_url, UUID, frame(8))
    before = keys(store_url)
    with pytest.raises(InvalidArgumentError, match="progress"):
        kstore.compact(store_url, UUID, progress=bad)
    assert keys(store_url) == before


def test_a_callback_that_raises_cancels_the_write_and_leaves_nothing(store_url):
    kstore.store_dataset(store_url, UUID, frame(8), partition_on="p")
    before = keys(store_url)

    class Stop(Exception):
        pass

    def cancel(done, total):
        if done == 2:
            raise Stop("cancelled by the user")

    with pytest.raises(Stop):
        kstore.update_dataset(store_url, UUID, frame(40, 100), progress=cancel)
    assert keys(store_url) == before  # not one file of the cancelled write is left
    assert kstore.load_metadata(store_url, UUID).version == 0
    with pytest.raises(Stop):
        kstore.store_dataset(store_url, "other", frame(40), partition_on="p", progress=cancel)
    assert keys(store_url) == before


@pytest.mark.parametrize("store_url", ["file"], indirect=True)  # a memory store lives in one process
def test_a_progress_store_pickles_to_the_plain_store(store_url):
    inner = kstore.open_store(store_url)
    wrapped = ProgressStore(inner, "put", lambda: None)
    clone = pickle.loads(pickle.dumps(wrapped))
    assert type(clone) is type(inner) and clone.url == inner.url
    with pytest.raises(InvalidArgumentError):
        ProgressStore(inner, "get", lambda: None)
