"""Type normalization, schema compatibility, partition value (de)coding, literal coercion.

Pure functions over pyarrow types; no I/O.

The normalized ("common") type of a column is what ``_common_metadata`` stores
(FORMAT.md A): int8..64 -> int64, uint8..64 -> uint64, float16..64 -> float64,
dictionary<T> -> norm(T), list<T> -> list<norm(T)>, large/view string and binary ->
string/binary, timestamps -> timestamp[us, tz]. Two schemas are compatible when their
normalized types match per column; ``null`` (all values missing) matches anything.

Timestamps are microseconds everywhere: in ``_common_metadata``, in index, statistics and
data files, and in what readers return. ``timestamp[us]`` holds every value Spark can
(0001-01-01 .. 9999-12-31 23:59:59.999999) and pandas >= 2 reads it as
``datetime64[us]``; nanoseconds would end in 1677 / 2262. Input in other units is
converted exactly; a value with nanoseconds is refused before anything is written
(:func:`storage_type`, ``kstore.blocks.write.to_arrow``).

Examples
--------
>>> import pyarrow as pa
>>> normalize_type(pa.dictionary(pa.int8(), pa.large_string()))
DataType(string)
>>> decode_partition_value("False", pa.bool_())
False
>>> encode_partition_value(1.5)
'1.5'
"""

from __future__ import annotations

import ast
import datetime as dt
import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.types as pat

from kstore.errors import (
    CorruptMetadataError,
    InvalidPredicateError,
    SchemaMismatchError,
    UnsupportedTypeError,
    short_repr,
)

__all__ = [
    "TYPE_HINT_KEYS",
    "SPARK_SCHEMA_KEY",
    "drop_stale_type_hints",
    "normalize_type",
    "normalize_schema",
    "storage_type",
    "storage_schema",
    "read_type",
    "read_schema",
    "merge_schemas",
    "check_partition_type",
    "check_dataset_schema",
    "duplicate_names",
    "encode_partition_value",
    "decode_partition_value",
    "coerce_literal",
    "pandas_metadata",
    "with_pandas_metadata",
    "describe",
    "decoded_schema",
]


#: User-metadata key in which kstore.spark records the Spark schema of a dataset Spark wrote.
SPARK_SCHEMA_KEY = "spark_schema"
#: User-metadata keys in which an engine records column types narrower than the dataset
#: schema (Spark's ``int`` / ``float`` where the dataset holds int64 / float64). Only that
#: engine keeps them true; another writer's values may not fit them.
TYPE_HINT_KEYS = (SPARK_SCHEMA_KEY,)


