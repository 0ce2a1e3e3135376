"""The Ray Serve application: `build_app(args)` wires deployments from one RagIndexSpec.

Import path `ragindex.app.serve_app:build_app` with args {spec, name, data_dir, runtime}, as
rendered by `ragindex.serve_config`. The layout (names, resources, scaling) comes from
`deployment_layout`, so `serve.run(build_app(...))` and `serve deploy CONFIG` agree.

- local: the Router replica holds the whole query path in-process (query embedder, one
  ShardReplica per dense shard tailing that shard's WAL, a tantivy reader, chunk-store reads)
  and catches up every REFRESH_S, far inside the freshness bound. Ingest is the single
  writer and acknowledges only after the WAL fsync.
- cluster: the Router fans out through handles to Shard<i>, Lexical, QueryEmbedder (batched)
  and Reranker deployments; Ingest embeds through its own IngestEmbedder pool.

Every replica runs its index and model work on ONE worker thread: FAISS and SQLite objects
are not shared across threads, and one intra-op thread per replica is what 2 cores sustain
(FIELD-NOTES).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from ray import serve
from ray.serve import Application
from ray.serve.handle import DeploymentHandle

from ragindex.app.answers import answer_service
from ragindex.app.engine import STAMP, auth_dir, check_stamp, open_lexical
from ragindex.config import RagIndexSpec
from ragindex.errors import BackendUnavailable, InvalidInput
from ragindex.ingest.pipeline import IngestPipeline
from ragindex.ingest.store import ChunkStore
from ragindex.models.embedder import load_embedder
from ragindex.models.reranker import load_reranker
from ragindex.protocols import Embedder, LexicalIndex, Vectors
from ragindex.router.answer import Answer, AnswerService
from ragindex.router.auth import TokenVerifier
from ragindex.router.http import create_app
from ragindex.router.query import QueryEngine, SearchResult
from ragindex.serve_config import (
    INGEST,
    INGEST_EMBEDDER,
    LEXICAL,
    QUERY_EMBEDDER,
    RERANKER,
    ROUTER,
    Runtime,
    deployment_layout,
    shard_deployment_name,
)
from ragindex.shards import ShardedDenseIndex, ShardReplica
from ragindex.shards.sharded import shard_dir
from ragindex.types import Document, ModelIdentity, ScoredId

log = logging.getLogger("ragindex.serve")
T = TypeVar("T")

REFRESH_S = 0.15
EMBED_BATCH_WAIT_S = 0.005


# ---------------------------------------------------------------- pure decisions


@dataclass(frozen=True)
class AppArgs:
    spec: RagIndexSpec
    name: str
    data_dir: Path
    runtime: Runtime


def parse_args(args: dict[str, Any]) -> AppArgs:
    """Validate the builder args (the `args` block of the Serve config)."""
    unknown = set(args) - {"spec", "name", "data_dir", "runtime"}
    if unknown:
        raise InvalidInput(f"unknown app args: {', '.join(sorted(unknown))}")
    runtime = args.get("runtime", "local")
    if runtime not in ("local", "cluster"):
        raise InvalidInput(f"runtime must be 'local' or 'cluster', got {runtime!r}")
    if not args.get("data_dir"):
        raise InvalidInput("data_dir is required")
    spec = args.get("spec") or {}
    return AppArgs(
        spec=spec if isinstance(spec, RagIndexSpec) else RagIndexSpec.model_validate(spec),
        name=str(args.get("name", "ragindex")),
        data_dir=Path(args["data_dir"]),
        runtime=runtime,
    )


def deployment_options(layout_entry: dict[str, Any]) -> dict[str, Any]:
    """`Deployment.options(...)` kwargs for one entry of `deployment_layout`."""
    return {k: v for k, v in layout_entry.items() if k != "name"} | {"name": layout_entry["name"]}


def merge_by_score(results: Sequence[Sequence[ScoredId]], k: int) -> list[ScoredId]:
    """Top-k of several shards' hits by score (ties by chunk id), as ShardedDenseIndex does."""
    hits = [h for shard_hits in results for h in shard_hits]
    return sorted(hits, key=lambda h: (-h.score, h.chunk_id))[:k]


