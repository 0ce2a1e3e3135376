"""Gate fixtures: a slice of Cranfield small enough to embed in seconds, measured once.

The gate's own tests must be affordable, so they replay a slice (the first documents and the
queries judged on them) with a baseline computed here for that slice, not the committed one.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from ragindex.app import cranfield_dir
from ragindex.config import RagIndexSpec
from ragindex.measure.evals import Collection, load_cranfield
from ragindex.measure.gate.run import gate_measure

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

SLICE_DOCS = 80


def cranfield_slice(docs: int = SLICE_DOCS, start: int = 0) -> Collection:
    """`docs` Cranfield documents from the `start`-th (the first ones by default) and the
    queries with a relevant one among them."""
    full = load_cranfield(cranfield_dir())
    corpus = dict(list(full.corpus.items())[start : start + docs])
    qrels = {
        qid: {d: g for d, g in judged.items() if d in corpus} for qid, judged in full.qrels.items()
    }
    qrels = {qid: judged for qid, judged in qrels.items() if any(g > 0 for g in judged.values())}
    queries = {qid: q for qid, q in full.queries.items() if qid in qrels}
    name = f"cranfield-slice{docs}" + (f"-from{start}" if start else "")
    return Collection(name, corpus, queries, qrels)


@pytest.fixture(scope="session")
def next_slice() -> Collection:
    """The 60 Cranfield documents after the slice's: a second collection to gate."""
    return cranfield_slice(60, start=SLICE_DOCS)


@pytest.fixture(scope="session")
def slice_collection() -> Collection:
    return cranfield_slice()


@pytest.fixture(scope="session")
def slice_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gate-slice")


@pytest.fixture(scope="session")
def slice_baseline(slice_collection: Collection, slice_dir: Path) -> dict[str, Any]:
    """The default configuration measured on the slice: the baseline these tests gate on."""
    return gate_measure(slice_collection, RagIndexSpec(), slice_dir, repeats=1)
