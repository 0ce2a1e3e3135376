"""A replica of one dense shard as a view of partition `shard` of `chunks.<generation>`.

It holds the shard's FAISS tenant partitions AND its chunks' text (hits come back with text:
no global chunk store on the query path), in node-local storage under `directory`. It starts
from its own newest snapshot (FAISS files + texts, both stamped with the log offset they
cover), else from the newest one published to the log (`snapshot_log`: a new replica on
another node builds no HNSW graph), else from offset 0; replays the partition from there, and
snapshots periodically so a restart replays little: written on a thread of its own while it
applies and serves, at bounds spread per replica so that a shard's replicas drift apart, not
snapshotting at once. A publishing replica also puts every PUBLISH_EVERY_RECORDS-th snapshot (or
one a while after any change) into the log.

Tombstones: compaction drops a delete marker `delete.retention.ms` after it was written (Kafka),
and a replay from a snapshot older than that would miss the delete and serve the chunk again.
So a snapshot carries `caught_up_at`, the wall time at which its replica last read the
partition to its end at or before the snapshot's offset (every record the snapshot misses was
written after it); given `tombstone_retention_s`, a replica refuses a snapshot (its own, then
the published one) whose `caught_up_at` is older than that, or unknown, and replays from 0.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from ragindex.config import DenseIndexSpec, HnswSpec
from ragindex.filters import TermExpr, TermPostings
from ragindex.protocols import Log, Vectors
from ragindex.records import decode_chunk, split_chunk_key
from ragindex.shards.fsio import fsync_dir, write_durable
from ragindex.shards.shard import MANIFEST, DenseShard, ShardImage
from ragindex.shards.snapshot_log import SnapshotTopic
from ragindex.types import Chunk, LogRecord, ModelIdentity, ScoredId

SNAPSHOT_DIR = "snapshot"
FETCH_DIR = "fetching"  # a published snapshot is assembled here, then moved into SNAPSHOT_DIR
SCRATCH_DIR = "scratch"  # files an index type keeps on disk (unlinked: nothing to clean up)
TEXTS = "texts.json"
TEXTS_PIECE = 500  # chunks per JSON encoding call (`texts_json`)
READ_BATCH = 2000
SNAPSHOT_EVERY_RECORDS = 20_000
SNAPSHOT_EVERY_S = 60.0
# A published snapshot is the whole shard (~90 MB per 50 k vectors): far rarer than local ones.
PUBLISH_EVERY_RECORDS = 20_000
PUBLISH_EVERY_S = 600.0

log = logging.getLogger("ragindex.shards")


def snapshot_due(records_since: int, unsaved_s: float, spread: float) -> bool:
    """Snapshot after many records, or a while after the oldest record no snapshot holds came:
    a restart replays little.

    `spread` scales both bounds (`snapshot_spread`, drawn per replica and snapshot). The
    replicas of a shard see the same records at the same moments, and at one bound each they
    would all snapshot at once, every time (the first write after a quiet spell would set them
    all off), taking the cores together for the encoding and the writes."""
    return records_since >= SNAPSHOT_EVERY_RECORDS * spread or (
        records_since > 0 and unsaved_s >= SNAPSHOT_EVERY_S * spread
    )


def snapshot_spread(rng: random.Random) -> float:
    """A replica's factor on the snapshot bounds until its next snapshot, in [0.75, 1.25)."""
    return 0.75 + 0.5 * rng.random()


def publish_due(records_since: int, seconds_since: float, *, published: bool) -> bool:
    """Publish a snapshot to the log after many records, or after a long while with any, or
    with any at all when this replica has neither published nor loaded one yet (a new replica
    of a small shard still gets a snapshot to start from)."""
    return records_since >= PUBLISH_EVERY_RECORDS or (
        records_since > 0 and (seconds_since >= PUBLISH_EVERY_S or not published)
    )


def texts_json(
    offset: int,
    texts: dict[str, list[dict[str, object]]],
    caught_up_at: float | None = None,
) -> bytes:
    """`{"offset": offset, "chunks": texts}` as JSON, encoded TEXTS_PIECE chunks per call: one
    call holds the GIL throughout (~0.3 s for 50 k chunks), which would stall the replica's
    searches and applies on its other threads for as long."""
    tenants = []
    for tenant, chunks in texts.items():
        pieces = (
            json.dumps(chunks[i : i + TEXTS_PIECE])[1:-1]
            for i in range(0, len(chunks), TEXTS_PIECE)
        )
        tenants.append(f"{json.dumps(tenant)}: [{', '.join(pieces)}]")
    head = f'"offset": {offset}' + (
        "" if caught_up_at is None else f', "caught_up_at": {json.dumps(caught_up_at)}'
    )
    return f'{{{head}, "chunks": {{{", ".join(tenants)}}}}}'.encode()


