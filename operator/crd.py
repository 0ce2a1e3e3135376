"""The RagIndex CustomResourceDefinition, generated from `ragindex.config.RagIndexSpec`.

The pydantic model is the one schema: the CRD's openAPI v3 schema is derived from its JSON
schema (by alias, $refs inlined, converted to a Kubernetes structural schema), and the
cross-field `model_validator`s are mirrored as CEL rules, so the API server refuses what the
operator would refuse. `python -m ragindex.operator.crd > crds/ragindex.dev_ragindexes.yaml`
writes the committed file; a test keeps the two equal. Imports only the core (no kopf).
"""

from __future__ import annotations

import sys
from typing import Any, get_args

import yaml
from pydantic import BaseModel

from ragindex.config import RagIndexSpec

GROUP = "ragindex.dev"
VERSION = "v1alpha1"
KIND = "RagIndex"
PLURAL = "ragindexes"
SINGULAR = "ragindex"
SHORT_NAMES = ["ragx", "ri"]
CRD_NAME = f"{PLURAL}.{GROUP}"

# JSON-schema keywords that carry over to openAPI v3 unchanged.
_KEPT = ("type", "description", "enum", "minimum", "maximum", "minLength", "maxLength", "pattern")


def _external_elasticsearch_only(field: str) -> dict[str, str]:
    """The CEL rule of a LexicalSpec field that only an external Elasticsearch takes."""
    return {
        "rule": f"!has(self.{field}) || size(self.{field}) == 0"
        " || (has(self.elasticsearchUrl) && size(self.elasticsearchUrl) > 0)",
        "message": f"lexical.{field} is only valid with an external elasticsearchUrl"
        " (a managed Elasticsearch gets its user and CA from the operator)",
        "fieldPath": f".{field}",
        "reason": "FieldValueForbidden",
    }


