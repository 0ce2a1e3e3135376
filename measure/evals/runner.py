"""Run a collection's judged queries through an injected search and score every leg.

The store under test is injected (Haystack style): `search(tenant_id, query, k, mode)` returns
ranked `(chunk_id, doc_id)` pairs and `ingest(tenant_id, documents)` stores Documents, so this
module needs no server and the CLI is a thin wrapper around `ingest_collection` and `evaluate`.

Judgments are per document but the engine returns chunks, so chunk hits are collapsed to
documents: each document takes the position of its best (highest-ranked) chunk and its later
chunks are dropped, so ranks count distinct documents. A hit on a document that is not in the
query's tenant (or not in the collection) keeps its slot but is never credited, and is counted
as a foreign hit: a non-zero count means the store leaked across tenants.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragindex.errors import InvalidInput
from ragindex.measure.evals.collections import Collection
from ragindex.measure.evals.metrics import STANDARD_METRICS, mean_scores, parse_metric, score_query
from ragindex.measure.stats import text_table
from ragindex.types import Document, validate_tenant

SearchFn = Callable[[str, str, int, str], Sequence[tuple[str, str]]]
IngestFn = Callable[[str, list[Document]], object]  # what it returns is not used

LEGS = ("bm25", "dense", "hybrid", "rerank")
DEFAULT_LEGS = ("bm25", "dense", "hybrid")
DEFAULT_TENANT = "default"


def collapse_to_documents(
    hits: Iterable[tuple[str, str]], allowed: Callable[[str], bool]
) -> tuple[list[str], int]:
    """Ranked distinct doc ids (each at its best chunk's position) and the count of foreign
    documents among them (those `allowed` rejects: another tenant's, or unknown)."""
    ranked: list[str] = []
    seen: set[str] = set()
    foreign = 0
    for _chunk_id, doc_id in hits:
        if doc_id in seen:
            continue
        seen.add(doc_id)
        ranked.append(doc_id)
        foreign += not allowed(doc_id)
    return ranked, foreign


@dataclass(frozen=True)
class QueryResult:
    qid: str
    tenant: str
    scores: dict[str, float]
    ranked: list[str]  # distinct doc ids, best chunk first, cut at k
    foreign_hits: int


@dataclass(frozen=True)
class LegReport:
    leg: str
    means: dict[str, float]
    per_query: list[QueryResult]

    @property
    def foreign_hits(self) -> int:
        return sum(r.foreign_hits for r in self.per_query)


@dataclass(frozen=True)
class EvalReport:
    collection: str
    k: int
    metrics: tuple[str, ...]
    legs: dict[str, LegReport]
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """`{"<leg>": {metric: mean, ..., "queries", "foreign_hits"}, ..., "notes": [...]}`."""
        out: dict[str, Any] = {
            leg: {**rep.means, "queries": len(rep.per_query), "foreign_hits": rep.foreign_hits}
            for leg, rep in self.legs.items()
        }
        out["notes"] = list(self.notes)
        return out

    def table(self) -> str:
        """A fixed-width table: one row per leg, one column per metric."""
        header = ["leg", *self.metrics, "queries"]
        rows = [
            [leg, *(f"{rep.means[m]:.4f}" for m in self.metrics), str(len(rep.per_query))]
            for leg, rep in self.legs.items()
        ]
        return "\n".join([f"{self.collection} (k={self.k})", text_table(header, rows), *self.notes])

    def write_per_query(self, path: str | os.PathLike[str]) -> Path:
        """One JSON line per (leg, query): its scores, foreign hits and top-10 documents."""
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".tmp")
        with tmp.open("w", encoding="utf-8") as fh:
            for leg, rep in self.legs.items():
                for r in rep.per_query:
                    row = {"leg": leg, "qid": r.qid, "tenant": r.tenant, **r.scores}
                    row |= {"foreign_hits": r.foreign_hits, "top10": r.ranked[:10]}
                    fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        os.replace(tmp, out)
        return out


def _check_request(legs: Sequence[str], k: int, metrics: Sequence[str]) -> None:
    if not legs:
        raise InvalidInput("legs is empty: name at least one of " + ", ".join(LEGS))
    unknown = [leg for leg in legs if leg not in LEGS]
    if unknown or len(set(legs)) != len(legs):
        raise InvalidInput(f"legs {list(legs)} must be distinct names from {list(LEGS)}")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise InvalidInput(f"k must be an integer >= 1, got {k!r}")
    deepest = max(parse_metric(m)[1] for m in metrics)
    if k < deepest:
        raise InvalidInput(f"k={k} is shallower than the deepest metric cutoff ({deepest})")


def evaluate(
    collection: Collection,
    search: SearchFn,
    legs: Sequence[str] = DEFAULT_LEGS,
    k: int = 100,
    metrics: Sequence[str] = STANDARD_METRICS,
    default_tenant: str = DEFAULT_TENANT,
) -> EvalReport:
    """Ask every judged query once per leg, as its tenant, for k chunks, and score the docs."""
    _check_request(legs, k, metrics)
    validate_tenant(default_tenant)
    judged = collection.judged_queries()
    if not judged:
        raise InvalidInput(f"collection {collection.name!r} has no query with a relevant judgment")

    def tenant_of(tenant: str | None) -> str:
        return tenant if tenant is not None else default_tenant

    reports: dict[str, LegReport] = {}
    for leg in legs:
        results: list[QueryResult] = []
        for qid in judged:
            query = collection.queries[qid]
            tenant = tenant_of(query.tenant)

            def allowed(doc_id: str, tenant: str = tenant) -> bool:
                doc = collection.corpus.get(doc_id)
                return doc is not None and tenant_of(doc.tenant) == tenant

            ranked, foreign = collapse_to_documents(search(tenant, query.text, k, leg), allowed)
            ranked = ranked[:k]
            # Judgments only name the query's own tenant's documents (Collection checks it).
            scores = score_query(ranked, collection.qrels[qid], metrics)
            results.append(QueryResult(qid, tenant, scores, ranked, foreign))
        reports[leg] = LegReport(leg, mean_scores(r.scores for r in results), results)

    notes = [
        f"{len(judged)} judged queries of {len(collection.queries)};"
        f" each leg asked for k={k} chunks per query",
        "chunk hits are mapped to their document, which keeps the rank of its best chunk"
        " (later chunks of the same document are dropped)",
    ]
    leaks = {leg: rep.foreign_hits for leg, rep in reports.items() if rep.foreign_hits}
    if leaks:
        notes.append(f"foreign hits (other tenants' or unknown documents, never credited): {leaks}")
    return EvalReport(collection.name, k, tuple(metrics), reports, notes)


@dataclass(frozen=True)
class IngestSummary:
    documents: int
    per_tenant: dict[str, int]
    skipped_empty: list[str]  # doc ids with no text: ragindex Documents need text


def ingest_collection(
    collection: Collection,
    ingest: IngestFn,
    default_tenant: str = DEFAULT_TENANT,
    batch_size: int = 256,
) -> IngestSummary:
    """Ingest every document with text as Document(source=<collection name>, doc_id=<id>),
    per tenant, in batches; documents with empty text cannot be Documents and are skipped."""
    validate_tenant(default_tenant)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidInput(f"batch_size must be an integer >= 1, got {batch_size!r}")
    by_tenant: dict[str, list[Document]] = {}
    skipped: list[str] = []
    for doc in collection.corpus.values():
        if not doc.text.strip():
            skipped.append(doc.doc_id)
            continue
        tenant = doc.tenant if doc.tenant is not None else default_tenant
        by_tenant.setdefault(tenant, []).append(doc.to_document(collection.name))
    for tenant, docs in by_tenant.items():
        for start in range(0, len(docs), batch_size):
            ingest(tenant, docs[start : start + batch_size])
    per_tenant = {tenant: len(docs) for tenant, docs in by_tenant.items()}
    return IngestSummary(sum(per_tenant.values()), per_tenant, skipped)
