"""ragindex.operator"""
