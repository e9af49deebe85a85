"""A bridge and the netns hosts on it, started and torn down together (:class:`HostNetwork`).

Typical use (a pytest fixture, or the lab's PVE double creating a container)::

    with HostNetwork("dfotest0", "10.200.1.0/24", workdir) as net:
        h1 = net.start_host("dfotest-h1", mounts=[Mount.tmpfs("/srv")])
        h1.access()                      # SshAccess(host="10.200.1.10", ...)
        h1 = net.restart_host(h1)        # like a reboot
        net.stop_host(h1)
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from dflashops.lab.errors import LabError
from dflashops.lab.host_model import Mount, SshHost
from dflashops.lab.hosts import netns_unavailable_reason, restart_host, start_netns_host, stop_host
from dflashops.lab.netns import check_iface, ensure_bridge, remove_bridge


class HostNetwork:
    """A bridge and the netns hosts on it; :meth:`down` removes everything it started.

    Addresses are handed out from ``first_host`` (the host part) upwards unless given.
    """

    def __init__(self, bridge: str, cidr: str, workdir: Path, *, first_host: int = 10) -> None:
        check_iface(bridge)
        self.bridge = bridge
        self.network = ipaddress.ip_network(cidr)
        self.workdir = workdir
        self.first_host = first_host
        self.gateway: str | None = None
        self.hosts: dict[str, SshHost] = {}

    def up(self) -> HostNetwork:
        """Create the bridge (replacing a stale one with the same name)."""
        reason = netns_unavailable_reason()
        if reason:
            raise LabError(f"cannot start netns hosts: {reason}")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.gateway = ensure_bridge(self.bridge, str(self.network))
        return self

    def start_host(
        self,
        name: str,
        *,
        address: str | None = None,
        mounts: Sequence[Mount] = (Mount("/srv"),),
        hostname: str | None = None,
        client_key: Path | None = None,
    ) -> SshHost:
        """Start a netns host on this network (``address`` without prefix, or the next free)."""
        if self.gateway is None:
            raise LabError(f"network {self.bridge} is not up")
        ip = address or self._next_address()
        host = start_netns_host(
            name,
            bridge=self.bridge,
            address=f"{ip}/{self.network.prefixlen}",
            workdir=self.workdir,
            mounts=mounts,
            hostname=hostname,
            client_key=client_key,
        )
        self.hosts[name] = host
        return host

    def restart_host(self, host: SshHost) -> SshHost:
        """:func:`restart_host`, keeping track of the new pid."""
        self.hosts[host.name] = restarted = restart_host(host)
        return restarted

    def stop_host(self, host: SshHost) -> None:
        """Stop and remove one host (idempotent)."""
        stop_host(self.hosts.pop(host.name, host))

    def down(self) -> None:
        """Stop every host started here and delete the bridge (idempotent).

        One host that fails to stop does not keep the others (or the bridge) alive.
        """
        failures: list[str] = []
        for host in list(self.hosts.values()):
            try:
                stop_host(host)
            except LabError as exc:
                failures.append(exc.message)
            self.hosts.pop(host.name, None)
        remove_bridge(self.bridge)
        self.gateway = None
        if failures:
            raise LabError("teardown incomplete: " + "; ".join(failures))

    def _next_address(self) -> str:
        used = {host.address for host in self.hosts.values()} | {self.gateway}
        for index, ip in enumerate(self.network.hosts(), start=1):
            if index >= self.first_host and str(ip) not in used:
                return str(ip)
        raise LabError(f"no free address left in {self.network}")

    def __enter__(self) -> HostNetwork:
        return self.up()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.down()
