"""Spark's automatic discovery of the ``kstore`` Python data source.

PySpark (>= 4.0) registers, in every new SparkSession, the ``DefaultSource`` of each
installed top-level package whose name starts with ``pyspark_``
(``pyspark.sql.worker.lookup_data_sources``). With kstore installed,
``spark.read.format("kstore")`` and ``df.write.format("kstore")`` therefore work without
calling :func:`kstore.spark.register`.

The discovered source is :class:`kstore.spark.datasource.KstoreDataSourceNoPushdown`: it
needs no session setting (discovery happens in a Python worker that cannot set
``spark.sql.python.filterPushdown.enabled``, and Spark refuses a reader with
``pushFilters`` while that setting is off). ``.filter`` conditions are evaluated by Spark;
the ``predicates`` option still prunes files. :func:`kstore.spark.register` replaces it
in its session with the pushdown source where that is exact.

Examples
--------
>>> from pyspark_kstore import DefaultSource
>>> DefaultSource.name(), DefaultSource.__name__
('kstore', 'KstoreDataSourceNoPushdown')

In any new SparkSession ``spark`` (tested in ``tests/drivers/test_spark_idioms.py``)::

    spark.read.format("kstore").option("dataset_uuid", "sales").load("/data/store")
"""

from __future__ import annotations

from kstore.spark.datasource import KstoreDataSourceNoPushdown as DefaultSource

__all__ = ["DefaultSource"]
