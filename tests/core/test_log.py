"""Log entries: the commit's spliced encoding (the main file's JSON reused as the entry's
``metadata``) decodes to exactly the entry, whatever the metadata and info hold."""

from __future__ import annotations

import json

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from kstore.core import naming, serialize
from kstore.core.filetable import FileTable
from kstore.core.metadata import DatasetMetadata
from kstore.core.state import main_file_bytes

_label_text = st.text(alphabet=st.sampled_from(list('ab=/%"\\\x01\u00e4\u65e5 ')), min_size=1, max_size=8)


@settings(max_examples=200, deadline=None)
@given(labels=st.lists(_label_text, max_size=6, unique=True),
       meta_extra=st.dictionaries(st.sampled_from(["partitions", "note", "k"]), st.text(max_size=5), max_size=3),
       derived=st.booleans())
def test_fast_main_file_decodes_to_the_dict_form(labels, meta_extra, derived):
    """The main file built with Arrow string kernels is the JSON of ``to_dict()``, also for
    labels that need escaping and user metadata that holds the splice marker's key, and for
    a file table whose keys are derived from its labels (joined from the labels alone)."""
    parts = {lab: {"table": f"d/table/{lab if derived else i}.parquet"} for i, lab in enumerate(labels)}
    assume(all(_valid_key(k) for files in parts.values() for k in files.values()))
    files = FileTable.from_partitions(parts)
    if derived:
        files = files.derive("d")
        assert files.derived == ("d", "table") or not labels
    meta = DatasetMetadata.new("d", metadata=meta_extra).with_files(files)
    assert json.loads(main_file_bytes(meta)) == json.loads(serialize.dumps(meta.to_dict(), "json"))
    assert DatasetMetadata.from_dict(json.loads(main_file_bytes(meta))).partitions == meta.partitions


def _valid_key(key: str) -> bool:
    try:
        naming.validate_key(key)
    except Exception:
        return False
    return True


def test_log_entry_tables_are_compressed_and_old_entries_still_read():
    """Added-file rows travel zstd-compressed (a big index is mostly sorted integers); an
    entry an earlier kstore wrote without compression, or LZ4-compressed, decodes to the
    same table."""
    import base64

    import numpy as np
    import pyarrow as pa

    from kstore.core.filetable import from_ipc_text, ipc_text

    rng = np.random.default_rng(7)
    lists = pa.array([np.unique(rng.integers(0, 1000, 6250)) for _ in range(200)], pa.list_(pa.int64()))
    table = pa.table({"label": pa.array([f"p={i}/f" for i in range(200)]), "idx:x": lists})
    text = ipc_text(table)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    plain = base64.b64encode(sink.getvalue().to_pybytes()).decode("ascii")
    lz4 = _lz4_text(table)
    assert len(text) * 5 < len(plain) and len(text) < 1.1 * len(lz4)
    assert from_ipc_text(text, "new").equals(table)
    assert from_ipc_text(plain, "old").equals(table)
    assert from_ipc_text(lz4, "lz4").equals(table)  # (what kstore wrote before zstd)
    # W2's kind of index (each file ~14,000 of 20,000 values): a quarter of LZ4's text
    spread = pa.array([np.unique(rng.integers(0, 20_000, 25_000)) for _ in range(50)], pa.list_(pa.int64()))
    w2 = pa.table({"label": pa.array([f"b={i}/f" for i in range(50)]), "idx:product": spread})
    assert len(ipc_text(w2)) * 3 < len(_lz4_text(w2))
    assert from_ipc_text(ipc_text(w2), "w2").equals(w2)


def _lz4_text(table):
    import base64

    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression="lz4")) as writer:
        writer.write_table(table)
    return base64.b64encode(sink.getvalue().to_pybytes()).decode("ascii")
