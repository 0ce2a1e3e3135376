"""`ragindex eval`, `ragindex golden add`, `ragindex convert`: thin wrappers over the parts of
ragindex.measure.evals.

The evaluated index is the embedded runtime's data plane (`app.embedded.EmbeddedIndex`: the
file log, the ingest worker, the views `ragindex serve` searches), in a cache folder keyed by
collection, spec and the index-shaping code, so a second run embeds nothing (the worker's
manifest finds every chunk unchanged) and only replays the queries.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import time
from pathlib import Path
from typing import Any

from ragindex.app import EmbeddedIndex, cranfield_dir, load_spec
from ragindex.config import RagIndexSpec
from ragindex.errors import InvalidInput
from ragindex.hashing import content_hash
from ragindex.measure.evals.bundled import bundled_dir
from ragindex.measure.evals.collections import Collection, cranfield_to_beir, load_collection
from ragindex.measure.evals.golden import add_judged_query
from ragindex.measure.evals.runner import EvalReport, evaluate, ingest_collection
from ragindex.measure.evals.split import restrict
from ragindex.measure.output import write_json

LEG_MODES = {
    "bm25": ("lexical", False),
    "dense": ("dense", False),
    "hybrid": ("hybrid", False),
    "rerank": ("hybrid", True),
}


def cache_dir() -> Path:
    return Path(os.environ.get("RAGINDEX_CACHE", Path.home() / ".cache/ragindex"))


def collection_dir(name: str) -> Path:
    """Where `--collection NAME` reads from: 'cranfield' (the shared data folder), a bundled
    collection's name (evals.bundled), or any folder path (an existing path wins over a bundled
    name it shadows)."""
    if name == "cranfield":
        return cranfield_dir()
    path = Path(name)
    bundled = None if path.exists() else bundled_dir(name)
    return bundled or path


def resolve_collection(name: str) -> Collection:
    return load_collection(collection_dir(name))


# The code that decides what an index holds: a change to any of these makes a cached index
# stale, so the cache key carries a hash of their source as well as the spec.
INDEX_SHAPING_MODULES = (
    "ragindex.measure.evals.collections",
    "ragindex.app.loading",  # reads Cranfield's SMART files
    "ragindex.ingest.parsers",
    "ragindex.ingest.chunkers",
    "ragindex.ingest.pipeline",
    "ragindex.passages",
    "ragindex.ingest.worker",
    "ragindex.records",
    "ragindex.lexical.analysis",
    "ragindex.lexical.documents",
    "ragindex.lexical.tantivy_index",
    "ragindex.lexical.view",
    "ragindex.models.embedder",
    "ragindex.models.onnx_embedder",
    "ragindex.models.onnx_export",
    "ragindex.shards.log_replica",
    "ragindex.shards.partition",
)


def index_code_fingerprint() -> str:
    """A hash of the source of INDEX_SHAPING_MODULES (chunking, passage text, the ingest
    worker and its records, analyzers, the embedder wrapper, how the views store chunks)."""
    sources = []
    for name in INDEX_SHAPING_MODULES:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            raise InvalidInput(f"cannot find the source of {name} to fingerprint it")
        sources.append(f"{name}\n{Path(spec.origin).read_text(encoding='utf-8')}")
    return content_hash("\n".join(sources))[:16]


def eval_data_dir(collection: Collection, spec: RagIndexSpec) -> Path:
    """The cached index of a collection, keyed by the spec and the index-shaping code."""
    spec_json = json.dumps(spec.model_dump(mode="json"), sort_keys=True)
    key = content_hash(f"{spec_json}\n{index_code_fingerprint()}")[:10]
    return cache_dir() / "eval" / f"{collection.name}-{key}"


def run_eval(
    collection: Collection, spec: RagIndexSpec, data_dir: Path, split: str = "all"
) -> tuple[EmbeddedIndex, dict[str, Any], EvalReport]:
    """Ingest (incrementally) the whole corpus through the log and evaluate every configured
    leg on one split of the judged queries (evals.split); returns the index, JSON, report.
    Each leg's JSON also carries its mean in-process latency per query (`ms_per_query`)."""
    index = EmbeddedIndex(data_dir, spec)
    spent_ms: dict[str, float] = {}

    def search(tenant: str, query: str, k: int, leg: str) -> list[tuple[str, str]]:
        mode, rerank = LEG_MODES[leg]
        start = time.perf_counter()
        result = index.query.search(tenant, query, k=k, mode=mode, rerank=rerank)
        spent_ms[leg] = spent_ms.get(leg, 0.0) + (time.perf_counter() - start) * 1000
        return [(h.chunk.chunk_id, h.chunk.doc_id) for h in result.hits]

    summary = ingest_collection(collection, index.upsert)
    legs = ("bm25", "dense", "hybrid") + (("rerank",) if spec.reranker.enabled else ())
    scored = restrict(collection, split)
    report = evaluate(scored, search, legs=legs, k=100)
    payload = report.to_json()
    for leg, rep in report.legs.items():
        payload[leg]["ms_per_query"] = round(spent_ms[leg] / len(rep.per_query), 3)
    payload["split"] = split
    payload["collection"] = collection.name
    payload["documents"] = summary.documents
    payload["skipped_empty"] = summary.skipped_empty
    return index, payload, report


def eval_command(args: argparse.Namespace) -> int:
    spec = load_spec(args.spec)
    collection = resolve_collection(args.collection)
    data_dir = args.data_dir or eval_data_dir(collection, spec)
    index, payload, report = run_eval(collection, spec, data_dir, args.split)
    try:
        print(report.table())
        if args.per_query:
            report.write_per_query(args.per_query)
        if args.answers:
            from ragindex.measure.evals.answer_eval import answer_eval

            payload["answers"] = answer_eval(index, collection)
            print(json.dumps(payload["answers"], indent=2))
    finally:
        index.close()
    if args.json:
        write_json(args.json, payload)
    return 0


def golden_add_command(args: argparse.Namespace) -> int:
    relevant: dict[str, int] = {}
    for item in args.relevant:
        doc_id, _, grade = item.partition("=")
        try:
            relevant[doc_id] = int(grade) if grade else 1
        except ValueError:
            raise InvalidInput(f"--relevant {item!r}: the grade must be an integer") from None
    qid = add_judged_query(args.collection, args.query, relevant, tenant=args.tenant)
    print(f"added query {qid} with {len(relevant)} judgments to {args.collection}")
    return 0


def convert_command(args: argparse.Namespace) -> int:
    out = cranfield_to_beir(cranfield_dir(), args.out)
    print(f"wrote Cranfield in the BEIR layout to {out}")
    return 0
