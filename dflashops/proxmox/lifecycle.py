"""``status`` and ``destroy`` for managed containers.

Both find a container the way ``provision`` does (:func:`dflashops.proxmox.identity.locate`): by
name, with the ``dflashops`` tag, at the inventory's vmid when it names one. ``destroy`` never
touches anything else.

``status`` reports here the container part (PVE state, vmid, node, address, tags) and which
rows make it fail (:func:`container_problems`); :mod:`dflashops.status` adds the server part
that ``launch`` reads in each running container.

Both read PVE once per cluster (one login, one listing: :class:`~dflashops.proxmox.clusters.
PveClusters`) and then work on every container at once, up to ``parallel``
(:mod:`dflashops.proxmox.fleet`), answering in inventory order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Literal

from pydantic import BaseModel, ConfigDict

from dflashops.errors import DflashopsError, ProxmoxError
from dflashops.inventory.load import Inventory
from dflashops.inventory.models import MANAGED_TAG, Container
from dflashops.proxmox.client import PveClient, is_not_found
from dflashops.proxmox.clusters import PveClusters
from dflashops.proxmox.errors import ProvisionError
from dflashops.proxmox.fleet import Tell, as_tell, run_each, teller
from dflashops.proxmox.identity import locate, split_tags
from dflashops.proxmox.pveconfig import pve_supports_interfaces

Progress = Callable[[str], None]


class ContainerStatus(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    cluster: str
    node: str
    vmid: int | None = None
    state: str = "absent"  # running | stopped | absent | refused | error
    address: str | None = None
    tags: list[str] = []
    lock: str | None = None
    uptime_s: int | None = None
    note: str | None = None


def container_status(
    inventory: Inventory, names: Iterable[str] = (), *, parallel: int | None = None
) -> list[ContainerStatus]:
    """One status per named container (all when none is named), in inventory order."""
    clusters = PveClusters(inventory)
    return run_each(
        inventory.select(names),
        lambda ct: one_status(clusters, ct),
        parallel=parallel or inventory.parallel,
    )


def one_status(clusters: PveClusters, ct: Container) -> ContainerStatus:
    """``ct`` as PVE sees it, from the command's listing (never raises: a row says why not)."""
    inventory = clusters.inventory
    entry = ContainerStatus(name=ct.name, cluster=ct.cluster, node=inventory.pve_node_name(ct))
    try:
        _fill(ct, clusters, entry)
    except DflashopsError as exc:
        entry.state, entry.note = "error", exc.one_line()
    return entry


def container_problems(entries: list[ContainerStatus]) -> tuple[list[str], str | None]:
    """The rows that make ``status`` fail, one line each, and the hint: a row that could not be
    read (PVE unreachable) is no status, and a refused one (the vmid holds a container
    dflashops does not manage) blocks every command on that name."""
    failed = [e for e in entries if e.state == "error"]
    refused = [e for e in entries if e.state == "refused"]
    problems, hint = [], None
    if failed:
        problems.append(
            f"status of {len(failed)} of {len(entries)} container(s) could not be read: "
            + _grouped(failed)
        )
    if refused:
        problems.append(
            f"{len(refused)} of {len(entries)} container(s) refused as not managed by dflashops: "
            + "; ".join(f"{e.name}: {e.note}" for e in refused)
        )
        hint = "fix the inventory's vmid, or the container's tag and hostname, then rerun"
    return problems, hint


def _grouped(entries: list[ContainerStatus]) -> str:
    """``a, b: why; c: why else``: containers that failed for one reason (a cluster that is
    down fails every container of it) named together, in order, the reason said once."""
    names: dict[str, list[str]] = {}
    for entry in entries:
        names.setdefault(entry.note or "?", []).append(entry.name)
    return "; ".join(f"{', '.join(who)}: {why}" for why, who in names.items())


def _fill(ct: Container, clusters: PveClusters, entry: ContainerStatus) -> None:
    found, issues = locate(ct, clusters.resources(ct.cluster))
    if issues:
        entry.state, entry.note = "refused", "; ".join(issues)
        return
    if found is None:
        return
    entry.vmid, entry.node = found.vmid, found.node
    entry.tags, entry.lock = list(found.tags), found.lock
    entry.state = found.status  # the listing has each container's state and uptime
    if entry.state == "running":
        entry.uptime_s = found.uptime
        entry.address = _address(ct, clusters.client(ct.cluster), found.node, found.vmid)
    else:
        entry.address = ct.ssh.host or ct.network.address


def _address(ct: Container, client: PveClient, node: str, vmid: int) -> str | None:
    if pve_supports_interfaces(client.version()):
        try:
            for iface in client.ct_interfaces(node, vmid):
                if iface.get("name") == "eth0" and iface.get("inet"):
                    return str(iface["inet"]).split("/", 1)[0]
        except ProxmoxError:
            pass
    return ct.ssh.host or ct.network.address


