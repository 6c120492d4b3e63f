"""Unit and property tests for kstore.core.metadata (DatasetMetadata <-> on-disk dict)."""

from __future__ import annotations

import copy
import dataclasses
import json

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kstore.core import naming, serialize
from kstore.core.metadata import FORMAT_VERSION, KSTORE_FORMAT, DatasetMetadata
from kstore.errors import CorruptMetadataError, InvalidKeyError, KstoreError

SETTINGS = settings(max_examples=60, deadline=None)

# -- strategies ---------------------------------------------------------------------------

UUIDS = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_\-]{0,10}", fullmatch=True)
TABLE_NAMES = st.sampled_from(["table", "core", "other_1", "t-2"])
COLUMNS = st.text(min_size=1, max_size=6)
FILE_IDS = st.from_regex(r"[a-f0-9]{6}", fullmatch=True)

JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=10)
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12,
)
KNOWN_TOP = {"dataset_metadata_version", "dataset_uuid", "metadata", "partitions", "partition_keys", "indices", "kstore"}

SCHEMA_TYPES = st.sampled_from(
    [pa.int64(), pa.uint64(), pa.float64(), pa.string(), pa.binary(), pa.bool_(), pa.date32(),
     pa.timestamp("us"), pa.timestamp("us", "Europe/Berlin"), pa.list_(pa.string()), pa.null()]
)


@st.composite
def schemas(draw):
    names = draw(st.lists(COLUMNS, min_size=1, max_size=5, unique=True))
    return pa.schema([(n, draw(SCHEMA_TYPES)) for n in names])


@st.composite
def metadatas(draw):
    uuid = draw(UUIDS)
    pkeys = tuple(draw(st.lists(COLUMNS, max_size=2, unique=True)))
    tables = tuple(draw(st.lists(TABLE_NAMES, min_size=1, max_size=2, unique=True)))
    explicit = draw(st.sampled_from([True, True, True, False]))
    partitions = {}
    if explicit:
        for _ in range(draw(st.integers(0, 4))):
            vals = [(c, draw(st.text(max_size=6))) for c in pkeys]
            label = naming.build_label(vals, draw(FILE_IDS))
            partitions[label] = {t: naming.data_key(uuid, t, label) for t in tables}
    labels = list(partitions)
    sec_cols = draw(st.lists(COLUMNS, max_size=3, unique=True))
    indices = {}
    inline = {}
    for c in sec_cols:
        if draw(st.booleans()):
            indices[c] = naming.index_key(uuid, c, "2024-01-01T00:00:00.000000")
        else:
            inline[c] = {
                draw(st.text(max_size=4)): tuple(draw(st.lists(st.sampled_from(labels or ["x/1"]), max_size=3)))
                for _ in range(draw(st.integers(0, 3)))
            }
    extra = draw(
        st.dictionaries(st.text(min_size=1, max_size=8).filter(lambda k: k not in KNOWN_TOP), JSON_VALUES, max_size=3)
    )
    meta = DatasetMetadata(uuid=uuid, partition_keys=pkeys, tables=tables)
    meta = meta.evolve(
        indices=indices,
        inline_indices=inline,
        metadata=draw(st.dictionaries(st.text(max_size=8), JSON_VALUES, max_size=4)),
        version=draw(st.none() | st.integers(0, 10**12)),
        stats_key=draw(st.none() | FILE_IDS.map(lambda f: naming.stats_key(uuid, f))),
        schema=draw(st.none() | schemas()),
        txns=draw(st.dictionaries(st.text(max_size=6), st.integers(0, 10**9), max_size=3)),
        explicit_partitions=explicit,
        extra=extra,
    )
    # partitions are frozen per label like from_dict does
    return meta.with_partitions(partitions) if explicit else meta


def _assert_same(a: DatasetMetadata, b: DatasetMetadata) -> None:
    for f in dataclasses.fields(DatasetMetadata):
        va, vb = getattr(a, f.name), getattr(b, f.name)
        if f.name == "schema":
            assert (va is None) == (vb is None)
            if va is not None:
                assert va.equals(vb), (va, vb)
        else:
            assert va == vb, (f.name, va, vb)
    assert a == b


# -- round trips --------------------------------------------------------------------------


@SETTINGS
@given(metadatas())
def test_to_dict_from_dict_round_trip(meta):
    raw = meta.to_dict()
    back = DatasetMetadata.from_dict(raw, expected_uuid=meta.uuid)
    _assert_same(meta, back)
    # the dict is plain data
    json.dumps(raw)


