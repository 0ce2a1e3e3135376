"""ragindex.measure.evals: judged collections, retrieval metrics, `ragindex eval`, the quality sweep
and the answer evaluation."""
