"""The query engine's legs: a hybrid search with a leg executor runs its BM25 leg beside the
dense leg, keeps each stage's timing and the overlapped legs' wall time, and treats a BM25
leg that fails exactly as a sequential search does.

Real parts throughout (the embedded data plane: ONNX MiniLM, the file log and ingest worker,
FAISS shard replicas, the tantivy view); the only mocks inject faults into a leg: a wait for
the other leg, or an error.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from ragindex.app import EmbeddedIndex
from ragindex.config import LexicalSpec, RagIndexSpec
from ragindex.errors import BackendUnavailable, IdentityMismatch
from ragindex.filters import TermExpr, parse_filter
from ragindex.protocols import DenseIndex, LexicalIndex, Vectors
from ragindex.router import Access, Paged, QueryEngine, engine_ms
from ragindex.router.documents import SEARCH_DEPTH
from ragindex.router.query import LEG_STAGES, LEGS_WALL
from ragindex.types import Chunk, Document, ModelIdentity, ScoredId

TENANT = "acme"
QUERY = "flutter of thin panels"
MEETS_S = 30.0  # generous: the other leg starts within milliseconds when the legs overlap
TOPICS = [
    "boundary layer transition on a swept wing at supersonic speed",
    "heat transfer to a blunt body in hypersonic flow",
    "flutter of thin panels exposed to airflow",
    "pressure distribution over a slender cone at incidence",
    "buckling of cylindrical shells under axial compression",
]


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedIndex]:
    spec = RagIndexSpec.model_validate({"dense": {"shards": 2}})
    engine = EmbeddedIndex(Path(tmp_path_factory.mktemp("legs")), spec)
    docs = [
        Document("papers", f"d{n}", t, f"{t}. Measured in a wind tunnel.")
        for n, t in enumerate(TOPICS)
    ]
    engine.upsert(TENANT, docs)
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(2, thread_name_prefix="test-legs") as executor:
        yield executor


class Lexical:
    """The real BM25 index; says when a search started, and may then raise `fault`."""

    def __init__(self, inner: LexicalIndex, fault: BaseException | None = None) -> None:
        self.inner = inner
        self.fault = fault
        self.started = threading.Event()
        self.finished = threading.Event()

    def search(
        self,
        query: str,
        top_k: int,
        tenant_id: str,
        access: TermExpr | None = None,
        *,
        with_chunks: int = 0,
    ) -> list[ScoredId]:
        self.started.set()
        try:
            if self.fault is not None:
                raise self.fault
            return self.inner.search(query, top_k, tenant_id, access, with_chunks=with_chunks)
        finally:
            self.finished.set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class DenseWaitingForLexical:
    """The real dense index, whose search first waits for the BM25 leg to have started: it
    only returns promptly if the two legs run at the same time. Then it may raise `fault`."""

    def __init__(
        self, inner: DenseIndex, lexical: Lexical, fault: BaseException | None = None
    ) -> None:
        self.inner = inner
        self.lexical = lexical
        self.fault = fault
        self.met_lexical: bool | None = None

    def search(
        self,
        query_vector: Vectors,
        top_k: int,
        tenant_id: str,
        identity: ModelIdentity,
        access: TermExpr | None = None,
        *,
        with_chunks: int = 0,
    ) -> list[ScoredId]:
        self.met_lexical = self.lexical.started.wait(MEETS_S)
        if self.fault is not None:
            raise self.fault
        return self.inner.search(
            query_vector, top_k, tenant_id, identity, access, with_chunks=with_chunks
        )

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def query_engine(
    engine: EmbeddedIndex,
    lexical: LexicalIndex,
    dense: DenseIndex | None = None,
    executor: ThreadPoolExecutor | None = None,
    on_unavailable: str = "error",
) -> QueryEngine:
    return QueryEngine(
        engine.embedder,
        dense or engine.dense,
        lexical,
        engine.dense,
        fusion=engine.spec.fusion,
        lexical_spec=LexicalSpec.model_validate({"onUnavailable": on_unavailable}),
        leg_executor=executor,
    )


def ids(hits: Sequence[Any]) -> list[str]:
    return [h.chunk.chunk_id for h in hits]


def test_the_lexical_leg_runs_while_the_dense_leg_searches(
    engine: EmbeddedIndex, pool: ThreadPoolExecutor
) -> None:
    lexical = Lexical(engine.lexical)
    dense = DenseWaitingForLexical(engine.dense, lexical)
    result = query_engine(engine, lexical, dense, pool).search(TENANT, QUERY, k=5)
    assert dense.met_lexical, "the dense leg searched before the BM25 leg had started"
    assert ids(result.hits) == ids(engine.query.search(TENANT, QUERY, k=5).hits)
    timings = result.timings_ms
    assert list(timings) == ["embed", "dense", "lexical", LEGS_WALL, "fusion", "fetch"]
    # the overlapped legs' wall time spans each leg, and counts once in the engine's time
    assert timings[LEGS_WALL] >= max(timings["lexical"], timings["embed"] + timings["dense"])
    assert engine_ms(timings) == pytest.approx(
        timings[LEGS_WALL] + timings["fusion"] + timings["fetch"]
    )


class Carrying:
    """A real leg whose hits carry no chunk beyond the first `n` (0: a backend that holds
    none, such as Elasticsearch), whatever the engine asked for."""

    def __init__(self, inner: Any, n: int) -> None:
        self.inner, self.n = inner, n
        self.carried: set[str] = set()

    def search(self, *args: Any, with_chunks: int = 0) -> list[ScoredId]:
        hits = self.inner.search(*args, with_chunks=min(with_chunks, self.n))
        self.carried |= {h.chunk_id for h in hits if h.chunk is not None}
        return list(hits)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class Fetches:
    """The shards' chunk lookup, recording which ids a search asked it for."""

    def __init__(self, engine: EmbeddedIndex) -> None:
        self.engine = engine
        self.asked: list[str] = []

    def get_chunks(self, tenant_id: str, chunk_ids: Sequence[str]) -> dict[str, Chunk]:
        self.asked += chunk_ids
        return self.engine.dense.get_chunks(tenant_id, chunk_ids)


