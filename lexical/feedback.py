"""RM3 pseudo-relevance feedback for BM25, shared by both backends so they expand alike.

RM3 (Abdul-Jaleel et al., 2004; as in Anserini): run the query, take the top `docs` hits as
relevant, build a relevance model P(t|R) = sum over those hits of score(D) * tf(t, D) / |D|,
keep its `terms` heaviest terms, and search again with the interpolation
`original_weight * P(t|Q) + (1 - original_weight) * P(t|R)` as term weights. Our analyzer
keeps stop words (it reproduces Elasticsearch's `standard`), so expansion candidates skip
English function words, one-character tokens and tokens without a letter; the original
query's own terms are kept whatever they are.

Both backends must pick the same feedback hits, but their BM25 scores differ in the 7th
digit, so hits whose scores tie within TIE_TOLERANCE are ordered by chunk id before the cut.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

from ragindex.config import Rm3Spec
from ragindex.lexical.analysis import analyze
from ragindex.lexical.documents import query_terms
from ragindex.types import ScoredId

TIE_TOLERANCE = 1e-5  # relative; the backends agree to ~2e-7
TIE_MARGIN = 10  # extra first-pass hits fetched so that a tie across the cut is seen whole

_STOP_WORDS_TEXT = """
    a about above after again against al all also am an and any are as at be because
    been before being below between both but by can could did do does doing down during
    each et few for from further had has have having he her here hers herself him
    himself his how i if in into is it its itself just may me might more most must my
    myself no nor not now of off on once only or other our ours ourselves out over own
    same shall she should so some such than that the their theirs them themselves then
    there these they this those through to too under until up upon very was we were what
    when where which while who whom why will with would you your yours yourself
    yourselves
"""
STOP_WORDS = frozenset(_STOP_WORDS_TEXT.split())

# run(terms, k, tenant, with_text) -> ranked hits, each with its title + body text when asked
RunTerms = Callable[[Mapping[str, float], int, str, bool], list[tuple[ScoredId, str]]]


def _is_candidate(term: str) -> bool:
    return len(term) > 1 and term not in STOP_WORDS and any(c.isalpha() for c in term)


def pick_feedback(hits: Sequence[tuple[ScoredId, str]], n: int) -> list[tuple[ScoredId, str]]:
    """The first n hits, with near-tied scores ordered by chunk id (see the module docstring)."""
    groups: list[list[tuple[ScoredId, str]]] = []
    for hit in hits:
        last = groups[-1][-1][0].score if groups else None
        if last is not None and abs(hit[0].score - last) <= TIE_TOLERANCE * max(1.0, abs(last)):
            groups[-1].append(hit)
        else:
            groups.append([hit])
    ordered = [h for group in groups for h in sorted(group, key=lambda h: h[0].chunk_id)]
    return ordered[:n]


def rm3_expand(
    original: Mapping[str, float],
    feedback: Sequence[tuple[float, Sequence[str]]],
    terms: int,
    original_weight: float,
) -> dict[str, float]:
    """Weighted terms of the expanded query from the original's and (score, tokens) of each
    feedback hit; pure, so both backends and the tests compute exactly the same thing."""
    total = math.fsum(original.values())
    expanded = {t: original_weight * w / total for t, w in original.items()} if total else {}
    model: dict[str, float] = {}
    for score, tokens in feedback:
        if not tokens or score <= 0:
            continue
        counts = Counter(tokens)
        for term, tf in counts.items():
            if _is_candidate(term):
                model[term] = model.get(term, 0.0) + score * tf / len(tokens)
    kept = sorted(model.items(), key=lambda item: (-item[1], item[0]))[:terms]
    mass = math.fsum(w for _, w in kept)
    if not mass:  # nothing to expand with: the original query, unchanged in ranking
        return {t: w / total for t, w in original.items()}
    for term, weight in kept:
        expanded[term] = expanded.get(term, 0.0) + (1 - original_weight) * weight / mass
    return {t: w for t, w in expanded.items() if w > 0}


def bm25_search(
    run: RunTerms, text: str, top_k: int, tenant_id: str, rm3: Rm3Spec | None
) -> list[ScoredId]:
    """The BM25 leg's search on either backend: the analysed query, expanded by RM3 when on."""
    original = query_terms(text)
    if not original:
        return []
    if rm3 is None or not rm3.enabled:
        return [hit for hit, _ in run(original, top_k, tenant_id, False)]
    first = run(original, rm3.docs + TIE_MARGIN, tenant_id, True)
    feedback = [(hit.score, analyze(body)) for hit, body in pick_feedback(first, rm3.docs)]
    expanded = rm3_expand(original, feedback, rm3.terms, rm3.original_weight)
    return [hit for hit, _ in run(expanded, top_k, tenant_id, False)] if expanded else []
