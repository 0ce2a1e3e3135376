"""The query path in one process: embed, search both legs, fuse by rank, rerank, fetch chunks.

Every component is injected (Haystack style), so the same class runs inside a Serve Router
replica (with co-located shards, or with handles to remote ones) and in the CLI's in-process
engine, which is the latency floor the HTTP path is compared against.

The BM25 leg does not need the query vector: given an executor (`leg_executor`), a hybrid
search runs it there while the calling thread embeds the query and searches the dense leg
(FAISS, tantivy and ONNX Runtime release the GIL). Each leg's stages keep their own timings;
`legs_wall` is the wall time of the two overlapped legs, which is what they add to a search.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Executor, Future
from concurrent.futures import wait as wait_for
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal, Protocol

from ragindex.config import FusionSpec, LexicalSpec, RerankerSpec, RocchioSpec
from ragindex.errors import BackendUnavailable, InvalidInput, NotConfigured
from ragindex.feedback import rocchio
from ragindex.filters import Filter, TermExpr, compile_access, matches
from ragindex.fusion import reciprocal_rank_fusion
from ragindex.passages import passage_text
from ragindex.protocols import DenseIndex, Embedder, LexicalIndex, Reranker, Vectors
from ragindex.router.documents import SEARCH_DEPTH, Paged, sort_key
from ragindex.telemetry import stage_span
from ragindex.types import Chunk, Hit, ScoredId, refuse_surrogates, validate_tenant

Mode = Literal["hybrid", "dense", "lexical"]
MODES: tuple[str, ...] = ("hybrid", "dense", "lexical")
MAX_QUERY_CHARS = 4096
MAX_K = 100
# The stages that a hybrid search with a `leg_executor` runs side by side; `legs_wall`
# replaces their sum in the search's own time (`engine_ms`).
LEG_STAGES = ("embed", "dense", "rocchio", "lexical")
LEGS_WALL = "legs_wall"


class ChunkLookup(Protocol):
    def get_chunks(self, tenant_id: str, chunk_ids: Sequence[str]) -> dict[str, Chunk]: ...


@dataclass(frozen=True)
class Access:
    """Who reads (`principals`: None is the operator, whom no ACL limits) and what they ask."""

    principals: frozenset[str] | None = None
    filter: Filter | None = None

    def expression(self) -> TermExpr | None:
        return compile_access(self.filter, self.principals)

    def allows(self, chunk: Chunk) -> bool:
        return matches(chunk, self.filter, self.principals)


@dataclass
class SearchResult:
    hits: list[Hit]
    timings_ms: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    # The hits this page and the earlier ones returned, when this page is full and the
    # search's depth not reached; None when it ends the results.
    next_paged: Paged | None = None
    # The remote calls' round trips and the replicas' shares of them (`<hop>.<part>`, e.g.
    # `dense.shard0.queued`), and the wait for the Router's search thread: empty in-process.
    hops_ms: dict[str, float] = field(default_factory=dict)


def engine_ms(timings_ms: dict[str, float]) -> float:
    """The wall time of the engine's stages: their sum, with overlapped legs counted once."""
    if LEGS_WALL not in timings_ms:
        return sum(timings_ms.values())
    return timings_ms[LEGS_WALL] + sum(
        ms for stage, ms in timings_ms.items() if stage not in LEG_STAGES and stage != LEGS_WALL
    )


@dataclass(frozen=True)
class _LexicalOutcome:
    """The BM25 leg's hits, or the BackendUnavailable it raised, and how long it took."""

    hits: list[ScoredId]
    unavailable: BackendUnavailable | None
    ms: float


