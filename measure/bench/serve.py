"""`ragindex bench serve`: what the Serve layer costs over the in-process engine, and under load.

One run, one corpus (real passages as text, `RealText`; passage vectors generated around the
real embedder's vectors of `--anchors` real passages, `anchored_generator`, so that the HNSW
graph is searched as on real embeddings; 2 shards), measured while the app serves, each pair
interleaved query by query so both sides see the same background load on a noisy machine
(ratios and differences from one run are the figures to trust):
- hybrid search p50/p99 through HTTP vs the same queries through the in-process engine (the
  Router's own query path, opened read-only in this process), their difference, and the HTTP
  searches' stages (embed, dense, lexical, fusion, fetch), the dense stage beside its floor
  (`dense_floor`: the same vectors searched in each shard's own index, none of the replica's
  work around it), with what HTTP adds split into the
  replica's share (its Server-Timing) and the proxy and network's; `hop_table`: each call the
  Router made to another replica (the Server-Timing `hop.*` metrics: round trip, the replica's
  queue and service, the transport left over) and the path's segments summed against the
  measured total;
- the like-for-like peer: ragindex lexical-only search through HTTP vs Elasticsearch BM25
  through HTTP (a real local Elasticsearch holding the same chunks), same queries, with the
  in-process lexical leg as the floor (bench_peer);
- upsert-to-searchable through HTTP (both legs), the freshness bound's measurement, and
  ack-to-applied everywhere (`?wait=true`: every shard replica of the answering Router and its
  BM25 view), `freshness_all_replicas_p99_s`;
- `bootstrap_s`: a new replica (a fresh node-local directory, nothing of its own) from the log
  to serving: the newest shard snapshots the app's replica published to the log (FAISS + text,
  `snapshot_published_s` after the app was ready), the chunks after them, and a replay of every
  chunk into its BM25 view; `bootstrap_snapshot_offsets` says where each shard's replay began
  (0: no snapshot was loaded, every chunk replayed);
- ingest throughput through the API vs the raw embedder on the same passages, in
  INGEST_ROUNDS rounds that take turns (new documents each round, both sides warmed up first;
  `ingest_rounds`), the median round reported (`ingest_ratio`), with where its time went
  (`ingest_timeline`: each POST's answer, each worker batch's read, chunk, embed and commit,
  the wait's answer) and the CPU per document of every runtime process during it
  (`ingest_cpu_ms_per_doc`, beside `idle_cpu_ms_per_s`, the same processes at rest); in the
  cluster layout also the raw embedder at the replicas' niceness
  (`ingest_ratio_at_replica_niceness`: what of the gap is the cores the pool shares with the
  runtime's own background work, not the write path);
- `search_cpu_ms_per_query`: the CPU each server process (by role) spent per HTTP search
  while the pairs ran, and `net` (less the same processes' CPU at rest): on 2 cores, what
  bounds the latency of searches that overlap their legs;
- saturation throughput (closed-loop clients ramp; the queries/s at which p99 passes 40 ms)
  with 1 and then 2 Router replicas, and the RSS of the runtime's processes at rest (once its
  first snapshots are published) and under load (bench_load).
Every timed query is unique and the warm-up queries are a set of their own, so no cache can
flatter a figure; the query-embedding cache's hit path is reported on its own
(`query_cache_hits`: a small set of queries repeated). The corpus goes into the log's `docs`
topic and through the real IngestWorker with passage vectors drawn synthetically (embedding
100 k passages would take hours on 2 cores); queries use the real model.
"""

from __future__ import annotations

import os
import shutil
import socket
import statistics
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Literal

import httpx
import numpy as np
import psutil

