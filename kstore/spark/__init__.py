"""kstore on Apache Spark (PySpark >= 4.1): executors write and read, the driver plans and commits.

Writing a DataFrame: executors write Parquet files straight into the store from Arrow
batches and report file metadata; the driver builds the indices and makes one commit::

    import kstore.spark as ks
    ks.store_dataset(df, "/data/store", "sales", partition_on=["day"], secondary_indices=["location"])
    ks.update_dataset(more, "/data/store", "sales", mode="overwrite_partitions")

Reading, and the ``kstore`` data source (filter pushdown into kstore's planner)::

    ks.register(spark)
    spark.read.format("kstore").option("dataset_uuid", "sales").load("/data/store").filter("location = 7")
    ks.read_dataset(spark, "/data/store", "sales", predicates=[[("location", "==", 7)]])

Stores must be reachable from every executor (a directory, ``file://``, ``s3://``);
``memory://`` stores are refused. Workers must run the same Python as the driver
(``PYSPARK_PYTHON``) with kstore installed.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from kstore.io.store import StoreLike
from kstore.spark.datasource import KstoreDataSource, KstoreDataSourceNoPushdown
from kstore.spark.reader import GUARD_COLUMN, encode_predicates, encode_store
from kstore.spark.types import arrow_schema, spark_schema
from kstore.spark.writer import store_dataset, update_dataset

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "store_dataset",
    "update_dataset",
    "read_dataset",
    "register",
    "store_option",
    "arrow_schema",
    "spark_schema",
    "KstoreDataSource",
]

_PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def register(spark: SparkSession, *, filter_pushdown: bool = True) -> None:
    """Register the ``kstore`` data source with ``spark`` (once per session is enough).

    With ``filter_pushdown`` (default) this sets ``spark.sql.python.filterPushdown.enabled``
    (Spark refuses a Python reader with ``pushFilters`` otherwise); without it, filters stay
    with Spark and only the ``predicates`` option reaches kstore's planner.

    Examples
    --------
    With a SparkSession ``spark`` (tested in ``tests/drivers/test_spark.py``)::

        import kstore.spark as ks
        ks.register(spark)
        spark.read.format("kstore").option("dataset_uuid", "sales").load("/data/store")
    """
    if filter_pushdown:
        spark.conf.set(_PUSHDOWN_CONF, "true")
        spark.dataSource.register(KstoreDataSource)
    else:
        spark.dataSource.register(KstoreDataSourceNoPushdown)


def store_option(store: StoreLike) -> str:
    """The ``path`` / ``store`` option string for ``store`` (a URL, or a pickled factory)."""
    return encode_store(store)


def read_dataset(
    spark: SparkSession,
    store: StoreLike,
    dataset_uuid: str,
    *,
    columns: Sequence[str] | None = None,
    predicates: Any = None,
    version: int | None = None,
    as_of: datetime | None = None,
    partition_bytes: int | None = None,
) -> DataFrame:
    """A Spark DataFrame over a dataset (through the ``kstore`` data source).

    ``predicates`` (DNF, any literal types, ORs included) go to kstore's planner; filters
    added later with ``.filter`` are pushed down too. ``version`` / ``as_of`` read a
    retained older version.

    The DataFrame is safe to reuse across queries: it carries an always-true pushed filter
    (see :data:`kstore.spark.reader.GUARD_COLUMN`), so Spark plans every query afresh
    instead of reusing a previous query's pruned plan (a Spark 4.3 caching issue that a
    plain ``spark.read.format("kstore").load()`` DataFrame is exposed to).

    Examples
    --------
    With a SparkSession ``spark`` (tested in ``tests/drivers/test_spark.py``)::

        import kstore.spark as ks
        df = ks.read_dataset(spark, "/data/store", "sales")
        df.filter("location = 7 AND day >= DATE'2024-01-20'").count()
    """
    register(spark)
    reader = spark.read.format("kstore").option("dataset_uuid", dataset_uuid)
    if columns is not None:
        reader = reader.option("columns", ",".join(columns))
    if predicates is not None:
        reader = reader.option("predicates", encode_predicates(predicates))
    if version is not None:
        reader = reader.option("version", str(int(version)))
    if as_of is not None:
        reader = reader.option("as_of", as_of.isoformat())
    if partition_bytes is not None:
        reader = reader.option("partition_bytes", str(int(partition_bytes)))
    reader = reader.option("min_partitions", str(spark.sparkContext.defaultParallelism))
    from pyspark.sql import functions as F

    df = reader.option("scan_guard", "true").load(encode_store(store))
    return df.filter(F.col(GUARD_COLUMN).isNotNull()).drop(GUARD_COLUMN)
