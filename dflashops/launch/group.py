"""``stop`` and ``status`` of a placement's group: every member, by the ``placement.json`` each one
keeps (written by ``launch``, see :mod:`dflashops.launch.members`).

``stop`` on any member stops them all, and still stops the others when one cannot be reached
(reported by name); ``status`` shows each member's role and health
(:func:`dflashops.launch.status.placement_status`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from dflashops.deployment.access import connect
from dflashops.deployment.layout import DEFAULT_LAYOUT, Layout
from dflashops.deployment.manifest import ManifestUnreadable, read_manifest, write_manifest

# status of the group lives with ``status`` (its probe needs it); kept importable from here
from dflashops.errors import DflashopsError
from dflashops.inventory.load import Inventory
from dflashops.launch import lifecycle
from dflashops.launch.report import LaunchReport
from dflashops.launch.status import MemberStatus, placement_status, read_placement

__all__ = [
    "MemberReport",
    "MemberStatus",
    "MemberStop",
    "PlacementLaunchReport",
    "PlacementStopReport",
    "placement_status",
    "read_placement",
    "stop_placement",
]


class MemberReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    rank: int
    role: Literal["head", "worker"]
    address: str
    pid: int | None = None
    action: str = "dry-run"
    joined_in_s: float | None = None
    files_changed: int = 0


class PlacementLaunchReport(LaunchReport):
    """The head's launch report, plus one line per member."""

    runtime: str = "native"
    members: list[MemberReport] = Field(default_factory=list)
    # one line per member: its PVE firewall and the rules launch added (launch/firewall.py)
    firewall: list[str] = Field(default_factory=list)
    # the target's (and drafter's) folder compared across members by checksum
    model_copies: str = ""


class MemberStop(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    role: str
    was_running: bool | None = None  # None: unreachable
    pid: int | None = None
    error: str | None = None


class PlacementStopReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    container: str
    members: list[MemberStop]

    @property
    def complete(self) -> bool:
        return all(m.error is None for m in self.members)


def stop_placement(
    inventory: Inventory,
    record: Mapping[str, Any],
    *,
    container: str,
    layout: Layout = DEFAULT_LAYOUT,
) -> PlacementStopReport:
    """Stop every member of the placement ``record`` (as ``placement.json`` lists them); one that
    cannot be reached is reported, and the others are still stopped."""
    results = []
    for entry in record["members"]:
        name, role = str(entry["name"]), str(entry.get("role", "worker"))
        try:
            target = connect(inventory, name, deadline=60.0)
            with target.conn as conn:
                state = lifecycle.run_state(conn, layout)
                if state.running or state.strays:
                    lifecycle.stop(conn, systemd=state.systemd, layout=layout, disable=True)
                try:
                    manifest = read_manifest(conn, layout)
                except ManifestUnreadable:  # stopped all the same: launch --force rebuilds it
                    manifest = None
                if manifest is not None and manifest.pid is not None:
                    write_manifest(
                        conn,
                        manifest.model_copy(update={"pid": None, "started_at": None}),
                        layout,
                    )
            results.append(
                MemberStop(name=name, role=role, was_running=state.running, pid=state.server_pid)
            )
        except DflashopsError as exc:
            results.append(MemberStop(name=name, role=role, error=exc.message))
    return PlacementStopReport(container=container, members=results)
