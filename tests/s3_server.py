"""A local S3 for tests: moto's threaded server on 127.0.0.1 and a free port.

>>> server = S3Server()                  # doctest: +SKIP
>>> endpoint = server.start()            # 'http://127.0.0.1:54321'
>>> server.stop()

moto 5.2.5 honours ``If-None-Match: *`` on ``PutObject`` (an existing key gives
``412 PreconditionFailed``), but it checks and then writes without a lock, so two racing
conditional PUTs can both succeed. Real S3 makes the check and the write one atomic step.
With ``atomic_conditional_puts=True`` (the default) the server runs its PutObject handler
under a lock, which gives S3's behaviour, so tests of ``put_if_absent`` races test kstore
and not moto's race window.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from typing import Any

__all__ = ["S3Server", "TEST_CREDENTIALS"]

#: Fake credentials moto accepts; set before any boto3 client is made.
TEST_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SECURITY_TOKEN": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}

#: Variables that could point boto3 at a real account's profile; unset while serving.
_UNSET = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE")

_put_lock = threading.Lock()
_patched = False


def _make_conditional_puts_atomic() -> None:
    """Serialize moto's PutObject handler (see the module docstring)."""
    global _patched
    if _patched:
        return
    from moto.s3.responses import S3Response

    original = S3Response.put_object

    @functools.wraps(original)
    def put_object(self: Any, *args: Any, **kwargs: Any) -> Any:
        with _put_lock:
            return original(self, *args, **kwargs)

    S3Response.put_object = put_object  # type: ignore[method-assign]
    _patched = True


class S3Server:
    """Start/stop a moto S3 server; :meth:`start` returns its endpoint URL."""

    def __init__(self, atomic_conditional_puts: bool = True) -> None:
        self.atomic_conditional_puts = atomic_conditional_puts
        self._server: Any = None
        self._saved_env: dict[str, str | None] = {}
        self.endpoint_url: str | None = None

    def start(self) -> str:
        from moto.server import ThreadedMotoServer

        # only the fake credentials, never real ones, may reach the server
        for name, value in TEST_CREDENTIALS.items():
            self._saved_env[name] = os.environ.get(name)
            os.environ[name] = value
        for name in _UNSET:
            self._saved_env[name] = os.environ.pop(name, None)
        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
        if self.atomic_conditional_puts:
            _make_conditional_puts_atomic()
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint_url = f"http://{host}:{port}"
        return self.endpoint_url

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None
        for name, value in self._saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self._saved_env.clear()

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
