"""Credentials out of everything kstore shows: URLs, error messages, reprs and log records.

The one place that decides what a secret looks like; every store backend uses it.

- The user info of a URL (``scheme://user:password@host``) becomes ``***`` (the whole of it:
  in minimalkv's ``s3://key:secret@host/bucket`` the "user" is an access key id).
- Query parameters whose name looks secret (``session_token=``, ``sig=``, ``account_key=``)
  keep their name, their value becomes ``***``; a query value that is itself a URL
  (``?endpoint_url=http://user:pw@host``) is redacted as a URL.
- Values the caller knows are secret (configured credentials) become ``***`` wherever they
  appear in a text, raw or percent-encoded.

Examples
--------
>>> redact_url("s3://AKID:s3cr3t@host:9000/bkt?session_token=t&is_secure=false")
's3://***@host:9000/bkt?session_token=***&is_secure=false'
>>> redact_url("s3://bkt/p?endpoint_url=http://user:pw@127.0.0.1:9000")
's3://bkt/p?endpoint_url=http://***@127.0.0.1:9000'
>>> redact_text('Could not connect to "http://user:pw@127.0.0.1:1/bkt/k"', secrets=["pw"])
'Could not connect to "http://***@127.0.0.1:1/bkt/k"'
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable

__all__ = ["redact_url", "redact_text", "redact_exception", "url_secrets", "has_userinfo", "MIN_SECRET_LENGTH"]

#: Known secrets shorter than this are not searched for in texts (replacing every ``"a"`` of a
#: message would make it unreadable, and says more about the secret than leaving it).
MIN_SECRET_LENGTH = 4

_SECRET_NAME = re.compile(r"(?i)(token|secret|key|passw|pwd|signature|sig\b|sig$|credential|auth)")
#: A query parameter whose value is a URL: ``?endpoint_url=http://``, ``&base_url=https://``.
_NESTED_URL_PARAM = re.compile(r"[?&][^?&=#]*=[A-Za-z][A-Za-z0-9+.-]*(?:://|%3A%2F%2F)", re.IGNORECASE)
#: ``scheme://<user info>@`` in free text (also with a percent-encoded ``@``); the user info
#: runs to the last ``@`` before a ``/``, a space or a quote.
_TEXT_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^\s/'\"<>`]*(?:@|%40)")
#: ``?name=value`` / ``&name=value`` with a secret-looking name, in free text.
_TEXT_SECRET_PARAM = re.compile(
    r"(?i)([?&;][\w.-]*?(?:token|secret|key|passw|pwd|signature|sig|credential)[\w.-]*=)[^&\s\"'<>#`]+"
)


def redact_url(url: str) -> str:
    """``url`` without credentials: its user info becomes ``***`` and the values of query
    parameters that look secret (``session_token=...``) become ``***``; a query value that
    is itself a URL is redacted the same way. Use it wherever a URL is shown.

    Parameters
    ----------
    url
        Any URL (text that is no URL comes back unchanged).

    Returns
    -------
    str
        The URL with credentials replaced; unchanged when it has none.

    Examples
    --------
    >>> redact_url("s3://AKID:s3cr3t@host:9000/bkt?session_token=t&is_secure=false")
    's3://***@host:9000/bkt?session_token=***&is_secure=false'
    >>> redact_url("memory://user:password@name")
    'memory://***@name'
    >>> redact_url("s3://bkt/p?endpoint_url=http://127.0.0.1:9000")
    's3://bkt/p?endpoint_url=http://127.0.0.1:9000'
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    head = _head(rest)
    tail = rest[len(head) :]
    if "@" in head:  # everything before the last "@" may be credentials, even unencoded ones
        head = "***" + head[head.rfind("@") :]
    path, qmark, query = (head + tail).partition("?")
    if query:
        query = "&".join(_redact_param(item) for item in query.split("&"))
    return f"{scheme}://{path}{qmark}{query}"


def _head(rest: str) -> str:
    """The part of a URL after ``://`` where user info may be: up to a query parameter whose
    value is a URL (its ``@`` is the nested URL's)."""
    nested = _NESTED_URL_PARAM.search(rest)
    return rest[: nested.start()] if nested else rest


def has_userinfo(url: str) -> bool:
    """Whether :func:`redact_url` finds user info (credentials) in ``url``: an ``@`` after
    ``://`` that is not inside a URL-valued query parameter.

    >>> has_userinfo("s3://key:secret@host/bkt"), has_userinfo("s3://bkt?endpoint_url=http://u:p@h")
    (True, False)
    """
    _, sep, rest = url.partition("://")
    return bool(sep) and "@" in _head(rest)


