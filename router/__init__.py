"""ragindex.router"""
