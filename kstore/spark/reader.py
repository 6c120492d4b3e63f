"""Spark reads: plan on the driver with kstore's planner, read planned files on executors.

:func:`resolve_source` pins the dataset version once (when Spark asks for the schema), so
every partition of one DataFrame reads the same version. Spark's pushed filters become
kstore predicate terms (:func:`filter_to_term`); :func:`plan_partitions` plans the read
(partition values, secondary indices, per-file statistics) and groups the planned files
into Spark input partitions; :func:`read_partition` reads one group with
:func:`kstore.blocks.read.read_task` and returns Arrow record batches in the exact
Arrow schema Spark expects.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa
import pyarrow.types as pat

from kstore.blocks.changes import ChangeRange
from kstore.blocks.read import read_task
from kstore.blocks.snapshot import open_snapshot
from kstore.core.log import LogEntry
from kstore.core.planning import ReadPlan, ReadTask, file_sizes, pack_in_order
from kstore.core.predicates import DNF, Predicates, Term, bind, parse
from kstore.errors import InvalidArgumentError, KstoreError
from kstore.io.store import Store, StoreLike, open_store
from kstore.spark.types import schema_hint, spark_schema, to_spark_batches

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

__all__ = [
    "ReadSource",
    "check_options",
    "resolve_source",
    "filter_to_term",
    "plan",
    "group_tasks",
    "plan_partitions",
    "read_partition",
    "encode_store",
    "decode_store",
    "encode_predicates",
    "decode_predicates",
    "option_flag",
    "DEFAULT_PARTITION_BYTES",
    "READ_OPTIONS",
    "WRITE_OPTIONS",
]

#: Planned files are grouped into Spark input partitions of at most this many bytes
#: (``spark.sql.files.maxPartitionBytes``'s default).
DEFAULT_PARTITION_BYTES = 128 * 1024 * 1024
#: What opening one file costs, in bytes (``spark.sql.files.openCostInBytes``'s default).
OPEN_COST_BYTES = 4 * 1024 * 1024
#: Rows per Arrow batch handed to Spark.
BATCH_ROWS = 65_536

#: Read options of the ``kstore`` data source (see :mod:`kstore.spark.datasource`).
READ_OPTIONS = ("path", "store", "dataset_uuid", "version", "as_of", "columns", "predicates", "table",
                "partition_bytes", "min_partitions",
                # a stream's rate limit (Delta's; a batch read, which reads one range, ignores it)
                "maxFilesPerTrigger",
                # Delta's change data feed (:func:`resolve_changes`)
                "readChangeFeed", "startingVersion", "endingVersion", "startingTimestamp", "endingTimestamp")
#: the options of a stream of the dataset's rows (``spark.readStream`` without ``readChangeFeed``)
STREAM_READ_OPTIONS = ("skipChangeCommits",)
#: the change-feed options a stream of the dataset's rows takes too (where it starts)
STREAM_START_OPTIONS = ("startingVersion", "startingTimestamp")
#: the read options of the change feed (the others, but the store's and the dataset's, do not apply)
CHANGE_FEED_OPTIONS = ("readChangeFeed", "startingVersion", "endingVersion", "startingTimestamp", "endingTimestamp")
#: Write options of the ``kstore`` data source.
WRITE_OPTIONS = ("path", "store", "dataset_uuid", "partition_on", "secondary_indices", "write_mode", "schema_mode",
                 "table", "metadata", "metadata_format", "txn", "chunk_bytes",
                 # kstore.core.writer_options.WriteOptions fields
                 "compression", "compression_level", "row_group_size", "data_page_size", "write_page_index",
                 "bloom_filters", "use_dictionary", "sort_by",
                 # Spark's and Delta's names (``mergeSchema`` -> ``schema_mode=merge``, ...)
                 "mergeSchema", "overwriteSchema", "partitionOverwriteMode", "replaceWhere")
#: Delta Lake's time-travel option names, accepted as aliases (Spark lower-cases option names).
OPTION_ALIASES = {"versionasof": "version", "timestampasof": "as_of"}
#: PySpark builds a pushed decimal literal in Python's default 28-digit context, so a literal
#: with this many significant digits may have been rounded before kstore sees it.
_PUSHED_DECIMAL_DIGITS = 28

_STORE_PREFIX = "kstore-store:"
_PRED_PREFIX = "kstore-predicates:"


def encode_store(store: StoreLike) -> str:
    """A store as a data source ``path`` string: its URL, or a pickled factory.

    URLs travel as they are; other stores (a custom factory, a store object with
    credentials) are pickled (cloudpickle) into an opaque string. Memory stores are
    refused (executors are other processes).
    """
    from kstore.spark.writer import spark_store_factory

    factory = spark_store_factory(store)
    url = getattr(factory, "url", None)
    if isinstance(url, str):
        return url
    from pyspark import cloudpickle

    return _STORE_PREFIX + base64.b64encode(cloudpickle.dumps(factory)).decode("ascii")


def decode_store(text: str) -> StoreLike:
    if text.startswith(_STORE_PREFIX):
        from pyspark import cloudpickle

        return cloudpickle.loads(base64.b64decode(text[len(_STORE_PREFIX):]))
    return text


def encode_predicates(predicates: Any) -> str:
    """DNF predicates (any literal type) as a data source option string."""
    from pyspark import cloudpickle

    return _PRED_PREFIX + base64.b64encode(cloudpickle.dumps(parse(predicates))).decode("ascii")


def decode_predicates(text: str | None) -> DNF | None:
    """The ``predicates`` option: JSON DNF (``[[["x", "==", 1]]]``) or :func:`encode_predicates`."""
    if not text:
        return None
    if text.startswith(_PRED_PREFIX):
        from pyspark import cloudpickle

        return cloudpickle.loads(base64.b64decode(text[len(_PRED_PREFIX):]))
    try:
        raw = json.loads(text, parse_float=Decimal)  # exact: decimal(38, s) literals keep every digit
    except ValueError as exc:
        raise InvalidArgumentError(f"option predicates must be JSON DNF such as [[[\"x\", \"==\", 1]]], got {text!r}") from exc
    return parse(raw)


@dataclass(frozen=True, slots=True)
class ReadSource:
    """What a Spark read of one dataset version needs (picklable; resolved on the driver)."""

    store: Callable[[], Store]
    dataset_uuid: str
    version: int | None
    table: str | None
    schema: pa.Schema  # the dataset's normalized schema
    spark_schema: StructType  # what the DataFrame has (after ``columns``)
    predicates: DNF | None = None
    partition_bytes: int = DEFAULT_PARTITION_BYTES
    min_partitions: int = 1

    @property
    def columns(self) -> list[str]:
        """The dataset columns the DataFrame reads."""
        return list(self.spark_schema.fieldNames())


def _parse_as_of(text: str) -> dt.datetime:
    try:
        return dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError as exc:
        raise InvalidArgumentError(f"option as_of must be an ISO timestamp, got {text!r}") from exc


def check_options(options: Mapping[str, str], known: Sequence[str], verb: str) -> dict[str, str]:
    """The data source ``options`` as a plain dict, Delta's names resolved to kstore's
    (``versionAsOf`` -> ``version``, ``timestampAsOf`` -> ``as_of``).

    An option kstore does not know raises :class:`~kstore.errors.InvalidArgumentError`
    listing the valid ones (a misspelt ``version`` must not read the latest data).

    >>> check_options({"versionasof": "0", "dataset_uuid": "d"}, READ_OPTIONS, "read")
    {'version': '0', 'dataset_uuid': 'd'}
    >>> check_options({"verison": "0"}, READ_OPTIONS, "read")
    Traceback (most recent call last):
    ...
    kstore.errors.InvalidArgumentError: the kstore data source has no read option 'verison' (did you mean 'version'?); read options: as_of, columns, dataset_uuid, ..., version (and Delta's versionAsOf / timestampAsOf for version / as_of)
    """
    import difflib

    out: dict[str, str] = {}
    canonical = {k.lower(): k for k in known}  # Spark lower-cases option names
    for key, value in options.items():
        lowered = OPTION_ALIASES.get(key.lower(), key.lower()) if verb == "read" else key.lower()
        name = canonical.get(lowered, lowered)
        if name not in known:
            close = difflib.get_close_matches(lowered, list(canonical) + list(OPTION_ALIASES), n=1)
            guess = OPTION_ALIASES.get(close[0], canonical.get(close[0], close[0])) if close else ""
            hint = f" (did you mean {guess!r}?)" if close else ""
            delta = " (and Delta's versionAsOf / timestampAsOf for version / as_of)" if verb == "read" else ""
            raise InvalidArgumentError(
                f"the kstore data source has no {verb} option {key!r}{hint}; {verb} options: "
                f"{', '.join(sorted(known, key=str.lower))}{delta}"
            )
        if name in out:
            raise InvalidArgumentError(f"the kstore data source got the {verb} option {name!r} twice ({key!r})")
        out[name] = value
    return out


def store_and_dataset(options: Any, verb: str) -> tuple[str, str]:
    """The store path and dataset uuid of data source options (clear errors when missing).

    As with Delta Lake, a path names a dataset: without ``dataset_uuid``, the last segment
    of ``path`` is the dataset and the rest is the store (``/data/store/sales`` is dataset
    ``sales`` in store ``/data/store``; a URL's query string stays with the store). With
    ``dataset_uuid``, ``path`` is the store.

    >>> store_and_dataset({"path": "/data/store/sales"}, "load")
    ('/data/store', 'sales')
    >>> store_and_dataset({"path": "s3://bucket/p/sales/?endpoint_url=http://h:9"}, "save")
    ('s3://bucket/p?endpoint_url=http://h:9', 'sales')
    >>> store_and_dataset({"path": "/data/store", "dataset_uuid": "sales"}, "load")
    ('/data/store', 'sales')
    """
    path = options.get("path") or options.get("store")
    if not path:
        raise InvalidArgumentError(f"the kstore data source needs a dataset path: .{verb}('<store>/<dataset>'), "
                                   f"or .{verb}(store) with .option('dataset_uuid', ...)")
    uuid = options.get("dataset_uuid")
    if uuid:
        return path, uuid
    if path.startswith(_STORE_PREFIX):
        raise InvalidArgumentError("the kstore data source needs .option('dataset_uuid', ...) with a store object")
    base, sep, query = path.partition("?")
    stripped = base.rstrip("/")
    parent, slash, name = stripped.rpartition("/")
    if not slash or not name or not parent or parent.endswith((":", ":/")):
        raise InvalidArgumentError(f"the kstore data source needs a dataset: {path!r} names no dataset inside a "
                                   f"store; pass '<store>/<dataset>' or .option('dataset_uuid', ...)")
    return parent + sep + query, name


def resolve_source(options: Mapping[str, str]) -> ReadSource:
    """Resolve data source options: store, dataset, version (``version`` / ``as_of``), schema."""
    from kstore.blocks.history import version_as_of
    from kstore.spark.writer import spark_store_factory

    options = check_options(options, READ_OPTIONS, "read")
    path, uuid = store_and_dataset(options, "load")
    store = decode_store(path)
    factory = spark_store_factory(store)
    st = open_store(factory)
    version_opt, as_of_opt = options.get("version"), options.get("as_of")
    if version_opt is not None and as_of_opt is not None:
        raise InvalidArgumentError("pass the option version or as_of, not both")
    version: int | None
    if as_of_opt is not None:
        version = version_as_of(st, uuid, _parse_as_of(as_of_opt))
    elif version_opt is not None:
        try:
            version = int(version_opt)
        except ValueError as exc:
            raise InvalidArgumentError(f"option version must be an integer, got {version_opt!r}") from exc
    else:
        version = None
    snap = open_snapshot(st, uuid, version=version)
    meta = snap.metadata
    table = options.get("table") or None
    schema = snap.schema(table)
    sspark = spark_schema(schema, hint=schema_hint(meta.metadata))
    columns = options.get("columns")
    if columns:
        names = [c.strip() for c in columns.split(",") if c.strip()]
        missing = [c for c in names if c not in schema.names]
        if missing:
            from kstore.errors import ColumnNotFoundError

            raise ColumnNotFoundError(
                f"dataset {uuid!r}: columns {missing} do not exist (columns: {', '.join(schema.names)})"
            )
        from pyspark.sql.types import StructType

        sspark = StructType([sspark[c] for c in names])
    pbytes = int(options.get("partition_bytes") or DEFAULT_PARTITION_BYTES)
    if pbytes <= 0:
        raise InvalidArgumentError(f"option partition_bytes must be positive, got {pbytes}")
    try:
        min_parts = int(options.get("min_partitions") or (os.cpu_count() or 1))
    except ValueError as exc:
        raise InvalidArgumentError(f"option min_partitions must be an integer, got {options['min_partitions']!r}") from exc
    return ReadSource(
        store=factory,
        dataset_uuid=uuid,
        version=meta.version,
        table=table,
        schema=schema,
        spark_schema=sspark,
        predicates=decode_predicates(options.get("predicates")),
        partition_bytes=pbytes,
        min_partitions=max(1, min_parts),
    )


# -- the change feed ----------------------------------------------------------------------


@dataclass(frozen=True)
class ChangeSource:
    """What a Spark read of a dataset's change feed needs (picklable; resolved on the driver):
    the checked range (:class:`kstore.blocks.changes.ChangeRange`) and its Spark schema."""

    store: Callable[[], Store]
    changes: ChangeRange
    spark_schema: StructType


def wants_changes(options: Mapping[str, str], *, stream: bool = False) -> bool:
    """Whether the read options ask for the change feed (Delta's ``readChangeFeed=true``).
    A stream (``spark.readStream``) of the dataset's rows takes ``startingVersion`` /
    ``startingTimestamp`` without it (:func:`resolve_appends`)."""
    flag = option_flag(options, "readChangeFeed")
    if flag is None:
        given = {k.lower() for k in options}
        allowed = {o.lower() for o in STREAM_START_OPTIONS} if stream else set()
        if any(k.lower() in given and k.lower() not in allowed for k in CHANGE_FEED_OPTIONS):
            raise InvalidArgumentError("the options startingVersion / endingVersion / startingTimestamp / "
                                       "endingTimestamp read the change feed: add readChangeFeed=true")
        return False
    return flag


def _version_option(options: Mapping[str, str], name: str) -> int | None:
    raw = options.get(name)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError as exc:
        raise InvalidArgumentError(f"option {name} must be a version number, got {raw!r}") from exc
    if value < 0:
        raise InvalidArgumentError(f"option {name} must be a version number >= 0, got {raw!r}")
    return value


def resolve_changes(options: Mapping[str, str]) -> ChangeSource:
    """Resolve a change-feed read (``readChangeFeed=true``): ``startingVersion`` or
    ``startingTimestamp`` (the first version committed at or after it), optional
    ``endingVersion`` or ``endingTimestamp`` (the version current at it; default: the
    newest), as Delta's options. The rows have the newest version's columns in the range
    (columns only older versions had are left out) and ``_change_type``,
    ``_commit_version``, ``_commit_timestamp``."""
    from kstore.blocks.changes import plan_changes
    from kstore.blocks.history import version_as_of
    from kstore.spark.writer import spark_store_factory

    options = check_options(options, READ_OPTIONS, "read")
    ignored = [k for k in ("version", "as_of", "columns", "predicates", "table") if k in options]
    if ignored:
        raise InvalidArgumentError(f"options {ignored} do not apply to the change feed (readChangeFeed=true): "
                                   "its range is startingVersion/startingTimestamp .. endingVersion/endingTimestamp")
    path, uuid = store_and_dataset(options, "load")
    factory = spark_store_factory(decode_store(path))
    st = open_store(factory)
    for a, b in (("startingVersion", "startingTimestamp"), ("endingVersion", "endingTimestamp")):
        if a in options and b in options:
            raise InvalidArgumentError(f"pass the option {a} or {b}, not both")
    start = _starting_version(st, uuid, options)
    if start is None:
        raise InvalidArgumentError("readChangeFeed=true needs the option startingVersion or startingTimestamp")
    end = _version_option(options, "endingVersion")
    if "endingTimestamp" in options:
        end = version_as_of(st, uuid, _parse_as_of(options["endingTimestamp"]))
    changes = plan_changes(st, uuid, start, end)
    return ChangeSource(factory, changes, spark_schema(changes.schema))


def _starting_version(st: Store, uuid: str, options: Mapping[str, str]) -> int | None:
    """``startingVersion``, or the first version committed at or after ``startingTimestamp``."""
    from kstore.blocks.history import history

    start = _version_option(options, "startingVersion")
    if "startingTimestamp" in options:
        since = _parse_as_of(options["startingTimestamp"])
        later = [e.version for e in history(st, uuid) if e.timestamp >= since]
        if not later:
            raise InvalidArgumentError(f"dataset {uuid!r} has no version committed at or after {since.isoformat()}")
        start = later[0]
    return start


def option_flag(options: Mapping[str, str], name: str) -> bool | None:
    """A ``true`` / ``false`` option (Spark's spelling, any case; the name matched without
    regard to case, as Spark matches option names); None when it is not given.

    >>> option_flag({"mergeschema": " TRUE"}, "mergeSchema"), option_flag({}, "mergeSchema")
    (True, None)
    """
    wanted = name.lower()
    raw = next((v for k, v in options.items() if k.lower() == wanted), None)
    if raw is None:
        return None
    flag = raw.strip().lower()
    if flag not in ("true", "false"):
        raise InvalidArgumentError(f"option {name} must be 'true' or 'false', got {raw!r}")
    return flag == "true"


@dataclass(frozen=True)
class AppendSource:
    """What a stream of a dataset's new rows needs (``spark.readStream`` without
    ``readChangeFeed``; picklable, resolved on the driver): the versions come from the
    change feed (:class:`ChangeSource`, whose ``spark_schema`` here is the data columns
    only), restricted to the ones that only added rows
    (:func:`kstore.blocks.changes.appends_only`). ``snapshot``: the stream starts with
    every row of the version current at its first micro-batch (no ``startingVersion``).
    ``options``: the options that name the dataset (to read that snapshot)."""

    changes: ChangeSource
    snapshot: bool
    skip_change_commits: bool
    options: tuple[tuple[str, str], ...]


def resolve_appends(options: Mapping[str, str]) -> AppendSource:
    """Resolve ``spark.readStream.format("kstore")`` without ``readChangeFeed``: Delta's
    streaming source. With ``startingVersion`` (or ``startingTimestamp``) the stream reads
    the rows each version from there on added; without, it first reads every row of the
    dataset as it is then, and then each new version's rows. Only versions that added rows
    may follow (``skipChangeCommits=true`` skips the others). The stream's columns are the
    newest version's when it starts; a later schema change stops it (restart the stream)."""
    from kstore.blocks.changes import CHANGE_COLUMNS, plan_changes
    from kstore.blocks.load import load_latest
    from kstore.errors import DatasetNotFoundError
    from kstore.spark.writer import spark_store_factory

    options = check_options(options, READ_OPTIONS + STREAM_READ_OPTIONS, "read")
    ignored = [k for k in ("version", "as_of", "columns", "predicates", "endingVersion", "endingTimestamp")
               if k in options]
    if ignored:
        raise InvalidArgumentError(f"options {ignored} do not apply to a stream (spark.readStream): it reads each new "
                                   "version from startingVersion / startingTimestamp (default: the newest) on; "
                                   "select and filter after load()")
    if "startingVersion" in options and "startingTimestamp" in options:
        raise InvalidArgumentError("pass the option startingVersion or startingTimestamp, not both")
    path, uuid = store_and_dataset(options, "load")
    factory = spark_store_factory(decode_store(path))
    st = open_store(factory)
    newest, _ = load_latest(st, uuid)
    if newest is None:
        raise DatasetNotFoundError(f"dataset {uuid!r} does not exist: a stream reads an existing dataset "
                                   "(its columns are the stream's)")
    start = _starting_version(st, uuid, options)
    skip = bool(option_flag(options, "skipChangeCommits"))
    first = newest.version if start is None else start
    changes = plan_changes(st, uuid, first if first is not None else 0, newest.version)
    data = pa.schema([f for f in changes.schema if f.name not in CHANGE_COLUMNS])
    hint = schema_hint(newest.metadata)
    naming = tuple((k, v) for k, v in options.items() if k in ("path", "store", "dataset_uuid", "table",
                                                                "partition_bytes", "min_partitions"))
    return AppendSource(ChangeSource(factory, changes, spark_schema(data, hint=hint)), start is None, skip, naming)


def snapshot_source(source: AppendSource, version: int) -> ReadSource:
    """The first micro-batch of a stream without ``startingVersion``: a read of every row
    of ``version`` in the stream's columns (a schema change since the stream started is an
    :class:`InvalidArgumentError` asking for a restart)."""
    from kstore.blocks.changes import CHANGE_COLUMNS

    snap = resolve_source({**dict(source.options), "version": str(version)})
    fixed = pa.schema([pa.field(f.name, f.type) for f in source.changes.changes.schema if f.name not in CHANGE_COLUMNS])
    now = pa.schema([pa.field(f.name, f.type) for f in snap.schema])
    if not now.equals(fixed):
        raise InvalidArgumentError(
            f"dataset {snap.dataset_uuid!r}: its schema changed by version {version} after this stream started "
            f"(columns {now.names}, the stream's {fixed.names}, or a type widened); restart the stream")
    return replace(snap, spark_schema=source.changes.spark_schema)


def max_files_per_trigger(options: Mapping[str, str]) -> int | None:
    """The ``maxFilesPerTrigger`` option (Delta's rate limit of a stream), or None."""
    raw = next((v for k, v in options.items() if k.lower() == "maxfilespertrigger"), None)
    if raw is None:
        return None
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n <= 0:
        raise InvalidArgumentError(f"option maxFilesPerTrigger must be a positive number of files, got {raw!r}")
    return n


def limited_end(st: Store, dataset_uuid: str, done: int, newest: int, max_files: int, *, changes: bool) -> int:
    """The last version of the next micro-batch of a stream that delivered versions up to
    ``done``, under Delta's ``maxFilesPerTrigger``: versions ``done + 1 ..`` are taken while
    the files they make the batch read stay within ``max_files``, and at least one (a
    version's files are never split). A stream of appended rows reads the files an append
    or create added (other versions read none or stop the stream); a change-feed stream
    the files each version added and removed. Reads one log entry per version taken.

    >>> import pandas as pd, kstore
    >>> from kstore.io.memory import MemoryStore
    >>> st = MemoryStore()
    >>> for day in "abcd":
    ...     _ = kstore.store_dataset(st, "d", pd.DataFrame({"day": [day, day + "2"], "x": [1, 2]}),
    ...                              partition_on="day", mode="error" if day == "a" else "append")
    >>> [limited_end(st, "d", -1, 3, n, changes=False) for n in (1, 2, 3, 4, 100)]
    [0, 0, 0, 1, 3]
    """
    from kstore.blocks.changes import APPEND_ONLY, NO_ROW_CHANGES
    from kstore.blocks.load import load_entry

    total = 0
    for v in range(done + 1, newest + 1):
        entry = load_entry(st, dataset_uuid, v)
        if changes:
            n = 0 if entry.operation in NO_ROW_CHANGES else len(entry.added) + len(entry.removed)
        else:
            n = len(entry.added) if entry.operation in APPEND_ONLY else 0
        if total and n and total + n > max_files:  # (a version that reads no file rides along)
            return v - 1
        total += n
    return newest


def newest_change_version(source: ChangeSource) -> int:
    """The newest version of the dataset a streaming change-feed read follows (1 listing of
    the log + the main file: :func:`kstore.blocks.load.load_head`)."""
    from kstore.blocks import load

    head = load.load_head(source.store(), source.changes.dataset_uuid)
    return head.version if head.version is not None else source.changes.start - 1


def stream_changes(source: ChangeSource, start: int, end: int) -> ChangeSource:
    """The versions ``start`` .. ``end`` of a streaming change-feed read (one micro-batch),
    read in the stream's schema (fixed when the stream started, as Spark needs). A range
    whose newest version has other columns or types than the stream (a column added,
    renamed, dropped or widened since it started) is an :class:`InvalidArgumentError` asking
    for a restart, as Delta's stream fails on a schema change: its rows would not fit."""
    from dataclasses import replace

    from kstore.blocks.changes import plan_changes

    changes = plan_changes(source.store(), source.changes.dataset_uuid, start, end)
    fixed = source.changes.schema
    if not changes.schema.equals(fixed, check_metadata=False):
        gone = [n for n in fixed.names if n not in changes.schema.names]
        new = [n for n in changes.schema.names if n not in fixed.names]
        raise InvalidArgumentError(
            f"dataset {changes.dataset_uuid!r}: its schema changed by version {end} (columns added {new}, gone "
            f"{gone}, or a type widened) after this change-feed stream started; restart the stream (from "
            f"startingVersion {start}) to read the changes in the new schema")
    return replace(source, changes=replace(changes, schema=fixed))


def read_change_partition(source: ChangeSource, entry: LogEntry, store: Store | None = None,
                          ) -> Iterator[pa.RecordBatch]:
    """Executor side: the change rows of one version as Spark-typed Arrow batches."""
    from pyspark.sql.pandas.types import to_arrow_schema

    from kstore.blocks.changes import conform_changes, version_changes

    target = to_arrow_schema(source.spark_schema, timezone="UTC")
    st = store if store is not None else source.store()
    tables, _ = version_changes(st, source.changes, entry)
    for table in tables:
        if table.num_rows:
            yield from to_spark_batches(conform_changes(table, source.changes.schema), target, BATCH_ROWS)


# -- filters ------------------------------------------------------------------------------

_BINARY_OPS = {"EqualTo": "==", "GreaterThan": ">", "GreaterThanOrEqual": ">=", "LessThan": "<",
               "LessThanOrEqual": "<="}
_NEGATED = {"EqualTo": "!=", "In": "not in", "IsNull": "is not null", "IsNotNull": "is null"}
#: on float columns Spark orders NaN above everything and NaN = NaN; Arrow does not.
#: These ops match no NaN in either, so they may prune; Spark still re-checks them.
_FLOAT_SAFE = {"==", "in", "<", "<="}


def _literal(value: Any, t: pa.DataType) -> Any:
    if isinstance(value, Decimal) and pat.is_integer(t) and value == value.to_integral_value():
        return int(value)
    return value


def _maybe_rounded(value: Any) -> bool:
    """A pushed decimal literal PySpark may have rounded (see ``_PUSHED_DECIMAL_DIGITS``)."""
    return isinstance(value, Decimal) and len(value.as_tuple().digits) >= _PUSHED_DECIMAL_DIGITS


def filter_to_term(f: Any, schema: pa.Schema) -> tuple[Term | None, bool]:
    """A Spark data source filter as a kstore term, and whether kstore evaluates it exactly.

    ``(None, False)``: kstore cannot use the filter (Spark keeps it). An inexact term
    (float comparisons, where Spark's NaN semantics differ from Arrow's) only prunes;
    Spark still evaluates the filter.
    """
    name = type(f).__name__
    negated = name == "Not"
    if negated:
        f = f.child
        name = type(f).__name__
        if name not in _NEGATED:
            return None, False
    attr = getattr(f, "attribute", None)
    if not isinstance(attr, tuple) or len(attr) != 1 or schema.get_field_index(attr[0]) < 0:
        return None, False
    column = attr[0]
    t = schema.field(column).type
    if pat.is_dictionary(t):
        t = t.value_type
    value: Any = getattr(f, "value", None)
    if any(_maybe_rounded(v) for v in (value if isinstance(value, (tuple, list)) else (value,))):
        return None, False  # Spark evaluates it (kstore would compare with a rounded literal)
    if name == "IsNull":
        term = Term(column, "is not null" if negated else "is null")
    elif name == "IsNotNull":
        term = Term(column, "is null" if negated else "is not null")
    elif name == "In":
        values = tuple(v for v in value if v is not None)
        if negated and len(values) != len(value):
            return None, False  # x NOT IN (.., NULL) is never true: leave it to Spark
        if any(isinstance(v, float) and math.isnan(v) for v in values):
            return None, False
        term = Term(column, "not in" if negated else "in", tuple(_literal(v, t) for v in values))
    elif name == "EqualTo" or (name == "EqualNullSafe" and not negated):
        if value is None:
            if name != "EqualNullSafe":
                return None, False
            term = Term(column, "is null")
        else:
            if isinstance(value, float) and math.isnan(value):
                return None, False
            term = Term(column, "!=" if negated else "==", _literal(value, t))
    elif name in _BINARY_OPS and not negated:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return None, False
        term = Term(column, _BINARY_OPS[name], _literal(value, t))
    else:
        return None, False
    try:
        bind(((term,),), schema)
    except (KstoreError, TypeError, ValueError, OverflowError):
        return None, False
    if pat.is_floating(t) and term.op not in ("is null", "is not null"):
        if term.op not in _FLOAT_SAFE:
            return None, False
        return term, False
    return term, True


# -- planning -----------------------------------------------------------------------------


def _combine(predicates: DNF | None, pushed: Sequence[Term]) -> DNF | None:
    if not pushed:
        return predicates
    if predicates is None:
        return (tuple(pushed),)
    return tuple(tuple(conj) + tuple(pushed) for conj in predicates)


def plan(source: ReadSource, pushed: Sequence[Term] = ()) -> tuple[ReadPlan, pa.Table | None]:
    """Plan the read; return the plan (store calls counted) and the per-file statistics.

    Store calls: those of :func:`kstore.open_dataset`, 1 per secondary index a predicate
    uses, 1 for the statistics when pruning needs them (they are always loaded, as they
    size the Spark partitions).
    """
    snap = open_snapshot(source.store(), source.dataset_uuid, version=source.version)
    dnf = _combine(source.predicates, pushed)
    # parsed terms are (column, op, value) triples: the planner takes them as given
    return snap.plan_with_stats(source.columns, cast(Predicates, dnf), table=source.table, stats=True)


def group_tasks(tasks: Sequence[ReadTask], sizes: Mapping[str, int], partition_bytes: int,
                min_partitions: int = 1) -> list[tuple[ReadTask, ...]]:
    """Planned files grouped into Spark input partitions, the way Spark splits files.

    As Spark's file sources: each file costs its size plus :data:`OPEN_COST_BYTES`; a group
    holds at most ``min(partition_bytes, max(OPEN_COST_BYTES, total / min_partitions))``,
    so small reads still spread over ``min_partitions`` tasks and big ones get groups of
    about ``partition_bytes``. Files of unknown size count as ``partition_bytes``.
    """
    costs = [(sizes.get(t.label, partition_bytes) or 0) + OPEN_COST_BYTES for t in tasks]
    limit = min(partition_bytes, max(OPEN_COST_BYTES, sum(costs) // max(1, min_partitions)))
    return pack_in_order(tasks, list(costs), limit)


def plan_partitions(source: ReadSource, pushed: Sequence[Term] = ()) -> tuple[ReadPlan, list[ReadPlan]]:
    """The full plan and one sub-plan (the same plan with a group of its tasks) per
    Spark input partition. File sizes for grouping come from the statistics (1 get)."""
    full, stats = plan(source, pushed)
    sizes = file_sizes(full, stats) if len(full.tasks) > 1 else {}
    groups = group_tasks(full.tasks, sizes, source.partition_bytes, source.min_partitions)
    return full, [replace(full, tasks=g) for g in groups]


def read_partition(source: ReadSource, part: ReadPlan, store: Store | None = None) -> Iterator[pa.RecordBatch]:
    """Executor side: read one group of planned files as Spark-typed Arrow batches."""
    from pyspark.sql.pandas.types import to_arrow_schema

    target = to_arrow_schema(source.spark_schema, timezone="UTC")
    st = store if store is not None else source.store()
    columns = source.columns
    for task in part.tasks:
        table = read_task(st, part, task, columns)
        if table.num_rows == 0:
            continue
        yield from to_spark_batches(table, target, BATCH_ROWS)

