"""The contract of the `LexicalIndex` protocol: tantivy (both layouts) and Elasticsearch alike.

A subclass provides two fixtures: `lexical_index`, a fresh empty index per test, and
`filtered_index`, one index per class holding `random_corpus()`. Then every test here runs on
it: upserts replace by chunk id, deletes are never returned, tenants are isolated even with
near-duplicate texts and shared chunk ids, chunks without terms are not indexed, the view of
a log (`LexicalView`) applies records and tombstones and resumes from its stored offsets, and
ACLs and filters run inside the leg.

Filters: a seeded random corpus (two tenants, random ACLs, sources, dates and typed metadata)
is indexed once; hypothesis then draws the caller's tenant, principals, filter and query term.
The leg must return exactly the chunks of that tenant which hold the term and which the
oracle (`ragindex.filters.matches`, evaluated on the chunk itself) allows: nothing outside,
nothing missing.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragindex.errors import InvalidInput
from ragindex.filters import compile_access, matches, parse_filter
from ragindex.lexical import LexicalView
from ragindex.log import FileLog
from ragindex.protocols import LexicalIndex
from ragindex.records import chunk_key, encode_chunk
from ragindex.types import Chunk, ScoredId

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


def chunk(tenant: str, chunk_id: str, text: str, title: str = "") -> Chunk:
    """A chunk with the given text; its source and document come from the id `source:doc:n`."""
    source, doc_id, n = chunk_id.split(":")
    return Chunk(tenant, chunk_id, source, doc_id, int(n), title, text, f"h-{chunk_id}")


def ids(hits: list[ScoredId]) -> list[str]:
    return [h.chunk_id for h in hits]


class LexicalIndexContract:
    """Subclasses provide `lexical_index` (fresh and empty) and `filtered_index` (one per class,
    holding `random_corpus()`)."""

    @pytest.fixture
    def lexical_index(self) -> Iterator[LexicalIndex]:
        raise NotImplementedError("the implementation's test class provides a fresh index")

    @pytest.fixture(scope="class")
    def filtered_index(self) -> Iterator[LexicalIndex]:
        raise NotImplementedError("the implementation's test class indexes random_corpus()")

    # -- writes ------------------------------------------------------------------------------

    def test_upsert_is_visible_and_replaces_by_chunk_id(self, lexical_index: LexicalIndex) -> None:
        lexical_index.upsert([chunk("t1", f"s:d:{i}", f"shock wave number {i}") for i in range(5)])
        assert lexical_index.count("t1") == 5
        lexical_index.upsert([chunk("t1", "s:d:1", "boundary layer transition")])
        assert "s:d:1" not in ids(lexical_index.search("shock", 100, "t1"))
        assert ids(lexical_index.search("boundary", 5, "t1")) == ["s:d:1"]
        assert lexical_index.count("t1") == 5

    def test_title_is_searchable(self, lexical_index: LexicalIndex) -> None:
        lexical_index.upsert([chunk("t1", "s:a:0", "body text", title="Heat transfer")])
        assert ids(lexical_index.search("heat", 5, "t1")) == ["s:a:0"]

    def test_same_id_twice_in_one_batch_keeps_the_last(self, lexical_index: LexicalIndex) -> None:
        lexical_index.upsert([chunk("t1", "s:a:0", "first"), chunk("t1", "s:a:0", "second")])
        assert lexical_index.count("t1") == 1
        assert lexical_index.search("first", 5, "t1") == []
        assert ids(lexical_index.search("second", 5, "t1")) == ["s:a:0"]

    def test_carried_chunks_are_the_ones_written_last(self, lexical_index: LexicalIndex) -> None:
        written = [
            replace(
                chunk("t1", f"s:d:{i}", f"shock wave number {i}", title=f"Report {i}"),
                context="Section 2",
                updated="2024-03-01",
                metadata={"lang": "en", "year": 2000 + i, "tags": ["a"]},
                acl=("group:eng",) if i % 2 else None,
            )
            for i in range(5)
        ]
        lexical_index.upsert(written)
        newest = replace(written[3], text="shock wave number 3, revised", content_hash="h2")
        lexical_index.upsert([newest])
        latest = {c.chunk_id: c for c in [*written[:3], newest, written[4]]}
        hits = lexical_index.search("shock", 10, "t1", with_chunks=2)
        assert sorted(ids(hits)) == sorted(latest)
        # a backend that stores chunks carries the first two; none carries one it does not hold
        assert all(h.chunk is None for h in hits[2:])
        assert all(h.chunk == latest[h.chunk_id] for h in hits[:2] if h.chunk is not None)
        assert all(h.chunk is None for h in lexical_index.search("shock", 10, "t1"))

    def test_deleted_chunks_are_never_returned(self, lexical_index: LexicalIndex) -> None:
        lexical_index.upsert([chunk("t1", f"s:d:{i}", f"shock wave number {i}") for i in range(20)])
        lexical_index.delete("t1", [f"s:d:{i}" for i in range(0, 20, 2)] + ["s:missing:0"])
        hits = ids(lexical_index.search("shock wave", 100, "t1"))
        assert sorted(hits) == sorted(f"s:d:{i}" for i in range(1, 20, 2))
        assert lexical_index.count("t1") == 10

    def test_tenants_are_isolated_with_near_duplicates_and_shared_ids(
        self, lexical_index: LexicalIndex
    ) -> None:
        text = "laminar flow over a flat plate case {}"
        a = [chunk("alpha", f"s:d:{i}", text.format(i)) for i in range(30)]
        b = [chunk("beta", f"s:d:{i}", text.format(i) + "!") for i in range(30)]
        b.append(chunk("beta", "s:only-beta:0", "laminar flow flat plate " * 20))
        lexical_index.upsert(a + b)
        for query in ["laminar flow flat plate", "case 7", "only"]:
            alpha = lexical_index.search(query, 100, "alpha")
            assert "s:only-beta:0" not in ids(alpha)
            assert len(alpha) <= 30
        assert lexical_index.search("laminar", 100, "gamma") == []
        lexical_index.delete("beta", ["s:d:3"])  # the same chunk id in alpha survives
        assert "s:d:3" in ids(lexical_index.search("case 3", 100, "alpha"))
        assert (lexical_index.count("alpha"), lexical_index.count("beta")) == (30, 30)

    def test_chunk_without_terms_is_not_indexed(self, lexical_index: LexicalIndex) -> None:
        lexical_index.upsert([chunk("t1", "s:a:0", "vortex sheet")])
        lexical_index.upsert([chunk("t1", "s:a:0", " -- ... "), chunk("t1", "s:a:1", "?")])
        assert lexical_index.search("vortex", 5, "t1") == []
        assert lexical_index.count("t1") == 0

    def test_hits_are_ranked_by_score(self, lexical_index: LexicalIndex) -> None:
        lexical_index.upsert(
            [
                chunk("t1", "s:a:0", "nozzle nozzle nozzle flow"),
                chunk("t1", "s:b:0", "nozzle flow in a long duct with friction and heat"),
                chunk("t1", "s:c:0", "turbine blade cooling"),
            ]
        )
        hits = lexical_index.search("nozzle", 10, "t1")
        assert ids(hits) == ["s:a:0", "s:b:0"]
        assert hits[0].score > hits[1].score > 0

    # -- bad input ---------------------------------------------------------------------------

    @pytest.mark.parametrize(
        ("query", "top_k", "tenant"),
        [(None, 5, "t1"), ("x", 0, "t1"), ("x", True, "t1"), ("x", 10_001, "t1"), ("x", 5, "T 1")],
    )
    def test_bad_search_is_rejected(
        self, lexical_index: LexicalIndex, query: Any, top_k: Any, tenant: str
    ) -> None:
        with pytest.raises(InvalidInput):
            lexical_index.search(query, top_k, tenant)

    def test_bad_batch_changes_nothing(self, lexical_index: LexicalIndex) -> None:
        lexical_index.upsert([chunk("t1", "s:a:0", "original")])
        bad = Chunk("Bad Tenant", "s:b:0", "s", "b", 0, "", "text", "h")
        with pytest.raises(InvalidInput):
            lexical_index.upsert([chunk("t1", "s:a:0", "replacement"), bad])
        with pytest.raises(InvalidInput):
            lexical_index.delete("T1", ["s:a:0"])
        assert ids(lexical_index.search("original", 5, "t1")) == ["s:a:0"]
        assert lexical_index.count("t1") == 1

    def test_query_without_tokens_returns_nothing(self, lexical_index: LexicalIndex) -> None:
        lexical_index.upsert([chunk("t1", "s:a:0", "anything")])
        assert lexical_index.search("  ?!-- ", 5, "t1") == []

    # -- the view of a log: records, tombstones, offsets --------------------------------------

    def test_a_log_view_applies_records_and_tombstones_and_resumes_from_its_offsets(
        self, lexical_index: LexicalIndex, tmp_path: Path
    ) -> None:
        topic = "contract.chunks"

        def record(tenant: str, n: int, text: str) -> tuple[int, bytes, bytes]:
            c = chunk(tenant, f"wiki:{n}:0", text)
            return (n % 2, chunk_key(tenant, c.chunk_id), encode_chunk(c, np.ones(4, np.float32)))

        log = FileLog(tmp_path / "log")
        try:
            log.ensure_topic(topic, 2, compacted=True)
            log.append(topic, [record("a", n, f"lift wing {n}") for n in range(6)])
            log.append(topic, [record("b", 0, "lift"), (1, chunk_key("a", "wiki:3:0"), None)])
            offsets = tmp_path / "offsets.json"
            view = LexicalView(log, topic, 2, lexical_index, offsets)
            assert view.catch_up() == 8
            assert (lexical_index.count("a"), lexical_index.count("b")) == (5, 1)
            assert "wiki:3:0" not in ids(lexical_index.search("lift", 10, "a"))
            assert view.offsets == [log.end_offset(topic, 0), log.end_offset(topic, 1)]
            log.append(
                topic, [record("a", 7, "lift wing 7"), (0, chunk_key("b", "wiki:0:0"), None)]
            )
            again = LexicalView(log, topic, 2, lexical_index, offsets)  # a restarted view
            assert again.catch_up() == 2  # only what was new
            assert (lexical_index.count("a"), lexical_index.count("b")) == (6, 0)
        finally:
            log.close()

    # -- ACLs and filters inside the leg ------------------------------------------------------

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
