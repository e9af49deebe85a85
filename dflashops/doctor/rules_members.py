"""Cross-node rules for a placement member: is every member reachable and serving, do Gloo and
NCCL talk over the interface that carries the member's address, and the link's throughput
(not measured; the rule says why).

How each library picks its interface (what the rules compare against):

* Gloo (torch's default device, vLLM's CPU groups and the CPU build's collectives):
  ``GLOO_SOCKET_IFNAME`` when set, else the address the host name resolves to, else loopback
  (torch: "Unable to resolve hostname to a (local) address. Using the loopback address").
* NCCL (GPU collectives): ``NCCL_SOCKET_IFNAME`` when set (a comma list of prefixes, ``=``
  for exact names, ``^`` to exclude), else its own order (InfiniBand first, then any interface
  but ``lo`` and ``docker*``): ambiguous as soon as a member has two such interfaces.
"""

from __future__ import annotations

from dflashops.doctor.facts import DoctorFacts
from dflashops.doctor.findings import Finding
from dflashops.doctor.members import MemberNet
from dflashops.doctor.rules import RuleResult, ok, skip

NOT_A_MEMBER = "not a member of a placement"
# below this a tensor-parallel group across nodes spends its steps on all-reduces
SLOW_LINK_GBIT_S = 10.0


def members_alive(facts: DoctorFacts) -> RuleResult:
    """Every member reachable over SSH and its server process alive."""
    placement = facts.placement
    if placement is None:
        return skip(NOT_A_MEMBER)
    unreachable = [m for m in placement.members if not m.reachable]
    down = [m for m in placement.members if m.reachable and not m.running]
    if not unreachable and not down:
        return ok(f"all {len(placement.members)} members reachable, each server process alive")
    if not unreachable and len(down) == len(placement.members):
        title = f"placement {placement.playbook} is stopped on every member"
    else:
        title = f"placement {placement.playbook} is degraded: " + ", ".join(
            f"{m.name} {'unreachable' if not m.reachable else 'not running'}"
            for m in (*unreachable, *down)
        )
    evidence = tuple(f"{m.what()}: unreachable over SSH: {m.error}" for m in unreachable) + tuple(
        f"{m.what()}: no server process (pidfile names no live process)" for m in down
    )
    head = placement.members[0].name
    first = (unreachable or down)[0].name
    return RuleResult(
        [
            Finding(
                rule="members",
                severity="critical",
                title=title,
                evidence=evidence,
                fix=f"dflashops logs {first}; then relaunch the group: dflashops launch {head}",
                details={
                    "down": [m.name for m in down],
                    "unreachable": [m.name for m in unreachable],
                },
            )
        ]
    )


def nccl_matches(spec: str, interface: str) -> bool:
    """Whether NCCL's ``NCCL_SOCKET_IFNAME`` value ``spec`` lets it use ``interface``."""
    exclude = spec.startswith("^")
    body = spec[1:] if exclude else spec
    exact = body.startswith("=")
    names = [n for n in (body[1:] if exact else body).split(",") if n]
    hit = any(interface == n if exact else interface.startswith(n) for n in names)
    return not hit if exclude else hit


def member_interfaces(facts: DoctorFacts) -> RuleResult:
    """Gloo's and NCCL's interface on each member against the one carrying its address."""
    placement = facts.placement
    if placement is None:
        return skip(NOT_A_MEMBER)
    read = [m for m in placement.members if m.reachable and m.interfaces]
    if not read:
        return skip("no member's interfaces could be read (ip -o addr)")
    findings: list[Finding] = []
    for member in read:
        findings.extend(_member_findings(member, placement.members[0].name, facts.device))
    if findings:
        return RuleResult(findings)
    return ok(
        "Gloo"
        + (" and NCCL" if facts.device == "cuda" else "")
        + " use the interface carrying each member's address: "
        + ", ".join(f"{m.name} {m.interface_of(m.address)}" for m in read)
    )


