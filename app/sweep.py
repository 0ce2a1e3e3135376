"""`python -m ragindex.app.sweep`: quality options measured with the tune / held-out discipline.

Every option (BM25 field boosts, RM3, Rocchio, fusion weights and k) is a query-time setting,
so one ingested Cranfield index (`ragindex eval`'s cache for the base spec) serves them all:
each variant gets its own QueryEngine over the same embedder, dense shards, chunk store and
a read-only view of the BM25 index. Stages run in order, and each stage keeps the variant
with the best hybrid nDCG@10 on the TUNING half only (ties keep the earlier variant, so the
base wins a tie); the held-out half and the full set are reported beside it, never used to
choose. Per variant: nDCG@10 and recall@100 per leg and split, and the in-process latency
per query of each leg.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ragindex.app.engine import LocalEngine, load_spec, open_lexical
from ragindex.app.eval_cli import LEG_MODES, eval_data_dir, resolve_collection
from ragindex.config import RagIndexSpec
from ragindex.evals.collections import Collection
from ragindex.evals.runner import evaluate, ingest_collection
from ragindex.evals.split import SPLITS, split_queries
from ragindex.router.query import QueryEngine

METRICS = ("ndcg@10", "recall@100")
Variant = tuple[str, dict[str, Any]]  # a label and the spec fields it changes (nested dict)


def _merge(base: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in change.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) else value
    return out


def with_change(spec: RagIndexSpec, change: dict[str, Any]) -> RagIndexSpec:
    return RagIndexSpec.model_validate(_merge(spec.model_dump(), change))


def stages() -> list[tuple[str, list[Variant]]]:
    """The grid, stage by stage; each stage starts from the previous stage's choice."""
    return [
        (
            "bm25 fields",
            [
                (f"titleBoost={t}", {"lexical": {"title_boost": t}})
                for t in (1.0, 0.0, 0.5, 2.0, 3.0)
            ],
        ),
        (
            "rm3",
            [("rm3 off", {})]
            + [
                (
                    f"rm3 docs={d} terms={n} orig={w}",
                    {
                        "feedback": {
                            "rm3": {"enabled": True, "docs": d, "terms": n, "original_weight": w}
                        }
                    },
                )
                for d in (5, 10)
                for n in (10, 20)
                for w in (0.5, 0.7)
            ],
        ),
        (
            "rocchio",
            [("rocchio off", {})]
            + [
                (
                    f"rocchio docs={d} beta={b}",
                    {"feedback": {"rocchio": {"enabled": True, "docs": d, "beta": b}}},
                )
                for d in (3, 5)
                for b in (0.3, 0.6)
            ],
        ),
        (
            "fusion",
            [
                (
                    f"rrfK={k} dense={dw} lexical={lw}",
                    {"fusion": {"rrf_k": k, "dense_weight": dw, "lexical_weight": lw}},
                )
                for k in (60, 20, 100)
                for dw, lw in ((1.0, 1.0), (1.0, 0.7), (1.0, 1.5), (0.7, 1.0))
            ],
        ),
    ]


def measure(
    engine: LocalEngine, collection: Collection, spec: RagIndexSpec, legs: Sequence[str]
) -> dict[str, Any]:
    """Per leg: metric means per split and ms per query, for one query-time variant."""
    lexical = open_lexical(spec, engine.data_dir, engine.embedder.identity, read_only=True)
    query = QueryEngine(
        engine.embedder,
        engine.dense,
        lexical,
        engine.store,
        fusion=spec.fusion,
        lexical_spec=spec.lexical,
        rocchio=spec.feedback.rocchio,
    )
    spent: dict[str, float] = {}

    def search(tenant: str, text: str, k: int, leg: str) -> list[tuple[str, str]]:
        mode, _ = LEG_MODES[leg]
        start = time.perf_counter()
        hits = query.search(tenant, text, k=k, mode=mode, rerank=False).hits
        spent[leg] = spent.get(leg, 0.0) + (time.perf_counter() - start) * 1000
        return [(h.chunk.chunk_id, h.chunk.doc_id) for h in hits]

    try:
        report = evaluate(collection, search, legs=legs, k=100)
    finally:
        lexical.close()
    halves = split_queries(collection.judged_queries())
    out: dict[str, Any] = {}
    for leg, rep in report.legs.items():
        by_qid = {r.qid: r.scores for r in rep.per_query}
        out[leg] = {
            split: {
                m: sum(by_qid[q][m] for q in halves[split]) / len(halves[split]) for m in METRICS
            }
            for split in SPLITS
        }
        out[leg]["ms_per_query"] = round(spent[leg] / len(rep.per_query), 2)
    return out


def sweep(
    engine: LocalEngine,
    collection: Collection,
    base: RagIndexSpec,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    chosen = base
    results: list[dict[str, Any]] = []
    for stage, variants in stages():
        best: tuple[float, RagIndexSpec, str] | None = None
        for label, change in variants:
            spec = with_change(chosen, change)
            legs = ("bm25", "dense", "hybrid")
            row = {"stage": stage, "variant": label, **measure(engine, collection, spec, legs)}
            results.append(row)
            tune = row["hybrid"]["tune"]["ndcg@10"]
            nd = {leg: [row[leg][sp]["ndcg@10"] for sp in SPLITS] for leg in legs}
            log(
                f"{stage:12} {label:38} "
                + "  ".join(
                    f"{leg} " + "/".join(f"{v:.4f}" for v in vals) for leg, vals in nd.items()
                )
            )
            if best is None or tune > best[0]:
                best = (tune, spec, label)
        assert best is not None
        chosen = best[1]
        log(f"-> {stage}: {best[2]}")
    return {
        "chosen": chosen.model_dump(mode="json", by_alias=True),
        "results": results,
        "split_seed_sizes": {
            s: len(q) for s, q in split_queries(collection.judged_queries()).items()
        },
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ragindex.app.sweep", description=__doc__)
    parser.add_argument("--spec", type=Path, help="base spec YAML (default: the default spec)")
    parser.add_argument("--json", type=Path, required=True, help="write every variant here")
    args = parser.parse_args(argv)
    base = load_spec(args.spec)
    collection = resolve_collection("cranfield")
    engine = LocalEngine.open(eval_data_dir(collection, base), base)
    try:
        ingest_collection(collection, lambda tenant, docs: engine.ingest.upsert(tenant, docs))
        out = sweep(engine, collection, base)
    finally:
        engine.close()
    args.json.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
