"""Benchmark fixtures: a tiny judged collection and the packaged MiniLM, loaded once.

Benchmarks are not tests: these check the shape and consistency of what the benchmark code
reports on a corpus small enough to embed in seconds, never wall-clock figures.
"""

from __future__ import annotations

import os

import pytest

from ragindex.measure.evals import Collection
from ragindex.measure.evals.collections import CorpusDoc, Query

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

TINY_DOCS = {
    "1": ("Shock waves", "oblique shock waves form ahead of a wedge in supersonic flow"),
    "2": ("Boundary layers", "the laminar boundary layer on a flat plate thickens downstream"),
    "3": ("Heat transfer", "heat transfer to a blunt body at hypersonic speed is severe"),
    "4": ("Buckling", "thin cylindrical shells buckle under axial compression loads"),
    "5": ("Wings", "lift and drag of a swept wing at low aspect ratio"),
    "6": ("Transition", "transition from laminar to turbulent flow in the boundary layer"),
    "7": ("Empty", ""),
}
TINY_QUERIES = {
    "1": "supersonic shock wave over a wedge",
    "2": "laminar boundary layer growth",
    "3": "buckling of shells",
}
TINY_QRELS = {"1": {"1": 3}, "2": {"2": 3, "6": 1}, "3": {"4": 2}}


@pytest.fixture(scope="session")
def tiny() -> Collection:
    corpus = {i: CorpusDoc(i, title, text) for i, (title, text) in TINY_DOCS.items()}
    queries = {q: Query(q, text) for q, text in TINY_QUERIES.items()}
    return Collection("tiny", corpus, queries, TINY_QRELS)
