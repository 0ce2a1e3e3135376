"""`ragindex gate [--update-baseline]`: the release gate against `baseline.json`.

The gate replays Cranfield quality per leg, the dense leg rebuilt in HNSW, and each query-path
stage's latency as a ratio to its own floor; then the quality per leg of every other gated
collection (each bundled one by default, each with its own tolerance); and compares with the
baseline (`ragindex.measure.gate.compare`). Every collection is served from `ragindex eval`'s
cached index (the embedded data plane: the log, the ingest worker, the views `ragindex serve`
searches), so a warm gate re-embeds nothing. Latency ratios are measured on the main collection
only: they describe the query path, not the data.
"""

from __future__ import annotations

import argparse
import re
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ragindex.app import EmbeddedIndex
from ragindex.config import RagIndexSpec
from ragindex.errors import InvalidInput
from ragindex.lexical import BODY_FIELD, TITLE_FIELD
from ragindex.measure.bench import suite as bs
from ragindex.measure.evals.bundled import bundled_collections
from ragindex.measure.evals.cli import (
    eval_data_dir,
    index_code_fingerprint,
    resolve_collection,
    run_eval,
)
from ragindex.measure.evals.collections import Collection
from ragindex.measure.evals.runner import DEFAULT_TENANT
from ragindex.measure.gate.compare import (
    Tolerances,
    check_measurement,
    compare,
    gate_table,
    quality_drop_for,
)
from ragindex.measure.output import read_json, write_json
from ragindex.protocols import Vectors
from ragindex.router import QueryEngine
from ragindex.shards import LogShardReplica, ReplicaDenseIndex

DEFAULT_BASELINE = Path(__file__).parent / "baseline.json"
GATED_METRICS = ("ndcg@10", "recall@100")
GATE_REPEATS = 2


# --------------------------------------------------------------------------- gate


def gate_measure(
    collection: Collection,
    spec: RagIndexSpec,
    data_dir: Path,
    legs: Sequence[str] | None = None,
    repeats: int | None = None,
    others: Sequence[Collection] = (),
) -> dict[str, Any]:
    """Quality per leg on the collection (nDCG@10, recall@100), the dense leg again with every
    tenant in HNSW at the spec's efSearch, the graph alone (`dense_hnsw`, with recall@10
    against exact), and
    each query-path stage's latency as a ratio to its own floor, measured in this run; then
    the quality per leg of each of `others` (from its own cached index) with its tolerance.
    `legs` limits the legs reported (a leg left out is a disabled leg, which the gate fails)."""
    repeats = GATE_REPEATS if repeats is None else repeats
    bs.set_threads(1)
    started = time.perf_counter()
    index, payload, _ = run_eval(collection, spec, data_dir)
    try:
        quality = leg_quality(payload, legs)
        with tempfile.TemporaryDirectory(prefix="ragindex-gate-hnsw-") as tmp:
            hnsw_dense = hnsw_replay(index, Path(tmp))
            hnsw = bs.hnsw_leg(collection, index.query, engine_over(index.query, hnsw_dense))
        tenants = {q.tenant or DEFAULT_TENANT for q in collection.queries.values()}
        hnsw |= {
            "kinds": sorted({kind for t in tenants for kind in hnsw_dense.kinds(t)}),
            "ef_search": spec.dense.hnsw.ef_search,
        }
        quality["dense_hnsw"] = {
            "ndcg@10": round(hnsw["ndcg@10"], 4),
            "recall@10_vs_exact": hnsw["recall@10_vs_exact"],
        }
        texts = [collection.queries[q].text for q in collection.judged_queries()]
        stages = bs.stage_ratios(
            index.query,
            DEFAULT_TENANT,
            texts,
            stage_floors(index, index.dense.live_vectors(DEFAULT_TENANT)),
            repeats=repeats,
        )
    finally:
        index.close()
    collections = {}
    for other in others:
        other_index, other_payload, _ = run_eval(other, spec, eval_data_dir(other, spec))
        other_index.close()
        collections[other.name] = {
            "quality": leg_quality(other_payload, legs),
            "quality_drop": quality_drop_for(len(other.judged_queries())),
            "documents": other_payload["documents"],
            "queries": len(other.judged_queries()),
        }
    return {
        "quality": quality,
        "latency_ratios": {f"{s}_over_floor_p50": r["ratio"] for s, r in stages.items()},
        "collections": collections,
        "details": {"stages": stages, "dense_hnsw": hnsw},
        "settings": {
            "collection": collection.name,
            "documents": payload["documents"],
            "queries": len(texts),
            "repeats": repeats,
            "spec": spec.model_dump(mode="json", by_alias=True),
            "index_code": index_code_fingerprint(),
        },
        "seconds": round(time.perf_counter() - started, 1),
        "run": bs.environment(),
    }


