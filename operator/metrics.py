"""The operator's own Prometheus series, for whoever runs the operator: how its reconciles end
and how long they take, the RagIndexes it watches by phase and condition, and the objects it
applies and prunes by kind. Every label takes a bounded set of values (no index names: those
series live on the index pods). Served by `python -m ragindex.operator --metrics-port`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from ragindex.operator.objects import ObjectRef
from ragindex.operator.status import CONDITION_TYPES
from ragindex.telemetry_names import (
    OPERATOR_OBJECTS_APPLIED_TOTAL,
    OPERATOR_OBJECTS_PRUNED_TOTAL,
    OPERATOR_RAGINDEX_CONDITIONS,
    OPERATOR_RAGINDEXES,
    OPERATOR_RECONCILE_SECONDS,
    OPERATOR_RECONCILES_TOTAL,
)

# ok: applied; temporary_error: retried (a refusal waiting on a person, an API or network
# error); permanent_error: an invalid spec, not retried until the spec changes.
Result = Literal["ok", "temporary_error", "permanent_error"]
RESULTS: tuple[Result, ...] = ("ok", "temporary_error", "permanent_error")
# status.phase; Pending: no status written yet.
PHASES = ("Ready", "Progressing", "Degraded", "Pending")
CONDITION_STATUSES = ("True", "False", "Unknown")
# A reconcile is a few API calls; a slow one waits on the API server or a build report.
RECONCILE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


def summarize(
    statuses: Iterable[Mapping[str, Any]],
) -> tuple[dict[str, int], dict[tuple[str, str], int]]:
    """RagIndexes per phase and per (condition type, status), every pair present (0 if none),
    so that a series drops to zero rather than disappearing."""
    phases = dict.fromkeys(PHASES, 0)
    conditions = {(t, s): 0 for t in CONDITION_TYPES for s in CONDITION_STATUSES}
    for status in statuses:
        phase = status.get("phase") or "Pending"
        phases[phase if phase in phases else "Pending"] += 1
        for condition in status.get("conditions") or []:
            key = (condition.get("type"), condition.get("status"))
            if key in conditions:
                conditions[key] += 1
    return phases, conditions


class OperatorMetrics:
    """The operator's instruments, in a registry of their own (one per operator)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self._reconciles = Counter(
            OPERATOR_RECONCILES_TOTAL,
            "RagIndex reconciles by result (ok, temporary_error: retried, permanent_error:"
            " an invalid spec, not retried).",
            ["result"],
            registry=r,
        )
        self._reconcile_seconds = Histogram(
            OPERATOR_RECONCILE_SECONDS,
            "Time of one RagIndex reconcile (validate, render, checks, apply, prune, status).",
            registry=r,
            buckets=RECONCILE_BUCKETS,
        )
        self._ragindexes = Gauge(
            OPERATOR_RAGINDEXES,
            "RagIndexes the operator watches, by status.phase (Pending: no status yet).",
            ["phase"],
            registry=r,
        )
        self._conditions = Gauge(
            OPERATOR_RAGINDEX_CONDITIONS,
            "RagIndexes the operator watches, by condition type and status.",
            ["condition", "status"],
            registry=r,
        )
        self._applied = Counter(
            OPERATOR_OBJECTS_APPLIED_TOTAL,
            "Objects server-side applied, by kind.",
            ["kind"],
            registry=r,
        )
        self._pruned = Counter(
            OPERATOR_OBJECTS_PRUNED_TOTAL,
            "Objects deleted because the spec no longer renders them, by kind.",
            ["kind"],
            registry=r,
        )
        for result in RESULTS:
            self._reconciles.labels(result)
        self._statuses: dict[tuple[str, str], Mapping[str, Any]] = {}
        self._publish()

    def reconciled(self, result: Result, seconds: float) -> None:
        self._reconciles.labels(result).inc()
        self._reconcile_seconds.observe(seconds)

    def applied(self, objects: Iterable[Mapping[str, Any]]) -> None:
        for obj in objects:
            self._applied.labels(obj["kind"]).inc()

    def pruned(self, refs: Iterable[ObjectRef]) -> None:
        for ref in refs:
            self._pruned.labels(ref.kind).inc()

    def observe(self, namespace: str, name: str, status: Mapping[str, Any] | None) -> None:
        """The RagIndex's status as last seen (None: it is gone)."""
        if status is None:
            self._statuses.pop((namespace, name), None)
        else:
            self._statuses[(namespace, name)] = dict(status)
        self._publish()

    def _publish(self) -> None:
        phases, conditions = summarize(self._statuses.values())
        for phase, count in phases.items():
            self._ragindexes.labels(phase).set(count)
        for (condition, status), count in conditions.items():
            self._conditions.labels(condition, status).set(count)

    def serve(self, port: int, host: str = "0.0.0.0") -> None:
        """Serve /metrics on a daemon thread (ends with the process)."""
        start_http_server(port, addr=host, registry=self.registry)