def validate_search(query: object, k: object, mode: object) -> tuple[str, int, Mode]:
    """Check a search request; raise InvalidInput naming what is wrong."""
    if not isinstance(query, str) or not query.strip():
        raise InvalidInput("query must be a non-empty string")
    refuse_surrogates("query", query)
    if len(query) > MAX_QUERY_CHARS:
        raise InvalidInput(
            f"query has {len(query)} characters, more than the limit of {MAX_QUERY_CHARS}"
        )
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise InvalidInput(f"k must be an integer in 1..{MAX_K}, got {k!r}")
    if mode not in MODES:
        raise InvalidInput(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    return query, k, mode  # type: ignore[return-value]


class QueryEngine:
    def __init__(
        self,
        embedder: Embedder,
        dense: DenseIndex,
        lexical: LexicalIndex,
        chunks: ChunkLookup,
        fusion: FusionSpec,
        lexical_spec: LexicalSpec,
        reranker: Reranker | None = None,
        reranker_spec: RerankerSpec | None = None,
        rocchio: RocchioSpec | None = None,
        leg_executor: Executor | None = None,
    ) -> None:
        """`leg_executor`: where a hybrid search runs its BM25 leg while the calling thread runs the
        dense leg; None runs them one after the other. Its tasks never wait on each other."""
        self.leg_executor = leg_executor
        self.embedder = embedder
        self.dense = dense
        self.lexical = lexical
        self.chunks = chunks
        self.fusion = fusion
        self.lexical_spec = lexical_spec
        self.reranker = reranker
        self.reranker_spec = reranker_spec or RerankerSpec()
        self.rocchio = rocchio or RocchioSpec()

    def search(
        self,
        tenant_id: str,
        query: str,
        k: int | None = None,
        mode: str = "hybrid",
        rerank: bool | None = None,
        access: Access | None = None,
        paged: Paged | None = None,
    ) -> SearchResult:
        """Hybrid (or single-leg) search for one tenant; the tenant filter, the caller's
        principals and the request's filter are inside each leg (`access`).

        Hits are ordered by (score descending, chunk id ascending); `paged` (a search
        cursor's hits of earlier pages) returns the best hits not among them, each leg asked
        that much deeper. Pages run SEARCH_DEPTH hits deep at most (reranked: through the
        reranker's pool)."""
        tenant_id = validate_tenant(tenant_id)
        query, k, checked_mode = validate_search(query, self.fusion.top_k if k is None else k, mode)
        use_rerank = self.reranker is not None if rerank is None else rerank
        if use_rerank and self.reranker is None:
            raise NotConfigured("rerank was requested but this index has no reranker configured")

        result = SearchResult(hits=[])
        paged = paged or Paged()
        k = min(k, SEARCH_DEPTH - len(paged))
        if k <= 0:
            return result
        timings = result.timings_ms
        candidates = max(self.fusion.candidates, k + len(paged))
        pool_size = self.reranker_spec.top_n if use_rerank else k
        paging = bool(paged) and not use_rerank  # one total order: score, then chunk id
        # Each leg sends the chunks of as many top hits as the fused pool takes (a replica
        # that holds chunks: the cluster's), so the pool is seldom fetched from the shards.
        carry = pool_size + len(paged) if paging else pool_size
        legs: dict[str, list[str]] = {}
        dense_hits: list[ScoredId] = []
        carried: dict[str, Chunk] = {}  # the chunks that came with the legs' hits
        access = access or Access()
        expr = access.expression()

        lexical_job: Future[_LexicalOutcome] | None = None
        overlapped_since = time.perf_counter()
        if checked_mode == "hybrid" and self.leg_executor is not None:
            lexical_job = self.leg_executor.submit(  # in this search's context (its hop log)
                contextvars.copy_context().run,
                self._lexical_leg,
                query,
                candidates,
                tenant_id,
                expr,
                carry,
            )
        if checked_mode in ("hybrid", "dense"):
            try:
                dense_hits = self._dense_leg(tenant_id, query, candidates, expr, timings, carry)
                legs["dense"] = [h.chunk_id for h in dense_hits]
            except BaseException:
                if lexical_job is not None:  # no BM25 search outlives the one that asked it
                    wait_for([lexical_job])
                raise
        if checked_mode in ("hybrid", "lexical"):
            wall_ms: float | None = None
            if lexical_job is not None:
                lexical = lexical_job.result()
                wall_ms = _ms_since(overlapped_since)
            else:
                lexical = self._lexical_leg(query, candidates, tenant_id, expr, carry)
            timings["lexical"] = lexical.ms
            if wall_ms is not None:
                timings[LEGS_WALL] = wall_ms
            if lexical.unavailable is not None:
                if checked_mode == "lexical" or self.lexical_spec.on_unavailable == "error":
                    raise lexical.unavailable
                result.warnings.append(
                    f"lexical leg unavailable, dense-only result: {lexical.unavailable}"
                )
            else:
                legs["lexical"] = [h.chunk_id for h in lexical.hits]
                carried.update(chunks_of(lexical.hits))
        carried.update(chunks_of(dense_hits))  # last: the shards are where a fetch would read

        with _timed(timings, "fusion"):
            weights = {"dense": self.fusion.dense_weight, "lexical": self.fusion.lexical_weight}
            if len(legs) == 1:  # one leg alone keeps its own order, whatever its weight
                weights = {}
            # reranked pages are cut after the reranker's order, below
            pool = reciprocal_rank_fusion(
                legs,
                k=self.fusion.rrf_k,
                weights=weights,
                top=None if paging else pool_size,
            )
            if paging:
                pool = [f for f in pool if f.chunk_id not in paged][:pool_size]
        with _timed(timings, "fetch"):
            found = self._chunks(tenant_id, [f.chunk_id for f in pool], carried)
        # A chunk deleted, or re-written with another ACL or metadata, between the leg search
        # and the fetch is simply not returned; one that came with a leg's hit is as that
        # leg's replica held it when it searched, and is checked against `access` again here.
        hits = [
            Hit(found[f.chunk_id], f.score, f.ranks)
            for f in pool
            if f.chunk_id in found and access.allows(found[f.chunk_id])
        ]

        if use_rerank and self.reranker is not None and hits:
            with _timed(timings, "rerank"):
                scores = self.reranker.score(query, [h.chunk.text for h in hits])
            for fused_rank, (hit, score) in enumerate(zip(hits, scores, strict=True), start=1):
                hit.ranks["fused"] = fused_rank
                hit.score = float(score)
            hits.sort(key=lambda h: sort_key(h.score, h.chunk.chunk_id))
            hits = [h for h in hits if h.chunk.chunk_id not in paged]
        result.hits = hits[:k]
        if len(result.hits) == k and len(paged) + k < SEARCH_DEPTH:
            result.next_paged = paged.adding(h.chunk.chunk_id for h in result.hits)
        return result

    def _dense_leg(
        self,
        tenant_id: str,
        query: str,
        candidates: int,
        expr: TermExpr | None,
        timings: dict[str, float],
        carry: int,
    ) -> list[ScoredId]:
        """Embed the query and search the dense leg (and Rocchio's second search); the first
        `carry` hits come with their chunks where the index holds them."""
        with _timed(timings, "embed"):
            vector = self.embedder.embed_queries([query])
        with _timed(timings, "dense"):
            dense_hits = self.dense.search(
                vector, candidates, tenant_id, self.embedder.identity, expr, with_chunks=carry
            )
        if self.rocchio.enabled and dense_hits:
            with _timed(timings, "rocchio"):
                dense_hits = self._rocchio_search(
                    tenant_id, vector, dense_hits, candidates, expr, carry
                )
        return dense_hits

    def _chunks(
        self, tenant_id: str, chunk_ids: Sequence[str], carried: dict[str, Chunk]
    ) -> dict[str, Chunk]:
        """The chunks of `chunk_ids` that the legs carried, and the rest fetched from the
        shards (one call, and none when the legs carried them all)."""
        found = {cid: carried[cid] for cid in chunk_ids if cid in carried}
        missing = [cid for cid in chunk_ids if cid not in found]
        if missing:
            found.update(self.chunks.get_chunks(tenant_id, missing))
        return found

    def _lexical_leg(
        self, query: str, candidates: int, tenant_id: str, expr: TermExpr | None, carry: int
    ) -> _LexicalOutcome:
        """Search the BM25 leg; BackendUnavailable is returned for the caller to decide on
        (dense-only or an error), anything else raises."""
        start = time.perf_counter()
        try:
            with stage_span("lexical"):
                hits = self.lexical.search(query, candidates, tenant_id, expr, with_chunks=carry)
        except BackendUnavailable as err:
            return _LexicalOutcome([], err, _ms_since(start))
        return _LexicalOutcome(hits, None, _ms_since(start))

    def _rocchio_search(
        self,
        tenant_id: str,
        vector: Vectors,
        hits: list[ScoredId],
        candidates: int,
        expr: TermExpr | None,
        carry: int,
    ) -> list[ScoredId]:
        """Search the dense leg again with the query moved towards its top hits (Rocchio).

        The hits' vectors are re-embedded from their stored text (the DenseIndex protocol
        returns ids, not vectors), as ingest embedded them: this costs one passage batch."""
        top = [h.chunk_id for h in hits[: self.rocchio.docs]]
        found = self._chunks(tenant_id, top, chunks_of(hits))
        texts = [passage_text(found[cid]) for cid in top if cid in found]
        if not texts:
            return hits
        moved = rocchio(
            vector, self.embedder.embed_passages(texts), self.rocchio.alpha, self.rocchio.beta
        )
        return self.dense.search(
            moved, candidates, tenant_id, self.embedder.identity, expr, with_chunks=carry
        )


def chunks_of(hits: list[ScoredId]) -> dict[str, Chunk]:
    """The chunks that came with `hits` (ScoredId.chunk), by id."""
    return {h.chunk_id: h.chunk for h in hits if h.chunk is not None}


def _ms_since(start: float) -> float:
    return round((time.perf_counter() - start) * 1000, 3)


@contextmanager
def _timed(timings: dict[str, float], stage: str) -> Iterator[None]:
    """Time one stage into `timings`, and trace it as a child of the request's span."""
    start = time.perf_counter()
    try:
        with stage_span(stage):
            yield
    finally:
        timings[stage] = _ms_since(start)
