"""A :class:`~dflashops.lab.pve.state.ContainerBackend` that makes started containers real hosts.

A started container is a netns host (:mod:`dflashops.lab.hosts`) on the lab bridge: its own
address (the static ``ip`` of ``net0`` when it lies in the lab network, else the next free one from
``.10``), its own hostname, and sshd on port 22 that lets root in with the keys the create call
passed as ``ssh-public-keys`` (nothing else: without keys nobody gets in, as on PVE).

Its filesystem is private where dflashops writes: ``/etc``, ``/opt`` and ``/var`` are
copy-on-write overlays of this machine's, ``/root`` and ``/srv`` are empty private directories,
``/dev/shm`` a private tmpfs (mode 1777, emptied on stop), plus any ``extra_mounts`` (e.g. the
lab's vLLM venv read-only). Their contents live in ``<workdir>/ct<vmid>/`` and survive
stop/start like a container's disk; destroy deletes them.

sshd reads its config and ``authorized_keys`` from ``<workdir>/<host>/`` (an absolute
``AuthorizedKeysFile``), never from ``/root/.ssh`` or ``/etc/ssh``, so the private ``/root`` and
``/etc`` do not lock root out; ``workdir`` itself must not lie under any of those mount targets.
"""

from __future__ import annotations

import ipaddress
import json
import shutil
import subprocess
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dflashops.lab import hosts, netns
from dflashops.lab.errors import LabError
from dflashops.lab.host_model import Mount, SshHost
from dflashops.lab.pve.ctcommon import interface_entry

LAB_BRIDGE = "dfolab0"
LAB_NETWORK = "10.200.0.0/24"
FIRST_CONTAINER_HOST = 10  # .1 is the bridge, .2 the PVE node host
OVERLAID = ("/etc", "/opt", "/var")
PRIVATE = ("/root", "/srv")
# every LXC container has its own /dev/shm. Sharing this machine's would make two lab containers
# one node to vLLM: its same-node test (rank 0 writes a shared-memory segment, the others try to
# open it) would succeed across them, and the "local" ranks then wait forever on an IPC socket
# in the other container's private TMPDIR. Emptied on stop, as a container's is.
SHM = Mount.tmpfs("/dev/shm", mode="1777")


DEFAULT_HOST_PREFIX = "dfo-ct"
MAX_HOST_NAME = 13  # hosts.py derives veth names from it, and Linux allows 15 characters


def host_name(vmid: int, prefix: str = DEFAULT_HOST_PREFIX) -> str:
    """The netns/veth name of container ``vmid``: ``<prefix><vmid>``, or hex for long vmids.

    Each lab has its own prefix, so two labs (the default and a test's) never share a name.
    """
    name = f"{prefix}{vmid}"
    if len(name) > MAX_HOST_NAME:
        name = f"{prefix.removesuffix('ct')}{vmid:x}"
    if len(name) > MAX_HOST_NAME:
        raise LabError(f"CT {vmid}: no netns name of at most {MAX_HOST_NAME} characters")
    return name


