"""The dense leg over N shards: the writer side of every shard, and the merged search.

Chunks are routed by `shard_for(tenant, chunk_id, n)`, which is stable across processes,
so the same chunk always lands on the same shard. Every write is appended to the owning
shard's WAL and fsynced before it is applied or acknowledged (DESIGN.md invariant 5);
`save()` snapshots each shard and truncates its log to what the snapshot covers.
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ragindex.config import HnswSpec
from ragindex.errors import InvalidInput
from ragindex.filters import TermExpr
from ragindex.hashing import shard_for
from ragindex.protocols import Vectors
from ragindex.shards.fsio import fsync_dir, write_durable
from ragindex.shards.replica import SNAPSHOT_DIR, WAL_DIR, ShardReplica
from ragindex.shards.shard import MANIFEST, DenseShard, check_identity
from ragindex.shards.vectors import (
    prepare_query,
    prepare_vectors,
    validate_chunk_ids,
    validate_top_k,
)
from ragindex.shards.wal import DeleteRecord, UpsertRecord, WalRecord, WriteAheadLog
from ragindex.types import ModelIdentity, ScoredId, validate_tenant

INDEX_FILE = "index.json"


def shard_dir(root: Path, shard: int) -> Path:
    """Where shard `shard` of the index at `root` keeps its snapshot/ and wal/."""
    return root / f"shard-{shard:03d}"


class ShardedDenseIndex:
    """DenseIndex over N shards held by this process, which is their single writer."""

    def __init__(
        self,
        root: Path,
        identity: ModelIdentity,
        shards: list[DenseShard],
        wals: list[WriteAheadLog],
    ) -> None:
        self.root = root
        self.identity = identity
        self._shards = shards
        self._wals = wals
        self._write_lock = threading.Lock()  # log order == apply order, for replicas to agree
        self._closed = False
        self.resolve_access: Callable[[str, TermExpr], Collection[str]] | None = None
        """Allowed chunk ids of an access expression: the shards hold vectors, not chunks."""

    @classmethod
    def open(
        cls,
        root: Path,
        identity: ModelIdentity,
        num_shards: int,
        hnsw: HnswSpec,
        exact_threshold: int,
    ) -> ShardedDenseIndex:
        """Open or create the index at `root`; replays each shard's WAL after its snapshot.

        Raises IdentityMismatch if `root` was built with another model identity, and
        InvalidInput if it has another number of shards (resharding is not supported).
        """
        if isinstance(num_shards, bool) or not isinstance(num_shards, int) or num_shards < 1:
            raise InvalidInput(f"num_shards must be a positive integer; got {num_shards!r}")
        if exact_threshold < 0:
            raise InvalidInput(f"exact_threshold must be >= 0; got {exact_threshold}")
        _check_or_stamp(root, identity, num_shards)
        wals: list[WriteAheadLog] = []
        shards: list[DenseShard] = []
        try:
            for i in range(num_shards):
                directory = shard_dir(root, i)
                wals.append(WriteAheadLog(directory / WAL_DIR))  # cuts a torn tail first
                if not (directory / SNAPSHOT_DIR / MANIFEST).exists():
                    DenseShard(identity, hnsw, exact_threshold).save(directory / SNAPSHOT_DIR)
                replica = ShardReplica(directory, hnsw, exact_threshold)
                check_identity(replica.identity, identity, what="the embedder opening it")
                shards.append(replica.shard)
        except BaseException:
            for wal in wals:
                wal.close()
            raise
        return cls(root, identity, shards, wals)

    @property
    def num_shards(self) -> int:
        return len(self._shards)

    def _check_open(self) -> None:
        if self._closed:
            raise InvalidInput(f"dense index at {self.root} is closed")

    def _write(self, records: dict[int, WalRecord]) -> None:
        """Log each shard's record durably, then apply it; the caller holds the write lock."""
        for s, record in sorted(records.items()):
            end = self._wals[s].append([record])
            shard = self._shards[s]
            if isinstance(record, UpsertRecord):
                shard.upsert(record.tenant_id, record.chunk_ids, record.vectors)
            else:
                shard.delete(record.tenant_id, record.chunk_ids)
            shard.wal_offset = end

    def upsert(self, tenant_id: str, chunk_ids: Sequence[str], vectors: Vectors) -> None:
        """Insert or replace chunks; durable on every owning shard's WAL before it returns."""
        self._check_open()
        tenant = validate_tenant(tenant_id)
        vecs = prepare_vectors(vectors, self.identity.dimension)
        ids = validate_chunk_ids(chunk_ids, len(vecs))
        rows: dict[int, list[int]] = defaultdict(list)
        for row, cid in enumerate(ids):
            rows[shard_for(tenant, cid, self.num_shards)].append(row)
        records: dict[int, WalRecord] = {
            s: UpsertRecord(tenant, tuple(ids[r] for r in rs), vecs[rs]) for s, rs in rows.items()
        }
        with self._write_lock:
            self._write(records)

    def delete(self, tenant_id: str, chunk_ids: Sequence[str]) -> None:
        """Tombstone chunks (unknown ids are ignored); durable before it returns."""
        self._check_open()
        tenant = validate_tenant(tenant_id)
        ids = validate_chunk_ids(chunk_ids)
        groups: dict[int, list[str]] = defaultdict(list)
        for cid in ids:
            groups[shard_for(tenant, cid, self.num_shards)].append(cid)
        records: dict[int, WalRecord] = {
            s: DeleteRecord(tenant, tuple(cids)) for s, cids in groups.items()
        }
        with self._write_lock:
            self._write(records)

    def search(
        self,
        query_vector: Vectors,
        top_k: int,
        tenant_id: str,
        identity: ModelIdentity,
        access: TermExpr | None = None,
    ) -> list[ScoredId]:
        """The tenant's top-k over all shards (of the chunks `access` allows, chosen inside
        each partition), merged by score (ties by chunk id)."""
        tenant = validate_tenant(tenant_id)
        check_identity(self.identity, identity)
        allowed = None
        if access is not None:
            if self.resolve_access is None:
                raise InvalidInput("this dense index cannot filter: it has no chunk attributes")
            allowed = self.resolve_access(tenant, access)
        k = validate_top_k(top_k)
        query = prepare_query(query_vector, self.identity.dimension)
        hits = [
            h for shard in self._shards for h in shard.search(query, k, tenant, identity, allowed)
        ]
        return sorted(hits, key=lambda h: (-h.score, h.chunk_id))[:k]

    def count(self, tenant_id: str) -> int:
        tenant = validate_tenant(tenant_id)
        return sum(shard.count(tenant) for shard in self._shards)

    def live_vectors(self, tenant_id: str) -> tuple[list[str], Vectors]:
        """The tenant's live chunk ids and vectors over all shards (e.g. to build the same
        data with another layout and compare searches)."""
        ids: list[str] = []
        parts: list[Vectors] = []
        for shard in self._shards:
            shard_ids, vectors = shard.live_vectors(tenant_id)
            ids += shard_ids
            parts.append(vectors)
        return ids, np.concatenate(parts)

    def kinds(self, tenant_id: str) -> list[str]:
        """How each shard holding the tenant searches it ("flat" or "hnsw")."""
        return [k for shard in self._shards if (k := shard.kind_of(tenant_id)) is not None]

    def stats(self) -> dict[str, Any]:
        per_shard = [shard.stats() for shard in self._shards]
        tenants = {t for shard in self._shards for t in shard.tenants()}
        return {
            "shards": self.num_shards,
            "identity": self.identity.to_dict(),
            "vectors": sum(s["vectors"] for s in per_shard),
            "tombstones": sum(s["tombstones"] for s in per_shard),
            "tenants": len(tenants),
            "per_shard": per_shard,
        }

    def save(self) -> None:
        """Snapshot every shard (atomically) and truncate its WAL to what the snapshot covers."""
        self._check_open()
        with self._write_lock:
            for i, shard in enumerate(self._shards):
                shard.save(shard_dir(self.root, i) / SNAPSHOT_DIR)
                self._wals[i].truncate(shard.wal_offset)

    def compact(self) -> None:
        """Rebuild partitions without tombstones, then snapshot the compacted shards."""
        self._check_open()
        with self._write_lock:
            for shard in self._shards:
                shard.compact()
        self.save()

    def close(self, snapshot: bool = True) -> None:
        """Snapshot (unless told not to: the WAL already holds every write), then release
        the WAL writer locks; a second close does nothing."""
        if self._closed:
            return
        try:
            if snapshot:
                self.save()
        finally:
            self._closed = True
            for wal in self._wals:
                wal.close()


def _check_or_stamp(root: Path, identity: ModelIdentity, num_shards: int) -> None:
    path = root / INDEX_FILE
    if path.exists():
        meta = json.loads(path.read_bytes())
        check_identity(
            ModelIdentity.from_dict(meta["identity"]), identity, what="the embedder opening it"
        )
        if meta["num_shards"] != num_shards:
            raise InvalidInput(
                f"dense index at {root} has {meta['num_shards']} shards, not {num_shards};"
                " resharding is not supported: build a new index generation"
            )
        return
    root.mkdir(parents=True, exist_ok=True)
    meta = {"identity": identity.to_dict(), "num_shards": num_shards}
    write_durable(path, json.dumps(meta, indent=1).encode())
    fsync_dir(root)
