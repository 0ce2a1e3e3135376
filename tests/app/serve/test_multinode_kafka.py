"""The cluster runtime on Kafka across two Ray nodes on one machine, no shared path
(multinode.py). The rendered cluster config runs 2 dense shards x 2 replicas; the replicas land
on both nodes and each builds its views from the log into its node's root.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ragindex.config import RagIndexSpec
from ragindex.router.auth import TOKENS_FILE

from .multinode import (
    READY_BOUND_S,
    MultiNode,
    log_ends_and_reports,
    multinode_app,
    shard_replica_nodes,
)
from .readiness import wait_running_and_ready

pytestmark = [pytest.mark.serve, pytest.mark.kafka, pytest.mark.slow]

APP = "ragindex-multinode"
REROUTE_BOUND_S = 180.0  # Serve notices the dead replicas and starts new ones
WAIT = {"wait": "true", "wait_timeout_s": "60"}
DOCS = [
    {"source": "wiki", "doc_id": f"d{n}", "title": f"Doc {n}", "text": text}
    for n, text in enumerate(
        [
            "A lighthouse is a tower with a bright lamp that guides ships at night.",
            "A volcano is a rupture in the crust where lava, ash and gases escape.",
            "Bread is baked from a dough of flour and water, leavened with yeast.",
            "Glaciers are slow rivers of ice that carve valleys into mountains.",
        ]
    )
]


@pytest.fixture(scope="module")
def multinode(tmp_path_factory: pytest.TempPathFactory, kafka_server: Any) -> Iterator[MultiNode]:
    spec = RagIndexSpec.model_validate({"dense": {"shards": 2, "replicas": 2}})
    with multinode_app(tmp_path_factory.mktemp("multinode"), kafka_server, spec, APP) as app:
        yield app


def search(client: httpx.Client, query: str, **kw: Any) -> list[dict[str, Any]]:
    r = client.post("/v1/search", json={"query": query, **kw})
    assert r.status_code == 200, r.text
    hits: list[dict[str, Any]] = r.json()["hits"]
    return hits


def assert_every_replica_reported(app: MultiNode, replicas: dict[str, int]) -> None:
    ends, reports = log_ends_and_reports(app)
    for view, count in replicas.items():
        mine = {r.replica: r.offsets for r in reports if r.view == view}
        assert len(mine) >= count, (view, mine)
        for offsets in mine.values():
            assert all(offsets[p] >= ends[p] > 0 for p in offsets), (view, offsets, ends)


def test_shard_replicas_on_both_nodes_serve_what_was_ingested(multinode: MultiNode) -> None:
    shard_nodes = set(shard_replica_nodes(APP))
    assert len(shard_nodes) == 2, "shard replicas should run on both nodes"
    with multinode.client() as client:
        r = client.post("/v1/documents", json={"documents": DOCS}, params=WAIT)
        assert r.status_code == 202 and r.json()["applied"] is True, r.text
        top = search(client, "tower with a lamp guiding ships", k=3)[0]
        assert top["chunk_id"] == "wiki:d0:0" and "lighthouse" in top["text"]
        # The wait covered every replica: each of the 2 x 2 shard replicas and the BM25 view
        # reported, under its own id, offsets at or past what the write produced.
        assert_every_replica_reported(multinode, {"Shard0": 2, "Shard1": 2, "Lexical": 1})
        stats = client.get("/v1/stats").json()
        assert stats["chunks"] == stats["dense_vectors"] == stats["lexical_docs"] == len(DOCS)
    for root in multinode.roots:  # each node built its own views, under its own root
        assert any((root / "replicas").glob("*/Shard*-*/shard")), root
    assert not (multinode.roots[0].parent / "unused").exists()  # nothing shared was written


def test_node_removed_under_query_load_then_a_new_replica_bootstraps(
    multinode: MultiNode, tmp_path: Path
) -> None:
    """Remove the second node while queries run: after Serve re-routes (bounded) every query
    answers; then add a node and a third replica per shard: it builds its views from the log."""
    import threading

    from ray.serve.context import _get_global_client
    from ray.serve.schema import ServeDeploySchema

    with multinode.client() as client:
        client.post("/v1/documents", json={"documents": DOCS}, params=WAIT).raise_for_status()
    results: list[tuple[float, bool]] = []
    stop = threading.Event()

    def load() -> None:
        with multinode.client() as client:
            while not stop.is_set():
                try:
                    r = client.post("/v1/search", json={"query": "glacier ice valley", "k": 3})
                    ok = r.status_code == 200 and r.json()["hits"][0]["doc_id"] == "d3"
                except (httpx.HTTPError, KeyError, IndexError):
                    ok = False
                results.append((time.monotonic(), ok))
                time.sleep(0.2)

    loader = threading.Thread(target=load)
    loader.start()
    try:
        time.sleep(3)
        removed_at = time.monotonic()
        multinode.cluster.remove_node(multinode.cluster.list_all_nodes()[1])
        deadline = removed_at + REROUTE_BOUND_S
        while time.monotonic() < deadline:  # until 20 queries in a row answered
            tail = [ok for _, ok in results[-20:]]
            if len(tail) == 20 and all(tail) and results[-20][0] > removed_at:
                break
            time.sleep(0.5)
        assert len(results) >= 20, f"only {len(results)} queries answered in the bound"
        recovered_at = results[-20][0]
        time.sleep(5)
    finally:
        stop.set()
        loader.join(timeout=60)
    after = [ok for t, ok in results if t >= recovered_at]
    assert after and all(after), "queries failed after Serve re-routed"
    assert recovered_at - removed_at < REROUTE_BOUND_S

    new_root = tmp_path / "node2"
    (new_root / "auth").mkdir(parents=True)
    shutil.copy(multinode.roots[0] / "auth" / TOKENS_FILE, new_root / "auth" / TOKENS_FILE)
    multinode.cluster.add_node(num_cpus=6, env_vars=multinode.node_env(new_root))
    config = json.loads(json.dumps(multinode.config))
    for d in config["applications"][0]["deployments"]:
        if d["name"].startswith("Shard"):
            d["num_replicas"] = 3
    client_ = _get_global_client()
    assert client_ is not None
    client_.deploy_apps(ServeDeploySchema.model_validate(config))
    multinode.config = config  # what runs now: later redeploys start from it
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        on_new_node = any((new_root / "replicas").glob("*/Shard*-*/shard"))
        if len(shard_replica_nodes(APP)) == 6 and on_new_node:
            break
        time.sleep(1)
    assert any((new_root / "replicas").glob("*/Shard*-*/shard")), "no replica on the new node"
    wait_running_and_ready(multinode.client, APP, READY_BOUND_S)
    with multinode.client() as client:
        for _ in range(20):  # requests spread over the replicas, the new ones included
            assert search(client, "glacier ice valley", k=1)[0]["doc_id"] == "d3"


def test_kafka_down_refuses_writes_and_keeps_searching(multinode: MultiNode) -> None:
    kafka = multinode.kafka
    with multinode.client() as client:
        client.post("/v1/documents", json={"documents": DOCS}, params=WAIT).raise_for_status()
        kafka.stop_broker()
        try:
            refused = {"source": "wiki", "doc_id": "refused", "title": "", "text": "zqrefused"}
            r = client.post("/v1/documents", json={"documents": [refused]})
            assert r.status_code == 503, r.text
            assert "the log did not take the write" in r.json()["detail"]
            assert search(client, "bread dough yeast", k=1)[0]["doc_id"] == "d2"
            ready = client.get("/readyz")
            assert ready.status_code == 200 and ready.json()["status"] == "degraded", ready.text
        finally:
            kafka.start_broker()


def test_writes_resume_after_the_broker_returns(multinode: MultiNode) -> None:
    with multinode.client() as client:
        late = {"source": "wiki", "doc_id": "late", "title": "", "text": "zqlate arrives"}
        deadline = time.monotonic() + 120
        while True:  # the producer reconnects to the returned broker
            r = client.post("/v1/documents", json={"documents": [late]}, params=WAIT)
            if r.status_code == 202 or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert r.status_code == 202 and r.json()["applied"] is True, r.text
        assert [h["doc_id"] for h in search(client, "zqlate", k=5, mode="lexical")] == ["late"]
        assert search(client, "zqrefused", k=5, mode="lexical") == []  # nothing half-written
        stats = client.get("/v1/stats").json()
        assert stats["chunks"] == stats["lexical_docs"] == len(DOCS) + 1
        ready = client.get("/readyz").json()
        assert ready["status"] == "ready", ready


def ingest_reports(app: MultiNode) -> dict[str, dict[int, int]]:
    """What each live Ingest replica reported (registry view "Ingest"): the `docs` partitions it
    owns, each with its committed offset."""
    import ray

    from ragindex.app.serve.progress import RAY_NAMESPACE, STALE_S
    from ragindex.generations import index_generation

    spec = RagIndexSpec.model_validate(app.config["applications"][0]["args"]["spec"])
    registry = ray.get_actor(f"progress.{APP}.{index_generation(spec)}", namespace=RAY_NAMESPACE)
    return {
        r.replica: dict(r.offsets)
        for r in ray.get(registry.reports.remote())
        if r.view == "Ingest" and r.age_s < STALE_S
    }


def redeploy_ingest(app: MultiNode, replicas: int) -> None:
    from ray.serve.context import _get_global_client
    from ray.serve.schema import ServeDeploySchema

    config = json.loads(json.dumps(app.config))
    (ingest,) = [d for d in config["applications"][0]["deployments"] if d["name"] == "Ingest"]
    ingest["autoscaling_config"] |= {"min_replicas": replicas, "max_replicas": replicas}
    client = _get_global_client()
    assert client is not None
    client.deploy_apps(ServeDeploySchema.model_validate(config))
    app.config = config


def wait_owners(app: MultiNode, replicas: int, partitions: int) -> dict[str, set[int]]:
    """Until `replicas` Ingest replicas own disjoint shares that cover every partition."""
    deadline = time.monotonic() + REROUTE_BOUND_S
    owners: dict[str, set[int]] = {}
    while time.monotonic() < deadline:
        owners = {replica: set(offsets) for replica, offsets in ingest_reports(app).items()}
        shares = list(owners.values())
        if (
            len(owners) == replicas
            and all(shares)
            and sum(len(s) for s in shares) == partitions
            and set().union(*shares) == set(range(partitions))
        ):
            return owners
        time.sleep(1)
    raise AssertionError(f"no {replicas}-way split of {partitions} partitions: {owners}")


def one_doc_per_partition(tenant: str, prefix: str, partitions: int) -> list[dict[str, Any]]:
    from ragindex.records import doc_key
    from ragindex.topics import partition_for_key

    by_partition: dict[int, dict[str, Any]] = {}
    n = 0
    while len(by_partition) < partitions:
        doc_id = f"{prefix}{n}"
        p = partition_for_key(doc_key(tenant, "scale", doc_id), partitions)
        by_partition.setdefault(
            p, {"source": "scale", "doc_id": doc_id, "title": "", "text": f"zq{doc_id} token"}
        )
        n += 1
    return list(by_partition.values())


def test_ingest_scaled_up_and_down_splits_the_docs_partitions_and_loses_nothing(
    multinode: MultiNode,
) -> None:
    """Two Ingest replicas share `docs` (disjoint shares, every partition owned), each consumes
    its share; scaled back to one, the survivor takes every partition. Documents written to
    every partition at each size are each indexed exactly once."""
    spec = RagIndexSpec.model_validate(multinode.config["applications"][0]["args"]["spec"])
    partitions = spec.log.docs_partitions
    with multinode.client() as client:
        before = client.get("/v1/stats").json()["chunks"]
    written = 0
    for replicas, prefix in ((2, "up"), (1, "down")):
        redeploy_ingest(multinode, replicas)
        owners = wait_owners(multinode, replicas, partitions)
        docs = one_doc_per_partition("acme", prefix, partitions)
        with multinode.client() as client:
            r = client.post("/v1/documents", json={"documents": docs}, params=WAIT)
            assert r.status_code == 202 and r.json()["applied"] is True, r.text
            written += len(docs)
            for doc in docs:
                hits = search(client, f"zq{doc['doc_id']}", k=5, mode="lexical")
                assert [h["doc_id"] for h in hits] == [doc["doc_id"]], (doc, hits)
            assert client.get("/v1/stats").json()["chunks"] == before + written
        # The owner of each document's partition committed past it: every replica consumed
        # its own share (reports come every few seconds, so wait for the next ones).
        landed = {a["partition"]: a["offset"] for a in r.json()["accepted"]}
        owner_of = {p: replica for replica, share in owners.items() for p in share}
        deadline = time.monotonic() + 30
        while True:
            reports = ingest_reports(multinode)
            behind = {
                p: o for p, o in landed.items() if reports.get(owner_of[p], {}).get(p, -1) <= o
            }
            if not behind or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert not behind, (behind, reports, owners)
