"""Scheduling and sizing of the pods one RagIndex runs, in the shapes of the Kubernetes types.

Part of the RagIndex spec (`config.RagIndexSpec.pods`, `lexical`, `log`): each Ray pool (head,
CPU workers, GPU embedder pool, GPU reranker pool) carries resources, nodeSelector,
tolerations, affinity, topologySpreadConstraints and priorityClassName, which the operator
copies into that pool's pod template. Field names and shapes follow core/v1, so a platform
team's existing snippets paste in unchanged; `affinity` and a spread constraint's
`labelSelector` are kept as given (their full schemas are large and the API server checks
them on the pods anyway).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel
from pydantic.config import JsonDict

# Resource quantities: `2`, `500m`, `8Gi`, `1.5` (Kubernetes takes a number or a string).
Quantity = str | int
_PRESERVE: JsonDict = {"x-kubernetes-preserve-unknown-fields": True}


class _Kube(BaseModel):
    model_config = ConfigDict(
        extra="forbid", populate_by_name=True, alias_generator=to_camel, frozen=True
    )

    def __hash__(self) -> int:
        # Frozen like the rest of the spec, which is hashed (a dict and cache key), but these
        # hold core/v1 maps and lists: hash what they say instead.
        return hash(self.model_dump_json())


class ResourceRequirements(_Kube):
    """A container's requests and limits, as core/v1 ResourceRequirements."""

    requests: dict[str, Quantity] = Field(
        default_factory=dict,
        description="Minimum resources, e.g. {cpu: '2', memory: 8Gi}. Unset keys keep the"
        " operator's defaults for the pool.",
    )
    limits: dict[str, Quantity] = Field(
        default_factory=dict,
        description="Maximum resources, e.g. {cpu: '4', memory: 16Gi, nvidia.com/gpu: 1}."
        " Ray sees the CPU limit (or request) as the pod's CPUs, and nvidia.com/gpu as its"
        " GPUs. Unset keys keep the operator's defaults for the pool.",
    )


class Toleration(_Kube):
    """A core/v1 Toleration: lets the pool's pods run on nodes with a matching taint."""

    key: str = Field("", description="Taint key to tolerate; empty with Exists: every taint.")
    operator: Literal["Exists", "Equal"] = Field(
        "Equal", description="'Equal' (key and value match) or 'Exists' (the key alone)."
    )
    value: str = Field("", description="Taint value, with operator Equal.")
    effect: Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"] = Field(
        "", description="Taint effect to tolerate; empty: every effect."
    )
    toleration_seconds: int | None = Field(
        None, ge=0, description="With NoExecute: how long the pod stays after the taint appears."
    )


class TopologySpreadConstraint(_Kube):
    """A core/v1 TopologySpreadConstraint: how evenly the pool spreads over a topology."""

    max_skew: int = Field(1, ge=1, description="Most pods one domain may have above another.")
    topology_key: str = Field(
        ...,
        min_length=1,
        description="Node label naming the domain, e.g. topology.kubernetes.io/zone.",
    )
    when_unsatisfiable: Literal["DoNotSchedule", "ScheduleAnyway"] = Field(
        "ScheduleAnyway", description="Refuse to schedule, or prefer, when the skew is exceeded."
    )
    label_selector: dict[str, Any] | None = Field(
        None,
        json_schema_extra=_PRESERVE,
        description="A metav1 LabelSelector of the pods counted; unset: this pool's own pods.",
    )
    min_domains: int | None = Field(
        None, ge=1, description="Fewest eligible domains (DoNotSchedule only)."
    )
    match_label_keys: list[str] = Field(
        default_factory=list, description="Pod label keys whose values narrow the pods counted."
    )


class PodTemplate(_Kube):
    """Sizing and placement of one pool's pods (what KubeRay copies into each group's pods)."""

    resources: ResourceRequirements = Field(
        default_factory=ResourceRequirements,
        description="Requests and limits of the pool's Ray container (nvidia.com/gpu included);"
        " keys left unset keep the operator's defaults (its --head-cpus, --cpu-worker-memory,"
        " ... flags).",
    )
    node_selector: dict[str, str] = Field(
        default_factory=dict, description="Node labels the pool's pods must run on."
    )
    tolerations: list[Toleration] = Field(
        default_factory=list, description="Taints the pool's pods tolerate (e.g. GPU nodes')."
    )
    affinity: dict[str, Any] = Field(
        default_factory=dict,
        json_schema_extra=_PRESERVE,
        description="A core/v1 Affinity (nodeAffinity, podAffinity, podAntiAffinity), copied"
        " into the pods as given.",
    )
    topology_spread_constraints: list[TopologySpreadConstraint] = Field(
        default_factory=list, description="How the pool's pods spread over zones or nodes."
    )
    priority_class_name: str | None = Field(
        None, description="PriorityClass of the pool's pods (it must exist in the cluster)."
    )


class PodsSpec(_Kube):
    """The Ray pools' pod templates. The head runs no Serve replica; the CPU workers run the
    router, shards, BM25 and ingest (and the model pools when they run on CPU); the GPU
    embedder and reranker pools exist only when embedder.gpus / reranker.gpus are above 0."""

    head: PodTemplate = Field(default_factory=PodTemplate, description="The Ray head pod.")
    cpu_workers: PodTemplate = Field(
        default_factory=PodTemplate, description="The CPU worker group (Ray group `cpu`)."
    )
    embedders: PodTemplate = Field(
        default_factory=PodTemplate,
        description="The GPU embedder pool (Ray group `gpu-embedder`), when embedder.gpus > 0.",
    )
    rerankers: PodTemplate = Field(
        default_factory=PodTemplate,
        description="The GPU reranker pool (Ray group `gpu-reranker`), when reranker.gpus > 0.",
    )


class StorageSpec(_Kube):
    """A persistent (ReadWriteOnce) volume claim's size and class."""

    size: str | None = Field(
        None,
        pattern=r"^[0-9]+(Ki|Mi|Gi|Ti|Pi|Ei)$",
        description="Requested size, e.g. 50Gi; unset: the managing operator's default.",
    )
    storage_class_name: str | None = Field(
        None, description="StorageClass of the claim; unset: the cluster's default class."
    )


class ManagedElasticsearchSpec(_Kube):
    """The managed (ECK) Elasticsearch nodeSet's pods and data volume."""

    resources: ResourceRequirements = Field(
        default_factory=ResourceRequirements,
        description="Requests and limits of the `elasticsearch` container (ECK's podTemplate);"
        " unset: ECK's defaults (2Gi memory).",
    )
    storage: StorageSpec = Field(
        default_factory=StorageSpec,
        description="The nodeSet's volumeClaimTemplate `elasticsearch-data`; unset: ECK's"
        " default 1Gi claim.",
    )
