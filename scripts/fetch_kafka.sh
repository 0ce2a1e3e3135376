#!/usr/bin/env bash
# Fetch the pinned Apache Kafka broker (KRaft mode) from Maven Central into the ragindex cache and
# print the directory holding its jars (`lib/`), for the test harness (ragindex.measure.servers.kafka).
#
# Kafka ships no server distribution on Maven Central, but its jars are there: kafka_2.13 (the
# broker, `kafka.Kafka`), kafka-tools (`kafka.tools.StorageTool` formats the KRaft storage) and their
# runtime dependencies, plus an slf4j binding (slf4j-simple, with its matching slf4j-api declared
# directly: Kafka's pom would otherwise pull 1.7 and the 2.x binding would be ignored) so that the
# broker's log goes to stderr, where the harness keeps it.
# `mvn dependency:copy-dependencies` resolves and copies them (about 55 MB). Needs mvn and a JDK 17+.
#
# Idempotent: a second run with a complete install only prints the directory.
set -euo pipefail

KAFKA_VERSION="4.4.0"
SLF4J_VERSION="2.0.17"
DEST="${RAGINDEX_CACHE:-$HOME/.cache/ragindex}/kafka/$KAFKA_VERSION"
MARKER="$DEST/.ragindex-complete"

if [[ -f "$MARKER" ]]; then
  echo "$DEST"
  exit 0
fi

# Resolve into a temporary directory and move it into place, so a half-copied lib/ is never
# mistaken for an install.
mkdir -p "$(dirname "$DEST")"
tmp="$(mktemp -d "$(dirname "$DEST")/fetch.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.ragindex</groupId>
  <artifactId>kafka-test-broker</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId>
      <version>$KAFKA_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId>
      <version>$KAFKA_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.slf4j</groupId><artifactId>slf4j-api</artifactId>
      <version>$SLF4J_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.slf4j</groupId><artifactId>slf4j-simple</artifactId>
      <version>$SLF4J_VERSION</version>
    </dependency>
  </dependencies>
</project>
POM
echo "fetching Kafka $KAFKA_VERSION jars from Maven Central ..." >&2
mvn -q -B -Dstyle.color=never -f "$tmp/pom.xml" dependency:copy-dependencies \
  -DincludeScope=runtime -DoutputDirectory="$tmp/lib" >&2
if ! ls "$tmp/lib/kafka_2.13-$KAFKA_VERSION.jar" "$tmp/lib/kafka-tools-$KAFKA_VERSION.jar" >/dev/null; then
  echo "Kafka $KAFKA_VERSION jars missing after mvn dependency:copy-dependencies" >&2
  exit 1
fi
rm -rf "$DEST"
mkdir -p "$DEST"
mv "$tmp/lib" "$DEST/lib"
touch "$MARKER"
echo "$DEST"