from ragindex.config import RagIndexSpec
from ragindex.errors import InvalidInput
from ragindex.measure.bench.load import PeakMemory, served_memory, timed_phase
from ragindex.measure.bench.peer import fill_elasticsearch, time_lexical_peer
from ragindex.measure.bench.scale_vectors import as_dict
from ragindex.measure.bench.serve_corpus import (
    TENANT,
    RealText,
    SyntheticPassages,
    fresh_queries,
    load_corpus,
    unique_queries,
)
from ragindex.measure.bench.serve_ingest import (
    cpu_per_doc,
    ingest_rounds,
    ingest_texts,
    median_round,
    runtime_cpu_s,
)
from ragindex.measure.bench.serve_probes import (
    HttpSample,
    hop_table,
    measure_applied_everywhere,
    measure_freshness,
    ready_deadline_s,
    saturation,
    stage_breakdown,
    time_cache_hits,
    time_dense_floor,
    time_search_pair,
    wait_every_replica_ready,
    wait_ready,
    wait_snapshots_published,
)
from ragindex.measure.stats import Goals, missed_goals, percentile, text_table
from ragindex.protocols import Embedder
from ragindex.router import create_token
from ragindex.serve_config import KAFKA_BOOTSTRAP_ENV, Runtime

LogKind = Literal["file", "kafka"]
# What the serving path promises (`--check` exits 1 when a run misses one).
GOALS: Goals = {
    "http_p50_ms": ("<=", 10.0),
    "http_p99_ms": ("<=", 25.0),
    "http_minus_inproc_p50_ms": ("<=", 3.0),
    "saturation_qps_1_router": (">=", 150.0),
    "lexical_http_over_es_http_p50": ("<", 1.0),
    "freshness_p99_s": ("<=", 2.0),
    "ingest_ratio": (">=", 0.9),
    "freshness_all_replicas_p99_s": ("<=", 2.0),
    "bootstrap_s": ("<=", 20.0),
    "runtime_rss_at_rest_mb": ("<=", 2500.0),  # the embedded runtime's; MiB, as psutil's
}
# the cluster layout on one machine runs every shard replica in a process of its own, and
# pays a hop for every leg: its own latency goals, and its hop table must account for the time
CLUSTER_GOALS: Goals = {
    **{
        k: v
        for k, v in GOALS.items()
        if k not in ("runtime_rss_at_rest_mb", "saturation_qps_1_router")
    },
    "http_p50_ms": ("<=", 25.0),
    "http_p99_ms": ("<=", 60.0),
    "hop_path_gap": ("<=", 0.1),
}
# 2 shards, one Router replica; per-tenant admission raised so that the one benchmark tenant's
# closed-loop clients measure the server, not the 429s of the default limits (50/s, 8 at once).
BENCH_SPEC = {
    "dense": {"shards": 2, "replicas": 1},
    "limits": {"requestsPerS": 1_000_000, "burst": 1_000_000, "maxConcurrent": 1_000},
}
QUERIES = 200
WARMUP_QUERIES = 20
MIN_CHUNKS = 100
# Real passages the corpus vectors are generated around (`anchored_generator`; embedded once,
# then cached)
ANCHORS = 2_000
FRESHNESS_PROBES = 20
CACHE_QUERIES = 10  # the repeated set that shows the query-embedding cache's hit path
CACHE_ROUNDS = 5
PORT_RELEASE_S = 60.0
INGEST_ROUNDS = 3  # the API and the raw embedder take turns; the median round is reported
INGEST_WARMUP_DOCS = 8  # both sides embed this many documents of the same kind first
IDLE_SAMPLE_S = 5  # the runtime's CPU at rest is sampled this long before the ingest run


def free_dashboard_port() -> None:
    """A free dashboard port unless RAGINDEX_DASHBOARD_PORT names one: other servers on the
    machine may hold 8265."""
    from ragindex.netutil import free_port

    os.environ.setdefault("RAGINDEX_DASHBOARD_PORT", str(free_port()))


def wait_port_released(port: int, timeout_s: float) -> None:
    """Until this loopback port can be bound again (as a server binds it: SO_REUSEADDR)."""
    deadline = time.monotonic() + timeout_s
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("127.0.0.1", port))
                return
            except OSError as err:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"port {port} still taken {timeout_s:.0f} s after shutdown"
                    ) from err
        time.sleep(0.5)


def start_app(data_dir: Path, port: int, spec: RagIndexSpec, runtime: Runtime) -> None:
    """Run the app (Ray started on first use) with `spec`'s replicas: the Router's in the
    local runtime, each shard's in the cluster one. A change between one Router replica
    (direct ingress) and several (Serve's proxy) restarts Ray: the mode is fixed when Ray's
    processes start."""
    import ray

    from ragindex.app import deploy_app, start_local, stop_local

    direct = os.environ.get("RAY_SERVE_ENABLE_DIRECT_INGRESS") == "1"
    if ray.is_initialized() and direct and runtime == "local" and spec.dense.replicas > 1:
        stop_local()
        wait_port_released(port, PORT_RELEASE_S)  # the old Router's server may still hold it
    if not ray.is_initialized():
        start_local(data_dir, port, spec, runtime=runtime)
        return
    deploy_app(data_dir, spec, runtime)


