"""Argument checks every driver shares: loose user input -> one typed value, or a clear error.

Pure (no I/O). Each function raises :class:`~kstore.errors.InvalidArgumentError` (a
``ValueError``) naming the argument and the value it got, instead of the ``TypeError`` or
``AttributeError`` that the value would cause deep inside.

>>> as_columns("day", "partition_on"), as_columns(["a", "b"], "secondary_indices")
(('day',), ('a', 'b'))
>>> as_columns(5, "partition_on")
Traceback (most recent call last):
...
kstore.errors.InvalidArgumentError: partition_on must be a column name or a list of column names, got 5 (int)
"""

from __future__ import annotations

import datetime as dt
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

from kstore.errors import InvalidArgumentError, short_repr

if TYPE_CHECKING:
    from kstore.core.predicates import Predicates

#: The ``as_of`` argument (time travel): a ``datetime`` (``pandas.Timestamp`` too; naive = UTC),
#: ISO 8601 text, or None for the newest version.
AsOf: TypeAlias = dt.datetime | str | None

__all__ = ["renamed", "AsOf", "as_choice", "as_columns", "as_column_list", "as_bool", "as_version", "as_timestamp", "as_delete_scope", "as_txn",
           "as_attempts", "as_workers", "as_count", "check_text", "predicates_or_filters", "DataKind", "store_uuid_data",
           "looks_like_predicates"]


def _bad(what: str, expected: str, value: Any) -> InvalidArgumentError:
    return InvalidArgumentError(f"{what} must be {expected}, got {short_repr(value)} ({type(value).__name__})")


_Choice = TypeVar("_Choice", bound=str)


def as_choice(value: Any, choices: tuple[_Choice, ...], what: str) -> _Choice:
    """One of a closed set of modes (``Literal`` options); anything else is an error.

    >>> as_choice("merge", ("strict", "merge"), "schema_mode")
    'merge'
    """
    for choice in choices:
        if isinstance(value, str) and value == choice:
            return choice
    raise _bad(what, "one of " + ", ".join(map(repr, choices)), value)


def as_columns(value: Any, what: str) -> tuple[str, ...]:
    """A column name or a list of names as a tuple; None is no column."""
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    return _names(value, what, "a column name or a list of column names")


def as_column_list(value: Any, what: str = "columns") -> tuple[str, ...] | None:
    """A list of column names (``columns=``); None means every column. A bare string is an
    error: ``columns="ab"`` is more likely a mistake than the column ``"ab"``."""
    if value is None:
        return None
    if isinstance(value, str):
        raise _bad(what, f"a list of column names (e.g. [{value!r}])", value)
    return _names(value, what, "a list of column names")


def _names(value: Any, what: str, expected: str) -> tuple[str, ...]:
    if isinstance(value, (bytes, bytearray, Mapping)) or not isinstance(value, Iterable):
        raise _bad(what, expected, value)
    names = tuple(value)
    bad = [v for v in names if not isinstance(v, str)]
    if bad:
        raise InvalidArgumentError(f"{what} must be {expected}; {short_repr(bad[0])} is no column name")
    for v in names:  # (a lone surrogate: an InvalidArgumentError, not pyarrow's UnicodeEncodeError)
        check_text(v, f"{what}: a column name")
    return names


def as_bool(value: Any, what: str) -> bool:
    """``True``/``False`` (numpy bools too); a string such as ``"no"`` is an error, not truthy."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return bool(value)
    raise _bad(what, "True or False", value)


def as_version(value: Any, what: str = "version") -> int | None:
    """A version number (an int >= 0, not a bool) or None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _bad(what, "a version number (an int >= 0)", value)
    return int(value)


def check_text(value: str, what: str) -> str:
    """``value`` unchanged if it can be written as UTF-8 (what every stored name, key and
    option becomes); a lone surrogate (``"\\ud800"``, e.g. from ``os.fsdecode`` of a bad file
    name) is an :class:`~kstore.errors.InvalidArgumentError` naming ``what``, never a raw
    ``UnicodeEncodeError`` from deep inside a write.

    The message shows where the bad character is, not the text (it may be a credential).

    >>> check_text("nightly-load", "txn app_id")
    'nightly-load'
    >>> check_text("a\\ud800b", "txn app_id")
    Traceback (most recent call last):
    ...
    kstore.errors.InvalidArgumentError: txn app_id is not valid Unicode text: character 2 of 3 is a lone surrogate ('\\ud800'); only text that can be encoded as UTF-8 can be stored
    """
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgumentError(
            f"{what} is not valid Unicode text: character {exc.start + 1} of {len(value)} is a lone surrogate "
            f"({value[exc.start]!r}); only text that can be encoded as UTF-8 can be stored") from None
    return value


