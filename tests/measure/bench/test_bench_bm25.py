"""The BM25/hybrid benchmark runner on a tiny corpus: report shape, consistency, input checks.

The second engine's lexical leg is a real Elasticsearch filled as a second BM25 view of the
index's log, as the benchmark does; same analyzer and BM25 parameters, so quality must agree
within 0.01.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ragindex.app import EmbeddedIndex
from ragindex.config import RagIndexSpec
from ragindex.errors import InvalidInput
from ragindex.lexical import ElasticsearchIndex, TantivyIndex, analyze
from ragindex.measure.bench.bm25 import (
    bm25_table,
    run_bm25_bench,
    time_searches,
    with_synthetic,
)
from ragindex.measure.bench.peer import boosts
from ragindex.measure.evals import Collection
from ragindex.measure.evals.runner import DEFAULT_TENANT, ingest_collection
from ragindex.measure.servers import EsServer
from ragindex.protocols import Embedder, LexicalIndex
from ragindex.router import QueryEngine


@pytest.fixture
def engine(tmp_path: Path, tiny: Collection, minilm: Embedder) -> Iterator[EmbeddedIndex]:
    eng = EmbeddedIndex(tmp_path / "engine", RagIndexSpec(), embedder=minilm)
    ingest_collection(tiny, eng.upsert)
    yield eng
    eng.close()


def engine_with(engine: EmbeddedIndex, lexical: LexicalIndex) -> QueryEngine:
    spec = engine.spec
    return QueryEngine(
        engine.embedder, engine.dense, lexical, engine.dense, spec.fusion, spec.lexical
    )


@pytest.fixture
def copied(engine: EmbeddedIndex, tmp_path: Path) -> Iterator[TantivyIndex]:
    index = TantivyIndex.open(tmp_path / "copy", boosts=boosts(engine.spec))
    yield index
    index.close()


@pytest.fixture
def es(es_server: EsServer) -> Iterator[ElasticsearchIndex]:
    index = ElasticsearchIndex.open(es_server.url, f"bench_{uuid.uuid4().hex[:12]}")
    yield index
    index.drop()
    index.close()


def fill(engine: EmbeddedIndex, backend: LexicalIndex, tmp_path: Path) -> int:
    """`backend` as a second BM25 view of the engine's log; returns the records it applied."""
    return engine.lexical_view(backend, tmp_path / f"offsets-{uuid.uuid4().hex}.json").catch_up()


def test_a_second_view_holds_what_the_ingest_worker_wrote(
    engine: EmbeddedIndex, copied: TantivyIndex, tmp_path: Path
) -> None:
    applied = fill(engine, copied, tmp_path)
    assert applied == engine.dense.count(DEFAULT_TENANT) == 6  # the empty document is skipped
    assert copied.count(DEFAULT_TENANT) == engine.lexical.count(DEFAULT_TENANT) == 6
    for query in ["shock wave", "boundary layer", "shells"]:
        assert copied.search(query, 10, DEFAULT_TENANT) == engine.lexical.search(
            query, 10, DEFAULT_TENANT
        )


@pytest.mark.elasticsearch
def test_report_has_both_legs_on_both_backends(
    engine: EmbeddedIndex, es: ElasticsearchIndex, tiny: Collection, tmp_path: Path
) -> None:
    fill(engine, es, tmp_path)
    result = run_bm25_bench(tiny, engine.query, engine_with(engine, es), repeats=2, warmup=1)
    assert (result["documents"], result["chunks"], result["queries"]) == (7, 6, 3)
    assert result["warmup_queries"] == 1
    for leg in ("bm25", "hybrid"):
        assert set(result[leg]) == {"tantivy", "elasticsearch"}
        for row in result[leg].values():
            assert row["samples"] == (3 - 1) * 2  # the warm-up query is never timed
            assert row["p50_ms"] > 0
        assert result[leg]["elasticsearch"]["ndcg@10"] == pytest.approx(
            result[leg]["tantivy"]["ndcg@10"], abs=0.01
        )
    # every judged document is found first by BM25 on this corpus, on both backends
    assert result["bm25"]["tantivy"]["ndcg@10"] > 0.9
    assert result["hybrid"]["tantivy"]["lexical_stage_p50_ms"] > 0
    assert result["bm25_ndcg@10_abs_diff"] < 0.01 and result["bm25_ndcg@10_within_0.01"]
    assert set(result["elasticsearch_over_tantivy"]) == {
        "bm25_p50",
        "bm25_p99",
        "hybrid_p50",
        "hybrid_p99",
    }
    table = bm25_table(result)
    assert "hybrid k=10  elasticsearch" in table and "within 0.01" in table


