"""Helpers for the kartothek 5.3 interop fixture tests (no kstore imports here).

Everything the tests assert comes from the fixture set's ``MANIFEST.json`` and
``expected/<uuid>.json`` files (written by kartothek 5.3.0 itself, see the set's README).
This module only

* locates and loads those files (``FIXTURE_ROOT``, ``load_manifest``, ``load_expected``),
* decodes the tagged JSON values (``decode_value`` / ``decode_predicates``),
* summarizes a read result the way the expected files do (``summarize`` / ``row_id_sha256``),
* provides an independent *oracle*: a tiny reference reader built on pyarrow alone that
  reads the raw data files of the fixture store, rebuilds partition columns from the labels
  (decoding them correctly, i.e. without kartothek's two bugs) and evaluates DNF predicates
  row by row in Python. The oracle is itself tested against every recorded result
  (``test_oracle_*`` in the test module) before the tests rely on it for the few facts the
  expected files do not record (the true planned partitions of the two kartothek-bug cases).
* formats readable diffs for failure messages.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import math
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq


def locate_fixtures() -> Path:
    """The kartothek fixture set: $KSTORE_INTEROP_FIXTURES, else ``shared/`` beside the
    checkout (or any parent of it), else /work/shared."""
    if os.environ.get("KSTORE_INTEROP_FIXTURES"):
        return Path(os.environ["KSTORE_INTEROP_FIXTURES"])
    for parent in Path(__file__).resolve().parents:
        candidate = parent / "shared" / "interop" / "kartothek-5.3"
        if candidate.is_dir():
            return candidate
    return Path("/work/shared/interop/kartothek-5.3")


#: Root of the fixture set; override with KSTORE_INTEROP_FIXTURES for another copy.
FIXTURE_ROOT = locate_fixtures()
EXPECTED_DIR = FIXTURE_ROOT / "expected"
SOURCE_STORE = FIXTURE_ROOT / "store"

#: sha256 of the empty string == row_id_sha256 of an empty result (as recorded).
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


# ---------------------------------------------------------------------------------------
# loading
# ---------------------------------------------------------------------------------------


@cache
def load_manifest() -> dict:
    with open(FIXTURE_ROOT / "MANIFEST.json", encoding="utf-8") as fh:
        return json.load(fh)


def dataset_uuids() -> list[str]:
    """The uuids listed in MANIFEST.json, in manifest order."""
    return [d["uuid"] for d in load_manifest()["datasets"]]


@cache
def _load_expected_cached(uuid: str) -> str:
    return (EXPECTED_DIR / f"{uuid}.json").read_text(encoding="utf-8")


def load_expected(uuid: str) -> dict:
    """A fresh (mutable) copy of ``expected/<uuid>.json``."""
    return json.loads(_load_expected_cached(uuid))


def is_kartothek_bug_case(exp: Mapping) -> bool:
    return "kartothek_bug" in exp.get("covers", ())


# ---------------------------------------------------------------------------------------
# tagged values and predicates
# ---------------------------------------------------------------------------------------


def decode_value(v: Any) -> Any:
    """Decode the README's tagged values; lists are decoded element-wise.

    ``{"type": "date", "value": "2024-01-01"}``             -> datetime.date
    ``{"type": "timestamp", "value": ISO, "tz": tz|None}``   -> pandas.Timestamp (tz-aware iff tz)
    ``{"type": "bytes", "base64": ...}``                     -> bytes
    ``{"type": "float", "value": "nan"}``                    -> float
    """
    if isinstance(v, list):
        return [decode_value(x) for x in v]
    if isinstance(v, dict) and "type" in v:
        kind = v["type"]
        if kind == "date":
            return dt.date.fromisoformat(v["value"])
        if kind == "timestamp":
            ts = pd.Timestamp(v["value"])
            tz = v.get("tz")
            if tz is not None:
                ts = ts.tz_convert(tz) if ts.tzinfo is not None else ts.tz_localize(tz)
            return ts
        if kind == "bytes":
            return base64.b64decode(v["base64"])
        if kind == "float":
            return float(v["value"])
        raise ValueError(f"unknown tagged value type {kind!r} in {v!r}")
    return v


def decode_predicates(preds: Sequence | None) -> list[list[tuple]] | None:
    """JSON DNF ``[[[col, op, value], ...], ...]`` -> ``[[(col, op, decoded), ...], ...]``."""
    if preds is None:
        return None
    return [[(col, op, decode_value(val)) for col, op, val in conj] for conj in preds]


def predicate_columns(preds: Sequence | None) -> set[str]:
    return {term[0] for conj in (preds or ()) for term in conj}


def query_truth(q: Mapping) -> tuple[Mapping, bool]:
    """The block a correct reader must reproduce, and whether it is a source-truth override.

    For the two kartothek-bug datasets some queries carry ``source_truth`` (what is really in
    the data); kstore must return that, not kartothek's lossy answer.
    """
    if "source_truth" in q:
        return q["source_truth"], True
    return q, False


def kartothek_wrong(q: Mapping) -> bool:
    """True when the recorded (kartothek) result of a query differs from the source truth."""
    return "source_truth" in q and q.get("kartothek_matches_source") is False


def full_read_truth(exp: Mapping) -> Mapping:
    return exp.get("full_read_source_truth") or exp["full_read"]


# ---------------------------------------------------------------------------------------
# result summaries (as the expected files define them)
# ---------------------------------------------------------------------------------------


def row_id_sha256(row_ids: Iterable[int]) -> str:
    """sha256 (hex) of the comma-joined, ascending-sorted decimal ``row_id``s (README)."""
    return hashlib.sha256(",".join(str(int(i)) for i in sorted(row_ids)).encode("ascii")).hexdigest()


def _column_pylist(result: Any, name: str) -> list:
    if isinstance(result, pa.Table):
        return result.column(name).to_pylist()
    return result[name].tolist()


def num_rows(result: Any) -> int:
    return result.num_rows if isinstance(result, pa.Table) else len(result)


def summarize(result: Any) -> dict:
    """``row_count``, ``row_id_sum``, ``row_id_sha256``, ``amount_sum``, ``row_ids`` of a
    DataFrame or Arrow table (missing ``row_id``/``amount`` columns show up as errors)."""
    row_ids = [int(x) for x in _column_pylist(result, "row_id")]
    amounts = [int(x) for x in _column_pylist(result, "amount")]
    return {
        "row_count": num_rows(result),
        "row_id_sum": sum(row_ids),
        "row_id_sha256": row_id_sha256(row_ids),
        "amount_sum": sum(amounts),
        "row_ids": sorted(row_ids),
    }


SUMMARY_FIELDS = ("row_count", "row_id_sum", "row_id_sha256", "amount_sum")


def compare_summary(expected: Mapping, got: Mapping) -> list[str]:
    """Human readable mismatches between an expected block and ``summarize()`` output."""
    problems = []
    for f in SUMMARY_FIELDS:
        if f in expected and expected[f] != got[f]:
            problems.append(f"{f}: expected {expected[f]!r}, got {got[f]!r}")
    if "row_ids" in expected:
        exp_ids, got_ids = Counter(expected["row_ids"]), Counter(got["row_ids"])
        if exp_ids != got_ids:
            missing = sorted((exp_ids - got_ids).elements())
            extra = sorted((got_ids - exp_ids).elements())
            problems.append(
                f"row_ids differ: missing {short(missing)}, unexpected {short(extra)}"
            )
    dup = [i for i, n in Counter(got["row_ids"]).items() if n > 1]
    if dup:
        problems.append(f"duplicate row_ids in result (rows read twice?): {short(sorted(dup))}")
    return problems


def short(seq: Sequence, n: int = 20) -> str:
    seq = list(seq)
    if len(seq) <= n:
        return repr(seq)
    return repr(seq[:n])[:-1] + f", ... (+{len(seq) - n} more)]"


def set_diff(expected: Iterable, got: Iterable) -> str:
    e, g = set(expected), set(got)
    return (
        f"missing (expected, not returned): {short(sorted(e - g, key=repr))}\n    "
        f"unexpected (returned, not expected): {short(sorted(g - e, key=repr))}"
    )


# ---------------------------------------------------------------------------------------
# schema / type helpers
# ---------------------------------------------------------------------------------------


@cache
def _common_schema_cached(uuid: str) -> pa.Schema:
    exp = load_expected(uuid)
    return pq.read_schema(SOURCE_STORE / uuid / exp["table"] / "_common_metadata")


def common_schema(uuid: str) -> pa.Schema:
    """The ``_common_metadata`` schema, read with pyarrow straight from the fixture store
    (read-only access). Used only to type values for the oracle / canonicalization; the
    test of ``kstore.read_schema`` compares against the recorded strings instead."""
    return _common_schema_cached(uuid)


def normalize_type(t: pa.DataType) -> pa.DataType:
    """The format's type normalization (FORMAT.md), extended to the "large"/view variants
    and timestamp units so that an Arrow result can be compared with ``_common_metadata``."""
    if pa.types.is_dictionary(t):
        return normalize_type(t.value_type)
    if pa.types.is_signed_integer(t):
        return pa.int64()
    if pa.types.is_unsigned_integer(t):
        return pa.uint64()
    if pa.types.is_floating(t):
        return pa.float64()
    if pa.types.is_large_string(t) or getattr(pa.types, "is_string_view", lambda _: False)(t):
        return pa.string()
    if pa.types.is_large_binary(t) or getattr(pa.types, "is_binary_view", lambda _: False)(t):
        return pa.binary()
    if pa.types.is_list(t) or pa.types.is_large_list(t) or (
        hasattr(pa.types, "is_list_view") and (pa.types.is_list_view(t) or pa.types.is_large_list_view(t))
    ):
        return pa.list_(normalize_type(t.value_type))
    if pa.types.is_timestamp(t):
        return pa.timestamp("ns", tz=t.tz)  # unit ignored, tz kept
    return t


def arrow_types_compatible(common: pa.DataType, got: pa.DataType) -> bool:
    if pa.types.is_null(common):  # all-missing column in the header: anything goes
        return True
    return normalize_type(common) == normalize_type(got)


def _is_string_arrow(t: pa.DataType) -> bool:
    return (
        pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or getattr(pa.types, "is_string_view", lambda _: False)(t)
        or pa.types.is_null(t)
        or (pa.types.is_dictionary(t) and _is_string_arrow(t.value_type))
    )


def dtype_problem(recorded: str, got: Any, arrow_type: pa.DataType | None) -> str | None:
    """None if the pandas dtype ``got`` is compatible with kartothek's recorded dtype string.

    Rules (kartothek 5.3 ran on pandas 1.3; kstore runs on pandas 3):

    * exact: int64 / uint64 / int* / float64 / bool / category -- these carry the
      value semantics and never legitimately differ.
    * float32: kartothek returned the data file's float32 for ``c_float32`` although
      ``_common_metadata`` normalizes it to double; returning the dataset type (float64)
      is equally valid, so float32 or float64 is accepted (no other dtype).
    * "object" for a *string* column (string, dictionary<string>, or an all-null header
      column): pandas 3 converts Arrow strings to its new ``str`` dtype (StringDtype); any
      StringDtype (``str``, ``string[python]``, ``string[pyarrow]``) or object is accepted.
      "object" for bytes / lists: must stay object (no new pandas dtype applies there).
    * "datetime64[ns]" (naive; also used for date32 columns, since kartothek converts dates
      to datetime64 unless ``dates_as_object=True``): any datetime64 unit is accepted
      (pandas >= 2 keeps Arrow's us/ms unit; kartothek/pandas 1.3 could only produce ns),
      but it must be naive and of kind datetime64 (not object, not period).
    * "datetime64[ns, TZ]": any unit, but the time zone must be exactly TZ.
    * "Int64" (nullable integer column): any nullable *integer* dtype (pandas ``Int64`` or
      ``int64[pyarrow]``). float64 is NOT accepted: it silently loses integer exactness.
    """
    got_s = str(got)
    if recorded == "object":
        if arrow_type is not None and _is_string_arrow(arrow_type):
            if got_s == "object" or isinstance(got, pd.StringDtype):
                return None
            return f"expected object or a pandas string dtype (str) for a string column, got {got_s}"
        if got_s == "object":
            return None
        return f"expected object, got {got_s}"
    if recorded.startswith("datetime64[ns,"):
        tz = recorded[len("datetime64[ns,") : -1].strip()
        if isinstance(got, pd.DatetimeTZDtype) and str(got.tz) == tz:
            return None
        return f"expected tz-aware datetime64 with tz={tz} (any unit), got {got_s}"
    if recorded == "datetime64[ns]":
        if isinstance(got, np.dtype) and got.kind == "M":
            return None
        return f"expected a naive numpy datetime64 dtype (any unit), got {got_s}"
    if recorded == "Int64":
        if got_s in ("Int64", "int64[pyarrow]"):
            return None
        return f"expected a nullable integer dtype (Int64 / int64[pyarrow]), got {got_s}"
    if recorded == "float32":
        if got_s in ("float32", "float64"):
            return None
        return f"expected float32 (or float64, the _common_metadata type), got {got_s}"
    if recorded == "category":
        if isinstance(got, pd.CategoricalDtype):
            return None
        return f"expected category, got {got_s}"
    if got_s == recorded:
        return None
    return f"expected {recorded}, got {got_s}"


# ---------------------------------------------------------------------------------------
# value canonicalization (for comparing kstore results with the oracle / predicates)
# ---------------------------------------------------------------------------------------


def _is_missing(v: Any) -> bool:
    if v is None or v is pd.NA or v is pd.NaT:
        return True
    if isinstance(v, float) and math.isnan(v):
        return True
    if isinstance(v, (np.floating,)) and np.isnan(v):
        return True
    if isinstance(v, (np.datetime64, np.timedelta64)) and np.isnat(v):
        return True
    return False


def canon(v: Any, t: pa.DataType) -> Any:
    """Canonical Python value of ``v`` interpreted as Arrow type ``t`` (None for missing)."""
    if isinstance(v, (list, tuple, np.ndarray)):
        inner = t.value_type if (pa.types.is_list(t) or pa.types.is_large_list(t)) else t
        return [canon(x, inner) for x in v]
    if _is_missing(v):
        return None
    if pa.types.is_dictionary(t):
        return canon(v, t.value_type)
    if pa.types.is_boolean(t):
        return bool(v)
    if pa.types.is_integer(t):
        return int(v)
    if pa.types.is_floating(t):
        return float(v)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return str(v)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return bytes(v)
    if pa.types.is_date(t):
        if isinstance(v, dt.date) and not isinstance(v, dt.datetime):
            return v
        return pd.Timestamp(v).date()
    if pa.types.is_timestamp(t):
        ts = pd.Timestamp(v)
        if t.tz is not None:
            ts = ts.tz_localize("UTC") if ts.tzinfo is None else ts
            ts = ts.tz_convert(t.tz)
        return ts
    return v


def parse_label_value(raw: str, t: pa.DataType) -> Any:
    """Typed value of an already-unquoted partition label value (``str(value)`` on write)."""
    if pa.types.is_dictionary(t):
        return parse_label_value(raw, t.value_type)
    if pa.types.is_boolean(t):
        if raw not in ("True", "False"):
            raise ValueError(f"bad bool partition value {raw!r}")
        return raw == "True"
    if pa.types.is_integer(t):
        return int(raw)
    if pa.types.is_floating(t):
        return float(raw)
    if pa.types.is_date(t):
        return dt.date.fromisoformat(raw)
    if pa.types.is_timestamp(t):
        return canon(pd.Timestamp(raw), t)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return raw
    raise ValueError(f"no label parser for type {t}")


def decode_label(label: str, partition_keys: Sequence[str]) -> dict[str, str]:
    """Correct decoding of a partition label into ``{col: unquoted value}``.

    ``<k1>=<v1>/<k2>=<v2>/.../<id>``. Unlike kartothek, a segment that does not start a new
    ``<next key>=`` pair continues the previous value (kartothek left ``/`` unescaped, so a
    value with a slash spans several segments; '=' inside values is always escaped).
    """
    segments = label.split("/")[:-1]  # last segment is the file id
    out: dict[str, list[str]] = {}
    keys = list(partition_keys)
    current = None
    for seg in segments:
        nxt = keys[len(out)] if len(out) < len(keys) else None
        if "=" in seg and nxt is not None and unquote(seg.split("=", 1)[0]) == nxt:
            current = nxt
            out[current] = [seg.split("=", 1)[1]]
        elif current is not None:
            out[current].append(seg)
        else:
            raise ValueError(f"label {label!r} does not start with {keys[0]!r}=")
    if list(out) != keys:
        raise ValueError(f"label {label!r}: found keys {list(out)}, expected {keys}")
    return {k: unquote("/".join(v)) for k, v in out.items()}


def typed_label_values(uuid: str, label: str) -> dict[str, Any]:
    exp = load_expected(uuid)
    schema = common_schema(uuid)
    raw = decode_label(label, exp["partition_keys"])
    return {k: parse_label_value(v, schema.field(k).type) for k, v in raw.items()}


# ---------------------------------------------------------------------------------------
# predicate evaluation (Python, row by row)
# ---------------------------------------------------------------------------------------


def _cmp(a: Any, op: str, b: Any) -> bool:
    if a is None:
        return False  # missing values never match (no "is null" in the recorded queries)
    if op == "in":
        return any(_cmp(a, "==", x) for x in b)
    if isinstance(b, float) and math.isnan(b):
        return False
    if op == "==":
        return a == b
    if op == "!=":
        return a != b
    if op == "<":
        return a < b
    if op == "<=":
        return a <= b
    if op == ">":
        return a > b
    if op == ">=":
        return a >= b
    raise ValueError(f"unsupported op {op!r}")


def canon_predicate_value(val: Any, t: pa.DataType) -> Any:
    if isinstance(val, list):
        return [canon(x, t) for x in val]
    return canon(val, t)


def row_matches(row: Mapping[str, Any], preds: Sequence | None, schema: pa.Schema) -> bool:
    """``row`` holds canonical values; ``preds`` decoded DNF (None/[] = everything)."""
    if not preds:
        return True
    for conj in preds:
        if all(
            _cmp(row[col], op, canon_predicate_value(val, schema.field(col).type))
            for col, op, val in conj
        ):
            return True
    return False


def plan_upper_bound(uuid: str, preds: Sequence | None) -> set[str]:
    """Partitions whose (correctly decoded) partition values can satisfy ``preds``; terms on
    non-partition columns are treated as "maybe". For predicates on partition columns only,
    this is exactly the set a correct planner keeps."""
    exp = load_expected(uuid)
    labels = set(exp["partitions"])
    if not preds:
        return labels
    pkeys = set(exp["partition_keys"])
    schema = common_schema(uuid)
    kept = set()
    for label in labels:
        values = typed_label_values(uuid, label)
        for conj in preds:
            if all(
                col not in pkeys
                or _cmp(values[col], op, canon_predicate_value(val, schema.field(col).type))
                for col, op, val in conj
            ):
                kept.add(label)
                break
    return kept


def partition_lookup_truth(uuid: str, column: str, value: Any) -> set[str]:
    """Labels a correct partition index returns for ``column == value``."""
    return plan_upper_bound(uuid, [[(column, "==", value)]])


# ---------------------------------------------------------------------------------------
# the oracle: raw data files + correctly decoded partition values
# ---------------------------------------------------------------------------------------


@cache
def _oracle_rows_cached(uuid: str) -> tuple:
    exp = load_expected(uuid)
    schema = common_schema(uuid)
    rows = []
    for label, files in sorted(exp["partitions"].items()):
        key = files[exp["table"]]
        table = pq.read_table(SOURCE_STORE / key)
        part_values = typed_label_values(uuid, label) if exp["partition_keys"] else {}
        for rec in table.to_pylist():
            row = {}
            for f in schema:
                if f.name in part_values:
                    row[f.name] = part_values[f.name]
                else:
                    row[f.name] = canon(rec.get(f.name), f.type)
            row["__label__"] = label
            rows.append(row)
    return tuple(rows)


def oracle_rows(uuid: str) -> list[dict]:
    """Every row of the dataset as canonical values + ``__label__`` (its partition)."""
    return [dict(r) for r in _oracle_rows_cached(uuid)]


def oracle_query(uuid: str, preds: Sequence | None) -> list[dict]:
    schema = common_schema(uuid)
    return [r for r in oracle_rows(uuid) if row_matches(r, preds, schema)]


def rows_summary(rows: Sequence[Mapping]) -> dict:
    ids = [r["row_id"] for r in rows]
    return {
        "row_count": len(rows),
        "row_id_sum": sum(ids),
        "row_id_sha256": row_id_sha256(ids),
        "amount_sum": sum(r["amount"] for r in rows),
        "row_ids": sorted(ids),
    }


# ---------------------------------------------------------------------------------------
# misc
# ---------------------------------------------------------------------------------------


def to_plain(obj: Any) -> Any:
    """Recursively turn Mappings (e.g. MappingProxyType) into dicts and tuples into lists."""
    if isinstance(obj, Mapping):
        return {k: to_plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_plain(v) for v in obj]
    return obj


def fmt_query(uuid: str, preds: Any) -> str:
    return f"dataset {uuid!r}, predicates {json.dumps(preds, default=str)}"