@pytest.mark.parametrize(("dense_carries", "lexical_carries"), [(5, 5), (0, 5), (0, 0), (1, 1)])
def test_hits_whose_chunks_came_with_a_leg_are_not_fetched(
    engine: EmbeddedIndex, pool: ThreadPoolExecutor, dense_carries: int, lexical_carries: int
) -> None:
    dense = Carrying(engine.dense, dense_carries)
    lexical = Carrying(engine.lexical, lexical_carries)
    fetches = Fetches(engine)
    searched = QueryEngine(
        engine.embedder,
        dense,
        lexical,
        fetches,
        fusion=engine.spec.fusion,
        lexical_spec=engine.spec.lexical,
        leg_executor=pool,
    ).search(TENANT, QUERY, k=5)
    expected = engine.query.search(TENANT, QUERY, k=5)
    assert [(h.chunk, h.score) for h in searched.hits] == [
        (h.chunk, h.score) for h in expected.hits
    ]
    # every shard replica and the tantivy view carry the top hits (5 = the pool)
    assert len(dense.carried) == dense_carries and len(lexical.carried) == min(lexical_carries, 2)
    carried = dense.carried | lexical.carried
    assert fetches.asked == [cid for cid in ids(searched.hits) if cid not in carried]


def test_without_an_executor_the_legs_run_in_turn_and_sum(engine: EmbeddedIndex) -> None:
    timings = query_engine(engine, engine.lexical).search(TENANT, QUERY, k=5).timings_ms
    assert LEGS_WALL not in timings and set(LEG_STAGES) - {"rocchio"} <= set(timings)
    assert engine_ms(timings) == pytest.approx(sum(timings.values()))


def test_single_leg_modes_use_no_executor(engine: EmbeddedIndex, pool: ThreadPoolExecutor) -> None:
    lexical = Lexical(engine.lexical)
    qe = query_engine(engine, lexical, executor=pool)
    for mode in ("dense", "lexical"):
        result = qe.search(TENANT, QUERY, k=5, mode=mode)
        assert result.hits and LEGS_WALL not in result.timings_ms
    assert lexical.started.is_set()  # by the lexical mode, on this thread


@pytest.mark.parametrize("overlapped", [False, True])
def test_an_unavailable_lexical_leg_degrades_to_dense_only_with_a_warning(
    engine: EmbeddedIndex, pool: ThreadPoolExecutor, overlapped: bool
) -> None:
    lexical = Lexical(engine.lexical, BackendUnavailable("BM25 backend timed out"))
    executor = pool if overlapped else None
    result = query_engine(engine, lexical, None, executor, "dense-only").search(TENANT, QUERY, 5)
    dense_only = engine.query.search(TENANT, QUERY, k=5, mode="dense")
    assert ids(result.hits) == ids(dense_only.hits)
    assert result.warnings == ["lexical leg unavailable, dense-only result: BM25 backend timed out"]
    assert "lexical" in result.timings_ms and (LEGS_WALL in result.timings_ms) is overlapped


