"""The embedded BM25 backend on real tantivy indexes: the LexicalIndex contract, then what only
the embedded backend shows; every test runs on one shared index and on an index per tenant
(the `tantivy_index`, `open_bm25` and contract fixtures are parametrized)."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import tantivy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragindex.errors import BackendUnavailable
from ragindex.filters import PUBLIC, AllExpr, AnyTerm, compile_access
from ragindex.lexical import TantivyIndex
from ragindex.lexical.analysis import ANALYZER_NAME
from ragindex.lexical.documents import BODY_FIELD, FILTER_FIELD, TITLE_FIELD
from ragindex.protocols import LexicalIndex
from ragindex.testing import LexicalIndexContract, random_corpus
from ragindex.types import Chunk

from .layouts import LAYOUTS, EmbeddedBm25, OpenBm25

MakeChunk = Callable[..., Chunk]


def ids(hits: list) -> list[str]:
    return [h.chunk_id for h in hits]


def test_score_is_plain_bm25(tantivy_index: EmbeddedBm25, make_chunk: MakeChunk) -> None:
    """One doc, one term: idf = ln(1 + 0.5 / 1.5), tf part = 1; the tenant clause adds 0."""
    tantivy_index.upsert([make_chunk("t1", "s:a:0", "heat flux")])
    assert tantivy_index.search("heat", 1, "t1")[0].score == pytest.approx(
        math.log(4 / 3), rel=1e-5
    )


def test_a_one_tenant_index_searches_without_the_tenant_clause_and_stays_isolated(
    tantivy_index: EmbeddedBm25, make_chunk: MakeChunk
) -> None:
    """While every document is one tenant's, its searches leave the tenant clause out (it
    would filter nothing); once another tenant's document arrives, and while its deleted
    document is still in a segment, the clause is back: no tenant sees another's chunks."""
    tantivy_index.upsert([make_chunk("t1", f"s:a:{n}", f"heat flux {n}") for n in range(3)])
    assert sorted(ids(tantivy_index.search("heat", 10, "t1"))) == ["s:a:0", "s:a:1", "s:a:2"]
    assert tantivy_index.search("heat", 10, "t2") == []
    tantivy_index.upsert([make_chunk("t2", "s:b:0", "heat shield")])
    assert ids(tantivy_index.search("heat", 10, "t2")) == ["s:b:0"]
    assert "s:b:0" not in ids(tantivy_index.search("heat", 10, "t1"))
    tantivy_index.delete("t2", ["s:b:0"])
    assert tantivy_index.search("heat", 10, "t2") == []
    assert len(tantivy_index.search("heat", 10, "t1")) == 3


def test_an_acl_that_lets_public_chunks_through_filters_nothing_until_a_chunk_has_an_acl(
    tantivy_index: EmbeddedBm25, make_chunk: MakeChunk
) -> None:
    """While no chunk has an ACL, a reader's access (public, or one of its principals)
    leaves the clause out and finds what the operator finds; once a chunk has one, and while
    its deleted document is still in a segment, the clause is back: nobody reads a chunk
    whose ACL leaves them out."""
    tantivy_index.upsert([make_chunk("t1", f"s:a:{n}", f"heat flux {n}") for n in range(3)])
    bob = compile_access(None, frozenset({"bob"}))
    assert ids(tantivy_index.search("heat", 10, "t1", bob)) == ids(
        tantivy_index.search("heat", 10, "t1")
    )
    secret = replace(make_chunk("t1", "s:x:0", "heat secret"), acl=("alice",))
    tantivy_index.upsert([secret])
    assert "s:x:0" not in ids(tantivy_index.search("heat", 10, "t1", bob))
    alice = compile_access(None, frozenset({"alice"}))
    assert "s:x:0" in ids(tantivy_index.search("heat", 10, "t1", alice))
    tantivy_index.upsert([replace(secret, acl=("bob",))])
    assert "s:x:0" in ids(tantivy_index.search("heat", 10, "t1", bob))
    assert "s:x:0" not in ids(tantivy_index.search("heat", 10, "t1", alice))
    nobody = AllExpr((AnyTerm(frozenset({PUBLIC})), AnyTerm(frozenset())))
    assert tantivy_index.search("heat", 10, "t1", nobody) == []


def test_hits_name_the_chunks_the_index_holds_now_across_writes_and_merges(
    tantivy_index: EmbeddedBm25, make_chunk: MakeChunk
) -> None:
    """Searches keep the ids of the documents they hit for as long as the reader lives; each
    write's reader starts again, so a document address reused by a later segment or merge
    never answers the id of the chunk that was there before."""
    for rnd in range(12):
        tantivy_index.upsert(
            [make_chunk("t1", f"s:r{rnd}:{n}", f"heat flux round{rnd} {n}") for n in range(4)]
        )
        found = ids(tantivy_index.search("heat", 100, "t1"))
        assert sorted(found) == sorted(f"s:r{rnd}:{n}" for n in range(4)), rnd
        assert ids(tantivy_index.search(f"round{rnd}", 100, "t1")) != []
        tantivy_index.delete("t1", [f"s:r{rnd}:{n}" for n in range(4)])
    assert tantivy_index.search("heat", 100, "t1") == []


def test_top_hits_carry_their_whole_chunk(
    tantivy_index: EmbeddedBm25, make_chunk: MakeChunk
) -> None:
    """What the cluster's Lexical replicas send instead of ids alone (the Router then needs no
    fetch): every field of the chunk as written, an empty title and non-ASCII text included."""
    written = [
        replace(
            make_chunk("t1", f"s:d{i}:{i}", f"flutter ünïcode {'flutter ' * i}"),
            title="",
            context=None if i else "Part 1 › Wings",
            metadata={"year": 2001, "nested": {"k": [1, 2.5, None]}},
            acl=("user:ann",),
        )
        for i in range(4)
    ]
    tantivy_index.upsert(written)
    hits = tantivy_index.search("flutter", 4, "t1", with_chunks=3)
    assert [h.chunk for h in hits[:3]] == [
        next(c for c in written if c.chunk_id == h.chunk_id) for h in hits[:3]
    ]
    assert hits[3].chunk is None


