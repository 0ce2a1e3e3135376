#!/usr/bin/env bash
# Build a minimal OpenTelemetry Collector from the Go module proxy at a pinned release, for the
# test that exports a search's trace to a real collector (tests/telemetry/test_otel_collector.py).
# No registry reachable here ships a collector binary, so we compile it like Prometheus.
#
# The sources are in scripts/otelcol/: a main.go and components.go written the way the collector
# builder (ocb) generates them, with two components only: the core OTLP receiver (HTTP and gRPC)
# and the contrib file exporter (JSON lines the test reads), and a go.mod/go.sum pinned with
# `go mod tidy` (every collector module at one release: v0.161.0 with the v1.67.0 core modules;
# fileexporter passes no newer release here).
#
# Output: ${RAGINDEX_CACHE:-$HOME/.cache/ragindex}/otelcol/<VERSION>/bin/otelcol.
# Idempotent: kept while it was built from the same sources (a hash of scripts/otelcol/ beside
# it). Go module and build caches are shared with the other Go builds (scripts/go_env.sh).
# Usage: scripts/build_otelcol.sh [--print-bin-dir]
set -euo pipefail

OTELCOL_VERSION=v0.161.0  # the release pinned in scripts/otelcol/go.mod

SRC="$(cd "$(dirname "$0")/otelcol" && pwd)"
CACHE="${RAGINDEX_CACHE:-$HOME/.cache/ragindex}"
ROOT="$CACHE/otelcol/$OTELCOL_VERSION"
BIN="$ROOT/bin"
for arg in "$@"; do
  case "$arg" in
    --print-bin-dir) echo "$BIN"; exit 0 ;;
    *) echo "build_otelcol.sh: unknown argument '$arg' (use --print-bin-dir)" >&2; exit 2 ;;
  esac
done

command -v go >/dev/null || { echo "build_otelcol.sh: 'go' not found on PATH (Go >= 1.26 needed)" >&2; exit 2; }
mkdir -p "$BIN" "$ROOT/src"
# One build at a time (parallel test sessions may all find the binary missing).
exec 9>"$ROOT/.build.lock"
flock 9
source "$(dirname "$0")/go_env.sh"

log() { echo "[build_otelcol $(date +%H:%M:%S)] $*"; }

inputs="$(cd "$SRC" && cat go.mod go.sum ./*.go | sha256sum | cut -d' ' -f1)"
if [[ -x "$BIN/otelcol" && "$(cat "$BIN/otelcol.sources" 2>/dev/null)" == "$inputs" ]]; then
  log "otelcol $OTELCOL_VERSION exists, skipped"
  exit 0
fi

t0=$SECONDS
# Build a copy, so that the go command never rewrites the pinned files in the repository.
dir="$ROOT/src/otelcol"
rm -rf "$dir" && mkdir -p "$dir" && cp "$SRC"/go.mod "$SRC"/go.sum "$SRC"/*.go "$dir"/
cd "$dir"
go build -mod=readonly -ldflags "-s -w" -o "$BIN/otelcol.tmp" .
mv "$BIN/otelcol.tmp" "$BIN/otelcol"
echo "$inputs" >"$BIN/otelcol.sources"
log "built otelcol in $((SECONDS - t0)) s"
ls -l "$BIN/otelcol"
