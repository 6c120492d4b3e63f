"""Unit tests for kstore.core.operations (typed commit operations; their checks and pure folds)."""

from __future__ import annotations

from dataclasses import replace

import pyarrow as pa
import pytest

from kstore.core.metadata import DatasetMetadata
from kstore.core.operations import (
    AddedFile,
    Append,
    BuildIndices,
    Compaction,
    Create,
    Delete,
    DeleteRows,
    DeleteScope,
    DropIndices,
    Operation,
    Overwrite,
    OverwritePartitions,
    Upgrade,
    Vacuum,
    next_version,
)
from kstore.errors import CommitConflictError, DatasetExistsError, DatasetNotFoundError, InvalidArgumentError

NOW = "2024-01-01T00:00:00"
SCHEMA = pa.schema([("p", pa.int64()), ("x", pa.string())])


def _files(*labels, table="table"):
    return tuple(AddedFile(lab, table, f"ds/{table}/{lab}.parquet") for lab in labels)


def _created(**kw):
    op = Create(added=_files("p=1/a", "p=2/a"), partition_on=("p",), **kw)
    return op.apply(None, dataset_uuid="ds", schema=SCHEMA, now=NOW)


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
    op = Create(metadata={"creation_time": "earlier"})
    assert op.apply(None, dataset_uuid="ds", schema=None, now=NOW).metadata["creation_time"] == "earlier"


def test_append_and_remove_bump_version():
    base = _created()
    op = Append(added=_files("p=3/b"), read_version=0, metadata={"k": 1})
    op.check(base, dataset_uuid="ds")
    v1 = op.apply(base, dataset_uuid="ds", schema=SCHEMA, now=NOW)
    assert v1.version == 1
    assert set(v1.partitions) == {"p=1/a", "p=2/a", "p=3/b"}
    assert v1.metadata["k"] == 1 and v1.metadata["creation_time"] == NOW
    op = DeleteScope(remove=("p=1/a",), read_version=1)
    op.check(v1, dataset_uuid="ds")
    v2 = op.apply(v1, dataset_uuid="ds", schema=SCHEMA, now=NOW)
    assert v2.version == 2 and set(v2.partitions) == {"p=2/a", "p=3/b"}
    # the inputs are unchanged (pure fold)
    assert set(base.partitions) == {"p=1/a", "p=2/a"} and base.version == 0


def test_replace_a_partition():
    base = _created()
    op = OverwritePartitions(added=_files("p=1/a"), remove=("p=1/a",), read_version=0)
    out = op.apply(base, dataset_uuid="ds", schema=SCHEMA, now=NOW)
    assert set(out.partitions) == {"p=1/a", "p=2/a"}


def test_overwrite_starts_fresh_but_keeps_txns():
    base = Append(added=_files("p=3/b"), txn=("app", 7)).apply(_created(), dataset_uuid="ds", schema=SCHEMA, now=NOW)
    assert dict(base.txns) == {"app": 7}
    op = Overwrite(added=_files("p=9/z"), partition_on=("p",), txn=("other", 1))
    op.check(base, dataset_uuid="ds")
    out = op.apply(base, dataset_uuid="ds", schema=SCHEMA, now="later")
    assert set(out.partitions) == {"p=9/z"}
    assert out.version == base.version + 1
    assert dict(out.txns) == {"app": 7, "other": 1}
    assert out.metadata["creation_time"] == "later"


def test_multi_table_files_are_grouped_by_label():
    op = Create(added=_files("a", table="core") + _files("a", table="extra"), table="core")
    out = op.apply(None, dataset_uuid="ds", schema=None, now=NOW)
    assert dict(out.partitions["a"]) == {"core": "ds/core/a.parquet", "extra": "ds/extra/a.parquet"}


def test_drop_index_columns():
    base = _created().evolve(indices={"x": "ds/indices/x/t.by-dataset-index.parquet",
                                      "y": "ds/indices/y/t.by-dataset-index.parquet"},
                             inline_indices={"z": {"1": ("p=1/a",)}})
    op = DropIndices(drop_index_columns=("x", "z"))
    out = op.apply(base, dataset_uuid="ds", schema=SCHEMA, now=NOW)
    assert set(out.indices) == {"y"} and dict(out.inline_indices) == {}


def test_check_create_on_existing():
    with pytest.raises(DatasetExistsError, match="'ds'"):
        Create().check(_created(), dataset_uuid="ds")
    Overwrite().check(_created(), dataset_uuid="ds")


@pytest.mark.parametrize("kind", [Append, DeleteScope, OverwritePartitions, BuildIndices, DropIndices, DeleteRows,
                                  Compaction, Upgrade])
