"""The embedded BM25 backend on real tantivy indexes: every test runs on one shared index and on
an index per tenant (the `tantivy_index` and `open_bm25` fixtures are parametrized)."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragindex.errors import BackendUnavailable, InvalidInput
from ragindex.protocols import LexicalIndex
from ragindex.types import Chunk

from .layouts import EmbeddedBm25, OpenBm25

MakeChunk = Callable[..., Chunk]


def ids(hits: list) -> list[str]:
    return [h.chunk_id for h in hits]


def test_upsert_is_visible_and_replaces(tantivy_index: EmbeddedBm25, make_chunk: MakeChunk) -> None:
    tantivy_index.upsert([make_chunk("t1", "s:a:0", "supersonic wind tunnel tests")])
    assert ids(tantivy_index.search("wind tunnel", 5, "t1")) == ["s:a:0"]
    tantivy_index.upsert([make_chunk("t1", "s:a:0", "boundary layer transition")])
    assert tantivy_index.search("wind tunnel", 5, "t1") == []
    assert ids(tantivy_index.search("boundary", 5, "t1")) == ["s:a:0"]
    assert tantivy_index.count("t1") == 1


def test_title_is_searchable(tantivy_index: EmbeddedBm25, make_chunk: MakeChunk) -> None:
    tantivy_index.upsert([make_chunk("t1", "s:a:0", "body text", title="Heat transfer")])
    assert ids(tantivy_index.search("heat", 5, "t1")) == ["s:a:0"]


def test_same_id_twice_in_one_batch_keeps_the_last(
    tantivy_index: EmbeddedBm25, make_chunk: MakeChunk
) -> None:
    tantivy_index.upsert([make_chunk("t1", "s:a:0", "first"), make_chunk("t1", "s:a:0", "second")])
    assert tantivy_index.count("t1") == 1
    assert tantivy_index.search("first", 5, "t1") == []


def test_deleted_chunks_are_never_returned(
    tantivy_index: EmbeddedBm25, make_chunk: MakeChunk
) -> None:
    chunks = [make_chunk("t1", f"s:d:{i}", f"shock wave number {i}") for i in range(20)]
    tantivy_index.upsert(chunks)
    tantivy_index.delete("t1", [f"s:d:{i}" for i in range(0, 20, 2)] + ["s:missing:0"])
    hits = ids(tantivy_index.search("shock wave", 100, "t1"))
    assert sorted(hits) == sorted(f"s:d:{i}" for i in range(1, 20, 2))
    assert tantivy_index.count("t1") == 10


def test_tenant_isolation_with_near_duplicates(
    tantivy_index: EmbeddedBm25, make_chunk: MakeChunk
) -> None:
    a = [
        make_chunk("alpha", f"s:d:{i}", f"laminar flow over a flat plate case {i}")
        for i in range(30)
    ]
    b = [
        make_chunk("beta", f"s:d:{i}", f"laminar flow over a flat plate case {i}!")
        for i in range(30)
    ]
    b.append(make_chunk("beta", "s:only-beta:0", "laminar flow flat plate " * 20))
    tantivy_index.upsert(a + b)
    for query in ["laminar flow flat plate", "case 7", "only"]:
        alpha = tantivy_index.search(query, 100, "alpha")
        assert "s:only-beta:0" not in ids(alpha)
        assert len(alpha) <= 30
    assert tantivy_index.search("laminar", 100, "gamma") == []
    tantivy_index.delete("beta", ["s:d:3"])  # same chunk id in alpha must survive
    assert "s:d:3" in ids(tantivy_index.search("case 3", 100, "alpha"))
    assert (tantivy_index.count("alpha"), tantivy_index.count("beta")) == (30, 30)


def test_score_is_plain_bm25(tantivy_index: EmbeddedBm25, make_chunk: MakeChunk) -> None:
    """One doc, one term: idf = ln(1 + 0.5 / 1.5), tf part = 1; the tenant clause adds 0."""
    tantivy_index.upsert([make_chunk("t1", "s:a:0", "heat flux")])
    assert tantivy_index.search("heat", 1, "t1")[0].score == pytest.approx(
        math.log(4 / 3), rel=1e-5
    )


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


@pytest.mark.parametrize(
    ("query", "top_k", "tenant"),
    [(None, 5, "t1"), ("x", 0, "t1"), ("x", True, "t1"), ("x", 10_001, "t1"), ("x", 5, "T 1")],
)
def test_bad_search_is_rejected(
    tantivy_index: EmbeddedBm25, query: object, top_k: object, tenant: str
) -> None:
    with pytest.raises(InvalidInput):
        tantivy_index.search(query, top_k, tenant)


def test_bad_batch_changes_nothing(tantivy_index: EmbeddedBm25, make_chunk: MakeChunk) -> None:
    tantivy_index.upsert([make_chunk("t1", "s:a:0", "original")])
    bad = Chunk("Bad Tenant", "s:b:0", "s", "b", 0, "", "text", "h")
    with pytest.raises(InvalidInput, match="tenant_id"):
        tantivy_index.upsert([make_chunk("t1", "s:a:0", "replacement"), bad])
    with pytest.raises(InvalidInput):
        tantivy_index.upsert([make_chunk("t1", "", "empty id")])
    with pytest.raises(InvalidInput, match="single string"):
        tantivy_index.delete("t1", "s:a:0")
    assert ids(tantivy_index.search("original", 5, "t1")) == ["s:a:0"]
    assert tantivy_index.count("t1") == 1


def test_query_without_tokens_returns_nothing(
    tantivy_index: EmbeddedBm25, make_chunk: MakeChunk
) -> None:
    tantivy_index.upsert([make_chunk("t1", "s:a:0", "anything")])
    assert tantivy_index.search("  ?!-- ", 5, "t1") == []


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


def test_chunk_without_terms_is_not_indexed(
    tantivy_index: EmbeddedBm25, make_chunk: MakeChunk
) -> None:
    tantivy_index.upsert([make_chunk("t1", "s:a:0", "vortex sheet")])
    tantivy_index.upsert([make_chunk("t1", "s:a:0", " -- ... "), make_chunk("t1", "s:a:1", "?")])
    assert tantivy_index.search("vortex", 5, "t1") == []
    assert tantivy_index.count("t1") == 0
