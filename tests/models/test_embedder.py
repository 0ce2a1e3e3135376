"""Embedder wrappers: both backends, prefixes, batching, output contract and identity."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from ragindex.config import EmbedderSpec
from ragindex.errors import InvalidInput
from ragindex.models import (
    FlagEmbedder,
    SentenceTransformerEmbedder,
    load_embedder,
    resolve_model_path,
)
from ragindex.models.embedder import weights_hash
from ragindex.testing import TEXTS, EmbedderContract


def test_both_backends_give_the_same_vectors(
    st_embedder: SentenceTransformerEmbedder, flag_embedder: FlagEmbedder
) -> None:
    a = st_embedder.embed_passages(TEXTS)
    b = flag_embedder.embed_passages(TEXTS)
    assert a.shape == b.shape == (len(TEXTS), 384)
    cosine = (a * b).sum(axis=1)
    assert cosine.min() > 0.999
    assert st_embedder.identity == flag_embedder.identity
    assert st_embedder.identity.dimension == flag_embedder.identity.dimension == 384
    assert st_embedder.max_seq_length == flag_embedder.max_seq_length == 256


def test_prefixes_apply_to_their_side_only(st_embedder: SentenceTransformerEmbedder) -> None:
    spec = EmbedderSpec.model_validate(
        {
            "backend": "sentence-transformers",
            "query_prefix": "query: ",
            "passage_prefix": "passage: ",
        }
    )
    prefixed = SentenceTransformerEmbedder(spec)
    q = prefixed.embed_queries(["heat transfer"])
    p = prefixed.embed_passages(["heat transfer"])
    np.testing.assert_allclose(q, st_embedder.embed_queries(["query: heat transfer"]), atol=1e-6)
    np.testing.assert_allclose(p, st_embedder.embed_passages(["passage: heat transfer"]), atol=1e-6)
    assert prefixed.identity.query_prefix == "query: "
    assert prefixed.identity.passage_prefix == "passage: "
    assert prefixed.identity != st_embedder.identity  # prompt convention is part of identity


def test_count_tokens_uses_the_model_tokenizer(st_embedder: SentenceTransformerEmbedder) -> None:
    assert st_embedder.count_tokens("") == 0
    assert st_embedder.count_tokens("hello world") == 2
    assert st_embedder.count_tokens("Hello, world!") == 4  # punctuation is its own token
    long = "aerodynamics " * 400
    assert st_embedder.count_tokens(long) > 256  # counted untruncated


def test_weights_hash_follows_the_bytes(tmp_path: Path) -> None:
    packaged = resolve_model_path("all-MiniLM-L6-v2")
    copy = tmp_path / "model"
    shutil.copytree(packaged, copy)
    assert weights_hash(copy) == weights_hash(packaged)
    with open(copy / "model.safetensors", "r+b") as fh:
        fh.seek(-1, 2)
        last = fh.read(1)
        fh.seek(-1, 2)
        fh.write(bytes([last[0] ^ 0xFF]))
    assert weights_hash(copy) != weights_hash(packaged)


def test_unknown_model_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="local model directory"):
        load_embedder(EmbedderSpec.model_validate({"model": "no-such-model"}))
    with pytest.raises(InvalidInput, match="no weights file"):
        weights_hash(tmp_path)


def test_factory_picks_the_backend(st_embedder: SentenceTransformerEmbedder) -> None:
    path = str(resolve_model_path("all-MiniLM-L6-v2"))
    emb = load_embedder(EmbedderSpec.model_validate({"model": path, "backend": "flagembedding"}))
    assert isinstance(emb, FlagEmbedder)
    assert emb.identity.weights_hash == st_embedder.identity.weights_hash
    assert emb.identity.name == path


class TestSentenceTransformerContract(EmbedderContract):
    """The reference against itself: the contract's fixed points (output, batching, length)."""

    MAX_COSINE_DISTANCE = 1e-6

    @pytest.fixture
    def embedder(self, st_embedder: SentenceTransformerEmbedder) -> SentenceTransformerEmbedder:
        return st_embedder

    @pytest.fixture
    def reference(self, st_embedder: SentenceTransformerEmbedder) -> SentenceTransformerEmbedder:
        return st_embedder


class TestFlagEmbedderContract(EmbedderContract):
    MAX_COSINE_DISTANCE = 1e-3  # FlagEmbedding's own pooling path: measured 1e-7

    @pytest.fixture
    def embedder(self, flag_embedder: FlagEmbedder) -> FlagEmbedder:
        return flag_embedder

    @pytest.fixture
    def reference(self, st_embedder: SentenceTransformerEmbedder) -> SentenceTransformerEmbedder:
        return st_embedder
