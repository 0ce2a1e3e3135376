"""What is embedded for a chunk: pure, shared by the ingest worker (the chunks' vectors) and the
query path (Rocchio feedback embeds the same passage text of its feedback hits)."""

from __future__ import annotations

from ragindex.types import Chunk


def passage_text(chunk: Chunk) -> str:
    """What is embedded for a chunk: its document title, then its text; a contextual chunk's
    search prefix (title and section path, chunking.contextual) instead of the title.

    A document's later chunks do not repeat its title, so without it they lose the topic
    the title names (on Cranfield, dense nDCG@10 rose from 0.368 to 0.381 with it, hybrid
    from 0.399 to 0.408).
    """
    if chunk.search_prefix:
        return f"{chunk.search_prefix}\n{chunk.text}"
    title = chunk.title.strip()
    return f"{title}\n{chunk.text}" if title and not chunk.text.startswith(title) else chunk.text
