"""kstore.read_changes (#33): the change feed, checked against a row model.

Each test keeps the rows of every version in a model (computed from what it asked, never
read back from kstore) and derives the changes each operation must report: inserted,
deleted, and updated rows with their pre- and postimages. Hypothesis drives random
sequences of appends, partition overwrites and deletes, row deletes, updates (partition moves
included), merges, compactions and restores; ranges, expired versions and types are checked
on their own.
"""

from __future__ import annotations

import itertools
from collections import Counter
from datetime import timedelta

import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kstore
from kstore.errors import DatasetNotFoundError, InvalidArgumentError, VersionNotFoundError

UUID = "ds"
Row = tuple  # (p, id, x, s)


def frame(rows) -> pd.DataFrame:
    rows = list(rows)
    return pd.DataFrame({
        "p": pd.array([r[0] for r in rows], dtype=object),
        "id": pd.array([r[1] for r in rows], dtype="int64"),
        "x": pd.array([r[2] for r in rows], dtype="int16"),
        "s": pd.array([r[3] for r in rows], dtype=object),
    })


def changes(url, start, end=None) -> list[tuple]:
    t = kstore.read_changes(url, UUID, start, end, as_arrow=True)
    d = t.to_pydict()
    return list(zip(d["_commit_version"], d["_change_type"], d["p"], d["id"], d["x"], d["s"]))


def expected(version: int, before: Counter, after: Counter, pair_by=None) -> list[tuple]:
    """The change rows a version must report: for row rewrites the multiset difference, with
    preimage/postimage pairs (by ``pair_by``: a function of a row) where one row became another."""
    gone = before - after
    came = after - before
    out = []
    if pair_by is not None:
        pres = sorted(gone.elements())
        posts = list(came.elements())
        for pre in pres:
            match = next((q for q in posts if pair_by(q) == pair_by(pre)), None)
            if match is not None:
                posts.remove(match)
                gone[pre] -= 1
                came[match] -= 1
                out += [(version, "update_preimage", *pre), (version, "update_postimage", *match)]
    out += [(version, "delete", *r) for r in (+gone).elements()]
    out += [(version, "insert", *r) for r in (+came).elements()]
    return out


def canon(rows: list[tuple]) -> list[tuple]:
    """Order-free form: versions and kinds with their rows; pairs kept as (pre, post)."""
    out = []
    i = 0
    while i < len(rows):
        r = rows[i]
        if r[1] == "update_preimage":
            assert rows[i + 1][1] == "update_postimage" and rows[i + 1][0] == r[0], "a preimage without its postimage"
            out.append((r[0], "update", r[2:], rows[i + 1][2:]))
            i += 2
            continue
        out.append((r[0], r[1], r[2:]))
        i += 1
    return sorted(out, key=repr)


_ids = itertools.count(100)


def _same_id(r: Row) -> object:
    return r[1]


def _same_id_and_s(r: Row) -> object:  # (an update sets p and x; id and s tell the row)
    return (r[1], r[3])

_step = st.one_of(
    st.tuples(st.just("append"), st.lists(st.tuples(st.sampled_from("ab"), st.integers(0, 4),
                                                    st.sampled_from([None, "u", "v"])), min_size=1, max_size=4)),
    st.tuples(st.just("delete_rows"), st.integers(0, 4)),
    st.tuples(st.just("update"), st.integers(0, 4), st.integers(0, 4), st.sampled_from([None, "a", "b"])),
    st.tuples(st.just("merge"), st.lists(st.tuples(st.integers(0, 12), st.sampled_from("ab"), st.integers(0, 4)),
                                         min_size=1, max_size=4, unique_by=lambda t: t[0])),
    st.tuples(st.just("overwrite"), st.sampled_from("ab"), st.integers(0, 4)),
    st.tuples(st.just("delete_scope"), st.sampled_from("ab")),
    st.tuples(st.just("compact")),
    st.tuples(st.just("restore"), st.integers(0, 100)),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(_step, min_size=1, max_size=6))
