"""Shared test fixtures and helpers (pytest plugins)."""