def drop_stale_type_hints(base: Mapping[str, Any], metadata: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The user metadata of a write into a dataset with user metadata ``base``: type hints
    the write does not refresh itself are cleared (set to None), since its values may not
    fit them (a pandas ``2**40`` appended to a Spark ``int`` column).

    >>> drop_stale_type_hints({"spark_schema": "{...}", "owner": "me"}, {"x": 1})
    {'x': 1, 'spark_schema': None}
    >>> drop_stale_type_hints({"owner": "me"}, None) is None
    True
    """
    stale = [k for k in TYPE_HINT_KEYS if base.get(k) is not None and k not in (metadata or {})]
    if not stale:
        return metadata
    return {**(metadata or {}), **dict.fromkeys(stale)}


def describe(t: pa.DataType) -> str:
    """A short, user-facing name of an Arrow type (``int64``, ``timestamp[us, tz=UTC]``)."""
    return str(t)


def _unsupported(t: pa.DataType, column: str | None) -> UnsupportedTypeError:
    where = f"column {column!r}" if column else "a column"
    return UnsupportedTypeError(
        f"{where} has type {t}, which kstore cannot store; supported: bool, ints, uints, "
        "floats, decimal, string, binary, date32, timestamp, list/struct of those, null"
    )


def storage_type(t: pa.DataType, column: str | None = None) -> pa.DataType:
    """The physical type written to data files: large/view types become their plain forms,
    timestamps microseconds (zone kept).

    kartothek 5.3 runs on pyarrow 6 and cannot read ``large_string``, ``string_view``,
    ``large_binary`` or ``large_list`` (FORMAT.md A). Dictionaries stay dictionaries.

    >>> storage_type(pa.timestamp("ns", "Europe/Berlin"))
    TimestampType(timestamp[us, tz=Europe/Berlin])
    """
    if pat.is_timestamp(t):
        return t if t.unit == "us" else pa.timestamp("us", t.tz)
    if pat.is_large_string(t) or pat.is_string_view(t):
        return pa.string()
    if pat.is_large_binary(t) or pat.is_binary_view(t):
        return pa.binary()
    if pat.is_fixed_size_binary(t):
        return pa.binary()
    if pat.is_list(t) or pat.is_large_list(t) or pat.is_list_view(t) or pat.is_large_list_view(t):
        return pa.list_(pa.field("item", storage_type(t.value_type, column)))
    if pat.is_fixed_size_list(t):
        return pa.list_(pa.field("item", storage_type(t.value_type, column)))
    if pat.is_dictionary(t):
        return pa.dictionary(t.index_type, storage_type(t.value_type, column), t.ordered)
    if pat.is_struct(t):
        return pa.struct(
            [pa.field(f.name, storage_type(f.type, column), f.nullable) for f in t]
        )
    if pat.is_date64(t):
        return pa.date32()
    if pat.is_time(t) or pat.is_duration(t) or pat.is_interval(t) or pat.is_map(t) or pat.is_union(t):
        raise _unsupported(t, column)
    if pat.is_float16(t):
        return pa.float32()
    return t


def normalize_type(t: pa.DataType, column: str | None = None) -> pa.DataType:
    """The normalized type stored in ``_common_metadata`` (see module docstring)."""
    t = storage_type(t, column)
    if pat.is_dictionary(t):
        return normalize_type(t.value_type, column)
    if pat.is_signed_integer(t):
        return pa.int64()
    if pat.is_unsigned_integer(t):
        return pa.uint64()
    if pat.is_floating(t):
        return pa.float64()
    if pat.is_timestamp(t):
        return pa.timestamp("us", t.tz)
    if pat.is_list(t):
        return pa.list_(pa.field("item", normalize_type(t.value_type, column)))
    if pat.is_struct(t):
        return pa.struct([pa.field(f.name, normalize_type(f.type, column)) for f in t])
    if (
        pat.is_boolean(t)
        or pat.is_string(t)
        or pat.is_binary(t)
        or pat.is_date32(t)
        or pat.is_null(t)
        or pat.is_decimal(t)
    ):
        return t
    raise _unsupported(t, column)


def normalize_schema(schema: pa.Schema) -> pa.Schema:
    """Normalize every field (metadata dropped)."""
    return pa.schema(
        [pa.field(f.name, normalize_type(f.type, f.name)) for f in schema]
    )


def storage_schema(schema: pa.Schema) -> pa.Schema:
    return pa.schema(
        [pa.field(f.name, storage_type(f.type, f.name), f.nullable) for f in schema],
        metadata=schema.metadata,
    )


def read_type(t: pa.DataType) -> pa.DataType:
    """The type a reader returns for a normalized type: the normalized type itself
    (timestamps in microseconds, so 0001-01-01 .. 9999-12-31 read exactly)."""
    return t


def read_schema(schema: pa.Schema) -> pa.Schema:
    return pa.schema([pa.field(f.name, read_type(f.type)) for f in schema])


def _types_match(a: pa.DataType, b: pa.DataType) -> bool:
    if pat.is_null(a) or pat.is_null(b):
        return True
    if pat.is_list(a) and pat.is_list(b):
        return _types_match(a.value_type, b.value_type)
    return bool(a.equals(b))


def _fill_nulls(a: pa.DataType, b: pa.DataType) -> pa.DataType:
    """The more specific of two matching types (null loses)."""
    if pat.is_null(a):
        return b
    if pat.is_list(a) and pat.is_list(b):
        return pa.list_(pa.field("item", _fill_nulls(a.value_type, b.value_type)))
    return a


def merge_schemas(
    existing: pa.Schema | None,
    new: pa.Schema,
    *,
    dataset: str,
    allow_new_columns: bool = False,
) -> pa.Schema:
    """Check that ``new`` (normalized) fits ``existing`` and return the merged schema.

    Raises :class:`SchemaMismatchError` naming the dataset, the column and both types.
    Column order of ``existing`` wins; with ``allow_new_columns`` new columns are appended.

    >>> import pyarrow as pa
    >>> merge_schemas(pa.schema([("a", pa.int64())]), pa.schema([("a", pa.string())]),
    ...               dataset="d")
    Traceback (most recent call last):
    ...
    kstore.errors.SchemaMismatchError: dataset 'd': column 'a' is int64 in the dataset but string in the new data
    """
    if existing is None:
        return new
    old_names, new_names = existing.names, new.names
    missing = [n for n in old_names if n not in new_names]
    added = [n for n in new_names if n not in old_names]
    if missing and not allow_new_columns:
        raise SchemaMismatchError(
            f"dataset {dataset!r}: the new data lacks column(s) {missing} of the dataset"
        )
    if added and not allow_new_columns:
        raise SchemaMismatchError(
            f"dataset {dataset!r}: the new data has column(s) {added} the dataset does not have "
            "(pass schema_mode='merge' to add columns)"
        )
    fields = []
    for f in existing:
        if f.name not in new_names:
            fields.append(f)
            continue
        nt = new.field(f.name).type
        if not _types_match(f.type, nt):
            raise SchemaMismatchError(
                f"dataset {dataset!r}: column {f.name!r} is {describe(f.type)} in the dataset "
                f"but {describe(nt)} in the new data"
            )
        fields.append(pa.field(f.name, _fill_nulls(f.type, nt)))
    fields.extend(new.field(n) for n in added)
    return pa.schema(fields, metadata=existing.metadata)


_PARTITION_OK = (
    pat.is_boolean,
    pat.is_integer,
    pat.is_floating,
    pat.is_string,
    pat.is_binary,
    pat.is_date32,
    pat.is_timestamp,
)


def decoded_schema(schema: pa.Schema) -> pa.Schema:
    """``schema``, after reading every field name and time zone it holds (nested ones too).

    A schema decoded from damaged bytes can carry a name or zone that is not UTF-8; pyarrow
    raises ``UnicodeDecodeError`` (a ``ValueError``) only when that text is first read,
    which may be far from the file. Readers of stored bytes call this where they turn
    decoding errors into :class:`~kstore.errors.CorruptMetadataError`.

    >>> decoded_schema(pa.schema([("t", pa.list_(pa.timestamp("us", "UTC")))])).names
    ['t']
    """
    def types(t: pa.DataType) -> None:
        if pat.is_timestamp(t):
            _ = t.tz
        elif pat.is_dictionary(t):
            types(t.value_type)
        for i in range(t.num_fields):
            child = t.field(i)
            _ = child.name
            types(child.type)

    for field in schema:
        _ = field.name
        types(field.type)
    return schema


def check_partition_type(column: str, t: pa.DataType) -> None:
    """Raise unless ``t`` (normalized) can be a partition column's type."""
    if not any(pred(t) for pred in _PARTITION_OK):
        raise UnsupportedTypeError(
            f"column {column!r} has type {t}; partition_on accepts bool, int, uint, float, "
            "string, binary, date and timestamp columns"
        )


def duplicate_names(names: Sequence[str]) -> list[str]:
    """Names that occur more than once (sorted)."""
    counts = Counter(names)
    return sorted(n for n, k in counts.items() if k > 1)


def check_dataset_schema(schema: pa.Schema, partition_keys: Sequence[str], dataset: str) -> pa.Schema:
    """Raise :class:`CorruptMetadataError` unless ``schema`` can be a dataset's schema: unique
    column names, every partition column present with a type partition values can have."""
    dupes = duplicate_names(schema.names)
    if dupes:
        raise CorruptMetadataError(f"dataset {dataset!r}: the schema has duplicate columns {dupes}")
    missing = [c for c in partition_keys if schema.get_field_index(c) < 0]
    if missing:
        raise CorruptMetadataError(f"dataset {dataset!r}: partition column(s) {missing} are missing from the schema")
    for c in partition_keys:
        try:
            check_partition_type(c, normalize_type(schema.field(c).type, c))
        except UnsupportedTypeError as exc:
            raise CorruptMetadataError(f"dataset {dataset!r}: the schema is damaged: {exc}") from exc
    return schema


def encode_partition_value(value: Any) -> str:
    """``str(value)`` the way kartothek writes it into a key (before quoting).

    >>> import datetime
    >>> encode_partition_value(datetime.date(2024, 1, 2)), encode_partition_value(True)
    ('2024-01-02', 'True')
    """
    import pandas as pd

    if isinstance(value, (bool, np.bool_)):
        return "True" if value else "False"
    if isinstance(value, (dt.datetime, pd.Timestamp, np.datetime64)):
        return str(pd.Timestamp(value))
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, (float, np.floating)):
        return repr(float(value))
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (bytes, str)):
        return str(value)
    raise UnsupportedTypeError(f"cannot encode partition value {short_repr(value)} ({type(value).__name__})")


