"""Reading documents back, paging, and the decisions of a bounded delete: pure functions.

- A search cursor: which hits the earlier pages of a search returned (a 48-bit hash of each
  chunk id) and the index generation that ranked them. The next page is the best hits of
  the search as it ranks now that no earlier page returned: a write between two pages never
  makes a hit come back, and never makes one that is still in the results go unseen (a hit
  whose rank it raised comes on a later page, out of score order). A search pages
  `SEARCH_DEPTH` hits deep at most. A cursor names its generation: another generation ranks
  by other vectors, so its cursor is refused.
- A list cursor: the last (source, doc_id) of a page of the tenant's documents, listed in
  that order; the next page starts strictly after it.
- A delete by filter takes the documents it matched, all of them or (over its bound) none.

The cursors are opaque to clients (pass them back unchanged); their syntax is one regular
expression each, which the OpenAPI document states, so a cursor the schema accepts decodes.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ragindex.errors import InvalidInput, TooManyMatches
from ragindex.types import ID_PART_PATTERN, Chunk

MAX_LIST_LIMIT = 1000
DEFAULT_LIST_LIMIT = 100
MAX_DELETE_DOCUMENTS = 1000
SEARCH_DEPTH = 1000  # hits a search pages through at most (Elasticsearch's window is 10,000)
GENERATION_PATTERN = r"[0-9a-f]{8}"
_ID = ID_PART_PATTERN[1:-1]
_HASH_BYTES = 6  # 8 base64 characters; a result hidden by a collision: ~1e-8 per search
_HASH_CHARS = 8
SEARCH_CURSOR_MAX_CHARS = len("s2/00000000/") + _HASH_CHARS * SEARCH_DEPTH
LIST_CURSOR_MAX_CHARS = 2 * 256 + 8


def search_cursor_pattern(generation: str | None = None) -> str:
    """The syntax of a search cursor; with `generation`, only that generation's cursors."""
    gen = re.escape(generation) if generation is not None else GENERATION_PATTERN
    return rf"^s2/({gen})/((?:[A-Za-z0-9_-]{{{_HASH_CHARS}}}){{1,{SEARCH_DEPTH}}})$"


LIST_CURSOR_PATTERN = rf"^d1:({_ID}):({_ID})$"
_SEARCH_RE = re.compile(search_cursor_pattern())
_LIST_RE = re.compile(LIST_CURSOR_PATTERN)

DocKey = tuple[str, str]


def chunk_hash(chunk_id: str) -> bytes:
    return hashlib.blake2b(chunk_id.encode(), digest_size=_HASH_BYTES).digest()


@dataclass(frozen=True)
class Paged:
    """The hits the earlier pages of a search returned, as hashes of their chunk ids."""

    hashes: frozenset[bytes] = frozenset()

    def __contains__(self, chunk_id: object) -> bool:
        return isinstance(chunk_id, str) and chunk_hash(chunk_id) in self.hashes

    def __len__(self) -> int:
        return len(self.hashes)

    def adding(self, chunk_ids: Iterable[str]) -> Paged:
        return Paged(self.hashes | {chunk_hash(c) for c in chunk_ids})


def sort_key(score: float, chunk_id: str) -> tuple[float, str]:
    """The order of a search's hits: score descending, then chunk id ascending."""
    return (-score, chunk_id)


def encode_search_cursor(generation: str, paged: Paged) -> str:
    packed = b"".join(sorted(paged.hashes))
    return f"s2/{generation}/{base64.urlsafe_b64encode(packed).decode()}"


def decode_search_cursor(cursor: str, generation: str | None) -> Paged:
    """What a search cursor says was paged; InvalidInput if it is malformed or was made by
    another index generation than `generation` (None: any)."""
    found = _SEARCH_RE.match(cursor) if len(cursor) <= SEARCH_CURSOR_MAX_CHARS else None
    if found is None:
        raise InvalidInput(
            "cursor is not a search cursor of this API: pass back a `next_cursor` unchanged"
        )
    made_by, packed = found.groups()
    if generation is not None and made_by != generation:
        raise InvalidInput(
            f"cursor was made by index generation {made_by}, this index serves {generation}:"
            " start the search again without a cursor"
        )
    raw = base64.urlsafe_b64decode(packed)
    return Paged(frozenset(raw[i : i + _HASH_BYTES] for i in range(0, len(raw), _HASH_BYTES)))


