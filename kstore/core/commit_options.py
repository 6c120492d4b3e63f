"""One options object for every commit: idempotence, retries, user metadata, commit info.

Every typed operation of a :class:`~kstore.blocks.snapshot.Snapshot` (append, overwrite
partitions, delete partitions or rows, build or drop indices, compaction) takes a
:class:`CommitOptions` (or a dict of its fields), so the same four knobs mean the same thing
on every write.

Pure (no I/O).

Examples
--------
>>> opts = CommitOptions.of({"txn": ("nightly", 3), "info": {"job": "etl-42"}})
>>> opts.txn, dict(opts.info or {}), opts.max_attempts
(('nightly', 3), {'job': 'etl-42'}, 50)
>>> CommitOptions.of({"retries": 3})
Traceback (most recent call last):
...
kstore.errors.InvalidArgumentError: unknown commit option(s) ['retries']; the options are ['txn', 'max_attempts', 'metadata', 'info']
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Any

from kstore.core import serialize
from kstore.core.arguments import as_attempts, as_txn
from kstore.errors import InvalidArgumentError

__all__ = ["CommitOptions", "DEFAULT_MAX_ATTEMPTS", "MAX_INFO_BYTES", "plain"]

#: Attempts a commit makes when other writers keep committing first (each re-lists the log).
DEFAULT_MAX_ATTEMPTS = 50
#: The JSON-encoded ``info`` of one commit, at most (it is repeated in history summaries).
MAX_INFO_BYTES = 16 * 1024


@dataclass(frozen=True, slots=True)
class CommitOptions:
    """How one commit is made (immutable; build it with :meth:`of` to validate a dict).

    Attributes
    ----------
    txn:
        ``(app_id, version)``: the commit is skipped when the dataset already records this
        transaction (or a later version of it), so a re-run of a job that committed
        changes nothing (Delta's ``txn`` action).
    max_attempts:
        How many times the commit is tried when other writers commit first (default 50);
        after that it fails with :class:`~kstore.errors.CommitConflictError`.
    metadata:
        User metadata merged into the dataset's (keys given replace theirs).
    info:
        A small JSON dict recorded with this version only (at most 16 KiB encoded), shown
        by ``history()``: Delta's ``commitInfo``, Iceberg's snapshot summary.

    Examples
    --------
    >>> import pandas as pd, kstore
    >>> _ = kstore.store_dataset("memory://commit-opts", "d", pd.DataFrame({"x": [1]}))
    >>> snap = kstore.open_dataset("memory://commit-opts", "d")
    >>> opts = kstore.CommitOptions(txn=("loader", 1), info={"rows": 1})
    >>> snap.append(pd.DataFrame({"x": [2]}), options=opts).version
    1
    >>> snap.append(pd.DataFrame({"x": [2]}), options=opts).version  # a re-run: nothing new
    1
    """

    txn: tuple[str, int] | None = None
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    metadata: Mapping[str, Any] | None = None
    info: Mapping[str, Any] | None = None

    @classmethod
    def of(cls, value: CommitOptions | Mapping[str, Any] | None = None) -> CommitOptions:
        """Validated options from a :class:`CommitOptions`, a dict of its fields, or None.

        Parameters
        ----------
        value
            The options; None gives the defaults. Unknown keys, a malformed ``txn``, a
            ``max_attempts`` outside 1..10,000, and ``metadata``/``info`` that are not JSON
            dicts with str keys are :class:`~kstore.errors.InvalidArgumentError`.

        Examples
        --------
        >>> CommitOptions.of(None) == CommitOptions()
        True
        >>> CommitOptions.of({"max_attempts": 3}).max_attempts
        3
        """
        if value is None:
            return cls()
        if isinstance(value, CommitOptions):
            raw = {f.name: getattr(value, f.name) for f in fields(cls)}
        elif isinstance(value, Mapping):
            names = [f.name for f in fields(cls)]
            unknown = [k for k in value if k not in names]
            if unknown:
                raise InvalidArgumentError(f"unknown commit option(s) {unknown}; the options are {names}")
            raw = dict(value)
        else:
            raise InvalidArgumentError(
                f"options must be CommitOptions or a dict, got {type(value).__name__}")
        return cls(
            txn=as_txn(raw.get("txn")),
            max_attempts=as_attempts(raw.get("max_attempts", DEFAULT_MAX_ATTEMPTS)),
            metadata=_json_dict(raw.get("metadata"), "metadata"),
            info=_json_dict(raw.get("info"), "info", MAX_INFO_BYTES),
        )


def plain(value: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A plain ``dict`` copy of an option's mapping (None stays None): what the commit
    serializes (options hold read-only mappings).

    >>> plain(CommitOptions.of({"info": {"a": 1}}).info), plain(None)
    ({'a': 1}, None)
    """
    return None if value is None else dict(value)


def _json_dict(value: Any, what: str, max_bytes: int | None = None) -> Mapping[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise InvalidArgumentError(f"commit option {what} must be a dict with str keys, got {value!r:.200}")
    serialize.check_encodable(dict(value), f"commit option {what}", ("json",))
    try:  # JSON values only: nothing is turned into its str() on the way (a set, a datetime)
        size = len(json.dumps(dict(value), allow_nan=False, separators=(",", ":")).encode("utf-8"))
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError(f"commit option {what} must hold JSON values only ({exc})") from exc
    if max_bytes is not None:
        if size > max_bytes:
            raise InvalidArgumentError(
                f"commit option {what} is {size:,} bytes encoded; at most {max_bytes:,} are allowed")
    return MappingProxyType(dict(value))
