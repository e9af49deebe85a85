"""Is the machine at the inventory's address a container dflashops manages? Asked of PVE before
any command works inside a container.

The inventory says where to SSH; only PVE can say what is there. Before ``launch``, ``stop``,
``restart``, ``logs``, ``drafter push``, ``bench``, ``tune`` or ``drafter train`` touch a
container, its vmid and hostname must agree with the inventory and it must carry the
``dflashops`` tag (the same rules ``provision`` and ``destroy`` apply). When PVE cannot be asked,
the command is refused unless the operator passes :data:`SKIP_FLAG`, which skips the check with a
warning.
"""

from __future__ import annotations

from dataclasses import dataclass

from dflashops.errors import DflashopsError, ProxmoxError, warn
from dflashops.inventory.load import Inventory
from dflashops.inventory.models import MANAGED_TAG, Container
from dflashops.proxmox.client import PveClient
from dflashops.proxmox.identity import Resource, list_resources, locate

#: the option every command that reaches a container offers to act without asking PVE
SKIP_FLAG = "--skip-pve-check"


class UnmanagedContainerError(DflashopsError):
    """PVE says the container is not one dflashops manages, or PVE could not be asked."""


@dataclass(frozen=True)
class ManagedCheck:
    """What PVE said: the container's vmid and node, or that the check was skipped."""

    container: str
    vmid: int | None
    node: str | None
    skipped: bool = False


def confirm_managed(
    inventory: Inventory,
    name: str,
    *,
    skip: bool = False,
    resources: list[Resource] | None = None,
) -> ManagedCheck:
    """Ask PVE whether ``name`` is a running-or-stopped container dflashops manages.

    Raises :class:`UnmanagedContainerError` naming what differs (no tag, another hostname at the
    vmid, no such container) or, when PVE cannot be reached or refuses the login, naming
    :data:`SKIP_FLAG`. With ``skip`` PVE is not asked and a warning says so. ``resources``: the
    cluster's listing when the caller read it already (a command over many containers reads
    it once, not once per container).
    """
    ct = inventory.container(name)
    if skip:
        warn(
            f"{SKIP_FLAG}: acting on {name} ({ct.ssh_host or 'no address'}) without asking PVE "
            f"whether it is a container dflashops manages (tag {MANAGED_TAG!r}, hostname, vmid)"
        )
        return ManagedCheck(name, None, None, skipped=True)
    if resources is not None:
        return _judge(ct, resources)
    try:
        resources = list_resources(PveClient.for_cluster(inventory, ct.cluster))
    except ProxmoxError as exc:
        raise UnmanagedContainerError(
            f"cannot confirm that {name} is a container dflashops manages: "
            f"cluster {ct.cluster}: {exc.one_line()}",
            hint=f"when PVE is down on purpose, pass {SKIP_FLAG} to act on "
            f"{ct.ssh_host or 'its address'} without this check",
        ) from None
    return _judge(ct, resources)


def _judge(ct: Container, resources: list[Resource]) -> ManagedCheck:
    found, refusals = locate(ct, resources)
    if refusals:
        raise UnmanagedContainerError(
            f"{ct.name}: refused, {refusals[0]}",
            hint="dflashops only works inside containers it provisioned; "
            "check the inventory's vmid and name",
        )
    if found is None:
        vmid = f" (vmid {ct.vmid})" if isinstance(ct.vmid, int) else ""
        raise UnmanagedContainerError(
            f"{ct.name}{vmid} does not exist in PVE cluster {ct.cluster}",
            hint=f"create it with `dflashops provision {ct.name}`",
        )
    return ManagedCheck(ct.name, found.vmid, found.node)
