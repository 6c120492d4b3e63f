#!/usr/bin/env bash
# Create .venv and install kstore with everything the tests, the demo, the docs site and the benchmarks need.
# Java 17 (for PySpark) is installed with apt-get when `java` is missing and we are root.
set -euo pipefail
cd "$(dirname "$0")/.."
# Java 17 runs Spark; its javac builds kstore's JVM data source (scripts/build_jvm.sh).
if ! command -v javac >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "== installing the Java 17 JDK for Spark and kstore's JVM data source"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jdk-headless >/dev/null
  elif ! command -v java >/dev/null 2>&1; then
    echo "WARNING: java not found; Spark tests will fail. Install a Java 17 JDK." >&2
  else
    echo "WARNING: javac not found: kstore's JVM data source is not built (format('kstore') stays the Python one). Install a Java 17 JDK." >&2
  fi
fi
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# The editable install follows code changes; reinstall only when the package metadata changed
# (a fresh checkout always installs). setuptools' build backend prints a warning banner about
# editable installs on every build: it is not meant for users, so warnings are off for pip.
STAMP=.venv/.kstore-installed
if [ ! -f "$STAMP" ] || [ setup.cfg -nt "$STAMP" ] || [ pyproject.toml -nt "$STAMP" ]; then
  PYTHONWARNINGS=ignore .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  # editable_mode=compat puts the checkout on sys.path (a .pth file), so that PySpark's data source
  # discovery (pkgutil.iter_modules) finds pyspark_kstore and format("kstore") works in a fresh
  # session without kstore.spark.register, as it does from an installed wheel
  PYTHONWARNINGS=ignore .venv/bin/python -m pip install -q -e ".[test,dask,spark,s3,docs]" \
    --config-settings editable_mode=compat
  touch "$STAMP"
fi
# kstore's JVM data source (kstore.spark.configure): rebuilt when a Java source is newer than the jar
JAR=kstore/spark/jvm/kstore-spark.jar
if command -v javac >/dev/null 2>&1 && { [ ! -f "$JAR" ] || [ -n "$(find kstore/spark/jvm/src -newer "$JAR" -type f | head -1)" ]; }; then
  bash scripts/build_jvm.sh .venv/bin/python >/dev/null
fi
