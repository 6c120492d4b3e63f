"""Progress of long operations (writes, garbage collection, deletes, copies, compaction).

Off by default in the library, on in the CLI (where stderr is a terminal). A verb that takes
``progress=`` accepts:

- ``False`` / ``None``: nothing (the default);
- ``True``: a `rich <https://rich.readthedocs.io>`_ progress bar on stderr;
- a callable ``progress(done, total)``: called after each unit of work (``total`` is None
  when it is not known in advance, e.g. a streamed write). It may be called from worker
  threads, never two calls at once. An exception it raises stops the operation (as any
  failure of it would: nothing is committed, the files written so far are deleted).

Dask and Spark writes run on workers: their progress is the engine's own (Dask's
diagnostics, the Spark UI); a :class:`ProgressStore` pickled to a worker arrives as the
plain store.

The units are store calls of one kind (files written, keys deleted), counted by
:class:`ProgressStore`, a store wrapper, so the blocks below need no progress code.

Examples
--------
>>> import pandas as pd, kstore
>>> seen = []
>>> _ = kstore.store_dataset("memory://progress-doc", "d", pd.DataFrame({"p": [1, 2, 3], "x": [1, 2, 3]}),
...                          partition_on="p", progress=lambda done, total: seen.append(done))
>>> seen
[1, 2, 3]
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, BinaryIO, TypeAlias

from kstore.core import naming
from kstore.errors import InvalidArgumentError
from kstore.io.store import Store, delete_many

__all__ = ["ProgressLike", "ProgressStore", "bar", "tracked", "is_data_file", "check_progress"]

#: What a ``progress=`` argument accepts (see the module docstring).
ProgressLike: TypeAlias = "bool | Callable[[int, int | None], Any] | None"


def is_data_file(key: str) -> bool:
    """True for the key of a Parquet data file (what a write's progress counts), not an
    index file or metadata.

    >>> is_data_file("d/table/p=1/0001.parquet"), is_data_file("d/_kstore/log/00000000000000000001.json")
    (True, False)
    >>> is_data_file("d/indices/x/2024-01-01T00%3A00%3A00.by-dataset-index.parquet")
    False
    """
    return key.endswith(".parquet") and not key.endswith(naming.INDEX_SUFFIX)


class ProgressStore:
    """A store that calls ``advance()`` after each successful ``method`` call (``"put"`` or
    ``"delete"``) on a key ``key_filter`` accepts; every other call passes through.

    Parameters
    ----------
    inner
        The store to wrap.
    method
        ``"put"`` (files written or copied) or ``"delete"`` (keys deleted; each key of a
        batched delete counts).
    advance
        Called once per counted call.
    key_filter
        Only keys it returns True for are counted (default: all).

    Examples
    --------
    >>> from kstore.io.memory import MemoryStore
    >>> ticks = []
    >>> st = ProgressStore(MemoryStore(), "put", lambda: ticks.append(1), key_filter=is_data_file)
    >>> st.put("a.parquet", b"x"); st.put("a.json", b"{}"); st.get("a.json")
    b'{}'
    >>> len(ticks)
    1
    """

    def __init__(self, inner: Store, method: str, advance: Callable[[], None],
                 key_filter: Callable[[str], bool] | None = None) -> None:
        if method not in ("put", "delete"):
            raise InvalidArgumentError(f"ProgressStore counts 'put' or 'delete' calls, not {method!r}")
        self.inner = inner
        self.method = method
        self.advance = advance
        self.key_filter = key_filter
        self.atomic_create = getattr(inner, "atomic_create", True)

    @property
    def url(self) -> str | None:
        """The wrapped store's URL."""
        return self.inner.url

    def __repr__(self) -> str:
        return repr(self.inner)

    def __getattr__(self, name: str) -> Any:  # optional extras such as remove_temporary
        return getattr(self.inner, name)

    def __reduce__(self) -> Any:  # a worker process gets the plain store: progress is local
        return (_identity, (self.inner,))

    def _tick(self, method: str, key: str) -> None:
        if method == self.method and (self.key_filter is None or self.key_filter(key)):
            self.advance()

    def get(self, key: str) -> bytes:
        """As the wrapped store's ``get``."""
        return self.inner.get(key)

    def put(self, key: str, data: bytes) -> None:
        """As the wrapped store's ``put``; counted when ``method`` is ``"put"``.

        When ``advance`` raises (a callback that cancels the operation), the key just
        written is deleted again before the error propagates: the caller never learned
        that this put succeeded, so it could not clean it up.
        """
        self.inner.put(key, data)
        try:
            self._tick("put", key)
        except BaseException:
            with contextlib.suppress(Exception):
                self.inner.delete(key)
            raise

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """As the wrapped store's ``put_if_absent`` (never counted: it is a commit's claim)."""
        return self.inner.put_if_absent(key, data)

    def delete(self, key: str) -> None:
        """As the wrapped store's ``delete``; counted when ``method`` is ``"delete"``."""
        self.inner.delete(key)
        self._tick("delete", key)

    def delete_many(self, keys: Iterable[str]) -> None:
        """The wrapped store's batched delete; each key counts once it is deleted."""
        keys = list(keys)
        delete_many(self.inner, keys)
        for key in keys:
            self._tick("delete", key)

    def iter_prefix(self, prefix: str, start_after: str | None = None) -> Iterator[str]:
        """As the wrapped store's ``iter_prefix``."""
        return self.inner.iter_prefix(prefix, start_after)

    def exists(self, key: str) -> bool:
        """As the wrapped store's ``exists``."""
        return self.inner.exists(key)

    def open(self, key: str) -> BinaryIO:
        """As the wrapped store's ``open``."""
        return self.inner.open(key)


def _identity(store: Store) -> Store:
    return store


@contextlib.contextmanager
def bar(description: str, total: int | None) -> Iterator[Callable[[], None]]:
    """A rich progress bar on stderr (removed when done); yields ``advance()``.

    Parameters
    ----------
    description
        The text before the bar (e.g. ``"gc sales"``).
    total
        Units expected, or None for a counter without a bar.

    Examples
    --------
    >>> with bar("demo", 2) as advance:
    ...     advance(); advance()
    """
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=Console(stderr=True), transient=True) as shown:
        task = shown.add_task(description, total=total)
        yield lambda: shown.advance(task)


