"""The seeded tune / held-out split of judged queries."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragindex.errors import InvalidInput
from ragindex.measure.evals import Collection, load_cranfield
from ragindex.measure.evals.split import restrict, split_queries


def test_halves_are_disjoint_cover_everything_and_keep_order() -> None:
    qids = [str(i) for i in range(1, 226)]
    halves = split_queries(qids)
    assert len(halves["tune"]) == 113 and len(halves["heldout"]) == 112
    assert set(halves["tune"]).isdisjoint(halves["heldout"])
    assert sorted(halves["tune"] + halves["heldout"], key=int) == qids
    assert halves["tune"] == sorted(halves["tune"], key=int)
    assert halves["all"] == qids


def test_split_is_fixed_by_the_seed_and_stable_when_queries_are_added() -> None:
    qids = [f"q{i}" for i in range(100)]
    assert split_queries(qids) == split_queries(list(qids))
    assert split_queries(qids, seed=1)["tune"] != split_queries(qids, seed=2)["tune"]
    grown = split_queries([*qids, *(f"new{i}" for i in range(100))])
    # A query keeps its side unless it sat at the median of the hash order.
    moved = set(split_queries(qids)["tune"]) - set(grown["tune"])
    assert len(moved) <= 10


def test_restrict_keeps_the_corpus_and_one_half_of_the_queries(cranfield_dir: Path) -> None:
    cranfield: Collection = load_cranfield(cranfield_dir)
    tune, heldout = restrict(cranfield, "tune"), restrict(cranfield, "heldout")
    assert tune.corpus is cranfield.corpus and tune.name == cranfield.name
    assert len(tune.judged_queries()) + len(heldout.judged_queries()) == 225
    assert set(tune.judged_queries()).isdisjoint(heldout.judged_queries())
    assert restrict(cranfield, "all").judged_queries() == cranfield.judged_queries()
    with pytest.raises(InvalidInput, match="split must be one of"):
        restrict(cranfield, "test")
