"""`bench serve`'s probes of the running app over HTTP: readiness, timed searches and their
stages, the query cache's hit path, freshness, and the saturation ramp's client."""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from ragindex.config import RagIndexSpec
from ragindex.measure.bench.load import PeakMemory, SearchClient, ramp
from ragindex.measure.bench.serve_corpus import TENANT
from ragindex.measure.stats import percentile
from ragindex.router import engine_ms
from ragindex.types import ModelIdentity

if TYPE_CHECKING:  # Ray is imported only when the benchmark runs
    from ragindex.app.serve.query_side import LocalQuerySide

READY_STREAK = 20


READY_POLL_TIMEOUT_S = 10.0


READY_BASE_S = 300.0


READY_S_PER_1K_CHUNKS = 6.0  # a replay with HNSW builds on one thread of a loaded 2-core box


def ready_deadline_s(chunks: int) -> float:
    """How long the app may take to replay `chunks` into its views before the run gives up."""
    return READY_BASE_S + READY_S_PER_1K_CHUNKS * chunks / 1000


def wait_ready(client: httpx.Client, deadline_s: float) -> None:
    """Poll /readyz until 200; a slow or refused answer is retried until the overall deadline,
    and what the app says it is catching up is shown as it changes."""
    deadline = time.monotonic() + deadline_s
    said = ""
    while True:
        try:
            r = client.get("/readyz", timeout=READY_POLL_TIMEOUT_S)
            if r.status_code == 200:
                return
            detail = str(r.json().get("detail", r.text)) if r.content else str(r.status_code)
        except (httpx.TransportError, ValueError) as err:
            detail = f"no answer ({type(err).__name__})"
        if detail != said:
            print(f"waiting for the app: {detail}", file=sys.stderr, flush=True)
            said = detail
        if time.monotonic() > deadline:
            raise TimeoutError(f"the Serve app was not ready after {deadline_s:.0f} s: {detail}")
        time.sleep(1.0)


def wait_snapshots_published(
    data_dir: Path, spec: RagIndexSpec, embedder_identity: ModelIdentity, deadline_s: float
) -> None:
    """Until the app's replica published a snapshot of every shard to the log (it does once
    its first replay is done), so that the new replica measured next can start from them."""
    from ragindex.app import APP_NAME
    from ragindex.app.serve.data_plane import DEFAULT_NAMESPACE, open_log, open_snapshot_log
    from ragindex.shards import SnapshotTopic
    from ragindex.topics import plane_snapshots_topic

    topic = plane_snapshots_topic(spec, APP_NAME, DEFAULT_NAMESPACE)
    shards = spec.dense.shards
    log_ = open_log(data_dir)
    snapshots = [open_snapshot_log(data_dir, log_, s) for s in range(shards)]
    deadline = time.monotonic() + deadline_s
    try:
        while True:
            if all(
                SnapshotTopic(
                    snapshots[s], topic, s, shards, "", embedder_identity
                ).ends_with_manifest()
                for s in range(shards)
            ):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"no snapshot of every shard in {topic} after {deadline_s:.0f} s"
                )
            time.sleep(0.5)
    finally:
        for snapshot_log in snapshots:
            if snapshot_log is not log_:
                snapshot_log.close()
        log_.close()


@dataclass
class HttpSample:
    """One search through HTTP: client time, the replica's share (its Server-Timing), stages,
    and the hops the Router's Server-Timing names (`<hop>.<part>`, without `hop.`)."""

    total_ms: float
    replica_ms: float
    stages_ms: dict[str, float]
    hops_ms: dict[str, float] = field(default_factory=dict)


def http_search(client: httpx.Client, query: str, mode: str = "hybrid") -> HttpSample:
    start = time.perf_counter()
    r = client.post("/v1/search", json={"query": query, "k": 10, "mode": mode})
    total = (time.perf_counter() - start) * 1000
    r.raise_for_status()
    timing = server_timing(r.headers.get("server-timing", ""))
    return HttpSample(
        total,
        timing.get("app", float("nan")),
        r.json()["timings_ms"],
        {name[len(HOP) :]: ms for name, ms in timing.items() if name.startswith(HOP)},
    )


HOP = "hop."
TRIP = ".round_trip"


def server_timing(header: str) -> dict[str, float]:
    """Every metric of a Server-Timing header that has a `dur`, by name."""
    out: dict[str, float] = {}
    for entry in header.split(","):
        name, *params = (p.strip() for p in entry.split(";"))
        for param in params:
            if param.startswith("dur="):
                out[name] = float(param[4:])
    return out


