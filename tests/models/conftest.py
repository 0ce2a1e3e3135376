"""Shared model fixtures: the packaged MiniLM in both backends (the tiny cross-encoder is
tests/conftest.py's)."""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import pytest
import torch

from ragindex.config import EmbedderSpec
from ragindex.models import FlagEmbedder, SentenceTransformerEmbedder

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def st_embedder() -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder(
        EmbedderSpec.model_validate({"backend": "sentence-transformers", "batch_size": 4})
    )


@pytest.fixture(scope="session")
def flag_embedder() -> FlagEmbedder:
    return FlagEmbedder(EmbedderSpec.model_validate({"backend": "flagembedding", "batch_size": 4}))
