"""The Lexical deployment (cluster): the BM25 reader."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from ragindex.app.engine import open_lexical
from ragindex.app.serve.query_side import index_exists, reload_lexical, stamped_identity
from ragindex.app.serve.threads import ReplicaThread, refresh_forever
from ragindex.config import RagIndexSpec
from ragindex.errors import BackendUnavailable
from ragindex.protocols import LexicalIndex
from ragindex.types import ScoredId


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
        self.worker = ReplicaThread("lexical")
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
