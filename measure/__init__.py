"""ragindex.measure: everything that measures ragindex, and nothing the runtime loads.

- `evals`: judged collections (Cranfield, BEIR), retrieval metrics, `ragindex eval`, the
  quality sweep and the answer evaluation;
- `gate`: the release gate (`ragindex gate`) and its baseline;
- `bench`: every benchmark (`ragindex bench ...`), the suite with its plots and docs page, the
  load generator;
- `servers`: throwaway Elasticsearch and Kafka servers on loopback for tests and benchmarks;
- `stats`: percentiles, goals and tables;
- `cli`: the subcommands above, registered with `ragindex` by entry point.

It ingests through the same embedded data plane `ragindex serve` runs (`ragindex.app`).
The runtime never imports it (import-linter contracts in pyproject.toml).
"""
