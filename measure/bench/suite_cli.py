"""`ragindex bench suite`: every benchmark in one run, its JSON, plots and summary.

Composition only: the runners live in ragindex.measure.bench.suite (dense curve, stage latency,
ingest, freshness, Elasticsearch kNN), ragindex.measure.bench.filtered (filtered recall),
ragindex.measure.bench.cli (BM25 on Elasticsearch vs tantivy) and ragindex.measure.bench.serve
(HTTP vs in-process). The Cranfield sections use `ragindex eval`'s cached index.
"""

from __future__ import annotations

import argparse
import functools
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ragindex.app import EmbeddedIndex
from ragindex.config import RagIndexSpec
from ragindex.errors import InvalidInput
from ragindex.measure.bench import suite as bs
from ragindex.measure.evals.cli import eval_data_dir, resolve_collection, run_eval
from ragindex.measure.evals.collections import Collection
from ragindex.measure.evals.runner import DEFAULT_TENANT
from ragindex.measure.output import read_json, write_json
from ragindex.measure.stats import missed_goals

REPO = Path(__file__).resolve().parents[2]
DOCS_DIR = REPO / "docs"
DEFAULT_SUITE_JSON = DOCS_DIR / "benchmarks.json"
SUITE_QUERIES = 200
INGEST_DOCS = 64


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
    from ragindex.measure.bench.cli import bm25_bench
    from ragindex.measure.servers.elasticsearch import ES_VERSION, running_elasticsearch

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
        from ragindex.measure.bench.filtered import run_filtered_bench

        return run_filtered_bench(vectors=n, queries=100)

    def peers() -> Any:
        es_n = min(n, int(getattr(args, "es_vectors", None) or 20_000))
        return _peers(collection, spec, *synthetic(), es_n)

    def serve() -> Any:
        from ragindex.measure.bench.serve import run_bench_serve
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
    from ragindex.measure.bench.cli import BM25_GOALS, FILTERED_RECALL_GOAL, filtered_missed_goals

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
        was = suite_sizes(recorded_argv(recorded))
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
    from ragindex.measure.bench.plots import render_plots, suite_summary

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


def recorded_argv(run: Mapping[str, Any]) -> list[str]:
    """The suite command line a JSON's `run` recorded (an older JSON, from before the command
    was recorded, still tells its --vectors and --threads)."""
    sizes = {"vectors": run.get("vectors"), "threads": run.get("threads")}
    return list(run.get("command") or suite_argv(argparse.Namespace(**sizes)))
