"""Shared parts of the fuzz suite: budget, base datasets, hostile values, damage, invariants.

A case runs public API calls against a memory store wrapped in a :class:`CountingStore`
(which records every key a call touches) and checks, per call:

- it returns, or raises a ``KstoreError`` (anything else fails the case);
- every key it touched lies in the dataset's prefix (``<uuid>/...`` or its main metadata
  file), or in the prefix of the copy a ``copy_dataset`` call makes; no listing of the store;
- a sentinel dataset in the same store is never touched and keeps every byte;
- a read never changes the store; a write that fails leaves it exactly as it was.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from functools import cache
from typing import Any

import msgpack
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import zstandard
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

import kstore
from kstore.core import naming
from kstore.errors import KstoreError
from kstore.io.memory import MemoryStore
from kstore.io.store import CountingStore

SENTINEL = "zz"  # another dataset in the same store: no call may touch it
COPY = "copy"  # where copy_dataset copies to


def budget(default: int) -> int:
    """Cases per fuzz test: ``default``, or ``$KSTORE_FUZZ_EXAMPLES``."""
    raw = os.environ.get("KSTORE_FUZZ_EXAMPLES")
    return int(raw) if raw else default


def fuzz_settings(default: int) -> settings:
    """Fixed examples in CI (reproducible runs, also in the damaged-file subprocesses, which
    do not load conftest.py); new ones elsewhere, or with a larger ``KSTORE_FUZZ_EXAMPLES``."""
    fixed = bool(os.environ.get("CI")) and os.environ.get("HYPOTHESIS_PROFILE") != "explore"
    return settings(max_examples=budget(default), deadline=None, suppress_health_check=list(HealthCheck),
                    print_blob=True, derandomize=fixed)


# -- hostile values -------------------------------------------------------------------------------

SPECIAL_STRINGS = [
    "", " ", "../x", "/abs", "a/../../b", "x\x00y", "ds\n", "€" * 100, "True", "False", "2024-01-01",
    "nan", "-1", "1e400", "NaN", "table", "_common_metadata", "partition", "label", "rows",
    f"{SENTINEL}/table/p=1/a.parquet", f"{SENTINEL}.by-dataset-metadata.json", f"{SENTINEL}/indices/x/a",
    "ds/../zz/table/x.parquet", "ds/table/" + "y" * 300 + ".parquet", "ds/table//x.parquet", "ds/./x",
    "ds/_kstore/log/00000000000000000000.json", "x" * 10_000,
]


@dataclass(frozen=True)
class Deep:
    """A list nested ``depth`` levels (written into the file's bytes directly)."""

    depth: int


SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12), st.sampled_from(SPECIAL_STRINGS),
)
VALUES = st.one_of(
    st.recursive(
        SCALARS,
        lambda inner: st.lists(inner, max_size=4)
        | st.dictionaries(st.one_of(st.text(max_size=6), st.sampled_from(SPECIAL_STRINGS)), inner, max_size=4),
        max_leaves=10,
    ),
    st.builds(Deep, st.sampled_from([33, 200, 5_000])),
)


def _deep_json(depth: int) -> str:
    return "[" * depth + "]" * depth


def encode_metadata(raw: Any, fmt: str) -> bytes:
    """``raw`` as a metadata file; :class:`Deep` markers become deeply nested lists."""
    marker = "__kstore_fuzz_deep_%d__"
    deep: dict[str, int] = {}

    def swap(v: Any) -> Any:
        if isinstance(v, Deep):
            deep[marker % v.depth] = v.depth
            return marker % v.depth
        if isinstance(v, dict):
            return {k: swap(x) for k, x in v.items()}
        if isinstance(v, list):
            return [swap(x) for x in v]
        return v

    raw = swap(raw)
    if fmt == "json":
        text = json.dumps(raw)
        for m, d in deep.items():
            text = text.replace(json.dumps(m), _deep_json(d))
        return text.encode()
    packed = msgpack.packb(raw, use_bin_type=True)
    for m, d in deep.items():
        packed = packed.replace(msgpack.packb(m), b"\x91" * d + b"\x90")
    return zstandard.ZstdCompressor().compress(packed)


def decode_metadata(data: bytes, fmt: str) -> Any:
    if fmt == "json":
        return json.loads(data)
    return msgpack.unpackb(zstandard.ZstdDecompressor().decompress(data), raw=False, strict_map_key=False)


