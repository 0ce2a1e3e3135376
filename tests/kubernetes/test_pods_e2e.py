"""End to end on real pods: our chart's operator, KubeRay and the Serve app in containers on a
real kubelet (the `kube_node` fixture), nothing writing status but the controllers themselves.

helm install (operator image built here) -> kubectl apply the small example -> KubeRay starts
the Ray head and worker from our Ray image -> the RayService is Ready by KubeRay's own status ->
through the RagIndex's Service: 401 without a token, ingest, cited hits for a tenant ->
kubectl delete -> every pod and child object gone.

Not in the default run (marker `pods`, deselected by addopts): `scripts/setup_pods.sh` (root,
~30 min cold) then `.venv/bin/pytest -m pods tests/kubernetes/test_pods_e2e.py -s`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from ragindex.router.auth import create_token, tokens_path

pytestmark = [pytest.mark.kubernetes, pytest.mark.pods, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "ragindex-operator"
EXAMPLE = REPO / "examples" / "ragindex-small.yaml"
NAMESPACE = "e2e"
# Sizes that fit a 2-core node: Ray keeps one logical CPU per deployment (6 for the small
# spec, all on one worker) while the pods request a fraction of a core.
OPERATOR_ARGS = [
    "--head-cpus=1",
    "--head-memory=4Gi",
    "--cpu-worker-cpus=8",
    "--cpu-worker-memory=6Gi",
    "--ray-cpu-request=100m",
]
READY_TIMEOUT_S = 1200.0
GONE_TIMEOUT_S = 300.0
DOCS = [
    {
        "source": "wiki",
        "doc_id": "lighthouse",
        "title": "Lighthouses",
        "text": "A lighthouse is a tower with a bright lamp that guides ships at night.",
    },
    {
        "source": "wiki",
        "doc_id": "volcano",
        "title": "Volcanoes",
        "text": "A volcano is a rupture in the crust where lava, ash and gases escape.",
    },
]


def poll(
    what: str, probe: Callable[[], Any], timeout_s: float, on_timeout: Callable[[], str]
) -> Any:
    """Poll until `probe` returns something truthy; on timeout fail with the cluster's state."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(5.0)
    pytest.fail(f"{what} not within {timeout_s:.0f} s\n{on_timeout()}")


