"""`ragindex bench http`: what each Serve option does to the HTTP path, one option at a time.

Two `ragindex serve` processes run side by side on copies of one small corpus (each its own
local Ray): a baseline with the options `ragindex serve` ships, and a variant that changes
ONE Ray Serve option. The same unique queries go to both, alternating which goes first, so
each ratio (variant / baseline p50) comes from one run under one background load; the
baseline stays up while the variants take turns. Lexical-only searches (tantivy answers in
well under a millisecond) show the path's own cost; hybrid ones add the query embedding.
Each response's Server-Timing splits the time into the replica's share and the proxy's.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import yaml

from ragindex.config import RagIndexSpec
from ragindex.measure.bench.anchors import anchored_generator
from ragindex.measure.bench.serve import ANCHORS, BENCH_SPEC
from ragindex.measure.bench.serve_corpus import (
    TENANT,
    RealText,
    SyntheticPassages,
    load_corpus,
    unique_queries,
)
from ragindex.measure.bench.serve_probes import HttpSample, http_search, ready_deadline_s
from ragindex.measure.stats import percentile
from ragindex.netutil import free_port
from ragindex.router import create_token

CHUNKS = 2_000
START_ATTEMPTS = 3
READY_POLL_S = 10.0
QUERIES = 150
WARMUP = 20
# One option changed per variant (Ray Serve 2.60 reads them from the environment of its
# processes); `ragindex serve` runs Serve's defaults until one wins here. (The Router's user
# code on the replica's main loop won, and is set in the Router's own runtime_env, where a
# process-wide variable cannot undo it: serve_config.MAIN_LOOP_ENV.)
VARIANTS: dict[str, dict[str, str]] = {
    "handle router on the main loop": {"RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP": "0"},
    "access log buffered, not to stderr": {
        "RAY_SERVE_REQUEST_PATH_LOG_BUFFER_SIZE": "1000",
        "RAY_SERVE_LOG_TO_STDERR": "0",
    },
    "proxy to replica over gRPC": {"RAY_SERVE_USE_GRPC_BY_DEFAULT": "1"},
    # the shipped baseline serves its one Router by direct ingress; this is Serve's proxy
    "through Serve's proxy (no direct ingress)": {"RAGINDEX_DIRECT_INGRESS": "0"},
}


@dataclass
class Server:
    name: str
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


def launch(name: str, data_dir: Path, env: Mapping[str, str], logs: Path) -> Server:
    """`ragindex serve` on data_dir (with the benchmark's spec) with `env` added, on free
    ports."""
    port = free_port()
    log_path = logs / f"{name.replace(' ', '_')}.log"
    full_env = {**os.environ, **env, "RAGINDEX_DASHBOARD_PORT": str(free_port())}
    spec_path = logs / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(BENCH_SPEC))
    argv = ["serve", "--data-dir", str(data_dir), "--spec", str(spec_path), "--port", str(port)]
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "ragindex.app.cli", *argv],
            env=full_env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    return Server(name, f"http://127.0.0.1:{port}", process, log_path)


def became_ready(server: Server, deadline_s: float) -> bool:
    """Until /readyz says 200 (True), the process exits or the deadline passes (False)."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            return False
        try:
            if httpx.get(f"{server.url}/readyz", timeout=READY_POLL_S).status_code == 200:
                return True
        except httpx.TransportError:
            pass
        time.sleep(1.0)
    return False


@contextmanager
def serving(name: str, data_dir: Path, env: Mapping[str, str], logs: Path) -> Iterator[Server]:
    """A ready `ragindex serve` (a start that fails, as Ray's can on a loaded box, is retried),
    stopped with SIGTERM (its clean shutdown) on the way out."""
    for _ in range(START_ATTEMPTS):
        server = launch(name, data_dir, env, logs)
        if became_ready(server, ready_deadline_s(CHUNKS)):
            break
        server.stop()
    else:
        tail = server.log_path.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"{name}: not ready after {START_ATTEMPTS} starts:\n{tail}")
    try:
        yield server
    finally:
        server.stop()


