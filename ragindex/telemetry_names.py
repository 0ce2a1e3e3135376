"""Names that ragindex's telemetry and the operator share (pure: the operator's image has no
telemetry libraries): the environment that picks the log format and the metrics port, and the
port itself (ragindex.telemetry)."""

from __future__ import annotations

# json, text or auto (text on a terminal); the operator sets json on cluster pods
LOG_FORMAT_ENV = "RAGINDEX_LOG_FORMAT"
# The port on which a pod serves the metrics of every ragindex process in it; the operator sets
# it on cluster pods, and names the container port METRICS_PORT_NAME (what a PodMonitor names).
METRICS_PORT_ENV = "RAGINDEX_METRICS_PORT"
METRICS_PORT = 9464
METRICS_PORT_NAME = "index-metrics"  # (KubeRay names Ray's own metrics-export port `metrics`)
# Where a node's processes keep their metrics (default: one directory per Ray node under /tmp)
METRICS_DIR_ENV = "RAGINDEX_METRICS_DIR"
# Traces (ragindex.telemetry.tracing): Ray Serve traces a process whose environment names an
# exporter function, which exports by OTLP to the standard OpenTelemetry endpoint variable.
OTLP_ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
SERVE_TRACING_EXPORTER_ENV = "RAY_SERVE_TRACING_EXPORTER_IMPORT_PATH"
SERVE_TRACING_SAMPLING_ENV = "RAY_SERVE_TRACING_SAMPLING_RATIO"
TRACING_EXPORTER = "ragindex.telemetry.tracing:span_processors"
# The operator's own series (ragindex.operator.metrics), served on its --metrics-port.
OPERATOR_METRICS_PORT = 8081  # kopf's liveness endpoint takes the chart's 8080
OPERATOR_METRICS_PORT_NAME = "metrics"
OPERATOR_RECONCILES_TOTAL = "ragindex_operator_reconciles_total"
OPERATOR_RECONCILE_SECONDS = "ragindex_operator_reconcile_duration_seconds"
OPERATOR_RAGINDEXES = "ragindex_operator_ragindexes"
OPERATOR_RAGINDEX_CONDITIONS = "ragindex_operator_ragindex_conditions"
OPERATOR_OBJECTS_APPLIED_TOTAL = "ragindex_operator_objects_applied_total"
OPERATOR_OBJECTS_PRUNED_TOTAL = "ragindex_operator_objects_pruned_total"
