"""Shared value types: documents, chunks, hits and the embedding model identity.

Validation lives here (not in the HTTP layer) so that the CLI, the Serve app and the
ingest workers reject bad input with the same message before anything is written.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ragindex.errors import InvalidInput

# Patterns are written so that Python's `re`, ECMA-262 (the OpenAPI schema) and Rust's regex
# (pydantic) read them alike: whitespace, control characters and U+FEFF are spelled out, since
# each engine's `\s` differs at the edges. Always `fullmatch`: `$` lets a trailing newline in.
_ID_CHAR = r"[^\s\x00-\x1f\x7f-\x9f\ufeff:/]"
MAX_ID_PART_CHARS = 256
TENANT_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}$"
ID_PART_PATTERN = rf"^{_ID_CHAR}{{1,{MAX_ID_PART_CHARS}}}$"
TENANT_RE = re.compile(TENANT_PATTERN[1:-1])
ID_PART_RE = re.compile(ID_PART_PATTERN[1:-1])
VISIBLE_PATTERN = r"[^\s\x00-\x1f\x7f-\x9f\ufeff]"
"""Some character that is neither whitespace nor a control: what makes a text non-empty."""
_VISIBLE_RE = re.compile(VISIBLE_PATTERN)
_SURROGATE_RE = re.compile("[\ud800-\udfff]")
_TIMESTAMP_RE = re.compile(
    r"\d{4}-\d{2}-\d{2}(?:T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2}))?", re.ASCII
)

MAX_DOCUMENT_CHARS = 1_000_000
MAX_TITLE_CHARS = 512
"""Titles are copied into every chunk, the store and every embedding input."""
MAX_METADATA_KEYS = 32
MAX_METADATA_KEY_CHARS = 64
MAX_METADATA_STRING_CHARS = 256
MAX_METADATA_LIST_ITEMS = 16
MAX_METADATA_INT = 2**53
PRINCIPAL_PATTERN = r"^(user|group|role):[^\s\x00-\x1f\x7f-\x9f\ufeff]{1,128}$"
PRINCIPAL_RE = re.compile(PRINCIPAL_PATTERN[1:-1])
MAX_ACL_PRINCIPALS = 64
"""Metadata is flat: scalars, or lists of scalars (depth 2 at most); also copied into every
chunk, so its size is bounded by these (about 135 KB at the very most)."""


def refuse_surrogates(name: str, value: str) -> str:
    """Lone UTF-16 surrogates (e.g. JSON "\\ud800") are not text: no index can store them."""
    found = _SURROGATE_RE.search(value)
    if found is not None:
        raise InvalidInput(
            f"{name} holds a lone surrogate (U+{ord(found.group()):04X}) at character"
            f" {found.start()}: send valid Unicode"
        )
    return value


def validate_tenant(tenant_id: object) -> str:
    """Return the tenant id or raise: lower-case letters, digits, '_' and '-', 1-63 chars."""
    if not isinstance(tenant_id, str) or not tenant_id:
        raise InvalidInput("tenant_id is required and must be a non-empty string")
    if not TENANT_RE.fullmatch(tenant_id):
        raise InvalidInput(
            f"tenant_id {tenant_id!r} is malformed: use 1-63 characters of a-z, 0-9, '_' or '-',"
            " starting with a letter or digit"
        )
    return tenant_id


def validate_id_part(name: str, value: object) -> str:
    """A source or doc_id: 1-256 characters, no whitespace, control characters, ':' or '/'."""
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"{name} is required and must be a non-empty string")
    if not ID_PART_RE.fullmatch(value):
        raise InvalidInput(
            f"{name} {value[:300]!r} is malformed: 1-{MAX_ID_PART_CHARS} characters without"
            " whitespace, control characters, ':' or '/'"
        )
    return value


def validate_timestamp(name: str, value: object) -> str:
    """An RFC 3339 date (2024-05-01) or date-time (2024-05-01T12:00:00Z) that exists."""
    if not isinstance(value, str) or not _TIMESTAMP_RE.fullmatch(value):
        raise InvalidInput(
            f"{name} must be an RFC 3339 date or date-time such as 2024-05-01T12:00:00Z,"
            f" got {str(value)[:100]!r}"
        )
    try:
        datetime.fromisoformat(value)
    except ValueError as err:
        raise InvalidInput(f"{name} {value!r} is not a real date or time: {err}") from None
    return value


def validate_principal(value: object) -> str:
    if not isinstance(value, str) or not PRINCIPAL_RE.fullmatch(value):
        raise InvalidInput(
            f"principal {str(value)[:140]!r} is malformed: use user:<name>, group:<name> or"
            " role:<name> (1-128 visible characters after the colon)"
        )
    return value


def validate_acl(acl: object) -> tuple[str, ...] | None:
    """None (the whole tenant) or a non-empty list of principals."""
    if acl is None:
        return None
    if not isinstance(acl, list | tuple) or not acl:
        raise InvalidInput("acl must be null (the whole tenant) or a non-empty list of principals")
    if len(acl) > MAX_ACL_PRINCIPALS:
        raise InvalidInput(f"acl lists {len(acl)} principals, more than {MAX_ACL_PRINCIPALS}")
    return tuple(sorted({validate_principal(p) for p in acl}))


def metadata_problem(metadata: object) -> str | None:
    """What is wrong with a metadata object, or None: a flat JSON object of at most
    MAX_METADATA_KEYS keys whose values are scalars or short lists of scalars."""
    if not isinstance(metadata, dict):
        return "metadata must be an object"
    if len(metadata) > MAX_METADATA_KEYS:
        return f"metadata has {len(metadata)} keys, more than the limit of {MAX_METADATA_KEYS}"
    for key, value in metadata.items():
        if not isinstance(key, str) or not 0 < len(key) <= MAX_METADATA_KEY_CHARS:
            return f"metadata keys must be strings of 1-{MAX_METADATA_KEY_CHARS} characters"
        if _SURROGATE_RE.search(key):
            return "a metadata key holds a lone surrogate"
        items = value if isinstance(value, list) else [value]
        if isinstance(value, list) and len(value) > MAX_METADATA_LIST_ITEMS:
            return (
                f"metadata {key!r} lists {len(value)} items, more than the limit of"
                f" {MAX_METADATA_LIST_ITEMS}"
            )
        for item in items:
            if problem := _scalar_problem(key, item):
                return problem
    return None


def _scalar_problem(key: str, value: object) -> str | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        if abs(value) > MAX_METADATA_INT:
            return f"metadata {key!r}: numbers must be finite and within +-2**53"
        return None
    if isinstance(value, float):
        if not (math.isfinite(value) and abs(value) <= MAX_METADATA_INT):
            return f"metadata {key!r}: numbers must be finite and within +-2**53"
        return None
    if isinstance(value, str):
        if len(value) > MAX_METADATA_STRING_CHARS:
            return (
                f"metadata {key!r} has {len(value)} characters, more than the limit of"
                f" {MAX_METADATA_STRING_CHARS}"
            )
        return "a metadata value holds a lone surrogate" if _SURROGATE_RE.search(value) else None
    return (
        f"metadata {key!r} must be a string, number, boolean, null or a list of those"
        f" (nested objects and lists are not allowed), got {type(value).__name__}"
    )


@dataclass(frozen=True)
class Document:
    """A source document as the user gave it; chunked by ingest into Chunks."""

    source: str
    doc_id: str
    title: str
    text: str
    updated: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    acl: tuple[str, ...] | None = None
    """Principals that may read the document (`user:alice`, `group:eng`); None: the tenant."""

    def __post_init__(self) -> None:
        validate_id_part("source", self.source)
        validate_id_part("doc_id", self.doc_id)
        if not isinstance(self.title, str):
            raise InvalidInput(f"document {self.key}: title must be a string")
        if len(self.title) > MAX_TITLE_CHARS:
            raise InvalidInput(
                f"document {self.key}: title has {len(self.title)} characters, more than the"
                f" limit of {MAX_TITLE_CHARS}"
            )
        if not isinstance(self.text, str):
            raise InvalidInput(f"document {self.key}: text must be a string")
        refuse_surrogates(f"document {self.key}: title", self.title)
        refuse_surrogates(f"document {self.key}: text", self.text)
        if not _VISIBLE_RE.search(self.text):
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
        if self.updated is not None:
            validate_timestamp(f"document {self.key}: updated", self.updated)
        if problem := metadata_problem(self.metadata):
            raise InvalidInput(f"document {self.key}: {problem}")
        try:
            object.__setattr__(self, "acl", validate_acl(self.acl))
        except InvalidInput as err:
            raise InvalidInput(f"document {self.key}: {err}") from None

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
    acl: tuple[str, ...] | None = None  # the document's; None: the whole tenant
    # Indexed before the text (embedded and in BM25's body) but never shown: the document
    # title and section path with chunking.contextual; "" without it.
    search_prefix: str = ""

    def __post_init__(self) -> None:
        if self.acl is not None and not isinstance(self.acl, tuple):
            object.__setattr__(self, "acl", tuple(self.acl))  # decoded from JSON as a list


@dataclass(frozen=True)
class ScoredId:
    """A leg's result: a chunk id and the leg's own score (never compared across legs).

    `chunk`: the chunk itself, as the leg's replica held it when it searched, for the top hits
    of a replica that holds chunks (cluster layout): the Router then fetches only the rest."""

    chunk_id: str
    score: float
    chunk: Chunk | None = None


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
    # How the weights were transformed after training ("" = as published, e.g. fp32 run by
    # torch or ONNX Runtime alike). A quantized model computes other vectors: other identity.
    quantization: str = ""

    def to_dict(self) -> dict[str, Any]:
        out = {
            "name": self.name,
            "weights_hash": self.weights_hash,
            "dimension": self.dimension,
            "normalized": self.normalized,
            "query_prefix": self.query_prefix,
            "passage_prefix": self.passage_prefix,
        }
        # Only when set, so stamps and fingerprints of unquantized models stay as they were.
        if self.quantization:
            out["quantization"] = self.quantization
        return out

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