# Cross-field rules of config.py's model_validators, keyed by the model that owns them.
# Fields always exist here because every object has a default, but `has()` guards keep the
# rules correct for objects stored before a default was added.
_CEL: dict[str, list[dict[str, str]]] = {
    "EmbedderSpec": [
        {
            "rule": "!has(self.backend) || !(self.backend in ['onnx', 'onnx-int8'])"
            " || !has(self.gpus) || self.gpus == 0.0",
            "message": "embedder.backend onnx and onnx-int8 run on CPU (onnxruntime):"
            " set embedder.gpus to 0",
            "fieldPath": ".gpus",
            "reason": "FieldValueForbidden",
        }
    ],
    "RerankerSpec": [
        {
            "rule": "!has(self.enabled) || !self.enabled"
            " || (has(self.model) && size(self.model) > 0)",
            "message": "reranker.model is required when reranker.enabled is true",
            "fieldPath": ".model",
            "reason": "FieldValueRequired",
        }
    ],
    "ModelSourceSpec": [
        {
            "rule": "!has(self.kind) || self.kind != 'volume'"
            " || ((has(self.claimName) && size(self.claimName) > 0)"
            " != (has(self.imageReference) && size(self.imageReference) > 0))",
            "message": "source.kind volume needs exactly one of claimName or imageReference",
            "fieldPath": ".claimName",
            "reason": "FieldValueRequired",
        },
        {
            "rule": "(has(self.kind) && self.kind == 'volume')"
            " || ((!has(self.claimName) || size(self.claimName) == 0)"
            " && (!has(self.imageReference) || size(self.imageReference) == 0)"
            " && (!has(self.path) || size(self.path) == 0))",
            "message": "source.claimName, imageReference and path are only valid with volume",
            "fieldPath": ".claimName",
            "reason": "FieldValueForbidden",
        },
        {
            "rule": "!has(self.tokenSecret) || size(self.tokenSecret) == 0"
            " || (has(self.kind) && self.kind == 'hub')",
            "message": "source.tokenSecret is only valid with kind hub",
            "fieldPath": ".tokenSecret",
            "reason": "FieldValueForbidden",
        },
    ],
    "DenseIndexSpec": [
        {
            "rule": "!has(self.trainMin) || !has(self.type)"
            " || !(self.type in ['ivf_pq', 'ivf_sq8'])"
            " || (self.trainMin >= (has(self.ivf) && has(self.ivf.nlist) ? self.ivf.nlist : 1024)"
            " && (self.type != 'ivf_pq' || self.trainMin >= [16, 32, 64, 128, 256, 512, 1024]"
            "[(has(self.pq) && has(self.pq.nbits) ? self.pq.nbits : 8) - 4]))",
            "message": "dense.index.trainMin must be >= ivf.nlist for the IVF types, and"
            " >= 2^pq.nbits for ivf_pq (FAISS cannot train on fewer vectors)",
            "fieldPath": ".trainMin",
            "reason": "FieldValueInvalid",
        }
    ],
    "LexicalSpec": [
        {
            "rule": "!has(self.elasticsearchUrl) || size(self.elasticsearchUrl) == 0"
            " || (has(self.backend) && self.backend == 'elasticsearch')",
            "message": "lexical.elasticsearchUrl is only valid with backend elasticsearch",
            "fieldPath": ".elasticsearchUrl",
            "reason": "FieldValueForbidden",
        },
        *(
            _external_elasticsearch_only(field)
            for field in (
                "elasticsearchCredentialsSecret",
                "elasticsearchApiKeySecret",
                "elasticsearchCaSecret",
            )
        ),
        {
            "rule": "!has(self.elasticsearchCredentialsSecret)"
            " || size(self.elasticsearchCredentialsSecret) == 0"
            " || !has(self.elasticsearchApiKeySecret) || size(self.elasticsearchApiKeySecret) == 0",
            "message": "lexical.elasticsearchCredentialsSecret and elasticsearchApiKeySecret are"
            " exclusive: give one",
            "fieldPath": ".elasticsearchApiKeySecret",
            "reason": "FieldValueForbidden",
        },
        {
            "rule": "!has(self.elasticsearchCaSecret) || size(self.elasticsearchCaSecret) == 0"
            " || (has(self.elasticsearchUrl) && self.elasticsearchUrl.startsWith('https://'))",
            "message": "lexical.elasticsearchCaSecret needs an https:// elasticsearchUrl",
            "fieldPath": ".elasticsearchCaSecret",
            "reason": "FieldValueInvalid",
        },
    ],
    "GeneratorSpec": [
        {
            "rule": "!has(self.backend) || self.backend != 'openai-compatible'"
            " || (has(self.baseUrl) && size(self.baseUrl) > 0"
            " && has(self.model) && size(self.model) > 0)",
            "message": "generator.baseUrl and generator.model are required for openai-compatible",
            "fieldPath": ".baseUrl",
            "reason": "FieldValueRequired",
        },
        {
            "rule": "!has(self.apiKeySecret) || size(self.apiKeySecret) == 0"
            " || !has(self.apiKeyEnv) || size(self.apiKeyEnv) == 0",
            "message": "generator.apiKeySecret and generator.apiKeyEnv are exclusive",
            "fieldPath": ".apiKeySecret",
            "reason": "FieldValueForbidden",
        },
    ],
    "LogSpec": [
        {
            "rule": "!has(self.minInsyncReplicas) || !has(self.replicationFactor)"
            " || self.minInsyncReplicas <= self.replicationFactor",
            "message": "log.minInsyncReplicas must be <= log.replicationFactor",
            "fieldPath": ".minInsyncReplicas",
            "reason": "FieldValueInvalid",
        },
        {
            "rule": "!has(self.mode) || self.mode != 'managed' || !has(self.replicationFactor)"
            " || !has(self.brokers) || self.replicationFactor <= self.brokers",
            "message": "log.replicationFactor must be <= log.brokers for a managed log",
            "fieldPath": ".replicationFactor",
            "reason": "FieldValueInvalid",
        },
        {
            "rule": "(has(self.mode) && self.mode == 'external')"
            " == (has(self.bootstrapServers) && size(self.bootstrapServers) > 0)",
            "message": "log.bootstrapServers is required for, and only valid with, external",
            "fieldPath": ".bootstrapServers",
            "reason": "FieldValueInvalid",
        },
        {
            "rule": "!has(self.credentialsSecret) || size(self.credentialsSecret) == 0"
            " || (has(self.mode) && self.mode == 'external')",
            "message": "log.credentialsSecret is only valid with mode external",
            "fieldPath": ".credentialsSecret",
            "reason": "FieldValueForbidden",
        },
        {
            "rule": "!has(self.caSecret) || size(self.caSecret) == 0"
            " || (has(self.mode) && self.mode == 'external')",
            "message": "log.caSecret is only valid with mode external (a managed log's CA is"
            " Strimzi's)",
            "fieldPath": ".caSecret",
            "reason": "FieldValueForbidden",
        },
        # A transition rule (only the API server sees the old object): Kafka adds partitions
        # but never removes them, and a shrunk `docs` topic would strand its keys.
        {
            "rule": "!has(oldSelf.docsPartitions) || !has(self.docsPartitions)"
            " || self.docsPartitions >= oldSelf.docsPartitions",
            "message": "log.docsPartitions cannot decrease (Kafka never removes partitions)",
            "fieldPath": ".docsPartitions",
            "reason": "FieldValueForbidden",
        },
    ],
    "FusionSpec": [
        {
            "rule": "!has(self.candidates) || !has(self.topK) || self.candidates >= self.topK",
            "message": "fusion.candidates must be >= fusion.topK",
            "fieldPath": ".candidates",
            "reason": "FieldValueInvalid",
        },
        {
            "rule": "!has(self.denseWeight) || !has(self.lexicalWeight)"
            " || self.denseWeight > 0.0 || self.lexicalWeight > 0.0",
            "message": "fusion.denseWeight and fusion.lexicalWeight cannot both be 0",
            "fieldPath": ".denseWeight",
            "reason": "FieldValueInvalid",
        },
    ],
    "RocchioSpec": [
        {
            "rule": "!has(self.alpha) || !has(self.beta) || self.alpha > 0.0 || self.beta > 0.0",
            "message": "feedback.rocchio alpha and beta cannot both be 0",
            "fieldPath": ".alpha",
            "reason": "FieldValueInvalid",
        }
    ],
    "AutoscalingSpec": [
        {
            "rule": "!has(self.minReplicas) || !has(self.maxReplicas)"
            " || self.minReplicas <= self.maxReplicas",
            "message": "autoscaling minReplicas must be <= maxReplicas",
            "fieldPath": ".minReplicas",
            "reason": "FieldValueInvalid",
        }
    ],
    "ExposureSpec": [
        {
            "rule": "!has(self.ingress) || !has(self.httpRoute)",
            "message": "exposure.ingress and exposure.httpRoute are exclusive: expose the index"
            " through one of them",
            "fieldPath": ".httpRoute",
            "reason": "FieldValueForbidden",
        }
    ],
    "IngressExposure": [
        {
            "rule": "!has(self.tlsSecret) || size(self.tlsSecret) == 0"
            " || (has(self.host) && size(self.host) > 0)",
            "message": "exposure.ingress.host is required with tlsSecret: the certificate is"
            " served for that host",
            "fieldPath": ".host",
            "reason": "FieldValueRequired",
        }
    ],
    "HttpRouteExposure": [
        {
            "rule": "size(self.parentRefs) > 0",
            "message": "exposure.httpRoute.parentRefs needs at least one Gateway",
            "fieldPath": ".parentRefs",
            "reason": "FieldValueRequired",
        }
    ],
    "RagIndexSpec": [
        {
            "rule": "!has(self.reranker) || !has(self.fusion) || !has(self.reranker.enabled)"
            " || !self.reranker.enabled || !has(self.reranker.topN) || !has(self.fusion.topK)"
            " || self.reranker.topN >= self.fusion.topK",
            "message": "reranker.topN must be >= fusion.topK",
            "fieldPath": ".reranker.topN",
            "reason": "FieldValueInvalid",
        }
    ],
}


