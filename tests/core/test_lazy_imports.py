"""Issue #30: ``import kstore`` and ``kstore --help`` import no more than they need.

Every check runs in a fresh interpreter (``sys.executable``): in the test process kstore, pandas
and pyarrow are long imported. The public names come from a PEP 562 ``__getattr__``; each must
be the very object its home module defines, the home module being the one the ``import`` lines
of ``kstore/__init__.py`` name (what mypy and the API docs read). Timings live in
``bench/import_time.py``, not here.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import kstore

ROOT = Path(__file__).resolve().parents[2]

#: not loaded by a bare ``import kstore``
HEAVY = ("kstore.blocks.gc", "kstore.blocks.commit", "kstore.eager", "kstore.lifecycle", "dask", "pyspark", "boto3",
         "pandas", "pyarrow")


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)


def probe(code: str) -> Any:
    """Run ``code`` in a fresh interpreter; it prints one JSON line last."""
    res = run_python(code)
    assert res.returncode == 0, res.stdout + res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def home_modules() -> dict[str, str]:
    """Name -> module of every ``from X import name`` in ``kstore/__init__.py`` (the eager ones and
    those under ``if TYPE_CHECKING:``)."""
    tree = ast.parse((ROOT / "kstore" / "__init__.py").read_text())
    homes: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("kstore"):
            for alias in node.names:
                homes[alias.asname or alias.name] = node.module
    return homes


def test_import_kstore_loads_no_engine_blocks_or_dataframe_library() -> None:
    got = probe("import json, sys\nimport kstore\n"
                f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))")
    assert got == []


def test_every_public_name_is_its_home_modules_object() -> None:
    homes = home_modules()
    assert set(kstore.__all__) <= set(homes), set(kstore.__all__) - set(homes)
    # first access through kstore (the lazy path), only then the home modules
    code = f"""
import importlib, json, sys
import kstore
homes = {homes!r}
names = list(kstore.__all__)
via_kstore = {{n: getattr(kstore, n) for n in names}}
cached = [n for n in names if n in vars(kstore)]
from kstore import store_dataset, S3Store, StoreLike, __version__
ns = {{}}
exec("from kstore import *", ns)
print(json.dumps({{
    "different": [n for n in names if via_kstore[n] is not getattr(importlib.import_module(homes[n]), n)],
    "cached": cached,
    "star": sorted(k for k in ns if not k.startswith("__") or k == "__version__"),
    "from_import_ok": store_dataset is via_kstore["store_dataset"] and S3Store is via_kstore["S3Store"],
    "all_unique": len(names) == len(set(names)),
}}))
"""
    got = probe(code)
    assert got["different"] == []
    assert got["cached"] == list(kstore.__all__)  # resolved once, then a plain attribute
    assert got["star"] == sorted(kstore.__all__)
    assert got["from_import_ok"] is True
    assert got["all_unique"] is True


def test_dir_lists_the_api_and_unknown_names_still_raise() -> None:
    got = probe("""
import json
import kstore
try:
    kstore.no_such_name
    missing = "no error"
except AttributeError as exc:
    missing = str(exc)
print(json.dumps({"dir": dir(kstore), "missing": missing, "hasattr": hasattr(kstore, "read_dataset_typo"),
                  "eager": kstore.eager.__name__}))
""")
    assert set(kstore.__all__) <= set(got["dir"])
    assert got["missing"] == "module 'kstore' has no attribute 'no_such_name'"
    assert got["hasattr"] is False
    assert got["eager"] == "kstore.eager"  # a subpackage an eager `import kstore` used to load
    assert set(kstore.__all__) <= set(dir(kstore))


# Runs ``python -m kstore ARGS`` inside this interpreter (kstore/__main__.py, as ``-m`` does), then
# prints the exit code and which of the heavy modules are loaded.
_CLI = """
import json, runpy, sys
sys.argv = ["kstore", *{argv!r}]
try:
    runpy.run_module("kstore", run_name="__main__", alter_sys=True)
    code = None
except SystemExit as exc:
    code = exc.code
print(json.dumps({{"code": code, "loaded": [m for m in {heavy!r} if m in sys.modules],
                   "commands": sorted(sys.modules["kstore.cli"].cli.commands)}}))
"""


def cli_probe(*argv: str) -> tuple[Any, str]:
    res = run_python(_CLI.format(argv=list(argv), heavy=("pandas", "pyarrow", "numpy", "kstore.blocks")))
    return json.loads(res.stdout.strip().splitlines()[-1]), res.stdout


def test_kstore_help_exits_0() -> None:
    res = subprocess.run([sys.executable, "-m", "kstore", "--help"], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("Usage: kstore"), res.stdout
    assert "Commands:" in res.stdout and "build-indices" in res.stdout


def test_help_of_kstore_and_of_each_command_imports_no_pandas_pyarrow_or_blocks() -> None:
    got, out = cli_probe("--help")
    assert got["code"] == 0, out
    assert "Usage: kstore [OPTIONS] COMMAND" in out and "Commands:" in out  # the parser did run
    assert got["loaded"] == [], out
    commands = got["commands"]
    assert len(commands) >= 13
    for command in commands:
        got, out = cli_probe(command, "--help")
        assert got["code"] == 0, out
        assert f"Usage: kstore {command} [OPTIONS]" in out, out
        assert got["loaded"] == [], (command, out)


def test_the_cli_probe_does_see_pandas_when_a_command_needs_it() -> None:
    # the control for the test above: a command that reads metadata loads kstore's blocks and pandas
    got, out = cli_probe("info", "memory://lazy-imports-control", "missing")
    assert got["code"] == 1, out
    assert "pandas" in got["loaded"] and "kstore.blocks" in got["loaded"], out
