"""Fixtures for the kartothek 5.3 interop tests.

The fixture store under /work/shared is read-only shared data: every test works on a
private copy made once per session (``interop_store``), and a final test checks that reading
did not change a single byte of the copy.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import stat
import sys
from pathlib import Path

import pytest


def _helpers():
    """Load ./fixtures.py under a unique module name (tests/ has no __init__.py files, and a
    plain ``import fixtures`` could clash with a same-named helper in another test dir)."""
    name = "kstore_tests_interop_fixtures"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("fixtures.py"))
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


fx = _helpers()


def pytest_report_header(config):
    return f"kartothek interop fixtures: {fx.FIXTURE_ROOT}"


def _tree_digest(root: Path) -> dict[str, str]:
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            p = Path(dirpath) / f
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@pytest.fixture(scope="session")
def interop_store(tmp_path_factory) -> Path:
    """Path of a private, writable copy of the fixture store (a plain directory store)."""
    if not fx.SOURCE_STORE.is_dir():
        pytest.fail(f"fixture store not found: {fx.SOURCE_STORE} (set KSTORE_INTEROP_FIXTURES)")
    dest = tmp_path_factory.mktemp("kartothek53") / "store"
    # copyfile: do not carry over the read-only mode bits of the shared data
    shutil.copytree(fx.SOURCE_STORE, dest, copy_function=shutil.copyfile)
    for dirpath, dirs, files in os.walk(dest):
        for name in dirs + files:
            p = os.path.join(dirpath, name)
            os.chmod(p, os.stat(p).st_mode | stat.S_IWUSR | stat.S_IRUSR | (stat.S_IXUSR if name in dirs else 0))
    os.chmod(dest, os.stat(dest).st_mode | stat.S_IWUSR)
    digest = _tree_digest(dest)
    assert digest == _tree_digest(fx.SOURCE_STORE), "store copy differs from source"
    _INITIAL_DIGEST[str(dest)] = digest
    return dest


_INITIAL_DIGEST: dict[str, dict[str, str]] = {}


@pytest.fixture(scope="session")
def interop_store_digest(interop_store) -> dict[str, str]:
    """sha256 of every file of the copy, taken right after copying (before any kstore call)."""
    return _INITIAL_DIGEST[str(interop_store)]


@pytest.fixture(scope="session")
def store_url(interop_store) -> str:
    """The store as a plain path string (the form most tests use)."""
    return str(interop_store)


@pytest.fixture
def tree_digest():
    return _tree_digest