@SETTINGS
@given(metadatas(), st.sampled_from(["json", "msgpack.zstd"]))
def test_bytes_round_trip(meta, fmt):
    data = serialize.dumps(meta.to_dict(), fmt)
    back = DatasetMetadata.from_dict(serialize.loads(data, fmt), expected_uuid=meta.uuid)
    _assert_same(meta, back)


@SETTINGS
@given(metadatas())
def test_to_dict_follows_format_version_4(meta):
    raw = meta.to_dict()
    assert raw["dataset_metadata_version"] == FORMAT_VERSION == 4
    assert raw["dataset_uuid"] == meta.uuid
    assert raw["partition_keys"] == list(meta.partition_keys)
    assert isinstance(raw["metadata"], dict)
    if meta.explicit_partitions:
        for label, entry in raw["partitions"].items():
            assert set(entry) == {"files"}
            for table, key in entry["files"].items():
                assert key == naming.data_key(meta.uuid, table, label)
    else:
        assert "partitions" not in raw
    for ref in raw["indices"].values():
        assert isinstance(ref, (str, dict))
    assert raw["kstore"]["format"] == KSTORE_FORMAT
    assert raw["kstore"]["version"] == meta.version
    for k, v in meta.extra.items():
        assert raw[k] == v


def test_doc_example():
    m = DatasetMetadata.new("sales", partition_keys=("day",))
    m = m.with_partitions({"day=2024-01-01/a": {"table": "sales/table/day=2024-01-01/a.parquet"}})
    assert DatasetMetadata.from_dict(m.to_dict()) == m


# -- kartothek inputs ---------------------------------------------------------------------

KARTOTHEK_SLASH = {
    "dataset_metadata_version": 4,
    "dataset_uuid": "pub_slash_value",
    "metadata": {"creation_time": "2026-11-22T05:54:02.087962"},
    "partitions": {
        "region=a%20b/c%3Dd%25/f9c6": {"files": {"table": "pub_slash_value/table/region=a%20b/c%3Dd%25/f9c6.parquet"}},
        "region=plain/f9c6": {"files": {"table": "pub_slash_value/table/region=plain/f9c6.parquet"}},
    },
    "partition_keys": ["region"],
}


def test_kartothek_metadata_is_read():
    meta = DatasetMetadata.from_dict(KARTOTHEK_SLASH, expected_uuid="pub_slash_value")
    assert meta.uuid == "pub_slash_value"
    assert meta.partition_keys == ("region",)
    assert set(meta.partitions) == set(KARTOTHEK_SLASH["partitions"])
    assert meta.tables == ("table",)
    assert meta.version is None and meta.schema is None
    assert meta.explicit_partitions
    assert meta.metadata["creation_time"] == "2026-11-22T05:54:02.087962"
    assert meta.file_key("region=plain/f9c6") == "pub_slash_value/table/region=plain/f9c6.parquet"
    assert naming.parse_label("region=a%20b/c%3Dd%25/f9c6", meta.partition_keys)[0] == ("a b/c=d%",)
    # writing it back keeps the kartothek keys
    raw = meta.to_dict()
    for k in KARTOTHEK_SLASH:
        assert raw[k] == KARTOTHEK_SLASH[k]


def test_dict_without_partitions_is_implicit():
    raw = {"dataset_metadata_version": 4, "dataset_uuid": "e", "metadata": {"empty": True}, "partition_keys": ["p"]}
    meta = DatasetMetadata.from_dict(raw)
    assert meta.explicit_partitions is False
    assert dict(meta.partitions) == {}
    assert "partitions" not in meta.to_dict()
    # an explicit empty mapping is explicit
    meta2 = DatasetMetadata.from_dict({**raw, "partitions": {}})
    assert meta2.explicit_partitions is True
    assert meta2.to_dict()["partitions"] == {}
    # adding partitions makes them explicit
    assert meta.with_partitions({"p=1/a": {"table": "e/table/p=1/a.parquet"}}).explicit_partitions


