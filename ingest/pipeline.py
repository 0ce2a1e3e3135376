"""What the write path does to a document: validate it (before it reaches the log), chunk it
for the embedder's window, and embed its chunks' passage text (title, then text). The ingest
worker (ingest.worker) does this for every runtime; the backfill benchmarks call the same
functions to compare against it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from ragindex.config import ChunkingSpec
from ragindex.errors import InvalidInput
from ragindex.ingest.chunkers import chunk_document, document_format
from ragindex.ingest.parsers import document_from_mapping
from ragindex.passages import passage_text
from ragindex.protocols import Embedder, Vectors
from ragindex.types import Chunk, Document

SPECIAL_TOKENS = 2  # [CLS] and [SEP] (or <s> and </s>) around every passage
EMBED_BATCH = 256  # chunks handed to the embedder per call (it batches further itself)


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
    docs = [
        d if isinstance(d, Document) else document_from_mapping(d, f"documents[{i}]")
        for i, d in enumerate(documents)
    ]
    for doc in docs:
        document_format(doc)  # refused here: the ingest worker could only skip it once logged
    return docs


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
