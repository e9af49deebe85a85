"""One command's PVE side, shared by every container of its plan and apply, from many threads.

The API is :class:`~dflashops.proxmox.clusters.PveClusters` (one client and one listing per
cluster). Each node is one SSH connection (``pct``, config files, host facts) that one thread
uses at a time (:meth:`PveSession.on_node`). Node facts (:class:`NodeFacts`) are probed once per
node, by the first container that needs them, and handed from the plan to the apply, so
applying a plan probes no node again. A container's SSH connection made while planning is kept
for its apply (:meth:`PveSession.keep_container_conn`). :meth:`PveSession.stale_reason` tells
whether PVE still looks the way the plan saw it, from one listing read when the apply started.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from dflashops.inventory.load import Inventory
from dflashops.inventory.models import Container
from dflashops.progress import Say, quiet
from dflashops.proxmox.client import PveClient
from dflashops.proxmox.clusters import PveClusters
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
from dflashops.proxmox.identity import Resource, concerns, locate
from dflashops.proxmox.plan import plan_container
from dflashops.remote import SshConnection

Progress = Say
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
    """API clusters, node connections, node facts and container connections of one command."""

    def __init__(
        self,
        inventory: Inventory,
        *,
        options: ProvisionOptions,
        progress: Progress | None = None,
        facts: NodeFacts | None = None,
        clusters: PveClusters | None = None,
    ) -> None:
        self.inventory = inventory
        self.options = options
        self.say: Progress = progress or quiet  # the command's own words (a node probed)
        self.facts = facts if facts is not None else NodeFacts()
        self.clusters = clusters or PveClusters(inventory)
        self.apply_started: float | None = None  # stale_reason compares with PVE from then on
        self._lock = threading.Lock()
        self._keyed: dict[object, threading.Lock] = {}
        self._nodes: dict[NodeKey, SshConnection] = {}
        self._containers: dict[str, SshConnection] = {}

    def __enter__(self) -> PveSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close every SSH connection (they reopen if the session is used again)."""
        with self._lock:
            conns = [*self._nodes.values(), *self._containers.values()]
            self._nodes.clear()
            self._containers.clear()
        for conn in conns:
            conn.close()

    def one_at_a_time(self, key: object) -> threading.Lock:
        """This command's lock for ``key``: what one container at a time may do (probe a node,
        download a template to it)."""
        with self._lock:
            return self._keyed.setdefault(key, threading.Lock())

    # ------------------------------------------------------------------ connections

    def client(self, ct: Container) -> PveClient:
        return self.clusters.client(ct.cluster)

    @contextmanager
    def on_node(self, ct: Container, node: str | None = None) -> Iterator[SshConnection]:
        """SSH to the PVE node holding the container (``pct``, config files, host facts), for
        this thread alone while the block runs: one connection serves one thread at a time."""
        name = node or self.inventory.pve_node_name(ct)
        key = (ct.cluster, name)
        with self.one_at_a_time(("node", key)):
            conn = self._nodes.get(key)
            if conn is None:
                inv_node = self._inventory_node(ct, name)
                access = self.inventory.clusters[ct.cluster].nodes[inv_node].ssh
                if not access.host:
                    raise ProvisionError(
                        f"node {inv_node} has no ssh.host; dflashops needs SSH to it for this plan"
                    )
                conn = SshConnection.from_access(access, deadline=120.0, name=name)
                with self._lock:
                    self._nodes[key] = conn
            yield conn

    def _inventory_node(self, ct: Container, pve_name: str) -> str:
        cluster = self.inventory.clusters[ct.cluster]
        for key, node in cluster.nodes.items():
            if (node.pve_name or key) == pve_name:
                return key
        raise ProvisionError(f"node {pve_name} is not in cluster {ct.cluster} of the inventory")

    def keep_container_conn(self, ct: Container, conn: SshConnection) -> None:
        """Keep ``ct``'s logged-in connection for the rest of the command (closed with it)."""
        with self._lock:
            old = self._containers.pop(ct.name, None)
            self._containers[ct.name] = conn
        if old is not None and old is not conn:
            old.close()

    def container_conn(self, ct: Container, address: str) -> SshConnection | None:
        """The connection kept for ``ct`` at ``address`` (None: none kept)."""
        with self._lock:
            conn = self._containers.get(ct.name)
        return conn if conn is not None and conn.host == address else None

    def drop_container_conn(self, ct: Container) -> None:
        """Close and forget ``ct``'s kept connection (the container restarted, or it failed)."""
        with self._lock:
            conn = self._containers.pop(ct.name, None)
        if conn is not None:
            conn.close()

    # ------------------------------------------------------------------ facts

    def host_facts(self, ct: Container, node: str) -> HostFacts:
        key = (ct.cluster, node)
        with self.one_at_a_time(("host", key)):  # the first container probes, the others wait
            if key not in self.facts.host:
                self.say(f"probing node {node} (pveversion, cgroup, nvidia-smi, /dev)")
                with self.on_node(ct, node) as conn:
                    self.facts.host[key] = probe_host(conn, node)
            return self.facts.host[key]

    def site_facts(self, ct: Container, node: str, *, fresh: bool = False) -> SiteFacts:
        key = (ct.cluster, node)
        with self.one_at_a_time(("site", key)):
            if fresh or key not in self.facts.site:
                cts = self.inventory.containers.values()
                storages = {c.template.partition(":")[0] for c in cts}
                self.facts.site[key] = probe_site(self.client(ct), node, storages)
            return self.facts.site[key]

    def plan(
        self, ct: Container, *, wait_locks: bool, say: Say = quiet
    ) -> tuple[PlanInputs, ContainerPlan]:
        """Facts -> plan. With ``wait_locks`` (planning again while applying), from a listing
        read now, a locked container waited for first; else from the command's listing."""
        inputs = self.gather(ct, wait_locks=wait_locks, say=say)
        return inputs, plan_container(inputs)

    def gather(self, ct: Container, *, wait_locks: bool, say: Say = quiet) -> PlanInputs:
        client = self.client(ct)
        resources = self.resources(ct, wait_locks=wait_locks, say=say)
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

    def resources(self, ct: Container, *, wait_locks: bool, say: Say = quiet) -> list[Resource]:
        """The cluster's containers: the command's listing, or (``wait_locks``) one read now,
        again until none of ours is locked."""
        clusters = self.clusters
        if not wait_locks:
            return clusters.resources(ct.cluster)
        end = time.monotonic() + self.options.lock_wait_s
        announced = False
        while True:
            resources = clusters.resources(ct.cluster, not_before=clusters.now())
            locked = [r for r in resources if r.lock and concerns(ct, r)]
            if not locked:
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
                say(f"vmid {r.vmid} is locked ({r.lock}); waiting")
                announced = True
            time.sleep(0.5)

    def begin_apply(self) -> None:
        """From now on :meth:`stale_reason` compares with PVE as it is from this moment."""
        self.apply_started = self.clusters.now()

    def stale_reason(self, inputs: PlanInputs) -> str | None:
        """Why a plan made from ``inputs`` may no longer fit PVE; None: apply it as it is.

        Cheap on purpose (the listing read once when the apply started, and the config digest of
        an existing container): a lock seen while planning, any change to the containers under
        our name or vmid, or a config edited since it was read.
        """
        ct = inputs.container
        then = {r for r in inputs.resources if concerns(ct, r)}
        locked = next((r for r in sorted(then, key=lambda r: r.vmid) if r.lock), None)
        if locked is not None:
            return f"vmid {locked.vmid} was locked ({locked.lock}) while planning"
        since = self.apply_started if self.apply_started is not None else self.clusters.now()
        listing = self.clusters.resources(ct.cluster, not_before=since)
        now = {r for r in listing if concerns(ct, r)}
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