def test_kartothek_inline_index_is_accepted():
    raw = {
        "dataset_metadata_version": 4,
        "dataset_uuid": "ds",
        "metadata": {},
        "partitions": {"a": {"files": {"table": "ds/table/a.parquet"}}, "b": {"files": {"table": "ds/table/b.parquet"}}},
        "partition_keys": [],
        "indices": {
            "x": {"1": ["a", "b"], "2": ["b"]},
            "y": "ds/indices/y/2024-01-01T00%3A00%3A00.000000.by-dataset-index.parquet",
        },
    }
    meta = DatasetMetadata.from_dict(raw)
    assert dict(meta.inline_indices["x"]) == {"1": ("a", "b"), "2": ("b",)}
    assert dict(meta.indices) == {"y": raw["indices"]["y"]}
    assert meta.index_columns == ("x", "y")
    # inline indices reference no files
    assert meta.referenced_keys() == {"ds/table/a.parquet", "ds/table/b.parquet", raw["indices"]["y"]}
    # written back in the same inline form
    assert meta.to_dict()["indices"] == raw["indices"]


def test_kartothek_metadata_exposes_a_file_table_with_external_stats_and_indices():
    """Issue #30: a format-1 (kartothek) version has the one in-memory form, a file table
    with its partitions' labels and keys; ``columnar`` says its statistics and indices are
    files of their own. Nothing else about it changes: to_dict is the same, key order
    included, and a pickle keeps it format 1."""
    import pickle

    raw = copy.deepcopy(KARTOTHEK_SLASH)
    raw["indices"] = {"x": "pub_slash_value/indices/x/t.by-dataset-index.parquet", "y": {"1": ["region=plain/f9c6"]}}
    meta = DatasetMetadata.from_dict(raw, expected_uuid="pub_slash_value")
    assert meta.columnar is False
    files = meta.files
    assert files is meta.files  # built once, on first use
    assert files.labels.to_pylist() == list(raw["partitions"]) == list(meta.partitions)
    assert files.table.column("table").to_pylist() == ["table", "table"]
    assert files.partitions() == {lab: dict(e["files"]) for lab, e in raw["partitions"].items()}
    assert not any(c.startswith(("rows", "idx:")) for c in files.table.column_names)  # external: not in it
    out = meta.to_dict()
    assert list(out) == ["dataset_metadata_version", "dataset_uuid", "metadata", "partition_keys", "partitions",
                         "indices", "kstore"]
    assert json.dumps(out["partitions"]) == json.dumps(raw["partitions"])  # in the file's order
    assert out["indices"] == {"y": {"1": ["region=plain/f9c6"]}, "x": raw["indices"]["x"]}
    back = pickle.loads(pickle.dumps(meta))
    assert back == meta and back.columnar is False and back.files.partitions() == files.partitions()
    # edits keep the form; only a file table with statistics and index values is columnar
    edited = meta.with_partitions({"region=new/f1": {"table": "pub_slash_value/table/region=new/f1.parquet"}},
                                  removed=["region=plain/f9c6"])
    assert edited.columnar is False and list(edited.partitions) == ["region=a%20b/c%3Dd%25/f9c6", "region=new/f1"]
    assert meta.with_files(files).columnar is True
    assert pickle.loads(pickle.dumps(meta.with_files(files))).columnar is True
    # several tables per partition: one row per file
    multi = DatasetMetadata.from_dict({"dataset_metadata_version": 4, "dataset_uuid": "ds", "partitions": {
        "a": {"files": {"core": "ds/core/a.parquet", "helper": "ds/helper/a.parquet"}},
        "b": {"files": {"core": "ds/core/b.parquet"}}}})
    assert multi.files.table.to_pydict() == {"label": ["a", "a", "b"], "table": ["core", "helper", "core"],
                                             "key": ["ds/core/a.parquet", "ds/helper/a.parquet", "ds/core/b.parquet"]}
    assert DatasetMetadata.new("ds").files.table.num_rows == 0 and DatasetMetadata.new("ds").columnar is False


def test_partition_entry_without_files_wrapper_is_accepted():
    raw = {"dataset_metadata_version": 4, "dataset_uuid": "ds", "partitions": {"a": {"table": "ds/table/a.parquet"}}}
    meta = DatasetMetadata.from_dict(raw)
    assert meta.file_key("a") == "ds/table/a.parquet"


def test_unknown_top_level_keys_are_preserved():
    raw = copy.deepcopy(KARTOTHEK_SLASH)
    raw["future_key"] = {"nested": [1, 2, {"x": None}]}
    raw["plateau_thing"] = "v"
    meta = DatasetMetadata.from_dict(raw)
    assert meta.extra == {"future_key": {"nested": [1, 2, {"x": None}]}, "plateau_thing": "v"}
    out = meta.to_dict()
    assert out["future_key"] == raw["future_key"]
    assert out["plateau_thing"] == "v"
    # and survive an edit
    out2 = meta.with_partitions({}, removed=["region=plain/f9c6"]).to_dict()
    assert out2["future_key"] == raw["future_key"]


