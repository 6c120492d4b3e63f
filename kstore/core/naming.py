"""Every key of a dataset, hive quoting of partition values, and key validation.

This module alone decides where things live in a store. It is pure: no I/O.

Layout (FORMAT.md part A and B)::

    <uuid>.by-dataset-metadata.json | .msgpack.zstd
    <uuid>/<table>/_common_metadata
    <uuid>/<table>/<col>=<val>/.../<file-id>.parquet
    <uuid>/indices/<col>/<timestamp>.by-dataset-index.parquet
    <uuid>/_kstore/log/<version:020d>.json           (kstore: one entry per version)
    <uuid>/_kstore/stats/<id>.parquet                (kstore: per-file statistics)

Examples
--------
>>> quote("a b/c=d%")
'a%20b%2Fc%3Dd%25'
>>> build_label([("region", "a b/c"), ("day", "2024-01-01")], "f00")
'region=a%20b%2Fc/day=2024-01-01/f00'
>>> parse_label("region=a%20b%2Fc/day=2024-01-01/f00", ["region", "day"])
(('a b/c', '2024-01-01'), 'f00')
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Literal

from kstore.core import runtime
from kstore.errors import CorruptMetadataError, InvalidKeyError, LimitExceededError, short_repr

MetadataFormat = Literal["json", "msgpack.zstd"]

METADATA_MARKER = "by-dataset-metadata"
METADATA_SUFFIXES: dict[str, str] = {
    "json": f".{METADATA_MARKER}.json",
    "msgpack.zstd": f".{METADATA_MARKER}.msgpack.zstd",
}
#: Readers try the formats in this order (FORMAT.md A).
METADATA_FORMATS: tuple[MetadataFormat, ...] = ("json", "msgpack.zstd")
INDEX_SUFFIX = ".by-dataset-index.parquet"
COMMON_METADATA = "_common_metadata"
DATA_SUFFIX = ".parquet"
INDICES_DIR = "indices"
KSTORE_DIR = "_kstore"
DEFAULT_TABLE = "table"

#: A key component kstore builds (dataset uuid plus metadata suffix, table name, quoted
#: ``<column>=<value>``, quoted index column, file name) is at most 255 bytes: the file
#: name limit of local file systems (NAME_MAX), applied on every store alike.
MAX_NAME_BYTES = 255
#: A key kstore builds is at most 1024 bytes (S3's limit; file systems allow 4096).
MAX_KEY_BYTES = 1024

_NAME_RE = re.compile(r"[A-Za-z0-9_+\-][A-Za-z0-9_+\-.]*")
_FILE_ID_RE = re.compile(r"[A-Za-z0-9_+\-.]+")


def _check_component(component: str, what: str) -> str:
    size = len(component.encode("utf-8"))
    if size > MAX_NAME_BYTES:
        raise LimitExceededError(
            f"{what} makes the key component {short_repr(component)} {size} bytes long; the limit "
            f"is {MAX_NAME_BYTES} (MAX_NAME_BYTES, the longest file name file systems allow)"
        )
    return component


def _check_key(key: str, what: str) -> str:
    size = len(key.encode("utf-8"))
    if size > MAX_KEY_BYTES:
        raise LimitExceededError(
            f"{what}: key {short_repr(key)} is {size} bytes long; the limit is {MAX_KEY_BYTES} (MAX_KEY_BYTES)"
        )
    return key


def quote(value: str) -> str:
    """Percent-encode every character outside ``A-Za-z0-9_.-~`` (including ``/``)."""
    return urllib.parse.quote(value, safe="")


def unquote(value: str) -> str:
    """Decode a percent-encoded key component (strict UTF-8)."""
    try:
        return urllib.parse.unquote(value, errors="strict")
    except UnicodeDecodeError as exc:
        raise CorruptMetadataError(f"key component {value!r} is not valid percent-encoded UTF-8") from exc


def validate_name(name: object, what: str = "dataset uuid") -> str:
    """Check a dataset uuid or table name: one safe key component, no ``by-dataset-metadata``.

    >>> validate_name("sales")
    'sales'
    >>> validate_name("../etc")
    Traceback (most recent call last):
    ...
    kstore.errors.InvalidKeyError: invalid dataset uuid '../etc': use letters, digits and _ + - . (not first), no '/'
    """
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name) or ".." in name:
        raise InvalidKeyError(
            f"invalid {what} {short_repr(name)}: use letters, digits and _ + - . (not first), no '/'"
        )
    if METADATA_MARKER in name:
        raise InvalidKeyError(f"invalid {what} {name!r}: must not contain {METADATA_MARKER!r}")
    return _check_component(name, f"{what} {short_repr(name)}")


def validate_key(key: object) -> str:
    """Check a store key: relative, ``/``-separated, no empty, ``.`` or ``..`` component.

    Keys that pass can never escape the store root (or a dataset's prefix, see
    :func:`validate_dataset_key`).

    >>> validate_key("ds/table/x=1/a.parquet")
    'ds/table/x=1/a.parquet'
    >>> validate_key("/etc/passwd")
    Traceback (most recent call last):
    ...
    kstore.errors.InvalidKeyError: invalid key '/etc/passwd': empty, '.' or '..' component, or a backslash/NUL
    """
    if not isinstance(key, str) or not key:
        raise InvalidKeyError(f"invalid key {key!r}: must be a non-empty string")
    parts = key.split("/")
    if "\\" in key or "\x00" in key or "" in parts or "." in parts or ".." in parts:
        raise InvalidKeyError(
            f"invalid key {key!r}: empty, '.' or '..' component, or a backslash/NUL"
        )
    return key


def validate_dataset_key(dataset_uuid: str, key: str) -> str:
    """Check that ``key`` (read from metadata) belongs to the dataset ``dataset_uuid``."""
    validate_key(key)
    if not key.startswith(dataset_uuid + "/"):
        raise CorruptMetadataError(
            f"dataset {dataset_uuid!r}: key {key!r} lies outside the dataset's prefix"
        )
    return key


def metadata_key(dataset_uuid: str, fmt: MetadataFormat = "json") -> str:
    """The main metadata file of a dataset."""
    if not isinstance(fmt, str) or fmt not in METADATA_SUFFIXES:
        raise InvalidKeyError(f"unknown metadata format {fmt!r}; use 'json' or 'msgpack.zstd'")
    key = validate_name(dataset_uuid) + METADATA_SUFFIXES[fmt]
    return _check_component(key, f"dataset uuid {short_repr(dataset_uuid)}")


def dataset_uuid_from_metadata_key(key: str) -> str | None:
    """The uuid a main metadata key belongs to, or None when ``key`` is none."""
    for suffix in METADATA_SUFFIXES.values():
        if key.endswith(suffix) and "/" not in key:
            return key[: -len(suffix)]
    return None


def dataset_prefix(dataset_uuid: str) -> str:
    """Every key a dataset owns (besides its main file) starts with this."""
    return validate_name(dataset_uuid) + "/"


def common_metadata_key(dataset_uuid: str, table: str = DEFAULT_TABLE) -> str:
    return f"{validate_name(dataset_uuid)}/{validate_name(table, 'table name')}/{COMMON_METADATA}"


def table_prefix(dataset_uuid: str, table: str = DEFAULT_TABLE) -> str:
    return f"{validate_name(dataset_uuid)}/{validate_name(table, 'table name')}/"


def data_key(dataset_uuid: str, table: str, label: str) -> str:
    """Storage key of a partition's file: ``<uuid>/<table>/<label>.parquet``."""
    key = validate_key(table_prefix(dataset_uuid, table) + label + DATA_SUFFIX)
    _check_component(key.rsplit("/", 1)[1], f"dataset {dataset_uuid!r}: file id {short_repr(label.rsplit('/', 1)[-1])}")
    return _check_key(key, f"dataset {dataset_uuid!r}")


