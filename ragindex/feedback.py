"""Rocchio feedback on a dense query vector (pure): the decision the query path applies."""

from __future__ import annotations

import numpy as np

from ragindex.protocols import Vectors


def rocchio(query: Vectors, feedback: Vectors, alpha: float, beta: float) -> Vectors:
    """alpha * query + beta * mean(feedback), scaled back to unit length (shape (1, dim)).

    With no feedback vectors the query comes back unchanged, so a query with no dense hit
    searches exactly as without feedback.
    """
    q = np.asarray(query, dtype=np.float32).reshape(1, -1)
    if len(feedback) == 0:
        return q
    moved = alpha * q + beta * np.asarray(feedback, dtype=np.float32).mean(axis=0, keepdims=True)
    norm = float(np.linalg.norm(moved))
    return (moved / norm).astype(np.float32) if norm > 0 else q
