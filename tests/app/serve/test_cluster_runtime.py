"""The CLUSTER runtime end to end: the rendered Serve config deployed on local Ray, real HTTP.

The config from `render_serve_config(runtime="cluster")` is deployed the way `serve run CONFIG`
and KubeRay do it (validated as `ServeDeploySchema`, built by the controller from the import
path), so the Router embeds each query itself (a CPU embedder: no QueryEmbedder pool) and fans
out over handles to Shard<i>, Lexical and Ingest -> IngestEmbedder deployments. Every cluster
deployment asks for one CPU; Ray accepts more logical CPUs than cores, so the `cluster` fixture
(conftest.py) starts its own Ray with 12 and stops it at the end of this module. Its query
path autoscales within seconds (the spec's upscaleDelayS/downscaleDelayS), which the
autoscaling test watches.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from ragindex.config import RagIndexSpec
from ragindex.errors import InvalidInput
from ragindex.router import create_token
from ragindex.serve_config import ROUTER, deployment_layout

if TYPE_CHECKING:  # fixtures come from conftest.py; pytest's importlib mode cannot import it
    from conftest import ServedApp

pytestmark = [pytest.mark.serve, pytest.mark.slow]
CLUSTER_APP = "ragindex-cluster"  # the `cluster` fixture's app (tests/app/serve/conftest.py)

TEXTS = {
    "lighthouse": (
        "Lighthouses",
        "A lighthouse is a tower with a bright lamp that guides ships at night"
        " along dangerous coasts and harbour entrances.",
    ),
    "volcano": (
        "Volcanoes",
        "A volcano is a rupture in the crust of a planet where lava, ash and gases"
        " escape from a magma chamber below the surface.",
    ),
    "bread": (
        "Bread",
        "Bread is baked from a dough of flour and water, leavened with yeast"
        " and shaped into loaves before it goes into a hot oven.",
    ),
}


def eventually(probe: Callable[[], bool], timeout_s: float) -> None:
    """Poll until `probe` holds: the ingest worker and the cluster's views consume the log on
    their own, so a write is visible within the freshness bound rather than at once."""
    deadline = time.monotonic() + timeout_s
    while True:
        if probe():
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"not visible within {timeout_s} s")
        time.sleep(0.1)


def docs(tenant_mark: str) -> list[dict[str, str]]:
    """The same three documents; each tenant's text carries its own marker word."""
    return [
        {"source": "wiki", "doc_id": d, "title": title, "text": f"{text} ({tenant_mark})"}
        for d, (title, text) in TEXTS.items()
    ]


def search(client: httpx.Client, query: str, **kw: Any) -> list[dict[str, Any]]:
    r = client.post("/v1/search", json={"query": query, **kw})
    assert r.status_code == 200, r.text
    hits: list[dict[str, Any]] = r.json()["hits"]
    return hits


def counts(client: httpx.Client) -> tuple[int, int, int]:
    stats = client.get("/v1/stats").json()
    return stats["chunks"], stats["dense_vectors"], stats["lexical_docs"]


def test_every_rendered_deployment_runs_as_its_own_deployment(
    cluster: ServedApp, cluster_spec: dict[str, Any]
) -> None:
    from ray import serve

    layout = deployment_layout(RagIndexSpec.model_validate(cluster_spec), "cluster")
    deployments = serve.status().applications[CLUSTER_APP].deployments
    assert set(deployments) == {d["name"] for d in layout}
    assert {"Shard0", "Shard1", "IngestEmbedder", "Lexical"} <= set(deployments)
    assert "QueryEmbedder" not in deployments  # a CPU embedder: the Router embeds queries

    # Shards and Lexical ask IngestEmbedder for its identity while it still loads:
    # with the fixture's 2 s upscale delay it may briefly add a replica, then drop it again.
    def healthy() -> bool:
        deployments = serve.status().applications[CLUSTER_APP].deployments
        return {d.status for d in deployments.values()} == {"HEALTHY"}

    eventually(healthy, 90)


