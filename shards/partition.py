"""One tenant's vectors on one shard: exact while small, the spec's index type once large.

A per-tenant partition is the tenant filter (DESIGN.md invariant 1): searching it cannot
touch another tenant's vectors, and a small tenant keeps exact recall, which a selector
inside a shared HNSW graph does not give (FIELD-NOTES: 1 % tenant, recall@10 0.13-0.56).

The kinds (`choose_kind`): "flat" (exact, float32) while the partition holds at most
`exact_threshold` vectors or fewer than its type's training minimum; then `dense.index.type`:
"hnsw" (HNSW over float32), "hnsw_sq8" (HNSW over 8-bit scalar-quantized vectors), "ivf_pq" /
"ivf_sq8" (an inverted file of PQ or SQ8 codes whose candidates are re-scored with refine
codes held beside it, or with float32 vectors in a mapped file on local disk:
`MappedVectors`). Trained kinds are trained once, on the vectors the partition holds when it
first crosses into them (its first vectors in log order), and again at a `compact()`.

Internal ids are int64s handed out in increasing order and never reused; an upsert of a
known chunk id gives it a new internal id and retires the old one (removed from a flat or IVF
index and the refine codes, tombstoned in HNSW, which cannot remove), so a replaced or deleted
vector is never returned. `compact()` rebuilds without tombstones.

HNSW kinds also search their newest `hnsw.recentExact` vectors exactly and merge them in: a vector
unlike the ones already in the graph (a document on a new topic) gets links to neighbours that
are far from it, and a query near it (itself unlike the corpus) descends to the corpus's
nearest region and misses it (measured: such a fresh chunk was absent from the dense top 100
at efSearch 128 in a 30,000-vector partition, and found at rank 1 by exact search). So a
chunk just written is found by the dense leg whatever the graph does with it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any, Literal

import faiss
import numpy as np

from ragindex.config import IVF_TYPES, DenseIndexSpec, HnswSpec
from ragindex.errors import InvalidInput
from ragindex.filters import dense_plan
from ragindex.protocols import Vectors
from ragindex.shards.mapped_vectors import MappedVectors
from ragindex.shards.vectors import (
    prepare_query,
    prepare_vectors,
    validate_chunk_ids,
    validate_top_k,
)
from ragindex.types import ScoredId

Kind = Literal["flat", "hnsw", "hnsw_sq8", "ivf_pq", "ivf_sq8"]
KINDS: tuple[Kind, ...] = ("flat", "hnsw", "hnsw_sq8", "ivf_pq", "ivf_sq8")
GRAPH_KINDS: tuple[Kind, ...] = ("hnsw", "hnsw_sq8")  # retire by tombstones
ALLOWED_CACHED = 16
# matrices of at most max(exact_threshold, sqrt(25 efSearch x the partition)) vectors (dense_plan)
GATHERED_CACHED = 4
DEFAULT_INDEX = DenseIndexSpec()
# FAISS index_factory strings of the refine codes, by `dense.index.refine.storage` ("disk":
# float32 rows in a mapped file, `MappedVectors`).
REFINE_FACTORY = {"flat": "Flat", "fp16": "SQfp16", "sq8": "SQ8", "sq6": "SQ6", "sq4": "SQ4"}
# Retired refine codes stay in place (a removal moves every code after it) until they are this
# share of the live ones, or a snapshot is taken; then they are dropped in one pass.
REFINE_DEAD_SHARE = 0.1
# Scalar quantizers learn each dimension's range from the training vectors and clip a later
# vector to it; the range is widened by this share on each side first. Measured (HNSW16 SQ8,
# unit vectors, 16-d trained on 200 of 600 / 64-d on 1,000 of 5,000): the largest score error
# 0.14 / 0.061 unwidened, 0.006 / 0.005 at 0.2; recall@10 0.972 / 0.924 -> 0.982 / 0.936.
SQ_RANGE_WIDEN = 0.2


def choose_kind(live: int, exact_threshold: int, index: DenseIndexSpec = DEFAULT_INDEX) -> Kind:
    """Exact search up to the threshold and below the type's training minimum, the spec's
    index type past both."""
    if live <= exact_threshold or live < index.training_minimum:
        return "flat"
    return index.type


def ivf_probes(nprobe: int, nlist: int, candidates: int, live: int, share: float = 1.0) -> int:
    """Lists one IVF search scans: nprobe divided by an access filter's share of the partition
    (so that as many allowed vectors are scanned as unfiltered), and at least as many as are
    expected to hold twice the candidates wanted (a k near the partition's size scans it all)."""
    per_list = live * share / nlist
    cover = math.ceil(2 * candidates / per_list) if per_list > 0 else nlist
    return max(1, min(nlist, max(math.ceil(nprobe / max(share, 1e-9)), cover)))


def bitmap_selector(ids: np.ndarray, bound: int) -> Any:
    """A FAISS id selector of `ids` (each below `bound`) as a bitmap: one bit test per
    candidate the index scans, where an IDSelectorBatch hashes each one into a set as large as
    the allowed ids (and takes longer to build)."""
    bits = np.zeros(bound, dtype=bool)
    bits[ids] = True
    # The stub knows only the C++ (n, pointer) form; given the array, faiss's Python wrapper
    # passes both and keeps the array alive as long as the selector.
    bitmap = np.packbits(bits, bitorder="little")
    return faiss.IDSelectorBitmap(bitmap)  # type: ignore[call-arg, arg-type]


def _widen(index: Any) -> None:
    """Widen the ranges a scalar quantizer will learn (SQ_RANGE_WIDEN); others: nothing."""
    sq = getattr(index, "sq", None)
    if sq is not None:
        sq.rangestat_arg = SQ_RANGE_WIDEN


class TenantPartition:
    """The vectors of one tenant on one shard, keyed by chunk id."""

    def __init__(
        self,
        dim: int,
        hnsw: HnswSpec,
        exact_threshold: int,
        index: DenseIndexSpec | None = None,
        scratch: Path | None = None,
    ) -> None:
        """`scratch`: the node-local directory of the files an index type keeps on disk (the
        "disk" refine vectors); None: the system's temporary directory."""
        if dim < 1:
            raise InvalidInput(f"dimension must be >= 1; got {dim}")
        if exact_threshold < 0:
            raise InvalidInput(f"exact_threshold must be >= 0; got {exact_threshold}")
        self.dim = dim
        self.hnsw = hnsw
        self.index = index or DEFAULT_INDEX
        self.index.check_dimension(dim)
        self.exact_threshold = exact_threshold
        self.scratch = scratch
        self.kind: Kind = "flat"
        self._index, self._refine = self._new_index("flat", None)
        # IVF kinds: the internal ids of the refine codes, in their order (ascending: ids are
        # handed out in increasing order, and removal keeps the order), retired ones included
        # until `_drop_dead_refine` (`_refine_dead` of them; ids are never reused, so a retired
        # one is never looked up)
        self._refine_ids: np.ndarray = np.empty(0, dtype=np.int64)
        self._refine_dead = 0
        self._internal: dict[str, int] = {}  # live chunk id -> internal id
        self._chunk: dict[int, str] = {}  # live internal id -> chunk id
        self._tombstones: set[int] = set()  # retired ids still inside an HNSW graph
        # HNSW kinds: a ring of the newest vectors and their internal ids (-1: empty or
        # retired), searched exactly beside the graph; allocated when the graph is built
        self._recent_ids: np.ndarray = np.empty(0, dtype=np.int64)
        self._recent_vectors: np.ndarray = np.empty((0, dim), dtype=np.float32)
        self._recent_next = 0
        self._next_id = 0
        self._selector: tuple[Any, Any] | None = None  # (IDSelectorBatch, IDSelectorNot)
        # allowed ids (a frozenset, as TermPostings.select keeps it) -> (internal ids, selector),
        # or None for every live chunk, until the next write
        self._allowed: dict[frozenset[str], tuple[np.ndarray, Any] | None] = {}
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
        """Every live chunk id and its stored vector (to rebuild the same data another way;
        decoded from its codes, for the quantized kinds: hnsw_sq8, and the IVF kinds' refine
        codes)."""
        internal = np.array(list(self._chunk), dtype=np.int64)
        return [self._chunk[int(i)] for i in internal], self._vectors_of(internal)

    def _new_index(self, kind: Kind, train: Vectors | None) -> tuple[Any, Any]:
        """(index, refine codes or None) of `kind`, trained on `train` where it needs it."""
        ip = faiss.METRIC_INNER_PRODUCT
        inner: Any
        if kind == "flat":
            return faiss.IndexIDMap2(faiss.IndexFlatIP(self.dim)), None
        if train is None:
            train = np.empty((0, self.dim), dtype=np.float32)
        if kind in GRAPH_KINDS:
            if kind == "hnsw":
                inner = faiss.IndexHNSWFlat(self.dim, self.hnsw.m, ip)
            else:
                inner = faiss.index_factory(self.dim, f"HNSW{self.hnsw.m},SQ8", ip)
                _widen(faiss.downcast_index(inner.storage))
                inner.train(train)
            inner.hnsw.efConstruction = self.hnsw.ef_construction
            inner.hnsw.efSearch = self.hnsw.ef_search
            return faiss.IndexIDMap2(inner), None
        spec = self.index
        # "np": no polysemous training (a slow code reordering only polysemous search uses)
        codes = f"PQ{spec.pq.m}x{spec.pq.nbits}np" if kind == "ivf_pq" else "SQ8"
        ivf = faiss.index_factory(self.dim, f"IVF{spec.ivf.nlist},{codes}", ip)
        _widen(ivf)
        ivf.train(train)
        if spec.refine.storage == "disk":
            return ivf, MappedVectors(self.dim, self.scratch)
        refine = faiss.index_factory(self.dim, REFINE_FACTORY[spec.refine.storage], ip)
        _widen(refine)
        if not refine.is_trained:
            refine.train(train)
        return ivf, refine

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
        chosen = choose_kind(live_after, self.exact_threshold, self.index)
        if self.kind == "flat" and chosen != "flat":
            keep = np.array([i for i in self._chunk if i not in replaced_set], dtype=np.int64)
            self._rebuild(
                chosen,
                np.concatenate([self._vectors_of(keep), vecs]),
                np.concatenate([keep, new_internal]),
            )
        else:
            self._retire(replaced)
            self._add(vecs, new_internal)
        self._allowed.clear()
        self._gathered.clear()
        for cid, iid in zip(ids, new_internal.tolist(), strict=True):
            self._chunk.pop(self._internal.get(cid, -1), None)
            self._internal[cid] = iid
            self._chunk[iid] = cid
        self._next_id += len(ids)
        self._settle_refine()

    def _add(self, vecs: Vectors, internal_ids: np.ndarray) -> None:
        """Add vectors under ids greater than every id the partition holds."""
        if not len(internal_ids):
            return
        self._index.add_with_ids(vecs, internal_ids)
        if self.kind in GRAPH_KINDS:
            self._remember_recent(vecs, internal_ids)
        if self._refine is not None:
            self._refine.add(vecs)
            self._refine_ids = np.concatenate([self._refine_ids, internal_ids])

    def delete(self, chunk_ids: Sequence[str]) -> int:
        """Retire the given chunk ids (unknown ones are ignored); returns how many were live."""
        ids = validate_chunk_ids(chunk_ids)
        self._allowed.clear()
        self._gathered.clear()
        retired = [self._internal.pop(c) for c in ids if c in self._internal]
        for iid in retired:
            del self._chunk[iid]
        self._retire(retired)
        self._settle_refine()
        return len(retired)

    def _retire(self, internal_ids: list[int]) -> None:
        if not internal_ids:
            return
        if self.kind in GRAPH_KINDS:
            self._tombstones.update(internal_ids)
            self._selector = None
            self._recent_ids[np.isin(self._recent_ids, internal_ids)] = -1
            return
        gone = np.array(internal_ids, dtype=np.int64)
        self._index.remove_ids(faiss.IDSelectorBatch(gone))
        if self._refine is not None:
            self._refine_dead += len(gone)

    def _remember_recent(self, vecs: Vectors, internal_ids: np.ndarray) -> None:
        """Put the newest vectors in the ring of `hnsw.recentExact` (the oldest leave first),
        as the graph stores them (decoded, for hnsw_sq8: a loaded partition scores them
        alike). 1,024 x 384-d: 1.5 MB, and ~0.07 ms a search."""
        size = self.hnsw.recent_exact
        if not size:
            return
        if not len(self._recent_ids):
            self._recent_ids = np.full(size, -1, dtype=np.int64)
            self._recent_vectors = np.zeros((size, self.dim), dtype=np.float32)
        vecs, internal_ids = vecs[-size:], internal_ids[-size:]
        if self.kind != "hnsw":
            vecs = self._vectors_of(internal_ids)
        at = (self._recent_next + np.arange(len(internal_ids))) % size
        self._recent_ids[at] = internal_ids
        self._recent_vectors[at] = vecs
        self._recent_next = int((self._recent_next + len(internal_ids)) % size)

    def _with_recent(
        self,
        hits: list[ScoredId],
        query: Vectors,
        k: int,
        allowed: Collection[str] | None = None,
    ) -> list[ScoredId]:
        """The graph's hits with the recent ring's live vectors (of `allowed` chunks only,
        when given) that score above the k-th of them merged in, best first. Mostly none
        does: one product of the ring with the query, and the hits come back as they were."""
        if not len(self._recent_ids):
            return hits
        scores = self._recent_vectors @ query[0]
        floor = hits[-1].score if len(hits) >= k else -math.inf
        better = np.flatnonzero((self._recent_ids >= 0) & (scores > floor))
        if not len(better):
            return hits
        have = {h.chunk_id for h in hits}
        extra = []
        for at in better.tolist():
            chunk_id = self._chunk[int(self._recent_ids[at])]
            if chunk_id not in have and (allowed is None or chunk_id in allowed):
                have.add(chunk_id)
                extra.append(ScoredId(chunk_id, float(scores[at])))
        if not extra:
            return hits
        return sorted(hits + extra, key=lambda hit: -hit.score)[:k]

    def _settle_refine(self) -> None:
        """After a write: drop the retired refine codes once they are many."""
        if self._refine is not None and self._refine_dead > REFINE_DEAD_SHARE * max(
            1, len(self._chunk)
        ):
            self._drop_dead_refine()

    def _drop_dead_refine(self) -> None:
        """Remove the refine codes of ids no longer live (one pass over the codes)."""
        if self._refine is None or len(self._refine_ids) == len(self._chunk):
            self._refine_dead = 0
            return
        dead = np.flatnonzero(~np.isin(self._refine_ids, np.fromiter(self._chunk, np.int64)))
        if isinstance(self._refine, MappedVectors):
            self._refine.remove(dead)
        else:
            self._refine.remove_ids(faiss.IDSelectorBatch(dead.astype(np.int64)))
        self._refine_ids = np.delete(self._refine_ids, dead)
        self._refine_dead = 0

    def _refine_positions(self, internal_ids: np.ndarray) -> np.ndarray:
        """Where the refine codes of (live) internal ids are."""
        positions = np.searchsorted(self._refine_ids, internal_ids)
        if len(positions) and (
            positions.max() >= len(self._refine_ids)
            or not np.array_equal(self._refine_ids[positions], internal_ids)
        ):
            raise AssertionError("refine codes are out of step with the IVF index")
        return positions.astype(np.int64)

    def _vectors_of(self, internal_ids: np.ndarray) -> Vectors:
        """The stored vectors of live internal ids (decoded, for quantized kinds; from the
        refine codes, for IVF kinds)."""
        if not len(internal_ids):
            return np.empty((0, self.dim), dtype=np.float32)
        if self._refine is not None:
            found = self._refine.reconstruct_batch(self._refine_positions(internal_ids))
        else:
            found = self._index.reconstruct_batch(internal_ids)
        return np.ascontiguousarray(found, dtype=np.float32)

    def _rebuild(self, kind: Kind, vecs: Vectors, internal_ids: np.ndarray) -> None:
        order = np.argsort(internal_ids, kind="stable")
        vecs, internal_ids = np.ascontiguousarray(vecs[order]), internal_ids[order]
        self._index, self._refine = self._new_index(kind, vecs)
        self._refine_ids = np.empty(0, dtype=np.int64)
        self._refine_dead = 0
        self.kind = kind
        self._add(vecs, internal_ids)
        self._allowed.clear()
        self._gathered.clear()
        self._tombstones.clear()
        self._selector = None

    def compact(self) -> None:
        """Rebuild from the live vectors: drops tombstones, re-chooses (and retrains) the kind."""
        live = np.array(list(self._chunk), dtype=np.int64)
        kind = choose_kind(len(live), self.exact_threshold, self.index)
        self._rebuild(kind, self._vectors_of(live), live)

    def search(
        self, query_vector: object, top_k: int, allowed: Collection[str] | None = None
    ) -> list[ScoredId]:
        """Top-k live chunks by inner product of unit vectors (cosine), best first.

        `allowed` (chunk ids) restricts the search inside the index: exact over the allowed
        vectors, or the index with an id selector (HNSW with a raised efSearch, IVF with a
        raised nprobe), as `dense_plan` decides."""
        query = prepare_query(query_vector, self.dim)
        k = validate_top_k(top_k)
        if allowed is None:
            return self._search_all(query, min(k, len(self._internal)))
        selection = self._allowed_ids(allowed)
        if selection is None:  # every live chunk: no filter to apply
            return self._search_all(query, min(k, len(self._internal)))
        wanted, selector = selection
        plan = dense_plan(
            len(wanted), len(self._internal), k, self.hnsw.ef_search, self.exact_threshold
        )
        if not len(wanted):
            return []
        if plan.exact or self.kind == "flat":
            return self._exact(query, k, allowed, wanted)
        if self.kind in IVF_TYPES:
            share = len(wanted) / max(1, len(self._internal))
            hits = self._search_ivf(query, min(k, len(wanted)), selector, share)
            if len(hits) < min(k, len(wanted)):  # the lists scanned held too few allowed ids
                return self._exact(query, k, allowed, wanted)
            return hits
        params = faiss.SearchParametersHNSW()  # type: ignore[attr-defined]  # no stub
        params.efSearch = max(plan.ef_search, k)
        params.sel = selector  # live ids only: no tombstone inside
        scores_, labels = self._index.search(query, min(k, len(wanted)), params=params)
        return self._with_recent(self._hits(scores_, labels), query, min(k, len(wanted)), allowed)

    def _exact(
        self, query: Vectors, k: int, allowed: Collection[str], wanted: np.ndarray
    ) -> list[ScoredId]:
        scores = self._gathered_vectors(allowed, wanted) @ query[0]
        top = np.argsort(-scores, kind="stable")[:k]
        return [ScoredId(self._chunk[int(wanted[i])], float(scores[i])) for i in top]

    def _search_ivf(
        self,
        query: Vectors,
        k: int,
        selector: Any = None,
        share: float = 1.0,
        nprobe: int | None = None,
    ) -> list[ScoredId]:
        """The IVF's k x kFactor candidates (of the selector's ids), re-scored with the refine
        codes: the top k of those."""
        if k == 0:
            return []
        spec = self.index
        live = len(self._internal)
        candidates = min(max(1, round(live * share)), k * spec.refine.k_factor)
        params = faiss.SearchParametersIVF()
        nlist = int(self._index.nlist)  # the trained one's (a spec may have been overridden)
        params.nprobe = nprobe or ivf_probes(spec.ivf.nprobe, nlist, candidates, live, share)
        if selector is not None:
            params.sel = selector
        _, labels = self._index.search(query, candidates, params=params)
        found = labels[0][labels[0] >= 0]
        if not len(found):
            return []
        scores = self._vectors_of(found) @ query[0]
        top = np.argsort(-scores, kind="stable")[:k]
        return [ScoredId(self._chunk[int(found[i])], float(scores[i])) for i in top]

    def _allowed_ids(self, allowed: Collection[str]) -> tuple[np.ndarray, Any] | None:
        """Internal ids of the live allowed chunks and their id selector, or None when they are
        every live chunk (cached per frozenset until the next write: repeated principals and
        filters cost nothing)."""
        key = allowed if isinstance(allowed, frozenset) else None
        if key is not None and key in self._allowed:
            return self._allowed[key]
        internal = self._internal
        found: tuple[np.ndarray, Any] | None = None
        # An ACL every chunk grants (the HTTP API's usual search) is found by one set
        # comparison in C, before the id selection's loop in Python.
        if len(allowed) != len(internal) or internal.keys() != allowed:
            wanted = np.fromiter((internal[c] for c in allowed if c in internal), dtype=np.int64)
            if len(wanted) < len(internal):
                found = wanted, bitmap_selector(wanted, self._next_id)
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
        elif self.kind in IVF_TYPES:
            hits = self._search_ivf(query, k)
            if len(hits) < k:  # the lists scanned held fewer than k: scan them all
                hits = self._search_ivf(query, k, nprobe=int(self._index.nlist))
            return hits
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
            return self._with_recent(self._hits(scores, labels), query, k)
        return self._hits(scores, labels)

    def _hits(self, scores: np.ndarray, labels: np.ndarray) -> list[ScoredId]:
        chunk = self._chunk
        return [
            ScoredId(chunk[i], s)
            for s, i in zip(scores[0].tolist(), labels[0].tolist(), strict=True)
            if i >= 0 and i in chunk
        ]

    def memory_bytes(self) -> tuple[int, int]:
        """(bytes held in memory, bytes on local disk) of the index and its refine codes, as
        serialized (FAISS's own sizes: codes, graph links, inverted lists with their ids)."""
        held = faiss.serialize_index(self._index).nbytes
        if isinstance(self._refine, MappedVectors):
            return held, self._refine.disk_bytes
        if self._refine is not None:
            held += faiss.serialize_index(self._refine).nbytes
        return held, 0

    def to_files(self) -> tuple[bytes, bytes]:
        """(index bytes, metadata JSON bytes) for a snapshot. The index bytes are one FAISS
        index, followed for IVF kinds by the refine codes from `refine_at`: a second FAISS
        index, or the float32 rows of "disk" refine vectors (`refine_rows`)."""
        index_bytes = faiss.serialize_index(self._index).tobytes()
        meta: dict[str, Any] = {
            "kind": self.kind,
            "next_id": self._next_id,
            "internal_ids": list(self._chunk),
            "chunk_ids": list(self._chunk.values()),
            "tombstones": sorted(self._tombstones),
        }
        if len(self._recent_ids):  # oldest first, so that a loaded ring drops the same ones
            ring = np.roll(self._recent_ids, -self._recent_next)
            meta["recent"] = [int(i) for i in ring if i >= 0]
        if self._refine is not None:
            self._drop_dead_refine()  # saved: exactly the live ids' codes, in id order
            meta["refine_at"] = len(index_bytes)
            if isinstance(self._refine, MappedVectors):
                meta["refine_rows"] = "float32"
                index_bytes += self._refine.to_bytes()
            else:
                index_bytes += faiss.serialize_index(self._refine).tobytes()
        return index_bytes, json.dumps(meta).encode()

    @classmethod
    def from_files(
        cls,
        index_bytes: bytes,
        meta_bytes: bytes,
        dim: int,
        hnsw: HnswSpec,
        exact_threshold: int,
        index: DenseIndexSpec | None = None,
        scratch: Path | None = None,
    ) -> TenantPartition:
        """Inverse of `to_files` (the kind and the refine storage are the saved ones; query
        parameters are the given specs'); checks the index matches its metadata."""
        meta = json.loads(meta_bytes)
        if meta["kind"] not in KINDS:
            raise ValueError(f"snapshot partition has an unknown kind {meta['kind']!r}")
        part = cls(dim, hnsw, exact_threshold, index, scratch)
        refine_at = meta.get("refine_at")
        main = index_bytes if refine_at is None else index_bytes[:refine_at]
        part._index = faiss.deserialize_index(np.frombuffer(main, dtype=np.uint8))
        part._refine = None
        if meta.get("refine_rows") == "float32":
            part._refine = MappedVectors.from_bytes(index_bytes[refine_at:], dim, scratch)
        elif refine_at is not None:
            rest = np.frombuffer(index_bytes[refine_at:], dtype=np.uint8)
            part._refine = faiss.deserialize_index(rest)
        part.kind = meta["kind"]
        part._next_id = int(meta["next_id"])
        part._chunk = dict(zip(meta["internal_ids"], meta["chunk_ids"], strict=True))
        part._internal = {c: i for i, c in part._chunk.items()}
        part._tombstones = set(meta["tombstones"])
        part._refine_ids = np.array(sorted(part._chunk), dtype=np.int64)
        recent = np.array([i for i in meta.get("recent", ()) if i in part._chunk], dtype=np.int64)
        if len(recent) and part.kind in GRAPH_KINDS:
            part._remember_recent(part._vectors_of(recent), recent)
        expected = len(part._chunk) + len(part._tombstones)
        if (
            part._index.d != dim
            or part._index.ntotal != expected
            or (part.kind in IVF_TYPES) != (part._refine is not None)
            or (part._refine is not None and part._refine.ntotal != len(part._chunk))
        ):
            raise ValueError("snapshot partition is inconsistent with its metadata")
        return part
