"""The runner: best-chunk document mapping, tenancy, the report, and ingest of a collection.

The retrieval under evaluation is injected, so these tests pass small pure search functions
(a fixed table, and the real tantivy backend filled from what `ingest_collection` handed over).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path

import pytest
import pytrec_eval

from ragindex.errors import InvalidInput
from ragindex.lexical import TantivyIndex
from ragindex.measure.evals import Collection, load_beir, load_cranfield
from ragindex.measure.evals.collections import CorpusDoc, Query
from ragindex.measure.evals.runner import collapse_to_documents, evaluate, ingest_collection
from ragindex.types import Chunk, Document

Hits = list[tuple[str, str]]


def table_search(table: dict[tuple[str, str, str], Hits]) -> Callable[..., Hits]:
    """A pure search: (tenant, query, mode) -> fixed ranked hits, cut at k."""

    def search(tenant_id: str, query: str, k: int, mode: str) -> Hits:
        return table.get((tenant_id, query, mode), [])[:k]

    return search


def _collection(qrels: dict[str, dict[str, int]]) -> Collection:
    corpus = {d: CorpusDoc(d, "", f"text {d}") for d in ("d1", "d2", "d3", "d4")}
    return Collection("tiny", corpus, {"q": Query("q", "the query")}, qrels)


def test_chunks_collapse_to_their_document_at_the_best_chunk_rank() -> None:
    hits = [("s:d2:1", "d2"), ("s:d1:0", "d1"), ("s:d2:0", "d2"), ("s:d3:4", "d3")]
    ranked, foreign = collapse_to_documents(hits, lambda doc: doc != "d1")
    assert ranked == ["d2", "d1", "d3"] and foreign == 1


def test_evaluate_scores_documents_not_chunks() -> None:
    # d3's only chunk is 4th among chunks but 3rd among documents: MRR is 1/3, not 1/4.
    hits = [("tiny:d2:1", "d2"), ("tiny:d1:0", "d1"), ("tiny:d2:0", "d2"), ("tiny:d3:0", "d3")]
    search = table_search({("default", "the query", "bm25"): hits})
    report = evaluate(
        _collection({"q": {"d3": 2, "d4": 1}}),
        search,
        legs=("bm25",),
        k=10,
        metrics=("mrr@10", "recall@10", "p@10", "ndcg@10"),
    )
    result = report.legs["bm25"].per_query[0]
    assert result.ranked == ["d2", "d1", "d3"]
    assert result.scores["mrr@10"] == pytest.approx(1 / 3)
    assert result.scores["recall@10"] == 0.5
    assert result.scores["p@10"] == pytest.approx(0.1)
    idcg = 2 + 1 / math.log2(3)
    assert result.scores["ndcg@10"] == pytest.approx((2 / math.log2(4)) / idcg)


def test_documents_are_cut_at_k_after_collapsing() -> None:
    hits = [("c1", "d1"), ("c2", "d1"), ("c3", "d2"), ("c4", "d3")]
    seen: list[int] = []

    def search(tenant_id: str, query: str, k: int, mode: str) -> Hits:
        seen.append(k)
        return hits

    report = evaluate(
        _collection({"q": {"d3": 1}}), search, legs=("dense",), k=2, metrics=("recall@2",)
    )
    assert seen == [2]
    assert report.legs["dense"].per_query[0].ranked == ["d1", "d2"]
    assert report.legs["dense"].means == {"recall@2": 0.0}


def _two_tenants() -> Collection:
    corpus = {
        "a1": CorpusDoc("a1", "", "acme text", "acme"),
        "a2": CorpusDoc("a2", "", "acme more", "acme"),
        "g1": CorpusDoc("g1", "", "globex text", "globex"),
    }
    queries = {"qa": Query("qa", "text", "acme"), "qg": Query("qg", "text", "globex")}
    return Collection("mt", corpus, queries, {"qa": {"a1": 1}, "qg": {"g1": 1}})


def test_a_query_is_asked_as_its_tenant_and_never_credited_with_another_tenants_documents() -> None:
    calls: list[tuple[str, str]] = []

    def leaky(tenant_id: str, query: str, k: int, mode: str) -> Hits:
        calls.append((tenant_id, query))
        # a broken store: returns every tenant's documents, the other tenant's first
        docs = ["g1", "a1", "a2"] if tenant_id == "acme" else ["a1", "g1"]
        return [(f"mt:{d}:0", d) for d in docs]

    report = evaluate(_two_tenants(), leaky, legs=("hybrid",), k=10, metrics=("mrr@10",))
    assert calls == [("acme", "text"), ("globex", "text")]
    per_query = {r.qid: r for r in report.legs["hybrid"].per_query}
    assert per_query["qa"].scores["mrr@10"] == 0.5  # g1 holds rank 1 but is not credited
    assert per_query["qa"].foreign_hits == 1 and per_query["qg"].foreign_hits == 1
    assert report.to_json()["hybrid"]["foreign_hits"] == 2
    assert any("foreign hits" in note for note in report.notes)


def test_foreign_tenant_documents_are_never_credited_even_when_judged_elsewhere() -> None:
    # globex's g1 is relevant to qg; returned for acme's query it earns acme nothing.
    search = table_search({("acme", "text", "bm25"): [("mt:g1:0", "g1")]})
    report = evaluate(_two_tenants(), search, legs=("bm25",), k=10, metrics=("recall@10",))
    scores = {r.qid: r.scores["recall@10"] for r in report.legs["bm25"].per_query}
    assert scores == {"qa": 0.0, "qg": 0.0}


def test_report_json_table_and_per_query_file(tmp_path: Path) -> None:
    hits = [("tiny:d1:0", "d1"), ("tiny:d2:0", "d2")]
    table = {("default", "the query", leg): hits for leg in ("bm25", "dense", "hybrid")}
    table[("default", "the query", "rerank")] = list(reversed(hits))
    report = evaluate(
        _collection({"q": {"d2": 1}}),
        table_search(table),
        legs=("bm25", "dense", "hybrid", "rerank"),
    )
    out = report.to_json()
    assert list(out) == ["bm25", "dense", "hybrid", "rerank", "notes"]
    assert out["bm25"] == {
        "ndcg@10": pytest.approx(1 / math.log2(3)),
        "recall@100": 1.0,
        "mrr@10": 0.5,
        "p@10": pytest.approx(0.1),
        "queries": 1,
        "foreign_hits": 0,
    }
    assert out["rerank"]["mrr@10"] == 1.0
    assert any("best chunk" in note for note in out["notes"])
    json.dumps(out)
    text = report.table()
    assert "ndcg@10" in text and re.search(r"rerank\s+1\.0000", text)
    path = report.write_per_query(tmp_path / "out" / "per_query.jsonl")
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(r["leg"], r["qid"]) for r in rows] == [
        ("bm25", "q"),
        ("dense", "q"),
        ("hybrid", "q"),
        ("rerank", "q"),
    ]
    assert rows[3]["top10"] == ["d2", "d1"] and rows[3]["mrr@10"] == 1.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"legs": ()}, "legs is empty"),
        ({"legs": ("bm25", "sparse")}, "must be distinct names"),
        ({"legs": ("bm25", "bm25")}, "must be distinct names"),
        ({"k": 0}, "k must be an integer"),
        ({"k": 50}, r"shallower than the deepest metric cutoff \(100\)"),
        ({"metrics": ("map@10",)}, "unknown metric"),
        ({"default_tenant": "Not OK"}, "tenant_id"),
    ],
)
def test_bad_requests_are_rejected_before_searching(
    kwargs: dict[str, object], message: str
) -> None:
    called: list[str] = []

    def search(tenant_id: str, query: str, k: int, mode: str) -> Hits:
        called.append(mode)
        return []

    with pytest.raises(InvalidInput, match=message):
        evaluate(_collection({"q": {"d1": 1}}), search, **kwargs)
    assert called == []


def test_collection_without_relevant_judgments_is_rejected() -> None:
    with pytest.raises(InvalidInput, match="no query with a relevant judgment"):
        evaluate(_collection({"q": {"d1": 0}}), table_search({}))


def test_ingest_collection_batches_per_tenant_and_skips_empty_text() -> None:
    corpus = {
        "a1": CorpusDoc("a1", "A", "x", "acme"),
        "a2": CorpusDoc("a2", "", "y", "acme"),
        "a3": CorpusDoc("a3", "", "z", "acme"),
        "e": CorpusDoc("e", "", "  "),
        "n": CorpusDoc("n", "", "w"),
    }
    c = Collection("mini", corpus, {"q": Query("q", "x")}, {})
    batches: list[tuple[str, list[Document]]] = []
    summary = ingest_collection(
        c, lambda t, docs: batches.append((t, docs)), batch_size=2, default_tenant="main"
    )
    assert [(t, [d.doc_id for d in docs]) for t, docs in batches] == [
        ("acme", ["a1", "a2"]),
        ("acme", ["a3"]),
        ("main", ["n"]),
    ]
    assert batches[0][1][0] == Document(source="mini", doc_id="a1", title="A", text="x")
    assert summary.documents == 4 and summary.per_tenant == {"acme": 3, "main": 1}
    assert summary.skipped_empty == ["e"]
    with pytest.raises(InvalidInput, match="batch_size"):
        ingest_collection(c, lambda t, docs: None, batch_size=0)


# ------------------------------------------------------- end to end on real Cranfield data


class TantivyStore:
    """The real embedded BM25 backend behind the runner's injected functions; each document
    becomes two chunks, to exercise the chunk-to-document mapping."""

    def __init__(self, path: Path) -> None:
        self.index = TantivyIndex.open(path)
        self.tenants: set[str] = set()

    def ingest(self, tenant_id: str, documents: list[Document]) -> None:
        chunks = []
        for doc in documents:
            words = f"{doc.title} {doc.text}".split()
            half = max(1, len(words) // 2)
            for n, part in enumerate((words[:half], words[half:])):
                if part:
                    chunk_id = f"{doc.source}:{doc.doc_id}:{n}"
                    chunks.append(
                        Chunk(
                            tenant_id, chunk_id, doc.source, doc.doc_id, n, "", " ".join(part), ""
                        )
                    )
        self.index.upsert(chunks)
        self.tenants.add(tenant_id)

    def search(self, tenant_id: str, query: str, k: int, mode: str) -> Hits:
        assert mode == "bm25"
        return [
            (h.chunk_id, h.chunk_id.split(":")[1]) for h in self.index.search(query, k, tenant_id)
        ]


def test_cranfield_end_to_end_on_tantivy(cranfield_dir: Path, tmp_path: Path) -> None:
    collection = load_cranfield(cranfield_dir)
    store = TantivyStore(tmp_path / "bm25")
    summary = ingest_collection(collection, store.ingest)
    assert summary.documents == 1398 and sorted(summary.skipped_empty) == ["471", "995"]
    report = evaluate(collection, store.search, legs=("bm25",))
    bm25 = report.to_json()["bm25"]
    assert bm25["queries"] == 225 and bm25["foreign_hits"] == 0
    # the embedded BM25 leg on half-document chunks lands near the README's 0.348 nDCG@10
    assert 0.30 < bm25["ndcg@10"] < 0.40 and bm25["recall@100"] > 0.6
    # the whole pipeline agrees with trec_eval on the same document rankings
    run = {
        r.qid: {d: float(100 - i) for i, d in enumerate(r.ranked)}
        for r in report.legs["bm25"].per_query
    }
    ref = pytrec_eval.RelevanceEvaluator(collection.qrels, {"ndcg_cut.10", "recall.100"})
    values = ref.evaluate(run).values()
    assert bm25["ndcg@10"] == pytest.approx(sum(v["ndcg_cut_10"] for v in values) / 225, abs=1e-9)
    assert bm25["recall@100"] == pytest.approx(sum(v["recall_100"] for v in values) / 225, abs=1e-9)


def test_tenant_tagged_beir_collection_end_to_end(
    write_beir: Callable[..., Path], tmp_path: Path
) -> None:
    collection = load_beir(write_beir())
    store = TantivyStore(tmp_path / "bm25")
    summary = ingest_collection(collection, store.ingest)
    assert summary.per_tenant == {"acme": 2, "globex": 1, "default": 1}
    assert store.tenants == {"acme", "globex", "default"}
    report = evaluate(collection, store.search, legs=("bm25",), k=100)
    assert report.to_json()["bm25"]["mrr@10"] == 1.0
    assert report.to_json()["bm25"]["foreign_hits"] == 0
