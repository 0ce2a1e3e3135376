"""What the operator may touch: pure decisions on live objects' metadata (no I/O).

The operator applies server-side with force, so applying over an object it does not own would
adopt it: rewrite its fields, add our owner reference, and let the garbage collector delete it
with the RagIndex. Before applying, `apply.py` reads each desired object's live twin and asks
`foreign_object`; before mounting a Secret named in the spec it asks `secret_refusal`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ragindex.operator.crd import GROUP

# A Secret the operator may mount into an index's pods carries this label with the RagIndex
# name as value: whoever may write Secrets consents, per index, to that use.
SECRET_LABEL = f"{GROUP}/secret-for"


def owned_by(meta: Mapping[str, Any], uid: str) -> bool:
    """True when `uid` is the object's controller owner."""
    return any(
        ref.get("uid") == uid and ref.get("controller") for ref in meta.get("ownerReferences") or []
    )


def foreign_object(kind: str, meta: Mapping[str, Any], uid: str) -> str | None:
    """Why an existing object must not be applied over, or None when it is ours."""
    if owned_by(meta, uid):
        return None
    owners = [f"{r.get('kind')}/{r.get('name')}" for r in meta.get("ownerReferences") or []]
    held = f"owned by {', '.join(owners)}" if owners else "not owned by this RagIndex"
    return (
        f"{kind} {meta.get('namespace')}/{meta.get('name')} already exists and is {held};"
        " rename the RagIndex or remove that object"
    )


def secret_refusal(index: str, name: str, meta: Mapping[str, Any] | None) -> str | None:
    """Why a Secret named in the spec must not be used, or None when it may be."""
    if meta is None:
        return f"Secret {name} does not exist"
    if (meta.get("labels") or {}).get(SECRET_LABEL) != index:
        return (
            f"Secret {name} lacks the label {SECRET_LABEL}={index}; label it to let this"
            " RagIndex mount it"
        )
    return None
