"""Checkpoints with derived keys (issue #12): a checkpoint leaves out the ``table`` and
``key`` columns when every file's key is ``<uuid>/<table>/<label>.parquet``.

What must hold, and is tried here to break:
- a checkpoint reads back the same file table, derived or not, for any labels and keys
  (property test, odd characters included);
- a derived checkpoint is refused exactly when the same table with its keys written out
  would be (a label that makes a key escape the dataset, or a damaged marker);
- replay, index changes and pickling keep the keys right, and one file whose key is not
  derivable makes the table store its keys from then on;
- planning gives the same files (and keys) on a derived table as on the stored one;
- a checkpoint in the layout before derived keys (every column stored) still reads.
"""

from __future__ import annotations

import json
import pickle

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kstore.core.filetable import Actions, FileTable, derived_keys, file_rows
from kstore.core.metadata import DatasetMetadata
from kstore.core.planning import plan_read
from kstore.core.state import DERIVED_KEY, STATE_KEY, checkpoint_bytes, from_checkpoint, replay
from kstore.core.stats import FileStats
from kstore.errors import CorruptMetadataError

UUID = "ds"
SCHEMA = pa.schema([("p", pa.int64()), ("x", pa.int64())])


def meta_of(files: FileTable, version: int = 3) -> DatasetMetadata:
    return (DatasetMetadata.new(UUID, partition_keys=("p",)).evolve(version=version, schema=SCHEMA)
            .with_files(files))


def table_of(labels: list[str], keys: list[str] | None = None, xs: list[int] | None = None) -> FileTable:
    keys = keys if keys is not None else [f"{UUID}/table/{lab}.parquet" for lab in labels]
    xs = xs if xs is not None else list(range(len(labels)))
    stats = [FileStats(1, 10, {"x": (x, x, 0)}) for x in xs]
    rows = file_rows(labels, ["table"] * len(labels), keys, stats, SCHEMA,
                     {"x": [pa.array([x]) for x in xs]})
    return FileTable(rows)


def stored(data: bytes) -> pa.Table:
    return pa.ipc.open_file(pa.py_buffer(data)).read_all()


def test_a_kstore_checkpoint_leaves_out_the_derivable_columns_and_reads_back_the_same():
    ft = table_of([f"p={i}/f{i:04d}" for i in range(50)])
    data = checkpoint_bytes(meta_of(ft))
    raw = stored(data)
    assert "key" not in raw.column_names and "table" not in raw.column_names
    assert json.loads(raw.schema.metadata[DERIVED_KEY]) == {"table": "table"}
    back = from_checkpoint(data, dataset_uuid=UUID, version=3)
    assert back.files.derived == (UUID, "table")
    assert back.files.table.equals(ft.table)
    assert dict(back.partitions) == dict(meta_of(ft).partitions)


def test_one_key_that_is_not_derivable_keeps_every_column():
    labels = ["p=1/a", "p=2/b"]
    ft = table_of(labels, keys=[f"{UUID}/table/p=1/a.parquet", f"{UUID}/table/p=2/other.parquet"])
    data = checkpoint_bytes(meta_of(ft))
    raw = stored(data)
    assert DERIVED_KEY not in raw.schema.metadata and raw.column_names[:3] == ["label", "table", "key"]
    back = from_checkpoint(data, dataset_uuid=UUID, version=3)
    assert back.files.derived is None and back.files.table.equals(ft.table)


LABEL_CHARS = st.sampled_from(list("ab9=_-%é") + ["/", ".", "\\", "\x00"])


@given(labels=st.lists(st.text(LABEL_CHARS, max_size=8), min_size=1, max_size=8, unique=True),
       foreign=st.sets(st.integers(0, 7), max_size=2))
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
def test_a_checkpoint_reads_back_exactly_or_is_refused_exactly_when_its_keys_would_be(labels, foreign):
    """For any labels (odd characters included) and any mix of derivable and other keys:
    reading the checkpoint gives the table that was written, and refuses it exactly when
    the same table with its keys stored is refused (a key outside the dataset's prefix or
    with an empty, ``.`` or ``..`` component)."""
    keys = [f"{UUID}/table/{lab}.parquet" if i not in foreign else f"{UUID}/table/moved{i}.parquet"
            for i, lab in enumerate(labels)]
    ft = table_of(labels, keys)
    try:
        FileTable(ft.table).validate(UUID, "w")
        expected_ok = True
    except CorruptMetadataError:
        expected_ok = False
    data = checkpoint_bytes(meta_of(ft))
    derived = DERIVED_KEY in stored(data).schema.metadata
    assert derived == (not (set(foreign) & set(range(len(labels)))))
    if expected_ok:
        back = from_checkpoint(data, dataset_uuid=UUID, version=3)
        assert back.files.table.equals(ft.table)
    else:
        with pytest.raises(CorruptMetadataError):
            from_checkpoint(data, dataset_uuid=UUID, version=3)


