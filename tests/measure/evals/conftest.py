"""Shared fixtures for the evals tests: tiny BEIR folders (Cranfield is tests/conftest.py's)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

TINY_CORPUS = [
    {"_id": "d1", "title": "Apples", "text": "apples are red fruit", "tenant": "acme"},
    {"_id": "d2", "title": "Pears", "text": "pears are green fruit", "tenant": "acme"},
    {"_id": "d3", "title": "Rockets", "text": "rockets fly to orbit", "tenant": "globex"},
    {"_id": "d4", "title": "Boats", "text": "boats float on water"},
]
TINY_QUERIES = [
    {"_id": "q1", "text": "red fruit", "tenant": "acme"},
    {"_id": "q2", "text": "orbit", "tenant": "globex"},
    {"_id": "q3", "text": "water"},
]
TINY_QRELS = ["q1\td1\t2", "q1\td2\t1", "q2\td3\t1", "q3\td4\t3"]


@pytest.fixture
def tiny_rows() -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """Fresh copies of the tiny corpus and query rows, to build malformed variants from."""
    return [dict(d) for d in TINY_CORPUS], [dict(q) for q in TINY_QUERIES]


WriteBeir = Callable[..., Path]


@pytest.fixture
def write_beir(tmp_path: Path) -> WriteBeir:
    """Write a BEIR folder; each file's text may be overridden (None leaves the file out)."""

    def write(
        name: str = "tiny",
        corpus: str | None = "\n".join(json.dumps(d) for d in TINY_CORPUS),
        queries: str | None = "\n".join(json.dumps(q) for q in TINY_QUERIES),
        qrels: str | None = "\n".join(["query-id\tcorpus-id\tscore", *TINY_QRELS]),
    ) -> Path:
        root = tmp_path / name
        (root / "qrels").mkdir(parents=True)
        for rel, text in (
            ("corpus.jsonl", corpus),
            ("queries.jsonl", queries),
            ("qrels/test.tsv", qrels),
        ):
            if text is not None:
                (root / rel).write_text(text + "\n", encoding="utf-8")
        return root

    return write