def hostile_array(kind: str, n: int) -> pa.Array:
    """An array of ``n`` values of a type a field may not have."""
    return {
        "int": lambda: pa.array(range(n), pa.int64()),
        "uint": lambda: pa.array(range(n), pa.uint64()),
        "str": lambda: pa.array([f"v{i}" for i in range(n)]),
        "large_str": lambda: pa.array([f"v{i}" for i in range(n)], pa.large_string()),
        "dict_str": lambda: pa.array([f"v{i}" for i in range(n)]).dictionary_encode(),
        "float": lambda: pa.array([i + 0.5 for i in range(n)]),
        "nan": lambda: pa.array([float("nan")] * n),
        "null": lambda: pa.nulls(n),
        "bool": lambda: pa.array([i % 2 == 0 for i in range(n)]),
        "binary": lambda: pa.array([b"\x00\xff"] * n),
        "date": lambda: pa.array([dt.date(2024, 1, 1)] * n),
        "ts": lambda: pa.array([0] * n, pa.timestamp("ns")),
        "ts_tz": lambda: pa.array([0] * n, pa.timestamp("us", "Asia/Tokyo")),
        "decimal": lambda: pa.array([Decimal("1.5")] * n, pa.decimal128(5, 2)),
        "list_int": lambda: pa.array([[i] for i in range(n)]),
        "list_str": lambda: pa.array([["a", "b"]] * n),
        "list_list_str": lambda: pa.array([[["a"]]] * n),
        "list_null_labels": lambda: pa.array([[None]] * n, pa.list_(pa.string())),
        "struct": lambda: pa.array([{"a": 1}] * n),
        "time": lambda: pa.array([0] * n, pa.time64("us")),
        "duration": lambda: pa.array([0] * n, pa.duration("s")),
        "long_str": lambda: pa.array(["x" * 5_000] * n),
        "neg": lambda: pa.array([-(2**62)] * n, pa.int64()),
    }[kind]()


HOSTILE_ARRAYS = ["int", "uint", "str", "large_str", "dict_str", "float", "nan", "null", "bool", "binary", "date",
                  "ts", "ts_tz", "decimal", "list_int", "list_str", "list_list_str", "list_null_labels", "struct",
                  "time", "duration", "long_str", "neg"]


