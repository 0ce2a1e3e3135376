"""SerializedEmbedder: the Embedder contract of what it wraps, one model call at a time, and
single queries that arrive while a call runs embedded together by the next one."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from ragindex.models import SerializedEmbedder
from ragindex.protocols import Embedder, Vectors
from ragindex.testing import EmbedderContract

QUERIES = [
    "oft out bush doth",
    "eventtarget target addeventlistener foo and a much longer query than the others",
    "x",
    "may known foretold indication",
    "the cranfield collection of aerodynamics abstracts",
]


class TestSerializedEmbedderContract(EmbedderContract):
    """The wrapper keeps the Embedder contract of what it wraps (the packaged MiniLM, which is
    also the reference)."""

    MAX_COSINE_DISTANCE = 1e-6

    @pytest.fixture
    def embedder(self, minilm: Embedder) -> SerializedEmbedder:
        return SerializedEmbedder(minilm)

    @pytest.fixture
    def reference(self, minilm: Embedder) -> Embedder:
        return minilm


class Interrupted(BaseException):
    """What no `except Exception` catches (as KeyboardInterrupt)."""


class Recording:
    """The real model, recording each call's texts; its first query call is held until
    `release` is set (so that other queries arrive meanwhile), and texts in `failing` fail."""

    def __init__(
        self,
        embedder: Embedder,
        failing: Sequence[str] = (),
        error: type[BaseException] = RuntimeError,
    ) -> None:
        self.embedder = embedder
        self.identity = embedder.identity
        self.max_seq_length = embedder.max_seq_length
        self.calls: list[list[str]] = []
        self.running = 0
        self.most_running = 0
        self.entered = threading.Event()
        self.release = threading.Event()
        self.failing = set(failing)
        self.error = error
        self._lock = threading.Lock()

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        with self._lock:
            self.calls.append(list(texts))
            self.running += 1
            self.most_running = max(self.most_running, self.running)
        try:
            if len(self.calls) == 1:
                self.entered.set()
                assert self.release.wait(30)
            if self.failing & set(texts):
                raise self.error(f"cannot embed {sorted(self.failing & set(texts))}")
            return self.embedder.embed_queries(texts)
        finally:
            with self._lock:
                self.running -= 1

    def embed_passages(self, texts: Sequence[str]) -> Vectors:
        return self.embedder.embed_passages(texts)

    def count_tokens(self, text: str) -> int:
        return self.embedder.count_tokens(text)


def embed_while_held(shared: SerializedEmbedder, model: Recording) -> list[Vectors | BaseException]:
    """The first query holds the model while the others arrive; then it is released."""

    def one(text: str) -> Vectors | BaseException:
        try:
            return shared.embed_queries([text])
        except BaseException as err:
            return err

    with ThreadPoolExecutor(len(QUERIES)) as pool:
        first = pool.submit(one, QUERIES[0])
        assert model.entered.wait(30)
        others = [pool.submit(one, q) for q in QUERIES[1:]]
        while len(shared._waiting) < len(QUERIES) - 1:  # every other query is queued
            threading.Event().wait(0.01)
        model.release.set()
        return [first.result(), *(f.result() for f in others)]


def test_queries_that_arrive_during_a_call_are_embedded_together_by_the_next(
    minilm: Embedder,
) -> None:
    model = Recording(minilm)
    shared = SerializedEmbedder(model)
    vectors = embed_while_held(shared, model)
    first, *rest = model.calls
    assert first == [QUERIES[0]]
    assert [sorted(c) for c in rest] == [sorted(QUERIES[1:])]  # one call, led by any of them
    assert model.most_running == 1
    for text, vector in zip(QUERIES, vectors, strict=True):
        assert isinstance(vector, np.ndarray) and vector.shape == (1, minilm.identity.dimension)
        np.testing.assert_allclose(vector, minilm.embed_queries([text]), atol=1e-6)


def test_a_batch_takes_at_most_max_batch_queries(minilm: Embedder) -> None:
    model = Recording(minilm)
    vectors = embed_while_held(SerializedEmbedder(model, max_batch=2), model)
    assert [len(c) for c in model.calls] == [1, 2, 2]
    assert sorted(t for c in model.calls for t in c) == sorted(QUERIES)
    assert all(isinstance(v, np.ndarray) for v in vectors)


def test_a_failing_query_fails_alone_when_its_batch_fails(minilm: Embedder) -> None:
    model = Recording(minilm, failing=[QUERIES[2]])
    results = embed_while_held(SerializedEmbedder(model), model)
    failed = [
        text for text, r in zip(QUERIES, results, strict=True) if isinstance(r, BaseException)
    ]
    assert failed == [QUERIES[2]]
    assert "cannot embed" in str(results[2])
    for text, vector in zip(QUERIES, results, strict=True):
        if text != QUERIES[2]:
            np.testing.assert_allclose(vector, minilm.embed_queries([text]), atol=1e-6)


def test_a_batch_interrupted_fails_every_query_of_it_and_none_waits_on(minilm: Embedder) -> None:
    model = Recording(minilm, failing=[QUERIES[2]], error=Interrupted)
    shared = SerializedEmbedder(model)
    results = embed_while_held(shared, model)
    assert isinstance(results[0], np.ndarray)
    assert all(isinstance(r, Interrupted) for r in results[1:])
    np.testing.assert_allclose(  # the embedder still serves
        shared.embed_queries([QUERIES[1]]), minilm.embed_queries([QUERIES[1]]), atol=1e-6
    )


def test_several_texts_and_passages_are_one_call_each(minilm: Embedder) -> None:
    model = Recording(minilm)
    model.release.set()
    shared = SerializedEmbedder(model)
    assert shared.embed_queries(QUERIES[:3]).shape == (3, minilm.identity.dimension)
    assert shared.embed_queries([]).shape == (0, minilm.identity.dimension)
    assert model.calls == [QUERIES[:3], []]


def test_max_batch_must_be_positive(minilm: Embedder) -> None:
    with pytest.raises(ValueError, match="max_batch must be >= 1"):
        SerializedEmbedder(minilm, max_batch=0)
