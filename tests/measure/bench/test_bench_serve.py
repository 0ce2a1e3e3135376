"""`bench serve`'s runners on tiny inputs: the query sets, the stage breakdown, the saturation
decision, the memory count, and the Elasticsearch peer request ranking as tantivy does.

Shapes and decisions only, never wall-clock figures (benchmarks are not tests).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ragindex.app import APP_NAME
from ragindex.app.serve.data_plane import DEFAULT_NAMESPACE, ensure_topics, open_log
from ragindex.config import RagIndexSpec
from ragindex.errors import InvalidInput
from ragindex.ingest import IngestWorker
from ragindex.lexical import LexicalView, TantivyIndex
from ragindex.measure.bench.load import saturation_qps
from ragindex.measure.bench.peer import (
    ES_ALIAS,
    es_bm25_request,
    fill_elasticsearch,
    overlap_at_k,
)
from ragindex.measure.bench.scale_vectors import Generator, anchor_neighbours
from ragindex.measure.bench.serve import bench_spec, run_bench_serve, search_cpu_per_query
from ragindex.measure.bench.serve_corpus import (
    QUERY_WORDS,
    TEXT_WORDS,
    RealText,
    SyntheticPassages,
    unique_queries,
)
from ragindex.measure.bench.serve_ingest import INGEST_DOCS, ingest_texts, median_round
from ragindex.measure.bench.serve_probes import (
    HttpSample,
    hop_table,
    server_timing,
    stage_breakdown,
)
from ragindex.measure.servers import EsServer
from ragindex.measure.stats import missed_goals
from ragindex.protocols import Embedder
from ragindex.records import doc_key, encode_document
from ragindex.topics import partition_for_key, plane_topics
from ragindex.types import Document

from .conftest import TINY_DOCS, TINY_QUERIES


def test_the_corpus_is_real_text_and_its_query_sets_are_unique_and_disjoint() -> None:
    text = RealText(300)
    assert len(text.passages) == 300
    assert text.text(5) == f"record 5 {text.passages[5]}"
    assert text.text(305) == f"record 305 {text.passages[5]}"  # repeats differ by record
    assert all(len(p.split()) <= TEXT_WORDS for p in text.passages)
    rng = np.random.default_rng(3)
    taken: set[str] = set()
    warmup = unique_queries(text, rng, 20, taken)
    timed = unique_queries(text, rng, 200, taken)
    assert all(len(q.split()) == QUERY_WORDS for q in timed)
    # each query is words of the corpus, in the order a passage has them
    assert all(any(q in " ".join(w) for w in text._words) for q in timed[:20])
    assert len(set(warmup)) == 20 and len(set(timed)) == 200
    assert not set(warmup) & set(timed)
    assert taken == set(warmup) | set(timed)


def test_passage_vectors_are_generated_around_real_anchors(minilm: Embedder) -> None:
    """The corpus vectors lean on the real model's vectors of real passages (each generated
    vector is nearer one anchor than near-uniform noise ever is), differ batch by batch, and
    are the same in every run."""
    texts = ["wing flow", "heat transfer in nozzles", "blade vibration", "shock waves"]
    anchors = minilm.embed_passages(texts)
    generator = Generator(anchors, anchor_neighbours(anchors), sigma=0.3)
    first, second = SyntheticPassages(minilm, generator), SyntheticPassages(minilm, generator)
    batch = first.embed_passages(["a"] * 50)
    assert batch.shape == (50, minilm.identity.dimension)
    assert np.allclose(np.linalg.norm(batch, axis=1), 1.0, atol=1e-5)
    assert (batch @ anchors.T).max(axis=1).min() > 0.5  # uniform noise: ~0.05 at 384-d
    assert np.array_equal(second.embed_passages(["a"] * 50), batch)
    assert not np.allclose(first.embed_passages(["a"] * 50), batch)
    assert first.identity == minilm.identity
    with pytest.raises(ValueError, match="dimension"):
        SyntheticPassages(minilm, Generator(anchors[:, :8], anchor_neighbours(anchors), 0.3))


def test_bad_options_are_refused_before_anything_starts(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="--shard-replicas must be at least 1, got 0"):
        run_bench_serve(1_000, tmp_path / "fresh", 1, shard_replicas=0)
    with pytest.raises(InvalidInput, match="--chunks must be at least"):
        run_bench_serve(10, tmp_path / "fresh", 1)
    with pytest.raises(InvalidInput, match="--anchors must be at least 2, got 1"):
        run_bench_serve(1_000, tmp_path / "fresh", 1, anchors=1)
    assert not (tmp_path / "fresh").exists()


def test_the_bench_runs_the_given_spec_with_its_own_shards_replicas_and_limits() -> None:
    given = RagIndexSpec.model_validate(
        {"embedder": {"backend": "onnx-int8"}, "dense": {"shards": 5, "exactThreshold": 10}}
    )
    for shard_replicas, replicas in ((None, 1), (2, 2)):
        spec = bench_spec(given, shard_replicas)
        assert spec.embedder.backend == "onnx-int8" and spec.dense.exact_threshold == 10
        assert (spec.dense.shards, spec.dense.replicas) == (2, replicas)
        assert spec.limits.requests_per_s == 1_000_000  # the load ramp is never rate-limited


def test_search_cpu_is_per_query_by_role_less_the_cpu_at_rest() -> None:
    before = {1: ("ray::ServeReplica:ragindex:Router", 10.0), 2: ("raylet", 5.0)}
    after = {
        1: ("ray::ServeReplica:ragindex:Router", 12.0),
        2: ("raylet", 5.2),
        3: ("ray::ServeReplica:ragindex:Router", 0.3),  # a replica started meanwhile
    }
    cpu = search_cpu_per_query(before, after, 100, 4.0, {"total": 10.0})
    assert cpu == {"ragindex:Router": 23.0, "raylet": 2.0, "total": 25.0, "net": 24.6}
    assert search_cpu_per_query(before, before, 100, 4.0, {"total": 10.0})["net"] == 0.0


def test_server_timing_reads_every_metric_with_a_duration() -> None:
    assert server_timing("db;dur=2, app;dur=12.5") == {"db": 2.0, "app": 12.5}
    assert server_timing("app;desc=x;dur=3, cache;desc=hit") == {"app": 3.0}
    assert server_timing("") == {}


def test_hop_table_splits_each_round_trip_and_sums_the_path() -> None:
    """Two searches through a cluster Router: each hop's round trip splits into the replica's
    queue and service and the transport left over; the path's segments add up to the total."""
    stages = {"embed": 6.0, "dense": 5.0, "lexical": 7.0, "legs_wall": 11.0, "fusion": 0.5}
    hops = {
        "embed.round_trip": 6.0, "embed.queued": 1.0, "embed.service": 3.0,
        "dense.shard0.round_trip": 4.0, "dense.shard0.queued": 0.5, "dense.shard0.service": 1.5,
        "router.queued": 0.5,
    }  # fmt: skip
    samples = [
        HttpSample(20.0, 14.0, {**stages, "fetch": 2.0}, hops),
        HttpSample(22.0, 14.0, {**stages, "fetch": 2.0}, hops),
    ]
    out = hop_table(samples)
    dense, embed = out["hops"]  # the Router's own queue is a segment of the path below
    assert dense == {"hop": "dense.shard0", "calls": 2, "round_trip_ms": 4.0, "queued_ms": 0.5,
                     "service_ms": 1.5, "transport_ms": 2.0}  # fmt: skip
    assert embed["hop"] == "embed" and embed["transport_ms"] == 2.0
    assert out["path"] == {
        "proxy_and_network_ms": 7.0,  # totals minus the replica's: 6, 8
        "router_framework_ms": 0.0,  # replica 14 = queued 0.5 + engine 13.5
        "router_queued_ms": 0.5,
        "legs_wall_ms": 11.0,
        "fusion_ms": 0.5,
        "fetch_ms": 2.0,
    }
    assert out["path_sum_ms"] == 21.0 and out["total_p50_ms"] == 21.0
    assert out["path_sum_over_total"] == 1.0


