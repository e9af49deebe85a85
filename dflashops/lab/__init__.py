"""The local lab: real SSH hosts in network namespaces, the PVE double, lab models."""
