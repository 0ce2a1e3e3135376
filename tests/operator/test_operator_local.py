"""`--runtime local` end to end: RagIndex in a real API server -> Serve app on real local Ray.

apply -> the operator PUTs the config to the Ray dashboard's Serve REST API -> Ready -> the
endpoint answers an authenticated search -> a generation change is refused and the app keeps
serving -> delete -> the finalizer removes the Serve app.
Ray runs in this test process (ray.init with the dashboard), so shutting it down ends only
what this test started.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kopf.testing import KopfRunner
from lightkube import Client, codecs
from lightkube.core.exceptions import ApiError
from lightkube.types import PatchType

from ragindex.config import RagIndexSpec
from ragindex.generations import index_generation
from ragindex.netutil import free_port
from ragindex.operator import OperatorOptions, register
from ragindex.operator.apply import RagIndex
from ragindex.operator.local_runtime import app_name, ray_auth_token

pytestmark = [pytest.mark.kubernetes, pytest.mark.serve, pytest.mark.slow]

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"

READY_S = 240.0


def dashboard_auth() -> dict[str, str]:
    """The header Ray's dashboard wants when the session runs Ray with token auth."""
    token = ray_auth_token(os.environ)
    return {"Authorization": f"Bearer {token}"} if token else {}


@pytest.fixture(scope="module")
def ray_dashboard() -> Iterator[str]:
    """Local Ray with its dashboard (the Serve REST API lives there), on loopback."""
    import ray

    import ragindex.app.serve  # noqa: F401  (Serve imports it by path in the replicas)

    port = free_port()
    ray.init(
        num_cpus=2,
        include_dashboard=True,
        dashboard_host="127.0.0.1",
        dashboard_port=port,
        log_to_driver=False,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if (
                    httpx.get(
                        f"{url}/api/serve/applications/", headers=dashboard_auth(), timeout=5
                    ).status_code
                    == 200
                ):
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        else:
            raise TimeoutError(f"Ray dashboard at {url} never answered the Serve API")
        yield url
    finally:
        from ray import serve

        serve.shutdown()
        ray.shutdown()


def rag_status(client: Client, ns: str, name: str) -> dict[str, Any] | None:
    try:
        return dict(client.get(RagIndex, name, namespace=ns).get("status") or {})
    except ApiError as e:
        if e.status.code == 404:
            return None
        raise


def ready(status: dict[str, Any] | None) -> bool:
    conditions = (status or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def test_local_runtime_serves_searches_and_cleans_up(
    kube_cluster: Any, kube_namespace: str, ray_dashboard: str, tmp_path: Path
) -> None:
    from ragindex.router import create_token

    ns, name = kube_namespace, "local"
    serve_port = free_port()
    options = OperatorOptions(
        runtime="local",
        ray_dashboard=ray_dashboard,
        serve_port=serve_port,
        local_data_root=str(tmp_path),
        poll_interval_s=1.0,
    )
    spec = {"dense": {"shards": 2}}
    data_dir = tmp_path / ns / name / index_generation(RagIndexSpec.model_validate(spec))
    token = create_token(data_dir, "acme")
    client = Client()
    with KopfRunner(
        ["run", "--standalone", "--namespace", ns, "--verbose"],
        registry=register(options),
        timeout=60,
    ) as runner:
        body: Any = codecs.from_dict(
            {
                "apiVersion": "ragindex.dev/v1alpha1",
                "kind": "RagIndex",
                "metadata": {"name": name, "namespace": ns},
                "spec": spec,
            }
        )
        client.create(body, namespace=ns)
        deadline = time.monotonic() + READY_S
        status = rag_status(client, ns, name)
        while not ready(status) and time.monotonic() < deadline:
            time.sleep(1)
            status = rag_status(client, ns, name)
        assert ready(status), f"not Ready in {READY_S}s: {status}\n{runner.output[-3000:]}"
        assert status is not None
        endpoint = status["endpoint"]
        assert endpoint == f"http://127.0.0.1:{serve_port}/{ns}/{name}/"

        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=endpoint, headers=headers, timeout=60) as http:
            doc = {
                "source": "wiki",
                "doc_id": "wing",
                "title": "Wings",
                "text": "The boundary layer over a swept wing thickens toward the tip.",
            }
            assert http.post("v1/documents", json={"documents": [doc]}).status_code == 202
            hits: list[dict[str, Any]] = []
            until = time.monotonic() + 30
            while not hits and time.monotonic() < until:
                r = http.post("v1/search", json={"query": "swept wing boundary layer", "k": 3})
                assert r.status_code == 200, r.text
                hits = r.json()["hits"]
                time.sleep(0.3)
            assert hits and hits[0]["doc_id"] == "wing"
            assert (
                http.post(
                    "v1/search", json={"query": "wing"}, headers={"Authorization": ""}
                ).status_code
                == 401
            )

            # A generation change is refused with a reason; the serving app is untouched.
            client.patch(
                RagIndex,
                name,
                {"spec": {"dense": {"shards": 3}}},
                namespace=ns,
                patch_type=PatchType.MERGE,
            )
            deadline = time.monotonic() + 60
            refused: dict[str, Any] = {}
            while not refused and time.monotonic() < deadline:
                time.sleep(0.5)
                refused = next(
                    (
                        c
                        for c in (rag_status(client, ns, name) or {}).get("conditions") or []
                        if c["type"] == "Reconciled" and c["status"] == "False"
                    ),
                    {},
                )
            assert refused.get("reason") == "GenerationChangeUnsupported", refused
            assert "ragindex reindex" in refused["message"]
            r = http.post("v1/search", json={"query": "swept wing boundary layer", "k": 3})
            assert r.status_code == 200 and r.json()["hits"][0]["doc_id"] == "wing", r.text
            status = rag_status(client, ns, name) or {}
            assert status["activeGeneration"] == index_generation(RagIndexSpec.model_validate(spec))

        client.delete(RagIndex, name, namespace=ns)
        deadline = time.monotonic() + 180  # Serve drains the app's replicas before it is gone
        while rag_status(client, ns, name) is not None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert rag_status(client, ns, name) is None, "the finalizer did not complete"
        # Serve lists an application as DELETING for a moment after the PUT that drops it.
        deadline = time.monotonic() + 60
        apps: dict[str, Any] = {app_name(ns, name): "?"}
        while app_name(ns, name) in apps and time.monotonic() < deadline:
            answer = httpx.get(
                f"{ray_dashboard}/api/serve/applications/", headers=dashboard_auth(), timeout=30
            ).json()
            apps = answer.get("applications") or {}
            time.sleep(0.5)
        assert app_name(ns, name) not in apps, f"Serve app still there: {apps}"
    assert runner.exception is None, runner.output[-3000:]
    client.close()
