"""The RagIndex CRD: generated from RagIndexSpec, committed without drift, and enforced by a real
API server the same way pydantic enforces the model (types, bounds, enums, cross-field rules)."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel, ValidationError

from ragindex.config import RagIndexSpec
from ragindex.operator import crd as crd_module
from ragindex.operator import render_crd, render_crd_yaml
from ragindex.operator.render import render

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / "crds" / "ragindex.dev_ragindexes.yaml"
CHART_COPY = REPO / "helm" / "ragindex-operator" / "files" / "ragindex.dev_ragindexes.yaml"


def _spec_schema() -> dict[str, Any]:
    version = render_crd()["spec"]["versions"][0]
    return version["schema"]["openAPIV3Schema"]["properties"]["spec"]


def _walk(node: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if isinstance(node, dict):
        out.append(node)
        for v in node.values():
            out.extend(_walk(v))
    elif isinstance(node, list):
        for v in node:
            out.extend(_walk(v))
    return out


def test_committed_crd_is_the_rendered_one() -> None:
    assert COMMITTED.read_text() == render_crd_yaml(), (
        "crds/ragindex.dev_ragindexes.yaml is stale: run "
        "`python -m ragindex.operator.crd > crds/ragindex.dev_ragindexes.yaml`"
    )
    assert yaml.safe_load(COMMITTED.read_text()) == render_crd()


def test_chart_copy_equals_committed_crd() -> None:
    assert CHART_COPY.read_text() == COMMITTED.read_text(), (
        "cp crds/ragindex.dev_ragindexes.yaml helm/ragindex-operator/files/"
    )


def test_names_and_subresources() -> None:
    spec = render_crd()["spec"]
    assert spec["group"] == "ragindex.dev" and spec["scope"] == "Namespaced"
    assert spec["names"]["kind"] == "RagIndex" and spec["names"]["plural"] == "ragindexes"
    assert "ragx" in spec["names"]["shortNames"]
    version = spec["versions"][0]
    assert version["name"] == "v1alpha1" and version["subresources"] == {"status": {}}
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    assert columns == ["Ready", "Shards", "Embedder", "Generation", "Backfill", "Endpoint", "Age"]
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert {
        "observedGeneration",
        "conditions",
        "endpoint",
        "activeGeneration",
        "phase",
        "generations",
    } <= set(status)
    generation = status["generations"]["items"]["properties"]
    assert set(generation["phase"]["enum"]) == {
        "Backfilling",
        "Verifying",
        "Serving",
        "Retained",
        "Failed",
    }
    condition = status["conditions"]["items"]["properties"]
    assert set(condition) == {
        "type",
        "status",
        "reason",
        "message",
        "lastTransitionTime",
        "observedGeneration",
    }


def _assert_model_covered(model: type[BaseModel], schema: dict[str, Any], path: str) -> None:
    for name, field in model.model_fields.items():
        alias = field.alias or name
        assert alias in schema["properties"], f"{path}.{alias} missing from the CRD"
        prop = schema["properties"][alias]
        assert prop.get("description"), f"{path}.{alias} has no description"
        sub = field.annotation
        if isinstance(sub, type) and issubclass(sub, BaseModel):
            assert prop["type"] == "object"
            _assert_model_covered(sub, prop, f"{path}.{alias}")
    assert set(schema["properties"]) == {f.alias or n for n, f in model.model_fields.items()}


def _without_empty(node: Any) -> Any:
    """The value with empty lists and maps removed, recursively."""
    if isinstance(node, dict):
        kept = {k: _without_empty(v) for k, v in node.items()}
        return {k: v for k, v in kept.items() if v not in ({}, [])}
    if isinstance(node, list):
        return [_without_empty(v) for v in node]
    return node


def test_every_field_of_the_model_is_in_the_schema() -> None:
    _assert_model_covered(RagIndexSpec, _spec_schema(), "spec")


def test_schema_is_structural() -> None:
    for node in _walk(_spec_schema()):
        assert not {"$ref", "anyOf", "oneOf", "allOf", "title"} & set(
            node.keys() - {"properties"}
        ), node
        # A map's values have a schema (a structural map); free-form objects say so instead.
        values = node.get("additionalProperties")
        assert values is None or isinstance(values, dict), node
        if node.get("type") == "object" and "properties" not in node and values is None:
            assert node.get("x-kubernetes-preserve-unknown-fields") is True, node


def test_bounds_enums_and_defaults_carry_over() -> None:
    props = _spec_schema()["properties"]
    shards = props["dense"]["properties"]["shards"]
    assert (shards["type"], shards["minimum"], shards["maximum"], shards["default"]) == (
        "integer",
        1,
        256,
        2,
    )
    assert props["lexical"]["properties"]["backend"]["enum"] == ["embedded", "elasticsearch"]
    freshness = props["freshnessS"]
    assert (freshness["minimum"], freshness["exclusiveMinimum"]) == (0, True)
    # A nested default that differs from the nested model's own defaults is spelled out.
    assert props["scaling"]["properties"]["ingest"]["default"] == {"maxReplicas": 2}


def test_every_model_validator_has_a_cel_rule() -> None:
    messages = {
        r["message"]
        for node in _walk(_spec_schema())
        for r in node.get("x-kubernetes-validations", [])
    }
    assert messages == {
        "reranker.model is required when reranker.enabled is true",
        "embedder.backend onnx and onnx-int8 run on CPU (onnxruntime): set embedder.gpus to 0",
        "lexical.elasticsearchUrl is only valid with backend elasticsearch",
        "fusion.candidates must be >= fusion.topK",
        "autoscaling minReplicas must be <= maxReplicas",
        "reranker.topN must be >= fusion.topK",
        "generator.baseUrl and generator.model are required for openai-compatible",
        "fusion.denseWeight and fusion.lexicalWeight cannot both be 0",
        "feedback.rocchio alpha and beta cannot both be 0",
        "generator.apiKeySecret and generator.apiKeyEnv are exclusive",
        "log.minInsyncReplicas must be <= log.replicationFactor",
        "log.replicationFactor must be <= log.brokers for a managed log",
        "log.bootstrapServers is required for, and only valid with, external",
        "log.credentialsSecret is only valid with mode external",
        "log.caSecret is only valid with mode external (a managed log's CA is Strimzi's)",
        *(
            f"lexical.{field} is only valid with an external elasticsearchUrl (a managed"
            " Elasticsearch gets its user and CA from the operator)"
            for field in (
                "elasticsearchCredentialsSecret",
                "elasticsearchApiKeySecret",
                "elasticsearchCaSecret",
            )
        ),
        "lexical.elasticsearchCredentialsSecret and elasticsearchApiKeySecret are exclusive:"
        " give one",
        "lexical.elasticsearchCaSecret needs an https:// elasticsearchUrl",
        "dense.index.trainMin must be >= ivf.nlist for the IVF types, and >= 2^pq.nbits for"
        " ivf_pq (FAISS cannot train on fewer vectors)",
        # A transition rule: pydantic never sees the old spec, the API server does.
        "log.docsPartitions cannot decrease (Kafka never removes partitions)",
        "source.kind volume needs exactly one of claimName or imageReference",
        "source.claimName, imageReference and path are only valid with volume",
        "source.tokenSecret is only valid with kind hub",
        "exposure.ingress and exposure.httpRoute are exclusive: expose the index through one"
        " of them",
        "exposure.ingress.host is required with tlsSecret: the certificate is served for that host",
        "exposure.httpRoute.parentRefs needs at least one Gateway",
    }
    assert set(crd_module._CEL) <= {"RagIndexSpec", *RagIndexSpec.model_json_schema()["$defs"]}


# --- against the real API server ---------------------------------------------------------


def _ragindex(name: str, namespace: str, spec: dict[str, Any] | None) -> str:
    obj: dict[str, Any] = {
        "apiVersion": "ragindex.dev/v1alpha1",
        "kind": "RagIndex",
        "metadata": {"name": name, "namespace": namespace},
    }
    if spec is not None:
        obj["spec"] = spec
    return json.dumps(obj)


@pytest.mark.kubernetes
def test_empty_spec_is_defaulted_exactly_like_pydantic(kube_cluster, kube_namespace) -> None:
    kube_cluster.kubectl(
        "apply", "--server-side", "-f", "-", input=_ragindex("d", kube_namespace, None)
    )
    got = json.loads(
        kube_cluster.kubectl("get", "ragx", "d", "-n", kube_namespace, "-o", "json").stdout
    )
    expected = RagIndexSpec.model_validate({}).model_dump(
        mode="json", by_alias=True, exclude_none=True
    )
    # An empty list or map (e.g. pods.head.tolerations) is stored as absent: the same spec.
    assert _without_empty(got["spec"]) == _without_empty(expected)
    assert RagIndexSpec.model_validate(got["spec"]) == RagIndexSpec.model_validate({})


@pytest.mark.kubernetes
def test_full_spec_is_accepted_and_printed(kube_cluster, kube_namespace) -> None:
    spec = {
        "embedder": {
            "model": "all-MiniLM-L6-v2",
            "backend": "sentence-transformers",
            "gpus": 0.5,
            "queryPrefix": "query: ",
        },
        "reranker": {"enabled": True, "model": "/models/ce", "topN": 20},
        "dense": {"shards": 4, "hnsw": {"efSearch": 64}},
        "lexical": {"backend": "elasticsearch", "elasticsearchUrl": "http://es:9200"},
        "fusion": {"candidates": 50, "topK": 10},
        "scaling": {"query": {"minReplicas": 2, "maxReplicas": 8}},
        "authSecret": "tokens",
    }
    RagIndexSpec.model_validate(spec)
    kube_cluster.kubectl(
        "apply", "--server-side", "-f", "-", input=_ragindex("full", kube_namespace, spec)
    )
    table = kube_cluster.kubectl("get", "ri", "full", "-n", kube_namespace, "-o", "wide").stdout
    header, row = table.splitlines()[:2]
    assert header.split() == [
        "NAME",
        "READY",
        "SHARDS",
        "EMBEDDER",
        "GENERATION",
        "BACKFILL",
        "ENDPOINT",
        "AGE",
    ]
    assert row.split()[:3] == ["full", "4", "all-MiniLM-L6-v2"]
    # The status the operator writes while a new generation backfills, as the columns show it.
    entries = [
        {"id": "aaaa1111", "phase": "Retained"},
        {"id": "bbbb2222", "phase": "Serving"},
        {"id": "cccc3333", "phase": "Backfilling", "progress": "42%"},
    ]
    status = {"status": {"activeGeneration": "bbbb2222", "generations": entries}}
    kube_cluster.kubectl(
        "patch",
        "ri",
        "full",
        "-n",
        kube_namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(status),
    )
    table = kube_cluster.kubectl("get", "ri", "full", "-n", kube_namespace).stdout
    row = table.splitlines()[1].split()
    assert row[-3:-1] == ["bbbb2222", "42%"], table  # (Ready is empty: no conditions)
    got = json.loads(
        kube_cluster.kubectl("get", "ri", "full", "-n", kube_namespace, "-o", "json").stdout
    )
    parsed = RagIndexSpec.model_validate(got["spec"])
    assert parsed.dense.shards == 4 and parsed.scaling.ingest.max_replicas == 2


# (spec, words the API server's message must contain: the field path and the reason)
INVALID: dict[str, tuple[dict[str, Any], list[str]]] = {
    "wrong-type": ({"dense": {"shards": "two"}}, ["spec.dense.shards", "integer"]),
    "zero-shards": ({"dense": {"shards": 0}}, ["spec.dense.shards", "greater than or equal to 1"]),
    "candidates-below-topk": (
        {"fusion": {"candidates": 5, "topK": 10}},
        ["spec.fusion.candidates", "fusion.candidates must be >= fusion.topK"],
    ),
    "unknown-lexical-backend": (
        {"lexical": {"backend": "solr"}},
        ["spec.lexical.backend", "Unsupported value", "solr"],
    ),
    "reranker-without-model": (
        {"reranker": {"enabled": True}},
        ["spec.reranker.model", "reranker.model is required"],
    ),
    "rerank-topn-below-topk": (
        {"reranker": {"enabled": True, "model": "m", "topN": 4}, "fusion": {"topK": 8}},
        ["spec.reranker.topN", "reranker.topN must be >= fusion.topK"],
    ),
    "min-above-max-replicas": (
        {"scaling": {"query": {"minReplicas": 5, "maxReplicas": 2}}},
        ["spec.scaling.query.minReplicas", "minReplicas must be <= maxReplicas"],
    ),
    "es-url-with-embedded": (
        {"lexical": {"backend": "embedded", "elasticsearchUrl": "http://es:9200"}},
        ["spec.lexical.elasticsearchUrl", "only valid with backend elasticsearch"],
    ),
    "remote-generator-without-endpoint": (
        {"generator": {"backend": "openai-compatible"}},
        ["spec.generator.baseUrl", "required for openai-compatible"],
    ),
    "generator-key-env-and-secret": (
        {"generator": {"apiKeyEnv": "RAGINDEX_GENERATOR_KEY", "apiKeySecret": "gen"}},
        ["spec.generator.apiKeySecret", "are exclusive"],
    ),
    "log-isr-above-replication": (
        {"log": {"mode": "managed", "replicationFactor": 2, "minInsyncReplicas": 3}},
        ["spec.log.minInsyncReplicas", "must be <= log.replicationFactor"],
    ),
    "log-replication-above-brokers": (
        {"log": {"mode": "managed", "brokers": 1}},
        ["spec.log.replicationFactor", "must be <= log.brokers"],
    ),
    "log-external-without-bootstrap": (
        {"log": {"mode": "external"}},
        ["spec.log.bootstrapServers", "required for, and only valid with, external"],
    ),
    "log-bootstrap-with-managed": (
        {"log": {"mode": "managed", "bootstrapServers": "kafka:9092"}},
        ["spec.log.bootstrapServers", "required for, and only valid with, external"],
    ),
    "log-credentials-with-managed": (
        {"log": {"mode": "managed", "credentialsSecret": "kafka-user"}},
        ["spec.log.credentialsSecret", "only valid with mode external"],
    ),
    "log-ca-with-managed": (
        {"log": {"mode": "managed", "caSecret": "kafka-ca"}},
        ["spec.log.caSecret", "only valid with mode external"],
    ),
    "es-credentials-with-managed": (
        {"lexical": {"backend": "elasticsearch", "elasticsearchCredentialsSecret": "es-user"}},
        ["spec.lexical.elasticsearchCredentialsSecret", "only valid with an external"],
    ),
    "es-credentials-and-api-key": (
        {
            "lexical": {
                "backend": "elasticsearch",
                "elasticsearchUrl": "https://es:9200",
                "elasticsearchCredentialsSecret": "es-user",
                "elasticsearchApiKeySecret": "es-key",
            }
        },
        ["spec.lexical.elasticsearchApiKeySecret", "exclusive"],
    ),
    "es-ca-on-http": (
        {
            "lexical": {
                "backend": "elasticsearch",
                "elasticsearchUrl": "http://es:9200",
                "elasticsearchCaSecret": "es-ca",
            }
        },
        ["spec.lexical.elasticsearchCaSecret", "needs an https:// elasticsearchUrl"],
    ),
    "log-unknown-mode": (
        {"log": {"mode": "pulsar"}},
        ["spec.log.mode", "Unsupported value", "pulsar"],
    ),
    "onnx-on-gpus": (
        {"embedder": {"backend": "onnx-int8", "gpus": 1}},
        ["spec.embedder.gpus", "run on CPU (onnxruntime)"],
    ),
    "unknown-field": ({"dense": {"shardz": 3}}, ["unknown field", "spec.dense.shardz"]),
    "ivf-train-min-below-nlist": (
        {"dense": {"index": {"type": "ivf_sq8", "trainMin": 100, "ivf": {"nlist": 256}}}},
        ["spec.dense.index.trainMin", "must be >= ivf.nlist"],
    ),
    "pq-train-min-below-codebook": (
        {"dense": {"index": {"type": "ivf_pq", "trainMin": 200, "ivf": {"nlist": 64}}}},
        ["spec.dense.index.trainMin", "2^pq.nbits"],
    ),
    "unknown-index-type": (
        {"dense": {"index": {"type": "ivf_flat"}}},
        ["spec.dense.index.type", "Unsupported value", "ivf_flat"],
    ),
    "volume-source-without-claim": (
        {"embedder": {"source": {"kind": "volume", "path": "bge"}}},
        ["spec.embedder.source.claimName", "needs exactly one of claimName or imageReference"],
    ),
    "volume-source-with-claim-and-image": (
        {"reranker": {"source": {"kind": "volume", "claimName": "m", "imageReference": "r/m"}}},
        ["spec.reranker.source.claimName", "needs exactly one of claimName or imageReference"],
    ),
    "claim-on-packaged-source": (
        {"embedder": {"source": {"claimName": "models"}}},
        ["spec.embedder.source.claimName", "only valid with volume"],
    ),
    "token-secret-on-volume-source": (
        {"embedder": {"source": {"kind": "volume", "claimName": "m", "tokenSecret": "hf"}}},
        ["spec.embedder.source.tokenSecret", "only valid with kind hub"],
    ),
    "unknown-source-kind": (
        {"embedder": {"source": {"kind": "s3"}}},
        ["spec.embedder.source.kind", "Unsupported value", "s3"],
    ),
    "toleration-unknown-operator": (
        {"pods": {"embedders": {"tolerations": [{"key": "gpu", "operator": "Matches"}]}}},
        ["spec.pods.embedders.tolerations[0].operator", "Unsupported value", "Matches"],
    ),
    "spread-without-topology-key": (
        {"pods": {"cpuWorkers": {"topologySpreadConstraints": [{"maxSkew": 1}]}}},
        ["spec.pods.cpuWorkers.topologySpreadConstraints[0].topologyKey", "Required value"],
    ),
    "node-selector-not-strings": (
        {"pods": {"head": {"nodeSelector": {"zone": 5}}}},
        ["spec.pods.head.nodeSelector.zone", "string"],
    ),
    "es-storage-size-not-a-quantity": (
        {"lexical": {"managed": {"storage": {"size": "lots"}}}},
        ["spec.lexical.managed.storage.size", "should match"],
    ),
}


@pytest.mark.parametrize("spec, words", list(INVALID.values()), ids=list(INVALID))
def test_pydantic_refuses_the_invalid_specs(spec: dict[str, Any], words: list[str]) -> None:
    with pytest.raises(ValidationError):
        RagIndexSpec.model_validate(spec)


@pytest.mark.kubernetes
def test_api_server_refuses_invalid_specs_naming_the_field(kube_cluster, kube_namespace) -> None:
    # One test over all cases: each apply is a round trip, the namespace is shared.
    for case, (spec, words) in INVALID.items():
        name = f"bad-{uuid.uuid4().hex[:6]}"
        # `create` goes through openAPI validation as a whole object, which names the
        # expected type; server-side apply would fail earlier, in its typed patch.
        proc = kube_cluster.kubectl(
            "create", "-f", "-", input=_ragindex(name, kube_namespace, spec), check=False
        )
        assert proc.returncode != 0, f"{case}: accepted\n{proc.stdout}"
        for word in words:
            assert word in proc.stderr, f"{case}: {word!r} not in\n{proc.stderr}"
        # Refused means nothing was stored.
        missing = kube_cluster.kubectl("get", "ragx", name, "-n", kube_namespace, check=False)
        assert missing.returncode != 0 and "NotFound" in missing.stderr


@pytest.mark.kubernetes
def test_cel_rules_also_guard_updates(kube_cluster, kube_namespace) -> None:
    kube_cluster.kubectl(
        "apply", "--server-side", "-f", "-", input=_ragindex("u", kube_namespace, {})
    )
    proc = kube_cluster.kubectl(
        "patch",
        "ragx",
        "u",
        "-n",
        kube_namespace,
        "--type=merge",
        "-p",
        '{"spec": {"fusion": {"topK": 100, "candidates": 50}}}',
        check=False,
    )
    assert proc.returncode != 0 and "fusion.candidates must be >= fusion.topK" in proc.stderr
    got = json.loads(
        kube_cluster.kubectl("get", "ragx", "u", "-n", kube_namespace, "-o", "json").stdout
    )
    assert got["spec"]["fusion"]["topK"] == 8


@pytest.mark.kubernetes
def test_docs_partitions_only_grow(kube_cluster, kube_namespace) -> None:
    spec = {"log": {"mode": "managed", "docsPartitions": 6}}
    kube_cluster.kubectl(
        "apply", "--server-side", "-f", "-", input=_ragindex("p", kube_namespace, spec)
    )

    def patch(partitions: int) -> Any:
        body = json.dumps({"spec": {"log": {"docsPartitions": partitions}}})
        return kube_cluster.kubectl(
            "patch", "ragx", "p", "-n", kube_namespace, "--type=merge", "-p", body, check=False
        )

    shrink = patch(3)
    assert shrink.returncode != 0 and "docsPartitions cannot decrease" in shrink.stderr
    assert patch(8).returncode == 0


@pytest.mark.kubernetes
def test_status_subresource_is_separate_from_spec(kube_cluster, kube_namespace) -> None:
    kube_cluster.kubectl(
        "apply", "--server-side", "-f", "-", input=_ragindex("s", kube_namespace, {})
    )
    status = {
        "status": {
            "observedGeneration": 1,
            "phase": "Ready",
            "endpoint": "http://ragindex-s:8000/",
            "activeGeneration": "abc123",
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "ServeRunning",
                    "message": "all deployments healthy",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                    "observedGeneration": 1,
                }
            ],
        }
    }
    kube_cluster.kubectl(
        "patch",
        "ragx",
        "s",
        "-n",
        kube_namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(status),
    )
    got = json.loads(
        kube_cluster.kubectl("get", "ragx", "s", "-n", kube_namespace, "-o", "json").stdout
    )
    assert got["status"] == status["status"]
    assert got["metadata"]["generation"] == 1  # a status write does not bump the generation
    row = kube_cluster.kubectl("get", "ragx", "s", "-n", kube_namespace, "--no-headers").stdout
    assert row.split()[1:5] == ["True", "2", "all-MiniLM-L6-v2", "abc123"]


# --- the vendored third-party CRDs -------------------------------------------------------

RAY_SERVICE = {
    "apiVersion": "ray.io/v1",
    "kind": "RayService",
    "metadata": {"name": "rs"},
    "spec": {
        "serveConfigV2": "applications: []\n",
        "rayClusterConfig": {
            "headGroupSpec": {
                "rayStartParams": {},
                "template": {
                    "spec": {"containers": [{"name": "ray-head", "image": "rayproject/ray:2.60.0"}]}
                },
            }
        },
    },
}

ELASTICSEARCH = {
    "apiVersion": "elasticsearch.k8s.elastic.co/v1",
    "kind": "Elasticsearch",
    "metadata": {"name": "es"},
    "spec": {"version": "9.3.0", "nodeSets": [{"name": "default", "count": 1}]},
}


@pytest.mark.kubernetes
@pytest.mark.parametrize("obj", [RAY_SERVICE, ELASTICSEARCH], ids=["rayservice", "elasticsearch"])
def test_vendored_crds_accept_minimal_objects(kube_cluster, kube_namespace, obj) -> None:
    kube_cluster.kubectl(
        "apply", "--server-side", "-n", kube_namespace, "-f", "-", input=json.dumps(obj)
    )
    kind = obj["kind"].lower()
    got = json.loads(
        kube_cluster.kubectl(
            "get", kind, obj["metadata"]["name"], "-n", kube_namespace, "-o", "json"
        ).stdout
    )
    assert got["spec"]["rayClusterConfig" if kind == "rayservice" else "nodeSets"]


@pytest.mark.kubernetes
def test_vendored_crds_enforce_their_schema(kube_cluster, kube_namespace) -> None:
    bad = json.loads(json.dumps(ELASTICSEARCH))
    bad["spec"]["nodeSets"][0]["count"] = "one"
    proc = kube_cluster.kubectl(
        "apply",
        "--server-side",
        "-n",
        kube_namespace,
        "-f",
        "-",
        input=json.dumps(bad),
        check=False,
    )
    assert proc.returncode != 0 and "spec.nodeSets[0].count" in proc.stderr


EXAMPLE = REPO / "examples" / "ragindex.yaml"


@pytest.mark.kubernetes
def test_rendered_objects_are_admitted_by_the_vendored_crds(kube_cluster, kube_namespace) -> None:
    """Every object `render` makes for a managed and an external log passes the real API
    server's validation: Strimzi's Kafka, KafkaNodePool and KafkaTopic schemas, KubeRay's
    RayService (authOptions, autoscalerOptions), ECK, NetworkPolicy and core kinds."""
    example = yaml.safe_load(EXAMPLE.read_text())["spec"]
    external = example | {
        "log": {
            "mode": "external",
            "bootstrapServers": "k:9093",
            "credentialsSecret": "ku",
            "caSecret": "kca",
        },
        "lexical": {
            "backend": "elasticsearch",
            "elasticsearchUrl": "https://es:9200",
            "elasticsearchCredentialsSecret": "eu",
            "elasticsearchCaSecret": "eca",
        },
    }
    for spec in (example, external):
        objects = render("adm", kube_namespace, RagIndexSpec.model_validate(spec))
        stream = "\n---\n".join(json.dumps(o) for o in objects)
        proc = kube_cluster.kubectl(
            "apply",
            "--server-side",
            "--dry-run=server",
            "--field-manager=t",
            "-f",
            "-",
            input=stream,
        )
        assert proc.stdout.count("serverside-applied") == len(objects), proc.stdout
    kinds = {o["kind"] for o in render("adm", "x", RagIndexSpec.model_validate(example))}
    assert {"Kafka", "KafkaNodePool", "KafkaTopic", "KafkaUser", "NetworkPolicy"} <= kinds
    # The vendored Strimzi schema is enforced, not merely present.
    bad = render("adm", kube_namespace, RagIndexSpec.model_validate(example))
    topic = next(o for o in bad if o["kind"] == "KafkaTopic")
    topic["spec"]["partitions"] = 0
    proc = kube_cluster.kubectl(
        "apply",
        "--server-side",
        "--dry-run=server",
        "-f",
        "-",
        input=json.dumps(topic),
        check=False,
    )
    assert proc.returncode != 0 and "spec.partitions" in proc.stderr, proc.stderr


@pytest.mark.kubernetes
def test_children_owned_by_a_ragindex_are_garbage_collected(kube_cluster, kube_namespace) -> None:
    """The operator relies on owner references: the harness runs the garbage collector."""
    ns = kube_namespace
    kube_cluster.kubectl("apply", "--server-side", "-f", "-", input=_ragindex("gc", ns, {}))
    uid = kube_cluster.kubectl(
        "get", "ragx", "gc", "-n", ns, "-o", "jsonpath={.metadata.uid}"
    ).stdout
    child = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "gc-child",
            "namespace": ns,
            "ownerReferences": [
                {
                    "apiVersion": "ragindex.dev/v1alpha1",
                    "kind": "RagIndex",
                    "name": "gc",
                    "uid": uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "data": {"k": "v"},
    }
    kube_cluster.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(child))
    kube_cluster.kubectl("delete", "ragx", "gc", "-n", ns, "--wait=true", "--timeout=60s")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        got = kube_cluster.kubectl("get", "configmap", "gc-child", "-n", ns, check=False)
        if got.returncode != 0 and "NotFound" in got.stderr:
            return
        time.sleep(0.5)
    pytest.fail("the owned ConfigMap outlived its RagIndex by 60 s")


@pytest.mark.kubernetes
def test_kubectl_explain_shows_the_model_and_pod_fields(kube_cluster) -> None:
    """The published schema carries the new fields' descriptions down to list items."""
    cases = {
        "ragindex.spec.embedder.source": ["kind", "claimName", "tokenSecret", "packaged"],
        "ragindex.spec.pods.embedders.tolerations": ["NoSchedule", "tolerationSeconds"],
        "ragindex.spec.pods.head.resources": ["limits", "requests"],
        "ragindex.spec.image": ["appVersion"],
        "ragindex.spec.lexical.managed.storage": ["storageClassName", "size"],
    }
    for field, words in cases.items():
        out = wait_explain(kube_cluster, field)
        for word in words:
            assert word in out, f"{field}: {word!r} not in\n{out}"


def wait_explain(kube_cluster: Any, field: str) -> str:
    """`kubectl explain` of a field, once the API server publishes the CRD's openAPI (a few
    seconds after the CRD is established)."""
    deadline = time.monotonic() + 60
    while True:
        proc = kube_cluster.kubectl("explain", field, check=False)
        if proc.returncode == 0 or time.monotonic() > deadline:
            assert proc.returncode == 0, proc.stderr
            return str(proc.stdout)
        time.sleep(1)
