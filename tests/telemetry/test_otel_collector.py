"""One hybrid search's trace, exported by OTLP/HTTP to a real OpenTelemetry Collector (built
from the Go module proxy by scripts/build_otelcol.sh) and read back from the collector's file
exporter: one tree from Serve's HTTP proxy through the Router, its stages (embed, dense,
lexical, fusion, fetch) and the replicas they call (each dense shard, the BM25 view).

The app runs in the CLUSTER layout (one deployment per shard and for the BM25 view), deployed
the way `serve run CONFIG` and KubeRay do it, so the trace crosses replicas; the environment
that turns tracing on is the one the operator gives its pods (OTEL_EXPORTER_OTLP_ENDPOINT).
`pytest -s` prints the span tree with durations. First, without Ray: the exporter ragindex
gives Serve (`span_processors`) reaches the collector, and what it wrote reads back as sent.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from ragindex.config import RagIndexSpec
from ragindex.netutil import free_port
from ragindex.router import create_token
from ragindex.serve_config import render_serve_config
from ragindex.telemetry.tracing import STAGE_SPAN_PREFIX, span_processors, tracing_environment
from ragindex.telemetry_names import OTLP_ENDPOINT_ENV
from ragindex.testing import ExportedSpan, OtelCollector, render_span_tree, running_otelcol

APP = "ragindex-traced"
SPEC = {"dense": {"shards": 2}}
STAGES = ("embed", "dense", "lexical", "fusion", "fetch")
SHARDS = ("Shard0", "Shard1")
TRACE_WAIT_S = 60.0


def test_the_otlp_exporter_reaches_the_collector(monkeypatch: pytest.MonkeyPatch) -> None:
    from opentelemetry.sdk.trace import TracerProvider

    with running_otelcol() as collector:
        monkeypatch.setenv(OTLP_ENDPOINT_ENV, collector.endpoint)
        monkeypatch.delenv("RAGINDEX_TRACE_FILE", raising=False)
        provider = TracerProvider()
        for processor in span_processors():
            provider.add_span_processor(processor)
        tracer = provider.get_tracer("t")
        with tracer.start_as_current_span("request") as request, tracer.start_span("embed"):
            time.sleep(0.001)
        provider.shutdown()  # flushes the batch to the collector
        deadline = time.monotonic() + TRACE_WAIT_S
        while len(spans := collector.spans()) < 2:
            assert time.monotonic() < deadline, collector.log_tail()
            time.sleep(0.2)
    by_name = {s.name: s for s in spans}
    context = request.get_span_context()
    assert by_name["request"].trace_id == f"{context.trace_id:032x}"
    assert by_name["request"].span_id == f"{context.span_id:016x}"
    assert by_name["request"].parent_span_id == ""
    assert by_name["embed"].parent_span_id == by_name["request"].span_id
    assert by_name["embed"].duration_ms > 0
    assert render_span_tree(spans).splitlines()[1].startswith("  embed  ")


@dataclass
class Traced:
    url: str
    data_dir: Path
    collector: OtelCollector


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Traced]:
    """A collector, and the cluster layout on a Ray whose processes export every request's
    spans to it (sampling ratio 1; Serve's default keeps 1 % of requests that come without a
    sampled `traceparent`), with one document ingested."""
    import ray
    from ray import serve
    from ray.serve.context import _get_global_client
    from ray.serve.schema import ServeDeploySchema

    with running_otelcol() as collector:
        added = {
            OTLP_ENDPOINT_ENV: collector.endpoint,
            "RAY_SERVE_TRACING_SAMPLING_RATIO": "1",
            "OTEL_BSP_SCHEDULE_DELAY": "200",  # ms between the batch processor's exports
        }
        added.update(tracing_environment(added))
        os.environ.update(added)  # before Ray starts: its processes inherit it
        data_dir = tmp_path_factory.mktemp("traced-data")
        port = free_port()
        config = render_serve_config(
            RagIndexSpec.model_validate(SPEC),
            name=APP,
            data_dir=str(data_dir),
            runtime="cluster",
            host="127.0.0.1",
            port=port,
        )
        # more logical CPUs than cores: every cluster deployment asks for one
        ray.init(address="local", num_cpus=12, include_dashboard=False, log_to_driver=False)
        try:
            serve.start(http_options=config["http_options"])
            client = _get_global_client()
            assert client is not None
            client.deploy_apps(ServeDeploySchema.model_validate(config))
            app = Traced(f"http://127.0.0.1:{port}", data_dir, collector)
            _wait_ready(app.url)
            _ingest(app)
            yield app
        finally:
            serve.shutdown()
            ray.shutdown()
            for key in added:
                os.environ.pop(key, None)


def _wait_ready(url: str, timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"the app at {url} was not ready within {timeout_s:.0f} s")


def _ingest(app: Traced) -> None:
    token = create_token(app.data_dir, "alpha")
    doc = {
        "source": "wiki",
        "doc_id": "lighthouse",
        "title": "Lighthouses",
        "text": "A lighthouse guides ships at night with a bright lamp and a lens.",
    }
    r = httpx.post(
        f"{app.url}/v1/documents",
        json={"documents": [doc]},
        params={"wait": "true", "wait_timeout_s": "60"},
        headers={"Authorization": f"Bearer {token}"},
        timeout=90,
    )
    assert r.status_code == 202 and r.json()["applied"] is True, r.text


def _search(app: Traced, headers: dict[str, str] | None = None) -> None:
    token = create_token(app.data_dir, "alpha")
    r = httpx.post(
        f"{app.url}/v1/search",
        json={"query": "how does a lighthouse guide ships", "mode": "hybrid"},
        headers={"Authorization": f"Bearer {token}", **(headers or {})},
        timeout=60,
    )
    assert r.status_code == 200 and r.json()["hits"], r.text


def _deployment(span: ExportedSpan) -> str | None:
    """The deployment whose replica made the span (Serve's replica spans say so)."""
    value = span.attributes.get("deployment")
    return value if isinstance(value, str) else None


def _stage(span: ExportedSpan) -> str | None:
    return (
        span.name.removeprefix(STAGE_SPAN_PREFIX)
        if span.name.startswith(STAGE_SPAN_PREFIX)
        else None
    )


def _search_trace(spans: list[ExportedSpan], trace_id: str) -> list[ExportedSpan]:
    return [s for s in spans if s.trace_id == trace_id]


def _complete(trace: list[ExportedSpan], outside_parent: str = "") -> bool:
    """Whether the trace has every span a hybrid search makes, each parent among them (a
    span is exported when it ends: a parent comes after its children)."""
    ids = {s.span_id for s in trace} | {outside_parent}
    return (
        all(s.parent_span_id in ids for s in trace)
        and {_stage(s) for s in trace} >= set(STAGES)
        and {_deployment(s) for s in trace} >= {"Router", *SHARDS, "Lexical"}
    )


def _wait_for_trace(
    collector: OtelCollector, pick: str | None = None, outside_parent: str = ""
) -> list[ExportedSpan]:
    """The spans of one search's trace once complete: trace `pick`, or (None) the trace
    whose Router span carries a search (`ragindex.mode`)."""
    deadline = time.monotonic() + TRACE_WAIT_S
    while True:
        spans = collector.spans()
        trace_ids = (
            [pick]
            if pick
            else sorted({s.trace_id for s in spans if "ragindex.mode" in s.attributes})
        )
        for trace_id in trace_ids:
            trace = _search_trace(spans, trace_id)
            if _complete(trace, outside_parent):
                return trace
        if time.monotonic() > deadline:
            raise AssertionError(
                f"no complete search trace within {TRACE_WAIT_S:.0f} s; the collector has"
                f" {len(spans)} spans:\n{render_span_tree(spans)}\n{collector.log_tail()}"
            )
        time.sleep(0.5)


def _ancestors(span: ExportedSpan, by_id: dict[str, ExportedSpan]) -> list[ExportedSpan]:
    found = []
    while span.parent_span_id in by_id:
        span = by_id[span.parent_span_id]
        found.append(span)
    return found


@pytest.mark.serve
@pytest.mark.slow
def test_a_hybrid_search_is_one_trace_in_the_collector(traced: Traced) -> None:
    _search(traced)
    trace = _wait_for_trace(traced.collector)
    print(f"\ntrace {trace[0].trace_id} as the OpenTelemetry Collector wrote it:")
    print(render_span_tree(trace))
    by_id = {s.span_id: s for s in trace}
    assert len(by_id) == len(trace), "a span id is used twice"
    # one root: the HTTP request as Serve's proxy received it
    (root,) = [s for s in trace if s.parent_span_id not in by_id]
    assert root.parent_span_id == "", root
    assert root.name.startswith("proxy_http_request"), root.name
    # every span took time
    assert all(span.duration_ms > 0 for span in trace), render_span_tree(trace)
    # the Router's request span carries the search; its stages are below it, and each
    # replica the Router calls is below the stage that called it
    (router,) = [s for s in trace if "ragindex.mode" in s.attributes]
    assert _deployment(router) == "Router" and root in _ancestors(router, by_id)
    assert router.attributes["ragindex.mode"] == "hybrid"
    stages = {_stage(s): s for s in trace if _stage(s)}
    for name in STAGES:
        assert router in _ancestors(stages[name], by_id), name
    for deployment, stage in [*((shard, "dense") for shard in SHARDS), ("Lexical", "lexical")]:
        replica = [s for s in trace if _deployment(s) == deployment]
        assert replica, deployment
        assert all(stages[stage] in _ancestors(s, by_id) for s in replica), deployment


@pytest.mark.serve
@pytest.mark.slow
def test_a_callers_traceparent_is_the_trace(traced: Traced) -> None:
    trace_id, parent = secrets.token_hex(16), secrets.token_hex(8)
    _search(traced, {"traceparent": f"00-{trace_id}-{parent}-01"})
    trace = _wait_for_trace(traced.collector, pick=trace_id, outside_parent=parent)
    # the proxy's span is the caller's span's child; the rest hang below it
    (root,) = [s for s in trace if s.parent_span_id == parent]
    assert root.name.startswith("proxy_http_request"), root.name
    assert any(s.attributes.get("ragindex.mode") == "hybrid" for s in trace)