def test_tables_derived_from_partitions():
    raw = {"dataset_metadata_version": 4, "dataset_uuid": "ds",
           "partitions": {"a": {"files": {"core": "ds/core/a.parquet", "helper": "ds/helper/a.parquet"}}}}
    meta = DatasetMetadata.from_dict(raw)
    assert meta.tables == ("core", "helper")
    assert meta.table == "core"
    assert meta.file_key("a", "helper") == "ds/helper/a.parquet"
    with pytest.raises(CorruptMetadataError):
        meta.file_key("a", "nope")
    with pytest.raises(CorruptMetadataError):
        meta.file_key("zzz")


# -- corrupt inputs -----------------------------------------------------------------------

GOOD = {
    "dataset_metadata_version": 4,
    "dataset_uuid": "ds",
    "metadata": {},
    "partitions": {"p=1/a": {"files": {"table": "ds/table/p=1/a.parquet"}}},
    "partition_keys": ["p"],
    "indices": {"x": "ds/indices/x/t.by-dataset-index.parquet"},
    "kstore": {"format": 1, "version": 3, "tables": ["table"], "stats": "ds/_kstore/stats/s.parquet",
               "schema": None, "txns": {"app": 2}},
}


def _with(**changes):
    raw = copy.deepcopy(GOOD)
    for k, v in changes.items():
        if v is _DROP:
            raw.pop(k)
        else:
            raw[k] = v
    return raw


_DROP = object()

CORRUPT = {
    "version 3": _with(dataset_metadata_version=3),
    "version 5": _with(dataset_metadata_version=5),
    "version str": _with(dataset_metadata_version="4"),
    "no version": _with(dataset_metadata_version=_DROP),
    "no uuid": _with(dataset_uuid=_DROP),
    "uuid not str": _with(dataset_uuid=5),
    "uuid traversal": _with(dataset_uuid="../ds"),
    "uuid with slash": _with(dataset_uuid="a/b"),
    "partition key outside prefix": _with(partitions={"p=1/a": {"files": {"table": "other/table/p=1/a.parquet"}}}),
    "partition key traversal": _with(partitions={"p=1/a": {"files": {"table": "ds/../other/a.parquet"}}}),
    "partition key absolute": _with(partitions={"p=1/a": {"files": {"table": "/ds/table/a.parquet"}}}),
    "partition key not str": _with(partitions={"p=1/a": {"files": {"table": 5}}}),
    "partition no files": _with(partitions={"p=1/a": {"files": {}}}),
    "partition entry not mapping": _with(partitions={"p=1/a": ["ds/table/a.parquet"]}),
    "partitions a list": _with(partitions=["p=1/a"]),
    "index outside prefix": _with(indices={"x": "elsewhere/indices/x/t.parquet"}),
    "index traversal": _with(indices={"x": "ds/indices/../../etc"}),
    "index not key nor inline": _with(indices={"x": 5}),
    "inline index labels not a list": _with(indices={"x": {"1": 5}}),
    "stats outside prefix": _with(kstore={**GOOD["kstore"], "stats": "other/_kstore/stats/s.parquet"}),
    "bad table name": _with(kstore={**GOOD["kstore"], "tables": ["../x"]}),
    "kstore not mapping": _with(kstore="v1"),
    "kstore version not int": _with(kstore={**GOOD["kstore"], "version": "seven"}),
    "bad schema": _with(kstore={**GOOD["kstore"], "schema": "bm90IGEgc2NoZW1h"}),
    "schema not base64": _with(kstore={**GOOD["kstore"], "schema": "***"}),
    "txns not mapping": _with(kstore={**GOOD["kstore"], "txns": [1]}),
    "partition_keys not strings": _with(partition_keys=[1]),
    "partition_keys a string": _with(partition_keys="p"),
    "metadata not mapping": _with(metadata=[1, 2]),
    "metadata a string": _with(metadata="abc"),
}


def test_good_fixture_is_valid():
    meta = DatasetMetadata.from_dict(GOOD, expected_uuid="ds")
    assert meta.version == 3 and meta.stats_key == "ds/_kstore/stats/s.parquet"
    assert dict(meta.txns) == {"app": 2}
    assert meta.referenced_keys() == {"ds/table/p=1/a.parquet", "ds/indices/x/t.by-dataset-index.parquet",
                                      "ds/_kstore/stats/s.parquet"}


