"""ragindex.testing: contract suites every implementation of a protocol inherits in its tests."""
