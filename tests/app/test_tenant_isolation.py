"""Two tenants with near-identical documents: no leg ever returns the other tenant's chunk.

The check is made on each leg's raw output (dense and BM25) and on the fused result, before
the chunk fetch: the fetch reads only the asking tenant's chunks, so checking after it could
not see a leak.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragindex.app import EmbeddedIndex, open_lexical
from ragindex.config import RagIndexSpec
from ragindex.fusion import reciprocal_rank_fusion
from ragindex.router import QueryEngine
from ragindex.types import Document

TOPICS = [
    "boundary layer transition on a swept wing at supersonic speed",
    "heat transfer to a blunt body in hypersonic flow",
    "flutter of thin panels exposed to airflow",
    "pressure distribution over a slender cone at incidence",
    "buckling of cylindrical shells under axial compression",
]
WORDS = sorted({w for t in TOPICS for w in t.split()} | {"lift", "drag", "zzz", "tenant"})


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> EmbeddedIndex:
    spec = RagIndexSpec.model_validate({"dense": {"shards": 2}})
    engine = EmbeddedIndex(Path(tmp_path_factory.mktemp("iso")), spec)
    for tenant, prefix in (("alpha", "a"), ("beta", "b")):
        docs = [
            Document(
                source="papers",
                doc_id=f"{prefix}{n}",
                title=topic,
                # near-identical: the same text, one word apart
                text=f"{topic}. Measurements by team {tenant} of the {topic}.",
            )
            for n, topic in enumerate(TOPICS)
        ]
        engine.upsert(tenant, docs)
    yield engine
    engine.close()


def _own(tenant: str, chunk_id: str) -> bool:
    return chunk_id.split(":")[1].startswith(tenant[0])


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    tenant=st.sampled_from(["alpha", "beta"]),
    words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=8),
)
def test_no_leg_returns_another_tenants_chunk(engine: EmbeddedIndex, tenant: str, words: list[str]):
    query = " ".join(words)
    vector = engine.embedder.embed_queries([query])
    dense = engine.dense.search(vector, 100, tenant, engine.embedder.identity)
    lexical = engine.lexical.search(query, 100, tenant)
    fused = reciprocal_rank_fusion(
        {"dense": [h.chunk_id for h in dense], "lexical": [h.chunk_id for h in lexical]}
    )
    assert dense, "the tenant's own documents are always similar enough to be found"
    for chunk_id in [h.chunk_id for h in dense + lexical] + [f.chunk_id for f in fused]:
        assert _own(tenant, chunk_id), f"{tenant} got {chunk_id}"
    result = engine.query.search(tenant, query, k=10)
    assert all(h.chunk.tenant_id == tenant and _own(tenant, h.chunk.chunk_id) for h in result.hits)


def test_other_tenants_exact_text_finds_only_own_documents(engine: EmbeddedIndex):
    other_text = f"{TOPICS[0]}. Measurements by team beta of the {TOPICS[0]}."
    hits = engine.query.search("alpha", other_text, k=10).hits
    assert hits and all(h.chunk.doc_id.startswith("a") for h in hits)


def test_feedback_on_both_legs_stays_inside_the_tenant(engine: EmbeddedIndex):
    """RM3 and Rocchio read their feedback hits' text: only ever the asking tenant's."""
    spec = RagIndexSpec.model_validate(
        {
            "fusion": {"denseWeight": 1.0, "lexicalWeight": 0.5},
            "feedback": {
                "rm3": {"enabled": True, "docs": 3, "terms": 10},
                "rocchio": {"enabled": True, "docs": 2, "beta": 1.0},
            },
        }
    )
    lexical = open_lexical(
        spec,
        engine.side.directory,
        engine.embedder.identity,
        namespace=engine.side.namespace,
        name=engine.side.name,
        read_only=True,
    )
    query = QueryEngine(
        engine.embedder,
        engine.dense,
        lexical,
        engine.dense,
        fusion=spec.fusion,
        lexical_spec=spec.lexical,
        rocchio=spec.feedback.rocchio,
    )
    try:
        for tenant in ("alpha", "beta"):
            for mode in ("hybrid", "dense", "lexical"):
                result = query.search(tenant, "flutter of panels", k=10, mode=mode)
                assert result.hits
                assert all(_own(tenant, h.chunk.chunk_id) for h in result.hits)
            assert "rocchio" in query.search(tenant, "heat transfer", k=3).timings_ms
        expanded = [h.chunk_id for h in lexical.search("flutter", 10, "alpha")]
        plain = [h.chunk_id for h in engine.lexical.search("flutter", 10, "alpha")]
        assert expanded[0] == plain[0] and len(expanded) > len(plain)
    finally:
        lexical.close()
