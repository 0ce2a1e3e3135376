"""Shared fixtures for the dense shard tests: a small identity and clustered unit vectors."""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import faiss
import numpy as np
import pytest

from ragindex.config import HnswSpec
from ragindex.types import ModelIdentity

faiss.omp_set_num_threads(1)

DIM = 16


@pytest.fixture
def identity() -> ModelIdentity:
    return ModelIdentity(name="test-model", weights_hash="abc123", dimension=DIM, normalized=True)


@pytest.fixture
def other_identity() -> ModelIdentity:
    return ModelIdentity(name="other-model", weights_hash="def456", dimension=DIM, normalized=True)


@pytest.fixture
def hnsw() -> HnswSpec:
    return HnswSpec(m=16, ef_construction=64, ef_search=64)


def unit_vectors(n: int, seed: int = 0, dim: int = DIM) -> np.ndarray:
    """Random unit vectors (float32)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.fixture
def vecs():
    """The `unit_vectors(n, seed=0, dim=DIM)` factory."""
    return unit_vectors
