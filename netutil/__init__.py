"""ragindex.netutil: loopback helpers for the throwaway servers that tests and benchmarks start
(Elasticsearch, Kafka, Ray Serve, kube-apiserver), and the files a client's credentials live in
(`credentials`: read here, since the core's connection settings do no I/O). The lowest layer above
the pure core, which must stay free of I/O; every part may use it."""

from ragindex.netutil.ports import free_port, port_open

__all__ = ["free_port", "port_open"]
