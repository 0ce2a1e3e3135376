"""The operator in-process (kopf.testing.KopfRunner) against a real kube-apiserver.

The harness (conftest.py) runs etcd + kube-apiserver + kube-controller-manager with the vendored
KubeRay/ECK/Strimzi CRDs: every object the operator applies is admitted and validated by the real
API server under those schemas, and deletion is done by the real garbage collector. There is no
KubeRay controller, so where a test needs a RayService to become ready it writes the status
KubeRay would write (the status subresource), which is all the operator reads.
"""

from __future__ import annotations

import base64
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal, TypeVar

import pytest
import yaml
from kopf.testing import KopfRunner
from lightkube import Client, codecs
from lightkube.core.exceptions import ApiError
from lightkube.models.core_v1 import PersistentVolumeClaimSpec, VolumeResourceRequirements
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap, PersistentVolumeClaim, Secret, Service
from lightkube.resources.networking_v1 import NetworkPolicy
from lightkube.types import PatchType

from ragindex.config import RagIndexSpec
from ragindex.generations import BuildReport, index_generation
from ragindex.operator import OperatorOptions, register
from ragindex.operator.apply import (
    Elasticsearch,
    Kafka,
    KafkaNodePool,
    KafkaTopic,
    RagIndex,
    RayService,
)
from ragindex.operator.objects import (
    LABEL_GENERATION,
    LABEL_INDEX,
    LABEL_MANAGED_BY,
    REPORT_TOKEN_KEY,
    network_policy_name,
    ray_service_name,
    report_token_secret,
)
from ragindex.operator.ownership import SECRET_LABEL

pytestmark = [pytest.mark.kubernetes, pytest.mark.slow]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ragindex.yaml"
WAIT_S = 60.0
T = TypeVar("T")

os.environ.setdefault("OMP_NUM_THREADS", "1")


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = WAIT_S) -> T:
    """Poll `probe` until it returns something truthy; fail with `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = probe()
        except ApiError as e:
            last = e
        if last and not isinstance(last, ApiError):
            return last
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")


def get_or_none(client: Client, res: Any, name: str, namespace: str) -> Any:
    try:
        return client.get(res, name, namespace=namespace)
    except ApiError as e:
        if e.status.code == 404:
            return None
        raise


def gone(client: Client, res: Any, name: str, namespace: str) -> bool:
    """Deleted, or being deleted: the harness runs no pvc-protection controller, so a claim
    keeps its `kubernetes.io/pvc-protection` finalizer after the delete is accepted."""
    obj = get_or_none(client, res, name, namespace)
    if obj is None:
        return True
    meta = plain(obj)["metadata"]
    return res is PersistentVolumeClaim and bool(meta.get("deletionTimestamp"))


def plain(obj: Any) -> dict[str, Any]:
    """Typed lightkube objects and generic ones alike, as plain dicts."""
    return dict(obj.to_dict()) if hasattr(obj, "to_dict") else dict(obj)


def status_of(client: Client, name: str, namespace: str) -> dict[str, Any]:
    obj = client.get(RagIndex, name, namespace=namespace)
    return dict(obj.get("status") or {})


def condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), {})


@pytest.fixture
def client(kube_cluster: Any) -> Iterator[Client]:
    c = Client()
    yield c
    c.close()


class BuildReports:
    """Serves generations' build reports over real HTTP, as each generation's Router does at
    /v1/generation (there are no pods here); a test sets what a generation reports. Each ask's
    Authorization header is kept: the Routers ask for the index's report credential."""

    def __init__(self) -> None:
        self.reports: dict[str, dict[str, Any]] = {}
        self.asked_with: set[str | None] = set()
        reports, asked_with = self.reports, self.asked_with

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                asked_with.add(self.headers.get("Authorization"))
                body = reports.get(self.path.rsplit("/", 1)[-1])
                data = json.dumps(body).encode()
                self.send_response(200 if body is not None else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, name: str, namespace: str, generation: str) -> str:
        return f"http://127.0.0.1:{self.server.server_port}/{namespace}/{name}/{generation}"

    def set(self, generation: str, consumed: int, end: int, checks: dict[str, str] | None) -> None:
        self.reports[generation] = BuildReport(generation, consumed, end, checks).to_json()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def reports() -> Iterator[BuildReports]:
    served = BuildReports()
    yield served
    served.close()


