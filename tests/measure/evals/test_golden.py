"""Golden-set helper: appending a judged query, and refusing bad ones without writing."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from ragindex.errors import InvalidInput
from ragindex.measure.evals import load_beir
from ragindex.measure.evals.collections import CollectionError, Query
from ragindex.measure.evals.golden import add_judged_query, next_golden_id

WriteBeir = Callable[..., Path]


def _snapshot(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_adds_a_query_and_its_judgments(write_beir: WriteBeir) -> None:
    root = write_beir()
    qid = add_judged_query(root, "  which fruit\tis green? ", {"d2": 2, "d1": 0}, tenant="acme")
    assert qid == "golden-4"
    c = load_beir(root)
    assert c.queries[qid] == Query(qid, "which fruit is green?", "acme")
    assert c.qrels[qid] == {"d2": 2, "d1": 0}
    assert c.qrels["q1"] == {"d1": 2, "d2": 1}  # earlier judgments untouched
    last = (root / "qrels" / "test.tsv").read_text().splitlines()[-2:]
    assert last == ["golden-4\td2\t2", "golden-4\td1\t0"]
    assert add_judged_query(root, "boats", {"d4": 1}) == "golden-5"
    assert load_beir(root).queries["golden-5"].tenant is None


def test_starts_a_golden_set_from_a_bare_corpus(write_beir: WriteBeir) -> None:
    root = write_beir(queries=None, qrels=None)
    assert add_judged_query(root, "orbit", {"d3": 3}, tenant="globex") == "golden-1"
    assert (root / "qrels" / "test.tsv").read_text().splitlines()[0] == "query-id\tcorpus-id\tscore"
    c = load_beir(root)
    assert c.judged_queries() == ["golden-1"]
    assert json.loads((root / "queries.jsonl").read_text()) == {
        "_id": "golden-1",
        "text": "orbit",
        "tenant": "globex",
    }


def test_next_id_skips_used_ids() -> None:
    assert next_golden_id({}) == "golden-1"
    assert next_golden_id({"golden-2": 0, "x": 0}) == "golden-3"
    assert next_golden_id({"golden-1": 0, "golden-2": 0, "golden-3": 0}) == "golden-4"


@pytest.mark.parametrize(
    ("text", "relevant", "tenant", "message"),
    [
        ("", {"d1": 1}, "acme", "query text is empty"),
        ("fruit", {}, "acme", "relevant is empty"),
        ("fruit", {"nope": 1}, "acme", "unknown corpus id 'nope'"),
        ("fruit", {"d1": 1.5}, "acme", "is not an integer"),
        ("fruit", {"d1": True}, "acme", "is not an integer"),
        ("fruit", {"d1": 0}, "acme", "no grade is > 0"),
        ("fruit", {"d3": 1}, "acme", "only credited with its own tenant"),
        ("fruit", {"d1": 1}, None, "only credited with its own tenant"),
        ("fruit", {"d1": 1}, "Bad Tenant", "tenant_id 'Bad Tenant' is malformed"),
        ("red   fruit", {"d1": 1}, "acme", "already in the set as 'q1'"),
    ],
)
def test_bad_additions_write_nothing(
    write_beir: WriteBeir, text: str, relevant: dict[str, object], tenant: str | None, message: str
) -> None:
    root = write_beir()
    before = _snapshot(root)
    with pytest.raises(InvalidInput, match=message):
        add_judged_query(root, text, relevant, tenant=tenant)
    assert _snapshot(root) == before


def test_a_malformed_existing_set_is_reported_not_extended(write_beir: WriteBeir) -> None:
    root = write_beir(qrels="query-id\tcorpus-id\tscore\nq1\tdX\t1")
    before = _snapshot(root)
    with pytest.raises(CollectionError, match=r"test\.tsv:2: judgment names unknown corpus id"):
        add_judged_query(root, "fruit", {"d1": 1}, tenant="acme")
    assert _snapshot(root) == before


def test_missing_corpus_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(CollectionError, match=r"corpus\.jsonl: file not found"):
        add_judged_query(tmp_path, "fruit", {"d1": 1})
    assert list(tmp_path.iterdir()) == []