def doc_result(doc: Document, result: Any) -> dict[str, Any]:
    """The API's per-document answer from an ingest result (counts or lists of ids)."""

    def count(value: Any) -> int:
        return value if isinstance(value, int) else len(value)

    return {
        "source": doc.source,
        "doc_id": doc.doc_id,
        "added": count(result.added),
        "unchanged": count(result.unchanged),
        "removed": count(result.removed),
    }


def limit_threads() -> None:
    """One intra-op thread for this replica (FIELD-NOTES: 2 threads collapse under load)."""
    import faiss
    import torch

    torch.set_num_threads(1)
    faiss.omp_set_num_threads(1)


class _Worker:
    """A single thread that owns this replica's index objects; async callers await it."""

    def __init__(self, name: str) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    def call(self, fn: Callable[[], T]) -> T:
        """Run on the worker thread from sync code (shutdown), blocking."""
        return self._pool.submit(fn).result()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


# ---------------------------------------------------------------- the query side, in-process


class _ReadOnlyDense:
    """The write half of the DenseIndex protocol for the query side, which never writes."""

    def upsert(self, tenant_id: str, chunk_ids: Sequence[str], vectors: Vectors) -> None:
        raise InvalidInput("the query side's dense index is read-only; send writes to Ingest")

    def delete(self, tenant_id: str, chunk_ids: Sequence[str]) -> None:
        raise InvalidInput("the query side's dense index is read-only; send writes to Ingest")


class ReplicaDenseIndex(_ReadOnlyDense):
    """The dense leg over read replicas of every shard (DenseIndex protocol, read-only)."""

    def __init__(self, replicas: list[ShardReplica]) -> None:
        self.replicas = replicas
        self.identity = replicas[0].identity

    def search(
        self, query_vector: Vectors, top_k: int, tenant_id: str, identity: ModelIdentity
    ) -> list[ScoredId]:
        return merge_by_score(
            [r.search(query_vector, top_k, tenant_id, identity) for r in self.replicas], top_k
        )

    def catch_up(self) -> int:
        return sum(r.catch_up() for r in self.replicas)

    def count(self, tenant_id: str) -> int:
        return sum(r.shard.count(tenant_id) for r in self.replicas)

    def offsets(self) -> list[int]:
        return [r.offset for r in self.replicas]


def reload_lexical(index: LexicalIndex) -> None:
    """See the writer's latest commits: tantivy readers reload; Elasticsearch refreshes itself."""
    reload = getattr(index, "reload", None)
    if reload is not None:
        reload()


def stamped_identity(data_dir: Path) -> ModelIdentity | None:
    """The embedder identity the writer stamped on the data dir, or None before it has."""
    path = data_dir / STAMP
    if not path.exists():
        return None
    return ModelIdentity.from_dict(json.loads(path.read_text())["identity"])


def index_exists(data_dir: Path, num_shards: int) -> bool:
    """Whether the writer has created every shard's snapshot (readers open after it)."""
    dense = data_dir / "dense"
    return all(
        (shard_dir(dense, i) / "snapshot" / "manifest.json").exists() for i in range(num_shards)
    )


