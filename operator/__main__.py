"""`python -m ragindex.operator`: run the RagIndex operator (cluster or local runtime).

Examples:
    python -m ragindex.operator --all-namespaces --image registry/ragindex:0.1.0
    python -m ragindex.operator --runtime local --ray-dashboard http://127.0.0.1:8265 -n default
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
from collections.abc import Sequence
from typing import Any

import kopf

from ragindex.operator.handlers import OperatorOptions, register
from ragindex.operator.metrics import OperatorMetrics
from ragindex.operator.objects import RenderOptions
from ragindex.telemetry_names import METRICS_PORT, OPERATOR_METRICS_PORT


def operator_identity() -> str:
    """Who this replica is in kopf peering: host (the pod name) and pid. kopf's own default asks
    the passwd database for the user, which a container running as an arbitrary uid (the chart's
    65532, OpenShift's random ones) does not have: the operator crashed at start on real pods."""
    return f"ragindex-operator@{socket.gethostname()}/{os.getpid()}"


def peering_args(peering: str | None) -> dict[str, Any]:
    """kopf.run's peering arguments. Standalone means no peering name at all: kopf makes a named
    peering mandatory and pauses every watch until its CRD exists, so on a cluster without
    kopf's peering CRDs (the chart adds them only for replicaCount > 1) the operator never
    reconciled anything on real pods."""
    if peering is None:
        return {"standalone": True, "peering_name": None}
    return {"standalone": False, "peering_name": peering}


def run(
    options: OperatorOptions,
    *,
    namespaces: Sequence[str] = (),
    clusterwide: bool = False,
    liveness_endpoint: str | None = None,
    peering: str | None = None,
    metrics_port: int = 0,
    metrics_host: str = "0.0.0.0",
) -> None:
    """Run the operator until it is stopped (SIGINT/SIGTERM); blocks.

    With `peering`, replicas elect one active operator through kopf's peering objects (the
    chart creates them when replicaCount > 1); without it the operator runs standalone.
    With `metrics_port`, its Prometheus metrics are served there at /metrics (0: not served).
    """
    if bool(namespaces) == clusterwide:
        raise ValueError("watch either --all-namespaces or one or more --namespace, not both")
    metrics = OperatorMetrics()
    if metrics_port:
        metrics.serve(metrics_port, metrics_host)
    kopf.run(
        registry=register(options, metrics=metrics),
        clusterwide=clusterwide,
        namespaces=list(namespaces),
        **peering_args(peering),
        liveness_endpoint=liveness_endpoint,
        identity=operator_identity(),  # type: ignore[arg-type]  # kopf's Identity is a NewType of str, not exported
    )


def parse_args(argv: Sequence[str] | None = None) -> tuple[OperatorOptions, argparse.Namespace]:
    p = argparse.ArgumentParser(prog="python -m ragindex.operator", description=__doc__)
    p.add_argument("--runtime", choices=["cluster", "local"], default="cluster")
    scope = p.add_mutually_exclusive_group(required=True)
    scope.add_argument("-A", "--all-namespaces", action="store_true")
    scope.add_argument("-n", "--namespace", action="append", default=[])
    p.add_argument("--image", default=RenderOptions.image, help="Ray image with ragindex")
    p.add_argument("--ray-version", default=RenderOptions.ray_version)
    p.add_argument("--elasticsearch-version", default=RenderOptions.elasticsearch_version)
    p.add_argument("--storage-class", default=None, help="managed Kafka nodes' claims")
    p.add_argument(
        "--kuberay-namespace",
        default=None,
        help="namespace of KubeRay's operator (the one admitted to the Ray dashboard port);"
        " unset: its pods in any namespace",
    )
    p.add_argument(
        "--monitoring-namespace",
        default=RenderOptions.monitoring_namespace,
        help="namespace of the Prometheus admitted to the Ray pods' metrics port"
        f" ({METRICS_PORT}); empty: pods of any namespace",
    )
    p.add_argument(
        "--otlp-endpoint",
        default=None,
        help="OTLP/HTTP endpoint the Ray pods send traces to (e.g."
        " http://otel-collector.monitoring:4318); unset: no tracing",
    )
    p.add_argument(
        "--trace-sampling-ratio",
        type=float,
        default=RenderOptions.trace_sampling_ratio,
        help="share of requests traced that come without a sampled traceparent",
    )
    p.add_argument("--head-cpus", type=int, default=RenderOptions.head_cpus)
    p.add_argument("--head-memory", default=RenderOptions.head_memory)
    p.add_argument("--cpu-worker-cpus", type=int, default=RenderOptions.cpu_worker_cpus)
    p.add_argument("--cpu-worker-memory", default=RenderOptions.cpu_worker_memory)
    p.add_argument(
        "--ray-cpu-request",
        default=None,
        help="CPU request of every Ray pod (default: its CPU count); overcommits small nodes",
    )
    p.add_argument("--ray-dashboard", default="http://127.0.0.1:8265")
    p.add_argument("--serve-host", default="127.0.0.1")
    p.add_argument("--serve-port", type=int, default=8000)
    p.add_argument("--local-data-root", default=None)
    p.add_argument("--poll-interval", type=float, default=10.0, help="readiness poll, seconds")
    p.add_argument("--kubeconfig", default=None)
    p.add_argument("--liveness", default=None, help="e.g. http://0.0.0.0:8080/healthz")
    p.add_argument("--peering", default=None, help="kopf peering name (leader election)")
    p.add_argument(
        "--metrics-port",
        type=int,
        default=OPERATOR_METRICS_PORT,
        help="port of the operator's Prometheus metrics (/metrics); 0: not served",
    )
    p.add_argument("--metrics-host", default="0.0.0.0", help="address the metrics port binds")
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args(argv)
    render = RenderOptions(
        image=args.image,
        ray_version=args.ray_version,
        elasticsearch_version=args.elasticsearch_version,
        storage_class=args.storage_class,
        kuberay_namespace=args.kuberay_namespace,
        monitoring_namespace=args.monitoring_namespace or None,
        otlp_endpoint=args.otlp_endpoint or None,
        trace_sampling_ratio=args.trace_sampling_ratio,
        head_cpus=args.head_cpus,
        head_memory=args.head_memory,
        cpu_worker_cpus=args.cpu_worker_cpus,
        cpu_worker_memory=args.cpu_worker_memory,
        ray_cpu_request=args.ray_cpu_request,
    )
    extra = {"local_data_root": args.local_data_root} if args.local_data_root else {}
    options = OperatorOptions(
        runtime=args.runtime,
        render=render,
        ray_dashboard=args.ray_dashboard,
        serve_host=args.serve_host,
        serve_port=args.serve_port,
        poll_interval_s=args.poll_interval,
        kubeconfig=args.kubeconfig,
        **extra,
    )
    return options, args


def main(argv: Sequence[str] | None = None) -> int:
    options, args = parse_args(argv)
    if args.kubeconfig:
        os.environ["KUBECONFIG"] = args.kubeconfig  # kopf's own login reads it from here
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO)
    run(
        options,
        namespaces=args.namespace,
        clusterwide=args.all_namespaces,
        liveness_endpoint=args.liveness,
        peering=args.peering,
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
