"""Answers: search, assemble context, refuse or generate, then keep only grounded sentences.

The promise is "grounded or silent". Before any generation, the retrieval support for the
question is measured (MiniLM cosine between the question and the best chunks, or the share of
question words the best chunk holds) and a question below the calibrated threshold is refused
without calling the model. After generation, each sentence is checked against the source it
cites; unsupported and uncited sentences are reported and removed, and an answer left with no
supported sentence becomes a refusal. Citations are the chunks that support the kept
sentences, never what the model claims, so text planted in a source cannot choose them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Annotated, Literal, Protocol

import numpy as np
from pydantic import BaseModel, BeforeValidator, Field, Strict

from ragindex.errors import InvalidInput
from ragindex.protocols import Embedder
from ragindex.router.access import ReadScope
from ragindex.router.context import (
    DEFAULT_MAX_CHUNKS,
    DEFAULT_MAX_TOKENS,
    AssembledContext,
    ContextChunk,
    assemble_context,
)
from ragindex.router.generators import Generator
from ragindex.router.grounding import (
    DEFAULT_SUPPORT_THRESHOLD,
    GroundingReport,
    check_answer,
    content_terms,
    coverage,
)
from ragindex.router.prompt import NO_ANSWER, FlaggedChunk, flag_chunks
from ragindex.router.query import MAX_K, MAX_QUERY_CHARS, Access, SearchResult, validate_search
from ragindex.types import VISIBLE_PATTERN

SupportSignal = Literal["dense", "lexical"]

REFUSAL_THRESHOLDS: dict[str, float] = {"dense": 0.427, "lexical": 0.406}
"""Calibrated (Youden's J, ragindex.measure.evals.answer_eval.calibrate_threshold) on alternate
halves of the 225 Cranfield queries and of measure/evals/data/out_of_domain_questions.txt, over
a Cranfield index with the default spec (all-MiniLM-L6-v2, hybrid, k=8);
tests/measure/evals/measure_answers.py. On the held-out halves, dense refused 0 % of answerable and
100 % of out-of-domain questions; lexical 9.8 % and 92.9 %, so dense is the default whenever an
embedder is given."""

DENSE_SUPPORT_CHUNKS = 3
"""Best-ranked chunks embedded for the dense support signal (cost grows with each)."""


class Searcher(Protocol):
    def search(
        self,
        tenant_id: str,
        query: str,
        k: int | None = None,
        mode: str = "hybrid",
        rerank: bool | None = None,
        access: Access | None = None,
    ) -> SearchResult: ...


def _ranked_chunks(context: AssembledContext, exclude: Collection[str]) -> list[ContextChunk]:
    chunks = (ch for src in context.sources for ch in src.chunks if ch.chunk_id not in exclude)
    return sorted(chunks, key=lambda c: c.rank)


def lexical_support(
    question: str, context: AssembledContext, exclude: Collection[str] = ()
) -> float:
    """Largest share of the question's content words held by one chunk of the context."""
    terms = content_terms(question)
    return max(
        (
            coverage(terms, content_terms(ch.display_text))
            for ch in _ranked_chunks(context, exclude)
        ),
        default=0.0,
    )


def dense_support(
    question: str, context: AssembledContext, embedder: Embedder, exclude: Collection[str] = ()
) -> float:
    """Largest cosine between the question and the best-ranked chunks' texts.

    Chunks in `exclude` (flagged as instructions) are left out, so planted text that mimics
    the question cannot talk the service out of a refusal."""
    chunks = _ranked_chunks(context, exclude)
    texts = [ch.display_text for ch in chunks[:DENSE_SUPPORT_CHUNKS]]
    if not texts:
        return 0.0
    q = np.asarray(embedder.embed_queries([question]), dtype=np.float64)[0]
    p = np.asarray(embedder.embed_passages(texts), dtype=np.float64)
    sims = (p @ q) / (np.linalg.norm(p, axis=1) * np.linalg.norm(q) + 1e-12)
    return float(sims.max())


def is_no_answer(text: str) -> bool:
    """Did the generator say the sources hold no answer (the prompt's fixed reply)?"""
    norm = " ".join(text.lower().split()).strip(" .")
    return norm == NO_ANSWER.lower().strip(" .") or norm.startswith(NO_ANSWER.lower().strip(" ."))


@dataclass(frozen=True)
class SourceRef:
    id: int
    source: str
    doc_id: str
    title: str
    updated: str | None
    chunk_ids: list[str]


@dataclass
class Answer:
    question: str
    answer: str
    citations: list[str]  # chunk ids supporting the kept sentences
    sources: list[SourceRef]  # everything the generator was shown, by bracketed id
    refused: bool
    refusal_reason: str | None
    support: float  # the retrieval support signal the refusal decision used
    support_signal: str
    flagged_chunks: list[FlaggedChunk]
    unsupported_sentences: list[str]
    unverifiable_sentences: list[str]
    generator: str
    raw_answer: str = ""  # the generator's text before ungrounded sentences were removed
    grounding: GroundingReport | None = None
    timings_ms: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


class AnswerService:
    """Grounded answers over one query engine; every part injected."""

    def __init__(
        self,
        query_engine: Searcher,
        generator: Generator,
        count_tokens: Callable[[str], int],
        *,
        embedder: Embedder | None = None,
        support_signal: SupportSignal | None = None,
        refusal_threshold: float | None = None,
        grounding_threshold: float = DEFAULT_SUPPORT_THRESHOLD,
        max_chunks: int = DEFAULT_MAX_CHUNKS,
        max_context_tokens: int = DEFAULT_MAX_TOKENS,
        mode: str = "hybrid",
        rerank: bool | None = None,
    ) -> None:
        signal = support_signal or ("dense" if embedder is not None else "lexical")
        if signal not in REFUSAL_THRESHOLDS:
            raise InvalidInput(f"support_signal must be 'dense' or 'lexical', got {signal!r}")
        if signal == "dense" and embedder is None:
            raise InvalidInput("support_signal 'dense' needs an embedder")
        if not 0.0 < grounding_threshold <= 1.0:
            raise InvalidInput(f"grounding_threshold must be in (0, 1], got {grounding_threshold}")
        self.engine = query_engine
        self.generator = generator
        self.count_tokens = count_tokens
        self.embedder = embedder
        self.signal: SupportSignal = signal
        self.refusal_threshold = (
            REFUSAL_THRESHOLDS[signal] if refusal_threshold is None else refusal_threshold
        )
        self.grounding_threshold = grounding_threshold
        self.max_chunks = max_chunks
        self.max_context_tokens = max_context_tokens
        self.mode = mode
        self.rerank = rerank

    def support(
        self, question: str, context: AssembledContext, exclude: Collection[str] = ()
    ) -> float:
        if self.signal == "dense" and self.embedder is not None:
            return dense_support(question, context, self.embedder, exclude)
        return lexical_support(question, context, exclude)

    def answer(
        self,
        tenant_id: str,
        question: str,
        k: int = DEFAULT_MAX_CHUNKS,
        access: Access | None = None,
    ) -> Answer:
        """Answer from the chunks `access` allows only: they are all the search returns."""
        question, k, _ = validate_search(question, k, self.mode)
        timings: dict[str, float] = {}
        with _timed(timings, "total"):
            result = self.engine.search(tenant_id, question, k, self.mode, self.rerank, access)
            timings.update({f"search.{s}": ms for s, ms in result.timings_ms.items()})
            with _timed(timings, "assemble"):
                context = assemble_context(
                    result.hits,
                    self.count_tokens,
                    max_chunks=self.max_chunks,
                    max_tokens=self.max_context_tokens,
                )
                flagged = flag_chunks(context)
                flagged_ids = {f.chunk_id for f in flagged}
            with _timed(timings, "support"):
                support = self.support(question, context, flagged_ids)
            out = Answer(
                question=question,
                answer=NO_ANSWER,
                citations=[],
                sources=_source_refs(context),
                refused=True,
                refusal_reason=None,
                support=round(support, 4),
                support_signal=self.signal,
                flagged_chunks=flagged,
                unsupported_sentences=[],
                unverifiable_sentences=[],
                generator=self.generator.name,
                timings_ms=timings,
                warnings=list(result.warnings),
            )
            if context.empty:
                out.refusal_reason = "no source was retrieved for this question"
                return out
            if support < self.refusal_threshold:
                out.refusal_reason = (
                    f"retrieval support {support:.3f} ({self.signal}) is below the threshold"
                    f" {self.refusal_threshold}"
                )
                return out
            with _timed(timings, "generate"):
                raw = self.generator.generate(question, context)
            out.raw_answer = raw
            if is_no_answer(raw):
                out.refusal_reason = "the generator found no answer in the sources"
                return out
            with _timed(timings, "grounding"):
                report = check_answer(
                    raw,
                    context,
                    threshold=self.grounding_threshold,
                    excluded_chunks=flagged_ids,
                )
            out.grounding = report
            out.unsupported_sentences = [s.text for s in report.unsupported]
            out.unverifiable_sentences = [s.text for s in report.unverifiable]
            if not report.supported:
                out.refusal_reason = "no sentence of the generated answer is supported by a source"
                return out
            out.answer = " ".join(s.text for s in report.supported)
            out.citations = report.citations
            out.refused = False
        return out


def _source_refs(context: AssembledContext) -> list[SourceRef]:
    return [
        SourceRef(s.sid, s.source, s.doc_id, s.title, s.updated, [c.chunk_id for c in s.chunks])
        for s in context.sources
    ]


@contextmanager
def _timed(timings: dict[str, float], stage: str) -> Iterator[None]:
    start = time.perf_counter()
    try:
        yield
    finally:
        timings[stage] = round((time.perf_counter() - start) * 1000, 3)


def _whole_float(value: object) -> object:
    """JSON Schema counts 19.0 as an integer, so the API does too; 19.5 and "19" stay refused."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


Count = Annotated[int, Strict(), Field(ge=1, le=MAX_K), BeforeValidator(_whole_float)]
"""How many chunks or hits (1..MAX_K), an integer as JSON Schema means it (19.0 counts).
The bounds sit before the validator so that the schema states them as minimum/maximum."""


class AnswerRequest(ReadScope):
    """Body of POST /v1/answer; the tenant comes from the caller's credentials, not from here."""

    question: str = Field(min_length=1, max_length=MAX_QUERY_CHARS, pattern=VISIBLE_PATTERN)
    k: Count = DEFAULT_MAX_CHUNKS


class SourceModel(BaseModel):
    id: int
    source: str
    doc_id: str
    title: str
    updated: str | None
    chunk_ids: list[str]


class FlaggedChunkModel(BaseModel):
    chunk_id: str
    source_id: int
    reasons: list[str]


class AnswerResponse(BaseModel):
    answer: str
    citations: list[str]
    sources: list[SourceModel]
    refused: bool
    refusal_reason: str | None
    support: float
    support_signal: str
    flagged_chunks: list[FlaggedChunkModel]
    unsupported_sentences: list[str]
    unverifiable_sentences: list[str]
    generator: str
    timings_ms: dict[str, float]
    warnings: list[str]

    @classmethod
    def from_answer(cls, answer: Answer) -> AnswerResponse:
        return cls(
            answer=answer.answer,
            citations=answer.citations,
            sources=[SourceModel(**vars(s)) for s in answer.sources],
            refused=answer.refused,
            refusal_reason=answer.refusal_reason,
            support=answer.support,
            support_signal=answer.support_signal,
            flagged_chunks=[
                FlaggedChunkModel(
                    chunk_id=f.chunk_id, source_id=f.source_id, reasons=list(f.reasons)
                )
                for f in answer.flagged_chunks
            ],
            unsupported_sentences=answer.unsupported_sentences,
            unverifiable_sentences=answer.unverifiable_sentences,
            generator=answer.generator,
            timings_ms=answer.timings_ms,
            warnings=answer.warnings,
        )