@pytest.mark.parametrize("name", list(CORRUPT))
def test_corrupt_dict_raises_corrupt_metadata_error(name):
    with pytest.raises(CorruptMetadataError):
        DatasetMetadata.from_dict(CORRUPT[name])


@pytest.mark.parametrize("raw", [None, [], "text", 4, b"{}", [("dataset_uuid", "ds")]])
def test_non_mapping_raises_corrupt_metadata_error(raw):
    with pytest.raises(CorruptMetadataError):
        DatasetMetadata.from_dict(raw, expected_uuid="ds")


def test_uuid_mismatch():
    with pytest.raises(CorruptMetadataError) as exc:
        DatasetMetadata.from_dict(GOOD, expected_uuid="other")
    assert "'other'" in str(exc.value) and "'ds'" in str(exc.value)


def test_wrong_version_message():
    with pytest.raises(CorruptMetadataError, match="dataset_metadata_version is 3"):
        DatasetMetadata.from_dict(_with(dataset_metadata_version=3), expected_uuid="ds")


def test_key_outside_prefix_message():
    with pytest.raises(CorruptMetadataError, match="outside"):
        DatasetMetadata.from_dict(CORRUPT["partition key outside prefix"])


@SETTINGS
@given(st.dictionaries(st.sampled_from(sorted(KNOWN_TOP)) | st.text(max_size=4), JSON_VALUES, max_size=6))
def test_from_dict_never_raises_anything_but_corrupt_metadata(raw):
    try:
        meta = DatasetMetadata.from_dict(raw)
    except CorruptMetadataError:
        return
    # whatever is accepted must be self-consistent
    for files in meta.partitions.values():
        for key in files.values():
            naming.validate_dataset_key(meta.uuid, key)


# -- the immutable model ------------------------------------------------------------------


def test_new_validates_names():
    with pytest.raises(InvalidKeyError):
        DatasetMetadata.new("../x")
    with pytest.raises(InvalidKeyError):
        DatasetMetadata.new("ok", tables=("a/b",))
    meta = DatasetMetadata.new("ok", partition_keys=["a", "b"], metadata={"k": 1})
    assert meta.partition_keys == ("a", "b") and meta.tables == ("table",) and meta.version is None


def test_metadata_is_immutable():
    meta = DatasetMetadata.new("ds", metadata={"k": 1})
    with pytest.raises(dataclasses.FrozenInstanceError):
        meta.uuid = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        meta.metadata["k"] = 2  # type: ignore[index]
    m2 = meta.with_partitions({"a": {"table": "ds/table/a.parquet"}})
    with pytest.raises(TypeError):
        m2.partitions["b"] = {}  # type: ignore[index]
    with pytest.raises(TypeError):
        m2.partitions["a"]["table"] = "x"  # type: ignore[index]
    assert dict(meta.partitions) == {}  # the original is unchanged
    given = {"a": {"table": "ds/table/a.parquet"}}
    built = DatasetMetadata("ds", partitions=given)  # a mapping given to the constructor
    given["a"]["table"] = "changed"
    with pytest.raises(TypeError):
        built.partitions["a"]["table"] = "x"  # type: ignore[index]
    assert built.partitions["a"]["table"] == "ds/table/a.parquet" and not built.columnar
    read = DatasetMetadata.from_dict({"dataset_metadata_version": 4, "dataset_uuid": "ds",
                                      "partitions": {"a": {"files": {"table": "ds/table/a.parquet"}}}})
    with pytest.raises(TypeError):
        read.partitions["a"]["table"] = "x"  # type: ignore[index]


def test_evolve_freezes_mappings():
    src = {"k": 1}
    meta = DatasetMetadata.new("ds").evolve(metadata=src, version=5)
    src["k"] = 2
    assert meta.metadata["k"] == 1
    assert meta.version == 5


def test_with_partitions_add_and_remove():
    meta = DatasetMetadata.new("ds").with_partitions(
        {"a": {"table": "ds/table/a.parquet"}, "b": {"table": "ds/table/b.parquet"}}
    )
    m2 = meta.with_partitions({"c": {"table": "ds/table/c.parquet"}}, removed=["a", "missing"])
    assert set(m2.partitions) == {"b", "c"}
    assert set(meta.partitions) == {"a", "b"}
    # replace a label's files
    m3 = m2.with_partitions({"b": {"table": "ds/table/b2.parquet"}}, removed=["b"])
    assert m3.file_key("b") == "ds/table/b2.parquet"