class NetnsContainers:
    """Runs each started container as a netns host with private directories."""

    def __init__(
        self,
        workdir: Path,
        *,
        bridge: str = LAB_BRIDGE,
        network: str = LAB_NETWORK,
        own_bridge: bool = False,
        extra_mounts: Sequence[Mount] = (),
        host_prefix: str = DEFAULT_HOST_PREFIX,
    ) -> None:
        self.workdir = workdir.resolve()
        self.host_prefix = host_prefix
        self.bridge = bridge
        self.network = ipaddress.ip_network(network)
        self.own_bridge = own_bridge
        self.extra_mounts = tuple(extra_mounts)
        self._hosts: dict[int, SshHost] = {}
        self._starting: set[str] = set()  # addresses of hosts being started
        self._lock = threading.Lock()
        extra = (SHM.target, *(m.target for m in self.extra_mounts))
        for target in (*OVERLAID, *PRIVATE, *extra):
            if self.workdir.is_relative_to(target):
                raise LabError(f"container workdir {self.workdir} lies under {target}")

    def up(self) -> NetnsContainers:
        reason = hosts.netns_unavailable_reason()
        if reason:
            raise LabError(f"cannot run lab containers: {reason}")
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.own_bridge:
            netns.ensure_bridge(self.bridge, str(self.network))
        return self

    def down(self) -> None:
        """Stop every container host (files stay) and drop the bridge if this made it."""
        with self._lock:
            running = list(self._hosts.values())
            self._hosts.clear()
        for host in running:
            hosts.stop_host(host)
        if self.own_bridge:
            netns.remove_bridge(self.bridge)

    def __enter__(self) -> NetnsContainers:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()

    def container_dir(self, vmid: int) -> Path:
        return self.workdir / f"ct{vmid}"

    def host_name(self, vmid: int) -> str:
        return host_name(vmid, self.host_prefix)

    def host(self, vmid: int) -> SshHost | None:
        with self._lock:
            return self._hosts.get(vmid)

    # ContainerBackend -------------------------------------------------------------------------

    def on_create(self, vmid: int, ssh_public_keys: str | None) -> None:
        folder = self.container_dir(vmid)
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        keys = "".join(f"{line.strip()}\n" for line in (ssh_public_keys or "").splitlines())
        Path(f"{self._key_stem(vmid)}.pub").write_text(keys)

    def on_start(self, vmid: int, config: Mapping[str, str]) -> str | None:
        folder = self.container_dir(vmid)
        if not folder.is_dir():
            raise LabError(f"CT {vmid} has no lab files in {folder} (created by another double?)")
        with self._lock:  # containers start at once: an address is taken before its host runs
            taken = {host.address for host in self._hosts.values()} | self._starting
            address = self._address(config, taken)
            self._starting.add(address)
        try:
            host = self._start_host(vmid, folder, address, config)
            with self._lock:
                self._hosts[vmid] = host
        finally:
            with self._lock:
                self._starting.discard(address)
        return host.address

    def _start_host(
        self, vmid: int, folder: Path, address: str, config: Mapping[str, str]
    ) -> SshHost:
        mounts = [Mount.overlay(target, upper=folder / target.strip("/")) for target in OVERLAID]
        for target in PRIVATE:
            (folder / target.strip("/")).mkdir(exist_ok=True)
            mounts.append(Mount.bind(folder / target.strip("/"), target, read_only=False))
        mounts.append(SHM)
        host = hosts.start_netns_host(
            self.host_name(vmid),
            bridge=self.bridge,
            address=f"{address}/{self.network.prefixlen}",
            workdir=self.workdir / "hosts",
            mounts=[*mounts, *self.extra_mounts],
            hostname=config.get("hostname", f"CT{vmid}"),
            client_key=self._key_stem(vmid),
        )
        self._set_mac(host, config)
        return host

    def on_stop(self, vmid: int) -> None:
        with self._lock:
            host = self._hosts.pop(vmid, None)
        if host is not None:
            hosts.stop_host(host)
        else:
            hosts.remove_netns_host(self.host_name(vmid))  # a leftover of an earlier run

    def is_running(self, vmid: int) -> bool:
        host = self.host(vmid)
        return host is not None and hosts.host_alive(host)

    def on_destroy(self, vmid: int) -> None:
        self.on_stop(vmid)
        shutil.rmtree(self.container_dir(vmid), ignore_errors=True)
        shutil.rmtree(self.workdir / "hosts" / self.host_name(vmid), ignore_errors=True)

    def interfaces(self, vmid: int) -> list[dict[str, Any]]:
        host = self.host(vmid)
        if host is None or host.netns is None:
            return []
        shown = hosts.host_exec(host, ["ip", "-j", "addr", "show"])
        result = []
        for link in json.loads(shown.stdout or b"[]"):
            addresses = [
                f"{info['local']}/{info['prefixlen']}"
                for info in link.get("addr_info", [])
                if info.get("family") in ("inet", "inet6")
            ]
            mac = link.get("address") or "00:00:00:00:00:00"
            result.append(interface_entry(link["ifname"], mac.upper(), addresses))
        return result

    # helpers ----------------------------------------------------------------------------------

    def _key_stem(self, vmid: int) -> Path:
        # hosts.start_netns_host authorizes "<client_key>.pub"; the private half never exists
        return self.container_dir(vmid) / "authorized"

    def _set_mac(self, host: SshHost, config: Mapping[str, str]) -> None:
        """Give eth0 the ``hwaddr`` of ``net0``, so the interfaces endpoint matches the config."""
        fields = dict(part.partition("=")[::2] for part in config.get("net0", "").split(","))
        mac = fields.get("hwaddr")
        if mac and host.netns is not None:
            argv = ["ip", "-n", host.netns, "link", "set", "dev", "eth0", "address", mac]
            done = subprocess.run(argv, capture_output=True, timeout=15, check=False)
            if done.returncode != 0:
                hosts.stop_host(host)
                raise LabError(f"cannot set {mac} on {host.name}: {done.stderr.decode().strip()}")
            # the readiness probe already cached the old MAC on this side of the bridge
            flush = ["ip", "neigh", "flush", "to", host.address, "dev", self.bridge]
            subprocess.run(flush, capture_output=True, timeout=15, check=False)

    def _address(self, config: Mapping[str, str], taken: set[str]) -> str:
        reserved = {str(ip) for ip in list(self.network.hosts())[: FIRST_CONTAINER_HOST - 1]}
        for key in sorted(k for k in config if k.startswith("net") and k[3:].isdigit()):
            fields = dict(part.partition("=")[::2] for part in config[key].split(","))
            ip = fields.get("ip", "")
            if "/" in ip:
                static = ipaddress.ip_interface(ip).ip
                if static in self.network and str(static) not in reserved:
                    if str(static) in taken:
                        raise LabError(f"address {static} is in use by another lab container")
                    return str(static)
        for index, candidate in enumerate(self.network.hosts(), start=1):
            if index >= FIRST_CONTAINER_HOST and str(candidate) not in taken:
                return str(candidate)
        raise LabError(f"no free address left in {self.network}")
