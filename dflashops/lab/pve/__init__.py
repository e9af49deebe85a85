"""A local Proxmox VE API double that proxmoxer talks to over real, verified HTTPS.

Every request is checked against the official PVE 9.1 API schema (shipped in ``schema/``);
containers are PVE-format config files under ``<etc_pve>/nodes/<node>/lxc/``; create, start, stop
and destroy run as tasks with real UPIDs; a :class:`ContainerBackend` can turn a started container
into a real host. Start one with :func:`serve_double` (tests) or ``python -m dflashops.lab.pve``.
"""

from __future__ import annotations

from dflashops.lab.pve.double import Credentials, PveDouble, default_settings, serve_double
from dflashops.lab.pve.state import Appliance, ContainerBackend, DoubleSettings

__all__ = [
    "Appliance",
    "ContainerBackend",
    "Credentials",
    "DoubleSettings",
    "PveDouble",
    "default_settings",
    "serve_double",
]
