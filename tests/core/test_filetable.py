"""The columnar file table and commit actions of format 2 (kstore.core.filetable)."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kstore.core.filetable import Actions, FileTable
from kstore.core.metadata import DatasetMetadata
from kstore.core.state import decode_actions, encode_actions
from kstore.core.stats import FileStats, stats_table
from kstore.errors import CorruptMetadataError

LABELS = st.text(alphabet="ab=/1%", min_size=1, max_size=5)


def files(labels: list[str], tag: str) -> dict[str, dict[str, str]]:
    return {lab: {"table": f"d/table/{lab}/{tag}.parquet"} for lab in labels}


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.lists(LABELS, max_size=4, unique=True), st.lists(st.integers(0, 20), max_size=3)),
                max_size=8))
def test_replaying_actions_equals_the_mapping_model(steps):
    """Adds and removes replayed on columns give kartothek's label -> files mapping."""
    model = DatasetMetadata.new("d")
    ft = FileTable()
    for n, (added, remove_at) in enumerate(steps):
        current = list(model.partitions)
        remove = tuple(dict.fromkeys(current[i] for i in remove_at if i < len(current)))
        add = {lab: f for lab, f in files(added, f"v{n}").items() if lab not in current or lab in remove}
        model = model.with_partitions(add, removed=remove)
        ft = ft.apply(Actions(add=FileTable.from_partitions(add).table, remove=remove))
        assert ft.partitions() == {k: dict(v) for k, v in model.partitions.items()}
        assert len(ft) == len(model.partitions)


def _typed_stats() -> tuple[pa.Schema, pa.Table]:
    schema = pa.schema([("d", pa.decimal128(38, 10)), ("t", pa.timestamp("us", "UTC")), ("b", pa.binary()),
                        ("day", pa.date32()), ("s", pa.string())])
    big = Decimal("123456789012345678901234567.0123456789")
    utc = dt.timezone.utc
    stats = [
        FileStats(3, 100, {"d": (-big, big, 0), "t": (dt.datetime(1, 1, 1, tzinfo=utc), dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=utc), 1),
                           "b": (b"\x00\xff", b"\xff", 0), "day": (dt.date(1, 1, 1), dt.date(9999, 12, 31), 0),
                           "s": ("ä/", "日本", 2)}),
        FileStats(1, 7, {"d": (None, None, 1), "t": (None, None, 1), "b": (None, None, 1), "day": (None, None, 1),
                         "s": (None, None, 1)}),
    ]
    return schema, stats_table(["p=1/a", "p=2/b"], stats, schema)


def _entry(add=None, remove=()):
    """A log entry's ``actions`` as the commit writes them, through JSON."""
    return json.loads(json.dumps(encode_actions(DatasetMetadata.new("d"), add=add, remove=remove)))


def test_actions_round_trip_through_json_with_exact_types():
    _, stats = _typed_stats()
    add = FileTable.from_partitions(files(["p=1/a", "p=2/b"], "x"), stats).table
    back = decode_actions(_entry(add, ("p=0/z",)), dataset_uuid="d", where="version 3")
    assert back.add is not None and back.add.table.equals(add)
    assert back.add.table.schema.equals(add.schema)
    assert back.remove == ("p=0/z",) and back.reset is False and isinstance(back.state, dict)


def test_statistics_survive_the_file_table():
    _, stats = _typed_stats()
    ft = FileTable.from_partitions({"p=2/b": {"table": "k2"}, "p=1/a": {"table": "k1"}}, stats)
    assert ft.table.column("key").to_pylist() == ["k2", "k1"]  # the metadata's order
    got = ft.stats().sort_by("label")
    assert got.equals(stats.sort_by("label"))


def test_a_one_file_append_encodes_in_constant_size():
    """Format 2's point: a commit's bytes do not grow with the dataset."""
    _, stats = _typed_stats()
    one = FileTable.from_partitions(files(["p=9/new"], "x"), stats.slice(0, 1).set_column(
        0, "label", pa.array(["p=9/new"]))).table
    sizes = []
    for n in (10, 10_000):
        base = FileTable.from_partitions(files([f"p={i}/f" for i in range(n)], "x"))
        after = base.apply(Actions(add=one))
        assert len(after) == n + 1
        sizes.append(len(json.dumps(_entry(one))))
    assert sizes[0] == sizes[1] < 8192


@pytest.mark.parametrize("change, match", [
    (lambda raw: [], "must be a mapping"),
    (lambda raw: {**raw, "state": 5}, "state must be a mapping"),
    (lambda raw: {**raw, "remove": "p=1"}, "remove must be a list"),
    (lambda raw: {**raw, "remove": [1]}, "remove must be a list"),
    (lambda raw: {**raw, "reset": "yes"}, "reset must be true or false"),
    (lambda raw: {**raw, "index": 5}, "index must be a mapping"),
    (lambda raw: {**raw, "add": 5}, "base64 text"),
    (lambda raw: {**raw, "add": "not base64!"}, "not an Arrow IPC stream"),
    (lambda raw: {**raw, "add": "AAAA"}, "not an Arrow IPC stream"),
])
def test_damaged_actions_are_named(change, match):
    with pytest.raises(CorruptMetadataError, match=f"version 7: actions.*{match}|version 7: {match}"):
        decode_actions(change(_entry()), dataset_uuid="d", where="version 7")


