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
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any, TypeAlias, TypeVar

import click

from kstore.errors import InvalidPredicateError, short_repr

log = logging.getLogger("kstore.cli")

F = TypeVar("F", bound=Callable[..., Any])
#: ``--where`` after parsing: DNF predicates, or None for no filter
Where: TypeAlias = "list[list[tuple[Any, ...]]] | None"


class UserError(click.ClickException):
    """A :class:`~kstore.errors.KstoreError` or a refusal: message on stderr, exit code 1, no traceback."""

    exit_code = 1

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"kstore: error: {self.format_message()}", err=True)


# -- --where ---------------------------------------------------------------------------------

#: a column: `any text` in backticks, or a run of characters that are no space, operator,
#: bracket, comma or quote
_COLUMN = re.compile(r"`(?P<quoted>[^`]+)`|(?P<bare>[^\s=!<>()\[\],'\"`]+)")
#: operators; the words need no space before a list or quote (``x in[1, 2]``) but never run on
#: into a name (``x inside`` is no ``in``)
_OPERATOR = re.compile(r"(?P<sym>==|!=|<=|>=|<|>|=)|(?P<word>not\s+in|in|is\s+not\s+null|is\s+null)(?![\w.])",
                       re.IGNORECASE)
#: ``and`` / ``or`` between terms: whole words after a space
_JOIN = re.compile(r"\s+(?P<word>and|or)(?=\s|$)", re.IGNORECASE)
_JOIN_WORD = re.compile(r"(?P<word>and|or)(?=\s|$)", re.IGNORECASE)
#: a second comparison run into a bare value (``7 qty > 3``): a missing ``and``
_RUN_ON = re.compile(r"\s\S+\s*(?:==|!=|<=|>=|<|>)|\s(?:not\s+in|in|is)\s", re.IGNORECASE)
_OPENERS = {"[": "]", "(": ")"}
_EXAMPLE = "write 'column op value' terms joined by 'and' / 'or', e.g. \"x == 3 and y in [1, 2]\""


def _literal(text: str) -> Any:
    """A bare value: a Python literal (``7``, ``-1.5``, ``None``) or else the text itself."""
    text = text.strip()
    try:
        return _eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return text


