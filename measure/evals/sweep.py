"""`python -m ragindex.measure.evals.sweep`: quality options measured with the tune / held-out
discipline.

Every option (BM25 field boosts, RM3, Rocchio, fusion weights and k) is a query-time setting,
so one ingested Cranfield index (`ragindex eval`'s cache for the base spec) serves them all:
each variant gets its own QueryEngine over the same embedder, the same dense shard replicas
(vectors and chunk text) and a read-only opening of the same BM25 view. Stages run in order,
and each stage keeps the variant with the best hybrid nDCG@10 on the TUNING half only (ties
keep the earlier variant, so the base wins a tie); the held-out half and the full set are
reported beside it, never used to choose. Per variant: nDCG@10 and recall@100 per leg and
split, and the in-process latency per query of each leg.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ragindex.app import EmbeddedIndex, load_spec, open_lexical
from ragindex.config import RagIndexSpec
from ragindex.measure.evals.cli import LEG_MODES, eval_data_dir, resolve_collection
from ragindex.measure.evals.collections import Collection
from ragindex.measure.evals.runner import evaluate, ingest_collection
from ragindex.measure.evals.split import SPLITS, split_queries
from ragindex.measure.output import read_json, write_json
from ragindex.router import QueryEngine

METRICS = ("ndcg@10", "recall@100")
ALL_LEGS = ("bm25", "dense", "hybrid")
Variant = tuple[str, dict[str, Any]]  # a label and the spec fields it changes (nested dict)


def _merge(base: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in change.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) else value
    return out


def with_change(spec: RagIndexSpec, change: dict[str, Any]) -> RagIndexSpec:
    return RagIndexSpec.model_validate(_merge(spec.model_dump(), change))


def stages() -> list[tuple[str, tuple[str, ...], list[Variant]]]:
    """The grid, stage by stage: a name, the legs a change there can move, the variants.
    Each stage starts from the previous stage's choice, which it keeps unless a variant
    beats it on the tuning half."""
    return [
        (
            "bm25 fields",
            ("bm25", "dense", "hybrid"),
            [(f"titleBoost={t}", {"lexical": {"title_boost": t}}) for t in (1.0, 0.0, 0.5, 2.0)],
        ),
        (
            "rm3",
            ("bm25", "hybrid"),
            [
                (
                    f"rm3 docs={d} terms={n} orig={w}",
                    {
                        "feedback": {
                            "rm3": {"enabled": True, "docs": d, "terms": n, "original_weight": w}
                        }
                    },
                )
                for d, n, w in ((10, 10, 0.5), (5, 10, 0.5), (10, 20, 0.5), (10, 10, 0.7))
            ],
        ),
        (
            "rocchio",
            ("dense", "hybrid"),
            [
                (
                    f"rocchio docs={d} beta={b}",
                    {"feedback": {"rocchio": {"enabled": True, "docs": d, "beta": b}}},
                )
                for d, b in ((3, 0.5), (3, 1.0))
            ],
        ),
        (
            "fusion",
            ("hybrid",),
            [
                (
                    f"rrfK={k} dense={dw} lexical={lw}",
                    {"fusion": {"rrf_k": k, "dense_weight": dw, "lexical_weight": lw}},
                )
                for k, dw, lw in (
                    (20, 1.0, 1.0),
                    (60, 1.0, 0.7),
                    (60, 0.7, 1.0),
                    (60, 1.0, 1.5),
                    (100, 1.0, 1.0),
                )
            ],
        ),
    ]


def variant_engine(index: EmbeddedIndex, spec: RagIndexSpec) -> QueryEngine:
    """A QueryEngine with `spec`'s query-time options over `index`'s views; its BM25 index is
    a read-only opening of the view's, with `spec`'s boosts and RM3 (the caller closes it)."""
    lexical = open_lexical(
        spec,
        index.side.directory,
        index.embedder.identity,
        namespace=index.side.namespace,
        name=index.side.name,
        read_only=True,
    )
    return QueryEngine(
        index.query.embedder,
        index.dense,
        lexical,
        index.dense,
        fusion=spec.fusion,
        lexical_spec=spec.lexical,
        rocchio=spec.feedback.rocchio,
    )


def measure(
    index: EmbeddedIndex, collection: Collection, spec: RagIndexSpec, legs: Sequence[str]
) -> dict[str, Any]:
    """Per leg: metric means per split and ms per query, for one query-time variant."""
    query = variant_engine(index, spec)
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
        query.lexical.close()
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
    index: EmbeddedIndex,
    collection: Collection,
    base: RagIndexSpec,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    chosen = base
    chosen_row = {"variant": "base", **measure(index, collection, base, ALL_LEGS)}
    results: list[dict[str, Any]] = []
    for stage, legs, variants in stages():
        best = (chosen_row["hybrid"]["tune"]["ndcg@10"], chosen, chosen_row)
        results.append({**chosen_row, "stage": stage, "variant": f"{chosen_row['variant']}"})
        for label, change in variants:
            spec = with_change(chosen, change)
            if spec == chosen:
                continue
            # Legs a stage cannot move keep the chosen spec's figures.
            row = {**chosen_row, "stage": stage, "variant": label}
            row |= measure(index, collection, spec, legs)
            results.append(row)
            nd = {leg: [row[leg][sp]["ndcg@10"] for sp in SPLITS] for leg in ALL_LEGS}
            log(
                f"{stage:12} {label:34} "
                + "  ".join(
                    f"{leg} " + "/".join(f"{v:.4f}" for v in vals) for leg, vals in nd.items()
                )
                + f"  ms {row['bm25']['ms_per_query']}/{row['dense']['ms_per_query']}"
                f"/{row['hybrid']['ms_per_query']}"
            )
            if row["hybrid"]["tune"]["ndcg@10"] > best[0]:
                best = (row["hybrid"]["tune"]["ndcg@10"], spec, row)
        _, chosen, chosen_row = best
        log(f"-> {stage}: {chosen_row['variant']}")
    return {
        "chosen": chosen.model_dump(mode="json", by_alias=True),
        "results": results,
        "split_seed_sizes": {
            s: len(q) for s, q in split_queries(collection.judged_queries()).items()
        },
    }


def added_latency(
    index: EmbeddedIndex, collection: Collection, base: RagIndexSpec, queries: int = 50
) -> dict[str, dict[str, Any]]:
    """Median in-process ms per query of each option against the base, interleaved query by
    query in one run (so box noise hits both alike): {option: {leg, base_ms, option_ms}}."""
    options: dict[str, tuple[str, dict[str, Any]]] = {
        "rm3 (docs=5, terms=10)": (
            "lexical",
            {"feedback": {"rm3": {"enabled": True, "docs": 5, "terms": 10}}},
        ),
        "rocchio (docs=3)": ("dense", {"feedback": {"rocchio": {"enabled": True, "docs": 3}}}),
        "weighted fusion": ("hybrid", {"fusion": {"dense_weight": 1.0, "lexical_weight": 0.7}}),
    }
    texts = [collection.queries[q].text for q in collection.judged_queries()[:queries]]

    out: dict[str, dict[str, Any]] = {}
    plain = variant_engine(index, base)
    for name, (mode, change) in options.items():
        variant = variant_engine(index, with_change(base, change))
        times: dict[str, list[float]] = {"base": [], "option": []}
        for text in texts:
            for key, query in (("base", plain), ("option", variant)):
                start = time.perf_counter()
                query.search("default", text, k=100, mode=mode)
                times[key].append((time.perf_counter() - start) * 1000)
        medians = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
        out[name] = {
            "mode": mode,
            "base_ms": round(medians["base"], 2),
            "option_ms": round(medians["option"], 2),
        }
        variant.lexical.close()
        print(name, out[name])
    return out


# The defaults sweep (`--defaults`): each setting changed alone from the base spec, on every
# collection. Index-time settings need their own ingested index; query-time ones reuse the
# index of their row. The previous defaults (before contextual chunks, the title only in the
# body and 256-token chunks) are a row of their own.
PREVIOUS_DEFAULTS = {"chunking": {"contextual": False, "max_tokens": 200}}
INDEX_VARIANTS: list[Variant] = [
    ("default", {}),
    ("contextual off", {"chunking": {"contextual": False}}),
    ("maxTokens=128", {"chunking": {"max_tokens": 128}}),
    ("maxTokens=200", {"chunking": {"max_tokens": 200}}),
    ("overlap=0.25", {"chunking": {"overlap": 0.25}}),
    ("all-mpnet-base-v2", {"embedder": {"model": "all-mpnet-base-v2"}}),
    ("contextual off, maxTokens=200", PREVIOUS_DEFAULTS),
]
QUERY_VARIANTS: dict[str, list[Variant]] = {
    "default": [
        ("titleBoost=1", {"lexical": {"title_boost": 1.0}}),
        ("rm3", {"feedback": {"rm3": {"enabled": True, "docs": 5, "terms": 10}}}),
    ],
    "contextual off, maxTokens=200": [
        ("previous defaults", {"lexical": {"title_boost": 1.0}}),
    ],
}
DEFAULTS_COLLECTIONS = ("cranfield", "gnu-manuals", "nodejs-api")
RULE_MAX_LOSS = 0.005  # a new default may cost no collection more held-out nDCG@10 than this


def defaults_rows(
    collection: Collection,
    base: RagIndexSpec,
    log: Callable[[str], None] = print,
    only: Sequence[str] = (),
) -> Iterator[dict[str, Any]]:
    """Every variant of INDEX_VARIANTS (those labelled in `only`, if given) and their
    QUERY_VARIANTS measured on one collection, one row at a time: per leg, metric means per
    split and ms per query (`measure`)."""
    for label, change in INDEX_VARIANTS:
        if only and label not in only:
            continue
        spec = with_change(base, change)
        index = EmbeddedIndex(eval_data_dir(collection, spec), spec)
        try:
            ingest_collection(collection, index.upsert)
            for name, query_change in [(label, {}), *QUERY_VARIANTS.get(label, [])]:
                row: dict[str, Any] = {"collection": collection.name, "variant": name}
                row |= measure(index, collection, with_change(spec, query_change), ALL_LEGS)
                log(
                    f"{collection.name:12} {name:28} hybrid nDCG@10 held-out"
                    f" {row['hybrid']['heldout']['ndcg@10']:.4f}"
                    f"  ms {row['hybrid']['ms_per_query']}"
                )
                yield row
        finally:
            index.close()


def defaults_summary(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per variant: hybrid held-out nDCG@10 and recall@100 per collection and their means,
    hybrid latency as a ratio to the default's on the same collection, and the rule's verdict
    (a default changes only if the mean rises and no collection loses more than
    RULE_MAX_LOSS). Only variants measured on every collection, and only once the default
    is measured on every collection, are summarized."""
    by = {(r["collection"], r["variant"]): r["hybrid"] for r in rows}
    collections = sorted({r["collection"] for r in rows})
    out = []
    for variant in dict.fromkeys(r["variant"] for r in rows):
        if any((name, v) not in by for name in collections for v in (variant, "default")):
            continue
        per: dict[str, dict[str, float]] = {}
        for name in collections:
            hybrid, default = by[(name, variant)], by[(name, "default")]
            per[name] = {
                "ndcg@10": round(hybrid["heldout"]["ndcg@10"], 4),
                "recall@100": round(hybrid["heldout"]["recall@100"], 4),
                "delta_ndcg@10": round(
                    hybrid["heldout"]["ndcg@10"] - default["heldout"]["ndcg@10"], 4
                ),
                "latency_ratio": round(hybrid["ms_per_query"] / default["ms_per_query"], 2),
            }
        mean_delta = sum(p["delta_ndcg@10"] for p in per.values()) / len(per)
        worst = min(p["delta_ndcg@10"] for p in per.values())
        out.append(
            {
                "variant": variant,
                "collections": per,
                "mean_ndcg@10": round(sum(p["ndcg@10"] for p in per.values()) / len(per), 4),
                "mean_recall@100": round(sum(p["recall@100"] for p in per.values()) / len(per), 4),
                "mean_delta_ndcg@10": round(mean_delta, 4),
                "passes_rule": variant != "default"
                and mean_delta > 0
                and worst >= -RULE_MAX_LOSS - 1e-9,
            }
        )
    return out


