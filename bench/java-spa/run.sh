#!/usr/bin/env bash
# Flink's State Processor API writing the GROUP BY job's keyed state (accState) as a canonical
# savepoint: the yardstick for `statecat write` (bench/bench_write.py --spa).
#
# usage: run.sh bootstrap --keys N --out DIR --uid-hash H [--parallelism P] [--max-parallelism M]
#                         [--repeat R] [--json FILE]
#        run.sh rewrite --src SAVEPOINT --out DIR --uid-hash H [--update-key WORD]
#                       [--max-parallelism M] [--parallelism P] [--repeat R] [--json FILE]
#
#   bootstrap        N keys key_0..key_(N-1), each accState (1, amount), into a new savepoint
#   rewrite          accState read from SAVEPOINT (SavepointReader) and written back into a copy
#                    of it (SavepointWriter.fromExistingSavepoint); --update-key adds 1 to one
#                    key's count, --max-parallelism gives the operator a new max parallelism
#   --uid-hash H     the operator id (32 hex digits) the state is written under
#   --repeat R       R passes in one JVM (each a fresh MiniCluster); the first is what a user gets
#
# environment:
#   STATECAT_PYFLINK_VENV_2_3  the apache-flink==2.3.0 venv whose pyflink/lib jars are the Flink
#                              runtime (default ~/.cache/statecat/pyflink-2.3.0, the one
#                              tests/fixtures/runtime.py creates)
#   STATECAT_SPA_DIR   where flink-state-processor-api-2.3.0.jar is downloaded from Maven Central
#                      (`mvn dependency:copy`) on first use (default ~/.cache/statecat/flink-spa-2.3.0)
#   JAVA_OPTS   JVM options (default: -Xms4g -Xmx14g -XX:+UseSerialGC); the --add-opens/--add-exports
#               of Flink's conf/config.yaml (env.java.opts.all) are always passed, as Flink does
#   PIN_CPU     if set (e.g. 1), run the JVM under `taskset -c $PIN_CPU`
#   BUILD_DIR   compiled classes go to $BUILD_DIR/<sha256 of the sources and jars>/ (default
#               /tmp/statecat-java-spa)
#
# Run it under the machine's heavy-JVM lock (tests/fixtures/runtime.py heavy_lock,
# `flock /tmp/statecat-heavy.lock`); bench_write.py --spa takes it.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SRC="$HERE/src"
FLINK_VERSION=2.3.0
VENV="${STATECAT_PYFLINK_VENV_2_3:-$HOME/.cache/statecat/pyflink-$FLINK_VERSION}"
SPA_DIR="${STATECAT_SPA_DIR:-$HOME/.cache/statecat/flink-spa-$FLINK_VERSION}"
SPA_JAR="$SPA_DIR/flink-state-processor-api-$FLINK_VERSION.jar"
BUILD_DIR="${BUILD_DIR:-/tmp/statecat-java-spa}"

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
  exit 2
fi

# The State Processor API is not in Flink's distribution: users add it from Maven Central.
if [[ ! -f "$SPA_JAR" ]]; then
  mkdir -p "$SPA_DIR"
  echo "[run.sh] downloading org.apache.flink:flink-state-processor-api:$FLINK_VERSION into $SPA_DIR" >&2
  mvn -q -B dependency:copy -Dartifact="org.apache.flink:flink-state-processor-api:$FLINK_VERSION" \
    -DoutputDirectory="$SPA_DIR" >&2
fi
CP_FLINK="$SPA_JAR:$PYFLINK/lib/*"

SOURCES=$(find "$SRC" -name '*.java' | sort)
# shellcheck disable=SC2086
HASH=$( (cat $SOURCES; echo "$PYFLINK"; sha256sum "$SPA_JAR") | sha256sum | cut -c1-16)
CLASSES="$BUILD_DIR/$HASH"
if [[ ! -f "$CLASSES/bench/SpaWriteBench.class" ]]; then
  mkdir -p "$BUILD_DIR"
  TMP="$(mktemp -d "$BUILD_DIR/javac-XXXXXX")"
  echo "[run.sh] compiling into $CLASSES (javac $(javac -version 2>&1 | awk '{print $2}'))" >&2
  # shellcheck disable=SC2086
  if ! javac -nowarn -encoding UTF-8 -d "$TMP" -cp "$CP_FLINK" $SOURCES; then
    rm -rf "$TMP"
    exit 2
  fi
  cat > "$TMP/log4j2.properties" <<'PROPS'
rootLogger.level = WARN
rootLogger.appenderRef.console.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %-5p %c{1} - %m%n
PROPS
  rm -rf "$CLASSES"
  mv "$TMP" "$CLASSES"
fi

JAVA_OPTS="${JAVA_OPTS:--Xms4g -Xmx14g -XX:+UseSerialGC}"
# The JVM options Flink's own scripts pass on Java 17 (env.java.opts.all of its conf/config.yaml):
# without them Kryo cannot instantiate Flink's non-public classes (the State Processor API ships
# each subtask's OperatorSubtaskState through Kryo).
FLINK_OPTS=$(sed -n 's/^ *all: *\(--add-.*\)$/\1/p' "$PYFLINK/conf/config.yaml" | head -1)
launcher=()
if [[ -n "${PIN_CPU:-}" ]]; then launcher=(taskset -c "$PIN_CPU"); fi
echo "[run.sh] flink jars: $PYFLINK/lib + $SPA_JAR; JAVA_OPTS: $JAVA_OPTS${PIN_CPU:+; pinned to cpu $PIN_CPU}" >&2
# shellcheck disable=SC2086
exec "${launcher[@]}" java $FLINK_OPTS $JAVA_OPTS -Dlog4j2.configurationFile="$CLASSES/log4j2.properties" \
  -cp "$CLASSES:$CP_FLINK" bench.SpaWriteBench "$@"