def _with_metadata(data: bytes, kv: dict[bytes, bytes], drop: tuple[str, ...] = (), add_key: bool = False) -> bytes:
    t = stored(data)
    meta = dict(t.schema.metadata)
    meta.update(kv)
    t = t.drop_columns(list(drop))
    if add_key:
        t = t.add_column(1, "key", pa.array(["x"] * t.num_rows))
    t = t.replace_schema_metadata(meta)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, t.schema) as w:
        w.write_table(t)
    return sink.getvalue().to_pybytes()


@pytest.mark.parametrize(("marker", "add_key", "needle"), [
    (b"not json", False, "derived columns"),
    (b'{"tab": "table"}', False, "derived columns"),
    (b'{"table": "other"}', False, "does not have"),
    (b'{"table": 7}', False, "does not have"),
    (b'{"table": "table"}', True, "no table or key column"),
])
def test_a_damaged_derived_marker_is_a_clear_error(marker, add_key, needle):
    data = checkpoint_bytes(meta_of(table_of(["p=1/a", "p=2/b"])))
    bad = _with_metadata(data, {DERIVED_KEY: marker}, add_key=add_key)
    with pytest.raises(CorruptMetadataError, match=needle):
        from_checkpoint(bad, dataset_uuid=UUID, version=3)


@pytest.mark.parametrize("label", ["../../other/x", "/abs", "./x", "a//b", "a/./b", "a/../../b", "a\\b", "a\x00b"])
def test_a_derived_checkpoint_whose_label_makes_a_key_escape_is_refused(label):
    """A crafted checkpoint (derived layout) with one hostile label: refused on open, as
    the same key written out would be; nothing is planned or deleted from it."""
    good = checkpoint_bytes(meta_of(table_of(["p=1/a", "p=2/b"])))
    t = stored(good)
    labels = t.column("label").to_pylist()
    labels[1] = label
    t = t.set_column(0, "label", pa.array(labels, pa.string()))
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, t.schema) as w:
        w.write_table(t)
    with pytest.raises(CorruptMetadataError):
        from_checkpoint(sink.getvalue().to_pybytes(), dataset_uuid=UUID, version=3)


def test_a_checkpoint_of_another_dataset_is_refused():
    data = checkpoint_bytes(meta_of(table_of(["p=1/a"])))
    with pytest.raises(CorruptMetadataError):
        from_checkpoint(data, dataset_uuid="other", version=3)


def test_the_layout_before_derived_keys_still_reads():
    """A checkpoint with every column stored (what kstore wrote before) reads as before."""
    ft = table_of(["p=1/a", "p=2/b"])
    meta = meta_of(ft)
    state = json.dumps(meta.to_dict(partitions=False), separators=(",", ":"), sort_keys=True).encode()
    t = ft.table.replace_schema_metadata({STATE_KEY: state})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, t.schema, options=pa.ipc.IpcWriteOptions(compression="zstd")) as w:
        w.write_table(t)
    back = from_checkpoint(sink.getvalue().to_pybytes(), dataset_uuid=UUID, version=3)
    assert back.files.derived is None and back.files.table.equals(ft.table)


def derived_of(ft: FileTable) -> FileTable:
    out = ft.derive(UUID)
    assert out.derived == (UUID, "table")
    return out


def test_replay_on_a_derived_table_keeps_derived_keys_and_stores_them_when_one_is_not_derivable():
    base = derived_of(table_of(["p=1/a", "p=2/b"]))
    add = table_of(["p=3/c"], xs=[9]).table
    after = base.apply(Actions(add=add, remove=("p=1/a",)))
    assert after.derived == (UUID, "table")
    assert after.table.column("key").to_pylist() == [f"{UUID}/table/p=2/b.parquet", f"{UUID}/table/p=3/c.parquet"]
    odd = table_of(["p=4/d"], keys=[f"{UUID}/table/p=4/elsewhere.parquet"]).table
    mixed = after.apply(Actions(add=odd))
    assert mixed.derived is None
    assert mixed.table.column("key").to_pylist()[-1] == f"{UUID}/table/p=4/elsewhere.parquet"
    # through the state codec: a log entry adding that file on a derived checkpoint
    meta = meta_of(after, version=3)
    from kstore.core.state import decode_actions, encode_actions

    entry = decode_actions(encode_actions(meta.evolve(version=4), add=odd), dataset_uuid=UUID, where="v4")
    new = replay(from_checkpoint(checkpoint_bytes(meta), dataset_uuid=UUID, version=3), entry, version=4)
    assert new.files.table.column("key").to_pylist() == mixed.table.column("key").to_pylist()


