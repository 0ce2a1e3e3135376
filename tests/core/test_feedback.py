"""Rocchio on a dense query vector (pure)."""

from __future__ import annotations

import numpy as np
import pytest

from ragindex.feedback import rocchio


def test_rocchio_moves_towards_the_feedback_mean_and_stays_unit_length() -> None:
    query = np.array([[1.0, 0.0, 0.0]], dtype=np.float32)
    feedback = np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]], dtype=np.float32)
    moved = rocchio(query, feedback, alpha=1.0, beta=1.0)
    assert moved.shape == (1, 3) and moved.dtype == np.float32
    assert np.linalg.norm(moved) == pytest.approx(1.0)
    assert moved[0] == pytest.approx(np.array([1.0, 0.5, 0.5]) / np.sqrt(1.5))
    only_feedback = rocchio(query, feedback, alpha=0.0, beta=2.0)
    assert only_feedback[0] == pytest.approx(np.array([0.0, 1.0, 1.0]) / np.sqrt(2))


def test_no_feedback_or_a_cancelled_vector_leaves_the_query() -> None:
    query = np.array([[0.6, 0.8]], dtype=np.float32)
    assert np.array_equal(rocchio(query, np.zeros((0, 2), np.float32), 1.0, 1.0), query)
    assert np.array_equal(rocchio(query, -query, 1.0, 1.0), query)