def run_bench_serve(
    chunks: int,
    data_dir: Path | None,
    port: int,
    *,
    peer: bool = True,
    load: bool = True,
    ingest: bool = True,
    log: LogKind = "file",
    shard_replicas: int | None = None,
    replica_niceness: int | None = None,
    spec: RagIndexSpec | None = None,
    anchors: int = ANCHORS,
) -> dict[str, Any]:
    """Load, then measure while the app runs, each pair interleaved in one run so both sides
    share the machine's load: HTTP / in-process hybrid search (and its stages), ragindex
    lexical / Elasticsearch BM25 through HTTP (`peer`), freshness, API / raw embedder ingest,
    then saturation with 1 and 2 Router replicas and the runtime's memory (`load`).

    `log="kafka"` puts the data plane on a local Kafka broker started for the run; with
    `shard_replicas` the app runs the cluster layout (Router, Shard<i> x replicas, Lexical,
    embedder pools, Ingest as their own deployments) on this machine, and the saturation ramp
    runs once, on that layout, its replicas at Ray's niceness (15) unless `replica_niceness`
    says otherwise. `spec` (defaults when None) is what the app runs, less what the benchmark
    sets itself: two shards, its Router or shard replicas, and no request limits. The passages'
    vectors are generated around the spec's embedder's vectors of `anchors` real passages."""
    if chunks < MIN_CHUNKS:
        raise InvalidInput(f"--chunks must be at least {MIN_CHUNKS}")
    if shard_replicas is not None and shard_replicas < 1:
        raise InvalidInput(f"--shard-replicas must be at least 1, got {shard_replicas}")
    if replica_niceness is not None and (shard_replicas is None or not 0 <= replica_niceness <= 19):
        raise InvalidInput(
            "--replica-niceness is for the cluster layout (--shard-replicas) and must be in"
            f" 0..19, got {replica_niceness}"
        )
    if anchors < 2:
        raise InvalidInput(f"--anchors must be at least 2, got {anchors}")
    if data_dir is not None and data_dir.exists() and any(data_dir.iterdir()):
        raise InvalidInput(f"{data_dir} is not empty; the benchmark needs a fresh data dir")
    with ExitStack() as cleanup:
        if data_dir is None:  # a temporary one, removed afterwards (100 k chunks take ~1 GB)
            data_dir = Path(tempfile.mkdtemp(prefix="ragindex-bench-serve-"))
            cleanup.callback(shutil.rmtree, data_dir, True)
        if log == "kafka":
            cleanup.enter_context(kafka_data_plane())
        return _run(
            chunks,
            data_dir,
            port,
            peer=peer,
            load=load,
            ingest=ingest,
            shard_replicas=shard_replicas,
            replica_niceness=replica_niceness,
            spec=bench_spec(spec or RagIndexSpec(), shard_replicas),
            anchors=anchors,
        )


def bench_spec(base: RagIndexSpec, shard_replicas: int | None) -> RagIndexSpec:
    """`base` with the benchmark's own settings (BENCH_SPEC; `shard_replicas` replicas of each
    shard in the cluster layout)."""
    bench = RagIndexSpec.model_validate(BENCH_SPEC)
    dense = base.dense.model_copy(
        update={"shards": bench.dense.shards, "replicas": shard_replicas or bench.dense.replicas}
    )
    return base.model_copy(update={"dense": dense, "limits": bench.limits})


@contextmanager
def kafka_data_plane() -> Iterator[None]:
    """A local Kafka broker for the run; every process of it (this one, Ray's, which inherit
    the environment) finds it through the data plane's bootstrap variable."""
    from ragindex.measure.servers.kafka import start_kafka
    from ragindex.serve_config import KAFKA_BOOTSTRAP_ENV

    kafka = start_kafka(heap_mb=1024)
    os.environ[KAFKA_BOOTSTRAP_ENV] = kafka.bootstrap
    try:
        yield
    finally:
        os.environ.pop(KAFKA_BOOTSTRAP_ENV, None)
        kafka.stop()


