"""An LRU of query embeddings in front of an embedder: a repeated query skips the model.

Keyed by (model identity fingerprint, text): a vector is only ever reused for the same text
embedded by the same model identity (DESIGN.md invariant 2), so a cached vector cannot be
searched against an index of another model. Passages and batches of several queries go
straight to the embedder; only single-query calls (the query path's) are cached. Bounded by
entries (a MiniLM vector is 1.5 KB, so the default 4,096 hold about 6 MB).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from ragindex.protocols import Embedder, Vectors


class CachedQueryEmbedder:
    """`embedder` with its single-query embeddings kept in an LRU of `size` entries."""

    def __init__(self, embedder: Embedder, size: int) -> None:
        if size < 1:
            raise ValueError(f"query cache size must be >= 1, got {size}")
        self._embedder = embedder
        self._size = size
        self._cache: OrderedDict[tuple[str, str], Vectors] = OrderedDict()
        self._lock = threading.Lock()  # searches run on several threads
        self.identity = embedder.identity
        self._fingerprint = embedder.identity.fingerprint()
        self.max_seq_length = embedder.max_seq_length
        self.hits = 0
        self.misses = 0

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        if len(texts) != 1:
            return self._embedder.embed_queries(texts)
        key = (self._fingerprint, texts[0])
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                self.hits += 1
                return cached.copy()  # callers may normalise in place (faiss does)
            self.misses += 1
        vector = self._embedder.embed_queries(texts)
        with self._lock:
            self._cache[key] = np.array(vector, copy=True)
            self._cache.move_to_end(key)
            while len(self._cache) > self._size:
                self._cache.popitem(last=False)
        return vector

    def embed_passages(self, texts: Sequence[str]) -> Vectors:
        return self._embedder.embed_passages(texts)

    def count_tokens(self, text: str) -> int:
        return self._embedder.count_tokens(text)

    def __len__(self) -> int:
        return len(self._cache)


def with_query_cache(embedder: Embedder, size: int) -> Embedder:
    """`embedder` behind an LRU of `size` query embeddings; itself when size is 0."""
    return CachedQueryEmbedder(embedder, size) if size > 0 else embedder
