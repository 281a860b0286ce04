#!/bin/sh
# Builds the columnar transport prototype's jar against the pyspark install's own jars (no Maven).
#   bench/spark-columnar/build.sh [OUT_DIR]   -> prints the jar's path (OUT_DIR default: ~/.cache/statecat)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-$here/../../.venv/bin/python}
jars=$("$python" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')
out=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/statecat}
jar=$out/statecat-columnar-proto.jar
sources=$(find "$here/src" -name '*.java')
# Rebuild only when a source is newer than the jar.
if [ -f "$jar" ] && [ -z "$(find "$here/src" -name '*.java' -newer "$jar")" ]; then
    echo "$jar"; exit 0
fi
classes=$(mktemp -d)
trap 'rm -rf "$classes"' EXIT
javac --release 17 -nowarn -d "$classes" -cp "$jars/*" $sources >&2
mkdir -p "$out"
jar cf "$jar.tmp" -C "$classes" . && mv "$jar.tmp" "$jar"
echo "$jar"
