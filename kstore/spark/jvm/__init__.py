"""kstore's JVM data source (spike, issue #31): Spark's own Parquet scan over kstore's plan.

The Java side (``src/io/kstore/spark``, built into ``kstore-spark.jar`` by
``scripts/build_jvm.sh``) is a V1 ``kstore`` source: ``HadoopFsRelation`` over a
``KstoreFileIndex`` with Spark's ``ParquetFileFormat``. It calls back into this module's
:class:`Planner` in the driver through PySpark's py4j callback server, so kstore's format
(metadata, log, indices, statistics, commits) stays defined once, in Python.

Use::

    from kstore.spark import jvm
    spark = jvm.configure(SparkSession.builder.master("local[2]")).getOrCreate()
    jvm.install(spark)
    spark.read.format("kstore").option("dataset_uuid", "ds").load("/data/store")

Spike limits: local-directory stores only; see ``DESIGN.md`` next to this file.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import threading
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from kstore.errors import InvalidArgumentError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.session import SparkSession as _Session

__all__ = ["jar_path", "configure", "install", "Planner"]

_JAR = os.path.join(os.path.dirname(__file__), "kstore-spark.jar")
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def jar_path() -> str | None:
    """The built jar (``scripts/build_jvm.sh``), or None where it was not built."""
    return _JAR if os.path.exists(_JAR) else None


def configure(builder: _Session.Builder) -> _Session.Builder:
    """Put the JVM ``kstore`` source on a session builder (``spark.jars``)."""
    jar = jar_path()
    if jar is None:
        raise InvalidArgumentError("kstore's JVM data source is not built: run scripts/build_jvm.sh")
    return builder.config("spark.jars", jar)


def _json_value(value: Any) -> Any:
    """A partition value as the JVM index reads it (dates ISO, timestamps micros, decimals text)."""
    if isinstance(value, dt.datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=dt.timezone.utc)
        delta = aware - _EPOCH
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    return value


def _literal(value: Any) -> Any:
    """A literal from the JVM's filter JSON (see FilterConverter.java) as a Python value."""
    if isinstance(value, list):
        return tuple(_literal(v) for v in value)
    if isinstance(value, dict):
        if "$date" in value:
            return dt.date.fromisoformat(value["$date"])
        if "$ts" in value:
            return _EPOCH + dt.timedelta(microseconds=value["$ts"])
        if "$ts_ntz" in value:
            return dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=value["$ts_ntz"])
        if "$dec" in value:
            return Decimal(value["$dec"])
    return value


