#!/usr/bin/env bash
# The benchmarks whose goals CI holds (`--check`: a missed goal exits 1), on inputs small enough
# for a shared 2-core box, with goals that do not depend on its load:
# - bench filtered (tenant shares, ACLs, a metadata range) on 20 k clustered vectors with the
#   exact threshold lowered to 500, so the HNSW paths (with and without an id selector, efSearch
#   raised by selectivity) run beside the exact ones: recall@10 vs exact >= 0.95 / 0.98;
# - bench backfill on 40 Cranfield documents: backfill documents/s >= 0.5 x the raw embedder's,
#   both legs alternating batch by batch in one run.
# The rest (bench bm25's nDCG agreement, bench serve's ratios, freshness and bootstrap) needs
# Elasticsearch or Ray Serve on the full corpus and is held by `ragindex bench suite --check`.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
small=(--vectors 20000 --queries 50 --exact-threshold 500 --check)
.venv/bin/ragindex bench filtered "${small[@]}" --json "$out/filtered.json"
.venv/bin/ragindex bench filtered --acl "${small[@]}" --json "$out/acl.json"
.venv/bin/ragindex bench filtered --metadata "${small[@]}" --json "$out/metadata.json"
.venv/bin/ragindex bench backfill --docs 40 --check --json "$out/backfill.json"
