"""BM25 and hybrid retrieval on Elasticsearch vs the embedded tantivy backend, in one run.

Why (issue #4): the production BM25 leg runs on Elasticsearch, the one-machine default on
tantivy; this measures both on the same chunks and queries, alone (top-100 latency, nDCG@10,
which must agree within 0.01: same analyzer, same BM25 parameters) and as the lexical leg of
hybrid retrieval (latency and nDCG@10 of the whole query path).

The corpus is embedded once: the caller passes two `QueryEngine`s that share the embedder and
the dense shard replicas (which also hold the chunks' text) and differ only in their lexical
leg (evals may not import the app's composition, so the app composes them: each BM25 backend
is a view of the same `chunks.<generation>` log, so both hold exactly the chunks the ingest
worker wrote). Quality is scored with the evals runner and metrics, as `ragindex eval` does.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np

from ragindex.errors import InvalidInput
from ragindex.lexical import analyze
from ragindex.measure.evals.collections import Collection, CorpusDoc
from ragindex.measure.evals.runner import DEFAULT_TENANT, evaluate
from ragindex.measure.stats import WARMUP_QUERIES, percentiles, split_warmup, text_table
from ragindex.protocols import LexicalIndex
from ragindex.router import QueryEngine, SearchResult

BACKENDS = ("tantivy", "elasticsearch")
NDCG_TOLERANCE = 0.01
_LEG_MODES = {"bm25": "lexical", "hybrid": "hybrid"}


def with_synthetic(collection: Collection, n: int, seed: int = 0) -> Collection:
    """The collection plus `n` unjudged documents of 40-160 words drawn Zipf-like from its own
    analysed vocabulary, to measure latency on a larger corpus. Named `<name>-syn<n>` so its
    chunk ids (and any cached index of it) never mix with the plain collection's."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise InvalidInput(f"synthetic document count must be an integer >= 0, got {n!r}")
    if n == 0:
        return collection
    freq: dict[str, int] = {}
    for doc in collection.corpus.values():
        for token in analyze(f"{doc.title} {doc.text}"):
            freq[token] = freq.get(token, 0) + 1
    words = sorted(freq, key=lambda t: (-freq[t], t))
    if not words:
        raise InvalidInput(f"collection {collection.name!r} has no words to draw from")
    weights = [1.0 / rank for rank in range(1, len(words) + 1)]
    rng = random.Random(seed)
    extra = {}
    for i in range(n):
        doc_id = f"syn{i}"
        text = " ".join(rng.choices(words, weights, k=rng.randint(40, 160)))
        extra[doc_id] = CorpusDoc(doc_id, "", text)
    clash = extra.keys() & collection.corpus.keys()
    if clash:
        raise InvalidInput(f"synthetic ids clash with the collection's: {sorted(clash)[:5]}")
    return Collection(
        f"{collection.name}-syn{n}",
        {**collection.corpus, **extra},
        collection.queries,
        collection.qrels,
    )


def time_searches(
    searches: Mapping[str, Callable[[str], object]],
    queries: Sequence[str],
    repeats: int,
    warmup: int = WARMUP_QUERIES,
    on_timed: Callable[[str, object], None] | None = None,
) -> dict[str, list[float]]:
    """Milliseconds per single search, for each named search function. The first `warmup`
    queries are run untimed by each function and left out of the timed set; then `repeats`
    rounds over the rest alternate the functions, so drift in a noisy machine's load hits both
    alike. `on_timed(name, result)` sees each timed search's result."""
    warm, timed = split_warmup(queries, warmup)
    for search in searches.values():
        for q in warm:
            search(q)
    samples: dict[str, list[float]] = {name: [] for name in searches}
    for _ in range(repeats):
        for name, search in searches.items():
            for q in timed:
                start = time.perf_counter()
                result = search(q)
                samples[name].append((time.perf_counter() - start) * 1000)
                if on_timed is not None:
                    on_timed(name, result)
    return samples


def _check_engines(engines: Mapping[str, QueryEngine], tenant_id: str) -> int:
    """Both engines must share the dense index and chunk source and hold the same chunk count
    in their BM25 backends, or the comparison would not be on the same corpus."""
    first, second = (engines[name] for name in BACKENDS)
    if first.dense is not second.dense or first.chunks is not second.chunks:
        raise InvalidInput("both engines must share one dense index and one chunk source")
    counts = {name: engines[name].lexical.count(tenant_id) for name in BACKENDS}
    if len(set(counts.values())) != 1:
        raise InvalidInput(f"the BM25 backends hold different numbers of chunks: {counts}")
    if not counts[BACKENDS[0]]:
        raise InvalidInput(f"the BM25 backends hold no chunks of tenant {tenant_id!r}")
    return counts[BACKENDS[0]]


def _bm25_search(index: LexicalIndex, top_k: int, tenant_id: str, query: str) -> object:
    return index.search(query, top_k, tenant_id)


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 3) if b > 0 else None