class Planner:
    """kstore's planner and committer for the JVM source (a py4j callback object)."""

    def __init__(self, spark: SparkSession) -> None:
        self._spark = spark
        self._lock = threading.Lock()
        self._sources: dict[str, Any] = {}
        #: the last plan made (tests compare its files with Spark's "number of files read")
        self.last_plan: Any = None
        self.plans = 0

    def resolve(self, options_json: str) -> str:
        from kstore.blocks.snapshot import open_snapshot
        from kstore.spark.reader import READ_OPTIONS, plan, resolve_source

        options = {k: v for k, v in json.loads(options_json).items()
                   if k.lower() in {o.lower() for o in READ_OPTIONS} | {"versionasof", "timestampasof"}}
        source = resolve_source(options)
        store = source.store()
        root = getattr(store, "root", None)
        if root is None or not hasattr(store, "file_path"):
            raise InvalidArgumentError(f"the JVM kstore source reads local-directory stores only in this spike, "
                                       f"not {type(store).__name__}")
        meta = open_snapshot(store, source.dataset_uuid, version=source.version).metadata
        full, stats = plan(source)
        from kstore.core.planning import file_sizes

        size = sum(file_sizes(full, stats).values()) if stats is not None else 0
        handle = {"n": len(self._sources), "dataset_uuid": source.dataset_uuid, "version": source.version}
        key = json.dumps(handle, sort_keys=True)
        with self._lock:
            self._sources[key] = source
        return json.dumps({
            "handle": handle,
            "version": source.version,
            "schema": source.spark_schema.json(),
            "partition_columns": [c for c in meta.partition_keys if c in source.columns],
            "root": "file://" + os.path.join(os.path.abspath(root), source.dataset_uuid),
            "size": int(size),
        })

    def plan(self, handle_json: str, predicates_json: str) -> str:
        from kstore.blocks.snapshot import open_snapshot
        from kstore.core.planning import file_sizes
        from kstore.core.predicates import Term, bind

        source = self._sources[json.dumps(json.loads(handle_json), sort_keys=True)]
        raw = json.loads(predicates_json)
        pushed: list[tuple[Term, ...]] | None = None
        if raw:
            pushed = []
            for conj in raw:
                terms = []
                for t in conj:
                    term = Term(t[0], t[1], _literal(t[2]) if len(t) > 2 else None)
                    try:  # a literal kstore cannot compare with the column: drop the term (conservative)
                        bind(((term,),), source.schema)
                    except Exception:  # noqa: BLE001  (any binding failure only loses pruning)
                        continue
                    terms.append(term)
                if not terms:  # a conjunction without usable terms keeps every file
                    pushed = None
                    break
                pushed.append(tuple(terms))
        dnf: Any = source.predicates
        if pushed is not None:
            dnf = (tuple(pushed) if dnf is None
                   else tuple(tuple(a) + tuple(b) for a in dnf for b in pushed))
        store = source.store()
        snap = open_snapshot(store, source.dataset_uuid, version=source.version)
        full, stats = snap.plan_with_stats(source.columns, dnf, table=source.table, stats=True)
        sizes = file_sizes(full, stats) if stats is not None else {}
        files = []
        for task in full.tasks:
            path = store.file_path(task.key)
            size = sizes.get(task.label)
            files.append({
                "path": "file://" + os.path.abspath(path),
                "size": int(size) if size is not None else os.path.getsize(path),
                "partition": {k: _json_value(v) for k, v in task.partition_values},
            })
        with self._lock:
            self.last_plan = full
            self.plans += 1
        return json.dumps({"version": full.version, "files": files})

    def write(self, jdf: Any, request_json: str) -> str:
        from pyspark.sql import DataFrame

        from kstore.blocks.snapshot import open_snapshot
        from kstore.errors import DatasetNotFoundError
        from kstore.spark.writer import store_dataset

        request = json.loads(request_json)
        options = {k.lower(): v for k, v in request["options"].items()}
        store = options.get("path") or options.get("store")
        uuid = options.get("dataset_uuid")
        if not store or not uuid:
            raise InvalidArgumentError("the kstore JVM source needs .save(store) and .option('dataset_uuid', ...)")
        partition_on = json.loads(request["partition_by"]) if request.get("partition_by") else None
        indices = options.get("secondary_indices")
        df = DataFrame(jdf, self._spark)
        save_mode = request["mode"]
        dynamic = str(request.get("partition_overwrite_mode", "")).lower() == "dynamic"
        try:
            open_snapshot(store, uuid)
            exists = True
        except DatasetNotFoundError:
            exists = False
        if save_mode == "Ignore" and exists:
            return "ignored"
        mode = {"Append": "append", "ErrorIfExists": "error", "Ignore": "error",
                "Overwrite": "overwrite_partitions" if dynamic and exists else "overwrite"}[save_mode]
        if mode in ("append", "overwrite_partitions") and not exists:
            mode = "error"
        store_dataset(store, uuid, df, mode=mode, partition_on=partition_on,
                      secondary_indices=indices.split(",") if indices else None)
        return mode

    class Java:
        implements = ["io.kstore.spark.KstorePlanner"]


_installed: dict[int, Planner] = {}


def install(spark: SparkSession) -> Planner:
    """Register kstore's :class:`Planner` with this driver's JVM (py4j callback server)."""
    from pyspark.java_gateway import ensure_callback_server_started

    sc = spark.sparkContext
    gateway = sc._gateway  # type: ignore[attr-defined]
    bridge = sc._jvm.io.kstore.spark.KstoreBridge  # type: ignore[union-attr]
    if "JavaPackage" in type(bridge).__name__:
        raise InvalidArgumentError("kstore's jar is not on this session: build it (scripts/build_jvm.sh) and start "
                                   "the session with kstore.spark.jvm.configure(builder)")
    ensure_callback_server_started(gateway)
    planner = Planner(spark)
    bridge.register(planner)
    _installed[id(spark)] = planner
    return planner