def test_the_feed_reports_exactly_what_each_version_changed(steps):
    url = f"memory://changes-prop-{next(_ids)}"
    rows0 = [("a", i, i % 5, None if i % 3 == 0 else f"s{i}") for i in range(8)] + [("b", 8, 1, "t")]
    kstore.store_dataset(url, UUID, frame(rows0), partition_on="p", secondary_indices=["x"])
    states = {0: Counter(rows0)}
    want = expected(0, Counter(), states[0])
    next_id = 1000
    for step in steps:
        v0 = kstore.load_metadata(url, UUID).version
        state = states[v0]
        kind = step[0]
        pair = None
        if kind == "append":
            new = [(p, next_id + i, x, s) for i, (p, x, s) in enumerate(step[1])]
            next_id += len(new)
            kstore.update_dataset(url, UUID, frame(new))
            after = state + Counter(new)
        elif kind == "delete_rows":
            kstore.delete_rows(url, UUID, [[("x", "==", step[1])]])
            after = Counter({r: n for r, n in state.items() if r[2] != step[1]})
        elif kind == "update":
            _, match, new_x, new_p = step
            values = {"x": new_x} | ({"p": new_p} if new_p else {})
            kstore.update_rows(url, UUID, [[("x", "==", match)]], set=values)
            after = Counter()
            for r, n in state.items():
                after[(new_p or r[0], r[1], new_x, r[3]) if r[2] == match else r] += n
            pair = _same_id_and_s
        elif kind == "merge":
            src = [(p, key, x, "m") for key, p, x in step[1]]
            kstore.merge(url, UUID, frame(src), "id")
            keys = {r[1] for r in src}
            after = Counter({r: n for r, n in state.items() if r[1] not in keys}) + Counter(src)
            pair = _same_id
        elif kind == "overwrite":
            p, x = step[1], step[2]
            new = [(p, next_id, x, "o")]
            next_id += 1
            kstore.update_dataset(url, UUID, frame(new), mode="overwrite_partitions")
            after = Counter({r: n for r, n in state.items() if r[0] != p}) + Counter(new)
        elif kind == "delete_scope":
            kstore.update_dataset(url, UUID, delete_scope=[{"p": step[1]}])
            after = Counter({r: n for r, n in state.items() if r[0] != step[1]})
        elif kind == "compact":
            kstore.compact(url, UUID, min_files=2)
            after = state
        else:
            target = step[1] % (v0 + 1)
            kstore.restore(url, UUID, target)
            after = states[target]
        v = kstore.load_metadata(url, UUID).version
        if v == v0:
            continue  # nothing committed (no row matched, nothing to compact, the newest restored)
        states[v] = after
        if kind in ("overwrite", "delete_scope"):
            # whole partitions: every row of the replaced files is deleted, even one written again
            p = step[1]
            gone = Counter({r: n for r, n in state.items() if r[0] == p})
            came = after - (state - gone)
            want += [(v, "delete", *r) for r in gone.elements()] + [(v, "insert", *r) for r in came.elements()]
        else:
            want += expected(v, state, after, pair)
    got = changes(url, 0)
    assert canon(got) == canon(want)
    # a range from a middle version: the same rows of those versions
    newest = kstore.load_metadata(url, UUID).version
    if newest >= 1:
        mid = newest // 2 + 1
        assert canon(changes(url, mid)) == canon([w for w in want if w[0] >= mid])


def test_columns_types_and_commit_times(tmp_path):
    url = str(tmp_path / "store")
    df = pd.DataFrame({"p": ["a", "b"], "id": [1, 2], "x": pd.array([1, 2], dtype="int16"),
                       "s": ["u", None], "f": pd.array([1.5, 2.5], dtype="float32"),
                       "n": pd.array([1, None], dtype="Int32"),
                       "t": pd.to_datetime(["2024-01-01 10:00", "2024-01-02 11:00"]).tz_localize("Europe/Berlin")})
    kstore.store_dataset(url, UUID, df, partition_on="p")
    kstore.update_rows(url, UUID, [[("id", "==", 2)]], set={"n": 7})
    t = kstore.read_changes(url, UUID, 0, as_arrow=True)
    schema = kstore.read_schema(url, UUID)
    assert t.column_names == [*[c for c in t.column_names if not c.startswith("_")], "_change_type",
                              "_commit_version", "_commit_timestamp"]
    for f in schema:  # no column widened
        assert t.schema.field(f.name).type == f.type, f.name
    hist = {h.version: h.timestamp for h in kstore.history(url, UUID)}
    assert [ts.as_py() for ts in t["_commit_timestamp"]] == [hist[v] for v in t["_commit_version"].to_pylist()]
    frame_ = kstore.read_changes(url, UUID, 1)
    assert frame_["_change_type"].tolist() == ["update_preimage", "update_postimage"]
    assert str(frame_["n"].dtype) == "Int32" and frame_["n"].tolist()[1] == 7 and pd.isna(frame_["n"].tolist()[0])
    assert str(frame_["t"].dtype) == "datetime64[ns, Europe/Berlin]" or "Europe/Berlin" in str(frame_["t"].dtype)


def test_a_compaction_and_index_builds_change_no_row(tmp_path):
    url = str(tmp_path / "store")
    kstore.store_dataset(url, UUID, frame([("a", 1, 1, "u")]), partition_on="p")
    kstore.update_dataset(url, UUID, frame([("a", 2, 2, "v")]))
    kstore.compact(url, UUID)
    kstore.build_indices(url, UUID, ["x"])
    assert [h.operation for h in kstore.history(url, UUID)] == ["create", "append", "compaction", "build_indices"]
    assert changes(url, 2) == []
    assert len(kstore.read_changes(url, UUID, 2)) == 0