def label_from_data_key(dataset_uuid: str, table: str, key: str) -> str | None:
    """The partition label of a data file key, or None if the key is no data file of ``table``."""
    prefix = table_prefix(dataset_uuid, table)
    if not key.startswith(prefix) or not key.endswith(DATA_SUFFIX):
        return None
    return key[len(prefix) : -len(DATA_SUFFIX)]


def index_timestamp(now: datetime | None = None) -> str:
    """The timestamp part of an index file name: ``YYYY-MM-DDTHH:MM:SS.ffffff`` (UTC)."""
    now = now or runtime.current().now()
    return now.astimezone(timezone.utc).replace(tzinfo=None).isoformat(timespec="microseconds")


def index_key(dataset_uuid: str, column: str, timestamp: str | None = None) -> str:
    """Storage key of a secondary index file; a fresh timestamp makes each write a new key."""
    ts = timestamp or index_timestamp()
    col = quote(column)
    if col in (".", ".."):  # a path component of dots would name a directory, not the column
        col = col.replace(".", "%2E")
    col = _check_component(col, f"dataset {dataset_uuid!r}: index column {short_repr(column)}")
    key = f"{dataset_prefix(dataset_uuid)}{INDICES_DIR}/{col}/{quote(ts)}{INDEX_SUFFIX}"
    return _check_key(key, f"dataset {dataset_uuid!r}")


