"""Model sources and per-pool pod templates: what the operator decides from the spec (pure),
and the replica's side of a model that cannot load (its message names the model and why)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from ragindex.app.serve.pools import ModelUnavailable, pool_embedder, pool_reranker
from ragindex.config import PACKAGED_EMBEDDERS, RagIndexSpec
from ragindex.errors import InvalidInput
from ragindex.models import resolve_model_path
from ragindex.models.packaged import HUB_ORGANISATION, PACKAGED_MODELS
from ragindex.operator.model_sources import unavailable_models
from ragindex.operator.objects import RenderOptions
from ragindex.operator.render import named_secrets, render

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def spec_of(**fields: Any) -> RagIndexSpec:
    base: dict[str, Any] = {"log": {"mode": "managed"}, "authSecret": "tokens"}
    return RagIndexSpec.model_validate(base | fields)


def one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] == kind]
    return found


def groups(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    cluster = one(objects, "RayService")["spec"]["rayClusterConfig"]
    return {"head": cluster["headGroupSpec"]} | {
        g["groupName"]: g for g in cluster["workerGroupSpecs"]
    }


def pod(group: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = group["template"]["spec"]
    return spec


def test_the_operator_knows_the_packaged_names_the_models_load() -> None:
    names = {*PACKAGED_MODELS, *(HUB_ORGANISATION + m for m in PACKAGED_MODELS)}
    assert names == PACKAGED_EMBEDDERS


@pytest.mark.parametrize(
    "fields, claims, secrets, words",
    [
        ({"embedder": {"model": "BAAI/bge-base-en-v1.5"}}, (), (), ["not packaged in the image"]),
        ({"embedder": {"model": "models/rel"}}, (), (), ["absolute path inside the image"]),
        (
            {"reranker": {"enabled": True, "model": "cross-encoder/ms-marco"}},
            (),
            (),
            ["reranker model 'cross-encoder/ms-marco' (packaged)", "packaged rerankers: none"],
        ),
        (
            {"embedder": {"model": "bge", "source": {"kind": "volume", "claimName": "w"}}},
            ("other",),
            (),
            ["embedder model 'bge' (volume)", "PersistentVolumeClaim 'w' does not exist"],
        ),
        (
            {"embedder": {"model": "bge", "source": {"kind": "hub", "tokenSecret": "hf"}}},
            (),
            (),
            ["embedder model 'bge' (hub)", "token Secret 'hf' does not exist"],
        ),
    ],
)
def test_models_that_cannot_load_are_named_with_the_reason(
    fields: dict[str, Any], claims: tuple[str, ...], secrets: tuple[str, ...], words: list[str]
) -> None:
    (message,) = unavailable_models(spec_of(**fields), claims, secrets)
    for word in words:
        assert word in message, message


@pytest.mark.parametrize(
    "fields",
    [
        {},  # the packaged MiniLM
        {"embedder": {"model": "sentence-transformers/all-mpnet-base-v2"}},
        {"embedder": {"model": "/opt/models/bge"}},  # inside the image: only a pod can look
        {"embedder": {"model": "bge", "source": {"kind": "volume", "claimName": "w"}}},
        {"embedder": {"model": "bge", "source": {"kind": "volume", "imageReference": "r/m:1"}}},
        {"embedder": {"model": "BAAI/bge-m3", "source": {"kind": "hub", "tokenSecret": "hf"}}},
        {"reranker": {"enabled": False, "model": "not-loaded"}},
    ],
)
def test_models_that_can_load_pass(fields: dict[str, Any]) -> None:
    assert unavailable_models(spec_of(**fields), {"w"}, {"hf"}) == []


def test_every_shipped_example_names_only_models_that_can_load() -> None:
    for path in sorted(EXAMPLES.glob("*.yaml")):
        raw = yaml.safe_load(path.read_text())["spec"]
        spec = RagIndexSpec.model_validate(raw)
        claims = {s.source.claim_name for s in (spec.embedder, spec.reranker)} - {None}
        assert unavailable_models(spec, claims, set()) == [], path.name
        render("docs", "ns", spec)  # and renders


def test_pool_templates_reach_their_groups_only() -> None:
    gpu_taint = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["ce"]}]}
                ]
            }
        }
    }
    spread = {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone"}
    spec = spec_of(
        embedder={"backend": "sentence-transformers", "gpus": 1},
        reranker={"enabled": True, "model": "/opt/ce", "gpus": 1},
        pods={
            "head": {"nodeSelector": {"role": "control"}, "priorityClassName": "critical"},
            "cpuWorkers": {
                "resources": {"limits": {"cpu": "3500m", "memory": "6Gi"}},
                "topologySpreadConstraints": [spread],
            },
            "embedders": {"tolerations": [gpu_taint]},
            "rerankers": {"affinity": affinity, "resources": {"limits": {"nvidia.com/gpu": 2}}},
        },
    )
    by_group = groups(render("idx", "ns", spec))
    assert pod(by_group["head"])["nodeSelector"] == {"role": "control"}
    assert pod(by_group["head"])["priorityClassName"] == "critical"
    cpu = pod(by_group["cpu"])
    assert cpu["topologySpreadConstraints"] == [
        {**spread, "whenUnsatisfiable": "ScheduleAnyway", "matchLabelKeys": []}
    ]
    limits = cpu["containers"][0]["resources"]["limits"]
    assert (limits["cpu"], limits["memory"]) == ("3500m", "6Gi")
    assert pod(by_group["gpu-embedder"])["tolerations"] == [gpu_taint]
    assert pod(by_group["gpu-reranker"])["affinity"] == affinity
    reranker_limits = pod(by_group["gpu-reranker"])["containers"][0]["resources"]["limits"]
    assert reranker_limits["nvidia.com/gpu"] == "2"
    # Placement stays with its pool.
    for name in ("head", "cpu", "gpu-reranker"):
        assert "tolerations" not in pod(by_group[name]), name
    for name in ("head", "gpu-embedder", "gpu-reranker"):
        assert "topologySpreadConstraints" not in pod(by_group[name]), name


def test_pool_sizes_set_the_pod_counts_ray_sees() -> None:
    default = groups(render("idx", "ns", spec_of()))["cpu"]
    smaller = spec_of(pods={"cpuWorkers": {"resources": {"requests": {"cpu": 1}}}})
    sized = groups(render("idx", "ns", smaller))["cpu"]
    # Half the CPUs per pod (the default flag is 4): at least as many pods for the same demand.
    assert sized["maxReplicas"] > default["maxReplicas"]
    requests = pod(sized)["containers"][0]["resources"]["requests"]
    assert requests["cpu"] == "1"
    # Ray is told the CPUs the pod counts assumed (a request alone would not reach it).
    assert sized["rayStartParams"]["num-cpus"] == "1"
    assert default["rayStartParams"]["num-cpus"] == "4"


def test_a_gpu_pool_too_small_for_one_replica_is_refused_naming_the_field() -> None:
    spec = spec_of(
        embedder={"backend": "sentence-transformers", "gpus": 2},
        pods={"embedders": {"resources": {"limits": {"nvidia.com/gpu": 1}}}},
    )
    with pytest.raises(InvalidInput, match=r"pods\.embedders\.resources nvidia\.com/gpu is 1"):
        render("idx", "ns", spec)


def test_a_cpu_quantity_that_is_not_one_is_refused_naming_it() -> None:
    spec = spec_of(pods={"cpuWorkers": {"resources": {"limits": {"cpu": "four"}}}})
    with pytest.raises(InvalidInput, match="'four'"):
        render("idx", "ns", spec)


def test_image_from_spec_else_the_operator_default() -> None:
    options = RenderOptions(image="ghcr.io/ragindex/ray:9.9.9")
    for spec, image in [
        (spec_of(), "ghcr.io/ragindex/ray:9.9.9"),
        (spec_of(image="registry.local/ray-gpu:2"), "registry.local/ray-gpu:2"),
    ]:
        for group in groups(render("idx", "ns", spec, options=options)).values():
            assert pod(group)["containers"][0]["image"] == image


def test_hub_source_pods_go_online_with_the_token_from_its_secret() -> None:
    spec = spec_of(
        embedder={"model": "BAAI/bge-m3", "source": {"kind": "hub", "tokenSecret": "hf"}}
    )
    env = pod(groups(render("idx", "ns", spec))["cpu"])["containers"][0]["env"]
    assert {"name": "HF_HUB_OFFLINE", "value": "0"} in env
    token = {"secretKeyRef": {"name": "hf", "key": "token"}}
    assert {"name": "HF_TOKEN", "valueFrom": token} in env
    assert "hf" in named_secrets(spec)  # it must carry the consent label like every Secret
    offline = pod(groups(render("idx", "ns", spec_of()))["cpu"])["containers"][0]["env"]
    assert not any(e["name"] in ("HF_HUB_OFFLINE", "HF_TOKEN") for e in offline)


def test_image_volume_source_is_mounted_read_only() -> None:
    source = {"kind": "volume", "imageReference": "registry.local/bge:1", "path": "bge"}
    spec = spec_of(reranker={"enabled": True, "model": "bge-reranker", "source": source})
    cpu = pod(groups(render("idx", "ns", spec))["cpu"])
    image = {"reference": "registry.local/bge:1", "pullPolicy": "IfNotPresent"}
    assert {"name": "model-reranker", "image": image} in cpu["volumes"]
    mount = {"name": "model-reranker", "mountPath": "/models/reranker", "readOnly": True}
    assert mount in cpu["containers"][0]["volumeMounts"]


def test_managed_elasticsearch_and_kafka_storage() -> None:
    plain = one(render("idx", "ns", spec_of(lexical={"backend": "elasticsearch"})), "Elasticsearch")
    (node_set,) = plain["spec"]["nodeSets"]
    assert "podTemplate" not in node_set and "volumeClaimTemplates" not in node_set  # ECK's
    managed = {
        "resources": {"requests": {"memory": "4Gi", "cpu": 1}, "limits": {"memory": "4Gi"}},
        "storage": {"size": "50Gi"},
    }
    spec = spec_of(
        lexical={"backend": "elasticsearch", "managed": managed},
        log={"mode": "managed", "brokerStorageClass": "fast-ssd"},
    )
    objects = render("idx", "ns", spec, options=RenderOptions(storage_class="slow"))
    (node_set,) = one(objects, "Elasticsearch")["spec"]["nodeSets"]
    (container,) = node_set["podTemplate"]["spec"]["containers"]
    assert container == {
        "name": "elasticsearch",
        "resources": {"requests": {"memory": "4Gi", "cpu": "1"}, "limits": {"memory": "4Gi"}},
    }
    (claim,) = node_set["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == "elasticsearch-data"
    assert claim["spec"]["resources"]["requests"]["storage"] == "50Gi"
    assert "storageClassName" not in claim["spec"]
    storage = one(objects, "KafkaNodePool")["spec"]["storage"]
    assert storage["class"] == "fast-ssd"  # the spec's class over the operator's flag


def test_a_replica_that_cannot_load_its_model_says_which_and_why() -> None:
    source = {"kind": "volume", "claimName": "weights", "path": "bge"}
    spec = RagIndexSpec.model_validate({"embedder": {"model": "bge", "source": source}})
    with pytest.raises(ModelUnavailable) as err:
        pool_embedder(spec.model_dump(mode="json", by_alias=True))
    message = str(err.value)
    assert message.startswith("embedder model 'bge' (volume) cannot load:")
    assert "/models/embedder/bge is not a directory" in message
    reranker = {"enabled": True, "model": "/nowhere/ce"}
    spec = RagIndexSpec.model_validate({"reranker": reranker})
    with pytest.raises(ModelUnavailable, match=r"reranker model '/nowhere/ce' \(packaged\) cannot"):
        pool_reranker(spec.model_dump(mode="json", by_alias=True))


def test_a_volume_source_resolves_to_its_mounted_directory_only() -> None:
    source = RagIndexSpec.model_validate(
        {"embedder": {"source": {"kind": "volume", "claimName": "w", "path": "a/b"}}}
    ).embedder.source
    with pytest.raises(InvalidInput, match="/models/embedder/a/b is not a directory"):
        resolve_model_path("all-MiniLM-L6-v2", source)  # the packaged name is not a fallback
