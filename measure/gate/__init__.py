"""ragindex.measure.gate: the release gate, `ragindex gate`, against `baseline.json`."""
