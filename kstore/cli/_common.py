"""What every ``kstore`` command shares: output (plain, rich tables, JSON), errors and exit
codes, ``--where`` parsing, confirmation of destructive commands, progress."""

from __future__ import annotations

import ast
import base64
import contextlib
import dataclasses
import datetime as dt
import decimal
import json
import logging
import math
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any, TypeVar

import click

from kstore.errors import InvalidPredicateError

log = logging.getLogger("kstore.cli")

F = TypeVar("F", bound=Callable[..., Any])

_TERM = re.compile(r"^\s*(?P<col>[^\s]+)\s+(?P<op>==|!=|<=|>=|<|>|=|not in|in|is not null|is null)\s*(?P<val>.*)$",
                   re.IGNORECASE)


class UserError(click.ClickException):
    """A :class:`~kstore.errors.KstoreError` or a refusal: message on stderr, exit code 1, no traceback."""

    exit_code = 1

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"kstore: error: {self.format_message()}", err=True)


# -- --where ---------------------------------------------------------------------------------


def _literal(text: str) -> Any:
    text = text.strip()
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text


def parse_where(terms: Sequence[str]) -> list[list[tuple[Any, ...]]] | None:
    """``["a == 1", "--or", "b in [1, 2]"]`` -> DNF predicates.

    Values are Python literals (``7``, ``'x'``, ``[1, 2]``, ``None``) or bare text (ISO dates and
    timestamps are converted to the column type by the planner).

    Parameters
    ----------
    terms
        ``"column op value"`` terms (ANDed), with ``"--or"`` starting a new conjunction.

    Returns
    -------
    list[list[tuple]] or None
        The DNF predicates, or None for no terms.

    Raises
    ------
    InvalidPredicateError
        A term cannot be parsed.

    Examples
    --------
    >>> parse_where(["x == 1", "y is null", "--or", "z in [1, 2]"])
    [[('x', '==', 1), ('y', 'is null')], [('z', 'in', [1, 2])]]
    """
    if not terms:
        return None
    dnf: list[list[tuple[Any, ...]]] = [[]]
    for raw in terms:
        if raw == "--or":
            dnf.append([])
            continue
        m = _TERM.match(raw)
        if not m:
            raise InvalidPredicateError(f"cannot parse --where {raw!r}; write 'column op value', e.g. 'x == 3'")
        op = m.group("op").lower()
        if op in ("is null", "is not null"):
            dnf[-1].append((m.group("col"), op))
        else:
            dnf[-1].append((m.group("col"), op, _literal(m.group("val"))))
    return [c for c in dnf if c] or None


class WhereCommand(click.Command):
    """A command whose ``--or`` starts a new conjunction between ``--where`` terms (the order of
    the two options matters, so ``--or`` travels as a ``--where`` marker)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        rewritten: list[str] = []
        for i, arg in enumerate(args):
            if arg == "--or" and not (i and args[i - 1] == "--where"):
                rewritten += ["--where", "--or"]
            else:
                rewritten.append(arg)
        return super().parse_args(ctx, rewritten)


def where_options(f: F) -> F:
    f = click.option("--or", "or_", is_flag=True, help="Start a new conjunction (OR) of --where terms.")(f)
    f = click.option("--where", "where", multiple=True, metavar="'COL OP VALUE'",
                     help="A predicate term, e.g. 'loc == 7', 'day >= 2024-01-20', 'x in [1, 2]', 'y is null'; "
                          "terms are ANDed.")(f)
    return f


def columns_option(text: str | None) -> list[str] | None:
    return [c for c in text.split(",") if c] if text else None


# -- output ----------------------------------------------------------------------------------


def console(stderr: bool = False) -> Any:
    """A rich console on the current stdout/stderr (looked up now: tests swap them)."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    tty = stream.isatty()
    return Console(file=stream, width=None if tty else 200, force_terminal=False if not tty else None,
                   no_color=not tty, highlight=False, soft_wrap=False)


def table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Print a rich table to stdout (values shown with :func:`text`)."""
    from rich import box
    from rich.table import Table

    t = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left", show_edge=False)
    for c in columns:
        t.add_column(c, overflow="fold")
    for r in rows:
        t.add_row(*(text(v) for v in r))
    console().print(t)


def text(value: Any) -> str:
    """A value as a human reads it (dates as ISO dates, nulls as ``null``)."""
    if value is None:
        return "null"
    if isinstance(value, (dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, bytes):
        return repr(value)
    return str(value)


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON data: dates and times as ISO 8601 text (``"2024-01-02"``, never
    epoch numbers), decimals as text, bytes as base64 text, NaN and infinities as null.

    >>> jsonable({"d": dt.date(2024, 1, 2), "x": [float("nan"), decimal.Decimal("1.50")]})
    {'d': '2024-01-02', 'x': [None, '1.50']}
    """
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if hasattr(value, "item"):  # numpy scalars
        return jsonable(value.item())
    if hasattr(value, "items"):  # mapping proxies
        return {str(k): jsonable(v) for k, v in value.items()}
    return str(value)


def emit_json(value: Any) -> None:
    """Print ``value`` as one JSON document (valid JSON: no NaN)."""
    click.echo(json.dumps(jsonable(value), indent=2, allow_nan=False, ensure_ascii=False))


# -- destructive commands --------------------------------------------------------------------


def confirm_or_refuse(yes: bool, action: str, flag_hint: str = "--yes") -> None:
    """Go on with ``--yes``; ask on an interactive terminal; refuse (exit 1) otherwise."""
    if yes:
        return
    if sys.stdin.isatty() and sys.stderr.isatty():
        if click.confirm(f"{action}?", default=False, err=True):
            return
        raise UserError("aborted; nothing was deleted")
    raise UserError(f"refusing to {action} without {flag_hint} (not an interactive session); pass {flag_hint} to "
                    "go ahead, or --dry-run to see what it would delete")


# -- progress --------------------------------------------------------------------------------


def progress_enabled() -> bool:
    """Progress bars only where a human watches: stderr is a terminal."""
    return sys.stderr.isatty()


@contextlib.contextmanager
def progress(description: str, total: int | None) -> Iterator[Callable[[], None]]:
    """A rich progress bar on stderr (when it is a terminal); yields ``advance()``."""
    if not progress_enabled():
        yield lambda: None
        return
    from kstore.io.progress import bar

    with bar(description, total) as advance:
        yield advance
