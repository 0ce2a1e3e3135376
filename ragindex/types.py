"""Shared value types: documents, chunks, hits and the embedding model identity.

Validation lives here (not in the HTTP layer) so that the CLI, the Serve app and the
ingest workers reject bad input with the same message before anything is written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ragindex.errors import InvalidInput

TENANT_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
ID_PART_RE = re.compile(r"^[^\s:/\x00-\x1f]{1,256}$")
MAX_DOCUMENT_CHARS = 1_000_000


def validate_tenant(tenant_id: object) -> str:
    """Return the tenant id or raise: lower-case letters, digits, '_' and '-', 1-63 chars."""
    if not isinstance(tenant_id, str) or not tenant_id:
        raise InvalidInput("tenant_id is required and must be a non-empty string")
    if not TENANT_RE.match(tenant_id):
        raise InvalidInput(
            f"tenant_id {tenant_id!r} is malformed: use 1-63 characters of a-z, 0-9, '_' or '-',"
            " starting with a letter or digit"
        )
    return tenant_id


def _validate_id_part(name: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"{name} is required and must be a non-empty string")
    if not ID_PART_RE.match(value):
        raise InvalidInput(
            f"{name} {value!r} is malformed: 1-256 characters without whitespace, ':' or '/'"
        )
    return value


@dataclass(frozen=True)
class Document:
    """A source document as the user gave it; chunked by ingest into Chunks."""

    source: str
    doc_id: str
    title: str
    text: str
    updated: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _validate_id_part("source", self.source)
        _validate_id_part("doc_id", self.doc_id)
        if not isinstance(self.title, str):
            raise InvalidInput(f"document {self.key}: title must be a string")
        if not isinstance(self.text, str):
            raise InvalidInput(f"document {self.key}: text must be a string")
        if not self.text.strip():
            raise InvalidInput(f"document {self.key}: text is empty")
        if len(self.text) > MAX_DOCUMENT_CHARS:
            raise InvalidInput(
                f"document {self.key}: text has {len(self.text)} characters,"
                f" more than the limit of {MAX_DOCUMENT_CHARS}"
            )
        if "\x00" in self.text or "\ufffd" in self.text:
            raise InvalidInput(
                f"document {self.key}: text is not valid UTF-8 (NUL or replacement characters)"
            )
        if not isinstance(self.metadata, dict):
            raise InvalidInput(f"document {self.key}: metadata must be an object")

    @property
    def key(self) -> str:
        return f"{self.source}:{self.doc_id}"


@dataclass(frozen=True)
class Chunk:
    """One retrievable unit. `chunk_id` is unique within a tenant, not across tenants."""

    tenant_id: str
    chunk_id: str
    source: str
    doc_id: str
    n: int
    title: str
    text: str
    content_hash: str
    context: str | None = None  # parent section for parent-child chunking
    updated: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ScoredId:
    """A leg's result: a chunk id and the leg's own score (never compared across legs)."""

    chunk_id: str
    score: float


@dataclass
class Hit:
    """A fused (and maybe reranked) result with the chunk it points at."""

    chunk: Chunk
    score: float
    ranks: dict[str, int]  # leg name -> 1-based rank in that leg


@dataclass(frozen=True)
class ModelIdentity:
    """What makes two embedders interchangeable; stamped on every index generation."""

    name: str
    weights_hash: str
    dimension: int
    normalized: bool
    query_prefix: str = ""
    passage_prefix: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "weights_hash": self.weights_hash,
            "dimension": self.dimension,
            "normalized": self.normalized,
            "query_prefix": self.query_prefix,
            "passage_prefix": self.passage_prefix,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelIdentity:
        return cls(**data)

    def fingerprint(self) -> str:
        """Short stable string for index names and aliases (e.g. the BM25 generation)."""
        from ragindex.hashing import content_hash

        return content_hash(repr(sorted(self.to_dict().items())))[:12]


@dataclass(frozen=True)
class LogRecord:
    """One record of a `Log` partition; `value` None is a tombstone (delete by key)."""

    partition: int
    offset: int
    key: bytes
    value: bytes | None