def test_stage_breakdown_splits_what_http_adds() -> None:
    samples = [
        HttpSample(20.0, 14.0, {"embed": 8.0, "dense": 1.0, "fetch": 1.0}),
        HttpSample(30.0, 18.0, {"embed": 10.0, "dense": 2.0, "fetch": 1.0}),
        HttpSample(25.0, 16.0, {"embed": 9.0, "dense": 1.5, "fetch": 1.5}),
    ]
    out = stage_breakdown(samples)
    assert out["embed_ms"] == 9.0 and out["dense_ms"] == 1.5
    assert out["engine_ms"] == 12.0
    assert out["http_overhead_ms"] == 13.0  # totals minus engines: 10, 17, 13
    assert out["replica_framework_ms"] == 4.0  # replica minus engine: 4, 5, 4
    assert out["proxy_and_network_ms"] == 9.0  # totals minus replica: 6, 12, 9


def test_stage_breakdown_counts_overlapped_legs_once() -> None:
    """With the BM25 leg beside embed + dense, the engine's time is their wall time plus the
    stages after them, not the sum of every stage."""
    stages = {"embed": 5.0, "dense": 6.0, "lexical": 4.0, "legs_wall": 11.5, "fusion": 0.5}
    out = stage_breakdown([HttpSample(20.0, 14.0, stages)])
    assert out["legs_wall_ms"] == 11.5 and out["lexical_ms"] == 4.0
    assert out["engine_ms"] == 12.0
    assert out["http_overhead_ms"] == 8.0 and out["replica_framework_ms"] == 2.0


