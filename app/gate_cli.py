"""`ragindex bench suite`, `ragindex gate [--update-baseline]`, `ragindex docs`.

Composition only: the runners live in ragindex.evals.bench_suite (dense curve, stage latency,
ingest, freshness, Elasticsearch kNN), ragindex.evals.bench_filtered (filtered recall),
ragindex.app.bench_cli (BM25 on Elasticsearch vs tantivy) and ragindex.app.bench_serve (HTTP
vs in-process); the gate's decision is ragindex.evals.gate.compare. Cranfield is served from
`ragindex eval`'s cached index (the embedded data plane: the log, the ingest worker, the views
`ragindex serve` searches), so a warm gate re-embeds nothing.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

import ragindex.evals
from ragindex.app.embedded import EmbeddedIndex
from ragindex.app.eval_cli import (
    eval_data_dir,
    index_code_fingerprint,
    resolve_collection,
    run_eval,
)
from ragindex.app.output import write_json
from ragindex.config import RagIndexSpec
from ragindex.errors import InvalidInput
from ragindex.evals import bench_suite as bs
from ragindex.evals.collections import Collection
from ragindex.evals.gate import Tolerances, check_measurement, compare, gate_table
from ragindex.evals.runner import DEFAULT_TENANT
from ragindex.lexical.documents import BODY_FIELD, TITLE_FIELD
from ragindex.measure import markdown_table, missed_goals
from ragindex.protocols import Vectors
from ragindex.router.query import QueryEngine
from ragindex.shards.log_replica import LogShardReplica
from ragindex.shards.replica_set import ReplicaDenseIndex

DEFAULT_BASELINE = Path(ragindex.evals.__file__).parent / "baseline.json"
REPO = Path(__file__).resolve().parents[1]
DOCS_DIR = REPO / "docs"
DEFAULT_SUITE_JSON = DOCS_DIR / "benchmarks.json"
GATED_METRICS = ("ndcg@10", "recall@100")
GATE_REPEATS = 2
SUITE_QUERIES = 200
INGEST_DOCS = 64


# --------------------------------------------------------------------------- gate


def gate_measure(
    collection: Collection,
    spec: RagIndexSpec,
    data_dir: Path,
    legs: Sequence[str] | None = None,
    repeats: int | None = None,
) -> dict[str, Any]:
    """Quality per leg on the collection (nDCG@10, recall@100), the dense leg again with every
    tenant in HNSW at the spec's efSearch (`dense_hnsw`, with recall@10 against exact), and
    each query-path stage's latency as a ratio to its own floor, measured in this run. `legs`
    limits the legs reported (a leg left out is a disabled leg, which the gate fails)."""
    repeats = GATE_REPEATS if repeats is None else repeats
    bs.set_threads(1)
    started = time.perf_counter()
    index, payload, _ = run_eval(collection, spec, data_dir)
    try:
        measured = [leg for leg in ("bm25", "dense", "hybrid", "rerank") if leg in payload]
        unknown = set(legs or ()) - set(measured)
        if unknown:
            raise InvalidInput(f"legs {sorted(unknown)} are not measured; choose from {measured}")
        quality: dict[str, dict[str, Any]] = {
            leg: {m: round(payload[leg][m], 4) for m in GATED_METRICS}
            for leg in measured
            if legs is None or leg in legs
        }
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
    return {
        "quality": quality,
        "latency_ratios": {f"{s}_over_floor_p50": r["ratio"] for s, r in stages.items()},
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


def hnsw_replay(index: EmbeddedIndex, root: Path) -> ReplicaDenseIndex:
    """The index's dense view replayed again from `chunks.<generation>` into `root`, with
    every tenant in HNSW (exact_threshold 0) at the spec's HNSW settings."""
    assert index.side.log is not None
    dense = index.spec.dense
    replicas = [
        LogShardReplica(
            index.side.log,
            index.side.topics.chunks,
            shard,
            root / f"shard-{shard:03d}",
            index.embedder.identity,
            dense.hnsw,
            exact_threshold=0,
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


def read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise InvalidInput(f"{path} does not exist") from None
    except json.JSONDecodeError as err:
        raise InvalidInput(f"{path} is not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise InvalidInput(f"{path} must hold a JSON object")
    return data


def _gate_inputs(args: argparse.Namespace) -> tuple[Collection, RagIndexSpec, Path]:
    from ragindex.app.engine import load_spec

    spec = load_spec(getattr(args, "spec", None))
    collection = resolve_collection(getattr(args, "collection", None) or "cranfield")
    data_dir = getattr(args, "data_dir", None) or eval_data_dir(collection, spec)
    return collection, spec, data_dir


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
    """Measure and rewrite the baseline (explicit, so the change shows in review)."""
    baseline_path = Path(getattr(args, "baseline", None) or DEFAULT_BASELINE)
    collection, spec, data_dir = _gate_inputs(args)
    current = gate_measure(collection, spec, data_dir, legs=getattr(args, "legs", None))
    if baseline_path.exists():
        old = read_json(baseline_path)
        print(gate_table(old, current))
    write_json(baseline_path, current)
    return 0


# --------------------------------------------------------------------------- suite


def _section(out: dict[str, Any], name: str, run: Callable[[], Any]) -> None:
    """Run one benchmark; a failure is recorded in the JSON instead of losing the others."""
    print(f"[suite] {name} ...", file=sys.stderr, flush=True)
    started = time.perf_counter()
    try:
        out[name] = run()
    except Exception as err:  # a benchmark that fails must not hide the others' numbers
        traceback.print_exc()
        out[name] = {"error": f"{type(err).__name__}: {err}"}
    print(f"[suite] {name} done in {time.perf_counter() - started:.0f} s", file=sys.stderr)


def _query_path(collection: Collection, spec: RagIndexSpec) -> dict[str, Any]:
    """Stage latency on Cranfield (cached eval index), each dense shard alone, then ingest
    throughput and freshness into a fresh index with the same embedder."""
    data_dir = eval_data_dir(collection, spec)
    index, _, _ = run_eval(collection, spec, data_dir)
    try:
        identity = index.embedder.identity
        shard_search = {
            f"shard-{i:03d}": (lambda v, k, r=r: r.search(v, k, DEFAULT_TENANT, identity))
            for i, r in enumerate(index.dense.replicas)
        }
        texts = [collection.queries[q].text for q in collection.judged_queries()]
        stages = bs.stage_latency(index.query, DEFAULT_TENANT, texts, shard_search)
        stages["chunks"] = index.dense.count(DEFAULT_TENANT)
        docs = [d.to_document(collection.name) for d in collection.corpus.values() if d.text]
        with tempfile.TemporaryDirectory(prefix="ragindex-suite-ingest-") as tmp:
            fresh = EmbeddedIndex(Path(tmp), spec, embedder=index.embedder)
            try:
                ingest = bs.ingest_throughput(fresh.upsert, "ingest", docs[:INGEST_DOCS])
                freshness = bs.freshness(fresh.upsert, fresh.query, "ingest")
            finally:
                fresh.close()
    finally:
        index.close()
    return {"stages": stages, "ingest": ingest, "freshness": freshness}


def _peers(
    collection: Collection, spec: RagIndexSpec, vectors: Any, queries: Any, es_vectors: int
) -> dict[str, Any]:
    """Elasticsearch alone (BM25 via H's benchmark; dense_vector kNN on the same synthetic
    vectors as ragindex's shards at the same size) in one server run."""
    from ragindex.app.bench_cli import bm25_bench
    from ragindex.lexical.es_server import ES_VERSION, running_elasticsearch

    out: dict[str, Any] = {"elasticsearch_version": ES_VERSION}
    sub = vectors[:es_vectors]
    with running_elasticsearch() as server:
        _section(
            out,
            "bm25",
            lambda: bm25_bench(collection, eval_data_dir(collection, spec), server.url),
        )
        _section(
            out, "es_knn", lambda: bs.es_knn_sweep(server.url, sub, queries, hnsw=spec.dense.hnsw)
        )
    _section(out, "ragindex_knn", lambda: bs.ef_sweep(sub, queries, spec.dense))
    return out


def peer_ratios(suite: Mapping[str, Any]) -> dict[str, Any]:
    """Ratios between like things, each side measured in one run on the same corpus and
    queries: Elasticsearch over HTTP / tantivy in-process (BM25, and hybrid with either as
    the lexical leg), ragindex over HTTP / the same engine in-process, and ragindex's
    lexical-only search over HTTP / Elasticsearch BM25 over HTTP (`bench serve`'s peer).
    Ratios between runs on different corpora or of different kinds (HTTP against in-process
    FAISS) are not made."""
    out: dict[str, Any] = {}
    bm25 = suite.get("peers", {}).get("bm25", {})
    if "bm25" in bm25:
        out["es_bm25_over_tantivy_p50"] = bm25["elasticsearch_over_tantivy"]["bm25_p50"]
        out["hybrid_on_es_over_inprocess_p50"] = bm25["elasticsearch_over_tantivy"]["hybrid_p50"]
    serve = suite.get("serve", {})
    if "ratio_p50" in serve:
        out["http_over_inprocess_p50"] = serve["ratio_p50"]
    if "lexical_http_over_es_http_p50" in serve:  # both through HTTP, same chunks and queries
        out["ragindex_lexical_http_over_es_bm25_http_p50"] = serve["lexical_http_over_es_http_p50"]
    return out


SECTIONS = ("dense_curve", "filtered", "query_path", "peers", "serve")
_SKIPPED_BY = {"es": "peers", "serve": "serve"}


def suite_sections(args: argparse.Namespace) -> dict[str, Callable[[], Any]]:
    """The suite's sections in run order, each a runner of its part of the JSON."""
    n = int(getattr(args, "vectors", None) or 100_000)
    spec = RagIndexSpec()
    collection = resolve_collection("cranfield")
    synthetic = functools.cache(lambda: bs.synthetic_vectors(n, SUITE_QUERIES))

    def filtered() -> Any:
        from ragindex.evals.bench_filtered import run_filtered_bench

        return run_filtered_bench(vectors=n, queries=100)

    def peers() -> Any:
        es_n = min(n, int(getattr(args, "es_vectors", None) or 20_000))
        return _peers(collection, spec, *synthetic(), es_n)

    def serve() -> Any:
        from ragindex.app.bench_serve import run_bench_serve
        from ragindex.netutil import free_port

        return run_bench_serve(int(getattr(args, "serve_chunks", None) or n), None, free_port())

    return {
        "dense_curve": lambda: bs.ef_sweep(*synthetic(), spec.dense),
        "filtered": filtered,
        "query_path": lambda: _query_path(collection, spec),
        "peers": peers,
        "serve": serve,
    }


def suite_missed_goals(suite: Mapping[str, Any]) -> list[str]:
    """The goals `ragindex bench suite --check` holds, over every section that has numbers:
    the filtered benchmark's recall, BM25 nDCG@10 agreement of Elasticsearch and tantivy, and
    the serving goals of `bench serve`."""
    from ragindex.app.bench_cli import BM25_GOALS, FILTERED_RECALL_GOAL, filtered_missed_goals

    missed = [
        f"filtered {m}"
        for m in filtered_missed_goals(suite.get("filtered", {}), FILTERED_RECALL_GOAL)
    ]
    bm25 = suite.get("peers", {}).get("bm25", {})
    if "bm25" in bm25:
        missed += [f"peers.bm25 {m}" for m in missed_goals(bm25, BM25_GOALS)]
    missed += [f"serve {m}" for m in suite.get("serve", {}).get("missed_goals", [])]
    return missed


def bench_suite_command(args: argparse.Namespace) -> int:
    """Every benchmark in one run: JSON, plots and a summary table. With `--only SECTION`
    (repeatable), only those sections run again, with the same options as the JSON's run, and
    replace theirs in it (the box may be too busy for the whole suite at once)."""
    threads = int(getattr(args, "threads", None) or 1)
    bs.set_threads(threads)
    only = list(getattr(args, "only", None) or ())
    skipped = {_SKIPPED_BY[s] for s in getattr(args, "skip", None) or ()}
    json_path = Path(getattr(args, "json", None) or DEFAULT_SUITE_JSON)
    started = time.perf_counter()
    command = suite_argv(args)
    if only:
        suite = read_json(json_path)
        recorded = suite.get("run", {})
        was = suite_sizes(
            recorded.get("command") or suite_argv(argparse.Namespace(**_sizes(recorded)))
        )
        now = suite_sizes(command)
        if was != now:
            raise InvalidInput(
                f"{json_path} was measured with {was}; rerun sections with the same options"
                f" (asked: {now}) or run the whole suite"
            )
        run_names = [name for name in SECTIONS if name in only]
    else:
        n = int(getattr(args, "vectors", None) or 100_000)
        suite = {"run": {**bs.environment(), "threads": threads, "vectors": n, "command": command}}
        run_names = [name for name in SECTIONS if name not in skipped]
    runners = suite_sections(args)
    for name in run_names:
        _section(suite, name, runners[name])
    suite["ratios"] = peer_ratios(suite)
    seconds = round(time.perf_counter() - started, 1)
    if only:
        rerun = {"sections": run_names, "seconds": seconds, "command": command}
        suite["run"]["reruns"] = [*suite["run"].get("reruns", []), rerun]
    else:
        suite["run"]["seconds"] = seconds
    write_json(json_path, suite)
    plots = Path(getattr(args, "plots", None) or DOCS_DIR / "img")
    for path in render_plots(suite, plots):
        print(f"wrote {path}", file=sys.stderr)
    print(suite_summary(suite))
    failed = [k for k, v in suite.items() if isinstance(v, dict) and "error" in v]
    failed += [f"peers.{k}" for k, v in suite.get("peers", {}).items() if "error" in v]
    missed = suite_missed_goals(suite)
    for line in missed:
        print(f"missed goal: {line}")
    if failed:
        print(f"SUITE FAILED: sections {failed} raised (see the JSON's 'error' entries)")
        return 1
    return 1 if getattr(args, "check", False) and missed else 0


def suite_sizes(argv: Sequence[str]) -> dict[str, int]:
    """What sizes the numbers of a suite command line: --vectors, --es-vectors, --serve-chunks
    and --threads, with their defaults filled in."""
    given = dict(zip(argv[3::2], argv[4::2], strict=False))
    vectors = int(given.get("--vectors", 100_000))
    return {
        "vectors": vectors,
        "es_vectors": int(given.get("--es-vectors", 20_000)),
        "serve_chunks": int(given.get("--serve-chunks", vectors)),
        "threads": int(given.get("--threads", 1)),
    }


def suite_argv(args: argparse.Namespace) -> list[str]:
    """The `ragindex bench suite` command line that reproduces this run (for the docs)."""
    argv = ["ragindex", "bench", "suite"]
    for flag, value in (
        ("--json", getattr(args, "json", None)),
        ("--plots", getattr(args, "plots", None)),
        ("--vectors", getattr(args, "vectors", None)),
        ("--es-vectors", getattr(args, "es_vectors", None)),
        ("--serve-chunks", getattr(args, "serve_chunks", None)),
        ("--threads", getattr(args, "threads", None)),
    ):
        if value is not None:
            argv += [flag, str(value)]
    for skipped in getattr(args, "skip", None) or ():
        argv += ["--skip", skipped]
    for section in getattr(args, "only", None) or ():
        argv += ["--only", section]
    return argv


# --------------------------------------------------------------------------- plots, docs


def render_plots(suite: Mapping[str, Any], out_dir: Path) -> list[Path]:
    """PNG plots of a suite result (matplotlib, Agg): one per benchmark that has numbers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    def save(fig: Any, name: str) -> None:
        path = out_dir / name
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)

    curves = []
    dense = suite.get("dense_curve", {})
    if "points" in dense:
        curves.append((f"ragindex HNSW, {dense['vectors']:,} vectors", dense, "ef_search"))
    peers = suite.get("peers", {})
    for key, label, knob in (
        ("ragindex_knn", "ragindex HNSW", "ef_search"),
        ("es_knn", "Elasticsearch kNN", "num_candidates"),
    ):
        if "points" in peers.get(key, {}):
            curves.append((f"{label}, {peers[key]['vectors']:,} vectors", peers[key], knob))
    if curves:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for label, data, knob in curves:
            xs = [p["p50_ms"] for p in data["points"]]
            ys = [p["recall@10"] for p in data["points"]]
            ax.plot(xs, ys, marker="o", label=label)
            for p, x, y in zip(data["points"], xs, ys, strict=True):
                ax.annotate(
                    str(p[knob]), (x, y), fontsize=7, xytext=(3, -9), textcoords="offset points"
                )
        if "exact" in dense:
            ax.scatter(
                [dense["exact"]["p50_ms"]], [1.0], marker="x", color="k", label="exact (flat)"
            )
        ax.set_xscale("log")
        ax.set_xlabel("p50 latency per query, ms (log)")
        ax.set_ylabel("recall@10 vs exact search")
        ax.set_title("Dense recall vs latency (labels: efSearch / num_candidates)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        save(fig, "dense_recall_latency.png")

    filtered = {
        k: v
        for k, v in suite.get("filtered", {}).items()
        if isinstance(v, dict) and "recall@10" in v
    }
    if filtered:
        fig, ax = plt.subplots(figsize=(7, 4))
        shares = list(filtered)
        ax.bar(range(len(shares)), [filtered[s]["recall@10"] for s in shares], color="tab:blue")
        ax.set_xticks(
            range(len(shares)), [f"{float(s):.1%}\n{filtered[s]['search']}" for s in shares]
        )
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("recall@10 vs exact (bars)")
        ax.set_xlabel("tenant share of the collection (search kind)")
        ax2 = ax.twinx()
        ax2.plot(range(len(shares)), [filtered[s]["p50_ms"] for s in shares], "o-", color="tab:red")
        ax2.set_ylabel("p50 ms (line)", color="tab:red")
        ax.set_title("Tenant-filtered dense search by tenant share")
        save(fig, "filtered_recall.png")

    stages = suite.get("query_path", {}).get("stages", {})
    timed = {k: v["p50_ms"] for k, v in stages.items() if isinstance(v, dict) and "p50_ms" in v}
    if timed:
        fig, ax = plt.subplots(figsize=(7, 4))
        names = list(timed)
        ax.barh(names, [timed[k] for k in names], color="tab:green")
        ax.invert_yaxis()
        ax.set_xlabel("p50 ms")
        ax.set_title(
            f"Query path stages, hybrid k=10, Cranfield ({stages.get('chunks', '?')} chunks)"
        )
        save(fig, "query_stages.png")

    bars = peer_bars(suite)
    if bars:
        fig, ax = plt.subplots(figsize=(7, 4))
        names = list(bars)
        ax.barh(names, [bars[k] for k in names], color="tab:purple")
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_xlabel("p50 ms (log)")
        ax.set_title("Peers side by side (p50 per query)")
        save(fig, "peers.png")
    return written


def peer_bars(suite: Mapping[str, Any]) -> dict[str, float]:
    """p50 latencies of each peer, by a readable label."""
    out: dict[str, float] = {}
    bm25 = suite.get("peers", {}).get("bm25", {})
    if "bm25" in bm25:
        for leg in ("bm25", "hybrid"):
            for backend, label in (("tantivy", "in-process"), ("elasticsearch", "Elasticsearch")):
                name = (
                    f"{leg} top-{bm25['top_k']}"
                    if leg == "bm25"
                    else f"hybrid k={bm25['hybrid_k']}"
                )
                out[f"{name}, {label}"] = bm25[leg][backend]["p50_ms"]
    serve = suite.get("serve", {})
    if "http_p50_ms" in serve:
        out[f"hybrid, in-process ({serve['chunks']:,} chunks)"] = serve["inproc_p50_ms"]
        out[f"hybrid, ragindex HTTP ({serve['chunks']:,} chunks)"] = serve["http_p50_ms"]
    return out


def suite_summary(suite: Mapping[str, Any]) -> str:
    """The headline numbers of a suite result as plain text lines."""
    lines = []
    dense = suite.get("dense_curve", {})
    if "points" in dense:
        pts = ", ".join(
            f"ef {p['ef_search']}: {p['recall@10']:.3f} @ {p['p50_ms']:.3f} ms"
            for p in dense["points"]
        )
        lines.append(
            f"dense curve ({dense['vectors']:,} vectors): {pts};"
            f" exact {dense['exact']['p50_ms']:.3f} ms"
        )
    for name, value in suite.get("ratios", {}).items():
        lines.append(f"ratio {name}: {value}")
    errors = [k for k, v in suite.items() if isinstance(v, dict) and "error" in v]
    if errors:
        lines.append(f"failed sections: {errors}")
    return "\n".join(lines)


def docs_command(args: argparse.Namespace) -> int:
    """Regenerate docs/benchmarks.md (and its plots) from the last suite JSON."""
    suite_path = Path(getattr(args, "suite", None) or DEFAULT_SUITE_JSON)
    suite = read_json(suite_path)
    out = Path(getattr(args, "out", None) or DOCS_DIR / "benchmarks.md")
    img = out.parent / "img"
    render_plots(suite, img)
    baseline = read_json(DEFAULT_BASELINE) if DEFAULT_BASELINE.exists() else None
    out.write_text(render_markdown(suite, baseline, suite_path, out.parent))
    print(f"wrote {out}", file=sys.stderr)
    return 0


def _sizes(run: Mapping[str, Any]) -> dict[str, Any]:
    """The suite options an older JSON (from before the command was recorded) still tells."""
    return {"vectors": run.get("vectors"), "threads": run.get("threads")}


def render_markdown(
    suite: Mapping[str, Any],
    baseline: Mapping[str, Any] | None,
    suite_path: Path,
    docs_dir: Path,
) -> str:
    """docs/benchmarks.md: what ran, on what, the curves and the ratios (generated)."""
    run = suite.get("run", {})
    rel = suite_path.resolve()
    with_docs = (
        rel.relative_to(docs_dir.resolve()) if rel.is_relative_to(docs_dir.resolve()) else rel
    )
    md = [
        "# Benchmarks",
        "",
        "Generated by `ragindex docs` from the last `ragindex bench suite` run"
        f" (`{with_docs}`); do not edit by hand. Regenerate with:",
        "",
        "```",
        " ".join(run.get("command") or suite_argv(argparse.Namespace(**_sizes(run)))),
        "ragindex docs"
        + (
            "" if suite_path.resolve() == DEFAULT_SUITE_JSON.resolve() else f" --suite {suite_path}"
        ),
        "```",
        "",
        f"Ran on {run.get('cores')} cores ({run.get('machine')}, Python {run.get('python')}),"
        f" {run.get('threads')} FAISS/torch thread(s),"
        f" OMP_NUM_THREADS={run.get('OMP_NUM_THREADS')},"
        f" {run.get('seconds')} s in all. Versions: "
        + ", ".join(f"{k} {v}" for k, v in run.get("versions", {}).items() if v)
        + ". The box is shared with other work: compare ratios, not absolute times.",
        "",
    ]
    for rerun in run.get("reruns", []):
        md += [
            f"Rerun alone since, with the same options, in {rerun['seconds']} s: "
            + ", ".join(rerun["sections"])
            + f" (`{' '.join(rerun['command'])}`).",
            "",
        ]
    dense = suite.get("dense_curve", {})
    if "points" in dense:
        md += [
            "## Dense recall vs latency (efSearch sweep)",
            "",
            f"{dense['vectors']:,} synthetic clustered unit vectors (dim {dense['dim']}, topics"
            " with subtopics and noise, like text embeddings), {shards} shards, HNSW forced"
            " (exact_threshold 0), M {m}, efConstruction {efc}; {q} fresh queries; recall@10"
            " against exact brute-force search on the same vectors; latency is one query fanned"
            " out to every shard and merged."
            " Build: {vps:,.0f} vectors/s (log append, then the shard replicas' replay:"
            " HNSW insert and snapshot).".format(
                shards=dense["shards"],
                m=dense["m"],
                efc=dense["ef_construction"],
                q=dense["queries"],
                vps=dense["build"]["vectors_per_s"],
            ),
            "",
            "![dense recall vs latency](img/dense_recall_latency.png)",
            "",
            *markdown_table(
                ["efSearch", "recall@10", "p50 ms", "p99 ms"],
                [
                    [p["ef_search"], p["recall@10"], p["p50_ms"], p["p99_ms"]]
                    for p in dense["points"]
                ]
                + [
                    [
                        "exact (flat)",
                        dense["exact"]["recall@10"],
                        dense["exact"]["p50_ms"],
                        dense["exact"]["p99_ms"],
                    ]
                ],
            ),
            "",
        ]
    filtered = {
        k: v
        for k, v in suite.get("filtered", {}).items()
        if isinstance(v, dict) and "recall@10" in v
    }
    if filtered:
        md += [
            "## Tenant-filtered recall by tenant share",
            "",
            f"{run.get('vectors', 0):,} vectors over tenants; each measured tenant holds the share"
            " shown; recall@10 against brute force over that tenant's own vectors.",
            "",
            "![filtered recall](img/filtered_recall.png)",
            "",
            *markdown_table(
                ["share", "vectors", "search", "recall@10", "p50 ms", "p99 ms"],
                [
                    [s, r["vectors"], r["search"], r["recall@10"], r["p50_ms"], r["p99_ms"]]
                    for s, r in filtered.items()
                ],
            ),
            "",
        ]
    qp = suite.get("query_path", {})
    stages = qp.get("stages", {})
    if stages:
        md += [
            "## Query path stages",
            "",
            f"Hybrid k=10 in-process on Cranfield ({stages.get('chunks')} chunks), every judged"
            " query; stages are the engine's own `timings_ms`; `shard-NNN` is each dense shard"
            " searched alone at the candidate depth. Rerank: "
            + (stages["rerank"] if isinstance(stages.get("rerank"), str) else "configured")
            + ".",
            "",
            "![query stages](img/query_stages.png)",
            "",
            *markdown_table(
                ["stage", "p50 ms", "p99 ms"],
                [[k, v["p50_ms"], v["p99_ms"]] for k, v in stages.items() if isinstance(v, dict)],
            ),
            "",
        ]
    if "ingest" in qp:
        ing, fr = qp["ingest"], qp["freshness"]
        md += [
            "## Ingest throughput and freshness (in-process)",
            "",
            f"- ingest: {ing['documents']} Cranfield documents in {ing['seconds']} s ="
            f" {ing['docs_per_s']} docs/s (chunk, MiniLM embed on CPU, both legs, store)",
            f"- freshness (upsert sent to found by both legs): p50 {fr['p50_s']} s,"
            f" p99 {fr['p99_s']} s over {fr['probes']} probes",
            "",
        ]
    peers = suite.get("peers", {})
    bars = peer_bars(suite)
    if peers or bars:
        md += ["## Peers side by side", ""]
        if bars:
            md += [
                "![peers](img/peers.png)",
                "",
                *markdown_table(["search", "p50 ms"], list(bars.items())),
                "",
            ]
        knn = peers.get("es_knn", {})
        if "points" in knn:
            md += [
                f"Elasticsearch {peers.get('elasticsearch_version')} dense_vector kNN"
                f" ({knn['index_options']}, one force-merged segment) on the first"
                f" {knn['vectors']:,} of the same vectors: load {knn['vectors_per_s']:,.0f}"
                f" vectors/s, force merge {knn['forcemerge_s']} s.",
                "",
                *markdown_table(
                    ["num_candidates", "recall@10", "p50 ms", "p99 ms"],
                    [
                        [p["num_candidates"], p["recall@10"], p["p50_ms"], p["p99_ms"]]
                        for p in knn["points"]
                    ],
                ),
                "",
            ]
        elif "error" in knn:
            md += [f"Elasticsearch dense_vector kNN did not run: `{knn['error']}`", ""]
    ratios = peer_ratios(suite)  # recomputed, so a JSON from an older run shows today's rules
    if ratios:
        md += [
            "## Ratios to the in-process floor",
            "",
            "Each side measured in this run on the same corpus and queries.",
            "",
            *markdown_table(["ratio", "value"], list(ratios.items())),
            "",
        ]
    errors = {k: v["error"] for k, v in suite.items() if isinstance(v, dict) and "error" in v}
    errors |= {
        f"peers.{k}": v["error"] for k, v in peers.items() if isinstance(v, dict) and "error" in v
    }
    if errors:
        md += [
            "## Sections that failed in this run",
            "",
            *(f"- {k}: `{v}`" for k, v in errors.items()),
            "",
        ]
    if baseline is not None:
        md += [
            "## Release gate baseline",
            "",
            "`ragindex gate` fails when nDCG@10 or recall@100 of any leg drops by more than"
            " 0.01; when the dense leg rebuilt in HNSW (exact_threshold 0, the spec's efSearch)"
            " loses more than 0.005 nDCG@10 to exact search; when a query-path stage's latency"
            " ratio to its own in-process floor more than doubles; or when the baseline"
            " was measured on another spec or corpus. Its cached index is keyed by the spec and"
            " a hash of the index-shaping code. Baseline: `evals/baseline.json` (rewritten only"
            " by `ragindex gate --update-baseline`).",
            "",
            *markdown_table(
                ["leg", *GATED_METRICS, "recall@10_vs_exact"],
                [
                    [leg, *(m.get(k, "") for k in (*GATED_METRICS, "recall@10_vs_exact"))]
                    for leg, m in baseline["quality"].items()
                ],
            ),
            "",
            *markdown_table(["latency ratio", "value"], list(baseline["latency_ratios"].items())),
            "",
        ]
    return "\n".join(md)
