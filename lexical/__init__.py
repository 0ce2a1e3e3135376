"""ragindex.lexical"""
