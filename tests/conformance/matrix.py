"""The cases of the conformance suite: the source data (the oracle), layouts, predicates,
projections and the size switch (``KSTORE_CONFORMANCE_FULL=1``)."""

from __future__ import annotations

import datetime as dt
import os
from decimal import Decimal as D

import pyarrow as pa

#: The full matrix (every reader on every layout, every writer x every reader, more
#: random predicates); the default keeps the suite's CI cost to a few minutes.
FULL = os.environ.get("KSTORE_CONFORMANCE_FULL", "") == "1"
#: the suite's Spark session carries kstore's JVM source (kstore.spark.configure), which adds
#: the ``spark_jvm`` reader and writer (tests/conformance/test_jvm_source.py runs them)
JVM = os.environ.get("KSTORE_SPARK_JVM", "") == "1"

UTC = dt.timezone.utc
TS_MIN = dt.datetime(1, 1, 1, tzinfo=UTC)
TS_MAX = dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
DEC_MAX = D("123456789012345678901234567.0123456789")  # 37 digits: PySpark's 28-digit context rounds it

N_ROWS = 30

#: column -> (Arrow type, values cycled over the rows). The moduli differ so that values
#: combine (and partitions hold mixed values); None is a null.
COLUMNS: dict[str, tuple[pa.DataType, list]] = {
    "p_str": (pa.string(), ["a", "b/c", "ü %", " lead", "x=y"]),
    "p_int": (pa.int64(), [-1, 0, 7]),
    "b8": (pa.int8(), [None, -128, 127, 0, 5, -5]),
    "s16": (pa.int16(), [-32768, 32767, None, 1]),
    "i32": (pa.int32(), [2**31 - 1, -(2**31), None, 3, 4, 0, 9]),
    "i64": (pa.int64(), [2**62, -(2**63), None, 5, 0, 5, 17, 2**63 - 1]),
    "u64": (pa.uint64(), [0, 2**64 - 1, 2**63, None, 1]),
    "f32": (pa.float32(), [1.5, -0.0, float("nan"), float("inf"), float("-inf"), None, 0.25]),
    "f64": (pa.float64(), [0.1, -0.0, 0.0, float("nan"), float("inf"), None, 1e300, -2.5, float("-inf")]),
    "dec": (pa.decimal128(38, 10), [DEC_MAX, -DEC_MAX, D("1.5"), None, D("0"), DEC_MAX - D("1e-10")]),
    "dec2": (pa.decimal128(10, 2), [D("1.50"), D("-0.01"), None, D("99999999.99")]),
    "bo": (pa.bool_(), [True, False, None, False, True]),
    "s": (pa.string(), ["a/b", "ü", "", None, "日本 ☃", "b", "a/b", "%2F"]),
    "bin": (pa.binary(), [b"\xff\x00", b"", None, b"ok", b"\x80abc", b"\x00", b"/"]),
    "d": (pa.date32(), [dt.date(1, 1, 1), dt.date(9999, 12, 31), dt.date(1970, 1, 1), None, dt.date(2262, 4, 12),
                        dt.date(1677, 9, 20), dt.date(2024, 2, 29)]),
    "ts": (pa.timestamp("us", "UTC"), [TS_MIN, TS_MAX, dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), None,
                                       dt.datetime(2024, 2, 29, 12, tzinfo=UTC)]),
    "ntz": (pa.timestamp("us"), [TS_MAX.replace(tzinfo=None), TS_MIN.replace(tzinfo=None), None,
                                 dt.datetime(2262, 4, 12), dt.datetime(1970, 1, 1), dt.datetime(1677, 9, 20, 23)]),
    "lst": (pa.list_(pa.int64()), [[1, None, 3], [], None, [2**62], [-1]]),
    "st": (pa.struct([("x", pa.int64()), ("y", pa.string())]),
           [{"x": 1, "y": "a"}, None, {"x": None, "y": "ü/"}, {"x": -5, "y": None}]),
    "cat": (pa.dictionary(pa.int32(), pa.string()), ["x", "y", None, "x/z"]),
}

#: Columns Spark cannot write as such: no unsigned type (Spark reads uint64 as decimal(20,0)).
NOT_SPARK_WRITABLE = ("u64",)
#: Secondary indices of every dataset (partition columns have their implicit index).
INDICES = ("i64", "s", "ts")


