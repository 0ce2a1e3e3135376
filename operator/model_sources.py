"""Whether the models a RagIndex names can load in its pods, decided before anything is
applied: a pure function of the spec and of which claims and Secrets exist.

What the operator can know from the API server it checks here (a packaged name it knows, a
claim that exists, a token Secret that exists); what only a replica can find out (the files on
the volume, the hub answering) fails that replica's readiness with a message in the same
words (`<role> model '<name>' (<source kind>) cannot load: <why>`, app/serve/pools.py).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal

from ragindex.config import PACKAGED_EMBEDDERS, ModelSourceSpec, RagIndexSpec

Role = Literal["embedder", "reranker"]


@dataclass(frozen=True)
class ModelRef:
    """One model the pods load: its role, name and source."""

    role: Role
    model: str
    source: ModelSourceSpec


def model_refs(spec: RagIndexSpec) -> list[ModelRef]:
    """The models the index loads: the embedder, and the reranker when enabled."""
    refs = [ModelRef("embedder", spec.embedder.model, spec.embedder.source)]
    if spec.reranker.enabled:
        refs.append(ModelRef("reranker", spec.reranker.model, spec.reranker.source))
    return refs


def claim_names(spec: RagIndexSpec) -> list[str]:
    """The PersistentVolumeClaims that volume sources name."""
    return [r.source.claim_name for r in model_refs(spec) if r.source.claim_name]


def token_secrets(spec: RagIndexSpec) -> list[str]:
    """The Secrets that hub sources name for their token."""
    return [r.source.token_secret for r in model_refs(spec) if r.source.token_secret]


def unavailable_message(ref: ModelRef, why: str) -> str:
    return f"{ref.role} model {ref.model!r} ({ref.source.kind}) cannot load: {why}"


def _why_not(ref: ModelRef, claims: Collection[str], secrets: Collection[str]) -> str | None:
    source = ref.source
    if source.kind == "packaged":
        if ref.model.startswith("/"):
            return None  # a directory inside the image: only a replica can look
        if ref.role == "embedder" and ref.model in PACKAGED_EMBEDDERS:
            return None
        packaged = ", ".join(sorted(PACKAGED_EMBEDDERS)) if ref.role == "embedder" else "none"
        return (
            f"it is not packaged in the image (packaged {ref.role}s: {packaged}); give an"
            " absolute path inside the image, or set source.kind volume (a PVC or image"
            " volume holding the model directory) or hub"
        )
    if source.claim_name and source.claim_name not in claims:
        return f"PersistentVolumeClaim {source.claim_name!r} does not exist in the namespace"
    if source.token_secret and source.token_secret not in secrets:
        return f"token Secret {source.token_secret!r} does not exist in the namespace"
    return None


def unavailable_models(
    spec: RagIndexSpec, claims: Collection[str], secrets: Collection[str]
) -> list[str]:
    """One message per model that cannot load, given the claims and Secrets that exist."""
    return [
        unavailable_message(ref, why)
        for ref in model_refs(spec)
        if (why := _why_not(ref, claims, secrets)) is not None
    ]
