"""A fault-injecting HTTP/1.1 proxy for S3 tests: 127.0.0.1, a free port, stdlib only.

Put it between a store and the moto server (tests/s3_server.py) to make the store see what
real S3 does under load and on bad networks:

>>> proxy = FaultProxy("http://127.0.0.1:5000")            # doctest: +SKIP
>>> endpoint = proxy.start()                                # 'http://127.0.0.1:54321'
>>> proxy.hold_conditional_puts(match=lambda path: "/_kstore/log/" in path, hold_seconds=2.0)
>>> proxy.set_faults(fail_rate=0.05, drop_rate=0.05, seed=7)
>>> proxy.counters()["held"], proxy.wait_idle()            # doctest: +SKIP
>>> proxy.stop()

**Held conditional PUTs** (:meth:`FaultProxy.hold_conditional_puts`): the first ``count``
``PUT`` requests with ``If-None-Match: *`` whose path ``match`` accepts are *held*: the proxy
reads the whole request, closes the client's connection without answering (so the client
library retries, or reports a connection error), and forwards the request upstream
``hold_seconds`` later from a background thread. While a request of a key is held (until its
upstream answer came back), every other conditional ``PUT`` of that key is answered ``409
ConditionalRequestConflict`` with S3's XML error body, as S3 answers a conditional write that
meets another one still in flight. Plain ``PUT``s and reads of the key are forwarded: a
``GET`` finds nothing until the held request has landed.
With ``until=predicate(proxy)`` the hold also lasts until the predicate holds (the client's
own retries met it N times, another writer's PUT met it: :meth:`FaultProxy.counters`,
:meth:`FaultProxy.conflict_bodies`), ``max_hold_seconds`` at most;
:meth:`FaultProxy.release_held` forwards held requests at once.

**Random faults** (:meth:`FaultProxy.set_faults`), drawn from ``random.Random(seed)`` per
request in arrival order (reproducible for one sequence of requests): ``fail_rate`` answers
``500 InternalError`` or ``503 SlowDown`` without forwarding (nothing happened upstream);
``drop_rate`` forwards the request, then closes the connection without answering (it took
effect, the client sees a connection error).

Every request is counted (:meth:`FaultProxy.counters`) and recorded (:attr:`FaultProxy.events`:
:class:`ProxyEvent` with the client's ``User-Agent``, which tells writers apart);
:meth:`FaultProxy.stop` is bounded and leaves no thread running.
HTTP ``Transfer-Encoding: chunked`` request bodies are de-chunked (forwarded with a
``Content-Length``); other bodies (``aws-chunked`` content encoding included) are forwarded
byte for byte with their headers. ``Expect: 100-continue`` is answered by the proxy.
"""

from __future__ import annotations

import http.client
import random
import socket
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NamedTuple

__all__ = ["FaultProxy", "ProxyEvent", "is_log_entry_path"]

#: Headers of one connection, not of the request (RFC 9110 7.6.1), plus ``Expect`` (the proxy
#: answered it) and ``Content-Length`` (set again from the body forwarded).
_HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection", "te",
    "trailer", "transfer-encoding", "upgrade", "expect", "content-length",
})
_UPSTREAM_TIMEOUT = 30.0
#: A client connection idle this long is closed (keep-alive connections otherwise wait forever).
_IDLE_TIMEOUT = 30.0


def is_log_entry_path(path: str) -> bool:
    """Whether a request path names a kstore log entry (``.../_kstore/log/<20 digits>.json``).

    >>> is_log_entry_path("/bkt/ds/_kstore/log/00000000000000000001.json")
    True
    >>> is_log_entry_path("/bkt/ds/_kstore/log/_last_checkpoint.json")
    False
    """
    path = urllib.parse.unquote(urllib.parse.urlsplit(path).path)
    head, sep, name = path.rpartition("/_kstore/log/")
    stem, dot, ext = name.partition(".")
    return bool(sep) and ext == "json" and len(stem) == 20 and stem.isdigit()


def _error_xml(code: str, message: str, resource: str) -> bytes:
    request_id = uuid.uuid4().hex[:16].upper()
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{message}</Message><Resource>{resource}</Resource>"
        f"<RequestId>{request_id}</RequestId></Error>"
    ).encode()


