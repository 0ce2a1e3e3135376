"""ragindex.shards"""
