"""ragindex.telemetry: the process's metrics (Prometheus), logs (JSON lines or text) and trace
hooks (OpenTelemetry, through Ray Serve's tracing), one way each, for every part.

- `instruments`, `setup_process`, `exposition`, `observe_http`, `observe_search`,
  `observe_view`, `observe_generation` (`metrics`): every metric ragindex exports, made once per
  process; in a Serve replica recorded into a per-node directory that one exposition reads for
  every process of the node, served on the Serve app's `/metrics` and, in the cluster, on each
  pod's metrics port; `remove_dead_node_dirs` clears what stopped nodes left there.
- `configure_logging`, `request_id_scope`, `current_request_id`, `JsonFormatter` (`logs`): one
  format (JSON lines with level, logger, replica, request id and trace id; or text for a
  terminal), chosen by the CLI's `--log-format`, else `RAGINDEX_LOG_FORMAT`.
- `tracing_environment`, `span_processors`, `annotate_search`, `stage_span` (`tracing`): when
  Serve traces, where spans go (OTLP, or a span file), what a search adds to its span, and a
  child span for each of its stages.

It sits in the core's folder but is not part of the pure core (which must not import it: an
import-linter contract says so); it is the lowest layer above it, beside `netutil`, so that
every part can record into it. The operator's image has none of its libraries: the names it
shares with the operator are in the pure `ragindex.telemetry_names`.
"""

from typing import TYPE_CHECKING

from ragindex.faces import lazy_face

if TYPE_CHECKING:
    from ragindex.telemetry.logs import (
        LOG_FORMATS,
        JsonFormatter,
        configure_logging,
        current_request_id,
        request_id_scope,
    )
    from ragindex.telemetry.metrics import (
        END_OFFSETS_EVERY_S,
        Instruments,
        exposition,
        instruments,
        observe_generation,
        observe_http,
        observe_search,
        observe_view,
        remove_dead_node_dirs,
        setup_process,
    )
    from ragindex.telemetry.tracing import (
        annotate_search,
        span_processors,
        stage_span,
        tracing_environment,
    )

__all__ = [
    "END_OFFSETS_EVERY_S",
    "LOG_FORMATS",
    "Instruments",
    "JsonFormatter",
    "annotate_search",
    "configure_logging",
    "current_request_id",
    "exposition",
    "instruments",
    "observe_generation",
    "observe_http",
    "observe_search",
    "observe_view",
    "remove_dead_node_dirs",
    "request_id_scope",
    "setup_process",
    "span_processors",
    "stage_span",
    "tracing_environment",
]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_face(
        __name__,
        {
            "logs": [
                "LOG_FORMATS",
                "JsonFormatter",
                "configure_logging",
                "current_request_id",
                "request_id_scope",
            ],
            "metrics": [
                "END_OFFSETS_EVERY_S",
                "Instruments",
                "exposition",
                "instruments",
                "observe_generation",
                "observe_http",
                "observe_search",
                "observe_view",
                "remove_dead_node_dirs",
                "setup_process",
            ],
            "tracing": ["annotate_search", "span_processors", "stage_span", "tracing_environment"],
        },
    )
