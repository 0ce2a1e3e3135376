"""The Ray Serve application: `build_app` (the import path KubeRay and `ragindex serve` deploy,
`ragindex.app.serve:build_app`) and `parse_args` (its arguments), from the builder.

One module per deployment kind: `router_deployment` (Router: the HTTP ingress and query path),
`ingest_deployment` (Ingest), `shard_deployment` (Shard<i>), `lexical_deployment` (Lexical),
`pools` (the QueryEmbedder and Reranker model pools); beside them what they share:
`query_side` (the Router's search over its views or over handles), `handle_failover` (handle
calls that fail over), `data_plane`, `topic_view`, `progress`, `generation_report`, `threads`.
"""

from ragindex.app.serve.builder import build_app, parse_args

__all__ = ["build_app", "parse_args"]
