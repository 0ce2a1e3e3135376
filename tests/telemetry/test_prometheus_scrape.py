"""A real Prometheus scrapes the embedded runtime's /metrics every second during a short ingest
and query run; PromQL through its HTTP API then finds freshness, stage latency, lag and the
refusals the client saw, and every query of the chart's dashboard returns data."""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from ragindex.config import RagIndexSpec
from ragindex.netutil import free_port
from ragindex.router import create_token
from ragindex.testing import PrometheusServer, running_prometheus

pytestmark = [pytest.mark.serve, pytest.mark.slow]

DASHBOARD = Path(__file__).resolve().parents[2] / "helm/ragindex-operator/files/dashboard.json"
# Tight admission for one tenant, so a burst of its searches is refused with 429; the other
# tenant's few requests stay far inside it.
SPEC = {"dense": {"shards": 2}, "limits": {"maxConcurrent": 8, "requestsPerS": 1, "burst": 30}}
WAIT = {"wait": "true", "wait_timeout_s": "60"}
TOPICS = ["lighthouse", "volcano", "bread", "glacier", "violin", "comet"]
DOCS = [
    {
        "source": "wiki",
        "doc_id": topic,
        "title": topic.title(),
        "text": f"An article about the {topic}: where it comes from, how it works and why"
        f" people have written about the {topic} for centuries.",
    }
    for topic in TOPICS
]
QUERIES = ["how does a lighthouse guide ships", "lava from a volcano", "baking bread", "comet"]
FLOOD = 60  # searches the flooding tenant sends back to back
SCRAPE_WAIT_S = 60.0
# Series the run prints from /metrics for a reader (`pytest -s`): freshness, offsets, lag,
# stage counts, refusals.
EXCERPT = (
    "ragindex_view_freshness_seconds",
    "ragindex_view_applied_offset",
    "ragindex_ingest_consumer_lag_records",
    "ragindex_query_stage_seconds_count",
    "ragindex_admission_refused_total",
)


@dataclass
class Run:
    """What the client saw during the run."""

    url: str
    refused: int  # 429 answers to the flooding tenant
    searches: int  # 200 answers


def _wait_ready(url: str, timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"the embedded runtime at {url} was not ready within {timeout_s:.0f} s")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The embedded runtime (local Serve app, Ray in the test process) over real HTTP."""
    import ray
    from ray import serve

    from ragindex.app.serve import build_app
    from ragindex.app.serve_cli import app_args

    data_dir = tmp_path_factory.mktemp("scraped-data")
    spec = RagIndexSpec.model_validate(SPEC).model_dump(mode="json", by_alias=True)
    port = free_port()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        serve.run(build_app(app_args(data_dir, spec)), name="ragindex", route_prefix="/")
        url = f"http://127.0.0.1:{port}"
        _wait_ready(url)
        yield url, data_dir
    finally:
        serve.shutdown()
        ray.shutdown()


@pytest.fixture(scope="module")
def prometheus(served: tuple[str, Path]) -> Iterator[PrometheusServer]:
    """Prometheus scraping the runtime's /metrics every second, from before the run."""
    url, _ = served
    with running_prometheus([url.removeprefix("http://")], interval_s=1.0) as server:
        server.wait_for('up{job="ragindex"} == 1', timeout_s=SCRAPE_WAIT_S)
        yield server