def _eval(text: str) -> Any:
    """``ast.literal_eval`` without its warnings (``'\\d'`` is an invalid escape sequence)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ast.literal_eval(text)


class _WhereText:
    """A cursor over one ``--where`` text; every error names the text and where it went wrong."""

    def __init__(self, raw: str) -> None:
        self.raw = raw
        self.i = 0

    def fail(self, what: str) -> InvalidPredicateError:
        rest = self.raw[self.i:].strip()
        at = f" at {rest[:40]!r}" if rest else " at the end"
        return InvalidPredicateError(f"cannot parse --where {short_repr(self.raw)}: {what}{at}; {_EXAMPLE}")

    def skip_space(self) -> None:
        while self.i < len(self.raw) and self.raw[self.i].isspace():
            self.i += 1

    def at_end(self) -> bool:
        self.skip_space()
        return self.i >= len(self.raw)

    def column(self) -> str:
        self.skip_space()
        m = _COLUMN.match(self.raw, self.i)
        if not m:
            raise self.fail("expected a column name")
        self.i = m.end()
        return m.group("quoted") if m.group("quoted") is not None else m.group("bare")

    def operator(self, column: str) -> str:
        self.skip_space()
        m = _OPERATOR.match(self.raw, self.i)
        if not m:
            raise self.fail(f"expected an operator (==, !=, <, <=, >, >=, in, not in, is null, is not null) after "
                            f"column {column!r}")
        self.i = m.end()
        return m.group("sym") or " ".join(m.group("word").lower().split())

    def _quoted_end(self, start: int) -> int:
        """The index after the string literal that starts at ``start`` (backslash escapes)."""
        quote, j = self.raw[start], start + 1
        while j < len(self.raw):
            if self.raw[j] == "\\":
                j += 2
                continue
            if self.raw[j] == quote:
                return j + 1
            j += 1
        self.i = start
        raise self.fail(f"unterminated string (no closing {quote})")

    def _bracket_end(self, start: int) -> int:
        """The index after the bracketed list that starts at ``start`` (quotes respected)."""
        stack: list[str] = []
        j = start
        while j < len(self.raw):
            c = self.raw[j]
            if c in "'\"":
                j = self._quoted_end(j)
                continue
            if c in _OPENERS:
                stack.append(_OPENERS[c])
            elif c in ")]":
                if not stack or stack.pop() != c:
                    self.i = j
                    raise self.fail(f"unexpected {c!r}")
                if not stack:
                    return j + 1
            j += 1
        self.i = start
        raise self.fail(f"unclosed {self.raw[start]!r}")

    def _scalar(self, text: str, what: str) -> Any:
        """One value of a list written without Python quotes (``[a, 2024-01-02, 3]``)."""
        text = text.strip()
        if not text or text[0] in "[(" or text[0] in "=!<>":
            raise self.fail(f"cannot read {what} {text!r}")
        return _literal(text)

    def value(self, column: str, op: str) -> Any:
        self.skip_space()
        start = self.i
        if start >= len(self.raw) or _JOIN_WORD.match(self.raw, start):
            raise self.fail(f"expected a value after {column!r} {op}")
        c = self.raw[start]
        if c in "'\"":
            end = self._quoted_end(start)
            try:
                value = _eval(self.raw[start:end])
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                raise self.fail(f"cannot read the string {self.raw[start:end]!r}") from None
            self.i = end
            return value
        if c in _OPENERS:
            end = self._bracket_end(start)
            self.i = end
            text = self.raw[start:end]
            try:
                return _eval(text)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                pass
            # items without Python quotes: [a, b], [2024-01-02, 2024-01-03]
            inner = text[1:-1]
            if any(ch in inner for ch in "[]()'\""):
                self.i = start
                raise self.fail(f"cannot read the list {text!r}") from None
            items = inner.split(",")
            if len(items) > 1 and not items[-1].strip():
                items.pop()  # a trailing comma
            if len(items) == 1 and not items[0].strip():
                return []
            self.i = start
            value = [self._scalar(item, "the list item") for item in items]
            self.i = end
            return value
        if c in "=!<>)],":
            raise self.fail(f"expected a value after {column!r} {op}")
        # bare text or a number: up to the next ' and ' / ' or ' (a timestamp may hold a space)
        m = _JOIN.search(self.raw, start)
        end = m.start() if m else len(self.raw)
        text = self.raw[start:end].strip()
        if _RUN_ON.search(text):  # 'x == 7 qty > 3': no text value holds a spaced-out comparison
            self.i = start + len(text.split()[0])
            raise self.fail("expected 'and' or 'or' between two terms (quote a text value that holds an operator)")
        self.i = end
        return _literal(text)

    def term(self) -> tuple[Any, ...]:
        column = self.column()
        op = self.operator(column)
        if op in ("is null", "is not null"):
            return (column, op)
        value = self.value(column, op)
        if op in ("in", "not in") and isinstance(value, (tuple, set, frozenset)):
            value = list(value)  # 'x in (1, 2)', 'x in 1, 2'
        return (column, op, value)

    def join(self) -> str | None:
        """``"and"`` / ``"or"`` between two terms, or None at the end."""
        if self.at_end():
            return None
        after_term = self.raw[self.i - 1].isspace() or self.raw[self.i - 1] in "'\")]"
        m = _JOIN_WORD.match(self.raw, self.i) if after_term else None
        if not m:
            raise self.fail("expected 'and', 'or' or the end after a term")
        self.i = m.end()
        if self.at_end():
            raise self.fail(f"expected a term after {m.group('word').lower()!r}")
        return m.group("word").lower()


def parse_where_text(raw: str) -> list[list[tuple[Any, ...]]]:
    """One ``--where`` text -> DNF: terms joined by ``and`` (binding tighter) and ``or``.

    Operators need no spaces around them (``x==7``); values are quoted strings, numbers,
    ``[...]`` / ``(...)`` lists, Python literals, or bare text (up to the next ``and`` / ``or``).

    >>> parse_where_text("loc==7 and qty > 3 or name in ('a', 'b')")
    [[('loc', '==', 7), ('qty', '>', 3)], [('name', 'in', ['a', 'b'])]]
    >>> parse_where_text("day >= 2024-01-20 and `odd col` is not null")
    [[('day', '>=', '2024-01-20'), ('odd col', 'is not null')]]
    """
    text = _WhereText(raw)
    if text.at_end():
        raise text.fail("no term")
    dnf: list[list[tuple[Any, ...]]] = [[text.term()]]
    while (word := text.join()) is not None:
        if word == "or":
            dnf.append([])
        dnf[-1].append(text.term())
    return dnf


def parse_where(terms: Sequence[str]) -> list[list[tuple[Any, ...]]] | None:
    """``["a == 1", "--or", "b in [1, 2]"]`` -> DNF predicates.

    Each term is one or more ``column op value`` conditions joined by ``and`` / ``or``
    (``and`` binds tighter: ``a == 1 and b == 2 or c == 3``); operators need no spaces
    (``x==7``). Values are quoted strings, numbers, lists (``[1, 2]``, ``(1, 2)``, ``[a, b]``),
    Python literals (``None``, ``True``) or bare text (ISO dates and timestamps are converted to
    the column type by the planner). The terms are ANDed; ``"--or"`` starts a new conjunction.

    Parameters
    ----------
    terms
        ``--where`` texts (ANDed), with ``"--or"`` starting a new conjunction.

    Returns
    -------
    list[list[tuple]] or None
        The DNF predicates, or None for no terms.

    Raises
    ------
    InvalidPredicateError
        A term cannot be parsed (the message names the text), or the terms expand to more
        conjunctions than a predicate may hold.

    Examples
    --------
    >>> parse_where(["x == 1", "y is null", "--or", "z in [1, 2]"])
    [[('x', '==', 1), ('y', 'is null')], [('z', 'in', [1, 2])]]
    >>> parse_where(["a==1 or a==2", "b > 0"])
    [[('a', '==', 1), ('b', '>', 0)], [('a', '==', 2), ('b', '>', 0)]]
    """
    if not terms:
        return None
    from kstore.core.predicates import MAX_PREDICATE_TERMS

    dnf: list[list[tuple[Any, ...]]] = []
    group: list[list[tuple[Any, ...]]] | None = None  # the conjunctions of the current --or group
    for raw in [*terms, "--or"]:
        if raw == "--or":
            dnf += group or []
            group = None
            continue
        alternatives = parse_where_text(raw)
        if group is None:
            group = alternatives
            continue
        if len(group) * len(alternatives) > MAX_PREDICATE_TERMS:  # (A or B) and (C or D): distributed
            raise InvalidPredicateError(
                f"--where {short_repr(raw)}: the ANDed --where terms expand to more than {MAX_PREDICATE_TERMS} "
                "conjunctions (each 'or' inside a term multiplies them); use 'in' lists or --or")
        group = [left + right for left in group for right in alternatives]
    return dnf or None


def _where_callback(ctx: click.Context, param: click.Parameter, value: Sequence[str] | None) -> Any:
    """``--where`` texts -> DNF predicates; a text that cannot be parsed is a usage error (exit 2)."""
    try:
        return parse_where(value or ())
    except InvalidPredicateError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None


class Command(click.Command):
    """A ``kstore`` command: its help option has the default it behaves with (``False``), not
    click's unset marker, which reference generators (mkdocs-click) print as ``Sentinel.UNSET``."""

    def get_help_option(self, ctx: click.Context) -> click.Option | None:
        return settled_help_option(super().get_help_option(ctx))


def settled_help_option(option: click.Option | None) -> click.Option | None:
    if option is not None and option.is_flag and option.default is not False:
        option.default = False  # click >= 8.3 leaves an unset marker (the option shows no value either way)
    return option


class WhereCommand(Command):
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
    """``--where`` (parsed into DNF predicates, or None, before the command runs) and ``--or``."""
    f = click.option("--or", "or_", is_flag=True, default=False,
                     help="Start a new conjunction (OR) of --where terms.")(f)
    f = click.option("--where", "where", multiple=True, default=None, metavar="'COL OP VALUE'",
                     callback=_where_callback,
                     help="A predicate, e.g. 'loc == 7', 'loc==7 and qty > 3', 'day >= 2024-01-20', "
                          "\"name in ['a', 'b']\", 'y is null'; 'and' binds tighter than 'or'. "
                          "Several --where are ANDed.")(f)
    return f


def count(n: int, noun: str) -> str:
    """``count(1, "file")`` -> ``"1 file"``, ``count(3, "file")`` -> ``"3 files"``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


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
