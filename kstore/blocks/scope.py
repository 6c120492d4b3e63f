"""Delete scopes: ``[{partition column: value}, ...]`` -> the partition labels they cover."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from kstore.core import naming
from kstore.core.metadata import DatasetMetadata
from kstore.core.types import coerce_literal, decode_partition_value
from kstore.errors import InvalidArgumentError

__all__ = ["resolve_scope", "scope_from_files"]


def resolve_scope(meta: DatasetMetadata, schema: pa.Schema, scopes: Sequence[Mapping[str, Any]]) -> set[str]:
    """Labels whose partition values match every entry of at least one scope dict."""
    if not scopes:
        return set()
    for scope in scopes:
        if not isinstance(scope, Mapping) or not scope:
            raise InvalidArgumentError(f"dataset {meta.uuid!r}: each delete scope must be a non-empty dict, got {scope!r}")
        bad = [c for c in scope if c not in meta.partition_keys]
        if bad:
            raise InvalidArgumentError(
                f"dataset {meta.uuid!r}: delete scope names {bad}, which are not partition columns "
                f"{list(meta.partition_keys)}; use delete_rows for other columns"
            )
    typed = [
        {c: (decode_partition_value(v.text, schema.field(c).type, c) if isinstance(v, _Encoded)
             else coerce_literal(v, schema.field(c).type, c, meta.uuid)) for c, v in scope.items()}
        for scope in scopes
    ]
    pos = {c: i for i, c in enumerate(meta.partition_keys)}
    out = set()
    cache: dict[tuple[int, str], Any] = {}
    for label in meta.partitions:
        values, _ = naming.parse_label(label, meta.partition_keys)
        for scope in typed:
            ok = True
            for c, v in scope.items():
                k = (pos[c], values[pos[c]])
                if k not in cache:
                    cache[k] = decode_partition_value(values[pos[c]], schema.field(c).type, c)
                if cache[k] != v:
                    ok = False
                    break
            if ok:
                out.add(label)
                break
    return out


def scope_from_files(files: Sequence[Any], partition_on: Sequence[str]) -> list[dict[str, Any]]:
    """One scope per distinct partition value the written files cover (values as strings)."""
    if not partition_on:
        raise InvalidArgumentError("mode='overwrite_partitions' needs a partitioned dataset")
    seen: dict[tuple[str, ...], None] = {}
    for f in files:
        values, _ = naming.parse_label(f.label, partition_on)
        seen[values] = None
    return [{c: _Encoded(x) for c, x in zip(partition_on, v)} for v in seen]


class _Encoded:
    """A partition value as decoded from a key (a string to parse with the column type)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text
