"""The contract of the `Embedder` protocol: every embedder inherits it in its tests.

A subclass provides `embedder` (the implementation under test) and `reference` (the torch
sentence-transformers embedder of the same packaged weights), and states `MAX_COSINE_DISTANCE`,
how far (1 - cosine) its vectors may be from the reference's on the same text. Then every test
here runs on it: the output contract (float32, C-contiguous, unit rows, the identity's
dimension, an empty batch), agreement with the reference within the stated distance, batching
that does not change a vector, truncation at `max_seq_length` (and token counts that are not
truncated), and refused input.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pytest

from ragindex.errors import InvalidInput
from ragindex.protocols import Embedder, Vectors
from ragindex.types import ModelIdentity

TEXTS = [
    "Boundary layer transition on a flat plate at supersonic speeds.",
    "heat transfer",
    "The wing was tested in a wind tunnel. " * 60,  # longer than 256 tokens: truncated alike
    "Ünïcödé, punctuation; and numbers 1.5e-3!",
    "x",
    "what similarity laws must be obeyed when constructing aeroelastic models of heated"
    " high speed aircraft",
]
LONG = "The wing was tested in a wind tunnel. " * 60
BATCH_TOLERANCE = 1e-5  # a vector alone against the same text in a padded batch


class EmbedderContract:
    """Subclasses provide `embedder` and `reference`, and state MAX_COSINE_DISTANCE."""

    MAX_COSINE_DISTANCE: float = 1e-5

    @pytest.fixture
    def embedder(self) -> Iterator[Embedder]:
        raise NotImplementedError("the implementation's test class provides the embedder")

    @pytest.fixture
    def reference(self) -> Embedder:
        raise NotImplementedError("the torch embedder of the same weights")

    def test_output_contract(self, embedder: Embedder) -> None:
        dim = embedder.identity.dimension
        for vecs, n in (
            (embedder.embed_passages(TEXTS), len(TEXTS)),
            (embedder.embed_queries(TEXTS[:2]), 2),
        ):
            assert vecs.shape == (n, dim)
            assert vecs.dtype == np.float32
            assert vecs.flags["C_CONTIGUOUS"]
            np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
        empty = embedder.embed_queries([])
        assert empty.shape == (0, dim) and empty.dtype == np.float32

    def test_vectors_agree_with_the_reference_within_the_stated_distance(
        self, embedder: Embedder, reference: Embedder
    ) -> None:
        for side in ("embed_passages", "embed_queries"):
            cosine = (getattr(embedder, side)(TEXTS) * getattr(reference, side)(TEXTS)).sum(axis=1)
            assert float((1.0 - cosine).max()) <= self.MAX_COSINE_DISTANCE
        assert embedder.identity.dimension == reference.identity.dimension
        assert embedder.identity.weights_hash == reference.identity.weights_hash
        assert embedder.max_seq_length == reference.max_seq_length

    def test_batching_does_not_change_a_vector(self, embedder: Embedder) -> None:
        batched = embedder.embed_passages(TEXTS)
        single = np.vstack([embedder.embed_passages([t]) for t in TEXTS])
        np.testing.assert_allclose(batched, single, atol=BATCH_TOLERANCE)

    def test_text_past_max_seq_length_is_truncated(self, embedder: Embedder) -> None:
        assert embedder.count_tokens(LONG) > embedder.max_seq_length  # counted untruncated
        longer = LONG + " hypersonic reentry ablation" * 20
        a, b = embedder.embed_passages([LONG, longer])
        np.testing.assert_allclose(a, b, atol=BATCH_TOLERANCE)

    def test_token_counts_match_the_reference(
        self, embedder: Embedder, reference: Embedder
    ) -> None:
        assert embedder.count_tokens("") == 0
        for text in ["hello world", "Hello, world!", *TEXTS]:
            assert embedder.count_tokens(text) == reference.count_tokens(text)

    def test_bad_texts_are_refused(self, embedder: Embedder) -> None:
        with pytest.raises(InvalidInput):
            embedder.embed_passages("a string")
        with pytest.raises(InvalidInput):
            embedder.embed_queries(["ok", 3])  # type: ignore[list-item]


class RecordingEmbedder:
    """The real embedder, recording the passages it embeds (a wrapper, not a mock)."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.identity: ModelIdentity = inner.identity
        self.max_seq_length = inner.max_seq_length
        self.embedded: list[str] = []

    def embed_passages(self, texts: Sequence[str]) -> Vectors:
        self.embedded.extend(texts)
        return self.inner.embed_passages(texts)

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        return self.inner.embed_queries(texts)

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)
