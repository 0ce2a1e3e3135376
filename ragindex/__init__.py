"""ragindex core: shared types, the config schema, ids and hashes, fusion and the Serve renderer.

Everything in this package is pure (no network, no clock, no global state),
so it can be imported by the operator image (no torch, no FAISS) and tested without servers.
Its modules
are imported by name; this package exports nothing itself, so `import ragindex` costs nothing:

- `types`, `errors`, `protocols`: shared value types, the errors that cross parts, and the
  interfaces the parts implement (`Log`, `LexicalIndex`, `Embedder`, ...);
- `config`: the RagIndex spec; `serve_config`: its Ray Serve config; `topics`, `records`: the
  log's topics and their keys and values; `generations`: index generations;
- `hashing`, `fusion`, `filters`, `feedback`, `passages`: chunk ids and shard assignment, RRF,
  ACLs and filters, Rocchio feedback, what is embedded for a chunk;
- `faces`: how each part's `__init__` offers its names without importing its modules.

The parts live beside it as `ragindex.<part>` (ingest, shards, lexical, models, log, router,
operator, app, measure, testing, netutil); the layers between them are the import-linter
contracts in pyproject.toml.
"""
