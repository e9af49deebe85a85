"""Faults injected into test hosts (:class:`dflashops.lab.host_model.SshHost`): crash,
partition, slow link. Netns hosts only, except :func:`kill_host`.

* :func:`kill_host`: SIGKILL sshd and everything started on the host; new connections are
  refused at once (the namespace and link stay).
* :func:`cut_link` / :func:`restore_link`: the host's veth goes down (new connections time out,
  open ones hang) and comes back.
* :func:`limit_rate` / :func:`clear_rate_limit`: a token bucket (``tc tbf``; this kernel has no
  netem) on the host's link.
"""

from __future__ import annotations

from typing import Literal

from dflashops.lab.errors import LabError
from dflashops.lab.host_model import SshHost
from dflashops.lab.local_commands import run_command
from dflashops.lab.netns import flush_neighbours, kill_processes


def kill_host(host: SshHost) -> None:
    """Crash ``host``: every process on it dies at once (idempotent)."""
    kill_processes(host)


def cut_link(host: SshHost) -> None:
    """Partition ``host``: its veth goes down. New connections time out; open ones hang."""
    run_command(["ip", "link", "set", _veth(host), "down"])


def restore_link(host: SshHost) -> None:
    """Heal a :func:`cut_link` partition (at once: failed neighbour entries are dropped)."""
    run_command(["ip", "link", "set", _veth(host), "up"])
    flush_neighbours(host)


def limit_rate(
    host: SshHost,
    rate: str = "2mbit",
    *,
    burst: str = "32kbit",
    latency: str = "400ms",
    direction: Literal["to_host", "from_host", "both"] = "to_host",
) -> None:
    """Slow ``host``'s link with a token bucket (``tc tbf``): ``to_host`` shapes uploads."""
    tbf = ["root", "tbf", "rate", rate, "burst", burst, "latency", latency]
    if direction in ("to_host", "both"):
        run_command(["tc", "qdisc", "replace", "dev", _veth(host), *tbf])
    if direction in ("from_host", "both"):
        run_command(
            ["ip", "netns", "exec", _netns(host), "tc", "qdisc", "replace", "dev", "eth0", *tbf]
        )


def clear_rate_limit(host: SshHost) -> None:
    """Remove :func:`limit_rate` shaping in both directions (idempotent)."""
    run_command(["tc", "qdisc", "del", "dev", _veth(host), "root"], check=False)
    run_command(
        ["ip", "netns", "exec", _netns(host), "tc", "qdisc", "del", "dev", "eth0", "root"],
        check=False,
    )


def _veth(host: SshHost) -> str:
    if host.veth is None:
        raise LabError(f"{host.name} is a loopback host: link faults need a netns host")
    return host.veth


def _netns(host: SshHost) -> str:
    if host.netns is None:
        raise LabError(f"{host.name} is a loopback host: link faults need a netns host")
    return host.netns
