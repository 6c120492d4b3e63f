"""kstore on Apache Spark (PySpark >= 4.1): executors write and read, the driver plans and commits.

Writing a DataFrame: executors write Parquet files straight into the store from Arrow
batches and report file metadata; the driver builds the indices and makes one commit::

    import kstore.spark as ks
    ks.store_dataset("/data/store", "sales", df, partition_on=["day"], secondary_indices=["location"])
    ks.update_dataset("/data/store", "sales", more, mode="overwrite_partitions")

Reading, and the ``kstore`` data source (``predicates`` are planned by kstore's planner)::

    ks.register(spark)
    ks.read_dataset("/data/store", "sales", predicates=[[("location", "==", 7)]])  # the active session
    spark.read.format("kstore").option("dataset_uuid", "sales").load("/data/store").filter("location = 7")

Stores must be reachable from every executor (a directory, ``file://``, ``s3://``);
``memory://`` stores are refused. Workers must run the same Python as the driver
(``PYSPARK_PYTHON``) with kstore installed.
"""

from __future__ import annotations

import warnings

# PySpark 4.x warns "PySpark does not yet fully support pandas >= 3.0.0" from each of its
# modules that checks the pandas version, once per module, on the driver and on every Python
# worker. kstore's Spark paths exchange Arrow batches, not pandas frames, and the conformance
# suite checks them with pandas 3; the warning says nothing about them. Only that message,
# only from pyspark's modules, is silenced (installed before kstore imports pyspark).
warnings.filterwarnings("ignore", message=r"PySpark does not yet fully support pandas >= 3", category=FutureWarning,
                        module=r"pyspark(\.|$)")

import functools  # noqa: E402
import logging  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from typing import TYPE_CHECKING, ParamSpec, TypeVar  # noqa: E402

from kstore.core.arguments import (  # noqa: E402
    AsOf,
    as_bool,
    as_column_list,
    as_timestamp,
    check_text,
    predicates_or_filters,
)
from kstore.core.predicates import Predicates  # noqa: E402
from kstore.errors import InvalidArgumentError  # noqa: E402
from kstore.io.store import StoreLike  # noqa: E402
from kstore.spark.datasource import (  # noqa: E402
    PYTHON_SOURCE_NAME,
    KstoreDataSource,
    KstoreDataSourceNoPushdown,
    KstorePythonDataSource,
    KstorePythonDataSourceNoPushdown,
)
from kstore.spark.merge import delete_rows, merge, update_rows  # noqa: E402
from kstore.spark.reader import encode_predicates, encode_store  # noqa: E402
from kstore.spark.types import arrow_schema, spark_schema  # noqa: E402
from kstore.spark.writer import compact, store_dataset, update_dataset  # noqa: E402

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("kstore.spark")

P = ParamSpec("P")
R = TypeVar("R")

__all__ = [
    "compact",
    "merge",
    "update_rows",
    "delete_rows",
    "store_dataset",
    "update_dataset",
    "read_dataset",
    "register",
    "configure",
    "store_option",
    "scans_keep_own_read_plan",
    "arrow_schema",
    "spark_schema",
    "KstoreDataSource",
]

_PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def scans_keep_own_read_plan(spark: SparkSession) -> bool:
    """Whether this Spark keeps the read plan of a Python data source per scan.

    Spark 4.3 keeps the read plan that filter pushdown produces on the relation
    (``PythonDataSourceV2``), shared by every scan of one DataFrame: both sides of a union
    or self-join and every later query that pushes no filter read the files the last
    pushdown planned. Pruning by pushed filters is only exact where each scan keeps its
    own plan (a ``readInfo`` field on ``PythonScanBuilder``, as in later Spark versions).

    Parameters
    ----------
    spark
        A running ``SparkSession``.

    Returns
    -------
    bool
        True where each scan keeps its own plan (kstore then enables filter pushdown);
        False on Spark 4.3, without JVM access (Spark Connect) or on an unknown Spark.

    Examples
    --------
    With a SparkSession ``spark`` (tested in ``tests/drivers/test_spark.py``)::

        import kstore.spark as ks
        ks.scans_keep_own_read_plan(spark)  # False on Spark 4.3: register() leaves pushdown off
    """
    try:
        cls = spark.sparkContext._jvm.java.lang.Class.forName(  # type: ignore[union-attr]  # a running context has one
            "org.apache.spark.sql.execution.datasources.v2.python.PythonScanBuilder")
        return any(f.getName() == "readInfo" for f in cls.getDeclaredFields())
    except Exception:  # no JVM access (Spark Connect) or another Spark: assume shared plans
        return False


