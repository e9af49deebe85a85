"""Inventory: where things run (PVE clusters, nodes, containers)."""