def parquet_bytes(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


# -- base datasets --------------------------------------------------------------------------------

KINDS = ("main", "common", "index", "stats", "data", "log", "checkpoint")


@dataclass
class Base:
    """A dataset to damage: the store's bytes and what the operations need to know."""

    name: str
    uuid: str
    files: dict[str, bytes] = field(repr=False)
    keys: dict[str, list[str]] = field(repr=False)  # kind -> keys of that kind
    fmt: str
    partition_key: str | None
    index_column: str | None
    plain_column: str | None
    probe: dict[str, Any] = field(default_factory=dict)  # column -> a value that occurs
    append: pd.DataFrame | None = field(default=None, repr=False)


def _frame(offset: int) -> pd.DataFrame:
    n = 6
    i = np.arange(offset, offset + n)
    return pd.DataFrame({
        "p": i % 3,
        "x": i * 10,
        "s": [f"s{v % 4}" for v in i],
        "t": pd.to_datetime(i, unit="D", origin="2024-01-01").tz_localize("UTC"),
        "d": [dt.date(2024, 1, 1) + dt.timedelta(days=int(v)) for v in i],
        "f": [float("nan") if v % 5 == 0 else v * 0.5 for v in i],
        "n": pd.array([None if v % 4 == 0 else int(v) for v in i], dtype="Int64"),
    })


def _sentinel(store: MemoryStore) -> None:
    kstore.store_dataset(store, SENTINEL, pd.DataFrame({"p": [1, 2], "v": [1.0, 2.0]}), partition_on="p",
                         secondary_indices=["v"])


def _keys_by_kind(store: MemoryStore, uuid: str) -> dict[str, list[str]]:
    meta = kstore.load_metadata(store, uuid)
    data = sorted(k for files in meta.partitions.values() for k in files.values())
    common = sorted(k for k in store.iter_prefix(uuid + "/") if k.endswith("/" + naming.COMMON_METADATA))
    main = [k for k in (naming.metadata_key(uuid, f) for f in naming.METADATA_FORMATS) if store.exists(k)]
    listing = kstore.blocks.load.list_log(store, uuid)
    return {"main": main, "common": common, "index": sorted(meta.indices.values()),
            "stats": sorted(k for k in store.iter_prefix(f"{uuid}/{naming.KSTORE_DIR}/stats/")), "data": data,
            "log": [naming.log_key(uuid, v) for v in listing.versions],
            "checkpoint": [naming.checkpoint_key(uuid, v) for v in listing.checkpoints]}


def _probe(store: MemoryStore, uuid: str, columns: list[str | None]) -> dict[str, Any]:
    df = kstore.read_dataset(store, uuid, dates_as_object=True)
    out = {}
    for c in columns:
        if c is None:
            continue
        values = [v for v in df[c] if v is not None and v == v]
        if values:
            v = values[0]
            out[c] = v.item() if isinstance(v, np.generic) else v
    return out


def _kstore_base(name: str, fmt: str, kartothek_style: bool = False) -> Base:
    store = MemoryStore()
    uuid = "ds"
    kstore.store_dataset(store, uuid, _frame(0), partition_on="p", secondary_indices=["x", "s"], metadata_format=fmt)
    kstore.update_dataset(store, uuid, _frame(6))
    if kartothek_style:  # no kstore extension (schema from _common_metadata), one inline index
        key = naming.metadata_key(uuid)
        raw = json.loads(store.get(key))
        del raw["kstore"]
        idx = kstore.blocks.load.load_index(store, kstore.load_metadata(store, uuid), "x",
                                            kstore.read_schema(store, uuid))
        vals, labels = idx.pairs()
        inline: dict[str, list[str]] = {}
        for v, lab in zip(vals.to_pylist(), labels.to_pylist()):
            inline.setdefault(str(v), []).append(lab)
        raw["indices"]["x"] = inline
        store.put(key, json.dumps(raw).encode())
        for log in list(store.iter_prefix(naming.log_prefix(uuid))):
            store.delete(log)
    base = Base(name, uuid, {}, _keys_by_kind(store, uuid), fmt, "p", "x", "f")
    base.probe = _probe(store, uuid, ["p", "x", "s", "f"])
    base.append = _frame(20)
    _sentinel(store)
    base.files = dict(store._data)
    return base


def _kartothek_base(uuid: str) -> Base | None:
    from tests.interop.fixtures import SOURCE_STORE

    root = SOURCE_STORE
    if not root.is_dir():
        return None
    store = MemoryStore()
    for path in root.rglob("*"):
        rel = path.relative_to(root).as_posix()
        if path.is_file() and rel.startswith((uuid + "/", uuid + ".by-dataset-metadata")):
            store.put(rel, path.read_bytes())
    meta = kstore.load_metadata(store, uuid)
    schema = kstore.read_schema(store, uuid)
    pk = meta.partition_keys[0] if meta.partition_keys else None
    idx = next(iter(sorted(meta.indices)), None)
    plain = next((f.name for f in schema if f.name not in meta.partition_keys and f.name not in meta.indices
                  and not pa.types.is_nested(f.type)), None)
    fmt = "msgpack.zstd" if store.exists(naming.metadata_key(uuid, "msgpack.zstd")) else "json"
    base = Base(f"kartothek:{uuid}", uuid, {}, _keys_by_kind(store, uuid), fmt, pk, idx, plain)
    base.probe = _probe(store, uuid, [pk, idx, plain])
    base.append = kstore.read_dataset(store, uuid).head(2)
    _sentinel(store)
    base.files = dict(store._data)
    return base


def _format1_base() -> Base:
    """A dataset kstore wrote in format 1 (tests/data/format1: full-metadata log entries,
    statistics and index files), with one format-2 commit on top."""
    from tests.format1 import copy_format1

    store = MemoryStore()
    copy_format1(store, "history", "h")
    base = Base("kstore-format1", "h", {}, {}, "json", "p", "x", "id")
    base.keys = _keys_by_kind(store, "h")
    base.probe = _probe(store, "h", ["p", "x", "id"])
    base.append = pd.DataFrame({"p": [1, 4], "x": [11, 12], "id": [40, 41]})
    _sentinel(store)
    base.files = dict(store._data)
    return base


@cache
def bases() -> tuple[Base, ...]:
    made = [_kstore_base("kstore-json", "json"), _kstore_base("kstore-msgpack", "msgpack.zstd"),
            _kstore_base("kartothek-style", "json", kartothek_style=True), _format1_base()]
    for uuid in ("pub_part_int", "pub_part_str_date", "pub_msgpack", "pub_empty_header"):
        b = _kartothek_base(uuid)
        if b is not None:
            made.append(b)
    return tuple(made)


# -- operations -----------------------------------------------------------------------------------


def _preds(b: Base) -> list[list[tuple]]:
    """One conjunction per probed column: partition pruning, index lookup, statistics."""
    return [[(c, "==", v)] for c, v in b.probe.items()] or [[(b.plain_column or "x", "is null")]]


def _first(b: Base, column: str | None) -> Any:
    return b.probe.get(column) if column else None


READS: dict[str, Callable[[Any, Base], Any]] = {
    "load_metadata": lambda s, b: kstore.load_metadata(s, b.uuid),
    "read_schema": lambda s, b: kstore.read_schema(s, b.uuid),
    "read": lambda s, b: kstore.read_dataset(s, b.uuid),
    "read_predicates": lambda s, b: kstore.read_dataset(s, b.uuid, predicates=_preds(b)),
    "read_table_columns": lambda s, b: kstore.read_table(s, b.uuid, columns=[c for c in (b.plain_column,) if c]),
    "iter": lambda s, b: list(kstore.iter_dataset(s, b.uuid, predicates=_preds(b))),
    "plan": lambda s, b: kstore.plan_read(s, b.uuid, predicates=_preds(b)).explain(),
    "index_lookup": lambda s, b: kstore.index_lookup(s, b.uuid, b.index_column or b.partition_key or "x",
                                                     _first(b, b.index_column or b.partition_key) or 0),
    "history": lambda s, b: kstore.history(s, b.uuid),
    "gc_dry_run": lambda s, b: kstore.garbage_collect(s, b.uuid, dry_run=True),
}
WRITES: dict[str, Callable[[Any, Base], Any]] = {
    "append": lambda s, b: kstore.update_dataset(s, b.uuid, b.append),
    "delete_scope": lambda s, b: kstore.update_dataset(
        s, b.uuid, delete_scope=[{b.partition_key: _first(b, b.partition_key)}] if b.partition_key else [{"p": 0}]),
    "build_indices": lambda s, b: kstore.build_indices(s, b.uuid, [b.plain_column or "x"]),
    "delete_rows": lambda s, b: kstore.delete_rows(
        s, b.uuid, [[(b.plain_column or "x", "==", _first(b, b.plain_column) or 0)]]),
    "copy": lambda s, b: kstore.copy_dataset(s, b.uuid, new_uuid=COPY),
    "upgrade": lambda s, b: kstore.upgrade_dataset(s, b.uuid),
}
OPERATIONS = sorted(READS) + sorted(WRITES)


def _owned(key: str, uuids: tuple[str, ...]) -> bool:
    return any(key.startswith(u + "/") or naming.dataset_uuid_from_metadata_key(key) == u for u in uuids)


def run_operation(inner: MemoryStore, b: Base, name: str, context: str) -> bool:
    """Run one operation and check every invariant; True if it succeeded."""
    rec = CountingStore(inner)
    before = dict(inner._data)
    call = READS.get(name) or WRITES[name]
    try:
        call(rec, b)
        ok = True
    except KstoreError:
        ok = False
    except Exception as exc:  # noqa: BLE001 - this is what the suite looks for
        raise AssertionError(f"{context}: {name} raised {type(exc).__name__}: {str(exc)[:300]}") from exc
    uuids = (b.uuid, COPY) if name == "copy" else (b.uuid,)
    outside = [(m, k) for m, k in rec.keys if not _owned(k, uuids)]
    assert not outside, f"{context}: {name} touched keys outside the dataset: {outside[:5]}"
    sentinel = {k: v for k, v in inner._data.items() if _owned(k, (SENTINEL,))}
    assert sentinel == {k: v for k, v in b.files.items() if _owned(k, (SENTINEL,))}, f"{context}: {name} changed {SENTINEL}"
    if name in READS or not ok:
        changed = sorted(k for k in set(before) | set(inner._data) if before.get(k) != inner._data.get(k))
        assert not changed, f"{context}: {name} ({'read' if name in READS else 'failed write'}) changed {changed[:5]}"
    return ok


def fresh_store(b: Base) -> MemoryStore:
    store = MemoryStore()
    store._data.update(b.files)
    return store
