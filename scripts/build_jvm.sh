#!/usr/bin/env bash
# Build kstore's JVM data source (kstore/spark/jvm/kstore-spark.jar) with javac against the
# Spark jars the installed pyspark wheel ships. No Maven/sbt/Gradle, no download.
#   scripts/build_jvm.sh [python]    (default: python3 on PATH, or $PYTHON)
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
py="${1:-${PYTHON:-python3}}"
jars="$("$py" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')"
src="$here/kstore/spark/jvm/src"
out="$here/kstore/spark/jvm/kstore-spark.jar"
build="$(mktemp -d)"
trap 'rm -rf "$build"' EXIT
javac --release 17 -nowarn -cp "$jars/*" -d "$build" $(find "$src" -name '*.java')
cp -r "$src/META-INF" "$build/"
jar --create --file "$out.tmp" -C "$build" .
mv "$out.tmp" "$out"
echo "$out"
