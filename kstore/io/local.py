"""A directory on a local (or network) file system as a store.

``put`` writes a temporary file and renames it into place (atomic); ``put_if_absent``
hard-links the finished temporary file to the key, which fails if the key exists, so a
second writer can never overwrite the first (the commit protocol relies on this).

Reads never create anything: a missing root is an empty namespace for ``get``/``exists``
and a :class:`~kstore.errors.StoreNotFoundError` for ``iter_prefix``; the first write
creates it. Symbolic links below the root are never followed (a key that is, or lies
below, a link raises :class:`~kstore.errors.StoreError`), so nothing outside the root is
read or written. Names longer than the file system allows are missing keys on read and a
:class:`~kstore.errors.LimitExceededError` on write.

>>> import tempfile
>>> store = LocalStore(tempfile.mkdtemp())
>>> store.put_if_absent("ds/_kstore/log/0.json", b"{}"), store.put_if_absent("ds/_kstore/log/0.json", b"x")
(True, False)
"""

from __future__ import annotations

import errno
import os
import random
import stat
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, BinaryIO, TypeVar

from kstore.core.naming import validate_key
from kstore.errors import (
    InvalidArgumentError,
    KeyNotFoundError,
    LimitExceededError,
    StoreError,
    StoreNotFoundError,
)

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["LocalStore"]

_TMP_DIR = ".kstore-tmp"
_DIR_RETRIES = 100

T = TypeVar("T")


