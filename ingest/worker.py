"""Ingest workers: consume `docs`, produce `chunks.<generation>`, exactly once.

A worker owns some `docs` partitions (`owned_partitions`: round robin over the running
workers, so no partition has two owners once they agree on who runs). It claims each one
before reading it (`Log.claim` fences the previous owner, whose commits then fail), and a
worker whose commit is refused as fenced lets that partition go. `assign` moves partitions
when the workers change. For each batch it reads from the group's committed offset,
chunks every document, diffs it against the manifest (doc -> chunk ids and content hashes),
embeds only new or changed chunks, and appends the chunk records (tombstones for removed
chunks) together with the new `docs` offset in one `append_and_commit`: a worker killed
mid-batch leaves neither chunks without the offset nor the offset without chunks, so a
restart redoes exactly the uncommitted batch. While a batch commits, the next one is read and
embedded (planned as if the commit had landed; dropped if it did not).

The manifest is a materialized view too: of the compacted `chunks.<generation>` topic, whose
keys name every live chunk's document and whose values carry its content hash. A worker that
takes over a partition (after a crash, on another node) rebuilds it from there; since chunks
and offsets commit atomically, the rebuilt manifest is exactly the committed state.

A commit that fails other than fenced has an unknown outcome (Kafka's `commit_transaction` can
time out after the broker committed). Before that partition's next batch the worker claims it
again, which makes the broker finish or abort whatever the failed commit left, then rebuilds
its manifest and re-reads its offset from the log: a plan made against the manifest as it was
before the commit would forget the chunks it may have added, and a delete would then leave
them searchable.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from ragindex.config import ChunkingSpec
from ragindex.filters import superseded
from ragindex.hashing import shard_for
from ragindex.ingest.pipeline import chunk_for_embedder, embed_chunks
from ragindex.protocols import Embedder, Log, Vectors, WriterFenced
from ragindex.records import (
    DocKey,
    chunk_header,
    chunk_key,
    decode_document,
    doc_of_chunk,
    encode_chunk,
    split_chunk_key,
)
from ragindex.topics import DataPlaneTopics, partition_for_key
from ragindex.types import Chunk, LogRecord

log = logging.getLogger("ragindex.ingest")

LAG_LIMIT = 10_000  # lag() counts up to this many records per partition
READ_BATCH = 64  # docs per partition and transaction: small enough that a crash redoes little
COMMIT_THREADS = 8  # partitions committed side by side
TRACES = 256  # the latest batches' timings a worker keeps (BatchTrace)


def owned_partitions(rank: int, workers: int, partitions: int) -> list[int]:
    """The `docs` partitions worker `rank` of `workers` consumes (at most one worker each);
    a replica ranked beyond `workers` (scaled up for writes) consumes none."""
    if rank < 0 or workers < 1:
        raise ValueError(f"rank {rank} / workers {workers}: need rank >= 0 and workers >= 1")
    if rank >= workers:
        return []
    return [p for p in range(partitions) if p % workers == rank]


def assigned_partitions(member: str, running: Iterable[str], partitions: int) -> list[int]:
    """The `docs` partitions of `member` among the `running` workers (ids): round robin in
    id order, so every worker that sees the same running set computes the same split, and
    none for a worker not (or no longer) running."""
    members = sorted(set(running))
    if member not in members:
        return []
    return owned_partitions(members.index(member), len(members), partitions)


Manifest = dict[DocKey, dict[str, str]]  # document -> {chunk id: content hash}
Versions = dict[DocKey, str | None]  # document -> `updated` of its indexed version


@dataclass(frozen=True)
class BatchTrace:
    """One `poll` that processed records: what it held and when each step ended (wall-clock
    seconds, `time.time()`, so that they line up with other processes' on one machine)."""

    partitions: tuple[int, ...]  # the `docs` partitions that had records
    records: int  # docs records consumed
    embedded: int  # chunks embedded (new or changed)
    started_at: float  # the poll began reading
    read_at: float  # every owned partition read
    planned_at: float  # chunked and diffed against the manifest
    embedded_at: float  # the new or changed chunks embedded
    committed_at: float  # every partition's chunks and offset committed


@dataclass(frozen=True)
class WorkerProgress:
    """What a worker has committed, replaced whole after every change so that other threads
    (a `?wait=true` on Ingest's request thread) read it without a lock while a batch embeds.

    It answers a wait from memory where it can: a view that applied `chunk_ends` has applied
    every chunk this worker committed, so also those of any `docs` record this worker
    processed. Asking the log instead costs a tail read per chunks partition (on Kafka one
    fetch round trip each, ~0.2 s)."""

    next_offsets: Mapping[int, int] = field(default_factory=dict)  # docs partition -> next
    since: Mapping[int, int] = field(default_factory=dict)  # docs partition -> first it read
    chunk_ends: tuple[int, ...] = ()  # chunks partition -> after its last record committed here

    def processes(self, partition: int, offset: int) -> bool:
        """Whether the `docs` record before `offset` is (or will be) processed by this worker:
        it owns the partition and took it over at or before that record."""
        since = self.since.get(partition)
        return since is not None and since < offset

    def processed(self, partition: int, offset: int) -> bool:
        return self.next_offsets.get(partition, 0) >= offset


@dataclass
class _Plan:
    """What one partition's batch changes, before it is embedded and committed."""

    changed: Manifest = field(default_factory=dict)  # applied to the manifest after the commit
    versions: Versions = field(default_factory=dict)
    upserts: list[Chunk] = field(default_factory=list)  # new or changed: to embed
    tombstones: list[tuple[str, str]] = field(default_factory=list)  # (tenant, chunk id)


@dataclass
class _Batch:
    """One poll's records of every partition that had some, planned, and their embedding
    (running on the worker's embedding thread)."""

    started_at: float
    read_at: float
    planned_at: float
    starts: dict[int, int]  # partition -> the offset its records were read from
    plans: list[tuple[int, list[LogRecord], _Plan]]
    vectors: Future[tuple[Vectors, float]]  # the plans' upserts' vectors, when they were done


def read_all(log_: Log, topic: str, partition: int, batch: int = 5000) -> list[LogRecord]:
    """Every committed record of a partition, up to its end offset when called."""
    end = log_.end_offset(topic, partition)
    out: list[LogRecord] = []
    offset = 0
    while offset < end:
        records = log_.read(topic, partition, offset, max_records=batch)
        if not records:
            break
        out.extend(records)
        offset = records[-1].offset + 1
    return out


def rebuild_manifest(
    log_: Log, topics: DataPlaneTopics, partitions: Sequence[int]
) -> tuple[Manifest, Versions]:
    """The manifest of `partitions` and their documents' versions from the chunks topic (the
    committed state)."""
    owned = set(partitions)
    manifest: Manifest = {}
    versions: Versions = {}
    if not owned:
        return manifest, versions
    for shard in range(topics.shards):
        for record in read_all(log_, topics.chunks, shard):
            tenant, chunk_id = split_chunk_key(record.key)
            doc = DocKey(tenant, *doc_of_chunk(chunk_id))
            if partition_for_key(doc.encode(), topics.docs_partitions) not in owned:
                continue
            if record.value is None:
                chunks = manifest.get(doc, {})
                chunks.pop(chunk_id, None)
                if not chunks:
                    manifest.pop(doc, None)
                    versions.pop(doc, None)
            else:
                chunk = chunk_header(record.value)
                manifest.setdefault(doc, {})[chunk_id] = chunk.content_hash
                versions[doc] = chunk.updated
    return manifest, versions


class IngestWorker:
    """Consumes the `docs` partitions it owns into `chunks.<generation>`."""

    def __init__(
        self,
        log_: Log,
        topics: DataPlaneTopics,
        embedder: Embedder,
        chunking: ChunkingSpec,
        partitions: Sequence[int],
        group: str | None = None,
    ) -> None:
        self.log = log_
        self.topics = topics
        self.embedder = embedder
        self.chunking = chunking
        self.partitions = list(partitions)
        self.group = group or topics.group
        self.traces: deque[BatchTrace] = deque(maxlen=TRACES)
        self._next: dict[int, int] = {}  # partition -> the offset this worker reads next
        self._since: dict[int, int] = {}  # partition -> where this worker began reading it
        self._chunk_ends = [0] * topics.shards
        self.progress = WorkerProgress(chunk_ends=tuple(self._chunk_ends))
        self._committer = ThreadPoolExecutor(COMMIT_THREADS, thread_name_prefix="ingest-commit")
        # Every embedding runs here, one at a time: the next batch's while this one commits.
        self._embedding = ThreadPoolExecutor(1, thread_name_prefix="ingest-embed")
        self._ahead: _Batch | None = None  # read and embedding after the last commit's offsets
        self._unsettled: set[int] = set()  # partitions whose last commit's outcome is unknown
        for p in self.partitions:
            log_.claim(self.group, topics.docs, p)
        self.manifest, self.versions = rebuild_manifest(log_, topics, self.partitions)

    def assign(self, partitions: Sequence[int]) -> None:
        """Own `partitions` from now on: the new ones are claimed first (fencing their previous
        owner) and only their manifest is read from the chunks topic; the lost ones' entries
        are dropped."""
        wanted = sorted(set(partitions))
        if wanted == sorted(self.partitions):
            return
        gained = sorted(set(wanted) - set(self.partitions))
        for p in gained:
            self.log.claim(self.group, self.topics.docs, p)
        log.info("ingest partitions %s -> %s", sorted(self.partitions), wanted)
        self._ahead = None
        kept = set(wanted)
        self._unsettled &= kept
        for p in [*gained, *(q for q in self._next if q not in kept)]:
            self._next.pop(p, None)
            self._since.pop(p, None)
        self._reload_manifest(keep=kept - set(gained), read=gained)
        self.partitions = wanted
        self._publish_progress()

    def _reload_manifest(self, keep: set[int], read: Iterable[int]) -> None:
        """Drop the manifest entries of every docs partition not in `keep`, and read those of
        `read` from the chunks topic."""
        for doc in [d for d in self.manifest if self._docs_partition(d) not in keep]:
            del self.manifest[doc]
            self.versions.pop(doc, None)
        manifest, versions = rebuild_manifest(self.log, self.topics, sorted(read))
        self.manifest.update(manifest)
        self.versions.update(versions)

    def _settle(self) -> None:
        """Partitions whose last commit failed with an unknown outcome: claimed again (the
        broker finishes or aborts that transaction before the claim returns), then their
        manifest is read from what the chunks topic holds."""
        if not self._unsettled:
            return
        unsettled = sorted(self._unsettled)
        for p in unsettled:
            self.log.claim(self.group, self.topics.docs, p)
        self._reload_manifest(keep=set(self.partitions) - set(unsettled), read=unsettled)
        log.info("docs partitions %s: manifest read again after a failed commit", unsettled)
        self._unsettled.clear()

    def _docs_partition(self, doc: DocKey) -> int:
        return partition_for_key(doc.encode(), self.topics.docs_partitions)

    def lag(self) -> int:
        """Records of owned partitions not yet consumed: what a read from the committed offset
        returns (offsets are no measure: Kafka's transaction markers take offsets too)."""
        return sum(
            len(
                self.log.read(
                    self.topics.docs,
                    p,
                    self.log.committed(self.group, self.topics.docs, p),
                    max_records=LAG_LIMIT,
                )
            )
            for p in self.partitions
        )

    def poll(self, max_records: int = READ_BATCH, timeout_s: float = 0.0) -> int:
        """Process one batch from every owned partition; returns how many docs records.

        Every partition's records are chunked and diffed first, and the changed chunks of all
        of them embedded together (full embedding batches however the documents spread over
        partitions); then each partition's chunks are committed with its own offset (one
        transaction per input partition: its transactional id is what fences a former owner).

        While they commit, the records after them are read, planned against the manifest as
        these commits leave it, and embedded (`_ahead`): the embedder does not wait for the
        log's transactions between batches. The next poll takes that batch if every commit
        succeeded and the partitions are unchanged; otherwise it is dropped, never committed,
        and the next poll reads from the committed offsets again.
        """
        self._settle()
        batch, self._ahead = self._ahead, None
        if batch is None or any(self._next.get(p) != o for p, o in batch.starts.items()):
            batch = self._prepare(
                {p: self._next_offset(p) for p in self.partitions}, {}, max_records, timeout_s
            )
        if batch is None:
            return 0
        vectors, embedded_at = batch.vectors.result()
        jobs: list[tuple[int, list[LogRecord], _Plan, Vectors]] = []
        first = 0
        for p, records, plan in batch.plans:
            jobs.append((p, records, plan, vectors[first : first + len(plan.upserts)]))
            first += len(plan.upserts)
        # Side by side: on Kafka each partition's transaction waits on the broker.
        committing = self._committer.map(self._try_commit, jobs)
        ahead = self._read_ahead(batch, max_records)
        outcomes = list(committing)
        done = 0
        for (p, records, _, _), outcome in zip(jobs, outcomes, strict=True):
            if not isinstance(outcome, BaseException):
                done += len(records)
                for shard, end in outcome.items():
                    self._chunk_ends[shard] = max(self._chunk_ends[shard], end)
            elif isinstance(outcome, WriterFenced):  # another worker claimed it: it carries on
                log.warning("letting docs partition %d go: %s", p, outcome)
                self.assign([q for q in self.partitions if q != p])
        failed = {
            p: e
            for (p, _, _, _), e in zip(jobs, outcomes, strict=True)
            if isinstance(e, BaseException) and not isinstance(e, WriterFenced)
        }
        if failed:
            self._next.clear()  # unknown what landed: read the committed offsets again
            self._since.clear()
            self._unsettled.update(p for p in failed if p in self.partitions)
            self._publish_progress()
            raise next(iter(failed.values()))
        if not any(isinstance(o, BaseException) for o in outcomes):
            self._ahead = ahead  # every commit landed: the plan it was made against holds
        self._publish_progress()
        self.traces.append(
            BatchTrace(
                partitions=tuple(p for p, _, _ in batch.plans),
                records=sum(len(r) for _, r, _ in batch.plans),
                embedded=len(vectors),
                started_at=batch.started_at,
                read_at=batch.read_at,
                planned_at=batch.planned_at,
                embedded_at=embedded_at,
                committed_at=time.time(),
            )
        )
        return done

    def _read_ahead(self, batch: _Batch, max_records: int) -> _Batch | None:
        """The records after `batch` (nothing yet where it had none), planned as if it were
        committed, their embedding started; None if there are none, or the read failed (the
        next poll reads them)."""
        after = {p: records[-1].offset + 1 for p, records, _ in batch.plans}
        try:
            return self._prepare(
                {p: after[p] if p in after else self._next_offset(p) for p in self.partitions},
                {p: plan for p, _, plan in batch.plans},
                max_records,
                0.0,
            )
        except Exception as err:  # the commits decide this poll's outcome, not the read-ahead
            log.warning("reading ahead failed; the next poll reads again: %s", err)
            return None

    def _prepare(
        self,
        starts: Mapping[int, int],
        pending: Mapping[int, _Plan],
        max_records: int,
        timeout_s: float,
    ) -> _Batch | None:
        """Read each partition from its offset in `starts`, plan its records against the
        manifest with `pending` (a partition's plan not yet committed) on top, and start
        embedding the new or changed chunks; None when no partition had records."""
        started = time.time()
        read: list[tuple[int, list[LogRecord]]] = []
        for p, offset in starts.items():
            records = self.log.read(
                self.topics.docs, p, offset, max_records=max_records, timeout_s=timeout_s
            )
            if records:
                read.append((p, records))
        if not read:
            return None
        read_at = time.time()
        plans = [(p, records, self._plan(records, pending.get(p))) for p, records in read]
        upserts = [c for _, _, plan in plans for c in plan.upserts]
        return _Batch(
            started_at=started,
            read_at=read_at,
            planned_at=time.time(),
            starts={p: starts[p] for p, _ in read},
            plans=plans,
            vectors=self._embedding.submit(self._embed, upserts),
        )

    def _embed(self, upserts: list[Chunk]) -> tuple[Vectors, float]:
        vectors = embed_chunks(self.embedder, upserts)  # only new or changed chunks
        return vectors, time.time()

    def committed_offsets(self) -> dict[int, int]:
        """Per owned partition, the offset this worker's commits reached (the log is asked only
        where it does not know yet)."""
        return {p: self._next_offset(p) for p in self.partitions}

    def _next_offset(self, partition: int) -> int:
        """Where this worker reads `partition` next: its committed offset, read from the log
        once (after a claim, or a failed commit) and then advanced by its own commits.

        A committed offset with no document of the partition in the manifest is not trusted:
        offsets and chunks commit together, so it was committed over another chunks topic
        (the generation was retired, its chunks topic deleted, and applied again: the group's
        offsets on `docs` outlive it) or everything read so far was deleted. Either way the
        partition is read again from 0 (and 0 committed, so that progress reports and
        promotion checks see it too): what is already indexed is unchanged, so nothing is
        embedded twice."""
        offset = self._next.get(partition)
        if offset is None:
            offset = self.log.committed(self.group, self.topics.docs, partition)
            if offset > 0 and not any(
                self._docs_partition(doc) == partition for doc in self.manifest
            ):
                log.warning(
                    "docs partition %d: group %s committed offset %d, but %s holds no chunk of"
                    " it (a generation applied again after it was retired?): reading from 0",
                    partition,
                    self.group,
                    offset,
                    self.topics.chunks,
                )
                offset = 0
                self.log.append_and_commit(
                    self.topics.chunks,
                    [],
                    group=self.group,
                    consumed={(self.topics.docs, partition): offset},
                )
            self._next[partition] = self._since[partition] = offset
        return offset

    def _publish_progress(self) -> None:
        self.progress = WorkerProgress(dict(self._next), dict(self._since), tuple(self._chunk_ends))

    def _plan(self, records: list[LogRecord], pending: _Plan | None) -> _Plan:
        """What a partition's batch changes: chunks to upsert (to embed) and to tombstone,
        against the manifest as it is after `pending` (an earlier batch still committing)."""
        plan = _Plan()
        before = pending or _Plan()
        final: dict[tuple[str, str], Chunk | None] = {}  # chunk -> its state after the batch
        for record in records:
            doc = DocKey.decode(record.key)
            stored = plan.changed.get(doc, before.changed.get(doc, self.manifest.get(doc, {})))
            new_chunks = self._chunks_of(doc, record)
            if new_chunks is None:
                continue
            version = before.versions.get(doc, self.versions.get(doc))
            current = plan.versions.get(doc, version) if stored else None
            if new_chunks and superseded(new_chunks[0].updated, current):
                log.info("skipping %s: updated %s is older than the indexed %s", doc,
                         new_chunks[0].updated, current)  # fmt: skip
                continue
            plan.versions[doc] = new_chunks[0].updated if new_chunks else None
            new_ids = {c.chunk_id for c in new_chunks}
            for chunk_id in stored:
                if chunk_id not in new_ids:
                    final[(doc.tenant_id, chunk_id)] = None
            for chunk in new_chunks:
                if stored.get(chunk.chunk_id) != chunk.content_hash:
                    final[(doc.tenant_id, chunk.chunk_id)] = chunk
            plan.changed[doc] = {c.chunk_id: c.content_hash for c in new_chunks}
        plan.upserts = [c for c in final.values() if c is not None]
        plan.tombstones = [key for key, c in final.items() if c is None]
        return plan

    def _try_commit(
        self, job: tuple[int, list[LogRecord], _Plan, Vectors]
    ) -> dict[int, int] | BaseException:
        try:
            return self._commit(*job)
        except Exception as err:  # handed back: the poll decides after every partition's
            return err

    def _commit(
        self, partition: int, records: list[LogRecord], plan: _Plan, vectors: Vectors
    ) -> dict[int, int]:
        """The plan's chunk records and the partition's new `docs` offset, atomically; then
        the manifest. Returns, per chunks partition written, the offset after its last
        record."""
        out: list[tuple[int, bytes, bytes | None]] = [
            (self._shard(tenant, chunk_id), chunk_key(tenant, chunk_id), None)
            for tenant, chunk_id in plan.tombstones
        ]
        for chunk, vector in zip(plan.upserts, vectors, strict=True):
            out.append(
                (
                    self._shard(chunk.tenant_id, chunk.chunk_id),
                    chunk_key(chunk.tenant_id, chunk.chunk_id),
                    encode_chunk(chunk, vector),
                )
            )
        after = records[-1].offset + 1
        offsets = self.log.append_and_commit(
            self.topics.chunks,
            out,
            group=self.group,
            consumed={(self.topics.docs, partition): after},
        )
        ends: dict[int, int] = {}
        for (shard, _, _), offset in zip(out, offsets, strict=True):
            ends[shard] = max(ends.get(shard, 0), offset + 1)
        self._next[partition] = after
        for doc, chunks in plan.changed.items():
            if chunks:
                self.manifest[doc] = chunks
                self.versions[doc] = plan.versions[doc]
            else:
                self.manifest.pop(doc, None)
                self.versions.pop(doc, None)
        return ends

    def _chunks_of(self, doc: DocKey, record: LogRecord) -> list[Chunk] | None:
        """The document's chunks ([] for a delete); None for a record that cannot be read."""
        if record.value is None:
            return []
        try:
            document = decode_document(record.value)
            return chunk_for_embedder(self.embedder, self.chunking, doc.tenant_id, document)
        except Exception:  # validated before it was logged: a bug, not a reason to stall
            log.exception("skipping unreadable docs record %s at offset %d", doc, record.offset)
            return None

    def _shard(self, tenant_id: str, chunk_id: str) -> int:
        return shard_for(tenant_id, chunk_id, self.topics.shards)