def source_table(n: int = N_ROWS) -> pa.Table:
    """The source rows (``id`` 0..n-1): what every write gets and every read must return."""
    arrays = {"id": pa.array(range(n), pa.int64())}
    for name, (t, values) in COLUMNS.items():
        rows = [values[k % len(values)] for k in range(n)]
        if pa.types.is_dictionary(t):
            arrays[name] = pa.array(rows, pa.string()).dictionary_encode()
        else:
            arrays[name] = pa.array(rows, t)
    return pa.table(arrays)


#: name -> partition columns
LAYOUTS = {"0cols": (), "1col": ("p_str",), "2cols": ("p_str", "p_int")}

#: name -> DNF predicate (every operator; nulls; DNF; partition, indexed and plain columns)
PREDICATES: dict[str, list] = {
    "eq-int-indexed": [[("i64", "==", 5)]],
    "ne-int-indexed": [[("i64", "!=", 5)]],
    "lt-float": [[("f64", "<", 1.0)]],
    "le-float32-signed-zero": [[("f32", "<=", 0.0)]],
    "gt-float-nan": [[("f64", ">", 0.05)]],
    "ne-float-nan": [[("f32", "!=", 1.5)]],
    "gt-date": [[("d", ">", dt.date(2262, 4, 11))]],
    "le-date-min": [[("d", "<=", dt.date(1, 1, 1))]],
    "ge-ts-max-indexed": [[("ts", ">=", dt.datetime(9999, 12, 31, tzinfo=UTC))]],
    "ne-ts-indexed": [[("ts", "!=", dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC))]],
    "lt-ntz": [[("ntz", "<", dt.datetime(1677, 9, 21))]],
    "in-str-indexed": [[("s", "in", ["a/b", "ü", ""])]],
    "lt-str-unicode": [[("s", "<", "b")]],
    "notin-partition-str": [[("p_str", "not in", ["a", "b/c"])]],
    "eq-partition-int": [[("p_int", "==", 7)]],
    "gt-partition-str": [[("p_str", ">", "b/c")]],
    "isnull-bool": [[("bo", "is null")]],
    "eq-bool-false": [[("bo", "==", False)]],
    "eq-dec38": [[("dec", "==", DEC_MAX)]],
    "lt-dec38-notnull": [[("dec", "is not null"), ("dec", "<", DEC_MAX)]],
    "ge-dec2": [[("dec2", ">=", D("1.50"))]],
    "dnf-partition-binary": [[("p_int", "==", 7), ("b8", ">", 0)], [("bin", "==", b"\xff\x00")]],
    "lt-binary": [[("bin", "<", b"\x80")]],
    "null-list-or-struct": [[("lst", "is null")], [("st", "is not null"), ("i32", ">", 0)]],
    "eq-categorical": [[("cat", "==", "x/z")]],
    "in-empty": [[("i32", "in", [])]],
    "notin-int8-or-null": [[("b8", "not in", [-128, 127])], [("s16", "is null")]],
    "gt-uint64": [[("u64", ">", 2**63)]],
}
#: the predicates of the default run (all of them with KSTORE_CONFORMANCE_FULL=1)
DEFAULT_PREDICATES = tuple(PREDICATES) if FULL else (
    "eq-int-indexed", "ne-int-indexed", "lt-float", "le-float32-signed-zero", "gt-float-nan", "gt-date",
    "ge-ts-max-indexed", "lt-ntz", "in-str-indexed", "notin-partition-str", "eq-partition-int", "isnull-bool",
    "eq-bool-false", "eq-dec38", "lt-dec38-notnull", "dnf-partition-binary", "lt-binary", "null-list-or-struct",
    "eq-categorical", "in-empty", "notin-int8-or-null", "gt-uint64",
)

#: ``spark.read.format("kstore")`` is what ``ks.read_dataset`` calls; by default it gets
#: these predicates pushed (as JSON text, the user's form), the rest with FULL=1.
FORMAT_PUSHED_PREDICATES = tuple(DEFAULT_PREDICATES) if FULL else (
    "eq-int-indexed", "in-str-indexed", "notin-partition-str", "eq-dec38", "lt-dec38-notnull", "ge-ts-max-indexed",
    "lt-ntz", "gt-date", "isnull-bool", "le-float32-signed-zero", "dnf-partition-binary", "in-empty",
)

#: name -> columns (None: all; [] counts rows)
PROJECTIONS: dict[str, list | None] = {
    "none": [],
    "id": ["id"],
    "partition-and-data": ["p_int", "id", "d"],
    "nested-and-partition": ["st", "lst", "id", "p_str"],
    "reversed": None,  # filled by reversed_columns()
}


def reversed_columns(table: pa.Table) -> list[str]:
    return list(reversed(table.column_names))
