"""Metadata dicts <-> bytes: JSON, and msgpack in a zstd frame (content size in the header).

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
from typing import Any

import msgpack
import zstandard

from kstore.core.naming import MetadataFormat
from kstore.errors import CorruptMetadataError, InvalidArgumentError

__all__ = ["dumps", "loads", "MAX_METADATA_BYTES"]

#: Refuse to decompress metadata beyond this size (a corrupt or hostile frame).
MAX_METADATA_BYTES = 2 * 1024**3


def dumps(raw: dict[str, Any], fmt: MetadataFormat = "json") -> bytes:
    """Encode a metadata dict in ``fmt``."""
    if fmt == "json":
        return json.dumps(raw, ensure_ascii=False, separators=(",", ":"), default=str).encode("utf-8")
    if fmt == "msgpack.zstd":
        packed = msgpack.packb(raw, use_bin_type=True, default=_msgpack_default)
        return zstandard.ZstdCompressor(level=3, write_content_size=True).compress(packed)
    raise InvalidArgumentError(f"unknown metadata format {fmt!r}; use 'json' or 'msgpack.zstd'")


def _msgpack_default(obj: Any) -> Any:
    if isinstance(obj, int):
        raise InvalidArgumentError(f"metadata value {obj} does not fit msgpack's 64-bit integers")
    return str(obj)


def loads(data: bytes, fmt: MetadataFormat = "json", *, what: str = "dataset") -> dict[str, Any]:
    """Decode metadata bytes; anything undecodable is a :class:`CorruptMetadataError`."""
    if fmt not in ("json", "msgpack.zstd"):
        raise InvalidArgumentError(f"unknown metadata format {fmt!r}")
    try:
        if fmt == "json":
            out = json.loads(data.decode("utf-8"))
        elif fmt == "msgpack.zstd":
            dctx = zstandard.ZstdDecompressor()
            try:
                unpacked = dctx.decompress(data, max_output_size=MAX_METADATA_BYTES)
            except zstandard.ZstdError:
                # frames without content size in the header: stream them
                unpacked = dctx.decompressobj().decompress(data)
            out = msgpack.unpackb(unpacked, raw=False, strict_map_key=False)
    except (ValueError, TypeError, zstandard.ZstdError, msgpack.UnpackException, UnicodeDecodeError) as exc:
        raise CorruptMetadataError(f"{what}: metadata is not valid {fmt} ({type(exc).__name__})") from exc
    if not isinstance(out, dict):
        raise CorruptMetadataError(f"{what}: metadata is not a mapping")
    return out
