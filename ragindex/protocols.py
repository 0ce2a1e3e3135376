"""The interfaces between the parts. Implementations live in the edge packages.

Every search method takes `tenant_id` as a required argument and the implementation applies
the tenant filter inside the index (DESIGN.md invariant 1): there is no way to ask an index
for another tenant's chunks and filter afterwards.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

from ragindex.types import Chunk, ModelIdentity, ScoredId

Vectors = npt.NDArray[np.float32]


class Embedder(Protocol):
    identity: ModelIdentity
    max_seq_length: int

    def embed_passages(self, texts: Sequence[str]) -> Vectors: ...

    def embed_queries(self, texts: Sequence[str]) -> Vectors: ...

    def count_tokens(self, text: str) -> int: ...


class Reranker(Protocol):
    def score(self, query: str, passages: Sequence[str]) -> list[float]: ...


class DenseIndex(Protocol):
    """Dense vectors partitioned by tenant; ids are chunk ids, unique within a tenant."""

    identity: ModelIdentity

    def upsert(self, tenant_id: str, chunk_ids: Sequence[str], vectors: Vectors) -> None: ...

    def delete(self, tenant_id: str, chunk_ids: Sequence[str]) -> None: ...

    def search(
        self, query_vector: Vectors, top_k: int, tenant_id: str, identity: ModelIdentity
    ) -> list[ScoredId]: ...


class LexicalIndex(Protocol):
    """BM25 over chunk text; the tenant is a required clause inside the query."""

    def upsert(self, chunks: Sequence[Chunk]) -> None: ...

    def delete(self, tenant_id: str, chunk_ids: Sequence[str]) -> None: ...

    def search(self, query: str, top_k: int, tenant_id: str) -> list[ScoredId]: ...

    def count(self, tenant_id: str) -> int: ...

    def close(self) -> None: ...
