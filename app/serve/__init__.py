"""The Ray Serve application: one module per deployment kind, the builder apart."""

from ragindex.app.serve.builder import build_app, parse_args

__all__ = ["build_app", "parse_args"]
