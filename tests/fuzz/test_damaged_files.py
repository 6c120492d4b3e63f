"""Damaged files, one subprocess per kind of file (see :mod:`tests.fuzz._damaged`).

The subprocess runs the hypothesis cases; a raw exception, a key outside the dataset, a
changed store after a read or a failed write fails it with the falsifying case on stderr,
and a crash of the interpreter (Arrow's C++ reader meets every damaged byte) is a non-zero
exit, reported here, instead of a lost test worker.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fuzz._harness import KINDS, budget

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CASES = 200


@pytest.mark.parametrize("kind", KINDS)
def test_damaged_files(kind: str) -> None:
    cases = budget(DEFAULT_CASES)
    proc = subprocess.run(
        [sys.executable, "-m", "tests.fuzz._damaged", kind, str(cases)],
        cwd=ROOT, capture_output=True, text=True, timeout=max(600, cases),
        env={**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")},
    )
    found = [line.strip() for line in proc.stderr.splitlines() if "AssertionError:" in line]
    report = "\n".join(found[:10]) + "\n...\n" + (proc.stdout + proc.stderr)[-4000:]
    assert proc.returncode == 0, f"exit {proc.returncode} (negative: killed by a signal)\n{report}"
    ran = re.search(rf"fuzz damaged {kind}: (\d+) cases", proc.stdout)
    assert ran is not None and int(ran.group(1)) >= cases, report
    print(ran.group(0))