def _member_findings(m: MemberNet, head: str, device: str) -> list[Finding]:
    interface = m.interface_of(m.address)
    if interface is None:
        return [
            Finding(
                rule="member-network",
                severity="critical",
                title=f"{m.name}: its address {m.address} is on none of its interfaces",
                evidence=(
                    f"the others reach {m.what()} at {m.address}",
                    "its interfaces: " + _interfaces(m),
                ),
                fix=f"give {m.name} network.ip {m.address} in the inventory and "
                f"`dflashops provision {m.name}`, then dflashops launch {head}",
            )
        ]
    out = []
    relaunch = f"then relaunch the group: dflashops launch {head}"
    gloo = m.env.get("GLOO_SOCKET_IFNAME")
    if gloo is not None and gloo != interface:
        out.append(
            Finding(
                rule="member-network",
                severity="critical" if gloo not in m.interfaces else "warning",
                title=f"{m.name}: Gloo binds to {gloo}, not {interface} (which carries "
                f"{m.address})",
                evidence=(
                    f"GLOO_SOCKET_IFNAME={gloo} in the server process",
                    "its interfaces: " + _interfaces(m),
                ),
                fix=f"set server.env GLOO_SOCKET_IFNAME: {interface} in the playbook; {relaunch}",
            )
        )
    elif gloo is None and _gloo_default(m) != interface:
        # a second address on the same interface is as reachable: only the interface matters
        resolved = m.hostname_address
        where = (
            f"resolves to {resolved} (on {m.interface_of(resolved) or 'no interface'})"
            if resolved
            else "does not resolve (torch falls back to the loopback address)"
        )
        out.append(
            Finding(
                rule="member-network",
                severity="warning",
                title=f"{m.name}: Gloo binds where its host name {m.hostname} points, "
                f"not to {m.address}",
                evidence=(
                    "GLOO_SOCKET_IFNAME is not set in the server process",
                    f"host name {m.hostname} {where}",
                ),
                fix=f"set server.env GLOO_SOCKET_IFNAME: {interface} in the playbook; {relaunch}",
            )
        )
    if device == "cuda":
        out.extend(_nccl(m, interface, relaunch))
    return out


def _gloo_default(m: MemberNet) -> str | None:
    """The interface Gloo picks without ``GLOO_SOCKET_IFNAME``: the host name's address's."""
    return m.interface_of(m.hostname_address) if m.hostname_address else None


def _nccl(m: MemberNet, interface: str, relaunch: str) -> list[Finding]:
    nccl = m.env.get("NCCL_SOCKET_IFNAME")
    if nccl is not None and not nccl_matches(nccl, interface):
        return [
            Finding(
                rule="member-network",
                severity="warning",
                title=f"{m.name}: NCCL_SOCKET_IFNAME={nccl} excludes {interface} (which "
                f"carries {m.address})",
                evidence=(f"NCCL_SOCKET_IFNAME={nccl} in the server process", _interfaces(m)),
                fix=f"set server.env NCCL_SOCKET_IFNAME: ={interface} in the playbook; {relaunch}",
            )
        ]
    candidates = [n for n in m.interfaces if n != "lo" and not n.startswith("docker")]
    if nccl is None and len(candidates) > 1:
        return [
            Finding(
                rule="member-network",
                severity="info",
                title=f"{m.name}: NCCL chooses among {len(candidates)} interfaces by itself",
                evidence=(
                    "NCCL_SOCKET_IFNAME is not set in the server process",
                    "its interfaces: " + _interfaces(m),
                ),
                fix=f"set server.env NCCL_SOCKET_IFNAME: ={interface} in the playbook; {relaunch}",
            )
        ]
    return []


def _interfaces(m: MemberNet) -> str:
    return ", ".join(f"{name} {' '.join(addrs)}" for name, addrs in m.interfaces.items())


def member_throughput(facts: DoctorFacts) -> RuleResult:
    """The measured link to each member: a failed transfer is a warning (the ranks need that
    path too); on GPUs a link under :data:`SLOW_LINK_GBIT_S` is one, since a tensor-parallel
    group all-reduces across it at every layer of every step."""
    if facts.placement is None:
        return skip(NOT_A_MEMBER)
    links = facts.placement.links
    if not links:
        return skip("no other member could be reached to measure the link to it")
    findings = []
    for link in links:
        speed = link.gbit_s
        if link.error:
            findings.append(
                Finding(
                    rule="member-throughput",
                    severity="warning",
                    title=f"link {link.source} -> {link.target} could not be measured",
                    evidence=(link.line(),),
                    fix="allow TCP 1024-65535 between the members (launch adds the rules where "
                    "the PVE firewall is on) and check that python3 exists on both",
                )
            )
        elif facts.device == "cuda" and speed is not None and speed < SLOW_LINK_GBIT_S:
            findings.append(
                Finding(
                    rule="member-throughput",
                    severity="warning",
                    title=f"link {link.source} -> {link.target} is slow for tensor-parallel: "
                    f"{speed:.1f} Gbit/s",
                    evidence=(link.line(),),
                    fix="put the members on a faster link (25 Gbit/s or more), or split the "
                    "model pipeline-parallel across nodes (fewer, larger transfers)",
                )
            )
    if findings:
        return RuleResult(findings)
    return ok("; ".join(link.line() for link in links))
