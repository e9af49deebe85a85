"""``dflashops status``: each container as PVE sees it (:mod:`dflashops.proxmox.lifecycle`) and
the server running in it as ``launch`` reads it (:mod:`dflashops.launch.status`), one row each,
and whether the rows make the command fail.

PVE is read once per cluster (one login, one listing); then every container is read at once, up
to ``parallel`` (:mod:`dflashops.proxmox.fleet`): its address from PVE, its server over SSH.
The rows come back in inventory order.
"""

from __future__ import annotations

from collections.abc import Iterable

from dflashops.inventory.load import Inventory
from dflashops.inventory.models import Container
from dflashops.launch.status import GroupView, ServerStatus, status_probe
from dflashops.proxmox.clusters import PveClusters
from dflashops.proxmox.errors import ProvisionError
from dflashops.proxmox.fleet import QUIET, Tell, run_each
from dflashops.proxmox.lifecycle import ContainerStatus, container_problems, one_status


class StatusRow(ContainerStatus):
    """One container and, when it runs, its server."""

    server: ServerStatus | None = None

    def placement(self) -> GroupView | None:
        """The server's view of its placement (None: none, or not a member)."""
        return self.server.placement if self.server is not None else None

    def line(self) -> str:
        """The row in one line: ``NAME: running (vmid 401, node lab, 10.0.0.5), vllm 0.32.0``."""
        where = f"vmid {self.vmid}, node {self.node}" if self.vmid is not None else self.node
        address = f", {self.address}" if self.address and self.state == "running" else ""
        text = f"{self.name}: {self.state} ({where}{address})"
        server = self.server
        if server is not None:
            if server.problem:
                text += f", server: {server.problem}"
            elif server.running:
                state = "loading" if server.loading else "running"
                text += f", server {server.engine} {server.engine_version} {state}"
            elif server.deployed:
                text += ", server deployed, not running"
        if self.note and self.state != "running":
            text += f": {self.note}"
        return text


def status_rows(
    inventory: Inventory,
    names: Iterable[str] = (),
    *,
    parallel: int | None = None,
    tell: Tell = QUIET,
) -> list[StatusRow]:
    """One row per named container (all when none is named), in inventory order; the server
    part read over SSH in every running container."""
    clusters = PveClusters(inventory)

    def one(ct: Container) -> StatusRow:
        tell(ct.name, "reading it in PVE")
        row = StatusRow.model_validate(one_status(clusters, ct).model_dump())
        if row.state == "running":
            host = row.address or ct.ssh_host or ""
            tell(ct.name, f"reading its server over SSH ({host})")
            try:
                row.server = status_probe(inventory, ct, row)
            except Exception as exc:  # a bug or a library's error: this row says so, only
                row.server = ServerStatus.unreachable(host, f"{type(exc).__name__}: {exc}")
        tell.done(ct.name, row.line())
        return row

    return run_each(inventory.select(names), one, parallel=parallel or inventory.parallel)


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
