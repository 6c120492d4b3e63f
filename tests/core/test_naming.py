"""Unit and property tests for kstore.core.naming (keys, quoting, labels, validation)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kstore.core import naming
from kstore.core.naming import (
    build_label,
    common_metadata_key,
    data_key,
    dataset_prefix,
    dataset_uuid_from_metadata_key,
    index_key,
    index_timestamp,
    label_from_data_key,
    log_key,
    log_prefix,
    metadata_key,
    parse_label,
    quote,
    stats_key,
    table_prefix,
    unquote,
    validate_dataset_key,
    validate_key,
    validate_name,
    version_from_log_key,
)
from kstore.errors import CorruptMetadataError, InvalidKeyError, KstoreError

SETTINGS = settings(max_examples=200, deadline=None)
SAFE_RE = re.compile(r"^[A-Za-z0-9_.\-~%]*$")

# -- quote / unquote ----------------------------------------------------------------------


@SETTINGS
@given(st.text())
def test_quote_unquote_round_trip(text):
    assert unquote(quote(text)) == text


@SETTINGS
@given(st.text())
def test_quote_uses_only_safe_characters(text):
    q = quote(text)
    assert SAFE_RE.match(q), q
    # '/', '=' and '%' never survive unescaped: a quoted value is one key component
    assert "/" not in q and "=" not in q
    # every '%' starts a valid escape
    assert re.fullmatch(r"(?:[A-Za-z0-9_.\-~]|%[0-9A-F]{2})*", q), q


@SETTINGS
@given(st.text(alphabet="ABCXYZabcxyz0189_.-~"))
def test_quote_leaves_unreserved_characters_alone(text):
    assert quote(text) == text


@pytest.mark.parametrize(
    "raw, quoted",
    [
        ("a b/c=d%", "a%20b%2Fc%3Dd%25"),
        ("/", "%2F"),
        ("=", "%3D"),
        ("%", "%25"),
        ("", ""),
        ("ä", "%C3%A4"),
        ("€", "%E2%82%AC"),
        ("a+b", "a%2Bb"),
        ("x:y", "x%3Ay"),
        ("\\", "%5C"),
        ("\x00", "%00"),
    ],
)
def test_quote_examples(raw, quoted):
    assert quote(raw) == quoted
    assert unquote(quoted) == raw


def test_unquote_rejects_invalid_utf8():
    with pytest.raises(CorruptMetadataError, match="%FF"):
        unquote("%FF")
    with pytest.raises(CorruptMetadataError):
        unquote("a%C3")


def test_unquote_does_not_turn_plus_into_space():
    assert unquote("a+b") == "a+b"


# -- labels -------------------------------------------------------------------------------

COLUMN_NAMES = st.text(min_size=1, max_size=8)
VALUES = st.text(max_size=12) | st.sampled_from(["/", "=", "%", "a/b", "a=b", "%2F", "..", ".", "", " ", "ü/é"])
FILE_IDS = st.from_regex(r"[A-Za-z0-9_+\-.]{1,20}", fullmatch=True).filter(lambda s: s not in (".", ".."))


@st.composite
def label_inputs(draw):
    cols = draw(st.lists(COLUMN_NAMES, min_size=0, max_size=3, unique=True))
    vals = [draw(VALUES) for _ in cols]
    return list(zip(cols, vals)), draw(FILE_IDS)


@SETTINGS
@given(label_inputs())
def test_build_parse_label_round_trip(inp):
    pairs, file_id = inp
    label = build_label(pairs, file_id)
    values, fid = parse_label(label, [c for c, _ in pairs])
    assert values == tuple(v for _, v in pairs)
    assert fid == file_id
    # one component per partition column plus the id: values never add separators
    assert label.count("/") == len(pairs)
    validate_key(f"ds/table/{label}.parquet")


def test_build_label_example():
    assert build_label([("region", "a b/c"), ("day", "2024-01-01")], "f00") == "region=a%20b%2Fc/day=2024-01-01/f00"
    assert build_label([], "f00") == "f00"


def test_empty_string_value_round_trips_as_empty_string():
    # Decision: an empty string is a legal partition value; it is encoded as 'col=' and
    # decodes back to '' (not to None, not dropped).
    label = build_label([("a", ""), ("b", "x")], "id")
    assert label == "a=/b=x/id"
    assert parse_label(label, ["a", "b"]) == (("", "x"), "id")
    label = build_label([("a", "")], "id")
    assert parse_label(label, ["a"]) == (("",), "id")


@pytest.mark.parametrize(
    "label, keys, expected",
    [
        # kartothek's slash bug: '/' left unescaped in the value
        ("region=a%20b/c%3Dd%25/id", ["region"], (("a b/c=d%",), "id")),
        ("region=a/b/c/id", ["region"], (("a/b/c",), "id")),
        ("region=x/y/day=2024-01-01/id", ["region", "day"], (("x/y", "2024-01-01"), "id")),
        ("region=/x/id", ["region"], (("/x",), "id")),
        ("region=a//id", ["region"], (("a/",), "id")),
        # properly escaped '/'
        ("region=a%2Fb/id", ["region"], (("a/b",), "id")),
    ],
)
def test_parse_label_kartothek_slash_bug(label, keys, expected):
    assert parse_label(label, keys) == expected


@pytest.mark.parametrize(
    "label, keys",
    [
        ("a=1/", ["a"]),  # no file id
        ("", []),  # nothing at all
        ("x/id", []),  # a component that is no col=value pair
        ("a=1/id", ["b"]),  # wrong column
        ("a=1/b=2/id", ["b", "a"]),  # wrong order
        ("a=1/id", []),  # more columns than expected
        ("id", ["a"]),  # fewer columns than expected
        ("a=%FF/id", ["a"]),  # undecodable value
    ],
)
def test_parse_label_rejects_corrupt_labels(label, keys):
    with pytest.raises(CorruptMetadataError):
        parse_label(label, keys)


@pytest.mark.parametrize("file_id", ["", ".", "..", "a/b", "a b", "a=b", "a%b", "ä"])
def test_build_label_rejects_bad_file_ids(file_id):
    with pytest.raises(InvalidKeyError):
        build_label([("a", "1")], file_id)


# -- validation ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["sales", "a", "A-1_b+c", "x.y", "_x", "-x", "+x", "0", "uuid-1234.v2", "a" * 200],
)
def test_validate_name_accepts(name):
    assert validate_name(name) == name


@pytest.mark.parametrize(
    "name",
    [
        "",
        ".",
        "..",
        "../etc",
        "a/b",
        "/abs",
        ".hidden",
        "a..b",
        "a\\b",
        "a\x00b",
        "a b",
        "ä",
        "x.by-dataset-metadata",
        "by-dataset-metadata",
        None,
        1,
        b"sales",
    ],
)
def test_validate_name_rejects(name):
    with pytest.raises(InvalidKeyError):
        validate_name(name)


def test_validate_name_error_is_value_error_and_kstore_error():
    with pytest.raises(ValueError) as exc:
        validate_name("../etc", "table name")
    assert isinstance(exc.value, KstoreError)
    assert "table name" in str(exc.value) and "'../etc'" in str(exc.value)


@pytest.mark.parametrize(
    "key",
    [
        "a",
        "ds/table/x=1/a.parquet",
        "ds.by-dataset-metadata.json",
        "ds/indices/c/2024-01-01T00%3A00%3A00.000000.by-dataset-index.parquet",
        "ds/table/x=a%2Fb/y=%3D/id.parquet",
        "a/.b/c",  # dot files are fine, only '.' and '..' components are not
        "a/b../c",
        "a/...",
        "ä/ö",
    ],
)
def test_validate_key_accepts(key):
    assert validate_key(key) == key


@pytest.mark.parametrize(
    "key",
    [
        "",
        "/",
        "/etc/passwd",
        "a//b",
        "a/",
        "./a",
        "a/./b",
        "..",
        "../a",
        "a/../b",
        "a/..",
        "a\\b",
        "..\\a",
        "a\x00b",
        None,
        b"a/b",
        3,
    ],
)
def test_validate_key_rejects_traversal(key):
    with pytest.raises(InvalidKeyError):
        validate_key(key)


@SETTINGS
@given(st.lists(st.text(min_size=1, max_size=5), min_size=1, max_size=5))
def test_validate_key_accepts_exactly_safe_component_lists(components):
    key = "/".join(components)
    parts = key.split("/")
    bad = any(c in ("", ".", "..") or "\\" in c or "\x00" in c for c in parts)
    if bad:
        with pytest.raises(InvalidKeyError):
            validate_key(key)
    else:
        assert validate_key(key) == key


def test_validate_dataset_key():
    assert validate_dataset_key("ds", "ds/table/a.parquet") == "ds/table/a.parquet"
    with pytest.raises(CorruptMetadataError, match="outside"):
        validate_dataset_key("ds", "other/table/a.parquet")
    with pytest.raises(CorruptMetadataError):
        validate_dataset_key("ds", "ds2/table/a.parquet")  # prefix must end at '/'
    with pytest.raises(InvalidKeyError):
        validate_dataset_key("ds", "ds/../other/a.parquet")
    with pytest.raises(InvalidKeyError):
        validate_dataset_key("ds", "/ds/a")


# -- key shapes (FORMAT.md) ---------------------------------------------------------------


def test_metadata_key_shapes():
    assert metadata_key("ds") == "ds.by-dataset-metadata.json"
    assert metadata_key("ds", "json") == "ds.by-dataset-metadata.json"
    assert metadata_key("ds", "msgpack.zstd") == "ds.by-dataset-metadata.msgpack.zstd"
    assert naming.METADATA_FORMATS == ("json", "msgpack.zstd")  # json first
    with pytest.raises(InvalidKeyError):
        metadata_key("ds", "yaml")
    with pytest.raises(InvalidKeyError):
        metadata_key("../ds")


@pytest.mark.parametrize("fmt", ["json", "msgpack.zstd"])
def test_dataset_uuid_from_metadata_key_round_trip(fmt):
    assert dataset_uuid_from_metadata_key(metadata_key("my-ds.1", fmt)) == "my-ds.1"


@pytest.mark.parametrize(
    "key",
    ["ds/table/x.parquet", "ds.json", "x/ds.by-dataset-metadata.json", "ds.by-dataset-metadata.jsonx"],
)
def test_dataset_uuid_from_metadata_key_none(key):
    assert dataset_uuid_from_metadata_key(key) is None


def test_table_keys():
    assert dataset_prefix("ds") == "ds/"
    assert table_prefix("ds") == "ds/table/"
    assert common_metadata_key("ds") == "ds/table/_common_metadata"
    assert common_metadata_key("ds", "other") == "ds/other/_common_metadata"
    assert data_key("ds", "table", "x=1/abc") == "ds/table/x=1/abc.parquet"
    with pytest.raises(InvalidKeyError):
        common_metadata_key("ds", "a/b")
    with pytest.raises(InvalidKeyError):
        data_key("ds", "table", "../../etc/abc")


@SETTINGS
@given(label_inputs())
def test_data_key_label_round_trip(inp):
    pairs, file_id = inp
    label = build_label(pairs, file_id)
    key = data_key("ds", "table", label)
    assert key.startswith("ds/table/") and key.endswith(".parquet")
    assert label_from_data_key("ds", "table", key) == label
    assert label_from_data_key("ds", "other", key) is None
    assert label_from_data_key("ds", "table", "ds/table/_common_metadata") is None


def test_index_key_shape():
    key = index_key("ds", "col", "2024-01-02T03:04:05.000006")
    assert key == "ds/indices/col/2024-01-02T03%3A04%3A05.000006.by-dataset-index.parquet"
    validate_dataset_key("ds", key)
    # the column is quoted into one component
    key = index_key("ds", "a/b c", "2024-01-02T03:04:05.000006")
    assert key.split("/")[2] == "a%2Fb%20c"
    assert key.count("/") == 3
    assert naming.METADATA_MARKER not in key


def test_index_key_fresh_timestamp_format():
    key = index_key("ds", "c")
    m = re.fullmatch(r"ds/indices/c/(.*)\.by-dataset-index\.parquet", key)
    assert m
    ts = unquote(m.group(1))
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}", ts), ts


def test_index_timestamp_is_utc():
    now = datetime(2024, 5, 6, 12, 30, 1, 7, tzinfo=timezone(timedelta(hours=2)))
    assert index_timestamp(now) == "2024-05-06T10:30:01.000007"
    assert index_timestamp(datetime(2024, 1, 1, tzinfo=timezone.utc)) == "2024-01-01T00:00:00.000000"


@pytest.mark.parametrize("version", [0, 1, 7, 10**12, 10**19])
def test_log_key_shape_and_round_trip(version):
    key = log_key("ds", version)
    assert key == f"ds/_kstore/log/{version:020d}.json"
    assert key.startswith(log_prefix("ds")) and log_prefix("ds") == "ds/_kstore/log/"
    assert version_from_log_key("ds", key) == version
    validate_dataset_key("ds", key)


def test_log_keys_sort_like_versions():
    keys = [log_key("ds", v) for v in (0, 2, 10, 100, 99)]
    assert sorted(keys) == [log_key("ds", v) for v in (0, 2, 10, 99, 100)]


@pytest.mark.parametrize("version", [-1, 1.0, "1", None])
def test_log_key_rejects_bad_versions(version):
    with pytest.raises(InvalidKeyError):
        log_key("ds", version)


@pytest.mark.parametrize(
    "key",
    ["ds/_kstore/log/abc.json", "ds/_kstore/log/1.msgpack", "other/_kstore/log/00000000000000000001.json",
     "ds/_kstore/stats/1.json"],
)
def test_version_from_log_key_none(key):
    assert version_from_log_key("ds", key) is None


def test_stats_key_shape():
    assert stats_key("ds", "abc") == "ds/_kstore/stats/abc.parquet"
    fresh = stats_key("ds")
    assert re.fullmatch(r"ds/_kstore/stats/[A-Za-z0-9_+\-.]+\.parquet", fresh)
    assert stats_key("ds") != fresh
    validate_dataset_key("ds", fresh)


def test_new_file_id_unique_and_usable_in_labels():
    ids = {naming.new_file_id() for _ in range(200)}
    assert len(ids) == 200
    for i in ids:
        assert build_label([("a", "1")], i).endswith("/" + i)
        validate_name(i, "file id")


def test_new_file_id_time_round_trip():
    fid = naming.new_file_id(now=1_700_000_000.123)
    assert naming.file_id_time(f"ds/table/x=1/{fid}.parquet") == pytest.approx(1_700_000_000.123, abs=1e-3)
    assert naming.file_id_time("ds/table/x=1/0123456789abcdef0123456789abcdef.parquet") is None


# -- hostile names (issue #11) -----------------------------------------------------------------


@pytest.mark.parametrize("name", ["ds\n", "ds\r\n", "\nds", "a\tb", "ds\x0b"])
def test_validate_name_rejects_control_characters_at_either_end(name):
    with pytest.raises(InvalidKeyError):
        validate_name(name)
    with pytest.raises(InvalidKeyError):
        naming.build_label([], name)


def test_version_from_log_key_only_takes_ascii_digits():
    assert naming.version_from_log_key("ds", "ds/_kstore/log/" + "\u0663" * 20 + ".json") is None  # Arabic-Indic 3
    assert naming.version_from_log_key("ds", "ds/_kstore/log/" + "\u00b2" + ".json") is None  # superscript 2


def test_longest_names_and_values_that_fit_a_key_component():
    from kstore.errors import LimitExceededError

    assert naming.MAX_NAME_BYTES == 255
    longest_uuid = "u" * (255 - len(naming.METADATA_SUFFIXES["msgpack.zstd"]))
    for fmt in naming.METADATA_FORMATS:
        assert naming.metadata_key(longest_uuid, fmt).startswith(longest_uuid)
    with pytest.raises(LimitExceededError, match=r"dataset uuid 'u+.*256 bytes.*limit is 255 \(MAX_NAME_BYTES"):
        naming.metadata_key(longest_uuid + "u", "msgpack.zstd")
    assert naming.table_prefix("ds", "t" * 255) == "ds/" + "t" * 255 + "/"
    with pytest.raises(LimitExceededError, match="table name"):
        naming.table_prefix("ds", "t" * 256)
    # a partition component '<quoted column>=<quoted value>': 30 x '€' is 270 bytes quoted
    euro = "€" * 30
    with pytest.raises(LimitExceededError, match=r"partition value '€+' of column 'p'.*MAX_NAME_BYTES"):
        naming.build_label([("p", euro)], "f")
    with pytest.raises(LimitExceededError, match="column '€€€"):
        naming.build_label([(euro, "1")], "f")
    assert naming.build_label([("p", "v" * 253)], "f") == "p=" + "v" * 253 + "/f"
    with pytest.raises(LimitExceededError, match="column '€€€"):
        naming.index_key("ds", euro)
    with pytest.raises(LimitExceededError, match="file id"):
        naming.data_key("ds", "table", "f" * 250)


def test_whole_keys_are_at_most_max_key_bytes():
    from kstore.errors import LimitExceededError

    assert naming.MAX_KEY_BYTES == 1024
    label = naming.build_label([(f"c{i}", "v" * 200) for i in range(5)], "f")
    with pytest.raises(LimitExceededError, match=r"1024 \(MAX_KEY_BYTES\)"):
        naming.data_key("ds", "table", label)


def test_check_write_columns_names_the_column_that_cannot_be_a_key_component():
    from kstore.errors import LimitExceededError

    naming.check_key_columns("ds", partition_on=["p"], index_columns=["x"])
    with pytest.raises(LimitExceededError, match="column '€€€"):
        naming.check_key_columns("ds", partition_on=["€" * 30], index_columns=[])
    with pytest.raises(LimitExceededError, match="column '€€€"):
        naming.check_key_columns("ds", partition_on=[], index_columns=["€" * 90])