def test_check_on_missing_dataset(kind):
    with pytest.raises(DatasetNotFoundError, match="'ds'"):
        kind().check(None, dataset_uuid="ds")


def test_check_partition_on_mismatch():
    with pytest.raises(InvalidArgumentError, match="partition_on"):
        Append(partition_on=("x",)).check(_created(), dataset_uuid="ds")
    Append(partition_on=("p",)).check(_created(), dataset_uuid="ds")
    Append(partition_on=None).check(_created(), dataset_uuid="ds")


def test_check_conflicts():
    base = _created()
    with pytest.raises(CommitConflictError, match="p=9/x"):
        DeleteScope(remove=("p=1/a", "p=9/x"), read_version=0).check(base, dataset_uuid="ds")
    op = DeleteScope(remove=("p=1/a",), scope_labels=frozenset({"p=1/a"}), read_version=0)
    replace(op, scope=lambda meta: {"p=1/a"}).check(base, dataset_uuid="ds")
    with pytest.raises(CommitConflictError, match="p=1/new"):
        replace(op, scope=lambda meta: {"p=1/a", "p=1/new"}).check(base, dataset_uuid="ds")


def test_next_version():
    assert next_version(None) == 0
    assert next_version(DatasetMetadata.new("ds")) == 0  # never committed by kstore
    assert next_version(_created()) == 1


def test_each_kind_has_its_log_name():
    """The log records ``kind``; the names are the format's, unchanged byte for byte."""
    kinds = {c.__name__: c.kind for c in (Create, Overwrite, Append, DeleteScope, OverwritePartitions, BuildIndices,
                                          DropIndices, DeleteRows, Compaction, Upgrade, Vacuum, Delete)}
    assert kinds == {"Create": "create", "Overwrite": "overwrite", "Append": "append", "DeleteScope": "delete_scope",
                     "OverwritePartitions": "overwrite_partitions", "BuildIndices": "build_indices",
                     "DropIndices": "drop_indices", "DeleteRows": "delete_rows", "Compaction": "compaction",
                     "Upgrade": "upgrade", "Vacuum": "vacuum", "Delete": "delete"}
    assert [c.kind for c in (Vacuum, Delete) if c.is_fence] == ["vacuum", "delete"]
    assert [c.kind for c in (Create, Overwrite, Append) if c.creates] == ["create", "overwrite"]


def test_fences_commit_on_any_state_and_delete_leaves_none():
    base = _created()
    for op in (Vacuum(orphan_cutoff_ms=5), Delete(orphan_cutoff_ms=5)):
        op.check(None, dataset_uuid="ds")
        op.check(base, dataset_uuid="ds")
        assert op.apply(None, dataset_uuid="ds", schema=None, now=NOW) is None
    fenced = Vacuum(orphan_cutoff_ms=5).apply(base, dataset_uuid="ds", schema=None, now=NOW)
    assert fenced is not None and fenced.version == 1 and fenced.orphan_cutoff_ms == 5
    assert set(fenced.partitions) == set(base.partitions)
    assert Vacuum(orphan_cutoff_ms=3).apply(fenced, dataset_uuid="ds", schema=None, now=NOW).orphan_cutoff_ms == 5
    assert Delete(orphan_cutoff_ms=5).apply(base, dataset_uuid="ds", schema=None, now=NOW) is None


def test_done_before():
    base = Append(txn=("app", 7)).apply(_created(), dataset_uuid="ds", schema=SCHEMA, now=NOW)
    assert Append(txn=("app", 7)).done_before(base) and Append(txn=("app", 6)).done_before(base)
    assert not Append(txn=("app", 8)).done_before(base) and not Append().done_before(base)
    assert not Append(txn=("app", 1)).done_before(None)
    assert Upgrade().done_before(base)  # a concurrent upgrade won
    assert not Upgrade().done_before(DatasetMetadata.new("ds"))  # a kartothek dataset: no version yet


@pytest.mark.parametrize("kind", [Append, DeleteScope, OverwritePartitions, BuildIndices, DropIndices, DeleteRows,
                                  Compaction, Upgrade, Vacuum, Overwrite])
def test_every_kind_numbers_its_version_the_same_way(kind):
    base = _created()
    assert kind().apply(base, dataset_uuid="ds", schema=SCHEMA, now=NOW).version == next_version(base) == 1
    assert kind().apply(base, dataset_uuid="ds", schema=SCHEMA, now=NOW, version=9).version == 9


def test_the_base_class_is_no_operation():
    with pytest.raises(AttributeError):
        Operation().kind  # noqa: B018  (only a subclass says what it does)
