"""Unit tests for kstore.core.operations (commit operations as data; the pure fold)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from kstore.core.metadata import DatasetMetadata
from kstore.core.operations import AddedFile, Operation, apply, check, labels_in_scope, next_version
from kstore.errors import CommitConflictError, DatasetExistsError, DatasetNotFoundError, InvalidArgumentError

NOW = "2024-01-01T00:00:00"
SCHEMA = pa.schema([("p", pa.int64()), ("x", pa.string())])


def _files(*labels, table="table"):
    return tuple(AddedFile(lab, table, f"ds/{table}/{lab}.parquet") for lab in labels)


def _created(**kw):
    op = Operation(kind="create", added=_files("p=1/a", "p=2/a"), partition_on=("p",), **kw)
    return apply(None, op, dataset_uuid="ds", schema=SCHEMA, now=NOW)


def test_create():
    meta = _created(metadata={"owner": "me"})
    assert meta.version == 0
    assert meta.partition_keys == ("p",)
    assert set(meta.partitions) == {"p=1/a", "p=2/a"}
    assert meta.file_key("p=1/a") == "ds/table/p=1/a.parquet"
    assert meta.metadata["creation_time"] == NOW and meta.metadata["owner"] == "me"
    assert meta.schema.equals(SCHEMA)
    assert DatasetMetadata.from_dict(meta.to_dict()) == meta


def test_create_keeps_given_creation_time():
    op = Operation(kind="create", metadata={"creation_time": "earlier"})
    assert apply(None, op, dataset_uuid="ds", schema=None, now=NOW).metadata["creation_time"] == "earlier"


def test_append_and_remove_bump_version():
    base = _created()
    op = Operation(kind="append", added=_files("p=3/b"), read_version=0, metadata={"k": 1})
    check(base, op, dataset_uuid="ds")
    v1 = apply(base, op, dataset_uuid="ds", schema=SCHEMA, now=NOW)
    assert v1.version == 1
    assert set(v1.partitions) == {"p=1/a", "p=2/a", "p=3/b"}
    assert v1.metadata["k"] == 1 and v1.metadata["creation_time"] == NOW
    op = Operation(kind="delete_scope", remove=("p=1/a",), read_version=1)
    check(v1, op, dataset_uuid="ds")
    v2 = apply(v1, op, dataset_uuid="ds", schema=SCHEMA, now=NOW)
    assert v2.version == 2 and set(v2.partitions) == {"p=2/a", "p=3/b"}
    # the inputs are unchanged (pure fold)
    assert set(base.partitions) == {"p=1/a", "p=2/a"} and base.version == 0


def test_replace_a_partition():
    base = _created()
    op = Operation(kind="overwrite_partitions", added=_files("p=1/a"), remove=("p=1/a",), read_version=0)
    out = apply(base, op, dataset_uuid="ds", schema=SCHEMA, now=NOW)
    assert set(out.partitions) == {"p=1/a", "p=2/a"}


def test_overwrite_starts_fresh_but_keeps_txns():
    base = apply(_created(), Operation(kind="append", added=_files("p=3/b"), txn=("app", 7)),
                 dataset_uuid="ds", schema=SCHEMA, now=NOW)
    assert dict(base.txns) == {"app": 7}
    op = Operation(kind="overwrite", added=_files("p=9/z"), partition_on=("p",), txn=("other", 1))
    check(base, op, dataset_uuid="ds")
    out = apply(base, op, dataset_uuid="ds", schema=SCHEMA, now="later")
    assert set(out.partitions) == {"p=9/z"}
    assert out.version == base.version + 1
    assert dict(out.txns) == {"app": 7, "other": 1}
    assert out.metadata["creation_time"] == "later"


def test_multi_table_files_are_grouped_by_label():
    op = Operation(kind="create", added=_files("a", table="core") + _files("a", table="extra"), table="core")
    out = apply(None, op, dataset_uuid="ds", schema=None, now=NOW)
    assert dict(out.partitions["a"]) == {"core": "ds/core/a.parquet", "extra": "ds/extra/a.parquet"}


def test_drop_index_columns():
    base = _created().evolve(indices={"x": "ds/indices/x/t.by-dataset-index.parquet",
                                      "y": "ds/indices/y/t.by-dataset-index.parquet"},
                             inline_indices={"z": {"1": ("p=1/a",)}})
    op = Operation(kind="build_indices", drop_index_columns=("x", "z"))
    out = apply(base, op, dataset_uuid="ds", schema=SCHEMA, now=NOW)
    assert set(out.indices) == {"y"} and dict(out.inline_indices) == {}


def test_check_create_on_existing():
    with pytest.raises(DatasetExistsError, match="'ds'"):
        check(_created(), Operation(kind="create"), dataset_uuid="ds")
    check(_created(), Operation(kind="overwrite"), dataset_uuid="ds")


@pytest.mark.parametrize("kind", ["append", "delete_scope", "build_indices", "metadata"])
def test_check_on_missing_dataset(kind):
    with pytest.raises(DatasetNotFoundError, match="'ds'"):
        check(None, Operation(kind=kind), dataset_uuid="ds")


def test_check_partition_on_mismatch():
    with pytest.raises(InvalidArgumentError, match="partition_on"):
        check(_created(), Operation(kind="append", partition_on=("x",)), dataset_uuid="ds")
    check(_created(), Operation(kind="append", partition_on=("p",)), dataset_uuid="ds")
    check(_created(), Operation(kind="append", partition_on=None), dataset_uuid="ds")


def test_check_conflicts():
    base = _created()
    with pytest.raises(CommitConflictError, match="p=9/x"):
        check(base, Operation(kind="delete_scope", remove=("p=1/a", "p=9/x"), read_version=0), dataset_uuid="ds")
    op = Operation(kind="delete_scope", remove=("p=1/a",), scope_labels=frozenset({"p=1/a"}), read_version=0)
    check(base, op, dataset_uuid="ds", scope_now={"p=1/a"})
    with pytest.raises(CommitConflictError, match="p=1/new"):
        check(base, op, dataset_uuid="ds", scope_now={"p=1/a", "p=1/new"})


def test_next_version_and_scope():
    assert next_version(None) == 0
    assert next_version(DatasetMetadata.new("ds")) == 0  # never committed by kstore
    assert next_version(_created()) == 1
    assert labels_in_scope(_created(), ["p=1/a", "p=7/q"]) == {"p=1/a"}
