#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the demo pipeline on a local directory store.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python examples/demo.py "$@"
