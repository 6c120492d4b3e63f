"""The kstore error tree.

Every error kstore raises on purpose is a :class:`KstoreError`. Where a builtin exception
fits as well (``ValueError`` for bad arguments, ``KeyError`` for missing keys), the kstore
class also derives from it, so ``except ValueError`` keeps working for callers who do not
know kstore.

Messages speak the user's language: they name the dataset, column, value, key or version
at fault, e.g. ``"dataset 'sales': column 'day' is date32; cannot compare with 'x' (str)"``.
"""

from __future__ import annotations

import reprlib
from collections.abc import Sequence
from typing import Any

__all__ = [
    "KstoreError",
    "DatasetNotFoundError",
    "DatasetExistsError",
    "SchemaMismatchError",
    "UnsupportedTypeError",
    "InvalidPredicateError",
    "PredicateError",
    "InvalidKeyError",
    "KeyNotFoundError",
    "CorruptMetadataError",
    "ColumnNotFoundError",
    "InvalidArgumentError",
    "CommitConflictError",
    "CommitStateUnknownError",
    "VersionNotFoundError",
    "StoreError",
    "UnsafeStoreWarning",
    "StoreNotFoundError",
    "LimitExceededError",
]


class KstoreError(Exception):
    """Root of every error kstore raises on purpose.

    Catch it to handle every kstore failure at once; catch a subclass (or the builtin it
    also derives from) for one kind.

    Examples
    --------
    >>> import kstore
    >>> from kstore.io import MemoryStore
    >>> try:
    ...     kstore.read_table(MemoryStore(), "missing")
    ... except kstore.KstoreError as exc:
    ...     print(type(exc).__name__, isinstance(exc, KeyError))
    DatasetNotFoundError True
    """


class StoreError(KstoreError):
    """A store could not be opened or did not behave as the store protocol requires."""


def failed_deletes_error(failed: Sequence[tuple[str, Any]], where: str = "") -> StoreError:
    """One :class:`StoreError` for keys that could not be deleted (names up to 10 of them).

    Parameters
    ----------
    failed
        ``(key, reason)`` pairs.
    where
        Text appended after the count (e.g. ``" from s3://bucket"``).

    Returns
    -------
    StoreError
        The error to raise.

    Examples
    --------
    >>> str(failed_deletes_error([("a", "denied")]))
    "could not delete 1 key(s): 'a' (denied)"
    """
    shown = ", ".join(f"{key!r} ({why})" for key, why in failed[:10])
    more = f" and {len(failed) - 10} more" if len(failed) > 10 else ""
    return StoreError(f"could not delete {len(failed)} key(s){where}: {shown}{more}")


class StoreNotFoundError(StoreError, FileNotFoundError):
    """A store to read from does not exist (a local directory that is not there, a missing bucket).

    Reads never create a store; writes create a local directory store's root.
    """


class KeyNotFoundError(KstoreError, KeyError):
    """A key the caller asked for is not in the store."""

    def __str__(self) -> str:  # KeyError quotes its message; keep ours readable
        return str(self.args[0]) if self.args else ""


class InvalidKeyError(KstoreError, ValueError):
    """A key, dataset uuid, table name or label is not allowed (it could escape its prefix)."""


class DatasetNotFoundError(KstoreError, KeyError):
    """No dataset with this uuid exists in the store."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class DatasetExistsError(KstoreError, ValueError):
    """A create was asked for a dataset that exists (pass ``mode="overwrite"`` or append)."""


class CorruptMetadataError(KstoreError, ValueError):
    """A metadata, schema or index file could not be decoded or breaks the format."""


class SchemaMismatchError(KstoreError, ValueError):
    """New data does not fit the dataset's schema (names the column and both types)."""


class UnsupportedTypeError(KstoreError, TypeError):
    """A column has an Arrow/pandas type kstore cannot store or index."""


class ColumnNotFoundError(KstoreError, KeyError):
    """A column named in ``columns``, ``partition_on``, an index or a predicate does not exist."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class InvalidArgumentError(KstoreError, ValueError):
    """An argument has a value outside what the function accepts."""


class InvalidPredicateError(KstoreError, ValueError):
    """A predicate is malformed, names an unknown column or compares with an unusable value."""


#: Issue texts call it PredicateError; both names are the same class.
PredicateError = InvalidPredicateError


class LimitExceededError(KstoreError, ValueError):
    """An input or a stored file is beyond one of kstore's hard limits (size, nesting, length).

    The limits protect memory, the stack and the file system from hostile or damaged input;
    each is a module constant (``kstore.core.serialize.MAX_METADATA_BYTES``, ...) listed in
    ``docs/architecture.md``. The message names the dataset, column or key, the value and the limit.
    """


class CommitConflictError(KstoreError):
    """Another writer committed a change that conflicts with this one; nothing was committed."""


class CommitStateUnknownError(KstoreError):
    """The store failed after the commit point, or while kstore checked whether it was reached.

    Nothing of the write is deleted, so the write is never half-done. ``committed`` says
    what kstore knows: ``True`` — the version IS committed (its log entry is claimed; only
    publishing the main metadata file failed, which kstore readers do not need and the next
    commit repairs); ``None`` — the store failed while the claim was confirmed, so the
    version may be committed: ``history()``, or re-running the write with the same ``txn``
    (idempotent), tells.
    """

    def __init__(self, message: str, *, committed: bool | None = None, version: int | None = None) -> None:
        super().__init__(message)
        self.committed = committed
        self.version = version


class VersionNotFoundError(KstoreError, KeyError):
    """The requested dataset version does not exist or is no longer retained."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class UnsafeStoreWarning(UserWarning):
    """The store cannot create a key atomically across processes (check-then-put).

    One writer process at a time is safe; two processes committing to one dataset through
    such a store could both claim the same version. Use a local directory, S3 or memory
    store for concurrent writers.
    """


_REPR = reprlib.Repr()
_REPR.maxlevel = 3
_REPR.maxstring = _REPR.maxother = 80
_REPR.maxlong = 40
_REPR.maxlist = _REPR.maxtuple = 8
_REPR.maxdict = _REPR.maxset = _REPR.maxfrozenset = 6


def short_repr(value: Any) -> str:
    """``repr`` of a user value for an error message: bounded in length and nesting depth.

    A 3,000-level nested list or a 1 GB string must not turn an error message into a
    ``RecursionError`` or a huge string.

    >>> short_repr([[[[["deep"]]]]])
    '[[[[...]]]]'
    >>> len(short_repr("x" * 10_000)) <= 80
    True
    """
    try:
        return _REPR.repr(value)
    except Exception:  # a hostile __repr__
        return f"<{type(value).__name__}>"
