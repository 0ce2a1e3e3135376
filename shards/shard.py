"""A dense shard: tenant -> partition, stamped with one embedding model identity.

Snapshots are a directory of generation-numbered partition files plus `manifest.json`,
which names them, stamps the identity, records the index spec (`hnsw`, and `index`: the type
and its parameters; a manifest written before index types had no `index`, and loads as type
hnsw) and the log offset the snapshot covers
(`wal_offset`, named when a shard had a write-ahead log of its own; the snapshots keep the
name). The manifest is renamed into place last, so a crash at any point leaves the previous
manifest pointing at the previous, complete set of files.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ragindex.config import DenseIndexSpec, HnswSpec
from ragindex.errors import IdentityMismatch, InvalidInput
from ragindex.protocols import Vectors
from ragindex.shards.fsio import fsync_dir, write_durable
from ragindex.shards.partition import TenantPartition
from ragindex.shards.vectors import (
    prepare_query,
    prepare_vectors,
    validate_chunk_ids,
    validate_top_k,
)
from ragindex.types import ModelIdentity, ScoredId, validate_tenant

MANIFEST = "manifest.json"
FORMAT = 1
_GENERATION_FILE = re.compile(r"^g(\d+)-.*\.(faiss|json)$")
_LOAD_RETRIES = 5


def check_identity(expected: ModelIdentity, got: ModelIdentity, what: str = "query") -> None:
    """Refuse vectors made by another embedding model identity (DESIGN.md invariant 2)."""
    if got != expected:
        raise IdentityMismatch(
            f"{what} uses embedding model identity {got.to_dict()}, but this index was built"
            f" with {expected.to_dict()}; vectors of two models never mix"
        )


@dataclass(frozen=True)
class ShardImage:
    """A shard's snapshot in memory (`DenseShard.image`): per tenant its FAISS index and
    metadata bytes, and the log offset they cover."""

    identity: ModelIdentity
    hnsw: HnswSpec
    exact_threshold: int
    wal_offset: int
    partitions: dict[str, tuple[bytes, bytes]]  # tenant -> (index bytes, metadata bytes)
    index: DenseIndexSpec = field(default_factory=DenseIndexSpec)

    def write(self, directory: Path) -> None:
        """Write it atomically (temp files, fsync, rename; the manifest last) and remove the
        previous generation's files."""
        directory.mkdir(parents=True, exist_ok=True)
        previous = _read_manifest(directory)
        generation = previous["generation"] + 1 if previous else 1
        files: dict[str, dict[str, str]] = {}
        for tenant, (index_bytes, meta_bytes) in self.partitions.items():
            names = {
                "index": f"g{generation}-{tenant}.faiss",
                "meta": f"g{generation}-{tenant}.json",
            }
            write_durable(directory / names["index"], index_bytes)
            write_durable(directory / names["meta"], meta_bytes)
            files[tenant] = names
        manifest = {
            "format": FORMAT,
            "generation": generation,
            "identity": self.identity.to_dict(),
            "hnsw": self.hnsw.model_dump(),
            "index": self.index.model_dump(mode="json"),
            "exact_threshold": self.exact_threshold,
            "wal_offset": self.wal_offset,
            "partitions": files,
        }
        write_durable(directory / MANIFEST, json.dumps(manifest, indent=1).encode())
        fsync_dir(directory)
        keep = {MANIFEST} | {name for names in files.values() for name in names.values()}
        for path in directory.iterdir():
            if path.name not in keep and (
                _GENERATION_FILE.match(path.name) or path.name.startswith(".")
            ):
                path.unlink(missing_ok=True)


