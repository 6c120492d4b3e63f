"""The documentation's code runs: every ```python block of the pages under docs/ executes.

Blocks of one page run in order, in one namespace (like a notebook), with a fresh temporary
directory as the working directory, so ``"./store"`` in an example is a new local store.
A block that needs a service the test run does not have (a Spark session, an S3 bucket)
starts with the marker line ``# docs-test: skip (<why>)`` and is only checked to compile;
the pages listed in ``MUST_RUN`` must run every block. docs/FORMAT.md and the design notes
hold no runnable examples (their ```python blocks would be run too).
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"
SKIP_MARKER = re.compile(r"^# docs-test: skip \((?P<why>[^)]+)\)\s*$")
_FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w+-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$",
                    re.MULTILINE | re.DOTALL)

#: Pages whose examples must all run here (no skip marker allowed).
MUST_RUN = (
    "getting-started.md",
    "guides/dask.md",
    "guides/time-travel.md",
    "guides/gc.md",
    "guides/compaction.md",
    "guides/duckdb-polars.md",
    "guides/kartothek.md",
    "guides/schema.md",
)


def python_blocks(page: Path) -> list[tuple[int, str]]:
    """``(line number, code)`` of every ```python block of ``page``."""
    return blocks_in(page.read_text(encoding="utf-8"))


def blocks_in(text: str) -> list[tuple[int, str]]:
    """``(line of the first code line, code)`` of every ```python block of a Markdown text."""
    blocks = []
    for m in _FENCE.finditer(text):
        if m.group("lang") in ("python", "py"):
            line = text.count("\n", 0, m.start()) + 2
            blocks.append((line, textwrap.dedent(m.group("body"))))
    return blocks


def _pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if python_blocks(p))


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(DOCS)))
def test_page_examples_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "__docs__"}
    rel = str(page.relative_to(DOCS))
    for line, code in python_blocks(page):
        where = f"docs/{rel}:{line}"
        first = code.lstrip().splitlines()[0] if code.strip() else ""
        if first.startswith("# docs-test"):
            assert SKIP_MARKER.match(first), f"{where}: write the marker as '# docs-test: skip (why)'"
            assert rel not in MUST_RUN, f"{where}: examples on this page must run, not be skipped"
            compile(code, where, "exec")  # still valid Python
            continue
        # padded with newlines so that a traceback names the line of the Markdown file
        exec(compile("\n" * (line - 1) + code, f"docs/{rel}", "exec"), namespace)  # noqa: S102


def test_required_pages_have_examples() -> None:
    for rel in MUST_RUN:
        page = DOCS / rel
        assert python_blocks(page), f"docs/{rel} has no ```python example"


def test_block_extraction() -> None:
    text = "text\n```python\nx = 1\n```\n\n    ```python\n    # docs-test: skip (needs Spark)\n    y\n    ```\n```bash\nls\n```\n"
    assert blocks_in(text) == [(3, "x = 1\n"), (7, "# docs-test: skip (needs Spark)\ny\n")]
    assert SKIP_MARKER.match("# docs-test: skip (needs Spark)")
    assert not SKIP_MARKER.match("# docs-test: skip")
