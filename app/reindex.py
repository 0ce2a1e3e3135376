"""`ragindex reindex`: build a new index generation from the log, promote it when complete.

On one machine (the file log in the data directory):
1. The record (`generations.json`) marks the new generation as building beside the serving one.
2. Backfill: an ingest worker of the new generation (its own consumer group, so it starts at
   offset 0) replays the compacted `docs` log through the new embedder into `chunks.<new>`.
   The serving generation's worker runs alongside in the same loop, so documents appended to
   the log while the backfill runs (`Reindex.log`, in this process: the file log has one
   writer) reach both generations; the serving generation answers queries throughout.
3. Verification (`ragindex.generations.promotion_failures`): the backfill reached the end of
   `docs`, each tenant's live documents all have chunks in the new generation's views, and the
   self-check: each sampled document's title retrieves it in the top 10 of the new dense leg.
4. Promotion: on Elasticsearch the read alias moves to the new generation's index (one
   `_aliases` call), then one atomic write of the record; the old generation is retained for
   `spec.generations.rollbackWindowHours` (`ragindex reindex --rollback`); generations past
   that window lose their `chunks` topic and replica directories at the next promotion. A
   failed check leaves the old generation serving, marks the new one failed with the reason,
   and raises PromotionRefused naming the failed checks.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ragindex.app.generation_record import read_record, write_record
from ragindex.app.index_opening import elasticsearch_connection
from ragindex.app.serve.data_plane import (
    DEFAULT_NAMESPACE,
    ensure_topics,
    open_log,
    open_snapshot_log,
    replica_dir,
)
from ragindex.app.serve.generation_report import gather_evidence
from ragindex.app.serve.query_side import LocalQuerySide
from ragindex.app.serve_cli import APP_NAME
from ragindex.config import RagIndexSpec
from ragindex.errors import InvalidInput
from ragindex.generations import (
    GenerationRecord,
    PromotionEvidence,
    PromotionRefused,
    expired,
    fail,
    forget,
    index_generation,
    lexical_alias,
    promote,
    promotion_failures,
    rollback_target,
    start_building,
)
from ragindex.ingest import IngestWorker
from ragindex.lexical import ElasticsearchIndex, make_client
from ragindex.models import SerializedEmbedder, load_embedder
from ragindex.protocols import Embedder, Log
from ragindex.topics import plane_snapshots_topic, plane_topics

REINDEX_REPLICA = "reindex"
BATCH = 64
CATCH_UP_ROUNDS = 20  # verifications that may find new writes to consume before giving up

Progress = Callable[[int, int], None]  # (docs records consumed, docs records to consume)


@dataclass
class ReindexReport:
    generation: str
    previous: str | None
    documents: dict[str, int]  # tenant -> documents in the promoted generation
    self_check_sampled: int
    seconds: float
    failures: list[str] = field(default_factory=list)


class Reindex:
    """Builds `spec`'s generation in `data_dir` beside the serving one and promotes it."""

    def __init__(
        self,
        data_dir: Path,
        spec: RagIndexSpec,
        *,
        embedder: Embedder | None = None,
        serving_embedder: Embedder | None = None,
        rollback: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        record = read_record(data_dir)
        if record is None or record.active is None:
            raise InvalidInput(f"nothing was ingested into {data_dir} yet: there is no index")
        self.data_dir = data_dir
        self.clock = clock
        self.previous = record.active
        self.serving_spec = record.spec_of(record.active)
        self.spec = spec
        self.generation = index_generation(spec)
        self.record: GenerationRecord = (
            record if rollback else start_building(record, spec, clock())
        )
        self.embedder = embedder or load_embedder(spec.embedder)
        self.serving_embedder = serving_embedder or load_embedder(self.serving_spec.embedder)
        self.log = open_log(data_dir)
        self.topics = plane_topics(spec, APP_NAME, DEFAULT_NAMESPACE)
        self.serving_topics = plane_topics(self.serving_spec, APP_NAME, DEFAULT_NAMESPACE)
        ensure_topics(self.log, self.topics)
        write_record(data_dir, self.record)
        every = range(self.topics.docs_partitions)
        self.backfill = IngestWorker(self.log, self.topics, self.embedder, spec.chunking, every)
        self.live = IngestWorker(
            self.log, self.serving_topics, self.serving_embedder, self.serving_spec.chunking, every
        )

    def _ends(self) -> dict[int, int]:
        return {
            p: self.log.end_offset(self.topics.docs, p) for p in range(self.topics.docs_partitions)
        }

    def _consumed(self) -> dict[int, int]:
        return {
            p: self.log.committed(self.topics.group, self.topics.docs, p)
            for p in range(self.topics.docs_partitions)
        }

    def catch_up(self, progress: Progress | None = None) -> None:
        """Run both generations' workers until the new one has consumed the end of `docs`."""
        while True:
            done = self.backfill.poll(BATCH)
            self.live.poll(BATCH)
            if progress is not None:
                progress(sum(self._consumed().values()), sum(self._ends().values()))
            if not done and self.backfill.lag() == 0:
                return

    def run(self, progress: Progress | None = None) -> ReindexReport:
        """Backfill, verify, and promote; PromotionRefused (old generation serving) if a check
        fails."""
        started = self.clock()
        side = LocalQuerySide(
            self.spec,
            self.data_dir,
            APP_NAME,
            DEFAULT_NAMESPACE,
            replica_dir(self.data_dir, self.spec, REINDEX_REPLICA, 0),
        )
        side.embedder = SerializedEmbedder(self.embedder)
        try:
            for _ in range(CATCH_UP_ROUNDS):
                self.catch_up(progress)
                evidence, indexed = self._evidence(side)
                failures = promotion_failures(evidence)
                if not (len(failures) == 1 and failures[0].startswith("caught-up")):
                    break  # new writes arrived during verification: consume them and retry
        finally:
            side.close()
        if failures:
            self.record = fail(self.record, self.generation, "; ".join(failures), self.clock())
            write_record(self.data_dir, self.record)
            raise PromotionRefused(self.generation, failures)
        self.record = promote(self.record, self.generation, self.clock())
        move_read_alias(self.spec, self.generation)  # Elasticsearch: one _aliases call
        write_record(self.data_dir, self.record)  # the switch: one atomic rename
        self.record = retire_expired(self.data_dir, self.log, self.clock())
        return ReindexReport(
            generation=self.generation,
            previous=self.previous,
            documents=indexed,
            self_check_sampled=evidence.self_check_sampled,
            seconds=self.clock() - started,
        )

    def _evidence(self, side: LocalQuerySide) -> tuple[PromotionEvidence, dict[str, int]]:
        consumed = self._consumed()  # the backfill is paused: its views cover exactly this
        ends = self._ends()
        side.refresh()
        if not side.try_open():
            raise InvalidInput(f"generation {self.generation} has no chunks topic")
        evidence = gather_evidence(
            self.log,
            self.topics,
            side,
            self.spec.generations.self_check_sample,
            consumed,
            ends,
        )
        return evidence, dict(evidence.indexed)

    def close(self) -> None:
        self.log.close()


@contextlib.contextmanager
def _elasticsearch(spec: RagIndexSpec) -> Iterator[ElasticsearchIndex | None]:
    """The spec's Elasticsearch alias (not opened: nothing is created), or None for tantivy."""
    if spec.lexical.backend != "elasticsearch" or not spec.lexical.elasticsearch_url:
        yield None
        return
    client = make_client(
        spec.lexical.elasticsearch_url, spec.lexical.request_timeout_s, elasticsearch_connection()
    )
    index = ElasticsearchIndex(client, lexical_alias(spec, DEFAULT_NAMESPACE, APP_NAME))
    try:
        yield index
    finally:
        client.close()


def move_read_alias(spec: RagIndexSpec, generation: str) -> None:
    """On Elasticsearch, point the read alias at the generation's index (one atomic
    `_aliases` call); the previous index is kept for rollback. Nothing to do on tantivy,
    whose index lives in each generation's replica directory."""
    with _elasticsearch(spec) as es:
        if es is not None:
            es.swap_alias(generation)


def retire_expired(data_dir: Path, log_: Log, now: float) -> GenerationRecord:
    """Delete the topics (chunks and the replicas' snapshots) and replica directories of
    generations retained or failed longer than the serving spec's rollback window, then drop
    them from the record. (Their ingest group's offsets on `docs` may stay: a worker of the
    generation applied again finds no chunk of them and reads `docs` from 0.)"""
    record = read_record(data_dir)
    if record is None or record.active is None:
        raise InvalidInput(f"nothing was ingested into {data_dir} yet: there is no index")
    window_s = record.spec_of(record.active).generations.rollback_window_hours * 3600
    doomed = expired(record, now, window_s)
    for generation in doomed:
        spec = record.spec_of(generation)
        log_.delete_topic(plane_topics(spec, APP_NAME, DEFAULT_NAMESPACE).chunks)
        # Its snapshots name offsets of the chunks topic just deleted: never load them.
        for shard in range(spec.dense.shards):
            snapshot_log = open_snapshot_log(data_dir, log_, shard)
            try:
                snapshot_log.delete_topic(plane_snapshots_topic(spec, APP_NAME, DEFAULT_NAMESPACE))
            finally:
                if snapshot_log is not log_:
                    snapshot_log.close()
        shutil.rmtree(replica_dir(data_dir, spec, REINDEX_REPLICA, 0).parent, ignore_errors=True)
        with _elasticsearch(spec) as es:
            if es is not None:
                es.drop_generation(generation)
    if doomed:
        record = forget(record, doomed)
        write_record(data_dir, record)
    return record


def rollback(
    data_dir: Path, *, embedder: Embedder | None = None, clock: Callable[[], float] = time.time
) -> ReindexReport:
    """Switch back to the retained generation (within its window), after it caught up on the
    writes made since it was retired and passed the same checks as a promotion."""
    record = read_record(data_dir)
    if record is None or record.active is None:
        raise InvalidInput(f"nothing was ingested into {data_dir} yet: there is no index")
    window_s = record.spec_of(record.active).generations.rollback_window_hours * 3600
    target = rollback_target(record, clock(), window_s)
    reindex = Reindex(
        data_dir, record.spec_of(target), embedder=embedder, rollback=True, clock=clock
    )
    try:
        return reindex.run()
    finally:
        reindex.close()
