"""The Shard<i> deployment (cluster): one replica of one dense shard, a view of the log.

It materializes partition i of `chunks.<generation>` (vectors and its chunks' text) into its
own node-local directory, from its own snapshot's offset, else the newest snapshot published
to `snapshots.<generation>` (replica rank 0 publishes), else from 0, every REFRESH_S, and reports
the offset it applied to the application's progress registry (for `?wait=true`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ray.serve.handle import DeploymentHandle

from ragindex.app.serve.data_plane import (
    open_log,
    open_snapshot_log,
    replica_dir,
    replica_rank,
    tombstone_retention_s,
)
from ragindex.app.serve.hops import Served
from ragindex.app.serve.observability import setup_replica
from ragindex.app.serve.progress import ProgressReporter
from ragindex.app.serve.threads import limit_threads
from ragindex.app.serve.topic_view import TopicView
from ragindex.config import RagIndexSpec
from ragindex.filters import TermExpr
from ragindex.generations import index_generation
from ragindex.protocols import Vectors
from ragindex.serve_config import shard_deployment_name
from ragindex.shards import LogShardReplica, SnapshotTopic
from ragindex.topics import plane_snapshots_topic, plane_topics
from ragindex.types import Chunk, ModelIdentity, ScoredId


class ShardServer:
    """One replica of one dense shard, caught up from the log every REFRESH_S."""

    async def __init__(  # type: ignore[misc]  # Serve awaits async constructors
        self,
        spec: dict[str, Any],
        data_dir: str,
        name: str,
        namespace: str,
        shard: int,
        embedder: DeploymentHandle,
    ) -> None:
        setup_replica("shard")
        limit_threads()
        self.spec = RagIndexSpec.model_validate(spec)
        self.topics = plane_topics(self.spec, name, namespace)
        self.shard = shard
        self.directory = (
            replica_dir(Path(data_dir), self.spec, shard_deployment_name(shard), replica_rank())
            / "shard"
        )
        self.log = open_log(Path(data_dir))
        self.snapshot_log = open_snapshot_log(Path(data_dir), self.log, shard)
        self.identity, _ = await embedder.describe.remote()
        snapshots = SnapshotTopic(
            self.snapshot_log,
            plane_snapshots_topic(self.spec, name, namespace),
            shard,
            self.spec.dense.shards,
            self.topics.chunks,
            self.identity,
        )
        publish = replica_rank() == 0  # one replica of each shard publishes its snapshots
        reporter = ProgressReporter(shard_deployment_name(shard), index_generation(self.spec))
        self.replica: TopicView[LogShardReplica] = TopicView(
            f"shard{shard}",
            self.log,
            self.topics.chunks,
            lambda: LogShardReplica(
                self.log,
                self.topics.chunks,
                self.shard,
                self.directory,
                self.identity,
                self.spec.dense.hnsw,
                self.spec.dense.exact_threshold,
                snapshots,
                publish=publish,
                tombstone_retention_s=tombstone_retention_s(self.spec),
                index=self.spec.dense.index,
            ),
            f"shard {shard} is still opening",
            lambda replica: reporter.report({shard: replica.offset}),
            view="dense",
            offsets=lambda replica: {shard: replica.offset},
        )

    async def search(
        self,
        query_vector: Vectors,
        top_k: int,
        tenant_id: str,
        identity: ModelIdentity,
        access: TermExpr | None = None,
        with_chunks: int = 0,
    ) -> Served[list[ScoredId]]:
        return await self.replica.served(
            lambda v: v.search(
                query_vector, top_k, tenant_id, identity, access, with_chunks=with_chunks
            )
        )

    async def get_chunks(self, tenant_id: str, chunk_ids: list[str]) -> Served[dict[str, Chunk]]:
        return await self.replica.served(lambda v: v.get_chunks(tenant_id, chunk_ids))

    async def count(self, tenant_id: str) -> int:
        return await self.replica.run(lambda v: v.count(tenant_id))

    async def documents(self, tenant_id: str) -> set[tuple[str, str]]:
        return await self.replica.run(lambda v: v.documents(tenant_id))

    async def document_chunks(
        self, tenant_id: str, source: str, doc_id: str, access: TermExpr | None = None
    ) -> list[Chunk]:
        return await self.replica.run(
            lambda v: v.document_chunks(tenant_id, source, doc_id, access)
        )

    async def document_summaries(
        self, tenant_id: str, access: TermExpr | None = None
    ) -> dict[tuple[str, str], tuple[int, str, str | None]]:
        return await self.replica.run(lambda v: v.document_summaries(tenant_id, access))

    def __del__(self) -> None:
        self.replica.close(lambda replica: replica.snapshot())