def run_bm25_bench(
    collection: Collection,
    tantivy: QueryEngine,
    elasticsearch: QueryEngine,
    tenant_id: str = DEFAULT_TENANT,
    top_k: int = 100,
    hybrid_k: int = 10,
    repeats: int = 3,
    warmup: int = WARMUP_QUERIES,
) -> dict[str, Any]:
    """Measure both BM25 backends alone and inside hybrid retrieval on an ingested collection.

    BM25 latency is one `lexical.search(query, top_k)` call; hybrid latency is one whole
    `QueryEngine.search(k=hybrid_k, mode="hybrid")` (embed, both legs, fusion, chunk fetch; no
    rerank). The first `warmup` judged queries warm both up and are not timed. nDCG@10 comes
    from `evaluate` over every judged query (k=100, chunk hits collapsed to documents).
    """
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise InvalidInput(f"repeats must be an integer >= 1, got {repeats!r}")
    engines = {"tantivy": tantivy, "elasticsearch": elasticsearch}
    chunks = _check_engines(engines, tenant_id)
    judged = collection.judged_queries()
    texts = [collection.queries[qid].text for qid in judged]

    bm25 = {name: partial(_bm25_search, e.lexical, top_k, tenant_id) for name, e in engines.items()}
    bm25_ms = time_searches(bm25, texts, repeats, warmup)
    lexical_stage_ms: dict[str, list[float]] = {name: [] for name in engines}

    def lexical_stage(name: str, result: object) -> None:
        assert isinstance(result, SearchResult)
        lexical_stage_ms[name].append(result.timings_ms["lexical"])

    hybrid = {
        name: partial(e.search, tenant_id, k=hybrid_k, mode="hybrid", rerank=False)
        for name, e in engines.items()
    }
    hybrid_ms = time_searches(hybrid, texts, repeats, warmup, on_timed=lexical_stage)

    out: dict[str, Any] = {
        "collection": collection.name,
        "documents": len(collection.corpus),
        "chunks": chunks,
        "queries": len(judged),
        "warmup_queries": warmup,
        "tenant": tenant_id,
        "top_k": top_k,
        "hybrid_k": hybrid_k,
        "repeats": repeats,
        "bm25": {},
        "hybrid": {},
    }
    bm25_ndcg: dict[str, float] = {}
    for name, engine in engines.items():

        def search(tenant: str, query: str, k: int, leg: str, e: QueryEngine = engine) -> Any:
            result = e.search(tenant, query, k=k, mode=_LEG_MODES[leg], rerank=False)
            return [(h.chunk.chunk_id, h.chunk.doc_id) for h in result.hits]

        report = evaluate(
            collection,
            search,
            legs=("bm25", "hybrid"),
            k=100,
            metrics=("ndcg@10",),
            default_tenant=tenant_id,
        )
        bm25_ndcg[name] = report.legs["bm25"].means["ndcg@10"]
        out["bm25"][name] = {**percentiles(bm25_ms[name]), "ndcg@10": round(bm25_ndcg[name], 4)}
        # The lexical stage as timed inside the query path, over the timed searches.
        out["hybrid"][name] = {
            **percentiles(hybrid_ms[name]),
            "lexical_stage_p50_ms": round(float(np.median(lexical_stage_ms[name])), 3),
            "ndcg@10": round(report.legs["hybrid"].means["ndcg@10"], 4),
        }
    diff = abs(bm25_ndcg["elasticsearch"] - bm25_ndcg["tantivy"])
    out["bm25_ndcg@10_abs_diff"] = round(diff, 4)
    out["bm25_ndcg@10_within_0.01"] = diff < NDCG_TOLERANCE
    out["elasticsearch_over_tantivy"] = {
        f"{leg}_{stat}": _ratio(
            out[leg]["elasticsearch"][f"{stat}_ms"], out[leg]["tantivy"][f"{stat}_ms"]
        )
        for leg in ("bm25", "hybrid")
        for stat in ("p50", "p99")
    }
    return out


def bm25_table(result: Mapping[str, Any]) -> str:
    """A fixed-width table of a `run_bm25_bench` result: one row per (leg, backend)."""
    header = ["leg", "backend", "p50 ms", "p99 ms", "nDCG@10"]
    rows = [
        [
            leg if leg == "bm25" else f"hybrid k={result['hybrid_k']}",
            name,
            f"{result[leg][name]['p50_ms']:.3f}",
            f"{result[leg][name]['p99_ms']:.3f}",
            f"{result[leg][name]['ndcg@10']:.4f}",
        ]
        for leg in ("bm25", "hybrid")
        for name in BACKENDS
    ]
    ratios = ", ".join(
        f"{k} {v:.2f}x" if v is not None else f"{k} n/a"
        for k, v in result["elasticsearch_over_tantivy"].items()
    )
    return "\n".join(
        [
            f"{result['collection']}: {result['documents']} documents, {result['chunks']} chunks,"
            f" {result['queries']} queries ({result['warmup_queries']} of them an untimed warm-up)"
            f" x {result['repeats']}; BM25 top-{result['top_k']}",
            text_table(header, rows),
            f"BM25 nDCG@10 |ES - tantivy| = {result['bm25_ndcg@10_abs_diff']:.4f}"
            f" ({'within' if result['bm25_ndcg@10_within_0.01'] else 'NOT within'} 0.01)",
            f"Elasticsearch / tantivy: {ratios}",
        ]
    )
