"""The Router deployment: FastAPI ingress, auth, the query path, writes forwarded to Ingest."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

from ray.serve.handle import DeploymentHandle

from ragindex.app.engine import auth_dir
from ragindex.app.serve.pools import RemoteEmbedder
from ragindex.app.serve.query_side import ClusterQuerySide, LocalQuerySide, QuerySide
from ragindex.app.serve.threads import ReplicaThread, refresh_forever
from ragindex.config import RagIndexSpec
from ragindex.router.answer import Answer
from ragindex.router.auth import TokenVerifier
from ragindex.router.http import create_app
from ragindex.router.query import SearchResult
from ragindex.serve_config import (
    Runtime,
)
from ragindex.types import Document


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
        self.worker = ReplicaThread("router")
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
