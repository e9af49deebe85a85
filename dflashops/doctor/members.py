"""Cross-node facts of a placement, for doctor: every member's server and its network.

For each member (as the ``placement.json`` of the examined container lists them), one SSH
command reads: whether its server process runs, the interface variables of that process
(``GLOO_SOCKET_IFNAME``, ``NCCL_SOCKET_IFNAME``, ``VLLM_HOST_IP`` from ``/proc/PID/environ``:
what the ranks really run with, not what a file says), its host name and the address that name
resolves to (torch's Gloo device binds there when ``GLOO_SOCKET_IFNAME`` is unset: torch warns
"Unable to resolve hostname to a (local) address … Using the loopback address" otherwise), and
``ip -o addr`` (which interface carries the address the others reach it at).

Then the link from the examined member to each other member is measured with one 64 MiB TCP
transfer (:mod:`dflashops.doctor.link`), to an ephemeral port of the address the ranks use: the
range ``launch`` allows between members where the PVE firewall is on.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dflashops.deployment.access import connect
from dflashops.deployment.layout import DEFAULT_LAYOUT, Layout
from dflashops.doctor.link import LinkSample, measure_link
from dflashops.errors import DflashopsError
from dflashops.launch.lifecycle import _HELPERS

if TYPE_CHECKING:
    from dflashops.inventory.load import Inventory
    from dflashops.remote import SshConnection

IFNAME_ENV = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "VLLM_HOST_IP")
MEMBER_DEADLINE_S = 30.0


@dataclass(frozen=True)
class MemberNet:
    """One member as doctor read it. ``error`` set: it could not be reached over SSH."""

    name: str
    role: str
    rank: int
    address: str
    error: str | None = None
    running: bool = False
    env: dict[str, str] = field(default_factory=dict)
    interfaces: dict[str, tuple[str, ...]] = field(default_factory=dict)  # name -> addresses
    hostname: str | None = None
    hostname_address: str | None = None  # what the host name resolves to; None: it does not

    @property
    def reachable(self) -> bool:
        return self.error is None

    def interface_of(self, address: str) -> str | None:
        """The interface that carries ``address``, or None."""
        return next((name for name, addrs in self.interfaces.items() if address in addrs), None)

    def what(self) -> str:
        return f"{self.name} ({self.role}, rank {self.rank}, {self.address})"


@dataclass(frozen=True)
class PlacementFacts:
    playbook: str
    members: tuple[MemberNet, ...]
    # the examined member to each other reachable one (empty: nothing could be measured)
    links: tuple[LinkSample, ...] = ()


def member_script(layout: Layout) -> str:
    q = shlex.quote
    names = "|".join(IFNAME_ENV)
    return _HELPERS + "\n".join(
        [
            f'pp=$(readpid {q(layout.pidfile)}); if ours "$pp"; then echo "pid $pp"; '
            f"tr '\\0' '\\n' < /proc/$pp/environ 2>/dev/null | grep -E '^({names})=' "
            "| sed 's/^/env /'; fi",
            'h=$(hostname 2>/dev/null); echo "hostname $h"',
            'getent hosts "$h" 2>/dev/null | head -n 1 | sed "s/^/resolves /"',
            "ip -o addr show 2>/dev/null | sed 's/^/addr /'",
        ]
    )


def parse_member(output: str, entry: Mapping[str, Any]) -> MemberNet:
    """``member_script``'s output on the member ``entry`` (a ``placement.json`` member)."""
    running, hostname, resolved = False, None, None
    env: dict[str, str] = {}
    interfaces: dict[str, list[str]] = {}
    for line in output.splitlines():
        key, _, value = line.partition(" ")
        value = value.strip()
        if key == "pid" and value.isdigit():
            running = True
        elif key == "env":
            name, sep, text = value.partition("=")
            if sep and name in IFNAME_ENV:
                env[name] = text
        elif key == "hostname":
            hostname = value or None
        elif key == "resolves" and value:
            resolved = value.split()[0]
        elif key == "addr":
            interface, address = _ip_addr_line(value)
            if interface and address:
                interfaces.setdefault(interface, []).append(address)
    return MemberNet(
        name=str(entry["name"]),
        role=str(entry["role"]),
        rank=int(entry["rank"]),
        address=str(entry["address"]),
        running=running,
        env=env,
        interfaces={k: tuple(v) for k, v in interfaces.items()},
        hostname=hostname,
        hostname_address=resolved,
    )


def _ip_addr_line(line: str) -> tuple[str | None, str | None]:
    """``2: eth0@if7    inet 10.0.0.11/24 brd … scope global eth0`` -> (eth0, 10.0.0.11)."""
    fields = line.split()
    if len(fields) < 4 or fields[2] not in ("inet", "inet6"):
        return None, None
    return fields[1].split("@", 1)[0], fields[3].split("/", 1)[0]


def gather_placement(
    inventory: Inventory,
    name: str,
    conn: SshConnection,
    record: Mapping[str, Any],
    *,
    layout: Layout = DEFAULT_LAYOUT,
) -> PlacementFacts:
    """Every member's facts; ``conn`` reaches ``name`` (read over it, not again)."""
    script = member_script(layout)
    members, links = [], []
    for entry in record["members"]:
        member = str(entry["name"])
        try:
            if member == name:
                output = conn.run(script, deadline=MEMBER_DEADLINE_S, display="member facts")
            else:
                with connect(
                    inventory, member, deadline=MEMBER_DEADLINE_S, connect_attempts=1
                ).conn as other:
                    output = other.run(script, deadline=MEMBER_DEADLINE_S, display="member facts")
                    links.append(
                        measure_link(
                            conn, other, source=name, target=member, address=str(entry["address"])
                        )
                    )
            members.append(parse_member(output.stdout, entry))
        except DflashopsError as exc:
            members.append(
                MemberNet(
                    name=member,
                    role=str(entry["role"]),
                    rank=int(entry["rank"]),
                    address=str(entry["address"]),
                    error=exc.one_line(),
                )
            )
    return PlacementFacts(
        playbook=str(record.get("playbook", "?")), members=tuple(members), links=tuple(links)
    )