def encode_list_cursor(key: DocKey) -> str:
    return f"d1:{key[0]}:{key[1]}"


def decode_list_cursor(cursor: str) -> DocKey:
    found = _LIST_RE.match(cursor) if len(cursor) <= LIST_CURSOR_MAX_CHARS else None
    if found is None:
        raise InvalidInput(
            "cursor is not a document list cursor of this API: pass back a `next_cursor` unchanged"
        )
    source, doc_id = found.groups()
    return source, doc_id


@dataclass(frozen=True)
class DocumentSummary:
    """One document of a listing: what its chunks say about it."""

    source: str
    doc_id: str
    title: str
    chunks: int
    updated: str | None = None


@dataclass
class DocumentPage:
    documents: list[DocumentSummary]
    next_after: DocKey | None


def merge_summaries(
    parts: Iterable[dict[DocKey, tuple[int, str, str | None]]],
) -> dict[DocKey, tuple[int, str, str | None]]:
    """Per-shard document summaries ((source, doc_id) -> (chunks, title, updated)) as one:
    a document's chunks lie on several shards, so their counts add up."""
    merged: dict[DocKey, tuple[int, str, str | None]] = {}
    for part in parts:
        for key, (count, title, updated) in part.items():
            had = merged.get(key)
            merged[key] = (count + (had[0] if had else 0), title, updated)
    return merged


def page_documents(
    summaries: dict[DocKey, tuple[int, str, str | None]], after: DocKey | None, limit: int
) -> DocumentPage:
    """The `limit` documents after `after` in (source, doc_id) order; `next_after` is the last
    of them when more follow (None: this page ends the listing)."""
    if not 1 <= limit <= MAX_LIST_LIMIT:
        raise InvalidInput(f"limit must be in 1..{MAX_LIST_LIMIT}, got {limit}")
    keys = sorted(k for k in summaries if after is None or k > after)
    page = keys[:limit]
    docs = [
        DocumentSummary(k[0], k[1], summaries[k][1], summaries[k][0], summaries[k][2]) for k in page
    ]
    return DocumentPage(docs, page[-1] if len(keys) > limit else None)


def bounded_deletes(matched: Collection[DocKey], max_documents: int) -> list[DocKey]:
    """The documents a delete by filter removes: every one it matched, in (source, doc_id)
    order; TooManyMatches (nothing is deleted) when they are more than `max_documents`."""
    if not 1 <= max_documents <= MAX_DELETE_DOCUMENTS:
        raise InvalidInput(
            f"max_documents must be in 1..{MAX_DELETE_DOCUMENTS}, got {max_documents}"
        )
    if len(matched) > max_documents:
        raise TooManyMatches(
            f"the filter matches {len(matched)} documents, more than max_documents"
            f" ({max_documents}): nothing was deleted"
        )
    return sorted(matched)


@dataclass
class DocumentView:
    """A document as indexed: its chunks in order, and the fields they carry."""

    source: str
    doc_id: str
    title: str
    updated: str | None
    metadata: dict[str, Any]
    acl: list[str] | None
    chunks: list[Chunk] = field(default_factory=list)


def document_view(
    chunks: Sequence[Chunk], principals: Collection[str] | None
) -> DocumentView | None:
    """The document its chunks make (None without any), in chunk order. Its ACL as the caller
    sees it: the principals of the ACL that the caller holds (`principals` None: the
    operator, who sees all of it); the rest of the ACL names others and is not shown."""
    if not chunks:
        return None
    ordered = sorted(chunks, key=lambda c: c.n)
    first = ordered[0]
    acl = None
    if first.acl is not None:
        acl = [p for p in first.acl if principals is None or p in principals]
    return DocumentView(
        first.source, first.doc_id, first.title, first.updated, dict(first.metadata), acl, ordered
    )