@pytest.fixture
def operator(kube_cluster: Any, kube_namespace: str, reports: BuildReports) -> Iterator[KopfRunner]:
    """The cluster-runtime operator watching the test's namespace, polling readiness every 1 s
    and retrying a refusal every 2 s; build reports come from `reports`."""
    registry = register(
        OperatorOptions(
            runtime="cluster", poll_interval_s=1.0, refused_retry_s=2.0, report_url=reports.url
        )
    )
    with KopfRunner(
        ["run", "--standalone", "--namespace", kube_namespace, "--verbose"],
        registry=registry,
        timeout=60,
    ) as runner:
        yield runner
    assert runner.exception is None, runner.output[-3000:]


def create_secret(
    client: Client, namespace: str, name: str, labels: dict[str, str] | None = None
) -> None:
    secret = Secret(
        metadata=ObjectMeta(name=name, namespace=namespace, labels=labels or {}),
        stringData={"tokens.json": "{}"},
    )
    client.create(secret, namespace=namespace)


def create_claim(client: Client, namespace: str, name: str) -> None:
    """A PersistentVolumeClaim as a user would make one for model weights."""
    claim = PersistentVolumeClaim(
        metadata=ObjectMeta(name=name, namespace=namespace),
        spec=PersistentVolumeClaimSpec(
            accessModes=["ReadOnlyMany"],
            resources=VolumeResourceRequirements(requests={"storage": "5Gi"}),
        ),
    )
    client.create(claim, namespace=namespace)


def token_secret_for(client: Client, namespace: str, index: str, name: str) -> None:
    """The token Secret a RagIndex may mount: labelled for that index."""
    create_secret(client, namespace, name, {SECRET_LABEL: index})


# What the cluster runtime needs in every spec: a Kafka log and a token Secret.
CLUSTER = {"log": {"mode": "managed", "replicationFactor": 1, "minInsyncReplicas": 1, "brokers": 1}}


def create_index(client: Client, namespace: str, name: str, spec: dict[str, Any]) -> Any:
    body = {
        "apiVersion": "ragindex.dev/v1alpha1",
        "kind": "RagIndex",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
    obj: Any = codecs.from_dict(body)
    return client.create(obj, namespace=namespace)


def patch_spec(client: Client, namespace: str, name: str, spec: dict[str, Any]) -> None:
    client.patch(RagIndex, name, {"spec": spec}, namespace=namespace, patch_type=PatchType.MERGE)


def mark_ready(
    client: Client, namespace: str, name: str, signal: Literal["condition", "serviceStatus"]
) -> None:
    """Write ONE of the two statuses KubeRay writes when a RayService serves (there is no
    KubeRay here): the v1 `Ready` condition, or the older `serviceStatus: Running`. Each call
    site writes one, so each signal alone is shown to move the operator."""
    status: dict[str, Any] = (
        {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "NonZeroServeEndpoints",
                    "message": "",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ]
        }
        if signal == "condition"
        else {"serviceStatus": "Running"}
    )
    client.patch(
        RayService.Status,
        name,
        {"status": status},
        namespace=namespace,
        patch_type=PatchType.MERGE,
    )


def serve_deployments(ray_service: Any) -> set[str]:
    config = yaml.safe_load(ray_service["spec"]["serveConfigV2"])
    return {d["name"] for d in config["applications"][0]["deployments"]}


def served_spec(ray_service: Any) -> dict[str, Any]:
    config = yaml.safe_load(ray_service["spec"]["serveConfigV2"])
    return dict(config["applications"][0]["args"]["spec"])


