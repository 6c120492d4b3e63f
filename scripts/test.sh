#!/usr/bin/env bash
# Set up (scripts/setup.sh, scripts/azurite.sh) and run lint, the import-layer contract, mypy, the strict docs build and the whole
# test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# the Azurite blob emulator for the Azure (abfs://) store tests, into .ci-tools/ (needs node and npm).
# Without it those tests fail with a message naming scripts/azurite.sh; everything else still runs.
if ! bash scripts/azurite.sh; then
  echo "WARNING: Azurite could not be installed; the Azure store tests will fail (see above)." >&2
fi
.venv/bin/ruff check .
.venv/bin/lint-imports --config setup.cfg
.venv/bin/mypy
# the documentation site, warnings as errors (mkdocs.yml; a few seconds); its examples run in tests/docs
site_dir=$(mktemp -d)
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet --site-dir "$site_dir"
rm -rf "$site_dir"
.venv/bin/python -m pytest -n 2 --dist loadgroup "$@"
