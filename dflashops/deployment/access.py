"""From a container's inventory name to a live SSH connection: the one path every command that
works inside a container takes (``launch``, ``stop``, ``logs``, ``bench``, ``drafter push``,
``status``, ``tune``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dflashops.deployment.managed import ManagedCheck, confirm_managed
from dflashops.errors import DflashopsError
from dflashops.inventory.load import Inventory
from dflashops.inventory.models import Container
from dflashops.remote import SshConnection


@dataclass(frozen=True)
class ContainerAccess:
    """A container of the inventory and an (unopened) SSH connection to it.

    Only containers the inventory names, and that PVE confirms dflashops manages, are reached
    this way: a typo or a reused address never lands a command in someone else's machine.
    """

    name: str
    container: Container
    address: str
    conn: SshConnection
    managed: ManagedCheck

    def __enter__(self) -> SshConnection:
        return self.conn.__enter__()

    def __exit__(self, *exc: object) -> None:
        self.conn.close()


def server_address(container: Container) -> str | None:
    """Where the container's server is reached from here: its static address, else its SSH host
    (the same machine, when the inventory gives only ``ssh.host``)."""
    return container.network.address or container.ssh_host


def connect(
    inventory: Inventory,
    name: str,
    *,
    host: str | None = None,
    pve_confirmed: ManagedCheck | None = None,
    **options: Any,
) -> ContainerAccess:
    """An SSH connection to container ``name`` (opened on first use), once PVE confirmed that
    the container is one dflashops manages (:func:`~dflashops.deployment.managed.confirm_managed`).

    ``host`` replaces the inventory's address (``status`` passes the one PVE reports for a DHCP
    container, with the check it already made as ``pve_confirmed``); an inventory loaded with
    the operator's ``--skip-pve-check`` is not checked; ``options`` are
    :class:`~dflashops.remote.SshConnection` keywords (deadlines, connect attempts).
    """
    container = inventory.container(name)
    managed = pve_confirmed or confirm_managed(inventory, name, skip=inventory.pve_check_skipped)
    address = host or container.ssh_host
    if not address:
        raise DflashopsError(
            f"container {name} has no static address and no ssh.host",
            hint="set network.ip or ssh.host in the inventory",
        )
    conn = SshConnection.from_access(container.ssh, host=address, name=name, **options)
    return ContainerAccess(name, container, address, conn, managed)