def _run(
    chunks: int,
    data_dir: Path,
    port: int,
    *,
    peer: bool,
    load: bool,
    ingest: bool,
    shard_replicas: int | None,
    replica_niceness: int | None,
    spec: RagIndexSpec,
    anchors: int,
) -> dict[str, Any]:
    from ragindex.app import APP_NAME, stop_local
    from ragindex.app.serve_cli import CLUSTER_WORKER_NICENESS, apply_ray_environment

    runtime: Runtime = "local" if shard_replicas is None else "cluster"
    niceness = CLUSTER_WORKER_NICENESS if replica_niceness is None else replica_niceness
    apply_ray_environment(data_dir, runtime, niceness if runtime == "cluster" else None)
    free_dashboard_port()
    from ragindex.app.serve.data_plane import DEFAULT_NAMESPACE, open_log
    from ragindex.app.serve.query_side import LocalQuerySide
    from ragindex.measure.bench.anchors import anchored_generator
    from ragindex.measure.servers.elasticsearch import running_elasticsearch
    from ragindex.models import load_embedder
    from ragindex.topics import plane_topics

    rng = np.random.default_rng(1)
    real = load_embedder(spec.embedder)
    phases: dict[str, float] = {}
    report: dict[str, Any] = {
        "chunks": chunks,
        "shards": spec.dense.shards,
        "log": "kafka" if os.environ.get(KAFKA_BOOTSTRAP_ENV) else "file",
        "runtime": runtime,
        "replica_niceness": niceness if runtime == "cluster" else 0,
        "spec": spec.model_dump(mode="json", by_alias=True, exclude_defaults=True),
    }

    with timed_phase("load_s", phases):
        generator = anchored_generator(anchors, spec.embedder)
        report["corpus_vectors"] = as_dict(generator)
        text = RealText(chunks)
        load_corpus(data_dir, spec, SyntheticPassages(real, generator), chunks, text)
    taken: set[str] = set()
    warmup = unique_queries(text, rng, WARMUP_QUERIES, taken)
    queries = unique_queries(text, rng, QUERIES, taken)
    peer_warmup = unique_queries(text, rng, WARMUP_QUERIES, taken)
    peer_queries = unique_queries(text, rng, QUERIES, taken)
    repeated = unique_queries(text, rng, CACHE_QUERIES, taken)
    texts = [ingest_texts(rng, n) for n in range(INGEST_ROUNDS + 1)]  # the last: warm-up

    token = create_token(data_dir, TENANT)
    with ExitStack() as stack:
        es = stack.enter_context(running_elasticsearch()) if peer else None
        if es is not None:
            topics = plane_topics(spec, APP_NAME, DEFAULT_NAMESPACE)
            log_ = open_log(data_dir)
            stack.callback(log_.close)
            with timed_phase("es_load_s", phases):
                es_index = fill_elasticsearch(
                    es.url, log_, topics.chunks, topics.shards, spec, data_dir / "es-offsets.json"
                )
            stack.callback(es_index.close)
        # what runs before Ray (Elasticsearch, Kafka) is not the runtime
        memory = PeakMemory(exclude=[p.pid for p in psutil.Process().children()])
        stack.callback(stop_local)
        with timed_phase("app_ready_s", phases):
            start_app(data_dir, port, spec, runtime)
            url = f"http://127.0.0.1:{port}"
            client = stack.enter_context(
                httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60)
            )
            wait_ready(client, ready_deadline_s(chunks))
        side = LocalQuerySide(
            spec, data_dir, APP_NAME, DEFAULT_NAMESPACE, data_dir / "replicas" / "bench"
        )
        try:
            side.load_models()
            with timed_phase("snapshot_published_s", phases):
                wait_snapshots_published(data_dir, spec, real.identity, ready_deadline_s(chunks))
            # at rest once the first snapshots are out: the Router writes and publishes them
            # as it becomes ready, holding a copy of each shard's index meanwhile
            report["runtime_memory_at_rest"] = served_memory(memory.exclude)
            with timed_phase("bootstrap_s", phases):
                if not side.try_open():  # a new replica: published snapshots, then the tail
                    raise TimeoutError("the in-process replica found no topics")
            assert side.dense is not None
            report["bootstrap_snapshot_offsets"] = [r.start_offset for r in side.dense.replicas]
            # the client and the in-process side run in this process: not the server's CPU
            server_only = [*memory.exclude, os.getpid()]
            search_from, search_started = runtime_cpu_s(server_only), time.monotonic()
            inproc, http = time_search_pair(side, client, warmup, queries)
            search_cpu = (search_from, runtime_cpu_s(server_only))
            search_s = time.monotonic() - search_started
            report["query_cache_hits"] = time_cache_hits(client, repeated, CACHE_ROUNDS)
            report["dense_floor"] = time_dense_floor(side, queries)
            if es is not None:
                es_client = stack.enter_context(httpx.Client(base_url=es.url, timeout=60))

                def lexical_floor(q: str) -> list[str]:
                    hits = side.search(TENANT, q, 10, "lexical", None).hits
                    return [h.chunk.chunk_id for h in hits]

                report["peer"] = time_lexical_peer(
                    client, es_client, TENANT, spec, peer_warmup, peer_queries, lexical_floor
                )
        finally:
            side.close()
        fresh = measure_freshness(client, FRESHNESS_PROBES)
        everywhere = measure_applied_everywhere(client, FRESHNESS_PROBES)
        idle_from = runtime_cpu_s(memory.exclude)
        time.sleep(IDLE_SAMPLE_S)  # what the runtime spends with nothing to do, for comparison
        idle_to = runtime_cpu_s(memory.exclude)
        report["idle_cpu_ms_per_s"] = cpu_per_doc(idle_from, idle_to, IDLE_SAMPLE_S)
        report["search_cpu_ms_per_query"] = search_cpu_per_query(
            *search_cpu, len(warmup) + len(queries), search_s, report["idle_cpu_ms_per_s"]
        )
        if ingest:
            nice = niceness if runtime == "cluster" else None
            report |= ingest_section(client, real, texts, memory.exclude, nice)
        if load:
            stream = fresh_queries(text, rng, taken)
            report["saturation"] = {"1": saturation(url, token, stream, memory)}
            report["runtime_memory_under_load"] = dict(memory.peak)
        if load and runtime == "local":
            two = spec.model_copy(update={"dense": spec.dense.model_copy(update={"replicas": 2})})
            with timed_phase("second_replica_ready_s", phases):
                start_app(data_dir, port, two, runtime)
                wait_every_replica_ready(client, ready_deadline_s(chunks))
            memory_two = PeakMemory(memory.exclude)
            report["saturation"]["2"] = saturation(url, token, stream, memory_two)
            report["runtime_memory_two_replicas_under_load"] = dict(memory_two.peak)

    report |= search_figures(http, inproc, fresh, everywhere)
    return summarize(report, spec, runtime, phases)


