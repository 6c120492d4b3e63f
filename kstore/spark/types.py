"""Spark <-> kstore types: exact in both directions, checked before any file is written.

Writing, a Spark schema maps to the Arrow types of the data files:

====================  =================================  =============================
Spark                 data files (Arrow)                 dataset schema (normalized)
====================  =================================  =============================
boolean               bool                               bool
byte/short/int/long   int8 / int16 / int32 / int64       int64
float / double        float32 / float64                  float64
decimal(p, s)         decimal128(p, s)                   decimal128(p, s)
string (char/varchar) string                             string
binary                binary                             binary
date                  date32                             date32
timestamp             timestamp[us, tz=UTC]              timestamp[us, tz=UTC]
timestamp_ntz         timestamp[us]                      timestamp[us]
array<T>              list<T>                            list<norm(T)>
struct<...>           struct<...>                        struct<norm(...)>
void (NullType)       null                               null
====================  =================================  =============================

``map``, intervals, ``time``, ``variant`` and user-defined types raise
:class:`~kstore.errors.UnsupportedTypeError` naming the column. Spark timestamps are
instants: they are stored in UTC whatever the session time zone (Spark hands them to
Python in the session zone; converting the zone is free, the instant is unchanged).

Reading, the dataset's normalized Arrow schema maps back (int64 -> long, uint64 ->
decimal(20, 0), timestamp with a zone -> timestamp, naive -> timestamp_ntz, ...). A dataset
written by Spark keeps the Spark schema in its user metadata (``spark_schema``); a field
whose Spark type still normalizes to the dataset's type reads back as that exact type
(an ``int`` column comes back as ``int``, not ``long``).

Examples
--------
>>> from pyspark.sql import types as T
>>> s = T.StructType([T.StructField("n", T.IntegerType()), T.StructField("t", T.TimestampType())])
>>> arrow_schema(s)
n: int32
t: timestamp[us, tz=UTC]
>>> spark_schema(pa.schema([("n", pa.int64()), ("u", pa.uint64())])).simpleString()
'struct<n:bigint,u:decimal(20,0)>'
>>> arrow_schema(T.StructType([T.StructField("m", T.MapType(T.StringType(), T.IntegerType()))]),
...              dataset="d")
Traceback (most recent call last):
...
kstore.errors.UnsupportedTypeError: dataset 'd': column 'm' has Spark type map<string,int>, which kstore cannot store; supported: boolean, byte, short, int, long, float, double, decimal, string, binary, date, timestamp, timestamp_ntz, arrays and structs of those
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.types as pat
from pyspark.sql import types as T

from kstore.core.types import SPARK_SCHEMA_KEY, normalize_type
from kstore.errors import UnsupportedTypeError

__all__ = [
    "arrow_schema",
    "spark_schema",
    "to_storage",
    "to_spark_batches",
    "schema_hint",
    "dataset_type",
    "SPARK_SCHEMA_KEY",
]


_SUPPORTED = (
    "boolean, byte, short, int, long, float, double, decimal, string, binary, date, "
    "timestamp, timestamp_ntz, arrays and structs of those"
)

_ATOMIC: tuple[tuple[type, pa.DataType], ...] = (
    (T.BooleanType, pa.bool_()),
    (T.ByteType, pa.int8()),
    (T.ShortType, pa.int16()),
    (T.IntegerType, pa.int32()),
    (T.LongType, pa.int64()),
    (T.FloatType, pa.float32()),
    (T.DoubleType, pa.float64()),
    (T.BinaryType, pa.binary()),
    (T.DateType, pa.date32()),
    (T.TimestampNTZType, pa.timestamp("us")),
    (T.TimestampType, pa.timestamp("us", "UTC")),
    (T.NullType, pa.null()),
)


def _unsupported(dt: T.DataType, column: str, dataset: str | None, why: str = "") -> UnsupportedTypeError:
    prefix = f"dataset {dataset!r}: " if dataset else ""
    return UnsupportedTypeError(
        f"{prefix}column {column!r} has Spark type {dt.simpleString()}, which kstore cannot store"
        f"{why}; supported: {_SUPPORTED}"
    )


def _to_arrow(dt: T.DataType, column: str, dataset: str | None) -> pa.DataType:
    # exact class checks: TimestampNTZType is not a TimestampType subclass, but be explicit
    for cls, at in _ATOMIC:
        if type(dt) is cls:
            return at
    if isinstance(dt, (T.StringType, T.CharType, T.VarcharType)):
        return pa.string()
    if isinstance(dt, T.DecimalType):
        return pa.decimal128(dt.precision, dt.scale)
    if isinstance(dt, T.ArrayType):
        return pa.list_(pa.field("item", _to_arrow(dt.elementType, f"{column}[]", dataset)))
    if isinstance(dt, T.StructType):
        if not dt.fields:
            raise _unsupported(dt, column, dataset, " (a struct needs at least one field)")
        names = [f.name for f in dt.fields]
        if len(set(names)) != len(names):
            raise _unsupported(dt, column, dataset, " (duplicate struct field names)")
        return pa.struct([pa.field(f.name, _to_arrow(f.dataType, f"{column}.{f.name}", dataset)) for f in dt.fields])
    raise _unsupported(dt, column, dataset)


def arrow_schema(schema: T.StructType, *, dataset: str | None = None) -> pa.Schema:
    """The Arrow schema of the data files for a Spark schema; raises on unsupported types.

    Duplicate column names (Spark allows them) are rejected too.

    Parameters
    ----------
    schema
        A Spark ``StructType``.
    dataset
        The dataset's name, for error messages.

    Returns
    -------
    pyarrow.Schema
        The types kstore stores (e.g. ``long`` -> ``int64``, ``timestamp`` ->
        ``timestamp[us, tz=UTC]``).

    Raises
    ------
    UnsupportedTypeError
        A column's type has no kstore equivalent (named in the message).

    Examples
    --------
    >>> from pyspark.sql import types as T
    >>> from kstore.spark import arrow_schema
    >>> arrow_schema(T.StructType([T.StructField("id", T.LongType()), T.StructField("name", T.StringType())]))
    id: int64
    name: string
    """
    names = [f.name for f in schema.fields]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        from kstore.errors import InvalidArgumentError

        prefix = f"dataset {dataset!r}: " if dataset else ""
        raise InvalidArgumentError(f"{prefix}duplicate column names {dupes}")
    return pa.schema([pa.field(f.name, _to_arrow(f.dataType, f.name, dataset)) for f in schema.fields])


def _to_spark(t: pa.DataType, column: str) -> T.DataType:
    if pat.is_dictionary(t):
        return _to_spark(t.value_type, column)
    if pat.is_boolean(t):
        return T.BooleanType()
    if pat.is_int8(t):
        return T.ByteType()
    if pat.is_int16(t) or pat.is_uint8(t):
        return T.ShortType()
    if pat.is_int32(t) or pat.is_uint16(t):
        return T.IntegerType()
    if pat.is_int64(t) or pat.is_uint32(t):
        return T.LongType()
    if pat.is_uint64(t):
        return T.DecimalType(20, 0)
    if pat.is_float16(t) or pat.is_float32(t):
        return T.FloatType()
    if pat.is_float64(t):
        return T.DoubleType()
    if pat.is_decimal(t) and t.precision <= 38:
        return T.DecimalType(t.precision, t.scale)
    if pat.is_string(t) or pat.is_large_string(t) or pat.is_string_view(t):
        return T.StringType()
    if pat.is_binary(t) or pat.is_large_binary(t) or pat.is_fixed_size_binary(t) or pat.is_binary_view(t):
        return T.BinaryType()
    if pat.is_date(t):
        return T.DateType()
    if pat.is_timestamp(t):
        return T.TimestampType() if t.tz is not None else T.TimestampNTZType()
    if pat.is_list(t) or pat.is_large_list(t) or pat.is_fixed_size_list(t):
        return T.ArrayType(_to_spark(t.value_type, f"{column}[]"), True)
    if pat.is_struct(t):
        return T.StructType([T.StructField(f.name, _to_spark(f.type, f"{column}.{f.name}"), True) for f in t])
    if pat.is_null(t):
        return T.NullType()
    raise UnsupportedTypeError(f"column {column!r} has type {t}, which Spark cannot read")


def schema_hint(metadata: Mapping[str, Any] | None) -> T.StructType | None:
    """The Spark schema recorded in a dataset's user metadata, if any (and readable)."""
    raw = (metadata or {}).get(SPARK_SCHEMA_KEY)
    if not raw:
        return None
    try:
        parsed = T.StructType.fromJson(json.loads(raw) if isinstance(raw, str) else raw)
    except (ValueError, KeyError, TypeError):
        return None
    return parsed


