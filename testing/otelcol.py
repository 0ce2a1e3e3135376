"""A throwaway OpenTelemetry Collector on loopback that receives OTLP over HTTP and writes every
span it gets to a JSON-lines file, for tests that export traces to a real collector.

The binary comes from `scripts/build_otelcol.sh` (the core OTLP receiver and the contrib file
exporter, built from the Go module proxy and cached); a missing build is run once.
`otelcol_config`, `parse_spans` and `render_span_tree` are pure. The collector keeps its config,
log and span file in a run directory that `stop()` removes; every wait is bounded.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from ragindex.errors import BackendUnavailable
from ragindex.netutil import free_port
from ragindex.testing.loopback_process import LoopbackProcess, spawn, wait_ready

BUILD_SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "build_otelcol.sh"
SPANS_FILE = "spans.jsonl"


def binary() -> Path:
    """Where the build script puts (or finds) the collector."""
    proc = subprocess.run(
        ["bash", str(BUILD_SCRIPT), "--print-bin-dir"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return Path(proc.stdout.strip()) / "otelcol"


def ensure_built() -> Path:
    """The collector binary, built by the project script if missing."""
    path = binary()
    if not path.exists():
        proc = subprocess.run(
            ["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, timeout=3600, check=False
        )
        if proc.returncode != 0:
            raise BackendUnavailable(
                f"building the OpenTelemetry Collector failed: {proc.stderr[-2000:]}"
            )
    return path


def otelcol_config(port: int, spans_file: Path) -> dict[str, Any]:
    """The collector's configuration: OTLP/HTTP in on 127.0.0.1:`port`, every span out to
    `spans_file` as OTLP JSON lines; its own telemetry kept off the network (no metrics port,
    which parallel collectors would fight over)."""
    return {
        "receivers": {"otlp": {"protocols": {"http": {"endpoint": f"127.0.0.1:{port}"}}}},
        "exporters": {"file": {"path": str(spans_file), "format": "json"}},
        "service": {
            "telemetry": {"metrics": {"level": "none"}, "logs": {"level": "warn"}},
            "pipelines": {"traces": {"receivers": ["otlp"], "exporters": ["file"]}},
        },
    }


@dataclass(frozen=True)
class ExportedSpan:
    """One span as the collector wrote it (ids in hex; no parent: an empty string)."""

    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any] = field(default_factory=dict)

    @property
    def duration_ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6


def _any_value(value: dict[str, Any]) -> Any:
    """A Python value for an OTLP JSON AnyValue (`{"stringValue": "x"}`, `{"intValue": "3"}`)."""
    if "intValue" in value:
        return int(value["intValue"])
    if "arrayValue" in value:
        return [_any_value(v) for v in value["arrayValue"].get("values", [])]
    return next(iter(value.values()), None)


def parse_spans(lines: Iterable[str]) -> list[ExportedSpan]:
    """The spans in the file exporter's output: one OTLP JSON `ExportTraceServiceRequest` a
    line. A line not (yet) complete is left out."""
    found = []
    for line in lines:
        try:
            batch = json.loads(line)
        except json.JSONDecodeError:
            continue
        for resource in batch.get("resourceSpans", []):
            for scope in resource.get("scopeSpans", []):
                for span in scope.get("spans", []):
                    found.append(
                        ExportedSpan(
                            trace_id=span["traceId"],
                            span_id=span["spanId"],
                            parent_span_id=span.get("parentSpanId", ""),
                            name=span["name"],
                            start_ns=int(span["startTimeUnixNano"]),
                            end_ns=int(span["endTimeUnixNano"]),
                            attributes={
                                a["key"]: _any_value(a["value"]) for a in span.get("attributes", [])
                            },
                        )
                    )
    return found


def render_span_tree(spans: Iterable[ExportedSpan]) -> str:
    """The spans as an indented tree (name, duration in ms), children in start order; spans
    whose parent is not among them are roots."""
    spans = sorted(spans, key=lambda s: s.start_ns)
    ids = {s.span_id for s in spans}
    children: dict[str, list[ExportedSpan]] = {}
    for span in spans:
        children.setdefault(span.parent_span_id if span.parent_span_id in ids else "", []).append(
            span
        )
    lines: list[str] = []

    def walk(parent: str, depth: int) -> None:
        for span in children.get(parent, []):
            lines.append(f"{'  ' * depth}{span.name}  {span.duration_ms:.3f} ms")
            walk(span.span_id, depth + 1)

    walk("", 0)
    return "\n".join(lines)


@dataclass
class OtelCollector(LoopbackProcess):
    """A running collector; `endpoint` is what OTEL_EXPORTER_OTLP_ENDPOINT names."""

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def spans_file(self) -> Path:
        return self.run_dir / SPANS_FILE

    def spans(self) -> list[ExportedSpan]:
        """Every span the collector has written so far."""
        try:
            text = self.spans_file.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        return parse_spans(text.splitlines())


def start_otelcol(timeout_s: float = 60.0) -> OtelCollector:
    """Start the collector on a free loopback port; returns once its OTLP/HTTP receiver accepts
    an (empty) export (BackendUnavailable with its log otherwise)."""
    path = ensure_built()
    run_dir = Path(tempfile.mkdtemp(prefix="ragindex-otelcol-"))
    config = run_dir / "otelcol.yaml"
    port = free_port()
    config.write_text(yaml.safe_dump(otelcol_config(port, run_dir / SPANS_FILE)))
    argv = [str(path), f"--config=file:{config}"]
    collector = OtelCollector(port=port, run_dir=run_dir, process=spawn(argv, run_dir))

    def accepts_otlp() -> bool:  # an empty export: the receiver is up
        return httpx.post(f"{collector.endpoint}/v1/traces", json={}, timeout=5).status_code == 200

    wait_ready(collector, accepts_otlp, "the OpenTelemetry Collector", timeout_s)
    return collector


@contextlib.contextmanager
def running_otelcol(**kwargs: Any) -> Iterator[OtelCollector]:
    """`start_otelcol` for the length of a block."""
    collector = start_otelcol(**kwargs)
    try:
        yield collector
    finally:
        collector.stop()
