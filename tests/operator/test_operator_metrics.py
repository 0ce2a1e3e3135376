"""The operator's own Prometheus metrics: reconciles by result and their duration, RagIndexes by
phase and condition, objects applied and pruned by kind. The pure parts in-process; then
`python -m ragindex.operator --metrics-port` as a real process against the real API server,
scraped over HTTP after it reconciled a good and an invalid RagIndex and pruned an Ingress."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from lightkube import Client, codecs
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Secret
from lightkube.types import PatchType
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ragindex.netutil import free_port
from ragindex.operator import OperatorMetrics
from ragindex.operator.__main__ import parse_args
from ragindex.operator.apply import RagIndex
from ragindex.operator.metrics import PHASES, summarize
from ragindex.operator.objects import ObjectRef
from ragindex.operator.ownership import SECRET_LABEL
from ragindex.telemetry_names import (
    OPERATOR_METRICS_PORT,
    OPERATOR_OBJECTS_APPLIED_TOTAL,
    OPERATOR_OBJECTS_PRUNED_TOTAL,
    OPERATOR_RAGINDEX_CONDITIONS,
    OPERATOR_RAGINDEXES,
    OPERATOR_RECONCILE_SECONDS,
    OPERATOR_RECONCILES_TOTAL,
)

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples(text: str) -> Samples:
    """Every sample of an exposition, keyed by its name and labels."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(found: Samples, name: str, **labels: str) -> float:
    return found.get((name, frozenset(labels.items())), 0.0)


def by_label(found: Samples, name: str, label: str) -> dict[str, float]:
    return {dict(k)[label]: v for (n, k), v in found.items() if n == name and label in dict(k)}


# --- pure ----------------------------------------------------------------------------------


def test_summarize_counts_phases_and_conditions_with_zeros_kept() -> None:
    ready = {
        "phase": "Ready",
        "conditions": [
            {"type": "Ready", "status": "True"},
            {"type": "Reconciled", "status": "True"},
            {"type": "Degraded", "status": "False"},
        ],
    }
    invalid = {"phase": "Degraded", "conditions": [{"type": "Reconciled", "status": "False"}]}
    phases, conditions = summarize([ready, invalid, {}])
    assert phases == {"Ready": 1, "Progressing": 0, "Degraded": 1, "Pending": 1}
    assert conditions[("Reconciled", "True")] == 1 and conditions[("Reconciled", "False")] == 1
    assert conditions[("Ready", "Unknown")] == 0  # present, so the series drops to zero


def test_instruments_record_results_kinds_and_forget_deleted_indexes() -> None:
    metrics = OperatorMetrics()
    fresh = samples(generate_latest(metrics.registry).decode())
    # Every result is exported from the start, so rate() sees the first one.
    for result in ("ok", "temporary_error", "permanent_error"):
        assert (OPERATOR_RECONCILES_TOTAL, frozenset({("result", result)})) in fresh
    metrics.reconciled("ok", 0.2)
    metrics.reconciled("temporary_error", 0.05)
    metrics.applied([{"kind": "Service"}, {"kind": "Ingress"}, {"kind": "Service"}])
    metrics.pruned([ObjectRef("networking.k8s.io/v1", "Ingress", "docs")])
    metrics.observe("team", "docs", {"phase": "Ready"})
    metrics.observe("team", "other", {"phase": "Progressing"})
    metrics.observe("team", "other", None)  # deleted
    found = samples(generate_latest(metrics.registry).decode())
    assert value(found, OPERATOR_RECONCILES_TOTAL, result="ok") == 1
    assert value(found, OPERATOR_RECONCILES_TOTAL, result="permanent_error") == 0
    assert value(found, f"{OPERATOR_RECONCILE_SECONDS}_count") == 2
    assert by_label(found, OPERATOR_OBJECTS_APPLIED_TOTAL, "kind") == {"Service": 2, "Ingress": 1}
    assert by_label(found, OPERATOR_OBJECTS_PRUNED_TOTAL, "kind") == {"Ingress": 1}
    phases = by_label(found, OPERATOR_RAGINDEXES, "phase")
    assert phases == {p: (1 if p == "Ready" else 0) for p in PHASES}


