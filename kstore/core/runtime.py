"""Time, randomness and thread-pool sizes, in one replaceable place.

Everything in kstore that reads the clock, draws random ids, sleeps, or sizes a thread
pool goes through this module. Production uses :class:`SystemRuntime`; the deterministic
simulation suite installs a runtime with a simulated clock, seeded entropy and pools of
one thread, so that a seed replays the same interleaving of store calls exactly.

Examples
--------
>>> rt = current()
>>> rt.now().tzinfo is not None, len(rt.token(8))
(True, 16)
>>> with installed(FixedRuntime(1_700_000_000.0)):
...     current().now().isoformat()
'2023-11-14T22:13:20+00:00'
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

__all__ = ["Runtime", "SystemRuntime", "FixedRuntime", "current", "install", "installed", "pool_size",
           "parallel_map", "cpu_threads", "THREADS_ENV"]

#: environment variable that overrides the number of CPU threads kstore uses (``KSTORE_THREADS=4``)
THREADS_ENV = "KSTORE_THREADS"


def cpu_threads() -> int:
    """CPUs this process may run on: ``KSTORE_THREADS`` if set, else the scheduler affinity
    (``os.sched_getaffinity``: what a container or ``taskset`` allows), else ``os.cpu_count()``.

    >>> cpu_threads() >= 1
    True
    """
    env = os.environ.get(THREADS_ENV, "").strip()
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            pass
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


class Runtime:
    """What kstore needs from its environment (overridden by the simulation)."""

    #: upper bound for every thread pool kstore starts (None: sized from the machine)
    max_threads: int | None = None

    def time(self) -> float:
        """Wall-clock epoch seconds (used for timestamps and file ids)."""
        raise NotImplementedError

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (used to age a loaded base)."""
        raise NotImplementedError

    def sleep(self, seconds: float) -> None:
        raise NotImplementedError

    def token(self, nbytes: int) -> str:
        """``nbytes`` random bytes as hex (file ids, commit ids)."""
        raise NotImplementedError

    def random(self) -> float:
        """A float in [0, 1) (backoff jitter)."""
        raise NotImplementedError

    def now(self) -> datetime:
        """The current time as an aware UTC datetime."""
        return datetime.fromtimestamp(self.time(), timezone.utc)


class SystemRuntime(Runtime):
    """The real clock, ``os.urandom`` and pools sized from the machine."""

    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def token(self, nbytes: int) -> str:
        return os.urandom(nbytes).hex()

    def random(self) -> float:
        return random.random()


class FixedRuntime(SystemRuntime):
    """A runtime whose clock stands still at ``epoch`` until :meth:`advance` (tests, docs)."""

    def __init__(self, epoch: float, seed: int = 0) -> None:
        self._t = float(epoch)
        self._rng = random.Random(seed)
        self.max_threads = 1

    def time(self) -> float:
        return self._t

    def monotonic(self) -> float:
        return self._t

    def advance(self, seconds: float) -> None:
        self._t += seconds

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)

    def token(self, nbytes: int) -> str:
        return self._rng.getrandbits(8 * nbytes).to_bytes(nbytes, "big").hex()

    def random(self) -> float:
        return self._rng.random()


_lock = threading.Lock()
_current: Runtime = SystemRuntime()


def current() -> Runtime:
    """The installed runtime."""
    return _current


def install(runtime: Runtime) -> Runtime:
    """Install ``runtime`` process-wide; returns the one it replaces."""
    global _current
    with _lock:
        previous, _current = _current, runtime
    return previous


@contextmanager
def installed(runtime: Runtime) -> Iterator[Runtime]:
    """Install ``runtime`` for the duration of a ``with`` block."""
    previous = install(runtime)
    try:
        yield runtime
    finally:
        install(previous)


def pool_size(wanted: int, default: int | None = None, *, cpu_bound: bool = False) -> int:
    """Threads for a pool with ``wanted`` tasks: at most ``default`` (or, sized from the
    machine, :func:`cpu_threads` for CPU-bound work such as encoding and decoding Parquet,
    twice that for I/O-bound work), at most the runtime's ``max_threads``, at least 1."""
    cap = default if default is not None else cpu_threads() * (1 if cpu_bound else 2)
    limit = current().max_threads
    if limit is not None:
        cap = min(cap, limit)
    return max(1, min(wanted, cap))


def parallel_map(fn: Callable[[T], R], items: Iterable[T], *, max_workers: int | None = None,
                 cpu_bound: bool = False) -> list[R]:
    """``[fn(x) for x in items]`` on a thread pool (in order); inline when one thread serves.

    >>> parallel_map(lambda x: x * 2, [1, 2, 3], max_workers=2)
    [2, 4, 6]
    """
    items = list(items)
    n = pool_size(len(items), max_workers, cpu_bound=cpu_bound)
    if n <= 1:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(fn, items))
