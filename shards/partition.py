"""One tenant's vectors on one shard: exact while small, HNSW once large.

A per-tenant partition is the tenant filter (DESIGN.md invariant 1): searching it cannot
touch another tenant's vectors, and a small tenant keeps exact recall, which a selector
inside a shared HNSW graph does not give (FIELD-NOTES: 1 % tenant, recall@10 0.13-0.56).

Internal ids are int64s handed out in increasing order and never reused; an upsert of a
known chunk id gives it a new internal id and retires the old one (removed from a flat
index, tombstoned in HNSW, which cannot remove), so a replaced or deleted vector is never
returned. `compacted()` rebuilds without tombstones.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from typing import Any, Literal

import faiss
import numpy as np

from ragindex.config import HnswSpec
from ragindex.errors import InvalidInput
from ragindex.filters import dense_plan
from ragindex.protocols import Vectors
from ragindex.shards.vectors import (
    prepare_query,
    prepare_vectors,
    validate_chunk_ids,
    validate_top_k,
)
from ragindex.types import ScoredId

Kind = Literal["flat", "hnsw"]
ALLOWED_CACHED = 16
GATHERED_CACHED = 4  # matrices of at most max(exact_threshold, 12 % of the partition) vectors


def choose_kind(live: int, exact_threshold: int) -> Kind:
    """Exact search up to the threshold, HNSW above it."""
    return "flat" if live <= exact_threshold else "hnsw"


class TenantPartition:
    """The vectors of one tenant on one shard, keyed by chunk id."""

    def __init__(self, dim: int, hnsw: HnswSpec, exact_threshold: int) -> None:
        if dim < 1:
            raise InvalidInput(f"dimension must be >= 1; got {dim}")
        if exact_threshold < 0:
            raise InvalidInput(f"exact_threshold must be >= 0; got {exact_threshold}")
        self.dim = dim
        self.hnsw = hnsw
        self.exact_threshold = exact_threshold
        self.kind: Kind = "flat"
        self._index = self._new_index("flat")
        self._internal: dict[str, int] = {}  # live chunk id -> internal id
        self._chunk: dict[int, str] = {}  # live internal id -> chunk id
        self._tombstones: set[int] = set()  # retired ids still inside an HNSW graph
        self._next_id = 0
        self._selector: tuple[Any, Any] | None = None  # (IDSelectorBatch, IDSelectorNot)
        # allowed ids (a frozenset, as TermPostings.select keeps it) -> (internal ids, selector),
        # until the next write
        self._allowed: dict[frozenset[str], tuple[np.ndarray, Any]] = {}
        self._gathered: dict[frozenset[str], Vectors] = {}  # their vectors, for exact search

    def __len__(self) -> int:
        return len(self._internal)

    def __contains__(self, chunk_id: object) -> bool:
        return chunk_id in self._internal

    @property
    def tombstones(self) -> int:
        return len(self._tombstones)

    def chunk_ids(self) -> list[str]:
        return list(self._internal)

    def live_vectors(self) -> tuple[list[str], Vectors]:
        """Every live chunk id and its stored vector (to rebuild the same data another way)."""
        internal = np.array(list(self._chunk), dtype=np.int64)
        return [self._chunk[int(i)] for i in internal], self._vectors_of(internal)

    def _new_index(self, kind: Kind) -> Any:
        inner: Any
        if kind == "flat":
            inner = faiss.IndexFlatIP(self.dim)
        else:
            inner = faiss.IndexHNSWFlat(self.dim, self.hnsw.m, faiss.METRIC_INNER_PRODUCT)
            inner.hnsw.efConstruction = self.hnsw.ef_construction
            inner.hnsw.efSearch = self.hnsw.ef_search
        return faiss.IndexIDMap2(inner)

    def upsert(self, chunk_ids: Sequence[str], vectors: object) -> None:
        """Insert or replace; raises InvalidInput and changes nothing on bad input."""
        vecs = prepare_vectors(vectors, self.dim)
        ids = validate_chunk_ids(chunk_ids, len(vecs))
        if not ids:
            return
        new_internal = np.arange(self._next_id, self._next_id + len(ids), dtype=np.int64)
        replaced = [self._internal[c] for c in ids if c in self._internal]
        replaced_set = set(replaced)
        live_after = len(self._internal) - len(replaced) + len(ids)
        if self.kind == "flat" and choose_kind(live_after, self.exact_threshold) == "hnsw":
            keep = np.array([i for i in self._chunk if i not in replaced_set], dtype=np.int64)
            self._rebuild(
                "hnsw",
                np.concatenate([self._vectors_of(keep), vecs]),
                np.concatenate([keep, new_internal]),
            )
        else:
            self._retire(replaced)
            self._index.add_with_ids(vecs, new_internal)
        self._allowed.clear()
        self._gathered.clear()
        for cid, iid in zip(ids, new_internal.tolist(), strict=True):
            self._chunk.pop(self._internal.get(cid, -1), None)
            self._internal[cid] = iid
            self._chunk[iid] = cid
        self._next_id += len(ids)

    def delete(self, chunk_ids: Sequence[str]) -> int:
        """Retire the given chunk ids (unknown ones are ignored); returns how many were live."""
        ids = validate_chunk_ids(chunk_ids)
        self._allowed.clear()
        self._gathered.clear()
        retired = [self._internal.pop(c) for c in ids if c in self._internal]
        for iid in retired:
            del self._chunk[iid]
        self._retire(retired)
        return len(retired)

    def _retire(self, internal_ids: list[int]) -> None:
        if not internal_ids:
            return
        if self.kind == "flat":
            self._index.remove_ids(faiss.IDSelectorBatch(np.array(internal_ids, dtype=np.int64)))
        else:
            self._tombstones.update(internal_ids)
            self._selector = None

    def _vectors_of(self, internal_ids: np.ndarray) -> Vectors:
        if not len(internal_ids):
            return np.empty((0, self.dim), dtype=np.float32)
        return np.ascontiguousarray(self._index.reconstruct_batch(internal_ids), dtype=np.float32)

    def _rebuild(self, kind: Kind, vecs: Vectors, internal_ids: np.ndarray) -> None:
        index = self._new_index(kind)
        if len(internal_ids):
            index.add_with_ids(vecs, internal_ids)
        self._index, self.kind = index, kind
        self._allowed.clear()
        self._gathered.clear()
        self._tombstones.clear()
        self._selector = None

    def compact(self) -> None:
        """Rebuild from the live vectors: drops tombstones, re-chooses flat or HNSW."""
        live = np.array(list(self._chunk), dtype=np.int64)
        self._rebuild(choose_kind(len(live), self.exact_threshold), self._vectors_of(live), live)

    def search(
        self, query_vector: object, top_k: int, allowed: Collection[str] | None = None
    ) -> list[ScoredId]:
        """Top-k live chunks by inner product of unit vectors (cosine), best first.

        `allowed` (chunk ids) restricts the search inside the index: exact over the allowed
        vectors or HNSW with an id selector and a raised efSearch, as `dense_plan` decides."""
        query = prepare_query(query_vector, self.dim)
        k = validate_top_k(top_k)
        if allowed is None:
            return self._search_all(query, min(k, len(self._internal)))
        wanted, selector = self._allowed_ids(allowed)
        plan = dense_plan(
            len(wanted), len(self._internal), k, self.hnsw.ef_search, self.exact_threshold
        )
        if not len(wanted):
            return []
        if plan.exact or self.kind == "flat":
            scores = self._gathered_vectors(allowed, wanted) @ query[0]
            top = np.argsort(-scores, kind="stable")[:k]
            return [ScoredId(self._chunk[int(wanted[i])], float(scores[i])) for i in top]
        params = faiss.SearchParametersHNSW()  # type: ignore[attr-defined]  # no stub
        params.efSearch = max(plan.ef_search, k)
        params.sel = selector  # live ids only: no tombstone inside
        scores_, labels = self._index.search(query, min(k, len(wanted)), params=params)
        return self._hits(scores_, labels)

    def _allowed_ids(self, allowed: Collection[str]) -> tuple[np.ndarray, Any]:
        """Internal ids of the live allowed chunks and their IDSelectorBatch (cached per
        frozenset until the next write: repeated principals and filters cost nothing)."""
        key = allowed if isinstance(allowed, frozenset) else None
        if key is not None and key in self._allowed:
            return self._allowed[key]
        internal = self._internal
        wanted = np.fromiter((internal[c] for c in allowed if c in internal), dtype=np.int64)
        found = wanted, faiss.IDSelectorBatch(wanted)
        if key is not None:
            if len(self._allowed) >= ALLOWED_CACHED:
                self._allowed.pop(next(iter(self._allowed)))
            self._allowed[key] = found
        return found

    def _gathered_vectors(self, allowed: Collection[str], wanted: np.ndarray) -> Vectors:
        """The allowed vectors as one matrix: gathered once per allowed set until the next
        write (gathering costs more than the search), for a few sets at a time."""
        key = allowed if isinstance(allowed, frozenset) else None
        if key is not None and key in self._gathered:
            return self._gathered[key]
        vectors = self._vectors_of(wanted)
        if key is not None:
            if len(self._gathered) >= GATHERED_CACHED:
                self._gathered.pop(next(iter(self._gathered)))
            self._gathered[key] = vectors
        return vectors

    def _search_all(self, query: Vectors, k: int) -> list[ScoredId]:
        if k == 0:
            return []
        if self.kind == "flat":
            scores, labels = self._index.search(query, k)
        else:
            params = faiss.SearchParametersHNSW()  # type: ignore[attr-defined]  # no stub
            # efSearch is honoured as given, even below k (FAISS still returns k hits): a
            # clamp to k would hide a too-small efSearch from the gate and the sweep.
            params.efSearch = self.hnsw.ef_search
            if self._tombstones:
                if self._selector is None:
                    batch = faiss.IDSelectorBatch(np.fromiter(self._tombstones, dtype=np.int64))
                    self._selector = (batch, faiss.IDSelectorNot(batch))
                params.sel = self._selector[1]
            scores, labels = self._index.search(query, k, params=params)
        return self._hits(scores, labels)

    def _hits(self, scores: np.ndarray, labels: np.ndarray) -> list[ScoredId]:
        return [
            ScoredId(self._chunk[int(i)], float(s))
            for s, i in zip(scores[0], labels[0], strict=True)
            if i >= 0 and int(i) in self._chunk
        ]

    def to_files(self) -> tuple[bytes, bytes]:
        """(faiss index bytes, metadata JSON bytes) for a snapshot."""
        meta = {
            "kind": self.kind,
            "next_id": self._next_id,
            "internal_ids": list(self._chunk),
            "chunk_ids": list(self._chunk.values()),
            "tombstones": sorted(self._tombstones),
        }
        return faiss.serialize_index(self._index).tobytes(), json.dumps(meta).encode()

    @classmethod
    def from_files(
        cls, index_bytes: bytes, meta_bytes: bytes, dim: int, hnsw: HnswSpec, exact_threshold: int
    ) -> TenantPartition:
        """Inverse of `to_files`; checks the index matches its metadata."""
        meta = json.loads(meta_bytes)
        part = cls(dim, hnsw, exact_threshold)
        part._index = faiss.deserialize_index(np.frombuffer(index_bytes, dtype=np.uint8))
        part.kind = meta["kind"]
        part._next_id = int(meta["next_id"])
        part._chunk = dict(zip(meta["internal_ids"], meta["chunk_ids"], strict=True))
        part._internal = {c: i for i, c in part._chunk.items()}
        part._tombstones = set(meta["tombstones"])
        if part._index.d != dim or part._index.ntotal != len(part._chunk) + len(part._tombstones):
            raise ValueError("snapshot partition is inconsistent with its metadata")
        return part
