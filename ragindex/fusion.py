"""Reciprocal rank fusion: legs are combined by rank, never by raw score."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

DEFAULT_RRF_K = 60


@dataclass(frozen=True)
class Fused:
    chunk_id: str
    score: float
    ranks: dict[str, int]


def reciprocal_rank_fusion(
    legs: Mapping[str, Sequence[str]],
    k: int = DEFAULT_RRF_K,
    weights: Mapping[str, float] | None = None,
    top: int | None = None,
) -> list[Fused]:
    """Fuse ranked id lists: score = sum over legs of weight / (k + rank), ranks 1-based.

    `weights` maps a leg to its weight (1 for a leg it does not name; names of absent legs
    are ignored); a leg of weight 0 is left out entirely. Weights scale a leg's rank
    contribution only, so scores are still never added across legs. Ties are broken by id:
    (score descending, id) is a total order, the one search pages follow. A leg that
    lists an id twice counts its first (best) rank only. `top`: only the first `top` fused ids
    (None: all of them).
    """
    if k < 0:
        raise ValueError("k must be >= 0")
    if top is not None and top < 0:
        raise ValueError(f"top must be >= 0, got {top}")
    weight_of = dict(weights or {})
    if any(w < 0 for w in weight_of.values()):
        raise ValueError(f"weights must be >= 0, got {weight_of}")
    ranks: dict[str, dict[str, int]] = {}
    for leg, ids in legs.items():
        if weight_of.get(leg, 1.0) == 0:
            continue
        for position, cid in enumerate(ids, start=1):
            ranks.setdefault(cid, {}).setdefault(leg, position)
    # sorted as (-score, id) tuples; only the `top` kept become Fused
    order = sorted(
        (-sum(weight_of.get(leg, 1.0) / (k + r) for leg, r in leg_ranks.items()), cid)
        for cid, leg_ranks in ranks.items()
    )
    return [Fused(cid, -neg, ranks[cid]) for neg, cid in order[:top]]
