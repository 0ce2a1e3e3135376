"""Pure rendering of a RagIndex into Kubernetes objects (no cluster needed)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from ray.serve.schema import ServeDeploySchema

from ragindex.config import KafkaConnection, RagIndexSpec
from ragindex.errors import InvalidInput
from ragindex.generations import index_generation
from ragindex.operator import RenderOptions
from ragindex.operator.objects import (
    LABEL_GENERATION,
    LABEL_INDEX,
    ObjectRef,
    ray_service_name,
    ref_of,
    validate_name,
)
from ragindex.operator.ownership import SECRET_LABEL, foreign_object, secret_refusal
from ragindex.operator.render import named_secrets, objects_to_prune, render
from ragindex.serve_config import (
    AUTH_DIR_ENV,
    GENERATOR_API_KEY_ENV,
    HAPROXY_INGRESS_ENV,
    KAFKA_BOOTSTRAP_ENV,
    REPORT_TOKEN_ENV,
)
from ragindex.telemetry_names import (
    LOG_FORMAT_ENV,
    METRICS_PORT,
    METRICS_PORT_ENV,
    TRACING_EXPORTER,
)
from ragindex.topics import (
    MAX_MESSAGE_BYTES,
    MIN_OFFSETS_RETENTION_MINUTES,
    OFFSETS_RETENTION_MINUTES,
    chunks_topic,
    docs_topic,
    snapshots_topic,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ragindex.yaml"


KAFKA_USERNAME_ENV = KafkaConnection.env_name("username")
KAFKA_PASSWORD_ENV = KafkaConnection.env_name("password")


def spec_of(**fields: Any) -> RagIndexSpec:
    """A spec the cluster runtime accepts (a Kafka log and a token Secret), plus `fields`."""
    base: dict[str, Any] = {"log": {"mode": "managed"}, "authSecret": "tokens"}
    return RagIndexSpec.model_validate(base | fields)


def _walk(node: Any) -> Iterator[Any]:
    yield node
    children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else []
    for child in children:
        yield from _walk(child)


def pods(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Head and worker pod templates of the RayService."""
    cluster = one(objects, "RayService")["spec"]["rayClusterConfig"]
    groups = [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]
    return [g["template"] for g in groups]


def env_of(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (env,) = {
        yaml.safe_dump(c["env"]) for t in pods(objects) for c in t["spec"]["containers"]
    }  # every Ray container gets the same environment
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in yaml.safe_load(env)}


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = by_kind(objects, kind)
    assert len(found) == 1, f"expected one {kind}, got {[o['metadata']['name'] for o in found]}"
    return found[0]


def serve_config(objects: list[dict[str, Any]]) -> dict[str, Any]:
    text = one(objects, "RayService")["spec"]["serveConfigV2"]
    assert isinstance(text, str)
    config: dict[str, Any] = yaml.safe_load(text)
    return config


def example_spec() -> RagIndexSpec:
    return RagIndexSpec.model_validate(yaml.safe_load(EXAMPLE.read_text())["spec"])


def test_example_renders_every_kind_with_a_valid_serve_config() -> None:
    objects = render("docs", "prod", example_spec(), uid="uid-1")
    kinds = sorted(o["kind"] for o in objects)
    assert kinds == [
        "ConfigMap",
        "Elasticsearch",
        "Kafka",
        "KafkaNodePool",
        "KafkaTopic",  # docs
        "KafkaTopic",  # chunks.<generation>; the manifest is derived from it, no topic
        "KafkaTopic",  # snapshots.<generation>
        "KafkaUser",  # the Ray pods' SCRAM user
        "NetworkPolicy",
        "RayService",
        "Service",
    ]
    config = serve_config(objects)
    ServeDeploySchema.model_validate(config)  # what KubeRay checks serveConfigV2 against
    app = config["applications"][0]
    assert app["args"]["runtime"] == "cluster"
    assert app["args"]["spec"]["dense"]["shards"] == 4


