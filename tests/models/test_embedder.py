"""Embedder wrappers: both backends, prefixes, batching, output contract and identity."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from ragindex.config import EmbedderSpec
from ragindex.errors import InvalidInput
from ragindex.models.embedder import (
    FlagEmbedder,
    SentenceTransformerEmbedder,
    load_embedder,
    resolve_model_path,
    weights_hash,
)

TEXTS = [
    "Boundary layer transition on a flat plate at supersonic speeds.",
    "heat transfer",
    "The wing was tested in a wind tunnel. " * 60,  # longer than 256 tokens: truncated alike
    "Ünïcödé, punctuation; and numbers 1.5e-3!",
    "x",
]


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


@pytest.mark.parametrize("backend", ["st", "flag"])
def test_output_contract(
    backend: str, st_embedder: SentenceTransformerEmbedder, flag_embedder: FlagEmbedder
) -> None:
    emb = st_embedder if backend == "st" else flag_embedder
    for vecs in (emb.embed_passages(TEXTS), emb.embed_queries(TEXTS[:2])):
        assert vecs.dtype == np.float32
        assert vecs.flags["C_CONTIGUOUS"]
        np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    empty = emb.embed_queries([])
    assert empty.shape == (0, 384) and empty.dtype == np.float32


def test_batching_does_not_change_vectors(st_embedder: SentenceTransformerEmbedder) -> None:
    batched = st_embedder.embed_passages(TEXTS)  # batch_size 4: two batches
    single = np.vstack([st_embedder.embed_passages([t]) for t in TEXTS])
    np.testing.assert_allclose(batched, single, atol=1e-5)


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


def test_bad_texts_are_rejected(st_embedder: SentenceTransformerEmbedder) -> None:
    with pytest.raises(InvalidInput, match="not one string"):
        st_embedder.embed_passages("a string")
    with pytest.raises(InvalidInput, match=r"texts\[1\]"):
        st_embedder.embed_queries(["ok", 3])


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
