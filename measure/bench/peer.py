"""Like-for-like peer for `bench serve`: BM25 top-10 through Elasticsearch's HTTP API against
ragindex's lexical-only search through its HTTP API, same corpus, same queries, interleaved.

Elasticsearch gets the corpus the way a cluster's BM25 view does (a LexicalView replaying the
same `chunks` topic into an ElasticsearchIndex), and answers the request a client would send
it: one `_search` with the tenant as a filter, the query analysed by Elasticsearch itself,
title and body fields with the spec's boosts, 10 hits with their text. Both requests go out
from one httpx client each, on one thread, alternating which goes first.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from ragindex.config import RagIndexSpec
from ragindex.lexical import BODY_FIELD, TITLE_FIELD, ElasticsearchIndex, FieldBoosts, LexicalView
from ragindex.measure.stats import percentile
from ragindex.protocols import Log

ES_ALIAS = "bench_serve"
ES_LOAD_TIMEOUT_S = 60.0  # bulk writes on a busy 2-core box
TOP_K = 10


def fill_elasticsearch(
    url: str, log_: Log, topic: str, partitions: int, spec: RagIndexSpec, offsets: Path
) -> ElasticsearchIndex:
    """A fresh alias holding every chunk of `topic`, written as the cluster's BM25 view does."""
    index = ElasticsearchIndex.open(
        url,
        ES_ALIAS,
        timeout_s=ES_LOAD_TIMEOUT_S,
        boosts=boosts(spec),
    )
    LexicalView(log_, topic, partitions, index, offsets).catch_up()
    return index


def boosts(spec: RagIndexSpec) -> FieldBoosts:
    return FieldBoosts(title=spec.lexical.title_boost, body=spec.lexical.body_boost)


def es_bm25_request(query: str, tenant_id: str, spec: RagIndexSpec) -> dict[str, Any]:
    """The `_search` body a client sends for a tenant's BM25 top-10 with text."""
    weights = boosts(spec)
    return {
        "size": TOP_K,
        "track_total_hits": False,
        "_source": ["chunk_id", TITLE_FIELD, BODY_FIELD],
        "query": {
            "bool": {
                "filter": [{"term": {"tenant_id": tenant_id}}],
                "must": [
                    {
                        "multi_match": {
                            "query": query,
                            "type": "most_fields",
                            "fields": [
                                f"{TITLE_FIELD}^{weights.title}",
                                f"{BODY_FIELD}^{weights.body}",
                            ],
                        }
                    }
                ],
            }
        },
    }


def overlap_at_k(a: list[str], b: list[str]) -> float:
    """Share of the first list's ids that the second also returned (1.0 for two empties)."""
    return len(set(a) & set(b)) / len(a) if a else float(not b)


def time_lexical_peer(
    ragindex: httpx.Client,
    es: httpx.Client,
    tenant_id: str,
    spec: RagIndexSpec,
    warmup: list[str],
    queries: list[str],
    inprocess: Callable[[str], list[str]] | None = None,
) -> dict[str, Any]:
    """p50/p99 of both HTTP requests over the same queries, interleaved (and of the in-process
    lexical leg, the floor, when given), their ratio, and how far the top-10s agree."""

    def ours(q: str) -> tuple[float, list[str]]:
        start = time.perf_counter()
        r = ragindex.post("/v1/search", json={"query": q, "k": TOP_K, "mode": "lexical"})
        r.raise_for_status()
        return (time.perf_counter() - start) * 1000, [h["chunk_id"] for h in r.json()["hits"]]

    def theirs(q: str) -> tuple[float, list[str]]:
        start = time.perf_counter()
        r = es.post(f"/{ES_ALIAS}/_search", json=es_bm25_request(q, tenant_id, spec))
        r.raise_for_status()
        hits = r.json()["hits"]["hits"]
        return (time.perf_counter() - start) * 1000, [h["_source"]["chunk_id"] for h in hits]

    def floor(q: str) -> float:
        assert inprocess is not None
        start = time.perf_counter()
        inprocess(q)
        return (time.perf_counter() - start) * 1000

    for q in warmup:
        ours(q)
        theirs(q)
        if inprocess is not None:
            floor(q)
    ours_ms: list[float] = []
    es_ms: list[float] = []
    floor_ms: list[float] = []
    agree: list[float] = []
    for n, q in enumerate(queries):
        if n % 2:
            es_t, es_ids = theirs(q)
            our_t, our_ids = ours(q)
        else:
            our_t, our_ids = ours(q)
            es_t, es_ids = theirs(q)
        ours_ms.append(our_t)
        es_ms.append(es_t)
        agree.append(overlap_at_k(our_ids, es_ids))
        if inprocess is not None:
            floor_ms.append(floor(q))
    out: dict[str, Any] = {
        "queries": len(queries),
        "ragindex_http_lexical_p50_ms": round(percentile(ours_ms, 50), 2),
        "ragindex_http_lexical_p99_ms": round(percentile(ours_ms, 99), 2),
        "es_http_bm25_p50_ms": round(percentile(es_ms, 50), 2),
        "es_http_bm25_p99_ms": round(percentile(es_ms, 99), 2),
        "lexical_http_over_es_http_p50": round(percentile(ours_ms, 50) / percentile(es_ms, 50), 3),
        "top10_overlap_mean": round(sum(agree) / len(agree), 3),
    }
    if floor_ms:
        out["inprocess_lexical_p50_ms"] = round(percentile(floor_ms, 50), 2)
    return out