def hop_table(samples: Sequence[HttpSample]) -> dict[str, Any]:
    """Where a search's time goes, hop by hop (p50s over the samples):

    - `hops`: each call the Router made to another replica, its round trip split into the
      replica's `queued` and `service` and the rest, `transport` (serialising, Ray's routing,
      both event loops, scheduling);
    - `path`: the segments one search runs through in order, whose sum is checked against the
      measured total (`path_sum_over_total`): the client and the proxy (`proxy_and_network`),
      the Router's framework (auth, validation, serialising), its search-thread queue, the
      two legs side by side (`legs_wall`), fusion, the fetch hop, and the rerank hop."""
    names = sorted({k.rsplit(".", 1)[0] for s in samples for k in s.hops_ms if k.endswith(TRIP)})
    hops = []
    for hop in names:
        timed = [s.hops_ms for s in samples if f"{hop}{TRIP}" in s.hops_ms]
        row: dict[str, Any] = {"hop": hop, "calls": len(timed)}
        for part in ("round_trip", "queued", "service"):
            row[f"{part}_ms"] = _p50([t[f"{hop}.{part}"] for t in timed])
        row["transport_ms"] = _p50(
            [t[f"{hop}{TRIP}"] - t[f"{hop}.queued"] - t[f"{hop}.service"] for t in timed]
        )
        hops.append(row)
    path: dict[str, float] = {}
    queued = [s.hops_ms.get("router.queued", 0.0) for s in samples]
    if all(s.replica_ms == s.replica_ms for s in samples):  # every answer said its `app` time
        path["proxy_and_network_ms"] = _p50([s.total_ms - s.replica_ms for s in samples])
        path["router_framework_ms"] = _p50(
            [
                s.replica_ms - engine_ms(s.stages_ms) - q
                for s, q in zip(samples, queued, strict=True)
            ]
        )
    path["router_queued_ms"] = _p50(queued)
    path["legs_wall_ms"] = _p50([_legs_ms(s.stages_ms) for s in samples])
    for stage in ("fusion", "fetch", "rerank"):
        if any(stage in s.stages_ms for s in samples):
            path[f"{stage}_ms"] = _p50([s.stages_ms.get(stage, 0.0) for s in samples])
    total = _p50([s.total_ms for s in samples])
    path_sum = round(sum(path.values()), 3)
    return {
        "hops": hops,
        "path": path,
        "path_sum_ms": path_sum,
        "total_p50_ms": total,
        "path_sum_over_total": round(path_sum / total, 3) if total else None,
    }


def _legs_ms(stages_ms: dict[str, float]) -> float:
    """The legs' wall time: side by side when the search overlapped them, else their sum."""
    if "legs_wall" in stages_ms:
        return stages_ms["legs_wall"]
    return sum(stages_ms.get(stage, 0.0) for stage in ("embed", "dense", "lexical"))


def _p50(values: Sequence[float]) -> float:
    return round(percentile(values, 50), 3)


def stage_breakdown(samples: Sequence[HttpSample]) -> dict[str, float]:
    """p50 per stage of the HTTP searches: the engine's stages (`legs_wall`: the BM25 leg and
    embed + dense side by side), then what HTTP adds on top of them (`http_overhead`), split
    into the replica's own share (auth, validation, the hop to the search thread,
    serialisation) and the proxy and network's."""
    stages = sorted({k for s in samples for k in s.stages_ms})
    out = {
        f"{stage}_ms": round(percentile([s.stages_ms.get(stage, 0.0) for s in samples], 50), 3)
        for stage in stages
    }
    engine = [engine_ms(s.stages_ms) for s in samples]  # overlapped legs counted once
    out["engine_ms"] = round(percentile(engine, 50), 3)
    out["http_overhead_ms"] = round(
        percentile([s.total_ms - e for s, e in zip(samples, engine, strict=True)], 50), 3
    )
    timed = [(s, e) for s, e in zip(samples, engine, strict=True) if s.replica_ms == s.replica_ms]
    if timed:
        out["replica_framework_ms"] = round(percentile([s.replica_ms - e for s, e in timed], 50), 3)
        out["proxy_and_network_ms"] = round(
            percentile([s.total_ms - s.replica_ms for s, _ in timed], 50), 3
        )
    return out


def time_search_pair(
    side: LocalQuerySide, client: httpx.Client, warmup: list[str], queries: list[str]
) -> tuple[list[float], list[HttpSample]]:
    """Each query in-process and over HTTP, alternating which goes first; warm-up queries are
    their own set, never timed."""

    def inproc(q: str) -> float:
        start = time.perf_counter()
        side.search(TENANT, q, 10, "hybrid", None)
        return (time.perf_counter() - start) * 1000

    for q in warmup:
        inproc(q)
        http_search(client, q)
    inproc_ms: list[float] = []
    http: list[HttpSample] = []
    for n, q in enumerate(queries):
        if n % 2:
            http.append(http_search(client, q))
            inproc_ms.append(inproc(q))
        else:
            inproc_ms.append(inproc(q))
            http.append(http_search(client, q))
    return inproc_ms, http


