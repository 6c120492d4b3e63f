"""Type normalization, schema compatibility, partition value (de)coding, literal coercion.

Pure functions over pyarrow types; no I/O.

The normalized ("common") type of a column is what ``_common_metadata`` stores
(FORMAT.md A): int8..64 -> int64, uint8..64 -> uint64, float16..64 -> float64,
dictionary<T> -> norm(T), list<T> -> list<norm(T)>, large/view string and binary ->
string/binary, timestamps -> timestamp[us, tz]. Two schemas are compatible when their
normalized types match per column; ``null`` (all values missing) matches anything.

The dataset schema kstore keeps with each version (FORMAT.md B, ``schema``) holds the
*written* types instead (:func:`written_type`): an ``int32`` column stays ``int32``, a
``float32`` column ``float32``, and every kstore reader returns them. Only the forms Parquet
and kartothek cannot hold change (large/view types, ``float16``, timestamp units; a
dictionary is stored as its values). An append whose type is wider than the dataset's but
normalizes to the same type (``int64`` data into an ``int32`` column) widens the column
(:func:`merge_schemas`); kartothek sees the normalized schema in ``_common_metadata``.
Datasets written before (kartothek's, older kstore's) keep their normalized schema.

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
from collections.abc import Collection, Mapping, Sequence
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
    "written_type",
    "written_schema",
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
    "nullable_dtype",
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


def written_type(t: pa.DataType, column: str | None = None) -> pa.DataType:
    """The type a dataset records for a column written as ``t``: its storage type
    (:func:`storage_type`) with a dictionary as its values, items and fields alike; widths
    stay as written (``int8`` stays ``int8``, ``float32`` stays ``float32``).

    >>> written_type(pa.dictionary(pa.int8(), pa.large_string())), written_type(pa.int16())
    (DataType(string), DataType(int16))
    >>> written_type(pa.list_(pa.float16()))
    ListType(list<item: float>)
    """
    t = storage_type(t, column)
    if pat.is_dictionary(t):
        return written_type(t.value_type, column)
    if pat.is_list(t):
        return pa.list_(pa.field("item", written_type(t.value_type, column)))
    if pat.is_struct(t):
        return pa.struct([pa.field(f.name, written_type(f.type, column)) for f in t])
    normalize_type(t, column)  # raises for what kstore cannot store
    return t


def written_schema(schema: pa.Schema) -> pa.Schema:
    """:func:`written_type` of every field (metadata dropped, every field nullable).

    >>> written_schema(pa.schema([pa.field("n", pa.int32(), nullable=False)]))
    n: int32
    """
    return pa.schema([pa.field(f.name, written_type(f.type, f.name)) for f in schema])


def storage_schema(schema: pa.Schema) -> pa.Schema:
    return pa.schema(
        [pa.field(f.name, storage_type(f.type, f.name), f.nullable) for f in schema],
        metadata=schema.metadata,
    )


def read_type(t: pa.DataType) -> pa.DataType:
    """The type a reader returns for a column of the dataset schema: that type itself, the
    written type (:func:`written_type`) for datasets that record it, the normalized type for
    older ones (timestamps in microseconds, so 0001-01-01 .. 9999-12-31 read exactly)."""
    return t


def read_schema(schema: pa.Schema) -> pa.Schema:
    return pa.schema([pa.field(f.name, read_type(f.type)) for f in schema])


def _types_match(a: pa.DataType, b: pa.DataType) -> bool:
    """Whether two types normalize to the same type (``null`` matching anything)."""
    if pat.is_null(a) or pat.is_null(b):
        return True
    if pat.is_list(a) and pat.is_list(b):
        return _types_match(a.value_type, b.value_type)
    try:
        return bool(normalize_type(a).equals(normalize_type(b)))
    except UnsupportedTypeError:
        return bool(a.equals(b))


def _merged_type(a: pa.DataType, b: pa.DataType) -> pa.DataType:
    """The type of a column that holds values of two matching types: the more specific
    (null loses), the wider of two widths (``int32`` and ``int64`` -> ``int64``).

    >>> _merged_type(pa.int32(), pa.int16()), _merged_type(pa.float32(), pa.float64())
    (DataType(int32), DataType(double))
    """
    if pat.is_null(a):
        return b
    if pat.is_null(b) or a.equals(b):
        return a
    if pat.is_list(a) and pat.is_list(b):
        return pa.list_(pa.field("item", _merged_type(a.value_type, b.value_type)))
    if pat.is_struct(a) and pat.is_struct(b) and a.num_fields == b.num_fields:
        return pa.struct([pa.field(fa.name, _merged_type(fa.type, fb.type)) for fa, fb in zip(a, b)])
    if (pat.is_integer(a) and pat.is_integer(b)) or (pat.is_floating(a) and pat.is_floating(b)):
        return b if b.bit_width > a.bit_width else a
    return a


#: the largest integer magnitude a float64 holds exactly (2**53): an ``int64`` column widens
#: to ``double`` only when every value it holds is within it
EXACT_IN_DOUBLE = 2**53


def widened_type(a: pa.DataType, b: pa.DataType, *, exact_int64: bool = False) -> pa.DataType | None:
    """The type a column of type ``a`` becomes to hold values of type ``b`` as well, when
    one widens to the other without changing a value (Delta's type widening, what
    ``schema_mode="merge"`` allows beyond :func:`merge_schemas`' matching types); None when
    neither does.

    * an integer of at most 32 bits and a float -> ``double`` (every such value is exact);
      ``int64`` too when ``exact_int64`` (the caller has shown every ``int64`` value of the
      column to be within +-2**53; beyond it a ``double`` rounds, and Delta and Iceberg
      refuse this change for that reason);
    * ``date32`` and a time-zone-naive timestamp -> ``timestamp[us]`` (midnight);
    * two decimals -> the decimal that holds the integer digits and the scale of both
      (at most 38 digits).

    >>> widened_type(pa.int32(), pa.float64()), widened_type(pa.date32(), pa.timestamp("ns"))
    (DataType(double), TimestampType(timestamp[us]))
    >>> widened_type(pa.decimal128(10, 2), pa.decimal128(8, 4))
    Decimal128Type(decimal128(12, 4))
    >>> widened_type(pa.int64(), pa.float64()) is None, widened_type(pa.int64(), pa.float64(), exact_int64=True)
    (True, DataType(double))
    >>> widened_type(pa.string(), pa.int64()) is None
    True
    """
    for x, y in ((a, b), (b, a)):
        if pat.is_integer(x) and pat.is_floating(y):
            if x.bit_width <= 32 or exact_int64:
                return pa.float64()
            return None
        if pat.is_date32(x) and pat.is_timestamp(y) and y.tz is None:
            return pa.timestamp("us")
    if pat.is_decimal(a) and pat.is_decimal(b):
        scale = max(a.scale, b.scale)
        digits = max(a.precision - a.scale, b.precision - b.scale) + scale
        if digits > 38 or scale < 0:
            return None
        return pa.decimal128(digits, scale)
    return None


def _widening_refusal(name: str, old: pa.DataType, new: pa.DataType, *, dataset: str, fixed: bool,
                      exact_int64: bool) -> str:
    """Why ``schema_mode="merge"`` does not widen column ``name`` (empty: it does)."""
    if widened_type(old, new, exact_int64=exact_int64) is not None:
        if fixed:
            return (f"dataset {dataset!r}: column {name!r} is {describe(old)} in the dataset but {describe(new)} "
                    "in the new data, and it is a partition or indexed column, whose type does not change "
                    "(its partition paths or index values are typed); cast the new data to "
                    f"{describe(old)}")
        return ""
    if widened_type(old, new, exact_int64=True) is not None:  # int64 <-> double, not shown exact
        return (f"dataset {dataset!r}: column {name!r} is {describe(old)} in the dataset but {describe(new)} "
                "in the new data; an int64 column becomes double only when every value it holds is "
                f"within +-2**53 (a double rounds larger ones), which the statistics of the dataset's "
                "files and the new data do not show; cast the new data to the dataset's type")
    return (f"dataset {dataset!r}: column {name!r} is {describe(old)} in the dataset "
            f"but {describe(new)} in the new data")


def merge_schemas(
    existing: pa.Schema | None,
    new: pa.Schema,
    *,
    dataset: str,
    mode: str = "strict",
    fixed: Collection[str] = (),
    exact_int64: Collection[str] = (),
) -> pa.Schema:
    """Check that ``new`` fits ``existing`` and return the merged schema.

    Types fit when they normalize to the same type (:func:`normalize_type`); the merged
    column has the wider of the two (an ``int32`` column that takes ``int64`` values
    becomes ``int64``; ``int16`` values leave it ``int32``). Raises
    :class:`SchemaMismatchError` naming the dataset, the column and both types.
    Values of a narrower kind that the column holds exactly fit in every mode (``int32``
    values into a ``double`` column, ``date`` values into a ``timestamp`` one: the column
    keeps its type). Column order of ``existing`` wins. With ``mode="merge"`` (``schema_mode="merge"``)
    new columns are appended, missing ones kept, and a column widens to a type of another
    kind where no value changes (:func:`widened_type`: ``int32`` -> ``double``,
    ``date`` -> ``timestamp``, decimals), except the ``fixed`` columns (partition and
    indexed columns); ``int64`` and ``double`` merge only for the ``exact_int64`` columns,
    whose ``int64`` values the caller has shown to be exact in a ``double``.

    >>> merge_schemas(pa.schema([("a", pa.int32())]), pa.schema([("a", pa.int64())]), dataset="d")
    a: int64

    >>> merge_schemas(pa.schema([("a", pa.int32())]), pa.schema([("a", pa.float64())]), dataset="d",
    ...               mode="merge").field("a")
    pyarrow.Field<a: double>

    >>> import pyarrow as pa
    >>> merge_schemas(pa.schema([("a", pa.int64())]), pa.schema([("a", pa.string())]),
    ...               dataset="d")
    Traceback (most recent call last):
    ...
    kstore.errors.SchemaMismatchError: dataset 'd': column 'a' is int64 in the dataset but string in the new data
    """
    if existing is None:
        return new
    evolve = mode == "merge"
    old_names, new_names = existing.names, new.names
    missing = [n for n in old_names if n not in new_names]
    added = [n for n in new_names if n not in old_names]
    if missing and not evolve:
        raise SchemaMismatchError(
            f"dataset {dataset!r}: the new data lacks column(s) {missing} of the dataset"
        )
    if added and not evolve:
        index = [n for n in (schema_pandas_metadata(new) or {}).get("index_columns", []) if n in added]
        hint = (f"; {index} is the data's named index, which kstore stores as a column: reset_index(drop=True) "
                "drops it" if index else "")
        raise SchemaMismatchError(
            f"dataset {dataset!r}: the new data has column(s) {added} the dataset does not have "
            f"(pass schema_mode='merge' to add columns){hint}"
        )
    fields = []
    for f in existing:
        if f.name not in new_names:
            fields.append(f)
            continue
        nt = new.field(f.name).type
        if _types_match(f.type, nt):
            fields.append(f.with_type(_merged_type(f.type, nt)))
            continue
        exact = f.name in exact_int64
        why = _widening_refusal(f.name, f.type, nt, dataset=dataset, fixed=f.name in fixed, exact_int64=exact)
        if why:
            raise SchemaMismatchError(why)
        widened = widened_type(f.type, nt, exact_int64=exact)
        assert widened is not None
        if not evolve and not widened.equals(f.type):
            raise SchemaMismatchError(f"dataset {dataset!r}: column {f.name!r} is {describe(f.type)} in the dataset "
                                      f"but {describe(nt)} in the new data (pass schema_mode='merge' to widen "
                                      "the column)")
        other = f.type if not widened.equals(f.type) else nt  # the kind its files may hold now
        fields.append(with_file_kinds(f.with_type(widened), [describe(other)]))
    fields.extend(new.field(n) for n in added)
    return pa.schema(fields, metadata=existing.metadata)


#: field metadata of a dataset schema: the types (``describe``), comma-separated, of another
#: kind than the field's own that files of the dataset may hold for it (after a widening);
#: readers that convert per file (kstore's) need nothing, Spark's Parquet scan reads such a
#: dataset through kstore's Python source
FILE_KINDS = b"kstore.file_kinds"


def file_kinds(f: pa.Field) -> list[str]:
    """The types of another kind that files may hold for field ``f`` (:data:`FILE_KINDS`).

    >>> f = with_file_kinds(pa.field("x", pa.float64()), ["int64"])
    >>> file_kinds(f), file_kinds(with_file_kinds(f, ["int32", "int64"]))
    (['int64'], ['int64', 'int32'])
    """
    raw = (f.metadata or {}).get(FILE_KINDS)
    return [k for k in raw.decode("utf-8", "replace").split(",") if k] if raw else []


def with_file_kinds(f: pa.Field, kinds: Sequence[str]) -> pa.Field:
    """``f`` with ``kinds`` added to its :data:`FILE_KINDS`."""
    merged = list(dict.fromkeys([*file_kinds(f), *kinds]))
    return f.with_metadata({**(f.metadata or {}), FILE_KINDS: ",".join(merged).encode()})


def without_file_kinds(schema: pa.Schema) -> pa.Schema:
    """``schema`` without :data:`FILE_KINDS` (a dataset whose every file was written with it)."""
    def plain(f: pa.Field) -> pa.Field:
        meta = {k: v for k, v in (f.metadata or {}).items() if k != FILE_KINDS}
        return f.with_metadata(meta) if meta else f.remove_metadata()
    if not any(FILE_KINDS in (f.metadata or {}) for f in schema):
        return schema
    return pa.schema([plain(f) for f in schema], metadata=schema.metadata)


def check_partitioning(dataset_uuid: str, existing: Sequence[str], new: Sequence[str]) -> None:
    """SchemaMismatchError when a full overwrite that keeps the schema (``schema_mode``
    ``"strict"`` or ``"merge"``) would change the partition columns.

    >>> check_partitioning("d", ["p"], ["p"])
    >>> check_partitioning("d", ["p"], [])
    Traceback (most recent call last):
    ...
    kstore.errors.SchemaMismatchError: dataset 'd' is partitioned on ['p']; an overwrite with partition_on=[] changes its partitioning: pass schema_mode='overwrite' to replace the schema and the partitioning
    """
    if tuple(existing) != tuple(new):
        raise SchemaMismatchError(
            f"dataset {dataset_uuid!r} is partitioned on {list(existing)}; an overwrite with partition_on="
            f"{list(new)} changes its partitioning: pass schema_mode='overwrite' to replace the schema and the "
            "partitioning"
        )


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


def _in_width(value: float, t: pa.DataType) -> float:
    """``value`` rounded to the precision of the floating-point type ``t`` (a ``float32``
    column compares with ``float32(value)``, as numpy, pandas and Arrow's ``is_in`` do), so
    that rows, statistics and index values (``float64``) all compare alike.

    >>> _in_width(0.1, pa.float32()), _in_width(0.1, pa.float64())
    (0.10000000149011612, 0.1)
    """
    if t.bit_width >= 64:
        return value
    with np.errstate(over="ignore"):
        return float(np.float32(value))


def coerce_literal(value: Any, t: pa.DataType, column: str, dataset: str | None = None) -> Any:
    """Normalize one predicate literal to a Python value comparable with column type ``t``.

    ``datetime.date`` or ISO strings against date columns, ints against uint64, ``Decimal``
    against any numeric column, naive datetimes against tz-aware timestamps (read as wall
    time in the column's zone) are
    accepted (a literal against a ``float32`` column is rounded to ``float32``); what cannot be compared (a string against an int column) raises
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
    if pat.is_floating(t):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer, float, np.floating, Decimal)):
            raise _bad_literal(column, t, value, dataset)
        return _in_width(float(value), t)
    if pat.is_integer(t) or pat.is_decimal(t):
        if isinstance(value, (bool, np.bool_)):
            raise _bad_literal(column, t, value, dataset)
        if isinstance(value, (int, np.integer)):
            return int(value)
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


#: pandas' nullable dtypes, by the kind of Arrow type they hold
_NULLABLE_KINDS = {"Int": pat.is_signed_integer, "UInt": pat.is_unsigned_integer, "Float": pat.is_floating}


def nullable_dtype(numpy_type: Any, t: pa.DataType) -> str | None:
    """The pandas nullable dtype of a column of type ``t`` whose pandas metadata says
    ``numpy_type``: the same kind in ``t``'s width (``Int32`` for an ``int64`` column is
    ``Int64``, kartothek's normalized view); None when ``numpy_type`` is not a nullable
    dtype of ``t``'s kind.

    >>> nullable_dtype("Int32", pa.int32()), nullable_dtype("Int32", pa.int64()), nullable_dtype("Int8", pa.string())
    ('Int32', 'Int64', None)
    """
    if not isinstance(numpy_type, str):
        return None
    if numpy_type == "boolean":
        return "boolean" if pat.is_boolean(t) else None
    for kind, fits in _NULLABLE_KINDS.items():
        if numpy_type.startswith(kind) and numpy_type[len(kind):] in ("8", "16", "32", "64"):
            if not fits(t) or (kind == "Float" and t.bit_width < 32):
                return None
            return f"{kind}{t.bit_width}"
    return None


def pandas_metadata(schema: pa.Schema, source: Mapping[str, Any] | None = None, *,
                    index: bool = True) -> dict[str, Any]:
    """The ``pandas`` schema metadata kartothek expects, built for ``schema``.

    Column entries of ``source`` (the pandas metadata of the input, if any) are kept where
    the field still exists, so nullable dtypes such as ``Int64`` survive a round trip (in
    the field's width: :func:`nullable_dtype`). With ``index``, the index columns of
    ``source`` that ``schema`` holds stay index columns (a named index kstore stores as
    a column and its readers restore); data files and ``_common_metadata`` have none
    (``index=False``): kartothek and plateau read those columns as columns.
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
        nullable = nullable_dtype(prev.get("numpy_type"), f.type) if prev is not None else None
        if nullable is not None:
            ntype = nullable
        columns.append(
            {"name": f.name, "field_name": f.name, "pandas_type": ptype, "numpy_type": ntype,
             "metadata": meta}
        )
    index_columns = [c for c in (source or {}).get("index_columns", []) if c in schema.names] if index else []
    return {
        "index_columns": index_columns,
        "column_indexes": [],
        "columns": columns,
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": pd.__version__,
    }


def with_pandas_metadata(schema: pa.Schema, source: Mapping[str, Any] | None = None, *,
                         index: bool = True) -> pa.Schema:
    """``schema`` carrying fresh pandas metadata (see :func:`pandas_metadata`)."""
    meta = dict(schema.metadata or {})
    meta[b"pandas"] = json.dumps(pandas_metadata(schema, source, index=index)).encode()
    return schema.with_metadata(meta)


def schema_pandas_metadata(schema: pa.Schema) -> dict[str, Any] | None:
    """The pandas metadata of ``schema`` (a dtype hint only): None when it is missing or not
    the shape pyarrow writes; column entries that are not ``{"field_name": str, ...}`` are
    dropped, and so are index columns that are not names of ``schema``'s fields.

    >>> import pandas as pd
    >>> t = pa.Table.from_pandas(pd.DataFrame({"x": [1]}, index=pd.Index(["a"], name="k")))
    >>> schema_pandas_metadata(t.schema)["index_columns"]
    ['k']
    """
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
    index = meta.get("index_columns", [])
    names = set(schema.names)
    index = [c for c in index if isinstance(c, str) and c in names] if isinstance(index, list) else []
    return {"columns": columns, "index_columns": list(dict.fromkeys(index))}