class LocalQuerySide:
    """Everything a local Router replica reads, owned by its worker thread."""

    def __init__(self, spec: RagIndexSpec, data_dir: Path) -> None:
        self.spec = spec
        self.data_dir = data_dir
        self.engine: QueryEngine | None = None
        self.dense: ReplicaDenseIndex | None = None
        self.lexical: LexicalIndex | None = None
        self.store: ChunkStore | None = None
        self.embedder: Embedder | None = None
        self.answers: AnswerService | None = None
        self.refreshed_at = 0.0

    def load_models(self) -> None:
        limit_threads()
        self.embedder = load_embedder(self.spec.embedder)

    def try_open(self) -> bool:
        """Open the readers once the writer has created the index; False until then."""
        if self.engine is not None:
            return True
        if self.embedder is None or not index_exists(self.data_dir, self.spec.dense.shards):
            return False
        dense_root = self.data_dir / "dense"
        replicas = [
            ShardReplica(
                shard_dir(dense_root, i), self.spec.dense.hnsw, self.spec.dense.exact_threshold
            )
            for i in range(self.spec.dense.shards)
        ]
        self.dense = ReplicaDenseIndex(replicas)
        self.lexical = open_lexical(
            self.spec, self.data_dir, self.embedder.identity, read_only=True
        )
        self.store = ChunkStore(self.data_dir / "store.sqlite")
        reranker = load_reranker(self.spec.reranker) if self.spec.reranker.enabled else None
        self.engine = QueryEngine(
            self.embedder,
            self.dense,
            self.lexical,
            self.store,
            fusion=self.spec.fusion,
            lexical_spec=self.spec.lexical,
            reranker=reranker,
            reranker_spec=self.spec.reranker,
        )
        self.refreshed_at = time.monotonic()
        return True

    def refresh(self) -> None:
        """Apply what the writer logged and committed since the last call."""
        if not self.try_open():
            return
        assert self.dense is not None and self.lexical is not None
        self.dense.catch_up()
        reload_lexical(self.lexical)
        self.refreshed_at = time.monotonic()

    def search(
        self, tenant_id: str, query: str, k: int | None, mode: str, rerank: bool | None
    ) -> SearchResult:
        if self.engine is None:
            raise BackendUnavailable("the index is still opening; retry shortly")
        return self.engine.search(tenant_id, query, k, mode, rerank)

    def answer(self, tenant_id: str, question: str, k: int) -> Answer:
        if self.engine is None or self.embedder is None:
            raise BackendUnavailable("the index is still opening; retry shortly")
        if self.answers is None:
            self.answers = answer_service(self.spec, self.engine, self.embedder)
        return self.answers.answer(tenant_id, question, k)

    def stats(self, tenant_id: str) -> dict[str, Any]:
        if self.dense is None or self.store is None or self.lexical is None:
            raise BackendUnavailable("the index is still opening; retry shortly")
        return {
            "tenant": tenant_id,
            "chunks": self.store.count(tenant_id),
            "documents": len(self.store.documents(tenant_id)),
            "dense_vectors": self.dense.count(tenant_id),
            "lexical_docs": self.lexical.count(tenant_id),
            "shards": self.spec.dense.shards,
            "wal_offsets": self.dense.offsets(),
            "staleness_s": round(time.monotonic() - self.refreshed_at, 3),
            "freshness_bound_s": self.spec.freshness_s,
        }

    def close(self) -> None:
        if self.lexical is not None:
            self.lexical.close()
        if self.store is not None:
            self.store.close()


# ---------------------------------------------------------------- the query side, over handles


class RemoteEmbedder:
    """Embedder protocol over a QueryEmbedder/IngestEmbedder deployment (blocking calls)."""

    def __init__(self, handle: DeploymentHandle, identity: ModelIdentity, max_seq: int) -> None:
        self.handle = handle
        self.identity = identity
        self.max_seq_length = max_seq

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        rows = [self.handle.embed_query.remote(t) for t in texts]
        return np.stack([r.result() for r in rows]).astype(np.float32)

    def embed_passages(self, texts: Sequence[str]) -> Vectors:
        return self.handle.embed_passages.remote(list(texts)).result()

    def count_tokens(self, text: str) -> int:
        return int(self.handle.count_tokens.remote(text).result())