def test_cluster_runtime_serves_tenants_over_remote_legs(cluster: ServedApp) -> None:
    bound = RagIndexSpec().freshness_s + 30.0  # ingest worker + IngestEmbedder + views
    tokens = {t: create_token(cluster.data_dir, t) for t in ("alpha", "beta")}
    with cluster.client() as anonymous:
        r = anonymous.post("/v1/search", json={"query": "lighthouse"})
        assert r.status_code == 401, r.text
    with cluster.client("not-a-token") as stranger:
        r = stranger.post("/v1/documents", json={"documents": docs("stranger")})
        assert r.status_code == 401, r.text
    for tenant in ("alpha", "beta"):
        with cluster.client(tokens[tenant]) as client:
            r = client.post("/v1/documents", json={"documents": docs(tenant)})
            assert r.status_code == 202, r.text
            assert [d["doc_id"] for d in r.json()["accepted"]] == list(TEXTS)
            eventually(lambda: counts(client) == (3, 3, 3), bound)

    with cluster.client(tokens["alpha"]) as client:
        top = search(client, "tower with a lamp guiding ships", k=3)[0]
        assert top["chunk_id"] == "wiki:lighthouse:0"
        assert (top["source"], top["doc_id"], top["title"]) == ("wiki", "lighthouse", "Lighthouses")
        assert set(top["ranks"]) == {"dense", "lexical"}
        for mode in ("hybrid", "dense", "lexical"):
            hits = search(client, "magma and lava", k=10, mode=mode)
            assert hits[0]["doc_id"] == "volcano", mode
            if mode != "hybrid":
                assert set(hits[0]["ranks"]) == {mode}
            assert all("(alpha)" in h["text"] for h in hits), mode
        # Server-Timing names each hop: its round trip, and the replica's queue and service
        r = client.post("/v1/search", json={"query": "magma and lava", "k": 3})
        timing = dict(
            entry.strip().split(";dur=") for entry in r.headers["server-timing"].split(",")
        )
        for hop in ("dense.shard0", "dense.shard1", "lexical"):
            parts = [float(timing[f"hop.{hop}.{p}"]) for p in ("round_trip", "queued", "service")]
            assert parts[0] >= parts[1] + parts[2] > 0, (hop, parts)
        # the hits came with their chunks from the legs' replicas: no fetch call was needed
        assert not any(name.startswith("hop.fetch") for name in timing), timing
        assert float(timing["app"]) > float(timing["hop.router.queued"]) >= 0

    with cluster.client(tokens["beta"]) as client:
        for mode in ("hybrid", "dense", "lexical"):
            hits = search(client, "lighthouse tower lamp alpha", k=10, mode=mode)
            assert hits and all("(beta)" in h["text"] for h in hits), mode

        r = client.delete("/v1/documents/wiki/bread", params={"wait": "true"})
        assert r.status_code == 202, r.text
        assert r.json()["accepted"][0]["doc_id"] == "bread"
        eventually(lambda: counts(client) == (2, 2, 2), bound)
        for mode in ("hybrid", "dense", "lexical"):
            hits = search(client, "bread dough flour yeast oven", k=10, mode=mode)
            assert all(h["doc_id"] != "bread" for h in hits), mode
        assert client.delete("/v1/documents/wiki/bread").status_code == 202  # idempotent

    with cluster.client(tokens["alpha"]) as client:  # the other tenant's copy is untouched
        assert counts(client) == (3, 3, 3)
        assert search(client, "bread dough flour yeast oven", k=1)[0]["doc_id"] == "bread"


def test_router_replicas_rise_under_a_ramp_and_fall_after_it(cluster: ServedApp) -> None:
    from ray import serve

    def routers() -> int:
        deployment = serve.status().applications[CLUSTER_APP].deployments[ROUTER]
        return int(deployment.replica_states.get("RUNNING", 0))

    eventually(lambda: routers() == 1, 90)
    token = create_token(cluster.data_dir, "ramp")
    stop = threading.Event()
    answered: list[int] = []

    def closed_loop() -> None:
        with cluster.client(token) as client:
            while not stop.is_set():
                r = client.post("/v1/search", json={"query": "lighthouse lamp", "k": 3})
                answered.append(r.status_code)

    clients = [threading.Thread(target=closed_loop) for _ in range(8)]
    for thread in clients:
        thread.start()
    try:
        # Eight requests in flight against a target of two per replica: Serve adds the second
        # Router (maxReplicas) once upscaleDelayS has passed and its metrics arrived.
        eventually(lambda: routers() == 2, 120)
    finally:
        stop.set()
        for thread in clients:
            thread.join(timeout=60)
    assert answered and set(answered) == {200}, sorted(set(answered))
    eventually(lambda: routers() == 1, 120)  # downscaleDelayS after the load stopped


def test_every_shard_publishes_its_snapshots_on_the_file_log(
    cluster: ServedApp, cluster_spec: dict[str, Any]
) -> None:
    """Each shard's publishing replica is a process of its own, and a file log has one writer
    process: each shard publishes to a snapshot log of its own (one shared log let only the
    first shard's publisher write; the other never published)."""
    from ragindex.app.serve.data_plane import DEFAULT_NAMESPACE, open_snapshot_log
    from ragindex.log import FileLog
    from ragindex.topics import plane_snapshots_topic

    spec = RagIndexSpec.model_validate(cluster_spec)
    topic = plane_snapshots_topic(spec, CLUSTER_APP, DEFAULT_NAMESPACE)
    token = create_token(cluster.data_dir, "snapshots")
    documents = [
        {"source": "wiki", "doc_id": f"d{n}", "title": "", "text": f"{text} ({n})"}
        for n, (_, text) in enumerate(list(TEXTS.values()) * 4)
    ]
    with cluster.client(token) as client:
        r = client.post("/v1/documents", json={"documents": documents}, params={"wait": "true"})
        assert r.status_code == 202 and r.json()["applied"] is True, r.text

    log = FileLog(cluster.data_dir / "log")

    def published(shard: int) -> bool:
        snapshots = open_snapshot_log(cluster.data_dir, log, shard)
        try:
            return snapshots.end_offset(topic, shard) > 0
        except InvalidInput:  # no snapshot topic yet
            return False
        finally:
            snapshots.close()

    try:
        for shard in range(spec.dense.shards):
            eventually(lambda: published(shard), 90)  # noqa: B023 (runs before the loop moves on)
    finally:
        log.close()
