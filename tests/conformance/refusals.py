"""Every documented refusal, in one place: what an engine (or kstore's format) cannot
represent is refused before anything is written, with a :class:`~kstore.errors.KstoreError`
subclass whose message names the column and its type. ``test_refusals.py`` asserts each.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pandas as pd
import pyarrow as pa

import kstore
from kstore.errors import InvalidArgumentError, KstoreError, StoreError, UnsupportedTypeError


@dataclass(frozen=True)
class Refusal:
    id: str
    driver: str  # eager | dask | spark
    what: str  # what cannot be represented, and why
    error: type[KstoreError]
    match: str  # regex the message must match (the column and its type)
    attempt: Callable[[Any, str], Any]  # (engines, store url) -> raises
    stage: str = "write"  # "write": nothing is written; "read": the read fails before any row


def _ns_frame() -> pd.DataFrame:
    return pd.DataFrame({"id": [0, 1], "t": pd.Series([pd.Timestamp("2024-01-01"),
                                                        pd.Timestamp("2024-01-01 00:00:00.000000001")])})


def _eager(table: Any, **kw: Any) -> Callable[[Any, str], Any]:
    return lambda engines, url: kstore.store_dataset(url, "refused", table() if callable(table) else table, **kw)


def _dask_ns(engines: Any, url: str) -> Any:
    import dask
    import dask.dataframe as dd

    import kstore.dask as kd

    ddf = dd.from_pandas(pd.concat([_ns_frame()] * 3, ignore_index=True), npartitions=3)
    with dask.config.set(scheduler="threads"):
        return kd.store_dataset(url, "refused", ddf)


def _dask_memory_on_processes(engines: Any, url: str) -> Any:
    import dask
    import dask.dataframe as dd

    import kstore.dask as kd

    with dask.config.set(scheduler=engines.client):
        return kd.store_dataset("memory://conformance-refusal", "refused", dd.from_pandas(pd.DataFrame({"x": [1]}), npartitions=1))


def _spark_write(ddl: str, rows: list | None = None, store: str | None = None) -> Callable[[Any, str], Any]:
    def attempt(engines: Any, url: str) -> Any:
        import kstore.spark as ks

        df = engines.spark.createDataFrame(rows or [], ddl)
        return ks.store_dataset(store or url, "refused", df)

    return attempt


def _spark_datasource_write(ddl: str) -> Callable[[Any, str], Any]:
    def attempt(engines: Any, url: str) -> Any:
        df = engines.spark.createDataFrame([], ddl)
        return df.write.format("kstore").option("dataset_uuid", "refused").mode("append").save(url)

    return attempt


def _spark_read_decimal256(engines: Any, url: str) -> Any:
    import kstore.spark as ks

    kstore.store_dataset(url, "wide", pa.table({"id": [1], "w": pa.array([Decimal("1.5")], pa.decimal256(40, 2))}))
    return ks.read_dataset(url, "wide", spark=engines.spark).collect()


REFUSALS: list[Refusal] = [
    Refusal("eager-timestamp-nanoseconds", "eager",
            "a timestamp with nanoseconds: every dataset stores microseconds (what Spark and kartothek hold, "
            "0001..9999); round with .dt.floor('us')",
            UnsupportedTypeError, r"column 't' is timestamp\[ns\].*00:00:00\.000000001.*microseconds",
            _eager(_ns_frame)),
    Refusal("dask-timestamp-nanoseconds", "dask", "the same, found by a Dask worker (no commit; files deleted)",
            UnsupportedTypeError, r"column 't' is timestamp\[ns\].*microseconds", _dask_ns),
    Refusal("eager-time-of-day", "eager", "time-of-day values (no type in the kartothek format)",
            UnsupportedTypeError, r"column 'c' has type time64\[us\]",
            _eager(pa.table({"id": [1], "c": pa.array([dt.time(1, 2)], pa.time64("us"))}))),
    Refusal("eager-duration", "eager", "durations", UnsupportedTypeError, r"column 'c' has type duration\[us\]",
            _eager(pa.table({"id": [1], "c": pa.array([dt.timedelta(1)], pa.duration("us"))}))),
    Refusal("eager-map", "eager", "maps", UnsupportedTypeError, r"column 'm' has type map<string, int64>",
            _eager(pa.table({"id": [1], "m": pa.array([[("a", 1)]], pa.map_(pa.string(), pa.int64()))}))),
    Refusal("eager-list-partition", "eager", "a list column as partition column (partition values are scalars)",
            UnsupportedTypeError, r"column 'l' has type list<item: int64>; partition_on accepts",
            _eager(pa.table({"id": [1], "l": pa.array([[1]])}), partition_on=["l"])),
    Refusal("eager-decimal-index", "eager", "a secondary index on a decimal column",
            UnsupportedTypeError, r"column 'd' has type decimal128\(10, 2\); it cannot have a secondary index",
            _eager(pa.table({"id": [1], "d": pa.array([Decimal("1.5")], pa.decimal128(10, 2))}),
                   secondary_indices=["d"])),
    Refusal("eager-null-partition-value", "eager", "a null partition value (no key encodes it)",
            InvalidArgumentError, r"partition column 'p' has 1 null value",
            _eager(pa.table({"id": [1, 2], "p": pa.array(["a", None])}), partition_on=["p"])),
    Refusal("dask-memory-store-on-processes", "dask",
            "an in-process memory store with worker processes (they cannot see it)",
            StoreError, r"in-process memory store", _dask_memory_on_processes),
    Refusal("spark-map", "spark", "Spark maps", UnsupportedTypeError,
            r"column 'm' has Spark type map<string,int>", _spark_write("id long, m map<string,int>")),
    Refusal("spark-interval", "spark", "Spark intervals", UnsupportedTypeError,
            r"column 'iv' has Spark type interval day to second", _spark_write("id long, iv interval day to second")),
    Refusal("spark-variant", "spark", "Spark variants", UnsupportedTypeError,
            r"column 'v' has Spark type variant", _spark_write("id long, v variant")),
    Refusal("spark-nested-map", "spark", "a map inside a struct", UnsupportedTypeError,
            r"column 's.m' has Spark type map<string,int>", _spark_write("id long, s struct<a:int, m:map<string,int>>")),
    Refusal("spark-datasource-map", "spark", "Spark maps through df.write.format('kstore')", UnsupportedTypeError,
            r"column 'm' has Spark type map<string,int>", _spark_datasource_write("id long, m map<string,int>")),
    Refusal("spark-memory-store", "spark", "a memory store (executors are other processes)", InvalidArgumentError,
            r"memory store cannot be shared", _spark_write("id long", store="memory://conformance-refusal")),
    Refusal("spark-read-decimal256", "spark", "reading decimal(40, 2): Spark decimals hold 38 digits",
            UnsupportedTypeError, r"column 'w' has type decimal256\(40, 2\), which Spark cannot read",
            _spark_read_decimal256, stage="read"),
]