class LocalStore:
    """Keys are files below ``root``; ``/`` in a key is a directory separator.

    Parameters
    ----------
    root
        The directory (created by the first write, never by a read).

    Examples
    --------
    >>> import os, tempfile
    >>> root = os.path.join(tempfile.mkdtemp(), "store")
    >>> store = LocalStore(root)
    >>> os.path.exists(root), store.exists("a/b")
    (False, False)
    >>> store.put("a/b", b"1"); store.get("a/b"), store.file_path("a/b") == os.path.join(root, "a", "b")
    (b'1', True)
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        path = os.fspath(root)
        if not isinstance(path, str) or not path:
            raise InvalidArgumentError(f"a local store's root must be a non-empty str path, got {path!r}")
        if "\x00" in path:
            raise InvalidArgumentError(f"store path {path!r} contains a NUL byte")
        try:
            os.fsencode(path)
        except UnicodeEncodeError as exc:
            raise InvalidArgumentError(f"store path {path!r} is no valid file name here ({exc.reason})") from exc
        self.root = os.path.abspath(path)
        self.url = "file://" + self.root

    def __repr__(self) -> str:
        return f"LocalStore({self.root!r})"

    def __reduce__(self) -> tuple[type[LocalStore], tuple[str]]:  # pickles as its root path
        return (LocalStore, (self.root,))

    def _path(self, key: str, *, follow_last: bool = True) -> str:
        """The file of ``key``; raises if it or a directory above it is a symbolic link
        (``follow_last=False``: the key itself may be a link, e.g. to delete it)."""
        validate_key(key)
        parts = key.split("/")
        path = os.path.join(self.root, *parts)
        # validate_key already forbids '..'; this guards against symlink-free surprises
        if os.path.commonpath([self.root, os.path.abspath(path)]) != self.root:
            raise StoreError(f"key {key!r} escapes the store root {self.root!r}")
        if _has_link(self.root, parts if follow_last else parts[:-1]):
            raise self._link_error(key)
        return path

    def file_path(self, key: str) -> str:
        """The local file of ``key`` (validated like :meth:`open`: no escape from the root,
        no symbolic link on the way; the file need not exist). Readers that scan many
        files with ``pyarrow.fs.LocalFileSystem`` at once use it instead of :meth:`open`.

        Parameters
        ----------
        key
            The key (its file need not exist).

        Returns
        -------
        str
            The absolute path of the key's file below :attr:`root`.

        Raises
        ------
        StoreError
            The key is, or lies below, a symbolic link.

        Examples
        --------
        >>> import os, tempfile
        >>> store = LocalStore(tempfile.mkdtemp())
        >>> store.file_path("a/b.parquet") == os.path.join(store.root, "a", "b.parquet")
        True
        """
        return self._path(key)

    def file_paths(self, keys: Sequence[str]) -> list[str]:
        """:meth:`file_path` of many keys, each directory on their way checked once (a
        scan of 100 files in 100 partition directories: 2 ``lstat`` calls a file instead
        of one per path component).

        Parameters
        ----------
        keys
            The keys.

        Returns
        -------
        list[str]
            The absolute paths of the keys' files below :attr:`root`, in order.

        Raises
        ------
        StoreError
            As :meth:`file_path` raises it: for the first key that is, or lies below, a symbolic link.

        Examples
        --------
        >>> import tempfile
        >>> store = LocalStore(tempfile.mkdtemp())
        >>> store.file_paths(["a/1.parquet", "a/2.parquet"]) == [store.file_path("a/1.parquet"), store.file_path("a/2.parquet")]
        True
        """
        checked: set[str] = {""}  # directories below the root that are no link ("": the root)
        out = []
        for key in keys:
            validate_key(key)  # relative, no '.', '..' or empty component: the path stays below the root
            directory = key.rpartition("/")[0]
            if directory not in checked:
                parts = directory.split("/")
                for i in range(1, len(parts) + 1):
                    sub = "/".join(parts[:i])
                    if sub not in checked:
                        if _is_link(os.path.join(self.root, sub)):
                            raise self._link_error(key)
                        checked.add(sub)
            path = os.path.join(self.root, key)
            if _is_link(path):
                raise self._link_error(key)
            out.append(path)
        return out

    def open_native(self, key: str) -> pa.NativeFile:
        """The key's file as a native Arrow file (``pyarrow.OSFile``), validated and mapped
        like :meth:`open`; the caller closes it.

        Arrow reads a native file, and releases it, on its own threads without Python. A
        Python file object (:meth:`open`) inside an Arrow scan is released by whichever Arrow
        thread finishes last, which must take the GIL: at interpreter exit that aborts the
        process (apache/arrow#34314, #50482). Readers that scan with Arrow's threads open
        local files this way.

        Parameters
        ----------
        key
            The key of the file to open.

        Returns
        -------
        pyarrow.NativeFile
            The open file.

        Raises
        ------
        KeyNotFoundError
            No such file.
        StoreError
            The key is, or lies below, a symbolic link.

        Examples
        --------
        >>> import tempfile
        >>> store = LocalStore(tempfile.mkdtemp())
        >>> store.put("k", b"0123")
        >>> with store.open_native("k") as fh:
        ...     fh.read_at(2, 2)
        b'23'
        """
        import pyarrow as pa

        path = self._path(key)
        try:
            return pa.OSFile(path, "r")
        except OSError as exc:
            if _no_file(exc, path):
                raise self._missing(key) from exc
            raise

    def _link_error(self, key: str) -> StoreError:
        return StoreError(f"key {key!r} in {self.root!r} is, or lies below, a symbolic link; kstore does not "
                          "follow links inside a store")

    def _missing(self, key: str) -> KeyNotFoundError:
        where = repr(self.root) if os.path.isdir(self.root) else f"{self.root!r} (the store root does not exist)"
        return KeyNotFoundError(f"key {key!r} not found in {where}")

    def _too_long(self, key: str, exc: OSError) -> LimitExceededError:
        return LimitExceededError(
            f"key {key!r} is too long for the file system under {self.root!r} ({exc.strerror})"
        )

    def _tmp_file(self, data: bytes, key: str) -> str:
        tmp_dir = os.path.join(self.root, _TMP_DIR)
        try:
            os.makedirs(tmp_dir, exist_ok=True)
        except (FileExistsError, NotADirectoryError) as exc:  # a file where the root or its way should be
            self._no_file_on_the_way(key, tmp_dir, exc)
            os.makedirs(tmp_dir, exist_ok=True)  # a race (created and removed meanwhile): once more
        # '<dataset>~<random>': garbage collection of a dataset finds its own leftovers
        owner = key.split("/", 1)[0].split(".by-dataset-metadata", 1)[0]
        tmp = os.path.join(tmp_dir, f"{owner}~{uuid.uuid4().hex}")
        try:
            with open(tmp, "wb") as fh:
                fh.write(data)
        except OSError as exc:
            _unlink(tmp)
            if exc.errno == errno.ENAMETOOLONG:
                raise self._too_long(key, exc) from exc
            raise
        return tmp

    def get(self, key: str) -> bytes:
        """The bytes of the key's file. No file there (also a missing root, a directory, or a name too long for
        the file system) is a missing key; a key that is, or lies below, a symbolic link raises
        :class:`~kstore.errors.StoreError`. See :meth:`kstore.io.store.Store.get`."""
        with self._open(key) as fh:
            return fh.read()

    def _in_directory(self, path: str, place: Callable[[], T], key: str | None = None) -> T:
        """Create ``path``'s directory and run ``place`` (which puts the file there).

        A concurrent :meth:`delete` may prune the directory between the two steps (then
        ``makedirs`` or ``place`` fails with "not found" or "exists"): create it again.
        """
        directory = os.path.dirname(path)
        last: OSError | None = None
        for attempt in range(_DIR_RETRIES):
            if attempt >= 2:  # pruned again and again: let the deleting threads finish (jitter)
                time.sleep(random.random() * min(0.0005 * 2 ** attempt, 0.02))
            try:
                os.makedirs(directory, exist_ok=True)
            except (FileExistsError, NotADirectoryError) as exc:
                self._no_file_on_the_way(path, directory, exc)
                last = exc  # created and pruned again by other threads
                continue
            except FileNotFoundError as exc:
                last = exc  # a parent was pruned while makedirs ran
                continue
            if key is not None:
                self._path(key, follow_last=False)  # makedirs followed no link into elsewhere
            try:
                return place()
            except FileNotFoundError as exc:
                last = exc  # the directory was pruned after makedirs
            except NotADirectoryError as exc:
                self._no_file_on_the_way(path, directory, exc)
                last = exc
        raise StoreError(f"could not create {path!r}: its directory kept disappearing") from last

    def _no_file_on_the_way(self, what: str, directory: str, exc: OSError) -> None:
        """Raise if a file (not a directory) stands on ``directory``'s way (the root's
        included); return if the failure was a race (a directory created or pruned by another thread).

        One ``stat`` a component decides: a check in two calls (exists, then is a
        directory) saw a directory appear and be pruned between them, and took it for a file.
        """
        here = os.sep
        for part in os.path.abspath(directory).split(os.sep)[1:]:  # the root's own way too
            here = os.path.join(here, part)
            try:
                mode = os.stat(here).st_mode  # a link to a directory is none: the link check refuses it
            except OSError:
                return  # pruned meanwhile (nothing below it exists), or not ours to judge
            if not stat.S_ISDIR(mode):
                raise StoreError(f"cannot store {what!r}: {here!r} is a file") from exc

    def put(self, key: str, data: bytes) -> None:
        """Atomic by a temporary file (below the root's ``.kstore-tmp``) renamed into place; creates the root and
        the directories on the way. A key too long for the file system raises
        :class:`~kstore.errors.LimitExceededError`; a symbolic link, or a file where a directory should be,
        :class:`~kstore.errors.StoreError`. See :meth:`kstore.io.store.Store.put`."""
        path = self._path(key, follow_last=False)
        tmp = self._tmp_file(data, key)
        try:
            self._in_directory(path, lambda: os.replace(tmp, path), key)
        except OSError as exc:
            _unlink(tmp)
            if exc.errno == errno.ENAMETOOLONG:
                self._prune(path)
                raise self._too_long(key, exc) from exc
            raise
        except BaseException:
            _unlink(tmp)
            raise

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Atomic across processes: the finished temporary file is hard-linked to the key, which fails if the key
        exists (on file systems without hard links: an exclusive create). A key too long for the file system
        raises :class:`~kstore.errors.LimitExceededError`. See :meth:`kstore.io.store.Store.put_if_absent`."""
        path = self._path(key, follow_last=False)
        tmp = self._tmp_file(data, key)
        try:
            self._in_directory(path, lambda: os.link(tmp, path), key)
            return True
        except FileExistsError:
            return False
        except OSError as exc:  # file systems without hard links: exclusive create
            if exc.errno == errno.ENAMETOOLONG:
                self._prune(path)
                raise self._too_long(key, exc) from exc
            if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
                raise
            try:
                fd = self._in_directory(
                    path, lambda: os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644), key
                )
            except FileExistsError:
                return False
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            return True
        finally:
            _unlink(tmp)

    def remove_temporary(self, dataset_uuid: str, older_than: float) -> list[str]:
        """Delete temporary files of interrupted puts to ``dataset_uuid``'s keys whose
        modification time is before ``older_than`` (epoch seconds); returns their names.

        Garbage collection calls it; puts in flight write newer temporary files.

        Parameters
        ----------
        dataset_uuid
            The dataset whose keys the temporary files were meant for (the first key
            component).
        older_than
            Epoch seconds: only files last modified before this are deleted.

        Returns
        -------
        list[str]
            The names of the deleted files (in the store's temporary directory).

        Examples
        --------
        >>> import os, tempfile, time
        >>> store = LocalStore(tempfile.mkdtemp())
        >>> os.makedirs(os.path.join(store.root, ".kstore-tmp"))
        >>> open(os.path.join(store.root, ".kstore-tmp", "sales~0123"), "wb").close()
        >>> store.remove_temporary("other", time.time() + 1), store.remove_temporary("sales", time.time() + 1)
        ([], ['sales~0123'])
        """
        tmp_dir = os.path.join(self.root, _TMP_DIR)
        removed: list[str] = []
        try:
            entries = list(os.scandir(tmp_dir))
        except FileNotFoundError:
            return removed
        for entry in entries:
            if entry.name.split("~", 1)[0] != dataset_uuid:
                continue
            try:
                if entry.stat().st_mtime < older_than:
                    os.unlink(entry.path)
                    removed.append(entry.name)
            except FileNotFoundError:
                pass
        return removed

    def delete(self, key: str) -> None:
        """Removes the key's file (a symbolic link there is removed, not followed) and the directories that
        became empty, as kartothek's hfs store does. See :meth:`kstore.io.store.Store.delete`."""
        path = self._path(key, follow_last=False)  # a link is removed, not followed
        try:
            _unlink(path)
        except OSError as exc:
            if os.path.isdir(path) or exc.errno in (errno.ENAMETOOLONG, errno.ENOTDIR):
                return  # a "directory" is no key, and no file has such a name: missing, fine
            raise
        self._prune(path)

    def _prune(self, path: str) -> None:
        """Remove empty parent directories of ``path`` up to the root, as kartothek's hfs store does."""
        parent = os.path.dirname(path)
        while parent != self.root:
            try:
                os.rmdir(parent)
            except OSError:
                break
            parent = os.path.dirname(parent)

    def exists(self, key: str) -> bool:
        """Whether the key's file exists (a directory is no key; a missing root: False). See
        :meth:`kstore.io.store.Store.exists`."""
        return os.path.isfile(self._path(key))

    def iter_prefix(self, prefix: str, start_after: str | None = None) -> Iterator[str]:
        """Walks only the directories that can hold such keys, skipping symbolic links and temporary files. Lazy:
        a missing root (:class:`~kstore.errors.StoreNotFoundError`) and a prefix with a ``.``/``..``
        component, a backslash or a NUL (:class:`~kstore.errors.StoreError`) raise while iterating. See
        :meth:`kstore.io.store.Store.iter_prefix`."""
        if start_after is not None:
            return (k for k in self.iter_prefix(prefix) if k > start_after)
        return self._iter_prefix(prefix)

    def _iter_prefix(self, prefix: str) -> Iterator[str]:
        if prefix:
            if "\\" in prefix or "\x00" in prefix or any(p in (".", "..") for p in prefix.split("/")):
                raise StoreError(f"invalid key prefix {prefix!r}")
        if not os.path.isdir(self.root):
            raise StoreNotFoundError(f"store {self.root!r} does not exist (no such directory)")
        base_key = prefix.rpartition("/")[0]
        base = os.path.join(self.root, *base_key.split("/")) if base_key else self.root
        yield from self._walk(base, base_key, prefix)

    def _walk(self, directory: str, key_prefix: str, prefix: str) -> Iterator[str]:
        try:
            entries = list(os.scandir(directory))
        except (FileNotFoundError, NotADirectoryError):
            return
        except OSError as exc:
            if exc.errno == errno.ENAMETOOLONG:
                return  # no file has such a name
            raise
        for entry in entries:
            if entry.name == _TMP_DIR and directory == self.root:
                continue
            key = f"{key_prefix}/{entry.name}" if key_prefix else entry.name
            if entry.is_dir(follow_symlinks=False):
                if key.startswith(prefix) or prefix.startswith(key + "/"):
                    yield from self._walk(entry.path, key, prefix)
            elif key.startswith(prefix):
                yield key

    def open(self, key: str) -> BinaryIO:
        """The key's file, opened for binary reading (see :meth:`open_native` for Arrow's threads); no file there
        is a missing key, as for :meth:`get`. See :meth:`kstore.io.store.Store.open`."""
        return self._open(key)

    def _open(self, key: str) -> BinaryIO:
        path = self._path(key)
        try:
            return open(path, "rb")  # noqa: SIM115 - the caller closes it
        except OSError as exc:
            if _no_file(exc, path):
                raise self._missing(key) from exc
            raise


