"""ragindex.evals"""
