"""The chart's monitoring (the operator's metrics Service and ServiceMonitor, PodMonitor,
PrometheusRule, Grafana dashboard ConfigMap): off by default, rendered from the chart's files
when on, and installed on the real test API server both ways: on, with the vendored
monitoring.coreos.com CRDs; off, on an API server without them."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ragindex.operator.objects import labels as index_pod_labels
from ragindex.telemetry_names import (
    METRICS_PORT_NAME,
    OPERATOR_METRICS_PORT,
    OPERATOR_METRICS_PORT_NAME,
)

pytestmark = pytest.mark.kubernetes

CHART = Path(__file__).resolve().parents[2] / "helm" / "ragindex-operator"
THIRD_PARTY_CRDS = (CHART.parents[1] / ".." / "shared" / "third_party" / "crds").resolve()
MONITORING_CRDS = sorted(THIRD_PARTY_CRDS.glob("monitoring.coreos.com_*.yaml"))
MONITORING_KINDS = {"PodMonitor", "PrometheusRule", "ServiceMonitor"}
ALL_ON = [
    *("--set", "monitoring.serviceMonitor.enabled=true"),
    *("--set", "monitoring.podMonitor.enabled=true"),
    *("--set", "monitoring.prometheusRule.enabled=true"),
    *("--set", "monitoring.dashboards.enabled=true"),
]
# The session's API server has our CRD already (not Helm's): the releases here leave it alone.
NO_CRD = ["--set", "crds.install=false"]


def _render(kube_cluster: Any, *args: str) -> dict[tuple[str, str], dict[str, Any]]:
    out = kube_cluster.helm("template", "mon", str(CHART), "--namespace", "ops", *args).stdout
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(out) if d}


def _get(kube_cluster: Any, kind: str, name: str, namespace: str) -> dict[str, Any]:
    out = kube_cluster.kubectl("get", kind, name, "-n", namespace, "-o", "json").stdout
    return json.loads(out)


def test_monitoring_is_off_by_default(kube_cluster) -> None:
    objs = _render(kube_cluster)
    kinds = {kind for kind, _ in objs}
    assert not kinds & MONITORING_KINDS
    assert "ConfigMap" not in kinds and "Service" not in kinds
    # The operator still serves its metrics on the pod's port, for any scraper.
    (container,) = objs[("Deployment", "mon-ragindex-operator")]["spec"]["template"]["spec"][
        "containers"
    ]
    assert f"--metrics-port={OPERATOR_METRICS_PORT}" in container["args"]
    assert {"name": OPERATOR_METRICS_PORT_NAME, "containerPort": OPERATOR_METRICS_PORT,
            "protocol": "TCP"} in container["ports"]  # fmt: skip


def test_service_monitor_scrapes_the_operator_metrics_service(kube_cluster) -> None:
    objs = _render(kube_cluster, "--set", "monitoring.serviceMonitor.enabled=true")
    service = objs[("Service", "mon-ragindex-operator-metrics")]
    pod = objs[("Deployment", "mon-ragindex-operator")]["spec"]["template"]["metadata"]
    assert service["spec"]["selector"].items() <= pod["labels"].items()
    assert service["spec"]["ports"] == [
        {"name": OPERATOR_METRICS_PORT_NAME, "port": OPERATOR_METRICS_PORT,
         "targetPort": OPERATOR_METRICS_PORT_NAME, "protocol": "TCP"}
    ]  # fmt: skip
    monitor = objs[("ServiceMonitor", "mon-ragindex-operator-metrics")]["spec"]
    assert monitor["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["namespaceSelector"] == {"matchNames": ["ops"]}
    (endpoint,) = monitor["endpoints"]
    assert (endpoint["port"], endpoint["path"]) == (OPERATOR_METRICS_PORT_NAME, "/metrics")
    # Only the metrics Service is selected, and the switch needs a port to scrape.
    assert sum(kind == "Service" for kind, _ in objs) == 1
    proc = kube_cluster.helm(
        "template", "mon", str(CHART), "--set", "monitoring.serviceMonitor.enabled=true",
        "--set", "operator.metricsPort=0", check=False,
    )  # fmt: skip
    assert proc.returncode != 0 and "operator.metricsPort" in proc.stderr, proc.stderr


def test_on_renders_the_chart_files_and_selects_the_index_pods(kube_cluster) -> None:
    objs = _render(kube_cluster, *ALL_ON, "--set", "operator.watchNamespaces={team-a,team-b}")
    rule = objs[("PrometheusRule", "mon-ragindex-operator")]
    alerts = yaml.safe_load((CHART / "files" / "alerts.yaml").read_text())
    assert rule["spec"] == alerts  # the rules file, unchanged: what promtool tests is shipped
    dashboard = objs[("ConfigMap", "mon-ragindex-operator-dashboard")]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = json.loads((CHART / "files" / "dashboard.json").read_text())
    assert json.loads(dashboard["data"]["ragindex.json"]) == shipped
    monitor = objs[("PodMonitor", "mon-ragindex-operator-index")]["spec"]
    # It selects the pods the operator renders for a RagIndex, on their metrics port, in the
    # namespaces the operator watches, and labels their series as the alert rules expect.
    pod = index_pod_labels("docs", "g1")
    assert monitor["selector"]["matchLabels"].items() <= pod.items()
    assert monitor["namespaceSelector"] == {"matchNames": ["team-a", "team-b"]}
    (endpoint,) = monitor["podMetricsEndpoints"]
    assert endpoint["port"] == METRICS_PORT_NAME
    targets = {r["targetLabel"]: r for r in endpoint["relabelings"]}
    assert targets["job"]["replacement"] == "ragindex-index-metrics"
    exprs = [rule["expr"] for group in alerts["groups"] for rule in group["rules"]]
    assert any('job="ragindex-index-metrics"' in expr for expr in exprs)
    assert targets["index"]["sourceLabels"] == ["__meta_kubernetes_pod_label_ragindex_dev_index"]
    everywhere = _render(kube_cluster, "--set", "monitoring.podMonitor.enabled=true")
    spec = everywhere[("PodMonitor", "mon-ragindex-operator-index")]["spec"]
    assert spec["namespaceSelector"] == {"any": True}


def test_values_schema_refuses_a_misspelt_switch(kube_cluster) -> None:
    proc = kube_cluster.helm(
        "template", "mon", str(CHART), "--set", "monitoring.podMonitors.enabled=true", check=False
    )
    assert proc.returncode != 0 and "podMonitors" in proc.stderr, proc.stderr


@pytest.fixture
def release_namespace(kube_cluster) -> Iterator[str]:
    name = f"mon-{uuid.uuid4().hex[:6]}"
    yield name
    kube_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def test_install_with_monitoring_on_the_vendored_crds(kube_cluster, release_namespace) -> None:
    assert MONITORING_CRDS, f"no monitoring.coreos.com CRDs in {THIRD_PARTY_CRDS}"
    ns = release_namespace
    kube_cluster.helm(
        "install", "mon", str(CHART), "--namespace", ns, "--create-namespace", *NO_CRD, *ALL_ON
    )
    try:
        rule = _get(kube_cluster, "prometheusrule", "mon-ragindex-operator", ns)
        alerts = yaml.safe_load((CHART / "files" / "alerts.yaml").read_text())
        assert rule["spec"] == alerts  # accepted by the CRD's schema and stored unchanged
        monitor = _get(kube_cluster, "podmonitor", "mon-ragindex-operator-index", ns)
        assert monitor["spec"]["podMetricsEndpoints"][0]["port"] == METRICS_PORT_NAME
        dashboard = _get(kube_cluster, "configmap", "mon-ragindex-operator-dashboard", ns)
        assert json.loads(dashboard["data"]["ragindex.json"])["uid"] == "ragindex-overview"
        service_monitor = _get(kube_cluster, "servicemonitor", "mon-ragindex-operator-metrics", ns)
        assert service_monitor["spec"]["endpoints"][0]["port"] == OPERATOR_METRICS_PORT_NAME
        _get(kube_cluster, "service", "mon-ragindex-operator-metrics", ns)
    finally:
        kube_cluster.helm("uninstall", "mon", "--namespace", ns)
    gone = kube_cluster.kubectl(
        "get", "prometheusrule", "mon-ragindex-operator", "-n", ns, check=False
    )
    assert gone.returncode != 0 and "NotFound" in gone.stderr


@pytest.fixture
def without_monitoring_crds(kube_cluster) -> Iterator[None]:
    """The session's API server with the monitoring.coreos.com CRDs removed for one test, as a
    cluster without the Prometheus operator; they are installed again afterwards."""
    files = [a for f in MONITORING_CRDS for a in ("-f", str(f))]
    kube_cluster.kubectl("delete", "--wait=true", "--ignore-not-found", *files, timeout=120)
    try:
        yield
    finally:
        kube_cluster.kubectl(
            "apply", "--server-side", "--field-manager=ragindex-tests", *files, timeout=120
        )
        kube_cluster.kubectl(
            "wait", "--for=condition=Established", "--timeout=60s", *files, timeout=90
        )


def test_install_with_monitoring_off_where_there_are_no_monitoring_crds(
    kube_cluster, release_namespace, without_monitoring_crds
) -> None:
    ns = release_namespace
    resources = kube_cluster.kubectl("api-resources", "--api-group=monitoring.coreos.com").stdout
    assert "podmonitors" not in resources
    # With a switch on, the install fails and names what is missing ...
    proc = kube_cluster.helm(
        "install", "mon", str(CHART), "--namespace", ns, "--create-namespace", *NO_CRD,
        "--set", "monitoring.podMonitor.enabled=true", check=False,
    )  # fmt: skip
    assert proc.returncode != 0 and "PodMonitor" in proc.stderr, proc.stderr
    kube_cluster.helm("uninstall", "mon", "--namespace", ns, check=False)
    # ... with the defaults it installs cleanly.
    kube_cluster.helm(
        "install", "mon", str(CHART), "--namespace", ns, "--create-namespace", *NO_CRD
    )
    try:
        kube_cluster.kubectl("get", "deployment", "mon-ragindex-operator", "-n", ns)
        listed = kube_cluster.kubectl("get", "configmap", "-n", ns, "-o", "name").stdout
        assert "mon-ragindex-operator-dashboard" not in listed
        services = kube_cluster.kubectl("get", "service", "-n", ns, "-o", "name").stdout
        assert "mon-ragindex-operator-metrics" not in services
    finally:
        kube_cluster.helm("uninstall", "mon", "--namespace", ns)
