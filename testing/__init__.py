"""ragindex.testing: contract suites every implementation of a protocol inherits in its tests.

- `DenseIndexContract` (with `LogFedDense`, `chunks_log`, `IDENTITY`), `LexicalIndexContract`
  (`random_corpus`), `LogContract` (`read_all`; `WrittenWhileRead`: a log a steady writer
  appends to), `EmbedderContract` (`TEXTS`, `RecordingEmbedder`: a real embedder that
  records what it embeds),
  `RerankerContract` (`QUERY`, `PASSAGES`).
- `PrometheusServer`, `start_prometheus`, `running_prometheus`, `promtool` (`prometheus`): a
  real Prometheus on loopback scraping given targets, and promtool, built from the Go module
  proxy by scripts/build_prometheus.sh.
- `OtelCollector`, `ExportedSpan`, `start_otelcol`, `running_otelcol`, `render_span_tree`
  (`otelcol`): a real OpenTelemetry Collector on loopback that writes the spans it receives
  over OTLP/HTTP to a file, built from the Go module proxy by scripts/build_otelcol.sh.
"""

from typing import TYPE_CHECKING

from ragindex.faces import lazy_face

if TYPE_CHECKING:
    from ragindex.testing.dense import IDENTITY, DenseIndexContract, LogFedDense, chunks_log
    from ragindex.testing.embedder import TEXTS, EmbedderContract, RecordingEmbedder
    from ragindex.testing.lexical import LexicalIndexContract, random_corpus
    from ragindex.testing.log import LogContract, WrittenWhileRead, read_all
    from ragindex.testing.otelcol import (
        ExportedSpan,
        OtelCollector,
        render_span_tree,
        running_otelcol,
        start_otelcol,
    )
    from ragindex.testing.prometheus import (
        PrometheusServer,
        promtool,
        running_prometheus,
        start_prometheus,
    )
    from ragindex.testing.reranker import PASSAGES, QUERY, RerankerContract

__all__ = [
    "IDENTITY",
    "PASSAGES",
    "QUERY",
    "TEXTS",
    "DenseIndexContract",
    "EmbedderContract",
    "ExportedSpan",
    "LexicalIndexContract",
    "LogContract",
    "LogFedDense",
    "OtelCollector",
    "PrometheusServer",
    "RecordingEmbedder",
    "RerankerContract",
    "WrittenWhileRead",
    "chunks_log",
    "promtool",
    "random_corpus",
    "read_all",
    "render_span_tree",
    "running_otelcol",
    "running_prometheus",
    "start_otelcol",
    "start_prometheus",
]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_face(
        __name__,
        {
            "dense": ["IDENTITY", "DenseIndexContract", "LogFedDense", "chunks_log"],
            "embedder": ["TEXTS", "EmbedderContract", "RecordingEmbedder"],
            "lexical": ["LexicalIndexContract", "random_corpus"],
            "log": ["LogContract", "WrittenWhileRead", "read_all"],
            "otelcol": [
                "ExportedSpan",
                "OtelCollector",
                "render_span_tree",
                "running_otelcol",
                "start_otelcol",
            ],
            "prometheus": [
                "PrometheusServer",
                "promtool",
                "running_prometheus",
                "start_prometheus",
            ],
            "reranker": ["PASSAGES", "QUERY", "RerankerContract"],
        },
    )
