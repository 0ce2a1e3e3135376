"""A fixed, seeded split of a collection's judged queries into a tuning and a held-out half.

Why: a parameter chosen on the same queries it is reported on overstates what it buys. Every
quality parameter is chosen on the `tune` half and reported on the `heldout` half; `all` is
the whole set, for comparison with published figures. The split depends only on the seed and
each query's id (a hash, not a shuffle), so it is the same on every machine and a query keeps
its side when queries are added to the collection.
"""

from __future__ import annotations

from ragindex.errors import InvalidInput
from ragindex.hashing import content_hash
from ragindex.measure.evals.collections import Collection

SPLITS = ("tune", "heldout", "all")
SPLIT_SEED = 17


def split_queries(qids: list[str], seed: int = SPLIT_SEED) -> dict[str, list[str]]:
    """{"tune": [...], "heldout": [...], "all": qids}: halves by a seeded hash of the query id
    (the lower half of the hash order tunes), each in the original order."""
    ranked = sorted(qids, key=lambda qid: (content_hash(f"{seed}:{qid}"), qid))
    tune = set(ranked[: (len(ranked) + 1) // 2])
    return {
        "tune": [q for q in qids if q in tune],
        "heldout": [q for q in qids if q not in tune],
        "all": list(qids),
    }


def restrict(collection: Collection, split: str, seed: int = SPLIT_SEED) -> Collection:
    """The collection with only one split's judged queries (same name and corpus, so the
    same cached index serves every split)."""
    if split not in SPLITS:
        raise InvalidInput(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    keep = set(split_queries(collection.judged_queries(), seed)[split])
    return Collection(
        collection.name,
        collection.corpus,
        {qid: q for qid, q in collection.queries.items() if qid in keep},
        {qid: judged for qid, judged in collection.qrels.items() if qid in keep},
    )
