"""Collections: Cranfield and BEIR loaders, every malformed-file error, tenants, export."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ragindex.errors import InvalidInput
from ragindex.measure.evals import Collection, load_beir, load_collection, load_cranfield
from ragindex.measure.evals.collections import (
    DEFAULT_BEIR_DIR,
    CollectionError,
    CorpusDoc,
    Query,
    cranfield_to_beir,
    export_beir,
)

HEADER = "query-id\tcorpus-id\tscore"
Rows = list[dict[str, Any]]
WriteBeir = Callable[..., Path]


def _jsonl(rows: list[dict[str, object]]) -> str:
    return "\n".join(json.dumps(r) for r in rows)


# ------------------------------------------------------------------------------ Cranfield


def test_cranfield_loads_1400_docs_and_225_queries(cranfield_dir: Path) -> None:
    c = load_cranfield(cranfield_dir)
    assert c.name == "cranfield"
    assert len(c.corpus) == 1400 and len(c.queries) == 225
    assert len(c.judged_queries()) == 225
    # 1837 judgment lines, 225 of them code -1 (ignored)
    assert sum(len(j) for j in c.qrels.values()) == 1612
    # Queries are numbered by position: the 3rd record of cran.qry is `.I 004`.
    assert c.queries["3"].text.startswith("what problems of heat conduction in composite slabs")
    # cranqrel's first line is `1 184 2`: code 2 -> gain 3; `1 13 4` -> gain 1.
    assert c.qrels["1"]["184"] == 3 and c.qrels["1"]["13"] == 1
    assert set().union(*(j.values() for j in c.qrels.values())) == {1, 2, 3, 4}
    doc = c.corpus["1"]
    assert doc.title == "experimental investigation of the aerodynamics of a wing in a slipstream ."
    assert doc.text.startswith("experimental investigation") and "brenckman" not in doc.text
    # Record 240 has stray `.A`/`.B` marker lines inside its text: kept as text, markers dropped.
    assert "unity in low-speed flow" in c.corpus["240"].text
    assert "\n.A\n" not in c.corpus["240"].text
    # Records 471 and 995 are empty in the source file.
    assert {d.doc_id for d in c.corpus.values() if not d.text} == {"471", "995"}


def test_cranfield_to_beir_round_trips(cranfield_dir: Path, tmp_path: Path) -> None:
    original = load_cranfield(cranfield_dir)
    out = cranfield_to_beir(cranfield_dir, tmp_path / "cranfield")
    assert sorted(p.name for p in out.rglob("*") if p.is_file()) == [
        "corpus.jsonl",
        "queries.jsonl",
        "test.tsv",
    ]
    assert load_beir(out) == original


def test_cranfield_to_beir_defaults_to_git_ignored_data_folder(
    cranfield_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert Path("data/beir/cranfield") == DEFAULT_BEIR_DIR
    cranfield_to_beir(cranfield_dir)
    assert len(load_beir(tmp_path / "data/beir/cranfield").corpus) == 1400


def _tiny_cranfield(root: Path, qrels: str) -> Path:
    root.mkdir()
    (root / "cran.all.1400").write_text(
        ".I 1\n.T\ntitle one\n.A\n.B\n.W\ntext one\n.I 2\n.T\nt\n.W\nx\n"
    )
    (root / "cran.qry").write_text(".I 001\n.W\nfirst query\n.I 007\n.W\nsecond query\n")
    (root / "cranqrel").write_text(qrels)
    return root


def test_tiny_cranfield_mapping(tmp_path: Path) -> None:
    c = load_cranfield(_tiny_cranfield(tmp_path / "c", "1 1 1\n1 2 -1\n2 2 4\n"))
    assert c.qrels == {"1": {"1": 4}, "2": {"2": 1}}
    assert c.queries["2"].text == "second query"


@pytest.mark.parametrize(
    ("qrels", "message"),
    [
        ("1 1 7\n", r"cranqrel:1: relevance code 7"),
        ("1 1 1\n1 9 2\n", r"cranqrel:2: judgment names unknown corpus id '9'"),
        ("3 1 2\n", r"cranqrel:1: judgment names unknown query id '3'"),
        ("1 one 2\n", r"cranqrel:1: expected 'query_position doc_id code'"),
        ("1 1 1\n1 1 2\n", r"cranqrel:2: duplicate judgment"),
    ],
)
def test_malformed_cranfield_qrels(tmp_path: Path, qrels: str, message: str) -> None:
    with pytest.raises(CollectionError, match=message):
        load_cranfield(_tiny_cranfield(tmp_path / "c", qrels))


def test_cranfield_missing_file(tmp_path: Path) -> None:
    root = _tiny_cranfield(tmp_path / "c", "1 1 1\n")
    (root / "cran.qry").unlink()
    with pytest.raises(CollectionError, match=r"cran\.qry: file not found"):
        load_cranfield(root)


# ----------------------------------------------------------------------------------- BEIR


def test_beir_loads_tenants_and_defaults(write_beir: WriteBeir) -> None:
    c = load_beir(write_beir())
    assert c.name == "tiny"
    assert c.corpus["d1"] == CorpusDoc("d1", "Apples", "apples are red fruit", "acme")
    assert c.corpus["d4"].tenant is None
    assert c.queries["q2"] == Query("q2", "orbit", "globex")
    assert c.qrels == {"q1": {"d1": 2, "d2": 1}, "q2": {"d3": 1}, "q3": {"d4": 3}}
    assert load_beir(write_beir("other"), name="golden").name == "golden"


def test_beir_title_is_optional(write_beir: WriteBeir, tiny_rows: tuple[Rows, Rows]) -> None:
    rows = [{k: v for k, v in d.items() if k != "title"} for d in tiny_rows[0]]
    assert load_beir(write_beir(corpus=_jsonl(rows))).corpus["d1"].title == ""


def test_export_round_trips_tenants(write_beir: WriteBeir, tmp_path: Path) -> None:
    c = load_beir(write_beir())
    out = export_beir(c, tmp_path / "again" / "tiny")
    assert load_beir(out) == c
    lines = (out / "corpus.jsonl").read_text().splitlines()
    assert json.loads(lines[3]) == {"_id": "d4", "title": "Boats", "text": "boats float on water"}


def _replace(i: int, row: dict[str, Any] | None = None) -> Callable[[Rows], str]:
    """A mutation: replace row i (None: by a copy of row 0)."""
    return lambda rows: _jsonl([*rows[:i], row or rows[0], *rows[i + 1 :]])


def _const(text: str | None) -> Callable[[Rows], str | None]:
    return lambda _rows: text


BAD_BEIR = [
    # (which file, its new text, expected message)
    ("corpus", _const(None), r"corpus\.jsonl: file not found"),
    ("queries", _const(None), r"queries\.jsonl: file not found"),
    ("qrels", _const(None), r"qrels/test\.tsv: file not found"),
    ("corpus", lambda rows: _jsonl(rows[:1]) + "\n{not json", r"corpus\.jsonl:2: bad JSON"),
    ("queries", _const("[1, 2]"), r"queries\.jsonl:1: expected a JSON object"),
    ("corpus", _replace(1, {"_id": "d2"}), r"corpus\.jsonl:2: missing .*text"),
    ("queries", _replace(2, {"text": "x"}), r"queries\.jsonl:3: missing .*_id"),
    (
        "corpus",
        _replace(1, {"_id": "d2", "text": "x", "title": 3}),
        r"corpus\.jsonl:2: field title must be a string",
    ),
    ("corpus", _replace(1), r"corpus\.jsonl:2: duplicate .*line 1"),
    ("queries", _replace(2), r"queries\.jsonl:3: duplicate"),
    ("corpus", _const(""), r"corpus\.jsonl: no documents"),
    ("queries", _const(""), r"queries\.jsonl: no queries"),
    (
        "queries",
        _replace(1, {"_id": "q2", "text": "   "}),
        r"queries\.jsonl:2: query 'q2' has empty text",
    ),
    (
        "corpus",
        _replace(0, {"_id": "a/b", "text": "x"}),
        r"corpus\.jsonl:1: document id 'a/b' is malformed",
    ),
    (
        "corpus",
        _replace(0, {"_id": "d1", "text": "x", "tenant": "Not Valid"}),
        r"corpus\.jsonl:1: tenant_id 'Not Valid' is malformed",
    ),
    (
        "qrels",
        _const(f"{HEADER}\nq1\tdX\t1"),
        r"test\.tsv:2: judgment names unknown corpus id 'dX'",
    ),
    ("qrels", _const(f"{HEADER}\nqX\td1\t1"), r"test\.tsv:2: judgment names unknown query id 'qX'"),
    ("qrels", _const(f"{HEADER}\nq1\td1\t1.5"), r"test\.tsv:2: score '1\.5' is not an integer"),
    ("qrels", _const(f"{HEADER}\nq1\td1\thigh"), r"test\.tsv:2: score 'high' is not an integer"),
    ("qrels", _const(f"{HEADER}\nq1\td1"), r"test\.tsv:2: expected 3 tab-separated fields, got 2"),
    ("qrels", _const("q1\td1\t1"), r"test\.tsv:1: expected the header"),
    ("qrels", _const(f"{HEADER}\nq1\td1\t1\nq1\td1\t2"), r"test\.tsv:3: duplicate judgment"),
    ("qrels", _const(HEADER), r"test\.tsv: no judgments"),
    # q1 belongs to acme, d3 to globex; q3 (default tenant) to acme's d1.
    (
        "qrels",
        _const(f"{HEADER}\nq1\td3\t1"),
        r"test\.tsv:2: query 'q1' \(tenant 'acme'\).*'d3' of tenant",
    ),
    ("qrels", _const(f"{HEADER}\nq3\td1\t1"), r"test\.tsv:2: query 'q3' \(the default tenant\)"),
]


@pytest.mark.parametrize(("which", "text", "message"), BAD_BEIR)
def test_malformed_beir_is_rejected_naming_file_and_line(
    write_beir: WriteBeir,
    tiny_rows: tuple[Rows, Rows],
    which: str,
    text: Callable[[Rows], str | None],
    message: str,
) -> None:
    rows = tiny_rows[1] if which == "queries" else tiny_rows[0]
    root = write_beir(**{which: text(rows)})
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    with pytest.raises(CollectionError, match=message) as info:
        load_beir(root)
    assert isinstance(info.value, InvalidInput)
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before


def test_bad_split_name_is_rejected(write_beir: WriteBeir) -> None:
    with pytest.raises(CollectionError, match=r"split '\.\./x' is malformed"):
        load_beir(write_beir(), split="../x")


def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(CollectionError, match="not found"):
        load_beir(tmp_path / "nope")


# ------------------------------------------------------------------- programmatic checks


def test_collection_validates_cross_tenant_judgments() -> None:
    corpus = {"a": CorpusDoc("a", "", "x", "t1"), "b": CorpusDoc("b", "", "y", "t2")}
    queries = {"q": Query("q", "x", "t1")}
    assert Collection("c", corpus, queries, {"q": {"a": 1}}).judged_queries() == ["q"]
    with pytest.raises(CollectionError, match="only credited with its own tenant"):
        Collection("c", corpus, queries, {"q": {"a": 1, "b": 1}})


@pytest.mark.parametrize(
    ("name", "corpus", "queries", "message"),
    [
        ("bad name", {"a": CorpusDoc("a", "", "x")}, {"q": Query("q", "x")}, "name must be"),
        ("c", {}, {"q": Query("q", "x")}, "corpus is empty"),
        ("c", {"a": CorpusDoc("a", "", "x")}, {}, "no queries"),
        ("c", {"a": CorpusDoc("b", "", "x")}, {"q": Query("q", "x")}, "differs from its doc_id"),
        ("c", {"a": CorpusDoc("a", "", "x")}, {"q": Query("q", " ")}, "empty text"),
        ("c", {"a": CorpusDoc("a", "", "x")}, {"q r": Query("q r", "x")}, "query id 'q r'"),
    ],
)
def test_collection_rejects_bad_parts(
    name: str, corpus: dict[str, CorpusDoc], queries: dict[str, Query], message: str
) -> None:
    with pytest.raises(CollectionError, match=message):
        Collection(name, corpus, queries, {})


def test_judged_queries_skip_queries_without_relevant_documents() -> None:
    corpus = {"a": CorpusDoc("a", "", "x")}
    queries = {"q1": Query("q1", "x"), "q2": Query("q2", "y"), "q3": Query("q3", "z")}
    c = Collection("c", corpus, queries, {"q1": {"a": 0}, "q3": {"a": 2}})
    assert c.judged_queries() == ["q3"]


def test_load_collection_detects_the_layout(
    cranfield_dir: Path, write_beir: WriteBeir, tmp_path: Path
) -> None:
    assert len(load_collection(cranfield_dir).corpus) == 1400
    assert load_collection(write_beir(), name="t").name == "t"
    with pytest.raises(CollectionError, match="neither a Cranfield folder"):
        load_collection(tmp_path)
