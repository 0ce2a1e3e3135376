"""ragindex.measure.servers: throwaway Elasticsearch and Kafka servers on loopback for tests and
benchmarks (`running_elasticsearch`, `running_kafka`)."""
