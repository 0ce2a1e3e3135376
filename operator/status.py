"""RagIndex status and conditions, following the Kubernetes API conventions; pure functions.

Three conditions: `Reconciled` (the last spec was valid and applied), `Ready` (a generation
answers searches) and `Degraded` (something needs a human: derived from the other two, so it
can never disagree with them). `lastTransitionTime` changes only when a condition's status
flips, so `kubectl wait` and alerting see real transitions, not every reconcile. The clock is
an argument: the functions stay pure and the tests decide what "now" is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

READY = "Ready"
RECONCILED = "Reconciled"
DEGRADED = "Degraded"
CONDITION_TYPES = (READY, RECONCILED, DEGRADED)

# Ready=False reasons that mean the serving side failed (not merely still starting).
FAILED_REASONS = frozenset({"ServeFailed", "Unhealthy"})


@dataclass(frozen=True)
class Verdict:
    """One finding: True/False/None (= Unknown), a CamelCase reason and a human message."""

    ok: bool | None
    reason: str
    message: str = ""

    @property
    def status(self) -> str:
        return "Unknown" if self.ok is None else str(self.ok)


def rfc3339(moment: datetime) -> str:
    """Kubernetes' time format: UTC, whole seconds, a trailing Z."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def find_condition(conditions: Sequence[Mapping[str, Any]], type_: str) -> Mapping[str, Any] | None:
    return next((c for c in conditions if c.get("type") == type_), None)


def set_condition(
    conditions: Sequence[Mapping[str, Any]],
    type_: str,
    verdict: Verdict,
    *,
    observed_generation: int,
    now: str,
) -> list[dict[str, Any]]:
    """Conditions with `type_` replaced; its transition time kept unless the status flips."""
    old = find_condition(conditions, type_)
    since = now
    if old is not None and old.get("status") == verdict.status:
        since = old.get("lastTransitionTime") or now
    new = {
        "type": type_,
        "status": verdict.status,
        "reason": verdict.reason,
        "message": verdict.message,
        "lastTransitionTime": since,
        "observedGeneration": observed_generation,
    }
    out = [dict(c) for c in conditions if c.get("type") != type_]
    out.append(new)
    return sorted(out, key=_order)


def _order(condition: Mapping[str, Any]) -> int:
    kind = condition.get("type")
    return CONDITION_TYPES.index(kind) if kind in CONDITION_TYPES else len(CONDITION_TYPES)


def _degraded(
    conditions: Sequence[Mapping[str, Any]], generations: Sequence[Mapping[str, Any]] = ()
) -> Verdict:
    reconciled = find_condition(conditions, RECONCILED)
    if reconciled is not None and reconciled.get("status") == "False":
        return Verdict(
            True, reconciled.get("reason", "ReconcileFailed"), reconciled.get("message", "")
        )
    ready = find_condition(conditions, READY)
    if ready is not None and ready.get("reason") in FAILED_REASONS:
        return Verdict(True, ready["reason"], ready.get("message", ""))
    for entry in generations:  # a new generation failed a promotion check; the old one serves
        if entry.get("phase") == "Failed":
            message = f"generation {entry.get('id')}: {entry.get('reason', '')}"
            return Verdict(True, "GenerationCheckFailed", message)
    return Verdict(False, "AsExpected", "")


def phase(conditions: Sequence[Mapping[str, Any]]) -> str:
    """One word for humans and printer columns: Degraded, Ready or Progressing."""
    degraded = find_condition(conditions, DEGRADED)
    if degraded is not None and degraded.get("status") == "True":
        return "Degraded"
    ready = find_condition(conditions, READY)
    if ready is not None and ready.get("status") == "True":
        return "Ready"
    return "Progressing"


def desired_status(
    previous: Mapping[str, Any] | None,
    *,
    observed_generation: int,
    now: str,
    reconcile: Verdict | None = None,
    serving: Verdict | None = None,
    endpoint: str | None = None,
    active_generation: str | None = None,
    generations: Sequence[Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """The whole status after one finding; parts not found this time are kept from `previous`.

    A reconcile reports `reconcile` (and maybe `serving`); a readiness check reports `serving`
    only. `observedGeneration` is set only by a reconcile: it says which spec was acted on.
    """
    prev = dict(previous or {})
    conditions: list[dict[str, Any]] = [dict(c) for c in prev.get("conditions") or []]
    if reconcile is not None:
        conditions = set_condition(
            conditions, RECONCILED, reconcile, observed_generation=observed_generation, now=now
        )
    if serving is not None:
        conditions = set_condition(
            conditions, READY, serving, observed_generation=observed_generation, now=now
        )
    elif find_condition(conditions, READY) is None:
        conditions = set_condition(
            conditions,
            READY,
            Verdict(None, "Pending", "not reconciled yet"),
            observed_generation=observed_generation,
            now=now,
        )
    kept = prev.get("generations") or [] if generations is None else generations
    entries = [dict(e) for e in kept]
    conditions = set_condition(
        conditions,
        DEGRADED,
        _degraded(conditions, entries),
        observed_generation=observed_generation,
        now=now,
    )
    status: dict[str, Any] = {
        "observedGeneration": (
            observed_generation if reconcile is not None else prev.get("observedGeneration")
        ),
        "conditions": conditions,
        "phase": phase(conditions),
    }
    if endpoint is not None or prev.get("endpoint"):
        status["endpoint"] = endpoint if endpoint is not None else prev["endpoint"]
    if active_generation is not None or prev.get("activeGeneration"):
        status["activeGeneration"] = (
            active_generation if active_generation is not None else prev["activeGeneration"]
        )
    if entries:
        status["generations"] = entries
    if status["observedGeneration"] is None:
        del status["observedGeneration"]
    return status


def status_patch(current: Mapping[str, Any] | None, desired: Mapping[str, Any]) -> dict[str, Any]:
    """Top-level status fields that differ: an empty patch means nothing to write."""
    cur = dict(current or {})
    return {k: v for k, v in desired.items() if cur.get(k) != v}


def ray_service_verdict(ray_service: Mapping[str, Any] | None, name: str) -> Verdict:
    """Whether KubeRay reports a RayService as serving (v1 `Ready` condition or `Running`)."""
    if ray_service is None:
        return Verdict(False, "Progressing", f"RayService {name} does not exist yet")
    status = ray_service.get("status") or {}
    ready = find_condition(status.get("conditions") or [], "Ready")
    if (ready is not None and ready.get("status") == "True") or status.get(
        "serviceStatus"
    ) == "Running":
        return Verdict(True, "Serving", f"RayService {name} is ready")
    detail = (ready or {}).get("message") or status.get("serviceStatus") or "no status yet"
    return Verdict(False, "Progressing", f"waiting for RayService {name}: {detail}")
