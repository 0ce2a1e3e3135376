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
    legs: Mapping[str, Sequence[str]], k: int = DEFAULT_RRF_K
) -> list[Fused]:
    """Fuse ranked id lists: score = sum over legs of 1 / (k + rank), ranks 1-based.

    Ties are broken by the best single rank, then by id, so the output is deterministic.
    A leg that lists an id twice counts its first (best) rank only.
    """
    if k < 0:
        raise ValueError("k must be >= 0")
    ranks: dict[str, dict[str, int]] = {}
    for leg, ids in legs.items():
        for position, cid in enumerate(ids, start=1):
            ranks.setdefault(cid, {}).setdefault(leg, position)
    fused = [
        Fused(cid, sum(1.0 / (k + r) for r in leg_ranks.values()), leg_ranks)
        for cid, leg_ranks in ranks.items()
    ]
    fused.sort(key=lambda f: (-f.score, min(f.ranks.values()), f.chunk_id))
    return fused