def test_ragindex_on_real_pods(kube_node, tmp_path: Path) -> None:
    kubectl = kube_node.kubectl

    def pods_wide() -> str:
        out = kubectl("get", "pods", "-A", "-o", "wide", check=False).stdout
        print(f"\n$ kubectl get pods -A -o wide\n{out}")
        return out

    def diagnose() -> str:
        parts = [pods_wide()]
        for args in (
            ("get", "rayservice,raycluster,ragindex,svc,pvc,pv", "-n", NAMESPACE, "-o", "yaml"),
            ("get", "events", "-A", "--sort-by=.lastTimestamp"),
            ("logs", "-n", "ragindex-system", "deploy/ragindex-operator", "--tail=60"),
            ("logs", "-n", "kuberay", "deploy/kuberay-operator", "--tail=60"),
        ):
            parts.append(kubectl(*args, check=False).stdout[-6000:])
        return "\n".join(parts)

    # The operator, from the chart and the image built here (never pulled).
    kube_node.helm(
        "install", "ragindex-operator", str(CHART),
        "--namespace", "ragindex-system", "--create-namespace",
        "--set", "image.repository=ragindex/operator", "--set", "image.tag=dev",
        "--set", "image.pullPolicy=Never", "--set", "operator.rayImage=ragindex/ray:dev",
        "--set-json", f"operator.extraArgs={json.dumps(OPERATOR_ARGS)}",
        "--wait", "--timeout=5m",
        timeout=360,
    )  # fmt: skip
    pods_wide()

    # What the RagIndex needs from its namespace: the tokens Secret and room for the data claim
    # (no dynamic provisioner on this node: a hostPath volume the claim binds to).
    kubectl("create", "namespace", NAMESPACE)
    store = tmp_path / "tokens"
    token = create_token(store, "alpha")
    kubectl(
        "-n", NAMESPACE, "create", "secret", "generic", "docs-api-tokens",
        f"--from-file=tokens.json={tokens_path(store)}",
    )  # fmt: skip
    data = tmp_path / "volume"
    data.mkdir(mode=0o777)
    data.chmod(0o777)  # the Ray image runs as uid 1000
    volume = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": "e2e-data"},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteMany"],
            "persistentVolumeReclaimPolicy": "Retain",
            "hostPath": {"path": str(data), "type": "Directory"},
        },
    }
    kubectl("apply", "-f", "-", input=yaml.safe_dump(volume))

    kubectl("-n", NAMESPACE, "apply", "-f", str(EXAMPLE))

    def ray_service() -> dict[str, Any] | None:
        out = kubectl("-n", NAMESPACE, "get", "rayservice", "-o", "json", check=False)
        items = json.loads(out.stdout or "{}").get("items") or []
        return items[0] if items else None

    def kuberay_ready() -> bool:
        rs = ray_service()
        conditions = ((rs or {}).get("status") or {}).get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    poll("RayService Ready (KubeRay's condition)", kuberay_ready, READY_TIMEOUT_S, diagnose)
    pods = pods_wide()
    assert "ragindex-operator" in pods and "kuberay-operator" in pods
    assert "-head-" in pods and "-worker-" in pods

    def index_ready() -> bool:
        out = kubectl("-n", NAMESPACE, "get", "ragindex", "docs", "-o", "json").stdout
        conditions = (json.loads(out).get("status") or {}).get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    poll("RagIndex Ready (our operator's condition)", index_ready, 300, diagnose)

    # Through the RagIndex's own Service (a ClusterIP; kube-proxy routes it from the node).
    ip = kubectl("-n", NAMESPACE, "get", "svc", "docs", "-o", "jsonpath={.spec.clusterIP}").stdout
    base = f"http://{ip}:8000"
    with httpx.Client(base_url=base, timeout=60.0) as anonymous:
        r = anonymous.post("/v1/search", json={"query": "lighthouse"})
        assert r.status_code == 401, r.text
    auth = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=base, timeout=120.0, headers=auth) as client:
        r = client.post("/v1/documents", json={"documents": DOCS})
        assert r.status_code == 200, r.text
        assert [d["added"] for d in r.json()["results"]] == [1, 1]

        def cited_hits() -> list[dict[str, Any]]:
            r = client.post("/v1/search", json={"query": "tower with a lamp for ships", "k": 2})
            assert r.status_code == 200, r.text
            hits: list[dict[str, Any]] = r.json()["hits"]
            return hits if hits and hits[0]["doc_id"] == "lighthouse" else []

        hits = poll("the ingested documents searchable", cited_hits, 120, diagnose)
        top = hits[0]
        assert (top["source"], top["doc_id"], top["title"]) == ("wiki", "lighthouse", "Lighthouses")
        assert top["chunk_id"] == "wiki:lighthouse:0"

    # Deleting the RagIndex deletes everything it owns; KubeRay takes its pods down.
    kubectl(
        "-n", NAMESPACE, "delete", "ragindex", "docs", "--wait=true", "--timeout=120s", timeout=150
    )

    def all_gone() -> bool:
        left = kubectl(
            "-n", NAMESPACE, "get", "pods,rayservice,raycluster,svc,configmap,pvc",
            "-l", "ragindex.dev/index=docs", "-o", "name", check=False,
        ).stdout.split()  # fmt: skip
        pods = kubectl("-n", NAMESPACE, "get", "pods", "-o", "name", check=False).stdout.split()
        rays = kubectl("-n", NAMESPACE, "get", "rayservice,raycluster", "-o", "name").stdout
        return not left and not pods and not rays.strip()

    poll("every pod and child object gone", all_gone, GONE_TIMEOUT_S, diagnose)
    pods_wide()
