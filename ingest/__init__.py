"""ragindex.ingest"""
