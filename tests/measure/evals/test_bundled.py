"""The bundled judged collections (measure/evals/data/<name>/): they load, have enough judged
queries, and their judgments cover their pools. Reads files only: no model, no index."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragindex.measure.evals import load_beir
from ragindex.measure.evals.bundled import BUNDLED_DIR, bundled_collections, bundled_dir
from ragindex.measure.evals.pool import (
    POOL_LEGS,
    read_judgments,
    read_pool,
    write_pool,
    write_qrels,
)

EXPECTED = ("gnu-manuals", "nodejs-api")
MIN_QUERIES = 50
MAX_CORPUS_BYTES = 3_000_000


def test_the_expected_collections_are_bundled() -> None:
    assert set(EXPECTED) <= set(bundled_collections())


@pytest.mark.parametrize("name", EXPECTED)
def test_a_bundled_name_resolves_to_its_folder(name: str) -> None:
    assert bundled_dir(name) == BUNDLED_DIR / name


def test_an_unknown_name_is_not_bundled() -> None:
    assert bundled_dir("no-such-collection") is None
    assert bundled_dir("../gnu-manuals") is None


@pytest.fixture(params=EXPECTED)
def folder(request: pytest.FixtureRequest) -> Path:
    return BUNDLED_DIR / request.param


def test_loads_with_enough_judged_queries(folder: Path) -> None:
    collection = load_beir(folder)
    assert collection.name == folder.name
    assert len(collection.queries) >= MIN_QUERIES
    # every query has at least one relevant document (none was left unanswered)
    assert collection.judged_queries() == list(collection.queries)
    assert (folder / "corpus.jsonl").stat().st_size <= MAX_CORPUS_BYTES


def test_is_documented_and_licensed(folder: Path) -> None:
    readme = (folder / "README.md").read_text(encoding="utf-8").lower()
    for topic in ("licen", "queries", "pool", "judg", "spdx"):
        assert topic in readme, f"{folder.name}/README.md says nothing about {topic!r}"
    assert (folder / "LICENSE").is_file()


def test_qrels_are_the_positive_judgments(folder: Path) -> None:
    judged = read_judgments(folder / "judgments.tsv")
    collection = load_beir(folder)
    positive = {
        qid: {doc: grade for doc, grade in docs.items() if grade > 0}
        for qid, docs in judged.items()
    }
    assert {q: d for q, d in positive.items() if d} == collection.qrels
    for qid, docs in judged.items():
        assert qid in collection.queries
        assert set(docs) <= set(collection.corpus)


def test_every_pooled_document_is_judged(folder: Path) -> None:
    pool = read_pool(folder / "pool.tsv")
    judged = read_judgments(folder / "judgments.tsv")
    collection = load_beir(folder)
    assert set(pool) == set(collection.queries)
    for qid, docs in pool.items():
        assert set(docs) <= set(judged.get(qid, {})), f"query {qid}: pooled but not judged"
        for ranks in docs.values():
            assert ranks and set(ranks) <= set(POOL_LEGS)
            assert all(1 <= rank <= 20 for rank in ranks.values())
        # each leg contributed its top 20 (fewer only if the corpus ran out)
        for leg in POOL_LEGS:
            assert len([d for d, r in docs.items() if leg in r]) == 20


def test_queries_are_distinct(folder: Path) -> None:
    texts = [
        json.loads(line)["text"].strip().lower()
        for line in (folder / "queries.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    assert len(texts) == len(set(texts))


def test_pool_round_trip_and_qrels_from_judgments(tmp_path: Path) -> None:
    pool = {"q1": {"d1": {"bm25": 1, "hybrid": 2}, "d2": {"dense": 1}}}
    write_pool(tmp_path / "pool.tsv", pool)
    assert read_pool(tmp_path / "pool.tsv") == pool
    (tmp_path / "judgments.tsv").write_text(
        "query-id\tcorpus-id\tscore\nq1\td1\t2\nq1\td2\t0\n", encoding="utf-8"
    )
    assert write_qrels(tmp_path) == 1
    assert (tmp_path / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines() == [
        "query-id\tcorpus-id\tscore",
        "q1\td1\t2",
    ]


def test_a_grade_outside_0_to_2_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "judgments.tsv"
    path.write_text("query-id\tcorpus-id\tscore\nq1\td1\t3\n", encoding="utf-8")
    with pytest.raises(ValueError, match="not 0, 1 or 2"):
        read_judgments(path)


def test_eval_resolves_a_bundled_name_and_prefers_an_existing_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ragindex.measure.evals.cli import collection_dir

    assert collection_dir("gnu-manuals") == BUNDLED_DIR / "gnu-manuals"
    assert collection_dir(str(tmp_path)) == tmp_path
    (tmp_path / "gnu-manuals").mkdir()
    monkeypatch.chdir(tmp_path)
    assert collection_dir("gnu-manuals") == Path("gnu-manuals")