def leg_quality(payload: dict[str, Any], legs: Sequence[str] | None) -> dict[str, dict[str, Any]]:
    """The gated metrics of each leg an eval measured (only `legs`, when given)."""
    measured = [leg for leg in ("bm25", "dense", "hybrid", "rerank") if leg in payload]
    unknown = set(legs or ()) - set(measured)
    if unknown:
        raise InvalidInput(f"legs {sorted(unknown)} are not measured; choose from {measured}")
    return {
        leg: {m: round(payload[leg][m], 4) for m in GATED_METRICS}
        for leg in measured
        if legs is None or leg in legs
    }


def hnsw_replay(index: EmbeddedIndex, root: Path) -> ReplicaDenseIndex:
    """The index's dense view replayed again from `chunks.<generation>` into `root`, with
    every tenant in the spec's index type (exact_threshold 0) at its settings, searched in
    the graph alone: the exact search of a partition's newest vectors (`recentExact`) would
    cover every vector of a collection this small."""
    assert index.side.log is not None
    dense = index.spec.dense
    graph_alone = dense.hnsw.model_copy(update={"recent_exact": 0})
    replicas = [
        LogShardReplica(
            index.side.log,
            index.side.topics.chunks,
            shard,
            root / f"shard-{shard:03d}",
            index.embedder.identity,
            graph_alone,
            exact_threshold=0,
            index=dense.index,
        )
        for shard in range(dense.shards)
    ]
    for replica in replicas:
        replica.catch_up()
    return ReplicaDenseIndex(replicas, index.embedder.identity)


def engine_over(query: QueryEngine, dense: ReplicaDenseIndex) -> QueryEngine:
    """`query` with another dense index (chunks still fetched from `query`'s)."""
    return QueryEngine(
        query.embedder, dense, query.lexical, query.chunks, query.fusion, query.lexical_spec
    )


def embed_floor(embedder: Any) -> Callable[[str], Any]:
    """One query through the model's own library: sentence-transformers' encode (torch
    backends), or the tokenizer and the ONNX Runtime session alone (ONNX backends)."""
    model = getattr(embedder, "model", None)
    if model is not None:
        return lambda q: model.encode([q], normalize_embeddings=True)
    session = getattr(embedder, "session", None)
    tokenizer = getattr(embedder, "tokenizer", None)
    if session is None or tokenizer is None:
        raise InvalidInput(
            "the gate's embed floor needs an embedder with a `model` (torch) or a `session`"
            " and `tokenizer` (ONNX) to encode"
        )
    names = {i.name for i in session.get_inputs()}

    def run(query: str) -> Any:
        encoding = tokenizer.encode(query)
        ids = np.array([encoding.ids], dtype=np.int64)
        feeds = {
            "input_ids": ids,
            "attention_mask": np.array([encoding.attention_mask], dtype=np.int64),
            "token_type_ids": np.zeros_like(ids),
        }
        return session.run(None, {k: v for k, v in feeds.items() if k in names})[0]

    return run


