"""Rendering results for people: rich tables, comparisons and PNG plots."""