def log_prefix(dataset_uuid: str) -> str:
    return f"{dataset_prefix(dataset_uuid)}{KSTORE_DIR}/log/"


ENTRY_SUFFIX = ".json"
CHECKPOINT_SUFFIX = ".checkpoint.arrow"
SUMMARY_SUFFIX = ".summary.msgpack.zstd"
EXPIRED_SUFFIX = ".expired"


def _version_key(dataset_uuid: str, version: int, suffix: str) -> str:
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise InvalidKeyError(f"invalid version {version!r}: must be an int >= 0")
    return f"{log_prefix(dataset_uuid)}{version:020d}{suffix}"


def _version_of(dataset_uuid: str, key: str, suffix: str) -> int | None:
    prefix = log_prefix(dataset_uuid)
    if key.startswith(prefix) and key.endswith(suffix):
        stem = key[len(prefix) : -len(suffix)]
        if stem.isascii() and stem.isdigit():
            return int(stem)
    return None


def log_key(dataset_uuid: str, version: int) -> str:
    """Write-once key of version ``version``'s log entry (FORMAT.md B.1)."""
    return _version_key(dataset_uuid, version, ENTRY_SUFFIX)


def version_from_log_key(dataset_uuid: str, key: str) -> int | None:
    return _version_of(dataset_uuid, key, ENTRY_SUFFIX)


def checkpoint_key(dataset_uuid: str, version: int) -> str:
    """Key of version ``version``'s checkpoint (format 2; FORMAT.md E), beside the log entries."""
    return _version_key(dataset_uuid, version, CHECKPOINT_SUFFIX)


def version_from_checkpoint_key(dataset_uuid: str, key: str) -> int | None:
    return _version_of(dataset_uuid, key, CHECKPOINT_SUFFIX)


SORTED_INDEX_SUFFIX = ".sorted-index"


def sorted_index_key(dataset_uuid: str, version: int, digest: str) -> str:
    """Key of the value-sorted index blocks of version ``version``'s checkpoint whose
    directory names ``digest`` (FORMAT.md E.7): content-addressed, so every writer of that
    checkpoint writes the same bytes under the same key."""
    if not (isinstance(digest, str) and 0 < len(digest) <= 64 and all(c in "0123456789abcdef" for c in digest)):
        raise InvalidKeyError(f"invalid sorted-index digest {short_repr(digest)}: must be lowercase hex")
    return _version_key(dataset_uuid, version, f".{digest}{SORTED_INDEX_SUFFIX}")


def version_from_sorted_index_key(dataset_uuid: str, key: str) -> int | None:
    prefix = log_prefix(dataset_uuid)
    if key.startswith(prefix) and key.endswith(SORTED_INDEX_SUFFIX):
        stem, _, digest = key[len(prefix) : -len(SORTED_INDEX_SUFFIX)].partition(".")
        if stem.isascii() and stem.isdigit() and digest and all(c in "0123456789abcdef" for c in digest):
            return int(stem)
    return None


def summary_key(dataset_uuid: str, version: int) -> str:
    """Key of the history summary written with version ``version``'s checkpoint (FORMAT.md E.5)."""
    return _version_key(dataset_uuid, version, SUMMARY_SUFFIX)


def version_from_summary_key(dataset_uuid: str, key: str) -> int | None:
    return _version_of(dataset_uuid, key, SUMMARY_SUFFIX)


def expired_key(dataset_uuid: str, version: int) -> str:
    """Empty marker garbage collection writes before it turns version ``version``'s entry
    into a tombstone (so one listing tells ``history()`` which versions expired)."""
    return _version_key(dataset_uuid, version, EXPIRED_SUFFIX)


def version_from_expired_key(dataset_uuid: str, key: str) -> int | None:
    return _version_of(dataset_uuid, key, EXPIRED_SUFFIX)


def last_checkpoint_key(dataset_uuid: str) -> str:
    """The hint naming the newest checkpoint (may lag; readers list from it)."""
    return f"{log_prefix(dataset_uuid)}_last_checkpoint.json"


def stats_key(dataset_uuid: str, file_id: str | None = None) -> str:
    """Key of a per-file statistics file (FORMAT.md B.5)."""
    return f"{dataset_prefix(dataset_uuid)}{KSTORE_DIR}/stats/{file_id or new_file_id()}.parquet"


