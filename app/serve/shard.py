"""The Shard<i> deployment (cluster): one read replica of one dense shard."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from ragindex.app.serve.threads import ReplicaThread, limit_threads, refresh_forever
from ragindex.config import RagIndexSpec
from ragindex.errors import BackendUnavailable
from ragindex.protocols import Vectors
from ragindex.shards import ShardReplica
from ragindex.shards.sharded import shard_dir
from ragindex.types import ModelIdentity, ScoredId


class ShardServer:
    """One read replica of one dense shard, tailing its WAL every REFRESH_S."""

    async def __init__(  # type: ignore[misc]  # Serve awaits async constructors
        self, spec: dict[str, Any], data_dir: str, shard: int
    ) -> None:
        limit_threads()
        parsed = RagIndexSpec.model_validate(spec)
        self.directory = shard_dir(Path(data_dir) / "dense", shard)
        self.hnsw, self.exact = parsed.dense.hnsw, parsed.dense.exact_threshold
        self.worker = ReplicaThread(f"shard{shard}")
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
