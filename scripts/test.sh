#!/usr/bin/env bash
# The whole test run, from a fresh machine: install, fetch/build the real servers the tests start
# (Elasticsearch, Kafka, Debian's Chromium and chromedriver for the search page's browser test
# and dict-gcide for bench scale's real text;
# Prometheus and promtool; kube-apiserver + etcd + controller-manager, helm, kubectl, and for
# the pods e2e a node's kubelet, scheduler, kube-proxy, CoreDNS, KubeRay and our images), static
# checks, pytest, the product on real pods (helm install, kubectl apply, generations under load,
# autoscaling), then the benchmarks' goals on small inputs (scripts/bench_check.sh) and the
# release gate (quality on every bundled collection and latency ratios against
# measure/gate/baseline.json). Needs root (apt, containerd, kubelet). Everything slow is cached
# under ${RAGINDEX_CACHE:-~/.cache/ragindex}.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 RAY_USAGE_STATS_ENABLED=0 RAY_AUTH_MODE=disabled
# Here every test runs against real servers and the shared data: a skip is a failure.
export RAGINDEX_STRICT_SKIPS=1
scripts/setup.sh
scripts/build_otelcol.sh &  # compiles while the next three mostly download
otelcol=$!
scripts/setup_debian.sh
scripts/fetch_elasticsearch.sh
scripts/fetch_kafka.sh
wait "$otelcol"
scripts/build_prometheus.sh
scripts/setup_pods.sh
scripts/lint.sh
.venv/bin/pytest --durations=25 "$@"
.venv/bin/pytest -m pods -rP tests/operator/test_pods_e2e.py
scripts/bench_check.sh
.venv/bin/ragindex gate