def summary_table(summary: Sequence[dict[str, Any]]) -> str:
    """The summary as a Markdown table: nDCG@10 / recall@100 (latency ratio) per collection."""
    if not summary:
        return "(nothing to summarize: no variant measured beside the default on every collection)"
    names = list(summary[0]["collections"])
    head = ["setting", *names, "mean", "rule"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for row in summary:
        cells = [
            f"{p['ndcg@10']:.3f} / {p['recall@100']:.3f} (x{p['latency_ratio']:.2f})"
            for p in row["collections"].values()
        ]
        mean = f"{row['mean_ndcg@10']:.3f} / {row['mean_recall@100']:.3f}"
        verdict = "" if row["variant"] == "default" else ("passes" if row["passes_rule"] else "no")
        lines.append("| " + " | ".join([row["variant"], *cells, mean, verdict]) + " |")
    return "\n".join(lines)


def defaults_sweep(
    names: Sequence[str],
    base: RagIndexSpec,
    out: Path,
    log: Callable[[str], None] = print,
    only: Sequence[str] = (),
) -> None:
    """The defaults sweep on every named collection, `out` rewritten after each row (a long
    sweep stopped early leaves what it measured)."""
    rows: list[dict[str, Any]] = []
    for name in names:
        for row in defaults_rows(resolve_collection(name), base, log, only):
            rows.append(row)
            summary = defaults_summary(rows)
            base_json = base.model_dump(mode="json", by_alias=True)
            write_json(out, {"base": base_json, "summary": summary, "rows": rows})
    log(summary_table(defaults_summary(rows)))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ragindex.measure.evals.sweep", description=__doc__
    )
    parser.add_argument("--spec", type=Path, help="base spec YAML (default: the default spec)")
    parser.add_argument("--json", type=Path, required=True, help="write every variant here")
    parser.add_argument(
        "--latency", action="store_true", help="only the interleaved added-latency comparison"
    )
    parser.add_argument(
        "--defaults",
        action="store_true",
        help="the defaults sweep: contextual chunks, chunk size and overlap, the title field, RM3"
        " and the mpnet embedder,"
        " each alone, on every collection of --collections",
    )
    parser.add_argument(
        "--collections",
        nargs="+",
        default=list(DEFAULTS_COLLECTIONS),
        help="collections of the defaults sweep (default: every bundled one and Cranfield)",
    )
    parser.add_argument(
        "--variants",
        nargs="+",
        default=[],
        choices=[label for label, _ in INDEX_VARIANTS],
        help="index variants of the defaults sweep to run, with their query-time variants"
        " (default: all; 'default' is needed once for the comparison)",
    )
    parser.add_argument(
        "--summarize",
        nargs="+",
        type=Path,
        metavar="JSON",
        help="summarize the rows of earlier --defaults runs (one per collection, say) together",
    )
    args = parser.parse_args(argv)
    if args.summarize:
        rows = [row for path in args.summarize for row in read_json(path)["rows"]]
        summary = defaults_summary(rows)
        print(summary_table(summary))
        write_json(args.json, {"summary": summary, "rows": rows})
        return 0
    base = load_spec(args.spec)
    if args.defaults:
        defaults_sweep(args.collections, base, args.json, only=args.variants)
        return 0
    collection = resolve_collection("cranfield")
    index = EmbeddedIndex(eval_data_dir(collection, base), base)
    try:
        ingest_collection(collection, index.upsert)
        out = (
            {"added_latency": added_latency(index, collection, base)}
            if args.latency
            else sweep(index, collection, base)
        )
    finally:
        index.close()
    write_json(args.json, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