@pytest.fixture(scope="module")
def run(served: tuple[str, Path], prometheus: PrometheusServer) -> Run:
    """Ingest, search, ask for the build report, one unauthenticated request and floods from
    one tenant, each step twice with a scrape between (a rate needs a counter to grow between
    two samples); returns once Prometheus has scraped the runtime after the last request."""
    url, data_dir = served
    reader = {"Authorization": f"Bearer {create_token(data_dir, 'reader')}"}
    flooder = {"Authorization": f"Bearer {create_token(data_dir, 'flooder')}"}
    searches = refused = 0
    with httpx.Client(base_url=url, timeout=60) as http:
        for half in (DOCS[: len(DOCS) // 2], DOCS[len(DOCS) // 2 :]):
            r = http.post("/v1/documents", json={"documents": half}, params=WAIT, headers=reader)
            assert r.status_code == 202 and r.json()["applied"] is True, r.text
            for query in QUERIES:
                r = http.post("/v1/search", json={"query": query, "k": 3}, headers=reader)
                assert r.status_code == 200, r.text
                searches += 1
            # What the operator asks of a generation: it records the generation's phase.
            assert http.get("/v1/generation", headers=reader).status_code == 200
            assert http.post("/v1/search", json={"query": "no token"}).status_code == 401
            statuses = [
                http.post("/v1/search", json={"query": "comet", "k": 1}, headers=flooder)
                for _ in range(FLOOD)
            ]
            assert {s.status_code for s in statuses} <= {200, 429}, statuses
            refused += sum(s.status_code == 429 for s in statuses)
            searches += sum(s.status_code == 200 for s in statuses)
            _wait_scraped(prometheus, "sum(ragindex_admission_refused_total)", refused)
        exposition = http.get("/metrics").text
    assert refused > 0, "the flood was never refused: admission did not limit the tenant"
    print("\n/metrics after the run (excerpt):")  # `pytest -s` shows what was scraped
    print("\n".join(line for line in exposition.splitlines() if line.startswith(EXCERPT)))
    return Run(url=url, refused=refused, searches=searches)


def _wait_scraped(prometheus: PrometheusServer, promql: str, expected: float) -> None:
    """Until Prometheus holds `expected` for `promql`: it scraped after the client's requests."""
    deadline = time.monotonic() + SCRAPE_WAIT_S
    while (found := _value(prometheus, promql)) != expected:
        assert time.monotonic() < deadline, (promql, found, expected, prometheus.targets())
        time.sleep(0.5)


def _value(prometheus: PrometheusServer, promql: str) -> float | None:
    result = prometheus.query(promql)
    return float(result[0]["value"][1]) if result else None


def _by(prometheus: PrometheusServer, promql: str, label: str) -> dict[str, float]:
    found = {s["metric"].get(label, ""): float(s["value"][1]) for s in prometheus.query(promql)}
    print(f"PromQL {promql} -> {found}")
    return found


def test_freshness_of_every_view_is_within_the_bound(
    run: Run, prometheus: PrometheusServer
) -> None:
    bound = RagIndexSpec.model_validate(SPEC).freshness_s
    freshness = _by(prometheus, "max by (view) (ragindex_view_freshness_seconds)", "view")
    assert {"dense", "lexical"} <= set(freshness), freshness
    assert all(0 <= seconds <= bound for seconds in freshness.values()), freshness
    # Every view applied what the log holds for it.
    behind = _by(
        prometheus,
        "max by (view) (ragindex_view_end_offset - ragindex_view_applied_offset)",
        "view",
    )
    assert behind and all(records <= 1 for records in behind.values()), behind  # a txn marker


def test_stage_latency_quantiles_come_from_the_searches(
    run: Run, prometheus: PrometheusServer
) -> None:
    p50 = _by(
        prometheus,
        "histogram_quantile(0.5, sum by (le, stage) (ragindex_query_stage_seconds_bucket))",
        "stage",
    )
    assert {"embed", "dense", "lexical", "fusion"} <= set(p50), p50
    for stage in ("embed", "dense", "lexical", "fusion"):
        assert 0 < p50[stage] < 10, p50
    counted = _value(prometheus, 'sum(ragindex_query_stage_seconds_count{stage="embed"})')
    assert counted == run.searches


def test_ingest_consumed_everything_and_the_lag_is_zero(
    run: Run, prometheus: PrometheusServer
) -> None:
    assert _value(prometheus, "sum(ragindex_ingest_consumer_lag_records)") == 0
    assert (_value(prometheus, "sum(ragindex_ingest_documents_total)") or 0) >= len(DOCS)
    docs_end = _value(prometheus, 'sum(ragindex_log_end_offset{topic="docs"})')
    assert docs_end is not None and docs_end >= len(DOCS)


def test_refusals_and_http_statuses_match_what_the_client_saw(
    run: Run, prometheus: PrometheusServer
) -> None:
    statuses = _by(
        prometheus,
        'sum by (status) (ragindex_http_requests_total{route="/v1/search"})',
        "status",
    )
    assert statuses.get("429") == run.refused
    assert statuses.get("401") == 2
    assert statuses.get("200") == run.searches


def _dashboard_queries() -> list[tuple[str, str]]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [(p["title"], t["expr"]) for p in panels if p["type"] != "row" for t in p["targets"]]


def _substituted(expr: str) -> str:
    """A panel query as Grafana sends it with every namespace and index selected ("All") and a
    rate window that covers the whole run."""
    return (
        expr.replace("$namespace", ".*").replace("$index", ".*").replace("$__rate_interval", "10m")
    )


@pytest.mark.parametrize(
    "title, expr", _dashboard_queries(), ids=[f"{t}:{e[:40]}" for t, e in _dashboard_queries()]
)
def test_every_dashboard_query_returns_data(
    run: Run, prometheus: PrometheusServer, title: str, expr: str
) -> None:
    result = prometheus.query(_substituted(expr))
    values = [float(s["value"][1]) for s in result]
    samples = {
        name: prometheus.query(f"count_over_time({name}[10m])")
        for name in re.findall(r"\bragindex_[a-z_]+\b", expr)
    }
    assert any(math.isfinite(v) for v in values), f"{title}: {result}; samples: {samples}"


def test_a_query_error_is_reported_with_prometheus_message(prometheus: PrometheusServer) -> None:
    with pytest.raises(AssertionError, match="parse error"):
        prometheus.query("sum(")