def stage_floors(index: EmbeddedIndex, vectors: Vectors) -> dict[str, bs.StageFloor]:
    """Per stage, the same work done by the library alone, outside ragindex's code: the model's
    own encode, one FAISS flat index over the tenant's vectors, a raw tantivy query with the
    tenant clause, a plain dict lookup of the returned chunks, and a textbook RRF. A slower
    stage of ragindex raises its ratio; its floor stays where it was."""
    import faiss
    import tantivy

    embed = embed_floor(index.embedder)
    depth = max(index.spec.fusion.candidates, 10)
    flat = faiss.IndexFlatIP(vectors.shape[1])
    flat.add(vectors)
    tantivy_index = tantivy.Index.open(str(index.side.directory / "lexical"))
    schema = tantivy_index.schema
    tenant_clause = tantivy.Query.term_query(schema, "tenant_id", DEFAULT_TENANT)
    texts = {cid: c for r in index.dense.replicas for cid, c in r.texts[DEFAULT_TENANT].items()}
    left = [f"c{i}" for i in range(depth)]
    right = [f"c{i}" for i in range(depth // 2, depth + depth // 2)]

    def lexical(query: str, _v: Any, _r: Any) -> list[str]:
        terms = [
            (tantivy.Occur.Should, tantivy.Query.term_query(schema, field, t))
            for t in re.findall(r"[a-z0-9]+", query.lower())
            for field in (TITLE_FIELD, BODY_FIELD)
        ]
        full = tantivy.Query.boolean_query(
            [
                (tantivy.Occur.Must, tenant_clause),
                (tantivy.Occur.Must, tantivy.Query.boolean_query(terms)),
            ]
        )
        searcher = tantivy_index.searcher()
        hits = searcher.search(full, limit=depth, count=False).hits
        return [searcher.doc(address)["chunk_id"][0] for _, address in hits]

    def fusion(_q: str, _v: Any, _r: Any) -> list[str]:
        scores: dict[str, float] = {}
        for ranked in (left, right):
            for rank, cid in enumerate(ranked, start=1):
                scores[cid] = scores.get(cid, 0.0) + 1.0 / (60 + rank)
        return sorted(scores, key=lambda c: (-scores[c], c))

    def fetch(_q: str, _v: Any, result: Any) -> list[Any]:
        return [texts.get(h.chunk.chunk_id) for h in result.hits]

    return {
        "embed": lambda q, _v, _r: embed(q),
        "dense": lambda _q, v, _r: flat.search(v, depth),
        "lexical": lexical,
        "fusion": fusion,
        "fetch": fetch,
    }


def _gate_inputs(args: argparse.Namespace) -> tuple[Collection, RagIndexSpec, Path]:
    from ragindex.app import load_spec

    spec = load_spec(getattr(args, "spec", None))
    collection = resolve_collection(getattr(args, "collection", None) or "cranfield")
    data_dir = getattr(args, "data_dir", None) or eval_data_dir(collection, spec)
    return collection, spec, data_dir


def other_collections(names: Sequence[str], main: Collection) -> list[Collection]:
    """The other gated collections by name, the main one left out wherever it is named."""
    others = [resolve_collection(name) for name in dict.fromkeys(names)]
    return [c for c in others if c.name != main.name]


def gate_command(args: argparse.Namespace) -> int:
    """Replay the gate's measurements and compare with the baseline: 0 passes, 1 fails."""
    if getattr(args, "update_baseline", False):
        return gate_update_command(args)
    baseline_path = Path(getattr(args, "baseline", None) or DEFAULT_BASELINE)
    baseline = read_json(baseline_path)
    check_measurement(baseline, f"baseline {baseline_path}")
    settings = baseline.get("settings", {})
    collection, spec, data_dir = _gate_inputs(args)
    current = gate_measure(
        collection,
        spec,
        data_dir,
        legs=getattr(args, "legs", None),
        repeats=int(settings.get("repeats", GATE_REPEATS)),
        # the collections the baseline gates: a new one joins with --update-baseline
        others=other_collections(list(baseline.get("collections", {})), collection),
    )
    if getattr(args, "json", None):
        write_json(args.json, current)
    violations = compare(baseline, current, Tolerances())
    print(gate_table(baseline, current))
    print(f"measured in {current['seconds']} s")
    if violations:
        print(f"GATE FAILED against {baseline_path}:")
        for v in violations:
            print(f"  - {v.message()}")
        return 1
    print(f"gate passed against {baseline_path}")
    return 0


def gate_update_command(args: argparse.Namespace) -> int:
    """Measure and rewrite the baseline (explicit, so the change shows in review); it gates
    the other collections of `--also` (default: every bundled one)."""
    baseline_path = Path(getattr(args, "baseline", None) or DEFAULT_BASELINE)
    collection, spec, data_dir = _gate_inputs(args)
    also = getattr(args, "also", None)
    current = gate_measure(
        collection,
        spec,
        data_dir,
        legs=getattr(args, "legs", None),
        others=other_collections(bundled_collections() if also is None else also, collection),
    )
    if baseline_path.exists():
        old = read_json(baseline_path)
        print(gate_table(old, current))
    write_json(baseline_path, current)
    return 0
