"""Model pools (embedder, reranker deployments) and the protocol clients that call them."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, TypeVar

import numpy as np
from ray import serve
from ray.serve.handle import DeploymentHandle

from ragindex.app.serve import handle_failover, hops
from ragindex.app.serve.hops import Served, to_ms
from ragindex.app.serve.observability import setup_replica
from ragindex.app.serve.threads import limit_threads
from ragindex.config import RagIndexSpec
from ragindex.models import load_embedder, load_reranker, resolve_model_path
from ragindex.protocols import Embedder, Reranker, Vectors
from ragindex.types import ModelIdentity

EMBED_BATCH_WAIT_S = 0.0
T = TypeVar("T")


class ModelUnavailable(RuntimeError):
    """A model pool's replica cannot load its model: Serve reports the message as the
    deployment's failure, and the RayService stays not ready with it."""


def _load_or_explain(role: str, model: str, source: str, load: Callable[[], T]) -> T:
    """The loaded model, or ModelUnavailable naming the model, its source and the cause, in
    the words the operator uses for its ModelUnavailable condition."""
    try:
        return load()
    except Exception as e:  # loaders raise many kinds (missing files, bad configs, no CUDA)
        raise ModelUnavailable(f"{role} model {model!r} ({source}) cannot load: {e}") from e


def pool_embedder(spec: dict[str, Any]) -> Embedder:
    """The embedder pool's model, or ModelUnavailable."""
    embedder = RagIndexSpec.model_validate(spec).embedder
    return _load_or_explain(
        "embedder", embedder.model, embedder.source.kind, lambda: load_embedder(embedder)
    )


def pool_reranker(spec: dict[str, Any]) -> Reranker:
    """The reranker pool's model, or ModelUnavailable. The reranker loads from a directory:
    a volume or hub source's is resolved here."""
    reranker = RagIndexSpec.model_validate(spec).reranker

    def load() -> Reranker:
        if reranker.source.kind == "packaged":
            return load_reranker(reranker)
        path = resolve_model_path(reranker.model, reranker.source, role="reranker")
        return load_reranker(reranker.model_copy(update={"model": str(path)}))

    return _load_or_explain("reranker", reranker.model, reranker.source.kind, load)


class EmbedderPool:
    """A model pool; queries are batched across requests with @serve.batch."""

    def __init__(self, spec: dict[str, Any]) -> None:
        setup_replica("embedder")
        limit_threads()
        self.embedder = pool_embedder(spec)

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
        self.reranker = pool_reranker(spec)

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
