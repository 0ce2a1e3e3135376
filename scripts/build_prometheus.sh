#!/usr/bin/env bash
# Build Prometheus and promtool from the Go module proxy at a pinned version, for the tests that
# scrape the embedded runtime and unit-test the chart's alert rules (`promtool test rules`).
# Nothing in PyPI/npm/Debian ships a current Prometheus, so we compile it like the Kubernetes tools.
#
# The `remove_all_sd` build tag leaves out every service-discovery plugin but file and http (the
# AWS/Azure/GCP/... SDKs are most of a full build); the tests only use static targets. promtool
# imports the Kubernetes SD itself, so client-go is still compiled for it. The web UI
# assets are not embedded (no `builtinassets` tag): the tests use only the HTTP API.
#
# Output: ${RAGINDEX_CACHE:-$HOME/.cache/ragindex}/prometheus/<VERSION>/bin/{prometheus,promtool}.
# Idempotent: binaries that exist are kept. Go module and build caches are shared with
# scripts/build_k8s.sh (GOMODCACHE_OVERRIDE / GOCACHE_OVERRIDE point them elsewhere, e.g. at empty
# directories to time a cold build).
# Usage: scripts/build_prometheus.sh [--print-bin-dir]
set -euo pipefail

PROMETHEUS_VERSION="${PROMETHEUS_VERSION:-v0.316.0}"  # the Go module version of Prometheus 3.16.0

CACHE="${RAGINDEX_CACHE:-$HOME/.cache/ragindex}"
ROOT="$CACHE/prometheus/$PROMETHEUS_VERSION"
BIN="$ROOT/bin"
for arg in "$@"; do
  case "$arg" in
    --print-bin-dir) echo "$BIN"; exit 0 ;;
    *) echo "build_prometheus.sh: unknown argument '$arg' (use --print-bin-dir)" >&2; exit 2 ;;
  esac
done

command -v go >/dev/null || { echo "build_prometheus.sh: 'go' not found on PATH (Go >= 1.26 needed)" >&2; exit 2; }
mkdir -p "$BIN" "$ROOT/src"
# One build at a time (parallel test sessions may all find the binaries missing).
exec 9>"$ROOT/.build.lock"
flock 9
source "$(dirname "$0")/go_env.sh"

log() { echo "[build_prometheus $(date +%H:%M:%S)] $*"; }

if [[ -x "$BIN/prometheus" && -x "$BIN/promtool" ]]; then
  log "prometheus and promtool $PROMETHEUS_VERSION exist, skipped"
  exit 0
fi

t0=$SECONDS
# A wrapper module, as for etcd: it pins Prometheus and lets `go build` resolve its dependencies.
dir="$ROOT/src/wrapper"
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir"
go mod init ragindex.local/prometheusbuild >/dev/null 2>&1
go get -tool "github.com/prometheus/prometheus/cmd/prometheus@$PROMETHEUS_VERSION"
go get -tool "github.com/prometheus/prometheus/cmd/promtool@$PROMETHEUS_VERSION"
log "modules resolved in $((SECONDS - t0)) s"

# Stamp the release version (the module's VERSION file: v0.316.0 is Prometheus 3.16.0).
version="$(cat "$(go list -m -f '{{.Dir}}' github.com/prometheus/prometheus)/VERSION")"
flags="-s -w -X github.com/prometheus/common/version.Version=$version"
flags+=" -X github.com/prometheus/common/version.Revision=$PROMETHEUS_VERSION"
for cmd in prometheus promtool; do
  t1=$SECONDS
  go build -tags "netgo remove_all_sd" -ldflags "$flags" -o "$BIN/$cmd.tmp" \
    "github.com/prometheus/prometheus/cmd/$cmd"
  mv "$BIN/$cmd.tmp" "$BIN/$cmd"
  log "built $cmd in $((SECONDS - t1)) s"
done
log "done in $((SECONDS - t0)) s"
ls -l "$BIN"