class RemoteDenseIndex(_ReadOnlyDense):
    """Fan out to every Shard<i> deployment at once, then merge by score."""

    def __init__(self, shards: list[DeploymentHandle], identity: ModelIdentity) -> None:
        self.shards = shards
        self.identity = identity

    def search(
        self, query_vector: Vectors, top_k: int, tenant_id: str, identity: ModelIdentity
    ) -> list[ScoredId]:
        pending = [s.search.remote(query_vector, top_k, tenant_id, identity) for s in self.shards]
        return merge_by_score([p.result() for p in pending], top_k)

    def count(self, tenant_id: str) -> int:
        pending = [s.count.remote(tenant_id) for s in self.shards]
        return sum(int(p.result()) for p in pending)


class RemoteLexical:
    def __init__(self, handle: DeploymentHandle) -> None:
        self.handle = handle

    def upsert(self, chunks: Sequence[Any]) -> None:
        raise InvalidInput("the Lexical deployment is a reader; send writes to Ingest")

    def delete(self, tenant_id: str, chunk_ids: Sequence[str]) -> None:
        raise InvalidInput("the Lexical deployment is a reader; send writes to Ingest")

    def search(self, query: str, top_k: int, tenant_id: str) -> list[ScoredId]:
        return self.handle.search.remote(query, top_k, tenant_id).result()

    def count(self, tenant_id: str) -> int:
        return int(self.handle.count.remote(tenant_id).result())

    def close(self) -> None:
        return None


class RemoteReranker:
    def __init__(self, handle: DeploymentHandle) -> None:
        self.handle = handle

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        return self.handle.score.remote(query, list(passages)).result()


class ClusterQuerySide:
    """A cluster Router's query path: the same QueryEngine over remote legs."""

    def __init__(
        self,
        spec: RagIndexSpec,
        data_dir: Path,
        embedder: RemoteEmbedder,
        shards: list[DeploymentHandle],
        lexical: DeploymentHandle,
        reranker: DeploymentHandle | None,
    ) -> None:
        self.spec = spec
        self.dense = RemoteDenseIndex(shards, embedder.identity)
        self.lexical = RemoteLexical(lexical)
        self.store = ChunkStore(data_dir / "store.sqlite")
        self.answers: AnswerService | None = None
        self.embedder = embedder
        self.engine = QueryEngine(
            embedder,
            self.dense,
            self.lexical,
            self.store,
            fusion=spec.fusion,
            lexical_spec=spec.lexical,
            reranker=RemoteReranker(reranker) if reranker is not None else None,
            reranker_spec=spec.reranker,
        )

    def load_models(self) -> None:
        limit_threads()

    def try_open(self) -> bool:
        return True

    def refresh(self) -> None:
        return None  # shard and lexical deployments catch up on their own

    def search(
        self, tenant_id: str, query: str, k: int | None, mode: str, rerank: bool | None
    ) -> SearchResult:
        return self.engine.search(tenant_id, query, k, mode, rerank)

    def answer(self, tenant_id: str, question: str, k: int) -> Answer:
        if self.answers is None:
            self.answers = answer_service(self.spec, self.engine, self.embedder)
        return self.answers.answer(tenant_id, question, k)

    def stats(self, tenant_id: str) -> dict[str, Any]:
        return {
            "tenant": tenant_id,
            "chunks": self.store.count(tenant_id),
            "documents": len(self.store.documents(tenant_id)),
            "dense_vectors": self.dense.count(tenant_id),
            "lexical_docs": self.lexical.count(tenant_id),
            "shards": self.spec.dense.shards,
            "freshness_bound_s": self.spec.freshness_s,
        }

    def close(self) -> None:
        self.store.close()


QuerySide = LocalQuerySide | ClusterQuerySide


# ---------------------------------------------------------------- deployments


async def refresh_forever(worker: _Worker, refresh: Callable[[], None], what: str) -> None:
    """Apply the writer's new work every REFRESH_S; a failed round is logged and retried,
    and the replica keeps serving what it has (readiness reports the staleness)."""
    while True:
        try:
            await worker.run(refresh)
        except Exception:
            log.exception(what)
        await asyncio.sleep(REFRESH_S)


