"""Both BM25 backends agree: same tokens as `_analyze`, same top-10, same Cranfield nDCG@10."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ragindex.lexical.analysis import analyze
from ragindex.lexical.bench import (
    BENCH_TENANT,
    Cranfield,
    corpus_chunks,
    mean_ndcg,
    run_bm25_bench,
)
from ragindex.lexical.elasticsearch_index import ElasticsearchIndex
from ragindex.lexical.es_server import EsServer
from ragindex.lexical.tantivy_index import TantivyIndex
from ragindex.types import ScoredId

pytestmark = pytest.mark.elasticsearch

EDGE_CASES = [
    "U.S.A. don't 3.14 1,000 a:b wind-tunnel foo_bar ab12 x.1",
    "Ωmega ΣΑΣ 東京タワー ___ _a 1;2 boundary-layer /destalling/ (M=2.5)",
    "Mach 2.5-3.0, re=10**6; x/c=0.25 and 1.5e-3 (ref. 12) -- 'quoted' j.ae.scs.",
]


@pytest.fixture(scope="module")
def loaded(
    es_server: EsServer, cranfield: Cranfield, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ElasticsearchIndex, TantivyIndex]]:
    chunks = corpus_chunks(cranfield.docs)
    es = ElasticsearchIndex.open(es_server.url, "parity_cranfield", timeout_s=10.0)
    tv = TantivyIndex.open(Path(tmp_path_factory.mktemp("parity")) / "tv")
    for i in range(0, len(chunks), 500):
        es.upsert(chunks[i : i + 500])
        tv.upsert(chunks[i : i + 500])
    yield es, tv
    tv.close()
    es.drop()
    es.close()


def test_tokens_equal_elasticsearch_analyze(
    loaded: tuple[ElasticsearchIndex, TantivyIndex], cranfield: Cranfield
) -> None:
    es, _ = loaded
    texts = [*EDGE_CASES, *cranfield.docs.values(), *cranfield.queries.values()]
    mismatches = [t for t in texts if analyze(t) != es.analyze(t)]
    assert mismatches == []


def _same_up_to_ties(a: list[ScoredId], b: list[ScoredId]) -> bool:
    """Equal score sequences, and ids equal wherever the score is not tied with a neighbour."""
    if len(a) != len(b):
        return False
    if any(
        abs(x.score - y.score) > 1e-4 * max(1.0, abs(x.score)) for x, y in zip(a, b, strict=True)
    ):
        return False

    def groups(hits: list[ScoredId]) -> list[set[str]]:
        out: list[set[str]] = []
        for i, h in enumerate(hits):
            if i and abs(h.score - hits[i - 1].score) <= 1e-4 * max(1.0, abs(h.score)):
                out[-1].add(h.chunk_id)
            else:
                out.append({h.chunk_id})
        return out

    # The last group may be cut by the top-k boundary, so it may hold different tied ids.
    return groups(a)[:-1] == groups(b)[:-1]


def test_top10_equal_except_ties(
    loaded: tuple[ElasticsearchIndex, TantivyIndex], cranfield: Cranfield
) -> None:
    es, tv = loaded
    differing = [
        qid
        for qid, text in cranfield.queries.items()
        if not _same_up_to_ties(
            es.search(text, 10, BENCH_TENANT), tv.search(text, 10, BENCH_TENANT)
        )
    ]
    assert differing == []


def test_cranfield_ndcg_within_001(
    loaded: tuple[ElasticsearchIndex, TantivyIndex], cranfield: Cranfield
) -> None:
    es, tv = loaded
    es_ndcg, tv_ndcg = mean_ndcg(es, cranfield), mean_ndcg(tv, cranfield)
    assert abs(es_ndcg - tv_ndcg) < 0.01
    assert 0.30 < es_ndcg < 0.37


@pytest.mark.slow
def test_bench_reports_both_backends(es_server: EsServer, cranfield_dir: Path) -> None:
    result = run_bm25_bench(cranfield_dir, es_url=es_server.url, top_k=100, repeats=1)
    assert result["corpus_docs"] == 1400 and result["queries"] == 225
    for backend in ("tantivy", "elasticsearch"):
        stats = result[backend]
        assert stats["searches"] == 225
        assert 0 < stats["p50_ms"] <= stats["p99_ms"]
    assert result["ndcg@10_abs_diff"] < 0.01