def compare(
    base: httpx.Client, variant: httpx.Client, warmup: list[str], queries: list[str], mode: str
) -> dict[str, Any]:
    """Both servers answer each query, alternating which goes first; p50s and their ratio."""
    for q in warmup:
        http_search(base, q, mode)
        http_search(variant, q, mode)
    a: list[HttpSample] = []
    b: list[HttpSample] = []
    for n, q in enumerate(queries):
        if n % 2:
            b.append(http_search(variant, q, mode))
            a.append(http_search(base, q, mode))
        else:
            a.append(http_search(base, q, mode))
            b.append(http_search(variant, q, mode))

    def summary(samples: list[HttpSample]) -> dict[str, float]:
        return {
            "p50_ms": round(percentile([s.total_ms for s in samples], 50), 3),
            "p99_ms": round(percentile([s.total_ms for s in samples], 99), 3),
            "replica_p50_ms": round(percentile([s.replica_ms for s in samples], 50), 3),
            "proxy_and_network_p50_ms": round(
                percentile([s.total_ms - s.replica_ms for s in samples], 50), 3
            ),
        }

    out: dict[str, Any] = {"baseline": summary(a), "variant": summary(b)}
    out["variant_over_baseline_p50"] = round(
        out["variant"]["p50_ms"] / out["baseline"]["p50_ms"], 3
    )
    return out


def run_bench_http(
    variants: Mapping[str, Mapping[str, str]] = VARIANTS, chunks: int = CHUNKS
) -> dict[str, Any]:
    from ragindex.models import load_embedder

    root = Path(tempfile.mkdtemp(prefix="ragindex-bench-http-"))
    spec = RagIndexSpec.model_validate(BENCH_SPEC)
    rng = np.random.default_rng(5)
    base_dir = root / "baseline"
    passages = SyntheticPassages(
        load_embedder(spec.embedder), anchored_generator(ANCHORS, spec.embedder)
    )
    text = RealText(chunks)
    load_corpus(base_dir, spec, passages, chunks, text)
    token = create_token(base_dir, TENANT)
    taken: set[str] = set()
    report: dict[str, Any] = {"chunks": chunks, "queries": QUERIES, "variants": {}}
    with ExitStack() as stack:
        stack.callback(shutil.rmtree, root, True)
        variant_dir = root / "variant"
        shutil.copytree(base_dir, variant_dir)
        base = stack.enter_context(serving("baseline", base_dir, {}, root))
        base_client = stack.enter_context(
            httpx.Client(base_url=base.url, headers={"Authorization": f"Bearer {token}"})
        )
        for name, env in variants.items():
            print(f"bench http: {name} ({env})", file=sys.stderr, flush=True)
            if base.process.poll() is not None:
                raise RuntimeError(f"the baseline server exited: see {base.log_path}")
            result: dict[str, Any] = {"env": dict(env)}
            try:
                with (
                    serving(name, variant_dir, env, root) as server,
                    httpx.Client(
                        base_url=server.url, headers={"Authorization": f"Bearer {token}"}
                    ) as client,
                ):
                    for mode in ("lexical", "hybrid"):
                        warmup = unique_queries(text, rng, WARMUP, taken)
                        queries = unique_queries(text, rng, QUERIES, taken)
                        result[mode] = compare(base_client, client, warmup, queries, mode)
            except RuntimeError as err:  # this variant would not start: say so, go on
                result["error"] = str(err)
            report["variants"][name] = result
            time.sleep(1.0)  # the variant's Ray has let go of its ports
    return report


def format_http_report(report: Mapping[str, Any]) -> str:
    from ragindex.measure.stats import text_table

    header = [
        "variant",
        "mode",
        "base p50",
        "variant p50",
        "ratio",
        "base proxy",
        "variant proxy",
        "base replica",
        "variant replica",
    ]
    rows = []
    for name, result in report["variants"].items():
        if "error" in result:
            rows.append([name, "error", "", "", "", "", "", "", ""])
            continue
        for mode in ("lexical", "hybrid"):
            r = result[mode]
            rows.append(
                [
                    name,
                    mode,
                    r["baseline"]["p50_ms"],
                    r["variant"]["p50_ms"],
                    r["variant_over_baseline_p50"],
                    r["baseline"]["proxy_and_network_p50_ms"],
                    r["variant"]["proxy_and_network_p50_ms"],
                    r["baseline"]["replica_p50_ms"],
                    r["variant"]["replica_p50_ms"],
                ]
            )
    return text_table(header, rows)