def test_saturation_is_the_best_throughput_before_p99_passes_the_bound() -> None:
    levels = [
        {"qps": 40.0, "p99_ms": 30.0},
        {"qps": 70.0, "p99_ms": 38.0},
        {"qps": 75.0, "p99_ms": 55.0},
    ]
    assert saturation_qps(levels, 40.0) == 70.0
    assert saturation_qps(levels[2:], 40.0) is None


def test_the_reported_ingest_round_is_the_median_one() -> None:
    rounds = [{"ratio": r, "n": n} for n, r in enumerate([0.91, 0.79, 0.84])]
    assert median_round(rounds)["n"] == 2
    assert median_round(rounds[:2])["n"] == 1  # an even count: the lower middle
    assert median_round(rounds[:1])["n"] == 0


def test_ingest_rounds_are_new_documents_each_round() -> None:
    rng = np.random.default_rng(0)
    sets = [ingest_texts(rng, n) for n in range(3)]
    assert all(len(t) == INGEST_DOCS for t in sets)
    assert len({text for t in sets for text in t}) == 3 * INGEST_DOCS


def test_strict_goal_misses_at_the_bound() -> None:
    goals = {"ratio": ("<", 1.0)}
    assert missed_goals({"ratio": 0.9}, goals) == []
    assert missed_goals({"ratio": 1.0}, goals) == ["ratio: 1.0 misses the goal < 1.0"]


def test_overlap_at_k() -> None:
    assert overlap_at_k(["a", "b"], ["b", "c"]) == 0.5
    assert overlap_at_k([], []) == 1.0


@pytest.mark.elasticsearch
def test_the_peer_request_ranks_as_the_tantivy_view(
    tmp_path: Path, minilm: Embedder, es_server: EsServer
) -> None:
    """Like for like: Elasticsearch, filled from the same log as the Router's tantivy view,
    answers the benchmark's `_search` with the same hits as the view."""
    import httpx

    spec = RagIndexSpec()
    topics = plane_topics(spec, APP_NAME, DEFAULT_NAMESPACE)
    log = open_log(tmp_path)
    try:
        ensure_topics(log, topics)
        records = []
        for doc_id, (title, text) in TINY_DOCS.items():
            if not text:
                continue
            key = doc_key("bench", "tiny", doc_id)
            doc = Document("tiny", doc_id, title, text)
            records.append(
                (partition_for_key(key, topics.docs_partitions), key, encode_document(doc))
            )
        log.append(topics.docs, records)
        worker = IngestWorker(log, topics, minilm, spec.chunking, range(topics.docs_partitions))
        while worker.poll():
            pass
        es = fill_elasticsearch(
            es_server.url, log, topics.chunks, topics.shards, spec, tmp_path / "es.json"
        )
        tantivy = TantivyIndex.open(tmp_path / "tantivy")
        LexicalView(log, topics.chunks, topics.shards, tantivy, tmp_path / "tv.json").catch_up()
        try:
            with httpx.Client(base_url=es_server.url) as client:
                for query in TINY_QUERIES.values():
                    body = es_bm25_request(query, "bench", spec)
                    hits = client.post(f"/{ES_ALIAS}/_search", json=body).json()["hits"]["hits"]
                    theirs = [h["_source"]["chunk_id"] for h in hits]
                    ours = [h.chunk_id for h in tantivy.search(query, 10, "bench")]
                    # the same hits and the same best one (stop-word-only matches may tie
                    # and tie in another order)
                    assert theirs and set(theirs) == set(ours), query
                    assert theirs[0] == ours[0], query
        finally:
            tantivy.close()
            es.drop()
            es.close()
    finally:
        log.close()


@pytest.mark.serve
@pytest.mark.slow
def test_the_command_serves_and_measures_as_a_user_runs_it(tmp_path: Path) -> None:
    """`ragindex bench serve` from a shell with no Ray settings of its own. Its command module
    imports Ray (through the embedded index) before the benchmark sets the token-auth
    environment, and a driver left in the mode Ray read at import could not talk to the GCS it
    started (InvalidAuthToken)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    out = tmp_path / "serve.json"
    ran = subprocess.run(
        [
            sys.executable,
            "-m",
            "ragindex.app.cli",
            "bench",
            "serve",
            "--chunks",
            "100",
            "--skip",
            "peer",
            "--skip",
            "load",
            "--anchors",
            "100",
            "--json",
            str(out),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr[-4000:]
    report = json.loads(out.read_text())
    assert report["chunks"] == 100 and report["runtime"] == "local"
    assert report["queries"] > 0 and report["http_p50_ms"] > 0 and report["inproc_p50_ms"] > 0
    assert report["freshness_all_replicas_p99_s"] > 0 and report["bootstrap_s"] > 0
    assert "saturation" not in report and "peer" not in report
    assert report["corpus_vectors"]["anchors"] == 100
    floor = report["dense_floor"]
    assert 0 < floor["slowest_shard_p50_ms"] <= floor["shards_summed_p50_ms"]