def test_shards_become_one_deployment_each() -> None:
    for shards in (1, 3):
        config = serve_config(render("idx", "ns", spec_of(dense={"shards": shards})))
        names = {d["name"] for d in config["applications"][0]["deployments"]}
        assert {n for n in names if n.startswith("Shard")} == {f"Shard{i}" for i in range(shards)}


def test_gpu_worker_group_only_when_gpus_are_asked_for() -> None:
    groups = one(render("idx", "ns", spec_of()), "RayService")["spec"]["rayClusterConfig"][
        "workerGroupSpecs"
    ]
    assert [g["groupName"] for g in groups] == ["cpu"]
    limits = groups[0]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert "nvidia.com/gpu" not in limits

    spec = spec_of(
        embedder={"backend": "sentence-transformers", "gpus": 0.5},
        reranker={"enabled": True, "model": "m", "gpus": 2},
    )
    groups = one(render("idx", "ns", spec), "RayService")["spec"]["rayClusterConfig"][
        "workerGroupSpecs"
    ]
    by_name = {g["groupName"]: g for g in groups}
    assert set(by_name) == {"cpu", "gpu-embedder", "gpu-reranker"}  # one pool per model
    embedders, rerankers = by_name["gpu-embedder"], by_name["gpu-reranker"]
    limits = rerankers["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "2"  # one pod must hold the largest replica
    limits = embedders["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "1"
    for group in (embedders, rerankers):
        assert 1 <= group["minReplicas"] <= group["maxReplicas"]
    # Each GPU deployment asks for its pool's marker resource, which only its pool offers.
    deployments = {
        d["name"]: d["ray_actor_options"]
        for d in serve_config(render("idx", "ns", spec))["applications"][0]["deployments"]
    }
    assert deployments["Reranker"]["resources"] == {"gpu-reranker": 1}
    assert deployments["QueryEmbedder"]["resources"] == {"gpu-embedder": 1}
    assert deployments["IngestEmbedder"]["resources"] == {"gpu-embedder": 1}
    assert "resources" not in deployments["Router"]
    assert "gpu-reranker" in rerankers["rayStartParams"]["resources"]
    assert "gpu-embedder" in embedders["rayStartParams"]["resources"]


def test_elasticsearch_only_when_managed() -> None:
    managed = render("idx", "ns", spec_of(lexical={"backend": "elasticsearch", "managedNodes": 3}))
    es = one(managed, "Elasticsearch")
    assert es["spec"]["version"].startswith("9.")
    assert es["spec"]["nodeSets"][0]["count"] == 3
    # The Serve app is told where ECK's HTTP service is.
    url = serve_config(managed)["applications"][0]["args"]["spec"]["lexical"]["elasticsearchUrl"]
    assert url == "https://idx-es-es-http.ns.svc:9200"  # ECK's TLS stays on

    external = spec_of(lexical={"backend": "elasticsearch", "elasticsearchUrl": "http://es:9200"})
    assert by_kind(render("idx", "ns", external), "Elasticsearch") == []
    assert by_kind(render("idx", "ns", spec_of()), "Elasticsearch") == []


def test_embedder_or_layout_change_is_a_new_generation_and_serve_changes_are_not() -> None:
    base = spec_of()
    gen = index_generation(base)
    assert len(gen) == 8
    for same in (
        spec_of(dense={"replicas": 3}),
        spec_of(dense={"hnsw": {"efSearch": 64}}),
        spec_of(embedder={"batchSize": 64, "replicas": 3}),
    ):
        assert index_generation(same) == gen
    for other in (
        spec_of(embedder={"model": "other-model"}),
        spec_of(embedder={"backend": "flagembedding"}),
        spec_of(embedder={"queryPrefix": "query: "}),
        spec_of(embedder={"passagePrefix": "passage: "}),
        spec_of(dense={"shards": 3}),
        spec_of(dense={"hnsw": {"m": 16}}),
    ):
        assert index_generation(other) != gen
    old = one(render("idx", "ns", base), "RayService")["metadata"]["name"]
    new = one(render("idx", "ns", spec_of(embedder={"model": "m2"})), "RayService")
    assert old == ray_service_name("idx", gen)
    assert new["metadata"]["name"] != old
    assert new["metadata"]["labels"][LABEL_GENERATION] == index_generation(
        spec_of(embedder={"model": "m2"})
    )


def test_labels_and_owner_references_on_every_object() -> None:
    objects = render("idx", "ns", example_spec(), uid="uid-7")
    gen = index_generation(example_spec())
    for obj in objects:
        meta = obj["metadata"]
        assert meta["namespace"] == "ns"
        assert meta["labels"][LABEL_INDEX] == "idx"
        assert meta["labels"][LABEL_GENERATION] == gen
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "ragindex-operator"
        (owner,) = meta["ownerReferences"]
        assert owner == {
            "apiVersion": "ragindex.dev/v1alpha1",
            "kind": "RagIndex",
            "name": "idx",
            "uid": "uid-7",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    assert all("ownerReferences" not in o["metadata"] for o in render("idx", "ns", spec_of()))
    # Strimzi finds a node pool's and a topic's cluster by this label.
    for obj in [*by_kind(objects, "KafkaNodePool"), *by_kind(objects, "KafkaTopic")]:
        assert obj["metadata"]["labels"]["strimzi.io/cluster"] == "idx-log"


def test_service_keeps_selecting_the_active_generation() -> None:
    spec = spec_of(embedder={"model": "m2"})
    fresh = one(render("idx", "ns", spec), "Service")["spec"]["selector"]
    assert fresh[LABEL_GENERATION] == index_generation(spec)
    during = one(render("idx", "ns", spec, active_generation="0ld0ld00"), "Service")
    assert during["spec"]["selector"][LABEL_GENERATION] == "0ld0ld00"


def test_no_shared_volume_only_node_local_scratch() -> None:
    spec = spec_of(dense={"shards": 4, "replicas": 2}, storageSize="20Gi")
    objects = render("idx", "ns", spec, options=RenderOptions(storage_class="fast"))
    assert by_kind(objects, "PersistentVolumeClaim") == []
    assert not any(
        isinstance(n, dict) and ("persistentVolumeClaim" in n or "ReadWriteMany" in n.values())
        for n in _walk(objects)
    )
    assert "ReadWriteMany" not in yaml.safe_dump(objects)
    for template in pods(objects):
        volumes = {v["name"]: v for v in template["spec"]["volumes"]}
        assert volumes["data"] == {"name": "data", "emptyDir": {"sizeLimit": "20Gi"}}
        (container,) = template["spec"]["containers"]
        assert container["resources"]["requests"]["ephemeral-storage"] == "20Gi"
        assert {"name": "data", "mountPath": spec.data_dir} in container["volumeMounts"]
    # The managed Kafka's own volumes are Strimzi's per-broker claims (ReadWriteOnce).
    pool = one(objects, "KafkaNodePool")["spec"]["storage"]
    assert pool == {"type": "persistent-claim", "size": "100Gi", "class": "fast"}
    with pytest.raises(InvalidInput, match="storageSize"):
        render("idx", "ns", spec_of(storageSize="1.5Gi"))


def test_cluster_runtime_needs_a_kafka_log_and_a_token_secret() -> None:
    with pytest.raises(InvalidInput, match=r"log\.mode 'embedded'"):
        render("idx", "ns", RagIndexSpec.model_validate({"authSecret": "tokens"}))
    with pytest.raises(InvalidInput, match="authSecret is required"):
        render("idx", "ns", RagIndexSpec.model_validate({"log": {"mode": "managed"}}))


def test_managed_log_renders_strimzi_kafka_and_the_index_topics() -> None:
    spec = spec_of(
        dense={"shards": 3},
        log={"mode": "managed", "docsPartitions": 6, "brokers": 5, "tombstoneRetentionHours": 2},
    )
    objects = render("idx", "ns", spec, uid="u")
    gen = index_generation(spec)
    kafka = one(objects, "Kafka")
    assert kafka["metadata"]["name"] == "idx-log"
    (listener,) = kafka["spec"]["kafka"]["listeners"]
    assert (listener["port"], listener["type"], listener["tls"]) == (9093, "internal", True)
    assert listener["authentication"] == {"type": "scram-sha-512"}
    # Only this index's Ray pods (any generation) reach the brokers: Strimzi renders the policy.
    assert listener["networkPolicyPeers"] == [
        {"podSelector": {"matchLabels": {LABEL_INDEX: "idx", "ray.io/is-ray-node": "yes"}}}
    ]
    config = kafka["spec"]["kafka"]["config"]
    assert config["default.replication.factor"] == 3 and config["min.insync.replicas"] == 2
    assert config["transaction.state.log.min.isr"] == 2  # ingest commits transactionally
    assert config["auto.create.topics.enable"] is False
    # The ingest groups commit offsets in transactions and never join: Kafka's default (7 days)
    # would expire them after a quiet week, and the next restart would re-read all of docs.
    assert config["offsets.retention.minutes"] == OFFSETS_RETENTION_MINUTES
    assert OFFSETS_RETENTION_MINUTES >= MIN_OFFSETS_RETENTION_MINUTES > 7 * 24 * 60
    assert kafka["spec"]["entityOperator"] == {"topicOperator": {}, "userOperator": {}}
    pool = one(objects, "KafkaNodePool")["spec"]
    assert pool["replicas"] == 5 and sorted(pool["roles"]) == ["broker", "controller"]

    topics = {t["spec"]["topicName"]: t for t in by_kind(objects, "KafkaTopic")}
    # No manifest topic: the workers derive their manifest from the compacted chunks topic.
    docs, chunks, snapshots = (
        docs_topic("ns", "idx"),
        chunks_topic("ns", "idx", gen),
        snapshots_topic("ns", "idx", gen),
    )
    assert set(topics) == {docs, chunks, snapshots}
    partitions = {name: t["spec"]["partitions"] for name, t in topics.items()}
    # One partition per dense shard for the chunks and their snapshots.
    assert partitions == {docs: 6, chunks: 3, snapshots: 3}
    for topic in topics.values():
        assert topic["spec"]["replicas"] == 3
    for name in (docs, chunks):
        assert topics[name]["spec"]["config"] == {
            "cleanup.policy": "compact",
            "min.insync.replicas": 2,
            "delete.retention.ms": 2 * 3_600_000,
            "max.message.bytes": MAX_MESSAGE_BYTES,  # what KafkaLog's producer may send
        }
    # Snapshots are deleted by their publisher (truncate), never by age or key.
    assert topics[snapshots]["spec"]["config"] == {
        "cleanup.policy": "delete",
        "retention.ms": -1,
        "min.insync.replicas": 2,
        "max.message.bytes": MAX_MESSAGE_BYTES,
    }
    assert env_of(objects)[KAFKA_BOOTSTRAP_ENV] == "idx-log-kafka-bootstrap.ns.svc:9093"


def test_external_log_is_bootstrap_servers_and_credentials_by_reference() -> None:
    spec = spec_of(
        log={
            "mode": "external",
            "bootstrapServers": "b1.kafka:9092,b2.kafka:9092",
            "credentialsSecret": "kafka-user",
        }
    )
    objects = render("idx", "ns", spec)
    assert [o for o in objects if o["apiVersion"].startswith("kafka.strimzi.io")] == []
    env = env_of(objects)
    assert env[KAFKA_BOOTSTRAP_ENV] == "b1.kafka:9092,b2.kafka:9092"
    assert env[KAFKA_USERNAME_ENV] == {"secretKeyRef": {"name": "kafka-user", "key": "username"}}
    # The password is a mounted file, never a variable's value.
    assert KAFKA_PASSWORD_ENV not in env
    password_file = env["RAGINDEX_KAFKA_PASSWORD_FILE"]
    assert password_file == "/etc/ragindex/credentials/kafka-credentials/password"
    no_secret = spec_of(log={"mode": "external", "bootstrapServers": "k:9092"})
    assert KAFKA_USERNAME_ENV not in env_of(render("idx", "ns", no_secret))


def test_secrets_reach_pods_only_by_reference_and_only_when_named() -> None:
    spec = spec_of(
        generator={
            "backend": "openai-compatible",
            "baseUrl": "http://llm:8000/v1",
            "model": "m",
            "apiKeySecret": "llm-key",
        },
        log={"mode": "external", "bootstrapServers": "k:9092", "credentialsSecret": "kafka-user"},
    )
    assert named_secrets(spec) == ["tokens", "kafka-user", "llm-key"]
    objects = render("idx", "ns", spec)
    env = env_of(objects)
    assert env[GENERATOR_API_KEY_ENV] == {"secretKeyRef": {"name": "llm-key", "key": "api-key"}}
    assert env[AUTH_DIR_ENV] == "/etc/ragindex/auth"
    # The build report's credential, from the Secret the operator makes for the index.
    assert env[REPORT_TOKEN_ENV] == {"secretKeyRef": {"name": "idx-report-token", "key": "token"}}
    # The Serve app reads the key from the one variable the operator injects.
    served = serve_config(objects)["applications"][0]["args"]["spec"]
    assert served["generator"]["apiKeyEnv"] == GENERATOR_API_KEY_ENV
    assert RagIndexSpec.model_validate(served).generator.api_key_secret is None
    for template in pods(objects):
        secrets = [v["secret"]["secretName"] for v in template["spec"]["volumes"] if "secret" in v]
        assert secrets == ["tokens", "kafka-user"]  # the Kafka password as a file
        # The whole Secret is mounted, never a subPath: the kubelet then updates the mounted
        # tokens.json when the Secret changes, so a minted or revoked token reaches the Router.
        mounts = [m for c in template["spec"]["containers"] for m in c.get("volumeMounts", [])]
        auth = [m for m in mounts if m["mountPath"] == "/etc/ragindex/auth"]
        assert auth and all("subPath" not in m and m["readOnly"] for m in auth)


def test_ray_pods_are_locked_down_and_ray_auth_is_on() -> None:
    objects = render("idx", "ns", spec_of(embedder={"backend": "sentence-transformers", "gpus": 1}))
    cluster = one(objects, "RayService")["spec"]["rayClusterConfig"]
    assert cluster["authOptions"] == {"mode": "token"}
    assert len(pods(objects)) == 3  # head, cpu and gpu workers
    for template in pods(objects):
        spec = template["spec"]
        assert spec["automountServiceAccountToken"] is False
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] == 1000
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        (container,) = spec["containers"]
        assert container["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "runAsNonRoot": True,
        }
        mounts = {m["mountPath"] for m in container["volumeMounts"]}
        assert "/var/run/secrets/kubernetes.io/serviceaccount" not in mounts
    # Only the autoscaler sidecar gets the service-account token (it patches the RayCluster).
    head = cluster["headGroupSpec"]["template"]["spec"]
    token = {v["name"]: v for v in head["volumes"]}["autoscaler-token"]
    assert token["projected"]["sources"][0]["serviceAccountToken"]["path"] == "token"
    assert cluster["autoscalerOptions"]["volumeMounts"] == [
        {
            "name": "autoscaler-token",
            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
            "readOnly": True,
        }
    ]


def test_worker_pods_serve_their_metrics_on_a_named_port_and_log_json() -> None:
    objects = render("idx", "ns", spec_of(embedder={"backend": "sentence-transformers", "gpus": 1}))
    head, *workers = pods(objects)
    assert len(workers) == 2  # cpu and gpu
    for template in workers:
        (container,) = template["spec"]["containers"]
        assert container["ports"] == [
            {"name": "index-metrics", "containerPort": METRICS_PORT, "protocol": "TCP"}
        ]
    # the head runs no replica: no metrics port of ours (its own ports only)
    (head_container,) = head["spec"]["containers"]
    assert METRICS_PORT not in {p["containerPort"] for p in head_container["ports"]}
    env = env_of(objects)
    assert env[METRICS_PORT_ENV] == str(METRICS_PORT)
    assert env[LOG_FORMAT_ENV] == "json"
    assert "RAY_SERVE_TRACING_EXPORTER_IMPORT_PATH" not in env  # no endpoint: no tracing
    traced = env_of(
        render(
            "idx",
            "ns",
            spec_of(),
            options=RenderOptions(otlp_endpoint="http://otel.monitoring:4318"),
        )
    )
    assert traced["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel.monitoring:4318"
    assert traced["RAY_SERVE_TRACING_EXPORTER_IMPORT_PATH"] == TRACING_EXPORTER
    assert traced["RAY_SERVE_TRACING_SAMPLING_RATIO"] == "0.01"


def test_every_ray_pod_takes_http_with_haproxy_in_front_of_the_router_replicas() -> None:
    objects = render("idx", "ns", spec_of(embedder={"backend": "sentence-transformers", "gpus": 1}))
    for template in pods(objects):  # the head and both worker groups
        (container,) = template["spec"]["containers"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert {k: env.get(k) for k in HAPROXY_INGRESS_ENV} == HAPROXY_INGRESS_ENV


def test_network_policy_admits_own_pods_kuberay_to_the_dashboard_and_clients_to_serve() -> None:
    spec = spec_of()
    gen = index_generation(spec)
    own = {LABEL_INDEX: "idx", LABEL_GENERATION: gen, "ray.io/is-ray-node": "yes"}
    policy = one(render("idx", "ns", spec), "NetworkPolicy")
    assert policy["metadata"]["name"] == f"idx-{gen}-ray"
    assert policy["spec"]["podSelector"] == {"matchLabels": own}
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    mine, kuberay, clients, monitoring = policy["spec"]["ingress"]
    assert mine == {"from": [{"podSelector": {"matchLabels": own}}]}
    assert kuberay["ports"] == [{"protocol": "TCP", "port": 8265}]
    assert kuberay["from"] == [
        {
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "kuberay-operator"}},
            "namespaceSelector": {},
        }
    ]
    assert clients == {"ports": [{"protocol": "TCP", "port": 8000}]}
    # Prometheus in the monitoring namespace scrapes each pod's metrics port, and nothing else
    assert monitoring == {
        "from": [
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
        ],
        "ports": [{"protocol": "TCP", "port": METRICS_PORT}],
    }
    anywhere = one(
        render("idx", "ns", spec, options=RenderOptions(monitoring_namespace=None)),
        "NetworkPolicy",
    )
    assert anywhere["spec"]["ingress"][3]["from"] == [{"namespaceSelector": {}}]
    pinned = one(
        render("idx", "ns", spec, options=RenderOptions(kuberay_namespace="ray-system")),
        "NetworkPolicy",
    )
    assert pinned["spec"]["ingress"][1]["from"][0]["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": "ray-system"}
    }


def test_ownership_decisions() -> None:
    ours = {"name": "idx", "namespace": "ns", "ownerReferences": [{"uid": "u", "controller": True}]}
    assert foreign_object("Service", ours, "u") is None
    bare = {"name": "idx", "namespace": "ns", "labels": {LABEL_INDEX: "idx"}}
    message = foreign_object("Service", bare, "u")
    assert message is not None and "Service ns/idx" in message and "not owned" in message
    other = {
        "name": "idx",
        "namespace": "ns",
        "ownerReferences": [{"uid": "v", "controller": True, "kind": "RagIndex", "name": "b"}],
    }
    assert "owned by RagIndex/b" in (foreign_object("Service", other, "u") or "")
    assert "does not exist" in (secret_refusal("idx", "tokens", None) or "")
    assert SECRET_LABEL in (secret_refusal("idx", "tokens", {"labels": {}}) or "")
    assert secret_refusal("idx", "tokens", {"labels": {SECRET_LABEL: "other"}}) is not None
    assert secret_refusal("idx", "tokens", {"labels": {SECRET_LABEL: "idx"}}) is None


def test_bad_names_are_refused_with_the_rule() -> None:
    assert validate_name("docs-1") == "docs-1"
    for bad in ("Docs", "1docs", "a" * 39, "docs_", "docs-"):
        with pytest.raises(InvalidInput, match="RagIndex name"):
            render(bad, "ns", spec_of())


def ref(kind: str, name: str, gen: str | None = None) -> ObjectRef:
    api = {
        "RayService": "ray.io/v1",
        "Elasticsearch": "elasticsearch.k8s.elastic.co/v1",
        "KafkaTopic": "kafka.strimzi.io/v1",
    }
    return ObjectRef(api.get(kind, "v1"), kind, name, gen)


def test_prune_keeps_desired_and_serving_generations_only() -> None:
    desired = [ref_of(o) for o in render("idx", "ns", spec_of(embedder={"model": "m2"}))]
    new_gen = desired[0].generation
    existing = [
        *desired,
        ref("RayService", "idx-0ld0ld00", "0ld0ld00"),
        ref("KafkaTopic", "idx-chunks-0ld0ld00", "0ld0ld00"),
        ref("KafkaTopic", "idx-snapshots-0ld0ld00", "0ld0ld00"),
        ref("RayService", "idx-dead0000", "dead0000"),
        ref("Elasticsearch", "idx-es", "0ld0ld00"),  # backend switched to embedded
        # The shared claim an older operator rendered: pruned on upgrade.
        ref("PersistentVolumeClaim", f"idx-{new_gen}-data", new_gen),
    ]
    doomed = objects_to_prune(existing, desired, keep_generations=("0ld0ld00", new_gen))
    assert {(r.kind, r.name) for r in doomed} == {
        ("RayService", "idx-dead0000"),
        ("Elasticsearch", "idx-es"),
        ("PersistentVolumeClaim", f"idx-{new_gen}-data"),
    }
    # Once the new generation serves, the old one goes too (its chunks and snapshots topics
    # included).
    doomed = objects_to_prune(existing, desired, keep_generations=(new_gen,))
    assert {r.name for r in doomed} == {
        "idx-0ld0ld00",
        "idx-chunks-0ld0ld00",
        "idx-snapshots-0ld0ld00",
        "idx-dead0000",
        "idx-es",
        f"idx-{new_gen}-data",
    }


def test_pod_sizes_follow_the_options_and_a_cpu_request_overcommits_small_nodes() -> None:
    # Found on a real 2-core kubelet: a 2-CPU head and 4-CPU workers never schedule there.
    options = RenderOptions(
        head_cpus=1,
        head_memory="2Gi",
        cpu_worker_cpus=8,
        cpu_worker_memory="6Gi",
        ray_cpu_request="100m",
    )
    ray = one(render("idx", "ns", spec_of(), options=options), "RayService")
    cluster = ray["spec"]["rayClusterConfig"]
    head = cluster["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"]
    worker = cluster["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["resources"]
    assert (head["requests"]["cpu"], head["requests"]["memory"]) == ("100m", "2Gi")
    assert (head["limits"]["cpu"], head["limits"]["memory"]) == ("1", "2Gi")
    # The limit stays the CPU count: KubeRay gives Ray that many logical CPUs from it.
    assert (worker["requests"]["cpu"], worker["requests"]["memory"]) == ("100m", "6Gi")
    assert (worker["limits"]["cpu"], worker["limits"]["memory"]) == ("8", "6Gi")
    default = one(render("idx", "ns", spec_of()), "RayService")["spec"]["rayClusterConfig"]
    head_default = default["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"]
    assert (head_default["requests"]["cpu"], head_default["requests"]["memory"]) == ("2", "4Gi")
