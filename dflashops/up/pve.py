"""The PVE side every pair of one ``up`` run shares (:mod:`dflashops.proxmox.clusters`): one API
client and one listing per cluster, one provision session (node connections, node facts, vmids
handed out once) for every pair's provision step, and each pair's managed check made from the
run's listing instead of a login and a listing of its own.
"""

from __future__ import annotations

from dflashops.deployment.access import ContainerAccess, connect
from dflashops.deployment.managed import confirm_managed
from dflashops.errors import ProxmoxError
from dflashops.inventory.load import Inventory
from dflashops.proxmox.clusters import PveClusters
from dflashops.proxmox.session import ProvisionOptions, PveSession


class RunPve:
    """The run's clusters and provision session; :meth:`close` ends the session's SSH."""

    def __init__(self, inventory: Inventory) -> None:
        self.clusters = PveClusters(inventory)
        self.session = PveSession(inventory, options=ProvisionOptions(), clusters=self.clusters)

    def connect(
        self, inventory: Inventory, name: str, *, not_before: float | None = None
    ) -> ContainerAccess:
        """The pair's connection once PVE confirmed the container is ours, from the run's
        listing (one read at ``not_before`` or later: after this run's provision made it)."""
        if inventory.pve_check_skipped:
            return connect(inventory, name)
        cluster = inventory.container(name).cluster
        try:
            resources = self.clusters.resources(cluster, not_before=not_before)
        except ProxmoxError:  # the check asks again and says why its own way
            return connect(inventory, name)
        checked = confirm_managed(inventory, name, resources=resources)
        return connect(inventory, name, pve_confirmed=checked)

    def close(self) -> None:
        self.session.close()
