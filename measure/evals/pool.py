"""Judgment pools for a hand-judged collection: the top documents of every leg, per query.

A collection's judgments are only as complete as its pool: every document that any leg ranks in
its top `depth` for a query is judged, so a leg is never scored against documents nobody
looked at. The pool is made with the same engine and ranking as `ragindex eval` (the embedded
index in the same cache folder, k=100 chunks collapsed to documents), then cut at `depth`.

Files, all tab-separated with a header line, beside the collection's corpus.jsonl:

- `pool.tsv`: `query-id corpus-id bm25 dense hybrid`, each leg's 1-based rank or `-`;
- `judgments.tsv`: `query-id corpus-id score` for every pooled pair, zeros included
  (0 not relevant, 1 partly relevant, 2 answers the query);
- `qrels/test.tsv`: the judgments with a score above zero (what evaluation reads).

    python -m ragindex.measure.evals.pool DIR [--depth 20] [--spec FILE]   # writes pool.tsv
    python -m ragindex.measure.evals.pool DIR --qrels    # judgments.tsv -> qrels/test.tsv
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from ragindex.errors import InvalidInput
from ragindex.measure.evals.collections import (
    QRELS_HEADER,
    Collection,
    CollectionError,
    read_beir_corpus,
    read_beir_queries,
    write_lines_atomic,
)
from ragindex.measure.evals.runner import collapse_to_documents, ingest_collection

POOL_LEGS = ("bm25", "dense", "hybrid")
POOL_DEPTH = 20
POOL_HEADER = ("query-id", "corpus-id", *POOL_LEGS)
GRADES = (0, 1, 2)

Pool = dict[str, dict[str, dict[str, int]]]
"""qid -> doc_id -> {leg: 1-based rank} for the legs that ranked it within the depth."""


def _rows(path: Path, header: Sequence[str]) -> list[list[str]]:
    if not path.is_file():
        raise CollectionError(f"{path}: file not found")
    lines = path.read_text(encoding="utf-8").splitlines()
    if not lines or lines[0].split("\t") != list(header):
        raise CollectionError(f"{path}:1: expected the header {chr(9).join(header)!r}")
    rows = []
    for lineno, line in enumerate(lines[1:], start=2):
        fields = line.split("\t")
        if len(fields) != len(header):
            raise CollectionError(f"{path}:{lineno}: expected {len(header)} fields")
        rows.append(fields)
    return rows


def read_pool(path: Path) -> Pool:
    pool: Pool = {}
    for qid, doc_id, *ranks in _rows(path, POOL_HEADER):
        pool.setdefault(qid, {})[doc_id] = {
            leg: int(rank) for leg, rank in zip(POOL_LEGS, ranks, strict=True) if rank != "-"
        }
    return pool


def write_pool(path: Path, pool: Pool) -> None:
    lines = ["\t".join(POOL_HEADER)]
    for qid, docs in pool.items():
        for doc_id, ranks in docs.items():
            cells = [str(ranks[leg]) if leg in ranks else "-" for leg in POOL_LEGS]
            lines.append("\t".join([qid, doc_id, *cells]))
    write_lines_atomic(path, lines)


def read_judgments(path: Path) -> dict[str, dict[str, int]]:
    """Every judged (query, document) pair and its grade, zeros included."""
    judged: dict[str, dict[str, int]] = {}
    for qid, doc_id, score in _rows(path, QRELS_HEADER):
        if score not in {str(g) for g in GRADES}:
            raise CollectionError(f"{path}: grade {score!r} of {qid}/{doc_id} is not 0, 1 or 2")
        if doc_id in judged.get(qid, {}):
            raise CollectionError(f"{path}: {qid}/{doc_id} is judged twice")
        judged.setdefault(qid, {})[doc_id] = int(score)
    return judged


def write_qrels(directory: Path) -> int:
    """qrels/test.tsv from judgments.tsv: the pairs graded above zero; returns their count."""
    judged = read_judgments(directory / "judgments.tsv")
    lines = [
        f"{qid}\t{doc_id}\t{grade}"
        for qid, docs in judged.items()
        for doc_id, grade in docs.items()
        if grade > 0
    ]
    write_lines_atomic(directory / "qrels" / "test.tsv", ["\t".join(QRELS_HEADER), *lines])
    return len(lines)


def make_pool(directory: Path, depth: int = POOL_DEPTH, spec_path: Path | None = None) -> Pool:
    """Rank every query with each leg through the cached embedded index `ragindex eval` uses
    and keep each leg's top `depth` distinct documents."""
    from ragindex.app import EmbeddedIndex, load_spec
    from ragindex.measure.evals.cli import LEG_MODES, eval_data_dir

    if depth < 1:
        raise InvalidInput(f"depth must be >= 1, got {depth}")
    corpus = read_beir_corpus(directory / "corpus.jsonl")
    queries = read_beir_queries(directory / "queries.jsonl")
    collection = Collection(directory.resolve().name, corpus, queries, {})
    spec = load_spec(spec_path)
    index = EmbeddedIndex(eval_data_dir(collection, spec), spec)
    pool: Pool = {}
    try:
        ingest_collection(collection, index.upsert)
        for qid, query in queries.items():
            docs = pool.setdefault(qid, {})
            for leg in POOL_LEGS:
                mode, rerank = LEG_MODES[leg]
                hits = index.query.search("default", query.text, k=100, mode=mode, rerank=rerank)
                ranked, _ = collapse_to_documents(
                    ((h.chunk.chunk_id, h.chunk.doc_id) for h in hits.hits), corpus.__contains__
                )
                for rank, doc_id in enumerate(ranked[:depth], start=1):
                    docs.setdefault(doc_id, {})[leg] = rank
    finally:
        index.close()
    return pool


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--depth", type=int, default=POOL_DEPTH)
    parser.add_argument("--spec", type=Path)
    parser.add_argument("--qrels", action="store_true", help="write qrels/test.tsv only")
    args = parser.parse_args(argv)
    if args.qrels:
        print(f"wrote {write_qrels(args.directory)} judgments to qrels/test.tsv")
        return 0
    pool = make_pool(args.directory, args.depth, args.spec)
    write_pool(args.directory / "pool.tsv", pool)
    pairs = sum(len(docs) for docs in pool.values())
    print(f"pooled {pairs} (query, document) pairs for {len(pool)} queries")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
