#!/usr/bin/env bash
# Build the real Kubernetes control plane the tests run against (envtest style, no kubelet):
# kube-apiserver, kube-controller-manager, kubectl, etcd and helm, all from the Go module proxy
# at pinned versions. Nothing in PyPI/npm/Debian ships a usable kube-apiserver, so we compile it.
#
# Output: ${RAGINDEX_CACHE:-$HOME/.cache/ragindex}/k8s/<KUBE_VERSION>/bin/{etcd,kube-apiserver,
#         kube-controller-manager,kubectl,helm}. Idempotent: a binary that exists is skipped.
# --node adds what a real single-node cluster needs for the pods e2e (tests/pods): kube-scheduler,
# kubelet, kube-proxy, CoreDNS and KubeRay's ray-operator (cold: ~25 min more on 2 cores).
# Go module and build caches live under the same cache dir so CI can keep them between runs.
# Usage: scripts/build_k8s.sh [--node] [--print-bin-dir] [--print-kuberay-version]
set -euo pipefail

KUBE_VERSION="${KUBE_VERSION:-v1.36.3}"
STAGING_VERSION="${STAGING_VERSION:-v0.36.3}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
HELM_VERSION="${HELM_VERSION:-v3.22.0}"
COREDNS_VERSION="${COREDNS_VERSION:-v1.15.0}"
# The version of the vendored ray.io CRDs (shared/third_party/crds).
KUBERAY_VERSION="${KUBERAY_VERSION:-v1.6.2}"

CACHE="${RAGINDEX_CACHE:-$HOME/.cache/ragindex}"
ROOT="$CACHE/k8s/$KUBE_VERSION"
BIN="$ROOT/bin"
NODE=0
for arg in "$@"; do
  case "$arg" in
    --print-bin-dir) echo "$BIN"; exit 0 ;;
    --print-kuberay-version) echo "$KUBERAY_VERSION"; exit 0 ;;
    --node) NODE=1 ;;
    *) echo "build_k8s.sh: unknown argument '$arg' (use --node, --print-bin-dir, --print-kuberay-version)" >&2; exit 2 ;;
  esac
done

command -v go >/dev/null || { echo "build_k8s.sh: 'go' not found on PATH (Go >= 1.26 needed)" >&2; exit 2; }
mkdir -p "$BIN" "$ROOT/src"
# One build at a time (parallel test sessions may all find the binaries missing).
exec 9>"$ROOT/.build.lock"
flock 9
source "$(dirname "$0")/go_env.sh"

log() { echo "[build_k8s $(date +%H:%M:%S)] $*"; }

# Time one step and record it, so the build cost of each binary is visible in the log.
timed() {
  local name="$1"; shift
  local t0=$SECONDS
  "$@"
  log "built $name in $((SECONDS - t0)) s"
}

# A wrapper module around k8s.io/kubernetes: its go.mod replaces the staging modules with local
# paths, which a dependent module must re-point at their published releases.
kube_wrapper() {
  local dir="$ROOT/src/kube"
  if [[ -f "$dir/.ready" ]]; then return; fi
  rm -rf "$dir" && mkdir -p "$dir" && cd "$dir"
  go mod init ragindex.local/k8sbuild >/dev/null 2>&1
  local gomod
  gomod="$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
  [[ -f "$gomod" ]] || { echo "build_k8s.sh: cannot read go.mod of k8s.io/kubernetes@$KUBE_VERSION" >&2; exit 1; }
  local m
  for m in $(sed -n 's#^[[:space:]]*\(k8s.io/[^ ]*\) => ./staging/.*#\1#p' "$gomod"); do
    go mod edit "-replace=$m=$m@$STAGING_VERSION"
  done
  local godebug
  godebug="$(sed -n 's/^godebug \(.*\)$/\1/p' "$gomod")"
  if [[ -n "$godebug" ]]; then go mod edit "-godebug=$godebug"; fi
  go get -tool "k8s.io/kubernetes/cmd/kube-apiserver@$KUBE_VERSION"
  go get -tool "k8s.io/kubernetes/cmd/kube-controller-manager@$KUBE_VERSION"
  go get -tool "k8s.io/kubernetes/cmd/kubectl@$KUBE_VERSION"
  go get -tool "k8s.io/kubernetes/cmd/kube-scheduler@$KUBE_VERSION"
  go get -tool "k8s.io/kubernetes/cmd/kubelet@$KUBE_VERSION"
  go get -tool "k8s.io/kubernetes/cmd/kube-proxy@$KUBE_VERSION"
  touch .ready
}

kube_build() {
  local cmd="$1"
  if [[ -x "$BIN/$cmd" ]]; then log "$cmd exists, skipped"; return; fi
  kube_wrapper
  cd "$ROOT/src/kube"
  local v="${KUBE_VERSION#v}" major minor flags="" pkg
  major="${v%%.*}"; minor="$(echo "$v" | cut -d. -f2)"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
    flags+=" -X $pkg.gitTreeState=clean"
  done
  timed "$cmd" go build -ldflags "-s -w$flags" -o "$BIN/$cmd.tmp" "k8s.io/kubernetes/cmd/$cmd"
  mv "$BIN/$cmd.tmp" "$BIN/$cmd"
}