class DenseShard:
    """Per-tenant partitions of one shard. Thread-safe: one lock serialises all access.

    `index`: the type of the partitions that outgrow exact search (None: hnsw, as before
    index types); raises InvalidInput naming the field when it cannot index the identity's
    dimension (`dense.index.pq.m`). `scratch`: the node-local directory of the files an index
    type keeps on disk (None: the system's temporary directory)."""

    def __init__(
        self,
        identity: ModelIdentity,
        hnsw: HnswSpec,
        exact_threshold: int,
        index: DenseIndexSpec | None = None,
        scratch: Path | None = None,
    ) -> None:
        self.identity = identity
        self.hnsw = hnsw
        self.index = index or DenseIndexSpec()
        self.index.check_dimension(identity.dimension)
        self.exact_threshold = exact_threshold
        self.scratch = scratch
        self.wal_offset = 0  # the chunks log offset this state covers (set by replay and load)
        self._partitions: dict[str, TenantPartition] = {}
        self._lock = threading.Lock()

    @property
    def dim(self) -> int:
        return self.identity.dimension

    def upsert(self, tenant_id: str, chunk_ids: Sequence[str], vectors: object) -> None:
        """Insert or replace a tenant's chunks; bad input raises and changes nothing."""
        tenant = validate_tenant(tenant_id)
        vecs = prepare_vectors(vectors, self.dim)
        ids = validate_chunk_ids(chunk_ids, len(vecs))
        if not ids:
            return
        with self._lock:
            part = self._partitions.get(tenant)
            if part is None:
                part = TenantPartition(
                    self.dim, self.hnsw, self.exact_threshold, self.index, self.scratch
                )
                part.upsert(ids, vecs)
                self._partitions[tenant] = part
            else:
                part.upsert(ids, vecs)

    def delete(self, tenant_id: str, chunk_ids: Sequence[str]) -> int:
        """Tombstone chunks of a tenant; returns how many were live."""
        tenant = validate_tenant(tenant_id)
        ids = validate_chunk_ids(chunk_ids)
        with self._lock:
            part = self._partitions.get(tenant)
            return part.delete(ids) if part is not None else 0

    def search(
        self,
        query_vector: object,
        top_k: int,
        tenant_id: str,
        identity: ModelIdentity,
        allowed: Collection[str] | None = None,
    ) -> list[ScoredId]:
        """The tenant's top-k chunks (of `allowed` only, when given); only that tenant's
        partition is ever searched."""
        tenant = validate_tenant(tenant_id)
        check_identity(self.identity, identity)
        k = validate_top_k(top_k)
        query = prepare_query(query_vector, self.dim)
        with self._lock:
            part = self._partitions.get(tenant)
            return part.search(query, k, allowed) if part is not None else []

    def count(self, tenant_id: str) -> int:
        tenant = validate_tenant(tenant_id)
        with self._lock:
            part = self._partitions.get(tenant)
            return len(part) if part is not None else 0

    def live_vectors(self, tenant_id: str) -> tuple[list[str], Vectors]:
        """The tenant's live chunk ids and vectors in this shard."""
        tenant = validate_tenant(tenant_id)
        with self._lock:
            part = self._partitions.get(tenant)
            if part is None:
                return [], np.empty((0, self.dim), dtype=np.float32)
            return part.live_vectors()

    def kind_of(self, tenant_id: str) -> str | None:
        """How this shard searches the tenant ("flat", or an index type such as "hnsw" or
        "ivf_pq"), None if it holds none."""
        tenant = validate_tenant(tenant_id)
        with self._lock:
            part = self._partitions.get(tenant)
            return part.kind if part is not None and len(part) else None

    def tenants(self) -> list[str]:
        with self._lock:
            return sorted(t for t, p in self._partitions.items() if len(p))

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {
                "vectors": sum(len(p) for p in self._partitions.values()),
                "tombstones": sum(p.tombstones for p in self._partitions.values()),
                "tenants": sum(1 for p in self._partitions.values() if len(p)),
                "hnsw_partitions": sum(1 for p in self._partitions.values() if p.kind == "hnsw"),
                "index_partitions": sum(
                    1 for p in self._partitions.values() if len(p) and p.kind != "flat"
                ),
                "wal_offset": self.wal_offset,
            }

    def memory_bytes(self) -> tuple[int, int]:
        """(bytes held in memory, bytes on local disk) of every partition's index and refine
        codes (`TenantPartition.memory_bytes`)."""
        with self._lock:
            sizes = [part.memory_bytes() for part in self._partitions.values()]
        return sum(held for held, _ in sizes), sum(disk for _, disk in sizes)

    def compact(self) -> None:
        """Rebuild every partition without tombstones and drop emptied tenants."""
        with self._lock:
            for tenant in list(self._partitions):
                part = self._partitions[tenant]
                if not len(part):
                    del self._partitions[tenant]
                elif part.tombstones:
                    part.compact()

    def save(self, directory: Path) -> None:
        """Write a snapshot atomically (temp files, fsync, rename; the manifest last)."""
        self.image().write(directory)

    def image(self) -> ShardImage:
        """The shard's state as bytes, taken under the lock: what `save` writes, which any
        thread may then write while the shard keeps changing."""
        with self._lock:
            return ShardImage(
                identity=self.identity,
                hnsw=self.hnsw,
                index=self.index,
                exact_threshold=self.exact_threshold,
                wal_offset=self.wal_offset,
                partitions={
                    tenant: part.to_files()
                    for tenant, part in sorted(self._partitions.items())
                    if len(part)
                },
            )

    @classmethod
    def load(
        cls,
        directory: Path,
        hnsw: HnswSpec | None = None,
        exact_threshold: int | None = None,
        index: DenseIndexSpec | None = None,
        scratch: Path | None = None,
    ) -> DenseShard:
        """Read the snapshot the manifest names; `hnsw`/`exact_threshold`/`index` override the
        saved ones (query parameters such as efSearch and nprobe apply to the loaded
        partitions, which keep the kind they were saved as; build parameters apply to the
        partitions built from now on).

        Retries if a concurrent `save` removed the files between reading the manifest and them.
        """
        for attempt in range(_LOAD_RETRIES):
            manifest = _read_manifest(directory)
            if manifest is None:
                raise FileNotFoundError(f"no dense shard snapshot in {directory}")
            try:
                return cls._from_manifest(
                    directory, manifest, hnsw, exact_threshold, index, scratch
                )
            except FileNotFoundError:
                if attempt == _LOAD_RETRIES - 1:
                    raise
        raise AssertionError("unreachable")

    @classmethod
    def _from_manifest(
        cls,
        directory: Path,
        manifest: dict[str, Any],
        hnsw: HnswSpec | None,
        exact_threshold: int | None,
        index: DenseIndexSpec | None,
        scratch: Path | None,
    ) -> DenseShard:
        if manifest.get("format") != FORMAT:
            raise InvalidInput(f"{directory}: unsupported snapshot format {manifest.get('format')}")
        shard = cls(
            ModelIdentity.from_dict(manifest["identity"]),
            hnsw or HnswSpec.model_validate(manifest["hnsw"]),
            manifest["exact_threshold"] if exact_threshold is None else exact_threshold,
            index or DenseIndexSpec.model_validate(manifest.get("index", {})),
            scratch,
        )
        shard.wal_offset = int(manifest["wal_offset"])
        for tenant, names in manifest["partitions"].items():
            shard._partitions[tenant] = TenantPartition.from_files(
                (directory / names["index"]).read_bytes(),
                (directory / names["meta"]).read_bytes(),
                shard.dim,
                shard.hnsw,
                shard.exact_threshold,
                shard.index,
                scratch,
            )
        return shard


def _read_manifest(directory: Path) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads((directory / MANIFEST).read_bytes())
    except FileNotFoundError:
        return None
    return data
