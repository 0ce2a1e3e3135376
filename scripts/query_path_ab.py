"""A/B of the local Router's query path in-process, variants interleaved query by query.

    python scripts/query_path_ab.py load N DATA_DIR        # N synthetic chunks into the log
    python scripts/query_path_ab.py ab   DATA_DIR [QUERIES] # time the variants

The corpus, spec and queries are `ragindex bench serve`'s (synthetic text, clustered passage
vectors, 2 shards, unique 5-word queries embedded by the real model). `ab` opens one
LocalQuerySide over DATA_DIR (its replica directory is kept under DATA_DIR, so only the
first run replays the log into HNSW) and builds, over the same views, engines that differ in
one thing each: the BM25 leg beside embed + dense (`overlap`), the dense shards searched at
once (`shards`), both (`both`, what LocalQuerySide ships), against `sequential`. The order of
the variants rotates from query to query, so the box's load hits them alike; the figures to
trust are each variant's p50 as a ratio to `sequential`'s in the same run.
"""

from __future__ import annotations

import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from ragindex.app import APP_NAME
from ragindex.app.serve.data_plane import DEFAULT_NAMESPACE
from ragindex.app.serve.query_side import LEG_THREADS, LocalQuerySide
from ragindex.config import RagIndexSpec
from ragindex.measure.bench.serve import BENCH_SPEC
from ragindex.measure.bench.serve_corpus import (
    TENANT,
    SyntheticPassages,
    load_corpus,
    unique_queries,
)
from ragindex.measure.stats import percentile
from ragindex.models import SerializedEmbedder, load_embedder
from ragindex.router import QueryEngine, engine_ms
from ragindex.shards import ReplicaDenseIndex

WARMUP = 20


def main(argv: list[str]) -> None:
    spec = RagIndexSpec.model_validate(BENCH_SPEC)
    if argv[0] == "load":
        real = load_embedder(spec.embedder)
        start = time.perf_counter()
        load_corpus(
            Path(argv[2]), spec, SyntheticPassages(real), int(argv[1]), np.random.default_rng(1)
        )
        print(f"load_s {time.perf_counter() - start:.1f}")
        return
    data = Path(argv[1])
    count = int(argv[2]) if len(argv) > 2 else 300
    side = LocalQuerySide(spec, data, APP_NAME, DEFAULT_NAMESPACE, data / "replicas" / "ab")
    side.load_models()
    start = time.perf_counter()
    if not side.try_open():
        raise SystemExit(f"no chunks topic in {data}: run `load` first")
    print(f"views open in {time.perf_counter() - start:.1f} s", flush=True)
    assert side.engine is not None and side.dense is not None
    shipped = side.engine
    uncached = SerializedEmbedder(load_embedder(spec.embedder))  # every variant embeds each query
    pool = ThreadPoolExecutor(LEG_THREADS, thread_name_prefix="ab-legs")
    one_by_one = ReplicaDenseIndex(side.dense.replicas, side.dense.identity)
    at_once = ReplicaDenseIndex(side.dense.replicas, side.dense.identity, pool)

    def engine(dense: ReplicaDenseIndex, overlap: bool) -> QueryEngine:
        return QueryEngine(
            uncached,
            dense,
            shipped.lexical,
            dense,
            fusion=shipped.fusion,
            lexical_spec=shipped.lexical_spec,
            leg_executor=pool if overlap else None,
        )

    variants = {
        "sequential": engine(one_by_one, overlap=False),
        "overlap": engine(one_by_one, overlap=True),
        "shards": engine(at_once, overlap=False),
        "both": engine(at_once, overlap=True),
    }
    rng = np.random.default_rng(11)
    taken: set[str] = set()
    for q in unique_queries(rng, WARMUP, taken):
        for e in variants.values():
            e.search(TENANT, q, 10, "hybrid")
    wall: dict[str, list[float]] = {v: [] for v in variants}
    stages: dict[str, dict[str, list[float]]] = {v: {} for v in variants}
    names = list(variants)
    for n, q in enumerate(unique_queries(rng, count, taken)):
        # each query once per variant, in a rotating order (the embedder has no cache)
        order = names[n % len(names) :] + names[: n % len(names)]
        for v in order:
            start = time.perf_counter()
            result = variants[v].search(TENANT, q, 10, "hybrid")
            wall[v].append((time.perf_counter() - start) * 1000)
            result.timings_ms["engine"] = engine_ms(result.timings_ms)
            for stage, ms in result.timings_ms.items():
                stages[v].setdefault(stage, []).append(ms)
    base = statistics.median(wall["sequential"])
    print(f"{count} queries per variant, {spec.dense.shards} shards")
    for v in names:
        p50 = statistics.median(wall[v])
        per_stage = ", ".join(f"{s} {statistics.median(ms):.2f}" for s, ms in stages[v].items())
        print(
            f"{v:10s} p50 {p50:6.2f} ms  p99 {percentile(wall[v], 99):6.2f} ms"
            f"  ratio {p50 / base:.3f}  stages p50: {per_stage}"
        )
    pool.shutdown()
    side.close()


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in ("load", "ab"):
        raise SystemExit(__doc__)
    main(sys.argv[1:])