def check_progress(progress: Any) -> None:
    """Raise :class:`~kstore.errors.InvalidArgumentError` unless ``progress`` is a valid
    ``progress=`` argument (None, a bool, or a callable).

    >>> check_progress(print)
    >>> check_progress("yes")
    Traceback (most recent call last):
    ...
    kstore.errors.InvalidArgumentError: progress must be True, False or a callable progress(done, total), got str
    """
    if progress is not None and not isinstance(progress, bool) and not callable(progress):
        raise InvalidArgumentError(f"progress must be True, False or a callable progress(done, total), "
                                   f"got {type(progress).__name__}")


@contextlib.contextmanager
def tracked(store: Store, progress: Any, description: str, *, method: str, total: int | None = None,
            key_filter: Callable[[str], bool] | None = None) -> Iterator[Store]:
    """``store``, wrapped so that ``progress`` (a ``progress=`` argument) sees each counted call.

    Parameters
    ----------
    store
        The store the operation uses.
    progress
        ``False``/``None`` (``store`` comes back as it is), ``True`` (a :func:`bar`), or a
        callable ``progress(done, total)``.
    description
        The bar's text.
    method, key_filter
        What counts (see :class:`ProgressStore`).
    total
        Units expected, if known.

    Examples
    --------
    >>> from kstore.io.memory import MemoryStore
    >>> calls = []
    >>> with tracked(MemoryStore(), lambda done, total: calls.append((done, total)), "put", method="put",
    ...              total=2) as st:
    ...     st.put("a", b""); st.put("b", b"")
    >>> calls
    [(1, 2), (2, 2)]
    """
    if progress is None or progress is False:
        yield store
        return
    if progress is True:
        with bar(description, total) as tick:
            yield ProgressStore(store, method, tick, key_filter)
        return
    check_progress(progress)
    lock = threading.Lock()
    done = 0

    def advance() -> None:
        nonlocal done
        with lock:
            done += 1
            progress(done, total)

    yield ProgressStore(store, method, advance, key_filter)
