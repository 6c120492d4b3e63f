"""Metadata dicts <-> bytes: JSON, and msgpack in a zstd frame (content size in the header).

Hard limits (hostile or damaged files fail with :class:`~kstore.errors.LimitExceededError`
before the work, never with a ``MemoryError`` or ``RecursionError``):

- :data:`MAX_METADATA_BYTES`: a metadata file (JSON, or msgpack after decompression) holds
  at most 256 MiB. A zstd frame that declares more is refused on its header; a frame without
  a size is decompressed in steps and abandoned as soon as the output passes the limit.
- :data:`MAX_METADATA_DEPTH`: user metadata and top-level keys kstore does not know nest at
  most 32 levels of dicts/lists (checked by :func:`check_nesting`); a file nested beyond what
  the parser follows is refused while parsing.

>>> raw = {"dataset_metadata_version": 4, "dataset_uuid": "x"}
>>> loads(dumps(raw, "msgpack.zstd"), "msgpack.zstd") == raw
True
>>> loads(b"{not json", "json", what="dataset 'x'")
Traceback (most recent call last):
...
kstore.errors.CorruptMetadataError: dataset 'x': metadata is not valid json (JSONDecodeError)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import msgpack
import zstandard

from kstore.core.naming import MetadataFormat
from kstore.errors import CorruptMetadataError, InvalidArgumentError, LimitExceededError

__all__ = ["dumps", "loads", "check_nesting", "check_encodable", "MAX_METADATA_BYTES", "MAX_METADATA_DEPTH"]

#: A metadata file (JSON bytes, or msgpack after zstd decompression) is at most this large:
#: 256 MiB, room for about a million partitions. Larger ones are refused as hostile.
MAX_METADATA_BYTES = 256 * 1024**2

#: User metadata and unknown top-level keys of a metadata file nest at most this many
#: levels of dicts and lists (the recursive code that copies and writes them stays safe).
MAX_METADATA_DEPTH = 32

#: Compressed bytes fed to the decompressor per step. zstd expands a block at most to
#: 128 KiB from 3 bytes, so one step emits at most ~43 MiB: the size limit is checked
#: after every step, long before a bomb's output fills memory.
_ZSTD_STEP = 1024


def _too_large(what: str, size: str) -> LimitExceededError:
    return LimitExceededError(
        f"{what}: metadata is larger than the limit of {MAX_METADATA_BYTES} bytes "
        f"(MAX_METADATA_BYTES; {size}); refusing to read it"
    )


def _too_deep(what: str) -> LimitExceededError:
    return LimitExceededError(
        f"{what}: metadata nests dicts/lists deeper than kstore follows "
        f"(user metadata may nest {MAX_METADATA_DEPTH} levels, MAX_METADATA_DEPTH)"
    )


def dumps(raw: dict[str, Any], fmt: MetadataFormat = "json") -> bytes:
    """Encode a metadata dict in ``fmt``."""
    if not isinstance(fmt, str):
        raise InvalidArgumentError(f"unknown metadata format {fmt!r}; use 'json' or 'msgpack.zstd'")
    try:
        if fmt == "json":
            return _json_bytes(raw)
        if fmt == "msgpack.zstd":
            packed = msgpack.packb(raw, use_bin_type=True, default=_msgpack_default)
            # the frame's checksum: a flipped bit anywhere is a decode error, never other metadata
            return zstandard.ZstdCompressor(level=3, write_content_size=True, write_checksum=True).compress(packed)
    except RecursionError as exc:
        raise _too_deep("cannot write metadata") from exc
    except ValueError as exc:
        if "recursion limit" in str(exc):  # msgpack's own nesting limit
            raise _too_deep("cannot write metadata") from exc
        raise
    raise InvalidArgumentError(f"unknown metadata format {fmt!r}; use 'json' or 'msgpack.zstd'")


#: strings from this long that need no JSON escaping (a log entry's base64 Arrow IPC) are
#: spliced into the encoded document instead of passing through the encoder's escaping scan
_SPLICE_FROM = 1 << 20


def _json_bytes(raw: dict[str, Any]) -> bytes:
    """``raw`` as compact JSON (UTF-8), the bytes ``json.dumps`` gives. Long strings that
    need no escaping, in dicts up to three levels down (the ``add`` and ``index`` tables of
    a log entry: 15 MB of base64 for 200 files with 2.8M index values), are put in after
    encoding the rest: the encoder's scan of them cost ~60 ms for 15 MB.

    >>> big = "QUJD" * (1 << 19)
    >>> _json_bytes({"a": [1, "x"], "actions": {"add": big, "q": 'say "hi"'}}) == json.dumps(
    ...     {"a": [1, "x"], "actions": {"add": big, "q": 'say "hi"'}}, ensure_ascii=False,
    ...     separators=(",", ":")).encode("utf-8")
    True
    """
    spliced: dict[str, str] = {}
    doc = _with_placeholders(raw, spliced, 3) if _has_long_string(raw, 3) else raw
    text = json.dumps(doc, ensure_ascii=False, separators=(",", ":"), default=str)
    for token, value in spliced.items():
        text = text.replace(json.dumps(token), '"' + value + '"', 1)
    return text.encode("utf-8")


#: the ASCII characters JSON writes as themselves: printable, not a quote or a backslash
_PLAIN_ASCII = bytes(c for c in range(0x20, 0x7F) if c not in b'"\\')


def _plain(value: str) -> bool:
    r"""Whether JSON encodes ``value`` as itself in quotes (ASCII, printable, no quote or
    backslash): one pass deleting those bytes leaves nothing (15 MB: 16 ms; ``isprintable``
    took 33).

    >>> _plain("QUJD+/="), _plain('a"b'), _plain("a\\b"), _plain("a\x7fb"), _plain("é")
    (True, False, False, False, False)
    """
    return value.isascii() and not value.encode("ascii").translate(None, _PLAIN_ASCII)


def _has_long_string(d: Mapping[str, Any], depth: int) -> bool:
    return any((isinstance(v, str) and len(v) >= _SPLICE_FROM)
               or (depth > 1 and isinstance(v, dict) and _has_long_string(v, depth - 1)) for v in d.values())


def _with_placeholders(d: Mapping[str, Any], spliced: dict[str, str], depth: int) -> dict[str, Any]:
    import secrets

    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, str) and len(v) >= _SPLICE_FROM and _plain(v):
            token = f"\x00kstore-splice-{secrets.token_hex(12)}\x00"  # random: no other value encodes to it
            spliced[token] = v
            out[k] = token
        elif depth > 1 and isinstance(v, dict):
            out[k] = _with_placeholders(v, spliced, depth - 1)
        else:
            out[k] = v
    return out


def _msgpack_default(obj: Any) -> Any:
    if isinstance(obj, int):
        raise InvalidArgumentError(f"metadata value {obj} does not fit msgpack's 64-bit integers")
    return str(obj)


def _unzstd(data: bytes, what: str) -> bytes:
    """Decompress every zstd frame in ``data``, never past :data:`MAX_METADATA_BYTES`."""
    limit = MAX_METADATA_BYTES
    view = memoryview(data)
    dctx = zstandard.ZstdDecompressor()
    out: list[bytes] = []
    total = pos = 0
    while True:  # one frame per round (zstd allows concatenated frames)
        declared = zstandard.frame_content_size(view[pos:])  # -1: not in the header
        if declared > limit - total:
            raise _too_large(what, f"a zstd frame declares {declared} bytes")
        dobj = dctx.decompressobj()
        while not dobj.eof:
            if pos >= len(view):
                raise CorruptMetadataError(f"{what}: metadata is not valid msgpack.zstd (truncated zstd frame)")
            piece = dobj.decompress(view[pos : pos + _ZSTD_STEP])
            pos += _ZSTD_STEP
            total += len(piece)
            if total > limit:
                raise _too_large(what, "the zstd frame decompresses to more")
            out.append(piece)
        pos = min(pos, len(view)) - len(dobj.unused_data)
        if pos >= len(view):
            return b"".join(out)


def loads(data: bytes, fmt: MetadataFormat = "json", *, what: str = "dataset") -> dict[str, Any]:
    """Decode metadata bytes; anything undecodable is a :class:`CorruptMetadataError`.

    Input beyond :data:`MAX_METADATA_BYTES` (before or after decompression) or nested beyond
    what the parser follows is a :class:`~kstore.errors.LimitExceededError`.
    """
    if not isinstance(fmt, str) or fmt not in ("json", "msgpack.zstd"):
        raise InvalidArgumentError(f"unknown metadata format {fmt!r}")
    try:
        if fmt == "json":
            if len(data) > MAX_METADATA_BYTES:
                raise _too_large(what, f"the file has {len(data)} bytes")
            out = json.loads(data.decode("utf-8"))
        else:
            out = msgpack.unpackb(_unzstd(data, what), raw=False, strict_map_key=False)
    except (RecursionError, msgpack.StackError) as exc:
        raise _too_deep(what) from exc
    except LimitExceededError:
        raise
    except (ValueError, TypeError, zstandard.ZstdError, msgpack.UnpackException, UnicodeDecodeError) as exc:
        raise CorruptMetadataError(f"{what}: metadata is not valid {fmt} ({type(exc).__name__})") from exc
    if not isinstance(out, dict):
        raise CorruptMetadataError(f"{what}: metadata is not a mapping")
    return out


def check_nesting(value: Any, what: str, limit: int = MAX_METADATA_DEPTH) -> None:
    """Raise :class:`~kstore.errors.LimitExceededError` if ``value`` nests dicts/lists (and
    tuples) more than ``limit`` levels deep. Iterative: safe for any depth.

    >>> check_nesting({"a": [1, {"b": 2}]}, "metadata", limit=3)
    >>> check_nesting([[[[]]]], "dataset 'x': metadata", limit=3)
    Traceback (most recent call last):
    ...
    kstore.errors.LimitExceededError: dataset 'x': metadata nests dicts/lists more than 3 levels deep (MAX_METADATA_DEPTH)
    """
    if not isinstance(value, _CONTAINERS):
        return
    stack = [(value, 1)]
    while stack:
        obj, depth = stack.pop()
        for child in obj.values() if isinstance(obj, Mapping) else obj:
            if isinstance(child, _CONTAINERS):
                if depth + 1 > limit:
                    raise LimitExceededError(
                        f"{what} nests dicts/lists more than {limit} levels deep (MAX_METADATA_DEPTH)"
                    )
                stack.append((child, depth + 1))


_CONTAINERS = (Mapping, list, tuple)


def check_encodable(value: Any, what: str, formats: tuple[MetadataFormat, ...] = ("json",)) -> None:
    """Raise :class:`~kstore.errors.InvalidArgumentError` unless ``value`` can be written in
    every format of ``formats`` (dict keys that are not strings, ints beyond 64 bits in msgpack):
    a write checks its user metadata with this before its first file.

    >>> check_encodable({"a": [1, 2]}, "metadata", ("json", "msgpack.zstd"))
    >>> check_encodable({(1, 2): "x"}, "metadata")
    Traceback (most recent call last):
    ...
    kstore.errors.InvalidArgumentError: metadata cannot be written as json (keys must be str, int, float, bool or None, not tuple)
    """
    check_nesting(value, what)
    for fmt in dict.fromkeys(formats):
        try:
            dumps({"value": value}, fmt)
        except LimitExceededError:
            raise
        except (TypeError, ValueError, OverflowError) as exc:
            raise InvalidArgumentError(f"{what} cannot be written as {fmt} ({exc})") from exc
