"""``dflashops provision | destroy | status``: managed containers on Proxmox VE."""

from __future__ import annotations

import sys
from contextlib import ExitStack
from typing import TYPE_CHECKING

import click

from dflashops.cli.context import AppContext, dump_json
from dflashops.cli.fleet_view import LaterTell, fleet_lines, parallel_option

if TYPE_CHECKING:
    from rich.console import Console

    from dflashops.launch.status import GroupView
    from dflashops.proxmox.lifecycle import DestroyResult
    from dflashops.proxmox.report import ContainerReport, ProvisionReport
    from dflashops.proxmox.rows import Row
    from dflashops.status import StatusRow

pass_app = click.make_pass_decorator(AppContext)

STATUS_STYLE = {
    "create": "green",
    "change": "yellow",
    "remove": "yellow",
    "unchanged": "dim",
    "differs": "magenta",
    "refused": "red",
    "absent": "red",
}


@click.command("provision")
@click.argument("names", nargs=-1)
@click.option("--dry-run", is_flag=True, help="Print the plan; change nothing.")
@click.option("--yes", "-y", is_flag=True, help="Apply without asking.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document (the report).")
@parallel_option
@pass_app
def provision(
    app: AppContext,
    *,
    names: tuple[str, ...],
    dry_run: bool,
    yes: bool,
    as_json: bool,
    parallel: int | None,
) -> None:
    """Plan, then create or change containers (all when no NAME is given).

    \b
    Per container: wanted (inventory) vs actual (PVE), field by field, then
    the steps: template download, create, config changes through the API,
    GPU passthrough (devN by API or `pct set` over SSH, or raw lxc lines),
    start, wait for the address and SSH, and the steps inside the container
    (NVIDIA userspace driver, /dev/shm). Containers without the dflashops
    tag, or whose name differs, are refused and never touched. The plan
    shown is the plan applied; it is made again only if PVE changed meanwhile.

    \b
    Containers are planned and provisioned at once, --parallel at a time
    (creation too, within a node as across nodes); one that fails never
    stops the others, the report keeps inventory order, and the exit code
    is 1 when any failed or was refused.
    """
    from contextlib import closing

    from dflashops.proxmox.apply import ProvisionRequest, apply_provision, plan_provision
    from dflashops.proxmox.errors import ProvisionError

    request = ProvisionRequest(app.inventory(), names, parallel=parallel)
    chosen = [ct.name for ct in request.inventory.select(names)]
    with fleet_lines("planning", chosen, enabled=not as_json) as tell:
        plan = plan_provision(request, tell=tell)
    with closing(plan):
        shown = plan.report()
        if dry_run:
            _finish(shown, as_json, _console(err=as_json))
            return
        if not yes and shown.needs_confirmation:
            _render_report(shown, _console(err=as_json))
            if not _ask("Apply these changes?", unattended="changes need confirmation"):
                raise ProvisionError("nothing changed: not confirmed")
        with fleet_lines("provisioning", chosen, enabled=not as_json) as tell:
            report = apply_provision(plan, tell=tell)
    _finish(report, as_json, _console())


def _ask(question: str, *, unattended: str) -> bool:
    """Ask on a terminal; without one, fail with ``unattended`` (``--yes`` is the way)."""
    from dflashops.proxmox.errors import ProvisionError

    if not sys.stdin.isatty():
        raise ProvisionError(unattended, hint="pass --yes")
    return click.confirm(question, err=True)


def _finish(report: ProvisionReport, as_json: bool, out: Console) -> None:
    from dflashops.proxmox.errors import ProvisionError

    if as_json:
        click.echo(dump_json(report.model_dump(mode="json")))
    else:
        _render_report(report, out)
    if not report.ok:
        raise ProvisionError(" | ".join(report.failures))


def _console(*, err: bool = False) -> Console:
    from dflashops.cli.console import make_console

    return make_console(stderr=err)


def _rows_table(title: str, rows: list[Row]) -> object:
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for column in ("field", "wanted", "actual", "status", "via", "note"):
        table.add_column(column, overflow="fold")
    for row in rows:
        style = STATUS_STYLE.get(row.status, "")
        table.add_row(
            row.field,
            row.wanted,
            row.actual,
            f"[{style}]{row.status}[/]" if style else row.status,
            row.via,
            row.note,
        )
    return table


def _render_report(report: ProvisionReport, out: Console) -> None:
    for entry in report.containers:
        _render_container(entry, out)


def _render_container(entry: ContainerReport, out: Console) -> None:
    from dflashops.proxmox.guest import SKIPPED_LABEL

    vmid = entry.vmid if entry.vmid is not None else "auto"
    head = f"{entry.name}: {entry.action or 'error'} (vmid {vmid}, node {entry.node}"
    head += f", passthrough {entry.passthrough})" if entry.passthrough != "none" else ")"
    if entry.rows:
        out.print(_rows_table(head, entry.rows))
    else:
        out.print(head)
    if entry.guest_rows:
        out.print(_rows_table(f"{entry.name}: inside the container", entry.guest_rows))
    for label, lines in (
        ("step", entry.steps),
        ("step inside", entry.guest_steps),
        (SKIPPED_LABEL, entry.guest_plan_only),
        ("done", entry.applied),
        ("issue", entry.issues),
        ("host fix", entry.host_fixes),
        ("warning", entry.warnings),
    ):
        for line in lines:
            out.print(f"  {label}: {line}", markup=False, highlight=False)
    if entry.address:
        out.print(f"  address: {entry.address}", highlight=False)
    if entry.error:
        out.print(f"  error: {entry.error}", markup=False, style="red")


