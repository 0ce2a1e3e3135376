"""Grow a golden set: add one judged query to a BEIR-layout folder.

Everything is checked before anything is written (the corpus, the existing queries and
judgments, the new query and grades), so a rejected call leaves the folder as it was. The
queries file is replaced before the judgments file: were the second write to fail, the folder
would still load (one query without judgments), never judgments naming a missing query.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from ragindex.measure.evals.collections import (
    QRELS_HEADER,
    CollectionError,
    Query,
    beir_paths,
    judgment_problem,
    qrels_lines,
    query_line,
    read_beir_corpus,
    read_beir_qrels,
    read_beir_queries,
    write_lines_atomic,
)
from ragindex.types import validate_tenant

GOLDEN_PREFIX = "golden-"


def next_golden_id(existing: Mapping[str, object]) -> str:
    """The first `golden-<n>` (n >= 1) not already used as a query id."""
    n = len(existing) + 1
    while f"{GOLDEN_PREFIX}{n}" in existing:
        n += 1
    return f"{GOLDEN_PREFIX}{n}"


def add_judged_query(
    directory: str | os.PathLike[str],
    text: str,
    relevant: Mapping[str, int],
    tenant: str | None = None,
    split: str = "test",
) -> str:
    """Append a query and its graded judgments (doc id -> integer grade); return its new id.

    queries.jsonl and qrels/<split>.tsv are created when absent; corpus.jsonl must exist.
    At least one grade must be > 0, or the query would never count in an evaluation.
    """
    corpus_path, queries_path, qrels_path = beir_paths(directory, split)
    if not isinstance(text, str) or not text.strip():
        raise CollectionError("the query text is empty")
    query_text = " ".join(text.split())  # one line in queries.jsonl, compared as words
    if tenant is not None:
        validate_tenant(tenant)
    if not isinstance(relevant, Mapping) or not relevant:
        raise CollectionError("relevant is empty: judge at least one document")
    corpus = read_beir_corpus(corpus_path)
    queries = read_beir_queries(queries_path, allow_missing=True)
    read_beir_qrels(qrels_path, queries, corpus, allow_missing=True)

    for existing in queries.values():
        if existing.tenant == tenant and " ".join(existing.text.split()) == query_text:
            raise CollectionError(f"the same query is already in the set as {existing.qid!r}")
    qid = next_golden_id(queries)
    candidate = {**queries, qid: Query(qid, query_text, tenant)}
    for doc_id, grade in relevant.items():
        problem = judgment_problem(qid, doc_id, grade, candidate, corpus)
        if problem:
            raise CollectionError(f"{qrels_path}: {problem}")
    if not any(grade > 0 for grade in relevant.values()):
        raise CollectionError("no grade is > 0: a query needs at least one relevant document")

    old_queries = queries_path.read_text("utf-8").splitlines() if queries_path.exists() else []
    old_qrels = (
        qrels_path.read_text("utf-8").splitlines()
        if qrels_path.exists()
        else ["\t".join(QRELS_HEADER)]
    )
    write_lines_atomic(queries_path, [*old_queries, query_line(candidate[qid])])
    write_lines_atomic(qrels_path, [*old_qrels, *qrels_lines({qid: dict(relevant)})])
    return qid