def _nested_model(model: type[BaseModel], alias: str) -> tuple[type[BaseModel], Any]:
    """The sub-model behind an aliased field and its default, dumped as the CRD sees it."""
    for name, field in model.model_fields.items():
        if (field.alias or name) == alias:
            subs = _model_args(field.annotation)
            if len(subs) != 1:
                raise TypeError(f"{model.__name__}.{name} is not a nested model")
            sub = subs[0]
            default = field.get_default(call_default_factory=True)
            if default is None:  # `Model | None`: absent unless given (presence turns it on)
                return sub, None
            # Only what differs from the sub-model's own defaults: the API server fills the
            # rest from the nested schema, so the CRD stays short and has one source per value.
            return sub, default.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    raise KeyError(f"{model.__name__} has no field with alias {alias!r}")


def _models_by_name(model: type[BaseModel]) -> dict[str, type[BaseModel]]:
    """Every model reachable from `model`'s fields (through lists, dicts and unions), by the
    name its JSON schema's $defs use."""
    found = {model.__name__: model}
    for field in model.model_fields.values():
        for sub in _model_args(field.annotation):
            if sub.__name__ not in found:
                found |= _models_by_name(sub)
    return found


def _optional_ref(prop: dict[str, Any]) -> str | None:
    """The $ref of a `Model | None` property (anyOf a $ref and null), else None."""
    variants = prop.get("anyOf", [])
    refs = [v["$ref"] for v in variants if "$ref" in v]
    if len(refs) == 1 and len(variants) == 2 and {"type": "null"} in variants:
        return refs[0]
    return None


