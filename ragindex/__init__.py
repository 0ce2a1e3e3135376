"""ragindex core: shared types, the config schema, ids and hashes, fusion and the Serve renderer.

Everything in this package is pure (no network, no clock, no global state), so it can be
imported by the operator image (no torch, no FAISS) and tested without servers.
"""