_TRUE = {"True": True, "true": True, "1": True, "False": False, "false": False, "0": False}


def decode_partition_value(text: str, t: pa.DataType, column: str = "?") -> Any:
    """Parse a decoded key string back into a Python value of the normalized type ``t``.

    Exact for every supported type; ``'False'`` is ``False`` (kartothek reads it as True).
    """
    import pandas as pd

    try:
        if pat.is_boolean(t):
            return _TRUE[text]
        if pat.is_integer(t):
            return int(text)
        if pat.is_floating(t):
            return float(text)
        if pat.is_string(t) or pat.is_null(t):
            return text
        if pat.is_binary(t):
            if text[:2] in ("b'", 'b"'):
                return ast.literal_eval(text)
            return text.encode("utf-8")
        if pat.is_date32(t):
            try:
                return dt.date.fromisoformat(text)
            except ValueError:
                return pd.Timestamp(text).date()
        if pat.is_timestamp(t):
            ts = _parse_timestamp(text)
            if t.tz is not None:
                ts = ts.tz_localize(t.tz) if ts.tzinfo is None else ts.tz_convert(t.tz)
            elif ts.tzinfo is not None:
                ts = ts.tz_convert("UTC").tz_localize(None)
            return ts
    except (KeyError, ValueError, SyntaxError, TypeError) as exc:
        raise CorruptMetadataError(
            f"partition column {column!r}: cannot read value {short_repr(text)} as {t}"
        ) from exc
    raise UnsupportedTypeError(f"partition column {column!r} has unsupported type {t}")


