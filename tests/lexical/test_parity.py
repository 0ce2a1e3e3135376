"""Both BM25 backends agree: same tokens as `_analyze`, same top-10, same Cranfield nDCG@10,
also with title and body as boosted fields and with RM3 feedback."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ragindex.config import Rm3Spec
from ragindex.lexical import ElasticsearchIndex, FieldBoosts, TantivyIndex, analyze
from ragindex.measure.evals import Collection
from ragindex.measure.servers import EsServer
from ragindex.protocols import LexicalIndex
from ragindex.types import Chunk, ScoredId

pytestmark = pytest.mark.elasticsearch

EDGE_CASES = [
    "U.S.A. don't 3.14 1,000 a:b wind-tunnel foo_bar ab12 x.1",
    "Ωmega ΣΑΣ 東京タワー ___ _a 1;2 boundary-layer /destalling/ (M=2.5)",
    "Mach 2.5-3.0, re=10**6; x/c=0.25 and 1.5e-3 (ref. 12) -- 'quoted' j.ae.scs.",
]


@pytest.fixture(scope="module")
def loaded(
    es_server: EsServer, cranfield_chunks: list[Chunk], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ElasticsearchIndex, TantivyIndex]]:
    chunks = cranfield_chunks
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
    loaded: tuple[ElasticsearchIndex, TantivyIndex],
    cranfield: Collection,
    cranfield_chunks: list[Chunk],
) -> None:
    es, _ = loaded
    texts = [
        *EDGE_CASES,
        *(c.text for c in cranfield_chunks),
        *(q.text for q in cranfield.queries.values()),
    ]
    mismatches = [t for t in texts if analyze(t) != es.analyze(t)]
    assert mismatches == []


def _same_up_to_ties(a: list[ScoredId], b: list[ScoredId]) -> bool:
    """Equal score sequences, and ids equal wherever the score is not tied: where the ids at
    one position differ, the two hits must score alike (a swap inside a tie), or the other
    id must tie with the last score (a tie cut by the top-k boundary)."""

    def close(x: float, y: float) -> bool:
        return abs(x - y) <= 1e-4 * max(1.0, abs(x))

    if len(a) != len(b) or not all(close(x.score, y.score) for x, y in zip(a, b, strict=True)):
        return False
    score_in_a = {h.chunk_id: h.score for h in a}
    for x, y in zip(a, b, strict=True):
        if x.chunk_id == y.chunk_id:
            continue
        if not close(score_in_a.get(y.chunk_id, a[-1].score), x.score):
            return False
    return True


def test_top10_equal_except_ties(
    loaded: tuple[ElasticsearchIndex, TantivyIndex], cranfield: Collection
) -> None:
    es, tv = loaded
    differing = [
        qid
        for qid, q in cranfield.queries.items()
        if not _same_up_to_ties(es.search(q.text, 10, "bench"), tv.search(q.text, 10, "bench"))
    ]
    assert differing == []


def test_cranfield_ndcg_within_001(
    loaded: tuple[ElasticsearchIndex, TantivyIndex], mean_ndcg: Callable[[LexicalIndex], float]
) -> None:
    es, tv = loaded
    es_ndcg, tv_ndcg = mean_ndcg(es), mean_ndcg(tv)
    assert abs(es_ndcg - tv_ndcg) < 0.01
    assert 0.30 < es_ndcg < 0.37


FIELDED_VARIANTS = {
    "default boosts": (FieldBoosts(), None),
    "title x2.5, body x0.5": (FieldBoosts(title=2.5, body=0.5), None),
    "title ignored": (FieldBoosts(title=0.0), None),
    "rm3": (FieldBoosts(title=2.0), Rm3Spec(enabled=True, docs=10, terms=10)),
}


@pytest.fixture(scope="module")
def fielded(
    es_server: EsServer, cranfield: Collection, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Path]]:
    """Cranfield with titles, as ingest indexes it (title field + body), in both backends."""
    chunks = [
        Chunk("bench", d.doc_id, "bench", d.doc_id, 0, d.title, d.text, "")
        for d in cranfield.corpus.values()
        if d.text.strip()
    ]
    alias = "parity_fielded"
    es = ElasticsearchIndex.open(es_server.url, alias, timeout_s=10.0)
    path = Path(tmp_path_factory.mktemp("parity_fielded")) / "tv"
    tv = TantivyIndex.open(path)
    for i in range(0, len(chunks), 500):
        es.upsert(chunks[i : i + 500])
        tv.upsert(chunks[i : i + 500])
    yield es_server.url, path
    tv.close()
    es.drop()
    es.close()


@pytest.mark.parametrize("variant", list(FIELDED_VARIANTS))
def test_fielded_top10_equal_except_ties(
    fielded: tuple[str, Path], cranfield: Collection, variant: str
) -> None:
    url, path = fielded
    boosts, rm3 = FIELDED_VARIANTS[variant]
    es = ElasticsearchIndex(url, "parity_fielded", timeout_s=10.0, boosts=boosts, rm3=rm3)
    tv = TantivyIndex.open(path, read_only=True, boosts=boosts, rm3=rm3)
    try:
        differing = [
            qid
            for qid, q in cranfield.queries.items()
            if not _same_up_to_ties(es.search(q.text, 10, "bench"), tv.search(q.text, 10, "bench"))
        ]
    finally:
        tv.close()
        es.close()
    assert differing == []