# etcd's server module carries replace directives, so `go install` refuses it: wrap it too.
etcd_build() {
  if [[ -x "$BIN/etcd" ]]; then log "etcd exists, skipped"; return; fi
  local dir="$ROOT/src/etcd"
  rm -rf "$dir" && mkdir -p "$dir" && cd "$dir"
  go mod init ragindex.local/etcdbuild >/dev/null 2>&1
  go get -tool "go.etcd.io/etcd/server/v3@$ETCD_VERSION"
  timed etcd go build -ldflags "-s -w" -o "$BIN/etcd.tmp" go.etcd.io/etcd/server/v3
  mv "$BIN/etcd.tmp" "$BIN/etcd"
}

helm_build() {
  if [[ -x "$BIN/helm" ]]; then log "helm exists, skipped"; return; fi
  local gobin="$ROOT/src/helm-bin"
  mkdir -p "$gobin"
  # Like helm's Makefile: the Kubernetes version `helm template`/`lint` assume offline follows
  # the client-go helm is built with (unstamped, it is v1.20 and kubeVersion checks fail).
  local gomod kminor
  gomod="$(go mod download -json "helm.sh/helm/v3@$HELM_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
  kminor="$(sed -n 's#^[[:space:]]*k8s.io/client-go v0\.\([0-9]*\)\..*#\1#p' "$gomod")"
  [[ -n "$kminor" ]] || { echo "build_k8s.sh: no client-go version in helm's go.mod" >&2; exit 1; }
  local flags="-s -w" p
  flags+=" -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
  flags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
  for p in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
    flags+=" -X $p.k8sVersionMajor=1 -X $p.k8sVersionMinor=$kminor"
  done
  timed helm env GOBIN="$gobin" go install -ldflags "$flags" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  mv "$gobin/helm" "$BIN/helm"
}

# CoreDNS with only the plugins a test cluster's Corefile uses (the full build pulls every cloud
# SDK): a main that imports them instead of core/plugin's generated list of all plugins.
coredns_build() {
  # The plugin set is part of the name: a changed list builds a new binary.
  if [[ -x "$BIN/coredns" && -f "$ROOT/src/coredns/.plugins-2" ]]; then log "coredns exists, skipped"; return; fi
  local dir="$ROOT/src/coredns"
  rm -rf "$dir" && mkdir -p "$dir" && cd "$dir"
  go mod init ragindex.local/corednsbuild >/dev/null 2>&1
  cat > main.go <<'GO'
package main

import (
	_ "github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/ready"
)

func main() { coremain.Run() }
GO
  go get "github.com/coredns/coredns@$COREDNS_VERSION"
  timed coredns go build -ldflags "-s -w" -o "$BIN/coredns.tmp" .
  mv "$BIN/coredns.tmp" "$BIN/coredns"
  touch .plugins-2
}

# KubeRay's operator, from its module zip on the Go proxy. Ask for the exact version: `go list -m
# -versions` lists fewer versions than the proxy serves (v1.6.2 is served, v1.7.0 answers 403).
kuberay_build() {
  if [[ -x "$BIN/ray-operator" && -f "$BIN/.ray-operator-$KUBERAY_VERSION" ]]; then
    log "ray-operator $KUBERAY_VERSION exists, skipped"; return
  fi
  local dir="$ROOT/src/kuberay-$KUBERAY_VERSION"
  if [[ ! -f "$dir/go.mod" ]]; then
    rm -rf "$dir" && mkdir -p "$dir"
    local zipdir
    zipdir="$(go mod download -json "github.com/ray-project/kuberay/ray-operator@$KUBERAY_VERSION" \
      | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')"
    [[ -n "$zipdir" && -f "$zipdir/go.mod" ]] \
      || { echo "build_k8s.sh: the Go proxy serves no ray-operator@$KUBERAY_VERSION" >&2; exit 1; }
    cp -r "$zipdir/." "$dir/" && chmod -R u+w "$dir"
  fi
  cd "$dir"
  timed ray-operator go build -ldflags "-s -w" -o "$BIN/ray-operator.tmp" .
  mv "$BIN/ray-operator.tmp" "$BIN/ray-operator"
  rm -f "$BIN"/.ray-operator-* && touch "$BIN/.ray-operator-$KUBERAY_VERSION"
}

log "bin dir $BIN (kube $KUBE_VERSION, etcd $ETCD_VERSION, helm $HELM_VERSION)"
etcd_build
helm_build
kube_build kube-apiserver
kube_build kube-controller-manager
kube_build kubectl
if [[ "$NODE" == 1 ]]; then
  kube_build kube-scheduler
  kube_build kubelet
  kube_build kube-proxy
  coredns_build
  kuberay_build
fi
log "done"
ls -l "$BIN"
