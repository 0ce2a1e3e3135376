"""Shared model fixtures: the packaged MiniLM in both backends and a tiny cross-encoder."""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import pytest
import torch

from ragindex.config import EmbedderSpec
from ragindex.models.embedder import (
    FlagEmbedder,
    SentenceTransformerEmbedder,
    resolve_model_path,
)

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def st_embedder() -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder(EmbedderSpec.model_validate({"batch_size": 4}))


@pytest.fixture(scope="session")
def flag_embedder() -> FlagEmbedder:
    return FlagEmbedder(EmbedderSpec.model_validate({"backend": "flagembedding", "batch_size": 4}))


@pytest.fixture(scope="session")
def tiny_cross_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer BERT sequence classifier, random init, with MiniLM's tokenizer: no quality."""
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    out = tmp_path_factory.mktemp("tiny-cross-encoder")
    tokenizer = AutoTokenizer.from_pretrained(str(resolve_model_path("all-MiniLM-L6-v2")))
    torch.manual_seed(1234)
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=512,
        num_labels=1,
    )
    BertForSequenceClassification(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
