"""Context assembly: ranked hits -> deduplicated chunks grouped under numbered sources.

Overlapping windows of one document often both rank; sending both wastes the budget and
makes the model cite either at random, so near-duplicates (by word-shingle containment) are
collapsed into the better-ranked one. Chunks are grouped by document so a citation [n] names a
document the reader can open; ids follow the rank of each document's best hit, so the same
hits always get the same ids. Parent-child hits show their parent section (Chunk.context),
since the parent is what answers and the child is only what matched. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ragindex.errors import InvalidInput
from ragindex.types import Hit

DEFAULT_MAX_CHUNKS = 8
DEFAULT_MAX_TOKENS = 3000
DEFAULT_DUPLICATE_THRESHOLD = 0.8
SHINGLE = 3

_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class ContextChunk:
    chunk_id: str
    n: int
    text: str  # the matched chunk
    parent: str | None  # its parent section, for parent-child chunking
    rank: int  # 1-based rank of the hit
    score: float
    merged: tuple[str, ...] = ()  # chunk ids collapsed into this one as near-duplicates

    @property
    def display_text(self) -> str:
        """What the model reads: the parent section when there is one, else the chunk."""
        return self.parent if self.parent else self.text


@dataclass(frozen=True)
class ContextSource:
    sid: int  # the bracketed id: [sid]
    source: str
    doc_id: str
    title: str
    updated: str | None
    chunks: tuple[ContextChunk, ...]  # in document order

    @property
    def label(self) -> str:
        return f"[{self.sid}]"


@dataclass(frozen=True)
class AssembledContext:
    sources: tuple[ContextSource, ...]
    tokens: int
    duplicates: dict[str, str]  # dropped chunk id -> the kept chunk id it duplicates
    over_budget: tuple[str, ...]  # chunk ids left out by the token or chunk budget

    def source(self, sid: int) -> ContextSource | None:
        for src in self.sources:
            if src.sid == sid:
                return src
        return None

    def chunk_ids(self) -> list[str]:
        return [c.chunk_id for s in self.sources for c in s.chunks]

    def source_of_chunk(self, chunk_id: str) -> ContextSource | None:
        for src in self.sources:
            if any(c.chunk_id == chunk_id for c in src.chunks):
                return src
        return None

    @property
    def empty(self) -> bool:
        return not self.sources


def shingles(text: str, size: int = SHINGLE) -> frozenset[tuple[str, ...]]:
    """Word n-grams of a lower-cased text (the whole text when it is shorter than n)."""
    words = _WORD.findall(text.lower())
    if len(words) < size:
        return frozenset({tuple(words)}) if words else frozenset()
    return frozenset(tuple(words[i : i + size]) for i in range(len(words) - size + 1))


def containment(a: frozenset[tuple[str, ...]], b: frozenset[tuple[str, ...]]) -> float:
    """|a & b| / min(|a|, |b|): 1.0 when one text is inside the other, as with window overlap."""
    if not a or not b:
        return 0.0
    return len(a & b) / min(len(a), len(b))


def assemble_context(
    hits: Sequence[Hit],
    count_tokens: Callable[[str], int],
    *,
    max_chunks: int = DEFAULT_MAX_CHUNKS,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    duplicate_threshold: float = DEFAULT_DUPLICATE_THRESHOLD,
) -> AssembledContext:
    """Collapse near-duplicates, keep the best hits within the budget, group them by document.

    Hits are taken in the given (reranked) order; a chunk that would overflow `max_tokens` is
    skipped and a later, shorter one may still fit.
    """
    if max_chunks < 1:
        raise InvalidInput(f"max_chunks must be >= 1, got {max_chunks}")
    if max_tokens < 1:
        raise InvalidInput(f"max_tokens must be >= 1, got {max_tokens}")
    if not 0.0 < duplicate_threshold <= 1.0:
        raise InvalidInput(f"duplicate_threshold must be in (0, 1], got {duplicate_threshold}")

    kept: list[tuple[Hit, int, frozenset[tuple[str, ...]]]] = []
    merged: dict[str, list[str]] = {}
    duplicates: dict[str, str] = {}
    over_budget: list[str] = []
    seen_ids: set[str] = set()
    tokens = 0
    for rank, hit in enumerate(hits, start=1):
        chunk = hit.chunk
        if chunk.chunk_id in seen_ids:
            continue
        seen_ids.add(chunk.chunk_id)
        text = chunk.context or chunk.text
        sh = shingles(text)
        twin = next((k for k, _, ksh in kept if containment(sh, ksh) >= duplicate_threshold), None)
        if twin is not None:
            duplicates[chunk.chunk_id] = twin.chunk.chunk_id
            merged.setdefault(twin.chunk.chunk_id, []).append(chunk.chunk_id)
            continue
        cost = count_tokens(text)
        if len(kept) >= max_chunks or tokens + cost > max_tokens:
            over_budget.append(chunk.chunk_id)
            continue
        kept.append((hit, rank, sh))
        tokens += cost

    order: list[tuple[str, str]] = []
    groups: dict[tuple[str, str], list[ContextChunk]] = {}
    meta: dict[tuple[str, str], Hit] = {}
    for hit, rank, _ in kept:
        c = hit.chunk
        key = (c.source, c.doc_id)
        if key not in groups:
            order.append(key)
            groups[key] = []
            meta[key] = hit
        groups[key].append(
            ContextChunk(
                chunk_id=c.chunk_id,
                n=c.n,
                text=c.text,
                parent=c.context,
                rank=rank,
                score=hit.score,
                merged=tuple(merged.get(c.chunk_id, ())),
            )
        )
    sources = tuple(
        ContextSource(
            sid=sid,
            source=key[0],
            doc_id=key[1],
            title=meta[key].chunk.title,
            updated=meta[key].chunk.updated,
            chunks=tuple(sorted(groups[key], key=lambda ch: (ch.n, ch.chunk_id))),
        )
        for sid, key in enumerate(order, start=1)
    )
    return AssembledContext(sources, tokens, duplicates, tuple(over_budget))
