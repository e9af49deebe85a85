"""``dflashops status``: each container as PVE sees it (:mod:`dflashops.proxmox.lifecycle`) and
the server running in it as ``launch`` reads it (:mod:`dflashops.launch.status`), one row each,
and whether the rows make the command fail.
"""

from __future__ import annotations

from collections.abc import Iterable

from dflashops.inventory.load import Inventory
from dflashops.launch.status import GroupView, ServerStatus, status_probe
from dflashops.proxmox.errors import ProvisionError
from dflashops.proxmox.lifecycle import ContainerStatus, container_problems, container_status


class StatusRow(ContainerStatus):
    """One container and, when it runs, its server."""

    server: ServerStatus | None = None

    def placement(self) -> GroupView | None:
        """The server's view of its placement (None: none, or not a member)."""
        return self.server.placement if self.server is not None else None


def status_rows(inventory: Inventory, names: Iterable[str] = ()) -> list[StatusRow]:
    """One row per named container (all when none is named), in inventory order; the server
    part read over SSH in every running container."""
    rows = []
    for entry in container_status(inventory, names):
        row = StatusRow.model_validate(entry.model_dump())
        if row.state == "running":
            row.server = status_probe(inventory, inventory.container(row.name), row)
        rows.append(row)
    return rows


def status_failure(rows: list[StatusRow]) -> ProvisionError | None:
    """The error ``status`` exits with (one line and a hint; exit code 1), or None (exit 0):
    a row PVE could not read or refused (:func:`container_problems`), and a degraded placement,
    which serves nothing: a script running ``status`` must learn of each."""
    problems = group_problems(rows)
    hint = _group_hint(rows) if problems else None
    more, refusal = container_problems(list(rows))
    problems += more
    hint = refusal or hint
    return ProvisionError("; ".join(problems), hint=hint) if problems else None


def group_problems(rows: list[StatusRow]) -> list[str]:
    """One line per degraded placement among ``rows`` (several members of one group name the
    same members: said once)."""
    lines: list[str] = []
    for row in rows:
        view = row.placement()
        if view is not None and view.problem:
            line = f"placement {view.playbook} is degraded: {view.problem}"
            if line not in lines:
                lines.append(line)
    return lines


def _group_hint(rows: list[StatusRow]) -> str:
    """How a degraded group comes back: its ranks cannot rejoin one by one."""
    for row in rows:
        view = row.placement()
        if view is None or not view.problem or not view.members:
            continue
        down = [m.name for m in view.members if not m.running]
        if down:
            return (
                f"read why: dflashops logs {down[0]}; then relaunch the whole group: "
                f"dflashops launch {view.members[0].name}"
            )
    return "relaunch the placement from its head: dflashops launch HEAD"
