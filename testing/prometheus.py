"""A throwaway Prometheus on loopback that scrapes given targets, and promtool, for tests.

The binaries come from `scripts/build_prometheus.sh` (Go module proxy, cached); a missing build
is run once. `scrape_config` is the pure part: the config a server starts with. The server
keeps its TSDB in a run directory that `stop()` removes; every wait is bounded.
"""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from ragindex.errors import BackendUnavailable
from ragindex.netutil import free_port
from ragindex.testing.loopback_process import LoopbackProcess, spawn, wait_ready

BUILD_SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "build_prometheus.sh"
SCRAPE_JOB = "ragindex"


def bin_dir() -> Path:
    """Where the build script puts (or finds) prometheus and promtool."""
    proc = subprocess.run(
        ["bash", str(BUILD_SCRIPT), "--print-bin-dir"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return Path(proc.stdout.strip())


def ensure_built() -> Path:
    """The bin directory, with both binaries built by the project script if missing."""
    bins = bin_dir()
    if not ((bins / "prometheus").exists() and (bins / "promtool").exists()):
        proc = subprocess.run(
            ["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, timeout=3600, check=False
        )
        if proc.returncode != 0:
            raise BackendUnavailable(f"building Prometheus failed: {proc.stderr[-2000:]}")
    return bins


def promtool(*args: str, timeout_s: float = 120.0) -> subprocess.CompletedProcess[str]:
    """Run promtool with `args`; the caller reads returncode, stdout and stderr."""
    return subprocess.run(
        [str(ensure_built() / "promtool"), *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def scrape_config(
    targets: Sequence[str],
    *,
    interval_s: float = 1.0,
    metrics_path: str = "/metrics",
    rule_files: Sequence[Path] = (),
) -> dict[str, Any]:
    """Prometheus' configuration: one job scraping `targets` (host:port) every `interval_s`."""
    interval = f"{int(interval_s * 1000)}ms"
    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": [str(path) for path in rule_files],
        "scrape_configs": [
            {
                "job_name": SCRAPE_JOB,
                "metrics_path": metrics_path,
                "scrape_timeout": interval,
                "static_configs": [{"targets": list(targets)}],
            }
        ],
    }


@dataclass
class PrometheusServer(LoopbackProcess):
    """A running Prometheus; `url` is its HTTP API."""

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def api(self, path: str, **params: str) -> Any:
        """The `data` of a successful API answer; an error answer raises with its message."""
        body = httpx.get(f"{self.url}/api/v1/{path}", params=params, timeout=30).json()
        if body.get("status") != "success":
            raise AssertionError(f"Prometheus refused {path} {params}: {body.get('error')}")
        return body["data"]

    def query(self, promql: str) -> list[dict[str, Any]]:
        """The instant vector (or scalar as a one-element list) that `promql` evaluates to now."""
        data = self.api("query", query=promql)
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": data["result"]}]
        return list(data["result"])

    def wait_for(self, promql: str, timeout_s: float = 60.0) -> list[dict[str, Any]]:
        """Poll until `promql` returns data, at most `timeout_s`; the result, or AssertionError
        naming the query and the scrape targets' state."""
        deadline = time.monotonic() + timeout_s
        while True:
            result = self.query(promql)
            if result:
                return result
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"no data for {promql!r} within {timeout_s:.0f} s; targets: {self.targets()}"
                )
            time.sleep(0.5)

    def targets(self) -> list[dict[str, Any]]:
        """The active scrape targets with their health and last error."""
        return [
            {key: t.get(key) for key in ("scrapeUrl", "health", "lastError")}
            for t in self.api("targets")["activeTargets"]
        ]


def start_prometheus(
    targets: Sequence[str],
    *,
    interval_s: float = 1.0,
    metrics_path: str = "/metrics",
    rule_files: Sequence[Path] = (),
    timeout_s: float = 60.0,
) -> PrometheusServer:
    """Start Prometheus on a free loopback port scraping `targets`; returns once /-/ready is
    200 (BackendUnavailable with its log otherwise)."""
    bins = ensure_built()
    run_dir = Path(tempfile.mkdtemp(prefix="ragindex-prometheus-"))
    config = run_dir / "prometheus.yml"
    config.write_text(
        yaml.safe_dump(
            scrape_config(
                targets, interval_s=interval_s, metrics_path=metrics_path, rule_files=rule_files
            )
        )
    )
    port = free_port()
    argv = [
        str(bins / "prometheus"),
        f"--config.file={config}",
        f"--storage.tsdb.path={run_dir / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=warn",
    ]
    server = PrometheusServer(port=port, run_dir=run_dir, process=spawn(argv, run_dir))

    def ready() -> bool:
        return httpx.get(f"{server.url}/-/ready", timeout=5).status_code == 200

    wait_ready(server, ready, "Prometheus", timeout_s)
    return server


@contextlib.contextmanager
def running_prometheus(targets: Sequence[str], **kwargs: Any) -> Iterator[PrometheusServer]:
    """`start_prometheus` for the length of a block."""
    server = start_prometheus(targets, **kwargs)
    try:
        yield server
    finally:
        server.stop()
