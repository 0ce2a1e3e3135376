"""`ragindex bench filtered`, `bm25`, `tenancy`, `serve` and `http`: run a benchmark, print a
table, write JSON.

The JSON says what the numbers were measured on (cores, thread settings), since figures from a
2-core box shared with other work mean little without it. The BM25 benchmark keeps a cached
index keyed like `ragindex eval`'s, so Cranfield is embedded once across runs, and starts a
throwaway local Elasticsearch filled as a second BM25 view of that index's log.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from ragindex.app import EmbeddedIndex, cranfield_dir
from ragindex.app.serve_cli import exit_on_sigterm
from ragindex.config import DenseSpec, RagIndexSpec
from ragindex.errors import InvalidInput
from ragindex.lexical import ElasticsearchIndex
from ragindex.measure.bench.bm25 import (
    NDCG_TOLERANCE,
    bm25_table,
    run_bm25_bench,
    with_synthetic,
)
from ragindex.measure.bench.filtered import AccessKind, run_access_bench, run_filtered_bench
from ragindex.measure.bench.peer import boosts
from ragindex.measure.bench.tenancy import collection_chunks, run_tenancy_bench, tenancy_table
from ragindex.measure.evals.cli import cache_dir, eval_data_dir
from ragindex.measure.evals.collections import Collection, load_cranfield
from ragindex.measure.evals.runner import ingest_collection
from ragindex.measure.output import write_json
from ragindex.measure.servers.elasticsearch import ES_VERSION, running_elasticsearch
from ragindex.measure.stats import WARMUP_QUERIES, Goals, missed_goals, text_table
from ragindex.netutil import free_port
from ragindex.router import QueryEngine

FILTERED_DIM = 384
BENCH_ALIAS = "bench_bm25"
FILTERED_RECALL_GOAL = 0.95  # every tenant share, exact or HNSW (FIELD-NOTES: 0.998 at ef 64)
ACCESS_RECALL_GOAL = 0.98  # every ACL / metadata share inside one tenant (#18)
BM25_GOALS: Goals = {"bm25_ndcg@10_abs_diff": ("<=", NDCG_TOLERANCE)}  # same analyzer and BM25
ES_BENCH_TIMEOUT_S = 30.0  # bulk loads on a busy 2-core box; searches finish in ms anyway


def machine() -> dict[str, Any]:
    """Cores and the thread settings that shape the numbers."""
    import faiss
    import torch

    return {
        "cores": os.cpu_count(),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
        "MKL_NUM_THREADS": os.environ.get("MKL_NUM_THREADS"),
        "faiss_threads": faiss.omp_get_max_threads(),
        "torch_threads": torch.get_num_threads(),
    }


def access_table(result: Mapping[str, Mapping[str, Any]]) -> str:
    """One row per allowed share of `run_access_bench`'s result, the unfiltered search first."""
    header = ["allows", "vectors", "plan", "recall@10", "p50 ms", "p99 ms", "first ms"]
    rows = [
        [
            share,
            str(row["allowed"]),
            str(row["plan"]),
            f"{row['recall@10']:.4f}",
            f"{row['p50_ms']:.3f}",
            f"{row['p99_ms']:.3f}",
            f"{row['first_ms']:.3f}",
        ]
        for share, row in result.items()
    ]
    return text_table(header, rows)


def filtered_table(result: Mapping[str, Mapping[str, Any]]) -> str:
    """One row per tenant share of `run_filtered_bench`'s result."""
    header = ["share", "vectors", "search", "recall@10", "p50 ms", "p99 ms"]
    rows = [
        [
            share,
            str(row["vectors"]),
            str(row["search"]),
            f"{row['recall@10']:.4f}",
            f"{row['p50_ms']:.3f}",
            f"{row['p99_ms']:.3f}",
        ]
        for share, row in result.items()
    ]
    return text_table(header, rows)


def bench_filtered_command(args: argparse.Namespace) -> int:
    """Tenant-filtered dense search by tenant share: `{share: {recall@10, p50_ms, ...}}` plus
    a `run` entry with what it ran on. With `--acl` (or `--metadata`): ACLs (a metadata
    range) allowing shares of one tenant's vectors, beside the unfiltered search."""
    threshold = getattr(args, "exact_threshold", None)
    if threshold is not None and threshold < 0:
        raise InvalidInput(f"--exact-threshold must be >= 0 vectors, got {threshold}")
    dense = DenseSpec() if threshold is None else DenseSpec(exact_threshold=threshold)
    if args.acl or args.metadata:
        kind: AccessKind = "acl" if args.acl else "metadata"
        result = run_access_bench(
            vectors=args.vectors, dim=FILTERED_DIM, queries=args.queries, dense=dense, kind=kind
        )
        print(f"{kind}-filtered dense search: one tenant of {args.vectors} vectors,"
              f" dim {FILTERED_DIM}, {args.queries} queries")  # fmt: skip
        print(access_table(result))
    else:
        result = run_filtered_bench(
            vectors=args.vectors, dim=FILTERED_DIM, queries=args.queries, dense=dense
        )
        print(f"filtered dense search: {args.vectors} vectors, dim {FILTERED_DIM}")
        print(filtered_table(result))
    run = {
        "vectors": args.vectors,
        "dim": FILTERED_DIM,
        "queries": args.queries,
        "exact_threshold": dense.exact_threshold,
        **machine(),
    }
    if args.json:
        write_json(args.json, {**result, "run": run})
    goal = ACCESS_RECALL_GOAL if args.acl or args.metadata else FILTERED_RECALL_GOAL
    return checked(args, filtered_missed_goals(result, goal))


