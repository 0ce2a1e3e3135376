"""The Lexical deployment (cluster): the BM25 view of `chunks.<generation>`, and its searches.

Each replica consumes the chunks topic into the backend the spec names: Elasticsearch (the
shared alias; replicas write the same idempotent upserts) or its own tantivy index in its
node-local directory. Offsets are stored after each successful bulk write, and reported to
the application's progress registry (for `?wait=true`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ray.serve.handle import DeploymentHandle

from ragindex.app.serve.data_plane import open_log, replica_dir, replica_rank
from ragindex.app.serve.hops import Served
from ragindex.app.serve.observability import setup_replica
from ragindex.app.serve.progress import ProgressReporter
from ragindex.app.serve.query_side import open_bm25_view
from ragindex.app.serve.topic_view import TopicView
from ragindex.config import RagIndexSpec
from ragindex.filters import TermExpr
from ragindex.generations import index_generation
from ragindex.lexical import LexicalView
from ragindex.serve_config import LEXICAL
from ragindex.topics import plane_topics
from ragindex.types import ScoredId


class LexicalServer:
    """The BM25 view (spec.lexical.backend), caught up from the log every REFRESH_S."""

    async def __init__(  # type: ignore[misc]  # Serve awaits async constructors
        self,
        spec: dict[str, Any],
        data_dir: str,
        name: str,
        namespace: str,
        embedder: DeploymentHandle,
    ) -> None:
        setup_replica("lexical")
        self.spec = RagIndexSpec.model_validate(spec)
        self.topics = plane_topics(self.spec, name, namespace)
        self.directory = replica_dir(Path(data_dir), self.spec, LEXICAL, replica_rank())
        self.log = open_log(Path(data_dir))
        self.identity, _ = await embedder.describe.remote()
        reporter = ProgressReporter(LEXICAL, index_generation(self.spec))
        self.view: TopicView[LexicalView] = TopicView(
            "lexical",
            self.log,
            self.topics.chunks,
            lambda: open_bm25_view(
                self.spec,
                self.log,
                self.topics.chunks,
                self.directory,
                self.identity,
                namespace=namespace,
                name=name,
            ),
            "the BM25 index is still opening",
            lambda view: reporter.report(dict(enumerate(view.offsets))),
            view="lexical",
            offsets=lambda view: dict(enumerate(view.offsets)),
        )

    async def search(
        self,
        query: str,
        top_k: int,
        tenant_id: str,
        access: TermExpr | None = None,
        with_chunks: int = 0,
    ) -> Served[list[ScoredId]]:
        return await self.view.served(
            lambda v: v.index.search(query, top_k, tenant_id, access, with_chunks=with_chunks)
        )

    async def count(self, tenant_id: str) -> int:
        return await self.view.run(lambda v: v.index.count(tenant_id))

    def __del__(self) -> None:
        self.view.close(lambda view: view.index.close())
