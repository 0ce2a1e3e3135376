"""What both BM25 backends store per chunk, and the checks they run before writing anything.

Shared so that the embedded and Elasticsearch backends index the same text under the same
keys, and reject the same bad input with the same message (DESIGN.md invariant 7).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ragindex.errors import InvalidInput
from ragindex.filters import chunk_terms
from ragindex.lexical.analysis import analyze
from ragindex.types import Chunk, validate_tenant

MAX_TOP_K = 10_000  # Elasticsearch's default index.max_result_window
_MAX_KEY_BYTES = 512  # Elasticsearch's limit on a document _id


def doc_key(tenant_id: str, chunk_id: str) -> str:
    """Unique key of a chunk across tenants: chunk ids are only unique within one tenant.

    Tenant ids cannot contain '/', so "tenant/chunk" is unambiguous. Keys that would exceed
    Elasticsearch's 512-byte _id limit are shortened with a sha256 of the chunk id.
    """
    key = f"{tenant_id}/{chunk_id}"
    if len(key.encode()) <= _MAX_KEY_BYTES:
        return key
    return f"{tenant_id}/sha256:{hashlib.sha256(chunk_id.encode()).hexdigest()}"


TITLE_FIELD = "title"
BODY_FIELD = "body"
FILTER_FIELD = "filters"
"""Exact keyword terms of a chunk's ACL, source, updated and metadata (ragindex.filters)."""


def filter_terms(chunk: Chunk) -> list[str]:
    return sorted(chunk_terms(chunk))


def indexed_fields(chunk: Chunk) -> dict[str, str]:
    """What BM25 sees of a chunk: its document's title and its own text, as two fields; a
    contextual chunk's body starts with its search prefix (title and section path)."""
    body = f"{chunk.search_prefix}\n{chunk.text}" if chunk.search_prefix else chunk.text
    return {TITLE_FIELD: chunk.title, BODY_FIELD: body}


def is_searchable(chunk: Chunk) -> bool:
    """Whether the chunk has any BM25 term. Chunks without one are kept out of both indexes:
    they can never match, and Lucene leaves them out of its BM25 statistics (document count,
    average length) while tantivy would count them, so indexing them would skew scores.

    The same difference remains per field: Lucene counts only the documents that have a term
    in a field, tantivy counts all. So the backends score alike when every chunk has a title
    and a body (as every ingested chunk has a body), and drift apart slightly for the title
    field when only some chunks have a title."""
    return any(analyze(text) for text in indexed_fields(chunk).values())


@dataclass(frozen=True)
class FieldBoosts:
    """Query-time weights of the two fields; a field's BM25 score is multiplied by its boost
    and the fields' scores are summed (Elasticsearch's `most_fields`). 0 skips a field."""

    title: float = 1.0
    body: float = 1.0

    def __post_init__(self) -> None:
        if not (self.title >= 0 and self.body >= 0 and self.title + self.body > 0):
            raise InvalidInput(f"field boosts must be >= 0 and not all 0, got {self}")


def query_terms(text: str) -> dict[str, float]:
    """The plain query as weighted terms: each analysed term, weighted by how often it occurs
    (a term twice in the query scores twice, as in a `match` query)."""
    return dict(Counter(analyze(text)))


def field_clauses(terms: Mapping[str, float], boosts: FieldBoosts) -> list[tuple[str, str, float]]:
    """(field, term, weight) of every clause both backends OR together; weight = term weight x
    field boost, applied as a multiplier of the clause's BM25 score."""
    fields = [(TITLE_FIELD, boosts.title), (BODY_FIELD, boosts.body)]
    return [
        (field, term, weight * boost)
        for field, boost in fields
        if boost > 0
        for term, weight in sorted(terms.items())
        if weight > 0
    ]


def _check_chunk_id(chunk_id: object) -> str:
    if not isinstance(chunk_id, str) or not chunk_id:
        raise InvalidInput(f"chunk_id must be a non-empty string, got {chunk_id!r}")
    return chunk_id


def validate_chunks(chunks: Sequence[Chunk]) -> list[Chunk]:
    """Check every chunk before any is written, so a bad batch changes nothing."""
    if isinstance(chunks, (str, bytes)) or not isinstance(chunks, Sequence):
        raise InvalidInput("chunks must be a sequence of Chunk")
    out = []
    for i, chunk in enumerate(chunks):
        if not isinstance(chunk, Chunk):
            raise InvalidInput(f"chunks[{i}] is {type(chunk).__name__}, not a Chunk")
        validate_tenant(chunk.tenant_id)
        _check_chunk_id(chunk.chunk_id)
        if not isinstance(chunk.text, str) or not isinstance(chunk.title, str):
            raise InvalidInput(f"chunk {chunk.chunk_id!r}: title and text must be strings")
        out.append(chunk)
    return out


def validate_ids(tenant_id: str, chunk_ids: Sequence[str]) -> list[str]:
    """Check a delete request: a valid tenant and a sequence of non-empty string ids."""
    validate_tenant(tenant_id)
    if isinstance(chunk_ids, (str, bytes)) or not isinstance(chunk_ids, Sequence):
        raise InvalidInput("chunk_ids must be a sequence of strings, not a single string")
    return [_check_chunk_id(c) for c in chunk_ids]


def validate_search(query: object, top_k: object, tenant_id: object) -> tuple[str, int, str]:
    """Check a search request; any text is a valid query (it is tokenised, never parsed)."""
    tenant = validate_tenant(tenant_id)
    if not isinstance(query, str):
        raise InvalidInput(f"query must be a string, got {type(query).__name__}")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= MAX_TOP_K:
        raise InvalidInput(f"top_k must be an integer in 1..{MAX_TOP_K}, got {top_k!r}")
    return query, top_k, tenant
