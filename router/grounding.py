"""Groundedness: is each answer sentence supported by the source it cites?

The check is lexical and says so: a sentence is supported when enough of its content words
(lower-cased, stop words removed, crudely stemmed) occur in one chunk of a source it cites. That
catches invented facts and wrong citations cheaply and deterministically; it cannot catch a
sentence that reuses the source's words to say something the source does not (no entailment
model ships offline). Sentences without a citation cannot be checked and count as unverifiable.
Everything here is pure.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal

from ragindex.router.context import AssembledContext

DEFAULT_SUPPORT_THRESHOLD = 0.6
"""Share of a sentence's content words that must occur in a cited chunk."""

STOPWORDS = frozenset(
    re.findall(
        r"\w+",
        """
    a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further
    had has have having he her here hers him his how i if in into is it its itself just me more
    most my no nor not of off on once only or other our out over own same she should so some
    such than that the their them then there these they this those through to too under until
    up very was we were what when where which while who whom why will with would you your also
    may might must shall upon using used use per via etc
""",
    )
)

_WORD = re.compile(r"[a-z0-9]+")
# Source ids are small: at most 6 digits, so "[<5000 digits>]" in a model's output is text,
# not a citation (int() refuses strings past 4300 digits).
_CITE_GROUP = re.compile(r"\[(\d{1,6}(?:\s*[,;]\s*\d{1,6})*)\]")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_LEADING_CITES = re.compile(r"^((?:\[\d{1,6}(?:\s*[,;]\s*\d{1,6})*\]\s*)+)")


def stem(word: str) -> str:
    """Crude suffix stripping so 'flows'/'flow' and 'heated'/'heat' match; not a real stemmer."""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 5 and word.endswith("ing"):
        return word[:-3]
    if len(word) > 4 and word.endswith("ed"):
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def content_terms(text: str) -> list[str]:
    """Stemmed content words of a text, in order (repeats kept)."""
    return [stem(w) for w in _WORD.findall(text.lower()) if w not in STOPWORDS and len(w) > 1]


def coverage(terms: Collection[str], text_terms: Collection[str]) -> float:
    """Share of `terms` (as a set) found in `text_terms`; 0 when there are no terms."""
    wanted = set(terms)
    if not wanted:
        return 0.0
    return len(wanted & set(text_terms)) / len(wanted)


def split_sentences(text: str) -> list[str]:
    """Split on sentence-final punctuation; citation markers that follow a period stay with
    the sentence before them ("Lift rises. [1] Drag falls [2]." is two cited sentences)."""
    parts = [p.strip() for p in _SENTENCE_END.split(text.strip()) if p.strip()]
    sentences: list[str] = []
    for part in parts:
        lead = _LEADING_CITES.match(part)
        if lead and sentences:
            sentences[-1] = f"{sentences[-1]} {lead.group(1).strip()}"
            part = part[lead.end() :].strip()
        if part:
            sentences.append(part)
    return sentences


def parse_citations(sentence: str) -> tuple[str, list[int]]:
    """The sentence without its [n] markers, and the cited source ids in order (unique)."""
    ids: list[int] = []
    for group in _CITE_GROUP.findall(sentence):
        for token in re.split(r"\s*[,;]\s*", group):
            sid = int(token)
            if sid not in ids:
                ids.append(sid)
    clean = re.sub(r"\s+", " ", _CITE_GROUP.sub("", sentence)).strip()
    clean = re.sub(r"\s+([.!?,;:])", r"\1", clean)
    return clean, ids


Status = Literal["supported", "unsupported", "unverifiable"]


@dataclass(frozen=True)
class SentenceCheck:
    text: str  # the sentence as the generator wrote it, markers included
    cited: tuple[int, ...]  # source ids it cites
    status: Status
    support: float  # best content-word overlap with a chunk of a cited source
    chunk_id: str | None  # the chunk that supports it, when supported
    reason: str = ""
    supporting: tuple[int, ...] = ()  # cited sources that hold its words on their own


@dataclass(frozen=True)
class GroundingReport:
    sentences: tuple[SentenceCheck, ...]

    @property
    def supported(self) -> list[SentenceCheck]:
        return [s for s in self.sentences if s.status == "supported"]

    @property
    def unsupported(self) -> list[SentenceCheck]:
        return [s for s in self.sentences if s.status == "unsupported"]

    @property
    def unverifiable(self) -> list[SentenceCheck]:
        return [s for s in self.sentences if s.status == "unverifiable"]

    @property
    def citations(self) -> list[str]:
        """Chunk ids that support the supported sentences, first use first."""
        seen: list[str] = []
        for s in self.supported:
            if s.chunk_id is not None and s.chunk_id not in seen:
                seen.append(s.chunk_id)
        return seen

    @property
    def citation_precision(self) -> float | None:
        """Share of (sentence, cited source) pairs where that source supports the sentence.

        Citing [1][2] when only [1] holds the words scores one of two, so padding an answer
        with citations lowers it. None when nothing was cited.
        """
        pairs = sum(len(s.cited) for s in self.sentences)
        if pairs == 0:
            return None
        return sum(len(s.supporting) for s in self.sentences) / pairs


def check_sentence(
    sentence: str,
    context: AssembledContext,
    *,
    threshold: float = DEFAULT_SUPPORT_THRESHOLD,
    excluded_chunks: Collection[str] = (),
) -> SentenceCheck:
    """Check one sentence against the chunks of the sources it cites.

    Chunks in `excluded_chunks` (flagged as instructions) never count as support, so text
    planted in a source cannot buy itself a citation.
    """
    clean, cited = parse_citations(sentence)
    if not cited:
        return SentenceCheck(sentence, (), "unverifiable", 0.0, None, "no citation")
    terms = content_terms(clean)
    if not terms:
        return SentenceCheck(sentence, tuple(cited), "unverifiable", 0.0, None, "no content words")
    best, best_chunk = 0.0, None
    supporting: list[int] = []
    unknown = [sid for sid in cited if context.source(sid) is None]
    for sid in cited:
        src = context.source(sid)
        if src is None:
            continue
        src_best = 0.0
        for ch in src.chunks:
            if ch.chunk_id in excluded_chunks:
                continue
            score = coverage(terms, content_terms(ch.display_text))
            src_best = max(src_best, score)
            if score > best:
                best, best_chunk = score, ch.chunk_id
        if src_best >= threshold:
            supporting.append(sid)
    if best >= threshold and best_chunk is not None:
        return SentenceCheck(
            sentence, tuple(cited), "supported", best, best_chunk, "", tuple(supporting)
        )
    reason = (
        f"cites unknown source(s) {unknown}"
        if unknown and best_chunk is None
        else f"only {best:.2f} of its content words occur in the cited source(s)"
    )
    return SentenceCheck(sentence, tuple(cited), "unsupported", best, None, reason)


def check_answer(
    answer: str,
    context: AssembledContext,
    *,
    threshold: float = DEFAULT_SUPPORT_THRESHOLD,
    excluded_chunks: Collection[str] = (),
) -> GroundingReport:
    """Check every sentence of an answer; see `check_sentence`."""
    return GroundingReport(
        tuple(
            check_sentence(s, context, threshold=threshold, excluded_chunks=excluded_chunks)
            for s in split_sentences(answer)
        )
    )
