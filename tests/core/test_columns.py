"""The column mapping (``kstore.core.columns``): pure properties of renames, drops and adds.

Tried to break: after any sequence of renames (swaps too), drops and adds, no two columns
share a file name, no column takes a file name a dropped column's values may still hold,
the writer's view (``ColumnNames``) names every column as the schema does, and the commit's
check refuses exactly the files written under another mapping.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kstore.core.columns import (
    ColumnNames,
    check_written_names,
    drop_columns,
    file_name,
    file_name_for,
    file_names,
    files_schema,
    rename_columns,
    renamed_dnf,
    retired_names,
    with_file_names,
    without_mapping,
)
from kstore.core.predicates import Term
from kstore.core.types import merge_schemas
from kstore.errors import CommitConflictError

NAMES = ["a", "b", "c", "d", "a__kstore1"]

step = st.one_of(
    st.tuples(st.just("rename"), st.dictionaries(st.sampled_from(NAMES), st.sampled_from(NAMES), min_size=1,
                                                 max_size=2)),
    st.tuples(st.just("drop"), st.lists(st.sampled_from(NAMES), min_size=1, max_size=2, unique=True)),
    st.tuples(st.just("add"), st.sampled_from(NAMES)),
)


def _add(schema: pa.Schema, name: str) -> pa.Schema:
    merged = merge_schemas(schema, pa.schema([*schema, pa.field(name, pa.int64())]), dataset="d", mode="merge")
    return with_file_names(merged, schema)


@settings(max_examples=300, deadline=None)
@given(steps=st.lists(step, max_size=12))
def test_file_names_stay_unique_and_never_reuse_a_dropped_one(steps):
    schema = pa.schema([("id", pa.int64()), ("a", pa.int64()), ("b", pa.int64())])
    ever_dropped: set[str] = set()
    for kind, arg in steps:
        try:
            if kind == "rename":
                if any(o not in schema.names for o in arg) or "id" in arg:
                    continue
                new = rename_columns(schema, arg, dataset="d", fixed=("id",))
            elif kind == "drop":
                if any(c not in schema.names for c in arg) or "id" in arg:
                    continue
                new = drop_columns(schema, arg, dataset="d", fixed=("id",))
                ever_dropped |= {file_name(schema.field(c)) for c in arg}
            else:
                if arg in schema.names:
                    continue
                new = _add(schema, arg)
                fresh = file_name(new.field(arg))
                assert fresh not in ever_dropped and fresh not in {file_name(f) for f in schema}
                assert fresh == file_name_for(schema, arg) == ColumnNames.of(schema).file_name(arg)
        except Exception as exc:  # only the documented refusals: a name taken, no column left
            assert type(exc).__name__ in ("SchemaMismatchError", "InvalidArgumentError"), exc
            continue
        schema = new
        stored = [file_name(f) for f in schema]
        assert len(stored) == len(set(stored)), schema
        assert not set(stored) & retired_names(schema)
        assert ever_dropped <= retired_names(schema)  # a dropped file name stays retired, never live again
        names = ColumnNames.of(schema)
        for f in schema:
            assert names.file_name(f.name) == file_name(f) == file_name_for(schema, f.name)
        assert files_schema(schema).names == stored


def test_swap_and_back():
    s = pa.schema([("a", pa.int64()), ("b", pa.string())])
    swapped = rename_columns(s, {"a": "b", "b": "a"}, dataset="d")
    assert swapped.names == ["b", "a"] and file_names(swapped) == {"b": "a", "a": "b"}
    assert file_names(rename_columns(swapped, {"a": "b", "b": "a"}, dataset="d")) == {}
    assert without_mapping(swapped).names == ["b", "a"] and file_names(without_mapping(swapped)) == {}


def test_pandas_metadata_follows_a_rename_and_a_drop():
    import pandas as pd

    s = pa.Table.from_pandas(pd.DataFrame({"x": pd.array([1, None], "Int64")},
                                          index=pd.Index(["a", "b"], name="k"))).schema
    r = rename_columns(s, {"x": "y", "k": "key"}, dataset="d")
    from kstore.core.types import schema_pandas_metadata

    meta = schema_pandas_metadata(r)
    assert meta["index_columns"] == ["key"]
    assert {c["field_name"]: c["numpy_type"] for c in meta["columns"]}["y"] == "Int64"
    dropped = schema_pandas_metadata(drop_columns(r, ["y"], dataset="d"))
    assert [c["field_name"] for c in dropped["columns"]] == ["key"]


def test_renamed_dnf_and_the_commit_check():
    dnf = ((Term("b", "==", 1), Term("c", ">", 2)),)
    assert renamed_dnf(dnf, {"b": "a"}) == ((Term("a", "==", 1), Term("c", ">", 2)),)
    s = rename_columns(pa.schema([("a", pa.int64()), ("c", pa.int64())]), {"a": "b"}, dataset="d")
    check_written_names(s, [("k", ["b", "c"], {"b": "a"})], dataset="d")
    with pytest.raises(CommitConflictError, match="under the name 'b'"):
        check_written_names(s, [("k", ["b"], {})], dataset="d")
