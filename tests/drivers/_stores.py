"""Store wrappers shared by the driver tests."""

from __future__ import annotations

from collections.abc import Callable

import kstore


class HookStore:
    """Wrap a store; ``before(method, key)`` / ``after(method, key, result)`` run around calls."""

    def __init__(self, inner, before: Callable | None = None, after: Callable | None = None) -> None:
        self.inner = kstore.open_store(inner)
        self.url = self.inner.url
        self.atomic_create = getattr(self.inner, "atomic_create", True)
        self.before = before or (lambda m, k: None)
        self.after = after or (lambda m, k, r: None)
        self.calls: list[tuple[str, str]] = []

    def _call(self, method: str, key: str, *args):
        self.calls.append((method, key))
        self.before(method, key)
        result = getattr(self.inner, method)(key, *args)
        self.after(method, key, result)
        return result

    def get(self, key):
        return self._call("get", key)

    def put(self, key, data):
        return self._call("put", key, data)

    def put_if_absent(self, key, data):
        return self._call("put_if_absent", key, data)

    def delete(self, key):
        return self._call("delete", key)

    def exists(self, key):
        return self._call("exists", key)

    def open(self, key):
        return self._call("open", key)

    def iter_prefix(self, prefix, start_after=None):
        return iter(list(self._call("iter_prefix", prefix, start_after)))
