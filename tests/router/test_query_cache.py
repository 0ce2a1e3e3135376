"""The query-embedding LRU in front of the real (ONNX, packaged MiniLM) embedder: a repeated
query gives the model's own vector without a model call, the cache stays bounded, callers
cannot corrupt it, and only single queries are cached."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from ragindex.config import EmbedderSpec
from ragindex.models import load_embedder
from ragindex.protocols import Embedder, Vectors
from ragindex.router import with_query_cache
from ragindex.router.query_cache import CachedQueryEmbedder


class Counting:
    """The real embedder, counting the texts it embeds for queries."""

    def __init__(self, embedder: Embedder) -> None:
        self.inner = embedder
        self.identity = embedder.identity
        self.max_seq_length = embedder.max_seq_length
        self.queries: list[str] = []

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        self.queries.extend(texts)
        return self.inner.embed_queries(texts)

    def embed_passages(self, texts: Sequence[str]) -> Vectors:
        return self.inner.embed_passages(texts)

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)


@pytest.fixture(scope="module")
def model() -> Embedder:
    return load_embedder(EmbedderSpec())


def test_a_repeated_query_skips_the_model_and_gets_its_vector(model: Embedder) -> None:
    counting = Counting(model)
    cached = CachedQueryEmbedder(counting, size=8)
    first = cached.embed_queries(["supersonic boundary layer"])
    again = cached.embed_queries(["supersonic boundary layer"])
    assert counting.queries == ["supersonic boundary layer"]
    np.testing.assert_array_equal(first, again)
    np.testing.assert_array_equal(again, model.embed_queries(["supersonic boundary layer"]))
    assert (cached.hits, cached.misses) == (1, 1)
    assert cached.identity == model.identity and cached.max_seq_length == model.max_seq_length


def test_callers_cannot_change_a_cached_vector(model: Embedder) -> None:
    cached = CachedQueryEmbedder(model, size=8)
    cached.embed_queries(["heat transfer"])[:] = 0.0  # e.g. faiss.normalize_L2 works in place
    hit = cached.embed_queries(["heat transfer"])
    hit[:] = 0.0
    np.testing.assert_array_equal(
        cached.embed_queries(["heat transfer"]), model.embed_queries(["heat transfer"])
    )


def test_it_keeps_the_most_recent_entries_only(model: Embedder) -> None:
    counting = Counting(model)
    cached = CachedQueryEmbedder(counting, size=2)
    for text in ["a wing", "a blade", "a wing", "a nozzle", "a wing", "a blade"]:
        cached.embed_queries([text])
    # "a blade" was evicted by "a nozzle" (least recently used then), "a wing" never was
    assert counting.queries == ["a wing", "a blade", "a nozzle", "a blade"]
    assert len(cached) == 2


def test_batches_and_passages_are_not_cached(model: Embedder) -> None:
    counting = Counting(model)
    cached = CachedQueryEmbedder(counting, size=8)
    cached.embed_queries(["lift", "drag"])
    cached.embed_queries(["lift", "drag"])
    cached.embed_passages(["lift"])
    assert counting.queries == ["lift", "drag", "lift", "drag"] and len(cached) == 0


def test_size_zero_is_no_cache(model: Embedder) -> None:
    assert with_query_cache(model, 0) is model
    assert isinstance(with_query_cache(model, 1), CachedQueryEmbedder)
    with pytest.raises(ValueError, match="query cache size"):
        CachedQueryEmbedder(model, 0)