def ingest_section(
    client: httpx.Client,
    embedder: Embedder,
    texts: list[list[str]],
    exclude: Sequence[int],
    replica_niceness: int | None,
) -> dict[str, Any]:
    """The ingest rounds (the last of `texts` warms up), reported by their median round."""
    rounds = ingest_rounds(
        client,
        embedder,
        texts[:INGEST_ROUNDS],
        texts[INGEST_ROUNDS][:INGEST_WARMUP_DOCS],
        exclude,
        replica_niceness,
    )
    middle = median_round(rounds)
    out: dict[str, Any] = {
        "ingest_rounds": [
            {k: v for k, v in r.items() if k not in ("cpu_ms_per_doc", "timeline")} for r in rounds
        ],
        "ingest_cpu_ms_per_doc": middle["cpu_ms_per_doc"],
        "ingest_timeline": middle["timeline"],
        "ingest_api_docs_per_s": middle["api_docs_per_s"],
        "ingest_raw_docs_per_s": middle["raw_docs_per_s"],
        "ingest_ratio": middle["ratio"],
    }
    if replica_niceness is not None:
        out["ingest_raw_docs_per_s_at_replica_niceness"] = middle[
            "raw_docs_per_s_at_replica_niceness"
        ]
        out["ingest_ratio_at_replica_niceness"] = middle["ratio_at_replica_niceness"]
    return out


