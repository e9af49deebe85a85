"""A container's PVE firewall, as far as dflashops manages it: facts, plan, apply.

Facts are the container's firewall options (is it on?) and its rules. The plan compares the rules
a caller wants (:class:`AllowRule`, each marked by a comment that starts with ``mark``) with those
there: what is missing is added, and a rule that carries ``mark`` but is no longer wanted (a
member's address changed) is removed. Rules without the mark are the operator's and are never
touched. When the container's firewall is off nothing is written: its rules would do nothing,
and a launch must not change what it does not need to.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dflashops.proxmox.client import PveClient


@dataclass(frozen=True)
class AllowRule:
    """``IN ACCEPT`` for ``proto`` to ``dport`` from ``source`` (a comma list of addresses)."""

    source: str
    dport: str
    comment: str
    proto: str = "tcp"

    def params(self) -> dict[str, Any]:
        return {
            "type": "in",
            "action": "ACCEPT",
            "proto": self.proto,
            "source": self.source,
            "dport": self.dport,
            "comment": self.comment,
            "enable": 1,
        }

    def matches(self, rule: Mapping[str, Any]) -> bool:
        return (
            str(rule.get("type", "")).lower() == "in"
            and rule.get("action") == "ACCEPT"
            and str(rule.get("proto", "")) == self.proto
            and str(rule.get("source", "")) == self.source
            and str(rule.get("dport", "")) == self.dport
            and rule.get("comment") == self.comment
            and int(rule.get("enable", 0) or 0) == 1
        )


@dataclass(frozen=True)
class FirewallFacts:
    enabled: bool
    rules: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class FirewallPlan:
    add: list[AllowRule]
    remove: list[dict[str, Any]]  # rules carrying the mark that nothing wants, with their pos

    @property
    def empty(self) -> bool:
        return not self.add and not self.remove


def firewall_facts(client: PveClient, node: str, vmid: int) -> FirewallFacts:
    options = client.get(client.ct_path(node, vmid, "firewall", "options")) or {}
    rules = client.get(client.ct_path(node, vmid, "firewall", "rules")) or []
    return FirewallFacts(enabled=bool(int(options.get("enable", 0) or 0)), rules=list(rules))


def plan_rules(wanted: Sequence[AllowRule], facts: FirewallFacts, mark: str) -> FirewallPlan:
    """The rules to add and the marked ones to remove (nothing when the firewall is off)."""
    if not facts.enabled:
        return FirewallPlan(add=[], remove=[])
    add = [rule for rule in wanted if not any(rule.matches(r) for r in facts.rules)]
    remove = [
        r
        for r in facts.rules
        if str(r.get("comment", "")).startswith(mark) and not any(w.matches(r) for w in wanted)
    ]
    return FirewallPlan(add=add, remove=remove)


def apply_rules(client: PveClient, node: str, vmid: int, plan: FirewallPlan) -> None:
    rules_path = client.ct_path(node, vmid, "firewall", "rules")
    # highest position first, so the positions of the rest stay what the facts said
    for stale in sorted(plan.remove, key=lambda r: int(r["pos"]), reverse=True):
        client.delete(f"{rules_path}/{int(stale['pos'])}")
    # PVE puts a new rule first: add in reverse so they read in the wanted order
    for rule in reversed(plan.add):
        client.post(rules_path, **rule.params())
