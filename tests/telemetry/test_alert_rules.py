"""The chart's alert rules (helm/ragindex-operator/files/alerts.yaml) and dashboard, checked with
the real promtool: the rules parse, each alert fires on the series made to trip it and stays
quiet on a healthy neighbour (alerts_test.yaml), and every series they name is one ragindex
exports."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import Counter, Histogram

from ragindex.operator.metrics import OperatorMetrics
from ragindex.telemetry import instruments
from ragindex.testing import promtool

REPO = Path(__file__).resolve().parents[2]
FILES = REPO / "helm" / "ragindex-operator" / "files"
ALERTS = FILES / "alerts.yaml"
DASHBOARD = FILES / "dashboard.json"
RULE_TESTS = Path(__file__).parent / "alerts_test.yaml"
ALERT_NAMES = {
    "RagIndexFreshnessSlow",
    "RagIndexConsumerLagGrowing",
    "RagIndexHighErrorRate",
    "RagIndexRefusalSpike",
    "RagIndexGenerationFailed",
    "RagIndexReplicaNotReady",
    "RagIndexNotReconciled",
}


def exported_series() -> set[str]:
    """Every series name ragindex's instruments and the operator's expose (counters with
    `_total`, histograms with their `_bucket`, `_sum` and `_count`)."""
    names: set[str] = set()
    for family in OperatorMetrics().registry.collect():
        if family.type == "counter":
            names.add(f"{family.name}_total")
        elif family.type == "histogram":
            names.update(f"{family.name}_{suffix}" for suffix in ("bucket", "sum", "count"))
        else:
            names.add(family.name)
    made = instruments()
    for field in made.__dataclass_fields__:
        metric = getattr(made, field)
        name = getattr(metric, "_name", None)
        if name is None:
            continue
        if isinstance(metric, Counter):
            names.add(f"{name}_total")
        elif isinstance(metric, Histogram):
            names.update(f"{name}_{suffix}" for suffix in ("bucket", "sum", "count"))
        else:
            names.add(name)
    return names


def series_named(promql: str) -> set[str]:
    return set(re.findall(r"\bragindex_[a-z_]+\b", promql))


def alert_rules() -> list[dict[str, object]]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def test_promtool_checks_the_rules_file() -> None:
    proc = promtool("check", "rules", str(ALERTS))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(ALERT_NAMES)} rules found" in proc.stdout


def test_each_alert_fires_and_stays_quiet_as_its_unit_tests_expect() -> None:
    proc = promtool("test", "rules", str(RULE_TESTS))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    tested = {
        case["alertname"]
        for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]
        for case in test["alert_rule_test"]
    }
    assert tested == {rule["alert"] for rule in alert_rules()} == ALERT_NAMES


def test_the_unit_tests_fail_when_an_alert_does_not_fire(tmp_path: Path) -> None:
    """A rule changed so that it cannot fire makes `promtool test rules` fail: the firing cases
    are real checks, not tests that always pass."""
    rules = ALERTS.read_text().replace("> 0.05", "> 5")  # the 5xx share can never exceed 5
    assert rules != ALERTS.read_text()
    broken = tmp_path / "helm" / "ragindex-operator" / "files"
    broken.mkdir(parents=True)
    (broken / "alerts.yaml").write_text(rules)
    (tmp_path / "tests" / "telemetry").mkdir(parents=True)
    shutil.copy(RULE_TESTS, tmp_path / "tests" / "telemetry" / "alerts_test.yaml")
    proc = promtool("test", "rules", str(tmp_path / "tests" / "telemetry" / "alerts_test.yaml"))
    assert proc.returncode != 0
    assert "RagIndexHighErrorRate" in proc.stdout + proc.stderr


def test_rules_name_only_series_ragindex_exports() -> None:
    exported = exported_series()
    for rule in alert_rules():
        named = series_named(str(rule["expr"]))
        assert named <= exported, f"{rule['alert']} names unknown series {named - exported}"


PANELS = [p for p in json.loads(DASHBOARD.read_text())["panels"] if p["type"] != "row"]


@pytest.mark.parametrize("panel", PANELS, ids=lambda p: p["title"])
def test_dashboard_panels_query_series_ragindex_exports(panel: dict[str, Any]) -> None:
    exported = exported_series()
    assert panel["targets"], f"panel {panel['title']} has no query"
    for target in panel["targets"]:
        named = series_named(target["expr"])
        assert named and named <= exported, f"{panel['title']}: unknown {named - exported}"
