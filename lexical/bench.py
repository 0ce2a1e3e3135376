"""BM25 benchmark: Elasticsearch vs the embedded tantivy backend on the same corpus and queries.

Measures top-k search latency (p50/p99, one query at a time, as the query path calls it) and
Cranfield nDCG@10 on both backends, so that the two can be compared and their rankings
checked for agreement (they must be within 0.01 nDCG: same analyzer, same BM25 parameters).
Optionally adds a synthetic corpus to measure latency at a larger scale.

Cranfield conventions (see shared/data/cranfield/README.md): queries are numbered by their
position in cran.qry (1..225); gain = 5 - code for codes 1..4; lines with code -1 ignored.
"""

from __future__ import annotations

import math
import random
import re
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from ragindex.lexical.analysis import analyze
from ragindex.lexical.elasticsearch_index import ElasticsearchIndex
from ragindex.lexical.es_server import running_elasticsearch
from ragindex.lexical.tantivy_index import TantivyIndex
from ragindex.protocols import LexicalIndex
from ragindex.types import Chunk, ScoredId

BENCH_TENANT = "bench"
_RECORD_RE = re.compile(r"^\.I\s+(\S+)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Cranfield:
    """Documents (id -> text), queries (1-based position -> text) and graded judgments."""

    docs: dict[str, str]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]


def _records(raw: str) -> Iterator[tuple[str, dict[str, str]]]:
    """Split SMART-format text into (id, {field letter: text})."""
    starts = list(_RECORD_RE.finditer(raw))
    for i, match in enumerate(starts):
        end = starts[i + 1].start() if i + 1 < len(starts) else len(raw)
        fields: dict[str, str] = {}
        for part in re.split(r"^\.(?=[A-Z]\s*$)", raw[match.end() : end], flags=re.MULTILINE):
            if part.strip():
                letter, _, body = part.partition("\n")
                fields[letter.strip()] = " ".join(body.split())
        yield match.group(1), fields


def load_cranfield(directory: str | Path) -> Cranfield:
    """Parse cran.all.1400, cran.qry and cranqrel (positions for query ids, 5 - code gains)."""
    root = Path(directory)
    docs = {
        doc_id: fields.get("W") or fields.get("T", "")
        for doc_id, fields in _records((root / "cran.all.1400").read_text())
    }
    queries = {
        str(pos): fields.get("W", "")
        for pos, (_, fields) in enumerate(_records((root / "cran.qry").read_text()), start=1)
    }
    qrels: dict[str, dict[str, int]] = {}
    for line in (root / "cranqrel").read_text().splitlines():
        parts = line.split()
        if len(parts) != 3:
            continue
        qid, doc_id, code = parts[0], parts[1], int(parts[2])
        if 1 <= code <= 4:
            qrels.setdefault(qid, {})[doc_id] = 5 - code
    return Cranfield(docs, {q: t for q, t in queries.items() if q in qrels}, qrels)


def corpus_chunks(docs: dict[str, str], tenant_id: str = BENCH_TENANT) -> list[Chunk]:
    """One chunk per document; the chunk id is the document id."""
    return [
        Chunk(tenant_id, doc_id, "bench", doc_id, 0, "", text, "") for doc_id, text in docs.items()
    ]


def ndcg_at_k(ranked: Sequence[str], gains: dict[str, int], k: int = 10) -> float:
    """nDCG@k with linear gains and log2(rank + 1) discounts."""
    dcg = sum(gains.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked[:k]))
    ideal = sorted(gains.values(), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def mean_ndcg(index: LexicalIndex, data: Cranfield, tenant_id: str = BENCH_TENANT) -> float:
    scores = [
        ndcg_at_k([h.chunk_id for h in index.search(text, 10, tenant_id)], data.qrels[qid])
        for qid, text in data.queries.items()
    ]
    return float(np.mean(scores))


def synthetic_docs(n: int, vocabulary: Sequence[str], seed: int = 0) -> dict[str, str]:
    """n documents of 40-160 words drawn Zipf-like from a real vocabulary."""
    rng = random.Random(seed)
    words = list(vocabulary)
    weights = [1.0 / (rank + 1) for rank in range(len(words))]
    return {
        f"syn{i}": " ".join(rng.choices(words, weights, k=rng.randint(40, 160))) for i in range(n)
    }


def latency_ms(
    search: Callable[[str], list[ScoredId]], queries: Sequence[str], repeats: int
) -> dict[str, float]:
    """p50/p99 of single searches, after one warm-up pass."""
    for q in queries:
        search(q)
    samples = []
    for _ in range(repeats):
        for q in queries:
            start = time.perf_counter()
            search(q)
            samples.append((time.perf_counter() - start) * 1000)
    return {
        "p50_ms": float(np.percentile(samples, 50)),
        "p99_ms": float(np.percentile(samples, 99)),
        "searches": len(samples),
    }


def _search(index: LexicalIndex, top_k: int, query: str) -> list[ScoredId]:
    return index.search(query, top_k, BENCH_TENANT)


def _load(index: LexicalIndex, chunks: list[Chunk], batch: int = 500) -> float:
    start = time.perf_counter()
    for i in range(0, len(chunks), batch):
        index.upsert(chunks[i : i + batch])
    return time.perf_counter() - start


def run_bm25_bench(
    cranfield_dir: str | Path,
    es_url: str | None = None,
    top_k: int = 100,
    repeats: int = 3,
    synthetic: int = 0,
    timeout_s: float = 5.0,
) -> dict[str, Any]:
    """Compare ES and tantivy on Cranfield (+ `synthetic` extra docs); starts a local ES
    when `es_url` is None. Returns latency, load time and nDCG@10 per backend."""
    data = load_cranfield(cranfield_dir)
    docs = dict(data.docs)
    if synthetic:
        vocab: dict[str, int] = {}
        for text in data.docs.values():
            for token in analyze(text):
                vocab[token] = vocab.get(token, 0) + 1
        docs.update(synthetic_docs(synthetic, sorted(vocab, key=lambda t: -vocab[t])))
    chunks = corpus_chunks(docs)
    queries = list(data.queries.values())
    result: dict[str, Any] = {
        "corpus_docs": len(chunks),
        "queries": len(queries),
        "top_k": top_k,
        "repeats": repeats,
    }
    with ExitStack() as stack:
        url = es_url or stack.enter_context(running_elasticsearch()).url
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="ragindex-bm25-bench-"))
        tantivy_index = TantivyIndex.open(Path(tmp) / "tantivy")
        stack.callback(tantivy_index.close)
        alias = f"bench_{int(time.time() * 1000)}"
        es_index = ElasticsearchIndex.open(url, alias, timeout_s=timeout_s)
        stack.callback(es_index.close)
        stack.callback(es_index.drop)
        backends: dict[str, LexicalIndex] = {"tantivy": tantivy_index, "elasticsearch": es_index}
        for name, index in backends.items():
            load_s = _load(index, chunks)
            stats = latency_ms(partial(_search, index, top_k), queries, repeats)
            result[name] = {"load_s": load_s, **stats, "ndcg@10": mean_ndcg(index, data)}
    result["ndcg@10_abs_diff"] = abs(
        result["tantivy"]["ndcg@10"] - result["elasticsearch"]["ndcg@10"]
    )
    return result
