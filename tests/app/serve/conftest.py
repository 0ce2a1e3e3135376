"""A real local Serve app (Ray in the test process) over real HTTP, with real MiniLM."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from ragindex.config import RagIndexSpec
from ragindex.netutil import free_port
from ragindex.serve_config import render_serve_config

from .readiness import wait_running_and_ready

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@dataclass
class ServedApp:
    url: str
    data_dir: Path

    def client(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=60.0)


@pytest.fixture(scope="module")  # torn down before the kill -9 test starts its own Ray
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedApp]:
    spec = RagIndexSpec.model_validate({"dense": {"shards": 2}})
    with local_app(tmp_path_factory.mktemp("serve-data"), spec) as app:
        yield app


@pytest.fixture(scope="module")
def onnx_served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedApp]:
    """The embedded runtime with the ONNX int8 encoder (one shard: the cheapest layout)."""
    spec = RagIndexSpec.model_validate(
        {"dense": {"shards": 1}, "embedder": {"backend": "onnx-int8"}}
    )
    with local_app(tmp_path_factory.mktemp("onnx-serve-data"), spec) as app:
        yield app


@contextmanager
def local_app(data_dir: Path, spec: RagIndexSpec) -> Iterator[ServedApp]:
    """The local Serve app for `spec` on a Ray of its own, ready, shut down afterwards."""
    import ray
    from ray import serve

    from ragindex.app.serve import build_app
    from ragindex.app.serve_cli import app_args

    port = free_port()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        app = build_app(app_args(data_dir, spec.model_dump(mode="json", by_alias=True)))
        serve.run(app, name="ragindex", route_prefix="/")
        served = ServedApp(f"http://127.0.0.1:{port}", data_dir)
        wait_running_and_ready(served.client, "ragindex", 300.0)
        yield served
    finally:
        serve.shutdown()
        ray.shutdown()


CLUSTER_APP = "ragindex-cluster"
# Query-path autoscaling that reacts in seconds, so a test can watch replicas come and go; tenant
# limits far above what a closed loop of eight clients sends, so admission never answers 429.
CLUSTER_SPEC = {
    "dense": {"shards": 2},
    "limits": {"maxConcurrent": 64, "requestsPerS": 100000, "burst": 100000},
    "scaling": {
        "query": {
            "minReplicas": 1,
            "maxReplicas": 2,
            "targetOngoingRequests": 2,
            "upscaleDelayS": 2,
            "downscaleDelayS": 5,
        }
    },
}


@pytest.fixture(scope="module")
def cluster_spec() -> dict[str, Any]:
    """The spec the `cluster` fixture deploys."""
    return CLUSTER_SPEC


def listening_on(port: int, timeout_s: float = 15.0) -> set[str]:
    """The names of the processes that listen on `port`: the first non-empty answer within
    `timeout_s`. HAProxy reloads its configuration by starting a new process that takes the
    port over, so for a moment no live process may hold the listener (CI saw an empty set once);
    a listener that exits while we look is skipped."""
    deadline = time.monotonic() + timeout_s
    while True:
        names = set()
        for conn in psutil.net_connections("tcp"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr.port == port and conn.pid:
                try:
                    names.add(psutil.Process(conn.pid).name())
                except psutil.NoSuchProcess:
                    continue
        if names or time.monotonic() >= deadline:
            return names
        time.sleep(0.2)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedApp]:
    """The rendered CLUSTER config (2 shards, default embedder, no reranker) deployed the way
    `serve run CONFIG` and KubeRay do it, on a Ray with more logical CPUs than cores (every
    cluster deployment asks for one CPU, and the query path may scale to two replicas), with
    the pods' ingress: HAProxy on the port in front of the Router replicas' own servers."""
    import ray
    from ray import serve
    from ray.serve.context import _get_global_client
    from ray.serve.schema import ServeDeploySchema

    from ragindex.app.serve_cli import haproxy_ingress_environment

    data_dir = tmp_path_factory.mktemp("cluster-data")
    port = free_port()
    spec = RagIndexSpec.model_validate(CLUSTER_SPEC)
    config = render_serve_config(
        spec,
        name=CLUSTER_APP,
        data_dir=str(data_dir),
        runtime="cluster",
        host="127.0.0.1",
        port=port,
    )
    ingress = haproxy_ingress_environment()
    os.environ.update(ingress)  # Ray's processes read it when they start
    ray.init(address="local", num_cpus=12, include_dashboard=False, log_to_driver=False)
    try:
        serve.start(http_options=config["http_options"])
        client = _get_global_client()
        assert client is not None
        client.deploy_apps(ServeDeploySchema.model_validate(config))
        app = ServedApp(f"http://127.0.0.1:{port}", data_dir)
        wait_running_and_ready(app.client, CLUSTER_APP)
        assert listening_on(port) == {"haproxy"}
        yield app
    finally:
        serve.shutdown()
        ray.shutdown()
        for key in ingress:
            os.environ.pop(key, None)
