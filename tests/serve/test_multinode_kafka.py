"""The cluster runtime on Kafka across two Ray nodes on one machine, no shared path.

A `ray.cluster_utils.Cluster` with two nodes, each with its own node root (RAGINDEX_NODE_ROOT)
and its own copy of the tokens (RAGINDEX_AUTH_DIR, as a mounted Secret would be); the log is a
real local Kafka broker. The rendered cluster config runs 2 dense shards x 2 replicas; the
replicas land on both nodes and each builds its views from the log into its node's root.
"""

from __future__ import annotations

import json
import shutil
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from ragindex.config import RagIndexSpec
from ragindex.netutil import free_port
from ragindex.router.auth import TOKENS_FILE, create_token
from ragindex.serve_config import AUTH_DIR_ENV, KAFKA_BOOTSTRAP_ENV, render_serve_config

pytestmark = [pytest.mark.serve, pytest.mark.kafka, pytest.mark.slow]

APP = "ragindex-multinode"
NODE_ROOT_ENV = "RAGINDEX_NODE_ROOT"  # ragindex.app.serve.data_plane.NODE_ROOT_ENV
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


@dataclass
class MultiNode:
    url: str
    token: str
    roots: list[Path]
    kafka: Any
    cluster: Any
    config: dict[str, Any]
    node_env: Any

    def client(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {self.token}"}, timeout=120
        )


@pytest.fixture(scope="module")
def multinode(tmp_path_factory: pytest.TempPathFactory, kafka_server: Any) -> Iterator[MultiNode]:
    import ray
    from ray import serve
    from ray.serve.context import _get_global_client
    from ray.serve.schema import ServeDeploySchema

    base = tmp_path_factory.mktemp("multinode")
    token = create_token(base / "auth", "acme")
    roots = [base / f"node{i}" for i in range(2)]
    for root in roots:
        (root / "auth").mkdir(parents=True)
        shutil.copy(base / "auth" / TOKENS_FILE, root / "auth" / TOKENS_FILE)

    def node_env(root: Path) -> dict[str, str]:
        return {
            NODE_ROOT_ENV: str(root),
            AUTH_DIR_ENV: str(root / "auth"),
            KAFKA_BOOTSTRAP_ENV: kafka_server.bootstrap,
        }

    cluster = start_cluster([node_env(r) for r in roots])
    port = free_port()
    spec = RagIndexSpec.model_validate({"dense": {"shards": 2, "replicas": 2}})
    config = render_serve_config(
        spec,
        name=APP,
        namespace=f"t{uuid.uuid4().hex[:8]}",  # fresh topics on the session's broker
        data_dir=str(base / "unused"),  # no replica writes here: node roots only
        runtime="cluster",
        host="127.0.0.1",
        port=port,
    )
    config["proxy_location"] = "HeadOnly"  # two proxies cannot share one loopback port
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        serve.start(http_options=config["http_options"], proxy_location="HeadOnly")
        client = _get_global_client()
        assert client is not None
        client.deploy_apps(ServeDeploySchema.model_validate(config))
        app = MultiNode(
            f"http://127.0.0.1:{port}", token, roots, kafka_server, cluster, config, node_env
        )
        wait_ready(app)
        yield app
    finally:
        serve.shutdown()
        ray.shutdown()
        cluster.shutdown()


def start_cluster(envs: list[dict[str, str]], attempts: int = 3) -> Any:
    """Head + one node. Ray gives a raylet 30 s to register, which a loaded 2-core box can miss:
    a node that did not come up is retried, the rest of the test is unchanged."""
    from ray.cluster_utils import Cluster

    for attempt in range(attempts):
        cluster = Cluster()
        try:
            # the head alone can hold every replica, so losing the other node loses no capacity
            cluster.add_node(num_cpus=10, env_vars=envs[0])
            cluster.add_node(num_cpus=6, env_vars=envs[1])
            return cluster
        except Exception:
            cluster.shutdown()
            if attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


def wait_ready(app: MultiNode, timeout_s: float = 600.0) -> None:
    """Until the app is RUNNING and /readyz answers 200; fail fast if it failed to deploy."""
    from ray import serve

    deadline = time.monotonic() + timeout_s
    with app.client() as client:
        while time.monotonic() < deadline:
            status = serve.status().applications.get(APP)
            if status is not None and status.status == "DEPLOY_FAILED":
                raise RuntimeError(f"{APP} failed to deploy: {status.message}")
            if status is not None and status.status == "RUNNING":
                try:
                    if client.get("/readyz").status_code == 200:
                        return
                except httpx.TransportError:
                    pass
            time.sleep(0.5)
    raise TimeoutError(f"{APP} not ready within {timeout_s} s: {serve.status()}")


def search(client: httpx.Client, query: str, **kw: Any) -> list[dict[str, Any]]:
    r = client.post("/v1/search", json={"query": query, **kw})
    assert r.status_code == 200, r.text
    hits: list[dict[str, Any]] = r.json()["hits"]
    return hits


def test_shard_replicas_on_both_nodes_serve_what_was_ingested(multinode: MultiNode) -> None:
    from ray.util.state import list_actors

    shard_nodes = {
        a.node_id
        for a in list_actors(filters=[("state", "=", "ALIVE")], limit=1000)
        if "Shard" in (a.class_name or "") and APP in (a.class_name or "")
    }
    assert len(shard_nodes) == 2, "shard replicas should run on both nodes"
    with multinode.client() as client:
        r = client.post("/v1/documents", json={"documents": DOCS}, params=WAIT)
        assert r.status_code == 202 and r.json()["applied"] is True, r.text
        top = search(client, "tower with a lamp guiding ships", k=3)[0]
        assert top["chunk_id"] == "wiki:d0:0" and "lighthouse" in top["text"]
        stats = client.get("/v1/stats").json()
        assert stats["chunks"] == stats["dense_vectors"] == stats["lexical_docs"] == len(DOCS)
    for root in multinode.roots:  # each node built its own views, under its own root
        assert any((root / "replicas").glob("*/Shard*-*/shard")), root
    assert not (multinode.roots[0].parent / "unused").exists()  # nothing shared was written


@pytest.mark.xfail(
    reason="not yet: after the second node is removed, searches hang up to the client's"
    " timeout instead of re-routing within the bound; under investigation (not run: it only"
    " spends minutes of CI reaching that timeout)",
    run=False,
)
def test_node_removed_under_query_load_then_a_new_replica_bootstraps(
    multinode: MultiNode, tmp_path: Path
) -> None:
    """Remove the second node while queries run: after Serve re-routes (bounded) every query
    answers; then add a node and a third replica per shard: it builds its views from the log."""
    import threading

    from ray.serve.context import _get_global_client
    from ray.serve.schema import ServeDeploySchema
    from ray.util.state import list_actors

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
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        shards = [
            a
            for a in list_actors(filters=[("state", "=", "ALIVE")], limit=1000)
            if "Shard" in (a.class_name or "") and APP in (a.class_name or "")
        ]
        if len(shards) == 6 and any((new_root / "replicas").glob("*/Shard*-*/shard")):
            break
        time.sleep(1)
    assert any((new_root / "replicas").glob("*/Shard*-*/shard")), "no replica on the new node"
    wait_ready(multinode)
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


@pytest.mark.xfail(
    reason="known: after the broker restarts, the ingest worker's next Kafka transaction"
    " hangs in send_offsets_to_transaction holding the writer lock (KafkaLog.committed waits"
    " behind it; reproduced at the log level in tests/log/test_kafka_log.py); not run: it hangs",
    run=False,
)
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
