"""The SQLite manifest + chunk store: diffs, atomic apply, tenancy, tombstones, persistence."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from ragindex.config import ChunkingSpec
from ragindex.errors import IdentityMismatch, InvalidInput
from ragindex.ingest.chunkers import chunk_document
from ragindex.ingest.store import ChunkStore, Diff
from ragindex.types import Chunk, Document, ModelIdentity

SPEC = ChunkingSpec.model_validate({"max_tokens": 16})
IDENTITY = ModelIdentity("m", "h1", 8, True)


def words(text: str) -> int:
    return len(text.split())


def doc(doc_id: str, paragraphs: list[str], source: str = "s") -> Document:
    return Document(source, doc_id, f"T{doc_id}", "\n\n".join(paragraphs))


def chunks(tenant: str, d: Document) -> list[Chunk]:
    return chunk_document(d, tenant, SPEC, words)


PARAS = [f"paragraph {i} " + "word " * 12 for i in range(4)]  # 14 words: one chunk each


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ChunkStore]:
    s = ChunkStore(tmp_path / "m.sqlite")
    yield s
    s.close()


def ingest(store: ChunkStore, tenant: str, d: Document) -> Diff:
    diff = store.diff(tenant, d, chunks(tenant, d))
    store.apply(tenant, diff)
    return diff


def test_pragmas(store: ChunkStore) -> None:
    db = sqlite3.connect(store.path)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.close()
    assert store._db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL


def test_diff_added_unchanged_removed(store: ChunkStore) -> None:
    first = ingest(store, "t", doc("d", PARAS))
    assert (len(first.added), len(first.unchanged), first.removed) == (4, 0, [])
    again = store.diff("t", doc("d", PARAS), chunks("t", doc("d", PARAS)))
    assert (again.added, len(again.unchanged), again.removed) == ([], 4, [])
    edited = doc("d", [PARAS[0], "changed " + PARAS[1], PARAS[2]])
    diff = store.diff("t", edited, chunks("t", edited))
    assert [c.chunk_id for c in diff.added] == ["s:d:1"]
    assert [c.chunk_id for c in diff.unchanged] == ["s:d:0", "s:d:2"]
    assert diff.removed == ["s:d:3"]
    store.apply("t", diff)
    assert store.count("t") == 3
    assert store.tombstones("t") == ["s:d:3"]
    assert store.get_chunks("t", ["s:d:1"])["s:d:1"].text.startswith("changed")


def test_chunk_ids_are_per_tenant(store: ChunkStore) -> None:
    ingest(store, "a", doc("d", PARAS))
    ingest(store, "b", doc("d", PARAS[:1]))
    assert (store.count("a"), store.count("b")) == (4, 1)
    got = store.get_chunks("b", ["s:d:0", "s:d:1"])
    assert list(got) == ["s:d:0"] and got["s:d:0"].tenant_id == "b"
    assert store.delete_document("a", "s", "d") == ["s:d:0", "s:d:1", "s:d:2", "s:d:3"]
    assert store.count("a") == 0 and store.count("b") == 1
    assert store.tombstones("b") == []


def test_documents_lists_ids_and_hashes(store: ChunkStore) -> None:
    d = Document("s", "d", "Title", "\n\n".join(PARAS[:2]), updated="2024-05-01")
    diff = ingest(store, "t", d)
    (record,) = store.documents("t")
    assert (record.source, record.doc_id, record.title, record.updated) == (
        "s",
        "d",
        "Title",
        "2024-05-01",
    )
    assert record.chunks == {c.chunk_id: c.content_hash for c in diff.added}
    assert store.documents("other") == []


def test_apply_is_one_transaction(store: ChunkStore) -> None:
    ingest(store, "t", doc("keep", PARAS))
    good = store.diff("t", doc("new", PARAS), chunks("t", doc("new", PARAS)))
    bad_chunk = replace(chunks("t", doc("x", PARAS))[0], metadata={"not json": {1, 2}})
    bad = Diff(doc("x", PARAS), [bad_chunk], [], [])
    with pytest.raises(TypeError):
        store.apply("t", good, bad)
    assert [r.doc_id for r in store.documents("t")] == ["keep"]
    assert store.count("t") == 4


def test_restored_chunk_loses_its_tombstone(store: ChunkStore) -> None:
    ingest(store, "t", doc("d", PARAS))
    ingest(store, "t", doc("d", PARAS[:2]))
    assert store.tombstones("t") == ["s:d:2", "s:d:3"]
    ingest(store, "t", doc("d", PARAS[:3]))
    assert store.tombstones("t") == ["s:d:3"]
    store.clear_tombstones("t", ["s:d:3"])
    assert store.tombstones("t") == []


def test_persisted_across_reopen(tmp_path: Path) -> None:
    path = tmp_path / "m.sqlite"
    s = ChunkStore(path)
    s.bind_identity(IDENTITY)
    ingest(s, "t", doc("d", PARAS))
    before = s.get_chunks("t", [f"s:d:{i}" for i in range(4)])
    s.close()
    s2 = ChunkStore(path)
    assert s2.identity() == IDENTITY
    assert s2.get_chunks("t", list(before)) == before
    s2.bind_identity(IDENTITY)  # same identity: fine
    with pytest.raises(IdentityMismatch, match="new index generation"):
        s2.bind_identity(replace(IDENTITY, weights_hash="h2"))
    s2.close()


def test_bad_calls_change_nothing(store: ChunkStore) -> None:
    d = doc("d", PARAS)
    with pytest.raises(InvalidInput, match="tenant_id"):
        store.diff("", d, chunks("t", d))
    with pytest.raises(InvalidInput, match="does not belong"):
        store.diff("u", d, chunks("t", d))
    with pytest.raises(InvalidInput, match="does not belong"):
        store.diff("t", doc("other", PARAS), chunks("t", d))
    twice = chunks("t", d)[:1] * 2
    with pytest.raises(InvalidInput, match="duplicate chunk ids"):
        store.diff("t", d, twice)
    with pytest.raises(InvalidInput, match="tenant_id"):
        store.get_chunks("Bad!", ["x"])
    assert store.count("t") == 0


def test_many_ids_in_one_read(store: ChunkStore) -> None:
    big = doc("big", [f"p{i} " + "w " * 14 for i in range(1200)])
    ingest(store, "t", big)
    ids = [f"s:big:{i}" for i in range(1200)] + ["missing"]
    assert len(store.get_chunks("t", ids)) == 1200
