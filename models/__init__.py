"""ragindex.models"""
