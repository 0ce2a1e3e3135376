"""Ingest fixtures: one thread per library, and the packaged MiniLM loaded once."""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import faiss
import pytest
import torch

from ragindex.config import EmbedderSpec
from ragindex.models.embedder import SentenceTransformerEmbedder

torch.set_num_threads(1)
faiss.omp_set_num_threads(1)


@pytest.fixture(scope="session")
def minilm() -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder(EmbedderSpec.model_validate({"batch_size": 16}))
