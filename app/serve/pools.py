"""Model pools (embedder, reranker deployments) and the protocol clients that call them."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np
from ray import serve
from ray.serve.handle import DeploymentHandle

from ragindex.app.serve import handle_failover, hops
from ragindex.app.serve.hops import Served, to_ms
from ragindex.app.serve.observability import setup_replica
from ragindex.app.serve.threads import limit_threads
from ragindex.config import RagIndexSpec
from ragindex.models import load_embedder, load_reranker
from ragindex.protocols import Vectors
from ragindex.types import ModelIdentity

EMBED_BATCH_WAIT_S = 0.0


class EmbedderPool:
    """A model pool; queries are batched across requests with @serve.batch."""

    def __init__(self, spec: dict[str, Any]) -> None:
        setup_replica("embedder")
        limit_threads()
        self.embedder = load_embedder(RagIndexSpec.model_validate(spec).embedder)

    def describe(self) -> tuple[ModelIdentity, int]:
        return self.embedder.identity, self.embedder.max_seq_length

    async def embed_query(self, text: str) -> Served[Vectors]:
        """One query's vector; queued while its batch formed and waited for the model."""
        entered = time.perf_counter()
        vector, started, ended = await self._embed_batch(text)
        return Served(vector, to_ms(started - entered), to_ms(ended - started))

    @serve.batch(max_batch_size=16, batch_wait_timeout_s=EMBED_BATCH_WAIT_S)
    async def _embed_batch(self, texts: list[str]) -> list[tuple[Vectors, float, float]]:
        started = time.perf_counter()
        vectors = self.embedder.embed_queries(texts)
        ended = time.perf_counter()
        return [(vector, started, ended) for vector in vectors]

    def embed_passages(self, texts: list[str]) -> Vectors:
        return self.embedder.embed_passages(texts)

    def count_tokens(self, text: str) -> int:
        return self.embedder.count_tokens(text)


class RerankerPool:
    def __init__(self, spec: dict[str, Any]) -> None:
        setup_replica("reranker")
        limit_threads()
        self.reranker = load_reranker(RagIndexSpec.model_validate(spec).reranker)

    def score(self, query: str, passages: list[str]) -> Served[list[float]]:
        started = time.perf_counter()
        scores = self.reranker.score(query, passages)
        return Served(scores, 0.0, to_ms(time.perf_counter() - started))


class RemoteEmbedder:
    """Embedder protocol over a QueryEmbedder/IngestEmbedder deployment (blocking calls).
    Query-time calls fail over (app.serve.handle_failover); embedding passages for ingest does not:
    a batch may take long, and a failed batch is retried from the committed offset anyway.
    `count_tokens`, when given, counts here instead of in the pool (the chunker calls it for
    every piece of every document: a remote call each would cost more than the count)."""

    def __init__(
        self,
        handle: DeploymentHandle,
        identity: ModelIdentity,
        max_seq: int,
        count_tokens: Callable[[str], int] | None = None,
    ) -> None:
        self.handle = handle
        self.identity = identity
        self.max_seq_length = max_seq
        self._count_tokens = count_tokens

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        rows = hops.call_all([("embed", partial(self.handle.embed_query.remote, t)) for t in texts])
        return np.stack(rows).astype(np.float32)

    def embed_passages(self, texts: Sequence[str]) -> Vectors:
        return self.handle.embed_passages.remote(list(texts)).result()

    def count_tokens(self, text: str) -> int:
        if self._count_tokens is not None:
            return self._count_tokens(text)
        return int(handle_failover.call(partial(self.handle.count_tokens.remote, text)))


class RemoteReranker:
    def __init__(self, handle: DeploymentHandle) -> None:
        self.handle = handle

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        return hops.call("rerank", partial(self.handle.score.remote, query, list(passages)))
