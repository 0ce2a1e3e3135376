"""The ingest pipeline on real parts: MiniLM, FAISS shards, tantivy and the SQLite store."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ragindex.config import ChunkingSpec, HnswSpec
from ragindex.errors import IdentityMismatch, InvalidInput
from ragindex.ingest.pipeline import DocResult, IngestPipeline, passage_text, passage_token_limit
from ragindex.ingest.store import ChunkStore, Diff
from ragindex.lexical.tantivy_index import TantivyIndex
from ragindex.models.embedder import SentenceTransformerEmbedder
from ragindex.protocols import Vectors
from ragindex.shards.sharded import ShardedDenseIndex
from ragindex.types import MAX_DOCUMENT_CHARS, Document, ModelIdentity


class CountingEmbedder:
    """The real embedder, recording the passages it embeds (a wrapper, not a mock)."""

    def __init__(self, inner: SentenceTransformerEmbedder) -> None:
        self.inner = inner
        self.identity: ModelIdentity = inner.identity
        self.max_seq_length = inner.max_seq_length
        self.embedded: list[str] = []

    def embed_passages(self, texts: Sequence[str]) -> Vectors:
        self.embedded.extend(texts)
        return self.inner.embed_passages(texts)

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        return self.inner.embed_queries(texts)

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)


@dataclass
class Rig:
    pipeline: IngestPipeline
    embedder: CountingEmbedder
    dense: ShardedDenseIndex
    lexical: TantivyIndex
    store: ChunkStore


def open_rig(root: Path, embedder: CountingEmbedder, chunking: ChunkingSpec) -> Rig:
    dense = ShardedDenseIndex.open(
        root / "dense",
        embedder.identity,
        num_shards=2,
        hnsw=HnswSpec.model_validate({}),
        exact_threshold=20_000,
    )
    lexical = TantivyIndex.open(root / "lexical")
    store = ChunkStore(root / "store.sqlite")
    pipeline = IngestPipeline(embedder, dense, lexical, store, chunking)
    return Rig(pipeline, embedder, dense, lexical, store)


def close_rig(rig: Rig) -> None:
    rig.dense.close()
    rig.lexical.close()
    rig.store.close()


@pytest.fixture
def rig(tmp_path: Path, minilm: SentenceTransformerEmbedder) -> Iterator[Rig]:
    r = open_rig(
        tmp_path, CountingEmbedder(minilm), ChunkingSpec.model_validate({"max_tokens": 64})
    )
    yield r
    close_rig(r)


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


def state(rig: Rig, tenant: str) -> tuple[Any, ...]:
    """Everything an upsert could change, as seen from outside."""
    records = rig.store.documents(tenant)
    ids = [cid for r in records for cid in r.chunks]
    return (
        records,
        rig.store.get_chunks(tenant, ids),
        rig.store.tombstones(tenant),
        rig.dense.count(tenant),
        rig.lexical.count(tenant),
    )


def top_ids(rig: Rig, tenant: str, query: str) -> tuple[list[str], list[str]]:
    qv = rig.embedder.embed_queries([query])
    dense = rig.dense.search(qv, 3, tenant, rig.embedder.identity)
    lexical = rig.lexical.search(query, 3, tenant)
    return [h.chunk_id for h in dense], [h.chunk_id for h in lexical]


def test_ingest_writes_all_three_and_is_searchable(rig: Rig) -> None:
    results = rig.pipeline.upsert("acme", DOCS)
    n = sum(r.added for r in results)
    assert all(r.added > 1 and r.unchanged == 0 and r.removed == 0 for r in results)
    assert len(rig.embedder.embedded) == n
    assert rig.store.count("acme") == rig.dense.count("acme") == rig.lexical.count("acme") == n
    dense, lexical = top_ids(rig, "acme", "shock wave slows supersonic flow")
    assert dense[0].startswith("cran:d2:") and lexical[0].startswith("cran:d2:")
    chunk = rig.store.get_chunks("acme", dense[:1])[dense[0]]
    assert "shock" in chunk.text and chunk.title == "shock d2"
    limit = passage_token_limit(rig.embedder)
    assert limit == 254
    # Chunk text keeps the 64-token budget; the embedded passage (title + text) fits the model.
    chunks = rig.store.get_chunks("acme", [f"cran:{d.doc_id}:0" for d in DOCS])
    assert chunks and all(rig.embedder.count_tokens(c.text) <= 64 for c in chunks.values())
    assert all(rig.embedder.count_tokens(t) <= limit for t in rig.embedder.embedded)
    assert all(passage_text(c).startswith(c.title) for c in chunks.values())


def test_unchanged_reingest_embeds_nothing(rig: Rig) -> None:
    rig.pipeline.upsert("acme", DOCS)
    before = state(rig, "acme")
    rig.embedder.embedded.clear()
    results = rig.pipeline.upsert("acme", DOCS)
    assert rig.embedder.embedded == []
    assert all(r.added == 0 and r.removed == 0 and r.unchanged > 0 for r in results)
    assert state(rig, "acme") == before


def test_one_edit_reembeds_only_its_changed_chunks(rig: Rig) -> None:
    rig.pipeline.upsert("acme", DOCS)
    old = rig.store.get_chunks("acme", [f"cran:d1:{i}" for i in range(10)])
    rig.embedder.embedded.clear()
    edited = Document(
        "cran",
        "d1",
        DOCS[1].title,
        DOCS[1].text.replace("Observation 1.2.", "Finding 1.2 (revised)."),
    )
    (changed_doc,) = [
        r for r in rig.pipeline.upsert("acme", [*DOCS[:1], edited, *DOCS[2:]]) if r.added
    ]
    assert changed_doc.key == "cran:d1"
    assert changed_doc.added == 1 and changed_doc.removed == 0
    (text,) = rig.embedder.embedded
    assert "Finding 1.2 (revised)." in text
    new = rig.store.get_chunks("acme", list(old))
    assert [cid for cid in old if old[cid].content_hash != new[cid].content_hash] == [
        cid for cid in new if "revised" in new[cid].text
    ]
    _, lexical = top_ids(rig, "acme", "finding revised")
    assert lexical[0] in [cid for cid in new if "revised" in new[cid].text]


def test_shrinking_a_doc_tombstones_removed_chunks(rig: Rig) -> None:
    rig.pipeline.upsert("acme", [make_doc("d0", "wing", sections=3)])
    total = rig.store.count("acme")
    (res,) = rig.pipeline.upsert("acme", [make_doc("d0", "wing", sections=1)])
    assert res.removed > 0 and res.unchanged > 0
    left = total - res.removed
    assert rig.store.count("acme") == rig.dense.count("acme") == rig.lexical.count("acme") == left
    gone = rig.store.tombstones("acme")
    assert len(gone) == res.removed
    dense, lexical = top_ids(rig, "acme", TOPICS["wing"])
    assert not set(gone) & set(dense + lexical)


def test_delete_document(rig: Rig) -> None:
    rig.pipeline.upsert("acme", DOCS)
    rig.pipeline.upsert("other", DOCS[:1])
    removed = rig.pipeline.delete("acme", "cran", "d0")
    assert removed and all(cid.startswith("cran:d0:") for cid in removed)
    dense, lexical = top_ids(rig, "acme", TOPICS["wing"])
    assert not set(removed) & set(dense + lexical)
    assert rig.store.count("acme") == rig.dense.count("acme") == rig.lexical.count("acme")
    assert rig.pipeline.delete("acme", "cran", "d0") == []  # idempotent
    assert rig.store.count("other") == rig.dense.count("other") > 0  # same ids, other tenant
    assert top_ids(rig, "other", TOPICS["wing"])[0][0].startswith("cran:d0:")
    with pytest.raises(InvalidInput, match="doc_id 'a/b' is malformed"):
        rig.pipeline.delete("acme", "cran", "a/b")


def test_tenants_are_separate(rig: Rig) -> None:
    rig.pipeline.upsert("acme", DOCS[:2])
    rig.embedder.embedded.clear()
    (res, _) = rig.pipeline.upsert("globex", DOCS[:2])
    assert res.added > 0  # same content, other tenant: embedded for that tenant
    assert rig.store.count("acme") == rig.store.count("globex")


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
    ("acme", [DOCS[0]], "appears twice"),
    (
        "acme",
        [{"source": "cran", "doc_id": "m", "text": "x", "metadata": {"k": {1}}}],
        "not allowed",
    ),
    ("acme", [Document("cran", "f", "", "x", metadata={"format": "pdf"})], "unknown document"),
    ("acme", ["just a string"], r"documents\[1\]: expected a JSON object"),
]


@pytest.mark.parametrize(("tenant", "extra", "message"), BAD_INPUTS)
def test_bad_input_changes_nothing(rig: Rig, tenant: Any, extra: Any, message: str) -> None:
    rig.pipeline.upsert("acme", DOCS[:2])
    before = state(rig, "acme")
    rig.embedder.embedded.clear()
    edited_first = Document("cran", "d0", "new title", DOCS[0].text + "\n\nA new paragraph.")
    batch: list[Document | Mapping[str, object]] = [edited_first, *extra]
    with pytest.raises(InvalidInput, match=message):
        rig.pipeline.upsert(tenant, batch)
    assert rig.embedder.embedded == []
    assert state(rig, "acme") == before


def test_identity_is_checked(tmp_path: Path, minilm: SentenceTransformerEmbedder) -> None:
    rig = open_rig(tmp_path, CountingEmbedder(minilm), ChunkingSpec.model_validate({}))
    close_rig(rig)
    other = CountingEmbedder(minilm)
    other.identity = rig.embedder.identity.__class__(
        **{**rig.embedder.identity.to_dict(), "passage_prefix": "passage: "}
    )
    with pytest.raises(IdentityMismatch):
        IngestPipeline(other, rig.dense, rig.lexical, ChunkStore(tmp_path / "x.sqlite"))
    store = ChunkStore(tmp_path / "store.sqlite")
    dense_like = type("D", (), {"identity": other.identity})()
    with pytest.raises(IdentityMismatch, match="new index generation"):
        IngestPipeline(other, dense_like, rig.lexical, store)
    store.close()


class CrashingStore(ChunkStore):
    """Fault injection: the process 'dies' after the indexes were written, before the manifest."""

    def apply(self, tenant_id: str, *diffs: Diff) -> None:
        raise SystemExit("crash before the manifest commit")


def test_crash_before_manifest_commit_is_redone_on_retry(
    tmp_path: Path, minilm: SentenceTransformerEmbedder
) -> None:
    embedder = CountingEmbedder(minilm)
    rig = open_rig(tmp_path, embedder, ChunkingSpec.model_validate({"max_tokens": 64}))
    rig.pipeline.upsert("acme", DOCS[:1])
    rig.store.close()
    crashing = CrashingStore(tmp_path / "store.sqlite")
    rig.pipeline.store = crashing
    with pytest.raises(SystemExit):
        rig.pipeline.upsert("acme", DOCS[1:2])
    crashing.close()
    assert rig.dense.count("acme") > ChunkStore(tmp_path / "store.sqlite").count("acme")
    rig.pipeline.store = rig.store = ChunkStore(tmp_path / "store.sqlite")
    embedder.embedded.clear()
    (res,) = rig.pipeline.upsert("acme", DOCS[1:2])
    assert res.added == len(embedder.embedded) > 0  # not acknowledged before: redone
    assert rig.store.count("acme") == rig.dense.count("acme") == rig.lexical.count("acme")
    close_rig(rig)


def test_results_shape(rig: Rig) -> None:
    assert rig.pipeline.upsert("acme", []) == []
    (res,) = rig.pipeline.upsert("acme", [{"source": "cran", "doc_id": "j", "text": "json doc"}])
    assert res == DocResult("cran:j", 1, 0, 0)
