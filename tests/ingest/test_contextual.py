"""Contextual chunks (chunking.contextual): the document title and section path are embedded
and indexed for BM25 before a chunk's text, never shown; ids stay, a new generation is built."""

from __future__ import annotations

from pathlib import Path

from ragindex.app import EmbeddedIndex
from ragindex.config import ChunkingSpec, RagIndexSpec
from ragindex.generations import changed_generation_fields, index_generation
from ragindex.ingest import chunk_document, chunk_for_embedder
from ragindex.ingest.chunkers import chunk_hash, search_prefix
from ragindex.lexical import TantivyIndex
from ragindex.lexical.documents import BODY_FIELD, indexed_fields
from ragindex.passages import passage_text
from ragindex.protocols import Embedder
from ragindex.testing import RecordingEmbedder
from ragindex.types import Document


def words(text: str) -> int:
    return len(text.split())


# "zeppelin" is only in a heading: a later chunk of its section never says it.
SECTION_BODY = " ".join(f"Mooring mast rope number {i} holds the hull." for i in range(30))
DOC = Document(
    "manual",
    "airships",
    "Airship Handbook",
    f"# Airship Handbook\n\nIntro text.\n\n## Rigid zeppelin mooring\n\n{SECTION_BODY}\n",
)


def chunks(contextual: bool, max_tokens: int = 64, limit: int | None = None) -> list:
    spec = ChunkingSpec(max_tokens=max_tokens, contextual=contextual)
    return chunk_document(DOC, "t", spec, words, limit)


def test_search_prefix_is_title_and_section_path_said_once() -> None:
    assert search_prefix("Guide", ("Guide", "Install", "Linux")) == "Guide > Install > Linux"
    assert search_prefix(" Guide ", ()) == "Guide"
    assert search_prefix("", ("A", "A", "B")) == "A > B"


def test_contextual_chunks_keep_ids_and_text_and_carry_the_prefix() -> None:
    plain, contextual = chunks(False), chunks(True)
    assert [c.chunk_id for c in contextual] == [c.chunk_id for c in plain]
    assert [c.text for c in contextual] == [c.text for c in plain]  # what is shown is unchanged
    assert all(c.search_prefix == "" for c in plain)
    later = [c for c in contextual if "zeppelin" not in c.text.lower()]
    assert later and all(
        c.search_prefix == "Airship Handbook > Rigid zeppelin mooring"
        for c in later
        if c.metadata["headings"] == ["Airship Handbook", "Rigid zeppelin mooring"]
    )
    # The prefix is in the hash (a renamed heading re-embeds its section); plain hashes are
    # the ones chunks had before the setting existed.
    assert all(a.content_hash != b.content_hash for a, b in zip(plain, contextual, strict=True))
    assert plain[0].content_hash == chunk_hash(DOC.title, plain[0].text, None, DOC)
    assert chunks(True) == contextual  # same input, same chunks


def test_prefix_tokens_are_reserved_in_the_model_window() -> None:
    limit = 40
    for chunk in chunks(True, max_tokens=200, limit=limit):
        path_tokens = words(chunk.search_prefix) - words(chunk.title)
        assert words(chunk.text) + path_tokens <= limit


def test_what_is_embedded_and_indexed_has_the_prefix_and_the_chunk_does_not() -> None:
    chunk = next(c for c in chunks(True) if "zeppelin" not in c.text.lower())
    assert passage_text(chunk) == f"{chunk.search_prefix}\n{chunk.text}"
    assert indexed_fields(chunk)[BODY_FIELD] == f"{chunk.search_prefix}\n{chunk.text}"
    plain = next(c for c in chunks(False) if c.chunk_id == chunk.chunk_id)
    assert passage_text(plain) == f"{plain.title}\n{plain.text}"
    assert indexed_fields(plain)[BODY_FIELD] == plain.text


def test_bm25_index_matches_the_prefix_and_hands_back_the_chunk_as_written() -> None:
    index = TantivyIndex.open(None)
    written = chunks(True)
    index.upsert(written)
    hits = index.search("zeppelin", 10, "t", with_chunks=10)
    later = {c.chunk_id: c for c in written if "zeppelin" not in c.text.lower()}
    assert set(later) <= {h.chunk_id for h in hits}
    assert all(h.chunk == next(c for c in written if c.chunk_id == h.chunk_id) for h in hits)


def test_contextual_is_the_default_and_off_keeps_the_old_generation() -> None:
    on = RagIndexSpec.model_validate({"chunking": {"max_tokens": 200}})
    off = RagIndexSpec.model_validate({"chunking": {"contextual": False, "max_tokens": 200}})
    assert on.chunking.contextual
    assert index_generation(off) == "03b5db25"  # specs from before the setting: unchanged
    assert index_generation(on) != index_generation(off)
    assert changed_generation_fields(off, on) == ["chunking.contextual"]


def test_both_legs_see_the_context_and_hits_show_the_chunk(
    tmp_path: Path, minilm: Embedder
) -> None:
    spec = RagIndexSpec.model_validate({"chunking": {"maxTokens": 48, "contextual": True}})
    embedder = RecordingEmbedder(minilm)
    expected = chunk_for_embedder(embedder, spec.chunking, "acme", DOC)
    later = [c for c in expected if "zeppelin" not in c.text.lower() and c.n > 1]
    assert later, "the section must span chunks that do not repeat its heading"
    index = EmbeddedIndex(tmp_path, spec, embedder=embedder)
    try:
        index.upsert("acme", [DOC])
        # The dense leg embedded each chunk with its title and section path.
        assert set(embedder.embedded) == {f"{c.search_prefix}\n{c.text}" for c in expected}
        # The BM25 leg finds a chunk by a word only its section heading has.
        lexical = index.query.search("acme", "zeppelin", k=10, mode="lexical", rerank=False)
        found = {h.chunk.chunk_id: h.chunk for h in lexical.hits}
        assert {c.chunk_id for c in later} <= set(found)
        # What a hit returns is the chunk as written, from either leg.
        dense = index.query.search("acme", "zeppelin mooring", k=10, mode="dense", rerank=False)
        for hit in [*lexical.hits, *dense.hits]:
            original = next(c for c in expected if c.chunk_id == hit.chunk.chunk_id)
            assert hit.chunk.text == original.text
            assert hit.chunk.search_prefix == original.search_prefix
    finally:
        index.close()