def test_example_is_applied_owned_and_follows_edits(
    client: Client, kube_namespace: str, operator: KopfRunner
) -> None:
    ns = kube_namespace
    example = yaml.safe_load(EXAMPLE.read_text())
    token_secret_for(client, ns, "docs", example["spec"]["authSecret"])
    create_claim(client, ns, "models")  # the example's models come from this volume
    created = create_index(client, ns, "docs", example["spec"])
    uid = created.metadata.uid
    gen = index_generation(RagIndexSpec.model_validate(example["spec"]))
    rs_name = ray_service_name("docs", gen)

    rs = wait_for("RayService", lambda: get_or_none(client, RayService, rs_name, ns))
    es = wait_for("Elasticsearch", lambda: get_or_none(client, Elasticsearch, "docs-es", ns))
    topics = {
        plain(t)["spec"]["topicName"]: plain(t) for t in client.list(KafkaTopic, namespace=ns)
    }
    children = [
        rs,
        es,
        client.get(Service, "docs", namespace=ns),
        client.get(ConfigMap, "docs-config", namespace=ns),
        client.get(NetworkPolicy, network_policy_name("docs", gen), namespace=ns),
        client.get(Kafka, "docs-log", namespace=ns),
        client.get(KafkaNodePool, "docs-log-pool", namespace=ns),
        *topics.values(),
    ]
    for child in children:
        meta = plain(child)["metadata"]
        (owner,) = meta["ownerReferences"]
        assert (owner["uid"], owner["kind"], owner["controller"]) == (uid, "RagIndex", True)
        assert meta["labels"]["ragindex.dev/index"] == "docs"
    assert es["spec"]["nodeSets"][0]["count"] == 3
    assert serve_deployments(rs) >= {"Shard0", "Shard3", "Reranker", "QueryEmbedder"}
    # The log: two compacted topics (docs, chunks partitioned by dense shard), no manifest
    # topic, and the shard snapshots (one partition per shard, truncated by the publisher).
    assert len(topics) == 3
    chunks = topics[f"ragindex.{ns}.docs.chunks.{gen}"]["spec"]
    assert (chunks["partitions"], chunks["replicas"]) == (4, 3)
    assert chunks["config"]["cleanup.policy"] == "compact"
    snapshots = topics[f"ragindex.{ns}.docs.snapshots.{gen}"]["spec"]
    assert (snapshots["partitions"], snapshots["config"]["cleanup.policy"]) == (4, "delete")
    # No claim but the user's model volume, so none that needs ReadWriteMany; Ray auth is on.
    claims = [c.metadata.name for c in client.list(PersistentVolumeClaim, namespace=ns)]
    assert claims == ["models"]
    assert rs["spec"]["rayClusterConfig"]["authOptions"] == {"mode": "token"}

    status = wait_for(
        "status of generation 1",
        lambda: (s := status_of(client, "docs", ns)).get("observedGeneration") == 1 and s,
    )
    assert condition(status, "Reconciled")["status"] == "True"
    assert condition(status, "Ready")["status"] == "False"  # no KubeRay: never serving
    assert condition(status, "Degraded")["status"] == "False"
    assert status["endpoint"] == f"http://docs.{ns}.svc:8000/"
    first_transition = condition(status, "Reconciled")["lastTransitionTime"]

    # An in-place serve change (not a generation field): same RayService, new serveConfigV2.
    patch_spec(client, ns, "docs", {"fusion": {"topK": 5}})
    wait_for(
        "serveConfigV2 with topK 5",
        lambda: served_spec(client.get(RayService, rs_name, namespace=ns))["fusion"]["topK"] == 5,
    )
    status = wait_for(
        "observedGeneration 2",
        lambda: (s := status_of(client, "docs", ns))["observedGeneration"] == 2 and s,
    )
    assert condition(status, "Reconciled")["lastTransitionTime"] == first_transition
    assert condition(status, "Reconciled")["observedGeneration"] == 2

    # A spec the CRD admits but the operator cannot use: Degraded, nothing changed.
    patch_spec(client, ns, "docs", {"storageSize": "1.5Gi"})
    status = wait_for(
        "Degraded for storageSize",
        lambda: (s := status_of(client, "docs", ns))["observedGeneration"] == 3 and s,
    )
    assert condition(status, "Reconciled")["status"] == "False"
    degraded = condition(status, "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "InvalidSpec")
    assert "storageSize" in degraded["message"]
    rs = client.get(RayService, rs_name, namespace=ns)
    volumes = rs["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["volumes"]
    assert {"name": "data", "emptyDir": {"sizeLimit": "20Gi"}} in volumes  # left as it was

    patch_spec(client, ns, "docs", {"storageSize": "10Gi"})
    status = wait_for(
        "recovery",
        lambda: (
            condition(s := status_of(client, "docs", ns), "Degraded").get("status") == "False" and s
        ),
    )
    assert status["observedGeneration"] == 4


def generation_entry(status: dict[str, Any], generation: str) -> dict[str, Any]:
    return next((e for e in status.get("generations") or [] if e["id"] == generation), {})


def test_a_new_generation_serves_only_once_backfilled_and_checked(
    client: Client, kube_namespace: str, operator: KopfRunner, reports: BuildReports
) -> None:
    ns = kube_namespace
    token_secret_for(client, ns, "roll", "roll-tokens")
    base = {**CLUSTER, "authSecret": "roll-tokens", "dense": {"shards": 1}}
    create_index(client, ns, "roll", base)
    old = index_generation(RagIndexSpec.model_validate(base))
    old_rs = ray_service_name("roll", old)
    wait_for("first RayService", lambda: get_or_none(client, RayService, old_rs, ns))
    mark_ready(client, ns, old_rs, "condition")
    status = wait_for(
        "Ready on the first generation",
        lambda: (s := status_of(client, "roll", ns)).get("activeGeneration") == old and s,
    )
    assert condition(status, "Ready")["status"] == "True"
    assert generation_entry(status, old)["phase"] == "Serving"

    def selected() -> str:
        return plain(client.get(Service, "roll", namespace=ns))["spec"]["selector"][
            LABEL_GENERATION
        ]

    # 1. An embedder change whose self-check fails: ready, caught up, but never promoted.
    bad = {**base, "embedder": {"model": "all-mpnet-base-v2"}}
    failing = index_generation(RagIndexSpec.model_validate(bad))
    patch_spec(client, ns, "roll", bad)
    wait_for(
        "its RayService",
        lambda: get_or_none(client, RayService, ray_service_name("roll", failing), ns),
    )
    mark_ready(client, ns, ray_service_name("roll", failing), "condition")
    reports.set(failing, 40, 100, None)
    status = wait_for(
        "backfill progress",
        lambda: (
            generation_entry(s := status_of(client, "roll", ns), failing).get("progress") == "40%"
            and s
        ),
    )
    assert generation_entry(status, failing)["phase"] == "Backfilling"
    assert status["activeGeneration"] == old and selected() == old
    assert condition(status, "Ready")["reason"] == "PreviousGenerationServing"
    reports.set(failing, 100, 100, {"caught-up": "", "chunk-counts": "", "self-check": "3 of 20"})
    status = wait_for(
        "the failed check",
        lambda: (
            condition(s := status_of(client, "roll", ns), "Degraded").get("status") == "True" and s
        ),
    )
    assert condition(status, "Degraded")["reason"] == "GenerationCheckFailed"
    assert "self-check" in condition(status, "Degraded")["message"]
    assert generation_entry(status, failing)["phase"] == "Failed"
    assert status["activeGeneration"] == old and selected() == old
    assert condition(status, "Ready")["status"] == "True"

    # 2. A reshard that backfills and passes: promoted; the failed build is retired and the
    # old generation retained (its RayService kept) for rollback.
    good = {**base, "dense": {"shards": 2}}
    new = index_generation(RagIndexSpec.model_validate(good))
    new_rs = ray_service_name("roll", new)
    patch_spec(client, ns, "roll", {"embedder": {"model": "all-MiniLM-L6-v2"}, **good})
    wait_for("reshard RayService", lambda: get_or_none(client, RayService, new_rs, ns))
    wait_for(
        "the failed generation retired",
        lambda: gone(client, RayService, ray_service_name("roll", failing), ns),
    )
    # Its topics go with it: the Topic Operator deletes a topic whose KafkaTopic is deleted.
    for topic in (f"roll-chunks-{failing}", f"roll-snapshots-{failing}"):
        wait_for(f"{topic} pruned", lambda t=topic: gone(client, KafkaTopic, t, ns))
    mark_ready(client, ns, new_rs, "serviceStatus")
    time.sleep(2.5)  # ready, but no report yet: nothing moves
    assert status_of(client, "roll", ns)["activeGeneration"] == old and selected() == old
    reports.set(new, 120, 120, {"caught-up": "", "chunk-counts": "", "self-check": ""})
    status = wait_for(
        "promotion",
        lambda: (s := status_of(client, "roll", ns)).get("activeGeneration") == new and s,
    )
    assert selected() == new
    assert generation_entry(status, new)["phase"] == "Serving"
    assert generation_entry(status, old)["phase"] == "Retained"
    assert condition(status, "Degraded")["status"] == "False"
    assert get_or_none(client, RayService, old_rs, ns) is not None
    # The reports were asked for with the credential the operator made, and only with it.
    secret = plain(client.get(Secret, report_token_secret("roll"), namespace=ns))
    assert [o["kind"] for o in secret["metadata"]["ownerReferences"]] == ["RagIndex"]
    token = base64.b64decode(secret["data"][REPORT_TOKEN_KEY]).decode()
    assert len(token) >= 40 and reports.asked_with == {f"Bearer {token}"}
    # The docs topic is the corpus: it outlives every generation.
    assert get_or_none(client, KafkaTopic, "roll-docs", ns) is not None
    for topic in (f"roll-chunks-{new}", f"roll-snapshots-{new}"):
        assert get_or_none(client, KafkaTopic, topic, ns) is not None
    service = plain(client.get(Service, "roll", namespace=ns))
    # Re-applied at the switch with its owner reference (garbage-collected with the RagIndex).
    assert [o["kind"] for o in service["metadata"]["ownerReferences"]] == ["RagIndex"]

    # 3. Rollback inside the window: re-apply the old spec; the retained generation (caught up
    # on the writes since) serves again without a rebuild.
    reports.set(old, 130, 130, {"caught-up": "", "chunk-counts": "", "self-check": ""})
    patch_spec(client, ns, "roll", {"dense": {"shards": 1}})
    status = wait_for(
        "rollback",
        lambda: (s := status_of(client, "roll", ns)).get("activeGeneration") == old and s,
    )
    assert selected() == old
    assert generation_entry(status, new)["phase"] == "Retained"
    assert get_or_none(client, RayService, new_rs, ns) is not None
    table = client.get(RagIndex, "roll", namespace=ns)  # the printer column's source
    assert dict(table.get("status") or {})["activeGeneration"] == old


def test_delete_removes_every_child(
    client: Client, kube_namespace: str, operator: KopfRunner
) -> None:
    ns = kube_namespace
    example = yaml.safe_load(EXAMPLE.read_text())
    token_secret_for(client, ns, "gone", "gone-tokens")
    create_claim(client, ns, "models")
    create_index(client, ns, "gone", {**example["spec"], "authSecret": "gone-tokens"})
    gen = index_generation(RagIndexSpec.model_validate(example["spec"]))
    rs_name = ray_service_name("gone", gen)
    wait_for("RayService", lambda: get_or_none(client, RayService, rs_name, ns))
    wait_for("Elasticsearch", lambda: get_or_none(client, Elasticsearch, "gone-es", ns))

    client.delete(RagIndex, "gone", namespace=ns)
    children = [
        (RagIndex, "gone"),
        (RayService, rs_name),
        (Elasticsearch, "gone-es"),
        (Service, "gone"),
        (ConfigMap, "gone-config"),
        (NetworkPolicy, network_policy_name("gone", gen)),
        (Kafka, "gone-log"),
        (KafkaNodePool, "gone-log-pool"),
        (KafkaTopic, "gone-docs"),
        (KafkaTopic, f"gone-chunks-{gen}"),
    ]
    wait_for(
        "garbage collection of every child",
        lambda: all(gone(client, res, name, ns) for res, name in children),
        timeout=90,
    )


def test_a_name_held_by_a_foreign_object_is_a_condition_and_the_object_is_untouched(
    client: Client, kube_namespace: str, operator: KopfRunner
) -> None:
    ns = kube_namespace
    foreign = ConfigMap(
        metadata=ObjectMeta(name="clash-config", namespace=ns, labels={"team": "search"}),
        data={"owner": "someone else"},
    )
    client.create(foreign, namespace=ns)
    before = plain(client.get(ConfigMap, "clash-config", namespace=ns))
    token_secret_for(client, ns, "clash", "clash-tokens")
    create_index(client, ns, "clash", {**CLUSTER, "authSecret": "clash-tokens"})

    status = wait_for(
        "NameConflict",
        lambda: (
            condition(s := status_of(client, "clash", ns), "Reconciled").get("reason")
            == "NameConflict"
            and s
        ),
    )
    reconciled = condition(status, "Reconciled")
    assert reconciled["status"] == "False"
    assert f"ConfigMap {ns}/clash-config already exists" in reconciled["message"]
    assert condition(status, "Degraded")["status"] == "True"
    after = plain(client.get(ConfigMap, "clash-config", namespace=ns))
    # Nothing of it changed: same version, data, labels, no owner reference.
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert after["data"] == {"owner": "someone else"}
    assert "ownerReferences" not in after["metadata"]
    assert after["metadata"]["labels"] == {"team": "search"}
    # And nothing else was applied while the name is held.
    gen = index_generation(RagIndexSpec.model_validate(CLUSTER))
    assert get_or_none(client, RayService, ray_service_name("clash", gen), ns) is None
    assert get_or_none(client, Service, "clash", ns) is None


def test_only_a_secret_labelled_for_the_index_is_mounted(
    client: Client, kube_namespace: str, operator: KopfRunner
) -> None:
    ns = kube_namespace
    create_secret(client, ns, "plain-tokens")
    create_secret(client, ns, "other-tokens", {SECRET_LABEL: "someone-else"})
    # A stray object wearing this index's labels, not owned by it: never pruned.
    stray = ConfigMap(
        metadata=ObjectMeta(
            name="guard-stray",
            namespace=ns,
            labels={LABEL_INDEX: "guard", LABEL_MANAGED_BY: "ragindex-operator"},
        ),
        data={"k": "v"},
    )
    client.create(stray, namespace=ns)
    create_index(client, ns, "guard", {**CLUSTER, "authSecret": "plain-tokens"})
    status = wait_for(
        "SecretRefused",
        lambda: (
            condition(s := status_of(client, "guard", ns), "Reconciled").get("reason")
            == "SecretRefused"
            and s
        ),
    )
    message = condition(status, "Reconciled")["message"]
    assert f"Secret plain-tokens lacks the label {SECRET_LABEL}=guard" in message
    assert get_or_none(client, ConfigMap, "guard-config", ns) is None  # nothing applied

    patch_spec(client, ns, "guard", {"authSecret": "other-tokens"})
    wait_for(
        "refusal of a Secret labelled for another index",
        lambda: (
            "other-tokens lacks the label"
            in condition(status_of(client, "guard", ns), "Reconciled").get("message", "")
        ),
    )
    patch_spec(client, ns, "guard", {"authSecret": "missing-tokens"})
    wait_for(
        "refusal of a missing Secret",
        lambda: (
            "Secret missing-tokens does not exist"
            in condition(status_of(client, "guard", ns), "Reconciled").get("message", "")
        ),
    )

    # Labelled by whoever may write Secrets: mounted, and the spec is applied.
    client.patch(
        Secret,
        "plain-tokens",
        {"metadata": {"labels": {SECRET_LABEL: "guard"}}},
        namespace=ns,
        patch_type=PatchType.MERGE,
    )
    patch_spec(client, ns, "guard", {"authSecret": "plain-tokens"})
    status = wait_for(
        "applied once the Secret is labelled",
        lambda: (
            condition(s := status_of(client, "guard", ns), "Reconciled").get("status") == "True"
            and s
        ),
    )
    gen = index_generation(RagIndexSpec.model_validate(CLUSTER))
    rs = client.get(RayService, ray_service_name("guard", gen), namespace=ns)
    head = rs["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]
    assert {"name": "auth", "secret": {"secretName": "plain-tokens"}} in head["volumes"]
    assert plain(client.get(ConfigMap, "guard-stray", namespace=ns))["data"] == {"k": "v"}


def test_gpu_pool_on_tainted_nodes_with_a_model_on_a_claim_is_applied(
    client: Client, kube_namespace: str, operator: KopfRunner
) -> None:
    ns = kube_namespace
    token_secret_for(client, ns, "gpu", "gpu-tokens")
    create_claim(client, ns, "weights")
    taint = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    spec = {
        **CLUSTER,
        "authSecret": "gpu-tokens",
        "image": "registry.local/ragindex-gpu:1",
        "embedder": {
            "backend": "sentence-transformers",
            "model": "BAAI/bge-base-en-v1.5",
            "gpus": 1,
            "source": {"kind": "volume", "claimName": "weights", "path": "bge-base"},
        },
        "pods": {
            "embedders": {
                "resources": {"limits": {"nvidia.com/gpu": 1, "memory": "24Gi"}},
                "nodeSelector": {"nvidia.com/gpu.present": "true"},
                "tolerations": [taint],
                "priorityClassName": "gpu-batch",
            },
            "head": {"resources": {"requests": {"cpu": "500m"}}},
        },
        "lexical": {
            "backend": "elasticsearch",
            "managed": {"storage": {"size": "50Gi", "storageClassName": "fast"}},
        },
    }
    create_index(client, ns, "gpu", spec)
    rs_name = ray_service_name("gpu", index_generation(RagIndexSpec.model_validate(spec)))
    # Admitted by the real API server under KubeRay's and ECK's schemas.
    rs = plain(wait_for("RayService", lambda: get_or_none(client, RayService, rs_name, ns)))
    cluster = rs["spec"]["rayClusterConfig"]
    groups = {g["groupName"]: g for g in cluster["workerGroupSpecs"]}
    assert set(groups) == {"cpu", "gpu-embedder"}
    pod = groups["gpu-embedder"]["template"]["spec"]
    assert pod["tolerations"] == [taint]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert pod["priorityClassName"] == "gpu-batch"
    (container,) = pod["containers"]
    assert container["image"] == "registry.local/ragindex-gpu:1"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert container["resources"]["limits"]["memory"] == "24Gi"
    claim = {"claimName": "weights", "readOnly": True}
    assert {"name": "model-embedder", "persistentVolumeClaim": claim} in pod["volumes"]
    mount = {"name": "model-embedder", "mountPath": "/models/embedder", "readOnly": True}
    assert mount in container["volumeMounts"]
    # The CPU workers load the embedder's tokenizer too, so they mount the volume; the pool's
    # placement stays on the GPU pool.
    cpu_pod = groups["cpu"]["template"]["spec"]
    assert mount in cpu_pod["containers"][0]["volumeMounts"] and "tolerations" not in cpu_pod
    head = cluster["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert head["resources"]["requests"]["cpu"] == "500m"
    es = plain(wait_for("Elasticsearch", lambda: get_or_none(client, Elasticsearch, "gpu-es", ns)))
    (volume,) = es["spec"]["nodeSets"][0]["volumeClaimTemplates"]
    assert volume["spec"]["resources"]["requests"]["storage"] == "50Gi"
    assert volume["spec"]["storageClassName"] == "fast"
    status = wait_for(
        "Reconciled", lambda: condition(s := status_of(client, "gpu", ns), "Reconciled") and s
    )
    assert condition(status, "Reconciled")["status"] == "True"


def test_a_model_that_cannot_load_is_model_unavailable_and_nothing_is_applied(
    client: Client, kube_namespace: str, operator: KopfRunner
) -> None:
    ns = kube_namespace
    token_secret_for(client, ns, "nomodel", "nomodel-tokens")
    spec = {**CLUSTER, "authSecret": "nomodel-tokens", "embedder": {"model": "BAAI/bge-m3"}}
    create_index(client, ns, "nomodel", spec)

    def refused() -> dict[str, Any] | None:
        status = status_of(client, "nomodel", ns)
        return status if condition(status, "Reconciled").get("reason") else None

    reconciled = condition(wait_for("the first reconcile", refused), "Reconciled")
    assert (reconciled["status"], reconciled["reason"]) == ("False", "ModelUnavailable")
    assert "embedder model 'BAAI/bge-m3' (packaged) cannot load" in reconciled["message"]
    assert "not packaged in the image" in reconciled["message"]
    assert list(client.list(RayService, namespace=ns)) == []

    # A volume source whose claim is missing names the claim; creating it lets it apply.
    source = {"kind": "volume", "claimName": "late-weights"}
    patch_spec(client, ns, "nomodel", {"embedder": {"source": source}})
    status = wait_for(
        "the claim named",
        lambda: (
            "late-weights"
            in condition(s := status_of(client, "nomodel", ns), "Reconciled").get("message", "")
            and s
        ),
    )
    assert condition(status, "Reconciled")["reason"] == "ModelUnavailable"
    assert condition(status, "Degraded")["status"] == "True"
    create_claim(client, ns, "late-weights")
    wait_for(
        "applied once the claim exists",
        lambda: condition(status_of(client, "nomodel", ns), "Reconciled").get("status") == "True",
    )
    wait_for("its RayService", lambda: list(client.list(RayService, namespace=ns)))