class Router:
    """FastAPI ingress: auth, limits, the query path, and writes forwarded to Ingest."""

    async def __init__(  # type: ignore[misc]  # Serve awaits async constructors
        self,
        spec: dict[str, Any],
        data_dir: str,
        runtime: Runtime,
        ingest: DeploymentHandle,
        embedder: DeploymentHandle | None = None,
        shards: list[DeploymentHandle] | None = None,
        lexical: DeploymentHandle | None = None,
        reranker: DeploymentHandle | None = None,
    ) -> None:
        self.spec = RagIndexSpec.model_validate(spec)
        self.data_dir = Path(data_dir)
        self.verifier = TokenVerifier(auth_dir(self.data_dir))
        self.ingest = ingest
        self.worker = _Worker("router")
        self.side: QuerySide
        if runtime == "local":
            self.side = LocalQuerySide(self.spec, self.data_dir)
        else:
            assert embedder is not None and shards is not None and lexical is not None
            identity, max_seq = await embedder.describe.remote()
            remote = RemoteEmbedder(embedder, identity, max_seq)
            self.side = ClusterQuerySide(
                self.spec, self.data_dir, remote, shards, lexical, reranker
            )
        await self.worker.run(self.side.load_models)
        self._refresher = asyncio.get_running_loop().create_task(
            refresh_forever(self.worker, self.side.refresh, "refresh failed")
        )

    def __serve_build_asgi_app__(self) -> Any:
        return create_app(self, self.verifier)

    # Backend protocol for router.http

    async def search(
        self, tenant_id: str, query: str, k: int | None, mode: str, rerank: bool | None
    ) -> SearchResult:
        return await self.worker.run(self.side.search, tenant_id, query, k, mode, rerank)

    async def upsert(self, tenant_id: str, documents: list[Document]) -> list[dict[str, Any]]:
        results: list[dict[str, Any]] = await self.ingest.upsert.remote(tenant_id, documents)
        await self.worker.run(self.side.refresh)  # read-your-writes on this replica
        return results

    async def delete(self, tenant_id: str, source: str, doc_id: str) -> int:
        removed: int = await self.ingest.delete.remote(tenant_id, source, doc_id)
        await self.worker.run(self.side.refresh)
        return removed

    async def answer(self, tenant_id: str, question: str, k: int) -> Answer:
        return await self.worker.run(self.side.answer, tenant_id, question, k)

    async def stats(self, tenant_id: str) -> dict[str, Any]:
        return await self.worker.run(self.side.stats, tenant_id)

    async def ready(self) -> tuple[bool, str]:
        if not await self.worker.run(self.side.try_open):
            return False, "waiting for the ingest writer to create the index"
        try:
            await asyncio.wait_for(self.ingest.ping.remote(), timeout=2.0)
        except Exception as err:
            return False, f"ingest is not answering: {type(err).__name__}"
        return True, "ok"

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self._refresher.cancel()
            self.worker.call(self.side.close)
            self.worker.close()