_OFFSET_RE = __import__("re").compile(r"^(.*?)([+-])(\d\d):(\d\d):(\d\d(?:\.\d+)?)$")


def _parse_timestamp(text: str) -> Any:
    """``pd.Timestamp(text)``, plus UTC offsets with seconds (``+00:53:28``, historic zones)
    that ``str(Timestamp)`` writes but pandas cannot parse back."""
    import pandas as pd

    try:
        return pd.Timestamp(text)
    except ValueError:
        m = _OFFSET_RE.match(text)
        if not m:
            raise
        naive = pd.Timestamp(m.group(1))
        sign = 1 if m.group(2) == "+" else -1
        offset = pd.Timedelta(hours=int(m.group(3)), minutes=int(m.group(4)), seconds=float(m.group(5)))
        return (naive - sign * offset).tz_localize("UTC")


# -- predicate literals -------------------------------------------------------------------


def _bad_literal(column: str, t: pa.DataType, value: Any, dataset: str | None) -> InvalidPredicateError:
    prefix = f"dataset {dataset!r}: " if dataset else ""
    return InvalidPredicateError(
        f"{prefix}column {column!r} is {describe(t)}; cannot compare with {short_repr(value)} "
        f"({type(value).__name__})"
    )


def coerce_literal(value: Any, t: pa.DataType, column: str, dataset: str | None = None) -> Any:
    """Normalize one predicate literal to a Python value comparable with column type ``t``.

    ``datetime.date`` or ISO strings against date columns, ints against uint64, ``Decimal``
    against any numeric column, naive datetimes against tz-aware timestamps (read as wall
    time in the column's zone) are
    accepted; what cannot be compared (a string against an int column) raises
    :class:`~kstore.errors.InvalidPredicateError` naming the column and the value.

    >>> import pyarrow as pa
    >>> coerce_literal("2024-01-02", pa.date32(), "day")
    datetime.date(2024, 1, 2)
    >>> coerce_literal(3.0, pa.int64(), "n")
    3
    """
    import pandas as pd

    if value is None or (isinstance(value, float) and math.isnan(value) and not pat.is_floating(t)):
        raise _bad_literal(column, t, value, dataset)
    if pat.is_dictionary(t):
        t = t.value_type
    if pat.is_boolean(t):
        if isinstance(value, (bool, np.bool_)):
            return bool(value)
        raise _bad_literal(column, t, value, dataset)
    if pat.is_integer(t) or pat.is_floating(t) or pat.is_decimal(t):
        if isinstance(value, (bool, np.bool_)):
            raise _bad_literal(column, t, value, dataset)
        if isinstance(value, (int, np.integer)):
            return float(value) if pat.is_floating(t) else int(value)
        if isinstance(value, (float, np.floating)):
            if pat.is_integer(t) and float(value).is_integer():
                return int(value)
            return float(value)
        if isinstance(value, Decimal):  # e.g. JSON predicates parsed exactly
            if pat.is_decimal(t):
                return value
            if pat.is_integer(t) and value.is_finite() and value == value.to_integral_value():
                return int(value)
            return float(value)
        raise _bad_literal(column, t, value, dataset)
    if pat.is_string(t) or pat.is_large_string(t):
        if isinstance(value, str):
            return value
        raise _bad_literal(column, t, value, dataset)
    if pat.is_binary(t) or pat.is_large_binary(t):
        if isinstance(value, (bytes, bytearray, memoryview)):
            return bytes(value)
        raise _bad_literal(column, t, value, dataset)
    if pat.is_date(t):
        if isinstance(value, dt.datetime) or isinstance(value, (pd.Timestamp, np.datetime64, str)):
            try:
                ts = pd.Timestamp(value)
            except (ValueError, TypeError) as exc:
                raise _bad_literal(column, t, value, dataset) from exc
            if ts is pd.NaT or ts != ts.normalize():
                raise _bad_literal(column, t, value, dataset)
            return ts.date()
        if isinstance(value, dt.date):
            return value
        raise _bad_literal(column, t, value, dataset)
    if pat.is_timestamp(t):
        if isinstance(value, (dt.date, pd.Timestamp, np.datetime64, str)):
            try:
                ts = pd.Timestamp(value)
            except (ValueError, TypeError) as exc:
                raise _bad_literal(column, t, value, dataset) from exc
            if ts is pd.NaT:
                raise _bad_literal(column, t, value, dataset)
            if t.tz is not None:
                if ts.tzinfo is not None:
                    return ts.tz_convert(t.tz)
                try:
                    return ts.tz_localize(t.tz)
                except Exception as exc:  # nonexistent / ambiguous wall time in that zone
                    prefix = f"dataset {dataset!r}: " if dataset else ""
                    raise InvalidPredicateError(
                        f"{prefix}column {column!r} is {describe(t)}; the naive time {short_repr(value)} does not "
                        f"exist or is ambiguous in {t.tz}; pass a tz-aware timestamp"
                    ) from exc
            if ts.tzinfo is not None:
                return ts.tz_convert("UTC").tz_localize(None)
            return ts
        raise _bad_literal(column, t, value, dataset)
    raise InvalidPredicateError(
        f"{'dataset ' + repr(dataset) + ': ' if dataset else ''}column {column!r} has type "
        f"{describe(t)}, which predicates cannot compare (only 'is null' / 'is not null')"
    )


