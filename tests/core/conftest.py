"""Shared helpers of the core tests: a brute-force predicate oracle (SQL null semantics)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest


def match_value(v: Any, op: str, lit: Any) -> bool:
    """``v op lit`` with SQL/Arrow semantics: a null satisfies only ``is null``; NaN is not
    null and compares unequal to everything (so ``NaN != x`` and ``NaN not in [...]`` hold).
    ``in`` is an OR of ``==``; ``not in`` an AND of ``!=``."""
    if op == "is null":
        return v is None
    if v is None:
        return False
    if op == "is not null":
        return True
    if op == "never":
        return False
    if op == "==":
        return v == lit
    if op == "!=":
        return v != lit
    if op == "<":
        return v < lit
    if op == "<=":
        return v <= lit
    if op == ">":
        return v > lit
    if op == ">=":
        return v >= lit
    if op == "in":
        return any(v == x for x in lit)
    if op == "not in":
        return all(v != x for x in lit)
    raise AssertionError(f"unknown op {op!r}")


def eval_dnf(row: dict, dnf) -> bool:
    """OR of ANDs of ``(column, op, literal)`` over one row (a dict)."""
    return any(all(match_value(row[c], op, lit) for c, op, lit in conj) for conj in dnf)


@pytest.fixture(scope="session")
def oracle() -> SimpleNamespace:
    return SimpleNamespace(match_value=match_value, eval_dnf=eval_dnf)