def _model_args(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in _model_args(arg)]


def _property(node: dict[str, Any], defs: dict[str, Any], models: dict[str, Any]) -> dict[str, Any]:
    """One JSON-schema property (scalar, list or map) as structural openAPI v3."""
    extensions = {k: v for k, v in node.items() if k.startswith("x-kubernetes-")}
    variants = [v for v in node.get("anyOf", []) if v.get("type") != "null"]
    if {v.get("type") for v in variants} == {"string", "integer"}:
        # A Kubernetes quantity (`2`, `500m`, `8Gi`): the API server's own int-or-string.
        out = {k: node[k] for k in ("description",) if k in node}
        return {**out, "x-kubernetes-int-or-string": True}
    if variants:
        # `str | None`: Kubernetes prunes nulls of non-nullable fields, and absent means None
        # to pydantic, so the plain type is the exact equivalent.
        if len(variants) != 1:
            raise ValueError(f"union types have no structural form: {node}")
        node = {**variants[0], **{k: v for k, v in node.items() if k != "anyOf"}}
    out = {k: node[k] for k in _KEPT if k in node}
    if "exclusiveMinimum" in node:
        out["minimum"] = node["exclusiveMinimum"]
        out["exclusiveMinimum"] = True
    if "exclusiveMaximum" in node:
        out["maximum"] = node["exclusiveMaximum"]
        out["exclusiveMaximum"] = True
    # Empty lists and maps: the API server stores no empty default, and absent means empty.
    if node.get("default") not in (None, [], {}):
        out["default"] = node["default"]
    if "type" not in out:
        raise ValueError(f"property without a type has no structural form: {node}")
    if out["type"] == "array":
        items = node["items"]
        ref = items.get("$ref")
        if ref is None:
            out["items"] = _property(items, defs, models)
        else:
            def_name = ref.rsplit("/", 1)[-1]
            out["items"] = _object(models[def_name], defs[def_name], defs)
    elif out["type"] == "object" and not extensions:
        values = node.get("additionalProperties")
        if not isinstance(values, dict):
            raise ValueError(f"a map needs typed values for a structural schema: {node}")
        out["additionalProperties"] = _property(values, defs, models)
    return {**out, **extensions}


def _object(
    model: type[BaseModel],
    node: dict[str, Any],
    defs: dict[str, Any],
    description: str | None = None,
    default: Any = None,
) -> dict[str, Any]:
    """A pydantic model's JSON schema as a structural object schema with its CEL rules."""
    out: dict[str, Any] = {"type": "object"}
    if description or "description" in node:
        out["description"] = description or node["description"]
    if default is not None:
        out["default"] = default
    models = _models_by_name(model)
    properties: dict[str, Any] = {}
    for alias, prop in node["properties"].items():
        ref = prop.get("$ref") or _optional_ref(prop)
        if ref is None:
            properties[alias] = _property(prop, defs, models)
            continue
        sub_model, default = _nested_model(model, alias)
        sub_node = defs[ref.rsplit("/", 1)[-1]]
        properties[alias] = _object(sub_model, sub_node, defs, prop.get("description"), default)
    out["properties"] = properties
    if node.get("required"):
        out["required"] = list(node["required"])
    if model.__name__ in _CEL:
        out["x-kubernetes-validations"] = [dict(r) for r in _CEL[model.__name__]]
    return out


def spec_schema() -> dict[str, Any]:
    """The structural openAPI v3 schema of `.spec`, from RagIndexSpec."""
    js = RagIndexSpec.model_json_schema(by_alias=True, mode="validation")
    # `default: {}` lets a RagIndex without a spec be fully defaulted by the API server.
    return _object(RagIndexSpec, js, js.get("$defs", {}), default={})


