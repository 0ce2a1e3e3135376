"""Runners of `ragindex bench suite` and of the gate's benchmark subset; each returns a dict.

Why (issue #6): users pick a retrieval backend by its curves, and a release gate needs numbers
that are comparable between runs on a noisy shared box. So:
- the dense curve is measured on the served shard replicas (vectors written as chunk records to
  a log, applied and snapshotted by one LogShardReplica per shard, merged by score over
  shards), with HNSW forced (exact_threshold 0) and efSearch swept by reloading the same
  snapshots with another `HnswSpec`, and every point is validated against exact search on the
  same vectors;
- latencies that the gate compares are RATIOS of two searches timed alternately, query by query,
  so load from other processes hits both sides alike;
- every result says what it ran on (`environment()`).
The app layer composes these with the engine, Elasticsearch and the Serve benchmark.
"""

from __future__ import annotations

import os
import platform
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from ragindex.config import DenseSpec, HnswSpec
from ragindex.errors import InvalidInput
from ragindex.measure.bench.filtered import TopicModel
from ragindex.measure.bench.served_vectors import ServedVectors, vector_chunk
from ragindex.measure.evals.collections import Collection
from ragindex.measure.evals.runner import IngestFn, evaluate
from ragindex.measure.stats import WARMUP_QUERIES, percentiles, split_warmup
from ragindex.protocols import Vectors
from ragindex.router import QueryEngine, SearchResult
from ragindex.shards import ReplicaDenseIndex
from ragindex.types import Document, ModelIdentity

DEFAULT_EF = (4, 8, 16, 32, 64, 128, 256)
BENCH_TENANT = "bench"
_VERSIONED = (
    "ragindex",
    "numpy",
    "faiss-cpu",
    "torch",
    "tantivy",
    "sentence-transformers",
    "ray",
    "elasticsearch",
)


def environment() -> dict[str, Any]:
    """Cores, thread settings and package versions: what a number was measured on."""
    import faiss
    import torch

    versions: dict[str, str | None] = {}
    for name in _VERSIONED:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "cores": os.cpu_count(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
        "MKL_NUM_THREADS": os.environ.get("MKL_NUM_THREADS"),
        "faiss_threads": faiss.omp_get_max_threads(),
        "torch_threads": torch.get_num_threads(),
        "versions": versions,
    }


def set_threads(threads: int) -> None:
    """Pin FAISS and torch intra-op threads (env vars alone are read only at import)."""
    import faiss
    import torch

    if threads < 1:
        raise InvalidInput(f"threads must be >= 1, got {threads}")
    faiss.omp_set_num_threads(threads)
    torch.set_num_threads(threads)


StageFloor = Callable[[str, Vectors, SearchResult], object]
GATE_WARMUP_QUERIES = 25


def stage_ratios(
    engine: QueryEngine,
    tenant: str,
    queries: Sequence[str],
    floors: Mapping[str, StageFloor],
    repeats: int = 2,
    warmup: int = GATE_WARMUP_QUERIES,
    k: int = 10,
) -> dict[str, dict[str, float]]:
    """Each named stage of hybrid search (the engine's own `timings_ms`) as a ratio of its p50
    to the p50 of its floor: the same work done by the library alone (FAISS, tantivy, a dict,
    the model), given the query, its vector and the engine's result. Stage and floors are timed
    query by query in turn, so load from other processes hits both sides alike; a slower
    stage raises its own ratio and no other. The first `warmup` queries are run untimed and
    left out of the timed set."""
    if repeats < 1 or not floors:
        raise InvalidInput("stage_ratios needs floors and repeats >= 1")
    split_warmup(queries, warmup)  # refuses too few queries
    vectors = engine.embedder.embed_queries(list(queries))
    stage_ms: dict[str, list[float]] = {s: [] for s in floors}
    floor_ms: dict[str, list[float]] = {s: [] for s in floors}
    for rnd in range(repeats + 1):
        timed = rnd > 0
        for i in range(warmup, len(queries)) if timed else range(warmup):
            q, v = queries[i], vectors[i : i + 1]
            result = engine.search(tenant, q, k=k, mode="hybrid", rerank=False)
            for stage, floor in floors.items():
                start = time.perf_counter()
                floor(q, v, result)
                if timed:
                    floor_ms[stage].append((time.perf_counter() - start) * 1000)
                    stage_ms[stage].append(result.timings_ms[stage])
    out = {}
    for stage in floors:
        p_stage, p_floor = float(np.median(stage_ms[stage])), float(np.median(floor_ms[stage]))
        out[stage] = {
            "ratio": round(p_stage / p_floor, 4),
            "stage_p50_ms": round(p_stage, 4),
            "floor_p50_ms": round(p_floor, 4),
            "samples": len(stage_ms[stage]),
        }
    return out


