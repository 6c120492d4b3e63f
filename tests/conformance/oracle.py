"""The oracle: canonical values of any engine's output, and predicates evaluated on the
source rows with each engine's semantics.

Canonical values make outputs of every engine comparable: ints are ``int``, floats
``float`` (NaN is the string ``"NaN"``, or None where the engine cannot tell NaN from a
missing value: pandas float columns), decimals ``Decimal``, strings ``str``, binary
``bytes``, dates ``datetime.date``, timestamps integer microseconds since the epoch (UTC
for zoned columns, wall time for naive ones), lists ``list``, structs ``dict``.

Comparison semantics differ between engines only for NaN:

* ``"ieee"`` (kstore's predicates, Arrow): NaN compares false, except ``!=`` / ``not in``;
* ``"spark"``: NaN equals NaN and is greater than every other value;
* ``"pandas"``: NaN is a missing value (``is null`` holds, comparisons do not).

A null satisfies no comparison (SQL), only ``is null``.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.types as pat

from tests.core.conftest import match_value

_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_US = dt.timedelta(microseconds=1)


def _missing(v: Any) -> bool:
    if v is None or v is pd.NA or v is pd.NaT:
        return True
    return isinstance(v, np.datetime64) and np.isnat(v)


def micros(v: Any, zoned: bool) -> int:
    """A timestamp as integer microseconds since the epoch (exact for years 1..9999)."""
    if isinstance(v, (int, np.integer)):
        return int(v)  # already converted (Spark's unix_micros)
    if isinstance(v, np.datetime64):
        return int(v.astype("datetime64[us]").astype(np.int64))
    if isinstance(v, pd.Timestamp):
        if v.tzinfo is not None:
            v = v.tz_convert("UTC")
        return int(v.as_unit("us")._value)
    if zoned or v.tzinfo is not None:
        return (v.astimezone(dt.timezone.utc) - _EPOCH_UTC) // _US
    return (v - _EPOCH) // _US


def canon(v: Any, t: pa.DataType, *, nan_is_null: bool = False) -> Any:
    """The canonical form of one value of a column of (normalized source) type ``t``."""
    if pat.is_dictionary(t):
        t = t.value_type
    if isinstance(v, float) and math.isnan(v) and pat.is_floating(t):
        return None if nan_is_null else "NaN"
    if _missing(v) or (isinstance(v, float) and math.isnan(v) and not pat.is_floating(t)):
        return None
    if pat.is_integer(t):
        return int(v)
    if pat.is_floating(t):
        return float(v)
    if pat.is_boolean(t):
        return bool(v)
    if pat.is_decimal(t):
        return Decimal(v) if not isinstance(v, Decimal) else v
    if pat.is_string(t):
        return str(v)
    if pat.is_binary(t):
        return bytes(v)
    if pat.is_date(t):
        if isinstance(v, (pd.Timestamp, dt.datetime)):
            return v.date()
        if isinstance(v, np.datetime64):
            return pd.Timestamp(v).date()
        return v
    if pat.is_timestamp(t):
        return micros(v, t.tz is not None)
    if pat.is_list(t):
        return [canon(x, t.value_type, nan_is_null=nan_is_null) for x in list(v)]
    if pat.is_struct(t):
        items = v.asDict(recursive=True) if hasattr(v, "asDict") else dict(v)
        return {f.name: canon(items.get(f.name), f.type, nan_is_null=nan_is_null) for f in t}
    raise AssertionError(f"no canonical form for {t}")


def canon_rows(rows: Iterable[Mapping[str, Any]], schema: pa.Schema, *, nan_is_null: bool = False) -> list[dict]:
    """Canonical rows (columns as given), sorted by ``id`` when there is one."""
    out = [{c: canon(v, schema.field(c).type, nan_is_null=nan_is_null) for c, v in r.items()} for r in rows]
    if out and "id" in out[0]:
        out.sort(key=lambda r: r["id"])
    return out


def frame_rows(df: pd.DataFrame) -> list[dict]:
    """The rows of a pandas frame as dicts of Python objects (``columns=[]``: empty dicts)."""
    if df.shape[1] == 0:
        return [{} for _ in range(len(df))]
    cols = {c: df[c].tolist() for c in df.columns}
    return [{c: cols[c][i] for c in cols} for i in range(len(df))]


# -- predicates -----------------------------------------------------------------------------


def _nan(v: Any) -> bool:
    return isinstance(v, float) and math.isnan(v)


def match(v: Any, op: str, lit: Any, semantics: str) -> bool:
    """``v op lit`` for one source value under an engine's semantics (see the module doc);
    IEEE is the core tests' oracle (``tests.core.conftest.match_value``)."""
    if semantics == "pandas" and _nan(v):
        v = None
    if semantics == "spark" and _nan(v) and op not in ("is null", "is not null"):
        return op in ("!=", ">", ">=", "not in")  # NaN == NaN, NaN > all (literals are never NaN)
    return match_value(v, op, lit)


def matching_ids(source: pa.Table, dnf: Sequence[Sequence[tuple]], semantics: str) -> list[int]:
    """Ids of the source rows a DNF predicate selects under ``semantics``."""
    out = []
    for row in source.to_pylist():
        if any(all(match(row[t[0]], t[1], t[2] if len(t) > 2 else None, semantics) for t in conj) for conj in dnf):
            out.append(row["id"])
    return out


def expected_rows(source: pa.Table, ids: Iterable[int], columns: Sequence[str], *, nan_is_null: bool) -> list[dict]:
    """The canonical source rows with these ids, projected on ``columns``."""
    wanted = set(ids)
    rows = [{c: r[c] for c in columns} for r in source.to_pylist() if r["id"] in wanted]
    return canon_rows(rows, source.schema, nan_is_null=nan_is_null)


def diff(got: list[dict], want: list[dict], limit: int = 3) -> str | None:
    """None when equal; else a short description (ids missing / extra, first differing rows).

    Rows without an ``id`` column compare as multisets (engines return rows in any order).
    """
    if got == want:
        return None
    if not (got and "id" in got[0]) and not (want and "id" in want[0]):
        if sorted(map(repr, got)) == sorted(map(repr, want)):
            return None
        return f"{len(got)} rows, want {len(want)}; e.g. {sorted(map(repr, got))[:1]} vs {sorted(map(repr, want))[:1]}"
    if got and "id" in got[0]:
        g, w = {r["id"]: r for r in got}, {r["id"]: r for r in want}
        missing, extra = sorted(set(w) - set(g)), sorted(set(g) - set(w))
        changed = [(i, g[i], w[i]) for i in sorted(set(g) & set(w)) if g[i] != w[i]][:limit]
        parts = []
        if missing:
            parts.append(f"missing ids {missing}")
        if extra:
            parts.append(f"extra ids {extra}")
        if len(got) != len(g):
            parts.append(f"{len(got) - len(g)} duplicated row(s)")
        for i, a, b in changed:
            cols = [c for c in b if a.get(c) != b[c]]
            parts.append(f"id {i}: " + ", ".join(f"{c}={a.get(c)!r} (want {b[c]!r})" for c in cols))
        return "; ".join(parts) or "rows differ"
    return f"{len(got)} rows, want {len(want)}"
