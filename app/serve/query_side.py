"""The Router's query path: in-process over co-located views (local), or over handles (cluster).

- local: the Router replica holds the whole query path in-process: the query embedder, one
  LogShardReplica per dense shard and its own BM25 view (tantivy), all materialized from
  `chunks.<generation>` into this replica's node-local directory and caught up every
  REFRESH_S, far inside the freshness bound. Hits get their text from the shard replicas.
- cluster: the Router embeds the query (itself on CPU, else through the QueryEmbedder pool,
  batched on its GPUs) and fans out through handles to Shard<i> (vectors and their chunks'
  text), Lexical (the BM25 view) and Reranker deployments; every call fails
  over to another replica within a bound (app.serve.handle_failover) instead of waiting on a replica
  whose node went away.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError
from ray.serve.handle import DeploymentHandle

from ragindex.app.answer_from_spec import answer_service
from ragindex.app.index_opening import open_lexical
from ragindex.app.serve import handle_failover, hops
from ragindex.app.serve.data_plane import (
    applied_target,
    open_log,
    open_snapshot_log,
    tombstone_retention_s,
)
from ragindex.app.serve.pools import RemoteReranker
from ragindex.app.serve.progress import (
    STALE_S,
    RunningReplicasCache,
    registry,
    this_replica,
)
from ragindex.app.serve.threads import limit_threads
from ragindex.config import RagIndexSpec
from ragindex.errors import BackendUnavailable, InvalidInput
from ragindex.filters import TermExpr
from ragindex.generations import index_generation
from ragindex.lexical import LexicalView
from ragindex.models import SerializedEmbedder, load_embedder, load_reranker
from ragindex.protocols import Embedder, LexicalIndex, Log, Vectors
from ragindex.router import (
    Access,
    Answer,
    AnswerService,
    Paged,
    QueryEngine,
    SearchResult,
    merge_summaries,
    views_behind,
    with_query_cache,
)
from ragindex.serve_config import LEXICAL, shard_deployment_name
from ragindex.shards import (
    LogShardReplica,
    ReadOnlyDense,
    ReplicaDenseIndex,
    SnapshotTopic,
    by_shard,
    merge_by_score,
)
from ragindex.topics import plane_snapshots_topic, plane_topics
from ragindex.types import Chunk, ModelIdentity, ScoredId

Summaries = dict[tuple[str, str], tuple[int, str, str | None]]
"""(source, doc_id) -> (chunks, title, updated) of a tenant's documents."""


def catching_up(progress: dict[str, list[int]], targets: list[int]) -> str | None:
    """What is still behind the chunk offsets `targets` (None when every view reached them),
    e.g. "dense shard 0 at 1200 of 50000"."""
    behind = [
        f"{view} shard {shard} at {applied} of {target}"
        for view, offsets in progress.items()
        for shard, (applied, target) in enumerate(zip(offsets, targets, strict=True))
        if applied < target
    ]
    return ", ".join(behind) or None


# Threads that run a search's BM25 leg and its other dense shards beside the searching thread
# (the Router runs 4 searches at a time; the tasks never wait on each other, so a busy pool
# only queues them).
LEG_THREADS = 4
REGISTRY_S = 2.0  # one poll of the progress registry; the wait polls again until its timeout
RUNNING_MAX_AGE_S = 1.0  # the oldest list of running view replicas a wait counts on


def open_bm25_view(
    spec: RagIndexSpec,
    log_: Log,
    topic: str,
    directory: Path,
    identity: ModelIdentity,
    *,
    namespace: str,
    name: str,
) -> LexicalView:
    """This replica's BM25 view: its own tantivy index, or the Elasticsearch alias shared by
    RagIndex `namespace/name`'s replicas."""
    index = open_lexical(spec, directory, identity, namespace=namespace, name=name)
    # Each layout has its own offsets, so switching lexical.tenantIsolation replays the log
    # into the other layout instead of trusting offsets the new indexes never saw.
    offsets = (
        "bm25-offsets.json"
        if spec.lexical.tenant_isolation == "shared"
        else ("bm25-per-tenant-offsets.json")
    )
    return LexicalView(log_, topic, spec.dense.shards, index, directory / offsets)


class ReadOnlyLexical:
    """The write half of the LexicalIndex protocol for the query side, which never writes: its
    BM25 view applies the log (the Router's views thread, or the Lexical deployment)."""

    def upsert(self, chunks: Sequence[Chunk], *, versions: Sequence[int] | None = None) -> None:
        raise InvalidInput(
            "the query side's BM25 index is a view of the log; send writes to Ingest"
        )

    def delete(
        self, tenant_id: str, chunk_ids: Sequence[str], *, versions: Sequence[int] | None = None
    ) -> None:
        raise InvalidInput(
            "the query side's BM25 index is a view of the log; send writes to Ingest"
        )