def as_txn(value: Any, what: str = "txn") -> tuple[str, int] | None:
    """An application transaction ``(app_id, version)`` (a str and an int in [0, 2**63)) or None.

    >>> as_txn(("nightly-load", 7))
    ('nightly-load', 7)
    >>> as_txn(["nightly-load", 7])
    Traceback (most recent call last):
    ...
    kstore.errors.InvalidArgumentError: txn must be a tuple (app_id: str, version: int), got ['nightly-load', 7]
    """
    if value is None:
        return None
    if not (isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str)
            and isinstance(value[1], int) and not isinstance(value[1], bool) and 0 <= value[1] < 2**63):
        raise InvalidArgumentError(f"{what} must be a tuple (app_id: str, version: int), got {short_repr(value)}")
    return (check_text(value[0], f"{what} app_id"), int(value[1]))


def as_attempts(value: Any, what: str = "max_attempts") -> int:
    """How many times a commit is tried (an int from 1 to 10,000)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 10_000:
        raise _bad(what, "an int from 1 to 10000", value)
    return int(value)


def as_count(value: Any, what: str, minimum: int = 1) -> int:
    """A whole number ``>= minimum`` (numpy ints too); a bool, float or text is an error.

    >>> as_count(3, "min_files", 2)
    3
    >>> as_count(2.5, "min_files", 2)
    Traceback (most recent call last):
    ...
    kstore.errors.InvalidArgumentError: min_files must be an int >= 2, got 2.5 (float)
    """
    if isinstance(value, bool) or type(value).__name__ == "bool_" or not _is_int(value) or value < minimum:
        raise _bad(what, f"an int >= {minimum}", value)
    return int(value)


def as_workers(value: Any, what: str = "max_workers") -> int | None:
    """How many threads (or processes) a pool may use: None (sized from the machine) or a
    positive int; ``0``, ``-3``, ``2.5``, ``"2"`` and ``True`` are errors.

    >>> as_workers(None), as_workers(4)
    (None, 4)
    >>> as_workers("2")
    Traceback (most recent call last):
    ...
    kstore.errors.InvalidArgumentError: max_workers must be None or an int >= 1, got '2' (str)
    """
    if value is None:
        return None
    if isinstance(value, bool) or type(value).__name__ == "bool_" or not _is_int(value) or value < 1:
        raise _bad(what, "None or an int >= 1", value)
    return int(value)


def _is_int(value: Any) -> bool:
    """An int or a numpy integer (``operator.index`` works and it is no bool)."""
    if isinstance(value, int):
        return True
    return type(value).__module__ == "numpy" and hasattr(value, "__index__") and "int" in type(value).__name__


def as_timestamp(value: Any, what: str = "as_of") -> dt.datetime:
    """A point in time: a ``datetime`` / ``pandas.Timestamp`` or ISO 8601 text (naive = UTC).

    >>> as_timestamp("2024-01-02T03:04:05+00:00")
    datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
    """
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError as exc:
            raise _bad(what, "a datetime or an ISO 8601 timestamp", value) from exc
    if not isinstance(value, dt.datetime) or value != value:  # NaT is a datetime that is not equal to itself
        raise _bad(what, "a datetime or an ISO 8601 timestamp", value)
    return value


def predicates_or_filters(predicates: Predicates, filters: Predicates) -> Predicates:
    """The read filter from ``predicates=`` or ``filters=``, the same argument under the name
    pyarrow (``pyarrow.parquet.read_table``, ``pyarrow.dataset``), Dask (``dd.read_parquet``)
    and deltalake (``DeltaTable.to_pandas``) give it. Every reader that takes ``predicates``
    takes ``filters`` too and resolves the two here.

    A value is given when it is not None (``[]``, no filter, counts as given); giving both
    is an :class:`~kstore.errors.InvalidArgumentError` naming both. The value is returned
    unchanged: :func:`kstore.core.predicates.parse` checks its shape later.

    >>> predicates_or_filters(None, [("x", ">", 1)])
    [('x', '>', 1)]
    >>> predicates_or_filters([[("x", ">", 1)]], None)
    [[('x', '>', 1)]]
    >>> predicates_or_filters([[("x", ">", 1)]], [[("x", ">", 2)]])
    Traceback (most recent call last):
    ...
    kstore.errors.InvalidArgumentError: predicates= and filters= were both given; they are the same argument (filters is pyarrow's, Dask's and deltalake's name for predicates): pass one of them
    """
    if filters is None:
        return predicates
    if predicates is not None:
        raise InvalidArgumentError(
            "predicates= and filters= were both given; they are the same argument (filters is pyarrow's, Dask's "
            "and deltalake's name for predicates): pass one of them")
    return filters


def looks_like_predicates(value: Any) -> bool:
    """Whether ``value`` is a DNF filter (``[(col, op, value), ...]`` or a list of such
    lists), not a list of column names: its first item is a tuple or list.

    >>> looks_like_predicates([[("x", "==", 1)]]), looks_like_predicates(["x", "y"]), looks_like_predicates(None)
    (True, False, False)
    """
    return (isinstance(value, (list, tuple)) and len(value) > 0
            and isinstance(value[0], (list, tuple)))


def as_delete_scope(value: Any, dataset: str) -> tuple[Mapping[str, Any], ...] | None:
    """``[{partition column: value}, ...]`` as a tuple of non-empty dicts with str keys."""
    if value is None:
        return None
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise _bad(f"dataset {dataset!r}: delete_scope", "a list of {partition column: value} dicts", value)
    scopes = tuple(value)
    for scope in scopes:
        if not isinstance(scope, Mapping) or not scope or not all(isinstance(c, str) for c in scope):
            raise InvalidArgumentError(
                f"dataset {dataset!r}: each delete scope must be a non-empty dict of partition column names to "
                f"values, got {short_repr(scope)}"
            )
    return scopes


def _is_frame(value: Any) -> bool:
    """A DataFrame of any engine (pandas, Dask, Spark) or an Arrow table: never a store."""
    return hasattr(value, "columns") and (hasattr(value, "dtypes") or hasattr(value, "schema"))


@dataclass(frozen=True)
class DataKind:
    """What an engine's write takes as its data: ``name`` (shown in errors), ``is_data``
    (tells it) and ``hint`` (advice for a value that is not it, e.g. a pandas frame)."""

    name: str
    is_data: Callable[[Any], bool]
    hint: Callable[[Any], str] = lambda data: ""


def store_uuid_data(function: str, store: Any, dataset_uuid: Any, data: Any, kind: DataKind, *,
                    optional: bool = False, stacklevel: int = 3) -> tuple[Any, str, Any]:
    """The arguments of an engine's write in kstore's one order ``(store, dataset_uuid,
    data)``, also when given in the engine's old order ``(data, store, dataset_uuid)``
    (then with a :class:`FutureWarning`, for one release).

    ``function`` is the full name (``"kstore.spark.store_dataset"``); ``kind`` tells the
    engine's data type; ``stacklevel`` points the warning at the user's call; with
    ``optional``, ``data`` may be None (a delete-only update; the old order was
    ``(None, store, dataset_uuid)``). A wrong type in any position is an
    :class:`~kstore.errors.InvalidArgumentError` that names the position and the order.

    >>> rows = DataKind("a list", lambda d: isinstance(d, list))
    >>> store_uuid_data("kstore.x.store_dataset", "/data", "sales", [1], rows)
    ('/data', 'sales', [1])
    >>> store_uuid_data("kstore.x.store_dataset", "/data", "sales", "rows", rows)
    Traceback (most recent call last):
    ...
    kstore.errors.InvalidArgumentError: kstore.x.store_dataset: the third argument (dataset 'sales') is the data, a list, got str
    """
    short = function.rsplit(".", 1)[-1]
    if kind.is_data(store) or (optional and store is None and isinstance(data, str)):
        warnings.warn(f"{function}(data, store, dataset_uuid) is deprecated; pass (store, dataset_uuid, data) "
                      f"like kstore.{short}", FutureWarning, stacklevel=stacklevel)
        store, dataset_uuid, data = dataset_uuid, data, store
    if store is None or _is_frame(store) or isinstance(store, (int, float, bool)):
        raise InvalidArgumentError(f"{function}: the first argument is the store (a path, URL or Store), got "
                                   f"{type(store).__name__}; call {short}(store, dataset_uuid, data)")
    if not isinstance(dataset_uuid, str):
        raise InvalidArgumentError(f"{function}: the second argument is the dataset name (a str), got "
                                   f"{type(dataset_uuid).__name__}; call {short}(store, dataset_uuid, data)")
    if not (kind.is_data(data) or (optional and data is None)):
        raise InvalidArgumentError(f"{function}: the third argument (dataset {dataset_uuid!r}) is the data, "
                                   f"{kind.name}, got {type(data).__name__}{kind.hint(data)}")
    return store, dataset_uuid, data


def renamed(owner: str, old: str, new: str, why: str) -> None:
    """Warn (``FutureWarning``) that ``owner.old`` is now ``owner.new``; the old name works
    for one more release.

    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as w:
    ...     warnings.simplefilter("always")
    ...     renamed("ReadPlan", "n_partitions", "n_files", "it counts files")
    >>> str(w[0].message)
    'ReadPlan.n_partitions is now ReadPlan.n_files (it counts files); the old name goes in the next release'
    """
    warnings.warn(f"{owner}.{old} is now {owner}.{new} ({why}); the old name goes in the next release",
                  FutureWarning, stacklevel=3)