def filtered_missed_goals(result: Mapping[str, Any], goal: float) -> list[str]:
    """Each share (or ACL share) of a filtered benchmark whose recall@10 is under `goal`."""
    rows = {s: r for s, r in result.items() if isinstance(r, Mapping) and "recall@10" in r}
    goals: Goals = {f"{share} recall@10": (">=", goal) for share in rows}
    return missed_goals({f"{s} recall@10": r["recall@10"] for s, r in rows.items()}, goals)


def bench_data_dir(collection: Collection, spec: RagIndexSpec) -> Path:
    """The benchmark's own cached index (keyed like `ragindex eval`'s, but not shared with it,
    so a running eval never holds the log's writer lock the benchmark needs)."""
    return cache_dir() / "bench-bm25" / eval_data_dir(collection, spec).name


def bm25_bench(
    collection: Collection,
    data_dir: Path,
    es_url: str | None = None,
    spec: RagIndexSpec | None = None,
    repeats: int = 3,
    warmup: int = WARMUP_QUERIES,
) -> dict[str, Any]:
    """Ingest the collection once (incrementally) into the index at data_dir, apply its chunks
    to a fresh Elasticsearch alias as a second BM25 view of the log (on es_url, or on a local
    server started after the ingest), and measure both backends with the same dense shard
    replicas (the first `warmup` judged queries untimed)."""
    spec = spec or RagIndexSpec()
    with ExitStack() as stack:
        index = EmbeddedIndex(data_dir, spec)
        stack.callback(index.close)
        print(f"ingesting {collection.name} into {data_dir} ...", file=sys.stderr, flush=True)
        ingest_collection(collection, index.upsert)
        url = es_url or stack.enter_context(running_elasticsearch()).url
        es = ElasticsearchIndex.open(
            url, BENCH_ALIAS, timeout_s=ES_BENCH_TIMEOUT_S, boosts=boosts(spec)
        )
        stack.callback(es.close)
        stack.callback(es.drop)
        offsets = Path(stack.enter_context(tempfile.TemporaryDirectory())) / "es-offsets.json"
        index.lexical_view(es, offsets).catch_up()
        es_engine = QueryEngine(
            index.query.embedder, index.dense, es, index.dense, spec.fusion, spec.lexical
        )
        print("measuring ...", file=sys.stderr, flush=True)
        result = run_bm25_bench(collection, index.query, es_engine, repeats=repeats, warmup=warmup)
    result["run"] = {"elasticsearch": ES_VERSION, **machine()}
    return result


def bench_bm25_command(args: argparse.Namespace) -> int:
    """BM25 top-100 and hybrid on Elasticsearch vs tantivy over Cranfield (plus
    `args.synthetic` generated documents)."""
    collection = with_synthetic(load_cranfield(cranfield_dir()), args.synthetic)
    spec = RagIndexSpec()
    result = bm25_bench(collection, bench_data_dir(collection, spec), spec=spec)
    print(bm25_table(result))
    if args.json:
        write_json(args.json, result)
    return checked(args, missed_goals(result, BM25_GOALS))


def bench_tenancy_command(args: argparse.Namespace) -> int:
    """The embedded BM25 backend shared vs an index per tenant, over Cranfield (plus
    `args.synthetic` generated documents) spread over 2 and 50 tenants."""
    collection = with_synthetic(load_cranfield(cranfield_dir()), args.synthetic)
    queries = [q.text for q in collection.queries.values()]
    with tempfile.TemporaryDirectory(prefix="bench-tenancy-") as tmp:
        result = run_tenancy_bench(
            collection_chunks(collection), queries, Path(tmp), tuple(args.tenants)
        )
    result["run"] = machine()
    print(tenancy_table(result))
    if args.json:
        write_json(args.json, result)
    return 0


def checked(args: argparse.Namespace, missed: list[str]) -> int:
    """Print missed goals; with --check they make the command exit 1."""
    for line in missed:
        print(f"missed goal: {line}")
    return 1 if getattr(args, "check", False) and missed else 0


def bench_serve_command(args: argparse.Namespace) -> int:
    """`ragindex bench serve`: see ragindex.measure.bench.serve."""
    from ragindex.app.index_opening import load_spec
    from ragindex.measure.bench.serve import ANCHORS, format_report, run_bench_serve

    skip = set(getattr(args, "skip", None) or ())
    exit_on_sigterm()
    report = run_bench_serve(
        chunks=args.chunks,
        data_dir=Path(args.data_dir).resolve() if getattr(args, "data_dir", None) else None,
        port=getattr(args, "port", None) or free_port(),
        peer="peer" not in skip,
        load="load" not in skip,
        ingest="ingest" not in skip,
        log=getattr(args, "log", "file"),
        shard_replicas=getattr(args, "shard_replicas", None),
        replica_niceness=getattr(args, "replica_niceness", None),
        spec=load_spec(getattr(args, "spec", None)),
        anchors=getattr(args, "anchors", None) or ANCHORS,
    )
    if args.json:  # first: a run's figures outlast a failure to print them
        write_json(args.json, report)
    print(format_report(report))
    return 1 if getattr(args, "check", False) and report["missed_goals"] else 0


def bench_http_command(args: argparse.Namespace) -> int:
    """`ragindex bench http`: see ragindex.measure.bench.http."""
    from ragindex.measure.bench.http import VARIANTS, format_http_report, run_bench_http

    wanted = getattr(args, "variant", None) or []
    variants = {k: v for k, v in VARIANTS.items() if not wanted or any(w in k for w in wanted)}
    if not variants:
        raise InvalidInput(f"no bench http variant matches {wanted}: one of {sorted(VARIANTS)}")
    exit_on_sigterm()
    report = run_bench_http(variants)
    print(format_http_report(report))
    if args.json:
        write_json(args.json, report)
    return 1 if any("error" in v for v in report["variants"].values()) else 0
