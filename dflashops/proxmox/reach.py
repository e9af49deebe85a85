"""Reaching a container once PVE runs it: its address, then a real SSH login.

The address is ``ssh.host`` when the inventory gives one, else what PVE reports for eth0
(``GET .../interfaces``, PVE >= 8.1), else the inventory's static address. The login uses the
container's SSH settings, host keys verified; the logged-in connection is the session's for the
rest of the command (:meth:`~dflashops.proxmox.session.PveSession.keep_container_conn`).
"""

from __future__ import annotations

import contextlib
import socket
import time

from dflashops.errors import RemoteError
from dflashops.inventory.models import Container
from dflashops.progress import Say, quiet
from dflashops.proxmox.errors import ProvisionError
from dflashops.proxmox.pveconfig import pve_supports_interfaces
from dflashops.proxmox.session import PveSession
from dflashops.remote import RemoteConnectError, SshConnection
from dflashops.remote.errors import HostKeyError


def container_address(
    session: PveSession,
    ct: Container,
    node: str,
    vmid: int,
    timeout_s: float,
    *,
    say: Say = quiet,
) -> str:
    """The address to SSH to: ``ssh.host``, else what PVE reports, else the static one."""
    if ct.ssh.host:
        return ct.ssh.host
    static = ct.network.address
    version = session.site_facts(ct, node).api_version
    if not pve_supports_interfaces(version):
        if static is None:
            raise ProvisionError(
                f"PVE {version} cannot report a DHCP address (needs 8.1)",
                hint="set ssh.host or a static network.ip",
            )
        return static
    client = session.client(ct)
    end = time.monotonic() + timeout_s
    while True:
        for iface in client.ct_interfaces(node, vmid):
            inet = str(iface.get("inet") or "")
            if iface.get("name") == "eth0" and inet:
                found = inet.split("/", 1)[0]
                if static is not None and found != static:
                    say(f"eth0 has {found}, the inventory says {static}")
                return found
        if time.monotonic() > end:
            if static is not None:
                return static
            raise ProvisionError(f"CT {vmid} reported no eth0 address in {timeout_s:.0f}s")
        time.sleep(0.5)


def connect(ct: Container, address: str, *, deadline: float, attempts: int = 3) -> SshConnection:
    """An SSH connection to the container (it opens on its first command)."""
    return SshConnection.from_access(
        ct.ssh,
        host=address,
        deadline=deadline,
        connect_timeout=min(10.0, deadline),
        connect_attempts=attempts,
        name=ct.name,
    )


def wait_for_login(
    session: PveSession, ct: Container, address: str, say: Say = quiet
) -> SshConnection:
    """Port open, then a real login (host key verified), within ``ssh_timeout_s``; the
    connection stays the session's (closed with it)."""
    kept = session.container_conn(ct, address)
    if kept is not None and kept.is_open:  # logged in while planning, untouched since
        return kept
    timeout_s = session.options.ssh_timeout_s
    end = time.monotonic() + timeout_s
    port = ct.ssh.port
    say(f"waiting for SSH on {address}:{port}")
    while not _port_open(address, port):
        if time.monotonic() > end:
            raise ProvisionError(f"{address}:{port} did not open in {timeout_s:.0f}s")
        time.sleep(0.5)
    while True:
        conn = connect(ct, address, deadline=max(end - time.monotonic(), 5.0), attempts=1)
        try:
            conn.run("true", deadline=30.0)
            session.keep_container_conn(ct, conn)
            return conn
        except HostKeyError:
            conn.close()
            raise
        except (RemoteConnectError, RemoteError) as exc:
            conn.close()
            if time.monotonic() > end:
                raise ProvisionError(f"cannot log in over SSH: {exc.one_line()}") from None
            time.sleep(1.0)


def _port_open(host: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1.0):
        return True
    return False