def test_an_index_made_before_whole_chunks_were_stored_still_serves(
    tmp_path: Path, make_chunk: MakeChunk
) -> None:
    builder = tantivy.SchemaBuilder()  # build_schema() without the `chunk` field
    for field in (TITLE_FIELD, BODY_FIELD):
        builder.add_text_field(field, stored=True, tokenizer_name=ANALYZER_NAME)
    for field in ("tenant_id", "chunk_id", "key", FILTER_FIELD):
        builder.add_text_field(field, stored=field == "chunk_id", tokenizer_name="raw")
    tantivy.Index(builder.build(), path=str(tmp_path))
    index = TantivyIndex.open(tmp_path)
    try:
        assert not index.stores_chunks
        index.upsert([make_chunk("t1", "s:a:0", "heat flux")])
        hits = index.search("heat", 5, "t1", with_chunks=5)
        assert [(h.chunk_id, h.chunk) for h in hits] == [("s:a:0", None)]
    finally:
        index.close()
    reader = TantivyIndex.open(tmp_path, read_only=True)
    assert [h.chunk for h in reader.search("flux", 5, "t1", with_chunks=5)] == [None]


def test_persists_across_reopen(open_bm25: OpenBm25, tmp_path: Path, make_chunk: MakeChunk) -> None:
    index = open_bm25(tmp_path / "ix")
    index.upsert([make_chunk("t1", "s:a:0", "hypersonic heating")])
    index.delete("t1", ["s:a:0"])
    index.upsert([make_chunk("t1", "s:a:1", "hypersonic heating again")])
    index.close()
    reopened = open_bm25(tmp_path / "ix")
    try:
        assert ids(reopened.search("hypersonic", 5, "t1")) == ["s:a:1"]
        assert reopened.count("t1") == 1
    finally:
        reopened.close()


def test_second_writer_is_refused_clearly(
    tantivy_index: EmbeddedBm25, open_bm25: OpenBm25, tmp_path: Path, make_chunk: MakeChunk
) -> None:
    tantivy_index.upsert([make_chunk("t1", "s:a:0", "held")])
    with pytest.raises(BackendUnavailable, match="another process"):
        open_bm25(tmp_path / "bm25").upsert([make_chunk("t1", "s:a:1", "second writer")])


def test_closed_index_raises(open_bm25: OpenBm25, tmp_path: Path, make_chunk: MakeChunk) -> None:
    index = open_bm25(tmp_path / "ix")
    index.close()
    index.close()
    with pytest.raises(BackendUnavailable, match="closed"):
        index.search("x", 1, "t1")
    with pytest.raises(BackendUnavailable, match="closed"):
        index.upsert([make_chunk("t1", "s:a:0", "x")])


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(query=st.text(max_size=200))
def test_user_text_never_raises(
    tantivy_index: EmbeddedBm25, query: str, make_chunk: MakeChunk
) -> None:
    if not tantivy_index.count("t1"):
        tantivy_index.upsert([make_chunk("t1", "s:a:0", 'title:"x" AND (y OR z) wing*~2 [a TO b]')])
    hits = tantivy_index.search(query, 10, "t1")
    assert all(h.chunk_id == "s:a:0" for h in hits)


def test_searches_run_while_writing(tantivy_index: EmbeddedBm25, make_chunk: MakeChunk) -> None:
    tantivy_index.upsert([make_chunk("t1", "s:base:0", "stable document about nozzles")])
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader() -> None:
        try:
            while not stop.is_set():
                assert ids(tantivy_index.search("nozzles", 5, "t1"))[:1] == ["s:base:0"]
        except BaseException as exc:  # reported below
            errors.append(exc)

    thread = threading.Thread(target=reader)
    thread.start()
    for i in range(20):
        tantivy_index.upsert([make_chunk("t1", f"s:w:{i}", f"writer batch {i}")])
    stop.set()
    thread.join(10)
    assert not errors
    assert tantivy_index.count("t1") == 21


def test_cranfield_ndcg_is_in_the_expected_range(
    open_bm25: OpenBm25,
    tmp_path: Path,
    cranfield_chunks: list[Chunk],
    mean_ndcg: Callable[[LexicalIndex], float],
) -> None:
    index = open_bm25(tmp_path / "cran")
    try:
        index.upsert(cranfield_chunks)
        assert index.count("bench") == 1398  # two Cranfield abstracts have no text
        # Unstemmed BM25; FIELD-NOTES has 0.343 for stemmed bm25s.
        assert 0.30 < mean_ndcg(index) < 0.37
    finally:
        index.close()


class TestTantivyContract(LexicalIndexContract):
    """The LexicalIndex contract on both embedded layouts: one shared index, and an index per
    tenant."""

    @pytest.fixture(params=sorted(LAYOUTS))
    def lexical_index(
        self, request: pytest.FixtureRequest, tmp_path: Path
    ) -> Iterator[EmbeddedBm25]:
        index = LAYOUTS[request.param](tmp_path / "bm25")
        yield index
        index.close()

    @pytest.fixture(scope="class", params=sorted(LAYOUTS))
    @classmethod
    def filtered_index(
        cls, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
    ) -> Iterator[EmbeddedBm25]:
        index = LAYOUTS[request.param](Path(tmp_path_factory.mktemp("filters")) / "bm25")
        index.upsert(random_corpus())
        yield index
        index.close()
