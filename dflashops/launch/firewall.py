"""The PVE firewall of a placement's members: let the members reach each other.

vLLM's native multi-node runtime needs more than the rendezvous port: the head's
``torch.distributed`` store listens on ``placement.master_port``, but its message queues (ZMQ)
and the Gloo/NCCL connections between ranks use ephemeral ports that no setting pins. So each
member gets two ``IN ACCEPT`` rules from the other members' addresses only: the rendezvous port
(the head) and the unprivileged range 1024-65535. Where a member's firewall is off nothing is
written (the report says so); rules dflashops wrote for this playbook before and no longer wants
are removed; the operator's own rules are never touched (:mod:`dflashops.proxmox.firewall`).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass

from dflashops.deployment.managed import ManagedCheck
from dflashops.errors import ProxmoxError
from dflashops.inventory.load import Inventory
from dflashops.launch.placement import Member
from dflashops.playbook.placement import Placement
from dflashops.proxmox.client import PveClient
from dflashops.proxmox.firewall import (
    AllowRule,
    FirewallPlan,
    apply_rules,
    firewall_facts,
    plan_rules,
)

EPHEMERAL = "1024:65535"


@dataclass(frozen=True)
class MemberFirewall:
    """What launch found and did on one member's firewall, as one report line."""

    name: str
    line: str
    changed: bool = False
    problem: bool = False


def rule_mark(playbook: str) -> str:
    return f"dflashops placement {playbook}:"


def wanted_rules(
    placement: Placement, members: list[Member], member: Member, playbook: str
) -> list[AllowRule]:
    """The rules ``member`` needs: from every other member, the head's rendezvous port (on the
    head) and the ephemeral range the message queues and collectives use."""
    peers = ",".join(m.address for m in members if m.name != member.name)
    mark = rule_mark(playbook)
    rules = []
    if member.rank == 0:
        for port in placement.ports():
            rules.append(AllowRule(peers, str(port), f"{mark} {placement.runtime} rendezvous"))
    rules.append(AllowRule(peers, EPHEMERAL, f"{mark} message queues, Gloo/NCCL (ephemeral)"))
    return rules


def not_addresses(members: list[Member]) -> list[str]:
    """Members whose address is a name: a PVE rule's source takes addresses only."""
    bad = []
    for m in members:
        try:
            ipaddress.ip_address(m.address)
        except ValueError:
            bad.append(f"{m.name} ({m.address})")
    return bad


@dataclass(frozen=True)
class PortsPlan:
    """One member's firewall, planned: the line a dry run shows, and the rules to write (none
    when the firewall is off, already right, or could not be read)."""

    name: str
    line: str
    problem: bool = False
    client: PveClient | None = None
    node: str | None = None
    vmid: int | None = None
    rules: FirewallPlan | None = None

    def applied(self) -> MemberFirewall:
        """Write the planned rules; what the report says afterwards."""
        if self.rules is None or self.client is None or self.node is None or self.vmid is None:
            return MemberFirewall(self.name, self.line, problem=self.problem)
        try:
            apply_rules(self.client, self.node, self.vmid, self.rules)
        except ProxmoxError as exc:
            return MemberFirewall(self.name, f"PVE firewall: {exc.one_line()}", problem=True)
        line = self.line.replace("to add", "added").replace("stale to remove", "stale removed")
        return MemberFirewall(self.name, line, changed=True)


def plan_member_ports(
    inventory: Inventory,
    placement: Placement,
    members: list[Member],
    checks: Mapping[str, ManagedCheck],
    *,
    playbook: str,
) -> tuple[PortsPlan, ...]:
    """Read each member's firewall and plan what is missing (see the module); writes nothing."""
    names = not_addresses(members)
    out = []
    for member in members:
        check = checks.get(member.name)
        if check is None or check.skipped or check.vmid is None or check.node is None:
            out.append(PortsPlan(member.name, "PVE firewall not read (--skip-pve-check)"))
            continue
        if names:
            line = "PVE firewall rules need addresses, not names: " + ", ".join(names)
            out.append(PortsPlan(member.name, line, problem=True))
            continue
        out.append(_plan_one(inventory, placement, members, member, check=check, playbook=playbook))
    return tuple(out)


def _plan_one(
    inventory: Inventory,
    placement: Placement,
    members: list[Member],
    member: Member,
    *,
    check: ManagedCheck,
    playbook: str,
) -> PortsPlan:
    assert check.node is not None and check.vmid is not None
    wanted = wanted_rules(placement, members, member, playbook)
    ports = ", ".join(f"tcp {r.dport}" for r in wanted)
    try:
        client = PveClient.for_cluster(inventory, inventory.container(member.name).cluster)
        facts = firewall_facts(client, check.node, check.vmid)
    except ProxmoxError as exc:
        return PortsPlan(member.name, f"PVE firewall: {exc.one_line()}", problem=True)
    if not facts.enabled:
        return PortsPlan(member.name, f"PVE firewall off: nothing to allow ({ports})")
    rules = plan_rules(wanted, facts, rule_mark(playbook))
    if rules.empty:
        return PortsPlan(member.name, f"PVE firewall on: members allowed ({ports})")
    line = (
        f"PVE firewall on: {len(rules.add)} rule(s) to add, {len(rules.remove)} stale "
        f"to remove ({ports} from the other members)"
    )
    return PortsPlan(member.name, line, False, client, check.node, check.vmid, rules)
