"""The contract of the `Reranker` protocol: every reranker inherits it in its tests.

A subclass provides `reranker`. Then every test here runs on it: one float per passage, in
the passages' order; a passage scores the same alone as in a batch; scores depend on the
passage; no passages, no scores; a blank query or a passage that is not text is refused.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from ragindex.errors import InvalidInput
from ragindex.protocols import Reranker

QUERY = "supersonic boundary layer"
PASSAGES = [
    "Boundary layer transition at Mach 3 on a cone.",
    "heat transfer",
    "A long passage about wings and wind tunnels. " * 20,
    "short",
    "Skin friction in turbulent flow over flat plates.",
]
BATCH_TOLERANCE = 1e-5


class RerankerContract:
    """Subclasses provide `reranker`."""

    @pytest.fixture
    def reranker(self) -> Iterator[Reranker]:
        raise NotImplementedError("the implementation's test class provides the reranker")

    def test_one_float_per_passage_in_order(self, reranker: Reranker) -> None:
        scores = reranker.score(QUERY, PASSAGES)
        assert len(scores) == len(PASSAGES)
        assert all(isinstance(s, float) for s in scores)
        reversed_scores = reranker.score(QUERY, PASSAGES[::-1])
        np.testing.assert_allclose(reversed_scores[::-1], scores, atol=BATCH_TOLERANCE)

    def test_batched_equals_one_by_one(self, reranker: Reranker) -> None:
        batched = reranker.score(QUERY, PASSAGES)
        single = [reranker.score(QUERY, [p])[0] for p in PASSAGES]
        np.testing.assert_allclose(batched, single, atol=BATCH_TOLERANCE)

    def test_scores_depend_on_the_passage(self, reranker: Reranker) -> None:
        assert len(set(np.round(reranker.score(QUERY, PASSAGES), 6))) > 1

    def test_no_passages_no_scores(self, reranker: Reranker) -> None:
        assert reranker.score(QUERY, []) == []

    def test_bad_input_is_refused(self, reranker: Reranker) -> None:
        with pytest.raises(InvalidInput):
            reranker.score("  ", PASSAGES)
        with pytest.raises(InvalidInput):
            reranker.score(QUERY, ["ok", None])  # type: ignore[list-item]