@dataclass(frozen=True)
class _Snapshot:
    """What a snapshot writes, captured on the applying thread (`LogShardReplica._capture`)."""

    offset: int
    caught_up_at: float | None  # wall time the replica last read to the end, at <= offset
    texts: dict[str, list[dict[str, object]]]  # tenant -> its chunks' fields
    shard: ShardImage
    publish: bool  # publish it to the log once written
    since_publish: int  # records applied since the last publication, when captured


class LogShardReplica:
    """FAISS tenant partitions + chunk text of one shard, applied from the log."""

    def __init__(
        self,
        log_: Log,
        topic: str,
        shard: int,
        directory: Path,
        identity: ModelIdentity,
        hnsw: HnswSpec,
        exact_threshold: int,
        snapshots: SnapshotTopic | None = None,
        *,
        publish: bool = False,
        tombstone_retention_s: float | None = None,
        index: DenseIndexSpec | None = None,
        snapshot_turn: threading.Lock | None = None,
    ) -> None:
        """`snapshots`: the shard's partition of `snapshots.<generation>`, loaded from when this
        replica has no snapshot of its own, and published to when `publish`.
        `tombstone_retention_s`: how long the log keeps a tombstone (None: for ever, as the
        file log does); a snapshot caught up longer ago than that is not loaded.
        `index`: `dense.index`, the type of the partitions that outgrow exact search (None:
        hnsw, or the type a loaded snapshot records).
        `snapshot_turn`: a lock the replicas of one process share, so that they snapshot one at
        a time (None: a lock of its own)."""
        self.log = log_
        self.topic = topic
        self.partition = shard
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)  # this replica's node-local storage
        self.scratch = directory / SCRATCH_DIR
        self.identity = identity
        self.shard = DenseShard(identity, hnsw, exact_threshold, index, self.scratch)
        self.texts: dict[str, dict[str, Chunk]] = {}  # tenant -> chunk id -> chunk
        # Held while the applying thread changes a tenant's texts and while another thread
        # iterates them (/v1/stats runs on a search thread of the local Router).
        self._texts_lock = threading.Lock()
        self.postings: dict[str, TermPostings] = {}  # tenant -> filter terms of its chunks
        self.offset = 0
        self.snapshots = snapshots
        self.publish = publish and snapshots is not None
        self._published = False  # whether the log holds a snapshot this replica made or loaded
        self.tombstone_retention_s = tombstone_retention_s
        self._caught_up_at: float | None = None  # wall time of the last read to the end
        self._load_snapshot(hnsw, exact_threshold, index)
        self.start_offset = self.offset  # where replay began: > 0 when a snapshot was loaded
        self._since_snapshot = self._since_publish = 0
        self._unsaved_since: float | None = None  # when the oldest record no snapshot holds came
        self._published_at = time.monotonic()
        self._rng = random.Random()
        self._spread = snapshot_spread(self._rng)
        # Periodic snapshots are written here while this replica keeps applying and serving;
        # at most one at a time, accounted for on the applying thread once written.
        self._writer = ThreadPoolExecutor(1, thread_name_prefix=f"shard{shard}-snapshot")
        self._writing: tuple[_Snapshot, Future[bool]] | None = None
        # Held from a snapshot's capture until it is written and published. The replicas of
        # one process (the embedded Router holds every shard) share it and take turns: a
        # snapshot holds a copy of its shard's index in memory (~1 GB at 500 k float32
        # vectors), and replicas that catch up together would all take theirs at once.
        self._snapshot_turn = snapshot_turn or threading.Lock()

    def _load_snapshot(
        self, hnsw: HnswSpec, exact_threshold: int, index: DenseIndexSpec | None
    ) -> None:
        snap = self.directory / SNAPSHOT_DIR
        has_local = (snap / MANIFEST).exists() and (snap / TEXTS).exists()
        if has_local and self._too_old(snap):  # the published one may be newer
            (snap / MANIFEST).unlink()
            has_local = False
        if not has_local and self.snapshots is not None:
            self._fetch_published(snap)
            if (snap / MANIFEST).exists() and self._too_old(snap):
                (snap / MANIFEST).unlink()
        if not (snap / MANIFEST).exists() or not (snap / TEXTS).exists():
            return
        try:
            shard = DenseShard.load(snap, hnsw, exact_threshold, index, self.scratch)
            texts = json.loads((snap / TEXTS).read_bytes())
        except (ValueError, KeyError, RuntimeError) as err:  # faiss: RuntimeError on bad bytes
            log.warning(
                "shard %d: snapshot in %s unreadable (%s); replaying", self.partition, snap, err
            )
            return
        if texts["offset"] != shard.wal_offset or shard.identity != self.identity:
            return  # a crash between the two writes, or another generation: replay from 0
        self.shard = shard
        self.offset = shard.wal_offset
        self._caught_up_at = texts.get("caught_up_at")
        self.texts = {
            tenant: {c["chunk_id"]: Chunk(**c) for c in chunks}
            for tenant, chunks in texts["chunks"].items()
        }
        for tenant, chunks_ in self.texts.items():
            for chunk in chunks_.values():
                self.postings.setdefault(tenant, TermPostings()).add(chunk)

    def _too_old(self, snap: Path) -> bool:
        """Whether the snapshot in `snap` may miss tombstones the log no longer holds: caught
        up longer than the tombstone retention ago (or at an unknown time)."""
        if self.tombstone_retention_s is None:
            return False
        try:
            caught_up_at = texts_head(snap / TEXTS).get("caught_up_at")
        except (OSError, ValueError):
            return False  # unreadable: the load says so and replays from 0
        age = None if caught_up_at is None else time.time() - float(caught_up_at)
        if age is not None and age <= self.tombstone_retention_s:
            return False
        log.warning(
            "shard %d: snapshot in %s was caught up %s ago, past the tombstone retention of"
            " %.0f s: the log may have dropped deletes it misses; not loading it",
            self.partition,
            snap,
            "an unknown time" if age is None else f"{age:.0f} s",
            self.tombstone_retention_s,
        )
        return True

    def _fetch_published(self, snap: Path) -> None:
        """Move the newest complete snapshot published to the log into `snap`, if any."""
        assert self.snapshots is not None
        spool = self.directory / FETCH_DIR
        shutil.rmtree(spool, ignore_errors=True)  # a crash's leftovers
        spool.mkdir(parents=True)
        try:
            found = self.snapshots.fetch(spool)
            if found is None:
                log.info(
                    "shard %d: no snapshot published to the log; replaying from 0", self.partition
                )
                return
            snap.mkdir(parents=True, exist_ok=True)
            for name, path in sorted(found.files.items(), key=lambda f: f[0] == MANIFEST):
                os.replace(path, snap / name)  # the manifest last, as DenseShard.save does
            fsync_dir(snap)
        finally:
            shutil.rmtree(spool, ignore_errors=True)
        self._published = True
        log.info(
            "shard %d: loaded the snapshot published at chunk offset %d; replaying the rest",
            self.partition,
            found.offset,
        )

    def catch_up(self, max_records: int | None = None) -> int:
        """Apply what the partition has beyond this replica's offset: about `max_records`, or
        else up to its end as this call found it; returns records applied. Under steady writes
        a catch-up that chased the end would not return until the writes paused."""
        applied = 0
        goal_at = time.time()
        goal = None if max_records is not None else self.log.end_offset(self.topic, self.partition)
        while max_records is None or applied < max_records:
            if goal is not None and self.offset >= goal:
                self._caught_up_at = goal_at  # whatever is past the goal was written after it
                break
            asked_at = time.time()
            records = self.log.read(self.topic, self.partition, self.offset, max_records=READ_BATCH)
            if not records:
                self._caught_up_at = asked_at  # whatever comes later was written after it
                break
            self._apply(records)
            applied += len(records)
        self._since_snapshot += applied
        self._since_publish += applied
        if applied and self._unsaved_since is None:
            self._unsaved_since = time.monotonic()
        if self._writing is not None:
            if not self._writing[1].done():
                return applied
            self._account_written()
        # a publisher with no snapshot in the log yet publishes one once caught up
        first_to_publish = self._may_publish and not self._published and self._since_publish > 0
        unsaved_s = 0.0 if self._unsaved_since is None else time.monotonic() - self._unsaved_since
        due = first_to_publish or snapshot_due(self._since_snapshot, unsaved_s, self._spread)
        if due and self._snapshot_turn.acquire(blocking=False):  # else at a later call
            try:
                taken = self._capture()
                self._writing = taken, self._writer.submit(self._write_in_turn, taken)
            except BaseException:
                self._snapshot_turn.release()
                raise
        return applied

    def _apply(self, records: list[LogRecord]) -> None:
        """Runs of upserts go to FAISS in one call per tenant, and so do runs of tombstones
        (a document's chunks are deleted together: an IVF removal scans the whole partition
        once per call); a record of the other kind ends a run, so the order is the log's."""
        run: dict[str, dict[str, Vectors]] = {}
        gone: dict[str, dict[str, None]] = {}  # tenant -> chunk ids (ordered, distinct)

        def flush() -> None:
            for tenant, ids in gone.items():
                self.shard.delete(tenant, list(ids))
                with self._texts_lock:
                    texts = self.texts.get(tenant, {})
                    for chunk_id in ids:
                        texts.pop(chunk_id, None)
                postings = self.postings.get(tenant, TermPostings())
                for chunk_id in ids:
                    postings.remove(chunk_id)
            gone.clear()
            for tenant, vectors in run.items():
                self.shard.upsert(tenant, list(vectors), np.stack(list(vectors.values())))
            run.clear()

        for record in records:
            tenant, chunk_id = split_chunk_key(record.key)
            if record.value is None:
                if run:
                    flush()
                gone.setdefault(tenant, {})[chunk_id] = None
            else:
                if gone:
                    flush()
                chunk, vector = decode_chunk(record.value, self.identity.dimension)
                run.setdefault(tenant, {})[chunk_id] = vector
                with self._texts_lock:
                    self.texts.setdefault(tenant, {})[chunk_id] = chunk
                self.postings.setdefault(tenant, TermPostings()).add(chunk)
        flush()
        self.offset = records[-1].offset + 1

    def snapshot(self) -> None:
        """Snapshot now and return once it is written (and published, when due): after the
        one being written in the background, if any."""
        if self._writing is not None:
            self._writing[1].exception()  # wait; a failure is logged by the accounting
            self._account_written()
        with self._snapshot_turn:
            taken = self._capture()
            if self._write(taken):  # on this thread: a failure raises to the caller
                self._mark_published(taken.since_publish)

    @property
    def _may_publish(self) -> bool:
        """A publisher publishes only once it has read its partition to the end: a snapshot
        taken before could not say how old the records it misses are, and every replica with a
        tombstone retention would refuse it."""
        return self.publish and self._caught_up_at is not None

    def _capture(self) -> _Snapshot:
        """This replica's state at its offset, in memory (the shard's bytes, the texts' field
        maps; chunks are immutable): the applying thread pauses only for this, not for
        encoding, writing and fsyncing ~120 MB per 50 k chunks."""
        now = time.monotonic()
        self.shard.wal_offset = self.offset
        taken = _Snapshot(
            offset=self.offset,
            caught_up_at=self._caught_up_at,
            # vars, not asdict: asdict deep-copies every field (20 s per 50 k chunks)
            texts={t: [vars(c) for c in cs.values()] for t, cs in self.texts.items()},
            shard=self.shard.image(),
            publish=self._may_publish
            and publish_due(
                self._since_publish, now - self._published_at, published=self._published
            ),
            since_publish=self._since_publish,
        )
        self._since_snapshot = 0
        self._unsaved_since = None
        self._spread = snapshot_spread(self._rng)
        return taken

    def _write(self, taken: _Snapshot) -> bool:
        """Texts first, then the FAISS snapshot whose manifest names the same offset; then
        publish it if due. Returns whether it was published. Touches no replica state: it
        runs on the snapshot thread while the replica applies."""
        snap = self.directory / SNAPSHOT_DIR
        snap.mkdir(parents=True, exist_ok=True)
        write_durable(snap / TEXTS, texts_json(taken.offset, taken.texts, taken.caught_up_at))
        taken.shard.write(snap)
        return taken.publish and self._publish_files(taken.offset)

    def _write_in_turn(self, taken: _Snapshot) -> bool:
        """`_write` on the snapshot thread, then give the process's snapshot turn back."""
        try:
            return self._write(taken)
        finally:
            self._snapshot_turn.release()

    def _account_written(self) -> None:
        """On the applying thread, once the snapshot being written is done: a published one
        resets what counts toward the next publication; a failed one is logged (the next is
        taken at the next bound)."""
        assert self._writing is not None
        (taken, writing), self._writing = self._writing, None
        try:
            published = writing.result()
        except Exception:
            log.exception("shard %d: snapshot at offset %d failed", self.partition, taken.offset)
            return
        if published:
            self._mark_published(taken.since_publish)

    def publish_snapshot(self) -> bool:
        """Publish the snapshot on disk (see `snapshot`) to the log; False if it could not."""
        manifest = json.loads((self.directory / SNAPSHOT_DIR / MANIFEST).read_bytes())
        published = self._publish_files(manifest["wal_offset"])
        if published:
            self._mark_published(self._since_publish)
        return published

    def _publish_files(self, offset: int) -> bool:
        """The snapshot files on disk, which cover the log up to `offset`, into the log."""
        assert self.snapshots is not None
        snap = self.directory / SNAPSHOT_DIR
        files = {p.name: p for p in snap.iterdir() if not p.name.startswith(".")}
        return self.snapshots.publish(files, offset)

    def _mark_published(self, records: int) -> None:
        self._published = True
        self._since_publish -= records  # those applied while it was written count on
        self._published_at = time.monotonic()

    def search(
        self,
        query_vector: Vectors,
        top_k: int,
        tenant_id: str,
        identity: ModelIdentity,
        access: TermExpr | None = None,
        *,
        with_chunks: int = 0,
    ) -> list[ScoredId]:
        """Top-k of the tenant; `access` selects the allowed ids from this shard's postings,
        and the partition searches only those (exact, or HNSW with an id selector). The first
        `with_chunks` hits carry their chunk as this replica holds it now."""
        allowed = None
        if access is not None:
            allowed = self.postings.get(tenant_id, TermPostings()).select(access)
        hits = self.shard.search(query_vector, top_k, tenant_id, identity, allowed)
        if not with_chunks:
            return hits
        top = self.get_chunks(tenant_id, [h.chunk_id for h in hits[:with_chunks]])
        return [replace(h, chunk=top[h.chunk_id]) if h.chunk_id in top else h for h in hits]

    def get_chunks(self, tenant_id: str, chunk_ids: Sequence[str]) -> dict[str, Chunk]:
        mine = self.texts.get(tenant_id, {})
        found = {cid: mine.get(cid) for cid in chunk_ids}  # .get: the views thread may delete
        return {cid: c for cid, c in found.items() if c is not None}

    def count(self, tenant_id: str) -> int:
        return self.shard.count(tenant_id)

    def documents(self, tenant_id: str) -> set[tuple[str, str]]:
        with self._texts_lock:
            return {(c.source, c.doc_id) for c in self.texts.get(tenant_id, {}).values()}

    def _readable(self, tenant_id: str, access: TermExpr | None) -> frozenset[str] | None:
        """The tenant's chunk ids `access` selects (None: no access expression, all)."""
        if access is None:
            return None
        return self.postings.get(tenant_id, TermPostings()).select(access)

    def document_chunks(
        self, tenant_id: str, source: str, doc_id: str, access: TermExpr | None = None
    ) -> list[Chunk]:
        """This shard's chunks of one document of the tenant that `access` selects."""
        prefix = f"{source}:{doc_id}:"  # ids are {source}:{doc_id}:{n}; neither part has ':'
        allowed = self._readable(tenant_id, access)
        with self._texts_lock:
            return [
                c
                for cid, c in self.texts.get(tenant_id, {}).items()
                if cid.startswith(prefix) and (allowed is None or cid in allowed)
            ]

    def document_summaries(
        self, tenant_id: str, access: TermExpr | None = None
    ) -> dict[tuple[str, str], tuple[int, str, str | None]]:
        """(source, doc_id) -> (its chunks here, title, updated) of every document of the
        tenant with a chunk here that `access` selects."""
        allowed = self._readable(tenant_id, access)
        found: dict[tuple[str, str], tuple[int, str, str | None]] = {}
        with self._texts_lock:
            for cid, c in self.texts.get(tenant_id, {}).items():
                if allowed is not None and cid not in allowed:
                    continue
                key = (c.source, c.doc_id)
                had = found.get(key)
                found[key] = (1 + (had[0] if had else 0), c.title, c.updated)
        return found


def texts_head(path: Path) -> dict[str, Any]:
    """The fields of a snapshot's texts file other than its chunks (read whole: small next to
    the FAISS files the load reads anyway)."""
    data = json.loads(path.read_bytes())
    return {k: v for k, v in data.items() if k != "chunks"}
