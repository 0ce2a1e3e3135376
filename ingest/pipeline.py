"""The write path: validate, chunk, diff against the manifest, embed what changed, write.

Order matters for both guarantees:
- Bad input changes nothing: every document is validated and chunked before the first
  write, so one bad document rejects the whole batch.
- Acknowledged writes are not lost: dense and lexical are written (each durable on return)
  before the store, which is the manifest; a crash in between makes a retry redo the work.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from ragindex.config import ChunkingSpec
from ragindex.errors import IdentityMismatch, InvalidInput
from ragindex.ingest.chunkers import chunk_document
from ragindex.ingest.parsers import document_from_mapping
from ragindex.ingest.store import ChunkStore, Diff
from ragindex.protocols import DenseIndex, Embedder, LexicalIndex, Vectors
from ragindex.types import ID_PART_RE, Chunk, Document, validate_tenant

SPECIAL_TOKENS = 2  # [CLS] and [SEP] (or <s> and </s>) around every passage
EMBED_BATCH = 256  # chunks handed to the embedder per call (it batches further itself)


@dataclass(frozen=True)
class DocResult:
    """What one upsert did to one document (counts of chunks)."""

    key: str
    added: int
    unchanged: int
    removed: int


def passage_token_limit(embedder: Embedder) -> int:
    """Tokens of passage text the embedder sees: its window less special tokens and prefix."""
    prefix = embedder.count_tokens(embedder.identity.passage_prefix)
    return embedder.max_seq_length - SPECIAL_TOKENS - prefix


def as_documents(documents: Iterable[Document | Mapping[str, object]]) -> list[Document]:
    """Validate a batch: Documents or JSON-like objects (Document checks each). A document may
    appear more than once: through the log each occurrence is a write, in order, so the last
    one wins."""
    if isinstance(documents, (str, bytes, Mapping)):
        raise InvalidInput("documents must be a list of documents")
    return [
        d if isinstance(d, Document) else document_from_mapping(d, f"documents[{i}]")
        for i, d in enumerate(documents)
    ]


def _refuse_repeats(docs: list[Document]) -> None:
    """An in-process upsert diffs every document against the same stored state, so it cannot
    apply two versions of one document in a batch: refuse them."""
    seen: set[str] = set()
    for i, doc in enumerate(docs):
        if doc.key in seen:
            raise InvalidInput(f"documents[{i}]: document {doc.key} appears twice in one upsert")
        seen.add(doc.key)


def passage_text(chunk: Chunk) -> str:
    """What is embedded for a chunk: its document title, then its text.

    A document's later chunks do not repeat its title, so without it they lose the topic
    the title names (on Cranfield, dense nDCG@10 rose from 0.368 to 0.381 with it, hybrid
    from 0.399 to 0.408).
    """
    title = chunk.title.strip()
    return f"{title}\n{chunk.text}" if title and not chunk.text.startswith(title) else chunk.text


def chunk_for_embedder(
    embedder: Embedder, chunking: ChunkingSpec, tenant_id: str, doc: Document
) -> list[Chunk]:
    """A document's chunks, sized for the embedder's window (one chunker for every writer)."""
    # The title is embedded with every chunk (passage_text): leave room for it in the
    # model's window, but never less than half the window for the text itself.
    window = passage_token_limit(embedder)
    title = doc.title.strip()
    title_tokens = embedder.count_tokens(f"{title}\n") if title else 0
    limit = max(window - title_tokens, window // 2)
    return chunk_document(doc, tenant_id, chunking, embedder.count_tokens, limit)


def embed_chunks(embedder: Embedder, chunks: list[Chunk]) -> Vectors:
    """Vectors of chunks' passage text, in batches of EMBED_BATCH."""
    dim = embedder.identity.dimension
    parts = [
        embedder.embed_passages([passage_text(c) for c in chunks[i : i + EMBED_BATCH]])
        for i in range(0, len(chunks), EMBED_BATCH)
    ]
    vectors = np.concatenate(parts) if parts else np.empty((0, dim), np.float32)
    if vectors.shape != (len(chunks), dim):
        raise RuntimeError(f"embedder returned {vectors.shape}, expected {(len(chunks), dim)}")
    return vectors


class IngestPipeline:
    """Upserts and deletes documents of any tenant into dense, lexical and the store."""

    def __init__(
        self,
        embedder: Embedder,
        dense: DenseIndex,
        lexical: LexicalIndex,
        store: ChunkStore,
        chunking: ChunkingSpec | None = None,
    ) -> None:
        if dense.identity != embedder.identity:
            raise IdentityMismatch(
                f"dense index was built with {dense.identity}, the embedder is {embedder.identity}"
            )
        store.bind_identity(embedder.identity)
        self.embedder = embedder
        self.dense = dense
        self.lexical = lexical
        self.store = store
        self.chunking = chunking or ChunkingSpec.model_validate({})
        self._lock = threading.Lock()  # one diff-then-apply at a time

    def chunk(self, tenant_id: str, doc: Document) -> list[Chunk]:
        return chunk_for_embedder(self.embedder, self.chunking, tenant_id, doc)

    def upsert(
        self, tenant_id: str, documents: Iterable[Document | Mapping[str, object]]
    ) -> list[DocResult]:
        """Insert or replace documents; only new or changed chunks are embedded."""
        tenant = validate_tenant(tenant_id)
        docs = as_documents(documents)
        _refuse_repeats(docs)
        chunked = [(doc, self.chunk(tenant, doc)) for doc in docs]
        with self._lock:
            diffs = [self.store.diff(tenant, doc, chunks) for doc, chunks in chunked]
            self._write(tenant, diffs)
        return [
            DocResult(d.document.key, len(d.added), len(d.unchanged), len(d.removed)) for d in diffs
        ]

    def _write(self, tenant: str, diffs: list[Diff]) -> None:
        added = [c for d in diffs for c in d.added]
        removed = [cid for d in diffs for cid in d.removed]
        if added:
            vectors = embed_chunks(self.embedder, added)
            self.dense.upsert(tenant, [c.chunk_id for c in added], vectors)
            self.lexical.upsert(added)
        if removed:
            self.dense.delete(tenant, removed)
            self.lexical.delete(tenant, removed)
        self.store.apply(tenant, *diffs)

    def delete(self, tenant_id: str, source: str, doc_id: str) -> list[str]:
        """Remove a document everywhere; returns its chunk ids ([] if it was not there)."""
        tenant = validate_tenant(tenant_id)
        for name, value in (("source", source), ("doc_id", doc_id)):
            if not isinstance(value, str) or not ID_PART_RE.fullmatch(value):
                raise InvalidInput(f"{name} {value!r} is malformed")
        with self._lock:
            ids = list(self.store.stored_hashes(tenant, source, doc_id))
            if ids:
                self.dense.delete(tenant, ids)
                self.lexical.delete(tenant, ids)
            return self.store.delete_document(tenant, source, doc_id)
