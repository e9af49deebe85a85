"""Which PVE container is "ours": the safety rules every plan and ``destroy`` check first.

A container is only ever changed when it carries the ``dflashops`` tag *and* its name matches;
anything else under our name or vmid is refused with one line naming the vmid and what differs.
Below the provisioning features: every command that reaches a container asks PVE first whether
it is one dflashops manages (``deployment.managed``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dflashops.inventory.models import MANAGED_TAG, Container
from dflashops.proxmox.client import PveClient


def split_tags(tags: str | None) -> list[str]:
    """PVE tag lists are separated by ``;`` (also ``,`` or spaces when written by hand)."""
    return [t for t in re.split(r"[;,\s]+", tags or "") if t]


@dataclass(frozen=True)
class Resource:
    """One container of ``/cluster/resources``."""

    vmid: int
    node: str
    name: str
    status: str
    lock: str | None
    tags: tuple[str, ...]
    # seconds it has run (0: stopped); not part of what a plan compares: it grows by itself
    uptime: int = field(default=0, compare=False)

    @property
    def managed(self) -> bool:
        return MANAGED_TAG in self.tags

    @classmethod
    def from_api(cls, item: Mapping[str, Any]) -> Resource:
        return cls(
            vmid=int(item["vmid"]),
            node=str(item.get("node", "")),
            name=str(item.get("name", "")),
            status=str(item.get("status", "")),
            lock=str(item["lock"]) if item.get("lock") else None,
            tags=tuple(split_tags(item.get("tags"))),
            uptime=int(item.get("uptime") or 0),
        )


def list_resources(client: PveClient) -> list[Resource]:
    return [Resource.from_api(item) for item in client.lxc_resources()]


def locate(ct: Container, resources: Sequence[Resource]) -> tuple[Resource | None, list[str]]:
    """The container dflashops manages under this name (None: create one), or refusals.

    Hostnames are not unique in PVE, vmids are; both must agree with the inventory and the
    container must carry the ``dflashops`` tag before anything touches it.
    """
    same_name = sorted((r for r in resources if r.name == ct.name), key=lambda r: r.vmid)
    strangers = [r for r in same_name if not r.managed]
    issues = [
        f"vmid {r.vmid} is named {ct.name!r} but lacks the {MANAGED_TAG!r} tag "
        "(not created by dflashops; left untouched)"
        for r in strangers
    ]
    if isinstance(ct.vmid, int):
        at_vmid = next((r for r in resources if r.vmid == ct.vmid), None)
        if at_vmid is not None and at_vmid.lock == "create" and at_vmid.name != ct.name:
            issues.append(f"vmid {ct.vmid} is being created by someone (lock: create)")
        elif at_vmid is not None and at_vmid.name != ct.name:
            issues.append(f"vmid {ct.vmid} is named {at_vmid.name!r}, not {ct.name!r}")
        elif at_vmid is not None and not at_vmid.managed and at_vmid not in strangers:
            issues.append(f"vmid {ct.vmid} ({at_vmid.name}) lacks the {MANAGED_TAG!r} tag")
        others = [r for r in same_name if r.vmid != ct.vmid and r.managed]
        issues += [
            f"{ct.name} already exists as vmid {r.vmid} (the inventory says {ct.vmid})"
            for r in others
        ]
        return (at_vmid if not issues else None), issues
    if issues:
        return None, issues
    managed = [r for r in same_name if r.managed]
    # several: a concurrent auto-vmid create that is being cleaned up; the lowest vmid wins
    return (managed[0] if managed else None), []


def concerns(ct: Container, resource: Resource) -> bool:
    """Whether ``resource`` bears on ``ct``'s plan: same name, or the inventory's fixed vmid."""
    return resource.name == ct.name or (isinstance(ct.vmid, int) and resource.vmid == ct.vmid)
