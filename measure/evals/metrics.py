"""Retrieval metrics over one ranked list of document ids and its graded judgments.

The definitions follow trec_eval (and so `pytrec_eval` / `ir_measures`), so figures here can be
compared with published ones: a document is relevant when its gain is > 0, gains <= 0 add
nothing to DCG, the ideal DCG is built from all judged positive gains, discount is
log2(rank + 1), precision@k divides by k even when fewer documents came back, and a query with
no relevant document scores 0 on every metric. Everything here is pure.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence

from ragindex.errors import InvalidInput

Qrels = Mapping[str, int]
"""Judgments of one query: document id -> integer gain."""

MetricFn = Callable[[Sequence[str], Qrels, int], float]

STANDARD_METRICS: tuple[str, ...] = ("ndcg@10", "recall@100", "mrr@10", "p@10")
"""What every evaluation report carries (issue #8)."""


def _check(ranked: Sequence[str], k: int) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise InvalidInput(f"cutoff k must be an integer >= 1, got {k!r}")
    if len(set(ranked)) != len(ranked):
        raise InvalidInput(
            "ranked list repeats a document id: collapse chunk hits to documents first"
        )


def _relevant(qrels: Qrels) -> int:
    return sum(1 for gain in qrels.values() if gain > 0)


def recall_at_k(ranked: Sequence[str], qrels: Qrels, k: int) -> float:
    """Share of the query's relevant documents found in the top k."""
    _check(ranked, k)
    total = _relevant(qrels)
    if total == 0:
        return 0.0
    found = sum(1 for doc in ranked[:k] if qrels.get(doc, 0) > 0)
    return found / total


def precision_at_k(ranked: Sequence[str], qrels: Qrels, k: int) -> float:
    """Share of the k slots holding a relevant document (missing slots count as misses)."""
    _check(ranked, k)
    return sum(1 for doc in ranked[:k] if qrels.get(doc, 0) > 0) / k


def mrr_at_k(ranked: Sequence[str], qrels: Qrels, k: int) -> float:
    """Reciprocal rank of the first relevant document within the top k, else 0."""
    _check(ranked, k)
    for rank, doc in enumerate(ranked[:k], start=1):
        if qrels.get(doc, 0) > 0:
            return 1.0 / rank
    return 0.0


def ndcg_at_k(ranked: Sequence[str], qrels: Qrels, k: int) -> float:
    """Graded nDCG: sum of gain / log2(rank + 1) over the top k, over the ideal ordering's."""
    _check(ranked, k)
    dcg = sum(
        max(qrels.get(doc, 0), 0) / math.log2(rank + 1)
        for rank, doc in enumerate(ranked[:k], start=1)
    )
    ideal = sorted((gain for gain in qrels.values() if gain > 0), reverse=True)[:k]
    idcg = sum(gain / math.log2(rank + 1) for rank, gain in enumerate(ideal, start=1))
    return dcg / idcg if idcg > 0 else 0.0


METRICS: dict[str, MetricFn] = {
    "ndcg": ndcg_at_k,
    "recall": recall_at_k,
    "mrr": mrr_at_k,
    "p": precision_at_k,
}


def parse_metric(name: str) -> tuple[MetricFn, int]:
    """Turn a name such as 'ndcg@10' into its function and cutoff, or raise InvalidInput."""
    base, sep, cutoff = name.partition("@")
    if not sep or base not in METRICS or not cutoff.isdigit() or int(cutoff) < 1:
        raise InvalidInput(
            f"unknown metric {name!r}: use <name>@<k> with name one of {sorted(METRICS)}"
            " and k >= 1, e.g. 'ndcg@10'"
        )
    return METRICS[base], int(cutoff)


def score_query(
    ranked: Sequence[str], qrels: Qrels, metrics: Sequence[str] = STANDARD_METRICS
) -> dict[str, float]:
    """Every named metric for one query."""
    parsed = [(name, *parse_metric(name)) for name in metrics]
    return {name: fn(ranked, qrels, k) for name, fn, k in parsed}


def mean_scores(per_query: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """Arithmetic mean of each metric over queries (every query must carry the same metrics)."""
    rows = list(per_query)
    if not rows:
        raise InvalidInput("cannot average metrics over zero queries")
    names = list(rows[0])
    if any(set(row) != set(names) for row in rows):
        raise InvalidInput("every query must carry the same metrics to be averaged")
    return {name: math.fsum(row[name] for row in rows) / len(rows) for name in names}
