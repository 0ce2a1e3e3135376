"""The Router deployment: FastAPI ingress, auth, the query path, writes appended through Ingest.

Three executors, so that no kind of request waits behind another (#14): searches on a small
pool, answers (which may call a slow generator) on their own bounded pool, and the views'
catch-up (the only writer of this replica's local views) on one thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from pathlib import Path
from typing import Any

from ray.serve.handle import DeploymentHandle

from ragindex.app.index_opening import auth_dir
from ragindex.app.serve.data_plane import open_log, replica_dir, replica_rank
from ragindex.app.serve.generation_report import ReportCut, generation_report
from ragindex.app.serve.hops import served
from ragindex.app.serve.observability import setup_replica
from ragindex.app.serve.pools import RemoteEmbedder
from ragindex.app.serve.query_side import (
    ClusterQuerySide,
    LocalQuerySide,
    QuerySide,
)
from ragindex.app.serve.threads import (
    LatestResult,
    ReplicaThread,
    limit_threads,
    refresh_forever,
    release_free_heap,
)
from ragindex.config import RagIndexSpec
from ragindex.errors import BackendUnavailable
from ragindex.generations import index_generation
from ragindex.models import SerializedEmbedder, load_embedder
from ragindex.protocols import Embedder, Log
from ragindex.router import (
    Access,
    Answer,
    DocumentPage,
    Paged,
    SearchResult,
    TokenVerifier,
    bounded_deletes,
    create_app,
    page_documents,
)
from ragindex.serve_config import REPORT_TOKEN_ENV, ROUTER, Runtime
from ragindex.telemetry import END_OFFSETS_EVERY_S, observe_generation, observe_view
from ragindex.topics import plane_topics
from ragindex.types import Chunk, Document

log = logging.getLogger("ragindex.serve")

SEARCH_THREADS = 4
ANSWER_THREADS = 2
WAIT_POLL_S = 0.02
WAIT_SLICE_S = 0.5  # the longest one applied_targets call holds a request slot of Ingest
# How long an ask of the build report waits for the one being made; a report that takes longer
# (a large corpus) is answered by a later ask, so it lands whatever the asker's timeout.
REPORT_WAIT_S = 3.0


class Router:
    """FastAPI ingress: auth, limits, the query path, and writes forwarded to Ingest."""

    async def __init__(  # type: ignore[misc]  # Serve awaits async constructors
        self,
        spec: dict[str, Any],
        data_dir: str,
        name: str,
        namespace: str,
        runtime: Runtime,
        ingest: DeploymentHandle,
        embedder: DeploymentHandle | None = None,
        shards: list[DeploymentHandle] | None = None,
        lexical: DeploymentHandle | None = None,
        reranker: DeploymentHandle | None = None,
    ) -> None:
        setup_replica("router")
        self.spec = RagIndexSpec.model_validate(spec)
        self.data_dir = Path(data_dir)
        self.verifier = TokenVerifier(auth_dir(self.data_dir))
        self.ingest = ingest
        self.topics = plane_topics(self.spec, name, namespace)
        self.report_log: Log | None = None
        self.report_cut = ReportCut()  # where the build report stands, held between reports
        self.reports = LatestResult(lambda: self.views.run(self._generation_report), REPORT_WAIT_S)
        self.views = ReplicaThread("router-views")
        self.searches = ReplicaThread("router-search", SEARCH_THREADS)
        self.answers = ReplicaThread("router-answer", ANSWER_THREADS)
        self.side: QuerySide
        if runtime == "local":
            directory = replica_dir(self.data_dir, self.spec, ROUTER, replica_rank())
            self.side = LocalQuerySide(  # one replica publishes shard snapshots to the log
                self.spec, self.data_dir, name, namespace, directory, publish=replica_rank() == 0
            )
        else:
            assert shards is not None and lexical is not None
            query_embedder: Embedder
            if embedder is None:  # a CPU embedder: this replica embeds its queries itself
                query_embedder = await self.views.run(self._load_query_embedder)
            else:  # the QueryEmbedder pool (GPUs) batches them
                identity, max_seq = await embedder.describe.remote()
                query_embedder = RemoteEmbedder(embedder, identity, max_seq)
            self.side = ClusterQuerySide(self.spec, query_embedder, shards, lexical, reranker)
        await self.views.run(self.side.load_models)
        self._ends_at = 0.0  # when the local views' end offsets were last asked (monotonic)
        self._refresher = asyncio.get_running_loop().create_task(
            refresh_forever(self.views, self._refresh, "refresh failed")
        )
        self._heap_trimmed = False

    def _refresh(self) -> None:
        """Catch the local views up (cluster: nothing to apply here), and record their offsets
        and staleness: a refresh reads every view to the end of the log."""
        started = time.time()
        current = False
        try:
            self.side.refresh()
            current = True
        finally:  # a failed refresh is recorded too: the views' staleness grows
            self._record_views(started if current else None)

    def _record_views(self, current_at: float | None) -> None:
        side = self.side
        if not isinstance(side, LocalQuerySide) or side.log is None or side.engine is None:
            return
        try:
            ends = None
            if time.monotonic() - self._ends_at >= END_OFFSETS_EVERY_S:
                topic = side.topics.chunks
                ends = {p: side.log.end_offset(topic, p) for p in range(side.topics.shards)}
                self._ends_at = time.monotonic()
            for view, offsets in side.progress().items():
                observe_view(view, dict(enumerate(offsets)), current_at=current_at, ends=ends)
        except Exception as err:  # metrics never fail a refresh
            log.warning("could not record the views' metrics: %s", err)

    def _load_query_embedder(self) -> Embedder:
        limit_threads()
        return SerializedEmbedder(load_embedder(self.spec.embedder))

    def __serve_build_asgi_app__(self) -> Any:
        return create_app(
            self,
            self.verifier,
            limits=self.spec.limits,
            report_token=os.environ.get(REPORT_TOKEN_ENV) or None,
            cursor_generation=index_generation(self.spec),
        )

    # Backend protocol for router.http

    async def search(
        self,
        tenant_id: str,
        query: str,
        k: int | None,
        mode: str,
        rerank: bool | None,
        access: Access | None = None,
        paged: Paged | None = None,
    ) -> SearchResult:
        answer = await served(
            self.searches.run,
            lambda: self.side.search(tenant_id, query, k, mode, rerank, access, paged),
        )
        answer.value.hops_ms["router.queued"] = answer.queued_ms
        return answer.value

    async def document(
        self, tenant_id: str, source: str, doc_id: str, access: Access
    ) -> list[Chunk]:
        return await self.searches.run(self.side.document, tenant_id, source, doc_id, access)

    async def list_documents(
        self, tenant_id: str, access: Access, after: tuple[str, str] | None, limit: int
    ) -> DocumentPage:
        summaries = await self.searches.run(self.side.document_summaries, tenant_id, access)
        return page_documents(summaries, after, limit)

    async def delete_matching(
        self, tenant_id: str, access: Access, max_documents: int, wait_s: float | None
    ) -> dict[str, Any]:
        """Tombstone every document of the tenant that `access` selects, in one append, or
        none of them (TooManyMatches) when they are more than `max_documents`. What matches
        is what this Router's views hold when it looks."""
        summaries = await self.searches.run(self.side.document_summaries, tenant_id, access)
        keys = bounded_deletes(summaries, max_documents)
        if not keys:
            return {"accepted": [], "applied": None if wait_s is None else True}
        accepted: list[dict[str, Any]] = await self.ingest.delete_many.remote(tenant_id, keys)
        return {"accepted": accepted, "applied": await self._wait(accepted, wait_s)}

    async def upsert(
        self, tenant_id: str, documents: list[Document], wait_s: float | None
    ) -> dict[str, Any]:
        accepted: list[dict[str, Any]] = await self.ingest.append.remote(tenant_id, documents)
        return {"accepted": accepted, "applied": await self._wait(accepted, wait_s)}

    async def delete(
        self, tenant_id: str, source: str, doc_id: str, wait_s: float | None
    ) -> dict[str, Any]:
        accepted: dict[str, Any] = await self.ingest.delete.remote(tenant_id, source, doc_id)
        return {"accepted": [accepted], "applied": await self._wait([accepted], wait_s)}

    async def _wait(self, accepted: list[dict[str, Any]], wait_s: float | None) -> bool | None:
        """Read-your-writes: until the workers committed these `docs` offsets, then until every
        view applied the chunk offsets Ingest names for them (local: this replica's own;
        cluster: every running replica of every shard and of the BM25 view); False at the
        timeout."""
        if wait_s is None:
            return None
        deadline = time.monotonic() + wait_s
        needed: dict[int, int] = {}
        for a in accepted:
            needed[a["partition"]] = max(needed.get(a["partition"], 0), a["offset"] + 1)
        # Ingest answers as soon as its worker commits them; in slices, so that a waiting
        # writer never holds one of Ingest's few request slots (appends need them) for long.
        while (ends := await self.ingest.applied_targets.remote(needed, WAIT_SLICE_S)) is None:
            if time.monotonic() > deadline:
                return False
        while True:
            if await self.views.run(self.side.applied, ends):
                return True
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(WAIT_POLL_S)

    async def answer(
        self, tenant_id: str, question: str, k: int, access: Access | None = None
    ) -> Answer:
        return await self.answers.run(self.side.answer, tenant_id, question, k, access)

    async def stats(self, tenant_id: str) -> dict[str, Any]:
        return await self.searches.run(self.side.stats, tenant_id)

    async def ready(self) -> tuple[bool, str]:
        """Ready once the views caught up with the log (503 saying what is behind until then;
        never queued behind the catch-up itself); `degraded` (still ready) if writes cannot
        land."""
        ok, why = self.side.readiness()
        if not ok:
            return False, why
        if not self._heap_trimmed:  # the views replayed the log: give back what that freed
            await self.views.run(release_free_heap)  # (#16: glibc keeps it mapped otherwise)
            self._heap_trimmed = True
        try:
            writable = await asyncio.wait_for(self.ingest.writable.remote(), timeout=2.0)
        except Exception as err:
            return True, f"degraded: ingest is not answering ({type(err).__name__})"
        return (True, "ok") if writable == "ok" else (True, f"degraded: {writable}")

    async def generation_report(self) -> dict[str, Any]:
        """This generation's build report (app/serve/generation_report.py), made in the
        background on the views thread (it owns the local runtime's views): an ask starts one
        if none is being made and waits up to REPORT_WAIT_S for it; past that it gets the last
        report made (503 before the first), and a later ask collects the new one."""
        report = await self.reports.ask()
        if report is None:
            raise BackendUnavailable("the build report is being made: ask again shortly")
        return report

    def _generation_report(self) -> dict[str, Any]:
        if self.report_log is None:
            self.report_log = open_log(self.data_dir)
        if not self.side.try_open():
            raise BackendUnavailable("the views are not open yet: no generation report")

        report, self.report_cut = generation_report(
            self.report_log,
            self.topics,
            index_generation(self.spec),
            self.side,
            self.spec.generations.self_check_sample,
            self.side.behind,  # every view caught up (cluster: every running replica)
            self.report_cut,
        )
        observe_generation(report.consumed, report.end, report.checks, bool(report.waiting_on))
        return report.to_json()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self._refresher.cancel()
            self.views.call(self.side.close)
            if self.report_log is not None:
                self.report_log.close()
            for pool in (self.views, self.searches, self.answers):
                pool.close()
