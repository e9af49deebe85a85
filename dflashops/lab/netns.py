"""Linux network plumbing for the lab's hosts: bridges, network namespaces and their veths (by
name, through ``ip``), and the processes running on a host (found and killed by PID).

Everything here is idempotent and works on leftovers of a crashed run, whose processes are no
children of ours. Starting hosts on top of it is :mod:`dflashops.lab.hosts`.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import signal
import subprocess
import time
from pathlib import Path

from dflashops.lab.errors import LabError
from dflashops.lab.host_model import SshHost
from dflashops.lab.local_commands import CMD_TIMEOUT_S, run_command

IFACE_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,14}$")


# --------------------------------------------------------------------------- bridge


def ensure_bridge(name: str, cidr: str) -> str:
    """(Re)create bridge ``name`` with the network's first address; return that address.

    A bridge left over with the same name is deleted first (veths attached to it stay until
    their hosts are removed by name).
    """
    check_iface(name)
    network = ipaddress.ip_network(cidr)
    gateway = next(network.hosts())
    remove_bridge(name)
    run_ip("link", "add", name, "type", "bridge")
    run_ip("addr", "add", f"{gateway}/{network.prefixlen}", "dev", name)
    run_ip("link", "set", name, "up")
    return str(gateway)


def remove_bridge(name: str) -> None:
    """Delete bridge ``name`` if it exists (idempotent)."""
    check_iface(name)
    if link_exists(name):
        run_ip("link", "del", name, check=False)


# --------------------------------------------------------------------------- processes


def kill_processes(host: SshHost) -> None:
    """SIGKILL sshd and every process started on ``host`` (idempotent).

    A netns host keeps its namespace and link, so new connections are refused at once; what
    follows decides whether it stops (:func:`~dflashops.lab.hosts.stop_host`) or comes back
    (:func:`~dflashops.lab.hosts.restart_host`).
    """
    if host.netns is not None:
        if netns_exists(host.netns):
            kill_netns_pids(host.netns)
    else:
        for pid in [*_descendants(host.pid), host.pid]:
            _kill(pid)
    if host.process is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            host.process.wait(timeout=CMD_TIMEOUT_S)


def flush_neighbours(host: SshHost) -> None:
    """Forget ARP entries for the host's address on both sides of its link.

    An address probed while its link was down (or held by an earlier host with another MAC)
    stays FAILED/stale for seconds, during which connects fail with "no route to host".
    """
    run_ip("neigh", "flush", "to", host.address, check=False)
    if host.netns is not None:
        run_ip("-n", host.netns, "neigh", "flush", "all", check=False)


def netns_exists(name: str) -> bool:
    """Whether network namespace ``name`` exists (``ip netns add`` made it)."""
    return Path("/run/netns", name).exists()


def link_exists(name: str) -> bool:
    """Whether network interface ``name`` exists here (a bridge or a root-side veth)."""
    return Path("/sys/class/net", name).exists()


def kill_netns_pids(name: str, timeout: float = 5.0) -> None:
    """SIGKILL every process in namespace ``name`` until none is left, for at most ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        pids = _netns_pids(name)
        if not pids:
            return
        if time.monotonic() > deadline:
            raise LabError(f"processes {pids} in namespace {name} survived SIGKILL")
        for pid in pids:
            _kill(pid)
        time.sleep(0.02)


def _netns_pids(name: str) -> list[int]:
    out = run_command(["ip", "netns", "pids", name], check=False).stdout.decode()
    return [int(token) for token in out.split() if token.isdigit()]


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _kill(pid: int) -> None:
    if pid > 0:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


# --------------------------------------------------------------------------- helpers


def check_iface(name: str) -> None:
    """Refuse an interface name Linux would not take (a LabError)."""
    if not IFACE_RE.match(name):
        raise LabError(f"interface name {name!r}: at most 15 letters, digits, '_', '.', '-'")


def run_ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    """Run ``ip ARGS`` (iproute2); with ``check``, a failure is a LabError."""
    return run_command(["ip", *args], check=check)
