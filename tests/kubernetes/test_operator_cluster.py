"""The operator in-process (kopf.testing.KopfRunner) against a real kube-apiserver.

The harness (conftest.py) runs etcd + kube-apiserver + kube-controller-manager with the vendored
KubeRay/ECK/Strimzi CRDs: every object the operator applies is admitted and validated by the real
API server under those schemas, and deletion is done by the real garbage collector. There is no
KubeRay controller, so where a test needs a RayService to become ready it writes the status
KubeRay would write (the status subresource), which is all the operator reads.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml
from kopf.testing import KopfRunner
from lightkube import Client, codecs
from lightkube.core.exceptions import ApiError
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap, PersistentVolumeClaim, Secret, Service
from lightkube.resources.networking_v1 import NetworkPolicy
from lightkube.types import PatchType

from ragindex.config import RagIndexSpec
from ragindex.generations import index_generation
from ragindex.operator.apply import (
    Elasticsearch,
    Kafka,
    KafkaNodePool,
    KafkaTopic,
    RagIndex,
    RayService,
)
from ragindex.operator.handlers import OperatorOptions, register
from ragindex.operator.ownership import SECRET_LABEL
from ragindex.operator.render import (
    LABEL_GENERATION,
    LABEL_INDEX,
    LABEL_MANAGED_BY,
    network_policy_name,
    ray_service_name,
)

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


@pytest.fixture
def operator(kube_cluster: Any, kube_namespace: str) -> Iterator[KopfRunner]:
    """The cluster-runtime operator watching the test's namespace, polling readiness every 1 s
    and retrying a refusal every 2 s."""
    registry = register(
        OperatorOptions(runtime="cluster", poll_interval_s=1.0, refused_retry_s=2.0)
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


def mark_ready(client: Client, namespace: str, name: str) -> None:
    """Write the status KubeRay writes when a RayService serves (there is no KubeRay here)."""
    status = {
        "status": {
            "serviceStatus": "Running",
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "NonZeroServeEndpoints",
                    "message": "",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ],
        }
    }
    client.patch(RayService.Status, name, status, namespace=namespace, patch_type=PatchType.MERGE)


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
    # The log: two compacted topics (docs, chunks partitioned by dense shard), no manifest topic.
    assert len(topics) == 2
    chunks = topics[f"ragindex.{ns}.docs.chunks.{gen}"]["spec"]
    assert (chunks["partitions"], chunks["replicas"]) == (4, 3)
    assert chunks["config"]["cleanup.policy"] == "compact"
    # No claim at all, so none that needs ReadWriteMany; Ray auth is on.
    assert list(client.list(PersistentVolumeClaim, namespace=ns)) == []
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


def test_embedder_change_rolls_out_a_new_generation(
    client: Client, kube_namespace: str, operator: KopfRunner
) -> None:
    ns = kube_namespace
    token_secret_for(client, ns, "roll", "roll-tokens")
    create_index(
        client, ns, "roll", {**CLUSTER, "authSecret": "roll-tokens", "dense": {"shards": 1}}
    )
    old = index_generation(RagIndexSpec.model_validate({"dense": {"shards": 1}}))
    old_rs = ray_service_name("roll", old)
    wait_for("first RayService", lambda: get_or_none(client, RayService, old_rs, ns))
    mark_ready(client, ns, old_rs)
    status = wait_for(
        "Ready on the first generation",
        lambda: (s := status_of(client, "roll", ns)).get("activeGeneration") == old and s,
    )
    assert condition(status, "Ready")["status"] == "True"

    patch_spec(client, ns, "roll", {"embedder": {"model": "all-mpnet-base-v2"}})
    new = index_generation(
        RagIndexSpec.model_validate(
            {"embedder": {"model": "all-mpnet-base-v2"}, "dense": {"shards": 1}}
        )
    )
    new_rs = ray_service_name("roll", new)
    assert new != old
    wait_for("second RayService", lambda: get_or_none(client, RayService, new_rs, ns))
    status = wait_for(
        "generation 2 reconciled",
        lambda: (s := status_of(client, "roll", ns)).get("observedGeneration") == 2 and s,
    )
    # The old generation still serves; the Service still selects it.
    assert get_or_none(client, RayService, old_rs, ns) is not None
    assert status["activeGeneration"] == old
    assert condition(status, "Ready")["reason"] == "PreviousGenerationServing"
    selector = plain(client.get(Service, "roll", namespace=ns))["spec"]["selector"]
    assert selector[LABEL_GENERATION] == old

    mark_ready(client, ns, new_rs)
    wait_for(
        "old generation pruned",
        lambda: (
            gone(client, RayService, old_rs, ns)
            and gone(client, NetworkPolicy, network_policy_name("roll", old), ns)
            and gone(client, KafkaTopic, f"roll-chunks-{old}", ns)
        ),
    )
    # The docs topic is the corpus: it outlives every generation.
    assert get_or_none(client, KafkaTopic, "roll-docs", ns) is not None
    status = status_of(client, "roll", ns)
    assert status["activeGeneration"] == new
    service = plain(client.get(Service, "roll", namespace=ns))
    assert service["spec"]["selector"][LABEL_GENERATION] == new
    # Re-applied at the switch with its owner reference (garbage-collected with the RagIndex).
    assert [o["kind"] for o in service["metadata"]["ownerReferences"]] == ["RagIndex"]


def test_delete_removes_every_child(
    client: Client, kube_namespace: str, operator: KopfRunner
) -> None:
    ns = kube_namespace
    example = yaml.safe_load(EXAMPLE.read_text())
    token_secret_for(client, ns, "gone", "gone-tokens")
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
