"""One provision run's connections and facts: API clients, SSH to the nodes, node facts.

Planning gathers a container's facts through a session (waiting out locks when asked). Node
facts (:class:`NodeFacts`) are probed once and handed from the plan to the apply, so applying a
plan probes no node again; :meth:`PveSession.stale_reason` tells whether PVE still looks the way
the plan saw it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from dflashops.inventory.load import Inventory
from dflashops.inventory.models import Container
from dflashops.proxmox.client import PveClient
from dflashops.proxmox.containerplan import ContainerPlan, PlanInputs
from dflashops.proxmox.errors import ProvisionError
from dflashops.proxmox.facts import (
    ExistingCt,
    HostFacts,
    SiteFacts,
    probe_host,
    probe_site,
    read_existing,
)
from dflashops.proxmox.identity import Resource, concerns, list_resources, locate
from dflashops.proxmox.plan import plan_container
from dflashops.remote import SshConnection

Progress = Callable[[str], None]
NodeKey = tuple[str, str]  # (cluster, PVE node name)


@dataclass(frozen=True)
class ProvisionOptions:
    lock_wait_s: float = 300.0  # how long a locked container is waited for
    task_timeout_s: float = 600.0
    address_timeout_s: float = 120.0
    ssh_timeout_s: float = 120.0
    max_rounds: int = 6
    vmid_floor: int | None = None  # vmid: auto picks the lowest free vmid >= this one
    guest: bool = True  # run the steps inside the container


@dataclass
class NodeFacts:
    """What the nodes are like, per (cluster, node): probed once, shared by plan and apply."""

    host: dict[NodeKey, HostFacts] = field(default_factory=dict)
    site: dict[NodeKey, SiteFacts] = field(default_factory=dict)


class PveSession:
    """API clients and node connections shared by the containers of one plan or apply."""

    def __init__(
        self,
        inventory: Inventory,
        *,
        options: ProvisionOptions,
        progress: Progress | None = None,
        facts: NodeFacts | None = None,
    ) -> None:
        self.inventory = inventory
        self.options = options
        self.say: Progress = progress or (lambda _m: None)
        self.facts = facts if facts is not None else NodeFacts()
        self._clients: dict[str, PveClient] = {}
        self._nodes: dict[NodeKey, SshConnection] = {}

    def __enter__(self) -> PveSession:
        return self

    def __exit__(self, *exc: object) -> None:
        for conn in self._nodes.values():
            conn.close()

    # ------------------------------------------------------------------ connections

    def client(self, ct: Container) -> PveClient:
        if ct.cluster not in self._clients:
            self._clients[ct.cluster] = PveClient.for_cluster(self.inventory, ct.cluster)
        return self._clients[ct.cluster]

    def node_conn(self, ct: Container, node: str | None = None) -> SshConnection:
        """SSH to the PVE node holding the container (``pct``, config files, host facts)."""
        name = node or self.inventory.pve_node_name(ct)
        key = (ct.cluster, name)
        if key not in self._nodes:
            inv_node = self._inventory_node(ct, name)
            access = self.inventory.clusters[ct.cluster].nodes[inv_node].ssh
            if not access.host:
                raise ProvisionError(
                    f"node {inv_node} has no ssh.host; dflashops needs SSH to it for this plan"
                )
            self._nodes[key] = SshConnection.from_access(access, deadline=120.0, name=name)
        return self._nodes[key]

    def _inventory_node(self, ct: Container, pve_name: str) -> str:
        cluster = self.inventory.clusters[ct.cluster]
        for key, node in cluster.nodes.items():
            if (node.pve_name or key) == pve_name:
                return key
        raise ProvisionError(f"node {pve_name} is not in cluster {ct.cluster} of the inventory")

    # ------------------------------------------------------------------ facts

    def host_facts(self, ct: Container, node: str) -> HostFacts:
        key = (ct.cluster, node)
        if key not in self.facts.host:
            self.say(f"{ct.name}: probing node {node} (pveversion, cgroup, nvidia-smi, /dev)")
            self.facts.host[key] = probe_host(self.node_conn(ct, node), node)
        return self.facts.host[key]

    def site_facts(self, ct: Container, node: str, *, fresh: bool = False) -> SiteFacts:
        key = (ct.cluster, node)
        if fresh or key not in self.facts.site:
            storages = {c.template.partition(":")[0] for c in self.inventory.containers.values()}
            self.facts.site[key] = probe_site(self.client(ct), node, storages)
        return self.facts.site[key]

    def plan(self, ct: Container, *, wait_locks: bool) -> tuple[PlanInputs, ContainerPlan]:
        """Facts -> plan. With ``wait_locks``, a locked container is waited for first."""
        inputs = self.gather(ct, wait_locks=wait_locks)
        return inputs, plan_container(inputs)

    def gather(self, ct: Container, *, wait_locks: bool) -> PlanInputs:
        client = self.client(ct)
        resources = self.resources(ct, wait_locks=wait_locks)
        found, issues = locate(ct, resources)
        node = found.node if found is not None else self.inventory.pve_node_name(ct)
        existing: ExistingCt | None = None
        if found is not None and not issues:
            existing = read_existing(client, found.node, found.vmid)
        host = self.host_facts(ct, node) if ct.gpus and not issues else None
        return PlanInputs(
            container=ct,
            node=self.inventory.pve_node_name(ct),
            can_set_devices=client.can_set_devices,
            ssh_public_key=_public_key(ct),
            site=self.site_facts(ct, node),
            host=host,
            resources=tuple(resources),
            existing=existing,
        )

    def resources(self, ct: Container, *, wait_locks: bool) -> list[Resource]:
        """The cluster's containers; with ``wait_locks``, once none of ours is locked."""
        client = self.client(ct)
        end = time.monotonic() + self.options.lock_wait_s
        announced = False
        while True:
            resources = list_resources(client)
            locked = [r for r in resources if r.lock and concerns(ct, r)]
            if not wait_locks or not locked:
                return resources
            if time.monotonic() > end:
                r = locked[0]
                raise ProvisionError(
                    f"vmid {r.vmid} is still locked ({r.lock}) after "
                    f"{self.options.lock_wait_s:.0f}s",
                    hint="another operation holds the lock; if none runs, an operator may "
                    f"clear it with `pct unlock {r.vmid}`",
                )
            if not announced:
                r = locked[0]
                self.say(f"{ct.name}: vmid {r.vmid} is locked ({r.lock}); waiting")
                announced = True
            time.sleep(0.5)

    def stale_reason(self, inputs: PlanInputs) -> str | None:
        """Why a plan made from ``inputs`` may no longer fit PVE; None: apply it as it is.

        Cheap on purpose (the resource list, and the config digest of an existing container):
        a lock seen while planning, any change to the containers under our name or vmid, or a
        config edited since it was read.
        """
        ct = inputs.container
        then = {r for r in inputs.resources if concerns(ct, r)}
        locked = next((r for r in sorted(then, key=lambda r: r.vmid) if r.lock), None)
        if locked is not None:
            return f"vmid {locked.vmid} was locked ({locked.lock}) while planning"
        now = {r for r in list_resources(self.client(ct)) if concerns(ct, r)}
        changed = _resource_change(then, now)
        if changed is not None:
            return f"{changed} since planning"
        existing = inputs.existing
        if existing is not None:
            config = self.client(ct).ct_config(existing.node, existing.vmid)
            if config.get("digest") != existing.digest:
                return f"CT {existing.vmid} config changed since planning"
        return None


def _resource_change(then: Iterable[Resource], now: Iterable[Resource]) -> str | None:
    """The first difference between two views of the containers under our name or vmid."""
    before = {r.vmid: r for r in then}
    after = {r.vmid: r for r in now}
    for vmid in sorted(before.keys() | after.keys()):
        old, new = before.get(vmid), after.get(vmid)
        if old == new:
            continue
        if old is None:
            return f"vmid {vmid} appeared"
        if new is None:
            return f"vmid {vmid} is gone"
        if new.lock:
            return f"vmid {vmid} is locked ({new.lock})"
        if old.status != new.status:
            return f"vmid {vmid} went from {old.status} to {new.status}"
        return f"vmid {vmid} changed (name, node or tags)"
    return None


def _public_key(ct: Container) -> str | None:
    if ct.ssh.key_file is None:
        return None
    path = Path(f"{ct.ssh.key_file.expanduser()}.pub")
    try:
        return path.read_text().strip() + "\n"
    except OSError:
        return None
