# Sourced by the Go build scripts (build_k8s.sh, build_prometheus.sh) after they set CACHE: one
# module and build cache for every Go tool (GOMODCACHE_OVERRIDE / GOCACHE_OVERRIDE point them
# elsewhere, e.g. at empty folders to time a cold build), reproducible flags, no toolchain download.
export GOMODCACHE="${GOMODCACHE_OVERRIDE:-$CACHE/go/mod}"
export GOCACHE="${GOCACHE_OVERRIDE:-$CACHE/go/build}"
export GOFLAGS="-trimpath -buildvcs=false -mod=mod"
export GOMAXPROCS="${GOMAXPROCS:-2}"
export CGO_ENABLED=0
export GOTOOLCHAIN=local
