"""kstore's JVM data source: Spark's own Parquet scan over kstore's plan (issue #31).

The Java side (``src/io/kstore/spark``, built into ``kstore-spark.jar`` by
``scripts/build_jvm.sh``, which ``scripts/setup.sh`` runs) is a V1 ``kstore`` source:
``HadoopFsRelation`` over a ``KstoreFileIndex`` with Spark's ``ParquetFileFormat``. It calls
back into this module's :class:`Planner` in the driver through PySpark's py4j callback
server, so kstore's format (metadata, log, indices, statistics, commits) stays defined once,
in Python. Users do not call this module: :func:`kstore.spark.configure` puts the jar on a
session builder and :func:`kstore.spark.register` (which ``configure``'s session calls)
installs the planner. Design notes and limits: ``DESIGN.md`` next to this file.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import threading
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from kstore.errors import InvalidArgumentError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["jar_path", "on_session", "install", "Planner"]

_JAR = os.path.join(os.path.dirname(__file__), "kstore-spark.jar")
#: Resolved reads kept per driver (a plan after eviction resolves the pinned version again).
_CACHED_SOURCES = 256
#: Pinned versions' snapshots kept per driver (each holds its version's file table).
_CACHED_SNAPSHOTS = 16
_VERSION_OPTIONS = {"version", "as_of", "versionasof", "timestampasof"}
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)

log = logging.getLogger("kstore.spark.jvm")


def jar_path() -> str | None:
    """The built jar (``scripts/build_jvm.sh``), or None where it was not built."""
    return _JAR if os.path.exists(_JAR) else None


def on_session(spark: SparkSession) -> bool:
    """Whether ``spark``'s driver JVM has kstore's JVM source (its jar was on the session's
    ``spark.jars`` when the context started). False without JVM access (Spark Connect)."""
    try:
        bridge = spark.sparkContext._jvm.io.kstore.spark.KstoreBridge  # type: ignore[union-attr]
    except Exception:  # noqa: BLE001  (Spark Connect: no py4j gateway)
        return False
    return "JavaPackage" not in type(bridge).__name__


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
        self._snapshots: dict[tuple[str, str, int | None], Any] = {}
        #: the last plan made (tests compare its files with Spark's "number of files read")
        self.last_plan: Any = None

    def _remember(self, key: str, source: Any) -> None:
        with self._lock:
            self._sources.pop(key, None)
            self._sources[key] = source
            while len(self._sources) > _CACHED_SOURCES:
                self._sources.pop(next(iter(self._sources)))

    def _source(self, handle_json: str) -> Any:
        from kstore.spark.reader import resolve_source

        handle = json.loads(handle_json)
        key = json.dumps(handle, sort_keys=True)
        with self._lock:
            source = self._sources.get(key)
        if source is None:
            options = dict(handle["options"])
            if handle["version"] is not None:
                options["version"] = str(handle["version"])
            source = resolve_source(options)
            self._remember(key, source)
        return source

    def _snapshot(self, source: Any, store: Any) -> Any:
        """The snapshot of a resolved read's pinned version, loaded once per driver: a
        committed version reads the same until GC expires it, so it is cached by (directory,
        dataset, version); resolve and every listFiles of its queries plan on it."""
        from kstore.blocks.snapshot import open_snapshot

        key = (_local_root(store), source.dataset_uuid, source.version)
        with self._lock:
            snap = self._snapshots.get(key)
        if snap is None:
            snap = open_snapshot(store, source.dataset_uuid, version=source.version)
            with self._lock:
                self._snapshots[key] = snap
                while len(self._snapshots) > _CACHED_SNAPSHOTS:
                    self._snapshots.pop(next(iter(self._snapshots)))
        return snap

    def resolve(self, options_json: str) -> str:
        """Pin the version the options name (``versionAsOf`` / ``timestampAsOf`` included):
        its Spark schema, partition columns, root and size, and a handle for :meth:`plan`."""
        from kstore.core.columns import file_names
        from kstore.core.planning import file_sizes
        from kstore.core.types import file_kinds
        from kstore.spark.datasource import PYTHON_SOURCE_NAME
        from kstore.spark.reader import resolve_changes, resolve_source, wants_changes

        options = {k: v for k, v in json.loads(options_json).items() if not k.startswith("__")}
        if any(k.lower() == "predicates" for k in options):
            # Spark's Parquet scan reads whole files: kstore's row-level filtering of the
            # option would be lost, and the rows would not be exact
            raise InvalidArgumentError(
                "format('kstore') on the JVM takes filters from .filter(...) / SQL WHERE (kstore plans the files "
                "from them); the predicates option belongs to kstore's Python source: format('kstore_python') or "
                "kstore.spark.read_dataset(..., predicates=...)")
        if wants_changes(options):
            # the change feed (readChangeFeed=true): rows computed per version by the Python
            # source, not files Spark's Parquet scan could read
            changes = resolve_changes(options)
            return json.dumps({"python_read": options, "python_source": PYTHON_SOURCE_NAME,
                               "schema": changes.spark_schema.json()})
        source = resolve_source(options)
        store = source.store()
        root = _local_root(store)
        snap = self._snapshot(source, store)
        full, stats = snap.plan_with_stats(source.columns, None, table=source.table, stats=True)
        size = sum(file_sizes(full, stats).values()) if stats is not None else 0
        partition_keys = snap.metadata.partition_keys
        # the handle names the pinned version and the options, so an evicted source resolves again
        pinned = {k: v for k, v in options.items() if k.lower() not in _VERSION_OPTIONS}
        handle = {"options": pinned, "version": source.version}
        self._remember(json.dumps(handle, sort_keys=True), source)
        python_read = None
        schema = snap.schema(source.table)
        if any(file_kinds(f) for f in schema) or file_names(schema):
            # a widened column: files of an older kind (int64 files of a double column), which
            # Spark's Parquet scan does not convert; a renamed column: files that hold it under
            # another name, which Spark's scan would read as nulls. The Python source reads
            # the pinned version
            python_read = {**pinned, "version": str(source.version)}
            log.info("dataset %r v%s has widened or renamed columns: format('kstore') reads it through %r",
                     source.dataset_uuid, source.version, PYTHON_SOURCE_NAME)
        return json.dumps({
            "handle": handle,
            "version": source.version,
            "python_read": python_read,
            "python_source": PYTHON_SOURCE_NAME,
            "schema": source.spark_schema.json(),
            "partition_columns": [c for c in partition_keys if c in source.spark_schema.names],
            "root": "file://" + os.path.join(root, source.dataset_uuid),
            "size": int(size),
        })

    def plan(self, handle_json: str, predicates_json: str) -> str:
        from kstore.core.planning import file_sizes
        from kstore.core.predicates import Term, bind

        source = self._source(handle_json)
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
        dnf: Any = tuple(pushed) if pushed is not None else None  # (resolve refuses the predicates option)
        store = source.store()
        full, stats = self._snapshot(source, store).plan_with_stats(source.columns, dnf, table=source.table, stats=True)
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
        return json.dumps({"version": full.version, "files": files})

    def write(self, jdf: Any, request_json: str) -> str:
        """Write a Java ``Dataset`` with kstore's Python data source (one commit per job).

        Spark's save mode, ``partitionBy`` columns and the session's
        ``partitionOverwriteMode`` (what the Python data source API cannot see) become that
        source's options; every other option (``replaceWhere``, ``mergeSchema``,
        ``secondary_indices``, ...) passes through unchanged and is checked there.
        """
        from pyspark.sql import DataFrame

        from kstore.spark.datasource import PYTHON_SOURCE_NAME

        request = json.loads(request_json)
        options = dict(request["options"])
        stream_txn = options.pop("__stream_txn", None)  # a micro-batch of the JVM stream sink
        given = {k.lower(): k for k in options}
        if stream_txn is not None:
            from kstore.spark.datasource import _NOT_STREAMED

            bad = [o for o in _NOT_STREAMED if o.lower() in given]
            if bad:
                raise InvalidArgumentError(f"options {bad} do not apply to a streaming write: each micro-batch "
                                           "appends (append output mode) or replaces the dataset (complete mode), "
                                           "once, under the transaction (txnAppId or the query id, batch id)")
            options["txn"] = stream_txn
        self._check_local(options)  # before writing: the relation Spark gets back must open it
        partition_by = json.loads(request["partition_by"]) if request.get("partition_by") else None
        if partition_by:
            named = options.get(given.get("partition_on", ""), "")
            listed = [c.strip() for c in named.split(",") if c.strip()]
            if listed and listed != partition_by:
                raise InvalidArgumentError(f"partitionBy{tuple(partition_by)} and option partition_on={named!r} "
                                           "disagree; pass one of them")
            options[given.get("partition_on", "partition_on")] = ",".join(partition_by)
        mode = request["mode"]
        spark_mode = "overwrite" if mode == "Overwrite" else "append"
        if mode in ("ErrorIfExists", "Ignore") and "write_mode" not in given:
            options["write_mode"] = "error" if mode == "ErrorIfExists" else "ignore"
        session_mode = str(request.get("partition_overwrite_mode") or "").lower()
        if (spark_mode == "overwrite" and session_mode == "dynamic"
                and not {"partitionoverwritemode", "replacewhere", "write_mode"} & set(given)):
            options["partitionOverwriteMode"] = "dynamic"
        DataFrame(jdf, self._spark).write.format(PYTHON_SOURCE_NAME).mode(spark_mode).options(**options).save()
        return spark_mode

    def latest(self, options_json: str) -> str:
        """The end offset of the next micro-batch of kstore-spark.jar's stream source,
        ``{"version": v}``: the newest version of the dataset the options name (one listing
        of the log and the main file), or fewer versions under ``maxFilesPerTrigger`` when
        the source passes ``__max_files`` and the micro-batch's start (``__start``: the last
        offset delivered; absent: the stream's first micro-batch, which reads the whole
        dataset unless a starting version is given) — :func:`kstore.spark.reader.limited_end`;
        never past ``__until`` (an ``availableNow`` query's end, fixed when it started)."""
        from kstore.blocks.load import load_head
        from kstore.errors import DatasetNotFoundError
        from kstore.io.store import open_store
        from kstore.spark.reader import (
            STREAM_START_OPTIONS,
            _starting_version,
            decode_store,
            limited_end,
            store_and_dataset,
            wants_changes,
        )
        from kstore.spark.writer import spark_store_factory

        raw = json.loads(options_json)
        start, max_files, until = raw.pop("__start", None), raw.pop("__max_files", None), raw.pop("__until", None)
        options = {k.lower(): v for k, v in raw.items()}
        path, uuid = store_and_dataset(options, "load")
        st = open_store(spark_store_factory(decode_store(path)))
        head = load_head(st, uuid)
        if head.meta is None or head.version is None:
            raise DatasetNotFoundError(f"dataset {uuid!r} does not exist (or was deleted while the stream ran)")
        newest = head.version if until is None else min(head.version, int(json.loads(until)["version"]))
        if max_files:
            if start is not None:
                done: int | None = int(json.loads(start)["version"])
            else:
                first = _starting_version(st, uuid, {name: options[name.lower()] for name in STREAM_START_OPTIONS
                                                     if name.lower() in options})
                done = None if first is None else first - 1  # None: the first batch is the whole dataset
            if done is not None and newest > done:
                newest = limited_end(st, uuid, done, newest, int(max_files),
                                     changes=wants_changes(options, stream=True))
        return json.dumps({"version": newest})

    @staticmethod
    def _check_local(options: dict[str, str]) -> None:
        """Refuse a write to a store the JVM source cannot read, before anything is written
        (Spark reads the written dataset back at the end of ``save``: a refusal then would
        come after the commit, and a retry would write the rows twice)."""
        from kstore.io.store import open_store
        from kstore.spark.reader import decode_store, store_and_dataset

        path, _ = store_and_dataset({k.lower(): v for k, v in options.items()}, "save")
        _local_root(open_store(decode_store(path)))

    class Java:
        implements = ["io.kstore.spark.KstorePlanner"]


def _local_root(store: Any) -> str:
    """The directory of a local store (the JVM source reads files through Hadoop's ``file:``)."""
    root = getattr(store, "root", None)
    if root is None or not hasattr(store, "file_path"):
        raise InvalidArgumentError(
            f"format('kstore') on the JVM reads datasets in a local directory (a path or file:// URL), not a "
            f"{type(store).__name__}; read this store with format('kstore_python') or kstore.spark.read_dataset")
    return os.path.abspath(root)


_installed: dict[int, Planner] = {}


def install(spark: SparkSession) -> Planner:
    """Register kstore's :class:`Planner` with this driver's JVM (py4j callback server), once
    per SparkContext; :func:`kstore.spark.register` calls it where :func:`on_session`."""
    from pyspark.java_gateway import ensure_callback_server_started

    sc = spark.sparkContext
    key = id(sc)
    planner = _installed.get(key)
    bridge = sc._jvm.io.kstore.spark.KstoreBridge  # type: ignore[union-attr]
    if planner is not None and bridge.isRegistered():
        return planner
    if "JavaPackage" in type(bridge).__name__:
        raise InvalidArgumentError("kstore's jar is not on this session: start it from "
                                   "kstore.spark.configure(SparkSession.builder)")
    ensure_callback_server_started(sc._gateway)
    planner = Planner(spark)
    bridge.register(planner)
    _installed[key] = planner
    return planner