class ChunksFromReplicas(ReadOnlyLexical):
    """A BM25 index whose top hits carry their chunks from the shard replicas of this process
    (which hold every chunk in memory) instead of its own stored documents: reading them from
    tantivy's compressed store cost the local Router ~3 ms of CPU a search under load. A chunk
    the replicas do not hold (yet) is left to the fetch, as a leg that carries none leaves it.
    The view that owns `index` writes and closes it."""

    def __init__(self, index: LexicalIndex, chunks: ReplicaDenseIndex) -> None:
        self.index, self.chunks = index, chunks

    def search(
        self,
        query: str,
        top_k: int,
        tenant_id: str,
        access: TermExpr | None = None,
        *,
        with_chunks: int = 0,
    ) -> list[ScoredId]:
        hits = self.index.search(query, top_k, tenant_id, access)
        top = self.chunks.get_chunks(tenant_id, [h.chunk_id for h in hits[:with_chunks]])
        return [replace(h, chunk=top[h.chunk_id]) if h.chunk_id in top else h for h in hits]

    def count(self, tenant_id: str) -> int:
        return self.index.count(tenant_id)

    def location(self) -> str:
        return self.index.location()

    def close(self) -> None:
        return None


class LocalQuerySide:
    """Everything a local Router replica reads, owned by its worker thread."""

    def __init__(
        self,
        spec: RagIndexSpec,
        data_dir: Path,
        name: str,
        namespace: str,
        directory: Path,
        *,
        publish: bool = False,
    ) -> None:
        """`publish`: this replica publishes its shard snapshots to the log (one per index)."""
        self.spec = spec
        self.data_dir = data_dir
        self.directory = directory
        self.namespace, self.name = namespace, name
        self.topics = plane_topics(spec, name, namespace)
        self.snapshots_topic = plane_snapshots_topic(spec, name, namespace)
        self.publish = publish
        self.snapshot_logs: list[Log] = []
        self.engine: QueryEngine | None = None
        self.dense: ReplicaDenseIndex | None = None
        self.view: LexicalView | None = None
        self.embedder: Embedder | None = None
        self.answers: AnswerService | None = None
        self.log: Log | None = None
        self.legs: ThreadPoolExecutor | None = None
        # Where every view but the first catches up while the refreshing thread applies the
        # first: each view applies its own partitions, and FAISS and tantivy release the GIL
        # (a replay of the whole log at start takes the views' sum of time, not the slowest's).
        self.appliers: ThreadPoolExecutor | None = None
        self.refreshed_at = 0.0
        # The chunk offsets that existed when the views opened: ready once they reach them.
        self.open_targets: list[int] | None = None
        self.caught_up = False

    def load_models(self) -> None:
        limit_threads()
        self.embedder = with_query_cache(
            SerializedEmbedder(load_embedder(self.spec.embedder)),
            self.spec.embedder.query_cache_size,
        )

    def try_open(self) -> bool:
        """Open the views once Ingest has created the topics; False until then."""
        if self.engine is not None:
            return True
        if self.embedder is None:
            return False
        log_ = self.log or open_log(self.data_dir)
        self.log = log_
        try:
            log_.partitions(self.topics.chunks)
        except InvalidInput:
            return False
        identity = self.embedder.identity
        shards = self.spec.dense.shards
        self.snapshot_logs = [open_snapshot_log(self.data_dir, log_, i) for i in range(shards)]
        snapshot_turn = threading.Lock()  # one shard's snapshot in memory at a time
        replicas = [
            LogShardReplica(
                log_,
                self.topics.chunks,
                i,
                self.directory / f"shard-{i:03d}",
                identity,
                self.spec.dense.hnsw,
                self.spec.dense.exact_threshold,
                SnapshotTopic(
                    self.snapshot_logs[i],
                    self.snapshots_topic,
                    i,
                    shards,
                    self.topics.chunks,
                    identity,
                ),
                publish=self.publish,
                tombstone_retention_s=tombstone_retention_s(self.spec),
                index=self.spec.dense.index,
                snapshot_turn=snapshot_turn,
            )
            for i in range(shards)
        ]
        self.legs = ThreadPoolExecutor(LEG_THREADS, thread_name_prefix="query-legs")
        self.appliers = ThreadPoolExecutor(shards, thread_name_prefix="views-apply")
        self.dense = ReplicaDenseIndex(replicas, identity, self.legs)
        self.view = open_bm25_view(
            self.spec,
            log_,
            self.topics.chunks,
            self.directory,
            identity,
            namespace=self.namespace,
            name=self.name,
        )
        reranker = load_reranker(self.spec.reranker) if self.spec.reranker.enabled else None
        self.engine = QueryEngine(
            self.embedder,
            self.dense,
            ChunksFromReplicas(self.view.index, self.dense),
            self.dense,
            fusion=self.spec.fusion,
            lexical_spec=self.spec.lexical,
            reranker=reranker,
            reranker_spec=self.spec.reranker,
            rocchio=self.spec.feedback.rocchio,
            leg_executor=self.legs,
        )
        self.open_targets = [
            applied_target(log_, self.topics.chunks, s) for s in range(self.spec.dense.shards)
        ]
        self.refresh()
        return True

    def readiness(self) -> tuple[bool, str]:
        """Ready once every view caught up with what the log held when it opened; else what is
        still catching up. Reads attributes only: it never waits for the views thread, which
        may spend minutes replaying the log (readiness stays true after, lag is staleness)."""
        if self.caught_up:
            return True, "ok"
        if self.open_targets is None:
            return False, "opening the views: waiting for Ingest to create the index's topics"
        behind = catching_up(self.progress(), self.open_targets)
        if behind is not None:
            return False, f"catching up with the log: {behind}"
        self.caught_up = True
        return True, "ok"

    def refresh(self) -> None:
        """Apply what `chunks.<generation>` has beyond each view's offset."""
        if not self.try_open():
            return
        assert self.dense is not None and self.view is not None and self.appliers is not None
        first, *others = [*self.dense.replicas, self.view]
        jobs = [self.appliers.submit(view.catch_up) for view in others]
        try:
            first.catch_up()
        finally:
            wait_for(jobs)  # no view applies past the refresh that asked it
        for job in jobs:
            job.result()  # a view's failure fails the refresh
        self.refreshed_at = time.monotonic()

    def progress(self) -> dict[str, list[int]]:
        """Chunk offsets every view of this replica has applied, per shard partition."""
        if self.dense is None or self.view is None:
            return {"dense": [0] * self.spec.dense.shards, "lexical": [0] * self.spec.dense.shards}
        return {"dense": self.dense.offsets(), "lexical": list(self.view.offsets)}

    def applied(self, ends: list[int]) -> bool:
        """Whether this replica's own views (every shard's replica and its BM25 view: all
        that it searches) applied the chunk offsets `ends`, after catching up now."""
        return not self.behind(ends)

    def behind(self, ends: list[int]) -> list[str]:
        """Which of this replica's views have not applied the chunk offsets `ends` yet, after
        catching up now (empty: all have)."""
        self.refresh()
        if self.dense is None or self.view is None:
            return ["the views are not open yet"]
        return [
            f"{view}: applied {offsets} of {ends}"
            for view, offsets in self.progress().items()
            if any(a < end for a, end in zip(offsets, ends, strict=True))
        ]

    def search(
        self,
        tenant_id: str,
        query: str,
        k: int | None,
        mode: str,
        rerank: bool | None,
        access: Access | None = None,
        paged: Paged | None = None,
    ) -> SearchResult:
        if self.engine is None:
            raise BackendUnavailable("the index is still opening; retry shortly")
        return self.engine.search(tenant_id, query, k, mode, rerank, access, paged)

    def document(self, tenant_id: str, source: str, doc_id: str, access: Access) -> list[Chunk]:
        """The chunks of one document of the tenant that `access` may read."""
        if self.dense is None:
            raise BackendUnavailable("the index is still opening; retry shortly")
        return self.dense.document_chunks(tenant_id, source, doc_id, access.expression())

    def document_summaries(self, tenant_id: str, access: Access) -> Summaries:
        """Every document of the tenant that `access` selects: (chunks, title, updated)."""
        if self.dense is None:
            raise BackendUnavailable("the index is still opening; retry shortly")
        return merge_summaries(self.dense.document_summaries(tenant_id, access.expression()))

    def answer(self, tenant_id: str, question: str, k: int, access: Access | None = None) -> Answer:
        if self.engine is None or self.embedder is None:
            raise BackendUnavailable("the index is still opening; retry shortly")
        if self.answers is None:
            self.answers = answer_service(self.spec, self.engine, self.embedder)
        return self.answers.answer(tenant_id, question, k, access)

    def stats(self, tenant_id: str) -> dict[str, Any]:
        if self.dense is None or self.view is None:
            raise BackendUnavailable("the index is still opening; retry shortly")
        vectors = self.dense.count(tenant_id)
        return {
            "tenant": tenant_id,
            "chunks": vectors,
            "documents": self.dense.documents(tenant_id),
            "dense_vectors": vectors,
            "lexical_docs": self.view.index.count(tenant_id),
            "shards": self.spec.dense.shards,
            "staleness_s": round(time.monotonic() - self.refreshed_at, 3),
            "freshness_bound_s": self.spec.freshness_s,
        }

    def close(self) -> None:
        for pool in (self.legs, self.appliers):
            if pool is not None:
                pool.shutdown(wait=True)
        if self.dense is not None:
            for replica in self.dense.replicas:
                replica.snapshot()  # a restart replays only what came after
        if self.view is not None:
            self.view.index.close()
        for snapshot_log in self.snapshot_logs:
            if snapshot_log is not self.log:
                snapshot_log.close()
        if self.log is not None:
            self.log.close()


