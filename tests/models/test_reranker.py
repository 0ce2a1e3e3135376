"""Cross-encoder wrappers on a tiny random BERT the tests build: mechanics only, no quality."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ragindex.config import RerankerSpec
from ragindex.errors import InvalidInput
from ragindex.models import CrossEncoderReranker, load_reranker
from ragindex.models.reranker import FlagRerankerBackend, order_by_score
from ragindex.testing import PASSAGES, QUERY, RerankerContract


@pytest.fixture(scope="module")
def cross_encoder(tiny_cross_encoder: Path) -> CrossEncoderReranker:
    return CrossEncoderReranker(tiny_cross_encoder, batch_size=2)


@pytest.fixture(scope="module")
def flag_reranker(tiny_cross_encoder: Path) -> FlagRerankerBackend:
    return FlagRerankerBackend(tiny_cross_encoder, batch_size=2)


def test_backends_agree_on_the_same_weights(
    cross_encoder: CrossEncoderReranker, flag_reranker: FlagRerankerBackend
) -> None:
    np.testing.assert_allclose(
        cross_encoder.score(QUERY, PASSAGES), flag_reranker.score(QUERY, PASSAGES), atol=1e-4
    )


def test_order_is_consistent_with_scores(cross_encoder: CrossEncoderReranker) -> None:
    scores = cross_encoder.score(QUERY, PASSAGES)
    order = order_by_score(scores)
    assert sorted(order) == list(range(len(PASSAGES)))
    ranked = [scores[i] for i in order]
    assert ranked == sorted(scores, reverse=True)


def test_order_by_score_breaks_ties_by_input_order() -> None:
    assert order_by_score([0.5, 2.0, 0.5, -1.0]) == [1, 0, 2, 3]
    assert order_by_score([]) == []


def test_factory(tiny_cross_encoder: Path, tmp_path: Path) -> None:
    st = load_reranker(
        RerankerSpec.model_validate({"enabled": True, "model": str(tiny_cross_encoder)})
    )
    flag = load_reranker(
        RerankerSpec.model_validate(
            {"enabled": True, "model": str(tiny_cross_encoder), "backend": "flagembedding"}
        )
    )
    assert isinstance(st, CrossEncoderReranker)
    assert isinstance(flag, FlagRerankerBackend)
    with pytest.raises(InvalidInput, match="empty"):
        load_reranker(RerankerSpec.model_validate({}))
    with pytest.raises(InvalidInput, match="not a local model directory"):
        load_reranker(
            RerankerSpec.model_validate({"enabled": True, "model": str(tmp_path / "missing")})
        )


class TestCrossEncoderContract(RerankerContract):
    @pytest.fixture
    def reranker(self, cross_encoder: CrossEncoderReranker) -> CrossEncoderReranker:
        return cross_encoder


class TestFlagRerankerContract(RerankerContract):
    @pytest.fixture
    def reranker(self, flag_reranker: FlagRerankerBackend) -> FlagRerankerBackend:
        return flag_reranker