def test_ranges_that_are_not_retained_or_not_there(tmp_path):
    url = str(tmp_path / "store")
    kstore.store_dataset(url, UUID, frame([("a", 1, 1, "u")]), partition_on="p")
    kstore.update_dataset(url, UUID, frame([("a", 2, 2, "v")]), mode="overwrite_partitions")
    kstore.update_dataset(url, UUID, frame([("b", 3, 3, "w")]))
    with pytest.raises(InvalidArgumentError):
        kstore.read_changes(url, UUID, 2, 1)
    with pytest.raises(DatasetNotFoundError):
        kstore.read_changes(url, "no-such-dataset", 0)
    with pytest.raises(VersionNotFoundError):
        kstore.read_changes(url, UUID, 0, 9)
    kstore.garbage_collect(url, UUID, retention=timedelta(0), enforce_retention_duration=False)
    with pytest.raises(VersionNotFoundError, match="not retained"):
        kstore.read_changes(url, UUID, 0)
    with pytest.raises(VersionNotFoundError, match="not retained"):
        kstore.read_changes(url, UUID, 2)  # version 1, which version 2 is computed against, expired
    assert [c[1:] for c in changes(url, 3)] == []  # the GC's vacuum changes nothing
    kstore.delete_dataset(url, UUID)
    kstore.store_dataset(url, UUID, frame([("a", 9, 1, "z")]), partition_on="p")
    with pytest.raises(VersionNotFoundError, match="deleted the dataset"):
        kstore.read_changes(url, UUID, 4)
    newest = kstore.load_metadata(url, UUID).version
    assert [c[1:] for c in changes(url, newest)] == [("insert", "a", 9, 1, "z")]


def test_a_merge_reports_pairs_deletes_and_inserts(tmp_path):
    url = str(tmp_path / "store")
    kstore.store_dataset(url, UUID, frame([("a", 1, 1, "u"), ("a", 2, 2, "v"), ("b", 3, 3, "w")]), partition_on="p")
    res = kstore.merge(url, UUID, frame([("b", 2, 4, "v2"), ("a", 5, 0, "n")]), "id",
                       when_not_matched_by_source="delete")
    assert (res.inserted, res.updated, res.deleted) == (1, 1, 2)
    got = changes(url, 1)
    assert canon(got) == canon([(1, "update_preimage", "a", 2, 2, "v"), (1, "update_postimage", "b", 2, 4, "v2"),
                                (1, "delete", "a", 1, 1, "u"), (1, "delete", "b", 3, 3, "w"),
                                (1, "insert", "a", 5, 0, "n")])
    assert pa.Table.from_pandas(kstore.read_changes(url, UUID, 1)).num_rows == 5


def test_the_feed_of_a_kartothek_written_dataset_with_every_dtype(tmp_path):
    """Real kartothek 5.3 data (every dtype it writes, a list column included): after
    ``upgrade_dataset``, a row delete and an update report exactly the rows that changed, with
    their values as read before."""
    import shutil

    from tests.interop.fixtures import locate_fixtures

    store = tmp_path / "store"
    shutil.copytree(locate_fixtures() / "store" / "pub_dtypes", store / "pub_dtypes")
    shutil.copy(locate_fixtures() / "store" / "pub_dtypes.by-dataset-metadata.json", store)
    url = str(store)
    kstore.upgrade_dataset(url, "pub_dtypes")
    before = kstore.read_dataset(url, "pub_dtypes", as_arrow=True).sort_by("row_id")
    first = before["row_id"][0].as_py()
    kstore.delete_rows(url, "pub_dtypes", [[("row_id", "==", first)]])
    kstore.update_rows(url, "pub_dtypes", [[("row_id", "in", [first + 1, first + 2])]], set={"c_int16": 7})
    t = kstore.read_changes(url, "pub_dtypes", 1, as_arrow=True)
    assert t["_change_type"].to_pylist() == ["delete", "update_preimage", "update_postimage",
                                             "update_preimage", "update_postimage"]
    data_cols = before.column_names
    deleted = t.filter(pa.compute.equal(t["_change_type"], "delete")).select(data_cols)
    assert deleted.to_pylist() == before.slice(0, 1).select(data_cols).to_pylist()
    pre = t.filter(pa.compute.equal(t["_change_type"], "update_preimage")).select(data_cols).sort_by("row_id")
    post = t.filter(pa.compute.equal(t["_change_type"], "update_postimage")).select(data_cols).sort_by("row_id")
    assert pre.to_pylist() == before.slice(1, 2).select(data_cols).to_pylist()
    assert post["c_int16"].to_pylist() == [7, 7]
    assert post.drop_columns(["c_int16"]).to_pylist() == pre.drop_columns(["c_int16"]).to_pylist()