class Ingest:
    """The single writer: chunk, diff, embed, then dense (WAL fsync) + BM25 + chunk store."""

    async def __init__(  # type: ignore[misc]  # Serve awaits async constructors
        self, spec: dict[str, Any], data_dir: str, embedder: DeploymentHandle | None = None
    ) -> None:
        self.spec = RagIndexSpec.model_validate(spec)
        self.data_dir = Path(data_dir)
        self.worker = _Worker("ingest")
        remote: Embedder | None = None
        if embedder is not None:
            identity, max_seq = await embedder.describe.remote()
            remote = RemoteEmbedder(embedder, identity, max_seq)
        await self.worker.run(self._open, remote)

    def _open(self, embedder: Embedder | None) -> None:
        limit_threads()
        self.embedder = embedder or load_embedder(self.spec.embedder)
        check_stamp(self.data_dir, self.spec, self.embedder.identity)
        self.dense = ShardedDenseIndex.open(
            self.data_dir / "dense",
            self.embedder.identity,
            num_shards=self.spec.dense.shards,
            hnsw=self.spec.dense.hnsw,
            exact_threshold=self.spec.dense.exact_threshold,
        )
        self.lexical = open_lexical(self.spec, self.data_dir, self.embedder.identity)
        self.store = ChunkStore(self.data_dir / "store.sqlite")
        self.pipeline = IngestPipeline(
            self.embedder, self.dense, self.lexical, self.store, self.spec.chunking
        )

    def _upsert(self, tenant_id: str, documents: list[Document]) -> list[dict[str, Any]]:
        results = self.pipeline.upsert(tenant_id, documents)
        return [doc_result(d, r) for d, r in zip(documents, results, strict=True)]

    def _delete(self, tenant_id: str, source: str, doc_id: str) -> int:
        removed = self.pipeline.delete(tenant_id, source, doc_id)
        return removed if isinstance(removed, int) else len(removed)

    async def upsert(self, tenant_id: str, documents: list[Document]) -> list[dict[str, Any]]:
        return await self.worker.run(self._upsert, tenant_id, documents)

    async def delete(self, tenant_id: str, source: str, doc_id: str) -> int:
        return await self.worker.run(self._delete, tenant_id, source, doc_id)

    async def ping(self) -> bool:
        return True

    def _close(self) -> None:
        self.dense.close()  # snapshot, so a restart replays little
        self.lexical.close()
        self.store.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.worker.call(self._close)
            self.worker.close()


class EmbedderPool:
    """A model pool; queries are batched across requests with @serve.batch."""

    def __init__(self, spec: dict[str, Any]) -> None:
        limit_threads()
        self.embedder = load_embedder(RagIndexSpec.model_validate(spec).embedder)

    def describe(self) -> tuple[ModelIdentity, int]:
        return self.embedder.identity, self.embedder.max_seq_length

    @serve.batch(max_batch_size=16, batch_wait_timeout_s=EMBED_BATCH_WAIT_S)
    async def embed_query(self, texts: list[str]) -> list[Vectors]:
        return list(self.embedder.embed_queries(texts))

    def embed_passages(self, texts: list[str]) -> Vectors:
        return self.embedder.embed_passages(texts)

    def count_tokens(self, text: str) -> int:
        return self.embedder.count_tokens(text)


class RerankerPool:
    def __init__(self, spec: dict[str, Any]) -> None:
        limit_threads()
        self.reranker = load_reranker(RagIndexSpec.model_validate(spec).reranker)

    def score(self, query: str, passages: list[str]) -> list[float]:
        return self.reranker.score(query, passages)


class ShardServer:
    """One read replica of one dense shard, tailing its WAL every REFRESH_S."""

    async def __init__(  # type: ignore[misc]  # Serve awaits async constructors
        self, spec: dict[str, Any], data_dir: str, shard: int
    ) -> None:
        limit_threads()
        parsed = RagIndexSpec.model_validate(spec)
        self.directory = shard_dir(Path(data_dir) / "dense", shard)
        self.hnsw, self.exact = parsed.dense.hnsw, parsed.dense.exact_threshold
        self.worker = _Worker(f"shard{shard}")
        self.replica: ShardReplica | None = None
        self._refresher = asyncio.get_running_loop().create_task(
            refresh_forever(self.worker, self._refresh, "shard catch-up failed")
        )

    def _refresh(self) -> None:
        if self.replica is None:
            if not (self.directory / "snapshot" / "manifest.json").exists():
                return
            self.replica = ShardReplica(self.directory, self.hnsw, self.exact)
        self.replica.catch_up()

    def _replica(self) -> ShardReplica:
        if self.replica is None:
            raise BackendUnavailable(f"shard {self.directory.name} is still opening")
        return self.replica

    async def search(
        self, query_vector: Vectors, top_k: int, tenant_id: str, identity: ModelIdentity
    ) -> list[ScoredId]:
        return await self.worker.run(
            lambda: self._replica().search(query_vector, top_k, tenant_id, identity)
        )

    async def count(self, tenant_id: str) -> int:
        return await self.worker.run(lambda: self._replica().shard.count(tenant_id))