def register(spark: SparkSession, *, filter_pushdown: bool = True) -> str:
    """Make kstore's data sources ready in ``spark`` (once per session is enough).

    Where the session carries kstore's JVM source (:func:`configure`), ``format("kstore")``
    is that source: ``register`` connects it to kstore's planner in this driver and
    registers the Python data source as ``format("kstore_python")`` (Spark looks up JVM
    sources first and refuses a Python source of the same name). Elsewhere the Python data
    source is ``format("kstore")``, as PySpark already discovers it in every session
    (``pyspark_kstore``, no filter pushdown); ``register`` replaces that entry.

    With ``filter_pushdown`` (default) on a Spark whose scans keep their own read plan
    (:func:`scans_keep_own_read_plan`), filters Spark pushes to the Python source prune files
    too, and ``spark.sql.python.filterPushdown.enabled`` is set (Spark refuses a Python
    reader with ``pushFilters`` otherwise). On Spark 4.3, or without ``filter_pushdown``,
    Spark evaluates ``.filter`` itself and only the ``predicates`` option reaches kstore's
    planner: rows are exact either way (see :mod:`kstore.spark.datasource`). The JVM source
    always prunes by the filters Spark pushes.

    Parameters
    ----------
    spark
        The ``SparkSession`` to register the data source with.
    filter_pushdown
        Let Spark push ``.filter`` conditions to the Python source's planner where that is exact.

    Returns
    -------
    str
        The format name of kstore's Python data source in this session: ``"kstore"``, or
        ``"kstore_python"`` where the JVM source owns ``"kstore"``.

    Examples
    --------
    With a SparkSession ``spark`` (tested in ``tests/drivers/test_spark.py``)::

        import kstore.spark as ks
        ks.register(spark)  # 'kstore' (no JVM source on this session)
        spark.read.format("kstore").load("/data/store/sales")
    """
    from kstore.spark import jvm

    pushdown = as_bool(filter_pushdown, "filter_pushdown") and scans_keep_own_read_plan(spark)
    if pushdown:
        spark.conf.set(_PUSHDOWN_CONF, "true")
    if jvm.on_session(spark):
        jvm.install(spark)
        spark.dataSource.register(KstorePythonDataSource if pushdown else KstorePythonDataSourceNoPushdown)
        return PYTHON_SOURCE_NAME
    spark.dataSource.register(KstoreDataSource if pushdown else KstoreDataSourceNoPushdown)
    return "kstore"


