"""Validation of what callers hand to the dense shards, done before anything is written.

faiss.normalize_L2 mutates its argument in place and rejects float64 and non-contiguous
arrays, so every vector is copied into a fresh float32 C-contiguous array first; the
caller's array is never touched.
"""

from __future__ import annotations

from collections.abc import Sequence

import faiss
import numpy as np

from ragindex.errors import InvalidInput
from ragindex.protocols import Vectors

MAX_CHUNK_ID_CHARS = 1024
MAX_TOP_K = 10_000


def prepare_vectors(vectors: object, dim: int) -> Vectors:
    """A normalised float32 copy of an (n, dim) array of finite, non-zero vectors, or raise."""
    try:
        arr = np.array(vectors, dtype=np.float32, order="C", copy=True)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"vectors must be a numeric array: {exc}") from None
    if arr.ndim != 2 or arr.shape[1] != dim:
        raise InvalidInput(f"vectors must have shape (n, {dim}); got {arr.shape}")
    if not np.isfinite(arr).all():
        raise InvalidInput("vectors contain NaN or infinite values")
    if arr.shape[0] and (np.linalg.norm(arr, axis=1) == 0).any():
        raise InvalidInput("vectors contain an all-zero vector, which has no direction")
    if arr.shape[0]:
        faiss.normalize_L2(arr)
    return arr


def prepare_query(query_vector: object, dim: int) -> Vectors:
    """A (1, dim) normalised copy of one query vector given as (dim,) or (1, dim)."""
    try:
        arr = np.asarray(query_vector, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"query_vector must be a numeric array: {exc}") from None
    if arr.shape not in ((dim,), (1, dim)):
        raise InvalidInput(f"query_vector must have shape ({dim},) or (1, {dim}); got {arr.shape}")
    return prepare_vectors(arr.reshape(1, dim), dim)


def validate_chunk_ids(chunk_ids: object, expected: int | None = None) -> list[str]:
    """The ids as a list of distinct non-empty strings (matching `expected` rows), or raise."""
    if isinstance(chunk_ids, str | bytes) or not isinstance(chunk_ids, Sequence):
        raise InvalidInput("chunk_ids must be a sequence of strings")
    ids = list(chunk_ids)
    for cid in ids:
        if not isinstance(cid, str) or not cid or len(cid) > MAX_CHUNK_ID_CHARS:
            raise InvalidInput(
                f"chunk id {cid!r} is malformed: a non-empty string of at most"
                f" {MAX_CHUNK_ID_CHARS} characters is required"
            )
        if "\x00" in cid:
            raise InvalidInput(f"chunk id {cid!r} contains a NUL character")
    if len(set(ids)) != len(ids):
        raise InvalidInput("chunk_ids contain duplicates; each chunk may appear once per batch")
    if expected is not None and len(ids) != expected:
        raise InvalidInput(f"got {len(ids)} chunk ids for {expected} vectors")
    return ids


def validate_top_k(top_k: object) -> int:
    """top_k as an int in 1..MAX_TOP_K, or raise."""
    if isinstance(top_k, bool) or not isinstance(top_k, int | np.integer):
        raise InvalidInput(f"top_k must be an integer; got {top_k!r}")
    if not 1 <= int(top_k) <= MAX_TOP_K:
        raise InvalidInput(f"top_k must be between 1 and {MAX_TOP_K}; got {top_k}")
    return int(top_k)