class RemoteDenseIndex(ReadOnlyDense):
    """Fan out to every Shard<i> deployment at once, then merge by score."""

    def __init__(self, shards: list[DeploymentHandle], identity: ModelIdentity) -> None:
        self.shards = shards
        self.identity = identity

    def search(
        self,
        query_vector: Vectors,
        top_k: int,
        tenant_id: str,
        identity: ModelIdentity,
        access: TermExpr | None = None,
        *,
        with_chunks: int = 0,
    ) -> list[ScoredId]:
        results = hops.call_all(
            [
                (
                    f"dense.shard{i}",
                    partial(
                        s.search.remote,
                        query_vector,
                        top_k,
                        tenant_id,
                        identity,
                        access,
                        with_chunks,
                    ),
                )
                for i, s in enumerate(self.shards)
            ]
        )
        return merge_by_score(results, top_k)

    def get_chunks(self, tenant_id: str, chunk_ids: Sequence[str]) -> dict[str, Chunk]:
        found: dict[str, Chunk] = {}
        for chunks in hops.call_all(
            [
                (
                    f"fetch.shard{shard}",
                    partial(self.shards[shard].get_chunks.remote, tenant_id, ids),
                )
                for shard, ids in by_shard(tenant_id, chunk_ids, len(self.shards)).items()
            ]
        ):
            found.update(chunks)
        return found

    def count(self, tenant_id: str) -> int:
        counts = handle_failover.call_all([partial(s.count.remote, tenant_id) for s in self.shards])
        return sum(int(c) for c in counts)

    def document_keys(self, tenant_id: str) -> set[tuple[str, str]]:
        """(source, doc_id) of every document with chunks in the Shard<i> replicas."""
        found = handle_failover.call_all(
            [partial(s.documents.remote, tenant_id) for s in self.shards]
        )
        return set().union(*found)

    def documents(self, tenant_id: str) -> int:
        return len(self.document_keys(tenant_id))

    def document_chunks(
        self, tenant_id: str, source: str, doc_id: str, access: TermExpr | None = None
    ) -> list[Chunk]:
        """The chunks of one document that `access` selects, from every Shard<i>."""
        found = handle_failover.call_all(
            [
                partial(s.document_chunks.remote, tenant_id, source, doc_id, access)
                for s in self.shards
            ]
        )
        return [c for chunks in found for c in chunks]

    def document_summaries(self, tenant_id: str, access: TermExpr | None = None) -> list[Summaries]:
        """Each Shard<i>'s summaries of the tenant's documents that `access` selects."""
        return list(
            handle_failover.call_all(
                [partial(s.document_summaries.remote, tenant_id, access) for s in self.shards]
            )
        )


