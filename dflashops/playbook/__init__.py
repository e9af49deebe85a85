"""Playbooks: what runs (model, drafter, engine, server args, bench and tune settings)."""
