"""The Ingest deployment: accepts documents into `docs`, and runs the ingest worker.

`append` validates a batch and appends it to `docs` (the file log has one writer process, so
every runtime appends here); it returns once the log acknowledged, on its own thread so that
accepting never waits behind embedding. The worker loop consumes this replica's share of the
`docs` partitions into `chunks.<generation>`, woken at once by this replica's own appends
(records another Ingest replica appended to its partitions are found within POLL_TIMEOUT_S):
every ASSIGN_EVERY_S when idle (every ASSIGN_BUSY_S under a steady stream, so that a burst's
batches follow each other) it asks Serve which Ingest
replicas run and takes `assigned_partitions` (round robin in replica-id order), claiming the
ones it gains (fencing their previous owner) and dropping the ones it lost, so autoscaling
Ingest up or down, or losing a replica, rebalances the partitions within seconds. A replica
starts with none and takes its share once Serve lists it as running. In the cluster runtime each
replica reports the partitions it owns, with their committed offsets, to the progress registry
(view "Ingest"), so who consumes what is visible from outside.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ray.serve.handle import DeploymentHandle

from ragindex.app.serve.data_plane import applied_target, ensure_topics, open_log
from ragindex.app.serve.observability import setup_replica
from ragindex.app.serve.pools import RemoteEmbedder
from ragindex.app.serve.progress import ProgressReporter, running_replicas, this_replica
from ragindex.app.serve.threads import ReplicaThread, limit_threads, release_free_heap
from ragindex.config import ONNX_BACKENDS, RagIndexSpec
from ragindex.errors import BackendUnavailable, InvalidInput
from ragindex.generations import index_generation
from ragindex.ingest import IngestWorker, as_documents, assigned_partitions
from ragindex.ingest.worker import READ_BATCH, BatchTrace
from ragindex.models import TokenCounter, load_embedder, resolve_model_path
from ragindex.protocols import Embedder
from ragindex.records import docs_records, docs_tombstone
from ragindex.serve_config import INGEST
from ragindex.telemetry import END_OFFSETS_EVERY_S, instruments
from ragindex.topics import plane_topics
from ragindex.types import Document, validate_tenant

log = logging.getLogger("ragindex.serve")

POLL_TIMEOUT_S = 0.1
RECHECK_S = 0.1  # applied_targets checks the log at least this often
ASSIGN_EVERY_S = 2.0  # between bursts of batches
ASSIGN_BUSY_S = 10.0  # while batches keep coming (a rebalance asks Serve's controller, ~0.1 s)
RETRY_S = 1.0
WRITABLE_TIMEOUT_S = 1.5


def local_token_counter(spec: RagIndexSpec) -> Callable[[str], int] | None:
    """The pool's own token count, computed in this replica, for the ONNX backends (their
    count is the tokenizer.json alone); None for the others, which count in the pool."""
    if spec.embedder.backend not in ONNX_BACKENDS:
        return None
    return TokenCounter(resolve_model_path(spec.embedder.model, spec.embedder.source))


class Ingest:
    """Appends documents to `docs`; consumes its partitions into `chunks.<generation>`."""

    async def __init__(  # type: ignore[misc]  # Serve awaits async constructors
        self,
        spec: dict[str, Any],
        data_dir: str,
        name: str,
        namespace: str,
        embedder: DeploymentHandle | None = None,
        report_partitions: bool = False,
    ) -> None:
        """`report_partitions`: report the owned partitions to the progress registry (the
        cluster runtime's; the embedded runtime runs no registry actor)."""
        setup_replica("ingest")
        self.spec = RagIndexSpec.model_validate(spec)
        self.reporter = (
            ProgressReporter(INGEST, index_generation(self.spec)) if report_partitions else None
        )
        self.topics = plane_topics(self.spec, name, namespace)
        self.log = open_log(Path(data_dir))
        self.accepting = ReplicaThread("ingest-append")
        self.worker_thread = ReplicaThread("ingest-worker")
        await self.accepting.run(ensure_topics, self.log, self.topics)
        remote: Embedder | None = None
        if embedder is not None:
            identity, max_seq = await embedder.describe.remote()
            remote = RemoteEmbedder(embedder, identity, max_seq, local_token_counter(self.spec))
        self.worker: IngestWorker = await self.worker_thread.run(self._open, remote, [])
        self._assigned_at = 0.0
        self._lag_at = 0.0  # when the consumer lag was last recorded (monotonic)
        self._lag_partitions: set[int] = set()  # the docs partitions it was recorded for
        self._docs_ends: dict[int, int] = {}  # docs partition -> its end as last known here
        self._last_trace: BatchTrace | None = None  # the newest batch already recorded
        self._idle = True  # the last poll found nothing
        self._appended = asyncio.Event()  # set by append: wakes the worker loop
        self._committed = asyncio.Event()  # set (and replaced) after the worker committed
        self._loop = asyncio.get_running_loop().create_task(self._consume_forever())

    def _open(self, embedder: Embedder | None, partitions: list[int]) -> IngestWorker:
        limit_threads()
        return IngestWorker(
            self.log,
            self.topics,
            embedder or load_embedder(self.spec.embedder),
            self.spec.chunking,
            partitions,
        )

    def _rebalance(self) -> None:
        """Take this replica's share of the partitions among the running Ingest replicas;
        a change rebuilt the manifest from the chunks topic: give back what that replay
        freed (#16)."""
        app, me = this_replica()
        running = running_replicas(app, [INGEST]).get(INGEST, set())
        before = list(self.worker.partitions)
        self.worker.assign(assigned_partitions(me, running, self.topics.docs_partitions))
        if self.worker.partitions != before:
            release_free_heap()
        if self.reporter is not None:
            self.reporter.report(self.worker.committed_offsets())
        self._record_lag()

    def _record_lag(self) -> None:
        """Per `docs` partition this replica owns, its end offset, the committed offset and
        their difference (Kafka's transaction markers count in it); 0 for a partition it gave
        up (another replica's lag counts there). Every END_OFFSETS_EVERY_S at most, and at once
        when the partitions it owns change; between, its own appends and batches update them
        (`_record_append`, `_record_batches`)."""
        owned = set(self.worker.partitions)
        if owned == self._lag_partitions and time.monotonic() - self._lag_at < END_OFFSETS_EVERY_S:
            return
        self._lag_at = time.monotonic()
        made = instruments()
        try:
            committed = self.worker.committed_offsets()
            for p, offset in committed.items():
                end = self._docs_ends[p] = self.log.end_offset(self.topics.docs, p)
                made.log_end.labels("docs", str(p)).set(end)
                made.ingest_committed.labels(str(p)).set(offset)
                made.ingest_lag.labels(str(p)).set(max(0, end - offset))
            for p in self._lag_partitions - committed.keys():
                made.ingest_lag.labels(str(p)).set(0)
            self._lag_partitions = set(committed)
        except Exception as err:  # metrics never stop ingest
            log.warning("could not record the consumer lag: %s", err)

    def _record_batches(self) -> None:
        """The batches the worker finished since the last call: documents, chunks embedded,
        and each step's time (ingest.worker.BatchTrace)."""
        traces = self.worker.traces
        new: list[BatchTrace] = []
        for trace in reversed(traces):
            if trace is self._last_trace:
                break
            new.append(trace)
        if not new:
            return
        self._last_trace = traces[-1]
        made = instruments()
        owned = self._lag_partitions
        for p, offset in self.worker.progress.next_offsets.items():
            if p in owned:  # what it just committed; the end as this replica last knew it
                made.ingest_committed.labels(str(p)).set(offset)
                end = max(self._docs_ends.get(p, offset), offset)
                made.ingest_lag.labels(str(p)).set(end - offset)
        for t in new:
            made.ingest_documents.inc(t.records)
            made.ingest_chunks.inc(t.embedded)
            made.ingest_embed_batch.observe(t.embedded)
            steps = (
                ("read", t.read_at - t.started_at),
                ("plan", t.planned_at - t.read_at),
                ("embed", t.embedded_at - t.planned_at),
                ("commit", t.committed_at - t.embedded_at),
            )
            for step, seconds in steps:
                made.ingest_step.labels(step).observe(max(0.0, seconds))

    async def _consume_forever(self) -> None:
        """Rebalance now and then; poll and process; a failed batch (log down) is retried from
        its committed offset."""
        while True:
            try:
                since = time.monotonic() - self._assigned_at
                if since >= (ASSIGN_EVERY_S if self._idle else ASSIGN_BUSY_S):
                    await self.worker_thread.run(self._rebalance)
                    self._assigned_at = time.monotonic()
                self._appended.clear()  # appends from now on wake the wait below
                done = await self.worker_thread.run(self.worker.poll, READ_BATCH, 0.0)
                self._record_batches()
                self._idle = not done
                if done:
                    committed, self._committed = self._committed, asyncio.Event()
                    committed.set()  # wakes applied_targets
                else:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._appended.wait(), POLL_TIMEOUT_S)
            except Exception:
                log.exception("ingest batch failed; retrying from the committed offset")
                await asyncio.sleep(RETRY_S)

    def _append(self, records: list[tuple[int, bytes, bytes | None]]) -> list[int]:
        made = instruments()
        started = time.perf_counter()
        try:
            offsets = self.log.append(self.topics.docs, records)
        except InvalidInput:
            raise
        except Exception as err:  # the log failed: nothing was acknowledged or stored
            made.log_append_failures.labels("docs").inc()
            raise BackendUnavailable(
                f"the log did not take the write (nothing was stored; retry later): {err}"
            ) from err
        made.log_append.labels("docs").observe(time.perf_counter() - started)
        for (p, _, _), offset in zip(records, offsets, strict=True):
            if offset + 1 > self._docs_ends.get(p, 0):
                self._docs_ends[p] = offset + 1
                made.log_end.labels("docs", str(p)).set(offset + 1)
        return offsets

    async def append(self, tenant_id: str, documents: list[Document]) -> list[dict[str, Any]]:
        """Validate, append to `docs`, return where each document landed once durable."""
        docs = as_documents(documents)
        records = docs_records(validate_tenant(tenant_id), docs, self.topics.docs_partitions)
        offsets = await self.accepting.run(self._append, records)
        self._appended.set()
        return [
            {"source": d.source, "doc_id": d.doc_id, "partition": r[0], "offset": o}
            for d, r, o in zip(docs, records, offsets, strict=True)
        ]

    async def delete(self, tenant_id: str, source: str, doc_id: str) -> dict[str, Any]:
        """Append a tombstone for the document (its chunks are removed downstream)."""
        tenant = validate_tenant(tenant_id)
        record = docs_tombstone(tenant, source, doc_id, self.topics.docs_partitions)
        partition = record[0]
        (offset,) = await self.accepting.run(self._append, [record])
        self._appended.set()
        return {"source": source, "doc_id": doc_id, "partition": partition, "offset": offset}

    async def delete_many(
        self, tenant_id: str, keys: list[tuple[str, str]]
    ) -> list[dict[str, Any]]:
        """Append a tombstone for each document (source, doc_id), in one append; where each
        landed once durable, in order."""
        tenant = validate_tenant(tenant_id)
        if not keys:
            return []
        records = [docs_tombstone(tenant, s, d, self.topics.docs_partitions) for s, d in keys]
        offsets = await self.accepting.run(self._append, records)
        self._appended.set()
        return [
            {"source": s, "doc_id": d, "partition": r[0], "offset": o}
            for (s, d), r, o in zip(keys, records, offsets, strict=True)
        ]

    async def batch_traces(self) -> list[dict[str, Any]]:
        """The worker's latest batches and when each step ended (ingest.worker.BatchTrace)."""
        return await self.worker_thread.run(lambda: [asdict(t) for t in self.worker.traces])

    async def processed(self, partition: int) -> int:
        """The next `docs` offset of `partition` the workers have not yet committed."""
        return await self.accepting.run(
            self.log.committed, self.topics.group, self.topics.docs, partition
        )

    async def applied_targets(self, needed: dict[int, int], timeout_s: float) -> list[int] | None:
        """Once the workers committed every `docs` partition of `needed` up to its offset
        (partition -> offset): per chunks partition, the offset a view must have applied to
        hold those documents' chunks; None if that did not happen within `timeout_s`.

        Where this replica's worker processes every needed record, its progress answers
        (ingest.worker.WorkerProgress: checked again as soon as it commits). Otherwise the
        log's committed offsets decide (checked every RECHECK_S, since another Ingest replica
        commits those), and the target is the end of each chunks partition."""
        deadline = time.monotonic() + timeout_s
        confirmed: set[int] = set()  # partitions the log showed committed (they stay so)
        while True:
            committed = self._committed  # taken before checking: a commit meanwhile sets it
            progress = self.worker.progress
            elsewhere = {p: o for p, o in needed.items() if not progress.processes(p, o)}
            mine = all(progress.processed(p, o) for p, o in needed.items() if p not in elsewhere)
            if mine and not elsewhere:
                return list(progress.chunk_ends)
            if mine:
                for p, offset in elsewhere.items():
                    if p not in confirmed and await self.processed(p) >= offset:
                        confirmed.add(p)
                if confirmed >= elsewhere.keys():
                    return await self.accepting.run(self._chunk_ends)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(committed.wait(), min(remaining, RECHECK_S))

    def _chunk_ends(self) -> list[int]:
        """Per `chunks` partition, the offset after its last record: what a view must have
        applied to be current (Kafka's end offset may sit past a transaction marker)."""
        return [applied_target(self.log, self.topics.chunks, s) for s in range(self.topics.shards)]

    async def writable(self) -> str:
        """ "ok" when the log answers and its writer takes writes, else why writes would fail
        now (for /readyz; a fenced file-log writer is reopened by the check)."""
        try:
            problem = await asyncio.wait_for(
                self.accepting.run(self._writer_problem), WRITABLE_TIMEOUT_S
            )
        except Exception as err:
            return f"the log does not answer, writes are refused: {type(err).__name__}: {err}"
        return "ok" if problem is None else f"writes are refused: {problem}"

    def _writer_problem(self) -> str | None:
        self.log.end_offset(self.topics.docs, 0)
        return self.log.writer_problem()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self._loop.cancel()
            self.worker_thread.close()
            self.accepting.close()
            self.log.close()
