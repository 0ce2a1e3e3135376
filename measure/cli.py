"""The measurement part's subcommands of `ragindex`: eval, golden, convert, bench, gate, docs.

Registered through the `ragindex.commands` entry point (pyproject.toml): the runtime's CLI
(`ragindex.app.cli`) finds them there and never imports this part. Each command's module is
imported only when it runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ragindex.app.cli import common, lazy

CHECK_HELP = "exit 1 when a goal of this benchmark is missed (CI uses it)"


def add_commands(sub: argparse._SubParsersAction[Any]) -> None:
    p = sub.add_parser(
        "eval", help="[maintainer] retrieval (or answer) quality on a judged collection"
    )
    common(p, tenant=False)
    p.add_argument(
        "--collection",
        default="cranfield",
        help="'cranfield', a bundled collection (gnu-manuals, nodejs-api) or a BEIR folder",
    )
    p.add_argument(
        "--json", type=Path, metavar="FILE", help="write the report as JSON (-: standard output)"
    )
    p.add_argument("--per-query", type=Path, help="write per-query results as JSON")
    p.add_argument("--answers", action="store_true", help="evaluate generated answers too")
    p.add_argument(
        "--split",
        choices=["tune", "heldout", "all"],
        default="all",
        help="judged queries to score: the seeded tuning half, the held-out half, or all",
    )
    p.set_defaults(run=lazy("ragindex.measure.evals.cli", "eval_command"))

    p = sub.add_parser("golden", help="[maintainer] golden-set helpers")
    golden = p.add_subparsers(dest="golden_command", required=True)
    g = golden.add_parser("add", help="append a judged query to a BEIR collection")
    g.add_argument("--collection", type=Path, required=True)
    g.add_argument("--query", required=True, help="the question text")
    g.add_argument(
        "--relevant", nargs="+", required=True, metavar="DOC_ID[=GRADE]", help="judged documents"
    )
    g.add_argument("--tenant", default=None)
    g.set_defaults(run=lazy("ragindex.measure.evals.cli", "golden_add_command"))

    p = sub.add_parser("convert", help="[maintainer] convert Cranfield to the BEIR layout")
    p.add_argument("--out", type=Path, default=Path("data/beir/cranfield"))
    p.set_defaults(run=lazy("ragindex.measure.evals.cli", "convert_command"))

    p = sub.add_parser("bench", help="[maintainer] benchmarks (print a table, write JSON)")
    bench = p.add_subparsers(dest="bench_command", required=True)
    b = bench.add_parser("filtered", help="tenant-filtered dense recall and latency")
    b.add_argument("--vectors", type=int, default=100_000)
    b.add_argument("--json", type=Path, metavar="FILE")
    b.add_argument("--check", action="store_true", help=CHECK_HELP)
    scope = b.add_mutually_exclusive_group()
    scope.add_argument(
        "--acl",
        action="store_true",
        help="instead: ACLs allowing 0.1-100 %% of ONE tenant's vectors (recall vs exact)",
    )
    scope.add_argument(
        "--metadata", action="store_true", help="the same with a metadata range filter"
    )
    b.add_argument("--queries", type=int, default=200)
    b.add_argument(
        "--exact-threshold",
        type=int,
        help="partitions up to this size are searched exactly (default: the spec's); lower it"
        " to run the HNSW paths on a small --vectors (CI does)",
    )
    b.set_defaults(run=lazy("ragindex.measure.bench.cli", "bench_filtered_command"))
    b = bench.add_parser(
        "serve",
        help="HTTP vs in-process search and its stages, Elasticsearch BM25 peer, freshness,"
        " ingest, saturation with 1 and 2 Router replicas, runtime memory",
    )
    b.add_argument("--chunks", type=int, default=100_000)
    b.add_argument("--json", type=Path, metavar="FILE")
    b.add_argument("--data-dir", type=Path)
    b.add_argument("--port", type=int, help="HTTP port of the app (default: a free one)")
    b.add_argument(
        "--skip",
        action="append",
        choices=["peer", "load", "ingest"],
        default=[],
        help="leave out the Elasticsearch peer, the saturation ramp or the ingest rounds",
    )
    b.add_argument(
        "--log",
        choices=["file", "kafka"],
        default="file",
        help="the data plane: the file log, or a local Kafka broker started for the run",
    )
    b.add_argument(
        "--shard-replicas",
        type=int,
        help="run the cluster layout (each shard its own deployment) with N replicas per shard",
    )
    b.add_argument(
        "--replica-niceness",
        type=int,
        help="the cluster layout's replicas at this niceness, 0..19 (default: Ray's 15)",
    )
    b.add_argument(
        "--spec",
        type=Path,
        help="RagIndex spec YAML the app runs (e.g. its embedder); the benchmark sets dense.shards"
        " (2), the replicas and the request limits itself",
    )
    b.add_argument(
        "--anchors",
        type=int,
        help="real passages the corpus vectors are generated around (embedded once, cached;"
        " default 2,000)",
    )
    b.add_argument("--check", action="store_true", help=CHECK_HELP)
    b.set_defaults(run=lazy("ragindex.measure.bench.cli", "bench_serve_command"))
    b = bench.add_parser(
        "http", help="each Ray Serve option against the shipped ones, two servers side by side"
    )
    b.add_argument("--json", type=Path, metavar="FILE")
    b.add_argument(
        "--variant",
        action="append",
        default=[],
        help="run only the variants whose name contains this (repeatable; default: all)",
    )
    b.set_defaults(run=lazy("ragindex.measure.bench.cli", "bench_http_command"))
    b = bench.add_parser("backfill", help="generation backfill documents/s vs the raw embedder")
    b.add_argument("--docs", type=int, default=500, help="Cranfield documents to replay")
    b.add_argument("--spec", type=Path, help="RagIndex spec YAML (the embedder, chunking)")
    b.add_argument(
        "--ray-data-actors",
        type=int,
        default=0,
        help="also run the backfill as a Ray Data job over this many embedder actors (0: not)",
    )
    b.add_argument("--json", type=Path, metavar="FILE")
    b.add_argument("--check", action="store_true", help=CHECK_HELP)
    b.set_defaults(run=lazy("ragindex.measure.bench.backfill", "bench_backfill_command"))
    b = bench.add_parser("encoder", help="query-encode p50 and passages/s: torch vs ONNX fp32/int8")
    b.add_argument("--queries", type=int, default=225, help="Cranfield queries to encode")
    b.add_argument("--rounds", type=int, default=3, help="passes over the queries")
    b.add_argument("--passages", type=int, default=256, help="Cranfield passages to embed")
    b.add_argument("--json", type=Path, metavar="FILE")
    b.add_argument("--check", action="store_true", help=CHECK_HELP)
    b.set_defaults(run=lazy("ragindex.measure.bench.encoder", "bench_encoder_command"))
    b = bench.add_parser("bm25", help="BM25 on Elasticsearch vs the embedded backend")
    b.add_argument("--json", type=Path, metavar="FILE")
    b.add_argument("--synthetic", type=int, default=0, help="extra synthetic documents")
    b.add_argument("--check", action="store_true", help=CHECK_HELP)
    b.set_defaults(run=lazy("ragindex.measure.bench.cli", "bench_bm25_command"))
    b = bench.add_parser("tenancy", help="embedded BM25: one shared index vs one per tenant")
    b.add_argument("--json", type=Path, metavar="FILE")
    b.add_argument("--synthetic", type=int, default=0, help="extra synthetic documents")
    b.add_argument("--tenants", type=int, nargs="+", default=[2, 50], help="tenant counts")
    b.set_defaults(run=lazy("ragindex.measure.bench.cli", "bench_tenancy_command"))
    b = bench.add_parser("suite", help="every benchmark in one run: JSON, PNG plots, peers")
    b.add_argument("--json", type=Path, metavar="FILE", help="default docs/benchmarks.json")
    b.add_argument("--plots", type=Path, help="PNG folder (default docs/img)")
    b.add_argument("--vectors", type=int, default=100_000)
    b.add_argument("--es-vectors", type=int, default=20_000, help="vectors for ES kNN")
    b.add_argument("--serve-chunks", type=int, help="HTTP benchmark size (default --vectors)")
    b.add_argument("--threads", type=int, default=1, help="FAISS and torch threads")
    b.add_argument("--skip", action="append", choices=["es", "serve"], default=[])
    b.add_argument(
        "--only",
        action="append",
        choices=["dense_curve", "filtered", "query_path", "peers", "serve"],
        help="rerun only this section (repeatable) into the existing --json, same options",
    )
    b.add_argument("--check", action="store_true", help=CHECK_HELP)
    b.set_defaults(run=lazy("ragindex.measure.bench.suite_cli", "bench_suite_command"))
    b = bench.add_parser(
        "scale",
        help="per size and index type: build, memory, snapshot, bootstrap, recall, p50/p99,"
        " filtered recall, on vectors generated around real MiniLM embeddings",
    )
    b.add_argument("--sizes", default="100000,300000,1000000", help="vector counts, a,b,c")
    b.add_argument("--types", default="hnsw,hnsw_sq8,ivf_pq,ivf_sq8", help="index types, a,b")
    b.add_argument(
        "--anchors", type=int, default=12_000, help="real passages embedded as anchors (cached)"
    )
    b.add_argument("--queries", type=int, default=200, help="generated queries per search row")
    b.add_argument(
        "--ivf-by-size",
        action="store_true",
        help="IVF types: nlist and nprobe as `ragindex plan` writes them for each size (nlist"
        " 4 sqrt(vectors), a power of two; nprobe 64 at 100 k, falling with the fourth root)"
        " instead of the spec's",
    )
    b.add_argument(
        "--index",
        default="{}",
        metavar="JSON",
        help="the spec's dense.index fields every type is built with, as JSON, e.g."
        ' \'{"refine": {"storage": "sq4", "kFactor": 16}}\' (the type comes from --types)',
    )
    b.add_argument(
        "--validate",
        action="store_true",
        help="first compare generated vectors with held-out real ones (NN distances, recall)",
    )
    b.add_argument("--json", type=Path, metavar="FILE")
    b.add_argument("--plot", type=Path, metavar="PNG", help="cost against size, per type")
    b.add_argument(
        "--constants", type=Path, metavar="FILE", help="write `ragindex plan`'s constants"
    )
    b.add_argument("--note", default="", help="recorded with --constants (e.g. 'busy box')")
    b.add_argument("--check", action="store_true", help=CHECK_HELP)
    b.set_defaults(run=lazy("ragindex.measure.bench.scale", "bench_scale_command"))

    p = sub.add_parser(
        "plan", help="shards, replicas, memory, nodes and ingest hours for a corpus and a load"
    )
    p.add_argument("--chunks", type=int, required=True, help="chunks (vectors) to serve")
    p.add_argument("--dim", type=int, default=384, help="embedding dimension")
    p.add_argument("--index-type", default="hnsw_sq8", help="hnsw, hnsw_sq8, ivf_pq or ivf_sq8")
    p.add_argument("--qps", type=float, default=100.0, help="queries per second to serve")
    p.add_argument("--p99-ms", type=float, default=50.0, help="query p99 target, ms")
    p.add_argument("--freshness-s", type=float, default=5.0, help="write-to-searchable bound, s")
    p.add_argument("--replica-memory-gib", type=float, default=16.0, help="memory cap per replica")
    p.add_argument("--node-cores", type=int, default=16)
    p.add_argument("--node-memory-gib", type=float, default=64.0)
    p.add_argument("--constants", type=Path, help="default measure/capacity.json")
    p.add_argument("--json", type=Path, metavar="FILE")
    p.set_defaults(run=lazy("ragindex.measure.plan", "plan_command"))

    p = sub.add_parser(
        "gate",
        help="[maintainer] release gate: quality on every collection + stage ratios vs a baseline",
    )
    common(p, tenant=False)
    p.add_argument("--collection", default="cranfield")
    p.add_argument("--baseline", type=Path, help="default measure/gate/baseline.json")
    p.add_argument("--update-baseline", action="store_true", help="rewrite the baseline")
    p.add_argument(
        "--also",
        nargs="*",
        metavar="COLLECTION",
        help="with --update-baseline: the other collections whose quality is gated (default:"
        " every bundled one); the gate itself checks those its baseline holds",
    )
    p.add_argument("--legs", nargs="+", help="legs to replay (default: all)")
    p.add_argument("--json", type=Path, metavar="FILE", help="write this run's measurement")
    p.set_defaults(run=lazy("ragindex.measure.gate.run", "gate_command"))

    p = sub.add_parser(
        "docs", help="[maintainer] regenerate docs/benchmarks.md from the last suite JSON"
    )
    p.add_argument("--suite", type=Path, help="default docs/benchmarks.json")
    p.add_argument("--out", type=Path, help="default docs/benchmarks.md")
    p.set_defaults(run=lazy("ragindex.measure.docs", "docs_command"))