def _status_schema() -> dict[str, Any]:
    condition = {
        "type": "object",
        "required": ["type", "status"],
        "properties": {
            "type": {"type": "string", "description": "Ready, Reconciled or Degraded."},
            "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
            "reason": {"type": "string", "description": "CamelCase reason of the last change."},
            "message": {"type": "string", "description": "Human-readable detail."},
            "lastTransitionTime": {
                "type": "string",
                "format": "date-time",
                "description": "When the status last flipped.",
            },
            "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0},
        },
    }
    return {
        "type": "object",
        "description": "Observed state, written by the operator only.",
        "properties": {
            "observedGeneration": {
                "type": "integer",
                "format": "int64",
                "description": "metadata.generation the operator last reconciled.",
            },
            "conditions": {
                "type": "array",
                "description": "Kubernetes-style conditions, one per type.",
                "items": condition,
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["type"],
            },
            "endpoint": {"type": "string", "description": "Base URL of the search API."},
            "activeGeneration": {
                "type": "string",
                "description": "Index generation (embedder identity) now serving queries.",
            },
            "phase": {
                "type": "string",
                "description": "Coarse summary of the conditions, for humans.",
            },
            "generations": {
                "type": "array",
                "description": "Index generations the operator keeps: the one serving, one"
                " being built (promoted only when its backfill is complete and its checks"
                " passed) and ones retained for rollback within rollbackWindowHours.",
                "items": _generation_schema(),
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["id"],
            },
        },
    }


def _generation_schema() -> dict[str, Any]:
    check = {
        "type": "object",
        "required": ["name", "passed"],
        "properties": {
            "name": {"type": "string", "description": "caught-up, chunk-counts or self-check."},
            "passed": {"type": "boolean"},
            "message": {"type": "string", "description": "Why it failed (empty if passed)."},
        },
    }
    return {
        "type": "object",
        "required": ["id", "phase"],
        "properties": {
            "id": {"type": "string", "description": "The generation (a hash of its fields)."},
            "phase": {
                "type": "string",
                "enum": ["Backfilling", "Verifying", "Serving", "Retained", "Failed"],
                "description": "Backfilling (replaying docs), Verifying (caught up, checks"
                " pending), Serving, Retained (kept for rollback) or Failed (a check failed;"
                " the previous generation serves).",
            },
            "progress": {
                "type": "string",
                "description": "Backfill progress, e.g. 42%: docs records consumed of all.",
            },
            "createdAt": {"type": "string", "format": "date-time"},
            "since": {
                "type": "string",
                "format": "date-time",
                "description": "When the generation entered its phase (retention counts from"
                " here).",
            },
            "reason": {"type": "string", "description": "Why it is in this phase."},
            "checks": {
                "type": "array",
                "description": "The promotion checks, once the backfill caught up.",
                "items": check,
            },
        },
    }


_PRINTER_COLUMNS: list[dict[str, Any]] = [
    {
        "name": "Ready",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
    },
    {"name": "Shards", "type": "integer", "jsonPath": ".spec.dense.shards"},
    {"name": "Embedder", "type": "string", "jsonPath": ".spec.embedder.model"},
    {"name": "Generation", "type": "string", "jsonPath": ".status.activeGeneration"},
    {
        "name": "Backfill",
        "type": "string",
        "jsonPath": '.status.generations[?(@.phase=="Backfilling")].progress',
    },
    {"name": "Endpoint", "type": "string", "jsonPath": ".status.endpoint", "priority": 1},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def render_crd() -> dict[str, Any]:
    """The RagIndex CRD as a dict, ready to apply or dump to YAML."""
    spec = spec_schema()
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": list(SHORT_NAMES),
                "categories": ["ragindex"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [dict(c) for c in _PRINTER_COLUMNS],
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": "A hybrid (dense + BM25) retrieval index served by"
                            " Ray Serve, reconciled by the ragindex operator.",
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec,
                                "status": _status_schema(),
                            },
                        }
                    },
                }
            ],
        },
    }


def render_crd_yaml() -> str:
    """The CRD as the YAML text committed in crds/ (stable key order, so diffs are real)."""
    header = "# Generated by `python -m ragindex.operator.crd`; do not edit.\n"
    return header + yaml.safe_dump(render_crd(), sort_keys=False, width=100)


if __name__ == "__main__":
    sys.stdout.write(render_crd_yaml())
