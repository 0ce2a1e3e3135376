"""The Ingest deployment: the single writer (chunk, diff, embed; dense WAL fsync, BM25, store)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from ray.serve.handle import DeploymentHandle

from ragindex.app.engine import check_stamp, open_lexical
from ragindex.app.serve.pools import RemoteEmbedder
from ragindex.app.serve.threads import ReplicaThread, limit_threads
from ragindex.config import RagIndexSpec
from ragindex.ingest.pipeline import IngestPipeline
from ragindex.ingest.store import ChunkStore
from ragindex.models.embedder import load_embedder
from ragindex.protocols import Embedder
from ragindex.shards import ShardedDenseIndex
from ragindex.types import Document


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


class Ingest:
    """The single writer: chunk, diff, embed, then dense (WAL fsync) + BM25 + chunk store."""

    async def __init__(  # type: ignore[misc]  # Serve awaits async constructors
        self, spec: dict[str, Any], data_dir: str, embedder: DeploymentHandle | None = None
    ) -> None:
        self.spec = RagIndexSpec.model_validate(spec)
        self.data_dir = Path(data_dir)
        self.worker = ReplicaThread("ingest")
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
