"""The query engine's rerank branch, with a real (test-built) cross-encoder.

The model has random weights, so its order is arbitrary but fixed: the test checks that the
engine reranks exactly the fused top-N pool by the cross-encoder's own scores and keeps each
hit's fused rank, not that the order is good.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

from collections.abc import Iterator
from pathlib import Path

import pytest

from ragindex.app import EmbeddedIndex
from ragindex.config import RagIndexSpec
from ragindex.errors import InvalidInput
from ragindex.protocols import Embedder
from ragindex.types import Document

TOP_N = 6
TEXTS = [
    "boundary layer transition on a swept wing at supersonic speed",
    "heat transfer to a blunt body in hypersonic flow",
    "flutter of thin panels exposed to supersonic airflow",
    "pressure distribution over a slender cone at incidence",
    "buckling of cylindrical shells under axial compression",
    "lift and drag of a delta wing at high angle of attack",
    "shock wave boundary layer interaction on a compression ramp",
    "laminar flow over a flat plate with suction",
    "wing flutter speed of a swept wing model",
    "skin friction in turbulent supersonic boundary layers",
]
QUERY = "supersonic boundary layer on a wing"


@pytest.fixture(scope="module")
def engine(
    tmp_path_factory: pytest.TempPathFactory, tiny_cross_encoder: Path, minilm: Embedder
) -> Iterator[EmbeddedIndex]:
    spec = RagIndexSpec.model_validate(
        {
            "reranker": {"enabled": True, "model": str(tiny_cross_encoder), "topN": TOP_N},
            "fusion": {"topK": 3},
        }
    )
    eng = EmbeddedIndex(tmp_path_factory.mktemp("rerank"), spec, embedder=minilm)
    docs = [Document("papers", str(i), "", text) for i, text in enumerate(TEXTS)]
    eng.upsert("acme", docs)
    yield eng
    eng.close()


def test_rerank_orders_the_fused_pool_by_cross_encoder_scores(engine: EmbeddedIndex) -> None:
    assert engine.query.reranker is not None
    fused = engine.query.search("acme", QUERY, k=TOP_N, rerank=False).hits
    assert len(fused) == TOP_N
    result = engine.query.search("acme", QUERY, k=4, rerank=True)
    assert "rerank" in result.timings_ms
    scores = engine.query.reranker.score(QUERY, [h.chunk.text for h in fused])
    expected = sorted(zip(fused, scores, strict=True), key=lambda pair: -pair[1])[:4]
    assert [h.chunk.chunk_id for h in result.hits] == [h.chunk.chunk_id for h, _ in expected]
    for hit, (fused_hit, score) in zip(result.hits, expected, strict=True):
        assert hit.score == pytest.approx(score, abs=1e-5)
        assert hit.ranks["fused"] == fused.index(fused_hit) + 1
        assert {"dense", "lexical"} & set(hit.ranks)
    # the random cross-encoder disagrees with fusion somewhere, or this test could not fail
    assert [h.chunk.chunk_id for h in result.hits] != [h.chunk.chunk_id for h in fused[:4]]


def test_rerank_is_the_default_when_configured(engine: EmbeddedIndex) -> None:
    default = engine.query.search("acme", QUERY)
    assert "rerank" in default.timings_ms and len(default.hits) == 3
    plain = engine.query.search("acme", QUERY, rerank=False)
    assert "rerank" not in plain.timings_ms


def test_rerank_without_a_reranker_is_refused(tmp_path: Path, minilm: Embedder) -> None:
    eng = EmbeddedIndex(tmp_path / "plain", RagIndexSpec(), embedder=minilm)
    try:
        with pytest.raises(InvalidInput, match="no reranker configured"):
            eng.query.search("acme", QUERY, rerank=True)
    finally:
        eng.close()