def time_dense_floor(side: LocalQuerySide, queries: Sequence[str]) -> dict[str, float]:
    """The dense stage's floor, in this process on the in-process side's shards: each query's
    vector searched in each shard's own index for the fusion's candidates (FAISS and the
    partition's id mapping, none of the replica's chunk carrying, merging or threads), the
    shards one after another. The dense stage searches them side by side: its floor is the
    slowest shard's time."""
    assert side.engine is not None and side.dense is not None
    identity = side.engine.embedder.identity
    candidates = side.spec.fusion.candidates
    vectors = side.engine.embedder.embed_queries(list(queries))
    slowest, total = [], []
    for vector in vectors:
        times = []
        for replica in side.dense.replicas:
            start = time.perf_counter()
            replica.shard.search(vector, candidates, TENANT, identity)
            times.append((time.perf_counter() - start) * 1000)
        slowest.append(max(times))
        total.append(sum(times))
    return {
        "slowest_shard_p50_ms": round(percentile(slowest, 50), 3),
        "shards_summed_p50_ms": round(percentile(total, 50), 3),
    }


def time_cache_hits(client: httpx.Client, queries: list[str], rounds: int) -> dict[str, float]:
    """The query-embedding cache's hit path, apart from every other figure: a small set of
    queries (none of them timed elsewhere) sent once to fill the cache, then `rounds` more
    times each, timed."""
    for q in queries:
        http_search(client, q)
    samples = [http_search(client, q) for _ in range(rounds) for q in queries]
    totals = [s.total_ms for s in samples]
    return {
        "queries": len(queries),
        "rounds": rounds,
        "http_p50_ms": round(statistics.median(totals), 2),
        "http_p99_ms": round(percentile(totals, 99), 2),
        "embed_p50_ms": round(statistics.median(s.stages_ms.get("embed", 0.0) for s in samples), 3),
    }


def measure_freshness(client: httpx.Client, probes: int) -> list[float]:
    """Seconds from sending an upsert to its chunk being found by both legs."""
    out = []
    for n in range(probes):
        marker = f"fresh{n}marker"
        doc = {"source": "fresh", "doc_id": f"f{n}", "title": "", "text": f"{marker} probe {n}"}
        start = time.perf_counter()
        client.post("/v1/documents", json={"documents": [doc]}).raise_for_status()
        while True:
            seen = [
                client.post("/v1/search", json={"query": marker, "k": 100, "mode": mode}).json()[
                    "hits"
                ]
                for mode in ("lexical", "dense")
            ]
            if all(any(h["doc_id"] == f"f{n}" for h in hits) for hits in seen):
                break
            if time.perf_counter() - start > 30:
                raise TimeoutError(f"probe {n} not searchable after 30 s")
        out.append(time.perf_counter() - start)
    return out


def measure_applied_everywhere(client: httpx.Client, probes: int) -> list[float]:
    """Seconds from sending an upsert to `?wait=true` answering applied (every view)."""
    out = []
    for n in range(probes):
        doc = {"source": "fresh", "doc_id": f"w{n}", "title": "", "text": f"wait probe {n}"}
        start = time.perf_counter()
        r = client.post(
            "/v1/documents",
            json={"documents": [doc]},
            params={"wait": "true", "wait_timeout_s": "30"},
        )
        r.raise_for_status()
        if r.json()["applied"] is not True:
            raise TimeoutError(f"probe {n} not applied everywhere after 30 s")
        out.append(time.perf_counter() - start)
    return out


def wait_every_replica_ready(client: httpx.Client, deadline_s: float) -> None:
    """Ready answers from every Router replica: READY_STREAK 200s in a row (requests spread
    over the replicas, so one still catching up answers 503 within a few)."""
    deadline = time.monotonic() + deadline_s
    streak = 0
    while streak < READY_STREAK:
        wait_ready(client, max(1.0, deadline - time.monotonic()))
        streak = 0
        while streak < READY_STREAK:
            try:
                if client.get("/readyz", timeout=READY_POLL_TIMEOUT_S).status_code != 200:
                    break
            except httpx.TransportError:
                break
            streak += 1


def search_body(query: str) -> dict[str, Any]:
    return {"query": query, "k": 10, "mode": "hybrid"}


def saturation(
    url: str,
    token: str,
    queries: Iterator[str],
    memory: PeakMemory,
) -> dict[str, Any]:
    return ramp(lambda: SearchClient(url, token), queries, search_body, on_level=memory.sample)
