"""ragindex.app"""
