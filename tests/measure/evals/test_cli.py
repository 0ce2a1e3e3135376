"""The eval-side CLI: convert Cranfield to BEIR, grow a golden set, refuse bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragindex.app.cli import main
from ragindex.measure.evals import load_beir


def test_convert_then_golden_add_appends_a_judged_query(tmp_path: Path) -> None:
    out = tmp_path / "cran"
    assert main(["convert", "--out", str(out)]) == 0
    before = load_beir(out)
    assert len(before.corpus) == 1400 and len(before.queries) == 225

    assert (
        main(
            [
                "golden",
                "add",
                "--collection",
                str(out),
                "--query",
                "wing flutter at Mach 2",
                "--relevant",
                "12=3",
                "13",
            ]
        )
        == 0
    )
    after = load_beir(out)
    added = set(after.queries) - set(before.queries)
    assert len(added) == 1
    qid = added.pop()
    assert after.qrels[qid] == {"12": 3, "13": 1}


def test_golden_add_refuses_unknown_documents_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cran"
    main(["convert", "--out", str(out)])
    queries = (out / "queries.jsonl").read_bytes()
    code = main(["golden", "add", "--collection", str(out), "--query", "q", "--relevant", "nope"])
    assert code == 2
    assert "nope" in capsys.readouterr().err
    assert (out / "queries.jsonl").read_bytes() == queries


def test_eval_on_a_malformed_collection_names_the_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "qrels").mkdir()
    (tmp_path / "corpus.jsonl").write_text(json.dumps({"_id": "d1", "text": "lift"}) + "\n{oops\n")
    (tmp_path / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "lift"}) + "\n")
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    assert main(["eval", "--collection", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "corpus.jsonl:2: bad JSON" in err