def _no_file(exc: OSError, path: str) -> bool:
    """Whether opening ``path`` for reading failed because no file is there: none, a
    directory, a file where a directory should be, or a name too long for the file system
    (``pyarrow.OSFile`` raises a plain ``OSError`` for a directory)."""
    return (isinstance(exc, (FileNotFoundError, IsADirectoryError, NotADirectoryError))
            or exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.ENAMETOOLONG)
            or os.path.isdir(path))


def _is_link(path: str) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except OSError:  # missing (or not reachable): no link there
        return False


def _has_link(root: str, parts: Sequence[str]) -> bool:
    """Whether ``root/parts[0]/.../parts[i]`` is a symbolic link for some ``i`` (one
    ``lstat`` a component, stopping at the first that does not exist; the root itself may
    be a link).

    >>> import tempfile
    >>> d = tempfile.mkdtemp(); os.mkdir(os.path.join(d, "a")); os.symlink(d, os.path.join(d, "a", "l"))
    >>> _has_link(d, ["a", "x", "y"]), _has_link(d, ["a", "l", "y"]), _has_link(d, [])
    (False, True, False)
    """
    path = root
    for part in parts:
        path = os.path.join(path, part)
        try:
            if stat.S_ISLNK(os.lstat(path).st_mode):
                return True
        except OSError:  # missing (nothing below it exists either) or not reachable
            return False
    return False


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