# -- pandas metadata ----------------------------------------------------------------------


def _pandas_type(t: pa.DataType) -> tuple[str, str, dict[str, Any] | None]:
    if pat.is_boolean(t):
        return "bool", "bool", None
    if pat.is_signed_integer(t) or pat.is_unsigned_integer(t) or pat.is_floating(t):
        name = f"float{t.bit_width}" if pat.is_floating(t) else str(t)
        return name, name, None
    if pat.is_string(t) or pat.is_large_string(t):
        return "unicode", "object", None
    if pat.is_binary(t) or pat.is_large_binary(t):
        return "bytes", "object", None
    if pat.is_date(t):
        return "date", "object", None
    if pat.is_timestamp(t):
        if t.tz is not None:
            return "datetimetz", f"datetime64[{t.unit}]", {"timezone": t.tz}
        return "datetime", f"datetime64[{t.unit}]", None
    if pat.is_list(t):
        inner, _, _ = _pandas_type(t.value_type)
        return f"list[{inner}]", "object", None
    if pat.is_decimal(t):
        return "decimal", "object", {"precision": t.precision, "scale": t.scale}
    if pat.is_null(t):
        return "empty", "object", None
    return "object", "object", None


def pandas_metadata(schema: pa.Schema, source: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ``pandas`` schema metadata kartothek expects, built for ``schema``.

    Column entries of ``source`` (the pandas metadata of the input, if any) are kept where
    the field still exists, so nullable dtypes such as ``Int64`` survive a round trip.
    The index is never stored (``index_columns`` is empty).
    """
    import pandas as pd

    known: dict[str, dict[str, Any]] = {}
    if source:
        for col in source.get("columns", []):
            if col.get("field_name") is not None:
                known[col["field_name"]] = col
    columns = []
    for f in schema:
        prev = known.get(f.name)
        ptype, ntype, meta = _pandas_type(f.type)
        if prev is not None and prev.get("numpy_type") in ("Int8", "Int16", "Int32", "Int64",
                                                           "UInt8", "UInt16", "UInt32", "UInt64",
                                                           "boolean", "Float32", "Float64"):
            ntype = prev["numpy_type"]
            if ntype in ("Int8", "Int16", "Int32"):
                ntype = "Int64"
            elif ntype in ("UInt8", "UInt16", "UInt32"):
                ntype = "UInt64"
            elif ntype == "Float32":
                ntype = "Float64"
        columns.append(
            {"name": f.name, "field_name": f.name, "pandas_type": ptype, "numpy_type": ntype,
             "metadata": meta}
        )
    return {
        "index_columns": [],
        "column_indexes": [],
        "columns": columns,
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": pd.__version__,
    }


def with_pandas_metadata(schema: pa.Schema, source: Mapping[str, Any] | None = None) -> pa.Schema:
    """``schema`` carrying fresh pandas metadata (see :func:`pandas_metadata`)."""
    meta = dict(schema.metadata or {})
    meta[b"pandas"] = json.dumps(pandas_metadata(schema, source)).encode()
    return schema.with_metadata(meta)


def schema_pandas_metadata(schema: pa.Schema) -> dict[str, Any] | None:
    """The pandas metadata of ``schema`` (a dtype hint only): None when it is missing or not
    the shape pyarrow writes; column entries that are not ``{"field_name": str, ...}`` are dropped."""
    raw = (schema.metadata or {}).get(b"pandas")
    if not raw:
        return None
    try:
        meta = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(meta, dict) or not isinstance(meta.get("columns", []), list):
        return None
    columns = [c for c in meta.get("columns", []) if isinstance(c, dict) and isinstance(c.get("field_name"), str)]
    return {"columns": columns}

