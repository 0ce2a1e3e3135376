"""ragindex.ingest: the write path from documents to embedded chunks.

- `IngestWorker`: reads `docs`, parses, chunks, embeds and appends `chunks.<generation>`
  (the partitions it owns: `assigned_partitions`);
- `load_file`, `as_documents`: documents from files and from API payloads;
- `chunk_document`, `chunk_for_embedder`, `embed_chunks`: chunking within the embedder's token
  budget, and embedding the chunks.
"""

from typing import TYPE_CHECKING

from ragindex.faces import lazy_face

if TYPE_CHECKING:
    from ragindex.ingest.chunkers import chunk_document
    from ragindex.ingest.parsers import load_file
    from ragindex.ingest.pipeline import (
        as_documents,
        chunk_for_embedder,
        embed_chunks,
        passage_token_limit,
    )
    from ragindex.ingest.worker import IngestWorker, assigned_partitions

__all__ = [
    "IngestWorker",
    "as_documents",
    "assigned_partitions",
    "chunk_document",
    "chunk_for_embedder",
    "embed_chunks",
    "load_file",
    "passage_token_limit",
]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_face(
        __name__,
        {
            "chunkers": ["chunk_document"],
            "parsers": ["load_file"],
            "pipeline": [
                "as_documents",
                "chunk_for_embedder",
                "embed_chunks",
                "passage_token_limit",
            ],
            "worker": ["IngestWorker", "assigned_partitions"],
        },
    )