@pytest.mark.parametrize("overlapped", [False, True])
def test_an_unavailable_lexical_leg_fails_the_search_when_asked_to(
    engine: EmbeddedIndex, pool: ThreadPoolExecutor, overlapped: bool
) -> None:
    executor = pool if overlapped else None
    down = Lexical(engine.lexical, BackendUnavailable("BM25 backend timed out"))
    with pytest.raises(BackendUnavailable, match="timed out"):
        query_engine(engine, down, None, executor, "error").search(TENANT, QUERY, k=5)
    # lexical-only cannot degrade, whatever onUnavailable says
    with pytest.raises(BackendUnavailable, match="timed out"):
        query_engine(engine, down, None, executor, "dense-only").search(
            TENANT, QUERY, k=5, mode="lexical"
        )
    broken = Lexical(engine.lexical, RuntimeError("index corrupt"))
    with pytest.raises(RuntimeError, match="index corrupt"):  # not degraded: a bug surfaces
        query_engine(engine, broken, None, executor, "dense-only").search(TENANT, QUERY, k=5)


def test_a_failing_dense_leg_fails_the_search_after_the_lexical_leg_ended(
    engine: EmbeddedIndex, pool: ThreadPoolExecutor
) -> None:
    lexical = Lexical(engine.lexical)
    wrong = IdentityMismatch("query uses another embedding model identity")
    dense = DenseWaitingForLexical(engine.dense, lexical, wrong)
    with pytest.raises(IdentityMismatch):
        query_engine(engine, lexical, dense, pool, "dense-only").search(TENANT, QUERY, k=5)
    assert dense.met_lexical
    assert lexical.finished.is_set()  # no BM25 search outlives the search that asked for it


def test_pages_after_a_cursor_follow_the_whole_results_order(engine: EmbeddedIndex) -> None:
    """The engine's hits are in one total order (score desc, chunk id), and `paged` pages
    through it: pages of 2 give the whole result, each saying which hits were returned."""
    for mode in ("hybrid", "dense", "lexical"):
        whole = engine.query.search(TENANT, QUERY, k=len(TOPICS), mode=mode)
        expected = [(h.score, h.chunk.chunk_id) for h in whole.hits]
        assert expected == sorted(expected, key=lambda h: (-h[0], h[1])) and expected
        pages: list[tuple[float, str]] = []
        paged = None
        while True:
            page = engine.query.search(TENANT, QUERY, k=2, mode=mode, paged=paged)
            pages += [(h.score, h.chunk.chunk_id) for h in page.hits]
            if page.next_paged is None:
                assert len(page.hits) < 2
                break
            assert all(c in page.next_paged for _, c in pages) and len(page.next_paged) == len(
                pages
            )
            paged = page.next_paged
        assert pages == expected, mode


def test_a_search_pages_no_deeper_than_its_depth(engine: EmbeddedIndex) -> None:
    """Past SEARCH_DEPTH paged hits a search returns nothing more, and the page that reaches
    the depth names no next page."""
    one_short = Paged(frozenset(n.to_bytes(6, "big") for n in range(SEARCH_DEPTH - 1)))
    last = engine.query.search(TENANT, QUERY, k=5, paged=one_short)
    assert len(last.hits) == 1 and last.next_paged is None
    deep = Paged(frozenset(n.to_bytes(6, "big") for n in range(SEARCH_DEPTH)))
    beyond = engine.query.search(TENANT, QUERY, k=5, paged=deep)
    assert beyond.hits == [] and beyond.next_paged is None


def test_the_local_views_read_a_document_back_and_summarize_the_tenant(
    engine: EmbeddedIndex,
) -> None:
    chunks = engine.side.document(TENANT, "papers", "d2", Access(principals=frozenset()))
    assert chunks and {c.doc_id for c in chunks} == {"d2"} and chunks[0].title == TOPICS[2]
    assert engine.side.document(TENANT, "papers", "d2", Access(principals=frozenset())) == chunks
    assert engine.side.document("other", "papers", "d2", Access()) == []
    summaries = engine.side.document_summaries(TENANT, Access())
    assert set(summaries) == {("papers", f"d{n}") for n in range(len(TOPICS))}
    assert summaries[("papers", "d2")][0] == len(chunks)
    papers = Access(filter=parse_filter({"field": "source", "eq": "papers"}))
    assert set(engine.side.document_summaries(TENANT, papers)) == set(summaries)
    none = Access(filter=parse_filter({"field": "source", "eq": "elsewhere"}))
    assert engine.side.document_summaries(TENANT, none) == {}