def new_file_id(now: float | None = None) -> str:
    """A fresh file id: ``k<epoch ms, hex>_<random hex>``.

    Like kartothek's uuid4 ids it is unique; the time prefix lets garbage collection keep
    unreferenced files younger than the retention window (a write may still be running).
    """
    ms = int((runtime.current().time() if now is None else now) * 1000)
    return f"k{ms:011x}_{runtime.current().token(10)}"


def tagged_file_id(token: str, number: int) -> str:
    """A file id of one task of a distributed job (``k<ms>_<token 8 hex><number 12 hex>``):
    a kstore file id (GC reads its time) that carries the job's ``token``, so that a failed
    job finds and deletes every file its tasks wrote
    (:func:`kstore.blocks.write.delete_by_token`), and the task's ``number``.

    >>> from kstore.core import runtime
    >>> with runtime.installed(runtime.FixedRuntime(1_700_000_000.0)):
    ...     tagged_file_id("0a1b2c3d", (5 << 20) | 3)
    'k18bcfe56800_0a1b2c3d000000500003'
    """
    ms = int(runtime.current().time() * 1000)
    return f"k{ms:011x}_{token[:8]:0>8}{number:012x}"


_ID_TIME_RE = re.compile(r"k([0-9a-f]{11})_[0-9a-f]{20}")


def file_id_time(key: str) -> float | None:
    """Epoch seconds encoded in a kstore file id inside ``key``; None for other ids."""
    ms = file_id_ms(key)
    return ms / 1000 if ms is not None else None


def file_id_ms(key: str) -> int | None:
    """Epoch milliseconds encoded in a kstore file id inside ``key``; None for other ids.

    >>> file_id_ms("ds/table/p=1/k18bcfe56800_00000000000000000000.parquet")
    1700000000000
    """
    found = _ID_TIME_RE.findall(key)
    return int(found[-1], 16) if found else None


def build_label(partition_values: Sequence[tuple[str, str]], file_id: str) -> str:
    """Partition label ``<col>=<quoted val>/.../<file_id>`` from already-stringified values."""
    if not isinstance(file_id, str) or not _FILE_ID_RE.fullmatch(file_id) or file_id in (".", ".."):
        raise InvalidKeyError(f"invalid partition file id {short_repr(file_id)}")
    parts = [
        _check_component(f"{quote(col)}={quote(val)}",
                         f"partition value {short_repr(val)} of column {short_repr(col)}")
        for col, val in partition_values
    ]
    parts.append(_check_component(file_id + DATA_SUFFIX, f"file id {short_repr(file_id)}")[: -len(DATA_SUFFIX)])
    return "/".join(parts)


def check_key_columns(dataset_uuid: str, *, partition_on: Sequence[str], index_columns: Sequence[str]) -> None:
    """Raise :class:`~kstore.errors.LimitExceededError` (before a write) when a partition or
    index column's quoted name cannot stand in a key component (:data:`MAX_NAME_BYTES`)."""
    for col in partition_on:
        _check_component(f"{quote(col)}=", f"dataset {dataset_uuid!r}: partition column {short_repr(col)}")
    for col in index_columns:
        index_key(dataset_uuid, col, "0000-00-00T00:00:00.000000")


def parse_label(label: str, partition_keys: Sequence[str]) -> tuple[tuple[str, ...], str]:
    """Split a label into decoded partition value strings (in ``partition_keys`` order) and id.

    Tolerates kartothek's unescaped ``/`` bug: a component without ``=`` that is not the last
    one continues the previous value (``region=a%20b/c%3Dd%25/x`` -> ``'a b/c=d%'``). Since
    kartothek escapes ``=``, a literal ``=`` always starts a new ``col=value`` pair.

    >>> parse_label("region=a%20b/c%3Dd%25/f9c6", ["region"])
    (('a b/c=d%',), 'f9c6')
    """
    components = label.split("/")
    if len(components) < 1 or not components[-1]:
        raise CorruptMetadataError(f"partition label {label!r} has no file id")
    file_id = components[-1]
    values: list[str] = []
    cols: list[str] = []
    for comp in components[:-1]:
        if "=" in comp:
            col, _, val = comp.partition("=")
            cols.append(unquote(col))
            values.append(unquote(val))
        elif values:
            values[-1] = values[-1] + "/" + unquote(comp)
        else:
            raise CorruptMetadataError(
                f"partition label {label!r}: component {comp!r} is no '<column>=<value>' pair"
            )
    if cols != list(partition_keys):
        raise CorruptMetadataError(
            f"partition label {label!r} encodes columns {cols}, expected partition keys "
            f"{list(partition_keys)}"
        )
    return tuple(values), file_id
