"""ragindex core: shared types, the config schema, ids and hashes, fusion and the Serve renderer.

Everything in this package is pure (no network, no clock, no global state), so it can be
imported by the operator image (no torch, no FAISS) and tested without servers; the one
exception is `cli_output`, the `--json` convention every command line shares (the standard
library's file writes only), here so the standard-library token tool can share it too.
"""