@pytest.mark.elasticsearch
def test_backends_holding_different_chunks_are_refused(
    engine: EmbeddedIndex, es: ElasticsearchIndex, tiny: Collection, tmp_path: Path
) -> None:
    with pytest.raises(InvalidInput, match="different numbers of chunks"):
        run_bm25_bench(tiny, engine.query, engine_with(engine, es))
    fill(engine, es, tmp_path)
    with pytest.raises(InvalidInput, match="no chunks of tenant 'other'"):
        run_bm25_bench(tiny, engine.query, engine_with(engine, es), tenant_id="other")
    with pytest.raises(InvalidInput, match="repeats"):
        run_bm25_bench(tiny, engine.query, engine_with(engine, es), repeats=0)


def test_engines_must_share_the_dense_index(
    engine: EmbeddedIndex, copied: TantivyIndex, tiny: Collection, tmp_path: Path, minilm: Embedder
) -> None:
    fill(engine, copied, tmp_path)
    other = EmbeddedIndex(tmp_path / "other", RagIndexSpec(), embedder=minilm)
    try:
        with pytest.raises(InvalidInput, match="share one dense index"):
            run_bm25_bench(tiny, engine.query, other.query)
    finally:
        other.close()


def test_synthetic_documents_come_from_the_collections_vocabulary(tiny: Collection) -> None:
    grown = with_synthetic(tiny, 5, seed=1)
    assert grown.name == "tiny-syn5"
    assert len(grown.corpus) == len(tiny.corpus) + 5
    assert (grown.queries, grown.qrels) == (tiny.queries, tiny.qrels)
    vocabulary = {t for d in tiny.corpus.values() for t in analyze(f"{d.title} {d.text}")}
    for i in range(5):
        words = grown.corpus[f"syn{i}"].text.split()
        assert 40 <= len(words) <= 160 and set(words) <= vocabulary
    assert with_synthetic(tiny, 5, seed=1) == grown
    assert with_synthetic(tiny, 0) is tiny
    for bad in (-1, 1.5, True):
        with pytest.raises(InvalidInput, match="synthetic"):
            with_synthetic(tiny, bad)


def test_time_searches_never_times_a_warm_up_query() -> None:
    calls: list[tuple[str, str]] = []
    seen: list[tuple[str, object]] = []

    def recorder(name: str) -> Callable[[str], str]:
        def search(query: str) -> str:
            calls.append((name, query))
            return f"{name}:{query}"

        return search

    samples = time_searches(
        {"a": recorder("a"), "b": recorder("b")},
        ["w0", "w1", "t0", "t1", "t2"],
        repeats=2,
        warmup=2,
        on_timed=lambda name, result: seen.append((name, result)),
    )
    warm = [("a", "w0"), ("a", "w1"), ("b", "w0"), ("b", "w1")]
    one_round = [(n, q) for n in "ab" for q in ("t0", "t1", "t2")]
    assert calls == warm + one_round + one_round
    assert seen == [(n, f"{n}:{q}") for n, q in one_round + one_round]
    assert {name: len(ms) for name, ms in samples.items()} == {"a": 6, "b": 6}
    with pytest.raises(InvalidInput, match="warm-up"):
        time_searches({"a": recorder("a")}, ["w0", "w1"], repeats=1, warmup=2)
