"""What is embedded for a chunk: pure, shared by the ingest worker (the chunks' vectors) and the
query path (Rocchio feedback embeds the same passage text of its feedback hits)."""

from __future__ import annotations

from ragindex.types import Chunk


def passage_text(chunk: Chunk) -> str:
    """What is embedded for a chunk: its document title, then its text.

    A document's later chunks do not repeat its title, so without it they lose the topic
    the title names (on Cranfield, dense nDCG@10 rose from 0.368 to 0.381 with it, hybrid
    from 0.399 to 0.408).
    """
    title = chunk.title.strip()
    return f"{title}\n{chunk.text}" if title and not chunk.text.startswith(title) else chunk.text
