#!/usr/bin/env bash
# Flink's own restore of a NATIVE RocksDB snapshot (retained checkpoint chk-N or NATIVE savepoint),
# then a walk of every column family: the yardstick for statecat's native-state scan.
#
# usage: run.sh <snapshot-dir> [--repeat N] [--transfer-threads N] [--work DIR] [--sample N]
#               [--json FILE]
#
#   <snapshot-dir>        directory holding _metadata
#   --repeat N            N passes; with N > 1 the first (JVM warm-up) is left out of the figures
#   --transfer-threads N  RocksDBStateDownloader threads (default 1 = the calling thread)
#   --work DIR            where the RocksDB instance directories go (default: a new temp dir);
#                         each is deleted once its handle has been iterated
#   --sample N            print the first N entries (hex) of every column family
#   --json FILE           write the summary as JSON as well
#
# environment:
#   STATECAT_PYFLINK_VENV_2_3  the apache-flink==2.3.0 venv (default ~/.cache/statecat/pyflink-2.3.0,
#                              the one tests/fixtures/runtime.py creates for generate.py)
#   JAVA_OPTS   JVM options (default: -Xms1g -Xmx1g -XX:+UseSerialGC)
#   PIN_CPU     if set (e.g. 1), run the JVM under `taskset -c $PIN_CPU`
#   BUILD_DIR   compiled classes go to $BUILD_DIR/<sha256 of the sources>/ (default
#               /tmp/statecat-java-native)
#
# Restore, iteration and (by default) transfer run on ONE thread: entries/s is a per-core figure
# (RocksDB's own background threads are idle unless the opened DB schedules a compaction).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SRC="$HERE/src"
FLINK_VERSION=2.3.0
VENV="${STATECAT_PYFLINK_VENV_2_3:-$HOME/.cache/statecat/pyflink-$FLINK_VERSION}"
BUILD_DIR="${BUILD_DIR:-/tmp/statecat-java-native}"

if [[ $# -eq 0 || "$1" == "-h" || "$1" == "--help" ]]; then
  awk 'NR>1 && /^set -euo/{exit} NR>1{print}' "$0" >&2
  [[ $# -eq 0 ]] && exit 2 || exit 0
fi

PYFLINK=""
for d in "$VENV"/lib/python3*/site-packages/pyflink; do
  if [[ -f "$d/lib/flink-dist-$FLINK_VERSION.jar" ]]; then PYFLINK="$d"; fi
done
if [[ -z "$PYFLINK" ]]; then
  echo "error: no apache-flink==$FLINK_VERSION in $VENV (no pyflink/lib/flink-dist-$FLINK_VERSION.jar);" >&2
  echo "       create it with: .venv/bin/python -c 'from tests.fixtures.runtime import ensure_venv; ensure_venv(\"$FLINK_VERSION\")'" >&2
  echo "       or point STATECAT_PYFLINK_VENV_2_3 at a venv holding apache-flink==$FLINK_VERSION" >&2
  exit 2
fi
CP_FLINK="$PYFLINK/lib/*"

# compiled once per content of the sources and the Flink jars they compile against
SOURCES=$(find "$SRC" -name '*.java' | sort)
# shellcheck disable=SC2086
HASH=$( (cat $SOURCES; echo "$PYFLINK") | sha256sum | cut -c1-16)
CLASSES="$BUILD_DIR/$HASH"
if [[ ! -f "$CLASSES/bench/FlinkNativeRestoreBench.class" ]]; then
  mkdir -p "$BUILD_DIR"
  TMP="$(mktemp -d "$BUILD_DIR/javac-XXXXXX")"
  echo "[run.sh] compiling into $CLASSES (javac $(javac -version 2>&1 | awk '{print $2}'))" >&2
  # shellcheck disable=SC2086
  if ! javac -nowarn -encoding UTF-8 -d "$TMP" -cp "$CP_FLINK" $SOURCES; then
    rm -rf "$TMP"
    exit 2
  fi
  cat > "$TMP/log4j2.properties" <<'EOF'
rootLogger.level = WARN
rootLogger.appenderRef.console.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %-5p %c{1} - %m%n
EOF
  rm -rf "$CLASSES"
  mv "$TMP" "$CLASSES"
fi

JAVA_OPTS="${JAVA_OPTS:--Xms1g -Xmx1g -XX:+UseSerialGC}"
launcher=()
if [[ -n "${PIN_CPU:-}" ]]; then launcher=(taskset -c "$PIN_CPU"); fi
echo "[run.sh] flink jars: $PYFLINK/lib; JAVA_OPTS: $JAVA_OPTS${PIN_CPU:+; pinned to cpu $PIN_CPU}" >&2
# shellcheck disable=SC2086
exec "${launcher[@]}" java $JAVA_OPTS -Dlog4j2.configurationFile="$CLASSES/log4j2.properties" \
  -cp "$CLASSES:$CP_FLINK" bench.FlinkNativeRestoreBench "$@"