@click.command("destroy")
@click.argument("names", nargs=-1, required=True)
@click.option("--yes", "-y", is_flag=True, help="Destroy without asking.")
@parallel_option
@pass_app
def destroy(app: AppContext, names: tuple[str, ...], yes: bool, parallel: int | None) -> None:
    """Stop and delete managed containers (purge=1). Others are refused, never touched.

    Containers are destroyed at once, --parallel at a time; one that fails
    never stops the others; exit 1 when any failed or was refused."""
    from dflashops.proxmox.errors import ProvisionError
    from dflashops.proxmox.lifecycle import destroy as run_destroy

    inv = app.inventory()
    chosen = [ct.name for ct in inv.select(names)]
    later = LaterTell()
    with ExitStack() as display:

        def confirm(targets: list[DestroyResult]) -> bool:
            _render_destroy(targets)
            asked = "Destroy these containers?"
            if not yes and not _ask(asked, unattended="destroy needs confirmation"):
                return False
            later.start(display.enter_context(fleet_lines("destroying", chosen)))
            return True

        results = run_destroy(inv, names, confirm=confirm, parallel=parallel, tell=later)
    _render_destroy(results)
    failed = [r for r in results if r.outcome in ("refused", "failed")]
    if failed:
        raise ProvisionError(" | ".join(f"{r.name}: {r.outcome}: {r.note}" for r in failed))


def _render_destroy(results: list[DestroyResult]) -> None:
    for r in results:
        click.echo(r.line())


@click.command("status")
@click.argument("names", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@parallel_option
@pass_app
def status(app: AppContext, names: tuple[str, ...], as_json: bool, parallel: int | None) -> None:
    """One view per container: PVE state, vmid, node, address, tags (and the server, once
    launched).

    \b
    A member of a placement (several containers serving one model) also
    shows its role (head, or worker rank R of W) and the group's health:
    serving, starting, stopped, or degraded (some members running, others
    not or unreachable, which the group cannot recover from alone:
    relaunch the head). --json carries it as server.placement.

    Exits 1 when a row could not be read (PVE unreachable: state "error"), is refused (the
    name or vmid holds a container without the dflashops tag, which no command will touch),
    or is a member of a degraded placement (the line names the member that is down); the
    table or --json document is printed first. PVE is read once per cluster, the containers'
    servers --parallel at a time; rows keep inventory order."""
    from dflashops.status import status_failure, status_rows

    inv = app.inventory()
    chosen = [ct.name for ct in inv.select(names)]
    with fleet_lines("status", chosen, enabled=not as_json) as tell:
        entries = status_rows(inv, names, parallel=parallel, tell=tell)
    if as_json:
        click.echo(dump_json([e.model_dump(mode="json") for e in entries]))
    else:
        _render_status(entries)
    failure = status_failure(entries)
    if failure is not None:
        raise failure


def _placement_cell(view: GroupView) -> str:
    """``worker rank 1 of 2, group serving`` and one line per member that is not fine."""
    role = "head" if view.role == "head" else f"worker rank {view.rank}"
    text = f"{role} of {view.nodes} ({view.playbook}), group {view.health}"
    for member in view.members:
        if member.running is None:
            state = "unreachable"
        elif not member.running:
            state = "not running"
        else:
            continue
        text += f"\n{member.name} ({member.role}): {state}"
    return text


def _server_cell(entry: StatusRow) -> str:
    """``vllm 0.32.0 dflash k=4, up 5m, http://…/v1`` or why not."""
    server = entry.server
    if server is None:
        return "-"
    if server.problem:
        return server.problem
    placement = server.placement
    group = f"\n{_placement_cell(placement)}" if placement else ""
    if server.strays:
        pids = ", ".join(str(p.pid) for p in server.strays[:5])
        held = sum(p.rss_mb for p in server.strays)
        group += (
            f"\n{len(server.strays)} stray engine process(es) of an earlier server "
            f"(pid {pids}; {held} MB): `dflashops launch` or `stop` ends them"
        )
    if not server.running:
        return ("deployed, not running" if server.deployed else "none") + group
    spec = server.method or "none"
    if server.num_speculative_tokens:
        spec += f" k={server.num_speculative_tokens}"
    up = f", up {server.uptime_s // 60}m" if server.uptime_s is not None else ""
    if server.loading:  # a (re)started server: its port listens once the model is loaded
        up = f", loading (up {(server.uptime_s or 0) // 60}m)"
    # a worker serves no HTTP: the endpoint is the head's
    endpoint = server.endpoint or ""
    if placement and placement.role != "head":
        endpoint = f"(head's) {endpoint}" if endpoint else ""
    return f"{server.engine} {server.engine_version} {spec}{up}\n{endpoint}" + group


def _render_status(entries: list[StatusRow]) -> None:
    from rich.table import Table

    table = Table()
    for column in ("container", "vmid", "node", "state", "address", "server", "note"):
        table.add_column(column, overflow="fold")
    for e in entries:
        note = e.note or (f"lock {e.lock}" if e.lock else "")
        table.add_row(
            e.name,
            str(e.vmid or "-"),
            e.node,
            e.state,
            e.address or "-",
            _server_cell(e),
            note,
        )
    _console().print(table)
