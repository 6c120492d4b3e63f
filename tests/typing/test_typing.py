"""mypy, run for real: the package and ``check_stores.py`` are clean under the repository's
strict configuration, and ``rejected_uses.py`` gets exactly the errors its lines are marked with
(so a protocol or alias that accepts everything would fail here)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent

pytestmark = pytest.mark.xdist_group("mypy")  # one mypy at a time on the shared cache


def mypy(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "setup.cfg"), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_package_and_typing_checks_are_clean() -> None:
    res = mypy()  # files = kstore, tests/typing (setup.cfg), rejected_uses.py excluded
    assert res.returncode == 0, res.stdout + res.stderr
    assert "Success: no issues found" in res.stdout
    found = re.search(r"in (\d+) source files", res.stdout)
    assert found is not None, res.stdout
    checked = int(found.group(1))
    assert checked >= len(list((ROOT / "kstore").rglob("*.py")))  # the whole package, not a subset


def test_wrong_uses_are_rejected_line_by_line() -> None:
    path = HERE / "rejected_uses.py"
    expected = {
        i: m.group(1)
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if (m := re.search(r"# E: ([a-z-]+)$", line))
    }
    assert len(expected) >= 10
    res = mypy(str(path.relative_to(ROOT)))
    assert res.returncode == 1, res.stdout + res.stderr
    got: dict[int, set[str]] = {}
    for line in res.stdout.splitlines():
        m = re.match(r".*rejected_uses\.py:(\d+): error: .*\[([a-z-]+)\]$", line)
        if m:
            got.setdefault(int(m.group(1)), set()).add(m.group(2))
    assert {i: {c} for i, c in expected.items()} == got, res.stdout
