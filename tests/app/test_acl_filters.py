"""ACLs and filters end to end on the embedded data plane (real MiniLM, file log, ingest worker,
FAISS shard replicas, tantivy view).

Hypothesis draws the documents (random ACLs, sources, dates and metadata in two tenants),
then the caller (tenant, principals) and its filter and query. No hit of the dense leg, the
BM25 leg, the fused result or an answer's sources and citations may fall outside the
caller's tenant, principals or filter; and the dense leg, which searches the allowed ids
exactly at these sizes, must return every allowed chunk it has room for (recall does not
collapse because the filter is selective).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragindex.app import EmbeddedIndex
from ragindex.config import RagIndexSpec
from ragindex.filters import parse_filter
from ragindex.router import Access, AnswerService, ExtractiveGenerator
from ragindex.types import Document

pytestmark = pytest.mark.slow

TENANTS = ("alpha", "beta")
PRINCIPALS = ("user:ann", "user:bob", "group:eng", "group:ops")
TOPICS = (
    "boundary layer transition on a swept wing",
    "heat transfer to a blunt body in hypersonic flow",
    "flutter of thin panels exposed to airflow",
    "buckling of cylindrical shells under compression",
)
SLOTS = 6  # documents per tenant; each example rewrites them all


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedIndex]:
    spec = RagIndexSpec.model_validate({"dense": {"shards": 2}})
    engine = EmbeddedIndex(Path(tmp_path_factory.mktemp("acl")), spec)
    yield engine
    engine.close()


documents = st.lists(
    st.fixed_dictionaries(
        {
            "acl": st.one_of(
                st.none(), st.lists(st.sampled_from(PRINCIPALS), min_size=1, max_size=2)
            ),
            "source": st.sampled_from(["wiki", "mail"]),
            "updated": st.one_of(st.none(), st.integers(1, 9).map(lambda m: f"2024-0{m}-01")),
            "metadata": st.fixed_dictionaries(
                {"lang": st.sampled_from(["en", "de"]), "year": st.integers(2000, 2004)}
            ),
        }
    ),
    min_size=SLOTS * len(TENANTS),
    max_size=SLOTS * len(TENANTS),
)
filters = st.one_of(
    st.none(),
    st.builds(lambda s: {"field": "source", "eq": s}, st.sampled_from(["wiki", "mail"])),
    st.builds(lambda m: {"field": "updated", "gte": f"2024-0{m}-01"}, st.integers(1, 9)),
    st.builds(
        lambda lang, y: {"or": [{"field": "metadata.lang", "eq": lang},
                                {"field": "metadata.year", "lt": y}]},
        st.sampled_from(["en", "de"]), st.integers(2000, 2005),
    ),
)  # fmt: skip


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    docs=documents,
    tenant=st.sampled_from(TENANTS),
    principals=st.sets(st.sampled_from(PRINCIPALS)),
    data=filters,
    topic=st.sampled_from(TOPICS),
)
def test_no_leg_fused_result_or_answer_leaves_the_callers_scope(
    engine: EmbeddedIndex,
    docs: list[dict[str, Any]],
    tenant: str,
    principals: set[str],
    data: dict[str, Any] | None,
    topic: str,
) -> None:
    written: dict[str, dict[str, Document]] = {t: {} for t in TENANTS}
    for i, attrs in enumerate(docs):
        owner, slot = TENANTS[i % 2], i // 2
        doc = Document(
            source=attrs["source"],
            doc_id=f"d{slot}",
            title=TOPICS[slot % len(TOPICS)],
            text=f"{TOPICS[slot % len(TOPICS)]}: notes of {owner} number {slot}.",
            updated=attrs["updated"],
            metadata=attrs["metadata"],
            acl=attrs["acl"],
        )
        for other in ("wiki", "mail"):  # a slot moves between sources: drop the old one
            if other != doc.source:
                engine.delete(owner, other, doc.doc_id)
        engine.upsert(owner, [doc])
        written[owner][f"{doc.source}:{doc.doc_id}"] = doc

    access = Access(principals=frozenset(principals), filter=parse_filter(data))
    expr = access.expression()
    mine = engine.dense.get_chunks(tenant, [f"{k}:0" for k in written[tenant]])
    allowed = {cid for cid, chunk in mine.items() if access.allows(chunk)}

    vector = engine.embedder.embed_queries([topic])
    dense = engine.dense.search(vector, 50, tenant, engine.embedder.identity, expr)
    assert {h.chunk_id for h in dense} == allowed  # nothing outside, nothing missing
    lexical = engine.lexical.search(topic, 50, tenant, expr)
    assert {h.chunk_id for h in lexical} <= allowed
    fused = engine.query.search(tenant, topic, k=20, access=access)
    assert all(h.chunk.tenant_id == tenant and access.allows(h.chunk) for h in fused.hits)
    assert {h.chunk.chunk_id for h in fused.hits} <= allowed

    answers = AnswerService(engine.query, ExtractiveGenerator(), engine.embedder.count_tokens)
    answer = answers.answer(tenant, topic, 5, access)
    cited = set(answer.citations) | {c for s in answer.sources for c in s.chunk_ids}
    assert cited <= allowed
