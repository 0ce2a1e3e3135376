"""Pure rendering of a RagIndex into Kubernetes objects (no cluster needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from ray.serve.schema import ServeDeploySchema

from ragindex.config import RagIndexSpec
from ragindex.errors import InvalidInput
from ragindex.operator.render import (
    LABEL_GENERATION,
    LABEL_INDEX,
    ObjectRef,
    RenderOptions,
    index_generation,
    objects_to_prune,
    ray_service_name,
    ref_of,
    render,
    scale_quantity,
    validate_name,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ragindex.yaml"


def spec_of(**fields: Any) -> RagIndexSpec:
    return RagIndexSpec.model_validate(fields)


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
        "PersistentVolumeClaim",
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

    spec = spec_of(embedder={"gpus": 0.5}, reranker={"enabled": True, "model": "m", "gpus": 2})
    groups = one(render("idx", "ns", spec), "RayService")["spec"]["rayClusterConfig"][
        "workerGroupSpecs"
    ]
    gpu = {g["groupName"]: g for g in groups}["gpu"]
    limits = gpu["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "2"  # one pod must hold the largest replica
    assert 1 <= gpu["minReplicas"] <= gpu["maxReplicas"]


def test_elasticsearch_only_when_managed() -> None:
    managed = render("idx", "ns", spec_of(lexical={"backend": "elasticsearch", "managedNodes": 3}))
    es = one(managed, "Elasticsearch")
    assert es["spec"]["version"].startswith("9.")
    assert es["spec"]["nodeSets"][0]["count"] == 3
    # The Serve app is told where ECK's HTTP service is.
    url = serve_config(managed)["applications"][0]["args"]["spec"]["lexical"]["elasticsearchUrl"]
    assert url == "http://idx-es-es-http.ns.svc:9200"

    external = spec_of(lexical={"backend": "elasticsearch", "elasticsearchUrl": "http://es:9200"})
    assert by_kind(render("idx", "ns", external), "Elasticsearch") == []
    assert by_kind(render("idx", "ns", spec_of()), "Elasticsearch") == []


def test_embedder_change_is_a_new_generation_and_serve_changes_are_not() -> None:
    base = spec_of()
    gen = index_generation(base)
    assert len(gen) == 8
    for same in (
        spec_of(dense={"shards": 3}),
        spec_of(dense={"hnsw": {"efSearch": 64}}),
        spec_of(embedder={"batchSize": 64, "replicas": 3}),
    ):
        assert index_generation(same) == gen
    for other in (
        spec_of(embedder={"model": "other-model"}),
        spec_of(embedder={"backend": "flagembedding"}),
        spec_of(embedder={"queryPrefix": "query: "}),
        spec_of(embedder={"passagePrefix": "passage: "}),
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


def test_service_keeps_selecting_the_active_generation() -> None:
    spec = spec_of(embedder={"model": "m2"})
    fresh = one(render("idx", "ns", spec), "Service")["spec"]["selector"]
    assert fresh[LABEL_GENERATION] == index_generation(spec)
    during = one(render("idx", "ns", spec, active_generation="0ld0ld00"), "Service")
    assert during["spec"]["selector"][LABEL_GENERATION] == "0ld0ld00"


def test_storage_is_per_shard_replica_and_per_generation() -> None:
    spec = spec_of(dense={"shards": 4, "replicas": 2}, storageSize="20Gi")
    claim = one(
        render("idx", "ns", spec, options=RenderOptions(storage_class="fast")),
        "PersistentVolumeClaim",
    )
    assert claim["metadata"]["name"] == f"idx-{index_generation(spec)}-data"
    assert claim["spec"]["resources"]["requests"]["storage"] == "160Gi"
    assert claim["spec"]["storageClassName"] == "fast"
    assert scale_quantity("500M", 3) == "1500M"
    with pytest.raises(InvalidInput, match="storageSize"):
        render("idx", "ns", spec_of(storageSize="1.5Gi"))


def test_bad_names_are_refused_with_the_rule() -> None:
    assert validate_name("docs-1") == "docs-1"
    for bad in ("Docs", "1docs", "a" * 39, "docs_", "docs-"):
        with pytest.raises(InvalidInput, match="RagIndex name"):
            render(bad, "ns", spec_of())


def ref(kind: str, name: str, gen: str | None = None) -> ObjectRef:
    api = {"RayService": "ray.io/v1", "Elasticsearch": "elasticsearch.k8s.elastic.co/v1"}
    return ObjectRef(api.get(kind, "v1"), kind, name, gen)


def test_prune_keeps_desired_and_serving_generations_only() -> None:
    desired = [ref_of(o) for o in render("idx", "ns", spec_of(embedder={"model": "m2"}))]
    new_gen = desired[0].generation
    existing = [
        *desired,
        ref("RayService", "idx-0ld0ld00", "0ld0ld00"),
        ref("PersistentVolumeClaim", "idx-0ld0ld00-data", "0ld0ld00"),
        ref("RayService", "idx-dead0000", "dead0000"),
        ref("Elasticsearch", "idx-es", "0ld0ld00"),  # backend switched to embedded
    ]
    doomed = objects_to_prune(existing, desired, keep_generations=("0ld0ld00", new_gen))
    assert {(r.kind, r.name) for r in doomed} == {
        ("RayService", "idx-dead0000"),
        ("Elasticsearch", "idx-es"),
    }
    # Once the new generation serves, the old one goes too.
    doomed = objects_to_prune(existing, desired, keep_generations=(new_gen,))
    assert {r.name for r in doomed} == {
        "idx-0ld0ld00",
        "idx-0ld0ld00-data",
        "idx-dead0000",
        "idx-es",
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
    assert head == {
        "requests": {"cpu": "100m", "memory": "2Gi"},
        "limits": {"cpu": "1", "memory": "2Gi"},
    }
    # The limit stays the CPU count: KubeRay gives Ray that many logical CPUs from it.
    assert worker == {
        "requests": {"cpu": "100m", "memory": "6Gi"},
        "limits": {"cpu": "8", "memory": "6Gi"},
    }
    default = one(render("idx", "ns", spec_of()), "RayService")["spec"]["rayClusterConfig"]
    head_default = default["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"]
    assert head_default["requests"] == {"cpu": "2", "memory": "4Gi"}
