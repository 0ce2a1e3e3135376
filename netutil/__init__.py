"""ragindex.netutil: loopback helpers for the throwaway servers that tests and benchmarks start
(Elasticsearch, Kafka, Ray Serve, kube-apiserver). The lowest layer above the pure core, which
must stay free of I/O; every part may use it."""

from ragindex.netutil.ports import free_port, port_open

__all__ = ["free_port", "port_open"]