def test_actions_with_wrong_columns_are_damage():
    wrong = pa.table({"key": ["d/a"], "label": ["b"], "table": ["t"]})
    with pytest.raises(CorruptMetadataError, match="label, table, key"):
        decode_actions(_entry(wrong), dataset_uuid="d", where="v")
    nulls = pa.table({"label": [None], "table": ["t"], "key": ["d/k"]},
                     schema=pa.schema([("label", pa.string()), ("table", pa.string()), ("key", pa.string())]))
    with pytest.raises(CorruptMetadataError, match="null"):
        decode_actions(_entry(nulls), dataset_uuid="d", where="v")
    outside = pa.table({"label": ["a"], "table": ["t"], "key": ["other/k"]})
    with pytest.raises(CorruptMetadataError, match="not a key inside dataset 'd'"):
        decode_actions(_entry(outside), dataset_uuid="d", where="v")


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                        st.sampled_from(["add", "remove", "state", "reset", "index", "x"]), inner, max_size=4),
                    max_leaves=12))
def test_decoding_junk_raises_only_corrupt_metadata(raw):
    try:
        decode_actions(raw, dataset_uuid="d", where="v")
    except CorruptMetadataError:
        pass


KEY_CHARS = st.sampled_from(list("ab9=_-%") + ["/", ".", "\\", "\x00", "é"])


@given(st.lists(st.text(KEY_CHARS, max_size=12), min_size=1, max_size=12))
@settings(max_examples=400)
def test_the_key_byte_screen_never_misses_an_odd_key(suffixes):
    """The byte screen that spares the exact key check on every open may flag a clean key,
    never miss a key the exact check (the regex) calls odd."""
    import re

    import kstore.core.filetable as ft
    from kstore.core.filetable import _BAD_KEY, _maybe_odd

    keys = pa.array(["ds/" + s for s in suffixes], pa.string())
    sliced = keys.slice(1)  # an array with an offset reads the same bytes
    saved = ft._SCREEN_CHUNK
    try:
        for chunk in (saved, 3, 1):  # patterns across chunk borders too
            ft._SCREEN_CHUNK = chunk
            if any(re.search(_BAD_KEY, k) for k in keys.to_pylist()):
                assert _maybe_odd(keys)
            if any(re.search(_BAD_KEY, k) for k in sliced.to_pylist()):
                assert _maybe_odd(sliced)
    finally:
        ft._SCREEN_CHUNK = saved


VALUE_KINDS = {
    "int": (st.integers(-50, 50), pa.int64()),
    "str": (st.text(alphabet="aZé9/_", max_size=3), pa.string()),
    "date": (st.dates(min_value=dt.date(1, 1, 1), max_value=dt.date(9999, 12, 31)), pa.date32()),
    "decimal": (st.decimals(-100, 100, places=2, allow_nan=False, allow_infinity=False), pa.decimal128(9, 2)),
}


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(sorted(VALUE_KINDS)), st.data())
def test_index_lists_from_sorted_reports_equal_the_general_path(kind, data):
    """The commit takes writers' sorted distinct values as idx: lists directly; for any
    reports (sorted or not, duplicates, unknown files, empty files) the lists equal those the
    general path (an inverted index built and read back) gives."""
    from kstore.core import filetable

    values, vtype = VALUE_KINDS[kind]
    n = data.draw(st.integers(1, 6))
    per_file = []
    for _ in range(n):
        raw = data.draw(st.none() | st.lists(values, max_size=5))
        if raw is None:
            per_file.append(None)
            continue
        if data.draw(st.booleans()):  # what writers report: distinct, sorted
            raw = sorted(set(raw))
        per_file.append(pa.array(raw, vtype))
    labels = [f"p={i}/f" for i in range(n)]
    schema = pa.schema([("v", vtype)])

    def rows_of(fast: bool) -> pa.Table:
        real = filetable.sorted_value_lists
        if not fast:
            filetable.sorted_value_lists = lambda *a: None
        try:
            return filetable.file_rows(labels, ["t"] * n, [f"d/t/{lab}.parquet" for lab in labels],
                                       [None] * n, schema, {"v": per_file})
        finally:
            filetable.sorted_value_lists = real

    got, want = rows_of(True).column("idx:v"), rows_of(False).column("idx:v")
    assert got.to_pylist() == want.to_pylist() and got.type.equals(want.type)
    taken = filetable.sorted_value_lists(per_file, vtype)
    if all(a is None or a.to_pylist() == sorted(set(a.to_pylist())) for a in per_file) and any(
            a is not None for a in per_file):
        assert taken is not None  # sorted distinct reports take the fast path