class RemoteLexical(ReadOnlyLexical):
    def __init__(self, handle: DeploymentHandle) -> None:
        self.handle = handle

    def search(
        self,
        query: str,
        top_k: int,
        tenant_id: str,
        access: TermExpr | None = None,
        *,
        with_chunks: int = 0,
    ) -> list[ScoredId]:
        return hops.call(
            "lexical",
            partial(self.handle.search.remote, query, top_k, tenant_id, access, with_chunks),
        )

    def count(self, tenant_id: str) -> int:
        return int(handle_failover.call(partial(self.handle.count.remote, tenant_id)))

    def location(self) -> str:
        return "the Lexical deployment's replicas (each keeps its own offsets)"

    def close(self) -> None:
        return None


def over_grpc(handle: DeploymentHandle) -> DeploymentHandle:
    """`handle` sending its calls over Serve's inter-deployment gRPC (`_by_reference=False`)
    instead of as Ray actor tasks: the call lands on the replica's main loop, where the query
    path's replicas run their code (serve_config.MAIN_LOOP_ENV), and the answer comes back in
    the reply, not through Ray's object store."""
    return handle.options(_by_reference=False)


class ClusterQuerySide:
    """A cluster Router's query path: the same QueryEngine over remote legs."""

    def __init__(
        self,
        spec: RagIndexSpec,
        embedder: Embedder,
        shards: list[DeploymentHandle],
        lexical: DeploymentHandle,
        reranker: DeploymentHandle | None,
    ) -> None:
        self.spec = spec
        self.generation = index_generation(spec)
        self.shards = [over_grpc(shard) for shard in shards]
        self.dense = RemoteDenseIndex(self.shards, embedder.identity)
        self.lexical = RemoteLexical(over_grpc(lexical))
        self.answers: AnswerService | None = None
        self.running = RunningReplicasCache(RUNNING_MAX_AGE_S)
        self.embedder = with_query_cache(embedder, spec.embedder.query_cache_size)
        # the BM25 leg's call to Lexical goes out while this thread embeds and fans out to
        # the shards (which RemoteDenseIndex already calls at once)
        self.legs = ThreadPoolExecutor(LEG_THREADS, thread_name_prefix="query-legs")
        self.engine = QueryEngine(
            self.embedder,
            self.dense,
            self.lexical,
            self.dense,
            fusion=spec.fusion,
            lexical_spec=spec.lexical,
            reranker=RemoteReranker(reranker) if reranker is not None else None,
            reranker_spec=spec.reranker,
            rocchio=spec.feedback.rocchio,
            leg_executor=self.legs,
        )

    def load_models(self) -> None:
        limit_threads()

    def try_open(self) -> bool:
        return True

    def readiness(self) -> tuple[bool, str]:
        return True, "ok"  # the Shard<i> and Lexical deployments catch up on their own

    def refresh(self) -> None:
        return None  # shard and lexical deployments catch up on their own

    def applied(self, ends: list[int]) -> bool:
        """Whether every running replica of every Shard<i> and of Lexical reported having
        applied the chunk offsets `ends` (router.applied, app.serve.progress)."""
        return not self.behind(ends)

    def behind(self, ends: list[int]) -> list[str]:
        """Which replicas of Shard<i> and Lexical have not reported applying the chunk offsets
        `ends` (empty: every running one has)."""
        app, _ = this_replica()
        try:
            reports = ray.get(registry(app, self.generation).reports.remote(), timeout=REGISTRY_S)
        except (GetTimeoutError, RayActorError) as err:  # being made or restarted: not known yet
            return [f"the progress registry did not answer ({type(err).__name__})"]
        targets: dict[str, dict[int, int]] = {
            shard_deployment_name(i): {i: end} for i, end in enumerate(ends)
        }
        targets[LEXICAL] = dict(enumerate(ends))
        running = self.running.get(app, list(targets))
        return views_behind(reports, running, targets, STALE_S)

    def search(
        self,
        tenant_id: str,
        query: str,
        k: int | None,
        mode: str,
        rerank: bool | None,
        access: Access | None = None,
        paged: Paged | None = None,
    ) -> SearchResult:
        with hops.recording() as log:
            result = self.engine.search(tenant_id, query, k, mode, rerank, access, paged)
        result.hops_ms = log.ms
        return result

    def document(self, tenant_id: str, source: str, doc_id: str, access: Access) -> list[Chunk]:
        """The chunks of one document of the tenant that `access` may read."""
        return self.dense.document_chunks(tenant_id, source, doc_id, access.expression())

    def document_summaries(self, tenant_id: str, access: Access) -> Summaries:
        """Every document of the tenant that `access` selects: (chunks, title, updated)."""
        return merge_summaries(self.dense.document_summaries(tenant_id, access.expression()))

    def answer(self, tenant_id: str, question: str, k: int, access: Access | None = None) -> Answer:
        if self.answers is None:
            self.answers = answer_service(self.spec, self.engine, self.embedder)
        return self.answers.answer(tenant_id, question, k, access)

    def stats(self, tenant_id: str) -> dict[str, Any]:
        vectors = self.dense.count(tenant_id)
        return {
            "tenant": tenant_id,
            "chunks": vectors,
            "documents": self.dense.documents(tenant_id),
            "dense_vectors": vectors,
            "lexical_docs": self.lexical.count(tenant_id),
            "shards": self.spec.dense.shards,
            "freshness_bound_s": self.spec.freshness_s,
        }

    def close(self) -> None:
        self.legs.shutdown(wait=True)


QuerySide = LocalQuerySide | ClusterQuerySide