def test_index_columns_order():
    meta = DatasetMetadata.new("ds", partition_keys=("p", "q")).evolve(
        indices={"z": "ds/indices/z/t.by-dataset-index.parquet", "a": "ds/indices/a/t.by-dataset-index.parquet",
                 "p": "ds/indices/p/t.by-dataset-index.parquet"},
        inline_indices={"m": {"1": ("l",)}},
    )
    assert meta.index_columns == ("p", "q", "a", "m", "z")


# -- nesting limit (issue #11) ----------------------------------------------------------------


def _nested(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth - 1):
        value = {"k": value}
    return value


@pytest.mark.parametrize("where", ["metadata", "unknown_key"])
def test_user_metadata_nested_beyond_the_limit_is_refused(where):
    from kstore.errors import LimitExceededError

    raw = DatasetMetadata.new("d").to_dict()
    raw[where] = _nested(serialize.MAX_METADATA_DEPTH + 1)
    data = serialize.dumps(raw, "json")  # a file another writer could have written
    with pytest.raises(LimitExceededError, match=r"dataset 'd'.*32 levels"):
        DatasetMetadata.from_dict(serialize.loads(data, "json"), expected_uuid="d")


def test_user_metadata_at_the_nesting_limit_round_trips():
    meta = DatasetMetadata.new("d", metadata=_nested(serialize.MAX_METADATA_DEPTH))
    for fmt in ("json", "msgpack.zstd"):
        raw = serialize.loads(serialize.dumps(meta.to_dict(), fmt), fmt)
        assert DatasetMetadata.from_dict(raw, expected_uuid="d") == meta


@pytest.mark.parametrize("version", [-3, 1.5, "7", True])
def test_a_kstore_version_that_is_not_a_count_is_damage(version):
    raw = {**GOOD, "kstore": {"format": 1, "version": version}}
    with pytest.raises(CorruptMetadataError, match=r"dataset 'ds': kstore version must be an int >= 0"):
        DatasetMetadata.from_dict(raw, expected_uuid="ds")


def test_repr_is_one_readable_line():
    parts = {f"p={i}/f{i}": {"table": f"ds/table/p={i}/f{i}.parquet"} for i in range(5000)}
    meta = DatasetMetadata.new("ds", partition_keys=("p",)).with_partitions(parts).evolve(
        version=3, indices={"loc": "ds/indices/loc/x.by-dataset-index.parquet"})
    text = repr(meta)
    assert text == "DatasetMetadata(uuid='ds', version=3, partitions=5000, partition_keys=['p'], indices=['loc'], tables=['table'])"


def test_a_damaged_stored_schema_is_corrupt_metadata() -> None:
    """Every one-byte damage of the schema a state stores (base64 Arrow IPC) decodes or is a
    CorruptMetadataError: Arrow raises OSError, ArrowInvalid or ArrowNotImplementedError for
    damaged flatbuffers (an OSError escaped from a damaged checkpoint, found by the fuzz
    suite), and UnicodeDecodeError only when a damaged name or time zone is first read
    (what decodes must have readable names and time zones)."""
    import base64

    from kstore.core.metadata import _schema_from_text
    from kstore.core.types import decoded_schema, normalize_schema
    from kstore.errors import CorruptMetadataError

    raw = pa.schema([("x", pa.int64()), ("s", pa.string()), ("d", pa.date32()),
                     ("t", pa.timestamp("us", "Europe/Paris")), ("né", pa.list_(pa.timestamp("us", "UTC")))],
                    ).serialize().to_pybytes()
    refused = set()
    for i in range(len(raw)):
        for value in (0x00, 0x7F, 0xFE, 0xFF):  # 0xFE / 0xFF: never UTF-8 (in a name or a time zone)
            damaged = bytearray(raw)
            damaged[i] = value
            try:
                schema = _schema_from_text(base64.b64encode(bytes(damaged)).decode("ascii"), "ds")
            except CorruptMetadataError as exc:
                assert "'ds'" in str(exc) and "schema" in str(exc)
                refused.add(type(exc.__cause__).__name__)
                continue
            assert schema is not None
            decoded_schema(schema)  # what decodes has readable names and time zones
            try:
                normalize_schema(schema)
            except KstoreError:
                pass  # a type kstore does not store (UnsupportedTypeError) is refused clearly
    assert {"OSError", "ArrowInvalid", "ArrowNotImplementedError", "UnicodeDecodeError"} <= refused
    with pytest.raises(CorruptMetadataError):
        _schema_from_text(12, "ds")  # type: ignore[arg-type]