def hnsw_leg(
    collection: Collection, exact: QueryEngine, hnsw: QueryEngine, k: int = 100
) -> dict[str, Any]:
    """The collection's dense leg again on `hnsw`, the same vectors with every tenant in HNSW
    (exact_threshold 0): its quality, and recall@10 of its served top-10 against the top-10 of
    `exact`'s dense leg."""
    recalls: list[float] = []

    def search(tenant: str, query: str, depth: int, _leg: str) -> list[tuple[str, str]]:
        hits = hnsw.search(tenant, query, k=depth, mode="dense", rerank=False).hits
        truth = exact.search(tenant, query, k=10, mode="dense", rerank=False).hits
        want = {h.chunk.chunk_id for h in truth}
        got = {h.chunk.chunk_id for h in hits[:10]}
        recalls.append(len(want & got) / len(want) if want else 1.0)
        return [(h.chunk.chunk_id, h.chunk.doc_id) for h in hits]

    report = evaluate(collection, search, legs=("dense",), k=k).to_json()["dense"]
    return {
        "ndcg@10": report["ndcg@10"],
        "recall@100": report["recall@100"],
        "recall@10_vs_exact": round(float(np.mean(recalls)), 4),
    }


def synthetic_vectors(
    count: int, queries: int, dim: int = 384, seed: int = 0
) -> tuple[Vectors, Vectors]:
    """Clustered unit vectors (the filtered benchmark's topic model) and fresh queries near
    the same topics, so the curve is measured on data shaped like text embeddings."""
    if count < 1 or queries < 1:
        raise InvalidInput(f"need >= 1 vectors and queries; got {count} and {queries}")
    rng = np.random.default_rng(seed)
    model = TopicModel(dim, topics=max(32, count // 400), rng=rng)
    topics = np.arange(len(model.topics))
    weights = np.full(len(topics), 1.0 / len(topics))
    return model.sample(count, topics, weights), model.sample(queries, topics, weights)


def exact_top_k(vectors: Vectors, queries: Vectors, k: int) -> list[set[int]]:
    """The true top-k rows by inner product for each query (brute force, in blocks)."""
    out: list[set[int]] = []
    k = min(k, len(vectors))
    for start in range(0, len(queries), 64):
        scores = queries[start : start + 64] @ vectors.T
        top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        out += [set(row.tolist()) for row in top]
    return out


def _chunk_ids(n: int) -> list[str]:
    return [f"bench:v{i}:0" for i in range(n)]


def build_dense(served: ServedVectors, vectors: Vectors) -> dict[str, float]:
    """Write `vectors` to the log of `served`, then replay them into its shard replicas with
    HNSW forced, which snapshot once caught up. Returns each step's seconds and the vectors
    per second of both together."""
    chunks = [vector_chunk(BENCH_TENANT, cid) for cid in _chunk_ids(len(vectors))]
    start = time.perf_counter()
    served.write(chunks, vectors)
    write_s = time.perf_counter() - start
    start = time.perf_counter()
    served.replicas(exact_threshold=0)
    apply_s = time.perf_counter() - start
    return {
        "write_s": round(write_s, 2),
        "apply_s": round(apply_s, 2),
        "vectors_per_s": round(len(vectors) / (write_s + apply_s), 1),
    }


def _search_ids(dense: ReplicaDenseIndex, query: Vectors, k: int) -> list[str]:
    return [h.chunk_id for h in dense.search(query, k, BENCH_TENANT, dense.identity)]


def _recall(found: Iterable[str], truth: set[int]) -> float:
    rows = {int(cid.split(":")[1][1:]) for cid in found}
    return len(rows & truth) / len(truth) if truth else 1.0


def _time_recall(
    search: Callable[[Vectors], list[str]], queries: Vectors, truth: list[set[int]]
) -> dict[str, float]:
    """Recall and latency over the queries after the first WARMUP_QUERIES, which are run
    untimed to warm caches and never timed."""
    warm, timed = split_warmup(queries)
    for q in warm:
        search(q[None, :])
    latencies, recalls = [], []
    for q, t in zip(timed, truth[len(warm) :], strict=True):
        start = time.perf_counter()
        found = search(q[None, :])
        latencies.append((time.perf_counter() - start) * 1000)
        recalls.append(_recall(found, t))
    return {"recall@10": round(float(np.mean(recalls)), 4), **percentiles(latencies)}


def ef_sweep(
    vectors: Vectors,
    queries: Vectors,
    dense: DenseSpec | None = None,
    ef_values: Sequence[int] = DEFAULT_EF,
    top_k: int = 10,
) -> dict[str, Any]:
    """recall@10 and single-query latency of the dense shards per efSearch, against exact
    search on the same vectors; plus the flat (exact) shards' latency as the reference point."""
    import faiss

    dense = dense or DenseSpec()
    if not ef_values or any(ef < 1 for ef in ef_values):
        raise InvalidInput(f"ef values must be >= 1; got {list(ef_values)}")
    identity = ModelIdentity("bench-topic-model", "synthetic", vectors.shape[1], normalized=True)
    truth = exact_top_k(vectors, queries, top_k)
    with tempfile.TemporaryDirectory(prefix="ragindex-sweep-") as tmp:
        served = ServedVectors(Path(tmp), identity, dense)
        try:
            build = build_dense(served, vectors)
            points = []
            for ef in ef_values:
                hnsw = dense.hnsw.model_copy(update={"ef_search": ef})
                shards = served.replicas(hnsw, exact_threshold=0)  # loads the snapshots
                search = partial(_search_ids, shards, k=top_k)
                points.append({"ef_search": ef, **_time_recall(search, queries, truth)})
        finally:
            served.close()
    flat = faiss.IndexFlatIP(vectors.shape[1])
    flat.add(vectors)

    def exact(q: Vectors) -> list[str]:
        return [f"bench:v{i}:0" for i in flat.search(q, top_k)[1][0]]

    return {
        "vectors": len(vectors),
        "dim": int(vectors.shape[1]),
        "queries": len(queries) - WARMUP_QUERIES,
        "warmup_queries": WARMUP_QUERIES,
        "shards": dense.shards,
        "m": dense.hnsw.m,
        "ef_construction": dense.hnsw.ef_construction,
        "build": build,
        "points": points,
        "exact": _time_recall(exact, queries, truth),
    }


def stage_latency(
    engine: QueryEngine,
    tenant: str,
    queries: Sequence[str],
    shard_search: Mapping[str, Callable[[Vectors, int], object]] | None = None,
    k: int = 10,
) -> dict[str, Any]:
    """Per-stage p50/p99 of hybrid searches through the query path (the engine's own
    `timings_ms`), the whole search, and, when given, each dense shard searched alone with the
    same query vector and candidate depth."""
    warm, queries = split_warmup(queries)
    for q in warm:
        engine.search(tenant, q, k=k, mode="hybrid")
    stages: dict[str, list[float]] = {}
    total: list[float] = []
    for q in queries:
        start = time.perf_counter()
        result = engine.search(tenant, q, k=k, mode="hybrid")
        total.append((time.perf_counter() - start) * 1000)
        for stage, ms in result.timings_ms.items():
            stages.setdefault(stage, []).append(ms)
    out: dict[str, Any] = {s: percentiles(v) for s, v in stages.items()}
    depth = max(engine.fusion.candidates, k)
    for name, search in (shard_search or {}).items():
        vectors = engine.embedder.embed_queries(list(queries))
        samples = []
        for v in vectors:
            start = time.perf_counter()
            search(v[None, :], depth)
            samples.append((time.perf_counter() - start) * 1000)
        out[name] = percentiles(samples)
    out["total"] = percentiles(total)
    out["rerank"] = (
        out.get("rerank") if engine.reranker is not None else "not configured (no cross-encoder)"
    )
    return out


def ingest_throughput(ingest: IngestFn, tenant: str, documents: Sequence[Document]) -> dict:
    """Documents per second through the whole ingest path (chunk, embed, both legs, store)."""
    if not documents:
        raise InvalidInput("ingest_throughput needs documents")
    start = time.perf_counter()
    for b in range(0, len(documents), 32):
        ingest(tenant, list(documents[b : b + 32]))
    seconds = time.perf_counter() - start
    return {
        "documents": len(documents),
        "seconds": round(seconds, 2),
        "docs_per_s": round(len(documents) / seconds, 2),
    }


def freshness(
    ingest: IngestFn, engine: QueryEngine, tenant: str, probes: int = 10, timeout_s: float = 30
) -> dict[str, Any]:
    """Seconds from an upsert being sent to its chunk being found by both legs, in-process."""
    seconds = []
    for n in range(probes):
        marker = f"freshprobe{n}x{time.monotonic_ns()}"
        doc = Document("fresh", f"probe{n}", "", f"{marker} probe {n}")
        start = time.perf_counter()
        ingest(tenant, [doc])
        while True:
            found = [
                any(
                    h.chunk.doc_id == doc.doc_id for h in engine.search(tenant, marker, 100, m).hits
                )
                for m in ("lexical", "dense")
            ]
            if all(found):
                break
            if time.perf_counter() - start > timeout_s:
                raise TimeoutError(f"probe {n} not searchable after {timeout_s} s")
        seconds.append(time.perf_counter() - start)
    return {
        "probes": probes,
        "p50_s": round(float(np.percentile(seconds, 50)), 4),
        "p99_s": round(float(np.percentile(seconds, 99)), 4),
    }


def es_knn_sweep(
    es_url: str,
    vectors: Vectors,
    queries: Vectors,
    num_candidates: Sequence[int] = (10, 20, 40, 80, 160, 320),
    hnsw: HnswSpec | None = None,
    top_k: int = 10,
    index: str = "ragindex-bench-knn",
) -> dict[str, Any]:
    """Elasticsearch's own dense_vector kNN (float HNSW, same M and efConstruction, one
    force-merged segment) on the same vectors: recall@10 vs exact and latency per
    num_candidates (its efSearch), timed through its HTTP API as its users call it."""
    from elasticsearch import Elasticsearch, helpers

    hnsw = hnsw or HnswSpec()
    client = Elasticsearch(es_url, request_timeout=600)
    truth = exact_top_k(vectors, queries, top_k)
    mapping = {
        "properties": {
            "v": {
                "type": "dense_vector",
                "dims": int(vectors.shape[1]),
                "index": True,
                "similarity": "dot_product",
                "index_options": {
                    "type": "hnsw",
                    "m": hnsw.m,
                    "ef_construction": hnsw.ef_construction,
                },
            }
        }
    }
    settings = {"number_of_shards": 1, "number_of_replicas": 0, "refresh_interval": "-1"}
    client.options(ignore_status=404).indices.delete(index=index)
    client.indices.create(index=index, mappings=mapping, settings=settings)
    try:
        start = time.perf_counter()
        actions = (
            {"_index": index, "_id": str(i), "v": vectors[i].tolist()} for i in range(len(vectors))
        )
        helpers.bulk(client, actions, chunk_size=1_000)
        client.indices.refresh(index=index)
        load_s = time.perf_counter() - start
        start = time.perf_counter()
        client.indices.forcemerge(index=index, max_num_segments=1)
        client.indices.refresh(index=index)
        merge_s = time.perf_counter() - start
        points = []
        for nc in num_candidates:

            def search(q: Vectors, nc: int = nc) -> list[str]:
                body = {"field": "v", "query_vector": q[0].tolist(), "k": top_k}
                res = client.search(
                    index=index,
                    knn={**body, "num_candidates": max(nc, top_k)},
                    size=top_k,
                    source=False,
                )
                return [f"bench:v{h['_id']}:0" for h in res["hits"]["hits"]]

            points.append({"num_candidates": nc, **_time_recall(search, queries, truth)})
    finally:
        client.options(ignore_status=404).indices.delete(index=index)
        client.close()
    return {
        "vectors": len(vectors),
        "index_options": mapping["properties"]["v"]["index_options"],
        "load_s": round(load_s, 2),
        "vectors_per_s": round(len(vectors) / load_s, 1),
        "forcemerge_s": round(merge_s, 2),
        "points": points,
    }
