#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run lint, the import-layer contract, mypy and the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/lint-imports --config setup.cfg
.venv/bin/mypy
.venv/bin/python -m pytest -n 2 --dist loadgroup "$@"