def configure(builder: SparkSession.Builder) -> SparkSession.Builder:
    """Put kstore's JVM data source on a session builder: the one line a Spark job needs.

    As ``configure_spark_with_delta_pip`` does for Delta Lake: the jar shipped inside kstore
    (``kstore/spark/jvm/kstore-spark.jar``) joins ``spark.jars``, and the session that
    ``getOrCreate()`` returns is :func:`register`-ed. ``format("kstore")`` is then Spark's
    own Parquet scan over kstore's plan (column pruning, partition pruning and kstore's
    index and statistics skipping for the filters Spark pushes), and writes see
    ``partitionBy``, every save mode and the session's ``partitionOverwriteMode``.
    ``spark.sql.extensions`` gets kstore's SQL parser extension:
    ``SELECT ... FROM kstore.`/data/store/events` VERSION AS OF 3``.

    Where the jar is absent (not built: ``scripts/build_jvm.sh``), or the session existed
    before (its JVM started without the jar), ``format("kstore")`` stays kstore's Python
    data source, and a warning says so.

    Parameters
    ----------
    builder
        A ``SparkSession.Builder`` (``SparkSession.builder.master(...)...``).

    Returns
    -------
    SparkSession.Builder
        The same builder, configured; chain more ``.config(...)`` and ``.getOrCreate()``.

    Examples
    --------
    Tested in ``tests/drivers/test_spark_jvm.py``::

        from pyspark.sql import SparkSession
        import kstore.spark as ks
        spark = ks.configure(SparkSession.builder.master("local[2]")).getOrCreate()
        df.write.format("kstore").partitionBy("day").mode("overwrite").save("/data/store/events")
        spark.read.format("kstore").load("/data/store/events").filter("day = DATE'2024-01-05'")
    """
    from kstore.spark import jvm

    jar = jvm.jar_path()
    if jar is None:
        log.warning("kstore's JVM data source is not built (run scripts/build_jvm.sh): format('kstore') is kstore's "
                    "Python data source")
    else:
        for key, value in (("spark.jars", jar), ("spark.sql.extensions", _EXTENSIONS)):  # SQL on a path
            given = builder._options.get(key)
            if not given or value not in str(given).split(","):
                builder.config(key, f"{given},{value}" if given else value)
    if not isinstance(builder, _RegisteringBuilder):
        builder.__class__ = _registering(type(builder))
    return builder


_EXTENSIONS = "io.kstore.spark.KstoreSparkExtensions"


class _RegisteringBuilder:
    """Marks a builder whose ``getOrCreate`` registers kstore's data sources."""


_REGISTERING: dict[type, type] = {}


def _registering(base: type[SparkSession.Builder]) -> type:
    """``base`` with a ``getOrCreate`` that registers kstore's data sources (one class per base)."""
    if base in _REGISTERING:
        return _REGISTERING[base]

    def getOrCreate(self: SparkSession.Builder) -> SparkSession:
        from kstore.spark import jvm

        spark = base.getOrCreate(self)
        if register(spark) == "kstore" and jvm.jar_path() is not None:
            log.warning("this SparkSession started before kstore.spark.configure (its JVM has no kstore jar): "
                        "format('kstore') is kstore's Python data source; stop it and build a new one")
        return spark

    cls = _REGISTERING[base] = type(base.__name__, (_RegisteringBuilder, base), {"getOrCreate": getOrCreate})
    return cls


def store_option(store: StoreLike) -> str:
    """The ``path`` / ``store`` option string for ``store`` (a URL, or a pickled factory).

    Parameters
    ----------
    store
        A path, URL, store or factory (:data:`~kstore.io.store.StoreLike`).

    Returns
    -------
    str
        What to pass to ``spark.read.format("kstore").load(...)`` or
        ``.option("path", ...)``.

    Examples
    --------
    >>> import kstore.spark as ks
    >>> ks.store_option("s3://bucket/datasets")
    's3://bucket/datasets'
    """
    return encode_store(store)


def _session_first(read: Callable[P, R]) -> Callable[P, R]:
    """Also accept the old order ``read_dataset(spark, store, dataset_uuid, **keywords)``
    (everything after the dataset was a keyword then), with a :class:`FutureWarning`."""

    @functools.wraps(read)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        from pyspark.sql import SparkSession

        if args and isinstance(args[0], SparkSession):
            warnings.warn("kstore.spark.read_dataset(spark, store, dataset_uuid) is deprecated; pass (store, "
                          "dataset_uuid) like kstore.read_dataset (spark= is optional: the active session)",
                          FutureWarning, stacklevel=2)
            if len(args) != 3 or "spark" in kwargs:
                raise InvalidArgumentError("kstore.spark.read_dataset(spark, store, dataset_uuid, ...): the old "
                                           "order takes every other argument by keyword; pass (store, "
                                           "dataset_uuid, columns, predicates, spark=spark)")
            return read(args[1], args[2], **kwargs, spark=args[0])  # type: ignore[arg-type]
        return read(*args, **kwargs)

    return call


