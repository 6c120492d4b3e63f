"""The ``pyarrow.fs`` view of a store: lets ``pyarrow.dataset`` (and the engines on top of
it, DuckDB, Polars) open the files of any kstore store.

A plain local directory is opened through ``pyarrow.fs.LocalFileSystem`` by absolute path;
every other store through :class:`StoreFileSystem`, a read-only handler over the store's
range reads (``Store.open``), so memory, S3 and minimalkv stores work the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeGuard

import pyarrow as pa
import pyarrow.fs as pafs

from kstore.errors import KeyNotFoundError
from kstore.io.local import LocalStore
from kstore.io.store import Store

__all__ = ["StoreFileSystem", "filesystem_paths", "is_plain_local", "open_for_arrow"]


class StoreFileSystem(pafs.FileSystemHandler):  # type: ignore[misc]
    """A read-only ``pyarrow.fs`` handler over a kstore :class:`~kstore.io.store.Store`:
    paths are store keys, files are opened with ``Store.open`` (range reads).

    Wrap it in ``pyarrow.fs.PyFileSystem`` to hand it to ``pyarrow.dataset``. Writing,
    moving or deleting through it raises ``NotImplementedError``: kstore writes only through
    its commit.

    Examples
    --------
    >>> import pyarrow.fs as pafs
    >>> from kstore.io.memory import MemoryStore
    >>> s = MemoryStore(); s.put("d/a.bin", b"hello")
    >>> fs = pafs.PyFileSystem(StoreFileSystem(s))
    >>> with fs.open_input_file("d/a.bin") as f:
    ...     f.read()
    b'hello'
    """

    def __init__(self, store: Store) -> None:
        self.store = store

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StoreFileSystem) and other.store is self.store

    def __hash__(self) -> int:
        return id(self.store)

    def __reduce__(self) -> tuple[Any, ...]:
        return (StoreFileSystem, (self.store,))

    def get_type_name(self) -> str:
        return "kstore"

    def equals(self, other: Any) -> bool:
        return bool(self == other)

    def normalize_path(self, path: str) -> str:
        return path

    def get_file_info(self, paths: Sequence[str]) -> list[pafs.FileInfo]:
        return [pafs.FileInfo(p, pafs.FileType.File if self.store.exists(p) else pafs.FileType.NotFound)
                for p in paths]

    def get_file_info_selector(self, selector: pafs.FileSelector) -> list[pafs.FileInfo]:
        prefix = selector.base_dir.rstrip("/") + "/" if selector.base_dir else ""
        return [pafs.FileInfo(k, pafs.FileType.File) for k in sorted(self.store.iter_prefix(prefix))]

    def open_input_file(self, path: str) -> pa.NativeFile:
        try:
            return pa.PythonFile(self.store.open(path), mode="r")
        except KeyNotFoundError as exc:
            raise FileNotFoundError(path) from exc

    def open_input_stream(self, path: str) -> pa.NativeFile:
        return self.open_input_file(path)

    def _read_only(self, *_: Any, **__: Any) -> Any:
        raise NotImplementedError("a kstore dataset is written through kstore's commit, not through pyarrow.fs")

    create_dir = delete_dir = delete_dir_contents = delete_root_dir_contents = _read_only
    delete_file = move = copy_file = open_output_stream = open_append_stream = _read_only


def is_plain_local(store: Store) -> TypeGuard[LocalStore]:
    """Whether ``store`` is a :class:`~kstore.io.local.LocalStore` whose ``open`` is not
    overridden (so its files may be opened by path, bypassing the store)."""
    return isinstance(store, LocalStore) and type(store).open is LocalStore.open


def open_for_arrow(store: Store, key: str) -> tuple[Any, bool]:
    """A file of ``store`` for one Arrow scan, and whether the scan may use Arrow's threads.

    A plain local directory's file opens natively (:meth:`LocalStore.open_native`): the
    scan may use Arrow's threads. Any other store's file is a Python object
    (``Store.open``): the scan must run on the calling thread (``use_threads=False``, reads
    pre-buffered, which keeps the bytes read in a cache the calling thread drops), or an
    Arrow thread releases the file and the bytes it returned, which needs the GIL, and at
    interpreter exit aborts the process with "terminate called without an active
    exception" (apache/arrow#34314, #50482). The caller closes the file.

    >>> from kstore.io.memory import MemoryStore
    >>> s = MemoryStore(); s.put("d/a.bin", b"hello")
    >>> fh, threads = open_for_arrow(s, "d/a.bin")
    >>> fh.read(), threads
    (b'hello', False)
    """
    if is_plain_local(store):
        return store.open_native(key), True
    return store.open(key), False


def filesystem_paths(store: Store, keys: Sequence[str]) -> tuple[pafs.FileSystem, list[str]]:
    """The ``pyarrow.fs`` file system and paths that open ``keys``: the local file system
    and absolute paths for a plain :class:`~kstore.io.local.LocalStore` (its ``open`` not
    overridden), else :class:`StoreFileSystem` and the keys."""
    if is_plain_local(store):
        return _local_fs(), store.file_paths(keys)
    return pafs.PyFileSystem(StoreFileSystem(store)), list(keys)


def _local_fs() -> pafs.FileSystem:
    global _LOCAL_FS
    if _LOCAL_FS is None:
        _LOCAL_FS = pafs.LocalFileSystem()
    return _LOCAL_FS


_LOCAL_FS: pafs.FileSystem | None = None
