"""The cluster runtime on Kafka across two Ray nodes on one machine, no shared path: what the
multi-node tests (test_multinode_kafka.py, test_chaos.py) start.

A `ray.cluster_utils.Cluster` with two nodes, each with its own node root (RAGINDEX_NODE_ROOT)
and its own copy of the tokens (RAGINDEX_AUTH_DIR, as a mounted Secret would be); the log is a
real local Kafka broker. Each view replica builds its views from the log into its node's root.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from ragindex.config import RagIndexSpec
from ragindex.netutil import free_port
from ragindex.router import create_token
from ragindex.router.auth import TOKENS_FILE
from ragindex.serve_config import AUTH_DIR_ENV, KAFKA_BOOTSTRAP_ENV, render_serve_config

from .readiness import wait_running_and_ready

NODE_ROOT_ENV = "RAGINDEX_NODE_ROOT"  # ragindex.app.serve.data_plane.NODE_ROOT_ENV
READY_BOUND_S = 600.0


@dataclass
class MultiNode:
    app: str
    url: str
    token: str
    roots: list[Path]
    kafka: Any
    cluster: Any
    config: dict[str, Any]

    def client(self, timeout_s: float = 120.0) -> httpx.Client:
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {self.token}"}, timeout=timeout_s
        )

    def node_env(self, root: Path) -> dict[str, str]:
        return node_env(root, self.kafka.bootstrap)


def node_env(root: Path, bootstrap: str) -> dict[str, str]:
    return {
        NODE_ROOT_ENV: str(root),
        AUTH_DIR_ENV: str(root / "auth"),
        KAFKA_BOOTSTRAP_ENV: bootstrap,
    }


@contextmanager
def multinode_app(
    base: Path, kafka_server: Any, spec: RagIndexSpec, app: str
) -> Iterator[MultiNode]:
    """`spec`'s cluster app on a head and one more node, ready; shut down afterwards."""
    import ray
    from ray import serve
    from ray.serve.context import _get_global_client
    from ray.serve.schema import ServeDeploySchema

    token = create_token(base / "auth", "acme")
    roots = [base / f"node{i}" for i in range(2)]
    for root in roots:
        (root / "auth").mkdir(parents=True)
        shutil.copy(base / "auth" / TOKENS_FILE, root / "auth" / TOKENS_FILE)
    cluster = start_cluster([node_env(r, kafka_server.bootstrap) for r in roots])
    port = free_port()
    config = render_serve_config(
        spec,
        name=app,
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
        url = f"http://127.0.0.1:{port}"
        served = MultiNode(app, url, token, roots, kafka_server, cluster, config)
        wait_running_and_ready(served.client, app, READY_BOUND_S)
        yield served
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


def replica_actors(app: str, deployment: str | None = None) -> list[dict[str, Any]]:
    """The alive Serve replica actors of `app` (of one deployment, if named), from the GCS's
    actor table (the dashboard's state API, which `ray.util.state` needs, does not always
    start on a loaded box). Replica actors are named SERVE_REPLICA::<app>#<deployment>#<id>."""
    from ray._private.state import actors

    found = []
    for a in actors().values():
        parts = (a.get("Name") or "").removeprefix("SERVE_REPLICA::").split("#")
        if a["State"] != "ALIVE" or len(parts) != 3 or parts[0] != app:
            continue
        if deployment is None or parts[1] == deployment:
            found.append(a)
    return found


def shard_replica_nodes(app: str) -> list[str]:
    """The node of every alive Shard replica."""
    return [
        a["Address"]["NodeID"]
        for a in replica_actors(app)
        if a["Name"].split("#")[1].startswith("Shard")
    ]


def log_ends_and_reports(app: MultiNode) -> tuple[dict[int, int], list[Any]]:
    """What a view replica must have applied to be current (per chunks partition, the offset
    after its last record: commit markers follow it), and every report in the app's progress
    registry (router.ViewReport)."""
    import ray

    from ragindex.app.serve.data_plane import applied_target
    from ragindex.app.serve.progress import RAY_NAMESPACE
    from ragindex.generations import index_generation
    from ragindex.log import KafkaLog
    from ragindex.topics import chunks_topic

    args = app.config["applications"][0]["args"]
    spec = RagIndexSpec.model_validate(args["spec"])
    generation = index_generation(spec)
    log = KafkaLog(app.kafka.bootstrap)
    try:
        topic = chunks_topic(args["namespace"], app.app, generation)
        ends = {p: applied_target(log, topic, p) for p in range(spec.dense.shards)}
    finally:
        log.close()
    registry = ray.get_actor(f"progress.{app.app}.{generation}", namespace=RAY_NAMESPACE)
    return ends, list(ray.get(registry.reports.remote()))
