#!/usr/bin/env bash
# Fetch the pinned Elasticsearch integration-test distribution from Maven Central into the
# ragindex cache, check its sha256, unzip it, and print the install directory.
#
# Why 8.19.21 and not 9.x: the integ-test-zip artifact
# (org.elasticsearch.distribution.integ-test-zip:elasticsearch) is not published on Maven
# Central for any 9.x version (maven-metadata.xml stops at 8.19.21 and 9.x paths return 404),
# so the newest available server is pinned, with the matching 8.19 Python client.
#
# Idempotent: a second run with a complete install only prints the directory.
set -euo pipefail

ES_VERSION="${RAGINDEX_ES_VERSION:-8.19.21}"
ES_SHA256_8_19_21="215d5f3dbf0609a149f6218a9e47b6ae2df34ebbff3c5754e35f15a5e5393c8a"
MAVEN_BASE="https://repo1.maven.org/maven2/org/elasticsearch/distribution/integ-test-zip/elasticsearch"

CACHE_ROOT="${RAGINDEX_CACHE:-$HOME/.cache/ragindex}/elasticsearch"
ZIP="$CACHE_ROOT/elasticsearch-$ES_VERSION.zip"
DEST="$CACHE_ROOT/elasticsearch-$ES_VERSION"
MARKER="$DEST/.ragindex-complete"

if [[ -f "$MARKER" ]]; then
  echo "$DEST"
  exit 0
fi

if [[ "$ES_VERSION" == "8.19.21" ]]; then
  expected="$ES_SHA256_8_19_21"
else
  # Another version: trust Maven Central's published sha256 for it.
  expected="$(curl -fsSL --retry 3 --max-time 60 "$MAVEN_BASE/$ES_VERSION/elasticsearch-$ES_VERSION.zip.sha256")"
fi

mkdir -p "$CACHE_ROOT"
if [[ ! -f "$ZIP" ]] || ! echo "$expected  $ZIP" | sha256sum -c --status -; then
  echo "downloading Elasticsearch $ES_VERSION ..." >&2
  curl -fSL --retry 3 --max-time 900 -o "$ZIP.part" \
    "$MAVEN_BASE/$ES_VERSION/elasticsearch-$ES_VERSION.zip"
  mv "$ZIP.part" "$ZIP"
fi
if ! echo "$expected  $ZIP" | sha256sum -c --status -; then
  echo "sha256 mismatch for $ZIP (expected $expected); deleting it" >&2
  rm -f "$ZIP"
  exit 1
fi

# Unzip into a temporary directory and move it into place, so a half-unpacked tree is never
# mistaken for an install.
tmp="$(mktemp -d "$CACHE_ROOT/unpack.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
unzip -q "$ZIP" -d "$tmp"
rm -rf "$DEST"
mv "$tmp/elasticsearch-$ES_VERSION" "$DEST"
touch "$MARKER"
echo "$DEST"