class LexicalServer:
    """The BM25 reader (spec.lexical.backend), reloaded every REFRESH_S to see new commits.

    It opens once the writer has stamped the data dir, since an Elasticsearch generation is
    named after the embedder identity.
    """

    async def __init__(  # type: ignore[misc]  # Serve awaits async constructors
        self, spec: dict[str, Any], data_dir: str
    ) -> None:
        self.spec = RagIndexSpec.model_validate(spec)
        self.data_dir = Path(data_dir)
        self.worker = _Worker("lexical")
        self.index: LexicalIndex | None = None
        self._refresher = asyncio.get_running_loop().create_task(
            refresh_forever(self.worker, self._refresh, "lexical reload failed")
        )

    def _refresh(self) -> None:
        if self.index is None:
            identity = stamped_identity(self.data_dir)
            if identity is None or not index_exists(self.data_dir, self.spec.dense.shards):
                return
            self.index = open_lexical(self.spec, self.data_dir, identity, read_only=True)
        reload_lexical(self.index)

    def _index(self) -> LexicalIndex:
        if self.index is None:
            raise BackendUnavailable("the BM25 index is still opening")
        return self.index

    async def search(self, query: str, top_k: int, tenant_id: str) -> list[ScoredId]:
        return await self.worker.run(lambda: self._index().search(query, top_k, tenant_id))

    async def count(self, tenant_id: str) -> int:
        return await self.worker.run(lambda: self._index().count(tenant_id))


RouterDeployment = serve.deployment(name=ROUTER)(serve.ingress()(Router))
IngestDeployment = serve.deployment(name=INGEST)(Ingest)
EmbedderDeployment = serve.deployment(name=QUERY_EMBEDDER)(EmbedderPool)
RerankerDeployment = serve.deployment(name=RERANKER)(RerankerPool)
ShardDeployment = serve.deployment(name="Shard")(ShardServer)
LexicalDeployment = serve.deployment(name=LEXICAL)(LexicalServer)


# ---------------------------------------------------------------- the builder


def build_app(args: dict[str, Any]) -> Application:
    """The Serve application for one index; layout from `deployment_layout(spec, runtime)`."""
    parsed = parse_args(args)
    spec_json = parsed.spec.model_dump(mode="json", by_alias=True)
    data_dir = str(parsed.data_dir)
    layout = {
        d["name"]: deployment_options(d) for d in deployment_layout(parsed.spec, parsed.runtime)
    }
    if parsed.runtime == "local":
        ingest = IngestDeployment.options(**layout[INGEST]).bind(spec_json, data_dir)
        return RouterDeployment.options(**layout[ROUTER]).bind(spec_json, data_dir, "local", ingest)

    query_embedder = EmbedderDeployment.options(**layout[QUERY_EMBEDDER]).bind(spec_json)
    ingest_embedder = EmbedderDeployment.options(**layout[INGEST_EMBEDDER]).bind(spec_json)
    ingest = IngestDeployment.options(**layout[INGEST]).bind(spec_json, data_dir, ingest_embedder)
    shards = [
        ShardDeployment.options(**layout[shard_deployment_name(i)]).bind(spec_json, data_dir, i)
        for i in range(parsed.spec.dense.shards)
    ]
    lexical = LexicalDeployment.options(**layout[LEXICAL]).bind(spec_json, data_dir)
    reranker = (
        RerankerDeployment.options(**layout[RERANKER]).bind(spec_json)
        if parsed.spec.reranker.enabled
        else None
    )
    return RouterDeployment.options(**layout[ROUTER]).bind(
        spec_json, data_dir, "cluster", ingest, query_embedder, shards, lexical, reranker
    )
