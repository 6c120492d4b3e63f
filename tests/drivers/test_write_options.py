"""Writer options (compression, row groups, pages, page index, Bloom filters, dictionary,
``sort_by``) reach every data file, bad options are refused before any file is written,
and clustered files let reads skip row groups."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

import kstore
from kstore.core.writer_options import BLOOM_FILTERS_SUPPORTED, WriteOptions
from kstore.errors import ColumnNotFoundError, InvalidArgumentError, KstoreError
from kstore.io.local import LocalStore

UUID = "opts"


def frame(n: int = 6_000, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "day": rng.integers(0, 3, n),
        "id": np.arange(n),
        "location": rng.integers(0, 200, n),
        "price": rng.random(n),
        "note": pd.Series(rng.integers(0, 50, n)).map(lambda v: f"n{v:03d}"),
    })


def data_files(url: str, uuid: str = UUID) -> list[pq.ParquetFile]:
    st = kstore.open_store(url)
    meta = kstore.load_metadata(url, uuid)
    return [pq.ParquetFile(io.BytesIO(st.get(files[meta.table]))) for files in meta.partitions.values()]


def column_chunk(pf: pq.ParquetFile, rg: int, name: str):
    return pf.metadata.row_group(rg).column(pf.schema_arrow.get_field_index(name))


def test_options_reach_every_file(store_url):
    opts = {"compression": "zstd", "compression_level": 7, "row_group_size": 500, "data_page_size": 4096,
            "write_page_index": True, "use_dictionary": ["note"]}
    df = frame()
    kstore.store_dataset(store_url, UUID, df, partition_on="day", write_options=opts, sort_by=["location"])
    files = data_files(store_url)
    assert len(files) == 3
    for pf in files:
        md = pf.metadata
        assert md.num_row_groups == -(-md.num_rows // 500) and md.num_row_groups > 1
        assert all(md.row_group(i).num_rows <= 500 for i in range(md.num_row_groups))
        for i in range(md.num_row_groups):
            loc = column_chunk(pf, i, "location")
            assert loc.compression == "ZSTD"
            assert loc.has_column_index and loc.has_offset_index
            assert not loc.has_dictionary_page  # only "note" is dictionary-encoded
            assert column_chunk(pf, i, "note").has_dictionary_page
            assert [c.column_index for c in md.row_group(i).sorting_columns] == [pf.schema_arrow.get_field_index("location")]
        loc = pf.read(columns=["location"]).column("location").to_numpy()
        assert (np.diff(loc) >= 0).all() and len(np.unique(loc)) > 10
    # rows exact, with the sort
    back = kstore.read_dataset(store_url, UUID).sort_values("id").reset_index(drop=True)
    pd.testing.assert_frame_equal(back[df.columns.tolist()], df, check_dtype=False)


def test_default_options_write_snappy_unsorted_with_dictionary(store_url):
    df = frame()
    kstore.store_dataset(store_url, UUID, df, partition_on="day")
    for pf in data_files(store_url):
        assert column_chunk(pf, 0, "location").compression == "SNAPPY"
        assert column_chunk(pf, 0, "note").has_dictionary_page
        assert not column_chunk(pf, 0, "location").has_column_index
        assert pf.metadata.row_group(0).sorting_columns == ()
        ids = pf.read(columns=["id"]).column("id").to_numpy()
        assert (np.diff(ids) > 0).all()  # input order kept without sort_by
    back = kstore.read_dataset(store_url, UUID).sort_values("id").reset_index(drop=True)
    pd.testing.assert_frame_equal(back[df.columns.tolist()], df, check_dtype=False)


@pytest.mark.skipif(not BLOOM_FILTERS_SUPPORTED, reason="this pyarrow writes no Bloom filters (refusal tested below)")
def test_bloom_filters_are_written_for_the_named_columns(store_url):
    kstore.store_dataset(store_url, UUID, frame(), partition_on="day", write_options={"bloom_filters": ["location"]})
    for pf in data_files(store_url):
        assert column_chunk(pf, 0, "location").bloom_filter_length > 0
        assert column_chunk(pf, 0, "price").bloom_filter_length in (None, 0, -1)


def test_bloom_filters_refused_where_pyarrow_cannot_write_them(monkeypatch, store_url):
    import kstore.core.writer_options as wo

    monkeypatch.setattr(wo, "BLOOM_FILTERS_SUPPORTED", False)
    with pytest.raises(InvalidArgumentError, match="bloom_filters"):
        kstore.store_dataset(store_url, UUID, frame(), write_options={"bloom_filters": ["location"]})
    assert not kstore.open_store(store_url).exists(UUID + ".by-dataset-metadata.json")


@pytest.mark.parametrize("options, sort_by, err, name", [
    ({"compression": "zip"}, None, InvalidArgumentError, "compression"),
    ({"compression": "snappy", "compression_level": 3}, None, InvalidArgumentError, "compression_level"),
    ({"compression": "zstd", "compression_level": 99}, None, InvalidArgumentError, "compression_level"),
    ({"row_group_size": 0}, None, InvalidArgumentError, "row_group_size"),
    ({"row_group_size": 10.5}, None, InvalidArgumentError, "row_group_size"),
    ({"data_page_size": -1}, None, InvalidArgumentError, "data_page_size"),
    ({"write_page_index": "yes"}, None, InvalidArgumentError, "write_page_index"),
    ({"use_dictionary": "note"}, None, InvalidArgumentError, "use_dictionary"),
    ({"row_groups": 5}, None, InvalidArgumentError, "row_groups"),
    (None, "location", None, None),  # a single name is accepted as a driver argument
    (None, ["nope"], ColumnNotFoundError, "sort_by"),
    (None, ["day"], InvalidArgumentError, "sort_by"),
    (None, ["location", "location"], InvalidArgumentError, "sort_by"),
    ({"bloom_filters": ["nope"]}, None, (ColumnNotFoundError, InvalidArgumentError), "bloom_filters"),
    ("zstd", None, InvalidArgumentError, "write_options"),
])
def test_bad_options_are_refused_before_any_file(tmp_path, options, sort_by, err, name):
    url = str(tmp_path / "s")
    df = frame(300)
    if err is None:
        kstore.store_dataset(url, UUID, df, partition_on="day", write_options=options, sort_by=sort_by)
        return
    with pytest.raises(err, match=name):
        kstore.store_dataset(url, UUID, df, partition_on="day", write_options=options, sort_by=sort_by)
    assert not (tmp_path / "s").exists() or list(LocalStore(url).iter_prefix("")) == []
    # update_dataset validates the same way
    kstore.store_dataset(url, UUID, df, partition_on="day")
    before = set(kstore.open_store(url).iter_prefix(""))
    with pytest.raises(err, match=name):
        kstore.update_dataset(url, UUID, df, write_options=options, sort_by=sort_by)
    assert set(kstore.open_store(url).iter_prefix("")) == before


def test_iterator_writes_sort_each_file(store_url):
    df = frame()
    chunks = [df.iloc[:2000], df.iloc[2000:]]
    kstore.store_dataset(store_url, UUID, iter(chunks), partition_on="day", sort_by=["location", "id"])
    files = data_files(store_url)
    assert len(files) == 6  # two chunks x three days
    for pf in files:
        t = pf.read(columns=["location", "id"])
        keys = list(zip(t.column("location").to_pylist(), t.column("id").to_pylist()))
        assert keys == sorted(keys)
    back = kstore.read_dataset(store_url, UUID)
    assert sorted(back["id"]) == list(range(len(df)))


class _CountingStore(LocalStore):
    """Counts the bytes read through ``open`` (what a range-reading reader fetches)."""

    read_bytes = 0

    def open(self, key):
        fh = super().open(key)
        outer = self

        class Counting(io.RawIOBase):
            def readable(self):
                return True

            def seekable(self):
                return True

            def seek(self, pos, whence=0):
                return fh.seek(pos, whence)

            def tell(self):
                return fh.tell()

            def readinto(self, b):
                n = fh.readinto(b)
                outer.read_bytes += n or 0
                return n

            def close(self):
                fh.close()
                super().close()

        return io.BufferedReader(Counting(), buffer_size=1)


def test_clustered_files_skip_row_groups(tmp_path):
    df = frame(40_000)
    pred = [[("location", "==", 7)]]
    expected = sorted(df.loc[df.location == 7, "id"])
    result = {}
    for clustered in (False, True):
        root = str(tmp_path / str(clustered))
        kstore.store_dataset(root, UUID, df, partition_on="day", write_options={"row_group_size": 1000},
                             sort_by=["location"] if clustered else None)
        kept = total = 0
        for pf in data_files(root):
            for i in range(pf.metadata.num_row_groups):  # row groups whose statistics may hold 7
                stats = column_chunk(pf, i, "location").statistics
                total += 1
                kept += stats.min <= 7 <= stats.max
        st = _CountingStore(root)
        got = kstore.read_table(st, UUID, predicates=pred, columns=["id"])
        assert sorted(got.column("id").to_pylist()) == expected
        result[clustered] = (kept, total, st.read_bytes)
    (kept0, total0, bytes0), (kept1, total1, bytes1) = result[False], result[True]
    assert kept0 == total0  # unsorted: every row group may hold 7
    assert kept1 <= 6 and total1 >= 40  # sorted: one (or two at a boundary) per file
    # the read fetched (beyond the footers, at most 64 KiB per file) about those row groups only
    tail = 3 * 64 * 1024
    assert bytes1 - tail < (bytes0 - tail) / 8, (bytes0, bytes1)


def test_reads_skip_row_groups_with_fragment_filter():
    """What kstore's read relies on: a filtered fragment scan reads only the row groups
    whose statistics can match (counted through the file object)."""
    rng = np.random.default_rng(1)
    import pyarrow as pa

    t = pa.table({"location": np.sort(rng.integers(0, 1000, 200_000)), "x": rng.random(200_000)})
    sink = io.BytesIO()
    pq.write_table(t, sink, row_group_size=10_000)
    frag = ds.ParquetFileFormat().make_fragment(io.BytesIO(sink.getvalue()))
    sub = frag.subset(filter=pc.field("location") == 7)
    assert len(sub.row_groups) == 1 and frag.num_row_groups == 20


def test_dask_and_text_options(tmp_path):
    dd = pytest.importorskip("dask.dataframe")
    import dask

    import kstore.dask

    url = "file://" + str(tmp_path / "d")
    df = frame(3000)
    with dask.config.set(scheduler="threads"):
        kstore.dask.store_dataset(url, UUID, dd.from_pandas(df, npartitions=2), partition_on="day",
                                  write_options=WriteOptions.from_text({"compression": "gzip", "row_group_size": "300"}),
                                  sort_by=["location"])
        with pytest.raises(ColumnNotFoundError, match="sort_by"):
            kstore.dask.update_dataset(url, UUID, dd.from_pandas(df, npartitions=2), sort_by=["nope"])
    for pf in data_files(url):
        assert column_chunk(pf, 0, "location").compression == "GZIP"
        assert pf.metadata.row_group(0).num_rows <= 300
        loc = pf.read(columns=["location"]).column("location").to_numpy()
        assert (np.diff(loc) >= 0).all()
    assert sorted(kstore.read_dataset(url, UUID)["id"]) == list(range(3000))
    with pytest.raises(KstoreError, match="row_group_size"):
        WriteOptions.from_text({"row_group_size": "many"})



def _dictionary_columns(pf: pq.ParquetFile) -> set[str]:
    return {name for name in pf.schema_arrow.names
            if any(column_chunk(pf, rg, name).has_dictionary_page for rg in range(pf.metadata.num_row_groups))}


def _auto_frame(n: int = 12_000) -> pd.DataFrame:
    rng = np.random.default_rng(3)
    return pd.DataFrame({
        "day": np.arange(n) % 48,                     # 48 partitions of 250 rows: runs of several
        "id": np.arange(n),                           # unique: a dictionary repeats every value
        "price": rng.random(n),                       # unique floats
        "few": rng.integers(0, 20, n),                # 20 values: a dictionary pays
        "label": pd.Series(rng.integers(0, 30, n)).map(lambda v: f"label-{v:04d}"),
        "cat": pd.Categorical([f"c{i}" for i in range(n)]),  # the user's dictionary: kept
        "flag": rng.random(n) < 0.5,
        "maybe": pd.array([None if i % 5 == 0 else i for i in range(n)], dtype="Int64"),
    })


@pytest.mark.parametrize("threads", [1, 4])
def test_auto_dictionary_writes_nearly_unique_columns_plain_after_the_first_file(tmp_path, monkeypatch, threads):
    """``use_dictionary="auto"`` (the default): a writer's first file dictionary-encodes every
    column; its later files write plain the columns whose dictionary did not pay (unique
    ids, prices, a nullable unique column), keep it for repeated values and categoricals,
    and every value reads back exactly."""
    url = str(tmp_path / "s")
    df = _auto_frame()
    import kstore.core.runtime as runtime

    monkeypatch.setattr(runtime, "cpu_threads", lambda: threads)  # the write pool's size
    kstore.store_dataset(url, UUID, df, partition_on="day")
    files = data_files(url)
    assert len(files) == 48
    kinds = [_dictionary_columns(pf) for pf in files]
    every = {"id", "price", "few", "label", "cat", "maybe"}
    first_of_run = [k for k in kinds if {"id", "price", "maybe"} <= k]
    assert first_of_run and all(k >= every for k in first_of_run)  # a run's first file: every column
    later = [k for k in kinds if "id" not in k]
    assert len(later) >= 48 - 4 * threads  # one first file per run (4 runs a thread)
    for k in later:
        assert k == {"few", "label", "cat"}, k
    plain_bytes = sum(pf.metadata.row_group(0).column(1).total_compressed_size for pf, k in zip(files, kinds)
                      if "id" not in k)
    dict_bytes = sum(pf.metadata.row_group(0).column(1).total_compressed_size for pf, k in zip(files, kinds)
                     if "id" in k)
    assert plain_bytes / max(1, len(later)) < dict_bytes / max(1, len(first_of_run))  # plain is smaller
    back = kstore.read_dataset(url, UUID).sort_values("id").reset_index(drop=True)
    pd.testing.assert_frame_equal(back[df.columns.tolist()], df, check_dtype=False, check_categorical=False)
    assert back["maybe"].isna().sum() == df["maybe"].isna().sum()


@pytest.mark.parametrize("threads", ["1", "2"])
@pytest.mark.parametrize("first_rows", [20_000, 50])
def test_auto_dictionary_is_judged_once_for_a_stream_of_chunks(tmp_path, monkeypatch, threads, first_rows):
    """A stream of chunks (one file each): the first file with enough rows to judge decides
    for the later chunks (they write the unique columns plain); a small first chunk does not
    judge (few repeats would mislead), the next large one does. Every value reads back."""
    monkeypatch.setenv("KSTORE_THREADS", threads)
    url = str(tmp_path / "s")
    chunks = [_auto_frame(first_rows).drop(columns="day")] + [
        _auto_frame(12_000).drop(columns="day").assign(id=lambda d, k=k: d["id"] + 100_000 * (k + 1))
        for k in range(6)]
    meta = kstore.store_dataset(url, UUID, iter(chunks))
    files = {label: pq.ParquetFile(str(tmp_path / "s" / key)) for label, files in meta.partitions.items()
             for key in files.values()}
    kinds = [_dictionary_columns(files[label]) for label in meta.partitions]  # in the chunks' order
    assert len(kinds) == 7
    every = {"id", "price", "few", "label", "cat", "maybe"}
    judged = [i for i, k in enumerate(kinds) if k >= every]
    later = [k for i, k in enumerate(kinds) if i not in judged]
    assert judged and judged[-1] < 1 + int(threads) + (first_rows < 8192)  # only while nothing was judged yet
    assert later and all(k == {"few", "label", "cat"} for k in later), kinds
    if first_rows < 8192:
        assert 0 in judged and 1 in judged  # the tiny first file judged nothing for the others
    back = kstore.read_dataset(url, UUID).sort_values("id").reset_index(drop=True)
    want = pd.concat(chunks).sort_values("id").reset_index(drop=True)
    pd.testing.assert_frame_equal(back[want.columns.tolist()], want, check_dtype=False, check_categorical=False)


@pytest.mark.parametrize("choice, expected", [(True, {"id", "price", "few", "label", "cat", "maybe"}),
                                              (False, set()), (["id"], {"id"})])
def test_an_explicit_use_dictionary_is_kept_in_every_file(tmp_path, choice, expected):
    url = str(tmp_path / "s")
    kstore.store_dataset(url, UUID, _auto_frame(), partition_on="day", write_options={"use_dictionary": choice})
    for pf in data_files(url):
        got = _dictionary_columns(pf)
        # a categorical keeps its dictionary unless the user turned dictionaries off
        assert got - {"cat"} == expected - {"cat"} and ("cat" in got) == (choice is not False and "cat" in expected)


def test_auto_is_the_default_and_spelled_in_text():
    assert WriteOptions().use_dictionary == "auto" and WriteOptions.of({}).use_dictionary == "auto"
    assert WriteOptions.from_text({"use_dictionary": "AUTO"}).use_dictionary == "auto"
    assert WriteOptions.from_text({"use_dictionary": "false"}).use_dictionary is False
    assert WriteOptions.of({"use_dictionary": "auto"}).is_default
    with pytest.raises(InvalidArgumentError, match="use_dictionary"):
        WriteOptions.of({"use_dictionary": "sometimes"})
