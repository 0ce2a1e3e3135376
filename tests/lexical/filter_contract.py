"""ACLs and filters inside the BM25 leg: one contract for tantivy and Elasticsearch alike.

A seeded random corpus (two tenants, random ACLs, sources, dates and typed metadata) is
indexed once; hypothesis then draws the caller's tenant, principals, filter and query term.
The leg must return exactly the chunks of that tenant which hold the term and which the
oracle (`ragindex.filters.matches`, evaluated on the chunk itself) allows: nothing outside,
nothing missing.
"""

from __future__ import annotations

import random
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragindex.filters import compile_access, matches, parse_filter
from ragindex.protocols import LexicalIndex
from ragindex.types import Chunk

TENANTS = ("alpha", "beta")
PRINCIPALS = ("user:ann", "user:bob", "group:eng", "group:ops", "role:admin")
SOURCES = ("wiki", "mail", "tickets")
WORDS = ("turbine", "nozzle", "flutter", "shock", "wing")
LANGS = ("en", "de", "fr")


def random_corpus(seed: int = 18, per_tenant: int = 60) -> list[Chunk]:
    rng = random.Random(seed)
    chunks = []
    for tenant in TENANTS:
        for n in range(per_tenant):
            acl = None if rng.random() < 0.3 else tuple(rng.sample(PRINCIPALS, rng.randint(1, 2)))
            meta: dict[str, Any] = {"lang": rng.choice(LANGS), "year": rng.randint(2000, 2009)}
            if rng.random() < 0.5:
                meta["score"] = round(rng.uniform(-1, 1), 3)
            if rng.random() < 0.5:
                meta["tags"] = rng.sample(["a", "b", "c"], rng.randint(0, 2))
            source = rng.choice(SOURCES)
            words = " ".join(rng.sample(WORDS, 2))
            chunks.append(
                Chunk(
                    tenant_id=tenant,
                    chunk_id=f"{source}:d{n}:0",
                    source=source,
                    doc_id=f"d{n}",
                    n=0,
                    title="",
                    text=f"{words} measurements {tenant}",
                    content_hash=f"h{n}",
                    updated=None if rng.random() < 0.2 else f"2024-0{rng.randint(1, 9)}-1{n % 10}",
                    metadata=meta,
                    acl=acl,
                )
            )
    return chunks


CONDITIONS = st.one_of(
    st.builds(
        lambda s: {"field": "source", "in": s}, st.lists(st.sampled_from(SOURCES), min_size=1)
    ),
    st.builds(lambda s: {"field": "source", "eq": s}, st.sampled_from(SOURCES)),
    st.builds(
        lambda op, m: {"field": "updated", op: f"2024-0{m}-15"},
        st.sampled_from(["gt", "gte", "lt", "lte"]),
        st.integers(1, 9),
    ),
    st.builds(lambda v: {"field": "metadata.lang", "eq": v}, st.sampled_from(LANGS)),
    st.builds(
        lambda lo, hi: {"field": "metadata.year", "gte": min(lo, hi), "lt": max(lo, hi) + 1},
        st.integers(1999, 2010),
        st.integers(1999, 2010),
    ),
    st.builds(
        lambda op, v: {"field": "metadata.score", op: v},
        st.sampled_from(["gt", "lte"]),
        st.floats(-1.2, 1.2),
    ),
    st.builds(
        lambda v: {"field": "metadata.tags", "in": v}, st.lists(st.sampled_from("abc"), min_size=1)
    ),
)
FILTERS = st.one_of(
    st.none(),
    CONDITIONS,
    st.builds(lambda p: {"and": p}, st.lists(CONDITIONS, min_size=1, max_size=3)),
    st.builds(
        lambda p, q: {"or": [p, {"and": q}]},
        CONDITIONS,
        st.lists(CONDITIONS, min_size=1, max_size=2),
    ),
)


class FilteredLexicalContract:
    """Subclasses provide a `filtered_index` fixture: an index holding `random_corpus()`."""

    @settings(
        max_examples=60,
        deadline=None,
        # one test method on two classes (tantivy, Elasticsearch) looks like two executors
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.differing_executors,
        ],
    )
    @given(
        tenant=st.sampled_from(TENANTS),
        principals=st.one_of(st.none(), st.sets(st.sampled_from(PRINCIPALS))),
        data=FILTERS,
        word=st.sampled_from(WORDS),
    )
    def test_filters_run_inside_the_leg(
        self,
        filtered_index: LexicalIndex,
        tenant: str,
        principals: set[str] | None,
        data: dict[str, Any] | None,
        word: str,
    ) -> None:
        flt = parse_filter(data)
        got = {
            h.chunk_id
            for h in filtered_index.search(word, 500, tenant, compile_access(flt, principals))
        }
        expected = {
            c.chunk_id
            for c in random_corpus()
            if c.tenant_id == tenant and word in c.text and matches(c, flt, principals)
        }
        assert got == expected

    def test_an_empty_grant_reads_only_documents_without_acl(
        self, filtered_index: LexicalIndex
    ) -> None:
        got = {
            h.chunk_id
            for h in filtered_index.search("measurements", 500, "alpha", compile_access(None, []))
        }
        open_ = {c.chunk_id for c in random_corpus() if c.tenant_id == "alpha" and c.acl is None}
        assert got == open_ and open_
