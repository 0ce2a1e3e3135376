"""The embedded data plane's write path end to end (EmbeddedIndex: the file log, the ingest
worker, the shard replicas with their chunks' text and the BM25 view), on real MiniLM."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from ragindex.app import EmbeddedIndex
from ragindex.config import RagIndexSpec
from ragindex.errors import InvalidInput
from ragindex.ingest import passage_token_limit
from ragindex.passages import passage_text
from ragindex.protocols import Embedder
from ragindex.testing import RecordingEmbedder
from ragindex.types import MAX_DOCUMENT_CHARS, Chunk, Document


@pytest.fixture
def embedder(minilm: Embedder) -> RecordingEmbedder:
    return RecordingEmbedder(minilm)


@pytest.fixture
def index(tmp_path: Path, embedder: RecordingEmbedder) -> Iterator[EmbeddedIndex]:
    spec = RagIndexSpec.model_validate({"dense": {"shards": 2}, "chunking": {"maxTokens": 64}})
    opened = EmbeddedIndex(tmp_path, spec, embedder=embedder)
    yield opened
    opened.close()


TOPICS = {
    "wing": "Wing flutter appears when aerodynamic forces couple with the bending modes.",
    "heat": "Heat transfer to a blunt body rises sharply at hypersonic speeds.",
    "shock": "A normal shock wave slows supersonic flow to subsonic speed downstream.",
    "layer": "The boundary layer thickens along a flat plate until it becomes turbulent.",
}


def make_doc(doc_id: str, topic: str, sections: int = 3, source: str = "cran") -> Document:
    parts = [f"# {topic.title()} study {doc_id}"]
    for s in range(sections):
        parts.append(f"## Part {s}")
        parts.append(" ".join(f"{TOPICS[topic]} Observation {s}.{i}." for i in range(4)))
    return Document(source, doc_id, f"{topic} {doc_id}", "\n\n".join(parts))


DOCS = [make_doc(f"d{i}", t) for i, t in enumerate(TOPICS)]


def chunks_of(index: EmbeddedIndex, tenant: str) -> dict[str, Chunk]:
    """Every chunk the shard replicas hold for the tenant, by id."""
    return {cid: c for r in index.dense.replicas for cid, c in r.texts.get(tenant, {}).items()}


def state(index: EmbeddedIndex, tenant: str) -> tuple[Any, ...]:
    """Everything a write could change, as seen from outside: the views and the log."""
    log = index.writer.log
    docs = index.writer.topics.docs
    ends = [log.end_offset(docs, p) for p in range(index.writer.topics.docs_partitions)]
    return chunks_of(index, tenant), index.dense.count(tenant), index.lexical.count(tenant), ends


def top_ids(index: EmbeddedIndex, tenant: str, query: str) -> tuple[list[str], list[str]]:
    qv = index.embedder.embed_queries([query])
    dense = index.dense.search(qv, 3, tenant, index.embedder.identity)
    lexical = index.lexical.search(query, 3, tenant)
    return [h.chunk_id for h in dense], [h.chunk_id for h in lexical]


def test_ingest_reaches_both_views_and_is_searchable(
    index: EmbeddedIndex, embedder: RecordingEmbedder
) -> None:
    assert index.upsert("acme", DOCS) == len(DOCS)
    n = len(chunks_of(index, "acme"))
    assert n > len(DOCS) and len(embedder.embedded) == n
    assert index.dense.count("acme") == index.lexical.count("acme") == n
    dense, lexical = top_ids(index, "acme", "shock wave slows supersonic flow")
    assert dense[0].startswith("cran:d2:") and lexical[0].startswith("cran:d2:")
    chunk = index.dense.get_chunks("acme", dense[:1])[dense[0]]
    assert "shock" in chunk.text and chunk.title == "shock d2"
    limit = passage_token_limit(embedder)
    assert limit == 254
    # Chunk text keeps the 64-token budget; the embedded passage (title + text) fits the model.
    chunks = chunks_of(index, "acme").values()
    assert all(embedder.count_tokens(c.text) <= 64 for c in chunks)
    assert all(embedder.count_tokens(t) <= limit for t in embedder.embedded)
    assert sorted(embedder.embedded) == sorted(passage_text(c) for c in chunks)


def test_unchanged_reingest_embeds_nothing(
    index: EmbeddedIndex, embedder: RecordingEmbedder
) -> None:
    index.upsert("acme", DOCS)
    chunks, dense, lexical, _ = state(index, "acme")
    embedder.embedded.clear()
    index.upsert("acme", DOCS)
    assert embedder.embedded == []
    assert state(index, "acme")[:3] == (chunks, dense, lexical)


def test_one_edit_reembeds_only_its_changed_chunks(
    index: EmbeddedIndex, embedder: RecordingEmbedder
) -> None:
    index.upsert("acme", DOCS)
    old = chunks_of(index, "acme")
    embedder.embedded.clear()
    edited = Document(
        "cran",
        "d1",
        DOCS[1].title,
        DOCS[1].text.replace("Observation 1.2.", "Finding 1.2 (revised)."),
    )
    index.upsert("acme", [*DOCS[:1], edited, *DOCS[2:]])
    (text,) = embedder.embedded
    assert "Finding 1.2 (revised)." in text
    new = chunks_of(index, "acme")
    assert new.keys() == old.keys()
    assert [cid for cid in old if old[cid].content_hash != new[cid].content_hash] == [
        cid for cid in new if "revised" in new[cid].text
    ]
    _, lexical = top_ids(index, "acme", "finding revised")
    assert lexical[0] in [cid for cid in new if "revised" in new[cid].text]


def test_shrinking_a_doc_tombstones_removed_chunks(index: EmbeddedIndex) -> None:
    index.upsert("acme", [make_doc("d0", "wing", sections=3)])
    before = chunks_of(index, "acme")
    index.upsert("acme", [make_doc("d0", "wing", sections=1)])
    after = chunks_of(index, "acme")
    gone = before.keys() - after.keys()
    assert gone and after and after.keys() < before.keys()
    assert index.dense.count("acme") == index.lexical.count("acme") == len(after)
    dense, lexical = top_ids(index, "acme", TOPICS["wing"])
    assert not gone & set(dense + lexical)


def test_delete_document(index: EmbeddedIndex) -> None:
    index.upsert("acme", DOCS)
    index.upsert("other", DOCS[:1])
    removed = {cid for cid in chunks_of(index, "acme") if cid.startswith("cran:d0:")}
    index.delete("acme", "cran", "d0")
    assert removed and not removed & chunks_of(index, "acme").keys()
    dense, lexical = top_ids(index, "acme", TOPICS["wing"])
    assert not removed & set(dense + lexical)
    assert index.dense.count("acme") == index.lexical.count("acme") > 0
    held = state(index, "acme")[:3]
    index.delete("acme", "cran", "d0")  # idempotent
    assert state(index, "acme")[:3] == held
    assert index.dense.count("other") == len(removed)  # same ids, other tenant
    assert top_ids(index, "other", TOPICS["wing"])[0][0].startswith("cran:d0:")
    with pytest.raises(InvalidInput, match="doc_id 'a/b' is malformed"):
        index.delete("acme", "cran", "a/b")


def test_tenants_are_separate(index: EmbeddedIndex, embedder: RecordingEmbedder) -> None:
    index.upsert("acme", DOCS[:2])
    embedder.embedded.clear()
    index.upsert("globex", DOCS[:2])
    assert embedder.embedded  # same content, other tenant: embedded for that tenant
    assert chunks_of(index, "acme").keys() == chunks_of(index, "globex").keys()


BAD_INPUTS: list[tuple[object, object, str]] = [
    ("", [DOCS[0]], "tenant_id is required"),
    ("Acme Corp", [DOCS[0]], "tenant_id 'Acme Corp' is malformed"),
    (None, [DOCS[0]], "tenant_id is required"),
    (
        "acme",
        [{"source": "cran", "doc_id": "e", "text": "   "}],
        r"documents\[1\]: .*text is empty",
    ),
    (
        "acme",
        [{"source": "cran", "doc_id": "big", "text": "a" * (MAX_DOCUMENT_CHARS + 1)}],
        "more than the limit",
    ),
    ("acme", [{"source": "cran", "doc_id": "u", "text": b"ok \xff\xfe"}], "not valid UTF-8"),
    ("acme", [{"source": "cran", "doc_id": "u", "text": "bad \ufffd char"}], "not valid UTF-8"),
    ("acme", [{"source": "cran", "text": "no id"}], r"documents\[1\]: missing field\(s\) doc_id"),
    ("acme", [{"doc_id": "x", "text": "no source"}], r"missing field\(s\) source"),
    (
        "acme",
        [{"source": "cran", "doc_id": "m", "text": "x", "metadata": {"k": {1}}}],
        "not allowed",
    ),
    ("acme", [Document("cran", "f", "", "x", metadata={"format": "pdf"})], "unknown document"),
    ("acme", ["just a string"], r"documents\[1\]: expected a JSON object"),
]


@pytest.mark.parametrize(("tenant", "extra", "message"), BAD_INPUTS)
def test_bad_input_changes_nothing(
    index: EmbeddedIndex, embedder: RecordingEmbedder, tenant: Any, extra: Any, message: str
) -> None:
    """One bad document refuses the whole batch before anything reaches the log."""
    index.upsert("acme", DOCS[:2])
    before = state(index, "acme")
    embedder.embedded.clear()
    edited_first = Document("cran", "d0", "new title", DOCS[0].text + "\n\nA new paragraph.")
    batch: list[Document | Mapping[str, object]] = [edited_first, *extra]
    with pytest.raises(InvalidInput, match=message):
        index.upsert(tenant, batch)
    assert embedder.embedded == []
    assert state(index, "acme") == before