class ProxyEvent(NamedTuple):
    """One request the proxy handled (:attr:`FaultProxy.events`)."""

    #: ``forward``, ``hold``, ``conflict`` (409 sent), ``fail`` (5xx sent), ``drop`` (forwarded,
    #: answer dropped), ``held-forward`` (a held request forwarded; ``status``: upstream's answer)
    action: str
    method: str
    #: the request path, query included
    path: str
    #: the status the client got (upstream's for ``held-forward``); None when it got no answer
    status: int | None
    #: whether a request of this key was held when this one arrived
    held: bool
    #: the client's ``User-Agent`` (tells writers apart: boto3 ``user_agent_extra``, obstore ``user_agent``)
    agent: str
    #: the body of a conditional PUT (b"" for other requests)
    body: bytes


class _Request:
    """One request as read from the client (body de-chunked)."""

    __slots__ = ("method", "path", "headers", "body")

    def __init__(self, method: str, path: str, headers: list[tuple[str, str]], body: bytes) -> None:
        self.method = method
        self.path = path
        self.headers = headers
        self.body = body

    @property
    def key(self) -> str:
        """The object the request is about: its path without the query."""
        return urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)

    def header(self, name: str) -> str | None:
        low = name.lower()
        return next((v for k, v in self.headers if k.lower() == low), None)

    @property
    def conditional_put(self) -> bool:
        return self.method == "PUT" and (self.header("If-None-Match") or "").strip() == "*"


class _Response:
    __slots__ = ("status", "reason", "headers", "body")

    def __init__(self, status: int, reason: str, headers: list[tuple[str, str]], body: bytes) -> None:
        self.status = status
        self.reason = reason
        self.headers = headers
        self.body = body


class _Server(ThreadingHTTPServer):
    """A threading server that tracks its handler threads and client sockets (for a bounded
    :meth:`FaultProxy.stop`)."""

    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def __init__(self, proxy: FaultProxy) -> None:
        self.proxy = proxy
        self.threads: set[threading.Thread] = set()
        self.connections: set[socket.socket] = set()
        self.tracked = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(target=self._serve, args=(request, client_address), daemon=True,
                                  name=f"fault-proxy-{self.server_address[1]}-conn-{client_address[1]}")
        with self.tracked:
            self.threads.add(thread)
            self.connections.add(request)
        thread.start()

    def _serve(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)
            with self.tracked:
                self.connections.discard(request)
                self.threads.discard(threading.current_thread())

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that went away is no test failure; the counters tell what happened


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = _IDLE_TIMEOUT
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass

    def do_GET(self) -> None:
        self._proxy()

    do_HEAD = do_PUT = do_POST = do_DELETE = do_PATCH = do_OPTIONS = do_GET

    def _read_body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            parts: list[bytes] = []
            while True:
                size_line = self.rfile.readline(65537)
                size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline(3)  # the CRLF after the chunk
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _proxy(self) -> None:
        body = self._read_body()
        request = _Request(self.command, self.path, list(self.headers.items()), body)
        response = self.server.proxy._handle(request)
        if response is None:  # drop the connection without an answer
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        self.send_response_only(response.status, response.reason)
        for name, value in response.headers:
            if name.lower() not in _HOP_BY_HOP:
                self.send_header(name, value)
        if self.command == "HEAD":
            length = next((v for k, v in response.headers if k.lower() == "content-length"), None)
            if length is not None:
                self.send_header("Content-Length", length)
        elif response.status not in (204, 304) and not 100 <= response.status < 200:
            self.send_header("Content-Length", str(len(response.body)))
        self.end_headers()
        if self.command != "HEAD" and response.body:
            self.wfile.write(response.body)
        self.wfile.flush()

    def finish(self) -> None:
        try:
            super().finish()
        except OSError:
            pass


