"""Predicates: parse DNF, bind to a schema (columns and literal types), build Arrow filters.

A predicate is an OR of ANDs: ``[[(col, op, value), ...], ...]``. A flat list of tuples is
one AND (as pyarrow's ``filters``). Operators: ``==  !=  <  <=  >  >=  in  not in
is null  is not null``. Comparisons follow SQL/Arrow semantics: a null never satisfies a
comparison (use ``is null``); ``!=`` and ``not in`` do not match nulls.

>>> import pyarrow as pa
>>> schema = pa.schema([("day", pa.date32()), ("n", pa.int64())])
>>> dnf = bind(parse([("day", "==", "2024-01-02"), ("n", "in", [1, 2])]), schema)
>>> dnf[0][0]
Term(column='day', op='==', value=datetime.date(2024, 1, 2))
>>> bind(parse([[("n", "==", "x")]]), schema, dataset="d")
Traceback (most recent call last):
...
kstore.errors.InvalidPredicateError: dataset 'd': column 'n' is int64; cannot compare with 'x' (str)

Limits (checked by :func:`parse`, before any work; :class:`~kstore.errors.LimitExceededError`):
a predicate has at most :data:`MAX_PREDICATE_TERMS` (1024) terms over all its conjunctions
and at most :data:`MAX_PREDICATE_VALUES` (10,000,000) literals in its ``in`` lists. Its
nesting is fixed: a list of conjunctions, each a list of ``(column, op, value)`` tuples,
values are scalars (``in`` takes one flat list of them); anything deeper is an
:class:`~kstore.errors.InvalidPredicateError`. Arrow expressions are built as balanced trees.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence, Sized
from dataclasses import dataclass
from typing import Any, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.types as pat

from kstore.core.types import coerce_literal
from kstore.errors import ColumnNotFoundError, InvalidPredicateError, LimitExceededError, short_repr

__all__ = ["Term", "DNF", "PredicateTerm", "Predicates", "parse", "bind", "to_expression", "term_mask", "columns_of", "OPS", "MAX_PREDICATE_TERMS",
           "MAX_PREDICATE_VALUES"]

#: A predicate has at most this many terms over all its conjunctions. Arrow's expression
#: simplifier recurses over flattened AND/OR chains and crashes the interpreter (SIGSEGV) at
#: several thousand members, and its cost grows faster than linearly well before that.
MAX_PREDICATE_TERMS = 1024
#: The ``in`` / ``not in`` lists of a predicate hold at most this many values in all.
MAX_PREDICATE_VALUES = 10_000_000

OPS = ("==", "!=", "<", "<=", ">", ">=", "in", "not in", "is null", "is not null")
_ALIASES = {"=": "==", "<>": "!=", "not_in": "not in", "is_null": "is null",
            "is_not_null": "is not null", "notnull": "is not null", "isnull": "is null"}
#: internal ops produced by binding (never written by users)
_NEVER = "never"


@dataclass(frozen=True, slots=True)
class Term:
    """One comparison ``column op value`` (``value`` is a tuple for in / not in)."""

    column: str
    op: str
    value: Any = None


DNF = tuple[tuple[Term, ...], ...]

#: One term as users write it: ``(column, op, value)``, or ``(column, "is null")`` /
#: ``(column, "is not null")``.
PredicateTerm: TypeAlias = tuple[str, str] | tuple[str, str, Any]
#: The ``predicates`` argument: DNF ``[[term, ...], ...]`` (an OR of ANDs), a flat list of
#: terms (one AND), or None for no filter. (Spelled as one sequence of terms-or-conjunctions:
#: a union of the two list types defeats type checkers' inference of list literals.)
Predicates: TypeAlias = Sequence[PredicateTerm | Sequence[PredicateTerm]] | None


def _is_container(value: Any) -> bool:
    return isinstance(value, Iterable) and not isinstance(value, (str, bytes, bytearray))


def _literal(column: str, value: Any, where: str) -> Any:
    if _is_container(value):
        raise InvalidPredicateError(
            f"predicate on column {column!r}: {where} {short_repr(value)} is a {type(value).__name__}; "
            "compare with one value ('in' takes one flat list of values)"
        )
    return value


def _in_values(column: str, op: str, value: Any, budget: int) -> tuple[Any, ...]:
    """The values of an ``in`` list, never materializing more than ``budget`` of them."""
    if not _is_container(value):
        raise InvalidPredicateError(
            f"predicate on column {column!r}: {op!r} needs a list of values, got {short_repr(value)}"
        )
    if isinstance(value, Sized) and len(value) > budget:
        values: tuple[Any, ...] = ()
    else:
        values = tuple(itertools.islice(value, budget + 1))
    if isinstance(value, Sized) and len(value) > budget or len(values) > budget:
        raise LimitExceededError(
            f"predicate on column {column!r}: the 'in' lists hold more than {MAX_PREDICATE_VALUES} values "
            "(MAX_PREDICATE_VALUES)"
        )
    return tuple(_literal(column, v, f"{op!r} value") for v in values)


def _parse_term(raw: Any, budget: int) -> Term:
    if isinstance(raw, Term):
        return raw
    if not isinstance(raw, (tuple, list)) or len(raw) not in (2, 3):
        raise InvalidPredicateError(
            f"predicate term {short_repr(raw)} must be (column, op, value) or (column, 'is null')"
        )
    column, op = raw[0], raw[1]
    value = raw[2] if len(raw) == 3 else None
    if not isinstance(column, str):
        raise InvalidPredicateError(f"predicate term {short_repr(raw)}: the column must be a string")
    try:
        column.encode("utf-8")
    except UnicodeEncodeError:  # (a lone surrogate: no column can have that name)
        raise InvalidPredicateError(f"predicate term {short_repr(raw)}: the column name is not valid Unicode text "
                                    "(a lone surrogate)") from None
    if not isinstance(op, str):
        raise InvalidPredicateError(f"predicate term {short_repr(raw)}: the operator must be a string")
    op = _ALIASES.get(op.strip().lower(), op.strip().lower())
    if op not in OPS:
        raise InvalidPredicateError(
            f"predicate on column {column!r}: unknown operator {short_repr(raw[1])}; use one of {', '.join(OPS)}"
        )
    if op in ("in", "not in"):
        value = _in_values(column, op, value, budget)
    elif op in ("is null", "is not null"):
        value = None
    elif value is None:
        raise InvalidPredicateError(
            f"predicate on column {column!r}: cannot compare with None; use 'is null'"
        )
    else:
        value = _literal(column, value, "value")
    return Term(column, op, value)


def parse(predicates: Any) -> DNF | None:
    """Validate the shape of a DNF predicate; ``None`` or ``[]`` means no filter.

    Raises :class:`~kstore.errors.InvalidPredicateError` for a malformed predicate and
    :class:`~kstore.errors.LimitExceededError` beyond :data:`MAX_PREDICATE_TERMS` terms or
    :data:`MAX_PREDICATE_VALUES` ``in`` values.
    """
    if predicates is None:
        return None
    if not isinstance(predicates, (list, tuple)):
        raise InvalidPredicateError(
            f"predicates must be a list of lists of (column, op, value) tuples, got {type(predicates).__name__}"
        )
    if not predicates:
        return None
    if all(isinstance(p, (tuple, list)) and len(p) in (2, 3) and isinstance(p[0], str) for p in predicates):
        predicates = [predicates]  # a flat conjunction
    out = []
    terms = 0
    budget = MAX_PREDICATE_VALUES
    for conj in predicates:
        if not isinstance(conj, (list, tuple)) or not conj:
            raise InvalidPredicateError(
                f"each conjunction must be a non-empty list of (column, op, value) tuples, got {short_repr(conj)}"
            )
        terms += len(conj)
        if terms > MAX_PREDICATE_TERMS:
            raise LimitExceededError(
                f"the predicate has more than {MAX_PREDICATE_TERMS} (MAX_PREDICATE_TERMS) terms; "
                "combine values of one column into an 'in' list"
            )
        parsed = []
        for raw in conj:
            term = _parse_term(raw, budget)
            if term.op in ("in", "not in"):
                budget -= len(term.value)
            parsed.append(term)
        out.append(tuple(parsed))
    return tuple(out)


def _bind_term(term: Term, schema: pa.Schema, dataset: str | None) -> Term:
    idx = schema.get_field_index(term.column)
    if idx < 0:
        prefix = f"dataset {dataset!r}: " if dataset else ""
        raise ColumnNotFoundError(
            f"{prefix}predicate names column {term.column!r}, which the dataset does not have "
            f"(columns: {', '.join(schema.names)})"
        )
    t = schema.field(idx).type
    if term.op in ("is null", "is not null"):
        return term
    if pat.is_null(t):
        return Term(term.column, _NEVER)  # an all-null column: no comparison matches
    if pat.is_list(t) or pat.is_struct(t):
        raise InvalidPredicateError(
            f"{'dataset ' + repr(dataset) + ': ' if dataset else ''}column {term.column!r} is "
            f"{t}; only 'is null' / 'is not null' apply to it"
        )
    if term.op in ("in", "not in"):
        values = tuple(coerce_literal(v, t, term.column, dataset) for v in term.value)
        if pat.is_integer(t):  # values an integer column cannot hold match nothing
            lo, hi = _int_range(t)
            values = tuple(v for v in values if isinstance(v, int) and lo <= v <= hi)
        elif pat.is_decimal(t):
            values = tuple(_decimal(v, t, term.column, dataset) for v in values)
        elif pat.is_floating(t):
            values = tuple(v + 0.0 for v in values)  # -0.0 == 0.0
        elif pat.is_timestamp(t):  # values between two ticks of the unit match nothing
            values = tuple(v for v in (_in_unit(v, t.unit) for v in values) if v is not None and v is not _OUT)
        values = tuple(dict.fromkeys(values))  # dedupe, keep order
        if term.op == "in" and not values:
            return Term(term.column, _NEVER)
        if term.op == "not in" and not values:
            return Term(term.column, "is not null")
        return Term(term.column, term.op, values)
    value = coerce_literal(term.value, t, term.column, dataset)
    if pat.is_integer(t):
        return _int_term(term.column, term.op, value, t)
    if pat.is_decimal(t):
        return Term(term.column, term.op, _decimal(value, t, term.column, dataset))
    if pat.is_timestamp(t):
        return _timestamp_term(term.column, term.op, value, t.unit)
    if pat.is_floating(t):
        value = value + 0.0
    return Term(term.column, term.op, value)


_OUT = object()  # a timestamp literal beyond what the column's unit can hold


def _in_unit(ts: Any, unit: str) -> Any:
    """``ts`` (a pandas Timestamp) in ``unit``; None when it falls between two ticks of
    ``unit`` (it is finer), ``_OUT`` when ``unit`` cannot hold it."""
    import pandas as pd

    if _round(ts, unit, "floor") != ts:
        return None
    try:
        return ts.as_unit(unit)
    except (OverflowError, ValueError, pd.errors.OutOfBoundsDatetime):
        return _OUT


def _timestamp_term(column: str, op: str, ts: Any, unit: str) -> Term:
    """A comparison of a timestamp column with a literal exact in the column's unit
    (microseconds for every dataset column).

    A literal between two ticks (nanoseconds against microseconds) becomes the equivalent
    bound or a term that matches every non-null value / nothing, as :func:`_int_term` does
    for fractional literals of integer columns; so does a literal the unit cannot hold.
    """
    exact = _in_unit(ts, unit)
    if exact is _OUT:
        above = ts.year > 1970  # beyond every value on that side
        always = op == "!=" or (op in ("<", "<=") and above) or (op in (">", ">=") and not above)
        return Term(column, "is not null" if always else _NEVER)
    if exact is None:
        if op == "==":
            return Term(column, _NEVER)
        if op == "!=":
            return Term(column, "is not null")
        if op in ("<", "<="):
            return _timestamp_term(column, "<=", _round(ts, unit, "floor"), unit)
        return _timestamp_term(column, ">=", _round(ts, unit, "ceil"), unit)
    return Term(column, op, exact)


def _round(ts: Any, unit: str, how: str) -> Any:
    """``ts.floor(unit)`` / ``ts.ceil(unit)`` on the instant (in UTC), so that a zone's
    daylight-saving gaps and repeated hours do not get in the way."""
    if ts.tzinfo is None:
        return getattr(ts, how)(unit)
    return getattr(ts.tz_convert("UTC"), how)(unit).tz_convert(ts.tzinfo)


def _int_range(t: pa.DataType) -> tuple[int, int]:
    bits = t.bit_width
    if pat.is_unsigned_integer(t):
        return 0, 2**bits - 1
    return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1


def _int_term(column: str, op: str, value: int | float, t: pa.DataType) -> Term:
    """Rewrite a comparison of an integer column so its literal is an in-range int.

    A fractional or out-of-range literal becomes the equivalent integer bound, or a term
    that matches every non-null value / nothing, so no float or overflow reaches Arrow.
    """
    lo, hi = _int_range(t)
    if isinstance(value, float):
        if math.isnan(value):
            return Term(column, _NEVER if op != "!=" else "is not null")
        if op == "==":
            return Term(column, _NEVER)  # an int never equals a fractional value
        if op == "!=":
            return Term(column, "is not null")
        if op in ("<", "<="):
            if value == math.inf:
                return Term(column, "is not null")
            if value == -math.inf:
                return Term(column, _NEVER)
            op, value = "<=", math.floor(value)
        else:
            if value == math.inf:
                return Term(column, _NEVER)
            if value == -math.inf:
                return Term(column, "is not null")
            op, value = ">=", math.ceil(value)
    if value < lo:
        always = op in ("!=", ">", ">=")
        return Term(column, "is not null" if always else _NEVER)
    if value > hi:
        always = op in ("!=", "<", "<=")
        return Term(column, "is not null" if always else _NEVER)
    return Term(column, op, int(value))


def _decimal(value: Any, t: pa.DataType, column: str, dataset: str | None) -> Any:
    from decimal import Decimal, InvalidOperation

    try:
        dec = value if isinstance(value, Decimal) else Decimal(repr(value) if isinstance(value, float) else value)
        pa.scalar(dec, t)
        return dec
    except (InvalidOperation, pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as exc:
        prefix = f"dataset {dataset!r}: " if dataset else ""
        raise InvalidPredicateError(
            f"{prefix}column {column!r} is {t}; cannot compare with {short_repr(value)} exactly"
        ) from exc


def bind(dnf: DNF | None, schema: pa.Schema, *, dataset: str | None = None) -> DNF | None:
    """Resolve columns and coerce literals against ``schema`` (unknown column fails here)."""
    if dnf is None:
        return None
    return tuple(tuple(_bind_term(t, schema, dataset) for t in conj) for conj in dnf)


def columns_of(dnf: DNF | None) -> list[str]:
    """Columns a predicate touches, in first-use order."""
    seen: dict[str, None] = {}
    for conj in dnf or ():
        for t in conj:
            seen.setdefault(t.column, None)
    return list(seen)


def _scalar(value: Any, t: pa.DataType) -> pa.Scalar:
    return pa.scalar(value, t)  # bound timestamp literals are exact in the column's unit


def term_expression(term: Term, t: pa.DataType) -> pc.Expression:
    """An Arrow expression for one bound term over a column of type ``t``."""
    f = pc.field(term.column)
    op = term.op
    if op == _NEVER:
        return pc.scalar(False)
    if op == "is null":
        return f.is_null(nan_is_null=False)
    if op == "is not null":
        return f.is_valid()
    if op in ("in", "not in"):
        vs = [v for v in term.value if not (isinstance(v, float) and math.isnan(v))]
        if pat.is_floating(t) and 0.0 in vs:
            vs.append(-0.0)  # is_in hashes -0.0 apart from 0.0; IEEE says they are equal
        arr = pa.array(vs, type=t)
        expr = f.isin(arr)
        return expr if op == "in" else (~expr & f.is_valid())
    s = _scalar(term.value, t)
    return {
        "==": f == s, "!=": f != s, "<": f < s, "<=": f <= s, ">": f > s, ">=": f >= s,
    }[op]


_COMPARE = {"==": pc.equal, "!=": pc.not_equal, "<": pc.less, "<=": pc.less_equal, ">": pc.greater,
            ">=": pc.greater_equal}


def term_mask(term: Term, values: pa.Array) -> pa.BooleanArray:
    """Which of ``values`` (an array of the term's column) satisfy a bound ``term``: the
    rows :func:`term_expression` keeps (null = not kept), computed with the compute kernels
    directly (no query plan per call: planning evaluates a term on every file's values).

    >>> t = bind(parse([("x", ">", 1)]), pa.schema([("x", pa.int64())]))[0][0]
    >>> term_mask(t, pa.array([0, 2, None])).to_pylist()
    [False, True, False]
    """
    op = term.op
    if pat.is_dictionary(values.type):
        values = values.dictionary_decode()
    t = values.type
    if op == _NEVER:
        return pa.nulls(len(values), pa.bool_()).fill_null(False)
    if op == "is null":
        return pc.is_null(values, nan_is_null=False)
    if op == "is not null":
        return pc.is_valid(values)
    if op in ("in", "not in"):
        vs = [v for v in term.value if not (isinstance(v, float) and math.isnan(v))]
        if pat.is_floating(t) and 0.0 in vs:
            vs.append(-0.0)  # as term_expression does
        hit = pc.is_in(values, value_set=pa.array(vs, type=t))
        return hit.fill_null(False) if op == "in" else pc.and_(pc.invert(hit), pc.is_valid(values)).fill_null(False)
    return _COMPARE[op](values, _scalar(term.value, t)).fill_null(False)


def _balanced(exprs: list[pc.Expression], combine: Any) -> pc.Expression:
    """``e0 op e1 op ...`` as a balanced tree (depth log2(n), not n)."""
    while len(exprs) > 1:
        exprs = [combine(exprs[i], exprs[i + 1]) if i + 1 < len(exprs) else exprs[i] for i in range(0, len(exprs), 2)]
    return exprs[0]


def to_expression(conjunctions: Sequence[Sequence[Term]], schema: pa.Schema) -> pc.Expression | None:
    """OR of ANDs as one Arrow expression (None when there is nothing to filter)."""
    ors = []
    for conj in conjunctions:
        if not conj:
            return None  # an empty conjunction is always true
        ors.append(_balanced([term_expression(t, schema.field(t.column).type) for t in conj], lambda a, b: a & b))
    if not ors:
        return pc.scalar(False)
    return _balanced(ors, lambda a, b: a | b)