def search_figures(
    http: Sequence[HttpSample],
    inproc: Sequence[float],
    fresh: Sequence[float],
    everywhere: Sequence[float],
) -> dict[str, Any]:
    """HTTP against in-process search, its stages, and the freshness probes' percentiles."""
    http_ms = [s.total_ms for s in http]
    http_p50 = statistics.median(http_ms)
    inproc_p50 = statistics.median(inproc)
    return {
        "queries": len(http),
        "http_p50_ms": round(http_p50, 2),
        "http_p99_ms": round(percentile(http_ms, 99), 2),
        "inproc_p50_ms": round(inproc_p50, 2),
        "inproc_p99_ms": round(percentile(inproc, 99), 2),
        "http_minus_inproc_p50_ms": round(http_p50 - inproc_p50, 2),
        "ratio_p50": round(http_p50 / inproc_p50, 3),
        "stages_p50": stage_breakdown(http),
        "hop_table": hop_table(http),
        "freshness_p50_s": round(statistics.median(fresh), 3),
        "freshness_p99_s": round(percentile(fresh, 99), 3),
        "freshness_all_replicas_p99_s": round(percentile(everywhere, 99), 3),
    }


def search_cpu_per_query(
    before: dict[int, tuple[str, float]],
    after: dict[int, tuple[str, float]],
    queries: int,
    seconds: float,
    idle_ms_per_s: dict[str, float],
) -> dict[str, float]:
    """CPU milliseconds each role of the server spent per HTTP search over `seconds` of
    searches, and `net`: their total less what the same processes spend at rest over that
    time. On a box of few cores, the net times queries/s is the CPU the query path needs."""
    spent = cpu_per_doc(before, after, queries)
    at_rest = idle_ms_per_s.get("total", 0.0) * seconds / queries
    return spent | {"net": round(max(spent["total"] - at_rest, 0.0), 1)}


def summarize(
    report: dict[str, Any], spec: RagIndexSpec, runtime: Runtime, phases: dict[str, float]
) -> dict[str, Any]:
    """The headline figures lifted out of their sections, and the goals checked."""
    report |= {
        "router_replicas": spec.dense.replicas if runtime == "local" else "autoscaled",
        "shard_replicas": spec.dense.replicas if runtime == "cluster" else "in each Router",
        "warmup_queries": WARMUP_QUERIES,
        "bootstrap_s": phases["bootstrap_s"],
        "phases_s": phases,
    }
    path = report["hop_table"]["path_sum_over_total"]
    report["hop_path_gap"] = None if path is None else round(abs(1 - path), 3)
    if "peer" in report:
        report["lexical_http_over_es_http_p50"] = report["peer"]["lexical_http_over_es_http_p50"]
    if "saturation" in report:
        for replicas, result in report["saturation"].items():
            report[f"saturation_qps_{replicas}_router"] = result["saturation_qps"]
    for state in ("at_rest", "under_load"):
        if f"runtime_memory_{state}" in report:
            report[f"runtime_rss_{state}_mb"] = report[f"runtime_memory_{state}"]["rss_mib"]
    goals = GOALS if runtime == "local" else CLUSTER_GOALS
    report["goals"] = {name: f"{op} {bound}" for name, (op, bound) in goals.items()}
    report["missed_goals"] = missed_goals(report, goals)
    return report


def format_report(report: dict[str, Any]) -> str:
    """Scalars one per line, nested sections as `section.key`, saturation levels as a table."""
    rows: list[str] = []

    def add(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                add(f"{prefix}.{key}" if prefix else key, inner)
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            header = list(value[0])
            rows.append(f"{prefix:>44}  " + text_table(header, [list(v.values()) for v in value])
                        .replace("\n", "\n" + " " * 46))  # fmt: skip
        else:
            rows.append(f"{prefix:>44}  {value}")

    add("", {k: v for k, v in report.items() if k not in ("goals", "missed_goals")})
    goals = ", ".join(f"{k} {v}" for k, v in report["goals"].items())
    missed = "; ".join(report["missed_goals"]) or "none"
    return "\n".join([*rows, f"{'goals':>44}  {goals}", f"{'missed goals':>44}  {missed}"])