# --------------------------------------------------------------------------- destroy


class DestroyResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    node: str
    vmid: int | None = None
    outcome: Literal["destroy", "destroyed", "absent", "refused", "failed"]
    note: str | None = None

    def line(self) -> str:
        """``NAME (vmid N) on NODE: OUTCOME: NOTE``."""
        vmid = f" (vmid {self.vmid})" if self.vmid is not None else ""
        note = f": {self.note}" if self.note else ""
        return f"{self.name}{vmid} on {self.node}: {self.outcome}{note}"


def destroy_targets(
    inventory: Inventory, names: Iterable[str], clusters: PveClusters | None = None
) -> list[DestroyResult]:
    """What ``destroy`` would do: each container found (``destroy``), absent, or refused."""
    clusters = clusters or PveClusters(inventory)
    result = []
    for ct in inventory.select(names):
        found, issues = locate(ct, clusters.resources(ct.cluster))
        node = inventory.pve_node_name(ct)
        if issues:
            result.append(
                DestroyResult(
                    name=ct.name, node=node, vmid=None, outcome="refused", note="; ".join(issues)
                )
            )
        elif found is None:
            result.append(DestroyResult(name=ct.name, node=node, outcome="absent"))
        else:
            result.append(
                DestroyResult(
                    name=ct.name,
                    node=found.node,
                    vmid=found.vmid,
                    outcome="destroy",
                    note=f"{found.status}" + (f", lock {found.lock}" if found.lock else ""),
                )
            )
    return result


def destroy(
    inventory: Inventory,
    names: Iterable[str],
    *,
    progress: Progress | None = None,
    confirm: Callable[[list[DestroyResult]], bool] | None = None,
    lock_wait_s: float = 300.0,
    task_timeout_s: float = 600.0,
    parallel: int | None = None,
    tell: Tell | None = None,
) -> list[DestroyResult]:
    """Stop and delete (``purge=1``) each named managed container, every one at once (up to
    ``parallel``); refused ones stay. Results in the order named."""
    lanes = as_tell(tell, progress)
    names = list(names)
    if not names:
        raise ProvisionError("name the containers to destroy")
    clusters = PveClusters(inventory)
    targets = destroy_targets(inventory, names, clusters)
    doomed = [t for t in targets if t.outcome == "destroy"]
    if doomed and confirm is not None and not confirm(targets):
        raise ProvisionError("nothing destroyed: not confirmed")

    def one(target: DestroyResult) -> None:
        if target.outcome == "destroy" and target.vmid is not None:
            ct = inventory.container(target.name)
            try:
                client = clusters.client(ct.cluster)
                _recheck(client, ct, target.node, target.vmid)
                _destroy_one(
                    client,
                    target.node,
                    vmid=target.vmid,
                    say=teller(lanes, target.name),
                    lock_wait_s=lock_wait_s,
                    task_timeout_s=task_timeout_s,
                )
                target.outcome, target.note = "destroyed", None
            except DflashopsError as exc:
                target.outcome, target.note = "failed", exc.one_line()
            except Exception as exc:  # a bug or a library's error: this container fails only
                target.outcome, target.note = "failed", f"{type(exc).__name__}: {exc}"
        lanes.done(target.name, target.line())

    run_each(targets, one, parallel=parallel or inventory.parallel)
    return targets


def _recheck(client: PveClient, ct: Container, node: str, vmid: int) -> None:
    """Right before deleting: the vmid still holds our name and tag (it may have changed)."""
    config = client.ct_config(node, vmid)
    name = str(config.get("hostname", ""))
    if name != ct.name or MANAGED_TAG not in split_tags(config.get("tags")):
        raise ProvisionError(
            f"vmid {vmid} is now {name!r} with tags {config.get('tags')!r}: not destroyed"
        )


def _destroy_one(
    client: PveClient,
    node: str,
    *,
    vmid: int,
    say: Progress,
    lock_wait_s: float,
    task_timeout_s: float,
) -> None:
    status = client.ct_status(node, vmid).get("status")
    if status == "running":
        say(f"stopping CT {vmid}")
        try:
            client.run_task(
                f"CT {vmid}: stop",
                lambda: str(client.post(client.ct_path(node, vmid, "status", "stop"))),
                timeout_s=task_timeout_s,
                lock_wait_s=lock_wait_s,
            )
        except ProxmoxError as exc:
            if "not running" not in exc.message:
                raise
    say(f"destroying CT {vmid}")
    try:
        client.run_task(
            f"CT {vmid}: destroy",
            lambda: str(client.delete(client.ct_path(node, vmid), purge=1)),
            timeout_s=task_timeout_s,
            lock_wait_s=lock_wait_s,
        )
    except ProxmoxError as exc:
        if not is_not_found(exc):  # gone meanwhile (another destroy): that is the goal
            raise
