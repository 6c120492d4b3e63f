"""Checked by mypy (``mypy`` runs on ``tests/typing``), never executed by pytest.

``filters=`` (pyarrow's, Dask's and deltalake's name for ``predicates``, issue #30) is
accepted by every reader's signature, every overload of ``read_dataset`` included, with
the same :data:`~kstore.Predicates` type and the return types unchanged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd
import pyarrow as pa

import kstore
import kstore.dask
import kstore.spark
from kstore import DatasetMetadata, Predicates, StoreLike

if TYPE_CHECKING:
    import dask.dataframe as dd
    from dask.delayed import Delayed
    from pyspark.sql import DataFrame, SparkSession

flat: Predicates = [("p", "in", [1, 2]), ("x", "==", 7)]


def reads(store: StoreLike) -> None:
    frame: pd.DataFrame = kstore.read_dataset(store, "d", ["x"], filters=[[("x", "in", [1, 2])]])
    table: pa.Table = kstore.read_dataset(store, "d", filters=flat, as_arrow=True)
    either = kstore.read_dataset(store, "d", filters=flat, as_arrow=bool(frame.empty))
    arrow: pa.Table = kstore.read_table(store, "d", filters=flat)
    parts = list(kstore.iter_dataset(store, "d", filters=flat))
    keys: tuple[str, ...] = kstore.plan_read(store, "d", filters=flat).keys
    snap = kstore.open_dataset(store, "d")
    rows: pa.Table = snap.read_table(filters=flat)
    ddf = kstore.dask.read_dataset(store, "d", filters=[[("x", "==", 1)]])
    print(frame, table, either, arrow, parts, keys, rows, ddf)


def spark_read(spark: SparkSession, store: StoreLike) -> DataFrame:
    return kstore.spark.read_dataset(store, "d", columns=["x"], filters=flat, spark=spark)


def dask_writes(store: StoreLike, ddf: dd.DataFrame) -> None:
    """The engines' write overloads: ``compute`` says whether a Delayed or the metadata comes back."""
    meta: DatasetMetadata = kstore.dask.store_dataset(store, "d", ddf, partition_on="p", shuffle=True)
    later: Delayed = kstore.dask.store_dataset(store, "d", ddf, mode="overwrite", compute=False)
    more: DatasetMetadata = kstore.dask.update_dataset(store, "d", ddf, delete_scope=[{"p": 1}])
    queued: Delayed = kstore.dask.update_dataset(store, "d", ddf, mode="overwrite_partitions", compute=False)
    print(meta, later, more, queued)
