#!/usr/bin/env bash
# Fetches the Kafka broker (KRaft mode) and kafka-producer-perf-test's jars from Maven Central
# into target/kafka/libs (scripts/kafka/pom.xml names them), with Maven. Idempotent: does
# nothing when they are there. Needs Java 17+ and Maven (scripts/setup.sh installs both).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LIBS="$ROOT/target/kafka/libs"
ls "$LIBS"/kafka_2.13-*.jar >/dev/null 2>&1 && ls "$LIBS"/slf4j-api-2.*.jar >/dev/null 2>&1 && exit 0
command -v mvn >/dev/null || { echo "scripts/setup-kafka.sh: needs Maven (apt-get install maven)" >&2; exit 1; }
echo "scripts/setup-kafka.sh: fetching Kafka's jars from Maven Central into target/kafka/libs" >&2
rm -rf "$LIBS.partial"
mvn -q -B -f "$ROOT/scripts/kafka/pom.xml" dependency:copy-dependencies \
  -DoutputDirectory="$LIBS.partial" -DincludeScope=runtime >&2
rm -rf "$LIBS"
mv "$LIBS.partial" "$LIBS"