@_session_first
def read_dataset(
    store: StoreLike,
    dataset_uuid: str,
    columns: Sequence[str] | None = None,
    predicates: Predicates = None,
    *,
    filters: Predicates = None,
    version: int | None = None,
    as_of: AsOf = None,
    table: str | None = None,
    spark: SparkSession | None = None,
    partition_bytes: int | None = None,
) -> DataFrame:
    """A Spark DataFrame over a dataset (through the ``kstore`` data source).

    ``predicates`` (DNF, any literal types, ORs included) go to kstore's planner, which
    prunes files by partition values, secondary indices and statistics; filters added
    later with ``.filter`` are evaluated by Spark (see :func:`register`). The DataFrame is
    safe to reuse: unions, self-joins and repeated actions return exact rows.

    Parameters
    ----------
    store
        A path or URL the executors can reach (not ``memory://``).
    dataset_uuid
        The dataset's name.
    columns
        Columns to read (None: all; ``[]``: rows without columns).
    predicates
        DNF ``[[(col, op, value), ...], ...]``, as in :func:`kstore.read_dataset`.
    filters
        The same as ``predicates``, under the name pyarrow, Dask (``dd.read_parquet``) and
        deltalake use for it; give one of the two. (Spark's own ``.filter`` is another
        thing: a filter on the DataFrame, evaluated by Spark.)
    version, as_of
        Read a retained older version (a number, or the version current at a
        ``datetime`` or ISO 8601 timestamp), as in :func:`kstore.read_dataset`.
    table
        Another table of a multi-table (kartothek) dataset, as in :func:`kstore.read_dataset`.
    spark
        The ``SparkSession`` (the data source is registered with it); default: the active
        session. The old order ``read_dataset(spark, store, dataset_uuid, ...)`` still works
        with a :class:`FutureWarning`.
    partition_bytes
        Bytes of planned files per Spark input partition (default 128 MiB,
        :data:`kstore.spark.reader.DEFAULT_PARTITION_BYTES`).

    Returns
    -------
    pyspark.sql.DataFrame
        A lazy DataFrame.

    Examples
    --------
    With a SparkSession ``spark`` (tested in ``tests/drivers/test_spark.py``)::

        import kstore.spark as ks
        df = ks.read_dataset("/data/store", "sales", predicates=[[("location", "==", 7)]])
        df.filter("day >= DATE'2024-01-20'").count()
    """
    from pyspark.sql import SparkSession

    if not isinstance(dataset_uuid, str):
        raise InvalidArgumentError(f"kstore.spark.read_dataset: the second argument is the dataset name (a str), "
                                   f"got {type(dataset_uuid).__name__}")
    columns = as_column_list(columns)
    predicates = predicates_or_filters(predicates, filters)
    if spark is None:
        spark = SparkSession.getActiveSession()
        if spark is None:
            raise InvalidArgumentError(f"kstore.spark.read_dataset (dataset {dataset_uuid!r}): no SparkSession is "
                                       "active in this thread; start one or pass spark=")
    reader = spark.read.format(register(spark)).option("dataset_uuid", dataset_uuid)
    if columns:
        reader = reader.option("columns", ",".join(columns))
    if predicates is not None:
        reader = reader.option("predicates", encode_predicates(predicates))
    if version is not None:
        reader = reader.option("version", str(int(version)))
    if as_of is not None:
        reader = reader.option("as_of", as_timestamp(as_of).isoformat())
    if table is not None:
        reader = reader.option("table", check_text(table, "table"))
    if partition_bytes is not None:
        reader = reader.option("partition_bytes", str(int(partition_bytes)))
    reader = reader.option("min_partitions", str(spark.sparkContext.defaultParallelism))
    df = reader.load(encode_store(store))
    return df.select() if columns is not None and not columns else df  # columns=[]: rows, no columns
