"""Damaged files: truncate, flip bytes, garbage, delete, or put wrong types in a field of the
main metadata file, ``_common_metadata``, an index file, the statistics file or a data file,
then run reads and writes on the dataset (see :mod:`tests.fuzz._harness` for the checks).

Run as ``python -m tests.fuzz._damaged KIND EXAMPLES``: Arrow's C++ Parquet reader meets
every damaged byte here, so the test suite runs this in a subprocess and a crash of the
interpreter is a failed test, not a lost test worker. Prints ``fuzz damaged KIND: N cases``.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import assume, given
from hypothesis import strategies as st

from tests.fuzz._harness import (
    HOSTILE_ARRAYS,
    KINDS,
    OPERATIONS,
    VALUES,
    Base,
    bases,
    decode_metadata,
    encode_metadata,
    fresh_store,
    fuzz_settings,
    hostile_array,
    parquet_bytes,
    run_operation,
)

BYTE_MODES = ["truncate", "flip", "garbage", "empty", "missing", "doubled", "junk appended"]


def damage_bytes(data: st.DataObject, raw: bytes) -> tuple[str, bytes | None]:
    mode = data.draw(st.sampled_from(BYTE_MODES), label="mode")
    if mode == "truncate":
        cut = data.draw(st.integers(0, max(0, len(raw) - 1)), label="cut")
        return f"truncated at {cut}", raw[:cut]
    if mode == "flip":
        out = bytearray(raw)
        positions = data.draw(st.lists(st.integers(0, max(0, len(raw) - 1)), min_size=1, max_size=8), label="pos")
        for p in positions:
            if p < len(out):
                out[p] ^= data.draw(st.integers(1, 255), label="xor")
        return f"bytes flipped at {positions}", bytes(out)
    if mode == "garbage":
        return "garbage", data.draw(st.binary(max_size=300), label="garbage")
    if mode == "empty":
        return "empty", b""
    if mode == "missing":
        return "missing", None
    if mode == "doubled":
        return "doubled", raw + raw
    return "junk appended", raw + data.draw(st.binary(min_size=1, max_size=50), label="junk")


def _walk(data: st.DataObject, node: Any, path: list) -> tuple[Any, list]:
    """A random container inside ``node`` (the path to it is recorded)."""
    while True:
        children = list(node.items()) if isinstance(node, dict) else list(enumerate(node)) if isinstance(node, list) else []
        children = [(k, v) for k, v in children if isinstance(v, (dict, list))]
        if not children or not data.draw(st.booleans(), label="descend"):
            return node, path
        k, node = data.draw(st.sampled_from(children), label="child")
        path.append(k)


def damage_metadata(data: st.DataObject, raw: bytes, fmt: str) -> tuple[str, bytes | None]:
    doc = decode_metadata(raw, fmt)
    node, path = _walk(data, doc, [])
    if isinstance(node, dict):
        keys = sorted(node, key=str)
        key = data.draw(st.sampled_from(keys) if keys else st.just("new"), label="key")
        if data.draw(st.booleans(), label="delete") and key in node:
            del node[key]
            what = f"deleted {path + [key]}"
        else:
            node[key] = data.draw(VALUES, label="value")
            what = f"set {path + [key]} = {node[key]!r:.200}"
    elif node:
        i = data.draw(st.integers(0, len(node) - 1), label="index")
        node[i] = data.draw(VALUES, label="value")
        what = f"set {path + [i]} = {node[i]!r:.200}"
    else:
        node.append(data.draw(VALUES, label="value"))
        what = f"appended to {path}"
    try:
        return what, encode_metadata(doc, fmt)
    except (OverflowError, TypeError, ValueError):  # msgpack cannot hold it: not a file anyone writes
        assume(False)
        raise


PARQUET_MODES = ["column type", "drop column", "rename column", "add column", "no rows", "nulls", "pandas metadata",
                 "schema metadata"]


def damage_parquet(data: st.DataObject, raw: bytes, ipc: bool = False) -> tuple[str, bytes | None]:
    """Damage a Parquet file's table (``ipc``: an Arrow IPC file's, as checkpoints are)."""
    table = pa.ipc.open_file(pa.py_buffer(raw)).read_all() if ipc else pq.read_table(pa.BufferReader(raw))
    mode = data.draw(st.sampled_from(PARQUET_MODES), label="parquet mode")
    names = table.column_names
    if mode in ("column type", "drop column", "rename column", "nulls") and not names:
        mode = "add column"
    if mode == "column type":
        name = data.draw(st.sampled_from(names), label="column")
        kind = data.draw(st.sampled_from(HOSTILE_ARRAYS), label="array")
        table = table.set_column(names.index(name), name, hostile_array(kind, table.num_rows))
        what = f"column {name!r} as {kind}"
    elif mode == "drop column":
        name = data.draw(st.sampled_from(names), label="column")
        table, what = table.drop_columns([name]), f"dropped {name!r}"
    elif mode == "rename column":
        name = data.draw(st.sampled_from(names), label="column")
        new = data.draw(st.sampled_from(names + ["partition", "label", "x", "", "__index_level_0__"]), label="new")
        table = table.rename_columns([new if n == name else n for n in names])
        what = f"renamed {name!r} to {new!r}"
    elif mode == "add column":
        kind = data.draw(st.sampled_from(HOSTILE_ARRAYS), label="array")
        new = data.draw(st.sampled_from(["extra", "min:x", "max:s", "nulls:x", "__index_level_0__"]), label="new")
        table = table.append_column(new, hostile_array(kind, table.num_rows))
        what = f"added {new!r} as {kind}"
    elif mode == "no rows":
        table, what = table.slice(0, 0), "no rows"
    elif mode == "nulls":
        name = data.draw(st.sampled_from(names), label="column")
        col = table.column(name)
        table = table.set_column(names.index(name), name, pa.nulls(table.num_rows, col.type))
        what = f"column {name!r} all null"
    else:
        text = data.draw(st.sampled_from([b"{", b"[]", b"null", b'{"columns": 5}', b'{"columns": [{"name": 1}]}',
                                          b'{"index_columns": [{"kind": "range"}], "columns": []}']), label="meta")
        meta = {b"pandas": text} if mode == "pandas metadata" else {b"kstore": text, b"ARROW:schema": b"\x00"}
        table = table.replace_schema_metadata(meta)
        what = f"{mode} = {text!r}"
    if ipc:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
        return what, sink.getvalue().to_pybytes()
    return what, parquet_bytes(table)


def damage(data: st.DataObject, b: Base, kind: str, key: str) -> tuple[str, bytes | None]:
    raw = b.files[key]
    if data.draw(st.booleans(), label="bytes or fields"):
        return damage_bytes(data, raw)
    if kind in ("main", "log"):
        return damage_metadata(data, raw, "json" if key.endswith(".json") else "msgpack.zstd")
    return damage_parquet(data, raw, ipc=kind == "checkpoint")


def make_test(kind: str, examples: int, counter: list[int]):
    by_name = {b.name: b for b in bases() if b.keys[kind]}

    @fuzz_settings(examples)
    @given(data=st.data())
    def test(data: st.DataObject) -> None:
        b = by_name[data.draw(st.sampled_from(sorted(by_name)), label="base")]
        key = data.draw(st.sampled_from(b.keys[kind]), label="key")
        what, new = damage(data, b, kind, key)
        store = fresh_store(b)
        if new is None:
            store.delete(key)
        else:
            store.put(key, new)
        ops = data.draw(st.lists(st.sampled_from(OPERATIONS), min_size=1, max_size=4, unique=True), label="ops")
        for i, op in enumerate(ops):
            run_operation(store, b, op, f"{b.name}: {kind} file {key!r} {what}; after {ops[:i]}")
        counter[0] += 1

    return test


def main(argv: list[str]) -> int:
    kind, examples = argv[0], int(argv[1])
    assert kind in KINDS, kind
    counter = [0]
    make_test(kind, examples, counter)()
    print(f"fuzz damaged {kind}: {counter[0]} cases")
    return 0


if __name__ == "__main__":
    rc = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    # Crashes while reading damaged files show up above as a signal; skip teardown, where
    # pyarrow's thread pools can abort on their own (apache/arrow#34314).
    os._exit(rc)