def test_metrics_port_flag() -> None:
    assert parse_args(["-A"])[1].metrics_port == OPERATOR_METRICS_PORT
    assert parse_args(["-A", "--metrics-port", "0"])[1].metrics_port == 0


# --- the operator process against the real API server -----------------------------------------

BASE: dict[str, Any] = {
    "authSecret": "tokens",
    "log": {"mode": "external", "bootstrapServers": "kafka.example:9092"},
    "lexical": {"backend": "embedded"},
}


@pytest.fixture
def operator_metrics(kube_cluster: Any, kube_namespace: str, tmp_path: Path) -> Iterator[str]:
    """`python -m ragindex.operator` watching the test's namespace, its metrics on a free
    loopback port; yields the metrics URL. Stopped with SIGTERM, as Kubernetes stops it."""
    port = free_port()
    log = (tmp_path / "operator.log").open("wb")
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "ragindex.operator", "-n", kube_namespace,
            "--kubeconfig", str(kube_cluster.kubeconfig), "--poll-interval", "1",
            "--metrics-port", str(port), "--metrics-host", "127.0.0.1",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        yield f"http://127.0.0.1:{port}/metrics"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        print((tmp_path / "operator.log").read_text()[-3000:])


def scrape_until(
    url: str, what: str, ok: Callable[[Samples], bool], timeout: float = 60
) -> Samples:
    deadline = time.monotonic() + timeout
    found: Samples = {}
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.TransportError):  # not listening yet
            found = samples(httpx.get(url, timeout=5).text)
        if found and ok(found):
            return found
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}; last scrape: {found}")


def create_index(client: Client, namespace: str, name: str, spec: dict[str, Any]) -> None:
    body = {
        "apiVersion": "ragindex.dev/v1alpha1",
        "kind": "RagIndex",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
    client.create(codecs.from_dict(body), namespace=namespace)


@pytest.mark.kubernetes
@pytest.mark.slow
def test_operator_serves_its_metrics_after_reconciles(
    kube_cluster, kube_namespace, operator_metrics
) -> None:
    ns, url = kube_namespace, operator_metrics
    client = Client()
    secret = Secret(
        metadata=ObjectMeta(name="tokens", namespace=ns, labels={SECRET_LABEL: "good"}),
        stringData={"tokens.json": "{}"},
    )
    client.create(secret, namespace=ns)
    create_index(client, ns, "good", {**BASE, "exposure": {"ingress": {}}})
    # Valid for the CRD, refused by the operator: the cluster runtime needs a token Secret.
    create_index(client, ns, "bad", {k: v for k, v in BASE.items() if k != "authSecret"})

    def reconciled_both(found: Samples) -> bool:
        conditions = {
            s: value(found, OPERATOR_RAGINDEX_CONDITIONS, condition="Reconciled", status=s)
            for s in ("True", "False")
        }
        return conditions == {"True": 1, "False": 1}

    found = scrape_until(url, "both RagIndexes reconciled", reconciled_both)
    assert value(found, OPERATOR_RECONCILES_TOTAL, result="ok") >= 1
    assert value(found, OPERATOR_RECONCILES_TOTAL, result="permanent_error") >= 1
    assert value(found, f"{OPERATOR_RECONCILE_SECONDS}_count") >= 2
    applied = by_label(found, OPERATOR_OBJECTS_APPLIED_TOTAL, "kind")
    assert applied.keys() >= {"ConfigMap", "Service", "NetworkPolicy", "RayService", "Ingress"}
    phases = by_label(found, OPERATOR_RAGINDEXES, "phase")
    assert sum(phases.values()) == 2 and phases["Degraded"] == 1, phases
    # The Ingress left out of the spec: pruned, and counted by kind.
    client.patch(
        RagIndex, "good", {"spec": {"exposure": {"ingress": None}}}, namespace=ns,
        patch_type=PatchType.MERGE,
    )  # fmt: skip
    scrape_until(
        url,
        "the Ingress pruned",
        lambda f: value(f, OPERATOR_OBJECTS_PRUNED_TOTAL, kind="Ingress") == 1,
    )
    # Deleted RagIndexes leave the gauges.
    client.delete(RagIndex, "bad", namespace=ns)
    scrape_until(
        url,
        "the deleted RagIndex forgotten",
        lambda f: sum(by_label(f, OPERATOR_RAGINDEXES, "phase").values()) == 1,
    )
    client.close()
