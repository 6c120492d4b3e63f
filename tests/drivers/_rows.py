"""Helpers of the row-operation tests (merge, update_rows): frames with narrow and odd
dtypes, a normal form of rows, store listings, a failure injected at every store call."""

from __future__ import annotations

import datetime as dt
import itertools
import math
from collections.abc import Callable

import numpy as np
import pandas as pd
from hypothesis import strategies as st

import kstore
from kstore.blocks import load
from kstore.errors import CommitStateUnknownError, StoreError
from tests.drivers._stores import HookStore

UUID = "m"
TZ = "Europe/Berlin"



def frame(rows: list[dict]) -> pd.DataFrame:
    """Rows as a frame with the dataset's dtypes (none of them int64/float64 by accident)."""
    cols = ["p", "k", "i8", "u16", "f32", "s", "ts", "d", "b"]
    df = pd.DataFrame({c: [r[c] for r in rows] for c in cols})
    return df.astype({"p": "int16", "k": "Int32", "i8": "int8", "u16": "uint16", "f32": "float32", "s": "string",
                      "b": "bool"}).assign(
        ts=pd.to_datetime(df["ts"], utc=True).dt.tz_convert(TZ).astype(f"datetime64[us, {TZ}]"),
        d=df["d"].astype(object))


def norm_value(v):
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA or v is pd.NaT:
        return None
    if isinstance(v, (pd.Timestamp, dt.datetime, dt.date)):
        return pd.Timestamp(v).isoformat()
    if isinstance(v, (np.floating, float)):
        return float(v)
    if isinstance(v, (np.integer, int)) and not isinstance(v, bool):
        return int(v)
    if isinstance(v, np.bool_):
        return bool(v)
    return v


def rows_of(df: pd.DataFrame) -> list[tuple]:
    cols = sorted(df.columns)
    out = [tuple(norm_value(v) for v in r) for r in df[cols].itertuples(index=False, name=None)]
    return sorted(out, key=repr)


def expect_rows(df: pd.DataFrame) -> list[tuple]:
    return rows_of(df) if len(df) else []


def file_keys(meta) -> dict[str, str]:
    """label -> data file key of a version."""
    return {lab: meta.file_key(lab) for lab in meta.partitions}


def data_files(store) -> set[str]:
    return {k for k in store.iter_prefix(UUID + "/") if k.endswith(".parquet") and "/indices/" not in k
            and "/_kstore/" not in k}


def referenced(store) -> set[str]:
    keys: set[str] = set()
    for v in load.log_versions(store, UUID):
        entry = load.load_entry(store, UUID, v)
        if entry.has_dataset:
            keys |= set(load.entry_metadata(store, UUID, entry).referenced_keys())
    return keys


KEYS = st.one_of(st.none(), st.integers(0, 12))


@st.composite
def row(draw, key=KEYS):
    return {
        "p": draw(st.integers(0, 2)),
        "k": draw(key),
        "i8": draw(st.integers(-128, 127)),
        "u16": draw(st.integers(0, 65535)),
        "f32": draw(st.sampled_from([-1.5, 0.0, 2.25, 1e30])),
        "s": draw(st.one_of(st.none(), st.sampled_from(["a", "ü", "", "x/y"]))),
        "ts": draw(st.datetimes(dt.datetime(1990, 1, 1), dt.datetime(2100, 1, 1),
                                timezones=st.just(dt.timezone.utc))).replace(microsecond=0),
        "d": draw(st.dates(dt.date(1900, 1, 1), dt.date(2200, 1, 1))),
        "b": draw(st.booleans()),
    }


def assert_all_or_nothing(fresh: Callable[[], object], operation: Callable[[object], object]) -> None:
    """Fail each store call of ``operation`` in turn (a :class:`StoreError`), each on a
    dataset from ``fresh()``: afterwards the dataset reads exactly the old rows or exactly
    the rows the operation makes, and no data file is left that no version references."""
    probe = HookStore(fresh())
    operation(probe)
    done = rows_of(kstore.read_dataset(probe.inner, UUID))
    n = len(probe.calls)
    assert n > 10
    outcomes = set()
    for i in range(n):
        inner = fresh()
        old = rows_of(kstore.read_dataset(inner, UUID))
        assert old != done
        calls = itertools.count()

        def before(method, key, _calls=calls, _i=i):
            if next(_calls) == _i:
                raise StoreError(f"injected: call {_i}: {method} {key}")

        try:
            operation(HookStore(inner, before=before))
            outcome = "ok"
        except StoreError:
            outcome = "failed"
        except CommitStateUnknownError:  # the version may stand
            outcome = "unknown"
        now = rows_of(kstore.read_dataset(inner, UUID))
        assert now in (old, done), (i, outcome)
        outcomes.add((outcome, now == done))
        if now == old:  # not committed: no file of the operation is left
            assert data_files(inner) == set(file_keys(kstore.load_metadata(inner, UUID)).values()), (i, outcome)
        else:
            assert data_files(inner) <= referenced(inner), (i, outcome)
    assert ("failed", False) in outcomes
