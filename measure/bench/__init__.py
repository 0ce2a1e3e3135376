"""ragindex.measure.bench: the benchmarks (`ragindex bench ...`), the suite, its plots and its
docs page, the load generator."""