def dataset_type(t: pa.DataType, column: str = "?") -> T.DataType:
    """The Spark type of a normalized dataset type (``int64`` -> ``long``, ``float64`` ->
    ``double``): what Spark reads a column as when no narrower type is recorded.

    >>> dataset_type(normalize_type(pa.float32())).simpleString()
    'double'
    """
    return _to_spark(t, column)


def _hint_fits(hinted: T.DataType, t: pa.DataType, column: str) -> bool:
    try:
        return normalize_type(_to_arrow(hinted, column, None), column).equals(normalize_type(t, column))
    except (UnsupportedTypeError, pa.ArrowException):
        return False


def spark_schema(schema: pa.Schema, *, hint: T.StructType | None = None) -> T.StructType:
    """The Spark schema to read a dataset with (every field nullable).

    Parameters
    ----------
    schema
        The dataset's normalized Arrow schema.
    hint
        The schema Spark wrote the dataset with: gives the exact Spark type of each column
        whose type still matches; other columns use the default mapping.

    Returns
    -------
    pyspark.sql.types.StructType
        One nullable field per column.

    Examples
    --------
    >>> import pyarrow as pa
    >>> from kstore.spark import spark_schema
    >>> spark_schema(pa.schema([("id", pa.int64()), ("day", pa.date32())])).simpleString()
    'struct<id:bigint,day:date>'
    """
    hinted = {f.name: f.dataType for f in hint.fields} if hint is not None else {}
    fields = []
    for f in schema:
        h = hinted.get(f.name)
        dt = h if h is not None and _hint_fits(h, f.type, f.name) else _to_spark(f.type, f.name)
        fields.append(T.StructField(f.name, dt, True))
    return T.StructType(fields)


def to_storage(batches: list[pa.RecordBatch], target: pa.Schema) -> pa.Table:
    """Spark's Arrow batches (one chunk) as a table of the data-file types ``target``.

    Only metadata-level casts happen in practice: session-zone timestamps -> UTC (same
    instants), ``list<element>`` -> ``list<item>``, large strings -> strings.
    """
    table = pa.Table.from_batches(batches)
    if table.schema.equals(target, check_metadata=False):
        return table
    return table.cast(target)


def _cast(col: pa.ChunkedArray | pa.Array, t: pa.DataType) -> pa.ChunkedArray | pa.Array:
    """Safe casts only: a value that does not fit the Spark type raises (never truncated)."""
    return col if col.type.equals(t) else pc.cast(col, t)


def to_spark_batches(table: pa.Table, target: pa.Schema, max_rows: int) -> list[pa.RecordBatch]:
    """A kstore read result as record batches of exactly the Arrow schema Spark expects."""
    arrays = [_cast(table.column(f.name), f.type) for f in target]
    out = pa.Table.from_arrays(arrays, schema=target)
    return out.to_batches(max_chunksize=max_rows)
