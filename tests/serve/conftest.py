"""A real local Serve app (Ray in the test process) over real HTTP, with real MiniLM."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from ragindex.config import RagIndexSpec
from ragindex.netutil import free_port
from ragindex.serve_config import render_serve_config

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
    import ray
    from ray import serve

    from ragindex.app.serve import build_app
    from ragindex.app.serve_cli import app_args
    from ragindex.config import RagIndexSpec

    data_dir = tmp_path_factory.mktemp("serve-data")
    port = free_port()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        spec = RagIndexSpec.model_validate({"dense": {"shards": 2}})
        app = build_app(app_args(data_dir, spec.model_dump(mode="json", by_alias=True)))
        serve.run(app, name="ragindex", route_prefix="/")
        served = ServedApp(f"http://127.0.0.1:{port}", data_dir)
        _wait_ready(served)
        yield served
    finally:
        serve.shutdown()
        ray.shutdown()


def _wait_ready(served: ServedApp, timeout_s: float = 300.0) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    with served.client() as client:
        while time.monotonic() < deadline:
            try:
                if client.get("/readyz").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.25)
    raise TimeoutError(f"{served.url} not ready within {timeout_s} s")


CLUSTER_APP = "ragindex-cluster"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedApp]:
    import ray
    from ray import serve
    from ray.serve.context import _get_global_client
    from ray.serve.schema import ServeDeploySchema

    """The rendered CLUSTER config (2 shards, default embedder, no reranker) deployed the way
    `serve run CONFIG` and KubeRay do it, on a Ray with more logical CPUs than cores (every
    cluster deployment asks for one CPU)."""
    data_dir = tmp_path_factory.mktemp("cluster-data")
    port = free_port()
    spec = RagIndexSpec.model_validate({"dense": {"shards": 2}})
    config = render_serve_config(
        spec,
        name=CLUSTER_APP,
        data_dir=str(data_dir),
        runtime="cluster",
        host="127.0.0.1",
        port=port,
    )
    ray.init(address="local", num_cpus=8, include_dashboard=False, log_to_driver=False)
    try:
        serve.start(http_options=config["http_options"])
        client = _get_global_client()
        assert client is not None
        client.deploy_apps(ServeDeploySchema.model_validate(config))
        app = ServedApp(f"http://127.0.0.1:{port}", data_dir)
        _wait_running_and_ready(app, CLUSTER_APP)
        yield app
    finally:
        serve.shutdown()
        ray.shutdown()


def _wait_running_and_ready(app: ServedApp, name: str, timeout_s: float = 420.0) -> None:
    """Until the app is RUNNING and /readyz says 200; fail fast if a deployment fails."""
    from ray import serve

    deadline = time.monotonic() + timeout_s
    with app.client() as client:
        while time.monotonic() < deadline:
            status = serve.status().applications.get(name)
            if status is not None and status.status == "DEPLOY_FAILED":
                raise RuntimeError(f"{name} failed to deploy: {status.message}")
            if status is not None and status.status == "RUNNING":
                try:
                    if client.get("/readyz").status_code == 200:
                        return
                except httpx.TransportError:
                    pass
            time.sleep(0.5)
    raise TimeoutError(f"{name} not ready within {timeout_s} s: {serve.status()}")
