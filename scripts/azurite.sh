#!/usr/bin/env bash
# Install the Azurite blob emulator (npm package azurite) into .ci-tools/ unless that version is
# already there (then it prints nothing); tests/io/conftest.py starts
# .ci-tools/node_modules/.bin/azurite-blob for the Azure store tests, which fail without it.
# Needs node and npm: when they are missing and we are root, they are installed with apt-get.
# Exits non-zero (with a message) when Azurite cannot be installed.
set -euo pipefail
cd "$(dirname "$0")/.."
AZURITE_VERSION=${AZURITE_VERSION:-3.35.0}
DIR=.ci-tools
BIN=$DIR/node_modules/.bin/azurite-blob
PKG=$DIR/node_modules/azurite/package.json

installed_version() {
  [ -x "$BIN" ] && [ -f "$PKG" ] && command -v node >/dev/null 2>&1 \
    && node -p "require('./$PKG').version" 2>/dev/null
}

if [ "$(installed_version || true)" = "$AZURITE_VERSION" ]; then
  exit 0
fi
if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "== installing node and npm for Azurite"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
  fi
fi
if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
  echo "ERROR: node/npm not found; cannot install Azurite (the Azure store tests need it)." >&2
  exit 1
fi
echo "== installing azurite $AZURITE_VERSION into $DIR/"
mkdir -p "$DIR"
if ! npm install --prefix "$DIR" --no-audit --no-fund --no-save --loglevel=error \
    "azurite@$AZURITE_VERSION" >/dev/null; then
  echo "ERROR: npm install azurite@$AZURITE_VERSION failed (the Azure store tests need it)." >&2
  exit 1
fi
if [ "$(installed_version || true)" != "$AZURITE_VERSION" ]; then
  echo "ERROR: azurite $AZURITE_VERSION did not install to $BIN." >&2
  exit 1
fi