def test_index_changes_and_pickles_keep_a_derived_table_derived():
    base = derived_of(table_of(["p=1/a", "p=2/b"]))
    dropped = base.drop_index("x")
    assert dropped.derived == base.derived and "idx:x" not in dropped.table.column_names
    back = pickle.loads(pickle.dumps(base))
    assert back.derived == base.derived and back.table.equals(base.table)
    assert len(pickle.dumps(base)) < len(pickle.dumps(FileTable(base.table)))


@pytest.mark.parametrize("predicates", [None, [[("x", "==", 7)]], [[("p", ">=", 3), ("x", "<", 40)]],
                                        [[("x", "in", [1, 2, 99])], [("p", "==", 60)]]])
def test_planning_a_derived_table_gives_the_same_files_and_keys(predicates):
    labels = [f"p={i}/f{i}" for i in range(80)]
    ft = table_of(labels, xs=[i % 10 for i in range(80)])
    derived = derived_of(ft)
    a = plan_read(meta_of(ft), SCHEMA, predicates)
    b = plan_read(meta_of(derived), SCHEMA, predicates)
    assert [(t.label, t.key) for t in a.tasks] == [(t.label, t.key) for t in b.tasks] and a.tasks
    assert b.tasks[0].key == derived_keys(pa.array([b.tasks[0].label]), UUID, "table")[0].as_py()


def _tz_state() -> DatasetMetadata:
    """A state whose stored schemas hold time zones and a non-ASCII name: text pyarrow
    decodes only when it is first read."""
    import datetime as dt

    schema = pa.schema([("p", pa.int64()), ("t", pa.timestamp("us", "Europe/Paris")),
                        ("né", pa.list_(pa.timestamp("us", "UTC")))])
    when = dt.datetime(2024, 5, 1, 12, tzinfo=dt.timezone.utc)
    stats = [FileStats(1, 10, {"t": (when, when, 0)}) for _ in range(2)]
    rows = file_rows(["p=1/a", "p=2/b"], ["table"] * 2, [f"{UUID}/table/p={i}/{c}.parquet" for i, c in ((1, "a"), (2, "b"))],
                     stats, schema, {})
    return (DatasetMetadata.new(UUID, partition_keys=("p",)).evolve(version=3, schema=schema)
            .with_files(FileTable(rows)))


def _every_text(meta: DatasetMetadata) -> None:
    """Read every name and time zone of what a decoder returned (what later code does)."""
    from kstore.core.types import decoded_schema, normalize_schema

    for schema in (meta.schema, meta.files.table.schema):
        decoded_schema(schema)
        normalize_schema(pa.schema([f for f in schema if not pa.types.is_null(f.type)]))


@pytest.mark.parametrize("form", ["checkpoint", "log entry"])
def test_damaged_names_and_time_zones_are_corrupt_metadata(form):
    """Every byte of a checkpoint (or a log entry's Arrow IPC) set to 0xFE, which is never
    UTF-8: the decoder refuses it with CorruptMetadataError or returns a state whose names
    and time zones all read. A byte inside a time zone or a name used to pass the decoder
    and raise UnicodeDecodeError at the first use of the type (found by the damaged-files
    fuzz suite: ``gc_dry_run`` raised it from ``normalize_type``)."""
    import base64

    from kstore.core.filetable import from_ipc_text, ipc_text

    meta = _tz_state()
    if form == "checkpoint":
        raw = checkpoint_bytes(meta)

        def decode(data: bytes) -> None:
            _every_text(from_checkpoint(data, dataset_uuid=UUID, version=3))
    else:
        raw = base64.b64decode(ipc_text(meta.files.table))

        def decode(data: bytes) -> None:
            table = from_ipc_text(base64.b64encode(data).decode("ascii"), "log entry 3")
            _every_text(meta.with_files(FileTable(table)))
    decode(raw)  # the undamaged bytes read
    causes = set()
    for i in range(len(raw)):
        damaged = bytearray(raw)
        damaged[i] = 0xFE
        try:
            decode(bytes(damaged))
        except CorruptMetadataError as exc:
            causes.add(type(exc.__cause__).__name__)
    assert "UnicodeDecodeError" in causes  # the damage reached names and time zones