class FaultProxy:
    """An HTTP proxy on 127.0.0.1 in front of ``upstream`` (``http://host:port``) that injects
    S3 faults; see the module docstring.

    Parameters
    ----------
    upstream
        The endpoint URL requests are forwarded to (the moto server).
    seed
        Seed of the random faults (:meth:`set_faults` may set another).
    """

    def __init__(self, upstream: str, *, seed: int = 0) -> None:
        parts = urllib.parse.urlsplit(upstream)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"upstream must be http://host:port, not {upstream!r}")
        self.upstream = upstream
        self._upstream_addr = (parts.hostname, parts.port or 80)
        self._lock = threading.RLock()  # re-entrant: an ``until`` predicate may call counters()
        self._changed = threading.Condition(self._lock)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._closing = threading.Event()  # set while stopping or resetting: holds end at once
        self._forwarders: set[threading.Thread] = set()
        self.endpoint: str | None = None
        self._name = "fault-proxy"  # threads are named fault-proxy-<port>-...
        self._reset_state(seed)

    def _reset_state(self, seed: int) -> None:
        self._rng = random.Random(seed)
        self._fail_rate = 0.0
        self._drop_rate = 0.0
        self._fault_match: Callable[[str, str], bool] | None = None
        self._hold_match: Callable[[str], bool] = is_log_entry_path
        self._hold_seconds = 0.0
        self._hold_until: Callable[[FaultProxy], bool] | None = None
        self._hold_max_seconds = 30.0
        self._hold_left = 0
        self._held: dict[str, bytes] = {}  # key -> body of the request held for it
        self._releases: dict[str, threading.Event] = {}  # key -> set to forward its request now
        self._counts: dict[str, int] = dict.fromkeys(
            ("requests", "forwarded", "held", "held_forwarded", "conflicts", "conflicts_same_body",
             "failed", "dropped", "reads_missed_held"), 0)
        #: every request handled (:class:`ProxyEvent`), in the order they were answered
        self.events: list[ProxyEvent] = []

    # -- life cycle -------------------------------------------------------------------------

    def start(self) -> str:
        """Start serving; returns the proxy's endpoint URL ``http://127.0.0.1:<port>``."""
        if self._server is not None:
            raise RuntimeError("the proxy is running already")
        self._closing.clear()
        self._server = _Server(self)
        port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True, name=f"fault-proxy-{port}")
        self._thread.start()
        self.endpoint = f"http://127.0.0.1:{port}"
        self._name = f"fault-proxy-{port}"
        return self.endpoint

    def stop(self, timeout: float = 10.0) -> None:
        """Stop serving: held requests are forwarded now, client connections closed, and every
        thread of the proxy joined (raises RuntimeError if one is still running after
        ``timeout`` seconds)."""
        server = self._server
        if server is None:
            return
        deadline = time.monotonic() + timeout
        self._closing.set()
        self.release_held()  # held requests stop waiting and are forwarded at once
        server.shutdown()
        server.server_close()
        with server.tracked:
            connections = list(server.connections)
        for conn in connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        with self._lock:
            threads = [*self._forwarders]
        with server.tracked:
            threads += list(server.threads)
        if self._thread is not None:
            threads.append(self._thread)
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        left = [t.name for t in threads if t.is_alive()]
        self._server = None
        self._thread = None
        if left:
            raise RuntimeError(f"fault proxy threads still running after {timeout} s: {left}")

    def __enter__(self) -> FaultProxy:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def reset(self, seed: int = 0, timeout: float = 10.0) -> None:
        """Forward held requests now, wait until they landed, then clear faults, holds,
        counters and events (for the next test)."""
        self._closing.set()
        self.release_held()
        try:
            if not self.wait_idle(timeout):
                raise RuntimeError(f"held requests did not land within {timeout} s")
        finally:
            self._closing.clear()
        with self._lock:
            self._reset_state(seed)

    # -- switches ---------------------------------------------------------------------------

    def hold_conditional_puts(self, match: Callable[[str], bool] | None = None, hold_seconds: float = 2.0,
                              count: int = 1, *, until: Callable[[FaultProxy], bool] | None = None,
                              max_hold_seconds: float = 30.0) -> None:
        """Hold the next ``count`` conditional PUTs (``If-None-Match: *``) whose path ``match``
        accepts (default :func:`is_log_entry_path`); see the module docstring.

        A held request is forwarded once ``hold_seconds`` have passed and ``until(proxy)``
        (if given; evaluated whenever a counter changes) is true, after ``max_hold_seconds``
        at the latest, or at once by :meth:`release_held`. ``until`` makes a hold outlast
        what a test needs it to, whatever the machine's speed: say, the client's own retries
        (``lambda p: p.counters()["conflicts_same_body"] >= 5``)."""
        if not 0 <= hold_seconds <= max_hold_seconds:
            raise ValueError("need 0 <= hold_seconds <= max_hold_seconds")
        with self._lock:
            self._hold_match = match or is_log_entry_path
            self._hold_seconds = float(hold_seconds)
            self._hold_until = until
            self._hold_max_seconds = float(max_hold_seconds)
            self._hold_left = int(count)

    def set_faults(self, fail_rate: float = 0.0, drop_rate: float = 0.0, *, seed: int | None = None,
                   match: Callable[[str, str], bool] | None = None) -> None:
        """Inject random faults into requests ``match(method, path)`` accepts (default: all):
        ``fail_rate`` 500/503 answers without forwarding, ``drop_rate`` forwarded requests
        whose answer is dropped. ``seed`` restarts the random sequence."""
        if not (0 <= fail_rate and 0 <= drop_rate and fail_rate + drop_rate <= 1):
            raise ValueError("fail_rate and drop_rate must be >= 0 and add up to at most 1")
        with self._lock:
            self._fail_rate = float(fail_rate)
            self._drop_rate = float(drop_rate)
            self._fault_match = match
            if seed is not None:
                self._rng = random.Random(seed)

    def release_held(self) -> int:
        """Forward every request held now at once (instead of after ``hold_seconds``); returns
        how many were released. :meth:`wait_idle` waits until they landed."""
        with self._changed:
            events = list(self._releases.values())
            for event in events:
                event.set()
            self._changed.notify_all()
        return len(events)

    # -- observation ------------------------------------------------------------------------

    def counters(self) -> dict[str, int]:
        """A copy of the counters: ``requests`` seen, ``forwarded`` at once, ``held``,
        ``held_forwarded``, ``conflicts`` (409s sent; ``conflicts_same_body``: of those, with
        the held request's bytes, i.e. the client's own retry), ``failed`` (5xx injected),
        ``dropped`` (forwarded, answer dropped), ``reads_missed_held`` (GET/HEAD of a held
        key answered 404: a read-back that found nothing yet)."""
        with self._lock:
            return dict(self._counts)

    def conflict_bodies(self) -> list[bytes]:
        """The bodies of the conditional PUTs answered 409, in order (to tell writers apart)."""
        with self._lock:
            return [e.body for e in self.events if e.action == "conflict"]

    def held_statuses(self) -> list[int | None]:
        """The upstream status of every held request forwarded so far (None: no answer)."""
        with self._lock:
            return [e.status for e in self.events if e.action == "held-forward"]

    def holding(self) -> bool:
        """Whether a request is held (or being forwarded) now."""
        with self._lock:
            return bool(self._held)

    def wait_held(self, n: int = 1, timeout: float = 10.0) -> bool:
        """Wait until ``n`` requests in all have been held; False on timeout."""
        return self.wait_counters(lambda counts: counts["held"] >= n, timeout)

    def wait_counters(self, predicate: Callable[[dict[str, int]], bool], timeout: float = 10.0) -> bool:
        """Wait until ``predicate(counters)`` holds (checked whenever a counter changes);
        False on timeout. ``wait_counters(lambda c: c["conflicts"] > c["conflicts_same_body"])``
        waits for another writer's conditional PUT to meet a held one."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate(dict(self._counts)):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
            return True

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Wait until no request is held (every held one was forwarded and answered)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self._held:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
        with self._lock:
            threads = list(self._forwarders)
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in threads)

    # -- the work ---------------------------------------------------------------------------

    def _count(self, name: str, action: str, request: _Request, status: int | None, held: bool) -> None:
        self._counts[name] += 1
        self.events.append(ProxyEvent(action, request.method, request.path, status, held,
                                      request.header("User-Agent") or "",
                                      request.body if request.conditional_put else b""))
        self._changed.notify_all()

    def _handle(self, request: _Request) -> _Response | None:
        """The answer to send, or None to drop the connection."""
        drop = False
        with self._lock:
            self._counts["requests"] += 1
            key = request.key
            held = key in self._held
            if request.conditional_put and held:
                if self._held[key] == request.body:
                    self._counts["conflicts_same_body"] += 1
                self._count("conflicts", "conflict", request, 409, held)
                return self._conflict(request)
            if request.conditional_put and self._hold_left > 0 and self._hold_match(request.path):
                self._hold_left -= 1
                self._held[key] = request.body
                release = self._releases[key] = threading.Event()
                if self._closing.is_set():
                    release.set()
                self._count("held", "hold", request, None, held)
                hold = (time.monotonic(), self._hold_seconds, self._hold_max_seconds, self._hold_until)
                thread = threading.Thread(target=self._forward_later, args=(request, hold, release),
                                          daemon=True, name=f"{self._name}-hold-{self._counts['held']}")
                self._forwarders.add(thread)
                thread.start()
                return None
            matched = self._fault_match is None or self._fault_match(request.method, request.path)
            if matched and (self._fail_rate or self._drop_rate):
                draw = self._rng.random()
                if draw < self._fail_rate:
                    status = self._rng.choice((500, 503))
                    self._count("failed", "fail", request, status, held)
                    return self._failure(request, status)
                drop = draw < self._fail_rate + self._drop_rate
        response = self._forward(request)
        with self._lock:
            if held and request.method in ("GET", "HEAD") and response.status == 404:
                self._counts["reads_missed_held"] += 1
            self._count("dropped" if drop else "forwarded", "drop" if drop else "forward", request,
                        None if drop else response.status, held)
        return None if drop else response

    def _forward_later(self, request: _Request, hold: tuple[float, float, float, Callable[[FaultProxy], bool] | None],
                       release: threading.Event) -> None:
        status: int | None = None
        start, least, most, until = hold
        try:
            with self._changed:
                while not release.is_set():
                    now = time.monotonic()
                    if now >= start + most:
                        break
                    if now >= start + least and (until is None or self._until_safe(until)):
                        break
                    # counter changes wake this up; the poll covers an ``until`` on other state
                    self._changed.wait(min(start + most, max(start + least, now + 0.05)) - now)
            status = self._forward(request).status
        except Exception:
            status = None
        finally:
            with self._lock:
                self._held.pop(request.key, None)
                self._releases.pop(request.key, None)
                self._count("held_forwarded", "held-forward", request, status, True)
                self._forwarders.discard(threading.current_thread())

    def _until_safe(self, until: Callable[[FaultProxy], bool]) -> bool:
        try:
            return bool(until(self))
        except Exception:  # a broken predicate must not lose the request: forward it
            return True

    def _forward(self, request: _Request) -> _Response:
        conn = http.client.HTTPConnection(*self._upstream_addr, timeout=_UPSTREAM_TIMEOUT)
        try:
            conn.putrequest(request.method, request.path, skip_host=True, skip_accept_encoding=True)
            for name, value in request.headers:
                if name.lower() not in _HOP_BY_HOP:
                    conn.putheader(name, value)
            if request.body or request.method in ("PUT", "POST"):
                conn.putheader("Content-Length", str(len(request.body)))
            conn.endheaders(request.body or None)
            upstream = conn.getresponse()
            body = upstream.read()
            return _Response(upstream.status, upstream.reason, upstream.getheaders(), body)
        except (OSError, http.client.HTTPException) as exc:
            return _Response(502, "Bad Gateway", [("Content-Type", "application/xml")],
                             _error_xml("BadGateway", f"fault proxy: upstream failed: {exc}", request.key))
        finally:
            conn.close()

    @staticmethod
    def _conflict(request: _Request) -> _Response:
        message = ("A conflicting conditional operation is currently in progress against this resource. "
                   "Please try again.")
        return _Response(409, "Conflict", [("Content-Type", "application/xml"),
                                           ("x-amz-request-id", uuid.uuid4().hex[:16].upper())],
                         _error_xml("ConditionalRequestConflict", message, request.key))

    @staticmethod
    def _failure(request: _Request, status: int) -> _Response:
        code, reason, message = (
            ("InternalError", "Internal Server Error", "We encountered an internal error. Please try again.")
            if status == 500 else ("SlowDown", "Service Unavailable", "Please reduce your request rate."))
        return _Response(status, reason, [("Content-Type", "application/xml"),
                                          ("x-amz-request-id", uuid.uuid4().hex[:16].upper())],
                         _error_xml(code, message, request.key))