def _redact_param(item: str) -> str:
    name, eq, value = item.partition("=")
    if not eq:
        return item
    if _SECRET_NAME.search(name):
        return f"{name}=***"
    plain = urllib.parse.unquote_plus(value)
    if "://" in plain:
        shown = redact_url(plain)
        if shown != plain:
            return f"{name}={shown}"
    return item


def url_secrets(url: str) -> list[str]:
    """The secrets a URL carries: its user info (whole, and each ``:``-separated part) and
    the values of secret-looking query parameters, raw and percent-decoded.

    Parameters
    ----------
    url
        Any URL.

    Returns
    -------
    list[str]
        The secrets, longest first (for :func:`redact_text`'s ``secrets``).

    Examples
    --------
    >>> url_secrets("redis://:p%40ss@host/0")
    [':p%40ss', 'p%40ss', ':p@ss', 'p@ss']
    """
    found: set[str] = set()
    _, sep, rest = url.partition("://")
    if not sep:
        return []
    head = _head(rest)
    if "@" in head:
        userinfo = head[: head.rfind("@")]
        found |= {userinfo, *userinfo.split(":")}
    query = rest.partition("?")[2]
    for item in query.split("&") if query else ():
        name, eq, value = item.partition("=")
        if eq and _SECRET_NAME.search(name):
            found.add(value)
        elif eq and "://" in urllib.parse.unquote_plus(value):
            found |= set(url_secrets(urllib.parse.unquote_plus(value)))
    found |= {urllib.parse.unquote_plus(s) for s in found}
    return sorted((s for s in found if s), key=lambda s: (-len(s), s))


def redact_text(text: str, secrets: Iterable[str | None] = ()) -> str:
    """``text`` (an error message from a library, a repr) with credentials replaced by ``***``:
    the user info of every URL in it, secret-looking query parameters, and each of
    ``secrets`` (raw, percent-encoded and percent-decoded; those shorter than
    :data:`MIN_SECRET_LENGTH` characters are not searched for).

    Parameters
    ----------
    text
        The text to show.
    secrets
        Values known to be secret (None entries are skipped).

    Returns
    -------
    str
        The text with credentials replaced.

    Examples
    --------
    >>> redact_text("GET https://acct.blob.core.windows.net/c/k?sv=2024&sig=abc%3D failed")
    'GET https://acct.blob.core.windows.net/c/k?sv=2024&sig=*** failed'
    >>> redact_text("invalid token AKIA-1234 for user", secrets=["AKIA-1234"])
    'invalid token *** for user'
    """
    text = str(text)
    variants: set[str] = set()
    for secret in secrets:
        if not isinstance(secret, str) or len(secret) < MIN_SECRET_LENGTH:
            continue
        variants |= {
            secret,
            urllib.parse.quote(secret, safe=""),
            urllib.parse.quote_plus(secret),
            urllib.parse.quote(secret),
            urllib.parse.unquote_plus(secret),
        }
    for variant in sorted((v for v in variants if len(v) >= MIN_SECRET_LENGTH), key=len, reverse=True):
        text = text.replace(variant, "***")
    text = _TEXT_USERINFO.sub(r"\1***@", text)
    return _TEXT_SECRET_PARAM.sub(r"\1***", text)


def redact_exception(exc: BaseException, secrets: Iterable[str | None] = ()) -> str:
    """:func:`redact_text` of ``str(exc)``; also redacts, in place, the text arguments of
    ``exc`` and of the exceptions it was raised from (``__cause__``/``__context__``), so that
    a traceback of a kstore error that chains a library's error (a botocore or obstore
    message quoting ``http://user:password@host/...``) shows no credential either.

    Parameters
    ----------
    exc
        A library's exception that kstore wraps in its own.
    secrets
        Values known to be secret.

    Returns
    -------
    str
        The redacted text of ``exc``.

    Examples
    --------
    >>> exc = ConnectionError('Could not connect to "http://user:pw@127.0.0.1:1/k"')
    >>> redact_exception(exc), exc.args
    ('Could not connect to "http://***@127.0.0.1:1/k"', ('Could not connect to "http://***@127.0.0.1:1/k"',))
    """
    secrets = [s for s in secrets if isinstance(s, str)]
    text = redact_text(str(exc), secrets)
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(seen) < 16:
        seen.add(id(current))
        try:
            args = tuple(redact_text(a, secrets) if isinstance(a, str) else a for a in current.args)
            if args != current.args:
                current.args = args
        except Exception:  # an exception type whose args cannot be set: its text stays as it is
            pass
        current = current.__cause__ or current.__context__
    return text
