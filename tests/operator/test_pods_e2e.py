"""End to end on real pods: the product as users run it, on a real kubelet (`kube_node`), with
nothing writing status but the controllers themselves.

helm install (our chart, the operator image built here) -> kubectl apply the small example
(log on an external Kafka: the `node_kafka` broker) -> KubeRay starts head and worker from our
Ray image -> the RayService is Ready by KubeRay's status, the RagIndex Ready with its endpoint ->
through the RagIndex's Service: 401 without a token, ingest with ?wait=true, cited hits and an
answer for a tenant, nothing for another tenant -> a generation change under load (an embedder
change, then dense.shards 2 -> 3, each backfilled, checked and promoted while one client writes
and another searches) -> autoscaling (a closed-loop ramp adds Router replicas, they go again
after it) -> kubectl delete -> every pod and child object gone.

Marker `pods`: `scripts/test.sh` prepares the node (`scripts/setup_pods.sh`) and runs it.
The figures (failed searches, empty pages, lost writes, time to promotion, the autoscaling
timeline) are printed and written to `$RAGINDEX_CACHE/reports/pods-e2e.json`.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from ragindex.config import RagIndexSpec
from ragindex.generations import index_generation
from ragindex.measure.evals import Collection
from ragindex.router import create_token, tokens_path
from ragindex.serve_config import ROUTER

from .conftest import CACHE, KafkaServer, KubeCluster

# The whole journey takes tens of minutes on 2 cores; each wait inside has its own bound.
pytestmark = [
    pytest.mark.kubernetes,
    pytest.mark.pods,
    pytest.mark.slow,
    pytest.mark.timeout(3600),
]

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "ragindex-operator"
EXAMPLE = REPO / "examples" / "ragindex-small.yaml"
REPORT = CACHE / "reports" / "pods-e2e.json"
FAILURE = CACHE / "reports" / "pods-e2e-failure.txt"
NAMESPACE = "e2e"
INDEX = "docs"
# Sizes that fit a 2-core node: Ray keeps its logical CPUs per pod while the pods request a
# fraction of a core. One worker holds a generation at its most replicas (3 shards and every
# autoscaled pool at its maximum: 11 CPUs): a second worker would not fit the node's memory
# beside the generation being replaced, and Ray's autoscaler would wait on it.
OPERATOR_ARGS = [
    "--head-cpus=1",
    "--head-memory=3Gi",
    "--cpu-worker-cpus=12",
    "--cpu-worker-memory=6Gi",
    "--ray-cpu-request=100m",
]
# Upper bounds for states that do come on a healthy node; a failure prints the pods' events
# and logs instead of waiting on.
READY_TIMEOUT_S = 900.0
PROMOTION_TIMEOUT_S = 900.0
GONE_TIMEOUT_S = 300.0
KNOWN_QUERY = "tower with a lamp for ships"
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
        time.sleep(3.0)
    pytest.fail(f"{what} not within {timeout_s:.0f} s\n{on_timeout()}")


@dataclass
class Load:
    """One client writing (each acknowledged write recorded) and one searching for a known
    document at a steady rate, through the RagIndex's Service, until `stop`. Each write has a
    distinct real title (Cranfield's): the promotion's self-check samples live writes, and
    hundreds of near-identical titles ("Load record 57") left one out of its own top 10 under
    int8 vectors, failing the check for the test's data, not for the index."""

    base: str
    token: str
    titles: list[str]
    write_interval_s: float = 0.5
    search_interval_s: float = 0.25
    acked: list[int] = field(default_factory=list)
    write_failures: list[str] = field(default_factory=list)
    searches: int = 0
    failed_searches: list[str] = field(default_factory=list)
    empty_pages: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    @staticmethod
    def marker(i: int) -> str:
        return f"zq{i}x"

    def start(self) -> None:
        for target in (self._write, self._search):
            thread = threading.Thread(target=target, daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=120)

    def _client(self) -> httpx.Client:
        # A new connection per request, as a load balancer's client would see the Service:
        # kube-proxy picks the serving generation's pods per connection.
        return httpx.Client(
            base_url=self.base,
            timeout=30.0,
            headers={"Authorization": f"Bearer {self.token}"},
            limits=httpx.Limits(max_keepalive_connections=0),
        )

    def _write(self) -> None:
        i = 0
        with self._client() as client:
            while not self._stop.wait(self.write_interval_s):
                i += 1
                doc = {
                    "source": "load",
                    "doc_id": f"w{i}",
                    "title": self.titles[i % len(self.titles)],
                    "text": f"Harbour log entry {i} carries the marker {self.marker(i)}.",
                }
                try:
                    r = client.post("/v1/documents", json={"documents": [doc]})
                except httpx.HTTPError as err:
                    self.write_failures.append(f"w{i}: {type(err).__name__}")
                    continue
                if r.status_code == 202:  # accepted: durable in the log
                    self.acked.append(i)
                else:
                    self.write_failures.append(f"w{i}: {r.status_code} {r.text[:200]}")

    def _search(self) -> None:
        with self._client() as client:
            while not self._stop.wait(self.search_interval_s):
                self.searches += 1
                try:
                    r = client.post("/v1/search", json={"query": KNOWN_QUERY, "k": 4})
                except httpx.HTTPError as err:
                    self.failed_searches.append(type(err).__name__)
                    continue
                if r.status_code != 200:
                    self.failed_searches.append(f"{r.status_code} {r.text[:200]}")
                elif not any(h["doc_id"] == "lighthouse" for h in r.json()["hits"]):
                    self.empty_pages += 1


class Node:
    """The test's view of the cluster: kubectl with the pods' state on failure."""

    def __init__(self, cluster: KubeCluster) -> None:
        self.kubectl = cluster.kubectl
        self.started = time.monotonic()
        # Each change of a generation's entry in status, as first seen: a failure prints the
        # history, which the cluster's final state alone does not tell.
        self.history: list[str] = []

    def show(self, *args: str) -> str:
        out = self.kubectl(*args, check=False).stdout
        text = f"$ kubectl {' '.join(args)}\n{out}"
        print(text)
        return text

    def diagnose(self) -> str:
        parts = [
            self.show("get", "pods", "-A", "-o", "wide"),
            self.show("-n", NAMESPACE, "get", "ragindex,rayservice,raycluster"),
        ]
        for args in (
            ("-n", NAMESPACE, "get", "ragindex", INDEX, "-o", "jsonpath={.status}"),
            ("-n", NAMESPACE, "get", "ragindex,rayservice", "-o", "yaml"),
            ("get", "events", "-A", "--sort-by=.lastTimestamp"),
            ("logs", "-n", "ragindex-system", "deploy/ragindex-operator", "--tail=80"),
            ("logs", "-n", "kuberay", "deploy/kuberay-operator", "--tail=40"),
        ):
            parts.append(self.kubectl(*args, check=False).stdout[-8000:])
        for pod in self.kubectl(
            "-n", NAMESPACE, "get", "pods", "-o", "name", check=False
        ).stdout.split():
            logs = self.kubectl("-n", NAMESPACE, "logs", pod, "--all-containers", "--tail=40",
                                check=False)  # fmt: skip
            parts.append(f"--- {pod}\n{logs.stdout[-4000:]}{logs.stderr[-1000:]}")
        text = "\n".join(parts)
        # CI keeps only the head and tail of a run's output: the whole state goes to a file
        # that outlives the node, and the tail ends with where each generation stands.
        FAILURE.parent.mkdir(parents=True, exist_ok=True)
        FAILURE.write_text(text)
        entries = "{range .status.generations[*]}{.id} {.phase} {.reason}{'\\n'}{end}"
        self.show("-n", NAMESPACE, "get", "ragindex", INDEX, "-o", f"jsonpath={entries}")
        self.show("logs", "-n", "ragindex-system", "deploy/ragindex-operator", "--tail=25")
        print("the generations in status, each change as first seen:")
        print("\n".join(self.history[-40:]))
        print(f"(the cluster's whole state: {FAILURE})")
        return text

    def serve_logs(self, generation: str, deployment: str, tail: int = 60) -> str:
        """The last lines of each of `deployment`'s Serve replica logs in `generation`'s pods."""
        parts = []
        pods = self.kubectl(
            "-n", NAMESPACE, "get", "pods", "-o", "name",
            "-l", f"ragindex.dev/generation={generation}", check=False,
        ).stdout.split()  # fmt: skip
        for pod in pods:
            logs = self.kubectl(
                "-n", NAMESPACE, "exec", pod, "--", "sh", "-c",
                f"for f in /tmp/ray/session_latest/logs/serve/replica_*{deployment}*.log; do"
                f' [ -f "$f" ] && echo "== $f" && tail -n {tail} "$f"; done',
                check=False,
            )  # fmt: skip
            parts.append(f"--- {pod}\n{logs.stdout[-6000:]}{logs.stderr[-500:]}")
        return "\n".join(parts)

    def ragindex(self) -> dict[str, Any]:
        out = self.kubectl("-n", NAMESPACE, "get", "ragindex", INDEX, "-o", "json").stdout
        return dict(json.loads(out))

    def condition(self, obj: dict[str, Any], type_: str) -> bool:
        conditions = (obj.get("status") or {}).get("conditions") or []
        return any(c["type"] == type_ and c["status"] == "True" for c in conditions)

    def ray_service(self, generation: str) -> dict[str, Any] | None:
        out = self.kubectl(
            "-n", NAMESPACE, "get", "rayservice", f"{INDEX}-{generation}", "-o", "json",
            check=False,
        )  # fmt: skip
        return json.loads(out.stdout) if out.returncode == 0 else None

    def serving(self, generation: str) -> bool:
        """The RagIndex serves `generation`: promoted, and Ready by our operator. A generation
        marked Failed never will (the operator does not retry it): fail at once, saying why."""
        index = self.ragindex()
        status = index.get("status") or {}
        seen = [
            f"{e.get('id')} {e.get('phase')} {e.get('progress', '')} {e.get('reason', '')}"
            for e in status.get("generations") or []
        ]
        if not self.history or self.history[-1].split(" ", 1)[1] != " | ".join(seen):
            self.history.append(f"{time.monotonic() - self.started:.0f}s {' | '.join(seen)}")
        for entry in status.get("generations") or []:
            if entry.get("id") == generation and entry.get("phase") == "Failed":
                pytest.fail(
                    f"generation {generation} failed: {entry.get('reason')}\n{self.diagnose()}"
                )
        return status.get("activeGeneration") == generation and self.condition(index, "Ready")

    def dashboard(self, generation: str) -> tuple[str, dict[str, str]]:
        """The generation's Ray dashboard URL and the header its token auth asks for (KubeRay
        keeps the token in a Secret named after the RayCluster)."""
        head = json.loads(
            self.kubectl(
                "-n",
                NAMESPACE,
                "get",
                "pods",
                "-o",
                "json",
                "-l",
                f"ragindex.dev/generation={generation},ray.io/node-type=head",
            ).stdout
        )["items"][0]
        cluster = head["metadata"]["labels"]["ray.io/cluster"]
        token = self.kubectl(
            "-n", NAMESPACE, "get", "secret", cluster, "-o", "jsonpath={.data.auth_token}"
        ).stdout
        header = {"x-ray-authorization": f"Bearer {base64.b64decode(token).decode()}"}
        return f"http://{head['status']['podIP']}:8265", header


def spec_generation(patch: dict[str, Any]) -> str:
    """The generation the example names once `patch` (a merge patch of its spec) is applied."""
    spec = yaml.safe_load(EXAMPLE.read_text())["spec"]
    for key, value in patch.items():
        spec[key] = {**spec.get(key, {}), **value}
    return index_generation(RagIndexSpec.model_validate(spec))


def router_replicas(dashboard: tuple[str, dict[str, str]]) -> int:
    """Running Router replicas, by Serve's own controller (the head's dashboard API)."""
    url, header = dashboard
    r = httpx.get(f"{url}/api/serve/applications/", headers=header, timeout=10.0)
    r.raise_for_status()
    deployments = r.json()["applications"][INDEX]["deployments"]  # the app is named after it
    return sum(1 for rep in deployments[ROUTER]["replicas"] if rep["state"] == "RUNNING")


def test_ragindex_on_real_pods(
    kube_node: KubeCluster, node_kafka: KafkaServer, cranfield: Collection, tmp_path: Path
) -> None:
    node = Node(kube_node)
    report: dict[str, Any] = {}

    # The operator, from the chart and the image built here (never pulled).
    kube_node.helm(
        "install", "ragindex-operator", str(CHART),
        "--namespace", "ragindex-system", "--create-namespace",
        "--set", "image.repository=ragindex/operator", "--set", "image.tag=dev",
        "--set", "image.pullPolicy=Never", "--set", "operator.rayImage=ragindex/ray:dev",
        # Every namespace is watched; the RagIndex's namespace is made after the install.
        "--set", "rbac.clusterWideSecrets=true",
        "--set-json", f"operator.extraArgs={json.dumps(OPERATOR_ARGS)}",
        "--wait", "--timeout=5m",
        timeout=360,
    )  # fmt: skip

    # What the RagIndex needs from its namespace: the tokens Secret, labelled for this index.
    kubectl = kube_node.kubectl
    kubectl("create", "namespace", NAMESPACE)
    store = tmp_path / "tokens"
    alpha = create_token(store, "alpha")
    beta = create_token(store, "beta")
    kubectl(
        "-n", NAMESPACE, "create", "secret", "generic", "docs-api-tokens",
        f"--from-file=tokens.json={tokens_path(store)}",
    )  # fmt: skip
    kubectl(
        "-n", NAMESPACE, "label", "secret", "docs-api-tokens", f"ragindex.dev/secret-for={INDEX}"
    )

    started = time.monotonic()
    kubectl("-n", NAMESPACE, "apply", "-f", str(EXAMPLE))
    first = spec_generation({})

    def kuberay_ready() -> bool:
        rs = node.ray_service(first)
        return rs is not None and node.condition(rs, "Ready")

    poll("RayService Ready (KubeRay's condition)", kuberay_ready, READY_TIMEOUT_S, node.diagnose)
    report["rayservice_ready_s"] = round(time.monotonic() - started, 1)
    poll("RagIndex Ready (our operator)", lambda: node.serving(first), 300, node.diagnose)
    report["ragindex_ready_s"] = round(time.monotonic() - started, 1)
    index = node.ragindex()
    assert index["status"]["endpoint"] == f"http://{INDEX}.{NAMESPACE}.svc:8000/"
    pods = node.show("get", "pods", "-A", "-o", "wide")
    node.show("-n", NAMESPACE, "get", "ragindex,rayservice")
    assert "ragindex-operator" in pods and "kuberay-operator" in pods
    assert "-head-" in pods and "-worker-" in pods

    # Through the RagIndex's own Service (a ClusterIP; kube-proxy routes it from the node).
    ip = kubectl("-n", NAMESPACE, "get", "svc", INDEX, "-o", "jsonpath={.spec.clusterIP}").stdout
    base = f"http://{ip}:8000"
    with httpx.Client(base_url=base, timeout=60.0) as anonymous:
        assert anonymous.post("/v1/search", json={"query": "lighthouse"}).status_code == 401
    with httpx.Client(
        base_url=base, timeout=120.0, headers={"Authorization": f"Bearer {alpha}"}
    ) as client:
        r = client.post("/v1/documents", params={"wait": "true"}, json={"documents": DOCS})
        assert r.status_code == 202, r.text
        body = r.json()
        assert body["applied"] is True, body  # ?wait=true: searchable on every view
        assert [d["doc_id"] for d in body["accepted"]] == ["lighthouse", "volcano"]
        r = client.post("/v1/search", json={"query": KNOWN_QUERY, "k": 2})
        assert r.status_code == 200, r.text
        top = r.json()["hits"][0]
        assert (top["source"], top["doc_id"], top["title"]) == ("wiki", "lighthouse", "Lighthouses")
        assert top["chunk_id"] == "wiki:lighthouse:0"
        # HAProxy holds the Serve port on the pods (the operator's HAPROXY_INGRESS_ENV), not
        # Serve's Python proxy: a running haproxy process in the index's Ray pods.
        find_haproxy = (
            "import os; print(sum(open(f'/proc/{p}/comm').read().strip() == 'haproxy'"
            " for p in os.listdir('/proc') if p.isdigit()))"
        )
        ray_pods = [
            name
            for name in kubectl("-n", NAMESPACE, "get", "pods", "-o", "name").stdout.split()
            if "-head-" in name or "-worker-" in name
        ]
        running = {
            name: kubectl("-n", NAMESPACE, "exec", name, "--", "python", "-c", find_haproxy).stdout
            for name in ray_pods
        }
        assert any(int(out.strip() or 0) > 0 for out in running.values()), running
        r = client.post("/v1/answer", json={"question": "What guides ships at night?"})
        assert r.status_code == 200, r.text
        answer = r.json()
        assert not answer["refused"] and "wiki:lighthouse:0" in answer["citations"], answer
    with httpx.Client(
        base_url=base, timeout=60.0, headers={"Authorization": f"Bearer {beta}"}
    ) as other:
        r = other.post("/v1/search", json={"query": KNOWN_QUERY, "k": 8})
        assert r.status_code == 200 and r.json()["hits"] == [], r.text

    # A generation change under load: the embedder (ONNX fp32 -> int8, a new identity), then
    # the dense layout (2 -> 3 shards); each is backfilled from the log, checked and promoted
    # while writes and searches go on through the Service.
    titles = [t for t in dict.fromkeys(d.title for d in cranfield.corpus.values()) if t.strip()]
    load = Load(base, alpha, titles)
    load.start()
    promotions = []
    changed: dict[str, Any] = {}
    try:
        for patch in ({"embedder": {"backend": "onnx-int8"}}, {"dense": {"shards": 3}}):
            changed |= patch
            target = spec_generation(changed)
            t0 = time.monotonic()
            kubectl("-n", NAMESPACE, "patch", "ragindex", INDEX, "--type=merge",
                    "-p", json.dumps({"spec": patch}))  # fmt: skip
            poll(f"generation {target} promoted", lambda t=target: node.serving(t),
                 PROMOTION_TIMEOUT_S, node.diagnose)  # fmt: skip
            promotions.append(
                {"change": patch, "generation": target, "seconds": round(time.monotonic() - t0)}
            )
    finally:
        load.stop()

    # Every acknowledged write is searchable on the promoted generation. The check is one
    # tenant's sequential searches, faster than its rate limit (50/s, burst 100): a 429 waits
    # its Retry-After and asks again, so only a search that answers counts.
    def missing_writes(candidates: list[int]) -> list[int]:
        left = []
        with httpx.Client(
            base_url=base, timeout=60.0, headers={"Authorization": f"Bearer {alpha}"}
        ) as client:
            for i in candidates:
                query = {"query": Load.marker(i), "k": 3, "mode": "lexical"}
                r = client.post("/v1/search", json=query)
                for _ in range(10):
                    if r.status_code != 429:
                        break
                    time.sleep(float(r.headers.get("Retry-After", "1")))
                    r = client.post("/v1/search", json=query)
                if r.status_code != 200 or f"w{i}" not in [h["doc_id"] for h in r.json()["hits"]]:
                    left.append(i)
        return left

    deadline = time.monotonic() + 60
    missing = missing_writes(load.acked)
    while missing and time.monotonic() < deadline:
        time.sleep(5)
        missing = missing_writes(missing)
    if missing:
        # Where the writes are (a document read goes to the shards, a lexical search to
        # Lexical), what the Router says is behind, and the views' own logs.
        with httpx.Client(
            base_url=base, timeout=60.0, headers={"Authorization": f"Bearer {alpha}"}
        ) as client:
            reads = [client.get(f"/v1/documents/load/w{i}") for i in missing[:3]]
            ready = client.get("/readyz")
        serving = promotions[-1]["generation"]
        lost = "\n".join(
            [
                f"GET w{i}: {r.status_code} {r.text[:300]}"
                for i, r in zip(missing[:3], reads, strict=True)
            ]
            + [f"/readyz: {ready.status_code} {ready.text[:500]}"]
            + [node.serve_logs(serving, d) for d in ("Lexical", "Router")]
        )
        print(lost)
        FAILURE.parent.mkdir(parents=True, exist_ok=True)
        FAILURE.write_text(f"{lost}\n{node.diagnose()}")
    report["generation_change"] = {
        "promotions": promotions,
        "searches": load.searches,
        "failed_searches": len(load.failed_searches),
        "failed_search_samples": load.failed_searches[:5],
        "empty_pages": load.empty_pages,
        "acknowledged_writes": len(load.acked),
        "write_failures": len(load.write_failures),
        "write_failure_samples": load.write_failures[:5],
        "acknowledged_writes_missing": missing,
    }
    print(f"generation change under load: {json.dumps(report['generation_change'])}")
    node.show("-n", NAMESPACE, "get", "ragindex,rayservice")

    # Autoscaling: a closed-loop ramp against the query endpoint; Serve's autoscaler adds Router
    # replicas, and removes them once the load stops (downscaleDelayS in the example).
    dashboard = node.dashboard(promotions[-1]["generation"])
    timeline: list[dict[str, Any]] = []
    ramp_t0 = time.monotonic()

    def sample(clients: int, latencies: list[float]) -> None:
        p99 = sorted(latencies)[int(0.99 * (len(latencies) - 1))] if latencies else None
        timeline.append({
            "t_s": round(time.monotonic() - ramp_t0),
            "clients": clients,
            "router_replicas": router_replicas(dashboard),
            "p99_ms": round(p99 * 1000, 1) if p99 is not None else None,
            "requests": len(latencies),
        })  # fmt: skip

    def closed_loop(stop: threading.Event, latencies: list[float]) -> None:
        with httpx.Client(
            base_url=base, timeout=60.0, headers={"Authorization": f"Bearer {alpha}"}
        ) as client:
            while not stop.is_set():
                t = time.perf_counter()
                r = client.post("/v1/search", json={"query": KNOWN_QUERY, "k": 4})
                if r.status_code == 200:
                    latencies.append(time.perf_counter() - t)

    sample(0, [])
    scaled_up = False
    for clients in (2, 6, 12):
        stop = threading.Event()
        latencies: list[float] = []
        with ThreadPoolExecutor(clients) as pool:
            for _ in range(clients):
                pool.submit(closed_loop, stop, latencies)
            for _ in range(6):
                time.sleep(10)
                sample(clients, latencies)
                latencies.clear()
                scaled_up = scaled_up or timeline[-1]["router_replicas"] > 1
            stop.set()
        if scaled_up:
            break
    assert scaled_up, f"no Router replica was added under load: {timeline}"

    def scaled_down() -> bool:
        sample(0, [])
        return bool(timeline[-1]["router_replicas"] == 1)

    poll("Router replicas back to 1 after the load", scaled_down, 240, node.diagnose)
    report["autoscaling"] = timeline
    print(f"autoscaling: {json.dumps(timeline)}")
    node.show("get", "pods", "-A", "-o", "wide")

    # Deleting the RagIndex deletes everything it owns; KubeRay takes its pods down.
    kubectl("-n", NAMESPACE, "delete", "ragindex", INDEX, "--wait=true", "--timeout=180s",
            timeout=200)  # fmt: skip

    def all_gone() -> bool:
        left = kubectl(
            "-n", NAMESPACE, "get", "pods,rayservice,raycluster,svc,configmap,networkpolicy",
            "-l", f"ragindex.dev/index={INDEX}", "-o", "name", check=False,
        ).stdout.split()  # fmt: skip
        pods = kubectl("-n", NAMESPACE, "get", "pods", "-o", "name", check=False).stdout.split()
        rays = kubectl("-n", NAMESPACE, "get", "rayservice,raycluster", "-o", "name").stdout
        return not left and not pods and not rays.strip()

    poll("every pod and child object gone", all_gone, GONE_TIMEOUT_S, node.diagnose)
    report["total_s"] = round(time.monotonic() - started)
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(json.dumps(report, indent=2))
    print(f"pods e2e report ({REPORT}):\n{json.dumps(report, indent=2)}")

    change = report["generation_change"]
    assert change["acknowledged_writes"] > 0 and not change["acknowledged_writes_missing"], change
    assert change["failed_searches"] == 0 and change["empty_pages"] == 0, change
